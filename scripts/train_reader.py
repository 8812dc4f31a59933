#!/usr/bin/env python
"""Train the learned reader and export it to JSON (``calibration/models/reader-v4.json``).

    .venv/bin/python scripts/train_reader.py --train /tmp/reader-data/train.npz \\
        --val /tmp/reader-data/val50000.npz --val /tmp/reader-data/ho60000.npz \\
        --out calibration/models/reader-v4.json

Needs scikit-learn (``.venv/bin/pip install scikit-learn``); the reader itself does not.

* ``--train``: datasets from ``scripts/reader_dataset.py`` (the default and the varied
  painter, seeds < 100000 only: the script refuses a held-out painter row). Photos are split
  (by photo, seeded) into a fitting part and a calibration part (``--calib-share``); the model
  never sees the calibration part.
* The model (gradient-boosted trees, ``--kind gbdt``, or a small MLP, ``--kind mlp``)
  predicts the mark (``vision.marks.MARKS``) from the feature row.
* On the calibration part: a temperature for the probabilities (least log-loss), then the
  decision rule (``vision.learned.DecisionRule``): the thresholds that make the most readings
  confident with **no** confident error even when every threshold is relaxed by ``--margin``
  (the remaining doubt ``1 - t`` multiplied by it). With ``--lopo`` the rule must also hold
  on leave-one-painter-out readings (each painter's calibration photos read by a model fitted
  on the other painters only); with ``--by-mark`` the thresholds are then chosen per mark read
  (marks with at least ``MARK_MIN_READINGS`` readings, never looser than ``MARK_FLOOR``).
* ``--calib``: calibration-only datasets (a training painter; dev seeds or spent measurement
  corpora, ``reader_dataset.SPENT_SEED_RANGES``): read by the fitted model and added to the
  rows every threshold is chosen on; never fitted on.
* ``--tiers``: doubt bounds; thresholds per mark and per region kind and mark for the photos
  of at most that doubt, chosen on their rows alone (``choose_tiers``).
* ``--val``: validation datasets (another default-painter seed range; the held-out painter):
  only measured, reported in the model file and on stderr. Never used for any choice.

Everything is seeded: the same datasets and arguments give the same model file.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "scripts"))

from reader_dataset import FORBIDDEN_SEED, seed_allowed  # noqa: E402
from vision.learned import (DOUBT_LEVEL, MODEL_FORMAT, THRESHOLD_NAMES as _FOUR,  # noqa: E402
                            DecisionRule, model_from_dict)
from vision.marks import FEATURE_NAMES, MARKS, REVIEW_THRESHOLD  # noqa: E402

#: Painters whose photos may be trained on: the main painter and the domain-randomised varied
#: painter (``sheetcheck/simulator``). The held-out painter is for validation only.
TRAIN_PAINTERS = ("default", "varied")


def load_sets(paths: list[str], *, calib_only: bool = False) -> dict:
    """Datasets of ``scripts/reader_dataset.py`` concatenated. Training data must come from dev
    seeds (< 100000); ``calib_only`` data (rows that only calibrate the decision rule) may also
    come from spent measurement corpora (``reader_dataset.SPENT_SEED_RANGES``), of a training
    painter only."""
    parts = [dict(np.load(p, allow_pickle=False)) for p in paths]
    for p, d in zip(paths, parts):
        if tuple(d["feature_names"]) != FEATURE_NAMES:
            sys.exit(f"{p}: features differ from vision.marks.FEATURE_NAMES; rebuild it with "
                     "scripts/reader_dataset.py")
        if not calib_only and d["seeds"].size and int(d["seeds"].max()) >= FORBIDDEN_SEED:
            sys.exit(f"{p}: holds photos with seeds >= {FORBIDDEN_SEED} (evaluation corpora): refused")
        if calib_only:
            bad = [int(v) for v in d["seeds"] if not seed_allowed(int(v))]
            if bad:
                sys.exit(f"{p}: holds photos of unspent evaluation seeds ({bad[:3]}...): refused")
            painters = sorted(set(d["painter"].tolist()) - set(TRAIN_PAINTERS))
            if painters:
                sys.exit(f"{p}: holds photos of the painter(s) {painters}: only "
                         f"{list(TRAIN_PAINTERS)} may calibrate the rule")
    tones = {p: tone_of(d) for p, d in zip(paths, parts)}
    if len(set(tones.values())) > 1:
        sys.exit(f"datasets read with and without the light's tone correction: {tones}; "
                 "rebuild them alike (scripts/reader_dataset.py --tone)")
    out = {}
    offset = 0
    for d in parts:
        d = dict(d)
        d["photo"] = d["photo"] + offset
        offset += len(d["photos"])
        for k, v in d.items():
            out.setdefault(k, []).append(v)
    keys = ("X", "y", "allowed", "photo", "kind", "preset", "painter", "hand_mark", "photo_conf")
    res = {k: np.concatenate(out[k]) for k in keys}
    # which dataset each row came from (index into ``paths``): per-dataset sample weights
    res["part"] = np.concatenate([np.full(len(y), i, np.int16) for i, y in enumerate(out["y"])])
    res["photos"] = np.concatenate(out["photos"])
    res["seeds"] = np.concatenate(out["seeds"])
    res["skipped"] = sum((json.loads(str(s)) for s in out["skipped"]), [])
    res["paths"] = paths
    res["tone_correction"] = next(iter(tones.values()), False)
    return res


def file_digest(path) -> str:
    """The start of a dataset file's sha256, as a model file records its datasets."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:16]


