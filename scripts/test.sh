#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: installs what it needs, then
# runs every test of every crate (CPU-side NVRTC tests and the Redis tier's
# tests against real loopback servers included).
# GPU tests are opt-in: KILN_GPU_TESTS=1 scripts/test.sh -- --ignored
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda-wheels.sh      # NVRTC + CUB headers from PyPI wheels
scripts/start-redis.sh --install    # redis-server (+ openssl for the TLS test)
cargo test --workspace --all-features --locked "$@"
