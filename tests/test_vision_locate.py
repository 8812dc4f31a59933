"""vision.locate: markers (all rotations, one covered), no markers (page + features),
identification among similar templates, homography accuracy, and the photo errors."""

from __future__ import annotations

import io

import cv2
import numpy as np
import pytest
from PIL import Image

from sheetcheck.errors import (BlurryPhotoError, NoSheetFoundError, SheetCutOffError,
                               UnknownTemplateError)
from vision._geom_render import marker_image, project
from vision._geom_synth import synth_photo, synthetic_template
from vision.decode import decode_photo
from vision.locate import (SheetLocation, _consistent_markers, _grey, _identify, _order_quad,
                           _page_quads_from_lines, _snap_quad_edges, detect_markers, find_page_quad,
                           locate_sheet)

TEMPLATES = [synthetic_template(v) for v in range(4)]


def region_error(loc: SheetLocation, photo, t) -> np.ndarray:
    """Distance (px) between where the location and the truth put every region centre."""
    pts = np.array([r.shape.centre() for r in t.regions])
    return np.linalg.norm(project(loc.homography, pts) - photo.true_px(pts), axis=1)


@pytest.mark.parametrize("rotation", [0, 90, 180, -33])
def test_markers_any_rotation(rotation):
    t = TEMPLATES[1]
    ph = synth_photo(t, seed=3, rotation_deg=rotation)
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    assert loc.template.id == "test-1"
    assert loc.method == "markers" and loc.markers_found == (4, 5, 6, 7)
    err = region_error(loc, ph, t)
    assert err.max() < 0.6, err.max()
    assert loc.quality > 0.8
    assert loc.details["marker_rms_px"] < 0.5


def test_one_marker_covered_by_pencil_uses_the_other_three_and_its_square():
    t = TEMPLATES[0]
    ph = synth_photo(t, seed=5, cover_marker=2, rotation_deg=12)
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    assert loc.template.id == "test-0"
    # the pencil hides the bits, not the square: it is taken where the other three put it
    assert loc.details["markers_detected"] == [0, 1, 3]
    assert loc.details["markers_anchored"] == [2] and loc.markers_found == (0, 1, 2, 3)
    assert loc.method == "markers"
    assert region_error(loc, ph, t).max() < 1.0


@pytest.mark.parametrize("variant", range(4))
def test_no_markers_identifies_each_template(variant):
    t = TEMPLATES[variant]
    ph = synth_photo(t, seed=10 + variant, markers=False, rotation_deg=[0, 90, 180, 270][variant] + 4)
    loc = locate_sheet(ph.image, templates=TEMPLATES)
    assert loc.template.id == t.id, loc.details["candidates"]
    assert loc.method in ("features", "page")
    assert loc.markers_found == ()
    cands = loc.details["candidates"]
    assert cands[0]["template"] == t.id and len(cands) >= 2
    assert loc.details["identification_margin"] > 0.03
    assert np.median(region_error(loc, ph, t)) < 1.5


def test_template_id_restricts_the_search():
    ph = synth_photo(TEMPLATES[2], seed=1, markers=False)
    loc = locate_sheet(ph.image, templates=TEMPLATES, template_id="test-2")
    assert loc.template.id == "test-2"
    assert [c["template"] for c in loc.details["candidates"]] == ["test-2"] * len(loc.details["candidates"])


def test_template_id_that_contradicts_the_markers():
    ph = synth_photo(TEMPLATES[0], seed=2)
    with pytest.raises(UnknownTemplateError, match="markers of template 'test-0', not of 'test-3'"):
        locate_sheet(ph.image, templates=TEMPLATES, template_id="test-3")


def test_unknown_template_id():
    ph = synth_photo(TEMPLATES[0], seed=2)
    with pytest.raises(UnknownTemplateError, match="unknown template 'nope'"):
        locate_sheet(ph.image, templates=TEMPLATES, template_id="nope")


