"""The photo simulator: determinism, truth exactness, painting, presets, overrides, command."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from calibration.template import PENCIL_COLOURS, get_template
from sheetcheck.cli import main
from sheetcheck.errors import StateError
from sheetcheck.simulator import (PRESETS, SimulatorError, TRUTH_FORMAT, load_brands, paint_sheet,
                                  random_marks, sample_conditions, simulate_photo)
from sheetcheck.simulator.camera import PageCamera, colour_temperature_rgb
from sheetcheck.simulator.paint import sample_hand
from sheetcheck.simulator.presets import condition_keys, pencils_for
from sheetcheck.simulator.sheet import render_blank

SMALL = {"output_long_side": 640}


def _decode(jpeg: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None, "not a decodable JPEG"
    return img[..., ::-1]


def _detect(img: np.ndarray, dictionary: str) -> dict[int, np.ndarray]:
    """ArUco corners in the project's convention (pixel centres at +0.5)."""
    d = cv2.aruco.getPredefinedDictionary(getattr(cv2.aruco, dictionary))
    p = cv2.aruco.DetectorParameters()
    p.cornerRefinementMethod = cv2.aruco.CORNER_REFINE_SUBPIX
    corners, ids, _ = cv2.aruco.ArucoDetector(d, p).detectMarkers(cv2.cvtColor(img, cv2.COLOR_RGB2GRAY))
    if ids is None:
        return {}
    return {int(i): c.reshape(4, 2) + 0.5 for i, c in zip(ids.ravel(), corners)}


def _apply_h(h: np.ndarray, pts: np.ndarray) -> np.ndarray:
    v = np.c_[pts, np.ones(len(pts))] @ np.asarray(h).T
    return v[:, :2] / v[:, 2:]


@pytest.fixture(scope="module")
def crypts():
    return get_template("crypts-1")


@pytest.fixture(scope="module")
def reefs():
    return get_template("reefs-2")


# --- determinism and output ------------------------------------------------------------------

def test_same_seed_same_photo_other_seed_other_photo(crypts):
    marks = random_marks(crypts, np.random.default_rng(0))
    a = simulate_photo(crypts, marks, seed=5, overrides=SMALL)
    b = simulate_photo(crypts, marks, seed=5, overrides=SMALL)
    c = simulate_photo(crypts, marks, seed=6, overrides=SMALL)
    assert a.jpeg == b.jpeg
    assert np.array_equal(a.image, b.image)
    assert a.truth == b.truth  # the truth file too, byte for byte: no timings or clocks in it
    assert a.jpeg != c.jpeg
    assert a.truth["conditions"]["rotation_deg"] != c.truth["conditions"]["rotation_deg"]


@pytest.mark.parametrize("preset", ["easy", "typical", "hard"])
def test_every_preset_gives_a_jpeg_of_the_stated_size(reefs, preset):
    photo = simulate_photo(reefs, {}, seed=1, preset=preset, overrides={"output_long_side": 700})
    img = _decode(photo.jpeg)
    w, h = photo.truth["image_size"]
    assert img.shape == (h, w, 3) == photo.image.shape
    assert max(w, h) == 700
    assert photo.truth["format"] == TRUTH_FORMAT
    assert photo.truth["preset"] == preset
    q = photo.truth["conditions"]["jpeg_quality"]
    assert {"easy": 85 <= q <= 95, "typical": 70 <= q <= 92, "hard": 60 <= q <= 75}[preset]
    # the JPEG encodes the pre-JPEG photo (low quality drops mostly the fine noise)
    blur = lambda a: cv2.GaussianBlur(a.astype(np.float32), (0, 0), 2)
    assert np.abs(blur(img) - blur(photo.image)).mean() < 4


def test_truth_marks_equal_input_marks_and_fill_in_empty(crypts):
    marks = random_marks(crypts, np.random.default_rng(3), fill=0.7)
    some = dict(list(marks.items())[:10])
    photo = simulate_photo(crypts, some, seed=2, overrides=SMALL)
    expected = {r.id: some.get(r.id, "empty") for r in crypts.readable_regions()}
    assert photo.truth["marks"] == expected
    photo = simulate_photo(crypts, marks, seed=2, overrides=SMALL)
    assert photo.truth["marks"] == marks
    assert set(photo.truth["region_centres_px"]) == set(marks)


def test_conditions_are_all_recorded(crypts):
    photo = simulate_photo(crypts, {}, seed=4, preset="hard", overrides=SMALL)
    cond = photo.truth["conditions"]
    missing = [k for k in condition_keys() if k not in cond]
    assert not missing
    for k in ("output_size", "render_dpi", "pencils", "background", "hand", "colour_cast"):
        assert k in cond
    assert set(cond["pencils"]) >= set(PENCIL_COLOURS) | {"graphite"}
    assert cond["output_size"] == photo.truth["image_size"]
    json.dumps(photo.truth)  # JSON-serialisable throughout


