#!/usr/bin/env bash
# Remake the patch reader (vision.patch_reader) from its seeds: session 45's patch-v1, which
# session 46 recalibrated as patch-v1.1 (same weights; the thresholds that correct a flagged
# mark added: `train_patch_reader.py --recalibrate patch-v1.npz --calib ... --test ... --id
# patch-v1.1`, the same --calib and --test as below). A fit made now chooses both.
#
#   scripts/patch_recipe.sh WORK          # corpora, datasets and the fit (~50 min on two cores)
#   DRY_RUN=1 scripts/patch_recipe.sh WORK   # print the commands instead of running them
#
# Fit on dev seeds of the training painters (default and varied, some corpora crossed out at
# rate 0.3); thresholds chosen on the spent default corpora 5300000 and 5400000 (crossed out)
# and the dev varied corpus 98000 (crossed out); the held-out painter's spent corpora 1510000
# and 1520000 (crossed out) measured only. Needs PyTorch for the fit (`pip install -e
# '.[train-patch]'`). The model goes to WORK/patch-v1.1.npz; copy it to calibration/models/
# to ship it. A corpus or dataset that exists is skipped, so an interrupted run picks up.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
WORK="${1:?usage: patch_recipe.sh WORK}"
run() { if [ -n "${DRY_RUN:-}" ]; then echo "$*"; else "$@"; fi; }

# name seed count painter [make_corpus options]
FIT=(
  "d33000 33000 360 default"
  "v97000 97000 360 varied"
  "xd36000 36000 240 default --cross-rate 0.3"
  "xcal94000 94000 300 varied --cross-rate 0.3"
)
CALIB=(
  "f5300000 5300000 300 default"
  "x5400000 5400000 120 default --cross-rate 0.3"
  "xv98000 98000 240 varied --cross-rate 0.3"
)
TEST=(
  "h1510000 1510000 120 heldout"
  "hx1520000 1520000 120 heldout --cross-rate 0.3"
)

dataset() {  # name seed count painter [options...]: WORK/corp/NAME, then WORK/data/NAME.npz
  local name=$1 seed=$2 count=$3 painter=$4
  shift 4
  if [ ! -e "$WORK/data/$name.npz" ]; then
    if [ ! -d "$WORK/corp/$name" ]; then
      run "$PY" "$ROOT/scripts/make_corpus.py" --out "$WORK/corp/$name" --seed "$seed" \
        --count "$count" --painter "$painter" --workers 2 "$@"
    fi
    run "$PY" "$ROOT/scripts/patch_dataset.py" "$WORK/corp/$name" --out "$WORK/data/$name.npz"
  fi
}

names() { for e in "$@"; do set -- $e; echo "$WORK/data/$1.npz"; done; }

for e in "${FIT[@]}" "${CALIB[@]}" "${TEST[@]}"; do
  # shellcheck disable=SC2086
  dataset $e
done
# shellcheck disable=SC2046
run "$PY" "$ROOT/scripts/train_patch_reader.py" --fit $(names "${FIT[@]}") \
  --calib $(names "${CALIB[@]}") --test $(names "${TEST[@]}") \
  --out "$WORK/patch-v1.1.npz" --id patch-v1.1 --epochs 10 --seed 0
