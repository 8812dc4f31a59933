"""Batch inputs: folders, zips read safely in memory, manifests; the store; the page's escaping."""

import io
import zipfile

import pytest

from sheetcheck.batch.html import render_index
from sheetcheck.batch.inputs import (MAX_MEMBER_BYTES, list_photos, load_manifest,
                                     read_zip_member)
from sheetcheck.batch.store import Store
from sheetcheck.errors import InputFileError


def _zip(path, members, *, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members.items():
            zf.writestr(name, data)


def test_folders_and_zips_are_listed_with_names(tmp_path):
    (tmp_path / "table1").mkdir()
    (tmp_path / "table1" / "alice.jpg").write_bytes(b"A")
    (tmp_path / "bob.PNG").write_bytes(b"B")
    (tmp_path / "notes.txt").write_text("not a photo")
    _zip(tmp_path / "round2.zip", {"table3/carol.jpg": b"C", "dave.jpeg": b"D", "readme.md": b"x"})
    items = [s.load() for s in list_photos(tmp_path)]
    got = {i.name: (i.player, i.table, i.data) for i in items}
    assert got == {
        "bob.PNG": ("bob", None, b"B"),
        "round2.zip!dave.jpeg": ("dave", "round2", b"D"),
        "round2.zip!table3/carol.jpg": ("carol", "table3", b"C"),
        "table1/alice.jpg": ("alice", "table1", b"A"),
    }
    assert len({i.sha256 for i in items}) == 4


def test_manifest_names_players(tmp_path):
    (tmp_path / "p" / "t9").mkdir(parents=True)
    (tmp_path / "p" / "t9" / "IMG_0001.jpg").write_bytes(b"1")
    (tmp_path / "p" / "t9" / "IMG_0002.jpg").write_bytes(b"2")
    (tmp_path / "p" / "IMG_0003.jpg").write_bytes(b"3")
    man = tmp_path / "m.csv"
    # by relative path, by bare file name (table kept from the folder), and not listed at all
    man.write_text("file,player,table\nt9/IMG_0001.jpg,Alice,T1\nIMG_0002.jpg,Bob,\n")
    got = {s.name: (s.player, s.table) for s in list_photos(tmp_path / "p", manifest=man)}
    assert got == {"t9/IMG_0001.jpg": ("Alice", "T1"), "t9/IMG_0002.jpg": ("Bob", "t9"),
                   "IMG_0003.jpg": ("IMG_0003", None)}
    bad = tmp_path / "bad.csv"
    bad.write_text("name,score\nx,1\n")
    with pytest.raises(InputFileError, match="columns file,player"):
        load_manifest(bad)


def test_missing_source_is_a_clear_error(tmp_path):
    with pytest.raises(InputFileError, match="does not exist"):
        list_photos(tmp_path / "nope")


def test_zip_member_named_outside_stays_a_label(tmp_path):
    _zip(tmp_path / "evil.zip", {"../../escape.jpg": b"E", "/abs/root.jpg": b"R"})
    items = [s.load() for s in list_photos(tmp_path / "evil.zip")]
    assert sorted(i.name for i in items) == ["evil.zip!abs/root.jpg", "evil.zip!escape.jpg"]
    assert all(i.data in (b"E", b"R") for i in items)
    # nothing was extracted anywhere
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["evil.zip"]
    assert not (tmp_path.parent / "escape.jpg").exists()


def test_zip_bomb_is_refused_without_filling_memory(tmp_path):
    # 80 MB of zeros deflate to ~80 kB: over the per-photo cap and a ratio no photo has
    big = b"\0" * (MAX_MEMBER_BYTES + 16 * 1024 * 1024)
    _zip(tmp_path / "bomb.zip", {"bomb.jpg": big, "ok.jpg": b"fine"})
    del big
    items = {i.name: i for i in (s.load() for s in list_photos(tmp_path / "bomb.zip"))}
    assert items["bomb.zip!ok.jpg"].data == b"fine"
    bomb = items["bomb.zip!bomb.jpg"]
    assert bomb.data is None and "limit" in bomb.error and bomb.sha256.startswith("name:")


def test_high_ratio_member_is_refused(tmp_path):
    _zip(tmp_path / "r.zip", {"flat.png": b"\0" * (4 * 1024 * 1024)})
    with zipfile.ZipFile(tmp_path / "r.zip") as zf:
        with pytest.raises(InputFileError, match="zip bomb"):
            read_zip_member(zf, zf.getinfo("flat.png"))


def test_lying_header_is_caught(tmp_path):
    # a member whose header claims 10 bytes but whose data inflates to 3 MB
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("liar.jpg", b"\1" * (3 * 1024 * 1024))
    raw = bytearray(buf.getvalue())
    with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
        info = zf.getinfo("liar.jpg")
        info.file_size = 10  # what a crafted central directory would say
        # zipfile stops at the declared size and the CRC gives the lie away: at most 10 bytes read
        with pytest.raises(zipfile.BadZipFile, match="Bad CRC"):
            read_zip_member(zf, info)


def test_not_a_zip_is_an_error_item(tmp_path):
    (tmp_path / "broken.zip").write_bytes(b"PK\3\4garbage")
    [item] = [s.load() for s in list_photos(tmp_path)]
    assert item.data is None and "not a readable zip" in item.error


def test_store_is_append_only_with_revisions(tmp_path):
    st = Store.in_folder(tmp_path)
    assert st.add({"sha256": "aa", "file": "a.jpg", "verdict": "OK", "score": 5,
                   "readings": {"x": "red"}})
    assert not st.add({"sha256": "aa", "file": "a-again.jpg", "verdict": "ERROR"})
    rev = st.add_revision("aa", {"verdict": "DISCREPANCY", "score": 4,
                                 "corrections": [{"region": "x", "read": "red", "mark": "empty"}]})
    assert rev == 1
    hist = st.history("aa")
    assert [(h["revision"], h["verdict"], h["file"]) for h in hist] == [
        (0, "OK", "a.jpg"), (1, "DISCREPANCY", "a.jpg")]
    assert hist[0]["readings"] == {"x": "red"}
    assert [r["verdict"] for r in st.rows()] == ["DISCREPANCY"]
    assert st.done_hashes() == {"aa"} and st.count() == 1
    assert st.db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with pytest.raises(InputFileError, match="no stored result"):
        st.add_revision("bb", {"verdict": "OK"})
    st.close()


def test_index_escapes_hostile_names(tmp_path):
    evil = '<script>alert("x")</script><img src=x onerror=alert(1)>.jpg'
    rows = [{"sha256": "name:abc", "file": evil, "player": "<b>Mallory</b>", "table_name": None,
             "verdict": "ERROR", "report": None, "error_code": "not_an_image",
             "error": f"{evil} is not an image", "revision": 0}]
    page = render_index(rows, tmp_path)
    assert "<script>" not in page and "<img src=x" not in page and "<b>Mallory" not in page
    assert "&lt;script&gt;" in page and "&lt;b&gt;Mallory&lt;/b&gt;" in page
    assert "ERROR: 1" in page


def test_progress_line_has_rate_and_eta():
    import io as _io
    from sheetcheck.batch.runner import Progress
    buf = _io.StringIO()
    p = Progress(10, stream=buf)
    p.t0 -= 4.0                                   # 4 s ago
    p.update(done=2, skipped=2, errors=1, force=True)
    line = buf.getvalue()
    assert line.endswith("\n") and "\r" not in line  # a log file gets whole lines
    assert "4/10" in line and "0.50 sheets/s" in line and "ETA 0:12" in line
    assert "2 already done, 1 errors" in line
