"""``sheetcheck check PHOTO``: one photo to an explained verdict and an overlay picture."""

from __future__ import annotations

import json
from pathlib import Path


def run(args) -> int:
    from sheetcheck.check import check_photo
    from sheetcheck.overlay import write_overlay
    from sheetcheck.report import format_text

    report = check_photo(args.photo, template_id=args.template, corrections=args.fix)
    photo = Path(args.photo)
    overlay = Path(args.overlay) if args.overlay else photo.with_name(photo.stem + ".overlay.png")
    write_overlay(report, overlay)
    if args.json:
        doc = report.to_json()
        doc["overlay"] = str(overlay)
        print(json.dumps(doc, indent=2))
    else:
        print(format_text(report))
        print(f"overlay  {overlay}")
    return report.exit_code
