"""Rules engine for Pick a Pen: Reefs, levels 1-3 (rulebook 000, rulings in RULES.md (Reefs)).

The sheet is a square lattice of spaces joined by connections. Each colour draws ONE route from
an entry point; routes reach treasures (recovered in their own colour, or by the first route for
neutral ones), coins, whirlpools (level 2) and propellers (level 3). Everything about the layout
(which spaces, connections, treasures and boxes exist, their values) is read from the template's
regions and ``meaning`` (docs/TEMPLATES.md); nothing here knows one printed sheet.

From the marks alone we see which connections carry which colour, not the order in which they
were drawn: each colour's route is rebuilt as an Euler trail from its entry point
(:func:`route_of`), and the audit says when that is impossible (a branch, two pieces, a return
to the entry point) and rules on what the order would decide (RULES.md (Reefs)).

Public interface: docs/ENGINES.md. The JSON form: docs/STATE_JSON.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping


from calibration.template import PENCIL_COLOURS, Template, get_template
from scoring.common import Audit, Breakdown, Finding, Line, Severity
from sheetcheck.errors import SheetcheckError, StateError

GAME = "pick_a_pen_reefs"
COLOURS: tuple[str, ...] = PENCIL_COLOURS


class StarMark(str, Enum):
    """What a bonus star shows: nothing, the player's colour, or crossed out."""

    EMPTY = "empty"
    COLOURED = "coloured"
    CROSSED = "crossed"


# --------------------------------------------------------------------------------------------
# the layout, read once per template from its regions
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Star:
    id: str
    bonus: str
    points: int
    first_player: bool


@dataclass(frozen=True)
class Layout:
    """The game meaning of one Reefs template, indexed for the engine.

    Space ids are the template's (``space.r1c2``); connections are keyed by id and by their
    (unordered) pair of spaces.
    """

    template_id: str
    level: int | None
    spaces: Mapping[str, tuple[int, int, str | None]]      # id -> (row, col, feature)
    conns: Mapping[str, tuple[str, str, str]]              # id -> (a, b, direction)
    conn_by_pair: Mapping[frozenset, str]
    adjacency: Mapping[str, tuple[tuple[str, str], ...]]   # space -> ((conn id, other space), ...)
    entries: Mapping[str, str]                             # entry id -> space
    entry_at: Mapping[str, str]                            # space -> entry id
    treasures: Mapping[str, tuple[str, str | None, int]]   # id -> (space, colour or None, value)
    treasures_at: Mapping[str, tuple[str, ...]]
    coins: Mapping[str, str]                               # coin id -> space
    coin_at: Mapping[str, str]
    whirlpools: Mapping[str, str]                          # id -> space
    whirlpool_at: Mapping[str, str]
    propellers: Mapping[str, str]                          # map propeller id -> space
    propeller_at: Mapping[str, str]
    rims: tuple[str, ...]                                  # track slot order
    cores: tuple[str, ...]
    tboxes: Mapping[str, tuple[tuple[str, int, bool], ...]]  # colour -> ((id, points, grey), ...)
    tbox_info: Mapping[str, tuple[str, int]]               # box id -> (colour, slot 1..n)
    cboxes: tuple[tuple[str, int], ...]                    # ((id, points), ...) in slot order
    stars: Mapping[str, Star]                              # bonus name -> star
    fields: tuple[str, ...]                                # number field ids

    def grey_needed(self, colour: str) -> int:
        """How many boxes of ``colour`` must be coloured to colour its grey ones (0: none)."""
        greys = [i + 1 for i, (_, _, g) in enumerate(self.tboxes.get(colour, ())) if g]
        return max(greys) if greys else 0


def _slot_sorted(items: Iterable[tuple[int, Any]]) -> list:
    return [x for _, x in sorted(items, key=lambda t: t[0])]


def layout_of(template: Template) -> Layout:
    """Index a Reefs template's regions by game meaning (cached per template object).

    Raises
    ------
    StateError
        if the template is not a Reefs template or its meanings are incomplete.
    """
    if not isinstance(template, Template):
        raise StateError(f"expected a Template, got {type(template).__name__}.",
                         hint="Load one with calibration.template.get_template('reefs-1').")
    if template.game != GAME:
        raise StateError(f"template {template.id!r} is for game {template.game!r}, not {GAME!r}.",
                         hint="Use a Reefs template (reefs-1, reefs-2, reefs-3) with the Reefs engine.")
    cached = template.__dict__.get("_reefs_layout")
    if cached is None:
        cached = _build_layout(template)
        object.__setattr__(template, "_reefs_layout", cached)
    return cached


def _build_layout(t: Template) -> Layout:
    problems: list[str] = []
    spaces, conns, pair, adj = {}, {}, {}, {}
    entries, treasures, coins, whirl, props = {}, {}, {}, {}, {}
    rims, cores, tb, cb, stars, fields = [], [], {}, [], {}, []
    for r in t.regions:
        m = r.meaning
        try:
            if r.kind == "space":
                spaces[r.id] = (int(m["row"]), int(m["col"]), m.get("feature"))
            elif r.kind == "connection":
                conns[r.id] = (m["a"], m["b"], m.get("direction", ""))
            elif r.kind == "entry_point":
                entries[r.id] = m["space"]
            elif r.kind == "treasure":
                treasures[r.id] = (m["space"], m.get("colour"), int(m["value"]))
            elif r.kind == "coin":
                coins[r.id] = m["space"]
            elif r.kind == "whirlpool":
                whirl[r.id] = m["space"]
            elif r.kind == "propeller":
                role = m.get("role", "map")
                if role == "map":
                    props[r.id] = m["space"]
                elif role == "track_rim":
                    rims.append((int(m["slot"]), r.id))
                elif role == "track_core":
                    cores.append((int(m["slot"]), r.id))
            elif r.kind == "box" and m.get("track") == "treasure":
                tb.setdefault(m["colour"], []).append(
                    (int(m["slot"]), (r.id, int(m["points"]), bool(m.get("grey", False)))))
            elif r.kind == "box" and m.get("track") == "coin":
                cb.append((int(m["slot"]), (r.id, int(m["points"]))))
            elif r.kind == "star":
                stars[m["bonus"]] = Star(r.id, m["bonus"], int(m["points"]),
                                         bool(m.get("first_player", False)))
            elif r.kind == "number_field":
                fields.append(r.id)
        except (KeyError, TypeError, ValueError) as e:
            problems.append(f"region {r.id!r} ({r.kind}): meaning lacks or mangles {e}")
    for cid, (a, b, _) in conns.items():
        if a not in spaces or b not in spaces:
            problems.append(f"connection {cid!r} joins {a!r} and {b!r}, which are not both spaces")
            continue
        pair[frozenset((a, b))] = cid
        adj.setdefault(a, []).append((cid, b))
        adj.setdefault(b, []).append((cid, a))
    for name, table in (("entry point", entries), ("coin", coins), ("whirlpool", whirl),
                        ("propeller", props)):
        for rid, s in table.items():
            if s not in spaces:
                problems.append(f"{name} {rid!r} sits on {s!r}, which is not a space")
    if rims and len(rims) != len(cores):
        problems.append(f"propeller track has {len(rims)} rims but {len(cores)} cores")
    if problems:
        raise StateError(f"template {t.id!r} cannot be used by the Reefs engine:\n"
                         + "\n".join(f"  - {p}" for p in problems),
                         hint="Fix the template's region meanings (docs/TEMPLATES.md, Reefs).")

    def index(table):
        out: dict[str, Any] = {}
        for rid, s in table.items():
            out[s] = rid
        return out

    tat: dict[str, list[str]] = {}
    for rid, (s, _, _) in treasures.items():
        tat.setdefault(s, []).append(rid)
    tboxes = {c: tuple(_slot_sorted(v)) for c, v in tb.items()}
    tinfo = {bid: (c, i + 1) for c, boxes in tboxes.items() for i, (bid, _, _) in enumerate(boxes)}
    return Layout(
        template_id=t.id, level=t.level, spaces=spaces, conns=conns, conn_by_pair=pair,
        adjacency={s: tuple(v) for s, v in adj.items()},
        entries=entries, entry_at=index(entries), treasures=treasures,
        treasures_at={s: tuple(v) for s, v in tat.items()},
        coins=coins, coin_at=index(coins), whirlpools=whirl, whirlpool_at=index(whirl),
        propellers=props, propeller_at=index(props),
        rims=tuple(_slot_sorted(rims)), cores=tuple(_slot_sorted(cores)),
        tboxes=tboxes, tbox_info=tinfo, cboxes=tuple(_slot_sorted(cb)), stars=stars,
        fields=tuple(fields))


