"""Value types shared by every rules engine: breakdown lines, findings, claims.

``scoring/`` is pure: no images, no files. Engines take a game state (built from a template's
region readings or from hand-typed JSON) and return these small frozen types.
"""

from __future__ import annotations

from dataclasses import dataclass, field, asdict
from enum import Enum
from typing import Any


class Severity(str, Enum):
    """How a finding bears on the verdict.

    ``violation``: the sheet breaks a rule (the score by the rules differs or the sheet is not
    a legal game). ``claim``: a point box, star or track the player coloured that the rules do
    not give, or one earned but not coloured. ``note``: worth telling, changes nothing.
    """

    VIOLATION = "violation"
    CLAIM = "claim"
    NOTE = "note"


@dataclass(frozen=True)
class Finding:
    """One rule the sheet breaks (or a point claimed wrongly), with its evidence.

    Parameters
    ----------
    rule : str
        Stable rule id, for example ``crypts.left_to_right``.
    message : str
        What is wrong, in words a player understands.
    rule_text : str
        The rulebook sentence the finding rests on (quoted) or the ruling in scoring/RULES.md.
    regions : tuple of str
        Region ids that show it (highlighted on the overlay).
    effect : int
        Points by which this finding moves the score the marks claim away from the score the
        rules allow (claimed minus allowed, 0 when it changes nothing).
    """

    rule: str
    message: str
    rule_text: str
    regions: tuple[str, ...] = ()
    effect: int = 0
    severity: Severity = Severity.VIOLATION

    def to_json(self) -> dict:
        d = asdict(self)
        d["regions"] = list(self.regions)
        d["severity"] = self.severity.value
        return d


@dataclass(frozen=True)
class Line:
    """One line of a score breakdown a player can follow.

    ``section`` groups lines (``rows``, ``columns``, ``treasures``, ``bonus`` ...), ``label`` is
    the line as printed, ``points`` its value, ``regions`` the region ids that earn it, and
    ``detail`` the groups or boxes behind it (free-form, JSON-serialisable).
    """

    section: str
    label: str
    points: int
    regions: tuple[str, ...] = ()
    detail: Any = None

    def to_json(self) -> dict:
        return {"section": self.section, "label": self.label, "points": self.points,
                "regions": list(self.regions), "detail": self.detail}


@dataclass(frozen=True)
class Breakdown:
    lines: tuple[Line, ...]

    @property
    def total(self) -> int:
        return sum(l.points for l in self.lines)

    def to_json(self) -> dict:
        return {"lines": [l.to_json() for l in self.lines], "total": self.total}


@dataclass(frozen=True)
class Audit:
    """Everything the rules engine says about one sheet.

    ``rules``: the score the rules allow. ``claimed``: what the marks on the sheet add up to as
    the player would count them (coloured point boxes, last coloured box of each track, coloured
    stars). ``findings``: every rule broken, with evidence.
    """

    game: str
    level: int | None
    rules: Breakdown
    claimed: Breakdown
    findings: tuple[Finding, ...] = field(default_factory=tuple)

    @property
    def difference(self) -> int:
        return self.claimed.total - self.rules.total

    def to_json(self) -> dict:
        return {"game": self.game, "level": self.level,
                "rules": self.rules.to_json(), "claimed": self.claimed.to_json(),
                "difference": self.difference,
                "findings": [f.to_json() for f in self.findings]}
