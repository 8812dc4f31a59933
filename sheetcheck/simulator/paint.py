"""Coloured-pencil marks painted onto a flat sheet in the template frame.

A pencil stroke is not flat paint: pigment is rubbed onto the peaks of the paper grain (so white
specks show through a light stroke), pressure varies along and between strokes, hatching leaves
gaps, strokes overshoot the printed border or stop short of a corner, and many regions are only
partly filled. Pigment is composed subtractively (multiplied in linear light) over the paper and
the printed ink, so pencil always sits on top of the print.

Coordinates: template geometry in mm; the sheet image is indexed ``[row, col]`` and a point
``(x, y)`` in px is ``mm * dpi / 25.4`` with pixel ``(i, j)`` centred at ``(j + 0.5, i + 0.5)``.
OpenCV drawing functions put pixel centres at integers, hence the ``- 0.5`` in ``_cv_pts``.
"""

from __future__ import annotations

import math
import zlib
from typing import Mapping

import cv2
import numpy as np

from sheetcheck.errors import StateError

#: Region kinds painted as a line along the region (not a filled area).
LINE_KINDS = ("connection",)

#: Fill styles a player uses; each region picks one, biased by the hand's favourite.
FILL_STYLES = ("hatch", "zigzag", "scribble", "outline_fill")

_SHIFT = 4  # cv2 sub-pixel bits: drawing at 1/16 px keeps thin strokes from snapping to the grid
_HERSHEY = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_COMPLEX,
            cv2.FONT_HERSHEY_TRIPLEX, cv2.FONT_HERSHEY_SCRIPT_SIMPLEX,
            cv2.FONT_HERSHEY_SCRIPT_COMPLEX, cv2.FONT_HERSHEY_PLAIN)


# --------------------------------------------------------------------------------------------
# colour helpers (sRGB <-> linear light)
# --------------------------------------------------------------------------------------------

def srgb_to_linear(c: np.ndarray) -> np.ndarray:
    """sRGB values in [0, 1] to linear light (IEC 61966-2-1)."""
    c = np.asarray(c, np.float32)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


def linear_to_srgb(c: np.ndarray) -> np.ndarray:
    """Linear light in [0, 1] to sRGB values in [0, 1]."""
    c = np.clip(np.asarray(c, np.float32), 0.0, 1.0)
    return np.where(c <= 0.0031308, c * 12.92, 1.055 * c ** (1 / 2.4) - 0.055).astype(np.float32)


_TO_LIN_LUT = srgb_to_linear(np.arange(256) / 255.0)
_ENC_LUT = (linear_to_srgb(np.linspace(0, 1, 4096)) * 255 + 0.5).astype(np.uint8)


def _encode_srgb(lin: np.ndarray) -> np.ndarray:
    """Linear float in [0, 1] (clipped) -> sRGB uint8 through a 4096-entry table."""
    q = np.clip(lin, 0, 1)
    q *= 4095
    q += 0.5
    return _ENC_LUT[q.astype(np.uint16)]


# --------------------------------------------------------------------------------------------
# the hand: how one player colours
# --------------------------------------------------------------------------------------------

def sample_hand(rng: np.random.Generator, *, heavy: tuple[float, float] = (0.45, 1.0),
                coverage_min: float = 0.45, overshoot_mm: tuple[float, float] = (-0.4, 1.0),
                stray_rate: float = 1.0) -> dict:
    """Draw one player's colouring habits (JSON-serialisable, recorded in the truth).

    Parameters
    ----------
    rng : numpy Generator
    heavy : (lo, hi)
        Range of the mean pencil pressure (0.45 a light hand, 1.0 a heavy one).
    coverage_min : float
        Least fraction of a region a careless fill covers.
    overshoot_mm : (lo, hi)
        Range of the typical stroke overshoot past the border (negative: stops short).
    stray_rate : float
        Mean number of stray lines or smudges on the sheet.
    """
    right = rng.random() < 0.85
    return {
        "pressure": float(rng.uniform(*heavy)),
        # right-handers hatch from lower left to upper right, left-handers the other way
        "hatch_angle_deg": float(rng.uniform(-70, -30) if right else rng.uniform(30, 70)),
        "spacing_mm": float(rng.uniform(0.45, 1.3)),
        "stroke_width_mm": float(rng.uniform(0.35, 0.75)),
        "style": str(rng.choice(FILL_STYLES, p=[0.35, 0.3, 0.2, 0.15])),
        "style_loyalty": float(rng.uniform(0.5, 0.95)),
        "overshoot_mm": float(rng.uniform(*overshoot_mm)),
        "coverage_min": float(coverage_min),
        "grain_strength": float(rng.uniform(0.25, 0.7)),
        "wobble_mm": float(rng.uniform(0.03, 0.25)),
        "stray_marks": int(rng.poisson(stray_rate)),
        "cross_style": str(rng.choice(["x", "slash", "scribble"], p=[0.7, 0.18, 0.12])),
        "cross_pencil": str(rng.choice(["graphite", "colour"], p=[0.55, 0.45])),
        "write_with": str(rng.choice(["graphite", "colour", "ballpoint"], p=[0.5, 0.3, 0.2])),
        "font": int(rng.integers(len(_HAND_FONTS))),
    }


# --------------------------------------------------------------------------------------------
# strokes
# --------------------------------------------------------------------------------------------

def _smooth_noise(n: int, rng, *, scale: float) -> np.ndarray:
    """``n`` samples of smooth 1-D noise with unit-ish amplitude (correlation ``scale`` samples)."""
    if n <= 1:
        return np.zeros(max(n, 1))
    k = max(2, int(math.ceil(n / max(scale, 1.0))) + 2)
    knots = rng.standard_normal(k)
    return np.interp(np.linspace(0, k - 1.0001, n), np.arange(k), knots)


def _polyline(p0, p1, *, px_per_mm: float, wobble_mm: float, rng) -> np.ndarray:
    """A hand-drawn straight-ish line from ``p0`` to ``p1`` (px): subdivided and wobbled."""
    p0, p1 = np.asarray(p0, float), np.asarray(p1, float)
    d = p1 - p0
    length = float(np.hypot(*d))
    n = max(2, int(length / (1.2 * px_per_mm)) + 2)
    t = np.linspace(0, 1, n)
    pts = p0 + t[:, None] * d
    if length > 0:
        nrm = np.array([-d[1], d[0]]) / length
        # a bow (the wrist pivots) plus a small tremor
        bow = rng.normal(0, 0.02) * length * np.sin(np.pi * t)
        tremor = _smooth_noise(n, rng, scale=3) * wobble_mm * px_per_mm
        pts = pts + (bow + tremor)[:, None] * nrm
    return pts


def _pressure_profile(n: int, base: float, rng) -> np.ndarray:
    """Pressure along a stroke: varies smoothly, eases in and out at the ends."""
    t = np.linspace(0, 1, n)
    taper = np.clip(np.minimum(t, 1 - t) / rng.uniform(0.05, 0.25), 0.35, 1.0)
    wave = 1 + 0.22 * _smooth_noise(n, rng, scale=4)
    return np.clip(base * taper * wave, 0.05, 1.0)


