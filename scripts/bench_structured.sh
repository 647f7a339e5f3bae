#!/usr/bin/env bash
# Structured output's throughput check: 16 concurrent requests decoding under a JSON Schema
# (response_format) against the same 16 requests unconstrained, through `pagoda serve` and
# `pagoda bench`, on the TinyLlama-1.1B shape in Q8_0 with 2 threads. Runs alternate
# (free, constrained, free, ...) and the medians are printed: output tok/s and TPOT p50.
#
#   scripts/bench_structured.sh [build-dir]     env: MODEL=path THREADS=2 USERS=16 N=64 RUNS=3
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
MODEL=${MODEL:-/tmp/pagoda-tinyllama-1.1b-q8_0.gguf}
THREADS=${THREADS:-2}
USERS=${USERS:-16}
N=${N:-64}
RUNS=${RUNS:-3}
PORT=${PORT:-18931}
PY=/usr/bin/python3

if [ ! -f "$MODEL" ]; then
  echo "writing $MODEL (random weights, TinyLlama-1.1B shape, q8_0)" >&2
  "$BIN" make-model --preset tinyllama-1.1b --type q8_0 --output "$MODEL" --quiet
fi
work=$(mktemp -d)
"$BIN" serve --model "$MODEL" --threads "$THREADS" --port "$PORT" --max-seqs "$USERS" \
  --ctx-size 1024 > "$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 1
done

# The same prompts both ways; the constrained ones carry a schema whose strings leave the
# random-weight model room to run (the decode, not an early end, is what is compared).
$PY - "$work" "$USERS" "$N" <<'PYEOF'
import json, sys
work, users, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
schema = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 400},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 8},
    "score": {"type": "integer", "minimum": 0, "maximum": 100},
    "kind": {"enum": ["story", "poem", "note"]}},
  "required": ["title", "tags", "score", "kind"], "additionalProperties": False}
with open(f"{work}/free.jsonl", "w") as free, open(f"{work}/constrained.jsonl", "w") as con:
    for i in range(users):
        line = {"prompt": f"Request {i}: describe the weather in a short story, as JSON.", "max_tokens": n,
                "temperature": 0.8, "seed": i}
        free.write(json.dumps(line) + "\n")
        line["response_format"] = {"type": "json_schema", "json_schema": {"name": "doc", "schema": schema}}
        con.write(json.dumps(line) + "\n")
PYEOF

for run in $(seq 1 "$RUNS"); do
  for kind in free constrained; do
    "$BIN" bench --url "http://127.0.0.1:$PORT" --endpoint completions --users "$USERS" \
      --requests "$USERS" --prompts "$work/$kind.jsonl" --no-progress --json "$work/$kind-$run.json" \
      >/dev/null 2>&1 || "$BIN" bench --url "http://127.0.0.1:$PORT" --endpoint completions \
      --users "$USERS" --requests "$USERS" --prompts "$work/$kind.jsonl" --json "$work/$kind-$run.json" >/dev/null
  done
done

PYTHONPATH="$(dirname "$0")" $PY - "$work" "$RUNS" <<'PYEOF'
import json, statistics, sys
from bench_json import run_summary
work, runs = sys.argv[1], int(sys.argv[2])
rows = {}
for kind in ("free", "constrained"):
    s = [run_summary(f"{work}/{kind}-{r}.json") for r in range(1, runs + 1)]
    tput = [x["output_throughput"] for x in s]
    tpot = [x["tpot_s"]["p50"] * 1000 for x in s]
    fails = sum(x["failed"] for x in s)
    rows[kind] = (statistics.median(tput), statistics.median(tpot))
    print(f"{kind:12s} out tok/s {', '.join(f'{v:.1f}' for v in tput):30s} median {rows[kind][0]:.1f}"
          f"   TPOT p50 ms {', '.join(f'{v:.1f}' for v in tpot):24s} median {rows[kind][1]:.1f}   failed {fails}")
print(f"constrained / free: throughput {rows['constrained'][0] / rows['free'][0]:.3f}, "
      f"TPOT {rows['constrained'][1] / rows['free'][1]:.3f}")
PYEOF
