"""Sample every region of a rectified, light-normalised sheet and classify its mark.

What is printed where comes from the clean render of the template (same frame, same dpi): a
region's pixels are its shape eroded by a margin (misregistration), minus the printed lines and
dark print (dilated), so the artwork is never mistaken for a mark. Light printed fills are kept
and divided out (pencil on a tint multiplies its reflectance), so a tinted box reads like paper.

Per region, on those pixels, in CIELAB of the white-balanced photo:

* *coloured texels*: chroma well above the paper's own noise (measured on this photo's paper);
* *dark texels*: much darker than paper and not coloured (graphite, a grey cross);
* coverage = share of texels that are coloured or dark (a pencil leaves texels and paper gaps,
  so coverage, not mean colour, says whether something is there);
* hue of the coloured texels: the peak of a chroma-weighted hue histogram, refined by a
  circular mean within it (robust to a stray stroke of another colour and to paper gaps);
* X structure: texel density along both diagonals against the rest of the region (a cross is
  two strokes, a fill covers the area);
* bare cores: share of the region that is bare paper at least ~0.5 mm from any ink (crossing
  out leaves bare patches between its strokes wherever they run, colouring in does not);
* faint tint: texels above this photo's faint chroma level and how well their hues agree (a
  pale pencil below the "coloured" level is one hue; fringes and JPEG bleed are mixed).

Confidence is only high on strong evidence. A reading's confidence never exceeds the mass its
mark had before normalisation (what "no pencil fits" or "marked, but neither a fill nor a
crossing-out" takes away goes to review, not to the remaining mark); a coloured mark is
"crossed" only with a crossing-out's structure, graphite only with line work; a sparse
many-way scribble, or coverage between what two strokes and a fill reach where the sectors
are hidden, is "cannot tell"; hue distances use the pencils' spreads widened by the hue noise
of pale texels (paper chroma noise / chroma); faint one-hue texels or faint strokes in a
number box make "empty" doubtful.

The pencil palette is calibrated per photo (swatches, else the sheet's own marks; see
``vision.colour.calibrate_palette``). Each decision gives a probability from its margin
(coverage against the empty threshold, hue distance to the best against the second-best colour
in units of the calibrated spread, X score against its threshold); the reading's confidence is
the probability of the chosen mark, and ``review`` is set when it is below the threshold.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Mapping, NamedTuple

import cv2
import numpy as np

from calibration.template import PENCIL_COLOURS, Region, Template
from vision._cache import per_model
from vision import _evidence
from vision._evidence import (EVIDENCE_FEATURES, X_FEATURES, evidence_features, ring_pixels,
                              x_features)
from vision._guide import GUIDE_FEATURES, guide_features, guide_geometry
from vision._geom_threads import beside, both, start, threads
from vision.colour import (SRGB_TO_LINEAR, HueSample, Palette, calibrate_palette,
                           calibrate_palette_by_gaps, hue_diff,
                           linear_to_lab, load_palette)

#: Default review threshold: readings with confidence below it are flagged for a person.
REVIEW_THRESHOLD = 0.97

_LUM = np.array([0.2126, 0.7152, 0.0722], np.float32)
_HUE_BINS = 36  # 10 degree bins


@dataclass(frozen=True)
class RegionReading:
    """The reading of one region.

    Attributes
    ----------
    region_id, kind : str
    mark : str
        One of the region's allowed marks.
    confidence : float
        Probability (0..1) that ``mark`` is right, from the decision margins.
    review : bool
        True when a person should look (confidence below the review threshold, or the
        region could not be measured).
    alternatives : tuple of (mark, probability)
        All allowed marks with their probabilities, best first.
    features : mapping
        The measurements behind the decision (coverage, hue, x_score, ...).
    reason : str
        Short note on why review was set ("" when it was not).
    """

    region_id: str
    kind: str
    mark: str
    confidence: float
    review: bool
    alternatives: tuple[tuple[str, float], ...]
    features: Mapping[str, float] = field(default_factory=dict)
    reason: str = ""

    def to_json(self) -> dict:
        return {"mark": self.mark, "confidence": round(float(self.confidence), 4),
                "review": bool(self.review),
                "alternatives": [[m, round(float(p), 4)] for m, p in self.alternatives],
                "features": {k: (round(float(v), 4) if isinstance(v, (float, np.floating)) else v)
                             for k, v in self.features.items()},
                **({"reason": self.reason} if self.reason else {})}


@dataclass(frozen=True)
class SheetMarks:
    """All readings of one sheet plus the photo-level calibration used to make them."""

    readings: Mapping[str, RegionReading]
    palette: Palette
    thresholds: Mapping[str, float]
    #: (R, F) learned-reader features (``FEATURE_NAMES``), rows in ``SheetModel.region_ids``
    #: order; kept only when asked (``keep_matrix``) or when a learned reader was used
    matrix: np.ndarray | None = None
    #: what the palette was calibrated on: ``(region_id, sample)`` for every marked region
    #: that was sampled (``vision.colour.HueSample``; its label is the swatch's colour)
    calibration_samples: tuple = ()
    #: marked regions left out of the calibration because an object lies on them (a straight
    #: band of colour across the sheet, ``Stain.band``): their colour may be the object's
    calibration_left_out: tuple = ()
    #: objects found lying on the sheet (``Stain.objects``): ``(x0, y0, x1, y1, width)`` mm
    objects: tuple = ()

    @property
    def flagged(self) -> list[str]:
        return [rid for rid, r in self.readings.items() if r.review]


@dataclass(frozen=True)
class SheetModel:
    """What the clean sheet looks like at one dpi, precomputed once per template and dpi.

    Attributes
    ----------
    template : Template
    dpi : float
    shape : (H, W)
    expected : (H, W, 3) float32 ndarray
        The render in linear RGB (paper = 1).
    paper_mask : (H, W) bool ndarray
        Bare paper away from print and regions: where light is measured.
    region_ids : tuple of str
        Readable regions, in template order (index = label below).
    pix : (P,) int ndarray
        Flat pixel indices of every region's usable pixels, concatenated.
    label : (P,) int ndarray
        Region index of each pixel in ``pix``.
    band : (P,) int8 ndarray
        1 or 2 when the pixel lies on the first (top-left to bottom-right) or second diagonal
        band, 0 elsewhere (X structure test).
    off : (P,) bool ndarray
        Pixel lies away from both diagonals.
    area : (R,) int ndarray
        Usable pixel count per region.
    divisor : (P, 3) float32 ndarray
        What the print contributes at each pixel in ``pix`` (1 on paper): the photo is divided
        by it so that print reads as paper and pencil keeps its colour.
    weight : (P,) float32 ndarray
        Centre weighting for area coverage (1 at the centre, ~0 at the outline): a fill,
        even a careless one, covers the middle of a region, while a stroke overshooting from a
        neighbour or a connection ending in a space only grazes its rim.
    line_bin : (P,) int ndarray
        For line regions (connections), the pixel's global bin along the segment (bins of
        about 0.5 mm); -1 elsewhere.
    line_bins : (R,) int ndarray
        Number of bins per region (0 for area regions).
    is_line : (R,) bool ndarray
    diag_bin : (P,) int ndarray
        For pixels on a diagonal band of an area region: ``region * 16 + (diagonal - 1) * 8 +
        bin``, the bin (of 8) along that diagonal; -1 elsewhere. A stroke along a diagonal hits
        most bins; print fringe or a stray texel hits one or two.
    paper_sample : (S,) int ndarray
        Flat indices of up to ~20000 paper pixels spread over the sheet (noise statistics).
    outline_area : (R,) int ndarray
        Pixels inside each region's outline (the sampled band for connections) before print
        and margins are taken out: ``area / outline_area`` is the share left to read.
    halo_pix, halo_label : (Q,) int ndarray
        Around each area region: bare, unprinted paper within ``halo_mm`` of its bounding box
        and outside every region, and the region index it belongs to. A crossing-out stroke
        runs on past a region's outline (and is visible there even where the region itself is
        mostly print); a fill stays inside.
    halo_diag : (Q,) bool ndarray
        The halo pixel lies near one of the region's (extended) diagonals.
    roi : (row0, row1, col0, col1) or None
        A window holding every pixel of ``pix`` with a margin (``_ROI_MARGIN``) of pixels
        outside it: the neighbourhood filters of the classifier (3x3 counts, blur and
        gradient, distance to ink) run on it, not on the whole sheet (about half of it),
        with the same values at ``pix``.
    roi_pix : (P,) int ndarray or None
        ``pix`` as flat indices into ``roi``.
    strip_pos : (Pa,) int ndarray or None
        Positions in ``pix`` of the pixels of area regions (the straight-line search).
    strip_bin : (_LINE_ANGLES, Pa) int32 ndarray or None
        For each orientation, the pixel's strip: ``(area_index * _LINE_ANGLES + k) *
        _STRIPS + strip``, strips ``_STRIP_MM`` wide across the region, perpendicular to the
        line direction ``k * 180 / _LINE_ANGLES`` degrees from the x axis.
    strip_count : (A * _LINE_ANGLES * _STRIPS,) float64 ndarray or None
        Pixels per strip (all pixels valid).
    strip_dxy : (Pa, 2) float32 ndarray or None
        The pixel's offset (x, y) in px from its region's bounding-box centre.
    strip_px : float
        Strip width in px.
    strip_sum_idx : (src, starts, bins) or None
        The (pixel, orientation) pairs sorted by strip: ``src`` the pixel (position in
        ``strip_pos``) of each pair, ``starts`` where each non-empty strip begins, ``bins``
        its strip index (strip sums by one ``np.add.reduceat``).
    strip_ext : (R,) float ndarray or None
        Each area region's radius in px (largest pixel distance from its centre).
    open_px : (P,) bool ndarray or None
        The pixel lies clear of the wide guard around print (``area_guard_mm``). Regions
        that are mostly print (a treasure's chest and number) are read with the narrow guard,
        so most of their pixels sit beside printed lines, where a photo's colour fringes
        (demosaicing, chroma subsampling, sharpening) read as faint colour; these pixels are
        the ones a fringe cannot reach. True everywhere on regions read with the wide guard
        and on connections.
    print_pix, print_label : (Q,) int64 / int32 ndarray or None
        Pixels inside an area region's outline that the readers leave out (within the guard
        around its print) although the render shows paper there: a glyph's inside and the
        band along its lines. :func:`_check_ink_on_print` reads them.
    print_blur : (Q, len(_PRINT_BLUR_SIGMAS)) float32 ndarray or None
        The render's darkness at each ``print_pix`` blurred by each of ``_PRINT_BLUR_SIGMAS``:
        what the print alone can put there on a photo.
    print_grad : (Q, 2) float32 ndarray or None
        The x and y gradient of the render's darkness blurred by ``_PRINT_GRAD_SIGMA``, at
        each ``print_pix``: what a print shifted by a fraction of a pixel adds there.
    """

    template: Template
    dpi: float
    shape: tuple[int, int]
    expected: np.ndarray
    paper_mask: np.ndarray
    region_ids: tuple[str, ...]
    pix: np.ndarray
    label: np.ndarray
    band: np.ndarray
    off: np.ndarray
    area: np.ndarray
    divisor: np.ndarray
    weight: np.ndarray
    line_bin: np.ndarray
    line_bins: np.ndarray
    is_line: np.ndarray
    diag_bin: np.ndarray
    paper_sample: np.ndarray
    outline_area: np.ndarray | None = None
    halo_pix: np.ndarray | None = None
    halo_label: np.ndarray | None = None
    halo_diag: np.ndarray | None = None
    roi: tuple[int, int, int, int] | None = None
    roi_pix: np.ndarray | None = None
    strip_pos: np.ndarray | None = None
    strip_bin: np.ndarray | None = None
    strip_count: np.ndarray | None = None
    strip_dxy: np.ndarray | None = None
    strip_px: float = 0.0
    strip_sum_idx: tuple | None = None
    strip_ext: np.ndarray | None = None
    open_px: np.ndarray | None = None
    print_pix: np.ndarray | None = None
    print_label: np.ndarray | None = None
    print_blur: np.ndarray | None = None
    print_grad: np.ndarray | None = None


#: The render's darkness blurred by these Gaussian sigmas (px at the model's dpi), at each
#: ``SheetModel.print_pix``: what the print can spread there on a photo (:func:`_print_ink`).
_PRINT_BLUR_SIGMAS = (0.0, 0.7, 1.2, 2.0, 3.0)
#: The blur (px) of the render whose gradient models a region's residual misregistration
#: (``SheetModel.print_grad``); one of ``_PRINT_BLUR_SIGMAS``, whose blur it reuses.
_PRINT_GRAD_SIGMA = 1.2


#: Straight-line search (``SheetModel.strip_bin``): orientations over 180 degrees and strips
#: across each area region. 16 orientations (11.25 deg apart) and strips 1 mm wide keep a
#: straight stroke of any direction inside one strip over +-5 mm, the half-length of a box.
_LINE_ANGLES = 16
_STRIP_MM = 1.0
#: strips per orientation (ends clipped): 24 mm covers the diagonal of every area region
#: (number fields, the only larger ones, are clipped at the ends, which only widens their
#: outermost strips)
_STRIPS = 24
#: bins of 1 mm along the best line (its length), 32 mm at most
_ALONG = 32


#: Margin (px) of the classifier's window around the region pixels: the widest neighbourhood
#: it reads is the blur (radius 4 at sigma 1) under the gradient (radius 1); beyond 16 px of
#: bare margin the window's own border cannot reach a region pixel.
_ROI_MARGIN = 16


def _roi(pix: np.ndarray, shape: tuple[int, int]) -> tuple[tuple[int, int, int, int], np.ndarray]:
    """The window around ``pix`` (see ``SheetModel.roi``) and ``pix`` as indices into it."""
    H, W = shape
    if pix.size == 0:
        return (0, H, 0, W), pix.astype(np.int64)
    r, c = np.divmod(pix, W)
    r0, r1 = max(0, int(r.min()) - _ROI_MARGIN), min(H, int(r.max()) + 1 + _ROI_MARGIN)
    c0, c1 = max(0, int(c.min()) - _ROI_MARGIN), min(W, int(c.max()) + 1 + _ROI_MARGIN)
    return (r0, r1, c0, c1), ((r - r0) * (c1 - c0) + (c - c0)).astype(np.int64)


def _disk(r: int) -> np.ndarray:
    r = max(0, int(r))
    return cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))


def _region_polygon_px(region: Region, k: float, *, band: float = 1.0, trim: float = 0.0) -> np.ndarray:
    s = region.shape
    if s.type == "segment" and (band != 1.0 or trim):
        a = np.asarray(s.params["p1"], float)
        b = np.asarray(s.params["p2"], float)
        d = b - a
        ln = max(float(np.hypot(*d)), 1e-9)
        u = d / ln
        a, b = a + u * trim * ln, b - u * trim * ln
        n = np.array([-u[1], u[0]]) * (s.params["width"] * band / 2)
        poly = np.array([a + n, b + n, b - n, a - n])
    else:
        poly = s.polygon(segments=64)
    return poly * k


def _fill(mask: np.ndarray, poly_px: np.ndarray) -> None:
    # cv2 puts integer coordinates at pixel centres; ours are at +0.5 (pixel (i, j) centre is
    # x = j + 0.5), hence the shift. 4 fractional bits keep sub-pixel outlines.
    pts = np.round((poly_px - 0.5) * 16).astype(np.int32).reshape(-1, 1, 2)
    cv2.fillPoly(mask, [pts], 1, lineType=cv2.LINE_8, shift=4)


def build_sheet_model(template: Template, render: np.ndarray, *, dpi: float,
                      margin_mm: float = 0.7, print_guard_mm: float = 0.45,
                      area_guard_mm: float = 0.8, halo_mm: float = 1.2,
                      segment_band: float = 1.5, segment_trim: float = 0.03,
                      line_bin_mm: float = 0.5) -> SheetModel:
    """Precompute the sampling geometry of a template from its clean render.

    Parameters
    ----------
    template : Template
    render : (H, W, 3) uint8 ndarray
        The clean render at ``dpi`` (``calibration.render.render_sheet(template, dpi=dpi)``).
    dpi : float
    margin_mm : float
        Erosion of each region's outline, so misregistration and outline ink stay out.
    print_guard_mm : float
        Dilation of printed lines and dark print before excluding them.
    area_guard_mm : float
        Wider dilation of any non-faint print inside area regions (not connections).
    segment_band, segment_trim : float
        Connections (segments) are sampled over ``segment_band`` times their width (a player
        draws anywhere across it, not only on the guide: 1.5 times the templates' 4 mm is 3 mm
        either side of the guide; at 2 mm, lines drawn 2-3 mm beside the guide, which anyone
        reads as the connection, read empty with the learned reader 0.998-0.9994 sure),
        trimmed by ``segment_trim`` of their length at each end (the ends touch the spaces
        they join).
    line_bin_mm : float
        Bin length along a connection for the length-coverage feature.

    Returns
    -------
    SheetModel
    """
    render = np.asarray(render)
    if render.ndim != 3 or render.shape[2] != 3 or render.dtype != np.uint8:
        raise ValueError(f"render must be (H, W, 3) uint8, got {render.shape} {render.dtype}")
    if not dpi > 0:
        raise ValueError(f"dpi must be positive, got {dpi!r}")
    H, W = render.shape[:2]
    k = dpi / 25.4
    expected = SRGB_TO_LINEAR[render]
    white = np.maximum(np.quantile(expected.reshape(-1, 3)[:: max(1, H * W // 20000)], 0.95, axis=0), 1e-3)
    expected = np.clip(expected / white, 0.0, 1.0).astype(np.float32)
    y = expected @ _LUM
    guard = max(1, int(round(print_guard_mm * k)))
    win = np.ones((2 * guard + 1, 2 * guard + 1), np.uint8)
    # The photo may be misregistered by about `guard` px, so every pixel is judged against the
    # range of what the print can be within that distance:
    #  * dark print (pencil cannot show over it) is excluded, with the guard;
    #  * coloured print is excluded where it is not a flat tint (its edges would read as
    #    pencil); flat tints are divided out per channel (pencil multiplies the tint);
    #  * light neutral print (faint guides, anti-aliased thin lines) is divided out by the
    #    darkest neutral value nearby, so the print, wherever it landed, reads as paper
    #    while a pencil texel over or beside it keeps its hue.
    emin = cv2.erode(expected, win)
    emax = cv2.dilate(expected, win)
    uniform = (emax - emin).max(axis=2) < 0.04
    chroma_e = expected.max(axis=2) - expected.min(axis=2)
    coloured_print = cv2.dilate((chroma_e > 0.1).astype(np.uint8), win) > 0
    dark_print = cv2.dilate((y < 0.15).astype(np.uint8), win) > 0
    structure = dark_print | (coloured_print & ~uniform)
    # Inside area regions (boxes, symbols) all but the faintest print is excluded with a wider
    # guard: a camera's tone curve and colour cast give grey print a tint that division by
    # the render cannot remove, and blur spreads it. Connections keep the division: their
    # faint guide runs where the player draws, and pencil over it must stay visible.
    wide = max(guard + 1, int(round(area_guard_mm * k)))
    structure_area = structure | (cv2.dilate((y < 0.6).astype(np.uint8), _disk(wide)) > 0)
    ymin = cv2.erode(y, win)
    divisor_img = np.where(uniform[..., None], expected, np.maximum(ymin, 0.15)[..., None])
    cmin = expected.min(axis=2)

    near_white = (y > 0.85) & (cmin > 0.75)
    # paper in the render (SheetModel.print_pix: where the guard left out paper)
    render_paper = (y > 0.8) & (chroma_e < 0.1)
    all_regions = np.zeros((H, W), np.uint8)
    for r in template.regions:
        # (a connection's whole sampled band: a line drawn beside the guide is not paper)
        _fill(all_regions, _region_polygon_px(r, k, band=segment_band if r.shape.type == "segment"
                                              else 1.0))
    # the halo (see SheetModel) keeps clear of every region and of print by the guard
    no_halo = (cv2.dilate(all_regions, win) > 0) | structure | (y < 0.85)
    all_regions = cv2.dilate(all_regions, _disk(max(1, int(round(1.0 * k))))) > 0
    paper = near_white & uniform & ~all_regions

    margin = max(1, int(round(margin_mm * k)))
    ids, pix_l, lab_l, band_l, off_l, area = [], [], [], [], [], []
    w_l, bin_l, nbins, is_line, dbin_l, outline = [], [], [], [], [], []
    hpix_l, hlab_l, hdiag_l = [], [], []
    spos_l, sdxy_l = [], []  # area pixels for the straight-line search
    open_l = []  # clear of the wide print guard (SheetModel.open_px)
    ppix_l, plab_l = [], []  # paper left out by the guard (SheetModel.print_pix)
    n_pix = 0
    hm = halo_mm * k
    next_bin = 0
    for r in template.readable_regions():
        line = r.shape.type == "segment"
        if line:
            # the window holds the whole sampled band, which may be wider than the template's
            # stroke (segment_band)
            band_poly = _region_polygon_px(r, k, band=segment_band)
            x0, y0 = band_poly.min(axis=0)
            x1, y1 = band_poly.max(axis=0)
        else:
            x0, y0, x1, y1 = (v * k for v in r.shape.bbox())
        c0, r0 = max(0, int(math.floor(x0)) - 2), max(0, int(math.floor(y0)) - 2)
        c1, r1 = min(W, int(math.ceil(x1)) + 2), min(H, int(math.ceil(y1)) + 2)
        if c1 <= c0 or r1 <= r0:
            continue
        local = np.zeros((r1 - r0, c1 - c0), np.uint8)
        if line:
            _fill(local, _region_polygon_px(r, k, band=segment_band, trim=segment_trim) - [c0, r0])
        else:
            _fill(local, _region_polygon_px(r, k) - [c0, r0])
            local = cv2.erode(local, _disk(margin))
        outline.append(int((local > 0).sum()))
        m = (local > 0) & ~(structure if line else structure_area)[r0:r1, c0:c1]
        if not line and m.sum() < 0.15 * max(1, (local > 0).sum()):
            # Mostly print (a glyph filling its box): fall back to the narrower guard.
            m = (local > 0) & ~structure[r0:r1, c0:c1]
        if not line:
            pr, pc = np.nonzero((local > 0) & ~m & render_paper[r0:r1, c0:c1])
            ppix_l.append((pr + r0) * W + pc + c0)
            plab_l.append(np.full(pr.size, len(ids), np.int32))
        rr, cc = np.nonzero(m)
        rr = rr + r0
        cc = cc + c0
        open_l.append(np.ones(rr.size, bool) if line else ~structure_area[rr, cc])
        xs, ys = cc + 0.5, rr + 0.5
        if line:
            a = np.asarray(r.shape.params["p1"], float) * k
            b = np.asarray(r.shape.params["p2"], float) * k
            d = b - a
            ln = max(float(np.hypot(*d)), 1e-9)
            t = ((xs - a[0]) * d[0] + (ys - a[1]) * d[1]) / ln ** 2
            nb = max(2, int(round(ln / (line_bin_mm * k))))
            bi = np.clip((t * nb).astype(np.int64), 0, nb - 1) + next_bin
            next_bin += nb
            nbins.append(nb)
            u = v = np.zeros(rr.size)
            wgt = np.ones(rr.size, np.float32)
        else:
            # Region-local frame: bbox mapped to [-1, 1]^2 (the X test and centre weights).
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            hx, hy = max((x1 - x0) / 2, 1e-6), max((y1 - y0) / 2, 1e-6)
            u = (xs - cx) / hx
            v = (ys - cy) / hy
            wgt = np.clip((1.0 - 0.8 * (u * u + v * v)) ** 2, 0.02, 1.0).astype(np.float32)
            bi = np.full(rr.size, -1, np.int64)
            # every other pixel (a checkerboard): a 1 mm strip still holds ~8 per mm of line
            sub = np.flatnonzero((rr + cc) % 2 == 0)
            spos_l.append(n_pix + sub)
            sdxy_l.append(np.stack([xs[sub] - cx, ys[sub] - cy], axis=1))
            nbins.append(0)
        dd = np.minimum(np.abs(u - v), np.abs(u + v)) / math.sqrt(2)
        # The X test compares the diagonal arms with the sectors between them at the same
        # distance from the centre (an annulus): a fill, even a partial one, covers arms and
        # sectors alike, a cross only the arms. The centre itself belongs to both strokes of a
        # cross and to every fill, so it says nothing.
        r2 = u * u + v * v
        inner = (r2 < 1.2) & (r2 > 0.06)
        if not line:
            hc0, hr0 = max(0, int(math.floor(x0 - hm))), max(0, int(math.floor(y0 - hm)))
            hc1, hr1 = min(W, int(math.ceil(x1 + hm))), min(H, int(math.ceil(y1 + hm)))
            hr, hc = np.nonzero(~no_halo[hr0:hr1, hc0:hc1])
            # every other pixel (a checkerboard) halves the cost and still meets every stroke
            keep = (hr + hc) % 2 == 0
            hr, hc = hr[keep] + hr0, hc[keep] + hc0
            hu = (hc + 0.5 - (x0 + x1) / 2) / max((x1 - x0) / 2, 1e-6)
            hv = (hr + 0.5 - (y0 + y1) / 2) / max((y1 - y0) / 2, 1e-6)
            hpix_l.append(hr * W + hc)
            hlab_l.append(np.full(hr.size, len(ids), np.int32))
            hdiag_l.append(np.minimum(np.abs(hu - hv), np.abs(hu + hv)) / math.sqrt(2) < 0.25)
        ids.append(r.id)
        pix_l.append(rr * W + cc)
        lab_l.append(np.full(rr.size, len(ids) - 1, np.int32))
        d1 = np.abs(u - v) / math.sqrt(2)
        which = np.where(inner & (dd < 0.16) & (not line), np.where(d1 <= dd, 1, 2), 0)
        band_l.append(which)
        # position along the diagonal, -1..1 -> 8 bins
        along = np.where(which == 1, (u + v) / 2, (u - v) / 2)
        bins_ = np.clip(((along + 1) * 4).astype(np.int64), 0, 7)
        dbin_l.append(np.where(which > 0, (len(ids) - 1) * 16 + (which - 1) * 8 + bins_, -1))
        off_l.append(inner & (dd > 0.42) & (not line))
        w_l.append(wgt)
        bin_l.append(bi)
        is_line.append(line)
        area.append(rr.size)
        n_pix += rr.size
    cat = (lambda xs, dt: np.concatenate(xs).astype(dt) if xs else np.zeros(0, dt))
    # straight-line search geometry (SheetModel.strip_bin): per orientation, the strip of
    # each area pixel, counted once here (the pixel set is fixed)
    strip_pos = cat(spos_l, np.int64)
    strip_dxy = np.concatenate(sdxy_l).astype(np.float32) if sdxy_l else np.zeros((0, 2), np.float32)
    lab_all = cat(lab_l, np.int32)
    strip_px = _STRIP_MM * k
    th_k = np.arange(_LINE_ANGLES) * (math.pi / _LINE_ANGLES)
    # rho: distance across the line direction (cos, sin) = normal (-sin, cos)
    rho = -strip_dxy[:, :1].T * np.sin(th_k)[:, None] + strip_dxy[:, 1:].T * np.cos(th_k)[:, None]
    sb = np.clip(np.floor(rho / strip_px + _STRIPS / 2), 0, _STRIPS - 1).astype(np.int32)
    base = (lab_all[strip_pos].astype(np.int64)[None, :] * _LINE_ANGLES
            + np.arange(_LINE_ANGLES)[:, None]) * _STRIPS
    strip_bin = (base + sb).astype(np.int32)
    n_regions = len(ids)
    flat = strip_bin.reshape(-1)
    strip_count = np.bincount(flat, minlength=n_regions * _LINE_ANGLES * _STRIPS).astype(np.float64)
    # strip sums as one reduceat over the (pixel, orientation) pairs sorted by strip: several
    # times cheaper than a weighted bincount over the 16 copies of every pixel
    order = np.argsort(flat, kind="stable")
    sorted_bins = flat[order]
    starts = np.flatnonzero(np.diff(sorted_bins, prepend=-1))
    strip_sum_idx = ((order % max(1, strip_pos.size)).astype(np.intp), starts.astype(np.intp),
                     sorted_bins[starts].astype(np.intp))
    # each region's radius (px): the largest distance of its pixels from the centre
    strip_ext = np.zeros(n_regions)
    if strip_pos.size:
        np.maximum.at(strip_ext, lab_all[strip_pos], np.hypot(strip_dxy[:, 0], strip_dxy[:, 1]))
    pix = cat(pix_l, np.int64)
    paper_sample = np.flatnonzero(paper.reshape(-1))
    if paper_sample.size > 20000:
        paper_sample = paper_sample[:: paper_sample.size // 20000]
    divisor = np.maximum(divisor_img.reshape(-1, 3)[pix], 0.15).astype(np.float32)
    roi, roi_pix = _roi(pix, (H, W))
    ppix = cat(ppix_l, np.int64)
    darkness = np.clip(1.0 - y, 0.0, 1.0).astype(np.float32)
    blurred = {sg: darkness if sg == 0 else cv2.GaussianBlur(darkness, (0, 0), sg)
               for sg in _PRINT_BLUR_SIGMAS}
    print_blur = np.stack([blurred[sg].reshape(-1)[ppix] for sg in _PRINT_BLUR_SIGMAS], axis=1)
    gb = blurred[_PRINT_GRAD_SIGMA]
    print_grad = np.stack([cv2.Sobel(gb, cv2.CV_32F, 1, 0, ksize=3).reshape(-1)[ppix] / 8,
                           cv2.Sobel(gb, cv2.CV_32F, 0, 1, ksize=3).reshape(-1)[ppix] / 8],
                          axis=1)
    return SheetModel(template, float(dpi), (H, W), expected, paper,
                      tuple(ids), pix, cat(lab_l, np.int32),
                      cat(band_l, np.int8), cat(off_l, bool), np.asarray(area, np.int64), divisor,
                      cat(w_l, np.float32), cat(bin_l, np.int64), np.asarray(nbins, np.int64),
                      np.asarray(is_line, bool), cat(dbin_l, np.int64), paper_sample,
                      np.asarray(outline, np.int64), cat(hpix_l, np.int64), cat(hlab_l, np.int32),
                      cat(hdiag_l, bool), roi, roi_pix, strip_pos, strip_bin, strip_count,
                      strip_dxy, float(strip_px), strip_sum_idx, strip_ext, cat(open_l, bool),
                      ppix, cat(plab_l, np.int32), print_blur, print_grad)


# --------------------------------------------------------------------------------------------
# classification
# --------------------------------------------------------------------------------------------

def _sigmoid(x):
    if isinstance(x, (float, int, np.floating)):  # scalars: plain math is ~50x faster
        x = max(-40.0, min(40.0, float(x)))
        return 1.0 / (1.0 + math.exp(-x))
    return 1.0 / (1.0 + np.exp(-np.clip(x, -40, 40)))


def _sig(x: float) -> float:
    """:func:`_sigmoid` of a Python float, the same value (a NaN clamps to 40 as there), in a
    third of the time: ``_decide`` calls it ~20 times per region."""
    if not -40.0 <= x <= 40.0:
        x = -40.0 if x < -40.0 else 40.0
    return 1.0 / (1.0 + _exp(-x))


_exp = math.exp


@dataclass(frozen=True)
class _Features:
    n: np.ndarray
    coloured: np.ndarray
    dark: np.ndarray
    cover: np.ndarray
    line_cover: np.ndarray
    hue: np.ndarray
    purity: np.ndarray
    chroma: np.ndarray
    x_score: np.ndarray
    band_cov: np.ndarray
    off_cov: np.ndarray
    x_ok: np.ndarray
    faint_cover: np.ndarray
    faint_line: np.ndarray
    diag_min: np.ndarray
    diag_max: np.ndarray
    coherence: np.ndarray
    dlen_min: np.ndarray
    dlen_max: np.ndarray
    faint_dlen_max: np.ndarray
    bare_core: np.ndarray
    faint_tint: np.ndarray
    faint_hue_r: np.ndarray
    ink_drop: np.ndarray
    halo_diag: np.ndarray | None = None
    halo_off: np.ndarray | None = None
    halo_dark_diag: np.ndarray | None = None
    lines: Mapping[str, np.ndarray] | None = None
    # (OPEN_FEATURES: the share of the region clear of the wide print guard, and the ink and
    # colour coverage there; only when asked for)
    open_share: np.ndarray | None = None
    open_cover: np.ndarray | None = None
    open_coloured: np.ndarray | None = None


def _median(x: np.ndarray):
    """``np.median(x)`` of a 1-D float array, the same value, in about a third of the time
    for the paper sample's ~20,000 values (:func:`_photo_thresholds` takes four).

    The median is the mean (``np.mean``, as ``np.median`` takes it) of the one or two middle
    order statistics. They are found in a window: the values between two order statistics
    of a strided sample of ~512 values around its middle. When fewer values than the middle
    rank lie below the window and the window reaches past it (the usual case), the middle
    order statistics of ``x`` are those of the window at the rank less the values below,
    found by partitioning the window alone (a few hundred values instead of all of them).
    Anything else (a short array, a window that misses the middle, a NaN: the counts below,
    inside and above do not add up) is left to ``np.median``."""
    x = np.asarray(x)
    n = x.size
    if x.ndim != 1 or n < 4096 or x.dtype.kind != "f":
        return np.median(x)
    ks = [n // 2 - 1, n // 2] if n % 2 == 0 else [(n - 1) // 2]
    s = np.sort(x[:: n // 512])
    m = s.size
    lo, hi = s[max(m // 2 - 40, 0)], s[min(m // 2 + 40, m - 1)]
    below = np.count_nonzero(x < lo)
    win = x[(x >= lo) & (x <= hi)]
    if (below > ks[0] or below + win.size <= ks[-1]
            or below + win.size + np.count_nonzero(x > hi) != n):
        return np.median(x)
    at = [k - below for k in ks]
    return np.mean(np.partition(win, at)[at])


def _photo_thresholds(lab_paper: np.ndarray, palette: Palette) -> dict[str, float]:
    """Coloured/dark thresholds from this photo's own paper noise."""
    if lab_paper.shape[0] < 50:
        return {"chroma": max(palette.min_chroma, 10.0), "dark_l": 88.0, "paper_l": 100.0,
                "chroma_faint": max(palette.min_chroma, 10.0), "dark_l_faint": 88.0}
    C = np.hypot(lab_paper[:, 1], lab_paper[:, 2])
    L = lab_paper[:, 0]
    # Robust noise scales (median and MAD): the paper mask may catch a little print bleed or
    # a stray stroke, which must not raise the thresholds for the whole sheet.
    c_med = float(_median(C))
    c_sd = 1.4826 * float(_median(np.abs(C - c_med)))
    l_med = float(_median(L))
    l_sd = 1.4826 * float(_median(np.abs(L - l_med)))
    chroma = max(palette.min_chroma, c_med + 6.0 * c_sd + 2.0)
    drop = max(9.0, 6.0 * l_sd + 3.0)
    # Faint-evidence thresholds (half the margins): what a light hand leaves. Used only to
    # doubt an "empty" reading, never to claim a mark.
    chroma_lo = max(0.5 * palette.min_chroma, c_med + 3.0 * c_sd + 1.0)
    drop_lo = max(4.5, 3.0 * l_sd + 1.5)
    return {"chroma": chroma, "dark_l": l_med - drop, "paper_l": l_med, "paper_chroma": c_med,
            "paper_chroma_sd": c_sd, "paper_l_sd": l_sd, "chroma_faint": chroma_lo,
            "dark_l_faint": l_med - drop_lo}


