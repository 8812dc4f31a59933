"""Pencil in a ring along a region's outline (vision._evidence).

Sheets are drawn in the template frame at a low dpi (no camera): a ring of colour traced
along one region's outline, a stroke touching another from one side, the rest empty, so
every expectation is known.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from calibration.render import render_sheet
from calibration.template import get_template
from vision import _evidence
from vision._evidence import (EVIDENCE_FEATURES, SECTORS, build_ring_geometry,
                              evidence_features, ring_geometry)
from vision.colour import load_palette
from vision.light import normalise_light
from vision.marks import FEATURE_NAMES, build_sheet_model, classify_sheet

DPI = 80.0
COL = {n: j for j, n in enumerate(EVIDENCE_FEATURES)}
RED = (200, 40, 50)
BLUE = (35, 85, 195)


@pytest.fixture(scope="module")
def crypts():
    t = get_template("crypts-1")
    render = render_sheet(t, dpi=DPI).image
    return t, render, build_sheet_model(t, render, dpi=DPI)


def _poly_px(t, rid):
    return t.region(rid).shape.polygon(segments=64) * (DPI / 25.4)


def _trace(image, poly, colour, *, inset_mm=0.6, width_mm=0.7):
    """A ring of ``colour`` drawn just inside ``poly`` (px), as a player tracing the outline."""
    c = poly.mean(axis=0)
    k = DPI / 25.4
    # shrink towards the centre by inset_mm (the polygons here are convex)
    r = np.linalg.norm(poly - c, axis=1, keepdims=True)
    inner = c + (poly - c) * (1 - inset_mm * k / np.maximum(r, 1e-6))
    pts = np.round((inner - 0.5) * 16).astype(np.int32).reshape(-1, 1, 2)
    cv2.polylines(image, [pts], True, colour, thickness=max(1, int(round(width_mm * k))),
                  lineType=cv2.LINE_AA, shift=4)


def _features(model, image):
    light = normalise_light(image, paper_mask=model.paper_mask)
    th = {"chroma": 12.0, "dark_l": 80.0, "paper_chroma_sd": 1.0}
    return evidence_features(light.sample, model, th=th, palette=load_palette("default"))


def _area_ids(t, model, kind):
    return [rid for i, rid in enumerate(model.region_ids)
            if not model.is_line[i] and t.region(rid).kind == kind]


def test_evidence_columns_are_appended_last_to_the_feature_list():
    # (then the guide columns of vision._guide, appended after them)
    from vision._evidence import X_FEATURES
    from vision._guide import GUIDE_FEATURES
    from vision.marks import OPEN_FEATURES
    n = len(GUIDE_FEATURES) + len(X_FEATURES) + len(OPEN_FEATURES)
    assert FEATURE_NAMES[-len(EVIDENCE_FEATURES) - n:-n] == EVIDENCE_FEATURES
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES)


def test_rings_hug_the_outline_and_stay_off_other_regions(crypts):
    t, render, model = crypts
    g = build_ring_geometry(model)
    H, W = model.shape
    assert g.pix.size and np.all((g.pix >= 0) & (g.pix < H * W))
    assert np.all(np.diff(g.label) >= 0), "rings are stored region after region"
    assert g.sector.min() >= 0 and g.sector.max() < g.regions * SECTORS
    # connections have no ring; every area region has one, all the way round
    lines = np.flatnonzero(model.is_line)
    assert not np.isin(g.label, lines).any()
    for i in np.flatnonzero(~model.is_line):
        secs = np.unique(g.sector[g.label == i]) - i * SECTORS
        assert secs.size >= SECTORS - 2, model.region_ids[i]
    # outer pixels lie in no other area region
    owner = np.zeros((H, W), np.int32)
    for i in np.flatnonzero(~model.is_line):
        _evidence._fill(owner, _poly_px(t, model.region_ids[i]), i + 1)
    own = owner.reshape(-1)[g.pix]
    assert np.all(own[~g.inner] == 0)
    assert np.all(own[g.inner] == g.label[g.inner] + 1)
    # no dark print is measured
    lum = model.expected.reshape(-1, 3)[g.pix] @ np.array([0.2126, 0.7152, 0.0722])
    assert lum.min() >= _evidence.PRINT_MIN_LUMINANCE - 1e-6
    assert ring_geometry(model) is ring_geometry(model)


def test_a_traced_outline_goes_all_the_way_round_and_names_its_colour(crypts):
    t, render, model = crypts
    boxes = _area_ids(t, model, "box") or _area_ids(t, model, "symbol")
    traced, touched, blank = boxes[0], boxes[3], boxes[6]
    image = render.copy()
    _trace(image, _poly_px(t, traced), RED)
    # a short stroke on one side of another region (a neighbour's fill spilling over)
    p = _poly_px(t, touched)
    x0, y0 = p.min(axis=0)
    x1, y1 = p.max(axis=0)
    cv2.line(image, (int(x0) - 1, int(y0) + 2), (int(x0) - 1, int(y0 + (y1 - y0) * 0.3)), BLUE,
             thickness=2)
    X = _features(model, image)
    ids = list(model.region_ids)
    a, b, c = ids.index(traced), ids.index(touched), ids.index(blank)
    assert X[a, COL["ev_ring_arc"]] >= 0.9 and X[a, COL["ev_ring_in_arc"]] >= 0.9
    assert X[a, COL["ev_ring_colour"]] > 0.2
    z = {n: abs(X[a, COL[f"ev_ring_z_{n}"]]) for n in ("orange", "red", "blue", "green", "purple")}
    assert min(z, key=z.get) == "red", z
    assert 0 < X[b, COL["ev_ring_arc"]] <= 0.35
    assert X[c, COL["ev_ring_arc"]] == 0 and X[c, COL["ev_ring_colour"]] == 0
    assert not X[c, COL["ev_ring_z_orange"]:].any(), "no colour: no hue"
    assert not X[np.asarray(model.is_line)].any(), "connections get zeros"


def test_a_blank_sheet_has_no_ring_evidence(crypts):
    t, render, model = crypts
    X = _features(model, render)
    assert X.shape == (len(model.region_ids), len(EVIDENCE_FEATURES))
    assert X[:, COL["ev_ring_arc"]].max() <= 0.1


def test_a_traced_outline_is_never_read_empty_with_confidence(crypts):
    """Both readers read a region's pixels trimmed of a margin along its outline, so a box
    coloured by tracing its border just inside shows them a bare middle (session 20: the only
    two confident "empty" errors on six corpora). The ring columns are measured on every photo
    and such a reading is flagged, by both readers and by the hand reader alone; a neighbour's
    stroke on one side and a blank sheet are not."""
    from vision.learned import MODEL_DIR, load_model
    t, render, model = crypts
    ids = list(model.region_ids)
    boxes = _area_ids(t, model, "box") or _area_ids(t, model, "symbol")
    traced, touched = boxes[0], boxes[3]
    image = render.copy()
    _trace(image, _poly_px(t, traced), RED)
    p = _poly_px(t, touched)
    x0, y0 = p.min(axis=0)
    x1, y1 = p.max(axis=0)
    cv2.line(image, (int(x0) - 1, int(y0) + 2), (int(x0) - 1, int(y0 + (y1 - y0) * 0.3)), BLUE,
             thickness=2)
    light = normalise_light(image, paper_mask=model.paper_mask)
    kept = classify_sheet(light.linear, model, learned=None, keep_matrix=True)
    assert kept.matrix[ids.index(traced), FEATURE_NAMES.index("ev_ring_in_arc")] >= 0.9
    v7 = load_model(MODEL_DIR / "reader-v7.json")  # (reads no ev_ column: measured all the same)
    for learned in (None, "default", v7):
        got = classify_sheet(light.linear, model, learned=learned)
        rd = got.readings[traced]
        assert rd.mark != "empty" or rd.review, (learned, rd)
        if learned is None:  # (the hand reader alone is sure of "empty" there)
            assert rd.mark == "empty" and "colour traced along the outline" in rd.reason, rd
        assert "outline" not in got.readings[touched].reason
    lean = classify_sheet(light.linear, model, learned=v7)
    ring = [FEATURE_NAMES.index(n) for n in EVIDENCE_FEATURES]
    np.testing.assert_array_equal(lean.matrix[:, ring], kept.matrix[:, ring])
    blank = classify_sheet(normalise_light(render, paper_mask=model.paper_mask).linear, model)
    assert not any("outline" in r.reason for r in blank.readings.values())


def _cross(image, poly, colour, *, width_mm=0.8, reach=1.1):
    """A cross drawn corner to corner over ``poly``'s bounding box (px), a little past it."""
    k = DPI / 25.4
    (x0, y0), (x1, y1) = poly.min(axis=0), poly.max(axis=0)
    c = np.array([(x0 + x1) / 2, (y0 + y1) / 2])
    h = np.array([(x1 - x0) / 2, (y1 - y0) / 2]) * reach
    for sx in (-1, 1):
        a, b = c + h * [-1, -sx], c + h * [1, sx]
        cv2.line(image, tuple(int(round(v * 16)) for v in a), tuple(int(round(v * 16)) for v in b),
                 colour, max(1, int(round(width_mm * k))), cv2.LINE_AA, 4)


