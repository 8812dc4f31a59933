"""The learned reader: its JSON model loads, rejects damage, reproduces the training script's
probabilities, and the two-reader rule flags disagreement."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest

from vision.learned import (COMMITTEE_FORMAT, DEFAULT_MODEL, MODEL_DIR, MODEL_FORMAT,
                            DecisionRule, ReaderModelError, combine, default_model, load_model,
                            model_from_dict)
from vision.marks import EVIDENCE_FEATURES, FEATURE_NAMES, MARKS, RegionReading


@pytest.fixture(scope="module")
def model_doc():
    """The default model's own document (format 1: without its committee)."""
    doc = json.loads(DEFAULT_MODEL.read_text())
    for k in ("committee", "fit", "combine", "mean_rule"):
        doc.pop(k, None)
    doc["format"] = MODEL_FORMAT
    return doc


def _check_rows(n=None):
    """The bundled model's check rows (its own columns) as rows of the reader's full matrix."""
    check = json.loads(DEFAULT_MODEL.with_suffix(".check.json").read_text())
    names = json.loads(DEFAULT_MODEL.read_text())["feature_names"]
    X = np.asarray(check["X"][:n], np.float32)
    if X.shape[1] != len(names):
        # (a model fitted with --drop: full rows of FEATURE_NAMES as it was then; columns are
        # only ever appended, so they are its first columns, the later ones 0)
        assert len(names) < X.shape[1] <= len(FEATURE_NAMES)
        full = np.zeros((X.shape[0], len(FEATURE_NAMES)), np.float32)
        full[:, :X.shape[1]] = X
        return full, np.asarray(check["proba"][:n])
    assert X.shape[1] == len(names)
    full = np.zeros((X.shape[0], len(FEATURE_NAMES)), np.float32)
    full[:, [FEATURE_NAMES.index(c) for c in names]] = X
    return full, np.asarray(check["proba"][:n])


def test_bundled_model_loads_once_and_reproduces_scikit_learns_probabilities():
    model = default_model()
    assert model is default_model()  # cached per process
    assert model.classes == MARKS and set(model.feature_names) <= set(FEATURE_NAMES)
    X, want = _check_rows()
    assert X.shape == (want.shape[0], len(FEATURE_NAMES)) and want.shape[0] >= 8
    got = model.predict_proba(X, calibrated=False)
    np.testing.assert_allclose(got, want, atol=2e-5)
    # the stored rows span several marks, so a model that ignores its input would fail here
    assert len(set(want.argmax(axis=1))) >= 4


def test_probabilities_respect_what_a_region_allows():
    model = default_model()
    X, _ = _check_rows(3)
    allowed = np.zeros((3, len(MARKS)), bool)
    allowed[:, [MARKS.index("empty"), MARKS.index("written")]] = True
    p = model.predict_proba(X, allowed=allowed)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-9)
    assert np.all(p[:, ~allowed[0]] == 0.0)


def test_damaged_model_files_are_clear_errors(tmp_path, model_doc):
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "sheetcheck.reader-model/1", "kind": ')
    with pytest.raises(ReaderModelError, match="not valid JSON"):
        load_model(bad)
    with pytest.raises(ReaderModelError, match="cannot read reader model"):
        load_model(tmp_path / "missing.json")
    doc = copy.deepcopy(model_doc)
    doc["feature_names"] = doc["feature_names"][:-1] + ["pencil_brand"]
    with pytest.raises(ReaderModelError, match=r"feature_names do not match.*unknown \['pencil_brand'\]"):
        model_from_dict(doc)
    doc["feature_names"] = doc["feature_names"][:-1] + doc["feature_names"][:1]
    with pytest.raises(ReaderModelError, match=r"feature_names do not match.*repeated \['is_line'\]"):
        model_from_dict(doc)
    doc = copy.deepcopy(model_doc)
    body = doc[doc["kind"]]
    if doc["kind"] == "gbdt":
        body["left"][body["roots"][0]] = 10 ** 9
        body["threshold"] = body["threshold"][:-1]
        with pytest.raises(ReaderModelError, match=r"(?s)gbdt.threshold: .*gbdt.left: node indices"):
            model_from_dict(doc)
    else:
        body["layers"][0]["W"] = body["layers"][0]["W"][:-1]
        with pytest.raises(ReaderModelError, match="do not follow a layer"):
            model_from_dict(doc)
    doc = copy.deepcopy(model_doc)
    doc["temperature"] = "hot"
    doc["decision"]["learned_min"] = 7
    with pytest.raises(ReaderModelError, match=r"(?s)temperature: .*decision.learned_min"):
        model_from_dict(doc)
    with pytest.raises(ReaderModelError, match="not a JSON object"):
        model_from_dict([1, 2])


def _hand(mark, conf, alts, kind="cell"):
    return RegionReading("cell.r1.c1", kind, mark, conf, conf < 0.97, tuple(alts), {}, "")


def _probs(**p):
    return [p.get(m, 0.0) for m in MARKS]


RULE = DecisionRule(hand_min=0.97, learned_min=0.99, learned_alone=0.998, hand_floor=0.6,
                    photo_gate=0.5)


