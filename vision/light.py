"""Normalise light: flatten shading and shadows, white-balance on the paper.

The paper is white. Wherever the rectified photo shows bare paper (the clean render says where
nothing is printed and no region is, so no pencil is expected there), its colour *is* the local
illumination times the camera's colour response. We estimate that colour on a coarse grid of
blocks (robustly: pencil strays and print bleed are rejected), fill blocks that show no paper
from their neighbours, smooth, and divide the photo by it. In the result paper is ``(1, 1, 1)``
in linear RGB everywhere: shading, shadows and colour casts are gone, and pencil texels keep
their reflectance (what a pencil *is*, independent of the lamp).

The division is exact for paper only. A phone applies its tone curve (and saturation) *after*
the colour cast, per channel, so under a strong cast a diagonal division leaves part of the cast
in every darker colour: black print under warm light comes out red (linear (0.067, 0.031,
0.022) where a neutral photo gives (0.014, 0.015, 0.014)), and pencils shift towards red
(blue -> purple, purple -> red, green -> orange). With the template's black print given
(:func:`print_pixels`), each channel also gets the exponent that makes that print come out
colourless (:attr:`NormalisedLight.tone`; paper, 1, stays 1). The exponents are measured on the
photo's own print, never assumed from a camera model; they are bounded, and left at 1 where the
print is too little, washed out or clipped to measure. A learned reader gets it only if it
was trained with it (:func:`tone_correction_for`); the bundled readers since reader-v11
(session 22) were, so a default read has it on.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace
from functools import cached_property

import cv2
import numpy as np

from vision.colour import SRGB_TO_LINEAR, linear_to_srgb


@dataclass(frozen=True, eq=False)
class PixelTaps:
    """Where the per-pixel illumination of some pixels reads the block grid.

    The illumination at a pixel is the block grid upsampled bilinearly as ``cv2.resize`` does
    it (:class:`NormalisedLight`): along x into rows of ``hb * wb * block`` values, then
    between two of those rows with a vertical weight. Which two values and with what weights
    depends only on the frame's size, the block side and the pixels, not on the photo: the
    reader samples the same pixel lists (its sheet model's) on every photo, so they are
    computed once per list (:func:`pixel_taps`) and each photo only gathers and blends.

    Attributes
    ----------
    index : (N,) intp ndarray
        Flat pixel indices (row-major in an ``shape`` frame).
    tap0, tap1 : (N,) intp ndarray
        Offsets into the x-upsampled rows (``NormalisedLight._upsampling``) of the pixel's
        upper and lower taps.
    w0, w1 : (N, 3) float32 ndarray
        Their weights (``w0 = 1 - w1``, in float32 as the blend has always computed it),
        repeated over the three channels: a multiply with a broadcast ``(N, 1)`` weight takes
        twice as long as with a whole ``(N, 3)`` one, and the blend is the sampling's largest
        step.
    shape : tuple of int
        Frame ``(H, W)`` in px.
    block : int
        Block side in px.
    """

    index: np.ndarray
    tap0: np.ndarray
    tap1: np.ndarray
    w0: np.ndarray
    w1: np.ndarray
    shape: tuple[int, int]
    block: int

    @classmethod
    def of(cls, flat_index: np.ndarray, shape: tuple[int, int], block: int) -> "PixelTaps":
        """The taps of ``flat_index`` in an ``shape`` = ``(H, W)`` frame whose illumination
        grid has ``block`` px blocks (``(H // block, W // block)`` of them)."""
        H, W = (int(v) for v in shape)
        b = int(block)
        hb, wb = H // b, W // b
        idx = np.asarray(flat_index, np.intp).reshape(-1)
        # cv2.resize's vertical weights (float32, edges clamped), as it computes them
        fy = ((np.arange(hb * b) + 0.5) * (1.0 / b) - 0.5).astype(np.float32)
        sy = np.floor(fy).astype(np.intp)
        fy = fy - sy.astype(np.float32)
        lo, hi = sy < 0, sy >= hb - 1
        fy[lo | hi] = 0
        sy = np.clip(sy, 0, hb - 1)
        sy1 = np.minimum(sy + 1, hb - 1)
        # pixels past the last whole block repeat its edge (copyMakeBorder REPLICATE)
        ri = np.minimum(np.arange(H), hb * b - 1)
        ci = np.minimum(np.arange(W), wb * b - 1)
        i, j = np.divmod(idx, W)
        j = ci.take(j)
        i = ri.take(i)
        w1 = fy.take(i)[:, None]
        full = (idx.size, 3)
        return cls(idx, sy.take(i) * (wb * b) + j, sy1.take(i) * (wb * b) + j,
                   np.ascontiguousarray(np.broadcast_to(np.float32(1) - w1, full)),
                   np.ascontiguousarray(np.broadcast_to(w1, full)), (H, W), b)

    def select(self, keep: np.ndarray) -> "PixelTaps":
        """The taps of ``index[keep]`` (a boolean mask or positions)."""
        keep = np.asarray(keep)
        if keep.dtype == bool:
            if keep.shape != self.index.shape:
                raise ValueError(f"keep mask of shape {keep.shape} does not match "
                                 f"{self.index.size} pixels")
            if keep.all():  # (the usual case: every pixel inside the photo)
                return self
            keep = np.flatnonzero(keep)  # take() by position: half the time of a mask
        return PixelTaps(self.index.take(keep), self.tap0.take(keep), self.tap1.take(keep),
                         self.w0.take(keep, axis=0), self.w1.take(keep, axis=0), self.shape,
                         self.block)

    @property
    def nbytes(self) -> int:
        """Memory held by the taps' own arrays (bytes)."""
        return self.tap0.nbytes + self.tap1.nbytes + self.w0.nbytes + self.w1.nbytes


# The taps kept: a sheet model samples three pixel lists (regions, halo, paper), 6.5 MB of
# taps for the largest of the six sheets at the read's 100 dpi (32 MB for all six); the
# oldest lists are dropped beyond this (a server reading at many resolutions).
# (session 46) The checks added since sample a dozen lists of a model on every photo (the
# ring, the stains', the faint ink's, the print ink's, the guides' ...): 115.7 MB of taps for
# all six sheets at 100 dpi. Under the former cap of 64 MB a process reading the six sheets
# in turn (a server; the read bench) dropped each list just before it was needed again
# (oldest first, taken in the same order on every photo), so every photo computed all its
# taps afresh: ~470,000 pixels' worth, ~7 ms of a 12 MP read on one core. The cap leaves room
# for all six and some more lists; a process reading one sheet holds ~19 MB of them.
_TAPS_MAX_BYTES = 160 << 20
_taps_lock = threading.Lock()
_taps: dict[tuple, tuple[np.ndarray, PixelTaps]] = {}


def pixel_taps(flat_index: np.ndarray, shape: tuple[int, int], block: int) -> PixelTaps:
    """:meth:`PixelTaps.of`, cached per pixel-list array (by identity) for pixel lists that
    are sampled on every photo and never changed (a sheet model's ``pix``, ``halo_pix``,
    ``paper_sample``). The cache holds each array it was asked about (so an identity cannot
    be reused while its entry lives) and 40 bytes a pixel of taps, up to ``_TAPS_MAX_BYTES``
    in all, oldest dropped first."""
    if not isinstance(flat_index, np.ndarray):
        return PixelTaps.of(flat_index, shape, block)
    key = (id(flat_index), tuple(int(v) for v in shape), int(block))
    with _taps_lock:
        hit = _taps.get(key)
    if hit is not None and hit[0] is flat_index:
        return hit[1]
    t = PixelTaps.of(flat_index, shape, block)
    with _taps_lock:
        _taps[key] = (flat_index, t)
        while len(_taps) > 1 and sum(v[1].nbytes for v in _taps.values()) > _TAPS_MAX_BYTES:
            _taps.pop(next(iter(_taps)))
    return t


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
    tone : tuple of float
        Per-channel exponents applied to the divided linear RGB (``(1, 1, 1)``: none), measured
        on the black print so that it comes out colourless (:func:`normalise_light`).

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
    tone: tuple[float, float, float] = (1.0, 1.0, 1.0)

    @cached_property
    def _upsampling(self) -> np.ndarray:
        """The block grid upsampled along x only, ``(hb * wb * block, 3)`` float32: the rows
        :class:`PixelTaps` read (see :meth:`sample`)."""
        hb, wb = self.illumination.shape[:2]
        # cv2.resize by exactly ``b`` along x only: its vertical pass is then the identity
        # (weights 1 and 0), so these rows are the full resize's horizontal pass.
        rows = cv2.resize(self.illumination, (wb * self.block, hb), interpolation=cv2.INTER_LINEAR)
        return rows.reshape(-1, 3)

    def taps(self, flat_index: np.ndarray, *, keep: np.ndarray | None = None) -> "PixelTaps":
        """:func:`pixel_taps` of ``flat_index`` in this photo's frame (cached per pixel list:
        see there), restricted to ``flat_index[keep]`` when ``keep`` is given."""
        t = pixel_taps(flat_index, self.image.shape[:2], self.block)
        return t if keep is None else t.select(keep)

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

    def illumination_at(self, flat_index) -> np.ndarray:
        """``illumination_full`` at flat pixel indices (or at a :class:`PixelTaps`' pixels),
        ``(N, 3)`` float32, without building it."""
        if not isinstance(flat_index, PixelTaps):
            flat_index = PixelTaps.of(flat_index, self.image.shape[:2], self.block)
        t = flat_index
        if t.shape != self.image.shape[:2] or t.block != self.block:
            raise ValueError(f"taps for a {t.shape} frame with {t.block} px blocks do not fit "
                             f"this photo's {self.image.shape[:2]} frame and {self.block} px "
                             "blocks: make them with NormalisedLight.taps")
        if "illumination_full" in self.__dict__:
            return self.illumination_full.reshape(-1, 3)[t.index]
        rows = self._upsampling
        out = rows.take(t.tap0, axis=0)
        out *= t.w0
        out += rows.take(t.tap1, axis=0) * t.w1
        return np.maximum(out, np.float32(1e-3), out=out)

    @cached_property
    def linear(self) -> np.ndarray:
        """(H, W, 3) float32 linear RGB divided by the paper's illumination (paper = 1)."""
        return self._tone(SRGB_TO_LINEAR[self.image] / self.illumination_full)

    def sample(self, flat_index) -> np.ndarray:
        """Normalised linear RGB at flat pixel indices (or at a :class:`PixelTaps`' pixels),
        ``(N, 3)`` float32 (no full-size division: the reader only needs the pixels of its
        regions and of some paper). Taps from :meth:`taps` are the fast way for pixel lists
        sampled on every photo: the same values, without the per-pixel index arithmetic."""
        if not isinstance(flat_index, PixelTaps):
            flat_index = PixelTaps.of(flat_index, self.image.shape[:2], self.block)
        # take() rather than fancy indexing: the same values, a third of the time
        srgb = self.image.reshape(-1, 3).take(flat_index.index, axis=0)
        # cv2.LUT is the same table lookup as SRGB_TO_LINEAR.take(srgb), a third of the time
        lin = cv2.LUT(srgb, SRGB_TO_LINEAR) if srgb.size else SRGB_TO_LINEAR.take(srgb)
        return self._tone(lin / self.illumination_at(flat_index))

    def _tone(self, x: np.ndarray) -> np.ndarray:
        """``x`` (divided linear RGB, float32, changed in place) with the per-channel exponents
        ``tone`` applied (returned as is when there are none)."""
        if self.tone == (1.0, 1.0, 1.0):
            return x
        # (a zero stays zero; exponents near 1 keep values above 1, glare, near where they were)
        return np.power(x, np.asarray(self.tone, np.float32), out=x)

    def to_srgb(self) -> np.ndarray:
        """The normalised photo as uint8 sRGB (for debug pictures)."""
        return linear_to_srgb(self.linear)


#: Largest block whose sums of uint8 values fit in uint16 (16 * 16 * 255 = 65280).
_UINT16_BLOCK = 16


def _block_sums(a: np.ndarray, block: int) -> np.ndarray:
    """Exact sums of ``a`` (uint8, (h, w) or (h, w, c), sides multiples of ``block``) over
    ``block`` x ``block`` blocks, float32 ``(h // block, w // block[, c])``.

    Why so: the rows of each band of ``block`` rows are added as uint16 (one strided reduce),
    then the band's ``block`` columns of each block, still as uint16 (a block's sum is at most
    ``block * block * 255``, which fits up to :data:`_UINT16_BLOCK`): the same integers as an
    integral image (``cv2.integral``, kept for larger blocks) in about half its time, as
    neither a 32-bit integral of the whole picture nor its four corner gathers are made."""
    h, w = a.shape[:2]
    hb, wb = h // block, w // block
    if block > _UINT16_BLOCK:
        S = cv2.integral(a, sdepth=cv2.CV_32S)[::block, ::block]
        return (S[1:, 1:] - S[:-1, 1:] - S[1:, :-1] + S[:-1, :-1]).astype(np.float32)
    c = a.shape[2] if a.ndim == 3 else 1
    # (a view when each row's pixels are contiguous, as in a crop of a whole picture)
    rows = np.add.reduce(a.reshape(hb, block, w * c), axis=1, dtype=np.uint16)
    cols = rows.reshape(hb * wb, block, c)
    acc = cols[:, 0, :].copy()
    for k in range(1, block):
        np.add(acc, cols[:, k, :], out=acc)
    # (one channel comes back (hb, wb), as from cv2.integral)
    return acc.astype(np.float32).reshape((hb, wb) if c == 1 else (hb, wb, c))


def _at_least(grey: np.ndarray, thr: np.ndarray, m: np.ndarray, block: int) -> np.ndarray:
    """``grey >= thr`` of each pixel's block, where ``m`` (0/1) is 1: uint8 0/1, ``grey``'s
    shape (uint8 ``(hb * block, wb * block)``, ``thr`` uint8 ``(hb, wb)``).

    Why so: each band of ``block`` rows is compared with its blocks' thresholds repeated along
    x (``hb * wb * block`` values) instead of with a full-size threshold image
    (``cv2.resize`` INTER_NEAREST by exactly ``block``, which repeats each threshold over its
    block): the same comparisons, ~0.35 ms less on a sheet at 100 dpi."""
    hb = thr.shape[0]
    h, w = grey.shape
    ge = np.greater_equal(grey.reshape(hb, block, w), np.repeat(thr, block, axis=1)[:, None, :])
    return np.bitwise_and(ge.reshape(h, w).view(np.uint8), m)


_counts_lock = threading.Lock()
_counts: dict[tuple, tuple] = {}


def _paper_counts(paper_mask: np.ndarray, block: int) -> np.ndarray:
    """``_block_sums`` of a sheet model's paper mask (its paper pixels per block), computed
    once per mask array and block (cached by identity while the array lives: a weak
    reference, so the cache keeps no mask alive; read-only, ~30 KB each)."""
    key = (id(paper_mask), paper_mask.shape, int(block))
    with _counts_lock:
        hit = _counts.get(key)
    if hit is not None and hit[0]() is paper_mask:
        return hit[1]
    hb, wb = paper_mask.shape[0] // block, paper_mask.shape[1] // block
    cnt = _block_sums(paper_mask[:hb * block, :wb * block].view(np.uint8), block)
    cnt.setflags(write=False)
    with _counts_lock:
        for k in [k for k, v in _counts.items() if v[0]() is None]:
            del _counts[k]  # (masks gone: their sheet models were dropped)
        _counts[key] = (weakref.ref(paper_mask), cnt)
    return cnt


def _srgb_mean_to_linear(v: np.ndarray) -> np.ndarray:
    v = np.clip(v / 255.0, 0, 1)
    return np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4).astype(np.float32)


#: Whether the per-channel tone correction is measured and applied when no learned reader is
#: in use (the hand reader alone, or ``scripts/reader_dataset.py --tone on`` building corrected
#: rows); a learned reader always reads with the light it was trained on
#: (:func:`tone_correction_for`). Off: a light change moves features off a reader's training.
#: Measured (session 9, same photos, main's code): the hand reader gains 0.14-0.46 points on
#: each of 15 corpora (hard photos 0.45-1.35), but a refit on corrected rows (reader-v7's trees'
#: recipe, seed 0) read about as accurately as the baseline refit (hard +0.2 points), flagged
#: fewer regions and made 2 confident errors on validation corpora where the baseline made none.
#: The bundled readers since reader-v11 (session 22) were trained on corrected rows, so the
#: default read has the correction on; this switch stays off for the hand reader alone, as it
#: was measured.
TONE_CORRECTION = False
#: Black print in the clean render: every channel below this (0-255) and a chroma below
#: ``_PRINT_CHROMA``. Pencil overshoots its region: print closer than ``_PRINT_CLEAR_MM`` to a
#: region is not used.
_PRINT_DARK = 80
_PRINT_CHROMA = 20
_PRINT_CLEAR_MM = 1.5
#: At most this many print pixels (evenly spaced) are measured: plenty for three exponents.
_PRINT_SAMPLE = 20000
#: Least number of usable print pixels for a measurement (fewer: no correction).
_TONE_MIN_PX = 1500
#: Divided linear values (every channel) of the print pixels the fit uses: darker is noise,
#: JPEG and black clipping; lighter (blurred edges far into the paper, glare) carries little
#: of the tone curve and mostly the paper's noise.
_TONE_FIT_RANGE = (0.004, 0.9)
#: The print must be dark to tell the tone curve: if the median usable print pixel is lighter
#: than this (grey level, divided linear), the print is washed out (glare, blur, overexposure).
_TONE_MAX_PRINT = 0.45
#: The exponents are held within this range: the camera tone curves seen on warm photos give
#: 0.72-1.43 on the print (mid-tones bend more than the darkest print); beyond, the fit is
#: not a tone curve but something else on the print.
_TONE_BOUNDS = (0.7, 1.4)
#: Exponents all within this of 1 are left at 1: a neutral photo is read exactly as before.
_TONE_DEADBAND = 0.02


_print_lock = threading.Lock()
_print: dict[tuple, np.ndarray] = {}


def tone_correction_for(learned) -> bool:
    """Whether a photo read with the learned reader ``learned`` gets the tone correction: as
    that reader was trained (its model file's ``training.light_tone_correction``, written by
    scripts/train_reader.py; absent: trained without), since a reader fed colours of another
    light reads off its training without knowing it. Without a learned reader (the hand reader
    alone, or a dataset being built), ``TONE_CORRECTION`` decides."""
    if learned is None:
        return bool(TONE_CORRECTION)
    training = (getattr(learned, "meta", None) or {}).get("training") or {}
    return bool(training.get("light_tone_correction", False))


def print_pixels(model, *, on: bool | None = None) -> np.ndarray | None:
    """Flat indices (in the sheet model's frame) of pixels the template prints in black, away
    from every region, for the tone correction; ``None`` when the correction is off.

    Parameters
    ----------
    model : vision.marks.SheetModel
        The sheet model the photo is read with (its template, dpi, frame and region pixels).
    on : bool, optional
        Whether the correction is on (:func:`tone_correction_for` the reader in use); by
        default ``TONE_CORRECTION``.

    Returns
    -------
    (N,) intp ndarray or None
        At most ``_PRINT_SAMPLE`` pixels, evenly spaced over the print (cached per template
        and dpi; read-only, the same array every time so its taps are cached too).
    """
    if not (TONE_CORRECTION if on is None else on):
        return None
    t = model.template
    key = (t.id, t.version, t.source, round(float(model.dpi), 3), tuple(model.shape))
    with _print_lock:
        hit = _print.get(key)
    if hit is not None:
        return hit
    from vision._geom_render import reference_render  # (the renderer: loaded when needed)

    # with the markers: solid black, the darkest print there is, where a sheet has them; on a
    # sheet without, their place is bare paper, outside the fit's range (_TONE_FIT_RANGE)
    ref = np.asarray(reference_render(t, dpi=model.dpi, markers=True))
    if ref.shape[:2] != tuple(model.shape):
        raise ValueError(f"the template's render {ref.shape[:2]} does not match the sheet "
                         f"model's frame {tuple(model.shape)}")
    hi, lo = ref.max(axis=2).astype(np.int16), ref.min(axis=2).astype(np.int16)
    dark = (hi < _PRINT_DARK) & (hi - lo < _PRINT_CHROMA)
    reg = np.zeros(dark.shape, np.uint8)
    reg.reshape(-1)[model.pix] = 1
    k = max(3, int(round(model.dpi / 25.4 * _PRINT_CLEAR_MM * 2)) | 1)
    reg = cv2.dilate(reg, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (k, k)))
    idx = np.flatnonzero(dark & (reg == 0))
    if idx.size > _PRINT_SAMPLE:
        idx = idx[np.linspace(0, idx.size - 1, _PRINT_SAMPLE).astype(np.intp)]
    idx = np.ascontiguousarray(idx, np.intp)
    idx.setflags(write=False)
    with _print_lock:
        _print[key] = idx
    return idx


def tone_exponents(srgb: np.ndarray, lin: np.ndarray) -> tuple[float, float, float]:
    """Per-channel exponents that make black print come out colourless after the division
    by the paper.

    Parameters
    ----------
    srgb : (N, 3) uint8 ndarray
        The print pixels as photographed (clipped channels, 0 or 255, are not used).
    lin : (N, 3) float ndarray
        The same pixels' linear RGB divided by the paper's illumination.

    Returns
    -------
    tuple of float
        ``g`` such that ``lin ** g`` is grey on the print: per channel the least-squares fit
        through the origin of ``g_c * log(lin_c) = mean over channels of log(lin)`` (paper,
        1, stays 1, and the print keeps its mean darkness), held within ``_TONE_BOUNDS``.
        ``(1, 1, 1)`` when fewer than ``_TONE_MIN_PX`` pixels are usable, when the print is
        washed out (median above ``_TONE_MAX_PRINT``), or when every exponent is within
        ``_TONE_DEADBAND`` of 1.
    """
    srgb = np.asarray(srgb)
    lin = np.asarray(lin, np.float64)
    if srgb.shape != lin.shape or lin.ndim != 2 or lin.shape[1:] != (3,):
        raise ValueError(f"srgb {srgb.shape} and lin {lin.shape} must both be (N, 3)")
    none = (1.0, 1.0, 1.0)
    lo, hi = _TONE_FIT_RANGE
    ok = (np.all((lin > lo) & (lin < hi), axis=1)
          & np.all((srgb > 0) & (srgb < 255), axis=1))
    if ok.sum() < _TONE_MIN_PX:
        return none
    y = np.log(lin[ok])
    t = y.mean(axis=1, keepdims=True)
    if float(np.exp(np.median(t))) > _TONE_MAX_PRINT:
        return none
    g = np.clip((y * t).sum(axis=0) / np.maximum((y * y).sum(axis=0), 1e-12), *_TONE_BOUNDS)
    if np.all(np.abs(g - 1) <= _TONE_DEADBAND):
        return none
    return tuple(float(v) for v in g)


def normalise_light(image: np.ndarray, *, paper_mask: np.ndarray, valid: np.ndarray | None = None,
                    block: int = 12, min_paper: float = 0.2, reject: float = 0.12,
                    print_pixels: np.ndarray | None = None) -> NormalisedLight:
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
    print_pixels : (N,) int ndarray, optional
        Flat indices of pixels the template prints in black, away from regions
        (:func:`print_pixels`). Given, the result's ``tone`` holds the per-channel exponents
        that make that print colourless (:func:`tone_exponents`), applied by
        :meth:`NormalisedLight.sample` and ``linear``; not given, no tone correction.

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
    model_mask = paper_mask  # (the sheet model's, the same on every photo)
    if valid is not None:
        valid = np.asarray(valid, bool)
        if valid.shape != (H, W):
            raise ValueError(f"valid shape {valid.shape} does not match image {(H, W)}")
        if not valid.all():  # (usually every pixel came from inside the photo)
            paper_mask = paper_mask & valid
    block = int(max(1, min(max(2, block), H, W)))  # at least one whole block
    hb, wb = H // block, W // block
    hc, wc = hb * block, wb * block
    img = image[:hc, :wc]
    m = paper_mask[:hc, :wc].view(np.uint8)  # 0/1
    grey = cv2.cvtColor(img, cv2.COLOR_RGB2GRAY)
    area = float(block * block)
    # Pass 1: mean grey of the paper pixels of each block (exact integer sums).
    # (the paper pixels of each block depend on the model alone when the whole frame is valid)
    cnt = (_paper_counts(model_mask, block) if paper_mask is model_mask
           else _block_sums(m, block))
    # (m is 0/1: the product is the masked grey, without cv2's mask handling)
    s1 = _block_sums(np.multiply(grey, m), block) / np.maximum(cnt, 1)
    # Pass 2: pixels well below the block's first estimate are pencil or ink, not paper.
    # ``grey >= t`` for an integer grey level is ``grey >= ceil(t)``: one uint8 comparison
    # against the block's threshold, repeated over its pixels.
    thr = np.clip(np.ceil((1 - reject) * s1), 0, 255).astype(np.uint8)
    keep = _at_least(grey, thr, m, block)  # 0/1
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
    out = NormalisedLight(image, smooth.astype(np.float32, copy=False), coverage,
                          tuple(float(v) for v in wbal), rng, block)
    if print_pixels is None:
        return out
    return with_tone(out, print_pixels, valid=valid)


def with_tone(light: NormalisedLight, print_pixels: np.ndarray, *,
              valid: np.ndarray | None = None) -> NormalisedLight:
    """``light`` with its tone correction measured on ``print_pixels`` (flat indices of black
    print, :func:`print_pixels`; those outside ``valid`` not used): the per-channel exponents
    that make that print colourless after the division (:func:`tone_exponents`), whatever
    ``light``'s own tone was. The division by the paper is kept as it is."""
    image = light.image
    H, W = image.shape[:2]
    idx = np.asarray(print_pixels)
    if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= H * W)):
        raise ValueError(f"print_pixels must be flat indices into the {(H, W)} image")
    plain = light if light.tone == (1.0, 1.0, 1.0) else replace(light, tone=(1.0, 1.0, 1.0))
    keep = np.asarray(valid, bool).reshape(-1).take(idx) if valid is not None else None
    taps = plain.taps(idx, keep=keep)
    srgb = image.reshape(-1, 3).take(taps.index, axis=0)
    tone = tone_exponents(srgb, plain.sample(taps))
    if tone == plain.tone:
        return plain
    return replace(plain, tone=tone)


__all__ = ["TONE_CORRECTION", "NormalisedLight", "PixelTaps", "normalise_light", "pixel_taps",
           "print_pixels", "tone_correction_for", "tone_exponents", "with_tone"]
