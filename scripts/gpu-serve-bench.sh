#!/usr/bin/env bash
# The server end to end on a GPU: `pagoda serve --device cuda` on one model, loaded by
# `pagoda bench` over loopback at 1, 16, 64 and 256 simulated users (prompts of ~512 tokens,
# 256 output tokens, ignore_eos), then 64 users with every request constrained to a JSON schema
# beside 64 unconstrained ones (the cost of structured output at batch 64). Each point runs for
# a fixed time (closed loop, new requests stop after SERVE_POINT_S seconds; those in flight
# finish). Prints the bench reports; the tok/s at 256 users is the figure to hold against the
# engine's own step rate at batch 256 (bench_cuda_decode in the same lease).
#
#   scripts/gpu-serve-bench.sh PAGODA_BIN MODEL.gguf OUT_DIR
#   env: SERVE_USERS (default 1,16,64,256), SERVE_POINT_S (default 15), SERVE_PORT (default 18480)
#
# Written on a machine without a GPU: the same flow runs there with --device cpu (SERVE_DEVICE=cpu,
# small SERVE_USERS), which is how it was checked.
set -euo pipefail
source "$(dirname "$0")/serve-lib.sh"
bin=$1 model=$2 out=$3
users=${SERVE_USERS:-1,16,64,256}
point_s=${SERVE_POINT_S:-15}
port=${SERVE_PORT:-18480}
device=${SERVE_DEVICE:-cuda}
max_users=$(tr ',' '\n' <<<"$users" | sort -n | tail -1)
mkdir -p "$out"
url=http://127.0.0.1:$port

"$bin" serve --model "$model" --device "$device" --port "$port" --max-seqs "$max_users" --ctx-size 1024 \
  --max-batch-tokens 8192 >"$out/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait $server 2>/dev/null || true' EXIT
wait_healthy "$url" $server "$out/serve.log"

# A random-weight model's vocabulary is byte-level: 100 words of the bench's text are about 512
# tokens (usage in the report says how many exactly).
common=(--url "$url" --endpoint completions --input-len 100 --output-len 256 --duration "$point_s")
echo "== unconstrained, users $users"
"$bin" bench "${common[@]}" --sweep "users=$users" --json "$out/serve-sweep.json" 2>>"$out/bench-progress.log"

# Constrained at 64 users: the same prompts with a JSON schema of a few fixed keys and free
# values, then the unconstrained point again (alternating, so drift shows).
prompts=$out/constrained.jsonl
python3 - "$prompts" <<'EOF'
import json, sys
schema = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 40}, "age": {"type": "integer"},
    "tags": {"type": "array", "items": {"type": "string", "maxLength": 12}, "maxItems": 8},
    "notes": {"type": "string"}}, "required": ["name", "age", "tags", "notes"]}
with open(sys.argv[1], "w") as f:
    for i in range(64):
        f.write(json.dumps({"prompt": f"Record {i}: describe a person as JSON. " + "word " * 90,
                            "response_format": {"type": "json_schema",
                                                "json_schema": {"name": "person", "schema": schema}}}) + "\n")
EOF
for run in 1 2; do
  echo "== constrained (json_schema), 64 users, run $run"
  "$bin" bench "${common[@]}" --users 64 --prompts "$prompts" 2>>"$out/bench-progress.log"
  echo "== unconstrained, 64 users, run $run"
  "$bin" bench "${common[@]}" --users 64 2>>"$out/bench-progress.log"
done
