//! Arbitrary bytes (resealed first when the first byte is odd, so that
//! mutations reach the checks behind the checksums) read with everything
//! `kiln_image::fuzz_support::exercise` does: open at both verification
//! levels, every reader, every payload, full verification. A counting
//! global allocator asserts that no input makes the readers have more than
//! 8 × the input's length + 64 KiB allocated at once, plus 4 × the raw
//! bytes its compressed payload groups declare and 2 MiB for the zstd
//! decoder when there is one (the bound
//! `image-format/tests/hostile.rs` asserts over a fixed corpus).
#![no_main]

#[path = "../../image-format/tests/common/counting.rs"]
mod counting;

use counting::{Counting, allowed_peak_for, peak_during};

#[global_allocator]
static ALLOC: Counting = Counting;

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if data.first().is_some_and(|b| b & 1 == 1) {
        kiln_image::fuzz_support::reseal(&mut bytes);
    }
    let (_, peak) = peak_during(|| kiln_image::fuzz_support::exercise(&bytes));
    let allowed = allowed_peak_for(&bytes);
    assert!(
        peak <= allowed,
        "{peak} bytes allocated at once reading {} bytes (bound {allowed})",
        bytes.len(),
    );
});
