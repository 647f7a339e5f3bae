#!/usr/bin/env bash
# GPU verification for a machine with an NVIDIA GPU (written on a machine without one; `pack`
# then `lease` ran on an H100 on 2026-11-26: docs/cuda.md). Steps, each selectable so they fit
# in separate runs:
#   build  configure with PAGODA_CUDA=ON (sm_80;90) and build pagoda, the GPU tests, the bench
#   test   ctest -L gpu (PAGODA_GPU_HEAVY=1 adds the TinyLlama-shape model comparison)
#   bench  decode and prefill benchmark on a llama3-8b-shape q4_k_m random model (made once with
#          make-model): decode tokens/s at batch 1, 4, 16, 64 and 256 with the rate the weights
#          are read at (over the nominal HBM rate and the measured device copy rate), prefill
#          tokens/s at 512 and 2048 tokens, sampling on the GPU, CUDA graphs on; quantized
#          weights (int8 activations), then f32 activations (--cuda-weights quantized-f32) and the
#          bf16 path (--cuda-weights bf16) for comparison
#   all    the three in order (default)
#   pack   (on a machine without a GPU) build as `build` does, then copy pagoda, the GPU tests and
#          the bench, stripped, into .gpubin/ (ignored by git) with the libraries of
#          scripts/gpu-deps.sh and the stories260K model: the device tool's machine then runs
#          them with `carry: [".gpubin"]`, spending no device time on compiling
#   lease  (on the GPU machine, after pack) what pack carried: every GPU test binary (each under
#          a time limit; PAGODA_TESTDATA points them at the carried stories260K), stories260K's
#          greedy ids on CUDA against llama.cpp's (scripts/stories-check.py), and benchmarks of
#          Llama-3-8B and Qwen3-8B shapes in q4_k_m, q8_0 and iq4_xs and a Llama-3-70B shape in
#          q4_k_m (random weights, made there by make-model while the tests run; 16 cores make
#          the 42 GB 70B file in about a minute of CPU, longer if the disk is slow), plus the
#          bf16 path, the dequantize-to-scratch + cuBLAS GEMM against the default tensor-core
#          GEMM on quantized weights (prefill of 512 and 2048 tokens, decode batches 16 and 64),
#          --cuda-batch-invariant on (decode batches 16 and 64, prefill of 512)
#          and odd decode batches (1, 3, 5, 7, 12: between the CUDA graphs' row buckets, graphs on
#          and off; batches 1-8 take the LM head's fused greedy argmax) and long-context decode
#          (batch 1 at 4k, 16k and 32k contexts, batch 16 at 4k and 16k: split decode attention, bytes per step over the copy rate) on the
#          llama3-8b q4_k_m file, its prefill at 8192 tokens and with the exact f32 attention
#          kernels (--cuda-prefill-attention exact) at 512-8192; bench_cuda_attention (the
#          prefill attention kernels alone at 512-32768 tokens: TFLOP/s against the bf16 MMA
#          peak measured in the same run) and test_cuda_attention's long shapes
#          (PAGODA_GPU_HEAVY=1). Logs go to $OUT (or LEASE_OUT); it prints a summary last.
#   emu    no GPU needed: the GPU tests run on the CPU against an emulation of the CUDA execution
#          model (tests/gpu/emu: kernels rewritten by gen.py, a fake CUDA runtime and cuBLAS).
#          Checks kernel logic and the backend, not speed. Every CUDA thread is a fiber on one OS
#          thread (the sampling tests take the longest; test_cuda_archs a few minutes).
#          PAGODA_EMU_REVERSE=1 runs each block's threads in reverse order between barriers, to
#          catch a missing __syncthreads the index order hides; PAGODA_EMU_STEPS=N shortens
#          test_cuda_archs. Extra arguments go to every test binary, e.g.
#          `scripts/gpu-check.sh emu "cuda: prefill*"`. EMU_TESTS picks the binaries.
# Environment: PAGODA_BUILD_DIR (default build-gpu), JOBS (default nproc), BENCH_MODEL (default
# /tmp/pagoda-llama3-8b-q4_k_m.gguf), BENCH_BATCHES (default 1,4,16,64,256), HBM_TBPS (default 4.8).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
what=${1:-all}

