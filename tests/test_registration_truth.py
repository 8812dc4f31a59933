"""scripts/registration_truth.py: the rectified sheet against the simulator's true geometry."""

from __future__ import annotations

from pathlib import Path

import pytest

from calibration.template import get_template

from _scripts import load_script

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rt():
    return load_script("registration_truth", register=True)


def test_a_sample_photo_is_registered_within_a_pixel_and_its_map_is_put_back(rt):
    import vision.rectify as R
    before = R._photo_maps
    photo = ROOT / "sample_photos" / "crypts-2-typical-s2.jpg"
    r = rt.measure(photo)
    assert R._photo_maps is before  # (the capture is undone)
    assert r["template"] == "crypts-2"
    assert r["regions"] == len(get_template("crypts-2").readable_regions())
    # the refined sheet: every region's centre within a fraction of a px of the truth
    assert r["median_px"] < 0.6 and r["p90_px"] < 1.0
    assert 0 < r["residual_px"] < 1.0
    # the homography alone is worse there (the refinement does something measurable)
    plain = rt.measure(photo, refine=False)
    assert plain["median_px"] > r["median_px"]


def test_the_summary_groups_photos_by_residual(rt):
    rows = [{"photo": f"p{i}", "residual_px": res, "median_px": med, "shift_px": [0.1, 0.2],
             "median_without_shift_px": med / 2}
            for i, (res, med) in enumerate([(0.3, 0.4), (0.5, 0.5), (0.7, 0.3), (0.9, 0.35)])]
    rows.append({"photo": "bad", "error": "NoSheetFoundError: ..."})
    s = rt.summary(rows)
    assert s["photos"] == 4 and s["failed"] == 1
    assert s["median_shift_px"] == [0.1, 0.2]
    assert [b["photos"] for b in s["by_residual"]] == [1, 1, 1, 1]
    assert s["by_residual"][3]["residual_px"] == [0.8, 1.0]
    assert s["by_residual"][3]["median_px"] == 0.35
    assert -1 <= s["correlation_residual_error"] <= 1


def test_a_folder_without_truth_files_is_refused(rt, tmp_path, capsys):
    (tmp_path / "x.jpg").write_bytes(b"")
    assert rt.main([str(tmp_path)]) == 2
    assert "no photo with a NAME.truth.json" in capsys.readouterr().err
