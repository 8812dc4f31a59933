"""The batch's SQLite store: every result, as it is made, append-only.

One row per (photo content hash, revision). Revision 0 is the checker's own result; a person's
corrections are stored as new revisions (1, 2, ...), never by overwriting. The parent process is
the only writer and commits one transaction per result (WAL mode, synchronous=FULL), so a batch
killed at any moment keeps every result it had received, and a re-run skips the hashes already
stored.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

from sheetcheck.errors import (InputFileError, NotAReportFolderError,  # noqa: F401 (re-exported)
                               PhotoNotInReportError, ReportChangedError)

SCHEMA_VERSION = 1
DB_NAME = "results.sqlite"
#: A photo named by a sha256 prefix needs at least this many hex digits (fewer would match
#: several photos of any sizeable tournament).
MIN_HASH_PREFIX = 6


_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    sha256       TEXT NOT NULL,
    revision     INTEGER NOT NULL DEFAULT 0,
    file         TEXT NOT NULL,
    player       TEXT,
    table_name   TEXT,
    template     TEXT,
    game         TEXT,
    level        INTEGER,
    verdict      TEXT,           -- OK | DISCREPANCY | NEEDS REVIEW | ERROR
    score        INTEGER,        -- total by the rules
    claimed      INTEGER,        -- total the marks claim
    readings     TEXT,           -- JSON {region: mark}
    corrections  TEXT,           -- JSON [{region, read, mark}]
    findings     TEXT,           -- JSON [finding]
    report       TEXT,           -- JSON, the whole sheetcheck.report/1 document
    timings      TEXT,           -- JSON {stage: seconds}
    error_code   TEXT,
    error        TEXT,
    created_at   REAL NOT NULL,
    UNIQUE (sha256, revision)
);
CREATE INDEX IF NOT EXISTS results_verdict ON results (verdict);
"""

COLUMNS = ("id", "sha256", "revision", "file", "player", "table_name", "template", "game",
           "level", "verdict", "score", "claimed", "readings", "corrections", "findings",
           "report", "timings", "error_code", "error", "created_at")
_JSON_COLUMNS = ("readings", "corrections", "findings", "report", "timings")


