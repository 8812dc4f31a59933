"""scripts/reader_recipe.sh, dry run: which datasets each recipe fits and calibrates on."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

pytestmark = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _dry(recipe: str, *args: str) -> list[str]:
    env = {**os.environ, "DRY_RUN": "1", "RECIPE": recipe}
    out = subprocess.run(["bash", str(ROOT / "scripts" / "reader_recipe.sh"), *args],
                         env=env, capture_output=True, text=True, check=True).stdout
    return out.splitlines()


def _calib(recipe: str) -> list[str]:
    fit, = [ln for ln in _dry(recipe, "fit", "/w", "0") if "train_reader.py" in ln]
    return re.findall(r"--calib /w/data/(\S+)\.npz", fit)


def test_v15_calibrates_on_the_shipped_readers_own_datasets():
    shipped = json.loads((ROOT / "calibration" / "models" / "reader-v15.json").read_text())
    want = re.findall(r"--calib \S+/(\S+)\.npz", shipped["training"]["command"])
    assert len(want) == 11 and _calib("v15") == want


def test_v16_calibrates_on_spent_measurement_corpora_only():
    """RECIPE=v16 (session 41): the eleven newest spent default corpora, made from their seeds,
    each of which the dataset builder knows as spent (rows that may only calibrate)."""
    from reader_dataset import SPENT_SEED_RANGES

    names = _calib("v16")
    assert len(names) == 11 and all(n.startswith("spent") for n in names)
    made = {}
    for ln in _dry("v16", "corpora", "/w"):
        m = re.search(r"make_corpus\.py --out /w/corp/(\S+)\.partial --painter (\S+) --seed (\d+) "
                      r"--count (\d+)", ln)
        if m:
            made[m.group(1)] = (m.group(2), int(m.group(3)), int(m.group(4)))
    for n in names:
        painter, seed, count = made[n]
        assert painter == "default" and n == f"spent{seed}"
        assert any(lo <= seed and seed + count - 1 <= hi for lo, hi in SPENT_SEED_RANGES), n


def test_patch_recipe_remakes_the_bundled_patch_reader():
    """scripts/patch_recipe.sh (dry run) fits, calibrates and tests on the datasets the bundled
    patch reader names in its own meta, with its id and epochs, so the recipe cannot drift from
    the model it claims to remake."""
    from vision.patch_reader import DEFAULT_PATCH_MODEL, default_patch_reader

    meta = default_patch_reader().meta
    out = subprocess.run(["bash", str(ROOT / "scripts" / "patch_recipe.sh"), "/w"],
                         env={**os.environ, "DRY_RUN": "1"}, capture_output=True, text=True,
                         check=True).stdout.splitlines()
    fit, = [ln for ln in out if "train_patch_reader.py" in ln]

    def listed(flag: str) -> list[str]:
        part = fit.split(f"--{flag} ", 1)[1].split(" --", 1)[0]
        return [Path(p).name for p in part.split()]

    assert listed("fit") == meta["training"]["fit"]
    assert listed("calib") == meta["calibration"]["datasets"]
    assert listed("test") == sorted(meta["validation"])
    assert f"--id {meta['id']} " in fit and meta["id"] == DEFAULT_PATCH_MODEL.stem
    assert f"--out /w/{DEFAULT_PATCH_MODEL.name} " in fit
    assert f"--epochs {meta['training']['epochs']} " in fit
    # every dataset the fit reads is made first from its corpus
    made = {Path(ln.split("--out ", 1)[1].split()[0]).name for ln in out
            if "patch_dataset.py" in ln}
    assert set(listed("fit") + listed("calib") + listed("test")) <= made
