"""``sheetcheck bench WHAT``: dispatch to the benchmark modules in sheetcheck/bench/."""

from __future__ import annotations

import importlib


def run(args) -> int:
    return int(importlib.import_module(f"sheetcheck.bench.{args.what}").run(args) or 0)
