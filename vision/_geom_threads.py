"""A second core for one photo: run independent numpy/OpenCV work side by side.

Why: a player waits for one photo, and the machine has two cores. Several steps of one read
are independent of each other and spend their time in numpy or OpenCV calls that release the
GIL (locate's registration and blur checks beside the light normalisation, the rectify
tiles' phase correlations, the classifier's straight-line search beside its other region
features, the learned reader's tree walk in two halves), so running two at once shortens the
wall time of the read without changing a single value: each task computes exactly what it
computed in turn.

How many threads: as many as OpenCV is allowed (``cv2.getNumThreads()``), at most two, and one
while the machine has no idle core (:func:`idle_core`: the other processes' recent CPU use). A
batch worker sets ``cv2.setNumThreads(1)`` (one photo per core: the workers are the
parallelism), and then everything here runs in the calling thread, in order, as before. Work
submitted from the helper thread itself also runs in order there (no task waits on a pool it
occupies). Why the idle core: a helper thread that must wait for a core makes the caller wait
for it (measured on a machine with ~5 busy processes on its 2 cores: 12 MP read 331 ms on two
threads, 209 ms on one); with a core idle it shortens the read.

A task handed to the helper is run by whichever thread gets to it first: when the caller needs
its result and the helper has not started it yet (it is still busy with an earlier task), the
caller runs it itself instead of waiting idle.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Generic, Sequence, TypeVar

import cv2

T = TypeVar("T")

#: Threads a read may use at most (the machine the targets are set on has two cores).
MAX_THREADS = 2

_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None
_inside = threading.local()


#: Seconds between two looks at the machine's CPU use (:func:`idle_core`), and the oldest look
#: still compared with (older ones say little about now).
_LOOK_EVERY, _LOOK_MAX_AGE = 0.25, 30.0
_look_lock = threading.Lock()
_last_look: tuple[float, float, float] | None = None  # (time, machine busy s, own CPU s)
_last_verdict = True


def _machine_busy_seconds() -> float | None:
    """CPU seconds all cores have spent busy since boot (``/proc/stat``), None elsewhere."""
    try:
        with open("/proc/stat", "rb") as fh:
            v = [int(x) for x in fh.readline().split()[1:]]
        hz = float(os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, AttributeError):
        return None
    idle = v[3] + (v[4] if len(v) > 4 else 0)  # idle and iowait
    return (sum(v[:8]) - idle) / hz


def idle_core() -> bool:
    """Whether the machine has a core to spare for a helper thread: the other processes used
    less than the cores but one and a half since the last look (``/proc/stat`` less this
    process's own CPU time; at least ``_LOOK_EVERY`` s apart, at most ``_LOOK_MAX_AGE``).
    Without a recent look, the 1-minute load average (which counts this process's own
    threads too) must be below the cores less a half. True where neither can be read.

    Why not the load average alone: a read's own helper thread raises it, so on an idle
    two-core machine a run of reads pushed it past 1.5 and turned its own second thread off."""
    global _last_look, _last_verdict
    now = time.monotonic()
    with _look_lock:
        if _last_look is not None and now - _last_look[0] < _LOOK_EVERY:
            return _last_verdict
        busy = _machine_busy_seconds()
        t = os.times()
        own = t.user + t.system
        prev, _last_look = _last_look, (now, busy, own) if busy is not None else None
        cores = os.cpu_count() or 1
        if busy is not None and prev is not None and prev[1] is not None \
                and now - prev[0] <= _LOOK_MAX_AGE:
            others = (busy - prev[1] - (own - prev[2])) / (now - prev[0])
            _last_verdict = others < cores - 1.5
        else:
            try:
                _last_verdict = os.getloadavg()[0] < cores - 0.5
            except (AttributeError, OSError):
                _last_verdict = True
        return _last_verdict


def threads() -> int:
    """Threads one read may use now: ``min(MAX_THREADS, cv2.getNumThreads())`` while a core is
    idle (:func:`idle_core`), else 1; 1 inside the helper thread."""
    if getattr(_inside, "worker", False):
        return 1
    n = max(1, min(MAX_THREADS, int(cv2.getNumThreads())))
    return n if n < 2 or idle_core() else 1


def _mark_worker() -> None:
    _inside.worker = True


#: The interpreter's thread switch interval (s) while a read may use the helper thread: a
#: thread coming back from OpenCV or numpy (which run without the GIL) waits for the GIL
#: until the other thread, if it is running Python, lets go of it, by default after up to
#: 5 ms. One read hands the GIL back and forth dozens of times between its two threads
#: (12 MP bench photos, two threads: waits of 3-5 ms around remaps, resizes and ink maps
#: that take 0.1-0.5 ms of CPU; read time 164.5 -> 156.2 ms median, at 1 ms instead of 5).
SWITCH_INTERVAL_S = 0.001


def _get_pool() -> ThreadPoolExecutor:
    global _pool
    with _lock:
        if _pool is None:
            # (process-wide, and only in a process that reads with a helper thread: a batch
            # worker, on one thread, keeps the default)
            if sys.getswitchinterval() > SWITCH_INTERVAL_S:
                sys.setswitchinterval(SWITCH_INTERVAL_S)
            _pool = ThreadPoolExecutor(max_workers=MAX_THREADS - 1,
                                       thread_name_prefix="sheetcheck-read",
                                       initializer=_mark_worker)
        return _pool


class Task(Generic[T]):
    """``fn()``, run once by whichever thread claims it first (see :func:`start`)."""

    def __init__(self, fn: Callable[[], T]):
        self._fn = fn
        self._claim = threading.Lock()
        self._claimed = False
        self._done = threading.Event()
        self._value: T | None = None
        self._error: BaseException | None = None

    def _take(self) -> bool:
        with self._claim:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def _run(self) -> None:
        try:
            self._value = self._fn()
        except BaseException as e:  # noqa: BLE001 - raised again by result()
            self._error = e
        finally:
            self._fn = None  # (its closure's arrays are not kept alive by the pool)
            self._done.set()

    def _run_unless_taken(self) -> None:
        if self._take():
            self._run()

    def done(self) -> bool:
        """Whether ``fn()`` has finished (its value or error is ready)."""
        return self._done.is_set()

    def result(self) -> T:
        """The value of ``fn()`` (its error raised here): computed here when no thread has
        started it yet, else waited for."""
        if self._take():
            self._run()
        else:
            self._done.wait()
        if self._error is not None:
            raise self._error
        return self._value


def start(fn: Callable[[], T]) -> Task[T]:
    """Offer ``fn()`` to the helper thread when two threads are allowed (:func:`threads`);
    ``.result()`` gives its value, computing it in the caller if the helper has not begun it.
    With one thread, ``fn()`` runs now. For work whose result is needed only after some other
    work the caller does meanwhile."""
    task = Task(fn)
    if threads() < 2:
        task._run_unless_taken()  # now, in order (its error waits for result())
    else:
        _get_pool().submit(task._run_unless_taken)
    return task


def beside(tasks: Sequence[Task], fn: Callable[[], T]) -> T:
    """``fn()`` here while ``tasks`` (from :func:`start`) run on the helper thread. When
    ``fn`` raises, every task is let finish first (they may share the caller's arrays; their
    own errors are dropped: ``fn``'s is the one raised)."""
    try:
        return fn()
    except BaseException:
        for task in tasks:
            try:
                task.result()
            except BaseException:  # noqa: BLE001 - fn's error is the one raised
                pass
        raise


def both(first: Callable[[], T], second: Callable[[], object]) -> tuple[T, object]:
    """``(first(), second())``: the first offered to the helper thread while the second runs
    here (when two threads are allowed, else one after the other). An error of either is
    raised here (the second's first: by then the first may still be running)."""
    if threads() < 2:
        return first(), second()
    task = start(first)
    b = beside((task,), second)
    return task.result(), b


def split_map(fn: Callable[[int, int], Sequence[T]], n: int, *, min_split: int = 2) -> list[T]:
    """``fn(0, n)`` as a list, computed as ``fn(0, m) + fn(m, n)`` on two threads when allowed
    and ``n >= min_split`` (``fn(lo, hi)`` must return one result per item ``lo..hi-1`` and
    depend on nothing but its items)."""
    if n < max(2, min_split) or threads() < 2:
        return list(fn(0, n))
    m = n // 2
    hi, lo = both(lambda: fn(m, n), lambda: fn(0, m))
    return list(lo) + list(hi)


class _BlasOneThread:
    """Context manager: numpy's and scipy's BLAS on one thread while a read runs on the main
    thread.

    Why: OpenBLAS runs a matrix product of any size on a pool of its own threads (one per
    core), whose threads then spin for a while waiting for the next one. A read already uses
    the cores its own way (the helper thread here, or one process per core in a batch), so
    the pool only competes with it: on a two-core machine (session 26, ``sheetcheck bench
    read --count 12``, same run of photos) the median 12 MP read took 145 ms with the pool and
    119 ms without it, and its decode (which makes no BLAS call at all) cost 118 ms of CPU
    time against 59 ms, the spinning threads' share. On leaving, the limits found on entry
    are given back, so a caller's own BLAS use between reads keeps its pool; nested entries
    are counted. Results are the same to rounding (a product's sums may be split otherwise).

    Only on the main thread, where the command line, the batch workers and the web service's
    worker processes all read: OpenBLAS (0.3.31, measured) ignores a limit set from any other
    thread, and a restore made there would not take either, so there nothing is done. Nor
    without threadpoolctl or a BLAS it knows.
    """

    def __init__(self) -> None:
        self._depth = 0
        self._controller = None
        self._modules = 0
        self._limiter = None

    def __enter__(self) -> "_BlasOneThread":
        if threading.current_thread() is not threading.main_thread():
            return self
        if self._depth == 0:
            try:
                if self._controller is None or self._modules != len(sys.modules):
                    from threadpoolctl import ThreadpoolController

                    # the BLAS libraries loaded by now (numpy's, and scipy's through
                    # scikit-image, both imported with vision.pipeline); looked for again
                    # (1-2 ms) only when modules were imported since, which may load another
                    self._controller = ThreadpoolController()
                    self._modules = len(sys.modules)
                self._limiter = self._controller.limit(limits=1, user_api="blas")
            except Exception:  # noqa: BLE001 - a speed-up only; reads stay correct
                self._limiter = None
        self._depth += 1
        return self

    def __exit__(self, *exc) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        self._depth -= 1
        if self._depth == 0 and self._limiter is not None:
            try:
                self._limiter.restore_original_limits()
            finally:
                self._limiter = None


#: ``with blas_one_thread:`` around a read (:class:`_BlasOneThread`).
blas_one_thread = _BlasOneThread()


__all__ = ["MAX_THREADS", "Task", "blas_one_thread", "both", "idle_core", "split_map", "start",
           "threads"]
