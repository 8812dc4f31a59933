"""``sheetcheck eval DIR [--json PATH]``: measure the reader against simulator truth.

DIR holds photos (``NAME.jpg`` / ``.png`` / ``.webp`` / ``.heic``) each with ``NAME.truth.json``
(``sheetcheck.truth/1``, as ``sheetcheck simulate`` writes them). Every photo is read; its
readings are compared with the truth region by region. A photo the reader cannot read (no
sheet found, cut off ...) counts all its regions as wrong but flagged, and is listed apart.

Reported: region accuracy overall, per region kind, per colour (a confusion matrix truth x
read), per preset, per markers/no-markers; share of sheets read with no error; share of
regions and of sheets flagged for review; confident errors (wrong and not flagged), listed;
timings per stage and the total over decode ratio; and the figures per photo condition
(``by_condition``: light, blur and resolution, geometry, camera, hand and pencils, binned from
the truth's ``conditions``, see :data:`CONDITIONS`).
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path

from sheetcheck.errors import InputFileError
from sheetcheck.files import read_json_file

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif")
EVAL_FORMAT = "sheetcheck.eval/1"


def find_pairs(folder: str | Path) -> list[tuple[Path, Path]]:
    """``(photo, truth)`` pairs in ``folder``, sorted by name.

    Raises
    ------
    InputFileError
        when the folder does not exist or holds no photo with a truth file.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise InputFileError(f"{folder} is not a folder.",
                             hint="Give the folder that `sheetcheck simulate --out` wrote.")
    pairs = []
    for p in sorted(folder.iterdir()):
        if p.suffix.lower() in PHOTO_SUFFIXES:
            t = p.with_name(p.stem + ".truth.json")
            if t.is_file():
                pairs.append((p, t))
    if not pairs:
        raise InputFileError(f"{folder} holds no photo with a NAME.truth.json next to it.",
                             hint="Generate some with `sheetcheck simulate TEMPLATE --random "
                                  "--count 20 --out DIR`.")
    return pairs


def _load_truth(path: Path) -> dict:
    doc = read_json_file(path, what="truth file", hint="Regenerate it with `sheetcheck simulate`.")
    if not isinstance(doc, dict) or not isinstance(doc.get("marks"), dict):
        raise InputFileError(f"truth file {path} has no 'marks' object.",
                             hint="Regenerate it with `sheetcheck simulate`.")
    return doc


class _Acc:
    """Correct/total counter, with the regions flagged for review among them and, of the
    regions whose truth is empty, how many were flagged (most flags on easy photos are on
    empty regions read right: session 19)."""

    __slots__ = ("ok", "n", "flagged", "empty", "empty_flagged")

    def __init__(self):
        self.ok = 0
        self.n = 0
        self.flagged = 0
        self.empty = 0
        self.empty_flagged = 0

    def add(self, ok: bool, flagged: bool = False, empty: bool = False) -> None:
        self.ok += bool(ok)
        self.n += 1
        self.flagged += bool(flagged)
        self.empty += bool(empty)
        self.empty_flagged += bool(empty and flagged)

    def to_json(self) -> dict:
        share = (lambda a, b: round(a / b, 6) if b else None)  # noqa: E731
        return {"accuracy": share(self.ok, self.n), "correct": self.ok, "total": self.n,
                "flagged": self.flagged, "flagged_share": share(self.flagged, self.n),
                "empty": self.empty, "empty_flagged": self.empty_flagged}


# --------------------------------------------------------------------------------------------
# Accuracy per photo condition: which photos the reader fails on ("under shadows", "below
# 6 px/mm"). Every condition is a property of the whole photo (the simulator draws it once per
# photo), so a photo falls in exactly one bin of each condition and every condition's bins add
# up to the overall totals. The bins are documented in docs/EVALUATION.md ("Accuracy per photo
# condition"); a condition whose key a truth file lacks (older tools, another painter) is
# "unknown", never guessed.
# --------------------------------------------------------------------------------------------

UNKNOWN = "unknown"

#: Effective noise is judged at the paper's level in linear light: the simulator's sensor
#: noise is sigma^2 = shot * signal + read^2, and paper under normal exposure is ~0.8.
NOISE_SIGNAL = 0.8