class Store:
    """The SQLite results store in a report folder.

    Parameters
    ----------
    path : str or Path
        The database file (created with its folder if missing).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        except (OSError, sqlite3.Error) as e:
            raise InputFileError(f"cannot open the results database {self.path}: {e}",
                                 hint="Check that the --out folder is writable.") from None
        self.db.execute("PRAGMA journal_mode=WAL")
        # FULL: a commit survives a power cut, not only a killed process
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(_SCHEMA)
        self.db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))

    @classmethod
    def in_folder(cls, folder: str | Path) -> "Store":
        """The store of a report folder, created when missing (what a batch run writes into)."""
        return cls(Path(folder) / DB_NAME)

    @classmethod
    def open_report(cls, folder: str | Path) -> "Store":
        """The store of an existing report folder; never creates anything.

        Raises
        ------
        NotAReportFolderError
            when ``folder`` is missing, not a folder, or holds no readable batch store.
        """
        folder = Path(folder)
        hint = ("Name the --out folder of a `sheetcheck batch` run (the one that holds "
                "results.sqlite and index.html).")
        if not folder.is_dir():
            what = "does not exist" if not folder.exists() else "is not a folder"
            raise NotAReportFolderError(f"{folder} {what}.", hint=hint)
        path = folder / DB_NAME
        if not path.is_file():
            raise NotAReportFolderError(f"{folder} is not a batch report folder: it has no {DB_NAME}.",
                                        hint=hint)
        try:
            # mode=rw: a path that is not a database must not become an empty one
            db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=rw", uri=True, timeout=30,
                                 isolation_level=None)
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            db.close()
        except sqlite3.Error as e:
            raise NotAReportFolderError(f"{path} is not a readable batch results database: {e}.",
                                        hint=hint) from None
        if "results" not in tables:
            raise NotAReportFolderError(f"{path} is an SQLite database but not a batch's results "
                                        "store (no table 'results').", hint=hint)
        return cls(path)

    def close(self) -> None:
        self.db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- reading ----------------------------------------------------------------------------
    def done_hashes(self) -> set[str]:
        return {r[0] for r in self.db.execute("SELECT DISTINCT sha256 FROM results")}

    def has(self, sha256: str) -> bool:
        return self.db.execute("SELECT 1 FROM results WHERE sha256 = ? LIMIT 1",
                               (sha256,)).fetchone() is not None

    def _row(self, row) -> dict:
        d = dict(zip(COLUMNS, row))
        for k in _JSON_COLUMNS:
            d[k] = json.loads(d[k]) if d[k] is not None else None
        return d

    def rows(self, *, latest: bool = True) -> list[dict]:
        """Every result (only the latest revision per photo when ``latest``), in insertion order."""
        cols = ", ".join(COLUMNS)
        if latest:
            q = (f"SELECT {cols} FROM results r WHERE revision = "
                 f"(SELECT MAX(revision) FROM results WHERE sha256 = r.sha256) ORDER BY id")
        else:
            q = f"SELECT {cols} FROM results ORDER BY id"
        return [self._row(r) for r in self.db.execute(q)]

    def history(self, sha256: str) -> list[dict]:
        cols = ", ".join(COLUMNS)
        return [self._row(r) for r in self.db.execute(
            f"SELECT {cols} FROM results WHERE sha256 = ? ORDER BY revision", (sha256,))]

    def find(self, photo: str) -> str:
        """The sha256 of the one stored photo named ``photo``.

        ``photo`` is a file name as stored (``results.csv``'s ``file``), a full sha256, or a
        prefix of one (at least ``MIN_HASH_PREFIX`` hex digits).

        Raises
        ------
        PhotoNotInReportError
            when nothing matches, or several photos do (the message lists them).
        """
        photo = photo.strip()
        hits = self.db.execute("SELECT DISTINCT sha256, file FROM results WHERE file = ? "
                               "ORDER BY id", (photo,)).fetchall()
        low = photo.lower()
        if not hits and len(low) >= MIN_HASH_PREFIX and all(c in "0123456789abcdef" for c in low):
            # GLOB, not LIKE: case-sensitive and no '_' wildcard; the hash is lower-case hex
            hits = self.db.execute("SELECT DISTINCT sha256, file FROM results WHERE sha256 GLOB ? "
                                   "ORDER BY id", (low + "*",)).fetchall()
        shas = list(dict.fromkeys(h[0] for h in hits))
        if len(shas) == 1:
            return shas[0]
        if len(shas) > 1:
            listed = "; ".join(f"{sha[:12]} ({f})" for sha, f in dict(hits).items())
            raise PhotoNotInReportError(
                f"{photo!r} names {len(shas)} stored photos: {listed}.",
                hint="Name it by a longer sha256 prefix (results.csv, column sha256).")
        import difflib
        files = [r[0] for r in self.db.execute("SELECT DISTINCT file FROM results")]
        near = difflib.get_close_matches(photo, files, n=3, cutoff=0.6)
        near += [f for f in files if f.endswith("/" + photo) and f not in near][:3]
        short = (0 < len(low) < MIN_HASH_PREFIX and all(c in "0123456789abcdef" for c in low))
        raise PhotoNotInReportError(
            f"no photo {photo!r} in {self.path.parent}"
            + (f" (a sha256 prefix needs at least {MIN_HASH_PREFIX} hex digits)" if short else "")
            + (f" (did you mean {', '.join(repr(f) for f in near)}?)." if near else "."),
            hint=f"Name the photo as in results.csv (column file) or by a sha256 prefix of at "
                 f"least {MIN_HASH_PREFIX} hex digits; `sheetcheck batch show "
                 f"{self.path.parent}` lists them.")

    def latest(self, sha256: str) -> dict | None:
        """The latest revision of one stored photo (None when it is not stored)."""
        cols = ", ".join(COLUMNS)
        row = self.db.execute(f"SELECT {cols} FROM results WHERE sha256 = ? "
                              f"ORDER BY revision DESC LIMIT 1", (sha256,)).fetchone()
        return None if row is None else self._row(row)

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(DISTINCT sha256) FROM results").fetchone()[0]

    # -- writing ----------------------------------------------------------------------------
    def add(self, record: dict[str, Any], *, revision: int = 0) -> bool:
        """Store one result in its own transaction. Returns False when (hash, revision) exists.

        ``record`` holds ``sha256`` and ``file`` and any of the other columns; JSON columns are
        given as Python values.
        """
        vals = {k: record.get(k) for k in COLUMNS if k not in ("id", "created_at", "revision")}
        if not vals.get("sha256") or not vals.get("file"):
            raise ValueError("a result needs sha256 and file")
        for k in _JSON_COLUMNS:
            if vals[k] is not None:
                vals[k] = json.dumps(vals[k], sort_keys=True)
        vals["revision"] = revision
        vals["created_at"] = time.time()
        keys = list(vals)
        with self.db:  # one transaction per result
            self.db.execute("BEGIN IMMEDIATE")
            cur = self.db.execute(
                f"INSERT OR IGNORE INTO results ({', '.join(keys)}) VALUES "
                f"({', '.join('?' for _ in keys)})", [vals[k] for k in keys])
        return cur.rowcount == 1

    def add_revision(self, sha256: str, record: dict[str, Any], *,
                     base_revision: int | None = None) -> int:
        """Append a corrected result for a stored photo as its next revision; returns it.

        With ``base_revision`` (the revision the correction was made from), the write is refused
        when another revision was stored meanwhile: two people correcting one sheet at once must
        not silently drop each other's corrections.
        """
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            last = self.db.execute("SELECT revision, file, player, table_name FROM results "
                                   "WHERE sha256 = ? ORDER BY revision DESC LIMIT 1",
                                   (sha256,)).fetchone()
            if last is None:
                raise PhotoNotInReportError(f"no stored result for photo {sha256[:12]}.",
                                            hint="Run the batch on the photo first.")
            if base_revision is not None and last[0] != base_revision:
                raise ReportChangedError(
                    f"{last[1]!r} was corrected by someone else meanwhile (now revision "
                    f"{last[0]}, this correction was made on revision {base_revision}); "
                    "nothing was stored.", hint="Look at the sheet again and repeat the fix.")
            rev = last[0] + 1
            rec = {"file": last[1], "player": last[2], "table_name": last[3], **record,
                   "sha256": sha256}
            vals = {k: rec.get(k) for k in COLUMNS if k not in ("id", "created_at", "revision")}
            for k in _JSON_COLUMNS:
                if vals[k] is not None:
                    vals[k] = json.dumps(vals[k], sort_keys=True)
            vals["revision"], vals["created_at"] = rev, time.time()
            keys = list(vals)
            self.db.execute(f"INSERT INTO results ({', '.join(keys)}) VALUES "
                            f"({', '.join('?' for _ in keys)})", [vals[k] for k in keys])
        return rev
