#!/usr/bin/env bash
# The persistent prefix cache's benchmark: TTFT of a request with a long shared prefix (2,000 tokens by
# default) on a freshly started server, cold (empty --kv-cache-dir) vs after a restart on the
# same folder (the prefix restored from disk), plus a request sharing only the prefix (a new
# suffix) on the restarted server. Checks that the restarted server's greedy output equals the
# cold one and reports cached_tokens, start-up times (process start to /health 200) and the
# file's size. Runs alternate cold / warm RUNS times; medians are printed at the end.
#
#   scripts/bench_kv_persist.sh [build-dir]
#   env: MODEL=path THREADS=2 PREFIX=2000 SUFFIX=16 MAX_TOKENS=16 RUNS=3 PORT=(random)
#        EXTRA='' (more serve flags, e.g. --kv-host-memory 1GiB)  LOG_DIR=dir (keeps server logs)
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
MODEL=${MODEL:-/tmp/pagoda-persist-4x512-q8_0-v2.gguf}
THREADS=${THREADS:-2}
PREFIX=${PREFIX:-2000}
SUFFIX=${SUFFIX:-16}
MAX_TOKENS=${MAX_TOKENS:-16}
RUNS=${RUNS:-3}
PORT=${PORT:-$((20000 + RANDOM % 20000))}
EXTRA=${EXTRA:-}
PY=/usr/bin/python3

[ -f "$MODEL" ] || "$BIN" make-model --layers 4 --dim 512 --ff 1536 --heads 8 --kv-heads 4 --ctx 4096 \
  --type q8_0 --output "$MODEL" --quiet  # random weights, the built-in byte vocabulary
work=$(mktemp -d)
server=
trap '[ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT

# start NAME DIR: starts a server on a fresh port (another one if that is taken), waits for
# /health; the start-up seconds go to $work/up (not printed: a $(...) subshell would lose
# $server and $PORT).
start() {
  local t0 t1 attempt
  for attempt in 1 2 3 4 5; do
    PORT=$((PORT + 1))
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086  # the extra flags are words
    "$BIN" serve --model "$MODEL" --threads "$THREADS" --port "$PORT" --max-seqs 4 --ctx-size 4096 \
      --kv-cache-dir "$2" $EXTRA > "$work/serve-$1.log" 2>&1 &
    server=$!
    for _ in $(seq 1 1200); do
      if ! kill -0 "$server" 2>/dev/null; then
        grep -q "cannot listen" "$work/serve-$1.log" && continue 2
        cat "$work/serve-$1.log" >&2
        exit 1
      fi
      if curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1; then
        t1=$(date +%s.%N)
        awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f\n", b - a }' > "$work/up"
        return
      fi
      sleep 0.05
    done
    echo "the server did not get ready" >&2
    exit 1
  done
  echo "no free port" >&2
  exit 1
}
stop() {
  kill -TERM "$server"
  wait "$server" 2>/dev/null || true
  server=
}
# ask SUFFIX_SEED: one streamed request; prints {"ttft_ms", "cached", "text"} as JSON.
ask() {
  $PY - "$PORT" "$PREFIX" "$SUFFIX" "$MAX_TOKENS" "$1" <<'PYEOF'
import http.client, json, random, sys, time
port, prefix, suffix, max_tokens, seed = map(int, sys.argv[1:])
shared = random.Random(1234)
prompt = [shared.randrange(3, 256) for _ in range(prefix)]
tail = random.Random(seed)
prompt += [tail.randrange(3, 256) for _ in range(suffix)]
body = {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True,
        "stream_options": {"include_usage": True}}
c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
t0 = time.monotonic()
c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
r = c.getresponse()
if r.status != 200:
    raise SystemExit(f"HTTP {r.status}: {r.read()[:200]!r}")
first, text, cached = None, "", None
while True:
    line = r.readline()
    if not line or line.strip() == b"data: [DONE]":
        break
    if not line.startswith(b"data: "):
        continue
    chunk = json.loads(line[6:])
    if chunk.get("choices"):
        if first is None:
            first = time.monotonic()
        text += chunk["choices"][0].get("text", "")
    if chunk.get("usage"):
        cached = chunk["usage"].get("prompt_tokens_details", {}).get("cached_tokens")
print(json.dumps({"ttft_ms": (first - t0) * 1e3, "cached": cached, "text": text}))
PYEOF
}

for run in $(seq 1 "$RUNS"); do
  dir="$work/kv-$run"
  start "cold-$run" "$dir"
  up=$(cat "$work/up")
  cold=$(ask 1)
  stop
  size=$(stat -c %s "$dir/prefix-cache.pgkv" 2>/dev/null || echo 0)
  start "warm-$run" "$dir"
  up2=$(cat "$work/up")
  warm=$(ask 1)
  other=$(ask 2)
  stop
  echo "{\"run\": $run, \"start_cold_s\": $up, \"start_warm_s\": $up2, \"file_bytes\": $size, \"cold\": $cold, \"warm\": $warm, \"other\": $other}" >> "$work/results.jsonl"
  [ -n "${LOG_DIR:-}" ] && mkdir -p "$LOG_DIR" && cp "$work"/serve-*-"$run".log "$LOG_DIR/"
done

$PY - "$work/results.jsonl" "$PREFIX" "$SUFFIX" <<'PYEOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"prefix {sys.argv[2]} + suffix {sys.argv[3]} tokens; {len(rows)} runs (cold start, then restart on the same --kv-cache-dir)")
print(f"{'run':>3} {'TTFT cold ms':>13} {'TTFT restart ms':>16} {'cached':>7} {'same output':>12} {'new suffix ms':>14} {'cached':>7} {'start cold/warm s':>18} {'file MiB':>9}")
for r in rows:
    c, w, o = r["cold"], r["warm"], r["other"]
    print(f"{r['run']:>3} {c['ttft_ms']:>13.0f} {w['ttft_ms']:>16.0f} {w['cached']:>7} {str(c['text'] == w['text']):>12} "
          f"{o['ttft_ms']:>14.0f} {o['cached']:>7} {r['start_cold_s']:>8.2f}/{r['start_warm_s']:<8.2f} {r['file_bytes'] / 2**20:>9.1f}")
med = lambda k, f: statistics.median(f(r)[k] for r in rows)
print(f"median TTFT: cold {med('ttft_ms', lambda r: r['cold']):.0f} ms, restart {med('ttft_ms', lambda r: r['warm']):.0f} ms, "
      f"new suffix after restart {med('ttft_ms', lambda r: r['other']):.0f} ms; "
      f"outputs identical in {sum(r['cold']['text'] == r['warm']['text'] for r in rows)}/{len(rows)} runs")
if not all(r['cold']['text'] == r['warm']['text'] for r in rows):
    sys.exit(1)
PYEOF
