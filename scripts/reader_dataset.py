#!/usr/bin/env python
"""Build the learned reader's dataset: run the real reader over simulator corpora and keep,
per readable region, its feature row (``vision.marks.FEATURE_NAMES``) and the true mark.

    .venv/bin/python scripts/reader_dataset.py /tmp/rd/train10000 [DIR ...] --out /tmp/reader-data/train.npz

Each DIR is a folder written by ``scripts/make_corpus.py`` (photos with ``NAME.truth.json``
beside them). Photos the reader cannot read, or reads as another template, give no rows (they
are counted). Folders whose photos have seeds >= 100000 are refused: those are the lead's
evaluation corpora and must never be read while building the reader; the one exception is
``SPENT_SEED_RANGES``, measurement corpora already reported, whose rows may only calibrate the
decision rule (``train_reader.py --calib``).

The ``.npz`` holds ``X`` (N, F) float32, ``y`` (N,) int (index into ``vision.marks.MARKS``),
``allowed`` (N, 8) bool, ``photo`` (N,) int (index into ``photos``), ``kind``, ``preset``,
``painter`` (N,) str, ``region`` (N,) str, ``hand_mark`` (N,) int, ``photo_conf`` (N,) float,
and ``feature_names``, ``photos``, ``seeds``, ``folders``, ``skipped`` (JSON text),
``tone_correction`` (bool: whether the light stage's tone correction was on, ``--tone``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from multiprocessing import Pool
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: Seeds at or above this belong to the evaluation corpora (docs/EVALUATION.md): never read,
#: except the spent ranges below.
FORBIDDEN_SEED = 100000
#: Measurement corpora whose figures were reported (docs/EVALUATION.md, "Seed ranges already
#: used"): spent, their errors were read. Their default-painter photos may now serve as
#: calibration rows for the decision rule (``train_reader.py --calib``), never for fitting
#: and never again for a reported figure. Inclusive (first, last) seeds.
SPENT_SEED_RANGES = ((100000, 100299), (200000, 200299), (300000, 300299), (400000, 400299),
                     (500000, 500299), (600000, 600299), (710000, 710119), (800000, 800299),
                     (900000, 900299), (1000000, 1000299), (1100000, 1100299),
                     (1200000, 1200299), (1300000, 1300299), (1400000, 1400299),
                     (1500000, 1500299), (1600000, 1600299),
                     (1700000, 1700299), (1800000, 1800299), (1900000, 1900299),
                     (2000000, 2000299), (2100000, 2100299), (2300000, 2300299),
                     (2400000, 2400299), (2500000, 2500299), (2600000, 2600299),
                     (2700000, 2700299), (2800000, 2800299), (2900000, 2900299), (3000000, 3000299),
                     (3100000, 3100299), (3200000, 3200299), (3300000, 3300299),
                     (3400000, 3400299), (3500000, 3500299), (3600000, 3600299),
                     (3700000, 3700299), (3800000, 3800299),
                     (3900000, 3900299), (4000000, 4000299), (4100000, 4100299),
                     (4200000, 4200299), (4300000, 4300299), (4400000, 4400299),
                     (4500000, 4500299), (4600000, 4600299),
                     (4700000, 4700299), (4900000, 4900299), (5100000, 5100299),
                     (5300000, 5300299), (5500000, 5500299), (5700000, 5700299),
                     (5900000, 5900299), (6100000, 6100299), (6300000, 6300299),
                     (6500000, 6500299), (6700000, 6700299), (6900000, 6900299),
                     (7100000, 7100299), (7300000, 7300299), (7500000, 7500299),
                     (7700000, 7700299), (7900000, 7900299),
                     # crossed out at rate 0.3 (sessions 42-50)
                     (4800000, 4800119), (5000000, 5000119), (5200000, 5200119),
                     (5400000, 5400119), (5600000, 5600119), (5800000, 5800119),
                     (6000000, 6000119), (6200000, 6200119), (6400000, 6400119),
                     (6600000, 6600119), (6800000, 6800119), (7000000, 7000119),
                     (7200000, 7200119), (7400000, 7400119), (7600000, 7600119),
                     (7800000, 7800119),
                     # the held-out painter's measurement corpora (train_reader never lets
                     # their rows calibrate: painter "heldout"), and the corpora crossed out
                     # at rate 0.3 that tested reader-v14 (session 24)
                     (1110000, 1110119), (1120000, 1120119), (1130000, 1130119),
                     (1140000, 1140119), (1150000, 1150119), (1160000, 1160119),
                     (1170000, 1170119), (1180000, 1180119), (1190000, 1190119),
                     (1210000, 1210119), (1220000, 1220119), (1230000, 1230119),
                     (1240000, 1240119), (1250000, 1250119), (1260000, 1260119),
                     (1270000, 1270119), (1280000, 1280119), (1290000, 1290119),
                     (1310000, 1310119), (1320000, 1320119), (1330000, 1330119),
                     (1340000, 1340119), (1350000, 1350119), (1360000, 1360119),
                     (1370000, 1370119), (1380000, 1380119), (1390000, 1390119),
                     (1410000, 1410119), (1420000, 1420119), (1430000, 1430119),
                     (1440000, 1440119), (1450000, 1450119), (1460000, 1460119),
                     (1470000, 1470119), (1480000, 1480119), (1490000, 1490119),
                     (1510000, 1510119), (1520000, 1520119), (1530000, 1530119),
                     (1540000, 1540119), (1550000, 1550119), (1560000, 1560119),
                     (1570000, 1570119), (1580000, 1580119), (1590000, 1590119),
                     (1610000, 1610119), (1620000, 1620119), (1630000, 1630119),
                     (1640000, 1640119), (1650000, 1650119), (1660000, 1660119),
                     (1670000, 1670119), (1680000, 1680119), (1690000, 1690119),
                     (1710000, 1710119), (1720000, 1720119), (1730000, 1730119),
                     (1740000, 1740119), (1750000, 1750119), (1760000, 1760119),
                     (1770000, 1770119), (1780000, 1780119),
                     (2200000, 2200119))


def seed_allowed(seed: int | None) -> bool:
    """A seed of a dev corpus (< FORBIDDEN_SEED) or of a spent measurement corpus."""
    return seed is not None and (seed < FORBIDDEN_SEED
                                 or any(a <= seed <= b for a, b in SPENT_SEED_RANGES))


def _seed_of(truth: dict, name: str) -> int | None:
    s = truth.get("seed")
    if isinstance(s, int):
        return s
    m = re.search(r"s?(\d+)$", name)
    return int(m.group(1)) if m else None


def photo_rows(job: tuple[str, str]) -> dict:
    """Read one photo and return its rows (or why it gave none)."""
    from calibration.template import get_template
    from sheetcheck.errors import SheetcheckError
    from vision.marks import MARKS
    from vision.pipeline import read_photo

    photo, truth_path = job
    truth = json.loads(Path(truth_path).read_text())
    name = Path(photo).stem
    seed = _seed_of(truth, name)
    if not seed_allowed(seed):
        return {"photo": photo, "skip": f"seed {seed} not allowed (>= {FORBIDDEN_SEED} and not "
                                        "spent, or unknown)"}
    try:
        # the hand reader alone: its readings and the features do not depend on any model
        reading = read_photo(photo, keep_matrix=True, learned=None)
    except SheetcheckError as e:
        return {"photo": photo, "skip": f"{e.code}"}
    if reading.template.id != truth.get("template"):
        return {"photo": photo, "skip": "misidentified"}
    tpl = get_template(truth["template"])
    ids = [rid for rid in reading.readings]
    marks = truth["marks"]
    rows, y, allowed, kinds, regions, hand = [], [], [], [], [], []
    for i, rid in enumerate(ids):
        t = marks.get(rid)
        if t not in MARKS:
            continue
        r = tpl.region(rid)
        rows.append(reading.matrix[i])
        y.append(MARKS.index(t))
        allowed.append([m in r.marks for m in MARKS])
        kinds.append(r.kind)
        regions.append(rid)
        hand.append(MARKS.index(reading.readings[rid].mark))
    pc = float(reading.details["photo_confidence"]["value"])
    return {"photo": photo, "seed": seed, "preset": str(truth.get("preset", "?")),
            "painter": str(truth.get("painter") or (truth.get("conditions") or {}).get("painter")
                           or "default"),
            "X": np.asarray(rows, np.float32), "y": np.asarray(y, np.int16),
            "allowed": np.asarray(allowed, bool), "kind": kinds, "region": regions,
            "hand": np.asarray(hand, np.int16), "photo_conf": pc}


def read_corpora(folders, fn, *, workers: int, out, initializer=None, initargs=(),
                 every: int = 20) -> tuple[list, list]:
    """``fn((photo, truth))`` for every photo of ``folders`` on ``workers`` processes, with
    progress on stderr: ``(results that gave rows, [{"photo", "why"} of those skipped])``.
    When none gave rows (a held-out painter's corpus, unspent measurement seeds: every photo
    refused), says so and why on stderr (nothing is written to ``out``)."""
    from sheetcheck.commands.eval import find_pairs

    jobs = [(str(p), str(t)) for d in folders for p, t in find_pairs(d)]
    t0 = time.time()
    results = []
    with Pool(workers, initializer=initializer, initargs=initargs) as pool:
        for k, res in enumerate(pool.imap(fn, jobs, chunksize=2)):
            results.append(res)
            if (k + 1) % every == 0 or k + 1 == len(jobs):
                print(f"[{k + 1}/{len(jobs)}] {time.time() - t0:.0f} s", file=sys.stderr, flush=True)
    ok = [r for r in results if "skip" not in r and len(r["y"])]
    skipped = [{"photo": r["photo"], "why": r["skip"]} for r in results if "skip" in r]
    if not ok:
        why = sorted({s["why"] for s in skipped})
        print(f"error: no photo gave rows ({len(skipped)} skipped: {'; '.join(why[:3])}); "
              f"nothing written to {out}", file=sys.stderr)
    return ok, skipped


def _init_worker(tone: bool):
    import vision.light

    # each worker reads with the dataset's tone correction (set here rather than in the parent
    # before forking: the caller's setting is left as it was, and any start method works)
    vision.light.TONE_CORRECTION = tone
    try:
        os.nice(5)  # other work on the machine comes first
    except OSError:
        pass


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="corpus folders (scripts/make_corpus.py --out)")
    ap.add_argument("--out", required=True, help=".npz to write (keep it outside the repository)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--tone", choices=("on", "off", "default"), default="default",
                    help="the light stage's per-channel tone correction (vision.light."
                         "TONE_CORRECTION): on, off, or as the code has it by default; the "
                         "rows record which, and train_reader refuses to mix them")
    args = ap.parse_args(argv)
    import vision.light

    tone = bool(vision.light.TONE_CORRECTION) if args.tone == "default" else args.tone == "on"
    t0 = time.time()
    ok, skipped = read_corpora(args.folders, photo_rows, workers=args.workers, out=args.out,
                               initializer=_init_worker, initargs=(tone,))
    if not ok:
        return 1
    from vision.marks import FEATURE_NAMES
    n = [len(r["y"]) for r in ok]
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out,
        X=np.concatenate([r["X"] for r in ok]), y=np.concatenate([r["y"] for r in ok]),
        allowed=np.concatenate([r["allowed"] for r in ok]),
        photo=np.repeat(np.arange(len(ok)), n),
        kind=np.asarray(sum((r["kind"] for r in ok), [])),
        region=np.asarray(sum((r["region"] for r in ok), [])),
        preset=np.repeat([r["preset"] for r in ok], n),
        painter=np.repeat([r["painter"] for r in ok], n),
        hand_mark=np.concatenate([r["hand"] for r in ok]),
        photo_conf=np.repeat([r["photo_conf"] for r in ok], n),
        feature_names=np.asarray(FEATURE_NAMES), tone_correction=np.bool_(tone),
        photos=np.asarray([r["photo"] for r in ok]), seeds=np.asarray([r["seed"] for r in ok]),
        folders=np.asarray([str(Path(d).resolve()) for d in args.folders]),
        skipped=json.dumps(skipped))
    print(f"{out}: {sum(n)} regions from {len(ok)} photos ({len(skipped)} skipped) "
          f"in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
