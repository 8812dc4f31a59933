"""The printable sheet: geometry of the render and of regions.json, markers, PDF size, CLI."""

from __future__ import annotations

import copy
import importlib
import json

import cv2
import numpy as np
import pytest
from PIL import Image

from calibration.glyphs import GLYPH_LIBRARY, GLYPHS, glyph_paths
from calibration.render import (INKS, REGIONS_FORMAT, page_size_px, pdf_page_size_pt,
                                regions_json, regions_json_path, render_sheet, save_pdf, save_png)
from calibration.template import template_ids, get_template, validate_template_dict
from sheetcheck.errors import TemplateError
from sheetcheck.cli import main

# A small sheet with one region of every shape type and the main kinds, A4 landscape like the
# house sheets. Marker ids 40..43 belong to no bundled template.
DOC = {
    "format_version": 1, "id": "render-test", "version": "1.0.0", "game": "pick_a_pen_reefs",
    "level": 1, "title": "Render test",
    "page": {"size": "A4", "orientation": "landscape"},
    "markers": {"dictionary": "DICT_4X4_50", "items": [
        {"id": 40, "corner": "top_left", "x": 8, "y": 8, "size": 14},
        {"id": 41, "corner": "top_right", "x": 275, "y": 8, "size": 14},
        {"id": 42, "corner": "bottom_right", "x": 275, "y": 188, "size": 14},
        {"id": 43, "corner": "bottom_left", "x": 8, "y": 188, "size": 14}]},
    "regions": [
        {"id": "box.1", "kind": "box", "shape": {"type": "rect", "x": 60, "y": 40, "w": 20, "h": 12},
         "marks": ["empty", "red", "crossed"], "meaning": {"points": 3},
         "print": {"label": "3", "label_pos": "above"}},
        {"id": "cell.1", "kind": "symbol", "shape": {"type": "circle", "cx": 120.5, "cy": 60.25, "r": 6},
         "marks": ["empty", "blue"], "meaning": {"row": 1, "col": 1, "symbol": "hexagon", "outline": "blue"},
         "print": {"glyph": "hexagon", "outline": "blue"}},
        {"id": "space.a", "kind": "space", "shape": {"type": "circle", "cx": 60, "cy": 100, "r": 4},
         "marks": ["empty"], "readable": False, "meaning": {"row": 1, "col": 1, "feature": None}},
        {"id": "space.b", "kind": "space", "shape": {"type": "circle", "cx": 80, "cy": 100, "r": 4},
         "marks": ["empty"], "readable": False, "meaning": {"row": 1, "col": 2, "feature": "treasure"}},
        {"id": "conn.a-b", "kind": "connection",
         "shape": {"type": "segment", "p1": [64.5, 100], "p2": [75.5, 100], "width": 4},
         "marks": ["empty", "orange", "red", "blue", "green", "purple"],
         "meaning": {"a": "space.a", "b": "space.b", "direction": "h"}},
        {"id": "treasure.1", "kind": "treasure", "shape": {"type": "circle", "cx": 80, "cy": 100, "r": 4},
         "marks": ["empty", "green"], "meaning": {"space": "space.b", "colour": "green", "value": 3},
         "print": {"glyph": "treasure", "label": "3", "outline": "green"}},
        {"id": "bonus.star", "kind": "star", "shape": {"type": "polygon", "points": [
            [160.0, 90.0], [162.2, 94.5], [167.1, 95.2], [163.6, 98.7], [164.4, 103.6], [160.0, 101.3],
            [155.6, 103.6], [156.4, 98.7], [152.9, 95.2], [157.8, 94.5]]},
         "marks": ["empty", "red", "crossed"], "meaning": {"bonus": "x", "points": 5},
         "print": {"label": "5"}},
        {"id": "total", "kind": "number_field", "shape": {"type": "rect", "x": 200, "y": 150, "w": 40, "h": 15},
         "marks": ["empty", "written"], "meaning": {"field": "total"}, "print": {"label": "Total"}},
        {"id": "swatch.purple", "kind": "swatch", "shape": {"type": "rect", "x": 40, "y": 170, "w": 10, "h": 7},
         "marks": ["empty", "purple"], "meaning": {"colour": "purple"}},
    ],
    "artwork": [
        {"type": "text", "x": 148.5, "y": 15, "text": "Render test", "size": 7, "anchor": "mm", "bold": True},
        {"type": "line", "p1": [30, 130], "p2": [260, 130], "width": 0.3, "color": "#777777", "dash": [2, 1]},
        {"type": "rect", "x": 190, "y": 140, "w": 60, "h": 30, "width": 0.3, "color": "#000000"},
        {"type": "circle", "cx": 100, "cy": 150, "r": 3, "width": 0, "fill": "#d62828"},
        {"type": "glyph", "glyph": "exclamation", "cx": 110, "cy": 150, "size": 5, "color": "#d62828"},
    ],
}


