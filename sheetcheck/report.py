"""The report: one sheet's readings + the rules engine's audit -> an explained verdict.

The verdict is one of

* ``OK``: the marks claim exactly what the rules allow and no rule is broken;
* ``DISCREPANCY``: the claimed total differs from the rules' total, or a rule is broken (the
  report says which lines differ and by how much, and lists the findings);
* ``NEEDS REVIEW``: some region the reader was unsure of *matters*: one of its plausible
  readings, alone or jointly with other uncertain regions', changes the total by the rules, the
  claimed total, the verdict or the findings.

"Review only what matters": every region the reader flags uncertain is re-scored with each of
its plausible alternative readings (the reader's alternatives, at least the best two readings);
it is put up for review only when an alternative changes something a player would dispute,
alone or in a plausible joint reading with other uncertain regions (a bounded search: the best
alternatives together, then, for each broken finding, the joint readings of the regions that
touch it, the game's map proposing the route joins; a search stopped at its bound says so and
reviews what it did not clear); otherwise the report lists it as "uncertain but did not
matter". The smallest group that makes a change is reviewed, each region with its reason.
A person's corrections
(``--fix REGION=MARK``) replace readings, are validated against the template, settle the region
(it is no longer uncertain) and are recorded in the report.

This module is pure: readings in, a frozen :class:`Report` out. The JSON form
(``Report.to_json``) is a public contract, documented in docs/REPORT_JSON.md.
"""

from __future__ import annotations

import collections
import dataclasses
import heapq
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping

from calibration.template import Template
from scoring.common import Audit, Breakdown, Severity
from sheetcheck.errors import StateError

FORMAT = "sheetcheck.report/1"

#: An alternative reading is "plausible" when the reader gives it at least this probability;
#: the best alternative is always tried whatever its probability (the top-2 readings).
MIN_ALTERNATIVE_PROBABILITY = 0.02
#: At most this many alternatives per uncertain region are re-scored.
MAX_ALTERNATIVES = 4
#: Below this confidence the reader is not even sure of its own best reading, so its
#: probabilities for the others are no guide either: every mark the region allows is tried.
#: (0.9, not 0.5: a flagged reading's confidence averages two readers, and one of them may be
#: sure of the wrong mark while the other cannot tell; e.g. a point box the learned reader
#: called empty at 0.985 with 0.0007 for its true blue, the hand reader at 0.50. Re-scoring
#: every mark of such a region costs a few ms.)
LOW_CONFIDENCE = 0.9
#: At most this many groups of regions that matter only together are looked for.
MAX_JOINT_ROUNDS = 5
#: The finding-targeted joint search (see :func:`build_report`) re-scores at most this many joint
#: readings per sheet; when it stops at this bound with readings left to try, it says so and the
#: regions it had not cleared are put up for review (never a quiet OK).
MAX_SEARCH_AUDITS = 150
#: A joint reading is plausible when every region in it takes one of its plausible alternatives
#: and the product of (alternative's probability / the reading's confidence) is at least this.
#: An alternative tried only because the reader was unsure of everything counts as
#: MIN_ALTERNATIVE_PROBABILITY.
JOINT_FLOOR = 1e-3
#: At most this many regions change together in the best-first part of the search (the route
#: joins proposed from the map's graph may change more).
MAX_JOINT_SIZE = 3


class Verdict(str, Enum):
    OK = "OK"
    DISCREPANCY = "DISCREPANCY"
    NEEDS_REVIEW = "NEEDS REVIEW"

    @property
    def exit_code(self) -> int:
        return {"OK": 0, "DISCREPANCY": 3, "NEEDS REVIEW": 4}[self.value]


@dataclass(frozen=True)
class RegionRead:
    """What the reader says about one region (the report's view of a region reading).

    ``alternatives`` are ``(mark, probability)`` pairs other than ``mark``, most likely first.
    """

    mark: str
    confidence: float = 1.0
    review: bool = False
    alternatives: tuple[tuple[str, float], ...] = ()


@dataclass(frozen=True)
class Correction:
    """A person's correction of one region: the reader said ``read``, the person says ``mark``."""

    region: str
    read: str | None
    mark: str

    def to_json(self) -> dict:
        return {"region": self.region, "read": self.read, "mark": self.mark}


@dataclass(frozen=True)
class Alternative:
    """One alternative reading of an uncertain region, re-scored."""

    mark: str
    probability: float | None
    rules_total: int | None
    claimed_total: int | None
    verdict: Verdict | None
    changes: tuple[str, ...]          # what it changes: "total", "claimed", "verdict"
    error: str | None = None          # the engine refused the state (an impossible reading)

    def to_json(self) -> dict:
        return {"mark": self.mark, "probability": self.probability,
                "rules_total": self.rules_total, "claimed_total": self.claimed_total,
                "verdict": None if self.verdict is None else self.verdict.value,
                "changes": list(self.changes), "error": self.error}


