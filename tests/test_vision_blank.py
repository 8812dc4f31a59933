"""A blank region read "empty" by both readers is confirmed on a clear photo (vision.marks._confirm_blank)."""

from __future__ import annotations

import numpy as np
import pytest

import vision.marks as marks_mod
from calibration.template import get_template
from sheetcheck.simulator import random_marks, simulate_photo
from vision.learned import DecisionRule
from vision.marks import (BLANK_DOUBT_MAX, BLANK_FAINT_MAX, BLANK_LEARNED_MIN, REVIEW_THRESHOLD,
                          RegionReading, _confirm_blank)
from vision.pipeline import read_photo

RULE = DecisionRule(photo_gate=0.5, photo_doubt_max=1.0)
BLANK = {"coverage": 0.0, "coloured": 0.0, "dark": 0.0, "faint_coverage": 0.0}


def _pair(*, hand_mark="empty", hand_conf=0.9933, learned_mark="empty", learned_conf=0.985,
          hand_reason="", **features):
    ft = {**BLANK, **features}
    hand = RegionReading("box.1", "box", hand_mark, hand_conf, False,
                         ((hand_mark, hand_conf),), ft, hand_reason)
    both = RegionReading("box.1", "box", learned_mark, 0.96, True,
                         ((learned_mark, learned_conf),),
                         {**ft, "hand_mark": hand_mark, "hand_confidence": hand_conf,
                          "learned_mark": learned_mark, "learned_confidence": learned_conf},
                         "low confidence")
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


def test_on_a_real_photo_only_blank_regions_are_confirmed(monkeypatch):
    """A typical simulated photo read with and without the confirmation: the only readings that
    change are flagged "empty" ones of regions that are empty, which become confident."""
    t = get_template("reefs-1")
    marks = random_marks(t, np.random.default_rng(33))
    photo = simulate_photo(t, marks, seed=33, preset="typical", overrides={"output_long_side": 2400})
    truth = photo.truth["marks"]
    with_rule = read_photo(photo.jpeg)
    monkeypatch.setattr(marks_mod, "BLANK_LEARNED_MIN", 1.1)  # (no learned probability is above)
    without = read_photo(photo.jpeg)
    changed = [rid for rid in with_rule.readings
               if (with_rule.readings[rid].mark, with_rule.readings[rid].review)
               != (without.readings[rid].mark, without.readings[rid].review)]
    assert changed, "no blank region was confirmed on this photo"
    for rid in changed:
        a, b = with_rule.readings[rid], without.readings[rid]
        assert b.mark == a.mark == "empty" and b.review and not a.review, (rid, a, b)
        assert truth.get(rid, "empty") == "empty", rid
        assert a.confidence >= REVIEW_THRESHOLD
    assert len(with_rule.flagged) < len(without.flagged)
