//! Arbitrary bytes as an image: open, iterate, look up, read payloads.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = kiln_image::fuzz_support::exercise(data);
});
