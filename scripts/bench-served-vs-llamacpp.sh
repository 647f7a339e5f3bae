#!/usr/bin/env bash
# Served users, pagoda against llama.cpp's llama-server on the same GGUF file and this CPU: both
# servers run at once on loopback (THREADS threads each, one at a time under load, since
# `pagoda bench --compare` alternates every load point between them), then `pagoda bench`
# measures
#   1. closed-loop users (USERS, default 1,4,16): prompts of INPUT_LEN words (default 120),
#      64 tokens out, ignore_eos;
#   2. SHARED_USERS users (default 8) whose prompts all open with the same system prompt of
#      SYSTEM_WORDS words (default 150: about 750 tokens on a byte-level vocabulary) before their
#      own INPUT_LEN words: the shared-prefix case, where each server's prefix cache decides.
# Each point runs POINT_S seconds (default 60; requests in flight then finish), with its own seed
# so that no prompt repeats between points. Prints each point's pagoda / llama-server table (tok/s,
# TTFT, ITL percentiles); JSON reports land in OUT.
#
#   scripts/bench-served-vs-llamacpp.sh LLAMA_BIN_DIR MODEL.gguf
#   env: THREADS=2 USERS=1,4,16 SHARED_USERS=8 SYSTEM_WORDS=150 INPUT_LEN=120 OUTPUT_LEN=64
#        POINT_S=60 BUILD=build OUT=bench-served
#
# LLAMA_BIN_DIR is a llama.cpp build you made yourself; it needs llama-server. llama-server gets
# `-np 16 -c 32768` (2,048 tokens per slot, room for the shared prompt plus a question and its
# answer), pagoda its defaults (it shares one paged cache between all sequences).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/serve-lib.sh
llama_bin=$1 model=$2
threads=${THREADS:-2}
users=${USERS:-1,4,16}
shared_users=${SHARED_USERS:-8}
system_words=${SYSTEM_WORDS:-150}
input_len=${INPUT_LEN:-120}
output_len=${OUTPUT_LEN:-64}
point_s=${POINT_S:-60}
bin=${BUILD:-build}/pagoda
out=${OUT:-bench-served}
mkdir -p "$out"
[ -x "$llama_bin/llama-server" ] || { echo "no llama-server in $llama_bin" >&2; exit 2; }
[ -x "$bin" ] || { echo "no $bin: build pagoda first" >&2; exit 2; }

pport=$(free_port) lport=$(free_port)
while [ "$lport" = "$pport" ]; do lport=$(free_port); done
"$bin" serve --model "$model" --threads "$threads" --port "$pport" >"$out/pagoda.log" 2>&1 &
pagoda_pid=$!
LD_LIBRARY_PATH="$llama_bin${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$llama_bin/llama-server" -m "$model" -t "$threads" \
  -np 16 -c 32768 --host 127.0.0.1 --port "$lport" >"$out/llama.log" 2>&1 &
llama_pid=$!
trap 'kill $pagoda_pid $llama_pid 2>/dev/null; wait 2>/dev/null || true' EXIT
wait_healthy "http://127.0.0.1:$pport" $pagoda_pid "$out/pagoda.log"
wait_healthy "http://127.0.0.1:$lport" $llama_pid "$out/llama.log"

echo "host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus; $threads threads per server; $(basename "$model")"
common=(--url "http://127.0.0.1:$pport" --compare "http://127.0.0.1:$lport" --endpoint completions
        --input-len "$input_len" --output-len "$output_len" --duration "$point_s" --warmup 1 --no-progress)
seed=1
for u in ${users//,/ }; do
  echo "== $u users, $input_len-word prompts, $output_len tokens out"
  "$bin" bench "${common[@]}" --users "$u" --seed $seed --json "$out/users-$u.json"
  seed=$((seed + 1))
done
echo "== $shared_users users sharing a $system_words-word system prompt"
"$bin" bench "${common[@]}" --users "$shared_users" --system-prompt-len "$system_words" --seed $seed \
  --json "$out/shared-$shared_users.json"
