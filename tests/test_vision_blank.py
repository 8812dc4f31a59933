"""A blank region read "empty" by both readers is confirmed on a clear photo (vision.marks._confirm_blank)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import vision.marks as marks_mod
from calibration.template import get_template
from sheetcheck.simulator import random_marks, simulate_photo
from vision.learned import DecisionRule
from vision.marks import (BLANK_DOUBT_MAX, BLANK_FAINT_MAX, BLANK_HAND_MIN_WRITTEN, BLANK_LEARNED_MIN,
                          COLOUR_SURE_HAND, COLOUR_SURE_LEARNED, REVIEW_THRESHOLD,
                          ROUTE_EMPTY_HAND, ROUTE_EMPTY_LEARNED, SURE_FLOORS, SURE_KIND_FLOORS,
                          LEARNED_FLOORS, WRITING_MIN_PX_PER_MM, RegionReading, _confirm_blank,
                          _confirm_sure, _learned_floors, check_coarse_writing)
from vision.pipeline import read_photo

RULE = DecisionRule(photo_gate=0.5, photo_doubt_max=1.0)
BLANK = {"coverage": 0.0, "coloured": 0.0, "dark": 0.0, "faint_coverage": 0.0}


def _pair(*, hand_mark="empty", hand_conf=0.9933, learned_mark="empty", learned_conf=0.985,
          hand_reason="", allowed=("empty", "orange", "crossed"), kind="box",
          reason="low confidence", **features):
    ft = {**BLANK, **features}
    others = tuple((m, 0.0) for m in allowed if m != hand_mark)
    hand = RegionReading("box.1", kind, hand_mark, hand_conf, False,
                         ((hand_mark, hand_conf),) + others, ft, hand_reason)
    both = RegionReading("box.1", kind, learned_mark, 0.96, True,
                         ((learned_mark, learned_conf),),
                         {**ft, "hand_mark": hand_mark, "hand_confidence": hand_conf,
                          "learned_mark": learned_mark, "learned_confidence": learned_conf},
                         reason)
    return both, hand


def _confirm(pair, *, doubt=0.0, photo_confidence=1.0):
    both, hand = pair
    return _confirm_blank([both], [hand], rule=RULE, doubt=doubt,
                          photo_confidence=photo_confidence,
                          review_threshold=REVIEW_THRESHOLD)[0]


def test_a_blank_region_both_readers_call_empty_is_confirmed():
    rd = _confirm(_pair(learned_conf=0.985))
    assert rd.mark == "empty" and not rd.review and rd.reason == ""
    assert rd.confidence == pytest.approx(0.985)


def test_a_few_faint_texels_are_blank_enough():
    """A printed line's fringe or the paper's grain leaves faint texels on a blank region; up to
    BLANK_FAINT_MAX of it (session 34)."""
    rd = _confirm(_pair(faint_coverage=BLANK_FAINT_MAX))
    assert rd.mark == "empty" and not rd.review


@pytest.mark.parametrize("change", [
    {"faint_coverage": BLANK_FAINT_MAX + 0.004},  # more faint texels: something may be there
    {"faint_coverage": float("nan")},
    {"coloured": 0.01, "coverage": 0.01},
    {"dark": 0.002},
    {"learned_conf": BLANK_LEARNED_MIN - 0.001},
    {"hand_conf": 0.95},
    {"learned_mark": "blue"},                   # the readers disagree
    {"hand_reason": "too few unprinted pixels to read"},
])
def test_anything_short_of_blank_stays_flagged(change):
    both, hand = _pair(**change)
    rd = _confirm((both, hand))
    assert rd is both and rd.review


@pytest.mark.parametrize("doubt, photo_confidence", [(BLANK_DOUBT_MAX + 0.01, 1.0), (0.0, 0.4)])
def test_an_unclear_photo_confirms_nothing(doubt, photo_confidence):
    both, hand = _pair()
    rd = _confirm((both, hand), doubt=doubt, photo_confidence=photo_confidence)
    assert rd is both and rd.review


def test_a_blank_number_field_has_its_own_hand_floor():
    """The hand reader's handwriting rule caps a blank number field at 0.9847, under the 0.99 a
    box asks (session 35: no blank number field was ever confirmed before)."""
    field = dict(allowed=("empty", "written"), kind="number_field")
    rd = _confirm(_pair(hand_conf=0.9847, **field))
    assert rd.mark == "empty" and not rd.review
    # a few faint texels more (light digits) lower the hand reader under its floor
    assert _confirm(_pair(hand_conf=BLANK_HAND_MIN_WRITTEN - 0.0005, **field)).review
    # a box at the number field's floor is not blank enough
    assert _confirm(_pair(hand_conf=0.9847)).review


def _confirm_one_sure(pair, *, doubt=0.0, photo_confidence=1.0):
    both, hand = pair
    return _confirm_sure([both], [hand], rule=RULE, doubt=doubt,
                         photo_confidence=photo_confidence,
                         review_threshold=REVIEW_THRESHOLD)[0]


WRITTEN = dict(hand_mark="written", learned_mark="written", allowed=("empty", "written"),
               kind="number_field", hand_conf=1.0, learned_conf=1.0, faint_coverage=0.3,
               coverage=0.2, dark=0.2)


def test_written_is_never_confirmed_so():
    """reader-v15's own calibration found no threshold without a confident error for
    "written" on photos of doubt 0.015-0.03: however sure both readers are, its flag stays."""
    both, hand = _pair(**WRITTEN)
    rd = _confirm_one_sure((both, hand), doubt=0.02)
    assert rd is both and rd.review


COLOUR = dict(hand_mark="blue", learned_mark="blue", allowed=("empty", "blue", "purple", "crossed"),
              hand_conf=COLOUR_SURE_HAND + 0.001, learned_conf=COLOUR_SURE_LEARNED + 0.001,
              coverage=0.8, coloured=0.8)


def test_a_colour_both_readers_are_sure_of_is_confirmed():
    rd = _confirm_one_sure(_pair(**COLOUR))
    assert rd.mark == "blue" and not rd.review and rd.reason == ""
    assert set(SURE_FLOORS) == {"orange", "red", "blue", "green", "purple"}


@pytest.mark.parametrize("doubt, photo_confidence", [(BLANK_DOUBT_MAX + 0.01, 1.0), (0.0, 0.4)])
def test_an_unclear_photo_confirms_no_colour(doubt, photo_confidence):
    both, hand = _pair(**COLOUR)
    rd = _confirm_one_sure((both, hand), doubt=doubt, photo_confidence=photo_confidence)
    assert rd is both and rd.review


@pytest.mark.parametrize("change", [
    {"learned_conf": COLOUR_SURE_LEARNED - 0.0005},
    {"hand_conf": COLOUR_SURE_HAND - 0.0005},
    {"hand_mark": "purple"},                      # the readers disagree
    {"hand_mark": "crossed", "learned_mark": "crossed"},  # not a mark of SURE_FLOORS
    {"reason": "photo too unreliable (registration/resolution)"},
])
def test_a_colour_short_of_sure_stays_flagged(change):
    both, hand = _pair(**{**COLOUR, **change})
    rd = _confirm_one_sure((both, hand))
    assert rd is both and rd.review


def _read_with_and_without(photo, monkeypatch, name: str, value):
    """``photo`` read as is and with ``vision.marks.<name>`` set to ``value``: (the first
    reading, the second, the ids of the regions whose mark or review flag differ). Both are the
    two readers' verdicts (no patch reader: its third opinion comes after these rules)."""
    with_rule = read_photo(photo, patch_reader=None)
    monkeypatch.setattr(marks_mod, name, value)
    without = read_photo(photo, patch_reader=None)
    changed = [rid for rid in with_rule.readings
               if (with_rule.readings[rid].mark, with_rule.readings[rid].review)
               != (without.readings[rid].mark, without.readings[rid].review)]
    return with_rule, without, changed


