#!/usr/bin/env bash
# The memory soak: a mixed loopback workload against one `pagoda serve` for DURATION_S
# seconds (chat and completions, streamed or not, n = 1..2, logprobs, stop strings, JSON mode,
# clients that hang up mid-stream, /tokenize, /metrics), sampling the server's RSS every 15 s.
# Prints RSS at minute 2 and at the end and the growth between them (target: < 5 MB), and the
# request outcomes (every request must end with 200, a clean error, or the client's hang-up).
#
#   scripts/soak.sh [build-dir]      env: DURATION_S=600 CLIENTS=8 THREADS=2 MODEL=path PORT=18951
#                                         SERVE_FLAGS='...' (extra `pagoda serve` flags)
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
DURATION_S=${DURATION_S:-600}
CLIENTS=${CLIENTS:-8}
THREADS=${THREADS:-2}
PORT=${PORT:-18951}
MODEL=${MODEL:-/tmp/pagoda-soak-demo.gguf}
SERVE_FLAGS=${SERVE_FLAGS:-}
PY=/usr/bin/python3

[ -f "$MODEL" ] || "$BIN" make-model --output "$MODEL" --quiet
work=$(mktemp -d)
# shellcheck disable=SC2086  # the extra flags are words
"$BIN" serve --model "$MODEL" --threads "$THREADS" --port "$PORT" --max-seqs 16 --max-queue 64 \
  $SERVE_FLAGS > "$work/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 120); do
  curl -sf "http://127.0.0.1:$PORT/health" >/dev/null 2>&1 && break
  sleep 0.5
done

$PY - "$PORT" "$server" "$DURATION_S" "$CLIENTS" <<'PYEOF'
import http.client, json, random, sys, threading, time
from collections import Counter

port, pid, duration, clients = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
outcomes = Counter()
lock = threading.Lock()
start = time.monotonic()
words = "the a cat dog sun rain blue green river stone light night fast slow tree bird song road".split()

def rss_kib():
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1

def text(rng, n):
    return " ".join(rng.choice(words) for _ in range(n))

def one(rng):
    chat = rng.random() < 0.5
    stream = rng.random() < 0.5
    body = {"max_tokens": rng.randint(1, 48), "temperature": rng.choice([0, 0.7, 1.0]),
            "seed": rng.randrange(1 << 30)}
    if chat:
        body["messages"] = [{"role": "system", "content": text(rng, rng.randint(1, 30))},
                            {"role": "user", "content": text(rng, rng.randint(1, 120))}]
        if rng.random() < 0.1:
            body["response_format"] = {"type": "json_object"}
        if rng.random() < 0.2:
            body["logprobs"], body["top_logprobs"] = True, rng.randint(0, 3)
    else:
        body["prompt"] = text(rng, rng.randint(1, 200))
        if rng.random() < 0.2:
            body["logprobs"] = rng.randint(0, 3)
    if rng.random() < 0.2:
        body["n"] = 2
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(words)]
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    path = "/v1/chat/completions" if chat else "/v1/completions"
    hang_up = stream and rng.random() < 0.1
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    try:
        c.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
        r = c.getresponse()
        if hang_up:
            r.readline()
            return "hang-up"
        data = r.read()
        if r.status == 200 and not stream:
            usage = json.loads(data)["usage"]
            if usage["total_tokens"] != usage["prompt_tokens"] + usage["completion_tokens"]:
                return "bad-usage"
        if r.status == 200 and stream and b"data: [DONE]" not in data:
            return "stream-without-done"
        return str(r.status)
    finally:
        c.close()

def side(rng):
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        if rng.random() < 0.5:
            c.request("POST", "/tokenize", json.dumps({"content": text(rng, 50)}), {"Content-Type": "application/json"})
        else:
            c.request("GET", "/metrics")
        r = c.getresponse()
        r.read()
        return "side-" + str(r.status)
    finally:
        c.close()

def worker(i):
    rng = random.Random(i)
    while time.monotonic() - start < duration:
        try:
            o = side(rng) if rng.random() < 0.05 else one(rng)
        except Exception as e:
            o = "client-error:" + type(e).__name__
        with lock:
            outcomes[o] += 1

threads = [threading.Thread(target=worker, args=(i,), daemon=True) for i in range(clients)]
for t in threads:
    t.start()
samples = []
at_2min = None
while time.monotonic() - start < duration:
    time.sleep(15)
    t = time.monotonic() - start
    samples.append((t, rss_kib()))
    if at_2min is None and t >= 120:
        at_2min = samples[-1]
    print(f"t={t:6.0f}s rss={samples[-1][1] / 1024:8.1f} MiB requests={sum(outcomes.values())}", flush=True)
end = (time.monotonic() - start, rss_kib())  # still under load
for t in threads:
    t.join(timeout=150)
time.sleep(8)  # the engine gives freed memory back after 5 s idle
rest = rss_kib()
print("outcomes:", dict(outcomes))
if at_2min:
    print(f"RSS at {at_2min[0]:.0f} s: {at_2min[1] / 1024:.1f} MiB; at the end ({end[0]:.0f} s, under load): "
          f"{end[1] / 1024:.1f} MiB; growth after minute 2: {(end[1] - at_2min[1]) / 1024:+.1f} MiB; "
          f"idle after the run: {rest / 1024:.1f} MiB")
PYEOF
