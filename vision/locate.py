"""Locate and identify the score sheet in a photo: template + homography (template mm -> px).

Routes, tried in this order:

1. **Markers.** The four ArUco markers (DICT_4X4_50) in the page corners name the template
   (template *k* uses ids 4k..4k+3) and give 4 corners each, refined to sub-pixel by fitting
   lines to the marker's outer edges. A fast strict detector (one adaptive-threshold window;
   on two overlapping halves of the photo at once when a second core is idle, with the same
   result) runs first and is kept when it sees all four markers of a template; otherwise the full
   strict detector (three windows) runs. A relaxed one (full error correction, plus a
   sharpened copy) looks for the missing markers only where the found ones predict them, or,
   when the strict one finds at most one, is kept only for two or more markers spaced as on
   the template. A marker that disagrees with the others by more than its
   own size and by half its distance to them is dropped (a curl or a steep view moves a true
   marker by a fraction of that distance, a misread id by all of it). Markers still missing
   are *anchored*: the detector's unreadable square candidates (blur, glare and small pages
   destroy the bits long before the square) where the read markers put them (beside three
   read markers, only when the print lines up no more than 0.1 worse with it: a filled box
   near the corner is a square of the same size). With fewer than
   three markers the page outline and a registration on the print are added; if the print does
   not line up with the named template at all, the markers are ignored (misread, or lying on
   the table) and the next route runs.
2. **Marker squares** (no marker readable): four (or three) unreadable squares of one size
   round a mostly-paper area give the page outline; the print identifies the sheet there (as
   below), and the squares then become its markers for a marker-precise homography. Kept over
   the page route when it confirms three or more squares or lines up clearly better.
3. **Page + features** (a sheet printed without markers, or markers covered): find the page as
   the brightest, least coloured convex quadrilateral (its sides snapped to the steepest
   whiteness step nearby), warp it to the page frame of every
   candidate template in each of the four orientations, register the best few with ORB + MAGSAC
   and polish the winner with ECC. When no page outline is found or it lines up poorly (a page
   against a white sleeve or bowl), the whole photo is matched against each rendering instead;
   failing both, the outline is built from the page's straight edges (Hough lines), then from
   the straight runs of bright components' outlines, then from the whiteness flattened by its
   local envelope (``vision._page_shadow``: a side or corner in strong shadow on a busy cloth;
   kept only when the print lines up at least ``SHADOW_MIN_REGISTRATION``); the first of
   these outlines that lines up at least ``LAST_RESORT_GOOD_REGISTRATION`` ends the search,
   below it the best-registered one is kept (straight edges also outline a cloth's pattern).
   Among a game's levels, the one whose *print* (achromatic ink, pencil discounted) matches where the
   levels differ wins, every level judged under the same well-registered homographies; a
   small margin is reported as ``details["ambiguous"]`` and caps ``quality`` at 0.3, so that
   every reading gets reviewed.

After locating: a sheet whose readable area leaves the photo raises :class:`SheetCutOffError`;
a photo too blurred to read raises :class:`BlurryPhotoError` (the blur of the print on the
page in mm, estimated against the clean rendering, so it does not depend on the photo's size).
A *weak* location (anything but four strictly read markers) is checked at once, and when it
is refused while its own evidence is poor (the print lines up badly and the blur measure fits
no blurred rendering), the other page outlines are tried and one that passes the checks and
lines up clearly better is kept (``details["retried"]``): a misplaced marker set or outline
made a sharp photo "too blurred" or a whole sheet "cut off". See :func:`_retry_refused`.
``details`` always carries ``registration`` (how well the print lines up, 0..1) and
``blur_mm``. A sheet under ``SMALL_SHEET_PX_PER_MM`` is still read when found and sharp
enough, but a blur refusal its size explains, or a failure where the best page outline is that
small and shows the print, raises :class:`SheetTooSmallError` ("move closer"). See
docs/BAD_INPUT.md.

A *mirrored* photo (a front camera's selfie view) reads no marker and matches no sheet the
right way round: when the location looks like one (unsure, or markers printed but fewer than
two decoded) or the photo was refused as without a known sheet, too blurred or cut off, the
photo flipped left-right is located as well, and a clearly better flipped location is kept
(``details["mirrored"]``; its homography includes the flip). See :func:`_unmirrored`.

What depends on the template alone (renderings, ink, blur tiles) is cached per template;
:func:`prepare` builds it up front for a process that reads many photos.

Homographies map template mm to decoded-image px in the project convention (pixel (i, j) has its
centre at (x=j+0.5, y=i+0.5)).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence

import cv2
import numpy as np

from calibration.template import Template, all_templates, get_template
from sheetcheck.errors import (BlurryPhotoError, NoSheetFoundError, SeveralSheetsError,
                               SheetCutOffError, SheetTooSmallError, UnknownTemplateError)
from vision._geom_render import (MM_PER_INCH, achromatic_ink, frame_size, ink_map, normalise_h,
                                 photo_grey, project, reference_render, scale_matrix,
                                 warp_to_frame)
from vision._geom_threads import start, threads


__all__ = ["SheetLocation", "locate_sheet", "prepare", "find_page_quad", "detect_markers",
           "BLUR_LIMIT_MM", "SMALL_SHEET_PX_PER_MM", "sheet_px_per_mm", "estimate_blur_mm",
           "registration_score"]

#: Long side (px) of the grey image the marker detector sees: markers of 14 mm on a page that
#: fills half of the frame are then >= 20 px, enough for ArUco (46 of 72 blurred hard-preset
#: markers found at 1000 px against 47 at 1280, in half the time). Corners are then refined
#: on the full decoded image.
DETECT_LONG_SIDE = 1000
#: Below this correlation of the photo's print with the template's rendering (see
#: :func:`registration_score`) a registration is not believed.
MIN_REGISTRATION = 0.25
#: dpi of the template frame used for identification, ECC and the blur measure.
REG_DPI = 40.0
#: Blur of the print on the page (Gaussian sigma in mm, see :func:`estimate_blur_mm`) above
#: which a photo is too blurred to read: regions are 6-10 mm and pencil strokes ~1 mm apart.
#: Simulated hard-preset photos (defocus 3 px + motion 5 px at 1280 px) measure up to ~1.5 mm.
BLUR_LIMIT_MM = 2.0
#: Below this scale (px per mm on the page, :func:`sheet_px_per_mm`) a sheet is too small to
#: read well: its 6-10 mm boxes are 9-15 px across. Measured (spent corpora fresh800k-1000k,
#: heldout770-790, 1,259 sheets, scale from the simulator's truth): every region of every
#: sheet under 1.5 px/mm is flagged, and hard photos there are read 76 % right at 1.25-1.5 and
#: 72 % under 1.25 (82 % at 1.5-1.75, 92-93 % at 2-2.75, 99 % from 4.5); 24 sharp easy and
#: typical photos shrunk to 1.5 / 1.2 / 1.0 / 0.8 / 0.65 px/mm are all found and read 99.3 /
#: 98.3 / 96.6 / 93.2 / 88.8 % right, every region flagged.
#: A sheet this small is still read when it is found and sharp enough (every reading is
#: flagged); it is refused as too small, not as blurred or missing, when the blur check refuses
#: it while its blur in px would pass at this scale (at most 2 mm x 1.5 px/mm = 3 px: the
#: size is the cause, see :func:`_too_small_when_blurred`), or when no route can register it
#: but a page outline this small shows its print (:func:`_small_sheet_outline`).
SMALL_SHEET_PX_PER_MM = 1.5
#: How well the print must line up in a page outline under ``SMALL_SHEET_PX_PER_MM`` (the page
#: route's first look and its registration, see :func:`_small_sheet_outline`) for it to count
#: as a sheet too small to read: the page route's own bar for "a page" (0.15-0.25: a page, no
#: known sheet). Bare tables and cloths (14 backgrounds x 5 seeds x 2 sizes) reach it with
#: one of 140 outlines under 1.5 px/mm on the registration alone, with none on both.
SMALL_SHEET_MIN_PRINT = 0.15
_NO_SHEET = ("no score sheet found in the photo.",
             "Retake the photo with the whole sheet on a plain surface, flat and well lit.")
_CUT_OFF_HINT = "Retake the photo with all four corners in view."


@dataclass(frozen=True)
class SheetLocation:
    """Where the sheet is in the (decoded) photo.

    Attributes
    ----------
    template : Template
    homography : (3, 3) ndarray
        Maps template mm to decoded-image px.
    method : str
        ``"markers"``, ``"markers+page"``, ``"page"`` or ``"features"``.
    markers_found : tuple of int
        ArUco ids of the identified template's markers the homography uses: read by the
        detector, or *anchored* (an unreadable marker square where the other markers or the
        print put that marker, listed in ``details["markers_anchored"]``).
    quality : float
        0..1, how sure the registration is (residual-based).
    details : dict
        Residuals, inliers, candidates considered, ``blur_mm``, ``registration`` ...
    """

    template: Template
    homography: np.ndarray
    method: str
    markers_found: tuple[int, ...]
    quality: float
    details: dict = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------

def _grey(image: np.ndarray) -> np.ndarray:
    if image.ndim == 2:
        return image
    return cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)


def _check_image(image) -> np.ndarray:
    a = np.asarray(image)
    if a.dtype != np.uint8 or a.ndim not in (2, 3) or (a.ndim == 3 and a.shape[2] != 3):
        raise ValueError(f"image must be an (H, W, 3) or (H, W) uint8 array, got {a.dtype} {a.shape}")
    if min(a.shape[:2]) < 32:
        raise NoSheetFoundError(f"the photo is only {a.shape[1]} x {a.shape[0]} px: no sheet can be read in it.",
                                hint=_NO_SHEET[1])
    return a


def _candidates(template_id: str | None, templates: Sequence[Template] | None) -> list[Template]:
    if templates is not None:
        cands = list(templates)
        if template_id is not None:
            cands = [t for t in cands if t.id == template_id]
            if not cands:
                raise UnknownTemplateError(f"unknown template {template_id!r}.",
                                           hint=f"Known templates: {', '.join(t.id for t in templates)}.")
        return cands
    if template_id is not None:
        return [get_template(template_id)]  # raises UnknownTemplateError listing the ids
    cands = all_templates()
    if not cands:
        raise UnknownTemplateError("no sheet templates are installed, so no sheet can be identified.",
                                   hint="Reinstall sheetcheck (calibration/templates/*.json).")
    return cands


def _page_corners(t: Template) -> np.ndarray:
    return np.array([[0, 0], [t.width_mm, 0], [t.width_mm, t.height_mm], [0, t.height_mm]], float)


_content_boxes: dict = {}


def _content_box_mm(t: Template) -> np.ndarray:
    """Corners of the box holding every readable region and marker (what must be in view)."""
    key = (t.id, t.version, t.source)
    if key not in _content_boxes:
        _content_boxes[key] = _content_box_uncached(t)
    return _content_boxes[key]


def _content_box_uncached(t: Template) -> np.ndarray:
    xs, ys = [], []
    for r in t.regions:
        if r.readable:
            x0, y0, x1, y1 = r.shape.bbox()
            xs += [x0, x1]; ys += [y0, y1]
    for m in t.markers:
        xs += [m.x, m.x + m.size]; ys += [m.y, m.y + m.size]
    if not xs:
        return _page_corners(t)
    x0, x1, y0, y1 = min(xs), max(xs), min(ys), max(ys)
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], float)


def _check_in_view(t: Template, H: np.ndarray, shape: tuple[int, int], *, method: str) -> dict:
    """Raise SheetCutOffError when part of the sheet's readable area is outside the photo."""
    h, w = shape[:2]
    box = _content_box_mm(t)
    # Sample the box outline densely: a strongly tilted page can leave the frame mid-edge.
    pts = np.concatenate([np.linspace(box[i], box[(i + 1) % 4], 9)[:-1] for i in range(4)])
    with np.errstate(all="ignore"):
        ph = np.c_[pts, np.ones(len(pts))] @ H.T
    if np.any(ph[:, 2] <= 0):
        raise SheetCutOffError("the sheet is cut off by the edge of the photo (part of it is "
                               "behind the camera's view).", hint=_CUT_OFF_HINT)
    p = ph[:, :2] / ph[:, 2:3]
    tol = 0.005 * max(h, w)
    outside = (p[:, 0] < -tol) | (p[:, 1] < -tol) | (p[:, 0] > w + tol) | (p[:, 1] > h + tol)
    if outside.any():
        sides = []
        if (p[:, 0] < -tol).any(): sides.append("left")
        if (p[:, 0] > w + tol).any(): sides.append("right")
        if (p[:, 1] < -tol).any(): sides.append("top")
        if (p[:, 1] > h + tol).any(): sides.append("bottom")
        raise SheetCutOffError(
            f"the sheet is cut off by the {' and '.join(sides)} edge of the photo "
            f"({int(outside.sum())} of {len(p)} points of its readable area are outside; located by {method}).",
            hint=_CUT_OFF_HINT)
    corners = project(H, _page_corners(t))
    return {"page_corners_px": corners.round(2).tolist()}


def sheet_px_per_mm(H: np.ndarray, t: Template) -> float:
    """The sheet's mean scale in the photo, px per mm: the square root of the page's area in
    the photo (its corners through ``H``) over its area on paper."""
    return _quad_px_per_mm(project(H, _page_corners(t)), t)


def _quad_px_per_mm(quad: np.ndarray, t: Template) -> float:
    a = abs(cv2.contourArea(np.asarray(quad, np.float32)))
    return float(np.sqrt(a / (t.width_mm * t.height_mm)))


def _too_small(quad: np.ndarray, t: Template, why: str) -> SheetTooSmallError:
    """The error for a sheet of outline ``quad`` (photo px) too small to read; ``why``: what
    was found there and what failed."""
    q = np.asarray(quad, float)
    sides = np.linalg.norm(q - np.roll(q, -1, 0), axis=1)
    a, b = sorted((0.5 * (sides[0] + sides[2]), 0.5 * (sides[1] + sides[3])))
    return SheetTooSmallError(
        f"the sheet is too small in the photo to be read: it spans only about {a:.0f} x {b:.0f} "
        f"px ({_quad_px_per_mm(q, t):.1f} px per mm; its 6-10 mm boxes need at least "
        f"{SMALL_SHEET_PX_PER_MM:.1f}), {why}.",
        hint="Move closer: the sheet should fill most of the photo.")


def _too_small_when_blurred(err: BlurryPhotoError) -> SheetTooSmallError | None:
    """A blur refusal of a sheet under ``SMALL_SHEET_PX_PER_MM``, at a believed location
    (registration or blur fit >= ``RETRY_GOOD_REGISTRATION``), whose blur in the photo's px
    would pass at that scale (at most ``BLUR_LIMIT_MM * SMALL_SHEET_PX_PER_MM`` = 3 px) is a
    refusal for its size: the camera's ordinary softness in px smears a small sheet's print
    over more mm, and moving closer cures it. That error, or None for a blur refusal that
    stands (see :func:`_checks`)."""
    small = getattr(err, "small_sheet", None)
    if small is None:
        return None
    quad, t, blur_mm = small
    return _too_small(quad, t, f"so its print is smeared over about {blur_mm:.1f} mm")


def _small_sheet_outline(image: np.ndarray, grey: np.ndarray, cands) -> SheetTooSmallError | None:
    """After every route failed: is a page there, too small to be read?

    The page outlines of the page route's searches (whiteness, straight edges, outline runs)
    are ranked by the page route's first look at the print in them
    (:func:`_coarse_quad_score`, with and without markers). When the best one is smaller than
    ``SMALL_SHEET_PX_PER_MM`` and both that first look and the page route's registration in
    it reach ``SMALL_SHEET_MIN_PRINT`` (the route's own bar for "a page", below its bar for a
    known sheet), the sheet is there but too small to register (its print a few px wide):
    that error, else None. Only the best-ranked outline counts, so that a piece of a large
    page the routes lost does not make the photo's sheet "too small". ~0.3 s (up to ~1 s on
    a busy cloth), paid by failing photos only."""
    if image.ndim != 3:
        return None
    quads = []
    q = find_page_quad(image)
    if q is not None:
        quads.append(q)
    quads += _page_quads_from_lines(image)[:3]
    quads += _page_quads_from_outline(image)[:4]
    if not quads:
        return None
    # (a sheet printed with or without markers)
    looks = [(max(_coarse_quad_score(grey, q, cands, markers=mk) for mk in (True, False)), i)
             for i, q in enumerate(quads)]
    coarse, i = max(looks)
    t = cands[0]  # (the scale needs only the page's size; every house sheet is A4)
    if coarse < SMALL_SHEET_MIN_PRINT or _quad_px_per_mm(quads[i], t) >= SMALL_SHEET_PX_PER_MM:
        return None
    try:
        _locate_by_quad(grey, cands, markers_printed=None, image=image, quad=quads[i])
    except NoSheetFoundError as e:
        if getattr(e, "correlation", 0.0) < SMALL_SHEET_MIN_PRINT:
            return None
    except SheetCutOffError:
        return None
    return _too_small(quads[i], t, "and its print cannot be lined up with any sheet's at this size")


# --------------------------------------------------------------------------------------------
# markers
# --------------------------------------------------------------------------------------------

_detectors: dict = {}


