"""Where a batch's photos come from: nested folders, zip files, and an optional manifest.

Zip files are read in memory, member by member, and never extracted: a member's name is only
a label (it never becomes a path, so ``../`` or absolute names cannot leave the report folder).
Each member is read through a size cap (per member and in total, counted on the bytes actually
decompressed, not on the header's claim) and a compression-ratio check, so a zip bomb is
rejected after reading at most the cap.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Iterator

from sheetcheck.errors import InputFileError

PHOTO_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".heic", ".heif", ".tif", ".tiff", ".bmp")

#: Largest photo accepted from a zip (a 12 MP JPEG is 3-8 MB; a 48 MP PNG about 100 MB).
MAX_MEMBER_BYTES = 64 * 1024 * 1024
#: Largest total read out of one zip file.
MAX_ZIP_TOTAL_BYTES = 4 * 1024 * 1024 * 1024
#: Photos are already compressed: a member that inflates more than this is not a photo.
MAX_COMPRESSION_RATIO = 50.0


@dataclass(frozen=True)
class PhotoItem:
    """One photo of a batch.

    ``name`` is the display name (relative path, or ``archive.zip!member``), ``data`` the bytes
    (None with ``error`` when the photo could not be read safely), ``sha256`` their hash.
    """

    name: str
    data: bytes | None
    sha256: str
    player: str | None = None
    table: str | None = None
    error: str | None = None
    error_code: str | None = None
    extra: dict = field(default_factory=dict)


def _hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _error_item(name: str, message: str, code: str = "input_file", *,
                player: str | None = None, table: str | None = None) -> PhotoItem:
    # an unreadable item has no content hash; its name stands in so a re-run skips it too
    return PhotoItem(name, None, "name:" + _hash(name.encode("utf-8")), player, table,
                     error=message, error_code=code)


def _guess_names(name: str) -> tuple[str, str | None]:
    """Player from the file stem, table from the folder it is in (if any)."""
    p = PurePosixPath(name.replace("!", "/"))
    table = p.parent.name or None
    if table and table.lower().endswith(".zip"):
        table = table[:-4] or None
    return p.stem, table


def is_photo_name(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in PHOTO_SUFFIXES


def read_zip_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo, *,
                    max_bytes: int = MAX_MEMBER_BYTES,
                    max_ratio: float = MAX_COMPRESSION_RATIO) -> bytes:
    """Read one member into memory, refusing bombs.

    Raises
    ------
    InputFileError
        when the member is encrypted, claims or turns out to be too large, or inflates more than
        ``max_ratio`` times.
    """
    if info.flag_bits & 0x1:
        raise InputFileError(f"zip member {info.filename!r} is encrypted",
                             hint="Zip the photos without a password.")
    if info.file_size > max_bytes:
        raise InputFileError(f"zip member {info.filename!r} is {info.file_size} bytes, over the "
                             f"{max_bytes}-byte limit for one photo",
                             hint="Photos larger than this are not phone photos; check the file.")
    if info.compress_size and info.file_size / info.compress_size > max_ratio:
        raise InputFileError(f"zip member {info.filename!r} inflates {info.file_size / info.compress_size:.0f} "
                             f"times (limit {max_ratio:.0f}): this looks like a zip bomb, not a photo")
    buf = io.BytesIO()
    # the header can lie: count what actually comes out
    with zf.open(info) as f:
        while True:
            chunk = f.read(1 << 20)
            if not chunk:
                break
            buf.write(chunk)
            n = buf.tell()
            if n > max_bytes:
                raise InputFileError(f"zip member {info.filename!r} inflates past the "
                                     f"{max_bytes}-byte limit for one photo (its header said "
                                     f"{info.file_size}): this looks like a zip bomb")
            if n > max(info.compress_size, 1) * max_ratio and n > 1 << 20:
                raise InputFileError(f"zip member {info.filename!r} inflates more than "
                                     f"{max_ratio:.0f} times: this looks like a zip bomb")
    return buf.getvalue()


@dataclass(frozen=True)
class PhotoSource:
    """One photo found in a batch's input, not read yet (so listing a big batch costs no memory).

    ``zip_path``/``member`` locate a zip member; ``path`` a plain file; ``error`` a problem found
    while listing (the item is recorded as an error).
    """

    name: str
    player: str | None
    table: str | None
    path: Path | None = None
    zip_path: Path | None = None
    member: str | None = None
    error: str | None = None

    def load(self) -> PhotoItem:
        """Read the bytes (a zip member through the bomb checks). Never raises for a bad photo."""
        if self.error is not None:
            return _error_item(self.name, self.error, player=self.player, table=self.table)
        try:
            if self.zip_path is not None:
                with zipfile.ZipFile(self.zip_path) as zf:
                    data = read_zip_member(zf, zf.getinfo(self.member))
            else:
                data = self.path.read_bytes()
        except InputFileError as e:
            return _error_item(self.name, str(e), player=self.player, table=self.table)
        except OSError as e:
            return _error_item(self.name, f"cannot read {self.name}: {e.strerror or e}",
                               player=self.player, table=self.table)
        except (zipfile.BadZipFile, RuntimeError, ValueError, EOFError, KeyError) as e:
            return _error_item(self.name, f"{self.name}: cannot read the zip member ({e})",
                               player=self.player, table=self.table)
        return PhotoItem(self.name, data, _hash(data), self.player, self.table)


def list_zip(path: Path, label: str, *, max_total: int = MAX_ZIP_TOTAL_BYTES) -> list[PhotoSource]:
    """The photos in one zip file (listed from its directory; nothing is read or extracted).

    The total cap is checked on the sizes the directory declares: a member is never read past
    its declared size (zipfile stops there and checks the CRC), so the declared sum bounds what
    the whole zip can put in memory.
    """
    try:
        zf = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as e:
        return [PhotoSource(label, None, None, error=f"{label} is not a readable zip file ({e})")]
    out: list[PhotoSource] = []
    total = 0
    with zf:
        for info in sorted(zf.infolist(), key=lambda i: i.filename):
            if info.is_dir() or not is_photo_name(info.filename):
                continue
            # the member name is only a label; drop ../, / and . so labels stay readable
            member = "/".join(p for p in PurePosixPath(info.filename.replace("\\", "/")).parts
                              if p not in ("/", "..", "."))
            name = f"{label}!{member}"
            player, table = _guess_names(member if "/" in member
                                         else f"{PurePosixPath(label).name}/{member}")
            total += info.file_size
            if total > max_total:
                out.append(PhotoSource(name, player, table, error=(
                    f"{label}: {member!r} passes the {max_total}-byte limit for one zip file "
                    f"(declared sizes add up to {total}); it is not read")))
                continue
            out.append(PhotoSource(name, player, table, zip_path=path, member=info.filename))
    return out


def load_manifest(path: str | Path) -> dict[str, dict]:
    """``file,player[,table]`` CSV -> {file: {"player", "table"}} (file as relative path or name).

    Raises
    ------
    InputFileError
        when the file is missing or has no ``file`` and ``player`` columns.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8-sig")
    except OSError as e:
        raise InputFileError(f"cannot read the manifest {path}: {e.strerror}",
                             hint="Check the --manifest path.") from None
    rows = csv.DictReader(io.StringIO(text))
    cols = [c.strip().lower() for c in (rows.fieldnames or [])]
    if "file" not in cols or "player" not in cols:
        raise InputFileError(f"manifest {path} must have a header with columns file,player[,table]; "
                             f"found {', '.join(cols) or 'no header'}")
    out = {}
    for row in rows:
        row = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
        if row.get("file"):
            out[row["file"]] = {"player": row.get("player") or None, "table": row.get("table") or None}
    return out


