#!/usr/bin/env python
"""Generate a seeded evaluation corpus of simulated photos with truth for ``sheetcheck eval``.

    .venv/bin/python scripts/make_corpus.py --out DIR [--painter default|heldout|varied] [--count N]
                                            [--seed S] [--workers K] [--set KEY=VALUE ...]

Photo ``k`` (0 .. N-1) has the seed ``S + k`` and is spread evenly over the six templates, the
three presets and markers / no markers: template ``k mod 6``, preset ``(k div 6) mod 3``, and
photos with ``(k div 6) mod 4 == 3`` without markers (about 1/4, every preset alike). Its marks are a legal game played by
the template's rules engine (3 photos in 4) or plausible random marks (1 in 4); the calibration
swatches are coloured in about 2/3 of the photos. Output: ``<template>-<preset>-<m|nm>-s<seed>.jpg``
and ``.truth.json`` (``sheetcheck.truth/1``, with ``marks_source``, ``painter`` and
``corpus``). The same arguments give the same files, whatever the number of workers. ``--set``
fixes a simulator condition for every photo (``--set output_long_side=800`` for small test
corpora); it is recorded in every truth file, so leave it out of measured corpora.

The held-out painter (``--painter heldout``) is for measuring only: see docs/EVALUATION.md. The
varied painter (``--painter varied``: hands and pencils drawn from much wider ranges) is for
training corpora: see docs/SIMULATOR.md.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TEMPLATES = ("crypts-1", "crypts-2", "crypts-3", "reefs-1", "reefs-2", "reefs-3")
PRESETS = ("easy", "typical", "hard")


def plan(count: int, seed: int) -> list[tuple[str, str, bool, int]]:
    """``(template, preset, markers, seed)`` for every photo of the corpus, in order."""
    out = []
    for k in range(count):
        template = TEMPLATES[k % len(TEMPLATES)]
        row = k // len(TEMPLATES)  # one row: each template once
        preset = PRESETS[row % len(PRESETS)]
        # every fourth row without markers; 3 and 4 are coprime, so over 12 rows each preset
        # gets one such row, and a corpus of only a few rows already has some
        markers = row % 4 != 3
        out.append((template, preset, markers, seed + k))
    return out


def corpus_marks(template, seed: int, cross_rate: float = 0.0) -> tuple[dict, str]:
    """The marks of one photo and where they came from (``game`` or ``random``).

    ``cross_rate`` > 0 (training corpora only: ``--cross-rate``) then crosses out each region
    that allows it with that probability, from a stream of its own (so the rest of the photo
    is the one the seed gives without it). Crossings-out are a few per sheet in a real game:
    too rare for a learned reader to see every way of drawing one.
    """
    import numpy as np

    from scoring.registry import engine_for
    from sheetcheck.simulator import random_marks, with_swatches

    rng = np.random.default_rng([seed, 0x5EED])
    if rng.random() < 0.75:
        engine = engine_for(template.game)
        marks, source = engine.state_to_marks(engine.simulate_game(template, seed)), "game"
    else:
        marks, source = random_marks(template, rng, fill=float(rng.uniform(0.3, 0.8))), "random"
    # swatches: decided here for every photo (random_marks colours them on its own otherwise)
    swatches = {r.id for r in template.readable_regions() if r.kind == "swatch"}
    marks = {k: v for k, v in marks.items() if k not in swatches}
    if rng.random() < 2 / 3:
        marks = with_swatches(template, marks, rng, p=0.95)
    if cross_rate > 0:
        r_cross = np.random.default_rng([seed, 0xC2055])
        marks = dict(marks)
        for r in template.readable_regions():
            if r.kind != "swatch" and "crossed" in r.marks and r_cross.random() < cross_rate:
                marks[r.id] = "crossed"
    return marks, source


def make_one(job: tuple) -> tuple[str, float, int]:
    """Make one photo and its truth in ``out``; return (stem, seconds, bytes)."""
    template_id, preset, markers, seed, out, painter, overrides, cross_rate = job
    from calibration.template import get_template
    from sheetcheck.simulator import simulate_photo, truth_json

    t0 = time.perf_counter()
    template = get_template(template_id)
    marks, source = corpus_marks(template, seed, cross_rate)
    photo = simulate_photo(template, marks, seed=seed, preset=preset, markers=markers, painter=painter,
                           overrides=overrides)
    truth = dict(photo.truth)
    truth["marks_source"] = source
    truth["painter"] = painter
    truth["conditions"] = {**truth["conditions"], "painter": painter}
    truth["corpus"] = {"script": "scripts/make_corpus.py", "overrides": dict(overrides)}
    if cross_rate > 0:
        truth["corpus"]["cross_rate"] = cross_rate
    stem = f"{template_id}-{preset}-{'m' if markers else 'nm'}-s{seed}"
    out = Path(out)
    (out / f"{stem}.jpg").write_bytes(photo.jpeg)
    (out / f"{stem}.truth.json").write_text(truth_json(truth), encoding="utf-8")
    return stem, time.perf_counter() - t0, len(photo.jpeg)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", required=True, help="folder to write the photos and truth files to")
    ap.add_argument("--painter", choices=("default", "heldout", "varied"), default="default",
                    help="who colours the sheets (heldout: for measuring only, never for tuning; "
                         "varied: domain-randomised hands and pencils, for training)")
    ap.add_argument("--count", type=int, default=300, help="number of photos (default 300)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first photo (photo k: seed + k)")
    ap.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1),
                    help="processes (default: both cores)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="fix a simulator condition for every photo (recorded in the truth)")
    ap.add_argument("--cross-rate", type=float, default=0.0, metavar="P",
                    help="training corpora only: also cross out each region that allows it "
                         "with probability P (recorded in the truth)")
    args = ap.parse_args(argv)
    overrides = {}
    for item in args.set:
        key, eq, value = item.partition("=")
        if not eq or not key:
            ap.error(f"--set needs KEY=VALUE, got {item!r}")
        overrides[key.strip()] = value.strip()
    if not 0 <= args.cross_rate <= 1:
        ap.error(f"--cross-rate must be within 0..1, got {args.cross_rate}")
    if args.count < 1:
        ap.error(f"--count must be at least 1, got {args.count}")
    if args.workers < 1:
        ap.error(f"--workers must be at least 1, got {args.workers}")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"error: cannot create output folder {out}: {e.strerror}.", file=sys.stderr)
        return 2
    jobs = [(*p, str(out), args.painter, overrides, args.cross_rate)
            for p in plan(args.count, args.seed)]
    # a bad --set is found on the first photo; check it here so the error is one clear line
    try:
        from calibration.template import get_template
        from sheetcheck.simulator import heldout
        from sheetcheck.simulator.presets import sample_conditions
        import numpy as np
        from sheetcheck.simulator import varied_hand
        cam, paint = heldout.split_overrides(overrides) if args.painter == "heldout" else (overrides, {})
        if args.painter == "varied":  # hand.* keys are the varied hand's
            paint = {k: v for k, v in cam.items() if k.startswith("hand.")}
            cam = {k: v for k, v in cam.items() if not k.startswith("hand.")}
        sample_conditions("typical", np.random.default_rng(0), cam)
        if paint and args.painter == "varied":
            varied_hand(0, get_template(TEMPLATES[0]).id, "typical", paint)
        elif paint:
            heldout.heldout_conditions(0, get_template(TEMPLATES[0]).id, "typical", paint)
    except Exception as e:  # noqa: BLE001 - SheetcheckError: print its message, no traceback
        print(f"error: {e}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    done = 0
    # each photo is independent and fully seeded, so the order workers finish in does not matter
    if args.workers == 1:
        results = map(make_one, jobs)
        pool = None
    else:
        pool = get_context("spawn").Pool(args.workers, maxtasksperchild=20)
        results = pool.imap_unordered(make_one, jobs)
    try:
        for stem, took, size in results:
            done += 1
            el = time.perf_counter() - t0
            eta = el / done * (len(jobs) - done)
            print(f"\r[{done}/{len(jobs)}] {stem}  {took:.1f} s  {size // 1024} KB  "
                  f"elapsed {el:.0f} s, left ~{eta:.0f} s   ", end="", file=sys.stderr, flush=True)
    finally:
        if pool is not None:
            pool.close()
            pool.join()
    print(file=sys.stderr)
    print(f"{len(jobs)} photos ({args.painter} painter, seeds {args.seed}..{args.seed + len(jobs) - 1}) "
          f"in {out}, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
