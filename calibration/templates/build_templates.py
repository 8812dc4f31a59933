"""Generate the six house-edition sheet templates (Pick a Pen: Crypts 1-3, Reefs 1-3).

The JSON files next to this script are the source of truth the program loads; this script is how
they are made, so that geometry stays consistent (one pitch, one margin, one rule for connection
segments) and a change is made once. ``tests/test_templates_bundled.py`` regenerates them in a
temporary directory and fails if the bundled JSON differs, so nobody edits one without the other.

Run from the repository root::

    .venv/bin/python calibration/templates/build_templates.py            # rewrite the bundled JSON
    .venv/bin/python calibration/templates/build_templates.py --out DIR  # write elsewhere

Design choices (sizes, values, why) are in ``calibration/templates/DESIGN.md``; the format and
region-id conventions are in ``docs/TEMPLATES.md``. All geometry is in mm on an A4 landscape
page (297 x 210 mm), origin top-left, x right, y down.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

HERE = Path(__file__).resolve().parent

PAGE_W, PAGE_H = 297.0, 210.0
COLOURS = ("orange", "red", "blue", "green", "purple")
PENCIL_MARKS = ["empty", *COLOURS, "crossed"]
CONNECTION_MARKS = ["empty", *COLOURS]
FIELD_MARKS = ["empty", "written"]
STRUCTURE_MARKS = ["empty"]

# Printing colours for artwork (legend dots, row headers). The reader never relies on them.
INK = {"orange": "#f08c00", "red": "#d62828", "blue": "#1f5fbf", "green": "#2a9d3a",
       "purple": "#7b3fa0", "grey": "#c8c8c8", "text": "#000000", "soft": "#555555"}
GREY_FILL = "#c8c8c8"  # light enough that a pencil mark over it stays readable

MARKER_SIZE = 14.0
MARKER_INSET = 8.0  # marker top-left at 8 mm from the page edges: a quiet zone around each


def r3(v: float) -> float:
    """Round to 0.001 mm so the JSON is stable and free of float noise."""
    v = round(float(v), 3)
    return 0.0 if v == 0 else v


# ------------------------------------------------------------------------------------------
# small builders
# ------------------------------------------------------------------------------------------

def rect(x, y, w, h):
    return {"type": "rect", "x": r3(x), "y": r3(y), "w": r3(w), "h": r3(h)}


def circle(cx, cy, r):
    return {"type": "circle", "cx": r3(cx), "cy": r3(cy), "r": r3(r)}


def polygon(points):
    return {"type": "polygon", "points": [[r3(x), r3(y)] for x, y in points]}


def segment(p1, p2, width):
    return {"type": "segment", "p1": [r3(p1[0]), r3(p1[1])], "p2": [r3(p2[0]), r3(p2[1])],
            "width": r3(width)}


def region(rid, kind, shape, marks, meaning, *, readable=True, print_=None):
    d = {"id": rid, "kind": kind, "shape": shape, "marks": list(marks), "meaning": meaning}
    if not readable:
        d["readable"] = False
    d["print"] = dict(print_ or {})
    return d


def text(x, y, s, *, size=3.0, anchor="la", bold=False, color="#000000"):
    return {"type": "text", "x": r3(x), "y": r3(y), "text": s, "size": r3(size),
            "anchor": anchor, "bold": bold, "color": color}


def glyph(name, cx, cy, size, *, color="#000000", width=0.3):
    return {"type": "glyph", "glyph": name, "cx": r3(cx), "cy": r3(cy), "size": r3(size),
            "color": color, "width": r3(width)}


def art_rect(x, y, w, h, *, width=0.3, color="#000000", fill=None):
    return {"type": "rect", "x": r3(x), "y": r3(y), "w": r3(w), "h": r3(h), "width": r3(width),
            "color": color, "fill": fill}


def art_circle(cx, cy, r, *, width=0.3, color="#000000", fill=None):
    return {"type": "circle", "cx": r3(cx), "cy": r3(cy), "r": r3(r), "width": r3(width),
            "color": color, "fill": fill}


def art_line(p1, p2, *, width=0.3, color="#000000", dash=None):
    return {"type": "line", "p1": [r3(p1[0]), r3(p1[1])], "p2": [r3(p2[0]), r3(p2[1])],
            "width": r3(width), "color": color, "dash": dash}


def star_points(cx, cy, r_out, r_in):
    """Five-pointed star, one tip straight up."""
    pts = []
    for i in range(10):
        a = -math.pi / 2 + i * math.pi / 5
        r = r_out if i % 2 == 0 else r_in
        pts.append((cx + r * math.cos(a), cy + r * math.sin(a)))
    return pts


def markers(first_id):
    s, m = MARKER_SIZE, MARKER_INSET
    pos = {"top_left": (m, m), "top_right": (PAGE_W - m - s, m),
           "bottom_right": (PAGE_W - m - s, PAGE_H - m - s), "bottom_left": (m, PAGE_H - m - s)}
    items = [{"id": first_id + i, "corner": c, "x": r3(pos[c][0]), "y": r3(pos[c][1]), "size": s}
             for i, c in enumerate(("top_left", "top_right", "bottom_right", "bottom_left"))]
    return {"dictionary": "DICT_4X4_50", "items": items}


def swatch_strip(x, y, *, vertical):
    """The colour-calibration strip: five 10 x 7 mm swatches with the colour names beside them,
    inside a dashed frame with the instruction, so it cannot be mistaken for game regions."""
    regions, art = [], []
    if vertical:
        fw, fh = 44.0, 72.0
        art.append(art_rect(x, y, fw, fh, width=0.3, color=INK["soft"]))
        art.append(text(x + fw / 2, y + 4.0, "Colour each box", size=2.8, anchor="mm"))
        art.append(text(x + fw / 2, y + 8.0, "with its pencil", size=2.8, anchor="mm"))
        for i, c in enumerate(COLOURS):
            sx, sy = x + fw - 16.0, y + 13.0 + i * 11.5
            regions.append(region(f"swatch.{c}", "swatch", rect(sx, sy, 10, 7), ["empty", c],
                                  {"colour": c}, print_={"outline": "black"}))
            art.append(text(sx - 3.0, sy + 3.5, c, size=3.0, anchor="rm"))
    else:
        fw, fh = 128.0, 20.0
        art.append(art_rect(x, y, fw, fh, width=0.3, color=INK["soft"]))
        art.append(text(x + 3.0, y + 4.0, "Colour each box with its pencil", size=2.8,
                        anchor="lm"))
        for i, c in enumerate(COLOURS):
            sx, sy = x + 3.0 + i * 25.0, y + 9.5
            regions.append(region(f"swatch.{c}", "swatch", rect(sx, sy, 10, 7), ["empty", c],
                                  {"colour": c}, print_={"outline": "black"}))
            art.append(text(sx + 12.0, sy + 3.5, c, size=3.0, anchor="lm"))
    return regions, art


def base_doc(tid, game, level, title, marker_first, *, meta):
    return {
        "format_version": 1,
        "id": tid,
        "version": "1.0.0",
        "game": game,
        "level": level,
        "title": title,
        "page": {"size": "A4", "orientation": "landscape"},
        "mark_vocabulary": [*PENCIL_MARKS, "written"],
        "markers": markers(marker_first),
        "regions": [],
        "artwork": [],
        "meta": meta,
    }


# ------------------------------------------------------------------------------------------
# Pick a Pen: Crypts
# ------------------------------------------------------------------------------------------

CRYPTS_NAMES = {1: "Clever Codes", 2: "Enigmatic Runes", 3: "Challenging Hieroglyphs"}
ROW_SYMBOLS = ("circle", "triangle", "square", "cross", "hexagon", "pencil")
C_COLS = 8
C_PITCH = 14.0        # symbol pitch: 11 mm symbols leave a 3 mm gap a pencil can respect
C_X0, C_Y0 = 38.0, 40.0   # centre of cell r1 c1
C_SYM = 11.0          # symbol size (bounding box)
C_BOX = 9.0           # point box side
C_BOX_PITCH = 11.0

# Point boxes: level 1 only pairs; levels 2-3 pairs, triples and all-five-colours.
# Rows hold 8 symbols, columns 5 (level 1) or 6 (levels 2-3): see DESIGN.md for why these counts.
CRYPTS_ROW_GROUPS = {1: ("pair", "pair", "pair"),
                     2: ("pair", "pair", "triple", "all_colours"),
                     3: ("pair", "pair", "triple", "all_colours")}
CRYPTS_COL_GROUPS = {1: ("pair", "pair"),
                     2: ("pair", "triple", "all_colours"),
                     3: ("pair", "triple", "all_colours")}
GROUP_POINTS = {"pair": 2, "triple": 3, "all_colours": 5}

# Outlined symbols per level: (row, col) -> colour or "black". Each colour at least once,
# spread over rows and columns (at most two in any row or column, so no single line hands out
# a chain of extra colourings).
CRYPTS_OUTLINES = {
    1: {(1, 3): "orange", (2, 6): "blue", (3, 2): "red", (4, 8): "purple", (5, 5): "green",
        (2, 1): "green", (4, 4): "orange"},
    2: {(1, 5): "red", (2, 2): "green", (3, 7): "orange", (4, 4): "blue", (5, 8): "purple",
        (6, 3): "orange", (1, 1): "purple", (6, 6): "green"},
    3: {(1, 2): "blue", (2, 6): "orange", (3, 4): "green", (4, 8): "red", (5, 3): "purple",
        (6, 7): "red", (1, 5): "black", (2, 1): "black", (3, 7): "black", (4, 2): "black",
        (6, 4): "black"},
}


def symbol_shape(sym, cx, cy):
    """Region outline that matches the printed glyph, so the reader samples what a player
    colours (a square region around a triangle would count unpainted corners as empty)."""
    s = C_SYM / 2
    if sym == "circle":
        return circle(cx, cy, s)
    if sym == "square":
        return rect(cx - 5.0, cy - 5.0, 10.0, 10.0)
    if sym == "triangle":
        return polygon([(cx, cy - 5.5), (cx + 5.9, cy + 4.5), (cx - 5.9, cy + 4.5)])
    if sym == "cross":
        a = 2.3  # arm half-width: a 4.6 mm arm is still easy to colour
        return polygon([(cx - a, cy - s), (cx + a, cy - s), (cx + a, cy - a), (cx + s, cy - a),
                        (cx + s, cy + a), (cx + a, cy + a), (cx + a, cy + s), (cx - a, cy + s),
                        (cx - a, cy + a), (cx - s, cy + a), (cx - s, cy - a), (cx - a, cy - a)])
    if sym == "hexagon":
        return polygon([(cx + 5.8 * math.cos(math.radians(a)), cy + 5.8 * math.sin(math.radians(a)))
                        for a in range(0, 360, 60)])
    if sym == "pencil":
        # upright pencil, tip down: 8 mm wide body, 12 mm tall
        return polygon([(cx - 4.0, cy - 6.0), (cx + 4.0, cy - 6.0), (cx + 4.0, cy + 1.5),
                        (cx, cy + 6.0), (cx - 4.0, cy + 1.5)])
    raise ValueError(f"unknown symbol {sym!r}")


def crypts(level: int) -> dict:
    n_rows = 5 if level == 1 else 6
    name = CRYPTS_NAMES[level]
    row_groups, col_groups = CRYPTS_ROW_GROUPS[level], CRYPTS_COL_GROUPS[level]
    doc = base_doc(f"crypts-{level}", "pick_a_pen_crypts", level,
                   f"Pick a Pen: Crypts - Level {level}: {name}", (level - 1) * 4,
                   meta={"house_edition": True, "level_name": name,
                         "rows": n_rows, "columns": C_COLS,
                         "row_groups": list(row_groups), "column_groups": list(col_groups),
                         "group_points": GROUP_POINTS,
                         "outlines": {f"r{r}c{c}": o for (r, c), o in
                                      sorted(CRYPTS_OUTLINES[level].items())},
                         "grid_points": 7 if level == 3 else None,
                         "grid_bonus": 10 if level == 3 else None,
                         "design": "calibration/templates/DESIGN.md"})
    R, A = doc["regions"], doc["artwork"]
    A.append(text(PAGE_W / 2, 12.0, "Pick a Pen: Crypts", size=6.0, anchor="mm", bold=True))
    A.append(text(PAGE_W / 2, 20.0, f"Level {level}: {name}", size=4.5, anchor="mm"))

    def cx(c):
        return C_X0 + (c - 1) * C_PITCH

    def cy(r):
        return C_Y0 + (r - 1) * C_PITCH

    # symbol grid
    for r in range(1, n_rows + 1):
        sym = ROW_SYMBOLS[r - 1]
        for c in range(1, C_COLS + 1):
            outline = CRYPTS_OUTLINES[level].get((r, c))
            R.append(region(f"cell.r{r}.c{c}", "symbol", symbol_shape(sym, cx(c), cy(r)),
                            PENCIL_MARKS,
                            {"row": r, "col": c, "symbol": sym, "outline": outline},
                            print_={"glyph": sym, "outline": outline}))
    # left-to-right reminder arrow beside each row
    for r in range(1, n_rows + 1):
        A.append(glyph("arrow", cx(1) - 9.0, cy(r), 4.0, color=INK["soft"]))

    # row point boxes, right of each row
    bx0 = cx(C_COLS) + 14.0
    for r in range(1, n_rows + 1):
        for k, g in enumerate(row_groups, start=1):
            x = bx0 + (k - 1) * C_BOX_PITCH
            R.append(region(f"points.row{r}.{k}", "box", rect(x, cy(r) - C_BOX / 2, C_BOX, C_BOX),
                            PENCIL_MARKS,
                            {"line": "row", "index": r, "group": g, "points": GROUP_POINTS[g],
                             "slot": k},
                            print_={"label": str(GROUP_POINTS[g]), "label_pos": "inside",
                                    "outline": "black"}))
    bx1 = bx0 + len(row_groups) * C_BOX_PITCH - (C_BOX_PITCH - C_BOX)
    A.append(text((bx0 + bx1) / 2, cy(1) - 9.5, "row points", size=2.8, anchor="mm"))

    # column point boxes, below each column
    by0 = cy(n_rows) + 10.0
    for c in range(1, C_COLS + 1):
        for k, g in enumerate(col_groups, start=1):
            y = by0 + (k - 1) * C_BOX_PITCH
            R.append(region(f"points.col{c}.{k}", "box", rect(cx(c) - C_BOX / 2, y, C_BOX, C_BOX),
                            PENCIL_MARKS,
                            {"line": "column", "index": c, "group": g,
                             "points": GROUP_POINTS[g], "slot": k},
                            print_={"label": str(GROUP_POINTS[g]), "label_pos": "inside",
                                    "outline": "black"}))
    by1 = by0 + len(col_groups) * C_BOX_PITCH - (C_BOX_PITCH - C_BOX)
    A.append(text(cx(1) - 7.0, (by0 + by1) / 2, "column points", size=2.5, anchor="rm"))

    # bonus stars: right of the row boxes, and right of the column boxes
    s_rows = (bx1 + 10.0, (cy(1) + cy(n_rows)) / 2)
    s_cols = (cx(C_COLS) + 18.0, (by0 + by1) / 2)
    for rid, bonus, (sx, sy), cap in (
            ("bonus.rows", "all_rows", s_rows, ("a box in", "every row")),
            ("bonus.columns", "all_columns", s_cols, ("a box in", "every column"))):
        R.append(region(rid, "star", polygon(star_points(sx, sy, 7.5, 3.8)), PENCIL_MARKS,
                        {"bonus": bonus, "points": 5},
                        print_={"glyph": "star", "label": "5", "outline": "black"}))
        A.append(text(sx, sy + 10.0, cap[0], size=2.5, anchor="mm"))
        A.append(text(sx, sy + 13.0, cap[1], size=2.5, anchor="mm"))

    yb = by1
    if level == 3:
        # 2x2 grids: five boxes of 7 points (one per colour at most), and the 10-point star
        gy = by1 + 11.0
        gx0 = cx(3) - C_BOX / 2
        A.append(text(gx0 - 3.0, gy + C_BOX / 2, "2x2 grid, one colour:", size=2.8,
                      anchor="rm"))
        for k in range(1, 6):
            R.append(region(f"points.grid.{k}", "box",
                            rect(gx0 + (k - 1) * C_BOX_PITCH, gy, C_BOX, C_BOX), PENCIL_MARKS,
                            {"line": "grid", "group": "grid", "points": 7, "slot": k},
                            print_={"label": "7", "label_pos": "inside", "outline": "black"}))
        gsx = gx0 + 5 * C_BOX_PITCH + 9.0
        R.append(region("bonus.grids", "star", polygon(star_points(gsx, gy + C_BOX / 2, 7.5, 3.8)),
                        PENCIL_MARKS, {"bonus": "three_grids", "points": 10},
                        print_={"glyph": "star", "label": "10", "outline": "black"}))
        A.append(text(gsx + 9.0, gy + C_BOX / 2, "3 or more grids", size=2.5, anchor="lm"))
        yb = gy + C_BOX

    # total, bottom right
    R.append(region("total", "number_field", rect(222.0, 168.0, 44.0, 16.0), FIELD_MARKS,
                    {"field": "total"}, print_={"label": "Total", "label_pos": "above",
                                                "outline": "black"}))

    # colour-calibration strip, right edge
    sw, swa = swatch_strip(228.0, 30.0, vertical=True)
    R.extend(sw)
    A.extend(swa)

    # legend: die faces and colour combinations
    lx, ly = 218.0, 112.0
    A.append(text(lx, ly, "Pencil faces:", size=2.8, anchor="lm", bold=True))
    for i, g in enumerate(("circle", "triangle", "square", "cross", "hexagon", "joker")):
        A.append(glyph(g, lx + 4.0 + i * 8.0, ly + 6.0, 5.0))
    A.append(text(lx, ly + 14.0, "Points per row / column:", size=2.8, anchor="lm", bold=True))
    combos = [("2", ["red", "red"])]
    if level >= 2:
        combos += [("3", ["blue", "blue", "blue"]), ("5", list(COLOURS))]
    for j, (pts, cols) in enumerate(combos):
        y = ly + 20.0 + j * 6.0
        for i, c in enumerate(cols):
            A.append(art_circle(lx + 2.5 + i * 5.0, y, 2.0, fill=INK[c], color=INK[c]))
        A.append(text(lx + 30.0, y, f"= {pts}", size=2.8, anchor="lm"))

    # rule reminders, bottom left
    tips = ["Colour each row from left to right, never skip a symbol.",
            "Outlined symbol coloured in its outline colour: colour one more symbol in that colour.",
            "A symbol belongs to at most one group; 4 in a row = two pairs."]
    if level >= 2:
        tips.append("Pencil row: may be coloured instead of the rolled symbol.")
    if level == 3:
        tips.append("Black outline: colour one more symbol in the same colour.  "
                    "Each colour scores a 2x2 grid once.")
    ty = max(yb + 8.0, 168.0)
    for i, t in enumerate(tips):
        A.append(text(34.0, ty + i * 4.5, t, size=2.7, anchor="lm", color=INK["soft"]))
    return doc


# ------------------------------------------------------------------------------------------
# Pick a Pen: Reefs
# ------------------------------------------------------------------------------------------

REEFS_NAMES = {1: "Small Ocean", 2: "The Whirlpools", 3: "The Propellers"}
M_N = 7              # 7 x 7 lattice
M_PITCH = 19.0
M_X0, M_Y0 = 38.0, 40.0   # centre of space r1 c1
SPACE_R = 4.5        # space circle radius (feature regions share it)
CONN_GAP = 1.0       # connection stops this far short of the space circle
CONN_W = 4.0

TREASURE_POINTS = (1, 3, 5, 7, 10, 13, 16)
COIN_POINTS = (1, 2, 3, 5, 7, 9, 11, 14)
#: slot (1-based) of the grey-shaded treasure box per colour
GREY_SLOT = {"orange": 5, "red": 5, "blue": 5, "green": 5, "purple": 5}
END_BONUS = {"end_grey": 5, "end_coins": 5}

# Maps: two-character tokens, rows top to bottom. E. entry, c. coin, W. whirlpool,
# P. propeller, oN rN bN gN pN treasure of that colour worth N, nN neutral treasure, .. plain.
REEFS_MAPS = {
    1: [".. E. .. c. .. E. ..",
        "o1 c. b3 .. g2 .. c.",
        ".. c. .. n2 .. r3 E.",
        "E. .. p2 E. .. c. ..",
        "b2 g3 .. c. o2 .. p2",
        "c. .. r2 c. .. p1 E.",
        ".. n1 E. .. o3 c. n3"],
    2: [".. c. E. .. o2 .. E.",
        "g2 .. W. p1 c. c. ..",
        "E. r2 c. .. b2 W. n2",
        "c. W. .. E. c. p3 ..",
        "c. .. o3 .. W. .. E.",
        "p1 b3 .. g3 c. r3 c.",
        "E. .. n1 W. c. .. E."],
    3: ["E. .. c. o1 .. E. ..",
        "c. P. b2 .. r2 c. g2",
        "c. n2 .. P. c. .. E.",
        "r3 .. E. c. .. b3 ..",
        ".. o3 .. g3 P. .. c.",
        "E. c. p2 c. n1 .. p3",
        ".. P. .. E. c. P. o1"],
}
TOKEN_FEATURE = {"E": "entry", "c": "coin", "W": "whirlpool", "P": "propeller"}
TOKEN_COLOUR = {"o": "orange", "r": "red", "b": "blue", "g": "green", "p": "purple", "n": None}


def parse_map(rows):
    """``{(r, c): (feature, colour, value)}`` for the featured spaces of a map drawing."""
    if len(rows) != M_N:
        raise ValueError(f"a map needs {M_N} rows, got {len(rows)}")
    out = {}
    for r, line in enumerate(rows, start=1):
        toks = line.split()
        if len(toks) != M_N:
            raise ValueError(f"map row {r} needs {M_N} tokens, got {line!r}")
        for c, t in enumerate(toks, start=1):
            if t == "..":
                continue
            if t[0] in TOKEN_FEATURE and t[1] == ".":
                out[(r, c)] = (TOKEN_FEATURE[t[0]], None, None)
            elif t[0] in TOKEN_COLOUR and t[1].isdigit():
                out[(r, c)] = ("treasure", TOKEN_COLOUR[t[0]], int(t[1]))
            else:
                raise ValueError(f"unknown map token {t!r} at r{r}c{c}")
    return out


def reefs(level: int) -> dict:
    name = REEFS_NAMES[level]
    feats = parse_map(REEFS_MAPS[level])
    tsum = {str(c): sum(v for f, col, v in feats.values() if f == "treasure" and col == c)
            for c in (*COLOURS, None)}
    doc = base_doc(f"reefs-{level}", "pick_a_pen_reefs", level,
                   f"Pick a Pen: Reefs - Level {level}: {name}", 12 + (level - 1) * 4,
                   meta={"house_edition": True, "level_name": name,
                         "map": {"rows": M_N, "cols": M_N, "pitch_mm": M_PITCH,
                                 "drawing": REEFS_MAPS[level]},
                         "treasure_points": list(TREASURE_POINTS),
                         "coin_points": list(COIN_POINTS),
                         "grey_slot": dict(GREY_SLOT),
                         "treasure_value_per_colour": {("neutral" if k == "None" else k): v
                                                       for k, v in tsum.items()},
                         "bonus_points": {"five_by_two": 5, "all_boxes": 5, **END_BONUS},
                         "design": "calibration/templates/DESIGN.md"})
    R, A = doc["regions"], doc["artwork"]
    A.append(text(PAGE_W / 2, 12.0, "Pick a Pen: Reefs", size=6.0, anchor="mm", bold=True))
    A.append(text(PAGE_W / 2, 20.0, f"Level {level}: {name}", size=4.5, anchor="mm"))

    def centre(r, c):
        return M_X0 + (c - 1) * M_PITCH, M_Y0 + (r - 1) * M_PITCH

    def sid(r, c):
        return f"space.r{r}c{c}"

    # spaces (structure only: connections join them, features sit on them)
    for r in range(1, M_N + 1):
        for c in range(1, M_N + 1):
            f = feats.get((r, c))
            x, y = centre(r, c)
            R.append(region(sid(r, c), "space", circle(x, y, SPACE_R), STRUCTURE_MARKS,
                            {"row": r, "col": c, "feature": f[0] if f else None},
                            readable=False, print_={"glyph": "circle", "outline": "black"}))
    # connections between orthogonal neighbours; they stop CONN_GAP short of both circles so a
    # space's printed artwork never lies inside a connection region
    off = SPACE_R + CONN_GAP
    for r in range(1, M_N + 1):
        for c in range(1, M_N + 1):
            x, y = centre(r, c)
            if c < M_N:
                R.append(region(f"conn.r{r}c{c}-r{r}c{c + 1}", "connection",
                                segment((x + off, y), (x + M_PITCH - off, y), CONN_W),
                                CONNECTION_MARKS,
                                {"a": sid(r, c), "b": sid(r, c + 1), "direction": "h"},
                                print_={}))
            if r < M_N:
                R.append(region(f"conn.r{r}c{c}-r{r + 1}c{c}", "connection",
                                segment((x, y + off), (x, y + M_PITCH - off), CONN_W),
                                CONNECTION_MARKS,
                                {"a": sid(r, c), "b": sid(r + 1, c), "direction": "v"},
                                print_={}))
    # features, numbered in reading order
    count = {}
    for (r, c) in sorted(feats):
        f, col, val = feats[(r, c)]
        n = count[f] = count.get(f, 0) + 1
        x, y = centre(r, c)
        shp = circle(x, y, SPACE_R)
        if f == "entry":
            R.append(region(f"entry.{n}", "entry_point", shp, PENCIL_MARKS, {"space": sid(r, c)},
                            print_={"glyph": "arrow", "outline": "black"}))
        elif f == "treasure":
            R.append(region(f"treasure.{n}", "treasure", shp, PENCIL_MARKS,
                            {"space": sid(r, c), "colour": col, "value": val},
                            print_={"glyph": "treasure", "label": str(val), "outline": col}))
        elif f == "coin":
            R.append(region(f"coin.{n}", "coin", shp, STRUCTURE_MARKS, {"space": sid(r, c)},
                            readable=False, print_={"glyph": "coin"}))
        elif f == "whirlpool":
            R.append(region(f"whirlpool.{n}", "whirlpool", shp, PENCIL_MARKS,
                            {"space": sid(r, c)}, print_={"glyph": "whirlpool"}))
        elif f == "propeller":
            R.append(region(f"propeller.map.{n}", "propeller", shp, STRUCTURE_MARKS,
                            {"space": sid(r, c), "role": "map"}, readable=False,
                            print_={"glyph": "propeller"}))

    # right panel: treasure tracks, coin track, bonus stars, fields, total
    tx0, box, bpitch = 172.0, 9.0, 11.0
    fx, fw = 254.0, 15.0
    A.append(glyph("exclamation", tx0 - 3.0, 27.0, 4.0, color=INK["red"]))
    A.append(text(tx0 + 1.0, 27.0, "Treasure boxes (grey box in all 5 colours ends the game)",
                  size=2.6, anchor="lm"))
    for i, col in enumerate(COLOURS):
        y = 34.0 + i * 14.0
        A.append(art_circle(tx0 - 4.0, y + box / 2, 2.5, fill=INK[col], color=INK[col]))
        for k, pts in enumerate(TREASURE_POINTS, start=1):
            grey = k == GREY_SLOT[col]
            pr = {"label": str(pts), "label_pos": "above", "outline": "black"}
            if grey:
                pr["fill"] = GREY_FILL
            R.append(region(f"treasurebox.{col}.{k}", "box",
                            rect(tx0 + (k - 1) * bpitch, y, box, box), PENCIL_MARKS,
                            {"track": "treasure", "colour": col, "slot": k, "points": pts,
                             "grey": grey}, print_=pr))
        R.append(region(f"field.row.{col}", "number_field", rect(fx, y, fw, box), FIELD_MARKS,
                        {"field": f"row.{col}"}, print_={"outline": "black"}))
    A.append(text(fx + fw / 2, 31.0, "points", size=2.4, anchor="mm"))
    ycoin = 34.0 + 5 * 14.0
    A.append(glyph("coin", tx0 - 4.0, ycoin + box / 2, 5.0))
    cpitch = 10.0  # eight boxes must fit before the row field
    for k, pts in enumerate(COIN_POINTS, start=1):
        last = k == len(COIN_POINTS)
        R.append(region(f"coinbox.{k}", "box", rect(tx0 + (k - 1) * cpitch, ycoin, box, box),
                        PENCIL_MARKS,
                        {"track": "coin", "slot": k, "points": pts, "last": last},
                        print_={"label": str(pts), "label_pos": "above", "outline": "black"}))
    R.append(region("field.row.coins", "number_field", rect(fx, ycoin, fw, box), FIELD_MARKS,
                    {"field": "row.coins"}, print_={"outline": "black"}))
    A.append(glyph("exclamation", tx0 + 7 * cpitch + box / 2, ycoin + box + 3.0, 3.0,
                   color=INK["red"]))

    sy = 128.0
    stars = [("bonus.five_by_two", "five_by_two", 5, True, "2 boxes x 5 colours", "(first only)"),
             ("bonus.all_boxes", "all_boxes", 5, True, "all boxes of", "one colour (first)"),
             ("bonus.end_grey", "end_grey", END_BONUS["end_grey"], False, "ended: grey", "boxes"),
             ("bonus.end_coins", "end_coins", END_BONUS["end_coins"], False, "ended: last",
              "coin box")]
    for i, (rid, bonus, pts, first, cap1, cap2) in enumerate(stars):
        x = 178.0 + i * 21.0
        R.append(region(rid, "star", polygon(star_points(x, sy, 7.0, 3.6)), PENCIL_MARKS,
                        {"bonus": bonus, "points": pts, "first_player": first},
                        print_={"glyph": "star", "label": str(pts), "outline": "black"}))
        A.append(text(x, sy + 10.0, cap1, size=2.2, anchor="mm"))
        A.append(text(x, sy + 13.0, cap2, size=2.2, anchor="mm"))
        if not first:
            A.append(glyph("exclamation", x + 7.0, sy - 6.0, 3.0, color=INK["red"]))
    R.append(region("field.bonus", "number_field", rect(fx, sy - box / 2, fw, box), FIELD_MARKS,
                    {"field": "bonus"}, print_={"outline": "black"}))
    A.append(text(fx + fw / 2, sy - box / 2 - 2.0, "bonus", size=2.4, anchor="mm"))
    A.append(text(tx0 - 1.0, sy - 10.5, "Cross out a first-player star when someone else gets it.",
                  size=2.2, anchor="lm", color=INK["soft"]))

    if level == 3:
        py = 153.0
        A.append(text(tx0, py - 5.5, "Propellers: colour the rim box when you cross a propeller; "
                      "fill the propeller when you use it (3 any steps).", size=2.2, anchor="lm"))
        for k in range(1, 6):
            x = tx0 + (k - 1) * 19.0
            R.append(region(f"propeller.track.{k}.rim", "propeller", rect(x, py, 8.0, 8.0),
                            PENCIL_MARKS, {"role": "track_rim", "slot": k},
                            print_={"outline": "black", "label": "rim", "label_pos": "below"}))
            R.append(region(f"propeller.track.{k}.core", "propeller",
                            circle(x + 13.5, py + 4.0, 4.5), PENCIL_MARKS,
                            {"role": "track_core", "slot": k},
                            print_={"glyph": "propeller", "outline": "black"}))

    R.append(region("total", "number_field", rect(230.0, 170.0, 38.0, 14.0), FIELD_MARKS,
                    {"field": "total"}, print_={"outline": "black"}))
    A.append(text(226.0, 177.0, "Total", size=4.0, anchor="rm", bold=True))

    # swatch strip below the map, framed apart from it
    sw, swa = swatch_strip(30.0, 164.0, vertical=False)
    R.extend(sw)
    A.extend(swa)

    # rule reminders under the right panel
    tips = ["Start a colour on a free entry point; one unbranched route per colour.",
            "Never reuse a connection; never cross another entry point.",
            "Treasure of the route's colour (or neutral): colour it and that many boxes."]
    for i, t in enumerate(tips):
        A.append(text(34.0, 189.0 + i * 4.0, t, size=2.4, anchor="lm", color=INK["soft"]))
    if level == 2:
        A.append(text(160.0, 189.0, "Whirlpool: stop there, colour it, then 3 any steps.",
                      size=2.4, anchor="lm", color=INK["soft"]))
    return doc


# ------------------------------------------------------------------------------------------

BUILDERS = {
    "crypts-1": lambda: crypts(1), "crypts-2": lambda: crypts(2), "crypts-3": lambda: crypts(3),
    "reefs-1": lambda: reefs(1), "reefs-2": lambda: reefs(2), "reefs-3": lambda: reefs(3),
}


def dumps(doc: dict) -> str:
    """The exact text written for one template (stable: the bundled-JSON test compares it)."""
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def build_all() -> dict[str, str]:
    """``{file name: JSON text}`` for every house template."""
    return {f"{tid}.json": dumps(make()) for tid, make in BUILDERS.items()}


def write_all(out_dir: str | Path) -> list[Path]:
    """Write every template into ``out_dir``; returns the paths written."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, txt in build_all().items():
        p = out / name
        p.write_text(txt, encoding="utf-8")
        paths.append(p)
    return paths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE), help="output directory (default: next to this script)")
    args = ap.parse_args(argv)
    for p in write_all(args.out):
        print(p)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
