"""Find objects lying on the sheet from their shape: a pencil or a pen (a straight bar).

A pencil put down on the sheet before the photo hides the print and the marks under it, and the
reader must know which regions it covers. Its colour is no help in general (a dark purple,
blue or black lacquer is almost grey; over a grid of boxes there is little bare paper around it
to see a colour on), but its *shape* is: two long, straight, parallel edges a pencil's width
apart (5-10 mm) that are no part of the printed template, with the body between them, which
differs from the paper around it in the same way all along (an opaque object: its edges have
opposite signs across it), over 40 mm or more.

How (:func:`find_bars`), on a working copy of the rectified photo at ``WORK_PX_PER_MM``:

1. Grey, divided by a coarse estimate of the paper's light (the photo's upper envelope over
   blocks larger than a pencil is wide), so that the edge thresholds mean the same under
   shading and in a dim or warm photo.
2. Edges (Canny), less those near an edge of the clean render (``TEMPLATE_MARGIN_MM``) that
   runs the same way (``ORIENTATION_BINS``): the print's own edges (boxes, rules, text) are
   never a bar's, while a bar's edge crossing the print keeps its pixels there.
3. Straight pieces of them (probabilistic Hough), the longest first: each is a candidate for
   one edge of a bar.
4. Each candidate line is straightened out: the working image is sampled on a strip along it
   (along the whole line across the frame, ``STRIP_HALF_MM`` on each side), and its second
   edge is looked for at ``MIN_WIDTH_MM`` to ``MAX_WIDTH_MM`` beside it, of the opposite sign,
   along the piece that was found.
5. Row by row along the strip, the bar is *there* where both edges show and the body between
   them (1.5 mm in from them) is as along the rest of it (``BODY_TOLERANCE``: an opaque
   object is one and the same all along; a row of marks changes colour from box to box and
   shows paper between them); its extent is the longest such run with few gaps
   (``RUN_GAP_MM``, ``MIN_ROW_SHARE``), ``MIN_LENGTH_MM`` or more, whose body has no texture
   along it (``MAX_TEXTURE``: a hatched mark's strokes) and whose edges are strong
   (``MIN_SCORE``). A pencil's sharpened end (its wooden cone and tip) has no parallel edges:
   the end (inside the frame) beyond which the middle is darker than the paper is taken for
   the tip, and the bar is taken on over its cone (``CONE_MIN_MM`` to ``CONE_MAX_MM``).
6. Bars found twice (from both of their edges, or from a glare stripe) are merged, and
   pieces of one bar along one axis (where something broke its edges) joined.
7. An object hides the print under it: where the template prints something across the bar's
   body (a box's side, a rule), the body must not darken there (``PRINT_SEEN_MAX``). A row of
   boxes coloured in with pencil shows its printed sides through the colour, and passes every
   test above when its marks are alike in grey (session 40: row 3 of Crypts level 1, filled
   squares 10.2 mm tall, red and green, on 3 of ~700 plain photos).

Everything is measured on edges and local contrast, never on absolute colour: the photo is
not light-normalised (shading and colour cast remain).

The detector is built for real pencils and pens (any colour, with or without a shadow, with a
glare stripe along them), not for the simulator's painting of one
(``scripts/make_variants.py --kind pencil``), which is only what it was measured on.
"""

from __future__ import annotations

from typing import NamedTuple

import cv2
import numpy as np

