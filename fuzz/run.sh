#!/usr/bin/env bash
# Bounded fuzzing of the kiln-image reader: seeds the three image targets
# (open_image, open_resealed, bounded_memory) with the valid images the
# corpus test builds, then runs each target for SECONDS (default 60). Needs
# cargo-fuzz (`cargo install cargo-fuzz`); works on a stable toolchain
# through RUSTC_BOOTSTRAP=1. Exits non-zero if a target finds a crash or an
# input that breaks the memory bound (saved under fuzz/artifacts/<target>/).
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
for target in open_image open_resealed bounded_memory; do
    KILN_FUZZ_SEED_DIR="$root/fuzz/corpus/$target" cargo test -q -p kiln-image --test corpus base_images_read_back_clean
done
cd fuzz
for target in open_image open_resealed bounded_memory; do
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" -- -max_total_time="$seconds"
done
