//! Shared by the `disk_*` tests: a deterministic CPU "compiler" and the
//! roles of a child process (the test binary run again, through
//! `kiln_test_support::child`).
#![allow(dead_code)] // each test file uses a different part

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{Artifact, ArtifactKind, Compiled, Digest, Key, KeyBuilder, Owner};
use kiln_image::EntryData;
use kiln_test_support::child;

/// The environment variable that turns a test binary into a child role.
pub const ROLE: &str = "KILN_DISK_TEST_ROLE";

/// The compiler configuration of every test entry.
pub fn owner() -> Owner {
    Owner::new("test-cc", "1.0", "cpu", ["-O2"]).expect("a valid owner")
}

/// The key of kernel `i`.
pub fn key(i: u64) -> Key {
    KeyBuilder::new("kiln-disk-test", 1)
        .field("kernel", &i)
        .expect("u64 encodes")
        .finish()
}

/// "Compiles" kernel `i`: `len` bytes that are a function of the key (BLAKE3
/// in extendable-output mode), so any byte served for the wrong key, torn or
/// garbled, is detected.
pub fn compile(i: u64, len: usize) -> Vec<u8> {
    let mut out = vec![0u8; len];
    blake3::Hasher::new()
        .update(key(i).digest().as_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

/// The payload size of kernel `i` in the default tests: 300 B to ~4.4 KiB.
pub fn default_len(i: u64) -> usize {
    300 + (i as usize * 397) % 4096
}

/// Kernel `i`, for `Cache::get_or_compile`.
pub fn compiled(i: u64, len: usize) -> Compiled {
    Compiled::new(format!("kernel-{i}")).artifact(Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: vec![format!("kernel_{i}")],
        bytes: compile(i, len),
    })
}

/// Kernel `i`, as an entry for `DiskCache::put`.
pub fn entry(i: u64, len: usize) -> EntryData {
    let owner = owner();
    EntryData {
        owner: owner.digest(),
        owner_label: owner.label().to_owned(),
        key: *key(i).digest(),
        name: format!("kernel-{i}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![format!("kernel_{i}")],
            bytes: compile(i, len),
        }],
    }
}

/// `(owner, key)` digests of kernel `i`.
pub fn ids(i: u64) -> (Digest, Digest) {
    (owner().digest(), *key(i).digest())
}

/// A test configuration for `dir`: compaction after 4 segments.
/// The segment files (`seg-*.kimg`) of the cache rooted at `dir`, sorted.
pub fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(config(dir).images_dir())
        .expect("list")
        .filter_map(|d| d.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("seg-") && n.ends_with(".kimg"))
        .collect();
    names.sort();
    names
}

/// Stores kernels `0..count` in the cache at `dir`, then compacts them into
/// its base segment (`kiln cache gc`).
pub fn compacted(dir: &Path, count: u64) {
    let writer = DiskCache::open(config(dir)).expect("open");
    for i in 0..count {
        assert!(writer.put(&entry(i, default_len(i))));
    }
    writer.gc().expect("gc");
    assert_eq!(segment_files(dir), ["seg-base.kimg"]);
}

pub fn config(dir: &Path) -> DiskConfig {
    let mut config = DiskConfig::new(dir);
    config.compact_after = 4;
    config
}

/// This test binary, set to run only the ignored test `child` with `role`.
pub fn child_process(role: &str) -> Command {
    child::command(ROLE, role)
}

/// Runs `command` to completion and returns the `RESULT` line's fields.
pub fn run_for_result(command: &mut Command) -> BTreeMap<String, String> {
    let stdout = child::run(command);
    parse_result(&stdout).unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
}