def _fill(image, poly, colour):
    pts = np.round((poly - 0.5) * 16).astype(np.int32).reshape(-1, 1, 2)
    cv2.fillPoly(image, [pts], colour, lineType=cv2.LINE_AA, shift=4)


def test_a_cross_over_a_symbol_cell_shows_in_the_ring_where_the_cell_has_no_x_test(crypts):
    """Crypts symbol cells whose printed glyph leaves no usable pixel between a cross's arms
    (SheetModel.off) cannot tell a cross from a fill by themselves; the ring can."""
    from vision._evidence import X_FEATURES, x_features
    t, render, model = crypts
    blind = [rid for i, rid in enumerate(model.region_ids) if not model.is_line[i]
             and t.region(rid).kind == "symbol" and not model.off[model.label == i].any()]
    assert len(blind) >= 6, "some symbol cells have no pixel between a cross's arms"
    crossed, filled, blank = blind[0], blind[2], blind[4]
    image = render.copy()
    _cross(image, _poly_px(t, crossed), RED)
    _fill(image, _poly_px(t, filled), RED)
    light = normalise_light(image, paper_mask=model.paper_mask)
    th = {"chroma": 12.0, "dark_l": 80.0, "paper_chroma_sd": 1.0}
    X = x_features(light.sample, model, th=th)
    assert X.shape == (len(model.region_ids), len(X_FEATURES))
    col = {n: j for j, n in enumerate(X_FEATURES)}
    ids = list(model.region_ids)
    a, b, c = ids.index(crossed), ids.index(filled), ids.index(blank)
    assert X[a, col["ev_x_contrast"]] > 0.3 and X[a, col["ev_x_in_contrast"]] > 0.3
    assert abs(X[b, col["ev_x_contrast"]]) < 0.15 and X[b, col["ev_x_side"]] > 0.5
    assert not X[c].any()
    assert not X[np.asarray(model.is_line)].any(), "connections get zeros"