def test_on_a_real_photo_the_number_field_floor_confirms_only_blank_fields(monkeypatch):
    """A typical simulated Reefs photo read with and without session 35's hand floor for a
    blank number field: the readings that change are flagged "empty" number fields that
    become confident, every one of them empty."""
    t = get_template("reefs-1")
    marks = random_marks(t, np.random.default_rng(34))
    photo = simulate_photo(t, marks, seed=34, preset="typical", overrides={"output_long_side": 2400})
    truth = photo.truth["marks"]
    with_rule, without, changed = _read_with_and_without(
        photo.jpeg, monkeypatch, "BLANK_HAND_MIN_WRITTEN", marks_mod.BLANK_HAND_MIN)
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert a.mark == b.mark == "empty" and b.review and not a.review, (rid, a, b)
        assert truth.get(rid, "empty") == a.mark, rid
        assert a.confidence >= REVIEW_THRESHOLD
    assert changed and {with_rule.readings[rid].kind for rid in changed} == {"number_field"}
    assert len(with_rule.flagged) < len(without.flagged)


def test_on_a_real_photo_only_blank_regions_are_confirmed(monkeypatch):
    """A typical simulated photo read with and without the confirmation: the only readings that
    change are flagged "empty" ones of regions that are empty, which become confident."""
    t = get_template("reefs-1")
    marks = random_marks(t, np.random.default_rng(33))
    photo = simulate_photo(t, marks, seed=33, preset="typical", overrides={"output_long_side": 2400})
    truth = photo.truth["marks"]
    # (no learned probability is above 1.1)
    with_rule, without, changed = _read_with_and_without(photo.jpeg, monkeypatch,
                                                         "BLANK_LEARNED_MIN", 1.1)
    assert changed, "no blank region was confirmed on this photo"
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert b.mark == a.mark == "empty" and b.review and not a.review, (rid, a, b)
        assert truth.get(rid, "empty") == "empty", rid
        assert a.confidence >= REVIEW_THRESHOLD
    assert len(with_rule.flagged) < len(without.flagged)