def test_two_readers_that_agree_and_are_sure_give_a_confident_reading():
    hand = _hand("red", 0.99, [("red", 0.99), ("orange", 0.01)])
    r = combine(hand, _probs(red=0.995, orange=0.005), classes=MARKS, rule=RULE,
                review_threshold=0.97)
    assert r.mark == "red" and not r.review and r.confidence >= 0.97
    assert r.features["hand_mark"] == "red" and r.features["learned_mark"] == "red"


def test_disagreement_is_always_flagged_whatever_the_confidences():
    hand = _hand("crossed", 0.99, [("crossed", 0.99), ("red", 0.01)])
    r = combine(hand, _probs(red=0.9999, crossed=0.0001), classes=MARKS, rule=RULE,
                review_threshold=0.97)
    assert r.review and r.confidence < 0.97
    assert "readers disagree" in r.reason and "hand: crossed" in r.reason
    assert r.mark == "red" and r.features["hand_mark"] == "crossed"


def test_a_hesitant_hand_reader_is_overruled_only_by_a_very_sure_learned_reader():
    hand = _hand("empty", 0.8, [("empty", 0.8), ("crossed", 0.2)])
    sure = combine(hand, _probs(empty=0.999, crossed=0.001), classes=MARKS, rule=RULE,
                   review_threshold=0.97)
    assert not sure.review
    less = combine(hand, _probs(empty=0.995, crossed=0.005), classes=MARKS, rule=RULE,
                   review_threshold=0.97)
    assert less.review and less.confidence < 0.97 and "low confidence" in less.reason
    weak_hand = _hand("empty", 0.55, [("empty", 0.55), ("crossed", 0.45)])
    assert combine(weak_hand, _probs(empty=0.9999), classes=MARKS, rule=RULE,
                   review_threshold=0.97).review


def test_a_bad_photo_and_an_unmeasurable_region_are_flagged():
    hand = _hand("blue", 0.99, [("blue", 0.99), ("purple", 0.01)])
    r = combine(hand, _probs(blue=0.9999), classes=MARKS, rule=RULE, review_threshold=0.97,
                photo_confidence=0.2)
    assert r.review and "photo too unreliable" in r.reason
    hand = RegionReading("s1", "space", "empty", 0.5, True, (("empty", 0.9), ("blue", 0.1)), {},
                         "too few unprinted pixels to read")
    assert combine(hand, _probs(empty=0.9999), classes=MARKS, rule=RULE,
                   review_threshold=0.97).review


def _walk_trees(model, X):
    """The plain reference: every row down every tree, one node at a time."""
    p = model.params
    out = np.tile(p["baseline"], (X.shape[0], 1)).astype(np.float64)
    for i, x in enumerate(np.asarray(X, np.float32)):
        for t, node in enumerate(p["roots"]):
            while not p["leaf"][node]:
                node = p["right"][node] if x[p["feature"][node]] > p["threshold"][node] else p["left"][node]
            out[i, p["tree_class"][t]] += p["value"][node]
    return out


def test_batched_tree_walk_matches_a_node_by_node_walk(model_doc):
    model = default_model()
    X, _ = _check_rows(6)
    want = _walk_trees(model, X)
    np.testing.assert_allclose(model.raw_scores(X), want, rtol=1e-12, atol=1e-12)
    # trees in another class order take the general summation, with the same scores
    doc = copy.deepcopy(model_doc)
    g = doc["gbdt"]
    order = np.random.default_rng(0).permutation(len(g["roots"]))
    g["roots"] = [g["roots"][k] for k in order]
    g["tree_class"] = [g["tree_class"][k] for k in order]
    shuffled = model_from_dict(doc)
    assert shuffled.params["tree_class_tiled"] is False and model.params["tree_class_tiled"] is True
    np.testing.assert_allclose(shuffled.raw_scores(X), want, rtol=1e-9, atol=1e-9)


def _random_trees(rng, depths, n_features=6, *, full=False):
    """Tree tables as ``model_from_dict`` builds them, for trees of the given depths: each a
    random mix of inner nodes and leaves that reaches its depth along one path, or with
    ``full`` every leaf at that depth."""
    feature, threshold, left, right, leaf, value, roots = [], [], [], [], [], [], []

    def grow(level, depth, force):
        node = len(leaf)
        for a in (feature, threshold, left, right, leaf, value):
            a.append(0)
        if level == depth or not (force or full or rng.random() < 0.7):
            leaf[node], value[node] = True, float(rng.normal())
            return node
        feature[node], threshold[node] = int(rng.integers(n_features)), float(rng.normal())
        go_left = bool(rng.random() < 0.5)  # the forced path to full depth goes either way
        left[node] = grow(level + 1, depth, force and go_left)
        right[node] = grow(level + 1, depth, force and not go_left)
        return node
    for d in depths:
        roots.append(grow(0, d, True))
    n = len(leaf)
    p = {"feature": np.array(feature), "threshold": np.array(threshold, np.float32),
         "left": np.array(left), "right": np.array(right), "leaf": np.array(leaf),
         "value": np.array(value), "roots": np.array(roots, np.int32), "depth": max(depths)}
    node = np.arange(n)
    p["child"] = np.stack([np.where(p["leaf"], node, p["left"]),
                           np.where(p["leaf"], node, p["right"])], 1).reshape(-1).astype(np.int32)
    return p


