#!/usr/bin/env python
"""Remake ``sample_photos/``: simulated phone photos of played sheets, with truth.

    .venv/bin/python scripts/make_samples.py [--out sample_photos] [--dry-run]

Every photo is made by the ``sheetcheck simulate`` command (the exact command is printed and
listed in sample_photos/README.md). Marks come from a legal game played by the rules engine
(``--game``). A photo over the size budget is made again with a lower JPEG quality (the
override is recorded in its truth and printed).

A few more sheets (``VIOLATION_SAMPLES``) break one rule on purpose: a legal game's end state with
one labelled violation injected by the rules engine (``engine.inject_violation``). Their truth
records it as ``"violation": {"kind", "rule"}`` and ``marks_source: "game+violation"``, and their
file names say ``-break-<kind>``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_BYTES = 1_000_000

#: (template, preset, seed, markers, extra --set overrides). Covers all six sheets, the three
#: presets, sheets with and without markers, and the range of output sizes.
SAMPLES: list[tuple[str, str, int, bool, dict]] = [
    ("crypts-1", "easy", 1, True, {"jpeg_quality": 86}),
    ("crypts-1", "hard", 2, True, {}),
    ("crypts-1", "typical", 3, False, {"output_long_side": 2048}),
    ("crypts-2", "typical", 2, True, {"output_long_side": 2048}),
    ("crypts-2", "easy", 4, True, {"output_long_side": 2000}),
    ("crypts-3", "typical", 5, True, {"output_long_side": 1600}),
    ("crypts-3", "hard", 6, False, {}),
    ("reefs-1", "easy", 7, True, {"output_long_side": 2000, "jpeg_quality": 89}),
    ("reefs-1", "typical", 8, True, {"output_long_side": 2560, "jpeg_quality": 84}),
    ("reefs-2", "typical", 9, False, {"output_long_side": 2048}),
    ("reefs-2", "hard", 10, True, {}),
    ("reefs-3", "easy", 11, False, {"output_long_side": 1600}),
    ("reefs-3", "typical", 12, True, {"output_long_side": 2048}),
    ("reefs-3", "hard", 13, True, {}),
]


#: (template, preset, seed, violation kind, extra overrides): sheets with one deliberate rule break.
VIOLATION_SAMPLES: list[tuple[str, str, int, str, dict]] = [
    ("crypts-2", "easy", 21, "points_unearned", {"output_long_side": 2000, "jpeg_quality": 88}),
    ("crypts-3", "typical", 22, "gap_in_row", {"output_long_side": 2048}),
    ("reefs-1", "easy", 23, "coin_boxes_wrong", {"output_long_side": 2048, "jpeg_quality": 88}),
    ("reefs-3", "typical", 24, "branch", {"output_long_side": 2048}),
]


def make_violation_sample(template_id, preset, seed, kind, sets, out: Path) -> Path:
    """One photo of a legal game's end state with one injected, labelled rule break."""
    import json
    import random

    import numpy as np

    from calibration.template import get_template
    from scoring.registry import engine_for
    from sheetcheck.simulator import simulate_photo, truth_json, with_swatches

    t = get_template(template_id)
    engine = engine_for(t.game)
    state = engine.simulate_game(t, seed)
    broken = engine.inject_violation(state, kind, random.Random(seed))
    audit = engine.audit(broken)
    rules = sorted({f.rule for f in audit.findings if f.severity.value != "note"})
    marks = with_swatches(t, engine.state_to_marks(broken), np.random.default_rng(seed))
    name = f"{template_id}-{preset}-break-{kind}-s{seed}"
    sets = dict(sets)
    while True:
        photo = simulate_photo(t, marks, seed=seed, preset=preset, overrides=sets)
        if len(photo.jpeg) <= MAX_BYTES:
            break
        sets["jpeg_quality"] = int(photo.truth["conditions"]["jpeg_quality"]) - 6
    photo.truth["marks_source"] = "game+violation"
    photo.truth["violation"] = {"kind": kind, "rules": rules}
    (out / f"{name}.jpg").write_bytes(photo.jpeg)
    (out / f"{name}.truth.json").write_text(truth_json(photo.truth), encoding="utf-8")
    print(f"{name}.jpg: {kind} -> findings {rules}")
    return out / f"{name}.jpg"


def command(template, preset, seed, markers, sets, out) -> list[str]:
    argv = ["simulate", template, "--game", "--seed", str(seed), "--preset", preset, "--out", str(out)]
    if not markers:
        argv.append("--no-markers")
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    return argv


def table(folder: Path) -> str:
    """Markdown table of the photos in ``folder`` from their truth files."""
    import json
    rows = ["| photo | sheet | preset | markers | size, JPEG | camera, light, background, pencils "
            "| marked regions |", "|---|---|---|---|---|---|---|"]
    for t in sorted(folder.glob("*.truth.json")):
        d = json.loads(t.read_text())
        c = d["conditions"]
        jpg = t.with_name(t.name.replace(".truth.json", ".jpg"))
        curl = {"none": "flat", "bend": "bent page", "fold": "folded page"}[c["curl_type"]]
        marked = sum(v != "empty" for v in d["marks"].values())
        rows.append(f"| `{jpg.name}` | {d['template']} | {d['preset']} | {'yes' if d['markers'] else 'no'} "
                    f"| {c['output_size'][0]}x{c['output_size'][1]}, q{c['jpeg_quality']}, "
                    f"{jpg.stat().st_size // 1024} KB | {c['tilt_deg']:.0f}° tilt, rot {c['rotation_deg']:.0f}°, "
                    f"{curl}, {c['colour_temp_k']:.0f} K, {c['background']['name']}, {c['pencil_brand']} "
                    f"| {marked} |")
    return "\n".join(rows)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", default=str(ROOT / "sample_photos"))
    ap.add_argument("--dry-run", action="store_true", help="print the commands only")
    ap.add_argument("--table", action="store_true",
                    help="print the README's table of the photos in --out and exit")
    args = ap.parse_args(argv)
    if args.table:
        print(table(Path(args.out)))
        return 0
    from sheetcheck.cli import main as cli

    out = Path(args.out)
    for template, preset, seed, markers, sets in SAMPLES:
        sets = dict(sets)
        while True:
            cmd = command(template, preset, seed, markers, sets, out)
            print("sheetcheck " + " ".join(shlex.quote(a) for a in cmd))
            if args.dry_run:
                break
            rc = cli(cmd)
            if rc != 0:
                return rc
            jpg = out / f"{template}-{preset}-s{seed}.jpg"
            if jpg.stat().st_size <= MAX_BYTES:
                break
            # over budget: the same photo at a lower JPEG quality
            import json
            truth = json.loads((out / f"{template}-{preset}-s{seed}.truth.json").read_text())
            sets["jpeg_quality"] = int(truth["conditions"]["jpeg_quality"]) - 6
            print(f"  {jpg.name}: {jpg.stat().st_size} bytes > {MAX_BYTES}; again at "
                  f"jpeg_quality={sets['jpeg_quality']}")
    if not args.dry_run:
        for template, preset, seed, kind, sets in VIOLATION_SAMPLES:
            make_violation_sample(template, preset, seed, kind, sets, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
