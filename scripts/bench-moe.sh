#!/usr/bin/env bash
# Decode tok/s of a small mixture-of-experts model against its dense equivalent, through
# `pagoda generate` (one sequence, 32-token prompt, 128 new tokens, EOS ignored), runs
# alternating MoE / dense, median of RUNS each.
#   MoE:   LAYERS layers, dim DIM, 8 experts of width EXPERT_FF, 2 used per token (llama,
#          Mixtral-style);
#   dense: the same model with one FFN of width 2 * EXPERT_FF, i.e. the same weights read and
#          the same multiply-adds per token as the two active experts.
# The MoE's extra cost per token is the router (dim x 8), the router logits' read-back and the
# gather/combine around six expert matmuls per layer instead of three.
#
#   scripts/bench-moe.sh [build-dir]   env: THREADS=2 RUNS=5 TYPE=q8_0 LAYERS=8 DIM=1024 EXPERT_FF=1024
set -euo pipefail
BUILD=${1:-build}
BIN="$BUILD/pagoda"
THREADS=${THREADS:-2}
RUNS=${RUNS:-5}
TYPE=${TYPE:-q8_0}
LAYERS=${LAYERS:-8}
DIM=${DIM:-1024}
EFF=${EXPERT_FF:-1024}
WORK=${WORK:-/tmp}
moe="$WORK/pagoda-bench-moe-$TYPE.gguf"
dense="$WORK/pagoda-bench-dense-$TYPE.gguf"
common=(--type "$TYPE" --layers "$LAYERS" --dim "$DIM" --heads 16 --kv-heads 4 --vocab-size 32000 --quiet)
[ -f "$moe" ] || "$BIN" make-model "${common[@]}" --ff "$EFF" --experts 8 --experts-used 2 --output "$moe"
[ -f "$dense" ] || "$BIN" make-model "${common[@]}" --ff $((2 * EFF)) --output "$dense"
PROMPT="The quick brown fox jumps over th"  # 32 bytes + BOS

decode_rate() {  # model -> decode tok/s
  "$BIN" generate --model "$1" --prompt "$PROMPT" -n 128 --threads "$THREADS" --ignore-eos 2>&1 >/dev/null |
    sed -n 's/^decode: .*(\([0-9.]*\) tok\/s)/\1/p'
}
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR + 1) / 2)]}'; }

m_rates=() d_rates=()
for _ in $(seq 1 "$RUNS"); do
  m_rates+=("$(decode_rate "$moe")")
  d_rates+=("$(decode_rate "$dense")")
done
m=$(printf '%s\n' "${m_rates[@]}" | median)
d=$(printf '%s\n' "${d_rates[@]}" | median)
echo "MoE   (8 experts x ff $EFF, 2 used): decode ${m} tok/s (runs: ${m_rates[*]})"
echo "dense (ff $((2 * EFF))):               decode ${d} tok/s (runs: ${d_rates[*]})"
awk -v m="$m" -v d="$d" 'BEGIN { printf "MoE / dense: %.2f\n", m / d }'
