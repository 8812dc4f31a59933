"""The functions the web service runs, in worker processes (all picklable, top-level).

They are the same library calls the command line makes; server.py only moves bytes and JSON.
"""

from __future__ import annotations

import io
import json
import re
import secrets
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from sheetcheck.errors import InputFileError, SheetcheckError


def list_templates() -> list[dict]:
    from calibration.template import all_templates, template_summary
    return [template_summary(t) for t in all_templates()]


def sheet_pdf(template_id: str, markers: bool = True) -> bytes:
    """A blank sheet as PDF bytes (true size, 200 dpi raster)."""
    import tempfile
    from calibration.render import save_pdf
    from calibration.template import get_template

    t = get_template(template_id)
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / f"{t.id}.pdf"
        save_pdf(t, path, dpi=200, markers=markers)
        return path.read_bytes()


def regions_document(template_id: str, dpi: float) -> dict:
    from calibration.render import regions_json, render_sheet
    from calibration.template import get_template

    return regions_json(render_sheet(get_template(template_id), dpi=dpi, markers=True))


def score_document(doc: dict) -> dict:
    """Score and audit a hand-typed state document."""
    from scoring.registry import engine_for
    from sheetcheck.errors import StateError

    if not isinstance(doc, dict) or not isinstance(doc.get("game"), str):
        raise StateError("a state must be a JSON object with a \"game\" field.",
                         hint="See docs/STATE_JSON.md for the format.")
    engine = engine_for(doc["game"])
    return engine.audit(engine.state_from_json(doc)).to_json()


def check_bytes(data: bytes, template_id: str | None, corrections: dict[str, str],
                filename: str | None) -> tuple[dict, bytes]:
    """Check one photo: the report JSON and the overlay PNG bytes.

    The report JSON gains ``overlay``: the picture's size and where the sheet sits in it
    (``sheet_box`` = x, y, w, h px), so a page can map region outlines onto the picture.
    """
    from sheetcheck.check import check_photo
    from sheetcheck.overlay import DEFAULT_DPI, draw_overlay

    report = check_photo(data, template_id=template_id, corrections=corrections,
                         filename=filename)
    dpi = float(report.rectified_dpi or DEFAULT_DPI)
    picture = draw_overlay(report, dpi=dpi)
    t = report.template
    doc = report.to_json()
    doc["overlay"] = {"size": [picture.width, picture.height], "dpi": dpi,
                      "sheet_box": [0, 0, int(round(t.width_mm * dpi / 25.4)),
                                    int(round(t.height_mm * dpi / 25.4))]}
    buf = io.BytesIO()
    picture.save(buf, "PNG", compress_level=6)
    return doc, buf.getvalue()


# --------------------------------------------------------------------------------------------
# batch jobs: a thread per job running the batch runner in its own report folder
# --------------------------------------------------------------------------------------------

_JOB_ID = re.compile(r"^[0-9a-f]{16}$")


def _job_dir(data_dir: Path, job_id: str) -> Path:
    if not _JOB_ID.match(job_id):
        raise InputFileError(f"no batch job {job_id!r}.", hint="Job ids are 16 hex digits.")
    return data_dir / "batches" / job_id


def start_batch_job(zip_bytes: bytes, data_dir: Path, jobs: dict, lock: threading.Lock) -> dict:
    """Save the zip, start the batch in a background thread, return the job record."""
    import zipfile

    if not zipfile.is_zipfile(io.BytesIO(zip_bytes)):
        raise InputFileError("the batch upload is not a zip file.",
                             hint="Zip the photos (folders inside are fine) and upload the .zip.")
    job_id = secrets.token_hex(8)
    folder = _job_dir(data_dir, job_id)
    folder.mkdir(parents=True, exist_ok=False)
    src = folder / "upload.zip"
    src.write_bytes(zip_bytes)
    job = {"id": job_id, "status": "running", "progress": {"done": 0, "total": None},
           "started_at": time.time()}
    with lock:
        jobs[job_id] = job

    def progress(done: int, total: int) -> None:
        with lock:
            job["progress"] = {"done": done, "total": total}

    def work() -> None:
        from sheetcheck.batch.runner import run_batch
        try:
            run_batch(src, folder / "report", progress=progress, show_progress=False)
            status, error = "done", None
        except SheetcheckError as e:
            status, error = "failed", e.to_dict()
        except Exception as e:  # a bug: record it on the job rather than lose it
            status, error = "failed", {"code": "internal_error",
                                       "message": f"{type(e).__name__}: {e}"}
            traceback.print_exc()
        with lock:
            job["status"], job["error"] = status, error
        (folder / "job.json").write_text(json.dumps(job), encoding="utf-8")

    threading.Thread(target=work, name=f"batch-{job_id}", daemon=True).start()
    return job


def batch_job(job_id: str, jobs: dict, data_dir: Path) -> dict:
    if job_id in jobs:
        return jobs[job_id]
    record = _job_dir(data_dir, job_id) / "job.json"
    if record.exists():  # a job finished before this server restarted
        return json.loads(record.read_text(encoding="utf-8"))
    raise InputFileError(f"no batch job {job_id!r}.", hint="Check the job id.")


def batch_file(job_id: str, name: str, jobs: dict, data_dir: Path) -> Path:
    job = batch_job(job_id, jobs, data_dir)
    if job["status"] != "done":
        raise InputFileError(f"batch job {job_id} is {job['status']}, not done.",
                             hint="Poll the job until its status is done.")
    root = (_job_dir(data_dir, job_id) / "report").resolve()
    path = (root / name).resolve()
    if root not in path.parents or not path.is_file():
        raise InputFileError(f"batch job {job_id} has no report file {name!r}.")
    return path