def test_on_a_real_photo_colours_both_readers_are_sure_of_are_confirmed(tmp_path, monkeypatch):
    """Photo 3300114 of the spent default corpus 3300000 (crypts-1, typical, no markers; 3.8 %
    of its regions in doubt, above reader-v15's last tier for colours at 3 %): read with and
    without the colour floors of SURE_FLOORS, the readings that change are colours both readers
    are sure of, flagged without them and confident with them, every one right."""
    from test_vision_stains import corpus_photo
    photo, truth = corpus_photo(tmp_path, 3300000, 300, 3300114, ("crypts-1", "typical", False))
    with_rule, without, changed = _read_with_and_without(photo, monkeypatch, "SURE_FLOORS", {})
    assert len(changed) >= 5, changed
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert a.mark == b.mark and a.mark in SURE_FLOORS, (rid, a, b)
        assert b.review and b.reason.startswith("low confidence") and not a.review
        assert truth["marks"][rid] == a.mark, rid
        assert a.features["hand_confidence"] >= COLOUR_SURE_HAND
        assert a.features["learned_confidence"] >= COLOUR_SURE_LEARNED


ROUTE = dict(kind="connection", allowed=("empty", "orange", "red", "blue", "green", "purple"),
             hand_conf=ROUTE_EMPTY_HAND + 0.001, learned_conf=ROUTE_EMPTY_LEARNED + 0.001,
             faint_coverage=0.3)


def test_an_empty_route_both_readers_are_sure_of_is_confirmed():
    """Session 37: a route (a Reefs connection) both readers read "empty", the hand reader at
    ROUTE_EMPTY_HAND and the learned reader at ROUTE_EMPTY_LEARNED, on a clear photo; faint
    texels along it (the printed band's edges) do not stop it, as they would a blank box."""
    rd = _confirm_one_sure(_pair(**ROUTE))
    assert rd.mark == "empty" and not rd.review and rd.reason == ""
    assert rd.confidence >= REVIEW_THRESHOLD
    assert SURE_KIND_FLOORS[("connection", "empty")] == (ROUTE_EMPTY_HAND, ROUTE_EMPTY_LEARNED)


@pytest.mark.parametrize("change", [
    {"learned_conf": ROUTE_EMPTY_LEARNED - 0.0005},
    {"hand_conf": ROUTE_EMPTY_HAND - 0.0005},
    {"learned_mark": "blue"},                      # the readers disagree
    {"kind": "box"},                               # a box's "empty" is _confirm_blank's
    {"kind": "symbol"},
    {"reason": "photo too unreliable (registration/resolution)"},
])
def test_a_route_short_of_sure_stays_flagged(change):
    both, hand = _pair(**{**ROUTE, **change})
    rd = _confirm_one_sure((both, hand))
    assert rd is both and rd.review