# --------------------------------------------------------------------------------------------
# state
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class State:
    """What one Reefs sheet shows.

    Every collection is a sorted tuple so that equal sheets compare equal. Colours are pencil
    colour names (``calibration.template.PENCIL_COLOURS``).

    Parameters
    ----------
    template : Template
        The sheet's template (not compared).
    level : int or None
        The template's level.
    connections : tuple of (conn id, colour)
        Coloured connections (the routes).
    entries, treasures, whirlpools : tuple of (region id, colour)
        Coloured entry points, treasures and whirlpools.
    treasure_boxes, coin_boxes : tuple of str
        Ids of the coloured treasure and coin boxes.
    rims, cores : tuple of int
        Propeller track slots (1-based) whose rim / core is coloured (level 3).
    stars : tuple of (bonus name, StarMark)
        Bonus stars that are not empty.
    written : tuple of str
        Number fields (row points, bonus, total) with something written in them.
    crossed : tuple of str
        Regions other than stars that are crossed out (Reefs never asks for that; kept so the
        reading round-trips, counted as not coloured and reported as a note).
    """

    template: Template = field(compare=False, repr=False)
    level: int | None
    connections: tuple[tuple[str, str], ...] = ()
    entries: tuple[tuple[str, str], ...] = ()
    treasures: tuple[tuple[str, str], ...] = ()
    whirlpools: tuple[tuple[str, str], ...] = ()
    treasure_boxes: tuple[str, ...] = ()
    coin_boxes: tuple[str, ...] = ()
    rims: tuple[int, ...] = ()
    cores: tuple[int, ...] = ()
    stars: tuple[tuple[str, StarMark], ...] = ()
    written: tuple[str, ...] = ()
    crossed: tuple[str, ...] = ()

    @property
    def layout(self) -> Layout:
        return layout_of(self.template)

    def star(self, bonus: str) -> StarMark:
        return dict(self.stars).get(bonus, StarMark.EMPTY)

    def route_edges(self, colour: str) -> tuple[str, ...]:
        return tuple(c for c, col in self.connections if col == colour)


def make_state(template: Template, **parts) -> State:
    """Build a :class:`State`, sorting and checking every part against the template.

    Keyword parts as in :class:`State`, each given as any iterable (mappings for the
    ``(id, colour)`` parts and for ``stars``).

    Raises
    ------
    StateError
        for unknown ids, colours that are not pencils, or parts the level does not have.
    """
    lay = layout_of(template)
    problems: list[str] = []

    def pairs(name, known, allowed_colour=None):
        raw = parts.get(name, ())
        items = raw.items() if isinstance(raw, Mapping) else raw
        out = {}
        for item in items:
            if not (isinstance(item, (tuple, list)) and len(item) == 2
                    and isinstance(item[0], str) and isinstance(item[1], str)):
                problems.append(f"{name}: expected (region id, colour) pairs, got {item!r}")
                continue
            rid, col = item
            if rid not in known:
                problems.append(f"{name}: {rid!r} is not a {name[:-1]} of template {template.id!r}")
            elif col not in COLOURS:
                problems.append(f"{name}: {rid!r} has colour {col!r}; allowed: {', '.join(COLOURS)}")
            elif rid in out and out[rid] != col:
                problems.append(f"{name}: {rid!r} given two colours ({out[rid]}, {col})")
            else:
                out[rid] = col
        return tuple(sorted(out.items()))

    conns = pairs("connections", lay.conns)
    entries = pairs("entries", lay.entries)
    treasures = pairs("treasures", lay.treasures)
    whirl = pairs("whirlpools", lay.whirlpools)
    if whirl and not lay.whirlpools:
        problems.append("whirlpools: this level has none")

    def ids(name, known):
        out = set()
        for rid in parts.get(name, ()):
            if not isinstance(rid, str) or rid not in known:
                problems.append(f"{name}: {rid!r} is not one of template {template.id!r}")
                continue
            out.add(rid)
        return tuple(sorted(out))

    tboxes = ids("treasure_boxes", lay.tbox_info)
    cboxes = ids("coin_boxes", {b for b, _ in lay.cboxes})
    written = ids("written", set(lay.fields))
    star_ids = {s.id for s in lay.stars.values()}
    crossed = ids("crossed", {r.id for r in template.regions
                              if "crossed" in r.marks and r.id not in star_ids})

    def slots(name, n):
        out = set()
        for k in parts.get(name, ()):
            if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= n:
                problems.append(f"{name}: slot {k!r} is not 1..{n} (template {template.id!r} "
                                f"has {n} propellers on its track)")
                continue
            out.add(k)
        return tuple(sorted(out))

    rims = slots("rims", len(lay.rims))
    cores = slots("cores", len(lay.cores))
    raw_stars = parts.get("stars", ())
    st = {}
    for bonus, mark in (raw_stars.items() if isinstance(raw_stars, Mapping) else raw_stars):
        if not isinstance(bonus, str) or bonus not in lay.stars:
            problems.append(f"stars: {bonus!r} is not a bonus star of template {template.id!r}; "
                            f"it has {', '.join(sorted(lay.stars))}")
            continue
        try:
            mk = StarMark(mark)
        except (ValueError, TypeError):
            problems.append(f"stars: {bonus!r} is marked {mark!r}; allowed: empty, coloured, crossed")
            continue
        if mk is not StarMark.EMPTY:
            st[bonus] = mk
    if problems:
        raise StateError("invalid Reefs state:\n" + "\n".join(f"  - {p}" for p in problems),
                         hint="See docs/STATE_JSON.md for what a Reefs state holds.")
    return State(template, template.level, conns, entries, treasures, whirl, tboxes, cboxes,
                 rims, cores, tuple(sorted(st.items())), written, crossed)


