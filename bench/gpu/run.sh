#!/usr/bin/env bash
# Runs on a GPU machine, from the bundle folder scripts/gpu-bundle.sh wrote
# (no Rust toolchain and no network needed there; a CUDA toolkit for nvcc and
# Python for the peers). Every step has its own timeout and all of them end by
# one deadline (KILN_GPU_BUDGET seconds, default 290), so one hang cannot eat
# the run. Writes to $OUT (default ./out): gpu-run.json (everything),
# gpu-run.md (the tables) and logs.tar.gz (every step's output); the
# repository keeps the last run's gpu-run.json and gpu-run.md in
# bench/gpu/results/ (BENCHMARKS.md cites them).
#
#   OUT=/some/dir bash .gpu/run.sh
#
# Steps: the demo application --gpu served
# exact CUBINs, a compatible CUBIN (sm_90a on an sm_90 device) and PTX, each
# normal and stripped (env -i, fresh HOME, PATH=/usr/bin:/bin); both driver
# families (src/drivers.py: the NVRTC 12 entries with the driver served as
# CUDA 12.8, the NVRTC 13 ones, an NVRTC 13.5 image's CUBINs loaded and its PTX
# refused by Kiln); the JIT cache
# figures (kiln-bench jit: first process, second process, second machine
# through a loopback redis-server); kiln-bench --gpu; and side by side, 9
# interleaved rounds of fresh processes: the nvcc floor (built here), cudarc
# alone with the same CUBIN, Kiln, and the Python peers installed here; and
# the GPU tests (KILN_GPU_TESTS=1), with what is left of the budget.
# KILN_GPU_JIT_RUNS and KILN_GPU_JIT_WHOLE_RUNS (default 9 and 3) set the
# runs of `kiln-bench jit`.
set -u

BUNDLE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$BUNDLE/out}
BUDGET=${KILN_GPU_BUDGET:-290}
WORK=$(mktemp -d /tmp/kiln-gpu.XXXXXX)
LOGS=$WORK/logs
mkdir -p "$OUT" "$LOGS"
STARTED=$(date +%s)
DEADLINE=$((STARTED + BUDGET))
RESERVE=8 # seconds kept for the report

log() { echo "[run.sh +$(($(date +%s) - STARTED))s] $*"; }

# step NAME LIMIT COMMAND...: runs COMMAND with at most LIMIT seconds (less if
# the deadline is nearer), its output in $LOGS/NAME.out; records the outcome.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - RESERVE - $(date +%s)))
  if ((left < 5)); then
    log "$name: skipped, the run's budget is spent"
    echo "{\"name\":\"$name\",\"rc\":-1,\"seconds\":0,\"skipped\":true}" >>"$WORK/steps.jsonl"
    return 1
  fi
  ((limit > left)) && limit=$left
  log "$name (at most ${limit}s)"
  local t0 t1 rc
  t0=$(date +%s.%N)
  timeout --kill-after=5 "$limit" "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
  rc=$?
  t1=$(date +%s.%N)
  local seconds
  seconds=$(awk "BEGIN {print $t1 - $t0}")
  echo "{\"name\":\"$name\",\"rc\":$rc,\"seconds\":$seconds}" >>"$WORK/steps.jsonl"
  if ((rc != 0)); then
    log "$name: exit $rc; last lines:"
    tail -n 15 "$LOGS/$name.err" "$LOGS/$name.out" | sed 's/^/    /'
  fi
  return $rc
}

