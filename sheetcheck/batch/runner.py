"""Run the checker over many photos: in parallel, resumable, with progress and an ETA.

The parent lists the photos, reads and hashes each one (skipping hashes already in the store),
and sends the bytes to a worker: a process of a ``ProcessPoolExecutor`` on this machine, or a
worker of a Dask distributed cluster (``dask=tcp://HOST:PORT``). Workers only compute: they
return the report JSON, the overlay PNG and a thumbnail. The parent alone writes, one
transaction per result as it arrives, so a batch killed at any moment loses nothing finished and
a re-run resumes where it stopped. A bad photo (or a worker that crashes on it) becomes an error
row and never stops the batch.
"""

from __future__ import annotations

import concurrent.futures as cf
import io
import multiprocessing as mp
import os
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from sheetcheck.batch.html import asset_name, revision_overlay_name
from sheetcheck.batch.inputs import PhotoItem, list_photos
from sheetcheck.batch.store import Store
from sheetcheck.errors import InputFileError, SheetcheckError

#: Longest side of the thumbnails in index.html.
THUMB_PX = 320
#: Overlay resolution in batches (dots per inch of the sheet): enough to read every region.
BATCH_OVERLAY_DPI = 60.0


# ---------------------------------------------------------------------------------------------
# the worker side
# ---------------------------------------------------------------------------------------------

def _warm_worker() -> None:
    """Process initializer: import the reader and load the templates once per worker."""
    try:
        import cv2
        cv2.setNumThreads(1)  # one photo per core: the workers are the parallelism
    except Exception:  # pragma: no cover - cv2 is a dependency; a worker without it still runs
        pass
    try:
        import sheetcheck.check  # noqa: F401
        import sheetcheck.overlay  # noqa: F401
        import vision.pipeline  # noqa: F401
        from calibration.template import all_templates
        from scoring.registry import ENGINES, engine_for
        all_templates()
        for game in ENGINES:
            engine_for(game)
    except Exception:  # noqa: BLE001
        # a failing initializer breaks the whole pool: let each job record the real error
        pass


def thumbnail_jpeg(data: bytes, *, size: int = THUMB_PX) -> bytes | None:
    """A small JPEG of the photo (EXIF orientation applied), or None if it cannot be decoded."""
    from PIL import Image, ImageOps
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.draft("RGB", (size * 2, size * 2))  # JPEG: decode at reduced size, much faster
            im = ImageOps.exif_transpose(im).convert("RGB")
            im.thumbnail((size, size))
            buf = io.BytesIO()
            im.save(buf, "JPEG", quality=80)
            return buf.getvalue()
    except Exception:  # any undecodable photo: it is reported by the checker, not here
        return None


def rectified_jpeg(report, *, dpi: float) -> bytes | None:
    """The report's rectified sheet at ``dpi`` as a JPEG (None when the report has none).

    Kept in the report folder so that a corrected revision's overlay can be drawn on the photo
    later, without the photo.
    """
    from PIL import Image
    if report.rectified is None:
        return None
    t = report.template
    # the overlay's own size for this dpi (sheetcheck.overlay draws the sheet at this size)
    size = (int(round(t.width_mm * dpi / 25.4)), int(round(t.height_mm * dpi / 25.4)))
    im = Image.fromarray(np.ascontiguousarray(report.rectified)).convert("RGB")
    if im.size != size:
        im = im.resize(size, Image.Resampling.LANCZOS)
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=90)
    return buf.getvalue()


def check_job(name: str, data: bytes, template_id: str | None = None,
              overlay_dpi: float | None = BATCH_OVERLAY_DPI) -> dict:
    """Check one photo in a worker; never raises (errors become the result's ``error``)."""
    t0 = time.perf_counter()
    c0 = time.process_time()  # CPU of every thread of this worker: load-independent cost
    out: dict = {"timings": {}}
    try:
        from sheetcheck.check import check_photo
        from sheetcheck.overlay import overlay_png_bytes
        report = check_photo(data, template_id=template_id, filename=name)
        out["report"] = report.to_json()
        out["timings"] = dict(out["report"].get("timings", {}))
        t1 = time.perf_counter()
        if overlay_dpi:
            out["overlay_png"] = overlay_png_bytes(report, dpi=overlay_dpi)
            out["rectified_jpeg"] = rectified_jpeg(report, dpi=overlay_dpi)
        out["timings"]["overlay"] = time.perf_counter() - t1
    except SheetcheckError as e:
        out["error_code"], out["error"] = e.code, str(e)
    except MemoryError:
        out["error_code"], out["error"] = "out_of_memory", f"{name}: out of memory while checking it"
    except Exception as e:  # a bug must not stop a tournament's batch: record it with its trace
        out["error_code"] = "internal_error"
        out["error"] = (f"{type(e).__name__}: {e}\n"
                        + "".join(traceback.format_exception(e)[-4:]))
    out["thumb_jpeg"] = thumbnail_jpeg(data)
    out["timings"]["job"] = time.perf_counter() - t0
    out["timings"]["cpu"] = time.process_time() - c0
    return out


