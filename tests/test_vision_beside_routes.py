"""A route drawn beside its printed guide, outside the route's band, is flagged, not read "empty".

Session 34: on the fresh corpus 3400000 a green Reefs route was drawn 3.5 mm to the side of its
dotted guide, parallel to it between the same two spaces; both readers saw nothing in the
route's band and read it "empty" at 0.998. ``vision.marks._check_beside_routes`` looks for a
stroke running along each confidently empty route just outside its outline.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from calibration.render import render_sheet
from calibration.template import get_template
from vision import marks as M
from vision.colour import srgb_to_linear
from vision.pipeline import read_photo

DPI = 80.0
REASON = "a stroke beside the route"


@pytest.fixture(scope="module")
def reefs():
    t = get_template("reefs-1")
    render = render_sheet(t, dpi=DPI).image
    return t, render, M.build_sheet_model(t, render, dpi=DPI)


def _line_beside(mask, t, rid, *, off_mm, from_t=0.0, to_t=1.0, k=DPI / 25.4):
    """A 0.7 mm line parallel to route ``rid``, ``off_mm`` from its centre line, over the part
    ``from_t``..``to_t`` of its length."""
    p = t.region(rid).shape.params
    a, b = np.asarray(p["p1"], float), np.asarray(p["p2"], float)
    u = (b - a) / np.hypot(*(b - a))
    n = np.array([-u[1], u[0]])
    pa, pb = (a + (b - a) * from_t + n * off_mm) * k, (a + (b - a) * to_t + n * off_mm) * k
    cv2.line(mask, tuple(int(round(v * 16)) for v in pa), tuple(int(round(v * 16)) for v in pb),
             1.0, max(1, int(round(0.7 * k))), cv2.LINE_AA, 4)


def _confident_empties(model):
    rd = M.RegionReading
    readings = {rid: rd(rid, "connection", "empty", 0.999, False, (("empty", 0.999),), {}, "")
                for rid in model.region_ids}

    class R:
        def __init__(self, i):
            self.id = i
    return readings, [R(rid) for rid in model.region_ids]


def test_only_a_route_with_a_stroke_along_its_side_is_flagged(reefs):
    t, render, model = reefs
    routes = [rid for rid in model.region_ids if t.region(rid).shape.type == "segment"]
    off_line, dot, inside = routes[10], routes[20], routes[30]
    mask = np.zeros(render.shape[:2], np.float32)
    _line_beside(mask, t, off_line, off_mm=3.5)                           # drawn off its guide
    _line_beside(mask, t, dot, off_mm=-3.5, from_t=0.45, to_t=0.6)        # a short stray mark
    _line_beside(mask, t, inside, off_mm=0.3)                             # on its guide
    green = srgb_to_linear(np.array([60, 135, 83], np.uint8))
    lin = srgb_to_linear(render)
    lin = lin * (1 - 0.9 * mask[..., None] * (1 - green[None, None]))
    flat = lin.reshape(-1, 3).astype(np.float32)

    def sample(idx, keep=None):
        return flat[idx if keep is None else idx[keep]]
    readings, regions = _confident_empties(model)
    th = {"chroma": 8.0, "dark_l": 60.0}
    out = M._check_beside_routes(readings, regions, sample, model, th, None, 0.97)
    flagged = {rid for rid, r in out.items() if r.review}
    assert flagged == {off_line}
    r = out[off_line]
    assert REASON in r.reason and r.mark == "empty" and r.confidence < 0.97
    # a reading already flagged, or of a mark, is left as it is
    readings[off_line] = M.RegionReading(off_line, "connection", "green", 0.999, False,
                                         (("green", 0.999),), {}, "")
    assert M._check_beside_routes(readings, regions, sample, model, th, None, 0.97) is readings


def test_a_sheet_without_routes_has_nothing_to_watch():
    t = get_template("crypts-1")
    render = render_sheet(t, dpi=DPI).image
    model = M.build_sheet_model(t, render, dpi=DPI)
    idx, reg, cell = M._beside_route_geometry(model)
    assert idx.size == reg.size == cell.size == 0
    readings, regions = _confident_empties(model)
    assert M._check_beside_routes(readings, regions, lambda i, keep=None: None, model,
                                  {"chroma": 8.0, "dark_l": 60.0}, None, 0.97) is readings


def test_the_route_drawn_off_its_guide_on_a_real_photo_is_flagged(tmp_path, monkeypatch):
    """Photo 113 of the corpus 3400000 (reefs-3, easy, markers): its green route r3c4-r4c4 runs
    3.5 mm beside the guide. Flagged now, and the only region this check flags there; without
    the check a confident error."""
    from test_vision_stains import corpus_photo  # (tests/ is on sys.path)
    photo, truth = corpus_photo(tmp_path, 3400000, 300, 3400113, ("reefs-3", "easy", True))
    truth, data = truth["marks"], photo.read_bytes()
    rid = "conn.r3c4-r4c4"
    assert truth[rid] == "green"
    reading = read_photo(data)
    assert not [k for k, r in reading.readings.items() if not r.review and r.mark != truth[k]]
    assert {k for k, r in reading.readings.items() if REASON in (r.reason or "")} == {rid}
    monkeypatch.setattr(M, "BESIDE_MIN_BINS", M.BESIDE_BINS + 1)
    again = read_photo(data)
    r = again.readings[rid]
    assert r.mark == "empty" and not r.review
