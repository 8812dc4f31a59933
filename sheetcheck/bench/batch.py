"""``sheetcheck bench batch --count N``: batch throughput on simulated 12 MP photos.

Simulating a 12 MP photo costs several seconds, so the corpus is made from a few simulated
photos (different games, levels, seeds and conditions), each re-encoded as several distinct
JPEG files (other quality settings and a comment: distinct bytes and hashes, every one a full
12 MP JPEG the checker decodes and reads in full). Then, in one run on this machine:

* the single-photo rate: photos checked one after another by one worker process made exactly
  like the batch's workers (same fork server, same initializer, OpenCV on one thread), one
  photo of every scene before the batch and another of every scene after it, so the single
  photos have the batch's mix of games and difficulty and bracket the batch in time (a shared
  machine's load drifts; the before and after rates are reported apart to show it);
* the batch: ``run_batch`` over all N photos with every core, into a fresh report folder;
* the ratio of the two: how well the batch scales over the cores (ideal = the core count),
  with the machine's load average at each step and ``uptime``.
"""

from __future__ import annotations

import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

TEMPLATES = ("crypts-1", "crypts-2", "crypts-3", "reefs-1", "reefs-2", "reefs-3")
TWELVE_MP = {"output_long_side": 4000, "aspect": 4 / 3}


def _simulate(args):
    """One simulated 12 MP photo of a legal game: (name, JPEG bytes, RGB image)."""
    tid, seed, preset = args
    from calibration.template import get_template
    from scoring.registry import engine_for
    from sheetcheck.simulator import simulate_photo
    t = get_template(tid)
    e = engine_for(t.game)
    marks = e.state_to_marks(e.simulate_game(t, seed=seed))
    p = simulate_photo(t, marks, seed=seed, preset=preset, overrides=TWELVE_MP)
    return f"{tid}-s{seed}-{preset}", p.jpeg, p.image


def _variants(image, name: str, n: int, start: int) -> list[tuple[str, bytes]]:
    from PIL import Image
    im = Image.fromarray(image)
    out = []
    for j in range(n):
        buf = io.BytesIO()
        # a different quality and a unique comment: a distinct file of the same scene
        im.save(buf, "JPEG", quality=84 + (start + j) % 12, comment=f"sheetcheck bench {name} {j}")
        out.append((f"{name}-v{j:03d}.jpg", buf.getvalue()))
    return out