#: Resolution of the working image (px per mm): a pencil 6-9 mm wide is 12-18 px across.
WORK_PX_PER_MM = 2.0
#: A bar's width (mm): between its two parallel edges.
MIN_WIDTH_MM, MAX_WIDTH_MM = 5.0, 10.0
#: A bar is at least this long (mm) between its parallel edges (its cone not counted).
MIN_LENGTH_MM = 40.0
#: Straight edge pieces shorter than this (mm) start no candidate.
MIN_PIECE_MM = 14.0
#: Gaps (mm) the Hough transform bridges within one edge piece.
PIECE_GAP_MM = 4.0
#: Image edges within this distance (mm) of an edge of the clean render are the print's.
TEMPLATE_MARGIN_MM = 1.0
#: Edge orientations are told apart in this many bins (of 180 deg): an image edge near a
#: print edge is the print's only if they run the same way.
ORIENTATION_BINS = 8
#: Canny's thresholds on the light-normalised grey (paper at ``PAPER_LEVEL``).
PAPER_LEVEL = 200.0
CANNY_LOW, CANNY_HIGH = 50, 120
#: Half the width (mm) of the strip sampled across a candidate line.
STRIP_HALF_MM = 13.0
#: An edge's step across it (fraction of the paper's level, over 1 mm) for it to show in a row.
EDGE_STEP = 0.08
#: Gaps (mm) in a bar's run of rows that are bridged (a print line, a mark crossing its edge).
RUN_GAP_MM = 6.0
#: Share of a bar's rows (within its run) that must show both edges.
MIN_ROW_SHARE = 0.6
#: A sharpened end: the bar is taken on beyond the end of its parallel edges where its middle
#: is darker than the paper beside it by ``CONE_DARK`` (of the paper's level) on average over
#: 12 mm, as far as it stays so, ``CONE_MIN_MM`` to ``CONE_MAX_MM`` (a pencil's wooden cone
#: can be as pale as the paper, and its tip is a point).
CONE_MAX_MM, CONE_MIN_MM = 22.0, 13.0
CONE_DARK = 0.04
#: A row's body is the bar's if within this share of the bar's contrast of its median.
BODY_TOLERANCE = 0.3
#: The body's texture along the bar (mean step between neighbouring rows) at most this share
#: of its contrast.
MAX_TEXTURE = 0.12
#: Pieces of one bar along one axis with a gap of at most this (mm) are joined.
JOIN_GAP_MM = 30.0
#: A bar's score (share of its rows with both edges times their mean step, of the paper's level)
#: at least this: a real pencil's edges are sharp and strong (0.25-0.55 on the corpora), a row
#: of hatched marks that passes the other tests has weak, broken ones (0.10-0.20).
MIN_SCORE = 0.2
#: Candidate lines examined at most (the longest pieces first).
MAX_CANDIDATES = 16
#: The print seen through a bar's body: how much darker the body is (of the paper's level)
#: where the render prints across it than where it does not, over the render's own difference
#: there. A bar is dropped beyond this. An opaque object shows nothing of the print under it
#: (pencils on the pencil copies of spent corpora 4000000, 4100000 and 1370000: at most 0.24,
#: 99 % under 0.15, over 378 bars); pencil marks coloured into a row of boxes show the boxes'
#: printed sides as dark as on bare paper or more (2.7-3.4 on the three false bars).
PRINT_SEEN_MAX = 0.6
#: ... measured only where the render prints across the body on this many rows or more (working
#: px), with a difference of at least ``PRINT_MIN_STEP`` (0..1) there: otherwise no evidence.
PRINT_MIN_ROWS, PRINT_MIN_STEP = 3, 0.05


class Bar(NamedTuple):
    """A straight bar lying on the sheet (a pencil, a pen), in template mm.

    Attributes
    ----------
    p0_mm, p1_mm : tuple of float
        The two ends of its axis (x right, y down, template mm), its sharpened end included.
    width_mm : float
        Its width (between its two parallel edges).
    score : float
        Its evidence: the share of its rows showing both edges times their mean contrast
        (for documentation and debugging only).
    """

    p0_mm: tuple[float, float]
    p1_mm: tuple[float, float]
    width_mm: float
    score: float

    @property
    def length_mm(self) -> float:
        return float(np.hypot(self.p1_mm[0] - self.p0_mm[0], self.p1_mm[1] - self.p0_mm[1]))


def _orientation_bin(gx: np.ndarray, gy: np.ndarray) -> np.ndarray:
    """The bin (0..ORIENTATION_BINS-1) of the gradient direction (modulo 180 deg)."""
    ang = np.arctan2(gy, gx) % np.pi
    return (np.round(ang / (np.pi / ORIENTATION_BINS)).astype(np.intp)) % ORIENTATION_BINS


def _working_frame(shape, dpi: float) -> tuple[int, float]:
    """``(levels, mm)``: how many times a frame of ``shape`` at ``dpi`` is halved (Gaussian
    pyramid) to the nearest of ``WORK_PX_PER_MM``, and the working px per mm then."""
    h, w = shape[:2]
    mm, levels = dpi / 25.4, 0
    while mm / 2 >= WORK_PX_PER_MM / np.sqrt(2) and min(h, w) >= 64:
        h, w, mm, levels = (h + 1) // 2, (w + 1) // 2, mm / 2, levels + 1
    return levels, mm


