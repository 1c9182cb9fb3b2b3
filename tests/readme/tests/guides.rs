//! The documents stay tested and coherent: every Markdown file of `docs/`
//! has its Rust blocks doc-tested (`GUIDES`, each file included as a
//! doc-tested item of `kiln-readme`, names each one), and CI runs the
//! README's test command.

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

/// The README's test command is what CI runs: `.ci/run`'s one command is
/// the second line of the README's *On a fresh machine* block.
#[test]
fn ci_runs_exactly_the_readmes_test_command() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README.md");
    let block = readme
        .split("## On a fresh machine")
        .nth(1)
        .and_then(|rest| rest.split("```sh\n").nth(1))
        .and_then(|rest| rest.split("```").next())
        .expect("the README's fresh-machine block");
    let commands: Vec<&str> = block
        .lines()
        .map(|line| line.split('#').next().unwrap_or("").trim())
        .filter(|command| !command.is_empty())
        .collect();
    assert_eq!(commands, ["examples/run-demo.sh", "scripts/test.sh"]);
    let ci = std::fs::read_to_string(root.join(".ci/run")).expect(".ci/run");
    let ci_commands: Vec<&str> = ci
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty() && !line.starts_with('#'))
        .filter(|line| !line.starts_with("set ") && !line.starts_with("cd "))
        .collect();
    assert_eq!(ci_commands, [commands[1]], "{ci}");
}
