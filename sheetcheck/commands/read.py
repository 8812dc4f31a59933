"""``sheetcheck read PHOTO... [--template ID] [--json] [--debug-dir D]``.

Reads every photo in one process (the start-up and the per-template caches are paid once). A
photo that cannot be read gets its own message (a JSON line with ``"error"`` under ``--json``)
and the others are still read; the exit code is that of the first failure, 0 when all were read.
Never a traceback: an unexpected failure is reported as ``internal_error``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

from sheetcheck.errors import SheetcheckError

#: Exit code for a failure that is not a SheetcheckError (a bug): still no traceback.
INTERNAL_EXIT = 10


def error_json(photo: str, code: str, message: str) -> dict:
    from vision.pipeline import READ_FORMAT

    return {"format": READ_FORMAT, "photo": photo, "error": {"code": code, "message": message}}


def read_one(path: str, *, template_id: str | None, keep_images: bool = False, learned="default",
             patch_reader="default"):
    """Read one photo; returns ``(reading, None)`` or ``(None, (code, message, exit_code))``.
    ``learned``, ``patch_reader``: the second reader and the third opinion
    (``vision.pipeline.read_photo``)."""
    from vision.pipeline import read_photo

    try:
        return read_photo(path, template_id=template_id, keep_images=keep_images,
                          learned=learned, patch_reader=patch_reader), None
    except SheetcheckError as e:
        return None, (e.code, str(e), e.exit_code)
    except MemoryError:
        return None, ("out_of_memory", f"{path}: not enough memory to read this photo.", INTERNAL_EXIT)
    except Exception as e:  # noqa: BLE001 - a bug must not become a traceback for the user
        return None, ("internal_error",
                      f"{path}: the reader failed unexpectedly ({type(e).__name__}: {e}). "
                      "Please report this photo.", INTERNAL_EXIT)


def format_text(reading) -> str:
    """Human-readable summary of one reading."""
    loc = reading.location
    t = reading.template
    lines = [f"{reading.photo}: {t.id} v{t.version} ({t.title})",
             f"  located by {loc.method}, markers {list(loc.markers_found) or 'none'}, "
             f"quality {loc.quality:.2f}"
             + (", photo mirrored (selfie camera?): read flipped left-right"
                if loc.details.get("mirrored") else ""),
             f"  palette calibrated from {reading.palette.source}"]
    flagged = reading.flagged
    lines.append(f"  {len(reading.readings)} regions, {len(flagged)} to review")
    w = max((len(r) for r in reading.readings), default=10)
    for rid, r in reading.readings.items():
        flag = "  REVIEW" if r.review else ""
        alt = ""
        if r.review and len(r.alternatives) > 1:
            alt = f"  (or {r.alternatives[1][0]} {r.alternatives[1][1]:.2f})"
        lines.append(f"  {rid:<{w}}  {r.mark:<8} {r.confidence:5.2f}{flag}{alt}")
    tm = reading.timings_ms
    lines.append("  timings ms: " + ", ".join(f"{k} {v:.0f}" for k, v in tm.items()))
    return "\n".join(lines)


def write_debug(reading, folder: str | Path) -> list[Path]:
    """Write the stage pictures of a reading: rectified, light-normalised, and an overlay with
    every region's reading (green = confident, red = review)."""
    import cv2

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stem = Path(reading.photo or "photo").stem
    out = []
    if reading.rectified is not None:
        p = folder / f"{stem}.rectified.png"
        cv2.imwrite(str(p), cv2.cvtColor(reading.rectified, cv2.COLOR_RGB2BGR))
        out.append(p)
    if reading.normalised is not None:
        img = reading.normalised.copy()
        p = folder / f"{stem}.light.png"
        cv2.imwrite(str(p), cv2.cvtColor(img, cv2.COLOR_RGB2BGR))
        out.append(p)
        k = float(reading.details.get("dpi", 100.0)) / 25.4
        ov = cv2.cvtColor(img, cv2.COLOR_RGB2BGR)
        for rid, r in reading.readings.items():
            reg = reading.template.region(rid)
            poly = np.round(reg.shape.polygon() * k - 0.5).astype(np.int32).reshape(-1, 1, 2)
            colour = (0, 0, 255) if r.review else (0, 160, 0)
            cv2.polylines(ov, [poly], True, colour, 1)
            cx, cy = reg.shape.centre()
            cv2.putText(ov, r.mark[:2], (int(cx * k) - 6, int(cy * k) + 4),
                        cv2.FONT_HERSHEY_SIMPLEX, 0.35, colour, 1, cv2.LINE_AA)
        p = folder / f"{stem}.overlay.png"
        cv2.imwrite(str(p), ov)
        out.append(p)
    p = folder / f"{stem}.read.json"
    p.write_text(json.dumps(reading.to_json(), indent=1), encoding="utf-8")
    out.append(p)
    return out


def run(args) -> int:
    first_fail = 0
    for path in args.photos:
        reading, err = read_one(path, template_id=args.template, keep_images=bool(args.debug_dir),
                                patch_reader=None if getattr(args, "no_patch_reader", False)
                                else "default")
        if err is not None:
            code, message, exit_code = err
            first_fail = first_fail or exit_code
            if args.json:
                print(json.dumps(error_json(path, code, message)), flush=True)
            else:
                # (the locate stages speak of "the photo": among several, say which)
                where = "" if path in message else f"{path}: "
                print(f"sheetcheck read: {where}{message}", file=sys.stderr, flush=True)
            continue
        if args.debug_dir:
            try:
                write_debug(reading, args.debug_dir)
            except OSError as e:
                print(f"sheetcheck read: cannot write debug pictures to {args.debug_dir}: {e}",
                      file=sys.stderr)
        if args.json:
            print(json.dumps(reading.to_json(), separators=(",", ":")), flush=True)
        else:
            print(format_text(reading), flush=True)
    return first_fail
