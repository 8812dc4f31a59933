"""The check for a stroke running through a region read "empty" (vision.marks._check_through):
a crossing-out the readers did not see inside the region."""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytest

from calibration.template import get_template
from vision import marks as M
from vision.colour import linear_to_lab, load_palette, srgb_to_linear
from vision.pipeline import read_photo, sheet_model

from test_vision_stains import corpus_photo


def _sheet(tid: str):
    """A clean sheet in the reader's frame: (model, linear image, thresholds)."""
    from calibration.render import render_sheet

    model = sheet_model(get_template(tid))
    rs = render_sheet(model.template, dpi=model.dpi, markers=True)
    linear = srgb_to_linear(np.ascontiguousarray(rs.image)).copy()
    th = M._photo_thresholds(linear_to_lab(linear.reshape(-1, 3)[model.paper_sample]),
                             load_palette("default"))
    return model, linear, th


def _scores(model, linear, th, watch=None, marked=None):
    flat = linear.reshape(-1, 3)
    watch = np.ones(len(model.region_ids), bool) if watch is None else watch
    return M.through_scores(lambda idx, keep=None: flat[idx if keep is None else idx[keep]],
                            model, th, None, watch, marked)


def _slash(linear, model, rid, *, angle_deg, before_mm, after_mm, grey=0.8, width_px=2):
    """A pale graphite line through region ``rid``'s centre: from ``before_mm`` beyond its
    outline on one side to ``after_mm`` beyond it on the other (0: it stops at the outline)."""
    k = model.dpi / 25.4
    poly = M._region_polygon_px(model.template.region(rid), k)
    c = (poly.min(axis=0) + poly.max(axis=0)) / 2
    u = np.array([math.cos(math.radians(angle_deg)), math.sin(math.radians(angle_deg))])
    # the outline's distance from the centre along the line, both ways
    ext = [max(float(t) for t in np.arange(0, 60 * k, 0.25)
               if cv2.pointPolygonTest(poly.astype(np.float32), tuple(map(float, c + s * t * u)),
                                       False) >= 0) for s in (1, -1)]
    a = c - u * (ext[1] + before_mm * k)
    b = c + u * (ext[0] + after_mm * k)
    out = linear.copy()
    mask = np.zeros(linear.shape[:2], np.uint8)
    cv2.line(mask, tuple(int(round(v)) for v in a), tuple(int(round(v)) for v in b), 1, width_px)
    out[mask > 0] *= grey
    return out


def test_the_print_of_a_clean_sheet_is_no_stroke_through_any_region():
    for tid in ("crypts-3", "reefs-3"):
        model, linear, th = _sheet(tid)
        s = _scores(model, linear, th)
        assert s.max() < M.THROUGH_MIN_SHARE, (tid, model.region_ids[int(s.argmax())], s.max())


def test_a_pale_slash_through_a_symbol_is_found_and_an_overshoot_is_not():
    model, linear, th = _sheet("crypts-3")
    i = model.region_ids.index("cell.r2.c1")
    far = model.region_ids.index("cell.r6.c8")
    slashed = _slash(linear, model, "cell.r2.c1", angle_deg=35, before_mm=3, after_mm=3)
    s = _scores(model, slashed, th)
    assert s[i] >= M.THROUGH_MIN_SHARE
    assert s[far] < M.THROUGH_MIN_SHARE
    # (only the watched regions are measured)
    watch = np.zeros(len(model.region_ids), bool)
    watch[far] = True
    assert _scores(model, slashed, th, watch)[i] == 0.0
    # a stroke that ends at the outline on one side (a neighbour's fill running over) is not
    # a crossing-out
    overshoot = _slash(linear, model, "cell.r2.c1", angle_deg=35, before_mm=3, after_mm=0)
    assert _scores(model, overshoot, th)[i] < M.THROUGH_MIN_SHARE
    # nor is ink on both sides that stops 0.8 mm short of the outline (neighbours' fills
    # running over their own outlines towards it): the paper next to the outline must be
    # inked (without that rule, THROUGH_NEAR = 0, five of its six steps count: 83 %)
    k = model.dpi / 25.4
    own = np.zeros(model.shape, np.uint8)
    cv2.fillPoly(own, [np.round(M._region_polygon_px(model.template.region("cell.r2.c1"), k))
                       .astype(np.int32)], 1)
    near = cv2.distanceTransform(1 - own, cv2.DIST_L2, 5) < 0.8 * k
    short = slashed.copy()
    short[near] = linear[near]
    assert _scores(model, short, th)[i] < M.THROUGH_MIN_SHARE