def test_markers_of_two_templates_choose_by_count_and_say_so():
    t = TEMPLATES[0]
    ph = synth_photo(t, seed=4, fill=0.7, size=(1100, 720))
    img = ph.image.copy()
    # a marker of another template lying on the table next to the sheet
    stray = marker_image("DICT_4X4_50", 5, 36)
    img[8:72, 8:72] = 255
    img[22:58, 22:58] = stray[..., None]
    loc = locate_sheet(img, templates=TEMPLATES)
    assert loc.template.id == "test-0" and loc.markers_found == (0, 1, 2, 3)
    assert loc.details["other_templates_markers"] == {"test-1": [5]}
    assert "chose test-0 with 4 marker(s)" in loc.details["template_choice"]


def test_homography_is_in_decoded_pixels_when_the_jpeg_is_reduced():
    t = TEMPLATES[3]
    ph = synth_photo(t, seed=6, size=(2400, 1800), jpeg_quality=None)
    b = io.BytesIO()
    Image.fromarray(ph.image).save(b, "JPEG", quality=92)
    d = decode_photo(b.getvalue(), max_long_side=1200)
    assert d.scale == pytest.approx(0.5)
    loc = locate_sheet(d.image, templates=TEMPLATES)
    pts = np.array([r.shape.centre() for r in t.regions])
    err = np.linalg.norm(project(loc.homography, pts) - ph.true_px(pts) * d.scale, axis=1)
    assert err.max() < 0.6


def test_page_quad_on_a_cluttered_table():
    ph = synth_photo(TEMPLATES[0], seed=8, markers=False, rotation_deg=20, fill=0.6)
    q = find_page_quad(ph.image)
    t = TEMPLATES[0]
    true = ph.true_px(np.array([[0, 0], [t.width_mm, 0], [t.width_mm, t.height_mm], [0, t.height_mm]]))
    # same corners in some cyclic order, within a few px
    errs = [np.abs(np.roll(q, -s, 0) - true).max() for s in range(4)]
    assert min(errs) < 6


# --- photo errors ----------------------------------------------------------------------------

def test_no_sheet_in_a_photo_of_the_table():
    rng = np.random.default_rng(0)
    table = cv2.GaussianBlur(rng.normal(110, 30, (600, 800, 3)).astype(np.float32), (0, 0), 4)
    img = np.clip(table, 0, 255).astype(np.uint8)
    with pytest.raises(NoSheetFoundError, match="no score sheet found.*plain surface"):
        locate_sheet(img, templates=TEMPLATES)


def test_blank_paper_is_no_sheet():
    img = np.full((600, 800, 3), 90, np.uint8)
    cv2.fillConvexPoly(img, np.array([[150, 100], [650, 120], [640, 500], [160, 480]]), (235, 235, 230))
    with pytest.raises(NoSheetFoundError, match="no score sheet found"):
        locate_sheet(img, templates=TEMPLATES)


@pytest.mark.parametrize("markers", [True, False])
def test_sheet_cut_off_by_the_frame(markers):
    ph = synth_photo(TEMPLATES[0], seed=9, markers=markers, fill=0.8, offset=(260, 0))
    with pytest.raises(SheetCutOffError, match="cut off .*Retake the photo with all four corners in view"):
        locate_sheet(ph.image, templates=TEMPLATES)


def test_blur_is_measured_in_mm_on_the_page():
    t = TEMPLATES[0]
    ph = synth_photo(t, seed=7, size=(1280, 960))
    px_per_mm = np.sqrt(abs(np.linalg.det(ph.homography[:2, :2])))  # ~ at the page centre
    blurs = []
    for sigma_mm in (0.0, 0.6, 1.2):
        img = ph.image if sigma_mm == 0 else cv2.GaussianBlur(ph.image, (0, 0), sigma_mm * px_per_mm)
        blurs.append(locate_sheet(img, templates=TEMPLATES).details["blur_mm"])
    assert blurs[0] < blurs[1] < blurs[2]
    assert blurs[2] == pytest.approx(1.2, abs=0.35)