@dataclass(frozen=True)
class Uncertain:
    """A region the reader was unsure of, with every alternative tried."""

    region: str
    read: str
    confidence: float
    alternatives: tuple[Alternative, ...]
    #: what this region's best alternative changes together with the other uncertain regions'
    #: (set when no region matters alone but the uncertain regions together do)
    together: tuple[str, ...] = ()
    #: broken rules whose findings cite this region while the reader could not read it
    #: (confidence below LOW_CONFIDENCE): a verdict must not rest on such evidence
    evidence_for: tuple[str, ...] = ()
    #: its group (itself included), each region with the mark it takes in the joint reading
    #: that changes ``together``: ``((region, mark), ...)``
    together_with: tuple[tuple[str, str], ...] = ()
    #: broken rules whose targeted joint search stopped at its bound before this region was
    #: cleared: it might matter, nobody knows, so a person looks
    cut_off: tuple[str, ...] = ()
    #: why it is put up for review, in words (empty when it does not matter)
    reason: str = ""

    @property
    def matters(self) -> bool:
        return (bool(self.together) or bool(self.evidence_for) or bool(self.cut_off)
                or any(a.changes for a in self.alternatives))

    def to_json(self) -> dict:
        return {"region": self.region, "read": self.read, "confidence": self.confidence,
                "matters": self.matters, "together": list(self.together),
                "together_with": [[r, m] for r, m in self.together_with],
                "evidence_for": list(self.evidence_for), "cut_off": list(self.cut_off),
                "reason": self.reason,
                "alternatives": [a.to_json() for a in self.alternatives]}


@dataclass(frozen=True)
class LineDifference:
    section: str
    label: str
    rules: int
    claimed: int

    @property
    def delta(self) -> int:
        return self.claimed - self.rules

    def to_json(self) -> dict:
        return {"section": self.section, "label": self.label, "rules": self.rules,
                "claimed": self.claimed, "delta": self.delta}


@dataclass(frozen=True)
class Report:
    """Everything the checker says about one sheet."""

    template: Template
    audit: Audit
    verdict: Verdict
    marks: Mapping[str, str]                      # final marks (after corrections)
    reads: Mapping[str, RegionRead]               # what the reader said
    uncertain: tuple[Uncertain, ...]
    corrections: tuple[Correction, ...]
    differences: tuple[LineDifference, ...]
    photo: Mapping[str, Any] = field(default_factory=dict)   # name, sha256, size ...
    reader: Mapping[str, Any] = field(default_factory=dict)  # locate method, quality ...
    timings: Mapping[str, float] = field(default_factory=dict)
    #: the rectified sheet (H, W, 3) uint8 RGB in the template frame, for the overlay; not in JSON
    rectified: Any = field(default=None, repr=False, compare=False)
    rectified_dpi: float | None = field(default=None, repr=False, compare=False)
    #: how much re-scoring the verdict took and whether the joint search hit its bound
    search: Mapping[str, Any] = field(default_factory=dict)

    # -- views -----------------------------------------------------------------------------
    @property
    def review(self) -> tuple[Uncertain, ...]:
        """Uncertain regions that matter: the ones a person must look at."""
        return tuple(u for u in self.uncertain if u.matters)

    @property
    def did_not_matter(self) -> tuple[Uncertain, ...]:
        return tuple(u for u in self.uncertain if not u.matters)

    @property
    def rules_total(self) -> int:
        return self.audit.rules.total

    @property
    def claimed_total(self) -> int:
        return self.audit.claimed.total

    @property
    def exit_code(self) -> int:
        return self.verdict.exit_code

    def summary(self) -> str:
        """One line a player reads first."""
        t = self.template
        head = f"{t.id} ({t.game}, level {t.level})"
        if self.verdict is Verdict.OK:
            why = f"total {self.rules_total}, as claimed"
        elif self.verdict is Verdict.DISCREPANCY:
            d = self.audit.difference
            why = (f"rules give {self.rules_total}, the sheet claims {self.claimed_total} "
                   f"({d:+d}); {len(self.rule_findings)} finding(s)")
        else:
            why = (f"look at {', '.join(u.region for u in self.review)} "
                   f"(as read: rules {self.rules_total}, claimed {self.claimed_total})")
        return f"{self.verdict.value}: {head}: {why}"

    @property
    def rule_findings(self):
        return tuple(f for f in self.audit.findings if f.severity is not Severity.NOTE)

    def to_json(self) -> dict:
        t = self.template
        return {
            "format": FORMAT,
            "photo": dict(self.photo),
            "template": {"id": t.id, "version": t.version, "game": t.game, "level": t.level},
            "verdict": self.verdict.value,
            "exit_code": self.exit_code,
            "summary": self.summary(),
            "total": {"rules": self.rules_total, "claimed": self.claimed_total,
                      "difference": self.audit.difference},
            "breakdown": {"rules": self.audit.rules.to_json(),
                          "claimed": self.audit.claimed.to_json()},
            "differences": [d.to_json() for d in self.differences],
            "findings": [f.to_json() for f in self.audit.findings],
            "review": [u.to_json() for u in self.review],
            "uncertain_did_not_matter": [u.to_json() for u in self.did_not_matter],
            "corrections": [c.to_json() for c in self.corrections],
            "readings": {rid: _reading_json(self.marks[rid], r)
                         for rid, r in sorted(self.reads.items())},
            "search": dict(self.search),
            "reader": dict(self.reader),
            "timings": {k: round(float(v), 4) for k, v in self.timings.items()},
        }


