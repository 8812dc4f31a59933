"""Rules engine for Pick a Pen: Crypts: exact line scoring, state forms, every audit rule
broken once and kept once, the rulebook's worked statements, and properties over simulated
games (legal games are clean, injected violations are found, forms round-trip)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from calibration.template import get_template
from scoring import crypts
from scoring.common import Severity
from scoring.crypts import Mark, audit, claimed, score, solve_line, state_from_json, state_to_json
from scoring.crypts_play import VIOLATION_RULE, VIOLATIONS, inject_violation, settle, simulate_game
from sheetcheck.errors import StateError

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"
O, R, B, G, P = range(5)
_ = -1
L1_ROW = ((2, 2, 2), (), ())          # level 1 row: three pair boxes
L2_ROW = ((2, 2), (3,), (5,))         # level 2-3 row: 2 pairs, a triple, all five colours
L2_COL = ((2,), (3,), (5,))           # level 2-3 column


def T(level: int):
    return get_template(f"crypts-{level}")


def sheet(level: int, grid: list[str], boxes: dict | None = None, total: str = "written",
          *, careful: bool = False):
    """A state from a grid of letters (short rows are padded with empties)."""
    lay = crypts.layout_of(T(level))
    full = [g.replace(" ", "").ljust(len(row.cells), ".") for g, row in zip(grid, lay.rows)]
    full += ["." * len(row.cells) for row in lay.rows[len(full):]]
    st = state_from_json({"game": crypts.GAME, "template": f"crypts-{level}", "grid": full,
                          "boxes": boxes or {}, "total": total})
    return settle(st, random.Random(0)) if careful else st


def rules_of(state) -> set[str]:
    return {f.rule for f in audit(state).findings}


def line(bd, label):
    return next(l for l in bd.lines if l.label == label)


# --------------------------------------------------------------------------------------------
# one line, solved exactly
# --------------------------------------------------------------------------------------------

def test_four_in_a_row_is_two_pairs():
    # rulebook: "4 consecutive symbols in the same color count as two groups of 2"
    s = solve_line((R, R, R, R, _, _, _, _), L1_ROW)
    assert s.best == 4 and s.counts == (2, 0, 0)
    assert [g[2] for g in s.groups] == [(0, 1), (2, 3)]


def test_no_space_in_two_groups():
    # three reds hold one pair, not two overlapping pairs
    assert solve_line((R, R, R, _, _, _, _, _), L1_ROW).best == 2
    # six of one colour: three pairs, limited by the three printed boxes
    assert solve_line((B,) * 8, L1_ROW).best == 6


def test_greedy_triple_loses_to_two_pairs():
    # pairs (2+2) beat a triple (3) on four reds when the line also has a triple box
    s = solve_line((R, R, R, R, _, _, _, _), L2_ROW)
    assert s.best == 4 and s.counts == (2, 0, 0)


def test_greedy_triple_loses_to_pair_plus_all_colours():
    # r r r b g p o: a triple of reds would leave no red for "all five colours" (3 points);
    # a pair of reds and the third red in the all-colours group gives 2 + 5
    s = solve_line((R, R, R, B, G, P, O, _), L2_ROW)
    assert s.best == 7 and s.counts == (1, 0, 1)
    cells = [set(g[2]) for g in s.groups]
    assert all(a.isdisjoint(b) for i, a in enumerate(cells) for b in cells[i + 1:])


def test_all_colours_must_not_take_the_pairs_cell():
    # o o r b g p o: all-colours must take the LAST orange so the first two form a pair
    s = solve_line((O, O, R, B, G, P, O, _), L2_ROW)
    assert s.best == 7
    allc = next(g for g in s.groups if g[0] == "all_colours")
    assert 6 in allc[2] and 0 not in allc[2] and 1 not in allc[2]
    # with only one orange to spare the pair and all five colours exclude each other
    assert solve_line((O, O, R, B, G, P, _, _), L2_ROW).best == 5


def test_run_of_five_prefers_pair_and_triple():
    s = solve_line((G,) * 5 + (_,) * 3, L2_ROW)
    assert s.best == 5 and s.counts == (1, 1, 0)


def test_empty_and_crossed_cells_break_runs():
    assert solve_line((R, _, R, _, _, _, _, _), L1_ROW).best == 0
    assert solve_line((), L1_ROW).best == 0


def test_frontier_says_which_claims_are_legal():
    s = solve_line((R, R, R, B, G, P, O, _), L2_ROW)
    assert s.allows((1, 0, 1)) and s.allows((0, 1, 0)) and s.allows((2, 0, 0)) is False
    assert not s.allows((0, 1, 1))  # the triple and all five colours would share a red


# --------------------------------------------------------------------------------------------
# state forms
# --------------------------------------------------------------------------------------------

def test_state_from_marks_rejects_unknown_region_and_bad_mark():
    t = T(1)
    with pytest.raises(StateError, match=r"'cell\.r9\.c1' is not a readable region"):
        crypts.state_from_marks(t, {"cell.r9.c1": "red"})
    with pytest.raises(StateError, match=r"'cell\.r1\.c1' cannot be 'written'; allowed: empty"):
        crypts.state_from_marks(t, {"cell.r1.c1": "written"})


def test_state_from_marks_rejects_another_games_template():
    with pytest.raises(StateError, match="is for game 'pick_a_pen_reefs'"):
        crypts.state_from_marks(get_template("reefs-1"), {})


def test_state_json_errors_name_every_problem():
    doc = {"game": crypts.GAME, "template": "crypts-1",
           "grid": ["orz.....", "or", "........", "........", "........"],
           "boxes": {"points.row9.1": "r", "bonus.rows": "pink"}, "total": "maybe"}
    with pytest.raises(StateError, match="5 problems") as ei:
        state_from_json(doc)
    msg = str(ei.value)
    assert "letter 'z'" in msg and "has 2 cells; the row has 8" in msg
    assert "'points.row9.1' is not a point box" in msg and "'pink'" in msg
    assert "\"total\" must be" in msg


def test_state_json_wrong_game_level_or_template():
    with pytest.raises(StateError, match="not 'pick_a_pen_crypts'"):
        state_from_json({"game": "pick_a_pen_reefs", "template": "crypts-1"})
    with pytest.raises(StateError, match="unknown template 'crypts-9'"):
        state_from_json({"game": crypts.GAME, "template": "crypts-9", "grid": []})
    # a level-2 grid (6 rows) typed against the level-1 sheet (5 rows)
    with pytest.raises(StateError, match="has 6 rows; template 'crypts-1' has 5"):
        state_from_json({"game": crypts.GAME, "template": "crypts-1", "grid": ["." * 8] * 6})


def test_json_grid_accepts_spaces_and_round_trips():
    st = sheet(2, ["oo rr bb .."], {"points.row1.1": "orange"})
    doc = state_to_json(st)
    assert doc["grid"][0] == "oorrbb.." and doc["boxes"] == {"points.row1.1": "o"}
    assert state_from_json(json.loads(json.dumps(doc))) == st


# --------------------------------------------------------------------------------------------
# audit: each rule broken once and kept once (hand-built sheets)
# --------------------------------------------------------------------------------------------

def test_left_to_right_kept_and_broken():
    assert "crypts.left_to_right" not in rules_of(sheet(1, ["rb", "g"]))
    st = sheet(1, ["r.b", "g"])
    f = next(f for f in audit(st).findings if f.rule == "crypts.left_to_right")
    assert f.regions == ("cell.r1.c2", "cell.r1.c3") and "from left to right" in f.rule_text


def test_outline_extra_kept_and_broken():
    # crypts-1: cell.r1.c3 has an orange outline
    assert crypts.layout_of(T(1)).outlines[2] == "orange"
    broken = sheet(1, ["rbo"])
    f = next(f for f in audit(broken).findings if f.rule == "crypts.outline_extra")
    assert f.regions == ("cell.r1.c3",) and "1 extra symbol(s) missing" in f.message
    assert "crypts.outline_extra" not in rules_of(sheet(1, ["rbo", "o"]))
    # colouring the outlined symbol in another colour obliges nothing
    assert "crypts.outline_extra" not in rules_of(sheet(1, ["rbr"]))


def test_black_outline_obliges_any_colour_at_level_3():
    lay = crypts.layout_of(T(3))
    assert lay.outlines[lay.cell_ids.index("cell.r2.c1")] == "black"
    assert "crypts.outline_extra" in rules_of(sheet(3, ["", "g"]))
    assert "crypts.outline_extra" not in rules_of(sheet(3, ["g", "g"]))


def test_outline_chain_needs_one_more_than_obligations():
    # two orange-outlined symbols coloured orange: one more orange can serve only one of them
    assert "crypts.outline_extra" in rules_of(sheet(1, ["rbo", "", "", "rbgo"]))
    assert "crypts.outline_extra" not in rules_of(sheet(1, ["rbo", "o", "", "rbgo"]))


def test_full_sheet_excuses_one_missing_extra():
    # every symbol coloured: the game ended on the last one, whose extra cannot follow
    grid = ["rbo" + "r" * 5, "b" * 8, "g" * 8, "rbgo" + "b" * 4, "b" * 8]
    assert crypts.outline_deficits(sheet(1, grid))[0] == {O: 1}
    assert "crypts.outline_extra" not in rules_of(sheet(1, grid, careful=True))


def test_point_box_unearned_and_not_coloured():
    ok = sheet(1, ["rr"], {"points.row1.1": "red"})
    assert not {"crypts.points_unearned", "crypts.points_not_coloured"} & rules_of(ok)
    unearned = sheet(1, ["rb"], {"points.row1.1": "red"})
    f = next(f for f in audit(unearned).findings if f.rule == "crypts.points_unearned")
    assert f.effect == 2 and f.severity is Severity.CLAIM and "points.row1.1" in f.regions
    missed = sheet(1, ["rr"])
    f = next(f for f in audit(missed).findings if f.rule == "crypts.points_not_coloured")
    assert f.effect == -2 and "points.row1.1" in f.regions and "cell.r1.c1" in f.regions


def test_point_boxes_that_would_share_a_cell_are_unearned():
    # level 2 row: r r r b g p o earns pair + all colours (7) or a triple, never triple + all
    grid = ["rrrbgpo"]
    bad = sheet(2, grid, {"points.row1.3": "r", "points.row1.4": "o"})
    f = next(f for f in audit(bad).findings if f.rule == "crypts.points_unearned")
    assert "without a symbol in two groups" in f.message and f.effect == 8 - 7
    good = sheet(2, grid, {"points.row1.1": "r", "points.row1.4": "o"})
    assert "crypts.points_unearned" not in rules_of(good)
    assert line(score(good), "row 1 (circles)").points == 7


def test_bonus_stars_kept_and_broken():
    grid = ["oorrbbgg"] * 5  # every row and every column holds pairs
    good = sheet(1, grid, careful=True)
    assert good.mark("bonus.rows").is_colour and good.mark("bonus.columns").is_colour
    assert audit(good).findings == ()
    missed = good.with_marks({"bonus.rows": "empty"})
    f = next(f for f in audit(missed).findings if f.rule == "crypts.bonus_not_coloured")
    assert f.effect == -5 and f.regions == ("bonus.rows",)
    # row 5 holds no pair: the row star is not earned
    thin = sheet(1, grid[:4] + ["orbgporb"], careful=True)
    assert not thin.mark("bonus.rows").is_colour
    f = next(f for f in audit(thin.with_marks({"bonus.rows": "red"})).findings
             if f.rule == "crypts.bonus_unearned")
    assert f.effect == 5 and "row 5" in f.message


def test_grids_once_per_colour_and_bonus_at_level_3():
    # two separate orange 2x2 grids score once ("a grid only once in each color")
    st = sheet(3, ["oo.oo", "oo.oo"], careful=True)
    assert line(score(st), "2x2 grids").points == 7
    # three colours of grids: 21 points and the 10-point bonus
    three = sheet(3, ["oorrbb", "oorrbb"], careful=True)
    assert line(score(three), "2x2 grids").points == 21
    assert line(score(three), "bonus: 3 or more 2x2 grids").points == 10
    assert not {"crypts.points_unearned", "crypts.points_not_coloured",
                "crypts.bonus_unearned", "crypts.bonus_not_coloured"} & rules_of(three)
    no_box = three.with_marks({"points.grid.3": "empty"})
    assert "crypts.points_not_coloured" in rules_of(no_box)
    extra_star = st.with_marks({"bonus.grids": "red"})
    assert "crypts.bonus_unearned" in rules_of(extra_star)


def test_crossed_cell_is_void_but_filled():
    st = sheet(1, ["rxr"])
    a = audit(st)
    assert {f.rule for f in a.findings} == {"crypts.crossed_cell"}
    assert line(a.rules, "row 1 (circles)").points == 0  # the cross splits r . r
    assert "crypts.crossed_cell" not in rules_of(sheet(1, ["rrr"], careful=True))


def test_total_missing_is_a_note():
    f = next(f for f in audit(sheet(1, ["r"], total="empty")).findings
             if f.rule == "crypts.total_missing")
    assert f.severity is Severity.NOTE and f.regions == ("total",)
    assert "crypts.total_missing" not in rules_of(sheet(1, ["r"]))


def test_effects_explain_the_difference():
    st = sheet(2, ["rrrbgpo", "gg"], {"points.row1.3": "r", "points.row1.4": "o",
                                      "bonus.rows": "b"})
    a = audit(st)
    assert a.difference == sum(f.effect for f in a.findings) != 0


def test_breakdown_lines_show_groups_cells_and_boxes():
    bd = score(sheet(2, ["rrrbgpo"]))
    row1 = line(bd, "row 1 (circles)")
    assert row1.points == sum(d["points"] for d in row1.detail) == 7
    pair = next(d for d in row1.detail if d["group"] == "pair")
    assert pair["colour"] == "red" and pair["box"] == "points.row1.1"
    assert {"cell.r1.c1", "points.row1.4"} <= set(row1.regions)
    assert claimed(sheet(2, ["rrrbgpo"])).total == 0


# --------------------------------------------------------------------------------------------
# simulate, inject, round trips: properties over many games
# --------------------------------------------------------------------------------------------

def test_simulated_games_are_legal_and_round_trip():
    fills = []
    for seed in range(1002):
        level = 1 + seed % 3
        st = simulate_game(T(level), seed)
        a = audit(st)
        assert a.findings == (), (level, seed, a.findings)
        assert a.claimed.total == a.rules.total
        for ln in a.rules.lines:
            if isinstance(ln.detail, list):
                assert ln.points == sum(d["points"] for d in ln.detail)
        assert crypts.state_from_marks(st.template, crypts.state_to_marks(st)) == st
        assert state_from_json(json.loads(json.dumps(state_to_json(st)))) == st
        fills.append(sum(m != Mark.EMPTY for m in st.cells) / len(st.cells))
    # another player ends most games; our own full sheet ends some
    assert min(fills) < 0.45 and sum(f == 1.0 for f in fills) > 50


def test_simulate_is_deterministic_and_checks_players():
    assert simulate_game(T(2), 7) == simulate_game(T(2), 7)
    assert simulate_game(T(2), 7) != simulate_game(T(2), 8)
    with pytest.raises(StateError, match="players must be 2-4, got 5"):
        simulate_game(T(1), 0, players=5)


def test_simulated_play_uses_the_pencil_row_and_outline_extras():
    used_pencil = 0
    for seed in range(40):
        st = simulate_game(T(2), seed)
        row6 = crypts.layout_of(st.template).pencil_row
        used_pencil += any(st.cells[i].is_colour for i in row6.cells)
    assert used_pencil > 30


def test_every_injected_violation_is_found():
    found = {k: 0 for k in VIOLATIONS}
    for seed in range(150):
        st = simulate_game(T(1 + seed % 3), seed)
        rng = random.Random(seed)
        for kind in VIOLATIONS:
            try:
                bad = inject_violation(st, kind, rng)
            except StateError as e:
                # only the bonus kinds can be impossible (no star earned / every star earned)
                assert kind.startswith("bonus_"), (seed, kind, e)
                continue
            rules = rules_of(bad)
            assert VIOLATION_RULE[kind] in rules
            serious = {f.rule for f in audit(bad).findings if f.severity is not Severity.NOTE}
            assert serious <= {VIOLATION_RULE[kind]}
            found[kind] += 1
    assert all(n >= 20 for n in found.values()), found


def test_inject_unknown_kind():
    with pytest.raises(StateError, match="unknown Crypts violation 'nonsense'"):
        inject_violation(simulate_game(T(1), 0), "nonsense", random.Random(0))


# --------------------------------------------------------------------------------------------
# the shipped examples
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("crypts-*.json")), ids=lambda p: p.name)
def test_examples_load_and_match_their_expectation(path):
    doc = json.loads(path.read_text(encoding="utf-8"))
    a = audit(state_from_json(doc))
    expect = doc["note"]
    assert f"rules total {a.rules.total}, claimed {a.claimed.total};" in expect
    listed = expect.rsplit("findings: ", 1)[1].rstrip(".")
    assert sorted({f.rule for f in a.findings}) == ([] if listed == "none" else listed.split(", "))


def _replay(template, log, state):
    """Check a simulated game's log move by move against the rulebook, independently."""
    lay = crypts.layout_of(template)
    meaning = {r.id: r.meaning for r in template.regions if r.id.startswith("cell.")}
    rows: dict[int, list[str]] = {}
    for cid in lay.cell_ids:
        rows.setdefault(meaning[cid]["row"], []).append(cid)
    for r in rows:
        rows[r].sort(key=lambda c: meaning[c]["col"])
    row_of_symbol = {meaning[c[0]]["symbol"]: r for r, c in rows.items()}
    filled: dict[str, str] = {}

    def next_free(r):
        return next((c for c in rows[r] if c not in filled), None)

    owed, seats, pencils, ended = None, [], [], False
    events = iter(log)
    for e in events:
        assert not ended, "events after the end of the game"
        if e["event"] == "roll":
            assert not pencils and owed is None
            pencils = list(e["pencils"])
            assert sorted(c for c, _ in pencils) == sorted(crypts.PENCIL_COLOURS)
        elif e["event"] == "pick":
            assert owed is None, "a pick before an owed extra symbol"
            pencils.remove((e["pencil"], e["face"]))  # only a pencil on the table
            seats.append(e["player"])
            current = e if e["player"] == "us" else None
        elif e["event"] == "colour":
            cid, colour = e["cell"], e["colour"]
            r = meaning[cid]["row"]
            assert next_free(r) == cid, f"{cid} skips a symbol (left to right)"
            if e["extra"]:
                assert owed == colour, f"extra {cid} not owed in {colour}"
            else:
                assert owed is None and current is not None and current["pencil"] == colour
                face = current["face"]
                own = row_of_symbol.get(face)
                if face != "joker" and own is not None and next_free(own) is not None:
                    allowed = {next_free(own)}
                    if "pencil" in row_of_symbol and next_free(row_of_symbol["pencil"]):
                        allowed.add(next_free(row_of_symbol["pencil"]))
                    assert cid in allowed, f"{face} pencil coloured {cid}"
            filled[cid] = colour
            outline = meaning[cid]["outline"]
            owed = colour if outline in ("black", colour) else None
        elif e["event"] == "end":
            full = len(filled) == len(lay.cell_ids)
            assert (e["by"] == "us") == full
            ended = True
    assert ended
    # a full sheet may end with an extra still owed ("the game ends immediately")
    assert owed is None or len(filled) == len(lay.cell_ids)
    # picks go round the table in turn
    n = len(set(seats))
    assert 2 <= n <= 4 and all(seats[i] == seats[i + n] for i in range(len(seats) - n))
    got = {cid: m.value for cid, m in zip(lay.cell_ids, state.cells) if m != Mark.EMPTY}
    assert got == filled