def _num(v) -> float | None:
    """``v`` as a finite float, or None (missing, text, bool, NaN)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if v == v and abs(v) != float("inf") else None


def _edges(v: float | None, edges: tuple[float, ...], labels: tuple[str, ...]) -> str:
    """The label of the half-open bin ``[edges[k-1], edges[k])`` that ``v`` falls in."""
    if v is None:
        return UNKNOWN
    for e, lab in zip(edges, labels):
        if v < e:
            return lab
    return labels[-1]


def _none_or(v: float | None, edges: tuple[float, ...], labels: tuple[str, ...], *,
             none: str = "none") -> str:
    """``none`` when ``v`` is 0 (the condition is absent from the photo), else its bin."""
    if v is None:
        return UNKNOWN
    return none if v <= 0 else _edges(v, edges, labels)


def _colour_temp(v: float | None) -> str:
    # warm below 4000 K as eval's hard pairs under warm light; cool above daylight's 6500 K
    if v is None:
        return UNKNOWN
    return "warm <4000 K" if v < 4000 else "cool >6500 K" if v > 6500 else "neutral 4000-6500 K"


def _cat(v) -> str:
    """A categorical condition (curl type, brand, style ...) as its own name."""
    if isinstance(v, str) and v:
        return v
    if isinstance(v, bool):
        return "yes" if v else "no"
    return UNKNOWN


def page_px_per_mm(truth: Mapping, page_mm: tuple[float, float] | None) -> float | None:
    """The page's mean resolution in the photo, px per mm of the printed page.

    From the truth's ``page_corners_px`` (through the full camera model: tilt, lens, curl) and
    the template's page size: ``sqrt(area of the page quad in px^2 / page area in mm^2)``. A
    tilted page is finer at its near edge and coarser at its far edge; this is their mean.

    Parameters
    ----------
    truth : mapping
        A ``sheetcheck.truth/1`` document.
    page_mm : (width, height) or None
        The template's page size in mm (None: unknown template).

    Returns
    -------
    float or None
        None when the corners or the page size are missing or malformed.
    """
    q = truth.get("page_corners_px")
    if page_mm is None or not isinstance(q, list) or len(q) != 4:
        return None
    try:
        pts = [(float(p[0]), float(p[1])) for p in q]
    except (TypeError, ValueError, IndexError):
        return None
    # shoelace area of the quad (corners in order round the page)
    area = 0.5 * abs(sum(x0 * y1 - x1 * y0 for (x0, y0), (x1, y1) in zip(pts, pts[1:] + pts[:1])))
    page_area = float(page_mm[0]) * float(page_mm[1])
    if not area > 0 or not page_area > 0:
        return None
    return (area / page_area) ** 0.5


def _hand(cond: Mapping) -> Mapping:
    h = cond.get("hand")
    return h if isinstance(h, Mapping) else {}


def _blur_px(cond: Mapping) -> float | None:
    parts = [_num(cond.get(k)) for k in ("defocus_px", "motion_px", "dof_blur_px")]
    return None if any(p is None for p in parts) else sum(parts)


def _noise(cond: Mapping) -> float | None:
    shot, read = _num(cond.get("shot_noise")), _num(cond.get("read_noise"))
    if shot is None or read is None or shot < 0:
        return None
    return (shot * NOISE_SIGNAL + read * read) ** 0.5


def _painter(cond: Mapping, truth: Mapping) -> str:
    p = cond.get("painter") or truth.get("painter") or _hand(cond).get("painter")
    if p is None and cond:
        # the simulator records the painter only when it is not the default one
        # (docs/SIMULATOR.md: "absent means default"); no conditions at all: not simulated
        return "default"
    return _cat(p)


def _swatches(marks: Mapping) -> str:
    sw = [m for rid, m in marks.items() if str(rid).startswith("swatch.")]
    if not sw:
        return UNKNOWN
    coloured = sum(1 for m in sw if m != "empty")
    return "none" if coloured == 0 else "all" if coloured == len(sw) else "some"


#: ``name: (group, binner, bin order)``, in report order. A binner takes ``(conditions, truth,
#: px_per_mm)`` and returns the bin's label; the labels carry their edges and units, so the
#: table reads without this file. Categorical conditions list their usual values first; other
#: values (another painter's styles, brands) follow in name order, ``unknown`` last.
CONDITIONS: dict[str, tuple[str, Callable, tuple[str, ...]]] = {
    # light
    "colour_temp": ("light", lambda c, t, r: _colour_temp(_num(c.get("colour_temp_k"))),
                    ("warm <4000 K", "neutral 4000-6500 K", "cool >6500 K")),
    "shadow": ("light", lambda c, t, r: _none_or(
        _num(c.get("shadow")), (0.35,), ("light <0.35", "strong >=0.35")),
        ("none", "light <0.35", "strong >=0.35")),
    "glare": ("light", lambda c, t, r: _none_or(
        _num(c.get("glare")), (0.3,), ("weak <0.3", "strong >=0.3")),
        ("none", "weak <0.3", "strong >=0.3")),
    "exposure": ("light", lambda c, t, r: _edges(
        _num(c.get("exposure")), (0.8, 1.25), ("under <0.8", "normal 0.8-1.25", "over >=1.25")),
        ("under <0.8", "normal 0.8-1.25", "over >=1.25")),
    # sharpness and resolution
    "blur_px": ("sharpness", lambda c, t, r: _edges(
        _blur_px(c), (1, 2, 4), ("<1 px", "1-2 px", "2-4 px", ">=4 px")),
        ("<1 px", "1-2 px", "2-4 px", ">=4 px")),
    "blur_mm": ("sharpness", lambda c, t, r: _edges(
        None if _blur_px(c) is None or r is None else _blur_px(c) / r, (0.2, 0.4, 0.8),
        ("<0.2 mm", "0.2-0.4 mm", "0.4-0.8 mm", ">=0.8 mm")),
        ("<0.2 mm", "0.2-0.4 mm", "0.4-0.8 mm", ">=0.8 mm")),
    "px_per_mm": ("sharpness", lambda c, t, r: _edges(
        r, (3, 4.5, 6, 8), ("<3 px/mm", "3-4.5 px/mm", "4.5-6 px/mm", "6-8 px/mm", ">=8 px/mm")),
        ("<3 px/mm", "3-4.5 px/mm", "4.5-6 px/mm", "6-8 px/mm", ">=8 px/mm")),
    # geometry
    "curl": ("geometry", lambda c, t, r: _cat(c.get("curl_type")), ("none", "bend", "fold")),
    "tilt": ("geometry", lambda c, t, r: _edges(
        _num(c.get("tilt_deg")), (10, 20, 30), ("<10 deg", "10-20 deg", "20-30 deg", ">=30 deg")),
        ("<10 deg", "10-20 deg", "20-30 deg", ">=30 deg")),
    "cutoff": ("geometry", lambda c, t, r: _none_or(_num(c.get("cutoff")), (), ("yes",), none="no"),
               ("no", "yes")),
    # camera
    "jpeg_quality": ("camera", lambda c, t, r: _edges(
        _num(c.get("jpeg_quality")), (70, 85), ("<70", "70-84", ">=85")), ("<70", "70-84", ">=85")),
    "recompressed": ("camera", lambda c, t, r: _none_or(
        _num(c.get("prior_jpeg_quality")), (), ("yes",), none="no"), ("no", "yes")),
    "noise": ("camera", lambda c, t, r: _edges(
        _noise(c), (0.03, 0.05), ("low <0.03", "moderate 0.03-0.05", "high >=0.05")),
        ("low <0.03", "moderate 0.03-0.05", "high >=0.05")),
    "background": ("camera", lambda c, t, r: _cat((c.get("background") or {}).get("name")
                                                   if isinstance(c.get("background"), Mapping) else None), ()),
    # hand and pencils
    "painter": ("hand", lambda c, t, r: _painter(c, t), ("default", "varied", "heldout")),
    "pencil_brand": ("hand", lambda c, t, r: _cat(c.get("pencil_brand")), ()),
    "pencil_medium": ("hand", lambda c, t, r: _cat(c.get("pencil_medium")), ()),
    "pressure": ("hand", lambda c, t, r: _edges(
        _num(_hand(c).get("pressure")), (0.5, 0.8), ("light <0.5", "medium 0.5-0.8", "heavy >=0.8")),
        ("light <0.5", "medium 0.5-0.8", "heavy >=0.8")),
    "fill_style": ("hand", lambda c, t, r: _cat(_hand(c).get("style")), ()),
    "cross_style": ("hand", lambda c, t, r: _cat(_hand(c).get("cross_style")), ()),
    "swatches": ("hand", lambda c, t, r: _swatches(t.get("marks") or {}), ("none", "some", "all")),
}


def condition_bins(truth: Mapping, *, page_mm: tuple[float, float] | None = None) -> dict[str, str]:
    """The bin of every condition in :data:`CONDITIONS` for one photo's truth.

    Parameters
    ----------
    truth : mapping
        A ``sheetcheck.truth/1`` document; its ``conditions`` may lack keys or carry others
        (other painters record other hands): a missing or malformed value gives ``"unknown"``.
    page_mm : (width, height) or None
        The template's page size in mm, for the page's resolution in the photo (``px_per_mm``,
        ``blur_mm``); None makes those two ``"unknown"``.

    Returns
    -------
    dict
        ``{condition: bin label}`` for every condition, in report order.
    """
    cond = truth.get("conditions")
    cond = cond if isinstance(cond, Mapping) else {}
    ppm = page_px_per_mm(truth, page_mm)
    return {name: binner(cond, truth, ppm) for name, (_, binner, _) in CONDITIONS.items()}


def aggregate_conditions(photos: Iterable[Mapping]) -> dict[str, dict[str, dict]]:
    """Figures per condition and bin, from per-photo counts.

    Parameters
    ----------
    photos : iterable of mappings
        One per photo: ``conditions`` (``{condition: bin}``, as :func:`condition_bins` gives),
        ``regions``, ``correct``, ``flagged``, ``confident_errors`` (counts of its regions) and
        ``failed`` (true when the reader could not read the photo; its regions then count as
        wrong and flagged, as everywhere in eval).

    Returns
    -------
    dict
        ``{condition: {bin: {accuracy, correct, total, flagged_share, wrong, confident_errors,
        sheets, photos_failed}}}``; only bins holding a photo appear, in :data:`CONDITIONS`'
        order, then other values by name, ``unknown`` last.
    """
    acc: dict[str, dict[str, dict]] = {name: {} for name in CONDITIONS}
    for ph in photos:
        bins = ph.get("conditions") or {}
        for name in acc:
            b = acc[name].setdefault(str(bins.get(name, UNKNOWN)), {
                "correct": 0, "total": 0, "flagged": 0, "confident_errors": 0, "sheets": 0,
                "photos_failed": 0})
            b["correct"] += int(ph["correct"])
            b["total"] += int(ph["regions"])
            b["flagged"] += int(ph["flagged"])
            b["confident_errors"] += int(ph["confident_errors"])
            b["sheets"] += 1
            b["photos_failed"] += int(bool(ph.get("failed")))
    out = {}
    for name, bins in acc.items():
        order = CONDITIONS[name][2] if name in CONDITIONS else ()
        keys = sorted(bins, key=lambda k: (k == UNKNOWN, order.index(k) if k in order else len(order), k))
        out[name] = {}
        for k in keys:
            b = bins[k]
            n = b["total"]
            out[name][k] = {
                "accuracy": round(b["correct"] / n, 6) if n else None,
                "correct": b["correct"], "total": n,
                "flagged_share": round(b["flagged"] / n, 6) if n else None,
                "wrong": n - b["correct"], "confident_errors": b["confident_errors"],
                "sheets": b["sheets"], "photos_failed": b["photos_failed"]}
    return out


def format_conditions(by_condition: Mapping[str, Mapping[str, Mapping]]) -> list[str]:
    """The compact per-condition table of the text report (one line per bin)."""
    if not by_condition:
        return []
    wb = max((len(b) for bins in by_condition.values() for b in bins), default=8)
    wc = max(len(c) for c in by_condition)
    out = ["per condition (from the truth files' conditions; bins in docs/EVALUATION.md):",
           f"  {'condition':<{wc}}  {'bin':<{wb}} {'regions':>8} {'accuracy':>9} {'flagged':>8} "
           f"{'wrong':>6} {'conf.err':>8} {'sheets':>6} {'not read':>8}"]
    for name, bins in by_condition.items():
        for i, (b, v) in enumerate(bins.items()):
            a = f"{100 * v['accuracy']:7.2f} %" if v["accuracy"] is not None else f"{'-':>9}"
            f = f"{100 * v['flagged_share']:6.1f} %" if v["flagged_share"] is not None else f"{'-':>8}"
            out.append(f"  {name if i == 0 else '':<{wc}}  {b:<{wb}} {v['total']:>8} {a} {f} "
                       f"{v['wrong']:>6} {v['confident_errors']:>8} {v['sheets']:>6} {v['photos_failed']:>8}")
    return out


def evaluate(folder: str | Path, *, progress=None, reader: str | Path | None = None,
             patch_reader: bool = True) -> dict:
    """Run the reader over a folder of photos with truth; return the figures (JSON-ready).
    ``reader``: a learned reader's model file to read with instead of the default one (to
    compare models on the same photos). ``patch_reader``: False reads without the patch
    reader's third opinion (``vision.patch_reader``)."""
    from calibration.template import get_template
    from sheetcheck.commands.read import read_one
    from vision.learned import default_model, load_model

    learned = load_model(reader) if reader is not None else default_model()
    from vision.patch_reader import default_patch_reader

    patch3 = default_patch_reader() if patch_reader else None

    pairs = find_pairs(folder)
    overall = _Acc()
    by_kind: dict[str, _Acc] = defaultdict(_Acc)
    by_preset: dict[str, _Acc] = defaultdict(_Acc)
    by_markers: dict[str, _Acc] = defaultdict(_Acc)
    by_template: dict[str, _Acc] = defaultdict(_Acc)
    confusion: dict[str, Counter] = defaultdict(Counter)
    confident_errors: list[dict] = []
    flagged_errors = 0
    failed: list[dict] = []
    misidentified: list[dict] = []
    sheets = []
    timings: dict[str, list[float]] = defaultdict(list)
    regions_flagged = 0
    regions_total = 0
    conf_wrong: list[float] = []
    conf_right: list[float] = []
    per_photo: list[dict] = []  # counts per photo, for the figures per photo condition
    # why regions were flagged: the reason's words before its figures ("low confidence",
    # "second opinion unsure" ...), over all photos and over the easy and typical ones
    flag_reasons: dict[str, Counter] = {"all": Counter(), "easy_typical": Counter()}
    # the hard pairs, overall and under warm light (colour temperature below 4000 K)
    hard = {"orange/red": ("orange", "red"), "blue/purple": ("blue", "purple")}
    pair_counts = {lt: {k: {"regions": 0, "confused": 0, "confused_confidently": 0} for k in hard}
                   for lt in ("all", "warm_light")}
    for k, (photo, truth_path) in enumerate(pairs):
        truth = _load_truth(truth_path)
        preset = str(truth.get("preset", "?"))
        markers = "markers" if truth.get("markers", True) else "no_markers"
        # (the flag_reasons counts this photo's flags go to)
        reason_keys = ("all", "easy_typical") if preset in ("easy", "typical") else ("all",)
        marks = truth["marks"]
        try:
            truth_template = get_template(truth["template"])
        except Exception:  # noqa: BLE001 - an unknown template in the truth: kinds, size unknown
            truth_template = None
        bins = condition_bins(truth, page_mm=(truth_template.width_mm, truth_template.height_mm)
                              if truth_template is not None else None)
        reading, err = read_one(str(photo), template_id=None, learned=learned,
                                patch_reader=patch3)
        sheet = {"photo": photo.name, "preset": preset, "markers": markers,
                 "template": truth.get("template")}
        if err is not None:
            code, message, _ = err
            failed.append({"photo": photo.name, "code": code, "message": message,
                           "preset": preset, "regions": len(marks)})
            kinds = {r.id: r.kind for r in truth_template.regions} if truth_template is not None else {}
            for rid, t in marks.items():
                for acc in (overall, by_kind[kinds.get(rid, "?")], by_preset[preset],
                            by_markers[markers], by_template[str(truth.get("template"))]):
                    acc.add(False, True, t == "empty")
                confusion[t]["(failed)"] += 1
                regions_total += 1
                regions_flagged += 1
                flagged_errors += 1
            for key in reason_keys:
                flag_reasons[key]["photo not read"] += len(marks)
            sheet.update({"error": code, "errors": len(marks), "flagged": len(marks),
                          "regions": len(marks), "confident_errors": 0, "conditions": bins})
            sheets.append(sheet)
            per_photo.append({"conditions": bins, "regions": len(marks), "correct": 0,
                              "flagged": len(marks), "confident_errors": 0, "failed": True})
            if progress:
                progress(k + 1, len(pairs), photo.name, f"FAILED {code}")
            continue
        wrong = flagged = confident = 0
        wrong_readings: list[dict] = []
        identified = reading.template.id == truth.get("template")
        ct = (truth.get("conditions") or {}).get("colour_temp_k")
        warm = isinstance(ct, (int, float)) and ct < 4000
        # A sheet read as the wrong template has no reading of these regions; it counts as
        # flagged only if the reader flagged every region of what it read (it said: look).
        all_flagged = bool(reading.readings) and all(x.review for x in reading.readings.values())
        for rid, t in marks.items():
            r = reading.readings.get(rid) if identified else None
            kind = reading.template.region(rid).kind if r is not None else "?"
            got = r.mark if r is not None else "(missing)"
            review = r.review if r is not None else all_flagged
            ok = got == t
            for acc in (overall, by_kind[kind], by_preset[preset], by_markers[markers],
                        by_template[str(truth.get("template"))]):
                acc.add(ok, bool(review), t == "empty")
            confusion[t][got] += 1
            regions_total += 1
            regions_flagged += bool(review)
            flagged += bool(review)
            if r is not None:
                (conf_right if ok else conf_wrong).append(float(r.confidence))
            for pname, (a, b) in hard.items():
                if t in (a, b):
                    for lt in (("all", "warm_light") if warm else ("all",)):
                        pc = pair_counts[lt][pname]
                        pc["regions"] += 1
                        if got == (b if t == a else a):
                            pc["confused"] += 1
                            pc["confused_confidently"] += int(not review)
            if review:
                why = (_reason_category(r.reason) if r is not None
                       else "template not identified")
                for key in reason_keys:
                    flag_reasons[key][why] += 1
            if not ok:
                wrong += 1
                if r is not None:
                    wrong_readings.append({
                        "region": rid, "kind": kind, "truth": t, "read": got,
                        "confidence": round(float(r.confidence), 4), "review": bool(review),
                        **({"reason": r.reason} if r.reason else {})})
                if review:
                    flagged_errors += 1
                else:
                    confident += 1
                    confident_errors.append({
                        "photo": photo.name, "region": rid, "truth": t, "read": got,
                        "confidence": round(float(r.confidence), 4) if r is not None else None,
                        "preset": preset, "markers": markers})
        sheet.update({"errors": wrong, "flagged": flagged, "located_by": reading.location.method,
                      "identified": identified, "regions": len(marks),
                      "confident_errors": confident, "conditions": bins,
                      "wrong_readings": wrong_readings})
        per_photo.append({"conditions": bins, "regions": len(marks), "correct": len(marks) - wrong,
                          "flagged": flagged, "confident_errors": confident, "failed": False})
        if not identified:
            misidentified.append({"photo": photo.name, "truth": truth.get("template"),
                                  "read": reading.template.id,
                                  "quality": round(float(reading.location.quality), 4),
                                  "flagged": flagged})
        sheets.append(sheet)
        for st, v in reading.timings_ms.items():
            timings[st].append(float(v))
        if "decode" in reading.timings_ms and reading.timings_ms["decode"] > 0:
            timings["total_over_decode"].append(reading.timings_ms["total"] / reading.timings_ms["decode"])
        if progress:
            progress(k + 1, len(pairs), photo.name, f"{wrong} wrong, {flagged} flagged")

    def share(pred, subset=None):
        ss = [s for s in sheets if subset is None or subset(s)]
        return {"share": round(sum(1 for s in ss if pred(s)) / len(ss), 4) if ss else None,
                "count": sum(1 for s in ss if pred(s)), "sheets": len(ss)}

    colours = ["empty", "orange", "red", "blue", "green", "purple", "crossed", "written"]
    reads = sorted({g for c in confusion.values() for g in c},
                   key=lambda g: (colours.index(g) if g in colours else 99, g))
    per_colour = {t: {"accuracy": round(confusion[t][t] / sum(confusion[t].values()), 6),
                      "total": sum(confusion[t].values())}
                  for t in sorted(confusion, key=lambda g: colours.index(g) if g in colours else 99)}
    med = {k: round(statistics.median(v), 2) for k, v in timings.items() if v}
    return {
        "format": EVAL_FORMAT,
        "folder": str(folder),
        "reader": {"id": (learned.meta or {}).get("id"), "file": learned.source,
                   # (session 45) the third opinion's model, null when read without it
                   "patch_reader": patch3.id if patch3 is not None else None},
        "photos": len(pairs),
        "photos_failed": len(failed),
        "regions": regions_total,
        "accuracy": overall.to_json(),
        "by_kind": {k: v.to_json() for k, v in sorted(by_kind.items())},
        "by_colour": per_colour,
        "confusion": {"rows_truth_cols_read": reads,
                      "matrix": {t: {g: confusion[t][g] for g in reads if confusion[t][g]}
                                 for t in per_colour}},
        "hard_pairs": pair_counts,
        "by_preset": {k: v.to_json() for k, v in sorted(by_preset.items())},
        "by_markers": {k: v.to_json() for k, v in sorted(by_markers.items())},
        "by_template": {k: v.to_json() for k, v in sorted(by_template.items())},
        "sheets_without_error": share(lambda s: s.get("errors", 0) == 0),
        "sheets_nothing_flagged": share(lambda s: s.get("flagged", 0) == 0),
        "sheets_nothing_flagged_easy_typical": share(
            lambda s: s.get("flagged", 0) == 0, lambda s: s["preset"] in ("easy", "typical")),
        "sheets_nothing_flagged_by_preset": {
            p: share(lambda s: s.get("flagged", 0) == 0, lambda s, p=p: s["preset"] == p)
            for p in sorted({s["preset"] for s in sheets})},
        "regions_flagged": {"share": round(regions_flagged / regions_total, 6) if regions_total else None,
                            "count": regions_flagged},
        "errors_flagged": flagged_errors,
        "flag_reasons": {k: dict(v.most_common()) for k, v in flag_reasons.items()},
        "confident_errors": {"count": len(confident_errors), "list": confident_errors},
        "lowest_confidence_of_a_wrong_reading_not_flagged": (
            min(e["confidence"] for e in confident_errors if e["confidence"] is not None)
            if confident_errors else None),
        "highest_confidence_of_a_wrong_reading": round(max(conf_wrong), 4) if conf_wrong else None,
        "failed": failed,
        "misidentified": misidentified,
        "confident_errors_on_identified_sheets": sum(
            1 for e in confident_errors if e["read"] != "(missing)"),
        "timings_ms_median": med,
        "sheets": sheets,
        "by_condition": aggregate_conditions(per_photo),
        # the presets draw many conditions together (hard: warm light, shadows, steep tilts,
        # small photos); within one preset a bin's figure is less confounded by the others
        "by_condition_by_preset": {
            p: aggregate_conditions(ph for ph, s in zip(per_photo, sheets) if s["preset"] == p)
            for p in sorted({s["preset"] for s in sheets})},
    }


