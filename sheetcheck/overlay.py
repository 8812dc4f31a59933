"""The overlay picture: the picture that settles a dispute.

The rectified sheet (what the camera saw, in the template frame) is faded a little so that the
annotations stand out; every non-empty region is outlined in the colour it was read as, with a
small letter (O R B G P for the pencils, X for crossed); regions to review are boxed in thick
magenta and numbered R1, R2 ...; regions named by findings are boxed in red and numbered F1, F2
...; corrected regions are boxed in cyan; uncertain regions that did not matter get a thin dashed
grey box. The verdict, the breakdown (rules vs claimed, differing lines in red), the findings and
the review list are drawn in a panel beside the sheet, numbered to match.

This is one of the project's edges (it draws); the stages stay pure.
"""

from __future__ import annotations

import io
from functools import lru_cache
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from sheetcheck.report import Report, Verdict, percent

MARK_RGB = {"orange": (255, 128, 0), "red": (215, 25, 32), "blue": (30, 90, 230),
            "green": (20, 150, 55), "purple": (135, 45, 175), "crossed": (0, 0, 0),
            "written": (90, 90, 90)}
MARK_LETTER = {"orange": "O", "red": "R", "blue": "B", "green": "G", "purple": "P",
               "crossed": "X", "written": "W"}
VERDICT_RGB = {Verdict.OK: (30, 150, 60), Verdict.DISCREPANCY: (210, 70, 20),
               Verdict.NEEDS_REVIEW: (200, 150, 0)}
REVIEW_RGB = (230, 0, 200)
FINDING_RGB = (230, 0, 0)
FIX_RGB = (0, 190, 220)
DEFAULT_DPI = 100.0


@lru_cache(maxsize=32)
def _font(px: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=max(int(px), 6))


def _sheet_image(report: Report, dpi: float) -> np.ndarray:
    """The rectified photo at ``dpi`` (or the clean render when the report has none)."""
    t = report.template
    w = int(round(t.width_mm * dpi / 25.4))
    h = int(round(t.height_mm * dpi / 25.4))
    if report.rectified is not None:
        img = Image.fromarray(np.ascontiguousarray(report.rectified))
        if img.size != (w, h):
            img = img.resize((w, h), Image.Resampling.LANCZOS if dpi < (report.rectified_dpi or dpi)
                             else Image.Resampling.BILINEAR)
        return np.asarray(img.convert("RGB"))
    from calibration.render import render_sheet
    return np.asarray(render_sheet(t, dpi=dpi, markers=True).image)


