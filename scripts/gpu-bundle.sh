#!/usr/bin/env bash
# Builds, on a machine with Rust, NVRTC and the CCCL headers (no GPU needed),
# everything a run on a GPU machine needs, into one folder with its run.sh:
#
#   scripts/gpu-bundle.sh [BUNDLE]        # default: .gpu in the repository
#   OUT=/dir bash BUNDLE/run.sh           # on the GPU machine (see bench/gpu/run.sh)
#
# The GPU machine needs the NVIDIA driver, a CUDA toolkit (nvcc builds the
# floor there) and Python 3 (the peers it has are measured); no Rust and no
# network. The bundle holds, stripped, under 64 MiB:
#
#   bin/demo-exact, demo-compatible, demo-ptx   kiln-demo-app --gpu, its images
#       built for the default targets (NVRTC 13 and NVRTC 12 entries), for
#       sm_80,sm_90a (a compatible CUBIN on sm_90) and for sm_80,sm_86 (no CUBIN
#       for sm_90: PTX);
#   bin/demo-nvrtc135, demo-nvrtc135-ptx   kiln-demo-app with images built by
#       NVRTC 13.5 (installed apart, scripts/install-cuda-wheels.sh --nvrtc-into)
#       for sm_80,sm_90 and for sm_80,sm_86, stating 13.5 as their oldest driver:
#       on an R580 driver the first one's CUBINs load and run, the second one's
#       PTX is refused with Kiln's own error (src/drivers.py checks both, and the
#       default demo's CUDA 12 and CUDA 13 entries);
#   bin/kiln-bench, bin/cudarc-alone (the sm_90 CUBIN of kiln_axpy<float>
#       that Kiln serves, embedded), bin/cuda_gpu (the GPU tests, built with
#       --no-run);
#   fixture/  the real-size PTX library of `kiln-bench jit`, and that CUBIN;
#   keys/     a signing key for the remote tier (`kiln keygen`);
#   redis/    redis-server and the libraries it links that are not glibc's
#       or GCC's (see `ldd`), behind a wrapper that sets LD_LIBRARY_PATH for
#       it only (bin/ and redis/ travel as payload.tar.xz);
#   cccl.tar.xz  the CCCL headers the GPU tests compile with;
#   src/      floor.cu, peers.py, compare.py, report.py; run.sh.
#
# KILN_GPU_FIXTURE=DIR reuses a `kiln-bench large-fixture` folder (the
# fixture takes about a minute of NVRTC).
set -euo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
BUNDLE=${1:-$REPO/.gpu}
TARGET=${CARGO_TARGET_DIR:-$REPO/target}
LIMIT=$((64 * 1024 * 1024))
cd "$REPO"

say() { echo "gpu-bundle: $*" >&2; }
die() { say "$*"; exit 1; }

command -v cargo >/dev/null || die "cargo not found: the bundle is built where Rust is"
rm -rf "$BUNDLE"
mkdir -p "$BUNDLE"/{bin,fixture,keys,redis/lib,src}

# cargo build/test ... --message-format=json: the executables it reports for
# target NAME (the last one).
executable() {
  python3 -c '
import json, sys
name, found = sys.argv[1], None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == name and m.get("executable"):
        found = m["executable"]
print(found or "")' "$1"
}

# The release build of the three programs, always together (so cargo
# resolves the same features each time and rebuilds only what changed), with
# the environment given; its JSON messages.
release() {
  env -u KILN_DEMO_ARCHS "$@" cargo build --release --locked -p kiln-tool -p kiln-demo-app -p kiln-bench \
    --message-format=json
}

