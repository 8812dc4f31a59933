#!/usr/bin/env python
"""Pack reader models fitted by one recipe into one model file with a committee.

The first model reads and decides (its trees, temperature and rule); the others are its
second opinions (``vision.learned.second_opinions``): a reading stays confident only if every
one of them is confident of the same mark. The output is a ``sheetcheck.reader-model/2``
document: the first model's document plus ``committee``, the others' whole documents. The
first model's check rows (``.check.json`` beside it) are copied beside the output.

    scripts/pack_committee.py --id reader-v8 --out calibration/models/reader-v8.json \\
        fits/reader-s0.json fits/reader-s1.json fits/reader-s2.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sheetcheck.errors import SheetcheckError  # noqa: E402
from sheetcheck.files import read_json_file  # noqa: E402
from vision.learned import COMMITTEE_FORMAT, MODEL_FORMAT, ReaderModelError, model_from_dict  # noqa: E402


def pack(docs: list[dict], *, model_id: str) -> dict:
    """One format-2 document from format-1 ``docs`` (the first decides, the rest are its
    committee); checked by loading it."""
    if len(docs) < 2:
        raise ReaderModelError("a committee needs at least two models: the first reads, the "
                               "others are its second opinions.")
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            raise ReaderModelError(f"model {i + 1} is not a {MODEL_FORMAT!r} document.",
                                   hint="Pack the files scripts/train_reader.py wrote.")
    # the members named after the committee (a flagged reading's reason names the member:
    # "second opinion unsure (reader-v8.2: ...)"), each keeping its fit's own id as "fit"
    members = [{**d, "id": f"{model_id}.{k}", "fit": d.get("id")} for k, d in enumerate(docs[1:], 2)]
    out = {**docs[0], "format": COMMITTEE_FORMAT, "id": model_id, "fit": docs[0].get("id"),
           "committee": members}
    model_from_dict(out, source=model_id)  # every member valid, columns within the first's
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model files (train_reader.py --out); the first decides")
    ap.add_argument("--out", required=True, help="the committee's model file")
    ap.add_argument("--id", required=True, help="its id (e.g. reader-v8)")
    args = ap.parse_args(argv)
    try:
        docs = [read_json_file(m, what="reader model", error=ReaderModelError) for m in args.models]
        doc = pack(docs, model_id=args.id)
    except SheetcheckError as e:
        print(f"error: {e.message}" + (f"\n{e.hint}" if e.hint else ""), file=sys.stderr)
        return 2
    out = Path(args.out)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    check = Path(args.models[0]).with_suffix(".check.json")
    if check.is_file():
        c = json.loads(check.read_text())
        c["model"] = out.name
        out.with_suffix(".check.json").write_text(json.dumps(c) + "\n")
    print(f"wrote {out} ({out.stat().st_size // 1024} KB): {args.models[0]} with "
          f"{len(docs) - 1} second opinion(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
