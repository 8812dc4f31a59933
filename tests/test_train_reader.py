"""The training script's decision-rule choice (scripts/train_reader.py): numpy only, no
scikit-learn needed. Synthetic calibration rows stand for a reader's outputs."""

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import reader_dataset  # noqa: E402
import train_reader  # noqa: E402
from vision.learned import DecisionRule  # noqa: E402
from vision.marks import MARKS  # noqa: E402

EMPTY, BLUE = MARKS.index("empty"), MARKS.index("blue")


def _rows(rng, n, p_empty, doubt, *, wrong_at=None):
    """n rows read "empty" by both readers with learned probability p_empty (jittered), on
    photos of the given doubt; wrong_at: one row whose truth is blue, read empty at that p."""
    p = np.zeros((n, len(MARKS)))
    pe = np.clip(p_empty + rng.normal(0, 2e-4, n), 0.9, 0.99999)
    y = np.full(n, EMPTY)
    if wrong_at is not None:
        pe[0], y[0] = wrong_at, BLUE
    p[:, EMPTY], p[:, BLUE] = pe, 1 - pe
    return dict(p=p, hand=np.full(n, EMPTY), c_h=np.full(n, 0.9933), pconf=np.ones(n), y=y,
                doubt=np.full(n, doubt), kind=np.full(n, "box"))


def test_tiers_are_chosen_on_clear_photos_alone_and_never_admit_an_error(monkeypatch):
    rng = np.random.default_rng(0)
    monkeypatch.setattr(train_reader, "MARK_MIN_READINGS", 500)
    monkeypatch.setattr(train_reader, "TIER_MIN_READINGS", 500)
    # clear photos: empties at ~0.998, one faint blue mark read empty at 0.99;
    # unclear photos: empties at ~0.9990, one hidden mark read empty at 0.9996
    clear = _rows(rng, 3000, 0.998, 0.005, wrong_at=0.99)
    unclear = _rows(rng, 3000, 0.9990, 0.2, wrong_at=0.9996)
    # connections on clear photos: a stroke beside the path read empty at 0.9985
    lines = _rows(rng, 1000, 0.9997, 0.005, wrong_at=0.9985)
    lines["kind"][:] = "connection"
    cat = {k: np.concatenate([clear[k], unclear[k], lines[k]]) for k in clear}
    base = DecisionRule(hand_min=0.995, learned_min=0.9995, learned_alone=0.9999, hand_floor=0.5)
    rule, report = train_reader.choose_tiers(base, cat["p"], cat["hand"], cat["c_h"], cat["pconf"],
                                             cat["y"], cat["doubt"], cat["kind"],
                                             bounds=[0.01, 0.03], margin=1.5)
    # the clear photos get looser "empty" thresholds, kept above their error at 0.99
    assert rule.tiers and rule.tiers[0][0] == 0.01
    t = rule.thresholds("empty", 0.005, "box")
    assert t[2] < base.learned_alone and train_reader.relax(t[2], 1.5) > 0.99
    assert rule.thresholds("empty", 0.2, "box") == base.thresholds("empty")
    # the connections' own thresholds stay above their error; the boxes' are looser
    t_line = rule.thresholds("empty", 0.005, "connection")
    assert train_reader.relax(t_line[2], 1.5) > 0.9985 and t_line[2] > t[2]
    # (any other kind on a clear photo: the tier's thresholds for all its kinds together)
    assert train_reader.relax(rule.thresholds("empty", 0.005, "star")[2], 1.5) > 0.9985
    sure, ok = train_reader.rule_outcome(rule, cat["p"], cat["p"].argmax(axis=1), cat["hand"],
                                         cat["c_h"], cat["pconf"], cat["y"], cat["doubt"],
                                         cat["kind"])
    assert not np.any(sure & ~ok)
    assert report["confident"]["after"] > report["confident"]["before"]
    # far more clear-photo empties are confident than under the one rule
    before, _ = train_reader.rule_outcome(base, cat["p"], cat["p"].argmax(axis=1), cat["hand"],
                                          cat["c_h"], cat["pconf"], cat["y"], cat["doubt"])
    assert sure[:3000].mean() > 0.9 > before[:3000].mean()


