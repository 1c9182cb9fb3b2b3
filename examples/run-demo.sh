#!/usr/bin/env bash
# The demo end to end on a fresh machine: installs NVRTC and the CUB headers
# from the Python wheels unless a CUDA toolkit (or KILN_NVRTC) provides them,
# builds the two example kernel libraries (their build scripts precompile
# their kernels into images) and runs the application, which finds every
# kernel in those images, then compiles them cold for comparison.
#
#   examples/run-demo.sh            # extra arguments go to kiln-demo-app
#   examples/run-demo.sh --gpu      # also launch each kernel on GPU 0 and check it
set -euo pipefail
cd "$(dirname "$0")/.."
toolkit=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
if [ -z "${KILN_NVRTC:-}" ] && ! ls "$toolkit"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  scripts/install-cuda-wheels.sh
fi
cargo run -p kiln-demo-app -- --compare-cold "$@"