@pytest.mark.parametrize("doubt, photo_confidence", [(BLANK_DOUBT_MAX + 0.01, 1.0), (0.0, 0.4)])
def test_an_unclear_photo_confirms_no_empty_route(doubt, photo_confidence):
    both, hand = _pair(**ROUTE)
    rd = _confirm_one_sure((both, hand), doubt=doubt, photo_confidence=photo_confidence)
    assert rd is both and rd.review


def test_an_empty_treasure_is_not_confirmed_so():
    """Session 37 withdrew the treasure's floors: on the fresh held-out 1360000 a crossed-out
    treasure both readers read "empty" (hand 0.9933, its cap; learned 0.9903) on a clear
    typical photo was confirmed by them. A treasure's "empty" stays the model's to judge."""
    both, hand = _pair(kind="treasure", allowed=("empty", "crossed"), hand_conf=0.9933,
                       learned_conf=0.9903, faint_coverage=0.2, coverage=0.01)
    rd = _confirm_one_sure((both, hand))
    assert rd is both and rd.review
    assert all(kind != "treasure" for kind, _ in SURE_KIND_FLOORS)


def test_on_a_real_photo_empty_routes_both_readers_are_sure_of_are_confirmed(tmp_path,
                                                                            monkeypatch):
    """Photo 3400189 of the spent default corpus 3400000 (reefs-1, typical, no markers; 3 % of
    its regions in doubt) read with and without the route's floors (SURE_KIND_FLOORS, session
    37): the readings that change are routes both readers read "empty", flagged for low
    confidence without the floors and confident with them, every one empty in truth; nothing
    else changes."""
    from test_vision_stains import corpus_photo
    photo, truth = corpus_photo(tmp_path, 3400000, 300, 3400189, ("reefs-1", "typical", False))
    with_rule, without, changed = _read_with_and_without(
        photo, monkeypatch, "SURE_KIND_FLOORS",
        {k: v for k, v in SURE_KIND_FLOORS.items() if k[0] != "connection"})
    assert len(changed) >= 8, changed
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert a.kind == "connection" and a.mark == b.mark == "empty", (rid, a, b)
        assert b.review and b.reason.startswith("low confidence") and not a.review
        assert truth["marks"].get(rid, "empty") == "empty", rid
        assert a.features["hand_confidence"] >= ROUTE_EMPTY_HAND
        assert a.features["learned_confidence"] >= ROUTE_EMPTY_LEARNED
    assert len(with_rule.flagged) == len(without.flagged) - len(changed)


def _floored(*, kind="treasure", mark="empty", learned_conf=0.995, review=False):
    both, _ = _pair(kind=kind, hand_mark=mark, learned_mark=mark, learned_conf=learned_conf)
    rd = both if review else dataclasses.replace(both, confidence=0.995, review=False, reason="")
    return rd, _learned_floors([rd], review_threshold=REVIEW_THRESHOLD)[0]


def test_a_confident_empty_treasure_needs_the_learned_reader_at_its_floor():
    """Session 41: the hand reader cannot tell a thin crossing on a treasure's print from none,
    so a confident "empty" treasure needs the learned reader at LEARNED_FLOORS' 0.997."""
    floor = LEARNED_FLOORS[("treasure", "empty")]
    assert floor == 0.997
    rd, out = _floored(learned_conf=0.995)
    assert out.review and out.mark == "empty" and out.confidence < REVIEW_THRESHOLD
    assert out.reason == "low confidence (empty treasure: learned 0.9950, under its floor 0.997)"
    # (counted with the other low-confidence flags by `sheetcheck eval`)
    from sheetcheck.commands.eval import _reason_category
    assert _reason_category(out.reason) == "low confidence"
    rd, out = _floored(learned_conf=floor)
    assert out is rd and not out.review
    # other marks and kinds, and readings already flagged, are left as they are
    for change in ({"kind": "box"}, {"mark": "purple"}, {"review": True}):
        rd, out = _floored(**change)
        assert out is rd, change