@pytest.mark.parametrize("depths, full, masks", [([0, 1, 3, 5, 5], False, np.uint32),
                                                 ([5, 2, 0], True, np.uint32),
                                                 ([6, 2, 0], True, np.uint64),
                                                 ([7, 3], True, None)])
def test_exit_leaf_masks_find_the_leaf_the_walk_reaches(depths, full, masks):
    """Trees of up to 32 leaves (32-bit masks), up to 64 (64-bit; with every bit in use),
    more (walked instead), and lone leaves: the masks give every row the leaf that walking
    down the tree gives."""
    from vision.learned import _exit_leaf_tables, _exit_leaf_values, _leaf_values
    rng = np.random.default_rng(len(depths) + full)
    p = _random_trees(rng, depths, full=full)
    X = rng.normal(size=(300, 6)).astype(np.float32)
    X[:5] = p["threshold"][0]  # rows exactly on a threshold go left
    want = _leaf_values(X, p)
    tables = _exit_leaf_tables(p)
    if masks is None:
        assert tables is None  # more than 64 leaves: no mask fits, the walk is used
        return
    assert tables["mask"].dtype == masks
    got = _exit_leaf_values(X, tables)
    np.testing.assert_array_equal(got, want)
    # and against a node-by-node walk of one row, so the reference itself is checked
    for i in (0, 7, 123):
        for t, node in enumerate(p["roots"]):
            while not p["leaf"][node]:
                node = p["right"][node] if X[i, p["feature"][node]] > p["threshold"][node] else p["left"][node]
            assert got[i, t] == p["value"][node]


def test_a_missing_model_is_an_error_not_a_quiet_fallback(tmp_path, monkeypatch):
    import vision.learned as L
    monkeypatch.setattr(L, "DEFAULT_MODEL", tmp_path / "reader-v1.json")
    monkeypatch.setattr(L, "_cache", {})
    with pytest.raises(ReaderModelError, match="model .* is missing.*Reinstall sheetcheck"):
        L.default_model()


def test_the_reading_says_which_readers_decided():
    from pathlib import Path
    from vision.pipeline import read_photo
    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"
    both = read_photo(photo).to_json()["details"]["reader"]
    assert both["readers"] == ["hand", "learned"] and both["model"] == default_model().meta["id"]
    assert both["decision"]["learned_alone"] == default_model().rule.learned_alone
    assert both["second_opinions"] == [m.meta["id"] for m in default_model().committee]
    assert both["second_opinions"] == ["reader-v15.2", "reader-v15.3"]
    assert both["combine"] == "mean"  # (reader-v12 on: one rule on the members' mean)
    # (session 33: when a blank region's "empty" is confirmed below the model's thresholds)
    assert both["confirm_blank"] == {"zero": ["coverage", "coloured", "dark"], "faint_max": 0.05,
                                     "hand_min": 0.99, "learned_min": 0.98, "doubt_max": 0.05,
                                     "hand_min_written": 0.984}  # (session 35)
    colour = {"hand_min": 0.99, "learned_min": 0.995}
    assert both["confirm_sure"] == {"doubt_max": 0.05, "by_mark": {
        "orange": colour, "red": colour, "blue": colour, "green": colour, "purple": colour},
        # (session 37: an empty route)
        "by_kind": [{"kind": "connection", "mark": "empty", "hand_min": 0.98,
                     "learned_min": 0.98}]}
    alone = read_photo(photo, learned=None).to_json()["details"]["reader"]
    assert alone == {"readers": ["hand"], "model": None}


def test_a_model_made_for_an_earlier_feature_list_reads_its_own_columns(model_doc):
    """Features are added over time: a model that names a subset of them, in any order, reads
    those columns of the reader's full matrix and gives the same scores."""
    model = default_model()
    X, _ = _check_rows(6)
    want = model.raw_scores(X)
    doc = copy.deepcopy(model_doc)
    g = doc["gbdt"]
    names = doc["feature_names"]
    used = sorted({f for f, leaf in zip(g["feature"], g["leaf"]) if not leaf})
    assert len(used) < len(names)  # (the model leaves some features unused)
    # keep only the features the trees use, in reverse order
    keep = used[::-1]
    new_index = {old: i for i, old in enumerate(keep)}
    g["feature"] = [new_index.get(f, 0) if not leaf else 0 for f, leaf in zip(g["feature"], g["leaf"])]
    doc["feature_names"] = [names[j] for j in keep]
    small = model_from_dict(doc)
    assert small.feature_names == tuple(doc["feature_names"])
    np.testing.assert_allclose(small.raw_scores(X), want, rtol=1e-12, atol=1e-12)
    # rows of the model's own columns are accepted too
    own = X[:, [FEATURE_NAMES.index(n) for n in doc["feature_names"]]]
    np.testing.assert_allclose(small.raw_scores(own), want, rtol=1e-12, atol=1e-12)
    with pytest.raises(ValueError, match=f"expected \\(N, {len(FEATURE_NAMES)}\\) features"):
        small.raw_scores(X[:, :5])


