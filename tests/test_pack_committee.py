"""scripts/pack_committee.py: fitted models packed into one model file with a committee."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np

from vision.learned import COMMITTEE_FORMAT, MODEL_DIR, MODEL_FORMAT, load_model

ROOT = Path(__file__).resolve().parents[1]


def _script():
    spec = importlib.util.spec_from_file_location("pack_committee", ROOT / "scripts" / "pack_committee.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_pack_two_fits_into_a_committee_that_loads(tmp_path, capsys):
    pack = _script()
    v5, v7 = MODEL_DIR / "reader-v5.json", MODEL_DIR / "reader-v7.json"
    out = tmp_path / "both.json"
    assert pack.main([str(v7), str(v5), "--id", "reader-x", "--out", str(out)]) == 0
    assert "with 1 second opinion" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["format"] == COMMITTEE_FORMAT and doc["id"] == "reader-x" and doc["fit"] == "reader-v7"
    assert [m["id"] for m in doc["committee"]] == ["reader-x.2"] and doc["committee"][0]["fit"] == "reader-v5"
    model = load_model(out)
    first, second = load_model(v7), load_model(v5)
    assert model.rule == first.rule and model.committee[0].rule == second.rule
    X = np.asarray(json.loads((MODEL_DIR / "reader-v7.check.json").read_text())["X"], np.float32)
    np.testing.assert_array_equal(model.raw_scores(X), first.raw_scores(X))
    np.testing.assert_array_equal(model.committee[0].raw_scores(X), second.raw_scores(X))
    # the first fit's check rows go with it
    assert json.loads(out.with_suffix(".check.json").read_text())["model"] == "both.json"


def test_pack_refuses_one_model_and_a_committee_of_committees(tmp_path, capsys):
    pack = _script()
    v7 = MODEL_DIR / "reader-v7.json"
    out = tmp_path / "c.json"
    assert pack.main([str(v7), "--id", "x", "--out", str(out)]) == 2
    assert "a committee needs at least two models" in capsys.readouterr().err
    assert pack.main([str(v7), str(v7), "--id", "x", "--out", str(out)]) == 0
    assert pack.main([str(out), str(v7), "--id", "y", "--out", str(tmp_path / "d.json")]) == 2
    assert f"model 1 is not a {MODEL_FORMAT!r} document" in capsys.readouterr().err
    assert not (tmp_path / "d.json").exists()
