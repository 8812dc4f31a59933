"""Exact speed-ups of the read (session 10) keep their values: each fast path against the plain
computation it replaces."""

from __future__ import annotations

import math
import threading

import cv2
import numpy as np
import pytest

from calibration.template import get_template, template_ids
from vision._geom_render import reference_render
from vision.marks import _ALONG, _ALONG_Z, _LINE_ANGLES, _STRIP_MIN_MM, _STRIPS, SheetModel


@pytest.fixture
def two_threads(monkeypatch):
    """Two threads allowed (OpenCV's count restored after the test), the machine taken as
    having an idle core (vision._geom_threads.idle_core) however busy it is."""
    from vision import _geom_threads

    monkeypatch.setattr(_geom_threads, "idle_core", lambda: True)
    before = cv2.getNumThreads()
    cv2.setNumThreads(2)
    yield
    cv2.setNumThreads(before)


# --- rectify's phase correlations, shared out in chunks (vision.rectify._shared_map) ----------

@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 40, 83])
def test_shared_map_gives_every_item_once_in_order(two_threads, n):
    """Whichever thread takes a chunk, the list is fn(0, n): every item once, in item order
    (the caller concatenates the chunks by position, not by when they finished)."""
    from vision.rectify import _PC_CHUNK, _shared_map

    calls, who = [], set()
    lock = threading.Lock()

    def fn(lo, hi):
        with lock:
            calls.append((lo, hi))
            who.add(threading.current_thread().name)
        return [i * i for i in range(lo, hi)]

    assert _shared_map(fn, n) == [i * i for i in range(n)]
    covered = sorted(i for lo, hi in calls for i in range(lo, hi))
    assert covered == list(range(n))
    if n >= 2 * _PC_CHUNK:
        assert all(hi - lo <= _PC_CHUNK for lo, hi in calls) and len(calls) > 1
    else:
        assert calls == [(0, n)]  # (too few items to share: one call, in the caller)


def test_shared_map_runs_in_order_on_one_thread(monkeypatch):
    from vision import rectify

    monkeypatch.setattr(rectify, "threads", lambda: 1)
    calls = []
    assert rectify._shared_map(lambda lo, hi: calls.append((lo, hi)) or list(range(lo, hi)),
                               50) == list(range(50))
    assert calls == [(0, 50)]


@pytest.mark.parametrize("where", ["caller", "helper"])
def test_shared_map_raises_an_error_of_either_thread(two_threads, where):
    """A chunk that fails on either thread fails the map (after the other thread has finished
    its chunk: they share the caller's arrays)."""
    import time

    from vision.rectify import _shared_map

    caller = threading.current_thread()

    def fn(lo, hi):
        failing = (threading.current_thread() is caller) == (where == "caller")
        if not failing:
            time.sleep(0.01)  # (slow: the failing thread surely takes chunks past the first)
        if lo >= 16 and failing:
            raise RuntimeError(f"chunk at {lo} failed on the {where}")
        return list(range(lo, hi))

    with pytest.raises(RuntimeError, match=f"failed on the {where}"):
        _shared_map(fn, 400)


def test_tiles_measured_on_two_threads_are_the_tiles_measured_on_one(monkeypatch):
    """measure_alignment's phase correlations (a few hundred tiles) on one thread and shared out
    in chunks between two: the same shifts and weights, bit for bit."""
    from vision import _geom_threads, rectify

    monkeypatch.setattr(_geom_threads, "idle_core", lambda: True)
    t = get_template(template_ids()[0])
    ref = np.asarray(reference_render(t, dpi=40.0, markers=True))
    ink = (1.0 - cv2.cvtColor(ref, cv2.COLOR_RGB2GRAY).astype(np.float32) / 255.0)
    rng = np.random.default_rng(7)
    moved = cv2.warpAffine(ink, np.float32([[1, 0.004, 1.7], [-0.003, 1, 0.6]]), ink.shape[::-1])
    moved = moved + rng.normal(0, 0.02, moved.shape).astype(np.float32)
    runs = {}
    before = cv2.getNumThreads()
    real = rectify._shared_map
    try:
        for n in (1, 2):
            cv2.setNumThreads(n)
            calls = []
            monkeypatch.setattr(rectify, "_shared_map",
                                lambda fn, m, **kw: calls.append(m) or real(fn, m, **kw))
            runs[n] = rectify.measure_alignment(moved, ink, tile=24, stride=12, max_shift=6.0)
            assert calls and calls[0] >= 4 * rectify._PC_CHUNK  # (enough tiles to share)
    finally:
        cv2.setNumThreads(before)
    (s1, w1, c1), (s2, w2, c2) = runs[1], runs[2]
    assert (w1 > 0).sum() >= 40
    np.testing.assert_array_equal(s1, s2)
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(c1[0], c2[0])
    np.testing.assert_array_equal(c1[1], c2[1])