do_build() {
  nvidia-smi || echo "gpu-check: nvidia-smi failed (no driver?)" >&2
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON
  cmake --build "$build" -j"$jobs" --target pagoda test_cuda_kernels test_cuda_quant test_cuda_ops test_cuda_sampling test_cuda_argmax \
    test_cuda_fused test_cuda_moe_route test_cuda_batch test_cuda_attention test_cuda_model test_cuda_archs test_cuda_engine \
    test_cuda_graphs test_cuda_kv_tiers test_cuda_encoder bench_cuda_decode bench_cuda_attention
}

do_test() {
  (cd "$build" && ctest -L gpu --output-on-failure)
}

do_bench() {
  local model=${BENCH_MODEL:-/tmp/pagoda-llama3-8b-q4_k_m.gguf}
  if [ ! -f "$model" ]; then
    echo "gpu-check: writing $model (llama3-8b shape, q4_k_m, random weights)"
    "$build/pagoda" make-model --preset llama3-8b --type q4_k_m --output "$model"
  fi
  for weights in quantized bf16; do
    "$build/tests/bench_cuda_decode" --model "$model" --batches "${BENCH_BATCHES:-1,4,16,64,256}" \
      --prefill 512,2048 --prompt 128 --new 128 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on \
      --cuda-weights "$weights"
  done
}

