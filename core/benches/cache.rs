//! Cache benchmarks: snapshot, delta, lookups (memory and image-backed),
//! merging a large image, and lookup scaling from 1 to 2 threads.
//!
//! Each group holds its own baseline, so figures compare as ratios within
//! one run: `cargo bench -p kiln-rs-core --bench cache`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Key, KeyBuilder, Owner};
use kiln_image::{Digest, EntryData, Image, ImageMeta, ImageWriter, Verification};
use kiln_test_support::leak_aligned;

fn owner() -> Owner {
    Owner::new("benchcc", "1.0.0", "x86_64-v3", ["-O2"]).expect("valid owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-bench", 1)
        .field("n", &n)
        .expect("u64 encodes")
        .finish()
}

fn keys(range: std::ops::Range<u64>) -> Vec<Key> {
    range.map(key).collect()
}

fn artifact(n: u64) -> Artifact {
    Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: Vec::new(),
        bytes: n.to_le_bytes().repeat(2),
    }
}

fn small(n: u64) -> Compiled {
    Compiled::new("").artifact(artifact(n))
}

/// A cache holding `keys`.
fn cache_with(owner: &Owner, keys: &[Key]) -> Cache {
    let cache = Cache::new();
    for (n, k) in keys.iter().enumerate() {
        cache.insert(owner, k, small(n as u64));
    }
    cache
}

/// Image bytes holding `keys` for `owner`.
fn image_bytes(owner: &Owner, keys: &[Key]) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-bench", "0"));
    for (n, k) in keys.iter().enumerate() {
        writer.push(EntryData {
            owner: owner.digest(),
            owner_label: owner.label().to_owned(),
            key: *k.digest(),
            name: format!("f{n}"),
            min_world: 1,
            max_world: u64::MAX,
            deps: vec![kiln_core::Dep {
                name: format!("def{}", n % 64),
                fingerprint: Digest::of(b"v1"),
            }],
            artifacts: vec![artifact(n as u64)],
        });
    }
    writer.to_bytes().expect("image encodes")
}

fn open(bytes: &[u8]) -> Image {
    Image::from_bytes(bytes, Verification::Structural).expect("image opens")
}

fn snapshot(c: &mut Criterion) {
    let o = owner();
    let mut group = c.benchmark_group("snapshot");
    for n in [1_000u64, 1_000_000] {
        let cache = cache_with(&o, &keys(0..n));
        group.bench_function(format!("{n}_entries"), |b| {
            b.iter(|| black_box(&cache).snapshot())
        });
    }
    group.finish();
}

fn delta(c: &mut Criterion) {
    let o = owner();
    let mut group = c.benchmark_group("delta_of_1000_new");
    for base in [1_000u64, 1_000_000] {
        let cache = cache_with(&o, &keys(0..base));
        let s = cache.snapshot();
        for (n, k) in keys(base..base + 1_000).iter().enumerate() {
            cache.insert(&o, k, small(n as u64));
        }
        group.bench_function(format!("on_{base}"), |b| {
            b.iter(|| black_box(cache.delta(black_box(&s))).len())
        });
    }
    group.finish();
}

/// Hot lookups cycle over `HOT` keys of a 100,000-entry cache (the kernels a
/// program actually launches); cold ones stride over all 100,000 (mostly
/// cache misses of the CPU, not of Kiln).
const HOT: usize = 1_000;
const ENTRIES: u64 = 100_000;

fn lookup(c: &mut Criterion) {
    let o = owner();
    let d = o.digest();
    let ks = keys(0..ENTRIES);
    let mut group = c.benchmark_group("lookup_hit");
    let memory = cache_with(&o, &ks);
    let images = Cache::new();
    images.merge_image(open(&image_bytes(&o, &ks)));
    // Touch every payload once: its checksum is checked on first access.
    for k in &ks {
        assert!(images.lookup(&d, k).is_some());
    }
    for (name, cache) in [("memory", &memory), ("image", &images)] {
        for (temperature, span) in [("hot", HOT), ("cold", ks.len())] {
            let mut i = 0usize;
            group.bench_function(format!("{name}_{temperature}"), |b| {
                b.iter(|| {
                    i = (i + 7919) % span;
                    cache.lookup(&d, &ks[i]).is_some()
                })
            });
        }
    }
    group.finish();
}

/// Merging: a file image opened with structural verification (with and
/// without definitions to revalidate against: the first use of the image's
/// dependency index checks its checksum), and an embedded image verified at
/// build time (`Image::from_static_trusted`, what `include_image!` uses).
fn merge(c: &mut Criterion) {
    let o = owner();
    let mut group = c.benchmark_group("merge_image");
    group.sample_size(20);
    for n in [1_000u64, 100_000] {
        let bytes = image_bytes(&o, &keys(0..n));
        group.bench_function(format!("file_{n}"), |b| {
            b.iter_batched(
                || (Cache::new(), open(&bytes)),
                |(cache, image)| {
                    let report = cache.merge_image(image);
                    (cache, report)
                },
                BatchSize::PerIteration,
            )
        });
        group.bench_function(format!("file_with_definitions_{n}"), |b| {
            b.iter_batched(
                || {
                    let cache = Cache::new();
                    cache.define("def0", Digest::of(b"v1"));
                    (cache, open(&bytes))
                },
                |(cache, image)| {
                    let report = cache.merge_image(image);
                    (cache, report)
                },
                BatchSize::PerIteration,
            )
        });
        let embedded = leak_aligned(&bytes);
        Image::from_static(embedded, Verification::Full).expect("image verifies");
        group.bench_function(format!("embedded_with_definitions_{n}"), |b| {
            b.iter_batched(
                || {
                    let cache = Cache::new();
                    cache.define("def0", Digest::of(b"v1"));
                    // SAFETY: these bytes passed `Verification::Full` just
                    // above and are never changed (leaked, shared only).
                    let image = unsafe { Image::from_static_trusted(embedded) };
                    (cache, image.expect("trusted image opens"))
                },
                |(cache, image)| {
                    let report = cache.merge_image(image);
                    (cache, report)
                },
                BatchSize::PerIteration,
            )
        });
    }
    group.finish();
}

/// Lookup throughput: the same number of lookups done by 1 thread or split
/// over 2 threads, each thread over its own hot keys.
fn lookup_threads(c: &mut Criterion) {
    const LOOKUPS: u64 = 400_000;
    let o = owner();
    let d = o.digest();
    let ks = keys(0..ENTRIES);
    let cache = cache_with(&o, &ks);
    let mut group = c.benchmark_group("lookup_threads");
    group.throughput(Throughput::Elements(LOOKUPS));
    for threads in [1u64, 2] {
        group.bench_function(format!("{threads}_threads"), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..threads {
                            let (cache, ks) = (&cache, &ks);
                            s.spawn(move || {
                                let mine = &ks[t as usize * HOT..(t as usize + 1) * HOT];
                                let mut i = 0usize;
                                let mut found = 0u64;
                                for _ in 0..LOOKUPS / threads {
                                    i = (i + 7919) % HOT;
                                    found += u64::from(cache.lookup(&d, &mine[i]).is_some());
                                }
                                black_box(found)
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

criterion_group!(benches, snapshot, delta, lookup, merge, lookup_threads);
criterion_main!(benches);
