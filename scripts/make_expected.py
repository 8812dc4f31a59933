#!/usr/bin/env python
"""Write ``sample_photos/<name>.expected.json`` for every sample photo, FROM ITS TRUTH.

The expected report is what the checker must say about the photo if it reads it right: the
truth marks (``<name>.truth.json``, written by the simulator) scored and audited by the rules
engine, with no uncertainty. It is never made from what the reader printed, so the golden test
(tests/test_check_golden.py) compares the checker end to end against the truth.

    .venv/bin/python scripts/make_expected.py [--check] [FOLDER]

``--check`` writes nothing and exits 1 if any expected file is missing or out of date (e.g.
after a rules change: then review the differences by hand before re-running without --check).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

EXPECTED_FORMAT = "sheetcheck.expected/1"


def expected_from_truth(truth: dict, photo_name: str) -> dict:
    """The expected report for one photo from its truth document."""
    from calibration.template import get_template
    from sheetcheck.report import RegionRead, build_report

    t = get_template(truth["template"])
    marks = {r.id: truth["marks"].get(r.id, "empty") for r in t.readable_regions()}
    rep = build_report(t, {rid: RegionRead(m) for rid, m in marks.items()})
    doc = rep.to_json()
    # cross-check with what the simulator says it made: a legal game, or one labelled rule break
    broken = sorted({f["rule"] for f in doc["findings"] if f["severity"] != "note"})
    labelled = sorted((truth.get("violation") or {}).get("rules", []))
    if broken != labelled:
        raise SystemExit(f"{photo_name}: the rules engine finds {broken or 'no broken rule'} but "
                         f"the truth is labelled {labelled or 'a legal game'}: look before "
                         "writing an expected report")
    return {
        "format": EXPECTED_FORMAT,
        "photo": photo_name,
        "made_from": f"{Path(photo_name).stem}.truth.json marks, scored by the rules engine",
        "template": doc["template"],
        "verdict": doc["verdict"],
        "total": doc["total"],
        # broken rules (violations and claims); notes change nothing and are listed apart
        "findings": sorted({f["rule"] for f in doc["findings"] if f["severity"] != "note"}),
        "notes": sorted({f["rule"] for f in doc["findings"] if f["severity"] == "note"}),
        "differences": doc["differences"],
        # one readable line each, to review by hand against the photo and the rulebook
        "breakdown_rules": [f'{l["section"]}: {l["label"]} = {l["points"]}'
                            for l in doc["breakdown"]["rules"]["lines"]],
        "marks": marks,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("folder", nargs="?", default=str(ROOT / "sample_photos"))
    ap.add_argument("--check", action="store_true", help="write nothing; fail if out of date")
    args = ap.parse_args(argv)
    folder = Path(args.folder)
    truths = sorted(folder.glob("*.truth.json"))
    if not truths:
        print(f"no *.truth.json in {folder}", file=sys.stderr)
        return 1
    stale = 0
    for tp in truths:
        stem = tp.name[: -len(".truth.json")]
        photos = [p for p in folder.glob(stem + ".*") if p.suffix.lower() in (".jpg", ".jpeg", ".png", ".webp", ".heic")]
        if not photos:
            print(f"{tp.name}: no photo beside it", file=sys.stderr)
            stale += 1
            continue
        doc = expected_from_truth(json.loads(tp.read_text(encoding="utf-8")), photos[0].name)
        text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
        out = folder / f"{stem}.expected.json"
        old = out.read_text(encoding="utf-8") if out.exists() else None
        if old != text:
            stale += 1
            if args.check:
                print(f"{out.name}: missing or out of date", file=sys.stderr)
            else:
                out.write_text(text, encoding="utf-8")
        print(f"{stem}: {doc['template']['id']} {doc['verdict']} rules {doc['total']['rules']} "
              f"claimed {doc['total']['claimed']} findings {', '.join(doc['findings']) or '-'}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
