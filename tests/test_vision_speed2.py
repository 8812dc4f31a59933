"""Exact speed-ups of the light sampling and the hand reader keep their values: each fast path
against the plain computation it replaces."""

from __future__ import annotations

import math

import numpy as np
import pytest

from vision.colour import SRGB_TO_LINEAR
from vision.light import PixelTaps, normalise_light, pixel_taps


def _photo(h: int = 157, w: int = 203):
    """A shaded, tinted page with a pencil mark (sides not multiples of the 12 px block)."""
    yy, xx = np.mgrid[0:h, 0:w]
    shade = 0.55 + 0.4 * (xx / w) * (0.6 + 0.4 * yy / h) + 0.05 * np.sin(yy / 9.0)
    img = np.clip(np.stack([shade * 250, shade * 235, shade * 210], -1), 0, 255).astype(np.uint8)
    img[40:60, 50:120] = (200, 40, 40)
    return img


def _plain_sample(light, idx: np.ndarray) -> np.ndarray:
    """The sampling as it was computed per photo before the taps were cached (8e66fbc)."""
    import cv2

    H, W = light.image.shape[:2]
    hb, wb = light.illumination.shape[:2]
    b = light.block
    rows = cv2.resize(light.illumination, (wb * b, hb), interpolation=cv2.INTER_LINEAR)
    fy = ((np.arange(hb * b) + 0.5) * (1.0 / b) - 0.5).astype(np.float32)
    sy = np.floor(fy).astype(np.int64)
    fy = fy - sy.astype(np.float32)
    fy[(sy < 0) | (sy >= hb - 1)] = 0
    sy = np.clip(sy, 0, hb - 1)
    sy1 = np.minimum(sy + 1, hb - 1)
    ri = np.minimum(np.arange(H), hb * b - 1)
    ci = np.minimum(np.arange(W), wb * b - 1)
    rows, r0, r1, fy = rows.reshape(-1, 3), sy[ri] * (wb * b), sy1[ri] * (wb * b), fy[ri]
    i, j = np.divmod(np.asarray(idx, np.int64), W)
    j = ci.take(j)
    w1 = fy.take(i)[:, None]
    out = rows.take(r0.take(i) + j, axis=0)
    out *= np.float32(1) - w1
    out += rows.take(r1.take(i) + j, axis=0) * w1
    illum = np.maximum(out, np.float32(1e-3), out=out)
    srgb = light.image.reshape(-1, 3).take(idx, axis=0)
    return SRGB_TO_LINEAR.take(srgb) / illum


def test_cached_taps_sample_the_plain_values_bit_for_bit():
    img = _photo()
    h, w = img.shape[:2]
    light = normalise_light(img, paper_mask=np.ones((h, w), bool))
    rng = np.random.default_rng(5)
    idx = np.concatenate([rng.choice(h * w, 6000, replace=False),
                          [0, w - 1, (h - 1) * w, h * w - 1]])  # corners past the blocks
    want = _plain_sample(light, idx)
    taps = light.taps(idx)
    got = light.sample(taps)
    assert got.dtype == np.float32 and got.shape == (idx.size, 3)
    assert np.array_equal(got, want)
    # a plain index array goes the same way (taps made on the spot)
    assert np.array_equal(light.sample(idx), want)
    # and it is the full-size illumination's division, to float rounding
    full = normalise_light(img, paper_mask=np.ones((h, w), bool))
    expect = SRGB_TO_LINEAR[img.reshape(-1, 3)[idx]] / full.illumination_full.reshape(-1, 3)[idx]
    assert np.allclose(got, expect, rtol=2e-6, atol=1e-7)
    # the taps are the model's (frame size and pixels), not the photo's: another photo of
    # the same size samples through them just as through its own arithmetic
    other = normalise_light(np.ascontiguousarray(img[::-1, ::-1]), paper_mask=np.ones((h, w), bool))
    assert np.array_equal(other.sample(other.taps(idx)), _plain_sample(other, idx))
    assert other.taps(idx) is taps


