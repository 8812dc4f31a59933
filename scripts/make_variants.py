#!/usr/bin/env python
"""Make photos the simulator never makes from a corpus with truth, for ``sheetcheck eval``.

    .venv/bin/python scripts/make_variants.py --from CORPUS --out DIR --kind mirrored|coffee|pencil|thumb
                                              [--seed S] [--every K]

Each photo of ``CORPUS`` (``scripts/make_corpus.py`` output: ``*.jpg`` + ``*.truth.json``) is
changed the way a game table or a phone changes a real one, and written to ``DIR`` under the
same name with its truth, whose ``marks`` stay the sheet's (what was *pencilled*) and which
gains ``variant`` (what was done, with its parameters). ``sheetcheck eval DIR`` then measures
the reader on them exactly as on the corpus (docs/EVALUATION.md, "Session 30").

Kinds:

* ``mirrored``: the photo flipped left-right, as a phone's front camera (or a photo of the
  sheet in a mirror) saves it. The truth's pixel geometry (homography, page, marker and region
  positions) is flipped with it.
* ``coffee``: a coffee ring (a mug's foot, 70-90 mm across, a partial ring 1.5-4 mm wide with
  a darker rim) and, in half of the photos, a pale blot, dropped on the page over some regions,
  in the photo's light (multiplied in, as a stain on the paper absorbs). A stain is no pencil
  mark: a region under it is still what the truth says, and the reader must read it so or
  flag it.
* ``pencil``: one of the game's coloured pencils (110-175 mm long, 6.8-8 mm across) lying on
  the page over some of its regions, as players put them down before the photo: an opaque
  lacquered body lit in the photo's light (three faces, a specular stripe), a sharpened wooden
  cone with a coloured tip, a soft shadow beside it. What lies under it cannot be read: the
  reader must flag it (session 38).
* ``thumb``: a thumb holding the sheet down at one of its edges, as a player holds the page
  flat with one hand and the phone with the other (session 39): a rounded skin-coloured shape
  16-22 mm across reaching 20-55 mm in from the edge over a region near it (a skin tone from
  light to dark, lit in the photo's light, rounder and darker at its sides, a nail at its tip
  in most photos), a soft shadow beside it. What lies under it cannot be read.

Every photo's change is drawn from ``--seed`` plus the photo's own seed, so the same arguments
give the same files. ``--every K`` takes every K-th photo (sorted by name). The corpus used
must be one already spent (docs/EVALUATION.md): these are for probing, not for tuning.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

KINDS = ("mirrored", "coffee", "pencil", "thumb")
#: Coffee's colour on white paper where fully soaked (linear-ish RGB transmittance) and the
#: rim's extra darkness: a tea-to-espresso range of browns.
COFFEE_RGB = ((0.78, 0.58, 0.38), (0.62, 0.42, 0.26))
#: A coloured pencil's lacquered body (reflectance, linear RGB), by the game's pencil names, and
#: the bare wood of its sharpened cone.
PENCIL_BODY_RGB = {"orange": (0.85, 0.25, 0.03), "red": (0.60, 0.04, 0.04),
                   "blue": (0.03, 0.10, 0.45), "green": (0.04, 0.30, 0.07),
                   "purple": (0.20, 0.05, 0.35)}
PENCIL_WOOD_RGB = (0.75, 0.55, 0.35)
#: Skin reflectance (linear RGB), light to dark, and a thumbnail's (paler, pinker).
SKIN_RGB = ((0.62, 0.40, 0.31), (0.52, 0.32, 0.22), (0.38, 0.22, 0.14), (0.20, 0.11, 0.07))
NAIL_RGB = (0.78, 0.58, 0.55)


def _flip_points(pts, w: int):
    a = np.asarray(pts, float)
    a[..., 0] = (w - 1) - a[..., 0]
    return a.round(3).tolist()


def mirrored(rgb: np.ndarray, truth: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """The photo flipped left-right, with its truth's pixel geometry flipped alike."""
    h, w = rgb.shape[:2]
    t = dict(truth)
    flip = np.array([[-1.0, 0.0, w - 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    if "homography" in t:
        t["homography"] = (flip @ np.asarray(t["homography"], float)).round(9).tolist()
    for key in ("page_corners_px",):
        if key in t:
            t[key] = _flip_points(t[key], w)
    for key in ("marker_corners_px", "region_centres_px"):
        if isinstance(t.get(key), dict):
            t[key] = {k: _flip_points(v, w) for k, v in t[key].items()}
    if "lens" in t and isinstance(t["lens"], dict) and "centre_px" in t["lens"]:
        t["lens"] = {**t["lens"], "centre_px": _flip_points(t["lens"]["centre_px"], w)}
    t["variant"] = {"kind": "mirrored"}
    return np.ascontiguousarray(rgb[:, ::-1]), t


def _template_coords(H: np.ndarray, shape, box=None) -> tuple[np.ndarray, np.ndarray]:
    """Template mm of every photo pixel (the truth's homography inverted), or of the pixels of
    ``box`` = (x0, y0, x1, y1) only (float64 there)."""
    h, w = shape[:2]
    Hi = np.linalg.inv(H)
    if box is None:
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    else:
        x0, y0, x1, y1 = box
        ys, xs = np.mgrid[y0:y1, x0:x1].astype(np.float64)
    d = Hi[2, 0] * xs + Hi[2, 1] * ys + Hi[2, 2]
    u = (Hi[0, 0] * xs + Hi[0, 1] * ys + Hi[0, 2]) / d
    v = (Hi[1, 0] * xs + Hi[1, 1] * ys + Hi[1, 2]) / d
    return u, v


def _photo_box(H: np.ndarray, corners_mm: np.ndarray, blur: float, shape) -> tuple[int, int, int, int]:
    """``(x0, y0, x1, y1)``: the photo pixels an object over ``corners_mm`` (template mm) can
    touch, with a margin for a shadow blurred by ``blur`` px, within the photo."""
    h, w = shape[:2]
    ph = np.c_[corners_mm, np.ones(len(corners_mm))] @ H.T
    ph = ph[:, :2] / ph[:, 2:3]
    m = int(3 * blur) + 4
    x0, y0 = (max(0, int(np.floor(c)) - m) for c in ph.min(axis=0))
    x1, y1 = (min(lim, int(np.ceil(c)) + m + 1) for c, lim in zip(ph.max(axis=0), (w, h)))
    return x0, y0, x1, y1


def _lay_on(rgb: np.ndarray, out: np.ndarray, box, colour: np.ndarray, inside: np.ndarray,
            shadow: np.ndarray, strength: float, blur: float, edge: float) -> None:
    """An opaque object of reflectance ``colour`` on the pixels ``inside`` of ``box`` (edges
    softened by ``edge`` px), lit by the paper's light (the photo blurred wide, at an eighth
    of its size), with its ``shadow`` (blurred by ``blur`` px, darkening by ``strength``)
    on the photo beneath: written into ``out``."""
    import cv2

    h, w = rgb.shape[:2]
    x0, y0, x1, y1 = box
    small = cv2.resize(rgb, (max(1, w // 8), max(1, h // 8)), interpolation=cv2.INTER_AREA)
    small = cv2.GaussianBlur(small.astype(np.float32), (0, 0), max(h, w) / 480.0)
    small = cv2.dilate(small, np.ones((3, 3), np.uint8))
    paper = cv2.resize(small, (w, h), interpolation=cv2.INTER_LINEAR)[y0:y1, x0:x1]
    sh = cv2.GaussianBlur(shadow.astype(np.float32), (0, 0), blur)
    crop = rgb[y0:y1, x0:x1].astype(np.float32) * (1.0 - strength * sh)[..., None]
    alpha = cv2.GaussianBlur(inside.astype(np.float32), (0, 0), edge)[..., None]
    crop = crop * (1 - alpha) + (paper * colour) * alpha
    out[y0:y1, x0:x1] = np.clip(crop, 0, 255).round().astype(np.uint8)


def coffee(rgb: np.ndarray, truth: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """A coffee ring (and maybe a blot) on the page, over some of its regions."""
    from calibration.template import get_template

    t = get_template(truth["template"])
    H = np.asarray(truth["homography"], float)
    u, v = _template_coords(H, rgb.shape)
    regions = [r for r in t.readable_regions()]
    # the ring passes through a region's centre: it crosses the print, not only the margin
    through = regions[int(rng.integers(len(regions)))].shape.centre()
    radius = float(rng.uniform(35.0, 45.0))
    ang = float(rng.uniform(0, 2 * np.pi))
    cx, cy = through[0] + radius * np.cos(ang), through[1] + radius * np.sin(ang)
    width = float(rng.uniform(1.5, 4.0))
    strength = float(rng.uniform(0.35, 0.9))
    colour = np.array(COFFEE_RGB[int(rng.integers(2))], np.float32)
    r = np.hypot(u - cx, v - cy)
    theta = np.arctan2(v - cy, u - cx)
    # a partial ring: the mug's foot left more on one side (an arc of 200-360 deg, fading)
    arc = float(rng.uniform(200, 360))
    start = float(rng.uniform(-np.pi, np.pi))
    along = np.mod(theta - start, 2 * np.pi) * 180 / np.pi
    fade = np.clip(1.0 - np.maximum(along - arc, 0) / 20.0, 0, 1) * \
        (0.6 + 0.4 * np.cos(np.deg2rad(along) * float(rng.uniform(0.5, 2.0))) ** 2)
    # the rim: darkest at the outer edge of the band, a soft inner edge
    x = (r - radius) / width  # 0 at the outer edge, -1 at the inner
    band = np.where(x <= 0, np.exp(-((x + 0.15) / 0.45) ** 2), np.exp(-(x / 0.12) ** 2))
    alpha = strength * band * fade
    blot = None
    if rng.random() < 0.5:
        bx = through[0] + float(rng.uniform(-30, 30))
        by = through[1] + float(rng.uniform(-30, 30))
        ba, bb = float(rng.uniform(8, 20)), float(rng.uniform(6, 15))
        rot = float(rng.uniform(0, np.pi))
        du, dv = u - bx, v - by
        e = np.hypot((du * np.cos(rot) + dv * np.sin(rot)) / ba,
                     (-du * np.sin(rot) + dv * np.cos(rot)) / bb)
        bs = float(rng.uniform(0.15, 0.45))
        blot_a = bs * np.clip(1.2 - e, 0, 1) * (0.6 + 0.4 * np.exp(-((e - 0.95) / 0.08) ** 2))
        alpha = np.maximum(alpha, blot_a)
        blot = {"centre_mm": [round(bx, 2), round(by, 2)], "axes_mm": [round(ba, 2), round(bb, 2)],
                "strength": round(bs, 3)}
    out = rgb.astype(np.float32)
    trans = 1.0 - alpha[..., None] * (1.0 - colour[None, None, :])
    out = np.clip(out * trans, 0, 255).round().astype(np.uint8)
    tr = dict(truth)
    tr["variant"] = {"kind": "coffee",
                     "ring": {"centre_mm": [round(cx, 2), round(cy, 2)], "radius_mm": round(radius, 2),
                              "width_mm": round(width, 2), "strength": round(strength, 3),
                              "arc_deg": round(arc, 1), "colour": colour.round(3).tolist()},
                     "blot": blot}
    return out, tr


def pencil(rgb: np.ndarray, truth: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """A coloured pencil lying on the page (an object above it, in the photo's light): a
    lacquered hexagonal body in one of the game's pencil colours, its three visible faces lit
    differently, a sharpened wooden cone with a coloured tip, and a soft shadow cast beside it
    on the paper. Only the pixels around it are worked on."""
    from calibration.template import get_template

    H = np.asarray(truth["homography"], float)
    h, w = rgb.shape[:2]
    t = get_template(truth["template"])
    regions = list(t.readable_regions())
    through = np.asarray(regions[int(rng.integers(len(regions)))].shape.centre(), float)
    ang = float(rng.uniform(0, np.pi))
    d = np.array([np.cos(ang), np.sin(ang)])
    n = np.array([-d[1], d[0]])
    length = float(rng.uniform(110.0, 175.0))  # (a pencil half used to a new one)
    width = float(rng.uniform(6.8, 8.0))
    cone = float(rng.uniform(14.0, 22.0))
    # where along the pencil the chosen region lies: anywhere on its body
    off = float(rng.uniform(0.15, 0.85)) * length
    a = through - off * d  # the blunt end; the tip at a + length * d
    name = list(PENCIL_BODY_RGB)[int(rng.integers(len(PENCIL_BODY_RGB)))]
    body = np.array(PENCIL_BODY_RGB[name], np.float32)
    wood = np.array(PENCIL_WOOD_RGB, np.float32)
    sh_dir = float(rng.choice([-1.0, 1.0]))
    sh_off = float(rng.uniform(1.5, 4.0))
    strength = float(rng.uniform(0.25, 0.5))
    blur = 1.0 + 0.004 * max(h, w)  # (the shadow's softness, photo px)
    # the photo pixels it can touch: its outline and its shadow's, in the photo, and a margin
    reach = width / 2 + sh_off + 2.0
    corners = np.array([a + s_ * d + q_ * n for s_ in (-3.0, length + 3.0) for q_ in (-reach, reach)])
    x0, y0, x1, y1 = _photo_box(H, corners, blur, rgb.shape)
    out = rgb.copy()
    if x1 > x0 and y1 > y0:
        u, v = _template_coords(H, rgb.shape, (x0, y0, x1, y1))
        du, dv = u - a[0], v - a[1]
        s = du * d[0] + dv * d[1]  # along, mm from the blunt end
        q = du * n[0] + dv * n[1]  # across, mm from the axis
        half = np.where(s <= length - cone, width / 2,
                        np.clip((length - s) / cone, 0, 1) * width / 2)
        inside = (s >= 0) & (s <= length) & (np.abs(q) <= half)
        # the hexagon's faces seen from above: the middle face lit, the two side faces
        # darker, a specular stripe along the middle (lacquer)
        side = np.abs(q) / np.maximum(half, 1e-6)
        light = np.where(side < 0.5, 1.0, 0.62) + \
            0.35 * np.exp(-((q + 0.15 * width) / (0.06 * width)) ** 2)
        refl = np.where((s > length - cone)[..., None], wood[None, None, :], body[None, None, :])
        refl = np.where((s > length - 0.3 * cone)[..., None], body[None, None, :] * 0.8, refl)
        colour = np.clip(refl * light[..., None], 0, 1.2).astype(np.float32)
        shadow = (s >= -2) & (s <= length + 2) & (np.abs(q - sh_dir * sh_off) <= half + 1.0)
        _lay_on(rgb, out, (x0, y0, x1, y1), colour, inside, shadow, strength, blur, 0.8)
    tr = dict(truth)
    tr["variant"] = {"kind": "pencil", "colour": name,
                     "blunt_end_mm": [round(float(a[0]), 2), round(float(a[1]), 2)],
                     "angle_deg": round(float(np.degrees(ang)), 2),
                     "length_mm": round(length, 2), "width_mm": round(width, 2),
                     "cone_mm": round(cone, 2), "shadow": {"offset_mm": round(sh_off, 2),
                                                           "side": sh_dir,
                                                           "strength": round(strength, 3)}}
    return out, tr


def thumb(rgb: np.ndarray, truth: dict, rng: np.random.Generator) -> tuple[np.ndarray, dict]:
    """A thumb holding the sheet at one of its edges, over a region near that edge: a capsule
    (a rounded tip) of skin, from beyond the edge to 20-55 mm in, shaded as a cylinder, a nail
    near the tip in three photos of four, a soft shadow to one side."""
    from calibration.template import get_template

    H = np.asarray(truth["homography"], float)
    h, w = rgb.shape[:2]
    t = get_template(truth["template"])
    W_mm, H_mm = t.width_mm, t.height_mm

    def edge_of(c):  # (the nearest edge: its distance, and the inward direction)
        return min(((c[0], (1.0, 0.0)), (W_mm - c[0], (-1.0, 0.0)),
                    (c[1], (0.0, 1.0)), (H_mm - c[1], (0.0, -1.0))), key=lambda e: e[0])
    regions = list(t.readable_regions())
    near = [r for r in regions if edge_of(r.shape.centre())[0] <= 50.0] or regions
    target = np.asarray(near[int(rng.integers(len(near)))].shape.centre(), float)
    dist, inward = edge_of(target)
    tilt = float(rng.uniform(-30.0, 30.0))
    c_, s_ = np.cos(np.radians(tilt)), np.sin(np.radians(tilt))
    d = np.array([inward[0] * c_ - inward[1] * s_, inward[0] * s_ + inward[1] * c_])
    n = np.array([-d[1], d[0]])
    width = float(rng.uniform(16.0, 22.0))
    reach = float(np.clip(dist + rng.uniform(-4.0, 8.0), 20.0, 55.0))  # (in from the edge)
    # the tip's centre: along d from the edge point behind the target
    tip = target + (reach - dist) * d
    base = tip - (reach + 60.0) * d  # (it goes on off the sheet, to the hand)
    tone = SKIN_RGB[int(rng.integers(len(SKIN_RGB)))]
    skin = np.array(tone, np.float32)
    nail = rng.random() < 0.75
    sh_dir = float(rng.choice([-1.0, 1.0]))
    sh_off = float(rng.uniform(2.0, 6.0))
    strength = float(rng.uniform(0.25, 0.55))
    blur = 2.0 + 0.006 * max(h, w)
    r_ = width / 2
    corners = np.array([p + q * n for p in (base - 3 * d, tip + (r_ + 3) * d)
                        for q in (-(r_ + sh_off + 3), r_ + sh_off + 3)])
    x0, y0, x1, y1 = _photo_box(H, corners, blur, rgb.shape)
    out = rgb.copy()
    if x1 > x0 and y1 > y0:
        u, v = _template_coords(H, rgb.shape, (x0, y0, x1, y1))
        du, dv = u - tip[0], v - tip[1]
        s = du * d[0] + dv * d[1]  # along, mm from the tip's centre (negative: towards the hand)
        q = du * n[0] + dv * n[1]
        # a capsule: a round tip, straight sides behind it; rho 0 on the axis, 1 at the side
        rho = np.where(s > 0, np.hypot(s, q), np.abs(q)) / r_
        inside = rho <= 1.0
        light = 0.55 + 0.5 * np.sqrt(np.clip(1.0 - rho ** 2, 0, 1)) + \
            0.12 * np.exp(-((q + 0.25 * width) / (0.1 * width)) ** 2)
        refl = np.broadcast_to(skin, u.shape + (3,)).copy()
        if nail:  # (from 1.5 to 12 mm behind the tip, 60 % of its width, a rounded front)
            on_nail = (s <= r_ - 1.5) & (s >= r_ - 13.5) & (np.abs(q) <= 0.3 * width) & \
                (np.hypot(np.maximum(s - (r_ - 6.0), 0), q) <= 0.3 * width)
            refl[on_nail] = NAIL_RGB
        colour = np.clip(refl * light[..., None], 0, 1.2).astype(np.float32)
        qs = q - sh_dir * sh_off
        shadow = np.where(s > 0, np.hypot(s + 1.0, qs), np.abs(qs)) <= r_
        _lay_on(rgb, out, (x0, y0, x1, y1), colour, inside, shadow, strength, blur, 1.2)
    tr = dict(truth)
    tr["variant"] = {"kind": "thumb", "skin": list(tone), "nail": bool(nail),
                     "tip_mm": [round(float(tip[0]), 2), round(float(tip[1]), 2)],
                     "direction": [round(float(d[0]), 4), round(float(d[1]), 4)],
                     "width_mm": round(width, 2), "reach_mm": round(reach, 2),
                     "shadow": {"offset_mm": round(sh_off, 2), "side": sh_dir,
                                "strength": round(strength, 3)}}
    return out, tr


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--from", dest="src", required=True, help="corpus folder (photos + truth)")
    ap.add_argument("--out", required=True, help="folder to write the changed photos to")
    ap.add_argument("--kind", required=True, choices=KINDS)
    ap.add_argument("--seed", type=int, default=0, help="added to each photo's own seed")
    ap.add_argument("--every", type=int, default=1, help="take every K-th photo (default 1)")
    args = ap.parse_args(argv)
    src, out = Path(args.src), Path(args.out)
    photos = sorted(src.glob("*.jpg"))[::max(1, args.every)]
    if not photos:
        print(f"make_variants: no photos (*.jpg) in {src}.", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    change = {"mirrored": mirrored, "coffee": coffee, "pencil": pencil, "thumb": thumb}[args.kind]
    for p in photos:
        truth_p = p.with_name(p.name[:-4] + ".truth.json")
        if not truth_p.exists():
            print(f"make_variants: {p.name} has no truth file; skipped.", file=sys.stderr)
            continue
        truth = json.loads(truth_p.read_text())
        rng = np.random.default_rng([args.seed, int(truth.get("seed", 0)), KINDS.index(args.kind)])
        rgb = np.asarray(Image.open(p).convert("RGB"))
        img, truth2 = change(rgb, truth, rng)
        buf = io.BytesIO()
        Image.fromarray(img).save(buf, "JPEG", quality=92)
        (out / p.name).write_bytes(buf.getvalue())
        (out / truth_p.name).write_text(json.dumps(truth2), encoding="utf-8")
    print(f"{len(photos)} photos ({args.kind}) written to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