# --- truth geometry --------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1])
def test_truth_homography_maps_markers_onto_the_photo(crypts, seed):
    photo = simulate_photo(crypts, random_marks(crypts, np.random.default_rng(seed)), seed=seed,
                           preset="easy", overrides={"output_long_side": 1400, "k1": 0.0, "k2": 0.0,
                                                     "photo_orientation": "match"})
    assert photo.truth["homography_exact"]
    found = _detect(_decode(photo.jpeg), crypts.aruco_dictionary)
    assert len(found) >= 3, f"only markers {sorted(found)} detected"
    for m in crypts.markers:
        if m.id in found:
            err = np.abs(_apply_h(photo.truth["homography"], m.corners_mm()) - found[m.id]).max()
            assert err < 1.5, f"marker {m.id}: homography off by {err:.2f} px"


def test_curled_distorted_photo_truth_maps_marker_corners(reefs):
    """With curl and lens distortion the homography is not exact; the mapped points are."""
    over = {"output_long_side": 1400, "curl_type": "bend", "curl_amount_mm": 15.0,
            "curl_position": 0.5, "curl_axis": "x", "k1": -0.12, "tilt_deg": 25.0,
            "defocus_px": 0.0, "motion_px": 0.0, "shadow": 0.0, "cutoff": 0.0,
            "photo_orientation": "match", "fill": 0.8, "glare": 0.0, "dof_blur_px": 0.0,
            # light and sensor kept kind so that ArUco finds the markers to compare with
            "background": "plain_table", "light_gradient": 0.1, "vignette": 0.1, "exposure": 0.9,
            "read_noise": 0.004, "shot_noise": 0.002, "jpeg_quality": 88, "awb": 0.9}
    photo = simulate_photo(reefs, {}, seed=3, preset="hard", overrides=over)
    t = photo.truth
    assert not t["homography_exact"]
    found = _detect(_decode(photo.jpeg), reefs.aruco_dictionary)
    assert len(found) >= 2, f"only markers {sorted(found)} detected"
    worst_h = 0.0
    for m in reefs.markers:
        if m.id in found:
            err = np.abs(np.array(t["marker_corners_px"][str(m.id)]) - found[m.id]).max()
            assert err < 2.0, f"marker {m.id}: mapped corners off by {err:.2f} px"
            worst_h = max(worst_h, np.abs(_apply_h(t["homography"], m.corners_mm()) - found[m.id]).max())
    assert worst_h > 3, "curl/distortion had no visible effect"


def test_camera_inverse_undoes_forward():
    cam = PageCamera(page_mm=(297, 210), size=(1200, 900), rotation_deg=37, tilt_deg=30,
                     tilt_axis_deg=70, focal_35mm=28, fill=0.8, offset=(0.2, -0.3), k1=-0.1,
                     k2=0.02, curl={"type": "fold", "amount_mm": 6, "axis": "y",
                                    "position": 0.4, "width_mm": 50})
    mm = np.random.default_rng(0).uniform([0, 0], [297, 210], (200, 2))
    assert np.abs(cam.inverse(cam.forward(mm)) - mm).max() < 1e-3
    flat = PageCamera(page_mm=(297, 210), size=(1200, 900), rotation_deg=0, tilt_deg=20,
                      tilt_axis_deg=0, focal_35mm=28, fill=0.8, offset=(0, 0), k1=0, k2=0,
                      curl={"type": "none"})
    assert np.abs(_apply_h(flat.homography, mm) - flat.forward(mm)).max() < 1e-6


def test_rotation_180_puts_the_top_left_marker_bottom_right(crypts):
    photo = simulate_photo(crypts, {}, seed=1, preset="easy",
                           overrides={"rotation_deg": 180, "output_long_side": 1400, "offset_x": 0.0,
                                      "offset_y": 0.0, "photo_orientation": "match"})
    w, h = photo.truth["image_size"]
    tl = next(m for m in crypts.markers if m.corner == "top_left")
    found = _detect(_decode(photo.jpeg), crypts.aruco_dictionary)
    assert tl.id in found
    cx, cy = found[tl.id].mean(0)
    assert cx > w / 2 and cy > h / 2


def test_cutoff_puts_a_page_corner_out_of_frame(crypts):
    photo = simulate_photo(crypts, {}, seed=2, preset="easy",
                           overrides={"cutoff": 0.15, "cutoff_corner": 2, **SMALL})
    w, h = photo.truth["image_size"]
    corners = np.array(photo.truth["page_corners_px"])
    outside = (corners[:, 0] < 0) | (corners[:, 0] > w) | (corners[:, 1] < 0) | (corners[:, 1] > h)
    assert outside.any()
    normal = simulate_photo(crypts, {}, seed=2, preset="easy", overrides=SMALL)
    c = np.array(normal.truth["page_corners_px"])
    assert ((c >= 0) & (c <= [w, h])).all(), "by default the whole sheet is in view"


# --- painting --------------------------------------------------------------------------------