finish() {
  log "writing the report"
  python3 "$BUNDLE/src/report.py" "$WORK" "$OUT/gpu-run.json" "$OUT/gpu-run.md" 2>"$LOGS/report.err" ||
    log "report.py failed: $(tail -n 3 "$LOGS/report.err")"
  cp "$WORK"/*.json "$LOGS/" 2>/dev/null
  tar -C "$WORK" -czf "$OUT/logs.tar.gz" logs jit bench 2>/dev/null
  [[ -f $OUT/gpu-run.md ]] && cat "$OUT/gpu-run.md"
  log "done in $(($(date +%s) - STARTED))s"
}
trap finish EXIT

# --- The machine -----------------------------------------------------------
if ! nvidia-smi -L >"$LOGS/nvidia-smi.out" 2>&1; then
  log "no GPU here (nvidia-smi -L failed): $(head -n 3 "$LOGS/nvidia-smi.out")"
  echo "{\"name\":\"preflight\",\"rc\":1,\"seconds\":0}" >>"$WORK/steps.jsonl"
  exit 1
fi
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)
DRIVER=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -n 1)
NVCC=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
CUDA_ROOT=${CUDA_HOME:-$(dirname "$(dirname "${NVCC:-/usr/local/cuda/bin/nvcc}")")}
python3 - "$WORK/machine.json" "$GPU_NAME" "$DRIVER" "$NVCC" <<'EOF'
import json, os, platform, sys, time
path, gpu, driver, nvcc = sys.argv[1:5]
versions = {}
for module in ("cupy", "cuda.core", "triton", "torch", "numpy"):
    try:
        from importlib import metadata
        name = {"cuda.core": "cuda-core", "cupy": "cupy-cuda13x"}.get(module, module)
        versions[module] = metadata.version(name)
    except Exception as error:  # not installed
        versions[module] = None
json.dump({
    "gpu": gpu, "driver": driver, "nvcc": nvcc,
    "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
    "kernel": platform.release(), "cpus": os.cpu_count(), "python": platform.python_version(),
    "packages": versions,
}, open(path, "w"), indent=1)
EOF
log "$GPU_NAME, driver $DRIVER, nvcc ${NVCC:-none}"
export PATH=$CUDA_ROOT/bin:$PATH

# --- What the tests and the NVRTC path compile with -------------------------
mkdir -p "$WORK/cccl"
tar -C "$WORK/cccl" -xJf "$BUNDLE/cccl.tar.xz" && export KILN_CCCL_INCLUDE=$WORK/cccl/cccl
NVRTC=$(ls "$CUDA_ROOT"/lib64/libnvrtc.so.13* "$CUDA_ROOT"/lib/libnvrtc.so.13* 2>/dev/null | head -n 1)
[[ -z $NVRTC ]] && NVRTC=$(python3 -c "import nvidia, glob, os; print(next(iter(sorted(g for p in nvidia.__path__ for g in glob.glob(os.path.join(p, '*', 'lib', 'libnvrtc.so.13*')))), ''))" 2>/dev/null)
[[ -n $NVRTC ]] && export KILN_NVRTC=$NVRTC
log "NVRTC: ${KILN_NVRTC:-not found}; CCCL: ${KILN_CCCL_INCLUDE:-not found}"
export KILN_CACHE_DIR=$WORK/cache-dev
# The programs (bin/, redis/), unpacked where they may run.
tar -C "$WORK" -xJf "$BUNDLE/payload.tar.xz" || { log "cannot unpack payload.tar.xz"; exit 1; }
BIN=$WORK/bin

# --- The nvcc floor, built here ---------------------------------------------
step build-floor 120 nvcc -O2 -gencode arch=compute_90,code=sm_90 -o "$WORK/floor" "$BUNDLE/src/floor.cu"

# --- The demo application: exact CUBIN, compatible CUBIN, PTX --------------
# A production machine: nothing but the driver, a fresh HOME, the system's PATH.
STRIPPED=(env -i PATH=/usr/bin:/bin)
step demo-exact 60 "$BIN/demo-exact" --gpu --json
step demo-exact-stripped 60 "${STRIPPED[@]}" HOME="$(mktemp -d)" "$BIN/demo-exact" --gpu --json
step demo-compatible 60 "$BIN/demo-compatible" --gpu --json
step demo-compatible-stripped 60 "${STRIPPED[@]}" HOME="$(mktemp -d)" "$BIN/demo-compatible" --gpu --json
# PTX: the driver's cache off; a first process JIT-compiles and keeps the
# CUBINs in its disk cache, a second process loads them.
step demo-ptx 90 env CUDA_CACHE_DISABLE=1 KILN_CACHE_DIR="$WORK/cache-ptx" "$BIN/demo-ptx" --gpu --json
step demo-ptx-second-process 60 env CUDA_CACHE_DISABLE=1 KILN_CACHE_DIR="$WORK/cache-ptx" "$BIN/demo-ptx" --gpu --json
step demo-ptx-stripped 90 "${STRIPPED[@]}" HOME="$(mktemp -d)" CUDA_CACHE_DISABLE=1 "$BIN/demo-ptx" --gpu --json

# --- Both driver families from one image; a too new NVRTC's PTX refused -------
# CUDA 12 entries (the driver served as 12.8), CUDA 13 entries, NVRTC 13.5
# CUBINs that load and PTX that Kiln refuses: src/drivers.py (PASS/FAIL lines).
step drivers 120 python3 "$BUNDLE/src/drivers.py" "$BIN" "$WORK/drivers.json"

# --- The driver's JIT once per fleet -----------------------------------------
mkdir -p "$WORK/jit"
step jit 150 "$BIN/kiln-bench" jit --fixture "$BUNDLE/fixture" \
  --redis-server "$WORK/redis/redis-server" --signing-key "$BUNDLE/keys/fleet" \
  --runs ${KILN_GPU_JIT_RUNS:-9} --whole-runs ${KILN_GPU_JIT_WHOLE_RUNS:-3} --work "$WORK/jit-work" --out "$WORK/jit"

# --- kiln-bench --gpu -----------------------------------------------------------
step bench-gpu 60 "$BIN/kiln-bench" --gpu --workload synthetic --modes kiln-embedded \
  --runs 9 --scale 0 --rss-mib 0 --out "$WORK/bench"

# --- Side by side -------------------------------------------------------------
CUBIN=$BUNDLE/fixture/axpy_sm90.cubin
ENTRY=$(cat "$BUNDLE/fixture/axpy_sm90.entry")
programs=(
  --program "nvcc floor=$WORK/floor"
  --program "cudarc alone=$BIN/cudarc-alone"
  --program "Kiln (kiln-bench gpu --path cubin)=$BIN/kiln-bench gpu --path cubin"
  --program "Kiln, 19 demo kernels (kiln-demo-app --gpu)=$BIN/demo-exact --gpu"
)
warm=()
has() { python3 -c "import $1" >/dev/null 2>&1; }
if has cupy; then programs+=(--program "CuPy RawModule, cache warm=python3 $BUNDLE/src/peers.py cupy"); warm+=(--warm "CuPy RawModule, cache warm"); fi
if has cuda.core; then programs+=(--program "cuda.core, the same CUBIN=python3 $BUNDLE/src/peers.py cuda-core $CUBIN $ENTRY"); fi
if has triton; then programs+=(--program "Triton, cache warm=python3 $BUNDLE/src/peers.py triton"); warm+=(--warm "Triton, cache warm"); fi
# The rounds stop when the budget is spent (at least 9 are asked for).
ROUNDS_BUDGET=$((DEADLINE - RESERVE - $(date +%s) - 25))
((ROUNDS_BUDGET > 100)) && ROUNDS_BUDGET=100
((ROUNDS_BUDGET < 30)) && ROUNDS_BUDGET=30
step compare 200 python3 "$BUNDLE/src/compare.py" --rounds 9 --timeout 40 --budget "$ROUNDS_BUDGET" \
  --out "$WORK" --json compare.json "${programs[@]}" "${warm[@]}"

# --- The GPU tests, with what is left of the budget ------------------------------
step gpu-tests 100 env KILN_GPU_TESTS=1 "$BIN/cuda_gpu" --include-ignored --test-threads=1 --nocapture

exit 0
