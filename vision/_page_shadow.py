"""Page outlines under strong shadow: the paper mask made from whiteness over its local upper
envelope (a shadow-flattened whiteness), for the page route's last resort.

The page route finds the page as the brightest, least coloured large region (whiteness at a
few global thresholds). A strong shadow across a corner or a side (a phone or a hand between
the lamp and the table, a lamp's falloff) puts that part of the page below every global
threshold, and on a busy cloth the shadowed paper is no brighter than the lit cloth's light
checks: the whiteness hull loses the corner, or takes the whole cloth, and with a whole side
in shadow the lit outline has no straight run there either.

What a shadow does not change is that paper is the whitest thing *in its neighbourhood*: a
shadow darkens the page and the cloth beside it alike. So whiteness is divided by its local
upper envelope (a dilation over a window larger than a cloth's pattern, then smoothed): paper
is ~1 wherever it lies, in light or in shadow, and the cloth near the page falls below 1 (the
page is its neighbourhood's maximum), leaving a moat round the page that separates it from
the cloth's own local maxima further away. The flattened map is thresholded near 1 and opened
(a gingham's light checks touch at their corners); each large component gives quads (its
hull, and the straight runs of its outline for a page still joined to a bright patch), and
so do two components close together (a shadow's edge across the page leaves a dark band on
its shadowed side, where the envelope is the lit paper beside it). The quads are ranked by
the page route's first look at the print in them, and the page route then registers the
print with all its checks, exactly as for any other outline (and keeps the result only above
SHADOW_MIN_REGISTRATION): a bare cloth is still refused.

Not solved by it: a cloth whose light checks are as white and as colourless as the paper under
the same light (then there is no moat: dev varied80000 reefs-1-hard-nm-s80069).
"""
from __future__ import annotations

import cv2
import numpy as np

__all__ = ["flattened_whiteness", "shadow_page_quads", "SHADOW_MIN_REGISTRATION"]

#: The page route keeps an outline of this route only when the print lines up at least this
#: well (its own bar is 0.25). The flattened mask also gives a page's lit part alone, and the
#: print stretched over a part can still reach 0.27-0.29, with the wrong level (a synthetic
#: half-shadowed page); whole pages found here line up at 0.41-0.58 on the hard photos it
#: recovers and 0.52-0.66 in the synthetic scenes of tests/test_vision_locate_shadow.py.
SHADOW_MIN_REGISTRATION = 0.35

#: Windows of the local envelope, as fractions of the small image's short side: larger than a
#: busy cloth's pattern (a gingham's period is 3-9 % of the short side on the hard dev photos),
#: smaller than a shadow that covers a page's corner.
ENVELOPE_FRACTIONS = (0.06, 0.12)
#: Levels (fraction of the local envelope) that count as paper.
LEVELS = (0.92, 0.86)
#: Openings (fractions of the short side) that cut the mask's thin bridges between the page and
#: a cloth's own local maxima (a gingham's light checks touch at their corners).
OPENINGS = (0.0, 0.03, 0.06)


