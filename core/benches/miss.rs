//! What a miss costs a caller beyond the compile itself, with the disk
//! tier on: `get_or_compile` of a new key on a cache built with the global
//! cache's wiring (`kiln_core::add_tiers`, `KILN_CACHE_DIR` a fresh
//! directory), against the same call on a cache with no tier
//! (`KILN_CACHE=0`) and against the compile alone.
//!
//! The disk-tier miss looks the key up on disk (a miss there), compiles,
//! records the entry and queues its store: the segment is written and
//! fsynced by the background writer, not by the caller. The compile is a
//! real deterministic function: 64 KiB of BLAKE3 XOF output from the key.
//!
//! - `miss/compile_alone`: the compile.
//! - `miss/no_tier`: `get_or_compile` of a new key, no tier.
//! - `miss/disk_tier`: the same with the disk tier on.
//!
//! After criterion's groups, the bench prints a table of medians from
//! batches of misses measured alternately (no tier, disk tier), each disk
//! batch's stores flushed before the next batch (outside the timing), so
//! that the background writer stores every entry and runs while the disk
//! batch runs: `cargo bench -p kiln-core --bench miss` (`-- no_such_group`
//! prints the table alone).

use std::ffi::OsString;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use kiln_core::{Artifact, ArtifactKind, Cache, CacheConfig, Compiled, Error, Key, KeyBuilder, Owner};

/// Payload of one compile.
const PAYLOAD: usize = 64 << 10;
/// Misses per batch in the summary, and batches per cache.
const BATCH: u64 = 100;
const ROUNDS: usize = 30;

fn owner() -> Owner {
    Owner::new("benchcc", "1.0", "sm_90a", ["-O3"]).expect("an owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-core miss bench", 1)
        .field("n", &n)
        .expect("a u64 encodes")
        .finish()
}

/// The compile: 64 KiB of BLAKE3 XOF output from the key.
fn compile(key: &Key) -> Compiled {
    let mut bytes = vec![0u8; PAYLOAD];
    blake3::Hasher::new()
        .update(key.digest().as_bytes())
        .finalize_xof()
        .fill(&mut bytes);
    Compiled::new("kernel").artifact(Artifact {
        kind: ArtifactKind::Cubin,
        entry_points: vec!["kernel".into()],
        bytes,
    })
}

/// A cache with the global cache's tiers, configured by `vars`; a memory
/// cap of 64 MiB so that long runs stay bounded (both caches evict alike).
fn cache(vars: &[(&str, &OsString)]) -> Cache {
    let cache = Cache::with_config(CacheConfig::default().memory_max_bytes(Some(64 << 20)));
    kiln_core::add_tiers(&cache, |name| {
        vars.iter()
            .find(|(var, _)| *var == name)
            .map(|(_, value)| (*value).clone())
    });
    cache
}

fn no_tier() -> Cache {
    let off = OsString::from("0");
    let cache = cache(&[("KILN_CACHE", &off)]);
    assert!(format!("{cache:?}").contains("tiers: 0"), "{cache:?}");
    cache
}

fn disk_tier(dir: &Path) -> Cache {
    let dir = OsString::from(dir);
    let max = OsString::from("256M");
    let cache = cache(&[("KILN_CACHE_DIR", &dir), ("KILN_CACHE_MAX_BYTES", &max)]);
    assert!(format!("{cache:?}").contains("tiers: 1"), "{cache:?}");
    cache
}

/// A miss: `get_or_compile` of the next new key.
fn miss(cache: &Cache, next: &AtomicU64) {
    let k = key(next.fetch_add(1, Ordering::Relaxed));
    let hit = cache
        .get_or_compile(&owner(), &k, || Ok::<_, Error>(compile(&k)))
        .expect("compiles");
    black_box(hit.artifact(&ArtifactKind::Cubin).map(<[u8]>::len));
}

fn benches(c: &mut Criterion, dir: &Path) {
    let mut group = c.benchmark_group("miss");
    let next = AtomicU64::new(0);
    group.bench_function("compile_alone", |b| {
        b.iter(|| black_box(compile(&key(next.fetch_add(1, Ordering::Relaxed)))));
    });
    let plain = no_tier();
    group.bench_function("no_tier", |b| b.iter(|| miss(&plain, &next)));
    let disk = disk_tier(&dir.join("criterion"));
    group.bench_function("disk_tier", |b| b.iter(|| miss(&disk, &next)));
    group.finish();
    drop(disk);
}

fn median(mut samples: Vec<f64>) -> f64 {
    samples.sort_by(f64::total_cmp);
    samples[samples.len() / 2]
}

/// Mean microseconds per miss over one batch.
fn batch(cache: &Cache, next: &AtomicU64) -> f64 {
    let started = Instant::now();
    for _ in 0..BATCH {
        miss(cache, next);
    }
    started.elapsed().as_secs_f64() * 1e6 / BATCH as f64
}

fn summary(dir: &Path) {
    let next = AtomicU64::new(1 << 40);
    let plain = no_tier();
    let disk = disk_tier(&dir.join("summary"));
    let (mut compile_alone, mut none, mut with_disk) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..BATCH {
            black_box(compile(&key(next.fetch_add(1, Ordering::Relaxed))));
        }
        compile_alone.push(started.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
        none.push(batch(&plain, &next));
        with_disk.push(batch(&disk, &next));
        disk.flush();
    }
    let stats = disk.stats();
    let (compile_alone, none, with_disk) = (median(compile_alone), median(none), median(with_disk));
    println!(
        "\nA miss through add_tiers' wiring: median µs per miss over {ROUNDS} batches of \
         {BATCH}, measured alternately\n"
    );
    println!("| path | µs per miss | over the compile alone |");
    println!("| --- | --- | --- |");
    println!("| compile alone (64 KiB BLAKE3 XOF) | {compile_alone:.1} | — |");
    println!(
        "| get_or_compile, no tier | {none:.1} | {:+.1} µs |",
        none - compile_alone
    );
    println!(
        "| get_or_compile, disk tier on | {with_disk:.1} | {:+.1} µs |",
        with_disk - compile_alone
    );
    println!(
        "\ndisk tier vs no tier: {:+.1} µs per miss, ratio {:.3}; background writer: \
         {} stored, {} dropped, {} failed",
        with_disk - none,
        with_disk / none,
        stats.stores,
        stats.stores_dropped,
        stats.store_failures
    );
}

fn main() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    benches(&mut criterion, dir.path());
    criterion.final_summary();
    summary(dir.path());
}