# --- marks ---------------------------------------------------------------------------------

def state_from_marks(template: Template, marks: Mapping[str, str]) -> State:
    """Build the state from region readings ``{region_id: mark}`` (missing regions are empty).

    Raises
    ------
    StateError
        naming every unknown region, every mark a region cannot carry, and a template of
        another game.
    """
    lay = layout_of(template)
    problems: list[str] = []
    p: dict[str, Any] = {k: {} for k in ("connections", "entries", "treasures", "whirlpools", "stars")}
    p.update({k: [] for k in ("treasure_boxes", "coin_boxes", "rims", "cores", "written",
                              "crossed")})
    rim_slot = {rid: i + 1 for i, rid in enumerate(lay.rims)}
    core_slot = {rid: i + 1 for i, rid in enumerate(lay.cores)}
    star_of = {s.id: s.bonus for s in lay.stars.values()}
    if not isinstance(marks, Mapping):
        raise StateError(f"marks must be a mapping {{region_id: mark}}, got {type(marks).__name__}.")
    for rid, mark in marks.items():
        try:
            reg = template.region(rid)
        except KeyError:
            problems.append(f"{rid!r}: no such region in template {template.id!r}")
            continue
        if mark not in reg.marks:
            problems.append(f"{rid!r} ({reg.kind}) cannot carry mark {mark!r}; allowed: "
                            f"{', '.join(reg.marks)}")
            continue
        if mark == "empty":
            continue
        kind = reg.kind
        colour = mark in COLOURS
        if not reg.readable:
            problems.append(f"{rid!r} ({kind}) is printed structure and carries no mark; got {mark!r}")
        elif kind in ("connection", "entry_point", "treasure", "whirlpool") and colour:
            key = {"connection": "connections", "entry_point": "entries",
                   "treasure": "treasures", "whirlpool": "whirlpools"}[kind]
            p[key][rid] = mark
        elif rid in lay.tbox_info and colour:
            p["treasure_boxes"].append(rid)
        elif kind == "box" and colour:
            p["coin_boxes"].append(rid)
        elif rid in rim_slot and colour:
            p["rims"].append(rim_slot[rid])
        elif rid in core_slot and colour:
            p["cores"].append(core_slot[rid])
        elif rid in star_of and (colour or mark == "crossed"):
            p["stars"][star_of[rid]] = StarMark.CROSSED if mark == "crossed" else StarMark.COLOURED
        elif mark == "crossed" and kind != "number_field":
            p["crossed"].append(rid)
        elif kind == "number_field" and mark == "written":
            p["written"].append(rid)
        elif kind == "swatch":
            continue  # colour calibration swatches are not part of the game
        else:
            allowed = "a pencil colour" + (" or crossed" if kind == "star" else "")
            if kind == "number_field":
                allowed = "written"
            problems.append(f"{rid!r} ({kind}) carries {mark!r}, which means nothing in Reefs; "
                            f"expected empty or {allowed}")
    if problems:
        raise StateError(f"marks do not fit template {template.id!r}:\n"
                         + "\n".join(f"  - {x}" for x in problems),
                         hint="Read the sheet with its own template; marks come from the region's "
                              "'marks' list.")
    return make_state(template, **p)


def _pencil_mark(region, preferred: str | None = None) -> str:
    if preferred and preferred in region.marks:
        return preferred
    for m in region.marks:
        if m in COLOURS:
            return m
    raise StateError(f"region {region.id!r} cannot be coloured (marks {list(region.marks)}).")


def state_to_marks(state: State) -> dict[str, str]:
    """``{region_id: mark}`` for every readable region (boxes and stars in a pencil colour)."""
    t, lay = state.template, state.layout
    out = {r.id: "empty" for r in t.regions if r.readable}
    for rid, col in state.connections + state.entries + state.treasures + state.whirlpools:
        out[rid] = col
    for bid in state.treasure_boxes:
        out[bid] = _pencil_mark(t.region(bid), lay.tbox_info[bid][0])
    for bid in state.coin_boxes:
        out[bid] = _pencil_mark(t.region(bid))
    for k in state.rims:
        out[lay.rims[k - 1]] = _pencil_mark(t.region(lay.rims[k - 1]))
    for k in state.cores:
        out[lay.cores[k - 1]] = _pencil_mark(t.region(lay.cores[k - 1]))
    for bonus, mk in state.stars:
        sid = lay.stars[bonus].id
        out[sid] = "crossed" if mk is StarMark.CROSSED else _pencil_mark(t.region(sid))
    for fid in state.written:
        out[fid] = "written"
    for rid in state.crossed:
        out[rid] = "crossed"
    return out


# --- JSON ----------------------------------------------------------------------------------

def _short(space: str) -> str:
    return space[len("space."):] if space.startswith("space.") else space


def _long(space: str) -> str:
    return space if space.startswith("space.") else "space." + space


def state_to_json(state: State) -> dict:
    """The hand-typed JSON form (docs/STATE_JSON.md). Routes are written as lists of spaces,
    one list per trail, starting at the entry point when there is one."""
    lay = state.layout
    routes = {}
    for c in COLOURS:
        edges = state.route_edges(c)
        if edges:
            start = [lay.entries[e] for e, col in state.entries if col == c]
            routes[c] = [[_short(s) for s in trail] for trail in _trails(lay, edges, start)]
    doc: dict[str, Any] = {"game": GAME, "template": state.template.id, "level": state.level,
                           "routes": routes, "entries": dict(state.entries),
                           "treasures": dict(state.treasures)}
    if lay.whirlpools:
        doc["whirlpools"] = dict(state.whirlpools)
    boxes = {}
    for c in COLOURS:
        slots = sorted(lay.tbox_info[b][1] for b in state.treasure_boxes if lay.tbox_info[b][0] == c)
        boxes[c] = len(slots) if slots == list(range(1, len(slots) + 1)) else slots
    doc["treasure_boxes"] = boxes
    cslot = {b: i + 1 for i, (b, _) in enumerate(lay.cboxes)}
    cs = sorted(cslot[b] for b in state.coin_boxes)
    doc["coin_boxes"] = len(cs) if cs == list(range(1, len(cs) + 1)) else cs
    if lay.rims:
        doc["propellers"] = {"rims": list(state.rims), "cores": list(state.cores)}
    doc["stars"] = {b: m.value for b, m in state.stars}
    doc["written"] = list(state.written)
    if state.crossed:
        doc["crossed"] = list(state.crossed)
    return doc


