"""``sheetcheck check`` and ``sheetcheck batch`` on the command line, with the real reader."""

import json

import numpy as np
import pytest
from PIL import Image

from calibration.template import get_template
from scoring.registry import engine_for
from sheetcheck.cli import main
from sheetcheck.simulator import simulate_photo


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    t = get_template("crypts-2")
    e = engine_for(t.game)
    st = e.simulate_game(t, seed=11)
    for name, state in (("legal", st),
                        ("cheat", e.inject_violation(st, "bonus_unearned", np.random.default_rng(1)))):
        p = simulate_photo(t, e.state_to_marks(state), seed=11, preset="easy",
                           overrides={"output_long_side": 1400})
        (d / f"{name}.jpg").write_bytes(p.jpeg)
        (d / f"{name}.marks.json").write_text(json.dumps(e.state_to_marks(state)))
    return d


def _check(capsys, *argv):
    rc = main(["check", *map(str, argv)])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_check_json_exit_code_and_overlay(photos, capsys, tmp_path):
    ov = tmp_path / "o.png"
    rc, out, _ = _check(capsys, photos / "cheat.jpg", "--json", "--overlay", ov)
    doc = json.loads(out)
    assert doc["format"] == "sheetcheck.report/1" and rc == doc["exit_code"]
    assert doc["verdict"] in ("DISCREPANCY", "NEEDS REVIEW") and rc in (3, 4)
    if doc["verdict"] == "DISCREPANCY":
        assert doc["total"]["difference"] == 5 and "crypts.bonus_unearned" in {
            f["rule"] for f in doc["findings"]}
    im = Image.open(ov)
    assert im.size[0] > im.size[1] > 300 and doc["overlay"] == str(ov)


def test_check_text_and_default_overlay_beside_photo(photos, capsys):
    rc, out, _ = _check(capsys, photos / "legal.jpg")
    assert "TOTAL" in out and "breakdown" in out and out.strip().splitlines()[-1].startswith("overlay")
    assert (photos / "legal.overlay.png").exists()
    assert rc in (0, 4)  # OK, or a flagged region a person must look at
    assert ("OK:" in out) == (rc == 0) and ("NEEDS REVIEW:" in out) == (rc == 4)


def test_fix_is_applied_and_recorded(photos, capsys, tmp_path):
    truth = json.loads((photos / "legal.marks.json").read_text())
    box = next(r for r in sorted(truth) if r.startswith("points.") and truth[r] != "empty")
    # a person "corrects" a coloured box to empty: the claim drops, the report records it
    rc, out, _ = _check(capsys, photos / "legal.jpg", "--json", "--fix", f"{box}=empty",
                        "--overlay", tmp_path / "x.png")
    doc = json.loads(out)
    assert doc["corrections"][0]["region"] == box and doc["corrections"][0]["mark"] == "empty"
    assert doc["readings"][box]["mark"] == "empty"
    assert rc in (3, 4) and doc["verdict"] != "OK"


def test_bad_fix_is_a_clear_error(photos, capsys, tmp_path):
    rc, out, err = _check(capsys, photos / "legal.jpg", "--fix", "cell.r1.c1=pink",
                          "--fix", "nowhere=red", "--overlay", tmp_path / "x.png")
    assert rc == 40 and out == ""
    assert "cannot carry 'pink'" in err and "no region 'nowhere'" in err and "Traceback" not in err


def test_missing_and_bad_photos_are_clear_errors(tmp_path, capsys):
    rc, _, err = _check(capsys, tmp_path / "nope.jpg")
    assert rc == 50 and "does not exist" in err
    (tmp_path / "junk.jpg").write_bytes(b"not a photo at all")
    rc, _, err = _check(capsys, tmp_path / "junk.jpg")
    assert rc in (31, 32) and "Traceback" not in err


def test_batch_command(photos, tmp_path, capsys):
    (tmp_path / "in").mkdir()
    for n in ("legal", "cheat"):
        (tmp_path / "in" / f"{n}.jpg").write_bytes((photos / f"{n}.jpg").read_bytes())
    (tmp_path / "in" / "junk.jpg").write_bytes(b"junk")
    rc = main(["batch", str(tmp_path / "in"), "--out", str(tmp_path / "rep"), "--workers", "1"])
    out = capsys.readouterr()
    assert rc == 1  # one photo could not be checked: reported, not fatal
    assert "3 photos: 3 checked" in out.err and "sheets/s" in out.err
    assert "ETA" in out.err  # the progress bar
    assert (tmp_path / "rep" / "index.html").exists()
    rows = json.loads((tmp_path / "rep" / "results.json").read_text())["results"]
    assert sorted(r["verdict"] == "ERROR" for r in rows) == [False, False, True]
    rc = main(["batch", str(tmp_path / "in"), "--out", str(tmp_path / "rep"), "--no-progress"])
    assert "0 checked" in capsys.readouterr().err and rc == 0
