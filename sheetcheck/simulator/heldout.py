"""The held-out painter: a second, independent model of people colouring a score sheet.

The reader is tuned on photos of sheets painted by :mod:`sheetcheck.simulator.paint`. A reader
tuned to one painter's strokes can fail on the next one, so accuracy measured on that painter
flatters it. This module paints the same marks a different way, written from scratch (it does
not call ``paint.py``'s stroke, grain or pigment code), with its own pencil and pen sets
(``calibration/palettes/heldout.json``, none of them in ``brands.json``). It is for measuring
only: **never tune the reader on it** (docs/EVALUATION.md).

How it differs from the main painter
------------------------------------
* Paper: an anisotropic *tooth* (pressed fibres, elongated bumps at random orientations), not an
  isotropic grain.
* Pigment: a stroke lays down a *pigment load*; loads of overlapping strokes add. How deep a
  load reaches into the tooth depends on the medium's softness (soft wax fills the valleys when
  burnished, a hard lead only colours the peaks, a dry watercolour pencil leaves granules).
  Waxy pigment partly *hides* the printed ink under it (an opaque layer), so the colour is a mix
  of the body colour and the paper, not a transmittance power law. Felt-tip dye ignores the tooth
  and darkens where strokes overlap.
* Hands: circular scribbles, burnished dense fill, a few diagonal strokes that cover about half,
  stipple dots, colouring outside the lines, two passes in different directions, outlines only,
  ticks instead of fills in boxes, quick loose zigzags.
* Crossing out: a thin graphite X, a heavy X in a colour, a single slash, or a graphite
  scribble-out.
* Numbers: digits from a hand-built single-stroke digit model (not Hershey fonts).

What it promises (tested in ``tests/test_heldout.py``): it paints only where marks say. Paint
for a region is confined to that region grown by the hand's overshoot (at most 2.2 mm) and never
enters the interior (shrunk by 0.35 mm) of *another* readable region; stray marks (a pencil
rest dot, a short test stroke, a graphite smudge of the hand) land at least 2 mm away from
every readable region. So an ``empty`` region's interior is untouched.

Coordinates: template mm; the sheet image is ``[row, col]``; ``(x, y)`` px = mm * dpi / 25.4 and
pixel ``(i, j)`` has its centre at ``(j + 0.5, i + 0.5)``. OpenCV rasterisers put centres at
integers, hence the ``- 0.5`` where points are handed to them.
"""

from __future__ import annotations

import json
import math
import zlib
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import cv2
import numpy as np

from sheetcheck.simulator.paint import check_marks
from sheetcheck.simulator.presets import SimulatorError

__all__ = ["PAINTER", "HELDOUT_PATH", "FILL_STYLES", "CROSS_STYLES", "MEDIA", "load_heldout_sets",
           "sample_heldout_hand", "heldout_conditions", "paint_heldout", "split_overrides"]

PAINTER = "heldout"
HELDOUT_PATH = Path(__file__).resolve().parents[2] / "calibration" / "palettes" / "heldout.json"
COLOURS = ("orange", "red", "blue", "green", "purple")
MEDIA = ("wax", "hard", "dry_watercolour", "dye")

#: How a hand fills an area (each region picks one, biased towards the hand's favourite).
FILL_STYLES = ("circles", "burnish", "diagonal_half", "stipple", "outside", "two_pass", "outline",
               "tick", "loose")
#: How a hand crosses a region out.
CROSS_STYLES = ("thin_x", "heavy_x", "slash", "scribble_out")

_SHIFT = 3  # sub-pixel bits for cv2 rasterisers

#: Per preset: (pressure range, least coverage of a partial fill, overshoot range mm,
#: mean stray marks, pencil jitter). "hard" has lighter hands and sloppier fills.
_PRESET_HAND = {
    "easy": ((0.6, 1.0), 0.75, (0.0, 0.8), 0.4, 0.03),
    "typical": ((0.45, 1.0), 0.6, (0.0, 1.3), 1.0, 0.05),
    "hard": ((0.35, 0.9), 0.5, (0.2, 1.8), 2.0, 0.08),
}


# --------------------------------------------------------------------------------------------
# the pencil sets
# --------------------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def load_heldout_sets() -> dict:
    """The held-out pencil sets (``calibration/palettes/heldout.json``), validated.

    Raises
    ------
    SimulatorError
        naming every problem in the file.
    """
    from sheetcheck.files import read_json_file

    doc = read_json_file(HELDOUT_PATH, what="the held-out pencil sets file", error=SimulatorError,
                         hint="Restore calibration/palettes/heldout.json from the repository.")
    problems = []
    if doc.get("format") != "sheetcheck.heldout_pencils/1":
        problems.append(f"format must be 'sheetcheck.heldout_pencils/1', got {doc.get('format')!r}")
    sets = doc.get("sets")
    if not isinstance(sets, dict) or not sets:
        problems.append("'sets' must be a non-empty object")
        sets = {}

    def rgb_ok(v):
        return isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and 0 <= x <= 255 for x in v)

    for name, s in sets.items():
        if s.get("medium") not in MEDIA:
            problems.append(f"set {name!r}: medium must be one of {', '.join(MEDIA)}, got {s.get('medium')!r}")
        for k in ("softness", "hiding", "streak"):
            v = s.get(k)
            if not (isinstance(v, (int, float)) and 0 <= v <= 1):
                problems.append(f"set {name!r}: {k} must be a number 0..1, got {v!r}")
        for c in COLOURS:
            if not rgb_ok(s.get("pencils", {}).get(c)):
                problems.append(f"set {name!r}: pencil {c!r} must be [r, g, b] 0-255, "
                                f"got {s.get('pencils', {}).get(c)!r}")
        if not rgb_ok(s.get("graphite")):
            problems.append(f"set {name!r}: graphite must be [r, g, b] 0-255, got {s.get('graphite')!r}")
    if problems:
        raise SimulatorError(f"held-out pencil sets file {HELDOUT_PATH} is invalid: " + "; ".join(problems) + ".",
                             hint="Fix the file (see the description in it and docs/EVALUATION.md).")
    return doc


# --------------------------------------------------------------------------------------------
# conditions: the hand and the pencils of one photo
# --------------------------------------------------------------------------------------------

