"""One exception family for everything a user can get wrong.

Every error a user can cause (a bad photo, an unknown template, a damaged template file, an
illegal game state) is a :class:`SheetcheckError` subclass with

* ``code``: a stable snake_case string (used by the HTTP API as ``{code, message}``),
* ``exit_code``: the distinct process exit code the command line returns for it,
* a message that says what was wrong, with which input, and what to do about it.

Exit codes 0-4 are reserved: 0 success, 1 some inputs of many failed, 2 a usage error (argparse),
3 and 4 the verdicts DISCREPANCY and NEEDS REVIEW of ``sheetcheck check``. Errors use 10 and up.
"""

from __future__ import annotations


class SheetcheckError(Exception):
    """Base of every error sheetcheck reports to a user."""

    code = "sheetcheck_error"
    exit_code = 10
    http_status = 400

    def __init__(self, message: str, *, hint: str | None = None):
        self.message = message
        self.hint = hint
        super().__init__(message if hint is None else f"{message} {hint}")

    def to_dict(self) -> dict:
        return {"code": self.code, "message": str(self)}


# --- templates -------------------------------------------------------------------------------

class TemplateError(SheetcheckError):
    """A template file is damaged or invalid (``problems`` lists every problem found)."""

    code = "invalid_template"
    exit_code = 20
    http_status = 422

    def __init__(self, message: str, problems: list[str] | None = None, *, hint: str | None = None):
        self.problems = list(problems or [])
        if self.problems:
            message = message + "\n" + "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(message, hint=hint)


class UnknownTemplateError(SheetcheckError):
    code = "unknown_template"
    exit_code = 21
    http_status = 404


# --- photos ----------------------------------------------------------------------------------

class PhotoError(SheetcheckError):
    """Base for problems with the photo itself."""

    code = "bad_photo"
    exit_code = 30
    http_status = 422


class NotAnImageError(PhotoError):
    code = "not_an_image"
    exit_code = 31
    http_status = 415


class CorruptImageError(PhotoError):
    code = "corrupt_image"
    exit_code = 32


class ImageTooLargeError(PhotoError):
    code = "image_too_large"
    exit_code = 33
    http_status = 413


class NoSheetFoundError(PhotoError):
    code = "no_sheet_found"
    exit_code = 34


class SheetCutOffError(PhotoError):
    code = "sheet_cut_off"
    exit_code = 35


class BlurryPhotoError(PhotoError):
    code = "blurry_photo"
    exit_code = 36


class NoColourError(PhotoError):
    """The sheet was found, but the photo is black and white: the pencils cannot be told apart."""

    code = "no_colour"
    exit_code = 38


class SeveralSheetsError(PhotoError):
    """Two or more whole score sheets in one photo: which one is meant cannot be known."""

    code = "several_sheets"
    exit_code = 39


class SheetTooSmallError(NoSheetFoundError):
    """The sheet (or something very like it) is in the photo, but too small to be read.

    A subclass of :class:`NoSheetFoundError`: code that handles "no sheet" keeps working."""

    code = "sheet_too_small"
    exit_code = 37


# --- game states -----------------------------------------------------------------------------

class StateError(SheetcheckError):
    """A game state that cannot be built (unknown region, impossible mark, wrong level)."""

    code = "invalid_state"
    exit_code = 40
    http_status = 422


class InputFileError(SheetcheckError):
    """A file named on the command line is missing or unreadable."""

    code = "input_file"
    exit_code = 50


class NotAReportFolderError(InputFileError):
    """A folder named as a batch's report folder holds no batch results store."""

    code = "not_a_report_folder"
    exit_code = 52


class PhotoNotInReportError(InputFileError):
    """No stored photo (or more than one) matches the name or hash prefix given."""

    code = "photo_not_in_report"
    exit_code = 53
    http_status = 404


class ReportChangedError(InputFileError):
    """The photo got a new revision between reading it and storing a correction."""

    code = "report_changed"
    exit_code = 54
    http_status = 409
