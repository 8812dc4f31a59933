"""Paired read times of two checkouts of sheetcheck, read by read on the same photos.

    python scripts/ab_read.py A_DIR B_DIR [--rounds 20] [--count 12] [--seed 9000]
    python scripts/ab_read.py A_DIR A_DIR ...      # the harness against itself: its noise

Why (session 44): ``sheetcheck bench read`` measures one build against the JPEG decode in one
process; between two builds its read / decode ratio swung 1.82-2.31 within an hour on a shared
machine, far more than a change of a few ms. Here two worker processes, one per checkout
(its folder first on ``sys.path``), each warmed up on the photos, take turns reading the same
photo (in random order within each pair), so that the machine's drift falls on both alike;
the report is the median of the paired differences B - A with a bootstrap 95 % interval.
Runs of 192-480 pairs still disagreed by ~1 ms (a process's own placement on the cores
counts too), so a difference under ~1.5 ms is not a finding; run it twice, and A against A.

The helper thread is allowed on every read (``vision._geom_threads.idle_core`` forced true in
both workers): otherwise each worker would see the other's last read as a busy core and fall
back to one thread at random. The photos are the read benchmark's (``sheetcheck.bench.read.
make_photos``: 12 MP JPEGs, typical preset, all six sheets in turn), made by this checkout.
"""

from __future__ import annotations

import argparse
import os
import pickle
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WORKER = r"""
import os, pickle, sys, time
tree = sys.argv[1]
sys.path.insert(0, tree)
import vision
if not os.path.realpath(vision.__file__).startswith(os.path.realpath(tree)):
    sys.exit(f"vision imported from {vision.__file__}, not from {tree}")
import vision._geom_threads as gt
gt.idle_core = lambda: True
from vision.pipeline import read_photo
photos = pickle.load(open(sys.argv[2], "rb"))
for name, data in photos:
    read_photo(data, label=name)
print("ready", flush=True)
for line in sys.stdin:
    name, data = photos[int(line)]
    t = time.perf_counter()
    read_photo(data, label=name)
    print(f"{(time.perf_counter() - t) * 1000:.3f}", flush=True)
"""


def _median_ci(d: list[float], *, draws: int = 2000, seed: int = 0) -> tuple[float, float]:
    """A bootstrap 95 % interval of the median of ``d``."""
    rng = random.Random(seed)
    meds = sorted(statistics.median(rng.choices(d, k=len(d))) for _ in range(draws))
    return meds[int(0.025 * draws)], meds[int(0.975 * draws) - 1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="checkout A (a folder holding vision/ and sheetcheck/)")
    ap.add_argument("b", help="checkout B")
    ap.add_argument("--rounds", type=int, default=20, help="passes over the photos (default 20)")
    ap.add_argument("--count", type=int, default=12, help="photos (default 12)")
    ap.add_argument("--seed", type=int, default=9000, help="the photos' first seed (default 9000)")
    args = ap.parse_args(argv)
    for tree in (args.a, args.b):
        if not (Path(tree) / "vision" / "pipeline.py").is_file():
            print(f"ab_read: {tree} holds no vision/pipeline.py: give a checkout of sheetcheck",
                  file=sys.stderr)
            return 2
    if args.rounds < 1 or args.count < 1:
        print("ab_read: --rounds and --count must be at least 1", file=sys.stderr)
        return 2
    sys.path.insert(0, str(ROOT))
    from sheetcheck.bench.read import make_photos

    print(f"making {args.count} photos ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "photos.pkl"
        path.write_bytes(pickle.dumps(make_photos(args.count, seed=args.seed)))
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        workers = [subprocess.Popen([sys.executable, "-c", WORKER, str(Path(t).resolve()),
                                     str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    text=True, cwd=tmp, env=env) for t in (args.a, args.b)]
        try:
            for w in workers:
                if w.stdout.readline().strip() != "ready":
                    print("ab_read: a worker failed to start (see above)", file=sys.stderr)
                    return 1
            rng = random.Random(args.seed)
            times: tuple[list[float], list[float]] = ([], [])
            for _ in range(args.rounds):
                for k in range(args.count):
                    for i in rng.sample((0, 1), 2):
                        workers[i].stdin.write(f"{k}\n")
                        workers[i].stdin.flush()
                        times[i].append(float(workers[i].stdout.readline()))
        finally:
            for w in workers:
                if w.stdin:
                    w.stdin.close()
                w.wait()
    a, b = times
    d = [y - x for x, y in zip(a, b)]
    lo, hi = _median_ci(d)
    print(f"A {args.a}: median read {statistics.median(a):.1f} ms")
    print(f"B {args.b}: median read {statistics.median(b):.1f} ms")
    print(f"B - A, paired ({len(d)} pairs): median {statistics.median(d):+.2f} ms "
          f"(95 % interval {lo:+.2f} to {hi:+.2f}), mean {statistics.mean(d):+.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