def sample_heldout_hand(rng: np.random.Generator, *, preset: str = "typical") -> dict:
    """One player's colouring habits for the held-out painter (JSON-serialisable).

    Parameters
    ----------
    rng : numpy Generator
    preset : str
        ``easy``, ``typical`` or ``hard``: lighter hands and sloppier fills on ``hard``.
    """
    pressure, cov_min, over, stray, _ = _PRESET_HAND.get(preset, _PRESET_HAND["typical"])
    # the favourite fill style; ticks and outlines are habits of some players, not the norm
    style = str(rng.choice(FILL_STYLES, p=[0.17, 0.15, 0.1, 0.08, 0.1, 0.15, 0.05, 0.06, 0.14]))
    return {
        "painter": PAINTER,
        "style": style,
        "style_loyalty": float(rng.uniform(0.45, 0.9)),
        "pressure": float(rng.uniform(*pressure)),
        # the direction the forearm sweeps; left-handers mirror it
        "angle_deg": float(rng.uniform(20, 65) * (1 if rng.random() < 0.8 else -1)),
        "tip_mm": float(rng.uniform(0.4, 0.9)),
        "spacing": float(rng.uniform(0.7, 1.4)),   # stroke spacing in tip widths
        "overshoot_mm": float(rng.uniform(*over)),
        "coverage_min": float(cov_min),
        "tremor_mm": float(rng.uniform(0.02, 0.2)),
        "tick_boxes": bool(rng.random() < 0.2),
        "cross_style": str(rng.choice(CROSS_STYLES, p=[0.35, 0.3, 0.15, 0.2])),
        "write_with": str(rng.choice(["graphite", "colour", "ballpoint"], p=[0.5, 0.3, 0.2])),
        "stray_marks": int(rng.poisson(stray)),
    }


def split_overrides(overrides: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """Split overrides into (camera/light conditions, held-out painter conditions).

    ``hand.*`` and ``pencil_brand`` / ``pencil_jitter`` belong to the painter: the main
    simulator would check them against its own hand and brands.
    """
    cam, paint = {}, {}
    for k, v in (overrides or {}).items():
        (paint if k.startswith("hand.") or k in ("pencil_brand", "pencil_jitter") else cam)[k] = v
    return cam, paint


def _streams(seed: int, template_id: str, preset: str, n: int) -> list[np.random.Generator]:
    """The held-out painter's own random streams (salted, so they share nothing with the
    main painter's; the camera of a seed is the same for both painters)."""
    key = [int(seed) & 0xFFFFFFFF, zlib.crc32(b"heldout-painter"), zlib.crc32(template_id.encode()),
           zlib.crc32(str(preset).encode())]
    return [np.random.default_rng(s) for s in np.random.SeedSequence(key).spawn(n)]


def heldout_conditions(seed: int, template_id: str, preset: str,
                       overrides: Mapping[str, Any] | None = None) -> tuple[dict, np.random.Generator]:
    """Draw the held-out painter's conditions for one photo.

    Parameters
    ----------
    seed : int
    template_id, preset : str
    overrides : dict, optional
        ``pencil_brand`` (a set of ``heldout.json``), ``pencil_jitter`` and ``hand.KEY``.

    Returns
    -------
    conditions : dict
        ``painter``, ``pencil_brand``, ``pencil_medium``, ``pencil_jitter``, ``pencils`` (the
        actual sRGB of each pencil, plus ``graphite`` and ``ballpoint``) and ``hand``.
    rng : numpy Generator
        The stream the strokes are drawn from.

    Raises
    ------
    SimulatorError
        for an unknown set, hand key or a bad value.
    """
    doc = load_heldout_sets()
    r_cond, r_pencil, r_paint = _streams(seed, template_id, preset, 3)
    names = sorted(doc["sets"])
    brand = str(names[int(r_cond.integers(len(names)))])
    jitter = _PRESET_HAND.get(preset, _PRESET_HAND["typical"])[4]
    hand = sample_heldout_hand(r_cond, preset=preset)
    hand = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in hand.items()}
    unknown = []
    for k, v in (overrides or {}).items():
        if k == "pencil_brand":
            if v not in doc["sets"]:
                raise SimulatorError(f"pencil_brand {v!r} is not a held-out set.",
                                     hint=f"Held-out sets: {', '.join(names)}.")
            brand = str(v)
        elif k == "pencil_jitter":
            jitter = _number(k, v, 0, 0.5)
        elif k.startswith("hand.") and k[5:] in hand and k != "hand.painter":
            hk = k[5:]
            hand[hk] = _hand_value(hk, v, hand[hk])
        else:
            unknown.append(k)
    if unknown:
        raise SimulatorError(f"unknown held-out painter condition(s): {', '.join(sorted(unknown))}.",
                             hint="The held-out painter takes pencil_brand, pencil_jitter and hand.<key> "
                                  f"for {', '.join(k for k in sorted(hand) if k != 'painter')}.")
    s = doc["sets"][brand]
    pencils = {}
    for c in COLOURS:
        v = np.asarray(s["pencils"][c], float) * (1 + r_pencil.normal(0, jitter, 3))
        pencils[c] = [int(x) for x in np.clip(np.round(v), 0, 255)]
    pencils["graphite"] = [int(x) for x in np.clip(np.asarray(s["graphite"]) + r_pencil.normal(0, 6), 0, 255)]
    pencils["ballpoint"] = [int(x) for x in np.clip(np.array([30, 44, 130]) + r_pencil.normal(0, 8, 3), 0, 255)]
    return ({"painter": PAINTER, "pencil_brand": brand, "pencil_medium": s["medium"],
             "pencil_jitter": jitter, "pencils": pencils, "hand": hand}, r_paint)


def _number(key, v, lo, hi) -> float:
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError:
            pass
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
        raise SimulatorError(f"condition {key!r} must be a number {lo}..{hi}, got {v!r}.")
    return float(v)


def _hand_value(key: str, v: Any, current: Any) -> Any:
    if key == "style":
        if v not in FILL_STYLES:
            raise SimulatorError(f"hand.style must be one of {', '.join(FILL_STYLES)}, got {v!r}.")
        return v
    if key == "cross_style":
        if v not in CROSS_STYLES:
            raise SimulatorError(f"hand.cross_style must be one of {', '.join(CROSS_STYLES)}, got {v!r}.")
        return v
    if key == "write_with":
        if v not in ("graphite", "colour", "ballpoint"):
            raise SimulatorError(f"hand.write_with must be graphite, colour or ballpoint, got {v!r}.")
        return v
    if isinstance(current, bool):
        if isinstance(v, str) and v.lower() in ("true", "false"):
            return v.lower() == "true"
        if not isinstance(v, bool):
            raise SimulatorError(f"hand.{key} must be true or false, got {v!r}.")
        return v
    if isinstance(current, int):
        return int(_number(f"hand.{key}", v, 0, 50))
    limits = {"pressure": (0.05, 1.0), "style_loyalty": (0, 1), "angle_deg": (-180, 180),
              "tip_mm": (0.1, 2.0), "spacing": (0.3, 4.0), "overshoot_mm": (-1.0, 2.2),
              "coverage_min": (0.1, 1.0), "tremor_mm": (0, 1.0)}
    return _number(f"hand.{key}", v, *limits.get(key, (-1e6, 1e6)))


