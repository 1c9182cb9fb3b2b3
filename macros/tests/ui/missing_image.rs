kiln_macros::include_image!("no-such-image.kimg");

fn main() {}
