"""Stored audits for the web service: append-only, one revision per correction.

SQLite by default (a file path); any SQL database SQLAlchemy speaks by URL where a league needs
one (``postgresql+psycopg://...``). An audit is the photo (its bytes and hash) and a list of
revisions; revision 1 is the checker's own report, each later revision records a person's
corrections and the report they produce. Nothing is ever updated or deleted.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from sheetcheck.errors import SheetcheckError

metadata = sa.MetaData()

audits_table = sa.Table(
    "audits", metadata,
    sa.Column("id", sa.String(32), primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("filename", sa.Text, nullable=True),
    sa.Column("photo_sha256", sa.String(64), nullable=False, index=True),
    sa.Column("photo", sa.LargeBinary, nullable=False),
    sa.Column("template", sa.String(64), nullable=True),
)

revisions_table = sa.Table(
    "audit_revisions", metadata,
    sa.Column("audit_id", sa.String(32), sa.ForeignKey("audits.id"), primary_key=True),
    sa.Column("revision", sa.Integer, primary_key=True),
    sa.Column("created_at", sa.Float, nullable=False),
    sa.Column("corrections", sa.Text, nullable=False),   # JSON {region_id: mark}
    sa.Column("report", sa.Text, nullable=False),        # JSON report
    sa.Column("overlay_png", sa.LargeBinary, nullable=True),
    sa.Column("note", sa.Text, nullable=True),
)


class AuditNotFoundError(SheetcheckError):
    code = "audit_not_found"
    exit_code = 51
    http_status = 404


@dataclass(frozen=True)
class StoredRevision:
    audit_id: str
    revision: int
    created_at: float
    corrections: dict[str, str]
    report: dict[str, Any]
    has_overlay: bool


def database_url(value: str) -> str:
    """A SQLAlchemy URL from a setting that may be a plain file path (SQLite)."""
    return value if "://" in value else f"sqlite:///{value}"


class AuditStore:
    """Append-only store of audits and their revisions."""

    def __init__(self, url_or_path: str):
        url = database_url(url_or_path)
        kwargs: dict[str, Any] = {}
        if url.startswith("sqlite"):
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": 30}
        self.engine = sa.create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            @sa.event.listens_for(self.engine, "connect")
            def _pragmas(conn, _record):  # WAL: readers never block the writer
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA foreign_keys=ON")
                cur.close()
        metadata.create_all(self.engine)

    def create(self, *, photo: bytes, filename: str | None, template: str | None,
               report: dict, overlay_png: bytes | None) -> StoredRevision:
        """Store a new audit with its first revision (the checker's report); returns it."""
        audit_id = secrets.token_hex(8)
        now = time.time()
        with self.engine.begin() as conn:
            conn.execute(audits_table.insert().values(
                id=audit_id, created_at=now, filename=filename,
                photo_sha256=hashlib.sha256(photo).hexdigest(), photo=photo, template=template))
            conn.execute(revisions_table.insert().values(
                audit_id=audit_id, revision=1, created_at=now, corrections="{}",
                report=json.dumps(report), overlay_png=overlay_png, note=None))
        return StoredRevision(audit_id, 1, now, {}, report, overlay_png is not None)

    def add_revision(self, audit_id: str, *, corrections: dict[str, str], report: dict,
                     overlay_png: bytes | None, note: str | None = None) -> StoredRevision:
        """Append a revision (never overwrites an earlier one)."""
        now = time.time()
        with self.engine.begin() as conn:
            self._require(conn, audit_id)
            last = conn.execute(sa.select(sa.func.max(revisions_table.c.revision))
                                .where(revisions_table.c.audit_id == audit_id)).scalar_one()
            rev = int(last) + 1
            conn.execute(revisions_table.insert().values(
                audit_id=audit_id, revision=rev, created_at=now,
                corrections=json.dumps(corrections, sort_keys=True), report=json.dumps(report),
                overlay_png=overlay_png, note=note))
        return StoredRevision(audit_id, rev, now, dict(corrections), report, overlay_png is not None)

    def _require(self, conn, audit_id: str):
        row = conn.execute(sa.select(audits_table.c.id, audits_table.c.filename,
                                     audits_table.c.created_at, audits_table.c.template)
                           .where(audits_table.c.id == audit_id)).first()
        if row is None:
            raise AuditNotFoundError(f"no stored audit with id {audit_id!r}.",
                                     hint="Check the link; audit ids are 16 hex digits.")
        return row

    def revisions(self, audit_id: str) -> list[StoredRevision]:
        with self.engine.connect() as conn:
            self._require(conn, audit_id)
            rows = conn.execute(sa.select(revisions_table.c.audit_id, revisions_table.c.revision,
                                          revisions_table.c.created_at, revisions_table.c.corrections,
                                          revisions_table.c.report,
                                          (revisions_table.c.overlay_png.is_not(None)).label("ov"))
                                .where(revisions_table.c.audit_id == audit_id)
                                .order_by(revisions_table.c.revision)).all()
        return [StoredRevision(r.audit_id, r.revision, r.created_at, json.loads(r.corrections),
                               json.loads(r.report), bool(r.ov)) for r in rows]

    def latest(self, audit_id: str) -> StoredRevision:
        return self.revisions(audit_id)[-1]

    def info(self, audit_id: str) -> dict:
        with self.engine.connect() as conn:
            row = self._require(conn, audit_id)
        return {"id": row.id, "filename": row.filename, "created_at": row.created_at,
                "template": row.template}

    def photo(self, audit_id: str) -> bytes:
        with self.engine.connect() as conn:
            self._require(conn, audit_id)
            return conn.execute(sa.select(audits_table.c.photo)
                                .where(audits_table.c.id == audit_id)).scalar_one()

    def overlay(self, audit_id: str, revision: int | None = None) -> bytes | None:
        with self.engine.connect() as conn:
            self._require(conn, audit_id)
            q = sa.select(revisions_table.c.overlay_png).where(revisions_table.c.audit_id == audit_id)
            if revision is not None:
                q = q.where(revisions_table.c.revision == revision)
            q = q.order_by(revisions_table.c.revision.desc()).limit(1)
            return conn.execute(q).scalar()
