"""The explicit registry of rules engines, keyed by the template's ``game``.

Every engine module provides the same functions (see docs/ENGINES.md):
``state_from_marks``, ``state_to_marks``, ``state_from_json``, ``state_to_json``, ``score``,
``claimed``, ``audit`` and ``simulate_game``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from sheetcheck.errors import StateError

ENGINES: dict[str, str] = {
    "pick_a_pen_crypts": "scoring.crypts",
    "pick_a_pen_reefs": "scoring.reefs",
}


def engine_for(game: str) -> ModuleType:
    """The rules-engine module for ``game``.

    Raises
    ------
    StateError
        naming the games that have an engine.
    """
    try:
        return importlib.import_module(ENGINES[game])
    except KeyError:
        raise StateError(f"no rules engine for game {game!r}.",
                         hint=f"Games with an engine: {', '.join(sorted(ENGINES))}.") from None
