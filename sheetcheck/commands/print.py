"""``sheetcheck print``: write a blank sheet to play on, as PDF (true size) or PNG + regions.json."""

from __future__ import annotations

from pathlib import Path

from calibration.render import page_size_px, regions_json_path, render_sheet, save_pdf, save_png
from calibration.template import get_template
from sheetcheck.errors import InputFileError, SheetcheckError

DEFAULT_DPI = {".pdf": 300, ".png": 150}
DPI_RANGE = (30, 600)  # 600 dpi is finer than any home printer; more only costs memory


def run(args) -> int:
    out = Path(args.out)
    ext = out.suffix.lower()
    if ext not in DEFAULT_DPI:
        raise InputFileError(f"cannot print to {str(out)!r}: the file must end in .pdf or .png.",
                             hint="For example: sheetcheck print crypts-1 --out sheet.pdf")
    dpi = DEFAULT_DPI[ext] if args.dpi is None else args.dpi
    if not DPI_RANGE[0] <= dpi <= DPI_RANGE[1]:
        raise SheetcheckError(f"--dpi {dpi} is out of range.",
                              hint=f"Use {DPI_RANGE[0]} to {DPI_RANGE[1]} (300 prints well; "
                                   "150 is plenty for a PNG to compare photos with).")
    template = get_template(args.template)  # UnknownTemplateError lists the valid ids
    markers = not args.no_markers
    w, h = page_size_px(template, dpi)
    if ext == ".pdf":
        save_pdf(template, out, dpi=dpi, markers=markers)
        print(f"wrote {out} ({template.page_size} {template.width_mm:g} x {template.height_mm:g} mm, "
              f"{w} x {h} px at {dpi} dpi{'' if markers else ', no markers'}); "
              "print at 100% / actual size, not 'fit to page'")
    else:
        save_png(render_sheet(template, dpi=dpi, markers=markers), out)
        print(f"wrote {out} ({w} x {h} px at {dpi} dpi{'' if markers else ', no markers'}) "
              f"and {regions_json_path(out)}")
    return 0
