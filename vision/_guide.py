"""Evidence the region's own features miss: pencil drawn right on a connection's printed guide,
and whether the print around a region can be seen at all.

A connection (a line region) is sampled over a band across its printed guide. Pixels near light
neutral print are divided by the *darkest* print value within the misregistration guard
(``vision.marks.build_sheet_model``), so that the print, wherever it landed, reads as paper. The
price: a pencil line drawn exactly over the guide, which is where a player draws it, is divided
by the guide's darkness too. In a photo the thin guide comes out much lighter than in the clean
render (blur, resolution), so a light or faint line over it is divided up to "brighter than
paper" and vanishes: every feature of the region reads 0 and both readers say "empty" at
0.999 (measured, session 10: held-out photo s60065, conn.r6c6-r7c6, a light green line on the
guide: raw luminance 0.64 divided by 0.39-0.45 gives 1.4-1.7; 690 of 3,495 wrong readings of
reader-v7 on five corpora were a colour read "empty" on a connection).

These columns compare each connection's guide pixels, *undivided*, with the same pixels of the
photo's other connections, which share the same printed guide, light and blur:

* ``gd_drop``: how much darker the guide pixels are than the photo's typical empty guide (the
  upper quartile of the connections' means: the lighter ones are the empty ones), in units of
  their spread;
* ``gd_len``: share of the connection's length (``SheetModel.line_bin``) whose guide pixels are
  darker than the typical guide bin by more than 3 spreads;
* ``gd_chroma``: chroma of the guide pixels' mean colour against the photo's typical guide
  colour, in units of its spread;
* ``gd_z_<colour>``: hue of that colour difference against this photo's calibrated pencils
  (signed, in spreads, as ``z_<colour>``), 0 without chroma;

and, for every region,

* ``print_seen``: the contrast of dark print near the region (paper minus print luminance)
  against the photo's median of the same: near 1 where the print shows as everywhere else,
  near 0 under glare or a blown-out highlight, where no mark could be seen either.

Area regions get zeros in the ``gd_`` columns. Computed only for a model that reads these
columns, or when the feature matrix is kept for a dataset (``vision.marks.classify_sheet``);
appended last to ``vision.marks.FEATURE_NAMES``.

Measured (session 10, reader-v7's recipe refitted with these columns and without the ring
columns, 8 validation corpora, split seeds 0 / 1 / 2): connections read right 95.69-95.76 %
against 94.66 % for reader-v7 and 94.63-94.75 % for refits without them; all regions 95.53 /
95.53 / 95.61 % against 95.34 %. But 3 / 1 / 2 confident errors, on area regions that refits
without these columns also get wrong (docs/EVALUATION.md, session 10). reader-v8 (session 11)
reads them: three such fits, trained also on ticking hands, as a committee.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from calibration.template import PENCIL_COLOURS
from vision._cache import per_model
from vision.colour import hue_diff, linear_to_lab

#: The columns this module adds to the learned reader's features (in this order).
GUIDE_FEATURES = (("gd_drop", "gd_len", "gd_chroma") + tuple(f"gd_z_{c}" for c in PENCIL_COLOURS)
                  + ("print_seen",))

#: A connection pixel is a guide pixel where the print it was divided by is darker than this
#: (luminance of the clean render's divisor, paper = 1).
GUIDE_DIVISOR = 0.95
#: A connection needs this many guide pixels to be measured (and a bin this many).
MIN_GUIDE_PIXELS = 6
MIN_BIN_PIXELS = 2
#: Dark print near a region: render luminance below this ...
PRINT_DARK = 0.35
#: ... within this distance (mm) of the region's bounding box; at most this many pixels each of
#: print and of paper per region.
PRINT_REACH_MM = 3.0
PRINT_SAMPLES = 64
#: The typical empty guide: this quantile of the connections' means (the lighter ones).
REF_QUANTILE = 0.75

_LUM = np.array([0.2126, 0.7152, 0.0722], np.float32)
_CLIP = 30.0
_Z_CLIP = 10.0


@dataclass(frozen=True)
class GuideGeometry:
    """Which pixels of the sheet model the columns read.

    Attributes
    ----------
    guide : (Q,) int ndarray
        Positions in ``SheetModel.pix`` of every connection's guide pixels.
    guide_pix : (Q,) int ndarray
        Their flat pixel indices in the model's frame (``SheetModel.pix[guide]``).
    guide_label : (Q,) int ndarray
        Region index of each guide pixel.
    guide_bin : (Q,) int ndarray
        ``SheetModel.line_bin`` of each guide pixel.
    print_pix, paper_pix : (S,) int ndarray
        Flat pixel indices (model frame) of dark print and of paper near each region.
    print_label, paper_label : (S,) int ndarray
        Region index of each.
    regions : int
    bins : int
        Number of line bins of the model.
    bin_region : (bins,) int ndarray
        Region index of each line bin.
    bin_key : (bins,) int ndarray
        ``number of bins of its connection * 1000 + its place along it``: bins with the same
        key lie on the same part of the same printed guide.
    """

    guide: np.ndarray
    guide_pix: np.ndarray
    guide_label: np.ndarray
    guide_bin: np.ndarray
    print_pix: np.ndarray
    print_label: np.ndarray
    paper_pix: np.ndarray
    paper_label: np.ndarray
    regions: int
    bins: int
    bin_region: np.ndarray
    bin_key: np.ndarray


def build_guide_geometry(model) -> GuideGeometry:
    """The guide pixels of every connection and the print / paper samples near every region
    of ``model`` (a ``vision.marks.SheetModel``)."""
    H, W = model.shape
    R = len(model.region_ids)
    k = model.dpi / 25.4
    is_line = np.asarray(model.is_line, bool)
    dlum = model.divisor @ _LUM
    sel = is_line[model.label] & (dlum < GUIDE_DIVISOR) & (model.line_bin >= 0)
    guide = np.flatnonzero(sel)
    lum = model.expected @ _LUM
    dark = lum < PRINT_DARK
    paper = np.asarray(model.paper_mask, bool)
    reach = PRINT_REACH_MM * k
    pr_p, pr_l, pa_p, pa_l = [], [], [], []
    for i, rid in enumerate(model.region_ids):
        x0, y0, x1, y1 = (np.asarray(model.template.region(rid).shape.bbox()) * k)
        c0, r0 = max(0, int(x0 - reach)), max(0, int(y0 - reach))
        c1, r1 = min(W, int(np.ceil(x1 + reach))), min(H, int(np.ceil(y1 + reach)))
        if c1 <= c0 or r1 <= r0:
            continue
        for mask, out_p, out_l in ((dark, pr_p, pr_l), (paper, pa_p, pa_l)):
            rr, cc = np.nonzero(mask[r0:r1, c0:c1])
            if rr.size == 0:
                continue
            # evenly spread samples (a fixed stride: the same pixels every time)
            take = np.linspace(0, rr.size - 1, min(PRINT_SAMPLES, rr.size)).astype(np.int64)
            out_p.append((rr[take] + r0).astype(np.int64) * W + (cc[take] + c0))
            out_l.append(np.full(take.size, i, np.int64))

    def cat(xs):
        return np.concatenate(xs) if xs else np.zeros(0, np.int64)

    nbins = np.asarray(model.line_bins, np.int64)[:R]
    bin_region = np.repeat(np.arange(R), nbins)
    start = np.cumsum(nbins) - nbins
    place = np.arange(bin_region.size) - start[bin_region]
    return GuideGeometry(guide, model.pix[guide].astype(np.int64), model.label[guide].astype(np.int64),
                         model.line_bin[guide].astype(np.int64), cat(pr_p), cat(pr_l),
                         cat(pa_p), cat(pa_l), R, int(nbins.sum()), bin_region,
                         nbins[bin_region] * 1000 + place)


def guide_geometry(model) -> GuideGeometry:
    """:func:`build_guide_geometry`, once per sheet model, kept while it lives
    (``vision._cache.per_model``)."""
    return per_model(model, "guide", build_guide_geometry)


def _reference(values: np.ndarray, *, floor: float) -> tuple[float, float]:
    """The typical empty value (``REF_QUANTILE`` of ``values``) and the spread of the lighter
    half around it (a scaled median absolute deviation, at least ``floor``)."""
    ref = float(np.quantile(values, REF_QUANTILE))
    upper = values[values >= np.median(values)]
    spread = 1.4826 * float(np.median(np.abs(upper - ref))) if upper.size else 0.0
    return ref, max(spread, floor)


def _bin_references(mb: np.ndarray, bseen: np.ndarray, g: GuideGeometry, model):
    """Each line bin's typical empty value, and the spreads: :func:`_reference` of the seen
    bins (``bseen``) of every bin key that has at least 4 of them (``floor`` 0), the key's
    reference set on its seen bins (NaN on the others), the spreads listed in key order.

    The same values as :func:`_reference` key by key: a quantile and a median are order
    statistics (which values come out does not depend on the order the values are given
    in), and numpy computes them along an axis of a 2-D array with the same arithmetic as
    for each row alone. So the keys' seen values, sorted, are put in one 2-D array for each
    number of values (a handful of sizes, the connections' lengths) and each such array gets
    one ``np.quantile`` and ``np.median``; the values at or above the median are then the
    top ``u`` of each sorted row, and their deviations from the reference get one
    ``np.median`` for each count ``u``. Why: a loop over the keys (~17 on a Reefs sheet),
    each with three numpy statistics, cost ~1 ms a Reefs photo."""
    ref_b = np.full(g.bins, np.nan)
    seen = np.flatnonzero(bseen)
    vals = mb[seen]
    if not np.isfinite(vals).all():  # (order statistics with NaN: left to _reference)
        return _bin_references_by_key(mb, bseen, g)
    keys, kid = per_model(model, "guide_bin_keys", lambda _: _bin_key_ids(g))
    ks = kid[seen]
    counts = np.bincount(ks, minlength=keys.size)
    order = np.lexsort((vals, ks))  # by key, then value
    sv = vals[order]
    start = np.cumsum(counts) - counts  # each key's first place in sv
    used = np.flatnonzero(counts >= 4)
    ref_k = np.zeros(keys.size)
    spread_k = np.zeros(keys.size)
    for n in np.unique(counts[used]).tolist():
        grp = used[counts[used] == n]
        M = sv[start[grp][:, None] + np.arange(n)]  # (groups, n), each row sorted
        ref = np.quantile(M, REF_QUANTILE, axis=1)
        up = (M >= np.median(M, axis=1)[:, None]).sum(axis=1)  # (a top part of each row)
        ref_k[grp] = ref
        for u in np.unique(up).tolist():
            rows = np.flatnonzero(up == u)
            dev = np.abs(M[rows, n - u:] - ref[rows][:, None])
            spread_k[grp[rows]] = np.median(dev, axis=1)
    spreads = [max(1.4826 * float(v), 0.0) for v in spread_k[used].tolist()]
    on = counts[ks] >= 4
    ref_b[seen[on]] = ref_k[ks[on]]
    return ref_b, spreads


def _bin_key_ids(g: GuideGeometry) -> tuple[np.ndarray, np.ndarray]:
    """The distinct bin keys (sorted) and each bin's place among them."""
    keys, kid = np.unique(g.bin_key, return_inverse=True)
    kid = kid.reshape(-1).astype(np.int64)
    keys.setflags(write=False)
    kid.setflags(write=False)
    return keys, kid


def _bin_references_by_key(mb: np.ndarray, bseen: np.ndarray, g: GuideGeometry):
    """:func:`_bin_references` key by key (the plain loop)."""
    ref_b = np.full(g.bins, np.nan)
    spreads = []
    for key in np.unique(g.bin_key[bseen]):
        sel = bseen & (g.bin_key == key)
        if sel.sum() >= 4:
            r_k, s_k = _reference(mb[sel], floor=0.0)
            ref_b[sel] = r_k
            spreads.append(s_k)
    return ref_b, spreads


def _kept(good: np.ndarray, *arrays: np.ndarray) -> list[np.ndarray]:
    """``[a[good] for a in arrays]``, the arrays themselves when ``good`` is all True (the
    usual case, a whole frame inside the photo: ~0.15 ms of copies a Reefs photo saved; the
    callers only read them)."""
    if good.all():
        return list(arrays)
    return [a[good] for a in arrays]


def guide_features(sample, model, *, palette, ok: np.ndarray | None = None,
                   valid: np.ndarray | None = None) -> np.ndarray:
    """The columns ``GUIDE_FEATURES`` of one photo.

    Parameters
    ----------
    sample : callable
        ``sample(flat_indices) -> (n, 3)`` linear RGB of the light-normalised photo in the
        model's frame (paper = 1), as ``vision.marks.classify_sheet`` samples it: the print
        is *not* divided out here.
    model : vision.marks.SheetModel
    palette : vision.colour.Palette
        The pencils calibrated on this photo.
    ok : (P,) bool ndarray, optional
        Which of ``model.pix`` came from inside the photo.
    valid : (H, W) bool ndarray, optional
        Which pixels of the model's frame came from inside the photo (the print and paper
        samples of ``print_seen`` outside it are not measured).

    Returns
    -------
    (R, len(GUIDE_FEATURES)) float32 ndarray
        One row per region of ``model.region_ids``.
    """
    g = guide_geometry(model)
    R = g.regions
    X = np.zeros((R, len(GUIDE_FEATURES)), np.float32)
    nz = len(PENCIL_COLOURS)
    # --- print visibility, every region ----------------------------------------------------
    if g.print_pix.size and g.paper_pix.size:
        yp = np.asarray(sample(g.print_pix), np.float32) @ _LUM
        ya = np.asarray(sample(g.paper_pix), np.float32) @ _LUM
        if valid is None:
            vp, va = np.ones(yp.size, bool), np.ones(ya.size, bool)
        else:
            flat = np.asarray(valid, bool).reshape(-1)
            vp, va = flat[g.print_pix], flat[g.paper_pix]
        n_p = np.bincount(g.print_label, vp, R)
        n_a = np.bincount(g.paper_label, va, R)
        mp = np.bincount(g.print_label, np.where(vp, yp, 0.0), R) / np.maximum(n_p, 1)
        ma = np.bincount(g.paper_label, np.where(va, ya, 0.0), R) / np.maximum(n_a, 1)
        has = (n_p >= 4) & (n_a >= 4)
        contrast = ma - mp
        if has.any():
            typical = float(np.median(contrast[has]))
            if typical > 1e-3:
                X[:, -1] = np.where(has, np.clip(contrast / typical, 0.0, 3.0), 1.0)
            else:
                X[:, -1] = np.where(has, 0.0, 1.0)
        else:
            X[:, -1] = 1.0
    else:
        X[:, -1] = 1.0
    # --- the guide under each connection ----------------------------------------------------
    if g.guide.size == 0:
        return X
    q = np.asarray(sample(g.guide_pix), np.float32)
    good = np.ones(g.guide.size, bool) if ok is None else np.asarray(ok, bool)[g.guide]
    if not good.any():
        return X
    q, lbl, bins = _kept(good, q, g.guide_label, g.guide_bin)
    y = q @ _LUM
    lab = linear_to_lab(q)
    n = np.bincount(lbl, minlength=R)
    meas = n >= MIN_GUIDE_PIXELS
    if meas.sum() < 3:  # too few connections to know what an empty guide looks like
        return X
    m = np.bincount(lbl, y, R) / np.maximum(n, 1)
    ref, spread = _reference(m[meas], floor=0.01)
    X[:, 0] = np.where(meas, np.clip((ref - m) / spread, -_CLIP, _CLIP), 0.0)
    # along the length
    nb = np.bincount(bins, minlength=g.bins)
    mb = np.bincount(bins, y, g.bins) / np.maximum(nb, 1)
    bseen = nb >= MIN_BIN_PIXELS
    if bseen.sum() >= 6 and g.bin_key.size == g.bins:
        # a bin is compared with the same bin (same place along the same length) of the other
        # connections: the guide is dotted, and a bin holding a dot is darker than one between
        # two dots on every empty connection alike
        ref_b, spreads = _bin_references(mb, bseen, g, model)
        if spreads:
            bspread = max(float(np.median(spreads)), 0.015)
            hit = bseen & ~np.isnan(ref_b) & ((np.nan_to_num(ref_b) - mb) > 3.0 * bspread)
            ns = np.bincount(g.bin_region, bseen & ~np.isnan(ref_b), R)
            X[:, 1] = np.where(meas, np.bincount(g.bin_region, hit, R) / np.maximum(ns, 1), 0.0)
    # colour of the guide pixels against the typical guide's colour
    ma = np.bincount(lbl, lab[:, 1], R) / np.maximum(n, 1)
    mbb = np.bincount(lbl, lab[:, 2], R) / np.maximum(n, 1)
    light = meas & (m >= np.median(m[meas]))
    ra, rb = float(np.median(ma[light])), float(np.median(mbb[light]))
    da, db = ma - ra, mbb - rb
    dc = np.hypot(da, db)
    c_noise = max(1.4826 * float(np.median(dc[light])), 0.5)
    X[:, 2] = np.where(meas, np.clip(dc / c_noise, 0.0, _CLIP), 0.0)
    hue = np.degrees(np.arctan2(db, da)) % 360.0
    noise_deg = np.degrees(3.0 * c_noise / np.maximum(dc, 1e-3))
    has_hue = meas & (dc > 2.0 * c_noise)
    for j, c in enumerate(PENCIL_COLOURS):
        pc = palette.colour(c)
        z = hue_diff(hue, pc.hue_deg) / np.hypot(pc.hue_spread_deg, noise_deg)
        X[:, 3 + j] = np.where(has_hue, np.clip(z, -_Z_CLIP, _Z_CLIP), 0.0)
    assert X.shape[1] == 3 + nz + 1
    return X


__all__ = ["GUIDE_FEATURES", "GuideGeometry", "build_guide_geometry", "guide_features",
           "guide_geometry"]