def test_blurry_photo_is_refused_and_a_sharp_one_is_not():
    t = TEMPLATES[0]
    sharp = locate_sheet(synth_photo(t, seed=7, blur_px=0.8).image, templates=TEMPLATES)
    assert sharp.details["blur_mm"] < 0.8
    with pytest.raises(BlurryPhotoError, match="too blurred.*Hold the phone still"):
        locate_sheet(synth_photo(t, seed=7, blur_px=8.0).image, templates=TEMPLATES)
    loc = locate_sheet(synth_photo(t, seed=7, blur_px=8.0).image, templates=TEMPLATES, check_blur=False)
    assert loc.template.id == "test-0" and "blur_mm" not in loc.details



def test_deferred_checks_give_the_same_location_and_refuse_a_blurred_photo():
    """locate_sheet(defer_checks=True): the location as soon as the homography is known, and
    the registration and blur checks as a function to run later, which completes it to the
    plain call's location or raises the plain call's error."""
    t = TEMPLATES[0]
    img = synth_photo(t, seed=7, blur_px=0.8).image
    plain = locate_sheet(img, templates=TEMPLATES)
    early, complete = locate_sheet(img, templates=TEMPLATES, defer_checks=True)
    assert "blur_mm" not in early.details and "registration" not in early.details
    assert early.details["markers_printed"] and early.quality == plain.quality
    np.testing.assert_array_equal(early.homography, plain.homography)
    loc = complete()
    np.testing.assert_array_equal(loc.homography, plain.homography)
    assert list(loc.details.items()) == list(plain.details.items())
    blurred, complete = locate_sheet(synth_photo(t, seed=7, blur_px=8.0).image, templates=TEMPLATES,
                                     defer_checks=True)
    assert blurred.template.id == t.id
    with pytest.raises(BlurryPhotoError, match="too blurred"):
        complete()


def test_bad_array():
    with pytest.raises(ValueError, match="uint8"):
        locate_sheet(np.zeros((100, 100, 3), np.float32), templates=TEMPLATES)
    with pytest.raises(NoSheetFoundError, match="only 20 x 10 px"):
        locate_sheet(np.zeros((10, 20, 3), np.uint8), templates=TEMPLATES)


# --- the bundled sheets, photographed by the simulator ---------------------------------------

def _bundled():
    from calibration.template import template_ids
    ids = template_ids()
    if len(ids) < 6:
        pytest.skip("bundled templates not installed")
    return ids


@pytest.mark.parametrize("index", range(6))
def test_each_bundled_sheet_is_identified_without_markers(index):
    from calibration.template import get_template
    from sheetcheck.simulator import random_marks, simulate_photo

    tid = _bundled()[index]
    t = get_template(tid)
    sp = simulate_photo(t, random_marks(t, np.random.default_rng(index)), seed=100 + index,
                        preset="easy", markers=False, overrides={"output_long_side": 1024})
    d = decode_photo(sp.jpeg)
    loc = locate_sheet(d.image)
    assert loc.template.id == tid, loc.details.get("identification")
    assert loc.markers_found == () and not loc.details["ambiguous"]
    ids = list(sp.truth["region_centres_px"])
    true_px = np.array([sp.truth["region_centres_px"][i] for i in ids]) * d.scale
    est = project(loc.homography, np.array([t.region(i).shape.centre() for i in ids]))
    # a global homography of a photo with lens distortion (and maybe a curl): a few px
    assert np.median(np.linalg.norm(est - true_px, axis=1)) < 4.0


@pytest.mark.parametrize("rotation", [0, 180])
def test_bundled_sheet_with_markers_homography_matches_the_truth(rotation):
    from calibration.template import get_template
    from sheetcheck.simulator import random_marks, simulate_photo

    tid = _bundled()[1]
    t = get_template(tid)
    sp = simulate_photo(t, random_marks(t, np.random.default_rng(1)), seed=7, preset="typical",
                        overrides={"output_long_side": 1600, "rotation_deg": rotation, "k1": 0.0,
                                   "k2": 0.0, "curl_type": "none"})
    assert sp.truth["homography_exact"]
    d = decode_photo(sp.jpeg, max_long_side=1200)  # reduced: the homography is in decoded px
    loc = locate_sheet(d.image)
    assert loc.template.id == tid and loc.method == "markers" and len(loc.markers_found) >= 3
    pts = np.array([r.shape.centre() for r in t.readable_regions()])
    truth = project(np.array(sp.truth["homography"]), pts) * d.scale
    err = np.linalg.norm(project(loc.homography, pts) - truth, axis=1)
    assert err.max() < 1.5, err.max()


