"""Play whole legal games of Pick a Pen: Reefs turn by turn (only our sheet is tracked in full).

The table has 2-4 players; each round the five pencils are rolled (each to one of its six faces),
players pick in turn clockwise from a starting player that rotates every round, and the other
players' picks are simulated simply (a random pencil; they may end the game or take a
first-player bonus with a small per-pick probability once the game is under way). Our player
weighs every legal move of every pencil left (treasure boxes, coins and propellers it would
earn, plus how much closer it brings the route to something worth reaching), adds noise, and
sometimes just plays a random legal move or forfeits: real players are varied.

Rulings used here (RULES.md (Reefs)): R5 the whirlpool's 3 any-steps are drawn at once as part of
the same action and may be forfeited when impossible; R6 a whirlpool stops any kind of move,
even before a 4+ straight move has drawn 4 steps; R7 a propeller is used by replacing the die
result with 3 any-steps, and the leftmost collected-but-unused propeller is filled in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from calibration.template import Template
from scoring.reefs import COLOURS, Layout, StarMark, layout_of, make_state, State

#: The six faces of every pencil: (kind, steps); "4+" straight is kind "straight_min4".
FACES: tuple[tuple[str, int], ...] = (("any", 1), ("any", 2), ("any", 3),
                                      ("straight", 2), ("straight", 3), ("straight_min4", 4))


@dataclass
class _Sheet:
    lay: Layout
    conn: dict = field(default_factory=dict)          # conn id -> colour
    end: dict = field(default_factory=dict)           # colour -> route end space
    entries: dict = field(default_factory=dict)       # entry id -> colour
    treasures: dict = field(default_factory=dict)     # treasure id -> colour
    boxes: dict = field(default_factory=lambda: {c: 0 for c in COLOURS})
    coins: set = field(default_factory=set)
    whirl: dict = field(default_factory=dict)         # whirlpool id -> colour
    props: set = field(default_factory=set)           # propeller map ids collected
    rims: int = 0
    cores: list = field(default_factory=list)
    stars: dict = field(default_factory=dict)
    log: list = field(default_factory=list)          # our moves, for replay checks

    @property
    def coin_boxes(self) -> int:
        return min(len(self.coins), len(self.lay.cboxes))

    def grey_all(self) -> bool:
        lay = self.lay
        return all(lay.grey_needed(c) > 0 and self.boxes.get(c, 0) >= lay.grey_needed(c)
                   for c in COLOURS)

    def coins_full(self) -> bool:
        return len(self.lay.cboxes) > 0 and self.coin_boxes >= len(self.lay.cboxes)


def _neighbours(lay: Layout, sheet: _Sheet, v: str):
    """Unused connections from ``v`` to spaces a route may enter (never an entry point)."""
    for cid, w in lay.adjacency.get(v, ()):
        if cid not in sheet.conn and w not in lay.entry_at:
            yield cid, w


def _stops(lay: Layout, sheet: _Sheet, w: str) -> bool:
    wid = lay.whirlpool_at.get(w)
    return wid is not None and wid not in sheet.whirl


def _any_moves(lay, sheet, start, k):
    """Every walk of exactly ``k`` any-steps (or fewer, cut short by an uncoloured whirlpool)."""
    out = []

    def rec(v, path, spaces):
        if len(path) == k:
            out.append((tuple(path), tuple(spaces)))
            return
        for cid, w in _neighbours(lay, sheet, v):
            if cid in path:
                continue
            path.append(cid); spaces.append(w)
            if _stops(lay, sheet, w):
                out.append((tuple(path), tuple(spaces)))
            else:
                rec(w, path, spaces)
            path.pop(); spaces.pop()

    rec(start, [], [])
    return out


def _straight_moves(lay, sheet, start, k, at_least):
    out = []
    for dr, dc in ((0, 1), (0, -1), (1, 0), (-1, 0)):
        v, path, spaces = start, [], []
        while True:
            r, c, _ = lay.spaces[v]
            w = next((w for cid, w in _neighbours(lay, sheet, v)
                      if lay.spaces[w][0] == r + dr and lay.spaces[w][1] == c + dc), None)
            if w is None:
                break
            path.append(lay.conn_by_pair[frozenset((v, w))]); spaces.append(w)
            v = w
            if _stops(lay, sheet, w):
                out.append((tuple(path), tuple(spaces)))  # ruling R6: stopped by the whirlpool
                break
            if (at_least and len(path) >= k) or (not at_least and len(path) == k):
                out.append((tuple(path), tuple(spaces)))
                if not at_least:
                    break
    return out


def _moves(lay, sheet, colour, face):
    """Legal moves ``(start space, entry id or None, conn ids, spaces entered)`` for a face."""
    kind, k = face
    if colour in sheet.end:
        starts = [(sheet.end[colour], None)]
    else:
        used = set(sheet.entries)
        starts = [(s, e) for e, s in lay.entries.items() if e not in used]
    out = []
    for s, e in starts:
        if kind == "any":
            ms = _any_moves(lay, sheet, s, k)
        else:
            ms = _straight_moves(lay, sheet, s, k, kind == "straight_min4")
        out += [(s, e, p, sp) for p, sp in ms]
    return out


def _apply(lay: Layout, sheet: _Sheet, colour: str, move) -> None:
    start, entry, path, spaces = move
    if entry is not None:
        sheet.entries[entry] = colour
    for cid in path:
        sheet.conn[cid] = colour
    sheet.end[colour] = spaces[-1] if spaces else start
    for v in spaces:
        for tid in lay.treasures_at.get(v, ()):
            _, tcol, value = lay.treasures[tid]
            if tid not in sheet.treasures and (tcol is None or tcol == colour):
                sheet.treasures[tid] = colour
                row = len(lay.tboxes.get(colour, ()))
                sheet.boxes[colour] = min(row, sheet.boxes[colour] + value)
        cid = lay.coin_at.get(v)
        if cid is not None:
            sheet.coins.add(cid)
        pid = lay.propeller_at.get(v)
        if pid is not None and pid not in sheet.props:
            sheet.props.add(pid)
            sheet.rims = min(len(lay.rims), sheet.rims + 1)


def _gain(lay, sheet, colour, move, dist) -> float:
    """What a move earns now plus how much closer it brings the route to a target."""
    start, _, path, spaces = move
    g, seen = 0.0, set()
    boxes = sheet.boxes[colour]
    row = len(lay.tboxes.get(colour, ()))
    for v in spaces:
        if v in seen:
            continue
        seen.add(v)
        for tid in lay.treasures_at.get(v, ()):
            _, tcol, value = lay.treasures[tid]
            if tid not in sheet.treasures and (tcol is None or tcol == colour):
                add = min(row - boxes, value)
                boxes += add
                g += 3.0 * add
        cid = lay.coin_at.get(v)
        if cid is not None and cid not in sheet.coins:
            g += 2.0
        pid = lay.propeller_at.get(v)
        if pid is not None and pid not in sheet.props:
            g += 1.0
    end = spaces[-1] if spaces else start
    g += 0.6 * (dist.get(start, 20) - dist.get(end, 20))
    return g


def _targets_dist(lay, sheet, colour) -> dict:
    """Lattice distance (ignoring drawn lines) to the nearest thing ``colour`` could collect."""
    srcs = [lay.treasures[t][0] for t in lay.treasures if t not in sheet.treasures
            and lay.treasures[t][1] in (None, colour)]
    srcs += [s for c, s in lay.coins.items() if c not in sheet.coins]
    srcs += [s for p, s in lay.propellers.items() if p not in sheet.props]
    dist = {s: 0 for s in srcs}
    frontier = list(srcs)
    while frontier:
        nxt = []
        for v in frontier:
            for _, w in lay.adjacency.get(v, ()):
                if w not in dist:
                    dist[w] = dist[v] + 1
                    nxt.append(w)
        frontier = nxt
    return dist


def _check_bonuses(lay: Layout, sheet: _Sheet) -> None:
    if "five_by_two" in lay.stars and "five_by_two" not in sheet.stars:
        if all(sheet.boxes[c] >= 2 for c in COLOURS):
            sheet.stars["five_by_two"] = StarMark.COLOURED
    if "all_boxes" in lay.stars and "all_boxes" not in sheet.stars:
        if any(sheet.boxes[c] >= len(row) > 0 for c, row in lay.tboxes.items()):
            sheet.stars["all_boxes"] = StarMark.COLOURED


def _our_turn(lay, sheet, hand, rng, style) -> str | None:
    """Pick a pencil from ``hand`` ({colour: face}) and play it. Returns the colour taken."""
    options = []
    for colour, face in hand.items():
        dist = _targets_dist(lay, sheet, colour)
        for m in _moves(lay, sheet, colour, face):
            options.append((colour, m, False, _gain(lay, sheet, colour, m, dist)))
        unused = sheet.rims - len(sheet.cores)
        if unused > 0 and face != ("any", 3):
            for m in _moves(lay, sheet, colour, ("any", 3)):
                # ruling R7: a propeller replaces the die by 3 any-steps; worth spending only
                # when it pays, so it carries a small cost
                options.append((colour, m, True, _gain(lay, sheet, colour, m, dist) - 1.5))
    if not options or rng.random() < style["forfeit"]:
        colour = list(hand)[int(rng.integers(len(hand)))]
        sheet.log.append({"colour": colour, "face": hand[colour], "kind": "forfeit"})
        return colour  # forfeit: the pencil is taken and set aside without drawing
    if rng.random() < style["random"]:
        choice = options[int(rng.integers(len(options)))]
    else:
        vals = np.array([o[3] for o in options]) + rng.normal(0, style["noise"], len(options))
        choice = options[int(np.argmax(vals))]
    colour, move, propeller, _ = choice
    if propeller:
        used = set(sheet.cores)
        sheet.cores.append(next(k for k in range(1, sheet.rims + 1) if k not in used))
    sheet.log.append({"colour": colour, "face": ("any", 3) if propeller else hand[colour],
                      "kind": "propeller" if propeller else "die",
                      "spaces": [move[0]] + list(move[3])})
    _play(lay, sheet, colour, move, rng)
    return colour


def _play(lay, sheet, colour, move, rng, depth=0) -> None:
    _apply(lay, sheet, colour, move)
    start, _, path, spaces = move
    end = spaces[-1] if spaces else start
    wid = lay.whirlpool_at.get(end)
    if wid is not None and wid not in sheet.whirl:
        # the route stopped on a whirlpool: colour it, then at once exactly 3 any-steps
        # (ruling R5: part of the same action; forfeited when no such walk exists)
        sheet.whirl[wid] = colour
        extra = _any_moves(lay, sheet, end, 3)
        if extra and depth < 5:
            p, sp = extra[int(rng.integers(len(extra)))]
            sheet.log.append({"colour": colour, "face": ("any", 3), "kind": "whirlpool",
                              "spaces": [end] + list(sp)})
            _play(lay, sheet, colour, (end, None, p, sp), rng, depth + 1)


def simulate_game(template: Template, seed: int, *, players: int | None = None,
                  write_total: bool = True) -> State:
    """Play one whole legal game and return our sheet's end state (see :func:`play_game`)."""
    return play_game(template, seed, players=players, write_total=write_total)[0]