# --- the straight-line search (vision.marks._measure_lines) -----------------------------------
# The search as it was (the oracle): the first strip's offsets were computed twice (for its
# pixels and its neighbours'), each pixel's gradient was gathered twice, and the strip sums
# gathered with fancy indexing.

def _strip_sums_before(values: np.ndarray, model: SheetModel) -> np.ndarray:
    """vision.marks._strip_sums as it was before session 10."""
    src, starts, nz = model.strip_sum_idx
    out = np.zeros(len(model.region_ids) * _LINE_ANGLES * _STRIPS)
    if starts.size:
        out[nz] = np.add.reduceat(np.asarray(values, np.float64)[src], starts)
    return out


def _measure_lines_before(zp: np.ndarray, ok: np.ndarray, model: SheetModel, gx: np.ndarray,
                   gy: np.ndarray) -> dict[str, np.ndarray]:
    """vision.marks._measure_lines as it was before session 10 (the oracle)."""
    R = len(model.region_ids)
    K, NB = _LINE_ANGLES, _STRIPS
    keys = ("line_z", "line_contrast", "line_length", "line_span", "line_offset", "line_diag",
            "line2_z", "line2_contrast", "line2_length", "line_rest", "orient_top",
            "orient_second")
    out = {k: np.zeros(R) for k in keys}
    if model.strip_bin is None or model.strip_pos is None or model.strip_pos.size == 0:
        return out
    pos, sbin, w = model.strip_pos, model.strip_bin, model.strip_px
    za = zp[pos]
    nbin = R * K * NB
    ssum = _strip_sums_before(za, model)
    oka = ok[pos]
    cnt = model.strip_count if oka.all() else _strip_sums_before(oka.astype(np.float64), model)
    k_mm = model.dpi / 25.4
    # (the search runs on every other pixel, SheetModel.strip_pos: half a strip's pixels)
    nmin = 0.5 * _STRIP_MIN_MM * k_mm * w
    mean = np.where(cnt >= nmin, ssum / np.maximum(cnt, 1), -np.inf).reshape(R, K, NB)
    best_b = mean.argmax(axis=2)  # (R, K)
    best_k = np.take_along_axis(mean, best_b[..., None], axis=2)[..., 0]  # (R, K)
    k1 = best_k.argmax(axis=1)
    r_idx = np.arange(R)
    has = np.isfinite(best_k[r_idx, k1])
    g1 = (r_idx * K + k1) * NB + best_b[r_idx, k1]
    s1, c1 = ssum[g1], cnt[g1]
    # the region's totals over the same pixels: every pixel lies in one strip per orientation
    zs = ssum.reshape(R, K, NB)[:, 0].sum(axis=1)
    nn = np.asarray(cnt).reshape(R, K, NB)[:, 0].sum(axis=1)
    m1 = s1 / np.maximum(c1, 1)
    out["line_z"] = np.where(has, m1, 0.0)
    out["line_contrast"] = np.where(has, m1 - (zs - s1) / np.maximum(nn - c1, 1), 0.0)
    lbl = model.label[pos]
    dxy = model.strip_dxy
    ext = np.maximum(model.strip_ext, w)
    # where the line lies: offset from the centre and angle to the nearer diagonal
    out["line_offset"] = np.where(has, np.abs((best_b[r_idx, k1] + 0.5 - NB / 2) * w) / ext, 0.0)
    ang = np.degrees(k1 * (math.pi / K)) % 90.0
    out["line_diag"] = np.where(has, np.abs(ang - 45.0) / 45.0, 0.0)
    ar = np.arange(pos.size)

    def strip_pixels(g, kk, spread=0):
        # pixels of each region's strip g (orientation kk), or within `spread` strips of it
        kp = kk[lbl]
        d = sbin[kp, ar] - g[lbl]
        return np.flatnonzero(((d <= spread) & (d >= -spread)) & oka), kp

    def length(on, kp, valid):
        # share of the strip's 1 mm bins along its line that carry the line, and how many
        # bins it has (its readable length)
        th = kp[on] * (math.pi / K)
        t = dxy[on, 0] * np.cos(th) + dxy[on, 1] * np.sin(th)
        ab = np.clip(np.floor(t / k_mm + _ALONG / 2), 0, _ALONG - 1).astype(np.int64)
        idx = lbl[on].astype(np.int64) * _ALONG + ab
        bs = np.bincount(idx, za[on], R * _ALONG)
        bc = np.bincount(idx, minlength=R * _ALONG)
        seen = bc >= 0.25 * w  # half a mm of the strip's width seen in that bin (every other px)
        hit = seen & (bs >= _ALONG_Z * np.maximum(bc, 1))
        nseen = seen.reshape(R, _ALONG).sum(axis=1)
        return (np.where(valid, hit.reshape(R, _ALONG).sum(axis=1) / np.maximum(nseen, 1), 0.0),
                nseen)

    on1, kp1 = strip_pixels(g1, k1)
    out["line_length"], nseen = length(on1, kp1, has)
    out["line_span"] = np.where(has, nseen * k_mm / (2 * ext), 0.0)
    # Second line: the best strip at least 45 degrees from the first, without the pixels of
    # the first strip and its two neighbours (a strip across a single slash would otherwise
    # pick up where it crosses it, and the edges of a slash that falls between two strips)
    wide1, _ = strip_pixels(g1, k1, spread=1)
    b_on = sbin[:, wide1].reshape(-1)
    ssum2 = ssum - np.bincount(b_on, np.tile(za[wide1], K), nbin)
    cnt2 = cnt - np.bincount(b_on, minlength=nbin)
    mean2 = np.where(cnt2 >= nmin, ssum2 / np.maximum(cnt2, 1), -np.inf).reshape(R, K, NB)
    dk = np.abs(np.arange(K)[None, :] - k1[:, None])
    dk = np.minimum(dk, K - dk)
    mean2[dk < K // 4] = -np.inf
    best_b2 = mean2.argmax(axis=2)
    best_k2 = np.take_along_axis(mean2, best_b2[..., None], axis=2)[..., 0]
    k2 = best_k2.argmax(axis=1)
    has2 = has & np.isfinite(best_k2[r_idx, k2])
    g2 = (r_idx * K + k2) * NB + best_b2[r_idx, k2]
    s2, c2 = ssum2[g2], cnt2[g2]
    m2 = s2 / np.maximum(c2, 1)
    rest12 = (zs - s1 - s2) / np.maximum(nn - c1 - c2, 1)
    out["line2_z"] = np.where(has2, m2, 0.0)
    out["line2_contrast"] = np.where(has2, m2 - rest12, 0.0)
    out["line_rest"] = np.where(has, rest12, 0.0)
    on2, kp2 = strip_pixels(g2, k2)
    on2 = on2[~np.isin(on2, wide1, assume_unique=True)]
    out["line2_length"], _ = length(on2, kp2, has2)
    # orientation of the ink's edges (double-angle histogram, 8 bins of 22.5 deg): hatching
    # is one orientation, an X two about 90 deg apart, a scribble all of them
    gxa, gya = gx[pos], gy[pos]
    e = gxa * gxa + gya * gya
    strong = e > 1e-6
    phi = np.arctan2(2 * gxa[strong] * gya[strong], gxa[strong] ** 2 - gya[strong] ** 2)
    ob = ((phi + math.pi) * (8 / (2 * math.pi))).astype(np.int64) % 8
    hist = np.bincount(lbl[strong].astype(np.int64) * 8 + ob, e[strong], R * 8).reshape(R, 8)
    tot = np.maximum(hist.sum(axis=1), 1e-9)
    pair = hist + np.roll(hist, -1, axis=1)  # 45 deg windows
    o1 = pair.argmax(axis=1)
    do = np.abs(np.arange(8)[None, :] - o1[:, None])
    do = np.minimum(do, 8 - do)
    out["orient_top"] = pair[r_idx, o1] / tot
    out["orient_second"] = np.where(do >= 3, pair, 0.0).max(axis=1) / tot
    return out


def _line_inputs(model, rng, *, holes: float):
    """zp, ok, gx, gy for ``model``'s region pixels: paper noise, a few strong strokes, and a
    share ``holes`` of pixels not ok."""
    P = model.pix.size
    ok = rng.random(P) >= holes
    zp = rng.normal(0.0, 1.0, P)
    zp[rng.random(P) < 0.05] = 8.0
    zp = np.where(ok, np.clip(zp, -3.0, 8.0), 0.0)
    gx = rng.normal(0.0, 1.0, P).astype(np.float32)
    gy = rng.normal(0.0, 1.0, P).astype(np.float32)
    gx[rng.random(P) < 0.1] = 0.0
    gy[gx == 0.0] = 0.0  # (no edge: not counted in the orientation histogram)
    return zp, ok, gx, gy


@pytest.mark.parametrize("holes", [0.0, 0.15])
def test_line_search_is_the_search_it_was(holes):
    """Random ink contrast on a real sheet model, every pixel readable (the strip counts are
    the model's) and with holes (counted on the photo): the same twelve columns, bit for bit."""
    from vision.marks import _measure_lines
    from vision.pipeline import sheet_model

    model = sheet_model(get_template("crypts-2"))
    rng = np.random.default_rng(11)
    for _ in range(3):
        zp, ok, gx, gy = _line_inputs(model, rng, holes=holes)
        want = _measure_lines_before(zp, ok, model, gx, gy)
        got = _measure_lines(zp, ok, model, gx, gy)
        assert got.keys() == want.keys()
        assert (want["line_length"] > 0).any() and (want["line2_length"] > 0).any()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k], err_msg=k)


