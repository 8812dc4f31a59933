"""Printable sheets: render a template to an image, a PDF, and the ``regions.json`` contract.

The render is the reference picture of a blank sheet: the reader compares photos against it, the
simulator paints pencil marks on it, and ``sheetcheck print`` writes it for players.

Coordinates (the whole project): template geometry is in millimetres on the page, origin at the
page's top-left corner, x right, y down. A render at ``dpi`` maps mm to pixels by
``px = mm * dpi / 25.4``; image pixel ``[i, j]`` (row, col) has its centre at
``(x, y) = (j + 0.5, i + 0.5)`` px, so the page's top-left corner is px ``(0, 0)`` and a region
polygon in px lies exactly over the pixels the template names.

Drawing is done with Pillow at ``SUPERSAMPLE`` times the resolution and box-averaged down
(``Image.reduce``): an exact area average, so thin lines are anti-aliased without the ringing of a
sharpening filter and without shifting geometry. ArUco markers are drawn afterwards straight into
the final image by exact per-pixel area coverage, so their corners are where the template says to
a small fraction of a pixel.
"""

from __future__ import annotations

import json
import math
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from calibration.glyphs import GLYPHS, glyph_paths
from calibration.template import PENCIL_COLOURS, Region, Shape, Template
from sheetcheck.errors import InputFileError, TemplateError

MM_PER_INCH = 25.4

#: Format tag of the regions.json document (docs/REGIONS_JSON.md). Bump the number on any
#: change an outside tool could notice.
REGIONS_FORMAT = "sheetcheck.regions/1"

#: Print inks for the pencil colours (and black) that outlines and treasures are printed in.
INKS: dict[str, str] = {"orange": "#f08c00", "red": "#d62828", "blue": "#1d5fd1",
                        "green": "#2a9d3a", "purple": "#7b3fa8", "black": "#000000"}

#: Neutral inks. Ink inside readable regions stays thin and mid-grey so pencil dominates it.
INK_LINE = "#3c3c3c"      # thin outlines of boxes, symbols, spaces
INK_TEXT = "#1e1e1e"      # labels
INK_FAINT = "#a8a8a8"     # connection guides: visible, yet lighter than any pencil stroke
INK_LABEL_LIGHT = "#5a5a5a"  # labels printed inside readable regions
THIN_MM = 0.25            # thin outline
THICK_MM = 0.85           # coloured / black symbol and treasure outlines (about 0.8-1 mm)

PAGE_SIZES_PT = {"A4": (595.276, 841.890), "Letter": (612.0, 792.0)}


# --------------------------------------------------------------------------------------------
# the rendered sheet
# --------------------------------------------------------------------------------------------

def page_size_px(template: Template, dpi: float) -> tuple[int, int]:
    """Image size ``(width, height)`` of a render of ``template`` at ``dpi``.

    ``round(width_mm * dpi / 25.4)`` by ``round(height_mm * dpi / 25.4)``.
    """
    _check_dpi(dpi)
    return (int(round(template.width_mm * dpi / MM_PER_INCH)),
            int(round(template.height_mm * dpi / MM_PER_INCH)))


@dataclass(frozen=True, eq=False)
class RenderedSheet:
    """A blank sheet rendered at ``dpi``.

    Attributes
    ----------
    template : Template
        The template drawn.
    dpi : float
        Resolution; ``px = mm * dpi / 25.4``.
    image : (H, W, 3) uint8 ndarray
        RGB, white paper. Read-only (renders are cached and shared): copy before drawing on it.
    markers : bool
        Whether the ArUco markers were drawn.
    """

    template: Template
    dpi: float
    image: np.ndarray
    markers: bool

    @property
    def px_per_mm(self) -> float:
        return self.dpi / MM_PER_INCH

    @property
    def size(self) -> tuple[int, int]:
        """``(width, height)`` in px."""
        return (self.image.shape[1], self.image.shape[0])

    def mm_to_px(self, pts_mm) -> np.ndarray:
        """``(N, 2)`` (x, y) mm -> ``(N, 2)`` (x, y) px."""
        return np.asarray(pts_mm, float) * self.px_per_mm

    def px_to_mm(self, pts_px) -> np.ndarray:
        """``(N, 2)`` (x, y) px -> ``(N, 2)`` (x, y) mm."""
        return np.asarray(pts_px, float) / self.px_per_mm

    def region_polygon_px(self, region_id: str) -> np.ndarray:
        """Outline of a region, ``(N, 2)`` (x, y) px (segments: the stroke rectangle)."""
        return self.mm_to_px(self.template.region(region_id).shape.polygon())

    def region_window(self, region_id: str) -> tuple[slice, slice, np.ndarray]:
        """The region's interior on a small window of the image.

        Returns
        -------
        rows, cols : slice
            The window, ``image[rows, cols]``.
        mask : (h, w) bool ndarray
            True for pixels whose centre lies inside the region.
        """
        return _shape_window(self.template.region(region_id).shape, self.px_per_mm,
                             self.image.shape[:2])

    def region_mask(self, region_id: str) -> np.ndarray:
        """``(H, W)`` bool: pixels whose centre lies inside the region (segments: the stroke
        rectangle). Prefer :meth:`region_window` in loops; this allocates a full-size mask."""
        rows, cols, m = self.region_window(region_id)
        out = np.zeros(self.image.shape[:2], bool)
        out[rows, cols] = m
        return out

    def marker_corners_px(self) -> dict[int, np.ndarray]:
        """Marker id -> ``(4, 2)`` px corners in ArUco order (as printed; empty if no markers)."""
        if not self.markers:
            return {}
        return {m.id: self.mm_to_px(m.corners_mm()) for m in self.template.markers}


