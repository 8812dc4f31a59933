"""Exact speed-ups of the read (session 9) keep their values: each fast path against the plain
computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from test_vision_learned import _random_trees


# --- the learned reader's trees, node-major (vision.learned._node_major_leaf_values) ---------

@pytest.mark.parametrize("depths, full, dtype", [([0, 1, 3, 2, 2], False, np.uint8),
                                                 ([3, 3, 0, 3], True, np.uint8),
                                                 ([4, 2, 0], True, np.uint16),
                                                 ([5, 2], True, np.uint32),
                                                 ([6, 1, 6], True, np.uint64)])
def test_node_major_trees_reach_the_leaves_the_masks_reach(monkeypatch, depths, full, dtype):
    """Uneven trees (padded with nodes that clear nothing), lone leaves, and masks of 8 to 64
    leaves (every bit in use): the same (N, T) leaf values as the exit-leaf masks, laid out
    the same (C order: the caller sums them in the same order)."""
    import vision.learned as L

    monkeypatch.setattr(L, "NODE_MAJOR_MAX_PADDING", 100.0)  # (these trees are uneven)
    rng = np.random.default_rng(sum(depths) + full)
    p = _random_trees(rng, depths, full=full)
    X = rng.normal(size=(257, 6)).astype(np.float32)
    X[:5] = p["threshold"][0]  # rows exactly on a threshold go left
    tables = L._exit_leaf_tables(p)
    nm = L._node_major_tables(p, tables)
    assert nm["mask"].dtype == dtype
    want = L._exit_leaf_values(X, tables)
    got = L._node_major_leaf_values(X, nm)
    assert got.flags.c_contiguous and got.shape == want.shape == (257, len(depths))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, L._leaf_values(X, p))


def test_node_major_tables_are_skipped_when_padding_would_cost_more():
    import vision.learned as L

    p = _random_trees(np.random.default_rng(3), [0, 0, 0, 0, 6], full=True)
    tables = L._exit_leaf_tables(p)
    assert L._node_major_tables(p, tables) is None  # 5 x 63 padded nodes for 67 real ones
    # (and the scores then come from the masks as before)
    X = np.random.default_rng(4).normal(size=(40, 6)).astype(np.float32)
    np.testing.assert_array_equal(L._exit_leaf_values(X, tables), L._leaf_values(X, p))


def test_the_bundled_model_scores_as_with_the_exit_leaf_masks():
    """reader-v7's trees on rows of real feature values (the sample photo's matrix, and the
    same rows with features nudged onto and around thresholds): identical raw scores."""
    from pathlib import Path

    import vision.learned as L
    from vision.pipeline import read_photo

    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"
    X = read_photo(photo, keep_matrix=True).matrix.astype(np.float32)
    model = L.default_model()
    p = model.params
    tables = L._exit_leaf_tables(p)
    assert L._node_major_tables(p, tables) is not None  # (the fast path is the one used)
    rng = np.random.default_rng(5)
    on = X.copy()
    node = rng.integers(0, tables["feature"].size, size=on.shape[0])
    on[np.arange(on.shape[0]), tables["feature"][node]] = tables["threshold"][node]
    for rows in (X, on, np.nextafter(on, np.float32(np.inf))):
        want = L._exit_leaf_values(rows, tables)
        np.testing.assert_array_equal(L._node_major_leaf_values(rows, p["_exit_leaf_node_major"]),
                                      want)
        got = model.raw_scores(rows)
        ref = np.zeros_like(got) + p["baseline"]
        ref += want.reshape(rows.shape[0], -1, len(model.classes)).sum(axis=1)
        np.testing.assert_array_equal(got, ref)


# --- two readers, one verdict for all regions (vision.learned.combine_all) -------------------

def _hands(rng, n):
    """Hand readings of regions of several kinds and mark sets, with every reason the rule
    looks at."""
    from vision.marks import MARKS, RegionReading

    kinds = ["box", "connection", "swatch", "treasure"]
    sets = [MARKS, ("empty", "crossed"), ("empty", "orange", "red", "blue", "green", "purple"),
            ("empty", "written"), ("empty", "red", "crossed", "not-a-class")]
    out = []
    for i in range(n):
        marks = sets[i % len(sets)]
        pr = rng.dirichlet(np.ones(len(marks)))
        alts = tuple(sorted(zip(marks, pr.tolist()), key=lambda kv: -kv[1]))
        mark = alts[0][0] if rng.random() < 0.8 else alts[-1][0]
        conf = float(rng.choice([alts[0][1], 0.99, 0.999, 0.5]))
        reason = "too few unprinted pixels to read" if i % 17 == 3 else ("x" if i % 5 == 0 else "")
        feats = {"pixels": int(rng.integers(5, 900)), "coverage": float(rng.random())}
        out.append(RegionReading(f"r{i}", kinds[i % len(kinds)], mark, conf, bool(i % 3 == 0),
                                 alts, feats, reason))
    return out


def _probs(rng, hands):
    from vision.marks import MARKS

    P = np.zeros((len(hands), len(MARKS)))
    for i, h in enumerate(hands):
        ok = [MARKS.index(m) for m, _ in h.alternatives if m in MARKS]
        v = rng.dirichlet(np.ones(len(ok)) * 0.3)
        if i % 7 == 1:
            v = np.round(v * 4) / 4  # equal probabilities: the order among them is class order
        if i % 11 == 2:
            v[:] = 0.0  # nothing allowed has any probability: all alike
        if i % 19 == 5:
            v[-1] = np.nan  # (a softmax over no allowed class): all alike, in class order
        P[i, ok] = v
        if i % 13 == 4:
            P[i, [j for j in range(len(MARKS)) if j not in ok][:1]] = 0.3  # a disallowed class
    # the learned reader is sure of its mark on a share of the regions: the rule's thresholds
    sure = rng.random(len(hands)) < 0.5
    P[sure] = np.where(P[sure] == P[sure].max(axis=1, keepdims=True), 0.999, P[sure] * 0.001)
    return P


def _combine_one(hand, probs, *, classes, rule, review_threshold, photo_confidence=1.0,
                 doubt=0.0):
    """The rule for one region as vision.learned.combine was written before combine_all (now
    combine is one region of combine_all): the reference the vectorised rule must equal."""
    import math

    from vision.marks import RegionReading

    allowed = [m for m, _ in hand.alternatives]
    p = {c: float(v) for c, v in zip(classes, probs) if c in allowed}
    tot = sum(p.values())
    p = {c: (v / tot if tot > 0 else 1.0 / len(p)) for c, v in p.items()}
    alts = tuple(sorted(p.items(), key=lambda kv: -kv[1]))
    mark_l, p_l = alts[0]
    mark_h, c_h = hand.mark, float(hand.confidence)
    agree = mark_l == mark_h
    hand_min, learned_min, learned_alone, hand_floor = rule.thresholds(mark_l, doubt, hand.kind)
    sure = agree and ((c_h >= hand_min and p_l >= learned_min)
                      or (p_l >= learned_alone and c_h >= hand_floor))
    reason = ""
    unmeasured = hand.reason == "too few unprinted pixels to read"
    if unmeasured:
        sure, reason = False, hand.reason
    elif photo_confidence < rule.photo_gate:
        sure, reason = False, "photo too unreliable (registration/resolution)"
    elif doubt > rule.photo_doubt_max:
        sure, reason = False, f"photo too unclear: {doubt:.0%} of its regions are in doubt"
    elif not agree:
        reason = f"readers disagree (hand: {mark_h} {c_h:.3f}, learned: {mark_l} {p_l:.3f})"
    elif not sure:
        reason = f"low confidence ({mark_l}: hand {c_h:.4f}, learned {p_l:.4f})"
    if sure:
        conf = max(p_l, review_threshold)
    else:
        # two opinions on the reported mark; never at or above the review threshold
        hp = dict(hand.alternatives).get(mark_l, 0.0)
        conf = min(0.5 * (p_l + hp), p_l, math.nextafter(review_threshold, 0.0) - 1e-4)
    feats = dict(hand.features)
    feats.update({"hand_mark": mark_h, "hand_confidence": c_h, "learned_mark": mark_l,
                  "learned_confidence": p_l})
    return RegionReading(hand.region_id, hand.kind, mark_l, float(conf), not sure, alts, feats,
                         reason)


@pytest.mark.parametrize("doubt, photo_confidence", [(0.0, 1.0), (0.01, 0.9), (0.02, 1.0),
                                                     (0.5, 1.0), (0.0, 0.2)])
def test_combine_all_reads_every_region_as_combine(doubt, photo_confidence):
    """Every region as the rule reads it one region at a time (``_combine_one``; repr-compared:
    marks, confidences and their types, review, alternatives and their order, features and
    their order, reasons), under reader-v7's rule with its tiers, the photo gate and the doubt
    gate; and vision.learned.combine, one region of combine_all, reads each alike."""
    from vision.learned import combine, combine_all, default_model
    from vision.marks import MARKS

    rule = default_model().rule
    rng = np.random.default_rng(int(doubt * 100) + int(photo_confidence * 10))
    hands = _hands(rng, 150)
    P = _probs(rng, hands)
    kw = dict(classes=MARKS, rule=rule, review_threshold=0.9, photo_confidence=photo_confidence,
              doubt=doubt)
    want = [_combine_one(h, P[i], **kw) for i, h in enumerate(hands)]
    got = combine_all(hands, P, **kw)
    assert repr(got) == repr(want)
    assert repr([combine(h, P[i], **kw) for i, h in enumerate(hands)]) == repr(want)
    assert [list(g.features) for g in got] == [list(w.features) for w in want]
    gated = photo_confidence < rule.photo_gate or doubt > rule.photo_doubt_max
    assert len({r.review for r in got}) == (1 if gated else 2)  # (both verdicts occur)


def test_combine_all_refuses_probabilities_that_do_not_fit():
    from vision.learned import combine_all, default_model
    from vision.marks import MARKS

    hands = _hands(np.random.default_rng(0), 3)
    with pytest.raises(ValueError, match=r"expected \(3, 8\) probabilities, got \(2, 8\)"):
        combine_all(hands, np.zeros((2, len(MARKS))), classes=MARKS, rule=default_model().rule,
                    review_threshold=0.9)


# --- what the classifier derives from the sheet model alone (vision.marks._model_constants) --

@pytest.fixture(scope="module")
def small_model():
    from calibration.render import render_sheet
    from calibration.template import get_template, template_ids
    from vision.marks import build_sheet_model

    # (a Reefs sheet: it has connections, whose bins are among the constants)
    t = get_template(next(i for i in template_ids() if i.startswith("reefs")))
    return build_sheet_model(t, render_sheet(t, dpi=40, markers=True).image, dpi=40)


def test_model_constants_are_the_per_photo_expressions(small_model):
    """Each constant is what classify_sheet and _measure computed from the model on every
    photo before; the arrays cannot be written; one object per model while it lives."""
    from vision.marks import _HUE_BINS, MARKS, _model_constants, _RegionSums

    m = small_model
    R = len(m.region_ids)
    mc = _model_constants(m)
    assert _model_constants(m) is mc
    regions = [m.template.region(rid) for rid in m.region_ids]
    assert list(mc.regions) == regions
    np.testing.assert_array_equal(mc.allowed, [[k in r.marks for k in MARKS] for r in regions])
    assert mc.is_line == [bool(m.is_line[i]) for i in range(R)]
    np.testing.assert_array_equal(mc.hue_base, m.label * _HUE_BINS)
    np.testing.assert_array_equal(mc.band1, m.band == 1)
    np.testing.assert_array_equal(mc.band2, m.band == 2)
    np.testing.assert_array_equal(mc.banded, m.band != 0)
    np.testing.assert_array_equal(mc.diag_bin, m.diag_bin[m.diag_bin >= 0])
    np.testing.assert_array_equal(mc.line_bin, m.line_bin[m.line_bin >= 0])
    np.testing.assert_array_equal(mc.bin_region, np.repeat(np.arange(R), m.line_bins))
    assert mc.nb_total == int(m.line_bins.sum()) > 0
    with pytest.raises(ValueError, match="read-only"):
        mc.hue_base[0] = 1
    # the sums: a fresh accumulator each time, with the segments of a new _RegionSums
    plain, a, b = _RegionSums(m.label, R), mc.region_sums(), mc.region_sums()
    assert a.buf is not b.buf and a.rows == [] and plain.sorted == a.sorted
    v = np.random.default_rng(0).normal(size=m.label.size)
    plain.add(v), a.add(v), a.add(v * 0), b.add(-v)
    np.testing.assert_array_equal(a.sums()[0], plain.sums()[0])
    np.testing.assert_array_equal(b.sums()[0], -plain.sums()[0])


def test_model_constants_go_with_their_model():
    import gc

    from calibration.render import render_sheet
    from calibration.template import get_template, template_ids
    from vision import _cache, marks

    t = get_template(template_ids()[1])
    m = marks.build_sheet_model(t, render_sheet(t, dpi=30, markers=True).image, dpi=30)
    key = (id(m), "constants")
    marks._model_constants(m)
    assert key in _cache._store
    del m
    gc.collect()
    assert key not in _cache._store


# --- rectify's field fitting (vision.rectify._reject_outliers, _smooth_field) ----------------

def _plain_reject_outliers(shifts, weight, *, tol):
    """_reject_outliers as it was (np.pad's border), for comparison."""
    R, C = weight.shape
    v = np.where((weight > 0)[..., None], shifts, np.nan).astype(np.float64)
    pad = np.pad(v, ((1, 1), (1, 1), (0, 0)), constant_values=np.nan)
    stack = np.stack([pad[i:i + R, j:j + C] for i in range(3) for j in range(3)], 0)
    n_ok = np.sum(~np.isnan(stack[..., 0]), 0)
    srt = np.sort(stack, axis=0)
    n = np.broadcast_to(n_ok[None, ..., None], (1,) + srt.shape[1:])
    lo = np.take_along_axis(srt, np.maximum(n - 1, 0) // 2, 0)[0]
    hi = np.take_along_axis(srt, n // 2, 0)[0]
    med = np.where(n[0] > 0, (lo + hi) / 2, np.nan)
    dev = np.hypot(v[..., 0] - med[..., 0], v[..., 1] - med[..., 1])
    out_w = weight.copy()
    out_w[(weight > 0) & (n_ok >= 3) & (dev > tol)] = 0
    return out_w


def _tile_field(rng, R=9, C=13, dtype=np.float32):
    shifts = rng.normal(scale=1.5, size=(R, C, 2)).astype(dtype)
    weight = rng.random((R, C)).astype(np.float32)
    weight[rng.random((R, C)) < 0.3] = 0
    shifts[rng.random((R, C)) < 0.2] = np.nan  # rejected tiles
    shifts[2, 3] = (9.0, -7.0)  # an outlier among its neighbours
    return shifts, weight


def test_reject_outliers_drops_the_tiles_it_dropped():
    from vision.rectify import _reject_outliers

    for seed in range(6):
        shifts, weight = _tile_field(np.random.default_rng(seed), 5 + seed, 5 + 2 * seed)
        want = _plain_reject_outliers(shifts, weight, tol=1.0)
        got = _reject_outliers(shifts, weight, tol=1.0)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    assert (want == 0).sum() > (weight == 0).sum()  # (some tiles are dropped)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_smooth_field_is_the_field_of_nan_to_num(dtype):
    """NaN (a rejected tile) reads as 0 as nan_to_num has it; an infinity (never measured,
    but possible in principle) and a float64 value beyond float32 go the original way."""
    import cv2

    from vision.rectify import _smooth_field

    def plain(shifts, weight, sigma):
        w = weight.astype(np.float32)
        s = np.nan_to_num(shifts).astype(np.float32)
        num = np.stack([cv2.GaussianBlur(s[..., i] * w, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE)
                        for i in range(2)], -1)
        den = cv2.GaussianBlur(w, (0, 0), sigma, borderType=cv2.BORDER_REPLICATE)
        field_ = np.zeros_like(s)
        ok = den > 1e-4
        field_[ok] = num[ok] / den[ok, None]
        if not ok.all():
            num2 = np.stack([cv2.GaussianBlur(s[..., i] * w, (0, 0), sigma * 4, borderType=cv2.BORDER_REPLICATE)
                             for i in range(2)], -1)
            den2 = cv2.GaussianBlur(w, (0, 0), sigma * 4, borderType=cv2.BORDER_REPLICATE)
            fill = (~ok) & (den2 > 1e-6)
            field_[fill] = num2[fill] / den2[fill, None]
        return field_

    rng = np.random.default_rng(7)
    shifts, weight = _tile_field(rng, dtype=dtype)
    weight[:, :4] = 0  # a band far from any reliable tile: the wider blur fills it
    cases = [shifts]
    odd = shifts.copy()
    odd[1, 1, 0], odd[4, 5, 1] = np.inf, -np.inf
    cases.append(odd)
    if dtype == np.float64:
        big = shifts.copy()
        big[3, 3, 0] = 1e300  # beyond float32: inf after the cast
        cases.append(big)
    for s in cases:
        with np.errstate(all="ignore"):  # (the infinities and the overflowing cast warn)
            want = plain(s, weight, 1.0)
            got = _smooth_field(s, weight, sigma=1.0)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


# --- the classifier's smaller savings (vision.marks) ------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_hue_bins_are_the_remainder_bins(dtype):
    """Every hue _hue360 gives (0 up to 360 itself, where its wrap rounds to 360) and values
    outside that range: the same bins as the integer remainder."""
    from vision.marks import _HUE_BINS, _hue360, _hue_bins

    rng = np.random.default_rng(1)
    a = rng.normal(size=5000).astype(dtype)
    b = rng.normal(size=5000).astype(dtype)
    b[:20] = -np.array(1e-30, dtype)  # a hue a hair under 0: 360 after the wrap
    h = _hue360(a, b)
    assert (h == 360.0).any()
    extra = np.array([0.0, 9.999, 10.0, 359.999, 360.0, 361.0, 725.0, -0.5, -10.0, -370.0], dtype)
    for x in (h, extra):
        want = (x / (360.0 / _HUE_BINS)).astype(np.int64) % _HUE_BINS
        got = _hue_bins(x)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got, want)


def test_classify_reads_a_whole_valid_frame_as_without_one(small_model):
    """A valid mask that is True everywhere skips the gather of the region pixels' flags:
    the same readings, matrix and palette as reading without a mask, and a mask with a gap
    still gathers (regions in the gap are read as unmeasured)."""
    from vision.marks import classify_sheet

    m = small_model
    rng = np.random.default_rng(2)
    img = np.clip(m.expected * rng.uniform(0.85, 1.0, m.expected.shape), 0, 1).astype(np.float32)
    ys, xs = np.divmod(m.pix[m.label == 0], m.shape[1])
    img[ys, xs] *= np.array([1.0, 0.45, 0.4], np.float32)  # a red fill in the first region
    kw = dict(learned=None)
    plain = classify_sheet(img, m, **kw)
    whole = classify_sheet(img, m, valid=np.ones(m.shape, bool), **kw)
    assert repr(whole.readings) == repr(plain.readings)
    assert plain.readings[m.region_ids[0]].mark == "red"
    gap = np.ones(m.shape, bool)
    gap[:, : m.shape[1] // 3] = False
    cut = classify_sheet(img, m, valid=gap, **kw)
    assert repr(cut.readings) != repr(plain.readings)