# 1. The kiln tool, the demo for its default targets, and the CUBIN Kiln
#    serves an sm_90 device for kiln_axpy<float>.
say "release build for the default targets"
JSON=$(release)
KILN=$(echo "$JSON" | executable kiln)
[[ -x $KILN ]] || die "no kiln executable"
cp "$(echo "$JSON" | executable kiln-demo-app)" "$BUNDLE/bin/demo-exact"
IMAGE=$(ls -t "$TARGET"/release/build/kiln-kernels-demo-*/out/kiln-kernels-demo.kimg | head -n 1)
"$KILN" inspect "$IMAGE" --json | python3 -c '
import json, sys
for e in json.load(sys.stdin)["entries"]:
    if e["name"] == "axpy_f32" and e["owner_label"].endswith("/sm_90"):
        cubin = next(a for a in e["artifacts"] if a["kind"] == "cubin")
        print(e["owner_label"])
        print(cubin["entry_points"][0])
        break
else:
    sys.exit("no sm_90 CUBIN of axpy_f32 in the image")' >"$BUNDLE/fixture/axpy.found"
OWNER=$(sed -n 1p "$BUNDLE/fixture/axpy.found")
sed -n 2p "$BUNDLE/fixture/axpy.found" >"$BUNDLE/fixture/axpy_sm90.entry"
rm "$BUNDLE/fixture/axpy.found"
"$KILN" extract "$IMAGE" axpy_f32 --owner "$OWNER" --kind cubin -o "$BUNDLE/fixture/axpy_sm90.cubin" >/dev/null
KILN_COPY=$(mktemp -d)/kiln
cp "$KILN" "$KILN_COPY" && KILN=$KILN_COPY

# 2. kiln-bench and cudarc-alone, which embeds that CUBIN.
say "kiln-bench and cudarc-alone"
ENTRY=$(cat "$BUNDLE/fixture/axpy_sm90.entry")
JSON=$(release CUDARC_ALONE_CUBIN="$BUNDLE/fixture/axpy_sm90.cubin" CUDARC_ALONE_ENTRY="$ENTRY")
cp "$(echo "$JSON" | executable kiln-bench)" "$BUNDLE/bin/kiln-bench"
cp "$(echo "$JSON" | executable cudarc-alone)" "$BUNDLE/bin/cudarc-alone"

# 3. The demo served a compatible CUBIN (sm_90a on sm_90), and PTX only.
for pair in demo-compatible:sm_80,sm_90a demo-ptx:sm_80,sm_86; do
  say "kiln-demo-app for ${pair#*:} -> bin/${pair%%:*}"
  JSON=$(release KILN_DEMO_ARCHS="${pair#*:}" CUDARC_ALONE_CUBIN="$BUNDLE/fixture/axpy_sm90.cubin" CUDARC_ALONE_ENTRY="$ENTRY")
  cp "$(echo "$JSON" | executable kiln-demo-app)" "$BUNDLE/bin/${pair%%:*}"
done

# 3b. Images built by NVRTC 13.5, a newer NVRTC than the GPU machine's driver.
NVRTC_135=$(scripts/install-cuda-wheels.sh --nvrtc-into "$TARGET/nvrtc-13.5" 13.5.37) ||
  die "NVRTC 13.5 could not be installed"
for pair in demo-nvrtc135:sm_80,sm_90 demo-nvrtc135-ptx:sm_80,sm_86; do
  say "kiln-demo-app by NVRTC 13.5 for ${pair#*:} -> bin/${pair%%:*}"
  # The demo alone: the other libraries' blocks (kiln-bench's) would refuse
  # NVRTC 13.5's PTX for the drivers their plans state, as they should.
  JSON=$(env -u KILN_DEMO_ARCHS KILN_NVRTC="$NVRTC_135" KILN_IGNORE_SHIPPED=1 KILN_DEMO_ARCHS="${pair#*:}" \
    KILN_DEMO_OLDEST_DRIVER=13.5 cargo build --release --locked -p kiln-demo-app --message-format=json)
  cp "$(echo "$JSON" | executable kiln-demo-app)" "$BUNDLE/bin/${pair%%:*}"
done