def test_only_spent_measurement_seeds_may_calibrate(tmp_path):
    assert reader_dataset.seed_allowed(12345) and reader_dataset.seed_allowed(400123)
    assert reader_dataset.seed_allowed(800299)      # spent in session 5 (default painter)
    assert reader_dataset.seed_allowed(900299)      # spent in session 6 (default painter)
    assert reader_dataset.seed_allowed(1000299)     # spent in session 7 (default painter)
    assert reader_dataset.seed_allowed(1100299)     # spent in session 8 (default painter)
    assert reader_dataset.seed_allowed(1200299)     # spent in session 11 (default painter)
    assert reader_dataset.seed_allowed(1300000)     # spent in session 12 (default painter)
    assert reader_dataset.seed_allowed(1400000)     # spent in session 17 (default painter)
    assert reader_dataset.seed_allowed(1500299)     # spent in session 20 (default painter)
    assert reader_dataset.seed_allowed(1600299)     # spent in session 22 (default painter)
    assert reader_dataset.seed_allowed(1700299)     # spent in session 23 (default painter)
    assert not reader_dataset.seed_allowed(1700300)
    assert reader_dataset.seed_allowed(1800000) and reader_dataset.seed_allowed(2000299)  # too
    assert reader_dataset.seed_allowed(2100299)     # spent in session 24 (default painter)
    assert reader_dataset.seed_allowed(2200119)     # crossed out at 0.3, read in session 24
    assert not reader_dataset.seed_allowed(2200120) and not reader_dataset.seed_allowed(2100300)
    assert reader_dataset.seed_allowed(2300299) and reader_dataset.seed_allowed(1180119)
    # the fresh pairs spent since session 25 (default painter, held-out painter): up to their
    # last seeds, not one beyond
    for default_end, heldout_end in ((2400299, 1190119), (2500299, 1210119), (2600299, 1220119),
                                     (2700299, 1230119), (2800299, 1240119), (2900299, 1250119),
                                     (3000299, 1260119), (3100299, 1270119),
                                     (3200299, 1280119), (3300299, 1290119),
                                     (3400299, 1310119), (3500299, 1320119),
                                     (3600299, 1330119), (3700299, 1340119),
                                     (3800299, 1350119), (3900299, 1360119),
                                     (4000299, 1370119), (4200299, 1380119),
                                     (4300299, 1390119), (4400299, 1410119),
                                     (4500299, 1420119), (4600299, 1430119),
                                     (4700299, 1440119), (4900299, 1460119),
                                     (5100299, 1480119), (5300299, 1510119),
                                     (5500299, 1530119), (5700299, 1550119),
                                     (5900299, 1570119), (6100299, 1590119),
                                     (6300299, 1620119), (6500299, 1640119),
                                     (6700299, 1660119), (6900299, 1680119),
                                     (7100299, 1710119), (7300299, 1730119),
                                     (7700299, 1750119), (7900299, 1770119)):
        assert reader_dataset.seed_allowed(default_end) and reader_dataset.seed_allowed(heldout_end)
        assert not reader_dataset.seed_allowed(default_end + 1)
        assert not reader_dataset.seed_allowed(heldout_end + 1)
    assert reader_dataset.seed_allowed(4100299)  # (session 38's pencil probe; no held-out pair)
    assert reader_dataset.seed_allowed(7500299)  # (session 49's last default corpus, no pair)
    assert not reader_dataset.seed_allowed(7500300)
    assert not reader_dataset.seed_allowed(4100300)
    # (crossed out at rate 0.3, sessions 42-50: default and held-out painters)
    for end in (4800119, 5000119, 5200119, 5400119, 5600119, 5800119, 6000119, 6200119, 6400119,
                6600119, 6800119, 7000119, 7200119, 7400119, 7600119, 7800119, 1450119, 1470119,
                1490119, 1520119, 1540119, 1560119, 1580119, 1610119, 1630119, 1650119, 1670119,
                1690119, 1720119, 1740119, 1760119, 1780119):
        assert reader_dataset.seed_allowed(end) and not reader_dataset.seed_allowed(end + 1)
    assert not reader_dataset.seed_allowed(8000000)  # the next fresh measurements: never
    assert not reader_dataset.seed_allowed(8100000)
    assert not reader_dataset.seed_allowed(1790000)  # the next held-out one (1500000-1800000: default's)
    # (the held-out painter's spent corpora: datasets may be built to check a rule on, while
    # train_reader refuses their painter for calibration, below)
    assert reader_dataset.seed_allowed(1150119) and reader_dataset.seed_allowed(1170000)
    assert not reader_dataset.seed_allowed(1070001)  # the held-out painter's: never
    assert not reader_dataset.seed_allowed(1050001)  # the held-out painter's: never
    assert not reader_dataset.seed_allowed(770001)  # the held-out painter's: never
    assert not reader_dataset.seed_allowed(750001) and not reader_dataset.seed_allowed(None)
    from vision.marks import FEATURE_NAMES

    def save(name, seeds, painter="default"):
        path = tmp_path / name
        np.savez(path, feature_names=np.asarray(FEATURE_NAMES), seeds=np.asarray(seeds),
                 painter=np.asarray([painter]))
        return str(path)
    with pytest.raises(SystemExit, match="seeds >= 100000"):
        train_reader.load_sets([save("spent.npz", [400001])])  # not for fitting
    with pytest.raises(SystemExit, match="unspent evaluation seeds"):
        train_reader.load_sets([save("fresh.npz", [8100001])], calib_only=True)
    with pytest.raises(SystemExit, match="painter"):
        train_reader.load_sets([save("ho.npz", [710001], "heldout")], calib_only=True)
    with pytest.raises(SystemExit, match="painter"):  # (spent since session 24, held-out)
        train_reader.load_sets([save("ho2.npz", [1150001], "heldout")], calib_only=True)


