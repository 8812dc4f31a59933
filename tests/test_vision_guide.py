"""Pencil drawn on a connection's printed guide, and print that cannot be seen (vision._guide).

Sheets are drawn in the template frame at a low dpi (no camera), blurred as a phone's lens
blurs them (the thin printed guide then comes out lighter than in the clean render, which is
what hides a light line drawn on it from the region's own features). Every expectation is
known: which connections carry a line, which lie under a blown-out highlight.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from calibration.render import render_sheet
from calibration.template import get_template
from vision._guide import GUIDE_DIVISOR, GUIDE_FEATURES, build_guide_geometry, guide_geometry
from vision.light import normalise_light
from vision.marks import EVIDENCE_FEATURES, FEATURE_NAMES, build_sheet_model, classify_sheet

DPI = 80.0
COL = {n: FEATURE_NAMES.index(n) for n in GUIDE_FEATURES}
GREEN = np.array([60, 135, 83], np.float32)


@pytest.fixture(scope="module")
def reefs():
    t = get_template("reefs-1")
    render = render_sheet(t, dpi=DPI).image
    return t, render, build_sheet_model(t, render, dpi=DPI)


def _draw_on_guide(image, t, rids, colour, *, strength, width_mm=0.7):
    """A light pencil line laid exactly over the guide of each connection in ``rids``: the
    pencil multiplies what is under it (paper or print) by a share of its colour."""
    k = DPI / 25.4
    mask = np.zeros(image.shape[:2], np.float32)
    for rid in rids:
        p = t.region(rid).shape.params
        a, b = np.asarray(p["p1"], float) * k, np.asarray(p["p2"], float) * k
        cv2.line(mask, tuple(int(round(v * 16)) for v in a), tuple(int(round(v * 16)) for v in b),
                 1.0, max(1, int(round(width_mm * k))), cv2.LINE_AA, 4)
    lin = (image.astype(np.float32) / 255.0) ** 2.2
    pen = (colour / 255.0) ** 2.2
    lin *= 1 - strength * mask[..., None] * (1 - pen[None, None])
    return np.clip(255 * lin ** (1 / 2.2), 0, 255).astype(np.uint8)


def _camera_blur(image, sigma_px=1.1):
    return cv2.GaussianBlur(image, (0, 0), sigma_px)


def _matrix(model, image):
    light = normalise_light(image, paper_mask=model.paper_mask)
    return classify_sheet(light.linear, model, learned=None, keep_matrix=True)


def test_guide_columns_are_appended_after_the_ring_columns():
    # (and the X columns of vision._evidence.x_features after them)
    from vision._evidence import X_FEATURES
    from vision.marks import OPEN_FEATURES
    # (the open columns, session 18, come after all of them)
    assert FEATURE_NAMES[-len(OPEN_FEATURES):] == OPEN_FEATURES
    names = FEATURE_NAMES[:-len(OPEN_FEATURES)]
    n = len(X_FEATURES)
    assert names[-n:] == X_FEATURES
    assert names[-len(GUIDE_FEATURES) - n:-n] == GUIDE_FEATURES
    assert names[-len(GUIDE_FEATURES) - len(EVIDENCE_FEATURES) - n:
                 -len(GUIDE_FEATURES) - n] == \
        EVIDENCE_FEATURES, "the ring columns stay where models fitted with them read them"
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


def test_guide_pixels_are_the_connections_pixels_under_their_printed_guide(reefs):
    t, render, model = reefs
    g = build_guide_geometry(model)
    assert g.guide.size > 0
    assert np.asarray(model.is_line)[g.guide_label].all(), "only connections have a guide"
    lum = model.divisor[g.guide] @ np.array([0.2126, 0.7152, 0.0722])
    assert lum.max() < GUIDE_DIVISOR
    # every connection of the sheet has some (its dotted guide runs from circle to circle)
    assert set(np.unique(g.guide_label)) == set(np.flatnonzero(model.is_line))
    assert guide_geometry(model) is guide_geometry(model)


def test_a_light_line_drawn_on_the_guide_stands_out_and_names_its_colour(reefs):
    """The measured failure (session 10): a light green line drawn over the guide, read
    "empty" with every other column at 0. Here it must stand out from the empty guides."""
    t, render, model = reefs
    conns = [r.id for r in t.regions_of_kind("connection")]
    drawn = conns[10:40:3]
    image = _camera_blur(_draw_on_guide(render, t, drawn, GREEN, strength=0.45))
    sheet = _matrix(model, image)
    ids = list(model.region_ids)
    X = sheet.matrix
    on = [ids.index(r) for r in drawn]
    off = [ids.index(r) for r in conns if r not in drawn]
    assert X[on, COL["gd_drop"]].min() > 5.0, X[on, COL["gd_drop"]]
    assert np.abs(X[off, COL["gd_drop"]]).max() < 3.0
    assert np.median(X[on, COL["gd_len"]]) >= 0.75 and X[off, COL["gd_len"]].max() <= 0.25
    assert X[on, COL["gd_chroma"]].min() > X[off, COL["gd_chroma"]].max()
    z = np.abs(X[on][:, [COL[f"gd_z_{c}"] for c in ("orange", "red", "blue", "green", "purple")]])
    assert (z.argmin(axis=1) == 3).mean() >= 0.8, z  # green is the nearest hue
    # area regions get no guide evidence
    areas = np.flatnonzero(~np.asarray(model.is_line))
    assert not X[np.ix_(areas, [COL[n] for n in GUIDE_FEATURES[:-1]])].any()


def test_print_under_a_blown_out_highlight_is_not_seen(reefs):
    t, render, model = reefs
    image = _camera_blur(render.copy())
    k = DPI / 25.4
    # a glare patch over the middle of the reef: everything inside goes to white (clipped)
    mid = t.regions_of_kind("connection")[40].shape.bbox()
    cx, cy, rad = (mid[0] + mid[2]) / 2 * k, (mid[1] + mid[3]) / 2 * k, 20 * k
    yy, xx = np.mgrid[:image.shape[0], :image.shape[1]]
    inside = (xx - cx) ** 2 + (yy - cy) ** 2 < rad ** 2
    image[inside] = 255
    X = _matrix(model, image).matrix
    seen = X[:, COL["print_seen"]]
    ids = list(model.region_ids)
    centre = np.array([(np.asarray(t.region(r).shape.bbox()).reshape(2, 2).mean(axis=0) * k)
                       for r in ids])
    d = np.hypot(centre[:, 0] - cx, centre[:, 1] - cy)
    under, clear = d < rad - 7 * k, d > rad + 10 * k
    assert under.sum() >= 3 and clear.sum() >= 10
    assert seen[under].max() < 0.35, seen[under]
    assert np.median(seen[clear]) > 0.8


def test_guide_columns_are_measured_only_for_a_model_that_reads_them(reefs, monkeypatch):
    t, render, model = reefs
    conns = [r.id for r in t.regions_of_kind("connection")]
    image = _camera_blur(_draw_on_guide(render, t, conns[:12], GREEN, strength=0.6))
    light = normalise_light(image, paper_mask=model.paper_mask)
    kept = classify_sheet(light.linear, model, learned=None, keep_matrix=True)
    assert kept.matrix[:, COL["gd_drop"]].max() > 5.0

    def refuse(*a, **k):
        raise AssertionError("guide columns measured for a model that does not read them")

    monkeypatch.setattr("vision.marks.guide_features", refuse)
    from vision.learned import MODEL_DIR, load_model
    v7 = load_model(MODEL_DIR / "reader-v7.json")  # (reads no gd_ column)
    lean = classify_sheet(light.linear, model, learned=v7)
    cols = [COL[n] for n in GUIDE_FEATURES]
    assert not lean.matrix[:, cols].any()
    from vision._evidence import X_FEATURES
    from vision.marks import OPEN_FEATURES
    rest = [j for j in range(len(FEATURE_NAMES)) if j not in cols
            and FEATURE_NAMES[j] not in EVIDENCE_FEATURES + X_FEATURES + OPEN_FEATURES]
    np.testing.assert_array_equal(lean.matrix[:, rest], kept.matrix[:, rest])


def test_print_outside_the_photo_is_not_measured(reefs):
    """A sheet cut off by the frame: the print and paper samples beyond the photo's edge say
    nothing about glare (they hold whatever the warp put there), so they are not measured."""
    from vision._guide import guide_features
    from vision.colour import load_palette
    t, render, model = reefs
    image = _camera_blur(render.copy())
    light = normalise_light(image, paper_mask=model.paper_mask)
    H, W = model.shape
    valid = np.ones((H, W), bool)
    valid[:, W // 2:] = False
    lin = light.linear.copy()
    lin[~valid] = 0.0  # beyond the edge: black, as a warp leaves it

    def sample(idx):
        return lin.reshape(-1, 3)[idx]

    pal = load_palette("default")
    cut = guide_features(sample, model, palette=pal, valid=valid)
    blind = guide_features(sample, model, palette=pal)
    seen = cut[:, -1]
    left = np.array([t.region(r).shape.bbox()[2] * DPI / 25.4 < W // 2 - 5 * DPI / 25.4
                     for r in model.region_ids])
    assert left.sum() >= 10 and (~left).sum() >= 10
    # the visible half reads as seen, and the cut-off half is not taken for glare either
    assert np.median(seen[left]) > 0.8 and seen.min() > 0.5
    # without the mask the black beyond the edge would be read as print of no contrast
    assert blind[~left, -1].min() < 0.5
