"""``sheetcheck bench scoring``: states scored and audited per second, per game."""

from __future__ import annotations

import importlib
import json


def run(args) -> int:
    count = args.count or 500
    results = {}
    for game in ("crypts", "reefs"):
        mod = importlib.import_module(f"sheetcheck.bench.scoring_{game}")
        results[game] = mod.measure(count)
    for game, r in results.items():
        print(f"{game}: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                      for k, v in r.items()))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)
    return 0