do_emu() {
  local emu=${PAGODA_EMU_DIR:-build-emu}
  local inc=${CUDA_HOME:-/usr/local/cuda}/include
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON >/dev/null
  cmake --build "$build" -j"$jobs" --target pagoda_engine pagoda_kv_events pagoda_scheduler pagoda_speculative pagoda_sampling pagoda_kv pagoda_lora pagoda_model pagoda_backend pagoda_backend_select pagoda_backend_cpu \
    pagoda_backend_cuda pagoda_tokenizer pagoda_gguf pagoda_structured pagoda_kernels_cpu pagoda_encoder
  rm -rf "$emu/src" && mkdir -p "$emu/obj"
  python3 tests/gpu/emu/gen.py . "$emu/src"
  local objs=()
  for f in "$emu"/src/kernels/cuda/*.cpp tests/gpu/emu/emu_runtime.cpp tests/gpu/emu/emu_fibers.cpp tests/gpu/emu/emu_mma.cpp; do
    local o="$emu/obj/$(basename "$f" .cpp).o"
    g++ -std=c++20 -O1 -ffp-contract=off -Wno-attributes -Itests/gpu/emu -I"$emu/src" -I. -I"$inc" \
      -c "$f" -o "$o"
    objs+=("$o")
  done
  rm -f "$emu/libpagoda_cuda_emu.a" && ar rcs "$emu/libpagoda_cuda_emu.a" "${objs[@]}"
  local status=0
  # The engine's KV event publisher links libzmq when the build found it.
  local zmq=""
  grep -q "^ZMQ_FOUND:INTERNAL=1" "$build/CMakeCache.txt" && zmq=-lzmq
  for t in ${EMU_TESTS:-test_cuda_kernels test_cuda_quant test_cuda_ops test_cuda_sampling test_cuda_argmax test_cuda_fused test_cuda_moe_route test_cuda_batch test_cuda_attention test_cuda_archs test_cuda_model test_cuda_engine test_cuda_graphs test_cuda_kv_tiers test_cuda_lora test_cuda_encoder}; do
    g++ -std=c++20 -O1 -I. -I"$inc" -DPAGODA_HAVE_CUDA=1 "tests/gpu/$t.cpp" tests/catch_main.cpp \
      -o "$emu/$t" -Wl,--start-group "$build/libpagoda_engine.a" "$build/libpagoda_scheduler.a" "$build/libpagoda_encoder.a" \
      "$build/libpagoda_speculative.a" "$build/libpagoda_sampling.a" "$build/libpagoda_kv_events.a" "$build/libpagoda_kv.a" "$build/libpagoda_model.a" "$build/libpagoda_lora.a" \
      "$build/libpagoda_backend_select.a" "$build/libpagoda_backend.a" "$build/libpagoda_backend_cuda.a" "$build/libpagoda_backend_cpu.a" \
      "$build/libpagoda_tokenizer.a" "$build/libpagoda_gguf.a" "$build/libpagoda_structured.a" "$emu/libpagoda_cuda_emu.a" \
      "$build/libpagoda_kernels_cpu.a" -Wl,--end-group -lspdlog -lfmt -lpthread $zmq
    echo "gpu-check: $t (emulated)"
    "$emu/$t" "$@" || status=1
  done
  return "$status"
}

gpu_tests="test_cuda_kernels test_cuda_quant test_cuda_ops test_cuda_sampling test_cuda_argmax test_cuda_fused test_cuda_moe_route test_cuda_batch test_cuda_attention test_cuda_model test_cuda_archs test_cuda_engine test_cuda_graphs test_cuda_kv_tiers test_cuda_lora test_cuda_encoder"

do_pack() {
  do_build
  scripts/gpu-deps.sh
  rm -rf .gpubin && mkdir -p .gpubin/bin .gpubin/models
  cp "$build/pagoda" "$build/tests/bench_cuda_decode" "$build/tests/bench_cuda_attention" .gpubin/bin/
  for t in $gpu_tests; do cp "$build/tests/$t" .gpubin/bin/; done
  strip .gpubin/bin/*
  mv .deps .gpubin/deps
  local models=../shared/testdata/models
  [ -f "$models/stories260K.gguf" ] && cp "$models"/stories260K.gguf "$models"/stories260K.expected.json .gpubin/models/
  du -sh .gpubin
}

# Model shapes of the lease benchmarks, in the order they are made and run: name, make-model
# flags, bench flags. The 8B shapes run the issue's whole table; the 70B one skips batch 256
# (a 32k-token prefill of 70B would take most of the lease). The MoE shape runs only when
# LEASE_BENCH names it.
lease_models=(
  "llama3-8b-q4_k_m|--preset llama3-8b --type q4_k_m|--batches 1,4,16,64,256 --prefill 512,2048"
  "llama3-70b-q4_k_m|--preset llama3-70b --type q4_k_m|--batches 1,4,16,64 --prefill 512,2048"
  "qwen3-8b-q4_k_m|--preset qwen3-8b --type q4_k_m|--batches 1,4,16,64,256 --prefill 512,2048"
  "llama3-8b-q8_0|--preset llama3-8b --type q8_0|--batches 1,4,16,64,256 --prefill 512,2048"
  "qwen3-8b-q8_0|--preset qwen3-8b --type q8_0|--batches 1,4,16,64,256 --prefill 512,2048"
  "llama3-8b-iq4_xs|--preset llama3-8b --type iq4_xs|--batches 1,4,16,64,256 --prefill 512,2048"
  "qwen3-8b-iq4_xs|--preset qwen3-8b --type iq4_xs|--batches 1,4,16,64,256 --prefill 512,2048"
  "qwen3-30b-a3b-q4_0|--arch qwen3moe --layers 48 --dim 2048 --ff 6144 --heads 32 --kv-heads 4 --head-dim 128 --experts 128 --experts-used 8 --expert-ff 768 --vocab-size 151936 --ctx 4096 --type q4_0|--batches 1,16 --prefill 512"
)

do_lease() {
  # LEASE_STEPS picks among "tests stories bench"; LEASE_BENCH among the names of lease_models;
  # LEASE_DEADLINE (seconds, default 480) skips what would start after it, so the call returns
  # with its logs inside the device tool's limit. Five files come back: summary.txt (read it
  # first), tests.log (each test's last 300 lines), stories.log, bench.log, make-model.log, and
  # with LEASE_PROFILE=1 profile.txt (per-kernel GPU times of a few llama3-8b decode steps).
  # LEASE_KV=1 adds the f16 / q8_0 KV-cache benches at 2048-token prompts on llama3-8b;
  # LEASE_SERVE=0 drops the server benchmark (scripts/gpu-serve-bench.sh, serve.log) on it.
  local out=${LEASE_OUT:-${OUT:-/tmp/lease-out}} bin=.gpubin/bin models=${LEASE_MODELS_DIR:-/tmp/lease-models}
  local steps=${LEASE_STEPS:-tests stories bench} deadline=${LEASE_DEADLINE:-480}
  local benches=${LEASE_BENCH:-llama3-8b-q4_k_m llama3-70b-q4_k_m qwen3-8b-q4_k_m llama3-8b-q8_0 qwen3-8b-q8_0 llama3-8b-iq4_xs qwen3-8b-iq4_xs qwen3-30b-a3b-q4_0}
  mkdir -p "$out" "$models"
  source .gpubin/deps/env.sh
  local cublas
  cublas=$(find /usr/local /opt /usr/lib -name 'libcublas.so.13*' 2>/dev/null | head -1 || true)
  [ -n "$cublas" ] && export LD_LIBRARY_PATH=$(dirname "$cublas"):$LD_LIBRARY_PATH
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv >"$out/summary.txt" 2>&1 || true
  late() { [ "$SECONDS" -ge "$deadline" ] && echo "skipped (deadline $deadline s): $1" | tee -a "$out/summary.txt"; }
  # Models are written in the background while the tests run (CPU work beside GPU work), each
  # once the disk has room for it (the benches delete theirs): all of them together (about 80 GB
  # with the 70B one) would not fit a 64 GB disk.
  if [[ " $steps " == *" bench "* ]]; then
    (
      for m in "${lease_models[@]}"; do
        IFS='|' read -r name flags _ <<<"$m"
        [[ " $benches " == *" $name "* ]] || continue
        local need_gb=12
        [[ "$name" == *70b* ]] && need_gb=46
        while [ "$(df -BG --output=avail "$models" | tail -1 | tr -dc 0-9)" -lt "$need_gb" ] && [ "$SECONDS" -lt "$deadline" ]; do
          sleep 1
        done
        local t0=$SECONDS
        $bin/pagoda make-model $flags --quiet --output "$models/$name.gguf.part" && mv "$models/$name.gguf.part" "$models/$name.gguf" &&
          echo "made $name ($(du -h "$models/$name.gguf" | cut -f1)) in $((SECONDS - t0)) s"
        touch "$models/$name.done"
      done
    ) >"$out/make-model.log" 2>&1 &
  fi
  local t status=0
  if [[ " $steps " == *" tests "* ]]; then
    for t in ${LEASE_TESTS:-$gpu_tests}; do
      late "$t" && { status=1; continue; }
      local rc=0 t0=$SECONDS
      PAGODA_TESTDATA=$PWD/.gpubin timeout "${LEASE_TEST_TIMEOUT:-120}" $bin/$t >"/tmp/$t.log" 2>&1 || rc=$?
      { echo "==== $t: exit $rc"; tail -n 300 "/tmp/$t.log"; } >>"$out/tests.log"
      echo "test $t: exit $rc in $((SECONDS - t0)) s: $(tail -n 2 "/tmp/$t.log" | tr '\n' ' ' | cut -c1-200)" | tee -a "$out/summary.txt"
      [ $rc -eq 0 ] || status=1
    done
  fi
  if [[ " $steps " == *" tests "* ]] && ! late "long attention shapes"; then
    # test_cuda_attention's long shapes (4,096-token chunks, 32k contexts), too slow for the emulator.
    local rc=0 t0=$SECONDS
    PAGODA_GPU_HEAVY=1 timeout 150 $bin/test_cuda_attention "*PAGODA_GPU_HEAVY*" >/tmp/attn-heavy.log 2>&1 || rc=$?
    { echo "==== test_cuda_attention heavy: exit $rc"; tail -n 100 /tmp/attn-heavy.log; } >>"$out/tests.log"
    echo "test test_cuda_attention (PAGODA_GPU_HEAVY=1 shapes): exit $rc in $((SECONDS - t0)) s" | tee -a "$out/summary.txt"
    [ $rc -eq 0 ] || status=1
  fi
  if [[ " $steps " == *" stories "* ]] && [ -f .gpubin/models/stories260K.gguf ] && ! late stories; then
    timeout 200 python3 scripts/stories-check.py $bin/pagoda .gpubin/models --device cuda --kv f32 f16 q8_0 f16/q8_0 \
      >"$out/stories.log" 2>&1 || status=1
    { grep -E "prompts with" "$out/stories.log" || true; } | cut -c1-300 | tee -a "$out/summary.txt"
  fi
  # The bench with the given flags; a .gpubin/bin/bench_cuda_decode.base (an older build, copied
  # there by hand) runs first with the same flags, so before/after come from one machine.
  run_bench() {
    local b
    for b in $bin/bench_cuda_decode.base $bin/bench_cuda_decode; do
      [ -x "$b" ] || continue
      echo "== ${b##*/}" >>"$out/bench.log"
      timeout 200 "$b" "$@" >>"$out/bench.log" 2>&1 || { echo "failed: ${b##*/} $*" >>"$out/bench.log"; status=1; }
    done
  }
  if [[ " $steps " == *" bench "* ]] && ! late "bench attention"; then
    # The prefill attention kernels alone (tensor-core and exact) beside the bf16 MMA peak.
    timeout 120 $bin/bench_cuda_attention --tokens 512,2048,8192,32768 >>"$out/bench.log" 2>&1 ||
      { echo "failed: bench_cuda_attention" >>"$out/bench.log"; status=1; }
  fi
  if [[ " $steps " == *" bench "* ]]; then
    for m in "${lease_models[@]}"; do
      IFS='|' read -r name _ bflags <<<"$m"
      [[ " $benches " == *" $name "* ]] || continue
      while [ ! -f "$models/$name.done" ] && [ "$SECONDS" -lt "$deadline" ]; do sleep 2; done
      late "bench $name" && continue
      if [ ! -f "$models/$name.gguf" ]; then echo "bench $name: no model (see make-model.log)" | tee -a "$out/summary.txt"; status=1; continue; fi
      # Every model decodes with CUDA graphs; the MoE model's steps of up to 8 tokens route on the
      # device and are recorded, its larger batches read the router back and run eagerly.
      late "bench $name" || run_bench --model "$models/$name.gguf" $bflags --prompt 128 --new 64 \
        --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on --cuda-weights quantized
      if [ "$name" = llama3-8b-q4_k_m ]; then
        # The f32-activation GEMV (FMA) against the default int8 one (dp4a) at 1-8 rows.
        late "bench $name quantized-f32" || run_bench --model "$models/$name.gguf" --batches 1,4,8 \
          --prefill "" --prompt 128 --new 64 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on --cuda-weights quantized-f32
        # The GEMM of more than 8 rows on quantized weights: the tensor-core kernel on the blocks
        # (the default, in the run above) against a bf16 copy of each matrix for cuBLAS.
        late "bench $name cublas GEMM" || run_bench --model "$models/$name.gguf" --batches 16,64 \
          --prefill 512,2048 --prompt 128 --new 64 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on \
          --cuda-weights quantized --cuda-quant-gemm cublas
        # --cuda-batch-invariant on: the int8 tensor-core GEMM (each row the GEMV's bits) for more
        # than 8 rows, against the default above: the invariance's cost at batches 16 and 64 and
        # in prefill.
        late "bench $name batch-invariant" || run_bench --model "$models/$name.gguf" --batches 16,64 \
          --prefill 512 --prompt 128 --new 64 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on \
          --cuda-weights quantized --cuda-batch-invariant on
        # Whole-model prefill with the tensor-core attention (the default, in the run above at
        # 512 and 2048) at 8192 tokens, and with the exact f32 attention kernels for comparison.
        late "bench $name prefill 8192" || run_bench --model "$models/$name.gguf" --batches "" \
          --prefill 8192 --prompt 128 --new 64 --cuda-graphs on --cuda-weights quantized
        late "bench $name exact attention" || run_bench --model "$models/$name.gguf" --batches "" \
          --prefill 512,2048,8192 --prompt 128 --new 64 --cuda-graphs on --cuda-weights quantized \
          --cuda-prefill-attention exact
        # Batch sizes between the graphs' row buckets (3 runs as 4, 5 and 7 as 8, 12 as 16) with
        # graphs on and off: the padding's cost against the replay's gain; batches 1-8 also take
        # the LM head's fused greedy argmax (int8 GEMV; bf16 at 1-4 rows in the bf16 run below).
        for g in on off; do
          late "bench $name odd batches graphs $g" || run_bench --model "$models/$name.gguf" --batches 1,3,5,7,12 \
            --prefill "" --prompt 128 --new 64 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs $g --cuda-weights quantized
        done
        # The bf16 path (weights dequantized at load) on the same file, for comparison.
        late "bench $name bf16 weights" || run_bench --model "$models/$name.gguf" --batches 1,3,4,64 \
          --prefill 512,2048 --prompt 128 --new 64 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on --cuda-weights bf16
        # Long-context decode: the caches start full (no prefill), so each run takes seconds.
        late "bench long context" || run_bench --model "$models/$name.gguf" --batches "" --prefill "" \
          --long-ctx 4096,16384,32768 --long-batches 1 --new 32 --cuda-graphs on
        late "bench long context batch 16" || run_bench --model "$models/$name.gguf" --batches "" --prefill "" \
          --long-ctx 4096,16384 --long-batches 16 --new 32 --cuda-graphs on
        # The server end to end under `pagoda bench` (1-256 users, then constrained against
        # unconstrained at 64), the figure to hold against the engine's step rate above
        # (LEASE_SERVE=0 skips it; 8 s per load point, about 2 minutes in all).
        if [ "${LEASE_SERVE:-1}" != 0 ] && ! late "serve $name"; then
          SERVE_POINT_S=${SERVE_POINT_S:-8} timeout 200 scripts/gpu-serve-bench.sh $bin/pagoda "$models/$name.gguf" \
            "$out/serve" >"$out/serve.log" 2>&1 || { echo "failed: serve bench (serve.log)" >>"$out/summary.txt"; status=1; }
          { grep -E "^(==|load|[0-9]+ users?) " "$out/serve.log" || true; } | cut -c1-200 >>"$out/summary.txt"
        fi
        if [ -n "${LEASE_KV:-}" ]; then
          for kv in f16 q8_0; do
            late "bench $kv KV" || run_bench --model "$models/$name.gguf" --batches 1,64 --prefill "" --prompt 2048 \
              --new 32 --max-batch-tokens 4096 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs on --kv-cache-type $kv
          done
        fi
      fi
      if [ "$name" = llama3-8b-q4_k_m ] && [ -n "${LEASE_PROFILE:-}" ] && ! late profile; then
        # Per-kernel GPU time of one-token steps (LEASE_PROFILE=1): Nsight Compute, one metric,
        # skipping the weight conversions of the load.
        local ncu
        ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1 || true)
        if [ -n "$ncu" ]; then
          timeout 150 "$ncu" --metrics gpu__time_duration.sum --launch-skip 300 --launch-count 1900 \
            --print-summary per-kernel $bin/bench_cuda_decode --model "$models/$name.gguf" --batches 1 \
            --prefill "" --prompt 1 --new 2 --cuda-graphs off >"$out/profile.txt" 2>&1 || echo "profile failed" >>"$out/summary.txt"
        fi
      fi
      rm -f "$models/$name.gguf"
    done
    { grep -E "^(==|model|batch|prefill|long|attention|bf16)|failed|rror" "$out/bench.log" || true; } | cut -c1-300 >>"$out/summary.txt"
    { grep -E "^made" "$out/make-model.log" || true; } >>"$out/summary.txt"
  fi
  echo "---- summary ($SECONDS s)"; cat "$out/summary.txt"
  return "$status"
}

case "$what" in
  build) do_build ;;
  test) do_test ;;
  bench) do_bench ;;
  emu) shift; do_emu "$@" ;;
  pack) do_pack ;;
  lease) do_lease ;;
  all)
    do_build
    status=0
    do_test || status=$?
    do_bench || status=$?
    exit "$status"
    ;;
  *) echo "usage: $0 [build|test|bench|all|pack|lease|emu [test args]]" >&2; exit 2 ;;
esac