def test_a_regions_score_does_not_depend_on_which_others_are_watched():
    # classify_sheet measures the scores once, on the regions read "empty" with confidence
    # before the checks that only flag (vision.marks, session 44), and _check_through judges
    # those still confident after them: the same scores as measured on them alone
    model, linear, th = _sheet("crypts-3")
    ids = model.region_ids
    slashed = linear
    for rid, angle in (("cell.r2.c1", 35), ("cell.r4.c5", 100), ("cell.r6.c2", 160)):
        slashed = _slash(slashed, model, rid, angle_deg=angle, before_mm=3, after_mm=3)
    marked = np.zeros(len(ids), bool)
    marked[ids.index("cell.r4.c4")] = True
    every = _scores(model, slashed, th, marked=marked)
    hit = every >= M.THROUGH_MIN_SHARE
    assert {ids[i] for i in np.flatnonzero(hit)} >= {"cell.r2.c1", "cell.r4.c5", "cell.r6.c2"}
    rng = np.random.default_rng(44)
    for _ in range(3):
        watch = rng.random(len(ids)) < 0.5
        watch[ids.index("cell.r4.c5")] = True
        some = _scores(model, slashed, th, watch, marked)
        assert np.array_equal(some[watch], every[watch])
        assert not some[~watch].any()
    # and the flags are those of the check measuring them itself
    readings = {rid: M.RegionReading(rid, model.template.region(rid).kind, "empty", 0.99, False,
                                     (("empty", 0.99),)) for rid in ids}
    readings["cell.r4.c4"] = M.RegionReading("cell.r4.c4", "cell", "red", 0.99, False,
                                              (("red", 0.99),))
    regions = [model.template.region(rid) for rid in ids]
    flat = slashed.reshape(-1, 3)

    def sample(idx, keep=None):
        return flat[idx if keep is None else idx[keep]]
    own = M._check_through(readings, regions, sample, model, th, None, M.REVIEW_THRESHOLD)
    given = M._check_through(readings, regions, sample, model, th, None, M.REVIEW_THRESHOLD,
                             score=every)
    assert own == given
    assert own["cell.r4.c5"].review and "runs through it" in own["cell.r4.c5"].reason


def test_an_empty_box_between_two_overfilled_ones_is_no_crossing_out():
    # (the bundled sample crypts-2-easy-s4: points.row6.2, empty, between a purple and an
    # orange box whose fills run over into the narrow gaps on both sides)
    model, linear, th = _sheet("crypts-2")
    k = model.dpi / 25.4
    ids = model.region_ids
    i, left, right = (ids.index(f"points.row6.{n}") for n in (2, 1, 3))
    painted = linear.copy()
    for rid, rgb in (("points.row6.1", (0.35, 0.15, 0.5)), ("points.row6.3", (0.9, 0.4, 0.05))):
        m = np.zeros(model.shape, np.uint8)
        cv2.fillPoly(m, [np.round(M._region_polygon_px(model.template.region(rid), k))
                         .astype(np.int32)], 1)
        m = cv2.dilate(m, cv2.getStructuringElement(cv2.MORPH_ELLIPSE,
                                                    (int(3 * k) | 1, int(3 * k) | 1)))
        painted[m > 0] = rgb
    marked = np.zeros(len(ids), bool)
    marked[[left, right]] = True
    # read blind to its neighbours, their overshoot is a stroke through it ...
    assert _scores(model, painted, th)[i] >= M.THROUGH_MIN_SHARE
    # ... which their colour explains
    assert _scores(model, painted, th, marked=marked)[i] < M.THROUGH_MIN_SHARE
    # a slash the other way through it, away from them, is still found
    slashed = _slash(painted, model, "points.row6.2", angle_deg=80, before_mm=3, after_mm=3)
    assert _scores(model, slashed, th, marked=marked)[i] >= M.THROUGH_MIN_SHARE


def test_treasures_and_routes_are_not_looked_at():
    # a route drawn through a Reefs treasure runs on through it with nothing crossed out
    model, linear, th = _sheet("reefs-1")
    i = model.region_ids.index("treasure.1")
    slashed = _slash(linear, model, "treasure.1", angle_deg=0, before_mm=3, after_mm=3)
    assert _scores(model, slashed, th)[i] == 0.0
    g = M.per_model(model, "through", M._through_geometry)
    kinds = {model.template.region(model.region_ids[int(r)]).kind for r in g.regions}
    assert kinds <= set(M.THROUGH_KINDS) and "box" in kinds


@pytest.fixture(scope="module")
def slashed_cell(tmp_path_factory):
    """Photo 94218 of the recipe's crossed-out dev corpus xcal94000 (``make_corpus.py --seed
    94000 --count 300 --painter varied --cross-rate 0.3``: crypts-3, easy, markers): cell.r2.c1
    is crossed out with one pale graphite slash across the triangle's upper corner."""
    return corpus_photo(tmp_path_factory.mktemp("through"), 94000, 300, 94218,
                        ("crypts-3", "easy", True), painter="varied", cross_rate=0.3)


def test_a_slash_over_a_symbols_corner_is_flagged_not_read_empty(slashed_cell, monkeypatch):
    photo, truth = slashed_cell
    assert truth["marks"]["cell.r2.c1"] == "crossed"
    rd = read_photo(photo).readings["cell.r2.c1"]
    assert rd.mark == "empty" and rd.review
    assert rd.reason.startswith("a stroke runs through it")
    assert rd.features["through_share"] >= M.THROUGH_MIN_SHARE
    # without the check: the patch reader's watch of confident "empty" readings (session 48)
    # flags it ...
    import vision.patch_reader as P

    monkeypatch.setattr(M, "THROUGH_MIN_SHARE", 2.0)
    rd = read_photo(photo).readings["cell.r2.c1"]
    assert rd.mark == "empty" and rd.review
    assert rd.reason.startswith("the patch reader disagrees (crossed")
    # ... and without either, a confident error (session 42)
    monkeypatch.setattr(P, "DISSENT_EMPTY_KINDS", ())
    rd = read_photo(photo).readings["cell.r2.c1"]
    assert rd.mark == "empty" and not rd.review
