#!/usr/bin/env bash
# KV cache element types on the CPU: decode attention time over long contexts for f16, q8_0
# and f32 (tests/bench/bench_kv_attention.cpp: 32 query / 8 KV heads of 128, one sequence,
# types alternating within each round, medians), at 1 and 2 threads. Run it on a quiet host:
# the figures are per-call times of a few milliseconds.
#   scripts/bench_kv_cache.sh [build-dir] [rounds]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rounds=${2:-7}
cmake --build "$build" -j2 --target bench_kv_attention >/dev/null
lscpu | grep -m1 'Model name' || true
for threads in 1 2; do
  "$build/tests/bench_kv_attention" --threads "$threads" --rounds "$rounds"
done