def print_render(expected: np.ndarray, dpi: float) -> np.ndarray:
    """The clean render ``expected`` (at ``dpi``) in :func:`find_bars`' working frame, grey
    (float32, 0..1; coloured print as dark as its darkest channel), read-only. It depends on
    the template alone: the pipeline builds it once per sheet model
    (``vision._cache.per_model``) and passes it to :func:`find_bars`."""
    levels, _ = _working_frame(expected.shape, dpi)
    h, w = expected.shape[:2]
    for _ in range(levels):
        h, w = (h + 1) // 2, (w + 1) // 2
    e = cv2.resize(np.asarray(expected, np.float32), (w, h), interpolation=cv2.INTER_AREA)
    if e.ndim == 3:
        e = e.min(axis=2)  # (coloured print too)
    e = np.ascontiguousarray(e, np.float32)
    e.setflags(write=False)
    return e


def print_edge_masks(expected: np.ndarray, dpi: float,
                     render: np.ndarray | None = None) -> np.ndarray:
    """Where the clean render ``expected`` (at ``dpi``) has an edge, within
    ``TEMPLATE_MARGIN_MM``, by the edge's orientation: (ORIENTATION_BINS, h, w) bool in
    :func:`find_bars`' working frame. It depends on the template alone: the pipeline builds it
    once per sheet model (``vision._cache.per_model``) and passes it to :func:`find_bars`.
    ``render``: :func:`print_render` of the same (made here when not given)."""
    _, mm = _working_frame(expected.shape, dpi)
    e = print_render(expected, dpi) if render is None else render
    h, w = e.shape
    e8 = np.clip(e * PAPER_LEVEL + 0.5, 0, 255).astype(np.uint8)
    edges = cv2.Canny(e8, CANNY_LOW, CANNY_HIGH, L2gradient=True)
    ys, xs = np.nonzero(edges)
    gx = cv2.Sobel(e8, cv2.CV_32F, 1, 0)[ys, xs]
    gy = cv2.Sobel(e8, cv2.CV_32F, 0, 1)[ys, xs]
    x = (np.arctan2(gy, gx) % np.pi) / (np.pi / ORIENTATION_BINS)
    b0 = np.floor(x).astype(np.intp) % ORIENTATION_BINS
    b1 = np.ceil(x).astype(np.intp) % ORIENTATION_BINS
    r = max(1, int(round(TEMPLATE_MARGIN_MM * mm)))
    disk = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * r + 1, 2 * r + 1))
    masks = np.zeros((ORIENTATION_BINS, h, w), bool)
    for i in range(ORIENTATION_BINS):
        m = np.zeros((h, w), np.uint8)
        near = (b0 == i) | (b1 == i)  # (an edge between two bins counts in both)
        m[ys[near], xs[near]] = 1
        masks[i] = cv2.dilate(m, disk) > 0
    masks.setflags(write=False)
    return masks


def _paper_light(g: np.ndarray, mm: float) -> np.ndarray:
    """The paper's brightness around every pixel of ``g`` (float32): the upper envelope of the
    grey over blocks of ~8 mm (wider than a pencil), smoothed."""
    h, w = g.shape
    k = max(1, int(round(8.0 * mm / 2)))  # block side, px
    hs, ws = max(1, h // k), max(1, w // k)
    small = cv2.resize(g, (ws, hs), interpolation=cv2.INTER_AREA)
    small = cv2.dilate(small, np.ones((3, 3), np.uint8))
    small = cv2.GaussianBlur(small.astype(np.float32), (0, 0), 1.0)
    return np.maximum(cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR), 8.0)


def _working_grey(image: np.ndarray, dpi: float) -> tuple[np.ndarray, float]:
    """``(norm, mm)``: the photo ``image`` (RGB or grey, at ``dpi``) in grey, halved (Gaussian
    pyramid) to the nearest of ``WORK_PX_PER_MM`` and divided by the paper's light
    (:func:`_paper_light`, paper at ``PAPER_LEVEL``), float32; ``mm``: its px per mm."""
    image = np.asarray(image)
    g = image if image.ndim == 2 else cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    levels, mm = _working_frame(g.shape, dpi)
    for _ in range(levels):
        g = cv2.pyrDown(g)
    return g.astype(np.float32) * (PAPER_LEVEL / _paper_light(g, mm)), mm


