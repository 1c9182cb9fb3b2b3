//! `kiln settings`, run as its own process with a chosen environment: each
//! switch's value and where it came from; and the switch table of
//! `docs/switches.md`, which must be the one the declarations generate.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

/// `kiln ARGS` with only `vars` set.
fn kiln(args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command.args(args).env_clear();
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("run kiln")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The line of `switch` in `kiln settings`' text output.
fn line<'a>(text: &'a str, switch: &str) -> &'a str {
    text.lines()
        .find(|line| line.split_whitespace().next() == Some(switch))
        .unwrap_or_else(|| panic!("no line for {switch}:\n{text}"))
}

#[test]
fn every_switch_is_listed_with_its_value_and_where_it_came_from() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = dir.path().join("keys.pub");
    let key = kiln_image::SigningKey::from_secret_bytes([3; 32]).public_key();
    std::fs::write(&keys, format!("{key}\n")).expect("write keys");
    let keys = keys.to_str().expect("UTF-8 path");
    let vars = [
        ("KILN_DISABLE", "1"),
        ("KILN_ALWAYS_COMPILE", "maybe"),
        ("KILN_MEMORY_MAX_BYTES", "64M"),
        ("KILN_TRUSTED_KEYS", keys),
        ("KILN_REMOTE_TIMEOUT_MS", "250"),
        ("KILN_STRICT_TOOLCHAIN", "yes"),
        ("KILN_NVRTC_12", "/opt/nvrtc12.so"),
        ("KILN_REMOTE_CACHE", "redis://:s3cret@cache.internal:6379/2"),
    ];
    let output = kiln(&["settings"], &vars);
    assert!(output.status.success(), "{output:?}");
    let text = stdout(&output);
    let words = |switch: &str| -> Vec<String> {
        line(&text, switch)
            .split_whitespace()
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        words("KILN_DISABLE")[1..],
        ["on", "variable", "run", "time"]
    );
    assert_eq!(words("KILN_LOG")[1..], ["unset", "default", "run", "time"]);
    assert_eq!(words("KILN_MEMORY_MAX_BYTES")[1..3], ["64M", "variable"]);
    let ignored = line(&text, "KILN_ALWAYS_COMPILE");
    assert!(
        ignored.contains("off") && ignored.contains("not understood") && ignored.contains("maybe"),
        "{ignored}"
    );
    let trusted = line(&text, "KILN_TRUSTED_KEYS");
    assert!(
        trusted.contains("1 trusted keys") && trusted.contains("file"),
        "{trusted}"
    );
    // The backends' switches come through their declarations.
    assert_eq!(words("KILN_REMOTE_TIMEOUT_MS")[1..3], ["250", "variable"]);
    assert_eq!(words("KILN_STRICT_TOOLCHAIN")[1..3], ["on", "variable"]);
    assert!(line(&text, "KILN_NVRTC_<major>").contains("KILN_NVRTC_12=/opt/nvrtc12.so"));
    assert_eq!(
        words("KILN_CUDA_ARCHS").last().map(String::as_str),
        Some("time")
    );
    assert!(line(&text, "KILN_CUDA_ARCHS").contains("build time"));

    let output = kiln(&["settings", "--json"], &vars);
    assert!(output.status.success(), "{output:?}");
    let json: Value = serde_json::from_slice(&output.stdout).expect("JSON");
    let switches = json["switches"].as_array().expect("a list");
    let of = |name: &str| {
        switches
            .iter()
            .find(|s| s["name"] == name)
            .unwrap_or_else(|| panic!("{name} missing: {json}"))
    };
    assert_eq!(of("KILN_DISABLE")["value"], "on");
    assert_eq!(of("KILN_DISABLE")["source"], "variable");
    assert_eq!(of("KILN_DISABLE")["section"], "cache");
    assert_eq!(of("KILN_ALWAYS_COMPILE")["source"], "ignored");
    assert_eq!(of("KILN_ALWAYS_COMPILE")["ignored"], "maybe");
    assert_eq!(of("KILN_CACHE")["source"], "default");
    assert_eq!(of("KILN_TRUSTED_KEYS")["source"], "file");
    assert_eq!(of("KILN_REMOTE_CACHE")["section"], "remote");
    assert!(!json.to_string().contains("s3cret"), "{json}");
    assert_eq!(of("KILN_REMOTE_CACHE")["when"], "run time");
    assert_eq!(of("KILN_EMBED")["when"], "build time");
}

/// The command that regenerates the table.
const REGENERATE: &str = "cargo run -q -p kiln-tool -- settings --write-table docs/switches.md";

#[test]
fn the_switch_table_of_the_docs_is_the_generated_one() {
    let doc = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/switches.md");
    let text = std::fs::read_to_string(&doc).expect("docs/switches.md");
    let output = kiln(&["settings", "--markdown"], &[]);
    assert!(output.status.success(), "{output:?}");
    let table = stdout(&output);
    assert!(table.contains("| `KILN_REMOTE_CACHE` |") && table.contains("| `KILN_NVRTC` |"));
    let begin = kiln_core::settings::TABLE_BEGIN;
    let end = kiln_core::settings::TABLE_END;
    let expected = format!("{begin}\n{table}\n{end}");
    assert!(
        text.contains(&expected),
        "docs/switches.md's switch table differs from the switches declared in the code \
         (or its markers are not {begin:?} and {end:?}): regenerate it with `{REGENERATE}`"
    );
}

#[test]
fn write_table_replaces_only_what_is_between_the_markers() {
    let dir = tempfile::tempdir().expect("temp dir");
    let doc = dir.path().join("switches.md");
    let begin = kiln_core::settings::TABLE_BEGIN;
    let end = kiln_core::settings::TABLE_END;
    std::fs::write(
        &doc,
        format!("# Title\n\n{begin}\n| stale |\n{end}\n\nAfter.\n"),
    )
    .expect("write");
    let path = doc.to_str().expect("UTF-8 path");
    let output = kiln(&["settings", "--write-table", path], &[]);
    assert!(output.status.success(), "{output:?}");
    let text = std::fs::read_to_string(&doc).expect("read");
    assert!(text.starts_with("# Title\n\n") && text.ends_with(&format!("{end}\n\nAfter.\n")));
    assert!(
        !text.contains("| stale |") && text.contains("| `KILN_DISABLE` |"),
        "{text}"
    );

    std::fs::write(&doc, "no markers\n").expect("write");
    let output = kiln(&["settings", "--write-table", path], &[]);
    assert_eq!(output.status.code(), Some(2), "{output:?}");
    assert!(String::from_utf8_lossy(&output.stderr).contains("no switch table"));
}
