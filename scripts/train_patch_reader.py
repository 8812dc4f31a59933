#!/usr/bin/env python
"""Fit the patch reader (``vision.patch_reader``) and choose its thresholds.

    python scripts/train_patch_reader.py --fit A.npz B.npz ... --calib C.npz ... \\
        [--test D.npz ...] --out calibration/models/patch-v3.npz --id patch-v3

Needs PyTorch (training only: ``pip install torch==2.13.0``; reading needs numpy alone).
Datasets are ``scripts/patch_dataset.py``'s.

- ``--fit``: the network is fitted on these rows; only dev seeds (< 100000) and the training
  painters (default, varied) are accepted.
- ``--calib``: the thresholds are chosen on these rows (spent or dev seeds; never the held-out
  painter): per mark, on the regions the two readers flagged with a reason the patch reader
  may lift (``vision.patch_reader.LIFTABLE``; and since session 49 the "empty" readings flagged
  by one of ``LIFTABLE_CHECKS``) on a photo with at most
  ``--photo-flagged-max`` of its regions flagged (whatever its other flags, though a photo
  with a flag outside ``LIFTABLE``, ``LIFTABLE_CHECKS`` and ``LIFT_BESIDE`` is held back when
  reading) and read as that mark, the lowest
  threshold of
  ``GRID`` above which the patch reader, naming the same mark, confirms no wrong reading,
  one grid step above the highest wrong one; a mark with a wrong confirmation at the grid's
  top is never confirmed.
  The thresholds at which a flagged reading is corrected to another mark (session 46,
  ``vision.patch_reader.SWITCH_MARKS``) are chosen on the same rows: per mark, on the regions
  flagged with a reason of ``SWITCH_FROM``, whatever share of the photo is flagged and
  whatever other flags it has (session 48; before, on photos with no flag of another reason
  but a harmless one), that the patch reader names as that mark
  and the readers as another, the lowest threshold of ``SWITCH_GRID`` at which, and at every
  grid step above which, corrections of a right reading are at most ``SWITCH_LOSS_MAX`` of
  the right corrections, with at least ``SWITCH_MIN_RIGHT`` right ones.
  Lower lifting thresholds for flagged readings both readers (the hand and the learned one)
  named as the same mark (session 47, ``agree_thresholds``) are chosen by the lifting rule on
  the lifting rows where the readers agree (the readers' own doubt: not the checks' flags;
  and since session 49 not a reading under ``AGREE_CONFIDENCE_MIN`` nor a colour the patch
  reader gives "crossed" more than ``AGREE_CROSSED_MAX``, which are lifted at the mark's own
  threshold alone),
  among ``AGREE_GRID``, for a mark with at least
  ``AGREE_MIN_CANDIDATES`` such rows (datasets made before session 46 hold no reader's own
  mark and add none).
  The thresholds at which a correction lifts the flag too (session 50,
  ``switch_confirm_thresholds``) are chosen by the lifting rule (none wrong, one grid step
  above the highest wrong one, ``GRID``) on the corrections (at the correction thresholds) of
  readings flagged for a ``LIFTABLE`` reason on a photo with at most ``--photo-flagged-max``
  of its regions flagged, for a mark with at least ``CONFIRM_MIN_CANDIDATES`` of them.
- ``--test``: information only (any painter, nothing chosen): what the thresholds lift and
  correct there.

The network (79,464 weights): five 3 x 3 convolutions with batch normalisation and
ReLU (16 channels at 32 x 32, max pool, 32 and 32 at 16 x 16, max pool, 64 and 64 at 8 x 8),
the mean and maximum of each channel, the region's kind one-hot, a hidden layer of 64, eight
outputs; a region's marks it may not take are masked out. Trained with AdamW and a one-cycle
schedule, augmented by the eight turns and flips of the square (the outline and print turn
with the picture) and a small gain on each colour channel. Exported with batch normalisation
folded into the convolutions, as numpy arrays.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from calibration.template import PENCIL_COLOURS  # noqa: E402
from vision.patch_reader import (AGREE_CONFIDENCE_MIN, AGREE_CROSSED_MAX,  # noqa: E402
                                 DARK_EMPTY, LIFTABLE, LIFTABLE_CHECKS, MARGIN_MM, MARKS,
                                 NOT_HOLDING_BACK,
                                 PATCH_MODEL_FORMAT, SWITCH_FROM, SWITCH_MARKS)

#: Thresholds the calibration may choose among.
GRID = (0.99, 0.995, 0.998, 0.999, 0.9995, 0.9998, 0.9999)
#: Flags are lifted only on photos with at most this share of their regions flagged by the
#: two readers (session 45: chosen on the calibration corpora among 0.2-0.5; beyond it the
#: patch reader agreed, sure, with wrong readings of blurred and dark photos).
PHOTO_FLAGGED_MAX = 0.3
#: Thresholds a correction may be chosen among, and its rule (see the module; session 46:
#: a wrong correction still leaves the region flagged, so the rule weighs right against
#: wrong corrections instead of asking for none).
SWITCH_GRID = (0.9, 0.95, 0.97, 0.98, 0.99, 0.995, 0.998, 0.999)
SWITCH_LOSS_MAX = 0.01
SWITCH_MIN_RIGHT = 10
#: Lower thresholds a flag may be lifted at when both readers named the mark too (session 47;
#: see the module), and how many such flagged readings a mark needs in the calibration rows
#: for one to be chosen.
AGREE_GRID = (0.9, 0.95, 0.97, 0.98, 0.99)
AGREE_MIN_CANDIDATES = 30
#: How many corrections to a mark the calibration rows need for a threshold at which a
#: correction also lifts the flag to be chosen (session 50).
CONFIRM_MIN_CANDIDATES = 30
#: The network's layers: (out channels, max pool after).
LAYERS = ((16, True), (32, False), (32, True), (64, False), (64, False))
FIELDS = ("X", "y", "allowed", "kind", "read", "conf", "review", "reason", "seed", "painter",
          "preset", "photo")


#: Each reader's own mark (session 46's datasets on; older ones lack them: -1, no reader named
#: any mark there, so they take no part in choosing ``agree_thresholds``) and the hand reader's
#: blank features (session 47 on; NaN, unknown, in older ones: an "empty" there counts among
#: those with dark texels, as when reading).
READER_FIELDS = ("hand", "learned", "blank")
#: What thresholds are chosen for: each mark, and an "empty" with dark texels apart
#: (``vision.patch_reader.DARK_EMPTY``, session 47).
KEYS = (*MARKS, DARK_EMPTY)


def load(paths, *, role: str) -> dict:
    parts = []
    for p in paths:
        with np.load(p, allow_pickle=False) as z:
            d = {k: z[k] for k in FIELDS}
            for k in ("hand", "learned"):
                d[k] = z[k] if k in z.files else np.full(len(d["y"]), -1, np.int16)
            d["blank"] = (z["blank"] if "blank" in z.files
                          else np.full((len(d["y"]), 4), np.nan, np.float32))
        painters = set(d["painter"].tolist())
        if role in ("fit", "calib") and "heldout" in painters:
            raise SystemExit(f"{p}: the held-out painter may not {role} (it is only measured)")
        if role == "fit" and (d["seed"] >= 100000).any():
            raise SystemExit(f"{p}: seeds >= 100000 may not fit (dev seeds only)")
        d["photo"] = d["photo"] + (parts[-1]["photo"].max() + 1 if parts else 0)
        parts.append(d)
    return {k: np.concatenate([d[k] for d in parts]) for k in FIELDS + READER_FIELDS}


def build(torch, nn, kinds: int):
    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            layers, c = [], 5
            for o, pool in LAYERS:
                layers += [nn.Conv2d(c, o, 3, padding=1, bias=False), nn.BatchNorm2d(o),
                           nn.ReLU(inplace=True)]
                if pool:
                    layers.append(nn.MaxPool2d(2))
                c = o
            self.f = nn.Sequential(*layers)
            self.h = nn.Sequential(nn.Linear(2 * c + kinds, 64), nn.ReLU(inplace=True),
                                   nn.Dropout(0.2), nn.Linear(64, len(MARKS)))

        def forward(self, x, k, allowed):
            z = self.f(x)
            z = torch.cat([z.mean((2, 3)), z.amax((2, 3)), k], 1)
            return self.h(z).masked_fill(~allowed, -1e4)
    return Net()


def export(net, kinds, meta: dict, out: Path) -> None:
    """The fitted network as numpy arrays, batch normalisation folded into the convolutions."""
    arrays = {}
    convs = [m for m in net.f if m.__class__.__name__ == "Conv2d"]
    bns = [m for m in net.f if m.__class__.__name__ == "BatchNorm2d"]
    for i, (cv, bn) in enumerate(zip(convs, bns)):
        w = cv.weight.detach().numpy().astype(np.float64)  # (O, C, 3, 3)
        scale = bn.weight.detach().numpy() / np.sqrt(bn.running_var.numpy() + bn.eps)
        bias = bn.bias.detach().numpy() - bn.running_mean.numpy() * scale
        w = w * scale[:, None, None, None]
        arrays[f"conv{i}_w"] = w.transpose(2, 3, 1, 0).reshape(-1, w.shape[0]).astype(np.float32)
        arrays[f"conv{i}_b"] = bias.astype(np.float32)
    lins = [m for m in net.h if m.__class__.__name__ == "Linear"]
    for i, ln in enumerate(lins):
        arrays[f"fc{i}_w"] = ln.weight.detach().numpy().T.astype(np.float32)
        arrays[f"fc{i}_b"] = ln.bias.detach().numpy().astype(np.float32)
    meta = {**meta, "format": PATCH_MODEL_FORMAT, "marks": list(MARKS), "kinds": list(kinds),
            "pool_after": [bool(p) for _, p in LAYERS]}
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, meta=np.asarray(json.dumps(meta)), **arrays)


def photo_flagged_share(d: dict) -> np.ndarray:
    """Per row, the share of its photo's regions the two readers flagged."""
    _, inv, n = np.unique(d["photo"], return_inverse=True, return_counts=True)
    flagged = np.bincount(inv, weights=d["review"].astype(float), minlength=len(n))
    return (flagged / n)[inv]


