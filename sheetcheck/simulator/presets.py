"""Named difficulty presets and the sampling of every photo condition.

A preset is a table of samplers, one per condition. :func:`sample_conditions` draws every
condition from the preset and then applies overrides, so any condition can be fixed from the
command line (``--set rotation_deg=180``) while the rest stay random. Every condition that was
used is returned, and recorded in the truth document.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from sheetcheck.errors import SheetcheckError
from sheetcheck.simulator.backgrounds import BACKGROUNDS, PHOTO_BACKGROUNDS, SYNTHETIC_BACKGROUNDS
from sheetcheck.simulator.paint import FILL_STYLES, sample_hand

BRANDS_PATH = Path(__file__).resolve().parents[2] / "calibration" / "palettes" / "brands.json"
PENCIL_ORDER = ("orange", "red", "blue", "green", "purple")


class SimulatorError(SheetcheckError):
    """A simulator option that cannot be used (unknown condition, bad value, unknown preset)."""

    code = "bad_simulator_option"
    exit_code = 11


@lru_cache(maxsize=1)
def load_brands() -> dict:
    """The simulated pencil brands (``calibration/palettes/brands.json``), validated."""
    from sheetcheck.files import read_json_file

    doc = read_json_file(BRANDS_PATH, what="the pencil brands file", error=SimulatorError,
                         hint="Restore calibration/palettes/brands.json from the repository.")
    problems = []
    if doc.get("format") != "sheetcheck.brands/1":
        problems.append(f"format must be 'sheetcheck.brands/1', got {doc.get('format')!r}")
    for name, b in doc.get("brands", {}).items():
        for c in PENCIL_ORDER:
            v = b.get("pencils", {}).get(c)
            if not (isinstance(v, list) and len(v) == 3 and all(isinstance(x, int) and 0 <= x <= 255 for x in v)):
                problems.append(f"brand {name!r}: pencil {c!r} must be [r, g, b] 0-255, got {v!r}")
    if len(doc.get("brands", {})) < 1:
        problems.append("no brands")
    if problems:
        raise SimulatorError(f"pencil brands file {BRANDS_PATH} is invalid: " + "; ".join(problems),
                             hint="Fix the file (see docs/SIMULATOR.md).")
    return doc


# --------------------------------------------------------------------------------------------
# samplers
# --------------------------------------------------------------------------------------------

def U(lo, hi):
    return lambda rng: float(rng.uniform(lo, hi))


def I(lo, hi):
    return lambda rng: int(rng.integers(lo, hi + 1))


def C(options, p=None):
    return lambda rng: options[int(rng.choice(len(options), p=p))]


def maybe(prob, sampler, otherwise=0.0):
    return lambda rng: sampler(rng) if rng.random() < prob else otherwise


def _rotation_at_table(rng) -> float:
    """Players photograph their own sheet mostly upright, a neighbour's upside down or sideways."""
    k = rng.random()
    if k < 0.55:
        return float(rng.normal(0, 7))
    if k < 0.7:
        return float(180 + rng.normal(0, 7))
    if k < 0.85:
        return float(rng.choice([90, -90]) + rng.normal(0, 7))
    return float(rng.uniform(-180, 180))


@dataclass(frozen=True)
class Preset:
    """A named difficulty: one sampler per condition (see ``docs/SIMULATOR.md``)."""

    name: str
    description: str
    samplers: Mapping[str, Callable[[np.random.Generator], Any]]
    curl_probs: tuple[float, float, float]          # none, bend, fold
    curl_bend_mm: tuple[float, float]
    curl_fold_mm: tuple[float, float]
    hand: Mapping[str, Any]


def _background(rng) -> str:
    """Half the time a table top (wood, cloth, plain, dark desk), half a real photograph (clutter
    with real edges and colours that a page finder must not mistake for the sheet)."""
    pool = SYNTHETIC_BACKGROUNDS if rng.random() < 0.5 else PHOTO_BACKGROUNDS
    return str(pool[int(rng.integers(len(pool)))])


