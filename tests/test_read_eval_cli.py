"""`sheetcheck read` and `sheetcheck eval`: output shapes, many photos per run, errors."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibration.template import get_template
from sheetcheck.cli import main
from sheetcheck.simulator import random_marks, simulate_photo
from vision.patch_reader import DEFAULT_PATCH_MODEL


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Two small simulated photos with truth, as `sheetcheck simulate` writes them."""
    d = tmp_path_factory.mktemp("photos")
    for k, (tid, preset) in enumerate((("crypts-1", "easy"), ("reefs-3", "typical"))):
        t = get_template(tid)
        ph = simulate_photo(t, random_marks(t, np.random.default_rng(40 + k)), seed=40 + k,
                            preset=preset, overrides={"output_long_side": 1600})
        (d / f"p{k}.jpg").write_bytes(ph.jpeg)
        (d / f"p{k}.truth.json").write_text(json.dumps(ph.truth))
    return d


def test_read_json_one_line_per_photo_and_errors_do_not_stop_the_run(folder, tmp_path, capsys):
    bad = tmp_path / "notes.jpg"
    bad.write_text("not a photo at all")
    code = main(["read", str(folder / "p0.jpg"), str(bad), str(folder / "p1.jpg"), "--json"])
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 3
    docs = [json.loads(line) for line in lines]
    assert docs[0]["format"] == "sheetcheck.read/1" and docs[0]["template"] == "crypts-1"
    assert docs[1]["error"]["code"] == "not_an_image" and docs[1]["photo"] == str(bad)
    assert docs[2]["template"] == "reefs-3"
    assert code == 31  # the first failure's exit code, after reading every photo
    r = next(iter(docs[2]["regions"].values()))
    assert {"mark", "confidence", "review"} <= set(r)


def test_a_black_and_white_photo_is_refused_with_its_own_code(folder, tmp_path, capsys):
    """A sheet in a black-and-white photo (a mono filter, a greyscale scan) is found, then
    refused: no reader can tell its pencils apart, and readings of it would be guesses."""
    import io

    from PIL import Image

    from sheetcheck.errors import NoColourError
    from vision.pipeline import read_photo
    mono = tmp_path / "mono.jpg"
    with Image.open(folder / "p0.jpg") as im:
        buf = io.BytesIO()
        im.convert("L").save(buf, "JPEG", quality=90)
    mono.write_bytes(buf.getvalue())
    with pytest.raises(NoColourError, match=r"black and white.*crypts-1.*mono"):
        read_photo(mono)
    code = main(["read", str(mono), str(folder / "p1.jpg"), "--json"])
    docs = [json.loads(line) for line in capsys.readouterr().out.strip().splitlines()]
    assert docs[0]["error"]["code"] == "no_colour" and docs[0]["photo"] == str(mono)
    assert docs[1]["template"] == "reefs-3"  # the next photo is still read
    assert code == NoColourError.exit_code == 38
    # in text, among several photos, each refusal names its photo (once)
    bad = tmp_path / "notes.jpg"
    bad.write_text("not a photo at all")
    main(["read", str(mono), str(bad)])
    err = capsys.readouterr().err.strip().splitlines()
    assert err[0].startswith(f"sheetcheck read: {mono}: the photo is black and white")
    assert err[1].startswith(f"sheetcheck read: photo {str(bad)!r} is not an image")


def test_read_text_names_template_location_and_every_region(folder, capsys):
    assert main(["read", str(folder / "p0.jpg")]) == 0
    out = capsys.readouterr().out
    assert "crypts-1 v1.0.0" in out and "located by markers" in out
    for r in get_template("crypts-1").readable_regions():
        assert r.id in out


def test_read_missing_file_gets_a_clear_message(tmp_path, capsys):
    code = main(["read", str(tmp_path / "nope.jpg")])
    err = capsys.readouterr().err
    assert code == 50 and "nope.jpg" in err and "Traceback" not in err