def _detector(dictionary: str, relaxed: bool = False, fast: bool = False):
    det = _detectors.get((dictionary, relaxed, fast))
    if det is None:
        params = cv2.aruco.DetectorParameters()
        # Sub-pixel refinement is done afterwards on the full-resolution grey image.
        params.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_NONE
        # Blurred photos (defocus, hand shake) smear the bits of 14 mm markers: read each cell
        # from its centre only and resample the marker at 10 px per cell. Measured on simulated
        # hard-preset photos: 19 -> 47 of 72 markers found, and no marker "found" on 36 photos
        # of sheets printed without markers.
        params.perspectiveRemovePixelPerCell = 10
        params.perspectiveRemoveIgnoredMarginPerCell = 0.3
        if relaxed:
            # The dictionary's full correction capacity finds more blurred markers (55 of 72)
            # but also "finds" markers in printed artwork (4 of 36 sheets without markers):
            # used only to look for the missing markers where the found ones predict them.
            params.errorCorrectionRate = 1.0
        if fast:
            # One adaptive-threshold window (13 px, a marker cell at 1000 px is ~7 px) instead
            # of three (3, 13, 23): a third of the time. Measured on 42 photos with markers
            # (12 MP typical + easy/typical/hard): 89 of the 90 markers the full detector finds.
            # Only trusted when it finds all four markers of a template (see locate_sheet);
            # otherwise the full detector runs as before.
            params.adaptiveThreshWinSizeMin = 13
            params.adaptiveThreshWinSizeMax = 13
        d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
        det = cv2.aruco.ArucoDetector(d, params)
        _detectors[(dictionary, relaxed, fast)] = det
    return det


def detect_markers(grey: np.ndarray, *, dictionary: str = "DICT_4X4_50",
                   relaxed: bool = False, fast: bool = False,
                   small: np.ndarray | None = None) -> MarkerSet:
    """Detect ArUco markers; ``{id: (4, 2) corners in px}`` in ArUco order (the marker's own
    top-left, top-right, bottom-right, bottom-left), project px convention, sub-pixel refined
    on ``grey`` itself. An id seen twice keeps its larger detection (the other in ``others``
    when it lies elsewhere: :class:`MarkerSet`). ``fast``: one threshold
    window only (see :func:`_detector`). ``small``: ``grey`` already reduced by
    :func:`_detect_image` (saves reducing it twice)."""
    if small is None:
        small = _detect_image(grey)
    corners, ids, _ = _detector(dictionary, relaxed, fast).detectMarkers(small)
    if ids is None:
        return MarkerSet()
    # each marker's corners refined on its own, in turn: the refinement is many small numpy
    # steps that hold the GIL, so two threads took longer than one (12 MP bench photos, two
    # threads: locate 16.2 -> 14.0 ms median with the markers refined in turn)
    return _refined_markers(grey, [_full_corners(grey, c) for c in corners], ids.ravel())


def _full_corners(grey: np.ndarray, c: np.ndarray) -> np.ndarray:
    """A detection's corners on the detector's image (:func:`_detect_image`) -> index coords
    of ``grey`` (pixel centres at integers in both), not yet refined."""
    h, w = grey.shape[:2]
    f = min(1.0, DETECT_LONG_SIDE / max(h, w))
    return (c.reshape(4, 2).astype(np.float64) + 0.5) / f - 0.5


class MarkerSet(dict):
    """``{id: (4, 2) corners}`` as :func:`detect_markers` gives them, and ``others``:
    ``{id: [corners, ...]}``, the further detections of an id seen again elsewhere in the
    photo (more than :data:`REPEAT_APART` marker sides away): the same marker on a second
    sheet of the same template, whole or in part (a neighbour's sheet at the table)."""

    def __init__(self, *args, others: dict | None = None, **kw):
        super().__init__(*args, **kw)
        self.others: dict[int, list[np.ndarray]] = dict(others or {})


#: Two detections of one id whose centres are more than this many marker sides apart are two
#: markers (two sheets), not one marker seen twice.
REPEAT_APART = 2.0
#: Of two whole sheets in a photo, one whose markers are this many times the other's side
#: (2.6 times its area: much nearer the camera) is the one photographed; closer in size, which
#: one is meant cannot be told.
DOMINANT_SHEET = 1.6


def _refined_markers(grey: np.ndarray, rough, ids, refined=None) -> MarkerSet:
    """``{id: refined corners in project px}`` from unrefined detections (``refined``: those
    already refined, in the same order); an id seen twice keeps its larger detection, and
    the other in ``others`` when it lies elsewhere (:class:`MarkerSet`)."""
    out = MarkerSet()
    if refined is None:
        refined = [_refine_marker_corners(grey, c) for c in rough]
    for cc, i in zip(refined, ids):
        pts = cc + 0.5  # index -> project px convention
        i = int(i)
        if i in out:
            prev = out[i]
            apart = float(np.linalg.norm(prev.mean(0) - pts.mean(0))) > \
                REPEAT_APART * max(_marker_side(prev), _marker_side(pts), 1.0)
            if cv2.contourArea(prev.astype(np.float32)) >= cv2.contourArea(pts.astype(np.float32)):
                if apart:
                    out.others.setdefault(i, []).append(pts)
                continue
            if apart:
                out.others.setdefault(i, []).append(prev)
        out[i] = pts
    return out


#: The fast detector's image is cut across its long side into two halves that overlap by
#: this share of the long side (each half a little over half the image), detected on two
#: threads (see :func:`_detect_fast_split`).
SPLIT_OVERLAP = 0.16


def _split_detector(dictionary: str, shape: tuple[int, int], half_shape: tuple[int, int],
                    half: int):
    """The fast detector for one half of an image of ``shape``: the same parameters, with the
    marker perimeter limits that ArUco takes relative to the image's long side
    (``(unsigned) rate * max(rows, cols)`` px) given relative to the half's long side so
    that they come to the same whole numbers of px. One object per half (the two run at
    once)."""
    key = (dictionary, "split", shape, half_shape, half)
    det = _detectors.get(key)
    if det is None:
        if len(_detectors) > 64:  # (photos of many sizes: a server)
            # (a copy of the keys: the other half's detector may be added meanwhile)
            for k in [k for k in list(_detectors) if k[1:2] == ("split",)]:
                _detectors.pop(k, None)
        base = _detector(dictionary, fast=True)
        params = base.getDetectorParameters()
        M, m = max(shape), max(half_shape)
        lo = int(params.minMarkerPerimeterRate * M)
        hi = int(params.maxMarkerPerimeterRate * M)
        params.minMarkerPerimeterRate = (lo + 0.5) / m
        params.maxMarkerPerimeterRate = (hi + 0.5) / m
        det = cv2.aruco.ArucoDetector(base.getDictionary(), params)
        _detectors[key] = det
    return det


def _detect_fast_split(grey: np.ndarray, small: np.ndarray, dictionary: str):
    """The fast detector on two overlapping halves of ``small`` at once (the second half on
    the helper thread, ``vision._geom_threads``), the first half's markers refined while
    the second is still being searched: ``{id: corners}`` as :func:`detect_markers` with
    ``fast=True`` gives them for every marker that lies inside one of the halves.

    Why the same: ArUco reads a marker from the pixels round it alone (its adaptive
    threshold window, contour and bits), and the perimeter limits are kept in px
    (:func:`_split_detector`); a contour touching a half's cut edge is refused by its
    distance to the border, as at the photo's edge. A marker found in both halves (inside
    the overlap) has the same corners in both and is refined once. Only a marker wider than
    the overlap lying across the middle is missed: the caller keeps the result only when it
    holds a whole template's markers, and detects on the whole image otherwise (such a
    marker beside a whole sheet in view, over 16 % of the photo across where the sheet's
    own are ~5 %, would go unseen). 12 MP bench and 60 dev photos: the same markers and
    corners as the whole image on all 72; two threads, 12 MP: locate 2.1 ms faster (median
    of paired reads)."""
    h, w = small.shape[:2]
    if w >= h:
        cut, ov = w // 2, int(round(SPLIT_OVERLAP * w / 2))
        boxes = ((0, h, 0, cut + ov), (0, h, cut - ov, w))
    else:
        cut, ov = h // 2, int(round(SPLIT_OVERLAP * h / 2))
        boxes = ((0, cut + ov, 0, w), (cut - ov, h, 0, w))

    def detect(k):
        r0, r1, c0, c1 = boxes[k]
        part = small[r0:r1, c0:c1]
        corners, ids, _ = _split_detector(dictionary, (h, w), part.shape[:2], k).detectMarkers(part)
        if ids is None:
            return [], []
        off = np.array([c0, r0], np.float32)  # (whole px: exact in float32)
        return [c.reshape(4, 2) + off for c in corners], [int(i) for i in ids.ravel()]

    second = start(lambda: detect(1))
    c_a, i_a = detect(0)
    rough_a = [_full_corners(grey, c) for c in c_a]
    refined_a = [_refine_marker_corners(grey, c) for c in rough_a]
    c_b, i_b = second.result()
    rough, ids, refined = list(rough_a), list(i_a), list(refined_a)
    for c, i in zip(c_b, i_b):
        cf = _full_corners(grey, c)
        if any(j == i and np.array_equal(r, cf) for r, j in zip(rough_a, i_a)):
            continue  # (the same detection, seen from both halves)
        rough.append(cf)
        ids.append(i)
        refined.append(_refine_marker_corners(grey, cf))
    return _refined_markers(grey, rough, ids, refined)


def _detect_image(grey: np.ndarray) -> np.ndarray:
    """``grey`` reduced to :data:`DETECT_LONG_SIDE` on its long side (what the detector sees)."""
    h, w = grey.shape[:2]
    f = min(1.0, DETECT_LONG_SIDE / max(h, w))
    return cv2.resize(grey, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else grey


def _fit_line(pts: np.ndarray, *, k: float, floor: float, min_keep: int) -> tuple[np.ndarray, np.ndarray]:
    """Least-squares line (point, unit direction) through ``pts``, refitted once without the
    points farther from it than ``max(k * median residual, floor)`` (unless fewer than
    ``min_keep`` would remain)."""
    for _ in range(2):
        m = pts.mean(0)
        _, _, vt = np.linalg.svd(pts - m)
        dirn = vt[0]
        r = (pts - m) @ np.array([-dirn[1], dirn[0]])
        keep = np.abs(r) <= max(k * np.median(np.abs(r)), floor)
        if keep.all() or keep.sum() < min_keep:
            break
        pts = pts[keep]
    return m, dirn


def _quad_from_lines(lines) -> np.ndarray | None:
    """Corner ``i`` where side ``i - 1`` meets side ``i`` (four (point, direction) lines);
    None when two consecutive sides are parallel."""
    out = np.empty((4, 2), np.float64)
    for i in range(4):
        (p, u), (q, v) = lines[(i - 1) % 4], lines[i]
        A = np.array([u, -v]).T
        if abs(np.linalg.det(A)) < 1e-6:
            return None
        s_, _ = np.linalg.solve(A, q - p)
        out[i] = p + s_ * u
    return out


def _refine_marker_corners(grey: np.ndarray, c: np.ndarray) -> np.ndarray:
    """Sub-pixel marker corners (index coords) as intersections of the four outer edges.

    Each edge is located at a dozen places along its middle 60 % by the half-way crossing
    between the black border and the white quiet zone (unbiased under symmetric blur, unlike
    a gradient peak or a corner detector on an L-shaped corner), then fitted with a line.
    """
    side = float(np.mean(np.linalg.norm(c - np.roll(c, -1, 0), axis=1)))
    cell = side / 6.0
    if cell < 2.0:
        return c
    centre = c.mean(0)
    ts = np.linspace(0.2, 0.8, 13)
    half = 0.6 * cell
    offs = np.linspace(-half, half, 25)
    # All four edges at once (one remap): edge i runs from corner i to corner i + 1, with its
    # normal pointing out of the marker.
    a_, b_ = c, np.roll(c, -1, 0)
    dv = (b_ - a_) / np.maximum(np.linalg.norm(b_ - a_, axis=1), 1e-9)[:, None]
    nv = np.stack([dv[:, 1], -dv[:, 0]], 1)
    nv[np.sum(((a_ + b_) / 2 - centre) * nv, 1) < 0] *= -1
    base = a_[:, None, :] + ts[None, :, None] * (b_ - a_)[:, None, :]          # (4, 13, 2)
    sp = base[:, :, None, :] + offs[None, None, :, None] * nv[:, None, None, :]  # (4, 13, 25, 2)
    prof = cv2.remap(grey, sp[..., 0].reshape(-1, 25).astype(np.float32),
                     sp[..., 1].reshape(-1, 25).astype(np.float32), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE).astype(np.float64).reshape(4, 13, 25)
    inner = prof[..., :5].mean(-1)
    outer = prof[..., -5:].mean(-1)
    lvl = (inner + outer) / 2
    above = prof >= lvl[..., None]
    k = above.argmax(-1)
    # enough contrast for a reliable crossing, and a crossing inside the profile
    good = (outer - inner > 20) & above.any(-1) & (k > 0)
    km = np.maximum(k - 1, 0)
    p0 = np.take_along_axis(prof, km[..., None], -1)[..., 0]
    p1 = np.take_along_axis(prof, k[..., None], -1)[..., 0]
    frac = (lvl - p0) / np.maximum(p1 - p0, 1e-9)
    off = offs[km] + frac * (offs[k] - offs[km])
    crossings = base + off[..., None] * nv[:, None, :]
    lines = []
    for i in range(4):
        pts = crossings[i][good[i]]
        if len(pts) < 5:
            return c
        # (one pass of outlier removal: a pencil stroke on the edge)
        lines.append(_fit_line(pts, k=3.0, floor=0.15, min_keep=5))
    out = _quad_from_lines(lines)
    if out is None:
        return c
    if np.max(np.linalg.norm(out - c, axis=1)) > 0.5 * cell:
        return c
    return out


def _sharpened(grey: np.ndarray) -> np.ndarray:
    b = cv2.GaussianBlur(grey, (0, 0), 3)
    return cv2.addWeighted(grey, 2.5, b, -1.5, 0)


def _marker_h(t: Template, found: dict, mids) -> np.ndarray | None:
    src = np.concatenate([next(m for m in t.markers if m.id == mid).corners_mm() for mid in mids])
    dst = np.concatenate([found[mid] for mid in mids])
    if len(mids) >= 2:
        H, _ = cv2.findHomography(src, dst, 0)
    else:
        H = cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32)).astype(float)
    if H is None or not np.all(np.isfinite(H)) or abs(H[2, 2]) < 1e-12:
        return None
    return normalise_h(H)


def _marker_side(c: np.ndarray) -> float:
    return float(np.mean(np.linalg.norm(c - np.roll(c, -1, 0), axis=1)))


#: A marker is dropped as inconsistent only when the others' prediction misses it by more than
#: one marker side *and* by more than this fraction of its distance to the nearest other marker.
#: A misread id lands at another corner of the page (a miss of about that distance, ratio >= 1);
#: on 150 simulated hard photos (curl up to 20 mm, k1 down to -0.15, 40 degree tilt) true
#: markers predicted from the other two or three missed by up to 4.6 sides but at most 0.34 of
#: that distance: a one-side limit alone dropped true markers in 7 photos and left their
#: homography 20-100 px off.
MARKER_CONSISTENCY_REACH = 0.5


def _consistent_markers(t: Template, found: dict, mids: list[int]) -> tuple[list[int], list[int]]:
    """Drop markers that disagree with the others (a misread id, a marker-like doodle):
    the leave-one-out prediction of each marker's corners must agree within one marker side or
    within :data:`MARKER_CONSISTENCY_REACH` of its distance to the other markers. A misread id
    lands a page-width away; a curled page, a wide-angle lens and the extrapolation from two or
    three small squares under a steep perspective move a true marker by a fraction of that."""
    mids = list(mids)
    dropped = []
    while len(mids) >= 3:
        worst, worst_err = None, 0.0
        for mid in mids:
            others = [m for m in mids if m != mid]
            H = _marker_h(t, found, others)
            if H is None:
                continue
            mk = next(m for m in t.markers if m.id == mid)
            err = float(np.max(np.linalg.norm(project(H, mk.corners_mm()) - found[mid], axis=1)))
            rel = err / max(_marker_side(found[mid]), 1.0)
            reach = min(float(np.linalg.norm(found[mid].mean(0) - found[o].mean(0))) for o in others)
            if rel > 1.0 and err > MARKER_CONSISTENCY_REACH * reach and rel > worst_err:
                worst, worst_err = mid, rel
        if worst is None:
            break
        mids.remove(worst)
        dropped.append(worst)
    return mids, dropped


def _second_look(grey: np.ndarray, t: Template, found: dict, mids: list[int]) -> list[int]:
    """Look again for the missing markers of ``t`` with the relaxed detector, in the photo and
    in a sharpened copy; keep a new marker only where the markers already found predict it."""
    H = _marker_h(t, found, mids)
    if H is None:
        return []
    kept = []
    for img in (grey, _sharpened(grey)):
        extra = detect_markers(img, dictionary=t.aruco_dictionary, relaxed=True)
        for mid in t.marker_ids:
            if mid in mids or mid in kept or mid not in extra:
                continue
            mk = next(m for m in t.markers if m.id == mid)
            pred = project(H, mk.corners_mm())
            err = float(np.max(np.linalg.norm(pred - extra[mid], axis=1)))
            side = max(_marker_side(extra[mid]), 1.0)
            # from one marker the far corners are extrapolated: allow for it
            reach = min(float(np.linalg.norm(pred.mean(0) - found[m].mean(0))) for m in mids)
            tol = 0.3 * side if len(mids) >= 2 else 0.5 * side + 0.1 * reach
            if err <= tol:
                kept.append(mid)
                found[mid] = extra[mid]
        if len(mids) + len(kept) == 4:
            break
    return kept


