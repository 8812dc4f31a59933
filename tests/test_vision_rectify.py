"""vision.rectify: the frame convention, the valid mask, and local refinement measured against
the truth (synthetic curled sheets and a simulated hard-preset photo)."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from calibration.template import get_template, template_ids
from vision._geom_render import MM_PER_INCH, frame_size, project, reference_render
from vision.colour import SRGB_TO_LINEAR
from vision._geom_synth import synth_photo, synthetic_template
from vision.locate import SheetLocation, locate_sheet
from vision.rectify import RectifiedSheet, frame_position, rectify_sheet

TEMPLATES = [synthetic_template(v) for v in range(4)]
DPI = 100.0
K = DPI / MM_PER_INCH


def offsets(rs: RectifiedSheet, loc: SheetLocation, true_px: np.ndarray, centres_mm: np.ndarray):
    """Where each region's content really lies in ``rs.image`` vs where its outline is (px)."""
    q0 = K * project(np.linalg.inv(loc.homography), true_px)  # under the plain warp
    return np.linalg.norm(frame_position(rs, q0) - K * centres_mm, axis=1)


def test_a_clean_render_rectifies_onto_itself():
    # The photo *is* the render at 100 dpi: the homography is the mm -> px scaling, and the
    # output must reproduce the render pixel for pixel (this pins the half-pixel convention).
    t = TEMPLATES[0]
    ref = np.array(reference_render(t, dpi=DPI, markers=True))
    loc = SheetLocation(template=t, homography=np.diag([K, K, 1.0]), method="markers",
                        markers_found=(0, 1, 2, 3), quality=1.0, details={"markers_printed": True})
    rs = rectify_sheet(ref, loc, dpi=DPI, refine=False)
    assert rs.image.shape == ref.shape
    assert np.abs(rs.image.astype(int) - ref).max() <= 1
    assert rs.valid.all()
    assert rs.refinement["applied"] is False