def test_painted_regions_change_pixels_and_empty_ones_do_not(crypts):
    dpi = 100.0
    blank = render_blank(crypts, dpi=dpi)
    rng = np.random.default_rng(0)
    marks = random_marks(crypts, rng, fill=0.5)
    cond = sample_conditions("typical", np.random.default_rng(1), {"hand.stray_marks": 0,
                                                                   "hand.pressure": 0.8})
    pencils = pencils_for(cond, np.random.default_rng(2))
    painted = paint_sheet(blank, crypts, marks, dpi=dpi, rng=np.random.default_rng(3),
                          pencils=pencils, hand=cond["hand"])
    assert painted.shape == blank.shape and painted.dtype == np.uint8
    diff = np.abs(painted.astype(int) - blank.astype(int)).sum(-1)
    s = dpi / 25.4
    checked = {"marked": 0, "empty": 0}
    for r in crypts.readable_regions():
        x0, y0, x1, y1 = (np.array(r.shape.bbox()) * s).astype(int)
        m = int(s)  # 1 mm in: a neighbour's overshoot may touch the border
        inner = diff[y0 + m:y1 - m, x0 + m:x1 - m]
        if marks[r.id] == "empty":
            assert inner.mean() < 6, f"empty region {r.id} changed by {inner.mean():.1f}"
            checked["empty"] += 1
        else:
            assert inner.mean() > 25, f"{marks[r.id]} region {r.id} barely changed ({inner.mean():.1f})"
            checked["marked"] += 1
    assert checked["marked"] > 10 and checked["empty"] > 10


def test_pencil_colour_is_the_pencil_not_paint(crypts):
    """A heavy-handed fill is close to the pencil's colour yet shows paper grain (not flat)."""
    dpi = 150.0
    blank = render_blank(crypts, dpi=dpi)
    box = next(r for r in crypts.readable_regions() if r.kind == "box")
    pencils = {"orange": [240, 120, 40], "red": [200, 40, 50], "blue": [40, 90, 180],
               "green": [40, 140, 70], "purple": [120, 60, 150], "graphite": [90, 90, 95]}
    hand = {**sample_hand(np.random.default_rng(0)), "pressure": 1.0, "style": "hatch",
            "style_loyalty": 1.0, "stray_marks": 0, "spacing_mm": 0.5, "stroke_width_mm": 0.7}
    painted = paint_sheet(blank, crypts, {box.id: "blue"}, dpi=dpi, rng=np.random.default_rng(1),
                          pencils=pencils, hand=hand)
    s = dpi / 25.4
    x0, y0, x1, y1 = (np.array(box.shape.bbox()) * s).astype(int)
    inner = painted[y0 + 3:y1 - 3, x0 + 3:x1 - 3].reshape(-1, 3).astype(float)
    med = np.median(inner, 0)
    assert med[2] > med[0] + 40, f"not blue: {med}"
    assert inner[:, 0].std() > 8, "a flat fill: no grain or gaps"


def _x_shaped(painted, blank, box, s: float) -> bool:
    """Whether the ink over ``box`` runs along both of its diagonals (an X)."""
    x0, y0, x1, y1 = np.array(box.shape.bbox()) * s
    ink = (np.abs(painted.astype(int) - blank.astype(int)).sum(-1) > 60).astype(np.uint8)
    ink = cv2.dilate(ink, np.ones((5, 5), np.uint8))
    t = np.linspace(0.25, 0.75, 21)
    share = []
    for (ax, ay), (bx, by) in (((x0, y0), (x1, y1)), ((x1, y0), (x0, y1))):
        xs = np.round(ax + (bx - ax) * t).astype(int)
        ys = np.round(ay + (by - ay) * t).astype(int)
        share.append(ink[ys, xs].mean())
    return min(share) > 0.8


def test_a_colour_pencil_crosses_out_with_an_x_never_a_scribble(crypts):
    """A scribble in a colour pencil is colouring in: no one can tell it from a scribbled fill,
    so the painter would be writing a "crossed" truth no reader could earn. A hand that scribbles
    its crossings-out does so in graphite; in colour it draws an X (as the varied and held-out
    painters do)."""
    dpi = 100.0
    s = dpi / 25.4
    blank = render_blank(crypts, dpi=dpi)
    box = next(r for r in crypts.readable_regions() if r.kind == "box" and "crossed" in r.marks)
    pencils = {"orange": [240, 120, 40], "red": [200, 40, 50], "blue": [40, 90, 180],
               "green": [40, 140, 70], "purple": [120, 60, 150], "graphite": [70, 70, 75]}
    shapes = {}
    for pencil in ("colour", "graphite"):
        hand = {**sample_hand(np.random.default_rng(0)), "pressure": 1.0, "stray_marks": 0,
                "stroke_width_mm": 0.5, "cross_style": "scribble", "cross_pencil": pencil}
        shapes[pencil] = []
        for seed in range(8):
            painted = paint_sheet(blank, crypts, {box.id: "crossed"}, dpi=dpi,
                                  rng=np.random.default_rng(seed), pencils=pencils, hand=hand)
            shapes[pencil].append(_x_shaped(painted, blank, box, s))
            x0, y0, x1, y1 = (np.array(box.shape.bbox()) * s).astype(int)
            ink = painted[y0:y1, x0:x1].reshape(-1, 3).astype(int)
            dark = ink[ink.sum(1) < 600]
            chroma = np.median(dark.max(1) - dark.min(1)) if len(dark) else 0
            # the crossing-out is in colour with the colour hand, grey with the graphite one
            assert (chroma > 40) == (pencil == "colour"), (pencil, seed, chroma)
    assert all(shapes["colour"]), shapes
    # the graphite hand keeps its scribbles (an X only when the hand departs from its habit)
    assert sum(shapes["graphite"]) <= 3, shapes


