"""Geometry helpers shared by locate and rectify: frame warps and the reference rendering.

Conventions: a homography ``H`` maps template mm to image px in the project's convention
(pixel (i, j) has its centre at x = j + 0.5, y = i + 0.5). OpenCV's warps index pixels by their
centres (centre of pixel (i, j) at (j, i)), so every warp here converts with a half-pixel shift.
"""

from __future__ import annotations

import threading
import weakref

import cv2
import numpy as np

from calibration.template import Template

MM_PER_INCH = 25.4
_HALF = np.array([[1, 0, 0.5], [0, 1, 0.5], [0, 0, 1]], float)     # index -> px
_MHALF = np.array([[1, 0, -0.5], [0, 1, -0.5], [0, 0, 1]], float)  # px -> index


_grey_memo = threading.local()
#: Flat indices of the pixels :func:`photo_grey` compares to notice an image changed in place.
_PROBES = 61


def _probe(a: np.ndarray) -> bytes:
    flat = a.reshape(-1)
    return flat[np.linspace(0, flat.size - 1, _PROBES).astype(np.int64)].tobytes()


def photo_grey(image: np.ndarray, *, remember: bool = False) -> np.ndarray:
    """``image`` (RGB uint8) as grey (``cv2.COLOR_RGB2GRAY``), read-only.

    Why: locate and rectify both need the decoded photo's grey, and converting a 3 MP photo
    costs ~1.5 ms. ``remember=True`` (locate) converts afresh and keeps the result for this
    thread; the next call without it (rectify, on the same photo) takes it and forgets it. The
    hand-over holds only a weak reference to the image and is checked by identity, data
    pointer, shape and a sample of pixels, so another photo is converted anew; a photo
    changed in place between locating and rectifying it is not supported (the location would
    be stale as well). A grey (2-D) image is returned as it is.
    """
    if image.ndim == 2:
        return image
    if not remember:
        memo = getattr(_grey_memo, "last", None)
        _grey_memo.last = None
        if memo is not None and image.flags.c_contiguous:
            ref, mkey, probe, g = memo
            if ref() is image and mkey == _key(image) and probe == _probe(image):
                return g
    g = cv2.cvtColor(image, cv2.COLOR_RGB2GRAY)
    g.flags.writeable = False  # shared by the stages: nobody may draw on it
    if remember:  # (not a strided image: the probe would copy it)
        _grey_memo.last = ((weakref.ref(image), _key(image), _probe(image), g)
                           if image.flags.c_contiguous else None)
    return g


def _key(a: np.ndarray) -> tuple:
    return a.__array_interface__["data"][0], a.shape, a.strides


def scale_matrix(k: float) -> np.ndarray:
    return np.diag([k, k, 1.0])


def frame_size(template: Template, dpi: float) -> tuple[int, int]:
    """``(w, h)`` in px of the template frame at ``dpi`` (same rounding as the renderer)."""
    k = dpi / MM_PER_INCH
    return int(round(template.width_mm * k)), int(round(template.height_mm * k))


def frame_to_image_index_map(H: np.ndarray, dpi: float) -> np.ndarray:
    """Matrix mapping frame pixel *indices* at ``dpi`` to image pixel *indices*, for
    ``cv2.warpPerspective(..., flags=WARP_INVERSE_MAP)``."""
    k = dpi / MM_PER_INCH
    return _MHALF @ H @ scale_matrix(1.0 / k) @ _HALF


def warp_to_frame(image: np.ndarray, H: np.ndarray, dpi: float, size: tuple[int, int], *,
                  interpolation: int = cv2.INTER_LINEAR, border_value=255) -> np.ndarray:
    """Sample ``image`` on the template frame at ``dpi`` (``size`` = (w, h) px)."""
    M = frame_to_image_index_map(H, dpi)
    return cv2.warpPerspective(image, M, size, flags=interpolation | cv2.WARP_INVERSE_MAP,
                               borderMode=cv2.BORDER_CONSTANT, borderValue=border_value)


