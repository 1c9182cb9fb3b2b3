//! Disk-cache hits against a file-per-entry directory cache (the layout of
//! Triton and cuda.core: one file per entry named by the hex key, read and
//! BLAKE3-checked on a hit), both built here from the same 1000 entries of
//! 4 KiB.
//!
//! Kiln is measured as an application meets it: a [`Cache`] with the tiers
//! of the global cache ([`kiln_core::add_tiers`], the disk tier in the
//! fixture's directory), each hit a [`Cache::get_or_compile`] answered by
//! the disk tier (the entry borrowed from the segment, recorded in memory).
//!
//! - `fresh_process_{1,16,256}_hits`: a new process that needs that many
//!   entries (spread over all entries). Kiln builds its cache (no I/O), and
//!   on the first miss opens the cache directory; it finds each entry
//!   (opening the segments that hold them: header and index checks; the
//!   base segment first, the others after listing the directory on the
//!   first miss there), checks and borrows its payload, and on drop (in a
//!   real process: at exit) appends its recency stamps and unmaps; the
//!   baseline opens, reads and checks one file per hit. Throughput is in
//!   hits. Kiln is measured twice: as 1000 stores leave the directory (a few
//!   segments), and after `gc` (one segment).
//! - `first_hit_in_fresh_process`: Kiln's part of the above for one hit
//!   (cache built, directory and segment opened, payload checked).
//! - `first_access_in_open_process`: a hit on an entry not used before by a
//!   process that has every segment open (payload checksum computed).
//! - `warm_process`: a hit in a process that got the entry before (Kiln: the
//!   memory index, the payload still borrowed from the mapped segment and
//!   its checksum remembered; the baseline reads and checks the file again,
//!   having no memory of it).
//! - `floor/blake3_of_one_payload`: the checksum of one payload, which both
//!   caches compute on a first hit.
//!
//! After criterion's groups, the bench prints a table (medians, Kiln and
//! the baseline measured alternately) of the per-hit cost in a fresh
//! process, where a fresh Kiln process spends its time, and the same hits
//! in real fresh processes: `cargo bench -p kiln-rs-core --bench disk`
//! (`-- no_such_group` prints the tables alone).
//!
//! For the last table the bench binary spawns itself as a child process.
//! Environment variables select these tool modes, also handy with
//! `strace -f -c` and `perf record` (the binary is
//! `target/release/deps/disk-<hash>`):
//! `KILN_DISK_BENCH_FIXTURE=<dir>` builds the three caches under `<dir>`
//! (`kiln/`, `kiln-gc/`, `files/`) and exits;
//! `KILN_DISK_BENCH_CHILD=<kiln|files>:<hits>:<cache dir>` is a fresh
//! process that needs `<hits>` entries from that cache, prints the
//! microseconds its lookups took, and exits as a program with a global
//! cache does (the cache is never dropped: the exit hook appends the
//! recency stamps and the kernel unmaps); with `KILN_DISK_BENCH_REPEAT=<n>`
//! a Kiln child first plays `n` fresh processes in-process (open, hits,
//! drop), for `perf record`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use std::time::Instant;

use criterion::{Criterion, Throughput};
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{Artifact, ArtifactKind, Cache, Key, KeyBuilder, Owner};
use kiln_image::EntryData;

const ENTRIES: u64 = 1000;
const PAYLOAD: usize = 4 << 10;

fn owner() -> Owner {
    Owner::new("benchcc", "1.0", "sm_90a", ["-O3"]).expect("an owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-core disk bench", 1)
        .field("n", &n)
        .expect("a u64 encodes")
        .finish()
}

fn payload(n: u64) -> Vec<u8> {
    let mut out = vec![0u8; PAYLOAD];
    blake3::Hasher::new()
        .update(&n.to_le_bytes())
        .finalize_xof()
        .fill(&mut out);
    out
}

fn entry(n: u64) -> EntryData {
    let owner = owner();
    EntryData {
        owner: owner.digest(),
        owner_label: owner.label().to_owned(),
        key: *key(n).digest(),
        name: format!("kernel_{n}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Cubin,
            entry_points: vec![format!("kernel_{n}")],
            bytes: payload(n),
        }],
    }
}

