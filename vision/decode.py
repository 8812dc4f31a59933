"""Decode a photo: JPEG, PNG, WebP, HEIC/HEIF, EXIF orientation applied, at reduced size.

The reader does not need a 12 MP image: a sheet rectified at 100 dpi is about 1170 x 830 px, so
decoding at roughly 2000 px on the long side keeps every detail it uses. For JPEG the reduction is
almost free: libjpeg's DCT scaling decodes straight at 1/2, 1/4 or 1/8 size. It runs through
libjpeg-turbo's TurboJPEG API (the ``simplejpeg`` package, when installed) or else
``cv2.imdecode``, which give the same pixels (a 12 MP photo at 1/2: ~22 against ~28 ms of thread
CPU, both 0.5-0.6x a full Pillow decode, against 1.3x for Pillow's ``Image.draft`` plus its
array conversion). A JPEG too small for a DCT reduction is decoded in full by TurboJPEG too
when it is installed (Pillow's pixels in half the time). Pillow remains the path for every
other case (and for any JPEG TurboJPEG does not read cleanly) and for the error messages.
Other formats are decoded in full and reduced with area averaging.

Bad input is reported before any pixel is decoded where possible: the header gives the size,
so a decompression bomb never reaches the decoder.

Coordinates: ``DecodedPhoto.image`` is indexed ``[row, col]``; a point (x, y) in the decoded image
is (x / scale, y / scale) in the full-resolution, oriented photo.
"""

from __future__ import annotations

import io
import math
import os
import re
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from sheetcheck.errors import (CorruptImageError, ImageTooLargeError, InputFileError,
                               NotAnImageError)

try:  # HEIC/HEIF is the default format of iPhones.
    import pillow_heif

    pillow_heif.register_heif_opener()
    HEIF_SUPPORTED = True
except ImportError:  # pragma: no cover - pillow-heif is a declared dependency
    HEIF_SUPPORTED = False

__all__ = ["DecodedPhoto", "decode_photo", "load_photo", "colourless", "MAX_PIXELS",
           "MAX_JPEG_PIXELS", "MAX_FILE_BYTES"]

#: Largest photo accepted, in pixels (width x height from the header), for any photo decoded in
#: full (PNG, WebP, HEIC, a JPEG read at full size). Phones shoot 12-50 MP by default.
MAX_PIXELS = 50_000_000
#: Largest baseline JPEG accepted when it is decoded at reduced size (DCT scaling to 1/2, 1/4
#: or 1/8, never in full: at most :data:`MAX_PIXELS` decoded): the high-resolution modes of
#: phones with 108 and 200 MP sensors (16320 x 12240 = 199.8 MP). Anything larger is a scan at
#: an absurd resolution or a decompression bomb. (A progressive JPEG is held whole in memory
#: as coefficients while it decodes, ~3 bytes a pixel: it keeps :data:`MAX_PIXELS`.)
MAX_JPEG_PIXELS = 210_000_000
#: Largest file accepted. A 50 MP JPEG is ~25 MB; PNGs of phone photos stay under 100 MB.
MAX_FILE_BYTES = 120_000_000
#: Smallest useful photo: below this the sheet cannot be read at all.
MIN_SIDE = 64

# Formats a phone or a scanner produces that the reader accepts. Anything else Pillow can open
# (GIF, ICO, PSD ...) is almost certainly the wrong file.
ACCEPTED_FORMATS = ("JPEG", "MPO", "PNG", "WEBP", "HEIF", "AVIF", "TIFF", "BMP")


@dataclass(frozen=True)
class DecodedPhoto:
    """A decoded, upright photo.

    Attributes
    ----------
    image : (H, W, 3) uint8 ndarray
        RGB, EXIF orientation applied, possibly reduced.
    scale : float
        Decoded px per original px (``<= 1`` when reduced).
    original_size : tuple of int
        ``(w, h)`` of the full-resolution, oriented photo.
    format : str
        ``"JPEG"``, ``"PNG"``, ``"WEBP"``, ``"HEIF"`` ...
    """

    image: np.ndarray
    scale: float
    original_size: tuple[int, int]
    format: str


