"""Report and verdict logic on real game states (rules engines' simulated games)."""

import json

import numpy as np
import pytest

from calibration.template import get_template
from scoring.registry import engine_for
from sheetcheck.errors import StateError
from sheetcheck.report import (FORMAT, RegionRead, Verdict, build_report, format_text,
                               parse_fixes)


def _game(tid, seed=3):
    t = get_template(tid)
    e = engine_for(t.game)
    return t, e, e.simulate_game(t, seed=seed)


def _reads(marks, uncertain=None):
    uncertain = uncertain or {}
    return {rid: RegionRead(m, 0.95 if rid in uncertain else 0.999, rid in uncertain,
                            tuple(uncertain.get(rid, ())))
            for rid, m in marks.items()}


@pytest.mark.parametrize("tid", ["crypts-1", "crypts-2", "crypts-3"])
def test_legal_game_is_ok(tid):
    t, e, st = _game(tid)
    r = build_report(t, _reads(e.state_to_marks(st)))
    assert r.verdict is Verdict.OK and r.exit_code == 0
    assert r.rules_total == r.claimed_total == e.score(st).total > 0
    assert r.differences == () and r.review == ()


@pytest.mark.parametrize("kind,effect_sign", [("points_unearned", 1), ("points_not_coloured", -1),
                                               ("bonus_unearned", 1), ("gap_in_row", 0),
                                               ("crossed_cell", 0)])
def test_injected_violation_is_a_discrepancy(kind, effect_sign):
    t, e, st = _game("crypts-3")
    bad = e.inject_violation(st, kind, np.random.default_rng(0))
    r = build_report(t, _reads(e.state_to_marks(bad)))
    assert r.verdict is Verdict.DISCREPANCY and r.exit_code == 3
    assert np.sign(r.claimed_total - r.rules_total) == effect_sign
    assert r.rule_findings, "a discrepancy names the rule it rests on"
    if effect_sign:
        # what differs and by how much: the lines add up to the difference
        assert sum(d.delta for d in r.differences) == r.claimed_total - r.rules_total != 0
    text = format_text(r)
    assert "DISCREPANCY" in text and r.rule_findings[0].rule in text


def test_note_only_finding_stays_ok():
    t, e, st = _game("crypts-1")
    bad = e.inject_violation(st, "total_missing", np.random.default_rng(0))
    r = build_report(t, _reads(e.state_to_marks(bad)))
    assert r.audit.findings and r.verdict is Verdict.OK


def _coloured_point_box(t, marks):
    return next(rid for rid in sorted(marks) if rid.startswith("points.") and marks[rid] != "empty")


def test_uncertain_region_that_matters_needs_review():
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    r = build_report(t, _reads(marks, {box: [("empty", 0.3)]}))
    assert r.verdict is Verdict.NEEDS_REVIEW and r.exit_code == 4
    assert [u.region for u in r.review] == [box]
    alt = r.review[0].alternatives[0]
    assert alt.mark == "empty" and "claimed" in alt.changes
    assert alt.claimed_total < r.claimed_total
    assert box in format_text(r)


def test_uncertain_region_that_does_not_matter_is_listed_not_flagged():
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    sw = next(rid for rid in marks if rid.startswith("swatch."))
    colour = sw.split(".")[1]
    marks[sw] = colour
    other = "empty"
    r = build_report(t, _reads(marks, {sw: [(other, 0.4)]}))
    assert r.verdict is Verdict.OK
    assert r.review == () and [u.region for u in r.did_not_matter] == [sw]
    assert "uncertain but did not matter" in format_text(r)


def test_matters_iff_an_alternative_moves_a_total_or_the_verdict():
    """Every region uncertain with its best wrong reading: flagged exactly when re-scoring moves."""
    t, e, st = _game("crypts-1", seed=5)
    marks = e.state_to_marks(st)
    base = e.audit(e.state_from_marks(t, marks))
    unc = {}
    for rid in list(marks)[::3]:
        alt = next(m for m in t.region(rid).marks if m != marks[rid])
        unc[rid] = [(alt, 0.2)]
    r = build_report(t, _reads(marks, unc))
    flagged = {u.region for u in r.review}
    assert flagged and r.did_not_matter  # both ways occur on a real sheet
    for rid, [(alt, _)] in unc.items():
        a = e.audit(e.state_from_marks(t, {**marks, rid: alt}))
        moved = (a.rules.total != base.rules.total or a.claimed.total != base.claimed.total
                 or _rules_broken(a) != _rules_broken(base))
        assert (rid in flagged) == moved, rid


