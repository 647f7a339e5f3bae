#!/usr/bin/env bash
# GPU verification for a machine with an NVIDIA GPU (written on a machine without one: nothing
# here has been run on a GPU yet). Steps, each selectable so they fit in separate runs:
#   build  configure with PAGODA_CUDA=ON (sm_80;90) and build pagoda, the GPU tests, the bench
#   test   ctest -L gpu (PAGODA_GPU_HEAVY=1 adds the TinyLlama-shape model comparison)
#   bench  decode benchmark on a llama3-8b-shape bf16 random model (made once with make-model):
#          tokens/s at batch 1 (with the HBM-bandwidth fraction), 64 and 256, sampling on the
#          GPU, without and with CUDA graphs
#   all    the three in order (default)
#   emu    no GPU needed: the GPU tests run on the CPU against an emulation of the CUDA execution
#          model (tests/gpu/emu: kernels rewritten by gen.py, a fake CUDA runtime and cuBLAS).
#          Checks kernel logic and the backend, not speed. Every CUDA thread is a fiber on one OS
#          thread (the sampling tests take the longest; test_cuda_archs a few minutes).
#          PAGODA_EMU_REVERSE=1 runs each block's threads in reverse order between barriers, to
#          catch a missing __syncthreads the index order hides; PAGODA_EMU_STEPS=N shortens
#          test_cuda_archs. Extra arguments go to every test binary, e.g.
#          `scripts/gpu-check.sh emu "cuda: prefill*"`. EMU_TESTS picks the binaries.
# Environment: PAGODA_BUILD_DIR (default build-gpu), JOBS (default nproc), BENCH_MODEL (default
# /tmp/pagoda-llama3-8b-bf16.gguf), BENCH_BATCHES (default 1,64,256), HBM_TBPS (default 4.8).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${PAGODA_BUILD_DIR:-build-gpu}
jobs=${JOBS:-$(nproc)}
what=${1:-all}

do_build() {
  nvidia-smi || echo "gpu-check: nvidia-smi failed (no driver?)" >&2
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON
  cmake --build "$build" -j"$jobs" --target pagoda test_cuda_kernels test_cuda_ops \
    test_cuda_attention test_cuda_model test_cuda_archs test_cuda_engine test_cuda_graphs test_cuda_kv_tiers bench_cuda_decode
}

do_test() {
  (cd "$build" && ctest -L gpu --output-on-failure)
}

do_bench() {
  local model=${BENCH_MODEL:-/tmp/pagoda-llama3-8b-bf16.gguf}
  if [ ! -f "$model" ]; then
    echo "gpu-check: writing $model (llama3-8b shape, bf16, random weights)"
    "$build/pagoda" make-model --preset llama3-8b --type bf16 --output "$model"
  fi
  for graphs in off on; do
    "$build/tests/bench_cuda_decode" --model "$model" --batches "${BENCH_BATCHES:-1,64,256}" \
      --prompt 128 --new 128 --hbm-tbps "${HBM_TBPS:-4.8}" --cuda-graphs "$graphs"
  done
}

do_emu() {
  local emu=${PAGODA_EMU_DIR:-build-emu}
  local inc=${CUDA_HOME:-/usr/local/cuda}/include
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DPAGODA_CUDA=ON >/dev/null
  cmake --build "$build" -j"$jobs" --target pagoda_engine pagoda_model pagoda_backend pagoda_backend_select pagoda_backend_cpu \
    pagoda_backend_cuda pagoda_tokenizer pagoda_gguf pagoda_structured pagoda_kernels_cpu
  rm -rf "$emu/src" && mkdir -p "$emu/obj"
  python3 tests/gpu/emu/gen.py . "$emu/src"
  local objs=()
  for f in "$emu"/src/kernels/cuda/*.cpp tests/gpu/emu/emu_runtime.cpp tests/gpu/emu/emu_fibers.cpp; do
    local o="$emu/obj/$(basename "$f" .cpp).o"
    g++ -std=c++20 -O1 -ffp-contract=off -Wno-attributes -Itests/gpu/emu -I"$emu/src" -I. -I"$inc" \
      -c "$f" -o "$o"
    objs+=("$o")
  done
  rm -f "$emu/libpagoda_cuda_emu.a" && ar rcs "$emu/libpagoda_cuda_emu.a" "${objs[@]}"
  local status=0
  for t in ${EMU_TESTS:-test_cuda_kernels test_cuda_ops test_cuda_attention test_cuda_archs test_cuda_model test_cuda_engine test_cuda_graphs test_cuda_kv_tiers}; do
    g++ -std=c++20 -O1 -I. -I"$inc" -DPAGODA_HAVE_CUDA=1 "tests/gpu/$t.cpp" tests/catch_main.cpp \
      -o "$emu/$t" -Wl,--start-group "$build/libpagoda_engine.a" "$build/libpagoda_model.a" \
      "$build/libpagoda_backend_select.a" "$build/libpagoda_backend.a" "$build/libpagoda_backend_cuda.a" "$build/libpagoda_backend_cpu.a" \
      "$build/libpagoda_tokenizer.a" "$build/libpagoda_gguf.a" "$build/libpagoda_structured.a" "$emu/libpagoda_cuda_emu.a" \
      "$build/libpagoda_kernels_cpu.a" -Wl,--end-group -lspdlog -lfmt -lpthread
    echo "gpu-check: $t (emulated)"
    "$emu/$t" "$@" || status=1
  done
  return "$status"
}

case "$what" in
  build) do_build ;;
  test) do_test ;;
  bench) do_bench ;;
  emu) shift; do_emu "$@" ;;
  all)
    do_build
    status=0
    do_test || status=$?
    do_bench || status=$?
    exit "$status"
    ;;
  *) echo "usage: $0 [build|test|bench|all|emu [test args]]" >&2; exit 2 ;;
esac