class _RegionSums:
    """Per-region sums of per-pixel columns, cheaper than ``np.bincount``.

    ``model.label`` runs region by region (``build_sheet_model`` concatenates each region's
    pixels in turn), so a region's sum is one segment of ``np.add.reduceat`` (about a sixth
    of the time of a weighted bincount). The sums agree with bincount's to rounding (~1e-15
    relative: reduceat adds pairwise, bincount in pixel order); counts are exact either way.
    Labels out of order fall back to ``bincount``.
    """

    def __init__(self, label: np.ndarray, R: int):
        self.label, self.R = label, R
        self.rows: list[np.ndarray] = []
        P = label.size
        counts = np.bincount(label, minlength=R)[:R] if P else np.zeros(R, np.int64)
        self.sorted = bool(P > 0 and np.all(label[1:] >= label[:-1]))
        # a trailing 0 gives empty regions at the end a valid start
        self.starts = np.minimum(np.concatenate([[0], np.cumsum(counts)[:-1]]), P).astype(np.intp)
        self.empty = counts == 0
        self.buf = np.zeros(P + 1, np.float64) if self.sorted else None

    def sibling(self) -> "_RegionSums":
        """A new, empty accumulator over the same labels with its own buffer (for sums taken
        on another thread; each row is the same as this one would give)."""
        twin = object.__new__(_RegionSums)
        twin.label, twin.R, twin.rows = self.label, self.R, []
        twin.sorted, twin.starts, twin.empty = self.sorted, self.starts, self.empty
        twin.buf = np.zeros_like(self.buf) if self.buf is not None else None
        return twin

    def add(self, values: np.ndarray) -> int:
        """Sum a (P,) column per region; returns its row in :meth:`sums`."""
        if not self.sorted:
            self.rows.append(np.bincount(self.label, values, self.R))
        else:
            out = np.empty(self.R, np.float64)
            self.buf[:-1] = values  # float64 first: the sum is taken in float64, as bincount's
            np.add.reduceat(self.buf, self.starts, out=out)
            out[self.empty] = 0.0  # reduceat gives an empty segment its first element
            out += 0.0  # a sum of -0.0 terms is -0.0 here, +0.0 from bincount (arctan2 tells)
            self.rows.append(out)
        return len(self.rows) - 1

    def sums(self) -> np.ndarray:
        """(K, R) float64: the columns summed per region."""
        return np.array(self.rows).reshape(len(self.rows), self.R)