def _rules_broken(a):
    return {f.rule for f in a.findings if f.severity.value != "note"}


@pytest.mark.parametrize("tid", ["crypts-1", "reefs-1"])
def test_regions_that_matter_only_together_are_reviewed(tid):
    """Two misreadings that are each harmless alone but move the score together."""
    t, e, st = _game(tid)
    marks = e.state_to_marks(st)
    base = e.audit(e.state_from_marks(t, marks))

    def key(a):
        return a.rules.total, a.claimed.total, _rules_broken(a)

    quiet = []
    for rid in sorted(marks):
        for alt in t.region(rid).marks:
            if alt != marks[rid] and key(e.audit(e.state_from_marks(t, {**marks, rid: alt}))) == key(base):
                quiet.append((rid, alt))
                break
    pair = next(((a, b) for i, a in enumerate(quiet) for b in quiet[i + 1:i + 40]
                 if key(e.audit(e.state_from_marks(t, {**marks, a[0]: a[1], b[0]: b[1]}))) != key(base)),
                None)
    assert pair is not None, "no such pair on this sheet: choose another seed"
    (r1, m1), (r2, m2) = pair
    r = build_report(t, _reads(marks, {r1: [(m1, 0.3)], r2: [(m2, 0.3)]}))
    assert all(not a.changes for u in r.uncertain for a in u.alternatives)  # harmless alone
    assert {u.region for u in r.review} == {r1, r2} and r.verdict is Verdict.NEEDS_REVIEW
    assert all(u.together for u in r.review)

    # with more quiet uncertain regions around, only a minimal group is put up for review
    extra = []
    for rid, alt in quiet:
        if rid in (r1, r2):
            continue
        trial = {**marks, **{x: a for x, a in extra}, rid: alt}
        if key(e.audit(e.state_from_marks(t, trial))) == key(base):
            extra.append((rid, alt))
        if len(extra) == 6:
            break
    unc = {rid: [(alt, 0.3)] for rid, alt in [(r1, m1), (r2, m2)] + extra}
    r = build_report(t, _reads(marks, unc))
    flagged = {u.region for u in r.review}
    assert r.verdict is Verdict.NEEDS_REVIEW and 2 <= len(flagged) < len(unc)
    assert {u.region for u in r.did_not_matter} == set(unc) - flagged


def test_no_alternatives_given_tries_every_allowed_mark():
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    r = build_report(t, _reads(marks, {box: []}))
    tried = {a.mark for a in r.uncertain[0].alternatives}
    assert tried == set(t.region(box).marks) - {marks[box]}
    assert r.verdict is Verdict.NEEDS_REVIEW


def test_corrections_replace_readings_and_are_recorded():
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    read_wrong = {**marks, box: "empty"}   # the reader missed a coloured box ...
    r0 = build_report(t, _reads(read_wrong, {box: [(marks[box], 0.4)]}))
    assert r0.verdict is Verdict.NEEDS_REVIEW
    r = build_report(t, _reads(read_wrong, {box: [(marks[box], 0.4)]}),
                     fixes=[f"{box}={marks[box]}"])          # ... and a person fixed it
    assert r.verdict is Verdict.OK and r.uncertain == ()
    assert [(c.region, c.read, c.mark) for c in r.corrections] == [(box, "empty", marks[box])]
    doc = r.to_json()
    assert doc["corrections"] == [{"region": box, "read": "empty", "mark": marks[box]}]
    assert doc["readings"][box] == {"mark": marks[box], "read": "empty", "confidence": 0.95,
                                    "review": True, "alternatives": [[marks[box], 0.4]]}