_COMMON = {
    "aspect": C([4 / 3, 16 / 9, 3 / 2], [0.7, 0.2, 0.1]),
    # players mostly turn the phone to match the sheet; sometimes they do not
    "photo_orientation": C(["match", "cross"], [0.85, 0.15]),
    "tilt_axis_deg": U(0, 360),
    "offset_x": U(-0.8, 0.8),
    "offset_y": U(-0.8, 0.8),
    "light_angle_deg": U(0, 360),
    "motion_angle_deg": U(0, 180),
    "background": _background,
    "pencil_brand": None,  # filled from the brands file
    "cutoff": lambda rng: 0.0,
    "cutoff_corner": I(0, 3),
    "page_shadow": U(0.1, 0.45),
    "paper_tint": lambda rng: [round(float(v), 4) for v in
                               np.clip(rng.normal(0, 0.015, 3) + [1, 1, rng.uniform(0.95, 1.0)], 0.88, 1.0)],
}

PRESETS: dict[str, Preset] = {
    "easy": Preset(
        "easy", "near fronto-parallel, good even daylight, little blur, large photo, q >= 85",
        {**_COMMON,
         "output_long_side": C([1600, 2000, 2400, 3000]),
         "photo_orientation": lambda rng: "match",
         "rotation_deg": lambda rng: float(rng.normal(0, 3)),
         "tilt_deg": U(0, 8), "focal_35mm": U(24, 30), "fill": U(0.78, 0.93),
         "k1": U(-0.03, 0.02), "k2": lambda rng: 0.0,
         "light_gradient": U(0, 0.12), "vignette": U(0, 0.12),
         "shadow": maybe(0.15, U(0.1, 0.2)), "shadow_softness": U(0.03, 0.08),
         "colour_temp_k": U(4800, 6500), "awb": U(0.85, 1.0),
         "wb_gain_r": U(0.97, 1.03), "wb_gain_b": U(0.97, 1.03), "exposure": U(0.85, 1.0),
         "read_noise": U(0.001, 0.004), "shot_noise": U(0.0003, 0.0015),
         "defocus_px": U(0, 0.7), "motion_px": U(0, 0.9), "optics_sigma_px": U(0.4, 0.7),
         "sharpen": U(0.2, 0.6), "jpeg_quality": I(85, 95),
         "glare": lambda rng: 0.0, "dof_blur_px": lambda rng: 0.0},
        (1.0, 0.0, 0.0), (0, 0), (0, 0),
        {"heavy": (0.6, 1.0), "coverage_min": 0.7, "overshoot_mm": (-0.2, 0.6), "stray_rate": 0.3}),
    "typical": Preset(
        "typical", "a player at a table: 0-25 deg tilt, any rotation, indoor light, moderate noise, q 70-92",
        {**_COMMON,
         "output_long_side": C([1600, 2048, 2560, 3264, 4000], [0.3, 0.2, 0.2, 0.15, 0.15]),
         "rotation_deg": _rotation_at_table,
         "tilt_deg": U(0, 25), "focal_35mm": U(24, 50), "fill": U(0.62, 0.92),
         "k1": U(-0.08, 0.05), "k2": U(-0.02, 0.02),
         "light_gradient": U(0, 0.35), "vignette": U(0, 0.3),
         "shadow": maybe(0.4, U(0.15, 0.45)), "shadow_softness": U(0.02, 0.1),
         "colour_temp_k": U(2700, 6500), "awb": U(0.6, 1.0),
         "wb_gain_r": U(0.92, 1.08), "wb_gain_b": U(0.92, 1.08), "exposure": U(0.75, 1.0),
         "read_noise": U(0.002, 0.008), "shot_noise": U(0.0008, 0.004),
         "defocus_px": U(0, 1.8), "motion_px": maybe(0.4, U(1, 3)), "optics_sigma_px": U(0.5, 0.9),
         "sharpen": U(0, 0.8), "jpeg_quality": I(70, 92),
         "glare": maybe(0.12, U(0.1, 0.35)), "dof_blur_px": maybe(0.2, U(0.8, 2.0))},
        (0.6, 0.3, 0.1), (2, 10), (1, 4),
        {"heavy": (0.45, 1.0), "coverage_min": 0.5, "overshoot_mm": (-0.4, 1.0), "stray_rate": 1.0}),
    "hard": Preset(
        "hard", "steep angles, strong shadows, warm light with WB error, curl, blur, q 60-75, small sizes",
        {**_COMMON,
         "output_long_side": C([1280, 1600, 1600, 2048]),
         "photo_orientation": C(["match", "cross"], [0.7, 0.3]),
         "rotation_deg": U(-180, 180),
         "tilt_deg": U(20, 40), "focal_35mm": U(24, 60), "fill": U(0.55, 0.85),
         "k1": U(-0.15, 0.08), "k2": U(-0.05, 0.05),
         "light_gradient": U(0.2, 0.6), "vignette": U(0.1, 0.45),
         "shadow": maybe(0.8, U(0.35, 0.7)), "shadow_softness": U(0.01, 0.08),
         "colour_temp_k": U(2700, 4000), "awb": U(0.3, 0.8),
         "wb_gain_r": U(0.85, 1.15), "wb_gain_b": U(0.85, 1.15), "exposure": U(0.6, 0.95),
         "read_noise": U(0.005, 0.015), "shot_noise": U(0.002, 0.008),
         "defocus_px": U(0.8, 3.0), "motion_px": maybe(0.6, U(1.5, 5)), "optics_sigma_px": U(0.6, 1.0),
         "sharpen": U(0, 1.0), "jpeg_quality": I(60, 75),
         "glare": maybe(0.3, U(0.2, 0.6)), "dof_blur_px": maybe(0.5, U(1.0, 3.5))},
        (0.3, 0.5, 0.2), (5, 20), (2, 8),
        {"heavy": (0.35, 0.9), "coverage_min": 0.35, "overshoot_mm": (-0.6, 1.6), "stray_rate": 2.0}),
}

