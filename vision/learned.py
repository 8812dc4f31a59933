"""The learned reader: a small classifier over the hand reader's measurements, and the rule
that turns two readers' opinions into one verdict.

The model (``calibration/models/reader-v15.json``, trained by ``scripts/train_reader.py`` and
packed by ``scripts/pack_committee.py``; earlier ones ship beside it for comparison,
docs/EVALUATION.md) maps
one region's feature row (``vision.marks.FEATURE_NAMES``: photo-normalised measurements, the
hand reader's probabilities, photo quality figures) to a probability for each mark in
``vision.marks.MARKS``. It is stored as plain JSON (gradient-boosted trees or a small
multilayer perceptron) and evaluated here in numpy: no scikit-learn at run time.

Two readers, one verdict (:func:`combine`): a reading is confident (``review`` false) only when
the hand reader and the learned reader name the same mark and both are sure enough, with
thresholds chosen on a calibration split the model never trained on (stored in the model file,
``decision``). The reported confidence is the learned reader's probability for the mark,
temperature-scaled on that split, so that it can be read as a probability.

A model file may carry a committee: other fits of the same recipe. Either each is a second
opinion with its own rule (:func:`second_opinions`, format 2, reader-v8 and reader-v11), or,
since reader-v12, the committee reads as one (:func:`committee_proba`, format 3): the rule
judges the members' averaged probabilities, and every member must name the same mark.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

import numpy as np

from sheetcheck.errors import SheetcheckError

MODEL_FORMAT = "sheetcheck.reader-model/1"
#: A model file with a committee (:func:`second_opinions`): the first model's document plus
#: ``committee``, a list of whole format-1 model documents. Older readers refuse it (they
#: would read it without the second opinions, confidently where it would not be).
COMMITTEE_FORMAT = "sheetcheck.reader-model/2"
#: A model file whose committee reads as one (:func:`committee_proba`): the format-2 document,
#: its ``decision`` chosen on the members' averaged probabilities (``scripts/pack_committee.py
#: --combine mean``), and ``"combine": "mean"``. A reading is confident when the averaged
#: probabilities and the hand reader pass that rule and every member names the same mark.
#: Older readers refuse it (they would read the averaged rule with the first member alone).
MEAN_FORMAT = "sheetcheck.reader-model/3"
#: A region whose learned probability is below this is "in doubt" (``DecisionRule.photo_doubt_max``).
DOUBT_LEVEL = 0.9
MODEL_DIR = Path(__file__).resolve().parent.parent / "calibration" / "models"
#: A mark's four thresholds (``DecisionRule``), in the order ``DecisionRule.thresholds`` gives them.
THRESHOLD_NAMES = ("hand_min", "learned_min", "learned_alone", "hand_floor")
#: reader-v7: reader-v5's trees and temperature (the same fit, the same accuracy) with its
#: decision rule chosen again on more calibration rows (the spent fresh600k and fresh800k), a
#: third doubt tier (0.03), "written" and "crossed" confident only in the doubt tiers (clear
#: photos), and a hand-confidence floor under "crossed": fewer flags than reader-v5 on every
#: validation corpus and on the fresh pair, no confident error there (docs/EVALUATION.md,
#: eighth measurement). reader-v5 ships beside it for comparison.
#: reader-v8 (session 11): three fits of one recipe (reader-v7's with the guide and X columns
#: and two training corpora of hands that tick boxes off), the first reading and the other two
#: its second opinions (:func:`second_opinions`): more readings right and fewer flagged than
#: reader-v7, and no confident error on 9 validation corpora where each fit alone had 2-8
#: (docs/EVALUATION.md, session 11). reader-v7 ships beside it for comparison.
#: reader-v11 (session 22): reader-v8's recipe on its corpora made again with session 21's
#: simulator, read with the light stage's tone correction (vision.light: per-channel exponents
#: that make the black print colourless), so photos are read with it too
#: (vision.light.tone_correction_for): on the four validation corpora as accurate as reader-v8,
#: fewer regions flagged and no confident error (docs/EVALUATION.md, session 22). reader-v8
#: ships beside it for comparison.
#: reader-v12 (session 23): reader-v11's three fits read as one committee (format 3,
#: :func:`committee_proba`): one rule chosen on their averaged probabilities over the 11
#: calibration-only corpora (415,689 rows no member was fitted on), where reader-v11 judged
#: each member by its own rule and flagged what any one of them doubted. On the four
#: validation corpora end to end: 46.0 % of regions flagged against 50.8 %, 97.12 % read right
#: against 96.94 %, no confident error (docs/EVALUATION.md, session 23). reader-v11 ships
#: beside it for comparison.
#: reader-v13 (session 23): reader-v12 with the hand reader's thresholds never below those of
#: a member's own rule (``pack_committee.hand_bounded``): reader-v12 read a written total it
#: could not see on a fresh held-out-painter photo "empty" at 0.9998 with the hand reader at
#: 0.9847, where every member's rule asks 0.99. The same readings as reader-v12, 0.4 points
#: more flags on seven datasets, no confident error (docs/EVALUATION.md, session 23; two more
#: doubt tiers were tried and made a confident error on a fresh corpus).
#: reader-v14 (session 24): reader-v13 with thresholds for "crossed" in the doubt tiers
#: (``pack_committee.own_tiers``): chosen on the calibration rows and four corpora crossed out
#: at rate 0.3, in reader-v13's tiers and two more for crossed only (doubt 0.05 and 0.08), the
#: hand reader at least 0.97 and the learned reader at least 0.995 sure; every other mark
#: reads exactly as with reader-v13. reader-v13 flagged every crossing-out (its members' own
#: rules never had enough of them to choose thresholds on); on 15 spent and validation
#: datasets reader-v14 makes 1,297 of their 7,587 crossings-out confident, with no new
#: confident error (docs/EVALUATION.md, session 24). reader-v12 is in git history (commit
#: 2394256), reader-v14 too (commit 69db9d6).
#: reader-v15 (session 24): reader-v14 with "empty" named in its two crossed-only tiers too
#: (``pack_committee.py --extra-tier-marks empty``): on photos of doubt 0.03-0.08, which fall
#: out of reader-v13's tiers, an empty region is judged by thresholds chosen on the same rows,
#: never looser than the tier at 0.03 asks. On 17 datasets 1.1 points fewer regions flagged
#: than reader-v14 with no new confident error; on the fresh pair of the twenty-first
#: measurement 38.9 against 39.6 % and 47.3 against 48.7 %, the same two confident errors as
#: the readers before it (docs/EVALUATION.md). reader-v13 ships beside it.
DEFAULT_MODEL = MODEL_DIR / "reader-v15.json"


class ReaderModelError(SheetcheckError):
    """The learned reader's model file is missing, damaged or made for other features."""

    code = "invalid_reader_model"
    #: next to the templates' codes (20, 21): calibration data shipped with sheetcheck
    exit_code = 22
    http_status = 500