_RETAKE = "Send the original photo file again (or take a new photo)."


#: Serialises the rare opens that raise Pillow's own bomb guard (:func:`_open_large_jpeg`).
_PILLOW_GUARD_LOCK = threading.Lock()


def _open_large_jpeg(data: bytes) -> Image.Image | None:
    """``Image.open`` of a JPEG that Pillow's own bomb guard refuses (more than twice its
    ``MAX_IMAGE_PIXELS``, ~179 MP), with the guard raised to :data:`MAX_JPEG_PIXELS` for this
    one open (under a lock; every open in sheetcheck checks the size itself afterwards). None
    when it is no JPEG or larger still."""
    if not data.startswith(b"\xff\xd8"):
        return None
    with _PILLOW_GUARD_LOCK:
        saved = Image.MAX_IMAGE_PIXELS
        Image.MAX_IMAGE_PIXELS = MAX_JPEG_PIXELS // 2 + 1
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", Image.DecompressionBombWarning)
                im = Image.open(io.BytesIO(data))
        except (Image.DecompressionBombError, UnidentifiedImageError, OSError, ValueError,
                SyntaxError):
            return None
        finally:
            Image.MAX_IMAGE_PIXELS = saved
    return im if (im.format or "").upper() in ("JPEG", "MPO") else None


def _pixel_limit(im: Image.Image, max_long_side: int | None) -> tuple[int, str]:
    """The most pixels ``im`` may have, and how to say what the limit is about: a baseline JPEG
    that DCT scaling reduces to at most :data:`MAX_PIXELS` may have up to
    :data:`MAX_JPEG_PIXELS`; every other image :data:`MAX_PIXELS`."""
    w, h = im.size
    fmt = (im.format or "").upper()
    if fmt in ("JPEG", "MPO") and max_long_side is not None:
        d = _dct_denom(max(w, h), max_long_side)
        if math.ceil(w / d) * math.ceil(h / d) <= MAX_PIXELS:
            if not im.info.get("progressive"):
                return MAX_JPEG_PIXELS, "in a JPEG it reads at reduced size"
            return MAX_PIXELS, "in a progressive JPEG"
    return MAX_PIXELS, ""


def _open(data: bytes, name: str, max_long_side: int | None = None) -> Image.Image:
    if len(data) == 0:
        raise NotAnImageError(f"{name} is empty (0 bytes): there is no photo in it.",
                              hint="The upload or copy probably failed; send the photo again.")
    if len(data) > MAX_FILE_BYTES:
        raise ImageTooLargeError(
            f"{name} is {len(data) / 1e6:.0f} MB, more than the {MAX_FILE_BYTES / 1e6:.0f} MB "
            "a photo of a score sheet needs.",
            hint="Send a normal phone photo (JPEG or HEIC, 12 MP is plenty).")
    try:
        with warnings.catch_warnings():
            # Pillow warns (rather than raises) between MAX_IMAGE_PIXELS and twice that; our
            # own limit below is lower and gives a proper message.
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            im = Image.open(io.BytesIO(data))
    except Image.DecompressionBombError as e:
        im = _open_large_jpeg(data)
        if im is not None:  # (its own size check, with the limit that applies to it)
            return _checked(im, name, max_long_side)
        m = re.search(r"\((\d+) pixels\)", str(e))
        size = f" of {int(m.group(1)) / 1e6:.0f} megapixels" if m else ""
        limit, what = ((MAX_JPEG_PIXELS, " in a JPEG") if data.startswith(b"\xff\xd8")
                       else (MAX_PIXELS, ""))
        raise ImageTooLargeError(
            f"{name} declares an image{size}, far more than the {limit / 1e6:.0f} megapixels "
            f"sheetcheck decodes{what} (a decompression bomb or a scan at an absurd "
            "resolution).",
            hint=f"Send a normal phone photo of at most {MAX_PIXELS / 1e6:.0f} megapixels.") from None
    except UnidentifiedImageError:
        head = data[:16]
        sniffed = _sniff(head)
        if sniffed:
            raise CorruptImageError(
                f"{name} starts like a {sniffed} file but is damaged: its header cannot be read.",
                hint=_RETAKE) from None
        what = "a PDF" if head.startswith(b"%PDF") else (
            "text" if _looks_like_text(data[:512]) else "not a known image format")
        raise NotAnImageError(
            f"{name} is not an image ({what}, {len(data)} bytes).",
            hint="Send a photo of the score sheet as JPEG, PNG, WebP or HEIC.") from None
    except (OSError, ValueError, SyntaxError) as e:
        raise CorruptImageError(f"{name} looks like an image but its header is damaged ({e}).",
                                hint=_RETAKE) from None
    return _checked(im, name, max_long_side)