def _reason_category(reason: str | None) -> str:
    """A review reason without its figures: ``"low confidence (empty: hand 0.87, ...)"`` ->
    ``"low confidence"``."""
    text = (reason or "").split(" (", 1)[0].strip()
    return text or "(no reason given)"


def _pct(a: dict) -> str:
    if a.get("accuracy") is None:
        return "   -   "
    return f"{100 * a['accuracy']:7.3f} %  ({a['correct']}/{a['total']})"


def format_report(res: dict) -> str:
    out = [f"sheetcheck eval {res['folder']}: {res['photos']} photos, {res['regions']} regions, "
           f"{res['photos_failed']} photos not read"
           + (f" (reader {res['reader']['id']}" if (res.get("reader") or {}).get("id") else "")
           + (f", patch reader {res['reader']['patch_reader']})"
              if (res.get("reader") or {}).get("patch_reader")
              else ", no patch reader)" if (res.get("reader") or {}).get("id") else ""),
           f"region accuracy      {_pct(res['accuracy'])}"]
    for title, key in (("per kind", "by_kind"), ("per preset", "by_preset"),
                       ("markers", "by_markers"), ("per template", "by_template")):
        out.append(f"{title}:")
        for k, v in res[key].items():
            fl = (f"   flagged {100 * v['flagged_share']:5.1f} %"
                  + (f" (empty {100 * v['empty_flagged'] / v['empty']:5.1f} %)" if v.get("empty") else "")
                  if v.get("flagged_share") is not None else "")
            out.append(f"  {k:<22} {_pct(v):<30}{fl}")
    out.append("per colour (truth row, read column):")
    cols = res["confusion"]["rows_truth_cols_read"]
    out.append("  " + " " * 9 + "".join(f"{c[:8]:>9}" for c in cols) + "   accuracy")
    for t, row in res["confusion"]["matrix"].items():
        out.append(f"  {t[:8]:<9}" + "".join(f"{row.get(c, 0):>9}" for c in cols)
                   + f"   {100 * res['by_colour'][t]['accuracy']:.2f} %")
    for lt, d in res["hard_pairs"].items():
        out.append(f"hard pairs ({lt.replace('_', ' ')}): " + "; ".join(
            f"{k} {v['confused']} confused of {v['regions']} ({v['confused_confidently']} confidently)"
            for k, v in d.items()))
    s = res["sheets_without_error"]
    out.append(f"sheets read with no error       {s['count']}/{s['sheets']} ({100 * (s['share'] or 0):.1f} %)")
    s = res["sheets_nothing_flagged"]
    out.append(f"sheets with nothing flagged     {s['count']}/{s['sheets']} ({100 * (s['share'] or 0):.1f} %)")
    for p, s in res["sheets_nothing_flagged_by_preset"].items():
        out.append(f"  {p:<29} {s['count']}/{s['sheets']} ({100 * (s['share'] or 0):.1f} %)")
    s = res["sheets_nothing_flagged_easy_typical"]
    out.append(f"  easy+typical                  {s['count']}/{s['sheets']} ({100 * (s['share'] or 0):.1f} %)")
    rf = res["regions_flagged"]
    out.append(f"regions flagged for review      {rf['count']} ({100 * (rf['share'] or 0):.2f} %)")
    reasons = (res.get("flag_reasons") or {}).get("all") or {}
    for why, n in reasons.items():
        out.append(f"  flagged: {why:<28} {n}")
    out.append(f"wrong readings flagged          {res['errors_flagged']}")
    ce = res["confident_errors"]
    out.append(f"CONFIDENT ERRORS                {ce['count']}")
    for e in [e for e in ce["list"] if e["read"] != "(missing)"][:50]:
        out.append(f"  {e['photo']}  {e['region']}: truth {e['truth']}, read {e['read']} "
                   f"(confidence {e['confidence']})")
    if ce["count"] > 50:
        out.append(f"  ... and {ce['count'] - 50} more (see --json)")
    out.append(f"  of which on sheets whose template was identified: "
               f"{res['confident_errors_on_identified_sheets']}")
    for f in res["failed"]:
        out.append(f"not read: {f['photo']}: {f['code']}: {f['message']}")
    for m in res["misidentified"]:
        out.append(f"wrong template: {m['photo']}: read as {m['read']} (truth {m['truth']}), "
                   f"locate quality {m['quality']}, {m['flagged']} regions flagged")
    tm = res["timings_ms_median"]
    if tm:
        out.append("median timings ms: " + ", ".join(
            f"{k} {v:.0f}" for k, v in tm.items() if k != "total_over_decode"))
        if "total_over_decode" in tm:
            out.append(f"median total / decode: {tm['total_over_decode']:.2f}")
    out.extend(format_conditions(res.get("by_condition") or {}))
    return "\n".join(out)


def run(args) -> int:
    def progress(i, n, name, what):
        print(f"[{i}/{n}] {name}: {what}", file=sys.stderr, flush=True)

    res = evaluate(args.folder, progress=progress, reader=getattr(args, "reader", None),
                   patch_reader=not getattr(args, "no_patch_reader", False))
    print(format_report(res))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        except OSError as e:
            raise InputFileError(f"cannot write {args.json}: {e}",
                                 hint="Choose a writable path for --json.") from None
    return 0