def _reading_json(mark: str, r: RegionRead) -> dict:
    d = {"mark": mark, "read": r.mark, "confidence": round(float(r.confidence), 4),
         "review": bool(r.review)}
    if r.review and r.alternatives:
        # kept for uncertain regions only: enough to re-score a stored report with corrections
        d["alternatives"] = [[m, round(float(p), 4)] for m, p in r.alternatives]
    return d


def reads_from_json(doc: Mapping[str, Any]) -> dict[str, RegionRead]:
    """The reader's view back from a ``sheetcheck.report/1`` document (``doc["readings"]``)."""
    return {rid: RegionRead(d["read"], float(d["confidence"]), bool(d["review"]),
                            tuple((m, float(p)) for m, p in d.get("alternatives", ())))
            for rid, d in doc["readings"].items()}


# ---------------------------------------------------------------------------------------------
# corrections
# ---------------------------------------------------------------------------------------------

def parse_fixes(fixes: Iterable[str], template: Template) -> dict[str, str]:
    """Parse and validate ``REGION=MARK`` strings against ``template``.

    Every problem is reported at once.

    Raises
    ------
    StateError
        for a malformed item, an unknown or unreadable region, or a mark the region cannot carry.
    """
    out: dict[str, str] = {}
    problems: list[str] = []
    for item in fixes:
        if not isinstance(item, str) or item.count("=") != 1:
            problems.append(f"{item!r} is not REGION=MARK")
            continue
        rid, mark = (s.strip() for s in item.split("="))
        problems.extend(_fix_problems(template, rid, mark))
        if rid in out and out[rid] != mark:
            problems.append(f"region {rid!r} is corrected twice ({out[rid]!r} and {mark!r})")
        out[rid] = mark
    if problems:
        raise StateError("cannot apply the corrections: " + "; ".join(problems) + ".",
                         hint="Use --fix REGION=MARK with a region id of the template "
                              "(as in the report) and one of the marks that region allows.")
    return out


def _fix_problems(template: Template, rid: str, mark: str) -> list[str]:
    try:
        region = template.region(rid)
    except KeyError:
        near = [r.id for r in template.readable_regions() if rid and rid.split(".")[0] in r.id][:5]
        return [f"template {template.id!r} has no region {rid!r}"
                + (f" (did you mean {', '.join(near)}?)" if near else "")]
    if not region.readable:
        return [f"region {rid!r} is not read (it only gives the map its structure)"]
    if mark not in region.marks:
        return [f"region {rid!r} cannot carry {mark!r} (allowed: {', '.join(region.marks)})"]
    return []


# ---------------------------------------------------------------------------------------------
# verdict
# ---------------------------------------------------------------------------------------------

def base_verdict(audit: Audit) -> Verdict:
    """OK or DISCREPANCY from the audit alone (no uncertainty)."""
    if audit.difference != 0:
        return Verdict.DISCREPANCY
    if any(f.severity is not Severity.NOTE for f in audit.findings):
        return Verdict.DISCREPANCY
    return Verdict.OK


def _finding_keys(a: Audit) -> frozenset:
    # the rules broken, not every region they cite: on a Reefs map a finding cites a whole route,
    # and a doubtful connection that only moves the evidence is not worth a person's time
    # counted per rule: with two routes in pieces, joining one is a finding that goes, even
    # though the rule stays broken by the other
    return collections.Counter(f.rule for f in a.findings if f.severity is not Severity.NOTE)


def line_differences(rules: Breakdown, claimed: Breakdown) -> tuple[LineDifference, ...]:
    """Breakdown lines whose points differ between the rules and the claim."""
    def by_key(b: Breakdown) -> dict[tuple[str, str], int]:
        d: dict[tuple[str, str], int] = {}
        for ln in b.lines:
            d[(ln.section, ln.label)] = d.get((ln.section, ln.label), 0) + ln.points
        return d
    r, c = by_key(rules), by_key(claimed)
    keys = list(r) + [k for k in c if k not in r]
    return tuple(LineDifference(k[0], k[1], r.get(k, 0), c.get(k, 0))
                 for k in keys if r.get(k, 0) != c.get(k, 0))