def _apply_manifest(src: PhotoSource, manifest: dict[str, dict] | None) -> PhotoSource:
    if not manifest:
        return src
    keys = [src.name, src.name.split("!")[-1], PurePosixPath(src.name.replace("!", "/")).name]
    for k in keys:
        if k in manifest:
            m = manifest[k]
            return dataclasses.replace(src, player=m["player"] or src.player,
                                       table=m["table"] or src.table)
    return src


def list_photos(source: str | Path, *, manifest: str | Path | None = None) -> list[PhotoSource]:
    """Every photo under ``source`` (a folder searched recursively, a zip, or one photo).

    Zips found inside the folder are listed too. The order is stable (sorted by name).

    Raises
    ------
    InputFileError
        when ``source`` does not exist or the manifest cannot be read.
    """
    source = Path(source)
    man = load_manifest(manifest) if manifest else None
    if not source.exists():
        raise InputFileError(f"{source} does not exist", hint="Give a folder or a .zip of photos.")
    if source.is_file():
        files, root = [source], source.parent
    else:
        files = sorted(p for p in source.rglob("*") if p.is_file())
        root = source
    out: list[PhotoSource] = []
    for p in files:
        rel = p.relative_to(root).as_posix()
        if p.suffix.lower() == ".zip":
            out.extend(_apply_manifest(s, man) for s in list_zip(p, rel))
        elif is_photo_name(p.name):
            player, table = _guess_names(rel)
            out.append(_apply_manifest(PhotoSource(rel, player, table, path=p), man))
    return out


def iter_photos(source: str | Path, *, manifest: str | Path | None = None) -> Iterator[PhotoItem]:
    """Every photo under ``source``, read (see :func:`list_photos`)."""
    for src in list_photos(source, manifest=manifest):
        yield src.load()