def _relaxed_markers(grey: np.ndarray, cands) -> dict[int, np.ndarray]:
    """Markers from the relaxed detector (photo and sharpened copy), kept only as two or more
    markers of one template whose pairwise spacing, in marker sides, agrees with the
    template's within 35 % (perspective included)."""
    found: dict[int, np.ndarray] = {}
    for img in (grey, _sharpened(grey)):
        for dictionary in sorted({t.aruco_dictionary for t in cands}):
            for k_, v in detect_markers(img, dictionary=dictionary, relaxed=True).items():
                found.setdefault(k_, v)
    best: dict[int, np.ndarray] = {}
    for t in cands:
        mids = [m for m in t.marker_ids if m in found]
        if len(mids) < 2:
            continue
        ok = set()
        for i, a_ in enumerate(mids):
            for b_ in mids[i + 1:]:
                ma = next(m for m in t.markers if m.id == a_)
                mb = next(m for m in t.markers if m.id == b_)
                d_mm = np.linalg.norm(ma.corners_mm().mean(0) - mb.corners_mm().mean(0)) / ma.size
                side = 0.5 * (_marker_side(found[a_]) + _marker_side(found[b_]))
                d_px = np.linalg.norm(found[a_].mean(0) - found[b_].mean(0)) / max(side, 1.0)
                if abs(d_px / d_mm - 1) < 0.35:
                    ok.update((a_, b_))
        if len(ok) > len(best):
            best = {m: found[m] for m in ok}
    return best


# --------------------------------------------------------------------------------------------
# unreadable markers: their squares as anchors
# --------------------------------------------------------------------------------------------

def _square_candidates(grey: np.ndarray, small: np.ndarray, dictionary: str) -> list[np.ndarray]:
    """Marker-like squares the ArUco detector found but could not read, (4, 2) px corners
    (project convention, ``grey``'s px), unrefined, in the detector's own order.

    A blurred, small or glared marker loses its bits long before its square: on 150 simulated
    hard photos 200 of the 202 markers the detector missed were among these candidates, within
    1.5 px. Which marker each one is comes from the template's geometry (:func:`_anchor_markers`)
    or from the page's print (:func:`_anchor_quads`), never from the bits."""
    h, w = grey.shape[:2]
    f = small.shape[1] / w
    _, _, rejected = _detector(dictionary).detectMarkers(small)
    out = []
    for c in rejected:
        c = c.reshape(4, 2).astype(np.float64)
        side = _marker_side(c)
        if side < 5:  # too small to be a marker the page route could register on
            continue
        edges = np.linalg.norm(c - np.roll(c, -1, 0), axis=1)
        if edges.max() > 2.5 * edges.min():
            continue
        out.append((c + 0.5) / f)
    return out


def _ordered_like(c: np.ndarray, pred: np.ndarray) -> np.ndarray:
    """``c``'s corners in the cyclic order (either direction) closest to ``pred``'s."""
    best, best_d = c, np.inf
    for cc in (c, c[::-1]):
        for k in range(4):
            r = np.roll(cc, -k, 0)
            d = float(np.sum(np.linalg.norm(r - pred, axis=1)))
            if d < best_d:
                best, best_d = r, d
    return best


def _anchor_markers(grey: np.ndarray, t: Template, H: np.ndarray, squares: list[np.ndarray],
                    known: Sequence[int], *, tol_px: float | None = None,
                    reach_frac: float = 0.35) -> dict[int, np.ndarray]:
    """The squares that sit where ``H`` predicts ``t``'s missing markers, as markers of ``t``
    (corners in ArUco order, refined to sub-pixel like a detected marker).

    A square is taken when it is the size the prediction expects (0.6-1.6x) and its centre is
    within ``tol_px`` of the prediction (default: half a marker side plus ``reach_frac`` of the
    distance to the nearest known marker: two or three markers under a steep perspective and a
    curl extrapolate up to a third of that distance off, see :data:`MARKER_CONSISTENCY_REACH`),
    and no other square is about as close (a tie is not evidence)."""
    out: dict[int, np.ndarray] = {}
    known_c = [project(H, next(m for m in t.markers if m.id == k).corners_mm()).mean(0) for k in known]
    for mk in t.markers:
        if mk.id in known:
            continue
        pred = project(H, mk.corners_mm())
        side_p = _marker_side(pred)
        if tol_px is None:
            reach = min((float(np.linalg.norm(pred.mean(0) - kc)) for kc in known_c), default=0.0)
            tol = 0.5 * side_p + reach_frac * reach
        else:
            tol = tol_px
        near = []
        for c in squares:
            if not 0.6 < _marker_side(c) / max(side_p, 1e-6) < 1.6:
                continue
            d = float(np.linalg.norm(c.mean(0) - pred.mean(0)))
            if d <= tol:
                near.append((d, c))
        if not near:
            continue
        near.sort(key=lambda x: x[0])
        if len(near) > 1 and near[1][0] < near[0][0] + 0.5 * side_p and \
                np.linalg.norm(near[1][1].mean(0) - near[0][1].mean(0)) > 0.3 * side_p:
            continue  # two different squares fit about equally: do not guess
        c = _ordered_like(near[0][1], pred)
        out[mk.id] = _refine_marker_corners(grey, c - 0.5) + 0.5
    return out


def _anchor_quads(squares: list[np.ndarray], grey_small: np.ndarray, f: float,
                  *, limit: int = 3) -> list[np.ndarray]:
    """Four squares that could be a page's four corner markers, as marker-centre quads
    (clockwise, ``grey``'s px): a convex quadrilateral of squares of one size, each 3-15 % of
    the quadrilateral's mean side, with a light quiet zone around a dark square (a marker
    lies on paper); the ``limit`` most page-like of those (mostly paper inside, large, squares
    of strong contrast), then
    the ``limit`` most page-like completed from three squares. The print decides among them (:func:`_locate_by_anchor_quads`)."""
    from itertools import combinations
    if len(squares) < 4:
        return []
    hs, ws = grey_small.shape
    g = grey_small.astype(np.float32)

    def sample(pts):
        x = np.clip((pts[:, 0] * f - 0.5).round().astype(int), 0, ws - 1)
        y = np.clip((pts[:, 1] * f - 0.5).round().astype(int), 0, hs - 1)
        return g[y, x]
    scored = []
    for c in squares:
        m = c.mean(0)
        inner = sample(m + 0.8 * (c - m)).mean()
        mids = (c + np.roll(c, -1, 0)) / 2
        outer = sample(np.concatenate([m + 1.6 * (c - m), m + 1.5 * (mids - m)])).mean()
        # relative contrast: black print on paper ~0.5-0.8, a tablecloth's checks ~0.2
        scored.append(((outer - inner) / max(outer, 1.0), outer, c))
    scored.sort(key=lambda x: -x[0])
    keep = [x for x in scored[:16] if x[0] > 0.08]
    sq = [c for _, _, c in keep]
    paper_all = np.array([o for _, o, _ in keep])
    contrast_all = np.array([q for q, _, _ in keep])
    uv = np.stack(np.meshgrid(np.linspace(0.1, 0.9, 9), np.linspace(0.1, 0.9, 9)), -1).reshape(-1, 2)

    def paper_like(q, idx):
        # share of the quad's inside as light as the paper round its squares: a page is mostly
        # paper; four squares of a tablecloth or of the artwork enclose the table or the print
        p = (q[0] * (1 - uv[:, :1]) * (1 - uv[:, 1:]) + q[1] * uv[:, :1] * (1 - uv[:, 1:])
             + q[2] * uv[:, :1] * uv[:, 1:] + q[3] * (1 - uv[:, :1]) * uv[:, 1:])
        ref = float(np.median(paper_all[list(idx)]))
        return float(np.mean(np.abs(sample(p) - ref) < 0.15 * ref))
    sides_all = np.array([_marker_side(c) for c in sq])
    centres_all = np.array([c.mean(0) for c in sq]).reshape(-1, 2)

    def plausible(q, sides):
        if not cv2.isContourConvex(q.astype(np.float32).reshape(-1, 1, 2)):
            return None
        L_ = float(np.mean(np.linalg.norm(q - np.roll(q, -1, 0), axis=1)))
        if not 0.03 < sides.mean() / max(L_, 1.0) < 0.15:
            return None
        return abs(cv2.contourArea(q.astype(np.float32)))
    fours, threes = [], []
    for combo in combinations(range(len(sq)), 4):
        sides = sides_all[list(combo)]
        if sides.max() > 2.0 * sides.min():
            continue
        q, order = _order_quad_idx(centres_all[list(combo)])
        area = plausible(q, sides)
        if area is not None:
            fours.append((paper_like(q, combo) * area ** 0.25 * contrast_all[list(combo)].mean() ** 2, q,
                          [sq[combo[i]] for i in order]))
    # Three squares (the fourth lost under glare, a hand or a heavy mark): the fourth corner
    # of the parallelogram, for each choice of the square at the right angle; the page route
    # then registers on the print, which corrects the perspective this leaves out.
    for combo in combinations(range(len(sq)), 3):
        sides = sides_all[list(combo)]
        if sides.max() > 2.0 * sides.min():
            continue
        pts = centres_all[list(combo)]
        for b in range(3):
            a_, c_ = pts[(b + 1) % 3], pts[(b + 2) % 3]
            u, v = a_ - pts[b], c_ - pts[b]
            cosang = float(np.dot(u, v) / max(np.linalg.norm(u) * np.linalg.norm(v), 1e-9))
            if abs(cosang) > 0.6:  # far from a corner seen in perspective
                continue
            q, order = _order_quad_idx(np.vstack([pts, a_ + c_ - pts[b]]))
            area = plausible(q, sides)
            if area is not None:
                threes.append((paper_like(q, combo) * area ** 0.25 * contrast_all[list(combo)].mean() ** 2, q,
                               [sq[combo[i]] if i < 3 else None for i in order]))
    fours.sort(key=lambda x: -x[0])
    threes.sort(key=lambda x: -x[0])
    return [(q, sqs) for _, q, sqs in fours[:limit]] + [(q, sqs) for _, q, sqs in threes[:limit]]


def _order_quad_idx(q: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """:func:`_order_quad` and the input index of each ordered corner."""
    c = q.mean(0)
    idx = np.argsort(np.arctan2(q[:, 1] - c[1], q[:, 0] - c[0]))
    start = int(np.argmin(q[idx].sum(1)))
    idx = np.roll(idx, -start)
    return q[idx], [int(i) for i in idx]


def _page_quad_from_marker_centres(t: Template, centres: np.ndarray, shift: int,
                                   squares: Sequence[np.ndarray | None] | None = None) -> np.ndarray | None:
    """The page outline if the four marker centres ``centres`` (clockwise) are ``t``'s markers
    in its corner order rolled by ``shift``. With the ``squares`` themselves (same order, None
    for a corner completed from the other three) the homography is fitted to their corners,
    which holds the perspective that a parallelogram of three centres leaves out."""
    mk = [m for m in t.markers]
    mc = np.array([m.corners_mm().mean(0) for m in mk])
    if len(mc) != 4:
        return None
    src, order = _order_quad_idx(mc)
    dst = np.roll(centres, -shift, 0)
    try:
        H = cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32)).astype(float)
    except cv2.error:
        return None
    if not np.all(np.isfinite(H)) or abs(H[2, 2]) < 1e-12:
        return None
    H = normalise_h(H)
    if squares is not None:
        sqs = list(squares[shift:]) + list(squares[:shift])  # as np.roll(dst, -shift)
        s_mm, d_px = [], []
        for j, i in enumerate(order):
            if sqs[j] is None:
                continue
            cm = mk[i].corners_mm()
            s_mm.append(cm)
            d_px.append(_ordered_like(np.asarray(sqs[j], float), project(H, cm)))
        if len(s_mm) >= 3:
            H2, _ = cv2.findHomography(np.concatenate(s_mm), np.concatenate(d_px), 0)
            if H2 is not None and np.all(np.isfinite(H2)) and abs(H2[2, 2]) > 1e-12:
                H = normalise_h(H2)
    return _order_quad(project(H, _page_corners(t)))


#: A square anchored as the fourth marker beside three read ones is refused when the print
#: lines up this much worse with it than without it (registration score; the same 0.1 as
#: ``RETRY_MIN_GAIN``, the gap between a wrong location and a right one). True fourth markers
#: that a bend, a fold or the lens moved off the other three's homography line up 0.05-0.065
#: worse (4 hard dev photos, and the 18 mm bend of test_vision_rectify): kept; the filled box
#: anchored 57 px from varied80000 crypts-3-hard-m-s80014's marker 8 lines up 0.27 worse.
ANCHOR_MAX_LOSS = 0.1


def _in_view(t: Template, H: np.ndarray, shape) -> bool:
    try:
        _check_in_view(t, H, shape, method="markers")
    except SheetCutOffError:
        return False
    return True


def _marker_choices(t: Template, found: dict, mids, shape):
    """Every way to take one detection per id of ``mids`` (the kept one, or one of
    ``found.others``): ``(ids that agree, corners by id, page in view, mean marker side)``."""
    others = getattr(found, "others", {})
    options = [[found[m]] + list(others.get(m, ())) for m in mids]
    out = []
    for combo in itertools.islice(itertools.product(*options), 256):
        f = dict(zip(mids, combo))
        ok, _ = _consistent_markers(t, f, list(mids))
        H = _marker_h(t, f, ok) if len(ok) >= 2 else None
        view = H is not None and _in_view(t, H, shape)
        side = float(np.mean([_marker_side(f[m]) for m in ok])) if ok else 0.0
        out.append((len(ok), view, side, ok, f))
    return out


def _whole_sheets(t: Template, found: dict, mids, shape) -> list:
    """The distinct sheets of ``t`` in view that three or more of its markers pin down:
    ``[(its markers' (id, x, y) centres, their mean side in px)]``."""
    if len(mids) < 3:
        return []
    sheets = {}
    for n, view, side, ok, f in _marker_choices(t, found, sorted(mids), shape):
        if n >= 3 and view:
            key = tuple(sorted((m, *np.round(f[m].mean(0)).astype(int).tolist()) for m in ok))
            sheets[key] = side
    # (three markers of a sheet whose fourth was read too are the same sheet)
    distinct = []
    for sh in sorted(sheets, key=len, reverse=True):
        if not any(set(sh) <= set(d) for d, _ in distinct):
            distinct.append((sh, sheets[sh]))
    return distinct


def _several_sheets(whole: dict, template_id: str | None) -> SeveralSheetsError:
    names = [k for k, v in whole.items() for _ in v]
    n = len(names)
    what = (f"{n} copies of {names[0]}" if len(set(names)) == 1
            else " and ".join(f"{k}" if len(v) == 1 else f"{len(v)} x {k}"
                              for k, v in whole.items() if v))
    hint = "Photograph each sheet on its own, with the other sheets out of the frame"
    if len(set(names)) > 1 and template_id is None:
        hint += ", or name the sheet to read with --template"
    return SeveralSheetsError(
        f"the photo holds {n} whole score sheets ({what}): sheetcheck reads one sheet per photo "
        "and cannot tell which of them is meant.", hint=hint + ".")


def _pick_repeated(t: Template, found: dict, mids, repeated, shape):
    """The detections of ``mids`` that make the most markers agree on a sheet in view (then
    the larger markers: the nearer sheet); ``(corners by id, ids, details)``."""
    best = max(_marker_choices(t, found, sorted(mids), shape), key=lambda c: c[:3])
    n, view, _, ok, f = best
    why = {"ids": sorted(repeated), "kept": sorted(ok), "in_view": bool(view)}
    return f, sorted(ok), why