def test_bad_corrections_are_clear_errors_listing_every_problem():
    t = get_template("crypts-1")
    with pytest.raises(StateError, match=r"no region 'cell\.r9\.c9'.*cannot carry 'pink'"):
        parse_fixes(["cell.r9.c9=red", "cell.r1.c1=pink"], t)
    with pytest.raises(StateError, match="is not REGION=MARK"):
        parse_fixes(["cell.r1.c1"], t)
    with pytest.raises(StateError, match="corrected twice"):
        parse_fixes(["cell.r1.c1=red", "cell.r1.c1=blue"], t)


def test_json_is_versioned_and_serialisable():
    t, e, st = _game("crypts-3")
    bad = e.inject_violation(st, "points_unearned", np.random.default_rng(1))
    r = build_report(t, _reads(e.state_to_marks(bad)), photo={"name": "x.jpg"})
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["format"] == FORMAT == "sheetcheck.report/1"
    assert doc["verdict"] == "DISCREPANCY" and doc["exit_code"] == 3
    assert doc["total"]["difference"] == doc["total"]["claimed"] - doc["total"]["rules"] > 0
    assert doc["template"]["id"] == "crypts-3" and doc["findings"][0]["severity"] == "claim"
    assert set(doc["readings"]) == set(e.state_to_marks(bad))


@pytest.mark.parametrize("tid", ["reefs-1", "reefs-2", "reefs-3"])
def test_reefs_legal_game_ok_and_violations_are_discrepancies(tid):
    t, e, st = _game(tid)
    marks = e.state_to_marks(st)
    assert build_report(t, _reads(marks)).verdict is Verdict.OK
    for kind, sign in (("branch", 0), ("bonus_unearned", 1), ("treasure_boxes_extra", 1)):
        bad = e.inject_violation(st, kind, np.random.default_rng(0))
        r = build_report(t, _reads(e.state_to_marks(bad)))
        assert r.verdict is Verdict.DISCREPANCY, kind
        assert np.sign(r.audit.difference) == sign, kind


def test_reefs_uncertain_connection_matters():
    t, e, st = _game("reefs-2")
    marks = e.state_to_marks(st)
    conn = next(rid for rid in sorted(marks) if rid.startswith("conn.") and marks[rid] != "empty")
    r = build_report(t, _reads(marks, {conn: [("empty", 0.45)]}))
    assert r.verdict is Verdict.NEEDS_REVIEW and [u.region for u in r.review] == [conn]


def test_report_json_round_trips_the_readings():
    from sheetcheck.report import reads_from_json
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    reads = _reads(marks, {box: [("empty", 0.3), ("red", 0.05)]})
    doc = json.loads(json.dumps(build_report(t, reads).to_json()))
    back = reads_from_json(doc)
    assert back[box] == reads[box] and {k: v.mark for k, v in back.items()} == marks
    assert build_report(t, back).to_json()["review"] == doc["review"]


def test_low_confidence_tries_every_allowed_mark():
    """A reader unsure of its own best reading gives no guide to the others: try them all."""
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    sure = RegionRead(marks[box], 0.95, True, (("crossed", 0.29), ("empty", 0.01)))
    unsure = RegionRead(marks[box], 0.05, True, (("crossed", 0.29), ("empty", 0.01)))
    tried = lambda rr: {a.mark for a in build_report(t, {**_reads(marks), box: rr}).uncertain[0].alternatives}
    assert tried(sure) == {"crossed"}                      # the best alternative; 'empty' < 2 %
    assert tried(unsure) == set(t.region(box).marks) - {marks[box]}


