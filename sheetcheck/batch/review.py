"""What an organiser needs to settle a batch's doubtful sheets: views of the store, as text or JSON.

``sheetcheck batch show REPORT_DIR`` lists the sheets by verdict (what needs a person first),
each NEEDS REVIEW sheet with the regions to look at and what each plausible reading would give;
``sheetcheck batch show REPORT_DIR PHOTO`` gives one photo's revisions and corrections;
``sheetcheck batch fix`` prints :func:`format_fix`. The views are plain dicts built from store
rows (:func:`sheet_view`, :func:`photo_view`), so the text and ``--json`` say the same thing.
"""

from __future__ import annotations

from pathlib import Path

from sheetcheck.batch.export import VERDICT_ORDER, correction_log, sort_rows, utc_time
from sheetcheck.batch.html import latest_overlay
from sheetcheck.report import percent

#: In the list of every sheet, at most this many review regions are printed per sheet (a sheet
#: the reader could hardly read can have a hundred; ``show REPORT_DIR PHOTO`` prints them all).
LIST_REVIEW_LIMIT = 12


def _review_view(u: dict) -> dict:
    """One region to review: the reading, and what each plausible other reading would give."""
    return {"region": u["region"], "read": u["read"], "confidence": u["confidence"],
            "together": list(u.get("together") or []),
            "evidence_for": list(u.get("evidence_for") or []),
            "reason": u.get("reason") or "",
            "alternatives": [{"mark": a["mark"], "rules_total": a["rules_total"],
                              "claimed_total": a["claimed_total"], "verdict": a["verdict"],
                              "changes": a["changes"]}
                             for a in u["alternatives"] if a.get("error") is None]}


def sheet_view(r: dict, out: str | Path) -> dict:
    """One sheet's latest revision as the organiser sees it in the list."""
    out = Path(out)
    rep = r.get("report")
    shown = latest_overlay(r, out)
    v = {"file": r["file"], "sha256": r["sha256"], "player": r.get("player"),
         "table": r.get("table_name"), "template": r.get("template"), "verdict": r.get("verdict"),
         "revision": r.get("revision"), "score": r.get("score"), "claimed": r.get("claimed"),
         "overlay": str(out / "overlays" / shown[0]) if shown else None,
         "overlay_revision": shown[1] if shown else None,
         "corrections": correction_log(r)}
    if rep is None:
        v["error_code"], v["error"] = r.get("error_code"), r.get("error")
        v["review"], v["findings"] = [], []
    else:
        v["review"] = [_review_view(u) for u in rep["review"]]
        v["findings"] = [{"rule": f["rule"], "message": f["message"], "severity": f["severity"]}
                         for f in rep["findings"] if f.get("severity") != "note"]
    return v


def list_view(rows: list[dict], out: str | Path) -> dict:
    """Every sheet (latest revisions) grouped by verdict, review first, with counts."""
    groups: dict[str, list[dict]] = {}
    for r in sort_rows(rows):
        groups.setdefault(r.get("verdict") or "ERROR", []).append(sheet_view(r, out))
    return {"folder": str(out), "sheets": len(rows),
            "counts": {v: len(s) for v, s in groups.items()},
            "corrected": sum(1 for r in rows if r.get("revision")),
            "groups": [{"verdict": v, "sheets": s}
                       for v, s in sorted(groups.items(), key=lambda kv: VERDICT_ORDER.get(kv[0], 9))]}


def photo_view(history: list[dict], out: str | Path) -> dict:
    """One photo: every revision (oldest first) and the latest as a sheet view with its report."""
    latest = history[-1]
    v = sheet_view(latest, out)
    revs = []
    for h in history:
        log = correction_log(h)
        revs.append({"revision": h["revision"], "at": utc_time(h.get("created_at")),
                     "verdict": h.get("verdict"), "score": h.get("score"),
                     "claimed": h.get("claimed"),
                     "added": [c for c in log if c["revision"] == h["revision"]]})
    v["revisions"] = revs
    v["report"] = latest.get("report")
    return v


