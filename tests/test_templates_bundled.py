"""The six bundled house-edition templates: they load, follow docs/TEMPLATES.md, fit the page,
do not overlap, are big enough to colour and read, and are exactly what build_templates.py makes.
"""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter, deque
from pathlib import Path

import numpy as np
import pytest

from calibration.template import (PENCIL_COLOURS, PENCIL_MARKS, TEMPLATE_DIR, get_template,
                                  json_schema, load_template_file, template_for_marker_id,
                                  template_ids, validate_template_dict)
from sheetcheck.errors import TemplateError

IDS = ["crypts-1", "crypts-2", "crypts-3", "reefs-1", "reefs-2", "reefs-3"]
CRYPTS = [i for i in IDS if i.startswith("crypts")]
REEFS = [i for i in IDS if i.startswith("reefs")]
MARKER_FIRST = {"crypts-1": 0, "crypts-2": 4, "crypts-3": 8,
                "reefs-1": 12, "reefs-2": 16, "reefs-3": 20}
TITLES = {"crypts-1": "Clever Codes", "crypts-2": "Enigmatic Runes",
          "crypts-3": "Challenging Hieroglyphs", "reefs-1": "Small Ocean",
          "reefs-2": "The Whirlpools", "reefs-3": "The Propellers"}
ROW_SYMBOL = {1: "circle", 2: "triangle", 3: "square", 4: "cross", 5: "hexagon", 6: "pencil"}
CONNECTION_MARKS = ("empty",) + PENCIL_COLOURS
BUILD_SCRIPT = TEMPLATE_DIR / "build_templates.py"
SCHEMA_FILE = TEMPLATE_DIR.parent / "schema" / "template.schema.json"