/// The file-per-entry baseline: `dir/<hex key>` holds the payload's BLAKE3
/// and then the payload.
struct FilePerEntry {
    dir: PathBuf,
}

impl FilePerEntry {
    fn build(dir: &Path) -> FilePerEntry {
        for n in 0..ENTRIES {
            let bytes = payload(n);
            let mut file = blake3::hash(&bytes).as_bytes().to_vec();
            file.extend_from_slice(&bytes);
            std::fs::write(dir.join(key(n).digest().to_hex()), file).expect("write");
        }
        FilePerEntry {
            dir: dir.to_path_buf(),
        }
    }

    /// A hit: read the file, check the checksum, return the payload.
    fn get(&self, key: &Key) -> Option<Vec<u8>> {
        let mut file = std::fs::read(self.dir.join(key.digest().to_hex())).ok()?;
        if file.len() < 32 || blake3::hash(&file[32..]).as_bytes()[..] != file[..32] {
            return None;
        }
        file.drain(..32);
        Some(file)
    }
}

fn kiln_config(dir: &Path) -> DiskConfig {
    let mut config = DiskConfig::new(dir);
    config.max_bytes = 1 << 30;
    config
}

/// Stores every entry, one `put` each (compaction merges as it goes); with
/// `gc`, then merges everything into one segment (`kiln cache gc`).
fn build_kiln(dir: &Path, gc: bool) {
    let cache = DiskCache::open(kiln_config(dir)).expect("open");
    for n in 0..ENTRIES {
        assert!(cache.put(&entry(n)));
    }
    if gc {
        cache.gc().expect("gc");
    }
    let stats = cache.stats().expect("stats");
    eprintln!(
        "kiln disk cache: {} entries in {} segments, {} bytes",
        stats.entries, stats.segments, stats.bytes
    );
}

/// A fresh process's cache as the global cache is wired
/// ([`kiln_core::add_tiers`]), its disk tier in `dir`. No I/O: the directory
/// is opened on the first miss in memory.
fn kiln_process(dir: &Path) -> Cache {
    let cache = Cache::new();
    let settings = kiln_core::settings::Settings::from_vars(
        [("KILN_CACHE_DIR", dir.as_os_str())].into_iter().collect(),
    );
    let tiers = kiln_core::add_tiers(&cache, &settings);
    assert_eq!(tiers, ["disk"]);
    cache
}

/// A hit on entry `n`: `get_or_compile`, answered by the disk tier the
/// first time in `cache` (by memory after that), its payload checked on
/// first use; a miss would be a compile, which fails here.
fn kiln_hit(cache: &Cache, n: u64) -> usize {
    let hit = cache
        .get_or_compile(&owner(), &key(n), || {
            Err(std::io::Error::other("not in the fixture").into())
        })
        .expect("a disk-tier hit");
    let bytes = hit.artifact(&ArtifactKind::Cubin).expect("a checked cubin");
    black_box(bytes).len()
}

/// Hit counts of a fresh process measured.
const HIT_COUNTS: [u64; 3] = [1, 16, 256];

/// The caches, built in the same run.
struct Fixture {
    /// Kiln, as 1000 stores leave it (several segments).
    kiln_dir: tempfile::TempDir,
    /// Kiln after `gc` (one segment).
    compacted_dir: tempfile::TempDir,
    files: FilePerEntry,
    _files_dir: tempfile::TempDir,
}

impl Fixture {
    fn build() -> Fixture {
        let kiln_dir = tempfile::tempdir().expect("temp dir");
        let compacted_dir = tempfile::tempdir().expect("temp dir");
        let files_dir = tempfile::tempdir().expect("temp dir");
        build_kiln(kiln_dir.path(), false);
        build_kiln(compacted_dir.path(), true);
        let files = FilePerEntry::build(files_dir.path());
        Fixture {
            kiln_dir,
            compacted_dir,
            files,
            _files_dir: files_dir,
        }
    }

