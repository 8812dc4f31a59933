"""Rules engine for Pick a Pen: Crypts, levels 1-3 (rulebook 001, rulings in RULES.md (Crypts)).

Everything about the sheet (cells, outlines, point boxes and their values, stars) is read from
the template (docs/TEMPLATES.md); nothing about a layout is hard-coded here.

Scoring is exact: every row and every column is solved by a dynamic programme over the line's
cells that visits every partition into disjoint groups (pairs, triples, one cell of each colour
for "all five colours"), limited by the line's point boxes; the best total is the score. 2x2
grids (level 3) are scored across the whole grid, at most one per colour.

The play side (``simulate_game``, ``VIOLATIONS``, ``inject_violation``) lives in
``scoring/crypts_play.py`` and is re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from functools import lru_cache
from typing import Any, Iterable, Mapping

from calibration.template import PENCIL_COLOURS, Template, get_template
from scoring.common import Audit, Breakdown, Finding, Line, Severity
from sheetcheck.errors import SheetcheckError, StateError

GAME = "pick_a_pen_crypts"

#: Group kinds a line's point boxes can name, in the order the sheet lists them.
GROUP_KINDS: tuple[str, ...] = ("pair", "triple", "all_colours")
GROUP_SIZE = {"pair": 2, "triple": 3}

SYMBOL_ROWS = ("circle", "triangle", "square", "cross", "hexagon")

#: Rulebook sentences the findings and breakdown rest on (quoted from rulebook 001).
RULE_TEXT: dict[str, str] = {
    "crypts.left_to_right": "\"From left to right: You must always color in the symbols in a row "
                            "from left to right and may not skip any symbol.\"",
    "crypts.outline_extra": "\"Symbols with a colored outline: ... If you color one of these in "
                            "with the corresponding color, you immediately color in one further "
                            "symbol of your choice in this color.\" / (level 3) \"Symbols with a "
                            "black outline: ... If you color one of these in, you must immediately "
                            "color in one further symbol of your choice in the same color.\"",
    "crypts.points_unearned": "\"Marking points: If you fulfil one of the conditions for scoring "
                              "points, color in the corresponding point box\"; \"no space may "
                              "belong to more than one color group.\"",
    "crypts.points_not_coloured": "\"Marking points: If you fulfil one of the conditions for "
                                  "scoring points, color in the corresponding point box\" (the "
                                  "best legal choice of groups is the score: RULES.md (Crypts) R3).",
    "crypts.bonus_unearned": "\"you can collect the bonus points shown in the stars (5 points "
                             "each) when: you have colored in at least one point box in every row."
                             " / ... in every column.\"; \"If you manage to form 3 or more of these"
                             " grids, you additionally receive 10 bonus points.\"",
    "crypts.bonus_not_coloured": "\"Marking points: If you fulfil one of the conditions for "
                                 "scoring points, color in the corresponding point box or the "
                                 "corresponding bonus-point star\"",
    "crypts.crossed_cell": "\"You must color in on your score sheet the symbol that is shown on "
                           "your pencil.\" (a crossed-out symbol is no legal move; RULES.md (Crypts) "
                           "R9: it counts as filled and belongs to no group)",
    "crypts.total_missing": "\"Now each player adds up their points by totalling all values in the "
                            "colored-in point boxes and any bonus points.\"",
}


_BONUS_TEXT = {
    "all_rows": "\"you can collect the bonus points shown in the stars (5 points each) when: you "
                "have colored in at least one point box in every row.\"",
    "all_columns": "\"you can collect the bonus points shown in the stars (5 points each) when: "
                   "... you have colored in at least one point box in every column.\"",
    "three_grids": "\"Bonus: If you manage to form 3 or more of these grids, you additionally "
                   "receive 10 bonus points.\"",
}


class Mark(str, Enum):
    """What one region of a Crypts sheet shows."""

    EMPTY = "empty"
    ORANGE = "orange"
    RED = "red"
    BLUE = "blue"
    GREEN = "green"
    PURPLE = "purple"
    CROSSED = "crossed"
    WRITTEN = "written"

    @property
    def is_colour(self) -> bool:
        return self.value in PENCIL_COLOURS

    @property
    def colour_index(self) -> int:
        """0-4 for a pencil colour (rulebook order), -1 otherwise."""
        return PENCIL_COLOURS.index(self.value) if self.is_colour else -1


COLOUR_MARKS: tuple[Mark, ...] = tuple(Mark(c) for c in PENCIL_COLOURS)
# plain dict lookups: the Enum properties are slow in the scoring loops
_CI: dict[Mark, int] = {m: m.colour_index for m in Mark}
_COLOURED: frozenset[Mark] = frozenset(COLOUR_MARKS)

#: One letter per mark in the hand-typed JSON grid (docs/STATE_JSON.md).
LETTER_OF: dict[Mark, str] = {Mark.EMPTY: ".", Mark.ORANGE: "o", Mark.RED: "r", Mark.BLUE: "b",
                              Mark.GREEN: "g", Mark.PURPLE: "p", Mark.CROSSED: "x"}
MARK_OF_LETTER: dict[str, Mark] = {v: k for k, v in LETTER_OF.items()}


# --------------------------------------------------------------------------------------------
# the sheet, as the template describes it
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LineSpec:
    """One row or column: its cells in order and the point boxes printed beside it.

    ``boxes`` maps a group kind to ``((box_id, points), ...)`` in slot order.
    """

    kind: str                     # "row" or "column"
    index: int
    cells: tuple[int, ...]        # positions in Layout.cell_ids, in reading order
    boxes: Mapping[str, tuple[tuple[str, int], ...]]

    @property
    def label(self) -> str:
        return f"{self.kind} {self.index}"

    def box_ids(self) -> tuple[str, ...]:
        got = self.__dict__.get("_box_ids")  # memo: the line never changes
        if got is None:
            got = tuple(b for k in GROUP_KINDS for b, _ in self.boxes.get(k, ()))
            object.__setattr__(self, "_box_ids", got)
        return got

    def caps(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """Points of each slot, per group kind (the DP's key)."""
        got = self.__dict__.get("_caps")
        if got is None:
            got = tuple(tuple(p for _, p in self.boxes.get(k, ())) for k in GROUP_KINDS)
            object.__setattr__(self, "_caps", got)
        return got  # type: ignore[return-value]


@dataclass(frozen=True)
class Layout:
    """Everything the engine needs from a Crypts template, indexed once."""

    template_id: str
    level: int | None
    cell_ids: tuple[str, ...]
    cell_rc: tuple[tuple[int, int], ...]
    symbols: tuple[str, ...]
    outlines: tuple[str | None, ...]
    rows: tuple[LineSpec, ...]
    columns: tuple[LineSpec, ...]
    grid_boxes: tuple[tuple[str, int], ...]
    box_ids: tuple[str, ...]              # every point box: rows, columns, grid
    star_ids: tuple[str, ...]
    star_bonus: Mapping[str, tuple[str, int]]   # bonus kind -> (star id, points)
    total_id: str | None
    other_ids: tuple[str, ...]            # readable regions that are not game state (swatches)
    pos_of: Mapping[tuple[int, int], int]

    @property
    def lines(self) -> tuple[LineSpec, ...]:
        return self.rows + self.columns

    def row_of_symbol(self, symbol: str) -> LineSpec | None:
        for line in self.rows:
            if self.symbols[line.cells[0]] == symbol:
                return line
        return None

    @property
    def pencil_row(self) -> LineSpec | None:
        return self.row_of_symbol("pencil")


_LAYOUTS: dict[int, tuple[Template, Layout]] = {}


def layout_of(template: Template) -> Layout:
    """The indexed layout of a Crypts template (cached per template object).

    Raises
    ------
    StateError
        if the template is not a Crypts template or its regions break docs/TEMPLATES.md.
    """
    hit = _LAYOUTS.get(id(template))
    if hit is not None and hit[0] is template:
        return hit[1]
    lay = _build_layout(template)
    _LAYOUTS[id(template)] = (template, lay)  # holding the template keeps its id unique
    return lay


def _build_layout(t: Template) -> Layout:
    if t.game != GAME:
        raise StateError(f"template {t.id!r} is for game {t.game!r}, not {GAME!r}.",
                         hint="Use a crypts-* template (sheetcheck templates lists them).")
    problems: list[str] = []
    cells: dict[tuple[int, int], Any] = {}
    boxes: dict[tuple[str, int], dict[str, list[tuple[int, str, int]]]] = {}
    grid: list[tuple[int, str, int]] = []
    stars: dict[str, tuple[str, int]] = {}
    total_id = None
    other: list[str] = []
    for r in t.regions:
        m = r.meaning
        if r.id.startswith("cell."):
            try:
                rc = (int(m["row"]), int(m["col"]))
            except (KeyError, TypeError, ValueError):
                problems.append(f"{r.id}: meaning needs integer 'row' and 'col'")
                continue
            cells[rc] = r
        elif r.id.startswith("points."):
            try:
                slot, pts = int(m["slot"]), int(m["points"])
                if m["line"] == "grid":
                    grid.append((slot, r.id, pts))
                    continue
                kind = {"row": "row", "column": "column"}[m["line"]]
                group = m["group"]
                if group not in GROUP_KINDS:
                    raise ValueError
                boxes.setdefault((kind, int(m["index"])), {}).setdefault(group, []).append(
                    (slot, r.id, pts))
            except (KeyError, TypeError, ValueError):
                problems.append(f"{r.id}: meaning needs line row/column/grid, index, group "
                                f"pair/triple/all_colours, points and slot")
        elif r.kind == "star" and "bonus" in m:
            stars[m["bonus"]] = (r.id, int(m.get("points", 0)))
        elif r.id == "total" or m.get("field") == "total":
            total_id = r.id
        elif r.readable:
            other.append(r.id)
    if not cells:
        problems.append("no cell.r{R}.c{C} regions")
    if problems:
        raise StateError(f"template {t.id!r} does not describe a Crypts sheet:\n  - "
                         + "\n  - ".join(problems), hint="See docs/TEMPLATES.md (Crypts).")
    order = sorted(cells)
    pos_of = {rc: i for i, rc in enumerate(order)}
    ids = tuple(cells[rc].id for rc in order)
    symbols = tuple(str(cells[rc].meaning.get("symbol")) for rc in order)
    outlines = tuple(cells[rc].meaning.get("outline") for rc in order)

    def line(kind: str, index: int, members: list[tuple[int, int]]) -> LineSpec:
        bx = boxes.get((kind, index), {})
        return LineSpec(kind, index, tuple(pos_of[rc] for rc in members),
                        {k: tuple((bid, p) for _, bid, p in sorted(bx[k])) for k in GROUP_KINDS
                         if k in bx})

    row_nums = sorted({r for r, _ in order})
    col_nums = sorted({c for _, c in order})
    rows = tuple(line("row", r, sorted(rc for rc in order if rc[0] == r)) for r in row_nums)
    cols = tuple(line("column", c, sorted(rc for rc in order if rc[1] == c)) for c in col_nums)
    grid_boxes = tuple((bid, p) for _, bid, p in sorted(grid))
    box_ids = tuple(b for ln in rows + cols for b in ln.box_ids()) + tuple(b for b, _ in grid_boxes)
    return Layout(t.id, t.level, ids, tuple(order), symbols, outlines, rows, cols, grid_boxes,
                  box_ids, tuple(s for s, _ in stars.values()), stars, total_id, tuple(other),
                  pos_of)


# --------------------------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class State:
    """The marks of one Crypts sheet.

    ``cells`` follows ``layout_of(template).cell_ids`` (row by row, left to right), ``boxes``
    follows ``Layout.box_ids`` (every point box), ``stars`` follows ``Layout.star_ids``.
    """

    template_id: str
    level: int | None
    cells: tuple[Mark, ...]
    boxes: tuple[Mark, ...]
    stars: tuple[Mark, ...]
    total: Mark
    template: Template = field(compare=False, repr=False)

    @property
    def layout(self) -> Layout:
        return layout_of(self.template)

    def mark(self, region_id: str) -> Mark:
        """The mark of any game region of the sheet by id."""
        lay = self.layout
        for ids, values in ((lay.cell_ids, self.cells), (lay.box_ids, self.boxes),
                            (lay.star_ids, self.stars)):
            if region_id in ids:
                return values[ids.index(region_id)]
        if region_id == lay.total_id:
            return self.total
        raise KeyError(f"{region_id!r} is not a game region of template {self.template_id!r}")

    def with_marks(self, changes: Mapping[str, Mark | str]) -> "State":
        """A copy with some regions' marks replaced (validated like state_from_marks)."""
        marks = state_to_marks(self)
        marks.update({k: v.value if isinstance(v, Mark) else v for k, v in changes.items()})
        return state_from_marks(self.template, marks)


def state_from_marks(template: Template, marks: Mapping[str, str]) -> State:
    """Build a state from ``{region_id: mark}`` (reader output or truth).

    Regions left out are empty. Every problem is reported at once.

    Raises
    ------
    StateError
        for a template of another game, an unknown region id, or a mark the region cannot carry.
    """
    lay = layout_of(template)
    if not isinstance(marks, Mapping):
        raise StateError(f"marks must be a mapping of region id to mark, got {type(marks).__name__}.")
    problems = []
    known = {r.id: r for r in template.regions}
    for rid, mk in marks.items():
        reg = known.get(rid)
        if reg is None or not reg.readable:
            problems.append(f"{rid!r} is not a readable region of template {template.id!r}")
        elif mk not in reg.marks:
            problems.append(f"{rid!r} cannot be {mk!r}; allowed: {', '.join(reg.marks)}")
    if problems:
        raise StateError(f"marks do not fit template {template.id!r} ({len(problems)} problem"
                         f"{'s' if len(problems) != 1 else ''}):\n  - " + "\n  - ".join(problems),
                         hint="Use the region ids and marks of the template (docs/TEMPLATES.md).")

    def get(rid: str) -> Mark:
        return Mark(marks.get(rid, "empty"))

    return State(template.id, template.level,
                 tuple(get(r) for r in lay.cell_ids), tuple(get(b) for b in lay.box_ids),
                 tuple(get(s) for s in lay.star_ids),
                 get(lay.total_id) if lay.total_id else Mark.EMPTY, template)


def state_to_marks(state: State) -> dict[str, str]:
    """``{region_id: mark}`` for every readable region of the sheet.

    Printed colour swatches carry their own colour (they are printed, not played).
    """
    lay = state.layout
    out = {rid: m.value for rid, m in zip(lay.cell_ids, state.cells)}
    out.update({rid: m.value for rid, m in zip(lay.box_ids, state.boxes)})
    out.update({rid: m.value for rid, m in zip(lay.star_ids, state.stars)})
    if lay.total_id:
        out[lay.total_id] = state.total.value
    for rid in lay.other_ids:
        reg = state.template.region(rid)
        colour = reg.meaning.get("colour")
        out[rid] = colour if colour in reg.marks else "empty"
    return out


def state_to_json(state: State) -> dict:
    """The hand-typed JSON form (docs/STATE_JSON.md): a grid of letters, coloured boxes."""
    lay = state.layout
    grid = []
    for row in lay.rows:
        grid.append("".join(LETTER_OF[state.cells[i]] for i in row.cells))
    boxes = {rid: LETTER_OF[m] for rid, m in zip(lay.box_ids + lay.star_ids,
                                                  state.boxes + state.stars) if m != Mark.EMPTY}
    return {"game": GAME, "template": state.template_id, "grid": grid, "boxes": boxes,
            "total": state.total.value}


def _parse_mark(value: Any) -> Mark | None:
    if not isinstance(value, str):
        return None
    v = value.strip().lower()
    if v in MARK_OF_LETTER:
        return MARK_OF_LETTER[v]
    try:
        return Mark(v)
    except ValueError:
        return None


def state_from_json(doc: Mapping[str, Any], *, template: Template | None = None) -> State:
    """Build a state from the hand-typed JSON form (docs/STATE_JSON.md).

    Parameters
    ----------
    doc : mapping
        ``{"game", "template", "grid": [one string per row], "boxes": {id: mark}, "total"}``.
    template : Template, optional
        use this template instead of looking ``doc["template"]`` up (its id must match).

    Raises
    ------
    StateError
        naming every problem (wrong game, unknown template, row lengths, letters, region ids).
    """
    if not isinstance(doc, Mapping):
        raise StateError("a Crypts state must be a JSON object.", hint="See docs/STATE_JSON.md.")
    if doc.get("game") != GAME:
        raise StateError(f"state is for game {doc.get('game')!r}, not {GAME!r}.",
                         hint="Set \"game\": \"pick_a_pen_crypts\" (docs/STATE_JSON.md).")
    tid = doc.get("template")
    if template is None:
        if not isinstance(tid, str):
            raise StateError("state has no \"template\" id (for example \"crypts-2\").",
                             hint="See docs/STATE_JSON.md.")
        try:
            template = get_template(tid)
        except SheetcheckError as e:
            raise StateError(f"state names template {tid!r}: {e}") from None
    elif tid != template.id:
        raise StateError(f"state names template {tid!r} but template {template.id!r} was given.")
    lay = layout_of(template)
    problems: list[str] = []
    marks: dict[str, str] = {}
    grid = doc.get("grid")
    if not isinstance(grid, list) or not all(isinstance(g, str) for g in grid):
        problems.append("\"grid\" must be a list of strings, one per row")
        grid = []
    elif len(grid) != len(lay.rows):
        problems.append(f"\"grid\" has {len(grid)} rows; template {template.id!r} has "
                        f"{len(lay.rows)} (rows {', '.join(str(r.index) for r in lay.rows)})")
    for row, text in zip(lay.rows, grid):
        letters = text.replace(" ", "")
        if len(letters) != len(row.cells):
            problems.append(f"grid row {row.index} {text!r} has {len(letters)} cells; the row "
                            f"has {len(row.cells)}")
            continue
        for i, ch in zip(row.cells, letters):
            m = MARK_OF_LETTER.get(ch.lower())
            if m is None:
                problems.append(f"grid row {row.index}: letter {ch!r} is not one of "
                                f"{' '.join(MARK_OF_LETTER)} (o r b g p = orange red blue green "
                                f"purple, . empty, x crossed)")
            else:
                marks[lay.cell_ids[i]] = m.value
    boxes = doc.get("boxes", {})
    if not isinstance(boxes, Mapping):
        problems.append("\"boxes\" must be an object {region_id: colour}")
        boxes = {}
    valid_box = set(lay.box_ids) | set(lay.star_ids)
    for rid, v in boxes.items():
        m = _parse_mark(v)
        if rid not in valid_box:
            problems.append(f"\"boxes\": {rid!r} is not a point box or star of {template.id!r}")
        elif m is None:
            problems.append(f"\"boxes\": {rid!r} has mark {v!r}; use a colour, its letter, "
                            f"'empty' or 'crossed'")
        else:
            marks[rid] = m.value
    total = doc.get("total", "empty")
    if total not in ("empty", "written"):
        problems.append(f"\"total\" must be \"written\" or \"empty\", got {total!r}")
    elif lay.total_id:
        marks[lay.total_id] = total
    unknown = set(doc) - {"game", "template", "grid", "boxes", "total", "note"}
    if unknown:
        problems.append(f"unknown keys {sorted(unknown)}; allowed: game, template, grid, boxes, "
                        f"total, note")
    if problems:
        raise StateError(f"Crypts state for {template.id!r} is invalid ({len(problems)} problem"
                         f"{'s' if len(problems) != 1 else ''}):\n  - " + "\n  - ".join(problems),
                         hint="See docs/STATE_JSON.md for the format.")
    return state_from_marks(template, marks)


# --------------------------------------------------------------------------------------------
# one line, solved exactly
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class LineSolution:
    """All the ways one line can fill its point boxes.

    ``best``: the most points; ``counts``: (pairs, triples, all_colours) of the best choice;
    ``groups``: its groups as ``(kind, colour_index, positions-in-line)``; ``frontier``: every
    maximal achievable count vector (a claim is legal iff it is below one of them).
    """

    best: int
    counts: tuple[int, int, int]
    groups: tuple[tuple[str, int, tuple[int, ...]], ...]
    frontier: tuple[tuple[int, int, int], ...]

    def allows(self, counts: tuple[int, int, int]) -> bool:
        return any(all(c <= f for c, f in zip(counts, v)) for v in self.frontier)


def _value(counts: tuple[int, int, int], caps) -> int:
    return sum(sum(pts[:n]) for n, pts in zip(counts, caps))


@lru_cache(maxsize=65536)
def solve_line(colours: tuple[int, ...], caps: tuple[tuple[int, ...], ...]) -> LineSolution:
    """Solve one line exactly.

    Parameters
    ----------
    colours : tuple of int
        colour index 0-4 per cell in reading order, -1 for a cell with no colour.
    caps : (pair_points, triple_points, all_colours_points)
        the points of each point box slot of the line, per group kind (their lengths are the
        numbers of boxes).

    Returns
    -------
    LineSolution
        every reachable (pairs, triples, all_colours) combination is explored by a DP over
        positions (a cell is left out, starts a pair, starts a triple, or is given to the
        all-colours pool); no cell is in two groups.
    """
    n = len(colours)
    np_, nt, na = (len(c) for c in caps)
    # states[i]: {(pairs, triples, pool_counts): groups-so-far}, where pool_counts is how many
    # cells of each colour were set aside for all-colours groups (at most na each)
    states: list[dict] = [dict() for _ in range(n + 1)]
    states[0][(0, 0, (0,) * 5)] = ()
    for i in range(n):
        c = colours[i]
        for (p, t, pool), groups in states[i].items():
            nxt = states[i + 1]
            nxt.setdefault((p, t, pool), groups)
            if c < 0:
                continue
            if na and pool[c] < na:
                pl = pool[:c] + (pool[c] + 1,) + pool[c + 1:]
                nxt.setdefault((p, t, pl), groups + (("pool", c, (i,)),))
            if p < np_ and i + 1 < n and colours[i + 1] == c:
                states[i + 2].setdefault((p + 1, t, pool), groups + (("pair", c, (i, i + 1)),))
            if t < nt and i + 2 < n and colours[i + 1] == c and colours[i + 2] == c:
                states[i + 3].setdefault((p, t + 1, pool),
                                         groups + (("triple", c, (i, i + 1, i + 2)),))
    options: dict[tuple[int, int, int], tuple] = {}
    for (p, t, pool), groups in states[n].items():
        a = min(min(pool), na)
        options.setdefault((p, t, a), groups)
    # best: most points; ties broken towards more boxes, then pairs first (deterministic)
    key = max(options, key=lambda v: (_value(v, caps), v))
    groups = options[key]
    out = [g for g in groups if g[0] != "pool"]
    pool_cells = [g for g in groups if g[0] == "pool"]
    for j in range(key[2]):
        cells = []
        for col in range(5):
            mine = [g[2][0] for g in pool_cells if g[1] == col]
            cells.append(mine[j])
        out.append(("all_colours", -1, tuple(sorted(cells))))
    out.sort(key=lambda g: (g[2][0], g[0]))
    vecs = set(options)
    frontier = tuple(sorted(v for v in vecs if not any(
        w != v and all(a <= b for a, b in zip(v, w)) for w in vecs)))
    return LineSolution(_value(key, caps), key, tuple(out), frontier)


def line_colours(state_cells: tuple[Mark, ...], line: LineSpec) -> tuple[int, ...]:
    return tuple(_CI[state_cells[i]] for i in line.cells)


def find_grids(lay: Layout, cells: tuple[Mark, ...]) -> dict[int, tuple[int, ...]]:
    """For each colour index with a 2x2 block of that colour, the first block (cell positions)."""
    found: dict[int, tuple[int, ...]] = {}
    for (r, c), i in lay.pos_of.items():
        ci = _CI[cells[i]]
        if ci < 0 or ci in found:
            continue
        quad = [lay.pos_of.get(rc) for rc in ((r, c + 1), (r + 1, c), (r + 1, c + 1))]
        if all(q is not None and _CI[cells[q]] == ci for q in quad):
            found[ci] = (i, *quad)  # type: ignore[arg-type]
    return dict(sorted(found.items(), key=lambda kv: min(kv[1])))


# --------------------------------------------------------------------------------------------
# score: what the rules allow
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Solved:
    """The best legal choice for a whole sheet (shared by score, audit and the simulator)."""

    lines: tuple[tuple[LineSpec, LineSolution], ...]
    grids: tuple[tuple[int, tuple[int, ...]], ...]  # scored grids (colour, cells), capped by boxes
    grids_formed: int
    stars: Mapping[str, bool]                       # bonus kind -> earned


def solve(state: State) -> _Solved:
    """The best legal choice of groups for every line, the grids and the bonus conditions."""
    lay = state.layout
    lines = tuple((ln, solve_line(line_colours(state.cells, ln), ln.caps())) for ln in lay.lines)
    formed = find_grids(lay, state.cells)
    grids = tuple(list(formed.items())[:len(lay.grid_boxes)])
    stars: dict[str, bool] = {}
    for kind, group in (("all_rows", "row"), ("all_columns", "column")):
        # a line without point boxes on the sheet (none printed) takes no part in the condition
        scored = [sol.best > 0 for ln, sol in lines if ln.kind == group and ln.box_ids()]
        stars[kind] = bool(scored) and all(scored)
    stars["three_grids"] = len(grids) >= 3
    return _Solved(lines, grids, len(formed), stars)


def _colour_name(ci: int) -> str:
    return PENCIL_COLOURS[ci] if ci >= 0 else "all five colours"


def _line_title(lay: Layout, ln: LineSpec) -> str:
    if ln.kind == "row":
        sym = lay.symbols[ln.cells[0]]
        return f"row {ln.index} ({sym}es)" if sym.endswith("s") else f"row {ln.index} ({sym}s)"
    return f"column {ln.index}"


def score(state: State) -> Breakdown:
    """The score the rules allow, as lines a player can follow.

    One line per row and per column (its best groups, the cells forming them and the point
    boxes they fill), the 2x2 grids at level 3, and the bonus stars.
    """
    return _score(state, solve(state))


def _score(state: State, sol: _Solved) -> Breakdown:
    lay = state.layout
    out: list[Line] = []
    for ln, s in sol.lines:
        used = {k: 0 for k in GROUP_KINDS}
        detail, regions = [], []
        for kind, ci, pos in s.groups:
            box_id, pts = ln.boxes[kind][used[kind]]
            used[kind] += 1
            cells = [lay.cell_ids[ln.cells[p]] for p in pos]
            detail.append({"group": kind, "colour": _colour_name(ci) if kind != "all_colours"
                           else None, "cells": cells, "box": box_id, "points": pts})
            regions += cells + [box_id]
        out.append(Line("rows" if ln.kind == "row" else "columns", _line_title(lay, ln), s.best,
                        tuple(dict.fromkeys(regions)), detail))
    if lay.grid_boxes:
        detail, regions = [], []
        for (ci, cells), (box_id, pts) in zip(sol.grids, lay.grid_boxes):
            ids = [lay.cell_ids[i] for i in cells]
            detail.append({"group": "grid", "colour": PENCIL_COLOURS[ci], "cells": ids,
                           "box": box_id, "points": pts})
            regions += ids + [box_id]
        out.append(Line("grids", "2x2 grids", sum(d["points"] for d in detail), tuple(regions),
                        detail))
    for kind, label in (("all_rows", "bonus: a point box in every row"),
                        ("all_columns", "bonus: a point box in every column"),
                        ("three_grids", "bonus: 3 or more 2x2 grids")):
        if kind in lay.star_bonus:
            sid, pts = lay.star_bonus[kind]
            earned = sol.stars[kind]
            out.append(Line("bonus", label, pts if earned else 0, (sid,) if earned else (),
                            {"earned": earned, "star": sid}))
    return Breakdown(tuple(out))


def _coloured(m: Mark) -> bool:
    return (m in _COLOURED)


def claimed(state: State) -> Breakdown:
    """What the coloured point boxes and stars on the sheet add up to (as the player counts)."""
    lay = state.layout
    box_mark = dict(zip(lay.box_ids, state.boxes))
    out: list[Line] = []
    for ln in lay.lines:
        ids = [b for b in ln.box_ids() if _coloured(box_mark[b])]
        pts = {b: p for k in GROUP_KINDS for b, p in ln.boxes.get(k, ())}
        out.append(Line("rows" if ln.kind == "row" else "columns", _line_title(lay, ln),
                        sum(pts[b] for b in ids), tuple(ids)))
    if lay.grid_boxes:
        ids = [b for b, _ in lay.grid_boxes if _coloured(box_mark[b])]
        out.append(Line("grids", "2x2 grids", sum(p for b, p in lay.grid_boxes if b in ids),
                        tuple(ids)))
    star_mark = dict(zip(lay.star_ids, state.stars))
    for kind, label in (("all_rows", "bonus: a point box in every row"),
                        ("all_columns", "bonus: a point box in every column"),
                        ("three_grids", "bonus: 3 or more 2x2 grids")):
        if kind in lay.star_bonus:
            sid, pts = lay.star_bonus[kind]
            on = _coloured(star_mark[sid])
            out.append(Line("bonus", label, pts if on else 0, (sid,) if on else ()))
    return Breakdown(tuple(out))


# --------------------------------------------------------------------------------------------
# audit: every rule the sheet breaks
# --------------------------------------------------------------------------------------------

def _finding(rule: str, message: str, regions: Iterable[str] = (), effect: int = 0,
             severity: Severity = Severity.VIOLATION, *, text: str | None = None) -> Finding:
    return Finding(rule, message, text or RULE_TEXT[rule], tuple(dict.fromkeys(regions)), effect,
                   severity)


def outline_deficits(state: State) -> tuple[dict[int, int], list[int]]:
    """Per colour index, how many outline obligations have no extra cell to show for them.

    Each coloured cell whose outline matches its colour (or is black) obliges one further cell
    of that colour. With the end state alone the order is unknown, so the honest test is a
    count: obligations of colour c can all be met iff at least one cell of colour c is not
    itself obliged (the chains need a start), i.e. ``cells_c - obliged_c >= 1``.
    Returns ``({colour: missing}, obliged positions)``.
    """
    lay = state.layout
    n = [0] * 5
    ob = [0] * 5
    obliged = []
    for i, m in enumerate(state.cells):
        ci = _CI[m]
        if ci < 0:
            continue
        n[ci] += 1
        o = lay.outlines[i]
        if o == "black" or o == m.value:
            ob[ci] += 1
            obliged.append(i)
    missing = {c: ob[c] - (n[c] - 1) for c in range(5) if ob[c] and ob[c] > n[c] - 1}
    return missing, obliged


def sheet_full(state: State) -> bool:
    return all(m != Mark.EMPTY for m in state.cells)


def audit(state: State) -> Audit:
    """Score, claim and every rule the sheet breaks (a sheet that breaks rules is still scored)."""
    lay = state.layout
    sol = solve(state)
    rules = _score(state, sol)
    claim = claimed(state)
    findings: list[Finding] = []

    # left to right, row by row
    for row in lay.rows:
        marks = [state.cells[i] for i in row.cells]
        if Mark.EMPTY in marks:
            first = marks.index(Mark.EMPTY)
            later = [lay.cell_ids[row.cells[j]] for j in range(first + 1, len(marks))
                     if marks[j] != Mark.EMPTY]
            if later:
                gaps = [lay.cell_ids[row.cells[j]] for j in range(first, len(marks))
                        if marks[j] == Mark.EMPTY and j < max(
                            k for k in range(len(marks)) if marks[k] != Mark.EMPTY)]
                findings.append(_finding(
                    "crypts.left_to_right",
                    f"{_line_title(lay, row)}: {len(later)} symbol(s) coloured after the empty "
                    f"{', '.join(gaps)} (a row is filled from left to right without gaps)",
                    gaps + later))

    # outline extras (a count test; see outline_deficits)
    missing, obliged = outline_deficits(state)
    total_missing = sum(missing.values())
    if total_missing and not (sheet_full(state) and total_missing == 1):
        for ci, k in missing.items():
            cells = [lay.cell_ids[i] for i in obliged if _CI[state.cells[i]] == ci]
            findings.append(_finding(
                "crypts.outline_extra",
                f"{len(cells)} outlined symbol(s) coloured {PENCIL_COLOURS[ci]} oblige as many "
                f"further {PENCIL_COLOURS[ci]} symbols, but only "
                f"{sum(1 for m in state.cells if _CI[m] == ci) - 1} other "
                f"{PENCIL_COLOURS[ci]} symbol(s) can serve: {k} extra symbol(s) missing"
                + (" (a full sheet excuses one: the game ends at the last symbol)"
                   if sheet_full(state) else ""), cells))

    # crossed-out cells
    crossed = [lay.cell_ids[i] for i, m in enumerate(state.cells) if m == Mark.CROSSED]
    if crossed:
        findings.append(_finding(
            "crypts.crossed_cell", f"{len(crossed)} symbol(s) crossed out instead of coloured; "
            f"they count as filled but belong to no colour group", crossed))

    # point boxes, line by line
    box_mark = dict(zip(lay.box_ids, state.boxes))
    rule_lines = {(l.section, l.label): l for l in rules.lines}
    claim_lines = {(l.section, l.label): l for l in claim.lines}
    for ln, s in sol.lines:
        key = ("rows" if ln.kind == "row" else "columns", _line_title(lay, ln))
        c_pts, r_pts = claim_lines[key].points, rule_lines[key].points
        counts = tuple(sum(1 for b, _ in ln.boxes.get(k, ()) if _coloured(box_mark[b]))
                       for k in GROUP_KINDS)
        coloured_ids = [b for b in ln.box_ids() if _coloured(box_mark[b])]
        title = _line_title(lay, ln)
        if not s.allows(counts):  # type: ignore[arg-type]
            over = [f"{c} {k.replace('_', ' ')} box(es) but the symbols form at most "
                    f"{max(v[j] for v in s.frontier)}"
                    for j, (k, c) in enumerate(zip(GROUP_KINDS, counts))
                    if c > max(v[j] for v in s.frontier)]
            why = "; ".join(over) if over else (
                "these groups cannot all be formed without a symbol in two groups")
            findings.append(_finding(
                "crypts.points_unearned",
                f"{title}: boxes coloured for {_describe(counts)}: {why} (the rules allow "
                f"{r_pts} points here: {_describe(s.counts)})", coloured_ids + [lay.cell_ids[i] for i in ln.cells],
                c_pts - r_pts, Severity.CLAIM))
        elif c_pts < r_pts:
            missed = [b for b in rule_lines[key].regions if b in ln.box_ids()
                      and not _coloured(box_mark[b])]
            findings.append(_finding(
                "crypts.points_not_coloured",
                f"{title}: the symbols earn {_describe(s.counts)} ({r_pts} points) but the "
                f"coloured boxes give {c_pts}", list(rule_lines[key].regions) + missed,
                c_pts - r_pts, Severity.CLAIM))

    if lay.grid_boxes:
        got = sum(1 for b, _ in lay.grid_boxes if _coloured(box_mark[b]))
        allowed = len(sol.grids)
        c_pts = claim_lines[("grids", "2x2 grids")].points
        r_pts = rule_lines[("grids", "2x2 grids")].points
        ids = [b for b, _ in lay.grid_boxes if _coloured(box_mark[b])]
        grid_cells = [lay.cell_ids[i] for _, cells in sol.grids for i in cells]
        if got > allowed:
            findings.append(_finding(
                "crypts.points_unearned",
                f"2x2 grids: {got} grid box(es) coloured but only {allowed} colour(s) form a 2x2 "
                f"grid (one grid per colour scores)", ids + grid_cells, c_pts - r_pts,
                Severity.CLAIM))
        elif got < allowed:
            findings.append(_finding(
                "crypts.points_not_coloured",
                f"2x2 grids: {allowed} colour(s) form a 2x2 grid but {got} grid box(es) are "
                f"coloured", grid_cells + [b for b, _ in lay.grid_boxes], c_pts - r_pts,
                Severity.CLAIM))

    star_mark = dict(zip(lay.star_ids, state.stars))
    for kind, what in (("all_rows", "every row"), ("all_columns", "every column"),
                       ("three_grids", "3 or more 2x2 grids")):
        if kind not in lay.star_bonus:
            continue
        sid, pts = lay.star_bonus[kind]
        on, earned = _coloured(star_mark[sid]), sol.stars[kind]
        if on and not earned:
            if kind == "three_grids":
                why = f"only {len(sol.grids)} grid(s) score"
                ev = [sid]
            else:
                group = "row" if kind == "all_rows" else "column"
                empty = [ln for ln, s in sol.lines
                         if ln.kind == group and ln.box_ids() and s.best == 0]
                why = "no point box can be filled in " + ", ".join(ln.label for ln in empty)
                ev = [sid] + [lay.cell_ids[i] for ln in empty for i in ln.cells]
            findings.append(_finding("crypts.bonus_unearned",
                                     f"bonus star {sid} ({what}) coloured but {why}", ev, pts,
                                     Severity.CLAIM, text=_BONUS_TEXT[kind]))
        elif earned and not on:
            findings.append(_finding("crypts.bonus_not_coloured",
                                     f"bonus star {sid} ({what}) is earned but not coloured",
                                     [sid], -pts, Severity.CLAIM,
                                     text=RULE_TEXT["crypts.bonus_not_coloured"] + "; "
                                     + _BONUS_TEXT[kind]))

    if lay.total_id and state.total != Mark.WRITTEN:
        findings.append(_finding("crypts.total_missing",
                                 f"the total field is {state.total.value}: the player did not "
                                 f"write the total ({rules.total} by the rules)", [lay.total_id],
                                 0, Severity.NOTE))
    return Audit(GAME, state.level, rules, claim, tuple(findings))


_GROUP_WORDS = {"pair": ("pair", "pairs"), "triple": ("triple", "triples"),
                "all_colours": ("all-five-colours group", "all-five-colours groups")}


def _describe(counts: Iterable[int]) -> str:
    parts = [f"{c} {_GROUP_WORDS[k][c != 1]}" for k, c in zip(GROUP_KINDS, counts) if c]
    return " + ".join(parts) if parts else "no group"


from scoring.crypts_play import VIOLATIONS, inject_violation, simulate_game  # noqa: E402,F401

__all__ = ["GAME", "Mark", "State", "Layout", "LineSpec", "layout_of", "state_from_marks",
           "state_to_marks", "state_from_json", "state_to_json", "score", "claimed", "audit",
           "solve_line", "simulate_game", "VIOLATIONS", "inject_violation"]