def test_per_mark_thresholds_replace_the_global_ones_for_that_mark_only(model_doc):
    # a clear colour is confident at 0.99; "empty" needs the learned reader at 0.9995
    rule = DecisionRule(hand_min=0.97, learned_min=0.99, learned_alone=1.01, hand_floor=0.5,
                        by_mark={"empty": {"hand_min": 0.97, "learned_min": 0.9995,
                                           "learned_alone": 1.01, "hand_floor": 0.5}})
    assert rule.thresholds("empty") == (0.97, 0.9995, 1.01, 0.5)
    assert rule.thresholds("red") == (0.97, 0.99, 1.01, 0.5)
    red = combine(_hand("red", 0.99, [("red", 0.99), ("orange", 0.01)]), _probs(red=0.995, orange=0.005),
                  classes=MARKS, rule=rule, review_threshold=0.97)
    assert not red.review
    empty = combine(_hand("empty", 0.99, [("empty", 0.99), ("crossed", 0.01)]),
                    _probs(empty=0.995, crossed=0.005), classes=MARKS, rule=rule, review_threshold=0.97)
    assert empty.review and "low confidence" in empty.reason
    assert not combine(_hand("empty", 0.99, [("empty", 0.99), ("crossed", 0.01)]),
                       _probs(empty=0.9996, crossed=0.0004), classes=MARKS, rule=rule,
                       review_threshold=0.97).review
    # stored in the model file's decision, validated on load
    doc = copy.deepcopy(model_doc)
    doc["decision"]["by_mark"] = {"empty": {"hand_min": 0.97, "learned_min": 0.9995,
                                            "learned_alone": 1.01, "hand_floor": 0.5}}
    assert model_from_dict(doc).rule.thresholds("empty") == (0.97, 0.9995, 1.01, 0.5)
    doc["decision"]["by_mark"] = {"smudge": {}, "red": {"hand_min": 2}}
    with pytest.raises(ReaderModelError, match=r"(?s)unknown mark 'smudge'.*decision.by_mark.red: expected numbers"):
        model_from_dict(doc)


def test_doubt_tiers_loosen_a_mark_only_on_photos_clear_enough(model_doc):
    # base: "empty" needs the learned reader at 0.9998 alone; on a photo with at most 1 % of
    # its regions in doubt, 0.997 is enough; up to 3 %, 0.999
    tight = {"hand_min": 0.995, "learned_min": 0.9995, "learned_alone": 0.9998, "hand_floor": 0.5}
    t1 = {"hand_min": 0.995, "learned_min": 0.99, "learned_alone": 0.997, "hand_floor": 0.5}
    t3 = {"hand_min": 0.995, "learned_min": 0.99, "learned_alone": 0.999, "hand_floor": 0.5}
    # and an empty connection (a stroke drawn beside the path reads empty) keeps 0.9998 there
    rule = DecisionRule(by_mark={"empty": tight},
                        tiers=((0.01, {"empty": t1}, {"connection": {"empty": tight}}),
                               (0.03, {"empty": t3}, {})))
    assert rule.thresholds("empty") == (0.995, 0.9995, 0.9998, 0.5)  # no doubt given: no tier
    assert rule.thresholds("empty", 0.0) == (0.995, 0.99, 0.997, 0.5)
    assert rule.thresholds("empty", 0.0, "box") == (0.995, 0.99, 0.997, 0.5)
    assert rule.thresholds("empty", 0.0, "connection") == (0.995, 0.9995, 0.9998, 0.5)
    assert rule.thresholds("empty", 0.02) == (0.995, 0.99, 0.999, 0.5)
    assert rule.thresholds("empty", 0.02, "connection") == (0.995, 0.99, 0.999, 0.5)
    assert rule.thresholds("empty", 0.05) == (0.995, 0.9995, 0.9998, 0.5)
    assert rule.thresholds("red", 0.0) == (0.97, 0.97, 1.01, 0.5)  # a mark no tier names

    def read(doubt):
        # a clear-looking empty: the hand reader on its usual plateau, the learned reader 0.998
        return combine(_hand("empty", 0.9933, [("empty", 0.9933), ("blue", 0.0067)]),
                       _probs(empty=0.998, blue=0.002), classes=MARKS, rule=rule,
                       review_threshold=0.97, doubt=doubt)
    assert not read(0.005).review and read(0.005).confidence == 0.998
    assert read(0.02).review and "low confidence" in read(0.02).reason
    assert read(0.2).review
    line = combine(_hand("empty", 0.9933, [("empty", 0.9933), ("blue", 0.0067)], kind="connection"),
                   _probs(empty=0.998, blue=0.002), classes=MARKS, rule=rule,
                   review_threshold=0.97, doubt=0.005)
    assert line.review
    # stored in the model file's decision (DecisionRule.to_dict), validated on load
    doc = copy.deepcopy(model_doc)
    doc["decision"] = rule.to_dict()
    back = model_from_dict(json.loads(json.dumps(doc))).rule
    assert back.tiers == rule.tiers and back.thresholds("empty", 0.005) == (0.995, 0.99, 0.997, 0.5)
    doc["decision"]["tiers"] = [{"doubt_max": 0.03, "by_mark": {"empty": t3}},
                                {"doubt_max": 0.01, "by_mark": {"smudge": t1}},
                                {"doubt_max": 0.5, "by_mark": {}, "by_kind": {"box": {"red": {}}}},
                                {"doubt_max": 2, "by_mark": {}}]
    with pytest.raises(ReaderModelError, match=r"(?s)tiers\[1\].doubt_max: tiers must come by ascending"
                                               r".*tiers\[1\].by_mark: unknown mark 'smudge'"
                                               r".*tiers\[2\].by_kind.box.red: expected numbers"
                                               r".*tiers\[3\].doubt_max: expected a number in 0..1"):
        model_from_dict(doc)