@dataclass(frozen=True)
class DecisionRule:
    """When two agreeing readers are sure enough (chosen on the calibration split).

    A reading is confident when both readers name the same mark and either
    ``hand >= hand_min and learned >= learned_min`` (both sure), or ``learned >= learned_alone
    and hand >= hand_floor`` (the learned reader is very sure and the hand reader, though
    hesitant, still ranks that mark first). ``photo_gate``: below this photo confidence
    (``vision.pipeline.photo_confidence``) nothing on the photo is confident.
    ``photo_doubt_max``: when more than this share of the photo's regions get a learned
    probability below ``DOUBT_LEVEL`` (a washed-out, blurred or badly lit photo, where even
    the readings that look clear are suspect), nothing on the photo is confident.
    """

    hand_min: float = 0.97
    learned_min: float = 0.97
    learned_alone: float = 1.01
    hand_floor: float = 0.5
    photo_gate: float = 0.5
    photo_doubt_max: float = 1.0
    #: Thresholds per mark read (mark -> {hand_min, learned_min, learned_alone, hand_floor}),
    #: replacing the four above for readings of that mark: how sure the readers must be
    #: differs by mark (a clear colour is rarely wrong, a clear "empty" may hide a faint
    #: stroke). None: the same thresholds for every mark.
    by_mark: Mapping[str, Mapping[str, float]] | None = None
    #: Thresholds for clear photos, each chosen on the calibration rows of such photos alone:
    #: ``((doubt_max, by_mark, by_kind), ...)`` by ascending ``doubt_max``, where ``by_mark``
    #: is ``{mark: {hand_min, learned_min, learned_alone, hand_floor}}`` and ``by_kind``
    #: ``{region kind: by_mark}``. A reading on a photo whose doubt (:func:`photo_doubt`) is
    #: at most ``doubt_max`` takes the first such tier's thresholds for its region's kind and
    #: mark, else for its mark; what no tier names keeps the thresholds above. Why: the
    #: learned reader's rare confident errors sit mostly on unclear photos (blur, glare, low
    #: resolution) and on a few kinds of region (a stroke beside a connection's path), and
    #: they set one rule for every photo and region; on a clear photo the same probability
    #: is worth more.
    tiers: tuple = ()

    def thresholds(self, mark: str, doubt: float | None = None,
                   kind: str | None = None) -> tuple[float, float, float, float]:
        """(hand_min, learned_min, learned_alone, hand_floor) for a reading of ``mark`` in a
        region of that ``kind`` on a photo of that ``doubt`` (None: the rule without tiers)."""
        t = None
        if doubt is not None:
            for doubt_max, marks, kinds in self.tiers:
                if doubt <= doubt_max:
                    t = (kinds.get(kind) or {}).get(mark) or marks.get(mark)
                    if t is not None:
                        break
        if t is None:
            t = (self.by_mark or {}).get(mark)
        if t is None:
            return self.hand_min, self.learned_min, self.learned_alone, self.hand_floor
        return t["hand_min"], t["learned_min"], t["learned_alone"], t["hand_floor"]

    def to_dict(self) -> dict:
        """The rule as stored in a model file (``decision``)."""
        out = {k: getattr(self, k) for k in self.__dataclass_fields__ if k != "tiers"}
        if self.tiers:
            out["tiers"] = [{"doubt_max": float(d), "by_mark": {m: dict(t) for m, t in bm.items()},
                             "by_kind": {k: {m: dict(t) for m, t in km.items()} for k, km in bk.items()}}
                            for d, bm, bk in self.tiers]
        return out