def state_from_json(doc: Mapping[str, Any], *, template: Template | None = None) -> State:
    """Parse the hand-typed JSON form (docs/STATE_JSON.md).

    Raises
    ------
    StateError
        for a document of another game, an unknown template, a level that does not match the
        template, routes that step between spaces with no connection, and anything
        :func:`make_state` rejects.
    """
    if not isinstance(doc, Mapping):
        raise StateError("a Reefs state must be a JSON object.", hint="See docs/STATE_JSON.md.")
    if doc.get("game") != GAME:
        raise StateError(f"state is for game {doc.get('game')!r}, not {GAME!r}.",
                         hint="Set \"game\": \"pick_a_pen_reefs\" or use the matching engine.")
    known = {"game", "template", "level", "routes", "entries", "treasures", "whirlpools",
             "treasure_boxes", "coin_boxes", "propellers", "stars", "written", "crossed",
             "note"}
    extra = sorted(set(doc) - known)
    if extra:
        raise StateError(f"unknown key(s) in Reefs state: {', '.join(extra)}.",
                         hint=f"Allowed keys: {', '.join(sorted(known))}.")
    if template is None:
        tid = doc.get("template")
        if not isinstance(tid, str):
            raise StateError("a Reefs state needs \"template\": a template id such as \"reefs-1\".")
        try:
            template = get_template(tid)
        except SheetcheckError as e:
            raise StateError(f"state names template {tid!r}: {e}") from None
    lay = layout_of(template)
    if "level" in doc and doc["level"] != template.level:
        raise StateError(f"state says level {doc['level']!r} but template {template.id!r} is "
                         f"level {template.level!r}.", hint="Fix \"level\" or \"template\".")

    def obj(key, default):
        v = doc.get(key, default)
        if not isinstance(v, type(default)):
            raise StateError(f"\"{key}\" must be a JSON {'object' if isinstance(default, dict) else 'list'}, got {v!r}.",
                             hint="See docs/STATE_JSON.md.")
        return v

    conns: dict[str, str] = {}
    for colour, trails in obj("routes", {}).items():
        if colour not in COLOURS:
            raise StateError(f"routes: {colour!r} is not a pencil colour; use {', '.join(COLOURS)}.")
        if not isinstance(trails, list):
            raise StateError(f"routes.{colour}: give the route as a list of spaces like "
                             f"[\"r1c2\", \"r1c3\"], got {trails!r}.")
        if trails and isinstance(trails[0], str):
            trails = [trails]  # one trail may be written without the outer list
        for trail in trails:
            if not isinstance(trail, list) or not all(isinstance(s, str) for s in trail):
                raise StateError(f"routes.{colour}: each trail must be a list of spaces like "
                                 f"[\"r1c1\", \"r1c2\"], got {trail!r}.")
            for a, b in zip(trail, trail[1:]):
                a, b = _long(a), _long(b)
                for s in (a, b):
                    if s not in lay.spaces:
                        raise StateError(f"routes.{colour}: {_short(s)!r} is not a space of "
                                         f"template {template.id!r}.")
                cid = lay.conn_by_pair.get(frozenset((a, b)))
                if cid is None:
                    raise StateError(f"routes.{colour}: no connection between {_short(a)} and "
                                     f"{_short(b)}; a route steps between orthogonal neighbours.")
                if conns.get(cid, colour) != colour:
                    raise StateError(f"routes: connection {_short(a)}-{_short(b)} is given both "
                                     f"{conns[cid]} and {colour}; a connection shows one colour.")
                conns[cid] = colour
    entries = obj("entries", {})
    if "entries" not in doc:
        # hand-typed shorthand: a route that starts on an entry point coloured that entry point
        for colour, trails in obj("routes", {}).items():
            if trails and isinstance(trails[0], str):
                trails = [trails]
            for trail in trails:
                if trail and isinstance(trail[0], str) and _long(trail[0]) in lay.entry_at:
                    entries[lay.entry_at[_long(trail[0])]] = colour

    def box_slots(v, n, where):
        if isinstance(v, int) and not isinstance(v, bool):
            if not 0 <= v <= n:
                raise StateError(f"{where}: {v} boxes, but the track has {n}.")
            return list(range(1, v + 1))
        if isinstance(v, list) and all(isinstance(k, int) and 1 <= k <= n for k in v):
            return v
        raise StateError(f"{where}: give a count (0..{n}) or a list of slots 1..{n}, got {v!r}.")

    tboxes = []
    for colour, v in obj("treasure_boxes", {}).items():
        if colour not in lay.tboxes:
            raise StateError(f"treasure_boxes: no {colour!r} row; rows: {', '.join(lay.tboxes)}.")
        row = lay.tboxes[colour]
        tboxes += [row[k - 1][0] for k in box_slots(v, len(row), f"treasure_boxes.{colour}")]
    cboxes = [lay.cboxes[k - 1][0] for k in box_slots(doc.get("coin_boxes", 0), len(lay.cboxes),
                                                       "coin_boxes")]
    props = obj("propellers", {})
    if props and not lay.rims:
        raise StateError(f"propellers: template {template.id!r} (level {template.level}) has no "
                         "propeller track.")
    rims = box_slots(props.get("rims", 0), len(lay.rims), "propellers.rims")
    cores = box_slots(props.get("cores", 0), len(lay.cores), "propellers.cores")
    whirl = obj("whirlpools", {})
    if whirl and not lay.whirlpools:
        raise StateError(f"whirlpools: template {template.id!r} (level {template.level}) has none.")
    return make_state(template, connections=conns, entries=entries,
                      treasures=obj("treasures", {}), whirlpools=whirl, treasure_boxes=tboxes,
                      coin_boxes=cboxes, rims=rims, cores=cores, stars=obj("stars", {}),
                      written=obj("written", []), crossed=obj("crossed", []))


# --------------------------------------------------------------------------------------------
# routes: rebuild each colour's trail from its connections
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Route:
    """One colour's route as the marks show it.

    ``trail`` is one Euler trail through the coloured connections (spaces in order) when the
    connections form a single trail from the entry point, else ``None``; ``problems`` names
    what stops it (as rule ids with the spaces that show it).
    """

    colour: str
    edges: tuple[str, ...]
    entries: tuple[str, ...]
    spaces: frozenset
    trail: tuple[str, ...] | None
    problems: tuple[tuple[str, str, tuple[str, ...]], ...]


def _graph(lay: Layout, edges: Iterable[str]) -> dict[str, list[tuple[str, str]]]:
    g: dict[str, list[tuple[str, str]]] = {}
    for e in edges:
        a, b, _ = lay.conns[e]
        g.setdefault(a, []).append((e, b))
        g.setdefault(b, []).append((e, a))
    return g


def _euler(g: Mapping[str, list[tuple[str, str]]], start: str) -> list[str]:
    """Hierholzer's walk from ``start`` over every edge of its component (spaces in order)."""
    used: set[str] = set()
    ptr = {v: 0 for v in g}
    stack, out = [start], []
    while stack:
        v = stack[-1]
        nb = g.get(v, [])
        while ptr[v] < len(nb) and nb[ptr[v]][0] in used:
            ptr[v] += 1
        if ptr[v] == len(nb):
            out.append(stack.pop())
        else:
            e, w = nb[ptr[v]]
            used.add(e)
            stack.append(w)
    return out[::-1]


def _components(g: Mapping[str, list[tuple[str, str]]]) -> list[set[str]]:
    seen: set[str] = set()
    comps = []
    for v in g:
        if v in seen:
            continue
        comp, todo = set(), [v]
        while todo:
            x = todo.pop()
            if x in comp:
                continue
            comp.add(x)
            todo.extend(w for _, w in g[x] if w not in comp)
        seen |= comp
        comps.append(comp)
    return comps


