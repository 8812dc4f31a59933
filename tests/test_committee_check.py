"""scripts/committee_check.py: the bundled reader's verdicts from dataset rows must be the
reader's own, region for region, on real photos (bundled samples, read end to end)."""

import json
import shutil
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import committee_check  # noqa: E402
import reader_dataset  # noqa: E402
from vision.learned import DEFAULT_MODEL, default_model  # noqa: E402
from vision.light import tone_correction_for  # noqa: E402
from vision.marks import MARKS  # noqa: E402
from vision.pipeline import read_photo  # noqa: E402

SAMPLES = ("crypts-1-easy-s1", "crypts-1-typical-s3", "crypts-1-hard-s2")


def test_verdicts_from_dataset_rows_are_the_readers_own(tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for stem in SAMPLES:
        for ext in (".jpg", ".truth.json"):
            shutil.copy(ROOT / "sample_photos" / f"{stem}{ext}", corpus / f"{stem}{ext}")
    npz = tmp_path / "rows.npz"
    # (the rows read in the light the bundled reader reads in: reader-v11 with the tone correction)
    tone = "on" if tone_correction_for(default_model()) else "off"
    import vision.light
    switch = vision.light.TONE_CORRECTION
    assert reader_dataset.main([str(corpus), "--out", str(npz), "--workers", "1", "--tone", tone]) == 0
    assert vision.light.TONE_CORRECTION is switch  # (the caller's setting left as it was)
    d = dict(np.load(npz, allow_pickle=False))
    assert len(d["photos"]) == len(SAMPLES)

    sure, mark = committee_check.verdicts(default_model(), d)
    compared = flagged = 0
    for k, photo in enumerate(d["photos"]):
        # the bundled reader, committee and all (the two readers' own verdicts: no third opinion)
        reading = read_photo(str(photo), patch_reader=None)
        rows = np.flatnonzero(d["photo"] == k)
        for i in rows:
            r = reading.readings[str(d["region"][i])]
            assert MARKS[mark[i]] == r.mark, (photo, d["region"][i])
            assert bool(sure[i]) == (not r.review), (photo, d["region"][i], r.reason)
            compared += 1
            flagged += int(r.review)
    # every region of the three photos, and both verdicts seen (the hard photo flags many)
    assert compared == len(d["y"]) > 200 and 0 < flagged < compared

    s = committee_check.summary(d, sure, mark)
    assert s["regions"] == compared and s["flagged"] == flagged
    assert s["easy_typical_sheets"] == 2
    out = tmp_path / "check.json"
    assert committee_check.main([str(DEFAULT_MODEL), str(npz), "--json", str(out)]) == 0
    assert json.loads(out.read_text())["all"]["flagged"] == flagged
    # a dataset read in another light is refused, not judged
    other = tmp_path / "other.npz"
    np.savez(other, **{**d, "tone_correction": np.bool_(tone != "on")})
    assert committee_check.main([str(DEFAULT_MODEL), str(other)]) == 2
