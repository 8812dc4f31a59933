"""A pencil lying on the sheet is found from its shape (``vision.objects.find_bars``).

Two long, straight, parallel edges a pencil's width apart that are no part of the printed
template, with one and the same body between them: any lacquer colour (a dark purple one
included, almost grey), over the grid of boxes as over bare paper. The print's own parallel
lines (a row of boxes) and a row of hatched marks are no bar.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from vision.decode import decode_photo
from vision.locate import locate_sheet
from vision.objects import Bar, find_bars
from vision.pipeline import sheet_model
from vision.rectify import rectify_sheet

ROOT = Path(__file__).resolve().parents[1]
DPI = 100.0
PX = DPI / 25.4  # px per mm


def _stains_helpers():
    spec = importlib.util.spec_from_file_location(
        "test_vision_stains_helpers", ROOT / "tests" / "test_vision_stains.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _rectified(data: bytes):
    """The photo in the template frame as the pipeline rectifies it: (image, valid, render)."""
    decoded = decode_photo(data)
    location = locate_sheet(decoded.image)
    rect = rectify_sheet(decoded.image, location, dpi=DPI)
    return rect.image, rect.valid, sheet_model(location.template, dpi=DPI).expected


def _truth_axis(variant: dict, shape) -> tuple[np.ndarray, np.ndarray]:
    """The pencil's axis (blunt end to tip, ``make_variants.pencil``), clipped to the frame."""
    a = np.asarray(variant["blunt_end_mm"], float)
    ang = np.radians(variant["angle_deg"])
    d = np.array([np.cos(ang), np.sin(ang)])
    s = np.arange(0.0, variant["length_mm"] + 1e-9, 0.25)
    p = a[None] + s[:, None] * d[None]
    h, w = shape[:2]
    ok = (p[:, 0] >= 0) & (p[:, 0] <= w / PX) & (p[:, 1] >= 0) & (p[:, 1] <= h / PX)
    return p[ok][0], p[ok][-1]


def _matches(bar: Bar, t0, t1, *, axis_mm=3.0, angle_deg=3.0, extent_mm=10.0) -> bool:
    td = (t1 - t0) / np.linalg.norm(t1 - t0)
    b0, b1 = np.asarray(bar.p0_mm), np.asarray(bar.p1_mm)
    bd = (b1 - b0) / np.linalg.norm(b1 - b0)
    if np.degrees(np.arccos(min(1.0, abs(float(td @ bd))))) > angle_deg:
        return False
    bn = np.array([-bd[1], bd[0]])
    if max(abs(float((t0 - b0) @ bn)), abs(float((t1 - b0) @ bn))) > axis_mm:
        return False
    s = sorted([float((b0 - t0) @ td), float((b1 - t0) @ td)])
    return abs(s[0]) <= extent_mm and abs(s[1] - float((t1 - t0) @ td)) <= extent_mm


@pytest.fixture(scope="module")
def pencil_photo(tmp_path_factory):
    """Photo 4000036 of the spent corpus 4000000 (crypts-1, easy, markers) with the dark purple
    pencil ``make_variants.py --kind pencil --seed 39`` lays on it, across the grid of
    symbols: (clean bytes, pencil bytes, the pencil's truth)."""
    ts = _stains_helpers()
    out = tmp_path_factory.mktemp("pencil")
    clean, data, truth = ts._stained_photo(out, 4000000, 300, 4000036, 39,
                                           expect=("crypts-1", "easy", True), kind="pencil")
    mv = ts._script("make_variants")
    rng = np.random.default_rng([39, 4000036, mv.KINDS.index("pencil")])
    photo = next(out.glob("*s4000036.jpg"))
    _, tr = mv.pencil(np.asarray(Image.open(photo).convert("RGB")), truth, rng)
    return clean, data, tr["variant"]


def test_a_dark_pencil_on_a_sheet_photo_is_found_where_it_lies(pencil_photo):
    _, data, variant = pencil_photo
    assert variant["colour"] == "purple"  # (the darkest lacquer: almost grey in the photo)
    image, valid, expected = _rectified(data)
    bars = find_bars(image, expected, DPI, valid=valid)
    t0, t1 = _truth_axis(variant, image.shape)
    assert len(bars) == 1
    assert _matches(bars[0], t0, t1)
    assert abs(bars[0].width_mm - variant["width_mm"]) <= 1.5


