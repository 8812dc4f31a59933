"""The batch's static index.html: what needs a person first, then everything else.

Every text that comes from outside (file names, player names from a manifest, messages that quote
them) goes through :func:`html.escape`; pictures are referenced by content hash, never by the
photo's file name.
"""

from __future__ import annotations

import html
import os
import shlex
from pathlib import Path

from sheetcheck.batch.export import VERDICT_ORDER, correction_log, sort_rows, utc_time
from sheetcheck.report import percent


def asset_name(sha256: str) -> str:
    """File-name stem of a photo's pictures (hex hash; error items' 'name:' prefix made safe)."""
    return "".join(c if c.isalnum() else "-" for c in sha256)


def revision_overlay_name(sha256: str, revision: int) -> str:
    """File name (in overlays/) of a photo's overlay: revision 0 as checked, later ones corrected."""
    return f"{asset_name(sha256)}.png" if not revision else f"{asset_name(sha256)}.rev{revision}.png"


def latest_overlay(r: dict, out: Path) -> tuple[str, int] | None:
    """The newest overlay picture of a row's photo: (name in overlays/, its revision), or None.

    A corrected revision has its own overlay (corrections boxed) when the batch kept the
    rectified sheet; otherwise the page falls back to the picture of the photo as read.
    """
    rev = int(r.get("revision") or 0)
    for n in (rev, 0) if rev else (0,):
        name = revision_overlay_name(r["sha256"], n)
        if (out / "overlays" / name).exists():
            return name, n
    return None