# ---------------------------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------------------------

def _review_line(u: dict) -> str:
    alts = "; ".join(f"if {a['mark']}: rules {a['rules_total']}, claimed {a['claimed_total']}"
                     + (f" ({a['verdict']})" if "verdict" in a["changes"] else "")
                     for a in u["alternatives"] if a["changes"])
    why = []
    if u["together"]:
        why.append(f"together with other doubtful regions it changes {', '.join(u['together'])}")
    if u["evidence_for"]:
        why.append(f"unreadable evidence for {', '.join(u['evidence_for'])}")
    # the report's own reason says it best when no single re-read explains it (a joint reading,
    # a search cut off at its bound); reports stored before it was added have none
    text = alts or u.get("reason") or "; ".join(why)
    return f"{u['region']:<24} read {u['read']} ({percent(u['confidence'])})" + (f"  {text}" if text else "")


def _head(s: dict) -> str:
    who = " ".join(x for x in (f"player {s['player']}" if s["player"] else "",
                               f"table {s['table']}" if s["table"] else "") if x)
    if s["verdict"] == "ERROR":
        first = (s.get("error") or "").splitlines()[0][:160] if s.get("error") else ""
        return f"{s['file']}  {s['sha256'][:12]}  {s.get('error_code')}: {first}"
    if s["verdict"] == "OK":
        tot = f"total {s['score']}"
    else:
        d = (s["claimed"] or 0) - (s["score"] or 0)
        tot = f"rules {s['score']}, claimed {s['claimed']}" + (f" ({d:+d})" if d else "")
    rev = f"  revision {s['revision']}" if s["revision"] else ""
    return f"{s['file']}  {s['sha256'][:12]}  {s['template']}  {tot}{rev}" + (f"  {who}" if who else "")


def _correction_line(c: dict) -> str:
    by = f" by {c['by']}" if c["by"] else ""
    return (f"{c['region']:<24} read {c['read']} -> {c['mark']}  (revision {c['revision']}{by}, "
            f"{utc_time(c['at'])})")


def format_list(view: dict) -> str:
    """The text of ``sheetcheck batch show REPORT_DIR``."""
    counts = ", ".join(f"{g['verdict']} {len(g['sheets'])}" for g in view["groups"])
    lines = [f"{view['folder']}: {view['sheets']} sheets (latest revision of each): "
             f"{counts or 'none yet'}" + (f"; {view['corrected']} corrected by a person"
                                         if view["corrected"] else "")]
    for g in view["groups"]:
        lines.append("")
        what = {"NEEDS REVIEW": ": look at each overlay, then `sheetcheck batch fix REPORT_DIR "
                                "PHOTO REGION=MARK ...`",
                "DISCREPANCY": ": the rules and the sheet's claim differ",
                "ERROR": ": could not be checked"}.get(g["verdict"], "")
        lines.append(f"{g['verdict']} ({len(g['sheets'])}){what}")
        for s in g["sheets"]:
            lines.append("  " + _head(s))
            if s["verdict"] == "NEEDS REVIEW":
                if s["overlay"]:
                    lines.append(f"    overlay  {s['overlay']}")
                for u in s["review"][:LIST_REVIEW_LIMIT]:
                    lines.append("    " + _review_line(u))
                if len(s["review"]) > LIST_REVIEW_LIMIT:
                    lines.append(f"    ... and {len(s['review']) - LIST_REVIEW_LIMIT} more regions "
                                 f"(`sheetcheck batch show {view['folder']} {s['sha256'][:12]}` "
                                 "lists them all)")
            elif s["verdict"] == "DISCREPANCY" and s["findings"]:
                lines.append("    findings: " + ", ".join(dict.fromkeys(f["rule"] for f in s["findings"])))
            for c in s["corrections"]:
                lines.append("    corrected " + _correction_line(c))
    return "\n".join(lines)


