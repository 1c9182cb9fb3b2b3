//! Opening and looking up images, against a serde + postcard baseline that
//! stores the same entries and deserializes them whole.
//!
//! ```text
//! cargo bench -p kiln-image --bench image -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Configurations (entries x payload bytes) come from `KILN_BENCH_CONFIGS`,
//! e.g. `1000x1024,100000x65536`; the default is 1,000 and 100,000 entries
//! with 1 KiB and 64 KiB payloads. The images and baseline files are
//! generated once under `target/kiln-bench/` and reused. Set
//! `KILN_BENCH_NO_BASELINE_ABOVE=<bytes>` to skip the baseline for
//! configurations whose payloads total more than that (it needs twice the
//! payload bytes in memory).
//!
//! Benchmarks, each run for every configuration in turn (named
//! `<benchmark>/<entries>x<payload>KiB`):
//! - `open_structural`: `Image::open` (memory map) with structural checks.
//! - `open_full`: `Image::open` with full verification (every checksum).
//! - `lookup_hit`: `Image::find` of a present (owner, key), cycling over
//!   4,096 keys spread over the image, on an open image whose looked-up
//!   entries and payloads have had their first (checked) access.
//! - `lookup_hit_bytes`: the same plus the first artifact's bytes.
//! - `baseline_postcard`: `postcard::from_bytes` of all entries, from memory
//!   (payloads as `serde_bytes`); freeing the result is not measured, except
//!   above 1 GiB of payloads, where a batch of results would not fit in
//!   memory.

use std::hint::black_box;
use std::path::{Path, PathBuf};

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, Verification,
};
use serde::{Deserialize, Serialize};

const OWNERS: usize = 4;
const DEFINITIONS: usize = 100;
const LOOKUP_KEYS: usize = 4096;

#[derive(Clone, Copy)]
struct Config {
    entries: usize,
    payload: usize,
}

impl Config {
    fn label(&self) -> String {
        format!("{}x{}KiB", self.entries, self.payload / 1024)
    }

    fn total_payload(&self) -> u64 {
        (self.entries * self.payload) as u64
    }
}

fn configs() -> Vec<Config> {
    let spec = std::env::var("KILN_BENCH_CONFIGS")
        .unwrap_or_else(|_| "1000x1024,1000x65536,100000x1024,100000x65536".into());
    spec.split(',')
        .filter_map(|item| {
            let (entries, payload) = item.trim().split_once('x')?;
            Some(Config {
                entries: entries.parse().ok()?,
                payload: payload.parse().ok()?,
            })
        })
        .collect()
}

/// The entries' serde twin for the baseline.
#[derive(Serialize, Deserialize)]
struct BaselineEntry {
    owner: Digest,
    owner_label: String,
    key: Digest,
    name: String,
    min_world: u64,
    max_world: u64,
    deps: Vec<(String, Digest)>,
    artifacts: Vec<BaselineArtifact>,
}

#[derive(Serialize, Deserialize)]
struct BaselineArtifact {
    kind: String,
    entry_points: Vec<String>,
    #[serde(with = "serde_bytes")]
    bytes: Vec<u8>,
}

fn owner(i: usize) -> (Digest, String) {
    let o = i % OWNERS;
    (
        Digest::of(format!("owner {o}").as_bytes()),
        format!("nvrtc 13.0 sm_{}", 70 + 10 * o),
    )
}

fn key(i: usize) -> Digest {
    Digest::of(format!("key {i}").as_bytes())
}

fn entry(i: usize, payload: usize) -> EntryData {
    let (owner, owner_label) = owner(i);
    let mut bytes = vec![(i % 251) as u8; payload];
    let stamp = (i as u64).to_le_bytes();
    let n = stamp.len().min(bytes.len());
    bytes[..n].copy_from_slice(&stamp[..n]);
    EntryData {
        owner,
        owner_label,
        key: key(i),
        name: format!("gemm_kernel<{i}>"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: format!("gemm_tile_{}", i % DEFINITIONS),
            fingerprint: Digest::of(b"source v1"),
        }],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Cubin,
            entry_points: vec![format!("gemm_{i}")],
            bytes,
        }],
    }
}

fn baseline_entry(entry: EntryData) -> BaselineEntry {
    BaselineEntry {
        owner: entry.owner,
        owner_label: entry.owner_label,
        key: entry.key,
        name: entry.name,
        min_world: entry.min_world,
        max_world: entry.max_world,
        deps: entry
            .deps
            .into_iter()
            .map(|dep| (dep.name, dep.fingerprint))
            .collect(),
        artifacts: entry
            .artifacts
            .into_iter()
            .map(|artifact| BaselineArtifact {
                kind: artifact.kind.to_string(),
                entry_points: artifact.entry_points,
                bytes: artifact.bytes,
            })
            .collect(),
    }
}

fn bench_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../target"));
    target.join("kiln-bench")
}

