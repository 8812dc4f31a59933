"""The held-out painter and pencil sets, the painter hook, and the seeded corpus script."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path

import cv2
import numpy as np
import pytest

from calibration.template import get_template
from sheetcheck.simulator import PAINTERS, SimulatorError, random_marks, simulate_photo
from sheetcheck.simulator import heldout as H
from sheetcheck.simulator.presets import load_brands
from sheetcheck.simulator.sheet import render_blank

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]
SMALL = {"output_long_side": 640}
DPI = 100  # flat sheets: 9 mm boxes are ~35 px, enough to look inside and at their rims


def _load_script():
    # (registered: multiprocessing needs to find it again by name)
    return load_script("make_corpus", register=True)


def _marks(template, seed=2, fill=0.6):
    m = random_marks(template, np.random.default_rng(seed), fill=fill)
    # some crossed marks too, wherever a region allows them
    for k, r in enumerate(template.readable_regions()):
        if "crossed" in r.marks and k % 7 == 0:
            m[r.id] = "crossed"
    return m


def _interior(region, shape, shrink_mm: float) -> np.ndarray:
    """Pixels whose centres lie inside ``region`` shrunk by ``shrink_mm`` (bool mask)."""
    s = DPI / 25.4
    m = np.zeros(shape, np.uint8)
    q = np.round((region.shape.polygon(segments=48) * s - 0.5) * 8).astype(np.int32)
    cv2.fillPoly(m, [q], 1, cv2.LINE_8, 3)
    k = max(1, int(round(shrink_mm * s)))
    return cv2.erode(m, cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * k + 1, 2 * k + 1))) > 0


def _paint_flat(template, marks, *, brand, seed=1, **hand):
    over = {"pencil_brand": brand, **{f"hand.{k}": v for k, v in hand.items()}}
    cond, rng = H.heldout_conditions(seed, template.id, "typical", over)
    blank = render_blank(template, dpi=DPI, markers=True)
    out = H.paint_heldout(blank, template, marks, dpi=DPI, rng=rng, pencils=cond["pencils"],
                          hand=cond["hand"], pencil_set=H.load_heldout_sets()["sets"][brand])
    return blank, out


# --- the pencil sets ----------------------------------------------------------------------------

def test_heldout_sets_are_new_brands_with_every_medium():
    doc = H.load_heldout_sets()
    sets = doc["sets"]
    assert len(sets) >= 4
    brands = load_brands()["brands"]
    assert not set(sets) & set(brands)
    known = {tuple(v) for b in brands.values() for v in b["pencils"].values()}
    for name, s in sets.items():
        assert not {tuple(v) for v in s["pencils"].values()} & known, name
    assert {s["medium"] for s in sets.values()} == set(H.MEDIA)


def test_a_broken_sets_file_names_every_problem(tmp_path, monkeypatch):
    bad = tmp_path / "heldout.json"
    bad.write_text(json.dumps({"format": "sheetcheck.heldout_pencils/1", "sets": {
        "x": {"medium": "crayon", "softness": 2, "hiding": 0.1, "streak": 0.1,
              "pencils": {"orange": [1, 2, 3]}, "graphite": [1, 2, 3]}}}))
    monkeypatch.setattr(H, "HELDOUT_PATH", bad)
    H.load_heldout_sets.cache_clear()
    try:
        with pytest.raises(SimulatorError, match=r"medium must be one of.*softness must be.*pencil 'red'"):
            H.load_heldout_sets()
    finally:
        H.load_heldout_sets.cache_clear()


# --- the painter on a flat sheet ------------------------------------------------------------

@pytest.mark.parametrize("template_id,brand,style,ticks", [
    ("crypts-1", "prismacolor_like", "circles", False),
    ("crypts-2", "maped_like", "diagonal_half", True),
    ("crypts-3", "fibre_tip_like", "stipple", False),
    ("reefs-1", "mondeluz_like", "outline", False),
    ("reefs-2", "kids_odd_like", "outside", True),
    ("reefs-3", "lyra_oil_like", "loose", False),
    ("crypts-1", "fibre_tip_like", "two_pass", False),
    ("reefs-1", "prismacolor_like", "burnish", False),
])
def test_paints_the_marked_regions_and_leaves_empty_ones_untouched(template_id, brand, style, ticks):
    t = get_template(template_id)
    marks = _marks(t)
    blank, out = _paint_flat(t, marks, brand=brand, style=style, style_loyalty=1.0,
                             tick_boxes=ticks, stray_marks=3)
    diff = np.abs(out.astype(int) - blank.astype(int)).max(2)
    n_marked = 0
    for r in t.readable_regions():
        inner = _interior(r, diff.shape, 0.6)
        if not inner.any():
            continue
        if marks[r.id] == "empty":
            # paint never enters another region's interior; stray marks stay 2 mm clear
            assert diff[inner].max() == 0, f"{r.id} is empty but was painted on"
        else:
            n_marked += 1
            # the region itself or its rim (outline-only and tick marks sit near the border)
            near = _interior(r, diff.shape, -0.5)
            changed = (diff[near] > 20).mean()
            # a thin graphite X over a box darkens less of it than any fill; a number written
            # in a wide field covers little of it
            least = {"crossed": 0.03, "written": 0.005}.get(marks[r.id], 0.06)
            assert changed > least, f"{r.id} ({marks[r.id]}) is marked but barely changed: {changed:.3f}"
    assert n_marked > 10
    # stray marks exist and land away from regions: something changed outside every region
    anywhere = np.zeros(diff.shape, bool)
    for r in t.readable_regions():
        anywhere |= _interior(r, diff.shape, -2.0)
    assert (diff[~anywhere] > 20).sum() > 0


def test_colour_of_a_fill_is_the_pencils_hue():
    """A burnished fill in each colour moves the region's mean colour towards that pencil."""
    t = get_template("crypts-1")
    boxes = [r for r in t.readable_regions() if r.kind == "box" and "blue" in r.marks][:5]
    marks = {r.id: c for r, c in zip(boxes, H.COLOURS) if c in r.marks}
    assert len(marks) >= 3
    blank, out = _paint_flat(t, marks, brand="prismacolor_like", style="burnish", style_loyalty=1.0,
                             tick_boxes=False, stray_marks=0)
    hsv = cv2.cvtColor(out, cv2.COLOR_RGB2HSV_FULL)
    expect = {"orange": (10, 40), "red": (235, 256), "blue": (145, 175), "green": (90, 125),
              "purple": (185, 225)}
    for rid, c in marks.items():
        inner = _interior(t.region(rid), out.shape[:2], 1.5)
        # ignore the printed digit/label pixels: take the most saturated half of the region
        sat = hsv[..., 1][inner]
        hue = hsv[..., 0][inner][sat >= np.median(sat)].astype(int) * 256 // 256
        h = int(np.median(hue))
        lo, hi = expect[c]
        assert lo <= h < hi or (c == "red" and h < 8), f"{rid} {c}: hue {h}"