# --------------------------------------------------------------------------------------------
# paper and colour
# --------------------------------------------------------------------------------------------

def _to_linear(c):
    c = np.asarray(c, np.float32)
    return np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4).astype(np.float32)


_LIN = _to_linear(np.arange(256) / 255.0)
_ENC = np.clip(np.round(255 * np.where(np.linspace(0, 1, 8192) <= 0.0031308, np.linspace(0, 1, 8192) * 12.92,
                                       1.055 * np.linspace(0, 1, 8192) ** (1 / 2.4) - 0.055)), 0, 255).astype(np.uint8)


def _encode(lin: np.ndarray) -> np.ndarray:
    return _ENC[(np.clip(lin, 0, 1) * 8191 + 0.5).astype(np.uint16)]


def paper_tooth(shape: tuple[int, int], *, dpi: float, rng: np.random.Generator) -> np.ndarray:
    """Height of the paper's tooth in [0, 1], ``shape`` (H, W).

    Office paper is pressed fibres: bumps about 0.05-0.2 mm across, elongated along the fibres
    in a few directions. Built at low resolution where the page is rendered fine (the tooth is a
    property of the paper, not of the render), then upsampled.
    """
    h, w = shape
    px_mm = dpi / 25.4
    # work at ~12 px/mm at most: finer renders get the same tooth, upsampled
    k = max(1.0, px_mm / 12.0)
    sh, sw = max(2, int(math.ceil(h / k))), max(2, int(math.ceil(w / k)))
    f = min(px_mm, 12.0)
    acc = np.zeros((sh, sw), np.float32)
    for ang in rng.uniform(0, 180, 3):
        n = rng.standard_normal((sh, sw)).astype(np.float32)
        ln = max(3, int(round(0.25 * f)) | 1)
        ker = np.zeros((ln, ln), np.float32)
        c = ln // 2
        dx, dy = math.cos(math.radians(ang)), math.sin(math.radians(ang))
        cv2.line(ker, (int(round(c - dx * c)), int(round(c - dy * c))),
                 (int(round(c + dx * c)), int(round(c + dy * c))), 1.0, 1)
        ker /= ker.sum()
        acc += cv2.filter2D(n, -1, ker, borderType=cv2.BORDER_REFLECT)
    acc += 0.8 * cv2.GaussianBlur(rng.standard_normal((sh, sw)).astype(np.float32), (0, 0), max(0.5, 0.04 * f))
    acc -= acc.mean()
    acc /= acc.std() + 1e-6
    if k > 1:
        acc = cv2.resize(acc, (w, h), interpolation=cv2.INTER_CUBIC)
    else:
        acc = acc[:h, :w]
    # a logistic squash: most texels mid-height, few deep valleys or high peaks
    return (1 / (1 + np.exp(-1.3 * acc))).astype(np.float32)


# --------------------------------------------------------------------------------------------
# stroke paths (all in sheet px)
# --------------------------------------------------------------------------------------------

class _Stroke:
    """A path (N, 2) px, the pressure along it (N,), and the tip width in px."""

    __slots__ = ("pts", "pressure", "width")

    def __init__(self, pts, pressure, width):
        self.pts = np.asarray(pts, float)
        self.pressure = np.asarray(pressure, float)
        self.width = float(width)


