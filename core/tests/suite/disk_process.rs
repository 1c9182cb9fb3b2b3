//! The disk cache across processes: a second run starts warm, concurrent
//! processes lose nothing and tear nothing, a writer killed mid-write leaves
//! no entry that serves wrong bytes.
//!
//! Children are this test binary re-run with `KILN_DISK_TEST_ROLE` set,
//! running the suite's ignored test `child`.

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::time::Duration;

use crate::disk_support::{child_process, compile, config, default_len, entry, ids};
use kiln_core::ArtifactKind;
use kiln_core::disk::DiskCache;

#[test]
fn a_second_run_is_all_hits_from_disk() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = || {
        crate::disk_support::run_for_result(
            child_process("compile")
                .env("KILN_CACHE_DIR", dir.path())
                .env("KILN_DISK_TEST_KEYS", "40"),
        )
    };
    let first = run();
    assert_eq!(
        (first["compiles"].as_str(), first["tier_hits"].as_str()),
        ("40", "0")
    );
    let second = run();
    assert_eq!(
        (second["compiles"].as_str(), second["tier_hits"].as_str()),
        ("0", "40")
    );
}

#[test]
fn four_processes_of_two_threads_share_one_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let keys = 48;
    let children: Vec<_> = (0..4)
        .map(|p| {
            child_process("compile")
                .env("KILN_CACHE_DIR", dir.path())
                .env("KILN_DISK_TEST_KEYS", keys.to_string())
                .env("KILN_DISK_TEST_THREADS", "2")
                .env("KILN_DISK_TEST_SEED", p.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .expect("child starts")
        })
        .collect();
    let mut compiles = 0;
    for child in children {
        let stdout = kiln_test_support::child::wait(child);
        let result = crate::disk_support::parse_result(&stdout).expect("RESULT line");
        compiles += result["compiles"].parse::<u64>().expect("a number");
    }
    // Each key compiled at least once, at most once per process.
    assert!((keys..=4 * keys).contains(&compiles), "{compiles} compiles");

    let cache = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..keys {
        let hit = cache
            .get(&ids(i).0, &ids(i).1)
            .unwrap_or_else(|| panic!("kernel {i}"));
        assert_eq!(
            hit.artifact(&ArtifactKind::Ptx).expect("readable"),
            Some(&compile(i, default_len(i))[..])
        );
    }
    let report = cache.verify().expect("verify");
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.temp_files, 0, "no half-written file left behind");
    let stats = cache.stats().expect("stats");
    assert_eq!(stats.entries, keys as usize);
    assert!(
        stats.segments <= 12,
        "compacted: {} segments",
        stats.segments
    );
}

#[test]
fn writers_killed_mid_write_leave_no_corrupt_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let len = 256 << 10; // large payloads: kills land inside writes
    let writer = || {
        let mut command = child_process("write");
        command
            .env("KILN_CACHE_DIR", dir.path())
            .env("KILN_DISK_TEST_LEN", len.to_string());
        command
    };
    // Earlier entries, written by a run that finished.
    let status = writer()
        .env("KILN_DISK_TEST_COUNT", "10")
        .stdout(Stdio::null())
        .status()
        .expect("writer runs");
    assert!(status.success());

    let rounds = 20u64;
    let mut killed_mid_write = 0;
    for round in 0..rounds {
        let mut victim = writer()
            .env("KILN_DISK_TEST_FIRST", (1000 * (round + 1)).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("writer starts");
        // Let it store 1 to 4 entries, then kill it at a varying moment of
        // the next write or compaction.
        let stdout = victim.stdout.take().expect("piped");
        let stored = BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .filter(|line| line.starts_with("stored "))
            .take((round % 4 + 1) as usize)
            .count();
        assert_eq!(stored, (round % 4 + 1) as usize);
        std::thread::sleep(Duration::from_micros(round * 150));
        victim.kill().expect("SIGKILL");
        victim.wait().expect("reaped");
        let listing = std::fs::read_dir(config(dir.path()).images_dir()).expect("list");
        let temp = listing
            .filter_map(|d| d.ok()?.file_name().into_string().ok())
            .filter(|name| name.starts_with(".tmp-"))
            .count();
        killed_mid_write += usize::from(temp > 0);
    }
    println!("{killed_mid_write} of {rounds} writers were killed with a temporary file open");

    // Nothing served is wrong; the earlier entries are all there.
    let check = |cache: &DiskCache| {
        for i in 0..10 {
            let hit = cache
                .get(&ids(i).0, &ids(i).1)
                .unwrap_or_else(|| panic!("kernel {i}"));
            assert_eq!(
                hit.artifact(&ArtifactKind::Ptx).expect("ok"),
                Some(&compile(i, len)[..])
            );
        }
        let mut survivors = 0;
        for round in 1..=rounds {
            for i in 1000 * round..1000 * round + 8 {
                if let Some(hit) = cache.get(&ids(i).0, &ids(i).1) {
                    let bytes = hit.artifact(&ArtifactKind::Ptx).expect("ok");
                    assert_eq!(bytes, Some(&compile(i, len)[..]), "kernel {i}");
                    survivors += 1;
                }
            }
        }
        survivors
    };
    let cache = DiskCache::open(config(dir.path())).expect("open");
    let survivors = check(&cache);
    // Every entry a killed writer reported as stored was published.
    let reported: u64 = (0..rounds).map(|r| r % 4 + 1).sum();
    assert!(survivors >= reported as usize, "{survivors} < {reported}");

    let gc = cache.gc().expect("gc");
    println!("after {rounds} kills: {gc:?}");
    let report = cache.verify().expect("verify");
    assert!(report.is_clean() && report.temp_files == 0, "{report:?}");
    assert_eq!(
        check(&DiskCache::open(config(dir.path())).expect("open")),
        survivors
    );
}