def _trails(lay: Layout, edges: Iterable[str], starts: list[str]) -> list[list[str]]:
    """Cover ``edges`` with as few trails as the graph allows (for the JSON form)."""
    g = _graph(lay, edges)
    remaining = {e for e in edges}
    trails = []
    order = [s for s in starts if s in g] + sorted(v for v in g if len(g[v]) % 2) + sorted(g)
    while remaining:
        sub = _graph(lay, remaining)
        start = next(v for v in order if v in sub and (len(sub[v]) % 2 or v in starts)) \
            if any(v in sub and (len(sub[v]) % 2 or v in starts) for v in order) \
            else next(v for v in order if v in sub)
        comp = next(c for c in _components(sub) if start in c)
        odd = [v for v in comp if len(sub[v]) % 2]
        if not odd or (len(odd) == 2 and start in odd):
            trail = _euler(sub, start)
        else:
            # no single trail covers this piece (a branch): walk until stuck, then go again
            trail, v, used = [start], start, set()
            while True:
                nxt = next(((e, w) for e, w in sub[v] if e not in used), None)
                if nxt is None:
                    break
                used.add(nxt[0])
                v = nxt[1]
                trail.append(v)
        trails.append(trail)
        for a, b in zip(trail, trail[1:]):
            remaining.discard(lay.conn_by_pair[frozenset((a, b))])
    return trails


def route_of(state: State, colour: str) -> Route:
    """Rebuild ``colour``'s route and say what keeps it from being one legal trail."""
    lay = state.layout
    edges = state.route_edges(colour)
    ents = tuple(e for e, c in state.entries if c == colour)
    g = _graph(lay, edges)
    spaces = set(g) | {lay.entries[e] for e in ents}
    problems: list[tuple[str, str, tuple[str, ...]]] = []
    if len(ents) > 1:
        problems.append(("reefs.one_route", f"{len(ents)} entry points are coloured {colour}",
                         ents))
    entry_space = lay.entries[ents[0]] if ents else None
    if not edges:
        if ents:
            problems.append(("reefs.start_at_entry", f"entry point {ents[0]} is coloured "
                             f"{colour} but no {colour} connection leaves it", ents))
        return Route(colour, edges, ents, frozenset(spaces), None, tuple(problems))
    comps = _components(g)
    odd = sorted(v for v in g if len(g[v]) % 2)
    if entry_space is None:
        starts = [v for v in odd if v in lay.entry_at]
        why = (f"the {colour} route starts at entry point {lay.entry_at[starts[0]]} but that "
               f"entry point is not coloured" if starts else
               f"the {colour} route does not start at an entry point")
        problems.append(("reefs.start_at_entry", why,
                         tuple(lay.entry_at[s] for s in starts) + edges[:1]))
    elif entry_space not in g:
        problems.append(("reefs.start_at_entry", f"entry point {ents[0]} is coloured {colour} "
                         f"but the {colour} route does not touch it", (ents[0],) + edges[:1]))
    if len(comps) > 1:
        problems.append(("reefs.one_route", f"the {colour} connections form {len(comps)} separate "
                         f"pieces, not one continuous line",
                         tuple(_conn_ids_in(lay, g, c)[0] for c in comps)))
    if any(sum(len(g[v]) % 2 for v in comp) > 2 for comp in comps):
        problems.append(("reefs.branch", f"the {colour} route branches: {len(odd)} spaces end a "
                         f"line ({', '.join(_short(v) for v in odd)}) where a single route has 2",
                         tuple(e for v in odd for e, _ in g[v] if len(g[v]) >= 3)
                         or tuple(e for v in odd for e, _ in g[v])))
    if entry_space in g and len(g[entry_space]) > 1:
        problems.append(("reefs.own_entry", f"the {colour} route returns to its own entry point "
                         f"{ents[0]}", (ents[0],) + tuple(e for e, _ in g[entry_space])))
    if entry_space:
        own = {entry_space}
    else:
        # an uncoloured entry point the route starts from is reported above, not as crossed
        own = {next((v for v in odd if v in lay.entry_at and len(g[v]) == 1), None)}
    for v in sorted(g):
        if v in lay.entry_at and v not in own:
            problems.append(("reefs.other_entry", f"the {colour} route crosses entry point "
                             f"{lay.entry_at[v]}, which is not its own",
                             (lay.entry_at[v],) + tuple(e for e, _ in g[v])))
    trail = None
    if not problems:
        trail = tuple(_euler(g, entry_space))
    return Route(colour, edges, ents, frozenset(spaces), trail, tuple(problems))


def _conn_ids_in(lay, g, comp):
    return sorted({e for v in comp for e, _ in g[v]})


# --------------------------------------------------------------------------------------------
# what the rules give
# --------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Analysis:
    """Everything score, claimed and audit share for one state (computed once)."""

    routes: Mapping[str, Route]
    reached: frozenset                       # spaces on any route
    credited: Mapping[str, str]              # treasure id -> colour the rules credit
    earned: Mapping[str, int]                # colour -> treasure boxes the rules give
    coins_reached: tuple[str, ...]
    coin_earned: int
    props_reached: tuple[str, ...]


def _reach_by_colour(routes: Mapping[str, Route]) -> dict[str, frozenset]:
    return {c: r.spaces if r.edges else frozenset() for c, r in routes.items()}


def analyse(state: State) -> Analysis:
    """Rebuild routes and compute what the rules give (cached on the state)."""
    cached = state.__dict__.get("_analysis")
    if cached is not None:
        return cached
    lay = state.layout
    routes = {c: route_of(state, c) for c in COLOURS}
    reach = _reach_by_colour(routes)
    reached, credited, earned, coins = _credit(lay, dict(state.treasures), reach)
    props = tuple(sorted(pid for pid, s in lay.propellers.items() if s in reached))
    a = Analysis(routes, reached, credited, earned, coins, min(len(coins), len(lay.cboxes)), props)
    object.__setattr__(state, "_analysis", a)
    return a


def _credit(lay: Layout, marked: Mapping[str, str], reach: Mapping[str, frozenset]):
    """(spaces reached, treasure credits, boxes earned per colour, coins reached)."""
    reached = frozenset().union(*reach.values())
    credited: dict[str, str] = {}
    open_neutrals: list[tuple[str, list[str]]] = []
    for tid, (space, tcol, _) in lay.treasures.items():
        if tcol is not None:
            if space in reach[tcol]:
                credited[tid] = tcol
            continue
        m = marked.get(tid)
        if m is not None and space in reach[m]:
            credited[tid] = m
        else:
            by = [c for c in COLOURS if space in reach[c]]
            if by:
                open_neutrals.append((tid, by))
    if open_neutrals:
        credited.update(_best_neutral_credit(lay, credited, open_neutrals))
    earned = _earned(lay, credited)
    coins = tuple(sorted(cid for cid, s in lay.coins.items() if s in reached))
    return reached, credited, earned, coins


def _earned(lay: Layout, credited: Mapping[str, str]) -> dict[str, int]:
    """Treasure boxes per colour the credited treasures give, capped at the row's length."""
    total = {c: 0 for c in lay.tboxes}
    for t, col in credited.items():
        if col in total:
            total[col] += lay.treasures[t][2]
    return {c: min(v, len(lay.tboxes[c])) for c, v in total.items()}


