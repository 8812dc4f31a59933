"""Check one photo end to end: read it, build the state, score, audit, explain.

:func:`check_photo` is the one function the command line, the batch runner and the server call.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import time
from pathlib import Path
from typing import Iterable, Mapping

from sheetcheck.errors import InputFileError
from sheetcheck.report import RegionRead, Report, build_report, parse_fixes


def reads_from_reading(reading) -> dict[str, RegionRead]:
    """The report's view of a ``vision.pipeline.SheetReading``'s region readings."""
    return {rid: RegionRead(r.mark, float(r.confidence), bool(r.review),
                            tuple((str(m), float(p)) for m, p in r.alternatives))
            for rid, r in reading.readings.items()}


def check_photo(photo, *, template_id: str | None = None,
                corrections: Mapping[str, str] | Iterable[str] = (),
                filename: str | None = None, keep_images: bool = True) -> Report:
    """Read, score and audit one photo of a filled sheet.

    Parameters
    ----------
    photo : bytes, str or os.PathLike
        The encoded photo or a path to it.
    template_id : str, optional
        Skip template identification.
    corrections : mapping of region id -> mark, or iterable of "REGION=MARK"
        A person's corrections (validated against the template; recorded in the report).
    filename : str, optional
        The photo's name in the report (default: the path).
    keep_images : bool
        Keep the rectified sheet on the report (needed for the overlay).

    Returns
    -------
    Report

    Raises
    ------
    SheetcheckError
        for a bad photo (decode, locate), an unknown template, or invalid corrections.
    """
    from vision.pipeline import read_photo

    t0 = time.perf_counter()
    if isinstance(photo, (str, os.PathLike)):
        from vision.decode import read_photo_file

        path = Path(photo)
        data = read_photo_file(path)
        filename = filename if filename is not None else str(path)
    elif isinstance(photo, (bytes, bytearray, memoryview)):
        data = bytes(photo)
    else:
        raise InputFileError(f"cannot check a photo given as {type(photo).__name__}.",
                             hint="Pass the photo's bytes or a path to it.")
    t1 = time.perf_counter()
    reading = read_photo(data, template_id=template_id, keep_images=keep_images, label=filename)
    t2 = time.perf_counter()
    template = reading.template
    fixes = (dict(corrections) if isinstance(corrections, Mapping)
             else parse_fixes(corrections, template))
    loc = reading.location
    reader = {"method": loc.method, "markers_found": [int(m) for m in loc.markers_found],
              "quality": round(float(loc.quality), 4), "review_count": len(reading.flagged),
              **({"mirrored": True} if loc.details.get("mirrored") else {}),
              "photo_size": list(reading.details.get("photo_size", [])),
              "timings_ms": {k: round(float(v), 2) for k, v in reading.timings_ms.items()}}
    photo_info = {"name": filename, "sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
    report = build_report(template, reads_from_reading(reading), fixes=fixes, photo=photo_info,
                          reader=reader, rectified=reading.rectified,
                          rectified_dpi=float(reading.details.get("dpi", 100.0)))
    t3 = time.perf_counter()
    timings = {"load": t1 - t0, "read": t2 - t1, "score": t3 - t2, "total": t3 - t0}
    return dataclasses.replace(report, timings=timings)
