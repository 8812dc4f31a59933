#!/usr/bin/env bash
# Sets everything up and runs the whole test suite (the README's test command; CI runs it too).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
  echo "pytest collected no tests: that is a failure" >&2
  exit 1
fi
exit "$rc"
