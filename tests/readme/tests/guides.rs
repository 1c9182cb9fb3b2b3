//! Every Markdown file of `docs/` has its Rust blocks doc-tested: `GUIDES`
//! (each file included as a doc-tested item of `kiln-readme`) names each one.

use std::path::Path;

#[test]
fn every_guide_in_docs_is_doc_tested() {
    let docs = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs");
    let mut found: Vec<String> = std::fs::read_dir(&docs)
        .expect("docs/ is readable")
        .map(|entry| entry.expect("a directory entry").file_name())
        .filter_map(|name| name.into_string().ok())
        .filter(|name| name.ends_with(".md"))
        .collect();
    found.sort();
    let mut tested: Vec<String> = kiln_readme::GUIDES
        .iter()
        .map(|name| (*name).to_owned())
        .collect();
    tested.sort();
    assert_eq!(
        found, tested,
        "add each guide of docs/ to the `guides!` list in tests/readme/src/lib.rs"
    );
}
