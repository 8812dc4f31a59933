"""The page in a real browser: Debian's Chromium driven by Playwright against a real server.

Uploads a sample photo, sees the right total, taps a region to correct it, sees the new total,
reloads the shared link and sees the stored audit.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_photos"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

if CHROMIUM is None:
    if os.environ.get("CI"):
        pytest.fail("Chromium is not installed: scripts/setup.sh --browser installs Debian's chromium",
                    pytrace=False)
    pytest.skip("Chromium is not installed (scripts/setup.sh --browser installs it)",
                allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    port = _free_port()
    env = dict(os.environ, SHEETCHECK_DB=str(tmp / "audits.sqlite"), SHEETCHECK_WORKERS="1",
               SHEETCHECK_DATA_DIR=str(tmp / "data"))
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "server:app", "--host", "127.0.0.1",
                             "--port", str(port), "--log-level", "warning"],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(base + "/api/templates", timeout=2).read()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode(errors="replace") if proc.stdout else ""
                proc.kill()
                pytest.fail(f"server did not start:\n{out}")
            time.sleep(0.3)
    yield base
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync"])
        yield b
        b.close()


#: The page test needs a photo the reader reads right (tests/test_check_golden.py checks the
#: reading of every sample; this test checks the page): an easy, legally played Crypts sheet.
PAGE_SAMPLE = "crypts-2-easy-s4"


def _pick_sample():
    truth_path = SAMPLES / f"{PAGE_SAMPLE}.truth.json"
    photo = SAMPLES / f"{PAGE_SAMPLE}.jpg"
    assert truth_path.exists() and photo.exists(), f"sample {PAGE_SAMPLE} is missing"
    return photo, json.loads(truth_path.read_text())


def _a_correction_that_changes_the_total(truth):
    """A (region, mark) whose correction changes the rules total, found with the engine."""
    from calibration.template import get_template
    from scoring.registry import engine_for

    t = get_template(truth["template"])
    engine = engine_for(t.game)
    marks = dict(truth["marks"])
    base = engine.score(engine.state_from_marks(t, marks)).total
    for region in t.readable_regions():
        if region.kind != "symbol":
            continue
        for mark in region.marks:
            if mark in ("empty", "crossed") or mark == marks.get(region.id):
                continue
            trial = dict(marks, **{region.id: mark})
            try:
                total = engine.score(engine.state_from_marks(t, trial)).total
            except Exception:
                continue
            if total != base:
                return base, region.id, mark, total
    pytest.fail("no single correction changes the total of this sample")


def test_upload_correct_and_share(server, browser):
    photo, truth = _pick_sample()
    expected, region_id, mark, new_total = _a_correction_that_changes_the_total(truth)

    page = browser.new_page(viewport={"width": 390, "height": 844}, device_scale_factor=2,
                            is_mobile=True, has_touch=True)
    page.goto(server + "/")
    page.set_input_files("#photo-file", str(photo))
    page.wait_for_selector("#result:not([hidden])", timeout=60_000)
    assert page.inner_text("#total-rules").strip() == str(expected)
    assert page.inner_text("#verdict").strip() in {"OK", "DISCREPANCY", "NEEDS REVIEW"}
    shared = page.url
    assert "/a/" in shared

    page.wait_for_selector(f'#hotspots polygon[data-region="{region_id}"]', state="attached")
    page.dispatch_event(f'#hotspots polygon[data-region="{region_id}"]', "click")
    page.wait_for_selector("#fix-dialog[open]")
    page.click(f'#fix-marks button[data-mark="{mark}"]')
    page.wait_for_function(
        f"document.querySelector('#total-rules').textContent.trim() === '{new_total}'",
        timeout=60_000)
    assert "Revision 2" in page.inner_text("#revision-info")

    page.screenshot(path=str(Path(os.environ.get("SHEETCHECK_SCREENSHOT_DIR", "/tmp")) / "sheetcheck-e2e.png"),
                    full_page=True)

    other = browser.new_page(viewport={"width": 390, "height": 844})
    other.goto(shared)
    other.wait_for_selector("#result:not([hidden])", timeout=30_000)
    assert other.inner_text("#total-rules").strip() == str(new_total)
    assert "Revision 2" in other.inner_text("#revision-info")