def test_reader_v7_loads_and_reproduces_its_training_probabilities():
    """reader-v7 (the default from session 6 to 10, docs/EVALUATION.md): every feature it names
    is measured, the JSON trees give scikit-learn's probabilities, its rule has doubt tiers, and
    "written" and "crossed" are confident only on clear photos (in a tier), crossed never with
    a hesitant hand reader."""
    from vision.learned import MODEL_DIR
    path = MODEL_DIR / "reader-v7.json"
    model = load_model(path)
    # every column of the reader it was fitted on, in order; the ring columns
    # (vision._evidence), the guide columns (vision._guide) and the open columns came later
    # and reader-v7 does not read them
    from vision._evidence import X_FEATURES
    from vision._guide import GUIDE_FEATURES
    from vision.marks import OPEN_FEATURES
    later = set(EVIDENCE_FEATURES) | set(GUIDE_FEATURES) | set(X_FEATURES) | set(OPEN_FEATURES)
    assert list(model.feature_names) == [n for n in FEATURE_NAMES if n not in later]
    assert model.rule.by_mark
    assert [t[0] for t in model.rule.tiers] == [0.0, 0.015, 0.03]
    for mark in ("written", "crossed"):
        for kind in ("box", "number_field", None):
            assert all(v > 1.0 for v in model.rule.thresholds(mark, 0.5, kind)), (mark, kind)
    assert model.rule.thresholds("written", 0.01, "number_field")[1] <= 1.0
    for doubt in (0.0, 0.01, 0.03, 0.5):
        hm, lm, la, hf = model.rule.thresholds("crossed", doubt, "box")
        assert la > 1.0 or hf >= 0.99
    # a clear photo is read at least as loosely as one in some doubt, for every kind and mark;
    # a photo in more doubt than every tier takes the rule without tiers
    for kind in ("box", "connection", "symbol", "star", None):
        for mark in MARKS:
            t0, t1 = model.rule.thresholds(mark, 0.0, kind), model.rule.thresholds(mark, 0.01, kind)
            assert all(a <= b for a, b in zip(t0, t1)), (kind, mark, t0, t1)
            assert model.rule.thresholds(mark, 0.5, kind) == model.rule.thresholds(mark)
    check = json.loads(path.with_suffix(".check.json").read_text())
    X, want = np.asarray(check["X"], np.float32), np.asarray(check["proba"])
    np.testing.assert_allclose(model.predict_proba(X, calibrated=False), want, atol=2e-5)
    assert len(set(want.argmax(axis=1))) >= 4


