#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine: installs what is missing, builds pagoda (Release) and
# puts the demo model at models/demo.gguf: ../shared/testdata's stories260K when it is beside the
# repo, else a random-weight model. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev
          catch2 libssl-dev zlib1g-dev nodejs npm json-schema-test-suite python3-jsonschema
          prometheus  # promtool: the /metrics exposition check
          libzmq3-dev python3-zmq python3-msgpack)  # --kv-events (ZeroMQ) and its subscriber test
missing=()
for p in "${packages[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
# Node from another source (nodesource, nvm) is fine: only ask apt for node/npm when absent.
if command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; then
  missing=("${missing[@]/nodejs}"); missing=("${missing[@]/npm}")
fi
read -r -a missing <<< "${missing[*]}"
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

build_dir=${PAGODA_BUILD_DIR:-build}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE=Release
cmake --build "$build_dir" -j"$(nproc)"

mkdir -p models
stories=../shared/testdata/models/stories260K.gguf
if [ -f "$stories" ]; then
  # A real model when the shared testdata sits beside the repo: TinyStories 260K (1 MiB) writes
  # short children's stories. install, not cp: the source is read-only and a rerun overwrites.
  cmp -s "$stories" models/demo.gguf || install -m 644 "$stories" models/demo.gguf
  echo "setup: models/demo.gguf is stories260K (real TinyStories weights) from $stories"
elif [ ! -f models/demo.gguf ]; then
  # Random weights; the vocabulary is padded with pseudo-words so the noise it prints is readable.
  "$build_dir"/pagoda make-model --preset demo --vocab-size 4096 --output models/demo.gguf
  echo "setup: models/demo.gguf has random weights ($stories not found)"
fi
echo "setup: done. Run: $build_dir/pagoda serve"
