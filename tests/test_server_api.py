"""HTTP API tests: every route and every bad input, through FastAPI's TestClient."""

import io
import json
import re
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from server import Settings, create_app

EXAMPLES = Path(__file__).resolve().parents[1] / "docs" / "examples"


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server")
    app = create_app(Settings(db=str(tmp / "audits.sqlite"), max_upload_mb=2, workers=1,
                              data_dir=str(tmp / "data")))
    with TestClient(app) as c:
        yield c


@pytest.fixture(scope="module")
def token_client(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("server-token")
    app = create_app(Settings(db=str(tmp / "audits.sqlite"), api_token="s3cret", workers=1,
                              data_dir=str(tmp / "data")))
    with TestClient(app) as c:
        yield c


def assert_error(resp, status, code):
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert set(body) == {"code", "message"}
    assert body["code"] == code
    assert body["message"]
    return body


def test_templates_list(client):
    resp = client.get("/api/templates")
    assert resp.status_code == 200
    ids = {t["id"] for t in resp.json()}
    assert {"crypts-1", "crypts-2", "crypts-3", "reefs-1", "reefs-2", "reefs-3"} <= ids


def test_sheet_pdf_is_a_true_size_pdf(client):
    resp = client.get("/api/templates/crypts-1/sheet.pdf")
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/pdf"
    assert resp.content.startswith(b"%PDF")
    # A4 landscape media box, in points
    box = re.search(rb"MediaBox\s*\[\s*0 0 ([0-9.]+) ([0-9.]+)\s*\]", resp.content)
    assert box is not None
    assert (float(box.group(1)), float(box.group(2))) == pytest.approx((841.89, 595.28), abs=0.05)


def test_unknown_template_is_404(client):
    body = assert_error(client.get("/api/templates/nonsense/sheet.pdf"), 404, "unknown_template")
    assert "crypts-1" in body["message"]  # names the valid ones


def test_regions_document(client):
    resp = client.get("/api/templates/reefs-2/regions.json?dpi=40")
    assert resp.status_code == 200
    doc = resp.json()
    assert doc["template_id"] == "reefs-2" and doc["dpi"] == 40
    assert any(r["id"].startswith("whirlpool.") for r in doc["regions"])
    assert_error(client.get("/api/templates/reefs-2/regions.json?dpi=5000"), 400, "bad_request")


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_score_examples(client, example):
    doc = json.loads((EXAMPLES / example).read_text())
    resp = client.post("/api/score", json=doc)
    assert resp.status_code == 200, resp.text
    audit = resp.json()
    assert audit["rules"]["total"] == sum(l["points"] for l in audit["rules"]["lines"])
    assert audit["difference"] == audit["claimed"]["total"] - audit["rules"]["total"]


def test_score_malformed_state(client):
    assert_error(client.post("/api/score", json={"no": "game"}), 422, "invalid_state")
    assert_error(client.post("/api/score", json={"game": "chess"}), 422, "invalid_state")
    resp = client.post("/api/score", content=b"{not json", headers={"content-type": "application/json"})
    assert_error(resp, 422, "invalid_request")


def test_check_rejects_non_image(client):
    resp = client.post("/api/check", files={"photo": ("notes.txt", b"hello, not a photo", "text/plain")})
    assert_error(resp, 415, "not_an_image")


def test_check_rejects_too_large_upload(client):
    big = b"\xff\xd8\xff" + b"\0" * (3 * 1024 * 1024)
    assert_error(client.post("/api/check", files={"photo": ("big.jpg", big, "image/jpeg")}),
                 413, "upload_too_large")


def test_check_rejects_empty_and_missing_upload(client):
    assert_error(client.post("/api/check", files={"photo": ("e.jpg", b"", "image/jpeg")}), 400, "bad_request")
    assert_error(client.post("/api/check"), 422, "invalid_request")


def test_check_rejects_bad_corrections_json(client):
    resp = client.post("/api/check", files={"photo": ("x.jpg", b"\xff\xd8\xff", "image/jpeg")},
                       data={"corrections": "{oops"})
    assert_error(resp, 400, "bad_request")


def test_unknown_audit(client):
    assert_error(client.get("/api/audits/0123456789abcdef"), 404, "audit_not_found")


def test_writes_need_the_token_when_configured(token_client):
    r = token_client.post("/api/audits/0123456789abcdef/corrections", json={"corrections": {}})
    assert_error(r, 401, "unauthorized")
    r = token_client.post("/api/audits/0123456789abcdef/corrections", json={"corrections": {}},
                          headers={"Authorization": "Bearer wrong"})
    assert_error(r, 401, "unauthorized")
    r = token_client.post("/api/audits/0123456789abcdef/corrections", json={"corrections": {}},
                          headers={"Authorization": "Bearer s3cret"})
    assert_error(r, 404, "audit_not_found")  # past the token check
    r = token_client.post("/api/batches", files={"archive": ("a.zip", b"PK", "application/zip")})
    assert_error(r, 401, "unauthorized")


def test_batch_upload_must_be_a_zip(client):
    r = client.post("/api/batches", files={"archive": ("a.zip", b"not a zip at all", "application/zip")})
    assert_error(r, 400, "input_file")
    assert_error(client.get("/api/batches/zzz"), 400, "input_file")


def test_openapi_documents_every_route(client):
    paths = client.get("/openapi.json").json()["paths"]
    for p in ("/api/templates", "/api/templates/{template_id}/sheet.pdf", "/api/score", "/api/check",
              "/api/audits/{audit_id}", "/api/audits/{audit_id}/corrections", "/api/batches",
              "/api/batches/{job_id}"):
        assert p in paths


def test_page_is_served(client):
    r = client.get("/")
    assert r.status_code == 200 and "sheetcheck" in r.text
    assert client.get("/static/app.js").status_code == 200
    assert client.get("/a/0123456789abcdef").status_code == 200


# ---- the photo routes, on real photos ------------------------------------------------------

SAMPLES = Path(__file__).resolve().parents[1] / "sample_photos"
PAGE_SAMPLE = SAMPLES / "crypts-2-easy-s4.jpg"


def test_check_then_audit_routes(client):
    data = PAGE_SAMPLE.read_bytes()
    resp = client.post("/api/check", files={"photo": (PAGE_SAMPLE.name, data, "image/jpeg")})
    assert resp.status_code == 201, resp.text
    audit = resp.json()
    report = audit["report"]
    assert report["format"] == "sheetcheck.report/1"
    assert report["template"]["id"] == "crypts-2"
    assert report["verdict"] in {"OK", "DISCREPANCY", "NEEDS REVIEW"}
    assert audit["revision"] == 1 and audit["url"] == f"/a/{audit['id']}"
    ov = report["overlay"]
    assert ov["sheet_box"][2] <= ov["size"][0]

    # stored before the answer: the same audit, the photo and the overlay come back
    again = client.get(f"/api/audits/{audit['id']}").json()
    assert again["report"]["total"] == report["total"]
    assert client.get(audit["photo_url"]).content == data
    png = client.get(audit["overlay_url"])
    assert png.status_code == 200 and png.content.startswith(b"\x89PNG")

    # a correction is a new revision; revision 1 is untouched
    cell = "cell.r1.c1"
    before = report["readings"][cell]["mark"]
    new_mark = "green" if before != "green" else "blue"
    fixed = client.post(f"/api/audits/{audit['id']}/corrections",
                        json={"corrections": {cell: new_mark}, "note": "looked at the sheet"})
    assert fixed.status_code == 201, fixed.text
    fixed = fixed.json()
    assert fixed["revision"] == 2 and fixed["corrections"] == {cell: new_mark}
    assert fixed["report"]["readings"][cell]["mark"] == new_mark
    assert [c["region"] for c in fixed["report"]["corrections"]] == [cell]
    first = client.get(f"/api/audits/{audit['id']}?revision=1").json()
    assert first["report"]["readings"][cell]["mark"] == before
    revs = client.get(f"/api/audits/{audit['id']}/revisions").json()
    assert [r["revision"] for r in revs] == [1, 2]
    assert_error(client.get(f"/api/audits/{audit['id']}?revision=7"), 400, "bad_request")

    # a correction the template does not allow is refused, and stores nothing
    bad = client.post(f"/api/audits/{audit['id']}/corrections",
                      json={"corrections": {cell: "chartreuse"}})
    assert_error(bad, 422, "invalid_state")
    assert len(client.get(f"/api/audits/{audit['id']}/revisions").json()) == 2


def test_check_with_corrections_at_upload(client):
    data = PAGE_SAMPLE.read_bytes()
    resp = client.post("/api/check", files={"photo": ("p.jpg", data, "image/jpeg")},
                       data={"template": "crypts-2", "corrections": json.dumps({"cell.r1.c1": "purple"})})
    assert resp.status_code == 201, resp.text
    assert resp.json()["report"]["readings"]["cell.r1.c1"]["mark"] == "purple"


def test_check_unknown_template(client):
    resp = client.post("/api/check", files={"photo": ("p.jpg", PAGE_SAMPLE.read_bytes(), "image/jpeg")},
                       data={"template": "crypts-9"})
    assert_error(resp, 404, "unknown_template")


def test_check_decompression_bomb(client):
    # a tiny PNG whose header claims 30,000 x 30,000 pixels
    import struct
    import zlib

    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 30000, 30000, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(b"\0" * 1000)) + chunk(b"IEND", b""))
    resp = client.post("/api/check", files={"photo": ("bomb.png", png, "image/png")})
    assert_error(resp, 413, "image_too_large")


