//! `include_image!` refuses, at compile time, an image it cannot find or
//! that fails verification, with a message naming what failed.

#[test]
fn missing_or_bad_images_do_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/ui/*.rs");
}