def plausible_alternatives(region_mark: str, read: RegionRead,
                           allowed: tuple[str, ...]) -> list[tuple[str, float | None]]:
    """The alternatives worth re-scoring for one uncertain region.

    The reader's alternatives with probability >= MIN_ALTERNATIVE_PROBABILITY, and always the
    best one (so the top-2 readings are compared), at most MAX_ALTERNATIVES. When the reader
    gives none, or its confidence is below LOW_CONFIDENCE, every mark the region allows is
    tried: such a region must not pass unchecked.
    """
    alts = [(m, float(p)) for m, p in read.alternatives if m != region_mark and m in allowed]
    alts.sort(key=lambda mp: -mp[1])
    if not alts or read.confidence < LOW_CONFIDENCE:
        given = dict(alts)
        return sorted(((m, given.get(m)) for m in allowed if m != region_mark),
                      key=lambda mp: -(mp[1] or 0.0))
    keep = [alts[0]] + [a for a in alts[1:] if a[1] >= MIN_ALTERNATIVE_PROBABILITY]
    return keep[:MAX_ALTERNATIVES]


def build_report(template: Template, reads: Mapping[str, RegionRead], *,
                 fixes: Mapping[str, str] | Iterable[str] = (),
                 photo: Mapping[str, Any] | None = None,
                 reader: Mapping[str, Any] | None = None,
                 timings: Mapping[str, float] | None = None,
                 rectified: Any = None, rectified_dpi: float | None = None) -> Report:
    """Score, audit and explain one sheet.

    Parameters
    ----------
    template : Template
        The sheet's template.
    reads : mapping of str to RegionRead
        The reader's view of every readable region (region id -> reading).
    fixes : mapping of str to str, or iterable of "REGION=MARK"
        A person's corrections; validated against the template.
    photo, reader, timings : mapping, optional
        Recorded as they are in the report (name/hash of the photo, reader diagnostics, seconds).
    rectified : (H, W, 3) uint8 ndarray, optional
        The rectified sheet (template frame at ``rectified_dpi``), kept for the overlay.

    Returns
    -------
    Report

    Raises
    ------
    StateError
        for invalid corrections, or a reading the rules engine cannot turn into a state.
    """
    from scoring.registry import engine_for

    engine = engine_for(template.game)
    if not isinstance(fixes, Mapping):
        fixes = parse_fixes(fixes, template)
    else:
        probs = [p for rid, m in fixes.items() for p in _fix_problems(template, rid, m)]
        if probs:
            raise StateError("cannot apply the corrections: " + "; ".join(probs) + ".",
                             hint="Use region ids from the report and marks the region allows.")

    marks = {rid: r.mark for rid, r in reads.items()}
    corrections = tuple(Correction(rid, reads[rid].mark if rid in reads else None, m)
                        for rid, m in sorted(fixes.items()))
    marks.update(fixes)

    audit = engine.audit(engine.state_from_marks(template, marks))
    verdict0 = base_verdict(audit)
    keys0 = _finding_keys(audit)

    def changes_of(a: Audit) -> tuple[str, ...]:
        return tuple(name for name, moved in (
            ("total", a.rules.total != audit.rules.total),
            ("claimed", a.claimed.total != audit.claimed.total),
            ("verdict", base_verdict(a) is not verdict0),
            # the explanation: a finding that would come or go
            ("findings", _finding_keys(a) != keys0)) if moved)

    uncertain: list[Uncertain] = []
    broken = _distinct(f for f in audit.findings if f.severity is not Severity.NOTE)
    # region -> the broken findings one of its alternatives alone would disturb (remove or
    # re-word): the first place to look for regions that can undo a finding together
    touches: dict[str, set] = {}
    options: dict[str, list[tuple[str, float]]] = {}     # region -> [(mark, log weight)]
    rescored = 0
    for rid in sorted(reads):
        r = reads[rid]
        if not r.review or rid in fixes:
            continue
        allowed = template.region(rid).marks
        alts = []
        for mark, p in plausible_alternatives(marks[rid], r, allowed):
            rescored += 1
            try:
                a = engine.audit(engine.state_from_marks(template, {**marks, rid: mark}))
            except StateError as e:
                alts.append(Alternative(mark, p, None, None, None, (), error=e.message))
                continue
            alts.append(Alternative(mark, p, a.rules.total, a.claimed.total, base_verdict(a),
                                    changes_of(a)))
            gone = [f for f in broken if f not in a.findings]
            if gone:
                touches.setdefault(rid, set()).update(gone)
        options[rid] = [(a.mark, _log_weight(a.probability, r.confidence))
                        for a in alts if a.error is None]
        evidence = (tuple(sorted({f.rule for f in audit.findings
                                  if f.severity is not Severity.NOTE and rid in f.regions}))
                    if r.confidence < LOW_CONFIDENCE else ())
        uncertain.append(Uncertain(rid, marks[rid], float(r.confidence), tuple(alts),
                                   evidence_for=evidence))

    joint_audits = 0
    seen: dict[frozenset, Audit | None] = {}    # the searches overlap: re-score each reading once

    def joint(alt_marks: Mapping[str, str]) -> Audit | None:
        nonlocal joint_audits
        key = frozenset(alt_marks.items())
        if key not in seen:
            joint_audits += 1
            try:
                seen[key] = engine.audit(engine.state_from_marks(template,
                                                                 {**marks, **alt_marks}))
            except StateError:
                seen[key] = None
        return seen[key]

    def joint_changes(alt_marks: Mapping[str, str]) -> tuple[str, ...]:
        a = joint(alt_marks)
        return () if a is None else changes_of(a)

    def minimal(group: dict[str, str]) -> dict[str, str]:
        # drop every region the change does not need, so only those are reviewed
        for rid in list(group):
            trial = {k: v for k, v in group.items() if k != rid}
            if len(trial) >= 1 and joint_changes(trial):
                group = trial
        return group

    groups: dict[str, tuple[tuple[str, ...], tuple[tuple[str, str], ...], str]] = {}

    def record(group: Mapping[str, str], why: str = "") -> None:
        a = joint(group)
        if a is None:
            return
        moved, said = changes_of(a), _describe_change(audit, a)
        members = tuple(sorted(group.items()))
        for rid in group:
            others = ", ".join(f"{o} as {m}" for o, m in members if o != rid)
            groups[rid] = (moved, members,
                           f"read as {group[rid]} together with {others}, it would change "
                           f"{said}" + (f" ({why})" if why else ""))

    # Regions that do not matter one at a time can matter together (two cells each harmless
    # alone that together make or break a pair). Re-score the quiet regions together at their
    # best alternatives; if that moves anything, shrink the set to a minimal one whose every
    # region is needed, and look again among the rest.
    remaining = {u.region: next((a.mark for a in u.alternatives if a.error is None), None)
                 for u in uncertain if not u.matters}
    remaining = {rid: m for rid, m in remaining.items() if m is not None}
    weight = {rid: dict(opts) for rid, opts in options.items()}

    def plausible(group: Mapping[str, str]) -> bool:
        return sum(weight[rid][m] for rid, m in group.items()) >= math.log(JOINT_FLOOR)

    for _ in range(MAX_JOINT_ROUNDS):
        if len(remaining) < 2 or not joint_changes(remaining):
            break
        group = minimal(dict(remaining))
        if plausible(group):    # (two regions each at a 1 % alternative are not a reading)
            record(group)
        remaining = {k: v for k, v in remaining.items() if k not in group}

    # The best alternatives are not the only plausible ones, and a finding may be undone only by
    # several regions together (a route misread empty in two places: filling either gap alone
    # leaves it in pieces). For every broken finding, search the joint readings of the quiet
    # uncertain regions that touch it: the regions it cites, those whose single re-read disturbs
    # it, and what the game's map says could undo it (the route joins). Bounded: a search cut
    # off before it is done says so, and its regions are reviewed.
    quiet = {rid: opts for rid, opts in options.items()
             if opts and rid not in groups and rid not in {u.region for u in uncertain if u.matters}}
    work = []
    for f in broken:
        cands = {rid for rid in quiet if rid in f.regions or f in touches.get(rid, ())}
        proposals, near = _targeted(template, marks, f, quiet)   # most plausible first
        cands |= near & set(quiet)
        proposals = [(prop, why) for prop, why in proposals if plausible(prop)]
        if cands or proposals:
            work.append((f, cands, proposals))
    cut: dict[str, set[str]] = {}
    searched_from = joint_audits
    for k, (f, cands, proposals) in enumerate(work):
        # a region in a group found for an earlier finding is reviewed already
        cands = {rid for rid in cands if rid not in groups}
        proposals = [(prop, why) for prop, why in proposals if not groups.keys() & prop.keys()]
        # the bound is shared fairly among the findings still to search
        share = (MAX_SEARCH_AUDITS - (joint_audits - searched_from)) // (len(work) - k)
        start = joint_audits
        found, left = None, set()
        for n, (prop, why) in enumerate(proposals):
            if joint_audits - start >= share:
                left = {rid for later, _ in proposals[n:] for rid in later}
                break
            if joint_changes(prop):
                found = (minimal(dict(prop)), why)
                break
        if found is None and not left:
            items = sorted(((rid, m, w) for rid in cands for m, w in quiet[rid]),
                           key=lambda it: (-it[2], it[0], it[1]))
            hit, _, left = _best_first(items, joint_changes,
                                       lambda: joint_audits - start < share)
            if hit is not None:
                found = (minimal(hit), "")
        if found is not None:
            record(*found)
        for rid in left:
            cut.setdefault(rid, set()).add(f.rule)

    if groups or cut:
        uncertain = [dataclasses.replace(
            u, together=groups[u.region][0] if u.region in groups else (),
            together_with=groups[u.region][1] if u.region in groups else (),
            cut_off=tuple(sorted(cut.get(u.region, ()))) if u.region not in groups else ())
            for u in uncertain]
    uncertain = [dataclasses.replace(u, reason=_reason(u, groups)) if u.matters else u
                 for u in uncertain]
    search = {"rescored": rescored, "joint": joint_audits,
              "targeted": joint_audits - searched_from, "limit": MAX_SEARCH_AUDITS,
              "cut_off": sorted({rule for rules in cut.values() for rule in rules})}

    verdict = Verdict.NEEDS_REVIEW if any(u.matters for u in uncertain) else verdict0
    return Report(template=template, audit=audit, verdict=verdict, marks=marks, reads=dict(reads),
                  uncertain=tuple(uncertain), corrections=corrections,
                  differences=line_differences(audit.rules, audit.claimed),
                  photo=dict(photo or {}), reader=dict(reader or {}), timings=dict(timings or {}),
                  rectified=rectified, rectified_dpi=rectified_dpi, search=search)


