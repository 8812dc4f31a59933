"""scripts/pack_committee.py: fitted models packed into one model file with a committee."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vision.learned import COMMITTEE_FORMAT, MODEL_DIR, MODEL_FORMAT, load_model

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


def _script():
    return load_script("pack_committee")


def _sample_rows(tmp_path, stems) -> Path:
    """scripts/reader_dataset.py rows of bundled sample photos (read without the tone
    correction, as reader-v5 and reader-v7 were fitted)."""
    import shutil
    import sys

    sys.path.insert(0, str(ROOT / "scripts"))
    import reader_dataset

    photos = tmp_path / "photos"
    photos.mkdir()
    for stem in stems:
        for ext in (".jpg", ".truth.json"):
            shutil.copy(ROOT / "sample_photos" / f"{stem}{ext}", photos)
    rows = tmp_path / "calib.npz"
    assert reader_dataset.main([str(photos), "--out", str(rows), "--workers", "1",
                                "--tone", "off"]) == 0
    return rows


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


def test_a_committee_packed_to_read_as_one_decides_as_the_reader_does(tmp_path, capsys,
                                                                      monkeypatch):
    """--combine mean: one rule chosen on the members' averaged probabilities over the
    calibration rows; loaded, the reader's verdicts on a photo are the dataset's (the rule's:
    the reader's confirmations beyond it, of blank regions and of sure colours on clear photos,
    vision.marks._confirm_blank and _confirm_sure, are off here)."""
    import vision.marks as marks_mod
    from vision.learned import MEAN_FORMAT
    from vision.marks import MARKS
    from vision.pipeline import read_photo

    rows = _sample_rows(tmp_path, ("crypts-1-easy-s1", "reefs-1-typical-s8", "crypts-2-typical-s2"))
    import committee_check  # (scripts/ is on the path since _sample_rows)
    pack = _script()
    v5, v7 = MODEL_DIR / "reader-v5.json", MODEL_DIR / "reader-v7.json"
    out = tmp_path / "one.json"
    assert pack.main([str(v7), str(v5), "--id", "reader-m", "--out", str(out),
                      "--combine", "mean", "--calib", str(rows)]) == 0
    assert "2 models read as one" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    d = dict(np.load(rows))
    assert doc["format"] == MEAN_FORMAT and doc["combine"] == "mean"
    assert doc["mean_rule"]["rows"] == len(d["y"])
    assert [c["path"] for c in doc["mean_rule"]["calibration"]] == [str(rows)]
    model = load_model(out)
    assert model.combine == "mean" and model.rule != load_model(v7).rule
    # the hand reader's side is never looser than either member's own rule asks
    members = (load_model(v7), load_model(v5))
    for doubt in (None, 0.0, 0.01, 0.02, 0.03, 0.05, 0.2, 1.0):
        for kind in sorted(set(d["kind"].tolist())) + [None]:
            for m in MARKS:
                hm, _, _, hf = model.rule.thresholds(m, doubt, kind)
                for member in members:
                    want = member.rule.thresholds(m, doubt, kind)
                    assert hm >= want[0] and hf >= want[3], (doubt, kind, m)
    sure, mark = committee_check.verdicts(model, d)
    assert sure.sum() > 0.3 * len(sure), "the rule makes readings confident"
    assert not np.any(sure & (mark != d["y"])), "no confident error on the rows it was chosen on"
    # the reader on one of the photos: every reading it is sure of, the dataset is sure of too
    # and reads alike (the reader flags more only by checks the rows do not hold)
    k = 0
    monkeypatch.setattr(marks_mod, "BLANK_LEARNED_MIN", 1.1)
    monkeypatch.setattr(marks_mod, "SURE_FLOORS", {})
    monkeypatch.setattr(marks_mod, "SURE_KIND_FLOORS", {})
    reading = read_photo(d["photos"][k], learned=model, patch_reader=None)
    rows_k = np.flatnonzero(d["photo"] == k)
    agree = 0
    for i in rows_k:
        rd = reading.readings[str(d["region"][i])]
        assert rd.mark == MARKS[mark[i]]
        if not rd.review:
            assert sure[i], rd
        agree += (not rd.review) == bool(sure[i])
    assert agree >= 0.95 * len(rows_k)
    with pytest.raises(SystemExit):
        pack.main([str(v7), str(v5), "--id", "x", "--out", str(tmp_path / "x.json"),
                   "--combine", "mean"])  # (no --calib)


def test_own_tiers_replace_only_the_own_marks_thresholds_with_floors_under_them():
    """pack_committee.own_tiers (reader-v14): the thresholds of "crossed" in every tier and
    kind come from the rule chosen on more rows, never looser than the floors; a doubt bound
    beyond the rule's own tiers names "crossed" only, so every other mark read on such a photo
    falls through to the rule above the tiers."""
    from vision.learned import DecisionRule
    from vision.marks import MARKS

    pack = _script()
    never = {"hand_min": 1.01, "learned_min": 1.01, "learned_alone": 1.01, "hand_floor": 1.01}
    t = lambda hm, lm, la, hf: {"hand_min": hm, "learned_min": lm, "learned_alone": la, "hand_floor": hf}  # noqa: E731
    loose, strict = t(0.97, 0.99, 0.995, 0.5), t(0.995, 0.999, 0.9995, 0.99)
    base = {m: dict(strict) for m in MARKS} | {"crossed": dict(never)}
    rule = DecisionRule(0.999, 0.9995, 1.01, 0.999, 0.5, by_mark=base, tiers=(
        (0.0, {m: dict(loose) for m in MARKS} | {"crossed": dict(never)},
         {"box": {m: dict(loose) for m in MARKS} | {"crossed": dict(never)}}),
        (0.03, {m: dict(loose) for m in MARKS} | {"crossed": dict(never)},
         {"box": {m: dict(loose) for m in MARKS} | {"crossed": dict(never)}})))
    chosen = DecisionRule(0.5, 0.5, 1.01, 0.5, 0.5, by_mark=base, tiers=(
        (0.0, {"crossed": t(0.9, 0.98, 1.01, 0.9), "red": t(0.5, 0.9, 0.9, 0.5)}, {}),
        (0.03, {"crossed": t(0.97, 0.999, 1.01, 0.97)}, {"box": {"crossed": t(0.99, 0.998, 1.01, 0.99)}}),
        (0.08, {"crossed": t(0.99, 0.999, 1.01, 0.99)}, {}),
        (0.2, {"crossed": dict(never)}, {})))
    out = pack.own_tiers(rule, chosen, ("crossed",))
    assert [b for b, _, _ in out.tiers] == [0.0, 0.03, 0.08, 0.2]
    # floors: the hand reader at least 0.97, the learned reader at least 0.995
    assert out.thresholds("crossed", 0.0, "box") == (0.97, 0.995, 1.01, 0.97)
    assert out.thresholds("crossed", 0.02, None) == (0.97, 0.999, 1.01, 0.97)
    assert out.thresholds("crossed", 0.02, "box") == (0.99, 0.998, 1.01, 0.99)
    assert out.thresholds("crossed", 0.05, "box") == (0.99, 0.999, 1.01, 0.99)
    assert all(v > 1.0 for v in out.thresholds("crossed", 0.1, "box"))  # "never" stays never
    assert all(v > 1.0 for v in out.thresholds("crossed", None, "box"))
    # every other mark exactly as before, in the tiers (the chosen rule's "red" is not taken)
    # and beyond them
    for doubt in (None, 0.0, 0.02, 0.05, 0.1, 0.5):
        for kind in ("box", "symbol", None):
            for m in MARKS:
                if m != "crossed":
                    assert out.thresholds(m, doubt, kind) == rule.thresholds(m, doubt, kind)
    assert out.thresholds("red", 0.05, "box") == tuple(strict.values())


def test_pack_with_crossed_out_calibration_rows_changes_only_crossed(tmp_path, capsys):
    """--cross-calib: the rule of every mark but "crossed" is the one chosen without it; the
    model file records what crossed's thresholds were chosen on."""
    from vision.marks import MARKS

    rows = _sample_rows(tmp_path, ("crypts-1-easy-s1", "reefs-1-typical-s8"))
    pack = _script()
    v5, v7 = MODEL_DIR / "reader-v5.json", MODEL_DIR / "reader-v7.json"
    common = [str(v7), str(v5), "--id", "reader-m", "--combine", "mean", "--calib", str(rows)]
    assert pack.main(common + ["--out", str(tmp_path / "a.json")]) == 0
    assert pack.main(common + ["--out", str(tmp_path / "b.json"), "--cross-calib", str(rows),
                               "--own-tiers", "0.05"]) == 0
    capsys.readouterr()
    a, b = load_model(tmp_path / "a.json"), load_model(tmp_path / "b.json")
    info = b.meta["mean_rule"]
    assert [c["path"] for c in info["cross_calibration"]] == [str(rows)]
    assert info["own_tiers"] == [0.0, 0.015, 0.03, 0.05]
    assert info["own_floor"] == {"hand_min": 0.97, "learned_min": 0.995}
    assert set(info["own_marks"]) == {"crossed"}
    assert info["other_marks_confident_errors_on_cross_calibration"] >= 0
    for doubt in (None, 0.0, 0.01, 0.03, 0.04, 0.2):
        for kind in ("box", "symbol", None):
            for m in MARKS:
                if m != "crossed":
                    assert b.rule.thresholds(m, doubt, kind) == a.rule.thresholds(m, doubt, kind)
            hm, lm, _, hf = b.rule.thresholds("crossed", doubt, kind)
            assert hm > 1.0 or (hm >= 0.97 and lm >= 0.995 and hf >= 0.97)
    # without tiers there is nothing to choose crossed's thresholds in
    assert pack.main(common + ["--out", str(tmp_path / "c.json"), "--cross-calib", str(rows),
                               "--tiers", ""]) == 2
    assert "--cross-calib chooses thresholds in the doubt tiers" in capsys.readouterr().err
    assert pack.main(common + ["--out", str(tmp_path / "d.json"), "--cross-calib", str(rows),
                               "--own-tiers", "0.05", "--extra-tier-marks", "emtpy"]) == 2
    assert "--extra-tier-marks names no mark: emtpy" in capsys.readouterr().err
    # "empty" named in the extra tier: in the rule's own tiers, as without it
    assert pack.main(common + ["--out", str(tmp_path / "e.json"), "--cross-calib", str(rows),
                               "--own-tiers", "0.05", "--extra-tier-marks", "empty"]) == 0
    e = load_model(tmp_path / "e.json")
    assert set(e.meta["mean_rule"]["extra_tier_marks"]) == {"empty"}
    for doubt in (0.0, 0.01, 0.03, 0.2, None):
        assert e.rule.thresholds("empty", doubt, "box") == b.rule.thresholds("empty", doubt, "box")
    assert all(x >= y for x, y in zip(e.rule.thresholds("empty", 0.04, "box"),
                                      b.rule.thresholds("empty", 0.03, "box")))


