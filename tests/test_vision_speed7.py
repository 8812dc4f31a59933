"""Exact speed-ups of the read (session 12) keep their values: each fast path against the plain
computation it replaces, on the inputs of real reads (sample photos, captured)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

SAMPLES = Path(__file__).resolve().parents[1] / "sample_photos"
PHOTOS = ("crypts-2-easy-s4.jpg", "reefs-1-easy-break-coin_boxes_wrong-s23.jpg")


def _capture(photo: str):
    """``classify_sheet``'s inputs during a read of ``photo`` (light, model, keyword
    arguments), with the photo's thresholds."""
    from vision import marks, pipeline
    from vision.colour import linear_to_lab, load_palette

    seen = []
    real = pipeline.classify_sheet

    def spy(linear, model, **kw):
        seen.append((linear, model, kw))
        return real(linear, model, **kw)

    pipeline.classify_sheet = spy
    try:
        pipeline.read_photo(SAMPLES / photo)
    finally:
        pipeline.classify_sheet = real
    assert len(seen) == 1
    light, model, kw = seen[0]
    th = marks._photo_thresholds(linear_to_lab(light.sample(model.paper_sample)),
                                 load_palette("default"))
    return light, model, kw, th


@pytest.fixture(scope="module", params=PHOTOS)
def captured(request):
    return _capture(request.param)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.ascontiguousarray(a)
    return a.view({4: np.uint32, 8: np.uint64}[a.itemsize])


# --- the X columns (vision._evidence.ring_pixels(x_only=True), x_features) -----------------

def _ring_pixels_before(sample, model, valid, x_only):
    """``ring_pixels`` as it was: the X zones' pixels and divisors gathered on every photo."""
    from vision._evidence import ring_geometry
    from vision.colour import linear_to_lab

    g = ring_geometry(model)
    sel = np.flatnonzero(g.xzone > 0) if x_only else None
    pix, div = (g.pix, g.divisor) if sel is None else (g.pix[sel], g.divisor[sel])
    ok = np.ones(pix.size, bool) if valid is None else np.asarray(valid, bool).reshape(-1)[pix]
    lab = linear_to_lab(np.asarray(sample(pix), np.float32) / div)
    L, a, b = lab[:, 0], lab[:, 1], lab[:, 2]
    return sel, ok, L, a, b, np.hypot(a, b)


def _x_features_before(model, th, sel, ok, L, C):
    """``x_features`` as it was: each zone and half counted by its own pair of bincounts."""
    from vision._evidence import SECTOR_MIN_PIXELS, X_FEATURES, ring_geometry

    g = ring_geometry(model)
    R = g.regions
    X = np.zeros((R, len(X_FEATURES)), np.float32)
    ink = ok & ((C >= float(th["chroma"])) | (L <= float(th["dark_l"])))
    label, xzone, inner = ((g.label, g.xzone, g.inner) if sel is None
                           else (g.label[sel], g.xzone[sel], g.inner[sel]))

    def share(zone, where):
        m = where & (xzone == zone) & ok
        n = np.bincount(label, m, R)
        return np.bincount(label, m & ink, R) / np.maximum(n, 1), n

    every = np.ones(label.size, bool)
    d_all, nd = share(1, every)
    s_all, ns = share(2, every)
    d_in, ndi = share(1, inner)
    s_in, nsi = share(2, inner)
    has = (nd >= SECTOR_MIN_PIXELS) & (ns >= SECTOR_MIN_PIXELS)
    has_in = (ndi >= SECTOR_MIN_PIXELS) & (nsi >= SECTOR_MIN_PIXELS)
    X[:, 0] = np.where(has, d_all, 0.0)
    X[:, 1] = np.where(has, s_all, 0.0)
    X[:, 2] = np.where(has, d_all - s_all, 0.0)
    X[:, 3] = np.where(has_in, d_in - s_in, 0.0)
    X[np.asarray(model.is_line[:R], bool)] = 0.0
    return X


