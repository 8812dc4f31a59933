"""The light stage's per-channel tone correction (vision.light: tone_exponents, print_pixels,
normalise_light(print_pixels=...)): a camera tone curve that bends each channel differently
after a colour cast leaves the cast in the darks; the black print tells by how much."""

from __future__ import annotations

import numpy as np
import pytest

import vision.light as light
from vision.colour import SRGB_TO_LINEAR, linear_to_srgb
from vision.light import normalise_light, print_pixels, tone_exponents

H, W = 120, 160


def _page(power, cast=(1.0, 0.8, 0.45), noise=0.0, seed=0):
    """A synthetic rectified page: paper (reflectance 1) with black print bars (0.03), a
    mid-grey patch (0.25, not print) and a blue pencil patch, photographed under ``cast``
    through a per-channel tone curve ``(cast * reflectance) ** power`` (in linear RGB).
    Returns the sRGB image, the paper mask, the print's flat indices and the patches' masks."""
    refl = np.ones((H, W, 3))
    prn = np.zeros((H, W), bool)
    for r in range(10, H - 10, 20):  # horizontal bars, 4 px thick
        prn[r:r + 4, 10:W - 10] = True
    prn[60:100, 10:40] = True  # a solid block (a marker)
    refl[prn] = 0.03
    grey = np.zeros((H, W), bool)
    grey[36:46, 60:100] = True
    refl[grey] = 0.25
    blue = np.zeros((H, W), bool)
    blue[76:86, 60:100] = True
    refl[blue] = (0.08, 0.12, 0.45)
    lin = (refl * np.asarray(cast)) ** np.asarray(power)
    if noise:
        lin = lin * (1 + np.random.default_rng(seed).normal(0, noise, lin.shape))
    img = linear_to_srgb(np.clip(lin, 0, 1).astype(np.float32))
    paper = ~(prn | grey | blue)
    return img, paper, np.flatnonzero(prn), grey, blue


def _chroma(rgb):
    """Spread of the channels relative to their mean (0 = colourless)."""
    rgb = np.asarray(rgb, float)
    return float((rgb.max() - rgb.min()) / rgb.mean())


def test_known_tone_curve_gives_colourless_print_and_keeps_paper():
    power = (0.85, 1.0, 1.15)  # the camera bends red least, blue most: the print comes out red
    img, paper, prn, grey, _ = _page(power)
    plain = normalise_light(img, paper_mask=paper)
    fixed = normalise_light(img, paper_mask=paper, print_pixels=prn)
    ink_before = np.median(plain.sample(prn), axis=0)
    ink_after = np.median(fixed.sample(prn), axis=0)
    assert ink_before[0] > 1.5 * ink_before[2]  # precondition: the division left it red
    assert _chroma(ink_after) < 0.05, ink_after
    # the exponents undo the curve: g_c * p_c is the same for every channel
    g = np.asarray(fixed.tone)
    assert np.ptp(g * np.asarray(power)) < 0.03, g
    # paper stays white and a grey the fit never saw comes out grey too
    paper_idx = np.flatnonzero(paper)
    assert np.allclose(np.median(fixed.sample(paper_idx), axis=0), 1, atol=0.02)
    assert _chroma(np.median(fixed.sample(np.flatnonzero(grey)), axis=0)) < 0.05
    assert _chroma(np.median(plain.sample(np.flatnonzero(grey)), axis=0)) > 0.3
    # the full image agrees with the sampled pixels
    assert np.allclose(fixed.linear.reshape(-1, 3)[prn], fixed.sample(prn), rtol=1e-4, atol=1e-6)


def test_neutral_photo_is_left_unchanged():
    img, paper, prn, _, blue = _page((1.0, 1.0, 1.0), cast=(1.0, 0.8, 0.45), noise=0.01)
    plain = normalise_light(img, paper_mask=paper)
    fixed = normalise_light(img, paper_mask=paper, print_pixels=prn)
    assert fixed.tone == (1.0, 1.0, 1.0)  # within the dead band: exactly as before
    idx = np.flatnonzero(blue)
    assert np.array_equal(fixed.sample(idx), plain.sample(idx))