    /// A fresh process that needs `hits` entries: Kiln builds its cache,
    /// opens the directory on the first miss, finds and checks each entry,
    /// and drops the cache (in a real process: exit), which appends the
    /// recency stamps and unmaps.
    fn kiln_fresh(&self, dir: &Path, keys: &mut impl FnMut() -> u64, hits: u64) -> usize {
        let cache = kiln_process(dir);
        (0..hits).map(|_| kiln_hit(&cache, keys())).sum()
    }

    /// The same with the file-per-entry cache: one read and check per hit.
    fn files_fresh(&self, keys: &mut impl FnMut() -> u64, hits: u64) -> usize {
        (0..hits)
            .map(|_| black_box(self.files.get(&key(keys())).expect("a hit")).len())
            .sum()
    }
}

/// Keys spread over all entries (and so over all segments).
fn key_cycle() -> impl FnMut() -> u64 {
    let mut next = 0u64;
    move || {
        next = (next + 7919) % ENTRIES;
        next
    }
}

fn benches(c: &mut Criterion, fixture: &Fixture) {
    let mut keys = key_cycle();
    for hits in HIT_COUNTS {
        let mut group = c.benchmark_group(format!("fresh_process_{hits}_hits"));
        group.throughput(Throughput::Elements(hits));
        group.bench_function("kiln_disk_tier", |b| {
            b.iter(|| fixture.kiln_fresh(fixture.kiln_dir.path(), &mut keys, hits))
        });
        group.bench_function("kiln_disk_tier_after_gc", |b| {
            b.iter(|| fixture.kiln_fresh(fixture.compacted_dir.path(), &mut keys, hits))
        });
        group.bench_function("file_per_entry", |b| {
            b.iter(|| fixture.files_fresh(&mut keys, hits))
        });
        group.finish();
    }

    let mut group = c.benchmark_group("first_hit_in_fresh_process");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter(|| kiln_hit(&kiln_process(fixture.kiln_dir.path()), keys()))
    });
    group.finish();

    let mut group = c.benchmark_group("first_access_in_open_process");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let cache = kiln_process(fixture.kiln_dir.path());
                for n in (0..ENTRIES).step_by(97) {
                    kiln_hit(&cache, n); // map every segment outside the timing
                }
                let fresh: Vec<u64> = (0..ENTRIES).filter(|n| n % 97 != 0).collect();
                let batch = (iters - done).min(fresh.len() as u64);
                let start = Instant::now();
                for &n in &fresh[..batch as usize] {
                    kiln_hit(&cache, n);
                }
                total += start.elapsed();
                done += batch;
            }
            total
        })
    });
    group.finish();

    let mut group = c.benchmark_group("warm_process");
    let cache = kiln_process(fixture.kiln_dir.path());
    for n in 0..ENTRIES {
        kiln_hit(&cache, n); // every entry got once, outside the timing
    }
    group.bench_function("kiln_disk_tier", |b| b.iter(|| kiln_hit(&cache, keys())));
    group.bench_function("file_per_entry", |b| {
        b.iter(|| fixture.files_fresh(&mut keys, 1))
    });
    group.finish();

    let mut group = c.benchmark_group("floor");
    let bytes = payload(0);
    group.bench_function("blake3_of_one_payload", |b| {
        b.iter(|| blake3::hash(black_box(&bytes)))
    });
    group.finish();
}

