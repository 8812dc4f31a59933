"""Pick a Pen: Crypts at the table: whole legal games, and labelled rule breaks.

``simulate_game`` plays a game turn by turn with the real dice (five pencils, one per colour,
faces circle, triangle, square, cross, hexagon, joker), tracks only our sheet in full and ends
the game as the rulebook says (our last symbol, or another player's, sampled). The end state is
marked as a careful player would: the point boxes of the best choice, the earned stars, the
total written. ``inject_violation`` breaks exactly one rule of such a state.
"""

from __future__ import annotations

import math
import random
from typing import Any

from calibration.template import PENCIL_COLOURS, Template
from sheetcheck.errors import StateError

FACES: tuple[str, ...] = ("circle", "triangle", "square", "cross", "hexagon", "joker")

#: Named rule breaks; each is found by audit() under the rule id in VIOLATION_RULE.
VIOLATIONS: tuple[str, ...] = (
    "gap_in_row", "outline_extra_missing", "points_unearned", "points_not_coloured",
    "bonus_unearned", "bonus_not_coloured", "crossed_cell", "total_missing",
)
VIOLATION_RULE: dict[str, str] = {
    "gap_in_row": "crypts.left_to_right",
    "outline_extra_missing": "crypts.outline_extra",
    "points_unearned": "crypts.points_unearned",
    "points_not_coloured": "crypts.points_not_coloured",
    "bonus_unearned": "crypts.bonus_unearned",
    "bonus_not_coloured": "crypts.bonus_not_coloured",
    "crossed_cell": "crypts.crossed_cell",
    "total_missing": "crypts.total_missing",
}


def _engine():
    from scoring import crypts  # late: crypts imports this module at its end
    return crypts


# --------------------------------------------------------------------------------------------
# simulate
# --------------------------------------------------------------------------------------------

class _Sheet:
    """Our sheet during play: mutable colour indices per cell (-1 empty)."""

    def __init__(self, lay) -> None:
        self.lay = lay
        self.col = [-1] * len(lay.cell_ids)
        self.next_in_row = {ln.index: 0 for ln in lay.rows}
        self.row_of = {}
        self.column_of = {}
        for ln in lay.rows:
            for i in ln.cells:
                self.row_of[i] = ln
        for ln in lay.columns:
            for i in ln.cells:
                self.column_of[i] = ln
        self.empty = len(self.col)

    def frontier(self, row) -> int | None:
        k = self.next_in_row[row.index]
        return row.cells[k] if k < len(row.cells) else None

    def open_cells(self) -> list[int]:
        return [c for c in (self.frontier(r) for r in self.lay.rows) if c is not None]

    def colour(self, i: int, ci: int) -> None:
        self.col[i] = ci
        self.next_in_row[self.row_of[i].index] += 1
        self.empty -= 1

    def line_value(self, ln) -> int:
        return _engine().solve_line(tuple(self.col[i] for i in ln.cells), ln.caps()).best

    def gain(self, i: int, ci: int) -> float:
        """Score gained by colouring cell i with colour ci, plus a small lure of neighbours."""
        lines = [self.row_of[i], self.column_of[i]]
        before = sum(self.line_value(ln) for ln in lines)
        self.col[i] = ci
        after = sum(self.line_value(ln) for ln in lines)
        self.col[i] = -1
        lure = 0.0
        r, c = self.lay.cell_rc[i]
        for rc in ((r, c - 1), (r, c + 1), (r - 1, c), (r + 1, c)):
            j = self.lay.pos_of.get(rc)
            if j is not None and self.col[j] == ci:
                lure += 0.4
        return after - before + lure

    def options(self, face: str) -> list[int]:
        """Cells a pencil with this face may colour (pencil row as an alternative)."""
        lay = self.lay
        opts: list[int] = []
        row = lay.row_of_symbol(face) if face != "joker" else None
        if row is not None and self.frontier(row) is not None:
            opts.append(self.frontier(row))  # type: ignore[arg-type]
            pencil = lay.pencil_row
            if pencil is not None and self.frontier(pencil) is not None:
                opts.append(self.frontier(pencil))  # type: ignore[arg-type]
        else:
            # joker, or the symbol's row is complete: any one symbol (left to right)
            opts = self.open_cells()
        return opts


def _softmax_pick(rng: random.Random, items: list, values: list[float], temp: float):
    top = max(values)
    weights = [math.exp((v - top) / temp) for v in values]
    return rng.choices(items, weights)[0]