# ---------------------------------------------------------------------------------------------
# the joint search
# ---------------------------------------------------------------------------------------------

def _distinct(findings: Iterable) -> list:
    out: list = []
    for f in findings:
        if f not in out:
            out.append(f)
    return out


def _log_weight(probability: float | None, confidence: float) -> float:
    """How plausible one alternative is against the reading, as a log ratio (at most 0).

    An alternative tried only because the reader was unsure of everything (no probability, or
    one below the floor) counts as MIN_ALTERNATIVE_PROBABILITY: it is plausible by that rule.
    """
    p = max(float(probability or 0.0), MIN_ALTERNATIVE_PROBABILITY)
    return min(0.0, math.log(p / max(float(confidence), MIN_ALTERNATIVE_PROBABILITY)))


def _best_first(items: list[tuple[str, str, float]], changes,
                more) -> tuple[dict | None, bool, set[str]]:
    """Try joint readings of 2..MAX_JOINT_SIZE regions, the most plausible first.

    Parameters
    ----------
    items : list of (region, mark, log weight)
        Every plausible (region, alternative) pair, sorted by weight, highest first.
    changes : callable
        ``changes({region: mark}) -> tuple``: what the joint reading changes (empty: nothing).
    more : callable
        ``more() -> bool``: whether the bound allows another re-score.

    Returns
    -------
    (dict or None, bool, set of str)
        The first joint reading that changes something (None if none does); whether the search
        ran to its end (False: it stopped at the bound with plausible readings left to try);
        and, when it stopped, the regions of the plausible readings it did not try.
    """
    floor = math.log(JOINT_FLOOR)
    # subsets as increasing index tuples: a child adds a later item, so each subset is made
    # once, and a child never weighs more than its parent (weights <= 0): the heap pops the
    # joint readings in order of plausibility
    heap = [(-w, (i,)) for i, (_, _, w) in enumerate(items) if w >= floor]
    heapq.heapify(heap)
    tried: set[tuple[int, ...]] = set()
    while heap:
        negw, idx = heapq.heappop(heap)
        if len(idx) >= 2:
            if not more():
                left = {items[i][0] for _, rest in heap + [(negw, idx)] if len(rest) >= 2
                        for i in rest}
                left |= {items[k][0] for i in range(len(items)) for j in range(i + 1, len(items))
                         if items[i][0] != items[j][0] and (i, j) not in tried
                         and items[i][2] + items[j][2] >= floor for k in (i, j)}
                return None, False, left
            tried.add(idx)
            trial = {items[i][0]: items[i][1] for i in idx}
            if changes(trial):
                return trial, True, set()
        if len(idx) >= MAX_JOINT_SIZE:
            continue
        used = {items[i][0] for i in idx}
        for j in range(idx[-1] + 1, len(items)):
            w = -negw + items[j][2]
            if w < floor:
                break       # items are sorted: every later one weighs less
            if items[j][0] not in used:
                heapq.heappush(heap, (-w, idx + (j,)))
    return None, True, set()


