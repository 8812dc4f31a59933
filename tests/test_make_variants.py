"""scripts/make_variants.py: photos the simulator never makes, made from a corpus with truth."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from calibration.template import get_template
from vision.locate import _page_corners, project

from _scripts import load_script


def _script(name: str):
    return load_script(name, register=True)  # (make_corpus's workers find it again by name)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    out = tmp_path_factory.mktemp("corpus")
    mc = _script("make_corpus")
    assert mc.main(["--out", str(out), "--count", "4", "--seed", "41", "--workers", "1",
                    "--set", "output_long_side=900"]) == 0
    return out


def _rgb(p: Path) -> np.ndarray:
    return np.asarray(Image.open(p).convert("RGB")).astype(np.int16)


def _truth(p: Path) -> dict:
    return json.loads(p.with_name(p.name[:-4] + ".truth.json").read_text())


def test_mirrored_flips_the_photo_and_its_truth_geometry(corpus, tmp_path):
    mv = _script("make_variants")
    out = tmp_path / "mirrored"
    assert mv.main(["--from", str(corpus), "--out", str(out), "--kind", "mirrored"]) == 0
    photos = sorted(corpus.glob("*.jpg"))
    assert sorted(p.name for p in out.glob("*.jpg")) == [p.name for p in photos]
    for p in photos:
        a, b = _rgb(p), _rgb(out / p.name)
        assert np.abs(b - a[:, ::-1]).mean() < 3.0  # (JPEG again, nothing else)
        assert np.abs(b - a).mean() > 5.0  # (a page on a table is not symmetric)
        t0, t1 = _truth(p), _truth(out / p.name)
        assert t1["marks"] == t0["marks"] and t1["variant"] == {"kind": "mirrored"}
        w = a.shape[1]
        c0 = np.asarray(t0["page_corners_px"])
        c1 = np.asarray(t1["page_corners_px"])
        assert np.allclose(c1[:, 0], w - 1 - c0[:, 0], atol=1e-2) and np.allclose(c1[:, 1], c0[:, 1])
        # the flipped homography puts the page where the flipped photo has it
        t = get_template(t1["template"])
        H = np.asarray(t1["homography"])
        assert np.abs(project(H, _page_corners(t)) - c1).max() < 0.02 * w


def _made(corpus: Path, out: Path, kind: str, seed: int):
    """Run ``make_variants.py --kind kind --seed seed`` on the corpus into ``out``: each photo's
    (original pixels, changed pixels, changed truth), its marks checked to be the sheet's."""
    mv = _script("make_variants")
    assert mv.main(["--from", str(corpus), "--out", str(out), "--kind", kind,
                    "--seed", str(seed)]) == 0
    for p in sorted(corpus.glob("*.jpg")):
        t1 = _truth(out / p.name)
        assert t1["marks"] == _truth(p)["marks"]
        yield _rgb(p), _rgb(out / p.name), t1


def _made_again_the_same(corpus: Path, out: Path, kind: str, seed: int) -> None:
    again = out.with_name(out.name + "-again")
    list(_made(corpus, again, kind, seed))
    for p in sorted(out.glob("*")):
        assert (again / p.name).read_bytes() == p.read_bytes()


def test_coffee_stains_darken_the_page_only_where_the_stain_is(corpus, tmp_path):
    out = tmp_path / "coffee"
    for a, b, t1 in _made(corpus, out, "coffee", 3):
        ring = t1["variant"]["ring"]
        assert t1["variant"]["kind"] == "coffee" and 35 <= ring["radius_mm"] <= 45
        # stained pixels are darker, mostly in blue (coffee absorbs blue most); none lighter
        d = (b - a).astype(float)
        stained = d.sum(axis=2) < -30
        assert stained.mean() > 0.0005
        assert (d[stained][:, 2] < d[stained][:, 0]).mean() > 0.9
        assert (d.sum(axis=2) > 30).mean() < 0.001
        # and they lie on the ring (or the blot), in template mm
        H = np.asarray(t1["homography"])
        ys, xs = np.nonzero(stained)
        mm = project(np.linalg.inv(H), np.stack([xs, ys], 1).astype(float))
        r = np.hypot(mm[:, 0] - ring["centre_mm"][0], mm[:, 1] - ring["centre_mm"][1])
        on_ring = np.abs(r - ring["radius_mm"] + ring["width_mm"] / 2) < ring["width_mm"] + 3
        if t1["variant"]["blot"] is None:
            assert on_ring.mean() > 0.95
        else:
            assert on_ring.mean() > 0.3
    _made_again_the_same(corpus, out, "coffee", 3)


