"""``sheetcheck batch DIR|ZIP --out REPORT_DIR``: check every photo, resumably, in parallel."""

from __future__ import annotations

import sys


def run(args) -> int:
    from sheetcheck.batch.runner import run_batch

    s = run_batch(args.source, args.out, manifest=args.manifest, workers=args.workers,
                  dask=args.dask, show_progress=not args.no_progress)
    counts = ", ".join(f"{v}: {n}" for v, n in sorted(s.verdicts.items())) or "nothing new"
    print(f"{s.total} photos: {s.processed} checked ({counts}), {s.skipped} already done, "
          f"in {s.seconds:.1f} s ({s.rate:.2f} sheets/s)", file=sys.stderr)
    print(f"report: {s.out / 'index.html'}  (results.csv, results.json, results.sqlite)")
    # 1: some photos could not be checked (they are error rows in the report)
    return 1 if s.errors else 0
