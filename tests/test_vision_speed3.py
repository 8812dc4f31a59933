"""Exact speed-ups of the read (session 9) keep their values: each fast path against the plain
computation it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from test_vision_learned import _random_trees


# --- the learned reader's trees, node-major (vision.learned._node_major_leaf_values) ---------

@pytest.mark.parametrize("depths, full, dtype", [([0, 1, 3, 2, 2], False, np.uint8),
                                                 ([3, 3, 0, 3], True, np.uint8),
                                                 ([4, 2, 0], True, np.uint16),
                                                 ([5, 2], True, np.uint32),
                                                 ([6, 1, 6], True, np.uint64)])
def test_node_major_trees_reach_the_leaves_the_masks_reach(monkeypatch, depths, full, dtype):
    """Uneven trees (padded with nodes that clear nothing), lone leaves, and masks of 8 to 64
    leaves (every bit in use): the same (N, T) leaf values as the exit-leaf masks, laid out
    the same (C order: the caller sums them in the same order)."""
    import vision.learned as L

    monkeypatch.setattr(L, "NODE_MAJOR_MAX_PADDING", 100.0)  # (these trees are uneven)
    rng = np.random.default_rng(sum(depths) + full)
    p = _random_trees(rng, depths, full=full)
    X = rng.normal(size=(257, 6)).astype(np.float32)
    X[:5] = p["threshold"][0]  # rows exactly on a threshold go left
    tables = L._exit_leaf_tables(p)
    nm = L._node_major_tables(p, tables)
    assert nm["mask"].dtype == dtype
    want = L._exit_leaf_values(X, tables)
    got = L._node_major_leaf_values(X, nm)
    assert got.flags.c_contiguous and got.shape == want.shape == (257, len(depths))
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got, L._leaf_values(X, p))


def test_node_major_tables_are_skipped_when_padding_would_cost_more():
    import vision.learned as L

    p = _random_trees(np.random.default_rng(3), [0, 0, 0, 0, 6], full=True)
    tables = L._exit_leaf_tables(p)
    assert L._node_major_tables(p, tables) is None  # 5 x 63 padded nodes for 67 real ones
    # (and the scores then come from the masks as before)
    X = np.random.default_rng(4).normal(size=(40, 6)).astype(np.float32)
    np.testing.assert_array_equal(L._exit_leaf_values(X, tables), L._leaf_values(X, p))


def test_the_bundled_model_scores_as_with_the_exit_leaf_masks():
    """reader-v7's trees on rows of real feature values (the sample photo's matrix, and the
    same rows with features nudged onto and around thresholds): identical raw scores."""
    from pathlib import Path

    import vision.learned as L
    from vision.pipeline import read_photo

    photo = Path(__file__).resolve().parents[1] / "sample_photos" / "crypts-2-easy-s4.jpg"
    X = read_photo(photo, keep_matrix=True).matrix.astype(np.float32)
    model = L.default_model()
    p = model.params
    tables = L._exit_leaf_tables(p)
    assert L._node_major_tables(p, tables) is not None  # (the fast path is the one used)
    rng = np.random.default_rng(5)
    on = X.copy()
    node = rng.integers(0, tables["feature"].size, size=on.shape[0])
    on[np.arange(on.shape[0]), tables["feature"][node]] = tables["threshold"][node]
    for rows in (X, on, np.nextafter(on, np.float32(np.inf))):
        want = L._exit_leaf_values(rows, tables)
        np.testing.assert_array_equal(L._node_major_leaf_values(rows, p["_exit_leaf_node_major"]),
                                      want)
        got = model.raw_scores(rows)
        ref = np.zeros_like(got) + p["baseline"]
        ref += want.reshape(rows.shape[0], -1, len(model.classes)).sum(axis=1)
        np.testing.assert_array_equal(got, ref)