@pytest.fixture(scope="module")
def tpl():
    return validate_template_dict(copy.deepcopy(DOC), source="render-test")


def _detect(image_rgb: np.ndarray, dictionary: str = "DICT_4X4_50"):
    params = cv2.aruco.DetectorParameters()
    params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    det = cv2.aruco.ArucoDetector(cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary)),
                                  params)
    gray = cv2.cvtColor(np.ascontiguousarray(image_rgb), cv2.COLOR_RGB2GRAY)
    corners, ids, _ = det.detectMarkers(gray)
    if ids is None:
        return {}
    # OpenCV puts pixel (i, j)'s centre at (j, i); the project puts it at (j + 0.5, i + 0.5)
    return {int(i): c.reshape(4, 2) + 0.5 for c, i in zip(corners, ids.ravel())}


# --- geometry ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dpi", [50, 100, 150, 72.5])
def test_regions_json_matches_template_geometry(tpl, dpi):
    sheet = render_sheet(tpl, dpi=dpi)
    doc = regions_json(sheet)
    s = dpi / 25.4
    assert doc["format"] == REGIONS_FORMAT
    assert doc["image_size"] == [round(297 * s), round(210 * s)] == list(page_size_px(tpl, dpi))
    assert sheet.image.shape == (round(210 * s), round(297 * s), 3)
    by_id = {r["id"]: r for r in doc["regions"]}
    assert set(by_id) == {r.id for r in tpl.regions}
    for reg in tpl.regions:
        d = by_id[reg.id]
        np.testing.assert_allclose(d["polygon"], reg.shape.polygon() * s, atol=0.5)
        np.testing.assert_allclose(d["centre"], np.asarray(reg.shape.centre()) * s, atol=0.5)
        assert d["kind"] == reg.kind and d["marks"] == list(reg.marks)
        assert d["readable"] == reg.readable and d["meaning"] == dict(reg.meaning)
    conn = by_id["conn.a-b"]
    np.testing.assert_allclose(conn["endpoints"], [[64.5 * s, 100 * s], [75.5 * s, 100 * s]], atol=0.5)
    assert conn["width_px"] == pytest.approx(4 * s, abs=0.01)
    assert "endpoints" not in by_id["box.1"]
    np.testing.assert_allclose(by_id["cell.1"]["shape"]["r"], 6 * s, atol=0.01)
    # a hand-computed value, independent of the code under test
    np.testing.assert_allclose(by_id["box.1"]["polygon"][2], [80 * dpi / 25.4, 52 * dpi / 25.4], atol=1e-3)


def test_ink_lies_where_the_template_says(tpl):
    """The printed box outline is dark exactly on the box edges, the inside stays paper white."""
    dpi = 150
    sheet = render_sheet(tpl, dpi=dpi)
    gray = sheet.image.astype(float).mean(2)
    s = dpi / 25.4
    x0, y0, x1, y1 = 60 * s, 40 * s, 80 * s, 52 * s
    ymid = int((y0 + y1) / 2)
    row = gray[ymid]
    # darkest pixel near each vertical edge is within a pixel of the edge's x
    for xe in (x0, x1):
        lo = int(xe) - 4
        j = lo + int(np.argmin(row[lo:lo + 9]))
        assert abs((j + 0.5) - xe) <= 1.0, (j + 0.5, xe)
        assert row[j] < 160
    # paper inside the box (away from the label, which sits above the box) and outside it
    assert gray[int(y0 + 5):int(y1 - 5), int(x0 + 5):int(x1 - 5)].min() > 250
    assert gray[int(y1 + 8):int(y1 + 20), int(x0):int(x1)].min() > 250
    # the label "3" is printed above the box, not inside
    assert gray[int(y0 - 5 * s):int(y0 - 1), int(x0):int(x1)].min() < 128