def _checked(im: Image.Image, name: str, max_long_side: int | None) -> Image.Image:
    """``im`` (opened, no pixel decoded) when sheetcheck reads its format and size."""
    fmt = (im.format or "").upper()
    if fmt not in ACCEPTED_FORMATS:
        raise NotAnImageError(
            f"{name} is a {fmt or 'unknown'} image, not a photo format sheetcheck reads.",
            hint="Send a photo of the score sheet as JPEG, PNG, WebP or HEIC.")
    w, h = im.size
    limit, which = _pixel_limit(im, max_long_side)
    if w * h > limit:
        what = f" {which}" if which else ""
        raise ImageTooLargeError(
            f"{name} is {w} x {h} px ({w * h / 1e6:.0f} megapixels), more than the "
            f"{limit / 1e6:.0f} megapixels sheetcheck decodes{what}.",
            hint="Send a normal phone photo, or reduce the image to at most "
                 f"{MAX_PIXELS / 1e6:.0f} megapixels first.")
    if min(w, h) < MIN_SIDE:
        raise NotAnImageError(
            f"{name} is only {w} x {h} px: far too small to hold a readable score sheet.",
            hint="Send the full-size photo, not a thumbnail.")
    return im


def _sniff(head: bytes) -> str | None:
    """The image format a file's first bytes announce, or None."""
    if head.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "WebP"
    if head[4:8] == b"ftyp" and head[8:12] in (b"heic", b"heix", b"mif1", b"msf1", b"hevc", b"avif"):
        return "HEIC/HEIF"
    return None


def _looks_like_text(b: bytes) -> bool:
    if not b:
        return False
    printable = sum(32 <= c < 127 or c in (9, 10, 13) for c in b)
    return printable / len(b) > 0.95


def _orientation(im: Image.Image) -> int:
    try:
        return int(im.getexif().get(0x0112, 1) or 1)
    except Exception:  # a damaged EXIF block must not stop the read: assume upright
        return 1


def _to_rgb(im: Image.Image) -> Image.Image:
    if im.mode == "RGB":
        return im
    if im.mode in ("RGBA", "LA", "PA") or (im.mode == "P" and "transparency" in im.info):
        # Transparent pixels are paper, not black.
        rgba = im.convert("RGBA")
        bg = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(bg, rgba).convert("RGB")
    if im.mode in ("I;16", "I;16B", "I;16L", "I"):
        a = np.asarray(im, dtype=np.float64)
        top = 65535.0 if a.max() > 255 else 255.0
        g = np.clip(a * (255.0 / top) + 0.5, 0, 255).astype(np.uint8)
        return Image.fromarray(g).convert("RGB")
    return im.convert("RGB")