def _check_dpi(dpi) -> None:
    if not isinstance(dpi, (int, float)) or isinstance(dpi, bool) or not (10 <= dpi <= 1200):
        raise ValueError(f"dpi must be a number from 10 to 1200, got {dpi!r}")


def _shape_window(shape: Shape, s: float, hw: tuple[int, int]) -> tuple[slice, slice, np.ndarray]:
    H, W = hw
    x0, y0, x1, y1 = (v * s for v in shape.bbox())
    c0, r0 = max(int(math.floor(x0)), 0), max(int(math.floor(y0)), 0)
    c1, r1 = min(int(math.ceil(x1)) + 1, W), min(int(math.ceil(y1)) + 1, H)
    rows, cols = slice(r0, max(r1, r0)), slice(c0, max(c1, c0))
    xs = np.arange(c0, max(c1, c0)) + 0.5
    ys = np.arange(r0, max(r1, r0)) + 0.5
    p = shape.params
    if shape.type == "rect":
        mx = (xs >= p["x"] * s) & (xs <= (p["x"] + p["w"]) * s)
        my = (ys >= p["y"] * s) & (ys <= (p["y"] + p["h"]) * s)
        return rows, cols, my[:, None] & mx[None, :]
    if shape.type == "circle":
        dx, dy = xs - p["cx"] * s, ys - p["cy"] * s
        return rows, cols, dy[:, None] ** 2 + dx[None, :] ** 2 <= (p["r"] * s) ** 2
    return rows, cols, _inside_polygon(shape.polygon() * s, xs, ys)


def _inside_polygon(poly: np.ndarray, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """``(len(ys), len(xs))`` bool: is point (x, y) inside ``poly`` (even-odd rule)?

    An exact test at the pixel centres. (``cv2.fillPoly`` also fills every pixel its edges
    touch, which adds a half-pixel band round the outline: too much for narrow regions.)
    """
    inside = np.zeros((len(ys), len(xs)), bool)
    X, Y = xs[None, :], ys[:, None]
    x1, y1 = poly[:, 0], poly[:, 1]
    x2, y2 = np.roll(x1, -1), np.roll(y1, -1)
    for a, b, c, d in zip(x1, y1, x2, y2):
        if b == d:
            continue  # a horizontal edge is never crossed by a horizontal ray
        crosses = (Y >= min(b, d)) & (Y < max(b, d))
        xi = a + (Y - b) * (c - a) / (d - b)
        inside ^= crosses & (X < xi)
    return inside


# --------------------------------------------------------------------------------------------
# drawing in mm on a supersampled Pillow canvas
# --------------------------------------------------------------------------------------------

def _rgb(colour: str | None, default: str = INK_LINE) -> tuple[int, int, int]:
    c = colour or default
    c = INKS.get(c, c)
    if not (isinstance(c, str) and c.startswith("#") and len(c) == 7):
        raise ValueError(f"colour {colour!r} is neither #rrggbb nor one of {', '.join(INKS)}")
    return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))


@lru_cache(maxsize=64)
def _font(px: int) -> ImageFont.FreeTypeFont:
    # Pillow's bundled font: works offline with no system fonts installed
    return ImageFont.load_default(size=max(px, 4))


