"""scripts/ab_read.py: paired read times of two checkouts (the parts that need no photos)."""

from __future__ import annotations

import statistics

from _scripts import ROOT, load_script


def _module():
    return load_script("ab_read")


def test_a_folder_that_is_no_checkout_is_refused_with_a_hint(tmp_path, capsys):
    ab = _module()
    assert ab.main([str(ROOT), str(tmp_path)]) == 2
    assert "give a checkout of sheetcheck" in capsys.readouterr().err
    assert ab.main([str(ROOT), str(ROOT), "--rounds", "0"]) == 2


def test_the_interval_holds_the_median_and_narrows_with_more_pairs():
    ab = _module()
    import random
    rng = random.Random(3)
    few = [rng.gauss(-1.0, 3.0) for _ in range(40)]
    many = few + [rng.gauss(-1.0, 3.0) for _ in range(960)]
    for d in (few, many):
        lo, hi = ab._median_ci(d)
        assert lo <= statistics.median(d) <= hi
    (lo1, hi1), (lo2, hi2) = ab._median_ci(few), ab._median_ci(many)
    assert hi2 - lo2 < hi1 - lo1
    assert lo2 < -1.0 < hi2