@dataclass(frozen=True)
class LearnedReader:
    """A loaded, validated reader model (see module docstring)."""

    kind: str
    classes: tuple[str, ...]
    feature_names: tuple[str, ...]
    params: Mapping[str, np.ndarray]
    temperature: float
    rule: DecisionRule
    meta: Mapping
    source: str = "<model>"
    #: Second opinions (:func:`second_opinions`): models fitted by the same recipe on other
    #: splits of the training photos, each with its own temperature and rule. Empty for a
    #: format-1 model.
    committee: tuple = ()
    #: How the committee decides: "second_opinions" (format 2: the first model reads with its
    #: own rule and every member must be confident of the same mark by its own) or "mean"
    #: (format 3: ``rule`` judges the members' averaged probabilities, :func:`committee_proba`,
    #: and every member must name the same mark).
    combine: str = "second_opinions"

    def raw_scores(self, X: np.ndarray) -> np.ndarray:
        """(N, F) features -> (N, C) class scores (log-odds before the softmax)."""
        from vision.marks import FEATURE_NAMES

        X = np.asarray(X, np.float32)
        p = self.params
        cols = p["columns"]
        if X.ndim == 2 and X.shape[1] == len(self.feature_names) != len(FEATURE_NAMES):
            # the model's own columns (a model made for an earlier, shorter feature list):
            # placed where the reader's full matrix has them
            full = np.zeros((X.shape[0], len(FEATURE_NAMES)), np.float32)
            full[:, cols] = X
            X = full
        if X.ndim != 2 or X.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"expected (N, {len(FEATURE_NAMES)}) features, got {X.shape}")
        if self.kind == "mlp":
            h = np.clip((X[:, cols] - p["mean"]) / p["scale"], -p["clip"], p["clip"])
            n = len([k for k in p if k.startswith("W")])
            for i in range(n):
                h = h @ p[f"W{i}"] + p[f"b{i}"]
                if i < n - 1:
                    h = np.maximum(h, 0.0)
            return h
        # Gradient-boosted trees, all evaluated at once. The features are finite by
        # construction (vision.marks.region_feature_matrix); a NaN, should one slip through,
        # reads as 0.
        xc = np.ascontiguousarray(np.nan_to_num(X))
        qs = _exit_leaf_tables(p)
        nm = None if qs is None else _node_major_tables(p, qs)
        N = X.shape[0]
        out = np.zeros((N, len(self.classes)), np.float64) + p["baseline"]
        C = len(self.classes)
        tc = p["tree_class"]
        tiled = p.get("tree_class_tiled")
        if tiled is None:
            tiled = tc.size % C == 0 and np.array_equal(tc, np.tile(np.arange(C), tc.size // C))
        if nm is not None and tiled:
            # (the leaf values tree-major, (T, N): each class's trees added in tree order, as
            # the sum below adds them, vectorised over the rows: _node_major_class_sums)
            out += _node_major_class_sums(xc, nm, C).T
            return out
        if nm is not None:
            vals = _node_major_leaf_values(xc, nm)  # (N, T)
        else:
            vals = _leaf_values(xc, p) if qs is None else _exit_leaf_values(xc, qs)
        if tiled:
            out += vals.reshape(N, -1, C).sum(axis=1)  # one tree per class and iteration
        else:
            for c in range(C):
                out[:, c] += vals[:, tc == c].sum(axis=1)
        return out

    def predict_proba(self, X: np.ndarray, *, allowed: np.ndarray | None = None,
                      calibrated: bool = True) -> np.ndarray:
        """(N, F) features -> (N, C) probabilities; ``allowed`` (N, C) bool masks out marks a
        region cannot take (renormalised over the rest)."""
        z = self.raw_scores(X).astype(np.float64)
        if calibrated:
            z = z / self.temperature
        if allowed is not None:
            z = np.where(np.asarray(allowed, bool), z, -np.inf)
        z = z - z.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)


def _leaf_values(X: np.ndarray, p: Mapping) -> np.ndarray:
    """(N, T) value of the leaf each row reaches in each tree, by walking down: every split
    compared for every row in one go, then each (row, tree) walks down by table look-ups (a
    leaf's children are itself, so finished walks stay put). The reference for
    :func:`_exit_leaf_values`, and its stand-in for trees of more than 64 leaves."""
    N = X.shape[0]
    # (N, nodes), row by row: one row's walks through all trees then touch one small block
    # of the table (cache-friendly), not one entry per row scattered over all of it
    xn = X.take(p["feature"], axis=1)
    n_nodes = p["feature"].size
    flat = (xn > p["threshold"]).reshape(-1)  # True: go right
    rows = (np.arange(N, dtype=np.int64) * n_nodes)[:, None]
    idx = np.broadcast_to(p["roots"], (N, p["roots"].size)).copy()
    child = p["child"]
    # (in place, into two buffers: fresh arrays for each step cost as much as the steps)
    at = np.empty(idx.shape, np.int64)
    go = np.empty(idx.shape, bool)
    for _ in range(int(p["depth"])):
        np.add(idx, rows, out=at)
        flat.take(at, out=go)
        idx *= 2
        idx += go
        child.take(idx, out=idx)
    return p["value"].take(idx)


_tables_lock = threading.Lock()


def _built_once(p: dict, key: str, build) -> dict | None:
    """``p[key]``, set to ``build()`` on first use (a table or None), under ``_tables_lock`` so
    that two reading threads build it once; a read-only mapping ``p`` gets it built every
    time."""
    if key in p:
        return p[key]
    if not isinstance(p, dict):  # (a read-only mapping: build the tables every time)
        return build()
    with _tables_lock:
        if key not in p:
            p[key] = build()
        return p[key]


def _exit_leaf_tables(p: dict) -> dict | None:
    """The trees as exit-leaf bit masks (see :func:`_exit_leaf_values`), built on first use
    and kept in ``p``; None when a tree has more than 64 leaves (then the trees are walked).

    Each tree's leaves are numbered left to right (bit 0 the leftmost). An inner node's mask
    has the bits of the leaves of its left subtree cleared: a row that goes right there cannot
    end in them. The inner nodes are listed tree by tree (a tree that is a lone leaf gets one
    node whose mask clears nothing)."""
    return _built_once(p, "_exit_leaf", lambda: _build_exit_leaf_tables(p))


def _build_exit_leaf_tables(p: Mapping) -> dict | None:
    """:func:`_exit_leaf_tables`, built (None for trees of more than 64 leaves)."""
    leaf, left, right = p["leaf"], p["left"].tolist(), p["right"].tolist()
    is_leaf = leaf.tolist()
    inner, clear, starts, leaves, first_leaf = [], [], [], [], []
    most = 0
    for root in p["roots"].tolist():
        starts.append(len(inner))
        first_leaf.append(len(leaves))
        n0 = len(leaves)
        # depth first, left before right: an inner node's left subtree has been numbered
        # when it comes back from the stack ("mid"), and those leaves are cleared by it
        stack = [(root, False)]
        begin: dict[int, int] = {}
        while stack:
            node, mid = stack.pop()
            if mid:
                inner.append(node)
                clear.append((begin[node] - n0, len(leaves) - n0))
                stack.append((right[node], False))
            elif is_leaf[node]:
                leaves.append(node)
            else:
                begin[node] = len(leaves)
                stack += [(node, True), (left[node], False)]
        if starts[-1] == len(inner):  # a lone leaf: a node that clears nothing
            inner.append(-1)
            clear.append((0, 0))
        most = max(most, len(leaves) - n0)
    if most > 64:
        return None
    dtype = np.uint32 if most <= 32 else np.uint64
    nbits = 32 if most <= 32 else 64
    full = (1 << nbits) - 1
    inner_a = np.array(inner, np.int64)
    real = inner_a >= 0
    at = np.where(real, inner_a, 0)
    tables = {
        "feature": np.where(real, p["feature"][at], 0),
        "threshold": np.where(real, p["threshold"][at], np.float32(0)).astype(np.float32),
        "mask": np.array([full & ~((1 << b) - (1 << a)) for a, b in clear], dtype),
        "starts": np.array(starts, np.int64),
        "first_leaf": np.array(first_leaf, np.int64) - 1,
        "value": p["value"][np.array(leaves, np.int64)],
        "float": np.float32 if dtype == np.uint32 else np.float64,
    }
    return tables


def _exit_leaf_values(X: np.ndarray, t: Mapping) -> np.ndarray:
    """:func:`_leaf_values` without walking (the same leaves, so the same values): every
    inner node's split compared for every row, each tree's mask of leaves still reachable is
    the AND of the masks of the nodes where the row goes right, and the row ends in the
    leftmost leaf left (a row goes left wherever nothing sends it right). Half the time of
    the walk (reader-v5, 140 rows: five look-up steps over every (row, tree) replaced by one
    pass over the inner nodes)."""
    right = np.greater(X.take(t["feature"], axis=1), t["threshold"]).view(np.uint8)
    m = t["mask"]
    # 1 (go right) -> 0, 0 -> all bits set; then OR the node's mask: its mask where the row
    # goes right, all bits (no effect on the AND) where it goes left
    bits = np.subtract(right, 1, dtype=m.dtype)
    bits |= m
    reach = np.bitwise_and.reduceat(bits, t["starts"], axis=1)  # (N, T), never 0
    reach &= -reach  # the lowest bit set: the leftmost reachable leaf
    # its bit number, exactly (a power of two converts to float exactly)
    pos = np.frexp(reach.astype(t["float"]))[1]
    pos += t["first_leaf"]  # (frexp gives bit + 1; first_leaf is one less than the tree's)
    return t["value"].take(pos)


#: The node-major tables (:func:`_node_major_tables`) pad every tree to the inner nodes of the
#: largest; beyond this many padded nodes per real one the masks of :func:`_exit_leaf_values`
#: are used as they are.
NODE_MAJOR_MAX_PADDING = 1.5


def _node_major_tables(p: dict, t: Mapping) -> dict | None:
    """:func:`_exit_leaf_tables` ``t`` laid out for :func:`_node_major_leaf_values`, built on
    first use and kept in ``p``; None when padding the trees would cost too much
    (``NODE_MAJOR_MAX_PADDING``).

    Every tree gets the same number K of inner nodes (a tree with fewer gets nodes whose mask
    clears nothing, as a lone leaf's), and row ``k * T + tree`` holds the tree's k-th inner
    node: the AND over a tree's nodes becomes K - 1 ANDs of (T, N) blocks. The masks keep
    the low bits only, in the smallest unsigned type that holds every tree's leaves (one
    byte for trees of up to 8 leaves): a tree's leftmost reachable leaf is among its own
    leaves, so the bits above them, set in every mask, never decide."""
    return _built_once(p, "_exit_leaf_node_major", lambda: _build_node_major_tables(t))


def _build_node_major_tables(t: Mapping) -> dict | None:
    """:func:`_node_major_tables`, built (None when padding would cost too much)."""
    starts = t["starts"]
    T, n_inner = starts.size, t["mask"].size
    counts = np.diff(np.append(starts, n_inner))
    K = int(counts.max()) if T else 0
    if T == 0 or T * K > NODE_MAJOR_MAX_PADDING * n_inner:
        return None
    # leaves per tree: the values between one tree's first leaf and the next's
    first = t["first_leaf"] + 1
    most = int(np.diff(np.append(first, t["value"].size)).max())
    dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64)
                 if np.iinfo(d).bits >= most)
    k = np.arange(K)
    real = k[None, :] < counts[:, None]  # (T, K)
    at = np.where(real, starts[:, None] + k[None, :], 0)
    low = np.iinfo(dtype).max
    mask = np.where(real, t["mask"][at] & low, low).astype(dtype)
    feature = np.where(real, t["feature"][at], 0).T.reshape(-1)
    threshold = np.where(real, t["threshold"][at], np.float32(0)).astype(np.float32).T.reshape(-1)
    # the distinct splits (feature, threshold): trees fitted on binned features share many
    # (reader-v8: 3,431 of 8,000 nodes); each is compared once and its answer gathered for
    # every node that makes it (:func:`_node_major_leaves`)
    splits, node_split = np.unique(np.stack([feature.astype(np.float64),
                                             threshold.astype(np.float64)], 1),
                                   axis=0, return_inverse=True)
    tables = {
        "K": K,
        "T": T,
        # node-major: (K, T) flattened
        "feature": feature,
        "threshold": threshold.reshape(-1, 1),
        "mask": mask.T.reshape(-1, 1),
        "first_leaf": t["first_leaf"][:, None],
        "value": t["value"],
        "float": np.float32 if np.iinfo(dtype).bits <= 32 else np.float64,
        "split_feature": splits[:, 0].astype(np.int64),
        "split_threshold": splits[:, 1].astype(np.float32).reshape(-1, 1),
        "node_split": node_split.reshape(-1).astype(np.intp),
    }
    return tables


