"""sheetcheck's web service (FastAPI): thin routes over the functions the command line uses.

Start it with ``sheetcheck serve`` (or ``uvicorn server:app``). Settings come from environment
variables (``SHEETCHECK_DB``, ``SHEETCHECK_MAX_UPLOAD_MB``, ``SHEETCHECK_API_TOKEN``,
``SHEETCHECK_WORKERS``, ``SHEETCHECK_DATA_DIR``); see docs/API.md.

CPU-bound work (reading photos, rendering PDFs) runs in a process pool, never on the event loop,
so one slow photo does not stall other requests. Every error is ``{code, message}`` with a 4xx
status (5xx only for a bug).
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import secrets
import threading
from concurrent.futures import ProcessPoolExecutor
from contextlib import asynccontextmanager
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, FastAPI, File, Form, Header, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from pydantic_settings import BaseSettings, SettingsConfigDict

from sheetcheck import service
from sheetcheck.audits import AuditStore
from sheetcheck.errors import SheetcheckError

WEB_DIR = Path(__file__).resolve().parent / "sheetcheck" / "web"


class Settings(BaseSettings):
    """Service settings, from ``SHEETCHECK_*`` environment variables."""

    model_config = SettingsConfigDict(env_prefix="SHEETCHECK_")

    db: str = "sheetcheck-audits.sqlite"          # a file path (SQLite) or a SQLAlchemy URL
    max_upload_mb: float = 25.0
    api_token: str | None = None                   # when set, writes that change audits need it
    workers: int = max(1, min(4, os.cpu_count() or 1))
    data_dir: str = "sheetcheck-data"              # batch jobs' report folders


class ApiError(SheetcheckError):
    """Errors of the HTTP layer itself (bad request shape, token, size)."""


class UploadTooLargeError(ApiError):
    code = "upload_too_large"
    http_status = 413


class UnauthorizedError(ApiError):
    code = "unauthorized"
    http_status = 401


class BadRequestError(ApiError):
    code = "bad_request"
    http_status = 400


# --------------------------------------------------------------------------------------------
# models (requests and responses kept apart)
# --------------------------------------------------------------------------------------------

class ErrorOut(BaseModel):
    code: str
    message: str


class TemplateOut(BaseModel):
    id: str
    game: str
    level: int | None
    version: str
    title: str


class CorrectionsIn(BaseModel):
    corrections: dict[str, str] = Field(description="{region_id: mark} replacing the reader's marks")
    note: str | None = None


class AuditOut(BaseModel):
    id: str
    revision: int
    url: str
    overlay_url: str | None
    photo_url: str
    report: dict[str, Any]
    corrections: dict[str, str]
    revisions: int


class BatchOut(BaseModel):
    id: str
    status: str
    url: str
    progress: dict[str, Any] = {}
    report_url: str | None = None
    error: dict[str, Any] | None = None


# --------------------------------------------------------------------------------------------
# dependencies
# --------------------------------------------------------------------------------------------

class Runtime:
    """What one app instance owns: settings, the store, the process pool, batch jobs."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.store = AuditStore(settings.db)
        # forkserver, not fork: forking a process that already runs threads (the event loop's
        # thread pool) can leave a child holding a lock forever; workers start from a clean
        # single-threaded server process that has imported the heavy modules once.
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["sheetcheck.service", "vision.pipeline", "sheetcheck.check"])
        self.pool = ProcessPoolExecutor(max_workers=settings.workers, mp_context=ctx)
        self.batches: dict[str, dict[str, Any]] = {}
        self.batch_lock = threading.Lock()

    async def run(self, fn, *args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.pool, fn, *args)

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)  # workers exit with the server


def get_runtime(request: Request) -> Runtime:
    return request.app.state.runtime


RuntimeDep = Annotated[Runtime, Depends(get_runtime)]


def require_token(runtime: RuntimeDep, authorization: Annotated[str | None, Header()] = None,
                  x_api_token: Annotated[str | None, Header()] = None) -> None:
    """Writes that change stored audits need the API token when one is configured."""
    expected = runtime.settings.api_token
    if not expected:
        return
    given = x_api_token
    if authorization and authorization.lower().startswith("bearer "):
        given = authorization[7:].strip()
    if not given or not secrets.compare_digest(given, expected):
        raise UnauthorizedError("this server requires an API token to change stored audits.",
                                hint="Send it as 'Authorization: Bearer TOKEN' or 'X-API-Token'.")


TokenDep = Annotated[None, Depends(require_token)]


