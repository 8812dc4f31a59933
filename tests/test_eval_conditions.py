"""`sheetcheck eval`: accuracy per photo condition (light, blur and resolution, geometry,
camera, hand and pencils), binned from the truth files' conditions."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibration.template import get_template
from sheetcheck.cli import main
from sheetcheck.commands.eval import (CONDITIONS, UNKNOWN, aggregate_conditions, condition_bins,
                                      evaluate, format_conditions, format_report, page_px_per_mm)
from sheetcheck.simulator import random_marks, simulate_photo

#: The keys eval wrote before the per-condition figures: sheetcheck.eval/1 is a contract, only
#: additions are allowed.
EVAL_KEYS_BEFORE = {
    "format", "folder", "photos", "photos_failed", "regions", "accuracy", "by_kind", "by_colour",
    "confusion", "hard_pairs", "by_preset", "by_markers", "by_template", "sheets_without_error",
    "sheets_nothing_flagged", "sheets_nothing_flagged_easy_typical",
    "sheets_nothing_flagged_by_preset", "regions_flagged", "errors_flagged", "confident_errors",
    "lowest_confidence_of_a_wrong_reading_not_flagged", "highest_confidence_of_a_wrong_reading",
    "failed", "misidentified", "confident_errors_on_identified_sheets", "timings_ms_median",
    "sheets"}
SHEET_KEYS_BEFORE = {"photo", "preset", "markers", "template", "errors", "flagged"}
BIN_KEYS = {"accuracy", "correct", "total", "flagged_share", "wrong", "confident_errors", "sheets",
            "photos_failed"}


def _truth(conditions, *, corners=None, marks=None, **top):
    return {"template": "crypts-1", "marks": marks or {"a": "empty"}, "conditions": conditions,
            **({"page_corners_px": corners} if corners is not None else {}), **top}


def _page(scale, w=210.0, h=297.0, x0=100.0, y0=50.0):
    """Corners of an upright page of w x h mm at ``scale`` px/mm."""
    return [[x0, y0], [x0 + w * scale, y0], [x0 + w * scale, y0 + h * scale], [x0, y0 + h * scale]]


def test_known_conditions_fall_in_their_bins():
    cond = {"colour_temp_k": 3200.0, "shadow": 0.5, "glare": 0.2, "exposure": 0.7,
            "defocus_px": 1.0, "motion_px": 1.5, "dof_blur_px": 0.5, "curl_type": "fold",
            "tilt_deg": 33.0, "cutoff": 0.0, "jpeg_quality": 64, "prior_jpeg_quality": 80,
            "shot_noise": 0.005, "read_noise": 0.01, "background": {"name": "wood"},
            "painter": "default", "pencil_brand": "derwent",
            "hand": {"pressure": 0.9, "style": "hatch", "cross_style": "x"}}
    marks = {"box.1": "red", "swatch.red": "red", "swatch.blue": "empty"}
    b = condition_bins(_truth(cond, corners=_page(4.0), marks=marks), page_mm=(210.0, 297.0))
    assert b == {
        "colour_temp": "warm <4000 K", "shadow": "strong >=0.35", "glare": "weak <0.3",
        "exposure": "under <0.8", "blur_px": "2-4 px",
        # 3 px of blur over 4 px per mm of page: 0.75 mm
        "blur_mm": "0.4-0.8 mm", "px_per_mm": "3-4.5 px/mm", "curl": "fold", "tilt": ">=30 deg",
        "cutoff": "no", "jpeg_quality": "<70", "recompressed": "yes",
        # sqrt(0.005 * 0.8 + 0.01^2) = 0.064
        "noise": "high >=0.05", "background": "wood", "painter": "default",
        "pencil_brand": "derwent", "pencil_medium": UNKNOWN, "pressure": "heavy >=0.8",
        "fill_style": "hatch", "cross_style": "x", "swatches": "some"}
    assert list(b) == list(CONDITIONS)


@pytest.mark.parametrize("key, value, condition, expected", [
    ("colour_temp_k", 3999.9, "colour_temp", "warm <4000 K"),
    ("colour_temp_k", 4000.0, "colour_temp", "neutral 4000-6500 K"),
    ("colour_temp_k", 6500.0, "colour_temp", "neutral 4000-6500 K"),
    ("colour_temp_k", 6501.0, "colour_temp", "cool >6500 K"),
    ("shadow", 0.0, "shadow", "none"),
    ("shadow", 0.2, "shadow", "light <0.35"),
    ("glare", 0.0, "glare", "none"),
    ("glare", 0.45, "glare", "strong >=0.3"),
    ("exposure", 1.0, "exposure", "normal 0.8-1.25"),
    ("exposure", 1.6, "exposure", "over >=1.25"),
    ("tilt_deg", 9.99, "tilt", "<10 deg"),
    ("tilt_deg", 10.0, "tilt", "10-20 deg"),
    ("cutoff", 0.2, "cutoff", "yes"),
    ("prior_jpeg_quality", 0, "recompressed", "no"),
    ("jpeg_quality", 85, "jpeg_quality", ">=85"),
    ("curl_type", "bend", "curl", "bend"),
    ("curl_type", "crumple", "curl", "crumple"),  # a type the bins do not list keeps its name
    ("pencil_medium", "wax", "pencil_medium", "wax"),
])
def test_bin_edges(key, value, condition, expected):
    assert condition_bins(_truth({key: value}))[condition] == expected


def test_missing_or_malformed_conditions_are_unknown():
    # nothing at all: every condition unknown (the truth's marks hold no swatch either)
    for truth in (_truth({}), {"marks": {}}, _truth("not a mapping"), _truth(None)):
        assert set(condition_bins(truth, page_mm=(210.0, 297.0)).values()) == {UNKNOWN}
    # malformed values, a hand that is not a mapping, a blur part missing
    b = condition_bins(_truth({"colour_temp_k": "hot", "shadow": True, "glare": float("nan"),
                               "hand": "left", "defocus_px": 1.0, "motion_px": 0.5,
                               "curl_type": 3, "background": "wood"},
                              corners=[[0, 0], [1, 0]]), page_mm=(210.0, 297.0))
    for c in ("colour_temp", "shadow", "glare", "pressure", "fill_style", "blur_px", "blur_mm",
              "px_per_mm", "curl", "background"):
        assert b[c] == UNKNOWN, c


def test_the_held_out_painters_hand_is_binned_by_the_keys_it_shares():
    # the held-out painter records its own hand (tip_mm, tremor_mm, a style of its own) and a
    # pencil medium; the shared keys are binned, the rest is ignored
    hand = {"painter": "heldout", "style": "diagonal_half", "pressure": 0.4, "tip_mm": 0.7,
            "tremor_mm": 0.1, "tick_boxes": True, "cross_style": "heavy_x"}
    b = condition_bins(_truth({"hand": hand, "painter": "heldout", "pencil_medium": "hard"}))
    assert (b["painter"], b["pressure"], b["fill_style"], b["cross_style"], b["pencil_medium"]) == \
        ("heldout", "light <0.5", "diagonal_half", "heavy_x", "hard")
    # the painter recorded at the top of the truth (make_corpus) when the conditions lack it
    assert condition_bins(_truth({}, painter="varied"))["painter"] == "varied"


def test_page_resolution_from_the_corners():
    assert page_px_per_mm(_truth({}, corners=_page(5.0)), (210.0, 297.0)) == pytest.approx(5.0)
    # the page drawn smaller than its size says: the mean resolution of the quad
    corners = _page(1.0, w=2 * 210.0, h=297.0 / 2)
    assert page_px_per_mm(_truth({}, corners=corners), (210.0, 297.0)) == pytest.approx(1.0)
    assert page_px_per_mm(_truth({}, corners=_page(5.0)), None) is None
    assert page_px_per_mm(_truth({}, corners=[[0, 0], [1, 1], [2, 2], [3, 3]]), (210.0, 297.0)) is None


def _photo(bins, regions, correct, flagged, confident=0, failed=False):
    return {"conditions": bins, "regions": regions, "correct": correct, "flagged": flagged,
            "confident_errors": confident, "failed": failed}


def test_aggregation_adds_up_and_counts_a_failed_photo_in_its_bins():
    warm = condition_bins(_truth({"colour_temp_k": 3000.0, "shadow": 0.5}))
    cool = condition_bins(_truth({"colour_temp_k": 7000.0, "shadow": 0.0}))
    photos = [_photo(warm, 100, 90, 20, confident=2),
              _photo(warm, 50, 0, 50, failed=True),  # not read: all wrong, all flagged
              _photo(cool, 80, 80, 4)]
    res = aggregate_conditions(photos)
    assert set(res) == set(CONDITIONS)
    for name, bins in res.items():
        assert sum(v["total"] for v in bins.values()) == 230, name
        assert sum(v["correct"] for v in bins.values()) == 170, name
        assert sum(v["sheets"] for v in bins.values()) == 3, name
        assert sum(v["photos_failed"] for v in bins.values()) == 1, name
        assert sum(v["confident_errors"] for v in bins.values()) == 2, name
        for v in bins.values():
            assert set(v) == BIN_KEYS and v["wrong"] == v["total"] - v["correct"]
    w = res["colour_temp"]["warm <4000 K"]
    assert (w["total"], w["correct"], w["wrong"], w["sheets"], w["photos_failed"]) == (150, 90, 60, 2, 1)
    assert w["accuracy"] == pytest.approx(0.6) and w["flagged_share"] == pytest.approx(70 / 150)
    assert res["colour_temp"]["cool >6500 K"]["accuracy"] == 1.0
    assert list(res["shadow"]) == ["none", "strong >=0.35"]  # empty bins are left out
    # conditions no photo records: every photo in "unknown"
    assert res["pressure"] == {UNKNOWN: res["pressure"][UNKNOWN]} and res["pressure"][UNKNOWN]["sheets"] == 3
    # bins in the documented order, values outside it by name, unknown last
    order = aggregate_conditions([_photo({"curl": c}, 1, 1, 0) for c in (UNKNOWN, "zz", "fold", "none")])
    assert list(order["curl"]) == ["none", "fold", "zz", UNKNOWN]
    text = "\n".join(format_conditions(res))
    assert "per condition" in text and "warm <4000 K" in text and "not read" in text
    assert json.loads(json.dumps(res)) == res


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two small simulated photos under known light, and one photo that cannot be read."""
    d = tmp_path_factory.mktemp("cond")
    truths = []
    for k, (tid, preset, over) in enumerate((
            ("crypts-1", "easy", {"colour_temp_k": 3000.0, "shadow": 0.0, "glare": 0.0}),
            ("reefs-1", "typical", {"colour_temp_k": 6000.0, "shadow": 0.4, "glare": 0.0}))):
        t = get_template(tid)
        ph = simulate_photo(t, random_marks(t, np.random.default_rng(70 + k)), seed=70 + k,
                            preset=preset, overrides={"output_long_side": 1280, **over})
        (d / f"p{k}.jpg").write_bytes(ph.jpeg)
        (d / f"p{k}.truth.json").write_text(json.dumps(ph.truth))
        truths.append(ph.truth)
    # a truncated file with the first photo's truth: not read, its regions wrong and flagged
    (d / "x.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (d / "x.truth.json").write_text(json.dumps(truths[0]))
    return d


def test_eval_reports_accuracy_per_condition(folder, tmp_path, capsys):
    out_json = tmp_path / "eval.json"
    assert main(["eval", str(folder), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    res = json.loads(out_json.read_text())
    # the figures eval reported before are all still there, each sheet's too
    assert EVAL_KEYS_BEFORE <= set(res) and res["format"] == "sheetcheck.eval/1"
    assert all(SHEET_KEYS_BEFORE <= set(s) for s in res["sheets"])
    assert res["photos"] == 3 and res["photos_failed"] == 1
    bc = res["by_condition"]
    assert set(bc) == set(CONDITIONS)
    for name, bins in bc.items():
        assert sum(v["total"] for v in bins.values()) == res["regions"] == res["accuracy"]["total"], name
        assert sum(v["correct"] for v in bins.values()) == res["accuracy"]["correct"], name
        assert sum(v["sheets"] for v in bins.values()) == 3, name
        assert sum(v["photos_failed"] for v in bins.values()) == 1, name
        assert sum(v["confident_errors"] for v in bins.values()) == res["confident_errors"]["count"], name
        assert sum(round(v["flagged_share"] * v["total"]) for v in bins.values()) == \
            res["regions_flagged"]["count"], name
    # within each preset: the same figures, split by the photos' presets
    bp = res["by_condition_by_preset"]
    assert set(bp) == {"easy", "typical"}
    for name, bins in bc.items():
        for b, v in bins.items():
            parts = [bp[p][name][b] for p in bp if b in bp[p][name]]
            for key in ("total", "correct", "wrong", "confident_errors", "sheets", "photos_failed"):
                assert sum(x[key] for x in parts) == v[key], (name, b, key)
    assert bp["typical"]["shadow"] == {"strong >=0.35": bc["shadow"]["strong >=0.35"]}
    # the overrides put the photos in their bins; the unread photo (p0's truth) lands with p0
    sheets = {s["photo"]: s for s in res["sheets"]}
    assert sheets["p0.jpg"]["conditions"]["colour_temp"] == "warm <4000 K"
    assert sheets["p1.jpg"]["conditions"]["shadow"] == "strong >=0.35"
    assert sheets["x.jpg"]["conditions"] == sheets["p0.jpg"]["conditions"]
    warm = bc["colour_temp"]["warm <4000 K"]
    n0 = sheets["p0.jpg"]["regions"]
    assert (warm["sheets"], warm["photos_failed"], warm["total"]) == (2, 1, 2 * n0)
    assert warm["correct"] == n0 - sheets["p0.jpg"]["errors"]
    assert bc["colour_temp"]["neutral 4000-6500 K"]["photos_failed"] == 0
    assert bc["painter"] == {"default": bc["painter"]["default"]}
    # the page's resolution is known from the truth, for the unread photo too
    assert UNKNOWN not in bc["px_per_mm"] and UNKNOWN not in bc["blur_mm"]
    # the text: a per-condition table after the existing sections
    assert text.index("per condition") > text.index("CONFIDENT ERRORS")
    assert "warm <4000 K" in text and "strong >=0.35" in text


def test_eval_result_round_trips_through_json(folder):
    res = evaluate(folder)
    again = json.loads(json.dumps(res))
    assert again == res
    assert format_report(again) == format_report(res)