# --- hard photos: unreadable markers, curled pages, similar levels, pages that blend in ------

def _scramble_marker_bits(ph, t, *, seed: int = 0) -> np.ndarray:
    """The photo with every marker's inner 4 x 4 cells painted over in grey blotches: the
    squares stay, the ids cannot be read (what blur, glare or a small page do to real ones)."""
    img = ph.image.copy()
    rng = np.random.default_rng(seed)
    for m in t.markers:
        cell = m.size / 6
        inner = np.array([[m.x + cell, m.y + cell], [m.x + 5 * cell, m.y + cell],
                          [m.x + 5 * cell, m.y + 5 * cell], [m.x + cell, m.y + 5 * cell]])
        poly = np.round(ph.true_px(inner) - 0.5).astype(np.int32)
        cv2.fillConvexPoly(img, poly, tuple(int(v) for v in rng.integers(90, 160, 3)))
    return img


def test_no_marker_readable_page_found_by_the_marker_squares():
    t = TEMPLATES[2]
    ph = synth_photo(t, seed=21, rotation_deg=150, tilt=0.18)
    img = _scramble_marker_bits(ph, t)
    assert detect_markers(_grey(img)) == {}  # nothing readable left
    loc = locate_sheet(img, templates=TEMPLATES)
    assert loc.template.id == "test-2"
    assert loc.details["markers_anchored"] == [8, 9, 10, 11] and loc.method == "markers"
    assert loc.details["page_from"] == "unreadable marker squares"
    assert region_error(loc, ph, t).max() < 1.0


def test_two_read_markers_completed_by_the_other_two_squares():
    t = TEMPLATES[3]
    ph = synth_photo(t, seed=22, rotation_deg=-20)
    img = ph.image.copy()
    clean = _scramble_marker_bits(ph, t)
    # markers 12 and 14 keep their bits, 13 and 15 lose them
    for m in (t.markers[1], t.markers[3]):
        box = ph.true_px(np.array([[m.x, m.y], [m.x + m.size, m.y + m.size]]))
        (x0, y0), (x1, y1) = np.floor(box.min(0)).astype(int), np.ceil(box.max(0)).astype(int)
        img[y0:y1, x0:x1] = clean[y0:y1, x0:x1]
    loc = locate_sheet(img, templates=TEMPLATES)
    assert loc.template.id == "test-3"
    assert sorted(detect_markers(_grey(img))) == [12, 14]
    assert loc.details["markers_anchored"] == [13, 15] and loc.markers_found == (12, 13, 14, 15)
    assert region_error(loc, ph, t).max() < 1.0


def _markers_seen(t, H, shift: dict | None = None) -> dict:
    found = {m.id: project(H, m.corners_mm()) for m in t.markers}
    for mid, d in (shift or {}).items():
        found[mid] = found[mid] + np.asarray(d, float)
    return found


def test_markers_of_a_curled_page_are_kept_and_a_misread_id_is_not():
    t = TEMPLATES[0]
    H = np.array([[3.0, 0.4, 150.0], [-0.3, 3.1, 90.0], [0.0002, 0.0004, 1.0]])
    side = float(np.linalg.norm(np.subtract(*project(H, t.markers[2].corners_mm()[:2]))))
    # a bend lifts the far corner by 1.5 marker sides: still that marker, only displaced
    found = _markers_seen(t, H, {2: (1.5 * side, 0.8 * side)})
    mids, dropped = _consistent_markers(t, found, [0, 1, 2, 3])
    assert mids == [0, 1, 2, 3] and dropped == []
    # marker 1's square read with id 2 (and 2 unseen): it sits a page-width from where 2 belongs
    found = _markers_seen(t, H)
    found[2] = found.pop(1)
    mids, dropped = _consistent_markers(t, found, [0, 2, 3])
    assert dropped == [2] and mids == [0, 3]


