"""Exact speed-ups of the read (session 10) keep their values: each fast path against the plain
computation it replaces."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from calibration.template import template_ids, get_template
from vision._geom_render import reference_render


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