def play_game(template: Template, seed: int, *, players: int | None = None,
              write_total: bool = True) -> tuple[State, list[dict]]:
    """Play one whole legal game and return our sheet's end state.

    Parameters
    ----------
    template : Template
        A Reefs template (any level).
    seed : int
        Random seed; the same seed gives the same game.
    players : int, optional
        Players at the table, 2-4 (sampled when None).
    write_total : bool
        Write the row points, bonus field and total at the end (a careful player does).

    Returns
    -------
    State
        The end state; its audit has no findings other than notes.
    list of dict
        Our moves in order: ``colour``, ``face`` (kind, steps), ``kind`` (``die``,
        ``propeller``, ``whirlpool`` for the 3 any-steps after a whirlpool, ``forfeit``) and
        ``spaces`` (the route's spaces from where the move starts), for replay checks.
    """
    from sheetcheck.errors import StateError
    lay = layout_of(template)
    rng = np.random.default_rng(seed)
    n = int(players) if players is not None else int(rng.integers(2, 5))
    if not 2 <= n <= 4:
        raise StateError(f"players must be 2-4, got {players!r}.")
    me = int(rng.integers(n))
    style = {"forfeit": float(rng.uniform(0.0, 0.08)), "random": float(rng.uniform(0.05, 0.3)),
             "noise": float(rng.uniform(0.3, 2.0))}
    # other players end the game / take a first-player bonus with these per-pick chances
    p_end = float(rng.uniform(0.004, 0.05))
    p_star = float(rng.uniform(0.0, 0.03))
    start_round_end = int(rng.integers(3, 9))
    sheet = _Sheet(lay)
    over = False
    for rnd in range(80):
        faces = {c: FACES[int(rng.integers(6))] for c in COLOURS}
        first = rnd % n
        order = [(first + i) % n for i in range(5)]
        for seat in order:
            if seat == me:
                taken = _our_turn(lay, sheet, faces, rng, style)
                faces.pop(taken)
                _check_bonuses(lay, sheet)
                grey, coins = sheet.grey_all(), sheet.coins_full()
                if grey or coins:
                    if grey and "end_grey" in lay.stars:
                        sheet.stars["end_grey"] = StarMark.COLOURED
                    if coins and "end_coins" in lay.stars:
                        sheet.stars["end_coins"] = StarMark.COLOURED
                    over = True
            else:
                faces.pop(list(faces)[int(rng.integers(len(faces)))])
                if rnd >= start_round_end:
                    for bonus in ("five_by_two", "all_boxes"):
                        if bonus in lay.stars and bonus not in sheet.stars and rng.random() < p_star:
                            sheet.stars[bonus] = StarMark.CROSSED
                    if rng.random() < p_end:
                        over = True
            if over:
                break
        if over:
            break
    return _to_state(template, lay, sheet, write_total), sheet.log


def _to_state(template, lay, sheet, write_total) -> State:
    tboxes = [b for c, row in lay.tboxes.items() for b, _, _ in row[:sheet.boxes[c]]]
    cboxes = [b for b, _ in lay.cboxes[:sheet.coin_boxes]]
    written = list(lay.fields) if write_total else []
    return make_state(template, connections=sheet.conn, entries=sheet.entries,
                      treasures=sheet.treasures, whirlpools=sheet.whirl, treasure_boxes=tboxes,
                      coin_boxes=cboxes, rims=range(1, sheet.rims + 1), cores=sheet.cores,
                      stars=sheet.stars, written=written)