def _flagged_for(d: dict, reasons: tuple) -> np.ndarray:
    """Rows flagged with a reason starting with one of ``reasons``."""
    return d["review"] & np.array([str(r).startswith(reasons) for r in d["reason"]], bool)


def check_rows(d: dict) -> np.ndarray:
    """Rows read "empty" and flagged by one of ``LIFTABLE_CHECKS`` (session 49: lifted at the
    mark's own threshold, never at the lower one of both readers agreeing)."""
    return _flagged_for(d, LIFTABLE_CHECKS) & (np.asarray(d["read"]) == MARKS.index("empty"))


def candidate_rows(d: dict, photo_flagged_max: float) -> np.ndarray:
    """The rows the thresholds are chosen on: flagged for a :data:`LIFTABLE` reason, or an
    "empty" flagged by one of ``LIFTABLE_CHECKS`` (session 49), on a photo with at most
    ``photo_flagged_max`` of its regions flagged, whatever its other flags (more rows than the
    patch reader reads: stricter thresholds)."""
    return ((_flagged_for(d, LIFTABLE) | check_rows(d))
            & (photo_flagged_share(d) <= photo_flagged_max))


def _held_back(d: dict, reasons: tuple) -> np.ndarray:
    """Per row, whether its photo has a flag of a reason outside ``reasons`` (as
    ``vision.patch_reader.confirm`` holds a photo back; objects lying on the sheet, which
    also do, are not in the datasets)."""
    other = d["review"] & ~_flagged_for(d, reasons)
    _, inv = np.unique(d["photo"], return_inverse=True)
    return (np.bincount(inv, weights=other.astype(float)) > 0)[inv]