/// The `key=value` fields of the last `RESULT ...` line of `stdout`.
pub fn parse_result(stdout: &str) -> Option<BTreeMap<String, String>> {
    Some(
        child::result_line(stdout)?
            .split_whitespace()
            .filter_map(|field| field.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    )
}

/// A `tracing` subscriber that counts warnings (and prints them).
#[derive(Clone, Default)]
pub struct WarnCounter(pub Arc<AtomicUsize>);

impl WarnCounter {
    /// Warnings seen so far.
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl tracing::Subscriber for WarnCounter {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        if *event.metadata().level() == tracing::Level::WARN {
            self.0.fetch_add(1, Ordering::SeqCst);
            eprintln!("warning from {}: {event:?}", event.metadata().target());
        }
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

/// Runs the child role named by `KILN_DISK_TEST_ROLE` (nothing when unset):
///
/// - `compile`: a `Cache` with the disk tier from `KILN_CACHE*`;
///   `KILN_DISK_TEST_THREADS` threads each `get_or_compile` kernels
///   `0..KILN_DISK_TEST_KEYS` in an order rotated by thread and
///   `KILN_DISK_TEST_SEED`, checking every artifact; prints the cache's
///   counters and the number of warnings logged.
/// - `hit`: looks kernels `0..KILN_DISK_TEST_KEYS` up in a `DiskCache` that
///   is never dropped, and prints how many were found.
/// - `write`: a bare `DiskCache` (compaction after 3 segments) storing
///   `KILN_DISK_TEST_COUNT` kernels (default: forever) of
///   `KILN_DISK_TEST_LEN` bytes from `KILN_DISK_TEST_FIRST` on, printing
///   `stored i` after each.
pub fn run_child_role() {
    let var = |name: &str| std::env::var(name).ok();
    let number =
        |name: &str, default: u64| var(name).and_then(|v| v.parse().ok()).unwrap_or(default);
    match var(ROLE).as_deref() {
        Some("compile") => {
            let warnings = WarnCounter::default();
            tracing::subscriber::set_global_default(warnings.clone()).expect("first subscriber");
            let cache = kiln_core::Cache::new();
            if let Some(disk) =
                kiln_core::disk::DiskCache::from_settings(kiln_core::settings::Settings::process())
            {
                cache.add_tier(Box::new(disk));
            }
            let keys = number("KILN_DISK_TEST_KEYS", 0);
            let threads = number("KILN_DISK_TEST_THREADS", 1);
            let seed = number("KILN_DISK_TEST_SEED", 0);
            std::thread::scope(|scope| {
                for t in 0..threads {
                    let cache = &cache;
                    scope.spawn(move || {
                        for n in 0..keys {
                            let i = (n + seed * 7 + t * 13) % keys;
                            let hit = cache
                                .get_or_compile(&owner(), &key(i), || {
                                    Ok(compiled(i, default_len(i)))
                                })
                                .expect("compiles");
                            assert_eq!(
                                hit.artifact(&ArtifactKind::Ptx),
                                Some(&compile(i, default_len(i))[..])
                            );
                        }
                    });
                }
            });
            let stats = cache.stats();
            println!(
                "RESULT compiles={} tier_hits={} warnings={}",
                stats.compiles,
                stats.hits_tier,
                warnings.count()
            );
        }
        Some("write") => {
            let dir = var("KILN_CACHE_DIR").expect("KILN_CACHE_DIR");
            let mut config = config(Path::new(&dir));
            config.compact_after = 3;
            let cache = kiln_core::disk::DiskCache::open(config).expect("open");
            let len = number("KILN_DISK_TEST_LEN", 1000) as usize;
            let count = number("KILN_DISK_TEST_COUNT", u64::MAX);
            let first = number("KILN_DISK_TEST_FIRST", 0);
            for i in (first..).take(usize::try_from(count).unwrap_or(usize::MAX)) {
                assert!(cache.put(&entry(i, len)), "kernel {i} stored");
                println!("stored {i}");
            }
        }
        Some("hit") => {
            // Like the global cache: never dropped, so only the exit hook
            // can write what this process used.
            let dir = var("KILN_CACHE_DIR").expect("KILN_CACHE_DIR");
            let cache: &'static kiln_core::disk::DiskCache = Box::leak(Box::new(
                kiln_core::disk::DiskCache::open(config(Path::new(&dir))).expect("open"),
            ));
            let hits = (0..number("KILN_DISK_TEST_KEYS", 0))
                .filter(|&i| cache.get(&ids(i).0, &ids(i).1).is_some())
                .count();
            println!("RESULT hits={hits}");
        }
        _ => {} // not a child: nothing to do
    }
}