def test_extra_tier_marks_are_named_in_the_tiers_beyond_the_rules_own_never_looser():
    """own_tiers(..., extra_marks=("empty",)) (reader-v15): "empty" gets thresholds in the
    tiers beyond the rule's own (floored, and never looser than the rule's last tier asks of
    the same kind), and keeps the rule's own thresholds in its own tiers and above them."""
    from vision.learned import DecisionRule
    from vision.marks import MARKS

    pack = _script()
    never = {"hand_min": 1.01, "learned_min": 1.01, "learned_alone": 1.01, "hand_floor": 1.01}
    t = lambda hm, lm, la, hf: {"hand_min": hm, "learned_min": lm, "learned_alone": la, "hand_floor": hf}  # noqa: E731
    loose, strict = t(0.97, 0.99, 0.995, 0.5), t(0.995, 0.999, 0.9995, 0.99)
    base = {m: dict(strict) for m in MARKS} | {"crossed": dict(never)}
    tier03 = {m: dict(loose) for m in MARKS} | {"crossed": dict(never),
                                                  "empty": t(0.99, 0.997, 0.999, 0.9)}
    rule = DecisionRule(0.999, 0.9995, 1.01, 0.999, 0.5, by_mark=base, tiers=(
        (0.03, tier03, {"symbol": {**tier03, "empty": t(0.99, 0.998, 0.9995, 0.99)}}),))
    chosen = DecisionRule(0.5, 0.5, 1.01, 0.5, 0.5, by_mark=base, tiers=(
        (0.03, {"crossed": t(0.97, 0.999, 1.01, 0.97), "empty": t(0.9, 0.99, 0.99, 0.5)}, {}),
        (0.08, {"crossed": t(0.99, 0.999, 1.01, 0.99), "empty": t(0.995, 0.995, 0.9995, 0.99),
                "red": t(0.5, 0.9, 0.9, 0.5)}, {})))
    out = pack.own_tiers(rule, chosen, ("crossed",), ("empty",))
    assert [b for b, _, _ in out.tiers] == [0.03, 0.08]
    # in the rule's own tier and above the tiers, "empty" is untouched
    for doubt, kind in ((0.0, "box"), (0.03, "symbol"), (0.2, None), (None, "box")):
        assert out.thresholds("empty", doubt, kind) == rule.thresholds("empty", doubt, kind)
    # beyond: the chosen thresholds, never looser than the last tier of the same kind
    assert out.thresholds("empty", 0.05, "box") == (0.995, 0.997, 0.9995, 0.99)
    assert out.thresholds("empty", 0.05, "symbol") == (0.995, 0.998, 0.9995, 0.99)
    # a mark not named (red) falls through to the thresholds above the tiers
    assert out.thresholds("red", 0.05, "box") == tuple(strict.values())
    assert out.thresholds("crossed", 0.05, "box") == (0.99, 0.999, 1.01, 0.99)
