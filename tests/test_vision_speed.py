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


def test_rectify_fields_sampled_on_a_grid_give_the_one_column_values():
    import cv2

    from vision.rectify import _Field, _GridField, _grid

    rng = np.random.default_rng(3)
    vals = rng.normal(0, 2, (9, 13, 2)).astype(np.float32)
    cy, cx = np.arange(9) * 48 + 23.5, np.arange(13) * 48 + 23.5
    G = np.array(_grid((700, 500), 8))  # (H, W, 2) points, as _photo_maps samples them
    pts = rng.uniform(-40, 740, (999, 2))  # and a list of points
    for field in (_Field(vals, cy, cx, 100 / 60), _GridField(vals, cy, cx, 100 / 60)):
        for p in (G, pts):
            got = field.at(p)
            # the plain computation: every point in one column
            if isinstance(field, _Field):
                sy, sx = field.cy[1] - field.cy[0], field.cx[1] - field.cx[0]
                u = ((p[..., 0] - field.cx[0]) / sx).astype(np.float32)
                v = ((p[..., 1] - field.cy[0]) / sy).astype(np.float32)
            else:
                u = np.interp(p[..., 0], field.cx, np.arange(len(field.cx))).astype(np.float32)
                v = np.interp(p[..., 1], field.cy, np.arange(len(field.cy))).astype(np.float32)
            want = np.stack([cv2.remap(field.v[..., c], u.reshape(-1, 1), v.reshape(-1, 1),
                                       cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE
                                       ).reshape(u.shape) for c in range(2)], -1)
            assert got.shape == p.shape
            assert np.array_equal(got, want)
            assert np.abs(got).max() > 0.1  # (a field that moves something)
