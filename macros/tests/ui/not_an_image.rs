// The test project's manifest is a file, but not a Kiln image.
kiln_macros::include_image!("Cargo.toml");

fn main() {}