def _valid_masks(model, kw):
    part = np.ones(model.shape, bool)
    part[:, : model.shape[1] // 3] = False  # a third of the frame outside the photo
    return [kw.get("valid"), None, part]


def test_x_columns_are_counted_as_zone_by_zone(captured):
    """The sample photos' own light and thresholds, with the photo's frame, none, and a third
    of it outside the photo; thresholds moved to make more and less ink: the X columns (and
    the ring pixels they read) bit for bit as before, from the X zones alone and from the
    whole ring."""
    from vision._evidence import ring_pixels, x_features

    light, model, kw, th = captured
    ths = [th, {**th, "chroma": 3.0, "dark_l": 97.0}, {**th, "chroma": 25.0, "dark_l": 60.0}]
    for valid in _valid_masks(model, kw):
        for x_only in (True, False):
            sel, ok, L, a, b, C = _ring_pixels_before(light.sample, model, valid, x_only)
            px = ring_pixels(light.sample, model, valid=valid, x_only=x_only)
            assert (px.sel is None) == (sel is None)
            if sel is not None:
                np.testing.assert_array_equal(px.sel, sel)
            for want, got in ((ok, px.ok), (L, px.L), (a, px.a), (b, px.b), (C, px.C)):
                np.testing.assert_array_equal(_bits(got) if got.dtype != bool else got,
                                              _bits(want) if want.dtype != bool else want)
            for t in ths:
                want = _x_features_before(model, t, sel, ok, L, C)
                got = x_features(light.sample, model, th=t, valid=valid, pixels=px)
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(_bits(got), _bits(want))
                assert np.abs(want).sum() > 0
    # (without pixels given: sampled on the X zones)
    np.testing.assert_array_equal(
        _bits(x_features(light.sample, model, th=th, valid=kw.get("valid"))),
        _bits(_x_features_before(model, th, *(lambda r: (r[0], r[1], r[2], r[5]))(
            _ring_pixels_before(light.sample, model, kw.get("valid"), True)))))


def test_the_x_zones_pixel_list_is_kept_with_its_model(captured):
    """One pixel-list array per sheet model: its interpolation taps are computed once
    (vision.light.pixel_taps caches by the array), not on every photo."""
    from vision._evidence import _x_ring, ring_pixels
    from vision.light import pixel_taps

    light, model, kw, th = captured
    xr = _x_ring(model)
    assert _x_ring(model) is xr and not xr.pix.flags.writeable
    seen = []
    ring_pixels(lambda idx: seen.append(idx) or light.sample(light.taps(idx)), model, x_only=True)
    ring_pixels(lambda idx: seen.append(idx) or light.sample(light.taps(idx)), model, x_only=True)
    assert seen[0] is xr.pix and seen[1] is xr.pix
    assert pixel_taps(xr.pix, light.image.shape[:2], light.block) is light.taps(xr.pix)


# --- the learned reader's trees: class sums tree-major (vision.learned._node_major_class_sums) -

def _class_sums_before(X, tables, C):
    """The class sums as they were computed: every (row, tree) leaf value from the exit-leaf
    masks, row-major, added up per class over a middle axis."""
    import vision.learned as L

    vals = L._exit_leaf_values(X, tables)
    return vals.reshape(X.shape[0], -1, C).sum(axis=1)


def test_the_lowest_bit_table_is_frexp_of_the_lowest_bit():
    import vision.learned as L

    v = np.arange(256, dtype=np.uint8)
    want = np.frexp((v & -v).astype(np.float32))[1]
    np.testing.assert_array_equal(L._LOWEST_BIT, want)


@pytest.mark.parametrize("depths, dtype", [([1, 3, 2, 2, 3, 0, 3, 1], np.uint8),
                                           ([4, 2, 4, 4, 1, 4, 0, 3], np.uint16),
                                           ([5, 5, 2, 5, 1, 5, 5, 5], np.uint32)])
def test_class_sums_of_random_trees_are_the_row_major_sums(monkeypatch, depths, dtype):
    """Tiled trees of 8 classes, three iterations (uneven trees, lone leaves; masks of one
    byte, looked up in the lowest-bit table, and wider, through frexp): the same float64 sums
    bit for bit, for many rows, one row and rows with values far apart in size."""
    import vision.learned as L
    from test_vision_learned import _random_trees

    monkeypatch.setattr(L, "NODE_MAJOR_MAX_PADDING", 100.0)  # (these trees are uneven)
    rng = np.random.default_rng(sum(depths))
    p = _random_trees(rng, depths * 3, full=True)
    p["value"] = p["value"] * np.exp(rng.uniform(-30, 30, p["value"].size))  # (rounding shows)
    tables = L._exit_leaf_tables(p)
    nm = L._node_major_tables(p, tables)
    assert nm["mask"].dtype == dtype
    X = rng.normal(size=(301, 6)).astype(np.float32)
    X[:5] = p["threshold"][0]  # rows exactly on a threshold go left
    for rows in (X, X[:1], X[7:40]):
        got = L._node_major_class_sums(rows, nm, 8)
        assert got.shape == (8, rows.shape[0])
        np.testing.assert_array_equal(_bits(got.T), _bits(_class_sums_before(rows, tables, 8)))


def test_the_committee_scores_real_rows_as_before(captured):
    """the default reader and its two members on a sample photo's own feature rows (and the same rows
    with features put on and just above thresholds): raw scores and probabilities bit for bit
    as the row-major sums gave them, and any subset of the rows as the rows in the whole."""
    import vision.learned as L
    from vision import marks

    light, model, kw, th = captured
    sheet = marks.classify_sheet(light, model, **kw)
    X = np.asarray(sheet.matrix, np.float32)
    allowed = marks._model_constants(model).allowed
    top = L.default_model()
    assert top.committee
    rng = np.random.default_rng(11)
    for reader in (top,) + tuple(top.committee):
        p = reader.params
        tables = L._exit_leaf_tables(p)
        assert L._node_major_tables(p, tables) is not None  # (the fast path is the one used)
        on = X.copy()
        node = rng.integers(0, tables["feature"].size, size=on.shape[0])
        on[np.arange(on.shape[0]), tables["feature"][node]] = tables["threshold"][node]
        C = len(reader.classes)
        for rows in (X, on, np.nextafter(on, np.float32(np.inf))):
            want = np.zeros((rows.shape[0], C)) + p["baseline"]
            want += _class_sums_before(rows, tables, C)
            np.testing.assert_array_equal(_bits(reader.raw_scores(rows)), _bits(want))
        whole = reader.predict_proba(X, allowed=allowed)
        for k in (1, 2, 17):
            sub = np.sort(rng.choice(X.shape[0], k, replace=False))
            np.testing.assert_array_equal(
                _bits(reader.predict_proba(X[sub], allowed=allowed[sub])), _bits(whole[sub]))


# --- the guide's per-bin references (vision._guide._bin_references) --------------------------

def test_bin_references_are_those_of_the_plain_loop_on_a_photo(captured, monkeypatch):
    """The sample photos' own bin means (captured in guide_features), with all seen bins and
    with bins dropped at random (keys left with 0-6 bins): the references and spreads of the
    loop over the keys, bit for bit; and the guide columns as with the loop."""
    from vision import _guide

    light, model, kw, th = captured
    seen = []
    real = _guide._bin_references

    def spy(mb, bseen, g, m):
        seen.append((mb.copy(), bseen.copy(), g))
        return real(mb, bseen, g, m)

    monkeypatch.setattr(_guide, "_bin_references", spy)
    pal = kw["palette"]
    got = _guide.guide_features(light.sample, model, palette=pal, valid=kw.get("valid"))
    if model.template.id.startswith("crypts"):
        assert not seen  # (no connections: nothing to compare)
        return
    assert len(seen) == 1
    mb, bseen, g = seen[0]
    rng = np.random.default_rng(3)
    for keep in (1.0, 0.9, 0.6, 0.3):
        bs = bseen & (rng.random(bseen.size) < keep)
        ref, spreads = real(mb, bs, g, model)
        want_ref, want_spreads = _guide._bin_references_by_key(mb, bs, g)
        np.testing.assert_array_equal(_bits(ref), _bits(want_ref))
        assert [float(v).hex() for v in spreads] == [float(v).hex() for v in want_spreads]
        if keep == 1.0:
            assert len(spreads) >= 4 and np.isfinite(ref).sum() > 20
    monkeypatch.setattr(_guide, "_bin_references",
                        lambda mb, bseen, g, m: _guide._bin_references_by_key(mb, bseen, g))
    want = _guide.guide_features(light.sample, model, palette=pal, valid=kw.get("valid"))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert np.abs(got[:, 1]).sum() > 0 or np.isfinite(ref).any()


def test_bin_references_of_made_up_means_are_those_of_the_plain_loop():
    """Keys of 1-40 bins, means with ties, a NaN (left to the loop): the same values."""
    from types import SimpleNamespace

    from vision import _guide

    rng = np.random.default_rng(4)
    sizes = rng.integers(1, 41, 60)
    key = np.repeat(rng.permutation(60) * 1000 + 7, sizes)
    key = key[rng.permutation(key.size)]
    g = SimpleNamespace(bins=key.size, bin_key=key)
    class Model:  # (a model object to keep the keys with)
        pass

    model = Model()
    for decimals in (1, 2, 6):
        mb = rng.normal(0.5, 0.1, key.size).round(decimals)
        for keep in (1.0, 0.7, 0.4):
            bs = rng.random(key.size) < keep
            ref, spreads = _guide._bin_references(mb, bs, g, model)
            want_ref, want_spreads = _guide._bin_references_by_key(mb, bs, g)
            np.testing.assert_array_equal(_bits(ref), _bits(want_ref))
            assert [float(v).hex() for v in spreads] == [float(v).hex() for v in want_spreads]
    mb[np.flatnonzero(bs)[0]] = np.nan
    ref, spreads = _guide._bin_references(mb, bs, g, model)
    want_ref, want_spreads = _guide._bin_references_by_key(mb, bs, g)
    np.testing.assert_array_equal(ref, want_ref)
    np.testing.assert_array_equal(spreads, want_spreads)


# --- the paper's medians (vision.marks._median) -----------------------------------------------

def test_median_of_the_paper_sample_is_numpys(captured):
    """The sample photos' own paper pixels (L*, chroma and their deviations, the four
    medians of _photo_thresholds): np.median's values and type, bit for bit."""
    from vision import marks
    from vision.colour import linear_to_lab, load_palette

    light, model, kw, th = captured
    lab = linear_to_lab(light.sample(model.paper_sample))
    L, C = lab[:, 0], np.hypot(lab[:, 1], lab[:, 2])
    for v in (L, C, np.abs(C - float(np.median(C))), np.abs(L - float(np.median(L))), L[1:]):
        want, got = np.median(v), marks._median(v)
        assert type(got) is type(want) and got.tobytes() == want.tobytes()
    # (and the thresholds built on them, as from np.median)
    got = marks._photo_thresholds(lab, load_palette("default"))
    c_med = float(np.median(C))
    l_med = float(np.median(L))
    assert (got["paper_chroma"], got["paper_l"]) == (c_med, l_med)
    assert got["paper_chroma_sd"] == 1.4826 * float(np.median(np.abs(C - c_med)))
    assert got["paper_l_sd"] == 1.4826 * float(np.median(np.abs(L - l_med)))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_median_of_made_up_values_is_numpys(dtype):
    """Odd and even counts, heavy tails, heavy ties (a window that misses the middle), all
    values equal, a NaN, short arrays and strided views: np.median's value bit for bit."""
    from vision import marks

    rng = np.random.default_rng(8)
    cases = []
    for n in (1, 2, 7, 4095, 4096, 4097, 20331, 20332, 50001):
        cases += [rng.normal(size=n), np.abs(rng.standard_cauchy(n)),
                  rng.integers(0, 3, n).astype(float), np.full(n, 2.5),
                  (rng.normal(size=n) * 0.01 + 100).round(2)]
    skewed = np.concatenate([np.zeros(15000), rng.normal(size=5000)])
    cases += [skewed, rng.permutation(skewed)]
    nan = rng.normal(size=9000)
    nan[17] = np.nan
    cases.append(nan)
    cases = [v.astype(dtype) for v in cases]
    cases.append(rng.normal(size=(40000, 3)).astype(dtype)[:, 1])  # (a column, as L* is)
    for v in cases:
        with np.errstate(invalid="ignore"):
            want, got = np.median(v), marks._median(v)
        assert type(got) is type(want)
        assert np.asarray(got).tobytes() == np.asarray(want).tobytes(), (v.size, v[:5])


# --- the ink around each region (vision.marks._measure_halo) ---------------------------------

def _measure_halo_before(lab, model, th, valid):
    """``_measure_halo`` as it was: each count a bincount weighted by a 0/1 selection."""
    R = len(model.region_ids)
    L, a, b = lab[:, 0], lab[:, 1], lab[:, 2]
    C = np.hypot(a, b)
    col = (C > th["chroma"]) & (C > 0.3 * np.maximum(100.0 - L, 0.0))
    dark = (L < th["dark_l"]) & ~col
    ok = np.ones(L.size, bool) if valid is None else np.asarray(valid, bool).reshape(-1)[model.halo_pix]
    ink = (col | dark) & ok
    lbl, dg = model.halo_label, model.halo_diag
    nd = np.maximum(np.bincount(lbl, dg & ok, R), 1)
    no = np.maximum(np.bincount(lbl, ~dg & ok, R), 1)
    return {"halo_diag": np.bincount(lbl, ink & dg, R) / nd,
            "halo_off": np.bincount(lbl, ink & ~dg, R) / no,
            "halo_dark_diag": np.bincount(lbl, dark & ok & dg, R) / nd}


def test_halo_columns_are_the_weighted_bincounts(captured):
    """The sample photos' own halo pixels, thresholds moved to make more and less ink, with
    the photo's frame, none and a third of it outside the photo: the same float64 columns."""
    from vision import marks
    from vision.colour import linear_to_lab

    light, model, kw, th = captured
    lab = linear_to_lab(light.sample(model.halo_pix))
    ths = [th, {**th, "chroma": 3.0, "dark_l": 97.0}, {**th, "chroma": 25.0, "dark_l": 60.0}]
    for valid in _valid_masks(model, kw):
        for t in ths:
            want = _measure_halo_before(lab, model, t, valid)
            got = marks._measure_halo(lab, model, t, valid)
            assert list(got) == list(want)
            for k in want:
                assert got[k].dtype == want[k].dtype and got[k].shape == want[k].shape
                np.testing.assert_array_equal(_bits(got[k]), _bits(want[k]), err_msg=k)
            assert want["halo_off"].sum() > 0


def test_guide_pixels_kept_whole_are_the_masked_ones(captured):
    """vision._guide._kept: the guide pixels' colours, labels and bins as masked by a whole
    frame (all kept: the same arrays, not copies) and by a part of it; guide_features reads
    the same columns with ok given as all True, as None and from the frame."""
    from vision import _guide

    light, model, kw, th = captured
    g = _guide.guide_geometry(model)
    q = np.asarray(light.sample(g.guide_pix), np.float32)
    for valid in _valid_masks(model, kw)[::2]:
        good = (np.asarray(valid, bool).reshape(-1)[model.pix][g.guide] if valid is not None
                else np.ones(g.guide.size, bool))
        got = _guide._kept(good, q, g.guide_label, g.guide_bin)
        for a, b in zip(got, (q, g.guide_label, g.guide_bin)):
            np.testing.assert_array_equal(a, b[good])
        if good.all():
            assert got[0] is q
    pal = kw["palette"]
    a = _guide.guide_features(light.sample, model, palette=pal, ok=None)
    b = _guide.guide_features(light.sample, model, palette=pal, ok=np.ones(model.pix.size, bool))
    np.testing.assert_array_equal(_bits(a), _bits(b))


# --- the trees' distinct splits compared once (vision.learned._node_major_leaves) -----------

def test_distinct_splits_give_every_node_its_own_comparison(captured, monkeypatch):
    """Every node's split is its distinct split's (feature and float32 threshold, bit for bit),
    and the leaves reached are those of comparing node by node: on a sample photo's rows
    (and rows put on and just above thresholds) for the default reader and both members, and on
    random trees with 8- to 32-bit masks."""
    import vision.learned as L
    from test_vision_learned import _random_trees
    from vision import marks

    def node_by_node(t):
        return {k: v for k, v in t.items()
                if k not in ("split_feature", "split_threshold", "node_split")}

    light, model, kw, th = captured
    X = np.asarray(marks.classify_sheet(light, model, **kw).matrix, np.float32)
    top = L.default_model()
    rng = np.random.default_rng(12)
    for reader in (top,) + tuple(top.committee):
        tables = L._exit_leaf_tables(reader.params)
        nm = L._node_major_tables(reader.params, tables)
        assert nm["split_feature"].size < 0.6 * nm["feature"].size  # (shared splits)
        np.testing.assert_array_equal(nm["split_feature"][nm["node_split"]], nm["feature"])
        np.testing.assert_array_equal(_bits(nm["split_threshold"][nm["node_split"]]),
                                      _bits(nm["threshold"]))
        on = X.copy()
        node = rng.integers(0, nm["feature"].size, size=on.shape[0])
        on[np.arange(on.shape[0]), nm["feature"][node]] = nm["threshold"][node, 0]
        for rows in (X, on, np.nextafter(on, np.float32(np.inf)), X[:1]):
            np.testing.assert_array_equal(L._node_major_leaves(rows, nm),
                                          L._node_major_leaves(rows, node_by_node(nm)))
    monkeypatch.setattr(L, "NODE_MAJOR_MAX_PADDING", 100.0)
    for depths in ([1, 3, 2, 0] * 4, [4, 2, 4, 1] * 4, [5, 5, 2, 0] * 4):
        p = _random_trees(rng, depths, full=True)
        nm = L._node_major_tables(p, L._exit_leaf_tables(p))
        R = rng.normal(size=(97, 6)).astype(np.float32)
        R[:5] = p["threshold"][0]
        np.testing.assert_array_equal(L._node_major_leaves(R, nm),
                                      L._node_major_leaves(R, node_by_node(nm)))


# --- the ring's pixels sampled on the helper thread beside the region features ---------------

@pytest.mark.parametrize("photo", PHOTOS)
def test_ring_sampled_on_the_helper_thread_reads_as_on_one(photo, monkeypatch):
    """classify_sheet offers the ring's pixels to the helper thread before the region
    features (vision._geom_threads.start): with two threads (the machine taken as having an
    idle core) every reading and the feature matrix are those of one thread, and the ring is
    sampled once either way."""
    import cv2

    from vision import _geom_threads, marks

    light, model, kw, th = _capture(photo)
    rings = []
    real_ring = marks.ring_pixels
    monkeypatch.setattr(marks, "ring_pixels", lambda *a, **k: rings.append(1) or real_ring(*a, **k))
    before = cv2.getNumThreads()
    try:
        cv2.setNumThreads(1)
        one = marks.classify_sheet(light, model, **kw)
        assert len(rings) == 1
        monkeypatch.setattr(_geom_threads, "idle_core", lambda: True)
        cv2.setNumThreads(2)
        assert _geom_threads.threads() == 2
        offered = []
        real_start = marks.start
        monkeypatch.setattr(marks, "start", lambda fn: offered.append(fn) or real_start(fn))
        two = marks.classify_sheet(light, model, **kw)
    finally:
        cv2.setNumThreads(before)
    assert len(rings) == 2 and len(offered) >= 5  # (the ring, and the region features' four)
    np.testing.assert_array_equal(_bits(two.matrix), _bits(one.matrix))
    assert {k: (r.mark, r.confidence, r.review, r.reason, r.alternatives, r.features)
            for k, r in two.readings.items()} == {
        k: (r.mark, r.confidence, r.review, r.reason, r.alternatives, r.features)
        for k, r in one.readings.items()}