def _node_major_leaf_values(X: np.ndarray, t: Mapping) -> np.ndarray:
    """:func:`_exit_leaf_values` on the node-major tables (:func:`_node_major_tables`): the
    same leaves, so the same (N, T) values, C-contiguous as there (the caller's sums run in
    the same order). Why: every step works on contiguous rows of N values (the features'
    columns gathered from the transposed matrix, one AND per inner-node rank instead of a
    ``reduceat`` over 5-node groups), on one byte per mask for small trees; reader-v7's
    1,600 trees on the 12 bench photos' rows: less than half the time."""
    return t["value"].take(_node_major_leaves(X, t).T)


def _node_major_leaves(X: np.ndarray, t: Mapping) -> np.ndarray:
    """(T, N) int: the index (into ``t["value"]``) of the leaf each row reaches in each tree,
    tree-major (:func:`_node_major_leaf_values` takes the values at its transpose)."""
    N = X.shape[0]
    K, T = t["K"], t["T"]
    if "node_split" in t:
        # each distinct split compared once, its answer gathered for every node making it:
        # the same comparisons (the same feature value against the same float32 threshold)
        xs = np.ascontiguousarray(X.T).take(t["split_feature"], axis=0)  # (splits, N)
        right = np.greater(xs, t["split_threshold"]).view(np.uint8).take(t["node_split"], axis=0)
    else:
        xt = np.ascontiguousarray(X.T).take(t["feature"], axis=0)  # (K * T, N)
        right = np.greater(xt, t["threshold"]).view(np.uint8)
    m = t["mask"]
    # as in _exit_leaf_values: go right -> the node's mask, go left -> all bits set
    bits = np.subtract(right, 1, dtype=m.dtype)
    bits |= m
    b = bits.reshape(K, T, N)
    reach = b[0].copy()
    for k in range(1, K):
        reach &= b[k]
    if reach.dtype == np.uint8:
        # (one byte: the lowest bit's number + 1, as below, looked up in a table of 256)
        pos = _LOWEST_BIT.take(reach)
    else:
        reach &= -reach  # the lowest bit set: the leftmost reachable leaf
        pos = np.frexp(reach.astype(t["float"]))[1]  # bit + 1, exactly
    pos += t["first_leaf"]
    return pos


def _lowest_bit_table() -> np.ndarray:
    """For each byte v: what :func:`_node_major_leaves` computes for a ``uint8`` reach v
    without the table (its lowest set bit, as float32, frexp's exponent: the bit's number + 1;
    0 for v = 0, which a reach never is)."""
    v = np.arange(256, dtype=np.uint8)
    low = v & -v
    out = np.frexp(low.astype(np.float32))[1].astype(np.int64)
    out.setflags(write=False)
    return out


_LOWEST_BIT = _lowest_bit_table()


def _node_major_class_sums(X: np.ndarray, t: Mapping, C: int) -> np.ndarray:
    """(C, N) float64: each class's leaf values (trees ``c, c + C, c + 2C, ...``, the tiled
    layout of one tree per class and iteration) added up in tree order for every row; the
    same sums, added in the same order, as ``_node_major_leaf_values(X, t).reshape(N, -1,
    C).sum(axis=1)`` (a reduction over a middle axis adds its items one after the other),
    transposed. Why: the leaf values gathered tree-major ((T, N), contiguous rows) and summed
    over the outer axis, each step a vectorised add of C * N values, instead of gathering
    them row-major through the transposed leaf indices and adding C values at a time."""
    pos = _node_major_leaves(X, t)
    vals = t["value"].take(pos)  # (T, N)
    N = vals.shape[1]
    return np.add.reduce(vals.reshape(-1, C, N), axis=0)


def _arr(doc, key, where, problems, *, dtype=np.float32, ndim=None):
    v = doc.get(key) if isinstance(doc, Mapping) else None
    if v is None:
        problems.append(f"{where}: missing '{key}'")
        return None
    try:
        a = np.asarray(v, dtype=dtype)
    except (TypeError, ValueError):
        problems.append(f"{where}.{key}: not an array of numbers")
        return None
    if ndim is not None and a.ndim != ndim:
        problems.append(f"{where}.{key}: expected {ndim} dimensions, got shape {a.shape}")
        return None
    if a.dtype.kind == "f" and not np.all(np.isfinite(a)):
        problems.append(f"{where}.{key}: holds NaN or infinite values")
        return None
    return a


def _thresholds_by_mark(by_mark, where: str, problems: list[str], marks) -> dict:
    """A validated ``{mark: {hand_min, learned_min, learned_alone, hand_floor}}`` (problems
    appended to ``problems``)."""
    four = THRESHOLD_NAMES
    if not isinstance(by_mark, Mapping):
        problems.append(f"{where}: expected an object of mark -> thresholds")
        return {}
    clean = {}
    for m, t in by_mark.items():
        if m not in marks:
            problems.append(f"{where}: unknown mark {m!r}")
        elif not isinstance(t, Mapping) or set(t) != set(four) or not all(
                isinstance(t[k], (int, float)) and 0.0 <= float(t[k]) <= 1.5 for k in four):
            problems.append(f"{where}.{m}: expected numbers 0..1.5 for {', '.join(four)}")
        else:
            clean[m] = {k: float(t[k]) for k in four}
    return clean