def liftable_rows(d: dict, photo_flagged_max: float) -> np.ndarray:
    """The rows ``vision.patch_reader.confirm`` would read to lift their flag: the candidate
    rows on a photo with at most ``photo_flagged_max`` of its regions flagged and no flag of a
    reason outside ``LIFTABLE``, ``LIFTABLE_CHECKS`` and ``LIFT_BESIDE`` (session 49; before,
    outside ``LIFTABLE``)."""
    return candidate_rows(d, photo_flagged_max) & ~_held_back(d, NOT_HOLDING_BACK)


def switch_rows(d: dict) -> np.ndarray:
    """The rows ``vision.patch_reader.confirm`` would read to correct their mark: flagged for
    a :data:`SWITCH_FROM` reason, whatever other flags the photo has (session 48; objects lying
    on the sheet, which hold corrections back, are not in the datasets)."""
    return _flagged_for(d, SWITCH_FROM)


def choose_switch_thresholds(P: np.ndarray, d: dict) -> tuple[dict, dict]:
    """Per mark of :data:`SWITCH_MARKS`, the lowest :data:`SWITCH_GRID` threshold at and above
    which wrong corrections stay within :data:`SWITCH_LOSS_MAX` of the right ones (see the
    module); a mark without one is never corrected to."""
    pm, pc = P.argmax(1), P.max(1)
    rows = switch_rows(d) & (pm != d["read"])
    th, report = {}, {}
    for name in SWITCH_MARKS:
        m = MARKS.index(name)
        cand = rows & (pm == m)
        right = [int((cand & (pc >= t) & (d["y"] == m)).sum()) for t in SWITCH_GRID]
        wrong = [int((cand & (pc >= t) & (d["read"] == d["y"])).sum()) for t in SWITCH_GRID]
        fine = [w <= SWITCH_LOSS_MAX * r for r, w in zip(right, wrong)]
        ok = [i for i in range(len(SWITCH_GRID))
              if all(fine[i:]) and right[i] >= SWITCH_MIN_RIGHT]
        report[name] = {"candidates": int(cand.sum()),
                        "right_wrong_by_grid": [[r, w] for r, w in zip(right, wrong)]}
        if ok:
            th[name] = SWITCH_GRID[ok[0]]
            report[name]["threshold"] = th[name]
    return th, report


