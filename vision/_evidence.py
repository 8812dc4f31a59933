"""Evidence the region's own pixels miss: pencil in a ring along the region's outline.

The hand reader and the learned reader look at a region's usable pixels, weighted towards its
centre (``vision.marks.SheetModel.weight``) and trimmed of a margin along the printed outline:
a stroke overshooting from a neighbour only grazes a region's rim, so the rim counts little.
But a player may also colour a region by tracing its outline (a ring of colour just inside
or on the printed border, or around the printed symbol), leaving the middle bare. The
readers then see an empty middle and say "empty" with great confidence (the calibration
rows hold such rings read empty at p = 0.995 - 0.9994, and they pin the "empty" thresholds
of every tier). These columns measure the ring the readers ignore:

* ``ev_ring_colour``: share of the ring's usable pixels that carry coloured pencil;
* ``ev_ring_arc``: share of the ring's 16 angular sectors (around the region's centre) in
  which at least a quarter of the pixels are coloured: a traced outline goes all the way
  round (near 1), a neighbour's stroke spilling in touches one side (a few sectors);
* ``ev_ring_in_arc`` / ``ev_ring_out_arc``: the same for the inner half of the ring (inside
  the outline) and the outer half (outside it, on bare paper that belongs to no region);
* ``ev_ring_dark_arc``: the same for dark, uncoloured pencil (graphite);
* ``ev_ring_z_<colour>``: hue of the ring's coloured pixels against this photo's calibrated
  pencils (signed, in spreads, as ``z_<colour>`` of the region itself), 0 without colour.

Connections (line regions) get zeros: their band already is their whole reading.

The X columns (``X_FEATURES``, :func:`x_features`, appended after ``vision._guide``'s columns)
read the same ring for a crossing out: ``ev_x_diag`` / ``ev_x_side``, the share of the ring's
pixels with pencil (coloured or dark) within ``X_DIAG_DEG`` of a diagonal (in the bounding
box's proportions) / beyond ``X_SIDE_DEG`` from both, and their difference on the whole ring
(``ev_x_contrast``) and its inner half (``ev_x_in_contrast``). About half of every Crypts
sheet's symbol cells have no usable pixel between a cross's arms (the printed glyph and its
guard leave only the corners), so their own X test cannot tell a cross from a fill; a cross's
arms still run out through the corners of the ring. Measured (session 10): crossings out on 19
Crypts photos median contrast 0.27, colour fills -0.02, empty 0.00; refits with them lose the
recurring coloured-X confident error but read the held-out painter's ticked boxes "crossed"
twice as often (flagged). reader-v8 (session 11, trained also on ticking hands) reads them,
and not the ring columns; ``ring_pixels(x_only=True)`` samples only the X zones (since
session 20 ``vision.marks.classify_sheet`` samples the whole ring on every photo, for the
outline check).

The ring is measured on unprinted or lightly printed pixels only (print divided out as for
the region itself, ``SheetModel.divisor``); dark print (the outline itself) hides pencil and
is skipped. Computed on every photo since session 20 (``vision.marks._outline_check`` flags a
confident "empty" whose outline was traced in colour: ``ev_ring_in_arc`` >= 0.75 with
``ev_ring_out_arc`` < 0.5); appended last to
``vision.marks.FEATURE_NAMES`` so that models made for the shorter list read their columns
where they were.

Measured (session 9, reader-v7's recipe refitted with these columns, 8 validation corpora): easy and
typical regions flagged 36.3 / 39.8 / 33.1 % for split seeds 0 / 1 / 2 against 44.0 % for reader-v7
and 46.9 % for the same refit without them (seed 0); confident errors 0 / 0 / 2, the two on regions
whose mark the photo does not show (a grey line for a green connection, a barely visible cross).
No model reads them yet; the outline check does (session 20).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from calibration.template import PENCIL_COLOURS
from vision._cache import per_model
from vision.colour import hue_diff, linear_to_lab

#: The columns this module adds to the learned reader's features (in this order).
EVIDENCE_FEATURES = (("ev_ring_colour", "ev_ring_arc", "ev_ring_in_arc", "ev_ring_out_arc",
                      "ev_ring_dark_arc") + tuple(f"ev_ring_z_{c}" for c in PENCIL_COLOURS))

#: The ring: this far inside the region's outline (mm) ...
RING_IN_MM = 1.5
#: ... to this far outside it (mm; only on pixels of no other region).
RING_OUT_MM = 0.8
#: Angular sectors around the region's centre.
SECTORS = 16
#: A sector counts when it has at least this many usable pixels ...
SECTOR_MIN_PIXELS = 3
#: ... and at least this share of them carry pencil.
SECTOR_SHARE = 0.25
#: Pixels whose print is darker than this (luminance of the clean render, paper = 1) hide
#: pencil: they are not measured.
PRINT_MIN_LUMINANCE = 0.5

#: A ring pixel is on a cross's way out within this many degrees of a diagonal (in the box's
#: proportions) ...
X_DIAG_DEG = 12.0
#: ... and towards the middle of a side beyond this many.
X_SIDE_DEG = 30.0

#: The X columns (appended after the guide columns of ``vision._guide``): ink in the ring
#: where a cross leaves it (its arms run out through the corners) against where it does not
#: (the middles of the sides), measured on the ring because the middle of many printed symbol
#: cells holds no usable pixel between the arms: their own X test has nothing to compare.
X_FEATURES = ("ev_x_diag", "ev_x_side", "ev_x_contrast", "ev_x_in_contrast")

_LUM = np.array([0.2126, 0.7152, 0.0722], np.float32)
_Z_CLIP = 10.0


@dataclass(frozen=True)
class RingGeometry:
    """Where each area region's ring lies in the sheet model's frame.

    Attributes
    ----------
    pix : (Q,) int ndarray
        Flat pixel indices of every ring pixel, region after region.
    label : (Q,) int ndarray
        Region index (``SheetModel.region_ids``) of each ring pixel.
    inner : (Q,) bool ndarray
        The pixel lies inside the region's outline.
    sector : (Q,) int ndarray
        ``region * SECTORS + sector`` of each pixel (its angle around the region's centre).
    divisor : (Q, 3) float32 ndarray
        The clean print's linear RGB at each pixel (1 on paper): divided out of the photo.
    regions : int
        Number of regions of the model.
    xzone : (Q,) int8 ndarray
        Where the pixel lies against a cross drawn over the region (corner to corner of its
        bounding box): 1 on a diagonal's way out (within ``X_DIAG_DEG`` of it, in the box's
        own proportions), 2 towards the middle of a side (more than ``X_SIDE_DEG`` from both
        diagonals), 0 between.
    """

    pix: np.ndarray
    label: np.ndarray
    inner: np.ndarray
    sector: np.ndarray
    divisor: np.ndarray
    regions: int
    xzone: np.ndarray


def build_ring_geometry(model) -> RingGeometry:
    """The rings of every area region of ``model`` (a ``vision.marks.SheetModel``)."""
    H, W = model.shape
    k = model.dpi / 25.4
    regions = [model.template.region(rid) for rid in model.region_ids]
    # every region's interior, to keep a ring's outer half off its neighbours
    owner = np.zeros((H, W), np.int32)
    polys = []
    for i, r in enumerate(regions):
        poly = r.shape.polygon(segments=64) * k
        polys.append(poly)
        if not model.is_line[i]:
            _fill(owner, poly, i + 1)
    lum = model.expected @ _LUM
    r_in, r_out = RING_IN_MM * k, RING_OUT_MM * k
    pad = int(np.ceil(r_out)) + 2
    out = {"pix": [], "label": [], "inner": [], "sector": [], "xzone": []}
    for i, poly in enumerate(polys):
        if model.is_line[i]:
            continue
        x0, y0 = np.floor(poly.min(axis=0)).astype(int) - pad
        x1, y1 = np.ceil(poly.max(axis=0)).astype(int) + pad
        x0, y0, x1, y1 = max(x0, 0), max(y0, 0), min(x1, W), min(y1, H)
        if x1 - x0 < 3 or y1 - y0 < 3:
            continue
        mask = np.zeros((y1 - y0, x1 - x0), np.uint8)
        _fill(mask, poly - [x0, y0], 1)
        if not mask.any():
            continue
        # distance (px) from each pixel inside to the outside and from each outside to the inside
        d_in = cv2.distanceTransform(mask, cv2.DIST_L2, 3)
        d_out = cv2.distanceTransform(1 - mask, cv2.DIST_L2, 3)
        own = owner[y0:y1, x0:x1]
        inner = (mask > 0) & (d_in <= r_in)
        outer = (mask == 0) & (d_out <= r_out) & (own == 0)
        keep = (inner | outer) & (lum[y0:y1, x0:x1] >= PRINT_MIN_LUMINANCE)
        rr, cc = np.nonzero(keep)
        if rr.size == 0:
            continue
        cx, cy = poly.mean(axis=0)
        ang = np.arctan2(rr + 0.5 + y0 - cy, cc + 0.5 + x0 - cx)
        sec = np.minimum(((ang + np.pi) / (2 * np.pi) * SECTORS).astype(np.int64), SECTORS - 1)
        # the angle in the bounding box's own proportions: its corners at 45 degrees
        bx0, by0 = poly.min(axis=0)
        bx1, by1 = poly.max(axis=0)
        hx, hy = max((bx1 - bx0) / 2, 1e-6), max((by1 - by0) / 2, 1e-6)
        cbx, cby = (bx0 + bx1) / 2, (by0 + by1) / 2
        a_box = np.degrees(np.arctan2(np.abs(rr + 0.5 + y0 - cby) / hy, np.abs(cc + 0.5 + x0 - cbx) / hx))
        off_diag = np.abs(a_box - 45.0)
        out["xzone"].append(np.where(off_diag <= X_DIAG_DEG, 1, np.where(off_diag >= X_SIDE_DEG, 2, 0)))
        out["pix"].append((rr + y0).astype(np.int64) * W + (cc + x0))
        out["label"].append(np.full(rr.size, i, np.int64))
        out["inner"].append(inner[rr, cc])
        out["sector"].append(i * SECTORS + sec)

    def cat(key, dtype):
        return np.concatenate(out[key]).astype(dtype) if out[key] else np.zeros(0, dtype)

    pix = cat("pix", np.int64)
    div = np.maximum(model.expected.reshape(-1, 3)[pix], 0.15).astype(np.float32)
    return RingGeometry(pix, cat("label", np.int64), cat("inner", bool), cat("sector", np.int64),
                        div, len(regions), cat("xzone", np.int8))


def _fill(mask: np.ndarray, poly_px: np.ndarray, value: int) -> None:
    # (the convention of vision.marks._fill: pixel (i, j) centre at x = j + 0.5)
    pts = np.round((np.asarray(poly_px) - 0.5) * 16).astype(np.int32).reshape(-1, 1, 2)
    cv2.fillPoly(mask, [pts], int(value), lineType=cv2.LINE_8, shift=4)


@dataclass(frozen=True)
class RingPixels:
    """One photo's ring pixels (``RingGeometry.pix``), print divided out, in CIELAB: what the
    ring columns and the X columns both read (sampled once when both are measured).
    ``sel``: which of the ring's pixels these are (indices into ``RingGeometry.pix``), or None
    for all of them."""

    ok: np.ndarray
    L: np.ndarray
    a: np.ndarray
    b: np.ndarray
    C: np.ndarray
    sel: np.ndarray | None = None


def ring_pixels(sample, model, *, valid: np.ndarray | None = None,
                x_only: bool = False) -> RingPixels:
    """The ring's pixels of one photo (arguments as :func:`evidence_features`). ``x_only``:
    only those the X columns read (on a diagonal's way out or towards a side's middle, 61 % of
    the ring on a Reefs and a Crypts sheet): enough for :func:`x_features`, the same values,
    for a model that reads the X columns and not the ring columns. (Their pixel list and
    divisor are kept per sheet model, :func:`_x_ring`: one array sampled on every photo, so
    its interpolation taps are computed once, ``vision.light.pixel_taps``.)"""
    g = ring_geometry(model)
    xr = _x_ring(model) if x_only else None
    pix, div, sel = (g.pix, g.divisor, None) if xr is None else (xr.pix, xr.divisor, xr.sel)
    ok = (np.ones(pix.size, bool) if valid is None
          else np.asarray(valid, bool).reshape(-1).take(pix))
    lab = (linear_to_lab(np.asarray(sample(pix), np.float32) / div) if pix.size
           else np.zeros((0, 3), np.float32))
    L, a, b = lab[:, 0], lab[:, 1], lab[:, 2]
    return RingPixels(ok, L, a, b, np.hypot(a, b), sel)


def _x_pixels(g: RingGeometry) -> np.ndarray:
    """Indices (into ``g.pix``) of the ring pixels the X columns read."""
    idx = np.flatnonzero(g.xzone > 0)
    idx.setflags(write=False)
    return idx


@dataclass(frozen=True)
class _XRing:
    """The ring pixels the X columns read (:func:`_x_pixels`), taken out of the ring geometry
    once per sheet model (:func:`_x_ring`), and what :func:`x_features` counts them by.

    ``sel``: their indices into ``RingGeometry.pix``; ``pix``, ``divisor``: theirs (the
    arrays ``ring_pixels(x_only=True)`` samples); ``key``: ``region * 4 + (zone - 1) * 2 +
    inner`` of each (zone 1 the diagonals' way out, 2 the sides' middles; inner 1 inside the
    outline); ``count``: how many of them have each key, ``(R, 2, 2)`` (every pixel usable,
    the usual case)."""

    sel: np.ndarray
    pix: np.ndarray
    divisor: np.ndarray
    key: np.ndarray
    count: np.ndarray


def _x_ring(model) -> _XRing:
    """:class:`_XRing` of ``model``, built once per sheet model (``vision._cache.per_model``)."""
    return per_model(model, "x_ring", _build_x_ring)


def _build_x_ring(model) -> _XRing:
    g = ring_geometry(model)
    sel = _x_pixels(g)
    key = (g.label[sel] * 4 + (g.xzone[sel].astype(np.int64) - 1) * 2
           + g.inner[sel].astype(np.int64))
    count = np.bincount(key, minlength=4 * g.regions).reshape(g.regions, 2, 2)
    out = _XRing(sel, np.ascontiguousarray(g.pix[sel]), np.ascontiguousarray(g.divisor[sel]),
                 key, count)
    for v in vars(out).values():
        v.setflags(write=False)
    return out


def ring_geometry(model) -> RingGeometry:
    """:func:`build_ring_geometry`, once per sheet model, kept while it lives
    (``vision._cache.per_model``)."""
    return per_model(model, "ring", build_ring_geometry)


@dataclass(frozen=True)
class _RingCounts:
    """What the ring columns count by, built once per sheet model (:func:`_ring_counts`):
    ``key``, ``sector * 2 + inner`` of each ring pixel (the sector's outer and inner pixels
    side by side), and the counts of a photo whose every ring pixel is usable (the usual
    case): pixels per region ``n`` (R,) and per sector and half ``ns2`` (R * SECTORS, 2),
    float64 as ``np.bincount`` gives them with 0/1 weights."""

    key: np.ndarray
    n: np.ndarray
    ns2: np.ndarray


def _ring_counts(model) -> _RingCounts:
    return per_model(model, "ring_counts", _build_ring_counts)


def _build_ring_counts(model) -> _RingCounts:
    g = ring_geometry(model)
    R = g.regions
    key = g.sector.astype(np.int64) * 2 + g.inner.astype(np.int64)
    every = np.ones(g.pix.size, bool)
    out = _RingCounts(key, np.bincount(g.label, every, R),
                      np.bincount(key, every, R * SECTORS * 2).reshape(R * SECTORS, 2))
    for v in vars(out).values():
        v.setflags(write=False)
    return out


def prepare(model) -> None:
    """Build what the ring and X columns derive from ``model`` alone (the ring geometry, the X
    zones' pixels and keys, the ring columns' counts), kept per model object; called by
    ``vision.marks.prepare`` when the pipeline builds a sheet model."""
    ring_geometry(model)
    _x_ring(model)
    _ring_counts(model)


def evidence_features(sample, model, *, th, palette, valid: np.ndarray | None = None,
                      pixels: RingPixels | None = None) -> np.ndarray:
    """The ring columns (``EVIDENCE_FEATURES``) of one photo.

    Parameters
    ----------
    sample : callable
        ``sample(flat_indices) -> (n, 3)`` linear RGB of the light-normalised photo in the
        model's frame (paper = 1), as ``vision.marks.classify_sheet`` samples it.
    model : vision.marks.SheetModel
    th : mapping
        The photo's thresholds (``vision.marks._photo_thresholds``): ``chroma``, ``dark_l``,
        ``paper_chroma_sd``.
    palette : vision.colour.Palette
        The pencils calibrated on this photo.
    valid : (H, W) bool ndarray, optional
        Pixels that came from inside the photo.
    pixels : RingPixels, optional
        :func:`ring_pixels` of this photo, when already sampled (else sampled here).

    Returns
    -------
    (R, len(EVIDENCE_FEATURES)) float32 ndarray
        One row per region of ``model.region_ids``.
    """
    g = ring_geometry(model)
    R = g.regions
    X = np.zeros((R, len(EVIDENCE_FEATURES)), np.float32)
    if g.pix.size == 0:
        return X
    px = pixels if pixels is not None else ring_pixels(sample, model, valid=valid)
    if px.sel is not None:
        raise ValueError("the ring columns read every ring pixel: pass ring_pixels() without x_only")
    ok, L, a, b, C = px.ok, px.L, px.a, px.b, px.C
    rc = _ring_counts(model)
    col = ok & (C >= float(th["chroma"]))
    dark = ok & ~col & (L <= float(th["dark_l"]))
    all_ok = bool(ok.all())
    n = rc.n if all_ok else np.bincount(g.label, ok, R)
    # (counts of 0/1 weights are whole numbers in float64: a sector's count over all its
    # pixels is exactly the sum of its outer and inner halves' counts)
    ns2 = rc.ns2 if all_ok else np.bincount(rc.key, ok, R * SECTORS * 2).reshape(R * SECTORS, 2)
    # (the coloured and dark pixels' keys counted, int64: the same whole numbers as a
    # bincount weighted by the 0/1 selection, and the same comparisons and quotients below)
    lc = g.label[col]
    hs2 = np.bincount(rc.key[col], minlength=R * SECTORS * 2).reshape(R * SECTORS, 2)

    def arc(ns, hs):
        ns, hs = ns.reshape(R, SECTORS), hs.reshape(R, SECTORS)
        counted = ns >= SECTOR_MIN_PIXELS
        covered = counted & (hs >= SECTOR_SHARE * np.maximum(ns, 1))
        return covered.sum(axis=1) / np.maximum(counted.sum(axis=1), 1)

    ns_all = ns2[:, 0] + ns2[:, 1]
    nc = hs2.reshape(R, SECTORS * 2).sum(axis=1)  # (a region's coloured pixels: its sectors')
    X[:, 0] = nc / np.maximum(n, 1)
    X[:, 1] = arc(ns_all, hs2[:, 0] + hs2[:, 1])
    X[:, 2] = arc(ns2[:, 1], hs2[:, 1])
    X[:, 3] = arc(ns2[:, 0], hs2[:, 0])
    X[:, 4] = arc(ns_all, np.bincount(g.sector[dark], minlength=R * SECTORS))
    # the ring's hue: the mean (a, b) of its coloured pixels, against the calibrated pencils
    # (summed over the coloured pixels alone: the same sums, less the exact zeros)
    ma = np.bincount(lc, a[col], R) / np.maximum(nc, 1)
    mb = np.bincount(lc, b[col], R) / np.maximum(nc, 1)
    chroma = np.hypot(ma, mb)
    hue = np.degrees(np.arctan2(mb, ma)) % 360.0
    # hue noise of a mean of noisy pixels: as vision.marks gives the region's own hue
    c_sd = max(1.0, float(th.get("paper_chroma_sd", 1.0)))
    noise = np.degrees(3.0 * c_sd / np.maximum(chroma, 1e-3))
    has = (nc >= SECTOR_MIN_PIXELS) & (chroma > 0)
    for j, c in enumerate(PENCIL_COLOURS):
        pc = palette.colour(c)
        z = hue_diff(hue, pc.hue_deg) / np.hypot(pc.hue_spread_deg, noise)
        X[:, 5 + j] = np.where(has, np.clip(z, -_Z_CLIP, _Z_CLIP), 0.0)
    X[np.asarray(model.is_line[:R], bool)] = 0.0
    return X


def x_features(sample, model, *, th, valid: np.ndarray | None = None,
               pixels: RingPixels | None = None) -> np.ndarray:
    """The X columns (``X_FEATURES``) of one photo: the share of the ring's pixels that carry
    pencil (coloured or dark) on the diagonals' way out and towards the sides' middles, their
    difference, and the same difference on the ring's inner half alone. A cross: high on the
    diagonals, low at the sides; a fill, a traced outline, an overshooting fill: alike on both.
    Same arguments as :func:`evidence_features` (no palette needed)."""
    g = ring_geometry(model)
    R = g.regions
    X = np.zeros((R, len(X_FEATURES)), np.float32)
    if g.pix.size == 0:
        return X
    px = pixels if pixels is not None else ring_pixels(sample, model, valid=valid, x_only=True)
    xr = _x_ring(model)
    ok, L, C = px.ok, px.L, px.C
    if px.sel is None:  # (every ring pixel sampled: those on the zones)
        ok, L, C = ok.take(xr.sel), L.take(xr.sel), C.take(xr.sel)
    elif px.sel is not xr.sel and not np.array_equal(px.sel, xr.sel):
        raise ValueError("x_features reads the ring pixels of ring_pixels(), all or x_only")
    ink = ok & ((C >= float(th["chroma"])) | (L <= float(th["dark_l"])))
    # Pixels with pencil and usable pixels, counted by (region, zone, inner half): whole
    # numbers, so the shares below are the quotients of the same integers as counted zone by
    # zone and half by half (bincount of 0/1 weights: exact float64 integers).
    R4 = 4 * R
    hit = np.bincount(xr.key[ink], minlength=R4).reshape(R, 2, 2)
    cnt = xr.count if ok.all() else np.bincount(xr.key[ok], minlength=R4).reshape(R, 2, 2)
    nd, ns = cnt[:, 0].sum(axis=1), cnt[:, 1].sum(axis=1)  # zone 1 / 2, both halves
    ndi, nsi = cnt[:, 0, 1], cnt[:, 1, 1]  # the inner half
    d_all = hit[:, 0].sum(axis=1) / np.maximum(nd, 1)
    s_all = hit[:, 1].sum(axis=1) / np.maximum(ns, 1)
    d_in = hit[:, 0, 1] / np.maximum(ndi, 1)
    s_in = hit[:, 1, 1] / np.maximum(nsi, 1)
    has = (nd >= SECTOR_MIN_PIXELS) & (ns >= SECTOR_MIN_PIXELS)
    has_in = (ndi >= SECTOR_MIN_PIXELS) & (nsi >= SECTOR_MIN_PIXELS)
    X[:, 0] = np.where(has, d_all, 0.0)
    X[:, 1] = np.where(has, s_all, 0.0)
    X[:, 2] = np.where(has, d_all - s_all, 0.0)
    X[:, 3] = np.where(has_in, d_in - s_in, 0.0)
    X[np.asarray(model.is_line[:R], bool)] = 0.0
    return X


__all__ = ["EVIDENCE_FEATURES", "RingGeometry", "RingPixels", "X_FEATURES",
           "build_ring_geometry", "evidence_features", "prepare", "ring_geometry", "ring_pixels",
           "x_features"]
