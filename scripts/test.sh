#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: installs what it needs, then
# runs every test of every crate (CPU-side NVRTC tests included).
# GPU tests are opt-in: KILN_GPU_TESTS=1 scripts/test.sh -- --ignored
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-cuda-wheels.sh
cargo test --workspace --all-features --locked "$@"