#: Conditions added after the first sample set: drawn from their own random stream, so that
#: adding them left every earlier condition of a seed as it was.
LATE_SAMPLERS: dict[str, dict[str, Callable[[np.random.Generator], Any]]] = {
    "easy": {"tone_contrast": U(0.0, 0.25), "saturation": U(0.95, 1.15),
             "prior_jpeg_quality": lambda rng: 0},
    "typical": {"tone_contrast": U(0.0, 0.45), "saturation": U(0.9, 1.3),
                "prior_jpeg_quality": maybe(0.25, I(80, 95), 0)},
    "hard": {"tone_contrast": U(0.1, 0.6), "saturation": U(0.85, 1.35),
             "prior_jpeg_quality": maybe(0.5, I(70, 92), 0)},
}

CURL_KEYS = ("curl_type", "curl_amount_mm", "curl_axis", "curl_position", "curl_side", "fold_width_mm")
PENCIL_KEYS = ("pencil_brand", "pencil_jitter")


def condition_keys() -> list[str]:
    """Every condition name that can be overridden (``hand.*`` keys set the colouring hand)."""
    keys = (set(PRESETS["typical"].samplers) | set(CURL_KEYS) | set(PENCIL_KEYS)
            | set(LATE_SAMPLERS["typical"]))
    return sorted(keys)


