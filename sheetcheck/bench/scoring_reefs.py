"""Reefs rules-engine throughput: simulated end states scored and audited per second.

``measure(count)`` plays ``count`` legal games spread over the Reefs templates (not timed as
scoring), injects a labelled violation into every fourth state so the audit also meets broken
sheets, then times ``score`` + ``audit`` on fresh copies of all of them (the engine caches its
route analysis on a state, so each timed state is rebuilt from its marks first, outside the
clock). ``sheetcheck bench scoring`` calls it for every game.
"""

from __future__ import annotations

import time

import numpy as np

from calibration.template import get_template, template_ids
from scoring import reefs
from scoring.reefs_violations import violations_for
from sheetcheck.errors import SheetcheckError, StateError


def _templates():
    ids = [t for t in template_ids() if get_template(t).game == reefs.GAME]
    if not ids:
        raise StateError("no Reefs templates are installed (calibration/templates/reefs-*.json).",
                         hint="Build them with calibration/templates/build_templates.py.")
    return [get_template(t) for t in ids]


def measure(count: int = 500, *, seed: int = 0) -> dict:
    """States scored and audited per second on simulated Reefs end states.

    Parameters
    ----------
    count : int
        How many states (spread over the Reefs templates).
    seed : int
        First game seed.

    Returns
    -------
    dict
        ``states``, ``audits_per_s`` (score + audit), ``simulated_per_s`` (whole games),
        ``with_violation`` (states with an injected break), ``mean_findings``, ``mean_total``.
    """
    if count < 1:
        raise StateError(f"count must be at least 1, got {count}.")
    templates = _templates()
    rng = np.random.default_rng(seed)
    states, injected = [], 0
    t0 = time.perf_counter()
    for i in range(count):
        t = templates[i % len(templates)]
        s = reefs.simulate_game(t, seed + i)
        states.append(s)
    sim_s = time.perf_counter() - t0
    for i in range(0, count, 4):
        kinds = violations_for(states[i].template)
        try:
            states[i] = reefs.inject_violation(states[i], kinds[int(rng.integers(len(kinds)))], rng)
            injected += 1
        except SheetcheckError:
            pass
    fresh = [reefs.state_from_marks(s.template, reefs.state_to_marks(s)) for s in states]
    findings, totals = 0, 0
    t0 = time.perf_counter()
    for s in fresh:
        reefs.score(s)
        a = reefs.audit(s)
        findings += len(a.findings)
        totals += a.rules.total
    audit_s = time.perf_counter() - t0
    return {"states": count, "audits_per_s": count / audit_s, "simulated_per_s": count / sim_s,
            "with_violation": injected, "mean_findings": findings / count,
            "mean_total": totals / count}


def run(args) -> int:
    r = measure(getattr(args, "count", None) or 500)
    print("reefs: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                for k, v in r.items()))
    return 0
