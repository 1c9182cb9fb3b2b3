//! The helper process of the reliability suites. Each role is one thing a
//! test needs done in another process:
//!
//! - `write-images DIR FIRST LEN`: writes images `img-<i>.kimg` for `i` from
//!   `FIRST` on with `ImageWriter::write_atomic`, printing `published <i>`
//!   after each, until killed (or 10 000 images).
//! - `write-disk DIR FIRST LEN`: stores entries in the disk cache at `DIR`
//!   (compacting after every 4 segments), printing `stored <i>` after each,
//!   until killed (or 10 000 entries).
//! - `load DIR THREADS OPS KEYS SEED`: `THREADS` threads each call
//!   `get_or_compile` `OPS` times on keys drawn from `0..KEYS`, on a cache
//!   backed by the disk cache at `DIR`; checks every answer; prints
//!   `compiled <i>` per compile and one `RESULT` line.
//! - `probe CHANGE [IMAGE...]`: merges the images into a fresh cache (with
//!   the disk cache of `KILN_CACHE_DIR`, if set, as a tier), compiles the
//!   staleness kernel with `CHANGE` through the cache and prints one
//!   `RESULT` line saying where the answer came from.
//! - `seed-corpus DIR COUNT`: writes `COUNT` valid fixture images into `DIR`,
//!   a seed corpus for the `merge_image` fuzz target.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{ArtifactKind, Cache};
use kiln_cuda::Compiler;
use kiln_image::{Image, ImageMeta, ImageWriter, Verification};
use kiln_reliability::audit::recompile;
use kiln_reliability::fixture::{load_payload_len, numbered_entry, numbered_key, owners};
use kiln_reliability::kernels::{self, Change};
use kiln_reliability::{Error, Fixture, Rng};

/// Bound on the writers' loops, should their parent never kill them.
const MAX_WRITES: u64 = 10_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let Err(error) = run(&args) {
        eprintln!("kiln-reliability-child: {error}");
        std::process::exit(1);
    }
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Result<T, Error> {
    args.get(i).and_then(|a| a.parse().ok()).ok_or_else(|| {
        Error::Child(format!(
            "argument {i} ({what}) missing or malformed: {args:?}"
        ))
    })
}

fn run(args: &[String]) -> Result<(), Error> {
    let role = args.first().map(String::as_str).unwrap_or_default();
    match role {
        "write-images" => write_images(
            &arg::<PathBuf>(args, 1, "DIR")?,
            arg(args, 2, "FIRST")?,
            arg(args, 3, "LEN")?,
        ),
        "write-disk" => write_disk(
            &arg::<PathBuf>(args, 1, "DIR")?,
            arg(args, 2, "FIRST")?,
            arg(args, 3, "LEN")?,
        ),
        "load" => load(
            &arg::<PathBuf>(args, 1, "DIR")?,
            arg(args, 2, "THREADS")?,
            arg(args, 3, "OPS")?,
            arg(args, 4, "KEYS")?,
            arg(args, 5, "SEED")?,
        ),
        "probe" => probe(
            Change::from_name(args.get(1).map(String::as_str).unwrap_or_default())
                .ok_or_else(|| Error::Child(format!("unknown change in {args:?}")))?,
            &args[2..],
        ),
        "seed-corpus" => seed_corpus(&arg::<PathBuf>(args, 1, "DIR")?, arg(args, 2, "COUNT")?),
        other => Err(Error::Child(format!(
            "unknown role {other:?}: write-images, write-disk, load, probe or seed-corpus"
        ))),
    }
}

fn say(line: std::fmt::Arguments<'_>) -> Result<(), Error> {
    let mut out = std::io::stdout().lock();
    out.write_fmt(line)
        .and_then(|()| out.write_all(b"\n"))
        .and_then(|()| out.flush())
        .map_err(Error::io("write to", "stdout"))
}

/// The image file of entry `i`.
fn image_path(dir: &Path, i: u64) -> PathBuf {
    dir.join(format!("img-{i:08}.kimg"))
}