def test_bad_marks_are_clear_errors(crypts):
    with pytest.raises(StateError, match="unknown region 'nope'"):
        simulate_photo(crypts, {"nope": "red"}, seed=0)
    rid = crypts.readable_regions()[0].id
    with pytest.raises(StateError, match="cannot carry mark 'pink'"):
        simulate_photo(crypts, {rid: "pink"}, seed=0)


def test_random_marks_respect_allowed_marks(reefs):
    for seed in range(5):
        marks = random_marks(reefs, np.random.default_rng(seed), fill=0.6)
        assert set(marks) == {r.id for r in reefs.readable_regions()}
        for rid, m in marks.items():
            r = reefs.region(rid)
            assert m in r.marks
            if r.kind == "swatch":
                assert m in ("empty", r.meaning["colour"])
    assert set(random_marks(reefs, np.random.default_rng(0), fill=0.0).values()) <= {"empty", "orange", "red",
                                                                                     "blue", "green", "purple"}
    with pytest.raises(ValueError, match="fill must be within"):
        random_marks(reefs, np.random.default_rng(0), fill=1.5)


# --- presets, overrides, brands --------------------------------------------------------------

def test_overrides_are_respected_and_bad_ones_rejected():
    c = sample_conditions("hard", np.random.default_rng(0),
                          {"rotation_deg": "90", "jpeg_quality": 77, "hand.style": "scribble"})
    assert c["rotation_deg"] == 90.0 and c["jpeg_quality"] == 77 and c["hand"]["style"] == "scribble"
    with pytest.raises(SimulatorError, match="unknown condition.*nonsense"):
        sample_conditions("easy", np.random.default_rng(0), {"nonsense": 1})
    with pytest.raises(SimulatorError, match="must be a number"):
        sample_conditions("easy", np.random.default_rng(0), {"tilt_deg": "steep"})
    with pytest.raises(SimulatorError, match="background 'moon' is not one of"):
        sample_conditions("easy", np.random.default_rng(0), {"background": "moon"})
    with pytest.raises(SimulatorError, match="unknown preset 'extreme'"):
        sample_conditions("extreme", np.random.default_rng(0))


def test_presets_differ_in_difficulty():
    draws = {p: [sample_conditions(p, np.random.default_rng(s)) for s in range(40)] for p in PRESETS}
    tilt = {p: max(c["tilt_deg"] for c in d) for p, d in draws.items()}
    assert tilt["easy"] <= 8 < tilt["typical"] <= 25 < tilt["hard"] <= 40
    assert any(c["curl_type"] != "none" for c in draws["hard"])
    assert all(c["curl_type"] == "none" for c in draws["easy"])
    # mixed: every typical draw is distinct
    assert len({c["rotation_deg"] for c in draws["typical"]}) == 40


def test_brands_span_the_real_range_of_each_colour():
    brands = load_brands()["brands"]
    assert len(brands) >= 5

    def hue(rgb):
        h = cv2.cvtColor(np.uint8([[rgb]]), cv2.COLOR_RGB2HSV_FULL)[0, 0, 0]
        return int(h) * 360 / 256

    for colour in PENCIL_COLOURS:
        values = [b["pencils"][colour] for b in brands.values()]
        assert len({tuple(v) for v in values}) == len(values), f"{colour}: brands repeat a colour"
        lum = [sum(v) for v in values]
        assert max(lum) - min(lum) > 90, f"{colour}: light and dark pencils both needed"
    blues = [hue(b["pencils"]["blue"]) for b in brands.values()]
    assert all(190 < h < 250 for h in blues)


def test_colour_temperature_is_warm_to_neutral():
    warm, day = colour_temperature_rgb(2700), colour_temperature_rgb(6500)
    assert warm[0] > 1.5 and warm[2] < 0.5
    assert np.allclose(day, 1, atol=0.1)


# --- command ---------------------------------------------------------------------------------

def test_simulate_command_writes_photos_and_truth(tmp_path, capsys):
    rc = main(["simulate", "crypts-2", "--random", "--seed", "7", "--count", "2", "--preset", "easy",
               "--set", "output_long_side=500", "--set", "rotation_deg=180", "--out", str(tmp_path)])
    assert rc == 0
    for seed in (7, 8):
        jpg = tmp_path / f"crypts-2-easy-s{seed}.jpg"
        truth = json.loads((tmp_path / f"crypts-2-easy-s{seed}.truth.json").read_text())
        assert _decode(jpg.read_bytes()).shape[:2] == tuple(truth["image_size"][::-1])
        assert truth["seed"] == seed and truth["conditions"]["rotation_deg"] == 180.0
        assert truth["marks_source"] == "random"


def test_simulate_command_game_marks_are_legal(tmp_path):
    from scoring.registry import engine_for
    t = get_template("reefs-1")
    rc = main(["simulate", "reefs-1", "--game", "--seed", "2", "--set", "output_long_side=500",
               "--no-markers", "--out", str(tmp_path)])
    assert rc == 0
    truth = json.loads((tmp_path / "reefs-1-typical-s2.truth.json").read_text())
    assert truth["markers"] is False and truth["marker_corners_px"] == {}
    engine = engine_for(t.game)
    state = engine.state_from_marks(t, truth["marks"])
    # the engine plays the game; the calibration swatches are coloured in on top of it
    game = {k: v for k, v in truth["marks"].items() if t.region(k).kind != "swatch"}
    assert {k: v for k, v in engine.state_to_marks(state).items() if k in game} == game
    swatches = {k: v for k, v in truth["marks"].items() if t.region(k).kind == "swatch"}
    assert all(v in ("empty", t.region(k).meaning["colour"]) for k, v in swatches.items())
    assert sum(m != "empty" for m in truth["marks"].values()) > 10