def _build_module():
    spec = importlib.util.spec_from_file_location("build_templates", BUILD_SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------ geometry helpers

def _inside(poly: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Even-odd point-in-polygon for (N, 2) points; boundary points may go either way, so
    callers sample at cell centres and tolerate nothing inside both."""
    x, y = pts[:, 0], pts[:, 1]
    res = np.zeros(len(pts), bool)
    n = len(poly)
    for i in range(n):
        (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % n]
        cond = (y1 > y) != (y2 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            xc = x1 + (y - y1) * (x2 - x1) / (y2 - y1)
        res ^= cond & (x < xc)
    return res


def _overlap_area(pa: np.ndarray, pb: np.ndarray, *, step: float = 0.1) -> float:
    """Area (mm^2) inside both polygons, by sampling a `step` mm grid over the bbox overlap."""
    x0 = max(pa[:, 0].min(), pb[:, 0].min()); x1 = min(pa[:, 0].max(), pb[:, 0].max())
    y0 = max(pa[:, 1].min(), pb[:, 1].min()); y1 = min(pa[:, 1].max(), pb[:, 1].max())
    if x1 <= x0 or y1 <= y0:
        return 0.0
    xs = np.arange(x0 + step / 2, x1, step); ys = np.arange(y0 + step / 2, y1, step)
    if len(xs) == 0 or len(ys) == 0:
        return 0.0
    gx, gy = np.meshgrid(xs, ys)
    pts = np.stack([gx.ravel(), gy.ravel()], 1)
    return float((_inside(pa, pts) & _inside(pb, pts)).sum() * step * step)


def _overlapping_pairs(regions, *, grow: float = 0.0):
    polys = [(r.id, r.shape.polygon(segments=48)) for r in regions]
    boxes = np.array([[p[:, 0].min(), p[:, 1].min(), p[:, 0].max(), p[:, 1].max()]
                      for _, p in polys])
    bad = []
    for i in range(len(polys)):
        o = ((boxes[i + 1:, 0] < boxes[i, 2] + grow) & (boxes[i + 1:, 2] + grow > boxes[i, 0])
             & (boxes[i + 1:, 1] < boxes[i, 3] + grow) & (boxes[i + 1:, 3] + grow > boxes[i, 1]))
        for j in np.nonzero(o)[0] + i + 1:
            area = _overlap_area(polys[i][1], polys[j][1])
            if area > 0:
                bad.append((polys[i][0], polys[j][0], round(area, 2)))
    return bad


# ------------------------------------------------------------------ the helpers themselves

def test_overlap_helper_detects_overlap_and_touching_squares():
    sq = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], float)
    assert _overlap_area(sq, sq + [5, 5]) == pytest.approx(25.0, abs=0.5)
    assert _overlap_area(sq, sq + [10, 0]) == 0.0      # touching edges: no area
    assert _overlap_area(sq, sq + [20, 0]) == 0.0


# ------------------------------------------------------------------ loading and identity

def test_all_six_bundled_and_load():
    assert set(IDS) <= set(template_ids())
    for tid in IDS:
        t = get_template(tid)
        assert t.id == tid
        assert t.version == "1.0.0"
        assert t.game == ("pick_a_pen_crypts" if tid.startswith("crypts") else "pick_a_pen_reefs")
        assert t.level == int(tid[-1])
        assert TITLES[tid] in t.title
        assert (t.width_mm, t.height_mm) == (297.0, 210.0)


def test_marker_ids_unique_and_in_corner_order():
    seen = Counter()
    for tid in IDS:
        t = get_template(tid)
        assert t.aruco_dictionary == "DICT_4X4_50"
        k = MARKER_FIRST[tid]
        assert [m.id for m in t.markers] == [k, k + 1, k + 2, k + 3]
        assert [m.corner for m in t.markers] == ["top_left", "top_right", "bottom_right",
                                                 "bottom_left"]
        for m in t.markers:
            assert m.size == 14.0
            assert min(m.x, m.y, 297 - m.x - m.size, 210 - m.y - m.size) == pytest.approx(8.0)
            assert template_for_marker_id(m.id).id == tid
        seen.update(t.marker_ids)
    assert max(seen.values()) == 1


def test_damaged_bundled_template_fails_naming_problems(tmp_path):
    doc = json.loads((TEMPLATE_DIR / "reefs-1.json").read_text())
    doc["regions"][0]["shape"]["cx"] = 400.0            # off the page
    del doc["regions"][5]["marks"]                       # missing field
    doc["regions"].append(dict(doc["regions"][-1]))      # duplicate id
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(TemplateError, match=r"3 problems") as ei:
        load_template_file(p)
    msg = str(ei.value)
    assert "space.r1c1" in msg and "off the" in msg
    assert "duplicate id" in msg and "'marks'" in msg


# ------------------------------------------------------------------ page placement and sizes

@pytest.mark.parametrize("tid", IDS)
def test_regions_inside_margins_and_clear_of_markers(tid):
    t = get_template(tid)
    for r in t.regions:
        x0, y0, x1, y1 = r.shape.bbox()
        assert x0 >= 6 and y0 >= 6 and x1 <= 297 - 6 and y1 <= 210 - 6, (r.id, r.shape.bbox())
        for m in t.markers:
            # separation between the region's bbox and the marker square
            dx = max(m.x - x1, x0 - (m.x + m.size), 0)
            dy = max(m.y - y1, y0 - (m.y + m.size), 0)
            assert max(dx, dy) >= 4.0, (r.id, m.id)


@pytest.mark.parametrize("tid", IDS)
def test_regions_big_enough(tid):
    t = get_template(tid)
    for r in t.readable_regions():
        if r.kind == "connection":
            p = r.shape.params
            length = float(np.hypot(p["p2"][0] - p["p1"][0], p["p2"][1] - p["p1"][1]))
            assert p["width"] >= 3 and length >= 6, r.id
            continue
        x0, y0, x1, y1 = r.shape.bbox()
        least = 7.0 if r.kind == "swatch" else 8.0   # swatches are 10 x 7 by design
        assert min(x1 - x0, y1 - y0) >= least - 1e-6, (r.id, x1 - x0, y1 - y0)


@pytest.mark.parametrize("tid", IDS)
def test_readable_regions_do_not_overlap(tid):
    assert _overlapping_pairs(get_template(tid).readable_regions()) == []


@pytest.mark.parametrize("tid", REEFS)
def test_connections_stop_short_of_space_circles(tid):
    t = get_template(tid)
    spaces = t.regions_of_kind("space")
    for c in t.regions_of_kind("connection"):
        for s in (t.region(c.meaning["a"]), t.region(c.meaning["b"])):
            assert _overlap_area(c.shape.polygon(), s.shape.polygon(segments=48)) == 0, c.id
    # and no connection crosses any other space either
    assert all(_overlap_area(c.shape.polygon(), s.shape.polygon(segments=48)) == 0
               for c in t.regions_of_kind("connection")[:20] for s in spaces)


# ------------------------------------------------------------------ marks

@pytest.mark.parametrize("tid", IDS)
def test_marks_follow_the_kind(tid):
    t = get_template(tid)
    for r in t.regions:
        if not r.readable:
            assert r.marks == ("empty",), r.id
        elif r.kind == "connection":
            assert r.marks == CONNECTION_MARKS, r.id
        elif r.kind == "number_field":
            assert r.marks == ("empty", "written"), r.id
        elif r.kind == "swatch":
            assert r.marks == ("empty", r.meaning["colour"]), r.id
            assert r.id == f"swatch.{r.meaning['colour']}"
        else:
            assert r.marks == PENCIL_MARKS, r.id
    assert {r.meaning["colour"] for r in t.regions_of_kind("swatch")} == set(PENCIL_COLOURS)
    assert t.region("total").kind == "number_field"


# ------------------------------------------------------------------ Crypts conventions

@pytest.mark.parametrize("tid", CRYPTS)
def test_crypts_cells(tid):
    t = get_template(tid)
    n_rows = 5 if t.level == 1 else 6
    cells = t.regions_of_kind("symbol")
    assert len(cells) == n_rows * 8
    outlines = Counter()
    for r in cells:
        m = re.fullmatch(r"cell\.r(\d)\.c(\d)", r.id)
        assert m, r.id
        row, col = int(m[1]), int(m[2])
        assert (r.meaning["row"], r.meaning["col"]) == (row, col)
        assert r.meaning["symbol"] == ROW_SYMBOL[row] == r.print["glyph"]
        assert r.meaning["outline"] == r.print["outline"]
        outlines[r.meaning["outline"]] += 1
        # columns read top to bottom, rows left to right on the page
        cx, cy = r.shape.centre()
        if col > 1:
            assert t.region(f"cell.r{row}.c{col - 1}").shape.centre()[0] < cx
        if row > 1:
            assert t.region(f"cell.r{row - 1}.c{col}").shape.centre()[1] < cy
    assert all(outlines[c] >= 1 for c in PENCIL_COLOURS)
    assert (outlines["black"] > 0) == (t.level == 3)
    # outlined symbols spread out: no row or column holds more than two
    per_row = Counter(r.meaning["row"] for r in cells if r.meaning["outline"])
    per_col = Counter(r.meaning["col"] for r in cells if r.meaning["outline"])
    assert max(per_row.values()) <= 2 and max(per_col.values()) <= 2


@pytest.mark.parametrize("tid", CRYPTS)
def test_crypts_point_boxes_and_stars(tid):
    t = get_template(tid)
    n_rows = 5 if t.level == 1 else 6
    pts = {"pair": 2, "triple": 3, "all_colours": 5}
    row_groups = Counter(); col_groups = Counter()
    for r in t.regions_of_kind("box"):
        m = re.fullmatch(r"points\.(row|col|grid)(\d?)\.(\d)", r.id)
        assert m, r.id
        line = {"row": "row", "col": "column", "grid": "grid"}[m[1]]
        assert r.meaning["line"] == line and r.meaning["slot"] == int(m[3])
        assert r.print["label"] == str(r.meaning["points"])
        if line == "grid":
            assert t.level == 3 and r.meaning == {"line": "grid", "group": "grid", "points": 7,
                                                  "slot": int(m[3])}
            continue
        assert r.meaning["index"] == int(m[2]) and r.meaning["points"] == pts[r.meaning["group"]]
        (row_groups if line == "row" else col_groups)[(r.meaning["index"], r.meaning["group"])] += 1
        # the box sits beside its line: right of the row, below the column
        cell = t.region(f"cell.r{int(m[2])}.c8" if line == "row" else f"cell.r{n_rows}.c{m[2]}")
        if line == "row":
            assert abs(r.shape.centre()[1] - cell.shape.centre()[1]) < 1.5
            assert r.shape.centre()[0] > cell.shape.centre()[0]
        else:
            assert abs(r.shape.centre()[0] - cell.shape.centre()[0]) < 1.5
            assert r.shape.centre()[1] > cell.shape.centre()[1]
    if t.level == 1:
        assert all(row_groups[(i, "pair")] == 3 for i in range(1, n_rows + 1))
        assert all(col_groups[(i, "pair")] == 2 for i in range(1, 9))
        assert {g for _, g in row_groups} == {g for _, g in col_groups} == {"pair"}
    else:
        for i in range(1, n_rows + 1):
            assert (row_groups[(i, "pair")], row_groups[(i, "triple")],
                    row_groups[(i, "all_colours")]) == (2, 1, 1)
        for i in range(1, 9):
            assert (col_groups[(i, "pair")], col_groups[(i, "triple")],
                    col_groups[(i, "all_colours")]) == (1, 1, 1)
    stars = {r.id: r.meaning for r in t.regions_of_kind("star")}
    want = {"bonus.rows": {"bonus": "all_rows", "points": 5},
            "bonus.columns": {"bonus": "all_columns", "points": 5}}
    if t.level == 3:
        want["bonus.grids"] = {"bonus": "three_grids", "points": 10}
        assert len(t.regions_of_kind("box")) == n_rows * 4 + 8 * 3 + 5
    assert stars == want


# ------------------------------------------------------------------ Reefs conventions

def _lattice(t):
    spaces = {}
    for s in t.regions_of_kind("space"):
        m = re.fullmatch(r"space\.r(\d+)c(\d+)", s.id)
        assert m and (s.meaning["row"], s.meaning["col"]) == (int(m[1]), int(m[2])), s.id
        spaces[s.id] = s
    return spaces


@pytest.mark.parametrize("tid", REEFS)
def test_reefs_connections_join_orthogonal_neighbours(tid):
    t = get_template(tid)
    spaces = _lattice(t)
    n = int(round(len(spaces) ** 0.5))
    assert len(spaces) == n * n == 49
    conns = t.regions_of_kind("connection")
    assert len(conns) == 2 * n * (n - 1)
    pairs = set()
    for c in conns:
        a, b = spaces[c.meaning["a"]], spaces[c.meaning["b"]]
        dr, dc = b.meaning["row"] - a.meaning["row"], b.meaning["col"] - a.meaning["col"]
        assert (dr, dc) in ((0, 1), (1, 0)), c.id          # a is left of / above b
        assert c.meaning["direction"] == ("h" if dr == 0 else "v")
        assert c.id == f"conn.{a.id[6:]}-{b.id[6:]}"
        assert c.shape.type == "segment"
        # the segment lies on the line between the two centres
        (ax, ay), (bx, by) = a.shape.centre(), b.shape.centre()
        mx, my = c.shape.centre()
        assert (mx, my) == pytest.approx(((ax + bx) / 2, (ay + by) / 2))
        pairs.add((a.id, b.id))
    assert len(pairs) == len(conns)


FEATURE_KIND = {"entry_point": "entry", "treasure": "treasure", "coin": "coin",
                "whirlpool": "whirlpool"}


def _features(t):
    """``{space id: (feature, region)}``, checking each feature region names a space with the
    matching feature and sits on it."""
    spaces = _lattice(t)
    out = {}
    for r in t.regions:
        if r.kind in FEATURE_KIND or (r.kind == "propeller" and r.meaning.get("role") == "map"):
            feat = FEATURE_KIND.get(r.kind, "propeller")
            sp = spaces[r.meaning["space"]]
            assert sp.meaning["feature"] == feat, r.id
            assert r.shape.centre() == pytest.approx(sp.shape.centre()), r.id
            assert sp.id not in out, f"two features on {sp.id}"
            out[sp.id] = (feat, r)
    # every space that claims a feature has its region
    for s in spaces.values():
        assert (s.meaning["feature"] is None) == (s.id not in out), s.id
    return out


@pytest.mark.parametrize("tid", REEFS)
def test_reefs_features(tid):
    t = get_template(tid)
    feats = _features(t)
    kinds = Counter(f for f, _ in feats.values())
    assert 6 <= kinds["entry"] <= 8
    assert 8 <= kinds["coin"] <= 12
    assert kinds["whirlpool"] == (0 if t.level != 2 else kinds["whirlpool"])
    if t.level == 2:
        assert 4 <= kinds["whirlpool"] <= 6
    if t.level == 3:
        assert 4 <= kinds["propeller"] <= 6
    else:
        assert kinds["propeller"] == 0
    # entries: most on the border, one or two inside
    inner = [s for s, (f, _) in feats.items() if f == "entry"
             and all(2 <= v <= 6 for v in map(int, re.findall(r"\d+", s)))]
    assert 1 <= len(inner) <= 2
    # treasures: 2-3 per colour, values 1-3, 2-3 neutrals
    tre = [r for f, r in feats.values() if f == "treasure"]
    per = Counter(r.meaning["colour"] for r in tre)
    assert all(2 <= per[c] <= 3 for c in PENCIL_COLOURS) and 2 <= per[None] <= 3
    assert all(r.meaning["value"] in (1, 2, 3) for r in tre)
    assert all(r.print["label"] == str(r.meaning["value"]) and r.print["outline"] == r.meaning["colour"]
               for r in tre)
    # ids numbered 1..N per kind
    for kind, prefix in (("entry_point", "entry."), ("treasure", "treasure."), ("coin", "coin."),
                         ("whirlpool", "whirlpool.")):
        ids = sorted(r.id for r in t.regions_of_kind(kind))
        assert ids == sorted(f"{prefix}{i}" for i in range(1, len(ids) + 1))


@pytest.mark.parametrize("tid", REEFS)
def test_reefs_every_feature_reachable_without_crossing_an_entry(tid):
    t = get_template(tid)
    feats = _features(t)
    adj = {}
    for c in t.regions_of_kind("connection"):
        adj.setdefault(c.meaning["a"], []).append(c.meaning["b"])
        adj.setdefault(c.meaning["b"], []).append(c.meaning["a"])
    entries = {s for s, (f, _) in feats.items() if f == "entry"}
    reached = set()
    for e in entries:
        seen, q = {e}, deque([e])
        while q:
            u = q.popleft()
            for v in adj[u]:
                # a route may not cross another entry point (nor come back to its own)
                if v not in seen and v not in entries:
                    seen.add(v); q.append(v)
        reached |= seen
    assert set(feats) - entries <= reached
    assert len(reached) == 49


@pytest.mark.parametrize("tid", REEFS)
def test_reefs_tracks(tid):
    t = get_template(tid)
    spaces_treasure = [r for r in t.regions_of_kind("treasure")]
    neutral = sum(r.meaning["value"] for r in spaces_treasure if r.meaning["colour"] is None)
    for c in PENCIL_COLOURS:
        boxes = sorted((r for r in t.regions_of_kind("box") if r.id.startswith(f"treasurebox.{c}.")),
                       key=lambda r: r.meaning["slot"])
        assert [b.meaning["slot"] for b in boxes] == list(range(1, len(boxes) + 1))
        assert all(b.id == f"treasurebox.{c}.{b.meaning['slot']}" and b.meaning["colour"] == c
                   and b.meaning["track"] == "treasure" for b in boxes)
        pts = [b.meaning["points"] for b in boxes]
        assert pts == sorted(pts) and len(set(pts)) == len(pts)
        assert [b.print["label"] for b in boxes] == [str(p) for p in pts]
        greys = [b for b in boxes if b.meaning["grey"]]
        assert len(greys) == 1 and greys[0].print["fill"] == "#c8c8c8"
        # left to right on the page
        xs = [b.shape.centre()[0] for b in boxes]
        assert xs == sorted(xs)
        own = sum(r.meaning["value"] for r in spaces_treasure if r.meaning["colour"] == c)
        # the grey box is reachable with the colour's own treasures, the whole track only with
        # neutral help: possible but not trivial
        assert greys[0].meaning["slot"] <= own < len(boxes) <= own + neutral, c
        assert t.region(f"field.row.{c}").kind == "number_field"
    coins = sorted(t.regions_of_kind("box"), key=lambda r: r.id)
    coins = sorted((r for r in coins if r.id.startswith("coinbox.")), key=lambda r: r.meaning["slot"])
    n_coins = len(t.regions_of_kind("coin"))
    assert [r.meaning["last"] for r in coins] == [False] * (len(coins) - 1) + [True]
    assert len(coins) <= n_coins
    pts = [r.meaning["points"] for r in coins]
    assert pts == sorted(pts)
    for rid, first in (("bonus.five_by_two", True), ("bonus.all_boxes", True),
                       ("bonus.end_grey", False), ("bonus.end_coins", False)):
        m = t.region(rid).meaning
        assert m["first_player"] is first and m["points"] > 0 and t.region(rid).kind == "star"
    for rid in ("field.row.coins", "field.bonus", "total"):
        assert t.region(rid).kind == "number_field"
    # the game-ending conditions carry a red "!" in the artwork
    bangs = [a for a in t.artwork if a.get("glyph") == "exclamation"]
    assert len(bangs) >= 2 and all(a["color"] == "#d62828" for a in bangs)


@pytest.mark.parametrize("tid", REEFS)
def test_reefs_propeller_track(tid):
    t = get_template(tid)
    track = [r for r in t.regions_of_kind("propeller") if r.meaning.get("role") != "map"]
    if t.level != 3:
        assert track == []
        return
    assert sorted(r.id for r in track) == sorted(
        f"propeller.track.{k}.{p}" for k in range(1, 6) for p in ("rim", "core"))
    for k in range(1, 6):
        rim, core = t.region(f"propeller.track.{k}.rim"), t.region(f"propeller.track.{k}.core")
        assert rim.meaning == {"role": "track_rim", "slot": k} and rim.shape.type == "rect"
        assert core.meaning == {"role": "track_core", "slot": k} and core.shape.type == "circle"
        # rim box directly left of its core, on the same line
        assert rim.shape.bbox()[2] < core.shape.bbox()[0] < rim.shape.bbox()[2] + 3
        assert abs(rim.shape.centre()[1] - core.shape.centre()[1]) < 0.5


# ------------------------------------------------------------------ generator and schema

def test_bundled_json_is_what_the_generator_makes(tmp_path):
    mod = _build_module()
    written = mod.write_all(tmp_path)
    assert sorted(p.name for p in written) == sorted(f"{i}.json" for i in IDS)
    for p in written:
        bundled = TEMPLATE_DIR / p.name
        assert bundled.read_text(encoding="utf-8") == p.read_text(encoding="utf-8"), (
            f"{p.name} differs from build_templates.py output: "
            "run `.venv/bin/python calibration/templates/build_templates.py`")
        validate_template_dict(json.loads(p.read_text()), source=str(p))


def test_generator_rejects_a_bad_map_drawing():
    mod = _build_module()
    with pytest.raises(ValueError, match="unknown map token 'x7' at r1c1"):
        mod.parse_map(["x7 .. .. .. .. .. .."] + [".. " * 6 + ".."] * 6)
    with pytest.raises(ValueError, match="needs 7 tokens"):
        mod.parse_map([".. .."] * 7)


def test_bundled_schema_is_current_and_accepts_every_template():
    assert json.loads(SCHEMA_FILE.read_text()) == json_schema()
    jsonschema = pytest.importorskip("jsonschema")
    for tid in IDS:
        jsonschema.validate(json.loads((TEMPLATE_DIR / f"{tid}.json").read_text()), json_schema())
