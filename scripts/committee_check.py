#!/usr/bin/env python
"""What a reader model decides on ``scripts/reader_dataset.py`` rows, without reading the photos
again: region accuracy, the share flagged for review, confident errors, easy and typical sheets
with nothing flagged, and crossings-out left flagged, per dataset and in all.

    .venv/bin/python scripts/committee_check.py calibration/models/reader-v8.json \\
        WORK/data/val50000.npz WORK/data/ho60000.npz [--json out.json]

Why: comparing two readers on the validation corpora with ``sheetcheck eval`` reads every
photo again (~5 min per reader for 480 photos on two cores); the datasets already hold every
region's features, the hand reader's mark and confidence and the photo's confidence, so the
model's verdict is a few seconds of arithmetic. It is the reader's own rule
(``train_reader.rule_outcome``, the same thresholds, tiers and photo gates) with the
committee's second opinions (``vision.learned.second_opinions``: every member confident of the
same mark, judged at the first model's photo doubt). It leaves out what the datasets do not
hold: regions the reader skipped as unreadable (``skipped`` in the dataset: always flagged by
the reader) and photos it could not locate, and (since session 17) the flags of colour
readings on hues the photo's two pencil calibrations give to different pencils
(``vision.marks._check_calibration``: the datasets do not hold the second palette; 11-27 flags
on a corpus of 120-300 photos). ``sheetcheck eval`` stays the end-to-end measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from train_reader import doubt_per_row, hand_conf, rule_outcome, tone_of  # noqa: E402
from vision.learned import committee_proba, load_model  # noqa: E402
from vision.light import tone_correction_for  # noqa: E402
from vision.marks import MARKS  # noqa: E402


def verdicts(model, d) -> tuple[np.ndarray, np.ndarray]:
    """(confident, mark) per row of dataset ``d`` as ``model`` (with its committee) decides."""
    X, y, allowed = d["X"], d["y"].astype(int), d["allowed"]
    mark_h, pconf, kind = d["hand_mark"], d["photo_conf"], d["kind"]
    # (the dataset keeps features as float32: a hand confidence of 0.9, exactly a threshold,
    # is 0.89999998 there; seven decimals give the reader's value back)
    c_h = hand_conf(d).astype(np.float64).round(7)
    p0 = model.predict_proba(X, allowed=allowed)
    if model.combine == "mean":
        # (a format-3 committee: one rule on the members' mean, every member the same mark)
        p, marks = committee_proba([p0] + [m.predict_proba(X, allowed=allowed)
                                           for m in model.committee])
        m = p.argmax(axis=1)
        doubt = doubt_per_row(p, d["photo"])
        sure, _ = rule_outcome(model.rule, p, m, mark_h, c_h, pconf, y, doubt, kind)
        return sure & np.all(marks == m, axis=0), m
    m0 = p0.argmax(axis=1)
    doubt = doubt_per_row(p0, d["photo"])
    sure, _ = rule_outcome(model.rule, p0, m0, mark_h, c_h, pconf, y, doubt, kind)
    for member in model.committee:
        pk = member.predict_proba(X, allowed=allowed)
        mk = pk.argmax(axis=1)
        sk, _ = rule_outcome(member.rule, pk, mk, mark_h, c_h, pconf, y, doubt, kind)
        sure &= sk & (mk == m0)
    return sure, m0


def summary(d, sure: np.ndarray, mark: np.ndarray) -> dict:
    y, photo = d["y"].astype(int), d["photo"]
    ok = mark == y
    n_photos = len(d["photos"])
    et = np.isin(d["preset"], ["easy", "typical"])
    flagged_per_photo = np.bincount(photo, ~sure, minlength=n_photos)
    et_photo = np.bincount(photo, et, minlength=n_photos) > 0
    crossed = y == MARKS.index("crossed")
    return {"regions": int(len(y)), "correct": int(ok.sum()), "flagged": int((~sure).sum()),
            "confident_errors": int((sure & ~ok).sum()),
            "easy_typical_regions": int(et.sum()), "easy_typical_flagged": int((~sure & et).sum()),
            "easy_typical_sheets": int(et_photo.sum()),
            "easy_typical_sheets_nothing_flagged": int(((flagged_per_photo == 0) & et_photo).sum()),
            "crossed": int(crossed.sum()), "crossed_correct": int((crossed & ok).sum()),
            "crossed_flagged": int((crossed & ~sure).sum())}


def line(name: str, s: dict) -> str:
    pct = lambda a, b: 100.0 * a / max(b, 1)  # noqa: E731
    return (f"{name:24s} {s['regions']:7d} {pct(s['correct'], s['regions']):8.3f} % "
            f"{pct(s['flagged'], s['regions']):6.2f} % {s['confident_errors']:4d} "
            f"{pct(s['easy_typical_flagged'], s['easy_typical_regions']):6.2f} % "
            f"{s['easy_typical_sheets_nothing_flagged']:4d} / {s['easy_typical_sheets']:<4d} "
            f"{s['crossed_flagged']:5d} / {s['crossed']}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="reader model file (calibration/models/*.json)")
    ap.add_argument("datasets", nargs="+", help="scripts/reader_dataset.py outputs (.npz)")
    ap.add_argument("--json", help="write the figures here too")
    args = ap.parse_args(argv)
    model = load_model(args.model)
    print(f"{'dataset':24s} {'regions':>7s} {'accuracy':>10s} {'flagged':>8s} {'CE':>4s} "
          f"{'e+t fl.':>8s} {'e+t sheets clear':>16s} {'crossed flagged':>15s}")
    out, total = {}, {}
    want = tone_correction_for(model)
    for path in args.datasets:
        d = dict(np.load(path, allow_pickle=False))
        if tone_of(d) != want:
            # the rows' colours were read in another light than the model reads in: its
            # verdicts on them are not the reader's (reader-v11 reads with the tone correction)
            print(f"error: {path} was read with the tone correction {'on' if tone_of(d) else 'off'}, "
                  f"but {Path(args.model).name} reads with it {'on' if want else 'off'}.\n"
                  f"Build the dataset again: scripts/reader_dataset.py FOLDER --out X.npz "
                  f"--tone {'on' if want else 'off'}", file=sys.stderr)
            return 2
        s = summary(d, *verdicts(model, d))
        out[Path(path).stem] = s
        total = {k: total.get(k, 0) + v for k, v in s.items()}
        print(line(Path(path).stem, s))
    print(line("all", total))
    if args.json:
        Path(args.json).write_text(json.dumps({"model": args.model, "datasets": out, "all": total},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