def flattened_whiteness(small: np.ndarray, *, window_frac: float) -> np.ndarray:
    """The whiteness of ``small`` (a downscaled RGB uint8 photo), the print closed away and
    smoothed, divided by its local upper envelope over ``window_frac`` of the short side:
    float32, ~1 on paper in light or in shadow, below 1 on a cloth next to a page."""
    from vision.locate import _whiteness
    sh, sw = small.shape[:2]
    k = max(3, int(min(sh, sw) * 0.02) | 1)
    w = cv2.morphologyEx(_whiteness(small), cv2.MORPH_CLOSE,
                         cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    w = cv2.GaussianBlur(w, (5, 5), 0).astype(np.float32) + 1.0
    big = max(5, int(min(sh, sw) * window_frac) | 1)
    env = cv2.dilate(w, cv2.getStructuringElement(cv2.MORPH_RECT, (big, big)))
    env = cv2.blur(env, (big // 2 | 1, big // 2 | 1))
    # a floor: in the darkest shadows (or on a black table) the envelope is noise
    return w / np.maximum(env, 24.0)


def shadow_page_quads(image: np.ndarray, grey: np.ndarray | None = None, cands=None, *,
                      long_side: int = 640, limit: int = 4) -> list[np.ndarray]:
    """Page outlines from the shadow-flattened whiteness, best first, (4, 2) px corners
    (project convention, clockwise from the one nearest the top-left).

    Parameters
    ----------
    image : (H, W, 3) uint8 ndarray
        RGB photo.
    grey : (H, W) uint8 ndarray, optional
        The photo in grey. With ``cands``, the outlines are ranked by the page route's first
        look at the print in them (a few ms each), and those where no candidate's print shows
        at all are dropped; otherwise by their shape and contrast.
    cands : sequence of Template, optional
        The candidate templates.
    long_side : int, optional
        Long side (px) of the downscaled copy the masks are made on.
    limit : int, optional
        At most this many outlines (each costs the page route a registration).

    Returns
    -------
    list of (4, 2) float arrays
    """
    from vision import locate as L  # the page route's quad helpers (locate imports us lazily)
    if image.ndim != 3:
        return []
    h, w = image.shape[:2]
    f = min(1.0, long_side / max(h, w))
    small = cv2.resize(image, (round(w * f), round(h * f)), interpolation=cv2.INTER_AREA) if f < 1 else image
    sh, sw = small.shape[:2]
    white = L._whiteness(small)
    quads: list[tuple[float, np.ndarray]] = []
    for frac in ENVELOPE_FRACTIONS:
        flat = flattened_whiteness(small, window_frac=frac)
        g = np.clip(flat * 200.0, 0, 255).astype(np.uint8)  # for the contrast along outlines
        for level, opening in ((lv, op) for lv in LEVELS for op in OPENINGS):
            bw = (flat >= level).astype(np.uint8)
            ko = max(5, int(min(sh, sw) * opening) | 1)
            bw = cv2.morphologyEx(bw, cv2.MORPH_OPEN, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (ko, ko)))
            _, lab, stats, _ = cv2.connectedComponentsWithStats(bw, connectivity=4)
            comps = []
            for i in np.argsort(-stats[1:, cv2.CC_STAT_AREA])[:4] + 1:
                # (a page's shadowed part alone may be small)
                if stats[i, cv2.CC_STAT_AREA] < 0.01 * sh * sw:
                    break
                cnts, _ = cv2.findContours((lab == i).astype(np.uint8), cv2.RETR_EXTERNAL,
                                           cv2.CHAIN_APPROX_NONE)
                comps.append(max(cnts, key=cv2.contourArea))
            quads += _component_quads(comps, g, near=min(sh, sw) * frac)
    quads.sort(key=lambda c: -c[0])
    out = L._distinct_quads([L._order_quad((L._snap_quad_edges(q, white) + 0.5) / f)
                             for _, q in quads], 10 / f)
    if grey is not None and cands:
        # The flattened mask also makes quads of a bright patch of the table with the page, or
        # of the table alone: the print decides (as for the anchored squares' outlines).
        looks = [(L._coarse_quad_score(grey, q, cands), q) for q in out[:3 * limit]]
        out = [q for s, q in sorted(looks, key=lambda r: -r[0]) if s >= 0.15]
    return out[:limit]


def _component_quads(comps: list[np.ndarray], g: np.ndarray, *,
                     near: float) -> list[tuple[float, np.ndarray]]:
    """Scored quads ``(score, quad)`` (index coords of ``g``, the flattened whiteness as uint8)
    from the outlines ``comps`` of a paper mask's largest components: each component's hull
    when the component fills it, the quads made by the straight runs of its outline (a page
    still joined to a bright patch of the table by one side), and the hull of two components
    less than ``near`` px apart that fill it together (a shadow's edge across the page leaves a
    dark band on its shadowed side, where the envelope is the lit paper beside it: the page
    falls into a lit and a shadowed part). Scored as in the page route: the square root of the
    area times the contrast along the outline (capped), times the fill squared."""
    from vision import locate as L
    sh, sw = g.shape
    out: list[tuple[float, np.ndarray]] = []

    def hull_quad(pts: np.ndarray, filled: float, min_fill: float = 0.8):
        # (filled: the outline's area, so holes (the print) count as page)
        scored = L._hull_quad(cv2.convexHull(pts), filled, g, min_fill=min_fill, min_area=0.04)
        if scored is not None:
            out.append(scored)
    for c in comps:
        a = abs(cv2.contourArea(c))
        if a < 0.04 * sh * sw:
            continue
        hull_quad(c, a)
        # the straight runs of the outline: a page still joined to a bright patch
        out += L._outline_run_quads(c, g)
    # (about 200 points of each outline: the gap is then known to a few px, at little cost)
    pts = [c.reshape(-1, 2)[::max(1, len(c) // 200)].astype(np.float32) for c in comps]
    for i in range(len(comps)):
        for j in range(i + 1, len(comps)):
            gap = np.sqrt(((pts[i][:, None, :] - pts[j][None, :, :]) ** 2).sum(-1).min())
            if gap < near:
                # (the band between them is page too: a quarter of it in a synthetic scene)
                hull_quad(np.vstack([comps[i], comps[j]]),
                          abs(cv2.contourArea(comps[i])) + abs(cv2.contourArea(comps[j])), 0.7)
    return out
