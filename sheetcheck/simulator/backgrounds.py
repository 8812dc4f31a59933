"""What the sheet lies on: crops of real photographs and synthetic table textures.

Real photographs come from ``skimage.data`` (bundled with scikit-image, so no download): they
give the reader's page finder real edges, text-like clutter and colour to cope with. Synthetic
wood, tablecloth and plain table tops cover the common cases at a player's table.
"""

from __future__ import annotations

import math
from functools import lru_cache

import cv2
import numpy as np

from sheetcheck.simulator.paint import srgb_to_linear

#: skimage.data photographs usable offline (grey ones are tinted like a coloured surface).
PHOTO_BACKGROUNDS = ("coffee", "chelsea", "astronaut", "rocket", "hubble_deep_field",
                     "immunohistochemistry", "retina", "grass", "gravel", "brick")
SYNTHETIC_BACKGROUNDS = ("wood", "tablecloth", "plain_table", "dark_desk")
BACKGROUNDS = PHOTO_BACKGROUNDS + SYNTHETIC_BACKGROUNDS


@lru_cache(maxsize=None)
def _photo(name: str) -> np.ndarray:
    from skimage import data
    img = getattr(data, name)()
    if img.ndim == 2:
        img = np.repeat(img[..., None], 3, axis=2)
    img = img[..., :3].copy()
    img.flags.writeable = False
    return img


def make_background(name: str, size: tuple[int, int], rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """A background image in linear light.

    Parameters
    ----------
    name : str
        One of :data:`BACKGROUNDS`.
    size : (width, height)
        Output size in px.
    rng : numpy Generator

    Returns
    -------
    image : (H, W, 3) float32 ndarray
        Linear RGB in [0, 1].
    params : dict
        What was drawn (crop, tint ...), JSON-serialisable, for the truth's conditions.
    """
    if name not in BACKGROUNDS:
        raise ValueError(f"unknown background {name!r}; choose from {', '.join(BACKGROUNDS)}")
    W, H = size
    # textures are made at a reduced size and scaled up: a background is out of focus anyway
    w, h = max(64, W // 3), max(64, H // 3)
    params: dict = {"name": name}
    if name in PHOTO_BACKGROUNDS:
        src = _photo(name)
        sh, sw = src.shape[:2]
        frac = rng.uniform(0.55, 1.0)
        ch = int(sh * frac)
        cw = min(sw, int(ch * w / h))
        ch = min(sh, int(cw * h / w))
        y0 = int(rng.integers(0, sh - ch + 1))
        x0 = int(rng.integers(0, sw - cw + 1))
        crop = src[y0:y0 + ch, x0:x0 + cw]
        k = int(rng.integers(4))
        crop = np.rot90(crop, k)
        small = cv2.resize(np.ascontiguousarray(crop), (w, h), interpolation=cv2.INTER_AREA)
        img = srgb_to_linear(small / 255.0)
        if src.shape[2] == 3 and name in ("grass", "gravel", "brick"):
            tint = rng.uniform(0.5, 1.0, 3).astype(np.float32)
            img = img * tint
            params["tint"] = [round(float(t), 3) for t in tint]
        params.update({"crop": [x0, y0, cw, ch], "rot90": k})
    elif name == "wood":
        img = _wood(w, h, rng, params)
    elif name == "tablecloth":
        img = _tablecloth(w, h, rng, params)
    else:
        base = (rng.uniform(0.35, 0.8, 3) if name == "plain_table" else rng.uniform(0.02, 0.12, 3))
        img = np.empty((h, w, 3), np.float32)
        img[:] = srgb_to_linear(base)
        n = cv2.GaussianBlur(rng.standard_normal((h, w)).astype(np.float32), (0, 0), 2)
        img *= (1 + 0.05 * n)[..., None]
        params["colour"] = [round(float(c), 3) for c in base]
    # cubic: a linear upscale of a small source shows its pixel grid as blocks
    img = cv2.resize(np.ascontiguousarray(np.clip(img, 0, 1), np.float32), (W, H),
                     interpolation=cv2.INTER_CUBIC)
    np.clip(img, 0, 1, out=img)
    return img, params


def _wood(w, h, rng, params):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    ang = rng.uniform(0, math.pi)
    u = xx * math.cos(ang) + yy * math.sin(ang)
    v = -xx * math.sin(ang) + yy * math.cos(ang)
    # growth rings: wavy bands across the grain, irregular in width
    warp = cv2.GaussianBlur(rng.standard_normal((h, w)).astype(np.float32), (0, 0), 40) * 250
    warp += 0.08 * u + 30 * np.sin(u / rng.uniform(60, 200))
    period = rng.uniform(25, 70)
    rings = 0.5 + 0.5 * np.sin((v + warp) / period * 2 * math.pi)
    rings = rings ** rng.uniform(1.5, 3.0)
    # fibres: fine streaks along the grain (noise stretched along u)
    n = rng.standard_normal((h, w)).astype(np.float32)
    k = int(rng.integers(15, 40)) | 1
    line = np.zeros((k, k), np.float32)
    cv2.line(line, (int(k / 2 - k / 2 * math.cos(ang)), int(k / 2 - k / 2 * math.sin(ang))),
             (int(k / 2 + k / 2 * math.cos(ang)), int(k / 2 + k / 2 * math.sin(ang))), 1.0, 1)
    fibre = cv2.filter2D(n, -1, line / line.sum())
    fibre /= fibre.std() + 1e-6
    r = rng.uniform(0.5, 0.88)
    g = r * rng.uniform(0.62, 0.78)
    light = np.array([r, g, g * rng.uniform(0.5, 0.75)], np.float32)  # oak to walnut browns
    dark = light * rng.uniform(0.55, 0.8)
    t = np.clip(0.25 + 0.55 * rings + 0.12 * fibre, 0, 1)[..., None]
    img = srgb_to_linear(dark + (light - dark) * t)
    params.update({"angle_deg": round(math.degrees(ang), 1), "light": light.round(3).tolist()})
    return img


def _tablecloth(w, h, rng, params):
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    period = rng.uniform(8, 30)
    ang = rng.uniform(0, math.pi)
    u = xx * math.cos(ang) + yy * math.sin(ang)
    v = -xx * math.sin(ang) + yy * math.cos(ang)
    a = (np.floor(u / period) % 2).astype(np.float32)
    b = (np.floor(v / period) % 2).astype(np.float32)
    c1 = rng.uniform(0.3, 0.95, 3).astype(np.float32)
    c2 = np.array([0.95, 0.94, 0.9], np.float32) * rng.uniform(0.8, 1.0)
    # gingham: overlapping stripes darken where they cross
    t = (a + b)[..., None] / 2
    img = c2 * (1 - t) + c1 * t
    weave = 1 + 0.04 * np.sin(xx * 2.1) * np.sin(yy * 2.3)
    params.update({"period_px": round(float(period * 4), 1), "colour": c1.round(3).tolist()})
    return srgb_to_linear(img * weave[..., None])