def tone_of(d) -> bool:
    """Whether a dataset was read with the light stage's tone correction (datasets from before
    the option have no such entry: they were read without)."""
    return bool(d["tone_correction"]) if "tone_correction" in d else False


def model_feature_names(drop: str) -> tuple[str, ...]:
    """``FEATURE_NAMES`` without the columns named in ``drop`` (comma-separated names, or
    prefixes ending in ``*``); an unknown name is an error, not silently ignored."""
    out = list(FEATURE_NAMES)
    for item in (x.strip() for x in drop.split(",") if x.strip()):
        if item.endswith("*"):
            gone = [n for n in out if n.startswith(item[:-1])]
        else:
            gone = [n for n in out if n == item]
        if not gone:
            sys.exit(f"--drop {item!r} names no feature column (see vision.marks.FEATURE_NAMES)")
        out = [n for n in out if n not in gone]
    return tuple(out)


def hand_conf(d):
    return d["X"][:, FEATURE_NAMES.index("hand_confidence")]


def masked_proba(raw, allowed, T=1.0):
    z = np.where(allowed, raw / T, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    e = np.exp(z)
    return e / e.sum(axis=1, keepdims=True)


# --------------------------------------------------------------------------- export
def export_gbdt(clf) -> dict:
    feats, thr, left, right, leaf, val, miss, roots, tcls = [], [], [], [], [], [], [], [], []
    depth = 1
    for it in clf._predictors:
        for k, pred in enumerate(it):
            nd = pred.nodes
            base = len(feats)
            roots.append(base)
            tcls.append(int(clf.classes_[k]))
            feats += nd["feature_idx"].astype(int).tolist()
            thr += nd["num_threshold"].astype(float).tolist()
            lf = nd["is_leaf"].astype(bool)
            left += np.where(lf, 0, nd["left"].astype(int) + base).tolist()
            right += np.where(lf, 0, nd["right"].astype(int) + base).tolist()
            leaf += lf.tolist()
            val += nd["value"].astype(float).tolist()
            miss += nd["missing_go_to_left"].astype(bool).tolist()
            depth = max(depth, int(nd["depth"].max()))
            if np.any(nd["is_categorical"]):
                raise SystemExit("categorical splits are not supported by vision.learned")
    baseline = np.full(len(MARKS), -30.0)
    baseline[clf.classes_] = clf._baseline_prediction.reshape(-1)
    # Features are float32, so `x <= t` (t float64) is `x <= t32` with t32 the largest float32
    # not above t; 9 digits give t32 back exactly (a threshold may equal a training value, so
    # rounding to nearest could move it across that value). Leaf values: 8 digits.
    t32 = np.asarray(thr, np.float64).astype(np.float32)
    t32 = np.where(t32.astype(np.float64) > np.asarray(thr), np.nextafter(t32, np.float32(-np.inf)), t32)
    thr = t32.tolist()
    r9 = lambda xs: [float(f"{x:.9g}") for x in xs]  # noqa: E731
    r8 = lambda xs: [float(f"{x:.8g}") for x in xs]  # noqa: E731
    return {"feature": feats, "threshold": r9(thr), "left": left, "right": right,
            "leaf": [int(b) for b in leaf], "value": r8(val), "missing_left": [int(b) for b in miss],
            "roots": roots, "tree_class": tcls, "baseline": r8(baseline), "depth": depth}


def export_mlp(clf, mean, scale, clip) -> dict:
    layers = []
    for i, (W, b) in enumerate(zip(clf.coefs_, clf.intercepts_)):
        if i == len(clf.coefs_) - 1 and len(clf.classes_) != len(MARKS):
            W2 = np.zeros((W.shape[0], len(MARKS)))
            b2 = np.full(len(MARKS), -30.0)
            W2[:, clf.classes_] = W
            b2[clf.classes_] = b
            W, b = W2, b2
        layers.append({"W": [[float(f"{x:.6g}") for x in row] for row in W],
                       "b": [float(f"{x:.6g}") for x in b]})
    return {"mean": [float(f"{x:.6g}") for x in mean], "scale": [float(f"{x:.6g}") for x in scale],
            "clip": clip, "layers": layers}


# --------------------------------------------------------------------------- decision rule
def doubt_per_row(p, photo):
    """vision.learned.photo_doubt of each row's photo."""
    low = p.max(axis=1) < DOUBT_LEVEL
    n = np.bincount(photo)
    share = np.bincount(photo, low) / np.maximum(n, 1)
    return share[photo]


def rule_outcome(rule: DecisionRule, p, mark_l, mark_h, c_h, pconf, y, doubt=None, kind=None):
    """(confident mask, correct mask) of the combined reader on one dataset (``kind``: each
    row's region kind, for tiers with thresholds per kind)."""
    p_l = p[np.arange(len(p)), mark_l]
    agree = mark_l == mark_h
    # the four thresholds of each row's mark (DecisionRule.thresholds), and of its photo's
    # doubt tier: the first tier (by ascending doubt_max) that holds the photo and names the
    # mark, for the row's kind or else for any kind, wins; so tiers are applied loosest-last
    t = np.array([rule.thresholds(m) for m in MARKS])[mark_l]
    if doubt is not None and rule.tiers:
        for doubt_max, marks, kinds in reversed(rule.tiers):
            in_tier = doubt <= doubt_max
            for m, name in enumerate(MARKS):
                if name in marks:
                    sel = in_tier & (mark_l == m)
                    t[sel] = [marks[name][k] for k in _FOUR]
            for kd, km in (kinds.items() if kind is not None else ()):
                for m, name in enumerate(MARKS):
                    if name in km:
                        sel = in_tier & (mark_l == m) & (kind == kd)
                        t[sel] = [km[name][k] for k in _FOUR]
    sure = agree & (((c_h >= t[:, 0]) & (p_l >= t[:, 1])) | ((p_l >= t[:, 2]) & (c_h >= t[:, 3])))
    sure &= pconf >= rule.photo_gate
    if doubt is not None:
        sure &= doubt <= rule.photo_doubt_max
    return sure, mark_l == y


def relax(t, margin):
    return 1.0 - (1.0 - t) * margin if t <= 1.0 else t


#: The global rule (what crossed and every mark without thresholds of its own are read by),
#: and any thresholds "crossed" gets of its own, never let the learned reader be confident
#: alone unless the hand reader is at least this sure of the same mark. The calibration rows
#: hold few crossings-out, and a refit without this floor (session 5, second refit) read twelve
#: coloured fills of a painter it never saw "crossed" at 0.9999 with the hand reader at
#: 0.50-0.97.
GLOBAL_HAND_FLOOR = 0.99


def choose_rule(p, mark_h, c_h, pconf, y, doubt, *, margin: float, photo_gate: float) -> tuple[DecisionRule, dict]:
    mark_l = p.argmax(axis=1)
    best = None
    grid_l = [0.97, 0.98, 0.99, 0.995, 0.998, 0.999, 0.9995, 0.9998, 0.9999]
    grid_h = [0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99, 0.995]
    # The rows that can be confident at all (the readers agree, the photo passes the gate),
    # and the wrong ones among them apart: rule_outcome's verdicts on them, much faster.
    p_l = p[np.arange(len(p)), mark_l]
    can = (mark_l == mark_h) & (pconf >= photo_gate)
    ch, pl, dbt = c_h[can], p_l[can], doubt[can]
    wrong = (mark_l != y)[can]
    ch_w, pl_w, dbt_w = ch[wrong], pl[wrong], dbt[wrong]

    def count(hm, lm, la, hf, dm, c, q, d):
        return ((((c >= hm) & (q >= lm)) | ((q >= la) & (c >= hf))) & (d <= dm))

    for lm in grid_l:
        for hm in (0.9, 0.95, 0.97, 0.99, 0.995, 0.999):
            for la in grid_l + [1.01]:
                for hf in grid_h:
                    if la <= 1.0 and (la < lm or hf > hm):
                        continue  # the second clause only widens the first
                    if la <= 1.0 and hf < GLOBAL_HAND_FLOOR:
                        continue
                    for dm in (0.03, 0.05, 0.08, 0.12, 0.2, 1.0):
                        rule = DecisionRule(hm, lm, la, hf, photo_gate, dm)
                        # The margin loosens the learned reader's thresholds (a calibrated
                        # probability) and the doubt limit (half as much again); not the hand
                        # reader's, whose confidences sit on a few plateaus (0.9933 is most
                        # clear empties), so that loosening it would be a jump, not a margin.
                        if np.any(count(hm, relax(lm, margin), relax(la, margin), hf,
                                        min(1.0, dm * (1 + (margin - 1) / 2)), ch_w, pl_w, dbt_w)):
                            continue
                        n = int(np.count_nonzero(count(hm, lm, la, hf, dm, ch, pl, dbt)))
                        if best is None or n > best[0]:
                            best = (n, rule)
    if best is None:
        rule = DecisionRule(0.999, 0.9995, 1.01, 0.999, photo_gate)
        return rule, {"note": "no rule without confident errors at the margin: strictest grid point"}
    return best[1], {"confident": best[0]}


#: Per-mark thresholds are never looser than these (a mark rare in the calibration photos,
#: with no error there, must not become confident on little evidence): the learned reader at
#: least 0.999 sure, and the hand reader at its own review threshold, or else the learned
#: reader at least 0.9995 sure. (reader-v2 had 0.99 / 0.998: on the fresh measurement corpora it
#: read four coloured crossings-out confidently as a colour at 0.9905-0.9989, while its
#: calibration rows had shown no colour error above 0.99; reader-v3 has these floors.)
MARK_FLOOR = {"learned_min": 0.999, "hand_min": REVIEW_THRESHOLD, "learned_alone": 0.9995}
#: A mark gets its own thresholds only with at least this many readings of it on the
#: calibration rows: no error in n readings bounds the error rate by about 3 / n (0.1 % here);
#: rarer marks (crossed, written) keep the global rule.
MARK_MIN_READINGS = 3000


#: Thresholds that no reading passes (a mark that is never confident under them).
NEVER = {k: 1.01 for k in _FOUR}


def choose_by_mark(base: DecisionRule, p, mark_h, c_h, pconf, y, doubt, *, margin: float,
                   floor: dict | None = None, min_readings: int | None = None) -> tuple[DecisionRule, dict]:
    """Thresholds per mark read (``DecisionRule.by_mark``), each chosen like the global rule:
    the most confident readings of that mark with no confident error even when its learned
    thresholds are loosened by the margin; the photo gates stay the global rule's. No
    threshold is looser than ``floor`` (default ``MARK_FLOOR``); a mark with fewer than
    ``min_readings`` readings (default ``MARK_MIN_READINGS``) keeps the rule above."""
    floor = MARK_FLOOR if floor is None else floor
    min_readings = MARK_MIN_READINGS if min_readings is None else min_readings
    mark_l = p.argmax(axis=1)
    p_l = p.max(axis=1)
    gate = (pconf >= base.photo_gate) & (doubt <= base.photo_doubt_max) & (mark_l == mark_h)
    ok = mark_l == y
    grid_l = [0.99, 0.993, 0.995, 0.997, 0.998, 0.999, 0.9995, 0.9998, 0.9999]
    grid_h = [0.5, 0.7, 0.8, 0.9, 0.95, 0.97, 0.99, 0.995, 0.999]
    by_mark, counts = {}, {}
    for m, name in enumerate(MARKS):
        sel = gate & (mark_l == m)
        counts[name] = {"readings": int(sel.sum())}
        if sel.sum() < min_readings:
            continue  # the global thresholds
        best = None
        # (this mark's readings only, and its wrong ones apart: the same counts, much faster)
        ch, pl = c_h[sel], p_l[sel]
        wrong = ~ok[sel]
        ch_w, pl_w = ch[wrong], pl[wrong]
        hf_min = GLOBAL_HAND_FLOOR if name == "crossed" else 0.0
        for hm in [h for h in grid_h if h >= floor["hand_min"]]:
            for lm in [v for v in grid_l if v >= floor["learned_min"]]:
                for la in [v for v in grid_l if v >= max(lm, floor["learned_alone"])] + [1.01]:
                    # (the crossed floor binds only the learned-alone clause: with it off, la
                    # 1.01, any hand_min is still tried)
                    for hf in [h for h in grid_h if h <= hm and (h >= hf_min or la > 1.0)]:
                        if np.any(((ch_w >= hm) & (pl_w >= relax(lm, margin)))
                                  | ((ch_w >= hf) & (pl_w >= relax(la, margin)))):
                            continue
                        n = int(np.count_nonzero(((ch >= hm) & (pl >= lm)) | ((ch >= hf) & (pl >= la))))
                        if best is None or n > best[0]:
                            best = (n, (hm, lm, la, hf))
        # no rule without error: that mark is never confident
        by_mark[name] = dict(zip(_FOUR, best[1])) if best else dict(NEVER)
        counts[name]["confident"] = best[0] if best else 0
    from dataclasses import replace
    return replace(base, by_mark=by_mark), counts


#: Thresholds of a doubt tier (``DecisionRule.tiers``) are never looser than these: the tier's
#: calibration rows are fewer, and the floor keeps a reading on a clear photo from becoming
#: confident on a probability the rows cannot vouch for.
TIER_FLOOR = {"learned_min": 0.99, "hand_min": REVIEW_THRESHOLD, "learned_alone": 0.995}
#: A tier's mark, or a kind's mark within a tier, gets its own thresholds only with at least
#: this many readings there: every subset chosen apart is one more chance that its rarest
#: error was not in the calibration rows (on the dev corpora, tiers per kind from 3000
#: readings, and a third tier at doubt 0.05, let a faint cross read empty at 0.998 through).
TIER_MIN_READINGS = 5000


def tier_only(rule: DecisionRule, marks) -> DecisionRule:
    """``rule`` with ``marks`` never confident outside the doubt tiers (``--tier-only``): their
    per-mark thresholds become :data:`NEVER`, so only a tier chosen on clear photos' rows can
    make them confident. For a mark whose errors hide in unclear photos rarer than the
    calibration rows can bound (reader-v6 made "written" confident on any photo of doubt up to
    0.12, with no error among 7,519 calibration fields, and the next hard photo broke it)."""
    from dataclasses import replace
    return replace(rule, by_mark={**(rule.by_mark or {}), **{m: dict(NEVER) for m in marks}})


def _stricter(a: dict, b: dict) -> dict:
    """Thresholds confident only where both ``a`` and ``b`` are (each component the larger)."""
    return {k: max(a[k], b[k]) for k in _FOUR}


def choose_tiers(base: DecisionRule, p, mark_h, c_h, pconf, y, doubt, kind, *, bounds,
                 margin: float):
    """``DecisionRule.tiers`` for the doubt bounds: per bound, thresholds per mark chosen like
    :func:`choose_by_mark` on the rows of photos whose doubt is at most the bound, then per
    region kind and mark on that kind's rows there (marks with fewer than
    ``TIER_MIN_READINGS`` readings, or no rule without error, keep the rule above). Tiers are
    then made monotone: a photo in doubt is never read more loosely than a clearer one (every
    tier's thresholds for a kind and mark are at least those of the tier below it)."""
    from dataclasses import replace

    def chosen(sel):
        r, counts = choose_by_mark(base, p[sel], mark_h[sel], c_h[sel], pconf[sel], y[sel],
                                   doubt[sel], margin=margin, floor=TIER_FLOOR,
                                   min_readings=TIER_MIN_READINGS)
        return {m: t for m, t in (r.by_mark or {}).items() if t["learned_min"] <= 1.0}, counts

    def lookup(tier, kd, m):
        t = (tier[2].get(kd) or {}).get(m) if kd is not None else None
        t = t or tier[1].get(m)
        return t or dict(zip(_FOUR, base.thresholds(m)))

    def named(tier, kd, m):
        return (kd is not None and m in (tier[2].get(kd) or {})) or m in tier[1]

    tiers, report = [], {}
    for bound in sorted(bounds):
        sel = doubt <= bound
        marks, counts = chosen(sel)
        kinds, kind_counts = {}, {}
        for kd in sorted(set(kind[sel].tolist())):
            km, kind_counts[kd] = chosen(sel & (kind == kd))
            if km:
                kinds[kd] = km
        report[str(bound)] = {"rows": int(sel.sum()), "marks": counts, "kinds": kind_counts}
        if tiers:
            # monotone: never looser than the tier below, for any kind and mark it names. (A
            # kind and mark that no tier below names need no such bound: a clearer photo's
            # reading of it falls through to this tier, DecisionRule.thresholds; bounding it by
            # the rule without tiers made a --tier-only mark never confident in any tier but
            # the clearest, where it may have too few readings for thresholds of its own.)
            below = tiers[-1]
            for m in set(marks) | set(below[1]):
                if named(below, None, m):
                    marks[m] = _stricter(lookup((bound, marks, kinds), None, m), lookup(below, None, m))
            for kd in set(kinds) | set(below[2]):
                for m in set(kinds.get(kd, {})) | set(below[2].get(kd, {})):
                    if named(below, kd, m):
                        kinds.setdefault(kd, {})[m] = _stricter(lookup((bound, marks, kinds), kd, m),
                                                                lookup(below, kd, m))
        if marks or kinds:
            tiers.append((float(bound), marks, kinds))
    rule = replace(base, tiers=tuple(tiers))
    mark_l = p.argmax(axis=1)
    before, ok = rule_outcome(base, p, mark_l, mark_h, c_h, pconf, y, doubt, kind)
    after, _ = rule_outcome(rule, p, mark_l, mark_h, c_h, pconf, y, doubt, kind)
    if np.any(after & ~ok & ~before):
        sys.exit("choose_tiers: a tier made an error confident on its own rows (a bug)")
    report["confident"] = {"before": int(before.sum()), "after": int(after.sum())}
    return rule, report


def summarise(d, p, rule: DecisionRule) -> dict:
    """Region-level figures of the hand reader alone and of the two-reader verdict."""
    y, mark_h, c_h, pconf = d["y"], d["hand_mark"], hand_conf(d), d["photo_conf"]
    mark_l = p.argmax(axis=1)
    sure, ok = rule_outcome(rule, p, mark_l, mark_h, c_h, pconf, y, doubt_per_row(p, d["photo"]),
                            d["kind"])
    hand_ok = mark_h == y
    hand_sure = np.minimum(c_h, pconf) >= REVIEW_THRESHOLD
    easy_typ = np.isin(d["preset"], ["easy", "typical"])
    photos = d["photo"]

    def sheets_clean(flag):
        ph = np.unique(photos[easy_typ])
        flagged = np.zeros(photos.max() + 1, bool)
        np.logical_or.at(flagged, photos, flag)
        return float(np.mean(~flagged[ph])) if ph.size else None

    out = {}
    for name, m_ok, m_sure in (("hand", hand_ok, hand_sure), ("combined", ok, sure)):
        out[name] = {"accuracy": round(float(m_ok.mean()), 5),
                     "hard_accuracy": round(float(m_ok[d["preset"] == "hard"].mean()), 5)
                     if np.any(d["preset"] == "hard") else None,
                     "confident_errors": int(np.sum(m_sure & ~m_ok)),
                     "flagged_share": round(float(1 - m_sure.mean()), 5),
                     "easy_typical_sheets_nothing_flagged": round(sheets_clean(~m_sure), 4)}
    out["learned_alone_accuracy"] = round(float(ok.mean()), 5)
    out["regions"] = int(len(y))
    out["photos"] = int(np.unique(photos).size)
    out["photos_skipped"] = len(d["skipped"])
    pl = p[np.arange(len(p)), mark_l]
    hi = pl >= REVIEW_THRESHOLD
    out["learned_error_rate_at_p_ge_0.97"] = round(float(np.mean(~ok[hi])), 6) if hi.any() else None
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", action="append", required=True, help="training .npz (repeatable)")
    ap.add_argument("--val", action="append", default=[], help="validation .npz (repeatable)")
    ap.add_argument("--calib", action="append", default=[],
                    help="calibration-only .npz (repeatable): read by the fitted model and added "
                         "to the rows the decision rule is chosen on, never fitted on; may hold "
                         "spent measurement corpora (reader_dataset.SPENT_SEED_RANGES)")
    ap.add_argument("--tiers", default="",
                    help="doubt bounds for DecisionRule.tiers, comma-separated (e.g. 0.01,0.03): "
                         "looser thresholds chosen on the rows of clear photos alone")
    ap.add_argument("--out", required=True, help="model JSON to write")
    ap.add_argument("--kind", choices=("gbdt", "mlp"), default="gbdt")
    ap.add_argument("--calib-share", type=float, default=0.3)
    ap.add_argument("--margin", type=float, default=2.0,
                    help="thresholds relaxed by this factor on the doubt must still give no error")
    ap.add_argument("--photo-gate", type=float, default=0.5)
    ap.add_argument("--iters", type=int, default=150)
    ap.add_argument("--leaves", type=int, default=15)
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--min-leaf", type=int, default=40)
    ap.add_argument("--independent", action="store_true",
                    help="do not let the model see the hand reader's probabilities")
    ap.add_argument("--l2", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--by-mark", action="store_true",
                    help="choose the readers' thresholds per mark read (DecisionRule.by_mark)")
    ap.add_argument("--tier-only", default="",
                    help="marks, comma-separated, that may be confident only in a doubt tier "
                         "(never on photos in more doubt than every tier), e.g. written")
    ap.add_argument("--dump", help="also save the rows the rule is chosen on (.npz, for what-if studies)")
    ap.add_argument("--lopo", action="store_true",
                    help="choose the rule also on leave-one-painter-out readings of the "
                         "calibration photos (needs two training painters)")
    ap.add_argument("--drop", default="",
                    help="feature columns the model does not read, comma-separated names or "
                         "prefixes ending in * (e.g. ev_ring_*): a model that does not read a "
                         "column never pays for measuring it")
    ap.add_argument("--weight", action="append", default=[], metavar="PATH=W",
                    help="fit the rows of the --train dataset PATH with sample weight W (default "
                         "1), e.g. a corpus made with more crossings-out than a game has, so "
                         "that it teaches their look without shifting the marks' prior as much")
    ap.add_argument("--save-sklearn", help="also pickle the scikit-learn model here (debugging)")
    args = ap.parse_args(argv)
    tier_only_marks = [m for m in args.tier_only.split(",") if m]
    unknown = sorted(set(tier_only_marks) - set(MARKS))
    if unknown:  # (before minutes of fitting: a typo would otherwise fail at the export)
        sys.exit(f"--tier-only names no mark {unknown}: marks are {', '.join(MARKS)}")
    part_weight = np.ones(len(args.train))
    for item in args.weight:
        path, eq, w = item.rpartition("=")
        try:
            w = float(w)
        except ValueError:
            w = -1.0
        if not eq or path not in args.train or not w > 0:
            sys.exit(f"--weight {item!r}: give PATH=W with PATH one of the --train datasets and W > 0")
        part_weight[args.train.index(path)] = w

    # every row, trained on, calibrating or validating, must see the light the reader will
    tones = {p: tone_of(np.load(p)) for p in args.train + args.val + args.calib}
    if len(set(tones.values())) > 1:
        sys.exit(f"datasets read with and without the light's tone correction: {tones}; "
                 "rebuild them alike (scripts/reader_dataset.py --tone)")
    tr = load_sets(args.train)
    row_weight = part_weight[tr["part"]]
    bad = sorted(set(tr["painter"].tolist()) - set(TRAIN_PAINTERS))
    if bad:
        sys.exit(f"training data holds photos of the painter(s) {bad}: only {list(TRAIN_PAINTERS)} "
                 "may be trained on (the held-out painter is for validation only)")
    rng = np.random.default_rng(args.seed)
    n_ph = len(tr["photos"])
    calib_ph = rng.random(n_ph) < args.calib_share
    cal = calib_ph[tr["photo"]]
    fit = ~cal
    X, y = tr["X"], tr["y"].astype(int)
    painters = sorted(set(tr["painter"].tolist()))
    if args.independent:
        # The learned reader does not see the hand reader's opinion (its probabilities and
        # confidence): the two readers then err more independently, which is what makes their
        # agreement worth something. The columns stay (the feature list is fixed) but are
        # constant in training, so no tree splits on them.
        hand_cols = [j for j, n in enumerate(FEATURE_NAMES) if n.startswith("hand_")]
        X = X.copy()
        X[:, hand_cols] = 0.0
    names = model_feature_names(args.drop)
    keep = [FEATURE_NAMES.index(n) for n in names]
    Xk = X[:, keep]  # the model's own columns: what it is fitted on
    print(f"train: {fit.sum()} regions / {(~calib_ph).sum()} photos; calibration: {cal.sum()} / "
          f"{calib_ph.sum()}; {len(names)} of {len(FEATURE_NAMES)} columns", file=sys.stderr)
    def fit_gbdt(rows):
        from sklearn.ensemble import HistGradientBoostingClassifier
        m = HistGradientBoostingClassifier(
            max_iter=args.iters, learning_rate=args.lr, max_leaf_nodes=args.leaves,
            min_samples_leaf=args.min_leaf, l2_regularization=args.l2, early_stopping=False,
            random_state=args.seed)
        # (no weights unless asked: the fit is then exactly the one without the option)
        m.fit(Xk[rows], y[rows], sample_weight=row_weight[rows] if args.weight else None)
        return m

    if args.kind == "gbdt":
        clf = fit_gbdt(fit)
        body = export_gbdt(clf)
    else:
        from sklearn.neural_network import MLPClassifier
        mean = Xk[fit].mean(axis=0)
        scale = Xk[fit].std(axis=0) + 1e-3
        clip = 6.0
        Z = np.clip((Xk[fit] - mean) / scale, -clip, clip)
        clf = MLPClassifier(hidden_layer_sizes=(64, 32), alpha=1e-3, max_iter=300,
                            early_stopping=True, random_state=args.seed)
        clf.fit(Z, y[fit], sample_weight=row_weight[fit] if args.weight else None)
        body = export_mlp(clf, mean, scale, clip)
    doc = {"format": MODEL_FORMAT, "id": Path(args.out).stem, "kind": args.kind,
           "classes": list(MARKS), "feature_names": list(names), args.kind: body,
           "temperature": 1.0}
    reader = model_from_dict(doc, source="<training>")
    # A few stored rows with scikit-learn's own probabilities: the test that the JSON model,
    # evaluated by vision.learned, is the model that was trained (tests/test_vision_learned.py).
    check_rows = []
    for c in range(len(MARKS)):
        idx = np.flatnonzero(cal & (y == c))
        if idx.size:
            check_rows += idx[:: max(1, idx.size // 2)][:2].tolist()
    Xc = X[check_rows]
    Xck = Xk[check_rows]
    sk = clf.predict_proba(Xck if args.kind == "gbdt" else np.clip((Xck - mean) / scale, -clip, clip))
    sk_full = np.zeros((len(check_rows), len(MARKS)))
    sk_full[:, clf.classes_] = sk
    ours = reader.predict_proba(Xc, calibrated=False)
    gap = float(np.abs(ours - sk_full).max())
    print(f"JSON model vs scikit-learn on {len(check_rows)} rows: max |dp| = {gap:.2e}", file=sys.stderr)
    if args.save_sklearn:
        import pickle
        Path(args.save_sklearn).write_bytes(pickle.dumps((clf, Xc, sk_full)))
    if gap > 2e-5:
        sys.exit("the exported model does not reproduce scikit-learn's probabilities")
    raw_cal = reader.raw_scores(X[cal])
    # temperature: least log-loss on the calibration photos
    yc = y[cal]
    best_T, best_nll = 1.0, np.inf
    for T in np.exp(np.linspace(np.log(0.3), np.log(5.0), 60)):
        pc = masked_proba(raw_cal, tr["allowed"][cal], T)
        nll = -np.mean(np.log(np.maximum(pc[np.arange(len(yc)), yc], 1e-12)))
        if nll < best_nll:
            best_T, best_nll = float(T), float(nll)
    pc = masked_proba(raw_cal, tr["allowed"][cal], best_T)
    calset = {k: (v[cal] if isinstance(v, np.ndarray) and len(v) == len(y) else v) for k, v in tr.items()}
    calset["skipped"] = []
    # The rule is chosen on the calibration photos, read by the model (painters it was fitted
    # on, photos it was not) and, with --lopo, also read as if by a painter never seen: for
    # each training painter, a model fitted on the other painters' fitting photos reads this
    # painter's calibration photos. A rule must leave no confident error on either.
    rows = {"p": [pc], "hand": [tr["hand_mark"][cal]], "c_h": [hand_conf(tr)[cal]],
            "pconf": [tr["photo_conf"][cal]], "y": [yc], "doubt": [doubt_per_row(pc, tr["photo"][cal])],
            "kind": [tr["kind"][cal]]}
    lopo = {}
    if args.lopo:
        if args.kind != "gbdt" or len(painters) < 2:
            sys.exit("--lopo needs --kind gbdt and training data of at least two painters")
        for held in painters:
            other_fit = fit & (tr["painter"] != held)
            here = cal & (tr["painter"] == held)
            m = fit_gbdt(other_fit)
            r = model_from_dict({**doc, "gbdt": export_gbdt(m)}, source=f"<lopo {held}>")
            raw = r.raw_scores(X[here])
            # its own temperature, on the rows it reads (a calibrated reading, as the final one)
            T_h, nll_h = 1.0, np.inf
            for T in np.exp(np.linspace(np.log(0.3), np.log(5.0), 60)):
                pp = masked_proba(raw, tr["allowed"][here], T)
                nll = -np.mean(np.log(np.maximum(pp[np.arange(here.sum()), y[here]], 1e-12)))
                if nll < nll_h:
                    T_h, nll_h = float(T), float(nll)
            pp = masked_proba(raw, tr["allowed"][here], T_h)
            rows["p"].append(pp)
            rows["hand"].append(tr["hand_mark"][here])
            rows["c_h"].append(hand_conf(tr)[here])
            rows["pconf"].append(tr["photo_conf"][here])
            rows["y"].append(y[here])
            # (photo indices of this painter's photos stay distinct from the others')
            rows["doubt"].append(doubt_per_row(pp, tr["photo"][here]))
            rows["kind"].append(tr["kind"][here])
            sub = {k: (v[here] if isinstance(v, np.ndarray) and len(v) == len(y) else v)
                   for k, v in tr.items()}
            sub["skipped"] = []
            lopo[held] = {"fitted_on": [q for q in painters if q != held], "temperature": round(T_h, 4),
                          "rows": int(here.sum()), "pred": pp, "set": sub}
            print(f"leave-one-painter-out: {held} read by a model of {lopo[held]['fitted_on']}: "
                  f"accuracy {np.mean(pp.argmax(axis=1) == y[here]):.4f}, T {T_h:.3f}", file=sys.stderr)
    extra = {}
    for cp in args.calib:
        cd = load_sets([cp], calib_only=True)
        pcd = masked_proba(reader.raw_scores(cd["X"]), cd["allowed"], best_T)
        rows["p"].append(pcd)
        rows["hand"].append(cd["hand_mark"])
        rows["c_h"].append(hand_conf(cd))
        rows["pconf"].append(cd["photo_conf"])
        rows["y"].append(cd["y"].astype(int))
        rows["doubt"].append(doubt_per_row(pcd, cd["photo"]))
        rows["kind"].append(cd["kind"])
        extra[Path(cp).stem] = (cd, pcd)
        print(f"calibration-only {cp}: {len(cd['y'])} regions, accuracy "
              f"{np.mean(pcd.argmax(axis=1) == cd['y']):.4f}", file=sys.stderr)
    cat = {k: np.concatenate(v) for k, v in rows.items()}
    if args.dump:
        # the rows the rule is chosen on (what-if studies of other rules without refitting)
        src = np.concatenate([np.full(len(v), i) for i, v in enumerate(rows["y"])])
        np.savez_compressed(args.dump, **cat, source=src,
                            sources=np.asarray(["calibration"] + [f"lopo_{h}" for h in lopo]))
    rule, how = choose_rule(cat["p"], cat["hand"], cat["c_h"], cat["pconf"], cat["y"], cat["doubt"],
                            margin=args.margin, photo_gate=args.photo_gate)
    if args.by_mark:
        rule, how["by_mark"] = choose_by_mark(rule, cat["p"], cat["hand"], cat["c_h"], cat["pconf"],
                                              cat["y"], cat["doubt"], margin=args.margin)
    if tier_only_marks:
        rule = tier_only(rule, tier_only_marks)
    if args.tiers:
        bounds = [float(b) for b in args.tiers.split(",") if b.strip()]
        rule, how["tiers"] = choose_tiers(rule, cat["p"], cat["hand"], cat["c_h"], cat["pconf"],
                                          cat["y"], cat["doubt"], cat["kind"], bounds=bounds,
                                          margin=args.margin)
    print(f"temperature {best_T:.3f} (calibration log-loss {best_nll:.4f}); rule {rule} {how}",
          file=sys.stderr)
    validation = {"calibration_split": summarise(calset, pc, rule)}
    for held, v in lopo.items():
        validation[f"lopo_{held}"] = {"fitted_on": v["fitted_on"], "temperature": v["temperature"],
                                      **summarise(v["set"], v["pred"], rule)}
    for pn in painters:
        sel = calset["painter"] == pn
        if sel.any() and len(painters) > 1:
            sub = {k: (v[sel] if isinstance(v, np.ndarray) and len(v) == len(sel) else v)
                   for k, v in calset.items()}
            validation[f"calibration_split_{pn}"] = summarise(sub, pc[sel], rule)
    for name, (cd, pcd) in extra.items():
        validation[f"calib_{name}"] = {"painter": sorted(set(cd["painter"].tolist())),
                                       **summarise(cd, pcd, rule)}
    for vp in args.val:
        vd = load_sets([vp])
        pv = masked_proba(reader.raw_scores(vd["X"]), vd["allowed"], best_T)
        painters = sorted(set(vd["painter"].tolist()))
        validation[Path(vp).stem] = {"painter": painters, **summarise(vd, pv, rule)}
    for k, v in validation.items():
        print(k, json.dumps(v), file=sys.stderr)

    doc.update({
        "temperature": round(best_T, 4),
        "decision": rule.to_dict(),
        "created": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%MZ"),
        "training": {"command": "scripts/train_reader.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                     "datasets": [{"path": p, "sha256_16": file_digest(p)} for p in args.train],
                     "folders": sorted({str(f) for p in args.train for f in np.load(p)["folders"]}),
                     "seed_range": [int(tr["seeds"].min()), int(tr["seeds"].max())],
                     "photos": int(n_ph), "regions": int(len(y)),
                     "calibration_photos": int(calib_ph.sum()), "split_seed": args.seed,
                     "margin": args.margin, "painters": painters, "lopo": bool(args.lopo),
                     "by_mark": bool(args.by_mark),
                     "calibration_only": [{"path": p, "sha256_16": file_digest(p)} for p in args.calib],
                     "tiers": args.tiers, "tier_only": args.tier_only,
                     "light_tone_correction": bool(tr["tone_correction"]),
                     "params": {"iters": args.iters, "leaves": args.leaves, "lr": args.lr,
                                "min_leaf": args.min_leaf, "l2": args.l2,
                                "independent": args.independent,
                                "weights": {p: float(part_weight[i]) for i, p in enumerate(args.train)
                                            if part_weight[i] != 1.0}} if args.kind == "gbdt"
                     else {"hidden": [64, 32],
                           "weights": {p: float(part_weight[i]) for i, p in enumerate(args.train)
                                       if part_weight[i] != 1.0}}},
        "validation": validation,
    })
    model_from_dict(doc, source="<export>")  # the file must load
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    check = Path(args.out).with_suffix(".check.json")
    check.write_text(json.dumps({
        "model": Path(args.out).name,
        "note": "rows of the calibration split and scikit-learn's predict_proba for them "
                "(no temperature, no mask): vision.learned must reproduce them",
        "X": [[float(v) for v in row] for row in Xc],
        "proba": [[round(float(v), 7) for v in row] for row in sk_full]}) + "\n")
    print(f"wrote {args.out} ({Path(args.out).stat().st_size / 1024:.0f} KB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