def _best_neutral_credit(lay, credited, open_neutrals, *, limit: int = 4096) -> dict[str, str]:
    """Ruling R3: a neutral treasure that routes reach but nobody coloured goes to the colour
    that gives the most treasure-row points over all such treasures together (the order of
    drawing cannot be seen; the player gets the benefit of the doubt). Ties: pencil order.

    Greedy choice loses when the first colour's row is already full: the exhaustive search
    over the (few) open treasures finds the credit that still earns points.
    """
    import itertools

    def value(assign):
        full = dict(credited)
        full.update(assign)
        earned = _earned(lay, full)
        return sum(_row_points([p for _, p, _ in lay.tboxes[c]], n) for c, n in earned.items())

    combos = 1
    for _, by in open_neutrals:
        combos *= len(by)
    if combos > limit:  # never on a real sheet; keep it bounded
        return {tid: by[0] for tid, by in open_neutrals}
    best, best_v = None, None
    for choice in itertools.product(*(by for _, by in open_neutrals)):
        assign = {tid: c for (tid, _), c in zip(open_neutrals, choice)}
        v = value(assign)
        if best_v is None or v > best_v:
            best, best_v = assign, v
    return best


def _row_points(points: list[int], n: int) -> int:
    return points[n - 1] if n > 0 else 0


def _conditions(lay: Layout, earned: Mapping[str, int], coin_earned: int) -> dict[str, bool]:
    return {
        "five_by_two": all(earned.get(c, 0) >= 2 for c in COLOURS),
        "all_boxes": any(earned.get(c, 0) >= len(row) > 0 for c, row in lay.tboxes.items()),
        "end_grey": all(lay.grey_needed(c) > 0 and earned.get(c, 0) >= lay.grey_needed(c)
                        for c in COLOURS),
        "end_coins": len(lay.cboxes) > 0 and coin_earned >= len(lay.cboxes),
    }


BONUS_TEXT = {
    "five_by_two": "2 treasure boxes coloured in each of the five colours",
    "all_boxes": "all treasure boxes of one colour coloured",
    "end_grey": "the grey treasure boxes coloured in all five colours (ends the game)",
    "end_coins": "the last coin box coloured (ends the game)",
}


def _star_points(state: State, star: Star, condition: bool) -> int:
    """Rules: a first-player star counts when coloured and earned (crossed: another player was
    first); an end-of-game star counts when its condition holds (this sheet ended the game)."""
    if star.first_player:
        return star.points if condition and state.star(star.bonus) is StarMark.COLOURED else 0
    return star.points if condition else 0


def score(state: State) -> Breakdown:
    """The score the rules allow, line by line (treasure rows, coins, bonuses)."""
    lay, a = state.layout, analyse(state)
    lines = []
    for c, row in lay.tboxes.items():
        n = a.earned[c]
        tids = sorted(t for t, col in a.credited.items() if col == c)
        lines.append(Line("treasures", f"{c} treasure boxes ({n} of {len(row)})",
                          _row_points([p for _, p, _ in row], n),
                          tuple(tids) + tuple(b for b, _, _ in row[:n]),
                          {"treasures": {t: lay.treasures[t][2] for t in tids}, "boxes": n,
                           "of": len(row)}))
    n = a.coin_earned
    lines.append(Line("coins", f"coin boxes ({n} of {len(lay.cboxes)})",
                      _row_points([p for _, p in lay.cboxes], n),
                      tuple(a.coins_reached) + tuple(b for b, _ in lay.cboxes[:n]),
                      {"coins": list(a.coins_reached), "boxes": n, "of": len(lay.cboxes)}))
    cond = _conditions(lay, a.earned, a.coin_earned)
    for bonus, star in lay.stars.items():
        pts = _star_points(state, star, cond.get(bonus, False))
        mark = state.star(bonus).value
        lines.append(Line("bonus", f"bonus {bonus}: {BONUS_TEXT.get(bonus, bonus)}", pts,
                          (star.id,), {"condition": cond.get(bonus, False), "star": mark,
                                       "first_player": star.first_player}))
    return Breakdown(tuple(lines))


def claimed(state: State) -> Breakdown:
    """What the marks add up to as the player counts: the points above the last coloured box
    of each row and of the coin track, and every coloured star."""
    lay = state.layout
    coloured = set(state.treasure_boxes)
    lines = []
    for c, row in lay.tboxes.items():
        last = max((i + 1 for i, (b, _, _) in enumerate(row) if b in coloured), default=0)
        lines.append(Line("treasures", f"{c} treasure boxes (last coloured: {last})",
                          _row_points([p for _, p, _ in row], last),
                          tuple(b for b, _, _ in row if b in coloured)))
    cset = set(state.coin_boxes)
    last = max((i + 1 for i, (b, _) in enumerate(lay.cboxes) if b in cset), default=0)
    lines.append(Line("coins", f"coin boxes (last coloured: {last})",
                      _row_points([p for _, p in lay.cboxes], last),
                      tuple(b for b, _ in lay.cboxes if b in cset)))
    for bonus, star in lay.stars.items():
        col = state.star(bonus) is StarMark.COLOURED
        lines.append(Line("bonus", f"bonus {bonus} (star {state.star(bonus).value})",
                          star.points if col else 0, (star.id,)))
    return Breakdown(tuple(lines))


# --------------------------------------------------------------------------------------------
# audit
# --------------------------------------------------------------------------------------------