def _e(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5em;color:#222}
h1{margin:0 0 .3em} .counts span{display:inline-block;margin-right:1em;padding:.2em .6em;border-radius:4px}
.v-OK{background:#d8f5d8}.v-DISCREPANCY{background:#ffd9c7}.v-NEEDS-REVIEW{background:#fff1a8}.v-ERROR{background:#f3c4c4}
.sheet{border:1px solid #ccc;border-radius:6px;margin:1em 0;padding:.8em;display:flex;gap:1em;flex-wrap:wrap}
.sheet img.thumb{max-width:240px;max-height:240px;border:1px solid #ddd}
.sheet img.overlay{max-width:520px;border:1px solid #ddd}
table{border-collapse:collapse;font-size:.9em} td,th{padding:.1em .5em;border-bottom:1px solid #eee;text-align:left}
td.n{text-align:right} .diff{color:#b30000;font-weight:bold} .muted{color:#777} pre{white-space:pre-wrap;max-width:60em}
.fixed{background:#d9f3fb} code.cmd{display:block;background:#f4f4f4;padding:.3em;max-width:60em;overflow-wrap:anywhere}
"""


def _vclass(v: str | None) -> str:
    return "v-" + (v or "ERROR").replace(" ", "-")


def _breakdown(rep: dict) -> str:
    rules = {(l["section"], l["label"]): l["points"] for l in rep["breakdown"]["rules"]["lines"]}
    claimed = {(l["section"], l["label"]): l["points"] for l in rep["breakdown"]["claimed"]["lines"]}
    keys = list(rules) + [k for k in claimed if k not in rules]
    rows = []
    for k in keys:
        r, c = rules.get(k, 0), claimed.get(k, 0)
        cls = ' class="diff"' if r != c else ""
        rows.append(f"<tr{cls}><td>{_e(k[0])}</td><td>{_e(k[1])}</td>"
                    f"<td class=n>{r}</td><td class=n>{c}</td></tr>")
    t = rep["total"]
    rows.append(f"<tr><th colspan=2>total</th><th class=n>{t['rules']}</th>"
                f"<th class=n>{t['claimed']}</th></tr>")
    return ("<table><tr><th>section</th><th>line</th><th>rules</th><th>claimed</th></tr>"
            + "".join(rows) + "</table>")


def _sheet(r: dict, out: Path) -> str:
    a = asset_name(r["sha256"])
    thumb = out / "thumbs" / f"{a}.jpg"
    rep = r.get("report")
    parts = [f'<div class="sheet" id="s-{_e(a[:16])}">']
    left = [f'<div><b class="{_vclass(r.get("verdict"))}">{_e(r.get("verdict"))}</b> '
            f'<b>{_e(r["file"])}</b><br>player {_e(r.get("player") or "?")}'
            + (f", table {_e(r['table_name'])}" if r.get("table_name") else "")]
    if r.get("revision"):
        log = correction_log(r)
        who = ", ".join(dict.fromkeys(c["by"] for c in log if c["by"]))
        left.append(f'<br><span class="fixed">revision {int(r["revision"])}: corrected'
                    + (f" by {_e(who)}" if who else "")
                    + f', {_e(utc_time(r.get("created_at")))}</span>')
    if thumb.exists():
        left.append(f'<br><a href="thumbs/{a}.jpg"><img class="thumb" src="thumbs/{a}.jpg" '
                    f'alt="photo"></a>')
    left.append("</div>")
    parts += left
    if rep is None:
        parts.append(f"<div><b>error</b> ({_e(r.get('error_code'))})<pre>{_e(r.get('error'))}</pre></div>")
    else:
        mid = [f"<div><div>{_e(rep['summary'])}</div>", _breakdown(rep)]
        if rep["findings"]:
            mid.append("<p><b>findings</b></p><ul>" + "".join(
                f"<li>{_e(f['rule'])}{' (%+d)' % f['effect'] if f.get('effect') else ''}: "
                f"{_e(f['message'])} <span class=muted>{_e(', '.join(f['regions'][:8]))}</span></li>"
                for f in rep["findings"]) + "</ul>")
        if rep["review"]:
            mid.append("<p><b>review these regions</b></p><ul>" + "".join(
                f"<li>{_e(u['region'])}: read {_e(u['read'])} ({percent(u['confidence'])}); "
                + "; ".join(f"if {_e(x['mark'])}: rules {x['rules_total']}, claimed {x['claimed_total']}"
                            for x in u["alternatives"] if x["changes"])
                + ("" if any(x["changes"] for x in u["alternatives"]) else _e(u.get("reason") or (
                    f"together with the others it changes {', '.join(u.get('together', []))}"
                    if u.get("together") else
                    f"could not be read, yet it is evidence for {', '.join(u['evidence_for'])}"
                    if u.get("evidence_for") else ""))) + "</li>"
                for u in rep["review"]) + "</ul>")
        if rep["uncertain_did_not_matter"]:
            mid.append("<p class=muted>uncertain but did not matter: " + _e(", ".join(
                u["region"] for u in rep["uncertain_did_not_matter"])) + "</p>")
        if rep["corrections"]:
            mid.append("<p><b>corrections</b></p><table class=fixed><tr><th>region</th>"
                       "<th>read</th><th>corrected to</th><th>revision</th><th>by</th>"
                       "<th>when (UTC)</th></tr>" + "".join(
                           f"<tr><td>{_e(c['region'])}</td><td>{_e(c['read'])}</td>"
                           f"<td><b>{_e(c['mark'])}</b></td><td class=n>{_e(c['revision'])}</td>"
                           f"<td>{_e(c['by'] or '')}</td><td>{_e(utc_time(c['at']))}</td></tr>"
                           for c in correction_log(r)) + "</table>")
        if rep["review"]:
            # what the organiser types once they have looked at the overlay
            cmd = (f"sheetcheck batch fix {shlex.quote(str(out.resolve()))} "
                   f"{shlex.quote(r['file'])} "
                   + " ".join(f"{u['region']}=MARK" for u in rep["review"][:6])
                   + (" ..." if len(rep["review"]) > 6 else ""))
            mid.append(f"<p class=muted>settle it with</p><code class=cmd>{_e(cmd)}</code>")
        mid.append("</div>")
        parts += mid
        shown = latest_overlay(r, out)
        if shown is not None:
            name, n = shown
            if n:
                caption = (f"<br><span class=muted>overlay of revision {n}: corrected regions "
                           f"boxed in cyan; <a href=\"overlays/{a}.png\">the photo as read "
                           f"(revision 0)</a></span>")
            elif rep["corrections"]:
                caption = ("<br><span class=muted>overlay of the photo as read (revision 0): the "
                           "corrections above are not drawn on it</span>")
            else:
                caption = ""
            parts.append(f'<div><a href="overlays/{name}"><img class="overlay" '
                         f'src="overlays/{name}" alt="overlay" loading="lazy"></a>{caption}</div>')
    parts.append("</div>")
    return "\n".join(parts)


def _rankings(rows: list[dict]) -> str:
    games: dict[str, list[dict]] = {}
    for r in rows:
        if r.get("report") is not None:
            games.setdefault(f"{r['game']} level {r['level']}", []).append(r)
    out = []
    for g in sorted(games):
        rs = sorted(games[g], key=lambda r: (-(r["score"] or 0), r["file"]))
        body = "".join(
            f"<tr><td class=n>{i}</td><td>{_e(r.get('player') or '?')}</td>"
            f"<td>{_e(r.get('table_name') or '')}</td><td class=n>{r['score']}</td>"
            f"<td class=n>{r['claimed']}</td><td class=\"{_vclass(r['verdict'])}\">{_e(r['verdict'])}</td>"
            f"<td><a href=\"#s-{_e(asset_name(r['sha256'])[:16])}\">{_e(r['file'])}</a></td></tr>"
            for i, r in enumerate(rs, 1))
        out.append(f"<h3>{_e(g)}</h3><table><tr><th>#</th><th>player</th><th>table</th>"
                   f"<th>score (rules)</th><th>claimed</th><th>verdict</th><th>photo</th></tr>"
                   f"{body}</table>")
    return "\n".join(out) or "<p>no checked sheets yet</p>"


def render_index(rows: list[dict], out: str | Path, *, title: str = "sheetcheck batch") -> str:
    """The page's HTML for the store's rows (pictures looked up in ``out``)."""
    out = Path(out)
    rows = sort_rows(rows)
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.get("verdict") or "ERROR"] = counts.get(r.get("verdict") or "ERROR", 0) + 1
    count_html = "".join(f'<span class="{_vclass(v)}">{_e(v)}: {counts[v]}</span>'
                         for v in sorted(counts, key=lambda v: VERDICT_ORDER.get(v, 9)))
    corrected = sum(1 for r in rows if r.get("revision"))
    if corrected:
        count_html += f'<span class="fixed">corrected by a person: {corrected}</span>'
    count_html = f"{len(rows)} sheets (latest revision of each): {count_html}"
    return (f"<!doctype html>\n<html><head><meta charset=utf-8><title>{_e(title)}</title>"
            f"<style>{_CSS}</style></head><body>\n<h1>{_e(title)}</h1>"
            f"<div class=counts>{count_html}</div>"
            f"<p><a href=results.csv>results.csv</a> · <a href=results.json>results.json</a></p>"
            f"<h2>Rankings (score by the rules)</h2>{_rankings(rows)}"
            f"<h2>Sheets (review and discrepancies first)</h2>\n"
            + "\n".join(_sheet(r, out) for r in rows) + "\n</body></html>\n")


def write_index(rows: list[dict], out: str | Path, **kw) -> Path:
    out = Path(out)
    path = out / "index.html"
    tmp = path.with_name("index.html.tmp")
    tmp.write_text(render_index(rows, out, **kw), encoding="utf-8")
    os.replace(tmp, path)
    return path
