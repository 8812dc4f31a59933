"""``sheetcheck bench server``: a bounded load test of the web service on loopback.

Starts the server (uvicorn, its own temporary database), sends ``--count`` check requests (200 by
default) from 8 concurrent clients, and reports throughput, p50/p99 latency, errors and the
memory of the server process tree (the app and its worker processes). Only 127.0.0.1 is ever
contacted, and the run stops by itself (a time limit bounds it).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = 8
TIME_LIMIT_S = 900


def _tree_rss_kib(pid: int) -> int:
    """Resident memory of a process and all its descendants, KiB (Linux /proc)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        try:
            for line in Path(f"/proc/{p}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
            children = Path(f"/proc/{p}/task/{p}/children").read_text().split()
            todo.extend(int(c) for c in children)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total


def _sample_photos() -> list[Path]:
    photos = sorted((ROOT / "sample_photos").glob("*.jpg"))
    if not photos:
        raise SystemExit("bench server: no sample photos in sample_photos/")
    return photos


def run(args) -> int:
    import httpx

    count = args.count or 200
    photos = [(p.name, p.read_bytes()) for p in _sample_photos()]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tmp_holder = tempfile.TemporaryDirectory(prefix="sheetcheck-bench-")  # removed at the end
    tmp = tmp_holder.name
    env = dict(os.environ, SHEETCHECK_DB=f"{tmp}/audits.sqlite", SHEETCHECK_DATA_DIR=f"{tmp}/data",
               SHEETCHECK_WORKERS=str(os.cpu_count() or 2))
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "server:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"], cwd=ROOT, env=env)
    base = f"http://127.0.0.1:{port}"
    peak = [0]
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            peak[0] = max(peak[0], _tree_rss_kib(proc.pid))
            time.sleep(0.2)

    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(base + "/api/templates", timeout=2)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("bench server: the server did not start")
                time.sleep(0.3)
        idle_kib = _tree_rss_kib(proc.pid)
        threading.Thread(target=watch, daemon=True).start()
        latencies: list[float] = []
        errors: list[str] = []
        lock = threading.Lock()
        t_end = time.monotonic() + TIME_LIMIT_S

        def one(i: int):
            if time.monotonic() > t_end:
                with lock:
                    errors.append("time limit")
                return
            name, data = photos[i % len(photos)]
            t0 = time.perf_counter()
            try:
                r = httpx.post(base + "/api/check", files={"photo": (name, data, "image/jpeg")},
                               timeout=120)
                ok = r.status_code == 201
                err = None if ok else f"{r.status_code} {r.text[:200]}"
            except httpx.HTTPError as e:
                err = f"{type(e).__name__}: {e}"
            dt = time.perf_counter() - t0
            with lock:
                latencies.append(dt)
                if err:
                    errors.append(err)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(CLIENTS) as pool:
            list(pool.map(one, range(count)))
        wall = time.perf_counter() - t0
    finally:
        stop.set()
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
        tmp_holder.cleanup()

    lat = sorted(latencies)
    res = {
        "requests": count, "clients": CLIENTS, "wall_s": round(wall, 2),
        "throughput_rps": round(count / wall, 3),
        "latency_p50_s": round(statistics.median(lat), 3),
        "latency_p99_s": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 3),
        "errors": len(errors), "server_rss_idle_mib": round(idle_kib / 1024, 1),
        "server_rss_peak_mib": round(peak[0] / 1024, 1),
        "server_workers": int(env["SHEETCHECK_WORKERS"]),
    }
    for k, v in res.items():
        print(f"{k}: {v}")
    if errors:
        print("first errors:", *errors[:5], sep="\n  ")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2), encoding="utf-8")
    return 0 if not errors else 1