async def read_upload(upload: UploadFile, runtime: Runtime) -> bytes:
    """The upload's bytes, refusing more than the configured limit without reading it all."""
    limit = int(runtime.settings.max_upload_mb * 1024 * 1024)
    chunks, size = [], 0
    while True:
        chunk = await upload.read(1 << 20)
        if not chunk:
            break
        size += len(chunk)
        if size > limit:
            raise UploadTooLargeError(
                f"the upload is larger than this server's limit of {runtime.settings.max_upload_mb:g} MB.",
                hint="Send a smaller photo (a phone photo is usually 2-6 MB).")
        chunks.append(chunk)
    if size == 0:
        raise BadRequestError("the upload is empty.", hint="Attach the photo file.")
    return b"".join(chunks)


def parse_corrections(text: str | None) -> dict[str, str]:
    if not text:
        return {}
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise BadRequestError(f"corrections are not valid JSON ({e.msg}).",
                              hint='Send them as {"region_id": "mark"}.') from None
    if not isinstance(doc, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in doc.items()):
        raise BadRequestError("corrections must be a JSON object of region id to mark.",
                              hint='For example {"cell.r1.c1": "red"}.')
    return doc


def audit_out(rev, count: int) -> AuditOut:
    base = f"/api/audits/{rev.audit_id}"
    return AuditOut(id=rev.audit_id, revision=rev.revision, url=f"/a/{rev.audit_id}",
                    overlay_url=f"{base}/overlay.png?revision={rev.revision}" if rev.has_overlay else None,
                    photo_url=f"{base}/photo", report=rev.report, corrections=rev.corrections,
                    revisions=count)


# --------------------------------------------------------------------------------------------
# routers, one per resource
# --------------------------------------------------------------------------------------------

templates_router = APIRouter(prefix="/api/templates", tags=["templates"])


@templates_router.get("", response_model=list[TemplateOut])
def list_templates():
    """The sheets this server knows."""
    return service.list_templates()


@templates_router.get("/{template_id}/sheet.pdf", response_class=Response,
                      responses={200: {"content": {"application/pdf": {}}}, 404: {"model": ErrorOut}})
async def sheet_pdf(template_id: str, runtime: RuntimeDep, markers: bool = True):
    """A blank printable sheet (true size)."""
    pdf = await runtime.run(service.sheet_pdf, template_id, markers)
    return Response(pdf, media_type="application/pdf",
                    headers={"Content-Disposition": f'inline; filename="{template_id}.pdf"'})


@templates_router.get("/{template_id}/regions.json")
async def template_regions(template_id: str, runtime: RuntimeDep, dpi: float = 50.0):
    """The regions.json document (docs/REGIONS_JSON.md) for the sheet rendered at ``dpi``."""
    if not 10 <= dpi <= 300:
        raise BadRequestError(f"dpi must be between 10 and 300, got {dpi:g}.")
    return await runtime.run(service.regions_document, template_id, dpi)


score_router = APIRouter(prefix="/api/score", tags=["score"])


@score_router.post("")
async def score_state(state: dict[str, Any], runtime: RuntimeDep):
    """Score and audit a state typed by hand (docs/STATE_JSON.md)."""
    return await runtime.run(service.score_document, state)


check_router = APIRouter(prefix="/api/check", tags=["check"])


@check_router.post("", response_model=AuditOut, status_code=201,
                   responses={413: {"model": ErrorOut}, 415: {"model": ErrorOut},
                              422: {"model": ErrorOut}})
async def check(runtime: RuntimeDep, photo: UploadFile = File(...),
                template: Annotated[str | None, Form()] = None,
                corrections: Annotated[str | None, Form()] = None):
    """Check one photo; the audit is stored (with the photo) before the answer is sent."""
    data = await read_upload(photo, runtime)
    fixes = parse_corrections(corrections)
    report, overlay = await runtime.run(service.check_bytes, data, template or None, fixes,
                                        photo.filename)
    rev = await asyncio.to_thread(runtime.store.create, photo=data, filename=photo.filename,
                                  template=(report.get("template") or {}).get("id"), report=report,
                                  overlay_png=overlay)
    return audit_out(rev, 1)


audits_router = APIRouter(prefix="/api/audits", tags=["audits"])


@audits_router.get("/{audit_id}", response_model=AuditOut)
def get_audit(audit_id: str, runtime: RuntimeDep, revision: int | None = None):
    """A stored audit (its latest revision, or the one asked for)."""
    revs = runtime.store.revisions(audit_id)
    rev = revs[-1]
    if revision is not None:
        match = [r for r in revs if r.revision == revision]
        if not match:
            raise BadRequestError(f"audit {audit_id} has no revision {revision} (it has {len(revs)}).")
        rev = match[0]
    return audit_out(rev, len(revs))


