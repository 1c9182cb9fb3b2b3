//! The record reader's memory bound, measured on the real `kiln` binary:
//! a million distinct, valid records (the per-line check is an unkeyed
//! hash, so anyone who can write a record file can forge them), the
//! shortest lines the format allows (the worst ratio of memory to input),
//! read by `kiln report` (text and JSON) and `kiln bake` (whose JSON
//! output is made the same way as the report's). Each run's peak
//! resident memory (`ru_maxrss` from `wait4`) must stay at most 8 × the
//! input plus 64 KiB, process included. (Before the reader was bounded,
//! `kiln report` peaked at 9.6 × such an input.)

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// One million records.
const RECORDS: u64 = 1_000_000;

/// The record format's check (see `kiln_core::record`): the first 8 bytes
/// of a BLAKE3 (derive-key mode) of the line before its last tab, in hex.
fn check(body: &str) -> String {
    let hash = blake3::Hasher::new_derive_key("kiln record line v1")
        .update(body.as_bytes())
        .finalize();
    kiln_image::Digest(*hash.as_bytes()).to_hex()[..16].to_owned()
}

/// A hex digest made of `n`.
fn digest(n: u64, salt: u8) -> String {
    let mut bytes = [salt; 32];
    bytes[..8].copy_from_slice(&n.to_le_bytes());
    kiln_image::Digest(bytes).to_hex()
}

/// Writes `RECORDS` distinct `E` records, empty names, labels and
/// producers (the shortest valid lines); returns the file's size.
fn write_records(path: &Path) -> u64 {
    let file = std::fs::File::create(path).expect("creates");
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    for n in 0..RECORDS {
        // Distinct owners and keys: nothing is shared between entries.
        let body = format!(
            "KR1\tE\tcompiled\t{}\t{}\t1\t0\t\t\t",
            digest(n, 1),
            digest(n, 2)
        );
        writeln!(out, "{body}\t{}", check(&body)).expect("writes");
    }
    out.flush().expect("flushes");
    std::fs::metadata(path).expect("stat").len()
}

/// Runs `kiln args` to the end (output to files in `dir`), and returns its
/// exit status and its peak resident memory in bytes.
fn peak_of(args: &[&str], dir: &Path) -> (i32, u64) {
    let stdout = std::fs::File::create(dir.join("stdout")).expect("creates");
    let stderr = std::fs::File::create(dir.join("stderr")).expect("creates");
    let child = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(args)
        .env_remove("KILN_SIGNING_KEY")
        .env_remove("KILN_TRUSTED_KEYS")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("runs kiln");
    let pid = libc::pid_t::try_from(child.id()).expect("a pid");
    let mut status = 0;
    // SAFETY: an all-zero `rusage` is a valid value of this plain C
    // struct of integers.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `pid` is our own child, not waited for yet (`Child` never
    // waits on its own: it is dropped below without `wait`), and both
    // pointers are to live locals of the right types.
    let waited = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    assert_eq!(waited, pid, "wait4: {}", std::io::Error::last_os_error());
    drop(child);
    let code = if libc::WIFEXITED(status) {
        libc::WEXITSTATUS(status)
    } else {
        -1
    };
    // Linux gives ru_maxrss in KiB.
    let peak = u64::try_from(usage.ru_maxrss).expect("a size") * 1024;
    (code, peak)
}

#[test]
fn report_and_bake_stay_under_eight_times_a_million_records() {
    let dir = tempfile::tempdir().expect("temp dir");
    let records = dir.path().join("forged.rec");
    let input = write_records(&records);
    let bound = 8 * input + (64 << 10);
    let out = dir.path().join("out.kimg");
    let runs: [(&str, Vec<&str>, i32); 3] = [
        (
            "report",
            vec!["report", records.to_str().expect("UTF-8")],
            0,
        ),
        (
            "report --json",
            vec!["report", records.to_str().expect("UTF-8"), "--json"],
            0,
        ),
        (
            // Every entry is missing (no store holds them): exit status 1.
            "bake",
            vec![
                "bake",
                records.to_str().expect("UTF-8"),
                "-o",
                out.to_str().expect("UTF-8"),
            ],
            1,
        ),
    ];
    for (what, args, expected) in runs {
        let (code, peak) = peak_of(&args, dir.path());
        let stderr = std::fs::read_to_string(dir.path().join("stderr")).unwrap_or_default();
        assert_eq!(code, expected, "kiln {what}: {stderr}");
        let stdout = std::fs::read_to_string(dir.path().join("stdout")).expect("output");
        assert!(
            stdout.contains(&RECORDS.to_string()),
            "kiln {what} did not count the {RECORDS} entries"
        );
        println!(
            "kiln {what}: {RECORDS} records, input {input} bytes, peak {peak} bytes: {:.2} x the input (bound 8 x + 64 KiB)",
            peak as f64 / input as f64
        );
        assert!(
            peak <= bound,
            "kiln {what} peaked at {peak} bytes, over 8 x {input} + 64 KiB = {bound}"
        );
    }
}
