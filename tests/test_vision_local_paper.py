"""Number fields are bare paper: their darkness is measured against the paper round them.

A folded page shows its two faces under different light: the face turned from the lamp is
darker, with a sharp step at the crease. The light stage flattens shading on a coarse grid, so
it cannot follow that step, and an empty number field on the dark face (or crossed by the
crease) used to read as "written": a quarter of its paper was darker than this photo's paper.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from calibration.render import render_sheet
from calibration.template import get_template
from sheetcheck.simulator.paint import paint_sheet
from vision.colour import linear_to_srgb, srgb_to_linear
from vision.light import normalise_light
from vision.marks import build_sheet_model, classify_sheet

DPI = 100.0
K = DPI / 25.4

HAND = {"pressure": 0.9, "hatch_angle_deg": -45.0, "spacing_mm": 0.6, "stroke_width_mm": 0.5,
        "style": "hatch", "style_loyalty": 1.0, "overshoot_mm": 0.0, "coverage_min": 1.0,
        "grain_strength": 0.3, "wobble_mm": 0.05, "stray_marks": 0, "cross_style": "x",
        "cross_pencil": "graphite", "write_with": "graphite", "font": 0}
PENCILS = {"orange": (240, 125, 35), "red": (200, 40, 50), "blue": (35, 85, 195),
           "green": (45, 150, 70), "purple": (120, 60, 150), "graphite": (85, 85, 90),
           "ballpoint": (30, 40, 120)}


@pytest.fixture(scope="module")
def reefs():
    t = get_template("reefs-1")
    render = render_sheet(t, dpi=DPI).image
    return t, render, build_sheet_model(t, render, dpi=DPI)


def _fold(image: np.ndarray, *, crease_y_mm: float, slope: float = 0.3, width_mm: float = 30.0,
          soft_mm: float = 0.6) -> np.ndarray:
    """A page folded along ``crease_y_mm``, lit from below: the face above the crease is turned
    from the lamp and the face below towards it, both flat again ``width_mm`` away (the
    simulator's fold, and a real folded page). In linear light the paper is ``1 - slope`` times
    as bright just above the crease and ``1 + slope`` just below, the step softened over
    ``soft_mm`` as a real crease is. The default slope is that of the simulator's fold which
    made an empty field read "written" on a typical photo (3.9 mm high over 31 mm, lit from
    105 degrees: fresh300k reefs-1-typical-m-s300243, ``field.bonus``)."""
    h = image.shape[0]
    d = (np.arange(h) + 0.5) / K - crease_y_mm
    ramp = np.clip(1 - np.abs(d) / width_mm, 0, None)
    side = np.clip(d / soft_mm, -1.0, 1.0)
    gain = (1.0 + slope * ramp * side)[:, None, None].astype(np.float32)
    return linear_to_srgb(srgb_to_linear(image) * gain)


def _read(model, image):
    light = normalise_light(image, paper_mask=model.paper_mask)
    return classify_sheet(light.linear, model, learned=None)


def _fields(t):
    return [r for r in t.regions if r.kind == "number_field"]


@pytest.mark.parametrize("where", ["below", "across"])
def test_an_empty_number_field_beside_a_fold_reads_empty(reefs, where):
    t, render, model = reefs
    for field in _fields(t):
        x0, y0, x1, y1 = field.shape.bbox()
        # the crease 1.5 mm under the box (the box wholly on the dark face) or across its middle
        crease = y1 + 1.5 if where == "below" else (y0 + y1) / 2
        img = _fold(render.copy(), crease_y_mm=crease)
        r = _read(model, img).readings[field.id]
        assert r.mark == "empty", (field.id, where, r.mark, r.confidence, r.features.get("coverage"))


def test_digits_beside_a_fold_still_read_written(reefs):
    t, render, model = reefs
    fields = _fields(t)
    marks = {f.id: "written" for f in fields}
    painted = paint_sheet(render, t, marks, dpi=DPI, rng=np.random.default_rng(4), pencils=PENCILS,
                          hand=HAND, digits={f.id: "17" for f in fields})
    for field in fields:
        x0, y0, x1, y1 = field.shape.bbox()
        img = _fold(painted, crease_y_mm=y1 + 1.5)
        r = _read(model, img).readings[field.id]
        assert r.mark == "written", (field.id, r.mark, r.confidence)


@pytest.mark.parametrize("r", [2, 8, 14, 23])
def test_the_fast_closing_is_opencvs_disk_closing_bit_for_bit(r):
    from vision.marks import _close_disk, _disk
    rng = np.random.default_rng(r)
    for shape in [(97, 131), (9, 40), (2 * r + 5, 3)]:   # also windows smaller than the disk
        img = (rng.random(shape) * 100).astype(np.float32)
        img[:, ::5] -= 40                                  # strokes to close over
        want = cv2.morphologyEx(img, cv2.MORPH_CLOSE, _disk(r), borderType=cv2.BORDER_REPLICATE)
        assert np.array_equal(_close_disk(img, _disk(r)), want)
