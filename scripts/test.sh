#!/usr/bin/env bash
# The whole test suite, from a fresh checkout: installs what it needs, then
# the cheap checks (formatting, clippy and rustdoc, each failing on any
# warning), a bounded fuzzing pass, then every test of
# every crate (CPU-side NVRTC tests and the Redis tier's tests against real
# loopback servers included).
#
#   KILN_FUZZ_SECONDS=N   seconds per fuzz target (default 20; 0 skips fuzzing)
#   KILN_GPU_TESTS=1 scripts/test.sh    also the GPU tests (needs a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
# CI disks are small. A one-shot build gains nothing from incremental state,
# and a failure needs file:line in backtraces, not a debugger's variables:
# together `target/` after `cargo test --workspace --all-features --no-run`
# shrinks from 2.7 GB to 1.5 GB (dependencies already build without debug
# info; see Cargo.toml). CI counts as set unless empty, 0 or false, as in
# kiln_test_support::ci.
case "${CI:-}" in
  "" | 0 | false) ;;
  *)
    export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
    export CARGO_PROFILE_DEV_DEBUG="${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}"
    ;;
esac

# What the build and the suite need. First, because clippy runs the build
# scripts too, and the example libraries' build scripts compile their kernels
# with NVRTC.
scripts/install-cuda-wheels.sh      # NVRTC, CUB and CUDA runtime headers from PyPI wheels (CUDA 13 and 12)
# A newer NVRTC than the drivers' in the field, for the test of a plan whose
# PTX needs a newer driver than it says it serves (tests/e2e_toolchains.rs).
scripts/install-cuda-wheels.sh --nvrtc-into target/nvrtc-13.5 13.5.37 >/dev/null
scripts/start-redis.sh --install    # redis-server (+ openssl for the TLS test)
scripts/install-strace.sh           # strace, for tests/e2e_stripped.rs

# Cheap failures next: a formatting slip or a lint fails before the suite's
# build. The lints are the workspace's ([workspace.lints]
# in Cargo.toml); clippy checks the MSRV of `rust-version`.
cargo fmt --all --check
cargo clippy --workspace --all-targets --all-features --locked -- -D warnings
RUSTDOCFLAGS="${RUSTDOCFLAGS:-} -D warnings" cargo doc --no-deps --workspace --all-features --locked
# kiln-core's optional parts (`disk`, `record`, `build`): none, and each
# alone, build without warnings; the facade without them too (clippy, whose
# dependencies the line above built: only kiln-image and kiln-core again).
for features in "" disk record build; do
  cargo clippy --locked -q -p kiln-rs-core --no-default-features --features "$features" -- -D warnings
done
cargo clippy --locked -q -p kiln-rs --no-default-features -- -D warnings
# No import circles between the files of a library crate (ARCHITECTURE.md,
# the import rule).
python3 scripts/import-circles.py
# ... and the script still finds the circles it is meant to find.
for fixture in scripts/import-circles-fixtures/*/; do
  if python3 scripts/import-circles.py "$fixture" >/dev/null; then
    echo "scripts/import-circles.py found no circle in $fixture" >&2
    exit 1
  fi
done

fuzz_seconds=${KILN_FUZZ_SECONDS:-20}
if [ "$fuzz_seconds" != 0 ]; then
  # cargo-fuzz runs on the stable toolchain through RUSTC_BOOTSTRAP=1.
  command -v cargo-fuzz >/dev/null 2>&1 || cargo install --locked cargo-fuzz
  fuzz/run.sh "$fuzz_seconds"          # image open / iterate / payload access
  reliability/fuzz.sh "$fuzz_seconds"  # merging arbitrary images, key derivation
fi

# The example libraries' shipped images match what their blocks build today
# (the check docs/shipping.md gives library authors for their CI).
# About 2 s for kiln-large-library's 77 entries from a clean target: its
# build script only unpacks and checks the shipped image.
cargo run --locked -q -p kiln-tool -- ship --check -p kiln-kernels-demo -p kiln-activations-demo \
  -p kiln-nvcc-style -p kiln-large-library

cargo test --workspace --all-features --locked "$@"
