"""A mirrored photo (a phone's front camera, or a photo of the sheet in a mirror) is read flipped.

Before session 30 a mirrored photo's markers decoded as no id (or, anchored on their unreadable
squares, as another template's), its print matched no sheet the right way round, and it was
read as the wrong template with every region flagged, refused as "matches no known sheet" or
as "too blurred" (37 mirrored copies of spent corpus photos; docs/EVALUATION.md "Session 30").
``locate_sheet`` now locates the photo flipped when its location looks like a mirrored one's,
and keeps the flipped location when it is clearly better, with a homography that still maps
the template onto the photo as given.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sheetcheck.cli import main
from vision.decode import decode_photo
from vision.locate import _page_corners, locate_sheet, project
from vision.pipeline import read_photo

SAMPLES = Path(__file__).resolve().parents[1] / "sample_photos"


def _jpeg(rgb: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, "JPEG", quality=95)
    return buf.getvalue()


def _mirrored(name: str) -> tuple[np.ndarray, bytes]:
    """The sample photo as decoded, and its mirror image as JPEG bytes."""
    rgb = decode_photo((SAMPLES / name).read_bytes()).image
    return rgb, _jpeg(np.ascontiguousarray(rgb[:, ::-1]))


def _truth(name: str) -> dict:
    return json.loads((SAMPLES / name.replace(".jpg", ".truth.json")).read_text())


@pytest.mark.parametrize("name", ["crypts-2-easy-s4.jpg",     # markers printed
                                  "reefs-3-easy-s11.jpg"],    # printed without markers
                         ids=["markers", "no-markers"])
def test_mirrored_sample_is_read_as_its_sheet(name):
    truth = _truth(name)
    _, data = _mirrored(name)
    reading = read_photo(data)
    assert reading.template.id == truth["template"]
    assert reading.location.details["mirrored"] is True
    assert reading.to_json()["location"]["mirrored"] is True
    marks = {rid: r.mark for rid, r in reading.readings.items()}
    assert set(marks) == set(truth["marks"])
    right = sum(marks[rid] == m for rid, m in truth["marks"].items())
    confident_wrong = [rid for rid, r in reading.readings.items()
                       if not r.review and r.mark != truth["marks"][rid]]
    assert confident_wrong == []
    assert right >= 0.95 * len(marks), (right, len(marks))


def test_mirrored_homography_maps_onto_the_photo_as_given():
    rgb, data = _mirrored("reefs-1-easy-s7.jpg")
    straight = locate_sheet(rgb)
    mirrored = locate_sheet(decode_photo(data).image)
    assert "mirrored" not in straight.details and mirrored.details["mirrored"] is True
    assert mirrored.template.id == straight.template.id == "reefs-1"
    # the page's corners, template order, land where the straight photo's land, mirrored
    w = rgb.shape[1]
    c_s = project(straight.homography, _page_corners(straight.template))
    c_m = project(mirrored.homography, _page_corners(mirrored.template))
    assert np.abs(c_m[:, 0] - (w - 1 - c_s[:, 0])).max() < 3.0
    assert np.abs(c_m[:, 1] - c_s[:, 1]).max() < 3.0
    # the location the photo as given had (crypts-1's markers anchored on unreadable squares)
    given = mirrored.details["unmirrored_location"]
    assert given["quality"] < mirrored.quality


def test_a_straight_photo_is_not_flipped():
    rgb = decode_photo((SAMPLES / "crypts-2-easy-s4.jpg").read_bytes()).image
    loc = locate_sheet(rgb)
    assert "mirrored" not in loc.details and "mirror_tried" not in loc.details
    reading = read_photo((SAMPLES / "crypts-2-easy-s4.jpg").read_bytes())
    assert "mirrored" not in reading.to_json()["location"]


def test_read_says_the_photo_was_mirrored(tmp_path, capsys):
    _, data = _mirrored("reefs-1-easy-s7.jpg")
    photo = tmp_path / "selfie.jpg"
    photo.write_bytes(data)
    code = main(["read", str(photo)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "reefs-1" in out and "photo mirrored" in out


def test_check_reports_the_mirrored_photo(tmp_path, capsys):
    _, data = _mirrored("crypts-2-easy-s4.jpg")
    photo = tmp_path / "selfie.jpg"
    photo.write_bytes(data)
    # (the sheet as photographed straight is OK: sample_photos/crypts-2-easy-s4.expected.json)
    assert main(["check", str(photo), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["template"]["id"] == "crypts-2" and doc["reader"]["mirrored"] is True
    main(["check", str(photo)])
    assert "read flipped left-right" in capsys.readouterr().out