def decode_photo(data: bytes, *, max_long_side: int | None = 2000,
                 name: str = "the photo") -> DecodedPhoto:
    """Decode photo bytes into an upright RGB array, reduced to about ``max_long_side``.

    Parameters
    ----------
    data : bytes
        The file's contents.
    max_long_side : int or None, optional
        Reduce so that the long side is at most this many px (``None``: full resolution).
        JPEGs are reduced during decoding (DCT scaling), so they are never decoded in full.
    name : str, optional
        How messages refer to the input (a file name).

    Returns
    -------
    DecodedPhoto

    Raises
    ------
    NotAnImageError
        Empty data, or data that is no image format sheetcheck reads.
    CorruptImageError
        Truncated or damaged image data.
    ImageTooLargeError
        More than :data:`MAX_PIXELS` pixels, or :data:`MAX_JPEG_PIXELS` for a baseline JPEG
        read at reduced size (checked from the header before decoding), or a decompression
        bomb.
    """
    if max_long_side is not None and max_long_side < MIN_SIDE:
        raise ValueError(f"max_long_side must be at least {MIN_SIDE}, got {max_long_side!r}")
    data = bytes(data)  # the same object for bytes; a copy of a bytearray or memoryview
    im = _open(data, name, max_long_side)
    fmt = (im.format or "").upper()
    if fmt == "MPO":  # multi-picture JPEG (some phones): the first frame is the photo
        fmt = "JPEG"
    raw_w, raw_h = im.size
    orient = _orientation(im)
    swap = orient in (5, 6, 7, 8)
    original_size = (raw_h, raw_w) if swap else (raw_w, raw_h)

    fast = _jpeg_reduced_fast(data, im, fmt, orient, max_long_side)
    if fast is None:
        fast = _jpeg_full_fast(data, im, fmt, orient, max_long_side)
    if fast is not None:
        return _finish(fast, original_size, fmt, max_long_side)
    if max_long_side is not None and fmt == "JPEG" and max(raw_w, raw_h) > max_long_side:
        # draft() picks the largest DCT reduction (1/2, 1/4, 1/8) that keeps the image at least
        # the requested size, so the result is never smaller than asked for.
        f = max_long_side / max(raw_w, raw_h)
        im.draft("RGB", (max(1, math.ceil(raw_w * f)), max(1, math.ceil(raw_h * f))))
    if ImageFile.LOAD_TRUNCATED_IMAGES and fmt == "JPEG" and not _has_eoi(data):
        # Some other code in this process switched on Pillow's "fill truncated images with
        # grey" mode, so Pillow would not complain; a JPEG without its end-of-image marker
        # (FF D9; entropy-coded data never contains it) is cut off all the same.
        raise CorruptImageError(
            f"{name} is truncated: the JPEG data has no end-of-image marker "
            f"({len(data)} bytes received).",
            hint="The file was cut off in transfer; send the complete photo again.")
    try:
        im.load()
    except (OSError, ValueError, SyntaxError, EOFError) as e:
        msg = str(e)
        if "truncated" in msg.lower() or isinstance(e, EOFError):
            raise CorruptImageError(
                f"{name} is truncated: the {fmt} data stops before the end of the image "
                f"({len(data)} bytes received).",
                hint="The file was cut off in transfer; send the complete photo again.") from None
        raise CorruptImageError(f"{name} is a damaged {fmt} file that cannot be decoded ({msg}).",
                                hint=_RETAKE) from None
    except Image.DecompressionBombError as e:  # pragma: no cover - caught at open normally
        raise ImageTooLargeError(f"{name} is a decompression bomb ({e}).",
                                 hint=f"Send a photo of at most {MAX_PIXELS / 1e6:.0f} MP.") from None
    if orient != 1:
        im = ImageOps.exif_transpose(im)
    im = _to_rgb(im)
    arr = np.asarray(im, dtype=np.uint8)
    if arr.ndim != 3 or arr.shape[2] != 3:  # pragma: no cover - _to_rgb guarantees RGB
        raise CorruptImageError(f"{name} decoded to an unexpected shape {arr.shape}.", hint=_RETAKE)

    return _finish(arr, original_size, fmt, max_long_side)


def _finish(arr: np.ndarray, original_size: tuple[int, int], fmt: str,
            max_long_side: int | None) -> DecodedPhoto:
    """Reduce a decoded upright RGB array to ``max_long_side`` and record its scale."""
    h, w = arr.shape[:2]
    if max_long_side is not None and max(w, h) > max_long_side:
        import cv2  # local: decode must not pay for cv2's import when nothing is reduced

        f = max_long_side / max(w, h)
        nw, nh = max(1, round(w * f)), max(1, round(h * f))
        arr = cv2.resize(arr, (nw, nh), interpolation=cv2.INTER_AREA)
        h, w = nh, nw
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        arr = np.ascontiguousarray(arr).copy()
    # The two axes may be rounded differently; the mean is within half a pixel on both.
    scale = 0.5 * (w / original_size[0] + h / original_size[1])
    return DecodedPhoto(image=arr, scale=float(scale), original_size=original_size,
                        format=fmt)


