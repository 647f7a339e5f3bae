#!/usr/bin/env bash
# Side by side with llama.cpp on mixture-of-experts models made by `pagoda make-model`: a
# Mixtral-style llama MoE and a qwen2moe (shared expert), random weights, identical GGUF files.
# For 8 prompts x 64 greedy tokens it serves each model with llama-server and with pagoda serve
# (both on loopback, 1 thread, f16 KV cache, temperature 0) and reports per model: prompts whose
# greedy tokens are identical (64, or fewer when both end at the same end-of-text token), the
# first diverging token otherwise, and the max / mean |logprob difference| of the chosen tokens
# over the common prefix. EOS is not suppressed: llama.cpp's ignore_eos hides it from the
# choice but not from its logprobs, pagoda's logit_bias from both; a 2048-token vocabulary makes
# an early end rare instead.
#
# usage: scripts/compare-moe-llamacpp.sh LLAMA_CPP_BIN_DIR [PAGODA_BINARY]
# environment: CONTROL=1 (first the dense llama of the same shape, as a control), TYPE (weight type, default f32), WORK (scratch dir, default /tmp/pagoda-moe-compare),
#              PORT_BASE (default 18630), LAYERS/DIM/FF (default 4/256/512)
# llama.cpp is never built or shipped by this script: pass the bin dir of a build of your own.
set -euo pipefail
cd "$(dirname "$0")/.."
llama_bin=${1:?usage: $0 LLAMA_CPP_BIN_DIR [PAGODA_BINARY]}
pagoda=${2:-build/pagoda}
type=${TYPE:-f32}
work=${WORK:-/tmp/pagoda-moe-compare}
port=${PORT_BASE:-18630}
layers=${LAYERS:-4}
dim=${DIM:-256}
ff=${FF:-512}
[ -x "$llama_bin/llama-server" ] || { echo "no llama-server in $llama_bin" >&2; exit 2; }
[ -x "$pagoda" ] || { echo "no pagoda binary at $pagoda (build it first)" >&2; exit 2; }
mkdir -p "$work"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
}
trap cleanup EXIT

wait_ready() {  # url
  for _ in $(seq 1 120); do
    if /usr/bin/python3 -c "import urllib.request,sys; urllib.request.urlopen(sys.argv[1], timeout=2)" "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.5
  done
  echo "server at $1 did not come up" >&2
  return 1
}

compare() {  # name, make-model flags...
  local name=$1
  shift
  local model="$work/$name-$type.gguf"
  "$pagoda" make-model --quiet --type "$type" --layers "$layers" --dim "$dim" --ff "$ff" --heads 8 \
    --kv-heads 4 --ctx 512 --vocab-size 2048 --seed 11 --name "$name" --output "$model" "$@"
  "$llama_bin/llama-server" -m "$model" --host 127.0.0.1 --port "$port" -t 1 -c 512 -np 1 \
    >"$work/$name-llama.log" 2>&1 &
  pids+=($!)
  "$pagoda" serve --model "$model" --host 127.0.0.1 --port $((port + 1)) --threads 1 --max-seqs 1 \
    >"$work/$name-pagoda.log" 2>&1 &
  pids+=($!)
  wait_ready "http://127.0.0.1:$port/health"
  wait_ready "http://127.0.0.1:$((port + 1))/health"
  /usr/bin/python3 - "$name" "$port" <<'EOF'
import json, sys, urllib.request
name, port = sys.argv[1], int(sys.argv[2])
prompts = ["Once upon a time", "The capital of France is", "def fibonacci(n):", "1, 2, 3, 4,",
           "Mixture of experts models route each token", "Hello", "The quick brown fox",
           "In the beginning"]
def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)
with urllib.request.urlopen(f"http://127.0.0.1:{port + 1}/v1/models", timeout=30) as r:
    model_id = json.load(r)["data"][0]["id"]
byte_len = {}
def token_bytes(t):
    # make-model's own vocabulary: ids below 256 are single bytes (which llama.cpp cannot
    # detokenize alone when they are not UTF-8); ask llama.cpp for the others' text.
    if t < 256:
        return 1
    if t not in byte_len:
        text = post(f"http://127.0.0.1:{port}/detokenize", {"tokens": [t]})["content"]
        byte_len[t] = len(text.encode("utf-8"))
    return byte_len[t]