/// The median of `runs` timings of `f`, in microseconds.
fn median_micros(runs: usize, mut f: impl FnMut() -> usize) -> f64 {
    let mut times: Vec<f64> = (0..runs)
        .map(|_| {
            let start = Instant::now();
            black_box(f());
            start.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    times.sort_by(f64::total_cmp);
    times[runs / 2]
}

/// A table for BENCHMARKS.md: per-hit cost in a fresh process, Kiln (as
/// 1000 stores leave the directory, and after `gc`) against the
/// file-per-entry cache, measured alternately in this run (the median of
/// five medians).
fn summary(fixture: &Fixture) {
    let mut keys = key_cycle();
    println!();
    println!(
        "| hits in a fresh process | file per entry, µs/hit | Kiln, µs/hit | Kiln after gc, µs/hit | Kiln faster by | after gc |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for hits in HIT_COUNTS {
        let runs = (20_000 / hits as usize).clamp(50, 2000);
        let mut times: [Vec<f64>; 3] = Default::default();
        for _ in 0..5 {
            times[0].push(median_micros(runs, || fixture.files_fresh(&mut keys, hits)));
            times[1].push(median_micros(runs, || {
                fixture.kiln_fresh(fixture.kiln_dir.path(), &mut keys, hits)
            }));
            times[2].push(median_micros(runs, || {
                fixture.kiln_fresh(fixture.compacted_dir.path(), &mut keys, hits)
            }));
        }
        let [files, kiln, compacted] = times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[2] / hits as f64
        });
        println!(
            "| {hits} | {files:.2} | {kiln:.2} | {compacted:.2} | {:.2}× | {:.2}× |",
            files / kiln,
            files / compacted
        );
    }
}

/// Where a fresh process's time goes (medians): building the cache with the
/// global cache's tiers (no I/O), the first hit (opening the directory and a
/// segment: header and index checks, payload map, payload checksum), a
/// second hit, and what the end of the process costs (recency stamps
/// appended, segments unmapped, when the cache drops).
fn phases(fixture: &Fixture) {
    let mut keys = key_cycle();
    let mut times: [Vec<f64>; 4] = Default::default();
    for _ in 0..3000 {
        let start = Instant::now();
        let cache = kiln_process(fixture.kiln_dir.path());
        let built = Instant::now();
        kiln_hit(&cache, keys());
        let first = Instant::now();
        kiln_hit(&cache, keys());
        let second = Instant::now();
        drop(cache);
        let dropped = Instant::now();
        let micros = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e6;
        times[0].push(micros(start, built));
        times[1].push(micros(built, first));
        times[2].push(micros(first, second));
        times[3].push(micros(second, dropped));
    }
    let names = [
        "build the cache and its tiers (no I/O)",
        "first hit (opens the directory)",
        "second hit",
        "exit: append the recency stamps, unmap, close",
    ];
    println!();
    println!("| fresh Kiln process, phase | µs (median) |");
    println!("| --- | ---: |");
    for (name, mut phase) in names.into_iter().zip(times) {
        phase.sort_by(f64::total_cmp);
        println!("| {name} | {:.2} |", phase[phase.len() / 2]);
    }
    let bytes = payload(0);
    let checksum = median_micros(10_000, || {
        blake3::hash(black_box(&bytes)).as_bytes()[0].into()
    });
    println!("| (floor) BLAKE3 of one 4 KiB payload, both caches | {checksum:.2} |");
}

/// `KILN_DISK_BENCH_FIXTURE=<dir>`: build the three caches under `<dir>`
/// and exit.
const FIXTURE_VAR: &str = "KILN_DISK_BENCH_FIXTURE";
/// `KILN_DISK_BENCH_CHILD=<kiln|files>:<hits>:<cache dir>`: be a fresh
/// process that needs `<hits>` entries, print the microseconds it took and
/// exit.
const CHILD_VAR: &str = "KILN_DISK_BENCH_CHILD";
/// `KILN_DISK_BENCH_REPEAT=<n>`: a Kiln child first plays `n` fresh
/// processes in-process (open, hits, drop), for `perf record`.
const REPEAT_VAR: &str = "KILN_DISK_BENCH_REPEAT";