def simulate_game(template: Template, seed: int, *, players: int | None = None,
                  log: list | None = None):
    """Play one whole legal game of Crypts and return our sheet's end state.

    Parameters
    ----------
    template : Template
        a crypts-* template (any level).
    seed : int
        all randomness (table size, dice, the other players, our choices) follows from it.
    players : int, optional
        2-4 players at the table; sampled when None.
    log : list, optional
        if given, every event is appended as a dict: ``{"event": "roll", "round", "pencils"}``,
        ``{"event": "pick", "player", "pencil", "face"}`` (any player),
        ``{"event": "colour", "cell", "colour", "extra"}`` (our sheet) and finally
        ``{"event": "end", "by": "us" | player}``, so that a test can replay the game.

    Returns
    -------
    State
        our sheet at the end, boxes and stars coloured as a careful player would, total written.
    """
    crypts = _engine()
    lay = crypts.layout_of(template)
    rng = random.Random(seed)
    n_players = players if players is not None else rng.choice((2, 2, 3, 3, 4))
    if not 2 <= n_players <= 4:
        raise StateError(f"players must be 2-4, got {n_players}.", hint="Crypts is for 2-4 players.")
    sheet = _Sheet(lay)
    me = rng.randrange(n_players)
    turn = rng.randrange(n_players)  # the most colourfully dressed player starts
    temp = rng.uniform(0.25, 2.0)    # how carefully our player plays
    n_cells = len(lay.cell_ids)
    # the other players finish their sheets after a plausible, varied number of picks (each pick
    # colours about 1.15 symbols with outline extras); when one does, the game ends at once
    finish = {p: max(6, round(n_cells / 1.15 * rng.uniform(0.3, 1.35)))
              for p in range(n_players) if p != me}
    picks = {p: 0 for p in range(n_players)}
    over = False
    rounds = 0
    ev = log.append if log is not None else (lambda e: None)
    while not over:
        rounds += 1
        pencils = [(ci, rng.choice(FACES)) for ci in range(5)]
        ev({"event": "roll", "round": rounds,
            "pencils": [(PENCIL_COLOURS[c], f) for c, f in pencils]})
        while pencils and not over:
            player = turn
            turn = (turn + 1) % n_players
            picks[player] += 1
            if player != me:
                ci, face = pencils.pop(rng.randrange(len(pencils)))
                ev({"event": "pick", "player": player, "pencil": PENCIL_COLOURS[ci],
                    "face": face})
                if picks[player] >= finish[player]:
                    over = True
                    ev({"event": "end", "by": player})
                continue
            choices, values = [], []
            for k, (ci, face) in enumerate(pencils):
                for cell in sheet.options(face):
                    choices.append((k, cell))
                    values.append(sheet.gain(cell, ci) + rng.gauss(0, 0.3))
            k, cell = _softmax_pick(rng, choices, values, temp)
            ci, face = pencils.pop(k)
            ev({"event": "pick", "player": "us", "pencil": PENCIL_COLOURS[ci], "face": face})
            over = _colour_with_extras(sheet, cell, ci, rng, temp, ev)
            if over:
                ev({"event": "end", "by": "us"})
    return _finish_sheet(template, sheet, rng)


def _colour_with_extras(sheet: _Sheet, cell: int, ci: int, rng: random.Random,
                        temp: float, ev) -> bool:
    """Colour a cell and every extra its outline demands; True when the sheet is full."""
    lay = sheet.lay
    extra = False
    while True:
        sheet.colour(cell, ci)
        ev({"event": "colour", "cell": lay.cell_ids[cell], "colour": PENCIL_COLOURS[ci],
            "extra": extra})
        extra = True
        if sheet.empty == 0:
            return True  # "The game ends immediately" even if an extra was owed
        outline = lay.outlines[cell]
        if outline not in ("black", PENCIL_COLOURS[ci]):
            return False
        opts = sheet.open_cells()
        cell = _softmax_pick(rng, opts, [sheet.gain(c, ci) for c in opts], temp)


def _finish_sheet(template: Template, sheet: _Sheet, rng: random.Random):
    """Mark boxes and stars for the best choice, as a careful player would, write the total."""
    crypts = _engine()
    lay = sheet.lay
    marks = {rid: (PENCIL_COLOURS[c] if c >= 0 else "empty")
             for rid, c in zip(lay.cell_ids, sheet.col)}
    state = crypts.state_from_marks(template, marks)
    return settle(state, rng)


def settle(state, rng: random.Random):
    """The same cells, with point boxes and stars exactly as the rules fill them."""
    crypts = _engine()
    lay = state.layout
    sol = crypts.solve(state)
    boxes: dict[str, str] = {b: "empty" for b in lay.box_ids}
    for ln, s in sol.lines:
        used = {k: 0 for k in crypts.GROUP_KINDS}
        for kind, ci, _ in s.groups:
            box_id, _ = ln.boxes[kind][used[kind]]
            used[kind] += 1
            boxes[box_id] = PENCIL_COLOURS[ci] if ci >= 0 else rng.choice(PENCIL_COLOURS)
    for (ci, _), (box_id, _) in zip(sol.grids, lay.grid_boxes):
        boxes[box_id] = PENCIL_COLOURS[ci]
    marks = crypts.state_to_marks(state)
    marks.update(boxes)
    for kind, (sid, _) in lay.star_bonus.items():
        marks[sid] = rng.choice(PENCIL_COLOURS) if sol.stars.get(kind) else "empty"
    if lay.total_id:
        marks[lay.total_id] = "written"
    return crypts.state_from_marks(state.template, marks)


# --------------------------------------------------------------------------------------------
# inject
# --------------------------------------------------------------------------------------------

