"""The patch reader (vision.patch_reader): its network (on cv2.dnn and in numpy), its patches, the flags it may
lift on a real photo and the ones it may not, its model file's errors, and the training
script's data rules and threshold choice."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from calibration.template import get_template
from sheetcheck.errors import SheetcheckError
from tests._scripts import load_script
from vision.patch_reader import (CHUNK, DARK_EMPTY, DEFAULT_PATCH_MODEL, DISSENT_EMPTY_KINDS,
                                  DISSENT_MARKS, LIFT_BESIDE, LIFTABLE, LIFTABLE_CHECKS,
                                 MARKS, PATCH_MODEL_FORMAT, SWITCH_FROM, SWITCH_MARKS,
                                 ReaderModelError, lift_threshold, lifts_check, switchable,
                                 threshold_key as pr_threshold_key,
                                 _conv3x3_relu, default_patch_reader, liftable,
                                 load_patch_reader, patch_geometry, region_patches)
from vision.pipeline import read_photo, sheet_model

SAMPLES = Path(__file__).resolve().parent.parent / "sample_photos"


def test_the_numpy_convolution_is_a_3x3_sum_over_channels_then_relu():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 5, 6, 3)).astype(np.float32)
    w = rng.normal(size=(3, 3, 3, 4)).astype(np.float32)  # (row, column, in, out)
    b = rng.normal(size=4).astype(np.float32)
    got = _conv3x3_relu(x, w.reshape(27, 4), b)
    xp = np.pad(x, ((0, 0), (1, 1), (1, 1), (0, 0)))
    want = np.zeros((2, 5, 6, 4))
    for i in range(5):
        for j in range(6):
            want[:, i, j] = np.einsum("nabc,abco->no", xp[:, i:i + 3, j:j + 3], w) + b
    np.testing.assert_allclose(got, np.maximum(want, 0), rtol=1e-5, atol=1e-5)


def _chunked(reader, patches, kinds, allowed, **kw):
    return np.concatenate([reader.probabilities(patches[a:a + CHUNK], kinds[a:a + CHUNK],
                                                allowed[a:a + CHUNK], **kw)
                           for a in range(0, len(patches), CHUNK)])


def test_the_dnn_network_built_in_code_reads_as_the_numpy_one():
    """The convolutions on cv2.dnn (built from the model's weights at load time) give the
    numpy path's probabilities on every region of real photos, on any thread, whatever
    OpenCV's thread count; the numpy path stays one argument away."""
    import threading

    import cv2

    reader = default_patch_reader()
    assert reader.engine == "cv2.dnn" and reader.dnn is not None  # (this OpenCV builds it)
    ids, patches, kinds, allowed = [], [], [], []
    for name in ("reefs-3-typical-s12.jpg", "crypts-1-hard-s2.jpg"):
        got = read_photo(str(SAMPLES / name), keep_patches=True).patches
        ids += list(got[0])
        patches.append(got[1])
        kinds += list(got[2])
        allowed.append(got[3])
    patches, allowed = np.concatenate(patches), np.concatenate(allowed)
    assert len(patches) > 300
    want = _chunked(reader, patches, kinds, allowed, engine="numpy")
    got = _chunked(reader, patches, kinds, allowed)
    assert np.abs(got - want).max() < 1e-4
    assert (got.argmax(axis=1) == want.argmax(axis=1)).all()
    assert (got[~allowed] == 0).all()
    # the same values on one OpenCV thread and on a second Python thread (its own network)
    before = cv2.getNumThreads()
    try:
        cv2.setNumThreads(1)
        assert (_chunked(reader, patches, kinds, allowed) == got).all()
    finally:
        cv2.setNumThreads(before)
    other = []
    th = threading.Thread(target=lambda: other.append(_chunked(reader, patches, kinds, allowed)))
    th.start()
    th.join()
    assert (other[0] == got).all()
    # numpy alone, when asked (or when cv2.dnn cannot build the network)
    plain = load_patch_reader(DEFAULT_PATCH_MODEL, engine="numpy")
    assert plain.engine == "numpy" and plain.dnn is None
    assert (_chunked(plain, patches, kinds, allowed) == want).all()
    with pytest.raises(ValueError, match="no cv2.dnn network"):
        plain.probabilities(patches[:2], kinds[:2], allowed[:2], engine="cv2.dnn")
    with pytest.raises(ValueError, match="engine"):
        load_patch_reader(DEFAULT_PATCH_MODEL, engine="torch")


def test_a_network_cv2_dnn_does_not_reproduce_falls_back_to_numpy(monkeypatch):
    from vision import patch_reader as pr

    def wrong(self):  # a network whose first convolution lost its bias
        net = build(self)
        net.getLayer(net.getLayerId("conv0")).blobs = [self._layers[0][0],
                                                       np.zeros_like(self._layers[0][1])]
        return net

    build = pr._DnnConvs.build
    monkeypatch.setattr(pr._DnnConvs, "build", wrong)
    assert load_patch_reader(DEFAULT_PATCH_MODEL).engine == "numpy"
    with pytest.raises(ValueError, match="cv2.dnn"):
        load_patch_reader(DEFAULT_PATCH_MODEL, engine="cv2.dnn")
    monkeypatch.setattr(pr._DnnConvs, "build", lambda self: 1 / 0)
    assert load_patch_reader(DEFAULT_PATCH_MODEL).engine == "numpy"


def test_a_patch_holds_the_region_its_outline_and_its_print():
    t = get_template("crypts-1")
    m = sheet_model(t, dpi=100.0)
    geo = patch_geometry(t, m.expected, dpi=100.0)
    assert geo.ids == tuple(r.id for r in t.regions)
    i = next(k for k, r in enumerate(t.regions) if r.kind == "box")
    # the clean render read as a photo: paper white, the box's printed outline dark
    p = region_patches(m.expected, geo, [i])[0]
    assert p.shape == (32, 32, 5) and p.dtype == np.uint8
    mask, printed = p[..., 3], p[..., 4]
    assert mask[16, 16] == 255 and mask[0, 0] == 0  # the region in the middle, a margin around
    assert printed.min() < 128 and np.median(printed) > 200
    # the picture channels are the print where it is printed
    grey = p[..., :3].astype(int).mean(axis=2)
    assert abs(grey - printed.astype(int)).mean() < 12
    # a window leaving the sheet is padded with paper
    far = np.ones((8, 8, 3), np.float32)
    assert (region_patches(far, geo, [i])[0][..., :3] == 255).all()


def _read_both(name):
    path = str(SAMPLES / name)
    return read_photo(path, patch_reader=None), read_photo(path)


def test_the_patch_reader_lifts_only_the_readers_own_doubt_and_corrects_only_flagged_marks():
    reader = default_patch_reader()
    lifted_any = 0
    for name in ("reefs-3-typical-s12.jpg", "crypts-1-typical-s3.jpg", "reefs-1-easy-s7.jpg"):
        corrected_confirmed = 0
        before, after = _read_both(name)
        assert list(before.readings) == list(after.readings)
        for rid, b in before.readings.items():
            a = after.readings[rid]
            if a.mark != b.mark:  # a correction: of a flagged reading, to a mark of shape
                assert b.review and switchable(b), (rid, b.reason)
                assert a.mark in SWITCH_MARKS and a.features["patch_mark"] == a.mark
                assert a.features["patch_confidence"] >= reader.switch_thresholds[a.mark]
                assert a.features["patch_corrected_from"] == b.mark
                assert a.alternatives[0][0] == a.mark and b.mark in dict(a.alternatives)
                if a.review:
                    assert a.reason.startswith(f"the patch reader reads {a.mark} (")
                    assert a.confidence < after.details["review_threshold"]
                else:  # (session 50) sure enough where a flag may be lifted: confirmed
                    corrected_confirmed += 1
                    assert liftable(b) and after.details["patch_reader"]["held_back_by"] is None
                    assert a.features["patch_confidence"] >= (
                        reader.switch_confirm_thresholds[a.mark])
                    assert a.features["patch_confirmed"] == 1.0 and a.reason == ""
                    assert a.confidence >= after.details["review_threshold"]
            elif b.review and not a.review:
                lifted_any += 1
                # only the readers' own doubt, or (session 49) a stroke through an "empty" or
                # a blank swatch among coloured ones, at the mark's own threshold
                assert liftable(b), (rid, b.reason)
                assert a.features["patch_mark"] == a.mark
                assert a.features["patch_confidence"] >= lift_threshold(reader, b) - 1e-6
                assert a.confidence >= after.details["review_threshold"]
                assert a.features["patch_confirmed"] == 1.0 and a.reason == ""
                if lifts_check(b):
                    assert a.mark == "empty" and a.features["patch_lifted_check"] in LIFTABLE_CHECKS
                    assert "patch_confirmed_with_readers" not in a.features
                else:
                    assert "patch_lifted_check" not in a.features
            elif b.review:
                assert a.review and a.reason == b.reason
            elif b.mark in DISSENT_MARKS or (b.mark == "empty" and b.kind in DISSENT_EMPTY_KINDS):
                # a confident crossing-out is watched, and (session 48) a confident "empty"
                # where a crossing-out could hide
                assert a.features["patch_mark"] == a.mark or (
                    a.review and a.reason.startswith("the patch reader disagrees"))
            else:  # a confident reading is left as it was, unread by the patch reader
                assert a == b
        done = after.details["patch_reader"]
        assert done["model"] == reader.id
        share = sum(b.review for b in before.readings.values()) / len(before.readings)
        assert done["photo_flagged"] == round(share, 4)
        # a flag it may not lift holds the whole photo back, but (session 49) those of the
        # checks it lifts and of the checks about their own region alone
        others = [b.reason.split(" (")[0] for b in before.readings.values()
                  if b.review and not b.reason.startswith(LIFTABLE + LIFTABLE_CHECKS
                                                          + LIFT_BESIDE)]
        assert done["held_back_by"] == (others[0] if others else None)
        free = share <= reader.photo_flagged_max and not others
        # a flag of the photo's own doubt or of a check holds back lifting, not correcting
        # (session 48: only something lying on the sheet holds corrections back)
        assert done["corrections_held_back_by"] is None
        assert done["read"] == sum(1 for b in before.readings.values()
                                   if (free and liftable(b)
                                       and lift_threshold(reader, b) is not None)
                                   or switchable(b)
                                   or (not b.review and b.mark in DISSENT_MARKS)
                                   or (not b.review and b.mark == "empty"
                                       and b.kind in DISSENT_EMPTY_KINDS))
        assert done["confirmed"] + done["corrected_confirmed"] == sum(
            1 for rid, b in before.readings.items() if b.review and not after.readings[rid].review)
        assert done["corrected_confirmed"] == corrected_confirmed
        assert done["corrected"] == sum(1 for rid, b in before.readings.items()
                                        if after.readings[rid].mark != b.mark)
        info = after.to_json()["details"]["reader"]["patch_reader"]
        assert info["lifts"] == list(LIFTABLE) and info["corrects"]["from"] == list(SWITCH_FROM)
        assert info["lifts_checks"] == list(LIFTABLE_CHECKS)
        assert info["lifts_beside"] == list(LIFT_BESIDE)
        assert info["with_readers_if"] == {"confidence_min": 0.6, "colour_crossed_max": 0.01}
        assert done["confirmed_checks"] == sum(
            1 for a in after.readings.values() if "patch_lifted_check" in a.features)
        assert info["corrects"]["to"] == dict(reader.switch_thresholds)
        assert info["corrects"]["confirms_at"] == dict(reader.switch_confirm_thresholds)
        assert "patches" in after.timings_ms
    assert lifted_any > 0


def test_flags_of_the_photo_and_of_the_other_checks_are_never_lifted():
    before, after = _read_both("reefs-3-hard-s13.jpg")
    kept = [rid for rid, b in before.readings.items() if b.review and not liftable(b)]
    assert kept  # (a hard photo: its own doubt flags regions)
    for rid in kept:
        a, b = after.readings[rid], before.readings[rid]
        # kept, or corrected (still flagged, the readers' reason quoted)
        assert a.review and (a.reason == b.reason or (
            a.mark != b.mark and a.reason.endswith(f"not {b.mark} ({b.reason})")))


def test_the_bundled_model_records_how_it_was_made():
    r = default_patch_reader()
    assert r.meta["format"] == PATCH_MODEL_FORMAT and list(r.meta["marks"]) == list(MARKS)
    assert r.thresholds and all(0.99 <= t < 1.0 for t in r.thresholds.values())
    fit = r.meta["training"]["fit"]
    assert fit and all("heldout" not in f for f in fit)
    assert r.meta["calibration"]["by_mark"]
    # (session 46) the marks it may correct a flagged reading to: marks of shape, not hue
    assert r.switch_thresholds and set(r.switch_thresholds) <= set(SWITCH_MARKS)
    assert all(0.9 <= t < 1.0 for t in r.switch_thresholds.values())
    assert r.meta["calibration"]["switch_by_mark"]
    # (session 47) lower thresholds for flags both readers agree on, never under 0.9; an
    # "empty" with dark texels apart, with thresholds chosen for it alone (patch-v1.2 needed
    # 0.999 there, patch-v2 0.995 as for other "empty" readings: its surest wrong one is 0.898)
    assert r.agree_thresholds and all(0.9 <= t <= r.thresholds.get(m, 1.0)
                                      for m, t in r.agree_thresholds.items())
    assert r.dark_empty_split and DARK_EMPTY in r.thresholds
    assert DARK_EMPTY in r.meta["calibration"]["by_mark"]


def test_an_empty_with_dark_texels_has_thresholds_of_its_own():
    from dataclasses import replace

    from vision.marks import RegionReading
    from vision.patch_reader import lift_threshold, threshold_key

    r = default_patch_reader()

    def rd(mark, **feats):
        return RegionReading("treasure.4", "treasure", mark, 0.9, True, ((mark, 0.9),),
                             {"hand_mark": mark, "learned_mark": mark, **feats},
                             "low confidence")
    assert threshold_key(r, rd("empty", dark=0.0)) == "empty"
    assert threshold_key(r, rd("empty", dark=0.0172)) == DARK_EMPTY
    assert threshold_key(r, rd("empty")) == DARK_EMPTY  # (nothing known: the stricter)
    assert threshold_key(r, rd("orange", dark=0.3)) == "orange"
    # the key picks the thresholds: its own, or the lower one of its readers agreeing
    r = replace(r, thresholds={**r.thresholds, "empty": 0.995, DARK_EMPTY: 0.999},
                agree_thresholds={**r.agree_thresholds, "empty": 0.97})
    r.agree_thresholds.pop(DARK_EMPTY, None)
    assert lift_threshold(r, rd("empty", dark=0.0)) == 0.97
    assert lift_threshold(r, rd("empty", dark=0.0172)) == 0.999
    disagree = replace(rd("empty", dark=0.0), features={"hand_mark": "blue", "dark": 0.0})
    assert lift_threshold(r, disagree) == 0.995
    # a model without the split (patch-v1.1 and before) reads every "empty" alike
    old = replace(r, dark_empty_split=False)
    assert threshold_key(old, rd("empty", dark=0.0172)) == "empty"


def test_a_colour_the_patch_reader_doubts_as_crossed_is_lifted_at_its_own_threshold_alone():
    """(session 49) AGREE_CROSSED_MAX: a colour both readers named is lifted at the lower
    threshold of agreeing readers only while the patch reader gives "crossed" at most 0.01;
    AGREE_CONFIDENCE_MIN: and only a reading held at 0.6 at least."""
    from dataclasses import replace

    from vision.marks import RegionReading
    from vision.patch_reader import AGREE_CROSSED_MAX

    r = replace(default_patch_reader(), thresholds={"orange": 0.995, "empty": 0.995},
                agree_thresholds={"orange": 0.98, "empty": 0.98}, dark_empty_split=False)

    def rd(mark):
        return RegionReading("treasurebox.green.3", "treasure", mark, 0.9, True, ((mark, 0.9),),
                             {"hand_mark": mark, "learned_mark": mark}, "low confidence")

    def p(**v):
        out = np.zeros(len(MARKS))
        for m, x in v.items():
            out[MARKS.index(m)] = x
        return out
    # the fresh 7200000's crossing-out read "orange": orange 0.9822, crossed 0.0175
    assert AGREE_CROSSED_MAX == 0.01
    assert lift_threshold(r, rd("orange"), p(orange=0.9822, crossed=0.0175)) == 0.995
    assert lift_threshold(r, rd("orange"), p(orange=0.9822, red=0.0175)) == 0.98
    assert lift_threshold(r, rd("orange"), p(orange=0.985, crossed=0.009)) == 0.98
    assert lift_threshold(r, rd("orange")) == 0.98  # (before it is read: the lowest it may be)
    # (AGREE_CONFIDENCE_MIN) a reading the committee gives barely half is no agreement: the
    # fresh 7300000's purple zigzag read "crossed" at 0.53 (purple 0.43)
    from vision.patch_reader import AGREE_CONFIDENCE_MIN
    assert AGREE_CONFIDENCE_MIN == 0.6
    r = replace(r, thresholds={**r.thresholds, "crossed": 0.9995},
                agree_thresholds={**r.agree_thresholds, "crossed": 0.97})
    assert lift_threshold(r, replace(rd("crossed"), confidence=0.5346)) == 0.9995
    assert lift_threshold(r, replace(rd("crossed"), confidence=0.6)) == 0.97
    # an "empty" is not a colour: its second choice is judged by its thresholds alone
    assert lift_threshold(r, rd("empty"), p(empty=0.985, crossed=0.015)) == 0.98


@pytest.mark.parametrize("job, region, truth", [
    # make_corpus.py --seed 7200000 --cross-rate 0.3, photo 9: a green treasure box crossed
    # out with an orange pencil, read "orange" by both readers and lifted at orange 0.982
    # (crossed 0.0175)
    (("reefs-1", "typical", True, 7200009, "default", {}, 0.3), "treasurebox.green.3",
     "crossed"),
    # make_corpus.py --seed 7300000, photo 186: a cell coloured purple with a sparse zigzag of
    # two strokes, read "crossed" by both readers at 0.49 and 0.53 and lifted at crossed 0.993
    (("crypts-1", "typical", False, 7300186, "default", {}, 0.0), "cell.r3.c2", "purple"),
])
def test_the_confident_errors_of_the_fresh_7200000_and_7300000_stay_flagged(tmp_path, job,
                                                                               region, truth):
    """(session 49) End to end, the photos of main's confident errors on the fresh corpora
    7200000 and 7300000, made again from their seeds (``make_corpus.make_one``: the same bytes
    as the corpora's): each region the patch reader lifted at the lower threshold of agreeing
    readers stays flagged (AGREE_CROSSED_MAX, AGREE_CONFIDENCE_MIN)."""
    mc = load_script("make_corpus")
    template_id, preset, markers, seed, painter, overrides, cross_rate = job
    stem, _, _ = mc.make_one((template_id, preset, markers, seed, str(tmp_path), painter,
                              overrides, cross_rate))
    assert json.loads((tmp_path / f"{stem}.truth.json").read_text())["marks"][region] == truth
    got = read_photo(str(tmp_path / f"{stem}.jpg"))
    a = got.readings[region]
    assert a.review, a  # (it may be read wrong still, but a person is asked to look)
    if a.mark != truth:
        # never confirmed by the patch reader (patch-v2 named the wrong mark too and was held
        # off by the rules; patch-v3 names purple on cell.r3.c2, so the readers' "crossed"
        # meets a patch reader that disagrees)
        assert "patch_confirmed" not in a.features, a
        assert a.features["patch_mark"] in (a.mark, truth), a


def test_a_missing_damaged_or_foreign_model_is_a_clear_error(tmp_path):
    with pytest.raises(ReaderModelError) as e:
        load_patch_reader(tmp_path / "none.npz")
    assert "missing" in str(e.value) and e.value.hint and isinstance(e.value, SheetcheckError)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a model")
    with pytest.raises(ReaderModelError, match="cannot be read"):
        load_patch_reader(bad)
    other = tmp_path / "other.npz"
    np.savez(other, meta=np.asarray(json.dumps({"format": "something/9"})))
    with pytest.raises(ReaderModelError, match="damaged"):
        load_patch_reader(other)
    # a good model with one array cut short
    good = dict(np.load(DEFAULT_PATCH_MODEL))
    good["conv1_b"] = good["conv1_b"][:-1]
    cut = tmp_path / "cut.npz"
    np.savez(cut, **good)
    with pytest.raises(ReaderModelError, match="conv1"):
        load_patch_reader(cut)
    # thresholds of the wrong shape (session 47's included) are a damaged model too
    for key, value in (("agree_thresholds", [0.9]), ("thresholds", "0.99"),
                       ("agree_thresholds", {"empty": "high"})):
        good = dict(np.load(DEFAULT_PATCH_MODEL))
        meta = json.loads(str(good["meta"]))
        meta[key] = value
        good["meta"] = np.asarray(json.dumps(meta))
        odd = tmp_path / "odd.npz"
        np.savez(odd, **good)
        with pytest.raises(ReaderModelError, match="damaged"):
            load_patch_reader(odd)


def _dataset(path, *, painter="default", seed=5000, n=6):
    rng = np.random.default_rng(1)
    np.savez(path, X=rng.integers(0, 255, (n, 32, 32, 5), dtype=np.uint8),
             y=np.zeros(n, np.int16), allowed=np.ones((n, 8), bool), kind=np.array(["box"] * n),
             read=np.zeros(n, np.int16), conf=np.full(n, 0.9, np.float32),
             review=np.ones(n, bool), reason=np.array(["low confidence"] * n),
             seed=np.full(n, seed), painter=np.array([painter] * n),
             preset=np.array(["easy"] * n), photo=np.zeros(n, int))
    return str(path)


def test_training_never_fits_on_measurement_seeds_nor_lets_the_held_out_painter_choose(tmp_path):
    tr = load_script("train_patch_reader")
    dev = _dataset(tmp_path / "dev.npz")
    spent = _dataset(tmp_path / "spent.npz", seed=5300001)
    held = _dataset(tmp_path / "held.npz", painter="heldout", seed=1510001)
    assert len(tr.load([dev], role="fit")["y"]) == 6
    with pytest.raises(SystemExit, match="dev seeds only"):
        tr.load([dev, spent], role="fit")
    assert len(tr.load([spent], role="calib")["y"]) == 6  # spent corpora may calibrate
    for role in ("fit", "calib"):
        with pytest.raises(SystemExit, match="held-out painter"):
            tr.load([held], role=role)
    assert len(tr.load([held], role="test")["y"]) == 6  # and be measured


def test_a_threshold_sits_a_step_above_the_surest_wrong_confirmation():
    tr = load_script("train_patch_reader")
    # photo 0: six "empty" readings flagged for low confidence among 26 regions (23 %
    # flagged); the patch reader says "empty" on all six, sure at these levels, and the
    # reading is wrong on the one at 0.9965
    p_empty = np.array([0.991, 0.996, 0.9965, 0.9991, 0.9996, 0.99995] + [0.9] * 20
                       # photo 1: every region flagged, a wrong one at 0.99999
                       + [0.99999, 0.995])
    n = len(p_empty)
    P = np.zeros((n, 8))
    P[:, 0] = p_empty
    P[:, 1] = 1 - p_empty
    d = {"review": np.array([True] * 6 + [False] * 20 + [True, True]),
         "reason": np.array(["low confidence"] * 6 + [""] * 20 + ["readers disagree"] * 2),
         "read": np.zeros(n, int), "y": np.array([0, 0, 1, 0, 0, 0] + [0] * 20 + [1, 0]),
         "photo": np.array([0] * 26 + [1, 1])}
    th, report = tr.choose_thresholds(P, d, photo_flagged_max=0.3)
    # the grid values above 0.9965 are 0.998, 0.999, ...: one step above is 0.999
    assert th["empty"] == 0.999
    assert report["empty"] == {"candidates": 6, "wrong": 1, "highest_wrong": 0.9965,
                               "threshold": 0.999, "confirmed": 3}
    # counting the photo the readers flag all over, the wrong one at 0.99999 leaves no grid
    # value one step above it: "empty" would never be confirmed
    th, report = tr.choose_thresholds(P, d, photo_flagged_max=1.0)
    assert "empty" not in th and report["empty"]["wrong"] == 2
    # a flag of another reason is not a candidate
    d["reason"] = np.array(["photo too unreliable"] * n)
    th, report = tr.choose_thresholds(P, d, photo_flagged_max=1.0)
    assert report["empty"]["candidates"] == 0 and th["empty"] == 0.99


def test_a_correction_threshold_weighs_right_corrections_against_wrong_ones():
    tr = load_script("train_patch_reader")
    # 300 flagged "blue" readings the patch reader calls crossed at 0.91 .. 0.9999: the truth
    # is crossed on all but two, right blues at 0.93 and 0.955; 2 of 300 is 0.7 %, 1 of the
    # 166 at >= 0.95 is 0.6 %, within SWITCH_LOSS_MAX (1 %) at every grid step
    pc = np.linspace(0.91, 0.9999, 300)
    y = np.full(300, MARKS.index("crossed"))
    y[[int(np.argmin(abs(pc - 0.93))), int(np.argmin(abs(pc - 0.955)))]] = MARKS.index("blue")
    # and 20 "empty" corrections of which 3 are wrong at the top: never within 1 %
    pe = np.linspace(0.991, 0.9999, 20)
    ye = np.array([0] * 17 + [3] * 3)
    P = np.zeros((320, 8))
    P[np.arange(300), MARKS.index("crossed")] = pc
    P[np.arange(300), MARKS.index("blue")] = 1 - pc
    P[300:, 0] = pe
    P[300:, 3] = 1 - pe
    d = {"review": np.ones(320, bool), "reason": np.array(["low confidence"] * 320),
         "read": np.full(320, MARKS.index("blue")), "y": np.concatenate([y, ye]),
         "photo": np.arange(320)}
    th, report = tr.choose_switch_thresholds(P, d)
    assert th == {"crossed": tr.SWITCH_GRID[0]}
    assert report["crossed"]["right_wrong_by_grid"][0] == [298, 2]
    assert report["empty"]["right_wrong_by_grid"][-1] == [0, 2] and "threshold" not in report["empty"]
    # (session 48) a flag of another reason on the photo holds no row back, as when reading;
    # its own row is not one to correct
    d2 = {**d, "reason": np.array(["a stroke runs through it"] + ["low confidence"] * 319),
          "photo": np.zeros(320, int)}
    assert tr.switch_rows(d2).tolist() == [False] + [True] * 319
    got = tr.corrections(P, d, th)
    assert got["corrected"] == 300 and got["corrected_right"] == 298 and got["corrected_wrong"] == 2


def test_the_dataset_holds_each_region_its_truth_and_the_readers_verdict(tmp_path, capsys):
    import shutil

    ds = load_script("patch_dataset", register=True)
    folder = tmp_path / "dev"
    folder.mkdir()
    for suffix in (".jpg", ".truth.json"):  # seed 1: a dev seed
        shutil.copy(SAMPLES / f"crypts-1-easy-s1{suffix}", folder / f"crypts-1-easy-s1{suffix}")
    out = tmp_path / "rows.npz"
    assert ds.main([str(folder), "--out", str(out), "--workers", "1"]) == 0
    d = np.load(out)
    truth = json.loads((folder / "crypts-1-easy-s1.truth.json").read_text())["marks"]
    reading = read_photo(str(folder / "crypts-1-easy-s1.jpg"), patch_reader=None)
    assert d["X"].shape == (len(d["y"]), 32, 32, 5) and len(d["y"]) == len(reading.readings)
    for rid, y, rd, rv, reason in zip(d["region"], d["y"], d["read"], d["review"], d["reason"]):
        assert MARKS[y] == truth[rid]
        r = reading.readings[rid]
        assert (MARKS[rd], bool(rv), str(reason)) == (r.mark, r.review, r.reason.split(" (")[0])
    # the readers' probabilities of every mark, and each reader's own verdict
    for k, rid in enumerate(d["region"]):
        r = reading.readings[rid]
        assert dict(r.alternatives) == {MARKS[j]: pytest.approx(float(p)) for j, p in
                                        enumerate(d["alt"][k]) if p > 0 or MARKS[j] in dict(
                                            r.alternatives)}
        assert MARKS[d["hand"][k]] == r.features["hand_mark"]
        assert MARKS[d["learned"][k]] == r.features["learned_mark"]
        assert d["learned_conf"][k] == pytest.approx(r.features["learned_confidence"])
        # (session 47) the hand reader's blank features
        assert d["blank"][k] == pytest.approx([r.features[f] for f in ds.BLANK_FEATURES])
    assert (d["blank"][:, 2] > 0).any() and (d["blank"][:, 2] == 0).any()
    # a photo of a measurement seed not yet spent gives no row, and says so
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    shutil.copy(SAMPLES / "crypts-1-easy-s1.jpg", fresh / "crypts-1-easy-s9900001.jpg")
    t = json.loads((SAMPLES / "crypts-1-easy-s1.truth.json").read_text())
    t["seed"] = 9900001
    (fresh / "crypts-1-easy-s9900001.truth.json").write_text(json.dumps(t))
    assert ds.main([str(fresh), "--out", str(tmp_path / "none.npz"), "--workers", "1"]) == 1
    assert "seed 9900001 not allowed" in capsys.readouterr().err


def _coloured_in(sheet, region, rgb, *, inset: int, dpi: float = 100.0):
    """A copy of a rendered sheet (linear RGB at ``dpi``) with ``region``'s bounding box, less
    ``inset`` pixels more than one on each side, multiplied by a pencil's linear ``rgb``:
    coloured in, the print still showing through."""
    out = sheet.copy()
    poly = np.asarray(region.shape.polygon(), float) * (dpi / 25.4)
    (x0, y0), (x1, y1) = poly.min(0), poly.max(0)
    out[int(y0) + 1 + inset:int(y1) - inset, int(x0) + 1 + inset:int(x1) - inset] *= np.array(
        rgb, np.float32)
    return out


def test_a_confident_crossing_out_the_patch_reader_sees_as_a_colour_is_flagged():
    from dataclasses import replace

    from vision.marks import RegionReading
    from vision.patch_reader import confirm

    t = get_template("crypts-1")
    m = sheet_model(t, dpi=100.0)
    geo = patch_geometry(t, m.expected, dpi=100.0)
    boxes = [r for r in t.regions if r.kind == "box"]
    blue, blank = boxes[3], boxes[8]
    # the first box filled with a blue pencil (linear RGB of a mid blue), print kept on top
    sheet = _coloured_in(m.expected, blue, (0.12, 0.25, 0.65), inset=1)

    def rd(region, mark, review, reason=""):
        return RegionReading(region.id, region.kind, mark, 0.999 if not review else 0.9,
                             review, ((mark, 0.999),), {}, reason)
    readings = {blue.id: rd(blue, "crossed", False),
                blank.id: rd(blank, "empty", True,
                             "low confidence (empty: hand 0.99, learned 0.98)")}
    reader = default_patch_reader()
    out, done = confirm(readings, sheet, t, m.expected, dpi=100.0, reader=reader,
                        review_threshold=0.97)
    a = out[blue.id]
    assert a.review and a.mark == "crossed" and a.confidence < 0.97
    assert a.reason.startswith("the patch reader disagrees (blue")
    # the blank box's flag of low confidence stays: 1 of 2 regions flagged is a photo in
    # doubt (over photo_flagged_max); it is read only as a reading it might correct
    assert done["dissents"] == 1 and done["read"] == 2 and done["photo_flagged"] == 0.5
    assert done["corrected"] == 0 and out[blank.id].features["patch_mark"] == "empty"
    assert out[blank.id] == replace(readings[blank.id], features=out[blank.id].features)
    assert out[blank.id].review and done["confirmed"] == 0
    # on a photo with few regions flagged it is lifted
    many = {**readings, **{r.id: rd(r, "empty", False) for r in boxes[10:20]}}
    out, done = confirm(many, sheet, t, m.expected, dpi=100.0, reader=reader, review_threshold=0.97)
    assert not out[blank.id].review and out[blank.id].features["patch_confirmed"] == 1.0
    assert done["confirmed"] == 1


def test_a_flagged_reading_the_patch_reader_sees_crossed_out_is_corrected_and_stays_flagged(
        tmp_path, monkeypatch):
    """Crossed-out boxes on a simulated photo, their readings made wrong (blue, flagged for
    low confidence) before the patch reader sees them: it corrects them to "crossed", flag
    kept; a right colour reading flagged the same way keeps its colour (a colour is never a
    correction's target)."""
    import vision.pipeline as pipeline
    from dataclasses import replace

    from sheetcheck.simulator import simulate_photo

    t = get_template("crypts-1")
    boxes = [r for r in t.regions if r.kind == "box"]
    crossed = [r.id for r in boxes[2:6]]
    marks = {**{rid: "crossed" for rid in crossed}, boxes[8].id: "orange", boxes[9].id: "green"}
    path = tmp_path / "crypts-1-easy-crossed.jpg"
    path.write_bytes(simulate_photo(t, marks, seed=4601, preset="easy").jpeg)
    real = pipeline.confirm_by_patches
    seen = {}

    stain = boxes[12].id  # a check's flag elsewhere on the sheet

    def readers_wrong(readings, *a, **k):
        out = dict(readings)
        out[stain] = replace(readings[stain], confidence=0.6, review=True,
                             reason="a stain or stray colour on the paper runs up to the region "
                                    "(made by the test): its colour may be the stain's")
        for rid in crossed:
            out[rid] = replace(readings[rid], mark="blue", confidence=0.6, review=True,
                               reason="low confidence (made wrong by the test)")
        for rid in (boxes[8].id, boxes[9].id):
            out[rid] = replace(readings[rid], confidence=0.6, review=True,
                               reason="readers disagree (made doubtful by the test)")
        seen.update(out)
        return real(out, *a, **k)
    monkeypatch.setattr(pipeline, "confirm_by_patches", readers_wrong)
    got = read_photo(str(path))
    reader = default_patch_reader()
    for rid in crossed:
        a = got.readings[rid]
        assert a.mark == "crossed" and a.review, (rid, a)
        assert a.features["patch_corrected_from"] == "blue"
        assert a.features["patch_confidence"] >= reader.switch_thresholds["crossed"]
        assert a.reason.startswith("the patch reader reads crossed (") and a.reason.endswith(
            "not blue (low confidence (made wrong by the test))")
        assert a.confidence < got.details["review_threshold"]
    for rid, colour in ((boxes[8].id, "orange"), (boxes[9].id, "green")):
        assert seen[rid].mark == colour  # (the readers read it right)
        assert got.readings[rid].mark == colour and "patch_corrected_from" not in got.readings[
            rid].features
    assert got.details["patch_reader"]["corrected"] == len(crossed)
    # (session 48) the check's flag holds back lifting, not correcting, and is kept
    assert got.details["patch_reader"]["held_back_by"] == (
        "a stain or stray colour on the paper runs up to the region")
    assert got.details["patch_reader"]["corrections_held_back_by"] is None
    assert got.readings[stain].review and got.readings[stain].reason == seen[stain].reason
    assert got.details["patch_reader"]["confirmed"] == 0
    # the scoring side sees the corrected marks
    assert sum(1 for rid in crossed if got.to_json()["regions"][rid]["mark"] == "crossed") == 4


def test_a_correction_it_is_sure_of_where_flags_may_be_lifted_is_no_longer_flagged(
        tmp_path, monkeypatch):
    """(session 50) The same crossed-out boxes made "blue, low confidence" before the patch
    reader sees them, on a photo with no other flag: where it names "crossed" at least at its
    ``switch_confirm_thresholds`` the correction stands unflagged; where under it, the
    corrected region stays flagged as before. A model without those thresholds confirms no
    correction."""
    import vision.pipeline as pipeline
    from dataclasses import replace

    from sheetcheck.simulator import simulate_photo

    reader = default_patch_reader()
    assert "crossed" in reader.switch_confirm_thresholds
    t = get_template("crypts-1")
    boxes = [r for r in t.regions if r.kind == "box"]
    crossed = [r.id for r in boxes[2:6]]
    path = tmp_path / "crypts-1-easy-crossed.jpg"
    path.write_bytes(simulate_photo(t, {rid: "crossed" for rid in crossed}, seed=4601,
                                    preset="easy").jpeg)
    real = pipeline.confirm_by_patches

    def readers_wrong(readings, *a, **k):
        out = {rid: (replace(rd, review=False, reason="", confidence=max(rd.confidence, 0.99))
                     if rd.review else rd) for rid, rd in readings.items()}  # no other flag
        for rid in crossed:
            out[rid] = replace(readings[rid], mark="blue", confidence=0.6, review=True,
                               reason="low confidence (made wrong by the test)")
        return real(out, *a, **k)
    monkeypatch.setattr(pipeline, "confirm_by_patches", readers_wrong)
    got = read_photo(str(path))
    done = got.details["patch_reader"]
    assert done["held_back_by"] is None and done["corrected"] == len(crossed)
    sure = 0
    for rid in crossed:
        a = got.readings[rid]
        assert a.mark == "crossed" and a.features["patch_corrected_from"] == "blue", (rid, a)
        if a.features["patch_confidence"] >= reader.switch_confirm_thresholds["crossed"]:
            sure += 1
            assert not a.review and a.reason == "" and a.features["patch_confirmed"] == 1.0
            assert a.confidence >= got.details["review_threshold"]
        else:
            assert a.review and a.reason.startswith("the patch reader reads crossed (")
    assert sure >= 1 and done["corrected_confirmed"] == sure
    assert got.to_json()["regions"][crossed[0]]["mark"] == "crossed"
    # the same photo with a model that has no such thresholds: every correction stays flagged
    bare = replace(reader, switch_confirm_thresholds={})
    got2 = read_photo(str(path), patch_reader=bare)
    assert got2.details["patch_reader"]["corrected_confirmed"] == 0
    assert all(got2.readings[rid].review and got2.readings[rid].mark == "crossed"
               for rid in crossed)


def test_a_correction_is_confirmed_one_grid_step_above_its_surest_wrong_one():
    """(session 50) train_patch_reader.choose_switch_confirm_thresholds: the lifting rule on
    corrections of the readers' own doubt, on photos at most ``photo_flagged_max`` flagged."""
    tr = load_script("train_patch_reader")
    n = 60
    pc = np.linspace(0.9, 0.99999, n)
    y = np.full(n, MARKS.index("crossed"))
    wrong_at = int(np.argmin(abs(pc - 0.9962)))
    y[wrong_at] = MARKS.index("blue")  # one wrong correction at 0.9962
    # each on a photo of its own with nine confident "empty" readings beside it (10 % flagged)
    P = np.zeros((10 * n, 8))
    P[:n, MARKS.index("crossed")] = pc
    P[:n, MARKS.index("blue")] = 1 - pc
    P[n:, 0] = 1.0
    d = {"review": np.arange(10 * n) < n,
         "reason": np.array(["low confidence"] * n + [""] * (9 * n)),
         "read": np.array([MARKS.index("blue")] * n + [0] * (9 * n)),
         "y": np.concatenate([y, np.zeros(9 * n, int)]),
         "photo": np.concatenate([np.arange(n), np.repeat(np.arange(n), 9)])}
    sw = {"crossed": 0.9, "empty": 0.995}
    th, report = tr.choose_switch_confirm_thresholds(P, d, sw, 0.3)
    # above 0.9962: 0.998 is the first grid value, one step further 0.999
    assert th == {"crossed": 0.999} and report["crossed"]["wrong"] == 1
    assert report["crossed"]["highest_wrong"] == round(float(pc[wrong_at]), 6)
    assert report["empty"]["candidates"] == 0 and "empty" not in th
    # a photo's flag that is not the readers' doubt is no row; nor is a photo over the share
    d2 = {**d, "reason": np.array(["photo too unreliable (test)"] * n + [""] * (9 * n))}
    assert tr.choose_switch_confirm_thresholds(P, d2, sw, 0.3)[0] == {}
    d3 = {**d, "photo": np.concatenate([np.arange(n), np.full(9 * n, n)])}  # all flagged
    assert tr.choose_switch_confirm_thresholds(P, d3, sw, 0.3)[0] == {}
    assert tr.choose_switch_confirm_thresholds(P, d3, sw, 1.0)[0] == {"crossed": 0.999}
    # under CONFIRM_MIN_CANDIDATES corrections: none chosen
    keep = np.concatenate([np.arange(n) >= n - (tr.CONFIRM_MIN_CANDIDATES - 1),
                           np.ones(9 * n, bool)])
    d4 = {k: v[keep] for k, v in d.items()}
    assert tr.choose_switch_confirm_thresholds(P[keep], d4, sw, 0.3)[0] == {}
    # a correction under the correction threshold is no candidate
    assert tr.choose_switch_confirm_thresholds(P, d, {"crossed": 0.9999}, 0.3)[1][
        "crossed"]["candidates"] == int((pc >= 0.9999).sum())
    # what they do to a dataset (tr.lifts): the sure corrections lift their photos' one flag
    full = {**d, "hand": d["read"].copy(), "learned": d["read"].copy(),
            "conf": np.full(10 * n, 0.6), "preset": np.array(["easy"] * (10 * n)),
            "blank": np.zeros((10 * n, 4))}
    out = tr.lifts(P, full, {}, 0.3, None, True, sw, th)
    sure = int((pc >= 0.999).sum())
    assert out["corrections_confirmed"] == sure and out["corrections_confirmed_wrong"] == 0
    assert out["easy_typical_sheets_clear"] == [0, sure, n] and out["confirmed"] == 0
    assert tr.lifts(P, full, {}, 0.3, None, True, sw, None)["corrections_confirmed"] == 0


def test_an_empty_treasure_flagged_as_mostly_print_is_confirmed_a_coloured_one_is_not():
    """(session 46) "mostly print" is a flag the patch reader may lift: on the clean render of
    a Reefs sheet a blank treasure's "empty" is confirmed; a treasure coloured in and read
    "empty" keeps its flag."""
    from vision.marks import RegionReading
    from vision.patch_reader import confirm

    t = get_template("reefs-1")
    m = sheet_model(t, dpi=100.0)
    treasures = [r for r in t.regions if r.kind == "treasure"]
    blank, coloured = treasures[0], treasures[5]
    # coloured in with a mid green over its print
    sheet = _coloured_in(m.expected, coloured, (0.15, 0.55, 0.2), inset=0)

    def rd(region, review, reason=""):
        return RegionReading(region.id, region.kind, "empty", 0.9 if review else 0.999, review,
                             (("empty", 0.999),), {}, reason)
    why = "mostly print (10% of the region clear of it): a mark drawn over the print may not show"
    readings = {blank.id: rd(blank, True, why), coloured.id: rd(coloured, True, why),
                **{r.id: rd(r, False) for r in t.regions if r.kind == "box"}}
    assert liftable(readings[blank.id])
    out, done = confirm(readings, sheet, t, m.expected, dpi=100.0,
                        reader=default_patch_reader(), review_threshold=0.97)
    assert done["held_back_by"] is None
    a = out[blank.id]
    assert not a.review and a.features["patch_confirmed"] == 1.0 and a.features[
        "patch_mark"] == "empty"
    b = out[coloured.id]
    assert b.review and b.features["patch_mark"] != "empty"
    assert done["confirmed"] == 1


def test_patches_from_the_light_stage_match_the_normalised_sheet():
    """region_patches computes a NormalisedLight's pixels in the windows alone: the same
    patches as from the whole normalised sheet (``linear``), to a unit of rounding."""
    from vision.colour import linear_to_srgb
    from vision.light import normalise_light

    t = get_template("reefs-2")
    m = sheet_model(t, dpi=100.0)
    geo = patch_geometry(t, m.expected, dpi=100.0)
    # the clean sheet under uneven warm light, as a photo
    H, W = m.expected.shape[:2]
    ramp = np.linspace(0.6, 1.0, W, dtype=np.float32)[None, :, None]
    img = linear_to_srgb(m.expected * ramp * np.array([1.0, 0.85, 0.6], np.float32))
    light = normalise_light(img, paper_mask=m.paper_mask)
    which = list(range(len(geo.ids)))
    a = region_patches(light, geo, which).astype(int)
    b = region_patches(light.linear, geo, which).astype(int)
    assert np.abs(a - b).max() <= 1 and (a != b).mean() < 0.001
    # a window partly off the sheet: paper beyond it either way
    edge = int(np.argmin(geo.boxes[:, 0]))
    assert (region_patches(light, geo, [edge]) == region_patches(light.linear, geo, [edge])).mean() > 0.99


def test_a_flag_both_readers_agree_on_is_lifted_at_the_lower_threshold_alone():
    """(session 47) A flagged reading both readers (hand and learned) named as its mark is
    lifted when the patch reader names it at least at the mark's ``agree_thresholds``, lower
    than ``thresholds``; the same reading with the readers apart keeps its flag; the lifted
    reading's confidence is raised to the review threshold."""
    from dataclasses import replace

    from vision.marks import RegionReading
    from vision.patch_reader import confirm, lift_threshold, readers_agree

    t = get_template("crypts-1")
    m = sheet_model(t, dpi=100.0)
    boxes = [r for r in t.regions if r.kind == "box"]
    a_box, b_box = boxes[3], boxes[11]
    sheet = m.expected
    for r in (a_box, b_box):  # coloured in with a mid orange
        sheet = _coloured_in(sheet, r, (0.85, 0.25, 0.03), inset=1)

    def rd(region, hand, review=True):
        return RegionReading(region.id, region.kind, "orange", 0.8 if review else 0.999, review,
                             (("orange", 0.8), ("red", 0.2)),
                             {"hand_mark": hand, "learned_mark": "orange"},
                             "low confidence (orange: hand 0.8, learned 0.8)" if review else "")
    readings = {a_box.id: rd(a_box, "orange"), b_box.id: rd(b_box, "red"),
                **{r.id: rd(r, "empty", review=False) for r in boxes[20:30]}}
    # thresholds no probability reaches, a low one when the readers agree
    reader = replace(default_patch_reader(), thresholds={"orange": 1.01},
                     agree_thresholds={"orange": 0.5})
    assert readers_agree(readings[a_box.id]) and not readers_agree(readings[b_box.id])
    assert lift_threshold(reader, readings[a_box.id]) == 0.5
    assert lift_threshold(reader, readings[b_box.id]) == 1.01
    out, done = confirm(readings, sheet, t, m.expected, dpi=100.0, reader=reader,
                        review_threshold=0.97)
    a, b = out[a_box.id], out[b_box.id]
    assert a.features["patch_mark"] == "orange" == b.features["patch_mark"]
    assert not a.review and a.reason == "" and a.mark == "orange"
    assert a.features["patch_confirmed"] == 1.0 and a.features["patch_confirmed_with_readers"] == 1.0
    assert a.confidence == pytest.approx(max(0.97, a.features["patch_confidence"]), abs=1e-6)
    assert b.review and b.reason == readings[b_box.id].reason and "patch_confirmed" not in b.features
    assert done["confirmed"] == 1 and done["confirmed_with_readers"] == 1
    # without agree thresholds (a model before session 47) neither is lifted
    out, done = confirm(readings, sheet, t, m.expected, dpi=100.0,
                        reader=replace(reader, agree_thresholds={}), review_threshold=0.97)
    assert out[a_box.id].review and out[b_box.id].review and done["confirmed"] == 0


def test_a_lower_threshold_for_agreeing_readers_sits_a_step_above_their_surest_wrong_one():
    """(session 47) choose_agree_thresholds: the lifting rule on the rows both readers read as
    the mark, over AGREE_GRID, and only for a mark with enough such rows."""
    tr = load_script("train_patch_reader")
    n_ok = tr.AGREE_MIN_CANDIDATES
    # photo 0: n_ok + 1 "orange" readings flagged, all three opinions agreeing, one wrong at
    # 0.96; photo 1: as many "red" ones, none wrong; photo 2: a few "blue", none wrong;
    # each photo also has many confident regions (so under 30 % of it is flagged)
    rows = []
    for photo, mark, k, wrong_p in ((0, 1, n_ok + 1, 0.96), (1, 2, n_ok + 1, None), (2, 3, 5, None)):
        for i in range(k):
            p = 0.93 if i % 2 else 0.991
            y = mark
            if wrong_p is not None and i == 0:
                p, y = wrong_p, 0
            rows.append(dict(photo=photo, read=mark, y=y, p=p, review=True, reason="low confidence",
                             hand=mark, learned=mark))
        rows += [dict(photo=photo, read=0, y=0, p=0.999, review=False, reason="", hand=0,
                      learned=0)] * (4 * k)
    # a wrong "red" where the readers disagree does not count against the agreeing rows
    rows.append(dict(photo=1, read=2, y=5, p=0.999, review=True, reason="readers disagree",
                     hand=5, learned=2))
    d = {k: np.array([r[k] for r in rows]) for k in ("photo", "read", "y", "review", "reason",
                                                     "hand", "learned")}
    d["conf"] = np.full(len(rows), 0.9)  # (every reading sure enough to count as agreeing)
    P = np.zeros((len(rows), 8))
    P[np.arange(len(rows)), d["read"]] = [r["p"] for r in rows]
    P[:, 7] = 1 - P.max(1)
    th, report = tr.choose_agree_thresholds(P, d, photo_flagged_max=0.3)
    # grid values above 0.96: 0.97, 0.98, ...: one step above is 0.98
    assert th["orange"] == 0.98 and report["orange"]["wrong"] == 1
    assert report["orange"]["highest_wrong"] == 0.96
    assert th["red"] == tr.AGREE_GRID[0] and report["red"]["wrong"] == 0
    assert report["red"]["candidates"] == n_ok + 1
    assert "blue" not in th and report["blue"]["candidates"] == 5  # too few rows


def test_the_checks_flags_it_lifts_are_candidates_at_the_marks_own_threshold_alone():
    """(session 49) The training side of LIFTABLE_CHECKS and LIFT_BESIDE: an "empty" flagged by
    a stroke through it or as a swatch left blank is a lifting candidate (its wrong ones raise
    the mark's threshold), never one of the rows the lower threshold of agreeing readers is
    chosen on, and is lifted at the mark's own threshold only; a flag of those checks, or of
    ink beside the print, does not hold its photo's lifting back; a stain still does."""
    tr = load_script("train_patch_reader")
    n_ok = tr.AGREE_MIN_CANDIDATES
    stroke = "a stroke runs through it (40% ...): it may be crossed out"
    rows = []
    # photo 0: n_ok + 1 "empty" readings flagged for low confidence, all three opinions agreeing
    # at 0.99, right; and a stroke-flagged "empty" that is truly crossed out, which the patch
    # reader reads "empty" at 0.996 (the readers read it "empty" too)
    rows += [dict(photo=0, read=0, y=0, p=0.99, review=True, reason="low confidence")] * (n_ok + 1)
    rows.append(dict(photo=0, read=0, y=6, p=0.996, review=True, reason=stroke))
    # photo 1: a blank swatch flagged, read "empty" at 0.9999, and a flag of ink beside the print
    rows.append(dict(photo=1, read=0, y=0, p=0.9999, review=True,
                     reason="swatch left empty among coloured ones (4 others coloured): ..."))
    rows.append(dict(photo=1, read=1, y=1, p=0.5, review=True, reason="ink beside the print"))
    # photo 2: a right "empty" of low confidence beside a stain's flag
    rows.append(dict(photo=2, read=0, y=0, p=0.9999, review=True, reason="low confidence"))
    rows.append(dict(photo=2, read=1, y=1, p=0.5, review=True,
                     reason="a stain or stray colour on the paper runs up to the region (...)"))
    for photo in (0, 1, 2):  # confident regions: each photo under 30 % flagged
        rows += [dict(photo=photo, read=1, y=1, p=0.999, review=False, reason="")] * 120
    d = {k: np.array([r[k] for r in rows]) for k in ("photo", "read", "y", "review", "reason")}
    d["hand"] = d["learned"] = d["read"].copy()
    d["conf"] = np.full(len(rows), 0.9)
    d["preset"] = np.array(["easy"] * len(rows))
    d["blank"] = np.zeros((len(rows), 4))  # (no dark texels: every "empty" keyed "empty")
    P = np.zeros((len(rows), 8))
    P[np.arange(len(rows)), d["read"]] = [r["p"] for r in rows]
    P[:, 7] = 1 - P.max(1)
    th, report = tr.choose_thresholds(P, d, photo_flagged_max=0.3)
    # the stroke's wrong "empty" at 0.996 is a candidate: one step above it is 0.999
    assert report["empty"]["wrong"] == 1 and th["empty"] == 0.999
    agree, agree_report = tr.choose_agree_thresholds(P, d, photo_flagged_max=0.3)
    # ... but not among the agreeing readers' rows: none wrong there, the grid's lowest
    assert agree_report["empty"]["wrong"] == 0 and agree["empty"] == tr.AGREE_GRID[0]
    lift = tr.liftable_rows(d, 0.3)
    i_stroke, i_swatch, i_stained = n_ok + 1, n_ok + 2, n_ok + 4
    assert lift[i_stroke] and lift[i_swatch]  # (photo 1's ink beside the print holds nothing)
    assert not lift[i_stained]  # (the stain holds photo 2 back)
    out = tr.lifts(P, d, th, 0.3, agree, True)
    # the low-confidence rows at 0.99 lift at the agreeing threshold (0.9); the stroke at 0.996
    # would too, but is held to "empty"'s own 0.999: the swatch alone of the checks' flags
    assert out["confirmed_checks"] == 1 and out["confirmed_checks_wrong"] == 0
    assert out["confirmed"] == n_ok + 2 and out["confirmed_wrong"] == 0


def test_something_lying_on_the_sheet_still_holds_corrections_back():
    """(session 48) Only an object lying on the sheet keeps the patch reader from correcting
    flagged marks (a check's flag elsewhere no longer does): with one, the flagged readings are
    not even read, and the summary says why."""
    from vision.marks import RegionReading
    from vision.patch_reader import confirm

    t = get_template("crypts-1")
    m = sheet_model(t, dpi=100.0)
    boxes = [r for r in t.regions if r.kind == "box"]
    readings = {r.id: RegionReading(r.id, r.kind, "blue", 0.6, True, (("blue", 0.6),), {},
                                    "photo too unreliable (registration/resolution)")
                for r in boxes[:4]}
    reader = default_patch_reader()
    kept, done = confirm(readings, m.expected, t, m.expected, dpi=100.0, reader=reader,
                         review_threshold=0.97, objects=True)
    assert done["corrections_held_back_by"] == "something lies on the sheet"
    assert done["held_back_by"] == "photo too unreliable"  # (lifting: the first such flag)
    assert done["read"] == 0 and kept == readings
    free, done = confirm(readings, m.expected, t, m.expected, dpi=100.0, reader=reader,
                         review_threshold=0.97)
    assert done["corrections_held_back_by"] is None and done["read"] == 4
    # (blank boxes read "blue": corrected to "empty", still flagged, or left as they were)
    assert all(a.review and (a.mark == "blue" or a.mark in SWITCH_MARKS) for a in free.values())


def test_a_check_flag_on_an_empty_is_lifted_where_the_patch_reader_is_sure_it_is_empty(
        tmp_path, monkeypatch):
    """(session 49) A stroke through an "empty" box and a swatch left blank among coloured ones
    are check flags the patch reader may lift, at the mark's own threshold: on a simulated
    photo a blank box and a blank swatch so flagged are lifted, and a crossed-out box and a
    green swatch made "empty" and flagged the same way keep their flags (it reads them crossed
    and green). Neither flag holds the photo's other lifts back."""
    import vision.pipeline as pipeline
    from dataclasses import replace

    from sheetcheck.simulator import random_marks, simulate_photo

    t = get_template("crypts-1")
    marks = random_marks(t, np.random.default_rng(4901))  # (a sheet half filled in)
    boxes = [r.id for r in t.regions if r.kind == "box"]
    crossed = boxes[2]
    blank = next(rid for rid in boxes[4:] if marks[rid] == "empty")
    marks.update({crossed: "crossed", "swatch.purple": "empty",
                  **{f"swatch.{c}": c for c in ("orange", "red", "blue", "green")}})
    path = tmp_path / "crypts-1-easy-checks.jpg"
    path.write_bytes(simulate_photo(t, marks, seed=4901, preset="easy").jpeg)
    stroke = ("a stroke runs through it (40% of the paper on its fainter side inked): it may be "
              "crossed out")
    swatch = ("swatch left empty among coloured ones (4 others coloured): its pencil may not "
              "show on this photo")
    real = pipeline.confirm_by_patches
    seen = {}

    def checks_flag(readings, *a, **k):
        out = dict(readings)
        for rid, why in ((blank, stroke), (crossed, stroke), ("swatch.purple", swatch),
                         ("swatch.green", swatch)):
            out[rid] = replace(readings[rid], mark="empty", confidence=0.96, review=True,
                               reason=why)
        seen.update(out)
        return real(out, *a, **k)
    monkeypatch.setattr(pipeline, "confirm_by_patches", checks_flag)
    got = read_photo(str(path))
    reader = default_patch_reader()
    done = got.details["patch_reader"]
    assert done["held_back_by"] is None
    for rid, check in ((blank, "a stroke runs through it"),
                       ("swatch.purple", "swatch left empty among coloured ones")):
        a = got.readings[rid]
        assert lifts_check(seen[rid]) and not a.review and a.mark == "empty", (rid, a)
        assert a.features["patch_lifted_check"] == check and a.features["patch_confirmed"] == 1.0
        # the mark's own threshold, never the lower one of both readers agreeing
        assert a.features["patch_confidence"] >= reader.thresholds[
            pr_threshold_key(reader, seen[rid])]
    for rid, mark in ((crossed, "crossed"), ("swatch.green", "green")):
        a = got.readings[rid]
        assert a.review and a.mark == "empty" and a.reason == seen[rid].reason, (rid, a)
        assert a.features["patch_mark"] == mark
    assert done["confirmed_checks"] == 2


def test_a_confident_empty_the_patch_reader_sees_crossed_out_is_flagged():
    """(session 48) A cell crossed out with a thin grey X over its printed symbol, read "empty"
    with confidence (as both readers read one on the fresh held-out 1670000), is flagged when
    the patch reader names another mark first; a blank cell read "empty" is left as it was, and
    a connection read "empty" is not read at all."""
    import cv2

    from vision.marks import RegionReading
    from vision.patch_reader import confirm

    t = get_template("crypts-1")
    m = sheet_model(t, dpi=100.0)
    cells = [r for r in t.regions if r.kind == "symbol"]
    crossed, blank = cells[2], cells[6]
    sheet = m.expected.copy()
    poly = np.asarray(crossed.shape.polygon(), float) * (100.0 / 25.4)
    (x0, y0), (x1, y1) = poly.min(0), poly.max(0)
    for a, b in (((x0, y0), (x1, y1)), ((x0, y1), (x1, y0))):  # a graphite X, 2 px wide
        cv2.line(sheet, (int(a[0]), int(a[1])), (int(b[0]), int(b[1])), (0.25, 0.25, 0.26), 2)
    conns = [r for r in t.regions if r.kind == "connection"][:1]

    def rd(region):
        return RegionReading(region.id, region.kind, "empty", 0.995, False, (("empty", 0.995),),
                             {}, "")
    readings = {r.id: rd(r) for r in (crossed, blank, *conns)}
    reader = default_patch_reader()
    out, done = confirm(readings, sheet, t, m.expected, dpi=100.0, reader=reader,
                        review_threshold=0.97)
    a = out[crossed.id]
    assert a.review and a.mark == "empty" and a.confidence < 0.97
    assert a.reason.startswith("the patch reader disagrees (") and a.features["patch_mark"] != "empty"
    assert not out[blank.id].review and out[blank.id].features["patch_mark"] == "empty"
    assert all(out[c.id] == readings[c.id] for c in conns)  # (not watched)
    assert done["read"] == 2 and done["dissents"] == 1
