//! The `kiln` command-line tool on real images: inspect, verify, diff,
//! merge, extract, install and cache, run as a separate process; hostile
//! text in images and cache directories is shown escaped.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, Verification,
};

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .output()
        .expect("run kiln")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn entry(owner: &str, name: &str, payloads: &[(ArtifactKind, &[u8])]) -> EntryData {
    EntryData {
        owner: Digest::of(owner.as_bytes()),
        owner_label: owner.to_owned(),
        key: Digest::of(name.as_bytes()),
        name: name.to_owned(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: format!("{name}_src"),
            fingerprint: Digest::of(b"v1"),
        }],
        artifacts: payloads
            .iter()
            .map(|(kind, bytes)| Artifact {
                kind: kind.clone(),
                entry_points: vec![format!("{name}_entry")],
                bytes: bytes.to_vec(),
            })
            .collect(),
    }
}

fn write(dir: &Path, file: &str, entries: Vec<EntryData>) -> PathBuf {
    let mut meta = ImageMeta::new("cli-test", "1.0");
    meta.labels.insert("file".into(), file.into());
    let mut writer = ImageWriter::new(meta);
    for entry in entries {
        writer.push(entry);
    }
    let path = dir.join(file);
    writer.write_atomic(&path).unwrap();
    path
}

