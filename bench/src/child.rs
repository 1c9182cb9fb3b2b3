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
//! After the measurement, outside the total:
//! - a second round of lookups gives the steady-state hit;
//! - for the real set in a Kiln cache, every kernel is asked for as an
//!   application asks for it, through the example library's `KernelLibrary`
//!   (`kiln_kernels_demo::get`): once (the library derives the request, owner
//!   and key from its build record and looks them up), then
//!   [`LIBRARY_ROUNDS`] more times (the repeated call: the remembered answer
//!   and one cache lookup, to the artifact in hand);
//! - whether the process has NVRTC mapped (`/proc/self/maps`), and whether it
//!   could have found one in its environment (the locator's search, run last).

use std::hint::black_box;
use std::time::{Duration, Instant};

use kiln::cache::Cache;
use kiln::cuda::{Device, select::Selection, toolchain::SearchConfig};
use kiln::settings::Settings;
use serde::{Deserialize, Serialize};

use crate::baseline::postcard_image::SerdeImage;
use crate::error::BenchError;
use crate::fixtures::Fixtures;
use crate::kernel_set::{IN_HAND, Kernel, REAL_ARCH, Workload};
use crate::mode::{Env, Mode};

/// Rounds of repeated library calls (every kernel once a round); the mean per
/// round is kept, as one call is too short to time alone.
pub const LIBRARY_ROUNDS: u32 = 1000;

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
    /// From `main`'s start to the measurement's: the bench's own argument
    /// parsing, in nanoseconds (part of the total, paid by no application).
    pub args_ns: u64,
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
    /// The first `KernelLibrary::get` of every kernel, after the lookups, in
    /// nanoseconds (the real set in a Kiln cache only).
    pub library_first_ns: Option<u64>,
    /// One round of repeated `KernelLibrary::get` calls, every kernel to its
    /// artifact in hand, in nanoseconds: the mean of [`LIBRARY_ROUNDS`].
    pub library_repeat_ns: Option<u64>,
    /// Whether NVRTC was mapped into the process at the end.
    pub nvrtc_loaded: bool,
    /// Where the process could have found NVRTC in its environment (the
    /// locator's answer), for the warm Kiln modes; `None` when nothing was
    /// found or not searched.
    pub nvrtc_found: Option<String>,
    /// The names of the variables in the process's environment, sorted, for
    /// the stripped modes (to show what they had); `None` for the others.
    pub env_names: Option<Vec<String>>,
}

/// Measures `mode` on `workload` with the warm caches of `fixtures`;
/// `started` is the instant `main` began.
pub fn measure(
    started: Instant,
    mode: Mode,
    workload: Workload,
    fixtures: &Fixtures,
) -> Result<Measurement, BenchError> {
    let args = started.elapsed();
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

    let library = match &source {
        Lookups::Kiln(cache) if workload == Workload::Real => {
            Some(library_calls(mode, cache, &set.kernels)?)
        }
        _ => None,
    };
    let nvrtc_loaded = nvrtc_mapped()?;
    // Searched last: the search loads the library it finds.
    let nvrtc_found = (mode.is_warm() && mode.is_kiln())
        .then(|| kiln::cuda::toolchain::locate_nvrtc(&SearchConfig::from_env()).ok())
        .flatten()
        .map(|found| format!("{} ({})", found.path.display(), found.rule));

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
        args_ns: nanos(args),
        init_ns: nanos(init),
        setup_ns: nanos(setup),
        nvrtc_ns: nanos(set.nvrtc),
        headers_ns: nanos(set.headers),
        lookup_ns: nanos(lookup),
        total_ns: nanos(total),
        repeat_ns: nanos(repeat),
        library_first_ns: library.map(|(first, _)| nanos(first)),
        library_repeat_ns: library.map(|(_, repeat)| nanos(repeat)),
        nvrtc_loaded,
        nvrtc_found,
        env_names: (mode.env() == Env::Stripped).then(|| {
            let mut names: Vec<String> = std::env::vars_os()
                .map(|(name, _)| name.to_string_lossy().into_owned())
                .collect();
            names.sort();
            names
        }),
    })
}

/// Asks `cache` for every kernel through the example library, as an
/// application does (`kiln_kernels_demo::get` for [`REAL_ARCH`]): the first
/// call of each, then [`LIBRARY_ROUNDS`] rounds of repeated calls. Checks that
/// each call serves the entry the lookups found, shipped for the exact arch.
/// Returns the first round's time and a repeated round's mean.
fn library_calls(
    mode: Mode,
    cache: &'static Cache,
    kernels: &[Kernel],
) -> Result<(Duration, Duration), BenchError> {
    let device = Device::new(REAL_ARCH.parse().map_err(kiln::cuda::Error::from)?);
    let call = |kernel: &Kernel| -> Result<usize, BenchError> {
        let spec = kernel.spec.as_ref().ok_or_else(|| BenchError::Missing {
            mode: mode.name().to_owned(),
            kernel: format!("{} (no specialization of the example library)", kernel.name),
        })?;
        let served = kiln_kernels_demo::get(cache, &device, spec)?;
        let hit = served.hit();
        let artifact = hit.artifact(&IN_HAND).ok_or_else(|| BenchError::Missing {
            mode: mode.name().to_owned(),
            kernel: kernel.name.clone(),
        })?;
        Ok(black_box(artifact).len())
    };

    let clock = Instant::now();
    for kernel in kernels {
        call(kernel)?;
    }
    let first = clock.elapsed();
    for kernel in kernels {
        let spec = kernel.spec.as_ref();
        let served = spec
            .map(|spec| kiln_kernels_demo::get(cache, &device, spec))
            .transpose()?;
        let same = served.as_ref().is_some_and(|served| {
            served.hit().owner() == kernel.owner.digest()
                && served.hit().key() == kernel.key
                && served.selection() == Selection::ExactCubin
        });
        if !same {
            return Err(BenchError::Library {
                mode: mode.name().to_owned(),
                kernel: kernel.name.clone(),
                served: format!("{served:?}"),
            });
        }
    }

    let clock = Instant::now();
    for _ in 0..LIBRARY_ROUNDS {
        for kernel in kernels {
            call(kernel)?;
        }
    }
    let repeat = clock.elapsed() / LIBRARY_ROUNDS;
    Ok((first, repeat))
}

/// Whether an NVRTC library is mapped into this process.
fn nvrtc_mapped() -> Result<bool, BenchError> {
    let maps =
        std::fs::read_to_string("/proc/self/maps").map_err(BenchError::io("/proc/self/maps"))?;
    Ok(maps.lines().any(|line| line.contains("libnvrtc")))
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
            Mode::KilnEmbedded | Mode::KilnEmbeddedStripped => {
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
            Mode::KilnFile | Mode::KilnFileStripped => {
                // A cache of the program's own, so that only the file image
                // (KILN_IMAGE_PATH, set by the driver) is merged.
                let cache = leak(Cache::new());
                let report = kiln::cache::load_images(cache, Settings::process(), &[]);
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
            Mode::KilnDisk | Mode::KilnDiskStripped => {
                // The tiers of the global cache, from the environment as
                // `kiln::global()` wires them: the disk tier in the warmed
                // `KILN_CACHE_DIR` (set by the driver); no image merged.
                if std::env::var_os(kiln::disk::CACHE_DIR).is_none() {
                    return Err(BenchError::Missing {
                        mode: mode.name().to_owned(),
                        kernel: "every kernel: KILN_CACHE_DIR is not set (the driver sets it to the warmed directory)".to_owned(),
                    });
                }
                let cache = leak(Cache::new());
                kiln::cache::add_tiers(cache, Settings::process());
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
