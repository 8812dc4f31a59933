"""``sheetcheck score STATE.json``: the breakdown, findings and total of a hand-typed state."""

from __future__ import annotations

import json

from scoring.registry import engine_for
from sheetcheck.errors import StateError
from sheetcheck.files import read_json_file


def load_state_document(path: str) -> dict:
    doc = read_json_file(path, what="state file", parse_error=StateError,
                         hint="Check the path (docs/STATE_JSON.md describes the format).")
    if not isinstance(doc, dict) or not isinstance(doc.get("game"), str):
        raise StateError(f"state file {path} must be a JSON object with a \"game\" field.",
                         hint="See docs/STATE_JSON.md for the format and docs/examples/ for examples.")
    return doc


def format_audit(audit) -> str:
    out = []
    lvl = f" level {audit.level}" if audit.level is not None else ""
    out.append(f"{audit.game}{lvl}")
    out.append("")
    out.append("Score by the rules")
    width = max([len(l.label) for l in audit.rules.lines] + [10])
    section = None
    for line in audit.rules.lines:
        if line.section != section:
            section = line.section
            out.append(f"  [{section}]")
        out.append(f"    {line.label:<{width}}  {line.points:>4}")
    out.append(f"    {'TOTAL (rules)':<{width}}  {audit.rules.total:>4}")
    out.append(f"    {'TOTAL (as the marks claim)':<{width}}  {audit.claimed.total:>4}")
    if audit.difference:
        out.append(f"    the marks claim {audit.difference:+d} points against the rules")
    out.append("")
    if audit.findings:
        out.append(f"Findings ({len(audit.findings)})")
        for i, f in enumerate(audit.findings, 1):
            eff = f" [{f.effect:+d}]" if f.effect else ""
            out.append(f"  {i}. {f.severity.value}: {f.message}{eff}")
            out.append(f"     rule {f.rule}: {f.rule_text}")
            if f.regions:
                out.append(f"     regions: {', '.join(f.regions)}")
    else:
        out.append("Findings: none, the sheet follows the rules.")
    return "\n".join(out)


def run(args) -> int:
    doc = load_state_document(args.state)
    engine = engine_for(doc["game"])
    state = engine.state_from_json(doc)
    audit = engine.audit(state)
    if args.json:
        print(json.dumps(audit.to_json(), indent=2))
    else:
        print(format_audit(audit))
    return 0