def test_simulate_command_errors(tmp_path, capsys):
    bad = tmp_path / "m.json"
    bad.write_text('{"cell.r1.c1": "pink"}')
    assert main(["simulate", "crypts-1", "--marks", str(bad), "--out", str(tmp_path)]) == StateError.exit_code
    assert "cannot carry mark 'pink'" in capsys.readouterr().err
    assert main(["simulate", "crypts-1", "--random", "--set", "oops", "--out", str(tmp_path)]) == SimulatorError.exit_code
    assert "is not KEY=VALUE" in capsys.readouterr().err
    assert main(["simulate", "crypts-1", "--marks", str(tmp_path / "missing.json"),
                 "--out", str(tmp_path)]) == 50
    assert "cannot read marks file" in capsys.readouterr().err


def test_truth_page_corners_match_the_page_outline_without_markers(crypts):
    """Independent of ArUco: the page's outline found in the photo sits on the truth corners."""
    over = {"output_long_side": 1000, "background": "dark_desk", "rotation_deg": 20.0,
            "tilt_deg": 15.0, "shadow": 0.0, "glare": 0.0, "vignette": 0.0, "light_gradient": 0.0,
            "page_shadow": 0.0, "photo_orientation": "match", "k1": 0.0, "k2": 0.0}
    photo = simulate_photo(crypts, {}, seed=3, preset="easy", markers=False, overrides=over)
    grey = cv2.cvtColor(_decode(photo.jpeg), cv2.COLOR_RGB2GRAY)
    cs, _ = cv2.findContours((grey > 100).astype(np.uint8), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_NONE)
    page = max(cs, key=cv2.contourArea).reshape(-1, 2).astype(float) + 0.5
    truth = np.array(photo.truth["page_corners_px"])
    # every outline point lies on the truth quadrilateral's edges (distance to nearest edge)
    d = np.full(len(page), np.inf)
    for a, b in zip(truth, np.roll(truth, -1, 0)):
        t = np.clip(((page - a) @ (b - a)) / ((b - a) @ (b - a)), 0, 1)
        d = np.minimum(d, np.hypot(*(a + t[:, None] * (b - a) - page).T))
    assert np.percentile(d, 95) < 1.5, f"outline off the truth page edges by {np.percentile(d, 95):.2f} px"
    assert cv2.contourArea(page.astype(np.float32)) == pytest.approx(cv2.contourArea(truth.astype(np.float32)), rel=0.01)


def test_game_marks_for_a_game_without_an_engine_is_a_clear_error():
    from calibration.template import validate_template_dict
    from sheetcheck.commands.simulate import game_marks
    doc = {"format_version": 1, "id": "pirates-1", "version": "0.1.0", "game": "pencil_pirates",
           "level": 1, "title": "P", "page": {"size": "A4"},
           "markers": {"dictionary": "DICT_4X4_50", "items": [
               {"id": 40, "corner": "top_left", "x": 5, "y": 5, "size": 12},
               {"id": 41, "corner": "top_right", "x": 193, "y": 5, "size": 12},
               {"id": 42, "corner": "bottom_right", "x": 193, "y": 280, "size": 12},
               {"id": 43, "corner": "bottom_left", "x": 5, "y": 280, "size": 12}]},
           "regions": [{"id": "a", "kind": "box", "marks": ["empty", "red"],
                        "shape": {"type": "rect", "x": 20, "y": 20, "w": 8, "h": 8}}]}
    t = validate_template_dict(doc)
    with pytest.raises(StateError, match="no rules engine for game 'pencil_pirates'"):
        game_marks(t, 0)
    # the simulator itself still photographs such a sheet
    photo = simulate_photo(t, {"a": "red"}, seed=0, preset="easy", overrides={"output_long_side": 400})
    assert photo.truth["marks"] == {"a": "red"}


@pytest.mark.parametrize("key,value,message", [
    ("k1", 5, "lens distortion k1=5.0"),
    ("exposure", 0, "exposure 0.0 must be"),
    ("offset_x", 3, "offset_x 3.0 must be -1..1"),
    ("output_long_side", 50, "output_long_side 50 must be"),
])
def test_out_of_range_conditions_are_refused(key, value, message):
    with pytest.raises(SimulatorError, match=message):
        sample_conditions("typical", np.random.default_rng(0), {key: value})


# --- the varied painter ----------------------------------------------------------------------

from sheetcheck.simulator import PAINTERS, varied_hand  # noqa: E402
from sheetcheck.simulator.paint import (VARIED_CROSS_STYLES, paint_varied,  # noqa: E402
                                        sample_varied_hand, srgb_to_linear, varied_pencils)

#: sha256 of the default painter's output before the varied painter was added (commit f37811e~1,
#: checked against that tree): the default painter must stay bit-identical, corpora depend on it.
DEFAULT_PAINT_SHA = "672f43aae1d02e750985525328c78ebe22a0407d43f6a86fa572ba91869ce5b7"
DEFAULT_PHOTO_SHA = "b548d2eb2d1112075bd09ec972bf9822323cc74e2d7f7b0ab2ddf09c8dc8e6c2"


