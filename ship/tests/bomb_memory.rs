//! What a hostile shipped file costs to unpack, measured: each file is
//! unpacked by a child process (this test binary again), which reports its
//! peak resident memory (`VmHWM`). The files are "bombs": a zstd frame
//! made by hand of run-length blocks of zeros, so that a few hundred
//! kilobytes declare a body of any length, with a window as large as a
//! reader accepts, and a content digest that is right or wrong.
//!
//! - 524 KiB declaring 2 GiB (the most the former bound of 4096 times the
//!   file allowed): refused before anything is decompressed.
//! - 524 KiB declaring the most the bound allows now (256 times, plus 1
//!   MiB): the body once, the decoder's window, nothing more; with a wrong
//!   digest, the window only.
//!
//! `KILN_SHIP_BOMB_DIR=dir` keeps the files there (to measure another
//! release of the reader on the very same files). Linux only (`VmHWM`).
#![cfg(target_os = "linux")]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_image::Digest;
use kiln_ship::file::{CONTENT_CONTEXT, MAX_EXPANSION, SLACK};
use kiln_ship::{MAX_WINDOW, Manifest, Shipped, ShippedFile};
use serde::Serialize;

const ROLE: &str = "KILN_SHIP_BOMB_ROLE";
const FILE: &str = "KILN_SHIP_BOMB_FILE";

/// The child: unpacks the file `KILN_SHIP_BOMB_FILE` and prints its peak
/// resident memory and the outcome.
#[test]
#[ignore = "run by the tests below as a child process"]
fn child() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let path = PathBuf::from(std::env::var_os(FILE).expect("the file"));
    let bytes = std::fs::read(&path).expect("the file");
    let outcome = match ShippedFile::parse(&bytes).and_then(|file| Shipped::unpack(&file)) {
        Ok(shipped) => format!("unpacked:{}", shipped.entries().len()),
        Err(error) => format!("refused:{}", error.to_string().replace(' ', "_")),
    };
    println!("\nRESULT peak_kib={} outcome={outcome}", peak_kib());
}

/// This process's peak resident memory, in KiB.
fn peak_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmHWM:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// The child's peak (bytes) and outcome for the file at `path`.
fn unpack_in_child(path: &Path) -> (u64, String) {
    let output = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--ignored",
            "--exact",
            "child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE, "unpack")
        .env(FILE, path)
        .output()
        .expect("the child runs");
    assert!(output.status.success(), "{output:?}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let line = stdout
        .lines()
        .find_map(|line| line.split_once("RESULT ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no RESULT line in {stdout}"));
    let fields: BTreeMap<&str, &str> = line
        .split_whitespace()
        .filter_map(|field| field.split_once('='))
        .collect();
    let peak = fields["peak_kib"].parse::<u64>().expect("a number") << 10;
    (peak, fields["outcome"].to_owned())
}

// The raw body's index, as `kiln-ship` lays it out (postcard encodes
// these as it encodes the crate's own private types: the same fields in
// the same order).
#[derive(Serialize)]
struct Index {
    manifest: Manifest,
    producer_name: String,
    producer_version: String,
    labels: Vec<(String, String)>,
    entries: Vec<IndexEntry>,
}

#[derive(Serialize)]
struct IndexEntry {
    owner: Digest,
    owner_label: String,
    key: Digest,
    name: String,
    deps: Vec<(String, Digest)>,
    artifacts: Vec<IndexArtifact>,
}

#[derive(Serialize)]
struct IndexArtifact {
    kind: String,
    entry_points: Vec<String>,
    len: u64,
}

/// The largest block a zstd frame may hold.
const BLOCK: u64 = 128 << 10;

/// A zstd block header: last block or not, type (0 raw, 1 run-length),
/// size.
fn block_header(out: &mut Vec<u8>, last: bool, kind: u32, size: u64) {
    let word = u32::from(last) | (kind << 1) | ((size as u32) << 3);
    out.extend_from_slice(&word.to_le_bytes()[..3]);
}

/// A shipped file of `file_len` bytes (its body padded with a skippable
/// frame) whose body is one entry with one artifact of zeros, `raw_len`
/// bytes in all, in a zstd frame with a window of [`MAX_WINDOW`]; its
/// content digest right or not.
fn bomb(raw_len: u64, file_len: u64, digest_right: bool) -> Vec<u8> {
    let mut index = Index {
        manifest: Manifest::new("bomb"),
        producer_name: "bomb".into(),
        producer_version: "1".into(),
        labels: Vec::new(),
        entries: vec![IndexEntry {
            owner: Digest::of(b"owner"),
            owner_label: "owner".into(),
            key: Digest::of(b"key"),
            name: "zeros".into(),
            deps: Vec::new(),
            artifacts: vec![IndexArtifact {
                kind: "object".into(),
                entry_points: Vec::new(),
                len: 0,
            }],
        }],
    };
    // The artifact's length is a varint: settle it with the index's own.
    let mut index_bytes = postcard::to_stdvec(&index).expect("encodes");
    for _ in 0..3 {
        index.entries[0].artifacts[0].len = raw_len - index_bytes.len() as u64;
        index_bytes = postcard::to_stdvec(&index).expect("encodes");
    }
    let payload = raw_len - index_bytes.len() as u64;
    assert_eq!(index.entries[0].artifacts[0].len, payload);

    let mut frame = 0xFD2F_B528u32.to_le_bytes().to_vec();
    // No content size, no checksum, no dictionary; then the window.
    let window_log = MAX_WINDOW.trailing_zeros();
    frame.push(0);
    frame.push(((window_log - 10) << 3) as u8);
    for chunk in index_bytes.chunks(BLOCK as usize) {
        block_header(&mut frame, false, 0, chunk.len() as u64);
        frame.extend_from_slice(chunk);
    }
    let mut left = payload;
    while left > 0 {
        let size = left.min(BLOCK);
        left -= size;
        block_header(&mut frame, left == 0, 1, size);
        frame.push(0);
    }

    let mut hasher = blake3::Hasher::new_derive_key(CONTENT_CONTEXT);
    if digest_right {
        hasher.update(&index_bytes);
        let zeros = vec![0u8; 1 << 20];
        let mut left = payload;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            hasher.update(&zeros[..n]);
            left -= n as u64;
        }
    }
    let digest = *hasher.finalize().as_bytes();

    let packed_len = file_len - 72;
    assert!(
        frame.len() as u64 + 8 <= packed_len,
        "the frame fits the file"
    );
    let skip = packed_len - frame.len() as u64 - 8;
    frame.extend_from_slice(&0x184D_2A50u32.to_le_bytes());
    frame.extend_from_slice(&(skip as u32).to_le_bytes());
    frame.resize(packed_len as usize, 0);

    let mut file = b"KILNSHIP".to_vec();
    file.extend_from_slice(&1u32.to_le_bytes());
    file.extend_from_slice(&0u32.to_le_bytes());
    file.extend_from_slice(&(index_bytes.len() as u64).to_le_bytes());
    file.extend_from_slice(&raw_len.to_le_bytes());
    file.extend_from_slice(&packed_len.to_le_bytes());
    file.extend_from_slice(&digest);
    file.extend_from_slice(&frame);
    assert_eq!(file.len() as u64, file_len);
    file
}

