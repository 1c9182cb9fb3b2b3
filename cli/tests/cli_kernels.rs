//! `kiln kernels`: the real tool on the demo kernel library's shipped image
//! (`examples/kiln-kernels-demo/kiln-shipped/`, committed: no NVRTC needed),
//! on that image embedded in a file as a binary embeds it, and on hostile
//! files. Exit status 0 when every kernel is served on every GPU and driver
//! asked about, 1 when one is missing or an image is damaged, 2 otherwise; a
//! file of forged image headers costs a bounded multiple of its size.
//! `tests/e2e_gaps.rs` runs it on the demo application itself.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter};
use serde_json::Value;

fn shipped_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../examples/kiln-kernels-demo/kiln-shipped/kiln-kernels-demo.kship")
}

fn kiln(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kiln"))
        .arg("kernels")
        .args(args)
        .output()
        .expect("kiln runs")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The device of `report` for `gpu` and `driver` (`13.0`).
fn device<'a>(report: &'a Value, gpu: &str, driver: &str) -> &'a Value {
    report["devices"]
        .as_array()
        .expect("devices")
        .iter()
        .find(|d| d["gpu"] == gpu && d["driver"] == driver)
        .unwrap_or_else(|| panic!("no {gpu} on {driver}: {report:#}"))
}

/// The bytes of the shipped image, as an image file (what an application's
/// build embeds, but for the PTX of its non-PTX targets).
fn image_bytes() -> Vec<u8> {
    let shipped = kiln_ship::Shipped::from_bytes(&std::fs::read(shipped_path()).unwrap()).unwrap();
    let mut writer = ImageWriter::new(shipped.meta.clone());
    for entry in shipped.entries() {
        writer.push(entry.clone());
    }
    writer.to_bytes().unwrap()
}

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, bytes).unwrap();
    path
}

