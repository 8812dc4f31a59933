"""Exact speed-ups of the read (session 11) keep their values: each fast path against the plain
computation it replaces."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

import vision.decode as dec

SAMPLES = Path(__file__).resolve().parents[1] / "sample_photos"


def _opencv_reduced(data: bytes, denom: int) -> np.ndarray:
    """The reduced decode as it was before the TurboJPEG path: ``cv2.imdecode`` at 1/denom."""
    flags = (getattr(cv2, f"IMREAD_REDUCED_COLOR_{denom}") | cv2.IMREAD_IGNORE_ORIENTATION)
    a = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    return cv2.cvtColor(a, cv2.COLOR_BGR2RGB)


def _sample_pixels() -> np.ndarray:
    """A real (simulated) phone photo of a filled sheet, 1200 px on its long side."""
    path = SAMPLES / "crypts-1-typical-s3.jpg"
    a = np.asarray(Image.open(path).convert("RGB"))
    f = 1200 / max(a.shape[:2])
    return cv2.resize(a, (round(a.shape[1] * f), round(a.shape[0] * f)),
                      interpolation=cv2.INTER_AREA)


def _jpeg(a: np.ndarray, **kw) -> bytes:
    b = io.BytesIO()
    Image.fromarray(a).save(b, "JPEG", **kw)
    return b.getvalue()


@pytest.fixture
def no_turbojpeg(monkeypatch):
    """The decode as without ``simplejpeg`` installed."""
    monkeypatch.setattr(dec, "_simplejpeg", False)


# --- the reduced JPEG decode through TurboJPEG (vision.decode._turbojpeg_reduced) -------------

@pytest.mark.parametrize("denom", [2, 4, 8])
@pytest.mark.parametrize("kw", [{"quality": 90},
                                {"quality": 95, "subsampling": 0},
                                {"quality": 75, "subsampling": 1},
                                {"quality": 90, "progressive": True}],
                         ids=["420", "444", "422", "progressive"])
def test_turbojpeg_gives_opencvs_pixels(denom, kw):
    """The same pixels as OpenCV's reduced decode, whatever the chroma subsampling, the
    scan layout or the scale (a real photo; an odd size, whose reduced size rounds up)."""
    pytest.importorskip("simplejpeg")
    a = _sample_pixels()[:899, :1197]
    data = _jpeg(a, **kw)
    want = (-(-a.shape[0] // denom), -(-a.shape[1] // denom))
    got = dec._turbojpeg_reduced(data, want)
    assert got is not None, "TurboJPEG refused a sound JPEG"
    ref = _opencv_reduced(data, denom)
    assert got.shape == ref.shape == want + (3,)
    assert got.dtype == np.uint8 and got.flags.c_contiguous and got.flags.writeable
    np.testing.assert_array_equal(got, ref)


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_decode_photo_is_the_same_with_and_without_turbojpeg(orientation, monkeypatch):
    """decode_photo gives the same picture, scale and size either way, EXIF orientation
    applied after the decode."""
    pytest.importorskip("simplejpeg")
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _jpeg(_sample_pixels(), quality=90, exif=exif.tobytes())
    calls = []
    real = dec._turbojpeg_reduced
    monkeypatch.setattr(dec, "_turbojpeg_reduced",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    fast = dec.decode_photo(data, max_long_side=300)  # 1200 px -> 1/4
    assert calls, "the TurboJPEG path was not taken"
    monkeypatch.setattr(dec, "_simplejpeg", False)
    plain = dec.decode_photo(data, max_long_side=300)
    assert fast.scale == plain.scale == pytest.approx(0.25)
    assert fast.original_size == plain.original_size
    np.testing.assert_array_equal(fast.image, plain.image)


def test_damaged_jpeg_is_left_to_opencv_as_before(monkeypatch):
    """Entropy data damaged in the middle: libjpeg only warns (and fills what it cannot
    read); TurboJPEG is strict here, so OpenCV decodes it exactly as before."""
    pytest.importorskip("simplejpeg")
    data = bytearray(_jpeg(_sample_pixels(), quality=90))
    mid = len(data) // 2
    data[mid:mid + 400] = bytes(range(200)) * 2  # garbage, no 0xFF: no marker made
    data = bytes(data)
    want = (225, 300)
    assert dec._turbojpeg_reduced(data, want) is None
    got = dec.decode_photo(data, max_long_side=300)
    np.testing.assert_array_equal(got.image, _opencv_reduced(data, 4))


def test_without_turbojpeg_the_opencv_path_decodes(no_turbojpeg):
    """Without simplejpeg installed the reduced decode is OpenCV's, as before."""
    data = _jpeg(_sample_pixels(), quality=90)
    assert dec._turbojpeg_reduced(data, (450, 600)) is None
    got = dec.decode_photo(data, max_long_side=600)
    assert got.image.shape[:2] == (450, 600) and got.scale == pytest.approx(0.5)
    np.testing.assert_array_equal(got.image, _opencv_reduced(data, 2))


def test_a_size_turbojpeg_cannot_give_falls_back():
    """A size no DCT scale gives exactly is refused (the caller then uses OpenCV)."""
    pytest.importorskip("simplejpeg")
    data = _jpeg(_sample_pixels(), quality=90)
    assert dec._turbojpeg_reduced(data, (451, 600)) is None


# --- a JPEG no DCT scale reduces, decoded in full by TurboJPEG (vision.decode._jpeg_full_fast) --

@pytest.mark.parametrize("max_long_side", [None, 1000, 1200])
@pytest.mark.parametrize("orientation", [1, 2, 5, 6])
@pytest.mark.parametrize("progressive", [False, True])
def test_full_jpeg_decode_gives_pillows_picture(max_long_side, orientation, progressive,
                                                monkeypatch):
    """A photo decoded in full (no DCT scale keeps it at max_long_side, or none asked for):
    Pillow's picture, scale and size, with EXIF orientation and the area reduction after."""
    pytest.importorskip("simplejpeg")
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = _jpeg(_sample_pixels(), quality=90, progressive=progressive, exif=exif.tobytes())
    taken = []
    real = dec._jpeg_full_fast
    monkeypatch.setattr(dec, "_jpeg_full_fast",
                        lambda *a, **k: taken.append(real(*a, **k)) or taken[-1])
    fast = dec.decode_photo(data, max_long_side=max_long_side)
    assert taken and taken[-1] is not None, "the full TurboJPEG path was not taken"
    monkeypatch.setattr(dec, "_simplejpeg", False)
    plain = dec.decode_photo(data, max_long_side=max_long_side)
    assert fast.scale == plain.scale and fast.original_size == plain.original_size
    np.testing.assert_array_equal(fast.image, plain.image)


def test_full_path_leaves_reducible_photos_alone():
    """A photo a DCT scale reduces is not decoded in full (the reduced path reads it)."""
    pytest.importorskip("simplejpeg")
    data = _jpeg(_sample_pixels(), quality=90)
    im = Image.open(io.BytesIO(data))
    assert dec._dct_denom(1200, 600) == 2
    assert dec._jpeg_full_fast(data, im, "JPEG", 1, 600) is None
    assert dec._dct_denom(1200, 601) == 1
    assert dec._jpeg_full_fast(data, im, "JPEG", 1, 601).shape == (900, 1200, 3)