# cv2.imdecode flags for libjpeg's DCT scaling by 1/2, 1/4, 1/8 (EXIF orientation applied here).
_CV2_REDUCED = {2: "IMREAD_REDUCED_COLOR_2", 4: "IMREAD_REDUCED_COLOR_4", 8: "IMREAD_REDUCED_COLOR_8"}


def _jpeg_reduced_fast(data: bytes, im: Image.Image, fmt: str, orient: int,
                       max_long_side: int | None) -> np.ndarray | None:
    """A reduced JPEG decoded by OpenCV's libjpeg, upright, RGB; None when this path does not
    apply (then Pillow decodes and reports any damage with its own, precise messages).

    Why: Pillow's DCT-scaled decode of a 12 MP JPEG plus its conversion to an array took 1.3x
    a full decode on this machine; ``cv2.imdecode`` at the same DCT scale takes 0.6x and gives
    the same pixels (same libjpeg-turbo, same scaled IDCT and upsampling: measured identical
    on the bench photos). The scale is the one ``Image.draft`` picks: the largest reduction
    that keeps the long side at least ``max_long_side``.
    """
    if max_long_side is None or fmt != "JPEG" or im.mode != "RGB":
        return None  # grey, CMYK and progressive oddities stay with Pillow's conversions
    raw_w, raw_h = im.size
    denom = _dct_denom(max(raw_w, raw_h), max_long_side)
    if denom == 1:
        return None
    # No end-of-image marker: libjpeg would fill the missing rows with grey and only warn.
    # Pillow's path reports the truncation properly.
    if not _has_eoi(data):
        return None
    want = (math.ceil(raw_h / denom), math.ceil(raw_w / denom))
    a = _turbojpeg_reduced(data, want)
    if a is not None:
        return _orient(a, orient)
    try:
        import cv2
    except ImportError:  # pragma: no cover - opencv is a declared dependency
        return None
    flags = getattr(cv2, _CV2_REDUCED[denom]) | cv2.IMREAD_IGNORE_ORIENTATION
    rgb_out = hasattr(cv2, "IMREAD_COLOR_RGB")
    if rgb_out:  # OpenCV >= 4.11: libjpeg writes RGB itself (saves a conversion pass)
        flags = (flags & ~cv2.IMREAD_COLOR) | cv2.IMREAD_COLOR_RGB
    try:
        a = cv2.imdecode(np.frombuffer(data, np.uint8), flags)
    except cv2.error:
        return None
    if a is None or a.ndim != 3 or a.shape[:2] != want:
        return None  # damaged data or an unexpected reduction: let Pillow decide
    if not rgb_out:
        a = cv2.cvtColor(a, cv2.COLOR_BGR2RGB)
    return _orient(a, orient)


def _dct_denom(long_side: int, max_long_side: int | None) -> int:
    """The DCT reduction (8, 4, 2, or 1 for none) that ``Image.draft`` picks: the largest that
    keeps the long side at least ``max_long_side``."""
    if max_long_side is None:
        return 1
    for d in (8, 4, 2):
        if math.ceil(long_side / d) >= max_long_side:
            return d
    return 1


