//! The `kiln` command-line tool on real images: inspect, verify, diff,
//! merge and extract, run as a separate process.

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
    for expected in [
        "format    1 (rkyv 0.8.18, little-endian, 32-bit pointers, aligned primitives)",
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
}

#[test]
fn inspect_json_describes_every_entry() {
    let dir = tempfile::tempdir().unwrap();
    let image = sample(dir.path());
    let output = kiln(&["inspect", "--json", path_str(&image)]);
    assert!(output.status.success(), "{}", stderr(&output));
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(json["header"]["format_version"], 1);
    assert_eq!(json["header"]["rkyv_version"], "0.8.18");
    assert_eq!(json["header"]["entry_count"], 3);
    assert_eq!(json["meta"]["labels"]["file"], "a.kimg");
    assert_eq!(json["owners"].as_array().unwrap().len(), 2);
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