def confirm_correction_rows(d: dict, photo_flagged_max: float) -> np.ndarray:
    """The rows a correction may also lift the flag of (session 50): flagged for a
    :data:`LIFTABLE` reason (those that are in :data:`SWITCH_FROM` too), on a photo with at
    most ``photo_flagged_max`` of its regions flagged, whatever its other flags (chosen so on
    more rows than ``vision.patch_reader.confirm`` would lift on, as the lifting thresholds)."""
    return _flagged_for(d, LIFTABLE) & (photo_flagged_share(d) <= photo_flagged_max)


def choose_switch_confirm_thresholds(P: np.ndarray, d: dict, sw: dict,
                                     photo_flagged_max: float = 1.0) -> tuple[dict, dict]:
    """Per mark of ``sw`` (the correction thresholds), the lowest :data:`GRID` threshold at
    and above which a correction to it on :func:`confirm_correction_rows` is never wrong,
    one grid step above the highest wrong one, for a mark with at least
    :data:`CONFIRM_MIN_CANDIDATES` such corrections (the lifting rule: a confirmed correction
    is a confident reading, so none may be wrong)."""
    pm, pc = P.argmax(1), P.max(1)
    rows = confirm_correction_rows(d, photo_flagged_max) & (pm != d["read"])
    th, report = {}, {}
    for name in SWITCH_MARKS:
        m = MARKS.index(name)
        cand = rows & (pm == m) & (pc >= sw.get(name, 2.0))
        t, report[name] = _one_step_above(pc, cand, cand & (d["y"] != m), GRID,
                                          CONFIRM_MIN_CANDIDATES)
        if t is not None:
            th[name] = t
    return th, report