def test_a_photo_in_doubt_is_never_read_more_loosely_than_a_clearer_one(monkeypatch):
    rng = np.random.default_rng(1)
    monkeypatch.setattr(train_reader, "TIER_MIN_READINGS", 500)
    # clear photos (doubt 0): boxes with an error at 0.9975; a little doubt (0.01): boxes
    # whose only error sits at 0.99, so alone they would get looser thresholds
    clear = _rows(rng, 2000, 0.9995, 0.0, wrong_at=0.9975)
    some = _rows(rng, 2000, 0.998, 0.01, wrong_at=0.99)
    cat = {k: np.concatenate([clear[k], some[k]]) for k in clear}
    base = DecisionRule(hand_min=0.995, learned_min=0.9995, learned_alone=0.9999, hand_floor=0.5)
    rule, _ = train_reader.choose_tiers(base, cat["p"], cat["hand"], cat["c_h"], cat["pconf"],
                                        cat["y"], cat["doubt"], cat["kind"], bounds=[0, 0.015],
                                        margin=1.5)
    for kind in ("box", None):
        t0, t1 = rule.thresholds("empty", 0.0, kind), rule.thresholds("empty", 0.01, kind)
        assert all(b >= a for a, b in zip(t0, t1)), (kind, t0, t1)
    # the clear tier stays above its own error
    assert train_reader.relax(rule.thresholds("empty", 0.0, "box")[2], 1.5) > 0.9975


