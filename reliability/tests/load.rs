//! Multi-process load: N processes × M threads call `get_or_compile` on one
//! cache directory (the disk tier under an in-memory `Cache` in each
//! process) for a fixed number of operations over a fixed key space. Every
//! answer is checked in the process that got it (errors), and after all
//! have exited every key any process compiled is on disk with its exact
//! bytes (lost entries).

use std::collections::BTreeSet;
use std::process::{Command, Stdio};

use kiln_core::ArtifactKind;
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_reliability::Table;
use kiln_reliability::fixture::{load_payload_len, numbered_entry, numbered_key, owners};

const PROCESSES: usize = 4;
const THREADS: usize = 4;
const OPS_PER_THREAD: u64 = 2000;
const KEYS: u64 = 256;

#[test]
fn processes_times_threads_on_one_cache_lose_nothing_and_serve_no_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let children: Vec<_> = (0..PROCESSES)
        .map(|p| {
            Command::new(env!("CARGO_BIN_EXE_kiln-reliability-child"))
                .args([
                    "load".to_string(),
                    dir.path().display().to_string(),
                    THREADS.to_string(),
                    OPS_PER_THREAD.to_string(),
                    KEYS.to_string(),
                    p.to_string(),
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("helper process starts")
        })
        .collect();
    let (mut ops, mut errors, mut compiles, mut memory_hits, mut disk_hits) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut compiled = BTreeSet::new();
    for child in children {
        let stdout = kiln_test_support::child::wait(child);
        for line in stdout.lines() {
            if let Some(i) = line.strip_prefix("compiled ") {
                compiled.insert(i.parse::<u64>().expect("a key number"));
            }
            if let Some(result) = line.strip_prefix("RESULT ") {
                for field in result.split_whitespace() {
                    let (name, value) = field.split_once('=').expect("name=value");
                    let value: u64 = value.parse().expect("a number");
                    match name {
                        "ops" => ops += value,
                        "errors" => errors += value,
                        "compiles" => compiles += value,
                        "hits_memory" => memory_hits += value,
                        "hits_tier" => disk_hits += value,
                        _ => {}
                    }
                }
            }
        }
    }
    let owner = &owners().expect("owners")[2];
    let cache = DiskCache::open(DiskConfig::new(dir.path())).expect("open");
    let mut lost = 0;
    for &i in &compiled {
        let expected = numbered_entry(owner, i, load_payload_len(i));
        match cache.get(&owner.digest(), numbered_key(i).digest()) {
            Some(hit) => assert_eq!(
                hit.artifact(&ArtifactKind::Ptx).expect("readable"),
                Some(&expected.artifacts[0].bytes[..]),
                "key {i}"
            ),
            None => lost += 1,
        }
    }
    let verify = cache.verify().expect("verify");
    let mut table = Table::new(["figure", "value"]);
    table.row([
        "processes × threads".to_string(),
        format!("{PROCESSES} × {THREADS}"),
    ]);
    table.row(["get_or_compile calls".to_string(), ops.to_string()]);
    table.row([
        "distinct keys compiled (of the key space)".to_string(),
        format!("{} of {KEYS}", compiled.len()),
    ]);
    table.row(["compiles, all processes".to_string(), compiles.to_string()]);
    table.row([
        "hits from memory / from disk".to_string(),
        format!("{memory_hits} / {disk_hits}"),
    ]);
    table.row(["wrong answers or errors".to_string(), errors.to_string()]);
    table.row([
        "compiled keys missing from disk afterwards".to_string(),
        lost.to_string(),
    ]);
    table.row([
        "segments after, all verified in full".to_string(),
        verify.segments.len().to_string(),
    ]);
    println!("\nMulti-process load\n\n{table}");
    let expected_ops = (PROCESSES * THREADS) as u64 * OPS_PER_THREAD;
    assert_eq!(ops, expected_ops);
    assert_eq!(errors, 0);
    assert_eq!(lost, 0);
    assert!(verify.is_clean(), "{verify:?}");
    // Single flight per process and the shared disk: each key compiled at
    // least once and at most once per process.
    assert_eq!(compiled.len() as u64, KEYS);
    assert!(
        (KEYS..=PROCESSES as u64 * KEYS).contains(&compiles),
        "{compiles}"
    );
}
