"""``sheetcheck simulate``: realistic phone photos of filled sheets, with their truth.

Writes ``OUT/<template>-<preset>-s<seed>.jpg`` and ``.truth.json`` per photo (see
docs/SIMULATOR.md).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from calibration.template import get_template
from sheetcheck.errors import InputFileError, StateError
from sheetcheck.simulator import (SimulatorError, random_marks, simulate_photo, truth_json,
                                  with_swatches)


def parse_sets(items: list[str]) -> dict[str, str]:
    """``["KEY=VALUE", ...]`` -> ``{KEY: VALUE}`` (values are parsed later, per condition)."""
    out = {}
    for it in items:
        key, sep, value = it.partition("=")
        if not sep or not key.strip():
            raise SimulatorError(f"--set {it!r} is not KEY=VALUE.",
                                 hint="For example --set rotation_deg=180 --set jpeg_quality=70.")
        out[key.strip()] = value.strip()
    return out


def load_marks(path: str) -> dict[str, str]:
    """A marks file: a JSON object ``{region_id: mark}`` (or a truth file with ``marks``)."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise InputFileError(f"cannot read marks file {p}: {e.strerror}.", hint="Check the path.") from None
    except json.JSONDecodeError as e:
        raise InputFileError(f"marks file {p} is not valid JSON (line {e.lineno}: {e.msg}).",
                             hint="Write a JSON object {region_id: mark}.") from None
    if isinstance(doc, dict) and isinstance(doc.get("marks"), dict):
        doc = doc["marks"]
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise InputFileError(f"marks file {p} must be a JSON object mapping region ids to marks.",
                             hint='For example {"cell.r1.c1": "red", "total": "written"}.')
    return doc


def game_marks(template, seed: int) -> dict[str, str]:
    """Marks of a legal game played by the template's rules engine."""
    try:
        from scoring.registry import engine_for
        engine = engine_for(template.game)
    except ImportError as e:
        raise StateError(f"--game needs the rules engine for {template.game!r}, which is not "
                         f"available ({e}).", hint="Use --random or --marks instead.") from None
    if not hasattr(engine, "simulate_game") or not hasattr(engine, "state_to_marks"):
        raise StateError(f"the rules engine for {template.game!r} cannot play games yet.",
                         hint="Use --random or --marks instead.")
    return engine.state_to_marks(engine.simulate_game(template, seed))


def run(args) -> int:
    template = get_template(args.template)
    if args.count < 1:
        raise SimulatorError(f"--count must be at least 1, got {args.count}.")
    overrides = parse_sets(args.set)
    fixed = load_marks(args.marks) if args.marks else None
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputFileError(f"cannot create output folder {out}: {e.strerror}.") from None
    for seed in range(args.seed, args.seed + args.count):
        if fixed is not None:
            marks = fixed
        elif args.game:
            marks = with_swatches(template, game_marks(template, seed), np.random.default_rng([seed, 9]))
        else:
            marks = random_marks(template, np.random.default_rng([seed, 7]),
                                 fill=float(np.random.default_rng([seed, 8]).uniform(0.3, 0.8)))
        t0 = time.perf_counter()
        photo = simulate_photo(template, marks, seed=seed, preset=args.preset,
                               markers=not args.no_markers, overrides=overrides,
                               painter=getattr(args, "painter", "default"))
        took = time.perf_counter() - t0
        photo.truth["marks_source"] = "file" if fixed is not None else ("game" if args.game else "random")
        stem = f"{template.id}-{args.preset}-s{seed}"
        (out / f"{stem}.jpg").write_bytes(photo.jpeg)
        (out / f"{stem}.truth.json").write_text(truth_json(photo.truth), encoding="utf-8")
        w, h = photo.truth["image_size"]
        print(f"{out / (stem + '.jpg')}  {w}x{h}  {len(photo.jpeg) // 1024} KB  "
              f"q{photo.truth['conditions']['jpeg_quality']}  {took:.1f} s")
    return 0
