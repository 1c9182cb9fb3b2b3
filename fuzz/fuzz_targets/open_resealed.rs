//! Arbitrary bytes with their index, body and header checksums recomputed,
//! so that mutations reach the structural checks behind the checksums.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    kiln_image::fuzz_support::reseal(&mut bytes);
    let _ = kiln_image::fuzz_support::exercise(&bytes);
});
