//! One measurement in a fresh process: from `main`'s start until every
//! kernel's artifact is in hand, in phases, printed as one JSON line.
//!
//! Phases, in order:
//! - **init**: what the mode does before any lookup (merge the images, open the
//!   disk tier, load the serde image; nothing for the directory cache);
//! - **setup**: deriving every kernel's owner and key, as the program must
//!   before asking (for the real set: learn NVRTC's exact version, fingerprint
//!   the CCCL headers); the same code in every mode;
//! - **lookup**: getting each kernel's [`IN_HAND`] bytes (for cold: compiling).
//!
//! After the measurement, a second round of lookups gives the steady-state hit.

use std::hint::black_box;
use std::time::{Duration, Instant};

use kiln::cache::Cache;
use kiln::env::Switches;
use serde::{Deserialize, Serialize};

use crate::baseline::postcard_image::SerdeImage;
use crate::error::BenchError;
use crate::fixtures::Fixtures;
use crate::kernel_set::{IN_HAND, Kernel, Workload};
use crate::mode::Mode;

/// What one child measured.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Measurement {
    /// The mode measured.
    pub mode: Mode,
    /// Kernels in hand at the end.
    pub kernels: usize,
    /// Compiles the run did (0 for every warm mode).
    pub compiles: u64,
    /// Bytes of artifact in hand.
    pub bytes: u64,
    /// The init phase, in nanoseconds.
    pub init_ns: u64,
    /// The setup phase (owners and keys), in nanoseconds.
    pub setup_ns: u64,
    /// Of the setup: `Compiler::new()`, learning NVRTC's exact version (its
    /// identity), in nanoseconds.
    pub nvrtc_ns: u64,
    /// Of the setup: locating and fingerprinting the CCCL headers, in nanoseconds.
    pub headers_ns: u64,
    /// The lookup phase (all kernels), in nanoseconds.
    pub lookup_ns: u64,
    /// From `main`'s start to the last kernel in hand, in nanoseconds.
    pub total_ns: u64,
    /// A second lookup of every kernel, after the measured ones, in
    /// nanoseconds: the steady-state hit, with pages mapped and checksums
    /// checked (for cold: memory hits of what it compiled).
    pub repeat_ns: u64,
}

/// Measures `mode` on `workload` with the warm caches of `fixtures`;
/// `started` is the instant `main` began.
pub fn measure(
    started: Instant,
    mode: Mode,
    workload: Workload,
    fixtures: &Fixtures,
) -> Result<Measurement, BenchError> {
    let clock = Instant::now();
    let source = Lookups::init(mode, workload, fixtures)?;
    let init = clock.elapsed();

    let clock = Instant::now();
    let set = workload.kernels()?;
    let setup = clock.elapsed();

    let clock = Instant::now();
    let bytes = source.fetch_all(mode, &set.kernels)?;
    let lookup = clock.elapsed();
    let total = started.elapsed();

    let clock = Instant::now();
    source.fetch_all(mode, &set.kernels)?;
    let repeat = clock.elapsed();

    let compiles = source.compiles();
    if mode.is_warm() && compiles > 0 {
        return Err(BenchError::Compiled {
            mode: mode.name().to_owned(),
            compiles,
        });
    }
    Ok(Measurement {
        mode,
        kernels: set.kernels.len(),
        compiles,
        bytes,
        init_ns: nanos(init),
        setup_ns: nanos(setup),
        nvrtc_ns: nanos(set.nvrtc),
        headers_ns: nanos(set.headers),
        lookup_ns: nanos(lookup),
        total_ns: nanos(total),
        repeat_ns: nanos(repeat),
    })
}

