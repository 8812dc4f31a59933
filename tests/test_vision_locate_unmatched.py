"""A template the routes did not register is still a candidate for identification.

The whole-photo feature route only proposes the templates whose rendering had enough ORB
matches, and the page route only those its registration reached; the levels of one game share
most of their print, so the level actually photographed can be missing from the candidates
while a sibling level is registered well. Seen on the default-painter corpus seed 1200000
(hard1200k reefs-3-hard-nm-s1200143, a reefs-3 sheet upside down under a strong shadow: reefs-3
had no ORB match, was never asked, and the photo was read as reefs-1 on an identification
margin of 0.047, every region wrong). Every template of the winner's page size is now scored
under the registered homographies (``_identify``)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from calibration.template import get_template
from sheetcheck.simulator import simulate_photo
from vision import locate as L

ROOT = Path(__file__).resolve().parents[1]


def _make_corpus():
    spec = importlib.util.spec_from_file_location("make_corpus", ROOT / "scripts" / "make_corpus.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules["make_corpus"] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def reefs3_photo():
    """The corpus photo itself: make_corpus's photo k=143 of seed 1200000 (same bytes)."""
    mc = _make_corpus()
    (tid, preset, markers, seed), = [p for p in mc.plan(144, 1200000) if p[3] == 1200143]
    assert (tid, preset, markers) == ("reefs-3", "hard", False)
    t = get_template(tid)
    marks, _ = mc.corpus_marks(t, seed)
    return simulate_photo(t, marks, seed=seed, preset=preset, markers=markers, painter="default")


def test_the_unmatched_level_is_identified(reefs3_photo):
    from vision.decode import decode_photo
    image = decode_photo(reefs3_photo.jpeg).image
    loc = L.locate_sheet(image)
    assert loc.template.id == "reefs-3", loc.details.get("identification")
    ident = loc.details["identification"]
    # every level of the game was asked, whatever the routes registered
    assert {"reefs-1", "reefs-2", "reefs-3"} <= set(ident)
    assert ident["reefs-3"] > max(ident["reefs-1"], ident["reefs-2"]) + 0.05
    assert not loc.details["ambiguous"]
    assert loc.details["identification_margin"] >= 0.08


def test_a_template_without_feature_matches_is_still_asked(reefs3_photo, monkeypatch):
    """Whatever the feature route registered, a same-sized template it left out is scored."""
    from vision.decode import decode_photo
    image = decode_photo(reefs3_photo.jpeg).image
    real = L._locate_by_global_features

    def without_reefs3(image_grey, cands):
        return [g for g in real(image_grey, cands) if g[1].id != "reefs-3"]

    monkeypatch.setattr(L, "_locate_by_global_features", without_reefs3)
    seen = []
    real_identify = L._identify

    def spy(image, options):
        seen.append([t.id for t, _ in options])
        return real_identify(image, options)

    monkeypatch.setattr(L, "_identify", spy)
    loc = L.locate_sheet(image)
    assert loc.template.id == "reefs-3"
    assert seen and {"reefs-1", "reefs-2", "reefs-3"} <= set(seen[-1])