def draw_overlay(report: Report, *, dpi: float | None = None) -> Image.Image:
    """Draw the overlay.

    Parameters
    ----------
    report : Report
    dpi : float, optional
        Resolution of the sheet part (default: the reading's, else 100).

    Returns
    -------
    PIL.Image.Image
        RGB: the sheet on the left, the explanation panel on the right.
    """
    dpi = float(dpi or report.rectified_dpi or DEFAULT_DPI)
    k = dpi / 25.4                                   # px per mm
    base = _sheet_image(report, dpi).astype(np.float32)
    # fade towards white: the pencil stays visible, the drawn outlines read on top of it
    faded = (base * 0.7 + 255 * 0.3).astype(np.uint8)
    sheet = Image.fromarray(faded)
    d = ImageDraw.Draw(sheet)
    t = report.template
    lw = max(1, round(0.45 * k))                      # ~0.45 mm lines
    small = _font(round(2.6 * k))
    label_font = _font(round(3.2 * k))

    def poly_px(rid):
        return [(float(x) * k, float(y) * k) for x, y in t.region(rid).shape.polygon(segments=24)]

    def bbox_px(rid, pad_mm=0.8):
        x0, y0, x1, y1 = t.region(rid).shape.bbox()
        return [(x0 - pad_mm) * k, (y0 - pad_mm) * k, (x1 + pad_mm) * k, (y1 + pad_mm) * k]

    def tag(xy, text, rgb, font=label_font, right=False):
        # a filled label so the text reads on any background; right=True ends it at x
        x, y = xy
        anchor = "rb" if right else "lb"
        l, tp, r, b = d.textbbox((x, y), text, font=font, anchor=anchor)
        d.rectangle([l - 2, tp - 2, r + 2, b + 1], fill=rgb)
        d.text((x, y), text, font=font, fill=(255, 255, 255), anchor=anchor)

    # 1. every reading in its colour
    for rid, mark in report.marks.items():
        if mark == "empty" or rid not in {r.id for r in t.regions}:
            continue
        rgb = MARK_RGB.get(mark, (60, 60, 60))
        d.line(poly_px(rid) + [poly_px(rid)[0]], fill=rgb, width=lw)
        x0, y0, _, _ = t.region(rid).shape.bbox()
        letter = MARK_LETTER.get(mark, mark[:1].upper())
        d.text((x0 * k + 1, y0 * k + 1), letter, font=small, fill=rgb, anchor="la",
               stroke_width=max(1, lw // 2), stroke_fill=(255, 255, 255))

    # 2. uncertain but did not matter: thin dashed grey
    for u in report.did_not_matter:
        x0, y0, x1, y1 = bbox_px(u.region, 0.5)
        _dashed_rect(d, (x0, y0, x1, y1), (120, 120, 120), max(1, lw // 2), dash=max(3, lw * 3))

    # 3. findings (red, F#), corrections (cyan), review (magenta, R#): most important drawn last
    finding_tags = []
    for i, f in enumerate(report.rule_findings, 1):
        boxes = []
        for rid in f.regions:
            try:
                boxes.append(bbox_px(rid, 1.2))
            except KeyError:  # a finding may name a region of another kind of evidence
                continue
        for box in boxes:
            d.rectangle(box, outline=FINDING_RGB, width=lw + 1)
        if boxes:
            # the number at the top-right of all its regions (review tags sit top-left)
            finding_tags.append(((max(b[2] for b in boxes), min(b[1] for b in boxes)), f"F{i}"))
    for c in report.corrections:
        box = bbox_px(c.region, 1.0)
        d.rectangle(box, outline=FIX_RGB, width=lw + 1)
        tag((box[0], box[3] + 3.5 * k), "fixed", FIX_RGB, small)
    for i, u in enumerate(report.review, 1):
        box = bbox_px(u.region, 1.6)
        d.rectangle(box, outline=REVIEW_RGB, width=lw + 2)
        tag((box[0], box[1]), f"R{i}", REVIEW_RGB)
    for xy, text in finding_tags:
        tag(xy, text, FINDING_RGB, right=True)

    panel = _panel(report, height=sheet.height, k=k)
    out = Image.new("RGB", (sheet.width + panel.width, max(sheet.height, panel.height)), "white")
    out.paste(sheet, (0, 0))
    out.paste(panel, (sheet.width, 0))
    return out


def _dashed_rect(d: ImageDraw.ImageDraw, box, rgb, width, *, dash: int) -> None:
    x0, y0, x1, y1 = box
    for (ax, ay), (bx, by) in (((x0, y0), (x1, y0)), ((x1, y0), (x1, y1)),
                               ((x1, y1), (x0, y1)), ((x0, y1), (x0, y0))):
        n = max(1, int(np.hypot(bx - ax, by - ay) // dash))
        for s in range(0, n, 2):
            t0, t1 = s / n, min(1.0, (s + 1) / n)
            d.line([(ax + (bx - ax) * t0, ay + (by - ay) * t0),
                    (ax + (bx - ax) * t1, ay + (by - ay) * t1)], fill=rgb, width=width)


def _wrap(text: str, font, width: float, d: ImageDraw.ImageDraw) -> list[str]:
    words, lines, cur = text.split(), [], ""
    for w in words:
        trial = f"{cur} {w}".strip()
        if d.textlength(trial, font=font) <= width or not cur:
            cur = trial
        else:
            lines.append(cur)
            cur = w
    if cur:
        lines.append(cur)
    return lines


#: The panel explains at most this many review regions (R1, R2 ... in the report's order);
#: the sheet outlines every one of them. A picture meant to be checked in seconds must not grow
#: into a scroll when the reader flags a hundred regions.
PANEL_REVIEW_LIMIT = 20


def _panel(report: Report, *, height: int, k: float) -> Image.Image:
    """The explanation beside the sheet: verdict, breakdown, findings, review list."""
    fs = max(9, round(3.0 * k))
    font, bold, big = _font(fs), _font(fs + 1), _font(round(fs * 1.6))
    width = max(320, round(110 * k))
    pad = round(fs * 0.8)
    rows: list[tuple] = []                               # (kind, text, colour)
    vcol = VERDICT_RGB[report.verdict]
    a = report.audit
    rows.append(("head", report.verdict.value, vcol))
    rows.append(("text", f"{report.template.id}  level {report.template.level}", (0, 0, 0)))
    if report.photo.get("name"):
        rows.append(("muted", str(report.photo["name"])[-60:], (110, 110, 110)))
    rows.append(("gap",))
    rows.append(("table", ("line", "rules", "claimed"), (0, 0, 0), True))
    rules = {(l.section, l.label): l.points for l in a.rules.lines}
    claimed = {(l.section, l.label): l.points for l in a.claimed.lines}
    for key in list(rules) + [kk for kk in claimed if kk not in rules]:
        r, c = rules.get(key, 0), claimed.get(key, 0)
        rows.append(("table", (key[1], str(r), str(c)), FINDING_RGB if r != c else (0, 0, 0), False))
    rows.append(("table", ("TOTAL", str(a.rules.total), str(a.claimed.total)),
                 FINDING_RGB if a.difference else (0, 0, 0), True))
    if a.difference:
        rows.append(("text", f"the sheet claims {a.difference:+d} against the rules", FINDING_RGB))
    if report.rule_findings:
        rows.append(("gap",))
        rows.append(("bold", "Findings", FINDING_RGB))
        for i, f in enumerate(report.rule_findings, 1):
            eff = f" ({f.effect:+d})" if f.effect else ""
            rows.append(("wrap", f"F{i}{eff}: {f.message}", FINDING_RGB))
    if report.review:
        rows.append(("gap",))
        rows.append(("bold", "Review these regions", REVIEW_RGB))
        for i, u in enumerate(report.review[:PANEL_REVIEW_LIMIT], 1):
            alts = "; ".join(f"if {x.mark}: rules {x.rules_total}, claimed {x.claimed_total}"
                             for x in u.alternatives if x.changes)
            if not alts:    # matters together with others, as evidence, or a search cut off
                alts = u.reason or (f"unreadable, yet evidence for {', '.join(u.evidence_for)}"
                                    if u.evidence_for else "matters together with other regions")
            rows.append(("wrap", f"R{i} {u.region}: read {u.read} ({percent(u.confidence)}); {alts}",
                         REVIEW_RGB))
        if len(report.review) > PANEL_REVIEW_LIMIT:
            rows.append(("wrap", f"... and {len(report.review) - PANEL_REVIEW_LIMIT} more regions to "
                                 "review: all are outlined on the sheet; the report lists them all",
                         REVIEW_RGB))
    if report.corrections:
        rows.append(("gap",))
        rows.append(("bold", "Corrections", FIX_RGB))
        for c in report.corrections:
            rows.append(("wrap", f"{c.region}: {c.read} -> {c.mark}", (0, 120, 150)))
    if report.did_not_matter:
        rows.append(("gap",))
        rows.append(("wrap", f"{len(report.did_not_matter)} uncertain region(s) did not matter "
                             "(dashed grey)", (110, 110, 110)))
    rows.append(("gap",))
    rows.append(("wrap", "letters: O orange R red B blue G green P purple X crossed; "
                         "empty regions are not outlined", (110, 110, 110)))

    # measure, then draw on a panel tall enough
    scratch = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    lh = round(fs * 1.35)
    expanded = []
    for row in rows:
        if row[0] == "wrap":
            expanded += [("text", ln, row[2]) for ln in _wrap(row[1], font, width - 2 * pad, scratch)]
        else:
            expanded.append(row)
    total_h = pad * 2 + sum(round(fs * 2.2) if r[0] == "head" else (lh // 2 if r[0] == "gap" else lh)
                            for r in expanded)
    img = Image.new("RGB", (width, max(height, total_h)), (250, 250, 250))
    d = ImageDraw.Draw(img)
    y = pad
    for row in expanded:
        kind = row[0]
        if kind == "head":
            hh = round(fs * 2.2)
            d.rectangle([0, y - pad // 2, width, y + hh - pad // 2], fill=row[2])
            d.text((pad, y + hh // 2 - pad // 2), row[1], font=big, fill="white", anchor="lm")
            y += hh
        elif kind == "gap":
            y += lh // 2
        elif kind == "table":
            (label, r, c), col, is_bold = row[1], row[2], row[3]
            f = bold if is_bold else font
            label = label if scratch.textlength(label, font=f) < width * 0.62 else label[:38] + "…"
            d.text((pad, y), label, font=f, fill=col)
            d.text((width * 0.80, y), r, font=f, fill=col, anchor="ra")
            d.text((width - pad, y), c, font=f, fill=col, anchor="ra")
            y += lh
        else:
            d.text((pad, y), row[1], font=bold if kind == "bold" else font, fill=row[2])
            y += lh
    return img


def overlay_png_bytes(report: Report, *, dpi: float | None = None) -> bytes:
    """The overlay as PNG bytes (the server and the batch runner store these)."""
    buf = io.BytesIO()
    draw_overlay(report, dpi=dpi).save(buf, "PNG", optimize=False, compress_level=6)
    return buf.getvalue()


def write_overlay(report: Report, path: str | Path, *, dpi: float | None = None) -> Path:
    """Write the overlay PNG to ``path``."""
    from sheetcheck.errors import InputFileError
    path = Path(path)
    try:
        path.write_bytes(overlay_png_bytes(report, dpi=dpi))
    except OSError as e:
        raise InputFileError(f"cannot write the overlay {path}: {e.strerror}.",
                             hint="Choose a writable --overlay path.") from None
    return path
