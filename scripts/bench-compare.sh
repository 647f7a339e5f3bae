#!/usr/bin/env bash
# Runs the same `pagoda bench` workload against pagoda and against another OpenAI-compatible
# server, and prints the two side by side with ratios (pagoda / other).
#
#   scripts/bench-compare.sh --other http://127.0.0.1:8081 [--pagoda http://127.0.0.1:8080]
#                            [--other-model NAME] [bench options...]
#
# Every other option goes to both runs (e.g. --users 16 --requests 64 --input-len 128
# --output-len 128, or --sweep users=1,4,16). Reports land in bench-compare/ as JSON and HTML.
set -euo pipefail
cd "$(dirname "$0")/.."
pagoda_bin=${PAGODA_BIN:-build/pagoda}
pagoda_url=http://127.0.0.1:8080
other_url=""
other_model=""
args=()
while (($#)); do
  case "$1" in
    --pagoda) pagoda_url=$2; shift 2 ;;
    --other) other_url=$2; shift 2 ;;
    --other-model) other_model=$2; shift 2 ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done
[ -n "$other_url" ] || { echo "bench-compare: --other URL is required" >&2; exit 2; }
mkdir -p bench-compare

run() {  # name url [extra args]
  local name=$1 url=$2; shift 2
  echo "== $name ($url)" >&2
  # Exit 3 means "finished, some requests failed": still worth comparing.
  "$pagoda_bin" bench --url "$url" "${args[@]}" "$@" \
    --json "bench-compare/$name.json" --html "bench-compare/$name.html" || [ $? -eq 3 ]
}
run pagoda "$pagoda_url"
if [ -n "$other_model" ]; then run other "$other_url" --model "$other_model"; else run other "$other_url"; fi

/usr/bin/python3 - bench-compare/pagoda.json bench-compare/other.json <<'PY'
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:3])
rows = [("req/s", "request_throughput", None), ("out tok/s", "output_throughput", None),
        ("TTFT p50 ms", "ttft_s", "p50"), ("TTFT p99 ms", "ttft_s", "p99"),
        ("ITL p50 ms", "itl_s", "p50"), ("TPOT p50 ms", "tpot_s", "p50"), ("E2E p50 ms", "e2e_s", "p50")]
for pa, pb in zip(a["points"], b["points"]):
    load = f'{pa["rate"]} req/s' if pa["rate"] else f'{pa["users"]} users'
    print(f"\n{load}: pagoda {pa['succeeded']} ok / {pa['failed']} failed, other {pb['succeeded']} ok / {pb['failed']} failed")
    print(f"{'metric':<14}{'pagoda':>12}{'other':>12}{'ratio':>9}")
    for label, key, sub in rows:
        va = pa[key][sub] if sub else pa[key]
        vb = pb[key][sub] if sub else pb[key]
        scale = 1000.0 if sub else 1.0
        ratio = f"{va / vb:.2f}x" if vb else "-"
        print(f"{label:<14}{va * scale:>12.2f}{vb * scale:>12.2f}{ratio:>9}")
print("\n(ratio = pagoda / other: higher is better for throughput, lower for latency)")
PY
