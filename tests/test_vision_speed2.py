"""Exact speed-ups of the light sampling and the hand reader keep their values: each fast path
against the plain computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from vision.colour import SRGB_TO_LINEAR
from vision.light import PixelTaps, normalise_light, pixel_taps


def _photo(h: int = 157, w: int = 203):
    """A shaded, tinted page with a pencil mark (sides not multiples of the 12 px block)."""
    yy, xx = np.mgrid[0:h, 0:w]
    shade = 0.55 + 0.4 * (xx / w) * (0.6 + 0.4 * yy / h) + 0.05 * np.sin(yy / 9.0)
    img = np.clip(np.stack([shade * 250, shade * 235, shade * 210], -1), 0, 255).astype(np.uint8)
    img[40:60, 50:120] = (200, 40, 40)
    return img


def _plain_sample(light, idx: np.ndarray) -> np.ndarray:
    """The sampling as it was computed per photo before the taps were cached (8e66fbc)."""
    import cv2

    H, W = light.image.shape[:2]
    hb, wb = light.illumination.shape[:2]
    b = light.block
    rows = cv2.resize(light.illumination, (wb * b, hb), interpolation=cv2.INTER_LINEAR)
    fy = ((np.arange(hb * b) + 0.5) * (1.0 / b) - 0.5).astype(np.float32)
    sy = np.floor(fy).astype(np.int64)
    fy = fy - sy.astype(np.float32)
    fy[(sy < 0) | (sy >= hb - 1)] = 0
    sy = np.clip(sy, 0, hb - 1)
    sy1 = np.minimum(sy + 1, hb - 1)
    ri = np.minimum(np.arange(H), hb * b - 1)
    ci = np.minimum(np.arange(W), wb * b - 1)
    rows, r0, r1, fy = rows.reshape(-1, 3), sy[ri] * (wb * b), sy1[ri] * (wb * b), fy[ri]
    i, j = np.divmod(np.asarray(idx, np.int64), W)
    j = ci.take(j)
    w1 = fy.take(i)[:, None]
    out = rows.take(r0.take(i) + j, axis=0)
    out *= np.float32(1) - w1
    out += rows.take(r1.take(i) + j, axis=0) * w1
    illum = np.maximum(out, np.float32(1e-3), out=out)
    srgb = light.image.reshape(-1, 3).take(idx, axis=0)
    return SRGB_TO_LINEAR.take(srgb) / illum


def test_cached_taps_sample_the_plain_values_bit_for_bit():
    img = _photo()
    h, w = img.shape[:2]
    light = normalise_light(img, paper_mask=np.ones((h, w), bool))
    rng = np.random.default_rng(5)
    idx = np.concatenate([rng.choice(h * w, 6000, replace=False),
                          [0, w - 1, (h - 1) * w, h * w - 1]])  # corners past the blocks
    want = _plain_sample(light, idx)
    taps = light.taps(idx)
    got = light.sample(taps)
    assert got.dtype == np.float32 and got.shape == (idx.size, 3)
    assert np.array_equal(got, want)
    # a plain index array goes the same way (taps made on the spot)
    assert np.array_equal(light.sample(idx), want)
    # and it is the full-size illumination's division, to float rounding
    full = normalise_light(img, paper_mask=np.ones((h, w), bool))
    expect = SRGB_TO_LINEAR[img.reshape(-1, 3)[idx]] / full.illumination_full.reshape(-1, 3)[idx]
    assert np.allclose(got, expect, rtol=2e-6, atol=1e-7)
    # the taps are the model's (frame size and pixels), not the photo's: another photo of
    # the same size samples through them just as through its own arithmetic
    other = normalise_light(np.ascontiguousarray(img[::-1, ::-1]), paper_mask=np.ones((h, w), bool))
    assert np.array_equal(other.sample(other.taps(idx)), _plain_sample(other, idx))
    assert other.taps(idx) is taps


def test_taps_are_cached_per_array_and_selected_exactly():
    idx = np.arange(0, 157 * 203, 7)
    a = pixel_taps(idx, (157, 203), 12)
    assert pixel_taps(idx, (157, 203), 12) is a
    # an equal copy is another list (the cache keys on the array itself), with equal taps
    b = pixel_taps(idx.copy(), (157, 203), 12)
    assert b is not a and all(np.array_equal(getattr(a, k), getattr(b, k))
                              for k in ("index", "tap0", "tap1", "w0", "w1"))
    # another frame size or block is another set of taps
    assert pixel_taps(idx, (158, 203), 12) is not a
    assert pixel_taps(idx, (157, 203), 10).block == 10
    # a selection is the taps of the selected pixels
    keep = (idx % 3) != 0
    sel = a.select(keep)
    ref = PixelTaps.of(idx[keep], (157, 203), 12)
    assert all(np.array_equal(getattr(sel, k), getattr(ref, k))
               for k in ("index", "tap0", "tap1", "w0", "w1"))
    assert a.select(np.ones(idx.size, bool)) is a
    assert a.nbytes == idx.size * 40


def test_a_selection_samples_as_the_pixels_themselves():
    img = _photo()
    h, w = img.shape[:2]
    valid = np.ones((h, w), bool)
    valid[:, :30] = False  # a photo cut off at the left
    light = normalise_light(img, paper_mask=np.ones((h, w), bool), valid=valid)
    idx = np.arange(3, h * w, 5)
    keep = valid.reshape(-1)[idx]
    assert np.array_equal(light.sample(light.taps(idx, keep=keep)), _plain_sample(light, idx[keep]))


def test_taps_of_another_frame_or_a_bad_mask_are_refused():
    img = _photo()
    h, w = img.shape[:2]
    light = normalise_light(img, paper_mask=np.ones((h, w), bool))
    wrong = PixelTaps.of(np.arange(100), (h + 12, w), 12)
    with pytest.raises(ValueError, match="do not fit this photo's"):
        light.sample(wrong)
    taps = light.taps(np.arange(100))
    with pytest.raises(ValueError, match="keep mask of shape"):
        taps.select(np.ones(99, bool))