def _jitter_path(pts: np.ndarray, *, tremor_px: float, rng) -> np.ndarray:
    """Hand tremor: a smooth random offset (correlated over ~8 samples) added to a path."""
    n = len(pts)
    if n < 2 or tremor_px <= 0:
        return pts
    k = max(2, n // 8 + 2)
    knots = rng.normal(0, tremor_px, (k, 2))
    t = np.linspace(0, k - 1, n)
    off = np.stack([np.interp(t, np.arange(k), knots[:, 0]), np.interp(t, np.arange(k), knots[:, 1])], 1)
    return pts + off


def _densify(pts: np.ndarray, step: float) -> np.ndarray:
    """Resample a polyline so consecutive points are at most ``step`` px apart."""
    out = [pts[:1]]
    for a, b in zip(pts[:-1], pts[1:]):
        n = max(1, int(math.ceil(np.hypot(*(b - a)) / max(step, 0.5))))
        t = np.linspace(0, 1, n + 1)[1:, None]
        out.append(a + t * (b - a))
    return np.concatenate(out)


def _pressure(n: int, base: float, rng, *, streak: float) -> np.ndarray:
    """Pressure along a stroke: a quick attack, a fading lift-off, slow drift, and for
    gritty leads a fast flicker (streaks along the stroke)."""
    t = np.linspace(0, 1, n)
    attack = np.clip(t / rng.uniform(0.02, 0.1), 0, 1) ** 0.5
    lift = np.clip((1 - t) / rng.uniform(0.1, 0.3), 0, 1)
    drift = 1 + 0.18 * np.sin(2 * np.pi * (t * rng.uniform(0.5, 2) + rng.random()))
    flicker = 1 - streak * 0.6 * rng.random(n) ** 2
    return np.clip(base * np.maximum(attack * lift, 0.25) * drift * flicker, 0.03, 1.0)


def _hatch_lines(poly: np.ndarray, angle: float, spacing: float, *, extend: float = 0.0):
    """Parallel chords of the polygon ``poly`` at ``angle`` (rad), ``spacing`` px apart, each
    extended by ``extend`` px at both ends. Computed exactly by polygon-line intersection."""
    u = np.array([math.cos(angle), math.sin(angle)])
    nrm = np.array([-u[1], u[0]])
    on = poly @ nrm
    along = poly @ u
    chords = []
    lo, hi = on.min(), on.max()
    offs = np.arange(lo + spacing * 0.5, hi, spacing) if hi - lo > spacing else np.array([(lo + hi) / 2])
    m = len(poly)
    for o in offs:
        ts = []
        for i in range(m):
            a, b = on[i] - o, on[(i + 1) % m] - o
            if (a <= 0 < b) or (b <= 0 < a):
                f = a / (a - b)
                ts.append(along[i] + f * (along[(i + 1) % m] - along[i]))
        if len(ts) < 2:
            continue
        t0, t1 = min(ts) - extend, max(ts) + extend
        chords.append((t0 * u + o * nrm, t1 * u + o * nrm))
    return chords


def _fill_paths(poly: np.ndarray, style: str, *, hand: dict, s: float, rng,
                medium_streak: float) -> list[_Stroke]:
    """Strokes that fill ``poly`` (px) in ``style``."""
    tip = max(1.0, hand["tip_mm"] * s * rng.uniform(0.85, 1.15))
    base = float(np.clip(hand["pressure"] * rng.uniform(0.85, 1.12), 0.1, 1.0))
    ang = math.radians(hand["angle_deg"] + rng.normal(0, 10))
    over = max(0.0, hand["overshoot_mm"] + rng.normal(0, 0.3)) * s
    trem = hand["tremor_mm"] * s
    size = float(np.max(poly.max(0) - poly.min(0)))
    out: list[_Stroke] = []

    def add(path, p=base, w=tip):
        path = _jitter_path(_densify(np.asarray(path, float), max(1.0, tip)), tremor_px=trem, rng=rng)
        out.append(_Stroke(path, _pressure(len(path), p, rng, streak=medium_streak), w))

    def hatch(angle, spacing, p, extend, keep=1.0, zig=False):
        chords = _hatch_lines(poly, angle, spacing, extend=extend)
        if not chords:
            return
        n = max(1, int(round(len(chords) * keep)))
        st = int(rng.integers(0, len(chords) - n + 1))
        chords = chords[st:st + n]
        if zig:
            path = []
            for k, (a, b) in enumerate(chords):
                path += [b, a] if k % 2 else [a, b]
            add(path, p)
        else:
            for a, b in chords:
                add([a, b], p * rng.uniform(0.85, 1.1))

    # a careless player leaves a band uncoloured; the stylised marks below never do
    keep = 1.0 if rng.random() < 0.6 else float(rng.uniform(hand["coverage_min"], 1.0))
    if style == "circles":
        # small overlapping loops travelling along rows: the classic child's scribble
        r = max(tip, rng.uniform(0.6, 1.3) * s)
        rows = _hatch_lines(poly, ang, r * rng.uniform(1.1, 1.5), extend=-0.5 * r)
        path = []
        for k, (a, b) in enumerate(rows):
            if k % 2:
                a, b = b, a
            ln = float(np.hypot(*(b - a)))
            loops = max(1.0, ln / (0.8 * r))  # each loop moves on by 0.8 r: they overlap
            n = int(loops * 16) + 2
            t = np.linspace(0, 1, n)
            th = t * loops * 2 * math.pi
            loop = np.stack([np.cos(th), np.sin(th)], 1) * r
            path.append(a + t[:, None] * (b - a) + loop)
        if path:
            add(np.concatenate(path), base)
    elif style == "burnish":
        # dense strokes, then a second dense layer across, hard pressure: a solid waxy film
        hatch(ang, tip * 0.55, min(1.0, base * 1.25), 0.2 * s, keep=1.0, zig=True)
        hatch(ang + math.pi / 2 + rng.normal(0, 0.2), tip * 0.6, min(1.0, base * 1.2), 0.2 * s, zig=True)
    elif style == "diagonal_half":
        # a few firm diagonal strokes with gaps as wide as the strokes: covers about half
        w = max(tip, rng.uniform(0.7, 1.1) * s)
        chords = _hatch_lines(poly, math.radians(45 * (1 if hand["angle_deg"] >= 0 else -1)) + rng.normal(0, 0.1),
                              w * rng.uniform(1.8, 2.2), extend=over)
        for a, b in chords:
            path = _jitter_path(_densify(np.array([a, b]), max(1.0, w)), tremor_px=trem, rng=rng)
            out.append(_Stroke(path, _pressure(len(path), min(1.0, base * 1.2), rng, streak=medium_streak), w))
    elif style == "stipple":
        # dots pressed with the tip until the region reads as coloured (~60-80 % covered)
        area = abs(_area(poly))
        dot = max(tip, 0.6 * s)
        n = int(area / (dot * dot) * rng.uniform(1.6, 2.2)) + 3
        lo, hi = poly.min(0), poly.max(0)
        pts = rng.uniform(lo, hi, (n * 2, 2))
        pts = pts[_inside(poly, pts)][:n]
        for p in pts:
            d = rng.normal(0, 0.08 * s, 2)
            out.append(_Stroke(np.array([p, p + d]), np.full(2, min(1.0, base * rng.uniform(0.9, 1.3))), dot))
    elif style == "outside":
        # colouring well past the outline (neighbours are protected by the region mask)
        hatch(ang, tip * hand["spacing"], base, max(over, 0.8 * s) + rng.uniform(0.2, 0.8) * s, keep=keep, zig=True)
    elif style == "two_pass":
        hatch(ang, tip * hand["spacing"] * 1.3, base, over, keep=1.0)
        hatch(ang + math.radians(rng.uniform(40, 100)), tip * hand["spacing"] * 1.5, base * 0.8, over, keep=keep)
    elif style == "outline":
        # only the edge coloured, a broad band inside the printed border round an uncoloured
        # middle: a band much wider than any printed outline, so it reads as a mark, not print
        w = max(tip, 0.2 * size, rng.uniform(1.0, 1.4) * s)
        ring = _shrink(poly, 0.5 * w)
        for _ in range(1 + int(rng.random() < 0.6)):
            rr = np.concatenate([ring, ring[:2]]) + rng.normal(0, 0.15 * s, 2)
            path = _jitter_path(_densify(rr, max(1.0, w)), tremor_px=trem, rng=rng)
            out.append(_Stroke(path, _pressure(len(path), min(1.0, base * 1.2), rng, streak=medium_streak), w))
    elif style == "tick":
        # a check mark: a short stroke down-right then a long one up-right, firm and wide
        x0, y0 = poly.min(0)
        x1, y1 = poly.max(0)
        w = max(tip, rng.uniform(0.7, 1.1) * s)
        pts = np.array([[x0 + 0.15 * (x1 - x0), y0 + 0.5 * (y1 - y0)],
                        [x0 + 0.42 * (x1 - x0), y0 + 0.85 * (y1 - y0)],
                        [x0 + 0.95 * (x1 - x0) + rng.uniform(0, 0.6) * s, y0 + 0.05 * (y1 - y0)]])
        pts += rng.normal(0, 0.04 * size, pts.shape)
        path = _jitter_path(_densify(pts, max(1.0, w)), tremor_px=trem, rng=rng)
        out.append(_Stroke(path, _pressure(len(path), min(1.0, base * 1.3), rng, streak=medium_streak), w))
    else:  # loose: a fast zigzag, steep, with uneven spacing
        chords = _hatch_lines(poly, ang + math.radians(rng.uniform(20, 50)), tip * hand["spacing"] * 1.2,
                              extend=over * 0.5)
        if chords:
            n = max(1, int(round(len(chords) * keep)))
            st = int(rng.integers(0, len(chords) - n + 1))
            path = []
            for k, (a, b) in enumerate(chords[st:st + n]):
                jit = rng.normal(0, 0.25 * tip, 2)
                path += [b + jit, a + jit] if k % 2 else [a + jit, b + jit]
            add(path, base)
    return out


def _area(poly):
    x, y = poly[:, 0], poly[:, 1]
    return 0.5 * float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _inside(poly: np.ndarray, pts: np.ndarray) -> np.ndarray:
    """Even-odd point-in-polygon test for (N, 2) points."""
    x, y = pts[:, 0][:, None], pts[:, 1][:, None]
    xa, ya = poly[:, 0][None], poly[:, 1][None]
    xb, yb = np.roll(poly[:, 0], -1)[None], np.roll(poly[:, 1], -1)[None]
    cross = ((ya > y) != (yb > y)) & (x < (xb - xa) * (y - ya) / np.where(yb - ya == 0, 1e-12, yb - ya) + xa)
    return cross.sum(1) % 2 == 1


def _shrink(poly: np.ndarray, d: float) -> np.ndarray:
    """The polygon pulled towards its centre by about ``d`` px (enough for convex-ish shapes)."""
    c = poly.mean(0)
    v = poly - c
    ln = np.maximum(np.hypot(v[:, 0], v[:, 1]), 1e-6)
    return c + v * (np.maximum(ln - d, 0.3 * ln) / ln)[:, None]


def _line_paths(region, *, hand: dict, s: float, rng, medium_streak: float) -> list[_Stroke]:
    """A connection: one firm line, a line gone over twice, sketchy dashes, or a wavy line."""
    p = region.shape.params
    a, b = np.asarray(p["p1"], float) * s, np.asarray(p["p2"], float) * s
    d = b - a
    ln = float(np.hypot(*d)) or 1.0
    u, nrm = d / ln, np.array([-d[1], d[0]]) / ln
    # a line that joins two spaces is drawn with intent: firm, and wider than a hatching stroke
    tip = max(1.0, max(0.6, hand["tip_mm"]) * s * rng.uniform(1.0, 1.4))
    base = min(1.0, max(0.7, hand["pressure"]) * rng.uniform(1.0, 1.2))
    off = rng.normal(0, 0.1) * p["width"] * s
    kind = str(rng.choice(["firm", "twice", "sketchy", "wavy"], p=[0.4, 0.25, 0.2, 0.15]))
    ext = lambda: rng.uniform(0.0, 0.25) * ln  # noqa: E731 - lines run on into the circles a bit
    out = []
    if kind == "sketchy":
        t = 0.0 - 0.1
        while t < 1.1:
            dt = rng.uniform(0.25, 0.45)
            pa = a + u * ln * t + nrm * (off + rng.normal(0, 0.2 * s))
            pb = a + u * ln * min(1.1, t + dt) + nrm * (off + rng.normal(0, 0.2 * s))
            path = _densify(np.array([pa, pb]), tip)
            out.append(_Stroke(path, _pressure(len(path), base, rng, streak=medium_streak), tip))
            t += dt * rng.uniform(0.7, 0.95)  # dashes overlap: still one line to the eye
        return out
    for k in range(2 if kind == "twice" else 1):
        pa = a - u * ext() + nrm * (off + k * rng.normal(0, 0.25 * s))
        pb = b + u * ext() + nrm * (off + k * rng.normal(0, 0.25 * s))
        path = _densify(np.array([pa, pb]), tip)
        if kind == "wavy":
            t = np.linspace(0, 1, len(path))
            path = path + np.outer(np.sin(t * ln / (rng.uniform(1.5, 3) * s) * 2 * np.pi) * 0.35 * s, nrm)
        path = _jitter_path(path, tremor_px=hand["tremor_mm"] * s, rng=rng)
        out.append(_Stroke(path, _pressure(len(path), base, rng, streak=medium_streak), tip))
    return out


def _cross_paths(region, style: str, *, hand: dict, s: float, rng) -> list[_Stroke]:
    """A region crossed out in ``style`` (thin_x, heavy_x, slash, scribble_out)."""
    x0, y0, x1, y1 = np.array(region.shape.bbox()) * s
    c = np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    hw, hh = (x1 - x0) / 2, (y1 - y0) / 2
    if region.shape.type == "segment":
        # a connection: a short X over its middle
        hw = hh = 0.5 * region.shape.params["width"] * s
    trem = hand["tremor_mm"] * s
    reach = rng.uniform(0.8, 1.05)
    if style == "scribble_out":
        w = max(1.0, rng.uniform(0.4, 0.6) * s)
        if region.shape.type == "segment":
            poly = np.array([c + [-hw, -hh], c + [hw, -hh], c + [hw, hh], c + [-hw, hh]])
        else:
            poly = region.shape.polygon(segments=32) * s
        chords = _hatch_lines(poly, math.radians(rng.uniform(60, 80) * rng.choice([-1, 1])), w * 1.1,
                              extend=0.3 * s)
        path = []
        for k, (a, b) in enumerate(chords):
            path += [b, a] if k % 2 else [a, b]
        if not path:
            return []
        path = _jitter_path(_densify(np.array(path), w), tremor_px=trem, rng=rng)
        return [_Stroke(path, _pressure(len(path), rng.uniform(0.7, 1.0), rng, streak=0.2), w)]
    if style == "thin_x":
        w, p = max(1.0, rng.uniform(0.35, 0.55) * s), rng.uniform(0.7, 0.95)
    elif style == "heavy_x":
        w, p = max(1.0, rng.uniform(0.9, 1.4) * s), rng.uniform(0.85, 1.0)
    else:  # slash
        w, p = max(1.0, rng.uniform(0.6, 1.1) * s), rng.uniform(0.75, 1.0)
    diags = [((-1, 1), (1, -1))] if style == "slash" else [((-1, -1), (1, 1)), ((1, -1), (-1, 1))]
    out = []
    for sa, sb in diags:
        pa = c + np.array(sa) * [hw, hh] * reach + rng.normal(0, 0.4 * s, 2)
        pb = c + np.array(sb) * [hw, hh] * reach + rng.normal(0, 0.4 * s, 2)
        path = _jitter_path(_densify(np.array([pa, pb]), w), tremor_px=trem, rng=rng)
        out.append(_Stroke(path, _pressure(len(path), p, rng, streak=0.1), w))
        if style == "heavy_x" and rng.random() < 0.5:  # gone over again
            out.append(_Stroke(path + rng.normal(0, 0.2 * s, 2), _pressure(len(path), p, rng, streak=0.1), w))
    return out


#: Single-stroke digits in a unit cell (x 0..1, y 0..1.5, y down), as a person writes them.
_DIGITS = {
    "0": [[(0.5, 0), (0.1, 0.3), (0.05, 0.75), (0.15, 1.25), (0.5, 1.5), (0.85, 1.25), (0.95, 0.75),
           (0.9, 0.3), (0.5, 0), (0.42, 0.05)]],
    "1": [[(0.2, 0.35), (0.55, 0), (0.55, 1.5)]],
    "2": [[(0.1, 0.3), (0.35, 0.02), (0.7, 0.02), (0.9, 0.3), (0.8, 0.65), (0.05, 1.5), (0.95, 1.48)]],
    "3": [[(0.1, 0.15), (0.5, 0), (0.85, 0.2), (0.8, 0.55), (0.4, 0.72), (0.85, 0.9), (0.9, 1.25),
           (0.5, 1.5), (0.08, 1.35)]],
    "4": [[(0.7, 1.5), (0.7, 0), (0.05, 1.05), (0.98, 1.05)]],
    "5": [[(0.9, 0.02), (0.2, 0.02), (0.12, 0.7), (0.5, 0.6), (0.88, 0.8), (0.9, 1.25), (0.5, 1.5),
           (0.08, 1.35)]],
    "6": [[(0.8, 0.05), (0.35, 0.25), (0.1, 0.8), (0.2, 1.35), (0.55, 1.5), (0.88, 1.2), (0.8, 0.8),
           (0.45, 0.72), (0.12, 0.95)]],
    "7": [[(0.05, 0.02), (0.95, 0.02), (0.4, 1.5)]],
    "8": [[(0.5, 0.7), (0.15, 0.45), (0.25, 0.08), (0.55, 0), (0.82, 0.2), (0.75, 0.5), (0.5, 0.7),
           (0.12, 1.0), (0.2, 1.4), (0.55, 1.5), (0.9, 1.2), (0.8, 0.9), (0.5, 0.7)]],
    "9": [[(0.88, 0.55), (0.5, 0.72), (0.15, 0.5), (0.2, 0.12), (0.55, 0), (0.88, 0.25), (0.88, 0.8),
           (0.7, 1.5)]],
}


def _digit_paths(region, text: str, *, hand: dict, s: float, rng) -> list[_Stroke]:
    """A number written into a field, digit by digit, each with its own size and lean."""
    x0, y0, x1, y1 = np.array(region.shape.bbox()) * s
    h = (y1 - y0) * rng.uniform(0.5, 0.8)
    cw = h / 1.5 * rng.uniform(0.75, 0.95)
    gap = cw * rng.uniform(0.25, 0.45)
    total = len(text) * cw + (len(text) - 1) * gap
    if total > (x1 - x0) * 0.95:  # squeeze a long number into the field
        k = (x1 - x0) * 0.95 / total
        cw, gap, h, total = cw * k, gap * k, h * k, total * k
    lean = rng.normal(0.18, 0.1)
    x = (x0 + x1) / 2 - total / 2 + rng.normal(0, 0.05) * (x1 - x0)
    ybase = (y0 + y1) / 2 - h / 2 + rng.normal(0, 0.05) * (y1 - y0)
    # numbers are written to be read: a firm line, whatever the hand's colouring pressure
    w = max(1.0, rng.uniform(0.4, 0.6) * s)
    press = min(1.0, max(0.8, hand["pressure"] * 1.2))
    out = []
    for ch in text:
        sc = rng.uniform(0.9, 1.1)
        dy = rng.normal(0, 0.05) * h
        for stroke in _DIGITS.get(ch, []):
            q = np.asarray(stroke, float)
            px = x + q[:, 0] * cw * sc + (1.5 - q[:, 1]) * lean * h / 1.5
            py = ybase + dy + q[:, 1] * h / 1.5 * sc
            path = _jitter_path(_densify(np.stack([px, py], 1), w), tremor_px=0.05 * s, rng=rng)
            out.append(_Stroke(path, _pressure(len(path), press, rng, streak=0.1), w))
        x += cw + gap
    return out


# --------------------------------------------------------------------------------------------
# rasterising and laying down pigment
# --------------------------------------------------------------------------------------------

def _load_map(strokes: list[_Stroke], box: tuple[int, int, int, int]) -> np.ndarray:
    """Pigment load of ``strokes`` on the patch ``box`` = (x0, y0, w, h): each stroke's pressure
    rasterised with a soft round tip; overlapping strokes add their loads."""
    x0, y0, w, h = box
    load = np.zeros((h, w), np.float32)
    one = np.zeros((h, w), np.float32)
    for st in strokes:
        one[:] = 0
        q = np.round((st.pts - [x0 + 0.5, y0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
        th = max(1, int(round(st.width * 0.8)))
        pr = st.pressure
        for k in range(len(q) - 1):
            # max, not add, within one stroke: a stroke does not darken where it bends back
            cv2.line(one, tuple(map(int, q[k])), tuple(map(int, q[k + 1])),
                     float(0.5 * (pr[k] + pr[k + 1])), th, cv2.LINE_8, _SHIFT)
        if len(q) == 1 or np.all(q[0] == q[-1]):
            cv2.circle(one, tuple(map(int, q[0])), max(1, int(st.width / 2 * (1 << _SHIFT))),
                       float(pr[0]), -1, cv2.LINE_8, _SHIFT)
        # the tip is round and soft-edged
        sig = max(0.35, 0.18 * st.width)
        load += cv2.GaussianBlur(one, (0, 0), sig)
    return load


def _deposit(lin: np.ndarray, tooth: np.ndarray, load: np.ndarray, allowed: np.ndarray,
             box: tuple[int, int, int, int], colour_lin: np.ndarray, pset: Mapping, rng,
             *, px_per_mm: float, granules: bool = True) -> None:
    """Lay pigment of ``load`` onto the linear sheet ``lin`` (in place), only where ``allowed``.

    A texel takes pigment where the tooth stands higher than the depth the lead reaches. At a
    coarse render a pixel spans several tooth bumps, so the step is softened: the pixel gets the
    share of its area the lead reaches, not all or nothing.
    """
    x0, y0, w, h = box
    H, W = lin.shape[:2]
    xa, ya, xb, yb = max(0, x0), max(0, y0), min(W, x0 + w), min(H, y0 + h)
    if xa >= xb or ya >= yb:
        return
    L = load[ya - y0:yb - y0, xa - x0:xb - x0] * allowed[ya - y0:yb - y0, xa - x0:xb - x0]
    if not L.any():
        return
    t = tooth[ya:yb, xa:xb]
    patch = lin[ya:yb, xa:xb]
    medium = pset["medium"]
    if medium == "dye":
        # ink soaks in regardless of the tooth; where strokes overlap it is laid twice: darker
        cov = 1 - np.exp(-4.0 * L)
        strength = np.clip(L, 0, 2.2) ** 0.6
        patch *= 1 - cov[..., None] + cov[..., None] * np.power(colour_lin[None, None], strength[..., None])
        return
    soft = float(pset["softness"])
    # how deep the lead reaches into the tooth: more load (pressure, layers) reaches deeper
    reach = 1 - np.exp(-2.2 * soft * L)
    edge = 0.07 + 0.25 * float(np.clip(1 - px_per_mm / 12.0, 0, 1))
    d = 1 / (1 + np.exp(-(t - (1 - reach)) / edge))
    d *= np.clip(L * 2.5, 0, 1)  # the soft edge of the tip
    if medium == "dry_watercolour" and granules:
        # pigment granules: clumps a few texels across, some bare paper in between
        g = rng.random(d.shape, dtype=np.float32)
        g = cv2.GaussianBlur(g, (0, 0), 0.8)
        d *= np.clip(0.55 + 3.0 * (g - 0.5), 0.3, 1.0)
    hid = float(pset["hiding"])
    d3 = d[..., None]
    # an opaque-ish layer: body colour hides part of what is under it, the rest shows through
    patch[:] = (1 - d3) * patch + d3 * colour_lin[None, None] * (hid + (1 - hid) * patch)


def _allowed_mask(region, box, s: float, grow_mm: float, others) -> np.ndarray:
    """Where a region's paint may land in patch ``box``: the region grown by ``grow_mm``, less
    the shrunk interiors of the other readable regions that reach into the patch."""
    x0, y0, w, h = box
    m = np.zeros((h, w), np.uint8)
    poly = region.shape.polygon(segments=48) * s
    q = np.round((poly - [x0 + 0.5, y0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
    cv2.fillPoly(m, [q], 1, cv2.LINE_8, _SHIFT)
    if region.shape.type == "segment":
        # a line is drawn on into the circles it joins
        p = region.shape.params
        a, b = np.asarray(p["p1"], float) * s, np.asarray(p["p2"], float) * s
        d = (b - a) / (np.hypot(*(b - a)) or 1.0)
        ext = 0.3 * np.hypot(*(b - a))
        cv2.line(m, tuple(map(int, np.round((a - d * ext - [x0 + 0.5, y0 + 0.5]) * 8))),
                 tuple(map(int, np.round((b + d * ext - [x0 + 0.5, y0 + 0.5]) * 8))), 1,
                 max(1, int(p["width"] * s)), cv2.LINE_8, 3)
    g = int(round(max(0.0, grow_mm) * s))
    if g > 0:
        m = cv2.dilate(m, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * g + 1, 2 * g + 1)))
    keep = max(1, int(round(0.35 * s)))
    for o in others:
        if o is region:
            continue
        bx0, by0, bx1, by1 = np.array(o.shape.bbox()) * s
        if bx1 < x0 or by1 < y0 or bx0 > x0 + w or by0 > y0 + h:
            continue
        om = np.zeros((h, w), np.uint8)
        oq = np.round((o.shape.polygon(segments=48) * s - [x0 + 0.5, y0 + 0.5]) * (1 << _SHIFT)).astype(np.int32)
        cv2.fillPoly(om, [oq], 1, cv2.LINE_8, _SHIFT)
        om = cv2.erode(om, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * keep + 1, 2 * keep + 1)))
        m[om > 0] = 0
    return m.astype(np.float32)


def _box_of(strokes: list[_Stroke], region, s: float, pad_mm: float) -> tuple[int, int, int, int]:
    pts = [st.pts for st in strokes] + [region.shape.polygon(segments=16) * s]
    allp = np.concatenate(pts)
    wmax = max((st.width for st in strokes), default=1.0)
    pad = pad_mm * s + 2 * wmax + 4
    x0, y0 = np.floor(allp.min(0) - pad).astype(int)
    x1, y1 = np.ceil(allp.max(0) + pad).astype(int)
    return int(x0), int(y0), int(x1 - x0), int(y1 - y0)


def paint_heldout(sheet_rgb: np.ndarray, template, marks: Mapping[str, str], *, dpi: float,
                  rng: np.random.Generator, pencils: Mapping[str, list], hand: Mapping[str, Any],
                  pencil_set: Mapping[str, Any]) -> np.ndarray:
    """Colour ``marks`` on a flat rendered sheet the held-out way.

    Parameters
    ----------
    sheet_rgb : (H, W, 3) uint8 ndarray
        The printed sheet rendered at ``dpi`` in the template frame (not modified).
    template : calibration.template.Template
    marks : dict
        ``{region_id: mark}``; ``empty`` regions are left alone.
    dpi : float
    rng : numpy Generator
    pencils : dict
        sRGB (0-255) of each colour plus ``graphite`` and ``ballpoint``.
    hand : dict
        From :func:`sample_heldout_hand`.
    pencil_set : dict
        The set's entry in ``heldout.json`` (``medium``, ``softness``, ``hiding``, ``streak``).

    Returns
    -------
    (H, W, 3) uint8 ndarray
    """
    sheet_rgb = np.asarray(sheet_rgb)
    if sheet_rgb.ndim != 3 or sheet_rgb.shape[2] != 3 or sheet_rgb.dtype != np.uint8:
        raise ValueError(f"sheet_rgb must be an (H, W, 3) uint8 array, got {sheet_rgb.shape} {sheet_rgb.dtype}")
    check_marks(template, marks)
    s = dpi / 25.4
    H, W = sheet_rgb.shape[:2]
    lin = _LIN[sheet_rgb]
    tooth = paper_tooth((H, W), dpi=dpi, rng=rng)
    plin = {k: _to_linear(np.asarray(v, np.float32) / 255.0) for k, v in pencils.items()}
    readable = list(template.readable_regions())
    graphite_set = {"medium": "hard", "softness": 0.6, "hiding": 0.3, "streak": 0.2}
    ink_set = {"medium": "dye", "softness": 1.0, "hiding": 0.0, "streak": 0.0}
    streak = float(pencil_set["streak"])
    for region in readable:
        mark = marks.get(region.id, "empty")
        if mark == "empty":
            continue
        pset, grow = pencil_set, 0.35
        if mark == "crossed":
            style = hand["cross_style"] if rng.random() < 0.75 else str(rng.choice(CROSS_STYLES))
            strokes = _cross_paths(region, style, hand=hand, s=s, rng=rng)
            if style in ("thin_x", "scribble_out"):
                colour, pset = plin["graphite"], graphite_set
            else:
                colour = plin[str(rng.choice(COLOURS))]
            grow = 1.2
        elif mark == "written":
            text = str(int(rng.choice([rng.integers(0, 10), rng.integers(10, 100), rng.integers(100, 200)])))
            strokes = _digit_paths(region, text, hand=hand, s=s, rng=rng)
            ww = hand["write_with"]
            if ww == "ballpoint":
                colour, pset = plin["ballpoint"], ink_set
            elif ww == "colour":
                colour = plin[str(rng.choice(COLOURS))]
            else:
                colour, pset = plin["graphite"], {**graphite_set, "softness": 0.85}
            grow = 0.8
        elif region.shape.type == "segment":
            strokes = _line_paths(region, hand=hand, s=s, rng=rng, medium_streak=streak)
            colour = plin[mark]
            grow = 0.6
        else:
            style = hand["style"] if rng.random() < hand["style_loyalty"] else str(rng.choice(FILL_STYLES))
            # ticks are for boxes; a hand that ticks does so in every box it can
            if region.kind == "box" and hand["tick_boxes"]:
                style = "tick"
            if style == "tick" and region.kind != "box":
                style = "two_pass"
            if region.kind == "swatch" and style in ("outline", "stipple", "diagonal_half"):
                style = "burnish"  # a calibration swatch is coloured in properly
            if style == "outline" and region.kind not in ("box", "star"):
                # both games print symbols and spaces with coloured outlines: a pencil band
                # round one would look like the print itself, and no person could tell it was
                # marked; boxes and stars are printed in black only
                style = "two_pass"
            strokes = _fill_paths(region.shape.polygon(segments=48) * s, style, hand=hand, s=s, rng=rng,
                                  medium_streak=streak)
            colour = plin[mark]
            grow = {"outside": 2.2, "tick": 1.6, "diagonal_half": 1.0}.get(style, 0.35 + max(0.0, hand["overshoot_mm"]))
            grow = min(grow, 2.2)
        if not strokes:
            continue
        box = _box_of(strokes, region, s, grow)
        load = _load_map(strokes, box)
        allowed = _allowed_mask(region, box, s, grow, readable)
        # each region's pencil shade varies a little (pressure, wax, which end of the pencil)
        shade = np.clip(colour * np.clip(1 + rng.normal(0, 0.05, 3), 0.85, 1.15), 0, 1).astype(np.float32)
        _deposit(lin, tooth, load, allowed, box, shade, pset, rng, px_per_mm=s)
    _stray(lin, tooth, template, hand=hand, s=s, rng=rng, plin=plin, pencil_set=pencil_set)
    return _encode(lin)


def _stray(lin, tooth, template, *, hand, s, rng, plin, pencil_set) -> None:
    """Documented stray marks, all at least 2 mm clear of every readable region: a pencil rest
    dot, a short test stroke in a colour, a graphite smudge left by the side of the hand."""
    n = int(hand["stray_marks"])
    if n <= 0:
        return
    boxes = np.array([r.shape.bbox() for r in template.readable_regions()] or [[0, 0, 0, 0]]) + [-2, -2, 2, 2]
    pw, ph = template.width_mm, template.height_mm
    for _ in range(n):
        kind = str(rng.choice(["dot", "test", "smudge"], p=[0.35, 0.35, 0.3]))
        size = {"dot": 0.8, "test": rng.uniform(3, 9), "smudge": rng.uniform(6, 14)}[kind]
        for _try in range(40):
            c = rng.uniform([10, 10], [pw - 10, ph - 10])
            lo, hi = c - size / 2 - 1, c + size / 2 + 1
            if not ((boxes[:, 0] < hi[0]) & (boxes[:, 2] > lo[0]) & (boxes[:, 1] < hi[1]) & (boxes[:, 3] > lo[1])).any():
                break
        else:
            continue
        ang = rng.uniform(0, math.pi)
        u = np.array([math.cos(ang), math.sin(ang)])
        if kind == "smudge":
            r = size * s / 2
            box = (int(c[0] * s - r - 4), int(c[1] * s - r - 4), int(2 * r + 8), int(2 * r + 8))
            load = np.zeros((box[3], box[2]), np.float32)
            cv2.ellipse(load, (box[2] // 2, box[3] // 2), (max(1, int(r)), max(1, int(r * rng.uniform(0.2, 0.45)))),
                        math.degrees(ang), 0, 360, float(rng.uniform(0.15, 0.3)), -1)
            load = cv2.GaussianBlur(load, (0, 0), max(1.0, r / 3))
            _deposit(lin, tooth, load, np.ones_like(load), box, plin["graphite"],
                     {"medium": "wax", "softness": 0.9, "hiding": 0.2, "streak": 0.0}, rng, px_per_mm=s)
            continue
        colour = plin["graphite"] if kind == "dot" or rng.random() < 0.3 else plin[str(rng.choice(COLOURS))]
        a, b = c * s - u * size * s / 2, c * s + u * size * s / 2
        path = _densify(np.array([a, b]), 1.0) if kind == "test" else np.array([c * s, c * s])
        st = _Stroke(path, _pressure(len(path), hand["pressure"] * 0.8, rng, streak=0.2),
                     max(1.0, hand["tip_mm"] * s))
        box = (int(min(a[0], b[0]) - 10), int(min(a[1], b[1]) - 10), int(abs(b[0] - a[0]) + 20),
               int(abs(b[1] - a[1]) + 20))
        load = _load_map([st], box)
        _deposit(lin, tooth, load, np.ones_like(load), box, colour, pencil_set, rng, px_per_mm=s)