/// Writes the image and the baseline file for `config` unless a previous
/// run left them.
fn ensure_files(config: Config, with_baseline: bool) -> (PathBuf, PathBuf) {
    let dir = bench_dir();
    std::fs::create_dir_all(&dir).expect("create target/kiln-bench");
    let image_path = dir.join(format!("image-{}.kimg", config.label()));
    let baseline_path = dir.join(format!("baseline-{}.postcard", config.label()));
    let image_ok = Image::open(&image_path, Verification::Structural)
        .is_ok_and(|image| image.len() == config.entries);
    if !image_ok {
        eprintln!("generating {}", image_path.display());
        let mut writer = ImageWriter::new(ImageMeta::new("kiln-bench", "1"));
        for i in 0..config.entries {
            writer.push(entry(i, config.payload));
        }
        writer.write_atomic(&image_path).expect("write bench image");
    }
    if with_baseline && !baseline_path.exists() {
        eprintln!("generating {}", baseline_path.display());
        let entries: Vec<BaselineEntry> = (0..config.entries)
            .map(|i| baseline_entry(entry(i, config.payload)))
            .collect();
        let bytes = postcard::to_allocvec(&entries).expect("serialize baseline");
        drop(entries);
        kiln_image::write_file_atomic(&baseline_path, &bytes).expect("write baseline");
    }
    (image_path, baseline_path)
}

fn lookup_keys(config: Config) -> Vec<(Digest, Digest)> {
    // A fixed stride walk over the entries: spread out, deterministic.
    (0..LOOKUP_KEYS.min(config.entries))
        .map(|n| {
            let i = (n * 7919) % config.entries;
            (owner(i).0, key(i))
        })
        .collect()
}

/// A configuration with its files generated.
struct Prepared {
    config: Config,
    image: PathBuf,
    baseline: Option<PathBuf>,
}

fn prepare(config: Config) -> Prepared {
    let no_baseline_above = std::env::var("KILN_BENCH_NO_BASELINE_ABOVE")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(u64::MAX);
    let with_baseline = config.total_payload() <= no_baseline_above;
    let (image, baseline) = ensure_files(config, with_baseline);
    Prepared {
        config,
        image,
        baseline: with_baseline.then_some(baseline),
    }
}

/// Fewer samples where one iteration reads hundreds of megabytes.
fn sample_size(config: Config, large: bool) -> usize {
    if large && config.total_payload() > 256 << 20 {
        10
    } else {
        100
    }
}

/// One group per operation, the configurations back to back, so that the
/// configurations are compared under the same machine load.
fn bench_open(c: &mut Criterion, prepared: &[Prepared], name: &str, level: Verification) {
    let mut group = c.benchmark_group(name);
    for p in prepared {
        group.sample_size(sample_size(p.config, level == Verification::Full));
        group.bench_function(p.config.label(), |b| {
            b.iter(|| Image::open(black_box(&p.image), level).expect("open"))
        });
    }
    group.finish();
}

fn bench_lookups(c: &mut Criterion, prepared: &[Prepared], with_bytes: bool) {
    let mut group = c.benchmark_group(if with_bytes {
        "lookup_hit_bytes"
    } else {
        "lookup_hit"
    });
    for p in prepared {
        let image = Image::open(&p.image, Verification::Structural).expect("open");
        let keys = lookup_keys(p.config);
        // Steady state: every looked-up entry and payload has had its first
        // (checked) access, as in a process that has run for a while. A
        // first access costs one BLAKE3 of the record and of the payload.
        for (owner, key) in &keys {
            let entry = image.find(owner, key).expect("valid").expect("hit");
            entry
                .artifact(0)
                .expect("artifact")
                .bytes()
                .expect("payload");
        }
        let mut next = 0usize;
        group.bench_function(p.config.label(), |b| {
            b.iter(|| {
                let (owner, key) = &keys[next % keys.len()];
                next = next.wrapping_add(1);
                let entry = image
                    .find(black_box(owner), black_box(key))
                    .expect("valid")
                    .expect("hit");
                if with_bytes {
                    black_box(
                        entry
                            .artifact(0)
                            .expect("artifact")
                            .bytes()
                            .expect("payload")
                            .len(),
                    )
                } else {
                    black_box(entry.index())
                }
            })
        });
    }
    group.finish();
}

fn bench_baseline(c: &mut Criterion, prepared: &[Prepared]) {
    let mut group = c.benchmark_group("baseline_postcard");
    for p in prepared {
        let Some(path) = &p.baseline else { continue };
        let bytes = std::fs::read(path).expect("read baseline");
        let deserialize =
            || -> Vec<BaselineEntry> { postcard::from_bytes(black_box(&bytes)).expect("baseline") };
        group.sample_size(sample_size(p.config, true));
        group.bench_function(p.config.label(), |b| {
            if p.config.total_payload() <= 1 << 30 {
                // Freeing the entries is left out of the measurement...
                b.iter_with_large_drop(deserialize)
            } else {
                // ...except where holding a batch of results would not fit
                // in memory.
                b.iter(deserialize)
            }
        });
    }
    group.finish();
}

fn benches(c: &mut Criterion) {
    let prepared: Vec<Prepared> = configs().into_iter().map(prepare).collect();
    bench_open(c, &prepared, "open_structural", Verification::Structural);
    bench_lookups(c, &prepared, false);
    bench_lookups(c, &prepared, true);
    bench_baseline(c, &prepared);
    bench_open(c, &prepared, "open_full", Verification::Full);
}

criterion_group!(image_benches, benches);
criterion_main!(image_benches);
