"""``sheetcheck batch``: check a tournament's photos, then settle its doubtful sheets.

Three forms share the subcommand (the first word after ``batch`` picks one):

* ``sheetcheck batch SOURCE --out REPORT_DIR``: check every photo, resumably, in parallel;
* ``sheetcheck batch show REPORT_DIR [PHOTO]``: the sheets by verdict with the regions to look
  at, or one photo's revisions and corrections;
* ``sheetcheck batch fix REPORT_DIR PHOTO REGION=MARK ...``: store a person's corrections as a
  new revision, re-scored, and rewrite results.csv/json and index.html.

``show`` and ``fix`` always take further arguments and never ``--out``; a batch takes exactly
one SOURCE and ``--out``. So a photo folder that happens to be called ``show`` or ``fix`` is
still batched by ``sheetcheck batch fix --out REPORT_DIR`` (or ``./fix``).
"""

from __future__ import annotations

import json
import sys

FORMS = ("show", "fix")
_BATCH_ONLY = ("out", "manifest", "workers", "dask", "no_progress")


def _usage(message: str) -> int:
    print(f"sheetcheck batch: {message}\n(see `sheetcheck batch --help`)", file=sys.stderr)
    return 2  # argparse's exit code for a usage error


def run(args) -> int:
    rest = list(args.args or [])
    form = args.source if args.source in FORMS and (rest or args.out is None) else None
    if form is None:
        if rest:
            return _usage(f"a batch takes one SOURCE, got also {' '.join(rest)!r}; to settle "
                          "sheets use `sheetcheck batch fix REPORT_DIR PHOTO REGION=MARK ...`.")
        if args.out is None:
            return _usage("--out REPORT_DIR is required to run a batch.")
        if args.json or args.by:
            return _usage("--json and --by are for `batch show` and `batch fix`.")
        return _run_batch(args)
    given = [f"--{k.replace('_', '-')}" for k in _BATCH_ONLY if getattr(args, k, None)]
    if given:
        return _usage(f"{' '.join(given)} only apply to running a batch; `batch {form}` names "
                      "the report folder as its first argument.")
    if form == "show":
        if not 1 <= len(rest) <= 2:
            return _usage("usage: sheetcheck batch show REPORT_DIR [PHOTO] [--json]")
        if args.by:
            return _usage("--by is for `batch fix`.")
        return _show(rest[0], rest[1] if len(rest) == 2 else None, as_json=args.json)
    if len(rest) < 3:
        return _usage("usage: sheetcheck batch fix REPORT_DIR PHOTO REGION=MARK "
                      "[REGION=MARK ...] [--by NAME] [--json]")
    return _fix(rest[0], rest[1], rest[2:], by=args.by, as_json=args.json)


def _run_batch(args) -> int:
    from sheetcheck.batch.runner import run_batch

    s = run_batch(args.source, args.out, manifest=args.manifest, workers=args.workers,
                  dask=args.dask, show_progress=not args.no_progress)
    counts = ", ".join(f"{v}: {n}" for v, n in sorted(s.verdicts.items())) or "nothing new"
    print(f"{s.total} photos: {s.processed} checked ({counts}), {s.skipped} already done, "
          f"in {s.seconds:.1f} s ({s.rate:.2f} sheets/s)", file=sys.stderr)
    print(f"report: {s.out / 'index.html'}  (results.csv, results.json, results.sqlite)")
    if s.verdicts.get("NEEDS REVIEW"):
        print(f"to settle the sheets that need review: sheetcheck batch show {s.out}")
    # 1: some photos could not be checked (they are error rows in the report)
    return 1 if s.errors else 0


def _show(folder: str, photo: str | None, *, as_json: bool) -> int:
    from sheetcheck.batch.review import format_list, format_photo, list_view, photo_view
    from sheetcheck.batch.store import Store

    with Store.open_report(folder) as store:
        if photo is None:
            view = list_view(store.rows(), folder)
            text = format_list
        else:
            view = photo_view(store.history(store.find(photo)), folder)
            text = format_photo
    print(json.dumps(view, indent=2) if as_json else text(view))
    return 0


def _fix(folder: str, photo: str, fixes: list[str], *, by: str | None, as_json: bool) -> int:
    from sheetcheck.batch.review import format_fix
    from sheetcheck.batch.runner import fix_result

    outcome = fix_result(folder, photo, fixes, by=by)
    if as_json:
        doc = dict(outcome.report)
        doc["revision"] = outcome.revision
        print(json.dumps(doc, indent=2))
    else:
        print(format_fix(outcome, folder))
    # like `sheetcheck check`: 0 OK, 3 DISCREPANCY, 4 NEEDS REVIEW (still doubtful)
    return int(outcome.report["exit_code"])