#[test]
fn a_short_process_records_what_it_used_when_it_exits() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..6 {
        assert!(cache.put(&entry(i, 200)));
    }
    let stored_by = |cache: &DiskCache| {
        cache
            .ls()
            .expect("ls")
            .into_iter()
            .map(|e| (e.name, e.last_used_ms))
            .collect::<std::collections::BTreeMap<_, _>>()
    };
    let before = stored_by(&cache);
    std::thread::sleep(Duration::from_millis(5));

    // A process that uses kernels 0..3 and exits without dropping its cache
    // (stamps are written once per minute, or at exit).
    let result = crate::disk_support::run_for_result(
        child_process("hit")
            .env("KILN_CACHE_DIR", dir.path())
            .env("KILN_DISK_TEST_KEYS", "3"),
    );
    assert_eq!(result["hits"], "3");
    let after = stored_by(&cache);
    for i in 0..6 {
        let name = format!("kernel-{i}");
        let used = after[&name] > before[&name];
        assert_eq!(used, i < 3, "{name}: {} -> {}", before[&name], after[&name]);
    }
}

#[test]
fn a_process_that_only_reads_rewrites_a_bloated_stamps_file_at_exit() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..4 {
        assert!(cache.put(&entry(i, 200)));
    }
    // One use of kernel 3, recorded when the handle is dropped.
    let user = DiskCache::open(config(dir.path())).expect("open");
    assert!(user.get(&ids(3).0, &ids(3).1).is_some());
    drop(user);
    // Many processes that only read, long ago: the same whole records over
    // and over (each one a valid stamp), well over 64 KiB, and nothing
    // stored since to compact them.
    let stamps = cache.images_dir().join("stamps");
    let records = std::fs::read(&stamps).expect("stamps written on drop");
    assert!(!records.is_empty());
    let bloated = records.repeat((100 << 10) / records.len() + 1);
    std::fs::write(&stamps, &bloated).expect("write");
    std::thread::sleep(Duration::from_millis(5));

    // A reading process that exits without dropping its cache appends its
    // stamps and then rewrites the file: one record per entry.
    let result = crate::disk_support::run_for_result(
        child_process("hit")
            .env("KILN_CACHE_DIR", dir.path())
            .env("KILN_DISK_TEST_KEYS", "2"),
    );
    assert_eq!(result["hits"], "2");
    let len = std::fs::metadata(&stamps).expect("stamps").len();
    assert!(len <= 4 * 80, "{len} bytes of stamps left");
    // And the rewrite kept what the stamps say: kernels 0 and 1 (used at
    // exit) are the most recently used, kernel 3 (used before) next.
    let order: Vec<String> = cache
        .ls()
        .expect("ls")
        .into_iter()
        .map(|e| e.name)
        .collect();
    assert_eq!(order[2], "kernel-3", "{order:?}");
    let mut newest = order[..2].to_vec();
    newest.sort();
    assert_eq!(newest, ["kernel-0", "kernel-1"]);
}
