"""``sheetcheck bench read``: its rounds time every photo several times, side by side."""

from __future__ import annotations

import statistics

import pytest

from sheetcheck.bench import read as bench_read
from sheetcheck.cli import main


@pytest.fixture(scope="module")
def two_photos():
    return bench_read.make_photos(2, seed=9000)


def test_rounds_time_every_photo_that_many_times(two_photos):
    res = bench_read.bench(two_photos, rounds=2)
    assert res["format"] == bench_read.BENCH_FORMAT and res["rounds"] == 2
    per = res["per_photo"]
    names = [n for n, _ in two_photos]
    assert [(p["photo"], p["round"]) for p in per] == [(n, r) for r in (0, 1) for n in names]
    # the medians are over every pair of every round
    assert res["median_read_ms"] == pytest.approx(
        statistics.median(p["read_ms"] for p in per), abs=0.06)
    assert res["median_full_decode_ms"] == pytest.approx(
        statistics.median(p["decode_ms"] for p in per), abs=0.06)
    assert res["ratio_read_over_decode"] == pytest.approx(
        res["median_read_ms"] / res["median_full_decode_ms"], rel=2e-3)
    assert all(p["read_ms"] > 0 and p["decode_ms"] > 0 and p["read_one_core_ms"] > 0
               for p in per)


def test_rounds_below_one_are_refused_with_a_hint(capsys):
    assert main(["bench", "read", "--count", "1", "--rounds", "0"]) != 0
    err = capsys.readouterr().err
    assert "--rounds must be at least 1" in err and "Try --rounds 3" in err
