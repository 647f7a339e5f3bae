#!/usr/bin/env bash
# Set-up on a fresh Debian 12 machine: installs what is missing, builds pagoda (Release) and
# writes the demo model to models/demo.gguf. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(build-essential cmake pkg-config libcpp-httplib-dev nlohmann-json3-dev libspdlog-dev
          catch2 libssl-dev zlib1g-dev nodejs npm json-schema-test-suite python3-jsonschema)
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
if [ ! -f models/demo.gguf ]; then
  # Random weights; the vocabulary is padded with pseudo-words so the noise it prints is readable.
  "$build_dir"/pagoda make-model --preset demo --vocab-size 4096 --output models/demo.gguf
fi
echo "setup: done. Run: $build_dir/pagoda serve"