def make_corpus(folder: Path, count: int, *, distinct: int = 12, workers: int | None = None) -> list[Path]:
    """Write ``count`` distinct 12 MP JPEGs into ``folder`` from ``distinct`` simulated scenes."""
    jobs = [(TEMPLATES[i % len(TEMPLATES)], 100 + i, ("easy", "typical", "hard")[i % 3])
            for i in range(min(distinct, count))]
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    per = -(-count // len(jobs))
    with ProcessPoolExecutor(workers or os.cpu_count()) as ex:
        for k, (name, jpeg, image) in enumerate(ex.map(_simulate, jobs)):
            for fname, data in _variants(image, name, min(per, count - len(paths)), k):
                p = folder / fname
                p.write_bytes(data)
                paths.append(p)
    return paths


def _single(ex, paths) -> tuple[list[float], list[float], int]:
    """Check ``paths`` one after another in the 1-worker pool ``ex``: wall (round trip) and CPU."""
    wall, cpu, ok = [], [], 0
    for p in paths:
        data = p.read_bytes()
        s = time.perf_counter()
        r = ex.submit(p.name, data, None).result()
        wall.append(time.perf_counter() - s)
        cpu.append(r["timings"]["cpu"])
        ok += "report" in r
    return wall, cpu, ok


def _single_sets(paths: list[Path]) -> tuple[list[Path], list[Path]]:
    """Two photos of every scene (distinct files): one set for before the batch, one for after."""
    by_scene: dict[str, list[Path]] = {}
    for p in paths:
        by_scene.setdefault(p.name.rsplit("-v", 1)[0], []).append(p)
    # the first variant of each scene warms the worker; the next two are measured
    before = [v[1] for v in by_scene.values() if len(v) > 2]
    after = [v[2] for v in by_scene.values() if len(v) > 2]
    return before, after


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def run(args) -> int:
    from sheetcheck.batch.runner import _PoolExecutor, run_batch
    from sheetcheck.batch.store import Store

    count = args.count or 200
    cores = os.cpu_count() or 1
    with tempfile.TemporaryDirectory(prefix="sheetcheck-bench-") as tmp:
        tmp = Path(tmp)
        t0 = time.perf_counter()
        print(f"simulating {count} photos of 12 MP ...", file=sys.stderr)
        paths = make_corpus(tmp / "photos", count)
        t_make = time.perf_counter() - t0
        mb = sum(p.stat().st_size for p in paths) / 1e6
        before, after = _single_sets(paths)
        if not before:
            raise SystemExit("bench batch: --count must give at least 3 photos per scene (36+)")

        # the single-photo rate in a worker made exactly like the batch's (the same fork server
        # preload and initializer, so OpenCV runs on one thread as in the batch), one photo at a
        # time; every scene before and after the batch, so the load drift is bracketed
        uptime0 = _uptime()
        loads = {"start": os.getloadavg()[0]}
        one = _PoolExecutor(1)
        try:
            one.submit(paths[0].name, paths[0].read_bytes(), None).result()  # warm: sheet models
            loads["single_before"] = os.getloadavg()[0]
            w1, c1, ok1 = _single(one, before)
            loads["batch_start"] = os.getloadavg()[0]
            s = run_batch(tmp / "photos", tmp / "report", workers=cores, show_progress=True)
            loads["batch_end"] = os.getloadavg()[0]
            w2, c2, ok2 = _single(one, after)
            loads["end"] = os.getloadavg()[0]
        finally:
            one.close()
        uptime1 = _uptime()
        wall, cpu = w1 + w2, c1 + c2
        with Store.in_folder(tmp / "report") as st:
            batch_cpu = [r["timings"]["cpu"] for r in st.rows() if r.get("timings")]
        single_rate = len(wall) / sum(wall)
        batch_rate = s.processed / s.seconds
        fig = {
            "photos": s.processed, "megapixels": 12, "corpus_mb": round(mb, 1),
            "cores": cores, "corpus_seconds": round(t_make, 1),
            # 1-minute load average at each step of the run, and uptime at its start and end
            "load_average": {k: round(v, 2) for k, v in loads.items()},
            "load_average_before_after": [round(loads["start"], 2), round(loads["end"], 2)],
            "uptime_start": uptime0, "uptime_end": uptime1,
            "single_photos": len(wall), "single_scenes": len(before),
            "single_photo_seconds_median": round(statistics.median(wall), 3),
            "single_photo_cpu_seconds_median": round(statistics.median(cpu), 3),
            "single_rate_sheets_per_s": round(single_rate, 3),
            "single_rate_before_batch_sheets_per_s": round(len(w1) / sum(w1), 3),
            "single_rate_after_batch_sheets_per_s": round(len(w2) / sum(w2), 3),
            "single_checked_ok": f"{ok1 + ok2}/{len(wall)}",
            "batch_seconds": round(s.seconds, 2),
            "batch_rate_sheets_per_s": round(batch_rate, 3),
            "batch_photo_cpu_seconds_median": round(statistics.median(batch_cpu), 3),
            "speedup_over_single": round(batch_rate / single_rate, 2),
            "scaling_efficiency": round(batch_rate / single_rate / cores, 2),
            # CPU work per photo in the batch against alone: > 1 means the workers slow each
            # other down (memory bandwidth, caches), whatever else runs on the machine
            "cpu_per_photo_batch_over_single": round(statistics.median(batch_cpu)
                                                     / statistics.median(cpu), 2),
            # how much CPU the workers actually got (2.0 = both cores all the time): on a shared
            # machine this, not the code, often limits the measured rate
            "cores_obtained_by_workers": round(sum(batch_cpu) / s.seconds, 2),
            # what the same CPU work per photo gives when the workers have every core to
            # themselves (an estimate from the measured CPU, not a measured rate)
            "rate_if_cores_were_free_sheets_per_s": round(cores / statistics.median(batch_cpu), 2),
            "verdicts": s.verdicts, "errors": s.errors,
        }
    print(f"batch of {fig['photos']} 12 MP photos on {cores} cores: "
          f"{fig['batch_rate_sheets_per_s']:.2f} sheets/s ({fig['batch_seconds']:.1f} s)")
    print(f"single photo: {fig['single_rate_sheets_per_s']:.2f} sheets/s "
          f"(median {fig['single_photo_seconds_median'] * 1000:.0f} ms wall, "
          f"{fig['single_photo_cpu_seconds_median'] * 1000:.0f} ms CPU per photo, with overlay "
          f"and thumbnail; {fig['single_photos']} photos of {fig['single_scenes']} scenes in a "
          f"batch-like worker: {fig['single_rate_before_batch_sheets_per_s']:.2f} sheets/s before "
          f"the batch, {fig['single_rate_after_batch_sheets_per_s']:.2f} after)")
    print(f"batch over single: x{fig['speedup_over_single']:.2f} "
          f"({fig['scaling_efficiency']:.0%} of ideal on {cores} cores); CPU per photo in the "
          f"batch x{fig['cpu_per_photo_batch_over_single']:.2f} of alone")
    print(f"uptime at the start: {uptime0}\nuptime at the end:   {uptime1}")
    print(f"machine load average before/after: {fig['load_average_before_after']} "
          f"(a load above {cores} means other work shared these cores); the workers obtained "
          f"{fig['cores_obtained_by_workers']:.2f} cores of CPU on average")
    print(f"estimate with the cores to themselves: {fig['rate_if_cores_were_free_sheets_per_s']:.2f} "
          f"sheets/s ({cores} cores / {fig['batch_photo_cpu_seconds_median'] * 1000:.0f} ms CPU per photo)")
    print(f"verdicts: {fig['verdicts']}")
    if args.json:
        Path(args.json).write_text(json.dumps(fig, indent=2) + "\n", encoding="utf-8")
    return 0
