"""The page route's last resort keeps looking after an outline that lines up poorly: the first
outline (straight edges) may be the wrong thing, a patch of cloth or the lit part of a page cut
at a shadow's straight edge, registering at 0.25-0.45; a later outline (the shadow-flattened
whiteness) that lines up better wins. Seen on heldout1050k reefs-1-hard-nm-s1050069, a large
page on a patterned cloth located on a 108 x 369 px patch of cloth (registration 0.26) and
refused as blurred."""

import numpy as np
from vision import locate
from vision._geom_render import project

from test_vision_locate_shadow import _corner_error, _page_corners, _scene, _templates


def _lit_part(page: np.ndarray, cut: float = 0.3) -> np.ndarray:
    """The page's outline cut along its long sides at ``cut`` of their length from the shadowed
    end: what the straight edges make of a page whose side lies in a straight-edged shadow."""
    p = locate._order_quad(page)
    q = p.copy()
    q[0] = p[0] + cut * (p[1] - p[0])
    q[3] = p[3] + cut * (p[2] - p[3])
    return q


def _straight_edges_give(monkeypatch, quads):
    monkeypatch.setattr(locate, "_page_quads_from_lines", lambda image, **kw: [q.copy() for q in quads])


def test_a_poorly_registered_straight_edge_outline_gives_way_to_the_shadow_routes_page(monkeypatch):
    img, t, page = _scene(0.45)
    decoy = _lit_part(page)
    # the decoy is a real page-route outline: the print lines up with it, but poorly
    res = locate._locate_by_quad(locate._grey(img), _templates(), markers_printed=None, image=img, quad=decoy)
    assert locate.MIN_REGISTRATION <= res[4]["candidates"][0]["correlation"] < locate.LAST_RESORT_GOOD_REGISTRATION
    _straight_edges_give(monkeypatch, [decoy])
    loc = locate.locate_sheet(img, templates=_templates())
    assert loc.template.id == t.id
    assert loc.details["page_from"] == "shadow-flattened whiteness"
    assert _corner_error(project(loc.homography, _page_corners(t)), page) < 4
    assert loc.details["registration"] >= 0.5


def test_a_poor_outline_is_still_taken_when_no_later_one_lines_up_better(monkeypatch):
    # as before the change: the page route's checks then decide (here they pass the lit part)
    import vision._page_shadow as page_shadow
    img, t, page = _scene(0.45)
    decoy = _lit_part(page)
    _straight_edges_give(monkeypatch, [decoy])
    monkeypatch.setattr(page_shadow, "shadow_page_quads", lambda *a, **kw: [])
    loc = locate.locate_sheet(img, templates=_templates())
    assert loc.details["page_from"] == "straight edges"
    assert loc.details["registration"] < locate.LAST_RESORT_GOOD_REGISTRATION
    assert _corner_error(project(loc.homography, _page_corners(t)), decoy) < 1


def test_an_outline_that_lines_up_well_ends_the_search(monkeypatch):
    import vision._page_shadow as page_shadow
    img, t, page = _scene(0.45)

    def refuse(*args, **kwargs):
        raise AssertionError("a later outline was asked after one that lines up well")
    _straight_edges_give(monkeypatch, [locate._order_quad(page)])
    monkeypatch.setattr(locate, "_page_quads_from_outline", refuse)
    monkeypatch.setattr(page_shadow, "shadow_page_quads", refuse)
    loc = locate.locate_sheet(img, templates=_templates())
    assert loc.template.id == t.id and loc.details["page_from"] == "straight edges"
    assert _corner_error(project(loc.homography, _page_corners(t)), page) < 4
