#!/usr/bin/env bash
# The stall-free prefill benchmark: 12 streams decode on a 4-layer dim-512 Q8_0 random
# model, then one 3,900-token prompt arrives. Reported per server setting: the streams'
# inter-token latency (p50 / p99 / max) before the long prompt and while it is prefilled, the
# ratio of the two p99s (the target: <= 2 at default settings) and the long prompt's TTFT.
# Each setting gets a fresh `pagoda serve`; by default the defaults are compared with the old
# behaviour (no step-time target: --max-step-ms off, chunks of --max-batch-tokens 2048).
#
#   scripts/bench_prefill_stall.sh [build-dir]
#   env: MODEL=path THREADS=2 STREAMS=12 LONG=3900 BEFORE_S=8 RUNS=1 PORT=18941
#        SETTINGS='default:|old:--max-step-ms off'   (name:extra serve flags, '|'-separated)
#        LOG_DIR=dir (keeps each server's log there)
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
MODEL=${MODEL:-/tmp/pagoda-prefill-4x512-q8_0.gguf}
THREADS=${THREADS:-2}
STREAMS=${STREAMS:-12}
LONG=${LONG:-3900}
BEFORE_S=${BEFORE_S:-8}
RUNS=${RUNS:-1}
PORT=${PORT:-18941}
SETTINGS=${SETTINGS:-'default:|old:--max-step-ms off'}
PY=/usr/bin/python3

if [ ! -f "$MODEL" ]; then
  echo "writing $MODEL (random weights, 4 layers, dim 512, q8_0)" >&2
  "$BIN" make-model --layers 4 --dim 512 --ff 1536 --heads 8 --kv-heads 4 --ctx 8192 \
    --vocab-size 32000 --type q8_0 --output "$MODEL" --quiet
fi
work=$(mktemp -d)
server=
cleanup() { [ -n "$server" ] && kill "$server" 2>/dev/null; wait 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

IFS='|' read -ra settings <<< "$SETTINGS"
for run in $(seq 1 "$RUNS"); do
  for setting in "${settings[@]}"; do
    name=${setting%%:*}
    flags=${setting#*:}
    # shellcheck disable=SC2086  # the extra flags are words
    "$BIN" serve --model "$MODEL" --threads "$THREADS" --port "$PORT" --max-seqs 16 \
      --ctx-size 8192 $flags > "$work/serve-$name-$run.log" 2>&1 &
    server=$!
    for _ in $(seq 1 120); do
      curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
      sleep 0.5
    done
    $PY - "$PORT" "$STREAMS" "$LONG" "$BEFORE_S" "$name" "$run" >> "$work/results.jsonl" <<'PYEOF'
import http.client, json, random, sys, threading, time

port, streams, long_len, before_s = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
name, run = sys.argv[5], int(sys.argv[6])
stop = threading.Event()

def stream(body, times):
    """POSTs a streaming completion; appends the arrival time of every chunk with text or a finish."""
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
    c.request("POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        raise SystemExit(f"HTTP {r.status}: {r.read()[:200]!r}")
    while not stop.is_set():
        line = r.readline()
        if not line or line.strip() == b"data: [DONE]":
            break
        if line.startswith(b"data: "):
            times.append(time.monotonic())
            if "max_tokens" in body and body["max_tokens"] == 1:
                break
    c.close()

rng = random.Random(run)
decode_times = [[] for _ in range(streams)]
threads = []
for i in range(streams):
    body = {"prompt": [rng.randrange(100, 30000) for _ in range(16)], "max_tokens": 6000,
            "ignore_eos": True, "temperature": 0, "stream": True}
    t = threading.Thread(target=stream, args=(body, decode_times[i]), daemon=True)
    t.start()
    threads.append(t)
deadline = time.monotonic() + 60
while any(len(ts) < 5 for ts in decode_times) and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(1.0 + before_s)  # warm-up, then the "before" window
sent = time.monotonic()
long_times = []
body = {"prompt": [rng.randrange(100, 30000) for _ in range(long_len)], "max_tokens": 1,
        "temperature": 0, "stream": True}
stream(body, long_times)
first = long_times[0] if long_times else float("nan")
time.sleep(1.0)
stop.set()
for t in threads:
    t.join(timeout=30)

def gaps(lo, hi):
    """Inter-token gaps of the decode streams overlapping [lo, hi]."""
    out = []
    for ts in decode_times:
        out += [b - a for a, b in zip(ts, ts[1:]) if b > lo and a < hi]
    return sorted(out)

def pct(xs, p):
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1e3 if xs else float("nan")

before, during = gaps(sent - before_s, sent), gaps(sent, first)
print(json.dumps({"setting": name, "run": run, "ttft_ms": (first - sent) * 1e3,
                  "before": {"n": len(before), "p50": pct(before, 50), "p99": pct(before, 99), "max": pct(before, 100)},
                  "during": {"n": len(during), "p50": pct(during, 50), "p99": pct(during, 99), "max": pct(during, 100)}}))
PYEOF
    kill "$server" 2>/dev/null
    wait "$server" 2>/dev/null || true
    server=
    [ -n "${LOG_DIR:-}" ] && mkdir -p "$LOG_DIR" && cp "$work/serve-$name-$run.log" "$LOG_DIR/"
    PORT=$((PORT + 1))  # a fresh port: the last server's sockets may linger
  done
done

$PY - "$work/results.jsonl" <<'PYEOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
print(f"{'setting':<10} {'run':>3} {'ITL before p50/p99/max ms':>28} {'ITL during p50/p99/max ms':>28} {'p99 ratio':>9} {'TTFT ms':>9}")
for r in rows:
    b, d = r["before"], r["during"]
    print(f"{r['setting']:<10} {r['run']:>3} {b['p50']:>8.1f}/{b['p99']:>7.1f}/{b['max']:>7.1f}     "
          f"{d['p50']:>8.1f}/{d['p99']:>7.1f}/{d['max']:>7.1f}     {d['p99'] / b['p99']:>9.2f} {r['ttft_ms']:>9.0f}")
PYEOF