def _describe_change(base: Audit, a: Audit) -> str:
    """What a re-score changes against the marks as read, in words."""
    said = []
    if a.rules.total != base.rules.total:
        said.append(f"the rules' total {base.rules.total} -> {a.rules.total}")
    if a.claimed.total != base.claimed.total:
        said.append(f"the claimed total {base.claimed.total} -> {a.claimed.total}")
    if base_verdict(a) is not base_verdict(base):
        said.append(f"the verdict {base_verdict(base).value} -> {base_verdict(a).value}")
    before, after = _finding_keys(base), _finding_keys(a)
    gone, come = before - after, after - before
    said += [f"{rule} would go" + (f" ({n} of {before[rule]})" if before[rule] > n else "")
             for rule, n in sorted(gone.items())]
    said += [f"{rule} would come" for rule in sorted(come)]
    return "; ".join(said) or "nothing"


def _reason(u: Uncertain, groups: Mapping[str, tuple]) -> str:
    """Why ``u`` is put up for review, for a person."""
    moving = [a for a in u.alternatives if a.changes]
    if moving:
        return "; ".join(f"if {a.mark}: it would change {', '.join(a.changes)} (rules "
                         f"{a.rules_total}, claimed {a.claimed_total}, {a.verdict.value})"
                         for a in moving)
    if u.region in groups:
        return groups[u.region][2]
    if u.evidence_for:
        return (f"could not be read (confidence {percent(u.confidence)}), yet it is evidence "
                f"for {', '.join(u.evidence_for)}")
    if u.cut_off:
        return (f"the joint search for readings that would undo {', '.join(u.cut_off)} stopped "
                f"at its bound ({MAX_SEARCH_AUDITS} re-scores) before it could clear this region")
    return ""