def format_photo(view: dict) -> str:
    """The text of ``sheetcheck batch show REPORT_DIR PHOTO``."""
    lines = [_head(view), f"sha256   {view['sha256']}"]
    rep = view.get("report")
    if rep is not None:
        lines.append(f"verdict  {rep['summary']}")
    if view["overlay"]:
        n = view["overlay_revision"]
        lines.append(f"overlay  {view['overlay']}" + (
            f"  (revision {n}: corrections boxed in cyan)" if n else
            "  (the photo as read, revision 0)" if view["revision"] else ""))
    lines += ["", "revisions"]
    for h in view["revisions"]:
        if h["revision"] == 0:
            what = "checked by the reader"
        else:
            by = ", ".join(dict.fromkeys(c["by"] for c in h["added"] if c["by"]))
            what = (f"corrected{' by ' + by if by else ''}: " + (", ".join(
                f"{c['region']} {c['mark']} (confirmed as read)" if c["read"] == c["mark"]
                else f"{c['region']} {c['read']} -> {c['mark']}" for c in h["added"]) or "-"))
        tot = "" if h["score"] is None else f"rules {h['score']}, claimed {h['claimed']}"
        lines.append(f"  {h['revision']:>3}  {h['at']}  {h['verdict']:<12}  {tot:<24}  {what}")
    if view["corrections"]:
        lines += ["", "corrections in force"]
        lines += ["  " + _correction_line(c) for c in view["corrections"]]
    if view["review"]:
        lines += ["", f"to review ({len(view['review'])}): look at the overlay, then "
                      f"`sheetcheck batch fix REPORT_DIR {view['sha256'][:12]} REGION=MARK ...`"]
        lines += ["  " + _review_line(u) for u in view["review"]]
    if view["findings"]:
        lines += ["", "findings"]
        lines += [f"  {f['rule']}: {f['message']}" for f in view["findings"]]
    if view["verdict"] == "ERROR":
        lines += ["", f"error ({view.get('error_code')})", view.get("error") or ""]
    return "\n".join(lines)


def format_fix(outcome, out: str | Path) -> str:
    """The text of ``sheetcheck batch fix``: what changed, the new verdict and totals."""
    b, a = outcome.before, outcome.after
    rep = a["report"]
    head = f"{a['file']} ({rep['template']['id']})"
    if not outcome.stored:
        return (f"{head}: nothing changed: those corrections are already in revision "
                f"{a['revision']}; nothing stored.\nverdict  {rep['summary']}")
    lines = [f"{head}: revision {b['revision']} -> {a['revision']}"]
    for c in outcome.added:
        if c["mark"] == c["was"]:
            lines.append(f"  {c['region']:<24} {c['mark']} (confirmed as read)")
        else:
            lines.append(f"  {c['region']:<24} {c['was']} -> {c['mark']}"
                         + (f"  (the reader said {c['read']})" if c["read"] != c["was"] else ""))
    arrow = (lambda x, y: f"{x} -> {y}" if x != y else f"{y} (unchanged)")
    lines.append(f"verdict  {arrow(b['verdict'], a['verdict'])}")
    lines.append(f"total    rules {arrow(b['score'], a['score'])}; "
                 f"claimed {arrow(b['claimed'], a['claimed'])}")
    lines.append(f"         {rep['summary']}")
    if rep["review"]:
        lines.append(f"still to review ({len(rep['review'])}):")
        lines += ["  " + _review_line(_review_view(u)) for u in rep["review"]]
    if a["verdict"] == "DISCREPANCY":
        lines += [f"  finding {f['rule']}: {f['message']}" for f in rep["findings"]
                  if f.get("severity") != "note"]
    shown = latest_overlay(a, Path(out))
    if shown is not None:
        lines.append(f"overlay  {Path(out) / 'overlays' / shown[0]}"
                     + ("  (corrections boxed in cyan)" if shown[1] else "  (the photo as read)"))
    lines.append(f"report   {Path(out) / 'index.html'} (results.csv, results.json rewritten)")
    return "\n".join(lines)