def _sha(a: np.ndarray) -> str:
    import hashlib

    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_default_painter_output_is_unchanged(reefs):
    marks = random_marks(reefs, np.random.default_rng(4), fill=0.8)
    marks.update({r.id: "crossed" for r in reefs.readable_regions()
                  if "crossed" in r.marks and r.kind == "star"})
    assert {"crossed", "written", "orange", "empty"} <= set(marks.values())
    cond = sample_conditions("typical", np.random.default_rng(5))
    pencils = pencils_for(cond, np.random.default_rng(6))
    out = paint_sheet(render_blank(reefs, dpi=60.0), reefs, marks, dpi=60.0,
                      rng=np.random.default_rng(7), pencils=pencils, hand=cond["hand"])
    assert _sha(out) == DEFAULT_PAINT_SHA, "the default painter's strokes changed"
    crypts2 = get_template("crypts-2")
    photo = simulate_photo(crypts2, random_marks(crypts2, np.random.default_rng(1)), seed=1,
                           preset="hard", overrides={"output_long_side": 320})
    assert _sha(photo.image) == DEFAULT_PHOTO_SHA, "a default photo changed (painter or its streams)"
    assert "painter" not in photo.truth["conditions"]


def _crossable(template):
    return {r.id: "crossed" for r in template.readable_regions() if "crossed" in r.marks}


def test_varied_painter_is_deterministic_records_itself_and_keeps_the_camera(crypts):
    marks = {**random_marks(crypts, np.random.default_rng(0), fill=0.6),
             **dict(list(_crossable(crypts).items())[:6])}
    a = simulate_photo(crypts, marks, seed=9, painter="varied", overrides=SMALL)
    b = simulate_photo(crypts, marks, seed=9, painter="varied", overrides=SMALL)
    c = simulate_photo(crypts, marks, seed=10, painter="varied", overrides=SMALL)
    d = simulate_photo(crypts, marks, seed=9, overrides=SMALL)
    assert a.jpeg == b.jpeg and a.truth == b.truth
    assert a.jpeg != c.jpeg and a.truth["conditions"]["hand"] != c.truth["conditions"]["hand"]
    ca, cd = a.truth["conditions"], d.truth["conditions"]
    assert ca["painter"] == "varied" and ca["hand"]["painter"] == "varied"
    assert set(ca["pencil_strength"]) >= set(PENCIL_COLOURS) | {"graphite"}
    assert a.truth["marks"] == d.truth["marks"]
    # same seed, same camera, light and background: only the painting differs
    for k in ("rotation_deg", "tilt_deg", "colour_temp_k", "background", "jpeg_quality", "fill"):
        assert ca[k] == cd[k], k
    assert a.truth["homography"] == d.truth["homography"]
    assert a.jpeg != d.jpeg
    json.dumps(a.truth)


def test_varied_painter_overrides_and_unknown_painter(crypts):
    photo = simulate_photo(crypts, {}, seed=1, painter="varied",
                           overrides={**SMALL, "hand.cross_style": "slash", "hand.pressure": "0.2",
                                      "rotation_deg": 90})
    c = photo.truth["conditions"]
    assert c["hand"]["cross_style"] == "slash" and c["hand"]["pressure"] == 0.2
    assert c["rotation_deg"] == 90.0
    with pytest.raises(SimulatorError, match="unknown hand condition.*hand.nonsense"):
        simulate_photo(crypts, {}, seed=1, painter="varied", overrides={"hand.nonsense": 1})
    with pytest.raises(SimulatorError, match="hand.cross_style must be one of slash"):
        simulate_photo(crypts, {}, seed=1, painter="varied", overrides={"hand.cross_style": "tick"})
    with pytest.raises(SimulatorError, match="unknown painter 'picasso'"):
        simulate_photo(crypts, {}, seed=1, painter="picasso")
    assert "varied" in PAINTERS


def _region_darkness(painted, blank, region, s):
    """The fraction of light the marks took away at each blank-paper pixel of ``region``'s box
    (1-D; printed ink is left out: 8-bit rounding makes the ratio meaningless there)."""
    x0, y0, x1, y1 = (np.array(region.shape.bbox()) * s).astype(int)
    lum = lambda a: srgb_to_linear(a[y0:y1, x0:x1] / 255.0) @ np.float32([0.2126, 0.7152, 0.0722])
    paper = lum(blank)
    return (1 - lum(painted) / np.maximum(paper, 1e-3))[paper > 0.5]


def _varied_paint(template, marks, seed, dpi, **hand_keys):
    hand = {**sample_varied_hand(np.random.default_rng(seed)), "stray_marks": 0, **hand_keys}
    pencils, strength = varied_pencils(np.random.default_rng(seed + 1000))
    blank = render_blank(template, dpi=dpi)
    return blank, paint_varied(blank, template, marks, dpi=dpi, rng=np.random.default_rng(seed),
                               pencils=pencils, hand=hand, strength=strength), hand


