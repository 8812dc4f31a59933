"""A stain on the paper is no pencil mark: regions it reaches are flagged, not read as its colour.

Session 30 (docs/EVALUATION.md): a coffee ring crossing an empty Reefs route read as an orange
stroke at 0.99+, its arc across a Crypts box as a crossing-out. ``vision.marks._stains`` looks
for colour (or darkness) in clusters on the bare paper between the regions, where pencil does
not reach, and ``_check_stains`` flags the confident marks of regions beside it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vision import marks as M
from vision.pipeline import read_photo

ROOT = Path(__file__).resolve().parents[1]
STAIN_REASON = "a stain or stray colour"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def stained(tmp_path_factory):
    """Photo 184 of the spent default corpus 2900000 (reefs-2, easy, markers) with the coffee
    ring ``make_variants.py --kind coffee --seed 30`` gives it: two empty routes under the ring
    read "orange" at 0.99+ without the check. Returns (clean bytes, stained bytes, truth)."""
    out = tmp_path_factory.mktemp("stain")
    mc = _script("make_corpus")
    (tid, preset, markers, seed), = [p for p in mc.plan(185, 2900000) if p[3] == 2900184]
    assert (tid, preset, markers) == ("reefs-2", "easy", True)
    stem, _, _ = mc.make_one((tid, preset, markers, seed, str(out), "default", {}, 0.0))
    photo = out / f"{stem}.jpg"
    truth = json.loads((out / f"{stem}.truth.json").read_text())
    mv = _script("make_variants")
    rng = np.random.default_rng([30, seed, mv.KINDS.index("coffee")])
    img, _ = mv.coffee(np.asarray(Image.open(photo).convert("RGB")), truth, rng)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "JPEG", quality=92)
    return photo.read_bytes(), buf.getvalue(), truth


def _confident_errors(reading, truth):
    return sorted(rid for rid, r in reading.readings.items()
                  if not r.review and r.mark != truth["marks"][rid])


def test_a_coffee_ring_over_empty_routes_is_flagged_not_read_orange(stained, monkeypatch):
    _, data, truth = stained
    reading = read_photo(data)
    assert _confident_errors(reading, truth) == []
    flagged = {rid for rid, r in reading.readings.items() if STAIN_REASON in (r.reason or "")}
    # what the check flags: the routes the ring made orange among them
    wrong = {rid for rid in flagged if reading.readings[rid].mark != truth["marks"][rid]}
    assert wrong and all(truth["marks"][rid] == "empty" and reading.readings[rid].mark == "orange"
                         for rid in wrong)
    # without the check those readings were confident (the check is what catches them)
    monkeypatch.setattr(M, "_check_stains", lambda readings, *a, **k: readings)
    again = read_photo(data)
    assert set(_confident_errors(again, truth)) == wrong


def test_the_same_photo_without_the_ring_has_no_stain(stained):
    clean, _, truth = stained
    reading = read_photo(clean)
    assert not any(STAIN_REASON in (r.reason or "") for r in reading.readings.values())
    assert _confident_errors(reading, truth) == []


def test_only_confident_marks_beside_the_stain_are_flagged():
    rd = M.RegionReading
    readings = {"a": rd("a", "box", "orange", 0.999, False, (("orange", 0.999),), {}, ""),
                "b": rd("b", "box", "empty", 0.999, False, (("empty", 0.999),), {}, ""),
                "c": rd("c", "box", "red", 0.999, False, (("red", 0.999),), {}, ""),
                "d": rd("d", "box", "crossed", 0.5, True, (("crossed", 0.5),), {}, "low")}

    class R:
        def __init__(self, i):
            self.id = i
    regions = [R(i) for i in "abcd"]
    out = M._check_stains(readings, regions, np.array([True, True, False, True]), 0.97)
    assert out["a"].review and STAIN_REASON in out["a"].reason and out["a"].confidence < 0.97
    assert out["b"] is readings["b"]  # an empty reading stays (the stain is not a mark)
    assert out["c"] is readings["c"]  # not beside the stain
    assert out["d"] is readings["d"]  # already flagged, with its own reason
    assert M._check_stains(readings, regions, None, 0.97) is readings