def _candidates(state, kind: str, rng: random.Random) -> list[dict[str, Any]]:
    """Changes (``{region_id: mark}`` plus ``_settle`` to refill boxes) that may break ``kind``."""
    crypts = _engine()
    lay = state.layout
    cells = state.cells
    E = crypts.Mark.EMPTY
    out: list[dict[str, Any]] = []
    if kind == "gap_in_row":
        for row in lay.rows:
            filled = [j for j, i in enumerate(row.cells) if cells[i] != E]
            empty = [j for j, i in enumerate(row.cells) if cells[i] == E]
            # empty an earlier cell, or colour a cell beyond the next empty one
            for j in filled[:-1]:
                out.append({lay.cell_ids[row.cells[j]]: "empty", "_settle": True})
            for j in empty[1:]:
                out.append({lay.cell_ids[row.cells[j]]: rng.choice(PENCIL_COLOURS),
                            "_settle": True})
    elif kind == "outline_extra_missing":
        # outlined symbols in their colour whose colour has no other symbol left: one such
        # colour, or two (a full sheet excuses one missing extra: the game ended on it)
        picks = []
        for i, o in enumerate(lay.outlines):
            if o is None or cells[i] == E:
                continue
            picks.append((i, o if o != "black" else cells[i].value))
        combos = [[p] for p in picks] + [[a, b] for a in picks for b in picks
                                         if a[0] < b[0] and a[1] != b[1]]
        for combo in combos:
            targets = {colour for _, colour in combo}
            spare = [c for c in PENCIL_COLOURS if c not in targets]
            ch: dict[str, Any] = {"_settle": True}
            for i, colour in combo:
                ch[lay.cell_ids[i]] = colour
            keep = {i for i, _ in combo}
            for j, m in enumerate(cells):
                if m.value in targets and j not in keep:
                    ch[lay.cell_ids[j]] = rng.choice(spare)
            out.append(ch)
    elif kind in ("points_unearned", "points_not_coloured"):
        box = dict(zip(lay.box_ids, state.boxes))
        for b in lay.box_ids:
            if kind == "points_unearned" and box[b] == E:
                out.append({b: rng.choice(PENCIL_COLOURS)})
            if kind == "points_not_coloured" and box[b].is_colour:
                out.append({b: "empty"})
    elif kind in ("bonus_unearned", "bonus_not_coloured"):
        star = dict(zip(lay.star_ids, state.stars))
        for s in lay.star_ids:
            if kind == "bonus_unearned" and star[s] == E:
                out.append({s: rng.choice(PENCIL_COLOURS)})
            if kind == "bonus_not_coloured" and star[s].is_colour:
                out.append({s: "empty"})
    elif kind == "crossed_cell":
        for row in lay.rows:
            j = next((j for j, i in enumerate(row.cells) if cells[i] == E), None)
            if j is not None:  # crossing the next free symbol keeps the row gap-free
                out.append({lay.cell_ids[row.cells[j]]: "crossed", "_settle": True})
        for i, m in enumerate(cells):
            if m.is_colour:
                out.append({lay.cell_ids[i]: "crossed", "_settle": True})
    elif kind == "total_missing":
        if lay.total_id and state.total == crypts.Mark.WRITTEN:
            out.append({lay.total_id: "empty"})
    rng.shuffle(out)
    return out


def inject_violation(state, kind: str, rng):
    """Return a copy of ``state`` that breaks exactly the rule named by ``kind``.

    The change is drawn at random among small edits of the sheet (a cell emptied, coloured or
    crossed, a box or star coloured or cleared); when cells change, the boxes and stars are
    re-marked as the rules fill them, so that only ``kind`` is broken. Every candidate is checked
    with audit(): the result's violation and claim findings are exactly that rule.

    Raises
    ------
    StateError
        for an unknown kind, or when no small edit of this sheet breaks that rule alone (for
        example ``bonus_not_coloured`` on a sheet that earned no bonus).
    """
    crypts = _engine()
    if kind not in VIOLATIONS:
        raise StateError(f"unknown Crypts violation {kind!r}.",
                         hint=f"Known: {', '.join(VIOLATIONS)}.")
    want = VIOLATION_RULE[kind]
    if not isinstance(rng, random.Random):  # the interface takes any of seed, Random, Generator
        seed = int(rng.integers(2**63)) if hasattr(rng, "integers") else rng
        rng = random.Random(seed)
    for ch in _candidates(state, kind, rng)[:60]:
        resettle = ch.pop("_settle", False)
        try:
            new = state.with_marks(ch)
        except StateError:
            continue  # a mark this template does not allow there
        if resettle:
            new = settle(new, rng)
            if state.total != crypts.Mark.WRITTEN and new.layout.total_id:
                new = new.with_marks({new.layout.total_id: state.total})
        rules = {f.rule for f in crypts.audit(new).findings}
        before = {f.rule for f in crypts.audit(state).findings}
        if want in rules and rules - before <= {want} and want not in before:
            return new
    raise StateError(f"cannot inject {kind!r} into this {state.template_id} sheet: no small "
                     f"edit breaks that rule alone.",
                     hint="Try another state (for example a sheet with more symbols coloured).")
