#!/usr/bin/env bash
# Installs every Debian package kiln needs to build, test and run. Idempotent; run as root.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-openmp-dev      # BLAS, linked by name (never the generic libblas.so.3)
  libdnnl-dev                 # oneDNN: the matmul primitive (bf16 GEMMs)
  libblis-dev                 # BLIS: only measured by bench/gemm_bench (loaded at run time)
  nlohmann-json3-dev          # JSON
  libyaml-cpp-dev             # YAML recipes
  libcli11-dev                # command line
  libgloo-dev                 # CPU collectives (TCP)
  libssl-dev                  # libcrypto: HMAC-SHA256 handshake of authenticated Gloo pairs
  libfmt-dev libspdlog-dev    # formatting and logging
  libpcre2-dev                # tokenizer: the pre-tokenizer's split regex
  libutf8proc-dev             # tokenizer: NFC normalisation
  libxxhash-dev               # XXH3-64 checksums of checkpoint files
  libcurl4-openssl-dev        # kiln download: HTTP(S) to the Hugging Face hub (src/kiln/hub/)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (Event/Summary messages)
  libgtest-dev libgmock-dev   # tests
  libbenchmark-dev            # micro-benchmarks
  clang libclang-rt-14-dev    # libFuzzer targets
  clang-format clang-tidy
  iproute2                    # network namespaces for the two-node test
  shellcheck python3-yaml     # deploy/: lint its scripts, parse the rendered manifests
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]} (run this script as root)" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
echo "setup: all packages present"

# @huggingface/hub for tests/hub's check that the hub's own client reads kiln's cache as complete
# (tools/hub_cache_check; the test skips without it). npm's registry only; best effort.
hub_check="$(dirname "$0")/../tools/hub_cache_check"
if command -v npm >/dev/null && [[ ! -d "$hub_check/node_modules/@huggingface/hub" ]]; then
  (cd "$hub_check" && npm ci --no-audit --no-fund --silent) \
    || echo "setup: npm ci in tools/hub_cache_check failed; tests/hub's JavaScript check will skip" >&2
fi