class _Canvas:
    """Coverage (0..1 opacity) of pencil strokes on a local patch of the sheet."""

    def __init__(self, x0: int, y0: int, w: int, h: int):
        self.x0, self.y0 = x0, y0
        self.cov = np.zeros((h, w), np.float32)
        self._one = np.zeros((h, w), np.float32)

    @classmethod
    def of(cls, strokes) -> "_Canvas":
        """A canvas just large enough for ``strokes`` ((points, pressure, width) each), with
        every one of them drawn in order."""
        width = max(w for _, _, w in strokes)
        canvas = cls(*_stroke_bounds(strokes, width + 2))
        for pts, pr, wd in strokes:
            canvas.stroke(pts, pr, wd)
        return canvas

    def stroke(self, pts: np.ndarray, pressure: np.ndarray, width_px: float) -> None:
        """Add one stroke; overlapping strokes build up like layers (1 - prod(1 - c))."""
        one = self._one
        one[:] = 0
        q = np.round((pts - [self.x0 + 0.5, self.y0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
        th = max(1, int(round(width_px)))
        for k in range(len(q) - 1):
            cv2.line(one, tuple(map(int, q[k])), tuple(map(int, q[k + 1])),
                     float((pressure[k] + pressure[k + 1]) / 2), th, cv2.LINE_AA, _SHIFT)
        np.multiply(1 - self.cov, 1 - one, out=one)
        np.subtract(1, one, out=self.cov)


def _region_px(region, s: float) -> np.ndarray:
    return region.shape.polygon(segments=48) * s


def _chords(mask: np.ndarray, origin, angle: float, spacing: float):
    """Intersections of parallel lines at ``angle`` with ``mask``: list of (start, end) px."""
    h, w = mask.shape
    x0, y0 = origin
    u = np.array([math.cos(angle), math.sin(angle)])
    nrm = np.array([-u[1], u[0]])
    ys, xs = np.nonzero(mask)
    if len(xs) == 0:
        return []
    pts = np.stack([xs + 0.5, ys + 0.5], 1)
    on = pts @ nrm
    along = pts @ u
    tmin, tmax = along.min() - 2, along.max() + 2
    out = []
    ts = np.arange(tmin, tmax, 0.5)
    for o in np.arange(on.min() + spacing / 2, on.max(), spacing):
        line = ts[:, None] * u + o * nrm
        j = np.floor(line[:, 0]).astype(int)
        i = np.floor(line[:, 1]).astype(int)
        ok = (i >= 0) & (i < h) & (j >= 0) & (j < w)
        inside = np.zeros(len(ts), bool)
        inside[ok] = mask[i[ok], j[ok]] > 0
        idx = np.nonzero(inside)[0]
        if len(idx) == 0:
            continue
        a, b = line[idx[0]], line[idx[-1]]
        out.append((a + [x0, y0], b + [x0, y0]))
    return out


def _fill_strokes(poly: np.ndarray, *, hand: dict, s: float, rng, style: str,
                  swatch: bool) -> list[tuple[np.ndarray, np.ndarray, float]]:
    """Strokes that colour in the polygon ``poly`` (px) the way ``hand`` does."""
    bx0, by0 = np.floor(poly.min(0)).astype(int) - 2
    bx1, by1 = np.ceil(poly.max(0)).astype(int) + 2
    mask = np.zeros((by1 - by0, bx1 - bx0), np.uint8)
    q = np.round((poly - [bx0 + 0.5, by0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
    cv2.fillPoly(mask, [q], 1, cv2.LINE_8, _SHIFT)
    size_mm = max(bx1 - bx0, by1 - by0) / s
    angle = math.radians(hand["hatch_angle_deg"] + rng.normal(0, 12))
    spacing = max(1.0, hand["spacing_mm"] * s * rng.uniform(0.75, 1.3))
    if style == "scribble":
        spacing *= rng.uniform(0.7, 1.1)
    width = max(1.0, hand["stroke_width_mm"] * s * rng.uniform(0.85, 1.2))
    base = float(np.clip(hand["pressure"] * rng.uniform(0.8, 1.15), 0.2, 1.0))
    chords = _chords(mask, (bx0, by0), angle, spacing)
    if not chords:
        return []
    # partly filled regions: a careless player colours a contiguous band of the region
    cmin = 0.85 if swatch else hand["coverage_min"]
    coverage = 1.0 if rng.random() < 0.55 else rng.uniform(cmin, 1.0)
    n_keep = max(1, int(round(len(chords) * coverage)))
    start = int(rng.integers(0, len(chords) - n_keep + 1))
    chords = chords[start:start + n_keep]
    strokes = []
    sd = 0.45 if style == "scribble" else 0.3
    ends = []
    for a, b in chords:
        d = b - a
        ln = float(np.hypot(*d)) or 1.0
        u = d / ln
        # overshoot past the border (rarely more than ~2 mm), or stop short of it (corners
        # left empty)
        e0, e1 = np.clip(rng.normal(hand["overshoot_mm"], sd, 2), -0.35 * ln / s, 2.0) * s
        ends.append((a - u * e0, b + u * e1))
    if style in ("zigzag", "scribble"):
        # one continuous back-and-forth line, the pencil never lifts
        pts = []
        for k, (a, b) in enumerate(ends):
            if k % 2:
                a, b = b, a
            if style == "scribble":
                a = a + rng.normal(0, 0.3 * s, 2)
                b = b + rng.normal(0, 0.3 * s, 2)
            pts.append(_polyline(a, b, px_per_mm=s, wobble_mm=hand["wobble_mm"], rng=rng))
        line = np.concatenate(pts)
        strokes.append((line, _pressure_profile(len(line), base, rng), width))
        if style == "scribble" and rng.random() < 0.5:
            # a second pass across the first
            sub = _fill_strokes(poly, hand={**hand, "hatch_angle_deg": hand["hatch_angle_deg"] + 75},
                                s=s, rng=rng, style="zigzag", swatch=swatch)
            strokes.extend(sub)
    else:
        for a, b in ends:
            line = _polyline(a, b, px_per_mm=s, wobble_mm=hand["wobble_mm"], rng=rng)
            strokes.append((line, _pressure_profile(len(line), base * rng.uniform(0.8, 1.1), rng),
                            width))
        if style == "outline_fill":
            c = poly.mean(0)
            ring = c + (poly - c) * rng.uniform(0.9, 1.0)
            ring = np.concatenate([ring, ring[:1]])
            ring = ring + rng.normal(0, hand["wobble_mm"] * s, ring.shape)
            strokes.append((ring, _pressure_profile(len(ring), min(1.0, base * 1.15), rng), width))
    if size_mm > 0 and rng.random() < 0.12:
        # cross-hatching: a second layer at another angle for a darker fill
        sub = _fill_strokes(poly, hand={**hand, "hatch_angle_deg": hand["hatch_angle_deg"] + 90},
                            s=s, rng=rng, style="hatch", swatch=swatch)
        strokes.extend(sub)
    return strokes


def _line_strokes(region, *, hand: dict, s: float, rng):
    """A connection drawn as one to three pencil lines along the segment."""
    p = region.shape.params
    a, b = np.asarray(p["p1"], float) * s, np.asarray(p["p2"], float) * s
    d = b - a
    ln = float(np.hypot(*d)) or 1.0
    u, nrm = d / ln, np.array([-d[1], d[0]]) / ln
    wid = p["width"] * s
    off = rng.normal(0, 0.18) * wid  # slightly off-centre
    width = max(1.0, hand["stroke_width_mm"] * s * rng.uniform(0.9, 1.3))
    strokes = []
    for _ in range(int(rng.choice([1, 1, 2, 3]))):
        # often the line starts/ends inside the space circles it joins
        e0 = rng.uniform(-0.12, 0.35) * ln
        e1 = rng.uniform(-0.12, 0.35) * ln
        o = off + rng.normal(0, 0.08) * wid
        pa, pb = a - u * e0 + nrm * o, b + u * e1 + nrm * o
        line = _polyline(pa, pb, px_per_mm=s, wobble_mm=hand["wobble_mm"] * 1.5, rng=rng)
        strokes.append((line, _pressure_profile(len(line), min(1.0, hand["pressure"] * 1.1), rng),
                        width))
    return strokes


def _cross_strokes(region, *, hand: dict, s: float, rng, style: str | None = None):
    """An X (sometimes a single slash or a scribble) over the region: (strokes, style), the
    style the hand's own (mostly) unless ``style`` names one."""
    x0, y0, x1, y1 = (np.array(region.shape.bbox()) * s)
    c = np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    hw, hh = (x1 - x0) / 2, (y1 - y0) / 2
    if style is None:
        style = hand["cross_style"] if rng.random() < 0.85 else str(rng.choice(["x", "slash", "scribble"]))
    width = max(1.0, hand["stroke_width_mm"] * s * rng.uniform(0.9, 1.3))
    base = min(1.0, hand["pressure"] * 1.15)
    k = rng.uniform(0.7, 1.15)
    strokes = []
    if style == "scribble":
        pts = c + np.stack([rng.uniform(-hw, hw, 9), rng.uniform(-hh, hh, 9)], 1) * 0.8
        line = np.concatenate([_polyline(pts[i], pts[i + 1], px_per_mm=s,
                                         wobble_mm=hand["wobble_mm"], rng=rng) for i in range(8)])
        return [(line, _pressure_profile(len(line), base, rng), width)], style
    diag = [((-1, -1), (1, 1)), ((1, -1), (-1, 1))]
    if style == "slash":
        diag = diag[1:]
    for (sa, sb) in diag:
        pa = c + np.array(sa) * [hw, hh] * k + rng.normal(0, 0.6 * s, 2)
        pb = c + np.array(sb) * [hw, hh] * k + rng.normal(0, 0.6 * s, 2)
        line = _polyline(pa, pb, px_per_mm=s, wobble_mm=hand["wobble_mm"], rng=rng)
        strokes.append((line, _pressure_profile(len(line), base, rng), width))
    return strokes, style


#: Single-stroke Hershey fonts look most like handwriting; the serif ones only rarely.
_HAND_FONTS = (cv2.FONT_HERSHEY_SIMPLEX, cv2.FONT_HERSHEY_SCRIPT_SIMPLEX, cv2.FONT_HERSHEY_PLAIN,
               cv2.FONT_HERSHEY_DUPLEX, cv2.FONT_HERSHEY_SCRIPT_COMPLEX)


def _digit_coverage(text: str, font: int, height_px: float, rng) -> np.ndarray:
    """Handwriting-like digits as a coverage map: each digit drawn on its own with its own
    size, slant, baseline and spacing (Hershey strokes), then the whole number sheared."""
    thick = max(1, int(round(height_px / rng.uniform(9, 16))))
    glyphs = []
    for ch in text:
        h = height_px * rng.uniform(0.85, 1.12)
        (tw, th), base = cv2.getTextSize(ch, font, 1.0, thick)
        scale = h / max(th, 1)
        (tw, th), base = cv2.getTextSize(ch, font, scale, thick)
        pad = thick + 2
        g = np.zeros((th + base + 2 * pad, tw + 2 * pad), np.uint8)  # putText draws on 8-bit only
        cv2.putText(g, ch, (pad, pad + th), font, scale, 255, thick, cv2.LINE_AA)
        gh, gw = g.shape
        m = cv2.getRotationMatrix2D((gw / 2, gh / 2), rng.normal(0, 6), 1.0)
        g = cv2.warpAffine(g, m, (gw, gh))
        glyphs.append((g, int(rng.normal(0, height_px * 0.06)), int(rng.normal(0, height_px * 0.05))))
    pad = int(height_px * 0.5) + 2
    width = sum(g.shape[1] + dx for g, _, dx in glyphs) + 2 * pad
    height = max(g.shape[0] for g, _, _ in glyphs) + 2 * pad
    img = np.zeros((height, max(width, 2 * pad + 1)), np.float32)
    x = pad
    for g, dy, dx in glyphs:
        gh, gw = g.shape
        y = max(0, min(height - gh, pad + dy))
        x = max(0, min(img.shape[1] - gw, x))
        np.maximum(img[y:y + gh, x:x + gw], g / 255.0, out=img[y:y + gh, x:x + gw])
        x += gw + dx - thick
    h, w = img.shape
    shear = rng.normal(0.15, 0.12)  # handwriting leans
    m = cv2.getRotationMatrix2D((w / 2, h / 2), rng.normal(0, 4), rng.uniform(0.95, 1.05))
    m[0, 1] += -shear
    m[0, 2] += shear * h / 2
    return cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR)


def paper_grain(shape: tuple[int, int], *, dpi: float, rng) -> np.ndarray:
    """Paper-grain heights in [0, 1], ``shape`` (H, W), with ~0.1 mm features."""
    g = rng.random(shape, dtype=np.float32)
    sigma = max(0.5, 0.06 * dpi / 25.4)
    g = cv2.GaussianBlur(g, (0, 0), sigma)
    g -= g.mean()
    g /= g.std() + 1e-6
    return np.clip(0.5 + 0.22 * g, 0, 1)


def _overlap(lin: np.ndarray, grain: np.ndarray, canvas: _Canvas):
    """Where the canvas lies on the sheet: its coverage there, the paper grain and the sheet's
    pixels (a view, to change in place); None when the canvas is off the sheet."""
    h, w = canvas.cov.shape
    H, W = lin.shape[:2]
    x0, y0 = canvas.x0, canvas.y0
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(W, x0 + w), min(H, y0 + h)
    if xa >= xb or ya >= yb:
        return None
    return canvas.cov[ya - y0:yb - y0, xa - x0:xb - x0], grain[ya:yb, xa:xb], lin[ya:yb, xa:xb]


def _deposit(lin: np.ndarray, grain: np.ndarray, canvas: _Canvas, colour_lin: np.ndarray,
             grain_strength: float) -> None:
    """Rub pigment onto ``lin`` (linear RGB sheet, in place) where the canvas has coverage."""
    o = _overlap(lin, grain, canvas)
    if o is None:
        return
    cov, g, patch = o
    # pigment catches on the peaks of the grain: a light stroke leaves the valleys white
    gs = grain_strength
    eff = np.clip(cov * (1 + gs) - gs * 1.6 * (1 - g), 0, 1)
    patch *= np.power(colour_lin[None, None, :], eff[..., None])


#: Least ink a coloured connection leaves, in mm of a fully dark line per mm of the connection
#: (0.1: a 0.4 mm line darkening white paper by 25 %): a line a person sees on paper. Lighter
#: lines are drawn again with more pressure (see :func:`_visible_line`).
LINE_INK_FLOOR_MM = 0.1


def _line_ink(grain: np.ndarray, canvas: _Canvas, colour_lin: np.ndarray, grain_strength: float,
              length_px: float, s: float) -> float:
    """How much a line of ``canvas``'s strokes darkens white paper, as :func:`_deposit` would
    pigment it on ``grain``: the summed darkness (1 - luminance) per mm of ``length_px``, in mm
    (a fully dark line 0.5 mm wide gives 0.5). Only the part on the sheet counts."""
    h, w = canvas.cov.shape
    H, W = grain.shape[:2]
    x0, y0 = canvas.x0, canvas.y0
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(W, x0 + w), min(H, y0 + h)
    if xa >= xb or ya >= yb:
        return 0.0
    cov = canvas.cov[ya - y0:yb - y0, xa - x0:xb - x0]
    g = grain[ya:yb, xa:xb]
    gs = grain_strength
    eff = np.clip(cov * (1 + gs) - gs * 1.6 * (1 - g), 0, 1)
    weights = np.array([0.2126, 0.7152, 0.0722])
    lum = sum(wc * np.power(max(float(c), 1e-6), eff) for wc, c in zip(weights, colour_lin))
    return float(np.sum(1 - lum)) / max(length_px, 1.0) / s


def _visible_line(grain: np.ndarray, strokes, canvas: _Canvas, colour_lin: np.ndarray,
                  grain_strength: float, region, s: float) -> _Canvas:
    """The canvas of a coloured connection's ``strokes``, with their pressure raised (x1.15 at a
    time, at most to full pressure) until the line leaves at least :data:`LINE_INK_FLOOR_MM` of
    ink per mm of the connection.

    A light hand with a short, strongly tapered stroke on coarse grain can leave a line nobody
    could see (session 17: 1 coloured connection in ~600 below 0.06 mm, one of them read empty
    with confidence), yet the truth calls it coloured. Draws from no random stream, so every
    other mark of the sheet is painted as before.
    """
    p = region.shape.params
    length = float(np.hypot(*(np.subtract(p["p2"], p["p1"], dtype=float) * s)))
    for _ in range(40):
        if _line_ink(grain, canvas, colour_lin, grain_strength, length, s) >= LINE_INK_FLOOR_MM:
            break
        if all(float(np.min(pr)) >= 1.0 for _, pr, _ in strokes):
            break
        strokes = [(pts, np.minimum(pr * 1.15, 1.0), wd) for pts, pr, wd in strokes]
        canvas = _Canvas.of(strokes)
    return canvas


def _stroke_bounds(strokes, pad: float):
    allp = np.concatenate([p for p, _, _ in strokes])
    x0, y0 = np.floor(allp.min(0) - pad).astype(int)
    x1, y1 = np.ceil(allp.max(0) + pad).astype(int)
    return x0, y0, x1 - x0, y1 - y0


def check_marks(template, marks: Mapping[str, str]) -> None:
    """Raise :class:`StateError` naming every unknown region or mark a region cannot carry."""
    problems = []
    ids = {r.id: r for r in template.regions}
    for rid, mark in marks.items():
        r = ids.get(rid)
        if r is None:
            problems.append(f"unknown region {rid!r}")
        elif not r.readable:
            problems.append(f"region {rid!r} is not readable (structure only) and cannot carry a mark")
        elif mark not in r.marks:
            problems.append(f"region {rid!r} cannot carry mark {mark!r} (allowed: {', '.join(r.marks)})")
    if problems:
        shown = problems[:12] + ([f"... and {len(problems) - 12} more"] if len(problems) > 12 else [])
        raise StateError(f"marks do not fit template {template.id!r}: " + "; ".join(shown) + ".",
                         hint="Use region ids and marks from the template (`sheetcheck templates`, "
                              "docs/TEMPLATES.md).")


def paint_sheet(sheet_rgb: np.ndarray, template, marks: Mapping[str, str], *, dpi: float,
                rng: np.random.Generator, pencils: Mapping[str, tuple], hand: dict | None = None,
                digits: Mapping[str, str] | None = None) -> np.ndarray:
    """Colour in ``marks`` on a flat rendered sheet with realistic coloured pencil.

    Parameters
    ----------
    sheet_rgb : (H, W, 3) uint8 ndarray
        The printed sheet rendered at ``dpi`` in the template frame (not modified).
    template : calibration.template.Template
    marks : dict
        ``{region_id: mark}``; ``empty`` regions are left alone.
    dpi : float
        Resolution of ``sheet_rgb``.
    rng : numpy Generator
    pencils : dict
        sRGB (0-255) of a heavy stroke for each colour, plus ``graphite`` (crossing out,
        writing) and optionally ``ballpoint``.
    hand : dict, optional
        Colouring habits from :func:`sample_hand` (drawn from ``rng`` if None).
    digits : dict, optional
        Text written into ``written`` number fields (random numbers if missing).

    Returns
    -------
    (H, W, 3) uint8 ndarray
        The painted sheet.
    """
    sheet_rgb = np.asarray(sheet_rgb)
    if sheet_rgb.ndim != 3 or sheet_rgb.shape[2] != 3 or sheet_rgb.dtype != np.uint8:
        raise ValueError(f"sheet_rgb must be an (H, W, 3) uint8 array, got {sheet_rgb.shape} {sheet_rgb.dtype}")
    check_marks(template, marks)
    hand = dict(hand) if hand is not None else sample_hand(rng)
    s = dpi / 25.4
    H, W = sheet_rgb.shape[:2]
    lin = _TO_LIN_LUT[sheet_rgb]
    grain = paper_grain((H, W), dpi=dpi, rng=rng)
    plin = {k: srgb_to_linear(np.asarray(v, np.float32) / 255.0) for k, v in pencils.items()}
    colours = [c for c in ("orange", "red", "blue", "green", "purple") if c in plin]
    favourite = hand["style"]
    for region in template.regions:
        mark = marks.get(region.id, "empty")
        if mark == "empty":
            continue
        if region.shape.type == "segment" or region.kind in LINE_KINDS:
            if mark == "crossed":
                strokes, _ = _cross_strokes(region, hand=hand, s=s, rng=rng)
                colour = plin["graphite"]
            else:
                strokes = _line_strokes(region, hand=hand, s=s, rng=rng)
                colour = plin[mark]
        elif mark == "crossed":
            strokes, cstyle = _cross_strokes(region, hand=hand, s=s, rng=rng)
            # Pick a Pen players hold only coloured pencils while playing: a Reefs star that
            # another player took first is crossed with whichever pencil is in hand
            coloured = region.kind == "star" and template.game == "pick_a_pen_reefs"
            pick = (str(rng.choice(colours)) if colours and
                    (coloured or hand["cross_pencil"] == "colour") else None)
            if pick is not None and cstyle == "scribble":
                # A scribble over the region in a colour pencil is colouring it in, whatever the
                # painter meant: nobody, reader or person, can tell it from a scribbled fill,
                # so it would be a "crossed" truth no reader could earn. The varied painter
                # (_DENSE_CROSS) and the held-out one only scribble out with graphite; this
                # hand crosses out in colour with an X instead. The X's wobble comes from a
                # generator seeded by the scribble it replaces, so that every other region of
                # the photo comes out exactly as before this rule (session 21).
                sub = np.random.default_rng(zlib.crc32(strokes[0][0].tobytes()))
                strokes, _ = _cross_strokes(region, hand=hand, s=s, rng=sub, style="x")
            colour = plin[pick] if pick is not None else plin["graphite"]
        elif mark == "written":
            _write_digits(lin, grain, region, hand=hand, s=s, rng=rng, plin=plin, colours=colours,
                          text=(digits or {}).get(region.id))
            continue
        else:
            style = favourite if rng.random() < hand["style_loyalty"] else str(rng.choice(FILL_STYLES))
            strokes = _fill_strokes(_region_px(region, s), hand=hand, s=s, rng=rng, style=style,
                                    swatch=region.kind == "swatch")
            colour = plin[mark]
        if not strokes:
            continue
        canvas = _Canvas.of(strokes)
        colour = colour * _colour_jitter(rng)
        if mark in colours and (region.shape.type == "segment" or region.kind in LINE_KINDS):
            canvas = _visible_line(grain, strokes, canvas, colour, hand["grain_strength"],
                                   region, s)
        _deposit(lin, grain, canvas, colour, hand["grain_strength"])
    _stray_marks(lin, grain, template, hand=hand, s=s, rng=rng, plin=plin, colours=colours)
    return _encode_srgb(lin)


def _colour_jitter(rng) -> np.ndarray:
    """Small per-region shade change (pressure and wax vary) in linear transmittance."""
    return np.clip(1 + rng.normal(0, 0.04, 3), 0.85, 1.15).astype(np.float32)


def _write_digits(lin, grain, region, *, hand, s, rng, plin, colours, text):
    x0, y0, x1, y1 = np.array(region.shape.bbox()) * s
    h = (y1 - y0) * rng.uniform(0.5, 0.85)
    text = text or str(int(rng.choice([rng.integers(0, 10), rng.integers(10, 100),
                                       rng.integers(100, 200)])))
    font = (_HAND_FONTS[hand["font"] % len(_HAND_FONTS)] if rng.random() < 0.9
             else _HERSHEY[int(rng.integers(len(_HERSHEY)))])
    cov = _digit_coverage(text, font, h, rng)
    ch, cw = cov.shape
    if cw > (x1 - x0) * 1.1:  # squeeze a long number into the field as a person would
        k = (x1 - x0) * 1.05 / cw
        cov = cv2.resize(cov, (max(1, int(cw * k)), max(1, int(ch * k))), interpolation=cv2.INTER_AREA)
        ch, cw = cov.shape
    cx = (x0 + x1) / 2 + rng.normal(0, 0.08) * (x1 - x0)
    cy = (y0 + y1) / 2 + rng.normal(0, 0.06) * (y1 - y0)
    canvas = _Canvas(int(round(cx - cw / 2)), int(round(cy - ch / 2)), cw, ch)
    canvas.cov[:] = np.clip(cov * hand["pressure"] * 1.2, 0, 1)
    w = hand["write_with"]
    colour = (plin.get("ballpoint", plin["graphite"]) if w == "ballpoint"
              else plin[str(rng.choice(colours))] if w == "colour" and colours else plin["graphite"])
    _deposit(lin, grain, canvas, colour, 0.1 if w == "ballpoint" else hand["grain_strength"])


def _stray_marks(lin, grain, template, *, hand, s, rng, plin, colours):
    """The odd stray line or smudge, kept clear of every readable region."""
    if hand["stray_marks"] <= 0:
        return
    boxes = np.array([r.shape.bbox() for r in template.regions if r.readable] or [[0, 0, 0, 0]])
    boxes = boxes + [-3, -3, 3, 3]
    pw, ph = template.width_mm, template.height_mm
    for _ in range(hand["stray_marks"]):
        for _try in range(30):
            c = rng.uniform([8, 8], [pw - 8, ph - 8])
            ln = rng.uniform(3, 14)
            ang = rng.uniform(0, math.pi)
            a = c - ln / 2 * np.array([math.cos(ang), math.sin(ang)])
            b = c + ln / 2 * np.array([math.cos(ang), math.sin(ang)])
            lo, hi = np.minimum(a, b) - 1, np.maximum(a, b) + 1
            hit = ((boxes[:, 0] < hi[0]) & (boxes[:, 2] > lo[0]) &
                   (boxes[:, 1] < hi[1]) & (boxes[:, 3] > lo[1])).any()
            if not hit:
                break
        else:
            continue
        smudge = rng.random() < 0.35
        colour = plin["graphite"] if (smudge or not colours or rng.random() < 0.4) \
            else plin[str(rng.choice(colours))]
        if smudge:
            # a graphite smudge: a soft, faint smear
            r = ln * s / 2
            x0, y0 = int(c[0] * s - 2 * r), int(c[1] * s - 2 * r)
            n = int(4 * r) + 1
            canvas = _Canvas(x0, y0, n, n)
            cv2.ellipse(canvas.cov, (n // 2, n // 2), (max(1, int(r)), max(1, int(r * rng.uniform(0.2, 0.5)))),
                        math.degrees(ang), 0, 360, float(rng.uniform(0.15, 0.35)), -1)
            canvas.cov[:] = cv2.GaussianBlur(canvas.cov, (0, 0), max(1.0, r / 4))
            _deposit(lin, grain, canvas, colour, 0.2)
        else:
            line = _polyline(a * s, b * s, px_per_mm=s, wobble_mm=hand["wobble_mm"], rng=rng)
            width = max(1.0, hand["stroke_width_mm"] * s)
            canvas = _Canvas(*_stroke_bounds([(line, None, width)], width + 2))
            canvas.stroke(line, _pressure_profile(len(line), hand["pressure"] * 0.8, rng), width)
            _deposit(lin, grain, canvas, colour, hand["grain_strength"])


# ============================================================================================
# the varied painter: domain-randomised hands and pencils for training
# ============================================================================================
#
# The default painter above draws every hand and pencil from fairly narrow ranges, and a reader
# trained only on it learns its habits. The varied painter samples far wider ones (very light to
# heavy pressure, hair-thin to broad strokes, pale hard leads to waxy saturated pencils, 2H to 4B
# graphite, many more ways to fill and to cross out) so that a reader trained on it has seen the
# spread of real players. It only adds functions: nothing above calls them, so the default
# painter's output (and its random streams) are unchanged.

#: Fill styles of the varied painter (a superset of FILL_STYLES).
VARIED_FILL_STYLES = ("hatch", "zigzag", "scribble", "outline_fill", "sparse_hatch", "one_direction",
                      "circles", "outline", "around_symbol", "burnish")
#: Ways the varied painter crosses a region out.
VARIED_CROSS_STYLES = ("slash", "x", "x_heavy", "x_short", "x_over", "double_slash", "loops",
                       "scribble_out")
#: Cross styles that cover much of the region or look like a loose fill: with a colour pencil
#: they would read as coloured, so a person only scribbles out like this with graphite.
_DENSE_CROSS = ("scribble_out", "loops")

#: Pencil hues as anchor points (sRGB of a heavy stroke) along what real brands span for each
#: colour; a pencil is drawn on the polyline through them, so it stays nameable as that colour.
VARIED_HUES = {
    "orange": ([250, 172, 40], [246, 140, 40], [238, 112, 36], [226, 88, 30]),
    "red": ([232, 52, 40], [206, 36, 50], [172, 24, 46], [222, 46, 96]),
    "blue": ([70, 168, 220], [40, 116, 204], [34, 84, 178], [44, 50, 150], [30, 50, 110]),
    "green": ([140, 186, 56], [66, 164, 70], [30, 130, 72], [22, 128, 112], [24, 90, 56]),
    "purple": ([104, 66, 172], [120, 56, 150], [150, 50, 150], [178, 56, 150], [96, 42, 108]),
}


def sample_varied_hand(rng: np.random.Generator) -> dict:
    """Draw one player's colouring habits from the varied painter's wide ranges.

    The keys of :func:`sample_hand` (so the shared stroke helpers accept it) plus the varied
    painter's own: the pressure of crossing-out and writing, partial fills, erased ghosts.
    JSON-serialisable; recorded in the truth as ``conditions.hand`` with ``painter: "varied"``.

    Parameters
    ----------
    rng : numpy Generator
    """
    right = rng.random() < 0.85
    if rng.random() < 0.15:
        # some people hatch level or upright whatever their hand
        angle = float(rng.choice([0.0, 90.0]) + rng.normal(0, 8))
    else:
        angle = float(rng.uniform(-75, -20) if right else rng.uniform(20, 75))
    width = float(np.exp(rng.uniform(math.log(0.2), math.log(1.3))))
    return {
        "painter": "varied",
        # skewed towards light hands: those are the ones a reader misses
        "pressure": float(0.15 + 0.85 * rng.beta(1.3, 1.5)),
        "pressure_jitter": float(rng.uniform(0.05, 0.3)),
        "hatch_angle_deg": angle,
        "stroke_width_mm": width,
        # gaps relative to the stroke width: touching strokes to sparse hatching
        "spacing_mm": float(width * rng.uniform(0.6, 3.2)),
        "style": str(rng.choice(VARIED_FILL_STYLES,
                                p=[0.18, 0.14, 0.1, 0.08, 0.1, 0.08, 0.08, 0.06, 0.08, 0.1])),
        "style_loyalty": float(rng.uniform(0.3, 0.95)),
        "overshoot_mm": float(rng.uniform(-0.7, 1.5)),
        "partial_rate": float(rng.uniform(0.1, 0.7)),
        "coverage_min": float(rng.uniform(0.3, 0.7)),
        "grain_strength": float(rng.uniform(0.1, 0.9)),
        "wobble_mm": float(rng.uniform(0.02, 0.35)),
        "stray_marks": int(rng.poisson(rng.uniform(0.2, 2.5))),
        "cross_style": str(rng.choice(VARIED_CROSS_STYLES,
                                      p=[0.2, 0.2, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1])),
        "cross_style_loyalty": float(rng.uniform(0.5, 0.95)),
        "cross_pencil": str(rng.choice(["graphite", "colour"], p=[0.55, 0.45])),
        # crossing out is quick and often light: a hard pencil barely pressed
        "cross_pressure": float(rng.uniform(0.15, 0.5) if rng.random() < 0.5 else rng.uniform(0.5, 1.0)),
        "cross_width_mm": float(np.exp(rng.uniform(math.log(0.2), math.log(1.1)))),
        "write_with": str(rng.choice(["graphite", "colour", "ballpoint"], p=[0.45, 0.3, 0.25])),
        "write_size": float(rng.uniform(0.3, 0.95)),
        "write_pressure": float(rng.uniform(0.25, 1.0)),
        "font": int(rng.integers(len(_HAND_FONTS))),
        "erase_rate": float(rng.choice([0.0, rng.uniform(0.01, 0.06)], p=[0.5, 0.5])),
        # some players tick a box off with their pencil instead of colouring it in: the tick says
        # the box is taken, in that colour. Drawn last, so every habit above (and every varied
        # photo made before ticks were added, whose hand does not tick) comes out as it was.
        "tick_boxes": bool(rng.random() < 0.2),
    }


def varied_pencils(rng: np.random.Generator, *, base: Mapping[str, tuple] | None = None,
                   jitter: float = 0.06) -> tuple[dict, dict]:
    """This photo's pencils for the varied painter: hue, pigment strength and graphite grade.

    Parameters
    ----------
    rng : numpy Generator
    base : dict, optional
        ``{colour: [r, g, b]}`` to start from (a fixed brand); by default each colour is drawn
        along :data:`VARIED_HUES`.
    jitter : float
        Relative per-channel jitter of the colours.

    Returns
    -------
    pencils : dict
        sRGB (0-255) of a heavy stroke for every colour, ``graphite`` (2H grey to 4B near black)
        and ``ballpoint`` (blue or black pen).
    strength : dict
        Per pencil, the pigment strength 0..1 (a pale hard lead ~0.45, a waxy saturated one 1)
        and ``wax`` 0..1 (how much the pigment fills the paper grain).
    """
    pencils: dict[str, list[int]] = {}
    strength: dict[str, dict] = {}
    for c, anchors in VARIED_HUES.items():
        if base is not None and c in base:
            v = np.asarray(base[c], float)
        else:
            a = np.asarray(anchors, float)
            t = rng.uniform(0, len(a) - 1)
            k = min(int(t), len(a) - 2)
            # interpolate in linear light, as mixing pigments of neighbouring brands would
            lo, hi = srgb_to_linear(a[k] / 255), srgb_to_linear(a[k + 1] / 255)
            v = linear_to_srgb(lo + (t - k) * (hi - lo)) * 255
        v = v * (1 + rng.normal(0, jitter, 3))
        pencils[c] = [int(x) for x in np.clip(np.round(v), 0, 255)]
        strength[c] = {"strength": round(float(rng.uniform(0.45, 1.0)), 4),
                       "wax": round(float(rng.uniform(0, 1)), 4)}
    g = float(rng.uniform(50, 165))  # 4B .. 2H
    pencils["graphite"] = [int(round(g)), int(round(g)), int(round(min(255, g + rng.uniform(2, 10))))]
    strength["graphite"] = {"strength": 1.0, "wax": round(float(rng.uniform(0, 0.4)), 4)}
    pencils["ballpoint"] = ([int(rng.integers(25, 50)), int(rng.integers(40, 70)), int(rng.integers(110, 160))]
                            if rng.random() < 0.7 else [int(x) for x in [rng.integers(30, 50)] * 3])
    strength["ballpoint"] = {"strength": 1.0, "wax": 1.0}
    return pencils, strength


def _long_pressure(n: int, base: float, rng) -> np.ndarray:
    """Pressure along one long continuous stroke (a loop scribble): it eases in and out over the
    first and last few loops only, not over a fraction of the whole stroke as a short one does."""
    t = np.linspace(0, 1, n)
    ease = max(0.01, min(0.25, 60.0 / max(n, 1)))
    taper = np.clip(np.minimum(t, 1 - t) / ease, 0.35, 1.0)
    wave = 1 + 0.18 * _smooth_noise(n, rng, scale=24)
    return np.clip(base * taper * wave, 0.05, 1.0)


def _luminance(colour_lin) -> float:
    return float(np.dot(colour_lin, [0.2126, 0.7152, 0.0722]))


#: A fixed sample of the paper grain's heights (paper_grain: mean 0.5, sd 0.22, clipped), for
#: the expected pigmented fraction of a stroke (its own generator: no painting stream moves).
_GRAIN_Q = np.clip(np.random.default_rng(0).normal(0.5, 0.22, 512), 0, 1)


def _grain_factor(cov: float, grain_strength: float) -> float:
    """Mean fraction of a stroke of coverage ``cov`` that :func:`_deposit_varied` pigments."""
    return float(np.mean(np.clip(1 - 3 * grain_strength * (1 - cov) * (1 - _GRAIN_Q), 0.1, 1)))


def _visible_pressure(pressure: float, colour_lin, strength: float, darkness: float,
                      grain_strength: float = 0.5) -> float:
    """The least pressure (at least ``pressure``) at which a stroke of ``colour_lin`` darkens
    white paper by ``darkness`` (0..1) on average over the paper grain.

    Keeps every mark the truth names visible to a person: a stroke so light that nobody could
    see it is not a mark. 0.8 allows for the stroke's own ups and downs of pressure.
    """
    y = min(max(_luminance(colour_lin), 1e-4), 0.999)
    p = float(min(1.0, pressure))
    for _ in range(40):
        eff = 0.8 * p * _grain_factor(0.8 * p, grain_strength) * strength
        if 1 - y ** eff >= darkness or p >= 1.0:
            break
        p = min(1.0, p * 1.08 + 0.01)
    return p


def _deposit_varied(lin: np.ndarray, grain: np.ndarray, canvas: _Canvas, colour_lin: np.ndarray, *,
                    strength: float, grain_strength: float) -> None:
    """Rub pigment onto ``lin`` (in place): a light stroke catches only the grain's peaks, a heavy
    or waxy one fills the valleys too; ``strength`` scales how much pigment a stroke leaves."""
    o = _overlap(lin, grain, canvas)
    if o is None:
        return
    cov, g, patch = o
    eff = cov * np.clip(1 - 3 * grain_strength * (1 - cov) * (1 - g), 0.1, 1) * strength
    patch *= np.power(colour_lin[None, None, :], eff[..., None])


def _bbox_px(region, s):
    x0, y0, x1, y1 = np.array(region.shape.bbox()) * s
    return np.array([(x0 + x1) / 2, (y0 + y1) / 2]), (x1 - x0) / 2, (y1 - y0) / 2


def _loops(centre_line: np.ndarray, radius: float, *, turns_per_px: float, rng) -> np.ndarray:
    """A cursive loop scribble (``eeee``) travelling along ``centre_line`` (px)."""
    seg = np.hypot(*np.diff(centre_line, axis=0).T)
    t = np.r_[0, np.cumsum(seg)]
    n = max(8, int(t[-1] * turns_per_px * 24))
    tt = np.linspace(0, t[-1], n)
    path = np.stack([np.interp(tt, t, centre_line[:, 0]), np.interp(tt, t, centre_line[:, 1])], 1)
    ph = 2 * np.pi * turns_per_px * tt + rng.uniform(0, 2 * np.pi)
    r = radius * (1 + 0.25 * _smooth_noise(n, rng, scale=12))
    return path + np.stack([np.cos(ph) * r, np.sin(ph) * r * rng.uniform(0.6, 1.0)], 1)


def _varied_fill_strokes(poly: np.ndarray, *, hand: dict, s: float, rng, style: str, swatch: bool,
                         pressure: float):
    """Strokes for one coloured region in the varied painter's ``style``; returns
    ``(strokes, hole)`` where ``hole`` is ``(centre, radius)`` px of a spot left uncoloured
    (the printed symbol kept visible) or None."""
    # the shared fill helper draws partial bands with its own 55 % full-coverage rule; here the
    # hand's partial_rate decides, passed through coverage_min
    partial = (not swatch) and rng.random() < hand["partial_rate"]
    cmin = hand["coverage_min"] if partial else 1.0
    h = {**hand, "pressure": pressure, "coverage_min": cmin}
    # a fill is several strokes: one or two lines across a region would read as crossed out, so
    # even a sparse or partial fill keeps at least ~4 strokes (the region's short side / spacing)
    short_mm = float(np.min(poly.max(0) - poly.min(0))) / s
    cap = short_mm * cmin / 4.5
    hole = None
    h["spacing_mm"] = min(h["spacing_mm"], cap)
    if style in FILL_STYLES:
        return _fill_strokes(poly, hand=h, s=s, rng=rng, style=style, swatch=swatch), None
    if style == "sparse_hatch":
        h["spacing_mm"] = min(max(hand["spacing_mm"], hand["stroke_width_mm"]) * rng.uniform(2.0, 3.5), cap)
        return _fill_strokes(poly, hand=h, s=s, rng=rng, style="hatch", swatch=swatch), None
    if style == "one_direction":
        h["hatch_angle_deg"] = float(rng.choice([0.0, 90.0]) + rng.normal(0, 6))
        h["spacing_mm"] = hand["stroke_width_mm"] * rng.uniform(0.7, 1.4)
        return _fill_strokes(poly, hand=h, s=s, rng=rng, style="hatch", swatch=swatch), None
    if style == "burnish":
        # hard-pressed, dense, two layers: a solid waxy fill
        h["pressure"] = min(1.0, max(pressure, 0.8) * 1.2)
        h["spacing_mm"] = hand["stroke_width_mm"] * rng.uniform(0.4, 0.7)
        h["coverage_min"] = 1.0
        strokes = _fill_strokes(poly, hand=h, s=s, rng=rng, style="hatch", swatch=True)
        h["hatch_angle_deg"] = hand["hatch_angle_deg"] + rng.uniform(60, 120)
        return strokes + _fill_strokes(poly, hand=h, s=s, rng=rng, style="zigzag", swatch=True), None
    if style == "around_symbol":
        c = poly.mean(0)
        rad = float(np.median(np.hypot(*(poly - c).T)))
        hole = (c + rng.normal(0, 0.05 * rad, 2), rad * rng.uniform(0.3, 0.55))
        h["coverage_min"] = 1.0
        return _fill_strokes(poly, hand=h, s=s, rng=rng, style=str(rng.choice(["hatch", "zigzag"])),
                             swatch=True), hole
    width = max(1.0, hand["stroke_width_mm"] * s * rng.uniform(0.85, 1.2))
    c = poly.mean(0)
    if style == "outline":
        # the border traced inside, once or twice round, nothing inside
        strokes = []
        for _ in range(int(rng.choice([1, 2, 2, 3]))):
            # just inside the region's border, clear of a symbol printed in its middle
            ring = c + (poly - c) * rng.uniform(0.8, 0.95)
            ring = np.concatenate([ring, ring[:int(rng.integers(1, max(2, len(ring) // 6)))]])
            ring = ring + rng.normal(0, hand["wobble_mm"] * s, ring.shape)
            # a traced outline is the whole mark, so it is drawn broad enough to be seen
            strokes.append((ring, _pressure_profile(len(ring), min(1.0, pressure * 1.1), rng),
                            max(width * rng.uniform(1.0, 1.6), 0.7 * s)))
        return strokes, None
    # circles: small loops travelling back and forth across the region
    bx0, by0 = np.floor(poly.min(0)).astype(int) - 2
    bx1, by1 = np.ceil(poly.max(0)).astype(int) + 2
    mask = np.zeros((by1 - by0, bx1 - bx0), np.uint8)
    q = np.round((poly - [bx0 + 0.5, by0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
    cv2.fillPoly(mask, [q], 1, cv2.LINE_8, _SHIFT)
    r = max(1.5, rng.uniform(0.8, 2.0) * s)
    chords = _chords(mask, (bx0, by0), math.radians(hand["hatch_angle_deg"] + 90), 1.6 * r)
    if not chords:
        return [], None
    pts = []
    for k, (a, b) in enumerate(chords):
        a, b = (b, a) if k % 2 else (a, b)
        u = (b - a) / (np.hypot(*(b - a)) or 1.0)
        pts += [a + u * r * 0.6, b - u * r * 0.6]
    line = _loops(np.array(pts), r, turns_per_px=1 / (1.3 * r), rng=rng)
    return [(line, _long_pressure(len(line), pressure, rng), width)], None


def _tick_strokes(region, *, hand: dict, s: float, rng, pressure: float):
    """A tick (check mark) over a box, in one continuous stroke: a short arm down to a corner
    low in the box, then a long arm up and to the right, often past the box's border.

    Ticks vary a lot between people: the corner anywhere in the lower left half, the long arm
    steep or shallow, short of the corner or well over the border, the whole mark turned a
    little, now and then mirrored (a left hand) or gone over twice."""
    c, hw, hh = _bbox_px(region, s)
    start = [rng.uniform(-0.85, -0.45), rng.uniform(-0.25, 0.35)]
    corner = [rng.uniform(-0.4, 0.05), rng.uniform(0.35, 0.9)]
    end = [rng.uniform(0.55, 1.3), rng.uniform(-1.35, -0.55)]
    pts = np.array([start, corner, end]) * [hw, hh]
    if rng.random() < 0.08:
        pts[:, 0] *= -1
    a = math.radians(rng.normal(0, 8))
    rot = np.array([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
    pts = c + pts @ rot.T + rng.normal(0, 0.05, 2) * [hw, hh]
    wob = hand["wobble_mm"]
    line = np.concatenate([_polyline(pts[0], pts[1], px_per_mm=s, wobble_mm=wob, rng=rng),
                           _polyline(pts[1], pts[2], px_per_mm=s, wobble_mm=wob, rng=rng)[1:]])
    width = max(1.0, hand["stroke_width_mm"] * s * rng.uniform(0.9, 1.8))
    strokes = [(line, _pressure_profile(len(line), pressure, rng), width)]
    if rng.random() < 0.15:
        strokes.append((line + rng.normal(0, 0.2 * s, 2), _pressure_profile(len(line), pressure, rng), width))
    return strokes


def _varied_cross_strokes(region, *, style: str, hand: dict, s: float, rng, pressure: float,
                          width: float):
    """Strokes that cross ``region`` out in ``style`` (one of :data:`VARIED_CROSS_STYLES`)."""
    c, hw, hh = _bbox_px(region, s)
    c = c + rng.normal(0, 0.06, 2) * [hw, hh]
    wob = hand["wobble_mm"]

    def slash(angle_deg: float, reach: float, offset: float = 0.0):
        # a straight stroke through (near) the centre at angle_deg from the horizontal, reaching
        # `reach` times the distance to the region's box edge along that direction
        a = math.radians(angle_deg)
        u = np.array([math.cos(a), math.sin(a)])
        half = min(hw / max(abs(u[0]), 1e-3), hh / max(abs(u[1]), 1e-3)) * reach
        nrm = np.array([-u[1], u[0]])
        o = c + nrm * offset * min(hw, hh)
        ext = rng.normal(0, 0.08, 2) * half
        pa, pb = o - u * (half + ext[0]), o + u * (half + ext[1])
        if rng.random() < 0.5:
            pa, pb = pb, pa
        line = _polyline(pa, pb, px_per_mm=s, wobble_mm=wob, rng=rng)
        return line, _pressure_profile(len(line), pressure * rng.uniform(0.85, 1.1), rng)

    def angle():
        return float(rng.uniform(20, 70))

    sign = 1 if rng.random() < 0.5 else -1
    if style == "slash":
        line, pr = slash(sign * angle(), rng.uniform(0.8, 1.2))
        return [(line, pr, width)]
    if style == "double_slash":
        a, gap = sign * angle(), rng.uniform(0.08, 0.2)
        return [(*slash(a + rng.normal(0, 4), rng.uniform(0.8, 1.15), -gap), width),
                (*slash(a + rng.normal(0, 4), rng.uniform(0.8, 1.15), gap), width)]
    if style in ("x", "x_heavy", "x_short", "x_over"):
        reach = {"x": (0.8, 1.15), "x_heavy": (0.85, 1.2), "x_short": (0.4, 0.65),
                 "x_over": (1.2, 1.6)}[style]
        strokes = []
        for sg in (1, -1):
            line, pr = slash(sg * angle(), rng.uniform(*reach))
            strokes.append((line, pr, width))
            if style == "x_heavy" and rng.random() < 0.6:
                # traced over again: a heavy X is often gone over twice
                line2 = line + rng.normal(0, 0.25 * s, 2)
                strokes.append((line2, pr, width))
        return strokes
    if style == "loops":
        # a sparse loop scribble across the region: clearly separate loops, not a fill
        n = 2
        # two rows of loops over the middle (not along the border, which would leave the
        # printed symbol untouched)
        ys = np.array([-0.3, 0.3]) * hh * rng.uniform(0.8, 1.2)
        pts = []
        for k, y in enumerate(ys):
            xa, xb = (-hw * 0.8, hw * 0.8) if k % 2 == 0 else (hw * 0.8, -hw * 0.8)
            pts += [c + [xa, y], c + [xb, y]]
        r = max(1.5, min(hw, hh) * rng.uniform(0.3, 0.45))
        width = min(width, 0.7 * s)  # broad loops would merge into a grey blot
        line = _loops(np.array(pts), r, turns_per_px=1 / (rng.uniform(1.6, 2.6) * r), rng=rng)
        return [(line, _long_pressure(len(line), pressure, rng), width)]
    # scribble_out: a dense zigzag over most of the region, crossing its border
    poly = _region_px(region, s)
    cc = poly.mean(0)
    poly = cc + (poly - cc) * rng.uniform(0.9, 1.15)
    h = {**hand, "pressure": pressure, "coverage_min": 1.0, "stroke_width_mm": width / s,
         "spacing_mm": max(width / s * 1.3, rng.uniform(0.5, 1.3)),
         "hatch_angle_deg": float(rng.uniform(-80, 80))}
    return _fill_strokes(poly, hand=h, s=s, rng=rng, style="scribble", swatch=True)


def _paint_strokes(lin, grain, strokes, colour_lin, *, strength: float, grain_strength: float,
                   hole=None) -> None:
    if not strokes:
        return
    canvas = _Canvas.of(strokes)
    if hole is not None:
        (hx, hy), hr = hole
        yy, xx = np.mgrid[0:canvas.cov.shape[0], 0:canvas.cov.shape[1]]
        d = np.hypot(xx + canvas.x0 + 0.5 - hx, yy + canvas.y0 + 0.5 - hy)
        # the player steers round the symbol: a soft-edged uncoloured spot
        canvas.cov *= np.clip((d - hr) / max(1.0, 0.25 * hr) + 0.5, 0, 1).astype(np.float32)
    _deposit_varied(lin, grain, canvas, colour_lin, strength=strength, grain_strength=grain_strength)


def paint_varied(sheet_rgb: np.ndarray, template, marks: Mapping[str, str], *, dpi: float,
                 rng: np.random.Generator, pencils: Mapping[str, tuple], hand: dict,
                 strength: Mapping[str, Mapping] | None = None,
                 digits: Mapping[str, str] | None = None) -> np.ndarray:
    """Colour in ``marks`` like :func:`paint_sheet`, with the varied painter's hands and pencils.

    Truth semantics are the default painter's: every region marked ``crossed`` is crossed out so
    that a person would call it crossed, coloured regions are recognisably coloured, ``written``
    fields carry a number, and ``empty`` regions may carry at most an erased ghost (a faint grey
    trace of a rubbed-out fill), which a person reads as empty.

    Parameters
    ----------
    sheet_rgb : (H, W, 3) uint8 ndarray
        The printed sheet rendered at ``dpi`` in the template frame (not modified).
    template : calibration.template.Template
    marks : dict
        ``{region_id: mark}``.
    dpi : float
    rng : numpy Generator
    pencils, strength : dict
        From :func:`varied_pencils` (``strength`` defaults to full strength, no wax).
    hand : dict
        From :func:`sample_varied_hand`.
    digits : dict, optional
        Text written into ``written`` number fields (random numbers if missing).

    Returns
    -------
    (H, W, 3) uint8 ndarray
    """
    sheet_rgb = np.asarray(sheet_rgb)
    if sheet_rgb.ndim != 3 or sheet_rgb.shape[2] != 3 or sheet_rgb.dtype != np.uint8:
        raise ValueError(f"sheet_rgb must be an (H, W, 3) uint8 array, got {sheet_rgb.shape} {sheet_rgb.dtype}")
    check_marks(template, marks)
    missing = sorted(set(VARIED_HAND_KEYS) - set(hand))
    if missing:
        raise ValueError(f"hand lacks the varied painter's keys {missing}; draw it with sample_varied_hand")
    strength = dict(strength or {})
    s = dpi / 25.4
    H, W = sheet_rgb.shape[:2]
    lin = _TO_LIN_LUT[sheet_rgb]
    grain = paper_grain((H, W), dpi=dpi, rng=rng)
    plin = {k: srgb_to_linear(np.asarray(v, np.float32) / 255.0) for k, v in pencils.items()}
    colours = [c for c in ("orange", "red", "blue", "green", "purple") if c in plin]

    def props(name):
        p = strength.get(name, {})
        st = float(p.get("strength", 1.0))
        # wax fills the paper's valleys: less grain shows
        gs = hand["grain_strength"] * (1 - 0.75 * float(p.get("wax", 0.0)))
        return st, gs

    for region in template.regions:
        mark = marks.get(region.id, "empty")
        if mark == "empty":
            if region.readable and hand["erase_rate"] > 0 and rng.random() < hand["erase_rate"] \
                    and region.shape.type != "segment" and region.kind not in LINE_KINDS:
                _erased_ghost(lin, grain, region, hand=hand, s=s, rng=rng, plin=plin, colours=colours)
            continue
        base = float(np.clip(hand["pressure"] * (1 + rng.normal(0, hand["pressure_jitter"])), 0.1, 1.0))
        hole = None
        if mark == "crossed":
            cstyle = (hand["cross_style"] if rng.random() < hand["cross_style_loyalty"]
                      else str(rng.choice(VARIED_CROSS_STYLES)))
            coloured = region.kind == "star" and template.game == "pick_a_pen_reefs"
            use_colour = bool(colours) and (coloured or hand["cross_pencil"] == "colour")
            if use_colour and cstyle in _DENSE_CROSS:
                cstyle = str(rng.choice(["x", "x_heavy", "x_over"]))
            name = str(rng.choice(colours)) if use_colour else "graphite"
            st, gs = props(name)
            width = max(1.0, hand["cross_width_mm"] * s * rng.uniform(0.85, 1.15))
            if cstyle == "x_heavy":
                width = max(width, rng.uniform(0.6, 1.2) * s)
            press = hand["cross_pressure"] * rng.uniform(0.85, 1.15)
            if cstyle == "x_heavy":
                press = max(press, rng.uniform(0.7, 1.0))
            # a thin line needs more contrast than a broad one to be seen at all
            need = 0.35 if width / s < 0.35 else 0.28
            press = _visible_pressure(press, plin[name], st, need, gs)
            strokes = _varied_cross_strokes(region, style=cstyle, hand=hand, s=s, rng=rng,
                                            pressure=press, width=width)
        elif mark == "written":
            _write_varied(lin, grain, region, hand=hand, s=s, rng=rng, plin=plin, colours=colours,
                          props=props, text=(digits or {}).get(region.id))
            continue
        elif region.shape.type == "segment" or region.kind in LINE_KINDS:
            name = mark
            st, gs = props(name)
            h = {**hand, "pressure": _visible_pressure(base, plin[name], st, 0.3, gs)}
            strokes = _line_strokes(region, hand=h, s=s, rng=rng)
        elif region.kind == "box" and hand.get("tick_boxes") and rng.random() < 0.9:
            name = mark
            st, gs = props(name)
            # a tick is a thin mark, so it has to be as visible as a line is
            press = _visible_pressure(base, plin[name], st, 0.3, gs)
            strokes = _tick_strokes(region, hand=hand, s=s, rng=rng, pressure=press)
        else:
            name = mark
            st, gs = props(name)
            style = (hand["style"] if rng.random() < hand["style_loyalty"]
                     else str(rng.choice(VARIED_FILL_STYLES)))
            # a coloured region has to show its colour: at least a pale but nameable tint
            press = _visible_pressure(base, plin[name], st, 0.25, gs)
            strokes, hole = _varied_fill_strokes(_region_px(region, s), hand=hand, s=s, rng=rng,
                                                 style=style, swatch=region.kind == "swatch",
                                                 pressure=press)
            if style == "burnish":
                gs = gs * 0.2
        _paint_strokes(lin, grain, strokes, plin[name] * _colour_jitter(rng), strength=st,
                       grain_strength=gs, hole=hole)
    _stray_marks(lin, grain, template, hand=hand, s=s, rng=rng, plin=plin, colours=colours)
    return _encode_srgb(lin)


#: Keys :func:`paint_varied` needs in its hand (beyond those of :func:`sample_hand`).
VARIED_HAND_KEYS = ("pressure_jitter", "partial_rate", "cross_style_loyalty", "cross_pressure",
                    "cross_width_mm", "write_size", "write_pressure", "erase_rate")


def _erased_ghost(lin, grain, region, *, hand, s, rng, plin, colours):
    """What is left of a fill rubbed out with an eraser: a faint, smeared, greyish trace."""
    name = str(rng.choice(colours)) if colours and rng.random() < 0.6 else "graphite"
    grey = np.full(3, _luminance(plin[name]), np.float32)
    # the eraser lifts the pigment's colour more than its grey smear
    colour = (0.3 * plin[name] + 0.7 * grey).astype(np.float32)
    h = {**hand, "pressure": 0.6, "coverage_min": 1.0}
    strokes = _fill_strokes(_region_px(region, s), hand=h, s=s, rng=rng, style="hatch", swatch=True)
    if not strokes:
        return
    canvas = _Canvas.of(strokes)
    canvas.cov[:] = cv2.GaussianBlur(canvas.cov, (0, 0), max(1.0, 0.6 * s))
    # darkness on white at most ~6 %: visibly a ghost, not a mark
    y = max(_luminance(colour), 1e-3)
    amount = math.log(1 - rng.uniform(0.02, 0.06)) / math.log(y)
    canvas.cov *= float(amount)
    patch_strength = 1.0
    _deposit_varied(lin, grain, canvas, colour, strength=patch_strength, grain_strength=0.0)


def _write_varied(lin, grain, region, *, hand, s, rng, plin, colours, props, text):
    """A written number: small or large, light or heavy, pencil or ballpoint."""
    x0, y0, x1, y1 = np.array(region.shape.bbox()) * s
    h = (y1 - y0) * float(np.clip(hand["write_size"] * rng.uniform(0.85, 1.15), 0.25, 1.0))
    text = text or str(int(rng.choice([rng.integers(0, 10), rng.integers(10, 100),
                                       rng.integers(100, 200)])))
    font = (_HAND_FONTS[hand["font"] % len(_HAND_FONTS)] if rng.random() < 0.9
            else _HERSHEY[int(rng.integers(len(_HERSHEY)))])
    cov = _digit_coverage(text, font, h, rng)
    ch, cw = cov.shape
    if cw > (x1 - x0) * 1.1:
        k = (x1 - x0) * 1.05 / cw
        cov = cv2.resize(cov, (max(1, int(cw * k)), max(1, int(ch * k))), interpolation=cv2.INTER_AREA)
        ch, cw = cov.shape
    cx = (x0 + x1) / 2 + rng.normal(0, 0.08) * (x1 - x0)
    cy = (y0 + y1) / 2 + rng.normal(0, 0.06) * (y1 - y0)
    w = hand["write_with"]
    name = ("ballpoint" if w == "ballpoint" and "ballpoint" in plin
            else str(rng.choice(colours)) if w == "colour" and colours else "graphite")
    st, gs = props(name)
    press = 1.0 if name == "ballpoint" else _visible_pressure(hand["write_pressure"], plin[name], st, 0.3, gs)
    canvas = _Canvas(int(round(cx - cw / 2)), int(round(cy - ch / 2)), cw, ch)
    canvas.cov[:] = np.clip(cov * press * 1.2, 0, 1)
    _deposit_varied(lin, grain, canvas, plin[name], strength=st,
                    grain_strength=0.05 if name == "ballpoint" else gs)
