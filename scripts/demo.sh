#!/usr/bin/env bash
# Sets everything up and checks a bundled sample photo end to end (the README's first command).
# Usage: bash scripts/demo.sh [PHOTO]   (default: the first sample photo listed below)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
mkdir -p out
photo=${1:-sample_photos/crypts-2-typical-s2.jpg}
[ -f "$photo" ] || photo=$(ls sample_photos/*.jpg | head -n 1)
echo "== sheetcheck check $photo" >&2
set +e
.venv/bin/sheetcheck check "$photo" --overlay out/demo-overlay.png
rc=$?
set -e
case $rc in
  0|3|4) echo "== verdict exit code $rc (0 OK, 3 DISCREPANCY, 4 NEEDS REVIEW); overlay: out/demo-overlay.png" >&2; exit 0 ;;
  *) exit $rc ;;
esac
