"""Glyph outlines for printed sheets: pure geometry, no drawing.

A glyph is a small picture printed on a sheet (a Crypts symbol, a star, a coin ...). Each is
given here as a list of :class:`GlyphPath` in *unit* coordinates: the glyph fits the square
``[-0.5, 0.5] x [-0.5, 0.5]`` centred on the origin, x to the right, y down (the page
convention). :func:`glyph_paths` scales and places them in millimetres; the renderer
(``calibration/render.py``) draws them, and the simulator or a test can use the same outlines.

Keeping the shapes as data (not as drawing calls) means one definition serves every consumer and
a test can check a glyph's extent without rendering it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

#: Every glyph name the template format allows (docs/TEMPLATES.md, artwork ``glyph`` items and
#: region ``print.glyph``).
GLYPHS: tuple[str, ...] = ("circle", "triangle", "square", "cross", "hexagon", "pencil", "joker",
                           "star", "coin", "treasure", "whirlpool", "propeller", "exclamation",
                           "arrow")


@dataclass(frozen=True)
class GlyphPath:
    """One stroke of a glyph.

    Attributes
    ----------
    points : (N, 2) ndarray
        (x, y) vertices, unit coordinates for :data:`GLYPH_LIBRARY` entries, mm after
        :func:`glyph_paths`.
    closed : bool
        True for an outline (last vertex joins the first), False for an open polyline.
    solid : bool
        True if the printed glyph fills this path (a dot, an exclamation bar) rather than only
        outlining it.
    """

    points: np.ndarray
    closed: bool = True
    solid: bool = False


def _regular(n: int, r: float, *, phase: float = -math.pi / 2) -> np.ndarray:
    t = phase + np.arange(n) * 2 * math.pi / n
    return np.stack([r * np.cos(t), r * np.sin(t)], 1)


def _star(points: int, r_out: float, r_in: float) -> np.ndarray:
    t = -math.pi / 2 + np.arange(2 * points) * math.pi / points
    r = np.where(np.arange(2 * points) % 2 == 0, r_out, r_in)
    return np.stack([r * np.cos(t), r * np.sin(t)], 1)


def _circle(r: float, *, n: int = 64, cx: float = 0.0, cy: float = 0.0) -> np.ndarray:
    t = np.linspace(0, 2 * math.pi, n, endpoint=False)
    return np.stack([cx + r * np.cos(t), cy + r * np.sin(t)], 1)


def _ellipse(cx, cy, rx, ry, angle, n=40) -> np.ndarray:
    t = np.linspace(0, 2 * math.pi, n, endpoint=False)
    x, y = rx * np.cos(t), ry * np.sin(t)
    c, s = math.cos(angle), math.sin(angle)
    return np.stack([cx + c * x - s * y, cy + s * x + c * y], 1)


def _build() -> dict[str, tuple[GlyphPath, ...]]:
    a = 0.17  # half arm width of the cross: wide enough to colour in
    cross = np.array([[-a, -0.5], [a, -0.5], [a, -a], [0.5, -a], [0.5, a], [a, a], [a, 0.5],
                      [-a, 0.5], [-a, a], [-0.5, a], [-0.5, -a], [-a, -a]])
    # equilateral triangle of side 1 would be 0.866 tall; scale so it spans the unit square
    # height and sits centred on the origin
    tri = np.array([[0.0, -0.5], [0.5, 0.45], [-0.5, 0.45]])
    # a pencil lying diagonally: body, sharpened wood, lead tip
    # (long enough along the diagonal and wide enough to colour in)
    body = np.array([[-0.62, -0.17], [0.3, -0.17], [0.62, 0.0], [0.3, 0.17], [-0.62, 0.17]])
    lead = np.array([[0.45, -0.09], [0.62, 0.0], [0.45, 0.09]])
    rot = math.radians(-40)
    c, s = math.cos(rot), math.sin(rot)
    R = np.array([[c, -s], [s, c]])
    body, lead = body @ R.T, lead @ R.T
    ferrule = np.array([[-0.44, -0.17], [-0.44, 0.17]]) @ R.T
    # treasure chest: box, lid line, lock
    chest = np.array([[-0.48, -0.1], [0.48, -0.1], [0.48, 0.38], [-0.48, 0.38]])
    t = np.linspace(math.pi, 2 * math.pi, 21)
    lid = np.stack([0.48 * np.cos(t), -0.1 + 0.3 * np.sin(t)], 1)
    lock = np.array([[-0.07, -0.02], [0.07, -0.02], [0.07, 0.16], [-0.07, 0.16]])
    # whirlpool: an Archimedean spiral, open
    t = np.linspace(0, 3.2 * 2 * math.pi, 160)
    rr = 0.02 + 0.48 * t / t[-1]
    spiral = np.stack([rr * np.cos(t), rr * np.sin(t)], 1)
    # propeller: three blades round a hub
    blades = tuple(GlyphPath(_ellipse(0.25 * math.cos(k), 0.25 * math.sin(k), 0.24, 0.1, k))
                   for k in (-math.pi / 2, -math.pi / 2 + 2 * math.pi / 3, -math.pi / 2 + 4 * math.pi / 3))
    arrow = np.array([[-0.5, -0.12], [0.1, -0.12], [0.1, -0.34], [0.5, 0.0], [0.1, 0.34],
                      [0.1, 0.12], [-0.5, 0.12]])
    bar = np.array([[-0.08, -0.5], [0.08, -0.5], [0.05, 0.18], [-0.05, 0.18]])
    return {
        "circle": (GlyphPath(_circle(0.5)),),
        "square": (GlyphPath(np.array([[-0.45, -0.45], [0.45, -0.45], [0.45, 0.45], [-0.45, 0.45]])),),
        "triangle": (GlyphPath(tri),),
        "cross": (GlyphPath(cross),),
        "hexagon": (GlyphPath(_regular(6, 0.5, phase=0.0)),),
        "pencil": (GlyphPath(body), GlyphPath(lead, solid=True), GlyphPath(ferrule, closed=False)),
        "joker": (GlyphPath(_star(8, 0.5, 0.28)), GlyphPath(_circle(0.1), solid=True)),
        "star": (GlyphPath(_star(5, 0.5, 0.22) + [0, 0.04]),),
        "coin": (GlyphPath(_circle(0.5)), GlyphPath(_circle(0.34))),
        "treasure": (GlyphPath(chest), GlyphPath(lid, closed=False), GlyphPath(lock, solid=True)),
        "whirlpool": (GlyphPath(spiral, closed=False),),
        "propeller": blades + (GlyphPath(_circle(0.08), solid=True),),
        "exclamation": (GlyphPath(bar, solid=True), GlyphPath(_circle(0.08, cy=0.4), solid=True)),
        "arrow": (GlyphPath(arrow),),
    }


def _centred(paths: tuple[GlyphPath, ...]) -> tuple[GlyphPath, ...]:
    # asymmetric drawings (the tilted pencil, the spiral) would otherwise sit off-centre in
    # their cell; scale down whatever pokes out of the unit square
    pts = np.concatenate([p.points for p in paths])
    mid = (pts.min(0) + pts.max(0)) / 2
    k = min(1.0, 1.0 / float((pts.max(0) - pts.min(0)).max()))
    return tuple(GlyphPath((p.points - mid) * k, p.closed, p.solid) for p in paths)


#: name -> unit-square paths, each glyph centred on the origin (the propeller on its hub, which
#: is where the eye expects a rotor's centre).
GLYPH_LIBRARY: dict[str, tuple[GlyphPath, ...]] = {
    k: (v if k == "propeller" else _centred(v)) for k, v in _build().items()}


def glyph_paths(name: str, cx: float, cy: float, size: float, *,
                rotation_deg: float = 0.0) -> tuple[GlyphPath, ...]:
    """The paths of glyph ``name`` centred on ``(cx, cy)`` and scaled to ``size``.

    Parameters
    ----------
    name : str
        One of :data:`GLYPHS`.
    cx, cy : float
        Centre, in the caller's units (mm on the page).
    size : float
        Side of the square the glyph fits in, same units.
    rotation_deg : float, optional
        Clockwise rotation on the page (y down), e.g. to point an arrow at a space.

    Returns
    -------
    tuple of GlyphPath
        New paths in the caller's units.

    Raises
    ------
    ValueError
        If ``name`` is not a known glyph or ``size`` is not positive.
    """
    if name not in GLYPH_LIBRARY:
        raise ValueError(f"unknown glyph {name!r}; known glyphs: {', '.join(GLYPHS)}")
    if not size > 0:
        raise ValueError(f"glyph size must be positive, got {size!r}")
    t = math.radians(rotation_deg)
    c, s = math.cos(t), math.sin(t)
    R = np.array([[c, -s], [s, c]])
    return tuple(GlyphPath(p.points @ R.T * size + [cx, cy], p.closed, p.solid)
                 for p in GLYPH_LIBRARY[name])


@lru_cache(maxsize=None)
def glyph_extent(name: str) -> tuple[float, float, float, float]:
    """``(xmin, ymin, xmax, ymax)`` of a unit glyph (all inside ``[-0.5, 0.5]``)."""
    pts = np.concatenate([p.points for p in GLYPH_LIBRARY[name]])
    return (float(pts[:, 0].min()), float(pts[:, 1].min()),
            float(pts[:, 0].max()), float(pts[:, 1].max()))
