#!/usr/bin/env bash
# Runs every test (unit, e2e; gpu tests skip without a device). Expects scripts/setup.sh first.
# Tests that need ../shared/testdata skip without it; the reasons are printed after CTest's summary.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${PAGODA_BUILD_DIR:-build}
cmake --build "$build_dir" -j"$(nproc)"
# (Again when package-lock.json changed since the last install: new client packages.)
node_dir=tests/e2e/node
if [ -f $node_dir/package.json ] && { [ ! -d $node_dir/node_modules ] ||
    [ $node_dir/package-lock.json -nt $node_dir/node_modules/.package-lock.json ]; }; then
  (cd tests/e2e/node && npm ci --no-audit --no-fund --loglevel=error)
fi
cd "$build_dir"
status=0
ctest --output-on-failure -j"${PAGODA_TEST_JOBS:-2}" "$@" || status=$?
# CTest names the skipped tests but not why: print the "skipped: ..." lines they wrote.
log=Testing/Temporary/LastTest.log
if grep -q '^ *skipped: ' "$log" 2>/dev/null; then
  echo "Why tests were skipped:"
  awk '/^[0-9]+\/[0-9]+ Testing: /{test=$3} /^ *skipped: /{sub(/^ */, ""); print "  " test ": " $0}' "$log" | sort -u
fi
exit "$status"
