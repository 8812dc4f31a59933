"""Exact speed-ups of the read (session 11, second round) keep their values: each fast path
against the plain computation it replaces."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

import vision.light as light


def _integral_block_sums(a: np.ndarray, block: int) -> np.ndarray:
    """The block sums as they were computed before (one 32-bit integral image): the oracle."""
    S = cv2.integral(a, sdepth=cv2.CV_32S)[::block, ::block]
    return (S[1:, 1:] - S[:-1, 1:] - S[1:, :-1] + S[:-1, :-1]).astype(np.float32)


@pytest.mark.parametrize("block", [1, 2, 3, 7, 12, 15, 16, 17, 24])
@pytest.mark.parametrize("channels", [None, 1, 3])
def test_block_sums_are_the_integral_images(block, channels):
    rng = np.random.default_rng(block * 10 + (channels or 0))
    shape = (9 * block + 5, 11 * block + 3) + ((channels,) if channels else ())
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    a[: 2 * block, : 3 * block] = 255  # whole blocks at the largest sum (uint16's edge at 16)
    hb, wb = shape[0] // block, shape[1] // block
    crop = a[: hb * block, : wb * block]  # a strided view, as normalise_light passes
    got = light._block_sums(crop, block)
    want = _integral_block_sums(crop, block)
    assert got.dtype == np.float32 and got.shape == want.shape
    assert np.array_equal(got, want)
    # (and the plain float64 sums)
    plain = crop.reshape((hb, block, wb, block) + shape[2:]).astype(np.float64).sum(axis=(1, 3))
    assert np.array_equal(got, plain.astype(np.float32).reshape(got.shape))


def test_block_sums_of_a_sheet_sized_mask_and_photo():
    rng = np.random.default_rng(5)
    photo = rng.integers(0, 256, (827, 1169, 3), dtype=np.uint8)
    mask = (rng.random((827, 1169)) < 0.7).view(np.uint8)
    crop = np.s_[:816, :1164]
    for a in (photo[crop], mask[crop], cv2.cvtColor(photo, cv2.COLOR_RGB2GRAY)[crop]):
        assert np.array_equal(light._block_sums(a, 12), _integral_block_sums(a, 12))


def test_masked_grey_by_product_is_cv2_masked_grey():
    rng = np.random.default_rng(6)
    grey = rng.integers(0, 256, (97, 131), dtype=np.uint8)
    m = (rng.random((97, 131)) < 0.5).view(np.uint8)
    assert np.array_equal(np.multiply(grey, m), cv2.bitwise_and(grey, grey, mask=m))


def test_normalise_light_uses_the_exact_block_sums(monkeypatch):
    """normalise_light with the fast block sums gives what it gives with the integral's."""
    rng = np.random.default_rng(7)
    H, W = 250, 340
    yy, xx = np.mgrid[0:H, 0:W]
    shade = 0.6 + 0.4 * (xx / W)
    img = np.clip(np.stack([230 * shade, 220 * shade, 200 * shade], -1)
                  + rng.normal(0, 4, (H, W, 3)), 0, 255).astype(np.uint8)
    img[100:140, 50:200] = (40, 60, 160)  # a pencil stroke on the paper
    paper = np.ones((H, W), bool)
    paper[20:60, 20:300] = False  # print
    valid = np.ones((H, W), bool)
    valid[:, :15] = False
    for v in (None, valid):
        fast = light.normalise_light(img, paper_mask=paper, valid=v)
        monkeypatch.setattr(light, "_block_sums", _integral_block_sums)
        light._counts.clear()
        plain = light.normalise_light(img, paper_mask=paper, valid=v)
        monkeypatch.undo()
        light._counts.clear()
        assert np.array_equal(fast.illumination, plain.illumination)
        assert (fast.paper_coverage, fast.white_balance, fast.shading_range) == \
            (plain.paper_coverage, plain.white_balance, plain.shading_range)


@pytest.mark.parametrize("block", [1, 2, 5, 12, 16, 23])
def test_threshold_by_block_is_the_full_size_threshold_image(block):
    """light._at_least against what normalise_light compared before: a full-size threshold
    image (cv2.resize INTER_NEAREST by ``block``), cv2.compare and the paper mask."""
    rng = np.random.default_rng(block)
    hb, wb = 13, 17
    grey = rng.integers(0, 256, (hb * block, wb * block), dtype=np.uint8)
    thr = rng.integers(0, 256, (hb, wb), dtype=np.uint8)
    thr[0, 0], thr[-1, -1] = 0, 255  # every pixel kept / only white kept
    big = (rng.random((hb * block + 3, wb * block + 5)) < 0.6).view(np.uint8)
    m = big[: hb * block, : wb * block]  # a strided 0/1 view, as normalise_light passes
    full = cv2.resize(thr, (wb * block, hb * block), interpolation=cv2.INTER_NEAREST)
    want = cv2.bitwise_and(cv2.compare(grey, full, cv2.CMP_GE), m)
    got = light._at_least(grey, thr, m, block)
    assert got.dtype == np.uint8 and got.shape == want.shape
    assert np.array_equal(got, want)
    assert set(np.unique(got)) <= {0, 1}
