#!/usr/bin/env bash
# Bounded fuzzing of the reliability targets: `merge_image` (arbitrary
# images merged into a Cache) and `key_derivation` (KeyBuilder and Owner
# from arbitrary fields), SECONDS each (default 60). Seeds merge_image with
# valid fixture images first. Needs cargo-fuzz (`cargo install cargo-fuzz`);
# works on a stable toolchain through RUSTC_BOOTSTRAP=1. Exits non-zero if a
# target finds a crash (saved under fuzz/artifacts/<target>/).
set -euo pipefail
seconds="${1:-60}"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
cargo run -q -p kiln-reliability --bin kiln-reliability-child -- seed-corpus fuzz/corpus/merge_image 16
mkdir -p fuzz/corpus/key_derivation
cd fuzz
for target in merge_image key_derivation; do
    RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" -- -max_total_time="$seconds"
done
