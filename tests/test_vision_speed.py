"""Exact speed-ups keep their values: each fast path against the plain computation it replaces."""

from __future__ import annotations

import math

import numpy as np

from vision.colour import (HueSample, _hue_diff_float, calibrate_palette, hue_diff,
                           load_palette)


def _same(x: float, y: float) -> bool:
    """Bit-for-bit: equal with the same sign (0.0 against -0.0 counts), or both NaN."""
    if math.isnan(x) or math.isnan(y):
        return math.isnan(x) and math.isnan(y)
    return x == y and math.copysign(1.0, x) == math.copysign(1.0, y)


def test_the_float_hue_difference_is_numpys_bit_for_bit():
    rng = np.random.default_rng(7)
    a = np.concatenate([rng.uniform(-720, 720, 20000), rng.uniform(0, 360, 20000),
                        [0.0, -0.0, 180.0, -180.0, 360.0, 540.0, 1e-300, -1e-300, 359.99999999999994,
                         np.nan, np.inf]])
    b = np.concatenate([rng.uniform(0, 360, 40000), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 180.0, 0.0,
                                                     0.0, 0.0, 0.0]])
    with np.errstate(invalid="ignore"):
        want = hue_diff(a, b)
    got = [_hue_diff_float(x, y) for x, y in zip(a.tolist(), b.tolist())]
    bad = [(x, y, w, g) for x, y, w, g in zip(a.tolist(), b.tolist(), want.tolist(), got)
           if not _same(w, g)]
    assert not bad, bad[:5]
    # and the one-pair numpy call the calibration used before
    assert all(_same(float(hue_diff(x, y)), _hue_diff_float(x, y))
               for x, y in zip(a[:2000].tolist(), b[:2000].tolist()))


def test_calibration_assigns_unlabelled_marks_as_numpys_hue_difference_does():
    # the unlabelled-sample loop, written with numpy's hue_diff, gives the same palette
    prior = load_palette("default")
    rng = np.random.default_rng(11)
    hues = {c.name: c.hue_deg for c in prior.colours}
    # a smear of hues between the pencils: the order match gives up, every sample is free
    samples = [HueSample(float(h), 1.0) for h in rng.uniform(0, 360, 60)]
    samples += [HueSample(float((hues["red"] + rng.normal(0, 4)) % 360), 1.0) for _ in range(5)]
    got = calibrate_palette(prior, samples)
    # the nearest pencil in spreads, as numpy computes it, for the prior's centres
    for s in samples[:20]:
        d_np = {c.name: abs(float(hue_diff(s.hue_deg, c.hue_deg))) / c.hue_spread_deg
                for c in prior.colours}
        d_fl = {c.name: abs(_hue_diff_float(s.hue_deg, c.hue_deg)) / c.hue_spread_deg
                for c in prior.colours}
        assert d_np == d_fl
    assert got.source == "sheet"
    assert [c.name for c in got.colours] == [c.name for c in prior.colours]
    moved = {c.name: abs(float(hue_diff(c.hue_deg, hues[c.name]))) for c in got.colours}
    assert all(m <= 25.0 + 1e-9 for m in moved.values()), moved