def test_taps_are_cached_per_array_and_selected_exactly():
    idx = np.arange(0, 157 * 203, 7)
    a = pixel_taps(idx, (157, 203), 12)
    assert pixel_taps(idx, (157, 203), 12) is a
    # an equal copy is another list (the cache keys on the array itself), with equal taps
    b = pixel_taps(idx.copy(), (157, 203), 12)
    assert b is not a and all(np.array_equal(getattr(a, k), getattr(b, k))
                              for k in ("index", "tap0", "tap1", "w0", "w1"))
    # another frame size or block is another set of taps
    assert pixel_taps(idx, (158, 203), 12) is not a
    assert pixel_taps(idx, (157, 203), 10).block == 10
    # a selection is the taps of the selected pixels
    keep = (idx % 3) != 0
    sel = a.select(keep)
    ref = PixelTaps.of(idx[keep], (157, 203), 12)
    assert all(np.array_equal(getattr(sel, k), getattr(ref, k))
               for k in ("index", "tap0", "tap1", "w0", "w1"))
    assert a.select(np.ones(idx.size, bool)) is a
    assert a.nbytes == idx.size * 40


def test_a_selection_samples_as_the_pixels_themselves():
    img = _photo()
    h, w = img.shape[:2]
    valid = np.ones((h, w), bool)
    valid[:, :30] = False  # a photo cut off at the left
    light = normalise_light(img, paper_mask=np.ones((h, w), bool), valid=valid)
    idx = np.arange(3, h * w, 5)
    keep = valid.reshape(-1)[idx]
    assert np.array_equal(light.sample(light.taps(idx, keep=keep)), _plain_sample(light, idx[keep]))


def test_taps_of_another_frame_or_a_bad_mask_are_refused():
    img = _photo()
    h, w = img.shape[:2]
    light = normalise_light(img, paper_mask=np.ones((h, w), bool))
    wrong = PixelTaps.of(np.arange(100), (h + 12, w), 12)
    with pytest.raises(ValueError, match="do not fit this photo's"):
        light.sample(wrong)
    taps = light.taps(np.arange(100))
    with pytest.raises(ValueError, match="keep mask of shape"):
        taps.select(np.ones(99, bool))


def _features(rows: list[dict]):
    """A ``_Features`` of Python lists (as classify_sheet hands them to ``_decide``)."""
    from dataclasses import fields

    from vision.marks import _Features

    names = [fl.name for fl in fields(_Features) if fl.name not in
             ("halo_diag", "halo_off", "halo_dark_diag", "lines", "open_share", "open_cover",
              "open_coloured")]
    base = dict(n=400.0, coloured=0.0, dark=0.0, cover=0.0, line_cover=0.0, hue=0.0,
                purity=0.0, chroma=0.0, x_score=0.0, band_cov=0.0, off_cov=0.0, x_ok=True,
                faint_cover=0.0, faint_line=0.0, diag_min=0.0, diag_max=0.0, coherence=0.0,
                dlen_min=0.0, dlen_max=0.0, faint_dlen_max=0.0, bare_core=0.0, faint_tint=0.0,
                faint_hue_r=0.0, ink_drop=0.0)
    return _Features(**{k: [float(r.get(k, base[k])) if k != "x_ok" else bool(r.get(k, True))
                            for r in rows] for k in names})


