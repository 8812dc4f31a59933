"""The photo simulator: the reader run backwards (template -> marks -> painted sheet -> camera).

Public API::

    simulate_photo(template, marks, *, seed, preset="typical", markers=True, overrides=None,
                   painter="default") -> SimulatedPhoto(image, jpeg, truth)
    random_marks(template, rng, *, fill=0.5) -> {region_id: mark}
    paint_sheet(sheet_rgb, template, marks, *, dpi, rng, pencils) -> painted sheet
    PRESETS: {"easy", "typical", "hard"}

The truth document is described in ``docs/SIMULATOR.md`` (format ``sheetcheck.truth/1``).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Mapping

import cv2
import numpy as np

from sheetcheck.simulator.camera import PageCamera, photograph
from sheetcheck.simulator.paint import (VARIED_CROSS_STYLES, VARIED_FILL_STYLES, check_marks,
                                        paint_sheet, paint_varied, sample_varied_hand,
                                        varied_pencils)
from sheetcheck.simulator.presets import (PRESETS, SimulatorError, _parse_value, condition_keys,
                                          load_brands, pencils_for, sample_conditions)
from sheetcheck.simulator.sheet import render_blank, render_dpi_for
from sheetcheck.simulator import heldout  # noqa: E402 - after presets, which it imports

__all__ = ["SimulatedPhoto", "simulate_photo", "random_marks", "paint_sheet", "PRESETS",
           "SimulatorError", "sample_conditions", "condition_keys", "load_brands", "TRUTH_FORMAT",
           "truth_json", "with_swatches", "PAINTERS", "varied_hand"]

TRUTH_FORMAT = "sheetcheck.truth/1"

#: Who colours the sheet: the main painter (``paint.py``, the one the reader is tuned on), the
#: independent held-out painter (``heldout.py``, for out-of-sample measurement only), or the
#: varied painter (``paint.paint_varied``: domain-randomised hands and pencils, for training).
PAINTERS = ("default", "heldout", "varied")

#: Readable kinds a player colours in (the others are lines, numbers or special).
_COLOURS = ("orange", "red", "blue", "green", "purple")


@dataclass(frozen=True)
class SimulatedPhoto:
    """One simulated photo.

    Attributes
    ----------
    image : (H, W, 3) uint8 ndarray
        RGB, the photo as the camera delivers it (before JPEG).
    jpeg : bytes
        The JPEG file (what tests and eval read).
    truth : dict
        The truth document (``docs/SIMULATOR.md``).
    """

    image: np.ndarray
    jpeg: bytes
    truth: dict


def random_marks(template, rng: np.random.Generator, *, fill: float = 0.5) -> dict[str, str]:
    """Plausible random marks for every readable region.

    Each region is marked with probability ``fill`` with one of the marks it allows (mostly a
    colour; ``crossed`` rarely, since it is a special move); calibration swatches are usually
    coloured in their own colour and sometimes left empty; number fields get ``written``.

    Parameters
    ----------
    template : Template
    rng : numpy Generator
    fill : float
        Fraction of regions that carry a mark (0..1).
    """
    if not 0 <= fill <= 1:
        raise ValueError(f"fill must be within 0..1, got {fill!r}")
    out: dict[str, str] = {}
    for r in template.readable_regions():
        allowed = [m for m in r.marks if m != "empty"]
        if r.kind == "swatch":
            out[r.id] = allowed[0] if allowed and rng.random() < 0.85 else "empty"
            continue
        if not allowed or rng.random() >= fill:
            out[r.id] = "empty"
            continue
        colours = [m for m in allowed if m in _COLOURS]
        others = [m for m in allowed if m not in _COLOURS]
        if colours and (not others or rng.random() < 0.85):
            out[r.id] = str(rng.choice(colours))
        else:
            out[r.id] = str(rng.choice(others or colours))
    return out


def with_swatches(template, marks: Mapping[str, str], rng: np.random.Generator, *,
                  p: float = 0.85) -> dict[str, str]:
    """``marks`` with the calibration swatches coloured in (each with probability ``p``).

    Rules engines play the game, not the calibration strip; players usually colour it too.
    Swatches already marked in ``marks`` are kept.
    """
    out = dict(marks)
    for r in template.readable_regions():
        if r.kind == "swatch" and out.get(r.id, "empty") == "empty":
            colours = [m for m in r.marks if m != "empty"]
            if colours and rng.random() < p:
                out[r.id] = colours[0]
    return out


def _streams(seed: int, n: int, *salt: str) -> list[np.random.Generator]:
    """Independent random streams, so fixing one condition does not reshuffle the others.

    The template id and preset are mixed in, so that seed 3 of one sheet or preset is not the
    same camera and background as seed 3 of another.
    """
    key = [int(seed) & 0xFFFFFFFF] + [zlib.crc32(x.encode()) for x in salt]
    return [np.random.default_rng(s) for s in np.random.SeedSequence(key).spawn(n)]


def _split_hand_overrides(overrides: Mapping | None) -> tuple[dict, dict]:
    """``overrides`` split into the camera's conditions and the varied painter's ``hand.*``."""
    rest, hand = {}, {}
    for k, v in (overrides or {}).items():
        (hand if str(k).startswith("hand.") else rest)[k] = v
    return rest, hand


def varied_hand(seed: int, template_id: str, preset: str, hand_overrides: Mapping | None = None,
                *, base_pencils: Mapping | None = None, jitter: float = 0.06
                ) -> tuple[dict, dict, dict, np.random.Generator]:
    """The varied painter's hand, pencils and painting stream for one photo.

    Drawn from streams of their own (the seed mixed with ``"varied"``), so the camera, light and
    background of a seed are the same as with the default painter, and the default painter's
    streams are untouched.

    Parameters
    ----------
    seed : int
    template_id, preset : str
        Mixed into the streams like the other streams of :func:`simulate_photo`.
    hand_overrides : dict, optional
        ``{"hand.KEY": value}`` to fix habits (keys of
        :func:`~sheetcheck.simulator.paint.sample_varied_hand`).
    base_pencils : dict, optional
        ``{colour: [r, g, b]}`` of a fixed brand (instead of hues drawn across brands).
    jitter : float
        Relative colour jitter of each pencil.

    Returns
    -------
    hand, pencils, strength : dict
    rng : numpy Generator
        The stream that paints the strokes.

    Raises
    ------
    SimulatorError
        for an unknown ``hand.*`` key or a bad value.
    """
    r_hand, r_pencil, r_paint = _streams(seed, 3, template_id, str(preset), "varied")
    hand = sample_varied_hand(r_hand)
    hand = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in hand.items()}
    unknown = []
    for key, value in (hand_overrides or {}).items():
        hk = str(key)[5:]
        if hk not in hand or hk == "painter":
            unknown.append(key)
            continue
        if hk == "style" and value not in VARIED_FILL_STYLES:
            raise SimulatorError(f"hand.style must be one of {', '.join(VARIED_FILL_STYLES)} for the "
                                 f"varied painter, got {value!r}.")
        if hk == "cross_style" and value not in VARIED_CROSS_STYLES:
            raise SimulatorError(f"hand.cross_style must be one of {', '.join(VARIED_CROSS_STYLES)} "
                                 f"for the varied painter, got {value!r}.")
        hand[hk] = _parse_value(key, value, hand[hk])
    if unknown:
        raise SimulatorError(f"unknown hand condition(s) for the varied painter: {', '.join(sorted(unknown))}.",
                             hint=f"Its hand keys: {', '.join(sorted(k for k in hand if k != 'painter'))}.")
    pencils, strength = varied_pencils(r_pencil, base=base_pencils, jitter=jitter)
    return hand, pencils, strength, r_paint


def simulate_photo(template, marks: Mapping[str, str], *, seed: int, preset: str = "typical",
                   markers: bool = True, overrides: Mapping | None = None,
                   painter: str = "default") -> SimulatedPhoto:
    """Paint ``marks`` on ``template`` and photograph it with a simulated phone.

    Parameters
    ----------
    template : Template
    marks : dict
        ``{region_id: mark}``; readable regions not named are ``empty``.
    seed : int
        Everything random is drawn from this seed: the same call gives the same photo.
    preset : str
        ``easy``, ``typical`` or ``hard`` (see :data:`PRESETS`).
    markers : bool
        Photograph a sheet printed with (default) or without its ArUco markers.
    overrides : dict, optional
        Conditions to fix (``{"rotation_deg": 180}``), see ``docs/SIMULATOR.md``.
    painter : str
        ``"default"`` (the main painter), ``"heldout"`` (the independent painter and pencil
        sets of :mod:`sheetcheck.simulator.heldout`; never tune the reader on it) or
        ``"varied"`` (wide-ranging hands and pencils for training, :func:`varied_hand`). The
        camera is the same: a seed gives the same camera, light and background with any painter.
        With ``"heldout"``, ``pencil_brand``, ``pencil_jitter`` and ``hand.*`` overrides go to the
        held-out painter; with ``"varied"``, ``hand.*`` overrides go to the varied hand and a
        ``pencil_brand`` override fixes the hues (otherwise they are drawn across brands). The
        truth's conditions record ``painter`` (absent means default).

    Returns
    -------
    SimulatedPhoto

    Raises
    ------
    StateError
        if a mark names an unknown region or a mark the region cannot carry.
    SimulatorError
        for an unknown preset or condition, or a bad condition value.
    """
    if painter not in PAINTERS:
        raise SimulatorError(f"unknown painter {painter!r}.", hint=f"Painters: {', '.join(PAINTERS)}.")
    check_marks(template, marks)
    full = {r.id: marks.get(r.id, "empty") for r in template.readable_regions()}
    r_cond, r_paint, r_pencil, r_cam, r_late = _streams(seed, 5, template.id, str(preset))
    held = None
    if painter == "heldout":
        # the held-out painter draws from its own streams; the camera streams stay as they are
        overrides, paint_overrides = heldout.split_overrides(overrides)
        held, r_held = heldout.heldout_conditions(seed, template.id, str(preset), paint_overrides)
    if painter == "varied":
        overrides, hand_overrides = _split_hand_overrides(overrides)
    cond = sample_conditions(preset, r_cond, overrides, rng_late=r_late)
    if held is not None:
        cond.update(held)
    if painter == "varied":
        # the default hand drawn by sample_conditions is replaced; its draws stay where they
        # were, so every camera condition of the seed is the same as the default painter's
        fixed = "pencil_brand" in (overrides or {})
        base = load_brands()["brands"][cond["pencil_brand"]]["pencils"] if fixed else None
        vhand, vpencils, vstrength, r_varied = varied_hand(
            seed, template.id, str(preset), hand_overrides, base_pencils=base,
            jitter=cond["pencil_jitter"])
        cond["hand"] = vhand
        cond["painter"] = "varied"
        cond["pencil_strength"] = vstrength
        if not fixed:
            cond["pencil_brand"] = "varied"
    ls = cond["output_long_side"]
    ss = int(round(ls / cond["aspect"]))
    orient = cond["photo_orientation"]
    if orient in ("match", "cross"):
        # does the page appear wider than tall in the photo (its in-plane rotation decides)?
        rot = math.radians(cond["rotation_deg"])
        pw, ph = template.width_mm, template.height_mm
        wide = abs(pw * math.cos(rot)) + abs(ph * math.sin(rot)) >= \
            abs(pw * math.sin(rot)) + abs(ph * math.cos(rot))
        landscape = wide if orient == "match" else not wide
    else:
        landscape = orient == "landscape"
    W, H = (ls, ss) if landscape else (ss, ls)
    cam = PageCamera(page_mm=(template.width_mm, template.height_mm), size=(W, H),
                     rotation_deg=cond["rotation_deg"], tilt_deg=cond["tilt_deg"],
                     tilt_axis_deg=cond["tilt_axis_deg"], focal_35mm=cond["focal_35mm"],
                     fill=cond["fill"], offset=(cond["offset_x"], cond["offset_y"]),
                     k1=cond["k1"], k2=cond["k2"],
                     curl={"type": cond["curl_type"], "amount_mm": cond["curl_amount_mm"],
                           "axis": cond["curl_axis"], "position": cond["curl_position"],
                           "side": cond["curl_side"], "width_mm": cond["fold_width_mm"]},
                     cutoff=cond["cutoff"], cutoff_corner=cond["cutoff_corner"])
    density = cam.max_px_per_mm()
    # render finer than the photo samples the page (pencil strokes are thinner than a photo
    # pixel on small photos), then low-pass before the warp so hatching does not alias
    dpi = render_dpi_for(max(density * 1.25, 100 / 25.4))
    blank = render_blank(template, dpi=dpi, markers=markers)
    if painter == "varied":
        pencils = vpencils
        painted = paint_varied(blank, template, full, dpi=dpi, rng=r_varied, pencils=pencils,
                               hand=vhand, strength=vstrength)
    elif held is None:
        pencils = pencils_for(cond, r_pencil)
        painted = paint_sheet(blank, template, full, dpi=dpi, rng=r_paint, pencils=pencils,
                              hand=cond["hand"])
    else:
        pencils = held["pencils"]
        painted = heldout.paint_heldout(blank, template, full, dpi=dpi, rng=r_held, pencils=pencils,
                                        hand=held["hand"],
                                        pencil_set=heldout.load_heldout_sets()["sets"][held["pencil_brand"]])
    ratio = dpi / 25.4 / density
    if ratio > 1.3:
        painted = cv2.GaussianBlur(painted, (0, 0), 0.4 * ratio)
    image, extras = photograph(painted, dpi=dpi, cam=cam, cond=cond, rng=r_cam)
    bgr = cv2.cvtColor(image, cv2.COLOR_RGB2BGR)
    if cond["prior_jpeg_quality"]:
        # the photo was a JPEG before (a messenger or a gallery app re-encodes it): the blocks
        # and ringing of the first encoding survive into the second
        ok, first = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(cond["prior_jpeg_quality"])])
        bgr = cv2.imdecode(first, cv2.IMREAD_COLOR)
        image = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
    ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(cond["jpeg_quality"])])
    if not ok:  # pragma: no cover - OpenCV always encodes a uint8 image
        raise SimulatorError("JPEG encoding failed.")
    conditions = dict(cond)
    conditions.update({"output_size": [W, H], "render_dpi": dpi, "pencils": pencils, **extras})
    truth = _truth(template, full, cam, preset=cond["preset"], seed=seed, markers=markers,
                   conditions=conditions)
    image.flags.writeable = False
    return SimulatedPhoto(image=image, jpeg=buf.tobytes(), truth=truth)


def truth_json(truth: dict) -> str:
    """The truth document as JSON text: indented, with number lists kept on one line."""
    text = json.dumps(truth, indent=1)
    # collapse lists of plain numbers ("[\n  1.5,\n  2.0\n ]" -> "[1.5, 2.0]") for readability
    return re.sub(r"\[\s*(-?[\d.eE+-]+(?:,\s*-?[\d.eE+-]+)*)\s*\]",
                  lambda m: "[" + ", ".join(x.strip() for x in m.group(1).split(",")) + "]", text) + "\n"


def _r(a, nd=3):
    return np.round(np.asarray(a, float), nd).tolist()


def _truth(template, marks, cam: PageCamera, *, preset, seed, markers, conditions) -> dict:
    regions = template.readable_regions()
    centres = cam.forward(np.array([r.shape.centre() for r in regions], float))
    pw, ph = cam.page_mm
    page = np.array([[0, 0], [pw, 0], [pw, ph], [0, ph]], float)
    flat = cam.curl.get("type", "none") == "none" or not cam.curl.get("amount_mm")
    return {
        "format": TRUTH_FORMAT,
        "template": template.id,
        "template_version": template.version,
        "game": template.game,
        "level": template.level,
        "preset": preset,
        "seed": int(seed),
        "markers": bool(markers),
        "image_size": [int(cam.size[0]), int(cam.size[1])],
        "marks": dict(marks),
        "homography": _r(cam.homography / cam.homography[2, 2], 9),
        "homography_exact": bool(flat and not (cam.k1 or cam.k2)),
        "lens": {"model": "radial", "k1": cam.k1, "k2": cam.k2, "centre_px": _r(cam.centre),
                 "focal_px": round(float(cam.f), 3)},
        "curl": dict(cam.curl),
        "page_corners_px": _r(cam.forward(page)),
        "marker_corners_px": ({str(m.id): _r(cam.forward(m.corners_mm())) for m in template.markers}
                              if markers else {}),
        "region_centres_px": {r.id: _r(c, 2) for r, c in zip(regions, centres)},
        "conditions": conditions,
    }
