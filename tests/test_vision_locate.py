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
from vision.locate import SheetLocation, find_page_quad, locate_sheet

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