@audits_router.get("/{audit_id}/revisions")
def get_revisions(audit_id: str, runtime: RuntimeDep):
    return [{"revision": r.revision, "created_at": r.created_at, "corrections": r.corrections,
             "verdict": r.report.get("verdict"), "total": (r.report.get("rules") or {}).get("total")}
            for r in runtime.store.revisions(audit_id)]


@audits_router.post("/{audit_id}/corrections", response_model=AuditOut, status_code=201)
async def correct_audit(audit_id: str, body: CorrectionsIn, runtime: RuntimeDep, _auth: TokenDep):
    """Re-score with a person's corrections; stored as a new revision, never overwriting."""
    revs = await asyncio.to_thread(runtime.store.revisions, audit_id)
    photo = await asyncio.to_thread(runtime.store.photo, audit_id)
    merged = {**revs[-1].corrections, **body.corrections}
    template = (revs[0].report.get("template") or {}).get("id")
    report, overlay = await runtime.run(service.check_bytes, photo, template, merged, None)
    rev = await asyncio.to_thread(runtime.store.add_revision, audit_id, corrections=merged,
                                  report=report, overlay_png=overlay, note=body.note)
    return audit_out(rev, len(revs) + 1)


@audits_router.get("/{audit_id}/overlay.png", response_class=Response,
                   responses={200: {"content": {"image/png": {}}}})
def get_overlay(audit_id: str, runtime: RuntimeDep, revision: int | None = None):
    png = runtime.store.overlay(audit_id, revision)
    if png is None:
        raise BadRequestError(f"audit {audit_id} has no overlay picture.")
    return Response(png, media_type="image/png", headers={"Cache-Control": "public, max-age=31536000"})


@audits_router.get("/{audit_id}/photo", response_class=Response)
def get_photo(audit_id: str, runtime: RuntimeDep):
    return Response(runtime.store.photo(audit_id), media_type="application/octet-stream")


batches_router = APIRouter(prefix="/api/batches", tags=["batches"])


@batches_router.post("", response_model=BatchOut, status_code=202)
async def create_batch(runtime: RuntimeDep, _auth: TokenDep, archive: UploadFile = File(...)):
    """Start a batch over a zip of photos; poll the returned job for its status and report."""
    data = await read_upload(archive, runtime)
    job = service.start_batch_job(data, Path(runtime.settings.data_dir), runtime.batches,
                                  runtime.batch_lock)
    return batch_out(job)


def batch_out(job: dict) -> BatchOut:
    done = job["status"] == "done"
    return BatchOut(id=job["id"], status=job["status"], url=f"/api/batches/{job['id']}",
                    progress=job.get("progress", {}),
                    report_url=f"/api/batches/{job['id']}/report/index.html" if done else None,
                    error=job.get("error"))


@batches_router.get("/{job_id}", response_model=BatchOut)
def get_batch(job_id: str, runtime: RuntimeDep):
    return batch_out(service.batch_job(job_id, runtime.batches, Path(runtime.settings.data_dir)))


@batches_router.get("/{job_id}/report/{name}")
def get_batch_file(job_id: str, name: str, runtime: RuntimeDep):
    path = service.batch_file(job_id, name, runtime.batches, Path(runtime.settings.data_dir))
    return FileResponse(path)


# --------------------------------------------------------------------------------------------
# the app
# --------------------------------------------------------------------------------------------

def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.runtime = Runtime(settings)
        try:
            yield
        finally:
            app.state.runtime.close()

    app = FastAPI(title="sheetcheck", version="1",
                  description="Check photographed roll-and-write score sheets. Errors are "
                              "{code, message} with a 4xx status.", lifespan=lifespan)

    @app.exception_handler(SheetcheckError)
    async def sheetcheck_error(_request: Request, exc: SheetcheckError):
        return JSONResponse(exc.to_dict(), status_code=exc.http_status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, exc: StarletteHTTPException):
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse({"code": code, "message": str(exc.detail)}, status_code=exc.status_code,
                            headers=getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, exc: RequestValidationError):
        parts = []
        for err in exc.errors()[:5]:
            loc = ".".join(str(p) for p in err.get("loc", ()))
            parts.append(f"{loc}: {err.get('msg')}")
        return JSONResponse({"code": "invalid_request", "message": "; ".join(parts)},
                            status_code=422)

    for router in (templates_router, score_router, check_router, audits_router, batches_router):
        app.include_router(router)

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(WEB_DIR / "index.html")

    @app.get("/a/{audit_id}", include_in_schema=False)
    def shared_audit(audit_id: str):
        return FileResponse(WEB_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=WEB_DIR), name="static")
    return app


@lru_cache(maxsize=1)
def _default_app() -> FastAPI:
    return create_app()


def __getattr__(name: str):  # `uvicorn server:app` builds the app on first use
    if name == "app":
        return _default_app()
    raise AttributeError(name)