class _Pen:
    """Draw in mm on a canvas of ``k`` px per mm (already supersampled)."""

    def __init__(self, img: Image.Image, k: float):
        self.d = ImageDraw.Draw(img)
        self.k = k

    def w(self, width_mm: float) -> int:
        return max(1, int(round(width_mm * self.k)))

    def xy(self, pts) -> list[tuple[float, float]]:
        return [(float(x) * self.k, float(y) * self.k) for x, y in np.asarray(pts, float)]

    def rect(self, x, y, w, h, *, outline=None, width=THIN_MM, fill=None):
        k = self.k
        if fill is not None:
            self.d.rectangle([x * k, y * k, (x + w) * k, (y + h) * k], fill=_rgb(fill))
        if outline is not None and width > 0:
            # Pillow draws a rectangle's outline inward from its box: grow the box by half the
            # width so the line is centred on the geometric edge
            hw = width / 2
            self.d.rectangle([(x - hw) * k, (y - hw) * k, (x + w + hw) * k, (y + h + hw) * k],
                             outline=_rgb(outline), width=self.w(width))

    def circle(self, cx, cy, r, *, outline=None, width=THIN_MM, fill=None):
        k = self.k
        if fill is not None:
            self.d.ellipse([(cx - r) * k, (cy - r) * k, (cx + r) * k, (cy + r) * k], fill=_rgb(fill))
        if outline is not None and width > 0:
            R = r + width / 2
            self.d.ellipse([(cx - R) * k, (cy - R) * k, (cx + R) * k, (cy + R) * k],
                           outline=_rgb(outline), width=self.w(width))

    def polyline(self, pts, *, colour=None, width=THIN_MM, closed=False):
        pts = np.asarray(pts, float)
        if closed:
            # repeat the first two vertices so the closing corner gets a round joint too
            pts = np.concatenate([pts, pts[:2]])
        self.d.line(self.xy(pts), fill=_rgb(colour), width=self.w(width), joint="curve")

    def polygon(self, pts, *, outline=None, width=THIN_MM, fill=None):
        if fill is not None:
            self.d.polygon(self.xy(pts), fill=_rgb(fill))
        if outline is not None and width > 0:
            self.polyline(pts, colour=outline, width=width, closed=True)

    def line(self, p1, p2, *, colour=None, width=THIN_MM, dash=None):
        p1, p2 = np.asarray(p1, float), np.asarray(p2, float)
        if not dash:
            self.d.line(self.xy([p1, p2]), fill=_rgb(colour), width=self.w(width))
            return
        on, off = (1.5, 1.0) if dash is True else (
            (float(dash), float(dash)) if isinstance(dash, (int, float)) else map(float, dash[:2]))
        L = float(np.hypot(*(p2 - p1)))
        u = (p2 - p1) / max(L, 1e-9)
        t = 0.0
        while t < L:
            e = min(t + on, L)
            self.d.line(self.xy([p1 + u * t, p1 + u * e]), fill=_rgb(colour), width=self.w(width))
            t = e + off

    def dotted(self, p1, p2, *, colour, dot_mm, pitch_mm):
        """Round dots from ``p1`` to ``p2``, evenly spread so both ends get one."""
        p1, p2 = np.asarray(p1, float), np.asarray(p2, float)
        L = float(np.hypot(*(p2 - p1)))
        n = max(int(round(L / pitch_mm)), 1)
        for t in np.linspace(0.0, 1.0, n + 1):
            c = p1 + (p2 - p1) * t
            self.circle(c[0], c[1], dot_mm / 2, fill=colour)

    def shape(self, shape: Shape, *, outline=None, width=THIN_MM, fill=None):
        p = shape.params
        if shape.type == "rect":
            self.rect(p["x"], p["y"], p["w"], p["h"], outline=outline, width=width, fill=fill)
        elif shape.type == "circle":
            self.circle(p["cx"], p["cy"], p["r"], outline=outline, width=width, fill=fill)
        else:
            self.polygon(shape.polygon(), outline=outline, width=width, fill=fill)

    def glyph(self, name, cx, cy, size, *, colour=None, width=THIN_MM, fill=None, rotation_deg=0.0):
        for path in glyph_paths(name, cx, cy, size, rotation_deg=rotation_deg):
            if path.solid:
                self.polygon(path.points, fill=colour or INK_LINE)
            elif path.closed:
                self.polygon(path.points, outline=colour, width=width, fill=fill)
            else:
                self.polyline(path.points, colour=colour, width=width)

    def text(self, x, y, text, *, size_mm, anchor="la", colour=None, bold=False):
        px = int(round(size_mm * self.k))
        font = _font(px)
        # the bundled font has no bold face: a stroke in the text colour thickens it
        stroke = max(1, int(round(px * 0.03))) if bold else 0
        fill = _rgb(colour, INK_TEXT)
        self.d.text((x * self.k, y * self.k), str(text), font=font, anchor=anchor, fill=fill,
                    stroke_width=stroke, stroke_fill=fill)


