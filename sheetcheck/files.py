"""Reading the user's files with messages that say what went wrong and what to do."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from sheetcheck.errors import InputFileError, SheetcheckError


def read_json_file(path: str | Path, *, what: str, error: type[SheetcheckError] = InputFileError,
                   parse_error: type[SheetcheckError] | None = None,
                   hint: str = "Check the path.") -> Any:
    """Parse the JSON file at ``path`` (a ``what`` such as "state file").

    Raises
    ------
    SheetcheckError
        ``error`` when the file cannot be read, ``parse_error`` (default ``error``) when it is
        not valid JSON, naming the file, the line and column of a syntax error, and ``hint``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise error(f"cannot read {what} {path}: {e.strerror or e}.", hint=hint) from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise (parse_error or error)(f"{what} {path} is not valid JSON (line {e.lineno}, column {e.colno}: {e.msg}).",
                    hint="Fix the JSON syntax and try again.") from None
