"""The page route's shadow-flattened whiteness (vision._page_shadow): a page with a whole side in
a strong shadow on a busy cloth, which the paper mask, the straight edges and the outline runs
all miss, is found; a bare cloth, with or without the shadow, is still 'no sheet found'."""

import numpy as np
import pytest

import cv2

from sheetcheck.errors import NoSheetFoundError
from vision import locate
from vision._geom_render import photo_grey, project
from vision._geom_synth import synth_photo, synthetic_template
from vision._page_shadow import flattened_whiteness, shadow_page_quads

SIZE = (640, 480)


def _page_corners(t):
    return np.array([[0, 0], [t.width_mm, 0], [t.width_mm, t.height_mm], [0, t.height_mm]], float)


def _shadow(shape, x_edge: float, strength: float) -> np.ndarray:
    """Brightness factor of a soft-edged (12 px) shadow over everything left of a slanted line
    through ``x_edge`` (a phone or an arm between the lamp and the table), times ``strength``."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    lit = np.clip((xx - x_edge + 0.3 * (yy - h / 2)) / 12, 0, 1)
    return 1 - (1 - strength) * (1 - lit)


def _gingham(shape) -> np.ndarray:
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w]
    checks = ((xx // 24) + (yy // 24)) % 2
    # pink and cream checks: the cream is nearly as white as paper, as on the hard dev photos
    return np.where(checks[..., None] == 1, [235, 150, 225], [240, 236, 200]).astype(np.float32)


def _scene(shadow: float, *, seed: int = 3):
    """A page (synthetic template 1, printed without markers) on a gingham, the left third of the
    page and the cloth beside it in a shadow of brightness ``shadow``, warm light; the image,
    the template and the page's true corners (px)."""
    t = synthetic_template(1)
    ph = synth_photo(t, seed=seed, size=SIZE, rotation_deg=25, fill=0.62, markers=False,
                     shade=0.0, noise=2.0, dpi=50, jpeg_quality=None, tilt=0.06)
    w, h = SIZE
    page = project(ph.homography, _page_corners(t))
    mask = np.zeros((h, w), np.uint8)
    cv2.fillConvexPoly(mask, (page * 4).round().astype(np.int32), 255, shift=2)
    mask = cv2.GaussianBlur(mask.astype(np.float32) / 255, (0, 0), 0.7)[..., None]
    img = ph.image.astype(np.float32) * mask + _gingham((h, w)) * (1 - mask)
    x_edge = page[:, 0].min() + 0.3 * (page[:, 0].max() - page[:, 0].min())
    img *= _shadow((h, w), x_edge, shadow)[..., None] * np.array([1.0, 0.97, 0.9], np.float32)
    return np.clip(img, 0, 255).astype(np.uint8), t, page


def _templates():
    # three similar layouts: the level has to be told apart too
    return [synthetic_template(v) for v in range(3)]


def _corner_error(q, page):
    return float(np.max(np.linalg.norm(locate._order_quad(q) - locate._order_quad(page), axis=1)))


def test_flattened_whiteness_is_about_one_on_paper_in_light_and_in_shadow():
    img, t, page = _scene(0.45)
    flat = flattened_whiteness(img, window_frac=0.06)
    h, w = flat.shape
    inner = np.zeros((h, w), np.uint8)
    c = page.mean(0)
    cv2.fillConvexPoly(inner, (c + (page - c) * 0.8).round().astype(np.int32), 1)
    shade = _shadow((h, w), page[:, 0].min() + 0.3 * (page[:, 0].max() - page[:, 0].min()), 0.45)
    deep = (inner == 1) & (shade < 0.5)     # the page's shadowed part
    lit = (inner == 1) & (shade > 0.99)
    assert deep.sum() > 2000 and lit.sum() > 20000
    # the raw whiteness of the shadowed paper is far below the lit cloth's cream checks ...
    white = locate._whiteness(img).astype(float)
    cream = white[(inner == 0) & (shade > 0.99)].max()
    assert np.median(white[deep]) < 0.6 * cream
    # ... but flattened it is paper-white like the lit part
    assert np.median(flat[deep]) > 0.92 and np.median(flat[lit]) > 0.92


def test_a_page_with_a_side_in_strong_shadow_is_found_and_read_as_the_right_sheet():
    img, t, page = _scene(0.45)
    # what the page route had before: no outline near the page
    near = [q for q in ([locate.find_page_quad(img)] + locate._page_quads_from_lines(img)
                        + locate._page_quads_from_outline(img)[:4]) if q is not None]
    assert all(_corner_error(q, page) > 40 for q in near)
    quads = shadow_page_quads(img, photo_grey(img), _templates())
    assert quads and _corner_error(quads[0], page) < 6, [_corner_error(q, page) for q in quads]
    loc = locate.locate_sheet(img, templates=_templates())
    assert loc.template.id == t.id
    assert loc.details["page_from"] == "shadow-flattened whiteness"
    assert _corner_error(project(loc.homography, _page_corners(t)), page) < 4
    assert loc.details["registration"] >= 0.5


@pytest.mark.parametrize("shadow", [1.0, 0.45])
def test_a_cloth_without_a_page_is_still_no_sheet_found(shadow):
    h, w = SIZE[1], SIZE[0]
    cloth = _gingham((h, w)) * _shadow((h, w), 0.4 * w, shadow)[..., None]
    with pytest.raises(NoSheetFoundError, match="no score sheet found|does not match any known sheet"):
        locate.locate_sheet(np.clip(cloth, 0, 255).astype(np.uint8), templates=_templates())


def test_the_route_runs_only_when_every_other_page_outline_failed(monkeypatch):
    # a lit page is found by the usual routes: the shadow route is not even asked
    import vision._page_shadow as page_shadow

    def refuse(*args, **kwargs):
        raise AssertionError("the shadow route ran on a photo the page route already located")
    monkeypatch.setattr(page_shadow, "shadow_page_quads", refuse)
    img, t, page = _scene(1.0)
    loc = locate.locate_sheet(img, templates=_templates())
    assert loc.template.id == t.id and "page_from" not in loc.details