@pytest.mark.parametrize("level", [1, 2, 3])
def test_simulated_games_replay_legally_move_by_move(level):
    for seed in range(60):
        log: list = []
        st = simulate_game(T(level), seed, log=log)
        _replay(T(level), log, st)


def test_replay_catches_a_skipped_extra_and_a_skipped_symbol():
    log: list = []
    st = simulate_game(T(3), 3, log=log)
    k = next(i for i, e in enumerate(log) if e["event"] == "colour" and e["extra"])
    with pytest.raises(AssertionError, match="a pick before an owed extra|skips a symbol"):
        _replay(T(3), log[:k] + log[k + 1:], st)
    k = next(i for i, e in enumerate(log) if e["event"] == "colour" and not e["extra"])
    with pytest.raises(AssertionError, match="skips a symbol"):
        _replay(T(3), log[:k] + log[k + 1:], st)


def test_bench_measures_throughput():
    from sheetcheck.bench.scoring_crypts import measure
    r = measure(9)
    assert r["states"] == 9 and r["audit_per_s"] > 0 and r["simulate_per_s"] > 0
    assert r["mean_total"] > 0


# --------------------------------------------------------------------------------------------
# the DP against an independent brute force
# --------------------------------------------------------------------------------------------

def _brute_force(colours, caps):
    """Every set of pairwise disjoint groups within the box counts: (best value, counts seen)."""
    from itertools import combinations
    n = len(colours)
    cands = [("pair", (i, i + 1)) for i in range(n - 1)
             if colours[i] >= 0 and colours[i] == colours[i + 1]]
    cands += [("triple", (i, i + 1, i + 2)) for i in range(n - 2)
              if colours[i] >= 0 and colours[i] == colours[i + 1] == colours[i + 2]]
    cands += [("all_colours", c) for c in combinations(range(n), 5)
              if sorted(colours[i] for i in c) == [0, 1, 2, 3, 4]]
    kinds = ("pair", "triple", "all_colours")
    best = 0
    seen = set()

    def walk(k, used, counts):
        nonlocal best
        seen.add(counts)
        best = max(best, sum(sum(caps[j][:counts[j]]) for j in range(3)))
        for m in range(k, len(cands)):
            kind, cells = cands[m]
            j = kinds.index(kind)
            if counts[j] < len(caps[j]) and used.isdisjoint(cells):
                walk(m + 1, used | set(cells), counts[:j] + (counts[j] + 1,) + counts[j + 1:])

    walk(0, frozenset(), (0, 0, 0))
    return best, seen


