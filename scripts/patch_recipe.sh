#!/usr/bin/env bash
# Remake the patch reader (vision.patch_reader) from its seeds: session 45's patch-v1 weights,
# with the thresholds of patch-v1.3 (session 48: patch-v1.2's, session 47, with the corrections'
# chosen on the rows of every photo, as corrections are no longer held back by a check's flag;
# session 46's patch-v1.1 chose them on the first three CALIB datasets alone). The bundled
# patch-v1.3 is patch-v1's network recalibrated on the datasets below:
# `train_patch_reader.py --recalibrate patch-v1.2.npz --calib ... --test ... --id patch-v1.3`;
# a fit made now chooses the same kinds of thresholds on them.
#
#   scripts/patch_recipe.sh WORK          # corpora, datasets and the fit (~80 min on two cores)
#   DRY_RUN=1 scripts/patch_recipe.sh WORK   # print the commands instead of running them
#
# Fit on dev seeds of the training painters (default and varied, some corpora crossed out at
# rate 0.3); thresholds chosen on the spent default corpora 5300000, 5400000, 5700000 and
# 5800000 (the even ones crossed out) and the dev corpora 98000, 41000-45000 (varied ones
# crossed out); the held-out painter's spent corpora 1550000 and 1560000 (crossed out)
# measured only. Needs PyTorch for the fit (`pip install -e '.[train-patch]'`). The model goes
# to WORK/patch-v1.3.npz; copy it to calibration/models/ to ship it. A corpus or dataset that
# exists is skipped, so an interrupted run picks up.
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
  "d41000 41000 300 default"
  "xv42000 42000 240 varied --cross-rate 0.3"
  "f5700000 5700000 300 default"
  "x5800000 5800000 120 default --cross-rate 0.3"
  "xv43000 43000 300 varied --cross-rate 0.3"
  "xv44000 44000 300 varied --cross-rate 0.3"
  "d45000 45000 300 default"
)
TEST=(
  "h1550000 1550000 120 heldout"
  "hx1560000 1560000 120 heldout --cross-rate 0.3"
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
  --out "$WORK/patch-v1.3.npz" --id patch-v1.3 --epochs 10 --seed 0
