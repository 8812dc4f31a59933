"""The ``sheetcheck`` command line: a thin shell over the library.

Each subcommand's parser is declared here; its work is done by ``run(args) -> int`` in
``sheetcheck/commands/<name>.py``, imported only when that subcommand runs so that start-up
stays fast. Every :class:`~sheetcheck.errors.SheetcheckError` becomes a one-paragraph message on
stderr and its own exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from sheetcheck.errors import SheetcheckError

EPILOG = """exit codes: 0 ok; 1 some inputs failed; 2 usage error; 3 DISCREPANCY; 4 NEEDS REVIEW; 10+ errors
(11 simulator condition, 20 invalid template, 21 unknown template, 22 damaged reader model,
30-39 bad photo, 40 invalid state, 50 input file, 52 not a batch report folder, 53 photo not in
the report, 54 report changed meanwhile)."""


def _build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="sheetcheck",
        description="Check photographed score sheets of roll-and-write games "
                    "(Pick a Pen: Crypts and Reefs).",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

    s = sub.add_parser("templates", help="list the sheet templates this sheetcheck knows",
                       description="List template ids with game, level, version and title.")
    s.add_argument("--json", action="store_true", help="print JSON instead of a table")
    s.add_argument("--schema", metavar="PATH",
                   help="also write the template JSON Schema to PATH")

    s = sub.add_parser("print", help="print a blank sheet as PDF or PNG",
                       description="Render a clean sheet to play on: A4/Letter at true size in the "
                                   "PDF, four ArUco corner markers identifying the template, and a "
                                   "colour-calibration strip. Next to a PNG it writes "
                                   "NAME.regions.json (see docs/REGIONS_JSON.md).")
    s.add_argument("template", help="template id (see `sheetcheck templates`)")
    s.add_argument("--out", required=True, help="output file, .pdf or .png")
    s.add_argument("--dpi", type=int, default=None, help="resolution (default 300 for PDF, 150 for PNG)")
    s.add_argument("--no-markers", action="store_true",
                   help="leave out the fiducial markers (a sheet whose printer did not add them)")

    s = sub.add_parser("simulate", help="make realistic phone photos of filled sheets with known truth",
                       description="Paint pencil marks on a sheet and photograph it with a simulated "
                                   "phone camera. Writes photo JPEG(s) and truth JSON into --out.")
    s.add_argument("template", help="template id")
    g = s.add_mutually_exclusive_group(required=True)
    g.add_argument("--marks", metavar="MARKS.json", help="marks to paint: {region_id: mark}")
    g.add_argument("--random", action="store_true", help="draw random marks")
    g.add_argument("--game", action="store_true",
                   help="play a legal game with the rules engine and paint its end state")
    s.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    s.add_argument("--preset", choices=["easy", "typical", "hard"], default="typical",
                   help="difficulty preset for the camera and the pencils (default typical)")
    s.add_argument("--count", type=int, default=1, help="how many photos (seeds seed..seed+count-1)")
    s.add_argument("--no-markers", action="store_true", help="photograph a sheet printed without markers")
    s.add_argument("--painter", choices=["default", "heldout", "varied"], default="default",
                   help="who colours the sheet: the default painter, the held-out painter and "
                        "pencil sets kept for out-of-sample evaluation (docs/EVALUATION.md), or "
                        "the varied training painter (docs/SIMULATOR.md)")
    s.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="fix one camera/pencil condition (repeatable), e.g. --set rotation_deg=180")
    s.add_argument("--out", required=True, help="output folder")

    s = sub.add_parser("read", help="read a photo of a filled sheet into region readings",
                       description="Find the sheet in each photo, identify its template, and read "
                                   "every region (empty, a pencil colour, or crossed).")
    s.add_argument("photos", nargs="+", help="photo file(s): JPEG, PNG, WebP, HEIC")
    s.add_argument("--template", help="template id, if known (skips identification)")
    s.add_argument("--json", action="store_true",
                   help="one JSON object per photo per line (see docs/READ_JSON.md)")
    s.add_argument("--debug-dir", help="write the stages' pictures here")
    s.add_argument("--no-patch-reader", action="store_true",
                   help="read without the patch reader's third opinion (vision.patch_reader): "
                        "the two readers' flags stay as they are")

    s = sub.add_parser("eval", help="measure the reader on simulated photos with truth",
                       description="Run the reader over a folder of photos with truth files and "
                                   "print accuracy per kind, colour and preset, confident errors, "
                                   "and timings.")
    s.add_argument("folder", help="folder of photos and their truth JSON (as simulate writes them)")
    s.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    s.add_argument("--reader", metavar="MODEL",
                   help="learned reader model file to read with (default: the bundled default, "
                        "calibration/models/; to compare models on the same photos)")
    s.add_argument("--no-patch-reader", action="store_true",
                   help="read without the patch reader's third opinion (to measure what it "
                        "changes on the same photos)")

    s = sub.add_parser("score", help="score and audit a game state typed by hand",
                       description="Print the breakdown, every rule finding and the total for a "
                                   "state JSON (see docs/STATE_JSON.md).")
    s.add_argument("state", help="state JSON file")
    s.add_argument("--json", action="store_true", help="print the audit as JSON")

    s = sub.add_parser("check", help="check one photo: read, score, audit, verdict and overlay",
                       description="Find the sheet, read it, score and audit it, and print the "
                                   "breakdown, the total by the rules and as claimed, the findings "
                                   "and a verdict (OK, DISCREPANCY, NEEDS REVIEW). Exit code 0 for "
                                   "OK, 3 for DISCREPANCY, 4 for NEEDS REVIEW.")
    s.add_argument("photo", help="photo file")
    s.add_argument("--template", help="template id, if known")
    s.add_argument("--fix", action="append", default=[], metavar="REGION=MARK",
                   help="a person's correction of one region's reading (repeatable)")
    s.add_argument("--overlay", metavar="PATH", help="where to write the overlay picture "
                                                     "(default: PHOTO.overlay.png beside the photo)")
    s.add_argument("--json", action="store_true", help="print the whole report as JSON")

    s = sub.add_parser("batch", help="check every photo in a folder or zip; then settle the "
                                     "doubtful sheets (show, fix)",
                       usage="sheetcheck batch SOURCE --out REPORT_DIR [--manifest CSV] "
                             "[--workers N] [--dask tcp://HOST:PORT] [--no-progress]\n"
                             "       sheetcheck batch show REPORT_DIR [PHOTO] [--json]\n"
                             "       sheetcheck batch fix REPORT_DIR PHOTO REGION=MARK "
                             "[REGION=MARK ...] [--by NAME] [--json]",
                       description="SOURCE --out: check many photos in parallel, store every "
                                   "result in SQLite as it is made (re-runs skip photos already "
                                   "done), and write results.csv, results.json and index.html "
                                   "(sheets needing review first).\n"
                                   "show: list the sheets by verdict with the regions to look "
                                   "at; with PHOTO, its revisions and corrections.\n"
                                   "fix: record a person's reading of regions (after looking at "
                                   "the overlay) as a new revision, re-scored; the report files "
                                   "are rewritten. PHOTO is the file name as in results.csv or a "
                                   "sha256 prefix (6+ hex digits).",
                       epilog="exit codes: batch 0, or 1 when some photos could not be checked; "
                              "show 0; fix 0 OK, 3 DISCREPANCY, 4 still NEEDS REVIEW; "
                              "2 usage, 40 bad REGION=MARK, 52 not a report folder, 53 unknown "
                              "or ambiguous PHOTO (or one that could not be checked), 54 the "
                              "photo was corrected meanwhile. A bad fix stores nothing.",
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("source", metavar="SOURCE|show|fix",
                   help="folder (searched recursively) or .zip of photos; or `show` / `fix`")
    s.add_argument("args", nargs="*", metavar="ARG",
                   help="show: REPORT_DIR [PHOTO]; fix: REPORT_DIR PHOTO REGION=MARK ...")
    s.add_argument("--out", help="report folder (required to run a batch)")
    s.add_argument("--manifest", help="CSV with columns file,player[,table]")
    s.add_argument("--workers", type=int, default=None, help="processes (default: all cores)")
    s.add_argument("--dask", metavar="tcp://HOST:PORT", help="run on a Dask distributed cluster")
    s.add_argument("--no-progress", action="store_true", help="no progress bar")
    s.add_argument("--json", action="store_true",
                   help="show: the listing as JSON; fix: the new report as JSON")
    s.add_argument("--by", metavar="NAME", help="fix: who made the correction (recorded)")

    s = sub.add_parser("serve", help="run the web service and the phone page",
                       description="Serve the HTTP API (docs/API.md) and the page at /. Settings "
                                   "also come from SHEETCHECK_* environment variables.")
    s.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    s.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    s.add_argument("--db", help="audit database: a SQLite path or a SQLAlchemy URL")
    s.add_argument("--token", help="API token required for writes that change stored audits")
    s.add_argument("--max-upload-mb", type=float, help="largest upload accepted")
    s.add_argument("--workers", type=int, help="processes for CPU work")

    s = sub.add_parser("bench", help="benchmarks: read speed, scoring throughput",
                       description="Measure speed as ratios within one run (shared machines are noisy).")
    s.add_argument("what", choices=["read", "scoring", "batch", "server"], help="which benchmark")
    s.add_argument("--count", type=int, default=None, help="how many inputs")
    s.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    s.add_argument("--rounds", type=int, default=1,
                   help="read: time every photo this many times, in turns (more pairs: steadier "
                        "medians on a noisy machine; default 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args = parser.parse_args(argv)
    module = importlib.import_module(f"sheetcheck.commands.{args.command}")
    try:
        return int(module.run(args) or 0)
    except SheetcheckError as e:
        print(f"sheetcheck {args.command}: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("sheetcheck: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
