//! What a library depending on `kiln` compiles: with every library feature
//! on, no command-line parser, no JSON writer and no `tracing` subscriber
//! (those belong to applications: the `kiln` tool is `kiln-tool`), and the
//! backends come from their own crates.

use std::process::Command;

/// The packages `kiln` depends on for building (no dev- or
/// build-dependencies), with `features`.
fn normal_dependencies(features: &str) -> Vec<String> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args(["tree", "--locked", "-p", "kiln-rs", "-e", "normal"])
        .args(["--features", features])
        .args(["--prefix", "none", "--format", "{p}"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo tree failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let mut names: Vec<String> = String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.split_whitespace().next())
        .map(str::to_owned)
        .collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn libraries_depending_on_kiln_compile_no_application_crates() {
    let with_everything = normal_dependencies("cuda,redis,ctor");
    for application_only in ["clap", "serde_json", "tracing-subscriber", "kiln-tool"] {
        assert!(
            !with_everything.iter().any(|name| name == application_only),
            "kiln depends on {application_only}: {with_everything:?}"
        );
    }
    for backend in ["kiln-cuda", "kiln-redis"] {
        assert!(
            with_everything.iter().any(|name| name == backend),
            "the features cuda and redis bring {backend}: {with_everything:?}"
        );
    }

    let plain = normal_dependencies("");
    for name in ["kiln-cuda", "cudarc", "kiln-redis", "redis", "rustls"] {
        assert!(
            !plain.iter().any(|found| found == name),
            "kiln without features depends on {name}: {plain:?}"
        );
    }
}