def record_from_result(item: PhotoItem, result: dict) -> dict:
    """The store row for one photo from its worker result."""
    rec = {"sha256": item.sha256, "file": item.name, "player": item.player,
           "table_name": item.table, "timings": result.get("timings"),
           "error_code": result.get("error_code"), "error": result.get("error")}
    rep = result.get("report")
    if rep is not None:
        rec.update({
            "template": rep["template"]["id"], "game": rep["template"]["game"],
            "level": rep["template"]["level"], "verdict": rep["verdict"],
            "score": rep["total"]["rules"], "claimed": rep["total"]["claimed"],
            "readings": {k: v["mark"] for k, v in rep["readings"].items()},
            "corrections": rep["corrections"], "findings": rep["findings"], "report": rep})
    else:
        rec["verdict"] = "ERROR"
    return rec


# ---------------------------------------------------------------------------------------------
# executors: a process pool here, or a Dask cluster
# ---------------------------------------------------------------------------------------------

class _PoolExecutor:
    def __init__(self, workers: int):
        self.workers = workers
        self.pool = self._new()

    def _new(self):
        # forkserver: workers start from a clean process (no inherited threads or sqlite handles)
        ctx = mp.get_context("forkserver")
        # imported once in the fork server, shared by every worker forked from it
        ctx.set_forkserver_preload(["sheetcheck.batch.runner", "sheetcheck.check", "vision.pipeline",
                                    "sheetcheck.overlay", "scoring.registry"])
        return cf.ProcessPoolExecutor(self.workers, mp_context=ctx, initializer=_warm_worker)

    def submit(self, *args):
        return self.pool.submit(check_job, *args)

    def wait_any(self, futures):
        return cf.wait(futures, return_when=cf.FIRST_COMPLETED)[0]

    def restart(self):
        self.pool.shutdown(wait=False, cancel_futures=True)
        self.pool = self._new()

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


class _DaskExecutor:
    def __init__(self, address):
        try:
            from distributed import Client
        except ImportError:
            raise InputFileError("--dask needs the dask distributed package.",
                                 hint="pip install 'dask[distributed]' (on the workers too).") from None
        try:
            # an address string, or a Client/LocalCluster object (tests, the server)
            self.client = address if hasattr(address, "submit") else Client(address, timeout=20)
        except (OSError, TimeoutError) as e:
            raise InputFileError(f"cannot reach the Dask scheduler at {address}: {e}",
                                 hint="Check the address (tcp://HOST:PORT) and that the "
                                      "scheduler is running.") from None
        self._own = not hasattr(address, "submit")
        self.workers = max(1, sum(self.client.nthreads().values()))

    def submit(self, *args):
        # pure=False: two equal photos are still two jobs (the store dedups by hash anyway)
        return self.client.submit(check_job, *args, pure=False, retries=1)

    def wait_any(self, futures):
        from distributed import wait
        return wait(list(futures), return_when="FIRST_COMPLETED").done

    def restart(self):  # pragma: no cover - a cluster heals itself (retries=1)
        pass

    def close(self):
        if self._own:
            self.client.close()


# ---------------------------------------------------------------------------------------------
# progress
# ---------------------------------------------------------------------------------------------

