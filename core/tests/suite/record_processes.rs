//! `KILN_RECORD` from many processes at once: each appends its records to
//! one file with single `O_APPEND` writes of whole records; the file reads
//! back with no damaged line, each entry recorded once per process and
//! every hit counted. A process killed with SIGKILL has recorded every
//! entry it used (only its hit counts, written at exit, are lost).

use kiln_core::record::{DEFAULT_READ_LIMIT, Recorder, Recording, SourceKind};
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner};
use kiln_test_support::child;
use std::path::Path;

const ROLE: &str = "KILN_RECORD_TESTS_ROLE";
const FILE: &str = "KILN_RECORD_TESTS_FILE";
const ME: &str = "KILN_RECORD_TESTS_PROCESS";

const PROCESSES: usize = 6;
const THREADS: usize = 4;
const SHARED_KEYS: usize = 40;
const OWN_KEYS: usize = 10;
const ROUNDS: usize = 25;

fn owner() -> Owner {
    Owner::new("rec-compiler", "1.0", "rec-target", Vec::<String>::new()).expect("valid owner")
}

fn key(name: &str) -> Key {
    KeyBuilder::new("kiln-core record process tests", 1)
        .str("name", name)
        .finish()
}

/// Long names, so that records are about 1 KiB and concurrent appends
/// would tear each other if they were not atomic.
fn name(n: usize) -> String {
    format!("{n:04}-{}", "specialization".repeat(12))
}

fn own_name(process: &str, n: usize) -> String {
    format!("own-{process}-{}", name(n))
}

/// What each child does: `THREADS` threads ask `ROUNDS` times for every
/// shared key and for this process's own keys.
fn record(path: &Path, process: &str) {
    let cache = Cache::new();
    cache
        .record_into(Recorder::open(path).expect("the record file opens"))
        .expect("no recorder yet");
    let names: Vec<String> = (0..SHARED_KEYS)
        .map(name)
        .chain((0..OWN_KEYS).map(|n| own_name(process, n)))
        .collect();
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            scope.spawn(|| {
                for _ in 0..ROUNDS {
                    for name in &names {
                        cache
                            .get_or_compile(&owner(), &key(name), || {
                                Ok(Compiled::new(name.clone()).artifact(Artifact {
                                    kind: ArtifactKind::Object,
                                    entry_points: Vec::new(),
                                    bytes: name.as_bytes().to_vec(),
                                }))
                            })
                            .expect("the compile succeeds");
                    }
                }
            });
        }
    });
    // The process exits normally: the exit hook writes the hit counts.
    println!(
        "RESULT recorded={}",
        cache.recorder().map_or(0, |r| r.entries())
    );
}

/// The child's role named by `KILN_RECORD_TESTS_ROLE` (nothing when
/// unset), run by the suite's `child` test.
pub fn run_child_role() {
    let (Some(role), Some(path), Some(me)) = (
        std::env::var_os(ROLE),
        std::env::var_os(FILE),
        std::env::var(ME).ok(),
    ) else {
        return;
    };
    if role == "killed" {
        record_then_wait(Path::new(&path), &me);
    } else {
        assert_eq!(role, "record");
        record(Path::new(&path), &me);
    }
}

/// Gets `OWN_KEYS` entries twice each, says so, and waits to be killed.
fn record_then_wait(path: &Path, process: &str) {
    let cache = Cache::new();
    cache
        .record_into(Recorder::open(path).expect("the record file opens"))
        .expect("no recorder yet");
    for _ in 0..2 {
        for n in 0..OWN_KEYS {
            let name = own_name(process, n);
            cache
                .get_or_compile(&owner(), &key(&name), || Ok(Compiled::new(name.clone())))
                .expect("the compile succeeds");
        }
    }
    println!("RESULT ready");
    std::thread::sleep(std::time::Duration::from_secs(600));
}

#[test]
fn processes_appending_to_one_record_file_never_tear_a_record() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("fleet.rec");
    let children: Vec<_> = (0..PROCESSES)
        .map(|n| {
            let mut command = child::command(ROLE, "record");
            command
                .env(FILE, &path)
                .env(ME, n.to_string())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped());
            command.spawn().expect("the child starts")
        })
        .collect();
    for spawned in children {
        let stdout = child::wait(spawned);
        assert_eq!(
            child::result_line(&stdout),
            Some(format!("recorded={}", SHARED_KEYS + OWN_KEYS).as_str()),
            "{stdout}"
        );
    }

    let mut recording = Recording::new();
    recording
        .read_file(&path, DEFAULT_READ_LIMIT)
        .expect("the record file reads");
    let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
    println!(
        "{PROCESSES} processes x {THREADS} threads: {} records, {bytes} bytes, {} entries, {:?}",
        recording.records(),
        recording.len(),
        recording.damage()
    );
    assert!(recording.damage().is_clean(), "{:?}", recording.damage());
    assert_eq!(recording.len(), SHARED_KEYS + PROCESSES * OWN_KEYS);
    let per_process = (THREADS * ROUNDS) as u64;
    for n in 0..SHARED_KEYS {
        let used = recording
            .get(&owner().digest(), key(&name(n)).digest())
            .expect("every shared key is recorded");
        assert_eq!(used.name, name(n));
        assert_eq!(
            used.sources.keys().collect::<Vec<_>>(),
            [&SourceKind::Compiled]
        );
        assert_eq!(used.compiles(), PROCESSES as u64, "once per process");
        assert_eq!(used.hits(), PROCESSES as u64 * per_process);
    }
    for process in 0..PROCESSES {
        for n in 0..OWN_KEYS {
            let used = recording
                .get(
                    &owner().digest(),
                    key(&own_name(&process.to_string(), n)).digest(),
                )
                .expect("every process's own key is recorded");
            assert_eq!((used.compiles(), used.hits()), (1, per_process));
        }
    }
}

#[test]
fn a_process_killed_has_recorded_every_entry_it_used() {
    use std::io::BufRead;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("killed.rec");
    let mut spawned = child::command(ROLE, "killed")
        .env(FILE, &path)
        .env(ME, "k")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the child starts");
    let stdout = spawned.stdout.take().expect("piped stdout");
    let ready = std::io::BufReader::new(stdout)
        .lines()
        .map_while(Result::ok)
        .any(|line| line.contains("RESULT ready"));
    spawned.kill().expect("SIGKILL");
    spawned.wait().expect("the child is reaped");
    assert!(ready, "the child got its entries");

    let mut recording = Recording::new();
    recording
        .read_file(&path, DEFAULT_READ_LIMIT)
        .expect("the record file reads");
    assert!(recording.damage().is_clean(), "{:?}", recording.damage());
    assert_eq!(
        recording.len(),
        OWN_KEYS,
        "every entry's record was written at once"
    );
    for used in recording.entries() {
        // The second hit of each was to be counted at exit, which never came.
        assert_eq!((used.compiles(), used.hits()), (1, 1));
    }
}