def test_ticks_are_only_drawn_in_boxes_and_crossed_styles_all_paint():
    t = get_template("reefs-1")
    rs = [r for r in t.readable_regions() if "crossed" in r.marks][:8]
    for style in H.CROSS_STYLES:
        marks = {r.id: "crossed" for r in rs}
        blank, out = _paint_flat(t, marks, brand="maped_like", cross_style=style, stray_marks=0)
        diff = np.abs(out.astype(int) - blank.astype(int)).max(2)
        for r in rs:
            near = _interior(r, diff.shape, -0.5)
            assert (diff[near] > 20).mean() > 0.02, f"{style} on {r.id}"


# --- the hook in simulate_photo --------------------------------------------------------------

def test_heldout_photo_is_deterministic_per_seed_and_records_the_painter():
    t = get_template("crypts-2")
    marks = _marks(t)
    a = simulate_photo(t, marks, seed=4, preset="easy", painter="heldout", overrides=SMALL)
    b = simulate_photo(t, marks, seed=4, preset="easy", painter="heldout", overrides=SMALL)
    c = simulate_photo(t, marks, seed=5, preset="easy", painter="heldout", overrides=SMALL)
    assert a.jpeg == b.jpeg and a.truth == b.truth
    assert a.jpeg != c.jpeg
    cond = a.truth["conditions"]
    assert cond["painter"] == "heldout" and cond["hand"]["painter"] == "heldout"
    assert cond["pencil_brand"] in H.load_heldout_sets()["sets"]
    assert set(cond["pencils"]) >= set(H.COLOURS)
    assert a.truth["marks"] == {r.id: marks.get(r.id, "empty") for r in t.readable_regions()}
    json.dumps(a.truth)