def _locate_by_markers(grey, found, cands, template_id, image, squares=None):
    """Template and homography from detected markers, or None if no candidate's markers.
    ``squares``: :func:`_square_candidates`, to complete fewer than four markers."""
    by_t: dict[str, list[int]] = {}
    tmap = {}
    for t in cands:
        for mid in t.marker_ids:
            if mid in found:
                by_t.setdefault(t.id, []).append(mid)
                tmap[t.id] = t
    if not by_t:
        return None
    ranked = sorted(by_t.items(), key=lambda kv: -len(kv[1]))
    tid, mids = ranked[0]
    t = tmap[tid]
    details: dict = {"markers_detected": sorted(found)}
    if len(ranked) > 1:
        details["other_templates_markers"] = {k: sorted(v) for k, v in ranked[1:]}
        details["template_choice"] = (f"markers of {len(ranked)} templates in the photo; chose "
                                      f"{tid} with {len(mids)} marker(s)")
    shape = np.asarray(image).shape[:2]
    repeated = [m for m in mids if getattr(found, "others", {}).get(m)]
    if repeated or sum(len(v) >= 3 for _, v in ranked) >= 2:
        # (a second sheet is possible only with a marker seen twice, or three markers of
        # another template: the usual photo skips this)
        whole = {k: _whole_sheets(tmap[k], found, v, shape) for k, v in ranked}
        sheets = sorted(((side, k) for k, v in whole.items() for _, side in v), reverse=True)
        if len(sheets) >= 2:
            if sheets[0][0] < DOMINANT_SHEET * sheets[1][0]:
                raise _several_sheets(whole, template_id)
            # One sheet far nearer the camera than any other (a player's own, another's
            # across the table): it is the one photographed.
            details["other_sheets"] = [{"template": k, "marker_side_px": round(sd, 1)}
                                       for sd, k in sheets[1:]]
            if sheets[0][1] != tid:
                tid = sheets[0][1]
                t, mids = tmap[tid], list(by_t[tid])
                details["template_choice"] = (f"markers of {len(ranked)} templates in the "
                                              f"photo; chose {tid}, the nearest sheet")
                repeated = [m for m in mids if getattr(found, "others", {}).get(m)]
    if repeated:
        # The same marker twice: a second sheet of this template, whole or in part. Take the
        # one detection per id that makes the most markers agree on a sheet in view (the
        # neighbour's sheet at the table edge is cut off).
        found, mids, why = _pick_repeated(t, found, mids, repeated, shape)
        details["markers_repeated"] = why
    found = dict(found)
    mids = sorted(mids)
    if len(mids) < 4:
        more = _second_look(grey, t, found, mids)
        if more:
            details["markers_second_look"] = sorted(more)
            mids = sorted(mids + more)
    mids, dropped = _consistent_markers(t, found, mids)
    if dropped:
        details["markers_rejected"] = sorted(dropped)
    src = np.concatenate([next(m for m in t.markers if m.id == mid).corners_mm() for mid in mids])
    dst = np.concatenate([found[mid] for mid in mids])
    method = "markers"
    H = _marker_h(t, found, mids)
    if H is None:
        return None
    res = np.linalg.norm(project(H, src) - dst, axis=1)
    rms = float(np.sqrt(np.mean(res ** 2)))
    if len(mids) <= 3:
        # One marker is four close points: far corners extrapolate badly; with two or three the
        # perspective near the missing corner(s) is weakly constrained. Add the page outline.
        quad = find_page_quad(image)
        if quad is not None:
            pred = project(H, _page_corners(t))
            # Match each predicted page corner to the nearest quad corner (cyclic order).
            best = min(range(4), key=lambda s: np.sum(np.linalg.norm(np.roll(quad, -s, 0) - pred, axis=1)))
            q = np.roll(quad, -best, 0)
            err = np.linalg.norm(q - pred, axis=1)
            page_px = np.linalg.norm(pred[0] - pred[2])
            if np.max(err) < (0.04 if len(mids) == 3 else 0.25) * page_px:
                src2 = np.concatenate([src, _page_corners(t)])
                dst2 = np.concatenate([dst, q])
                # Marker corners are far more precise than a page outline: weight them up.
                w = np.r_[np.full(len(src), 3.0), np.ones(4)]
                H2 = _weighted_homography(src2, dst2, w)
                if H2 is not None:
                    H = H2
                    method = "markers+page"
                    res = np.linalg.norm(project(H, src) - dst, axis=1)
                    rms = float(np.sqrt(np.mean(res ** 2)))
                    details["page_corner_error_px"] = float(np.max(np.linalg.norm(project(H, _page_corners(t)) - q, axis=1)))
    if len(mids) < 4 and squares:
        # The missing markers' squares are usually still there, only unreadable (blur, glare,
        # a small page): take the ones where the homography so far puts them.
        anch = _anchor_markers(grey, t, H, squares, mids)
        if anch:
            found.update(anch)
            mids2, dropped2 = _consistent_markers(t, found, sorted(mids + list(anch)))
            H2 = _marker_h(t, found, mids2) if len(mids2) > len(mids) else None
            if H2 is not None and len(mids) >= 3:
                # Three read markers already pin the sheet down; a fourth square of the right
                # size within reach may be another dark square (a filled box near the corner:
                # varied80000 crypts-3-hard-m-s80014, anchored 57 px off, the print then lined
                # up at 0.38 and the regions were 7 mm off). Four points always fit a
                # homography, so only the print can tell: the square is kept unless the print
                # lines up worse with it.
                s3 = registration_score(grey, H, t, markers=True)
                s4 = registration_score(grey, H2, t, markers=True)
                if s4 < s3 - ANCHOR_MAX_LOSS:
                    details["markers_anchor_refused"] = {"ids": sorted(set(mids2) - set(mids)),
                                                         "registration": round(s4, 4),
                                                         "without": round(s3, 4)}
                    H2 = None
            if H2 is not None:
                details["markers_anchored"] = sorted(set(mids2) - set(mids))
                mids, H, method = mids2, H2, "markers"
                details.pop("page_corner_error_px", None)
                src = np.concatenate([next(m for m in t.markers if m.id == mid).corners_mm() for mid in mids])
                dst = np.concatenate([found[mid] for mid in mids])
                res = np.linalg.norm(project(H, src) - dst, axis=1)
                rms = float(np.sqrt(np.mean(res ** 2)))
    marker_side = float(np.mean([np.linalg.norm(found[m][0] - found[m][1]) for m in mids]))
    # Residual relative to the marker size (px/mm of this photo) makes it scale-free;
    # fewer markers means less over-determination, so less certainty.
    rel = rms / max(marker_side, 1.0) * 14.0  # ~ residual in px at 1 px/mm
    quality = float(np.exp(-rel / 2.0)) * {1: 0.6, 2: 0.85, 3: 0.95, 4: 1.0}[len(mids)]
    if method == "markers+page" and len(mids) == 1:
        quality *= 0.8
    details.update({"marker_rms_px": round(rms, 3), "marker_side_px": round(marker_side, 1)})
    return t, H, method, tuple(sorted(mids)), quality, details


def _weighted_homography(src, dst, w):
    """DLT homography with per-point weights (normalised for conditioning)."""
    def norm(p):
        c = p.mean(0)
        s = np.sqrt(2) / max(np.mean(np.linalg.norm(p - c, axis=1)), 1e-9)
        return np.array([[s, 0, -s * c[0]], [0, s, -s * c[1]], [0, 0, 1]])
    Ts, Td = norm(src), norm(dst)
    a = project(Ts, src); b = project(Td, dst)
    rows = []
    for (x, y), (u, v), wi in zip(a, b, w):
        rows.append(wi * np.array([-x, -y, -1, 0, 0, 0, u * x, u * y, u]))
        rows.append(wi * np.array([0, 0, 0, -x, -y, -1, v * x, v * y, v]))
    _, _, vt = np.linalg.svd(np.array(rows))
    Hn = vt[-1].reshape(3, 3)
    H = np.linalg.inv(Td) @ Hn @ Ts
    if abs(H[2, 2]) < 1e-12:
        return None
    return normalise_h(H)


# --------------------------------------------------------------------------------------------
# page quadrilateral
# --------------------------------------------------------------------------------------------