def _runs(on: np.ndarray, gap: int) -> list[tuple[int, int]]:
    """(start, stop) of the runs of ``on`` with gaps of at most ``gap`` rows bridged."""
    idx = np.flatnonzero(on)
    if idx.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(idx) > gap + 1)
    starts = np.r_[idx[0], idx[breaks + 1]]
    stops = np.r_[idx[breaks], idx[-1]] + 1
    return list(zip(starts.tolist(), stops.tolist()))


def find_bars(image: np.ndarray, expected: np.ndarray, dpi: float, *,
              valid: np.ndarray | None = None,
              print_edges: np.ndarray | None = None,
              render: np.ndarray | None = None) -> list[Bar]:
    """The straight bars (pencils, pens) lying on the sheet.

    Parameters
    ----------
    image : (H, W, 3) uint8 ndarray
        The rectified photo in the template frame (RGB, not light-normalised).
    expected : (H, W, 3) or (H, W) float ndarray
        The clean render of the template at the same size (0..1), as
        ``vision.marks.SheetModel.expected``.
    dpi : float
        The frame's resolution (``px = mm * dpi / 25.4``).
    valid : (H, W) bool ndarray, optional
        Pixels that came from inside the photo.
    print_edges : ndarray, optional
        :func:`print_edge_masks` of ``expected`` at ``dpi`` (built here when not given).
    render : ndarray, optional
        :func:`print_render` of ``expected`` at ``dpi`` (made here when not given).

    Returns
    -------
    list of Bar
        Strongest first; empty when nothing bar-shaped lies on the sheet.
    """
    norm, mm = _working_grey(image, dpi)  # (mm: working px per mm)
    h, w = norm.shape
    norm8 = np.clip(norm, 0, 255).astype(np.uint8)
    edges = cv2.Canny(norm8, CANNY_LOW, CANNY_HIGH, L2gradient=True)
    # the print's own edges out: an edge pixel near an edge of the render of the same
    # orientation (a bar crossing the print keeps its edges where it crosses)
    ys, xs = np.nonzero(edges)
    if render is None:
        render = print_render(expected, dpi)
    if ys.size:
        gx = cv2.Sobel(norm8, cv2.CV_32F, 1, 0)[ys, xs]
        gy = cv2.Sobel(norm8, cv2.CV_32F, 0, 1)[ys, xs]
        if print_edges is None:
            print_edges = print_edge_masks(expected, dpi, render)
        printed = print_edges[_orientation_bin(gx, gy), ys, xs]
        edges[ys[printed], xs[printed]] = 0
    if valid is not None:
        vs = cv2.resize(np.asarray(valid, np.uint8), (w, h), interpolation=cv2.INTER_NEAREST)
        edges[cv2.erode(vs, np.ones((5, 5), np.uint8)) == 0] = 0
    segs = cv2.HoughLinesP(edges, 1, np.pi / 180, threshold=int(MIN_PIECE_MM * mm * 0.6),
                           minLineLength=MIN_PIECE_MM * mm, maxLineGap=PIECE_GAP_MM * mm)
    if segs is None:
        return []
    segs = segs.reshape(-1, 4).astype(np.float64)
    lens = np.hypot(segs[:, 2] - segs[:, 0], segs[:, 3] - segs[:, 1])
    seen: list[tuple[float, float]] = []
    found = []
    for i in np.argsort(-lens):
        if len(seen) >= MAX_CANDIDATES:
            break
        x0, y0, x1, y1 = segs[i]
        d = np.array([x1 - x0, y1 - y0]) / max(lens[i], 1e-9)
        if d[0] < 0 or (d[0] == 0 and d[1] < 0):
            d = -d
        n = np.array([-d[1], d[0]])
        theta, rho = float(np.arctan2(d[1], d[0])), float(n @ (x0, y0))
        if any(abs(theta - t) < np.radians(2.0) and abs(rho - q) < 1.0 * mm for t, q in seen):
            continue
        seen.append((theta, rho))
        sa, sb = sorted((float(d @ (x0, y0)), float(d @ (x1, y1))))
        bar = _bar_along(norm, mm, d, n, rho, sa, sb)
        if bar is not None:
            found.append(bar)
    scale = dpi / 25.4 / mm  # (a working px's side in frame px)

    def to_mm(p):
        return tuple(float(((c + 0.5) * scale - 0.5) * 25.4 / dpi) for c in p)

    return [Bar(to_mm(p0), to_mm(p1), float(wd / mm), float(sc))
            for sc, p0, p1, wd in _merge(found, mm)
            if not _print_seen(norm, render, mm, p0, p1, wd) > PRINT_SEEN_MAX]