fn write_images(dir: &Path, first: u64, len: usize) -> Result<(), Error> {
    let owner = &owners()?[0];
    for i in first..first + MAX_WRITES {
        let mut writer = ImageWriter::new(ImageMeta::new("kiln-reliability", "1"));
        writer.push(numbered_entry(owner, i, len));
        writer.write_atomic(&image_path(dir, i))?;
        say(format_args!("published {i}"))?;
    }
    Ok(())
}

fn disk_config(dir: &Path) -> DiskConfig {
    let mut config = DiskConfig::new(dir);
    config.compact_after = 4;
    config
}

fn write_disk(dir: &Path, first: u64, len: usize) -> Result<(), Error> {
    let owner = &owners()?[0];
    let cache = DiskCache::open(disk_config(dir))?;
    for i in first..first + MAX_WRITES {
        if cache.put(&numbered_entry(owner, i, len)) {
            say(format_args!("stored {i}"))?;
        }
    }
    Ok(())
}

fn load(dir: &Path, threads: usize, ops: u64, keys: u64, seed: u64) -> Result<(), Error> {
    let owner = owners()?.swap_remove(2);
    let cache = Cache::new();
    cache.add_tier(Box::new(DiskCache::open(disk_config(dir))?));
    let (done, errors, compiled) = (
        AtomicU64::new(0),
        AtomicU64::new(0),
        std::sync::Mutex::new(Vec::new()),
    );
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (cache, owner, done, errors, compiled) =
                (&cache, &owner, &done, &errors, &compiled);
            scope.spawn(move || {
                let mut rng = Rng::new(seed.wrapping_mul(1_000_003).wrapping_add(t as u64));
                for _ in 0..ops {
                    let i = rng.below(keys as usize) as u64;
                    let expected = numbered_entry(owner, i, load_payload_len(i));
                    let answer = cache.get_or_compile(owner, &numbered_key(i), || {
                        compiled
                            .lock()
                            .unwrap_or_else(|poisoned| poisoned.into_inner())
                            .push(i);
                        Ok(recompile(&expected))
                    });
                    let right = answer.is_ok_and(|hit| {
                        hit.artifact(&ArtifactKind::Ptx) == Some(&expected.artifacts[0].bytes[..])
                    });
                    if !right {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    let compiled = compiled
        .into_inner()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    for i in &compiled {
        say(format_args!("compiled {i}"))?;
    }
    let stats = cache.stats();
    say(format_args!(
        "RESULT ops={} errors={} compiles={} hits_memory={} hits_tier={}",
        done.load(Ordering::Relaxed),
        errors.load(Ordering::Relaxed),
        compiled.len(),
        stats.hits_memory,
        stats.hits_tier
    ))
}

fn probe(change: Change, images: &[String]) -> Result<(), Error> {
    let cache = Cache::new();
    if let Some(disk) = DiskCache::from_settings(kiln_core::settings::Settings::process()) {
        cache.add_tier(Box::new(disk));
    }
    for path in images {
        let image = Image::open(Path::new(path), Verification::Structural)?;
        cache.merge_image(image);
    }
    let request = kernels::request(change)?;
    let compiler = Compiler::new()?;
    let hit = compiler.compile_cached(&cache, &request)?;
    let source = hit.source().name();
    let cubin = hit
        .artifact(&ArtifactKind::Cubin)
        .map(kiln_image::Digest::of)
        .map(|d| d.to_hex())
        .unwrap_or_default();
    say(format_args!(
        "RESULT source={source} compiles={} cubin={cubin}",
        cache.stats().compiles
    ))
}

fn seed_corpus(dir: &Path, count: u64) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(Error::io("create", dir))?;
    for seed in 0..count {
        let fixture = Fixture::new(seed, 1 + seed as usize % 8, 64)?;
        let path = dir.join(format!("kiln-reliability-{seed}.kimg"));
        std::fs::write(&path, &fixture.bytes).map_err(Error::io("write", &path))?;
    }
    say(format_args!(
        "wrote {count} seed images to {}",
        dir.display()
    ))
}