def test_weak_print_evidence_gives_no_correction():
    img, paper, prn, _, _ = _page((0.85, 1.0, 1.15))
    few = prn[:: max(1, prn.size // 200)]  # 200 print pixels: too few to measure
    assert normalise_light(img, paper_mask=paper, print_pixels=few).tone == (1.0, 1.0, 1.0)
    # the print washed out (glare over it): lighter than the fit trusts
    lin = SRGB_TO_LINEAR[img].astype(np.float64)
    washed = lin.copy()
    flat = washed.reshape(-1, 3)
    flat[prn] = 0.6 + 0.4 * flat[prn]
    img2 = linear_to_srgb(washed.astype(np.float32))
    assert normalise_light(img2, paper_mask=paper, print_pixels=prn).tone == (1.0, 1.0, 1.0)
    # clipped channels are not evidence
    srgb = np.full((5000, 3), 255, np.uint8)
    srgb[:, 2] = 40
    lin5 = SRGB_TO_LINEAR[srgb].astype(np.float64) * 0.5
    assert tone_exponents(srgb, lin5) == (1.0, 1.0, 1.0)


def test_exponents_are_bounded():
    rng = np.random.default_rng(1)
    grey = rng.uniform(0.02, 0.5, 4000)
    lin = np.stack([grey ** 0.3, grey, grey ** 3], axis=1)  # no camera bends this much
    srgb = linear_to_srgb(lin.astype(np.float32)).reshape(-1, 3)
    g = tone_exponents(srgb, lin)
    assert g[0] == pytest.approx(light._TONE_BOUNDS[1]) and g[2] == pytest.approx(light._TONE_BOUNDS[0])


def test_bad_input_is_refused():
    img, paper, prn, _, _ = _page((0.85, 1.0, 1.15))
    with pytest.raises(ValueError, match="flat indices"):
        normalise_light(img, paper_mask=paper, print_pixels=np.array([H * W + 5]))
    with pytest.raises(ValueError, match=r"must both be \(N, 3\)"):
        tone_exponents(np.zeros((10, 3), np.uint8), np.zeros((10, 2)))


def test_print_pixels_of_a_sheet_model(monkeypatch):
    from calibration.template import get_template
    from vision.pipeline import sheet_model

    model = sheet_model(get_template("crypts-1"), dpi=40)
    monkeypatch.setattr(light, "TONE_CORRECTION", False)
    assert print_pixels(model) is None  # off: the light stage is as before
    monkeypatch.setattr(light, "TONE_CORRECTION", True)
    idx = print_pixels(model)
    assert idx is print_pixels(model)  # cached: the same array, so its taps are cached too
    assert 500 < idx.size <= light._PRINT_SAMPLE
    from vision._geom_render import reference_render
    ref = np.asarray(reference_render(model.template, dpi=40, markers=True)).reshape(-1, 3)
    assert ref[idx].max() < light._PRINT_DARK  # black print
    assert not np.isin(idx, model.pix).any()  # never a region's pixel
    assert not model.paper_mask.reshape(-1)[idx].any()  # never bare paper


def test_the_reader_in_use_decides_the_tone_correction(tmp_path, monkeypatch):
    """A learned reader reads with the light it was trained on (its model file's
    training.light_tone_correction), whatever TONE_CORRECTION says; without one, the
    switch decides (the hand reader alone, or a dataset being built)."""
    import json

    import vision.pipeline as pipeline
    from vision.learned import DEFAULT_MODEL, MODEL_DIR, load_model
    from vision.light import tone_correction_for

    assert tone_correction_for(load_model(DEFAULT_MODEL)) is True  # reader-v11, since session 22
    untoned = MODEL_DIR / "reader-v8.json"  # trained without the correction
    v7 = load_model(untoned)
    doc = json.loads(untoned.read_text())
    doc["training"]["light_tone_correction"] = True
    path = tmp_path / "reader-tone.json"
    path.write_text(json.dumps(doc))
    toned = load_model(path)
    for switch in (False, True):
        monkeypatch.setattr(light, "TONE_CORRECTION", switch)
        assert tone_correction_for(v7) is False  # trained without: never corrected
        assert tone_correction_for(toned) is True
        assert tone_correction_for(None) is switch
    # and the pipeline asks for the print with the reader's setting
    seen = []

    def spy(model, *, on=None):
        seen.append(on)
        return None

    monkeypatch.setattr(pipeline, "print_pixels", spy)
    from pathlib import Path

    photo = sorted((Path(__file__).resolve().parents[1] / "sample_photos").glob("*.jpg"))[0]
    pipeline.read_photo(str(photo), learned=toned)
    pipeline.read_photo(str(photo), learned=v7)
    assert seen == [True, False]