def corrections(P, d, sw) -> dict:
    """What the correction thresholds ``sw`` do to a dataset's rows."""
    pm, pc = P.argmax(1), P.max(1)
    t = np.array([sw.get(MARKS[m], 2.0) for m in pm])
    cor = switch_rows(d) & (pm != d["read"]) & (pc >= t)
    after = np.where(cor, pm, d["read"])
    return {"corrected": int(cor.sum()), "corrected_right": int((cor & (pm == d["y"])).sum()),
            "corrected_wrong": int((cor & (d["read"] == d["y"])).sum()),
            "readers_accuracy_corrected": round(float((after == d["y"]).mean()), 5)}


def row_keys(d: dict) -> np.ndarray:
    """Per row, the index in :data:`KEYS` its thresholds are chosen under: its reading's mark,
    or :data:`DARK_EMPTY` for an "empty" whose hand reader saw dark texels (or none known),
    as ``vision.patch_reader.threshold_key``; rows without ``blank`` are not split."""
    keys = np.asarray(d["read"]).astype(int).copy()
    if "blank" in d:
        dark = np.asarray(d["blank"], float)[:, 2]
        keys[(keys == MARKS.index("empty")) & ~(dark <= 0.0)] = KEYS.index(DARK_EMPTY)
    return keys


def _step_above(P: np.ndarray, d: dict, rows: np.ndarray, grid: tuple,
                min_candidates: int = 0) -> tuple[dict, dict]:
    """Per key (:func:`row_keys`), on ``rows`` read as that key's mark that the patch reader
    names so too, the lowest ``grid`` threshold above every wrong confirmation, one grid step
    above the highest wrong one; none for a key with fewer than ``min_candidates`` rows or
    none left on the grid."""
    pm, pc = P.argmax(1), P.max(1)
    keys = row_keys(d)
    th, report = {}, {}
    for k, name in enumerate(KEYS):
        m = MARKS.index(name.split(":")[0])
        cand = rows & (keys == k) & (pm == m)
        t, report[name] = _one_step_above(pc, cand, cand & (d["y"] != m), grid, min_candidates)
        if t is not None:
            th[name] = t
    return th, report


def _one_step_above(pc: np.ndarray, cand: np.ndarray, wrong: np.ndarray, grid: tuple,
                    min_candidates: int) -> tuple[float | None, dict]:
    """The lowest ``grid`` threshold one grid step above the highest probability ``pc`` of a
    ``wrong`` candidate (the lowest at all when none is wrong), or None (fewer than
    ``min_candidates`` candidates, or none left on the grid); and its report."""
    top = float(pc[wrong].max()) if wrong.any() else 0.0
    ok = [t for t in grid if t > top]
    if wrong.any():  # one grid step above the highest wrong confirmation
        ok = ok[1:]
    report = {"candidates": int(cand.sum()), "wrong": int(wrong.sum()),
              "highest_wrong": round(top, 6)}
    if not ok or cand.sum() < min_candidates:
        return None, report
    report.update(threshold=ok[0], confirmed=int((cand & (pc >= ok[0])).sum()))
    return ok[0], report


def choose_thresholds(P: np.ndarray, d: dict, photo_flagged_max: float = 1.0) -> tuple[dict, dict]:
    """Per key (:func:`row_keys`), the lowest :data:`GRID` threshold above every wrong
    confirmation (see the module), on the photos with at most ``photo_flagged_max`` of their
    regions flagged."""
    return _step_above(P, d, candidate_rows(d, photo_flagged_max), GRID)


def readers_agree(d: dict) -> np.ndarray:
    """Rows both readers read as the reading's mark."""
    return (d["hand"] == d["read"]) & (d["learned"] == d["read"])