#[test]
fn a_shipped_image_is_reported_under_the_record_its_build_set() {
    let path = shipped_path();
    let path = path.to_str().unwrap();
    let output = kiln(&[
        path,
        "--gpu",
        "sm_90,sm_130",
        "--driver",
        "12.8,13.0",
        "--all",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = json(&output);
    let library = &report["libraries"][0];
    assert_eq!(library["name"], "kiln-kernels-demo");
    assert_eq!(library["kernels"], 11);
    // The manifest's record: PTX for the lowest target of each toolchain,
    // although the shipped entries carry PTX for every target.
    let record = library["record"].as_str().unwrap();
    assert!(
        record
            .contains("nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75 "),
        "{record}"
    );
    // A GPU newer than every CUBIN on R580: NVRTC 13's sm_75 PTX, for all 11.
    let newer = device(&report, "sm_130", "13.0");
    assert_eq!(newer["served"], 11);
    assert_eq!(newer["from"].as_array().unwrap().len(), 1);
    assert_eq!(newer["from"][0]["selection"], "ptx");
    assert_eq!(newer["from"][0]["target"], "sm_75");
    assert_eq!(newer["from"][0]["nvrtc"], "13.0.88");
    assert_eq!(newer["from"][0]["driver_needed"], "13.0");
    for kernel in newer["every_kernel"].as_array().unwrap() {
        assert_eq!(kernel["outcome"], "served", "{kernel}");
        assert_eq!(kernel["kind"], "ptx", "{kernel}");
    }
    // On R570 that PTX does not load, nor NVRTC 12.9's: all 11 missing, and why.
    let old = device(&report, "sm_130", "12.8");
    assert_eq!(old["missing"], 11);
    let why = old["missing_kernels"][0]["why"].as_str().unwrap();
    assert!(why.contains("cannot JIT it"), "{why}");
    assert!(why.contains("NVRTC 12.9.86: PTX sm_50 (12.9+)"), "{why}");
    // An H100 on R570: NVRTC 12.9's own CUBIN, which loads on every CUDA 12 driver.
    let hopper = device(&report, "sm_90", "12.8");
    assert_eq!(hopper["missing"], 0);
    assert_eq!(hopper["from"][0]["selection"], "exact-cubin");
    assert_eq!(hopper["from"][0]["nvrtc"], "12.9.86");
    assert_eq!(hopper["from"][0]["driver_needed"], "12.0");
    assert_eq!(report["missing"], 11);
    assert_eq!(report["devices_missing"], 1);

    // Text: a row per GPU and run of drivers, the missing kernels and why.
    let output = kiln(&[path, "--gpu", "sm_130", "--driver", "12.8,13.0"]);
    assert_eq!(output.status.code(), Some(1));
    let shown = text(&output);
    for needed in [
        "sm_130  12.8 (R570)    0 of 11   -",
        "sm_130  13.0 (R580)    11 of 11  ptx sm_75, NVRTC 13.0.88",
        "missing: 11 kernels on 1 of 2 GPU and driver pairs",
        "kiln-kernels-demo: axpby_f32, axpby_f64",
        "why: the shipped PTX (sm_75) was produced by NVRTC 13.0.88",
    ] {
        assert!(shown.contains(needed), "{needed:?} missing from:\n{shown}");
    }
}

#[test]
fn the_exit_status_says_whether_anything_is_missing() {
    let path = shipped_path();
    let path = path.to_str().unwrap();
    // Every driver from the oldest the code loads on (CUDA 12.0) to 13.5.
    let output = kiln(&[path, "--gpu", "sm_90", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = json(&output);
    let drivers: Vec<&str> = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["driver"].as_str().unwrap())
        .collect();
    assert_eq!(drivers.first(), Some(&"12.0"));
    assert_eq!(drivers.last(), Some(&"13.5"));
    assert_eq!(drivers.len(), 15);
    // Every known GPU on every driver from CUDA 12.0: each served.
    let output = kiln(&[path]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(text(&output).contains("every kernel is served on all"));
    // A driver named alone: every known GPU it supports (R590 dropped Volta).
    let report = json(&kiln(&[path, "--driver", "13.1", "--json"]));
    let gpus: Vec<&str> = report["devices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["gpu"].as_str().unwrap())
        .collect();
    assert!(
        !gpus.contains(&"sm_70") && gpus.contains(&"sm_75"),
        "{gpus:?}"
    );
    // Missing: 1.
    assert_eq!(
        kiln(&[path, "--gpu", "sm_130", "--driver", "12.8"])
            .status
            .code(),
        Some(1)
    );
    // Other errors: 2.
    let dir = tempfile::tempdir().unwrap();
    let plain = write(dir.path(), "plain", b"no image here");
    let plain = plain.to_str().unwrap();
    for args in [
        &[path, "--gpu", "sm_9"][..],
        &[path, "--driver", "twelve"],
        &["/nonexistent/app"],
        &[plain, "--gpu", "sm_90"],
    ] {
        let output = kiln(args);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
    }
    let output = kiln(&[plain]);
    assert!(
        text(&output).contains("no Kiln image found"),
        "{}",
        text(&output)
    );
}

#[test]
fn a_fifo_is_refused_without_waiting() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("app");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    let output = kiln(&[fifo.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(text(&output).contains("cannot read"), "{}", text(&output));
}

/// A file laid out as an application binary holds its images: other bytes
/// (the magic among them, as the reader's own constant is), the copy of the
/// image's header `include_image!` keeps, and the image at a 64-byte
/// boundary.
fn binary_with(image: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0x5a; 1000];
    bytes[100..108].copy_from_slice(&kiln_image::header::MAGIC);
    bytes[500..508].copy_from_slice(&kiln_image::header::MAGIC);
    // The header copy, at an odd offset.
    bytes.extend_from_slice(&image[..kiln_image::header::HEADER_LEN]);
    bytes.resize(bytes.len().next_multiple_of(64) + 64, 0);
    bytes.extend_from_slice(image);
    bytes.extend_from_slice(&[0x33; 777]);
    bytes
}

#[test]
fn the_images_of_a_binary_are_found_and_a_header_copy_is_no_damage() {
    let dir = tempfile::tempdir().unwrap();
    let image = image_bytes();
    let app = write(dir.path(), "app", &binary_with(&image));
    let output = kiln(&[
        app.to_str().unwrap(),
        "--gpu",
        "sm_90",
        "--driver",
        "13.0",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = json(&output);
    let file = &report["files"][0];
    assert_eq!(file["images"].as_array().unwrap().len(), 1, "{file:#}");
    assert_eq!(file["images"][0]["offset"].as_u64().unwrap() % 64, 0);
    assert_eq!(file["images"][0]["name"], "kiln-kernels-demo");
    assert_eq!(file["damaged"].as_array().unwrap().len(), 0, "{file:#}");
    assert_eq!(file["not_images"], 2);
    assert_eq!(device(&report, "sm_90", "13.0")["served"], 11);

    // The same image file on its own: the same answer.
    let alone = write(dir.path(), "kernels.kimg", &image);
    let output = kiln(&[
        alone.to_str().unwrap(),
        "--gpu",
        "sm_90",
        "--driver",
        "13.0",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(0));
    assert_eq!(json(&output)["devices"], report["devices"]);

    // A payload byte changed: the image (and so its header copy) is damaged,
    // which is a finding, and its kernels are in no library.
    let mut broken = image.clone();
    let last = broken.len() - 10;
    broken[last] ^= 0xff;
    let app = write(dir.path(), "broken", &binary_with(&broken));
    let output = kiln(&[app.to_str().unwrap(), "--json"]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("no Kiln image found"),
        "{}",
        text(&output)
    );
    assert!(text(&output).contains("2 damaged"), "{}", text(&output));
    // Beside a sound image, the damaged one is reported and fails the run.
    let output = kiln(&[
        app.to_str().unwrap(),
        alone.to_str().unwrap(),
        "--gpu",
        "sm_90",
        "--driver",
        "13.0",
        "--json",
    ]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = json(&output);
    assert_eq!(report["missing"], 0);
    let damaged = report["files"][0]["damaged"].as_array().unwrap();
    assert_eq!(damaged.len(), 2, "{damaged:?}");
    assert!(damaged[0]["error"].as_str().unwrap().contains("checksum"));
}

/// Forged copies of a sound header, each declaring the whole image after it:
/// the candidates verified add up to at most twice the file, the rest are
/// left unchecked, and the run ends with an error rather than a report that
/// silently lacks an image.
#[test]
fn a_file_of_forged_headers_costs_a_bounded_multiple_of_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let image = image_bytes();
    let header = &image[..kiln_image::header::HEADER_LEN];
    let copies = 4000;
    let mut bytes = Vec::new();
    for _ in 0..copies {
        bytes.extend_from_slice(header);
    }
    bytes.extend_from_slice(&image);
    let file = write(dir.path(), "forged", &bytes);
    // With a sound image beside it, the report is printed, then the error.
    let sound = write(dir.path(), "kernels.kimg", &image);
    let started = std::time::Instant::now();
    let output = kiln(&[
        file.to_str().unwrap(),
        sound.to_str().unwrap(),
        "--gpu",
        "sm_90",
        "--driver",
        "13.0",
        "--json",
    ]);
    let took = started.elapsed();
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("image headers were left unchecked"),
        "{}",
        text(&output)
    );
    let report = json(&output);
    let unchecked = report["files"][0]["unchecked"].as_u64().unwrap();
    // Twice the file (plus 1 MiB) is room for a few full verifications.
    let room = (2 * bytes.len() as u64 + (1 << 20)) / image.len() as u64;
    assert!(room < 20, "the image is large enough for the test: {room}");
    assert!(
        unchecked >= copies as u64 + 1 - room,
        "{unchecked} unchecked of {} candidates",
        copies + 1
    );
    assert_eq!(report["files"][0]["images"].as_array().unwrap().len(), 0);
    assert_eq!(report["files"][1]["images"].as_array().unwrap().len(), 1);
    // Not a timing test: a sanity bound far above the bounded work.
    assert!(took.as_secs() < 60, "{took:?}");
    // Alone, it is the same error.
    let output = kiln(&[file.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        text(&output).contains("left unchecked"),
        "{}",
        text(&output)
    );
}

#[test]
fn images_of_other_compilers_only_are_no_kernel_library() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = ImageWriter::new(ImageMeta::new("regex-lib", "0.4.1"));
    writer.push(EntryData {
        owner: Digest([1; 32]),
        owner_label: "regex-dfa-0.4.1/x86_64".to_owned(),
        key: Digest([2; 32]),
        name: "dfa".to_owned(),
        min_world: 0,
        max_world: u64::MAX,
        deps: Vec::new(),
        artifacts: vec![Artifact {
            kind: ArtifactKind::Bytes,
            entry_points: Vec::new(),
            bytes: vec![1, 2, 3],
        }],
    });
    let path = write(dir.path(), "dfa.kimg", &writer.to_bytes().unwrap());
    let output = kiln(&[path.to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    assert!(
        text(&output).contains("hold no CUDA kernel library (no entry of kiln-cuda's NVRTC owners; 1 entries of other compilers)"),
        "{}",
        text(&output)
    );
}
