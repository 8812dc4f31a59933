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
from functools import cached_property

import cv2
import numpy as np

from vision.colour import SRGB_TO_LINEAR, linear_to_srgb


@dataclass(frozen=True)
class NormalisedLight:
    """Result of :func:`normalise_light`.

    Attributes
    ----------
    image : (H, W, 3) uint8 ndarray
        The rectified photo as given.
    illumination : (h, w, 3) float32 ndarray
        The coarse paper colour per block (linear RGB), smoothed: block ``(r, c)`` is centred
        on pixel ``((r + 0.5) * block, (c + 0.5) * block)``.
    paper_coverage : float
        Share of blocks that showed enough bare paper to measure (the rest were filled in).
    white_balance : tuple of float
        Median paper colour (linear R, G, B) over the sheet: the cast that was removed.
    shading_range : float
        Ratio of the brightest to the darkest paper block (1 = perfectly even light).
    block : int
        Block side in px of ``illumination``.

    Notes
    -----
    The per-pixel illumination (``illumination_full``) is the block grid upsampled bilinearly
    (``cv2.resize``, block centre to block centre; edge rows and columns beyond the last whole
    block repeat it). It is built only when asked for: the reader needs it at the pixels of its
    regions and of some paper only, and :meth:`sample` computes exactly those (the same values
    to float rounding, ~1e-7), which saves a 12 MB float image per photo.
    """

    image: np.ndarray
    illumination: np.ndarray
    paper_coverage: float
    white_balance: tuple[float, float, float]
    shading_range: float
    block: int = 12

    @cached_property
    def _upsampling(self):
        """Row and column interpolation tables of the block grid (see :meth:`sample`)."""
        H, W = self.image.shape[:2]
        hb, wb = self.illumination.shape[:2]
        b = self.block
        # cv2.resize by exactly ``b`` along x only: its vertical pass is then the identity
        # (weights 1 and 0), so these rows are the full resize's horizontal pass.
        rows = cv2.resize(self.illumination, (wb * b, hb), interpolation=cv2.INTER_LINEAR)
        # ... and its vertical weights, as cv2.resize computes them (float32, edges clamped)
        fy = ((np.arange(hb * b) + 0.5) * (1.0 / b) - 0.5).astype(np.float32)
        sy = np.floor(fy).astype(np.int64)
        fy = fy - sy.astype(np.float32)
        lo, hi = sy < 0, sy >= hb - 1
        fy[lo | hi] = 0
        sy = np.clip(sy, 0, hb - 1)
        sy1 = np.minimum(sy + 1, hb - 1)
        # pixels past the last whole block repeat its edge (copyMakeBorder REPLICATE)
        ri = np.minimum(np.arange(H), hb * b - 1)
        ci = np.minimum(np.arange(W), wb * b - 1)
        # flat offsets into ``rows`` (hb * wb * b, 3): row start of each pixel row's two taps
        return (rows.reshape(-1, 3), sy[ri] * (wb * b), sy1[ri] * (wb * b), fy[ri], ci)

    @cached_property
    def illumination_full(self) -> np.ndarray:
        """(H, W, 3) float32: the paper's linear RGB at every pixel (smooth), what the photo
        is divided by."""
        H, W = self.image.shape[:2]
        hb, wb = self.illumination.shape[:2]
        b = self.block
        full = cv2.resize(self.illumination, (wb * b, hb * b), interpolation=cv2.INTER_LINEAR)
        if full.shape[:2] != (H, W):
            full = cv2.copyMakeBorder(full, 0, H - hb * b, 0, W - wb * b, cv2.BORDER_REPLICATE)
        return np.maximum(full, 1e-3)

    def illumination_at(self, flat_index: np.ndarray) -> np.ndarray:
        """``illumination_full`` at flat pixel indices, ``(N, 3)`` float32, without building it."""
        if "illumination_full" in self.__dict__:
            return self.illumination_full.reshape(-1, 3)[flat_index]
        rows, r0, r1, fy, ci = self._upsampling
        i, j = np.divmod(np.asarray(flat_index, np.int64), self.image.shape[1])
        j = ci.take(j)
        w1 = fy.take(i)[:, None]
        out = rows.take(r0.take(i) + j, axis=0)
        out *= np.float32(1) - w1
        out += rows.take(r1.take(i) + j, axis=0) * w1
        return np.maximum(out, np.float32(1e-3), out=out)

    @cached_property
    def linear(self) -> np.ndarray:
        """(H, W, 3) float32 linear RGB divided by the paper's illumination (paper = 1)."""
        return SRGB_TO_LINEAR[self.image] / self.illumination_full

    def sample(self, flat_index: np.ndarray) -> np.ndarray:
        """Normalised linear RGB at flat pixel indices, ``(N, 3)`` float32 (no full-size
        division: the reader only needs the pixels of its regions and of some paper)."""
        idx = np.asarray(flat_index)
        # take() rather than fancy indexing: the same values, a third of the time
        srgb = self.image.reshape(-1, 3).take(idx, axis=0)
        return SRGB_TO_LINEAR.take(srgb) / self.illumination_at(idx)

    def to_srgb(self) -> np.ndarray:
        """The normalised photo as uint8 sRGB (for debug pictures)."""
        return linear_to_srgb(self.linear)


