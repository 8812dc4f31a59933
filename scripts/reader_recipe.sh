#!/usr/bin/env bash
# Remake the learned reader's corpora, datasets and fits from their seeds (docs/EVALUATION.md).
#
#   scripts/reader_recipe.sh corpora WORK          # photos + datasets (~2 h on two cores to "fit ready", session 16)
#   scripts/reader_recipe.sh fit WORK SEED [TAG]   # one fit (~7 min on one core), WORK/fits/TAG-sSEED.json
#   scripts/reader_recipe.sh validate WORK MODEL TAG   # sheetcheck eval of the 9 validation corpora
#   DRY_RUN=1 scripts/reader_recipe.sh ...         # print the commands instead of running them
#   KEEP_PHOTOS=1 scripts/reader_recipe.sh corpora WORK   # keep the training corpora's photos too
#   DROP='ev_ring_*,open_*' scripts/reader_recipe.sh fit WORK SEED TAG   # leave more columns out
#   RECIPE=v11 scripts/reader_recipe.sh corpora|fit ...   # reader-v11's recipe (below)
#   scripts/reader_recipe.sh pack WORK TAG ID OUT  # the fits TAG-s0,1,2 packed as one model file
#   RECIPE=v15 scripts/reader_recipe.sh corpora|fit|pack ...   # the shipped reader-v15 (below)
#   RECIPE=v16 scripts/reader_recipe.sh corpora|fit|pack ...   # session 41's refit (below; not shipped)
#
# The fit is reader-v10's recipe (session 16): reader-v9's training (session 15: reader-v8's
# datasets, plus train30000, varied90000 and the two crossings-out corpora at weight 0.4),
# calibrated on the six newest spent measurement corpora (CALIB) and on four corpora crossed out
# at rate 0.3 (CALIB_CROSS), so that the doubt tiers hold enough crossings-out to choose
# thresholds for them. RECIPE=v9 gives reader-v9's fit exactly (its 13 calibration corpora, no
# CALIB_CROSS), RECIPE=v8 reader-v8's (its 6 training and 11 calibration corpora). Pack three seeds with scripts/pack_committee.py. Training corpora's photos are
# deleted once their dataset is built (300 photos are ~200 MB); validation corpora's are kept
# for `validate`. The fit leaves out the ring columns (`--drop 'ev_ring_*'`); DROP replaces that
# list (the open columns of session 18 are read unless DROP names them). With KEEP_PHOTOS=1 every corpus keeps its photos (~4 GB in all), so that the
# datasets can be extracted again after a change to the reader's features (scripts/reader_dataset.py
# on each WORK/corp/NAME, ~25 min on two cores) without making the photos again (~2 h).
# A corpus whose dataset (or, for validation corpora, whose folder) exists is skipped, so an
# interrupted run picks up where it stopped.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }

