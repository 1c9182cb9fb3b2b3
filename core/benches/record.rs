//! What recording (`KILN_RECORD`) adds to a `get_or_compile` hit.
//!
//! `record_hit`: a hot `get_or_compile` hit (cycling over 1,000 keys of a
//! 100,000-entry cache, as `lookup_hit/*_hot` in `cache.rs`), from memory
//! and from an image, without a recorder (`off`: one branch) and with one
//! (`on`: a lookup in the per-process set and a counter increment; every
//! key was recorded before the measurement). `record_first_sight`: a hit on
//! a key not yet recorded, which appends its record to the file (one
//! `write`). `record_threads`: 400,000 hot hits, by 1 thread or split over
//! 2, each thread over its own keys, without and with a recorder.
//!
//! `cargo bench -p kiln-rs-core --bench record`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kiln_core::record::Recorder;
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner};
use kiln_image::{EntryData, Image, ImageMeta, ImageWriter, Verification};

const HOT: usize = 1_000;
const ENTRIES: u64 = 100_000;

fn owner() -> Owner {
    Owner::new("benchcc", "1.0.0", "x86_64-v3", ["-O2"]).expect("valid owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-bench", 1)
        .field("n", &n)
        .expect("u64 encodes")
        .finish()
}

fn artifact(n: u64) -> Artifact {
    Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: Vec::new(),
        bytes: n.to_le_bytes().repeat(2),
    }
}

fn compiled(n: u64) -> Compiled {
    Compiled::new(format!("f{n}")).artifact(artifact(n))
}

fn memory_cache(owner: &Owner, keys: &[Key]) -> Cache {
    let cache = Cache::new();
    for (n, k) in keys.iter().enumerate() {
        cache.insert(owner, k, compiled(n as u64));
    }
    cache
}

fn image_cache(owner: &Owner, keys: &[Key]) -> Cache {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-bench", "0"));
    for (n, k) in keys.iter().enumerate() {
        writer.push(EntryData {
            owner: owner.digest(),
            owner_label: owner.label().to_owned(),
            key: *k.digest(),
            name: format!("f{n}"),
            min_world: 1,
            max_world: u64::MAX,
            deps: Vec::new(),
            artifacts: vec![artifact(n as u64)],
        });
    }
    let bytes = writer.to_bytes().expect("image encodes");
    let cache = Cache::new();
    cache.merge_image(Image::from_bytes(&bytes, Verification::Structural).expect("image opens"));
    cache
}

/// A `get_or_compile` that must hit.
fn hit<'c>(cache: &'c Cache, owner: &Owner, key: &Key) -> kiln_core::Hit<'c> {
    cache
        .get_or_compile(owner, key, || Err("a hit was expected".into()))
        .expect("a hit")
}

fn recorder(dir: &tempfile::TempDir, name: &str) -> std::sync::Arc<Recorder> {
    Recorder::open(&dir.path().join(name)).expect("the record file opens")
}

fn record_hit(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = owner();
    let keys: Vec<Key> = (0..ENTRIES).map(key).collect();
    let mut group = c.benchmark_group("record_hit");
    for (source, build) in [
        ("memory", memory_cache as fn(&Owner, &[Key]) -> Cache),
        ("image", image_cache),
    ] {
        for recording in [false, true] {
            let cache = build(&o, &keys);
            if recording {
                cache
                    .record_into(recorder(&dir, &format!("{source}.rec")))
                    .expect("no recorder yet");
            }
            // Every hot key hit once: recorded (and its payload checked).
            for k in &keys[..HOT] {
                hit(&cache, &o, k);
            }
            let mut i = 0usize;
            let name = format!("{source}/{}", if recording { "on" } else { "off" });
            group.bench_function(name, |b| {
                b.iter(|| {
                    i = (i + 7919) % HOT;
                    black_box(hit(&cache, &o, &keys[i]).name().len())
                })
            });
        }
    }
    group.finish();
}

fn record_first_sight(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = owner();
    let mut group = c.benchmark_group("record_first_sight");
    group.bench_function("memory", |b| {
        b.iter_custom(|iters| {
            let keys: Vec<Key> = (0..iters).map(key).collect();
            let cache = memory_cache(&o, &keys);
            cache
                .record_into(recorder(&dir, "first.rec"))
                .expect("no recorder yet");
            let start = Instant::now();
            for k in &keys {
                black_box(hit(&cache, &o, k).name().len());
            }
            start.elapsed()
        })
    });
    group.finish();
}

fn record_threads(c: &mut Criterion) {
    const HITS: u64 = 400_000;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let o = owner();
    let keys: Vec<Key> = (0..ENTRIES).map(key).collect();
    let off = memory_cache(&o, &keys);
    let on = memory_cache(&o, &keys);
    on.record_into(recorder(&dir, "threads.rec"))
        .expect("no recorder yet");
    for k in &keys[..2 * HOT] {
        hit(&on, &o, k);
    }
    let mut group = c.benchmark_group("record_threads");
    group.throughput(Throughput::Elements(HITS));
    for (threads, recording) in [(1u64, false), (1, true), (2, false), (2, true)] {
        let cache = if recording { &on } else { &off };
        let name = format!("{threads}_threads/{}", if recording { "on" } else { "off" });
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (keys, o) = (&keys, &o);
                            s.spawn(move || {
                                let mine = &keys[t as usize * HOT..(t as usize + 1) * HOT];
                                let mut i = 0usize;
                                let mut sum = 0usize;
                                for _ in 0..HITS / threads {
                                    i = (i + 7919) % HOT;
                                    sum += hit(cache, o, &mine[i]).name().len();
                                }
                                black_box(sum)
                            });
                        }
                    });
                    total += start.elapsed();
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, record_hit, record_first_sight, record_threads);
criterion_main!(benches);
