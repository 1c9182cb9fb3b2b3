kiln_macros::include_image!("a.kimg", "b.kimg");

fn main() {}
