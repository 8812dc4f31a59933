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

from sheetcheck.errors import InputFileError

SCHEMA_VERSION = 1
DB_NAME = "results.sqlite"

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
        return cls(Path(folder) / DB_NAME)

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

    def add_revision(self, sha256: str, record: dict[str, Any]) -> int:
        """Append a corrected result for a stored photo as its next revision; returns it."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            last = self.db.execute("SELECT MAX(revision), file, player, table_name FROM results "
                                   "WHERE sha256 = ?", (sha256,)).fetchone()
            if last[0] is None:
                raise InputFileError(f"no stored result for photo {sha256[:12]}",
                                     hint="Run the batch on the photo first.")
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
