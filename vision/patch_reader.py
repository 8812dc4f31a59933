"""The patch reader: a small convolutional network that reads a region from its own pixels.

The hand reader and the learned reader (``vision.marks``, ``vision.learned``) judge a region
by measurements made on it (coverage, hue, X structure, ...). The patch reader looks at the
region itself: a 32 x 32 picture of the light-normalised sheet around the region (sRGB), with
the region's outline and the template's print at the same place as two more channels, and the
region's kind. It was trained on simulated photos of the training painters (dev seeds below
100000, ``scripts/train_patch_reader.py``) and its thresholds were chosen on spent
measurement corpora of the default painter and a dev corpus of the varied one, crossed out
(docs/EVALUATION.md, "Session 45").

It is a third opinion (:func:`confirm`). A reading a person was asked to look at for "low
confidence" or "readers disagree" (the readers' own doubt, not the photo's, nor one of the
checks for stains, print not seen, ...; since session 49 also an "empty" flagged for a stroke
running through it or as a swatch left blank) is confirmed when the patch reader names the
same mark at least as sure as its threshold for that mark, on a photo that is otherwise
clear; a confident "crossed" it reads as another mark is flagged; and (session 46) a flagged
reading it is sure is crossed out, blank or written on is corrected to that
mark and stays flagged (since session 50 not when it is surer still, on a photo where a flag
may be lifted). It never changes the mark of a reading nobody is asked to look at.
Why: the two readers and a network are wrong on different regions (session 45: of 2,755
regions flagged on easy and typical photos of a spent held-out corpus, a first version of the
network named the same mark on 1,761 at >= 0.99, none of them wrong; session 46: where the
readers flagged a crossing-out they read as something else, it named it crossed).

The network needs no deep-learning library at read time. Its convolutions (float32 3 x 3,
batch normalisation folded into them) run on OpenCV's dnn module: the network is built in
code from the model file's weights when the model is loaded (:class:`_DnnConvs`; no network
file ships), one per thread. The rest (each channel's mean and maximum, the region's kind,
the two small dense layers and the softmax) runs in numpy. Why (session 46): on the bench
machine's real patches cv2.dnn computes the convolutions ~20 % faster on one thread and ~25-35 %
faster on two than numpy's matrix products (see :data:`ENGINES`). The numpy convolutions
(``engine="numpy"``: each one a single matrix product over its 3 x 3 columns) remain, for an
OpenCV whose dnn module cannot build or does not reproduce them (checked when the model is
loaded, :func:`_build_dnn`), and as the reference the dnn path is tested against; the two
give the same probabilities to ~1e-5.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import cv2
import numpy as np

from calibration.template import PENCIL_COLOURS
from vision._geom_threads import split_map
from vision.learned import MODEL_DIR, ReaderModelError

#: The patch reader's model file format.
PATCH_MODEL_FORMAT = "sheetcheck.patch-reader/1"
#: The bundled model.
DEFAULT_PATCH_MODEL = MODEL_DIR / "patch-v3.npz"
#: The marks, in the network's output order (``vision.marks.MARKS``).
MARKS = ("empty", "orange", "red", "blue", "green", "purple", "crossed", "written")
#: Flag reasons the patch reader may lift (their prefix): the readers' own doubt, and
#: (session 46) "mostly print", the check that doubts an "empty" on a region that is nearly
#: all print (a mark there may not show to the readers, who read the pixels clear of the
#: print; the patch reader sees the whole window, print included). Every other reason (the
#: photo's doubt, the checks for stains, print not seen, ...; but :data:`LIFTABLE_CHECKS`
#: since session 49) is kept whatever the patch reader says. Why "mostly print": on eleven
#: spent and dev corpora (231 such flags, 7 of them on a region truly marked) it named
#: "empty" at >= 0.99 on 220 regions, all truly empty, and never named "empty" on the 7
#: marked ones.
#: A flag it may not lift (a stain, something lying on the sheet, a pencil the calibration
#: lost, the photo's own doubt; before session 49 also a stroke astray, a swatch left blank
#: and the other :data:`LIFT_BESIDE` flags) leaves every flag of the photo as the two readers
#: set it (:func:`confirm`). Why (session 45): the patch reader was trained on clean
#: sheets; on a coffee-stained and a pencil-covered photo of the stain tests it confirmed
#: wrong readings near the stain the checks had found. (And a photo with such a flag cannot
#: end with nothing flagged anyway.) Session 45 let "mostly print" stand beside these
#: reasons without holding a photo back (a property of the template, not of the photo);
#: since it is one of them, that special case is gone.
LIFTABLE = ("low confidence", "readers disagree", "mostly print")
#: (session 49) Flags of two checks on a confident "empty" that the patch reader may lift too,
#: at its own threshold for the mark (``thresholds``, never the lower ``agree_thresholds``: the
#: two readers read these regions "empty" with confidence, so their agreeing adds nothing):
#: a stroke running through the region ("it may be crossed out": a crossing-out the readers
#: missed, which the patch reader, trained on crossings-out, sees as one) and a calibration
#: swatch left blank among coloured ones ("its pencil may not show on this photo"). Why: on
#: the ten calibration datasets and the two held-out spent ones (docs/EVALUATION.md, session
#: 49) these checks flagged 490 and 280 confident "empty" readings, all but one stroke truly
#: empty; the patch reader named "empty" at >= its threshold (0.995) on 207 and 168 of them,
#: all right, and on none of the 118 coloured swatches the readers read "empty" (its surest
#: there: 0.970). With :data:`LIFT_BESIDE`, the easy and typical photos of the four
#: default-painter datasets left with nothing flagged went from 316 to 408 of 816.
LIFTABLE_CHECKS = ("a stroke runs through it", "swatch left empty among coloured ones")
#: (session 49) Flags of checks that, beside the ones the patch reader lifts, do not hold a
#: photo's lifting back (each is about its own region alone: ink beside the print, colour
#: traced along an outline). Every other flag still does (a stain, something covering the
#: print, a pencil the calibration lost or two calibrations disagreeing, the photo's own
#: doubt), as does anything lying on the sheet. Why: the lifting thresholds are chosen on
#: flagged readings of every photo, held back or not (``scripts/train_patch_reader.py``);
#: on the twelve datasets the photos these flags held back held 3,036 more flags the patch
#: reader lifts by its thresholds, none wrong (the held-out 1550000 and 1560000, which chose
#: nothing: 154 and 159, none wrong).
LIFT_BESIDE = ("ink beside the print", "colour traced along the outline",
               "photo too coarse to see writing")
#: Every flag that does not hold a photo's lifting back (its reason's prefix).
NOT_HOLDING_BACK = LIFTABLE + LIFTABLE_CHECKS + LIFT_BESIDE
#: Confident readings of these marks are read by the patch reader too, and flagged when it
#: names another mark first (:func:`confirm`). Why "crossed" (session 45): on the fresh
#: corpus 5500000 a blue cell of a hard photo was read "crossed" at 0.9983, and the patch
#: reader read it blue (0.76); on the calibration and held-out corpora it named another mark
#: first on none of 2,257 confident crossings-out. Crossings-out are few on a sheet, so this
#: costs little; a confident colour or "empty" is many times more common.
DISSENT_MARKS = ("crossed",)
#: (session 48) Confident "empty" readings of regions of these kinds are watched too, as
#: :data:`DISSENT_MARKS` are. Why: on the fresh held-out corpus 1670000 a Crypts cell crossed
#: out with a thin graphite X over its printed symbol was read "empty" by both readers with
#: confidence (no ink texel seen at all: hand 0.9933, learned 0.9943); the patch reader reads
#: it "crossed" at 1.000. On the ten calibration and two held-out spent datasets the readers'
#: confident "empty" readings held 32 such errors (crossings-out the readers missed, 31 of them
#: on a varied painter's dev corpora), all in boxes, symbols, stars and propellers; the patch
#: reader (patch-v2) named another mark first on 24 of them and on 9 of the ~42,000 right ones
#: of these kinds (6 on easy or typical photos), 2,757 photos in all. Connections, entry
#: points, swatches and number fields (~42,000 more confident "empty" readings, none wrong) are
#: not watched: each watched region costs the patch reader ~0.4 ms.
DISSENT_EMPTY_KINDS = ("box", "symbol", "star", "propeller", "treasure", "whirlpool")
#: Flagged readings the patch reader may correct (their reason's prefix): the readers' own
#: doubt and the photo's. Its new mark stays flagged (:func:`confirm`).
SWITCH_FROM = LIFTABLE + ("photo too unreliable", "photo too unclear")
#: The marks the patch reader may correct a flagged reading to: marks told by their shape
#: (a cross, a blank, writing), not by their hue. Why (session 46): on the calibration
#: corpora, where the readers flagged a region and the patch reader was sure of another mark,
#: it was right on 1,679 of 1,682 crossings-out at >= 0.99; but on the held-out painter it
#: was wrong about as often as right on orange and red (his pencils' hues are not the
#: training painters'), while the readers calibrate each photo's pencils.
SWITCH_MARKS = ("empty", "crossed", "written")
#: (session 47) The key under which the thresholds of an "empty" the hand reader saw dark
#: texels in (its feature ``dark`` > 0, or unknown: grey pencil or ink off the print, as a
#: thin graphite crossing-out leaves) are kept apart from other "empty" readings', for a model
#: that says so (``dark_empty_split``). Why: on the dev corpus 42000 (varied painter, a third
#: of its marks crossed out) a treasure crossed out with one faint graphite stroke was read
#: "empty" by both readers and by the patch reader at 0.9977, over patch-v1.1's 0.99 for
#: "empty": a confident error. It was the only wrong "empty" among ~5,200 lifting candidates
#: of seven spent and dev corpora, and it had dark texels (0.017 of the region); three in four
#: flagged "empty" readings have none (on ten corpora: 5 of the 7 wrong ones among ~6,400).
DARK_EMPTY = "empty:dark"
#: (session 49) A colour both readers named is lifted at the lower ``agree_thresholds`` only
#: while the patch reader's probability of "crossed" is at most this; above it, at the mark's
#: own threshold alone. Why: on the fresh crossed-out corpus 7200000 a green treasure box
#: crossed out with an orange pencil was read "orange" by both readers (hand 0.986, learned
#: 0.841), flagged, and lifted by the patch reader at orange 0.982 over patch-v2's 0.98 for
#: agreeing readers -- a confident error, main's too; its second choice was "crossed",
#: 0.0175. On the ten calibration datasets, of the five wrong agreeing candidates it named
#: at >= 0.9, four were crossings-out it read as a colour or "empty" with "crossed" second at
#: 0.019-0.047; of its ~2,300 right colour lifts at >= 0.98 with the readers agreeing, 22 had
#: "crossed" above 0.01. Simulated on the datasets (patch-v2): 62 fewer lifts of ~12,100, none
#: of them wrong; easy and typical sheets clear 458 -> 449 of 1,716.
AGREE_CROSSED_MAX = 0.01
#: (session 49) ... and only while the readers' reading holds its mark at this probability at
#: least (its ``confidence``): a reading the committee gives barely half is no agreement. Why:
#: on the fresh 7300000 a Crypts cell coloured purple with a sparse zigzag of two strokes was
#: read "crossed" by both readers at 0.49 and 0.53 (purple 0.43 second), flagged, and lifted
#: by the patch reader at crossed 0.9929 over patch-v2's 0.97 for agreeing readers -- a
#: confident error, main's too. On the ten calibration datasets one of the five wrong agreeing
#: candidates it named at >= 0.9 had a reading under 0.6 (an "empty" at 0.597 truly crossed
#: out); 27 of ~12,100 lifts go (none wrong), easy and typical sheets clear 449 -> 449.
AGREE_CONFIDENCE_MIN = 0.6
#: The patch side in pixels and the paper around a region's bounding box in a patch: the
#: windows a dataset is built with when no model says otherwise (``PatchReader.size``,
#: ``PatchReader.margin_mm`` of a model fitted on them).
PATCH_SIZE = 32
MARGIN_MM = 1.0
#: Patches per product (:func:`confirm`).
CHUNK = 8
#: The engines the convolutions may run on (``PatchReader.engine``, :func:`load_patch_reader`):
#: OpenCV's dnn module (the default wherever it builds the network and reproduces the numpy
#: convolutions) and numpy. Measured on the bench machine (session 46, real patches of three
#: sample photos, chunks of 8, median of 200): 13 patches 4.4 -> 3.5 ms on one thread, 3.0 ->
#: 1.9 ms on two; 100 patches 32 -> 26 ms and 18.5 -> 14.5 ms (with the machine's cores
#: busy with other work, 20-24 % less on both). A whole read, paired with main's read by
#: read (``scripts/ab_read.py``, 240 pairs): -1.3 ms.
ENGINES = ("cv2.dnn", "numpy")


@dataclass(frozen=True)
class PatchGeometry:
    """Where each region's patch is cut from the rectified sheet, and what is printed there.

    Attributes
    ----------
    ids : tuple of str
        Region ids, in template order.
    index : mapping of region id -> its row
    boxes : (R, 4) int ndarray
        ``x0, y0, side`` of each region's square window in sheet pixels (its bounding box and
        ``margin_mm`` around it, centred), and a 0.
    mask, printed : (R, S, S) uint8 ndarrays
        The region's outline (255 inside) and the template's print (grey, paper 255) in each
        window, at the patch size.
    kinds : tuple of str
    allowed : (R, 8) bool ndarray
        The marks each region may take (``MARKS`` order).
    size : int
        The patch side S in pixels.
    shape : (H, W)
        The sheet's size in pixels at the dpi it was built for.
    """

    ids: tuple
    index: Mapping[str, int]
    boxes: np.ndarray
    mask: np.ndarray
    printed: np.ndarray
    kinds: tuple
    allowed: np.ndarray
    size: int
    shape: tuple


_geo_lock = threading.Lock()
_geometries: dict = {}


def patch_geometry(template, expected: np.ndarray, *, dpi: float, size: int = PATCH_SIZE,
                   margin_mm: float = MARGIN_MM) -> PatchGeometry:
    """The patch windows of ``template`` rendered as ``expected`` ((H, W, 3) linear RGB, paper
    1) at ``dpi``; built once per template version, dpi and patch size."""
    key = (template.id, template.version, template.source, float(dpi), int(size), float(margin_mm),
           expected.shape)
    with _geo_lock:
        g = _geometries.get(key)
        if g is not None:
            return g
    k = dpi / 25.4
    H, W = expected.shape[:2]
    grey = np.clip(expected.mean(axis=2) * 255.0 + 0.5, 0, 255).astype(np.uint8)
    ids, boxes, masks, prints, kinds, allowed = [], [], [], [], [], []
    for r in template.regions:
        poly = np.asarray(r.shape.polygon(segments=64), float) * k
        (x0, y0), (x1, y1) = poly.min(0), poly.max(0)
        side = int(np.ceil(max(x1 - x0, y1 - y0) + 2 * margin_mm * k))
        bx = int(round((x0 + x1) / 2 - side / 2))
        by = int(round((y0 + y1) / 2 - side / 2))
        m = np.zeros((side, side), np.uint8)
        pts = np.round((poly - [bx, by] - 0.5) * 16).astype(np.int32).reshape(-1, 1, 2)
        cv2.fillPoly(m, [pts], 255, lineType=cv2.LINE_8, shift=4)
        ids.append(r.id)
        boxes.append((bx, by, side, 0))
        masks.append(cv2.resize(m, (size, size), interpolation=cv2.INTER_AREA))
        prints.append(cv2.resize(_window(grey, bx, by, side, 255), (size, size),
                                 interpolation=cv2.INTER_AREA))
        kinds.append(r.kind)
        allowed.append([mk in r.marks for mk in MARKS])
    g = PatchGeometry(tuple(ids), {rid: i for i, rid in enumerate(ids)},
                      np.asarray(boxes, np.int64).reshape(-1, 4),
                      np.asarray(masks, np.uint8).reshape(-1, size, size),
                      np.asarray(prints, np.uint8).reshape(-1, size, size), tuple(kinds),
                      np.asarray(allowed, bool).reshape(-1, len(MARKS)), int(size), (H, W))
    with _geo_lock:
        if len(_geometries) >= 32:
            _geometries.pop(next(iter(_geometries)))
        _geometries[key] = g
    return g


def _window(img: np.ndarray, x0: int, y0: int, side: int, fill) -> np.ndarray:
    """``img[y0:y0+side, x0:x0+side]``, padded with ``fill`` where it leaves the picture."""
    H, W = img.shape[:2]
    if x0 >= 0 and y0 >= 0 and x0 + side <= W and y0 + side <= H:
        return img[y0:y0 + side, x0:x0 + side]
    out = np.full((side, side) + img.shape[2:], fill, img.dtype)
    ya, yb = max(0, y0), min(H, y0 + side)
    xa, xb = max(0, x0), min(W, x0 + side)
    if ya < yb and xa < xb:
        out[ya - y0:yb - y0, xa - x0:xb - x0] = img[ya:yb, xa:xb]
    return out


def region_patches(source, geo: PatchGeometry, which: Sequence[int]) -> np.ndarray:
    """(N, S, S, 5) uint8: for each region index in ``which``, its window of the normalised
    sheet as sRGB, its outline and its print. ``source``: the normalised sheet, either an
    (H, W, 3) linear RGB array (paper 1) or a ``vision.light.NormalisedLight``, whose pixels
    are then computed in the windows alone (``sample``: the same values to float rounding,
    without normalising the whole sheet, ~15 ms)."""
    from vision.colour import linear_to_srgb

    S = geo.size
    which = list(which)
    out = np.empty((len(which), S, S, 5), np.uint8)
    if not which:
        return out
    boxes = [tuple(int(v) for v in geo.boxes[i][:3]) for i in which]
    if isinstance(source, np.ndarray):
        wins = [_window(source, bx, by, side, 1.0) for bx, by, side in boxes]
    else:
        H, W = geo.shape
        flat, where = [], []
        for bx, by, side in boxes:
            ys, xs = np.arange(by, by + side), np.arange(bx, bx + side)
            iy, ix = (ys >= 0) & (ys < H), (xs >= 0) & (xs < W)
            flat.append((ys[iy][:, None] * W + xs[ix][None, :]).ravel())
            where.append((iy, ix))
        values = source.sample(np.concatenate(flat))
        wins, at = [], 0
        for (bx, by, side), (iy, ix), f in zip(boxes, where, flat):
            win = np.ones((side, side, 3), np.float32)
            win[np.ix_(iy, ix)] = values[at:at + len(f)].reshape(int(iy.sum()), int(ix.sum()), 3)
            at += len(f)
            wins.append(win)
    rgb = np.empty((len(which), S, S, 3), np.float32)
    for j, win in enumerate(wins):
        rgb[j] = cv2.resize(np.ascontiguousarray(win, np.float32), (S, S),
                            interpolation=cv2.INTER_AREA)
    out[..., :3] = linear_to_srgb(rgb)
    out[..., 3] = geo.mask[which]
    out[..., 4] = geo.printed[which]
    return out


@dataclass(frozen=True)
class PatchReader:
    """A loaded patch-reader model (:func:`load_patch_reader`)."""

    meta: Mapping[str, Any]
    convs: tuple  # ((W (9*C, O) float32, b (O,) float32, pool_after: bool), ...)
    fc: tuple  # ((W, b), (W, b))
    kinds: tuple
    size: int
    margin_mm: float
    #: per mark: the patch reader's probability at or above which a flagged reading of that
    #: mark is confirmed (a mark missing here is never confirmed)
    thresholds: Mapping[str, float] = field(default_factory=dict)
    #: flags are lifted only on a photo with at most this share of its regions flagged by
    #: the two readers (on a photo the readers doubt as a whole, a blurred or dark one, the
    #: patch reader was sure of wrong readings too)
    photo_flagged_max: float = 1.0
    #: per mark of :data:`SWITCH_MARKS`: the patch reader's probability at or above which a
    #: flagged reading of another mark is corrected to it, still flagged but for
    #: ``switch_confirm_thresholds`` (a model without them corrects nothing)
    switch_thresholds: Mapping[str, float] = field(default_factory=dict)
    #: per mark of :data:`SWITCH_MARKS` (session 50): the patch reader's probability at or
    #: above which such a correction also lifts the flag, where a flag may be lifted (the
    #: photo not held back, the reading's flag one it may lift); a model without them leaves
    #: every corrected region flagged
    switch_confirm_thresholds: Mapping[str, float] = field(default_factory=dict)
    #: per mark (session 47): the patch reader's lower probability at or above which a flagged
    #: reading of that mark is confirmed when both readers, the hand and the learned one, named
    #: that mark too (three opinions agreeing; a model without them asks ``thresholds`` alone)
    agree_thresholds: Mapping[str, float] = field(default_factory=dict)
    #: whether "empty" readings with dark texels have thresholds of their own, under
    #: :data:`DARK_EMPTY` in ``thresholds`` and ``agree_thresholds`` (session 47; a model
    #: without them reads every "empty" alike)
    dark_empty_split: bool = False
    #: where the convolutions run (:data:`ENGINES`)
    engine: str = "numpy"
    #: the convolutions as OpenCV dnn networks (:class:`_DnnConvs`), None without them
    dnn: Any = field(default=None, repr=False, compare=False)

    @property
    def id(self) -> str:
        return str(self.meta.get("id", "?"))

    def probabilities(self, patches: np.ndarray, kinds: Sequence[str],
                      allowed: np.ndarray, *, engine: str | None = None) -> np.ndarray:
        """(N, 8) probabilities over ``MARKS`` (0 for marks a region may not take).
        ``engine``: where the convolutions run (:data:`ENGINES`), by default ``self.engine``.
        The values depend on the patches alone, and on how many are given at once only to
        the last bits of float32 rounding (so :func:`confirm` gives fixed chunks)."""
        n = len(patches)
        if n == 0:
            return np.zeros((0, len(MARKS)), np.float32)
        engine = engine or self.engine
        if engine == "cv2.dnn":
            if self.dnn is None:
                raise ValueError("this patch reader has no cv2.dnn network")
            x = self.dnn.forward(patches)  # (N, C, h, w)
            pooled = [x.mean(axis=(2, 3)), x.max(axis=(2, 3))]
        elif engine == "numpy":
            x = _numpy_convs(patches, self.convs)  # (N, h, w, C)
            pooled = [x.mean(axis=(1, 2)), x.max(axis=(1, 2))]
        else:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        onehot = np.zeros((n, len(self.kinds)), np.float32)
        for i, kd in enumerate(kinds):
            if kd in self.kinds:
                onehot[i, self.kinds.index(kd)] = 1.0
        z = np.concatenate([*pooled, onehot], axis=1)
        (w1, b1), (w2, b2) = self.fc
        h = np.maximum(z @ w1 + b1, 0.0)
        lo = (h @ w2 + b2).astype(np.float64)
        lo[~np.asarray(allowed, bool)] = -np.inf
        lo -= lo.max(axis=1, keepdims=True)
        p = np.exp(lo)
        return (p / p.sum(axis=1, keepdims=True)).astype(np.float32)


def _numpy_convs(patches: np.ndarray, convs) -> np.ndarray:
    """The convolutions, their ReLUs and max pools in numpy: (N, S, S, 5) uint8 patches ->
    the last (N, h, w, C) float32 feature map."""
    x = patches.astype(np.float32) * np.float32(1 / 255.0)
    for w, b, pool in convs:
        x = _conv3x3_relu(x, w, b)
        if pool:  # 2 x 2 max pool (four strided maxima: the same values, ~1.5x faster)
            x = np.maximum(np.maximum(x[:, 0::2, 0::2], x[:, 1::2, 0::2]),
                           np.maximum(x[:, 0::2, 1::2], x[:, 1::2, 1::2]))
    return x


class _DnnConvs:
    """The convolutions, their ReLUs and max pools as an OpenCV dnn network, built in code
    from the model's weights (no network file: ``cv2.dnn.Net`` layer by layer, each
    convolution's weights set as its layer's blobs: ``Net.setParam`` cannot, a layer added in
    code has no blobs to replace), one network per thread: a ``Net`` keeps
    its input and its layers' outputs on itself, so two threads may not run one at once.
    Why one per thread rather than one behind a lock (session 46, 13 real patches in chunks
    of 8 on two threads): 1.9 ms against 2.1 ms; 100 patches 14.5 against 15.3 ms.

    OpenCV picks Winograd's algorithm for these 3 x 3 convolutions (its default): without
    it, they took 5.2 ms instead of 3.5 for 13 patches on one thread, slower than numpy's
    4.4; with it the probabilities differ from numpy's by ~2e-5 at most (the sums are
    ordered otherwise), and depend neither on OpenCV's threads nor on which thread runs."""

    def __init__(self, convs):
        self._layers = []
        for w, b, pool in convs:
            c, o = w.shape[0] // 9, w.shape[1]
            # (9*C, O) in (row, column, channel) order -> OpenCV's (O, C, 3, 3)
            self._layers.append((np.ascontiguousarray(w.reshape(3, 3, c, o).transpose(3, 2, 0, 1)),
                                 np.ascontiguousarray(b.reshape(1, o)), bool(pool)))
        self._local = threading.local()

    def __getstate__(self):
        return {"_layers": self._layers}  # (the networks are built again where it is used)

    def __setstate__(self, state):
        self._layers = state["_layers"]
        self._local = threading.local()

    def build(self) -> "cv2.dnn.Net":
        """A new network."""
        net = cv2.dnn.Net()
        for i, (w, b, pool) in enumerate(self._layers):
            lid = net.addLayerToPrev(f"conv{i}", "Convolution", cv2.CV_32F,
                                     {"kernel_size": 3, "num_output": int(w.shape[0]), "pad": 1,
                                      "stride": 1, "bias_term": True})
            if lid < 0:
                raise RuntimeError(f"cv2.dnn did not add convolution {i}")
            net.getLayer(lid).blobs = [w, b]
            net.addLayerToPrev(f"relu{i}", "ReLU", cv2.CV_32F, {})
            if pool:
                net.addLayerToPrev(f"pool{i}", "Pooling", cv2.CV_32F,
                                   {"pool": "max", "kernel_size": 2, "stride": 2})
        net.setPreferableBackend(cv2.dnn.DNN_BACKEND_OPENCV)
        net.setPreferableTarget(cv2.dnn.DNN_TARGET_CPU)
        return net

    def forward(self, patches: np.ndarray) -> np.ndarray:
        """(N, S, S, 5) uint8 patches -> the last (N, C, h, w) float32 feature map, on this
        thread's network."""
        net = getattr(self._local, "net", None)
        if net is None:
            net = self._local.net = self.build()
        x = np.ascontiguousarray(patches.transpose(0, 3, 1, 2), dtype=np.float32)
        x *= np.float32(1 / 255.0)
        net.setInput(x)
        return net.forward()


