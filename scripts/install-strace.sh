#!/usr/bin/env bash
# Installs strace (from the distribution's packages) unless it is on PATH:
# tests/e2e_stripped.rs runs the demo application under `strace -f` to prove
# from the process's own trace that it opened no NVRTC, ran no python3 and
# read no include tree. Idempotent.
set -euo pipefail
if command -v strace >/dev/null 2>&1; then
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install-strace: strace is missing and apt-get is not available: install strace yourself" >&2
  exit 1
fi
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  sudo="sudo"
fi
echo "install-strace: installing strace from the distribution's packages" >&2
$sudo apt-get update -qq >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends strace >&2