def test_reader_v13_is_reader_v11s_three_fits_read_as_one():
    """reader-v13 (the default in session 23, docs/EVALUATION.md): reader-v11's three fits
    (reader-v8's recipe refitted on colours read with the light stage's tone correction: one
    model and two fitted by the same command on other splits of the training photos), packed
    to read as one committee: one rule on their averaged probabilities, chosen on the 11
    calibration-only corpora, with the hand reader's thresholds never below a member's
    (reader-v12, in git history: the same without that bound). The
    trees are reader-v11's; it reads the guide and X columns, not the ring's; written and
    crossed are confident only in a tier; and every member was trained on tone-corrected
    colours, so photos are read with them."""
    from vision.learned import MEAN_FORMAT
    from vision.light import tone_correction_for
    from vision._evidence import X_FEATURES
    from vision._guide import GUIDE_FEATURES
    path = MODEL_DIR / "reader-v13.json"
    doc = json.loads(path.read_text())
    model = load_model(path)
    assert doc["format"] == MEAN_FORMAT and model.meta["id"] == "reader-v13"
    assert model.combine == "mean"
    assert [m.meta["id"] for m in model.committee] == ["reader-v13.2", "reader-v13.3"]
    assert tone_correction_for(model)
    assert all(m.meta["training"]["light_tone_correction"] for m in (model,) + model.committee)
    members = (model,) + model.committee
    assert len({m.meta["training"]["split_seed"] for m in members}) == 3
    for m in model.committee:
        assert m.feature_names == model.feature_names
        assert m.meta["training"]["datasets"] == model.meta["training"]["datasets"]
        assert m.meta["training"]["params"] == model.meta["training"]["params"]
    names = set(model.feature_names)
    assert set(GUIDE_FEATURES) <= names and set(X_FEATURES) <= names and not names & set(EVIDENCE_FEATURES)
    # the rule: chosen on the mean over the calibration-only corpora the fits were calibrated
    # on too (never trained on), with the fits' own search settings
    info = model.meta["mean_rule"]
    assert len(info["calibration"]) == 11 and info["rows"] > 400000
    assert info["calibration"] == model.meta["training"]["calibration_only"]
    assert info["margin"] == 1.5 and info["tier_only"] == ["written", "crossed"]
    assert [t[0] for t in model.rule.tiers] == [0.0, 0.015, 0.03]
    # the hand reader's thresholds at least those of every member's own rule (chosen also on
    # painters the member never saw), everywhere; reader-v12 had not that bound and read a
    # written total it could not see "empty" at 0.9998 with the hand reader at 0.9847
    kinds = ("box", "connection", "symbol", "treasure", "number_field", "entry_point", None)
    for doubt in (None, 0.0, 0.01, 0.02, 0.03, 0.04, 0.07, 0.2):
        for kind in kinds:
            for mark in MARKS:
                hm, _, _, hf = model.rule.thresholds(mark, doubt, kind)
                for m in members:
                    want = m.rule.thresholds(mark, doubt, kind)
                    assert hm >= want[0] and hf >= want[3], (doubt, kind, mark)
    assert model.rule.thresholds("empty", 0.2, "number_field")[0] >= 0.99
    for mark in ("written", "crossed"):
        assert all(v > 1.0 for v in model.rule.thresholds(mark, 0.5, "box")), mark
    # the learned thresholds sit above 5/6: a reading two members of three give to another
    # mark can never pass them (committee_disagreements is a guard the rule makes redundant)
    for doubt in (0.0, 0.01, 0.02, 0.04, 0.07, 0.5):
        for kind in ("box", "connection", "symbol", "treasure", "number_field", None):
            for mark in MARKS:
                hm, lm, la, hf = model.rule.thresholds(mark, doubt, kind)
                assert min(lm, la) > 5 / 6
    # the trees are reader-v11's, member for member
    v11 = load_model(MODEL_DIR / "reader-v11.json")
    X, want = _check_rows()
    for a, b in zip(members, (v11,) + v11.committee):
        np.testing.assert_array_equal(a.raw_scores(X), b.raw_scores(X))
        assert a.temperature == b.temperature
    np.testing.assert_allclose(model.predict_proba(X, calibrated=False), want, atol=2e-5)
    # the members are other fits: they do not give the first one's scores
    assert not np.allclose(model.committee[0].raw_scores(X), model.raw_scores(X), atol=1e-3)


def test_the_default_reader_v15_is_reader_v13_with_crossings_out_and_empties_in_more_tiers():
    """reader-v15 (the default since session 24, docs/EVALUATION.md): reader-v13's trees and
    rule; "crossed" confident in the doubt tiers (up to 0.08) when the hand reader is at least
    0.97 and the learned reader at least 0.995 sure, as chosen on the calibration rows and
    four crossed-out corpora (reader-v14, in git history); and "empty" named in the two tiers
    beyond reader-v13's (0.05, 0.08), chosen on the same rows, never looser than in the tier
    at 0.03. Every other reading is judged exactly as by reader-v13."""
    from vision.learned import MEAN_FORMAT
    assert DEFAULT_MODEL.name == "reader-v15.json"
    model, v13 = default_model(), load_model(MODEL_DIR / "reader-v13.json")
    assert json.loads(DEFAULT_MODEL.read_text())["format"] == MEAN_FORMAT
    assert model.meta["id"] == "reader-v15" and model.combine == "mean"
    assert [m.meta["id"] for m in model.committee] == ["reader-v15.2", "reader-v15.3"]
    X, want = _check_rows()
    for a, b in zip((model,) + model.committee, (v13,) + v13.committee):
        np.testing.assert_array_equal(a.raw_scores(X), b.raw_scores(X))
        assert a.temperature == b.temperature
    info = model.meta["mean_rule"]
    assert info["calibration"] == v13.meta["mean_rule"]["calibration"]
    assert len(info["cross_calibration"]) == 4 and info["own_tiers"][-2:] == [0.05, 0.08]
    assert info["own_marks"]["crossed"]["confident"] > 1000
    assert info["extra_tier_marks"]["empty"]["confident_gained"] > 1000
    kinds = ("box", "connection", "symbol", "treasure", "number_field", "entry_point", "star", None)
    doubts = (None, 0.0, 0.01, 0.02, 0.03, 0.04, 0.05, 0.07, 0.08, 0.1, 0.2, 1.0)
    for doubt in doubts:
        beyond = doubt is not None and 0.03 < doubt <= 0.08
        for kind in kinds:
            for mark in MARKS:
                if mark == "crossed" or (mark == "empty" and beyond):
                    continue
                assert model.rule.thresholds(mark, doubt, kind) == \
                    v13.rule.thresholds(mark, doubt, kind), (mark, doubt, kind)
            if beyond:
                # empty: never looser than in the tier at 0.03, floored like crossed
                hm, lm, la, hf = model.rule.thresholds("empty", doubt, kind)
                at03 = v13.rule.thresholds("empty", 0.03, kind)
                assert all(x >= y for x, y in zip((hm, lm, la, hf), at03)), (doubt, kind)
                assert min(hm, hf) >= 0.97 and min(lm, la) >= 0.995
            hm, lm, la, hf = model.rule.thresholds("crossed", doubt, kind)
            assert all(v > 1.0 for v in v13.rule.thresholds("crossed", doubt, kind))
            if doubt is None or doubt > 0.08:
                assert min(hm, lm) > 1.0 and la > 1.0, (doubt, kind)  # never confident
            else:
                assert hm <= 1.0 and lm <= 1.0, (doubt, kind)
                assert min(hm, hf) >= 0.97 and min(lm, la) >= 0.995, (doubt, kind)
    assert (model.rule.photo_gate, model.rule.photo_doubt_max) == \
        (v13.rule.photo_gate, v13.rule.photo_doubt_max)


