#!/usr/bin/env bash
# Creates .venv (if missing) and installs sheetcheck with its test extras into it.
# With --browser, also makes sure Debian's Chromium is installed (for the page's browser test).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
if [ "${1:-}" = "--browser" ] && ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing Debian's chromium for the browser test..." >&2
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    echo "warning: chromium is not installed and cannot be installed here (need root and apt-get);" \
         "the browser test will be skipped (it fails under CI=true)." >&2
  fi
fi