def _whiteness(rgb: np.ndarray) -> np.ndarray:
    """Bright *and* colourless: the darkest channel minus half the chroma. Paper scores high
    under any light; light-coloured tablecloths, wood and hands score lower than in grey."""
    mn = rgb.min(axis=2).astype(np.int16)
    mx = rgb.max(axis=2).astype(np.int16)
    return np.clip(mn - (mx - mn) // 2, 0, 255).astype(np.uint8)


def _quad_contrast(g: np.ndarray, quad: np.ndarray) -> float:
    """Median brightness just inside the quad's edges minus just outside, over the median
    inside: a page stands out from the table all along its outline."""
    c = quad.mean(0)
    inner = c + (quad - c) * 0.96
    outer = c + (quad - c) * 1.04
    h, w = g.shape

    def ring(q):
        pts = np.concatenate([np.linspace(q[i], q[(i + 1) % 4], 40, endpoint=False) for i in range(4)])
        x = np.clip(pts[:, 0].round().astype(int), 0, w - 1)
        y = np.clip(pts[:, 1].round().astype(int), 0, h - 1)
        inside = (pts[:, 0] >= 0) & (pts[:, 0] < w) & (pts[:, 1] >= 0) & (pts[:, 1] < h)
        return g[y, x].astype(float), inside
    vi, _ = ring(inner)
    vo, ok = ring(outer)
    if ok.sum() < 20:
        return 0.1  # page fills the frame: nothing outside to compare with
    # the lower quartile: a page merged with a bright patch of table fails on that stretch
    diff = vi[ok] - vo[ok]
    return float(np.percentile(diff, 25) / max(np.median(vi), 1.0))


def find_page_quad(image: np.ndarray, *, long_side: int = 640) -> np.ndarray | None:
    """The page as the largest bright convex quadrilateral, (4, 2) px corners (project
    convention, in ``image``'s px) clockwise from the one nearest the image's top-left, or None.

    Paper is the brightest, least coloured large thing on a game table. After removing the
    printed ink by a closing, the grey image and a "whiteness" image are thresholded at
    several levels; each large component's convex hull is reduced to four corners and scored
    by its area, how completely the component fills it, and how much brighter the page is
    than the table all along its outline (robust to clutter, soft shadows and light cloths).
    """
    h, w = image.shape[:2]
    f = min(1.0, long_side / max(h, w))
    small = cv2.resize(image, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else image.copy()
    best, best_score = None, 0.0
    for g, component, area in _bright_components(small):
        cnts, _ = cv2.findContours(component, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
        scored = _hull_quad(cv2.convexHull(max(cnts, key=cv2.contourArea)), area, g)
        if scored is not None and scored[0] > best_score:
            best_score, best = scored
    if best is None:
        return None
    if small.ndim == 3:
        best = _snap_quad_edges(best, _whiteness(small))
    # index coords in the small image -> px in the original (project convention)
    q = (best + 0.5) / f
    return _order_quad(q)


def _hull_quad(hull: np.ndarray, filled: float, g: np.ndarray, *, min_fill: float = 0.8,
               min_area: float = 0.0) -> tuple[float, np.ndarray] | None:
    """A bright component's convex ``hull`` reduced to four corners and scored as a page:
    ``(score, quad)`` (index coords of ``g``), or None when the quad is under ``min_area`` of
    ``g``, the component (``filled`` px) fills less than ``min_fill`` of it (a page fills its
    quad; clutter does not) or it is not brighter than the table along its outline. Score: the
    square root of the area times the fill squared times the contrast (capped at 0.3)."""
    quad = _hull_to_quad(hull)
    if quad is None:
        return None
    qa = abs(cv2.contourArea(quad.astype(np.float32)))
    if qa < min_area * g.shape[0] * g.shape[1]:
        return None
    fill = filled / max(qa, 1.0)
    if fill < min_fill:
        return None
    contrast = _quad_contrast(g, quad)
    if contrast < 0.03:
        return None
    return np.sqrt(qa) * min(fill, 1.0) ** 2 * min(contrast, 0.3), quad


def _outline_run_quads(outline: np.ndarray, g: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """Scored quads ``(score, quad)`` made by the straight runs (>= 6 % of the short side) of
    one component's ``outline`` (index coords of ``g``), merged into lines."""
    sh, sw = g.shape[:2]
    ap = cv2.approxPolyDP(outline, 0.004 * cv2.arcLength(outline, True), True).reshape(-1, 2).astype(np.float64)
    runs = np.hstack([ap, np.roll(ap, -1, 0)])
    runs = runs[np.hypot(runs[:, 2] - runs[:, 0], runs[:, 3] - runs[:, 1]) >= 0.06 * min(sh, sw)]
    return _quads_from_lines(_merged_lines(runs)[:8], g)


def _distinct_quads(quads, tol: float) -> list[np.ndarray]:
    """``quads`` in order, without any whose corners all lie within ``tol`` px of a kept one."""
    out: list[np.ndarray] = []
    for q in quads:
        if all(np.max(np.linalg.norm(q - u, axis=1)) > tol for u in out):
            out.append(q)
    return out


def _bright_components(small: np.ndarray):
    """The large bright components of ``small`` (a downscaled photo) that may be the page:
    ``(g, component, area)`` for the three largest components (each at least 4 % of the image)
    of the grey and the "whiteness" image (print closed away, blurred), thresholded at Otsu's
    level and 0.9, 1.1 and 1.2 times it; ``g`` is the image thresholded, ``component`` a
    uint8 mask."""
    chans = [small] if small.ndim == 2 else [_grey(small), _whiteness(small)]
    sh, sw = chans[0].shape
    k = max(3, int(min(sh, sw) * 0.02) | 1)
    for g in chans:
        g = cv2.morphologyEx(g, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
        g = cv2.GaussianBlur(g, (5, 5), 0)
        otsu, _ = cv2.threshold(g, 0, 255, cv2.THRESH_BINARY + cv2.THRESH_OTSU)
        for thr in (otsu, otsu * 0.9, otsu * 1.1, otsu * 1.2):
            _, bw = cv2.threshold(g, float(np.clip(thr, 1, 254)), 255, cv2.THRESH_BINARY)
            bw = cv2.morphologyEx(bw, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_RECT, (5, 5)))
            n, lab, stats, _ = cv2.connectedComponentsWithStats(bw, connectivity=4)
            for i in np.argsort(-stats[1:, cv2.CC_STAT_AREA])[:3] + 1:
                area = stats[i, cv2.CC_STAT_AREA]
                if area < 0.04 * sh * sw:
                    break
                yield g, (lab == i).astype(np.uint8), area


def _snap_quad_edges(quad: np.ndarray, white: np.ndarray) -> np.ndarray:
    """Move each side of ``quad`` (index coords of ``white``) onto the page's edge nearby: the
    place where, going outwards, "whiteness" (bright and colourless) falls most steeply, found
    along 24 normals per side within 6 % of the page's size and fitted with a line.

    A threshold cuts a page where it lies in shadow or curls away from the light (its shaded
    band falls with the table: a bottom edge 40 px off on a 1280 px photo); the page's edge is
    still its steepest step. A side keeps its place when no consistent edge is found."""
    q = _order_quad(quad.astype(np.float64))
    g = cv2.GaussianBlur(white, (0, 0), 1.5).astype(np.float32)
    diag = float(np.linalg.norm(q[0] - q[2]))
    d = max(4.0, 0.06 * diag)
    offs = np.linspace(-d, d, int(2 * d) + 1)
    ts = np.linspace(0.12, 0.88, 24)
    c = q.mean(0)
    lines = []
    for i in range(4):
        a_, b_ = q[i], q[(i + 1) % 4]
        u = (b_ - a_) / max(np.linalg.norm(b_ - a_), 1e-9)
        n = np.array([u[1], -u[0]])
        if np.dot((a_ + b_) / 2 - c, n) < 0:
            n = -n  # outwards
        base = a_[None, :] + ts[:, None] * (b_ - a_)[None, :]
        sp = base[:, None, :] + offs[None, :, None] * n[None, None, :]
        prof = cv2.remap(g, sp[..., 0].astype(np.float32), sp[..., 1].astype(np.float32),
                         cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)
        step = prof[:, :-4] - prof[:, 4:]           # inside minus outside, over 4 px
        k = step.argmax(1)
        strength = step[np.arange(len(ts)), k]
        ok = strength > max(8.0, 0.5 * float(np.median(strength)))
        pts = base[ok] + (offs[k[ok]] + 2.0)[:, None] * n[None, :]
        if len(pts) < 8:
            lines.append((a_, u))
            continue
        # (outlier removal: a hand, a shadow edge, a gap)
        lines.append(_fit_line(pts, k=2.5, floor=1.0, min_keep=8))
    out = _quad_from_lines(lines)
    if out is None:
        return quad
    if np.max(np.linalg.norm(out - q, axis=1)) > 2.5 * d or \
            not cv2.isContourConvex(out.astype(np.float32).reshape(-1, 1, 2)):
        return quad
    return out


def _page_quads_from_lines(image: np.ndarray, *, long_side: int = 640) -> list[np.ndarray]:
    """Page outlines from straight edges, best first, (4, 2) px corners (project convention).

    Long straight edges (Hough on the edges of the grey image with the print closed away) are
    merged into lines; two roughly parallel pairs of lines at an angle make a quadrilateral,
    scored like :func:`find_page_quad`'s by how much brighter it is than the table all along
    its outline, times the square root of its area. For photos where the page does not stand
    out by brightness alone; the print then decides (the page route's registration)."""
    h, w = image.shape[:2]
    f = min(1.0, long_side / max(h, w))
    small = cv2.resize(image, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else image
    g = _grey(small)
    sh, sw = g.shape
    k = max(3, int(min(sh, sw) * 0.02) | 1)
    g = cv2.GaussianBlur(cv2.morphologyEx(g, cv2.MORPH_CLOSE, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k))),
                         (5, 5), 0)
    med = float(np.median(g))
    edges = cv2.Canny(g, 0.4 * med, 0.9 * med)
    # gaps: where the table is as light as the paper (a gingham's light checks) the edge breaks
    segs = cv2.HoughLinesP(edges, 1, np.pi / 360, threshold=30, minLineLength=0.06 * min(sh, sw),
                           maxLineGap=max(6.0, 0.03 * min(sh, sw)))
    if segs is None:
        return []
    lines = _merged_lines(segs.reshape(-1, 4).astype(np.float64)[:400])[:12]
    cands = _quads_from_lines(lines, g)
    return [_order_quad((q + 0.5) / f) for _, q in cands[:3]]


def _page_quads_from_outline(image: np.ndarray, *, long_side: int = 640) -> list[np.ndarray]:
    """Page outlines from the straight runs of bright components' outlines, best first, (4, 2)
    px corners (project convention).

    :func:`find_page_quad` takes a component's convex hull, so a page whose corner lies in a
    strong shadow (below every brightness threshold) loses that corner: the hull cuts across
    it. The page's sides, though, still run straight along the component's outline where it
    is lit, and a busy cloth that hides them from :func:`_page_quads_from_lines` (a gingham's
    checks make many long edges) makes no long straight runs on the page component's outline.
    So the outline is reduced to straight runs, merged into lines, and every four of them that
    make a quadrilateral are scored as there. For the last resort of the page route only."""
    h, w = image.shape[:2]
    f = min(1.0, long_side / max(h, w))
    small = cv2.resize(image, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else image
    cands = []
    for g, component, _ in _bright_components(small):
        cnts, _ = cv2.findContours(component, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
        cands += _outline_run_quads(max(cnts, key=cv2.contourArea), g)
    cands.sort(key=lambda c: -c[0])
    return _distinct_quads([_order_quad((q + 0.5) / f) for _, q in cands], 10 / f)


def _merged_lines(segs: np.ndarray) -> list[list]:
    """Segments ``(x1, y1, x2, y2)`` merged into lines ``[angle, offset, length, point,
    direction]`` (nearly parallel and within 6 px), longest first."""
    lines: list[list] = []
    for x1, y1, x2, y2 in segs:
        d = np.array([x2 - x1, y2 - y1])
        ln = float(np.linalg.norm(d))
        d /= ln
        if d[0] < 0 or (d[0] == 0 and d[1] < 0):
            d = -d
        nrm = np.array([-d[1], d[0]])
        ang = float(np.arctan2(d[1], d[0]))
        off = float(nrm @ np.array([x1, y1]))
        for L_ in lines:
            if abs(np.sin(ang - L_[0])) < 0.05 and abs(off - L_[1]) < 6:
                L_[2] += ln
                break
        else:
            lines.append([ang, off, ln, np.array([x1, y1]), d])
    lines.sort(key=lambda L_: -L_[2])
    return lines


def _quads_from_lines(lines: list[list], g: np.ndarray) -> list[tuple[float, np.ndarray]]:
    """Quadrilaterals (index coords of ``g``) made by two roughly parallel pairs of ``lines`` at
    an angle, convex, inside the image, at least 4 % of it, brighter inside than outside all
    along their outline: ``(score, quad)``, best first (score: the square root of the area
    times the contrast, capped)."""
    sh, sw = g.shape

    def meet(a, b):
        A = np.array([a[4], -b[4]]).T
        if abs(np.linalg.det(A)) < 1e-6:
            return None
        s_, _ = np.linalg.solve(A, b[3] - a[3])
        return a[3] + s_ * a[4]
    pairs = [(i, j) for i in range(len(lines)) for j in range(i + 1, len(lines))
             if abs(np.sin(lines[i][0] - lines[j][0])) < 0.57 and abs(lines[i][1] - lines[j][1]) > 0.15 * min(sh, sw)]
    cands = []
    for a, (i, j) in enumerate(pairs):
        for (m, n) in pairs[a + 1:]:
            if len({i, j, m, n}) < 4 or abs(np.sin(lines[i][0] - lines[m][0])) < 0.64:
                continue
            pts = [meet(lines[i], lines[m]), meet(lines[m], lines[j]), meet(lines[j], lines[n]),
                   meet(lines[n], lines[i])]
            if any(p is None for p in pts):
                continue
            q = np.array(pts)
            if np.any(q < -0.02 * max(sh, sw)) or np.any(q[:, 0] > sw * 1.02) or np.any(q[:, 1] > sh * 1.02):
                continue
            if not cv2.isContourConvex(q.astype(np.float32).reshape(-1, 1, 2)):
                continue
            area = abs(cv2.contourArea(q.astype(np.float32)))
            if area < 0.04 * sh * sw:
                continue
            contrast = _quad_contrast(g, q)
            if contrast < 0.03:
                continue
            cands.append((np.sqrt(area) * min(contrast, 0.3), q))
    cands.sort(key=lambda c: -c[0])
    return cands


def _hull_to_quad(hull: np.ndarray) -> np.ndarray | None:
    peri = cv2.arcLength(hull, True)
    for eps in (0.01, 0.02, 0.03, 0.05, 0.08):
        ap = cv2.approxPolyDP(hull, eps * peri, True)
        if len(ap) == 4 and cv2.isContourConvex(ap):
            return ap.reshape(4, 2).astype(np.float64)
        if len(ap) < 4:
            break
    # Fall back to the minimum-area rectangle when the outline is rounded (curl, shadow).
    if peri > 0:
        return cv2.boxPoints(cv2.minAreaRect(hull)).astype(np.float64)
    return None


def _order_quad(q: np.ndarray) -> np.ndarray:
    c = q.mean(0)
    ang = np.arctan2(q[:, 1] - c[1], q[:, 0] - c[0])
    q = q[np.argsort(ang)]  # clockwise in image coordinates (y down)
    start = int(np.argmin(q.sum(1)))
    return np.roll(q, -start, 0)


def _quad_touches_border(q: np.ndarray, shape) -> bool:
    h, w = shape[:2]
    m = 0.004 * max(h, w) + 1
    return bool(np.any((q[:, 0] < m) | (q[:, 1] < m) | (q[:, 0] > w - m) | (q[:, 1] > h - m)))


# --------------------------------------------------------------------------------------------
# no markers: page + features + ECC
# --------------------------------------------------------------------------------------------

_ref_ink_cache: dict = {}


def _ref_ink(t: Template, dpi: float, markers: bool, what: str = "ink"):
    """The reference's ink image at ``dpi`` and what registration derives from it (blurred
    copies, ORB keypoints), computed once per template."""
    key = (t.id, t.version, t.source, round(dpi, 3), markers)
    d = _ref_ink_cache.get(key)
    if d is None:
        ref = reference_render(t, dpi=dpi, markers=markers)
        ink = ink_map(_grey(ref), background_px=dpi / MM_PER_INCH * 8)
        d = {"ink": ink, "b1": _blurred(ink, 1.0), "b2": _blurred(ink, 2.0)}
        if len(_ref_ink_cache) > 64:
            _ref_ink_cache.clear()
        _ref_ink_cache[key] = d
    if what in ("kp", "des") and "kp" not in d:
        # ORB features only when feature matching runs (not on the markers route)
        d["kp"], d["des"] = _orb().detectAndCompute(_ink_u8(d["ink"]), None)
    return d[what]


def _ink_u8(ink: np.ndarray) -> np.ndarray:
    return np.clip(ink * 510, 0, 255).astype(np.uint8)


def _orb():
    return cv2.ORB_create(nfeatures=800, scaleFactor=1.3, nlevels=4, edgeThreshold=15,
                          patchSize=15, fastThreshold=10)


def _ncc(a: np.ndarray, b: np.ndarray, mask: np.ndarray | None = None) -> float:
    if mask is not None:
        a, b = a[mask], b[mask]
    a = a - a.mean(); b = b - b.mean()
    d = np.sqrt(float((a * a).sum()) * float((b * b).sum()))
    return float((a * b).sum() / d) if d > 0 else 0.0


def _blurred(x: np.ndarray, s: float) -> np.ndarray:
    return cv2.GaussianBlur(x, (0, 0), s)


def _orb_refine(photo_ink: np.ndarray, t: Template, markers: bool) -> tuple[np.ndarray | None, int]:
    """Homography (reference index -> photo-warp index) from ORB matches with MAGSAC."""
    a = _ink_u8(photo_ink)
    ka, da = _orb().detectAndCompute(a, None)
    kb, db = _ref_ink(t, REG_DPI, markers, "kp"), _ref_ink(t, REG_DPI, markers, "des")
    if da is None or db is None or len(ka) < 8 or len(kb) < 8:
        return None, 0
    matches = cv2.BFMatcher(cv2.NORM_HAMMING, crossCheck=True).match(db, da)
    # The page quad already aligns the frames to a few mm: far matches are wrong.
    lim = 0.06 * max(a.shape)
    good = [m for m in matches
            if np.hypot(kb[m.queryIdx].pt[0] - ka[m.trainIdx].pt[0], kb[m.queryIdx].pt[1] - ka[m.trainIdx].pt[1]) < lim]
    if len(good) < 12:
        return None, len(good)
    src = np.float32([kb[m.queryIdx].pt for m in good])
    dst = np.float32([ka[m.trainIdx].pt for m in good])
    G, inl = cv2.findHomography(src, dst, cv2.USAC_MAGSAC, 2.0, maxIters=2000, confidence=0.999)
    if G is None:
        return None, 0
    return G, int(inl.sum())


def _ecc_refine(photo_ink: np.ndarray, ref_ink: np.ndarray, G0: np.ndarray, *, iters: int = 60):
    """ECC homography (ref index -> photo index), starting from ``G0``; (G, correlation)."""
    tmpl = _blurred(ref_ink, 1.0).astype(np.float32)
    inp = _blurred(photo_ink, 1.0).astype(np.float32)
    G = G0.astype(np.float32).copy()
    try:
        cc, G = cv2.findTransformECC(tmpl, inp, G, cv2.MOTION_HOMOGRAPHY,
                                     (cv2.TERM_CRITERIA_EPS | cv2.TERM_CRITERIA_COUNT, iters, 1e-5),
                                     None, 3)
    except cv2.error:
        return G0, None
    return G.astype(np.float64), float(cc)


def _frame_ink(image_grey: np.ndarray, H: np.ndarray, t: Template) -> np.ndarray:
    """The photo's ink in the template frame at ``REG_DPI`` (what registration and blur see)."""
    g = warp_to_frame(image_grey, H, REG_DPI, frame_size(t, REG_DPI))
    return ink_map(g, background_px=REG_DPI / MM_PER_INCH * 8)


def registration_score(image_grey: np.ndarray, H: np.ndarray, t: Template, *, markers: bool,
                       ink: np.ndarray | None = None) -> float:
    """How well the photo's print lines up with the template's rendering under ``H``:
    correlation of the two ink images in the template frame at ``REG_DPI`` (-1..1; a right
    registration of a real photo gives ~0.5-0.8, a wrong template or orientation < 0.3).
    ``ink``: :func:`_frame_ink` of the same photo and ``H``, when already computed."""
    if ink is None:
        ink = _frame_ink(image_grey, H, t)
    return _ncc(_blurred(ink, 1.0), _ref_ink(t, REG_DPI, markers, "b1"))


def _locate_by_quad(image_grey, cands, *, markers_printed: bool | None, border_ok: bool = False,
                    image: np.ndarray | None = None, quad: np.ndarray | None = None):
    """Page quad -> (template, rotation) candidates -> ORB + MAGSAC -> ECC.

    ``quad`` (page corners px, from markers) replaces the search for the page outline."""
    if quad is None:
        quad = find_page_quad(image if image is not None else image_grey)
    if quad is None:
        raise NoSheetFoundError(_NO_SHEET[0], hint=_NO_SHEET[1])
    touches = _quad_touches_border(quad, image_grey.shape)
    k = REG_DPI / MM_PER_INCH
    half = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]], float)

    def to_h(H0, G):
        # G: frame index (reference) -> frame index (photo warp); compose to mm -> image px
        return normalise_h(H0 @ scale_matrix(1 / k) @ (half @ G @ np.linalg.inv(half)) @ scale_matrix(k))

    scored = []
    warped_cache: dict = {}
    for t in cands:
        size = frame_size(t, REG_DPI)
        for mk in ((True, False) if markers_printed is None else (markers_printed,)):
            ref = _ref_ink(t, REG_DPI, mk)
            for rot in range(4):
                key = (t.width_mm, t.height_mm, rot)
                if key not in warped_cache:
                    q = np.roll(quad, -rot, 0)
                    H0 = normalise_h(cv2.getPerspectiveTransform(_page_corners(t).astype(np.float32),
                                                                 q.astype(np.float32)).astype(float))
                    g = warp_to_frame(image_grey, H0, REG_DPI, size)
                    ink = ink_map(g, background_px=k * 8)
                    warped_cache[key] = (H0, ink, _blurred(ink, 2.0))
                H0, ink, ink_b = warped_cache[key]
                s = _ncc(ink_b, _ref_ink(t, REG_DPI, mk, "b2"))
                scored.append((s, t, rot, mk, H0, ink, ref))
    scored.sort(key=lambda r: -r[0])
    # The coarse score puts the right orientation and near relatives first; register the best
    # few with features and decide on how well the print lines up afterwards.
    finals = []
    seen = set()
    for s, t, rot, mk, H0, ink, ref in scored:
        if (t.id, rot) in seen:
            continue
        seen.add((t.id, rot))
        if len(finals) >= 4 or (finals and s < scored[0][0] * 0.5):
            break
        G, inliers = _orb_refine(ink, t, mk)
        if G is None:
            G = np.eye(3)
        warped = cv2.warpPerspective(ink, G, (ref.shape[1], ref.shape[0]),
                                     flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
        score = _ncc(_blurred(warped, 1.0), _ref_ink(t, REG_DPI, mk, "b1"))
        score0 = _ncc(_blurred(ink, 1.0), _ref_ink(t, REG_DPI, mk, "b1"))
        # A homography from a handful of matches can fit them and still swing a far corner of
        # the page by centimetres (a blurred photo: 9 inliers moved a page corner 120 px, the
        # sheet then "left the frame"): with few inliers, a large move must earn its keep.
        h_, w_ = ref.shape[:2]
        box = np.array([[0, 0], [w_, 0], [w_, h_], [0, h_]], float)
        move = float(np.max(np.linalg.norm(project(G, box) - box, axis=1)))
        weak = inliers < 15 and move > 4 * REG_DPI / MM_PER_INCH and score < score0 + 0.03
        if score0 >= score or weak:  # the features made it worse (too few, or repetitive print)
            G, score = np.eye(3), score0
        finals.append({"template": t, "rotation": rot, "markers_printed": mk, "coarse": s,
                       "inliers": inliers, "score": score, "G": G, "H0": H0, "ink": ink, "ref": ref})
    if not finals:
        raise NoSheetFoundError(_NO_SHEET[0], hint=_NO_SHEET[1])
    finals.sort(key=lambda r: -r["score"])
    best = finals[0]
    # ECC on the winner only, at half the registration resolution (ECC's cost grows fast with
    # size): it polishes the feature homography to a fraction of a mm.
    inkh = cv2.resize(best["ink"], None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    refh = cv2.resize(best["ref"], None, fx=0.5, fy=0.5, interpolation=cv2.INTER_AREA)
    S = np.array([[0.5, 0, -0.25], [0, 0.5, -0.25], [0, 0, 1]])  # index -> half-size index
    Gh, cc = _ecc_refine(inkh, refh, S @ best["G"] @ np.linalg.inv(S), iters=40)
    ecc_used = False
    if cc is not None:
        G2 = np.linalg.inv(S) @ Gh @ S
        warped = cv2.warpPerspective(best["ink"], G2, (best["ref"].shape[1], best["ref"].shape[0]),
                                     flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
        s2 = _ncc(_blurred(warped, 1.0), _ref_ink(best["template"], REG_DPI, best["markers_printed"], "b1"))
        if s2 > best["score"]:
            best["G"], best["score"], ecc_used = G2, s2, True
    H = to_h(best["H0"], best["G"])
    per_template = {}
    for f_ in finals:
        if f_["template"].id not in per_template:
            per_template[f_["template"].id] = (f_["template"], H if f_ is best else to_h(f_["H0"], f_["G"]))
    cand_list = [{"template": f["template"].id, "rotation_deg": 90 * f["rotation"],
                  "correlation": round(f["score"], 4), "coarse": round(f["coarse"], 4),
                  "orb_inliers": f["inliers"]} for f in finals]
    runner = next((f for f in finals[1:] if f["template"].id != best["template"].id), None)
    margin = best["score"] - runner["score"] if runner else best["score"]
    if touches and not border_ok and 0.15 <= best["score"] < 0.4:
        # the outline runs into the frame and the print does not line up well: the page is
        # most likely cut off (a well-registered page is checked precisely afterwards)
        raise SheetCutOffError("the sheet is cut off by the edge of the photo (the page outline "
                               "touches the frame).", hint=_CUT_OFF_HINT)
    if best["score"] < MIN_REGISTRATION:
        if best["score"] < 0.15:
            # nothing in the photo looks like any sheet's print
            err = NoSheetFoundError(_NO_SHEET[0], hint=_NO_SHEET[1])
        else:
            err = NoSheetFoundError(
                f"found a page, but it does not match any known sheet (best: {best['template'].id}, "  # noqa: E501
                f"correlation {best['score']:.2f}).",
                hint="Photograph a sheetcheck score sheet, whole and flat; or name it with --template.")
        err.correlation = best["score"]  # (how sheet-like the page is: _small_sheet_outline)
        raise err
    method = "features" if best["inliers"] >= 12 else "page"
    quality = float(np.clip((best["score"] - 0.25) / 0.5, 0, 1)) * float(np.clip(margin / 0.08, 0.3, 1))
    details = {"page_quad_px": quad.round(2).tolist(), "candidates": cand_list,
               "identification_margin": round(float(margin), 4), "ecc_refined": ecc_used,
               "ambiguous": bool(runner is not None and margin < 0.03),
               "markers_printed": best["markers_printed"], "_per_template": per_template}
    return best["template"], H, method, quality, details


#: Long side (px) of the photo and of the reference for whole-photo feature matching.
GLOBAL_LONG_SIDE = 1000
_global_ref: dict = {}


def _global_orb():
    return cv2.ORB_create(nfeatures=4000, scaleFactor=1.2, nlevels=8, edgeThreshold=19,
                          patchSize=19, fastThreshold=8)


def _locate_by_global_features(image_grey, cands):
    """Whole photo against each template's rendering: ORB, ratio test, MAGSAC homography.

    No page outline needed, so it works where the page merges with a bright background (a
    white tablecloth, a sleeve) or a corner is lost in shadow. Slower than the page route;
    used when that one fails or lines up poorly. Returns ``[(score, template, H, inliers)]``.
    """
    h, w = image_grey.shape
    f = min(1.0, GLOBAL_LONG_SIDE / max(h, w))
    small = cv2.resize(image_grey, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else image_grey
    ink = _ink_u8(ink_map(small, background_px=max(small.shape) / 40))
    kp, des = _global_orb().detectAndCompute(ink, None)
    out = []
    if des is None or len(kp) < 20:
        return out
    matcher = cv2.BFMatcher(cv2.NORM_HAMMING)
    for t in cands:
        dpi = GLOBAL_LONG_SIDE * 0.75 / (max(t.width_mm, t.height_mm) / MM_PER_INCH)
        key = (t.id, t.version, t.source)
        ref = _global_ref.get(key)
        if ref is None:
            r = ink_map(_grey(reference_render(t, dpi=dpi, markers=False)), background_px=dpi / MM_PER_INCH * 8)
            rk, rd = _global_orb().detectAndCompute(_ink_u8(r), None)
            ref = (rk, rd, dpi)
            _global_ref[key] = ref
        rk, rd, rdpi = ref
        if rd is None or len(rk) < 20:
            continue
        pairs = matcher.knnMatch(rd, des, k=2)
        good = [p[0] for p in pairs if len(p) == 2 and p[0].distance < 0.8 * p[1].distance]
        if len(good) < 15:
            continue
        src = np.float32([rk[m.queryIdx].pt for m in good])
        dst = np.float32([kp[m.trainIdx].pt for m in good])
        G, inl = cv2.findHomography(src, dst, cv2.USAC_MAGSAC, 3.0, maxIters=5000, confidence=0.999)
        if G is None or inl is None or int(inl.sum()) < 15:
            continue
        half = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]], float)
        # reference index -> small index  ==>  mm -> full-photo px
        Gpx = half @ G @ np.linalg.inv(half)
        H = normalise_h(scale_matrix(1 / f) @ Gpx @ scale_matrix(rdpi / MM_PER_INCH))
        try:
            score = registration_score(image_grey, H, t, markers=False)
        except cv2.error:
            continue
        out.append((score, t, H, int(inl.sum())))
    out.sort(key=lambda r: -r[0])
    return out


def _print_ink(image: np.ndarray, H: np.ndarray, t: Template, dpi: float = 50.0) -> np.ndarray:
    """The photo's achromatic ink in ``t``'s frame at ``dpi`` under ``H`` (unblurred)."""
    rgb = warp_to_frame(image, H, dpi, frame_size(t, dpi), border_value=(255, 255, 255))
    return achromatic_ink(rgb, background_px=dpi / MM_PER_INCH * 8)


def print_score(image: np.ndarray, H: np.ndarray, t: Template, *,
                ink: np.ndarray | None = None) -> float:
    """How well the *printed* sheet matches template ``t`` under ``H`` (about -1..1).

    Achromatic ink (dark in every colour channel) of the RGB photo at 50 dpi, so pencil colour
    barely counts; compared tile by tile, each tile allowed to slide by up to 2 mm, so a curl or
    a slightly worse registration of one candidate does not decide between similar templates
    (the levels of one game): their printed differences do. ``ink``: :func:`_print_ink` of the
    same photo and ``H``, when already computed (several templates under one ``H``)."""
    dpi = 50.0
    key = (t.id, t.version, t.source, "achromatic", dpi)
    ref = _ref_ink_cache.get(key)
    if ref is None:
        r = np.asarray(reference_render(t, dpi=dpi, markers=False))
        ref = _blurred(achromatic_ink(r, background_px=dpi / MM_PER_INCH * 8), 1.0).astype(np.float32)
        _ref_ink_cache[key] = ref
    if ink is None:
        ink = _print_ink(image, H, t, dpi)
    ink = _blurred(ink, 1.0).astype(np.float32)
    h, w = ref.shape
    if ink.shape != ref.shape:
        return 0.0
    m = 4  # px of slide each way (2 mm at 50 dpi)
    num = den = 0.0
    for ys in np.array_split(np.arange(h), 4):
        for xs in np.array_split(np.arange(w), 6):
            y0, y1, x0, x1 = ys[0], ys[-1] + 1, xs[0], xs[-1] + 1
            T = ref[y0 + m:y1 - m, x0 + m:x1 - m]
            wt = float(T.std())
            if wt < 0.01:
                continue
            r_ = cv2.matchTemplate(ink[y0:y1, x0:x1], T, cv2.TM_CCOEFF_NORMED)
            num += wt * float(np.nan_to_num(r_).max())
            den += wt
    return num / den if den > 0 else 0.0


def _ach_ref(t: Template, dpi: float = 50.0) -> np.ndarray:
    key = (t.id, t.version, t.source, "achromatic-raw", dpi)
    ref = _ref_ink_cache.get(key)
    if ref is None:
        r = np.asarray(reference_render(t, dpi=dpi, markers=False))
        ref = achromatic_ink(r, background_px=dpi / MM_PER_INCH * 8).astype(np.float32)
        _ref_ink_cache[key] = ref
    return ref


def _pairwise(image, a, b, dpi: float = 50.0, *, inks: dict | None = None,
              homographies: Sequence[np.ndarray] | None = None) -> float | None:
    """Evidence for option ``a`` over ``b`` (each ``(template, H)``): the correlation of the
    photo's achromatic ink with each template's print *only where the two prints differ*
    (a level's extra glyphs, rows, labels). Positive favours ``a``; None if they do not differ
    or differ in page size.

    Both prints are compared with the *same* warped photo, under each of ``homographies``
    (default: ``a``'s and ``b``'s), and the differences averaged: with each template under its
    own homography, the better-registered one won whatever was printed (a crypts-3 photo was
    read as crypts-1 because only crypts-1's registration had been polished by ECC). Pass only
    well-registered homographies: one 5 mm off still favours whichever print is denser where
    the photo's print happens to fall. ``inks``: ``{id(H): achromatic ink}`` cache."""
    ta, Ha = a
    tb, Hb = b
    ra, rb = _ach_ref(ta, dpi), _ach_ref(tb, dpi)
    if ra.shape != rb.shape:
        return None
    diff = cv2.dilate(_blurred(np.abs(ra - rb), 1.5), np.ones((5, 5), np.uint8))
    W = diff > 0.05
    if W.sum() < 50:
        return None
    inks = {} if inks is None else inks
    ba, bb = _blurred(ra, 1.5), _blurred(rb, 1.5)
    ev = []
    for H in (homographies if homographies else (Ha, Hb)):
        if id(H) not in inks:
            inks[id(H)] = _print_ink(image, H, ta, dpi)
        ink = _blurred(inks[id(H)], 1.5)
        ev.append(_ncc(ink, ba, W) - _ncc(ink, bb, W))
    return float(np.mean(ev))


def _identify(image, options):
    """Choose among ``[(template, H)]``: rank by :func:`print_score`, then let the runners-up
    challenge the leader where their prints differ (:func:`_pairwise`). Returns
    ``(index, scores, margin)``; a margin near 0 means the photo cannot tell them apart.

    Every template is scored under every candidate homography of the same page size and keeps
    its best: the homographies come from registering each template separately, with more or
    less success (only the winner is polished by ECC), and the levels of one game share most
    of their print, so any good registration serves them all."""
    inks: dict = {}
    scores = []
    h_quality: dict = {}  # id(H) -> its best print score over the templates
    for t, _ in options:
        best_s = -1.0
        for t2, H in options:
            if (t2.width_mm, t2.height_mm) != (t.width_mm, t.height_mm):
                continue
            if id(H) not in inks:
                inks[id(H)] = _print_ink(image, H, t)
            ps = print_score(image, H, t, ink=inks[id(H)])
            best_s = max(best_s, ps)
            h_quality[id(H)] = max(h_quality.get(id(H), -1.0), ps)
        scores.append(best_s)
    order = list(np.argsort(scores)[::-1][:3])
    best = order[0]
    margin = None
    for other in order[1:]:
        ta = options[best][0]
        # judge under the best-registered homographies of this page size (within 0.03)
        same = [H for t2, H in options if (t2.width_mm, t2.height_mm) == (ta.width_mm, ta.height_mm)]
        q_best = max(h_quality[id(H)] for H in same)
        hs = [H for H in same if h_quality[id(H)] >= q_best - 0.03]
        ev = _pairwise(image, options[best], options[other], inks=inks, homographies=hs)
        if ev is None:
            ev = scores[best] - scores[other]
        if ev < -0.02:
            best, ev = other, -ev
        # a runner-up's hair-thin pairwise lead does not overturn the leader's print score (a
        # reefs-3 photo went to reefs-1 on 0.002); the margin stays that thin: flagged.
        ev = abs(ev)
        margin = ev if margin is None else min(margin, ev)
    if margin is None:
        margin = 1.0
    return int(best), scores, float(margin)


# The page route's last resort stops at the first outline whose print lines up at least this
# well (the bar under which the page route also asks the whole-photo features); below it the
# later outlines are tried too and the best registration is kept.
LAST_RESORT_GOOD_REGISTRATION = 0.45


def _locate_by_page(image_grey, cands, *, markers_printed: bool | None, border_ok: bool = False,
                    image: np.ndarray | None = None, quad: np.ndarray | None = None):
    """The page route (:func:`_locate_by_quad`), with whole-photo feature matching as the
    fallback when no page outline is found or its registration lines up poorly; among several
    candidate templates the one whose print (not pencil) lines up best wins."""
    err = None
    try:
        res = _locate_by_quad(image_grey, cands, markers_printed=markers_printed, border_ok=border_ok,
                              image=image, quad=quad)
    except (NoSheetFoundError, SheetCutOffError) as e:
        res, err = None, e
    glob = []
    if quad is None and (res is None or res[4]["candidates"][0]["correlation"] < 0.45):
        glob = _locate_by_global_features(image_grey, cands)
    use_glob = bool(glob and glob[0][0] >= MIN_REGISTRATION and (
        res is None or glob[0][0] > res[4]["candidates"][0]["correlation"] + 0.02))
    if res is None and not use_glob and quad is None and image is not None:
        # Last resort: the page's outline from its straight edges (a page on a table as bright
        # as paper, or on a busy picture, that no threshold separates), then from the straight
        # runs of bright components' outlines (a corner in a strong shadow, on a busy cloth),
        # then from the whiteness flattened by its local envelope (vision._page_shadow: a whole
        # side in shadow, which leaves no straight run of the lit outline there).
        from vision._page_shadow import SHADOW_MIN_REGISTRATION, shadow_page_quads

        def last_resort():
            yield from (("straight edges", q) for q in _page_quads_from_lines(image)[:2])
            yield from (("outline runs", q) for q in _page_quads_from_outline(image)[:4])
            yield from (("shadow-flattened whiteness", q) for q in shadow_page_quads(image, image_grey, cands))
        # The first outline whose print lines up well ends the search; one that lines up
        # poorly (under LAST_RESORT_GOOD_REGISTRATION) is kept only until a later one lines up
        # better: straight edges also outline a cloth's pattern (heldout1050k
        # reefs-1-hard-nm-s1050069: a 108 x 369 px patch of cloth at 0.25, taken before the
        # shadow route's true page at 0.71, then refused as blurred).
        for page_from, q in last_resort():
            try:
                r = _locate_by_quad(image_grey, cands, markers_printed=markers_printed,
                                    border_ok=border_ok, image=image, quad=q)
            except (NoSheetFoundError, SheetCutOffError):
                continue
            corr = r[4]["candidates"][0]["correlation"]
            if page_from == "shadow-flattened whiteness" and corr < SHADOW_MIN_REGISTRATION:
                continue  # (a part of the page, stretched over the whole: see _page_shadow)
            if res is not None and corr <= res[4]["candidates"][0]["correlation"]:
                continue
            res = r
            res[4]["page_from"] = page_from
            if corr >= LAST_RESORT_GOOD_REGISTRATION:
                break
    if res is None and not use_glob:
        raise err
    if use_glob:
        score, t, H, inliers = glob[0]
        options = {}
        for g in glob:
            options.setdefault(g[1].id, (g[1], g[2]))
        details = {"candidates": [{"template": g[1].id, "correlation": round(g[0], 4), "orb_inliers": g[3]}
                                  for g in glob[:4]],
                   "markers_printed": False, "route": "whole-photo features"}
        if res is not None:
            details["page_route_correlation"] = res[4]["candidates"][0]["correlation"]
        method = "features"
    else:
        t, H, method, _, details = res
        options = details.get("_per_template", {t.id: (t, H)})
        score = details["candidates"][0]["correlation"]
    details.pop("_per_template", None)
    # A template that neither route registered (its rendering had no feature match) is still a
    # candidate when it has the winner's page size: the levels of one game share most of their
    # print, so the winner's homography serves it, and only their printed differences
    # (_identify) can tell them apart (hard1200k reefs-3-hard-nm-s1200143: reefs-3 had no ORB
    # match, was never asked, and the photo was read as reefs-1 on a margin of 0.047).
    options = dict(options)
    for t2 in cands:
        if t2.id not in options and (t2.width_mm, t2.height_mm) == (t.width_mm, t.height_mm):
            options[t2.id] = (t2, H)
    opts = list(options.values())
    if len(opts) > 1 and image is not None and image.ndim == 3:
        i, pscores, margin = _identify(image, opts)
        t, H = opts[i]
        details["identification"] = {o[0].id: round(float(ps), 4) for o, ps in zip(opts, pscores)}
        mk = bool(details.get("markers_printed"))
        score = registration_score(image_grey, H, t, markers=mk)
        # Another candidate's homography may line up this template's print better (the levels
        # of a game share most of it, and only the first-ranked registration had ECC).
        for t2, H2 in opts:
            if H2 is H or (t2.width_mm, t2.height_mm) != (t.width_mm, t.height_mm):
                continue
            s2 = registration_score(image_grey, H2, t, markers=mk)
            if s2 > score + 0.01:
                H, score = H2, s2
                details["geometry_from"] = f"the registration of {t2.id}"
    else:
        margin = 1.0 if len(opts) == 1 else 0.0
    details["identification_margin"] = round(margin, 4)
    # Margins of a right identification are 0.1-0.5 (measured on simulated photos); below
    # 0.08 the levels of one game cannot be told apart and every reading must be reviewed.
    details["ambiguous"] = bool(len(opts) > 1 and margin < 0.08)
    quality = float(np.clip((score - 0.25) / 0.5, 0, 1)) * float(np.clip(margin / 0.15, 0.2, 1))
    if details["ambiguous"]:
        quality = min(quality, 0.3)
    return t, H, method, quality, details


def _coarse_quad_score(image_grey: np.ndarray, quad: np.ndarray, cands, *,
                       markers: bool = True) -> float:
    """The page route's first look at a page outline: the best correlation, over the candidate
    templates and the four orientations, of the photo's blurred ink warped by ``quad`` with
    the template's (with the markers printed or not). A few ms; ranks outlines before the
    full registration."""
    k = REG_DPI / MM_PER_INCH
    best = -1.0
    warped: dict = {}
    for t in cands:
        size = frame_size(t, REG_DPI)
        ref = _ref_ink(t, REG_DPI, markers, "b2")
        for rot in range(4):
            key = (t.width_mm, t.height_mm, rot)
            if key not in warped:
                q = np.roll(quad, -rot, 0)
                H0 = normalise_h(cv2.getPerspectiveTransform(_page_corners(t).astype(np.float32),
                                                             q.astype(np.float32)).astype(float))
                warped[key] = _blurred(ink_map(warp_to_frame(image_grey, H0, REG_DPI, size),
                                               background_px=k * 8), 2.0)
            best = max(best, _ncc(warped[key], ref))
    return best


def _locate_by_anchor_quads(image_grey, image, cands, squares, small):
    """No marker could be read: four unreadable marker squares at the page's corners give its
    outline (much more reliably than the page's edge on a bright or busy table); the page
    route registers and identifies the print in it, then the squares are taken as the
    identified template's markers for a marker-precise homography. Returns the page route's
    ``(template, H, method, quality, details)`` or None."""
    f = small.shape[1] / image_grey.shape[1]
    quads = _anchor_quads(squares, small, f)
    if not quads:
        return None
    layouts: dict = {}
    for t in cands:
        if len(t.markers) == 4:
            layouts.setdefault((t.width_mm, t.height_mm, tuple(m.corners_mm().mean(0).round(2).tobytes()
                                                                for m in sorted(t.markers, key=lambda m: m.id))), t)
    pages = []
    for q, sqs in quads:
        for t in layouts.values():
            mc = np.array([m.corners_mm().mean(0) for m in t.markers])
            turned = np.array([t.width_mm, t.height_mm]) - mc
            symmetric = all(np.min(np.linalg.norm(mc - p_, axis=1)) < 0.5 for p_ in turned)
            # with markers placed symmetrically, shifts 2 and 3 give the outlines of 0 and 1
            for shift in ((0, 1) if symmetric else range(4)):
                pq = _page_quad_from_marker_centres(t, q, shift, sqs)
                if pq is not None:
                    pages.append((_coarse_quad_score(image_grey, pq, cands), pq))
    if not pages:
        return None
    pages.sort(key=lambda x: -x[0])
    coarse, pq = pages[0]
    if coarse < 0.15:
        return None
    try:
        t, H, method, quality, d = _locate_by_page(image_grey, cands, markers_printed=True, border_ok=True,
                                                   image=image, quad=pq)
    except (NoSheetFoundError, SheetCutOffError):
        return None
    if registration_score(image_grey, H, t, markers=True) < MIN_REGISTRATION:
        return None  # the levels' print does not line up there: no evidence for any sheet
    d["page_from"] = "unreadable marker squares"
    side = float(np.mean([_marker_side(project(H, m.corners_mm())) for m in t.markers]))
    diag = float(np.linalg.norm(np.subtract(*project(H, _page_corners(t))[[0, 2]])))
    anch = _anchor_markers(image_grey, t, H, squares, (), tol_px=max(side, 0.05 * diag))
    if len(anch) >= 3:
        mids, dropped = _consistent_markers(t, anch, sorted(anch))
        Hm = _marker_h(t, anch, mids) if len(mids) >= 3 else None
        if Hm is not None:
            s_page = registration_score(image_grey, H, t, markers=True)
            s_m = registration_score(image_grey, Hm, t, markers=True)
            d["registration_page"], d["registration_anchored_markers"] = round(s_page, 4), round(s_m, 4)
            # marker corners are far more precise than a registration of a blurred print
            if s_m >= s_page - 0.02:
                H, method = Hm, "markers"
                d["markers_anchored"] = sorted(mids)
    return t, H, method, quality, d


# --------------------------------------------------------------------------------------------
# blur
# --------------------------------------------------------------------------------------------

_BLUR_SIGMAS_PX = (0.0, 0.7, 1.3, 2.0, 2.8, 3.8, 5.0)


def _blur_tiles(t: Template, markers: bool, shape: tuple[int, int], m: int) -> list:
    """Per tile of the blur measure (cached per template): its box, weight, the reference
    tile ``matchTemplate`` aligns on, and the blurred references' tiles, each centred and
    scaled to unit norm (rows), so that their correlations with a photo tile are one product."""
    key = (t.id, t.version, t.source, "blur-tiles", markers, shape, m)
    tiles = _ref_ink_cache.get(key)
    if tiles is not None:
        return tiles
    ref = _ref_ink(t, REG_DPI, markers).astype(np.float32)
    stack = [(_blurred(ref, s) if s > 0 else ref) for s in _BLUR_SIGMAS_PX]
    mid_ref = stack[len(stack) // 2 - 1]
    h, w = shape
    tiles = []
    for ys in np.array_split(np.arange(h), 2):
        for xs in np.array_split(np.arange(w), 3):
            y0, y1, x0, x1 = ys[0], ys[-1] + 1, xs[0], xs[-1] + 1
            wt = float(stack[0][y0 + m:y1 - m, x0 + m:x1 - m].std())
            if wt < 0.02:
                continue
            rows = []
            for r in stack:
                b = r[y0 + m:y1 - m, x0 + m:x1 - m].astype(np.float64).ravel()
                b = b - b.mean()
                nb = float(np.sqrt(np.einsum("i,i->", b, b)))
                rows.append(b / nb if nb > 0 else np.zeros_like(b))
            # float32: the same memory as the blurred stack this replaced (~4 MB per template)
            tiles.append(((y0, y1, x0, x1), wt,
                          np.ascontiguousarray(mid_ref[y0 + m:y1 - m, x0 + m:x1 - m]),
                          np.array(rows, np.float32)))
    if len(_ref_ink_cache) > 64:
        _ref_ink_cache.clear()
    _ref_ink_cache[key] = tiles
    return tiles


def estimate_blur_mm(image_grey: np.ndarray, H: np.ndarray, t: Template, *, markers: bool,
                     ink: np.ndarray | None = None) -> tuple[float, float]:
    """Blur of the photo's print on the page, as the Gaussian sigma in mm that, applied to
    the clean rendering, best matches the photo (ink images in the template frame at
    ``REG_DPI``). Physically grounded and independent of the photo's size, contrast and noise.

    Compared tile by tile, each tile allowed to slide by up to 2 mm: a curled page that the
    homography leaves a mm off would otherwise look blurred. Returns ``(sigma_mm, correlation)``.
    ``ink``: :func:`_frame_ink` of the same photo and ``H``, when already computed.
    """
    if ink is None:
        ink = _frame_ink(image_grey, H, t)
    ink = ink.astype(np.float32)
    h, w = ink.shape
    m = 3  # px of slide each way (~2 mm at 40 dpi)
    scores = np.zeros(len(_BLUR_SIGMAS_PX))
    den = 0.0
    for (y0, y1, x0, x1), wt, mid, R in _blur_tiles(t, markers, (h, w), m):
        # align the tile once (integer shift, up to m px), then compare every sigma there
        r_ = cv2.matchTemplate(ink[y0:y1, x0:x1], mid, cv2.TM_CCOEFF_NORMED)
        _, _, _, (dx, dy) = cv2.minMaxLoc(np.nan_to_num(r_))
        patch = ink[y0 + dy:y1 - 2 * m + dy, x0 + dx:x1 - 2 * m + dx].astype(np.float64).ravel()
        patch -= patch.mean()
        # einsum, not ``@`` / ``dot``: OpenBLAS threads waking up on a busy machine took up
        # to 10 ms per product here; numpy's own loop takes microseconds
        nrm = float(np.sqrt(np.einsum("i,i->", patch, patch)))
        if nrm > 0:  # the correlation with every blurred reference in one product
            scores += wt * np.einsum("ij,j->i", R, (patch / nrm).astype(np.float32)).astype(np.float64)
        den += wt
    if den == 0:
        return 0.0, 0.0
    scores /= den
    i = int(np.argmax(scores))
    s_best = _BLUR_SIGMAS_PX[i]
    if 0 < i < len(scores) - 1:  # parabolic refinement between neighbours
        y0_, y1_, y2_ = scores[i - 1], scores[i], scores[i + 1]
        d = y0_ - 2 * y1_ + y2_
        if d < 0:
            off = 0.5 * (y0_ - y2_) / d
            lo, hi = _BLUR_SIGMAS_PX[i - 1], _BLUR_SIGMAS_PX[i + 1]
            s_best = float(np.clip(s_best + off * (hi - lo) / 2, lo, hi))
    return s_best * MM_PER_INCH / REG_DPI, float(scores[i])


def prepare(template: Template, *, markers: bool = True) -> None:
    """Build what locating a photo of ``template`` derives from the template alone (its
    rendering and ink at ``REG_DPI``, the blur measure's reference tiles), so that the first
    photo of each template does not pay for it (~30 ms). Cached per template; a process that
    reads many photos (server, batch, benchmark) calls this once per template at start-up."""
    _ref_ink(template, REG_DPI, markers, "b1")
    w, h = frame_size(template, REG_DPI)
    _blur_tiles(template, markers, (h, w), 3)


def _checks(grey: np.ndarray, H: np.ndarray, t: Template, *, markers_printed: bool,
            check_blur: bool, registration: bool = True,
            known_registration: float | None = None) -> dict:
    """The registration score and the blur check of a location: ``{"registration", "blur_mm"}``
    (each when asked for); raises :class:`BlurryPhotoError` above ``BLUR_LIMIT_MM``.
    ``known_registration``: the location's registration score when the caller has measured it
    already (``registration=False``), for the too-small rule's belief in the location."""
    out = {}
    fink = _frame_ink(grey, H, t)  # shared by the registration score and the blur measure
    if registration:
        out["registration"] = round(registration_score(grey, H, t, markers=markers_printed,
                                                         ink=fink), 4)
    if check_blur:
        blur_mm, blur_fit = estimate_blur_mm(grey, H, t, markers=markers_printed, ink=fink)
        out["blur_mm"] = round(blur_mm, 3)
        if blur_mm > BLUR_LIMIT_MM:
            err = BlurryPhotoError(
                f"the photo is too blurred to read the sheet (the print is smeared over about "
                f"{blur_mm:.1f} mm; at most {BLUR_LIMIT_MM:.1f} mm can be read).",
                hint="Hold the phone still, let it focus on the sheet (tap the screen), and "
                     "retake the photo in good light.")
            scale = sheet_px_per_mm(H, t)
            reg = out.get("registration", known_registration)
            if scale < SMALL_SHEET_PX_PER_MM and _believed(reg or 0.0, blur_fit) and \
                    blur_mm * scale <= BLUR_LIMIT_MM * SMALL_SHEET_PX_PER_MM:
                # The blur in the photo's px would pass on a sheet of SMALL_SHEET_PX_PER_MM:
                # it is the sheet's size that smears its print over mm, and moving closer
                # cures it (a blur of more px is the photo's own). The retry still sees a blur
                # refusal; locate_sheet reports it as too small. Only for a location whose
                # print lines up (or whose blur fits) as a believed one does: a wrong location
                # on a piece of cloth is small too (heldout1050k reefs-1-hard-nm-s1050069, a
                # 640 x 1000 px page, was "too small, 0.8 px per mm" at registration 0.26,
                # blur fit 0.38).
                err.small_sheet = (project(H, _page_corners(t)), t, blur_mm)
            raise err
    return out


#: A refused weak location is replaced only by one whose print lines up at least this much
#: better (registration score): a sheet really blurred or cut off lines up about equally
#: badly wherever the routes put it, a wrong location lines up far worse than the right one
#: (hard dev photos: 0.16-0.35 at locations 150-1150 px off, 0.51-0.67 at the true page).
RETRY_MIN_GAIN = 0.1
#: A refused location whose print lines up this well (registration score), or whose blur
#: measure fits the rendering this well (the correlation at the best blur, see
#: :func:`estimate_blur_mm`), is believed: its refusal stands without trying other routes
#: (~0.5-1.5 s). An alternative that lines up this well also ends the retry. Hard dev and
#: made-bad photos: false refusals at 0.16-0.35 (registration) and 0.22-0.45 (blur fit);
#: really blurred sheets 0.46-0.55 and 0.59-0.79, really cut-off ones 0.38-0.66 and
#: 0.33-0.57 (a cut-off sheet's print is partly missing from the frame).
RETRY_GOOD_REGISTRATION = 0.5


def _believed(registration: float, blur_fit: float) -> bool:
    """Whether a refused location's own evidence backs it (``RETRY_GOOD_REGISTRATION``): its
    refusal then stands without a retry (:func:`_retry_refused`), and a blur refusal of a
    small sheet there is one for its size (:func:`_checks`)."""
    return max(registration, blur_fit) >= RETRY_GOOD_REGISTRATION


def _markers_used(t: Template, found: dict, d: dict) -> tuple[int, ...]:
    """The template's marker ids that a page-route or anchored location rests on: the ones
    detected in the photo and the squares anchored as markers (``d["markers_anchored"]``)."""
    return tuple(sorted({m for m in t.marker_ids if m in found} | set(d.get("markers_anchored", ()))))


def _retry_refused(grey, image, cands, refusal, *, first: tuple, from_markers: bool,
                   check_blur: bool, first_quad=None):
    """A weak location (see :func:`locate_sheet`) was refused as cut off or too blurred.

    Unless its own evidence backs the refusal (the print lines up, or the blur measure fits
    the rendering, ``RETRY_GOOD_REGISTRATION``), try the other routes' page outlines: the
    page's whiteness outline when the first location came from markers, then the outlines
    from straight edges and from the straight runs of bright components' outlines, each
    registered and identified as the page route does. Keep the one that passes the checks and
    lines up best, when it lines up at least ``RETRY_MIN_GAIN`` better than the first.
    Otherwise the refusal stands, with the message of the best-lined-up location refused (the
    first's, unless another lines up ``RETRY_MIN_GAIN`` better): the message describes the
    page where the print is, not where a misplaced marker put it.

    Returns ``(template, H, method, quality, details, markers_printed, checked)``, where
    ``checked`` holds ``registration`` and ``blur_mm``; raises the refusal otherwise."""
    t0, H0, method0, mk0 = first
    fink = _frame_ink(grey, H0, t0)
    reg0 = registration_score(grey, H0, t0, markers=mk0, ink=fink)
    fit0 = estimate_blur_mm(grey, H0, t0, markers=mk0, ink=fink)[1]
    if _believed(reg0, fit0):
        raise refusal  # the print is where the location says: the refusal is true
    # the first location's page and the outline it was registered from (the page route's)
    seen = [_order_quad(project(H0, _page_corners(t0)))]
    if first_quad is not None:
        seen.append(_order_quad(np.asarray(first_quad, float)))
    best_refused = (reg0, refusal)
    best = None

    def alternatives():
        if from_markers:  # (else the page route gave the first location, from this outline)
            q = find_page_quad(image)
            if q is not None:
                yield "page outline", q
        # the best one or two of each (each costs a registration, ~0.15 s; the hard dev
        # photos' true outlines came first)
        for q in _page_quads_from_lines(image)[:1]:
            yield "straight edges", q
        for q in _page_quads_from_outline(image)[:2]:
            yield "outline runs", q

    for page_from, q in alternatives():
        if any(np.abs(s_ - _order_quad(q)).max() < 0.01 * max(grey.shape) for s_ in seen):
            continue  # the first location's own outline
        try:
            t, H, method, quality, d = _locate_by_page(grey, cands, markers_printed=None,
                                                       image=image, quad=q)
        except (NoSheetFoundError, SheetCutOffError):
            continue
        mk = bool(d.get("markers_printed", False))
        reg = registration_score(grey, H, t, markers=mk)
        if reg < reg0 + RETRY_MIN_GAIN:
            continue
        try:
            d.update(_check_in_view(t, H, image.shape, method=method))
            checked = _checks(grey, H, t, markers_printed=mk, check_blur=check_blur,
                              registration=False, known_registration=reg)
        except (SheetCutOffError, BlurryPhotoError) as e:
            if reg > best_refused[0]:
                best_refused = (reg, e)
            continue
        checked["registration"] = round(reg, 4)
        if best is None or reg > best[0]:
            best = (reg, (t, H, method, quality, d, mk, checked), page_from)
        if reg >= RETRY_GOOD_REGISTRATION:
            break
    if best is None:
        raise best_refused[1]
    reg, (t, H, method, quality, d, mk, checked), page_from = best
    d.pop("_per_template", None)
    d["retried"] = {"refused": type(refusal).__name__, "method": method0,
                    "registration": round(reg0, 4), "blur_fit": round(fit0, 4),
                    "found_by": page_from}
    return t, H, method, quality, d, mk, checked


# --------------------------------------------------------------------------------------------
# entry point
# --------------------------------------------------------------------------------------------

def locate_sheet(image: np.ndarray, *, template_id: str | None = None,
                 templates: Sequence[Template] | None = None,
                 check_blur: bool = True, defer_checks: bool = False
                 ) -> SheetLocation | tuple[SheetLocation, Callable[[], SheetLocation]]:
    """Find the sheet in a photo, identify its template and compute the homography.

    Parameters
    ----------
    image : (H, W, 3) uint8 ndarray
        RGB photo (a :class:`vision.decode.DecodedPhoto` image).
    template_id : str, optional
        Only consider this template.
    templates : sequence of Template, optional
        Candidate templates (default: the bundled ones).
    check_blur : bool, optional
        Raise :class:`BlurryPhotoError` for photos too blurred to read.
    defer_checks : bool, optional
        Leave the registration score and the blur check to the caller, to run when it
        suits it (``vision.pipeline`` runs them on the helper thread beside the light
        normalisation, where that thread is otherwise idle, so that rectification has it for
        its own tiles): return the location as soon as the homography is known (its details
        without ``registration`` and ``blur_mm``) and a function that
        runs the checks and returns the complete location (raising BlurryPhotoError). The
        caller must call it, and let its error come before any error of the stages it ran
        meanwhile (they worked on a photo the checks would have refused).

    Returns
    -------
    SheetLocation; (SheetLocation, checks) with ``defer_checks``

    Raises
    ------
    NoSheetFoundError, SheetCutOffError, BlurryPhotoError, UnknownTemplateError
        :class:`SeveralSheetsError`: two or more whole sheets, none much nearer the camera
        than the others (:data:`DOMINANT_SHEET`);
        and :class:`SheetTooSmallError` (a NoSheetFoundError): a sheet under
        ``SMALL_SHEET_PX_PER_MM`` that the blur check refused (its size is the cause), or no
        route registered but a page outline that small shows its print
        (:func:`_small_sheet_outline`).

    Notes
    -----
    A photo may be mirrored (a front camera's selfie view, a photo of the sheet in a mirror):
    its markers do not read and its print matches no template the right way round. When the
    location looks like one of a mirrored photo, or the photo was refused, the photo flipped
    left-right is located as well (:func:`_unmirrored`); when that is clearly the better
    location, it is returned with its homography mapping the template onto the photo *as
    given* (it includes the flip) and ``details["mirrored"]`` true.
    """
    try:
        res = _locate_or_small(image, template_id=template_id, templates=templates,
                               check_blur=check_blur, defer_checks=defer_checks)
    except (NoSheetFoundError, BlurryPhotoError, SheetCutOffError) as e:
        if isinstance(e, SheetTooSmallError):
            raise
        # (a mirrored photo's false refusals: its print matches no sheet, or a wrong
        # location's blur measure or view; not "the markers of another template": markers
        # that decode are the right way round)
        flipped, _ = _unmirrored(image, None, template_id=template_id, templates=templates,
                                 check_blur=check_blur, defer_checks=defer_checks)
        if flipped is None:
            raise
        return flipped
    location = res[0] if defer_checks else res
    if not _mirror_suspect(location):
        return res
    if defer_checks:
        # (a suspect location's checks run now: a mirrored photo's wrong location is often
        # refused as blurred or cut off, and that refusal is one the flip may answer)
        try:
            location = res[1]()
        except (BlurryPhotoError, SheetCutOffError, SheetTooSmallError) as e:
            if not isinstance(e, SheetTooSmallError):
                flipped, _ = _unmirrored(image, None, template_id=template_id,
                                         templates=templates, check_blur=check_blur,
                                         defer_checks=defer_checks)
                if flipped is not None:
                    return flipped
            refusal = e

            def refused():
                raise refusal  # (when the caller runs the checks, as deferred checks do)
            return res[0], refused
        checked = location
        res = (location, lambda: checked)
    flipped, tried = _unmirrored(image, location, template_id=template_id, templates=templates,
                                 check_blur=check_blur, defer_checks=defer_checks)
    if flipped is not None:
        return flipped

    def noted(loc: SheetLocation) -> SheetLocation:
        return SheetLocation(template=loc.template, homography=loc.homography, method=loc.method,
                             markers_found=loc.markers_found, quality=loc.quality,
                             details={**loc.details, "mirror_tried": tried})
    if not defer_checks:
        return noted(res)
    checks = res[1]
    return noted(location), lambda: noted(checks())


#: A location this unsure (``quality``) may be of a mirrored photo, whose print matches no
#: template the right way round: the photo flipped is located as well. Spent corpora
#: (fresh2900k, ho1250k; 220 photos): 7 of the normal ones below it, all hard; their 37
#: mirrored copies located by the page route: 0.00-0.45.
MIRROR_SUSPECT_QUALITY = 0.5
#: Flipped, a location replaces the first one only when it is clearly better: ``quality`` and
#: registration score together at least this much higher, ``quality`` alone at least
#: ``MIRROR_MIN_QUALITY_GAIN`` higher, and the registration no lower (but for noise,
#: ``MIRROR_REGISTRATION_NOISE``). The mirrored copies of 37 spent photos against their true
#: orientation: sum +0.45 to +1.9, quality +0.19 to +1.0, registration -0.00 to +0.67.
MIRROR_MIN_GAIN = 0.35
MIRROR_MIN_QUALITY_GAIN = 0.15
MIRROR_REGISTRATION_NOISE = 0.02
#: A refused photo's flipped location is kept when at least this sure and lined up: the
#: true orientation of the spent mirrored photos refused as "matches no sheet", "no sheet" or
#: "too blurred": quality 0.35-1.0, registration 0.43-0.76.
MIRROR_ALONE_QUALITY = 0.3
MIRROR_ALONE_REGISTRATION = 0.4


def _markers_read(location: SheetLocation) -> set[int]:
    """The location's template markers that the strict detector decoded (not anchored on an
    unreadable square, not found by the relaxed detector alone)."""
    d = location.details
    ids = set(location.template.marker_ids)
    read = (set(location.markers_found) | set(d.get("markers_detected", ()))) & ids
    return read - set(d.get("markers_anchored", ())) - set(d.get("markers_relaxed", ()))


def _mirror_suspect(location: SheetLocation) -> bool:
    """Whether a location may be of a mirrored photo: it is unsure, or the sheet has markers
    printed and fewer than two of them read. A mirrored marker decodes as no id (but for a
    few symmetric ones), so such a photo's squares are anchored as markers of whichever
    template's print fits least badly (spent mirrored photos: all as crypts-1's, at quality
    up to 0.83). A photo the right way round mostly reads two or more: of 220 plain spent
    photos, 16 hard ones were suspect (14 whose markers were too blurred to decode, 2
    unsure without markers), none of them flipped; :func:`_unmirrored` decodes the flipped
    photo's markers first, which spares the 14 the flipped locate."""
    if location.quality < MIRROR_SUSPECT_QUALITY:
        return True
    printed = location.details.get("markers_printed", location.method.startswith("markers"))
    return bool(printed) and len(_markers_read(location)) < 2


def _unmirrored(image, first: SheetLocation | None, *, template_id, templates, check_blur,
                defer_checks):
    """Locate the photo flipped left-right (see :func:`locate_sheet`).

    Returns ``(replacement, tried)``: ``replacement`` is the flipped location (or with
    ``defer_checks`` the pair of it and its checks), its homography composed with the flip so
    that it maps the template onto ``image``, when it is clearly better than ``first``
    (``MIRROR_MIN_GAIN``) or, when the photo was refused (``first`` None), good enough alone
    (``MIRROR_ALONE_QUALITY``); else None. ``tried`` describes the location that lost (the
    flipped one, ``{"refused": ...}`` when the flipped photo was refused, or the given one).
    """
    a = _check_image(image)
    cands = _candidates(template_id, templates)  # (an unknown template's error is not the photo's)
    flipped = np.ascontiguousarray(a[:, ::-1])
    if first is not None and first.details.get("markers_printed"):
        # The sheet has markers printed: the flipped location can only be kept on two or more
        # decoded ones (below). When the detector decodes fewer flipped, the whole locate
        # (~1-2 s) is spared (spent hard photos whose markers read badly either way round).
        g = cv2.cvtColor(flipped, cv2.COLOR_RGB2GRAY)  # (locate's grey memo is the photo's)
        small = _detect_image(g)
        seen: set[int] = set()
        for dictionary in sorted({t.aruco_dictionary for t in cands}):
            seen.update(detect_markers(g, dictionary=dictionary, small=small))
        most = max(len(seen & set(t.marker_ids)) for t in cands)
        if most < 2:
            return None, {"markers_decoded": most}
    try:
        res = _locate_or_small(flipped, template_id=template_id, templates=templates,
                               check_blur=check_blur, defer_checks=defer_checks)
    except (NoSheetFoundError, SheetCutOffError, BlurryPhotoError, UnknownTemplateError,
            SeveralSheetsError) as e:  # (the photo as given keeps its own outcome)
        res, refused = None, e
    g_flipped = photo_grey(flipped)  # (takes locate's memo of the flipped photo, or converts)
    grey = photo_grey(a, remember=True)  # rectify measures on the given photo's grey
    if res is None:
        return None, {"refused": getattr(refused, "code", type(refused).__name__)}
    loc_f = res[0] if defer_checks else res

    def summary(loc: SheetLocation, g) -> dict:
        reg = loc.details.get("registration")
        if reg is None:
            reg = registration_score(g, loc.homography, loc.template,
                                     markers=bool(loc.details.get("markers_printed", True)))
        return {"template": loc.template.id, "method": loc.method,
                "quality": round(float(loc.quality), 4), "registration": round(float(reg), 4)}

    f = summary(loc_f, g_flipped)
    # Three or more markers decoded where the photo as given decoded at most one: ids in the
    # template's layout do not come about by chance (a mirrored marker decodes as no id, but
    # for a few symmetric ones), whatever the registration score says on a hard photo (spent
    # ho1250k crypts-3-hard-m-s1250050 mirrored: crypts-1's print fitted at 0.46, the true
    # crypts-3 read by four markers at 0.37).
    n_read = len(_markers_read(loc_f))
    decoded = n_read >= 3 and f["quality"] >= MIRROR_SUSPECT_QUALITY and \
        (first is None or len(_markers_read(first)) < 2)
    # Otherwise a flipped location on printed markers must have read two of them: squares
    # anchored as markers fit the page's corners as well flipped as not (a quality near 1 on
    # a clean synthetic page under a template it is not), so they say nothing of the flip.
    unread = bool(loc_f.details.get("markers_printed", False)) and n_read < 2
    if first is None:
        given = None
        if not decoded and (unread or f["quality"] < MIRROR_ALONE_QUALITY or
                            f["registration"] < MIRROR_ALONE_REGISTRATION):
            return None, f
    else:
        given = summary(first, grey)
        dq = f["quality"] - given["quality"]
        dr = f["registration"] - given["registration"]
        if not decoded and (unread or dq + dr < MIRROR_MIN_GAIN or dq < MIRROR_MIN_QUALITY_GAIN
                            or dr < -MIRROR_REGISTRATION_NOISE):
            return None, f
    w = a.shape[1]
    flip = np.array([[-1.0, 0.0, w - 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])

    def unflipped(loc: SheetLocation) -> SheetLocation:
        d = dict(loc.details)
        for key in ("page_corners_px", "page_quad_px"):
            if key in d:
                d[key] = [[round(w - 1.0 - x, 2), y] for x, y in d[key]]
        d["mirrored"] = True
        d["unmirrored_location"] = given  # (the location the photo as given had, or None)
        return SheetLocation(template=loc.template, homography=flip @ loc.homography,
                             method=loc.method, markers_found=loc.markers_found,
                             quality=loc.quality, details=d)

    if not defer_checks:
        return unflipped(res), None
    checks = res[1]
    return (unflipped(loc_f), lambda: unflipped(checks())), None


def _locate_or_small(image: np.ndarray, *, template_id: str | None, templates,
                     check_blur: bool, defer_checks: bool):
    """:func:`locate_sheet` but for a mirrored photo."""
    try:
        res = _locate_sheet(image, template_id=template_id, templates=templates,
                            check_blur=check_blur, defer_checks=defer_checks)
    except BlurryPhotoError as e:
        small = _too_small_when_blurred(e)
        if small is None:
            raise
        raise small from e
    except NoSheetFoundError as e:
        if type(e) is not NoSheetFoundError:
            raise
        a = _check_image(image)
        small = _small_sheet_outline(a, photo_grey(a, remember=True),
                                     _candidates(template_id, templates))
        if small is None:
            raise
        raise small from e
    if not defer_checks:
        return res
    location, checks = res

    def checked() -> SheetLocation:
        try:
            return checks()
        except BlurryPhotoError as e:
            small = _too_small_when_blurred(e)
            if small is None:
                raise
            raise small from e
    return location, checked


def _locate_sheet(image: np.ndarray, *, template_id: str | None, templates, check_blur: bool,
                  defer_checks: bool):
    """:func:`locate_sheet` but for the sheet too small to read."""
    a = _check_image(image)
    cands = _candidates(template_id, templates)
    grey = photo_grey(a, remember=True)  # rectify measures on the same grey
    details: dict = {}
    found: dict[int, np.ndarray] = {}
    small = _detect_image(grey)
    dictionaries = sorted({t.aruco_dictionary for t in cands})
    if len(dictionaries) == 1:
        # The fast detector first: when it sees all four markers of one template (the usual
        # photo), the full detector would find the same ones (corners are refined on the
        # full image either way), so its two extra threshold passes are skipped.
        quick = None
        if threads() >= 2 and min(small.shape[:2]) >= 64:
            # (two halves on two threads: kept when they hold a whole template's markers,
            # which the whole image then holds with the same corners, _detect_fast_split)
            quick = _detect_fast_split(grey, small, dictionaries[0])
            if not any(all(m in quick for m in t.marker_ids) for t in cands):
                quick = None
        if quick is None:
            quick = detect_markers(grey, dictionary=dictionaries[0], fast=True, small=small)
        if any(all(m in quick for m in t.marker_ids) for t in cands):
            found = quick
    if not found:
        found = MarkerSet()
        for dictionary in dictionaries:
            more = detect_markers(grey, dictionary=dictionary, small=small)
            found.update(more)
            found.others.update(more.others)
    relaxed_only = False
    if len(found) < 2:
        # At most one marker with the strict detector: a blurred or small photo. The relaxed one
        # also "finds" markers in artwork, so keep only two or more markers of one template
        # whose spacing agrees with the template; the print must line up afterwards as well.
        rel = _relaxed_markers(grey, cands)
        if len(rel) >= 2 and (not found or set(found) <= set(rel)):
            relaxed_only = True
            details["markers_relaxed"] = sorted(set(rel) - set(found))
            rel.update(found)  # strict corners where we have them
            found = rel
    # Hard path only (no template's four markers read): the marker-like squares the detector
    # could not read, to complete the markers or to find the page by them.
    squares = None
    if not any(all(m in found for m in t.marker_ids) for t in cands) and len(dictionaries) == 1:
        squares = _square_candidates(grey, small, dictionaries[0])
    res = _locate_by_markers(grey, found, cands, template_id, a, squares) if found else None
    markers_printed = None
    if res is None and found and template_id is not None:
        others = [t for t in (templates or all_templates()) if t.id != template_id
                  and any(m in found for m in t.marker_ids)]
        if others:
            raise UnknownTemplateError(
                f"the photo shows the markers of template {others[0].id!r}, not of {template_id!r}.",
                hint=f"Leave out --template, or give --template {others[0].id}.")
    if res is not None:
        t, H, method, mids, quality, d = res
        markers_printed = True
        if len(mids) < 3 or relaxed_only or d.get("markers_anchored") or \
                d.get("markers_anchor_refused"):
            # Two markers, or one plus the page outline, leave the far side of the sheet to
            # extrapolation. Register on the print as well and keep whichever lines up better.
            # So with anchored markers too: those photos are the blurred, steep, curled ones,
            # where a homography fitted to the print's middle can suit the local refinement
            # better than one fitted to the corners (hard dev photos: p95 8.9 -> 3.7 px). And
            # when a fourth square was refused (it is a decoy, or the true marker on an edge a
            # bend lifted): the print decides there as well.
            score_m = registration_score(grey, H, t, markers=True)
            d["registration_markers"] = round(score_m, 4)
            try:
                t2, H2, _, q2, d2 = _locate_by_page(grey, [t], markers_printed=True, border_ok=True,
                                                    quad=_order_quad(project(H, _page_corners(t))))
            except (NoSheetFoundError, SheetCutOffError):
                t2, score_f = None, -1.0
            if t2 is not None:
                score_f = registration_score(grey, H2, t, markers=True)
                d["registration_features"] = round(score_f, 4)
                if score_f > score_m + 0.02:
                    H, method, quality = H2, "features", min(q2, 0.9)
                    d["geometry_from"] = "features (markers identified the template)"
            if max(score_m, score_f) < MIN_REGISTRATION:
                # The print does not line up with the template the marker(s) named: a misread
                # marker, or a marker lying on the table. Identify the sheet by its print.
                details["markers_ignored"] = {"ids": list(mids), "registration": round(max(score_m, score_f), 4)}
                res = None
        if res is not None:
            details.update(d)
    if res is None:
        if found:
            details["markers_detected"] = sorted(found)
        page_err = None
        try:
            page = _locate_by_page(grey, cands, markers_printed=None, image=a)
        except (NoSheetFoundError, SheetCutOffError) as e:
            page, page_err = None, e
        # The squares route costs ~0.2-0.7 s on a busy table: only when the page route failed,
        # lined up weakly, or itself found the print lined up better with markers printed.
        weak = page is None or page[4].get("markers_printed") or \
            registration_score(grey, page[1], page[0], markers=False) < 0.45
        anchored = _locate_by_anchor_quads(grey, a, cands, squares, small) if squares and weak else None
        if anchored is not None and page is not None:
            # Keep the anchored route when three or more squares were confirmed as the sheet's
            # markers and its print lines up about as well (marker corners are more precise than
            # a page edge or features), or when it lines up clearly better. Squares found in a
            # busy background round a sheet printed without markers give neither.
            s_a = registration_score(grey, anchored[1], anchored[0], markers=True)
            s_p = registration_score(grey, page[1], page[0], markers=bool(page[4].get("markers_printed")))
            anchored[4]["page_route_registration"] = round(s_p, 4)
            if not ((anchored[2] == "markers" and s_a >= s_p - 0.02) or s_a > s_p + 0.05):
                anchored = None
        if anchored is None and page is None:
            raise page_err
        t, H, method, quality, d = anchored if anchored is not None else page
        details.update(d)
        markers_printed = d.get("markers_printed", False)
        mids = _markers_used(t, found, d)
    markers_printed = bool(markers_printed)
    # A location that no confirmed marker set pins down (an extrapolated, relaxed or anchored
    # marker set, the page route's outline or features) can be wrong while the photo is fine:
    # the cut-off and blur checks then measure the wrong place and their refusal would be
    # false. Such a location is checked here, at once, and on a refusal the other routes'
    # locations are tried (_retry_refused). Four strictly read markers are never wrong by more
    # than a curl, so their checks keep their place (deferred beside light normalisation).
    weak = method != "markers" or len(mids) < 4 or relaxed_only or bool(details.get("markers_anchored"))
    checked: dict | None = None
    blurred: BlurryPhotoError | None = None  # (deferred: the caller's checks() raises it)
    try:
        details.update(_check_in_view(t, H, a.shape, method=method))
        if weak and check_blur:
            checked = _checks(grey, H, t, markers_printed=markers_printed, check_blur=True)
    except (SheetCutOffError, BlurryPhotoError) as refusal:
        if not weak:
            raise
        try:
            t, H, method, quality, d, markers_printed, checked = _retry_refused(
                grey, a, cands, refusal, first=(t, H, method, markers_printed),
                from_markers=res is not None, check_blur=check_blur,
                first_quad=details.get("page_quad_px"))
        except BlurryPhotoError as e:
            if not defer_checks or not isinstance(refusal, BlurryPhotoError):
                raise
            blurred = e  # the first location stands; its checks refuse it, as without retry
        else:
            details = {**({"markers_detected": sorted(found)} if found else {}), **d}
            mids = _markers_used(t, found, d)

    def checks() -> dict:
        if blurred is not None:
            raise blurred
        if checked is not None:
            return checked
        return _checks(grey, H, t, markers_printed=markers_printed, check_blur=check_blur,
                       registration="registration" not in details)

    def located(checked: dict) -> SheetLocation:
        return SheetLocation(template=t, homography=H, method=method, markers_found=mids,
                             quality=float(np.clip(quality, 0, 1)),
                             details={**details, **checked, "markers_printed": markers_printed})

    if defer_checks:
        return located({}), lambda: located(checks())
    return located(checks())
