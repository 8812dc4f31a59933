"""The blank printed sheet the simulator paints on.

Uses the project's renderer (``calibration.render.render_sheet``) so that simulated photos show
exactly what ``sheetcheck print`` prints. A minimal fallback (white page, region outlines and
the ArUco markers) keeps the simulator usable if the renderer cannot be imported, for example
in a stripped-down install; it is never used when the renderer is present.
"""

from __future__ import annotations

import math

import cv2
import numpy as np


def render_blank(template, *, dpi: float, markers: bool = True) -> np.ndarray:
    """The blank sheet at ``dpi`` as a writable ``(H, W, 3)`` uint8 RGB array.

    ``px = mm * dpi / 25.4``; pixel ``(i, j)`` is centred at ``(j + 0.5, i + 0.5)`` px.
    """
    try:
        from calibration.render import render_sheet
    except ImportError:  # pragma: no cover - only without the renderer
        return _fallback(template, dpi=dpi, markers=markers)
    return np.array(render_sheet(template, dpi=float(dpi), markers=markers).image)


def _fallback(template, *, dpi: float, markers: bool) -> np.ndarray:
    s = dpi / 25.4
    W, H = int(round(template.width_mm * s)), int(round(template.height_mm * s))
    img = np.full((H, W, 3), 255, np.uint8)
    sh = 4
    for r in template.regions:
        poly = np.round((r.shape.polygon() * s - 0.5) * (1 << sh)).astype(np.int32)
        cv2.polylines(img, [poly], True, (60, 60, 60), max(1, int(round(0.25 * s))), cv2.LINE_AA, sh)
    if markers:
        d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, template.aruco_dictionary))
        for m in template.markers:
            x0, y0 = int(round(m.x * s)), int(round(m.y * s))
            n = int(round(m.size * s))
            mk = cv2.aruco.generateImageMarker(d, m.id, max(n, d.markerSize + 2))
            mk = cv2.resize(mk, (n, n), interpolation=cv2.INTER_NEAREST)
            img[y0:y0 + n, x0:x0 + n] = mk[..., None]
    return img


def render_dpi_for(px_per_mm: float) -> float:
    """A render dpi giving about ``px_per_mm`` px per mm, rounded so renders can be cached."""
    dpi = px_per_mm * 25.4
    step = 5.0 if dpi < 200 else 10.0
    return float(min(300.0, max(40.0, math.ceil(dpi / step) * step)))