def test_symbol_outline_is_printed_in_its_ink(tpl):
    sheet = render_sheet(tpl, dpi=150)
    rows, cols, m = sheet.region_window("cell.1")
    pix = sheet.image[rows, cols][m].astype(int)
    blue = np.array([0x1d, 0x5f, 0xd1])
    near_blue = np.abs(pix - blue).max(1) < 40
    assert near_blue.sum() > 100                      # a thick blue hexagon
    assert (pix.min(1) > 245).mean() > 0.5            # and mostly paper
    # the treasure's ring is green, thick, on its circle
    rows, cols, m = sheet.region_window("treasure.1")
    pix = sheet.image[rows, cols][m].astype(int)
    assert (np.abs(pix - [0x2a, 0x9d, 0x3a]).max(1) < 40).sum() > 100


@pytest.mark.parametrize("rid", ["box.1", "cell.1", "conn.a-b", "bonus.star", "total"])
def test_region_mask_covers_the_region(tpl, rid):
    sheet = render_sheet(tpl, dpi=100)
    m = sheet.region_mask(rid)
    assert m.shape == sheet.image.shape[:2] and m.dtype == bool
    poly = sheet.region_polygon_px(rid)
    x, y = poly[:, 0], poly[:, 1]
    area = 0.5 * abs(np.dot(x, np.roll(y, 1)) - np.dot(y, np.roll(x, 1)))
    perim = np.hypot(*np.diff(np.vstack([poly, poly[:1]]), axis=0).T).sum()
    # pixel-centre sampling miscounts at most a half-pixel band round the outline
    assert abs(m.sum() - area) <= 0.5 * perim + 4
    ii, jj = np.nonzero(m)
    cx, cy = np.asarray(tpl.region(rid).shape.centre()) * 100 / 25.4
    if rid != "bonus.star":  # a star's vertex mean is not its area centroid
        assert abs(jj.mean() + 0.5 - cx) < 0.6 and abs(ii.mean() + 0.5 - cy) < 0.6


def test_mm_px_round_trip(tpl):
    sheet = render_sheet(tpl, dpi=123)
    pts = np.array([[0.0, 0.0], [297.0, 210.0], [12.5, 7.25]])
    np.testing.assert_allclose(sheet.mm_to_px(pts)[1], [297 * 123 / 25.4, 210 * 123 / 25.4])
    np.testing.assert_allclose(sheet.px_to_mm(sheet.mm_to_px(pts)), pts)


# --- markers ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dpi", [60, 100, 150])
def test_markers_in_printed_png_are_detected_where_the_template_says(tpl, tmp_path, dpi):
    png = save_png(render_sheet(tpl, dpi=dpi), tmp_path / "sheet.png")
    img = np.array(Image.open(png).convert("RGB"))
    found = _detect(img)
    assert sorted(found) == [40, 41, 42, 43]
    s = dpi / 25.4
    err = np.array([found[m.id] - m.corners_mm() * s for m in tpl.markers]).reshape(-1, 2)
    assert np.abs(err).max() < 0.5, err
    # no systematic offset: a half-pixel slip in the pixel-centre convention would show here
    assert np.abs(err.mean(0)).max() < 0.2, err.mean(0)
    doc = json.loads(regions_json_path(png).read_text())
    for md in doc["markers"]:
        np.testing.assert_allclose(found[md["id"]], md["corners"], atol=1.0)


def test_no_markers_detects_none_and_changes_nothing_else(tpl):
    with_m = render_sheet(tpl, dpi=100, markers=True)
    without = render_sheet(tpl, dpi=100, markers=False)
    assert _detect(without.image) == {}
    assert regions_json(without)["markers"] == []
    diff = np.any(with_m.image != without.image, axis=2)
    inside = np.zeros_like(diff)
    s = 100 / 25.4
    for m in tpl.markers:
        inside[int(m.y * s):int(np.ceil((m.y + m.size) * s)) + 1,
               int(m.x * s):int(np.ceil((m.x + m.size) * s)) + 1] = True
    assert diff.any() and not (diff & ~inside).any()
    assert (without.image[inside] == 255).all()


