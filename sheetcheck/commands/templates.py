"""``sheetcheck templates``: list the bundled templates."""

from __future__ import annotations

import json

from calibration.template import all_templates, template_summary, write_json_schema


def run(args) -> int:
    rows = [template_summary(t) for t in all_templates()]
    if args.schema:
        write_json_schema(args.schema)
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print("no templates installed")
        return 0
    w = max(len(r["id"]) for r in rows)
    print(f"{'id':<{w}}  {'game':<18} level  version  title")
    for r in rows:
        print(f"{r['id']:<{w}}  {r['game']:<18} {str(r['level'] or '-'):<5}  {r['version']:<7}  {r['title']}")
    return 0