def test_a_pencil_lies_on_the_page_along_its_recorded_line(corpus, tmp_path):
    """``--kind pencil``: a coloured pencil's body (and its shadow) changes the photo only on a
    band along the line its truth records; the body's lit face is of the recorded pencil's
    colour; the sheet's marks stay the truth's; the same arguments give the same files."""
    mv = _script("make_variants")
    out = tmp_path / "pencil"
    for a, b, t1 in _made(corpus, out, "pencil", 5):
        var = t1["variant"]
        assert var["kind"] == "pencil" and var["colour"] in mv.PENCIL_BODY_RGB
        assert 110 <= var["length_mm"] <= 175 and 6.8 <= var["width_mm"] <= 8.0
        changed = np.abs(b - a).sum(axis=2) > 40
        assert changed.mean() > 0.002
        H = np.asarray(t1["homography"])
        ys, xs = np.nonzero(changed)
        mm = project(np.linalg.inv(H), np.stack([xs, ys], 1).astype(float))
        ang = np.radians(var["angle_deg"])
        d, nrm = np.array([np.cos(ang), np.sin(ang)]), np.array([-np.sin(ang), np.cos(ang)])
        rel = mm - np.asarray(var["blunt_end_mm"])
        along, across = rel @ d, rel @ nrm
        reach = var["width_mm"] / 2 + var["shadow"]["offset_mm"] + 3.0
        near = (np.abs(across) <= reach) & (along >= -4) & (along <= var["length_mm"] + 4)
        assert near.mean() > 0.97
        # the lit face on the body (away from the cone): the pencil's colour, as the photo's
        # light shows it (its strongest channel the body's)
        body = (np.abs(across) < 0.2 * var["width_mm"]) & (along > 5) & \
            (along < var["length_mm"] - var["cone_mm"] - 5)
        if body.sum() > 20:
            rgb = b[ys[body], xs[body]].mean(axis=0)
            assert int(np.argmax(rgb)) == int(np.argmax(mv.PENCIL_BODY_RGB[var["colour"]]))
    _made_again_the_same(corpus, out, "pencil", 5)


def test_a_thumb_holds_the_page_at_an_edge_over_a_region_near_it(corpus, tmp_path):
    """``--kind thumb``: a skin-coloured capsule reaching in from the nearest edge of the sheet
    changes the photo only around its recorded axis (and its shadow), up to its round tip,
    which lies within 20-55 mm of the edge it came from; the sheet's marks stay the truth's;
    the same arguments give the same files."""
    mv = _script("make_variants")
    out = tmp_path / "thumb"
    for a, b, t1 in _made(corpus, out, "thumb", 7):
        var = t1["variant"]
        assert var["kind"] == "thumb" and tuple(var["skin"]) in mv.SKIN_RGB
        assert 16 <= var["width_mm"] <= 22 and 20 <= var["reach_mm"] <= 55
        t = get_template(t1["template"])
        tip, d = np.asarray(var["tip_mm"]), np.asarray(var["direction"])
        # back along its axis from the tip, the sheet's edge is reach_mm away (+- its tilt)
        back = tip - d * np.arange(0, 200, 0.5)[:, None]
        out_at = np.flatnonzero((back[:, 0] < 0) | (back[:, 0] > t.width_mm) |
                                (back[:, 1] < 0) | (back[:, 1] > t.height_mm))[0] * 0.5
        assert var["reach_mm"] - 1 <= out_at <= var["reach_mm"] / np.cos(np.radians(30)) + 1
        changed = np.abs(b - a).sum(axis=2) > 40
        assert changed.mean() > 0.001
        H = np.asarray(t1["homography"])
        ys, xs = np.nonzero(changed)
        mm = project(np.linalg.inv(H), np.stack([xs, ys], 1).astype(float))
        rel = mm - tip
        along, across = rel @ d, rel @ np.array([-d[1], d[0]])
        reach = var["width_mm"] / 2 + var["shadow"]["offset_mm"] + 3.0
        near = (np.abs(across) <= reach) & (along <= var["width_mm"] / 2 + 3.0)
        assert near.mean() > 0.97
    _made_again_the_same(corpus, out, "thumb", 7)


def test_an_empty_folder_is_refused_with_a_message(tmp_path, capsys):
    mv = _script("make_variants")
    assert mv.main(["--from", str(tmp_path), "--out", str(tmp_path / "o"), "--kind", "coffee"]) == 2
    assert "no photos" in capsys.readouterr().err