def _parse_value(key: str, value: Any, template_value: Any) -> Any:
    """Coerce an override (maybe a string from the command line) to the type the key has."""
    if isinstance(value, str) and not isinstance(template_value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            if value.lower() in ("true", "false"):
                value = value.lower() == "true"
    if isinstance(template_value, bool):
        if not isinstance(value, bool):
            raise SimulatorError(f"condition {key!r} must be true or false, got {value!r}.")
    elif isinstance(template_value, (int, float)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SimulatorError(f"condition {key!r} must be a number, got {value!r}.")
        if isinstance(template_value, int) and not isinstance(template_value, bool):
            value = int(value)
        else:
            value = float(value)
    elif isinstance(template_value, list):
        if not (isinstance(value, list) and len(value) == len(template_value)):
            raise SimulatorError(f"condition {key!r} must be a list of {len(template_value)} numbers, got {value!r}.")
    return value


def sample_conditions(preset: str | Preset, rng: np.random.Generator,
                      overrides: Mapping[str, Any] | None = None, *,
                      rng_late: np.random.Generator | None = None) -> dict:
    """Draw every photo condition from ``preset``, then apply ``overrides``.

    Parameters
    ----------
    preset : str or Preset
        ``easy``, ``typical`` or ``hard``.
    rng : numpy Generator
    overrides : dict, optional
        ``{condition: value}``; values may be strings (parsed as JSON). ``hand.KEY`` sets one
        colouring habit (see :func:`~sheetcheck.simulator.paint.sample_hand`).
    rng_late : numpy Generator, optional
        Stream for the conditions in :data:`LATE_SAMPLERS` (default: ``rng``, after the rest).

    Returns
    -------
    dict
        Every condition, JSON-serialisable.

    Raises
    ------
    SimulatorError
        for an unknown preset, an unknown condition or a value of the wrong type.
    """
    if isinstance(preset, str):
        if preset not in PRESETS:
            raise SimulatorError(f"unknown preset {preset!r}.", hint=f"Presets: {', '.join(PRESETS)}.")
        preset = PRESETS[preset]
    brands = load_brands()["brands"]
    cond: dict[str, Any] = {"preset": preset.name}
    for key in sorted(preset.samplers):
        sampler = preset.samplers[key]
        if key == "pencil_brand":
            cond[key] = str(rng.choice(sorted(brands)))
        else:
            cond[key] = sampler(rng)
    cond["pencil_jitter"] = {"easy": 0.03, "typical": 0.06, "hard": 0.09}.get(preset.name, 0.06)
    kind = ("none", "bend", "fold")[int(rng.choice(3, p=preset.curl_probs))]
    cond["curl_type"] = kind
    cond["curl_amount_mm"] = (float(rng.uniform(*preset.curl_bend_mm)) if kind == "bend" else
                              float(rng.uniform(*preset.curl_fold_mm)) if kind == "fold" else 0.0)
    cond["curl_axis"] = str(rng.choice(["x", "y"]))
    cond["curl_position"] = float(rng.uniform(0.55, 0.85) if kind == "bend" else rng.uniform(0.35, 0.65))
    cond["curl_side"] = int(rng.choice([-1, 1]))
    cond["fold_width_mm"] = float(rng.uniform(30, 90))
    cond["hand"] = sample_hand(rng, **preset.hand)
    late = LATE_SAMPLERS.get(preset.name, LATE_SAMPLERS["typical"])
    for key in sorted(late):
        cond[key] = late[key](rng_late if rng_late is not None else rng)
    # round what was drawn, so that the truth records exactly the values that were used
    cond = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in cond.items()}
    cond["hand"] = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in cond["hand"].items()}

    overrides = dict(overrides or {})
    unknown = []
    for key, value in overrides.items():
        if key.startswith("hand."):
            hk = key[5:]
            if hk not in cond["hand"]:
                unknown.append(key)
                continue
            if hk == "style" and value not in FILL_STYLES:
                raise SimulatorError(f"hand.style must be one of {', '.join(FILL_STYLES)}, got {value!r}.")
            cond["hand"][hk] = _parse_value(key, value, cond["hand"][hk])
            continue
        if key not in cond or key == "preset":
            unknown.append(key)
            continue
        cond[key] = _parse_value(key, value, cond[key])
    if unknown:
        raise SimulatorError(
            f"unknown condition(s): {', '.join(sorted(unknown))}.",
            hint=f"Known conditions: {', '.join(condition_keys())}, and hand.<key> for "
                 f"{', '.join(sorted(cond['hand']))}.")
    _check_values(cond, brands)
    return cond