def test_the_same_photo_without_the_pencil_has_no_bar(pencil_photo):
    clean, _, _ = pencil_photo
    image, valid, expected = _rectified(clean)
    assert find_bars(image, expected, DPI, valid=valid) == []


def _grid_render(h: int = 827, w: int = 1169) -> np.ndarray:
    """A clean render (float RGB 0..1) with rows of adjacent 7 mm boxes: long printed lines in
    pairs a pencil's width apart."""
    e = np.ones((h, w, 3), np.float32)
    for row in range(6):
        y0 = 30 + row * 22  # mm
        for k in range(16):
            x0 = 20 + k * 7
            cv2.rectangle(e, (round(x0 * PX), round(y0 * PX)),
                          (round((x0 + 7) * PX), round((y0 + 7) * PX)), (0, 0, 0), 2)
    cv2.line(e, (round(150 * PX), round(20 * PX)), (round(280 * PX), round(20 * PX)),
             (0.3, 0.3, 0.3), 3)
    return e


def _photo_of(render: np.ndarray, seed: int = 0) -> np.ndarray:
    """``render`` as a photo: a little blur, shading, noise, half a pixel off."""
    rng = np.random.default_rng(seed)
    h, w = render.shape[:2]
    img = render * 225.0
    img = cv2.warpAffine(img, np.float32([[1, 0, 0.5], [0, 1, 0.4]]), (w, h),
                         borderMode=cv2.BORDER_REPLICATE)
    img = cv2.GaussianBlur(img, (0, 0), 0.9)
    shade = np.linspace(0.8, 1.0, w, dtype=np.float32)[None, :, None]
    img = img * shade * np.array([1.0, 0.93, 0.82], np.float32) + rng.normal(0, 3, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _draw_bar(img: np.ndarray, p0_mm, p1_mm, width_mm: float, rgb) -> np.ndarray:
    """A bar with a glare stripe along it and a soft shadow beside it."""
    out = img.astype(np.float32)
    p0, p1 = (np.asarray(p, float) * PX for p in (p0_mm, p1_mm))
    d = (p1 - p0) / np.linalg.norm(p1 - p0)
    n = np.array([-d[1], d[0]])
    shadow = np.zeros(img.shape[:2], np.float32)
    q = width_mm / 2 * PX
    poly = lambda a, b, off: np.round(np.array([a + (off - q) * n, b + (off - q) * n,
                                                b + (off + q) * n, a + (off + q) * n])
                                      ).astype(np.int32)
    cv2.fillPoly(shadow, [poly(p0, p1, 2.5 * PX)], 1.0)
    shadow = cv2.GaussianBlur(shadow, (0, 0), 4.0)
    out *= (1 - 0.35 * shadow)[..., None]
    body = np.zeros(img.shape[:2], np.uint8)
    cv2.fillPoly(body, [poly(p0, p1, 0.0)], 1)
    out[body > 0] = rgb
    glare = np.zeros(img.shape[:2], np.uint8)
    cv2.line(glare, tuple(np.round(p0 - 0.15 * q * n).astype(int)),
             tuple(np.round(p1 - 0.15 * q * n).astype(int)), 1, 2)
    out[glare > 0] = np.minimum(np.asarray(rgb, np.float32) + 60, 255)
    return np.clip(out, 0, 255).astype(np.uint8)


def test_the_printed_grid_of_boxes_is_no_bar():
    e = _grid_render()
    assert find_bars(_photo_of(e), e, DPI) == []


def test_a_grey_bar_over_the_grid_of_boxes_is_found():
    e = _grid_render()
    img = _draw_bar(_photo_of(e), (40.0, 25.0), (190.0, 140.0), 7.5, (62, 60, 66))
    bars = find_bars(img, e, DPI, valid=np.ones(img.shape[:2], bool))
    assert len(bars) == 1
    assert _matches(bars[0], np.array([40.0, 25.0]), np.array([190.0, 140.0]),
                    axis_mm=1.5, angle_deg=1.5, extent_mm=4.0)
    assert abs(bars[0].width_mm - 7.5) <= 1.0


def test_a_row_of_hatched_marks_is_no_bar():
    """Coloured marks in a row of boxes (not in the render): their edges run along the row, but
    their colours change from box to box and the strokes make texture: no bar."""
    e = _grid_render()
    img = _photo_of(e)
    rng = np.random.default_rng(1)
    colours = [(230, 120, 20), (40, 80, 200), (200, 30, 40), (40, 150, 60), (120, 40, 150)]
    y0 = 30 + 2 * 22
    for k in range(16):
        c = colours[k % len(colours)]
        x0 = 20 + k * 7
        for _ in range(14):
            a = (round((x0 + rng.uniform(-0.5, 2)) * PX), round((y0 + rng.uniform(-0.5, 7.5)) * PX))
            b = (round((x0 + rng.uniform(5, 7.5)) * PX), round((y0 + rng.uniform(-0.5, 7.5)) * PX))
            cv2.line(img, a, b, c, 2)
    assert find_bars(img, e, DPI) == []


def test_the_object_mask_covers_the_object_its_shadow_and_no_more():
    """``object_mask``: a pencil 7 mm wide from (20, 30) to (120, 30) mm, at 100 dpi: its body
    and ``OBJECT_MARGIN_MM`` around it (its shadow) are masked; beyond, nothing."""
    from vision.objects import OBJECT_MARGIN_MM, object_mask
    mask = object_mask([(20.0, 30.0, 120.0, 30.0, 7.0)], (400, 600), DPI)

    def at(x, y):
        return bool(mask[int(round(y * PX - 0.5)), int(round(x * PX - 0.5))])
    edge = 3.5 + OBJECT_MARGIN_MM
    assert at(70, 30) and at(70, 30 + edge - 0.5) and at(70, 30 - edge + 0.5)
    assert not at(70, 30 + edge + 0.7) and not at(70, 30 - edge - 0.7)
    assert at(20 - OBJECT_MARGIN_MM + 0.5, 30) and not at(20 - OBJECT_MARGIN_MM - 1.0, 30)
    assert at(120 + OBJECT_MARGIN_MM - 0.5, 30) and not at(120 + OBJECT_MARGIN_MM + 1.0, 30)
    assert not object_mask([], (400, 600), DPI).any()


@pytest.fixture(scope="module")
def filled_row_photo(tmp_path_factory):
    """Photo 4000000 of the spent corpus 4000000 (crypts-1, easy, markers), as made: no object
    on it, but the third row of level 1's squares coloured in, red and green, 10.2 mm tall."""
    ts = _stains_helpers()
    photo, _ = ts.corpus_photo(tmp_path_factory.mktemp("filled"), 4000000, 1, 4000000,
                               expect=("crypts-1", "easy", True))
    return _rectified(photo.read_bytes())


def test_a_row_of_boxes_coloured_in_shows_its_print_so_it_is_no_bar(filled_row_photo,
                                                                    monkeypatch):
    """Coloured in alike in grey, a row of squares has two straight parallel edges 10 mm apart
    and an even, untextured body: everything a pencil has but that it hides the print. The
    squares' printed sides show through the colour, so it is no bar; without that test it
    was taken for one along the row."""
    import vision.objects as O
    image, valid, expected = filled_row_photo
    assert find_bars(image, expected, DPI, valid=valid) == []
    monkeypatch.setattr(O, "PRINT_SEEN_MAX", float("inf"))
    bars = find_bars(image, expected, DPI, valid=valid)
    assert len(bars) == 1
    (x0, y0), (x1, y1) = bars[0].p0_mm, bars[0].p1_mm
    assert abs(y0 - y1) < 1.0 and 60 < y0 < 75 and abs(x1 - x0) > 40
    assert 9 <= bars[0].width_mm <= 11


def test_a_bar_hides_the_print_it_lies_on(pencil_photo):
    """The dark purple pencil of ``pencil_photo`` lies over the grid of symbols: the print
    under it shows through it at no more than a small share of its contrast."""
    import vision.objects as O
    _, data, _ = pencil_photo
    image, valid, expected = _rectified(data)
    norm, mm = O._working_grey(image, DPI)
    render = O.print_render(expected, DPI)
    (bar,) = find_bars(image, expected, DPI, valid=valid)
    k = DPI / 25.4 / mm  # (frame px per working px)
    p0, p1 = (np.asarray(p) * DPI / 25.4 / k for p in (bar.p0_mm, bar.p1_mm))
    seen = O._print_seen(norm, render, mm, p0, p1, bar.width_mm * mm)
    assert np.isfinite(seen) and abs(seen) < O.PRINT_SEEN_MAX / 2