def choose_agree_thresholds(P: np.ndarray, d: dict,
                            photo_flagged_max: float = 1.0) -> tuple[dict, dict]:
    """The same rule on the rows :func:`choose_thresholds` chooses on that both readers read
    as the mark too, among :data:`AGREE_GRID`, for a key with at least
    :data:`AGREE_MIN_CANDIDATES` such rows (three opinions agreeing)."""
    rows = candidate_rows(d, photo_flagged_max) & agree_rows(P, d)
    return _step_above(P, d, rows, AGREE_GRID, AGREE_MIN_CANDIDATES)


def agree_rows(P: np.ndarray, d: dict) -> np.ndarray:
    """Rows the lower threshold of agreeing readers applies to, as
    ``vision.patch_reader.lift_threshold``: both readers named the mark, the flag is theirs
    (not a check's), the reading holds its mark at ``AGREE_CONFIDENCE_MIN`` at least (session
    49) and, for a colour, the patch reader gives "crossed" at most ``AGREE_CROSSED_MAX``."""
    return (readers_agree(d) & ~check_rows(d) & ~crossed_in_doubt(P, d)
            & (np.asarray(d["conf"], float) >= AGREE_CONFIDENCE_MIN))


def crossed_in_doubt(P: np.ndarray, d: dict) -> np.ndarray:
    """Rows read as a colour where the patch reader gives "crossed" more than
    ``AGREE_CROSSED_MAX`` (session 49: lifted at the mark's own threshold alone, as
    ``vision.patch_reader.crossed_in_doubt``)."""
    colour = np.isin(np.asarray(d["read"]), [MARKS.index(m) for m in PENCIL_COLOURS])
    return colour & (P[:, MARKS.index("crossed")] > AGREE_CROSSED_MAX)


def lifts(P, d, th, photo_flagged_max: float = 1.0, agree: dict | None = None,
          dark_empty_split: bool = False, sw: dict | None = None,
          sw_confirm: dict | None = None) -> dict:
    pm, pc = P.argmax(1), P.max(1)
    lift = liftable_rows(d, photo_flagged_max)
    keys = row_keys(d) if dark_empty_split else np.asarray(d["read"]).astype(int)
    t = np.array([th.get(KEYS[k], 2.0) for k in keys])
    checks = check_rows(d)
    if agree:
        t = np.where(agree_rows(P, d),
                     np.minimum(t, [agree.get(KEYS[k], 2.0) for k in keys]), t)
    conf = lift & (pm == d["read"]) & (pc >= t)
    # (session 50) corrections that lift the flag too: on the rows it may lift, a mark of
    # ``sw_confirm`` (and of ``sw``) other than the reading's, at both thresholds
    tc = np.array([max((sw or {}).get(MARKS[m], 2.0), (sw_confirm or {}).get(MARKS[m], 2.0))
                   for m in pm])
    cconf = (lift & _flagged_for(d, LIFTABLE) & (pm != d["read"]) & (pc >= tc)) if sw_confirm \
        else np.zeros(len(pm), bool)
    et = np.isin(d["preset"], ["easy", "typical"])
    out = {"flagged": int(d["review"].sum()), "liftable": int(lift.sum()),
           "confirmed": int(conf.sum()), "confirmed_wrong": int((conf & (d["y"] != d["read"])).sum()),
           "confirmed_checks": int((conf & checks).sum()),
           "confirmed_checks_wrong": int((conf & checks & (d["y"] != d["read"])).sum()),
           "corrections_confirmed": int(cconf.sum()),
           "corrections_confirmed_wrong": int((cconf & (d["y"] != pm)).sum()),
           "accuracy": round(float((pm == d["y"]).mean()), 5),
           "readers_accuracy": round(float((d["read"] == d["y"]).mean()), 5)}
    left = d["review"] & ~conf & ~cconf
    phs = np.unique(d["photo"][et])
    out["easy_typical_sheets_clear"] = [int(sum(not d["review"][d["photo"] == q].any() for q in phs)),
                                        int(sum(not left[d["photo"] == q].any() for q in phs)),
                                        int(len(phs))]
    return out