def _hue360(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.degrees(np.arctan2(b, a)) % 360.0``, the same values, without the slow float
    remainder (arctan2 is within [-180, 180] degrees: one wrap at most)."""
    h = np.degrees(np.arctan2(b, a))
    neg = h < 0
    h[neg] += 360.0
    h += 0.0  # -0.0 -> 0.0, as the remainder gives
    return h


def _hue_bins(h: np.ndarray) -> np.ndarray:
    """``(h / (360.0 / _HUE_BINS)).astype(np.int64) % _HUE_BINS``, the same bins: the
    remainder is taken only where a bin is out of range (a hue of 360 after ``_hue360``'s
    wrap; anything else not within [0, 360]): an integer remainder over every pixel costs
    more than finding the few that need one."""
    bins = (h / (360.0 / _HUE_BINS)).astype(np.int64)
    out = (bins >= _HUE_BINS) | (bins < 0)
    if out.any():
        bins[out] %= _HUE_BINS
    return bins


def _abs_hue_diff(h: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """``np.abs(hue_diff(h, ref))`` for hues in [0, 360], the same values: the remainder of
    ``h - ref + 180`` (within (-180, 540)) is one add or subtract of 360, both exact the way
    ``fmod`` is."""
    v = np.asarray(h, float) - np.asarray(ref, float) + 180.0
    lo, hi = v < 0, v >= 360.0
    v[lo] += 360.0
    v[hi] -= 360.0
    v -= 180.0
    return np.abs(v, out=v)


class _ModelConstants:
    """What :func:`classify_sheet` derives from a sheet model alone (the same values every
    photo): its regions resolved, which marks each allows, the per-region sums' segments
    (``_RegionSums``), the hue histogram's base bins, the diagonal bands' masks and the
    connection and diagonal bins of the pixels that have one. Computed once per model
    (:func:`_model_constants`; ~1 ms a photo before; 20-23 bytes a region pixel: 0.9-2.9 MB
    a sheet at 100 dpi, 12 MB for all six); the arrays are read-only."""

    def __init__(self, model: SheetModel):
        R = len(model.region_ids)
        self.regions = tuple(model.template.region(rid) for rid in model.region_ids)
        self.allowed = np.array([[m in r.marks for m in MARKS] for r in self.regions], bool)
        self.is_line = [bool(v) for v in model.is_line[:R]]
        self.sums = _RegionSums(model.label, R)
        self.hue_base = model.label * _HUE_BINS
        self.band1, self.band2 = model.band == 1, model.band == 2
        self.banded = model.band != 0
        sel = model.diag_bin >= 0
        self.diag_sel, self.diag_bin = sel, model.diag_bin[sel]
        self.nb_total = int(model.line_bins.sum())
        lsel = model.line_bin >= 0
        self.line_sel, self.line_bin = lsel, model.line_bin[lsel]
        self.bin_region = np.repeat(np.arange(R), model.line_bins)
        # The regions read with the narrow guard (some pixel lies within the wide guard of
        # print: treasures, whirlpools, glyph boxes) and their pixels: the only ones whose
        # open columns differ from the whole region's (elsewhere every pixel is open), so
        # they are summed over these pixels alone (8 % of a Reefs sheet's, 1 % of a Crypts
        # one's).
        self.open_narrow = np.zeros(R, bool)
        if model.open_px is not None:
            self.open_narrow[np.unique(model.label[~model.open_px])] = True
        self.open_idx = np.flatnonzero(self.open_narrow[model.label])
        self.open_px = (model.open_px[self.open_idx] if model.open_px is not None
                        else np.zeros(0, bool))
        self.open_sums = _RegionSums(model.label[self.open_idx], R)
        for v in vars(self).values():
            if isinstance(v, np.ndarray):
                v.setflags(write=False)

    def region_sums(self) -> "_RegionSums":
        """A new, empty ``_RegionSums`` over the model's labels (as ``_RegionSums(label, R)``)."""
        return self.sums.sibling()


def _model_constants(model: SheetModel) -> _ModelConstants:
    """``_ModelConstants(model)``, built once per model object and kept while it lives
    (``vision._cache.per_model``: a model dropped from the pipeline's cache takes its
    constants along)."""
    return per_model(model, "constants", _ModelConstants)


def prepare(model: SheetModel) -> None:
    """Build what classifying a photo derives from ``model`` alone (the classifier's
    constants, the ring evidence's geometry and tables, the guide geometry, the samples of the
    last checks), so that the first photo of each template does not pay for it (30-55 ms).
    Kept per model object, as locate's and rectify's ``prepare`` keep theirs per template;
    ``pipeline.sheet_model`` calls this when it builds a model."""
    _model_constants(model)
    _evidence.prepare(model)
    guide_geometry(model)
    per_model(model, "print_seen", _print_seen_geometry)
    per_model(model, "stains", _stain_geometry)
    per_model(model, "beside_routes", _beside_route_geometry)
    per_model(model, "through", _through_geometry)


def _measure(lab: np.ndarray, model: SheetModel, th: Mapping[str, float], ok: np.ndarray, *,
             lines: bool = True, open_cols: bool = False) -> _Features:
    # (lines: measure the line features, LINE_FEATURES; only a model that reads them, or a
    # dataset being built, needs them: they cost several ms a photo. open_cols: whether to
    # measure OPEN_FEATURES; classify_sheet always does since session 20)
    R = len(model.region_ids)
    lbl = model.label
    mc = _model_constants(model)
    L, a, b = lab[:, 0], lab[:, 1], lab[:, 2]
    C = np.hypot(a, b)
    # (every neighbourhood filter below runs on the window around the regions, SheetModel.roi)
    if model.roi is not None and model.roi_pix is not None:
        (r0, r1, c0, c1), rpix = model.roi, model.roi_pix
    else:
        (r0, r1, c0, c1), rpix = _roi(model.pix, model.shape)
    H, W = r1 - r0, c1 - c0
    # the ink strength's gradient and contrast read nothing computed below: they run beside
    # the texel counts when a second core is allowed (vision._geom_threads; same values)
    grads = start(lambda: _ink_gradients(C, L, ok, th, rpix, (H, W), lines=lines))
    # the straight-line search reads only the gradients, the ink contrast and ok: queued
    # right behind them, so that the helper goes on to it while the texel counts and the
    # region sums below are taken here
    line_task = (start(lambda: _lines_of(grads.result(), ok, model)) if lines else None)
    faint_hue = start(lambda: _faint_and_hue(C, L, a, b, ok, th, rpix, (H, W)))
    # Coloured: chroma above the paper's noise *and* saturated for its darkness. Graphite is
    # slightly bluish grey: a dark texel with a little chroma is graphite, not a pencil colour.
    col = (C > th["chroma"]) & (C > 0.3 * np.maximum(100.0 - L, 0.0)) & ok
    dark = (L < th["dark_l"]) & ~col & ok
    # A pencil stroke is a connected trail of texels; noise is isolated pixels. Keep texels
    # with at least two marked neighbours (3x3) so that coverage counts strokes, not noise.
    img = np.zeros(H * W, np.uint8)
    img[rpix[col | dark]] = 1
    nsum = cv2.boxFilter(img.reshape(H, W), -1, (3, 3), normalize=False).reshape(-1)[rpix]
    keep = nsum >= 3
    col &= keep
    dark &= keep
    ink = col | dark
    faint, h, cos_h, sin_h = faint_hue.result()
    w = model.weight * ok
    # every per-region sum below is queued here and summed in one pass at the end
    acc = mc.region_sums()
    k_w, k_n = acc.add(w), acc.add(ok)
    k_cover, k_fcol = acc.add(w * ink), acc.add(w * col)
    k_faint, k_fdark = acc.add(w * faint), acc.add(w * dark)
    open_cols = open_cols and model.open_px is not None
    if open_cols:
        # (over the narrow-guard regions' pixels alone, _ModelConstants.open_idx: the other
        # regions' open sums are their whole sums)
        oacc = mc.open_sums.sibling()
        oi = mc.open_idx
        wo = w[oi] * mc.open_px
        o_w, o_ink, o_col = oacc.add(wo), oacc.add(wo * ink[oi]), oacc.add(wo * col[oi])
    # connections: share of the segment's length that carries a stroke
    line_cover = np.zeros(R)
    nb_total = mc.nb_total
    if nb_total:
        sel, lb = mc.line_sel, mc.line_bin
        hits = np.bincount(lb, ink[sel], nb_total) > 0
        seen = np.bincount(lb, ok[sel], nb_total) > 0
        bin_region = mc.bin_region
        nseen = np.maximum(np.bincount(bin_region, seen, R), 1)
        line_cover = np.bincount(bin_region, hits & seen, R) / nseen
        fhits = np.bincount(lb, faint[sel], nb_total) > 0
        faint_line = np.bincount(bin_region, fhits & seen, R) / nseen
    else:
        faint_line = np.zeros(R)
    # hue: chroma-weighted histogram peak, then circular mean within +-25 deg of the peak
    wc = np.where(col, C, 0.0)
    bins = _hue_bins(h)
    hist = np.bincount(mc.hue_base + bins, wc, R * _HUE_BINS).reshape(R, _HUE_BINS)
    sm = hist + np.roll(hist, 1, axis=1) + np.roll(hist, -1, axis=1)
    peak = (np.argmax(sm, axis=1) + 0.5) * (360.0 / _HUE_BINS)
    # (only coloured texels can be in the window: the distance is needed there alone)
    ci = np.flatnonzero(col)
    win = np.zeros(col.size, bool)
    win[ci] = _abs_hue_diff(h[ci], peak[lbl[ci]]) <= 25.0
    ww = np.where(win, C, 0.0)
    k_sx, k_sy = acc.add(ww * cos_h), acc.add(ww * sin_h)
    k_ww, k_wc, k_win = acc.add(ww), acc.add(wc), acc.add(win)
    gx, gy, zp = grads.result()
    # the second half of the sums on its own accumulator (the same rows), offered to the
    # helper after the line search, while the first half is taken here
    rest = start(lambda: _measure_rest(acc.sibling(), model, th, ok, w, ink, faint, C, L,
                                       cos_h, sin_h, rpix, (H, W), zp if lines else None))
    S, k = _measure_more(acc, model, ok, w, ink, faint, gx, gy, consts=mc)
    S2, k2 = rest.result()
    for name, row in k2.items():
        k[name] = row + len(S)
    S = np.concatenate([S, S2])
    line_out = line_task.result() if line_task is not None else None
    wsum = np.maximum(S[k_w], 1e-9)
    n = S[k_n]
    cover = S[k_cover] / wsum
    fcol = S[k_fcol] / wsum
    faint_cover = S[k_faint] / wsum
    fdark = S[k_fdark] / wsum
    hue = np.degrees(np.arctan2(S[k_sy], S[k_sx])) % 360.0
    purity = S[k_ww] / np.maximum(S[k_wc], 1e-9)
    chroma = S[k_ww] / np.maximum(S[k_win], 1)
    coherence = np.hypot(S[k["jr"]], S[k["ji"]]) / np.maximum(S[k["jn"]], 1e-6)
    nb1, nb2 = S[k["nb1"]], S[k["nb2"]]
    nb = nb1 + nb2
    no = S[k["no"]]
    bc1 = S[k["bc1"]] / np.maximum(nb1, 1)
    bc2 = S[k["bc2"]] / np.maximum(nb2, 1)
    bc = S[k["bc"]] / np.maximum(nb, 1)
    oc = S[k["oc"]] / np.maximum(no, 1)
    bare_core = S[k["core"]] / np.maximum(n, 1)
    faint_tint = S[k["ftint"]] / wsum
    faint_hue_r = np.hypot(S[k["tx"]], S[k["ty"]]) / np.maximum(S[k["wt"]], 1e-9)
    ink_drop = S[k["drop"]] / np.maximum(S[k["ink"]], 1)
    x_score = np.where((nb >= 8) & (no >= 8), (bc - oc) / np.maximum(bc, 0.05), 0.0)
    x_score = np.clip(x_score, -1.0, 1.0)
    opens = {}
    if open_cols:
        O = oacc.sums()
        nar = mc.open_narrow
        wo_sum = np.where(nar, O[o_w], S[k_w])
        oink = np.where(nar, O[o_ink], S[k_cover])
        ocol = np.where(nar, O[o_col], S[k_fcol])
        opens = {"open_share": wo_sum / wsum,
                 "open_cover": np.where(wo_sum > 0, oink / np.maximum(wo_sum, 1e-9), 0.0),
                 "open_coloured": np.where(wo_sum > 0, ocol / np.maximum(wo_sum, 1e-9), 0.0)}
    if lines:
        lines = {"ink_z": S[k["z"]] / np.maximum(n, 1), "z3_share": S[k["z3"]] / np.maximum(n, 1),
                 "diag_z": S[k["zb"]] / np.maximum(nb, 1), "sector_z": S[k["zo"]] / np.maximum(no, 1)}
        lines.update(line_out)
    else:
        lines = None
    return _Features(n, fcol, fdark, cover, line_cover, hue, purity, chroma, x_score, bc, oc,
                     (nb1 >= 4) & (nb2 >= 4) & (no >= 8), faint_cover, faint_line,
                     np.minimum(bc1, bc2), np.maximum(bc1, bc2), coherence,
                     np.minimum(k["dl1"], k["dl2"]), np.maximum(k["dl1"], k["dl2"]),
                     k["fdl"].max(axis=1), bare_core, faint_tint, faint_hue_r, ink_drop, lines=lines,
                     **opens)


def _faint_and_hue(C: np.ndarray, L: np.ndarray, a: np.ndarray, b: np.ndarray, ok: np.ndarray,
                   th: Mapping[str, float], rpix: np.ndarray, roi_shape: tuple[int, int]):
    """Faint texels (above this photo's faint chroma or darkness level, with at least three
    faint neighbours) and every pixel's hue (degrees, 0..360) with its cosine and sine: what
    :func:`_measure` reads besides its texel counts (apart so that it can run beside them)."""
    H, W = roi_shape
    faint = ((C > th["chroma_faint"]) | (L < th["dark_l_faint"])) & ok
    img = np.zeros(H * W, np.uint8)
    img[rpix[faint]] = 1
    fsum = cv2.boxFilter(img.reshape(H, W), -1, (3, 3), normalize=False).reshape(-1)[rpix]
    faint &= fsum >= 4
    h = _hue360(a, b)
    rad = np.radians(h)
    return faint, h, np.cos(rad), np.sin(rad)

def _ink_gradients(C: np.ndarray, L: np.ndarray, ok: np.ndarray, th: Mapping[str, float],
                   rpix: np.ndarray, roi_shape: tuple[int, int], *, lines: bool):
    """The gradient of the ink strength at the region pixels ``(gx, gy)`` and, with
    ``lines``, the ink contrast ``zp`` (else None): what :func:`_measure` reads of the pixels'
    neighbourhoods besides the texel counts (apart so that it can run beside them)."""
    H, W = roi_shape
    # Stroke orientation coherence: hatching, zigzag and back-and-forth fills lay strokes in
    # one direction; a cross (two directions) or a scribbled-out region (many) does not.
    # Measured on the gradient of the ink strength (chroma + darkness) inside the region.
    strength = np.zeros(H * W, np.float32)
    strength[rpix] = np.where(ok, C + np.maximum(th["paper_l"] - L, 0.0), 0.0)
    sg = cv2.GaussianBlur(strength.reshape(H, W), (0, 0), 1.0)
    gx = cv2.Sobel(sg, cv2.CV_32F, 1, 0, ksize=3).reshape(-1)[rpix]
    gy = cv2.Sobel(sg, cv2.CV_32F, 0, 1, ksize=3).reshape(-1)[rpix]
    zp = None
    if lines:
        # ink contrast of every pixel in units of this photo's paper noise (chroma above the
        # paper's, or darker than it; the larger), for the straight-line search and its kin
        c_sd = max(1.0, float(th.get("paper_chroma_sd", 1.0)))
        l_sd = max(0.5, float(th.get("paper_l_sd", 1.0)))
        zp = np.maximum((C - float(th.get("paper_chroma", 0.0))) / c_sd,
                        (float(th["paper_l"]) - L) / l_sd)
        zp = np.where(ok, np.clip(zp, -3.0, _Z_CLIP), 0.0)
    return gx, gy, zp

def _measure_more(acc: _RegionSums, model: SheetModel, ok: np.ndarray, w: np.ndarray,
                  ink: np.ndarray, faint: np.ndarray, gx: np.ndarray, gy: np.ndarray, *,
                  consts: _ModelConstants | None = None):
    """The second third of :func:`_measure`'s per-region sums (stroke coherence and the
    diagonals; :func:`_measure_rest` takes the rest), queued on ``acc`` after its first rows
    and summed with them. Apart so that the straight-line search and the rest can run beside
    it (they read none of this). Returns ``(S, k)``: the sums, and ``k`` their rows by name
    plus the diagonal lengths ``dl1``, ``dl2`` and ``fdl`` (R, 2)."""
    R = len(model.region_ids)
    k: dict = {}
    # (the same centre weights over the readable pixels)
    k["jr"] = acc.add(w * (gx * gx - gy * gy))
    k["ji"] = acc.add(w * (2 * gx * gy))
    k["jn"] = acc.add(w * (gx * gx + gy * gy))
    mc = consts or _model_constants(model)
    b1, b2 = mc.band1, mc.band2
    k["nb1"], k["nb2"] = acc.add(b1 & ok), acc.add(b2 & ok)
    k["no"] = acc.add(model.off & ok)
    k["bc1"], k["bc2"] = acc.add(b1 & ink), acc.add(b2 & ink)
    k["bc"], k["oc"] = acc.add((b1 | b2) & ink), acc.add(model.off & ink)
    # share of each diagonal's length that carries ink
    sel, db = mc.diag_sel, mc.diag_bin
    dhit = np.bincount(db, ink[sel], R * 16) > 0
    dseen = np.bincount(db, ok[sel], R * 16) > 0
    dh = (dhit & dseen).reshape(R, 2, 8).sum(axis=2)
    ds = dseen.reshape(R, 2, 8).sum(axis=2)
    dlen = np.where(ds >= 3, dh / np.maximum(ds, 1), 0.0)
    k["dl1"], k["dl2"] = dlen[:, 0], dlen[:, 1]
    fhit = np.bincount(db, faint[sel], R * 16) > 0
    k["fdl"] = np.where(ds >= 3, (fhit & dseen).reshape(R, 2, 8).sum(axis=2) / np.maximum(ds, 1), 0.0)
    return acc.sums(), k


def _measure_rest(acc: _RegionSums, model: SheetModel, th: Mapping[str, float], ok: np.ndarray,
                  w: np.ndarray, ink: np.ndarray, faint: np.ndarray, C: np.ndarray, L: np.ndarray,
                  cos_h: np.ndarray, sin_h: np.ndarray, rpix: np.ndarray,
                  roi_shape: tuple[int, int], zp: np.ndarray | None):
    """The rest of :func:`_measure_more`'s sums (bare cores, faint tint, darkness and, with
    ``zp``, the ink contrast) on their own accumulator ``acc`` (``_RegionSums.sibling``), so
    that they can be taken on another thread: ``(S, k)``, the sums and their rows by name."""
    H, W = roi_shape
    k: dict = {}
    # Bare cores: unmarked paper at least ~0.6 mm from any ink and from the edge of what can
    # be seen. Crossing out (an X, a slash, a tick) leaves wide bare patches between its
    # strokes wherever they run; colouring in, even with gaps between hatching strokes, does
    # not. Independent of where the strokes lie, so it works where the sectors between the
    # diagonals are hidden by print (small or round regions).
    bare = np.zeros(H * W, np.uint8)
    bare[rpix[ok & ~ink]] = 1
    bare = bare.reshape(H, W)
    core_px = 0.5 * model.dpi / 25.4
    # (the pixels whose chamfer distance to the nearest 0 is at least core_px, that is whose
    # chamfer ball holds no 0: an erosion by that ball, a fifth of the distance transform's
    # time; see _chamfer_ball. Outside the window counts as no 0, as for the transform)
    core = cv2.erode(bare, _chamfer_ball(core_px), borderType=cv2.BORDER_CONSTANT,
                     borderValue=1).reshape(-1)[rpix]
    k["core"] = acc.add(ok & (core > 0))
    # Faint tint: texels above this photo's faint chroma level, and how well their hues agree
    # (1 = one hue). A pale pencil leaves one hue over the area; print fringes, JPEG colour
    # bleed and chromatic aberration leave mixed hues.
    ftint = faint & (C > th["chroma_faint"])
    k["ftint"] = acc.add(w * ftint)
    wt = np.where(ftint, C, 0.0)
    k["tx"], k["ty"], k["wt"] = acc.add(wt * cos_h), acc.add(wt * sin_h), acc.add(wt)
    # how dark the marked texels are (paper L* minus theirs, mean over ink): graphite and a
    # heavy hand are dark, a pale pencil or a shadow is not
    k["drop"] = acc.add(np.where(ink, np.maximum(th["paper_l"] - L, 0.0), 0.0))
    k["ink"] = acc.add(ink)
    if zp is not None:
        k["z"], k["z3"] = acc.add(zp), acc.add(ok & (zp > 3.0))
        k["zb"], k["zo"] = (acc.add(np.where(_model_constants(model).banded, zp, 0.0)),
                            acc.add(np.where(model.off, zp, 0.0)))
    return acc.sums(), k


@functools.lru_cache(maxsize=8)
def _chamfer_ball(radius: float) -> np.ndarray:
    """The offsets whose distance from a pixel, as ``cv2.distanceTransform(..., cv2.DIST_L2,
    3)`` measures it (the 3 x 3 chamfer metric), is below ``radius``: a symmetric uint8
    kernel (1 inside). ``distanceTransform(a) >= radius`` at a pixel exactly when no 0 of
    ``a`` lies at one of these offsets (the transform is the least chamfer distance to a 0,
    and the ball is measured by the same transform, from a lone 0), so an erosion of a 0/1
    image by this kernel gives the same pixels. Read-only."""
    r = int(math.ceil(radius / 0.9)) + 2  # (a step costs at least 0.955 px in this metric)
    one = np.ones((2 * r + 1, 2 * r + 1), np.uint8)
    one[r, r] = 0
    inside = cv2.distanceTransform(one, cv2.DIST_L2, 3) < radius
    ys, xs = np.nonzero(inside)
    m = int(max(np.abs(ys - r).max(), np.abs(xs - r).max()))
    ball = np.ascontiguousarray(inside[r - m:r + m + 1, r - m:r + m + 1], np.uint8)
    ball.setflags(write=False)
    return ball


#: Ink contrast per pixel is clipped here (noise units): one very dark texel must not make a
#: strip look like a line.
_Z_CLIP = 8.0
#: A strip is a candidate line only with at least this length (mm) of readable pixels in it.
_STRIP_MIN_MM = 2.5
#: An along-line bin (1 mm) "carries the line" at this mean contrast (noise units).
_ALONG_Z = 1.5


def _strip_sums(values: np.ndarray, model: SheetModel) -> np.ndarray:
    """Sum a (Pa,) column (one value per pixel of ``model.strip_pos``) over every strip of
    every orientation: (R * _LINE_ANGLES * _STRIPS,) float64, strip index as in
    ``SheetModel.strip_bin``. One ``reduceat`` over the pixel copies sorted by strip (the
    same sums as a weighted ``bincount`` of ``strip_bin``, to rounding)."""
    src, starts, nz = model.strip_sum_idx
    out = np.zeros(len(model.region_ids) * _LINE_ANGLES * _STRIPS)
    if starts.size:
        # (take: the same gather as values[src], ~15 % cheaper for a flat index)
        out[nz] = np.add.reduceat(np.take(np.asarray(values, np.float64), src), starts)
    return out


def _lines_of(grads, ok: np.ndarray, model: SheetModel) -> dict[str, np.ndarray]:
    """:func:`_measure_lines` on :func:`_ink_gradients`' ``(gx, gy, zp)``."""
    gx, gy, zp = grads
    return _measure_lines(zp, ok, model, gx, gy)


def _measure_lines(zp: np.ndarray, ok: np.ndarray, model: SheetModel, gx: np.ndarray,
                   gy: np.ndarray) -> dict[str, np.ndarray]:
    """Straight strokes in each area region: the best straight line, the best second line
    across it, and how the ink's edges are oriented.

    A line integral (the mean contrast over a 1 mm strip) sees a faint thin stroke that no
    single pixel shows above the paper noise: a light graphite slash or X over a printed
    symbol. A fill raises every strip alike; a crossing-out raises one or two.

    Parameters
    ----------
    zp : (P,) ndarray
        Ink contrast per pixel in paper-noise units (0 where not ``ok``).
    ok : (P,) bool ndarray
    model : SheetModel
    gx, gy : (P,) ndarray
        Gradient of the blurred ink strength at the region pixels.

    Returns
    -------
    dict of (R,) float64 arrays (0 for connections)
        ``line_z`` (mean contrast on the best strip), ``line_contrast`` (that minus the rest
        of the region), ``line_length`` (share of its 1 mm bins along the strip that carry the
        line), ``line_span`` (readable length of the strip over the region's diameter),
        ``line_offset`` (its distance from the centre over the region's radius),
        ``line_diag`` (its angle to the nearer diagonal, 0..1 for 0..45 deg), ``line2_z``,
        ``line2_contrast``, ``line2_length`` (the best strip at least 45 deg from the first),
        ``line_rest`` (mean contrast off both strips), ``orient_top`` and ``orient_second``
        (share of the edge energy in the strongest 45 deg of orientations, and in the
        strongest 45 deg at least 67.5 deg from it).
    """
    R = len(model.region_ids)
    K, NB = _LINE_ANGLES, _STRIPS
    keys = ("line_z", "line_contrast", "line_length", "line_span", "line_offset", "line_diag",
            "line2_z", "line2_contrast", "line2_length", "line_rest", "orient_top",
            "orient_second")
    out = {k: np.zeros(R) for k in keys}
    if model.strip_bin is None or model.strip_pos is None or model.strip_pos.size == 0:
        return out
    pos, sbin, w = model.strip_pos, model.strip_bin, model.strip_px
    za = zp[pos]
    nbin = R * K * NB
    ssum = _strip_sums(za, model)
    oka = ok[pos]
    cnt = model.strip_count if oka.all() else _strip_sums(oka.astype(np.float64), model)
    k_mm = model.dpi / 25.4
    # (the search runs on every other pixel, SheetModel.strip_pos: half a strip's pixels)
    nmin = 0.5 * _STRIP_MIN_MM * k_mm * w
    mean = np.where(cnt >= nmin, ssum / np.maximum(cnt, 1), -np.inf).reshape(R, K, NB)
    best_b = mean.argmax(axis=2)  # (R, K)
    best_k = np.take_along_axis(mean, best_b[..., None], axis=2)[..., 0]  # (R, K)
    k1 = best_k.argmax(axis=1)
    r_idx = np.arange(R)
    has = np.isfinite(best_k[r_idx, k1])
    g1 = (r_idx * K + k1) * NB + best_b[r_idx, k1]
    s1, c1 = ssum[g1], cnt[g1]
    # the region's totals over the same pixels: every pixel lies in one strip per orientation
    zs = ssum.reshape(R, K, NB)[:, 0].sum(axis=1)
    nn = np.asarray(cnt).reshape(R, K, NB)[:, 0].sum(axis=1)
    m1 = s1 / np.maximum(c1, 1)
    out["line_z"] = np.where(has, m1, 0.0)
    out["line_contrast"] = np.where(has, m1 - (zs - s1) / np.maximum(nn - c1, 1), 0.0)
    lbl = model.label[pos]
    dxy = model.strip_dxy
    ext = np.maximum(model.strip_ext, w)
    # where the line lies: offset from the centre and angle to the nearer diagonal
    out["line_offset"] = np.where(has, np.abs((best_b[r_idx, k1] + 0.5 - NB / 2) * w) / ext, 0.0)
    ang = np.degrees(k1 * (math.pi / K)) % 90.0
    out["line_diag"] = np.where(has, np.abs(ang - 45.0) / 45.0, 0.0)
    ar = np.arange(pos.size)

    def strip_offsets(g, kk):
        # how many strips each pixel lies from its region's strip g (orientation kk)
        kp = kk[lbl]
        return sbin[kp, ar] - g[lbl], kp

    def strip_pixels(d, spread=0):
        # pixels on the strip (offsets d), or within `spread` strips of it
        return np.flatnonzero(((d <= spread) & (d >= -spread)) & oka)

    def length(on, kp, valid):
        # share of the strip's 1 mm bins along its line that carry the line, and how many
        # bins it has (its readable length)
        th = kp[on] * (math.pi / K)
        t = dxy[on, 0] * np.cos(th) + dxy[on, 1] * np.sin(th)
        ab = np.clip(np.floor(t / k_mm + _ALONG / 2), 0, _ALONG - 1).astype(np.int64)
        idx = lbl[on].astype(np.int64) * _ALONG + ab
        bs = np.bincount(idx, za[on], R * _ALONG)
        bc = np.bincount(idx, minlength=R * _ALONG)
        seen = bc >= 0.25 * w  # half a mm of the strip's width seen in that bin (every other px)
        hit = seen & (bs >= _ALONG_Z * np.maximum(bc, 1))
        nseen = seen.reshape(R, _ALONG).sum(axis=1)
        return (np.where(valid, hit.reshape(R, _ALONG).sum(axis=1) / np.maximum(nseen, 1), 0.0),
                nseen)

    # (the first strip's offsets serve its pixels and, below, its neighbours')
    d1, kp1 = strip_offsets(g1, k1)
    on1 = strip_pixels(d1)
    out["line_length"], nseen = length(on1, kp1, has)
    out["line_span"] = np.where(has, nseen * k_mm / (2 * ext), 0.0)
    # Second line: the best strip at least 45 degrees from the first, without the pixels of
    # the first strip and its two neighbours (a strip across a single slash would otherwise
    # pick up where it crosses it, and the edges of a slash that falls between two strips)
    wide1 = strip_pixels(d1, spread=1)
    b_on = sbin[:, wide1].reshape(-1)
    ssum2 = ssum - np.bincount(b_on, np.tile(za[wide1], K), nbin)
    cnt2 = cnt - np.bincount(b_on, minlength=nbin)
    mean2 = np.where(cnt2 >= nmin, ssum2 / np.maximum(cnt2, 1), -np.inf).reshape(R, K, NB)
    dk = np.abs(np.arange(K)[None, :] - k1[:, None])
    dk = np.minimum(dk, K - dk)
    mean2[dk < K // 4] = -np.inf
    best_b2 = mean2.argmax(axis=2)
    best_k2 = np.take_along_axis(mean2, best_b2[..., None], axis=2)[..., 0]
    k2 = best_k2.argmax(axis=1)
    has2 = has & np.isfinite(best_k2[r_idx, k2])
    g2 = (r_idx * K + k2) * NB + best_b2[r_idx, k2]
    s2, c2 = ssum2[g2], cnt2[g2]
    m2 = s2 / np.maximum(c2, 1)
    rest12 = (zs - s1 - s2) / np.maximum(nn - c1 - c2, 1)
    out["line2_z"] = np.where(has2, m2, 0.0)
    out["line2_contrast"] = np.where(has2, m2 - rest12, 0.0)
    out["line_rest"] = np.where(has, rest12, 0.0)
    d2, kp2 = strip_offsets(g2, k2)
    on2 = strip_pixels(d2)
    on2 = on2[~np.isin(on2, wide1, assume_unique=True)]
    out["line2_length"], _ = length(on2, kp2, has2)
    # orientation of the ink's edges (double-angle histogram, 8 bins of 22.5 deg): hatching
    # is one orientation, an X two about 90 deg apart, a scribble all of them
    gxa, gya = gx[pos], gy[pos]
    e = gxa * gxa + gya * gya
    strong = e > 1e-6
    gxs, gys = gxa[strong], gya[strong]  # (each gathered once)
    phi = np.arctan2(2 * gxs * gys, gxs ** 2 - gys ** 2)
    ob = ((phi + math.pi) * (8 / (2 * math.pi))).astype(np.int64) % 8
    hist = np.bincount(lbl[strong].astype(np.int64) * 8 + ob, e[strong], R * 8).reshape(R, 8)
    tot = np.maximum(hist.sum(axis=1), 1e-9)
    pair = hist + np.roll(hist, -1, axis=1)  # 45 deg windows
    o1 = pair.argmax(axis=1)
    do = np.abs(np.arange(8)[None, :] - o1[:, None])
    do = np.minimum(do, 8 - do)
    out["orient_top"] = pair[r_idx, o1] / tot
    out["orient_second"] = np.where(do >= 3, pair, 0.0).max(axis=1) / tot
    return out


#: Every mark a region can take, in the order the learned reader's classes use.
MARKS = ("empty",) + tuple(PENCIL_COLOURS) + ("crossed", "written")

#: Photo-level measurements the learned reader sees (``photo_features`` of
#: :func:`classify_sheet`), with the value assumed when a caller gives none (a sound photo).
PHOTO_FEATURE_DEFAULTS = {
    "registration": 1.0,      # vision.pipeline.photo_confidence parts (0..1)
    "resolution": 1.0,
    "locate": 1.0,
    "residual_px": 0.3,       # print misalignment after refinement, px at the read dpi
    "photo_px_per_frame_px": 2.0,
    "shading_range": 1.2,     # vision.light: brightest / darkest illumination over the paper
    "wb_blue_over_red": 1.0,  # white balance gains: < 1 under warm light
    "paper_coverage": 0.9,
}

#: Ink clear of the wide guard around print (``SheetModel.open_px``, session 18): the share of
#: the region's (centre-weighted) pixels that lie there, and the ink and colour coverage over
#: them (0 where there are none). On dev corpus 25000's easy and typical Reefs photos, empty
#: treasures (a printed chest and number fill the circle) had colour on 16 % of the pixels
#: within 0.25 mm of print and 1.3 % of those 1-1.5 mm away, filled ones ~90 % at every
#: distance: colour fringes along printed lines, which made the readers unsure of 81 % of the
#: empty treasures. Appended last; measured on every photo since session 20 (the hand
#: reader's vote on mostly-print regions reads them, ``_open_votes``).
OPEN_FEATURES = ("open_share", "open_cover", "open_coloured")

#: The per-region feature matrix (:func:`region_feature_matrix`), one column per name. Every
#: column is a physical measurement normalised by this photo (coverage shares, lengths as
#: shares of a diagonal, chroma and darkness in units of this photo's paper noise, hue
#: distances in units of the pencils' calibrated spreads), a property of the region's shape,
#: the hand reader's own probabilities, or a photo-level quality figure; never an id.
FEATURE_NAMES = (
    # the region: what it allows and how much of it can be read
    "is_line", "allows_colour", "allows_crossed", "number_box", "log_outline_mm2",
    "usable_share", "log_pixels", "x_ok",
    # ink on it
    "coverage", "coloured", "dark", "coloured_share", "length_coverage", "faint_coverage",
    "faint_length", "faint_tint", "faint_hue_agreement", "purity", "coherence",
    "chroma_over_noise", "chroma_over_threshold", "ink_drop_over_noise", "ink_drop_l",
    # structure (crossing out against colouring in)
    "x_score", "x_band", "sector_coverage", "diag_min", "diag_max", "x_length",
    "slash_length", "faint_slash_length", "bare_core",
    # ink just outside the region (SheetModel.halo_pix): along its extended diagonals (all
    # ink, graphite) and elsewhere around it
    "halo_diag", "halo_dark_diag", "halo_off",
    # ink contrast in paper-noise units (vision.marks._measure_lines): over the region, its
    # diagonal bands and the sectors between, the best straight 1 mm strip and the best one
    # across it, and the orientations of the ink's edges
    "ink_z", "z3_share", "diag_z", "sector_z", "line_z", "line_contrast", "line_length",
    "line_span", "line_offset", "line_diag", "line2_z", "line2_contrast", "line2_length",
    "line_rest", "orient_top", "orient_second",
    # hue against this photo's calibrated pencils (signed, in effective spreads), the best
    # and second-best distance, and whether the prior palette names the hue otherwise
    "z_orange", "z_red", "z_blue", "z_green", "z_purple", "d_best", "d_second",
    "prior_disagrees", "hue_noise_deg",
    # the hand reader (vision.marks._decide), before any photo-level cap
    "hand_empty", "hand_orange", "hand_red", "hand_blue", "hand_green", "hand_purple",
    "hand_crossed", "hand_written", "hand_confidence", "hand_p_marked", "hand_p_cross",
    "hand_p_grey", "hand_fit",
    # the photo
    "paper_chroma_sd", "paper_l_sd", "photo_registration", "photo_resolution", "photo_locate",
    "photo_residual_px", "photo_px_per_frame_px", "photo_shading_range", "photo_wb_blue_over_red",
    "photo_paper_coverage",
    # pencil in a ring along the region's outline (vision._evidence): appended last, so that
    # every model made for the shorter list reads its columns where they were
) + EVIDENCE_FEATURES + GUIDE_FEATURES + X_FEATURES + OPEN_FEATURES
# (then pencil on connections' guides, vision._guide; then the cross's arms in the ring,
# vision._evidence.x_features; then the ink clear of the wide print guard, OPEN_FEATURES)

#: The columns of ``FEATURE_NAMES`` measured by the straight-line search and its kin
#: (``_measure_lines``); left 0 when the model in use reads none of them.
LINE_FEATURES = frozenset(("ink_z", "z3_share", "diag_z", "sector_z", "line_z", "line_contrast",
                           "line_length", "line_span", "line_offset", "line_diag", "line2_z",
                           "line2_contrast", "line2_length", "line_rest", "orient_top",
                           "orient_second"))


def region_feature_matrix(model: SheetModel, f: _Features, regions, pal: Palette, prior: Palette,
                          th: Mapping[str, float], hand: Mapping[str, RegionReading],
                          internals, *, photo_features: Mapping[str, float] | None = None,
                          evidence: np.ndarray | None = None,
                          guide: np.ndarray | None = None,
                          xcols: np.ndarray | None = None) -> np.ndarray:
    """The learned reader's input: one row per readable region, columns ``FEATURE_NAMES``.

    Parameters
    ----------
    model : SheetModel
    f : _Features
        From ``_measure`` on this photo.
    regions : sequence of Region
        ``model.region_ids`` resolved, same order.
    pal, prior : Palette
        The palette calibrated on this photo, and the prior it started from.
    th : mapping
        This photo's thresholds (``_photo_thresholds``).
    hand : mapping of region id -> RegionReading
        The hand reader's readings (no photo-level cap).
    internals : sequence of dict
        ``_decide``'s intermediate probabilities, per region.
    photo_features : mapping, optional
        Keys of ``PHOTO_FEATURE_DEFAULTS``; missing keys take the default.
    evidence : (R, len(EVIDENCE_FEATURES)) ndarray, optional
        ``vision._evidence.evidence_features`` of this photo (default: those columns are 0).
    guide : (R, len(GUIDE_FEATURES)) ndarray, optional
        ``vision._guide.guide_features`` of this photo (default: those columns are 0).
    xcols : (R, len(X_FEATURES)) ndarray, optional
        ``vision._evidence.x_features`` of this photo (default: those columns are 0).

    Returns
    -------
    (R, len(FEATURE_NAMES)) float32 ndarray
    """
    R = len(regions)
    ph = dict(PHOTO_FEATURE_DEFAULTS)
    for k, v in (photo_features or {}).items():
        if k in ph and v is not None and np.isfinite(float(v)):
            ph[k] = float(v)
    k_mm = model.dpi / 25.4
    c_sd = max(1.0, float(th.get("paper_chroma_sd", 1.0)))
    l_sd = max(0.5, float(th.get("paper_l_sd", 1.0)))
    outline = _outline_area(model)
    X = np.zeros((R, len(FEATURE_NAMES)), np.float32)
    col = {n: j for j, n in enumerate(FEATURE_NAMES)}

    def put(name, values):
        X[:, col[name]] = values

    allowed = [set(r.marks) for r in regions]
    put("is_line", model.is_line[:R])
    put("allows_colour", [bool(a & set(PENCIL_COLOURS)) for a in allowed])
    put("allows_crossed", ["crossed" in a for a in allowed])
    put("number_box", [("written" in a and not (a & set(PENCIL_COLOURS))) for a in allowed])
    put("log_outline_mm2", np.log1p(outline / k_mm ** 2))
    put("usable_share", _clear_share(f, model))
    put("log_pixels", np.log1p(f.n))
    put("x_ok", f.x_ok)
    put("coverage", f.cover)
    put("coloured", f.coloured)
    put("dark", f.dark)
    put("coloured_share", np.where(f.cover > 0, f.coloured / np.maximum(f.cover, 1e-9), 0.0))
    put("length_coverage", f.line_cover)
    put("faint_coverage", f.faint_cover)
    put("faint_length", f.faint_line)
    put("faint_tint", f.faint_tint)
    put("faint_hue_agreement", f.faint_hue_r)
    put("purity", f.purity)
    put("coherence", f.coherence)
    put("chroma_over_noise", np.minimum(f.chroma / c_sd, 200.0))
    put("chroma_over_threshold", f.chroma / max(float(th["chroma"]), 1e-3))
    put("ink_drop_over_noise", np.minimum(f.ink_drop / l_sd, 200.0))
    put("ink_drop_l", f.ink_drop)
    put("x_score", f.x_score)
    put("x_band", f.band_cov)
    put("sector_coverage", f.off_cov)
    put("diag_min", f.diag_min)
    put("diag_max", f.diag_max)
    put("x_length", f.dlen_min)
    put("slash_length", f.dlen_max)
    put("faint_slash_length", f.faint_dlen_max)
    put("bare_core", f.bare_core)
    for name in ("halo_diag", "halo_dark_diag", "halo_off"):
        v = getattr(f, name)
        if v is not None:
            put(name, v)
    if f.open_share is not None:
        put("open_share", f.open_share)
        put("open_cover", f.open_cover)
        put("open_coloured", f.open_coloured)
    for name, v in (f.lines or {}).items():
        # (connections are not searched for lines: their columns stay 0)
        put(name, np.where(model.is_line[:R], 0.0, v))
    hue_noise = np.degrees(3.0 * c_sd / np.maximum(f.chroma, 1e-3))
    has_hue = f.chroma > 0
    z = np.zeros((R, len(PENCIL_COLOURS)))
    for j, c in enumerate(PENCIL_COLOURS):
        pc = pal.colour(c)
        z[:, j] = hue_diff(f.hue, pc.hue_deg) / np.hypot(pc.hue_spread_deg, hue_noise)
        put(f"z_{c}", np.where(has_hue, np.clip(z[:, j], -10.0, 10.0), 0.0))
    dz = np.sort(np.abs(z), axis=1)
    put("d_best", np.where(has_hue, np.minimum(dz[:, 0], 10.0), 10.0))
    put("d_second", np.where(has_hue, np.minimum(dz[:, 1], 10.0), 10.0))
    if prior is not pal:
        zp = np.stack([np.abs(hue_diff(f.hue, prior.colour(c).hue_deg)) / prior.colour(c).hue_spread_deg
                       for c in PENCIL_COLOURS], axis=1)
        put("prior_disagrees", has_hue & (np.argmin(zp, axis=1) != np.argmin(np.abs(z), axis=1)))
    put("hue_noise_deg", np.where(has_hue, np.minimum(hue_noise, 180.0), 180.0))
    for i, r in enumerate(regions):
        rd = hand[r.id]
        for m, p in rd.alternatives:
            X[i, col[f"hand_{m}"]] = p
        it = internals[i]
        X[i, col["hand_confidence"]] = rd.confidence
        X[i, col["hand_p_marked"]] = it["p_marked"]
        X[i, col["hand_p_cross"]] = it["p_cross"]
        X[i, col["hand_p_grey"]] = it["p_grey"]
        X[i, col["hand_fit"]] = it["fit"]
    put("paper_chroma_sd", c_sd)
    put("paper_l_sd", l_sd)
    put("photo_registration", ph["registration"])
    put("photo_resolution", ph["resolution"])
    put("photo_locate", ph["locate"])
    put("photo_residual_px", min(ph["residual_px"], 10.0))
    put("photo_px_per_frame_px", min(ph["photo_px_per_frame_px"], 10.0))
    put("photo_shading_range", min(ph["shading_range"], 10.0))
    put("photo_wb_blue_over_red", ph["wb_blue_over_red"])
    put("photo_paper_coverage", ph["paper_coverage"])
    if evidence is not None:
        X[:, col[EVIDENCE_FEATURES[0]]:col[EVIDENCE_FEATURES[-1]] + 1] = evidence
    if guide is not None:
        X[:, col[GUIDE_FEATURES[0]]:col[GUIDE_FEATURES[-1]] + 1] = guide
    if xcols is not None:
        X[:, col[X_FEATURES[0]]:col[X_FEATURES[-1]] + 1] = xcols
    return X


def _measure_halo(lab: np.ndarray, model: SheetModel, th: Mapping[str, float],
                  valid: np.ndarray | None) -> dict[str, np.ndarray]:
    """Ink around each area region (SheetModel.halo_pix): on its extended diagonals (a
    crossing-out running on) and elsewhere (a neighbour's overshoot, a careless fill). The
    ``_Features`` fields ``halo_diag``, ``halo_off`` and ``halo_dark_diag``."""
    R = len(model.region_ids)
    L, a, b = lab[:, 0], lab[:, 1], lab[:, 2]
    C = np.hypot(a, b)
    col = (C > th["chroma"]) & (C > 0.3 * np.maximum(100.0 - L, 0.0))
    dark = (L < th["dark_l"]) & ~col
    ok = np.ones(L.size, bool) if valid is None else np.asarray(valid, bool).reshape(-1)[model.halo_pix]
    ink = (col | dark) & ok
    lbl, dg = model.halo_label, model.halo_diag

    def count(sel):
        # (the labels of the selected pixels counted: the same whole numbers as a bincount
        # weighted by the 0/1 selection, a quarter of its time; their quotients below are
        # the same float64 values)
        return np.bincount(lbl[sel], minlength=R)

    nd = np.maximum(count(dg & ok), 1)
    no = np.maximum(count(~dg & ok), 1)
    return {"halo_diag": count(ink & dg) / nd,
            "halo_off": count(ink & ~dg) / no,
            "halo_dark_diag": count(dark & ok & dg) / nd}


def classify_sheet(linear: np.ndarray, model: SheetModel, *, palette: Palette | None = None,
                   valid: np.ndarray | None = None, review_threshold: float = REVIEW_THRESHOLD,
                   empty_cover: float = 0.06, cover_scale: float = 0.012,
                   written_cover: float = 0.025, line_cover: float = 0.3,
                   line_scale: float = 0.05,
                   x_threshold: float = 0.45, x_scale: float = 0.07,
                   min_pixels: int = 10, photo_confidence: float = 1.0,
                   learned="default", photo_features: Mapping[str, float] | None = None,
                   keep_matrix: bool = False, left_out: frozenset = frozenset(),
                   last_checks: tuple | None = None) -> SheetMarks:
    """Classify every readable region of a light-normalised, rectified sheet.

    Parameters
    ----------
    linear : NormalisedLight or (H, W, 3) float32 ndarray
        Output of :func:`vision.light.normalise_light` (or its ``linear`` image: paper = 1),
        in the model's frame.
    model : SheetModel
        From :func:`build_sheet_model` at the same dpi.
    palette : Palette, optional
        Prior pencil palette (default: ``calibration/palettes/default.json``); it is calibrated
        on this photo before use.
    valid : (H, W) bool ndarray, optional
        Pixels that came from inside the photo.
    review_threshold : float
        Readings below this confidence get ``review=True``.
    empty_cover, cover_scale : float
        Coverage at which "empty" and "marked" are equally likely, and the width of that
        transition (the logistic scale): coverage 5 scales from the threshold is ~99 % sure.
    written_cover : float
        Coverage threshold for regions that take only ``written`` (handwriting is sparse).
    line_cover, line_scale : float
        The same for connections, on the share of their length that carries a stroke.
    x_threshold, x_scale : float
        The same for the X structure score (crossed against filled).
    min_pixels : int
        Regions with fewer usable pixels are read but always flagged.
    photo_confidence : float
        The photo as a whole (registration residual, resolution, locator: see
        ``vision.pipeline.photo_confidence``). Without a learned reader it caps every
        reading's confidence; with one, below the model's ``photo_gate`` nothing on the photo
        is confident, and above it the photo's quality figures are the model's features.
    learned : "default", None or vision.learned.LearnedReader
        The second reader: ``"default"`` is the bundled model (``calibration/models``; the
        hand reader decides alone when none is installed), None the hand reader alone.
    photo_features : mapping, optional
        Photo-level measurements for the learned reader (``PHOTO_FEATURE_DEFAULTS``).
    keep_matrix : bool
        Keep the learned reader's feature matrix on the result (dataset building).
    left_out : frozenset of str
        Regions the palette is not calibrated on. The sheet is read again with the marked
        regions under an object lying on it left out (``Stain.band``) when they were sampled.
    last_checks : tuple, optional
        The last checks' findings (stains, print seen, ink on the print) of a first reading
        of the same light, reused by that second reading instead of measured again.

    Returns
    -------
    SheetMarks
    """
    H, W = model.shape
    if hasattr(linear, "sample"):  # a NormalisedLight: sample only the pixels needed
        shape = linear.image.shape

        def sample(idx, keep=None):
            # (the model's pixel lists: their interpolation taps are computed once per list,
            # vision.light.pixel_taps; each photo only gathers and blends)
            return linear.sample(linear.taps(idx, keep=keep))
    else:
        linear = np.asarray(linear, np.float32)
        shape = linear.shape
        flat = linear.reshape(-1, 3)

        def sample(idx, keep=None):
            return flat[idx if keep is None else idx[keep]]
    if tuple(shape) != (H, W, 3):
        raise ValueError(f"image shape {tuple(shape)} does not match the sheet model {(H, W, 3)}")
    prior = palette or load_palette("default")
    has_halo = model.halo_pix is not None and model.halo_pix.size > 0
    if hasattr(linear, "sample"):
        getattr(linear, "_upsampling", None)  # (built once here, not by two threads at once)

    def paper_and_halo():
        # paper statistics of this photo (subsampled: a few thousand pixels are plenty)
        pidx = model.paper_sample
        keep = None if valid is None else np.asarray(valid, bool).reshape(-1)[pidx]
        th = _photo_thresholds(linear_to_lab(sample(pidx, keep)), prior)
        halo = (_measure_halo(linear_to_lab(sample(model.halo_pix)), model, th, valid)
                if has_halo else None)
        return th, halo

    def regions():
        # Pencil on print multiplies its reflectance: divide the print out.
        # (in place: sample() gives a new array; the same float32 quotients)
        px = sample(model.pix)
        px /= model.divisor
        return linear_to_lab(px)

    # (independent pixels: the paper statistics and the halo's ink beside the regions' Lab
    # when a second core is allowed, vision._geom_threads; the same values either way)
    # The ring's pixels (sampled once for both families) read the photo alone: queued behind
    # the paper statistics, so that the helper thread goes on to them while this thread still
    # converts the regions' pixels (with one thread they are sampled here, now). Measured
    # (session 44, 12 bench photos, two worker processes taking turns): the median read
    # 0.2-1.2 ms shorter than with the ring queued after the regions' Lab, within the noise of
    # such pairs (+-1 ms between runs of 480 pairs).
    first = start(paper_and_halo)
    ring_task = start(lambda: ring_pixels(sample, model, valid=valid))
    lab = beside((first, ring_task), regions)
    th, halo = first.result()
    # (a whole frame inside the photo, the usual case, needs no gather: every pixel is ok)
    ok = (np.ones(model.pix.size, bool) if valid is None or np.asarray(valid, bool).all()
          else np.asarray(valid, bool).reshape(-1)[model.pix])
    from vision.learned import resolve_reader
    learned = resolve_reader(learned)
    # (the ring columns on every photo since session 20: the check for colour traced along
    # the outline reads them, _outline_check; the X columns when the model reads them)
    want_x = keep_matrix or (learned is not None
                             and not set(X_FEATURES).isdisjoint(learned.feature_names))
    # the line features only when the model reads them (or the matrix is kept for a dataset)
    need_lines = keep_matrix or (learned is not None
                                 and not LINE_FEATURES.isdisjoint(learned.feature_names))
    # (the open columns always: the hand reader's vote on mostly-print regions reads them,
    # _open_votes; summed over those regions' pixels alone, they cost little)
    f = _measure(lab, model, th, ok, lines=need_lines, open_cols=True)
    if halo is not None:
        f = replace(f, **halo)
    # The last checks' pixels read the photo alone (the readings are needed only to judge
    # them): offered to the helper thread, which is idle from here until the learned reader's
    # tree walk, when a second core is allowed (vision._geom_threads; the same values either
    # way). Measured (12 bench photos, two threads, an idle core, 96 alternating pairs in one
    # process): classify ~3 ms shorter.
    late = start(lambda: last_checks or (
        _stains(sample, model, th, valid, getattr(linear, "image", None)),
        _print_seen(linear, model, valid), _print_ink_pixels(sample, model, valid)))

    mc = _model_constants(model)
    regions = mc.regions
    # --- calibrate the palette on this photo ---------------------------------------------
    samples = []
    sampled = []  # (the region of each sample)
    for i, r in enumerate(regions):
        fill_like = f.coloured[i] > 0.25 and f.x_score[i] < x_threshold and f.purity[i] > 0.8
        if not fill_like or f.n[i] < min_pixels or r.id in left_out:
            continue
        sampled.append(r.id)
        wgt = 1.0
        if r.kind == "swatch":
            colour = (r.meaning or {}).get("colour")
            if colour in prior.names:
                d = abs(float(hue_diff(f.hue[i], prior.colour(colour).hue_deg)))
                # The swatch is the player saying "this is my red": believe it unless its hue
                # is far outside anything called by that name (then it was coloured with
                # another pencil and is no evidence for its colour).
                label = colour if d <= 60.0 else None
                samples.append(HueSample(float(f.hue[i]), wgt, label))
                continue
        samples.append(HueSample(float(f.hue[i]), wgt, None))
    pal = calibrate_palette(prior, samples)
    # (the previous method's palette: a second opinion on which pencil each hue belongs to)
    pal_gaps = calibrate_palette_by_gaps(prior, samples)

    readings: dict[str, RegionReading] = {}
    internals = []
    hues = {c.name: (c.hue_deg, c.hue_spread_deg) for c in pal.colours}
    # _decide reads one region's values at a time: from Python lists that is several times
    # cheaper than numpy scalars, with the same values
    f_lists = replace(f, **{k: v.tolist() for k, v in vars(f).items() if isinstance(v, np.ndarray)})
    chroma_noise = max(1.0, float(th.get("paper_chroma_sd", 1.0)))
    for i, r in enumerate(regions):
        readings[r.id], it = _decide(r, i, f_lists, pal, review_threshold=review_threshold,
                                 empty_cover=empty_cover, cover_scale=cover_scale,
                                 x_threshold=x_threshold, x_scale=x_scale, min_pixels=min_pixels,
                                 written_cover=written_cover, is_line=mc.is_line[i],
                                 line_cover=line_cover, line_scale=line_scale, prior=prior,
                                 chroma_noise=chroma_noise,
                                 hues=hues)
        internals.append(it)
    ring = ring_task.result()
    ev = evidence_features(sample, model, th=th, palette=pal, valid=valid, pixels=ring)
    matrix = None
    if keep_matrix or learned is not None:
        xc = None  # (only when the model reads them, or the matrix is kept for a dataset)
        if want_x:
            xc = x_features(sample, model, th=th, valid=valid, pixels=ring)
        gd = None
        if keep_matrix or not set(GUIDE_FEATURES).isdisjoint(learned.feature_names):
            gd = guide_features(sample, model, palette=pal, ok=ok, valid=valid)
        matrix = region_feature_matrix(model, f, regions, pal, prior, th, readings, internals,
                                       photo_features=photo_features, evidence=ev, guide=gd,
                                       xcols=xc)
    # (after the feature matrix: the learned reader reads the hand reader's measurements as
    # they were; only the hand reader's vote changes)
    readings = _open_votes(readings, regions, f, empty_cover=empty_cover,
                           cover_scale=cover_scale, review_threshold=review_threshold)
    if learned is not None:
        # Two readers, one verdict (vision.learned.combine): the photo-level cap becomes a
        # gate for unusable photos; the photo's quality figures are features of the model.
        from vision.learned import combine_all, photo_doubt
        probs = _predict_rows(learned, matrix, mc.allowed)
        if learned.combine == "mean":
            # (a format-3 committee reads as one: its rule judges the members' mean, and
            # every member must name the same mark, vision.learned.committee_proba)
            from vision.learned import committee_proba
            member_probs = [probs] + [_predict_rows(m, matrix, mc.allowed)
                                      for m in learned.committee]
            probs, member_marks = committee_proba(member_probs)
        # (the regions under an object lying on the sheet, left out of the calibration, are
        # no sign of how well the photo reads: their colour is the object's, between pencils)
        doubt = photo_doubt(probs if not left_out else
                            probs[[r.id not in left_out for r in regions]])
        # (vision.learned.combine for every region, with what depends on the photo alone
        # worked out once)
        hands = [readings[r.id] for r in regions]
        both_read = combine_all(hands, probs, classes=MARKS,
                                rule=learned.rule, review_threshold=review_threshold,
                                photo_confidence=photo_confidence, doubt=doubt)
        both_read = _confirm_blank(both_read, hands, rule=learned.rule, doubt=doubt,
                                   photo_confidence=photo_confidence,
                                   review_threshold=review_threshold)
        both_read = _confirm_sure(both_read, hands, rule=learned.rule, doubt=doubt,
                                  photo_confidence=photo_confidence,
                                  review_threshold=review_threshold)
        both_read = _learned_floors(both_read, review_threshold=review_threshold)
        if learned.combine == "mean":
            from vision.learned import committee_disagreements
            names = [(learned.meta or {}).get("id") or "model"] + [
                (m.meta or {}).get("id") or f"member {k}" for k, m in enumerate(learned.committee, 2)]
            both_read = committee_disagreements(both_read, member_marks, member_probs, names,
                                                classes=MARKS, review_threshold=review_threshold)
        elif learned.committee:
            # (the second opinions, vision.learned.second_opinions: only the confident
            # readings need them)
            from vision.learned import second_opinions
            sure = np.flatnonzero([not rd.review for rd in both_read])
            if sure.size:
                sub, allowed = matrix[sure], mc.allowed[sure]
                opinions = [(m, _predict_rows(m, sub, allowed)) for m in learned.committee]
                both_read = second_opinions(both_read, hands, sure, opinions, classes=MARKS,
                                            review_threshold=review_threshold,
                                            photo_confidence=photo_confidence, doubt=doubt)
        for r, rd in zip(regions, both_read):
            readings[r.id] = rd
    elif photo_confidence < 1.0:
        for rid, rd in readings.items():
            if rd.confidence > photo_confidence:
                review = photo_confidence < review_threshold or rd.review
                readings[rid] = RegionReading(
                    rd.region_id, rd.kind, rd.mark, float(photo_confidence), review,
                    rd.alternatives, rd.features,
                    rd.reason or ("photo too unreliable (registration/resolution)" if review else ""))
    readings = _outline_check(readings, regions, ev, review_threshold)
    readings = _check_calibration(readings, regions, f, pal, pal_gaps, review_threshold)
    readings = _check_missing_pencils(readings, pal, review_threshold, prior=prior)
    readings = _check_hidden_by_print(readings, regions, f, model, review_threshold)
    calm = np.array([readings[r.id].mark == "empty" and not readings[r.id].review
                     for r in regions], bool)
    stains, seen, ink_pixels = late.result()
    if stains is not None and stains.band is not None and not left_out:
        # An object lying on the sheet (a pencil) shows its own colour on the regions under
        # it: sampled, it moves the pencils' calibration, and every mark of the photo is read
        # against that (session 39: an orange pencil's body over seven Crypts regions moved
        # red 10 -> 38 deg and purple 313 -> 340, and red marks at 355 deg far from the
        # pencil read "purple" at 0.998). Read again, calibrated without them.
        covered = frozenset(r.id for r, b in zip(regions, stains.band) if b) & set(sampled)
        if covered:
            return classify_sheet(
                linear, model, palette=palette, valid=valid, review_threshold=review_threshold,
                empty_cover=empty_cover, cover_scale=cover_scale, written_cover=written_cover,
                line_cover=line_cover, line_scale=line_scale, x_threshold=x_threshold,
                x_scale=x_scale, min_pixels=min_pixels, photo_confidence=photo_confidence,
                learned=learned, photo_features=photo_features, keep_matrix=keep_matrix,
                left_out=covered, last_checks=(stains, seen, ink_pixels))
    # The print-ink fit, offered to the helper thread (idle from here to the end of the read),
    # while this thread measures the last check's strokes through the regions: each region's
    # score depends on that region alone, and the checks before it only flag readings (no mark
    # changes), so the regions it may judge are among those in ``calm`` now; it judges the
    # same ones as before, with the same scores (vision._geom_threads: the same values either
    # way). Measured (session 44, 12 bench photos, two threads, read by read against main in
    # two processes taking turns): the median read 0.5-2.6 ms shorter, within the noise of
    # such pairs (+-1 ms between runs): the two steps' numpy work contends for the GIL.
    marked = np.array([readings[r.id].mark != "empty" for r in regions], bool)
    ink, through = both(lambda: _print_ink_fit(ink_pixels, model, calm),
                        lambda: through_scores(sample, model, th, valid, calm, marked))
    readings = _check_ink_on_print(readings, regions, ink, review_threshold)
    readings = _check_empty_swatches(readings, regions, review_threshold)
    readings = _check_print_seen(readings, regions, seen, review_threshold)
    readings = _check_stains(readings, regions, stains, review_threshold)
    readings = _check_beside_routes(readings, regions, sample, model, th, valid, review_threshold)
    readings = _check_through(readings, regions, sample, model, th, valid, review_threshold,
                              score=through)
    return SheetMarks(readings, pal, {**th, "photo_confidence": float(photo_confidence)}, matrix,
                      tuple(zip(sampled, samples)), tuple(sorted(left_out)),
                      () if stains is None else stains.objects)


#: :func:`_confirm_blank`: an "empty" reading the two readers agree on is confident, though
#: below the rule's thresholds, when the hand reader found no texel of ink, coloured or dark,
#: in the region (BLANK_ZERO) and faint texels on at most BLANK_FAINT_MAX of it (session 34:
#: a printed line's fringe or the paper's grain; before, none), its confidence is at least
#: BLANK_HAND_MIN (0.9933 is its cap for such a region), the learned reader's at least
#: BLANK_LEARNED_MIN, and the photo is clear (its doubt, vision.learned.photo_doubt, at most
#: BLANK_DOUBT_MAX).
BLANK_ZERO = ("coverage", "coloured", "dark")
BLANK_FAINT_MAX = 0.05
BLANK_HAND_MIN = 0.99
BLANK_LEARNED_MIN = 0.98
BLANK_DOUBT_MAX = 0.05
#: (session 35) A region that takes only "written" (a number field) is read by the hand
#: reader's handwriting rule, whose confidence in a blank field is capped at 0.9847: its own
#: floor, which also holds its faint texels under ~0.9 % of the field.
BLANK_HAND_MIN_WRITTEN = 0.984
#: (session 35) :func:`_confirm_sure`: a colour read by both readers at least this sure (the
#: hand reader's floor, the learned reader's), on a photo of doubt at most BLANK_DOUBT_MAX.
#: ("written" is left out: reader-v15's own calibration found no threshold without a
#: confident error for it on photos of doubt 0.015-0.03, see _confirm_sure.)
COLOUR_SURE_HAND = 0.99
COLOUR_SURE_LEARNED = 0.995
SURE_FLOORS = {c: (COLOUR_SURE_HAND, COLOUR_SURE_LEARNED) for c in PENCIL_COLOURS}
#: (session 37) :func:`_confirm_sure` for a mark on one kind of region, ahead of SURE_FLOORS:
#: an empty route (a Reefs connection) both readers read "empty", the hand reader at least
#: ROUTE_EMPTY_HAND sure, the learned reader at least ROUTE_EMPTY_LEARNED (see there why).
ROUTE_EMPTY_HAND = 0.98
ROUTE_EMPTY_LEARNED = 0.98
#: (An empty treasure's floors, hand 0.99 and learned 0.985, were withdrawn in the same session
#: after a fresh confident error: see _confirm_sure.)
SURE_KIND_FLOORS = {("connection", "empty"): (ROUTE_EMPTY_HAND, ROUTE_EMPTY_LEARNED)}


#: (session 41) :func:`_learned_floors`: a confident reading of this mark on this kind of
#: region needs the learned reader at least this sure, whatever the model's rule asks.
LEARNED_FLOORS = {("treasure", "empty"): 0.997}


def _learned_floors(readings: list, *, review_threshold: float) -> list:
    """The readings of :func:`vision.learned.combine_all` (and the confirmations after it), with
    each confident reading of a ``LEARNED_FLOORS`` mark and kind flagged when the learned
    reader is less sure of it than the floor.

    Why (session 41): on the fresh corpus 4500000 a treasure crossed out with one thin, pale
    slash over its print was read "empty" at hand 0.9933 (the hand reader's cap for a
    treasure) and learned 0.995, confident by reader-v15's own thresholds (hand 0.99 and
    learned 0.99, or learned alone 0.995): the hand reader cannot tell a thin crossing on a
    treasure's print from none (session 37), so the learned reader alone stands between such
    a crossing and a confident "empty". Chosen on the learned reader's datasets rebuilt with
    today's code (the 11 spent default corpora 3200000-4400000, the four corpora crossed out
    at rate 0.3 of its recipe, its training and validation corpora: 847,087 regions):
    treasures the hand reader reads "empty" that are not, at learned >= 0.99: 22 (1 on the
    spent corpora, the rest on the crossed-out ones, both painters), the highest at 0.9969;
    none at >= 0.997. Its cost: of the right "empty" treasures the hand reader agrees with on
    easy and typical photos of the spent corpora, 3,422 are at learned >= 0.99 and 996 at
    >= 0.997 (docs/EVALUATION.md, "Session 41"). The reading keeps its mark; a person looks.
    """
    out = readings
    for i, rd in enumerate(readings):
        floor = LEARNED_FLOORS.get((rd.kind, rd.mark))
        if floor is None or rd.review:
            continue
        p = float(rd.features.get("learned_confidence", 0.0))
        if p >= floor:
            continue
        if out is readings:
            out = list(readings)
        out[i] = _flagged(rd, review_threshold,
                          f"low confidence ({rd.mark} {rd.kind}: learned {p:.4f}, under its "
                          f"floor {floor})")
    return out


def _clear_photo(rule, doubt: float, photo_confidence: float) -> bool:
    """Whether a photo is clear enough for :func:`_confirm_blank` and :func:`_confirm_sure`: not
    below the rule's photo gate, and at most ``BLANK_DOUBT_MAX`` (or the rule's own limit, if
    lower) of its regions in doubt."""
    return (doubt <= min(BLANK_DOUBT_MAX, rule.photo_doubt_max)
            and photo_confidence >= rule.photo_gate)


def _confirm_blank(readings: list, hands: list, *, rule, doubt: float, photo_confidence: float,
                   review_threshold: float) -> list:
    """The readings of :func:`vision.learned.combine_all`, with each "empty" flagged for low
    confidence alone confirmed (``review`` False, confidence at least the threshold) when the
    region is blank (see ``BLANK_ZERO``).

    Why (session 33): a box with no coloured, dark or faint texel at all is read "empty" by the
    learned reader at 0.97-0.99, below the 0.99 a clear photo's box asks, so two thirds of the
    flags on easy and typical photos were right "empty" readings of blank regions (session
    31). A mark that the photo hides in a blank-looking region (drawn along the print, under
    glare, under a stain) is left to the checks that follow (an outline traced in colour, ink
    beside the print, print not seen, a region mostly print, a stain): they judge confident
    readings, these included, and the committee's members must still agree. On the spent
    corpora 3200000 and 1280000 (chosen on) it confirmed 0.9 and 0.7 % of their regions (none
    wrong); the one mark among such regions at learned >= 0.97 (a crossed-out whirlpool, at
    0.977) was flagged by the mostly-print check. Session 34: faint texels (a printed line's
    fringe, the paper's grain) on up to ``BLANK_FAINT_MAX`` of the region allowed; on the same
    corpora 285 and 89 more flags lifted (easy and typical: 3185 -> 2960 and 2823 -> 2749),
    none wrong. The doubt gate is what guards both: the 8 marks (of 14,205 regions) both
    readers read "empty" at these confidences on 3200000, 5 of them with no ink texel or
    faint ones on under 1.2 %, were all on hard photos in more doubt than ``BLANK_DOUBT_MAX``.

    Session 35: a number field's floor for the hand reader is ``BLANK_HAND_MIN_WRITTEN`` (its
    cap for a blank field is 0.9847, so none was ever confirmed). On eight spent corpora
    (1,680 photos, both painters) 457 blank fields both readers read "empty" at these levels
    on photos of doubt <= 0.05 were all empty. (A lower learned floor, 0.95, for a blank
    region with no ink in its halo either was tried and withdrawn: on the next fresh corpus a
    stroke laid along a Crypts symbol's print, hidden where both readers leave the print
    out, was read "empty" at 0.962 on a blurred photo; docs/EVALUATION.md, "Session 35".)
    """
    if not _clear_photo(rule, doubt, photo_confidence):
        return readings
    out = readings
    for i, (rd, hand) in enumerate(zip(readings, hands)):
        if not (rd.review and rd.mark == "empty" and hand.mark == "empty"):
            continue
        ft = hand.features
        p = float(rd.features.get("learned_confidence", 0.0))
        hand_min = BLANK_HAND_MIN_WRITTEN if written_only(hand) else BLANK_HAND_MIN
        if (hand.reason == "too few unprinted pixels to read"
                or float(hand.confidence) < hand_min or p < BLANK_LEARNED_MIN
                or any(float(ft.get(k, 1.0)) != 0.0 for k in BLANK_ZERO)
                or not float(ft.get("faint_coverage", 1.0)) <= BLANK_FAINT_MAX):
            continue
        if out is readings:
            out = list(readings)
        out[i] = replace(rd, confidence=max(p, review_threshold), review=False, reason="")
    return out


def _confirm_sure(readings: list, hands: list, *, rule, doubt: float, photo_confidence: float,
                  review_threshold: float) -> list:
    """The readings of :func:`vision.learned.combine_all`, with each mark of ``SURE_FLOORS``
    (the pencils) that both readers read at least as sure as its floors (hand, learned),
    flagged for low confidence alone, confirmed on a clear photo (doubt at most
    ``BLANK_DOUBT_MAX``).

    Why (session 35): reader-v15's rule has thresholds of its own for photos of doubt up to
    0.03 (its tiers, bounds given to its fit: 0, 0.015, 0.03) and asks a learned probability
    of 0.999 beyond, so a colour both readers read at 0.995-0.999 on a photo of doubt
    0.03-0.05 was flagged. The floors are those of its 0.03 tier's second clause for the
    strictest pencil (red: learned 0.995 with the hand reader at 0.8) with the hand reader's
    raised to 0.99, so on photos of doubt up to 0.03 they confirm nothing the tiers did not.
    On eight spent corpora (1,680 photos, both painters, every region read again), a colour
    both read the same at hand >= 0.97 and learned >= 0.99 on photos of doubt at most 0.08:
    64,351 readings, all right (the first errors: 11 on photos of doubt above 0.08); none
    wrong either with the learned floor loosened by half as much again (0.9925) and the doubt
    limit by a quarter (0.0625).

    "written" is not confirmed so: in those corpora the 865 number fields both read
    "written" at >= 0.999 on photos of doubt 0.015-0.05 were all right, but reader-v15's fit
    left "written" never confident in its 0.03 tier, which happens only when its calibration
    rows (3,420 photos) held a field both readers read wrongly at that level.

    Session 37: ``SURE_KIND_FLOORS`` adds an empty route (a Reefs connection) both readers
    read "empty", the hand reader at >= 0.98 and the learned reader at >= 0.98. Empty routes
    were the largest group of flags on easy and typical photos (~400 per default corpus of
    300): the hand reader sees the printed band's edges as a faint trail and stays at 0.5-0.99,
    the learned reader at 0.97-0.995, under reader-v15's 0.99 (its tiers) or 0.999 (beyond
    0.03 in doubt). Chosen on five spent default corpora re-read region by region (3200000 to
    3500000 and 120 photos of 3700000: 1,320 photos): of the 2,335 routes both read "empty"
    flagged for low confidence alone on photos of doubt <= 0.05, it confirms 365, all empty
    (none wrong either with the learned floor at 0.97 and the doubt limit at 0.0625). The
    nearest wrong ones: a blue route both read "empty" at hand 0.9707 (the hand reader's next
    level down) and learned 0.9737 on a typical photo of doubt 0.012, and a green one at hand
    0.9621, learned 0.9889 on a hard photo of doubt 0.052; every other route both read
    "empty" wrongly was on a photo of doubt >= 0.11. On the held-out painter's spent 1280000
    it confirms none (its faint trails keep the hand reader under 0.9). A route drawn off its
    line, both readers sure it is empty, is left to the check that follows
    (``_check_beside_routes``), which watches confident "empty" routes, these included.

    Withdrawn in session 37: the same for an empty treasure, hand >= 0.99 and learned >=
    0.985 (a treasure is mostly print, so the blank confirmation rarely applies). Chosen on
    the same corpora (320 of 1,243 confirmed, all empty; the nearest wrong one, a crossed-out
    treasure, at learned 0.9598), it held on two fresh default corpora and one held-out one,
    and then on the fresh held-out 1360000 a crossed-out treasure both read "empty" (hand
    0.9933, its cap; learned 0.9903) on a typical photo was confirmed: the hand reader cannot
    tell a thin crossing on a treasure's print from none, and the learned reader alone is not
    sure enough of the held-out painter's crossings (docs/EVALUATION.md, "Session 37").

    The committee's members must still agree, and the checks that follow (stains, a second
    calibration, a pencil missing from the sheet, ...) judge these readings as any other.
    """
    if not _clear_photo(rule, doubt, photo_confidence):
        return readings
    # (looked up at the call: tests switch them off)
    floors, kind_floors = SURE_FLOORS, SURE_KIND_FLOORS
    out = readings
    for i, (rd, hand) in enumerate(zip(readings, hands)):
        if not rd.review or rd.mark != hand.mark:
            continue
        fl = kind_floors.get((rd.kind, rd.mark)) or floors.get(rd.mark)
        if fl is None or not rd.reason.startswith("low confidence"):
            continue
        hand_min, learned_min = fl
        p = float(rd.features.get("learned_confidence", 0.0))
        if float(hand.confidence) < hand_min or p < learned_min:
            continue
        if out is readings:
            out = list(readings)
        out[i] = replace(rd, confidence=max(p, review_threshold), review=False, reason="")
    return out


#: The hand reader's vote on a region read with the narrow guard (mostly print) follows its
#: open pixels (``open_cover``, ``open_coloured``: those clear of the wide guard, where a
#: colour fringe along printed lines cannot reach) when it has at least this many of them...
OPEN_VOTE_MIN_PIXELS = 20
#: ...and neither ink nor colour covers more than this share of them: then it is empty.
OPEN_VOTE_MAX_COVER = 0.02


def _open_votes(readings: dict, regions, f: _Features, *, empty_cover: float,
                cover_scale: float, review_threshold: float) -> dict:
    """The hand reader's vote on mostly-print regions, from the pixels clear of print.

    A treasure is mostly print (a chest and a number fill its circle), so it is read with the
    narrow guard and ~44 % of its pixels lie within 0.25 mm of a printed line, where a photo's
    colour fringes (demosaicing, 4:2:0 chroma, sharpening) read as faint colour. Measured
    (session 19, reader-v8, four validation corpora): the hand reader named a colour or a
    crossing-out on 287 of 1,128 empty treasures on easy and typical photos, which left them
    flagged ("readers disagree") though the learned reader read them empty. Where the
    region's open pixels (``SheetModel.open_px``) are enough and hold no ink, and the hand
    reader did not see an X (a crossing-out's strokes can miss the open pixels), the vote is
    "empty", as sure as the hand reader's coverage rule makes an empty region of that open
    coverage (``empty_cover``, ``cover_scale``); anywhere else the reading is kept. A pencil
    fill covers the open pixels as it covers the rest (filled treasures: ~90 % coloured at
    every distance from print), and the two readers must agree for a confident reading. Only
    the vote changes: the region's measurements (``features``, the learned reader's input) stay.
    """
    if f.open_share is None:
        return readings
    out = dict(readings)
    n_open = np.asarray(f.n, float) * f.open_share
    open_cov = np.maximum(f.open_cover, f.open_coloured)
    cand = np.flatnonzero((f.open_share < 0.999) & (n_open >= OPEN_VOTE_MIN_PIXELS)
                          & (open_cov <= OPEN_VOTE_MAX_COVER))
    for i in cand.tolist():
        r = regions[i]
        if "empty" not in r.marks:
            continue
        cov = float(open_cov[i])
        rd = readings[r.id]
        if rd.reason == "too few unprinted pixels to read" or rd.mark == "crossed":
            # (an X is structure across the region and can miss the few open pixels: on
            # crossed-out treasures painted for the tests, 6 of 60 had none of its ink there)
            continue
        conf = _sig((empty_cover - cov) / cover_scale)
        if rd.mark == "empty" and rd.confidence >= conf:
            continue
        rest = [(m, p) for m, p in rd.alternatives if m != "empty"]
        tot = sum(p for _, p in rest)
        alts = (("empty", conf),) + tuple(
            (m, (1.0 - conf) * (p / tot if tot > 0 else 1.0 / len(rest))) for m, p in rest)
        review = conf < review_threshold
        reason = (f"low confidence (empty {conf:.2f}, from the pixels clear of print)"
                  if review else "")
        feats = {**rd.features, "open_vote": 1.0, "open_cover": cov,
                 "open_pixels": float(n_open[i]), "hand_mark_all_pixels": rd.mark,
                 "hand_confidence_all_pixels": float(rd.confidence)}
        out[r.id] = RegionReading(rd.region_id, rd.kind, "empty", float(conf), review, alts,
                                  feats, reason)
    return out


#: A confident "empty" is flagged when colour runs round the inside of the region's outline
#: (``ev_ring_in_arc``: at least this share of the ring's inner sectors coloured) ...
OUTLINE_IN_ARC = 0.75
#: ... and hardly outside it (``ev_ring_out_arc`` below this): a traced outline, not a
#: neighbour's colour or a coloured print around the region.
OUTLINE_OUT_ARC = 0.5


def _outline_check(readings: dict, regions, ev: np.ndarray, review_threshold: float) -> dict:
    """Flag every confident "empty" reading of a region whose outline was traced in colour.

    Both readers read a region's pixels trimmed of a margin along its printed outline (a
    neighbour's overshoot only grazes the rim), so a player who colours a box by tracing its
    border just inside leaves them a bare middle, read "empty" with great confidence. Measured
    (session 20, reader-v8): the only two such confident errors on six corpora (a swatch and a
    Reefs treasure box, both traced by the varied painter) had colour in every inner sector of
    the ring (``vision._evidence``: ``ev_ring_in_arc`` 1.0) and none outside
    (``ev_ring_out_arc`` 0); of 35,297 empty regions read "empty" with confidence on the same
    corpora, 2 had ``in_arc >= 0.75`` with ``out_arc < 0.5``, while 249 had ``in_arc >= 0.75``
    whatever the outside (Reefs treasures, whose printed ring is coloured). The reading keeps
    its mark; a person looks.
    """
    if not len(ev):
        return readings
    j_in = EVIDENCE_FEATURES.index("ev_ring_in_arc")
    j_out = EVIDENCE_FEATURES.index("ev_ring_out_arc")
    hit = np.flatnonzero((ev[:, j_in] >= OUTLINE_IN_ARC) & (ev[:, j_out] < OUTLINE_OUT_ARC))
    if hit.size == 0:
        return readings
    out = dict(readings)
    for i in hit.tolist():
        rd = readings[regions[i].id]
        if rd.mark != "empty" or rd.review:
            continue
        out[rd.region_id] = _flagged(
            rd, review_threshold,
            f"colour traced along the outline ({ev[i, j_in]:.0%} of the ring inside it coloured)",
            ring_in_arc=float(ev[i, j_in]), ring_out_arc=float(ev[i, j_out]))
    return out


def _flagged(rd: RegionReading, review_threshold: float, reason: str,
             **features: float) -> RegionReading:
    """``rd`` flagged for review (the checks after both readers, :func:`_outline_check` and
    :func:`_check_calibration`): the same mark, its confidence kept just under the review
    threshold, ``reason``, and ``features`` added to the reading's own."""
    cap = math.nextafter(review_threshold, 0.0) - 1e-4
    return RegionReading(rd.region_id, rd.kind, rd.mark, float(min(rd.confidence, cap)), True,
                         rd.alternatives, {**rd.features, **features} if features else rd.features,
                         reason)


def _nearest_pencil(palette: Palette, hue: np.ndarray) -> np.ndarray:
    """Index (in ``PENCIL_COLOURS`` order) of the pencil nearest each hue, in spreads."""
    cols = [palette.colour(c) for c in PENCIL_COLOURS]
    centre = np.array([c.hue_deg for c in cols])
    spread = np.array([c.hue_spread_deg for c in cols])
    d = np.abs((np.asarray(hue, float)[:, None] - centre + 180.0) % 360.0 - 180.0) / spread
    return np.argmin(d, axis=1)


def _check_calibration(readings: dict, regions, f: _Features, pal: Palette, pal_gaps: Palette,
                       review_threshold: float) -> dict:
    """Flag every confident colour reading whose hue the two calibrations of this photo
    (:func:`vision.colour.calibrate_palette` and the earlier
    :func:`vision.colour.calibrate_palette_by_gaps`) give to different pencils.

    Both readers read hues against the calibrated palette, so a palette that gave one pencil's
    marks to its neighbour makes them confidently wrong together (measured, session 17: a
    held-out photo whose reds at hue 38 sat between its red swatch at 22 and its orange swatch
    at 56, read orange with confidence 0.999 nine times). Where two reasonable ways of
    matching the sheet's hues to its pencils disagree, the photo itself cannot settle it.
    """
    hue = np.asarray(f.hue, float)
    has_hue = np.asarray(f.chroma, float) > 0
    a, b = _nearest_pencil(pal, hue), _nearest_pencil(pal_gaps, hue)
    split = np.flatnonzero(has_hue & (a != b))
    if split.size == 0:
        return readings
    for i in split.tolist():
        rid = regions[i].id
        rd = readings[rid]
        if rd.review or rd.mark not in PENCIL_COLOURS:
            continue
        readings[rid] = _flagged(
            rd, review_threshold, f"pencils calibrated two ways disagree (hue {hue[i]:.0f}: "
            f"{PENCIL_COLOURS[a[i]]} or {PENCIL_COLOURS[b[i]]})")
    return readings


#: How far from its prior hue a pencil's marks can be and still be taken for that pencil by the
#: calibration (``vision.colour.calibrate_palette``'s largest move by hue order), in degrees:
#: :func:`_check_missing_pencils` spares a neighbour whose cluster lies beyond this plus
#: :data:`MISSING_PENCIL_SPREADS` of its own spreads from the missing pencil's prior hue.
MISSING_PENCIL_REACH_DEG = 70.0
MISSING_PENCIL_SPREADS = 3.0
#: (session 47) :func:`check_coarse_writing`: the page's resolution in the photo (px per mm of
#: the printed page) under which a number field's "empty" is never confident.
WRITING_MIN_PX_PER_MM = 2.5


def written_only(rd) -> bool:
    """Whether a reading is of a region that takes only "empty" or "written" (a number field),
    from its alternatives."""
    return {m for m, _ in rd.alternatives} == {"empty", "written"}


def check_coarse_writing(readings: Mapping[str, RegionReading], px_per_mm: float | None,
                         review_threshold: float) -> dict:
    """The readings with every confident "empty" of a number field (:func:`written_only`)
    flagged when the photo shows the page at under ``WRITING_MIN_PX_PER_MM`` px per mm
    (``px_per_mm``; None: unknown, nothing flagged): reason "photo too coarse to see writing
    (2.0 px/mm, under 2.5): a number written here may not show", confidence just under
    ``review_threshold``. It runs last, after the patch reader, so nothing lifts it.

    Why (session 47): on the fresh held-out corpus 1590000 a total written in pencil on a
    photo of 2.05 px/mm was read "empty" by both readers at their most sure (hand 0.9847, its
    cap for a blank field; learned 0.983) and confirmed blank (:func:`_confirm_blank`: no ink
    texel at all, 0.5 % faint ones), with the patch reader at "empty" 0.976 too: a pencil
    stroke of 0.3-0.6 mm is a pixel or less there, and blurred away. On nine spent and dev
    corpora the 63 number fields written in and read "empty" were on photos of 2.0-3.6 px/mm
    (all but one), half of them under 2.5; of the 487 blank fields read "empty" with
    confidence, one was under 2.5 px/mm (none on an easy or typical photo), 19 under 3."""
    out = dict(readings)
    if px_per_mm is None or not np.isfinite(px_per_mm) or px_per_mm >= WRITING_MIN_PX_PER_MM:
        return out
    why = (f"photo too coarse to see writing ({px_per_mm:.1f} px/mm, under "
           f"{WRITING_MIN_PX_PER_MM:g}): a number written here may not show")
    for rid, rd in readings.items():
        if not rd.review and rd.mark == "empty" and written_only(rd):
            out[rid] = _flagged(rd, review_threshold, why)
    return out


def _check_missing_pencils(readings: dict, pal: Palette, review_threshold: float, *,
                           prior: Palette | None = None) -> dict:
    """Flag every confident reading of a pencil next in hue to a pencil this photo's
    calibration found no mark of (``Palette.evidence`` 0, while others have some).

    A pencil the calibration cannot find on a filled sheet is either unused or was taken for
    its neighbour: its marks then sit in the neighbour's cluster, the palette calls them the
    neighbour's colour, and both readers agree, confidently. Measured (session 23, fresh corpus
    1900000, stabilo pencils under neutral light): on two typical photos whose red no cluster
    held (evidence 0), 20 of the corpus's 21 confident errors, every red read purple at
    0.991-0.999; reader-v11 made them too. 28 of its 300 photos had such a pencil, most of them
    hard photos already flagged. Both neighbours (up and down the hue circle, from the missing
    pencil's prior hue) are flagged: the photo cannot say which one took its marks...

    ...unless a neighbour's cluster is out of that pencil's reach (``prior`` given): its marks
    could only sit in it if they lay more than :data:`MISSING_PENCIL_REACH_DEG` (the
    calibration's largest move of a pencil by hue order) plus :data:`MISSING_PENCIL_SPREADS`
    of the neighbour's spreads from the pencil's prior hue, where no pencil of that name is
    (a "green" at the hue of the sheet's blue). Measured (session 27, spent corpora fresh2400k,
    fresh2500k, ho1190k, ho1210k and 1900000's typical photos regenerated): every wrong
    reading the check caught sat in a neighbour 50 deg from the missing pencil's prior hue;
    the 176 flags this spares there, on neighbours 90-164 deg away (mostly green against blue
    or orange, blue against green), caught nothing.
    """
    ev = {c: int(pal.evidence.get(c, 0)) for c in pal.names}
    found = [c for c in pal.names if ev[c] > 0]
    missing = [c for c in pal.names if ev[c] == 0]
    if not missing or not found:
        return readings
    hue = {c: pal.colour(c).hue_deg for c in pal.names}
    suspect: dict[str, str] = {}
    for m in missing:
        up = min(found, key=lambda c: (hue[c] - hue[m]) % 360.0)
        down = max(found, key=lambda c: (hue[c] - hue[m]) % 360.0)
        for n in (up, down):
            if prior is not None and m in prior.names:
                far = abs(float(hue_diff(hue[n], prior.colour(m).hue_deg)))
                reach = (MISSING_PENCIL_REACH_DEG
                         + MISSING_PENCIL_SPREADS * pal.colour(n).hue_spread_deg)
                if far > reach:
                    continue
            suspect.setdefault(n, m)
    for rid, rd in readings.items():
        if not rd.review and rd.mark in suspect:
            readings[rid] = _flagged(
                rd, review_threshold, f"pencil not found on this sheet ({suspect[rd.mark]}): "
                f"its marks may read as {rd.mark}")
    return readings


def _outline_area(model) -> np.ndarray:
    """Each region's outline area in pixels (its whole area where no outline is known)."""
    return (model.outline_area if model.outline_area is not None else model.area).astype(float)


def _clear_share(f: _Features, model) -> np.ndarray:
    """Each region's pixels read (clear of print) as a share of its outline: the learned
    reader's ``usable_share`` column, and what :func:`_check_hidden_by_print` judges."""
    return f.n / np.maximum(_outline_area(model), 1.0)


#: An "empty" reading of a region whose pixels clear of print are fewer than this share of its
#: outline is flagged (:func:`_check_hidden_by_print`).
HIDDEN_BY_PRINT_SHARE = 0.12


def _check_hidden_by_print(readings: dict, regions, f: _Features, model,
                           review_threshold: float) -> dict:
    """Flag every confident "empty" reading of a region that is nearly all print.

    Both readers read a region's pixels clear of its printed artwork. Where the print covers
    almost all of the outline (a Reefs whirlpool's spiral leaves 5-7 % of it clear), a
    crossing-out drawn over the print can leave those few pixels clean: on the fresh corpus
    2100000 (session 24) a graphite scribble over a whirlpool, plain to a person, was read
    "empty" at 0.992 with the hand reader at 0.993, every column of both readers at 0; on the
    corpora crossed out at rate 0.3 about half of the crossed whirlpools are read "empty". An
    absence of ink is evidence only where ink would show. Measured on 19 datasets (520,000
    regions, session 24): the regions with less than 12 % clear are whirlpools only (symbols,
    the next, have at least 15 %), and 153 of their empty readings were confident; those are
    now flagged. The reading keeps its mark; a person looks.
    """
    share = _clear_share(f, model)
    hit = np.flatnonzero(share < HIDDEN_BY_PRINT_SHARE)
    if hit.size == 0:
        return readings
    out = dict(readings)
    for i in hit.tolist():
        rd = readings.get(regions[i].id)
        if rd is None or rd.mark != "empty" or rd.review:
            continue
        out[rd.region_id] = _flagged(
            rd, review_threshold,
            f"mostly print ({share[i]:.0%} of the region clear of it): a mark drawn over the "
            "print may not show", clear_share=float(share[i]))
    return out


#: :func:`_print_ink`: the least pixels (beside the print of regions read empty) the blur fit
#: needs; with fewer the check is not made.
INK_ON_PRINT_FIT_PIXELS = 2000
#: An "empty" reading whose pixels beside its print are on average darker than the print
#: alone explains by more than this (of paper's brightness) is flagged
#: (:func:`_check_ink_on_print`).
INK_ON_PRINT_EXCESS = 0.05


def _print_ink(sample, model, valid, calm: np.ndarray) -> np.ndarray | None:
    """Each region's ink beside its print: the mean, over its pixels the guard leaves out where
    the render shows paper (``SheetModel.print_pix``), of their darkness (1 - luminance,
    paper = 1) above what this photo's blur of the print puts there, the print's residual
    shift within the region allowed for. NaN where a region has no such pixel in the photo;
    None when the photo has too few to fit the blur.

    The blur is fitted on the photo itself: darkness as a linear mix of the render's darkness
    blurred at several widths (``SheetModel.print_blur``), least squares over the pixels of
    the regions in ``calm`` (read "empty" with confidence), so focus, print density and a
    coloured glyph's lighter ink are all in it. Then, region by region, what is left is
    fitted on the gradient of the blurred print (``SheetModel.print_grad``: a print shifted
    by a fraction of a pixel darkens one side of each line and lightens the other) and that
    part taken off. A stroke along one side of a line darkens that side only and stays.
    """
    return _print_ink_fit(_print_ink_pixels(sample, model, valid), model, calm)


def _print_ink_pixels(sample, model: SheetModel, valid):
    """:func:`_print_ink`'s part that reads the photo alone (the readings not yet needed):
    ``(lab, keep, dark)``, the region of each pixel beside the print, which of the model's
    pixels are in the photo (None: all), and their darkness; None when the model has none."""
    if model.print_pix is None or model.print_pix.size == 0 or model.print_blur is None:
        return None
    keep = None if valid is None else np.asarray(valid, bool).reshape(-1)[model.print_pix]
    px = sample(model.print_pix, keep)
    lab = model.print_label if keep is None else model.print_label[keep]
    return lab, keep, np.clip(1.0 - px @ _LUM, 0.0, 1.0)


def _print_ink_fit(pixels, model: SheetModel, calm: np.ndarray) -> np.ndarray | None:
    """:func:`_print_ink` from :func:`_print_ink_pixels`' ``pixels``: the fit on the ``calm``
    regions and each region's excess."""
    if pixels is None:
        return None
    lab, keep, dark = pixels
    blur = model.print_blur if keep is None else model.print_blur[keep]
    a = np.column_stack([np.ones(lab.size, np.float32), blur])
    fit = np.asarray(calm, bool)[lab]
    if int(fit.sum()) < INK_ON_PRINT_FIT_PIXELS:
        return None
    coef = np.linalg.lstsq(a[fit], dark[fit], rcond=None)[0]
    res = dark - a @ coef
    n_reg = len(model.region_ids)
    n = np.bincount(lab, minlength=n_reg).astype(float)
    if model.print_grad is not None:
        g = model.print_grad if keep is None else model.print_grad[keep]
        gx, gy = g[:, 0].astype(float), g[:, 1].astype(float)

        def sums(w):
            return np.bincount(lab, weights=w, minlength=n_reg)

        # per region, res ~ bx * gx + by * gy (2x2 normal equations; a small ridge keeps a
        # region without gradient at no shift)
        sxx, sxy, syy = sums(gx * gx) + 1e-3, sums(gx * gy), sums(gy * gy) + 1e-3
        sxr, syr = sums(gx * res), sums(gy * res)
        det = sxx * syy - sxy * sxy
        bx, by = (syy * sxr - sxy * syr) / det, (sxx * syr - sxy * sxr) / det
        res = res - bx[lab] * gx - by[lab] * gy
    excess = np.bincount(lab, weights=res, minlength=n_reg)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(n > 0, excess / np.maximum(n, 1.0), np.nan)


def _check_ink_on_print(readings: dict, regions, ink: np.ndarray | None,
                        review_threshold: float) -> dict:
    """Flag every confident "empty" reading with ink beside its print (:func:`_print_ink`).

    Both readers leave out the print and a guard around it (a photo is misregistered by a
    pixel or so, and print there would read as ink). A stroke drawn along a glyph's own line
    then lies wholly in what they leave out: on the fresh corpus 2300000 (session 24) a
    crossing-out slashed along a Crypts cell's diagonal pencil glyph was read "empty" at
    0.9949 by both readers. Its pixels beside the print were 0.061 darker than the photo's
    blur of the print explains; over 13,376 confident empty readings of regions with such
    pixels (fresh 2300000, held-out 1180000, and the crossed-out corpora 1160000, 1170000,
    2200000; session 25, before the per-region shift term) 20 exceeded 0.05, 6 exceeded 0.06.
    With the shift term (session 26), 1 region of 40,050 on the fresh corpus 2500000 and none
    on the held-out 1210000 are flagged, none wrong. The reading keeps its mark; a person
    looks.
    """
    if ink is None:
        return readings
    out = dict(readings)
    for i in np.flatnonzero(np.nan_to_num(ink, nan=-1.0) > INK_ON_PRINT_EXCESS).tolist():
        rd = readings.get(regions[i].id)
        if rd is None or rd.mark != "empty" or rd.review:
            continue
        out[rd.region_id] = _flagged(
            rd, review_threshold, f"ink beside the print ({ink[i]:.2f} darker than the print "
            "explains): a mark drawn along the print may not show", print_ink=float(ink[i]))
    return out


#: An "empty" calibration swatch is flagged when at least this many of the sheet's other
#: swatches read as coloured (:func:`_check_empty_swatches`).
EMPTY_SWATCH_OTHERS = 2


#: :func:`_print_seen`: around each region (its pixels' box widened by PRINT_SEEN_REACH_MM),
#: PRINT_SEEN_KP pixels of its print (the render's linear luminance under PRINT_SEEN_INK),
#: spread evenly over those with paper (over PRINT_SEEN_PAPER) within PRINT_SEEN_PARTNER_PX;
#: a region with fewer than PRINT_SEEN_MIN_PIXELS such print pixels is not measured.
PRINT_SEEN_REACH_MM = 1.5
PRINT_SEEN_INK = 0.6
PRINT_SEEN_PAPER = 0.9
PRINT_SEEN_KP = 24
PRINT_SEEN_PARTNER_PX = 4
PRINT_SEEN_MIN_PIXELS = 8
#: A confident reading whose print shows less than PRINT_SEEN_MIN of the photo's print
#: contrast, or half of whose print pixels (PRINT_SEEN_HIDDEN) show less than PRINT_SEEN_PIXEL
#: of it each, is flagged (:func:`_check_print_seen`).
PRINT_SEEN_MIN = 0.2
PRINT_SEEN_PIXEL = 0.3
PRINT_SEEN_HIDDEN = 0.5
#: Under this print contrast (a share of paper's brightness) at the photo's 75th percentile the print
#: is nowhere clear enough to compare with (the photo's own doubt covers it): no check.
PRINT_SEEN_PHOTO_MIN = 0.05


def _print_seen_geometry(model: SheetModel):
    """``(print_taps, paper_taps, ok)``: for each region, PRINT_SEEN_KP of its print pixels
    and, for each, the nearest paper pixel within PRINT_SEEN_PARTNER_PX of it (its partner),
    both as the flat indices of their 3 x 3 neighbourhoods ``(R * PRINT_SEEN_KP * 9,)``, and
    whether the region has enough print pixels with a partner ``(R,)`` (built once per
    model)."""
    H, W = model.shape
    lum = model.expected @ _LUM
    d = max(1, int(round(PRINT_SEEN_REACH_MM * model.dpi / 25.4)))
    R = len(model.region_ids)
    P = np.zeros((R, PRINT_SEEN_KP), np.int64)
    Q = np.zeros((R, PRINT_SEEN_KP), np.int64)
    ok = np.zeros(R, bool)
    paper = lum > PRINT_SEEN_PAPER
    # the offsets a partner is looked for at, nearest first
    rr = PRINT_SEEN_PARTNER_PX
    oy, ox = np.mgrid[-rr:rr + 1, -rr:rr + 1]
    dist = np.hypot(oy, ox).ravel()
    keep = (dist >= 1.5) & (dist <= rr)
    order = np.argsort(dist[keep], kind="stable")
    offs = np.stack([oy.ravel()[keep][order], ox.ravel()[keep][order]], 1)
    ys, xs = np.divmod(model.pix, W)
    lorder = np.argsort(model.label, kind="stable")
    bounds = np.searchsorted(model.label[lorder], np.arange(R + 1))
    for r in range(R):
        sel = lorder[bounds[r]:bounds[r + 1]]
        if sel.size == 0:
            continue
        y0, y1 = max(0, int(ys[sel].min()) - d), min(H, int(ys[sel].max()) + d + 1)
        x0, x1 = max(0, int(xs[sel].min()) - d), min(W, int(xs[sel].max()) + d + 1)
        py, px = np.nonzero(lum[y0:y1, x0:x1] < PRINT_SEEN_INK)
        py, px = py + y0, px + x0
        # each print pixel's partner: the first paper pixel in order of distance
        cy = np.clip(py[:, None] + offs[None, :, 0], 0, H - 1)
        cx = np.clip(px[:, None] + offs[None, :, 1], 0, W - 1)
        hit = paper[cy, cx]
        has = hit.any(axis=1)
        if int(has.sum()) < PRINT_SEEN_MIN_PIXELS:
            continue
        first = np.argmax(hit, axis=1)
        py, px = py[has], px[has]
        qy, qx = cy[has, first[has]], cx[has, first[has]]
        ip = np.linspace(0, py.size - 1, PRINT_SEEN_KP).round().astype(np.intp)
        P[r] = py[ip] * W + px[ip]
        Q[r] = qy[ip] * W + qx[ip]
        ok[r] = True
    # each pixel's 3 x 3 neighbourhood (clipped to the frame): the darkest of the print's and
    # the brightest of its partner's are read, so that a print misregistered by a pixel, or
    # blurred thinner, is still found
    dy, dx = np.divmod(np.arange(9), 3)

    def around(idx):
        iy, ix = np.divmod(idx, W)
        ny = np.clip(iy[..., None] + dy - 1, 0, H - 1)
        nx = np.clip(ix[..., None] + dx - 1, 0, W - 1)
        return (ny * W + nx).reshape(-1)
    return around(P), around(Q), ok


def _print_seen(image, model: SheetModel, valid) -> np.ndarray | None:
    """Each region's print contrast as a share of the photo's, and the share of its print
    hidden: ``(R, 2)``. The first is the median, over its print
    pixels, of one less the ratio of the print (the darkest pixel within one of it) to the
    paper beside it (the brightest within one of its partner; linear luminance), over the
    same at the photo's 75th percentile of regions; the second the share of its print pixels
    whose own contrast is under PRINT_SEEN_PIXEL of that. Read on the rectified photo as it is
    (``image``: a NormalisedLight's uint8 ``image``, or a linear float image): print and
    partner lie a few pixels apart, under the same light and under the same pencil. NaN
    where not measured (too little print with paper beside it, or part of it outside the
    photo); None when the photo's print contrast is under PRINT_SEEN_PHOTO_MIN.

    The print is everywhere on a sheet and the template says where. A hand, a pencil or a
    die lying on the sheet hides it: the print's pixels are as bright as the paper's beside
    them (~0 of the photo's contrast), while a pencil stroke darkens both and leaves the
    print showing through."""
    taps, partners, ok = per_model(model, "print_seen", _print_seen_geometry)
    R = len(model.region_ids)
    if not ok.any():
        return None
    img = getattr(image, "image", image)
    flat = np.asarray(img).reshape(-1, 3)
    if flat.dtype == np.uint8:
        # (cv2.LUT: the table lookup of NormalisedLight.sample, a third of numpy's time)
        lum_of = lambda idx: cv2.LUT(flat.take(idx, axis=0), SRGB_TO_LINEAR) @ _LUM  # noqa: E731
    else:
        lum_of = lambda idx: flat.take(idx, axis=0) @ _LUM  # noqa: E731
    ink = lum_of(taps).reshape(R, PRINT_SEEN_KP, 9).min(axis=2)
    bright = lum_of(partners).reshape(R, PRINT_SEEN_KP, 9).max(axis=2)
    each = 1.0 - ink / np.maximum(bright, 1e-4)
    contrast = np.median(each, axis=1)
    use = ok.copy()
    if valid is not None:
        v = np.asarray(valid, bool).reshape(-1)
        use &= v[taps].reshape(R, -1).all(axis=1) & v[partners].reshape(R, -1).all(axis=1)
    if not use.any():
        return None
    typ = float(np.percentile(contrast[use], 75))
    if typ < PRINT_SEEN_PHOTO_MIN:
        return None
    hidden = np.mean(each < PRINT_SEEN_PIXEL * typ, axis=1)
    return np.stack([np.where(use, contrast / typ, np.nan), np.where(use, hidden, np.nan)], 1)


def _check_print_seen(readings: dict, regions, seen: np.ndarray | None,
                      review_threshold: float) -> dict:
    """Flag every confident reading whose print does not show (:func:`_print_seen`: under
    :data:`PRINT_SEEN_MIN` of the photo's contrast, or at least :data:`PRINT_SEEN_HIDDEN` of
    its print pixels each under :data:`PRINT_SEEN_PIXEL` of it): something lies on the region
    (a hand, a pencil, a die), or glare washes it out, and what the readers took for bare
    paper, or for a fill, is not the sheet. A pencil stroke is translucent: the print shows
    through it, darker than the pencilled paper beside it.

    Measured (session 28, on photos pasted together from simulated ones): a hand (a
    skin-coloured disc) over four easy photos left 8 confident errors on the two Reefs sheets
    (routes and treasures under it read "empty" at 0.9956-0.9997, a green route at its edge
    "orange" at 0.9993), all flagged now (their print 0.00 of their photos' contrast, 92-100 %
    hidden); a folded-over corner left 1 (a blue propeller read "empty"), flagged; an opaque
    red bar (a pencil, 7 mm) across six sheets left 21 (regions under it read "red"), 14 now:
    Crypts cells 11 -> 6, and a Reefs route's only dark print is its end circles, beyond the
    bar. On 140 photos of spent corpora (fresh2800k, ho1240k; easy, typical and hard) the
    10,723 confident readings showed 0.31 of the photo's contrast or more, none had half its
    print hidden (8 had 40 %). Spent corpora read with it: 18, 4 and 3 flags on fresh2700k,
    fresh2800k and ho1240k (0.00-0.05 points of their regions).
    """
    if seen is None:
        return readings
    out = dict(readings)
    for i, r in enumerate(regions):
        rd = readings[r.id]
        rel, hidden = float(seen[i, 0]), float(seen[i, 1])
        if rd.review or rel != rel:
            continue
        if rel < PRINT_SEEN_MIN or hidden >= PRINT_SEEN_HIDDEN:
            out[r.id] = _flagged(rd, review_threshold,
                                 "print not seen: something covers the region (a hand, a "
                                 "pencil) or glare washes it out",
                                 print_seen=round(rel, 4), print_hidden=round(hidden, 4))
    return out


#: :func:`_stains`: bare paper is sampled every STAIN_STEP_MM, where it lies at least
#: STAIN_CLEAR_MM from every region's outline, STAIN_PRINT_MM from the print (coloured print
#: included) and STAIN_EDGE_MM inside the page's edge. Pencil stays in (or just beside) the
#: regions it colours; colour out there, between them, is something else on the paper.
STAIN_STEP_MM = 0.75
STAIN_CLEAR_MM = 3.0
STAIN_PRINT_MM = 1.0
STAIN_EDGE_MM = 6.0
#: A stain: coloured bare-paper samples (the readers' own "coloured" test) in clusters (at
#: least STAIN_DENSE of the 5 x 5 samples round each: a photo's colour noise is scattered),
#: STAIN_MIN_SAMPLES of them on the sheet. A region within STAIN_REACH_MM of them may lie
#: under the stain: on a board of routes the bare paper is squares between them, and a ring
#: can run along a route for its whole length between two squares it darkens.
STAIN_DENSE = 5
STAIN_MIN_SAMPLES = 12
STAIN_REACH_MM = 6.0
#: A stain is followed from the bare paper into the regions (:func:`_trace_stain`): samples of
#: the stain's colour (faintly coloured, within STAIN_TRACE_HUE_DEG of its median hue; a grey
#: stain is not followed), off the print by STAIN_TRACE_PRINT_MM, connected to it across gaps
#: of up to 2 x STAIN_TRACE_BRIDGE samples (where it crosses print: a route's dots, a node's
#: thick outline) and across other ink within STAIN_TRACE_ACROSS samples of it;
#: STAIN_TRACE_MIN_CELLS of them in a region to count.
STAIN_TRACE_HUE_DEG = 30.0
STAIN_TRACE_BRIDGE = 2
STAIN_TRACE_PRINT_MM = 0.3
STAIN_TRACE_ACROSS = 4
STAIN_TRACE_MIN_CELLS = 3
#: :func:`_check_stains`: on a sheet with a coloured stain, a confident colour reading anywhere
#: whose hue is within STAIN_TRACE_HUE_DEG of the stain's and whose chroma is at most
#: STAIN_PALE_RATIO times the stain's is flagged: it is no more colourful than the stain.
STAIN_PALE_RATIO = 1.5
#: ...when the stain is itself pale beside the pencils: its chroma at most STAIN_PALE_OF_PENCIL
#: times the median chroma of the sheet's confident readings of that mark (of at least
#: STAIN_PALE_MIN_READINGS; with fewer, the rule applies). A "stain" as colourful as a pencil
#: is the pencil's stray colour on the bare paper, and its pale readings are that pencil's.
STAIN_PALE_OF_PENCIL = 0.4
STAIN_PALE_MIN_READINGS = 3


#: :func:`_fit_ring`: a stain is a ring (a cup's or a glass's foot) when its samples (on the
#: bare paper, and where its trace ran on into the regions) lie on a circle: at least
#: RING_MIN_SAMPLES of them within RING_TOL_MM of it, spread round at least RING_MIN_ARC_DEG of
#: it (the circle less its widest stretch without one), its radius within RING_RADIUS_MM (an
#: espresso cup's foot to a large mug's). The circle is found by RING_TRIALS random triples of samples (a fixed seed:
#: the same photo reads the same) and refitted to its inliers. A region the circle passes
#: through (RING_MIN_CELLS of its sample cells within RING_BAND_MM of it) may carry the ring
#: where the ring is too faint to be traced.
RING_TOL_MM = 1.5
RING_MIN_SAMPLES = 20
RING_MIN_ARC_DEG = 60.0
RING_RADIUS_MM = (15.0, 70.0)
#: ...and the samples must make a curve, not a cloud the circle happens to cross: at least
#: RING_FLANK_RATIO times as many within RING_TOL_MM of it as in the bands beside that, out to
#: 3 x RING_TOL_MM either side (twice its area).
RING_FLANK_RATIO = 1.5
RING_TRIALS = 300
RING_SCORE_SAMPLES = 300
RING_BAND_MM = 2.25
RING_MIN_CELLS = 3
#: :func:`_fit_band`: a coloured stain is an object lying on the sheet (a pencil, a pen) when
#: its samples on the bare paper make a straight band: at least BAND_MIN_SAMPLES of them within
#: BAND_HALF_MM of a line, BAND_FLANK_RATIO times as many as in the bands beside that (out to
#: 3 x BAND_HALF_MM), spread over at least BAND_MIN_SPAN_MM along it (with the stain's trace
#: along it, since session 39), BAND_MIN_DENSITY of them a
#: millimetre along it (a pencil's body is 7-8 mm across: ~10 a millimetre where it crosses bare
#: paper; stray colour in clusters far apart that happen to line up, under 1), and at least
#: BAND_MIN_WIDTH_MM across (its 10th to 90th percentile: a body, not a drawn line). The line
#: is found by RING_TRIALS seeded pairs of samples and refitted to its inliers (their principal
#: axis). Its extent along the line is that of its samples, and of the stain's trace within
#: BAND_HALF_MM of it (the body over the regions), lengthened by BAND_EXTEND_MM at both ends
#: (a pencil's sharpened cone is bare wood, of another colour); a region with RING_MIN_CELLS
#: sample cells within half its width and BAND_PAD_MM of the line is under it.
BAND_HALF_MM = 5.0
BAND_MIN_SAMPLES = 30
BAND_FLANK_RATIO = 1.5
BAND_MIN_SPAN_MM = 30.0
BAND_MIN_DENSITY = 1.5
BAND_MIN_WIDTH_MM = 3.0
BAND_EXTEND_MM = 10.0
BAND_PAD_MM = 1.0
#: :func:`_check_stains`: a confident colour reading on the ring, of the stain's hue, is flagged
#: when its chroma is at most RING_PALE_RATIO times the stain's (a pencil is 2-7 times a coffee
#: stain's chroma, its median 4); a confident crossing-out on it always.
RING_PALE_RATIO = 2.5


class Stain(NamedTuple):
    """What :func:`_stains` found: the regions under a stain, and a coloured stain's colour."""

    under: np.ndarray
    """(R,) bool: regions beside the stain or reached by its trace."""
    ab: tuple[float, float] | None
    """The median a, b of the stain's samples on the bare paper, when it is coloured (chroma
    at least the photo's faint-ink chroma); None for a grey stain or none."""
    ring: np.ndarray | None = None
    """(R,) bool: regions the circle of a ring-shaped stain passes through (:func:`_fit_ring`);
    None when the stain is no ring."""
    circle_mm: tuple[float, float, float] | None = None
    """That circle's centre x, y and radius on the sheet (mm, the template's frame)."""
    band: np.ndarray | None = None
    """(R,) bool: regions under a straight band of the stain's colour (:func:`_fit_band`) or
    under a bar found by its shape (``vision.objects.find_bars``, since session 39): an object
    lying on the sheet; None when there is neither."""
    objects: tuple = ()
    """The objects lying on the sheet (session 39): ``(x0, y0, x1, y1, width)`` in template
    mm, their axis's ends and their width (a band's with its padding and extension, a bar's
    as found), for the light stage to leave them out (``vision.pipeline.read_photo``)."""


def _clearances(model: SheetModel) -> tuple[np.ndarray, np.ndarray]:
    """``(d_region, d_print)``: every pixel's distance (px) to the nearest readable region and
    to the nearest print of the clean sheet (dark, or coloured), for the samples of the last
    checks (:func:`_stain_geometry`, :func:`_beside_route_geometry`). Built once per model."""
    H, W = model.shape
    k = model.dpi / 25.4
    lum = model.expected @ _LUM
    chroma = model.expected.max(axis=2) - model.expected.min(axis=2)
    printed = ((lum < 0.9) | (chroma > 0.1)).astype(np.uint8)
    regions_mask = np.zeros((H, W), np.uint8)
    for rid in model.region_ids:
        _fill(regions_mask, _region_polygon_px(model.template.region(rid), k))
    return (cv2.distanceTransform(1 - regions_mask, cv2.DIST_L2, 5),
            cv2.distanceTransform(1 - printed, cv2.DIST_L2, 5))


def _stain_step(model: SheetModel) -> int:
    """The stain search's sample spacing on the model's frame, px (``STAIN_STEP_MM``)."""
    return max(1, int(round(STAIN_STEP_MM * model.dpi / 25.4)))


def _stain_geometry(model: SheetModel):
    """``(idx, grid_shape, grid_pos, region_cells, region_label)``: the flat indices of the
    bare-paper samples (see ``STAIN_STEP_MM``), the sample grid's shape and each sample's
    place on it, and every region's outline as grid cells (flat grid indices, with their region
    index). Built once per model."""
    H, W = model.shape
    k = model.dpi / 25.4
    d_region, d_print = per_model(model, "clearances", _clearances)
    step = _stain_step(model)
    gh, gw = (H + step - 1) // step, (W + step - 1) // step
    cells, labels = [], []
    for i, rid in enumerate(model.region_ids):
        poly = _region_polygon_px(model.template.region(rid), k)
        x0, y0 = (max(0, int(np.floor(v)) - 2) for v in poly.min(axis=0))
        x1, y1 = (int(np.ceil(v)) + 2 for v in poly.max(axis=0))
        x1, y1 = min(W, x1), min(H, y1)
        one = np.zeros((max(0, y1 - y0), max(0, x1 - x0)), np.uint8)
        _fill(one, poly - [x0, y0])
        ys, xs = np.nonzero(one)
        c = np.unique(((ys + y0) // step) * gw + (xs + x0) // step)
        cells.append(c)
        labels.append(np.full(c.size, i, np.int32))
    gy, gx = np.mgrid[0:gh, 0:gw]
    py, px = np.minimum(gy * step + step // 2, H - 1), np.minimum(gx * step + step // 2, W - 1)
    edge = STAIN_EDGE_MM * k
    inside = (py >= edge) & (py < H - edge) & (px >= edge) & (px < W - edge)
    bare = (d_region[py, px] >= STAIN_CLEAR_MM * k) & (d_print[py, px] >= STAIN_PRINT_MM * k) & \
        inside
    idx = (py * W + px)[bare].astype(np.int64)
    grid_pos = (gy * gw + gx)[bare].astype(np.int64)
    # every sample off the print (inside regions too), for following a stain into them
    inner = (d_print[py, px] >= STAIN_TRACE_PRINT_MM * k) & ~bare & inside
    trace_idx = (py * W + px)[inner].astype(np.int64)
    trace_pos = (gy * gw + gx)[inner].astype(np.int64)
    return (idx, (gh, gw), grid_pos, np.concatenate(cells).astype(np.int64),
            np.concatenate(labels), trace_idx, trace_pos)


def _stains(sample, model: SheetModel, th: Mapping[str, float], valid,
            image: np.ndarray | None = None) -> Stain | None:
    """Which regions lie under a stain (:class:`Stain`), or None when the sheet has no bare
    paper to look at. A stain is colour in clusters on the bare paper between the regions
    (``STAIN_DENSE``, ``STAIN_MIN_SAMPLES``), where no pencil stroke of a region reaches: a
    coffee ring, a spill, a coloured doodle; a region within ``STAIN_REACH_MM`` of it may
    carry it too, and so may a region it runs into along its own colour (:func:`_trace_stain`,
    session 32: stained copies of five corpora, 26 -> 2 confident errors, docs/EVALUATION.md)."""
    idx, (gh, gw), grid_pos, cells, labels, trace_idx, trace_pos = \
        per_model(model, "stains", _stain_geometry)
    if idx.size == 0:
        return None
    lab = linear_to_lab(sample(idx))
    col = _stain_coloured(lab, th)
    if valid is not None:
        col &= np.asarray(valid, bool).reshape(-1)[idx]
    R = len(model.region_ids)
    if int(col.sum()) < STAIN_MIN_SAMPLES:
        return Stain(np.zeros(R, bool), None)
    grid = np.zeros(gh * gw, np.float32)
    grid[grid_pos[col]] = 1.0
    grid = grid.reshape(gh, gw)
    around = cv2.boxFilter(grid, -1, (5, 5), normalize=False, borderType=cv2.BORDER_CONSTANT)
    stain = ((grid > 0) & (around >= STAIN_DENSE - 0.5)).astype(np.uint8)
    if int(stain.sum()) < STAIN_MIN_SAMPLES:
        return Stain(np.zeros(R, bool), None)
    reach = max(1, int(round(STAIN_REACH_MM / STAIN_STEP_MM)))
    near = cv2.dilate(stain, _disk(reach)).reshape(-1) > 0
    under = np.bincount(labels[near[cells]], minlength=R) > 0
    flat_stain = stain.reshape(-1) > 0
    anchor = lab[flat_stain[grid_pos] & col]
    traced = _trace_stain(sample, anchor, stain, th, valid, trace_idx, trace_pos)
    on = flat_stain if traced is None else (flat_stain | traced)
    if traced is not None:
        under |= np.bincount(labels[traced[cells]], minlength=R) >= STAIN_TRACE_MIN_CELLS
    step = _stain_step(model)
    step_mm = step * 25.4 / model.dpi
    gy, gx = np.divmod(np.flatnonzero(on), gw)
    circle = _fit_ring(np.column_stack([gx, gy]).astype(np.float64), step_mm)
    ring = circle_mm = None
    if circle is not None:
        on_circle = np.zeros((gh, gw), np.uint8)
        cx, cy, r = circle
        cv2.circle(on_circle, (int(round(cx * 16)), int(round(cy * 16))), int(round(r * 16)), 1,
                   max(1, int(round(2 * RING_BAND_MM / step_mm))), lineType=cv2.LINE_8, shift=4)
        ring = np.bincount(labels[on_circle.reshape(-1)[cells] > 0], minlength=R) >= RING_MIN_CELLS
        circle_mm = (_cell_mm(cx, step, model.dpi), _cell_mm(cy, step, model.dpi), r * step_mm)
    ab = _stain_colour(anchor, th)
    band = None
    objects = []
    if ab is not None:  # (a grey "stain" in a line is most often print a little off its place)
        band = _band_regions(flat_stain, traced, (gh, gw), cells, labels, R, step_mm, objects,
                             step)
    if image is not None:
        # (session 39) an object lying on the sheet found by its shape (vision.objects), where
        # its colour on the bare paper made no band: a dark body that measures nearly grey,
        # one lying over a table of boxes with little bare paper beside it
        from vision.objects import find_bars, print_edge_masks, print_render
        render = per_model(model, "print_render", lambda m: print_render(m.expected, m.dpi))
        edges = per_model(model, "print_edges",
                          lambda m: print_edge_masks(m.expected, m.dpi, render))
        bars = find_bars(image, model.expected, model.dpi, valid=valid, print_edges=edges,
                         render=render)
        if bars:
            on_bar = _bar_regions(bars, (gh, gw), cells, labels, R, step, model.dpi)
            band = on_bar if band is None else (band | on_bar)
            objects += [(*b.p0_mm, *b.p1_mm, b.width_mm) for b in bars]
    return Stain(under, ab, ring, circle_mm, band, tuple(objects))


def _cell_mm(g, step: int, dpi: float):
    """A stain-grid coordinate (a cell index along x or y, or a fraction of one) as mm on the
    sheet: its sample pixel is ``g * step + step // 2``, whose centre is at + 0.5."""
    return (g * step + step // 2 + 0.5) * (25.4 / dpi)


def _in_strip(x, y, x0: float, y0: float, ux: float, uy: float, a0: float, a1: float,
              half: float) -> np.ndarray:
    """Which points ``(x, y)`` lie within ``half`` of the axis through ``(x0, y0)`` along the
    unit direction ``(ux, uy)``, between ``a0`` and ``a1`` along it (any one unit)."""
    o = (x - x0) * -uy + (y - y0) * ux
    along = (x - x0) * ux + (y - y0) * uy
    return (np.abs(o) <= half) & (along >= a0) & (along <= a1)


def _bar_regions(bars, grid_shape, cells, labels, R: int, step: int, dpi: float) -> np.ndarray:
    """(R,) bool: the regions under the bars (``vision.objects.Bar``, template mm) found on
    the sheet: RING_MIN_CELLS of their sample cells (``cells``, ``labels``: flat grid indices,
    :func:`_stain_geometry`) within half the bar's width and BAND_PAD_MM of its axis, between
    its ends."""
    gh, gw = grid_shape
    ry, rx = np.divmod(cells, gw)
    px, py = _cell_mm(rx, step, dpi), _cell_mm(ry, step, dpi)
    inside = np.zeros(cells.size, bool)
    for b in bars:
        (x0, y0), (x1, y1) = b.p0_mm, b.p1_mm
        length = math.hypot(x1 - x0, y1 - y0)
        if length <= 0:
            continue
        inside |= _in_strip(px, py, x0, y0, (x1 - x0) / length, (y1 - y0) / length,
                            -BAND_PAD_MM, length + BAND_PAD_MM, b.width_mm / 2 + BAND_PAD_MM)
    return np.bincount(labels[inside], minlength=R) >= RING_MIN_CELLS


def _band_regions(flat_stain: np.ndarray, traced: np.ndarray | None, grid_shape, cells, labels,
                  R: int, unit_mm: float, objects: list | None = None,
                  step: int = 1) -> np.ndarray | None:
    """(R,) bool: the regions under a straight band the stain's bare-paper samples make
    (:func:`_fit_band`; ``flat_stain``, ``traced``: flat grid cells; ``cells``, ``labels``: the
    regions' cells, :func:`_stain_geometry`), or None when they make none. The band is
    appended to ``objects`` as ``(x0, y0, x1, y1, width)`` in template mm (``Stain.objects``;
    ``step``: the grid's spacing in px)."""
    gh, gw = grid_shape
    gy, gx = np.divmod(np.flatnonzero(flat_stain), gw)
    more = None
    if traced is not None:
        my, mx = np.divmod(np.flatnonzero(traced & ~flat_stain), gw)
        more = np.column_stack([mx, my]).astype(np.float64)
    line = _fit_band(np.column_stack([gx, gy]).astype(np.float64), unit_mm, more)
    if line is None:
        return None
    (cx, cy), (ux, uy), lo, hi, width = line
    half = BAND_HALF_MM / unit_mm
    if traced is not None and traced.any():
        ty, tx = np.divmod(np.flatnonzero(traced), gw)
        o = (tx - cx) * -uy + (ty - cy) * ux
        along = ((tx - cx) * ux + (ty - cy) * uy)[np.abs(o) <= half]
        if along.size:
            lo, hi = min(lo, float(along.min())), max(hi, float(along.max()))
    ext = BAND_EXTEND_MM / unit_mm
    ry, rx = np.divmod(cells, gw)
    inside = _in_strip(rx, ry, cx, cy, ux, uy, lo - ext, hi + ext,
                       width / 2 + BAND_PAD_MM / unit_mm)
    if objects is not None:
        dpi = 25.4 * step / unit_mm
        (x0, y0), (x1, y1) = ((_cell_mm(cx + t * ux, step, dpi), _cell_mm(cy + t * uy, step, dpi))
                              for t in (lo - ext, hi + ext))
        objects.append((x0, y0, x1, y1, width * unit_mm + 2 * BAND_PAD_MM))
    return np.bincount(labels[inside], minlength=R) >= RING_MIN_CELLS


def _fit_band(pts: np.ndarray, unit_mm: float, traced: np.ndarray | None = None):
    """``((cx, cy), (ux, uy), lo, hi, width)``: the straight band a stain's samples make
    (``pts``: (N, 2) x, y in units of ``unit_mm``): a point on its axis, the axis's direction,
    the samples' extent along it from that point, and the band's width (its samples' 10th to
    90th percentile across it); or None (see ``BAND_MIN_SAMPLES``). ``traced``: (M, 2) the
    cells the stain's trace reached beyond its samples; those on its axis count towards its
    length (``BAND_MIN_SPAN_MM``), not towards its density.

    Why (session 38): a pencil lying on the sheet when the photo is taken hides what is under
    it and shows its own colour there. ``scripts/make_variants.py --kind pencil`` on the spent
    4000000 (seed 48): three confident errors, empty Reefs treasure boxes read as the pencil's
    colour (its body over a grey-printed box, which the stain's trace cannot enter; its wooden
    cone, not of the body's colour). The body is a straight band of one colour across the
    bare paper: the line it makes says which regions it covers."""
    n = pts.shape[0]
    if n < BAND_MIN_SAMPLES:
        return None
    half = BAND_HALF_MM / unit_mm
    rng = np.random.default_rng(0)
    ij = rng.integers(0, n, (RING_TRIALS, 2))
    a, dv = pts[ij[:, 0]], pts[ij[:, 1]] - pts[ij[:, 0]]
    ln = np.hypot(dv[:, 0], dv[:, 1])
    ok = ln > 2 * half  # (pairs too close give no direction)
    if not ok.any():
        return None
    a, u = a[ok], dv[ok] / ln[ok, None]
    some = pts[::max(1, -(-n // RING_SCORE_SAMPLES))]
    off = (some[None, :, 0] - a[:, None, 0]) * -u[:, None, 1] + \
        (some[None, :, 1] - a[:, None, 1]) * u[:, None, 0]
    best = int(np.argmax((np.abs(off) <= half).sum(1)))
    c, d = a[best], u[best]
    for _ in range(2):  # refit to the inliers: their mean and principal axis
        o = (pts - c) @ np.array([-d[1], d[0]])
        inl = np.abs(o) <= half
        if inl.sum() < 3:
            return None
        q = pts[inl]
        c = q.mean(axis=0)
        d = np.linalg.eigh(np.cov((q - c).T))[1][:, 1]
    o = (pts - c) @ np.array([-d[1], d[0]])
    along = (pts - c) @ d
    inl = np.abs(o) <= half
    flank = int(((np.abs(o) > half) & (np.abs(o) <= 3 * half)).sum())
    k = int(inl.sum())
    if k < max(BAND_MIN_SAMPLES, BAND_FLANK_RATIO * flank):
        return None
    lo, hi = float(along[inl].min()), float(along[inl].max())
    width = float(np.percentile(o[inl], 90) - np.percentile(o[inl], 10))
    if width * unit_mm < BAND_MIN_WIDTH_MM or k < BAND_MIN_DENSITY * (hi - lo) * unit_mm:
        return None
    span = hi - lo
    if traced is not None and traced.shape[0]:
        # (session 39) its length with the stain's trace along it: a pencil laid from the
        # sheet's edge over a table of boxes crosses bare paper only at the edge (spent
        # 4100000's pencil copy, photo 75: 26 mm of samples at 12 a millimetre, the rest of
        # its body over the treasure boxes, one of them, empty, read "red" at 0.996)
        to = (traced - c) @ np.array([-d[1], d[0]])
        ta = ((traced - c) @ d)[np.abs(to) <= half]
        if ta.size:
            span = max(hi, float(ta.max())) - min(lo, float(ta.min()))
    if span * unit_mm < BAND_MIN_SPAN_MM:
        return None
    return (float(c[0]), float(c[1])), (float(d[0]), float(d[1])), lo, hi, width


def _fit_ring(pts: np.ndarray, unit_mm: float) -> tuple[float, float, float] | None:
    """The circle ``(cx, cy, r)`` a ring-shaped stain's samples lie on (``pts``: (N, 2) x, y,
    in units of ``unit_mm``), or None when they lie on none (see ``RING_MIN_SAMPLES``).

    Why (session 38): a coffee ring fades along its arc; where it runs along an empty Reefs
    route too faint to be traced from the bare paper (:func:`_trace_stain`) it still reads as
    a pale orange stroke, at 0.99+ (3800000's coffee copy, seed 44: two such routes at chroma
    1.6-1.7 times the stain's, and a grey ring's arc read as a crossing-out on a Crypts box).
    The arcs that were found say where the rest of the ring is: a cup's foot is a circle."""
    n = pts.shape[0]
    if n < RING_MIN_SAMPLES:
        return None
    tol = RING_TOL_MM / unit_mm
    rmin, rmax = (v / unit_mm for v in RING_RADIUS_MM)
    rng = np.random.default_rng(0)
    tri = pts[rng.integers(0, n, (RING_TRIALS, 3))]  # (a repeated sample: no circle, dropped)
    a, b, c = tri[:, 0], tri[:, 1], tri[:, 2]
    d = 2.0 * (a[:, 0] * (b[:, 1] - c[:, 1]) + b[:, 0] * (c[:, 1] - a[:, 1])
               + c[:, 0] * (a[:, 1] - b[:, 1]))
    sa, sb, sc = (a * a).sum(1), (b * b).sum(1), (c * c).sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ux = (sa * (b[:, 1] - c[:, 1]) + sb * (c[:, 1] - a[:, 1]) + sc * (a[:, 1] - b[:, 1])) / d
        uy = (sa * (c[:, 0] - b[:, 0]) + sb * (a[:, 0] - c[:, 0]) + sc * (b[:, 0] - a[:, 0])) / d
        rr = np.hypot(a[:, 0] - ux, a[:, 1] - uy)
    ok = np.isfinite(rr) & (rr >= rmin) & (rr <= rmax)
    if not ok.any():
        return None
    ux, uy, rr = ux[ok], uy[ok], rr[ok]
    some = pts[::max(1, -(-n // RING_SCORE_SAMPLES))]  # (the trials scored on at most that many)
    dist = np.hypot(some[None, :, 0] - ux[:, None], some[None, :, 1] - uy[:, None])
    best = int(np.argmax((np.abs(dist - rr[:, None]) <= tol).sum(1)))
    cx, cy, r = float(ux[best]), float(uy[best]), float(rr[best])
    for _ in range(2):  # refit to the inliers (algebraic least squares)
        inl = np.abs(np.hypot(pts[:, 0] - cx, pts[:, 1] - cy) - r) <= tol
        if inl.sum() < 3:
            return None
        x, y = pts[inl, 0], pts[inl, 1]
        sol = np.linalg.lstsq(np.column_stack([x, y, np.ones_like(x)]), x * x + y * y,
                              rcond=None)[0]
        cx, cy = sol[0] / 2.0, sol[1] / 2.0
        r = math.sqrt(max(sol[2] + cx * cx + cy * cy, 0.0))
    off = np.abs(np.hypot(pts[:, 0] - cx, pts[:, 1] - cy) - r)
    inl = off <= tol
    flank = int(((off > tol) & (off <= 3 * tol)).sum())
    if not (rmin <= r <= rmax) or int(inl.sum()) < max(RING_MIN_SAMPLES, RING_FLANK_RATIO * flank):
        return None
    ang = np.sort(np.arctan2(pts[inl, 1] - cy, pts[inl, 0] - cx))
    gap = float(np.diff(np.append(ang, ang[0] + 2 * math.pi)).max())  # (the widest part bare)
    if 360.0 - math.degrees(gap) < RING_MIN_ARC_DEG:
        return None
    return cx, cy, r


def _stain_colour(anchor_lab: np.ndarray, th: Mapping[str, float]) -> tuple[float, float] | None:
    """A stain's colour: the median a, b of its samples on the bare paper (Lab), or None for a
    grey stain (less chroma than the photo's faint-ink test, ``chroma_faint``) or none."""
    if anchor_lab.shape[0] == 0:
        return None
    a0, b0 = float(np.median(anchor_lab[:, 1])), float(np.median(anchor_lab[:, 2]))
    return (a0, b0) if math.hypot(a0, b0) >= th["chroma_faint"] else None


def _stain_coloured(lab: np.ndarray, th: Mapping[str, float], *,
                    faint: bool = False) -> np.ndarray:
    """The readers' own ink test (_measure_halo) on Lab samples: coloured, or dark (a faint
    ring is a line darker than the paper, and reads as a crossing-out where it crosses a box).
    ``faint``: with the readers' half margins (``chroma_faint``, ``dark_l_faint``) instead."""
    L, C = lab[:, 0], np.hypot(lab[:, 1], lab[:, 2])
    chroma, dark_l = (th["chroma_faint"], th["dark_l_faint"]) if faint else (th["chroma"],
                                                                              th["dark_l"])
    col = (C > chroma) & (C > 0.3 * np.maximum(100.0 - L, 0.0))
    return col | (L < dark_l)


def _trace_stain(sample, anchor_lab: np.ndarray, stain: np.ndarray, th: Mapping[str, float],
                 valid, trace_idx: np.ndarray, trace_pos: np.ndarray) -> np.ndarray | None:
    """The sample grid's cells (flat, bool) that a stain found on the bare paper (``stain``,
    its samples' Lab ``anchor_lab``) runs on into: samples off the print, inside regions too,
    of the stain's colour (above the faint-ink chroma, within ``STAIN_TRACE_HUE_DEG`` of its
    median hue: a pale ring is below the readers' own chroma test and reads as dark),
    connected to it across gaps of up to ``2 * STAIN_TRACE_BRIDGE`` samples (where it crosses
    print: a route's dots, a node's thick outline) and across other ink within
    ``STAIN_TRACE_ACROSS`` samples of it.

    Why: a coffee ring that runs along a Reefs route for its whole length touches no bare paper
    within reach of the route, yet it is one curve with the arcs that do; a pencil stroke of
    another colour where the ring crosses it does not carry the trace on. Only computed when a
    coloured stain was found (plain photos pay nothing). A grey one (its samples' median a, b
    less chroma than the photo's faint-ink test, ``chroma_faint``) is not followed: on a
    plain photo it is most often printed text a little off its place (a sheet without
    markers), and grey is every pencil's dark edge: followed, it ran through all the ink of
    the sheet (spent corpus 3100000, photo 258: 27 right readings flagged)."""
    ab = _stain_colour(anchor_lab, th)
    if ab is None or trace_idx.size == 0:
        return None  # no stain, or a grey one: not followed (above)
    a0, b0 = ab
    lab = linear_to_lab(sample(trace_idx))
    like = _stain_coloured(lab, th)
    hue = np.degrees(np.arctan2(lab[:, 2], lab[:, 1]))
    ok = (np.hypot(lab[:, 1], lab[:, 2]) > th["chroma_faint"]) & \
        (np.abs(hue_diff(hue, math.degrees(math.atan2(b0, a0)))) <= STAIN_TRACE_HUE_DEG)
    if valid is not None:
        v = np.asarray(valid, bool).reshape(-1)[trace_idx]
        like &= v
        ok &= v
    gh, gw = stain.shape
    grid = stain.reshape(-1).copy()
    grid[trace_pos[ok]] = 1
    grid = grid.reshape(gh, gw)
    # other ink next to it carries the trace across (a pencil route the ring crosses) but
    # counts for no region
    other = np.zeros(gh * gw, np.uint8)
    other[trace_pos[like & ~ok]] = 1
    other = other.reshape(gh, gw) & cv2.dilate(grid, _disk(STAIN_TRACE_ACROSS))
    bridged = cv2.dilate(grid | other, _disk(STAIN_TRACE_BRIDGE))  # (gaps of up to 2 x that)
    n, comp = cv2.connectedComponents(bridged, connectivity=8)
    keep = np.zeros(n, bool)
    keep[np.unique(comp[stain > 0])] = True
    keep[0] = False
    return (keep[comp] & (grid > 0)).reshape(-1)


def _check_stains(readings: dict, regions, stain: Stain | None,
                  review_threshold: float) -> dict:
    """Flag every confident mark (not "empty") on a region under a stain (:func:`_stains`):
    the colour the readers saw there may be the stain's. A coffee ring crossing an empty
    route reads as an orange stroke, its arc across a box as a crossing-out. On the circle of
    a ring-shaped stain (:func:`_fit_ring`), flag a confident crossing-out, and a confident
    colour reading of a coloured stain's hue at most ``RING_PALE_RATIO`` times its chroma. On
    a sheet with a coloured stain, flag too every confident colour reading of the stain's hue
    (within ``STAIN_TRACE_HUE_DEG``) that is no more colourful than the stain (chroma at most
    ``STAIN_PALE_RATIO`` times its chroma), wherever it is: a ring's arc the trace did not reach.

    Why the circle (session 38): on 3800000's coffee copy (seed 44) the trace and the pale
    rule left three confident errors, all on the ring's faint arcs (two empty routes read
    "orange" at 1.6-1.7 times the stain's chroma, an empty Crypts box read "crossed" under a
    grey ring, which is not traced). Read again region by region, the spent coffee copies of
    3200000 (seed 34), 3400000 (40) and 3800000 (44), 820 stained photos: the circle is found
    on 739 (720 of them the ring the simulator drew, centre within 5 mm, radius within 4 mm),
    it catches those three and a crossed treasure box of 3400000's copy, and flags 26 right
    readings (25 on easy or typical photos); on the plain 3200000-3400000 (900 photos) a
    circle is fitted to 45 stains (a pencil's stray strokes) and flags 3 right readings.

    Why the second (session 34): on 3300000's coffee copy (seed 36) a ring's segment along a
    Reefs route read "orange" at 0.992 (chroma 12.7, 3 deg from the stain's hue, the stain's
    chroma 10.3); the stain was found on the margin but its trace stopped where the ring's arc
    fades below the faint-ink chroma. A pencil's colour is 2-7 times a coffee stain's chroma
    (its median 4 times). But a "stain" found on a plain photo is most often a pencil's stray
    colour on the bare paper, as colourful as the pencil, and its pale readings are that
    pencil's: on the plain fresh corpus 3400000 the rule flagged 33 right readings on 14
    photos. So the stain must be pale beside the sheet's readings of that mark
    (``STAIN_PALE_OF_PENCIL``; the error's sheet: 0.24). Re-read region by region with the
    rule off: on the stained copies of 3200000 (seed 34), 1280000 (35) and 3300000 (36) it
    flags 10, 5 and 9 right readings (18, 12 and 58 without the pencil test) and catches
    that error; on the plain 3400000 none. A sheet without a coloured stain pays nothing.

    Measured (session 30, ``scripts/make_variants.py --kind coffee --seed 30`` on spent
    corpora; docs/EVALUATION.md "Session 30"): on the default corpus 2900000's 300 photos
    the ring left 25 confident errors (empty Reefs routes read "orange", two Crypts boxes read
    "crossed"), 11 with the check (the ring runs along those routes, touching no bare paper
    within reach); the held-out 1250000's 120: 10 -> 4. The constants were chosen on the
    default corpus's stained copies against 100 of its plain photos (every third): clear
    distance 2 / 2.5 / 3 / 3.5 mm and 3 / 4 / 5 clustered samples, reach 6 / 8 mm; at 3 mm
    and 5, 7 flags on 4 of the 100 plain photos (1 on an easy or typical one; 135 on 20 at
    2 mm and 3, where a messy fill's overshoot counts), none on a wrong reading."""
    ring = stain.ring if stain is not None else None
    if stain is None or (not stain.under.any() and stain.ab is None and ring is None
                         and stain.band is None):
        return readings
    under = stain.under
    pencil_chroma: dict = {}
    if stain.ab is not None:
        a0, b0 = stain.ab
        hue0, chroma0 = math.degrees(math.atan2(b0, a0)), math.hypot(a0, b0)
        by_mark: dict = {}
        for r in regions:
            rd = readings[r.id]
            c = rd.features.get("chroma")
            if not rd.review and rd.mark in PENCIL_COLOURS and c is not None:
                by_mark.setdefault(rd.mark, []).append(float(c))
        pencil_chroma = {m: float(np.median(v)) for m, v in by_mark.items()
                         if len(v) >= STAIN_PALE_MIN_READINGS}

    def as_pale(rd, ratio: float) -> bool:
        # a colour reading of the coloured stain's hue with at most ratio times its chroma
        if stain.ab is None or rd.mark not in PENCIL_COLOURS:
            return False
        hue, chroma = rd.features.get("hue_deg"), rd.features.get("chroma")
        if hue is None or chroma is None or not math.isfinite(float(chroma)):
            return False
        return (float(chroma) <= ratio * chroma0
                and abs(float(hue_diff(float(hue), hue0))) <= STAIN_TRACE_HUE_DEG)

    out = dict(readings)
    for i, r in enumerate(regions):
        rd = readings[r.id]
        if rd.review or rd.mark == "empty":
            continue
        if under[i]:
            out[r.id] = _flagged(rd, review_threshold,
                                 "a stain or stray colour on the paper runs up to the region: "
                                 "its colour may be the stain's")
            continue
        if stain.band is not None and stain.band[i]:
            out[r.id] = _flagged(rd, review_threshold,
                                 "under a straight band of colour across the sheet (a pencil "
                                 "lying on it?): what is under it cannot be seen")
            continue
        if ring is not None and ring[i]:
            if rd.mark == "crossed" or as_pale(rd, RING_PALE_RATIO):
                where = ""
                if stain.circle_mm is not None:
                    x, y, rad = stain.circle_mm
                    where = f", {2 * rad:.0f} mm across, centred at x {x:.0f}, y {y:.0f} mm"
                out[r.id] = _flagged(rd, review_threshold,
                                     f"on the circle of a ring-shaped stain (a cup's foot"
                                     f"{where}) where it is too faint to follow: its mark may "
                                     f"be the ring's")
                continue
        if as_pale(rd, STAIN_PALE_RATIO) \
                and chroma0 <= STAIN_PALE_OF_PENCIL * pencil_chroma.get(rd.mark, math.inf):
            out[r.id] = _flagged(
                rd, review_threshold,
                f"as pale as a stain on the paper and of its hue (chroma "
                f"{float(rd.features['chroma']):.0f}, the stain's {chroma0:.0f}): its colour may "
                f"be the stain's")
    return out


#: :func:`_check_beside_routes`: each route (a segment region) is watched on both sides in a
#: band from BESIDE_GAP_MM beyond its outline to BESIDE_REACH_MM beyond it (routes run 19 mm
#: apart on the Reefs sheets), along its middle (BESIDE_ENDS of its length left out at each
#: end, by the spaces it joins), sampled every BESIDE_STEP_MM off the print and off every
#: region; the middle is cut into BESIDE_BINS stretches, and a side with ink in at least
#: BESIDE_MIN_BINS of them holds a stroke running along the route.
BESIDE_GAP_MM = 0.5
BESIDE_REACH_MM = 4.5
BESIDE_ENDS = 0.1
BESIDE_STEP_MM = 0.5
BESIDE_BINS = 8
BESIDE_MIN_BINS = 5


def _beside_route_geometry(model: SheetModel):
    """``(idx, region, cell)``: the flat pixel indices of the samples beside each route (see
    ``BESIDE_GAP_MM``), the index of their route in ``model.region_ids`` and their stretch
    (``side * BESIDE_BINS + bin``). Built once per model; empty arrays without routes."""
    H, W = model.shape
    k = model.dpi / 25.4
    routes = [(i, model.template.region(rid)) for i, rid in enumerate(model.region_ids)]
    routes = [(i, r) for i, r in routes if r.shape.type == "segment"]
    if not routes:
        z = np.zeros(0, np.int64)
        return z, z, z
    d_region, d_print = per_model(model, "clearances", _clearances)
    clear = (d_region >= BESIDE_GAP_MM * k) & (d_print >= STAIN_TRACE_PRINT_MM * k)
    step = BESIDE_STEP_MM * k
    idx, reg, cell = [], [], []
    for i, r in routes:
        p1 = np.asarray(r.shape.params["p1"], float) * k
        p2 = np.asarray(r.shape.params["p2"], float) * k
        ln = float(np.hypot(*(p2 - p1)))
        if ln <= 0:
            continue
        u = (p2 - p1) / ln
        nrm = np.array([-u[1], u[0]])
        half = float(r.shape.params.get("width", 0.0)) * k / 2
        ts = np.arange(BESIDE_ENDS * ln, (1 - BESIDE_ENDS) * ln, step)
        ds = np.arange(half + BESIDE_GAP_MM * k, half + BESIDE_REACH_MM * k + 1e-9, step)
        T, D = np.meshgrid(ts, ds, indexing="ij")
        bins = np.minimum(((T - BESIDE_ENDS * ln) / ((1 - 2 * BESIDE_ENDS) * ln) * BESIDE_BINS)
                          .astype(int), BESIDE_BINS - 1)
        for side, sign in enumerate((1.0, -1.0)):
            pts = p1 + T[..., None] * u + sign * D[..., None] * nrm
            x = np.rint(pts[..., 0]).astype(int).ravel()
            y = np.rint(pts[..., 1]).astype(int).ravel()
            ok = (x >= 0) & (x < W) & (y >= 0) & (y < H)
            ok[ok] = clear[y[ok], x[ok]]
            idx.append((y * W + x)[ok])
            reg.append(np.full(int(ok.sum()), i, np.int64))
            cell.append((side * BESIDE_BINS + bins.ravel())[ok])
    return (np.concatenate(idx).astype(np.int64), np.concatenate(reg),
            np.concatenate(cell).astype(np.int64))


def _check_beside_routes(readings: dict, regions, sample, model: SheetModel,
                         th: Mapping[str, float], valid, review_threshold: float) -> dict:
    """Flag a confident "empty" route with a stroke running along it just outside its outline
    (see ``BESIDE_GAP_MM``): a route drawn off its printed guide, beside it.

    Why (session 34): on the fresh corpus 3400000 an easy photo's green route was drawn 3.5 mm
    to the side of its dotted guide, parallel to it between the same two spaces, outside the
    route's 4 mm band; both readers saw nothing in the band and read it "empty" at 0.998, a
    confident error a person would not make. Ink is the readers' own test (coloured, or
    darker than the paper's dark limit, as for stains); a side must hold ink in most
    stretches along the route, so that a fill's overshoot or a stray dot does not count."""
    idx, reg, cell = per_model(model, "beside_routes", _beside_route_geometry)
    if idx.size == 0:
        return readings
    watch = np.zeros(len(regions), bool)
    for i, r in enumerate(regions):
        rd = readings[r.id]
        watch[i] = rd.mark == "empty" and not rd.review
    sel = watch[reg]
    if not sel.any():
        return readings
    ix, rg, cl = idx[sel], reg[sel], cell[sel]
    # (sampled through the whole list's interpolation taps, computed once per model's list)
    ink = _stain_coloured(linear_to_lab(sample(idx, keep=sel)), th)
    if valid is not None:
        ink &= np.asarray(valid, bool).reshape(-1)[ix]
    n = len(regions) * 2 * BESIDE_BINS
    hit = np.bincount(rg[ink] * 2 * BESIDE_BINS + cl[ink], minlength=n).reshape(-1, 2, BESIDE_BINS)
    stretches = (hit > 0).sum(axis=2).max(axis=1)
    return _flag_each(readings, regions, np.nonzero(watch & (stretches >= BESIDE_MIN_BINS))[0],
                      review_threshold,
                      lambda i: (f"a stroke beside the route ({int(stretches[i])} of "
                                 f"{BESIDE_BINS} stretches along it inked): it may be this route "
                                 "drawn off its line", {}))


def _flag_each(readings: dict, regions, hits, review_threshold: float, why) -> dict:
    """``readings`` with ``regions[i]`` flagged for each ``i`` in ``hits``: ``why(i)`` gives
    the reason and the features to add (a new dict only when one is flagged)."""
    out = readings
    for i in hits:
        r = regions[int(i)]
        if out is readings:
            out = dict(readings)
        reason, features = why(i)
        out[r.id] = _flagged(readings[r.id], review_threshold, reason, **features)
    return out


#: :func:`_check_through`: a confident "empty" region that one straight stroke runs through,
#: on past its outline on both sides, is flagged: a crossing-out the readers did not see inside
#: the region (a thin slash over a symbol's corner, or over a box whose print and the guard
#: around it leave them little to read). The stroke is looked for on lines through the region
#: (``THROUGH_ANGLES`` directions, each at ``THROUGH_OFFSETS`` of the region's half-width
#: across it), on the paper beyond its outline: ``THROUGH_BINS`` steps of ``THROUGH_STEP_MM``
#: from ``THROUGH_GAP_MM`` out, each step a short stretch across the line (``THROUGH_BAND_MM``
#: either side: a pencil's slash is neither straight nor in one of the directions tried),
#: clear of print (``THROUGH_PRINT_MM``: a photo's blur spreads print that far in faint ink)
#: and of every other region (``THROUGH_OTHER_MM``). Ink is the faint test (the readers' own
#: half margins, ``chroma_faint`` and ``dark_l_faint``), used, as everywhere, only to doubt
#: an "empty" reading. Treasures and entry points are left out: a route drawn to them runs on
#: through them (a Reefs node), with no crossing-out.
THROUGH_KINDS = ("box", "symbol", "star", "propeller")
THROUGH_ANGLES = 24
THROUGH_OFFSETS = (-0.6, -0.3, 0.0, 0.3, 0.6)
THROUGH_GAP_MM = 0.3
THROUGH_STEP_MM = 0.4
THROUGH_BINS = 6
THROUGH_BAND_MM = 0.6
THROUGH_PRINT_MM = 0.7
THROUGH_OTHER_MM = 0.6
#: a side counts when at least this many of its steps have clear paper, ...
THROUGH_MIN_VALID = 3
#: the first this many of them (from the outline out) hold ink, ...
THROUGH_NEAR = 2
#: ... and this share of them hold ink (both sides); a line both of whose sides have their
#: first clear steps within this of regions read as marked does not count (its ink is their
#: pencil running over their outlines, as into the narrow gaps beside an empty box between
#: two coloured ones)
THROUGH_MIN_SHARE = 0.75
THROUGH_NEIGHBOUR_MM = 1.5


class _Through(NamedTuple):
    """:func:`_check_through`'s samples on one model (:func:`_through_geometry`)."""

    regions: np.ndarray   # (Q,) the regions with lines, indices into model.region_ids
    upix: np.ndarray      # (U,) flat pixel indices: each region's distinct pixels in turn
    ustart: np.ndarray    # (Q + 1,) where each region's pixels start in upix
    slot: np.ndarray      # (U,) each pixel's place in the padded list: each region's pixels
                          # then one slot that stays False (ink never seen there)
    pstart: np.ndarray    # (Q,) where each region starts in the padded list
    dense: np.ndarray     # (Q, lines, 2, THROUGH_BINS, samples) int16: each sample's pixel,
                          # an index into its region's pixels (its pad slot: not clear paper)
    nv: np.ndarray        # (Q, lines, 2): clear steps on each side of each line
    near: np.ndarray      # (Q, lines, 2, THROUGH_BINS) bool: among the first THROUGH_NEAR
                          # clear steps of its side
    # the first pass, on the pixels of those steps only (a line whose sides are not inked
    # there scores 0, and so does a region with no other line: most regions)
    npix: np.ndarray      # (N,) flat pixel indices: each region's near steps' pixels in turn
    nstart: np.ndarray    # (Q + 1,) where each region's pixels start in npix
    nslot: np.ndarray     # (N,) each pixel's place in the padded list (as ``slot``)
    npstart: np.ndarray   # (Q,) where each region starts in that padded list
    ndense: np.ndarray    # (Q, lines, 2, THROUGH_NEAR, samples) int16: indices into the
                          # region's near pixels (its pad slot: not clear paper)
    usable: np.ndarray    # (Q, lines) bool: THROUGH_MIN_VALID clear steps on both sides
    nbrs: np.ndarray      # (Q, J) int64: the other regions near each region (-1: padding)
    nbr_near: np.ndarray  # (Q, lines, 2, J) bool: that region is within THROUGH_NEIGHBOUR_MM
                          # of the side's first clear steps


def _through_geometry(model: SheetModel) -> _Through:
    """The samples of :func:`_check_through` on ``model``: for each region of
    ``THROUGH_KINDS`` that can be crossed out, its lines' steps and each step's samples, as
    indices into the region's own distinct pixels (a photo samples each pixel once). Built
    once per model."""
    H, W = model.shape
    k = model.dpi / 25.4
    _, d_print = per_model(model, "clearances", _clearances)
    regions = [model.template.region(rid) for rid in model.region_ids]
    polys = [_region_polygon_px(r, k) for r in regions]
    all_regions = np.zeros((H, W), np.uint8)
    for p in polys:
        _fill(all_regions, p)
    gap, step, band = THROUGH_GAP_MM * k, THROUGH_STEP_MM * k, THROUGH_BAND_MM * k
    other_gap, print_gap = THROUGH_OTHER_MM * k, THROUGH_PRINT_MM * k
    ang = np.pi * np.arange(THROUGH_ANGLES) / THROUGH_ANGLES
    U = np.stack([np.cos(ang), np.sin(ang)], axis=1)        # (A, 2) along each line
    N = np.stack([-U[:, 1], U[:, 0]], axis=1)               # (A, 2) across it
    fo = np.asarray(THROUGH_OFFSETS, float)
    dts = np.array([-step / 4, step / 4])                   # two samples along a step ...
    ws = np.linspace(-band, band, 5)                        # ... by five across the line
    steps = np.arange(THROUGH_BINS)
    reach = gap + (THROUGH_BINS + 0.5) * step + band + 2
    L = THROUGH_ANGLES * len(fo)
    which, upix, ustart, dense, nv, near = [], [], [0], [], [], []
    npix, nstart, ndense, usable, nbrs, nbr_near = [], [0], [], [], [], []
    nbr_gap = THROUGH_NEIGHBOUR_MM * k
    for i, (r, poly) in enumerate(zip(regions, polys)):
        if r.kind not in THROUGH_KINDS or "crossed" not in r.marks or r.shape.type == "segment":
            continue
        lo = np.floor(poly.min(axis=0) - reach).astype(int)
        hi = np.ceil(poly.max(axis=0) + reach).astype(int)
        x0, y0, x1, y1 = max(lo[0], 0), max(lo[1], 0), min(hi[0], W), min(hi[1], H)
        if x1 <= x0 or y1 <= y0:
            continue
        own = np.zeros((y1 - y0, x1 - x0), np.uint8)
        _fill(own, poly - [x0, y0])
        others = all_regions[y0:y1, x0:x1].copy()
        others[own > 0] = 0
        d_other = cv2.distanceTransform(1 - others, cv2.DIST_L2, 5)
        clear = (d_other >= other_gap) & (d_print[y0:y1, x0:x1] >= print_gap) & (own == 0)
        c = (poly.min(axis=0) + poly.max(axis=0)) / 2
        half = np.abs((poly - c) @ N.T).max(axis=0)           # (A,) half-width across
        radius = float(np.hypot(*(poly.max(axis=0) - poly.min(axis=0)))) / 2 + 2
        ts = np.arange(-radius, radius, 0.5)
        # where each line (A, F) enters and leaves the region, at 0.5 px
        base = c + (fo[None, :, None] * half[:, None, None]) * N[:, None, :]    # (A, F, 2)
        pts = base[:, :, None, :] + ts[None, None, :, None] * U[:, None, None, :]
        xi = np.clip(np.floor(pts[..., 0]).astype(int) - x0, 0, x1 - x0 - 1)
        yi = np.clip(np.floor(pts[..., 1]).astype(int) - y0, 0, y1 - y0 - 1)
        inside = own[yi, xi] > 0                                              # (A, F, T)
        hit = inside.any(axis=2)
        t_hi = np.where(inside, ts, 0.0).max(axis=2, initial=0.0)
        t_lo = np.where(inside, ts, 0.0).min(axis=2, initial=0.0)
        flat = []
        for t_end, sgn in ((t_hi, 1.0), (t_lo, -1.0)):
            t = t_end[:, :, None] + sgn * (gap + (steps + 0.5) * step)[None, None, :]
            t = t[..., None] + dts                                             # (A, F, B, 2)
            P = (base[:, :, None, None, None, :]
                 + t[..., None, None] * U[:, None, None, None, None, :]
                 + ws[None, None, None, None, :, None] * N[:, None, None, None, None, :])
            x = np.floor(P[..., 0]).astype(int)
            y = np.floor(P[..., 1]).astype(int)
            ok = hit[:, :, None, None, None] & (x >= x0) & (x < x1) & (y >= y0) & (y < y1)
            ok[ok] = clear[y[ok] - y0, x[ok] - x0]
            flat.append(np.where(ok, y * W + x, -1).reshape(L, THROUGH_BINS, -1))
        pix = np.stack(flat, axis=1)                          # (L, 2, B, S) flat px or -1
        if not (pix >= 0).any():
            continue
        u, inv = np.unique(pix[pix >= 0], return_inverse=True)
        if u.size >= np.iinfo(np.int16).max:
            raise ValueError(f"region {r.id}: {u.size} pixels around it, too many for int16")
        d = np.full(pix.shape, u.size, np.int16)              # (the pad slot)
        d[pix >= 0] = inv
        which.append(i)
        upix.append(u)
        ustart.append(ustart[-1] + u.size)
        dense.append(d)
        ok = (pix >= 0).any(axis=3)
        nv.append(ok.sum(axis=2))
        near.append(ok & (np.cumsum(ok, axis=2) <= THROUGH_NEAR))
        # the first THROUGH_NEAR clear steps of each side (clear steps first, in order)
        first = np.argsort(~ok, axis=2, kind="stable")[:, :, :THROUGH_NEAR]
        npx = np.take_along_axis(pix, first[..., None], axis=2)    # (L, 2, NEAR, S)
        usable.append((nv[-1] >= THROUGH_MIN_VALID).all(axis=1))
        npx[~usable[-1]] = -1
        nu, ninv = np.unique(npx[npx >= 0], return_inverse=True)
        nd = np.full(npx.shape, nu.size, np.int16)
        nd[npx >= 0] = ninv
        npix.append(nu)
        nstart.append(nstart[-1] + nu.size)
        ndense.append(nd)
        # the other regions near each side's first clear steps
        js = [j for j, pj in enumerate(polys) if j != i
              and pj[:, 0].max() >= x0 - 1 and pj[:, 0].min() <= x1 + 1
              and pj[:, 1].max() >= y0 - 1 and pj[:, 1].min() <= y1 + 1]
        ys, xs = np.divmod(np.where(npx >= 0, npx, y0 * W + x0), W)
        ys, xs = ys - y0, xs - x0
        close = np.zeros(npx.shape[:2] + (len(js),), bool)
        for jj, j in enumerate(js):
            m = np.zeros((y1 - y0, x1 - x0), np.uint8)
            _fill(m, polys[j] - [x0, y0])
            if not m.any():
                continue
            dj = cv2.distanceTransform(1 - m, cv2.DIST_L2, 5)
            close[..., jj] = ((dj[ys, xs] < nbr_gap) & (npx >= 0)).any(axis=(2, 3))
        keep_j = close.any(axis=(0, 1))
        nbrs.append(np.asarray(js, np.int64)[keep_j])
        nbr_near.append(close[..., keep_j])
    ustart, nstart = np.asarray(ustart, np.int64), np.asarray(nstart, np.int64)
    slot, pstart = _padded_slots(ustart)
    nslot, npstart = _padded_slots(nstart)
    S = dts.size * ws.size
    shape = (0, L, 2, THROUGH_BINS, S)

    def stack(arrays, empty_shape, dtype):
        return np.stack(arrays) if arrays else np.zeros(empty_shape, dtype)
    z = np.zeros(0, np.int64)
    J = max((n.size for n in nbrs), default=0)
    nb = np.full((len(nbrs), J), -1, np.int64)
    nn = np.zeros((len(nbrs), L, 2, J), bool)
    for a, (n, c) in enumerate(zip(nbrs, nbr_near)):
        nb[a, :n.size] = n
        nn[a, ..., :n.size] = c
    return _Through(np.asarray(which, np.int64), np.concatenate(upix) if upix else z, ustart,
                    slot, pstart, stack(dense, shape, np.int16), stack(nv, shape[:3], np.int64),
                    stack(near, shape[:4], bool), np.concatenate(npix) if npix else z, nstart,
                    nslot, npstart, stack(ndense, (0, L, 2, THROUGH_NEAR, S), np.int16),
                    stack(usable, shape[:2], bool), nb, nn)


def _padded_slots(start: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For lists laid end to end (``start``: (Q + 1,) where each begins), each item's place
    in the same lists with one pad slot after each, and where each list begins there."""
    sizes = np.diff(start)
    return (np.arange(start[-1]) + np.repeat(np.arange(sizes.size), sizes),
            start[:-1] + np.arange(sizes.size))


def _faint_ink(sample, pix: np.ndarray, keep: np.ndarray, th: Mapping[str, float],
               valid) -> np.ndarray:
    """The faint ink test (:func:`_check_through`) on ``pix[keep]``."""
    ink = _stain_coloured(linear_to_lab(sample(pix, keep=keep)), th, faint=True)
    if valid is not None:
        ink &= np.asarray(valid, bool).reshape(-1)[pix[keep]]
    return ink


def through_scores(sample, model: SheetModel, th: Mapping[str, float], valid,
                   watch: np.ndarray, marked: np.ndarray | None = None) -> np.ndarray:
    """Per region (``model.region_ids`` order) in ``watch``, the best line's share of inked
    steps on its less inked side (:func:`_check_through`); 0 where no line has
    ``THROUGH_MIN_VALID`` clear steps on both sides, and for regions not watched.
    ``marked``: the regions read as marked, whose pencil may run over into the paper beside
    them (a line with both sides next to them does not count)."""
    out = np.zeros(len(model.region_ids))
    g = per_model(model, "through", _through_geometry)
    q = np.flatnonzero(watch[g.regions]) if g.regions.size else g.regions
    if q.size == 0:
        return out
    # first the pixels of each line's first clear steps, next to the outline: a region none
    # of whose lines has them inked on both sides scores 0 (most regions)
    w = watch[g.regions]
    keep = np.repeat(w, np.diff(g.nstart))
    padded = np.zeros(g.npix.size + g.regions.size, bool)
    padded[g.nslot[keep]] = _faint_ink(sample, g.npix, keep, th, valid)
    at = g.ndense[q].astype(np.int32)
    at += g.npstart[q].astype(np.int32)[:, None, None, None, None]
    beside = np.zeros(len(model.region_ids) + 1, bool)       # (index -1: padding)
    if marked is not None:
        beside[:-1] = np.asarray(marked, bool)

    def explained(r):
        # (regions r, lines): both sides' first clear steps next to marked regions
        return (g.nbr_near[r] & beside[g.nbrs[r]][:, None, None, :]).any(axis=3).all(axis=2)
    lines = padded[at].any(axis=4).all(axis=(2, 3)) & g.usable[q]     # (regions, lines)
    lines &= ~explained(q)
    c = q[lines.any(axis=1)]
    if c.size == 0:
        return out
    # then every pixel of those regions' lines (sampled once each; through the whole list's
    # interpolation taps, computed once per model's list)
    w = np.zeros_like(w)
    w[c] = True
    keep = np.repeat(w, np.diff(g.ustart))
    padded = np.zeros(g.upix.size + g.regions.size, bool)
    padded[g.slot[keep]] = _faint_ink(sample, g.upix, keep, th, valid)
    at = g.dense[c].astype(np.int32)
    at += g.pstart[c].astype(np.int32)[:, None, None, None, None]
    inked = padded[at].any(axis=4)                            # (regions, lines, 2, steps)
    # a side counts only with its first clear steps, next to the outline, all inked: a
    # stroke through the region leaves it there, a neighbour's fill running over its own
    # outline stops short of it
    from_outline = ~(g.near[c] & ~inked).any(axis=3)
    nv = g.nv[c]
    share = np.where((nv >= THROUGH_MIN_VALID) & from_outline,
                     inked.sum(axis=3) / np.maximum(nv, 1), 0.0).min(axis=2)
    out[g.regions[c]] = np.where(explained(c), 0.0, share).max(axis=1)
    return out


def _check_through(readings: dict, regions, sample, model: SheetModel, th: Mapping[str, float],
                   valid, review_threshold: float, score: np.ndarray | None = None) -> dict:
    """Flag a confident "empty" region that a straight stroke runs through (see
    ``THROUGH_KINDS``): a crossing-out the readers did not see inside it.

    Why (sessions 42-43): on the recipe's crossed-out dev corpora (a varied painter, a third
    of the regions crossed out) eleven crossings-out were read "empty" at 0.985-0.998, among
    them Crypts symbols slashed across a corner with a thin pale graphite line (the guard
    around the symbol's thick outline leaves the readers a few pixels in its middle, which the
    slash missed) and Reefs treasure boxes with a pale cross over their grey print. The
    constants were chosen on that corpus (xcal94000: 5 of its 12 confident errors flagged, 20
    right readings flagged) and on the spent 4600000 (12 right readings flagged on half of
    it); a stroke drawn along a symbol that stops inside its outline on one side, or one
    broken by the pencil's grain into short dashes, is still missed (docs/EVALUATION.md,
    "Sessions 42-43").

    ``score``: :func:`through_scores` measured beforehand on a set of regions that holds every
    confident "empty" reading of ``readings`` (each region's score depends on that region and
    the marks alone)."""
    watch = np.array([readings[r.id].mark == "empty" and not readings[r.id].review
                      for r in regions], bool)
    if not watch.any():
        return readings
    if score is None:
        marked = np.array([readings[r.id].mark != "empty" for r in regions], bool)
        score = through_scores(sample, model, th, valid, watch, marked)
    return _flag_each(readings, regions, np.nonzero(watch & (score >= THROUGH_MIN_SHARE))[0],
                      review_threshold,
                      lambda i: (f"a stroke runs through it ({score[i]:.0%} of the paper on its "
                                 "fainter side inked): it may be crossed out",
                                 {"through_share": float(score[i])}))


def _check_empty_swatches(readings: dict, regions, review_threshold: float) -> dict:
    """Flag every confident "empty" calibration swatch on a sheet whose other swatches were
    coloured (at least :data:`EMPTY_SWATCH_OTHERS` of them read as a pencil colour).

    A player who colours the calibration strip colours it whole, or nearly; a swatch left blank
    among coloured ones is more likely a pencil that does not show on this photo than one the
    player skipped. On the fresh corpus 2300000 (session 24) a purple swatch, coloured with a
    pale pencil and blurred by 2.2 px of defocus under 3,600 K light, showed nothing and was read
    "empty" at 0.9993 by both readers; all five swatches were coloured, and on that photo,
    regenerated in session 27, two others read as coloured (red, blue), so the swatch is now
    flagged. An absence of ink is weak evidence where the sheet says ink was expected. The
    reading keeps its mark; a person looks. Its cost, measured (docs/EVALUATION.md, session
    27): 20-40 truly empty swatches flagged per 300 simulated photos (the simulator leaves a
    swatch of a coloured strip blank 5 % of the time); a swatch does not score, and on the
    sheets checked the report listed such a swatch as uncertain but not mattering (verdict OK).
    """
    swatches = [r.id for r in regions if r.kind == "swatch" and r.id in readings]
    coloured = [rid for rid in swatches if readings[rid].mark in PENCIL_COLOURS]
    if len(coloured) < EMPTY_SWATCH_OTHERS:
        return readings
    out = dict(readings)
    for rid in swatches:
        rd = readings[rid]
        if rd.mark != "empty" or rd.review:
            continue
        out[rid] = _flagged(
            rd, review_threshold, f"swatch left empty among coloured ones ({len(coloured)} others "
            "coloured): its pencil may not show on this photo")
    return out


def _predict_rows(learned, matrix: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``learned.predict_proba(matrix, allowed=allowed)``, the two halves of the rows on two
    threads when allowed (vision._geom_threads). Each row's probabilities depend on that row
    alone, and the tree walk's numpy steps release the GIL: the same values in about half the
    wall time (the walk is the classifier's largest single cost, ~7 ms a 12 MP photo)."""
    n = matrix.shape[0]
    if n < 32 or threads() < 2:
        return learned.predict_proba(matrix, allowed=allowed)
    m = n // 2
    hi, lo = both(lambda: learned.predict_proba(matrix[m:], allowed=allowed[m:]),
                  lambda: learned.predict_proba(matrix[:m], allowed=allowed[:m]))
    return np.concatenate([lo, hi])


def _decide(r: Region, i: int, f: _Features, pal: Palette, *, review_threshold: float,
            empty_cover: float, cover_scale: float, x_threshold: float, x_scale: float,
            min_pixels: int, written_cover: float, is_line: bool, line_cover: float,
            line_scale: float, prior: Palette | None = None,
            chroma_noise: float = 1.0,
            hues: Mapping[str, tuple[float, float]] | None = None) -> RegionReading:
    # (hues: pencil name -> (hue, spread) of ``pal``, looked up once per sheet by the caller)
    if hues is None:
        hues = {c.name: (c.hue_deg, c.hue_spread_deg) for c in pal.colours}
    allowed = list(r.marks)
    colours = [m for m in allowed if m in hues]
    can_cross = "crossed" in allowed
    cover = float(f.cover[i])
    p_cross, fit, hue_noise, d = 0.0, 0.0, 0.0, {}
    # Evidence that something is there: the (centre-weighted) area covered; for a cross (thin
    # strokes over a small share of the area) the coverage of the diagonal bands; for a
    # connection the share of its length that carries a stroke.
    if is_line:
        evidence = float(f.line_cover[i])
    else:
        # a stroke along most of a diagonal, with the sectors bare, is a mark even when it
        # covers little area
        x_line = float(max(_sig((f.dlen_min[i] - 0.6) / 0.08), _sig((f.dlen_max[i] - 0.75) / 0.06))
                       * _sig((0.15 - f.off_cov[i]) / 0.03)) if f.x_ok[i] else 0.0
        evidence = max(cover, 0.15 * x_line) if can_cross else cover
    if is_line:
        p_marked = _sig((evidence - line_cover) / line_scale)
    elif "written" in allowed and not colours:
        # handwriting covers little of a number box; texels are still far above paper noise
        p_marked = _sig((evidence - written_cover) / (cover_scale * 0.5))
    else:
        p_marked = _sig((evidence - empty_cover) / cover_scale)
    # Faint evidence (a light hand, a washed-out photo) cannot make a mark, but it makes
    # "empty" doubtful: a person should look.
    faint_ev = float(f.faint_line[i]) if is_line else float(f.faint_cover[i])
    # (a faint trail along most of a connection; for areas, faint texels over a good part of
    # the region: print residue and JPEG fringes stay well below that)
    faint_thr = 0.5 if is_line else 0.25
    p_faint = _sig((faint_ev - faint_thr) / (line_scale if is_line else cover_scale))
    if is_line:
        # Only for connections: a faint trail along a segment is structure that noise does
        # not make, while faint texels inside a printed area are mostly print fringe.
        p_marked = max(p_marked, 0.5 * p_faint)
    elif "written" in allowed and not colours:
        # A number box is bare, unprinted paper: faint strokes over even a small part of it
        # (light graphite digits) are far beyond what its paper noise leaves, so "empty" is
        # doubtful (a person should look), though too faint to call written.
        p_marked = max(p_marked, 0.5 * _sig((float(f.faint_cover[i]) - 0.06) / 0.015))
    else:
        if can_cross and f.x_ok[i]:
            # likewise a faint trail along most of a diagonal: a light graphite slash or cross
            p_marked = max(p_marked, 0.5 * _sig((f.faint_dlen_max[i] - 0.7) / 0.06))
        if colours:
            # A pale pencil (a hard lead, a light hand) may stay under the "coloured" level, but
            # faint texels of one hue over a good part of the region are not paper: "empty"
            # is doubtful and a person should look.
            p_marked = max(p_marked, 0.5 * (_sig((float(f.faint_tint[i]) - 0.12) / 0.02)
                                            * _sig((float(f.faint_hue_r[i]) - 0.85) / 0.03)))
    probs: dict[str, float] = dict.fromkeys(allowed, 0.0)
    probs["empty"] = 1.0 - p_marked
    coloured_share = float(f.coloured[i] / max(f.cover[i], 1e-9)) if cover > 0 else 0.0
    # Dark pencils (blue, purple, green) in dim light leave some texels too dark to show
    # their chroma; only a mark that is mostly grey is graphite.
    p_grey = _sig((0.25 - coloured_share) / 0.04)
    if "written" in allowed and not colours:
        probs["written"] = p_marked
    else:
        if can_cross:
            # Grey texels dominate -> graphite: crossed, whatever its shape. Coloured: a cross
            # covers the diagonal arms and leaves the sectors between them bare; a fill (even
            # a light or partial one) covers the sectors too. Neither -> undecided (review).
            off = float(f.off_cov[i])
            dmin, dmax = float(f.diag_min[i]), float(f.diag_max[i])
            # X: both diagonals inked, sectors bare. Slash: one diagonal, thin (a fill along a
            # diagonal covers a broad swath, a slash a stroke). Fill: sectors or area covered.
            lmin, lmax = float(f.dlen_min[i]), float(f.dlen_max[i])
            lx = (_sig((dmin - off - 0.15) / 0.04) * _sig((0.15 - off) / 0.03)
                  * _sig((lmin - 0.6) / 0.08))
            # slash: one stroke along most of one diagonal, sectors bare, little area
            ls = (_sig((lmax - 0.7) / 0.06) * _sig((0.15 - off) / 0.03)
                  * _sig((0.35 - cover) / 0.05))
            if not f.x_ok[i]:
                lx = ls = 0.0  # too little unprinted area to see arms and sectors
            lx_raw, ls_raw = lx, ls
            # Colouring a region in covers it; crossing it out (an X, a slash, a scribble)
            # leaves most of it bare. A sparse mark whose strokes run one way (a light
            # hatch) may still be a fill: that case is left undecided.
            # (density counts faint texels too: a light hand's fill is still a fill)
            dense = _sig((max(cover, float(f.faint_cover[i])) - 0.6) / 0.04)
            if f.x_ok[i]:
                # ... and a fill covers the sectors between the diagonals, not only the arms
                dense *= _sig((off - 0.3) / 0.05)
            incoherent = _sig((0.4 - float(f.coherence[i])) / 0.06)
            # (one pencil: strokes of several colours are overshoots from neighbours or print
            # fringe, not a crossing-out; this holds for the X and slash patterns too)
            one_pencil = _sig((float(f.purity[i]) - 0.8) / 0.05)
            lx, ls = lx * one_pencil, ls * one_pencil
            # A sparse, many-way scribble in one pencil may cross a region out or be a light,
            # careless fill: which one, only a person can say. It is "cannot tell", not
            # evidence for either (with bare paper between its loops it is no dense fill).
            scribble = ((1.0 - dense) * incoherent * one_pencil
                        * _sig((cover - 0.15) / 0.03)
                        * _sig((float(f.bare_core[i]) - 0.03) / 0.015))
            lx = max(lx, ls)
            if not f.x_ok[i]:
                lx = 0.0  # too little unprinted area to tell a crossing-out from a fill
            # Parallel strokes over a good part of the region are hatching (a light fill) as
            # much as they could be a thick slash: evidence for a fill, so those stay undecided.
            coh = float(f.coherence[i])
            hatch = _sig((coh - 0.45) / 0.07) * _sig((cover - 0.2) / 0.05)
            lx *= _sig((0.6 - coh) / 0.07) if lx > ls else 1.0
            lf = max(dense, hatch)
            # `u` is the mass of "cannot tell": when neither pattern is clear, p_x stays near
            # 0.5 and the reading goes to review instead of a coin toss.
            # (it shrinks as one pattern becomes decisive: a region covered edge to edge is
            # no more "maybe crossed" than the evidence says)
            u = 0.002 + 0.018 * (1.0 - max(lx, lf)) + (scribble if f.x_ok[i] else 0.0)
            if f.x_ok[i]:
                p_x = (lx + 0.5 * u) / (lx + lf + u)
            else:
                # Arms and sectors cannot be seen (a small or mostly printed region): only a
                # coverage no pair of strokes reaches says "fill"; anything less is undecided.
                # (two strokes of a pencil's width cover well under three quarters of a
                # region; a fill, even a careless one, covers more)
                # Strokes laid one way over most of the region are hatching: a fill too.
                lf_hidden = max(_sig((cover - 0.72) / 0.025),
                                _sig((coh - 0.6) / 0.03) * _sig((cover - 0.55) / 0.04))
                p_x = 0.5 * (1.0 - lf_hidden)
            # Graphite (grey texels) crosses out, but grey alone is also shadow, dirt, print
            # bleed or a dark pencil in dim light: crossed is sure only with a crossing-out's
            # structure (X, slash, scribble) or a coverage no stray grey reaches.
            # (the diagonal lengths are measured even where the sectors are hidden by print)
            # (independent cues of line work combine: any one of them is evidence)
            cues = (lx_raw, ls_raw, _sig((cover - 0.3) / 0.04),
                    _sig((lmin - 0.45) / 0.05), _sig((lmax - 0.65) / 0.05),
                    # grey strokes with bare paper between them: line work, not a smudge
                    _sig((cover - 0.15) / 0.03) * _sig((float(f.bare_core[i]) - 0.08) / 0.03))
            s_grey = 1.0 - math.prod(1.0 - c for c in cues)
            p_cross = p_grey * (0.5 + 0.5 * s_grey) + (1 - p_grey) * p_x
        else:
            p_cross = 0.0
        if "written" in allowed:
            probs["written"] = p_marked * (1 - p_cross) * (0.0 if colours else 1.0)
        if colours:
            # A hue measured on pale texels is uncertain: chroma noise of this photo's paper
            # (sd) turns into hue noise of about sd / C radians, so the pencils' spreads are
            # widened by it (faint or washed-out marks do not separate red from orange).
            hue_noise = math.degrees(3.0 * chroma_noise / max(float(f.chroma[i]), 1e-3))
            # (hue_diff on plain floats: Python's float remainder is numpy's, 20x cheaper)
            h_i = float(f.hue[i])
            d, lik = {}, {}
            for c in colours:  # (one pass: the same values as two comprehensions)
                h_c, spread = hues[c]
                z = abs((h_i - h_c + 180.0) % 360.0 - 180.0) / math.hypot(spread, hue_noise)
                d[c] = z
                lik[c] = math.exp(-0.5 * z ** 2)
            tot = sum(lik.values())
            if tot < 1e-12:
                pc = {c: 1.0 / len(colours) for c in colours}
            else:
                pc = {c: v / tot for c, v in lik.items()}
            # A hue far from every pencil (best distance beyond 3 spreads) is not trusted;
            # nor is a grey mark where only colours are allowed.
            fit = _sig((3.0 - min(d.values())) / 0.4)
            if not can_cross:
                fit *= 1.0 - p_grey
            for c in colours:
                probs[c] = p_marked * (1 - p_cross) * pc[c] * max(fit, 1e-6)
        if can_cross:
            probs["crossed"] = p_marked * p_cross
    raw = dict(probs)
    tot = sum(probs.values())
    if tot <= 0:
        probs = {m: 1.0 / len(allowed) for m in allowed}
    else:
        probs = {m: p / tot for m, p in probs.items()}
    alts = tuple(sorted(probs.items(), key=lambda kv: -kv[1]))
    mark, conf = alts[0]
    # The mass no allowed mark explains ("a hue no pencil has", "marked, but neither a fill
    # nor a crossing-out") must lower the confidence, not be renormalised onto the mark left.
    conf = min(conf, raw[mark]) if tot > 0 else conf
    # Probability lost to "no pencil fits" or "not sure it is marked" must lower confidence,
    # not be renormalised away.
    if mark in hues:
        conf = min(conf, p_marked, _sig((3.0 - d[mark]) / 0.4))
        # a mix of colours in one region
        conf = min(conf, _sig((f.purity[i] - 0.6) / 0.06))
        if "crossed" not in allowed:
            conf = min(conf, 1.0 - p_grey)
        if prior is not None and pal is not prior:
            # Calibration moves the pencils to where this photo puts them; when it names a
            # region otherwise than the prior clearly would (a hue cluster matched to the
            # neighbouring pencil shifts every region of that colour at once), the two
            # readings of the photo disagree and a person should look.
            dp = prior.distances(float(f.hue[i]), names=colours)
            best_prior = min(dp, key=dp.get)
            if best_prior != mark:
                ratio = math.exp(-0.5 * (dp[best_prior] ** 2 - dp[mark] ** 2))
                if ratio > 3.0:
                    conf = min(conf, 0.9)
    reason = ""
    if f.n[i] < min_pixels:
        reason = "too few unprinted pixels to read"
        conf = min(conf, 0.5)
    review = conf < review_threshold or bool(reason)
    if review and not reason:
        reason = f"low confidence ({alts[0][0]} {alts[0][1]:.2f}"
        reason += f" vs {alts[1][0]} {alts[1][1]:.2f})" if len(alts) > 1 else ")"
    # (two literal dicts, the same keys in the same order: no temporary dicts to unpack)
    if is_line:
        feats = {"pixels": int(f.n[i]), "coverage": float(f.cover[i]),
                 "length_coverage": float(f.line_cover[i]), "coloured": float(f.coloured[i]),
                 "dark": float(f.dark[i]), "hue_deg": float(f.hue[i]),
                 "chroma": float(f.chroma[i]), "purity": float(f.purity[i]),
                 "coherence": float(f.coherence[i]), "faint_coverage": float(f.faint_line[i])}
    else:
        feats = {"pixels": int(f.n[i]), "coverage": float(f.cover[i]),
                 "coloured": float(f.coloured[i]), "dark": float(f.dark[i]),
                 "hue_deg": float(f.hue[i]), "chroma": float(f.chroma[i]),
                 "purity": float(f.purity[i]), "coherence": float(f.coherence[i]),
                 "faint_coverage": float(f.faint_cover[i]), "x_score": float(f.x_score[i]),
                 "x_band": float(f.band_cov[i]), "x_length": float(f.dlen_min[i]),
                 "slash_length": float(f.dlen_max[i]), "sector_coverage": float(f.off_cov[i]),
                 "bare_core": float(f.bare_core[i]), "faint_tint": float(f.faint_tint[i]),
                 "faint_hue_agreement": float(f.faint_hue_r[i])}
    internals = {"p_marked": p_marked, "p_cross": float(p_cross), "p_grey": p_grey,
                 "fit": float(fit), "hue_noise": float(hue_noise), "hue_z": d, "raw": raw}
    return RegionReading(r.id, r.kind, mark, float(conf), bool(review), alts, feats, reason), internals


__all__ = ["REVIEW_THRESHOLD", "RegionReading", "SheetMarks", "SheetModel", "build_sheet_model",
           "classify_sheet"]