def test_unreadable_evidence_blocks_a_false_discrepancy():
    """Five connections of a legal Reefs route misread as a hard photo's reader did (each with
    confidence ~0): the sheet as read breaks one_route three times (orange, green, purple) and
    must not be a DISCREPANCY; every misread region is put up for review (the region a finding
    cites while nobody could read it is evidence for that finding), and fixing them gives OK."""
    from pathlib import Path
    exp = json.loads((Path(__file__).resolve().parents[1] / "sample_photos"
                      / "reefs-3-hard-s13.expected.json").read_text())
    t = get_template("reefs-3")
    truth = exp["marks"]
    misread = {"conn.r3c2-r3c3": "empty", "conn.r3c4-r3c5": "empty", "conn.r4c6-r4c7": "purple",
               "conn.r4c7-r5c7": "empty", "conn.r6c6-r7c6": "empty"}
    assert all(truth[k] != v for k, v in misread.items())
    reads = {rid: RegionRead(m) for rid, m in truth.items()}
    reads.update({rid: RegionRead(m, 0.01, True, ()) for rid, m in misread.items()})
    r = build_report(t, reads)
    assert r.verdict is Verdict.NEEDS_REVIEW
    assert [f.rule for f in r.rule_findings] == ["reefs.one_route"] * 3
    assert {u.region for u in r.review} == set(misread)
    assert {u.region: u.evidence_for for u in r.review if u.evidence_for} == \
        {"conn.r4c6-r4c7": ("reefs.one_route",)}
    fixed = build_report(t, reads, fixes={k: truth[k] for k in misread})
    assert fixed.verdict is Verdict.OK and fixed.rules_total == exp["total"]["rules"]


def _key(a):
    return a.rules.total, a.claimed.total, sorted(
        f.rule for f in a.findings if f.severity.value != "note")


def _two_edge_gap():
    """A simulated Reefs game and two consecutive connections in the middle of one route such
    that, both read empty, either one filled alone leaves the route in two pieces, and a decoy
    colour for the first changes nothing alone: (template, engine, marks, colour, e1, e2, decoy)."""
    from scoring import reefs
    for tid, seed in [("reefs-1", s) for s in range(3, 9)] + [("reefs-2", s) for s in range(3, 9)]:
        t, e, st = _game(tid, seed)
        marks = e.state_to_marks(st)
        lay = reefs.layout_of(t)
        for c, route in reefs.analyse(e.state_from_marks(t, marks)).routes.items():
            tr = route.trail or ()
            for i in range(1, len(tr) - 3):
                e1 = lay.conn_by_pair[frozenset(tr[i:i + 2])]
                e2 = lay.conn_by_pair[frozenset(tr[i + 1:i + 3])]
                read = {**marks, e1: "empty", e2: "empty"}
                base = _key(e.audit(e.state_from_marks(t, read)))

                def same(**alt):
                    return _key(e.audit(e.state_from_marks(t, {**read, **alt}))) == base
                if not (same(**{e1: c}) and same(**{e2: c})):
                    continue
                decoy = next((m for m in t.region(e1).marks if m not in ("empty", c)
                              and same(**{e1: m}) and same(**{e1: m, e2: c})), None)
                if decoy is not None:
                    return t, e, marks, c, e1, e2, decoy
    raise AssertionError("no two-connection gap with a harmless decoy on these seeds")


def test_two_gaps_that_only_together_join_a_route_are_both_reviewed():
    """The reader read two true connections of a route empty and is a little unsure of each.
    Filling either alone leaves the route in two pieces, and the first's best alternative is a
    harmless decoy (so re-scoring every region at its best alternative joins nothing either):
    only a search of the route's plausible joins finds that together they undo the finding."""
    t, e, marks, c, e1, e2, decoy = _two_edge_gap()
    swatch = next(rid for rid in sorted(marks) if rid.startswith("swatch."))
    read = {**marks, e1: "empty", e2: "empty", swatch: swatch.split(".")[1]}
    reads = {**_reads(read),
             e1: RegionRead("empty", 0.93, True, ((decoy, 0.05), (c, 0.04))),
             e2: RegionRead("empty", 0.93, True, ((c, 0.06),)),
             # an unsure region whose every plausible reading changes nothing, alone or not
             swatch: RegionRead(read[swatch], 0.93, True, (("empty", 0.06),))}
    r = build_report(t, reads)
    assert [f.rule for f in r.rule_findings] == ["reefs.one_route"]   # false, as read
    assert not any(a.changes for u in r.uncertain for a in u.alternatives)   # harmless alone
    assert r.verdict is Verdict.NEEDS_REVIEW
    assert {u.region for u in r.review} == {e1, e2}
    assert [u.region for u in r.did_not_matter] == [swatch]
    u1 = next(u for u in r.review if u.region == e1)
    assert "findings" in u1.together and dict(u1.together_with) == {e1: c, e2: c}
    assert f"together with {e2} as {c}" in u1.reason and "reefs.one_route would go" in u1.reason
    assert f"{e1}: read empty" in format_text(r) and u1.reason in format_text(r)
    doc = json.loads(json.dumps(r.to_json()))
    assert doc["review"][0]["together_with"] and doc["search"]["cut_off"] == []
    assert 0 < doc["search"]["targeted"] <= doc["search"]["limit"]
    fixed = build_report(t, reads, fixes={e1: c, e2: c})
    assert fixed.verdict is Verdict.OK
    assert fixed.rules_total == e.audit(e.state_from_marks(t, marks)).rules.total

    # a joint reading is plausible only above JOINT_FLOOR: two readings the reader was sure of
    # (2 % for the other colour each: 0.02/0.97 squared is 4e-4) do not put the sheet in doubt
    sure = {**reads, e1: RegionRead("empty", 0.97, True, ((decoy, 0.02), (c, 0.02))),
            e2: RegionRead("empty", 0.97, True, ((c, 0.02),))}
    r = build_report(t, sure)
    assert r.verdict is Verdict.DISCREPANCY and r.review == () and r.search["cut_off"] == []