def _check_values(cond: dict, brands: Mapping) -> None:
    problems = []
    if cond["pencil_brand"] not in brands:
        problems.append(f"pencil_brand {cond['pencil_brand']!r} is not one of {', '.join(sorted(brands))}")
    if cond["background"] not in BACKGROUNDS:
        problems.append(f"background {cond['background']!r} is not one of {', '.join(BACKGROUNDS)}")
    if cond["curl_type"] not in ("none", "bend", "fold"):
        problems.append(f"curl_type {cond['curl_type']!r} is not one of none, bend, fold")
    if cond["photo_orientation"] not in ("match", "cross", "landscape", "portrait"):
        problems.append(f"photo_orientation {cond['photo_orientation']!r} must be match, cross, "
                        "landscape or portrait")
    if cond["curl_axis"] not in ("x", "y"):
        problems.append(f"curl_axis {cond['curl_axis']!r} must be x or y")
    if not 200 <= cond["output_long_side"] <= 8000:
        problems.append(f"output_long_side {cond['output_long_side']} must be 200..8000 px")
    if not 1.0 <= cond["aspect"] <= 3.0:
        problems.append(f"aspect {cond['aspect']} must be 1..3 (long side / short side)")
    if not (cond["prior_jpeg_quality"] == 0 or 1 <= cond["prior_jpeg_quality"] <= 100):
        problems.append(f"prior_jpeg_quality {cond['prior_jpeg_quality']} must be 0 (none) or 1..100")
    if not 0 <= cond["tone_contrast"] <= 1:
        problems.append(f"tone_contrast {cond['tone_contrast']} must be 0..1")
    if not 0 <= cond["saturation"] <= 3:
        problems.append(f"saturation {cond['saturation']} must be 0..3")
    if not 1 <= cond["jpeg_quality"] <= 100:
        problems.append(f"jpeg_quality {cond['jpeg_quality']} must be 1..100")
    if not 0 <= cond["tilt_deg"] <= 70:
        problems.append(f"tilt_deg {cond['tilt_deg']} must be 0..70")
    if not 0.1 <= cond["fill"] <= 1.0:
        problems.append(f"fill {cond['fill']} must be 0.1..1")
    if not 10 <= cond["focal_35mm"] <= 200:
        problems.append(f"focal_35mm {cond['focal_35mm']} must be 10..200")
    if not 1000 <= cond["colour_temp_k"] <= 15000:
        problems.append(f"colour_temp_k {cond['colour_temp_k']} must be 1000..15000")
    if not 0 <= cond["cutoff"] <= 0.6:
        problems.append(f"cutoff {cond['cutoff']} must be 0..0.6")
    if not (abs(cond["k1"]) <= 0.5 and abs(cond["k2"]) <= 0.3):
        problems.append(f"lens distortion k1={cond['k1']}, k2={cond['k2']} must be |k1| <= 0.5, |k2| <= 0.3")
    if not 0.05 <= cond["exposure"] <= 4:
        problems.append(f"exposure {cond['exposure']} must be 0.05..4")
    for k in ("offset_x", "offset_y"):
        if not -1 <= cond[k] <= 1:
            problems.append(f"{k} {cond[k]} must be -1..1 (use cutoff to push the page out of frame)")
    if not 0 <= cond["curl_position"] <= 1:
        problems.append(f"curl_position {cond['curl_position']} must be 0..1 (a fraction of the page)")
    if cond["fold_width_mm"] <= 0:
        problems.append(f"fold_width_mm {cond['fold_width_mm']} must be positive")
    for k in ("shadow", "page_shadow", "vignette", "awb", "light_gradient"):
        if not 0 <= cond[k] <= 1:
            problems.append(f"{k} {cond[k]} must be 0..1")
    for k in ("defocus_px", "motion_px", "optics_sigma_px", "read_noise", "shot_noise", "sharpen",
              "curl_amount_mm", "glare", "dof_blur_px"):
        if cond[k] < 0:
            problems.append(f"{k} {cond[k]} must not be negative")
    if problems:
        raise SimulatorError("bad condition value(s): " + "; ".join(problems) + ".",
                             hint="See docs/SIMULATOR.md for each condition's range.")


def pencils_for(cond: dict, rng: np.random.Generator) -> dict[str, list[int]]:
    """The pencils of this photo: the brand's colours with a per-photo jitter, plus graphite."""
    doc = load_brands()
    brand = doc["brands"][cond["pencil_brand"]]["pencils"]
    j = cond["pencil_jitter"]
    out = {}
    for c in PENCIL_ORDER:
        v = np.asarray(brand[c], float) * (1 + rng.normal(0, j, 3))
        out[c] = [int(x) for x in np.clip(np.round(v), 0, 255)]
    out["graphite"] = [int(x) for x in np.clip(np.asarray(doc["graphite"]) + rng.normal(0, 8), 0, 255)]
    out["ballpoint"] = list(doc.get("ballpoint", doc["graphite"]))
    return out
