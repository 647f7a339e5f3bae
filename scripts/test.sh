#!/usr/bin/env bash
# Runs every test (unit, e2e; gpu tests skip without a device). Expects scripts/setup.sh first.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${PAGODA_BUILD_DIR:-build}
cmake --build "$build_dir" -j"$(nproc)"
if [ -f tests/e2e/node/package.json ] && [ ! -d tests/e2e/node/node_modules ]; then
  (cd tests/e2e/node && npm ci --no-audit --no-fund --loglevel=error)
fi
cd "$build_dir"
ctest --output-on-failure -j"${PAGODA_TEST_JOBS:-2}" "$@"
