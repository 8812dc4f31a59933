#!/usr/bin/env python
"""Build the patch reader's dataset: run the real reader over simulator corpora and keep, per
region, its patch as the patch reader sees it (``vision.patch_reader.region_patches``), the
true mark, and the two readers' final reading before any patch reader (mark, confidence,
flag and its reason), so that a patch reader can be fitted on some corpora and its
thresholds chosen and checked on others.

    .venv/bin/python scripts/patch_dataset.py CORPUS_DIR [DIR ...] --out /tmp/patches/train.npz

Each DIR is a folder written by ``scripts/make_corpus.py``. The seed rules are the learned
reader's (``scripts/reader_dataset.py``: dev seeds below 100000, or spent measurement corpora;
anything else is refused); ``scripts/train_patch_reader.py`` fits on dev seeds only and never
lets the held-out painter choose anything.

The ``.npz`` holds ``X`` (N, S, S, 5) uint8 (sRGB, outline, print), ``y`` (N,) int (index into
``vision.patch_reader.MARKS``), ``allowed`` (N, 8) bool, ``kind``, ``region``, ``preset``,
``painter`` (N,) str, ``photo`` (N,) int (index into ``photos``), ``seed`` (N,) int, ``read``
(N,) int, ``conf`` (N,) float, ``review`` (N,) bool, ``reason`` (N,) str, ``alt`` (N, 8) float
(the readers' probability of each mark, their ``alternatives``; session 46), ``hand``,
``learned`` (N,) int (each reader's own mark, -1 when it gave none) and ``hand_conf``,
``learned_conf`` (N,) float, ``blank`` (N, 4) float (the hand reader's ``BLANK_FEATURES``,
what ``vision.marks`` asks of a blank region; session 47), and ``photos``, ``skipped`` (JSON
text).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from reader_dataset import _seed_of, read_corpora, seed_allowed  # noqa: E402
from vision.marks import BLANK_ZERO  # noqa: E402

#: The hand reader's features a blank region shows none of (``vision.marks.BLANK_ZERO``) and its
#: faint texels (``faint_coverage``, at most ``vision.marks.BLANK_FAINT_MAX`` on a blank one).
BLANK_FEATURES = (*BLANK_ZERO, "faint_coverage")


def photo_patches(job: tuple[str, str]) -> dict:
    """Read one photo (the two readers, no patch reader) and return its rows."""
    from sheetcheck.errors import SheetcheckError
    from vision.patch_reader import MARKS
    from vision.pipeline import read_photo

    photo, truth_path = job
    truth = json.loads(Path(truth_path).read_text())
    seed = _seed_of(truth, Path(photo).stem)
    if not seed_allowed(seed):
        return {"photo": photo, "skip": f"seed {seed} not allowed"}
    try:
        reading = read_photo(photo, patch_reader=None, keep_patches=True)
    except SheetcheckError as e:
        return {"photo": photo, "skip": e.code}
    if reading.template.id != truth.get("template"):
        return {"photo": photo, "skip": "misidentified"}
    ids, patches, kinds, allowed = reading.patches
    rows = {k: [] for k in ("i", "y", "kind", "region", "read", "conf", "review", "reason",
                            "alt", "hand", "hand_conf", "learned", "learned_conf", "blank")}
    for i, rid in enumerate(ids):
        t = truth["marks"].get(rid)
        rd = reading.readings.get(rid)
        if t not in MARKS or rd is None:
            continue
        alt = np.zeros(len(MARKS), np.float32)
        for m, pr in rd.alternatives:
            if m in MARKS:
                alt[MARKS.index(m)] = pr
        f = rd.features
        for k, v in (("i", i), ("y", MARKS.index(t)), ("kind", kinds[i]), ("region", rid),
                     ("read", MARKS.index(rd.mark)), ("conf", rd.confidence),
                     ("review", rd.review), ("reason", rd.reason.split(" (")[0]), ("alt", alt),
                     ("hand", MARKS.index(f["hand_mark"]) if f.get("hand_mark") in MARKS else -1),
                     ("hand_conf", float(f.get("hand_confidence", np.nan))),
                     ("learned", MARKS.index(f["learned_mark"])
                      if f.get("learned_mark") in MARKS else -1),
                     ("learned_conf", float(f.get("learned_confidence", np.nan))),
                     ("blank", np.asarray([f.get(k, np.nan) for k in BLANK_FEATURES],
                                          np.float32))):
            rows[k].append(v)
    sel = np.asarray(rows.pop("i"), np.int64)
    return {"photo": photo, "seed": seed, "preset": str(truth.get("preset", "?")),
            "painter": str((truth.get("conditions") or {}).get("painter") or "default"),
            "X": patches[sel], "allowed": allowed[sel], **rows}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folders", nargs="+", help="corpus folders (scripts/make_corpus.py --out)")
    ap.add_argument("--out", required=True, help=".npz to write (keep it outside the repository)")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.time()
    ok, skipped = read_corpora(args.folders, photo_patches, workers=args.workers, out=args.out,
                               initializer=os.nice, initargs=(5,), every=50)
    if not ok:
        return 1
    n = [len(r["y"]) for r in ok]
    cat = lambda k, dt=None: np.asarray(sum((list(r[k]) for r in ok), []), dt)  # noqa: E731
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        out, X=np.concatenate([r["X"] for r in ok]), y=cat("y", np.int16),
        allowed=np.concatenate([r["allowed"] for r in ok]), kind=cat("kind"),
        region=cat("region"), read=cat("read", np.int16), conf=cat("conf", np.float32),
        review=cat("review", bool), reason=cat("reason"),
        alt=np.asarray(np.concatenate([r["alt"] for r in ok]), np.float32).reshape(-1, 8),
        hand=cat("hand", np.int16), hand_conf=cat("hand_conf", np.float32),
        learned=cat("learned", np.int16), learned_conf=cat("learned_conf", np.float32),
        blank=np.asarray(np.concatenate([r["blank"] for r in ok]), np.float32).reshape(
            -1, len(BLANK_FEATURES)),
        photo=np.repeat(np.arange(len(ok)), n),
        seed=np.repeat([r["seed"] for r in ok], n),
        preset=np.repeat([r["preset"] for r in ok], n),
        painter=np.repeat([r["painter"] for r in ok], n),
        photos=np.asarray([r["photo"] for r in ok]), skipped=json.dumps(skipped))
    print(f"{out}: {sum(n)} regions from {len(ok)} photos ({len(skipped)} skipped) "
          f"in {time.time() - t0:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