# name seed count painter [make_corpus options]; the order is the fit's --train order, and it
# matters: the same datasets in another order split and fit to other trees
TRAIN=(
  "train10000 10000 300 default"
  "train40000 40000 240 default"
  "dev0 0 120 default"
  "varied80000 80000 360 varied"
  "tick83000 83000 120 varied --set hand.tick_boxes=true"
  "tick84000 84000 240 varied --set hand.tick_boxes=true"
  "train30000 30000 300 default"
  "varied90000 90000 300 varied"
  "cross70000 70000 240 default --cross-rate 0.15"
  "cross89000 89000 240 varied --cross-rate 0.15"
)
VAL=(  # --val datasets of the fit, and photos read by `validate`
  "val50000 50000 120 default"
  "varied87000 87000 120 varied"
  "ho60000 60000 120 heldout"
  "ho61000 61000 120 heldout"
)
VAL_PHOTOS_ONLY=(  # read by `validate` only
  "heldout740000 740000 120 heldout"
  "heldout750000 750000 120 heldout"
  "heldout760000 760000 120 heldout"
  "heldout770000 770000 120 heldout"
  "varied82000 82000 360 varied"
)
CALIB_V9=(  # reader-v9's calibration corpora that reader-v10 leaves out (RECIPE=v9 only)
  "target 100000 300 default"
  "final200k 200000 300 default"
  "fresh300k 300000 300 default"
  "fresh400k 400000 300 default"
  "pair710 710000 120 default"
  "fresh500k 500000 300 default"
  "fresh600k 600000 300 default"
)
CALIB=(
  "fresh800k 800000 300 default"
  "fresh900k 900000 300 default"
  "fresh1000k 1000000 300 default"
  "fresh1100k 1100000 300 default"
  "fresh1200k 1200000 300 default"
  "fresh1300k 1300000 300 default"
)
CALIB_CROSS=(  # calibration only (dev seeds): many crossings-out, for the crossed tiers
  "xcal92000 92000 300 default --cross-rate 0.3"
  "xcal93000 93000 300 default --cross-rate 0.3"
  "xcal94000 94000 300 varied --cross-rate 0.3"
  "xcal96000 96000 300 varied --cross-rate 0.3"
)
CALIB_V16=(  # RECIPE=v16's calibration: the eleven newest spent default measurement corpora
  "spent3200000 3200000 300 default"
  "spent3300000 3300000 300 default"
  "spent3400000 3400000 300 default"
  "spent3500000 3500000 300 default"
  "spent3800000 3800000 300 default"
  "spent3900000 3900000 300 default"
  "spent4000000 4000000 300 default"
  "spent4100000 4100000 300 default"
  "spent4200000 4200000 300 default"
  "spent4300000 4300000 300 default"
  "spent4400000 4400000 300 default"
)
WEIGHTS=("cross70000=0.4" "cross89000=0.4")
# RECIPE=v11 (session 22, the shipped reader): reader-v8's corpora and fit, its datasets read
# with the light stage's tone correction (reader_dataset.py --tone on; the fit records it and
# the pipeline then reads with it) and its 96 columns (the ring and open columns left out).
# TONE=on|off overrides the datasets' tone correction for any recipe.
# RECIPE=v12 (session 23): reader-v11's corpora and fits, packed to read as one committee
# (`pack`: pack_committee.py --combine mean, its rule chosen on the members' averaged
# probabilities over the fit's --calib datasets). RECIPE=v13 (session 23, the shipped reader):
# the same; the pack now bounds the hand reader's thresholds by the members' own
# (pack_committee.hand_bounded). PACK_TIERS=0,0.015,0.03,0.05 etc. packs with other doubt
# tiers (two more, 0.05 and 0.08, made a confident error on a fresh corpus: session 23).
# RECIPE=v14 (session 24): reader-v13, and the crossed-out calibration
# corpora (CALIB_CROSS, made by `corpora`) as pack_committee.py --cross-calib: the doubt
# tiers' thresholds of "crossed" chosen on them and CALIB together (tiers 0 to 0.03 and two
# more for crossed only, 0.05 and 0.08), every other mark's exactly reader-v13's.
# RECIPE=v15 (session 24, the shipped reader): reader-v14, and "empty" named in its two
# crossed-only tiers too (pack_committee.py --extra-tier-marks empty): thresholds chosen on
# the same rows, never looser than in the tier at 0.03.
# RECIPE=v16 (session 41, fitted and packed, NOT shipped): reader-v15's recipe with the eleven
# newest spent default measurement corpora (3200000-4400000, CALIB_V16) as its calibration
# instead of reader-v15's; `corpora` makes them from their seeds (the same photos as the
# measurements', the simulator unchanged since), or link a dataset of each into WORK/data. On
# the fresh 4500000 / 1420000 it read as well but flagged 34.8 -> 40.3 % and 45.6 -> 51.8 %:
# one fit's rule (seed 0) closed the photo gate at 3 % of regions in doubt, and the pack takes
# the strictest gate of its members (docs/EVALUATION.md, "Session 41").
COMBINE=second_opinions
PACK_CROSS=()
PACK_EXTRA=""
case ${RECIPE:-v10} in
  v10) ;;
  v11|v12|v13|v14|v15|v16)
    [ "${RECIPE}" != v11 ] && COMBINE=mean
    TRAIN=("${TRAIN[@]:0:6}"); WEIGHTS=()
    case $RECIPE in v14|v15|v16) PACK_CROSS=("${CALIB_CROSS[@]}") ;; esac
    case $RECIPE in v15|v16) PACK_EXTRA=empty ;; esac
    if [ "${RECIPE}" = v16 ]; then CALIB=("${CALIB_V16[@]}")
    else CALIB=("${CALIB_V9[@]}" "${CALIB[@]:0:4}"); fi
    CALIB_CROSS=()
    TONE=${TONE:-on}; DROP=${DROP:-'ev_ring_*,open_*'} ;;
  v9) CALIB=("${CALIB_V9[@]}" "${CALIB[@]}"); CALIB_CROSS=() ;;
  v8)  # reader-v8's own recipe (its model file's `training`): the baseline a new fit is set
       # against when both are fitted on datasets rebuilt with the same code
    TRAIN=("${TRAIN[@]:0:6}"); WEIGHTS=()
    CALIB=("${CALIB_V9[@]}" "${CALIB[@]:0:4}"); CALIB_CROSS=() ;;
  *) echo "RECIPE is v10 (the default), v16, v15, v14, v13, v12, v11, v9 or v8" >&2; exit 2 ;;
esac

names() { for e in "$@"; do echo "${e%% *}"; done; }