@pytest.mark.parametrize("tid", template_ids())
def test_bundled_templates_render_with_their_markers(tid):
    t = get_template(tid)
    sheet = render_sheet(t, dpi=100)
    found = _detect(sheet.image, t.aruco_dictionary)
    assert sorted(found) == sorted(t.marker_ids)
    for m in t.markers:
        np.testing.assert_allclose(found[m.id], sheet.mm_to_px(m.corners_mm()), atol=0.5)
    # a page the reader can find: a white border all round
    assert (sheet.image[:3] == 255).all() and (sheet.image[:, -3:] == 255).all()


# --- caching ----------------------------------------------------------------------------------

def test_render_is_cached_read_only_and_keyed_on_content(tpl):
    a = render_sheet(tpl, dpi=50)
    assert render_sheet(tpl, dpi=50) is a
    assert not a.image.flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        a.image[0, 0] = 0
    other = copy.deepcopy(DOC)            # same id and version, different sheet
    other["regions"][0]["shape"]["x"] = 100
    b = render_sheet(validate_template_dict(other), dpi=50)
    assert b is not a and not np.array_equal(a.image, b.image)


def test_bad_dpi_is_refused(tpl):
    with pytest.raises(ValueError, match="dpi must be a number from 10 to 1200, got 0"):
        render_sheet(tpl, dpi=0)


def test_undrawable_print_hints_and_artwork_are_all_named(tpl):
    doc = copy.deepcopy(DOC)
    doc["regions"][0]["print"]["outline"] = "mauve"
    doc["regions"][1]["print"]["glyph"] = "anchor"
    del doc["artwork"][0]["x"]
    doc["artwork"].append({"type": "hologram"})
    with pytest.raises(TemplateError, match="cannot be drawn \\(4 problems\\)") as ei:
        render_sheet(validate_template_dict(doc), dpi=30)
    msg = str(ei.value)
    assert "region 'box.1' (box) print hints: colour 'mauve'" in msg
    assert "region 'cell.1' (symbol) print hints: unknown glyph 'anchor'" in msg
    assert "artwork[0] (text): missing field 'x'" in msg
    assert "artwork[5] (hologram): unknown artwork type 'hologram'" in msg


# --- files ------------------------------------------------------------------------------------

@pytest.mark.parametrize("size, orientation, expect", [
    ("A4", "landscape", (841.89, 595.28)), ("A4", "portrait", (595.28, 841.89)),
    ("Letter", "portrait", (612.0, 792.0))])
def test_pdf_is_true_physical_size(tmp_path, size, orientation, expect):
    doc = copy.deepcopy(DOC)
    doc["page"] = {"size": size, "orientation": orientation}
    if orientation == "portrait":  # keep markers and regions on the narrower page
        for m in doc["markers"]["items"]:
            m["x"] = min(m["x"], 190)
        doc["regions"] = [r for r in doc["regions"] if r["id"] != "total"]
    t = validate_template_dict(doc)
    pdf = save_pdf(t, tmp_path / "s.pdf", dpi=40)
    assert pdf.read_bytes().startswith(b"%PDF")
    w, h = pdf_page_size_pt(pdf)
    assert w == pytest.approx(expect[0], abs=0.01) and h == pytest.approx(expect[1], abs=0.01)


def test_png_carries_its_dpi(tpl, tmp_path):
    png = save_png(render_sheet(tpl, dpi=100), tmp_path / "s.png")
    with Image.open(png) as im:
        assert im.size == page_size_px(tpl, 100)
        assert im.info["dpi"] == pytest.approx((100, 100), abs=0.01)
    assert regions_json_path(png).name == "s.regions.json"
    # the file on disk is exactly the document, whatever its line layout
    assert json.loads(regions_json_path(png).read_text()) == regions_json(render_sheet(tpl, dpi=100))
    png = save_png(render_sheet(tpl, dpi=30, markers=False), tmp_path / "n.png")
    assert json.loads(regions_json_path(png).read_text())["markers"] == []