def model_from_dict(doc, *, source: str = "<model>") -> LearnedReader:
    """Validate a parsed model document and build the reader (every problem reported at once).

    Raises
    ------
    ReaderModelError
        when anything is missing, inconsistent, or made for other features or marks.
    """
    from vision.marks import FEATURE_NAMES, MARKS

    problems: list[str] = []
    hint = ("Restore calibration/models/ from the repository, or retrain it with "
            "scripts/train_reader.py (docs/EVALUATION.md).")
    if not isinstance(doc, Mapping):
        raise ReaderModelError(f"reader model {source} is not a JSON object.", hint=hint)
    fmt = doc.get("format")
    if fmt not in (MODEL_FORMAT, COMMITTEE_FORMAT, MEAN_FORMAT):
        problems.append(f"format is {fmt!r}, expected {MODEL_FORMAT!r}, {COMMITTEE_FORMAT!r} "
                        f"or {MEAN_FORMAT!r}")
    if fmt == MEAN_FORMAT and doc.get("combine") != "mean":
        problems.append(f"combine: a {MEAN_FORMAT!r} model must say \"mean\", got {doc.get('combine')!r}")
    elif fmt != MEAN_FORMAT and "combine" in doc:
        problems.append(f"combine: only a {MEAN_FORMAT!r} model may say how its committee combines")
    committee = _committee(doc, fmt, source, problems)
    classes = tuple(doc.get("classes") or ())
    if classes != MARKS:
        problems.append(f"classes {list(classes)} are not the reader's marks {list(MARKS)}")
    names = tuple(doc.get("feature_names") or ())
    # A model may have been made for an earlier feature list: every name it uses must still
    # be measured (then it reads those columns of the full matrix); a name the reader no
    # longer measures, or one given twice, makes it unusable.
    extra = [n for n in names if n not in FEATURE_NAMES]
    dup = sorted({n for n in names if names.count(n) > 1})
    if not names or extra or dup:
        problems.append("feature_names do not match vision.marks.FEATURE_NAMES"
                        + (" (none given)" if not names else "")
                        + (f" (unknown {extra[:5]})" if extra else "")
                        + (f" (repeated {dup[:5]})" if dup else ""))
        columns = np.arange(len(names), dtype=np.int64)
    else:
        columns = np.array([FEATURE_NAMES.index(n) for n in names], np.int64)
    kind = doc.get("kind")
    F, C = len(names), len(MARKS)
    params: dict[str, np.ndarray] = {}
    if kind == "mlp":
        m = doc.get("mlp") or {}
        params["mean"] = _arr(m, "mean", "mlp", problems, ndim=1)
        params["scale"] = _arr(m, "scale", "mlp", problems, ndim=1)
        params["clip"] = np.float32(m.get("clip", 6.0)) if isinstance(m.get("clip", 6.0), (int, float)) else None
        layers = m.get("layers")
        if not isinstance(layers, list) or not layers:
            problems.append("mlp: 'layers' must be a non-empty list")
            layers = []
        width = F
        for i, L in enumerate(layers):
            W = _arr(L, "W", f"mlp.layers[{i}]", problems, ndim=2)
            b = _arr(L, "b", f"mlp.layers[{i}]", problems, ndim=1)
            if W is not None and b is not None:
                if W.shape[0] != width or W.shape[1] != b.shape[0]:
                    problems.append(f"mlp.layers[{i}]: W {W.shape} / b {b.shape} do not follow "
                                    f"a layer of width {width}")
                width = W.shape[1]
            params[f"W{i}"], params[f"b{i}"] = W, b
        if layers and width != C:
            problems.append(f"mlp: the last layer has {width} outputs, expected {C}")
        for k in ("mean", "scale"):
            if params.get(k) is not None and params[k].shape != (F,):
                problems.append(f"mlp.{k}: expected {F} values, got {params[k].shape}")
        if params.get("scale") is not None and np.any(params["scale"] <= 0):
            problems.append("mlp.scale: must be positive")
    elif kind == "gbdt":
        g = doc.get("gbdt") or {}
        ints = dict(dtype=np.int64, ndim=1)
        for k in ("feature", "left", "right", "roots", "tree_class"):
            params[k] = _arr(g, k, "gbdt", problems, **ints)
        # float32 like the features: the exporter stores the largest float32 not above each
        # split value, so `x <= threshold` is exact
        params["threshold"] = _arr(g, "threshold", "gbdt", problems, dtype=np.float32, ndim=1)
        params["value"] = _arr(g, "value", "gbdt", problems, dtype=np.float64, ndim=1)
        params["baseline"] = _arr(g, "baseline", "gbdt", problems, dtype=np.float64, ndim=1)
        params["leaf"] = _arr(g, "leaf", "gbdt", problems, dtype=bool, ndim=1)
        params["missing_left"] = _arr(g, "missing_left", "gbdt", problems, dtype=bool, ndim=1)
        depth = g.get("depth")
        if not isinstance(depth, int) or not 1 <= depth <= 64:
            problems.append(f"gbdt.depth: expected an integer 1..64, got {depth!r}")
        params["depth"] = depth
        if not any(v is None for v in params.values()):
            n = params["feature"].size
            for k in ("threshold", "value", "left", "right", "leaf", "missing_left"):
                if params[k].size != n:
                    problems.append(f"gbdt.{k}: {params[k].size} entries, expected {n} (one per node)")
            inner = ~params["leaf"] if params["leaf"].size == n else np.zeros(0, bool)
            if params["feature"].size == n and inner.size and (
                    np.any(params["feature"][inner] < 0) or np.any(params["feature"][inner] >= F)):
                problems.append(f"gbdt.feature: indices outside 0..{F - 1}")
            for k in ("left", "right", "roots"):
                if params[k].size and (params[k].min() < 0 or params[k].max() >= n):
                    problems.append(f"gbdt.{k}: node indices outside 0..{n - 1}")
            if params["tree_class"].size != params["roots"].size or (
                    params["tree_class"].size and (params["tree_class"].min() < 0
                                                   or params["tree_class"].max() >= C)):
                problems.append("gbdt.tree_class: one class index (0..7) per tree expected")
            if params["baseline"].size != C:
                problems.append(f"gbdt.baseline: expected {C} values")
            if not problems:
                # split features as columns of the reader's full matrix
                params["feature"] = np.where(params["leaf"], 0, columns[np.where(
                    params["leaf"], 0, params["feature"])])
                node = np.arange(n)
                # children table, [left, right] per node; a leaf leads to itself
                params["child"] = np.stack([np.where(params["leaf"], node, params["left"]),
                                            np.where(params["leaf"], node, params["right"])],
                                           axis=1).reshape(-1).astype(np.int32)
                params["roots"] = params["roots"].astype(np.int32)
                # trees laid out one per class in turn (the exporter's order): summed by a
                # reshape (checked once here rather than on every call)
                tc = params["tree_class"]
                params["tree_class_tiled"] = bool(
                    tc.size % C == 0 and np.array_equal(tc, np.tile(np.arange(C), tc.size // C)))
    else:
        problems.append(f"kind is {kind!r}, expected 'mlp' or 'gbdt'")
    temperature = doc.get("temperature", 1.0)
    if not isinstance(temperature, (int, float)) or not 0.05 <= float(temperature) <= 20:
        problems.append(f"temperature: expected a number in 0.05..20, got {temperature!r}")
        temperature = 1.0
    rd = doc.get("decision") or {}
    rule_kw = {}
    by_mark = rd.get("by_mark") if isinstance(rd, Mapping) else None
    if by_mark is not None:
        rule_kw["by_mark"] = _thresholds_by_mark(by_mark, "decision.by_mark", problems, MARKS)
    tiers = rd.get("tiers") if isinstance(rd, Mapping) else None
    if tiers is not None:
        clean_tiers = []
        if not isinstance(tiers, list):
            problems.append("decision.tiers: expected a list of {doubt_max, by_mark}")
            tiers = []
        for i, tier in enumerate(tiers):
            where = f"decision.tiers[{i}]"
            d = tier.get("doubt_max") if isinstance(tier, Mapping) else None
            if not isinstance(d, (int, float)) or not 0.0 <= float(d) <= 1.0:
                problems.append(f"{where}.doubt_max: expected a number in 0..1, got {d!r}")
                continue
            if clean_tiers and float(d) <= clean_tiers[-1][0]:
                problems.append(f"{where}.doubt_max: tiers must come by ascending doubt_max")
            by_kind = tier.get("by_kind", {})
            if not isinstance(by_kind, Mapping):
                problems.append(f"{where}.by_kind: expected an object of region kind -> by_mark")
                by_kind = {}
            clean_tiers.append((float(d), _thresholds_by_mark(tier.get("by_mark"), f"{where}.by_mark",
                                                              problems, MARKS),
                                {str(k): _thresholds_by_mark(v, f"{where}.by_kind.{k}", problems, MARKS)
                                 for k, v in by_kind.items()}))
        rule_kw["tiers"] = tuple(clean_tiers)
    for k in DecisionRule.__dataclass_fields__:
        if k in ("by_mark", "tiers"):
            continue
        if k in rd:
            v = rd[k]
            if not isinstance(v, (int, float)) or not 0.0 <= float(v) <= 1.5:
                problems.append(f"decision.{k}: expected a number in 0..1.5, got {v!r}")
            else:
                rule_kw[k] = float(v)
    params["columns"] = columns
    for i, member in enumerate(committee):
        # the reader measures the columns the first model names (the optional families are
        # computed only for a model that reads them): a member must read no other
        other = sorted(set(member.feature_names) - set(names))
        if other:
            problems.append(f"committee[{i}] reads columns the model does not: {other[:5]}")
    if problems:
        raise ReaderModelError(f"reader model {source} is damaged or does not fit this reader:",
                               hint=hint + "\n" + "\n".join(f"  - {p}" for p in problems))
    return LearnedReader(kind, classes, names, params, float(temperature), DecisionRule(**rule_kw),
                         {k: doc.get(k) for k in ("id", "training", "validation", "created",
                                                  "mean_rule")},
                         source, tuple(committee),
                         "mean" if fmt == MEAN_FORMAT else "second_opinions")


def _committee(doc: Mapping, fmt, source: str, problems: list[str]) -> list:
    """The committee's members of a format-2 or format-3 document, each validated as a model
    of its own (their problems added to ``problems``); none for format 1."""
    members = doc.get("committee")
    if fmt not in (COMMITTEE_FORMAT, MEAN_FORMAT):
        if members is not None:
            problems.append(f"committee: only a {COMMITTEE_FORMAT!r} or {MEAN_FORMAT!r} model "
                            "may have one")
        return []
    if not isinstance(members, list) or not members:
        problems.append("committee: expected a non-empty list of model documents")
        return []
    out = []
    for i, m in enumerate(members):
        where = f"committee[{i}]"
        if not isinstance(m, Mapping) or m.get("format") != MODEL_FORMAT:
            problems.append(f"{where}: expected a {MODEL_FORMAT!r} model document")
            continue
        try:
            out.append(model_from_dict(m, source=f"{source} {where}"))
        except ReaderModelError as e:
            problems += [f"{where}: {line.strip()[2:]}" for line in (e.hint or "").splitlines()
                         if line.strip().startswith("- ")] or [f"{where}: {e.message}"]
    return out


def load_model(path: str | Path = DEFAULT_MODEL) -> LearnedReader:
    """Read and validate a model file.

    Raises
    ------
    ReaderModelError
        when the file cannot be read, is not JSON, or is damaged.
    """
    from sheetcheck.files import read_json_file

    doc = read_json_file(path, what="reader model", error=ReaderModelError,
                         hint="Restore calibration/models/ from the repository.")
    return model_from_dict(doc, source=str(path))


_lock = threading.Lock()
_cache: dict[str, LearnedReader | None] = {}


def default_model() -> LearnedReader:
    """The bundled model, loaded once per process.

    Raises
    ------
    ReaderModelError
        when the file is missing or damaged: the reader must not quietly fall back to the
        hand reader alone, whose readings are confident far more often (and wrong more often)
        than those of the two readers. (Pass ``learned=None`` to read with the hand reader
        alone on purpose.)
    """
    key = str(DEFAULT_MODEL)
    with _lock:
        if key not in _cache:
            if not DEFAULT_MODEL.is_file():
                raise ReaderModelError(
                    f"the learned reader's model {DEFAULT_MODEL} is missing.",
                    hint="Reinstall sheetcheck (the model ships with it), or rebuild it with "
                         "scripts/train_reader.py as docs/EVALUATION.md says.")
            _cache[key] = load_model(DEFAULT_MODEL)
        return _cache[key]


def resolve_reader(learned) -> LearnedReader | None:
    """``"default"`` -> the bundled model (:func:`default_model`); None or a LearnedReader
    as given. The one place that turns a ``learned=`` option into a reader."""
    if isinstance(learned, str):
        if learned != "default":
            raise ValueError(f"learned must be 'default', None or a LearnedReader, got {learned!r}")
        return default_model()
    return learned


def photo_doubt(probs: np.ndarray) -> float:
    """Share of a photo's regions whose learned probability (best mark) is below
    ``DOUBT_LEVEL``; ``probs`` is (R, C)."""
    probs = np.asarray(probs)
    return float(np.mean(probs.max(axis=1) < DOUBT_LEVEL)) if probs.size else 0.0


def combine(hand, probs: Sequence[float], *, classes: Sequence[str], rule: DecisionRule,
            review_threshold: float, photo_confidence: float = 1.0, doubt: float = 0.0):
    """One verdict from the hand reading and the learned reader's probabilities.

    Parameters
    ----------
    hand : vision.marks.RegionReading
        The hand reader's reading (no photo-level cap).
    probs : (C,) sequence of float
        The learned reader's calibrated probabilities over ``classes`` (0 for marks the region
        does not allow).
    classes : sequence of str
    rule : DecisionRule
    review_threshold : float
        A confident reading's confidence is at least this; any other is below it.
    photo_confidence : float
        ``vision.pipeline.photo_confidence`` of the photo.
    doubt : float
        :func:`photo_doubt` of the photo.

    Returns
    -------
    vision.marks.RegionReading
        The learned reader's mark and probabilities; ``review`` unless the two readers agree
        and are sure enough (``rule``). The features gain ``hand_mark``, ``hand_confidence``,
        ``learned_mark``, ``learned_confidence``.
    """
    # (one region of combine_all: the rule is written once)
    return combine_all([hand], np.asarray(probs, np.float64)[None, :], classes=classes, rule=rule,
                       review_threshold=review_threshold, photo_confidence=photo_confidence,
                       doubt=doubt)[0]


def combine_all(hands: Sequence, probs: np.ndarray, *, classes: Sequence[str], rule: DecisionRule,
                review_threshold: float, photo_confidence: float = 1.0,
                doubt: float = 0.0) -> list:
    """:func:`combine` for all regions of a photo at once: the same readings (mark, confidence,
    review, alternatives, features and reason, value for value) as the rule region by region.

    Why: the rule in plain Python once a region (~130 a photo) cost ~1.2 ms; here what depends
    on the photo alone is worked out once (the thresholds per (mark, region kind) at this
    doubt, the photo-level gates, the review cap), the allowed probabilities are normalised
    for all regions in numpy (the same sums, added in the same order, and the same
    quotients) and ordered by a stable sort (ties in class order, as ``sorted`` leaves them),
    and the rest is the rule's arithmetic, region by region.

    Parameters
    ----------
    hands : sequence of vision.marks.RegionReading
    probs : (R, C) ndarray
        One row of :func:`combine`'s ``probs`` (probabilities: finite, or NaN where a region
        allows no class the model has) per hand reading.
    classes, rule, review_threshold, photo_confidence, doubt
        As for :func:`combine`.

    Returns
    -------
    list of vision.marks.RegionReading
    """
    from vision.marks import RegionReading

    probs = np.asarray(probs, np.float64)
    if probs.ndim != 2 or len(probs) != len(hands) or probs.shape[1] != len(classes):
        raise ValueError(f"expected ({len(hands)}, {len(classes)}) probabilities, got {probs.shape}")
    classes = list(classes)
    h = _HandRows.of(hands, classes)
    v = _rule_arrays(h, probs, classes=classes, rule=rule, photo_confidence=photo_confidence,
                     doubt=doubt)
    # best first; a stable sort keeps class order between equal values (as sorted() does)
    order = np.argsort(np.where(h.ok, -v.norm, np.inf), axis=1, kind="stable").tolist()
    rows, n_ok, goods, oks = v.norm.tolist(), h.ok.sum(axis=1).tolist(), v.good.tolist(), h.ok.tolist()
    gated = photo_confidence < rule.photo_gate
    unclear = doubt > rule.photo_doubt_max
    unclear_reason = f"photo too unclear: {doubt:.0%} of its regions are in doubt" if unclear else ""
    cap = math.nextafter(review_threshold, 0.0) - 1e-4
    out = []
    for hand, row, idx, n, good, okr, sure in zip(hands, rows, order, n_ok, goods, oks,
                                                  v.sure.tolist()):
        alternatives = hand.alternatives
        if good:
            alts = tuple([(classes[j], row[j]) for j in idx[:n]])
        else:  # (combine's fallback, a sum of 0 or NaN: every allowed mark alike, in class order)
            alts = tuple([(c, 1.0 / n) for c, a in zip(classes, okr) if a])
        # (alts[0] is _rule_arrays' mark and probability: the same first best)
        mark_l, p_l = alts[0]
        mark_h, c_h = hand.mark, float(hand.confidence)
        reason = ""
        if hand.reason == "too few unprinted pixels to read":
            reason = hand.reason
        elif gated:
            reason = "photo too unreliable (registration/resolution)"
        elif unclear:
            reason = unclear_reason
        elif mark_l != mark_h:
            reason = f"readers disagree (hand: {mark_h} {c_h:.3f}, learned: {mark_l} {p_l:.3f})"
        elif not sure:
            reason = f"low confidence ({mark_l}: hand {c_h:.4f}, learned {p_l:.4f})"
        if sure:
            conf = max(p_l, review_threshold)
        else:
            hp = dict(alternatives).get(mark_l, 0.0)
            conf = min(0.5 * (p_l + hp), p_l, cap)
        feats = {**hand.features, "hand_mark": mark_h, "hand_confidence": c_h,
                 "learned_mark": mark_l, "learned_confidence": p_l}
        out.append(RegionReading(hand.region_id, hand.kind, mark_l, float(conf), not sure,
                                 alts, feats, reason))
    return out


def committee_proba(members: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The averaged probabilities of a format-3 committee, and each member's mark.

    Why: three fits of one recipe, each judged by its own rule, flag the union of their doubts
    (a region any one of them is unsure of); their averaged probabilities separate right from
    wrong readings better than any one of them, and one rule chosen on them, on calibration
    rows none of the members was fitted on, flags fewer regions with no more confident errors
    (measured, session 23: docs/EVALUATION.md).

    Parameters
    ----------
    members : sequence of (N, C) ndarray
        Each member's calibrated probabilities (``LearnedReader.predict_proba``, its own
        temperature), the first model's first; rows of NaN (a region that allows no class
        the model has) stay NaN.

    Returns
    -------
    p : (N, C) ndarray
        The members' mean, in member order (the same sums wherever it is computed).
    marks : (K, N) int ndarray
        Each member's best mark (its first best, as ``argmax`` picks).
    """
    stack = np.stack([np.asarray(m, np.float64) for m in members])
    p = stack[0].copy()
    for m in stack[1:]:
        p += m
    p /= len(stack)
    return p, np.argmax(np.where(np.isnan(stack), -np.inf, stack), axis=2)


def committee_disagreements(readings: Sequence, marks: np.ndarray, member_probs: Sequence,
                            names: Sequence[str], *, classes: Sequence[str],
                            review_threshold: float) -> list:
    """``readings`` (:func:`combine_all` on :func:`committee_proba`'s mean) with each confident
    one that some member reads as another mark flagged (``review``, confidence below the
    threshold, ``reason`` naming the member and its mark)."""
    from vision.marks import RegionReading

    out = list(readings)
    cap = math.nextafter(review_threshold, 0.0) - 1e-4
    index = {c: j for j, c in enumerate(classes)}
    for i, rd in enumerate(out):
        if rd.review:
            continue
        j = index.get(rd.mark, -1)
        for k in range(len(marks)):
            if marks[k, i] != j:
                other = classes[marks[k, i]]
                p_other = float(member_probs[k][i, marks[k, i]])
                out[i] = RegionReading(rd.region_id, rd.kind, rd.mark, float(min(rd.confidence, cap)),
                                       True, rd.alternatives, rd.features,
                                       f"committee disagrees ({names[k]}: {other} {p_other:.4f})")
                break
    return out


def second_opinions(readings: Sequence, hands: Sequence, rows: np.ndarray, opinions: Sequence, *,
                    classes: Sequence[str], review_threshold: float, photo_confidence: float = 1.0,
                    doubt: float = 0.0) -> list:
    """Keep a confident reading confident only if every other member of the model's committee
    (:attr:`LearnedReader.committee`), reading the same region, is confident of the same mark.

    Why: models fitted by the same recipe on other splits of the training photos agree on
    almost every clear reading, and their rare confident errors are mostly not the same
    ones: a confident error has to get past all of them. Measured (session 11,
    docs/EVALUATION.md): three fits of one recipe made 2, 3 and 8 confident errors alone on
    9 validation corpora (1,320 photos), none together.

    Parameters
    ----------
    readings : sequence of vision.marks.RegionReading
        The model's own verdicts (:func:`combine_all`), one per region.
    hands : sequence of vision.marks.RegionReading
        The hand reader's readings of the same regions.
    rows : (K,) int ndarray
        The regions the members read: those whose verdict is confident (the others are
        flagged whatever the members say).
    opinions : sequence of (LearnedReader, (K, C) ndarray)
        Each member with its calibrated probabilities for ``rows`` (its ``predict_proba``).
    classes, review_threshold, photo_confidence
        As for :func:`combine_all`.
    doubt : float
        The model's :func:`photo_doubt` of the photo (every member judges at the model's).

    Returns
    -------
    list of vision.marks.RegionReading
        ``readings``, with each confident one a member does not confirm flagged (``review``,
        confidence below the threshold as for any flagged verdict, ``reason`` naming the
        member and what it read).
    """
    from vision.marks import RegionReading

    out = list(readings)
    rows = [int(i) for i in rows]
    if not rows:
        return out
    cap = math.nextafter(review_threshold, 0.0) - 1e-4
    hand_rows = _HandRows.of([hands[i] for i in rows], classes)
    index = {c: j for j, c in enumerate(classes)}
    own = np.array([index.get(out[i].mark, -1) for i in rows], np.int64)  # the model's marks
    for k, (member, probs) in enumerate(opinions):
        v = _rule_arrays(hand_rows, probs, classes=classes, rule=member.rule,
                         photo_confidence=photo_confidence, doubt=doubt)
        name = (member.meta or {}).get("id") or f"member {k + 1}"
        for j in np.flatnonzero(~v.sure | (v.mark != own)).tolist():
            i = rows[j]
            rd = out[i]
            if rd.review:
                continue
            p_l = float(rd.features.get("learned_confidence", rd.confidence))
            hp = dict(hands[i].alternatives).get(rd.mark, 0.0)
            mark_m = classes[v.mark[j]]
            what = "unsure" if mark_m == rd.mark else "disagrees"
            out[i] = RegionReading(rd.region_id, rd.kind, rd.mark, float(min(0.5 * (p_l + hp), p_l, cap)),
                                   True, rd.alternatives, rd.features,
                                   f"second opinion {what} ({name}: {mark_m} {float(v.p[j]):.4f})")
    return out


@dataclass(frozen=True)
class _HandRows:
    """What the two readers' rule (:func:`_rule_arrays`) needs of each hand reading, as
    arrays (built once a photo, for the model and each member of its committee)."""

    ok: np.ndarray        # (K, C) bool: the marks the region allows (its alternatives)
    hand: np.ndarray      # (K,) int: the hand reader's mark (-1: not one of the classes)
    conf: np.ndarray      # (K,) float: the hand reader's confidence
    kinds: tuple          # the regions' kinds
    unreadable: np.ndarray  # (K,) bool: too few unprinted pixels to read

    @classmethod
    def of(cls, hands: Sequence, classes: Sequence[str]) -> "_HandRows":
        index = {c: j for j, c in enumerate(classes)}
        ok = np.zeros((len(hands), len(classes)), bool)
        mark, conf, kinds, unreadable = [], [], [], []
        for i, h in enumerate(hands):
            for m, _ in h.alternatives:
                j = index.get(m)
                if j is not None:
                    ok[i, j] = True
            mark.append(index.get(h.mark, -1))
            conf.append(float(h.confidence))
            kinds.append(h.kind)
            unreadable.append(h.reason == "too few unprinted pixels to read")
        return cls(ok, np.array(mark, np.int64), np.array(conf, np.float64), tuple(kinds),
                   np.array(unreadable, bool))


class _RuleArrays(NamedTuple):
    norm: np.ndarray  # (K, C): the allowed probabilities, renormalised (0 elsewhere)
    good: np.ndarray  # (K,) bool: their sum was positive (else every allowed mark alike)
    mark: np.ndarray  # (K,) int: the learned reader's mark (class index)
    p: np.ndarray     # (K,) float: its probability
    sure: np.ndarray  # (K,) bool: confident (both readers agree and are sure enough)


def _rule_arrays(h: _HandRows, probs: np.ndarray, *, classes: Sequence[str], rule: DecisionRule,
                 photo_confidence: float, doubt: float) -> _RuleArrays:
    """The two readers' rule for every row at once (:func:`combine_all` builds its readings on
    it; :func:`second_opinions` judges each member with it alone, without building readings).

    The allowed probabilities are summed in class order (as Python's ``sum`` adds them: a
    disallowed class adds 0.0) and divided by the sum; the mark is the first best in class
    order (a stable sort's first); a sum of 0 or NaN leaves every allowed mark alike (the first
    allowed, 1/n). A reading is sure when the hand reader names the same mark and both are
    sure enough (``rule.thresholds`` of the mark and region kind at this ``doubt``), never for
    a region with too few unprinted pixels, nor on a photo below the rule's gate or in more
    doubt than its limit."""
    probs = np.asarray(probs, np.float64)
    kept = np.where(h.ok, probs, 0.0)
    tot = np.zeros(len(kept))
    for j in range(len(classes)):
        tot += kept[:, j]
    good = tot > 0
    norm = kept / np.where(good, tot, 1.0)[:, None]
    best = np.argmax(np.where(h.ok, norm, -np.inf), axis=1)
    n = h.ok.sum(axis=1)
    mark = np.where(good, best, np.argmax(h.ok, axis=1))
    p = np.where(good, norm[np.arange(len(norm)), best], 1.0 / np.maximum(n, 1))
    cache: dict = {}
    t = []
    for key in zip(mark.tolist(), h.kinds):
        v = cache.get(key)
        if v is None:
            v = cache[key] = rule.thresholds(classes[key[0]], doubt, key[1])
        t.append(v)
    t = np.array(t, np.float64).reshape(-1, 4)
    sure = (mark == h.hand) & (((h.conf >= t[:, 0]) & (p >= t[:, 1]))
                              | ((p >= t[:, 2]) & (h.conf >= t[:, 3])))
    sure &= ~h.unreadable
    if photo_confidence < rule.photo_gate or doubt > rule.photo_doubt_max:
        sure[:] = False
    return _RuleArrays(norm, good, mark, p, sure)


__all__ = ["COMMITTEE_FORMAT", "DEFAULT_MODEL", "DOUBT_LEVEL", "MEAN_FORMAT", "THRESHOLD_NAMES",
           "DecisionRule", "LearnedReader", "MODEL_FORMAT", "ReaderModelError", "combine",
           "combine_all", "committee_disagreements", "committee_proba", "default_model",
           "load_model", "model_from_dict", "photo_doubt", "resolve_reader", "second_opinions"]