def test_valid_marks_what_came_from_the_photo():
    t = TEMPLATES[0]
    ph = synth_photo(t, seed=1)
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    # shift the sheet so that its right part falls outside the photo
    T = np.array([[1, 0, 300.0], [0, 1, 0], [0, 0, 1]])
    moved = SheetLocation(t, T @ loc.homography, loc.method, loc.markers_found, loc.quality, loc.details)
    rs = rectify_sheet(ph.image, moved, refine=False)
    w, h = frame_size(t, DPI)
    assert rs.valid.shape == (h, w)
    assert rs.valid[:, : w // 4].all() and not rs.valid[:, -5:].any()
    # outside the photo is paper white (one px of bilinear blending at the edge aside)
    outside = cv2.erode((~rs.valid).astype(np.uint8), np.ones((3, 3), np.uint8)) > 0
    assert outside.sum() > 10000
    assert (rs.image[outside] == 255).all()


@pytest.mark.parametrize("seed,curl", [(1, 4.0), (3, 7.0)])
def test_refinement_puts_regions_of_a_curled_sheet_under_their_outlines(seed, curl):
    t = TEMPLATES[seed % 4]
    ph = synth_photo(t, seed=seed, curl_mm=curl, size=(1280, 960), rotation_deg=25 * seed)
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    c = np.array([r.shape.centre() for r in t.regions])
    plain = rectify_sheet(ph.image, loc, refine=False)
    rs = rectify_sheet(ph.image, loc)
    before = offsets(plain, loc, ph.true_px(c), c)
    after = offsets(rs, loc, ph.true_px(c), c)
    assert np.median(before) > 4.0  # the curl really moves things
    assert np.median(after) < 0.8 and np.percentile(after, 95) < 1.6, (np.median(after), after.max())
    r = rs.refinement
    assert r["applied"] is True
    assert r["residual_px_before"] > 3.0 > 1.0 > r["residual_px_after"]
    assert r["max_shift_px"] > 4.0
    assert rs.image.shape[:2] == plain.image.shape[:2] == frame_size(t, DPI)[::-1]


def test_refinement_leaves_a_flat_sheet_in_place():
    t = TEMPLATES[2]
    ph = synth_photo(t, seed=4, size=(1280, 960))
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    c = np.array([r.shape.centre() for r in t.regions])
    rs = rectify_sheet(ph.image, loc)
    after = offsets(rs, loc, ph.true_px(c), c)
    assert np.median(after) < 0.5 and after.max() < 1.2
    # a flat page is not taken for bent: no wide-tile pass, the output as before that pass existed
    assert rs.refinement["bent"] is False and "tiles_wide" not in rs.refinement


def _hard_bent_photo(tid, seed, **curl):
    """A simulated hard 1280 px photo of a bent page, located (checked to be ``tid``): the
    photo, its location, the true region centres in the photo and in the template (mm)."""
    from sheetcheck.simulator import random_marks, simulate_photo

    t = get_template(tid)
    sp = simulate_photo(t, random_marks(t, np.random.default_rng(seed)), seed=seed, preset="hard",
                        overrides={"output_long_side": 1280, "curl_type": "bend", **curl})
    img = np.array(sp.image)
    loc = locate_sheet(img)
    assert loc.template.id == tid
    ids = list(sp.truth["region_centres_px"])
    true_px = np.array([sp.truth["region_centres_px"][i] for i in ids])
    c = np.array([t.region(i).shape.centre() for i in ids])
    return img, loc, true_px, c


def test_hard_simulated_photo_before_and_after():
    if "reefs-1" not in template_ids():
        pytest.skip("bundled templates not installed")
    img, loc, true_px, c = _hard_bent_photo("reefs-1", 2, curl_amount_mm=12.0)
    before = offsets(rectify_sheet(img, loc, refine=False), loc, true_px, c)
    after = offsets(rectify_sheet(img, loc), loc, true_px, c)
    assert np.median(before) > 2.0
    assert np.median(after) < 1.0 and np.median(after) < np.median(before) / 2


def test_a_strongly_bent_page_puts_every_region_under_its_outline():
    # 18 mm of bend lifting the left edge (the hard preset's range is 15-20 mm): near that edge
    # the plain homography is 4-6 mm off, beyond what the coarse pass alone believes (4.5 mm);
    # before the wide-tile pass existed this photo kept a p95 region error of 8.7 px (max 15.5).
    if "crypts-2" not in template_ids():
        pytest.skip("bundled templates not installed")
    img, loc, true_px, c = _hard_bent_photo("crypts-2", 5, curl_amount_mm=18.0, curl_axis="x",
                                            curl_position=0.65, curl_side=-1)
    before = offsets(rectify_sheet(img, loc, refine=False), loc, true_px, c)
    rs = rectify_sheet(img, loc)
    after = offsets(rs, loc, true_px, c)
    assert np.percentile(before, 95) > 12.0 and before.max() > 18.0  # the bend really moves things
    assert rs.refinement["bent"] is True and rs.refinement["tiles_wide"] >= 10
    # every region within a few px of its outline (regions are 24-40 px across at 100 dpi)
    assert np.median(after) < 1.0 and np.percentile(after, 95) < 3.5 and after.max() < 6.0, (
        np.median(after), np.percentile(after, 95), after.max())


def test_the_field_of_a_bent_page_continues_past_the_outer_tiles():
    # A displacement growing linearly towards one edge: past the last tile centre the field
    # keeps (half) the trend instead of holding the last value, on an uneven last column.
    from vision.rectify import _GridField

    cx = np.array([10.0, 30.0, 50.0, 62.0])  # the last column flush with the edge: uneven
    cy = np.array([10.0, 30.0])
    vals = np.zeros((2, 4, 2), np.float32)
    vals[..., 0] = 0.5 * cx[None, :]  # dx = x / 2
    f = _GridField(vals, cy, cx)
    inside = f.at(np.array([[40.0, 20.0], [56.0, 10.0]]))
    assert np.allclose(inside[:, 0], [20.0, 28.0], atol=1e-3) and np.allclose(inside[:, 1], 0)
    past = f.at(np.array([[68.0, 20.0]]))[0, 0]
    assert 31.0 < past < 34.0  # 31 held flat, 34 the full linear trend; half of it is 32.5


def test_bad_arguments():
    t = TEMPLATES[0]
    loc = SheetLocation(t, np.diag([K, K, 1.0]), "markers", (), 1.0, {})
    with pytest.raises(ValueError, match="uint8"):
        rectify_sheet(np.zeros((10, 10), np.uint8), loc)
    with pytest.raises(ValueError, match="dpi must be between"):
        rectify_sheet(np.zeros((100, 100, 3), np.uint8), loc, dpi=5)


def test_prepare_builds_the_references_a_phone_photo_needs():
    # After prepare(), rectifying (and locating) a high-resolution photo of the template
    # builds nothing new: the first photo of each template costs what the others cost.
    import vision.locate as locate_mod
    import vision.rectify as rectify_mod

    t = TEMPLATES[1]
    ph = synth_photo(t, seed=2, size=(2000, 1500))
    rectify_mod._ref_cache.clear()
    locate_mod._ref_ink_cache.clear()
    rectify_mod.prepare(t)
    locate_mod.prepare(t)
    built_r, built_l = set(rectify_mod._ref_cache), set(locate_mod._ref_ink_cache)
    assert len(built_r) == 2 and len(built_l) == 2
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    assert loc.template.id == t.id and loc.method == "markers"
    rs = rectify_sheet(ph.image, loc)
    assert rs.refinement["measure_dpi"] == rectify_mod.MEASURE_DPI_MAX
    assert set(rectify_mod._ref_cache) == built_r
    assert set(locate_mod._ref_ink_cache) == built_l


def test_prewindowed_tiles_give_opencvs_estimates_bit_for_bit():
    # rectify windows every tile of a pass in one product and calls phaseCorrelate without a
    # window; the estimates must be exactly those of passing the window (no drift at all)
    from vision.rectify import _gather

    rng = np.random.default_rng(5)
    T = 48
    ref = cv2.GaussianBlur((rng.random((200, 200)) > 0.96).astype(np.float32), (0, 0), 1.2)
    photo = cv2.warpAffine(ref, np.float32([[1, 0, 3], [0, 1, -2]]), (200, 200))
    photo += rng.normal(0, 0.02, photo.shape).astype(np.float32)
    win = cv2.createHanningWindow((T, T), cv2.CV_32F)
    yx = np.array([[20, 30], [60, 100], [120, 40], [140, 140], [0, 0]])
    refs, tiles = _gather(ref, yx, T) * win, _gather(photo, yx, T) * win
    for k, (y, x) in enumerate(yx):
        expect = cv2.phaseCorrelate(ref[y:y + T, x:x + T].copy(), photo[y:y + T, x:x + T].copy(), win)
        assert cv2.phaseCorrelate(refs[k], tiles[k]) == expect
        # photo(q + shift) ~ ref(q): the content moved by (+3, -2) px
        assert abs(expect[0][0] - 3) < 0.3 and abs(expect[0][1] + 2) < 0.3


def test_light_samples_equal_the_full_illumination():
    # The light stage computes the illumination only at the pixels the reader samples; those
    # values must be the full-size upsampled illumination's, to float rounding, also in the
    # rows and columns past the last whole block (sides 203 x 157 are not multiples of 12).
    from vision.light import normalise_light

    rng = np.random.default_rng(3)
    h, w = 157, 203
    yy, xx = np.mgrid[0:h, 0:w]
    shade = 0.55 + 0.4 * (xx / w) * (0.6 + 0.4 * yy / h)
    img = np.clip(np.stack([shade * 250, shade * 235, shade * 210], -1), 0, 255).astype(np.uint8)
    img[40:60, 50:120] = (200, 40, 40)  # a pencil mark on the paper
    paper = np.ones((h, w), bool)
    light = normalise_light(img, paper_mask=paper)
    idx = rng.choice(h * w, 5000, replace=False)
    idx = np.concatenate([idx, [h * w - 1, w - 1, (h - 1) * w]])  # corners past the blocks
    full = light.illumination_full
    assert full.shape == (h, w, 3) and full.dtype == np.float32
    expect = (SRGB_TO_LINEAR[img.reshape(-1, 3)[idx]] / full.reshape(-1, 3)[idx])
    fresh = normalise_light(img, paper_mask=paper)  # no full-size illumination built yet
    got = fresh.sample(idx)
    assert "illumination_full" not in fresh.__dict__
    assert np.allclose(got, expect, rtol=2e-6, atol=1e-7)
    # paper comes out white, the red mark stays red and was not taken for paper
    paper_px = np.flatnonzero(((yy < 30) | (yy > 80)).reshape(-1))
    assert np.allclose(np.median(fresh.sample(paper_px), 0), 1.0, atol=0.03)
    mark = fresh.sample(np.array([50 * w + 80]))[0]
    assert mark[0] > 3 * mark[1] and mark[0] > 3 * mark[2]


def test_measure_alignment_finds_a_known_shift_and_refuses_tiny_tiles():
    from vision.rectify import measure_alignment

    t = TEMPLATES[0]
    ref = np.asarray(reference_render(t, dpi=40.0, markers=True))
    ink = (1.0 - cv2.cvtColor(ref, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0)
    moved = cv2.warpAffine(ink, np.float32([[1, 0, 2.0], [0, 1, 1.0]]), ink.shape[::-1])
    shifts, weight, _ = measure_alignment(moved, ink, tile=32, stride=32, max_shift=6.0)
    ok = weight > 0
    assert ok.sum() >= 10
    assert np.allclose(np.median(shifts[ok], axis=0), (2.0, 1.0), atol=0.15)
    with pytest.raises(ValueError, match="at least 8 px"):
        measure_alignment(moved, ink, tile=4, stride=32, max_shift=6.0)


def test_oblong_tiles_find_a_known_shift():
    # the strip passes measure on tiles 0.4 x 2 fine tiles; (rows, columns) both ways round.
    # (Whole-px shifts: phase correlation's sub-pixel estimate is biased towards whole px at
    # half-px shifts, square tiles too, and the narrow side's Hanning window reads ~10 % short.)
    from vision.rectify import measure_alignment

    t = TEMPLATES[1]
    ref = np.asarray(reference_render(t, dpi=40.0, markers=True))
    ink = (1.0 - cv2.cvtColor(ref, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0)
    moved = cv2.warpAffine(ink, np.float32([[1, 0, 2.0], [0, 1, 1.0]]), ink.shape[::-1])
    for tile, stride in (((16, 64), (8, 32)), ((64, 16), (32, 8))):
        shifts, weight, (cy, cx) = measure_alignment(moved, ink, tile=tile, stride=stride,
                                                     max_shift=5.0)
        ok = weight > 0
        assert ok.sum() >= 10 and shifts.shape[:2] == (len(cy), len(cx))
        assert np.allclose(np.median(shifts[ok], axis=0), (2.0, 1.0), atol=0.2)
        assert cy[0] == tile[0] / 2 - 0.5 and cx[0] == tile[1] / 2 - 0.5
    with pytest.raises(ValueError, match="at least 8 px"):
        measure_alignment(moved, ink, tile=(4, 64), stride=(2, 32), max_shift=5.0)


def test_a_folded_page_puts_the_regions_along_the_crest_under_their_outlines(monkeypatch):
    # A 6.5 mm fold across the page (the crest a line along x at 45 % of its height): the
    # paper rises to a ridge, so the displacement has a kink along the crest that the fine
    # tiles, one tile apart and smoothed over a tile, flatten. Before the crest and strip
    # passes this photo kept a p95 region error of 6.9 px (max 10.4), all along the crest.
    if "reefs-3" not in template_ids():
        pytest.skip("bundled templates not installed")
    import vision.rectify as rectify_mod

    img, loc, true_px, c = _hard_bent_photo("reefs-3", 11, curl_type="fold", curl_amount_mm=6.5,
                                            curl_axis="y", curl_position=0.45, curl_side=1,
                                            fold_width_mm=70.0)
    before = offsets(rectify_sheet(img, loc, refine=False), loc, true_px, c)
    rs = rectify_sheet(img, loc)
    after = offsets(rs, loc, true_px, c)
    assert np.percentile(before, 95) > 10.0  # the fold really moves things
    crest = rs.refinement["crest"]
    assert rs.refinement["bent"] is True and crest["kept"] is True
    assert crest["mean_px_with"] < crest["mean_px_without"]
    assert crest.get("strips_x") or crest.get("strips_y")
    assert np.median(after) < 1.2 and np.percentile(after, 95) < 3.0 and after.max() < 6.0, (
        np.median(after), np.percentile(after, 95), after.max())
    # without the crest (and so the strip) passes the crest is where the regions miss
    monkeypatch.setattr(rectify_mod, "_crest_passes", lambda *a, **k: None)
    rs0 = rectify_sheet(img, loc)
    without = offsets(rs0, loc, true_px, c)
    assert "crest" not in rs0.refinement
    assert np.percentile(without, 95) > 5.0 and without.max() > 8.0
