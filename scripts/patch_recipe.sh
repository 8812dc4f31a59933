#!/usr/bin/env bash
# Remake the patch reader (vision.patch_reader) from its seeds: patch-v3 (session 50), the
# network of patch-v1 (session 45) fitted on three times its data (the four FIT corpora of
# session 45, four more of the same kinds of session 48, 46000-49000, and four of session 49,
# 51000-54000), for 8 epochs, its thresholds chosen by the rules of sessions 45-49 on the CALIB
# datasets. patch-v2 (session 48) was the same recipe on the first eight FIT corpora, 10
# epochs; patch-v1.1 to v1.3 were patch-v1's weights with thresholds chosen again
# (`train_patch_reader.py --recalibrate`).
#
#   scripts/patch_recipe.sh WORK          # corpora, datasets and the fit (~2.5 h on two cores; the fit ~25 min)
#   DRY_RUN=1 scripts/patch_recipe.sh WORK   # print the commands instead of running them
#
# Fit on dev seeds of the training painters (default and varied, some corpora crossed out at
# rate 0.3); thresholds chosen on the spent default corpora 5300000, 5400000, 5700000 and
# 5800000 (the even ones crossed out) and the dev corpora 98000, 41000-45000 (varied ones
# crossed out); the held-out painter's spent corpora 1550000 and 1560000 (crossed out)
# measured only. Needs PyTorch for the fit (`pip install -e '.[train-patch]'`). The model goes
# to WORK/patch-v3.npz; copy it to calibration/models/ to ship it. A corpus or dataset that
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
  "d46000 46000 360 default"
  "v47000 47000 360 varied"
  "xd48000 48000 240 default --cross-rate 0.3"
  "xv49000 49000 300 varied --cross-rate 0.3"
  "d51000 51000 360 default"
  "v52000 52000 360 varied"
  "xd53000 53000 240 default --cross-rate 0.3"
  "xv54000 54000 300 varied --cross-rate 0.3"
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
  --out "$WORK/patch-v3.npz" --id patch-v3 --epochs 8 --seed 0
