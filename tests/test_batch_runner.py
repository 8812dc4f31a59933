"""The batch end to end with the real reader: resume after SIGKILL, bad photos, zips, Dask."""

import json
import re
import os
import signal
import sqlite3
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from calibration.template import get_template
from scoring.registry import engine_for
from sheetcheck.batch.runner import run_batch
from sheetcheck.batch.store import DB_NAME, Store
from sheetcheck.simulator import simulate_photo

ROOT = Path(__file__).resolve().parents[1]
HOSTILE = '<img src=x onerror=alert("pwn")>&.jpg'
SMALL = {"output_long_side": 1200}


def _photo(tid, seed, *, violation=None):
    t = get_template(tid)
    e = engine_for(t.game)
    st = e.simulate_game(t, seed=seed)
    if violation:
        st = e.inject_violation(st, violation, np.random.default_rng(seed))
    p = simulate_photo(t, e.state_to_marks(st), seed=seed, preset="easy", overrides=SMALL)
    return p.jpeg


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """12 small simulated photos in nested folders and a zip, plus a broken and a hostile one."""
    root = tmp_path_factory.mktemp("corpus")
    (root / "table1").mkdir()
    (root / "table2").mkdir()
    tids = ["crypts-1", "crypts-2", "crypts-3", "reefs-1", "reefs-2", "reefs-3"]
    for i in range(8):
        v = "points_unearned" if i == 2 else ("bonus_unearned" if i == 6 else None)
        folder = root / ("table1" if i % 2 else "table2")
        (folder / f"player{i}.jpg").write_bytes(_photo(tids[i % 6], 40 + i, violation=v))
    with zipfile.ZipFile(root / "late.zip", "w") as zf:
        zf.writestr("table3/zed.jpg", _photo("crypts-2", 61))
        zf.writestr("../../outside.jpg", _photo("reefs-1", 62))
    (root / HOSTILE).write_bytes(_photo("crypts-1", 63))
    (root / "broken.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    return root


@pytest.fixture(scope="module")
def reference(corpus, tmp_path_factory):
    """An uninterrupted run."""
    out = tmp_path_factory.mktemp("ref")
    s = run_batch(corpus, out, workers=2, show_progress=False)
    with Store.in_folder(out) as st:
        rows = st.rows(latest=False)
    return s, rows, out


def _key(rows):
    return {r["sha256"]: (r["file"], r["verdict"], r["score"], r["claimed"], r["readings"],
                          json.dumps(r["findings"], sort_keys=True), r["error_code"])
            for r in rows}


def test_uninterrupted_run_records_every_photo_once(reference, corpus):
    s, rows, out = reference
    assert s.total == 12 and s.processed == 12 and s.skipped == 0
    assert len(rows) == 12 and len({r["sha256"] for r in rows}) == 12
    by_file = {r["file"]: r for r in rows}
    assert by_file["broken.jpg"]["verdict"] == "ERROR"
    assert by_file["broken.jpg"]["error_code"] in ("corrupt_image", "not_an_image")
    # the sheets with an injected unearned claim are never passed as OK (the reader may leave a
    # region for review; then the verdict says so rather than guessing)
    for f in ("table2/player2.jpg", "table2/player6.jpg"):
        assert by_file[f]["verdict"] in ("DISCREPANCY", "NEEDS REVIEW"), f
        if by_file[f]["verdict"] == "DISCREPANCY":
            assert by_file[f]["claimed"] > by_file[f]["score"], f
    assert by_file["table1/player1.jpg"]["player"] == "player1"
    assert by_file["table1/player1.jpg"]["table_name"] == "table1"
    assert s.errors == 1 and s.verdicts.get("ERROR") == 1
    # the zip's ../ member is checked like any photo and writes nothing outside the report
    assert by_file["late.zip!outside.jpg"]["template"] == "reefs-1"
    assert by_file["late.zip!outside.jpg"]["verdict"] != "ERROR"
    assert not (out.parent / "outside.jpg").exists() and not (corpus.parent / "outside.jpg").exists()
    for r in rows:
        if r["verdict"] != "ERROR":
            assert (out / "overlays" / f"{r['sha256']}.png").stat().st_size > 10_000
            assert (out / "thumbs" / f"{r['sha256']}.jpg").exists()


def test_exports_and_page(reference):
    s, rows, out = reference
    csv_lines = (out / "results.csv").read_text().splitlines()
    assert len(csv_lines) == 13 and csv_lines[0].startswith("file,player,table,template")
    doc = json.loads((out / "results.json").read_text())
    assert doc["format"] == "sheetcheck.batch/1" and len(doc["results"]) == 12
    order = [r["verdict"] for r in doc["results"]]
    rank = {"NEEDS REVIEW": 0, "DISCREPANCY": 1, "ERROR": 2, "OK": 3}
    assert order == sorted(order, key=rank.get)  # what needs a person comes first
    page = (out / "index.html").read_text()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(&quot;pwn&quot;)&gt;&amp;" in page
    on_page = re.findall(r'<div class="sheet"[^>]*>\n<div><b class="v-[^"]+">([^<]+)</b>', page)
    assert on_page == order
    assert "Rankings" in page and "pick_a_pen_reefs level 2" in page


def test_rerun_skips_everything(reference, corpus):
    _, rows, out = reference
    s = run_batch(corpus, out, workers=1, show_progress=False)
    assert s.processed == 0 and s.skipped == 12
    with Store.in_folder(out) as st:
        assert _key(st.rows(latest=False)) == _key(rows)


def test_killed_batch_resumes_with_nothing_lost_or_doubled(reference, corpus, tmp_path):
    _, ref_rows, _ = reference
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "sheetcheck.cli", "batch", str(corpus), "--out", str(out),
           "--workers", "1", "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    db = out / DB_NAME
    n = 0
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if db.exists():
                try:
                    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as c:
                        n = c.execute("SELECT COUNT(*) FROM results").fetchone()[0]
                except sqlite3.OperationalError:
                    n = 0
                if n >= 3:
                    break
            time.sleep(0.05)
        assert proc.poll() is None, "the batch finished before it could be killed"
        assert 3 <= n < 12
        os.kill(proc.pid, signal.SIGKILL)          # the batch process itself, mid-run
        proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        try:                                        # its orphaned workers (our own session)
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    with Store.in_folder(out) as st:
        kept = st.count()
    assert kept >= n
    s = run_batch(corpus, out, workers=2, show_progress=False)
    assert s.skipped == kept and s.processed == 12 - kept
    with Store.in_folder(out) as st:
        rows = st.rows(latest=False)
    assert len(rows) == 12 and len({r["sha256"] for r in rows}) == 12
    got, want = _key(rows), _key(ref_rows)
    differ = sorted(want[h][0] for h in want if got.get(h) != want[h])
    # the checker must give a photo the same result whatever a worker checked before it
    assert not differ, f"results differ from the uninterrupted run for {differ}"


def test_dask_local_cluster_gives_the_same_results(reference, corpus, tmp_path):
    distributed = pytest.importorskip("distributed")
    _, ref_rows, _ = reference
    src = tmp_path / "few"
    src.mkdir()
    for name in ("table2/player2.jpg", "table1/player3.jpg", "broken.jpg"):
        (src / Path(name).name).write_bytes((corpus / name).read_bytes())
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        s = run_batch(src, tmp_path / "out", dask=client, show_progress=False)
    assert s.processed == 3 and s.errors == 1
    with Store.in_folder(tmp_path / "out") as st:
        rows = st.rows()
    ref = _key(ref_rows)
    for sha, (file, *rest) in _key(rows).items():
        assert ref[sha][1:] == tuple(rest), file


def test_correction_is_a_new_revision(reference, tmp_path):
    import shutil
    from sheetcheck.batch.runner import correct_result
    from sheetcheck.errors import InputFileError, StateError
    _, rows, ref_out = reference
    out = tmp_path / "rep"
    shutil.copytree(ref_out, out)
    row = next(r for r in rows if r["file"] == "table1/player3.jpg")
    rid = next(k for k, m in sorted(row["readings"].items()) if k.startswith("treasurebox.")
               and m != "empty")
    doc = correct_result(out, "table1/player3.jpg", [f"{rid}=empty"])
    assert doc["corrections"] == [{"region": rid, "read": row["readings"][rid], "mark": "empty"}]
    with Store.in_folder(out) as st:
        hist = st.history(row["sha256"])
    assert [h["revision"] for h in hist] == [0, 1]
    assert hist[0]["report"] == row["report"]                 # the original is kept as it was
    assert hist[1]["readings"][rid] == "empty" and hist[1]["verdict"] == doc["verdict"]
    csv_row = next(l for l in (out / "results.csv").read_text().splitlines()
                   if l.startswith("table1/player3.jpg"))
    assert ",1," in csv_row                                    # revision 1 in the export
    with pytest.raises(StateError, match="cannot carry 'pink'"):
        correct_result(out, "table1/player3.jpg", [f"{rid}=pink"])
    with pytest.raises(InputFileError, match="no checked result"):
        correct_result(out, "broken.jpg", [f"{rid}=empty"])


def test_a_worker_killed_mid_batch_loses_nothing(reference, corpus, tmp_path):
    """SIGKILL one worker process (as the OOM killer would): its photos are retried."""
    import threading
    psutil = pytest.importorskip("psutil")
    _, ref_rows, _ = reference
    src = tmp_path / "src"
    src.mkdir()
    names = ["table1/player1.jpg", "table1/player3.jpg", "table2/player0.jpg",
             "table2/player4.jpg", "table1/player5.jpg"]
    for n in names:
        (src / n.replace("/", "_")).write_bytes((corpus / n).read_bytes())
    out = tmp_path / "out"
    killed = []

    def killer():
        me = psutil.Process()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not killed:
            # the pool's workers are the grandchildren (children of the fork server)
            workers = [p for c in me.children() for p in c.children()]
            if workers and (out / DB_NAME).exists():
                time.sleep(0.3)  # let a job start on it
                os.kill(workers[0].pid, signal.SIGKILL)
                killed.append(workers[0].pid)
            time.sleep(0.05)

    th = threading.Thread(target=killer)
    th.start()
    s = run_batch(src, out, workers=2, show_progress=False)
    th.join()
    assert killed, "no worker was killed"
    assert s.processed == 5 and s.errors == 0
    with Store.in_folder(out) as st:
        rows = st.rows(latest=False)
    want = {sha: v[1:] for sha, v in _key(ref_rows).items()}
    assert {r["sha256"]: _key([r])[r["sha256"]][1:] for r in rows} == {
        sha: want[sha] for sha in {r["sha256"] for r in rows}}
    assert len(rows) == 5
