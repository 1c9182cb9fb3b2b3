//! Disk-cache hits against a file-per-entry directory cache (the layout of
//! Triton and cuda.core: one file per entry named by the hex key, read and
//! BLAKE3-checked on a hit), both built here from the same 1000 entries of
//! 4 KiB.
//!
//! - `fresh_process`: the first hit of a new process. Kiln opens the cache
//!   directory (lists segment names), maps the fullest segment (header and
//!   index checks), looks the key up, checks and borrows the payload, and on
//!   drop (in a real process: at exit) appends its recency stamp and unmaps;
//!   the baseline opens, reads and checks one file.
//! - `fresh_process_16_hits`: a new process that needs 16 entries.
//! - `open_directory`: Kiln's part of the above that opens the directory.
//! - `first_access_in_open_process`: a hit on an entry not used before by a
//!   process that has the directory open (payload checksum computed).
//! - `warm_process`: a hit in a process that has the directory open and used
//!   the entry before (Kiln: binary search in the mapped segment, checksum
//!   remembered; the baseline reads and checks the file again, having no
//!   memory of it).
//!
//! Figures compare as ratios within one run:
//! `cargo bench -p kiln-core --bench disk`.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{Artifact, ArtifactKind};
use kiln_image::{Digest, EntryData};

const ENTRIES: u64 = 1000;
const PAYLOAD: usize = 4 << 10;

fn owner() -> Digest {
    Digest::of(b"benchcc 1.0 sm_90a -O3")
}

fn key(n: u64) -> Digest {
    Digest::of(&n.to_le_bytes())
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
    EntryData {
        owner: owner(),
        owner_label: "benchcc 1.0 sm_90a".into(),
        key: key(n),
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
            std::fs::write(dir.join(key(n).to_hex()), file).expect("write");
        }
        FilePerEntry {
            dir: dir.to_path_buf(),
        }
    }

    /// A hit: read the file, check the checksum, return the payload.
    fn get(&self, key: &Digest) -> Option<Vec<u8>> {
        let mut file = std::fs::read(self.dir.join(key.to_hex())).ok()?;
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

fn build_kiln(dir: &Path) {
    let cache = DiskCache::open(kiln_config(dir)).expect("open");
    for n in 0..ENTRIES {
        assert!(cache.put(&entry(n)));
    }
    let stats = cache.stats().expect("stats");
    eprintln!(
        "kiln disk cache: {} entries in {} segments, {} bytes; file-per-entry: {} files",
        stats.entries, stats.segments, stats.bytes, ENTRIES
    );
}

fn kiln_hit(cache: &DiskCache, n: u64) -> usize {
    let hit = cache.get(&owner(), &key(n)).expect("a hit");
    let bytes = hit
        .artifact(&ArtifactKind::Cubin)
        .expect("checked")
        .expect("a cubin");
    black_box(bytes).len()
}

fn benches(c: &mut Criterion) {
    let kiln_dir = tempfile::tempdir().expect("temp dir");
    let files_dir = tempfile::tempdir().expect("temp dir");
    build_kiln(kiln_dir.path());
    let files = FilePerEntry::build(files_dir.path());

    let mut next = 0u64;
    let mut key_cycle = move || {
        next = (next + 7919) % ENTRIES;
        next
    };

    let mut group = c.benchmark_group("fresh_process");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter(|| {
            let cache = DiskCache::open(kiln_config(kiln_dir.path())).expect("open");
            kiln_hit(&cache, key_cycle())
        })
    });
    group.bench_function("file_per_entry", |b| {
        b.iter(|| black_box(files.get(&key(key_cycle())).expect("a hit")).len())
    });
    group.finish();

    let mut group = c.benchmark_group("open_directory");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter(|| DiskCache::open(kiln_config(kiln_dir.path())).expect("open"))
    });
    group.finish();

    let mut group = c.benchmark_group("fresh_process_16_hits");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter(|| {
            let cache = DiskCache::open(kiln_config(kiln_dir.path())).expect("open");
            (0..16)
                .map(|_| kiln_hit(&cache, key_cycle()))
                .sum::<usize>()
        })
    });
    group.bench_function("file_per_entry", |b| {
        b.iter(|| {
            (0..16)
                .map(|_| black_box(files.get(&key(key_cycle())).expect("a hit")).len())
                .sum::<usize>()
        })
    });
    group.finish();

    let mut group = c.benchmark_group("first_access_in_open_process");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            let mut done = 0;
            while done < iters {
                let cache = DiskCache::open(kiln_config(kiln_dir.path())).expect("open");
                kiln_hit(&cache, 0); // map the segment outside the timing
                let batch = (iters - done).min(ENTRIES - 1);
                let start = std::time::Instant::now();
                for n in 1..=batch {
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
    let cache = DiskCache::open(kiln_config(kiln_dir.path())).expect("open");
    group.bench_function("kiln_disk_tier", |b| {
        b.iter(|| kiln_hit(&cache, key_cycle()))
    });
    group.bench_function("file_per_entry", |b| {
        b.iter(|| black_box(files.get(&key(key_cycle())).expect("a hit")).len())
    });
    group.finish();
}

criterion_group! {
    name = disk;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = benches
}
criterion_main!(disk);