# --------------------------------------------------------------------------------------------
# what to draw for each artwork item and region kind
# --------------------------------------------------------------------------------------------

def _draw_artwork(pen: _Pen, a: Mapping[str, Any]) -> None:
    t = a["type"]
    col = a.get("color", "#000000")
    if t == "text":
        pen.text(a["x"], a["y"], a["text"], size_mm=a.get("size", 4.0), anchor=a.get("anchor", "la"),
                 colour=col, bold=bool(a.get("bold", False)))
    elif t == "line":
        pen.line(a["p1"], a["p2"], colour=col, width=a.get("width", THIN_MM), dash=a.get("dash"))
    elif t == "rect":
        pen.rect(a["x"], a["y"], a["w"], a["h"], outline=col if a.get("width", THIN_MM) else None,
                 width=a.get("width", THIN_MM), fill=a.get("fill"))
    elif t == "circle":
        pen.circle(a["cx"], a["cy"], a["r"], outline=col if a.get("width", THIN_MM) else None,
                   width=a.get("width", THIN_MM), fill=a.get("fill"))
    elif t == "glyph":
        pen.glyph(a["glyph"], a["cx"], a["cy"], a["size"], colour=col, width=a.get("width", THIN_MM),
                  fill=a.get("fill"), rotation_deg=a.get("rotation", 0.0))
    else:
        raise ValueError(f"unknown artwork type {t!r} (text, line, rect, circle, glyph)")


def _fit(shape: Shape) -> tuple[float, float, float]:
    """Centre and side (mm) of the largest square centred in the shape's box."""
    x0, y0, x1, y1 = shape.bbox()
    cx, cy = shape.centre()
    return cx, cy, min(x1 - x0, y1 - y0)


_LABEL_DEFAULT_POS = {"box": "above", "star": "inside", "treasure": "inside", "swatch": "below",
                      "number_field": "above"}


def _label(pen: _Pen, r: Region, *, size_mm: float | None = None, at=None) -> None:
    pr = r.print
    text = pr.get("label")
    if text is None or text == "":
        return
    pos = pr.get("label_pos", _LABEL_DEFAULT_POS.get(r.kind, "inside"))
    x0, y0, x1, y1 = r.shape.bbox()
    cx, cy = r.shape.centre()
    h = y1 - y0
    size = pr.get("label_size") or size_mm or min(max(0.4 * h, 2.2), 3.4)
    gap = 0.7
    if pos == "above":
        pen.text(cx, y0 - gap, text, size_mm=size, anchor="ms", bold=True)
    elif pos == "below":
        pen.text(cx, y1 + gap, text, size_mm=size, anchor="mt")
    else:
        # inside a readable region the label is ink the reader must see past: regular weight,
        # mid-grey, a little smaller
        light = r.readable and r.kind != "number_field"
        x, y = at if at is not None else (cx, cy)
        pen.text(x, y, text, size_mm=size * (0.85 if light else 1.0), anchor="mm", bold=not light,
                 colour=INK_LABEL_LIGHT if light else None)


def _outline_ink(r: Region, default: str | None = None) -> str | None:
    o = r.print.get("outline")
    return o if o else default


