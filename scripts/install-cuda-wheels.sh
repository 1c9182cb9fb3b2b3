#!/usr/bin/env bash
# Installs NVRTC, the CCCL headers that hold CUB, and the CUDA runtime headers
# (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) from PyPI wheels where no CUDA
# toolkit provides them, for CUDA 13 and for CUDA 12 side by side (the CUDA 12
# wheels live in nvidia/cuda_nvrtc, nvidia/cuda_cccl, nvidia/cuda_runtime; the
# CUDA 13 ones in nvidia/cu13). Compiling CUDA needs no GPU. Idempotent.
#
#   scripts/install-cuda-wheels.sh                       # both toolchains
#   scripts/install-cuda-wheels.sh --nvrtc-into DIR VER  # NVRTC VER alone, into DIR
#
# The second form installs one more NVRTC release apart from the others
# (`pip install --target`), for a build that must use exactly it (KILN_NVRTC);
# it prints the library's path.
set -euo pipefail
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install-cuda-wheels: $PY not found; install Python 3 with pip, or set KILN_NVRTC to libnvrtc.so" >&2
  exit 1
fi

if [[ ${1:-} == --nvrtc-into ]]; then
  DIR=${2:?--nvrtc-into DIR VERSION}
  VERSION=${3:?--nvrtc-into DIR VERSION}
  MAJOR=${VERSION%%.*}
  LIB=$(ls "$DIR"/nvidia/cu"$MAJOR"/lib/libnvrtc.so."$MAJOR" 2>/dev/null || true)
  if [[ -z $LIB ]] || [[ ! -f $DIR/.kiln-nvrtc-$VERSION ]]; then
    rm -rf "$DIR"
    "$PY" -m pip install --quiet --disable-pip-version-check --no-deps --target "$DIR" \
      "nvidia-cuda-nvrtc==$VERSION" >&2
    touch "$DIR/.kiln-nvrtc-$VERSION"
    LIB=$(ls "$DIR"/nvidia/cu"$MAJOR"/lib/libnvrtc.so."$MAJOR")
  fi
  echo "$LIB"
  exit 0
fi

NVRTC_VERSION=${KILN_NVRTC_WHEEL_VERSION:-13.0.88}
CCCL_VERSION=${KILN_CCCL_WHEEL_VERSION:-13.0.85}
RUNTIME_VERSION=${KILN_CUDA_RUNTIME_WHEEL_VERSION:-13.0.88}
NVRTC_12_VERSION=${KILN_NVRTC_12_WHEEL_VERSION:-12.9.86}
CCCL_12_VERSION=${KILN_CCCL_12_WHEEL_VERSION:-12.9.27}
RUNTIME_12_VERSION=${KILN_CUDA_RUNTIME_12_WHEEL_VERSION:-12.9.79}
WANT=(
  "nvidia-cuda-nvrtc==$NVRTC_VERSION"
  "nvidia-cuda-cccl==$CCCL_VERSION"
  "nvidia-cuda-runtime==$RUNTIME_VERSION"
  "nvidia-cuda-nvrtc-cu12==$NVRTC_12_VERSION"
  "nvidia-cuda-cccl-cu12==$CCCL_12_VERSION"
  "nvidia-cuda-runtime-cu12==$RUNTIME_12_VERSION"
)
if "$PY" - "${WANT[@]}" <<'PYEOF'
import sys
from importlib import metadata
ok = True
for spec in sys.argv[1:]:
    name, version = spec.split("==")
    try:
        ok = ok and metadata.version(name) == version
    except metadata.PackageNotFoundError:
        ok = False
sys.exit(0 if ok else 1)
PYEOF
then
  echo "install-cuda-wheels: ${WANT[*]} already installed"
  exit 0
fi
"$PY" -m pip install --quiet --disable-pip-version-check "${WANT[@]}"
echo "install-cuda-wheels: installed ${WANT[*]}"