from hypothesis import given, settings, strategies as st  # noqa: E402


@settings(max_examples=250, deadline=None)
@given(st.lists(st.sampled_from([-1, 0, 0, 1, 1, 2, 3, 4]), min_size=0, max_size=8),
       st.sampled_from([L1_ROW, L2_ROW, L2_COL, ((2,), (), ()), ((2, 2, 2), (3, 3), (5, 5))]))
def test_line_solver_matches_brute_force(colours, caps):
    s = solve_line(tuple(colours), caps)
    from itertools import product
    best, seen = _brute_force(colours, caps)
    assert s.best == best
    for v in product(*(range(len(c) + 1) for c in caps)):
        assert s.allows(v) == (v in seen), v
    cells = [c for g in s.groups for c in g[2]]
    assert len(cells) == len(set(cells))  # no symbol in two groups
    assert s.allows(s.counts)


def test_marion_28_points_and_10_bonus_make_38():
    # rulebook: "Marion has scored points in every row ... likewise ... in every column ...
    # Marion now has 28 points and 10 bonus points, so her total score is 38 points."
    grid = ["oorbgpor",   # rows 1 and 2 alike: a pair in every column (8 x 2 = 16)
            "oorbgpor",   # and a pair in each of these rows (2 + 2)
            "bbogrorb",   # one pair (2)
            "ggbrobgp",   # one pair (2)
            "rrgopobb"]   # two pairs (4)
    st = sheet(1, grid, careful=True)
    a = audit(st)
    lines = sum(l.points for l in a.rules.lines if l.section in ("rows", "columns"))
    bonus = sum(l.points for l in a.rules.lines if l.section == "bonus")
    assert (lines, bonus, a.rules.total) == (28, 10, 38)
    assert a.findings == () and a.claimed.total == 38


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 3), st.randoms(use_true_random=False))
def test_random_marks_round_trip_and_effects_explain_the_difference(level, rnd):
    # arbitrary (mostly illegal) sheets: the forms round-trip and the audit stays consistent
    t = T(level)
    marks = {r.id: rnd.choice(r.marks) for r in t.regions if r.readable}
    s = crypts.state_from_marks(t, marks)
    assert crypts.state_from_marks(t, crypts.state_to_marks(s)) == s
    assert state_from_json(state_to_json(s)) == s
    a = audit(s)
    assert a.difference == sum(f.effect for f in a.findings)
    for f in a.findings:
        assert f.rule in crypts.RULE_TEXT and f.rule_text.startswith("\"")
        assert all(t.region(r) for r in f.regions)
