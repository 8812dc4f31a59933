"""The reader end to end: photo -> decode -> locate -> rectify -> light -> marks.

:func:`read_photo` is the one function the command line, the batch runner and the server call.
Each stage is a pure function in its own module; this module only chains them, times them and
caches what depends on the template alone (the clean render and the sampling geometry). With
two threads allowed (``cv2.getNumThreads() > 1``, the default on a two-core machine, while a
core is idle; a batch worker sets one), independent work within and between stages runs side
by side (``vision._geom_threads``), with the same results.
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from calibration.template import Template
from sheetcheck.errors import InputFileError, NoColourError
from vision.colour import Palette, load_palette
from vision._geom_threads import blas_one_thread, start
from vision.learned import resolve_reader
from vision.light import (NormalisedLight, normalise_light, print_pixels, tone_correction_for,
                          with_tone)
from vision.objects import object_mask
from vision.patch_reader import (AGREE_CONFIDENCE_MIN, AGREE_CROSSED_MAX, DARK_EMPTY,
                                 DISSENT_EMPTY_KINDS, DISSENT_MARKS, LIFT_BESIDE,
                                 LIFTABLE, LIFTABLE_CHECKS, MARKS, SWITCH_FROM,
                                 confirm as confirm_by_patches,
                                 patch_geometry, region_patches, resolve_patch_reader)
from vision.marks import (BLANK_DOUBT_MAX, BLANK_FAINT_MAX, BLANK_HAND_MIN, BLANK_HAND_MIN_WRITTEN,
                          BLANK_LEARNED_MIN, BLANK_ZERO, REVIEW_THRESHOLD, SURE_FLOORS,
                          SURE_KIND_FLOORS,
                          RegionReading, SheetModel, build_sheet_model, check_coarse_writing,
                          classify_sheet)

#: Format tag of the JSON a reading serialises to (docs/READ_JSON.md). Bump on any change an
#: outside tool could notice.
READ_FORMAT = "sheetcheck.read/1"

#: Resolution of the rectified sheet the marks are read at. 100 dpi puts ~4 px on a millimetre:
#: a pencil stroke spans several pixels and a 4 mm connection band ~9 px, while an A4 sheet stays
#: ~1 MP (fast).
READ_DPI = 100.0

STAGES = ("decode", "locate", "rectify", "light", "classify")


@dataclass(frozen=True)
class SheetReading:
    """Everything the reader found in one photo.

    Attributes
    ----------
    photo : str or None
        Path (or a caller's label) of the photo.
    template : Template
    location : SheetLocation
        From ``vision.locate``.
    readings : mapping of region id -> RegionReading
        Every readable region, in template order.
    palette : Palette
        The pencil palette as calibrated on this photo.
    timings_ms : mapping
        Per stage (decode, locate, rectify, light, classify) and ``total``. ``locate`` ends
        when the homography is known: locate's registration and blur checks run later, on the
        helper thread beside ``light`` when a second core is allowed (and so are in no
        stage's time unless ``classify`` has to wait for them at its end), else in the
        caller right after ``rectify`` (timed with ``locate``).
    details : mapping
        Photo size and format, light and refinement figures, thresholds.
    rectified, normalised : ndarray or None
        The stage pictures (kept only when ``keep_images=True``; for debug output).
    matrix : ndarray or None
        The learned reader's feature matrix (only with ``keep_matrix=True``).
    """

    photo: str | None
    template: Template
    location: Any
    readings: Mapping[str, RegionReading]
    palette: Palette
    timings_ms: Mapping[str, float]
    details: Mapping[str, Any] = field(default_factory=dict)
    rectified: np.ndarray | None = None
    normalised: np.ndarray | None = None
    #: (R, F) learned-reader features per readable region (``vision.marks.FEATURE_NAMES``),
    #: kept only with ``keep_matrix=True`` (dataset building)
    matrix: np.ndarray | None = None
    #: ``(region_id, HueSample)`` the palette was calibrated on (``vision.marks.SheetMarks``)
    calibration_samples: tuple = ()
    #: every region's patch as the patch reader sees it (``vision.patch_reader``), kept only
    #: with ``keep_patches=True`` (dataset building): ``(ids, (R, S, S, 5) uint8, kinds,
    #: allowed (R, 8) bool)``
    patches: tuple | None = None

    @property
    def flagged(self) -> list[str]:
        """Ids of regions a person should look at."""
        return [rid for rid, r in self.readings.items() if r.review]

    def marks(self) -> dict[str, str]:
        """``{region_id: mark}`` (what the rules engines take)."""
        return {rid: r.mark for rid, r in self.readings.items()}

    def to_json(self) -> dict:
        """The public ``sheetcheck.read/1`` document (docs/READ_JSON.md)."""
        loc = self.location
        return {
            "format": READ_FORMAT,
            "photo": self.photo,
            "template": self.template.id,
            "template_version": self.template.version,
            "game": self.template.game,
            "location": {"method": loc.method, "markers_found": [int(m) for m in loc.markers_found],
                         "quality": round(float(loc.quality), 4),
                         # (added in session 30, only when true: a mirrored photo, read flipped)
                         **({"mirrored": True} if loc.details.get("mirrored") else {})},
            "regions": {rid: r.to_json() for rid, r in self.readings.items()},
            "review_count": len(self.flagged),
            "palette": self.palette.to_json(),
            "details": _jsonable(self.details),
            "timings_ms": {k: round(float(v), 2) for k, v in self.timings_ms.items()},
        }


def _jsonable(x):
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, float)):
        return round(float(x), 4)
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist()) if x.size <= 32 else f"<array {x.shape}>"
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    return str(x)


_model_lock = threading.Lock()
_models: dict[tuple, SheetModel] = {}


def sheet_model(template: Template, *, dpi: float = READ_DPI) -> SheetModel:
    """The sampling geometry of ``template`` at ``dpi`` (built once per template version and
    dpi, then shared: the render and the region masks depend on nothing else)."""
    from calibration.render import render_sheet

    key = (template.id, template.version, template.source, float(dpi))
    with _model_lock:  # one build per key even when the server reads from several threads
        m = _models.get(key)
        if m is None:
            if len(_models) >= 32:
                _models.pop(next(iter(_models)))
            m = build_sheet_model(template, render_sheet(template, dpi=dpi, markers=True).image,
                                  dpi=dpi)
            # the geometry stages' per-template references too, so that no photo (the first of
            # each template in a server or a batch worker) pays for building them
            from vision import locate, rectify
            locate.prepare(template)
            rectify.prepare(template, dpi=dpi)
            # and what classify builds from the model alone (30-55 ms a template, which the
            # first photo of each template paid in its classify stage)
            from vision import marks
            marks.prepare(m)
            # and the sample of the template's black print that the tone correction is
            # measured on (~50 ms a template; the bundled readers since reader-v11 read with it)
            from vision.light import print_pixels
            print_pixels(m, on=True)
            # and the patch reader's windows (session 45; the bundled model's size and margin)
            patch_geometry(template, m.expected, dpi=dpi)
            _models[key] = m
        return m


def read_photo(photo, *, template_id: str | None = None, dpi: float = READ_DPI,
               palette: Palette | None = None, review_threshold: float = REVIEW_THRESHOLD,
               refine: bool = True, keep_images: bool = False, label: str | None = None,
               max_long_side: int | None = 2000, keep_matrix: bool = False,
               learned="default", patch_reader="default",
               keep_patches: bool = False) -> SheetReading:
    """Read one photo of a filled sheet.

    Parameters
    ----------
    photo : bytes, str or os.PathLike
        The encoded photo, or a path to it.
    template_id : str, optional
        Skip identification and use this template.
    dpi : float
        Resolution at which the sheet is rectified and read.
    palette : Palette, optional
        Prior pencil palette (default ``calibration/palettes/default.json``).
    review_threshold : float
        Confidence below which a reading is flagged for review.
    refine : bool
        Let rectification correct local misregistration (curl, folds, lens).
    keep_images : bool
        Keep the rectified and normalised pictures on the result (for debug output).
    label : str, optional
        What to call the photo in the result (default: the path).
    max_long_side : int or None
        Decode size limit handed to ``vision.decode``.
    keep_matrix : bool
        Keep the per-region feature matrix of the learned reader on the result
        (``scripts/reader_dataset.py``).
    learned : "default", None or vision.learned.LearnedReader
        The second reader (``vision.marks.classify_sheet``); None reads with the hand
        reader alone.
    patch_reader : "default", None or vision.patch_reader.PatchReader
        The third opinion, which may lift the readers' own doubt on a flagged region and
        correct a flagged mark, which then stays flagged (``vision.patch_reader.confirm``);
        None leaves the two readers' verdicts as they are (and so does ``learned=None``).
    keep_patches : bool
        Keep every region's patch on the result (``scripts/patch_dataset.py``).

    Returns
    -------
    SheetReading

    Raises
    ------
    SheetcheckError
        InputFileError, NotAnImageError, CorruptImageError, ImageTooLargeError (decode);
        NoSheetFoundError, SheetCutOffError, SeveralSheetsError, UnknownTemplateError,
        BlurryPhotoError (locate);
        NoColourError (a black-and-white photo of a sheet).
    """
    with blas_one_thread:  # (the read's own threads, not BLAS's: vision._geom_threads)
        return _read_photo(photo, template_id=template_id, dpi=dpi, palette=palette,
                           review_threshold=review_threshold, refine=refine,
                           keep_images=keep_images, label=label, max_long_side=max_long_side,
                           keep_matrix=keep_matrix, learned=learned,
                           patch_reader=patch_reader, keep_patches=keep_patches)


def _read_photo(photo, *, template_id, dpi, palette, review_threshold, refine, keep_images,
                label, max_long_side, keep_matrix, learned, patch_reader,
                keep_patches) -> SheetReading:
    """:func:`read_photo`'s work (inside its BLAS limit)."""
    from vision.decode import colourless, decode_photo, load_photo
    from vision.locate import locate_sheet
    from vision.rectify import rectify_sheet

    t0 = time.perf_counter()
    timings: dict[str, float] = {}
    if isinstance(photo, (bytes, bytearray, memoryview)):
        decoded = decode_photo(bytes(photo), max_long_side=max_long_side)
    elif isinstance(photo, (str, os.PathLike)):
        decoded = load_photo(photo, max_long_side=max_long_side)
        label = label if label is not None else str(photo)
    else:
        raise InputFileError(f"cannot read a photo from a {type(photo).__name__}.",
                             hint="Pass the photo's bytes or a path to it.")
    t1 = time.perf_counter()
    timings["decode"] = (t1 - t0) * 1000
    # the homography first: locate's registration and blur checks wait for the helper
    # thread's idle time (below), so that rectification has it for its own tiles
    location, complete = locate_sheet(decoded.image, template_id=template_id, defer_checks=True)
    if colourless(decoded.image):
        complete()  # (a photo that locate's checks refuse says so first)
        t = location.template
        raise NoColourError(
            f"the photo is black and white: the sheet was found ({t.id}, {t.title}), but its "
            "pencils can only be told apart by their colour.",
            hint="Send the colour photo: switch off the camera's black-and-white (mono) "
                 "filter or the scanner's greyscale mode, and take the photo again.")
    t2 = time.perf_counter()
    timings["locate"] = (t2 - t1) * 1000
    try:
        rect = rectify_sheet(decoded.image, location, dpi=dpi, refine=refine)
    except Exception:
        complete()  # (the checks' error comes first, as when they ran before)
        raise
    t3 = time.perf_counter()
    timings["rectify"] = (t3 - t2) * 1000
    template = location.template
    model = sheet_model(template, dpi=dpi)
    t3m = time.perf_counter()
    # building a template's model happens once per process (then cached): timed apart
    timings["model"] = (t3m - t3) * 1000
    # locate's checks on the helper thread, beside the light normalisation (which has no use
    # for it) and classify's start; on one thread, here and now (timed with locate)
    checks = start(complete)
    t3 = time.perf_counter()
    timings["locate"] += (t3 - t3m) * 1000
    if checks.done():
        location = checks.result()  # (a blurred photo stops here)
    try:
        valid = np.asarray(rect.valid, bool) if rect.valid is not None else None
        learned = resolve_reader(learned)  # a missing or damaged model is a ReaderModelError
        reader3 = resolve_patch_reader(patch_reader) if learned is not None else None
        # the light the reader was trained on (tone correction or not) is the light it reads
        pp = print_pixels(model, on=tone_correction_for(learned))
        light = normalise_light(rect.image, paper_mask=model.paper_mask, valid=valid,
                                print_pixels=pp)
        t4 = time.perf_counter()
        timings["light"] = (t4 - t3) * 1000
        if checks.done():
            location = checks.result()
        pconf, pconf_parts = photo_confidence(location, rect)

        def classify(light):
            return classify_sheet(light, model, palette=palette or load_palette("default"),
                                  valid=valid, review_threshold=review_threshold,
                                  photo_confidence=pconf,
                                  photo_features=photo_features(pconf_parts, rect, light),
                                  keep_matrix=keep_matrix, learned=learned)
        sheet = classify(light)
        if sheet.objects and pp is not None:
            # An object lying on the sheet (a pencil) over black print is no print: taken for
            # it, its colour set the tone correction of the whole photo (session 39: a dark
            # purple pencil over the title turned the exponents (1.01, 1.01, 0.98) -> (1.03,
            # 0.84, 1.07), and graphite crossings 50-70 mm away read "green" at 0.998). The
            # tone is measured again without the print under it and its shadow, and when it
            # changes the sheet is read again. (Its paper is left as it is: measured without
            # the blocks under the object, the light showed the pencil in its own colour and
            # the readers read more of the regions under it wrong, one with confidence:
            # docs/EVALUATION.md, session 39.)
            hidden = object_mask(sheet.objects, model.shape, model.dpi)
            again = with_tone(light, pp[~hidden.reshape(-1)[pp]], valid=valid)
            if again.tone != light.tone:
                light = again
                sheet = classify(light)
    except Exception:
        checks.result()  # (the checks' error comes first)
        raise
    location = checks.result()
    t5 = time.perf_counter()
    timings["classify"] = (t5 - t4) * 1000
    # (sessions 45-46) the third opinion on the flagged regions (vision.patch_reader)
    readings, patches_done = sheet.readings, None
    if reader3 is not None:
        readings, patches_done = confirm_by_patches(readings, light, template,
                                                    model.expected, dpi=dpi, reader=reader3,
                                                    review_threshold=review_threshold,
                                                    objects=bool(sheet.objects))
    # (session 47) a number field's "empty" on a photo too coarse to show pencil writing
    ref = rect.refinement if isinstance(rect.refinement, Mapping) else {}
    pxr = ref.get("photo_px_per_frame_px")
    page_px_per_mm = float(pxr) * dpi / 25.4 if pxr is not None else None
    readings = check_coarse_writing(readings, page_px_per_mm, review_threshold)
    kept_patches = None
    if keep_patches:
        geo = patch_geometry(template, model.expected, dpi=dpi,
                             **({"size": reader3.size, "margin_mm": reader3.margin_mm}
                                if reader3 is not None else {}))
        kept_patches = (geo.ids, region_patches(light, geo, range(len(geo.ids))),
                        geo.kinds, geo.allowed)
    t6 = time.perf_counter()
    timings["patches"] = (t6 - t5) * 1000
    timings["total"] = (t6 - t0) * 1000
    details = {
        "photo_size": list(decoded.original_size),
        "photo_format": decoded.format,
        "decode_scale": float(decoded.scale),
        "dpi": float(dpi),
        "light": {"paper_coverage": light.paper_coverage,
                  "white_balance": list(light.white_balance),
                  "shading_range": light.shading_range,
                  # (session 39) the per-channel tone exponents (vision.light.tone_exponents)
                  "tone": [round(float(v), 4) for v in light.tone]},
        "thresholds": dict(sheet.thresholds),
        "refinement": _small(rect.refinement),
        "review_threshold": float(review_threshold),
        "photo_confidence": {"value": pconf, **pconf_parts},
        # (session 47) the page's resolution in the photo, px per mm of the printed page
        "page_px_per_mm": (round(page_px_per_mm, 3) if page_px_per_mm is not None else None),
        # (session 39) marked regions under an object lying on the sheet, which the pencils'
        # calibration left out (vision.marks.classify_sheet, left_out)
        "calibration_left_out": list(sheet.calibration_left_out),
        # (session 45) the patch reader: how many flagged regions it read and confirmed
        "patch_reader": patches_done,
        # (session 39) objects found lying on the sheet (a pencil): their axis's ends and
        # width in template mm; the tone was measured again without the print under them
        "objects": [{"from_mm": [round(o[0], 1), round(o[1], 1)],
                     "to_mm": [round(o[2], 1), round(o[3], 1)], "width_mm": round(o[4], 1)}
                    for o in sheet.objects],
        # which readers decided (a reading is only comparable with one made the same way)
        "reader": ({"readers": ["hand", "learned"], "model": learned.meta.get("id"),
                    "model_created": learned.meta.get("created"), "kind": learned.kind,
                    "decision": _rule_dict(learned.rule),
                    # the committee's members, whose agreement a confident reading needed,
                    # and how it decides ("second_opinions": each by its own rule; "mean":
                    # the rule above judges their averaged probabilities, reader-v12 on)
                    "second_opinions": [m.meta.get("id") for m in learned.committee],
                    "combine": learned.combine,
                    # (session 33: a blank region's "empty" confirmed, vision.marks._confirm_blank)
                    "confirm_blank": {**_BLANK_RULE, "zero": list(BLANK_ZERO)},
                    # (session 35: colours both readers are sure of confirmed,
                    # vision.marks._confirm_sure)
                    "confirm_sure": {"doubt_max": _SURE_RULE["doubt_max"],
                                     "by_mark": {m: dict(v)
                                                 for m, v in _SURE_RULE["by_mark"].items()},
                                     "by_kind": [dict(v) for v in _SURE_RULE["by_kind"]]},
                    # (session 45) the third opinion and when it lifts a flag
                    "patch_reader": ({"model": reader3.id, "lifts": list(LIFTABLE),
                                      # (session 49) the checks' flags on an "empty" it lifts
                                      # at ``thresholds``, and the flags beside which it lifts
                                      "lifts_checks": list(LIFTABLE_CHECKS),
                                      "lifts_beside": list(LIFT_BESIDE),
                                      "thresholds": {m: t for m, t in
                                                     reader3.thresholds.items()
                                                     if m in MARKS},
                                      # (session 47) lower, when both readers named the mark
                                      "thresholds_with_readers": {
                                          m: t for m, t in reader3.agree_thresholds.items()
                                          if m in MARKS},
                                      # (session 49) when those lower thresholds apply
                                      "with_readers_if": {
                                          "confidence_min": AGREE_CONFIDENCE_MIN,
                                          "colour_crossed_max": AGREE_CROSSED_MAX},
                                      # (session 47) an "empty" with dark texels
                                      "dark_empty": ({
                                          "threshold": reader3.thresholds.get(DARK_EMPTY),
                                          "with_readers":
                                              reader3.agree_thresholds.get(DARK_EMPTY)}
                                          if reader3.dark_empty_split else None),
                                      "photo_flagged_max": reader3.photo_flagged_max,
                                      "watches": list(DISSENT_MARKS),
                                      # (session 48) and confident "empty" readings of these
                                      "watches_empty_in": list(DISSENT_EMPTY_KINDS),
                                      # (session 46) flagged marks it corrects, still flagged
                                      # (session 50) but confirmed at "confirms_at" where
                                      # a flag may be lifted
                                      "corrects": {"from": list(SWITCH_FROM),
                                                   "to": dict(reader3.switch_thresholds),
                                                   "confirms_at":
                                                       dict(reader3.switch_confirm_thresholds)},
                                      # (session 46) where its convolutions ran
                                      "engine": reader3.engine}
                                     if reader3 is not None else None)}
                   if learned is not None else {"readers": ["hand"], "model": None}),
    }
    return SheetReading(label, template, location, readings, sheet.palette, timings,
                        details, rect.image if keep_images else None,
                        light.to_srgb() if keep_images else None, sheet.matrix,
                        sheet.calibration_samples, kept_patches)


#: ``details.reader.confirm_blank``: when an "empty" reading below the model's thresholds is
#: confirmed (vision.marks._confirm_blank).
_BLANK_RULE = {"zero": list(BLANK_ZERO), "faint_max": BLANK_FAINT_MAX,
               "hand_min": BLANK_HAND_MIN, "learned_min": BLANK_LEARNED_MIN,
               "doubt_max": BLANK_DOUBT_MAX,
               # (session 35: a number field's floor)
               "hand_min_written": BLANK_HAND_MIN_WRITTEN}
#: ``details.reader.confirm_sure``: when a colour reading below the model's
#: thresholds is confirmed (vision.marks._confirm_sure).
_SURE_RULE = {"doubt_max": BLANK_DOUBT_MAX,
              "by_mark": {m: {"hand_min": h, "learned_min": l}
                          for m, (h, l) in SURE_FLOORS.items()},
              # (session 37: a mark on one kind of region, ahead of by_mark)
              "by_kind": [{"kind": k, "mark": m, "hand_min": h, "learned_min": l}
                          for (k, m), (h, l) in SURE_KIND_FLOORS.items()]}


_rule_lock = threading.Lock()
_rule_dicts: dict[int, tuple[Any, bytes]] = {}


def _rule_dict(rule) -> dict:
    """``dataclasses.asdict(rule)``, a new dict every call (the caller's to change), without
    its cost: asdict deep-copies the rule's nested thresholds (~0.6-1 ms of plain Python on
    every read, with reader-v7's tiers), so the rule's dict is built once per rule and each
    read unpickles a copy of it (~0.02 ms; the same keys, values and types)."""
    with _rule_lock:
        hit = _rule_dicts.get(id(rule))
        if hit is None or hit[0] is not rule:
            if len(_rule_dicts) >= 16:
                _rule_dicts.clear()
            # (the rule itself is kept with its dict, so that its id cannot be reused)
            hit = _rule_dicts[id(rule)] = (rule, pickle.dumps(asdict(rule), protocol=5))
    return pickle.loads(hit[1])


def photo_features(parts: Mapping[str, float], rect, light) -> dict[str, float]:
    """The photo-level measurements the learned reader sees (keys of
    ``vision.marks.PHOTO_FEATURE_DEFAULTS``): the photo-confidence parts, the registration
    residual and resolution, and the light normalisation's shading range and white balance."""
    ref = rect.refinement if isinstance(rect.refinement, Mapping) else {}
    res = ref.get("residual_px_after", ref.get("residual_px_before"))
    wb = list(getattr(light, "white_balance", None) or [])
    out = {"registration": parts.get("registration"), "resolution": parts.get("resolution"),
           "locate": parts.get("locate"), "residual_px": res,
           "photo_px_per_frame_px": ref.get("photo_px_per_frame_px"),
           "shading_range": getattr(light, "shading_range", None),
           "wb_blue_over_red": (float(wb[2]) / max(float(wb[0]), 1e-6)) if len(wb) == 3 else None,
           "paper_coverage": getattr(light, "paper_coverage", None)}
    return {k: float(v) for k, v in out.items() if isinstance(v, (int, float, np.floating, np.integer))}


def _sig(x: float) -> float:
    return float(1.0 / (1.0 + np.exp(-np.clip(x, -40, 40))))


#: The registration residual (px at the read dpi, ``residual_px_after``) where the photo gate
#: closes: beyond it no reading of the photo is confident (``photo_confidence``'s cap falls
#: under the learned rule's ``photo_gate``, 0.5). Session 40 moved it from 0.8 to 1.0 px: on
#: 204 easy and typical photos of the spent corpus 4100000 the residual did not rank the true
#: misregistration (the rectifier's map against the simulator's full geometry at every
#: region's centre: correlation 0.04; median error 0.36-0.49 px in every band of residual,
#: 0.39 px on the one photo over 0.8 px), and of the 244 photos of six spent default
#: corpora (3200000-3500000, 4000000, 4100000) the gate held, the 57 with residuals of
#: 0.8-1.0 px (8 of them easy or typical, with no wrong reading at all) are read with no
#: confident error when the reader's own rule decides instead: 1,580 right readings no longer
#: flagged, none wrong (docs/EVALUATION.md, session 40).
REGISTRATION_GATE_PX = 1.0
#: Where the learned reader's ``photo_registration`` feature crosses 0.5: reader-v15 was
#: trained and calibrated on this measure, so it stays (only the gate moved).
REGISTRATION_FEATURE_PX = 0.8


def photo_confidence(location, rect) -> tuple[float, dict]:
    """How far any reading of this photo can be trusted, from the geometry alone.

    * registration: the median misalignment of the printed lines after local refinement
      (px at the read dpi). At 100 dpi, 0.5 px is 0.13 mm: beyond ~0.7 px (0.18 mm, a
      quarter of the erosion margin) region outlines and print bleed into the sampled pixels;
    * resolution: photo pixels per rectified pixel. Below ~0.5 the sheet was upsampled from a
      small or distant photo and pencil texture is lost;
    * the locator's own quality.

    Returns the cap (0..1, the minimum of the gate's three parts: ``registration_gate``,
    ``resolution``, ``locate``) and the parts. ``registration`` is the learned reader's
    feature (centred on ``REGISTRATION_FEATURE_PX``, as reader-v15 was trained);
    ``registration_gate`` the same measure centred on ``REGISTRATION_GATE_PX``, which the cap
    takes.
    """
    ref = rect.refinement if isinstance(rect.refinement, Mapping) else {}
    res = ref.get("residual_px_after", ref.get("residual_px_before"))
    pxr = ref.get("photo_px_per_frame_px")

    def registration(centre: float) -> float:
        return (_sig((centre - float(res)) / 0.04) if res is not None and np.isfinite(res)
                else 0.95)
    parts = {}
    # Each part is ~1 while the geometry is sound and falls through the review threshold
    # only past its limit: the cap is a gate for bad photos, not a tax on good ones.
    parts["registration"] = registration(REGISTRATION_FEATURE_PX)
    parts["resolution"] = _sig((float(pxr) - 0.48) / 0.015) if pxr is not None else 1.0
    # (the locator gives quality <= 0.3 to an identification it is unsure of)
    parts["locate"] = _sig((float(location.quality) - 0.35) / 0.03)
    parts["registration_gate"] = registration(REGISTRATION_GATE_PX)
    cap = min(parts["registration_gate"], parts["resolution"], parts["locate"])
    return float(cap), {k: round(v, 4) for k, v in parts.items()}


def _small(d) -> dict:
    """Only the scalar figures of a stage's details (no big arrays in the JSON)."""
    if not isinstance(d, Mapping):
        return {}
    out = {}
    for k, v in d.items():
        if isinstance(v, (int, float, str, bool, np.floating, np.integer)) or v is None:
            out[str(k)] = v
        elif isinstance(v, (list, tuple)) and len(v) <= 8 and all(
                isinstance(e, (int, float, np.floating, np.integer)) for e in v):
            out[str(k)] = list(v)
    return out


__all__ = ["READ_FORMAT", "READ_DPI", "STAGES", "SheetReading", "read_photo", "sheet_model"]