make_one() {  # WORK keep_photos want_dataset name seed count painter [options...]
  local work=$1 keep=$2 want=$3 name=$4 seed=$5 count=$6 painter=$7; shift 7
  local corp="$work/corp/$name" data="$work/data/$name.npz"
  if { [ "$want" = 1 ] && [ -f "$data" ]; } || { [ "$want" = 0 ] && [ -d "$corp" ]; }; then
    echo "skip $name (done)"; return
  fi
  echo "$(date +%T) $name"
  # (into a side folder, moved into place when complete: an interrupted corpus is made again,
  # never taken for a finished one)
  run rm -rf "$corp.partial"
  run "$PY" "$ROOT/scripts/make_corpus.py" --out "$corp.partial" --painter "$painter" \
      --seed "$seed" --count "$count" "$@"
  run rm -rf "$corp"
  run mv "$corp.partial" "$corp"
  if [ "$want" = 1 ]; then
    run "$PY" "$ROOT/scripts/reader_dataset.py" "$corp" --out "$data" ${TONE:+--tone "$TONE"}
    if [ "$keep" = 0 ] && [ -z "${KEEP_PHOTOS:-}" ]; then run rm -rf "$corp"; fi
  fi
}

usage() { sed -n '2,12p' "$0" >&2; exit 2; }

cmd=${1:-}; [ $# -ge 2 ] || usage
WORK=$2
case $cmd in
  corpora)
    run mkdir -p "$WORK/corp" "$WORK/data"
    for e in "${TRAIN[@]}" "${CALIB[@]}"; do make_one "$WORK" 0 1 $e; done
    for e in "${VAL[@]}"; do make_one "$WORK" 1 1 $e; done
    for e in "${CALIB_CROSS[@]}" "${PACK_CROSS[@]}"; do make_one "$WORK" 0 1 $e; done
    echo "fit ready $(date +%T)"  # (the fit needs nothing below; `validate` does)
    for e in "${VAL_PHOTOS_ONLY[@]}"; do make_one "$WORK" 1 0 $e; done
    echo "corpora done $(date +%T)"
    ;;
  fit)
    [ $# -ge 3 ] || usage
    SEED=$3; TAG=${4:-reader}
    run mkdir -p "$WORK/fits"
    args=()
    for n in $(names "${TRAIN[@]}"); do args+=(--train "$WORK/data/$n.npz"); done
    for w in "${WEIGHTS[@]+"${WEIGHTS[@]}"}"; do args+=(--weight "$WORK/data/${w%%=*}.npz=${w#*=}"); done
    for n in $(names "${VAL[@]}"); do args+=(--val "$WORK/data/$n.npz"); done
    for n in $(names "${CALIB[@]}" "${CALIB_CROSS[@]}"); do args+=(--calib "$WORK/data/$n.npz"); done
    run "$PY" "$ROOT/scripts/train_reader.py" "${args[@]}" \
      --iters 200 --leaves 6 --lr 0.2 --min-leaf 100 --l2 1 --margin 1.5 --independent --lopo \
      --by-mark --tiers 0,0.015,0.03 --tier-only written,crossed --seed "$SEED" \
      --drop "${DROP:-ev_ring_*}" --dump "$WORK/fits/rule_rows_${TAG}_s$SEED.npz" \
      --out "$WORK/fits/$TAG-s$SEED.json"
    ;;
  pack)  # WORK TAG ID OUT: the three fits of `fit` (seeds 0, 1, 2) as one model file
    [ $# -ge 5 ] || usage
    TAG=$3; ID=$4; OUT=$5
    args=(--id "$ID" --out "$OUT")
    if [ "$COMBINE" = mean ]; then
      args+=(--combine mean --tiers "${PACK_TIERS:-0,0.015,0.03}")
      for n in $(names "${CALIB[@]}" "${CALIB_CROSS[@]}"); do args+=(--calib "$WORK/data/$n.npz"); done
      if [ ${#PACK_CROSS[@]} -gt 0 ]; then
        for n in $(names "${PACK_CROSS[@]}"); do args+=(--cross-calib "$WORK/data/$n.npz"); done
        args+=(--own-tiers "${PACK_OWN_TIERS:-0.05,0.08}")
        [ -n "$PACK_EXTRA" ] && args+=(--extra-tier-marks "$PACK_EXTRA")
      fi
    fi
    run "$PY" "$ROOT/scripts/pack_committee.py" "${args[@]}" \
      "$WORK/fits/$TAG-s0.json" "$WORK/fits/$TAG-s1.json" "$WORK/fits/$TAG-s2.json"
    ;;
  validate)
    [ $# -ge 4 ] || usage
    MODEL=$3; TAG=$4
    for n in $(names "${VAL[@]}" "${VAL_PHOTOS_ONLY[@]}"); do
      run "$(dirname "$PY")/sheetcheck" eval "$WORK/corp/$n" --reader "$MODEL" \
          --json "$WORK/ev_${TAG}_$n.json"
    done
    ;;
  *) usage ;;
esac
