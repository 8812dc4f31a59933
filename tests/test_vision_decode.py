"""vision.decode: formats, EXIF orientation, reduced decoding and every bad input."""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from sheetcheck.errors import (CorruptImageError, ImageTooLargeError, InputFileError,
                               NotAnImageError)
from vision.decode import (MAX_JPEG_PIXELS, MAX_PIXELS, DecodedPhoto, decode_photo,
                           load_photo)

# Four flat quadrant colours: survive JPEG and any reduction, and tell every flip apart.
QUAD = {(0, 0): (220, 40, 40), (0, 1): (40, 200, 40), (1, 0): (40, 40, 220), (1, 1): (240, 240, 240)}


def quadrants(h: int = 96, w: int = 160) -> np.ndarray:
    a = np.zeros((h, w, 3), np.uint8)
    for (i, j), c in QUAD.items():
        a[i * h // 2:(i + 1) * h // 2, j * w // 2:(j + 1) * w // 2] = c
    return a


def quadrant_colours(a: np.ndarray) -> dict:
    h, w = a.shape[:2]
    out = {}
    for i in (0, 1):
        for j in (0, 1):
            block = a[i * h // 2 + h // 8:(i + 1) * h // 2 - h // 8,
                      j * w // 2 + w // 8:(j + 1) * w // 2 - w // 8]
            out[(i, j)] = tuple(int(v) for v in block.reshape(-1, 3).mean(0))
    return out


def assert_quadrants(a: np.ndarray, tol: int = 12) -> None:
    got = quadrant_colours(a)
    for k, want in QUAD.items():
        assert max(abs(g - w) for g, w in zip(got[k], want)) <= tol, (k, got[k], want)


def encode(a: np.ndarray, fmt: str, **kw) -> bytes:
    b = io.BytesIO()
    Image.fromarray(a).save(b, fmt, **kw)
    return b.getvalue()


@pytest.mark.parametrize("fmt,kw,name", [
    ("JPEG", {"quality": 95}, "JPEG"),
    ("PNG", {}, "PNG"),
    ("WEBP", {"quality": 95}, "WEBP"),
    ("HEIF", {"quality": 95}, "HEIF"),
])
def test_formats_decode_to_the_same_picture(fmt, kw, name):
    a = quadrants()
    d = decode_photo(encode(a, fmt, **kw))
    assert isinstance(d, DecodedPhoto)
    assert d.format == name
    assert d.image.shape == a.shape and d.image.dtype == np.uint8
    assert d.scale == 1.0 and d.original_size == (160, 96)
    assert_quadrants(d.image)


def _stored_for(upright: np.ndarray, orientation: int) -> np.ndarray:
    """The pixels a camera stores so that a viewer applying EXIF ``orientation`` shows
    ``upright`` (EXIF 2.3, tag 0x0112), written with numpy so that the test does not reuse
    Pillow's own table."""
    u = upright
    return {
        1: u,
        2: u[:, ::-1],                       # mirrored horizontally
        3: u[::-1, ::-1],                    # rotated 180
        4: u[::-1, :],                       # mirrored vertically
        5: u.transpose(1, 0, 2),             # mirrored along the main diagonal
        6: np.rot90(u, 1),                   # viewer rotates 90 clockwise
        7: np.rot90(u, 2).transpose(1, 0, 2),  # mirrored along the anti-diagonal
        8: np.rot90(u, -1),                  # viewer rotates 90 counter-clockwise
    }[orientation]


@pytest.mark.parametrize("orientation", range(1, 9))
@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_exif_orientation_all_eight(orientation, fmt):
    upright = quadrants()
    stored = np.ascontiguousarray(_stored_for(upright, orientation))
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(stored, fmt, exif=exif.tobytes(), **({"quality": 95} if fmt == "JPEG" else {}))
    d = decode_photo(data)
    assert d.image.shape == upright.shape
    assert d.original_size == (upright.shape[1], upright.shape[0])
    assert_quadrants(d.image)


def test_jpeg_is_decoded_reduced_with_dct_scaling_and_scale_recorded():
    big = np.repeat(np.repeat(quadrants(96, 128), 25, 0), 25, 1)  # 2400 x 3200
    exif = Image.Exif()
    exif[0x0112] = 6
    data = encode(np.ascontiguousarray(np.rot90(big, 1)), "JPEG", quality=90, exif=exif.tobytes())
    d = decode_photo(data, max_long_side=800)
    assert d.original_size == (3200, 2400)
    assert max(d.image.shape[:2]) == 800
    assert d.image.shape[:2] == (600, 800)
    assert d.scale == pytest.approx(0.25, abs=1e-3)
    assert_quadrants(d.image)
    full = decode_photo(data, max_long_side=None)
    assert full.image.shape[:2] == (2400, 3200) and full.scale == 1.0


@pytest.mark.parametrize("orientation", range(1, 9))
def test_fast_reduced_jpeg_path_gives_pillows_pixels(orientation, monkeypatch):
    # The reduced JPEG decode goes through OpenCV's libjpeg (faster); it must give exactly the
    # pixels, size, scale and orientation of Pillow's DCT-scaled decode.
    import vision.decode as dec

    rng = np.random.default_rng(orientation)
    a = cv2_blur(rng.integers(0, 256, (480, 640, 3), dtype=np.uint8))
    exif = Image.Exif()
    exif[0x0112] = orientation
    data = encode(a, "JPEG", quality=90, exif=exif.tobytes())
    fast = decode_photo(data, max_long_side=150)
    assert dec._jpeg_reduced_fast(data, Image.open(io.BytesIO(data)), "JPEG", orientation, 150) is not None
    monkeypatch.setattr(dec, "_jpeg_reduced_fast", lambda *a, **k: None)
    slow = decode_photo(data, max_long_side=150)
    assert fast.image.shape == slow.image.shape and fast.scale == slow.scale
    assert fast.original_size == slow.original_size
    assert np.abs(fast.image.astype(int) - slow.image).max() <= 1


def cv2_blur(a: np.ndarray) -> np.ndarray:
    import cv2

    return cv2.GaussianBlur(a, (0, 0), 3)


def test_png_is_reduced_with_area_averaging():
    big = np.repeat(np.repeat(quadrants(96, 128), 10, 0), 10, 1)  # 960 x 1280
    d = decode_photo(encode(big, "PNG"), max_long_side=640)
    assert d.image.shape[:2] == (480, 640)
    assert d.scale == pytest.approx(0.5)
    assert_quadrants(d.image, tol=3)


def test_transparent_png_is_composited_on_white():
    a = np.zeros((80, 80, 4), np.uint8)
    a[..., 3] = 0
    d = decode_photo(encode(a, "PNG"))
    assert d.image.min() == 255


def test_grey_and_16_bit_images_become_rgb():
    g = np.full((80, 90), 128, np.uint8)
    assert decode_photo(encode(g, "PNG")).image.shape == (80, 90, 3)
    g16 = np.full((80, 90), 65535, np.uint16)
    b = io.BytesIO()
    Image.fromarray(g16).save(b, "PNG")
    d = decode_photo(b.getvalue())
    assert d.image.shape == (80, 90, 3) and int(d.image.min()) == 255


# --- bad input -------------------------------------------------------------------------------

def test_empty_file():
    with pytest.raises(NotAnImageError, match="empty"):
        decode_photo(b"")


def test_not_an_image():
    with pytest.raises(NotAnImageError, match=r"not an image \(text"):
        decode_photo(b"hello, this is my score sheet, honestly\n" * 10)
    with pytest.raises(NotAnImageError, match="PDF"):
        decode_photo(b"%PDF-1.4\n" + bytes(range(256)) * 4)


def test_unsupported_image_format():
    with pytest.raises(NotAnImageError, match="GIF image, not a photo format"):
        decode_photo(encode(quadrants(), "GIF"))


def test_thumbnail_is_too_small():
    with pytest.raises(NotAnImageError, match="too small"):
        decode_photo(encode(quadrants(30, 40), "PNG"))


@pytest.mark.parametrize("max_long_side", [None, 100])
def test_truncated_jpeg_is_reported_not_filled_with_grey(max_long_side):
    rng = np.random.default_rng(1)
    a = (rng.random((400, 600, 3)) * 255).astype(np.uint8)
    data = encode(a, "JPEG", quality=90)
    with pytest.raises(CorruptImageError, match="truncated"):
        decode_photo(data[:len(data) // 2], max_long_side=max_long_side)


def test_an_end_marker_in_the_first_half_does_not_hide_a_truncation():
    # An EXIF thumbnail is a whole JPEG, FF D9 included, near the start of the file: only an
    # end marker in the second half says the photo itself is complete.
    from vision.decode import _has_eoi

    rng = np.random.default_rng(4)
    data = encode((rng.random((400, 600, 3)) * 255).astype(np.uint8), "JPEG", quality=90)
    assert _has_eoi(data)
    cut = data[:int(len(data) * 0.7)]
    assert not _has_eoi(cut)
    # an APP segment carrying an FF D9 right after the start of image
    app = b"\xff\xe9" + struct.pack(">H", 2 + 6) + b"\x00\xff\xd9\x00\x00\x00"
    early = cut[:2] + app + cut[2:]
    assert early.find(b"\xff\xd9") < 16 and not _has_eoi(early)
    with pytest.raises(CorruptImageError, match="truncated"):
        decode_photo(early, max_long_side=100)


def test_truncated_png_is_reported():
    rng = np.random.default_rng(2)
    data = encode((rng.random((300, 300, 3)) * 255).astype(np.uint8), "PNG")
    with pytest.raises(CorruptImageError, match="truncated|damaged"):
        decode_photo(data[:len(data) * 2 // 3])


def test_damaged_header_is_corrupt():
    data = bytearray(encode(quadrants(), "PNG"))
    data[16:24] = b"\xff" * 8  # IHDR width/height garbage, CRC no longer matches
    with pytest.raises((CorruptImageError, ImageTooLargeError), match="damaged|megapixels|large"):
        decode_photo(bytes(data))


def _png_header_only(w: int, h: int) -> bytes:
    """A valid PNG signature and IHDR declaring ``w`` x ``h``, with a tiny IDAT: what a
    decompression bomb looks like to a header reader."""
    def chunk(t: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + t + body + struct.pack(">I", zlib.crc32(t + body))
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 64))
            + chunk(b"IEND", b""))


def test_20000_by_20000_is_refused_from_the_header():
    with pytest.raises(ImageTooLargeError, match="400 megapixels, far more than the 50 megapixels"):
        decode_photo(_png_header_only(20000, 20000))


def test_decompression_bomb_below_pillows_own_limit_is_refused():
    # 8000 x 7000 one-bit PNG: a few kB on disk, 56 MP (168 MB of RGB) once decoded.
    im = Image.new("1", (8000, 7000))
    b = io.BytesIO()
    im.save(b, "PNG")
    data = b.getvalue()
    assert len(data) < 200_000 and 8000 * 7000 > MAX_PIXELS
    with pytest.raises(ImageTooLargeError, match="56 megapixels"):
        decode_photo(data)


def _big_quadrants_jpeg(w: int, h: int, **kw) -> bytes:
    """A ``w`` x ``h`` JPEG of the four quadrant colours (made without a full array)."""
    im = Image.new("RGB", (w, h))
    for (i, j), c in QUAD.items():
        im.paste(c, (j * w // 2, i * h // 2, (j + 1) * w // 2, (i + 1) * h // 2))
    b = io.BytesIO()
    im.save(b, "JPEG", quality=70, **kw)
    return b.getvalue()


def _jpeg_header(w: int, h: int) -> bytes:
    """A JPEG that declares ``w`` x ``h`` px and holds no picture (SOI, SOF0, SOS, EOI)."""
    sof = struct.pack(">BHHB", 8, h, w, 3) + b"".join(
        bytes([i + 1, 0x11 if i else 0x22, 0]) for i in range(3))
    sos = bytes([3]) + b"".join(bytes([i + 1, 0]) for i in range(3)) + bytes([0, 63, 0])
    return (b"\xff\xd8" + b"\xff\xc0" + struct.pack(">H", len(sof) + 2) + sof + b"\xff\xda"
            + struct.pack(">H", len(sos) + 2) + sos + b"\0" * 16 + b"\xff\xd9")


def test_a_200_megapixel_phone_jpeg_is_read_at_reduced_size():
    """The high-resolution mode of a 200 MP phone (16320 x 12240, baseline JPEG): beyond
    MAX_PIXELS and beyond Pillow's own bomb guard (~179 MP), but DCT scaling decodes it at 1/8
    (2040 x 1530), never in full: it is read, not refused."""
    w, h = 16320, 12240
    assert MAX_PIXELS < 2 * Image.MAX_IMAGE_PIXELS < w * h <= MAX_JPEG_PIXELS
    guard = Image.MAX_IMAGE_PIXELS
    d = decode_photo(_big_quadrants_jpeg(w, h))
    assert Image.MAX_IMAGE_PIXELS == guard  # (Pillow's guard is left as it was)
    assert d.image.shape == (1500, 2000, 3) and d.original_size == (w, h)
    assert d.scale == pytest.approx(2000 / w, rel=1e-3)
    assert_quadrants(d.image)
    # the same size saved progressive (held whole in memory while it decodes): refused, and
    # told why, though Pillow's own guard stopped it first
    with pytest.raises(ImageTooLargeError, match="200 megapixels.*in a progressive JPEG"):
        decode_photo(_big_quadrants_jpeg(w, h, progressive=True))
    assert Image.MAX_IMAGE_PIXELS == guard


def test_a_63_megapixel_jpeg_is_read_reduced_but_not_in_full_nor_when_progressive():
    w, h = 9000, 7000
    assert MAX_PIXELS < w * h < Image.MAX_IMAGE_PIXELS
    data = _big_quadrants_jpeg(w, h)
    d = decode_photo(data)
    assert d.image.shape == (1556, 2000, 3) and d.original_size == (w, h)
    assert_quadrants(d.image)
    # decoded in full it would be 189 MB of RGB: refused as before
    with pytest.raises(ImageTooLargeError, match=r"63 megapixels\), more than the 50 megapixels sheetcheck decodes\."):
        decode_photo(data, max_long_side=None)
    # a progressive JPEG is held whole in memory while it decodes, at any scale: refused
    with pytest.raises(ImageTooLargeError, match="63 megapixels.*in a progressive JPEG"):
        decode_photo(_big_quadrants_jpeg(w, h, progressive=True))


def test_a_jpeg_declaring_400_megapixels_is_refused_from_the_header():
    with pytest.raises(ImageTooLargeError,
                       match="400 megapixels, far more than the 210 megapixels sheetcheck "
                             "decodes in a JPEG"):
        decode_photo(_jpeg_header(20000, 20000))
    # and one over MAX_JPEG_PIXELS that Pillow's guard lets through is refused by ours
    with pytest.raises(ImageTooLargeError, match="more than the 210 megapixels"):
        decode_photo(_jpeg_header(15000, 15000))


def test_load_photo_file_errors(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        load_photo(tmp_path / "nope.jpg")
    with pytest.raises(InputFileError, match="is a folder"):
        load_photo(tmp_path)
    p = tmp_path / "empty.jpg"
    p.write_bytes(b"")
    with pytest.raises(NotAnImageError, match="empty.jpg.*empty"):
        load_photo(p)
    q = tmp_path / "ok.webp"
    q.write_bytes(encode(quadrants(), "WEBP", quality=95))
    assert_quadrants(load_photo(q).image)


def test_bad_max_long_side():
    with pytest.raises(ValueError, match="max_long_side"):
        decode_photo(encode(quadrants(), "PNG"), max_long_side=3)


def test_bytearray_and_memoryview_decode_like_bytes():
    rng = np.random.default_rng(3)
    a = (rng.random((300, 400, 3)) * 255).astype(np.uint8)
    data = encode(a, "JPEG", quality=90)
    ref = decode_photo(data, max_long_side=150)
    for wrapped in (bytearray(data), memoryview(data)):
        d = decode_photo(wrapped, max_long_side=150)
        assert d.image.shape == ref.image.shape and np.array_equal(d.image, ref.image)
    with pytest.raises(CorruptImageError, match="truncated"):
        decode_photo(memoryview(data)[:len(data) // 2], max_long_side=150)


# --- black-and-white photos ------------------------------------------------------------------

def _simulated_photo_bytes() -> bytes:
    from calibration.template import get_template
    from sheetcheck.simulator import random_marks, simulate_photo
    t = get_template("reefs-1")
    marks = random_marks(t, np.random.default_rng(5))
    return simulate_photo(t, marks, seed=5, preset="easy", overrides={"output_long_side": 1280}).jpeg


def _jpeg(im: Image.Image, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, "JPEG", quality=88, **kw)
    return buf.getvalue()


def test_a_black_and_white_photo_is_colourless_and_a_colour_one_is_not():
    from vision.decode import colourless
    data = _simulated_photo_bytes()
    colour = decode_photo(data).image
    assert not colourless(colour)
    mono = Image.open(io.BytesIO(data)).convert("L")
    # a greyscale JPEG (one channel), the same grey saved as a three-channel JPEG (a phone's
    # mono filter: chroma planes flat, JPEG rounding only) and a 16-bit greyscale PNG
    grey16 = io.BytesIO()
    Image.fromarray(np.asarray(mono).astype(np.uint16) * 257).save(grey16, "PNG")
    for mono_bytes in (_jpeg(mono), _jpeg(mono.convert("RGB")), grey16.getvalue()):
        assert colourless(decode_photo(mono_bytes).image)


def test_one_coloured_box_on_a_grey_photo_is_colour_enough():
    """A nearly neutral photo whose only colour is one pencil box (~7 mm at 3 px per mm, the
    least a sheet worth checking holds) is still a colour photo."""
    from vision.decode import colourless
    mono = np.asarray(Image.open(io.BytesIO(_simulated_photo_bytes())).convert("L").convert("RGB"))
    assert colourless(mono)
    boxed = mono.copy()
    boxed[400:421, 500:521] = (200, 120, 60)  # 21 x 21 px of orange pencil on ~1280 x 960
    assert not colourless(boxed)
    # a faint cast over the whole photo is no colour (channels 3 levels apart), strong cast is
    warm = mono.astype(np.int16) + np.array([3, 0, -1])
    assert colourless(np.clip(warm, 0, 255).astype(np.uint8))
    warm = mono.astype(np.int16) + np.array([12, 0, -10])
    assert not colourless(np.clip(warm, 0, 255).astype(np.uint8))