class Progress:
    """A one-line text progress bar with rate and ETA on a stream (stderr)."""

    def __init__(self, total: int, *, stream=None, enabled: bool = True, width: int = 28):
        self.total, self.width, self.enabled = total, width, enabled
        self.stream = stream or sys.stderr
        self.t0 = time.monotonic()
        self.last = 0.0
        # on a terminal redraw one line; in a log file write a line every few seconds
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self.every = 0.25 if self.tty else 5.0
        self.done = self.skipped = self.errors = 0

    def update(self, *, done: int, skipped: int, errors: int, force: bool = False) -> None:
        self.done, self.skipped, self.errors = done, skipped, errors
        now = time.monotonic()
        if not self.enabled or (not force and now - self.last < self.every):
            return
        self.last = now
        self.stream.write(("\r" + self.line(now) + "\x1b[K") if self.tty else self.line(now) + "\n")
        self.stream.flush()

    def line(self, now: float | None = None) -> str:
        now = time.monotonic() if now is None else now
        n = self.done + self.skipped
        frac = n / self.total if self.total else 1.0
        bar = "#" * int(frac * self.width) + "." * (self.width - int(frac * self.width))
        dt = now - self.t0
        rate = self.done / dt if dt > 0 else 0.0
        left = self.total - n
        eta = f"{_hms(left / rate)}" if rate > 0 else "--:--"
        return (f"[{bar}] {n}/{self.total}  {rate:.2f} sheets/s  ETA {eta}"
                f"  ({self.skipped} already done, {self.errors} errors)")

    def finish(self) -> None:
        if self.enabled:
            self.update(done=self.done, skipped=self.skipped, errors=self.errors, force=True)
            if self.tty:
                self.stream.write("\n")
            self.stream.flush()