def test_the_hand_reader_gives_its_features_and_hue_distances_as_before():
    # _decide builds the features as two literal dicts and the hue distances in one loop:
    # the same keys in the same order, the same types and the same values as the former
    # comprehensions and unpacked dicts
    from calibration.template import get_template
    from vision.colour import load_palette
    from vision.marks import REVIEW_THRESHOLD, _decide

    pal = load_palette("default")
    hues = {c.name: (c.hue_deg, c.hue_spread_deg) for c in pal.colours}
    t = get_template("reefs-1")
    area = next(r for r in t.regions if r.kind == "treasure")
    line = next(r for r in t.regions if r.kind == "connection")
    red = hues["red"][0]
    f = _features([
        dict(cover=0.8, coloured=0.75, hue=red + 3.0, purity=0.95, chroma=30.0, off_cov=0.7,
             diag_min=0.8, diag_max=0.85, coherence=0.2, dlen_min=0.9, dlen_max=0.95,
             faint_cover=0.85, bare_core=0.01, faint_tint=0.3, faint_hue_r=0.9, x_score=0.1,
             band_cov=0.8),
        dict(cover=0.5, line_cover=0.9, faint_line=0.95, coloured=0.45, hue=red - 5.0,
             purity=0.9, chroma=25.0, coherence=0.8)])
    opts = dict(review_threshold=REVIEW_THRESHOLD, empty_cover=0.06, cover_scale=0.012,
                x_threshold=0.45, x_scale=0.07, min_pixels=10, written_cover=0.025,
                line_cover=0.3, line_scale=0.05, prior=pal, chroma_noise=1.5, hues=hues)
    for i, (r, is_line) in enumerate([(area, False), (line, True)]):
        rd, it = _decide(r, i, f, pal, is_line=is_line, **opts)
        assert rd.mark == "red", (rd.mark, rd.alternatives)
        old = {"pixels": int(f.n[i]), "coverage": float(f.cover[i]),
               **({"length_coverage": float(f.line_cover[i])} if is_line else {}),
               "coloured": float(f.coloured[i]),
               "dark": float(f.dark[i]), "hue_deg": float(f.hue[i]), "chroma": float(f.chroma[i]),
               "purity": float(f.purity[i]), "coherence": float(f.coherence[i]),
               "faint_coverage": float(f.faint_line[i] if is_line else f.faint_cover[i]),
               **({} if is_line else {"x_score": float(f.x_score[i]),
                                      "x_band": float(f.band_cov[i]),
                                      "x_length": float(f.dlen_min[i]),
                                      "slash_length": float(f.dlen_max[i]),
                                      "sector_coverage": float(f.off_cov[i]),
                                      "bare_core": float(f.bare_core[i]),
                                      "faint_tint": float(f.faint_tint[i]),
                                      "faint_hue_agreement": float(f.faint_hue_r[i])})}
        assert list(rd.features.items()) == list(old.items())
        assert [type(v) for v in rd.features.values()] == [type(v) for v in old.values()]
        colours = [m for m in r.marks if m in hues]
        noise = it["hue_noise"]
        want = {c: abs((f.hue[i] - hues[c][0] + 180.0) % 360.0 - 180.0)
                / math.hypot(hues[c][1], noise) for c in colours}
        assert list(it["hue_z"].items()) == list(want.items())
        assert it["raw"]["red"] > 0.5 and it["raw"]["empty"] < 0.01


def test_the_models_paper_counts_are_its_block_sums_and_used_only_for_a_whole_frame():
    from vision.light import _block_sums, _paper_counts

    rng = np.random.default_rng(9)
    img = _photo()
    h, w = img.shape[:2]
    pm = rng.random((h, w)) < 0.7
    counts = _paper_counts(pm, 12)
    assert np.array_equal(counts, _block_sums(pm[:156, :192].view(np.uint8), 12))
    assert _paper_counts(pm, 12) is counts and not counts.flags.writeable
    other = pm.copy()
    other[:24] = False  # another mask array: its own counts
    assert not np.array_equal(_paper_counts(other, 12), counts)
    # every pixel valid: the model's cached counts; the same light as a fresh mask's
    a = normalise_light(img, paper_mask=pm, valid=np.ones((h, w), bool))
    b = normalise_light(img, paper_mask=pm.copy())
    same = ("paper_coverage", "white_balance", "shading_range", "block")
    assert np.array_equal(a.illumination, b.illumination)
    assert [getattr(a, k) for k in same] == [getattr(b, k) for k in same]
    # a cut-off frame counts only its valid paper
    valid = np.ones((h, w), bool)
    valid[:, :40] = False
    c = normalise_light(img, paper_mask=pm, valid=valid)
    d = normalise_light(img, paper_mask=pm & valid)
    assert np.array_equal(c.illumination, d.illumination)
    assert [getattr(c, k) for k in same] == [getattr(d, k) for k in same]
    assert c.paper_coverage < a.paper_coverage