def _jpeg_full_fast(data: bytes, im: Image.Image, fmt: str, orient: int,
                    max_long_side: int | None) -> np.ndarray | None:
    """A JPEG that no DCT scale reduces (a photo of at most ~2x ``max_long_side``, or
    ``max_long_side=None``) decoded in full by TurboJPEG (:func:`_turbojpeg_reduced` at
    scale 1), upright, RGB; None when that does not apply, and Pillow decodes it as before.

    Why: Pillow's full decode (libjpeg-turbo too, with the same accurate IDCT and fancy
    upsampling when nothing is drafted: the same pixels) fills its own image memory row by
    row and is then copied into the array (``np.asarray``, then a writeable copy), twice the
    time: decode_photo on every 10th fresh600k photo (1280-3264 px), thread CPU, 5 rounds
    alternating: 27.5 -> 13.2 ms (median; paired difference 7.8 ms); a 12 MP photo with
    ``max_long_side=None``: 125 -> 42 ms. Identical pictures, scales and sizes on 484
    photos (fresh600k, val50000, heldout740, 12 MP in full) and all eight EXIF
    orientations. Pillow's ``draft`` reduces nothing here (``_dct_denom`` is 1: its own rule
    picks no scale either)."""
    if fmt != "JPEG" or im.mode != "RGB":
        return None
    raw_w, raw_h = im.size
    if _dct_denom(max(raw_w, raw_h), max_long_side) != 1 or not _has_eoi(data):
        return None
    a = _turbojpeg_reduced(data, (raw_h, raw_w))
    return None if a is None else _orient(a, orient)


_simplejpeg = None  # the module once imported; False when it is not installed


def _turbojpeg():
    """The ``simplejpeg`` module, or None when it is not installed (imported on first use)."""
    global _simplejpeg
    if _simplejpeg is None:
        try:
            import simplejpeg
        except ImportError:
            simplejpeg = False
        _simplejpeg = simplejpeg
    return _simplejpeg or None


def _turbojpeg_reduced(data: bytes, want: tuple[int, int]) -> np.ndarray | None:
    """The JPEG decoded by libjpeg-turbo's TurboJPEG API (``simplejpeg``) at the DCT scale
    whose size is ``want`` (rows, columns), RGB as stored (no EXIF orientation); None when
    ``simplejpeg`` is not installed, libjpeg reported anything at all (``strict``: a warning
    on damaged data is an error here), or the size is not ``want``: the caller then decodes
    with ``cv2.imdecode`` as before, so damaged data is read exactly as it was.

    Why: the same library (libjpeg-turbo 3), scaled IDCT, upsampling and colour conversion
    as OpenCV's build, so the same pixels (the 12 bench photos and 60 dev photos; 4:4:4,
    4:2:2 and 4:2:0, baseline and progressive, odd sizes, at 1/2, 1/4 and 1/8: tested), in
    less time: a 12 MP bench photo at 1/2 took 22-24 ms of thread CPU against 28-29 ms for
    ``cv2.imdecode`` (medians of 72 alternating pairs, paired difference 4.1 and 4.2 ms in
    two runs; a plain libjpeg scanline loop in C takes the same ~22 ms, so the extra is
    OpenCV's, around the library call). The decode is the read's longest serial step:
    nothing else runs beside it. The scale: TurboJPEG picks the smallest of its factors that
    keeps the image at least ``want``, and 1/denom gives exactly ``want``."""
    sj = _turbojpeg()
    if sj is None:
        return None
    try:
        a = sj.decode_jpeg(data, colorspace="RGB", min_height=want[0], min_width=want[1],
                           strict=True)
    except (ValueError, RuntimeError, OSError):
        return None
    if a.ndim != 3 or a.shape != (want[0], want[1], 3) or a.dtype != np.uint8:
        return None  # (another scale than asked for: let OpenCV decode it)
    return a


