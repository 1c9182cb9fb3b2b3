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
//! The table also gives the disk tier's lookup of an absent key alone, and
//! a miss that then waits for its store (`Cache::flush`): what every miss
//! cost before stores moved to the background writer.
//!
//! After criterion's groups, the bench prints a table of medians from
//! batches of misses measured alternately (no tier, disk tier), each disk
//! batch's stores flushed before the next batch (outside the timing), so
//! that the background writer stores every entry and runs while the disk
//! batch runs: `cargo bench -p kiln-rs-core --bench miss` (`-- no_such_group`
//! prints the table alone).

use std::ffi::OsString;
use std::hint::black_box;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use criterion::Criterion;
use kiln_core::disk::{DiskConfig, DiskTier};
use kiln_core::{
    Artifact, ArtifactKind, Cache, CacheConfig, Compiled, Key, KeyBuilder, Owner, Tier,
};

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
    let settings = kiln_core::settings::Settings::from_vars(
        vars.iter()
            .map(|(name, value)| (*name, (*value).clone()))
            .collect(),
    );
    kiln_core::add_tiers(&cache, &settings);
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
        .get_or_compile(&owner(), &k, || Ok(compile(&k)))
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

/// The calling thread's CPU time.
fn thread_cpu() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `clock_gettime` writes one `timespec` through the pointer,
    // which points at a live, writable `timespec` of this frame.
    let failed = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) } != 0;
    assert!(!failed, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// Mean microseconds per miss over one batch: wall clock, and the calling
/// thread's CPU time (what the caller's path costs, whatever else the
/// machine runs meanwhile).
fn batch(cache: &Cache, next: &AtomicU64) -> (f64, f64) {
    let (started, cpu) = (Instant::now(), thread_cpu());
    for _ in 0..BATCH {
        miss(cache, next);
    }
    let per = |d: Duration| d.as_secs_f64() * 1e6 / BATCH as f64;
    (per(started.elapsed()), per(thread_cpu() - cpu))
}

fn summary(dir: &Path) {
    let next = AtomicU64::new(1 << 40);
    let plain = no_tier();
    let disk = disk_tier(&dir.join("summary"));
    let (mut compile_alone, mut compile_cpu) = (Vec::new(), Vec::new());
    let (mut none, mut none_cpu, mut with_disk, mut with_disk_cpu) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let (started, cpu) = (Instant::now(), thread_cpu());
        for _ in 0..BATCH {
            black_box(compile(&key(next.fetch_add(1, Ordering::Relaxed))));
        }
        compile_alone.push(started.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
        compile_cpu.push((thread_cpu() - cpu).as_secs_f64() * 1e6 / BATCH as f64);
        let (wall, cpu) = batch(&plain, &next);
        none.push(wall);
        none_cpu.push(cpu);
        let (wall, cpu) = batch(&disk, &next);
        with_disk.push(wall);
        with_disk_cpu.push(cpu);
        disk.flush();
    }
    let stats = disk.stats();
    // The disk tier's part of a miss alone: a lookup of a key it does not
    // have, on the same directory, with the writer idle.
    let tier = DiskTier::new(DiskConfig::new(dir.join("summary")));
    let mut lookup = Vec::new();
    for _ in 0..ROUNDS {
        let started = Instant::now();
        for _ in 0..BATCH {
            let k = key(next.fetch_add(1, Ordering::Relaxed));
            black_box(tier.load_entry(&owner(), &k).map(|e| e.is_some()).ok());
        }
        lookup.push(started.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
    }
    let lookup = median(lookup);
    // The same miss waiting for its store, as it did before stores moved
    // to the background writer (fewer rounds: each costs milliseconds).
    let mut waited = Vec::new();
    for _ in 0..ROUNDS / 3 {
        let started = Instant::now();
        for _ in 0..BATCH / 10 {
            miss(&disk, &next);
            disk.flush();
        }
        waited.push(started.elapsed().as_secs_f64() * 1e6 / (BATCH / 10) as f64);
    }
    let waited = median(waited);
    let (compile_alone, none, with_disk) = (median(compile_alone), median(none), median(with_disk));
    let (compile_cpu, none_cpu, with_disk_cpu) =
        (median(compile_cpu), median(none_cpu), median(with_disk_cpu));
    println!(
        "\nA miss through add_tiers' wiring: medians over {ROUNDS} batches of {BATCH} misses, \
         measured alternately; wall clock, and the calling thread's CPU time\n"
    );
    println!("| path | µs per miss, wall | µs per miss, caller's CPU |");
    println!("| --- | ---: | ---: |");
    println!("| compile alone (64 KiB BLAKE3 XOF) | {compile_alone:.1} | {compile_cpu:.1} |");
    println!("| get_or_compile, no tier | {none:.1} | {none_cpu:.1} |");
    println!("| get_or_compile, disk tier on | {with_disk:.1} | {with_disk_cpu:.1} |");
    println!("| (the disk tier's lookup of an absent key alone, writer idle) | {lookup:.1} | |");
    println!(
        "| (get_or_compile, disk tier on, then waiting for the store: the cost before the \
         background writer) | {waited:.1} | |"
    );
    println!(
        "\ndisk tier on vs no tier: wall {:+.1} µs per miss (ratio {:.2}), caller's CPU {:+.1} µs \
         (ratio {:.2}); background writer: {} stored, {} dropped, {} failed",
        with_disk - none,
        with_disk / none,
        with_disk_cpu - none_cpu,
        with_disk_cpu / none_cpu,
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
