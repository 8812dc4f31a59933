"""results.csv and results.json from the store's rows (the latest revision of every photo).

The columns are a public contract (docs/REPORT_JSON.md, "The batch document"): new columns are
only ever added at the end, never renamed, removed or moved.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from pathlib import Path

CSV_COLUMNS = ("file", "player", "table", "template", "game", "level", "verdict", "score",
               "claimed", "difference", "findings", "review", "corrections", "revision",
               "error_code", "error", "seconds", "sha256",
               # added with `sheetcheck batch fix`: what a person corrected, who, when
               "corrected", "corrected_by", "corrected_at")

#: Order in which sheets are listed: what a person must act on first.
VERDICT_ORDER = {"NEEDS REVIEW": 0, "DISCREPANCY": 1, "ERROR": 2, "OK": 3}


def sort_rows(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (VERDICT_ORDER.get(r.get("verdict"), 9),
                                       r.get("file") or ""))


def _csv_safe(v) -> str:
    """Text for a spreadsheet cell; a leading = + - @ would run as a formula in Excel."""
    s = "" if v is None else str(v)
    if s and s[0] in "=+-@\t\r" and not _is_number(s):
        s = "'" + s
    return s


def _is_number(s: str) -> bool:
    try:
        float(s)
        return True
    except ValueError:
        return False


def utc_time(t: float | None) -> str | None:
    """``2026-11-30T08:15:02Z`` for a Unix time (None stays None)."""
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def correction_log(r: dict) -> list[dict]:
    """The row's corrections, each with ``revision``, ``by`` and ``at`` (Unix time) when known.

    Revisions stored before corrections carried these (or by ``correct_result`` callers that
    did not say who) give ``by`` None; ``at`` then falls back to the row's own time.
    """
    out = []
    for c in r.get("corrections") or []:
        out.append({"region": c["region"], "read": c.get("read"), "mark": c["mark"],
                    "revision": c.get("revision", r.get("revision")), "by": c.get("by"),
                    "at": c.get("at", r.get("created_at"))})
    return out


def summary_row(r: dict) -> dict:
    rep = r.get("report") or {}
    log = correction_log(r)
    return {
        "file": r["file"], "player": r.get("player"), "table": r.get("table_name"),
        "template": r.get("template"), "game": r.get("game"), "level": r.get("level"),
        "verdict": r.get("verdict"), "score": r.get("score"), "claimed": r.get("claimed"),
        "difference": (rep.get("total") or {}).get("difference"),
        "findings": len(r.get("findings") or []),
        "review": " ".join(u["region"] for u in rep.get("review", [])),
        "corrections": len(r.get("corrections") or []), "revision": r.get("revision"),
        "error_code": r.get("error_code"), "error": r.get("error"),
        "seconds": round((r.get("timings") or {}).get("job", 0.0), 3), "sha256": r["sha256"],
        "corrected": " ".join(f"{c['region']}:{c['read']}>{c['mark']}" for c in log),
        "corrected_by": " ".join(dict.fromkeys(c["by"] for c in log if c["by"])),
        "corrected_at": utc_time(max((c["at"] for c in log if c["at"] is not None), default=None)),
    }


def write_exports(rows: list[dict], out: str | Path) -> None:
    """Write results.csv (one line per photo) and results.json (every report in full)."""
    out = Path(out)
    rows = sort_rows(rows)
    buf = io.StringIO()
    w = csv.DictWriter(buf, CSV_COLUMNS, lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_safe(v) for k, v in summary_row(r).items()})
    _write_text(out / "results.csv", buf.getvalue())
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("verdict") or "ERROR"] = counts.get(r.get("verdict") or "ERROR", 0) + 1
    doc = {"format": "sheetcheck.batch/1", "counts": counts,
           "results": [{**summary_row(r), "correction_log": [
               {**c, "at": utc_time(c["at"])} for c in correction_log(r)],
               "report": r.get("report")} for r in rows]}
    _write_text(out / "results.json", json.dumps(doc, indent=1, sort_keys=False) + "\n")


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