def test_varied_painter_really_varies_yet_every_cross_is_visible(crypts):
    """Across hands the crossing strokes range from faint to heavy, but none is so faint that a
    person would not see it; that is what makes a crossed region 'crossed'."""
    dpi = 80.0
    s = dpi / 25.4
    marks = _crossable(crypts)
    stroke_darkness, styles = [], set()
    for seed in range(14):
        blank, painted, hand = _varied_paint(crypts, marks, seed, dpi)
        styles.add(hand["cross_style"])
        regions = [r for r in crypts.readable_regions() if r.id in marks]
        dark = [_region_darkness(painted, blank, r, s) for r in regions]
        for r, d in zip(regions, dark):
            # the darkest stroke pixels of every crossed region (a thin slash is only ~30 px
            # at this dpi): clearly more than the paper's grain
            assert np.sort(d)[-15:].mean() > 0.15, f"seed {seed}: {r.id} crossed invisibly"
        on = np.concatenate([d[d > 0.03] for d in dark])
        stroke_darkness.append(float(on.mean()))
    assert max(stroke_darkness) - min(stroke_darkness) > 0.25, stroke_darkness
    assert len(styles) >= 5, styles


def test_varied_ticks_mark_boxes_thinly_but_visibly(crypts):
    """A hand that ticks boxes off leaves a thin, clearly visible check mark in most coloured
    boxes (far less of the box covered than by a fill); symbols are still coloured in; a fifth
    of the hands tick."""
    dpi = 80.0
    s = dpi / 25.4
    boxes = [r for r in crypts.readable_regions() if r.kind == "box"]
    symbols = [r for r in crypts.readable_regions() if r.kind == "symbol"][:6]
    marks = {r.id: "blue" for r in boxes + symbols}
    share = {}
    for tick in (False, True):
        blank, painted, hand = _varied_paint(crypts, marks, 5, dpi, tick_boxes=tick,
                                             partial_rate=0.0, style="burnish", style_loyalty=1.0)
        dark = {r.id: _region_darkness(painted, blank, r, s) for r in boxes + symbols}
        share[tick] = {k: float((d > 0.1).mean()) for k, d in dark.items()}
        for r in boxes:
            # every box shows its mark: the darkest stroke pixels well above the paper's grain
            assert np.sort(dark[r.id])[-15:].mean() > 0.15, f"{r.id} (tick={tick}) invisible"
    ticked = [r.id for r in boxes if share[True][r.id] < 0.5 * share[False][r.id]]
    assert len(ticked) >= 0.7 * len(boxes), (len(ticked), len(boxes))
    assert min(share[True][r.id] for r in symbols) > 0.3  # symbols are coloured in, not ticked
    rate = np.mean([sample_varied_hand(np.random.default_rng(k))["tick_boxes"] for k in range(300)])
    assert 0.12 < rate < 0.28, rate


def test_varied_pencils_stay_nameable_and_span_each_colour():
    def hue(rgb):
        return int(cv2.cvtColor(np.uint8([[rgb]]), cv2.COLOR_RGB2HSV_FULL)[0, 0, 0]) * 360 / 256

    draws = [varied_pencils(np.random.default_rng(k)) for k in range(200)]
    hues = {c: np.array([hue(p[c]) for p, _ in draws]) for c in PENCIL_COLOURS}
    # within what a person still names that colour (red and purple wrap round 0/360)
    assert ((hues["orange"] > 10) & (hues["orange"] < 53)).all()
    assert ((hues["blue"] > 185) & (hues["blue"] < 255)).all()
    assert ((hues["green"] > 70) & (hues["green"] < 185)).all()
    assert ((hues["red"] > 320) | (hues["red"] < 12)).all()
    assert ((hues["purple"] > 255) & (hues["purple"] < 325)).all()
    # and wide within it: yellow-orange to red-orange, cyan to ultramarine, yellow-green to teal
    assert np.ptp(hues["orange"]) > 15 and np.ptp(hues["blue"]) > 30 and np.ptp(hues["green"]) > 40
    grey = [p["graphite"][0] for p, _ in draws]
    assert min(grey) < 70 and max(grey) > 145  # 4B to 2H
    st = [s["orange"]["strength"] for _, s in draws]
    assert min(st) < 0.55 and max(st) > 0.9


def test_varied_erased_ghosts_stay_faint_and_written_numbers_show(reefs):
    dpi = 80.0
    s = dpi / 25.4
    empty = {r.id: "empty" for r in reefs.readable_regions()}
    blank, painted, _ = _varied_paint(reefs, empty, 3, dpi, erase_rate=1.0)
    dark = [_region_darkness(painted, blank, r, s) for r in reefs.readable_regions()
            if r.shape.type != "segment" and r.kind != "connection"]
    assert max(float(d.mean()) for d in dark) < 0.1  # a ghost, never a mark
    assert np.mean([float(d.mean()) > 0.004 for d in dark]) > 0.8  # but there
    written = {r.id: "written" for r in reefs.readable_regions() if "written" in r.marks}
    for seed in range(4):
        blank, painted, hand = _varied_paint(reefs, written, seed, dpi, write_pressure=0.25)
        for r in reefs.readable_regions():
            if r.id in written:
                d = _region_darkness(painted, blank, r, s)
                assert np.sort(d)[-15:].mean() > 0.15, f"seed {seed}: number in {r.id} invisible"