def _draw_region(pen: _Pen, r: Region) -> None:
    pr, kind, shape = r.print, r.kind, r.shape
    if pr.get("fill"):
        pen.shape(shape, fill=pr["fill"])
    cx, cy, side = _fit(shape)
    outline = _outline_ink(r)

    if kind == "symbol":
        name = pr.get("glyph") or r.meaning.get("symbol") or "circle"
        gsize = side * pr.get("glyph_scale", 0.74)
        if outline:
            # a symbol with a coloured (or, at level 3, black) outline: the rulebook's "symbol
            # with coloured outline" is the symbol itself drawn in that ink
            pen.glyph(name, cx, cy, gsize, colour=outline, width=THICK_MM)
        else:
            pen.glyph(name, cx, cy, gsize, colour=INK_LINE, width=THIN_MM)
    elif kind == "box":
        thick = outline in PENCIL_COLOURS
        pen.shape(shape, outline=outline or INK_LINE, width=0.5 if thick else THIN_MM)
        if pr.get("glyph"):
            pen.glyph(pr["glyph"], cx, cy, side * 0.6, colour=INK_LINE)
    elif kind == "star":
        if shape.type == "polygon":
            # the template's own star outline is the region: print exactly that
            pen.shape(shape, outline=outline or INK_LINE, width=THIN_MM)
            pts = shape.polygon()
            cy = (pts[:, 1].min() + pts[:, 1].max()) / 2 + side * 0.04
        else:
            pen.glyph(pr.get("glyph", "star"), cx, cy, side, colour=outline or INK_LINE,
                      width=THIN_MM)
        _label(pen, r, size_mm=side * 0.34, at=(cx, cy))
        return
    elif kind == "number_field":
        pen.shape(shape, outline=outline or "#000000", width=0.35, fill=pr.get("fill") or "#ffffff")
    elif kind == "swatch":
        ink = outline or r.meaning.get("colour")
        pen.shape(shape, outline=ink if ink in INKS else INK_LINE, width=0.35)
    elif kind == "space":
        pen.shape(shape, outline=outline or INK_LINE, width=THIN_MM)
    elif kind == "connection":
        p = shape.params
        # a light dotted guide along the centre line: shows where to draw, and any pencil
        # stroke over it is darker and wider than the dots
        if pr.get("dash"):
            pen.line(p["p1"], p["p2"], colour=pr.get("color", INK_FAINT), width=0.3, dash=pr["dash"])
        else:
            pen.dotted(p["p1"], p["p2"], colour=pr.get("color", INK_FAINT),
                       dot_mm=min(0.45, p["width"] * 0.3), pitch_mm=1.3)
    elif kind == "entry_point":
        pen.shape(shape, outline=outline or INK_LINE, width=0.35)
        if pr.get("glyph"):
            pen.glyph(pr["glyph"], cx, cy, side * 0.6, colour=INK_LINE,
                      rotation_deg=pr.get("rotation", 0.0))
    elif kind == "treasure":
        colour = r.meaning.get("colour")
        ink = outline or (colour if colour in INKS else "black")
        pen.shape(shape, outline=ink, width=THICK_MM)
        value = pr.get("label", r.meaning.get("value"))
        if pr.get("glyph") == "treasure" and value is not None:
            # a chest with its value on the front: the lid above, the number in the box
            g, gy = side * 0.72, cy - side * 0.05
            for path in glyph_paths("treasure", cx, gy, g):
                if not path.solid:
                    pen.polyline(path.points, colour=INK_LINE, width=0.2, closed=path.closed)
            # centre of the chest's box (unit y -0.09 .. 0.39 in the glyph)
            pen.text(cx, gy + 0.15 * g, value, size_mm=side * 0.36, anchor="mm", colour=INK_TEXT)
        else:
            if pr.get("glyph"):
                pen.glyph(pr["glyph"], cx, cy, side * 0.55, colour=INK_LINE)
            if value is not None:
                pen.text(cx, cy, value, size_mm=side * 0.45, anchor="mm", colour=INK_TEXT)
        return
    elif kind == "coin":
        # smaller than its space, so the coin reads as lying on the space, not as its rim
        pen.glyph(pr.get("glyph", "coin"), cx, cy, side * 0.7, colour=outline or INK_LINE, width=0.3)
    elif kind == "whirlpool":
        pen.shape(shape, outline=outline or INK_LINE, width=THIN_MM)
        pen.glyph(pr.get("glyph", "whirlpool"), cx, cy, side * 0.78, colour=INK_LINE, width=0.3)
    elif kind == "propeller":
        role = r.meaning.get("role")
        if role == "track_rim":
            # the rim is coloured when a propeller is collected: a ring round the core
            pen.shape(shape, outline=outline or INK_LINE, width=0.35)
        elif role == "track_core":
            # the propeller a player fills when using it: its outline shows the place to colour
            pen.shape(shape, outline=outline or INK_LINE, width=THIN_MM)
            pen.glyph(pr.get("glyph", "propeller"), cx, cy, side * 0.8, colour=INK_LINE, width=THIN_MM)
        else:
            pen.glyph(pr.get("glyph", "propeller"), cx, cy, side * 0.85, colour=outline or INK_LINE,
                      width=THIN_MM)
    else:
        # kinds of games still to come (islands, sea symbols, stacks): their outline and glyph
        pen.shape(shape, outline=outline or INK_LINE, width=THIN_MM)
        if pr.get("glyph"):
            pen.glyph(pr["glyph"], cx, cy, side * 0.7, colour=INK_LINE)
    _label(pen, r)


