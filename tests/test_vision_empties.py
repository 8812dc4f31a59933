"""Empty symbols and treasures read empty: the print inside and around them (a treasure's chest
and digit, its coloured ring, a symbol drawn in coloured ink) is the template's, not a mark, also
as a camera shows it; and pencil there is still read.

The photos here are the render in the reading frame, photographed the way a phone does it to
print: blurred, shifted by a pixel, grey print tinted by the tone curve (paper stays white),
at fewer pixels per mm than the reading frame, and JPEG-compressed with halved chroma (colour
rings out a few millimetres from saturated print).
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

#: Pencils (sRGB of a heavy stroke) and a careful hand, as in tests/test_vision_marks.py.
PENCILS = {"orange": (240, 125, 35), "red": (200, 40, 50), "blue": (35, 85, 195),
           "green": (45, 150, 70), "purple": (120, 60, 150), "graphite": (85, 85, 90),
           "ballpoint": (30, 40, 120)}
HAND = {"pressure": 0.9, "hatch_angle_deg": -45.0, "spacing_mm": 0.6, "stroke_width_mm": 0.6,
        "style": "hatch", "style_loyalty": 1.0, "overshoot_mm": 0.0, "coverage_min": 1.0,
        "grain_strength": 0.3, "wobble_mm": 0.05, "stray_marks": 0, "cross_style": "x",
        "cross_pencil": "graphite", "write_with": "graphite", "font": 0}


def _camera(image: np.ndarray, *, shift=(1, 1), blur_px=0.8, tint=(0.93, 1.0, 1.1),
            quality=80, scale=1.0) -> np.ndarray:
    """``image`` (sRGB uint8, the reading frame) as a phone shows it (module docstring)."""
    lin = srgb_to_linear(image)
    lin = np.roll(lin, shift, axis=(0, 1))
    lin = cv2.GaussianBlur(lin, (0, 0), blur_px)
    # a per-channel tone curve: paper (1) stays white, grey print takes a tint
    lin = np.clip(lin, 1e-6, 1.0) ** np.asarray(tint, np.float32)
    srgb = linear_to_srgb(lin)
    h, w = srgb.shape[:2]
    if scale != 1.0:
        # fewer pixels per mm than the reading frame (rectification upsamples the photo)
        srgb = cv2.resize(srgb, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(srgb, cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    out = cv2.cvtColor(cv2.imdecode(buf, cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
    return cv2.resize(out, (w, h), interpolation=cv2.INTER_LINEAR) if scale != 1.0 else out


_SHEETS: dict = {}


def _sheet(tid):
    if tid not in _SHEETS:
        t = get_template(tid)
        render = render_sheet(t, dpi=DPI).image
        _SHEETS[tid] = (t, render, build_sheet_model(t, render, dpi=DPI))
    return _SHEETS[tid]


def _read(tid, marks=None, *, seed=0, **camera):
    t, render, model = _sheet(tid)
    image = render
    if marks:
        image = paint_sheet(render, t, marks, dpi=DPI, rng=np.random.default_rng(seed),
                            pencils=PENCILS, hand=HAND)
    light = normalise_light(_camera(image, **camera), paper_mask=model.paper_mask)
    return classify_sheet(light.linear, model, learned=None)


@pytest.mark.parametrize("tid, kind, scale", [("reefs-1", "treasure", 1.0),
                                              ("reefs-2", "treasure", 0.85),
                                              ("crypts-3", "symbol", 0.7)])
def test_empty_symbols_and_treasures_read_empty_as_a_camera_shows_their_print(tid, kind, scale):
    sheet = _read(tid, scale=scale)
    regions = {rid: r for rid, r in sheet.readings.items() if r.kind == kind}
    assert len(regions) >= 10
    for rid, r in regions.items():
        assert r.mark == "empty", (rid, r.mark, r.confidence, r.features)
        assert r.features["coloured"] < 0.06, (rid, r.features)
    # and the hand reader is sure of nearly all of them: their paper is bare
    assert np.mean([not r.review for r in regions.values()]) >= 0.65, \
        {rid: round(r.confidence, 3) for rid, r in regions.items()}


def test_pencil_on_symbols_and_treasures_is_still_read_beside_their_print():
    t, _, _ = _sheet("reefs-2")
    tre = [r.id for r in t.regions_of_kind("treasure")]
    marks = {rid: ["orange", "red", "blue", "green", "purple", "crossed", "empty"][k % 7]
             for k, rid in enumerate(tre)}
    sheet = _read("reefs-2", marks, seed=3, scale=0.7)
    for rid, m in marks.items():
        r = sheet.readings[rid]
        # never confidently wrong, and a filled treasure is never read as bare
        assert r.mark == m or r.review, (rid, m, r.mark, r.confidence)
        if m != "empty":
            assert r.mark != "empty", (rid, m, r.confidence, r.features)
    assert np.mean([sheet.readings[rid].mark == m for rid, m in marks.items()]) >= 0.8


def test_dividing_the_print_out_never_lifts_a_pixel_above_paper():
    from vision.marks import _divide_print
    # a pixel's print divisor (0.3: a grey line nearby) and what the photo shows there
    divisor = np.full((4, 3), 0.3, np.float32)
    photo = np.array([[0.95, 0.93, 0.90],   # paper with a colour fringe beside the line
                      [1.02, 1.02, 1.02],   # paper brighter than the photo's paper
                      [0.30, 0.30, 0.30],   # the line itself
                      [0.12, 0.06, 0.03]],  # orange pencil over the line
                     np.float32)
    out = _divide_print(photo, divisor)
    lum = out @ np.array([0.2126, 0.7152, 0.0722], np.float32)
    assert lum[0] == pytest.approx(1.0, abs=1e-5)  # lifted to paper, not to three times it
    np.testing.assert_allclose(out[0] / out[0, 1], photo[0] / photo[0, 1], rtol=1e-5)  # its hue
    np.testing.assert_allclose(out[1], photo[1], rtol=1e-6)  # already brighter: kept
    np.testing.assert_allclose(out[2:], photo[2:] / 0.3, rtol=1e-6)  # print and pencil: divided


def test_the_leak_taken_off_is_measured_and_bounded():
    from vision.marks import _LEAK_CLASSES, _leak_allowance
    rng = np.random.default_rng(0)
    th = {"paper_l": 100.0, "paper_chroma": 0.3, "paper_chroma_sd": 0.3, "paper_l_sd": 0.5,
          "chroma": 7.0, "dark_l": 91.0}
    n = 400
    # class 4: paper with a leak of about 3 chroma units; class 5: paper beside print where
    # overshooting pencil (chroma 15) covers most probes; class 6: too few probes to measure;
    # other classes: open paper
    leak = np.column_stack([np.full(n, 100.0), rng.normal(3.0, 0.5, n), rng.normal(0, 0.3, n)])
    busy = np.column_stack([np.full(n, 80.0), np.where(np.arange(n) < 300, 15.0, 0.5),
                            np.zeros(n)])
    few = np.column_stack([np.full(20, 100.0), np.full(20, 30.0), np.zeros(20)])
    paper = np.column_stack([np.full(n, 100.0), rng.normal(0, 0.3, n), rng.normal(0, 0.3, n)])
    lab = np.concatenate([leak, busy, few, paper])
    cls = np.concatenate([np.full(n, 4), np.full(n, 5), np.full(20, 6), np.full(n, 0)]).astype(np.int8)
    chroma, dark = _leak_allowance(lab, cls, th)
    assert chroma.shape == dark.shape == (_LEAK_CLASSES,)
    assert 2.5 < chroma[4] < 4.0  # the leak's reach, beyond the paper's own
    assert chroma[5] == pytest.approx(7.0) and dark[5] == pytest.approx(4.5)  # bounded
    assert chroma[6] == 0.0 and dark[6] == 0.0  # nothing measured, nothing taken off
    assert chroma[0] < 0.5 and dark[0] == 0.0  # open paper leaks nothing
