#!/usr/bin/env bash
# The demo end to end on a fresh machine: installs NVRTC and the CUB headers
# from the Python wheels unless a CUDA toolkit (or KILN_NVRTC) provides them,
# builds the two example kernel libraries (their build scripts precompile
# their kernels for sm_75 to sm_120 into images), runs the application, which
# finds every kernel in those images, then compiles them cold for comparison;
# then runs it again as on a production machine with only a GPU driver: an
# empty environment, no NVRTC, no headers, no Python to find them with.
#
#   examples/run-demo.sh            # extra arguments go to the first run
#   examples/run-demo.sh --gpu      # also launch each kernel on GPU 0 and check it
set -euo pipefail
cd "$(dirname "$0")/.."
toolkit=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}
if [ -z "${KILN_NVRTC:-}" ] && ! ls "$toolkit"/lib64/libnvrtc.so* >/dev/null 2>&1; then
  scripts/install-cuda-wheels.sh
fi
cargo run -p kiln-demo-app -- --compare-cold "$@"

app="${CARGO_TARGET_DIR:-target}/debug/kiln-demo-app"
home="$(mktemp -d)"
trap 'rm -rf "$home"' EXIT
echo
echo "== stripped: env -i HOME=<empty> PATH=/usr/bin:/bin kiln-demo-app --arch sm_87 =="
echo "   (an sm_87 GPU: no CUBIN of its own is shipped, the sm_86 ones run on it)"
env -i HOME="$home" PATH=/usr/bin:/bin "$app" --arch sm_87
echo
echo "== stripped, a kernel no image holds: the error says what to install =="
env -i HOME="$home" PATH=/usr/bin:/bin "$app" --uncatalogued --only axpy_i32 || true