# --------------------------------------------------------------------------------------------
# markers
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=256)
def _marker_bits(dictionary: str, marker_id: int) -> np.ndarray:
    """``(n, n)`` float, 1 = black cell, including the one-cell black border."""
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    n = d.markerSize + 2
    img = cv2.aruco.generateImageMarker(d, marker_id, n)  # one pixel per cell
    return (img < 128).astype(np.float64)


def _overlap(edges: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """``(hi - lo, len(edges) - 1)``: length of each pixel [p, p+1) inside each cell."""
    p = np.arange(lo, hi, dtype=float)[:, None]
    a, b = edges[None, :-1], edges[None, 1:]
    return np.clip(np.minimum(p + 1, b) - np.maximum(p, a), 0, None)


def _paint_square(img: np.ndarray, x0: float, y0: float, side: float, bits: np.ndarray | None,
                  *, quiet: float) -> None:
    """Whiten a square's quiet zone and, if ``bits`` is given, paint the cells by exact area
    coverage (the cells tile ``[x0, x0 + side]``, px)."""
    H, W = img.shape[:2]
    q0x, q0y = max(int(math.floor(x0 - quiet)), 0), max(int(math.floor(y0 - quiet)), 0)
    q1x = min(int(math.ceil(x0 + side + quiet)), W)
    q1y = min(int(math.ceil(y0 + side + quiet)), H)
    img[q0y:q1y, q0x:q1x] = 255
    if bits is None:
        return
    n = bits.shape[0]
    ex = x0 + side * np.arange(n + 1) / n
    ey = y0 + side * np.arange(n + 1) / n
    # black coverage of pixel (i, j) = sum over cells of overlap_y(i) * bit * overlap_x(j):
    # separable, so two small matrix products give the exact anti-aliased marker
    cov = _overlap(ey, q0y, q1y) @ bits @ _overlap(ex, q0x, q1x).T
    img[q0y:q1y, q0x:q1x] = np.round(255 * (1 - np.clip(cov, 0, 1)))[..., None].astype(np.uint8)


# --------------------------------------------------------------------------------------------
# render, with a cache
# --------------------------------------------------------------------------------------------

def _supersample(dpi: float) -> int:
    """Supersampling factor: smooth lines at low dpi, a canvas that fits in memory at high dpi
    (above 400 dpi the pixels are already finer than a printer's dot)."""
    return 4 if dpi < 100 else (3 if dpi < 200 else (2 if dpi <= 400 else 1))


def _render(template: Template, dpi: float, markers: bool) -> np.ndarray:
    W, H = page_size_px(template, dpi)
    ss = _supersample(dpi)
    canvas = Image.new("RGB", (W * ss, H * ss), (255, 255, 255))
    pen = _Pen(canvas, dpi / MM_PER_INCH * ss)
    # the template loader checks geometry, not drawing hints: collect every item that cannot
    # be drawn and report them together, like the loader does
    problems: list[str] = []
    for i, a in enumerate(template.artwork):
        with _collect(problems, f"artwork[{i}] ({a.get('type')})"):
            _draw_artwork(pen, a)
    for r in template.regions:
        with _collect(problems, f"region {r.id!r} ({r.kind}) print hints"):
            _draw_region(pen, r)
    if problems:
        raise TemplateError(f"template {template.id} ({template.source}) cannot be drawn "
                            f"({len(problems)} problem{'s' if len(problems) != 1 else ''}):",
                            problems, hint="Fix these items (see docs/TEMPLATES.md).")
    img = np.array(canvas.reduce(ss))
    s = dpi / MM_PER_INCH
    for m in template.markers:
        bits = _marker_bits(template.aruco_dictionary, m.id)
        # quiet zone of two cells (one is the minimum a detector needs) in both modes, so a
        # render without markers differs from one with them only by the marker squares
        cell = m.size / bits.shape[0]
        _paint_square(img, m.x * s, m.y * s, m.size * s, bits if markers else None,
                      quiet=2 * cell * s)
    return img


@contextmanager
def _collect(problems: list[str], where: str):
    try:
        yield
    except KeyError as e:
        problems.append(f"{where}: missing field {e.args[0]!r}")
    except (TypeError, ValueError) as e:
        problems.append(f"{where}: {e}")


class _TemplateKey:
    """Hashable stand-in for a template in the render cache.

    Templates hold dicts, so they cannot be hashed themselves. The key hashes on
    (id, version) and compares the whole template, so two different test templates that
    share an id never get each other's render.
    """

    __slots__ = ("template",)

    def __init__(self, template: Template):
        self.template = template

    def __hash__(self) -> int:
        return hash((self.template.id, self.template.version))

    def __eq__(self, other) -> bool:
        return isinstance(other, _TemplateKey) and (
            other.template is self.template or other.template == self.template)


_cache_lock = threading.Lock()


@lru_cache(maxsize=12)
def _render_cached(key: _TemplateKey, dpi: float, markers: bool) -> RenderedSheet:
    img = _render(key.template, dpi, markers)
    img.flags.writeable = False
    return RenderedSheet(key.template, float(dpi), img, markers)


def render_sheet(template: Template, *, dpi: float = 150.0, markers: bool = True) -> RenderedSheet:
    """Render a blank sheet.

    Parameters
    ----------
    template : Template
        The sheet.
    dpi : float, optional
        Resolution, 10 to 1200 (default 150). The image is
        ``round(width_mm * dpi / 25.4)`` x ``round(height_mm * dpi / 25.4)`` px.
    markers : bool, optional
        Draw the four ArUco corner markers (default). Without them everything else is identical.

    Returns
    -------
    RenderedSheet
        Cached per (template, dpi, markers); its ``image`` is read-only, copy it to draw on it.

    Raises
    ------
    ValueError
        If ``dpi`` is out of range.
    TemplateError
        Naming every artwork item or print hint that cannot be drawn (an unknown colour or
        glyph, a missing field).
    """
    _check_dpi(dpi)
    with _cache_lock:  # one render per key even when the server asks from several threads
        return _render_cached(_TemplateKey(template), float(dpi), bool(markers))


# --------------------------------------------------------------------------------------------
# regions.json, PNG, PDF
# --------------------------------------------------------------------------------------------

def _r(v, nd: int = 3):
    a = np.round(np.asarray(v, float), nd)
    return a.tolist()


def _shape_px(shape: Shape, s: float) -> dict:
    p = shape.params
    if shape.type == "rect":
        return {"type": "rect", "x": _r(p["x"] * s), "y": _r(p["y"] * s),
                "w": _r(p["w"] * s), "h": _r(p["h"] * s)}
    if shape.type == "circle":
        return {"type": "circle", "cx": _r(p["cx"] * s), "cy": _r(p["cy"] * s), "r": _r(p["r"] * s)}
    if shape.type == "segment":
        return {"type": "segment", "p1": _r(np.asarray(p["p1"]) * s),
                "p2": _r(np.asarray(p["p2"]) * s), "width": _r(p["width"] * s)}
    return {"type": "polygon", "points": _r(np.asarray(p["points"], float) * s)}


def regions_json(sheet: RenderedSheet) -> dict:
    """The ``regions.json`` document for a rendered sheet (format ``sheetcheck.regions/1``).

    Every coordinate is in px of ``sheet.image`` with ``px = mm * dpi / 25.4`` and pixel
    ``[i, j]``'s centre at ``(j + 0.5, i + 0.5)``. See ``docs/REGIONS_JSON.md``.
    """
    t, s = sheet.template, sheet.px_per_mm
    regions = []
    for r in t.regions:
        d = {"id": r.id, "kind": r.kind, "readable": r.readable, "marks": list(r.marks),
             "polygon": _r(r.shape.polygon() * s), "centre": _r(np.asarray(r.shape.centre()) * s),
             "shape": _shape_px(r.shape, s)}
        if r.shape.type == "segment":
            p = r.shape.params
            d["endpoints"] = _r(np.array([p["p1"], p["p2"]], float) * s)
            d["width_px"] = _r(p["width"] * s)
        d["meaning"] = json.loads(json.dumps(r.meaning))
        regions.append(d)
    markers = [{"id": m.id, "corner": m.corner, "corners": _r(m.corners_mm() * s)}
               for m in t.markers] if sheet.markers else []
    return {
        "format": REGIONS_FORMAT,
        "template_id": t.id,
        "template_version": t.version,
        "game": t.game,
        "level": t.level,
        "title": t.title,
        "page": {"size": t.page_size,
                 "orientation": "landscape" if t.width_mm > t.height_mm else "portrait",
                 "width_mm": t.width_mm, "height_mm": t.height_mm},
        "dpi": sheet.dpi,
        "image_size": list(sheet.size),
        "px_per_mm": round(s, 6),
        "marker_dictionary": t.aruco_dictionary,
        "markers": markers,
        "regions": regions,
    }


def dumps_regions_json(doc: dict) -> str:
    """Serialise a regions.json document: readable header, one line per marker and region
    (small enough to diff, easy to grep for a region id)."""
    head = {k: v for k, v in doc.items() if k not in ("markers", "regions")}
    lines = json.dumps(head, indent=2)[:-2].rstrip().splitlines()
    out = "\n".join(lines) + ",\n"
    for key in ("markers", "regions"):
        items = doc.get(key, [])
        out += f'  "{key}": ['
        out += ",".join("\n    " + json.dumps(it, separators=(", ", ": ")) for it in items)
        out += ("\n  ]" if items else "]") + (",\n" if key == "markers" else "\n")
    return out + "}\n"


def regions_json_path(png_path: str | Path) -> Path:
    """``sheet.png`` -> ``sheet.regions.json`` beside it."""
    p = Path(png_path)
    return p.with_name(p.stem + ".regions.json")


def _check_out(path: Path, suffix: str) -> Path:
    if path.suffix.lower() != suffix:
        raise InputFileError(f"output {str(path)!r} must end in {suffix}.",
                             hint=f"Name the file like sheet{suffix}.")
    if not path.parent.exists():
        raise InputFileError(f"cannot write {str(path)!r}: folder {str(path.parent)!r} does not exist.",
                             hint="Create the folder first or choose another --out.")
    if path.is_dir():
        raise InputFileError(f"cannot write {str(path)!r}: it is a folder.",
                             hint="Give a file name, for example sheet" + suffix + ".")
    return path


def save_png(sheet: RenderedSheet, path: str | Path) -> Path:
    """Write the render as PNG (with its dpi) and ``NAME.regions.json`` beside it.

    Returns the PNG path. Raises :class:`InputFileError` if the path cannot be written.
    """
    path = _check_out(Path(path), ".png")
    try:
        Image.fromarray(sheet.image).save(path, "PNG", dpi=(sheet.dpi, sheet.dpi), optimize=False)
        regions_json_path(path).write_text(dumps_regions_json(regions_json(sheet)), encoding="utf-8")
    except OSError as e:
        raise InputFileError(f"cannot write {str(path)!r}: {e.strerror or e}.",
                             hint="Check the folder exists and is writable.") from None
    return path


def save_pdf(template: Template, path: str | Path, *, dpi: float = 300, markers: bool = True) -> Path:
    """Write a one-page PDF of the sheet at true physical size (A4 or Letter).

    The page's media box is the template's page in points (A4 portrait 595.28 x 841.89 pt); the
    render's pixel size is rounded, so the resolution is set per axis to land exactly on it.
    """
    path = _check_out(Path(path), ".pdf")
    _check_dpi(dpi)
    # a print render is a one-off at high dpi: render it outside the cache so it does not push
    # out the small renders the reader and simulator reuse
    image = _render(template, float(dpi), bool(markers))
    H, W = image.shape[:2]
    res = (W * MM_PER_INCH / template.width_mm, H * MM_PER_INCH / template.height_mm)
    try:
        # RGB pages are stored as JPEG inside the PDF: high quality and no chroma subsampling
        # keep thin coloured outlines crisp on paper
        Image.fromarray(image).save(path, "PDF", dpi=res, quality=95, subsampling=0,
                                          title=f"{template.title} ({template.id} {template.version})")
    except OSError as e:
        raise InputFileError(f"cannot write {str(path)!r}: {e.strerror or e}.",
                             hint="Check the folder exists and is writable.") from None
    return path


def pdf_page_size_pt(path: str | Path) -> tuple[float, float]:
    """``(width, height)`` in points of the first page's MediaBox of a PDF Pillow wrote."""
    import re

    data = Path(path).read_bytes()
    m = re.search(rb"/MediaBox\s*\[\s*([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*\]", data)
    if not m:
        raise InputFileError(f"{path}: no page size found in the PDF.")
    x0, y0, x1, y1 = map(float, m.groups())
    return (x1 - x0, y1 - y0)


__all__ = ["GLYPHS", "INKS", "REGIONS_FORMAT", "RenderedSheet", "page_size_px", "pdf_page_size_pt",
           "regions_json", "regions_json_path", "render_sheet", "save_pdf", "save_png"]