def _targeted(template: Template, marks: Mapping[str, str], finding,
              options: Mapping[str, list[tuple[str, float]]]) -> tuple[list, set]:
    """Game knowledge for one broken finding: joint readings to try first, and regions near it.

    Returns
    -------
    (list of (dict, str), set of str)
        Proposed joint readings ``{region: mark}`` with what they would do, and the uncertain
        regions (keys of ``options``) that could bear on the finding.
    """
    if template.game == "pick_a_pen_reefs":
        return _reefs_targeted(template, marks, finding, options)
    return [], set()


#: Reefs findings about the shape of one colour's route (scoring/reefs.py route_of)
_REEFS_ROUTE_RULES = ("reefs.one_route", "reefs.start_at_entry", "reefs.branch",
                      "reefs.own_entry", "reefs.other_entry")


def _reefs_targeted(template, marks, finding, options):
    """A route finding: could uncertain connections and entry points, at plausible colours,
    join its pieces (or reach its entry point)? The map's graph gives the candidates directly,
    where a blind search would need luck: a gap of two connections joins only when both are
    filled, and neither alone changes anything."""
    from scoring import reefs

    if finding.rule not in _REEFS_ROUTE_RULES:
        return [], set()
    lay = reefs.layout_of(template)
    state = reefs.state_from_marks(template, marks)
    key = (finding.rule, finding.message, tuple(finding.regions))
    colour = next((c for c, r in reefs.analyse(state).routes.items()
                   if any((p[0], p[1], tuple(p[2])) == key for p in r.problems)), None)
    if colour is None:
        return [], set()
    edges = set(state.route_edges(colour))
    own_entries = [e for e in lay.entries if marks.get(e) == colour]
    spaces = {s for e in edges for s in lay.conns[e][:2]} | {lay.entries[e] for e in own_entries}
    # what each uncertain region costs to take the colour (-log plausibility, >= 0)
    cost = {rid: -w for rid, opts in options.items() for m, w in opts if m == colour}
    # near: every uncertain connection or entry point on the route's spaces that could take or
    # give up the colour
    near = {cid for s in spaces for cid, _ in lay.adjacency.get(s, ())
            if cid in options and (cid in cost or marks.get(cid) == colour)}
    near |= {e for e, s in lay.entries.items() if s in spaces and e in options}

    touched = {s for e in edges for s in lay.conns[e][:2]}
    # the pieces, and the route's own entry point when no piece reaches it
    targets = _pieces(lay, edges) + [{lay.entries[e]} for e in own_entries
                                     if lay.entries[e] not in touched]
    proposals = []
    if own_entries:
        join = _reefs_join(lay, targets, edges, cost)
        if join:
            proposals.append(({cid: colour for cid in join},
                              f"it would make the {colour} route one line from its entry point"))
    else:
        for e in sorted((e for e in lay.entries if e in cost), key=lambda e: (cost[e], e)):
            join = _reefs_join(lay, targets + [{lay.entries[e]}], edges, cost)
            if join is not None:
                proposals.append(({e: colour, **{cid: colour for cid in join}},
                                  f"the {colour} route would start at entry point {e}"))
    return proposals, near


def _pieces(lay, edges: set) -> list[set]:
    """The spaces of each connected piece of a set of connections."""
    parent: dict[str, str] = {}

    def root(v: str) -> str:
        while parent.setdefault(v, v) != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v
    for e in sorted(edges):
        a, b, _ = lay.conns[e]
        parent[root(a)] = root(b)
    out: dict[str, set] = {}
    for v in list(parent):
        out.setdefault(root(v), set()).add(v)
    return sorted(out.values(), key=sorted)