def test_line_search_on_a_photo_is_the_search_it_was(monkeypatch):
    """The sample photo's own inputs (captured during a read): the same columns."""
    from pathlib import Path

    from vision import marks
    from vision.pipeline import read_photo

    seen = []
    real = marks._measure_lines

    def spy(zp, ok, model, gx, gy):
        seen.append((zp, ok, model, gx, gy))
        return real(zp, ok, model, gx, gy)

    monkeypatch.setattr(marks, "_measure_lines", spy)
    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"
    read_photo(photo, keep_matrix=True)
    assert len(seen) == 1
    zp, ok, model, gx, gy = seen[0]
    want = _measure_lines_before(zp, ok, model, gx, gy)
    got = real(zp, ok, model, gx, gy)
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=k)


# --- bare cores by erosion (vision.marks._chamfer_ball) ----------------------------------------

@pytest.mark.parametrize("dpi", [40.0, 60.0, 100.0, 150.0, 300.0])
def test_erosion_by_the_chamfer_ball_is_the_distance_transform_threshold(dpi):
    """``distanceTransform(a, DIST_L2, 3) >= radius`` and the erosion by _chamfer_ball(radius)
    pick the same pixels: sparse to dense 0s, windows down to one row or column, 0s at the
    window's edge (outside it counts as no 0 for both)."""
    from vision.marks import _chamfer_ball

    radius = 0.5 * dpi / 25.4  # (the bare core's radius at this dpi)
    ball = _chamfer_ball(radius)
    assert ball.shape[0] == ball.shape[1] and ball.shape[0] % 2 == 1
    np.testing.assert_array_equal(ball, ball[::-1, ::-1])  # (symmetric: no anchor question)
    rng = np.random.default_rng(int(dpi))
    for p in (0.005, 0.05, 0.2, 0.5, 0.9):
        for shape in ((1, 40), (40, 1), (3, 3), (61, 87), (240, 180)):
            a = (rng.random(shape) > p).astype(np.uint8)
            want = cv2.distanceTransform(a, cv2.DIST_L2, 3) >= radius
            got = cv2.erode(a, ball, borderType=cv2.BORDER_CONSTANT, borderValue=1) > 0
            np.testing.assert_array_equal(got, want)
    assert _chamfer_ball(radius) is ball  # (built once per radius)


