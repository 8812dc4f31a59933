#!/usr/bin/env python
"""How often the per-photo pencil calibration gives a marked region to the wrong pencil.

    .venv/bin/python scripts/calibration_check.py CORPUS_DIR [CORPUS_DIR ...] [--workers N] [--json PATH]

Reads every photo of each corpus (photos with ``NAME.truth.json``, as ``make_corpus.py`` writes
them), takes the marked regions the reader calibrated its palette on
(``SheetReading.calibration_samples``), and calibrates them again three ways: the reader's
calibration (``vision.colour.calibrate_palette``), the earlier one it keeps as a second opinion
(``calibrate_palette_by_gaps``), and an oracle fitted to the truth (each pencil's hue and spread
from the samples the truth gives it: what a perfect matching could reach). A sample counts as
misassigned when the pencil nearest its hue, in units of that pencil's spread, is not its
truth's colour. Prints the counts per preset (samples and photos with any), the figures of
docs/EVALUATION.md ("Thirteenth measurement").
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from calibration.template import PENCIL_COLOURS  # noqa: E402
from vision.colour import (PaletteColour, calibrate_palette, calibrate_palette_by_gaps,  # noqa: E402
                           circular_mean_deg, hue_diff, load_palette)

METHODS = ("reader", "by_gaps", "oracle")


def _oracle(prior, samples, truth):
    cols = []
    for c in prior.colours:
        hs = np.array([s.hue_deg for s, t in zip(samples, truth) if t == c.name])
        if hs.size == 0:
            cols.append(c)
            continue
        m = circular_mean_deg(hs)
        sd = float(np.sqrt(np.mean(np.asarray(hue_diff(hs, m), float) ** 2)))
        cols.append(PaletteColour(c.name, m, max(5.0, sd)))
    return replace(prior, colours=tuple(cols))


def misassigned(prior, samples, truth) -> dict[str, int]:
    """Samples of a pencil colour (by the truth) nearer another pencil, per method."""
    palettes = {"reader": calibrate_palette(prior, samples),
                "by_gaps": calibrate_palette_by_gaps(prior, samples),
                "oracle": _oracle(prior, samples, truth)}
    out = {}
    for name, pal in palettes.items():
        wrong = 0
        for s, t in zip(samples, truth):
            if t in PENCIL_COLOURS:
                d = pal.distances(s.hue_deg)
                wrong += min(d, key=d.get) != t
        out[name] = wrong
    return out


def one_photo(path: str) -> dict | None:
    from sheetcheck.errors import SheetcheckError
    from vision.pipeline import read_photo

    p = Path(path)
    doc = json.loads(p.with_name(p.stem + ".truth.json").read_text())
    try:
        reading = read_photo(p)
    except SheetcheckError as e:
        return {"photo": p.name, "preset": doc.get("preset"), "failed": e.code}
    pairs = reading.calibration_samples
    truth = [doc["marks"].get(rid, "empty") for rid, _ in pairs]
    samples = [s for _, s in pairs]
    n = sum(t in PENCIL_COLOURS for t in truth)
    return {"photo": p.name, "preset": doc.get("preset"), "samples": n,
            "misassigned": misassigned(load_palette("default"), samples, truth)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("corpus", nargs="+", help="folders of photos with truth files")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--json", help="also write every photo's counts here")
    a = ap.parse_args(argv)
    photos = []
    for d in a.corpus:
        found = sorted(str(p) for p in Path(d).iterdir()
                       if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp", ".heic")
                       and p.with_name(p.stem + ".truth.json").exists()) if Path(d).is_dir() else []
        if not found:
            print(f"{d}: no photo with a NAME.truth.json beside it; make one with scripts/make_corpus.py",
                  file=sys.stderr)
            return 2
        photos += found
    with ProcessPoolExecutor(max(1, a.workers)) as ex:
        rows = [r for r in ex.map(one_photo, photos, chunksize=4) if r is not None]
    samples, wrong, photos_any, failed = Counter(), Counter(), Counter(), Counter()
    for r in rows:
        if "failed" in r:
            failed[r["preset"]] += 1
            continue
        samples[r["preset"]] += r["samples"]
        for m, k in r["misassigned"].items():
            wrong[(r["preset"], m)] += k
            photos_any[(r["preset"], m)] += k > 0
    print(f"{len(rows)} photos; calibration samples given to the wrong pencil (photos with any):")
    print(f"{'preset':8s} {'samples':>8s} " + " ".join(f"{m:>14s}" for m in METHODS) + "  not read")
    for p in ("easy", "typical", "hard"):
        print(f"{p:8s} {samples[p]:8d} "
              + " ".join(f"{wrong[(p, m)]:>8d} ({photos_any[(p, m)]:3d})" for m in METHODS)
              + f"  {failed[p]}")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