def _reefs_join(lay, targets: list[set], edges: set, cost: Mapping[str, float]) -> set | None:
    """The most plausible set of connections (keys of ``cost``) that joins every target (sets
    of spaces) through the route's own connections: greedily, the cheapest path to the nearest
    target first. None when no plausible connections join them."""
    if len(targets) < 2:
        return set() if targets else None
    tree, rest, added = set(targets[0]), [set(t) for t in targets[1:]], set()
    while rest:
        # shortest paths: the route's connections cost nothing, one that would have to change
        # colour costs how implausible that is
        dist = {v: 0.0 for v in tree}
        back: dict[str, tuple[str, str]] = {}
        todo = [(0.0, v) for v in sorted(tree)]
        goal = None
        while todo:
            d, v = heapq.heappop(todo)
            if d > dist.get(v, math.inf):
                continue
            if any(v in t for t in rest):
                goal = v
                break
            for cid, w in lay.adjacency.get(v, ()):
                step = 0.0 if cid in edges or cid in added else cost.get(cid)
                if step is None or dist.get(w, math.inf) <= d + step:
                    continue
                dist[w], back[w] = d + step, (cid, v)
                heapq.heappush(todo, (d + step, w))
        if goal is None:
            return None
        v = goal
        while v in back:
            cid, v = back[v]
            if cid not in edges and cid not in added:
                added.add(cid)
                tree.update(lay.conns[cid][:2])
        hit = next(t for t in rest if goal in t)
        rest.remove(hit)
        tree |= hit
    return added

# ---------------------------------------------------------------------------------------------
# text
# ---------------------------------------------------------------------------------------------

def percent(confidence: float) -> str:
    """A confidence as a percentage that never rounds a flagged reading up to look sure
    (0.9699, below the review threshold, is "96.9 %", not "97 %")."""
    return f"{math.floor(float(confidence) * 1000) / 10:.1f} %"


def format_text(report: Report) -> str:
    """The report as a player reads it on a terminal."""
    t = report.template
    out = [f"sheet    {t.id} v{t.version}: {t.title} (level {t.level})"]
    if report.photo.get("name"):
        out.insert(0, f"photo    {report.photo['name']}")
    if report.reader.get("mirrored"):
        out.append("         the photo is mirrored (a selfie camera?): read flipped left-right")
    out.append("")
    rules = {(ln.section, ln.label): ln.points for ln in report.audit.rules.lines}
    claimed = {(ln.section, ln.label): ln.points for ln in report.audit.claimed.lines}
    keys = list(rules) + [k for k in claimed if k not in rules]
    w = max([len(f"{s}: {l}") for s, l in keys] + [10])
    out.append(f"{'breakdown':<{w}}  rules  claimed")
    for k in keys:
        r, c = rules.get(k, 0), claimed.get(k, 0)
        flag = "  <-- differs" if r != c else ""
        out.append(f"{k[0] + ': ' + k[1]:<{w}}  {r:>5}  {c:>7}{flag}")
    out.append(f"{'TOTAL':<{w}}  {report.rules_total:>5}  {report.claimed_total:>7}")
    if report.audit.findings:
        out += ["", "findings"]
        for f in report.audit.findings:
            eff = f" ({f.effect:+d})" if f.effect else ""
            where = f" [{', '.join(f.regions[:6])}{' ...' if len(f.regions) > 6 else ''}]" if f.regions else ""
            out.append(f"  {f.severity.value:<9} {f.rule}{eff}: {f.message}{where}")
    if report.corrections:
        out += ["", "corrections"]
        for c in report.corrections:
            out.append(f"  {c.region}: read {c.read} -> {c.mark}")
    if report.review:
        out += ["", "review these regions (the most doubtful first)"]
        # (a person may stop early: the least sure readings are the likeliest to be wrong)
        for u in sorted(report.review, key=lambda u: (u.confidence, u.region)):
            # (when neither total moves, say what does: the findings, or the verdict)
            alts = "; ".join(f"if {a.mark}: rules {a.rules_total}, claimed {a.claimed_total}"
                             + ("" if {"total", "claimed"} & set(a.changes)
                                else f" ({' and '.join(a.changes)} change)")
                             for a in u.alternatives if a.changes)
            if not alts:
                alts = u.reason     # together with others / evidence / a search cut off
            out.append(f"  {u.region}: read {u.read} ({percent(u.confidence)}); {alts}")
    if report.did_not_matter:
        out.append("")
        out.append("uncertain but did not matter: "
                   + ", ".join(f"{u.region} ({u.read})" for u in report.did_not_matter))
    out += ["", report.summary()]
    return "\n".join(out)
