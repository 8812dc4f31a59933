#!/usr/bin/env python
"""Pack reader models fitted by one recipe into one model file with a committee.

The first model reads and decides (its trees, temperature and rule); the others are its
second opinions (``vision.learned.second_opinions``): a reading stays confident only if every
one of them is confident of the same mark. The output is a ``sheetcheck.reader-model/2``
document: the first model's document plus ``committee``, the others' whole documents. The
first model's check rows (``.check.json`` beside it) are copied beside the output.

    scripts/pack_committee.py --id reader-v8 --out calibration/models/reader-v8.json \\
        fits/reader-s0.json fits/reader-s1.json fits/reader-s2.json

With ``--combine mean --calib DATASETS`` the committee reads as one instead (a
``sheetcheck.reader-model/3`` document, ``vision.learned.committee_proba``): the members'
probabilities averaged, and one rule chosen on those averages over the calibration datasets
(``scripts/reader_dataset.py`` rows that no member was fitted on: spent measurement corpora of
a training painter) by ``scripts/train_reader.py``'s own search (the same grid, ``--margin``,
per-mark thresholds, ``--tiers`` and ``--tier-only`` marks); a region the members read as
different marks is never confident::

    scripts/pack_committee.py --id reader-v12 --out calibration/models/reader-v12.json \
        --combine mean --calib WORK/data/target.npz [--calib ...] fits/tone-s{0,1,2}.json

``--cross-calib DATASETS`` (corpora crossed out at rate 0.3, calibration only) then chooses the
doubt tiers' thresholds of "crossed" again on those rows and the
``--calib`` rows together, in the tiers and in the extra bounds of ``--own-tiers``, with floors
(:data:`OWN_HAND_MIN`, :data:`OWN_LEARNED_MIN`); every other mark reads as without it
(reader-v14: ``RECIPE=v14 scripts/reader_recipe.sh pack``).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dataclasses import replace  # noqa: E402

from sheetcheck.errors import SheetcheckError  # noqa: E402
from sheetcheck.files import read_json_file  # noqa: E402
from vision.learned import (COMMITTEE_FORMAT, MEAN_FORMAT, MODEL_FORMAT,  # noqa: E402
                            THRESHOLD_NAMES, ReaderModelError, committee_proba, model_from_dict)
from vision.marks import MARKS  # noqa: E402


def pack(docs: list[dict], *, model_id: str) -> dict:
    """One format-2 document from format-1 ``docs`` (the first decides, the rest are its
    committee); checked by loading it."""
    if len(docs) < 2:
        raise ReaderModelError("a committee needs at least two models: the first reads, the "
                               "others are its second opinions.")
    for i, d in enumerate(docs):
        if not isinstance(d, dict) or d.get("format") != MODEL_FORMAT:
            raise ReaderModelError(f"model {i + 1} is not a {MODEL_FORMAT!r} document.",
                                   hint="Pack the files scripts/train_reader.py wrote.")
    # the members named after the committee (a flagged reading's reason names the member:
    # "second opinion unsure (reader-v8.2: ...)"), each keeping its fit's own id as "fit"
    members = [{**d, "id": f"{model_id}.{k}", "fit": d.get("id")} for k, d in enumerate(docs[1:], 2)]
    out = {**docs[0], "format": COMMITTEE_FORMAT, "id": model_id, "fit": docs[0].get("id"),
           "committee": members}
    model_from_dict(out, source=model_id)  # every member valid, columns within the first's
    return out


def _rows(members, paths: list[str], want: set) -> dict:
    """The members' averaged probabilities and every column the rule is chosen on, over the
    datasets ``paths`` concatenated."""
    import numpy as np

    import train_reader as tr

    rows = {k: [] for k in ("p", "hand", "c_h", "pconf", "y", "doubt", "kind")}
    for path in paths:
        d = tr.load_sets([path], calib_only=True)  # (only spent seeds of a training painter)
        if d["tone_correction"] not in want:
            raise ReaderModelError(f"{path} was read with the tone correction "
                                   f"{'on' if d['tone_correction'] else 'off'}, unlike the models.",
                                   hint="Build it again with scripts/reader_dataset.py --tone.")
        p, marks = committee_proba([m.predict_proba(d["X"], allowed=d["allowed"]) for m in members])
        agree = np.all(marks == marks[0], axis=0)
        rows["p"].append(p)
        # (a region the members read as different marks is never confident: no hand mark
        # matches it)
        rows["hand"].append(np.where(agree, d["hand_mark"], -1))
        # (seven decimals: the reader's hand confidence, as committee_check reads it)
        rows["c_h"].append(tr.hand_conf(d).astype(np.float64).round(7))
        rows["pconf"].append(d["photo_conf"])
        rows["y"].append(d["y"].astype(int))
        rows["doubt"].append(tr.doubt_per_row(p, d["photo"]))
        rows["kind"].append(d["kind"])
    return {k: np.concatenate(v) for k, v in rows.items()}


def _args(cat: dict) -> tuple:
    return cat["p"], cat["hand"], cat["c_h"], cat["pconf"], cat["y"], cat["doubt"]


def mean_rule(docs: list[dict], calib: list[str], *, margin: float, tiers: list[float],
              tier_only: list[str], photo_gate: float, cross_calib: list[str] = (),
              own_tiers_extra: list[float] = (),
              extra_tier_marks: tuple[str, ...] = ()):
    """The rule of a committee that reads as one (``--combine mean``), chosen on the members'
    averaged probabilities over the ``calib`` datasets, and what it was chosen on.

    With ``cross_calib`` (datasets rich in crossings-out, calibration only), the thresholds
    of :data:`OWN_MARKS` in the doubt tiers are chosen again on the ``calib`` and ``cross_calib``
    rows together (:func:`own_tiers`); every other mark keeps the thresholds chosen on
    ``calib`` alone, so that the extra rows cannot change how colours and empties read, except
    that ``extra_tier_marks`` get thresholds, chosen on the same rows, in the tiers of
    ``own_tiers_extra`` (photos in more doubt than the rule's own tiers hold)."""
    import numpy as np

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import train_reader as tr
    from vision.light import tone_correction_for

    members = [model_from_dict(d, source=f"model {k + 1}") for k, d in enumerate(docs)]
    want = {tone_correction_for(m) for m in members}
    if len(want) > 1:
        raise ReaderModelError("the models were fitted on rows read in different light (the "
                               "tone correction on for some, off for others).")
    cat = _rows(members, calib, want)
    args = _args(cat)
    rule, how = tr.choose_rule(*args, margin=margin, photo_gate=photo_gate)
    rule, how["by_mark"] = tr.choose_by_mark(rule, *args, margin=margin)
    if tier_only:
        rule = tr.tier_only(rule, tier_only)
    untiered = rule
    if tiers:
        rule, how["tiers"] = tr.choose_tiers(rule, *args, cat["kind"], bounds=tiers, margin=margin)
    # the hand reader's side never looser than any member's own rule asks (see hand_bounded)
    rule = hand_bounded(rule, [m.rule for m in members], sorted(set(cat["kind"].tolist())))
    own, others_wrong = {}, 0
    if cross_calib:
        if not tiers:
            raise ReaderModelError("--cross-calib chooses thresholds in the doubt tiers: give "
                                   "--tiers too.")
        unknown = sorted(set(extra_tier_marks) - set(MARKS))
        if unknown:
            raise ReaderModelError(f"--extra-tier-marks names no mark: {', '.join(unknown)}.",
                                   hint=f"Marks are {', '.join(MARKS)}.")
        xc = _rows(members, cross_calib, want)
        both = {k: np.concatenate([cat[k], xc[k]]) for k in cat}
        chosen, _ = tr.choose_tiers(untiered, *_args(both), both["kind"],
                                    bounds=sorted(set(tiers) | set(own_tiers_extra)), margin=margin)
        before = rule
        rule = own_tiers(rule, chosen, OWN_MARKS, extra_tier_marks)
        mark_l = both["p"].argmax(axis=1)

        def outcome(r):
            return tr.rule_outcome(r, both["p"], mark_l, both["hand"], both["c_h"],
                                   both["pconf"], both["y"], both["doubt"], both["kind"])

        sure, ok = outcome(rule)
        sure_before, _ = outcome(before)
        if np.any(sure & ~ok & ~sure_before):
            raise SystemExit("mean_rule: the thresholds chosen on the crossed-out rows made a "
                             "confident error on the rows they were chosen on (a bug)")
        for m in OWN_MARKS:
            sel = mark_l == MARKS.index(m)
            own[m] = {"readings": int(sel.sum()), "confident": int((sure & sel).sum())}
        extra = {m: {"confident_gained": int((sure & ~sure_before
                                              & (mark_l == MARKS.index(m))).sum())}
                 for m in extra_tier_marks}
        # (the other marks' thresholds were chosen on --calib alone: their confident errors
        # on the crossed-out rows, if any, are recorded, not hidden)
        others_wrong = int((sure & ~ok)[len(cat["y"]):].sum())
    sure, ok = tr.rule_outcome(rule, cat["p"], cat["p"].argmax(axis=1), cat["hand"], cat["c_h"],
                               cat["pconf"], cat["y"], cat["doubt"], cat["kind"])
    if np.any(sure & ~ok):
        bad = np.flatnonzero(sure & ~ok)
        raise SystemExit(f"mean_rule: {bad.size} confident error(s) on the rows the rule was "
                         f"chosen on (rows {bad[:5].tolist()}, read "
                         f"{[MARKS[i] for i in cat['p'][bad[:5]].argmax(axis=1)]}, truth "
                         f"{[MARKS[i] for i in cat['y'][bad[:5]]]})")
    # (as train_reader records its --calib datasets)
    info = {"calibration": [{"path": str(c), "sha256_16": tr.file_digest(c)} for c in calib],
            "rows": int(len(cat["y"])),
            "confident": int(sure.sum()), "margin": margin, "tiers": tiers,
            "tier_only": tier_only, "photo_gate": photo_gate}
    if cross_calib:
        info["cross_calibration"] = [{"path": str(c), "sha256_16": tr.file_digest(c)}
                                     for c in cross_calib]
        info["own_tiers"] = sorted(set(tiers) | set(own_tiers_extra))
        info["own_floor"] = {"hand_min": OWN_HAND_MIN, "learned_min": OWN_LEARNED_MIN}
        info["own_marks"] = own
        info["other_marks_confident_errors_on_cross_calibration"] = others_wrong
        if extra_tier_marks:
            info["extra_tier_marks"] = extra
    return rule, info


#: Floors under the thresholds :func:`own_tiers` takes from rows the members' own rules never
#: saw: the hand reader at least at its review threshold, the learned reader at least 0.995
#: sure. (The search alone chose 0.97 / 0.99 in every tier; with tiers for "crossed" up to
#: doubt 0.2 it read a held-out painter's purple fill "crossed" at 0.9917 with the hand reader
#: at 0.9755: a coloured fill read crossed is the old failure GLOBAL_HAND_FLOOR was made for.
#: Session 24.)
OWN_HAND_MIN = 0.97
OWN_LEARNED_MIN = 0.995
#: The marks whose tier thresholds ``--cross-calib`` chooses on the crossed-out rows.
OWN_MARKS = ("crossed",)


def own_tiers(rule, chosen, marks, extra_marks=()):
    """``rule`` with the thresholds of ``marks``, in every doubt tier and region kind, taken
    from ``chosen`` (a rule whose tiers were chosen on more rows), never looser than
    :data:`OWN_HAND_MIN` and :data:`OWN_LEARNED_MIN`. ``rule`` names every kind and mark in every tier
    (:func:`hand_bounded`); its thresholds above the tiers are kept.

    Why: every member's own rule says "never" for "crossed", because no member's calibration
    rows held enough crossings-out to choose thresholds on (``MARK_MIN_READINGS``), and
    :func:`hand_bounded` inherits that "never": every crossing-out was flagged (session 23).
    Choosing the whole rule on the crossed-out corpora too made the other marks' thresholds
    stricter (more flags on seven datasets); here only ``marks`` change.

    ``extra_marks`` are named too in the tiers beyond the rule's own (``chosen``'s larger doubt
    bounds), with the same floors, and never looser than the rule's own last tier asks of the
    same kind and mark (a photo in more doubt is never read more loosely)."""
    def own(m, doubt, kind):
        t = dict(zip(THRESHOLD_NAMES, (float(v) for v in chosen.thresholds(m, doubt, kind))))
        if t["learned_min"] > 1.0 and t["learned_alone"] > 1.0:
            return dict(t)  # never confident
        for k, lo in (("hand_min", OWN_HAND_MIN), ("hand_floor", OWN_HAND_MIN),
                      ("learned_min", OWN_LEARNED_MIN), ("learned_alone", OWN_LEARNED_MIN)):
            t[k] = max(t[k], lo) if t[k] <= 1.0 else t[k]
        return t

    tiers = [(b, {**bm, **{m: own(m, b, None) for m in marks}},
              {k: {**km, **{m: own(m, b, k) for m in marks}} for k, km in bk.items()})
             for b, bm, bk in rule.tiers]
    # doubt bounds beyond the rule's own: tiers that name ``marks`` only (every other mark's
    # reading falls through them to the thresholds above the tiers, DecisionRule.thresholds)
    top = max((b for b, _, _ in rule.tiers), default=-1.0)
    kinds = sorted({k for _, _, bk in rule.tiers for k in bk})

    def beyond(m, doubt, kind):
        t = own(m, doubt, kind)
        if m in marks:
            return t
        last = rule.thresholds(m, top, kind)  # (the rule's own last tier)
        return {k: max(v, float(last[j])) for j, (k, v) in enumerate(t.items())}

    named = tuple(marks) + tuple(m for m in extra_marks if m not in marks)
    for b, _, _ in chosen.tiers:
        if b > top:
            tiers.append((b, {m: beyond(m, b, None) for m in named},
                          {k: {m: beyond(m, b, k) for m in named} for k in kinds}))
    return replace(rule, tiers=tuple(tiers))


def hand_bounded(rule, others, kinds):
    """``rule`` with the hand reader's thresholds (``hand_min``, ``hand_floor``) raised, for
    every doubt, region kind and mark, to the highest that a rule of ``others`` (the members'
    own rules) asks there; the photo gates likewise the strictest. The result names every
    kind and mark in every tier (the union of all the rules' doubt bounds).

    Why: each member's rule was chosen also on its calibration photos read by models that
    never saw their painter (``train_reader.py --lopo``); the averaged rule's calibration rows
    cannot be read that way (each member trained on the others' calibration photos). Without
    that evidence the averaged rule let the hand reader be sure at 0.97 where the members ask
    0.99: on a fresh held-out-painter photo (seed 1120053: warm, blurred, < 3 px/mm) a written
    total it cannot see was read "empty" at 0.9998, hand 0.9847, where every member's rule
    flags it (session 23)."""
    rules = [rule] + list(others)

    def merged(mark, doubt, kind):
        t = list(rule.thresholds(mark, doubt, kind))
        for o in others:
            h = o.thresholds(mark, doubt, kind)
            t[0], t[3] = max(t[0], h[0]), max(t[3], h[3])
        return dict(zip(THRESHOLD_NAMES, (float(v) for v in t)))

    bounds = sorted({float(t[0]) for r in rules for t in r.tiers})
    tiers = tuple((b, {m: merged(m, b, None) for m in MARKS},
                   {k: {m: merged(m, b, k) for m in MARKS} for k in kinds}) for b in bounds)
    # (above every tier: each rule's thresholds without tiers)
    base = {m: merged(m, None, None) for m in MARKS}
    return replace(rule, by_mark=base, tiers=tiers,
                   hand_min=max(r.hand_min for r in rules), hand_floor=max(r.hand_floor for r in rules),
                   photo_gate=max(r.photo_gate for r in rules),
                   photo_doubt_max=min(r.photo_doubt_max for r in rules))


def pack_mean(packed: dict, *, rule, info: dict) -> dict:
    """One format-3 document: ``packed`` (:func:`pack`'s), reading as one committee by
    ``rule``; checked by loading it."""
    out = {**packed, "format": MEAN_FORMAT, "combine": "mean", "decision": rule.to_dict(),
           "mean_rule": info}
    model_from_dict(out, source=str(packed.get("id")))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="model files (train_reader.py --out); the first decides")
    ap.add_argument("--out", required=True, help="the committee's model file")
    ap.add_argument("--id", required=True, help="its id (e.g. reader-v8)")
    ap.add_argument("--combine", choices=("second_opinions", "mean"), default="second_opinions",
                    help="second_opinions (format 2, the default) or mean (format 3: one rule "
                         "on the members' averaged probabilities, chosen on --calib)")
    ap.add_argument("--calib", action="append", default=[],
                    help="with --combine mean: a dataset the rule is chosen on (repeat it)")
    ap.add_argument("--margin", type=float, default=1.5)
    ap.add_argument("--tiers", default="0,0.015,0.03")
    ap.add_argument("--tier-only", default="written,crossed")
    ap.add_argument("--photo-gate", type=float, default=0.5)
    ap.add_argument("--cross-calib", action="append", default=[],
                    help="with --combine mean: a dataset rich in crossings-out (repeat it); "
                         "the doubt tiers' thresholds for 'crossed' are chosen on it and --calib "
                         "together, every other mark's on --calib alone")
    ap.add_argument("--extra-tier-marks", default="",
                    help="with --own-tiers: marks (comma-separated, e.g. empty) named in those "
                         "tiers too, never looser than in the rule's own last tier")
    ap.add_argument("--own-tiers", default="",
                    help="with --cross-calib: more doubt bounds (comma-separated), tiers that name "
                         "'crossed' only")
    args = ap.parse_args(argv)
    if args.combine == "mean" and not args.calib:
        ap.error("--combine mean needs --calib datasets to choose its rule on")
    try:
        docs = [read_json_file(m, what="reader model", error=ReaderModelError) for m in args.models]
        doc = pack(docs, model_id=args.id)  # (the members checked before any rule is chosen)
        if args.combine == "mean":
            rule, info = mean_rule(
                docs, args.calib, margin=args.margin,
                tiers=[float(b) for b in args.tiers.split(",") if b.strip()],
                tier_only=[m for m in args.tier_only.split(",") if m.strip()],
                photo_gate=args.photo_gate, cross_calib=args.cross_calib,
                own_tiers_extra=[float(b) for b in args.own_tiers.split(",") if b.strip()],
                extra_tier_marks=tuple(m for m in args.extra_tier_marks.split(",") if m.strip()))
            doc = pack_mean(doc, rule=rule, info=info)
    except SheetcheckError as e:
        print(f"error: {e.message}" + (f"\n{e.hint}" if e.hint else ""), file=sys.stderr)
        return 2
    out = Path(args.out)
    out.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    check = Path(args.models[0]).with_suffix(".check.json")
    if check.is_file():
        c = json.loads(check.read_text())
        c["model"] = out.name
        out.with_suffix(".check.json").write_text(json.dumps(c) + "\n")
    if args.combine == "mean":
        print(f"wrote {out} ({out.stat().st_size // 1024} KB): {len(docs)} models read as one, "
              f"the rule chosen on {doc['mean_rule']['rows']} rows "
              f"({doc['mean_rule']['confident']} confident)")
    else:
        print(f"wrote {out} ({out.stat().st_size // 1024} KB): {args.models[0]} with "
              f"{len(docs) - 1} second opinion(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
