"""Photos with more than one sheet in them: a game table's neighbouring sheets.

Two whole sheets in one photo are refused (which one is meant cannot be known); a piece of a
neighbour's sheet at the edge of the frame, whose markers repeat the player's own ids, does
not take the place of the player's markers."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from calibration.template import get_template
from sheetcheck.errors import SeveralSheetsError
from sheetcheck.simulator import random_marks, simulate_photo
from vision.decode import decode_photo
from vision.locate import REPEAT_APART, MarkerSet, _refined_markers, locate_sheet

SMALL = {"output_long_side": 1200}
TABLE = (90, 80, 70)


def _photo(tid: str, seed: int) -> np.ndarray:
    t = get_template(tid)
    ph = simulate_photo(t, random_marks(t, np.random.default_rng(seed)), seed=seed,
                        preset="easy", overrides=SMALL)
    return decode_photo(ph.jpeg).image


def _side_by_side(*images: np.ndarray) -> np.ndarray:
    h = max(a.shape[0] for a in images)
    out = np.empty((h, sum(a.shape[1] for a in images), 3), np.uint8)
    out[:] = TABLE
    x = 0
    for a in images:
        out[:a.shape[0], x:x + a.shape[1]] = a
        x += a.shape[1]
    # through a JPEG, as a phone would hand it over
    buf = io.BytesIO()
    Image.fromarray(out).save(buf, "JPEG", quality=90)
    return decode_photo(buf.getvalue(), max_long_side=None).image


@pytest.fixture(scope="module")
def sheets():
    return {"a": _photo("crypts-2", 80), "b": _photo("crypts-2", 81), "c": _photo("reefs-1", 82)}


def test_two_whole_sheets_of_one_template_are_refused(sheets):
    both = _side_by_side(sheets["a"], sheets["b"])
    with pytest.raises(SeveralSheetsError, match=r"2 whole score sheets \(2 copies of crypts-2\)"):
        locate_sheet(both)
    # naming the template does not say which of the two is meant
    with pytest.raises(SeveralSheetsError, match="each sheet on its own") as e:
        locate_sheet(both, template_id="crypts-2")
    assert "--template" not in str(e.value)


def test_two_sheets_of_two_templates_are_refused_unless_one_is_named(sheets):
    both = _side_by_side(sheets["a"], sheets["c"])
    with pytest.raises(SeveralSheetsError, match=r"crypts-2 and reefs-1.*--template"):
        locate_sheet(both)
    loc = locate_sheet(both, template_id="reefs-1")
    assert loc.template.id == "reefs-1" and loc.method == "markers"
    # the reefs sheet is the right-hand one
    assert min(x for x, _ in loc.details["page_corners_px"]) > sheets["a"].shape[1] - 5


def _shrunk(a: np.ndarray, f: float) -> np.ndarray:
    import cv2
    return cv2.resize(a, None, fx=f, fy=f, interpolation=cv2.INTER_AREA)


@pytest.mark.parametrize("other", ["b", "c"])
def test_a_whole_sheet_far_smaller_than_the_players_is_another_players_across_the_table(
        sheets, other):
    """A second whole sheet at under 1/1.6 of the player's marker size (a sheet across the
    table): the player's sheet, much nearer the camera, is the one photographed and is read,
    whichever template the other is; at 0.8 of it, which one is meant cannot be told."""
    from vision.locate import DOMINANT_SHEET

    own = sheets["a"]
    alone = locate_sheet(own)
    far = _side_by_side(own, _shrunk(sheets[other], 0.5))
    loc = locate_sheet(far)
    assert loc.template.id == "crypts-2" and loc.markers_found == (4, 5, 6, 7)
    assert np.abs(np.array(loc.details["page_corners_px"])
                  - np.array(alone.details["page_corners_px"])).max() < 3.0
    (o,) = loc.details["other_sheets"]
    assert o["template"] == ("crypts-2" if other == "b" else "reefs-1")
    # the same the other way round: the nearer sheet is read wherever it lies
    near_right = _side_by_side(_shrunk(sheets[other], 0.5), own)
    assert locate_sheet(near_right).template.id == "crypts-2"
    assert 1 / 0.8 < DOMINANT_SHEET  # (at 0.8 neither is much nearer: refused)
    with pytest.raises(SeveralSheetsError):
        locate_sheet(_side_by_side(own, _shrunk(sheets[other], 0.8)))


@pytest.mark.parametrize("strip", [0.15, 0.3, 0.5])
@pytest.mark.parametrize("side", ["right", "left"])
def test_a_piece_of_a_neighbours_sheet_does_not_move_the_players_sheet(sheets, strip, side):
    """The player's sheet whole, and a strip of a neighbour's copy of the same sheet (one or
    two of its markers, the same ids) beside it: the player's sheet is located by its own
    four markers, where it is located alone."""
    own, other = sheets["a"], sheets["b"]
    w = int(strip * other.shape[1])
    alone = locate_sheet(own)
    if side == "right":
        photo, dx = _side_by_side(own, other[:, :w]), 0
    else:
        photo, dx = _side_by_side(other[:, -w:], own), w
    loc = locate_sheet(photo)
    assert loc.template.id == "crypts-2" and loc.method == "markers"
    assert loc.markers_found == (4, 5, 6, 7)
    got = np.array(loc.details["page_corners_px"]) - [dx, 0]
    assert np.abs(got - np.array(alone.details["page_corners_px"])).max() < 3.0
    # (before: the neighbour's markers won the repeated ids; on the left the sheet was refused
    # as cut off, on the right located by two markers or by features)
    rep = loc.details["markers_repeated"]
    assert rep["ids"] and rep["kept"] == [4, 5, 6, 7] and rep["in_view"] is True


def test_repeated_ids_far_apart_are_kept_as_others_and_a_double_detection_is_not():
    sq = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], float)
    grey = np.zeros((400, 400), np.uint8)
    far = sq + [200, 0]
    near = sq * 1.05 + [1, 1]  # the same marker seen twice (slightly larger)
    m = _refined_markers(grey, [sq, far, near], [3, 3, 3], refined=[sq, far, near])
    assert isinstance(m, MarkerSet)
    assert np.allclose(m[3], near + 0.5)  # the larger of the two near ones
    assert len(m.others[3]) == 1 and np.allclose(m.others[3][0], far + 0.5)
    assert REPEAT_APART * 10 < 200