def test_same_seed_same_camera_different_painter():
    t = get_template("reefs-2")
    marks = _marks(t)
    d = simulate_photo(t, marks, seed=7, preset="typical", overrides=SMALL)
    h = simulate_photo(t, marks, seed=7, preset="typical", overrides=SMALL, painter="heldout")
    assert d.truth["homography"] == h.truth["homography"]
    assert d.truth["conditions"]["rotation_deg"] == h.truth["conditions"]["rotation_deg"]
    assert d.truth["conditions"]["pencil_brand"] != h.truth["conditions"]["pencil_brand"]
    assert "painter" not in d.truth["conditions"]  # the default truth is as it always was
    assert d.jpeg != h.jpeg


def test_default_painter_is_the_committed_sample():
    """The default painter draws what it drew when the sample was made: the same truth (marks,
    camera, light, hand), and the same pixels up to the drawing libraries' rounding. Not the
    same bytes: OpenCV's SIMD code rounds differently from one CPU to another (on an AVX2
    machine, 2026-12-02, OpenCV 5.0: 83 of the 1.44 M pixels differ) and OpenCV 5.1 draws
    Hershey digits, the written total, another way (877 pixels). Any change in the painter's
    random streams moves most of the photo (123,752 pixels under OpenCV 4.14, whose other
    rounding shifts everything)."""
    from scoring.registry import engine_for
    from sheetcheck.simulator import with_swatches

    t = get_template("crypts-3")
    e = engine_for(t.game)
    marks = with_swatches(t, e.state_to_marks(e.simulate_game(t, 5)), np.random.default_rng([5, 9]))
    photo = simulate_photo(t, marks, seed=5, preset="typical", overrides={"output_long_side": 1600},
                           painter="default")
    sample = ROOT / "sample_photos" / "crypts-3-typical-s5"
    truth = json.loads(sample.with_suffix(".truth.json").read_text())
    truth.pop("marks_source")  # (added by scripts/make_samples.py)
    assert json.loads(json.dumps(photo.truth)) == truth
    made = cv2.imdecode(np.frombuffer(photo.jpeg, np.uint8), cv2.IMREAD_COLOR)
    kept = cv2.imread(str(sample.with_suffix(".jpg")), cv2.IMREAD_COLOR)
    assert made.shape == kept.shape
    differ = np.abs(made.astype(np.int16) - kept).max(axis=2) > 0
    assert differ.mean() < 0.002, f"{int(differ.sum())} pixels differ"


def test_bad_painter_and_bad_heldout_conditions_are_clear_errors():
    t = get_template("crypts-1")
    with pytest.raises(SimulatorError, match=r"unknown painter 'picasso'"):
        simulate_photo(t, {}, seed=1, painter="picasso")
    assert PAINTERS == ("default", "heldout", "varied")  # varied: the training-only painter
    with pytest.raises(SimulatorError, match=r"pencil_brand 'staedtler' is not a held-out set"):
        simulate_photo(t, {}, seed=1, painter="heldout", overrides={"pencil_brand": "staedtler"})
    with pytest.raises(SimulatorError, match=r"hand.style must be one of circles"):
        simulate_photo(t, {}, seed=1, painter="heldout", overrides={"hand.style": "hatch"})
    with pytest.raises(SimulatorError, match=r"unknown held-out painter condition.*hand.nope"):
        simulate_photo(t, {}, seed=1, painter="heldout", overrides={"hand.nope": 1})
    with pytest.raises(SimulatorError, match=r"'hand.pressure' must be a number 0.05\.\.1\.0, got 3"):
        simulate_photo(t, {}, seed=1, painter="heldout", overrides={"hand.pressure": 3})