def calibrate(meta: dict, predict, calib_paths, test_paths, photo_flagged_max: float) -> dict:
    """The thresholds chosen on ``calib_paths`` and what they lift on ``test_paths``, into
    ``meta`` (``predict(d)``: the model's probabilities for a dataset's rows)."""
    calib = load(calib_paths, role="calib")
    P = predict(calib)
    th, report = choose_thresholds(P, calib, photo_flagged_max)
    print("thresholds", json.dumps(report), flush=True)
    sw, sw_report = choose_switch_thresholds(P, calib)
    print("corrections", json.dumps(sw_report), flush=True)
    agree, agree_report = choose_agree_thresholds(P, calib, photo_flagged_max)
    print("with both readers", json.dumps(agree_report), flush=True)
    sw_confirm, sw_confirm_report = choose_switch_confirm_thresholds(P, calib, sw,
                                                                     photo_flagged_max)
    print("corrections confirmed", json.dumps(sw_confirm_report), flush=True)
    meta = {**meta, "thresholds": th, "photo_flagged_max": photo_flagged_max,
            "switch_thresholds": sw, "agree_thresholds": agree, "dark_empty_split": True,
            "switch_confirm_thresholds": sw_confirm,
            "calibration": {"datasets": [Path(p).name for p in calib_paths], "by_mark": report,
                            "agree_by_mark": agree_report, "agree_grid": list(AGREE_GRID),
                            "agree_min_candidates": AGREE_MIN_CANDIDATES,
                            "grid": list(GRID), "photo_flagged_max": photo_flagged_max,
                            "switch_by_mark": sw_report, "switch_grid": list(SWITCH_GRID),
                            "switch_loss_max": SWITCH_LOSS_MAX,
                            "switch_min_right": SWITCH_MIN_RIGHT,
                            "switch_confirm_by_mark": sw_confirm_report,
                            "switch_confirm_min_candidates": CONFIRM_MIN_CANDIDATES},
            "validation": {}}
    for p in test_paths:
        d = load([p], role="test")
        Pd = predict(d)
        meta["validation"][Path(p).name] = {**lifts(Pd, d, th, photo_flagged_max, agree, True,
                                                  sw, sw_confirm),
                                            **corrections(Pd, d, sw)}
        print(Path(p).name, json.dumps(meta["validation"][Path(p).name]), flush=True)
    return meta


