"""Colour: conversions, the reader's pencil palette, and per-photo calibration.

All colour work happens on *paper-white-balanced linear RGB* (``vision.light`` divides the
photo by the paper's illumination, so paper is ``(1, 1, 1)``), converted to CIELAB with the D65
white. In that space a pencil's hue angle ``h = atan2(b*, a*)`` is what stays put when the
pressure, the coverage or the exposure change, so classification works on hue; lightness and
chroma only decide *whether* a texel is coloured.

The palette (``calibration/palettes/*.json``) is the prior: hue centre and spread per pencil
colour. :func:`calibrate_palette` adapts it to one photo, from the calibration swatches when
the player coloured them, otherwise from the coloured regions of the sheet itself.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from calibration.template import PENCIL_COLOURS
from sheetcheck.errors import TemplateError

PALETTE_DIR = Path(__file__).resolve().parent.parent / "calibration" / "palettes"

# sRGB (D65) linear RGB -> XYZ, IEC 61966-2-1.
_RGB2XYZ = np.array([[0.4124564, 0.3575761, 0.1804375],
                     [0.2126729, 0.7151522, 0.0721750],
                     [0.0193339, 0.1191920, 0.9503041]], np.float32)
_WHITE_D65 = np.array([0.95047, 1.0, 1.08883], np.float32)
# Rows pre-divided by the white so Lab needs no per-pixel division.
_RGB2XYZN = (_RGB2XYZ / _WHITE_D65[:, None]).astype(np.float32)


def _srgb_to_linear_lut() -> np.ndarray:
    v = np.arange(256, dtype=np.float64) / 255.0
    lin = np.where(v <= 0.04045, v / 12.92, ((v + 0.055) / 1.055) ** 2.4)
    return lin.astype(np.float32)


SRGB_TO_LINEAR = _srgb_to_linear_lut()


def srgb_to_linear(image: np.ndarray) -> np.ndarray:
    """uint8 sRGB -> float32 linear RGB in [0, 1] (same shape)."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"srgb_to_linear expects uint8, got {image.dtype}")
    return SRGB_TO_LINEAR[image]


def linear_to_srgb(linear: np.ndarray) -> np.ndarray:
    """float linear RGB (any range) -> uint8 sRGB, clipped."""
    x = np.clip(np.asarray(linear, np.float32), 0.0, 1.0)
    s = np.where(x <= 0.0031308, 12.92 * x, 1.055 * np.power(x, 1 / 2.4) - 0.055)
    return np.clip(s * 255.0 + 0.5, 0, 255).astype(np.uint8)


#: Rows per matrix product in :func:`linear_to_lab`. OpenBLAS runs a product of M x N x K at
#: least 262144 on all cores, and waking its threads between products costs milliseconds on a
#: busy machine (measured: 100k pixels to Lab in 19.6 ms, 2.3 ms with OpenBLAS on one thread)
#: for a product that takes 0.1 ms: products of 16384 x 3 x 3 stay on the calling thread. The
#: values are the same (every row is one dot product of the same kernel: identical on 1M
#: random rows and on the bench and dev photos).
_LAB_ROWS = 16384


def _to_xyz(rgb: np.ndarray) -> np.ndarray:
    """``rgb @ _RGB2XYZN.T`` for (..., 3) float32, in products of at most ``_LAB_ROWS`` rows."""
    flat = rgb.reshape(-1, 3)
    n = flat.shape[0]
    if n <= _LAB_ROWS:
        return rgb @ _RGB2XYZN.T
    out = np.empty((n, 3), np.float32)
    m = _RGB2XYZN.T
    for s in range(0, n, _LAB_ROWS):
        np.matmul(flat[s:s + _LAB_ROWS], m, out=out[s:s + _LAB_ROWS])
    return out.reshape(rgb.shape)


#: Inputs of :func:`_cbrt_f32` at or above this (and NaN) take ``np.cbrt``: the bit-level
#: first guess is meant for the values of a photo's colours (around 0.008-10).
_CBRT_FAST_MAX = np.float32(1e30)