# --- the corpus script -------------------------------------------------------------------------

def test_corpus_plan_spreads_evenly_over_templates_presets_and_markers():
    mc = _load_script()
    p = mc.plan(72, 1000)
    assert [x[3] for x in p] == list(range(1000, 1072))
    assert set(Counter(x[0] for x in p).values()) == {12}
    assert set(Counter(x[1] for x in p).values()) == {24}
    nm = [x for x in p if not x[2]]
    assert len(nm) == 18
    assert set(Counter(x[1] for x in nm).values()) == {6}
    assert set(Counter(x[0] for x in nm).values()) == {3}


def test_make_corpus_writes_a_corpus_that_eval_reads(tmp_path, capsys):
    mc = _load_script()
    out = tmp_path / "corpus"
    assert mc.main(["--out", str(out), "--count", "3", "--seed", "40", "--painter", "heldout",
                    "--workers", "1", "--set", "output_long_side=900"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["crypts-1-easy-m-s40.jpg", "crypts-1-easy-m-s40.truth.json",
                     "crypts-2-easy-m-s41.jpg", "crypts-2-easy-m-s41.truth.json",
                     "crypts-3-easy-m-s42.jpg", "crypts-3-easy-m-s42.truth.json"]
    total = 0
    for tp in out.glob("*.truth.json"):
        truth = json.loads(tp.read_text())
        assert truth["painter"] == "heldout" and truth["conditions"]["painter"] == "heldout"
        assert truth["marks_source"] in ("game", "random")
        assert truth["image_size"][0] == 900 or truth["image_size"][1] == 900
        assert set(truth["marks"]) == {r.id for r in get_template(truth["template"]).readable_regions()}
        total += len(truth["marks"])
    # deterministic: the same photo again, alone, is the same bytes
    again = tmp_path / "again"
    assert mc.main(["--out", str(again), "--count", "1", "--seed", "40", "--painter", "heldout",
                    "--workers", "1", "--set", "output_long_side=900"]) == 0
    assert (again / "crypts-1-easy-m-s40.jpg").read_bytes() == (out / "crypts-1-easy-m-s40.jpg").read_bytes()
    if importlib.util.find_spec("sheetcheck.commands.eval") is None:
        pytest.skip("sheetcheck eval does not exist yet")
    from sheetcheck.cli import main

    res_path = tmp_path / "eval.json"
    capsys.readouterr()
    assert main(["eval", str(out), "--json", str(res_path)]) == 0
    res = json.loads(res_path.read_text())
    assert res["photos"] == 3 and res["regions"] == total


def test_make_corpus_rejects_a_bad_set_with_a_message(tmp_path, capsys):
    mc = _load_script()
    assert mc.main(["--out", str(tmp_path / "c"), "--count", "1", "--set", "colour_temp_k=hot"]) == 2
    assert "colour_temp_k" in capsys.readouterr().err
    assert not list((tmp_path / "c").glob("*.jpg"))


def test_simulate_command_takes_the_painter(tmp_path):
    import json

    from sheetcheck.cli import main

    rc = main(["simulate", "crypts-1", "--random", "--seed", "2", "--preset", "easy",
               "--painter", "heldout", "--set", "output_long_side=640", "--out", str(tmp_path)])
    assert rc == 0
    truth = json.loads(next(tmp_path.glob("*.truth.json")).read_text())
    assert truth["conditions"]["painter"] == "heldout"