# 4. The GPU tests, built, not run.
say "the GPU tests (cargo test --no-run)"
TESTS=$(cargo test --locked -p kiln-kernel-set --test cuda_gpu --no-run --message-format=json | executable cuda_gpu)
[[ -x $TESTS ]] || die "no cuda_gpu test executable"
cp "$TESTS" "$BUNDLE/bin/cuda_gpu"

# 5. The real-size PTX library.
if [[ -n ${KILN_GPU_FIXTURE:-} ]]; then
  say "the large PTX library from $KILN_GPU_FIXTURE"
  cp "$KILN_GPU_FIXTURE"/large.kimg "$KILN_GPU_FIXTURE"/large.record "$BUNDLE/fixture/"
else
  say "the large PTX library (NVRTC, about a minute)"
  "$BUNDLE/bin/kiln-bench" large-fixture --out "$BUNDLE/fixture" >&2
fi

# 6. A signing key for the fleet: the remote tier's stores are signed with it,
#    and readers that trust it also take only signed image files, so the
#    large library's image is signed too.
"$KILN" keygen -o "$BUNDLE/keys/fleet" >/dev/null
"$KILN" sign "$BUNDLE/fixture/large.kimg" --key "$BUNDLE/keys/fleet" >/dev/null

# 7. The CCCL headers the GPU tests compile with.
CCCL=${KILN_CCCL_INCLUDE:-}
if [[ -z $CCCL ]]; then
  CCCL=$(python3 -c 'import glob, os, nvidia
found = sorted(g for p in nvidia.__path__ for g in glob.glob(os.path.join(p, "*", "include", "cccl")))
print(found[0] if found else "")' 2>/dev/null || true)
fi
[[ -f $CCCL/cub/cub.cuh ]] || die "CCCL headers not found (set KILN_CCCL_INCLUDE, or run scripts/install-cuda-wheels.sh)"
say "CCCL headers from $CCCL"
tar -C "$(dirname "$CCCL")" -cJf "$BUNDLE/cccl.tar.xz" "$(basename "$CCCL")"

# 8. redis-server, with the libraries it links that glibc does not provide.
SERVER=$(readlink -f "$(command -v redis-server)") || die "redis-server not found (scripts/start-redis.sh --install)"
cp "$SERVER" "$BUNDLE/redis/redis-server.bin"
ldd "$SERVER" | awk '/=> \// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
  libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux* | libstdc++.so.* | libgcc_s.so.*) ;;
  *) cp -L "$lib" "$BUNDLE/redis/lib/" ;;
  esac
done
cat >"$BUNDLE/redis/redis-server" <<'EOF'
#!/bin/sh
# redis-server with the libraries carried beside it (for it alone).
here=$(dirname "$0")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/redis-server.bin" "$@"
EOF
chmod 755 "$BUNDLE/redis/redis-server"

# 9. The sources run there.
cp bench/gpu/floor.cu bench/gpu/peers.py bench/gpu/compare.py bench/gpu/report.py bench/gpu/drivers.py "$BUNDLE/src/"
cp bench/gpu/run.sh "$BUNDLE/run.sh"
chmod 755 "$BUNDLE/run.sh"

strip "$BUNDLE"/bin/* "$BUNDLE/redis/redis-server.bin"
# The programs travel compressed (about a quarter of their size); run.sh
# unpacks them.
say "packing bin/ and redis/ into payload.tar.xz"
tar -C "$BUNDLE" -cf - bin redis | xz -T0 -6 >"$BUNDLE/payload.tar.xz"
rm -rf "$BUNDLE/bin" "$BUNDLE/redis"
SIZE=$(du -sb "$BUNDLE" | cut -f1)
du -sh "$BUNDLE"/* >&2
((SIZE <= LIMIT)) || die "the bundle is $SIZE bytes, over 64 MiB"
say "$BUNDLE: $((SIZE / 1024 / 1024)) MiB; on the GPU machine: OUT=/some/dir bash $(basename "$BUNDLE")/run.sh"
