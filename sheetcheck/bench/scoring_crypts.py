"""Scoring benchmark for Pick a Pen: Crypts: simulated end states scored and audited per second.

``measure(count)`` plays ``count`` legal games (levels 1-3 in turn), then times ``audit`` (which
scores, counts the claim and checks every rule) over their end states. The line solver's cache
is cleared first so the figure is the cold rate a server sees for sheets it has not met; the
warm rate (every line already solved once) is reported beside it.
"""

from __future__ import annotations

import time

from calibration.template import get_template


def measure(count: int) -> dict:
    """States scored and audited per second, on simulated end states.

    Parameters
    ----------
    count : int
        how many games to simulate and audit (at least 1).

    Returns
    -------
    dict
        ``states``, ``simulate_per_s``, ``audit_per_s`` (cold cache), ``audit_warm_per_s``,
        ``mean_total`` (mean rules score, a sanity figure).
    """
    from scoring import crypts

    count = max(1, int(count))
    templates = [get_template(f"crypts-{level}") for level in (1, 2, 3)]
    t0 = time.perf_counter()
    states = [crypts.simulate_game(templates[i % 3], i) for i in range(count)]
    t1 = time.perf_counter()
    crypts.solve_line.cache_clear()
    t2 = time.perf_counter()
    totals = [crypts.audit(s).rules.total for s in states]
    t3 = time.perf_counter()
    for s in states:
        crypts.audit(s)
    t4 = time.perf_counter()
    return {"states": count,
            "simulate_per_s": count / max(t1 - t0, 1e-9),
            "audit_per_s": count / max(t3 - t2, 1e-9),
            "audit_warm_per_s": count / max(t4 - t3, 1e-9),
            "mean_total": sum(totals) / count}
