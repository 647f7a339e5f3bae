#!/usr/bin/env bash
# Forced tokens under a JSON Schema with many fixed keys: 16 concurrent constrained requests
# through `pagoda serve` and `pagoda bench` on the TinyLlama-1.1B shape in Q8_0, one server with
# --forced-tokens on and one with off (started together, benchmarked in turn: on, off, on, ...).
# Prints per run and as medians: output tok/s, request latency p50, and the engine steps and
# forced tokens the run took (from /metrics). On a CPU the forced tokens cost the same model
# work (as rows of a chunk) in far fewer steps: what they save is reading the weights once per
# step. 2-vCPU host under other builds (load ~13), 3 alternating runs: 21.4 vs 17.0 out tok/s
# (1.26x median, 1.15-1.44 per pair), 12-15 vs 161-179 engine steps, 2398 of 2560 forced; the
# same host with nothing else running (after the AVX-512 Rows16 layout), twice: 358.8 vs 191.0
# and 337.8 vs 181.4 out tok/s (1.88x, 1.86x).
#
#   scripts/bench_forced_tokens.sh [build-dir]    env: MODEL=path THREADS=2 USERS=16 N=160 RUNS=3
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
MODEL=${MODEL:-/tmp/pagoda-tinyllama-1.1b-q8_0.gguf}
THREADS=${THREADS:-2}
USERS=${USERS:-16}
N=${N:-160}
RUNS=${RUNS:-3}
PORT_ON=${PORT_ON:-18941}
PORT_OFF=${PORT_OFF:-18942}
PY=/usr/bin/python3

if [ ! -f "$MODEL" ]; then
  echo "writing $MODEL (random weights, TinyLlama-1.1B shape, q8_0)" >&2
  "$BIN" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
fi
work=$(mktemp -d)
servers=()
trap 'for p in "${servers[@]}"; do kill "$p" 2>/dev/null; done; rm -rf "$work"' EXIT
for mode in on off; do
  port=$PORT_ON; [ "$mode" = off ] && port=$PORT_OFF
  "$BIN" serve --model "$MODEL" --threads "$THREADS" --port "$port" --max-seqs "$USERS" \
    --ctx-size 1024 --forced-tokens "$mode" > "$work/serve-$mode.log" 2>&1 &
  servers+=($!)
done
for port in $PORT_ON $PORT_OFF; do
  for _ in $(seq 1 180); do
    curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 1
  done
done

# A record with many fixed keys and short values: most of the output is keys and punctuation.
$PY - "$work" "$USERS" "$N" <<'PYEOF'
import json, sys
work, users, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
props = {
    "customer_identifier": {"type": "integer", "minimum": 0, "maximum": 99999},
    "account_is_active": {"type": "boolean"},
    "subscription_level": {"enum": ["basic", "premium", "enterprise"]},
    "preferred_contact_method": {"enum": ["email", "phone", "mail"]},
    "number_of_open_tickets": {"type": "integer", "minimum": 0, "maximum": 99},
    "has_outstanding_balance": {"type": "boolean"},
    "region_code": {"type": "string", "maxLength": 6},
    "newsletter_opt_in": {"type": "boolean"},
    "record_schema_version": {"const": "2024-06-customer-record"},
}
schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
with open(f"{work}/requests.jsonl", "w") as out:
    for i in range(users):
        out.write(json.dumps({"prompt": f"Customer record {i}, as JSON:", "max_tokens": n, "temperature": 0.8,
                              "seed": i, "response_format": {"type": "json_schema",
                              "json_schema": {"name": "record", "schema": schema}}}) + "\n")
PYEOF

metric() {  # metric PORT NAME: the counter's value
  curl -sf "http://127.0.0.1:$1/metrics" | awk -v n="$2" '$1 ~ "^"n"({|$)" {v=$2} END {print v+0}'
}
for run in $(seq 1 "$RUNS"); do
  for mode in on off; do
    port=$PORT_ON; [ "$mode" = off ] && port=$PORT_OFF
    s0=$(metric "$port" pagoda_engine_steps_total); f0=$(metric "$port" pagoda_forced_tokens_total)
    g0=$(metric "$port" pagoda_generation_tokens_total)
    "$BIN" bench --url "http://127.0.0.1:$port" --endpoint completions --users "$USERS" \
      --requests "$USERS" --prompts "$work/requests.jsonl" --no-progress --json "$work/$mode-$run.json" >/dev/null 2>&1
    s1=$(metric "$port" pagoda_engine_steps_total); f1=$(metric "$port" pagoda_forced_tokens_total)
    g1=$(metric "$port" pagoda_generation_tokens_total)
    echo "$((s1 - s0)) $((f1 - f0)) $((g1 - g0))" > "$work/$mode-$run.steps"
  done
done

PYTHONPATH="$(dirname "$0")" $PY - "$work" "$RUNS" <<'PYEOF'
import json, statistics, sys
from bench_json import run_summary
work, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for mode in ("on", "off"):
    s = [run_summary(f"{work}/{mode}-{r}.json") for r in range(1, runs + 1)]
    steps = [list(map(int, open(f"{work}/{mode}-{r}.steps").read().split())) for r in range(1, runs + 1)]
    tput = [x["output_throughput"] for x in s]
    lat = [x["e2e_s"]["p50"] for x in s]
    fails = sum(x["failed"] for x in s)
    rows[mode] = (statistics.median(tput), statistics.median(st[0] for st in steps))
    print(f"forced {mode:3s}  out tok/s {', '.join(f'{v:.1f}' for v in tput):24s} median {rows[mode][0]:.1f}"
          f"  request time p50 s {', '.join(f'{v:.1f}' for v in lat)}"
          f"  steps {', '.join(str(st[0]) for st in steps)}  forced/generated "
          f"{', '.join(f'{st[1]}/{st[2]}' for st in steps)}  failed {fails}")
print(f"on / off: throughput {rows['on'][0] / rows['off'][0]:.3f}, engine steps {rows['on'][1] / rows['off'][1]:.3f}")
PYEOF