def test_an_entry_point_and_the_first_connection_misread_together_are_reviewed():
    """A route whose entry point and first connection were both read empty: it starts nowhere,
    and colouring either alone still leaves it starting nowhere. The map proposes colouring the
    entry point and joining it to the route; the entry point's best alternative is a harmless
    decoy (crossed out), so only that proposal finds the pair."""
    from scoring import reefs
    t, e, st = _game("reefs-1", 3)
    marks, lay = e.state_to_marks(st), reefs.layout_of(t)
    for c, route in reefs.analyse(st).routes.items():
        ent, conn = route.entries[0], lay.conn_by_pair[frozenset(route.trail[:2])]
        read = {**marks, ent: "empty", conn: "empty"}
        base = _key(e.audit(e.state_from_marks(t, read)))
        same = lambda **alt: _key(e.audit(e.state_from_marks(t, {**read, **alt}))) == base
        if same(**{ent: c}) and same(**{conn: c}) and same(**{ent: "crossed"}) \
                and same(**{ent: "crossed", conn: c}):
            break
    else:
        raise AssertionError("no such route on this sheet: choose another seed")
    reads = {**_reads(read), ent: RegionRead("empty", 0.93, True, (("crossed", 0.05), (c, 0.04))),
             conn: RegionRead("empty", 0.93, True, ((c, 0.06),))}
    r = build_report(t, reads)
    assert [f.rule for f in r.rule_findings] == ["reefs.start_at_entry"]
    assert r.verdict is Verdict.NEEDS_REVIEW and {u.region for u in r.review} == {ent, conn}
    u = next(u for u in r.review if u.region == ent)
    assert dict(u.together_with) == {ent: c, conn: c}
    assert u.reason.endswith(f"(the {c} route would start at entry point {ent})")


def test_a_search_cut_off_by_its_bound_says_so_and_reviews_its_regions(monkeypatch):
    import sheetcheck.report as report
    t, e, marks, c, e1, e2, decoy = _two_edge_gap()
    reads = {**_reads({**marks, e1: "empty", e2: "empty"}),
             e1: RegionRead("empty", 0.93, True, ((decoy, 0.05), (c, 0.04))),
             e2: RegionRead("empty", 0.93, True, ((c, 0.06),))}
    monkeypatch.setattr(report, "MAX_SEARCH_AUDITS", 0)
    r = build_report(t, reads)
    assert r.search["cut_off"] == ["reefs.one_route"] and r.search["targeted"] == 0
    assert r.verdict is Verdict.NEEDS_REVIEW                      # never a quiet DISCREPANCY
    assert {u.region: u.cut_off for u in r.review} == {e1: ("reefs.one_route",),
                                                        e2: ("reefs.one_route",)}
    assert "stopped at its bound (0 re-scores)" in format_text(r)
    assert r.to_json()["review"][0]["cut_off"] == ["reefs.one_route"]


