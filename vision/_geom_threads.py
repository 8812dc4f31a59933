"""A second core for one photo: run independent numpy/OpenCV work side by side.

Why: a player waits for one photo, and the machine has two cores. Several steps of one read
are independent of each other and spend their time in numpy or OpenCV calls that release the
GIL (the rectify tiles' phase correlations, the classifier's straight-line search beside its
other region features), so running two at once shortens the wall time of the read without
changing a single value: each task computes exactly what it computed in turn.

How many threads: as many as OpenCV is allowed (``cv2.getNumThreads()``), at most two. A batch
worker sets ``cv2.setNumThreads(1)`` (one photo per core: the workers are the parallelism), and
then everything here runs in the calling thread, in order, as before. Work submitted from the
helper thread itself also runs in order (no task waits on a pool it occupies).
"""

from __future__ import annotations

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Callable, Sequence, TypeVar

import cv2

T = TypeVar("T")

#: Threads a read may use at most (the machine the targets are set on has two cores).
MAX_THREADS = 2

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_inside = threading.local()


def threads() -> int:
    """Threads one read may use now: ``min(MAX_THREADS, cv2.getNumThreads())``, 1 inside the
    helper thread."""
    if getattr(_inside, "worker", False):
        return 1
    return max(1, min(MAX_THREADS, int(cv2.getNumThreads())))


def _mark_worker() -> None:
    _inside.worker = True


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS - 1, thread_name_prefix="sheetcheck-read",
                                       initializer=_mark_worker)
        return _pool


def both(first: Callable[[], T], second: Callable[[], object]) -> tuple[T, object]:
    """``(first(), second())``, the first in the helper thread while the second runs here
    when two threads are allowed (:func:`threads`), else one after the other.

    An exception of either is raised here (the first's after the second has finished)."""
    if threads() < 2:
        return first(), second()
    fut: Future = _get_pool().submit(first)
    try:
        b = second()
    except BaseException:
        fut.cancel()
        try:
            fut.result()
        except BaseException:
            pass
        raise
    return fut.result(), b


def split_map(fn: Callable[[int, int], Sequence[T]], n: int, *, min_split: int = 2) -> list[T]:
    """``fn(0, n)`` as a list, computed as ``fn(0, m) + fn(m, n)`` on two threads when allowed
    and ``n >= min_split`` (``fn(lo, hi)`` must return one result per item ``lo..hi-1`` and
    depend on nothing but its items)."""
    if n < max(2, min_split) or threads() < 2:
        return list(fn(0, n))
    m = n // 2
    hi, lo = both(lambda: fn(m, n), lambda: fn(0, m))
    return list(lo) + list(hi)


__all__ = ["MAX_THREADS", "both", "split_map", "threads"]