def token_text(t):
    if t < 256:
        return bytes([t]).decode("utf-8", errors="replace")
    return post(f"http://127.0.0.1:{port}/detokenize", {"tokens": [t]})["content"]
same = 0
diffs = []
for p in prompts:
    ref = post(f"http://127.0.0.1:{port}/completion",
               {"prompt": p, "n_predict": 64, "temperature": 0, "n_probs": 2,
                "cache_prompt": False, "return_tokens": True})
    got = post(f"http://127.0.0.1:{port + 1}/v1/completions",
               {"model": model_id, "prompt": p, "max_tokens": 64, "temperature": 0, "logprobs": 2})
    # Tokens are compared by id. pagoda gives token strings: for make-model's vocabulary, ids
    # below 256 are single bytes (a non-UTF-8 byte alone reads as U+FFFD on both sides) and the
    # others are llama.cpp's detokenized text. llama.cpp gives one probabilities entry per piece
    # of text it sends, a token ending inside a UTF-8 character being merged into the next piece
    # (only the piece's last token keeps its logprob): entries are matched to tokens by bytes.
    ids = ref["tokens"]
    entries = ref["completion_probabilities"]
    lp = got["choices"][0]["logprobs"]
    got_toks, got_lp = lp["tokens"], lp["token_logprobs"]
    ref_entry = {}  # token index -> its llama.cpp entry
    i = 0
    for e in entries:
        n_bytes = 0
        while i < len(ids) and n_bytes + token_bytes(ids[i]) < len(e["bytes"]):
            n_bytes += token_bytes(ids[i])
            i += 1
        if i < len(ids):
            ref_entry[i] = e
        i += 1
    k = 0
    while k < min(len(ids), len(got_toks)) and token_text(ids[k]) == got_toks[k]:
        k += 1
    d = [abs(ref_entry[j]["logprob"] - got_lp[j]) for j in range(k) if j in ref_entry]
    diffs += d
    if k == len(ids) == len(got_toks):
        same += 1
        status = "identical"
    else:
        # How close llama.cpp's own top two were where the tokens part: a near-tie there means
        # rounding (f16 KV cache, summation order) decided, not a different model.
        top = ref_entry[k]["top_logprobs"] if k in ref_entry else []
        gap = f"{top[0]['logprob'] - top[1]['logprob']:.1e}" if len(top) > 1 else "n/a (merged piece)"
        top_pagoda = sorted(lp["top_logprobs"][k].items(), key=lambda kv: -kv[1]) if k < len(got_toks) else []
        pgap = f"{top_pagoda[0][1] - top_pagoda[1][1]:.1e}" if len(top_pagoda) > 1 else "n/a"
        two = lambda pairs: ", ".join(f"{t!r} {v:.5f}" for t, v in pairs[:2])
        status = (f"diverges at token {k} (top-2 logprob gap there: llama.cpp {gap} "
                  f"[{two([(x.get('token'), x['logprob']) for x in top])}], pagoda {pgap} [{two(top_pagoda)}])")
    print(f"  {p!r}: {status}; generated llama.cpp {len(ids)} pagoda {len(got_toks)}; prompt tokens llama.cpp {ref['tokens_evaluated']} pagoda "
          f"{got['usage']['prompt_tokens']}; max |dlogprob| {max(d) if d else float('nan'):.2e}")
print(f"{name}: {same}/{len(prompts)} prompts give the same 64 greedy tokens; over "
      f"{len(diffs)} matched tokens |dlogprob| max {max(diffs):.2e}, mean {sum(diffs) / len(diffs):.2e}")
EOF
  cleanup
  pids=()
  port=$((port + 2))
}

if [ -n "${CONTROL:-}" ]; then
  echo "== control: the dense llama of the same shape, $type"
  compare llama-dense --arch llama
fi
echo "== Mixtral-style llama MoE (8 experts, 2 used), $type"
compare llama-moe --arch llama --experts 8 --experts-used 2
echo "== qwen2moe (8 experts, 2 used, expert ff $((ff / 2)), shared expert ff $ff), $type"
compare qwen2moe --arch qwen2moe --experts 8 --experts-used 2 --expert-ff $((ff / 2))