def test_read_debug_dir_writes_stage_pictures(folder, tmp_path, capsys):
    assert main(["read", str(folder / "p0.jpg"), "--debug-dir", str(tmp_path / "dbg")]) == 0
    names = {p.name for p in (tmp_path / "dbg").iterdir()}
    assert {"p0.rectified.png", "p0.light.png", "p0.overlay.png", "p0.read.json"} <= names


def test_eval_reports_accuracy_confusion_and_confident_errors(folder, tmp_path, capsys):
    out_json = tmp_path / "eval.json"
    assert main(["eval", str(folder), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    for word in ("region accuracy", "per kind", "per preset", "per colour", "CONFIDENT ERRORS",
                 "sheets with nothing flagged", "median total / decode"):
        assert word in text
    res = json.loads(out_json.read_text())
    assert res["photos"] == 2 and res["photos_failed"] == 0
    n = sum(len(json.loads((folder / f"p{k}.truth.json").read_text())["marks"]) for k in range(2))
    assert res["regions"] == n == res["accuracy"]["total"]
    assert set(res["by_preset"]) == {"easy", "typical"}
    # the flags per kind, preset and template add up to the regions flagged; the empty regions
    # per kind to the truth's empties (the confusion matrix's row)
    for key in ("by_kind", "by_preset", "by_template", "by_markers"):
        assert sum(v["flagged"] for v in res[key].values()) == res["regions_flagged"]["count"]
        assert sum(v["empty"] for v in res[key].values()) == res["by_colour"]["empty"]["total"]
        for v in res[key].values():
            assert 0 <= v["empty_flagged"] <= min(v["empty"], v["flagged"]) <= v["total"]
    assert res["accuracy"]["flagged"] == res["regions_flagged"]["count"]
    assert "flagged" in text.split("per kind:")[1].splitlines()[1]
    assert res["confident_errors"]["count"] == len(res["confident_errors"]["list"])
    # every truth row of the confusion matrix adds up to that mark's count
    for t, row in res["confusion"]["matrix"].items():
        assert sum(row.values()) == res["by_colour"][t]["total"]
    assert res["timings_ms_median"]["total_over_decode"] > 1.0
    pair = res["hard_pairs"]["all"]["orange/red"]
    assert pair["regions"] == sum(res["by_colour"].get(c, {"total": 0})["total"] for c in ("orange", "red"))
    assert "hard pairs (all): orange/red" in text


def test_eval_counts_an_unreadable_photo_as_failed_and_flagged(folder, tmp_path, capsys):
    d = tmp_path / "mixed"
    d.mkdir()
    (d / "a.jpg").write_bytes((folder / "p0.jpg").read_bytes())
    (d / "a.truth.json").write_text((folder / "p0.truth.json").read_text())
    (d / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (d / "b.truth.json").write_text((folder / "p1.truth.json").read_text())
    out_json = tmp_path / "e.json"
    assert main(["eval", str(d), "--json", str(out_json)]) == 0
    res = json.loads(out_json.read_text())
    assert res["photos_failed"] == 1 and res["failed"][0]["photo"] == "b.jpg"
    assert res["failed"][0]["code"] in ("corrupt_image", "not_an_image")
    assert res["errors_flagged"] >= res["failed"][0]["regions"]


def test_eval_on_an_empty_folder_says_what_to_do(tmp_path, capsys):
    code = main(["eval", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 50 and "no photo with a NAME.truth.json" in err and "sheetcheck simulate" in err


def _one_photo(folder, tmp_path):
    """A folder holding the first photo of ``folder`` and its truth."""
    one = tmp_path / "one"
    one.mkdir()
    for name in ("p0.jpg", "p0.truth.json"):
        (one / name).write_bytes((folder / name).read_bytes())
    return one


def test_eval_reads_with_another_reader_model_when_asked(folder, tmp_path, capsys):
    from vision.learned import DEFAULT_MODEL, MODEL_DIR
    one = _one_photo(folder, tmp_path)
    out_json = tmp_path / "v1.json"
    assert main(["eval", str(one), "--reader", str(MODEL_DIR / "reader-v1.json"),
                 "--json", str(out_json)]) == 0
    assert (f"(reader reader-v1, patch reader {DEFAULT_PATCH_MODEL.stem})"
            in capsys.readouterr().out)
    assert json.loads(out_json.read_text())["reader"]["id"] == "reader-v1"
    assert main(["eval", str(one), "--json", str(out_json)]) == 0
    assert json.loads(out_json.read_text())["reader"]["id"] == DEFAULT_MODEL.stem
    # a model file that is not there: a clear message and the reader-model exit code
    code = main(["eval", str(one), "--reader", str(tmp_path / "nope.json")])
    err = capsys.readouterr().err
    assert code == 22 and "nope.json" in err


def test_eval_lists_every_wrong_reading_and_why_regions_were_flagged(folder, tmp_path, capsys):
    """The JSON lists each sheet's wrong readings (what the truth says, what was read, how
    sure, flagged or not, why) and counts the flags by reason. A truth file that names other
    marks than were drawn makes wrong readings whose every field is known."""
    d = tmp_path / "changed"
    d.mkdir()
    (d / "a.jpg").write_bytes((folder / "p1.jpg").read_bytes())
    truth = json.loads((folder / "p1.truth.json").read_text())
    assert main(["read", str(d / "a.jpg"), "--json"]) == 0
    read = json.loads(capsys.readouterr().out)["regions"]
    changed = {}
    for rid in sorted(truth["marks"])[:40]:
        other = next(m for m in ("purple", "orange", "empty") if m != read[rid]["mark"]
                     and m in get_template("reefs-3").region(rid).marks)
        changed[rid] = other
    truth["marks"].update(changed)
    (d / "a.truth.json").write_text(json.dumps(truth))
    (d / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 truncated")
    (d / "b.truth.json").write_text((folder / "p0.truth.json").read_text())
    out_json = tmp_path / "e.json"
    assert main(["eval", str(d), "--json", str(out_json)]) == 0
    text = capsys.readouterr().out
    res = json.loads(out_json.read_text())
    sheet = next(s for s in res["sheets"] if s["photo"] == "a.jpg")
    wrong = {w["region"]: w for w in sheet["wrong_readings"]}
    assert len(wrong) == sheet["errors"] >= len(changed)
    for rid, t in changed.items():
        w = wrong[rid]
        assert (w["truth"], w["read"]) == (t, read[rid]["mark"])
        assert w["confidence"] == round(read[rid]["confidence"], 4)
        assert w["review"] == read[rid]["review"]
        assert w.get("reason") == read[rid].get("reason")
        assert w["kind"] == get_template("reefs-3").region(rid).kind
    # every flagged region has one reason; the photo not read counts all its regions
    reasons = res["flag_reasons"]["all"]
    assert sum(reasons.values()) == res["regions_flagged"]["count"]
    n_b = len(json.loads((folder / "p0.truth.json").read_text())["marks"])
    assert reasons["photo not read"] == n_b
    flagged_a = sum(1 for r in read.values() if r["review"])
    assert sum(v for k, v in reasons.items() if k != "photo not read") == flagged_a
    assert all("(" not in k for k in reasons)
    assert "flagged: photo not read" in text


def test_eval_and_read_without_the_patch_reader_when_asked(folder, tmp_path, capsys):
    one = _one_photo(folder, tmp_path)
    out_json = tmp_path / "e.json"
    assert main(["eval", str(one), "--no-patch-reader", "--json", str(out_json)]) == 0
    assert ", no patch reader)" in capsys.readouterr().out
    assert json.loads(out_json.read_text())["reader"]["patch_reader"] is None
    assert main(["read", str(one / "p0.jpg"), "--json", "--no-patch-reader"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["details"]["patch_reader"] is None
    assert doc["details"]["reader"]["patch_reader"] is None
    assert main(["read", str(one / "p0.jpg"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["details"]["patch_reader"]["model"] == DEFAULT_PATCH_MODEL.stem
    assert doc["details"]["reader"]["patch_reader"]["watches"] == ["crossed"]
    assert "symbol" in doc["details"]["reader"]["patch_reader"]["watches_empty_in"]
    assert doc["details"]["reader"]["patch_reader"]["engine"] in ("cv2.dnn", "numpy")