/// Where the bombs are written.
fn bomb_dir() -> PathBuf {
    let dir = std::env::var_os("KILN_SHIP_BOMB_DIR").map_or_else(
        || Path::new(env!("CARGO_TARGET_TMPDIR")).join("ship-bombs"),
        PathBuf::from,
    );
    std::fs::create_dir_all(&dir).expect("a folder for the bombs");
    dir
}

const FILE_LEN: u64 = 524 << 10;
const MIB: u64 = 1 << 20;
/// What the child process itself takes besides unpacking (the test
/// harness, the file read): generous.
const BASELINE: u64 = 24 * MIB;

#[test]
fn a_bomb_costs_at_most_its_declared_length_once_and_a_forged_one_the_window() {
    let dir = bomb_dir();
    let keep = std::env::var_os("KILN_SHIP_BOMB_DIR").is_some();
    let bound = FILE_LEN - 72;
    let most = bound * MAX_EXPANSION + SLACK;
    let cases = [
        // (name, declared raw length, digest right)
        ("2GiB-right", 2 << 30, keep),
        ("2GiB-wrong", 2 << 30, false),
        ("bound-right", most, true),
        ("bound-wrong", most, false),
    ];
    let mut table = Vec::new();
    for (name, raw_len, right) in cases {
        let path = dir.join(format!("{name}.kship"));
        std::fs::write(&path, bomb(raw_len, FILE_LEN, right)).expect("written");
        let (peak, outcome) = unpack_in_child(&path);
        table.push(format!(
            "{name}: {} KiB declaring {} MiB: peak {} MiB, {outcome}",
            FILE_LEN >> 10,
            raw_len >> 20,
            peak >> 20
        ));
        if raw_len > most {
            assert!(
                outcome.starts_with("refused:shipped_image_header"),
                "{name}: {outcome}"
            );
            assert!(peak < BASELINE, "{name}: {} MiB", peak >> 20);
        } else if right {
            assert_eq!(outcome, "unpacked:1", "{name}");
            assert!(peak > raw_len, "{name}: the body is held once");
            assert!(
                peak < raw_len + MAX_WINDOW + BASELINE,
                "{name}: {} MiB for a {} MiB body",
                peak >> 20,
                raw_len >> 20
            );
        } else {
            assert!(
                outcome.starts_with("refused:shipped_image_body_digest"),
                "{name}: {outcome}"
            );
            assert!(
                peak < MAX_WINDOW + BASELINE,
                "{name}: {} MiB before the refusal",
                peak >> 20
            );
        }
        if !keep {
            std::fs::remove_file(&path).expect("removed");
        }
    }
    println!("{}", table.join("\n"));
}