def _hms(seconds: float) -> str:
    s = int(round(seconds))
    h, s = divmod(s, 3600)
    m, s = divmod(s, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


# ---------------------------------------------------------------------------------------------
# the batch
# ---------------------------------------------------------------------------------------------

@dataclass
class BatchSummary:
    total: int = 0            # photos found
    processed: int = 0        # checked in this run
    skipped: int = 0          # already in the store (or a duplicate of a photo in this batch)
    errors: int = 0           # of the processed
    verdicts: dict = field(default_factory=dict)
    seconds: float = 0.0
    out: Path | None = None

    @property
    def rate(self) -> float:
        return self.processed / self.seconds if self.seconds else 0.0


def _write_atomic(path: Path, data: bytes) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


def run_batch(source, out, *, manifest=None, workers: int | None = None, dask=None,
              template_id: str | None = None, overlay_dpi: float | None = BATCH_OVERLAY_DPI,
              progress: Callable[[int, int], None] | None = None, show_progress: bool = True,
              write_reports: bool = True, stream=None) -> BatchSummary:
    """Check every photo under ``source`` into the report folder ``out``.

    Parameters
    ----------
    source : str or Path
        A folder (searched recursively; zips inside are read) or a .zip.
    out : str or Path
        Report folder: results.sqlite, overlays/, thumbs/, results.csv/json, index.html.
    manifest : str or Path, optional
        CSV ``file,player[,table]``.
    workers : int, optional
        Worker processes (default: every core). Ignored with ``dask``.
    dask : str or distributed.Client, optional
        Run on a Dask cluster (``tcp://HOST:PORT``) instead of local processes.
    progress : callable(done, total), optional
        Called after each photo (the server's job status).
    show_progress : bool
        Draw the text progress bar on ``stream`` (stderr).

    Returns
    -------
    BatchSummary
    """
    t0 = time.perf_counter()
    out = Path(out)
    sources = list_photos(source, manifest=manifest)
    for sub in ("overlays", "thumbs", "rectified"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    store = Store.in_folder(out)
    summary = BatchSummary(total=len(sources), out=out)
    bar = Progress(len(sources), stream=stream, enabled=show_progress)
    done_hashes = store.done_hashes()
    seen: set[str] = set()

    def finished(item: PhotoItem, result: dict) -> None:
        rec = record_from_result(item, result)
        # the pictures first, the row last: a row always has its pictures
        if result.get("overlay_png"):
            _write_atomic(out / "overlays" / f"{asset_name(item.sha256)}.png", result["overlay_png"])
        if result.get("thumb_jpeg"):
            _write_atomic(out / "thumbs" / f"{asset_name(item.sha256)}.jpg", result["thumb_jpeg"])
        if result.get("rectified_jpeg"):
            _write_atomic(out / "rectified" / f"{asset_name(item.sha256)}.jpg",
                          result["rectified_jpeg"])
        store.add(rec)
        summary.processed += 1
        summary.errors += rec["verdict"] == "ERROR"
        summary.verdicts[rec["verdict"]] = summary.verdicts.get(rec["verdict"], 0) + 1
        tick()

    def tick() -> None:
        bar.update(done=summary.processed, skipped=summary.skipped, errors=summary.errors)
        if progress is not None:
            progress(summary.processed + summary.skipped, summary.total)

    if dask is not None:
        ex = _DaskExecutor(dask)
    else:
        ex = _PoolExecutor(max(1, workers or os.cpu_count() or 1))
    # a few jobs ahead per worker keeps every core busy without holding every photo in memory
    max_inflight = 2 * ex.workers + 1
    pending: dict = {}
    crashes: dict[str, int] = {}
    it = iter(sources)
    exhausted = False
    try:
        while True:
            while not exhausted and len(pending) < max_inflight:
                src = next(it, None)
                if src is None:
                    exhausted = True
                    break
                item = src.load()
                if item.sha256 in done_hashes or item.sha256 in seen:
                    summary.skipped += 1
                    tick()
                    continue
                seen.add(item.sha256)
                if item.data is None:
                    finished(item, {"error_code": item.error_code, "error": item.error})
                    continue
                pending[ex.submit(item.name, item.data, template_id, overlay_dpi)] = item
            if not pending:
                break
            for fut in ex.wait_any(list(pending)):
                item = pending.pop(fut)
                try:
                    result = fut.result()
                except cf.process.BrokenProcessPool:
                    # a worker died (crash, OOM kill): retry its photos once on a fresh pool,
                    # then record the photo that keeps killing workers as an error
                    crashes[item.sha256] = crashes.get(item.sha256, 0) + 1
                    if crashes[item.sha256] >= 2:
                        finished(item, {"error_code": "worker_crashed",
                                        "error": f"{item.name}: the worker process died twice "
                                                 "while checking this photo"})
                    else:
                        ex.restart()
                        retry = list(pending.values()) + [item]
                        pending.clear()
                        for it_ in retry:
                            pending[ex.submit(it_.name, it_.data, template_id, overlay_dpi)] = it_
                        break
                    continue
                except Exception as e:  # dask: a job lost with its worker, a cancelled future
                    result = {"error_code": "worker_failed", "error": f"{type(e).__name__}: {e}"}
                finished(item, result)
    finally:
        ex.close()
        bar.finish()
        summary.seconds = time.perf_counter() - t0
        if write_reports:
            from sheetcheck.batch.export import write_exports
            from sheetcheck.batch.html import write_index
            rows = store.rows()
            write_exports(rows, out)
            write_index(rows, out)
        store.close()
    return summary


@dataclass(frozen=True)
class FixOutcome:
    """What a person's correction of a stored result did.

    ``before`` and ``after`` are store rows (the revision corrected and the new one; equal when
    nothing changed), ``added`` the corrections this fix made (``{region, read, mark, was}``:
    ``was`` is the mark scored before), ``stored`` False when every correction was already
    applied (no revision is added for a no-op).
    """

    before: dict
    after: dict
    added: tuple[dict, ...]
    stored: bool

    @property
    def report(self) -> dict:
        return self.after["report"]

    @property
    def revision(self) -> int:
        return int(self.after["revision"])


def fix_result(out, photo: str, fixes, *, by: str | None = None,
               write_reports: bool = True) -> FixOutcome:
    """Re-score a stored result with a person's corrections, as a new revision (append-only).

    Everything is checked before anything is written: an unknown folder, photo, region or mark
    stores nothing and rewrites nothing.

    Parameters
    ----------
    out : str or Path
        The batch's report folder (it must already hold a batch's results.sqlite).
    photo : str
        The photo's file name as stored (``results.csv``'s ``file``), its sha256 or a prefix of
        it (at least 6 hex digits).
    fixes : mapping of region -> mark, or iterable of "REGION=MARK"
        Added to the corrections already applied in earlier revisions (a later one wins).
    by : str, optional
        Who made the correction (recorded with each correction it adds).
    write_reports : bool
        Rewrite results.csv, results.json and index.html after storing.

    Returns
    -------
    FixOutcome

    Raises
    ------
    NotAReportFolderError
        when ``out`` is not a batch's report folder.
    PhotoNotInReportError
        when no stored photo (or several) matches ``photo``, or it could not be checked.
    StateError
        for invalid corrections (unknown region, a mark the region cannot carry).
    ReportChangedError
        when someone stored another revision of the photo meanwhile.
    """
    from calibration.template import get_template
    from sheetcheck.batch.store import PhotoNotInReportError
    from sheetcheck.errors import StateError
    from sheetcheck.report import build_report, parse_fixes, reads_from_json

    with Store.open_report(out) as store:
        sha = store.find(photo)
        row = store.latest(sha)
        rep = row["report"]
        if rep is None:
            raise PhotoNotInReportError(
                f"no checked result for {row['file']!r} in {out}: the photo could not be checked "
                f"({row.get('error_code')}: {(row.get('error') or '').splitlines()[0][:200]}), so "
                "there are no readings to correct.",
                hint="Fix the photo (or take a new one) and run the batch on it again.")
        t = get_template(rep["template"]["id"])
        if t.version != rep["template"]["version"]:
            raise InputFileError(
                f"{row['file']!r} was checked with template {t.id} v{rep['template']['version']}, "
                f"now v{t.version}: its stored readings may not fit.",
                hint="Check the photo again (a new batch folder) before correcting it.")
        if isinstance(fixes, dict):
            new = dict(fixes)
        else:
            fixes = list(fixes)
            if not fixes:
                raise StateError("no corrections given.", hint="Give one or more REGION=MARK.")
            try:
                new = parse_fixes(fixes, t)
            except StateError as e:
                # the same problems, with this command's words (parse_fixes speaks of --fix)
                raise StateError(f"{row['file']}: {e.message}",
                                 hint=f"Give REGION=MARK with a region id of {t.id} as "
                                      "`sheetcheck batch show REPORT_DIR PHOTO` lists them, and "
                                      "one of the marks that region allows.") from None
        prev = {c["region"]: c["mark"] for c in rep["corrections"]}
        merged = {**prev, **new}
        if merged == prev:
            return FixOutcome(row, row, (), False)
        rect = _load_rectified(Path(out), sha)
        report = build_report(t, reads_from_json(rep), fixes=merged, photo=rep.get("photo"),
                              reader=rep.get("reader"), timings=rep.get("timings"),
                              rectified=rect,
                              rectified_dpi=BATCH_OVERLAY_DPI if rect is not None else None)
        doc = report.to_json()
        now = time.time()
        rev = int(row["revision"]) + 1
        # the store's corrections also say when, in which revision and by whom each was made
        log = {c["region"]: c for c in (row.get("corrections") or [])}
        added = []
        for c in doc["corrections"]:
            if c["region"] in new and prev.get(c["region"]) != c["mark"]:
                entry = {**c, "revision": rev, "by": by, "at": now}
                added.append({**c, "was": rep["readings"][c["region"]]["mark"]
                              if c["region"] in rep["readings"] else None})
            else:
                entry = {**log.get(c["region"], {}), **c}
            log[c["region"]] = entry
        item = PhotoItem(row["file"], None, sha, row.get("player"), row.get("table_name"))
        rec = record_from_result(item, {"report": doc, "timings": row.get("timings")})
        rec["corrections"] = [log[c["region"]] for c in doc["corrections"]]
        rev = store.add_revision(sha, rec, base_revision=int(row["revision"]))
        if rect is not None:
            # after the row: a revision whose picture is missing falls back to revision 0's
            from sheetcheck.overlay import overlay_png_bytes
            _write_atomic(Path(out) / "overlays" / revision_overlay_name(sha, rev),
                          overlay_png_bytes(report, dpi=BATCH_OVERLAY_DPI))
        after = store.latest(sha)
        if write_reports:
            _write_reports(store, out)
    return FixOutcome(row, after, tuple(added), True)


def _load_rectified(out: Path, sha256: str):
    """The rectified sheet the batch kept for a photo, (H, W, 3) uint8, or None."""
    path = out / "rectified" / f"{asset_name(sha256)}.jpg"
    if not path.is_file():
        return None  # a report folder made before rectified sheets were kept
    from PIL import Image
    try:
        with Image.open(path) as im:
            return np.asarray(im.convert("RGB"))
    except OSError:
        return None  # a damaged picture only costs the corrected overlay, never the fix


def _write_reports(store: Store, out) -> None:
    from sheetcheck.batch.export import write_exports
    from sheetcheck.batch.html import write_index
    latest = store.rows()
    write_exports(latest, out)
    write_index(latest, out)


def correct_result(out, photo: str, fixes, *, by: str | None = None,
                   write_reports: bool = True) -> dict:
    """Re-score a stored result with corrections (see :func:`fix_result`); the new report.

    Returns
    -------
    dict
        The latest revision's ``sheetcheck.report/1`` document.
    """
    return fix_result(out, photo, fixes, by=by, write_reports=write_reports).report
