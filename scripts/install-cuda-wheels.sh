#!/usr/bin/env bash
# Installs NVRTC (and the CCCL headers that hold CUB) from PyPI wheels where no
# CUDA toolkit provides them. Compiling CUDA needs no GPU. Idempotent.
set -euo pipefail
NVRTC_VERSION=${KILN_NVRTC_WHEEL_VERSION:-13.0.88}
CCCL_VERSION=${KILN_CCCL_WHEEL_VERSION:-13.0.85}
PY=${PYTHON:-python3}
if ! command -v "$PY" >/dev/null 2>&1; then
  echo "install-cuda-wheels: $PY not found; install Python 3 with pip, or set KILN_NVRTC to libnvrtc.so" >&2
  exit 1
fi
if "$PY" - "$NVRTC_VERSION" "$CCCL_VERSION" <<'PYEOF'
import sys
from importlib import metadata
want = {"nvidia-cuda-nvrtc": sys.argv[1], "nvidia-cuda-cccl": sys.argv[2]}
try:
    ok = all(metadata.version(k) == v for k, v in want.items())
except metadata.PackageNotFoundError:
    ok = False
sys.exit(0 if ok else 1)
PYEOF
then
  echo "install-cuda-wheels: nvidia-cuda-nvrtc $NVRTC_VERSION and nvidia-cuda-cccl $CCCL_VERSION already installed"
  exit 0
fi
"$PY" -m pip install --quiet --disable-pip-version-check \
  "nvidia-cuda-nvrtc==$NVRTC_VERSION" "nvidia-cuda-cccl==$CCCL_VERSION"
echo "install-cuda-wheels: installed nvidia-cuda-nvrtc $NVRTC_VERSION and nvidia-cuda-cccl $CCCL_VERSION"