/// The tool modes (see the module documentation); `true` when one ran.
fn tool_mode() -> bool {
    if let Some(root) = std::env::var_os(FIXTURE_VAR) {
        let root = PathBuf::from(root);
        for (name, gc) in [("kiln", false), ("kiln-gc", true)] {
            let dir = root.join(name);
            std::fs::create_dir_all(&dir).expect("create the fixture");
            build_kiln(&dir, gc);
        }
        let files = root.join("files");
        std::fs::create_dir_all(&files).expect("create the fixture");
        FilePerEntry::build(&files);
        return true;
    }
    let Ok(child) = std::env::var(CHILD_VAR) else {
        return false;
    };
    let mut fields = child.splitn(3, ':');
    let (Some(kind), Some(hits), Some(dir)) = (fields.next(), fields.next(), fields.next()) else {
        panic!("{CHILD_VAR}=<kiln|files>:<hits>:<cache dir>, not {child:?}");
    };
    let hits: u64 = hits.parse().expect("a hit count");
    let dir = PathBuf::from(dir);
    let mut keys = key_cycle();
    if kind == "kiln" {
        let repeat: u64 = std::env::var(REPEAT_VAR)
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        for _ in 0..repeat {
            let cache = kiln_process(&dir);
            black_box((0..hits).map(|_| kiln_hit(&cache, keys())).sum::<usize>());
        }
    }
    let mut keys = key_cycle();
    let start = Instant::now();
    let bytes: usize = match kind {
        "kiln" => {
            // Never dropped, like the global cache's: the exit hook appends
            // the recency stamps and the kernel unmaps.
            let cache: &'static Cache = Box::leak(Box::new(kiln_process(&dir)));
            (0..hits).map(|_| kiln_hit(cache, keys())).sum()
        }
        "files" => {
            let files = FilePerEntry { dir };
            (0..hits)
                .map(|_| black_box(files.get(&key(keys())).expect("a hit")).len())
                .sum()
        }
        other => panic!("{CHILD_VAR}: no cache kind {other:?}"),
    };
    let micros = start.elapsed().as_secs_f64() * 1e6;
    assert_eq!(bytes, hits as usize * PAYLOAD);
    println!("{micros}");
    true
}

/// The microseconds a fresh child process of `kind` took for `hits` hits
/// on the cache in `dir`, as it reports them.
fn spawn_child(kind: &str, hits: u64, dir: &Path) -> f64 {
    let exe = std::env::current_exe().expect("the bench binary");
    let output = std::process::Command::new(exe)
        .env(CHILD_VAR, format!("{kind}:{hits}:{}", dir.display()))
        .env_remove(REPEAT_VAR)
        .output()
        .expect("run a child");
    assert!(output.status.success(), "child failed: {output:?}");
    String::from_utf8_lossy(&output.stdout)
        .trim()
        .parse()
        .expect("the child prints its microseconds")
}

/// A table for BENCHMARKS.md: the same comparison in real fresh processes
/// (the bench binary spawned in child mode), timed inside each child from
/// before building the cache to the last payload in hand (not counting
/// `exec`, the process's start-up, or the work at exit). Medians of 31
/// runs per cell, the three caches alternating.
fn spawned(fixture: &Fixture) {
    const RUNS: usize = 31;
    println!();
    println!(
        "| hits, each in a new process | file per entry, µs | Kiln, µs | Kiln after gc, µs | Kiln faster by | after gc |"
    );
    println!("| ---: | ---: | ---: | ---: | ---: | ---: |");
    for hits in HIT_COUNTS {
        let mut times: [Vec<f64>; 3] = Default::default();
        for _ in 0..RUNS {
            times[0].push(spawn_child("files", hits, &fixture.files.dir));
            times[1].push(spawn_child("kiln", hits, fixture.kiln_dir.path()));
            times[2].push(spawn_child("kiln", hits, fixture.compacted_dir.path()));
        }
        let [files, kiln, compacted] = times.map(|mut t| {
            t.sort_by(f64::total_cmp);
            t[RUNS / 2]
        });
        println!(
            "| {hits} | {files:.1} | {kiln:.1} | {compacted:.1} | {:.2}× | {:.2}× |",
            files / kiln,
            files / compacted
        );
    }
}

fn main() {
    if tool_mode() {
        return;
    }
    let fixture = Fixture::build();
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    benches(&mut criterion, &fixture);
    criterion.final_summary();
    summary(&fixture);
    phases(&fixture);
    spawned(&fixture);
}
