"""Labelled rule breaks for Reefs states: each kind edits a state so that exactly one rule is
broken (as far as the sheet allows), for property tests and sample photos.

``played_past_end`` is detected by the audit but not injected: a move drawn after the end is,
on paper, usually indistinguishable from one drawn earlier (RULES.md (Reefs), R9).
"""

from __future__ import annotations


import random

import numpy as np

from scoring.reefs import (COLOURS, State, analyse, layout_of, make_state, _graph)
from sheetcheck.errors import StateError

#: kind -> the rule id the audit reports for it.
VIOLATION_RULES: dict[str, str] = {
    "branch": "reefs.branch",
    "two_routes": "reefs.one_route",
    "other_entry": "reefs.other_entry",
    "own_entry": "reefs.own_entry",
    "entry_not_coloured": "reefs.start_at_entry",
    "treasure_wrong_colour": "reefs.treasure_colour",
    "treasure_not_reached": "reefs.treasure_not_reached",
    "treasure_not_coloured": "reefs.treasure_not_coloured",
    "treasure_boxes_skipped": "reefs.boxes_in_order",
    "treasure_boxes_extra": "reefs.boxes_count",
    "coin_boxes_wrong": "reefs.coin_boxes_count",
    "bonus_unearned": "reefs.bonus_unearned",
    "whirlpool_not_coloured": "reefs.whirlpool_not_coloured",
    "whirlpool_wrong_colour": "reefs.whirlpool_colour",
    "propeller_skipped": "reefs.propeller_order",
    "propeller_core_without_rim": "reefs.propeller_core",
}
VIOLATIONS: tuple[str, ...] = tuple(VIOLATION_RULES)


def violations_for(template) -> tuple[str, ...]:
    """The kinds that make sense on ``template`` (whirlpools at level 2, propellers at 3)."""
    lay = layout_of(template)
    out = []
    for k in VIOLATIONS:
        if k.startswith("whirlpool") and not lay.whirlpools:
            continue
        if k.startswith("propeller") and not lay.rims:
            continue
        out.append(k)
    return tuple(out)


def _parts(state: State) -> dict:
    return dict(connections=dict(state.connections), entries=dict(state.entries),
                treasures=dict(state.treasures), whirlpools=dict(state.whirlpools),
                treasure_boxes=list(state.treasure_boxes), coin_boxes=list(state.coin_boxes),
                rims=list(state.rims), cores=list(state.cores), stars=dict(state.stars),
                written=list(state.written), crossed=list(state.crossed))


def _plain(lay, s) -> bool:
    """A space with nothing on it (a route may pass without side effects)."""
    return (lay.spaces[s][2] is None and s not in lay.entry_at and s not in lay.treasures_at
            and s not in lay.coin_at and s not in lay.whirlpool_at and s not in lay.propeller_at)


def _path(lay, used, src, goal_ok, avoid, rng, *, plain=True):
    """Shortest walk of unused connections from ``src`` through plain spaces not in ``avoid``
    to a space for which ``goal_ok`` holds; list of connection ids or None."""
    prev = {src: None}
    frontier = [src]
    while frontier:
        nxt = []
        order = rng.permutation(len(frontier))
        for i in order:
            v = frontier[i]
            for cid, w in lay.adjacency.get(v, ()):
                if cid in used or w in prev:
                    continue
                if goal_ok(w):
                    path = [cid]
                    while prev[v] is not None:
                        path.append(prev[v][0])
                        v = prev[v][1]
                    return path[::-1]
                ok = _plain(lay, w) if plain else w not in lay.entry_at
                if ok and w not in avoid:
                    prev[w] = (cid, v)
                    nxt.append(w)
        frontier = nxt
    return None


def _settle(template, p: dict) -> State:
    """After a route edit, colour what a careful player would have coloured for the new route
    (treasures, boxes, whirlpools, rims, end stars), so that only the route rule is broken."""
    from scoring.reefs import StarMark, _conditions
    s = make_state(template, **p)
    lay, a = s.layout, analyse(s)
    for t, c in a.credited.items():
        if t not in p["treasures"]:
            p["treasures"][t] = c
    p["treasure_boxes"] = [b for c, row in lay.tboxes.items() for b, _, _ in row[:a.earned[c]]]
    p["coin_boxes"] = [b for b, _ in lay.cboxes[:a.coin_earned]]
    reach = {c: a.routes[c].spaces if a.routes[c].edges else frozenset() for c in COLOURS}
    for w, sp in lay.whirlpools.items():
        if w not in p["whirlpools"] and sp in a.reached:
            p["whirlpools"][w] = next(c for c in COLOURS if sp in reach[c])
    if lay.rims:
        n = min(len(a.props_reached), len(lay.rims))
        p["rims"] = list(range(1, n + 1))
        p["cores"] = [k for k in p["cores"] if k <= n]
    cond = _conditions(lay, a.earned, a.coin_earned)
    for b in ("end_grey", "end_coins"):
        if b in lay.stars and cond[b]:
            p["stars"][b] = StarMark.COLOURED
    return make_state(template, **p)