def test_levels_are_compared_under_the_same_registration():
    # The photo is of test-1. Its own candidate homography is 6 mm off (a registration that
    # went worse), the other candidate's is right: the print must still say test-1.
    t1, t2 = TEMPLATES[1], TEMPLATES[2]
    ph = synth_photo(t1, seed=23, markers=False, marks=4)
    off = ph.homography @ np.array([[1, 0, 6.0], [0, 1, -4.0], [0, 0, 1]])
    i, scores, margin = _identify(ph.image, [(t1, off), (t2, ph.homography)])
    assert i == 0 and margin > 0.05, (scores, margin)


def _bright_checks(shape, period: int = 24) -> np.ndarray:
    yy, xx = np.mgrid[:shape[0], :shape[1]]
    a = ((yy // period) % 2).astype(np.float32)
    b = ((xx // period) % 2).astype(np.float32)
    # a cream and blue gingham as light as the paper where its threads cross
    base = np.array([232, 222, 196], np.float32)
    blue = np.array([120, 160, 220], np.float32)
    mix = (0.5 * (a + b))[..., None]
    return np.clip(base * (1 - mix) + blue * mix, 0, 255)


def test_page_on_a_bright_gingham_is_found_by_its_straight_edges():
    t = TEMPLATES[1]
    ph = synth_photo(t, seed=24, markers=False, rotation_deg=-28, fill=0.6, shade=0.0, jpeg_quality=None)
    page = np.round(ph.true_px(np.array([[0, 0], [t.width_mm, 0], [t.width_mm, t.height_mm],
                                         [0, t.height_mm]])) - 0.5).astype(np.int32)
    mask = np.zeros(ph.image.shape[:2], np.uint8)
    cv2.fillConvexPoly(mask, page, 1)
    mask = cv2.erode(mask, np.ones((3, 3), np.uint8))[..., None].astype(bool)
    img = np.where(mask, ph.image, _bright_checks(ph.image.shape[:2]).astype(np.uint8))
    quads = _page_quads_from_lines(img)
    true = ph.true_px(np.array([[0, 0], [t.width_mm, 0], [t.width_mm, t.height_mm], [0, t.height_mm]]))
    assert quads and min(np.abs(np.roll(quads[0], -s, 0) - true).max() for s in range(4)) < 5
    loc = locate_sheet(img, templates=TEMPLATES)
    assert loc.template.id == "test-1"
    assert np.median(region_error(loc, ph, t)) < 1.5


def test_a_shaded_band_cut_off_by_the_threshold_is_snapped_back_to_the_page_edge():
    white = np.full((300, 400), 30, np.uint8)  # a dark table
    page = np.array([[60, 50], [340, 40], [350, 250], [70, 260]], np.float64)
    cv2.fillConvexPoly(white, page.astype(np.int32), 220)
    # the page's lower band lies in shadow: still far lighter than the table
    band = np.array([[67, 215], [348, 215], [350, 250], [70, 260]], np.int32)
    shade = np.zeros_like(white)
    cv2.fillConvexPoly(shade, band, 1)
    white[(shade > 0) & (white > 100)] = 140
    cut = page.copy()
    cut[2:, 1] -= 15  # a threshold stopped inside the shadow
    snapped = _snap_quad_edges(cut, white)
    assert np.abs(_order_quad(snapped) - page).max() < 2.0


def test_photo_grey_handed_from_locate_to_rectify():
    """locate hands its grey of the photo to rectify (one conversion per photo); the hand-over
    must never give back the grey of another photo, and is used once."""
    from vision._geom_render import photo_grey

    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)
    want = cv2.cvtColor(a, cv2.COLOR_RGB2GRAY)
    g = photo_grey(a, remember=True)
    assert np.array_equal(g, want)
    with pytest.raises(ValueError, match="read-only"):
        g[0, 0] = 0  # shared between the stages: nobody may draw on it
    b = a.copy()  # equal pixels, another photo: converted anew (and the hand-over dropped)
    gb = photo_grey(b)
    assert gb is not g and np.array_equal(gb, want)
    assert photo_grey(a) is not g  # dropped by the call for the other photo
    g = photo_grey(a, remember=True)
    assert photo_grey(a) is g  # the same photo: taken over ...
    assert photo_grey(a) is not g  # ... once
    photo_grey(a, remember=True)
    a[::7, ::5] = 255 - a[::7, ::5]  # changed in place (probed pixels among them): anew
    assert np.array_equal(photo_grey(a), cv2.cvtColor(a, cv2.COLOR_RGB2GRAY))
    strided = a[:, ::2]  # not contiguous: never remembered
    assert np.array_equal(photo_grey(strided, remember=True),
                          cv2.cvtColor(strided, cv2.COLOR_RGB2GRAY))
    gs = photo_grey(strided)
    assert np.array_equal(gs, cv2.cvtColor(strided, cv2.COLOR_RGB2GRAY))
    assert photo_grey(want) is want  # already grey


# --- the fast marker search on two threads -------------------------------------------------

def _two_threads(monkeypatch):
    from vision import _geom_threads
    monkeypatch.setattr(_geom_threads, "idle_core", lambda: True)  # (however busy the machine)
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    return before


@pytest.mark.parametrize("rotation,portrait", [(0, False), (-33, False), (90, True)])
def test_fast_marker_search_on_two_halves_finds_what_the_whole_image_shows(rotation, portrait,
                                                                           monkeypatch):
    """The halves (cut across the long side, overlapping) give the same markers with the same
    refined corners as the fast detector on the whole image, landscape or portrait."""
    from vision.locate import _detect_fast_split, _detect_image

    before = _two_threads(monkeypatch)
    try:
        for t, seed in ((TEMPLATES[1], 3), (TEMPLATES[2], 11)):
            img = synth_photo(t, seed=seed, rotation_deg=rotation, size=(1400, 1050)).image
            grey = _grey(img)
            if portrait:
                grey = np.ascontiguousarray(np.rot90(grey))  # (a turn, not a mirror)
            small = _detect_image(grey)
            whole = detect_markers(grey, fast=True, small=small)
            halves = _detect_fast_split(grey, small, "DICT_4X4_50")
            assert len(whole) == 4 and sorted(halves) == sorted(whole)
            for mid, c in whole.items():
                np.testing.assert_array_equal(halves[mid], c)
    finally:
        cv2.setNumThreads(before)


def test_a_marker_across_the_middle_wider_than_the_overlap_is_left_to_the_whole_image(monkeypatch):
    """The halves cannot see a marker wider than their overlap lying across the cut; the whole
    image can. locate_sheet then detects on the whole image, so the location is the one a
    single thread finds."""
    from vision import locate as locate_mod
    from vision.locate import _detect_fast_split, _detect_image

    before = _two_threads(monkeypatch)
    try:
        grey = np.full((750, 1000), 255, np.uint8)
        grey[200:500, 350:650] = marker_image("DICT_4X4_50", 3, 300)  # across the cut at 500
        small = _detect_image(grey)
        assert 3 in detect_markers(grey, fast=True, small=small)
        assert 3 not in _detect_fast_split(grey, small, "DICT_4X4_50")

        img = synth_photo(TEMPLATES[0], seed=5).image
        cv2.setNumThreads(1)
        one = locate_sheet(img, templates=TEMPLATES)
        cv2.setNumThreads(2)
        # halves that miss a marker: the whole image is searched again, the same location
        monkeypatch.setattr(locate_mod, "_detect_fast_split", lambda *a: {})
        two = locate_sheet(img, templates=TEMPLATES)
        np.testing.assert_array_equal(two.homography, one.homography)
        assert two.markers_found == one.markers_found == (0, 1, 2, 3)
    finally:
        cv2.setNumThreads(before)