#: :func:`object_mask`: the mask reaches this far (mm) beyond an object's sides and ends: its
#: cast shadow on the paper (a pencil's is 1.5-4 mm off its side) and its blurred edge.
OBJECT_MARGIN_MM = 4.0


def object_mask(objects, shape: tuple[int, int], dpi: float) -> np.ndarray:
    """(H, W) bool: the pixels of the template frame under the objects lying on the sheet and
    their shadows. ``objects``: ``(x0, y0, x1, y1, width)`` in template mm (the axis's ends
    and the width, ``vision.marks.Stain.objects``), widened by ``OBJECT_MARGIN_MM`` on every
    side."""
    h, w = shape[:2]
    mask = np.zeros((h, w), np.uint8)
    k = dpi / 25.4
    m = OBJECT_MARGIN_MM
    for x0, y0, x1, y1, width in objects:
        length = float(np.hypot(x1 - x0, y1 - y0))
        u = np.array([x1 - x0, y1 - y0]) / length if length > 0 else np.array([1.0, 0.0])
        n = np.array([-u[1], u[0]]) * (width / 2 + m)
        a, b = np.array([x0, y0]) - m * u, np.array([x1, y1]) + m * u
        corners = np.array([a + n, b + n, b - n, a - n]) * k - 0.5  # (mm to pixel centres)
        cv2.fillConvexPoly(mask, np.round(corners * 16).astype(np.int32), 1,
                           lineType=cv2.LINE_8, shift=4)
    return mask > 0