def test_check_photo_without_a_sheet(client):
    from PIL import Image
    from skimage import data

    buf = io.BytesIO()
    Image.fromarray(data.coffee()).save(buf, "JPEG", quality=85)  # a real photo, no sheet in it
    resp = client.post("/api/check", files={"photo": ("coffee.jpg", buf.getvalue(), "image/jpeg")})
    assert_error(resp, 422, "no_sheet_found")


def test_check_black_and_white_photo(client):
    from PIL import Image

    buf = io.BytesIO()
    with Image.open(PAGE_SAMPLE) as im:
        im.convert("L").save(buf, "JPEG", quality=90)
    resp = client.post("/api/check", files={"photo": ("mono.jpg", buf.getvalue(), "image/jpeg")})
    assert_error(resp, 422, "no_colour")
    assert "black and white" in resp.json()["message"]


def test_check_truncated_photo(client):
    data = PAGE_SAMPLE.read_bytes()
    resp = client.post("/api/check", files={"photo": ("cut.jpg", data[: len(data) // 2], "image/jpeg")})
    assert_error(resp, 422, "corrupt_image")


def test_batch_job_runs_to_a_report(client):
    import time
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("table1/anna.jpg", PAGE_SAMPLE.read_bytes())
        z.writestr("table1/notes.txt", b"not a photo")
    resp = client.post("/api/batches", files={"archive": ("t.zip", buf.getvalue(), "application/zip")})
    assert resp.status_code == 202, resp.text
    job = resp.json()
    deadline = time.monotonic() + 120
    while job["status"] == "running" and time.monotonic() < deadline:
        time.sleep(0.5)
        job = client.get(job["url"]).json()
    assert job["status"] == "done", job
    page = client.get(job["report_url"])
    assert page.status_code == 200 and "anna" in page.text
    results = client.get(f"/api/batches/{job['id']}/report/results.json")
    assert results.status_code == 200
    # nothing outside the report folder is served
    assert_error(client.get(f"/api/batches/{job['id']}/report/upload.zip"), 400, "input_file")
    assert_error(client.get(f"/api/batches/{job['id']}/report/..%2Fupload.zip"), 404, "not_found")


def test_unknown_route_is_a_json_error(client):
    assert_error(client.get("/api/nothing-here"), 404, "not_found")
