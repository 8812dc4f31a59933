"""The bundled sample photos: coverage, size budget, truth and expected reports that agree."""

import json
from pathlib import Path

import pytest

from calibration.template import get_template, template_ids

SAMPLES = Path(__file__).resolve().parents[1] / "sample_photos"
PHOTOS = sorted(SAMPLES.glob("*.jpg"))


def _truth(photo):
    return json.loads(photo.with_name(photo.name[:-4] + ".truth.json").read_text())


def _expected(photo):
    return json.loads(photo.with_name(photo.name[:-4] + ".expected.json").read_text())


def test_samples_cover_every_sheet_preset_and_marker_case():
    assert len(PHOTOS) >= 12
    truths = [_truth(p) for p in PHOTOS]
    assert {t["template"] for t in truths} == set(template_ids())
    assert {t["preset"] for t in truths} == {"easy", "typical", "hard"}
    assert {t["markers"] for t in truths} == {True, False}


@pytest.mark.parametrize("photo", PHOTOS, ids=lambda p: p.name)
def test_each_sample_is_small_and_complete(photo):
    assert photo.stat().st_size < 1_000_000
    truth = _truth(photo)
    t = get_template(truth["template"])
    assert truth["template_version"] == t.version
    assert set(truth["marks"]) == {r.id for r in t.readable_regions()}
    expected = _expected(photo)
    assert expected["template"]["id"] == t.id
    assert expected["marks"] == truth["marks"]


@pytest.mark.parametrize("photo", [p for p in PHOTOS if "-break-" in p.name], ids=lambda p: p.name)
def test_labelled_rule_breaks_are_what_the_expected_report_finds(photo):
    truth = _truth(photo)
    label = truth["violation"]
    assert label["kind"] in photo.name
    expected = _expected(photo)
    assert expected["verdict"] == "DISCREPANCY"
    assert set(label["rules"]) <= set(expected["findings"]) and label["rules"]


def test_there_are_labelled_rule_breaks_in_both_games():
    games = {_truth(p)["game"] for p in PHOTOS if "-break-" in p.name}
    assert games == {"pick_a_pen_crypts", "pick_a_pen_reefs"}