def _build_dnn(convs) -> _DnnConvs | None:
    """The convolutions on cv2.dnn (:class:`_DnnConvs`) when this OpenCV builds them and they
    reproduce the numpy convolutions on a fixed pseudo-random chunk (to 1e-4 of the feature
    map's largest value: they differ by ~1e-5 in float32); else None (the numpy path).
    Why the check: the network is built with OpenCV calls an OpenCV version may treat
    otherwise (a layer's parameters, its weights' layout), and a wrong network must not
    read a sheet. Once per model loaded: ~2-5 ms, ~10-15 ms in a fresh process (its first
    cv2.dnn forward), against a first read of ~1.2 s."""
    try:
        dnn = _DnnConvs(convs)
        rng = np.random.default_rng(46)
        probe = rng.integers(0, 256, size=(2, PATCH_SIZE, PATCH_SIZE, convs[0][0].shape[0] // 9),
                             dtype=np.uint8)
        want = _numpy_convs(probe, convs).transpose(0, 3, 1, 2)
        got = dnn.forward(probe)
        if got.shape != want.shape or not np.isfinite(got).all() \
                or np.abs(got - want).max() > 1e-4 * max(1.0, float(np.abs(want).max())):
            return None
        return dnn
    except Exception:  # noqa: BLE001 - an OpenCV without these calls reads on numpy
        return None


def _conv3x3_relu(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """3 x 3 convolution, padding 1, then ReLU, on (N, H, W, C) float32; ``w`` is (9*C, O)
    in (row, column, channel) order."""
    N, H, W, C = x.shape
    xp = np.zeros((N, H + 2, W + 2, C), np.float32)
    xp[:, 1:-1, 1:-1] = x
    cols = np.empty((N, H, W, 9, C), np.float32)
    for k in range(9):
        dy, dx = divmod(k, 3)
        cols[:, :, :, k] = xp[:, dy:dy + H, dx:dx + W]
    y = cols.reshape(N * H * W, 9 * C) @ w
    y += b
    np.maximum(y, 0.0, out=y)
    return y.reshape(N, H, W, -1)


def load_patch_reader(path, *, engine: str = "auto") -> PatchReader:
    """A patch-reader model from its ``.npz`` file (``scripts/train_patch_reader.py``).
    ``engine``: where its convolutions run (:data:`ENGINES`); ``"auto"``: on cv2.dnn when
    :func:`_build_dnn` builds them, else in numpy; ``"cv2.dnn"`` raises ValueError when it
    does not.

    Raises
    ------
    ReaderModelError
        when the file is missing, damaged or of another format.
    """
    if engine not in ("auto", *ENGINES):
        raise ValueError(f"engine must be 'auto' or one of {ENGINES}, got {engine!r}")
    path = Path(path)
    hint = ("Reinstall sheetcheck (calibration/models/ ships with it), or read with "
            "--no-patch-reader.")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise ReaderModelError(f"the patch reader's model {path} is missing.", hint=hint) from None
    except Exception as e:  # noqa: BLE001 - any unreadable file is the same user problem
        raise ReaderModelError(f"the patch reader's model {path} cannot be read ({e}).",
                               hint=hint) from None
    try:
        meta = json.loads(str(arrays.pop("meta")))
        if meta.get("format") != PATCH_MODEL_FORMAT:
            raise ValueError(f"format {meta.get('format')!r}, expected {PATCH_MODEL_FORMAT!r}")
        if list(meta["marks"]) != list(MARKS):
            raise ValueError("its marks are not this version's")
        convs = []
        for i, pool in enumerate(meta["pool_after"]):
            w, b = arrays[f"conv{i}_w"].astype(np.float32), arrays[f"conv{i}_b"].astype(np.float32)
            if w.ndim != 2 or w.shape[1] != b.shape[0]:
                raise ValueError(f"conv{i} has shapes {w.shape} and {b.shape}")
            convs.append((w, b, bool(pool)))
        fc = tuple((arrays[f"fc{i}_w"].astype(np.float32), arrays[f"fc{i}_b"].astype(np.float32))
                   for i in range(2))
        keys = (*MARKS, DARK_EMPTY)
        th = {m: float(v) for m, v in meta.get("thresholds", {}).items() if m in keys}
        sw = {m: float(v) for m, v in meta.get("switch_thresholds", {}).items()
              if m in SWITCH_MARKS}
        agree = {m: float(v) for m, v in meta.get("agree_thresholds", {}).items()
                 if m in keys}
        # (a mark it never corrects to is never confirmed so either)
        sw_confirm = {m: float(v) for m, v in meta.get("switch_confirm_thresholds", {}).items()
                      if m in sw}
        reader = PatchReader(meta=meta, convs=tuple(convs), fc=fc, kinds=tuple(meta["kinds"]),
                             size=int(meta["size"]), margin_mm=float(meta["margin_mm"]),
                             thresholds=th,
                             photo_flagged_max=float(meta.get("photo_flagged_max", 1.0)),
                             switch_thresholds=sw, switch_confirm_thresholds=sw_confirm,
                             agree_thresholds=agree,
                             dark_empty_split=bool(meta.get("dark_empty_split", False)))
    except (KeyError, ValueError, TypeError, AttributeError) as e:
        raise ReaderModelError(f"the patch reader's model {path} is damaged ({e}).",
                               hint=hint) from None
    if engine != "numpy":
        dnn = _build_dnn(reader.convs)
        if dnn is not None:
            reader = replace(reader, engine="cv2.dnn", dnn=dnn)
        elif engine == "cv2.dnn":
            raise ValueError(f"cv2.dnn (OpenCV {cv2.__version__}) does not build or reproduce "
                             f"the patch reader's convolutions")
    return reader


_default_lock = threading.Lock()
_default: list = []


def default_patch_reader() -> PatchReader:
    """The bundled patch reader, loaded once per process."""
    with _default_lock:
        if not _default:
            _default.append(load_patch_reader(DEFAULT_PATCH_MODEL))
        return _default[0]


def resolve_patch_reader(patch_reader) -> PatchReader | None:
    """``"default"`` -> the bundled model; None or a PatchReader as given."""
    if isinstance(patch_reader, str):
        if patch_reader != "default":
            raise ValueError(f"patch_reader must be 'default', None or a PatchReader, "
                             f"got {patch_reader!r}")
        return default_patch_reader()
    return patch_reader


def lifts_check(rd) -> bool:
    """Whether a flagged reading is a check's flag on an "empty" the patch reader may lift
    (:data:`LIFTABLE_CHECKS`)."""
    return bool(rd.review) and rd.mark == "empty" and rd.reason.startswith(LIFTABLE_CHECKS)


def liftable(rd) -> bool:
    """Whether a flagged reading's reason is one the patch reader may lift: the readers' own
    doubt (:data:`LIFTABLE`) or, on an "empty", one of :data:`LIFTABLE_CHECKS`."""
    return (bool(rd.review) and rd.reason.startswith(LIFTABLE)) or lifts_check(rd)


def readers_agree(rd) -> bool:
    """Whether both readers, the hand and the learned one, named the reading's mark (its
    features ``hand_mark`` and ``learned_mark``)."""
    f = rd.features
    return f.get("hand_mark") == rd.mark and f.get("learned_mark") == rd.mark


def threshold_key(reader: PatchReader, rd) -> str:
    """Under which key of ``reader.thresholds`` a reading's are: its mark, or
    :data:`DARK_EMPTY` for an "empty" with dark texels (or none known) when the model splits
    them."""
    if rd.mark == "empty" and reader.dark_empty_split:
        dark = rd.features.get("dark")
        if dark is None or not dark <= 0.0:
            return DARK_EMPTY
    return rd.mark


def crossed_in_doubt(rd, p) -> bool:
    """Whether a colour reading's patch-reader probabilities ``p`` (in :data:`MARKS` order;
    None: not read yet) give "crossed" more than :data:`AGREE_CROSSED_MAX`."""
    return (p is not None and rd.mark in PENCIL_COLOURS
            and float(p[MARKS.index("crossed")]) > AGREE_CROSSED_MAX)


def lift_threshold(reader: PatchReader, rd, p=None) -> float | None:
    """The patch reader's probability of a flagged reading's own mark at or above which its
    flag is lifted: the lower of its ``thresholds`` (:func:`threshold_key`) and, when both
    readers named the mark (:func:`readers_agree`), the flag is theirs (not one of
    :data:`LIFTABLE_CHECKS`), the reading's confidence is at least
    :data:`AGREE_CONFIDENCE_MIN` and, for a colour, the patch reader's probabilities ``p``
    (when given) hold "crossed" at most :data:`AGREE_CROSSED_MAX`, its ``agree_thresholds``;
    None when it may not be."""
    key = threshold_key(reader, rd)
    ts = [reader.thresholds.get(key)]
    if (readers_agree(rd) and not lifts_check(rd) and not crossed_in_doubt(rd, p)
            and rd.confidence >= AGREE_CONFIDENCE_MIN):
        ts.append(reader.agree_thresholds.get(key))
    ts = [t for t in ts if t is not None]
    return min(ts) if ts else None


def watched(rd) -> bool:
    """Whether a confident reading is one the patch reader reads to flag it when it names
    another mark first: a :data:`DISSENT_MARKS` mark, or an "empty" of a region of a
    :data:`DISSENT_EMPTY_KINDS` kind."""
    return not rd.review and (rd.mark in DISSENT_MARKS
                              or (rd.mark == "empty" and rd.kind in DISSENT_EMPTY_KINDS))


def switchable(rd) -> bool:
    """Whether a flagged reading's reason is one under which the patch reader may correct its
    mark (:data:`SWITCH_FROM`)."""
    return bool(rd.review) and rd.reason.startswith(SWITCH_FROM)


def _held_back(readings, allowed: tuple, objects: bool):
    """The first flag (its reason before any parenthesis) with a reason outside ``allowed``,
    else "something lies on the sheet" when ``objects``, else None."""
    return next((rd.reason.split(" (")[0] for rd in readings.values()
                 if rd.review and not rd.reason.startswith(allowed)),
                "something lies on the sheet" if objects else None)


def confirm(readings: Mapping[str, Any], source, template, expected: np.ndarray, *,
            dpi: float, reader: PatchReader, review_threshold: float,
            objects: bool = False) -> tuple[dict, dict]:
    """The readings with the flags the patch reader confirms lifted, the flagged marks it
    corrects corrected, and a summary. ``source``: the normalised sheet
    (:func:`region_patches`).

    - Lifting: on a photo with at most ``reader.photo_flagged_max`` of its regions flagged, no
      flag but :data:`LIFTABLE`, :data:`LIFTABLE_CHECKS` and :data:`LIFT_BESIDE` ones (session
      49; before, :data:`LIFTABLE` ones alone) and nothing lying on it (``objects``), every
      flagged reading with a :data:`LIFTABLE` reason, and every "empty" flagged by one of
      :data:`LIFTABLE_CHECKS` (:func:`liftable`), is read by the
      patch reader; when it names the reading's own mark with at least its threshold for that
      mark (:func:`lift_threshold`: ``agree_thresholds``, lower, when both readers named that
      mark too and the flag is their doubt, session 47, and (session 49) the reading holds its
      mark at :data:`AGREE_CONFIDENCE_MIN` at least and, for a colour, the patch reader gives
      "crossed" at most :data:`AGREE_CROSSED_MAX`), the reading is no longer flagged and
      its confidence is the
      patch reader's probability, raised to ``review_threshold`` when under it; it gains the
      feature ``patch_confirmed`` (1), ``patch_confirmed_with_readers`` (1) when the lower
      threshold alone let it, and ``patch_lifted_check`` (the check's reason, e.g. "a stroke
      runs through it") when the flag was a check's.
    - Correcting (session 46): on a photo with nothing lying on it, however many of its
      regions are flagged and whatever other flags it has (session 48; before, only on a
      photo with no flag but :data:`SWITCH_FROM` ones),
      every flagged reading with a :data:`SWITCH_FROM` reason is read too; when the patch
      reader names another mark of its ``switch_thresholds`` (:data:`SWITCH_MARKS`) with at
      least that mark's threshold, the reading takes that mark and stays flagged: reason "the
      patch reader reads crossed (0.998), not blue (low confidence ...)", confidence the
      patch reader's probability (under ``review_threshold``), feature
      ``patch_corrected_from`` the readers' mark. Except (session 50) where a flag may be
      lifted (the photo as for lifting, the reading's flag one it may lift) and the patch
      reader names that mark with at least its ``switch_confirm_thresholds``: then the
      corrected reading is no longer flagged either, its confidence the patch reader's
      probability (raised to ``review_threshold`` when under it), with the features
      ``patch_corrected_from`` and ``patch_confirmed`` (1).
    - Watching: every confident reading of a :data:`DISSENT_MARKS` mark, and (session 48)
      every confident "empty" of a region of a :data:`DISSENT_EMPTY_KINDS` kind
      (:func:`watched`), is read too: when the patch reader names another mark first, the
      reading is flagged ("the patch reader disagrees (blue 0.756)"), its mark kept, its
      confidence just under ``review_threshold``.

    Every reading it read gains the features ``patch_mark`` and ``patch_confidence``.
    Nothing else changes."""
    out = dict(readings)
    share = sum(1 for rd in readings.values() if rd.review) / max(1, len(readings))
    held_back = _held_back(readings, NOT_HOLDING_BACK, objects)
    may_lift = share <= reader.photo_flagged_max and held_back is None
    lift = {rid for rid, rd in readings.items()
            if liftable(rd) and lift_threshold(reader, rd) is not None} if may_lift else set()
    # (session 48) corrections are held back by something lying on the sheet alone: a flag of
    # a check elsewhere on the photo (a stain, a stroke astray, a lost pencil) is no reason to
    # leave a flagged mark the patch reader is sure of as the readers read it (see
    # :data:`SWITCH_FROM`), and the corrected region stays flagged
    switch_held_back = "something lies on the sheet" if objects else None
    switch = {rid for rid, rd in readings.items() if switchable(rd)
              } if (reader.switch_thresholds and switch_held_back is None) else set()
    # confident readings the patch reader must not contradict
    watch = [rid for rid, rd in readings.items() if watched(rd)]
    summary = {"model": reader.id, "read": 0, "confirmed": 0, "confirmed_with_readers": 0,
               "confirmed_checks": 0, "dissents": 0, "corrected": 0,
               "corrected_confirmed": 0,
               "photo_flagged": round(share, 4), "held_back_by": held_back,
               "corrections_held_back_by": switch_held_back}
    todo = [rid for rid in readings if rid in lift or rid in switch] + watch
    if not todo:
        return out, summary
    geo = patch_geometry(template, expected, dpi=dpi, size=reader.size,
                         margin_mm=reader.margin_mm)
    which = [geo.index[rid] for rid in todo if rid in geo.index]
    todo = [rid for rid in todo if rid in geo.index]
    kinds = [geo.kinds[i] for i in which]
    allowed = geo.allowed[which]
    # in fixed chunks, shared by the two threads when a core is idle (numpy's products release
    # the interpreter lock): each chunk is computed alike whichever thread takes it, so the
    # probabilities do not depend on the threads. Each chunk cuts its own windows too (session
    # 48: a third of the stage's time; every window's pixels are computed pixel by pixel and
    # window by window, so the same values whichever chunk cuts them).
    starts = list(range(0, len(which), CHUNK))
    parts = split_map(lambda lo, hi: [reader.probabilities(region_patches(source, geo,
                                                                          which[a:a + CHUNK]),
                                                           kinds[a:a + CHUNK],
                                                           allowed[a:a + CHUNK])
                                      for a in starts[lo:hi]], len(starts))
    probs = np.concatenate(parts) if parts else np.zeros((0, len(MARKS)), np.float32)
    summary["read"] = len(todo)
    cap = float(np.nextafter(review_threshold, 0.0) - 1e-4)
    for rid, p in zip(todo, probs):
        rd = readings[rid]
        best = int(np.argmax(p))
        pm, pc = MARKS[best], float(p[best])
        feats = {**rd.features, "patch_mark": pm, "patch_confidence": round(pc, 6)}
        if not rd.review:  # (a confident reading it watches)
            if pm != rd.mark:
                out[rid] = replace(rd, review=True, confidence=float(min(rd.confidence, cap)),
                                   features=feats,
                                   reason=f"the patch reader disagrees ({pm} {pc:.3f})")
                summary["dissents"] += 1
            else:
                out[rid] = replace(rd, features=feats)
        elif rid in lift and pm == rd.mark and pc >= lift_threshold(reader, rd, p):
            feats["patch_confirmed"] = 1.0
            if lifts_check(rd):  # (session 49) which check's flag it lifted
                feats["patch_lifted_check"] = rd.reason.split(" (")[0].split(":")[0]
                summary["confirmed_checks"] += 1
            if pc < reader.thresholds.get(threshold_key(reader, rd), 2.0):  # (three agreeing)
                feats["patch_confirmed_with_readers"] = 1.0
                summary["confirmed_with_readers"] += 1
            out[rid] = replace(rd, review=False, confidence=max(pc, review_threshold),
                               features=feats, reason="")
            summary["confirmed"] += 1
        elif (rid in switch and pm != rd.mark and pm in reader.switch_thresholds
              and pc >= reader.switch_thresholds[pm]):
            feats["patch_corrected_from"] = rd.mark
            alternatives = ((pm, pc),) + tuple(a for a in rd.alternatives if a[0] != pm)
            if (may_lift and liftable(rd) and pm in reader.switch_confirm_thresholds
                    and pc >= reader.switch_confirm_thresholds[pm]):
                # (session 50) sure enough, where a flag may be lifted: the correction stands
                feats["patch_confirmed"] = 1.0
                out[rid] = replace(rd, mark=pm, review=False,
                                   confidence=max(pc, review_threshold), features=feats,
                                   alternatives=alternatives, reason="")
                summary["corrected_confirmed"] += 1
            else:
                out[rid] = replace(rd, mark=pm, confidence=float(min(pc, cap)),
                                   features=feats, alternatives=alternatives,
                                   reason=f"the patch reader reads {pm} ({pc:.3f}), not "
                                          f"{rd.mark} ({rd.reason})")
            summary["corrected"] += 1
        else:
            out[rid] = replace(rd, features=feats)
    return out, summary
