#!/usr/bin/env bash
# Installs NVRTC, the CCCL headers that hold CUB, and the CUDA runtime headers
# (cuda_fp16.h, cuda_bf16.h, cuda_fp8.h) from PyPI wheels where no CUDA
# toolkit provides them. Compiling CUDA needs no GPU. Idempotent.
set -euo pipefail
NVRTC_VERSION=${KILN_NVRTC_WHEEL_VERSION:-13.0.88}
CCCL_VERSION=${KILN_CCCL_WHEEL_VERSION:-13.0.85}
RUNTIME_VERSION=${KILN_CUDA_RUNTIME_WHEEL_VERSION:-13.0.88}
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install-cuda-wheels: $PY not found; install Python 3 with pip, or set KILN_NVRTC to libnvrtc.so" >&2
  exit 1
fi
if "$PY" - "$NVRTC_VERSION" "$CCCL_VERSION" "$RUNTIME_VERSION" <<'PYEOF'
import sys
from importlib import metadata
want = {
    "nvidia-cuda-nvrtc": sys.argv[1],
    "nvidia-cuda-cccl": sys.argv[2],
    "nvidia-cuda-runtime": sys.argv[3],
}
try:
    ok = all(metadata.version(k) == v for k, v in want.items())
except metadata.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PYEOF
then
  echo "install-cuda-wheels: nvidia-cuda-nvrtc $NVRTC_VERSION, nvidia-cuda-cccl $CCCL_VERSION and nvidia-cuda-runtime $RUNTIME_VERSION already installed"
  exit 0
fi
"$PY" -m pip install --quiet --disable-pip-version-check \
  "nvidia-cuda-nvrtc==$NVRTC_VERSION" "nvidia-cuda-cccl==$CCCL_VERSION" \
  "nvidia-cuda-runtime==$RUNTIME_VERSION"
echo "install-cuda-wheels: installed nvidia-cuda-nvrtc $NVRTC_VERSION, nvidia-cuda-cccl $CCCL_VERSION and nvidia-cuda-runtime $RUNTIME_VERSION"