def test_the_ring_and_x_columns_read_one_sampling_of_the_ring(crypts):
    """classify_sheet samples the ring once for both families (ring_pixels): the columns are
    those each function computes from its own sampling."""
    from vision._evidence import ring_pixels, x_features
    t, render, model = crypts
    image = render.copy()
    boxes = _area_ids(t, model, "box") or _area_ids(t, model, "symbol")
    _trace(image, _poly_px(t, boxes[0]), RED)
    _cross(image, _poly_px(t, boxes[2]), BLUE)
    light = normalise_light(image, paper_mask=model.paper_mask)
    th = {"chroma": 12.0, "dark_l": 80.0, "paper_chroma_sd": 1.0}
    pal = load_palette("default")
    ring = ring_pixels(light.sample, model)
    np.testing.assert_array_equal(evidence_features(light.sample, model, th=th, palette=pal, pixels=ring),
                                  evidence_features(light.sample, model, th=th, palette=pal))
    np.testing.assert_array_equal(x_features(light.sample, model, th=th, pixels=ring),
                                  x_features(light.sample, model, th=th))


def test_the_x_columns_read_from_their_zones_alone_give_the_same_values(crypts):
    """A model that reads the X columns and not the ring columns (reader-v8, reader-v11) samples only the
    ring pixels on the zones (ring_pixels(x_only=True)): the same X columns as from the whole
    ring, with part of the frame outside the photo too; the ring columns refuse such pixels."""
    from vision._evidence import ring_geometry, ring_pixels, x_features
    t, render, model = crypts
    image = render.copy()
    boxes = _area_ids(t, model, "box") or _area_ids(t, model, "symbol")
    _trace(image, _poly_px(t, boxes[0]), RED)
    _cross(image, _poly_px(t, boxes[2]), BLUE)
    _cross(image, _poly_px(t, boxes[4]), RED)
    light = normalise_light(image, paper_mask=model.paper_mask)
    th = {"chroma": 12.0, "dark_l": 80.0, "paper_chroma_sd": 1.0}
    valid = np.ones(model.shape, bool)
    valid[:, : model.shape[1] // 3] = False
    for v in (None, valid):
        full = x_features(light.sample, model, th=th, valid=v, pixels=ring_pixels(light.sample, model, valid=v))
        part = ring_pixels(light.sample, model, valid=v, x_only=True)
        assert 0 < part.L.size < ring_geometry(model).pix.size
        np.testing.assert_array_equal(x_features(light.sample, model, th=th, valid=v, pixels=part), full)
        np.testing.assert_array_equal(x_features(light.sample, model, th=th, valid=v), full)
    assert np.abs(full).sum() > 0
    with pytest.raises(ValueError, match="ring columns read every ring pixel"):
        evidence_features(light.sample, model, th=th, palette=load_palette("default"), pixels=part)


def test_a_build_may_use_what_is_built_before_it():
    """vision._cache.per_model: a build that asks per_model for another thing of the same model
    (on the same thread) gets it, instead of waiting for itself forever."""
    import threading
    from vision._cache import per_model

    class Model:
        pass

    m = Model()
    out = []
    th = threading.Thread(target=lambda: out.append(
        per_model(m, "outer", lambda mm: per_model(mm, "inner", lambda _: 21) * 2)))
    th.start()
    th.join(10)
    assert not th.is_alive() and out == [42]
    assert per_model(m, "outer", lambda _: 0) == 42  # built once


def _ring_columns_by_bincount(model, px, th, palette):
    """The ring columns as ``evidence_features`` computed them before its counts were shared
    (one weighted bincount per count, over every ring pixel): the reference it must equal."""
    from calibration.template import PENCIL_COLOURS
    from vision.colour import hue_diff
    g = ring_geometry(model)
    R = g.regions
    X = np.zeros((R, len(EVIDENCE_FEATURES)), np.float32)
    ok, L, a, b, C = px.ok, px.L, px.a, px.b, px.C
    col = ok & (C >= float(th["chroma"]))
    dark = ok & ~col & (L <= float(th["dark_l"]))
    n = np.bincount(g.label, ok, R)
    X[:, 0] = np.bincount(g.label, col, R) / np.maximum(n, 1)

    def arc(hit, sel):
        ns = np.bincount(g.sector[sel], ok[sel], R * SECTORS).reshape(R, SECTORS)
        hs = np.bincount(g.sector[sel], hit[sel], R * SECTORS).reshape(R, SECTORS)
        counted = ns >= _evidence.SECTOR_MIN_PIXELS
        covered = counted & (hs >= _evidence.SECTOR_SHARE * np.maximum(ns, 1))
        return covered.sum(axis=1) / np.maximum(counted.sum(axis=1), 1)

    every = np.ones(g.pix.size, bool)
    X[:, 1], X[:, 2] = arc(col, every), arc(col, g.inner)
    X[:, 3], X[:, 4] = arc(col, ~g.inner), arc(dark, every)
    nc = np.bincount(g.label, col, R)
    ma = np.bincount(g.label, np.where(col, a, 0.0), R) / np.maximum(nc, 1)
    mb = np.bincount(g.label, np.where(col, b, 0.0), R) / np.maximum(nc, 1)
    chroma = np.hypot(ma, mb)
    hue = np.degrees(np.arctan2(mb, ma)) % 360.0
    noise = np.degrees(3.0 * max(1.0, float(th.get("paper_chroma_sd", 1.0))) / np.maximum(chroma, 1e-3))
    has = (nc >= _evidence.SECTOR_MIN_PIXELS) & (chroma > 0)
    for j, c in enumerate(PENCIL_COLOURS):
        pc = palette.colour(c)
        z = hue_diff(hue, pc.hue_deg) / np.hypot(pc.hue_spread_deg, noise)
        X[:, 5 + j] = np.where(has, np.clip(z, -_evidence._Z_CLIP, _evidence._Z_CLIP), 0.0)
    X[np.asarray(model.is_line[:R], bool)] = 0.0
    return X


def test_the_ring_columns_are_the_bincounts_of_every_pixel_bit_for_bit(crypts):
    """evidence_features counts the coloured pixels once by (sector, inner half) and keeps the
    usable-pixel counts per model: the same bytes as a weighted bincount per count, with the
    whole frame usable and with part of it outside the photo."""
    from vision._evidence import ring_pixels
    t, render, model = crypts
    image = render.copy()
    boxes = _area_ids(t, model, "box") or _area_ids(t, model, "symbol")
    _trace(image, _poly_px(t, boxes[0]), RED)
    _cross(image, _poly_px(t, boxes[2]), BLUE)
    _trace(image, _poly_px(t, boxes[3]), (60, 60, 60))
    light = normalise_light(image, paper_mask=model.paper_mask)
    th = {"chroma": 12.0, "dark_l": 80.0, "paper_chroma_sd": 1.0}
    pal = load_palette("default")
    valid = np.ones(model.shape, bool)
    valid[: model.shape[0] // 2, : model.shape[1] // 3] = False
    for v in (None, valid):
        ring = ring_pixels(light.sample, model, valid=v)
        got = evidence_features(light.sample, model, th=th, palette=pal, valid=v, pixels=ring)
        want = _ring_columns_by_bincount(model, ring, th, pal)
        assert got.dtype == want.dtype and got.tobytes() == want.tobytes()
    assert np.abs(got).sum() > 0
