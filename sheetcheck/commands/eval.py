"""``sheetcheck eval DIR [--json PATH]``: measure the reader against simulator truth.

DIR holds photos (``NAME.jpg`` / ``.png`` / ``.webp`` / ``.heic``) each with ``NAME.truth.json``
(``sheetcheck.truth/1``, as ``sheetcheck simulate`` writes them). Every photo is read; its
readings are compared with the truth region by region. A photo the reader cannot read (no
sheet found, cut off ...) counts all its regions as wrong but flagged, and is listed apart.

Reported: region accuracy overall, per region kind, per colour (a confusion matrix truth x
read), per preset, per markers/no-markers; share of sheets read with no error; share of
regions and of sheets flagged for review; confident errors (wrong and not flagged), listed;
timings per stage and the total over decode ratio.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import Counter, defaultdict
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
    """Correct/total counter."""

    __slots__ = ("ok", "n")

    def __init__(self):
        self.ok = 0
        self.n = 0

    def add(self, ok: bool) -> None:
        self.ok += bool(ok)
        self.n += 1

    def to_json(self) -> dict:
        return {"accuracy": round(self.ok / self.n, 6) if self.n else None, "correct": self.ok,
                "total": self.n}


def evaluate(folder: str | Path, *, progress=None) -> dict:
    """Run the reader over a folder of photos with truth; return the figures (JSON-ready)."""
    from calibration.template import get_template
    from sheetcheck.commands.read import read_one

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
    # the hard pairs, overall and under warm light (colour temperature below 4000 K)
    hard = {"orange/red": ("orange", "red"), "blue/purple": ("blue", "purple")}
    pair_counts = {lt: {k: {"regions": 0, "confused": 0, "confused_confidently": 0} for k in hard}
                   for lt in ("all", "warm_light")}
    for k, (photo, truth_path) in enumerate(pairs):
        truth = _load_truth(truth_path)
        preset = str(truth.get("preset", "?"))
        markers = "markers" if truth.get("markers", True) else "no_markers"
        marks = truth["marks"]
        reading, err = read_one(str(photo), template_id=None)
        sheet = {"photo": photo.name, "preset": preset, "markers": markers,
                 "template": truth.get("template")}
        if err is not None:
            code, message, _ = err
            failed.append({"photo": photo.name, "code": code, "message": message,
                           "preset": preset, "regions": len(marks)})
            try:
                kinds = {r.id: r.kind for r in get_template(truth["template"]).regions}
            except Exception:  # noqa: BLE001 - an unknown template in the truth: kind unknown
                kinds = {}
            for rid, t in marks.items():
                for acc in (overall, by_kind[kinds.get(rid, "?")], by_preset[preset],
                            by_markers[markers], by_template[str(truth.get("template"))]):
                    acc.add(False)
                confusion[t]["(failed)"] += 1
                regions_total += 1
                regions_flagged += 1
                flagged_errors += 1
            sheet.update({"error": code, "errors": len(marks), "flagged": len(marks)})
            sheets.append(sheet)
            if progress:
                progress(k + 1, len(pairs), photo.name, f"FAILED {code}")
            continue
        wrong = flagged = 0
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
                acc.add(ok)
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
            if not ok:
                wrong += 1
                if review:
                    flagged_errors += 1
                else:
                    confident_errors.append({
                        "photo": photo.name, "region": rid, "truth": t, "read": got,
                        "confidence": round(float(r.confidence), 4) if r is not None else None,
                        "preset": preset, "markers": markers})
        sheet.update({"errors": wrong, "flagged": flagged, "located_by": reading.location.method,
                      "identified": identified})
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
    }


def _pct(a: dict) -> str:
    if a.get("accuracy") is None:
        return "   -   "
    return f"{100 * a['accuracy']:7.3f} %  ({a['correct']}/{a['total']})"


def format_report(res: dict) -> str:
    out = [f"sheetcheck eval {res['folder']}: {res['photos']} photos, {res['regions']} regions, "
           f"{res['photos_failed']} photos not read",
           f"region accuracy      {_pct(res['accuracy'])}"]
    for title, key in (("per kind", "by_kind"), ("per preset", "by_preset"),
                       ("markers", "by_markers"), ("per template", "by_template")):
        out.append(f"{title}:")
        for k, v in res[key].items():
            out.append(f"  {k:<22} {_pct(v)}")
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
    return "\n".join(out)


def run(args) -> int:
    def progress(i, n, name, what):
        print(f"[{i}/{n}] {name}: {what}", file=sys.stderr, flush=True)

    res = evaluate(args.folder, progress=progress)
    print(format_report(res))
    if args.json:
        try:
            Path(args.json).write_text(json.dumps(res, indent=1) + "\n", encoding="utf-8")
        except OSError as e:
            raise InputFileError(f"cannot write {args.json}: {e}",
                                 hint="Choose a writable path for --json.") from None
    return 0