def test_one_of_two_broken_routes_repaired_is_a_finding_that_goes():
    """Two routes, each read with one gap (an unsure empty connection): filling one gap leaves
    the other route broken, so the rule stays broken, yet a finding goes: both are reviewed."""
    from scoring import reefs
    t, e, st = _game("reefs-2", 4)
    marks = e.state_to_marks(st)
    lay = reefs.layout_of(t)
    routes = reefs.analyse(st).routes
    gaps = {}
    for c, route in routes.items():
        tr = route.trail or ()
        if len(tr) >= 4 and len(gaps) < 2:
            gaps[lay.conn_by_pair[frozenset(tr[1:3])]] = c
    assert len(gaps) == 2
    reads = {**_reads({**marks, **{g: "empty" for g in gaps}}),
             **{g: RegionRead("empty", 0.93, True, ((c, 0.05),)) for g, c in gaps.items()}}
    r = build_report(t, reads)
    assert [f.rule for f in r.rule_findings] == ["reefs.one_route"] * 2
    assert {u.region for u in r.review} == set(gaps)
    for u in r.review:
        assert [a.changes for a in u.alternatives] == [("findings",)]
        assert u.reason.startswith(f"if {gaps[u.region]}: it would change findings")
        assert (f"{u.region}: read empty (93.0 %); if {gaps[u.region]}: rules {r.rules_total}, "
                f"claimed {r.claimed_total} (findings change)") in format_text(r)
    assert build_report(t, reads, fixes=gaps).verdict is Verdict.OK


def test_a_flagged_confidence_is_never_shown_rounded_up_to_look_sure():
    """0.9699 is below the review threshold: printed as 96.9 %, not the 97 % of plain rounding."""
    from sheetcheck.report import percent
    assert percent(0.9699) == "96.9 %"
    assert percent(0.97) == "97.0 %" and percent(1.0) == "100.0 %" and percent(0.0) == "0.0 %"
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    box = _coloured_point_box(t, marks)
    r = build_report(t, {**_reads(marks), box: RegionRead(marks[box], 0.9699, True, (("empty", 0.03),))})
    assert f"{box}: read {marks[box]} (96.9 %)" in format_text(r)


def test_the_text_lists_the_most_doubtful_review_first():
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    boxes = [rid for rid in marks if rid.startswith("points.") and marks[rid] != "empty"][:2]
    assert len(boxes) == 2
    reads = {**_reads(marks),
             boxes[0]: RegionRead(marks[boxes[0]], 0.95, True, (("empty", 0.05),)),
             boxes[1]: RegionRead(marks[boxes[1]], 0.6, True, (("empty", 0.4),))}
    r = build_report(t, reads)
    assert {u.region for u in r.review} == set(boxes)   # both matter (a coloured point box)
    text = format_text(r)
    assert text.index(f"{boxes[1]}: read") < text.index(f"{boxes[0]}: read")


def test_the_overlay_panel_explains_at_most_its_limit_of_review_regions(monkeypatch):
    """A flag-heavy sheet must not turn the overlay into a scroll: the panel explains the first
    PANEL_REVIEW_LIMIT review regions and says how many more there are (all stay outlined)."""
    from sheetcheck import overlay
    t, e, st = _game("crypts-2")
    marks = e.state_to_marks(st)
    coloured = [rid for rid, m in marks.items() if m not in ("empty", "written")][:30]
    reads = {**_reads(marks), **{rid: RegionRead(marks[rid], 0.6, True, (("empty", 0.4),))
                                 for rid in coloured}}
    r = build_report(t, reads)
    assert len(r.review) > 8
    monkeypatch.setattr(overlay, "PANEL_REVIEW_LIMIT", 1000)
    full = overlay.draw_overlay(r, dpi=40)
    monkeypatch.setattr(overlay, "PANEL_REVIEW_LIMIT", 4)
    capped = overlay.draw_overlay(r, dpi=40)
    assert capped.size[0] == full.size[0] and capped.size[1] < full.size[1]
    few = build_report(t, {**_reads(marks), coloured[0]: reads[coloured[0]]})
    assert len(few.review) <= 4     # under the limit nothing is cut: the same picture either way
    a = overlay.draw_overlay(few, dpi=40)
    monkeypatch.setattr(overlay, "PANEL_REVIEW_LIMIT", 1000)
    assert overlay.draw_overlay(few, dpi=40).tobytes() == a.tobytes()