def _strip(norm, c0, d, n, T, O):
    """``norm`` sampled at ``c0 + t d + o n`` for t in ``T`` (rows), o in ``O`` (columns)."""
    mx = (c0[0] + T[:, None] * d[0] + O[None] * n[0]).astype(np.float32)
    my = (c0[1] + T[:, None] * d[1] + O[None] * n[1]).astype(np.float32)
    return cv2.remap(norm, mx, my, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def _bar_along(norm, mm, d, n, rho, sa, sb):
    """The bar one of whose edges is the line ``n . x = rho`` (working px; ``d`` along it),
    found along the piece ``sa..sb`` of it (coordinate along ``d``): (score, end, end, width)
    or None."""
    h, w = norm.shape
    c0 = rho * n  # the line's point nearest the origin
    half = int(round(STRIP_HALF_MM * mm))
    O = np.arange(-half, half + 1, dtype=np.float64)
    k = max(1, int(round(0.5 * mm)))  # the step across is taken over 2k px (1 mm)
    # 1. along the piece: its edge's sign, and a partner of the opposite sign beside it
    S = _strip(norm, c0, d, n, np.arange(sa, sb, 2.0), O)
    prof = np.median(S[:, 2 * k:] - S[:, :-2 * k], axis=0) / PAPER_LEVEL  # column j -> j + k
    c = half - k - 1 + int(np.argmax(np.abs(prof[half - k - 1:half - k + 2])))
    sign = np.sign(prof[c])
    if abs(prof[c]) < EDGE_STEP:
        return None
    lo, hi = int(round(MIN_WIDTH_MM * mm)), int(round(MAX_WIDTH_MM * mm))
    best, cb = EDGE_STEP, None
    for side in (-1, 1):
        cols = c + side * np.arange(lo, hi + 1)
        cols = cols[(cols >= 0) & (cols < prof.size)]
        if cols.size:
            v = -sign * prof[cols]
            j = int(np.argmax(v))
            if v[j] >= best:
                best, cb = float(v[j]), int(cols[j])
    if cb is None:
        return None
    cl, cr = min(c, cb) + k, max(c, cb) + k  # strip columns of the two edges
    sl = sign if c + k == cl else -sign  # the sign of the left edge's step
    # 2. along the whole line across the frame: where both edges show
    corners = np.array([[0, 0], [w - 1, 0], [0, h - 1], [w - 1, h - 1]], np.float64)
    ext = corners @ d
    T = np.arange(ext.min(), ext.max(), 1.0)
    pts = c0[None] + T[:, None] * d[None] + ((O[cl] + O[cr]) / 2) * n[None]
    T = T[(pts[:, 0] >= 0) & (pts[:, 0] <= w - 1) & (pts[:, 1] >= 0) & (pts[:, 1] <= h - 1)]
    if T.size < MIN_LENGTH_MM * mm:
        return None
    lo_c, hi_c = max(0, cl - k - 1 - 8), min(O.size, cr + k + 2 + 8)
    S = _strip(norm, c0, d, n, T, O[lo_c:hi_c])
    a_l, a_r = cl - lo_c, cr - lo_c
    step_l = np.max(sl * (S[:, a_l + k - 1:a_l + k + 2] - S[:, a_l - k - 1:a_l - k + 2]), axis=1)
    step_r = np.max(-sl * (S[:, a_r + k - 1:a_r + k + 2] - S[:, a_r - k - 1:a_r - k + 2]), axis=1)
    el, er = step_l / PAPER_LEVEL, step_r / PAPER_LEVEL
    edged = (el >= EDGE_STEP) & (er >= EDGE_STEP)
    if edged.sum() < MIN_LENGTH_MM * mm * MIN_ROW_SHARE:
        return None
    # the body between the edges (1.5 mm in from them): one and the same all along (an opaque
    # object), unlike a row of marks (their colours, the paper between them)
    m = max(1, int(round(1.5 * mm)))
    if a_r - a_l - 2 * m < 2:
        m = max(0, (a_r - a_l) // 2 - 1)
    inner = S[:, a_l + m:a_r - m + 1]
    body = inner.mean(axis=1)
    o1, o2 = max(2, int(round(1.0 * mm))), int(round(3.0 * mm))
    side_l = S[:, max(0, a_l - o2):max(1, a_l - o1)].mean(axis=1)
    side_r = S[:, a_r + o1:a_r + o2].mean(axis=1)
    side = np.maximum(side_l, side_r)  # (the paper's level beside the bar: its brighter side)
    b0 = float(np.median(body[edged]))
    ref = float(np.median(side[edged]))
    contrast = abs(ref - b0)
    if contrast < 2 * EDGE_STEP * PAPER_LEVEL:
        return None
    on = edged & (np.abs(body - b0) <= BODY_TOLERANCE * contrast)
    gap = int(round(RUN_GAP_MM * mm))
    run = None
    for a, b in _runs(on, gap):
        if b - a < MIN_LENGTH_MM * mm or T[b - 1] < sa or T[a] > sb:
            continue  # (too short, or not the piece's run)
        share = float(on[a:b].mean())
        if share < MIN_ROW_SHARE:
            continue
        # no texture inside along it (a hatched mark's strokes, print seen through)
        rows = np.flatnonzero(on[a:b]) + a
        rows = rows[(rows > 0) & (rows < T.size - 1)]
        tex = float(np.median(np.abs(inner[rows + 1] - inner[rows - 1]).mean(axis=1)))
        if tex > MAX_TEXTURE * contrast:
            continue
        score = share * float(np.minimum(el[a:b], er[a:b])[on[a:b]].mean())
        if score >= MIN_SCORE and (run is None or score > run[0]):
            run = (score, a, b)
    if run is None:
        return None
    score, a, b = run
    # 3. a sharpened end: beyond one end (one inside the frame), the middle darker than the
    # paper beside the bar; the end where it is the more so is the tip, and the bar is taken
    # on over its cone (as far as the middle stays dark, CONE_MIN_MM..CONE_MAX_MM)
    mid = (a_l + a_r) // 2
    dark = (ref - S[:, mid - 1:mid + 2].mean(axis=1)) / max(ref, 1.0)
    look = int(round(12.0 * mm))
    edge = int(round(2.0 * mm))
    ev = []
    for e, step in ((a - 1, -1), (b, 1)):
        idx = e + step * np.arange(2, look)
        idx = idx[(idx >= 0) & (idx < T.size)]
        ev.append(float(dark[idx].mean()) if idx.size >= look - edge - 2 else -1.0)
    j = int(np.argmax(ev))
    if ev[j] >= CONE_DARK:
        e, step = ((a - 1, -1), (b, 1))[j]
        k_ = 0
        while k_ < CONE_MAX_MM * mm and 0 <= e + step * k_ < T.size and \
                (dark[e + step * k_] >= CONE_DARK or
                 (0 <= e + step * (k_ + 1) < T.size and dark[e + step * (k_ + 1)] >= CONE_DARK)):
            k_ += 1
        k_ = int(np.clip(k_, CONE_MIN_MM * mm, CONE_MAX_MM * mm))
        if j == 0:
            a = max(0, a - k_)
        else:
            b = min(T.size, b + k_)
    off = (O[cl] + O[cr]) / 2
    return score, c0 + T[a] * d + off * n, c0 + T[b - 1] * d + off * n, float(O[cr] - O[cl])


def _print_seen(norm, render, mm, p0, p1, wd) -> float:
    """How much of the print under a bar (axis ``p0``-``p1``, width ``wd``, working px) shows
    through its body: the body's darkening (of the paper's level) where ``render`` prints across
    it (rows of the render ``2 * PRINT_MIN_STEP`` darker than its paper there) against its clear
    rows (3 px or more from the print), over the render's own difference between them. NaN
    where the render prints nothing across the body (no evidence either way)."""
    length = float(np.hypot(*(p1 - p0)))
    if length < 2:
        return float("nan")
    d = (p1 - p0) / length
    n = np.array([-d[1], d[0]])
    half = max(1.0, wd / 2 - 1.5 * mm)  # (the body, 1.5 mm in from its edges)
    T = np.arange(0.0, length, 1.0)
    O = np.arange(-half, half + 1e-9, 1.0)
    body = _strip(norm, p0, d, n, T, O).mean(axis=1) / PAPER_LEVEL
    ink = _strip(np.asarray(render, np.float32), p0, d, n, T, O).mean(axis=1)
    paper = float(np.percentile(ink, 90))
    printed = ink < paper - 2 * PRINT_MIN_STEP
    near = np.convolve(printed.astype(np.float32), np.ones(5, np.float32), "same") > 0
    clear = (ink > paper - 0.02) & ~near
    if printed.sum() < PRINT_MIN_ROWS or clear.sum() < 2 * PRINT_MIN_ROWS:
        return float("nan")
    step = float(np.median(ink[clear]) - np.median(ink[printed]))
    if step < PRINT_MIN_STEP:
        return float("nan")
    return float(np.median(body[clear]) - np.median(body[printed])) / step


def _merge(found, mm):
    """The bars of ``found`` ((score, end, end, width) in working px) merged: those lying on
    one another (the same bar found from each of its edges) into the strongest, and pieces of
    one bar along one axis (a gap where something crossed it) into one; strongest first."""
    found = sorted(found, key=lambda b: -b[0])
    kept = []
    for sc, p0, p1, wd in found:
        u = (p1 - p0) / max(float(np.hypot(*(p1 - p0))), 1e-9)
        for i, (ks, k0, k1, kw) in enumerate(kept):
            kl = float(np.hypot(*(k1 - k0)))
            ku = (k1 - k0) / max(kl, 1e-9)
            if abs(float(u @ ku)) < np.cos(np.radians(6.0)):
                continue
            kn = np.array([-ku[1], ku[0]])
            off = abs(float(((p0 + p1) / 2 - k0) @ kn))
            if off > (wd + kw) / 2:
                continue  # (side by side, not on one another)
            s = sorted([float((p0 - k0) @ ku), float((p1 - k0) @ ku)])
            if s[1] >= 0 and s[0] <= kl:
                break  # (on one another)
            gap = max(s[0] - kl, -s[1])
            if off <= 1.5 * mm and abs(float(u @ ku)) > np.cos(np.radians(3.0)) \
                    and gap <= JOIN_GAP_MM * mm:
                lo, hi = min(0.0, s[0]), max(kl, s[1])
                kept[i] = (max(ks, sc), k0 + lo * ku, k0 + hi * ku, kw)
                break
        else:
            kept.append((sc, p0, p1, wd))
    return kept