def _committee_doc(primary: dict, *members: dict) -> dict:
    return {**primary, "format": COMMITTEE_FORMAT, "committee": list(members)}


def test_damaged_committees_are_clear_errors(model_doc):
    twin = dict(model_doc, id="twin")
    assert len(model_from_dict(_committee_doc(model_doc, twin)).committee) == 1
    hot = dict(model_doc, temperature=99)
    with pytest.raises(ReaderModelError, match=r"(?s)committee\[1\]: temperature: expected a number"
                                               r".*committee\[2\]: expected a 'sheetcheck.reader-model/1'"):
        model_from_dict(_committee_doc(model_doc, twin, hot, {"format": "x"}))
    with pytest.raises(ReaderModelError, match=r"committee: expected a non-empty list"):
        model_from_dict(_committee_doc(model_doc))
    with pytest.raises(ReaderModelError, match=r"committee: only a 'sheetcheck.reader-model/2' or 'sheetcheck.reader-model/3' model"):
        model_from_dict({**model_doc, "committee": [twin]})
    # a member may read only columns the first model reads (the reader measures those)
    g = model_doc["gbdt"]
    used = sorted({f for f, leaf in zip(g["feature"], g["leaf"]) if not leaf})
    small = copy.deepcopy(model_doc)
    small["gbdt"]["feature"] = [used.index(f) if not leaf else 0 for f, leaf in zip(g["feature"], g["leaf"])]
    small["feature_names"] = [model_doc["feature_names"][j] for j in used]
    unused = sorted(set(model_doc["feature_names"]) - set(small["feature_names"]))
    with pytest.raises(ReaderModelError, match=r"committee\[0\] reads columns the model does not: \['"
                                               + unused[0]):
        model_from_dict(_committee_doc(small, twin))
    assert model_from_dict(_committee_doc(model_doc, small)).committee[0].feature_names == tuple(small["feature_names"])


def test_a_second_opinion_flags_every_confident_reading_it_does_not_confirm(model_doc):
    """On a real photo: a member that is the model itself changes nothing; a member never sure
    (its photo gate above any photo) flags every confident reading, keeping the mark and naming
    itself; a member that reads everything "empty" flags every confident reading of another
    mark as a disagreement and confirms the empty ones."""
    from pathlib import Path
    from vision.pipeline import read_photo
    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"

    def read(doc):
        return read_photo(photo, learned=model_from_dict(doc)).readings

    alone = read(model_doc)
    sure = [rid for rid, rd in alone.items() if not rd.review]
    assert len(sure) >= 20 and len({alone[r].mark for r in sure}) >= 3
    twin = read(_committee_doc(model_doc, dict(model_doc, id="twin")))
    assert {k: (v.mark, v.confidence, v.review, v.reason) for k, v in twin.items()} == \
        {k: (v.mark, v.confidence, v.review, v.reason) for k, v in alone.items()}
    never = copy.deepcopy(model_doc)
    never["id"] = "never-sure"
    never["decision"]["photo_gate"] = 1.5
    flagged = read(_committee_doc(model_doc, never))
    empty = copy.deepcopy(model_doc)
    empty["id"] = "all-empty"
    empty["gbdt"]["baseline"][MARKS.index("empty")] += 60.0
    vetoed = read(_committee_doc(model_doc, empty))
    for rid, rd in alone.items():
        f, v = flagged[rid], vetoed[rid]
        assert f.mark == v.mark == rd.mark and f.alternatives == rd.alternatives
        if rd.review:  # already flagged: as it was
            assert (f.confidence, f.review, f.reason) == (v.confidence, v.review, v.reason) == \
                (rd.confidence, True, rd.reason)
            continue
        assert f.review and f.confidence < 0.97 <= rd.confidence
        assert f.reason.startswith(f"second opinion unsure (never-sure: {rd.mark} ")
        if rd.mark == "empty":
            assert not v.review and v.confidence == rd.confidence
        else:
            assert v.review and v.reason.startswith("second opinion disagrees (all-empty: empty 1.0000)")