def _tier_only_empty(cat):
    """The by-mark rule chosen on ``cat``'s rows, then that rule with "empty" tier-only and tiers
    at doubt 0 and 0.015 chosen on them, and which rows the latter reads confidently."""
    args = (cat["p"], cat["hand"], cat["c_h"], cat["pconf"], cat["y"], cat["doubt"])
    base = DecisionRule(hand_min=0.995, learned_min=0.9995, learned_alone=0.9999, hand_floor=0.5)
    by_mark, _ = train_reader.choose_by_mark(base, *args, margin=1.5)
    rule, _ = train_reader.choose_tiers(train_reader.tier_only(by_mark, ["empty"]), *args,
                                        cat["kind"], bounds=[0, 0.015], margin=1.5)
    sure, _ = train_reader.rule_outcome(rule, cat["p"], cat["p"].argmax(axis=1), *args[1:],
                                        cat["kind"])
    return by_mark, rule, sure


def test_a_tier_only_mark_is_confident_on_clear_photos_and_never_on_others(monkeypatch):
    rng = np.random.default_rng(2)
    monkeypatch.setattr(train_reader, "MARK_MIN_READINGS", 500)
    monkeypatch.setattr(train_reader, "TIER_MIN_READINGS", 500)
    # no error anywhere: by mark alone, "empty" would be confident on every photo
    clear = _rows(rng, 3000, 0.9995, 0.0)
    unclear = _rows(rng, 3000, 0.9995, 0.1)
    cat = {k: np.concatenate([clear[k], unclear[k]]) for k in clear}
    by_mark, rule, sure = _tier_only_empty(cat)
    assert by_mark.thresholds("empty")[1] <= 1.0
    assert by_mark.thresholds("blue") == rule.thresholds("blue")
    assert train_reader.tier_only(by_mark, ["empty"]).thresholds("empty") == tuple(
        train_reader.NEVER[k] for k in train_reader._FOUR)
    assert sure[:3000].mean() > 0.9 and not sure[3000:].any()


def test_a_tier_only_mark_must_be_a_mark(tmp_path):
    with pytest.raises(SystemExit, match=r"--tier-only names no mark \['writen'\]"):
        train_reader.main(["--train", str(tmp_path / "none.npz"), "--out", str(tmp_path / "m.json"),
                           "--tier-only", "writen"])


def test_crossed_is_never_confident_on_the_learned_reader_alone_with_a_hesitant_hand(monkeypatch):
    # Crossings-out read "crossed" by both readers, the learned reader at ~0.9999, the hand
    # reader hesitant (0.6): no error among them, so only the floor keeps them flagged. The
    # same rows read "empty" may be confident on the learned reader alone.
    rng = np.random.default_rng(3)
    monkeypatch.setattr(train_reader, "MARK_MIN_READINGS", 500)
    crossed, empty = MARKS.index("crossed"), EMPTY
    rows = {}
    for m in (crossed, empty):
        r = _rows(rng, 2000, 0.9999, 0.0)
        r["p"][:, [EMPTY, BLUE]] = 0
        r["p"][:, m] = 0.9999
        r["p"][:, BLUE] = 1e-4
        r["hand"][:], r["y"][:], r["c_h"][:] = m, m, 0.6
        rows[m] = r
    cat = {k: np.concatenate([rows[crossed][k], rows[empty][k]]) for k in rows[crossed]}
    args = (cat["p"], cat["hand"], cat["c_h"], cat["pconf"], cat["y"], cat["doubt"])
    rule, _ = train_reader.choose_rule(*args, margin=1.5, photo_gate=0.5)
    hm, lm, la, hf = rule.thresholds("crossed")
    assert la > 1.0 or hf >= train_reader.GLOBAL_HAND_FLOOR
    by_mark, _ = train_reader.choose_by_mark(rule, *args, margin=1.5)
    for m, name in ((crossed, "crossed"), (empty, "empty")):
        sure, _ = train_reader.rule_outcome(by_mark, cat["p"], cat["p"].argmax(axis=1),
                                            *args[1:])
        share = sure[cat["y"] == m].mean()
        assert (share == 0.0) if name == "crossed" else (share == 1.0), (name, share)