def test_save_refuses_wrong_extension_and_missing_folder(tpl, tmp_path):
    sheet = render_sheet(tpl, dpi=30)
    from sheetcheck.errors import InputFileError
    with pytest.raises(InputFileError, match=r"must end in \.png"):
        save_png(sheet, tmp_path / "s.jpg")
    with pytest.raises(InputFileError, match="does not exist"):
        save_png(sheet, tmp_path / "nowhere" / "s.png")
    (tmp_path / "f").write_text("x")
    with pytest.raises(InputFileError, match="cannot write"):
        save_png(sheet, tmp_path / "f" / "s.png")


# --- the print command ------------------------------------------------------------------------

@pytest.fixture
def cmd_with_test_template(monkeypatch, tpl):
    mod = importlib.import_module("sheetcheck.commands.print")
    real = mod.get_template
    monkeypatch.setattr(mod, "get_template", lambda tid: tpl if tid == "render-test" else real(tid))
    return mod


def test_print_png_writes_regions_json(cmd_with_test_template, tmp_path, capsys):
    out = tmp_path / "sheet.png"
    assert main(["print", "render-test", "--out", str(out), "--dpi", "60"]) == 0
    doc = json.loads((tmp_path / "sheet.regions.json").read_text())
    assert doc["template_id"] == "render-test" and doc["template_version"] == "1.0.0"
    assert doc["dpi"] == 60 and len(doc["markers"]) == 4
    assert "sheet.regions.json" in capsys.readouterr().out


def test_print_pdf_no_markers(cmd_with_test_template, tmp_path, capsys):
    out = tmp_path / "sheet.pdf"
    assert main(["print", "render-test", "--out", str(out), "--dpi", "40", "--no-markers"]) == 0
    assert pdf_page_size_pt(out) == pytest.approx((841.89, 595.28), abs=0.01)
    assert "no markers" in capsys.readouterr().out


@pytest.mark.parametrize("argv, code, message", [
    (["print", "no-such-sheet", "--out", "{d}/s.png"], 21, "unknown template 'no-such-sheet'"),
    (["print", "render-test", "--out", "{d}/s.jpg"], 50, r"must end in \.pdf or \.png"),
    (["print", "render-test", "--out", "{d}/missing/s.png"], 50, "does not exist"),
    (["print", "render-test", "--out", "{d}/s.png", "--dpi", "5"], 10, "--dpi 5 is out of range"),
])
def test_print_bad_inputs(cmd_with_test_template, tmp_path, capsys, argv, code, message):
    import re
    assert main([a.format(d=tmp_path) for a in argv]) == code
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert "Traceback" not in err
    assert not list(tmp_path.glob("s.*"))


# --- glyphs -----------------------------------------------------------------------------------

def test_every_glyph_fits_its_square():
    for name in GLYPHS:
        pts = np.concatenate([p.points for p in glyph_paths(name, 10.0, 20.0, 4.0)])
        assert pts[:, 0].min() >= 8.0 - 1e-9 and pts[:, 0].max() <= 12.0 + 1e-9, name
        assert pts[:, 1].min() >= 18.0 - 1e-9 and pts[:, 1].max() <= 22.0 + 1e-9, name
    assert set(GLYPH_LIBRARY) == set(GLYPHS)
    with pytest.raises(ValueError, match="unknown glyph 'anchor'"):
        glyph_paths("anchor", 0, 0, 1)


def test_inks_are_the_print_inks():
    assert INKS["orange"] == "#f08c00" and INKS["purple"] == "#7b3fa8" and len(INKS) == 6


def test_print_template_that_cannot_be_drawn_exits_20(monkeypatch, tmp_path, capsys):
    doc = copy.deepcopy(DOC)
    doc["artwork"].append({"type": "line", "p1": [0, 0]})
    broken = validate_template_dict(doc, source="broken.json")
    mod = importlib.import_module("sheetcheck.commands.print")
    monkeypatch.setattr(mod, "get_template", lambda tid: broken)
    assert main(["print", "broken", "--out", str(tmp_path / "s.png"), "--dpi", "30"]) == 20
    err = capsys.readouterr().err
    assert "artwork[5] (line): missing field 'p2'" in err and "Traceback" not in err