def test_the_committees_verdicts_are_combine_alls(model_doc):
    """second_opinions judges each member with vision.learned._rule_arrays alone (numpy, no
    readings built), and combine_all builds its readings on it with the alternatives in a
    stable sort's order: the rule's mark, probability and confidence are the readings' (the
    first alternative is the rule's first best), on the sample photo's rows and on random
    probabilities with ties, zeros, NaN and marks a region does not allow, under every tier of
    the rule, a gated photo and an unclear one. (combine_all against the rule region by
    region: tests/test_vision_speed3.py.)"""
    from pathlib import Path
    from vision.learned import _HandRows, _rule_arrays, combine_all
    from vision.pipeline import read_photo
    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "reefs-2-typical-s9.jpg"
    model = model_from_dict(model_doc)
    r = read_photo(photo, learned=None, keep_matrix=True)
    hands = list(r.readings.values())
    rng = np.random.default_rng(4)
    real = model.predict_proba(r.matrix)
    noise = rng.dirichlet(np.full(len(MARKS), 0.3), len(hands))
    noise[::7] = np.round(noise[::7], 1)  # ties
    noise[3::11] = 0.0
    noise[5::13, 2] = np.nan
    for probs in (real, noise):
        for doubt, pconf in ((0.0, 1.0), (0.01, 1.0), (0.2, 1.0), (0.0, 0.1), (0.9, 1.0)):
            want = combine_all(hands, probs, classes=MARKS, rule=model.rule, review_threshold=0.97,
                               photo_confidence=pconf, doubt=doubt)
            mark, p, sure = _rule_arrays(_HandRows.of(hands, MARKS), probs, classes=MARKS,
                                         rule=model.rule, photo_confidence=pconf, doubt=doubt)[2:]
            assert [MARKS[m] for m in mark] == [w.mark for w in want]
            assert p.tolist() == [w.features["learned_confidence"] for w in want]
            assert (~sure).tolist() == [w.review for w in want]
            if probs is real and doubt == 0.0 and pconf == 1.0:
                assert 0 < sure.sum() < len(sure)


def test_a_committee_read_as_one_averages_its_members_and_names_each_ones_mark():
    from vision.learned import committee_proba
    a = np.array([[0.7, 0.2, 0.1], [0.2, 0.5, 0.3], [np.nan] * 3])
    b = np.array([[0.6, 0.3, 0.1], [0.1, 0.3, 0.6], [np.nan] * 3])
    c = np.array([[0.5, 0.4, 0.1], [0.3, 0.4, 0.3], [np.nan] * 3])
    p, marks = committee_proba([a, b, c])
    np.testing.assert_allclose(p[:2], (a[:2] + b[:2] + c[:2]) / 3)
    assert np.isnan(p[2]).all()  # (a region no class fits stays so)
    assert marks.shape == (3, 3)
    assert marks[:, 0].tolist() == [0, 0, 0] and marks[:, 1].tolist() == [1, 2, 1]


def test_a_confident_reading_some_member_reads_otherwise_is_flagged():
    from vision.learned import committee_disagreements
    from vision.marks import MARKS, RegionReading
    classes = list(MARKS)
    rd = [RegionReading(f"r{i}", "box", "red", 0.995, False, (("red", 0.995),), {}, "")
          for i in range(3)]
    rd[2] = RegionReading("r2", "box", "red", 0.6, True, (("red", 0.6),), {}, "low confidence")
    red, purple = classes.index("red"), classes.index("purple")
    marks = np.array([[red, red, red], [red, purple, purple]])
    probs = [np.full((3, len(classes)), 0.1), np.full((3, len(classes)), 0.1)]
    probs[1][1, purple] = 0.55
    out = committee_disagreements(rd, marks, probs, ["m1", "m2"], classes=classes,
                                  review_threshold=0.97)
    assert out[0] == rd[0]  # every member names red: kept
    assert out[1].review and out[1].mark == "red" and out[1].confidence < 0.97
    assert out[1].reason == "committee disagrees (m2: purple 0.5500)"
    assert out[2] == rd[2]  # already flagged: its own reason kept


def test_only_a_format_3_model_says_how_its_committee_combines():
    import json as _json
    from vision.learned import MEAN_FORMAT, MODEL_DIR
    doc = _json.loads((MODEL_DIR / "reader-v11.json").read_text())
    with pytest.raises(ReaderModelError, match="only a 'sheetcheck.reader-model/3' model may say"):
        model_from_dict({**doc, "combine": "mean"})
    with pytest.raises(ReaderModelError, match="must say \"mean\""):
        model_from_dict({**doc, "format": MEAN_FORMAT})
    model = model_from_dict({**doc, "format": MEAN_FORMAT, "combine": "mean"})
    assert model.combine == "mean" and len(model.committee) == 2
    assert load_model(MODEL_DIR / "reader-v11.json").combine == "second_opinions"