def inject_violation(state: State, kind: str, rng) -> State:
    """A copy of ``state`` that breaks the rule named by ``kind`` (see :data:`VIOLATIONS`).

    Parameters
    ----------
    state : State
    kind : str
        One of :data:`VIOLATIONS`.
    rng : numpy.random.Generator or int
        Randomness for where to break it.

    Raises
    ------
    StateError
        for an unknown kind, a kind the level has no place for, or a sheet with no room for it.
    """
    if kind not in VIOLATION_RULES:
        raise StateError(f"unknown violation kind {kind!r}; kinds: {', '.join(VIOLATIONS)}.")
    if isinstance(rng, random.Random):  # the interface takes any of seed, Random, Generator
        rng = np.random.default_rng(rng.getrandbits(64))
    rng = np.random.default_rng(rng) if not isinstance(rng, np.random.Generator) else rng
    lay = state.layout
    if kind not in violations_for(state.template):
        raise StateError(f"violation {kind!r} does not apply to template {state.template.id!r} "
                         f"(level {state.level}).")
    a = analyse(state)
    p = _parts(state)
    used = set(p["connections"])
    routes = [c for c in COLOURS if a.routes[c].trail is not None and len(a.routes[c].edges) >= 1]
    rng_routes = [routes[i] for i in rng.permutation(len(routes))]

    def fail(why):
        raise StateError(f"cannot inject {kind!r} into this state: {why}.")

    if kind == "branch":
        for c in rng_routes:
            trail = a.routes[c].trail
            on = set(trail)
            g = _graph(lay, a.routes[c].edges)
            # a space the route passes through (even number of lines, not the entry or end):
            # one more line there makes three line ends
            inner = sorted(v for v in on if len(g[v]) % 2 == 0 and v not in (trail[0], trail[-1]))
            for v in [inner[i] for i in rng.permutation(len(inner))]:
                for cid, w in lay.adjacency.get(v, ()):
                    if cid not in used and w not in on and _plain(lay, w):
                        p["connections"][cid] = c
                        return make_state(state.template, **p)
        fail("no route has a free plain space beside its middle")
    if kind == "two_routes":
        for c in rng_routes or list(COLOURS):
            on = a.routes[c].spaces
            free = [cid for cid, (x, y, _) in lay.conns.items()
                    if cid not in used and x not in on and y not in on
                    and x not in lay.entry_at and y not in lay.entry_at]
            # prefer a piece between plain spaces (nothing else changes), else any free one
            cands = [cid for cid in free if all(_plain(lay, v) for v in lay.conns[cid][:2])] or free
            if cands:
                if not a.routes[c].edges:
                    fail("that colour has no route yet")
                p["connections"][cands[int(rng.integers(len(cands)))]] = c
                return _settle(state.template, p)
        fail("no free connection away from the routes")
    if kind in ("other_entry", "own_entry"):
        for c in rng_routes:
            r = a.routes[c]
            own = r.trail[0]
            end = r.trail[-1]
            if kind == "other_entry":
                goal = lambda w: w in lay.entry_at and w != own
            else:
                goal = lambda w: w == own
            # through plain spaces if possible (nothing else changes), else past features
            path = (_path(lay, used, end, goal, set(r.trail), rng)
                    or _path(lay, used, end, goal, set(r.trail), rng, plain=False))
            if path:
                for cid in path:
                    p["connections"][cid] = c
                return _settle(state.template, p)
        fail("no route can reach an entry point through free spaces")
    if kind == "entry_not_coloured":
        if not routes:
            fail("no route has been started")
        c = rng_routes[0]
        del p["entries"][a.routes[c].entries[0]]
        return make_state(state.template, **p)
    if kind == "treasure_wrong_colour":
        cands = [t for t, (_, tcol, _) in lay.treasures.items() if tcol is not None]
        if not cands:
            fail("the sheet has no coloured treasure")
        t = cands[int(rng.integers(len(cands)))]
        tcol = lay.treasures[t][1]
        others = [c for c in COLOURS if c != tcol]
        p["treasures"][t] = others[int(rng.integers(len(others)))]
        return make_state(state.template, **p)
    if kind == "treasure_not_reached":
        reach = {c: a.routes[c].spaces if a.routes[c].edges else frozenset() for c in COLOURS}
        cands = []
        for t, (s, tcol, _) in lay.treasures.items():
            if t in p["treasures"]:
                continue
            for c in ([tcol] if tcol else COLOURS):
                if s not in reach[c]:
                    cands.append((t, c))
        if not cands:
            fail("every treasure is reached")
        t, c = cands[int(rng.integers(len(cands)))]
        p["treasures"][t] = c
        return make_state(state.template, **p)
    if kind == "treasure_not_coloured":
        ok = sorted(t for t in p["treasures"] if a.credited.get(t) == p["treasures"][t])
        # a coloured treasure keeps its credit when left uncoloured; a neutral one might be
        # credited to another colour by ruling R3, which would break a box row too
        cands = [t for t in ok if lay.treasures[t][1] is not None] or ok
        if not cands:
            fail("no treasure has been recovered")
        del p["treasures"][cands[int(rng.integers(len(cands)))]]
        return make_state(state.template, **p)
    if kind in ("treasure_boxes_skipped", "treasure_boxes_extra"):
        coloured = set(p["treasure_boxes"])
        rows = [c for c in COLOURS if c in lay.tboxes]
        count = {c: sum(b in coloured for b, _, _ in lay.tboxes[c]) for c in rows}
        # rows with a coloured box first: a gap there keeps the count right
        rows = sorted((rows[i] for i in rng.permutation(len(rows))), key=lambda c: count[c] == 0)
        for c in rows:
            row = [b for b, _, _ in lay.tboxes[c]]
            n = sum(b in coloured for b in row)
            if n >= len(row):
                continue
            if kind == "treasure_boxes_extra":
                p["treasure_boxes"].append(row[n])
            elif n >= 1:
                k = int(rng.integers(n))          # leave a gap, keep the count
                p["treasure_boxes"].remove(row[k])
                p["treasure_boxes"].append(row[n])
            elif len(row) >= 2:
                p["treasure_boxes"].append(row[1])
            else:
                continue
            return make_state(state.template, **p)
        fail("every treasure row is full")
    if kind == "coin_boxes_wrong":
        ids = [b for b, _ in lay.cboxes]
        n = len(p["coin_boxes"])
        if n < len(ids) and (n == 0 or rng.random() < 0.5):
            p["coin_boxes"].append(ids[n])
        elif n:
            p["coin_boxes"].remove(ids[n - 1])
        else:
            fail("the sheet has no coin boxes")
        return make_state(state.template, **p)
    if kind == "bonus_unearned":
        from scoring.reefs import _conditions, StarMark
        cond = _conditions(lay, a.earned, a.coin_earned)
        cands = [b for b in lay.stars if not cond.get(b, False)
                 and p["stars"].get(b) is not StarMark.COLOURED]
        if not cands:
            fail("every bonus condition holds")
        p["stars"][cands[int(rng.integers(len(cands)))]] = StarMark.COLOURED
        return make_state(state.template, **p)
    if kind == "whirlpool_not_coloured":
        cands = [w for w in p["whirlpools"] if lay.whirlpools[w] in a.reached]
        if cands:
            del p["whirlpools"][cands[int(rng.integers(len(cands)))]]
            return make_state(state.template, **p)
        # no route has met a whirlpool: lead one there and leave it uncoloured
        for c in rng_routes:
            r = a.routes[c]
            path = _path(lay, used, r.trail[-1], lambda w: w in lay.whirlpool_at
                         and lay.whirlpool_at[w] not in p["whirlpools"], set(r.trail), rng)
            if path:
                for cid in path:
                    p["connections"][cid] = c
                return make_state(state.template, **p)
        fail("no route can reach a whirlpool")
    if kind == "whirlpool_wrong_colour":
        reach = {c: a.routes[c].spaces if a.routes[c].edges else frozenset() for c in COLOURS}
        cands = [(w, c) for w, s in lay.whirlpools.items() for c in COLOURS
                 if s not in reach[c] and (w in p["whirlpools"] or s not in a.reached)]
        if not cands:
            fail("every colour reaches every whirlpool")
        w, c = cands[int(rng.integers(len(cands)))]
        p["whirlpools"][w] = c
        return make_state(state.template, **p)
    if kind == "propeller_skipped":
        # a gap that keeps the count right needs a collected propeller and a free slot
        n, total = len(p["rims"]), len(lay.rims)
        if n == 0 or n >= total:
            fail("a gap in the propeller track needs some but not all propellers collected")
        k = p["rims"][int(rng.integers(n))]
        p["rims"].remove(k)
        p["rims"].append(n + 1)
        if k in p["cores"]:                       # its use moves with it: no core without rim
            p["cores"].remove(k)
            p["cores"].append(n + 1)
        return make_state(state.template, **p)
    if kind == "propeller_core_without_rim":
        n = len(p["rims"])
        if n >= len(lay.rims):
            fail("every propeller is collected, so every core has its rim")
        p["cores"].append(n + 1)
        return make_state(state.template, **p)
    raise AssertionError(kind)  # pragma: no cover - every kind is handled above
