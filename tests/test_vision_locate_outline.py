"""The page route's last resort: page outlines from the straight runs of bright components'
outlines (vision.locate._page_quads_from_outline), for a page with a corner in deep shadow on a
busy cloth, where the whiteness hull cuts the corner off and the straight-edge search sees
only the cloth."""

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from vision import locate

ROOT = Path(__file__).resolve().parent.parent


def _scene(shadow: float):
    """A 640 x 480 gingham cloth with a tilted white page whose lower-left corner lies in a
    shadow (its brightness times ``shadow``), and the page's true corners."""
    yy, xx = np.mgrid[0:480, 0:640]
    checks = ((xx // 40) + (yy // 40)) % 2
    rgb = np.where(checks[..., None] == 1, [235, 150, 225], [230, 225, 180]).astype(np.float64)
    page = np.array([[210, 40], [560, 150], [400, 440], [60, 330]], np.float64)
    mask = np.zeros((480, 640), np.uint8)
    cv2.fillConvexPoly(mask, page.round().astype(np.int32), 1)
    rgb[mask == 1] = 250
    # a shadow across the lower-left corner (the page's outer 15 % there), its edge 40 px wide
    d = np.clip(((xx - 60) * -0.6 + (yy - 330) * 0.8 + 100) / 40, 0, 1)
    rgb *= (1 - (1 - shadow) * d)[..., None]
    return np.clip(rgb, 0, 255).astype(np.uint8), page


def _corner_error(q, page):
    return float(np.max(np.linalg.norm(locate._order_quad(q) - locate._order_quad(page), axis=1)))


def test_a_page_corner_in_deep_shadow_is_recovered_from_the_outline_runs():
    img, page = _scene(shadow=0.3)
    hull_quad = locate.find_page_quad(img)
    quads = locate._page_quads_from_outline(img)
    assert quads, "no outline quad at all"
    best = min(_corner_error(q, page) for q in quads[:4])
    assert best < 10, best
    # (the brightness hull alone misses the shadowed corner by far more)
    assert hull_quad is None or _corner_error(hull_quad, page) > 3 * best


def test_a_lit_page_gives_its_outline_first():
    img, page = _scene(shadow=1.0)
    quads = locate._page_quads_from_outline(img)
    assert quads and _corner_error(quads[0], page) < 6


def test_a_cloth_without_a_page_is_still_no_sheet_found():
    # the outline runs of a bare gingham make quads too (its light checks merge into one
    # component); the registration against the templates' print rejects them
    from sheetcheck.errors import NoSheetFoundError
    yy, xx = np.mgrid[0:960, 0:1280]
    cloth = np.where((((xx // 80) + (yy // 80)) % 2)[..., None] == 1, [235, 150, 225], [230, 225, 180])
    with pytest.raises(NoSheetFoundError, match="no score sheet found|does not match any known sheet"):
        locate.locate_sheet(cloth.astype(np.uint8))


@pytest.mark.slow
def test_a_hard_photo_on_gingham_with_a_shadowed_page_is_now_located():
    """The simulator's dev photo reefs-2-hard-nm-s70 (the seed-0 corpus's photo 70): a sheet
    printed without markers, strong shadow, on a gingham cloth. It was "no sheet found"; the
    outline runs give its page, and the registration then puts the regions where the truth has
    them (the rectify stage refines the rest)."""
    sys.path.insert(0, str(ROOT / "scripts"))
    import make_corpus

    from calibration.template import get_template
    from sheetcheck.simulator import simulate_photo
    from vision.decode import decode_photo

    (tid, preset, markers, seed), = [p for p in make_corpus.plan(71, 0) if p[3] == 70]
    t = get_template(tid)
    marks, _ = make_corpus.corpus_marks(t, seed)
    photo = simulate_photo(t, marks, seed=seed, preset=preset, markers=markers)
    dec = decode_photo(photo.jpeg)
    loc = locate.locate_sheet(dec.image)
    assert loc.template.id == tid and loc.details.get("page_from") == "outline runs"
    k = dec.image.shape[1] / photo.truth["image_size"][0]
    errs = [np.linalg.norm(locate.project(loc.homography, np.array([t.region(r).shape.centre()]))[0]
                           - np.asarray(xy) * k) for r, xy in photo.truth["region_centres_px"].items()]
    assert np.median(errs) < 8, np.median(errs)