fn sample(dir: &Path) -> PathBuf {
    write(
        dir,
        "a.kimg",
        vec![
            entry(
                "sm_90a",
                "saxpy",
                &[
                    (ArtifactKind::Ptx, b"ptx saxpy"),
                    (ArtifactKind::Cubin, b"cubin saxpy"),
                ],
            ),
            entry("sm_90a", "gemm", &[(ArtifactKind::Cubin, b"cubin gemm")]),
            entry("sm_80", "gemm", &[(ArtifactKind::Cubin, b"cubin gemm 80")]),
        ],
    )
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn inspect_shows_header_owners_and_entries() {
    let dir = tempfile::tempdir().unwrap();
    let image = sample(dir.path());
    let output = kiln(&["inspect", path_str(&image)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    let format = format!(
        "format    {} (rkyv 0.8.18, little-endian, 32-bit pointers, aligned primitives)",
        kiln_image::header::FORMAT_VERSION
    );
    for expected in [
        format.as_str(),
        "producer  cli-test 1.0",
        "entries   3 in 2 owners",
        "labels    file=a.kimg",
        "saxpy",
        "ptx,cubin",
        "9,11",
        "1..max",
        "saxpy_src",
        "sm_80",
    ] {
        assert!(text.contains(expected), "missing {expected:?} in:\n{text}");
    }
    let key = &Digest::of(b"saxpy").to_hex()[..12];
    assert!(text.contains(key));
    // Each name's targets, in image order, with their kinds.
    let targets = text.split("\ntargets\n").nth(1).expect("a targets section");
    let gemm = targets
        .lines()
        .find(|line| line.trim_start().starts_with("gemm"))
        .expect("gemm in the targets section");
    assert!(
        gemm.contains("sm_80 (cubin), sm_90a (cubin)"),
        "gemm's targets: {gemm:?}"
    );
    let saxpy = targets
        .lines()
        .find(|line| line.trim_start().starts_with("saxpy "))
        .expect("saxpy in the targets section");
    assert!(
        saxpy.contains("sm_90a (ptx,cubin)"),
        "saxpy's targets: {saxpy:?}"
    );
}

#[test]
fn inspect_json_describes_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let image = sample(dir.path());
    let output = kiln(&["inspect", "--json", path_str(&image)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        json["header"]["format_version"],
        kiln_image::header::FORMAT_VERSION
    );
    assert_eq!(json["header"]["rkyv_version"], "0.8.18");
    assert_eq!(json["header"]["entry_count"], 3);
    assert_eq!(json["meta"]["labels"]["file"], "a.kimg");
    assert_eq!(json["owners"].as_array().unwrap().len(), 2);
    let targets = json["targets"].as_array().unwrap();
    let gemm = targets.iter().find(|t| t["name"] == "gemm").unwrap();
    let gemm_targets: Vec<&str> = gemm["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["target"].as_str().unwrap())
        .collect();
    assert_eq!(gemm_targets, ["sm_80", "sm_90a"]);
    let entries = json["entries"].as_array().unwrap();
    let saxpy = entries.iter().find(|e| e["name"] == "saxpy").unwrap();
    assert_eq!(saxpy["key"], Digest::of(b"saxpy").to_hex());
    assert_eq!(saxpy["owner_label"], "sm_90a");
    assert_eq!(saxpy["max_world"], u64::MAX);
    assert_eq!(saxpy["deps"][0]["name"], "saxpy_src");
    assert_eq!(saxpy["artifacts"][1]["kind"], "cubin");
    assert_eq!(saxpy["artifacts"][1]["len"], 11);
    assert_eq!(
        saxpy["artifacts"][1]["checksum"],
        Digest::of(b"cubin saxpy").to_hex()
    );
}

#[test]
fn verify_names_the_failed_check_and_exits_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let good = sample(dir.path());
    let bytes = std::fs::read(&good).unwrap();
    let corrupt = dir.path().join("corrupt.kimg");
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 1;
    std::fs::write(&corrupt, &flipped).unwrap();
    let truncated = dir.path().join("truncated.kimg");
    std::fs::write(&truncated, &bytes[..bytes.len() / 2]).unwrap();
    let not_image = dir.path().join("notes.txt");
    std::fs::write(&not_image, b"just some text, longer than nothing").unwrap();

    let output = kiln(&["verify", path_str(&good)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(stdout(&output).starts_with("ok "), "{}", stdout(&output));

    let output = kiln(&[
        "verify",
        path_str(&good),
        path_str(&corrupt),
        path_str(&truncated),
        path_str(&not_image),
    ]);
    assert_eq!(output.status.code(), Some(1));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("ok "));
    assert!(
        lines[1].starts_with("FAIL") && lines[1].contains("body.checksum"),
        "{}",
        lines[1]
    );
    assert!(lines[2].contains("length.truncated"), "{}", lines[2]);
    assert!(lines[3].contains("header.magic"), "{}", lines[3]);

    let output = kiln(&["verify", "--json", path_str(&good), path_str(&corrupt)]);
    assert_eq!(output.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["ok"], true);
    assert_eq!(json[0]["entries"], 3);
    assert_eq!(json[1]["ok"], false);
    assert_eq!(json[1]["check"], "body.checksum");
}

#[test]
fn diff_reports_added_removed_and_changed_entries() {
    let dir = tempfile::tempdir().unwrap();
    let a = sample(dir.path());
    let b = write(
        dir.path(),
        "b.kimg",
        vec![
            entry(
                "sm_90a",
                "saxpy",
                &[
                    (ArtifactKind::Ptx, b"ptx saxpy"),
                    (ArtifactKind::Cubin, b"cubin saxpy v2"),
                ],
            ),
            entry("sm_90a", "gemm", &[(ArtifactKind::Cubin, b"cubin gemm")]),
            entry("sm_90a", "reduce", &[(ArtifactKind::Ptx, b"ptx reduce")]),
        ],
    );
    let output = kiln(&["diff", path_str(&a), path_str(&b)]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(
        text.contains("- ") && text.contains("gemm (sm_80)"),
        "{text}"
    );
    assert!(
        text.contains("+ ") && text.contains("reduce (sm_90a)"),
        "{text}"
    );
    assert!(text.contains("saxpy (sm_90a): artifacts"), "{text}");
    assert!(
        text.contains("1 only in A, 1 only in B, 1 changed, 1 same"),
        "{text}"
    );

    let output = kiln(&["diff", "--json", path_str(&a), path_str(&b)]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["only_in_a"][0]["name"], "gemm");
    assert_eq!(json["only_in_b"][0]["name"], "reduce");
    assert_eq!(json["changed"][0]["fields"][0], "artifacts");
    assert_eq!(json["same"], 1);
    assert_eq!(json["meta_changed"], true);

    let output = kiln(&["diff", path_str(&a), path_str(&a)]);
    assert!(output.status.success());
    assert!(stdout(&output).contains("0 only in A, 0 only in B, 0 changed, 3 same"));
}

#[test]
fn merge_keeps_the_first_entry_per_owner_and_key_deterministically() {
    let dir = tempfile::tempdir().unwrap();
    let a = sample(dir.path());
    let b = write(
        dir.path(),
        "b.kimg",
        vec![
            entry(
                "sm_90a",
                "saxpy",
                &[(ArtifactKind::Ptx, b"ptx saxpy from b")],
            ),
            entry("sm_90a", "reduce", &[(ArtifactKind::Ptx, b"ptx reduce")]),
        ],
    );
    let out1 = dir.path().join("merged1.kimg");
    let out2 = dir.path().join("merged2.kimg");
    let output = kiln(&["merge", path_str(&a), path_str(&b), "-o", path_str(&out1)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert!(
        stdout(&output).contains("merged 4 entries from 2 images"),
        "{}",
        stdout(&output)
    );
    assert!(stdout(&output).contains("1 duplicates skipped"));
    assert!(
        kiln(&["merge", path_str(&a), path_str(&b), "-o", path_str(&out2)])
            .status
            .success()
    );
    assert_eq!(std::fs::read(&out1).unwrap(), std::fs::read(&out2).unwrap());

    let merged = Image::open(&out1, Verification::Full).unwrap();
    assert_eq!(merged.len(), 4);
    let saxpy = merged
        .find(&Digest::of(b"sm_90a"), &Digest::of(b"saxpy"))
        .unwrap()
        .unwrap();
    assert_eq!(
        saxpy.artifact_count(),
        2,
        "the entry of the first image wins"
    );
    assert_eq!(saxpy.artifact(0).unwrap().bytes().unwrap(), b"ptx saxpy");
    assert!(
        merged
            .find(&Digest::of(b"sm_90a"), &Digest::of(b"reduce"))
            .unwrap()
            .is_some()
    );
    assert_eq!(merged.meta().labels["file"], "a.kimg");
}

#[test]
fn extract_writes_the_chosen_artifact() {
    let dir = tempfile::tempdir().unwrap();
    let image = sample(dir.path());
    let out = dir.path().join("out.bin");

    let output = kiln(&[
        "extract",
        path_str(&image),
        "saxpy",
        "--kind",
        "cubin",
        "-o",
        path_str(&out),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read(&out).unwrap(), b"cubin saxpy");

    let output = kiln(&["extract", path_str(&image), "saxpy", "-o", path_str(&out)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("choose one with --kind"),
        "{}",
        stderr(&output)
    );

    let output = kiln(&["extract", path_str(&image), "gemm", "-o", path_str(&out)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("2 entries match"),
        "{}",
        stderr(&output)
    );

    let output = kiln(&[
        "extract",
        path_str(&image),
        "gemm",
        "--owner",
        "sm_80",
        "-o",
        path_str(&out),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read(&out).unwrap(), b"cubin gemm 80");

    let prefix = &Digest::of(b"saxpy").to_hex()[..10];
    let output = kiln(&[
        "extract",
        path_str(&image),
        prefix,
        "--kind",
        "ptx",
        "-o",
        path_str(&out),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read(&out).unwrap(), b"ptx saxpy");

    let output = kiln(&[
        "extract",
        path_str(&image),
        "saxpy",
        "--kind",
        "fatbin",
        "-o",
        path_str(&out),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("no fatbin artifact"),
        "{}",
        stderr(&output)
    );

    let output = kiln(&["extract", path_str(&image), "missing", "-o", path_str(&out)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(stderr(&output).contains("no entry"), "{}", stderr(&output));
}

#[test]
fn unreadable_inputs_are_errors_that_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.kimg");
    let output = kiln(&["inspect", path_str(&missing)]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("missing.kimg"),
        "{}",
        stderr(&output)
    );
    let output = kiln(&[
        "merge",
        path_str(&missing),
        "-o",
        path_str(&dir.path().join("out.kimg")),
    ]);
    assert_eq!(output.status.code(), Some(2));
    assert!(!dir.path().join("out.kimg").exists());
}

// Hostile input: text from images and cache directories reaches the
// terminal only escaped; `--json` keeps it exact.

/// An escape sequence (red), a bell, a carriage return and a right-to-left
/// override.
const EVIL: &str = "\x1b[31m\x07\r\u{202e}";

/// How `kiln` shows [`EVIL`] in text output.
const EVIL_SHOWN: &str = "\\u{1b}[31m\\u{7}\\r\\u{202e}";

fn evil(text: &str) -> String {
    format!("{text}{EVIL}end")
}

fn evil_shown(text: &str) -> String {
    format!("{text}{EVIL_SHOWN}end")
}

/// No control character (other than the line breaks of the output itself)
/// and no bidirectional override reaches the terminal.
fn assert_terminal_safe(output: &[u8], what: &str) {
    let text = std::str::from_utf8(output).unwrap_or_else(|e| panic!("{what}: not UTF-8: {e}"));
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| {
            (c.is_control() && c != '\n')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
        })
        .collect();
    assert!(raw.is_empty(), "{what}: raw {raw:?} in:\n{text:?}");
}

fn assert_shows(output: &[u8], expected: &[String], what: &str) {
    assert_terminal_safe(output, what);
    let text = String::from_utf8_lossy(output);
    for expected in expected {
        assert!(
            text.contains(expected.as_str()),
            "{what}: missing {expected:?} in:\n{text}"
        );
    }
}

/// An entry whose every text field is hostile.
fn evil_entry(owner: &str, name: &str, payload: &[u8]) -> EntryData {
    EntryData {
        owner: Digest::of(owner.as_bytes()),
        owner_label: evil(owner),
        key: Digest::of(name.as_bytes()),
        name: evil(name),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: evil("dep"),
            fingerprint: Digest::of(b"v1"),
        }],
        artifacts: vec![
            Artifact {
                kind: ArtifactKind::Ptx,
                entry_points: vec![evil("entry")],
                bytes: payload.to_vec(),
            },
            Artifact {
                kind: ArtifactKind::Custom(evil("kind")),
                entry_points: vec![],
                bytes: b"custom".to_vec(),
            },
        ],
    }
}

/// An image with hostile text in its producer, labels and entries, under
/// a hostile file name.
fn evil_image(dir: &Path, file: &str, entries: Vec<EntryData>) -> PathBuf {
    let mut meta = ImageMeta::new(evil("producer"), "1.0");
    meta.labels.insert(evil("label"), evil("value"));
    let mut writer = ImageWriter::new(meta);
    for entry in entries {
        writer.push(entry);
    }
    let path = dir.join(evil(file) + ".kimg");
    writer.write_atomic(&path).unwrap();
    path
}

fn evil_sample(dir: &Path) -> PathBuf {
    evil_image(
        dir,
        "a",
        vec![
            evil_entry("sm_90a", "saxpy", b"ptx saxpy"),
            evil_entry("sm_80", "gemm", b"ptx gemm"),
        ],
    )
}

fn json_of(output: &Output) -> serde_json::Value {
    assert_terminal_safe(&output.stdout, "--json");
    serde_json::from_slice(&output.stdout).unwrap()
}

#[test]
fn hostile_text_inspect_escapes_text_and_json_keeps_it_exact() {
    let dir = tempfile::tempdir().unwrap();
    let image = evil_sample(dir.path());

    let output = kiln(&["inspect", path_str(&image)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            evil_shown("a") + ".kimg",
            format!("producer  {} 1.0", evil_shown("producer")),
            format!("{}={}", evil_shown("label"), evil_shown("value")),
            evil_shown("saxpy"),
            evil_shown("sm_90a"),
            evil_shown("dep"),
            format!("ptx,{}", evil_shown("kind")),
        ],
        "inspect",
    );

    let output = kiln(&["inspect", "--json", path_str(&image)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json = json_of(&output);
    assert_eq!(json["path"], path_str(&image));
    assert_eq!(json["header"]["producer"], evil("producer") + " 1.0");
    assert_eq!(json["meta"]["producer_name"], evil("producer"));
    assert_eq!(json["meta"]["labels"][evil("label")], evil("value"));
    assert_eq!(json["owners"][0]["label"], evil("sm_80"));
    let saxpy = json["entries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == evil("saxpy"))
        .unwrap();
    assert_eq!(saxpy["owner_label"], evil("sm_90a"));
    assert_eq!(saxpy["deps"][0]["name"], evil("dep"));
    assert_eq!(saxpy["artifacts"][0]["entry_points"][0], evil("entry"));
    assert_eq!(saxpy["artifacts"][1]["kind"], evil("kind"));
}

#[test]
fn hostile_text_verify_escapes_file_names_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let image = evil_sample(dir.path());
    let bad = dir.path().join(evil("bad") + ".kimg");
    let mut bytes = std::fs::read(&image).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&bad, &bytes).unwrap();

    let output = kiln(&["verify", path_str(&image), path_str(&bad)]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            format!("ok    {}", path_str(dir.path())),
            evil_shown("a") + ".kimg: 2 entries",
            evil_shown("bad") + ".kimg: body.checksum",
        ],
        "verify",
    );

    let output = kiln(&["verify", "--json", path_str(&image), path_str(&bad)]);
    let json = json_of(&output);
    assert_eq!(json[0]["path"], path_str(&image));
    assert_eq!(json[1]["path"], path_str(&bad));
    assert_eq!(json[1]["check"], "body.checksum");

    // An error message that quotes a hostile path.
    let missing = dir.path().join(evil("missing"));
    let output = kiln(&["inspect", path_str(&missing)]);
    assert_eq!(output.status.code(), Some(2));
    assert_shows(&output.stderr, &[evil_shown("missing")], "inspect error");
}

#[test]
fn hostile_text_diff_escapes_every_change_line() {
    let dir = tempfile::tempdir().unwrap();
    let a = evil_sample(dir.path());
    let b = evil_image(
        dir.path(),
        "b",
        vec![
            evil_entry("sm_90a", "saxpy", b"ptx saxpy v2"),
            evil_entry("sm_90a", "reduce", b"ptx reduce"),
        ],
    );
    let output = kiln(&["diff", path_str(&a), path_str(&b)]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            format!("{} ({})", evil_shown("gemm"), evil_shown("sm_80")),
            format!("{} ({})", evil_shown("reduce"), evil_shown("sm_90a")),
            format!(
                "{} ({}): artifacts",
                evil_shown("saxpy"),
                evil_shown("sm_90a")
            ),
        ],
        "diff",
    );

    let json = json_of(&kiln(&["diff", "--json", path_str(&a), path_str(&b)]));
    assert_eq!(json["only_in_a"][0]["name"], evil("gemm"));
    assert_eq!(json["only_in_a"][0]["owner_label"], evil("sm_80"));
    assert_eq!(json["only_in_b"][0]["name"], evil("reduce"));
    assert_eq!(json["changed"][0]["name"], evil("saxpy"));
}

#[test]
fn hostile_text_merge_and_extract_escape_names_kinds_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let image = evil_sample(dir.path());

    let merged = dir.path().join(evil("merged") + ".kimg");
    let output = kiln(&["merge", path_str(&image), "-o", path_str(&merged)]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_shows(&output.stdout, &[evil_shown("merged") + ".kimg"], "merge");
    let json = json_of(&kiln(&["inspect", "--json", path_str(&merged)]));
    assert_eq!(json["meta"]["labels"][evil("label")], evil("value"));

    let out = dir.path().join("out.bin");
    let saxpy = evil("saxpy");
    let output = kiln(&[
        "extract",
        path_str(&image),
        &saxpy,
        "--kind",
        &evil("kind"),
        "-o",
        path_str(&out),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_eq!(std::fs::read(&out).unwrap(), b"custom");
    assert_shows(
        &output.stdout,
        &[format!(
            "({}) of {}",
            evil_shown("kind"),
            evil_shown("saxpy")
        )],
        "extract",
    );

    // Errors quoting the image's names and kinds.
    let output = kiln(&["extract", path_str(&image), &saxpy, "-o", path_str(&out)]);
    assert_eq!(output.status.code(), Some(2));
    assert_shows(
        &output.stderr,
        &[evil_shown("kind")],
        "extract --kind error",
    );

    let twice = evil_image(
        dir.path(),
        "twice",
        vec![
            evil_entry("sm_90a", "saxpy", b"a"),
            evil_entry("sm_80", "saxpy", b"b"),
        ],
    );
    let output = kiln(&["extract", path_str(&twice), &saxpy, "-o", path_str(&out)]);
    assert_eq!(output.status.code(), Some(2));
    assert_shows(
        &output.stderr,
        &[
            format!("{} ({})", evil_shown("saxpy"), evil_shown("sm_80")),
            format!("{} ({})", evil_shown("saxpy"), evil_shown("sm_90a")),
        ],
        "extract ambiguous",
    );
    assert_eq!(
        stderr(&output).lines().count(),
        3,
        "one line per candidate: {}",
        stderr(&output)
    );
}

#[test]
fn hostile_text_cache_commands_escape_segment_contents_and_names() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join(evil("cache"));
    let cache_arg = format!("--dir={}", path_str(&cache));
    let output = kiln(&["cache", "stats", &cache_arg]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_shows(&output.stdout, &[evil_shown("cache")], "cache stats");
    let stats = json_of(&kiln(&["cache", "stats", "--json", &cache_arg]));
    let images = PathBuf::from(stats["dir"].as_str().unwrap());
    assert!(images.starts_with(&cache), "{images:?}");

    let good = evil_image(
        dir.path(),
        "seg",
        vec![evil_entry("sm_90a", "saxpy", b"ptx saxpy")],
    );
    std::fs::copy(&good, images.join(evil("seg-good") + ".kimg")).unwrap();
    let mut bytes = std::fs::read(&good).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(images.join(evil("seg-bad") + ".kimg"), &bytes).unwrap();

    let output = kiln(&["cache", "ls", &cache_arg]);
    assert!(output.status.success(), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            evil_shown("saxpy"),
            evil_shown("sm_90a"),
            format!("{}:6 B", evil_shown("kind")),
        ],
        "cache ls",
    );
    let json = json_of(&kiln(&["cache", "ls", "--json", &cache_arg]));
    assert_eq!(json[0]["name"], evil("saxpy"));
    assert_eq!(json[0]["owner_label"], evil("sm_90a"));
    assert_eq!(json[0]["artifacts"][1]["kind"], evil("kind"));

    let output = kiln(&["cache", "verify", &cache_arg]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            format!("ok    {}.kimg", evil_shown("seg-good")),
            format!("FAIL  {}.kimg", evil_shown("seg-bad")),
        ],
        "cache verify",
    );
    let json = json_of(&kiln(&["cache", "verify", "--json", &cache_arg]));
    let names: Vec<&str> = json["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&(evil("seg-bad") + ".kimg").as_str()),
        "{names:?}"
    );

    for verb in ["gc", "clear"] {
        let output = kiln(&["cache", verb, &cache_arg]);
        assert!(output.status.success(), "{verb}: {}", stderr(&output));
        assert_terminal_safe(&output.stdout, verb);
        assert_terminal_safe(&output.stderr, verb);
    }
}

// `kiln install`: verified images put into a directory by rename.

/// The file's identity (its inode number).
fn inode(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).unwrap())
}

/// Every entry of `image` with every artifact's bytes, in order.
fn contents(image: &Image) -> Vec<(String, Vec<Vec<u8>>)> {
    image
        .entries()
        .map(|entry| {
            let entry = entry.unwrap();
            let payloads = entry
                .artifacts()
                .map(|a| a.bytes().unwrap().to_vec())
                .collect();
            (entry.name().to_owned(), payloads)
        })
        .collect()
}

/// The names in `dir`, sorted.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn install_replaces_by_rename_so_a_mapped_reader_keeps_the_old_image() {
    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("installed");
    std::fs::create_dir(&installed).unwrap();
    let old_path = sample(&installed);
    let old_bytes = std::fs::read(&old_path).unwrap();
    let old_inode = inode(&old_path);

    // A program that mapped the installed image before the install.
    let reader = Image::open(&old_path, Verification::Structural).unwrap();
    let before = contents(&reader);

    // A different image with the same file name, larger than the old one.
    let source_dir = dir.path().join("new");
    std::fs::create_dir(&source_dir).unwrap();
    let big = vec![7u8; 3 * old_bytes.len()];
    let new_path = write(
        &source_dir,
        "a.kimg",
        vec![
            entry("sm_90a", "saxpy", &[(ArtifactKind::Cubin, &big)]),
            entry("sm_90a", "reduce", &[(ArtifactKind::Ptx, b"ptx reduce")]),
        ],
    );
    let new_bytes = std::fs::read(&new_path).unwrap();
    assert_ne!(new_bytes, old_bytes);

    let output = kiln(&["install", path_str(&new_path), path_str(&installed)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let text = stdout(&output);
    assert!(text.starts_with("ok    "), "{text}");
    assert!(text.contains("2 entries"), "{text}");

    // The name now holds exactly the new image, in a new file; nothing
    // else is left in the directory.
    assert_eq!(std::fs::read(&old_path).unwrap(), new_bytes);
    assert_ne!(inode(&old_path), old_inode, "installed in place");
    assert_eq!(listing(&installed), ["a.kimg"]);
    let fresh = Image::open(&old_path, Verification::Full).unwrap();
    assert_eq!(fresh.len(), 2);

    // The reader's mapping still holds the old image, whole: it passes
    // full verification and serves the same entries and bytes.
    reader.verify_full().unwrap();
    assert_eq!(contents(&reader), before);
    assert_eq!(reader.len(), 3);
}

#[test]
fn install_refuses_a_bad_image_and_leaves_the_installed_file() {
    let dir = tempfile::tempdir().unwrap();
    let installed = dir.path().join("installed");
    std::fs::create_dir(&installed).unwrap();
    let old_path = sample(&installed);
    let old_bytes = std::fs::read(&old_path).unwrap();
    let old_inode = inode(&old_path);

    let source_dir = dir.path().join("new");
    std::fs::create_dir(&source_dir).unwrap();
    let good = write(
        &source_dir,
        "good.kimg",
        vec![entry(
            "sm_90a",
            "reduce",
            &[(ArtifactKind::Ptx, b"ptx reduce")],
        )],
    );
    let bad = source_dir.join("a.kimg");
    let mut bytes = std::fs::read(&good).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&bad, &bytes).unwrap();

    let output = kiln(&[
        "install",
        path_str(&bad),
        path_str(&good),
        path_str(&installed),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with("FAIL") && lines[0].contains("body.checksum"),
        "{text}"
    );
    assert!(lines[0].contains("refused"), "{text}");
    assert!(lines[1].starts_with("ok "), "{text}");

    // The refused image changed nothing; the good one was installed.
    assert_eq!(std::fs::read(&old_path).unwrap(), old_bytes);
    assert_eq!(inode(&old_path), old_inode);
    assert_eq!(
        std::fs::read(installed.join("good.kimg")).unwrap(),
        std::fs::read(&good).unwrap()
    );
    assert_eq!(listing(&installed), ["a.kimg", "good.kimg"]);

    let output = kiln(&["install", "--json", path_str(&bad), path_str(&installed)]);
    assert_eq!(output.status.code(), Some(1));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["ok"], false);
    assert_eq!(json[0]["check"], "body.checksum");
    assert_eq!(json[0]["target"], path_str(&old_path));
    assert_eq!(std::fs::read(&old_path).unwrap(), old_bytes);
}

#[test]
fn install_with_name_and_json_writes_a_byte_identical_copy() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path());
    let installed = dir.path().join("installed");
    std::fs::create_dir(&installed).unwrap();

    let output = kiln(&[
        "install",
        "--json",
        "--name",
        "kernels.kimg",
        path_str(&source),
        path_str(&installed),
    ]);
    assert!(output.status.success(), "{}", stderr(&output));
    let target = installed.join("kernels.kimg");
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json[0]["ok"], true);
    assert_eq!(json[0]["path"], path_str(&source));
    assert_eq!(json[0]["target"], path_str(&target));
    assert_eq!(json[0]["entries"], 3);
    let bytes = std::fs::read(&source).unwrap();
    assert_eq!(json[0]["bytes"], bytes.len());
    assert_eq!(std::fs::read(&target).unwrap(), bytes);
    assert_eq!(listing(&installed), ["kernels.kimg"]);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o644, 0o644, "readable by every account: {mode:o}");
    }
}

#[test]
fn install_rejects_arguments_it_cannot_act_on() {
    let dir = tempfile::tempdir().unwrap();
    let source = sample(dir.path());
    let installed = dir.path().join("installed");
    std::fs::create_dir(&installed).unwrap();
    let other = write(dir.path(), "b.kimg", vec![]);
    let twin_dir = dir.path().join("twin");
    std::fs::create_dir(&twin_dir).unwrap();
    let twin = write(&twin_dir, "a.kimg", vec![]);
    let src = path_str(&source);
    let dst = path_str(&installed);
    let missing = dir.path().join("missing.kimg");

    for (args, message) in [
        (vec![src, path_str(&source)], "is not a directory"),
        (vec![src, path_str(&missing), dst], "missing.kimg"),
        (
            vec![src, path_str(&twin), dst],
            "two images would be installed as a.kimg",
        ),
        (
            vec!["--name", "x.kimg", src, path_str(&other), dst],
            "--name names one file",
        ),
        (
            vec!["--name", "../x.kimg", src, dst],
            "not a plain file name",
        ),
        (
            vec!["--name", "sub/x.kimg", src, dst],
            "not a plain file name",
        ),
        (vec!["--name", "..", src, dst], "not a plain file name"),
        (vec![dst, dst], "not a regular file"),
    ] {
        let mut full = vec!["install"];
        full.extend(&args);
        let output = kiln(&full);
        assert_eq!(
            output.status.code(),
            Some(2),
            "{args:?}: {}",
            stderr(&output)
        );
        assert!(
            stderr(&output).contains(message),
            "{args:?}: missing {message:?} in {}",
            stderr(&output)
        );
        assert!(listing(&installed).is_empty(), "{args:?} wrote something");
    }
    assert!(!dir.path().join("x.kimg").exists());
}

#[test]
fn hostile_text_install_escapes_paths_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let image = evil_sample(dir.path());
    let installed = dir.path().join(evil("installed"));
    std::fs::create_dir(&installed).unwrap();
    let bad = dir.path().join(evil("bad") + ".kimg");
    let mut bytes = std::fs::read(&image).unwrap();
    *bytes.last_mut().unwrap() ^= 1;
    std::fs::write(&bad, &bytes).unwrap();

    let output = kiln(&[
        "install",
        path_str(&image),
        path_str(&bad),
        path_str(&installed),
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", stderr(&output));
    assert_shows(
        &output.stdout,
        &[
            format!(
                "{}/{}.kimg: 2 entries",
                evil_shown("installed"),
                evil_shown("a")
            ),
            format!("{}.kimg: body.checksum", evil_shown("bad")),
        ],
        "install",
    );
    assert_eq!(
        std::fs::read(installed.join(evil("a") + ".kimg")).unwrap(),
        std::fs::read(&image).unwrap()
    );

    let json = json_of(&kiln(&[
        "install",
        "--json",
        path_str(&image),
        path_str(&installed),
    ]));
    assert_eq!(json[0]["path"], path_str(&image));
    assert_eq!(
        json[0]["target"],
        path_str(&installed.join(evil("a") + ".kimg"))
    );

    let output = kiln(&[
        "install",
        "--name",
        &evil("x"),
        path_str(&image),
        path_str(&installed),
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", stderr(&output));
    assert_shows(&output.stderr, &[evil_shown("x")], "install note");
}