def test_a_tier_only_mark_too_rare_on_the_clearest_photos_is_confident_in_the_next_tier(monkeypatch):
    # "empty" is tier-only; too few readings at doubt 0 for thresholds of its own there, enough
    # at doubt <= 0.015: readings on photos of doubt 0 and 0.01 are confident (a photo of doubt
    # 0 falls through to the second tier), readings on photos in more doubt never are
    rng = np.random.default_rng(4)
    monkeypatch.setattr(train_reader, "MARK_MIN_READINGS", 500)
    monkeypatch.setattr(train_reader, "TIER_MIN_READINGS", 1000)
    clearest = _rows(rng, 700, 0.9995, 0.0)
    clear = _rows(rng, 1000, 0.9995, 0.01)
    unclear = _rows(rng, 3000, 0.9995, 0.1)
    # (blue marks on the clearest photos, enough for that tier to have thresholds of its own)
    blue = _rows(rng, 1200, 0.9995, 0.0)
    blue["p"][:, [EMPTY, BLUE]] = blue["p"][:, [BLUE, EMPTY]]
    blue["hand"][:], blue["y"][:] = BLUE, BLUE
    cat = {k: np.concatenate([clearest[k], clear[k], unclear[k], blue[k]]) for k in clear}
    _, rule, sure = _tier_only_empty(cat)
    assert rule.tiers[0][0] == 0.0 and "blue" in rule.tiers[0][1]
    assert sure[:1700].mean() > 0.9 and not sure[1700:4700].any()
    assert rule.thresholds("empty", 0.0, "box") == rule.thresholds("empty", 0.01, "box")


def test_dropped_columns_are_left_out_of_the_model_and_an_unknown_name_is_refused():
    from vision._evidence import EVIDENCE_FEATURES
    from vision.marks import FEATURE_NAMES
    names = train_reader.model_feature_names("ev_ring_*,gd_len")
    assert not set(EVIDENCE_FEATURES) & set(names) and "gd_len" not in names
    assert len(names) == len(FEATURE_NAMES) - len(EVIDENCE_FEATURES) - 1
    # the order of the columns kept is the reader's own
    assert list(names) == [n for n in FEATURE_NAMES if n in names]
    assert train_reader.model_feature_names("") == FEATURE_NAMES
    with pytest.raises(SystemExit, match="names no feature column"):
        train_reader.model_feature_names("ev_rings_*")


def test_a_weight_must_name_a_training_dataset_and_be_positive(tmp_path):
    # (checked before any dataset is loaded or minutes are spent fitting)
    train = str(tmp_path / "train.npz")
    for bad in (str(tmp_path / "other.npz") + "=0.5", train + "=0", train + "=heavy", "0.5"):
        with pytest.raises(SystemExit, match=r"--weight .*: give PATH=W"):
            train_reader.main(["--train", train, "--out", str(tmp_path / "m.json"),
                               "--weight", bad])


def test_a_corpus_whose_every_photo_is_refused_gives_a_clear_error_and_no_file(tmp_path, capsys):
    """reader_dataset.py on photos of unspent measurement seeds writes nothing and says why."""
    import json
    import shutil
    root = Path(__file__).resolve().parents[1]
    folder = tmp_path / "fresh"
    folder.mkdir()
    shutil.copy(root / "sample_photos" / "crypts-1-easy-s1.jpg", folder / "crypts-1-easy-s8100001.jpg")
    truth = json.loads((root / "sample_photos" / "crypts-1-easy-s1.truth.json").read_text())
    truth["seed"] = 8100001  # (the next fresh measurement's: never read for the reader)
    (folder / "crypts-1-easy-s8100001.truth.json").write_text(json.dumps(truth))
    out = tmp_path / "rows.npz"
    assert reader_dataset.main([str(folder), "--out", str(out), "--workers", "1"]) == 1
    err = capsys.readouterr().err
    assert "no photo gave rows (1 skipped: seed 8100001 not allowed" in err
    assert not out.exists()
