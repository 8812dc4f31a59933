"""Normalise light: flatten shading and shadows, white-balance on the paper.

The paper is white. Wherever the rectified photo shows bare paper (the clean render says where
nothing is printed and no region is, so no pencil is expected there), its colour *is* the local
illumination times the camera's colour response. We estimate that colour on a coarse grid of
blocks (robustly: pencil strays and print bleed are rejected), fill blocks that show no paper
from their neighbours, smooth, and divide the photo by it. In the result paper is ``(1, 1, 1)``
in linear RGB everywhere: shading, shadows and colour casts are gone, and pencil texels keep
their reflectance (what a pencil *is*, independent of the lamp).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from vision.colour import SRGB_TO_LINEAR, linear_to_srgb


@dataclass(frozen=True)
class NormalisedLight:
    """Result of :func:`normalise_light`.

    Attributes
    ----------
    linear : (H, W, 3) float32 ndarray
        Linear RGB divided by the paper's illumination (paper = 1).
    illumination : (h, w, 3) float32 ndarray
        The coarse paper colour per block (linear RGB), before smoothing to full size.
    paper_coverage : float
        Share of blocks that showed enough bare paper to measure (the rest were filled in).
    white_balance : tuple of float
        Median paper colour (linear R, G, B) over the sheet: the cast that was removed.
    shading_range : float
        Ratio of the brightest to the darkest paper block (1 = perfectly even light).
    """

    linear: np.ndarray
    illumination: np.ndarray
    paper_coverage: float
    white_balance: tuple[float, float, float]
    shading_range: float

    def to_srgb(self) -> np.ndarray:
        """The normalised photo as uint8 sRGB (for debug pictures)."""
        return linear_to_srgb(self.linear)


def _block_sum(x: np.ndarray, block: int, hb: int, wb: int) -> np.ndarray:
    h, w = hb * block, wb * block
    x = x[:h, :w]
    shp = (hb, block, wb, block) + x.shape[2:]
    return x.reshape(shp).sum(axis=(1, 3))


def normalise_light(image: np.ndarray, *, paper_mask: np.ndarray, valid: np.ndarray | None = None,
                    block: int = 12, min_paper: float = 0.2, reject: float = 0.12) -> NormalisedLight:
    """Divide a rectified photo by its paper's illumination.

    Parameters
    ----------
    image : (H, W, 3) uint8 ndarray
        Rectified photo (sRGB).
    paper_mask : (H, W) bool ndarray
        Pixels where the sheet is expected to be bare paper (nothing printed, no region).
    valid : (H, W) bool ndarray, optional
        Pixels that came from inside the photo; others are ignored.
    block : int
        Block side in px for the illumination grid (about 3 mm at 100 dpi: fine enough for
        soft shadows, coarse enough to hold many paper pixels).
    min_paper : float
        Minimum share of paper pixels for a block to be measured.
    reject : float
        Relative deviation (in luminance) from the block's first estimate beyond which a pixel
        is not counted as paper (pencil strays, print bleed from misregistration).

    Returns
    -------
    NormalisedLight

    Raises
    ------
    ValueError
        on shapes that do not match.
    """
    image = np.asarray(image)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise ValueError(f"image must be (H, W, 3) uint8, got {image.shape} {image.dtype}")
    H, W = image.shape[:2]
    paper_mask = np.asarray(paper_mask, bool)
    if paper_mask.shape != (H, W):
        raise ValueError(f"paper_mask shape {paper_mask.shape} does not match image {(H, W)}")
    if valid is not None:
        valid = np.asarray(valid, bool)
        if valid.shape != (H, W):
            raise ValueError(f"valid shape {valid.shape} does not match image {(H, W)}")
        paper_mask = paper_mask & valid
    block = int(max(2, block))
    lin = SRGB_TO_LINEAR[image]
    hb, wb = max(1, H // block), max(1, W // block)
    m = paper_mask.astype(np.float32)
    lum = lin @ np.array([0.2126, 0.7152, 0.0722], np.float32)
    # Pass 1: the paper is the brightest large population of a block; a high quantile-like
    # estimate is the block mean of paper pixels brighter than the block mean.
    cnt = _block_sum(m, block, hb, wb)
    s1 = _block_sum(lum * m, block, hb, wb) / np.maximum(cnt, 1)
    ref = cv2.resize(s1, (wb * block, hb * block), interpolation=cv2.INTER_NEAREST)
    ref_full = np.ones((H, W), np.float32)
    ref_full[:hb * block, :wb * block] = ref
    # Pass 2: pixels far below the block's first estimate are pencil or ink, not paper.
    keep = m * (lum >= (1 - reject) * ref_full)
    cnt2 = _block_sum(keep, block, hb, wb)
    sums = _block_sum(lin * keep[..., None], block, hb, wb)
    ok = cnt2 >= min_paper * block * block
    illum = np.zeros((hb, wb, 3), np.float32)
    illum[ok] = sums[ok] / cnt2[ok, None]
    coverage = float(ok.mean())
    if not ok.any():
        # No paper seen at all (should not happen on a sheet): fall back to a global white
        # point from the brightest pixels, so the result is still white-balanced.
        flat = lin.reshape(-1, 3)
        top = flat[lum.reshape(-1) >= np.quantile(lum, 0.9)]
        wp = np.maximum(top.mean(axis=0), 1e-3)
        illum[:] = wp
        ok[:] = True
    # Fill blocks without paper by normalised convolution from their measured neighbours, at
    # growing scales, so a large printed area borrows light from around it.
    filled = illum.copy()
    have = ok.astype(np.float32)
    missing = ~ok
    sigma = 1.0
    while missing.any() and sigma < max(hb, wb) * 2:
        num = cv2.GaussianBlur(illum * have[..., None], (0, 0), sigma)
        den = cv2.GaussianBlur(have, (0, 0), sigma)
        good = missing & (den > 1e-3)
        filled[good] = num[good] / den[good, None]
        missing &= ~good
        sigma *= 2
    if missing.any():
        filled[missing] = np.median(illum[ok], axis=0)
    # A light smoothing kills block noise without blurring shadow edges much (~1 block).
    smooth = cv2.GaussianBlur(filled, (0, 0), 0.7) if min(hb, wb) > 2 else filled
    full = cv2.resize(smooth, (W, H), interpolation=cv2.INTER_LINEAR)
    full = np.maximum(full, 1e-3)
    out = lin / full
    wbal = np.median(illum[ok], axis=0)
    lum_blocks = illum[ok] @ np.array([0.2126, 0.7152, 0.0722], np.float32)
    rng = float(lum_blocks.max() / max(lum_blocks.min(), 1e-3)) if lum_blocks.size else 1.0
    return NormalisedLight(out.astype(np.float32, copy=False), smooth, coverage,
                           tuple(float(v) for v in wbal), rng)


__all__ = ["NormalisedLight", "normalise_light"]