def test_bare_cores_of_a_photo_are_those_of_the_distance_transform(monkeypatch):
    """The sample photo's own pixels (captured during a read): the bare-core sums of
    _measure_rest are those of the distance transform it replaced."""
    from pathlib import Path

    from vision import marks
    from vision.pipeline import read_photo

    seen = []
    real = marks._measure_rest

    def spy(acc, *rest):
        seen.append((acc.sibling(), rest))
        return real(acc, *rest)

    monkeypatch.setattr(marks, "_measure_rest", spy)
    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"
    read_photo(photo)
    assert len(seen) == 1
    acc, rest = seen[0]
    model, ok, ink, rpix, (H, W) = rest[0], rest[2], rest[4], rest[10], rest[11]
    S, k = real(acc.sibling(), *rest)
    bare = np.zeros(H * W, np.uint8)
    bare[rpix[ok & ~ink]] = 1
    dist = cv2.distanceTransform(bare.reshape(H, W), cv2.DIST_L2, 3).reshape(-1)[rpix]
    want = acc.sibling()
    want.add(ok & (dist >= 0.5 * model.dpi / 25.4))
    np.testing.assert_array_equal(S[k["core"]], want.sums()[0])
    assert 0 < S[k["core"]].sum() < ok.sum()  # (some bare cores, not every pixel)


def test_an_error_here_waits_for_the_helpers_tasks_and_is_the_one_raised(two_threads):
    # vision._geom_threads.beside (both() and classify's start use it): the tasks may read the
    # caller's arrays, so they finish before the caller's error goes up; theirs is dropped
    from vision._geom_threads import beside, both, start

    release = threading.Event()
    finished = []

    def slow():
        release.wait(5)
        finished.append("slow")
        return 1

    def broken():
        raise KeyError("the helper's")

    tasks = (start(slow), start(broken))

    def fails_here():
        release.set()
        raise ValueError("the caller's")
    with pytest.raises(ValueError, match="the caller's"):
        beside(tasks, fails_here)
    assert finished == ["slow"] and all(t.done() for t in tasks)
    assert beside((), lambda: 7) == 7
    with pytest.raises(KeyError):
        both(broken, lambda: 2)
    assert both(lambda: 3, lambda: 4) == (3, 4)