#: Rule ids and the rulebook sentence (quoted) or ruling (RULES.md (Reefs)) each rests on.
RULE_TEXT: dict[str, str] = {
    "reefs.branch": '"For the whole game, the route of a colour must form one continuous line. '
                    'Branches are not allowed."',
    "reefs.one_route": '"One route per colour: For the whole game, the route of a colour must '
                       'form one continuous line."',
    "reefs.start_at_entry": '"If you have not yet drawn a single step in your chosen colour on '
                            'your score sheet, you start from any free entry point. Colour in the '
                            'entry point and then trace one connection between two spaces for '
                            'each step."',
    "reefs.own_entry": '"it may not return to its own entry point or cross another entry point."',
    "reefs.other_entry": '"it may not return to its own entry point or cross another entry point."',
    "reefs.treasure_colour": '"If you connect a route to a treasure of a different colour, '
                             'nothing happens. You cannot recover the treasure, but it remains '
                             'available for the matching colour."',
    "reefs.treasure_not_reached": '"If you connect a route to a treasure of the same colour, you '
                                  'recover it." / neutral: "If you cross such a treasure with a '
                                  'route of any colour for the first time, you recover the '
                                  'treasure." (a treasure no route of its colour reaches is not '
                                  'recovered)',
    "reefs.treasure_not_coloured": '"If you connect a route to a treasure of the same colour, '
                                   'you recover it. Colour in both the treasure and the '
                                   'corresponding treasure boxes"',
    "reefs.boxes_in_order": '"Note that you must colour them in in order from left to right, '
                            'without skipping any treasure box."',
    "reefs.boxes_count": '"Colour in as many treasure boxes as the number on the treasure '
                         'indicates." and "If you have already coloured in all treasure boxes of '
                         'a colour, you receive no further points for recovered treasures in '
                         'that colour."',
    "reefs.coin_boxes_in_order": '"Then colour in one coin box on the right side of your score '
                                 'sheet. Here too, colour them in in order from left to right."',
    "reefs.coin_boxes_count": '"If you connect a route of any colour to a space showing a coin, '
                              'you collect it. Then colour in one coin box [...] You can collect '
                              'each coin only once."',
    "reefs.whirlpool_not_coloured": '"If you cross a space with a whirlpool with a route of any '
                                    'colour, you must stop on this space and colour in the '
                                    'whirlpool."',
    "reefs.whirlpool_colour": '"If you cross a space with a whirlpool with a route of any colour, '
                              'you must stop on this space and colour in the whirlpool." (ruling '
                              'R6: in the colour of that route)',
    "reefs.propeller_order": '"Always colour in the propellers in order from left to right."',
    "reefs.propeller_count": '"If you cross a space with a propeller with a route of any colour, '
                             'colour in the outer rim of the first propeller [...] Each propeller '
                             'can be collected only once."',
    "reefs.propeller_core": '"completely colour in a propeller of which only the outer rim is '
                            'coloured. Collected propellers can be used only once."',
    "reefs.bonus_unearned": '"If you fulfil one of the conditions for scoring points, colour in '
                            'the corresponding point box or the corresponding bonus point star"',
    "reefs.bonus_not_coloured": '"End of the game bonus: If you fulfil one of the two conditions '
                                'that end the game, colour in the corresponding bonus point star."',
    "reefs.bonus_first_player_unmarked": '"When someone receives bonus points, all other players '
                                         'should cross out that bonus point star." (ruling R8)',
    "reefs.played_past_end": '"The game ends immediately when someone fulfils a condition marked '
                             'with a red exclamation mark." (ruling R9)',
    "reefs.crossed_out": '"When someone receives bonus points, all other players should cross '
                         'out that bonus point star." (only stars are crossed out in Reefs; '
                         'ruling R10)',
    "reefs.total_missing": '"Add up all points and write the total score in the large white space '
                           'at the bottom right."',
}


def _finding(rule, message, regions=(), effect=0, severity=Severity.VIOLATION) -> Finding:
    return Finding(rule, message, RULE_TEXT[rule], tuple(regions), int(effect), severity)


def _prefix_problem(slots: list[int]) -> list[int]:
    """Slots missing before the last coloured one (empty list: coloured left to right)."""
    return [k for k in range(1, max(slots, default=0) + 1) if k not in set(slots)]


def audit(state: State) -> Audit:
    """Score by the rules, what the marks claim, and every rule the sheet breaks."""
    lay, a = state.layout, analyse(state)
    rules, claim = score(state), claimed(state)
    f: list[Finding] = []
    for c in COLOURS:
        for rule, msg, regs in a.routes[c].problems:
            f.append(_finding(rule, msg, regs))
    reach = _reach_by_colour(a.routes)
    marked = dict(state.treasures)
    for tid, (space, tcol, value) in lay.treasures.items():
        m = marked.get(tid)
        what = f"{tcol} treasure {tid}" if tcol else f"neutral treasure {tid}"
        if m is not None and tcol is not None and m != tcol:
            f.append(_finding("reefs.treasure_colour", f"{what} is coloured {m}; only a {tcol} "
                              f"route recovers it", (tid,)))
        elif m is not None and space not in reach[m]:
            f.append(_finding("reefs.treasure_not_reached", f"{what} is coloured {m} but the {m} "
                              f"route does not reach it", (tid,)))
        elif m is None and tid in a.credited:
            f.append(_finding("reefs.treasure_not_coloured", f"{what} is reached by the "
                              f"{a.credited[tid]} route (recovered, worth {value}) but not "
                              f"coloured", (tid,), severity=Severity.CLAIM))
    rline = {l.label.split()[0]: l for l in rules.lines if l.section == "treasures"}
    cline = {l.label.split()[0]: l for l in claim.lines if l.section == "treasures"}
    coloured = set(state.treasure_boxes)
    for c, row in lay.tboxes.items():
        slots = [i + 1 for i, (b, _, _) in enumerate(row) if b in coloured]
        effect = cline[c].points - rline[c].points
        gaps = _prefix_problem(slots)
        n = a.earned[c]
        if len(slots) != n:
            more = len(slots) > n
            f.append(_finding("reefs.boxes_count", f"{len(slots)} {c} treasure boxes are coloured "
                              f"but the recovered {c} treasures give {n}"
                              + (" (the row is full)" if n == len(row) else ""),
                              tuple(b for b, _, _ in (row[n:len(slots)] if more else row[len(slots):n]))
                              or tuple(b for b, _, _ in row if b in coloured), effect,
                              Severity.CLAIM))
            effect = 0
        if gaps:
            f.append(_finding("reefs.boxes_in_order", f"{c} treasure boxes {gaps} are skipped: "
                              f"boxes are coloured left to right", tuple(row[k - 1][0] for k in gaps),
                              effect))
    cset = set(state.coin_boxes)
    slots = [i + 1 for i, (b, _) in enumerate(lay.cboxes) if b in cset]
    effect = claim.lines[len(lay.tboxes)].points - rules.lines[len(lay.tboxes)].points
    gaps, n = _prefix_problem(slots), a.coin_earned
    if len(slots) != n:
        f.append(_finding("reefs.coin_boxes_count", f"{len(slots)} coin boxes are coloured but the "
                          f"routes reach {len(a.coins_reached)} coin(s), which give {n}",
                          tuple(a.coins_reached) + tuple(b for b, _ in lay.cboxes if b in cset),
                          effect, Severity.CLAIM))
        effect = 0
    if gaps:
        f.append(_finding("reefs.coin_boxes_in_order", f"coin boxes {gaps} are skipped: boxes are "
                          f"coloured left to right", tuple(lay.cboxes[k - 1][0] for k in gaps),
                          effect))
    wmark = dict(state.whirlpools)
    for wid, space in lay.whirlpools.items():
        m = wmark.get(wid)
        if m is not None and space not in reach[m]:
            f.append(_finding("reefs.whirlpool_colour", f"whirlpool {wid} is coloured {m} but the "
                              f"{m} route does not reach it", (wid,)))
        elif m is None and space in a.reached:
            by = [c for c in COLOURS if space in reach[c]]
            f.append(_finding("reefs.whirlpool_not_coloured", f"the {', '.join(by)} route(s) cross "
                              f"whirlpool {wid} but it is not coloured", (wid,)))
    if lay.rims:
        rims, cores = list(state.rims), set(state.cores)
        want = min(len(a.props_reached), len(lay.rims))
        gaps = _prefix_problem(rims)
        if gaps:
            f.append(_finding("reefs.propeller_order", f"propeller rims {gaps} are skipped: "
                              "propellers are collected left to right",
                              tuple(lay.rims[k - 1] for k in gaps)))
        if len(rims) != want:
            f.append(_finding("reefs.propeller_count", f"{len(rims)} propeller rims are coloured "
                              f"but the routes cross {len(a.props_reached)} propeller space(s)",
                              tuple(a.props_reached) + tuple(lay.rims[k - 1] for k in rims)))
        for k in sorted(cores - set(rims)):
            f.append(_finding("reefs.propeller_core", f"propeller {k} is used (core coloured) but "
                              f"was never collected (rim empty)", (lay.cores[k - 1],)))
    cond = _conditions(lay, a.earned, a.coin_earned)
    for bonus, star in lay.stars.items():
        mk, ok = state.star(bonus), cond.get(bonus, False)
        if mk is StarMark.COLOURED and not ok:
            f.append(_finding("reefs.bonus_unearned", f"bonus star {bonus} is coloured but its "
                              f"condition ({BONUS_TEXT.get(bonus, bonus)}) does not hold",
                              (star.id,), star.points, Severity.CLAIM))
        elif ok and mk is not StarMark.COLOURED and not star.first_player:
            f.append(_finding("reefs.bonus_not_coloured", f"this sheet ended the game "
                              f"({BONUS_TEXT.get(bonus, bonus)}) but bonus star {bonus} is not "
                              f"coloured", (star.id,), -star.points, Severity.CLAIM))
        elif ok and mk is StarMark.EMPTY and star.first_player:
            f.append(_finding("reefs.bonus_first_player_unmarked", f"the condition of bonus star "
                              f"{bonus} holds but the star is neither coloured (first) nor crossed "
                              f"out (another player was first); it is not counted",
                              (star.id,), 0, Severity.NOTE))
    if cond["end_grey"] or cond["end_coins"]:
        if all(not r.problems for r in a.routes.values()) and not _last_move_ends(state):
            f.append(_finding("reefs.played_past_end", "the game-end condition would still hold "
                              "without any single last move: the sheet was played on after the "
                              "game had ended", tuple(s.id for b, s in lay.stars.items()
                                                      if b in ("end_grey", "end_coins"))))
    for rid in state.crossed:
        f.append(_finding("reefs.crossed_out", f"{rid} is crossed out; Reefs only crosses out "
                          "bonus stars, so it counts as not coloured", (rid,), 0, Severity.NOTE))
    tot = next((fid for fid in lay.fields if fid == "total"), None)
    if tot and tot not in state.written:
        f.append(_finding("reefs.total_missing", "the total is not written", (tot,), 0,
                          Severity.NOTE))
    return Audit(GAME, state.level, rules, claim, tuple(f))