def _has_eoi(data: bytes) -> bool:
    """Whether the second half of a JPEG holds an end-of-image marker (FF D9). Searched from
    the end, where it sits, without copying the half (a slice of a 4 MB photo costs ~1 ms)."""
    return data.rfind(b"\xff\xd9", len(data) // 2) >= 0


def _orient(a: np.ndarray, orient: int) -> np.ndarray:
    """Apply EXIF orientation ``orient`` to stored pixels (as ``ImageOps.exif_transpose``)."""
    import cv2

    if orient == 2:
        return cv2.flip(a, 1)
    if orient == 3:
        return cv2.rotate(a, cv2.ROTATE_180)
    if orient == 4:
        return cv2.flip(a, 0)
    if orient == 5:
        return cv2.transpose(a)
    if orient == 6:
        return cv2.rotate(a, cv2.ROTATE_90_CLOCKWISE)
    if orient == 7:
        return cv2.rotate(cv2.transpose(a), cv2.ROTATE_180)
    if orient == 8:
        return cv2.rotate(a, cv2.ROTATE_90_COUNTERCLOCKWISE)
    return a


#: A photo is colourless (a black-and-white photo or scan) when fewer than COLOURLESS_SHARE of
#: its pixels have two colour channels more than COLOURLESS_LEVELS apart (of 255). A greyscale
#: file, or one saved as RGB, differs by 0-2 (JPEG rounding); a camera's colour photo of a sheet
#: differs by more on 10-99 % of its pixels (the table, the pencils, the light's cast, the
#: colour fringes at the print's edges), a single coloured box alone on ~2e-4 of them.
COLOURLESS_LEVELS = 4
COLOURLESS_SHARE = 1e-4


def _colour_share(image: np.ndarray) -> float:
    """Share of ``image``'s pixels whose channels differ by more than COLOURLESS_LEVELS."""
    a = image.astype(np.int16)
    d = np.abs(a[..., 0] - a[..., 1])
    np.maximum(d, np.abs(a[..., 1] - a[..., 2]), out=d)
    np.maximum(d, np.abs(a[..., 0] - a[..., 2]), out=d)
    return float(np.count_nonzero(d > COLOURLESS_LEVELS)) / max(1, d.size)


def colourless(image: np.ndarray) -> bool:
    """Whether a decoded photo (``(H, W, 3)`` uint8 RGB) holds no colour at all: a
    black-and-white photo (a phone's mono filter) or a scan in greyscale mode, in which no
    reader can tell the pencils apart.

    A coarse look (every 8th pixel) settles an ordinary photo at once (colour on more than 1 %
    of them); only a nearly neutral one is counted in full.
    """
    if image.ndim != 3 or image.shape[2] != 3 or image.size == 0:
        return False
    if _colour_share(image[::8, ::8]) > 0.01:
        return False
    return _colour_share(image) < COLOURLESS_SHARE


def load_photo(path: str | os.PathLike, *, max_long_side: int | None = 2000) -> DecodedPhoto:
    """Read and decode a photo file (see :func:`decode_photo`).

    Raises
    ------
    InputFileError
        The file does not exist, is a folder, or cannot be read.
    NotAnImageError, CorruptImageError, ImageTooLargeError
        As :func:`decode_photo`.
    """
    data = read_photo_file(path)
    return decode_photo(data, max_long_side=max_long_side, name=f"photo {str(Path(path))!r}")


def read_photo_file(path: str | os.PathLike) -> bytes:
    """The bytes of a photo file, refusing a missing file, a folder or a file far too large.

    Raises
    ------
    InputFileError
        The file does not exist, is a folder, or cannot be read.
    ImageTooLargeError
        The file is larger than any photo of a score sheet needs (``MAX_FILE_BYTES``).
    """
    p = Path(path)
    try:
        size = p.stat().st_size
    except FileNotFoundError:
        raise InputFileError(f"photo file {str(p)!r} does not exist.",
                             hint="Check the path and the file name.") from None
    except OSError as e:
        raise InputFileError(f"cannot read photo file {str(p)!r}: {e.strerror}.",
                             hint="Check the path and its permissions.") from None
    if p.is_dir():
        raise InputFileError(f"{str(p)!r} is a folder, not a photo file.",
                             hint="Name the photo file(s) inside it.")
    if size > MAX_FILE_BYTES:
        raise ImageTooLargeError(
            f"photo file {str(p)!r} is {size / 1e6:.0f} MB, more than the "
            f"{MAX_FILE_BYTES / 1e6:.0f} MB a photo of a score sheet needs.",
            hint="Send a normal phone photo (JPEG or HEIC, 12 MP is plenty).")
    try:
        return p.read_bytes()
    except OSError as e:
        raise InputFileError(f"cannot read photo file {str(p)!r}: {e.strerror}.",
                             hint="Check the path and its permissions.") from None