def _block_sums(a: np.ndarray, block: int) -> np.ndarray:
    """Exact sums of ``a`` (uint8, (h, w) or (h, w, c), sides multiples of ``block``) over
    ``block`` x ``block`` blocks, float32 ``(h // block, w // block[, c])``. One integral
    image instead of a float copy of the picture: the same sums, a third of the time."""
    S = cv2.integral(a, sdepth=cv2.CV_32S)[::block, ::block]
    return (S[1:, 1:] - S[:-1, 1:] - S[1:, :-1] + S[:-1, :-1]).astype(np.float32)


def _srgb_mean_to_linear(v: np.ndarray) -> np.ndarray:
    v = np.clip(v / 255.0, 0, 1)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4).astype(np.float32)


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
        Relative deviation (in grey level) below the block's first estimate beyond which a
        pixel is not counted as paper (pencil strays, print bleed from misregistration).

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
    block = int(max(1, min(max(2, block), H, W)))  # at least one whole block
    hb, wb = H // block, W // block
    hc, wc = hb * block, wb * block
    img = image[:hc, :wc]
    m = paper_mask[:hc, :wc].view(np.uint8)  # 0/1
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    area = float(block * block)
    # Pass 1: mean grey of the paper pixels of each block (exact integer sums).
    cnt = _block_sums(m, block)
    s1 = _block_sums(cv2.bitwise_and(grey, grey, mask=m), block) / np.maximum(cnt, 1)
    # Pass 2: pixels well below the block's first estimate are pencil or ink, not paper.
    # ``grey >= t`` for an integer grey level is ``grey >= ceil(t)``: one uint8 comparison
    # against the block's threshold, repeated over its pixels.
    thr = np.clip(np.ceil((1 - reject) * s1), 0, 255).astype(np.uint8)
    thr_full = cv2.resize(thr, (wc, hc), interpolation=cv2.INTER_NEAREST)
    keep = cv2.bitwise_and(cv2.compare(grey, thr_full, cv2.CMP_GE), m)  # 0/1
    cnt2 = _block_sums(keep, block)
    sums = _block_sums(cv2.bitwise_and(img, img, mask=keep), block)
    ok = cnt2 >= min_paper * area
    illum = np.zeros((hb, wb, 3), np.float32)
    illum[ok] = _srgb_mean_to_linear(sums[ok] / cnt2[ok, None])
    coverage = float(ok.mean())
    if not ok.any():
        # No paper seen at all (should not happen on a sheet): fall back to a global white
        # point from the brightest pixels, so the result is still white-balanced.
        g = grey.reshape(-1)
        top = img.reshape(-1, 3)[g >= np.quantile(g, 0.9)]
        illum[:] = np.maximum(_srgb_mean_to_linear(top.mean(axis=0)), 1e-3)
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
    # Block centres sit at (k + 0.5) * block: the per-pixel illumination is the bilinear
    # upsampling of ``smooth`` (NormalisedLight.illumination_full), computed where needed.
    wbal = np.median(illum[ok], axis=0)
    lum_blocks = illum[ok] @ np.array([0.2126, 0.7152, 0.0722], np.float32)
    rng = float(lum_blocks.max() / max(lum_blocks.min(), 1e-3)) if lum_blocks.size else 1.0
    return NormalisedLight(image, smooth.astype(np.float32, copy=False), coverage,
                           tuple(float(v) for v in wbal), rng, block)


__all__ = ["NormalisedLight", "normalise_light"]