# --- the last move: could one move of one colour have ended the game? ----------------------

_DIRS = {(0, 1), (0, -1), (1, 0), (-1, 0)}


def _step_dir(lay: Layout, a: str, b: str) -> tuple[int, int]:
    ra, ca, _ = lay.spaces[a]
    rb, cb, _ = lay.spaces[b]
    return (rb - ra, cb - ca)


def _single_moves(lay, g, end, banned):
    """Backward walks from ``end`` that one die result could have drawn: up to 3 any-steps
    (also a propeller's 3 any-steps) or a straight run of any length (2/3/4+ straight, or one
    cut short by a whirlpool). Yields (edges, start space)."""
    def any_walk(v, path, depth):
        if path:
            yield list(path), v
        if depth == 3:
            return
        for e, w in g.get(v, ()):
            if e not in banned and e not in path:
                path.append(e)
                yield from any_walk(w, path, depth + 1)
                path.pop()
    yield from any_walk(end, [], 0)
    for e, w in g.get(end, ()):
        if e in banned:
            continue
        d = _step_dir(lay, end, w)
        path, v = [e], w
        yield list(path), v
        while True:
            nxt = next(((e2, w2) for e2, w2 in g.get(v, ()) if e2 not in banned and e2 not in path
                        and _step_dir(lay, v, w2) == d), None)
            if nxt is None:
                break
            path.append(nxt[0])
            v = nxt[1]
            yield list(path), v


def _valid_prefix(lay, edges: set, entry: str, start: str) -> bool:
    if not edges:
        return start == entry
    g = _graph(lay, edges)
    if entry not in g or start not in g or len(g[entry]) != 1:
        return False
    if len(_components(g)) != 1:
        return False
    odd = {v for v in g if len(g[v]) % 2}
    return odd == {entry, start} if start != entry else False


def _last_move_ends(state: State) -> bool:
    """True when removing some single legal last move of one colour makes the end-of-game
    conditions false (ruling R9: then the sheet did not play on after the end)."""
    lay = state.layout
    a = analyse(state)
    wmark = dict(state.whirlpools)
    reach = _reach_by_colour(a.routes)
    marked = dict(state.treasures)
    for c in COLOURS:
        r = a.routes[c]
        if not r.edges or r.trail is None:
            continue
        g = _graph(lay, r.edges)
        entry = r.trail[0]
        end = r.trail[-1]
        cands: list = []

        def extend(tail, at, depth):
            # a whirlpool's 3 any-steps belong to the move that stopped on it (ruling R6), and
            # those steps may stop on a further whirlpool: follow such chains a few deep
            for w, s in _single_moves(lay, g, at, set(tail)):
                cands.append((tail + w, s))
                # (the 3 steps may themselves be cut short by a further whirlpool, so any
                # walk of up to 3 steps back to a whirlpool of this colour can be such a tail)
                if (depth < 5 and len(w) <= 3 and s in lay.whirlpool_at
                        and wmark.get(lay.whirlpool_at[s]) == c):
                    extend(tail + w, s, depth + 1)

        extend([], end, 0)
        all_edges = set(r.edges)
        for w, s in cands:
            rest = all_edges - set(w)
            if not _valid_prefix(lay, rest, entry, s):
                continue
            # only colour c changes: recount with its shorter reach, the others as they are
            reach2 = dict(reach)
            reach2[c] = frozenset(_graph(lay, rest)) | {entry} if rest else frozenset()
            _, _, earned, coins = _credit(lay, marked, reach2)
            cond = _conditions(lay, earned, min(len(coins), len(lay.cboxes)))
            if not (cond["end_grey"] or cond["end_coins"]):
                return True
    return False


# --------------------------------------------------------------------------------------------
# simulation and labelled violations (separate modules, re-exported: docs/ENGINES.md)
# --------------------------------------------------------------------------------------------

def simulate_game(template: Template, seed: int, *, players: int | None = None,
                  write_total: bool = True) -> State:
    """Play one whole legal game turn by turn; see :mod:`scoring.reefs_sim`."""
    from scoring.reefs_sim import simulate_game as _sim
    return _sim(template, seed, players=players, write_total=write_total)


def inject_violation(state: State, kind: str, rng) -> State:
    """A copy of ``state`` breaking the rule named ``kind``; see :mod:`scoring.reefs_violations`."""
    from scoring.reefs_violations import inject_violation as _inject
    return _inject(state, kind, rng)


#: Violation kinds :func:`inject_violation` can make (scoring.reefs_violations.VIOLATION_RULES
#: maps each to the rule id the audit reports).
VIOLATIONS: tuple[str, ...] = (
    "branch", "two_routes", "other_entry", "own_entry", "entry_not_coloured",
    "treasure_wrong_colour", "treasure_not_reached", "treasure_not_coloured",
    "treasure_boxes_skipped", "treasure_boxes_extra", "coin_boxes_wrong", "bonus_unearned",
    "whirlpool_not_coloured", "whirlpool_wrong_colour", "propeller_skipped",
    "propeller_core_without_rim")