def _make_corpus_script():
    """scripts/make_corpus.py as a module (it is a script, not part of the package)."""
    from _scripts import load_script
    return load_script("make_corpus")


def test_make_corpus_varied_painter(tmp_path):
    mc = _make_corpus_script()
    assert mc.main(["--out", str(tmp_path), "--count", "1", "--seed", "99000", "--workers", "1",
                    "--painter", "varied", "--set", "output_long_side=400"]) == 0
    truth = json.loads(next(tmp_path.glob("*.truth.json")).read_text())
    assert truth["painter"] == "varied" and truth["conditions"]["painter"] == "varied"
    assert truth["conditions"]["hand"]["cross_style"] in VARIED_CROSS_STYLES
    assert mc.main(["--out", str(tmp_path), "--count", "1", "--painter", "varied",
                    "--set", "hand.nonsense=1"]) == 2


def test_make_corpus_cross_rate(tmp_path):
    """--cross-rate (training corpora) crosses out more regions and changes nothing else: the
    other regions keep the marks the seed gives, and the rate is recorded in the truth."""
    mc = _make_corpus_script()
    plain, crossed = tmp_path / "plain", tmp_path / "crossed"
    common = ["--count", "1", "--seed", "99100", "--workers", "1", "--set", "output_long_side=400"]
    assert mc.main(["--out", str(plain), *common]) == 0
    assert mc.main(["--out", str(crossed), *common, "--cross-rate", "0.3"]) == 0
    a = json.loads(next(plain.glob("*.truth.json")).read_text())
    b = json.loads(next(crossed.glob("*.truth.json")).read_text())
    assert "cross_rate" not in a["corpus"] and b["corpus"]["cross_rate"] == 0.3
    template = get_template(a["template"])
    crossable = {r.id for r in template.readable_regions()
                 if "crossed" in r.marks and r.kind != "swatch"}
    changed = {k for k in a["marks"] if a["marks"][k] != b["marks"][k]}
    assert changed and changed <= crossable
    assert all(b["marks"][k] == "crossed" for k in changed)
    n_a = sum(v == "crossed" for v in a["marks"].values())
    n_b = sum(v == "crossed" for v in b["marks"].values())
    assert n_b >= n_a + 0.15 * len(crossable)  # about 0.3 of them, far above a game's few
    assert a["conditions"]["colour_temp_k"] == b["conditions"]["colour_temp_k"]
    with pytest.raises(SystemExit) as e:  # argparse's usage error
        mc.main(["--out", str(crossed), *common, "--cross-rate", "1.5"])
    assert e.value.code == 2


def test_a_coloured_connection_is_always_a_line_a_person_sees(reefs, monkeypatch):
    """The default painter's lightest hands on coarse grain could leave a connection no one
    could see, yet the truth called it coloured (session 17: one read empty with confidence).
    Every coloured connection now leaves at least LINE_INK_FLOOR_MM of ink per mm, measured
    here on the painted sheet itself (darkness summed over the sheet, one line at a time)."""
    import sheetcheck.simulator.paint as paint

    dpi = 120.0
    s = dpi / 25.4
    blank = render_blank(reefs, dpi=dpi)
    pencils = {"orange": [245, 150, 40], "red": [200, 40, 50], "blue": [40, 90, 180],
               "green": [40, 140, 70], "purple": [120, 60, 150], "graphite": [90, 90, 95]}
    hand = {**sample_hand(np.random.default_rng(0)), "pressure": 0.12, "grain_strength": 0.7,
            "stroke_width_mm": 0.35, "stray_marks": 0}
    conns = [r for r in reefs.readable_regions() if r.kind == "connection"][:24:3]
    # (the sheet painted with nothing on it: the same 8-bit round trip as a painted one)
    unpainted = paint_sheet(blank, reefs, {}, dpi=dpi, rng=np.random.default_rng(0),
                            pencils=pencils, hand=hand)
    lin_blank = paint.srgb_to_linear(unpainted.astype(np.float32) / 255) @ [0.2126, 0.7152, 0.0722]

    def inks():
        out = []
        for k, r in enumerate(conns):
            painted = paint_sheet(blank, reefs, {r.id: "orange"}, dpi=dpi,
                                  rng=np.random.default_rng(k), pencils=pencils, hand=hand)
            lum = paint.srgb_to_linear(painted.astype(np.float32) / 255) @ [0.2126, 0.7152, 0.0722]
            # (only where the pencil changed a pixel: black print stays black either way)
            changed = (painted != unpainted).any(-1) & (lin_blank > 0.02)
            dark = np.clip(1 - lum[changed] / lin_blank[changed], 0, 1)
            p = r.shape.params
            length = float(np.hypot(*(np.subtract(p["p2"], p["p1"]) * s)))
            out.append(float(dark.sum()) / length / s)
        return np.array(out)

    floored = inks()
    # (8-bit encoding of the painted sheet loses a little of the faintest tail)
    assert floored.min() >= 0.9 * paint.LINE_INK_FLOOR_MM, floored.round(3)
    monkeypatch.setattr(paint, "LINE_INK_FLOOR_MM", 0.0)
    unfloored = inks()
    # the same hand without the floor: lines nobody could see (the test can fail)
    assert unfloored.max() < 0.05, unfloored.round(3)