def project(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Apply homography ``H`` to (N, 2) points."""
    pts = np.asarray(pts, float).reshape(-1, 2)
    p = np.c_[pts, np.ones(len(pts))] @ H.T
    return p[:, :2] / p[:, 2:3]


def normalise_h(H: np.ndarray) -> np.ndarray:
    return H / H[2, 2]


def ink_map(grey: np.ndarray, *, background_px: float) -> np.ndarray:
    """Darkness relative to the local paper, 0 (paper) .. 1 (black), as float32.

    Dividing by a heavily smoothed copy (a closing removes thin print first) flattens shading
    and shadows, so that the same print gives the same ink value anywhere on the page.
    """
    g = grey.astype(np.float32) + 1.0
    k = max(3, int(background_px) | 1)
    bg = cv2.dilate(g, cv2.getStructuringElement(cv2.MORPH_RECT, (k, k)))
    bg = cv2.blur(bg, (k, k))
    return np.clip(1.0 - g / np.maximum(bg, 1.0), 0.0, 1.0)


def paper_level(img: np.ndarray, *, background_px: float) -> np.ndarray:
    """The local paper brightness of ``img`` (grey or per channel, same shape and dtype):
    a dilation (ink is darker than paper) then a box blur over ``background_px``, computed at
    quarter resolution and upsampled (the same for a smooth background, a fraction of the cost).
    Photo and reference ink maps both use it, so they stay comparable."""
    h, w = img.shape[:2]
    f = 4
    small = cv2.resize(img, (max(1, w // f), max(1, h // f)), interpolation=cv2.INTER_AREA)
    kk = max(3, int(background_px / f) | 1)
    bg = cv2.dilate(small, cv2.getStructuringElement(cv2.MORPH_RECT, (kk, kk)))
    bg = cv2.blur(bg, (kk, kk))
    return cv2.resize(bg, (w, h), interpolation=cv2.INTER_LINEAR)


def achromatic_ink(rgb: np.ndarray, *, background_px: float) -> np.ndarray:
    """Ink that is dark in *every* channel relative to the local paper, 0..1 float32.

    Each channel is divided by its own local paper level (which also white-balances the
    photo locally); the brightest ratio is kept. Black print is dark in all three channels;
    a pencil colour is bright in at least one, so colouring over the print barely moves the
    alignment (and coloured print is discounted equally in the reference)."""
    r = cv2.divide(rgb, cv2.max(paper_level(rgb, background_px=background_px), 1), scale=1.0,
                   dtype=cv2.CV_32F)
    top = cv2.max(cv2.max(r[..., 0], r[..., 1]), r[..., 2])
    return cv2.max(1.0 - top, 0.0)


# --------------------------------------------------------------------------------------------
# reference rendering
# --------------------------------------------------------------------------------------------

_cache: dict = {}
_lock = threading.Lock()


def reference_render(template: Template, *, dpi: float, markers: bool) -> np.ndarray:
    """The clean sheet in the template frame at ``dpi``, (H, W, 3) uint8 RGB, read-only.

    Uses the project renderer (``calibration.render.render_sheet``); falls back to a simple
    line drawing of markers, region outlines and artwork when the renderer is not installed.
    Cached per (template, dpi, markers).
    """
    key = (template.id, template.version, template.source, round(float(dpi), 3), bool(markers))
    with _lock:
        hit = _cache.get(key)
    if hit is not None:
        return hit
    try:
        from calibration.render import render_sheet
    except ImportError:
        img = simple_render(template, dpi=dpi, markers=markers)
    else:
        img = np.asarray(render_sheet(template, dpi=dpi, markers=markers).image)
        w, h = frame_size(template, dpi)
        if img.shape[:2] != (h, w):  # the renderer rounds differently: resample to our frame
            img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    img = np.ascontiguousarray(img, dtype=np.uint8)
    img.setflags(write=False)
    with _lock:
        if len(_cache) > 64:
            _cache.clear()
        _cache[key] = img
    return img


def _hex(c: str | None, default=(0, 0, 0)) -> tuple[int, int, int]:
    named = {"black": (0, 0, 0), "orange": (240, 130, 30), "red": (210, 40, 40),
             "blue": (40, 90, 200), "green": (40, 150, 60), "purple": (130, 60, 160)}
    if not c:
        return default
    if c in named:
        return named[c]
    if isinstance(c, str) and c.startswith("#") and len(c) == 7:
        return tuple(int(c[i:i + 2], 16) for i in (1, 3, 5))
    return default


def marker_image(dictionary: str, marker_id: int, side_px: int) -> np.ndarray:
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    return cv2.aruco.generateImageMarker(d, int(marker_id), int(side_px), borderBits=1)


def simple_render(template: Template, *, dpi: float, markers: bool = True,
                  supersample: int = 2) -> np.ndarray:
    """A plain line drawing of the sheet: markers, region outlines, artwork lines/shapes.

    Not the product's renderer: a stand-in with the same frame, used when
    ``calibration.render`` is missing and by the geometry tests to make synthetic sheets.
    """
    ss = supersample
    k = dpi / MM_PER_INCH * ss
    w, h = int(round(template.width_mm * dpi / MM_PER_INCH)), int(round(template.height_mm * dpi / MM_PER_INCH))
    W, Hh = w * ss, h * ss
    img = np.full((Hh, W, 3), 255, np.uint8)
    SH = 4  # cv2 drawing with 4 fractional bits

    def P(pt):
        return (int(round(pt[0] * k * 16 - 8)), int(round(pt[1] * k * 16 - 8)))

    def th(mm):
        return max(1, int(round(mm * k)))

    for a in template.artwork:
        t = a.get("type")
        col = _hex(a.get("color"))
        if t == "line":
            cv2.line(img, P(a["p1"]), P(a["p2"]), col, th(a.get("width", 0.3)), cv2.LINE_AA, SH)
        elif t == "rect":
            p1, p2 = P((a["x"], a["y"])), P((a["x"] + a["w"], a["y"] + a["h"]))
            if a.get("fill"):
                cv2.rectangle(img, p1, p2, _hex(a["fill"]), -1, cv2.LINE_AA, SH)
            cv2.rectangle(img, p1, p2, col, th(a.get("width", 0.3)), cv2.LINE_AA, SH)
        elif t in ("circle", "glyph"):
            r = a.get("r", a.get("size", 4) / 2)
            c = P((a["cx"], a["cy"]))
            if a.get("fill"):
                cv2.circle(img, c, int(r * k * 16), _hex(a["fill"]), -1, cv2.LINE_AA, SH)
            cv2.circle(img, c, int(r * k * 16), col, th(a.get("width", 0.3)), cv2.LINE_AA, SH)
    for r in template.regions:
        poly = r.shape.polygon(segments=48)
        pts = np.array([P(p) for p in poly], np.int32).reshape(-1, 1, 2)
        pr = r.print or {}
        if pr.get("fill"):
            cv2.fillPoly(img, [pts], _hex(pr["fill"]), cv2.LINE_AA, SH)
        cv2.polylines(img, [pts], True, _hex(pr.get("outline"), (0, 0, 0)), th(0.35), cv2.LINE_AA, SH)
    if markers:
        # Each supersampled pixel takes the value of the marker cell its centre falls in: exact
        # placement to a fraction of a pixel, whatever the dpi.
        for m in template.markers:
            bits = marker_image(template.aruco_dictionary, m.id, 6)  # 6 x 6 cells with border
            x0, x1 = int(np.floor(m.x * k)), int(np.ceil((m.x + m.size) * k))
            y0, y1 = int(np.floor(m.y * k)), int(np.ceil((m.y + m.size) * k))
            xs = ((np.arange(x0, x1) + 0.5) / k - m.x) / m.size * 6
            ys = ((np.arange(y0, y1) + 0.5) / k - m.y) / m.size * 6
            inx, iny = (xs >= 0) & (xs < 6), (ys >= 0) & (ys < 6)
            cx, cy = np.clip(xs.astype(int), 0, 5), np.clip(ys.astype(int), 0, 5)
            patch = bits[cy[:, None], cx[None, :]]
            inside = iny[:, None] & inx[None, :]
            sub = img[y0:y1, x0:x1]
            sub[inside] = patch[inside][:, None]
    if ss > 1:
        img = cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA)
    return img