def test_on_a_real_photo_a_thin_crossing_on_a_treasure_is_not_read_empty_confidently(
        tmp_path, monkeypatch):
    """Photo 4500273 of the fresh default corpus 4500000 (reefs-1, easy, markers; session 41's
    forty-third measurement): treasure.14 is crossed out with one thin, pale slash over its
    print. Both readers read it "empty" (hand 0.9933, learned 0.995), confident by the model's
    own thresholds; the floor flags it, and changes nothing else but empty treasures the
    learned reader is less sure of than 0.997."""
    from test_vision_stains import corpus_photo
    photo, truth = corpus_photo(tmp_path, 4500000, 300, 4500273, ("reefs-1", "easy", True))
    assert truth["marks"]["treasure.14"] == "crossed"
    with_rule, without, changed = _read_with_and_without(photo, monkeypatch, "LEARNED_FLOORS", {})
    b = without.readings["treasure.14"]
    assert b.mark == "empty" and not b.review  # the confident error the floor is there for
    assert "treasure.14" in changed
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert a.kind == "treasure" and a.mark == b.mark == "empty" and a.review and not b.review
        assert a.features["learned_confidence"] < LEARNED_FLOORS[("treasure", "empty")]


def _field(mark, conf, *, review=False, reason="", kind="number_field",
           allowed=("empty", "written")):
    return RegionReading("total", kind, mark, conf, review,
                         tuple((m, conf if m == mark else 1 - conf) for m in allowed), {}, reason)


def test_a_number_fields_empty_is_never_confident_on_a_photo_too_coarse_for_writing():
    """(session 47) check_coarse_writing: under WRITING_MIN_PX_PER_MM every confident "empty"
    of a number field is flagged; writing, other regions and flags already set are left as
    they are, and nothing changes at or above it, or when the resolution is unknown."""
    readings = {"total": _field("empty", 0.983), "score": _field("written", 0.999),
                "box": _field("empty", 0.999, kind="box", allowed=("empty", "orange")),
                "row": _field("empty", 0.6, review=True, reason="low confidence (...)")}
    low = WRITING_MIN_PX_PER_MM - 0.45
    out = check_coarse_writing(readings, low, REVIEW_THRESHOLD)
    a = out["total"]
    assert a.review and a.mark == "empty" and a.confidence < REVIEW_THRESHOLD
    assert a.reason == (f"photo too coarse to see writing ({low:.1f} px/mm, under "
                        f"{WRITING_MIN_PX_PER_MM:g}): a number written here may not show")
    assert [out[k] for k in ("score", "box", "row")] == [readings[k] for k in ("score", "box", "row")]
    for ppm in (WRITING_MIN_PX_PER_MM, 6.0, None, float("nan")):
        assert check_coarse_writing(readings, ppm, REVIEW_THRESHOLD) == readings


def test_on_a_real_photo_too_coarse_for_writing_blank_number_fields_are_flagged():
    """A Reefs sheet photographed small (1150 px on its long side: ~2.4 px per mm of the page)
    has every number field read "empty" flagged for it, the fields written in still read
    "written"; the same sheet at 2400 px none."""
    t = get_template("reefs-1")
    marks = random_marks(t, np.random.default_rng(48))
    fields = [r.id for r in t.regions if r.kind == "number_field"]
    seen = {}
    assert {marks.get(rid, "empty") for rid in fields} == {"empty", "written"}
    for side in (1150, 2400):
        photo = simulate_photo(t, marks, seed=48, preset="easy",
                               overrides={"output_long_side": side})
        got = read_photo(photo.jpeg)
        ppm = got.details["page_px_per_mm"]
        coarse = [rid for rid, rd in got.readings.items()
                  if rd.reason.startswith("photo too coarse to see writing")]
        assert all(got.readings[rid].mark == marks.get(rid, "empty") for rid in fields)
        seen[side] = (ppm, coarse, [rid for rid in fields if got.readings[rid].mark == "empty"])
    (ppm_lo, coarse_lo, empty_lo), (ppm_hi, coarse_hi, _) = seen[1150], seen[2400]
    assert ppm_lo < WRITING_MIN_PX_PER_MM <= ppm_hi
    assert empty_lo and sorted(coarse_lo) == sorted(empty_lo)
    assert coarse_hi == []