def recalibrate(a) -> int:
    """New thresholds for a fitted model (``--recalibrate MODEL``), read with numpy."""
    from vision.patch_reader import load_patch_reader

    model = load_patch_reader(a.recalibrate)

    def predict(d):
        return np.concatenate([model.probabilities(d["X"][i:i + 4096], d["kind"][i:i + 4096],
                                                   d["allowed"][i:i + 4096])
                               for i in range(0, len(d["y"]), 4096)])
    meta = calibrate(dict(model.meta), predict, a.calib, a.test, a.photo_flagged_max)
    meta["recalibrated"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if a.id:  # (the same weights deciding otherwise: a new model id)
        meta.update(id=a.id, recalibrated_from=model.id)
    with np.load(a.recalibrate, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files if k != "meta"}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(a.out, meta=np.asarray(json.dumps(meta)), **arrays)
    print(f"wrote {a.out}", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fit", nargs="+")
    ap.add_argument("--calib", nargs="+", required=True)
    ap.add_argument("--test", nargs="*", default=[])
    ap.add_argument("--out", required=True)
    ap.add_argument("--id")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--photo-flagged-max", type=float, default=PHOTO_FLAGGED_MAX,
                    help="lift flags only on photos with at most this share of regions flagged "
                         "by the two readers (default %(default)s)")
    ap.add_argument("--recalibrate", metavar="MODEL",
                    help="choose the thresholds of this fitted model again (no fit, no PyTorch)")
    a = ap.parse_args(argv)
    if a.recalibrate:
        return recalibrate(a)
    if not a.fit or not a.id:
        ap.error("--fit and --id are needed (or --recalibrate MODEL)")
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    rng = np.random.default_rng(a.seed)
    fit = load(a.fit, role="fit")
    kinds = sorted(set(fit["kind"].tolist()))
    kind_ix = {k: i for i, k in enumerate(kinds)}

    def tensors(d, idx):
        x = torch.from_numpy(d["X"][idx]).permute(0, 3, 1, 2).float().div_(255.0)
        k = torch.zeros(len(idx), len(kinds))
        ki = [kind_ix.get(s, -1) for s in d["kind"][idx]]
        for j, i in enumerate(ki):
            if i >= 0:
                k[j, i] = 1.0
        return x, k, torch.from_numpy(d["allowed"][idx])

    def predict(d):
        net.eval()
        out = []
        with torch.no_grad():
            for i in range(0, len(d["y"]), 2048):
                idx = np.arange(i, min(len(d["y"]), i + 2048))
                out.append(F.softmax(net(*tensors(d, idx)), 1).numpy())
        return np.concatenate(out)

    net = build(torch, nn, len(kinds))
    n, bs = len(fit["y"]), 256
    print(f"fit: {n} regions, marks {np.bincount(fit['y'], minlength=8).tolist()}", flush=True)
    opt = torch.optim.AdamW(net.parameters(), 2e-3, weight_decay=1e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 4e-3, total_steps=a.epochs * (n // bs))
    t0 = time.time()
    for ep in range(a.epochs):
        net.train()
        perm = rng.permutation(n)
        tot = cor = 0
        ls = 0.0
        for i in range(0, n - bs + 1, bs):
            idx = np.sort(perm[i:i + bs])
            x, k, al = tensors(fit, idx)
            turns = int(rng.integers(4))
            if turns:
                x = torch.rot90(x, turns, (2, 3))
            if rng.random() < 0.5:
                x = torch.flip(x, (3,))
            g = 1 + 0.06 * (torch.rand(len(idx), 3, 1, 1) - 0.5)
            x[:, :3] = (x[:, :3] * g).clamp_(0, 1)
            y = torch.from_numpy(fit["y"][idx].astype(np.int64))
            lo = net(x, k, al)
            loss = F.cross_entropy(lo, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            ls += loss.item() * len(idx)
            tot += len(idx)
            cor += int((lo.argmax(1) == y).sum())
        print(f"epoch {ep}: loss {ls / tot:.4f}, accuracy {cor / tot:.4f}, {time.time() - t0:.0f} s",
              flush=True)
    meta = {"id": a.id, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            # (the windows patch_dataset.py cut: the reader's defaults)
            "size": int(fit["X"].shape[1]), "margin_mm": MARGIN_MM,
            "training": {"fit": [Path(p).name for p in a.fit], "regions": int(n),
                         "epochs": a.epochs, "seed": a.seed, "torch": torch.__version__}}
    meta = calibrate(meta, predict, a.calib, a.test, a.photo_flagged_max)
    export(net, kinds, meta, Path(a.out))
    # the exported arrays read as the network does (numpy, vision.patch_reader)
    from vision.patch_reader import load_patch_reader

    idx = np.arange(0, n, max(1, n // 2000))
    sub = {k: v[idx] for k, v in fit.items()}
    got = load_patch_reader(a.out).probabilities(sub["X"], sub["kind"], sub["allowed"])
    diff = float(np.abs(got - predict(sub)).max())
    print(f"wrote {a.out}; numpy and torch probabilities differ by at most {diff:.2e}", flush=True)
    return 0 if diff < 1e-3 else 1


if __name__ == "__main__":
    sys.exit(main())
