#!/usr/bin/env python
"""Make photos the simulator never makes from a corpus with truth, for ``sheetcheck eval``.

    .venv/bin/python scripts/make_variants.py --from CORPUS --out DIR --kind mirrored|coffee
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

KINDS = ("mirrored", "coffee")
#: Coffee's colour on white paper where fully soaked (linear-ish RGB transmittance) and the
#: rim's extra darkness: a tea-to-espresso range of browns.
COFFEE_RGB = ((0.78, 0.58, 0.38), (0.62, 0.42, 0.26))


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


def _template_coords(H: np.ndarray, shape) -> tuple[np.ndarray, np.ndarray]:
    """Template mm of every photo pixel (the truth's homography inverted)."""
    h, w = shape[:2]
    Hi = np.linalg.inv(H)
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
    d = Hi[2, 0] * xs + Hi[2, 1] * ys + Hi[2, 2]
    u = (Hi[0, 0] * xs + Hi[0, 1] * ys + Hi[0, 2]) / d
    v = (Hi[1, 0] * xs + Hi[1, 1] * ys + Hi[1, 2]) / d
    return u, v


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
    change = {"mirrored": mirrored, "coffee": coffee}[args.kind]
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
