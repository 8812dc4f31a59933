"""Rules engine for Pick a Pen: Reefs: hand-built states on the house sheets (reefs-1..3), the
rulebook's statements, and property tests over simulated games.

Maps (calibration/templates/DESIGN.md; E entry, c coin, W whirlpool, P propeller, oN.. treasure):

    reefs-1                 reefs-2                 reefs-3
    .. E. .. c. .. E. ..    .. c. E. .. o2 .. E.    E. .. c. o1 .. E. ..
    o1 c. b3 .. g2 .. c.    g2 .. W. p1 c. c. ..    c. P. b2 .. r2 c. g2
    .. c. .. n2 .. r3 E.    E. r2 c. .. b2 W. n2    c. n2 .. P. c. .. E.
    E. .. p2 E. .. c. ..    c. W. .. E. c. p3 ..    r3 .. E. c. .. b3 ..
    b2 g3 .. c. o2 .. p2    c. .. o3 .. W. .. E.    .. o3 .. g3 P. .. c.
    c. .. r2 c. .. p1 E.    p1 b3 .. g3 c. r3 c.    E. c. p2 c. n1 .. p3
    .. n1 E. .. o3 c. n3    E. .. n1 W. c. .. E.    .. P. .. E. c. P. o1

Treasure boxes score 1 3 5 7 10 13 16 (grey slot 5), coin boxes 1 2 3 5 7 9 11 14.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.template import get_template
from scoring import reefs
from scoring.common import Severity
from scoring.reefs_violations import VIOLATION_RULES, violations_for
from sheetcheck.errors import StateError

ROOT = Path(__file__).resolve().parents[1]


def tpl(level):
    return get_template(f"reefs-{level}")


def at(level, kind, space):
    """Region id of the ``kind`` feature on ``space`` (e.g. the treasure on r3c4)."""
    for r in tpl(level).regions:
        if r.kind == kind and r.meaning.get("space") == f"space.{space}" \
                and r.meaning.get("role", "map") == "map":
            return r.id
    raise AssertionError(f"no {kind} on {space}")


def state(level=1, **doc):
    doc.setdefault("written", ["total"])
    return reefs.state_from_json({"game": "pick_a_pen_reefs", "template": f"reefs-{level}", **doc})


def rules_found(audit, severity=None):
    return [f.rule for f in audit.findings
            if f.severity is not Severity.NOTE and (severity is None or f.severity is severity)]


def line(breakdown, section, word):
    return next(l for l in breakdown.lines if l.section == section and word in l.label)


# a legal blue route on reefs-1: entry r1c2, recovers the blue 3 on r2c3
BLUE = {"routes": {"blue": ["r1c2", "r1c3", "r2c3"]}, "treasures": {"treasure.2": "blue"},
        "treasure_boxes": {"blue": 3}}


# --------------------------------------------------------------------------------------------
# legal sheets and the rulebook's statements
# --------------------------------------------------------------------------------------------

def test_legal_route_scores_points_above_last_box():
    s = state(**BLUE)
    a = reefs.audit(s)
    assert rules_found(a) == []
    # "In each row you receive as many points as are shown above the last coloured-in box"
    assert line(a.rules, "treasures", "blue").points == 5
    assert a.rules.total == a.claimed.total == 5
    assert "treasure.2" in line(a.rules, "treasures", "blue").regions


def test_route_need_not_end_on_treasure_and_may_cross_itself():
    # "Your route does not have to end on a treasure to collect it." The route passes r2c3,
    # the neutral 2 on r3c4, crosses itself on r2c3 and ends on the coin r2c2
    s = state(routes={"blue": ["r1c2", "r1c3", "r2c3", "r2c4", "r3c4", "r3c3", "r2c3", "r2c2"]},
              treasures={"treasure.2": "blue", "treasure.4": "blue"},
              treasure_boxes={"blue": 5}, coin_boxes=1)
    a = reefs.audit(s)
    assert rules_found(a) == []
    assert line(a.rules, "treasures", "blue").points == 10      # 3 + neutral 2 = 5 boxes
    assert line(a.rules, "coins", "coin").points == 1


def test_full_row_gives_no_more_points():
    # red from r6c7 recovers the neutral 3 (r7c7) and the red 3 (r3c6): 6 boxes; it crosses
    # the orange treasures on r7c5 and r5c5: "If you connect a route to a treasure of a
    # different colour, nothing happens."
    s = state(routes={"red": ["r6c7", "r7c7", "r7c6", "r7c5", "r6c5", "r5c5", "r4c5", "r3c5",
                              "r3c6"]},
              treasures={"treasure.15": "red", "treasure.5": "red"},
              treasure_boxes={"red": 6}, coin_boxes=1)
    a = reefs.audit(s)
    assert rules_found(a) == []
    assert line(a.rules, "treasures", "red").points == 13


def test_capped_row_credits_track_length():
    s = state(routes={"red": ["r6c7", "r7c7", "r7c6", "r7c5", "r6c5", "r5c5", "r4c5", "r3c5",
                              "r3c6", "r2c6", "r2c5", "r2c4", "r3c4"]},
              treasures={"treasure.15": "red", "treasure.5": "red", "treasure.4": "red"},
              treasure_boxes={"red": 7}, coin_boxes=1)
    a = reefs.audit(s)
    assert rules_found(a) == []                       # 3 + 3 + 2 = 8 boxes, row of 7: full
    assert line(a.rules, "treasures", "red").points == 16
    s8 = state(routes=reefs.state_to_json(s)["routes"],
               treasures={"treasure.15": "red", "treasure.5": "red", "treasure.4": "red"},
               treasure_boxes={"red": 6}, coin_boxes=1)
    a8 = reefs.audit(s8)
    assert "reefs.boxes_count" in rules_found(a8)     # the 7th box was earned but not coloured
    assert a8.difference == 13 - 16


def test_other_colours_treasure_stays_available():
    # orange crosses the blue treasure on r2c3: nothing happens, nothing to colour
    s = state(routes={"orange": ["r1c2", "r1c3", "r2c3", "r2c4"]})
    assert rules_found(reefs.audit(s)) == []
    # later blue reaches it and recovers it
    s2 = state(routes={"orange": ["r1c2", "r1c3", "r2c3", "r2c4"],
                       "blue": ["r4c1", "r3c1", "r3c2", "r3c3", "r2c3"]},
               treasures={"treasure.2": "blue"}, treasure_boxes={"blue": 3}, coin_boxes=1)
    a2 = reefs.audit(s2)
    assert rules_found(a2) == []
    assert a2.rules.total == 5 + 1


def test_each_coin_counts_once_even_when_crossed_twice():
    s = state(routes={"blue": ["r1c2", "r1c3", "r1c4", "r1c5"],
                      "green": ["r1c6", "r2c6", "r2c5", "r2c4", "r1c4"]},
              entries={"entry.1": "blue", "entry.2": "green"},
              treasures={"treasure.3": "green"}, treasure_boxes={"green": 2}, coin_boxes=1)
    a = reefs.audit(s)
    assert rules_found(a) == []
    assert line(a.rules, "coins", "coin").detail["coins"] == [at(1, "coin", "r1c4")]
    bad = state(routes=reefs.state_to_json(s)["routes"], entries={"entry.1": "blue", "entry.2": "green"},
                treasures={"treasure.3": "green"}, treasure_boxes={"green": 2}, coin_boxes=2)
    ab = reefs.audit(bad)
    assert "reefs.coin_boxes_count" in rules_found(ab)
    assert ab.difference == 2 - 1


# --------------------------------------------------------------------------------------------
# every route rule broken once (kept once: the legal sheets above)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("routes,entries,rule", [
    # a branch at r2c3: one line cannot have three ends
    ({"blue": [["r1c2", "r1c3", "r2c3", "r2c4"], ["r2c3", "r3c3"]]}, {"entry.1": "blue"},
     "reefs.branch"),
    # two pieces of blue
    ({"blue": [["r1c2", "r1c3", "r2c3"], ["r3c5", "r4c5"]]}, {"entry.1": "blue"},
     "reefs.one_route"),
    # two entry points coloured blue
    ({"blue": [["r1c2", "r1c3", "r2c3"], ["r4c1", "r4c2"]]}, {"entry.1": "blue", "entry.4": "blue"},
     "reefs.one_route"),
    # back to its own entry point
    ({"blue": ["r1c2", "r1c3", "r2c3", "r2c2", "r1c2"]}, {"entry.1": "blue"}, "reefs.own_entry"),
    # through the entry point on r4c1
    ({"blue": ["r1c2", "r1c1", "r2c1", "r3c1", "r4c1", "r5c1"]}, {"entry.1": "blue"},
     "reefs.other_entry"),
    # not starting at an entry point
    ({"blue": ["r3c3", "r2c3"]}, {}, "reefs.start_at_entry"),
    # starting on an entry point that was not coloured
    ({"blue": ["r1c2", "r1c3", "r2c3"]}, {}, "reefs.start_at_entry"),
    # an entry point coloured with no route
    ({}, {"entry.1": "blue"}, "reefs.start_at_entry"),
])
def test_route_rules(routes, entries, rule):
    s = state(routes=routes, entries=entries)
    found = rules_found(reefs.audit(s))
    assert rule in found
    assert found.count("reefs.branch") == (rule == "reefs.branch")


def test_broken_route_is_still_scored():
    s = state(routes={"blue": [["r1c2", "r1c3", "r2c3", "r2c4"], ["r2c3", "r3c3"]]},
              treasures={"treasure.2": "blue"}, treasure_boxes={"blue": 3})
    a = reefs.audit(s)
    assert rules_found(a) == ["reefs.branch"]
    assert a.rules.total == 5


def test_route_rebuilt_as_trail_from_entry():
    # at r2c3 a greedy walk that turned to r2c2 first would stop with edges left over; the
    # Euler trail (Hierholzer) goes round the loop r2c4-r3c4-r3c3 first
    s = state(routes={"blue": ["r1c2", "r1c3", "r2c3", "r2c4", "r3c4", "r3c3", "r2c3", "r2c2"]})
    r = reefs.route_of(s, "blue")
    assert r.trail[0] == "space.r1c2" and r.trail[-1] == "space.r2c2"
    assert len(r.trail) == 8 and r.problems == ()


# --------------------------------------------------------------------------------------------
# treasures, boxes, coins
# --------------------------------------------------------------------------------------------

def test_treasure_in_wrong_colour():
    s = state(routes={"orange": ["r1c2", "r1c3", "r2c3"]}, treasures={"treasure.2": "orange"})
    a = reefs.audit(s)
    assert rules_found(a) == ["reefs.treasure_colour"]
    assert line(a.rules, "treasures", "orange").points == 0


def test_treasure_coloured_but_not_reached():
    s = state(treasures={"treasure.2": "blue"}, treasure_boxes={"blue": 3})
    a = reefs.audit(s)
    assert set(rules_found(a)) == {"reefs.treasure_not_reached", "reefs.boxes_count"}
    assert a.rules.total == 0 and a.claimed.total == 5
    effects = {f.rule: f.effect for f in a.findings}
    assert effects["reefs.boxes_count"] == 5


def test_treasure_reached_but_not_coloured_is_still_credited():
    s = state(routes={"blue": ["r1c2", "r1c3", "r2c3"]}, treasure_boxes={"blue": 3})
    a = reefs.audit(s)
    assert rules_found(a) == ["reefs.treasure_not_coloured"]
    assert a.rules.total == 5


def test_neutral_treasure_rules():
    red = ["r3c7", "r3c6", "r3c5", "r3c4"]
    ok = state(routes={"red": red}, treasures={"treasure.5": "red", "treasure.4": "red"},
               treasure_boxes={"red": 5})
    a = reefs.audit(ok)
    assert rules_found(a) == []
    assert line(a.rules, "treasures", "red").points == 10     # grey box reached
    wrong = state(routes={"red": red}, treasures={"treasure.5": "red", "treasure.4": "blue"},
                  treasure_boxes={"red": 5, "blue": 2})
    aw = reefs.audit(wrong)
    assert "reefs.treasure_not_reached" in rules_found(aw)
    # the rules credit the neutral treasure to the route that does reach it (ruling R3)
    assert line(aw.rules, "treasures", "red").points == 10
    assert line(aw.rules, "treasures", "blue").points == 0


def test_uncoloured_neutral_credit_is_best_not_greedy():
    # the neutral 2 on r3c4 is reached by red and blue but coloured by neither. Red first (pencil
    # order, the greedy choice) would lift red 6 -> 7 boxes (13 -> 16, +3); blue gets 3 -> 5
    # boxes (5 -> 10, +5). The rules credit the better choice (ruling R3).
    s = state(routes={"red": ["r6c7", "r7c7", "r7c6", "r7c5", "r6c5", "r5c5", "r4c5", "r3c5",
                              "r3c6", "r2c6", "r2c5", "r2c4", "r3c4"],
                      "blue": ["r1c2", "r1c3", "r2c3", "r3c3", "r3c4"]},
              treasures={"treasure.15": "red", "treasure.5": "red", "treasure.2": "blue"},
              treasure_boxes={"red": 6, "blue": 3}, coin_boxes=1)
    a = reefs.audit(s)
    assert line(a.rules, "treasures", "red").points == 13
    assert line(a.rules, "treasures", "blue").points == 10
    assert "treasure.4" in line(a.rules, "treasures", "blue").regions
    assert "reefs.treasure_not_coloured" in rules_found(a)


def test_boxes_left_to_right():
    s = state(**{**BLUE, "treasure_boxes": {"blue": [1, 3, 4]}})
    a = reefs.audit(s)
    assert rules_found(a) == ["reefs.boxes_in_order"]
    assert a.claimed.total == 7 and a.rules.total == 5
    assert sum(f.effect for f in a.findings) == a.difference


def test_more_and_fewer_boxes_than_treasures_give():
    more = reefs.audit(state(**{**BLUE, "treasure_boxes": {"blue": 4}}))
    fewer = reefs.audit(state(**{**BLUE, "treasure_boxes": {"blue": 2}}))
    assert rules_found(more) == rules_found(fewer) == ["reefs.boxes_count"]
    assert more.difference == 2 and fewer.difference == -2
    assert [f.severity for f in more.findings if f.rule == "reefs.boxes_count"] == [Severity.CLAIM]


def test_coin_boxes_left_to_right():
    s = state(routes={"blue": ["r1c2", "r1c3", "r1c4"]}, coin_boxes=[2])
    a = reefs.audit(s)
    assert rules_found(a) == ["reefs.coin_boxes_in_order"]
    assert a.difference == 1


# --------------------------------------------------------------------------------------------
# bonuses and the end of the game
# --------------------------------------------------------------------------------------------

# green through the 8 coins r2c2 r3c2 r1c4 r5c4 r6c4 r7c6 r4c6 r2c7 of reefs-1 (the last coin box
# ends the game), recovering g2 (r2c5) and the neutral 2 (r3c4)
COIN_RUN = ["r1c2", "r2c2", "r3c2", "r3c3", "r3c4", "r2c4", "r1c4", "r1c5", "r2c5", "r3c5",
            "r4c5", "r5c5", "r5c4", "r6c4", "r6c5", "r7c5", "r7c6", "r6c6", "r5c6", "r4c6",
            "r3c6", "r2c6", "r2c7"]


def coin_run(extra=(), **over):
    doc = dict(routes={"green": COIN_RUN + list(extra)},
               treasures={"treasure.3": "green", "treasure.4": "green"},
               treasure_boxes={"green": 4}, coin_boxes=8, stars={"end_coins": "coloured"})
    doc.update(over)
    return state(**doc)


def test_end_of_game_bonus_for_last_coin_box():
    a = reefs.audit(coin_run())
    assert rules_found(a) == []
    assert line(a.rules, "bonus", "end_coins").points == 5
    assert line(a.rules, "coins", "coin").points == 14
    assert a.rules.total == 7 + 14 + 5


def test_end_bonus_not_coloured_is_a_claim():
    a = reefs.audit(coin_run(stars={}))
    assert rules_found(a) == ["reefs.bonus_not_coloured"]
    assert a.difference == -5


def test_played_on_after_the_end():
    # blue also reaches the coin on r6c1: nine coins, so removing green's last move or blue's
    # last move still leaves 8 coins: the game had ended before the sheet's last move
    blue = ["r7c3", "r7c2", "r6c2", "r6c1"]
    a = reefs.audit(coin_run(routes={"green": COIN_RUN, "blue": blue},
                             treasures={"treasure.3": "green", "treasure.4": "green",
                                        "treasure.13": "blue"},
                             treasure_boxes={"green": 4, "blue": 1}))
    assert rules_found(a) == ["reefs.played_past_end"]
    # blue stopping one space short: green's last move can be the one that ended the game
    b = reefs.audit(coin_run(routes={"green": COIN_RUN, "blue": blue[:3]},
                             treasures={"treasure.3": "green", "treasure.4": "green",
                                        "treasure.13": "blue"},
                             treasure_boxes={"green": 4, "blue": 1}))
    assert rules_found(b) == []


GREY_END = dict(
    routes={"blue": ["r1c2", "r1c3", "r2c3", "r3c3", "r3c2", "r4c2", "r5c2", "r5c1"],
            "green": ["r1c6", "r1c5", "r2c5", "r2c4", "r3c4", "r3c3", "r4c3", "r5c3", "r5c2"],
            "orange": ["r7c3", "r7c4", "r7c5", "r6c5", "r5c5"],
            "red": ["r3c7", "r3c6", "r3c5", "r4c5", "r5c5", "r5c4", "r6c4", "r6c3"],
            "purple": ["r6c7", "r7c7", "r7c6", "r6c6", "r5c6", "r5c7"]},
    treasures={"treasure.2": "blue", "treasure.7": "blue", "treasure.3": "green",
               "treasure.4": "green", "treasure.8": "green", "treasure.14": "orange",
               "treasure.9": "orange", "treasure.5": "red", "treasure.11": "red",
               "treasure.10": "purple", "treasure.12": "purple", "treasure.15": "purple"},
    treasure_boxes={"blue": 5, "green": 7, "orange": 5, "red": 5, "purple": 6}, coin_boxes=4,
    stars={"five_by_two": "crossed", "all_boxes": "coloured", "end_grey": "coloured"})


def test_game_ended_by_grey_boxes_in_all_five_colours():
    # every colour reaches its grey box (slot 5); green fills its row (all_boxes, first);
    # another player was first to 2 boxes in every colour (crossed)
    a = reefs.audit(state(**GREY_END))
    assert rules_found(a) == []
    assert line(a.rules, "bonus", "end_grey").points == 5
    assert line(a.rules, "bonus", "all_boxes").points == 5
    assert line(a.rules, "bonus", "five_by_two").points == 0
    assert a.rules.total == 10 + 16 + 10 + 10 + 13 + 5 + 5 + 5
    # green's boxes wrongly left at 4: a claim on the green row; the end condition is judged on
    # the boxes the rules give (R8), so the end star stays earned and the rules total is the same
    short = reefs.audit(state(**{**GREY_END, "treasure_boxes": {**GREY_END["treasure_boxes"],
                                                               "green": 4}}))
    assert rules_found(short) == ["reefs.boxes_count"]
    assert short.difference == 7 - 16
    assert a.rules.total == reefs.score(state(**GREY_END)).total == short.rules.total


def test_first_player_bonus_stars():
    # five_by_two coloured without 2 boxes in every colour
    a = reefs.audit(state(**{**BLUE, "stars": {"five_by_two": "coloured"}}))
    assert rules_found(a) == ["reefs.bonus_unearned"]
    assert a.difference == 5
    # crossed: another player was first; nothing to report whatever the sheet shows
    a = reefs.audit(state(**{**BLUE, "stars": {"five_by_two": "crossed"}}))
    assert rules_found(a) == []


def test_all_boxes_bonus_when_a_row_is_full():
    doc = dict(routes={"red": ["r6c7", "r7c7", "r7c6", "r7c5", "r6c5", "r5c5", "r4c5", "r3c5",
                               "r3c6", "r2c6", "r2c5", "r2c4", "r3c4"]},
               treasures={"treasure.15": "red", "treasure.5": "red", "treasure.4": "red"},
               treasure_boxes={"red": 7}, coin_boxes=1)
    a = reefs.audit(state(**doc, stars={"all_boxes": "coloured"}))
    assert rules_found(a) == []
    assert line(a.rules, "bonus", "all_boxes").points == 5
    n = reefs.audit(state(**doc))
    assert [f.rule for f in n.findings if f.severity is Severity.NOTE] == \
        ["reefs.bonus_first_player_unmarked"]
    assert line(n.rules, "bonus", "all_boxes").points == 0


def test_total_missing_is_a_note():
    a = reefs.audit(state(**{**BLUE, "written": []}))
    assert rules_found(a) == []
    assert [f.rule for f in a.findings] == ["reefs.total_missing"]


# --------------------------------------------------------------------------------------------
# level 2: whirlpools; level 3: propellers
# --------------------------------------------------------------------------------------------

# orange from r1c3 stops on the whirlpool r2c3, then 3 any-steps r2c4 (p1), r1c4, r1c5 (o2)
WHIRL = ["r1c3", "r2c3", "r2c4", "r1c4", "r1c5"]


def test_whirlpool_coloured_by_route_that_stops_there():
    s = state(2, routes={"orange": WHIRL}, whirlpools={"whirlpool.1": "orange"},
              treasures={"treasure.1": "orange"}, treasure_boxes={"orange": 2})
    assert rules_found(reefs.audit(s)) == []


def test_whirlpool_crossed_but_not_coloured():
    s = state(2, routes={"orange": WHIRL}, treasures={"treasure.1": "orange"},
              treasure_boxes={"orange": 2})
    assert rules_found(reefs.audit(s)) == ["reefs.whirlpool_not_coloured"]


def test_whirlpool_in_colour_of_no_route_there():
    s = state(2, routes={"orange": WHIRL}, whirlpools={"whirlpool.1": "red"},
              treasures={"treasure.1": "orange"}, treasure_boxes={"orange": 2})
    assert rules_found(reefs.audit(s)) == ["reefs.whirlpool_colour"]


# blue from r1c1 collects the propeller on r2c2 and recovers b2 on r2c3
PROP = dict(routes={"blue": ["r1c1", "r1c2", "r2c2", "r2c3"]}, treasures={"treasure.2": "blue"},
            treasure_boxes={"blue": 2})


def test_propeller_collected_and_used():
    assert rules_found(reefs.audit(state(3, **PROP, propellers={"rims": 1, "cores": [1]}))) == []


@pytest.mark.parametrize("props,rule", [
    ({"rims": [2]}, "reefs.propeller_order"),
    ({"rims": 2}, "reefs.propeller_count"),
    ({"rims": 0}, "reefs.propeller_count"),
    ({"rims": 1, "cores": [2]}, "reefs.propeller_core"),
])
def test_propeller_rules(props, rule):
    assert rule in rules_found(reefs.audit(state(3, **PROP, propellers=props)))


# --------------------------------------------------------------------------------------------
# state from marks / JSON: errors and round trips
# --------------------------------------------------------------------------------------------

def test_marks_errors_name_region_and_allowed_marks():
    t = tpl(1)
    with pytest.raises(StateError, match=r"'conn\.nowhere': no such region"):
        reefs.state_from_marks(t, {"conn.nowhere": "red"})
    with pytest.raises(StateError, match=r"'treasurebox\.red\.1'.*cannot carry mark 'written'"):
        reefs.state_from_marks(t, {"treasurebox.red.1": "written"})
    with pytest.raises(StateError, match=r"for game 'pick_a_pen_crypts'"):
        reefs.state_from_marks(get_template("crypts-1"), {})


def test_json_errors():
    with pytest.raises(StateError, match=r"no connection between r1c2 and r2c3"):
        state(routes={"blue": ["r1c2", "r2c3"]})
    with pytest.raises(StateError, match=r"level 2 but template 'reefs-1' is level 1"):
        reefs.state_from_json({"game": "pick_a_pen_reefs", "template": "reefs-1", "level": 2})
    with pytest.raises(StateError, match=r"not 'pick_a_pen_reefs'"):
        reefs.state_from_json({"game": "pick_a_pen_crypts", "template": "reefs-1"})
    with pytest.raises(StateError, match=r"unknown key\(s\) in Reefs state: rout"):
        state(rout={})
    with pytest.raises(StateError, match=r"whirlpools: template 'reefs-1' \(level 1\) has none"):
        state(whirlpools={"whirlpool.1": "red"})
    with pytest.raises(StateError, match=r"unknown template 'reefs-9'"):
        reefs.state_from_json({"game": "pick_a_pen_reefs", "template": "reefs-9"})


def test_crossed_box_is_kept_and_noted():
    t = tpl(1)
    s = reefs.state_from_marks(t, {"treasurebox.red.1": "crossed", "total": "written"})
    assert reefs.state_to_marks(s)["treasurebox.red.1"] == "crossed"
    assert [f.rule for f in reefs.audit(s).findings] == ["reefs.crossed_out"]


def test_examples_load_and_score():
    for path in sorted((ROOT / "docs" / "examples").glob("reefs-*.json")):
        doc = json.loads(path.read_text())
        a = reefs.audit(reefs.state_from_json(doc))
        assert a.rules.total == doc["note"]["expected_total"], path.name
        assert sorted(set(rules_found(a))) == sorted(doc["note"]["expected_findings"]), path.name


# --------------------------------------------------------------------------------------------
# property tests over simulated games
# --------------------------------------------------------------------------------------------

GAMES_PER_LEVEL = 350


@pytest.mark.parametrize("level", [1, 2, 3])
def test_simulated_games_are_legal_and_round_trip(level):
    t = tpl(level)
    kinds = violations_for(t)
    missed = []
    for seed in range(GAMES_PER_LEVEL):
        s = reefs.simulate_game(t, seed)
        a = reefs.audit(s)
        assert rules_found(a) == [], (level, seed, [f.message for f in a.findings])
        assert a.rules.total == sum(l.points for l in a.rules.lines)
        assert a.rules.total == a.claimed.total
        assert reefs.state_from_marks(t, reefs.state_to_marks(s)) == s
        assert reefs.state_from_json(json.loads(json.dumps(reefs.state_to_json(s)))) == s
        kind = kinds[seed % len(kinds)]
        try:
            bad = reefs.inject_violation(s, kind, seed)
        except StateError as e:
            assert "cannot inject" in str(e)
            missed.append(kind)
            continue
        # exactly that rule is broken: the injection colours the rest as a careful player would
        assert set(rules_found(reefs.audit(bad))) == {VIOLATION_RULES[kind]}, (level, seed, kind)
        # broken sheets (branches, pieces) round-trip too
        assert reefs.state_from_json(json.loads(json.dumps(reefs.state_to_json(bad)))) == bad
        assert reefs.state_from_marks(t, reefs.state_to_marks(bad)) == bad
    # injection finds room on nearly every sheet
    assert len(missed) < GAMES_PER_LEVEL // 10, missed


def test_simulated_games_vary():
    t = tpl(1)
    states = [reefs.simulate_game(t, seed) for seed in range(60)]
    lengths = {len(s.connections) for s in states}
    totals = {reefs.score(s).total for s in states}
    assert len(lengths) > 15 and len(totals) > 15
    assert any(s.star("end_coins") is reefs.StarMark.COLOURED for s in states)
    assert any(s.star("five_by_two") is reefs.StarMark.CROSSED
               or s.star("all_boxes") is reefs.StarMark.CROSSED for s in states)
    assert reefs.simulate_game(t, 7) == reefs.simulate_game(t, 7)
    l2 = [reefs.simulate_game(tpl(2), seed) for seed in range(20)]
    l3 = [reefs.simulate_game(tpl(3), seed) for seed in range(20)]
    assert sum(len(s.whirlpools) for s in l2) > 10
    assert sum(len(s.rims) for s in l3) > 10 and sum(len(s.cores) for s in l3) > 5
    with pytest.raises(StateError, match="players must be 2-4"):
        reefs.simulate_game(t, 0, players=5)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_every_violation_kind_is_found(level):
    t = tpl(level)
    for kind in violations_for(t):
        hits = 0
        for seed in range(12):
            s = reefs.simulate_game(t, 1000 + seed)
            try:
                bad = reefs.inject_violation(s, kind, np.random.default_rng(seed))
            except StateError:
                continue
            assert set(rules_found(reefs.audit(bad))) == {VIOLATION_RULES[kind]}, (kind, seed)
            hits += 1
        assert hits >= 6, kind


def test_inject_unknown_or_inapplicable_kind():
    s = reefs.simulate_game(tpl(1), 0)
    with pytest.raises(StateError, match="unknown violation kind 'nonsense'"):
        reefs.inject_violation(s, "nonsense", 0)
    with pytest.raises(StateError, match="does not apply to template 'reefs-1'"):
        reefs.inject_violation(s, "propeller_skipped", 0)


def test_benchmark_measures_throughput():
    from sheetcheck.bench.scoring_reefs import measure
    r = measure(8)
    assert r["states"] == 8 and r["with_violation"] >= 1
    assert r["audits_per_s"] > 0 and r["simulated_per_s"] > 0
    with pytest.raises(StateError, match="count must be at least 1"):
        measure(0)


def _replay(t, state, log):
    """Check every logged move against the rulebook, independently of the audit."""
    lay = reefs.layout_of(t)
    used, end, entries, whirl = {}, {}, set(), set()
    pending_whirl = None            # (colour, space): a whirlpool's 3 any-steps may follow
    for m in log:
        c, (kind, k) = m["colour"], m["face"]
        if m["kind"] == "forfeit":
            pending_whirl = None
            continue
        sp = m["spaces"]
        if m["kind"] == "whirlpool":
            assert pending_whirl == (c, sp[0]), m
        elif c in end:
            assert sp[0] == end[c], ("a route continues from its end point", m)
        else:
            e = lay.entry_at.get(sp[0])
            assert e is not None and e not in entries, ("start from a free entry point", m)
            entries.add(e)
        pending_whirl = None
        dirs = set()
        for i, (a, b) in enumerate(zip(sp, sp[1:])):
            cid = lay.conn_by_pair.get(frozenset((a, b)))
            assert cid is not None and cid not in used, ("each connection once", m)
            assert b not in lay.entry_at, ("never onto an entry point", m)
            used[cid] = c
            dirs.add(reefs._step_dir(lay, a, b))
            w = lay.whirlpool_at.get(b)
            if w is not None and w not in whirl:
                assert i == len(sp) - 2, ("a whirlpool stops the route", m)
                whirl.add(w)
                pending_whirl = (c, b)
        steps = len(sp) - 1
        stopped = pending_whirl is not None
        if kind == "any":
            assert steps == k or (stopped and steps < k), m
        else:
            assert len(dirs) == 1, ("straight steps in one direction", m)
            assert (steps >= 4 if kind == "straight_min4" else steps == k) or stopped, m
        end[c] = sp[-1]
    assert used == dict(state.connections)
    assert sum(m["kind"] == "propeller" for m in log) == len(state.cores) <= len(state.rims)


@pytest.mark.parametrize("level", [1, 2, 3])
def test_simulated_moves_follow_the_dice_and_the_map(level):
    from scoring.reefs_sim import play_game
    t = tpl(level)
    kinds = set()
    for seed in range(60):
        s, log = play_game(t, seed)
        assert s == reefs.simulate_game(t, seed)
        _replay(t, s, log)
        kinds |= {m["kind"] for m in log}
    assert {"die", "forfeit"} <= kinds
    assert ("whirlpool" in kinds) == (level == 2) and ("propeller" in kinds) == (level == 3)


def test_hand_typed_nonsense_is_a_clear_error_never_a_crash():
    from hypothesis import given, settings, strategies as st
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2, 9), st.sampled_from(
        ["r1c2", "r1c3", "r2c3", "blue", "red", "coloured", "crossed", "total", "treasure.2",
         "entry.1", "whirlpool.1", "treasurebox.blue.1"]))
    value = st.recursive(leaf, lambda kids: st.lists(kids, max_size=4)
                         | st.dictionaries(st.sampled_from(["blue", "red", "rims", "cores",
                                                            "treasure.2", "entry.1",
                                                            "five_by_two"]), kids, max_size=3),
                         max_leaves=12)
    keys = ["routes", "entries", "treasures", "whirlpools", "treasure_boxes", "coin_boxes",
            "propellers", "stars", "written", "crossed", "level"]

    @settings(max_examples=300, deadline=None)
    @given(st.dictionaries(st.sampled_from(keys), value, max_size=4))
    def check(extra):
        doc = {"game": "pick_a_pen_reefs", "template": "reefs-1", **extra}
        try:
            s = reefs.state_from_json(doc)
        except StateError as e:
            assert str(e)
        else:
            reefs.audit(s)

    check()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_any_reading_the_template_allows_is_scored_and_round_trips(level):
    # the reader can return any mark a region allows, in any combination: never a crash
    from hypothesis import given, settings, strategies as st
    t = tpl(level)
    regions = [r for r in t.regions if r.readable]

    @settings(max_examples=60, deadline=None)
    @given(st.data())
    def check(data):
        marks = {r.id: data.draw(st.sampled_from(r.marks)) if data.draw(st.booleans()) else "empty"
                 for r in regions}
        s = reefs.state_from_marks(t, marks)
        a = reefs.audit(s)
        assert a.rules.total == sum(l.points for l in a.rules.lines) >= 0
        assert reefs.state_from_marks(t, reefs.state_to_marks(s)) == s
        assert reefs.state_from_json(json.loads(json.dumps(reefs.state_to_json(s)))) == s

    check()