def _cbrt_f32(x: np.ndarray) -> np.ndarray:
    """The cube root of a float32 array of positive values (a new array).

    Why: ``np.cbrt`` on float32 calls the C library's ``cbrtf`` value by value (no SIMD):
    ~14 ns a value, ~10 ms of a 12 MP read's ~250,000 region, paper and halo pixels (three
    values each). Here: a first guess from the float's bits (the exponent divided by three),
    then three Newton steps ``y = (2 y + x / y^2) / 3``, each a few whole-array float32
    operations: ~2.5 ns a value. Within 2 units in the last place of the correctly rounded
    root (``np.cbrt`` is not correctly rounded either: ``cbrtf`` differs from it on 11 % of
    values, by one unit, and numpy's SIMD loops on an AVX-512 machine by up to 2, so the two
    roots differ by up to 3 units there); on 1M values from 0.008 to 3, 42 % differ from
    ``cbrtf`` by 1-2 units, about 1e-7 of the value. Values that are not positive and finite below
    ``_CBRT_FAST_MAX`` (NaN, infinity) take ``np.cbrt``."""
    x = np.ascontiguousarray(x, np.float32)
    y = (x.view(np.int32) // 3 + 709921077).view(np.float32)
    t = np.empty_like(x)
    with np.errstate(all="ignore"):  # (NaN and infinity pass through, then take np.cbrt)
        for _ in range(3):
            np.multiply(y, y, out=t)
            np.divide(x, t, out=t)
            y *= np.float32(2.0)
            y += t
            y *= np.float32(1.0 / 3.0)
    odd = ~(x < _CBRT_FAST_MAX)
    if odd.any():
        y[odd] = np.cbrt(x[odd])
    return y


def linear_to_lab(linear: np.ndarray) -> np.ndarray:
    """Linear RGB (..., 3) with white = (1, 1, 1) -> CIELAB (..., 3) float32 (L*, a*, b*)."""
    rgb = np.asarray(linear, np.float32)
    xyz = _to_xyz(rgb)
    d3 = (6.0 / 29.0) ** 3
    # cbrt on the whole array, the linear toe only where needed (rare: very dark texels)
    f = _cbrt_f32(np.maximum(xyz, d3, dtype=np.float32))
    low = xyz < d3
    if low.any():
        f[low] = xyz[low] * (1.0 / (3 * (6.0 / 29.0) ** 2)) + 4.0 / 29.0
    lab = np.empty_like(f)
    lab[..., 0] = 116.0 * f[..., 1] - 16.0
    lab[..., 1] = 500.0 * (f[..., 0] - f[..., 1])
    lab[..., 2] = 200.0 * (f[..., 1] - f[..., 2])
    return lab


def srgb_to_lab(image: np.ndarray) -> np.ndarray:
    """uint8 sRGB (..., 3) -> CIELAB, D65."""
    return linear_to_lab(srgb_to_linear(image))


def hue_deg(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """CIELAB hue angle in degrees, 0..360."""
    return np.degrees(np.arctan2(b, a)) % 360.0


def hue_diff(h1, h2):
    """Signed smallest difference ``h1 - h2`` in degrees, in (-180, 180]."""
    return (np.asarray(h1, float) - np.asarray(h2, float) + 180.0) % 360.0 - 180.0


def _hue_diff_float(h1: float, h2: float) -> float:
    """:func:`hue_diff` of two Python floats, the same value (the same IEEE operations in the
    same order; Python's float remainder is numpy's: ``fmod``, then one add of the divisor
    when the signs differ), without numpy's scalar overhead (~5 us a call):
    :func:`calibrate_palette` compares every unlabelled sample with every pencil, three
    times over."""
    return (h1 - h2 + 180.0) % 360.0 - 180.0


def circular_mean_deg(h: np.ndarray, weights: np.ndarray | None = None) -> float:
    """Weighted circular mean of hue angles (degrees)."""
    r = np.radians(np.asarray(h, float))
    w = np.ones_like(r) if weights is None else np.asarray(weights, float)
    return float(np.degrees(math.atan2((w * np.sin(r)).sum(), (w * np.cos(r)).sum())) % 360.0)


# --------------------------------------------------------------------------------------------
# palette
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class PaletteColour:
    name: str
    hue_deg: float
    hue_spread_deg: float


@dataclass(frozen=True)
class Palette:
    """Pencil colours as hue centre and spread (degrees, CIELAB on white-balanced paper).

    ``source`` says where the numbers came from (``"prior"``, ``"swatches"``, ``"sheet"`` or
    a mix); ``evidence`` counts how many measurements moved each colour.
    """

    id: str
    colours: tuple[PaletteColour, ...]
    min_chroma: float = 7.0
    source: str = "prior"
    evidence: Mapping[str, int] = field(default_factory=dict)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.colours)

    def colour(self, name: str) -> PaletteColour:
        for c in self.colours:
            if c.name == name:
                return c
        raise KeyError(f"palette {self.id!r} has no colour {name!r}; it has {', '.join(self.names)}")

    def distances(self, hue: float, *, names: Sequence[str] | None = None) -> dict[str, float]:
        """Hue distance of ``hue`` to each colour in units of that colour's spread."""
        out = {}
        for c in self.colours:
            if names is None or c.name in names:
                d = (hue - c.hue_deg + 180.0) % 360.0 - 180.0
                out[c.name] = abs(d) / c.hue_spread_deg
        return out

    def to_json(self) -> dict:
        return {"id": self.id, "source": self.source,
                "colours": {c.name: {"hue_deg": round(c.hue_deg, 2),
                                     "hue_spread_deg": round(c.hue_spread_deg, 2),
                                     "evidence": int(self.evidence.get(c.name, 0))}
                            for c in self.colours}}


def palette_from_dict(doc, *, source: str = "<palette>") -> Palette:
    """Validate a palette document (every problem at once) and build a :class:`Palette`.

    Raises
    ------
    TemplateError
        listing every problem (palettes are calibration data, like templates).
    """
    problems: list[str] = []
    if not isinstance(doc, dict):
        raise TemplateError(f"palette {source}: the top level must be a JSON object",
                            hint="Check the file is a sheetcheck palette.")
    if doc.get("format_version") != 1:
        problems.append(f"format_version must be 1, got {doc.get('format_version')!r}")
    pid = doc.get("id")
    if not isinstance(pid, str) or not pid:
        problems.append("missing string 'id'")
    cols = doc.get("colours")
    colours: list[PaletteColour] = []
    if not isinstance(cols, dict) or not cols:
        problems.append("'colours' must be a non-empty object {name: {hue_deg, hue_spread_deg}}")
    else:
        for name, c in cols.items():
            if not isinstance(c, dict):
                problems.append(f"colour {name!r}: must be an object"); continue
            h, s = c.get("hue_deg"), c.get("hue_spread_deg")
            if not isinstance(h, (int, float)) or isinstance(h, bool) or not 0 <= h < 360:
                problems.append(f"colour {name!r}: hue_deg must be a number in [0, 360), got {h!r}")
                continue
            if not isinstance(s, (int, float)) or isinstance(s, bool) or not 0 < s <= 90:
                problems.append(f"colour {name!r}: hue_spread_deg must be in (0, 90], got {s!r}")
                continue
            colours.append(PaletteColour(name, float(h), float(s)))
    neutral = doc.get("neutral", {})
    min_chroma = neutral.get("min_chroma", 7.0) if isinstance(neutral, dict) else None
    if not isinstance(min_chroma, (int, float)) or isinstance(min_chroma, bool) or min_chroma <= 0:
        problems.append(f"neutral.min_chroma must be a positive number, got {min_chroma!r}")
        min_chroma = 7.0
    if problems:
        raise TemplateError(f"palette {source} is invalid:", problems,
                            hint="Fix the palette file (see calibration/palettes/default.json).")
    return Palette(pid, tuple(colours), float(min_chroma))


def palette_ids() -> list[str]:
    """Ids of the reader palettes in ``calibration/palettes`` (other calibration data kept in
    that folder, such as the simulator's pencil brands, is not a reader palette)."""
    ids = []
    for p in sorted(PALETTE_DIR.glob("*.json")):
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and "hue_deg" in json.dumps(doc.get("colours", ""))[:2000]:
            ids.append(p.stem)
    return ids


@lru_cache(maxsize=None)
def load_palette(palette_id: str = "default") -> Palette:
    """Load a bundled palette by id.

    Raises
    ------
    TemplateError
        when it does not exist (naming the ones that do) or is invalid.
    """
    path = PALETTE_DIR / f"{palette_id}.json"
    if not path.is_file():
        raise TemplateError(f"unknown palette {palette_id!r}.",
                            hint=f"Known palettes: {', '.join(palette_ids()) or '(none)'}.")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise TemplateError(f"palette {path} is not valid JSON (line {e.lineno}: {e.msg})",
                            hint="Fix the JSON syntax.") from None
    return palette_from_dict(doc, source=str(path))


# --------------------------------------------------------------------------------------------
# per-photo calibration
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class HueSample:
    """A robust hue measurement of one marked region: its hue, how many coloured texels
    support it, and where it came from (a swatch of a known colour, or an unlabelled region)."""

    hue_deg: float
    weight: float
    label: str | None = None


def _pencil_update(prior_hue: float, prior_spread: float, group: Sequence[tuple[float, float]], *,
                   prior_weight: float, limit: float, min_spread_deg: float) -> tuple[float, float]:
    """One pencil's calibrated hue and spread from its marks ``group`` (``(hue, weight)``).

    The hue is the weighted circular mean of the marks and the prior (``prior_weight``
    pseudo-marks), moved at most ``limit`` deg from the prior. The spread is the prior's,
    shrunk towards the scatter this photo shows once there is evidence (a Bayesian update with
    ``prior_weight`` pseudo-samples), never below ``min_spread_deg`` (one photo's few samples
    understate the true scatter).
    """
    hs = [h for h, _ in group]
    ws = [w for _, w in group]
    h = circular_mean_deg(np.array(hs + [prior_hue]), np.array(ws + [prior_weight]))
    shift = _hue_diff_float(float(h), float(prior_hue))
    if abs(shift) > limit:
        h = (prior_hue + math.copysign(limit, shift)) % 360.0
    if not hs:
        return h, prior_spread
    d2 = np.asarray(hue_diff(np.array(hs), h), float) ** 2
    wsum = float(np.sum(ws))
    var = (prior_weight * prior_spread ** 2 + float(np.sum(np.array(ws) * d2))) / (prior_weight + wsum)
    return h, float(max(min_spread_deg, math.sqrt(var)))


def calibrate_palette(prior: Palette, samples: Sequence[HueSample], *,
                      prior_weight: float = 4.0, swatch_weight: float = 12.0,
                      max_shift_deg: float = 25.0, min_spread_deg: float = 5.0,
                      max_shift_swatch_deg: float = 60.0,
                      max_shift_ordered_deg: float = 70.0) -> Palette:
    """Adapt the prior palette to one photo.

    Swatch samples (``label`` = a colour name) pull their own colour strongly. Unlabelled
    samples (the sheet's coloured regions) are first labelled all together by hue order
    (:func:`_map_labels`: the pencils keep their order round the hue circle, the swatches anchor
    their colours, isolated hues are strays; when the hues show no clear clusters, each goes to
    its nearest pencil within three spreads); each then pulls its pencil with weight 1, against
    ``prior_weight`` for the prior, and strays pull nothing. Spreads are widened if the photo's
    samples scatter more than the prior says.

    Parameters
    ----------
    prior : Palette
    samples : sequence of HueSample
    prior_weight, swatch_weight : float
        Relative weights (in units of one region) of the prior and of a coloured swatch.
    max_shift_swatch_deg : float
        Largest allowed move of a colour whose swatch was coloured.
    max_shift_ordered_deg : float
        Largest allowed move of a colour given marks by hue order (no swatch).
    max_shift_deg : float
        Largest allowed move when the marks show no clear clusters and each was given to its
        nearest pencil instead, so that a few marks cannot drag one pencil onto another.
    min_spread_deg : float
        Floor of a calibrated spread.

    Returns
    -------
    Palette
        with ``source`` "prior", "swatches", "sheet" or "swatches+sheet".
    """
    spreads_prior = {c.name: c.hue_spread_deg for c in prior.colours}
    names = [c.name for c in prior.colours]
    labelled = [s for s in samples if s.label in spreads_prior]
    # Every mark is labelled at once by hue order (_map_labels): the sheet's hue clusters keep
    # the pencils' order around the hue circle even when a brand or a camera moves every hue a
    # little differently (a crimson "red" near purple, a yellowish "orange"); the swatches
    # anchor their own colours. Marks it calls strays move no pencil.
    from_sheet = by_order = False
    if any(s.label is None for s in samples):
        labels = _map_labels(prior, samples)
        by_order = labels is not None
        if labels is None:
            # no clear clusters: each mark goes to the nearest pencil of the prior, if within
            # three spreads of it, and moves it at most max_shift_deg
            labels = []
            for s in samples:
                d = prior.distances(s.hue_deg)
                best = min(d, key=d.get)
                labels.append(best if d[best] <= 3.0 else None)
        ordered = [HueSample(s.hue_deg, -1.0, lab) for s, lab in zip(samples, labels)
                   if s.label is None and lab is not None]
        labelled = labelled + ordered
        from_sheet = bool(ordered)
    used_swatch = any(s.weight >= 0 for s in labelled)
    groups: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    for s in labelled:
        groups[s.label].append((s.hue_deg, swatch_weight if s.weight >= 0 else 1.0))
    centres, spreads, evidence = {}, {}, {}
    for n in names:
        # A coloured swatch may move its colour far (it names the pencil); marks matched by
        # order somewhat less.
        limit = (max_shift_swatch_deg if any(s.label == n and s.weight >= 0 for s in labelled)
                 else max_shift_ordered_deg if by_order else max_shift_deg)
        centres[n], spreads[n] = _pencil_update(prior.colour(n).hue_deg, spreads_prior[n], groups[n],
                                                prior_weight=prior_weight, limit=limit,
                                                min_spread_deg=min_spread_deg)
        evidence[n] = len(groups[n])
    return replace(prior,
                   colours=tuple(PaletteColour(n, centres[n], spreads[n]) for n in names),
                   source=("swatches+sheet" if used_swatch and from_sheet else
                           "swatches" if used_swatch else
                           "sheet" if from_sheet else "prior"),
                   evidence=evidence)


#: Hue-order matching of the sheet's marks (:func:`_map_labels`): within-pencil scatter of one
#: photo's marks, how far a pencil may sit from the palette's centre (brands, cameras), how far
#: from a coloured swatch's hue, the cost of calling a sample a stray (per sample), the cost of
#: one more cluster, and the cost of putting a swatch among another colour's marks; all in
#: squared standard units (degrees for the first three).
MAP_SIGMA_DEG = 6.0
MAP_TAU_DEG = 20.0
MAP_TAU_SWATCH_DEG = 8.0
MAP_STRAY = 6.0
MAP_CLUSTER = 2.0
MAP_SWATCH_PENALTY = 30.0
#: Largest gaps between sorted hues tried as cluster boundaries.
MAP_MAX_CUTS = 8
#: An arc given a pencil its hue is not nearest to must be bounded by gaps of at least this
#: many degrees and this many times its own standard deviation.
MAP_CLEAR_GAP_DEG = 10.0
MAP_CLEAR_GAP_SD = 2.0


@lru_cache(maxsize=None)
def _order_patterns(k: int, n_colours: int) -> np.ndarray:
    """Every way to give ``k`` arcs (in circular order) a colour or none (``n_colours``), the
    colours increasing around the hue circle with at most one wrap: ``(n_patterns, k)``."""
    out = set()
    for rot in range(n_colours):
        for m in range(min(k, n_colours) + 1):
            for arcs in itertools.combinations(range(k), m):
                for cols in itertools.combinations(range(n_colours), m):
                    p = [n_colours] * k
                    for a, c in zip(arcs, cols):
                        p[a] = (c + rot) % n_colours
                    out.add(tuple(p))
    return np.array(sorted(out), np.intp)


@lru_cache(maxsize=None)
def _cut_combinations(m: int, k: int) -> np.ndarray:
    return np.array(list(itertools.combinations(range(m), k)), np.intp).reshape(-1, k)


def _map_labels(prior: Palette, samples: Sequence[HueSample]) -> list:
    """Label the marked regions' hues by the pencils, keeping the pencils' order on the hue circle.

    The hues are split into arcs (clusters) at some of their largest gaps; each arc is given a
    pencil, or called strays, such that the pencils keep their circular order (a brand or a
    camera moves every hue a little differently, but a red never passes an orange). Among all
    splits and orders the one of least cost wins (a maximum a posteriori labelling): an arc
    given a pencil costs its scatter (in units of :data:`MAP_SIGMA_DEG`) plus the distance of
    its mean from the pencil's expected hue (the prior's, or the mean of that pencil's coloured
    swatches), in units of :data:`MAP_TAU_DEG` (:data:`MAP_TAU_SWATCH_DEG`); strays cost
    :data:`MAP_STRAY` each; every pencil's arc costs :data:`MAP_CLUSTER`; a swatch in an arc of another
    pencil costs :data:`MAP_SWATCH_PENALTY`. Two pencils' marks that sit close together (a
    crimson red beside a magenta purple, a yellow-green beside a yellowish orange) are split
    where their scatter says, not only where a fixed gap is, and a pencil far from its prior
    (a sky blue read at hue 205) still takes the place its order gives it.

    Returns a label (a colour name) or None (a stray) per sample, in the samples' order; or
    None when the hues show no clusters clear enough to be matched by order (see below).
    """
    n = len(samples)
    if n == 0:
        return []
    cols = sorted(prior.colours, key=lambda c: c.hue_deg)
    names = [c.name for c in cols]
    K = len(cols)
    hs = np.array([s.hue_deg for s in samples], float) % 360.0
    li = np.array([names.index(s.label) if s.label in names else K for s in samples], np.intp)
    order = np.argsort(hs, kind="stable")
    sh = hs[order]
    gaps = np.diff(np.concatenate([sh, [sh[0] + 360.0]]))  # after sorted position i
    cand = np.argsort(-gaps, kind="stable")[:MAP_MAX_CUTS]
    if n > 1:
        cand = cand[gaps[cand] >= 2.0]  # (no boundary inside a run of equal hues)
    cand = np.sort(cand) if cand.size else np.array([int(np.argmax(gaps))])
    M = cand.size
    mu = np.array([c.hue_deg for c in cols], float)
    tau = np.full(K, MAP_TAU_DEG)
    for ci in range(K):
        sw = hs[li == ci]
        if sw.size:
            mu[ci], tau[ci] = circular_mean_deg(sw), MAP_TAU_SWATCH_DEG
    # the sorted hues unrolled twice round the circle, and prefix sums over them
    h2 = np.concatenate([sh, sh + 360.0]) - sh[0]
    s1c = np.concatenate([[0.0], np.cumsum(h2)])
    s2c = np.concatenate([[0.0], np.cumsum(h2 * h2)])
    onehot = np.zeros((2 * n, K + 1))
    onehot[np.arange(2 * n), np.tile(li[order], 2)] = 1.0
    labc = np.vstack([np.zeros((1, K + 1)), np.cumsum(onehot, axis=0)])
    # arc (a, b): sorted positions cand[a] + 1 .. cand[b], round the circle (a == b: all)
    p = np.repeat(cand[:, None] + 1, M, axis=1)
    q = np.repeat(cand[None, :], M, axis=0)
    q = np.where(q >= p, q, q + n)
    q = np.where(np.eye(M, dtype=bool), p + n - 1, q)
    ln = (q - p + 1).astype(float)
    s1 = s1c[q + 1] - s1c[p]
    mean = s1 / ln
    scatter = np.maximum(s2c[q + 1] - s2c[p] - s1 * mean, 0.0) / MAP_SIGMA_DEG ** 2
    lab = labc[q + 1] - labc[p]
    swatches = lab[..., :K].sum(-1)
    d = (((mean + sh[0]) % 360.0)[..., None] - mu + 180.0) % 360.0 - 180.0
    cost = np.empty((M, M, K + 1))
    cost[..., :K] = (scatter[..., None] + d * d / (tau ** 2 + MAP_SIGMA_DEG ** 2 / ln[..., None])
                     + MAP_SWATCH_PENALTY * (swatches[..., None] - lab[..., :K]))
    cost[..., K] = ln * MAP_STRAY + MAP_SWATCH_PENALTY * swatches
    best = (np.inf, None, None)
    for k in range(1, min(K, M) + 1):
        cuts = _cut_combinations(M, k)
        arcs = cost[cuts, np.roll(cuts, -1, axis=1)]              # (combinations, k, K + 1)
        pat = _order_patterns(k, K)
        # (every pencil's arc costs MAP_CLUSTER; strays pay per sample only)
        total = (arcs[:, np.arange(k)[None, :], pat].sum(-1)
                 + MAP_CLUSTER * (pat < K).sum(-1)[None, :])     # (combinations, patterns)
        i = int(np.argmin(total))
        v = float(total.flat[i])
        if v < best[0]:
            best = (v, cuts[i // pat.shape[0]], pat[i % pat.shape[0]])
    _, cuts, pat = best
    labels: list = [None] * n
    k = len(cuts)
    spread = np.array([c.hue_spread_deg for c in cols], float)
    for j in range(k):
        if pat[j] == K:
            continue
        a, b = cuts[j], cuts[(j + 1) % k]
        # An arc given a pencil other than the one its hue is nearest to is believed only if
        # it is a cluster standing clear of its neighbours: hues smeared round the circle
        # (a colour cast not taken out, a sheet of strays) would otherwise hand every pencil
        # its neighbour's marks. The caller then falls back to the nearest pencil.
        m = (mean[a, b] + sh[0]) % 360.0
        near = int(np.argmin(np.abs((m - mu + 180.0) % 360.0 - 180.0) / spread))
        if near != pat[j]:
            sd = math.sqrt(scatter[a, b] / ln[a, b]) * MAP_SIGMA_DEG
            clear = max(MAP_CLEAR_GAP_DEG, MAP_CLEAR_GAP_SD * sd)
            if min(gaps[cand[a]], gaps[cand[b]]) < clear:
                return None
        s = cand[a] + 1
        e = cand[b] if k > 1 else s + n - 1
        if e < s:
            e += n
        for t in range(s, e + 1):
            labels[int(order[t % n])] = names[pat[j]]
    return labels


def calibrate_palette_by_gaps(prior: Palette, samples: Sequence[HueSample], *,
                              prior_weight: float = 4.0, swatch_weight: float = 12.0,
                              max_shift_deg: float = 25.0, iterations: int = 3,
                              min_spread_deg: float = 5.0, max_shift_swatch_deg: float = 60.0,
                              max_shift_ordered_deg: float = 40.0) -> Palette:
    """Adapt the prior palette to one photo: the method before :func:`calibrate_palette`
    (sessions 1-16), kept as a second opinion.

    The reader calibrates both ways and flags a confident colour reading whose hue the two
    palettes give to different pencils (``vision.marks.classify_sheet``): a sheet whose hues
    can be split between two pencils in two plausible ways is one a person should look at.
    It differs from :func:`calibrate_palette` in how unlabelled marks are matched: hue
    clusters are cut at every gap wider than 12 deg and matched to the pencils not named by a
    swatch, in hue order, within 50 deg; when that fails each mark goes to its nearest pencil.

    Swatch samples (``label`` = a colour name) pull their own colour strongly; unlabelled
    samples (the sheet's coloured regions) are assigned to the nearest colour and pull it with
    weight 1 each, against ``prior_weight`` for the prior. A colour moves at most
    ``max_shift_deg`` from the prior so that a sheet with few marks cannot drag one pencil onto
    another; spreads are widened if the photo's samples scatter more than the prior says.

    Parameters are :func:`calibrate_palette`'s, but ``max_shift_ordered_deg`` (40 here) limits a
    colour matched by gap order, and ``max_shift_deg`` the move of a hue centre by unlabelled
    samples; ``iterations`` is the number of assignment/update rounds.
    """
    centres = {c.name: c.hue_deg for c in prior.colours}
    spreads = {c.name: c.hue_spread_deg for c in prior.colours}
    spreads_prior = dict(spreads)
    names = list(centres)
    labelled = [s for s in samples if s.label in centres]
    free = [s for s in samples if s.label is None]
    # Unlabelled marks first go through an order-preserving match: the sheet's hue clusters
    # keep the pencils' order around the hue circle even when a brand or a camera moves
    # every hue a little differently (a crimson "red" near purple, a yellowish "orange").
    ordered = _gap_order_labels(prior, free, exclude={s.label for s in labelled})
    if ordered is not None:
        labelled = labelled + [HueSample(s.hue_deg, -1.0, lab) for s, lab in zip(free, ordered)
                               if lab is not None]
        weights_from_order = True
        free = [s for s, lab in zip(free, ordered) if lab is None]
    else:
        weights_from_order = False
    used_swatch = any(s.weight >= 0 for s in labelled)
    evidence = {n: 0 for n in names}
    for _ in range(max(1, iterations)):
        groups: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
        for s in labelled:
            groups[s.label].append((s.hue_deg, swatch_weight if s.weight >= 0 else 1.0))
        # (the pencils' centres and spreads as plain floats, once per round)
        pencils = [(n, float(centres[n]), spreads[n]) for n in names]
        for s in free:
            hd = float(s.hue_deg)
            # (_hue_diff_float written out: this loop is most of the calibration's time)
            d = {n: abs((hd - c + 180.0) % 360.0 - 180.0) / sp for n, c, sp in pencils}
            best = min(d, key=d.get)
            # Only samples that plausibly are this colour move it; an outlier (a pencil the
            # palette does not know) must not drag a centre.
            if d[best] <= 3.0:
                groups[best].append((s.hue_deg, 1.0))
        new = {}
        new_spread = {}
        for n in names:
            # A coloured swatch may move its colour far (it names the pencil); the sheet's
            # unlabelled marks only a little, so few marks cannot drag one pencil onto another.
            if any(s.label == n and s.weight >= 0 for s in labelled):
                limit = max_shift_swatch_deg
            elif any(s.label == n for s in labelled):
                limit = max_shift_ordered_deg
            else:
                limit = max_shift_deg
            new[n], new_spread[n] = _pencil_update(prior.colour(n).hue_deg, spreads_prior[n],
                                                   groups[n], prior_weight=prior_weight,
                                                   limit=limit, min_spread_deg=min_spread_deg)
            evidence[n] = len(groups[n])
        centres = new
        spreads = new_spread
    return replace(prior,
                   colours=tuple(PaletteColour(n, centres[n], spreads[n]) for n in names),
                   source=("swatches+sheet" if used_swatch and (free or weights_from_order) else
                           "swatches" if used_swatch else
                           "sheet" if (free or weights_from_order) else "prior"),
                   evidence=evidence)


def _gap_order_labels(prior: Palette, free: Sequence[HueSample], *, exclude=frozenset(),
                      gap_deg: float = 12.0, max_dist_deg: float = 50.0) -> list | None:
    """Label unlabelled hue samples by matching their clusters to the palette in hue order.

    Samples are clustered on the hue circle (a new cluster wherever consecutive hues are more
    than ``gap_deg`` apart); clusters are matched to palette colours (those not already named
    by a swatch) by the assignment that keeps the circular order and has the least squared
    distance in units of spread. Returns a label per sample, or None when the clusters do not
    fit (more clusters than colours, or a match farther than ``max_dist_deg``): the caller
    then falls back to nearest-colour assignment.
    """
    if len(free) < 2:
        return None
    cols = sorted((c for c in prior.colours if c.name not in exclude), key=lambda c: c.hue_deg)
    hs = np.array([s.hue_deg for s in free], float) % 360.0
    order = np.argsort(hs)
    sh = hs[order]
    gaps = np.diff(np.concatenate([sh, [sh[0] + 360.0]]))
    if gaps.max() <= gap_deg:
        return None  # one continuous smear of hues: no structure to match
    start = int(np.argmax(gaps)) + 1  # begin after the largest gap
    seq = np.roll(order, -start)
    clusters: list[list[int]] = [[int(seq[0])]]
    for a, b in zip(seq[:-1], seq[1:]):
        if (hs[b] - hs[a]) % 360.0 > gap_deg:
            clusters.append([])
        clusters[-1].append(int(b))
    if len(clusters) > len(cols):
        return None
    cmean = [circular_mean_deg(hs[c]) for c in clusters]
    cw = [len(c) for c in clusters]
    best, best_cost = None, np.inf
    n = len(cols)
    for combo in itertools.combinations(range(n), len(clusters)):
        for rot in range(n):
            chosen = [cols[(i + rot) % n] for i in combo]
            # keep circular order: chosen colours must be increasing in hue after rotation
            d = [_hue_diff_float(float(m), float(c.hue_deg)) for m, c in zip(cmean, chosen)]
            if any(abs(x) > max_dist_deg for x in d):
                continue
            cost = sum(w * (x / c.hue_spread_deg) ** 2 for w, x, c in zip(cw, d, chosen))
            if cost < best_cost:
                best, best_cost = chosen, cost
    if best is None:
        return None
    labels: list = [None] * len(free)
    for cl, colour in zip(clusters, best):
        for k in cl:
            labels[k] = colour.name
    return labels


__all__ = [
    "PENCIL_COLOURS", "SRGB_TO_LINEAR", "srgb_to_linear", "linear_to_srgb", "linear_to_lab",
    "srgb_to_lab", "hue_deg", "hue_diff", "circular_mean_deg", "PaletteColour", "Palette",
    "palette_from_dict", "load_palette", "palette_ids", "HueSample", "calibrate_palette",
    "calibrate_palette_by_gaps",
]