/// Whole nanoseconds of `d` (saturating).
pub fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Where a mode's kernels come from once initialized.
enum Lookups {
    /// A Kiln cache (fresh for cold, the file image and the disk tier; the
    /// global one with the embedded images).
    Kiln(&'static Cache),
    /// The file-per-entry directory cache.
    Dir(crate::baseline::dir_cache::DirCache),
    /// The serde image, deserialized.
    Serde(SerdeImage),
}

impl Lookups {
    fn init(mode: Mode, workload: Workload, fixtures: &Fixtures) -> Result<Lookups, BenchError> {
        Ok(match mode {
            Mode::Cold => Lookups::Kiln(leak(Cache::new())),
            Mode::KilnEmbedded => {
                let report = kiln::init();
                let crate_name = workload.image_crate();
                let merged = report.merged().any(|(source, _)| {
                    matches!(source, kiln::registry::ImageSource::Embedded { crate_name: c, .. } if *c == crate_name)
                });
                if !merged {
                    return Err(BenchError::NoEmbedded { crate_name });
                }
                Lookups::Kiln(kiln::global())
            }
            Mode::KilnFile => {
                // A cache of the program's own, so that only the file image
                // (KILN_IMAGE_PATH, set by the driver) is merged.
                let cache = leak(Cache::new());
                let report = kiln::cache::load_images(cache, &Switches::from_env(), &[]);
                if let Some((source, err)) = report.skipped().next() {
                    return Err(BenchError::FileImage(format!("{source}: {err}")));
                }
                if report.merged().next().is_none() {
                    return Err(BenchError::FileImage(
                        "no image file there (the driver sets it to the fixtures' folder)"
                            .to_owned(),
                    ));
                }
                Lookups::Kiln(cache)
            }
            Mode::KilnDisk => {
                // The tiers of the global cache (`kiln::cache::add_tiers`), the disk
                // tier in the warmed directory; no image merged.
                let cache = leak(Cache::new());
                let dir = fixtures.disk_dir();
                kiln::cache::add_tiers(cache, |name| {
                    (name == "KILN_CACHE_DIR").then(|| dir.clone().into_os_string())
                });
                Lookups::Kiln(cache)
            }
            Mode::DirCache => Lookups::Dir(fixtures.dir_cache()),
            Mode::PostcardImage => Lookups::Serde(SerdeImage::load(&fixtures.postcard_file())?),
        })
    }

    /// Gets every kernel's [`IN_HAND`] bytes; returns their total length.
    fn fetch_all(&self, mode: Mode, kernels: &[Kernel]) -> Result<u64, BenchError> {
        let missing = |kernel: &Kernel| BenchError::Missing {
            mode: mode.name().to_owned(),
            kernel: kernel.name.clone(),
        };
        let mut total = 0u64;
        for kernel in kernels {
            let len = match self {
                Lookups::Kiln(cache) => {
                    // A warm mode that misses compiles here, and is refused after.
                    let hit = cache
                        .get_or_compile(&kernel.owner, &kernel.key, || Ok(kernel.compile()?))?;
                    black_box(hit.artifact(&IN_HAND).ok_or_else(|| missing(kernel))?).len()
                }
                Lookups::Dir(dir) => {
                    let artifact = dir
                        .get(&kernel.owner, &kernel.key)?
                        .ok_or_else(|| missing(kernel))?;
                    black_box(artifact).bytes.len()
                }
                Lookups::Serde(image) => {
                    let entry = image
                        .get(&kernel.owner, &kernel.key)
                        .ok_or_else(|| missing(kernel))?;
                    black_box(entry.artifact(&IN_HAND).ok_or_else(|| missing(kernel))?).len()
                }
            };
            total += len as u64;
        }
        Ok(total)
    }

    fn compiles(&self) -> u64 {
        match self {
            Lookups::Kiln(cache) => cache.stats().compiles,
            Lookups::Dir(_) | Lookups::Serde(_) => 0,
        }
    }
}

/// A cache that lives as long as the (short-lived) child process, so that
/// every mode hands out `&'static Cache` like the global one.
fn leak(cache: Cache) -> &'static Cache {
    Box::leak(Box::new(cache))
}
