//! The process-wide cache, and the init that merges every image into it
//! (see [`init()`]).
//!
//! Init touches only each image's index, never its payloads, and never
//! panics on bad input: a bad image is skipped with a warning. With the
//! `ctor` feature it runs before `main`, so the first kernel request pays
//! nothing.

//!
//! The module holds the process static (here), the tier wiring
//! ([`add_tiers`]), image loading ([`load_images`]) and the init's report
//! (`report`, with `stderr_report`: kiln's events on stderr under
//! `KILN_LOG` when the program has no `tracing` subscriber).

mod images;
mod report;
mod tiers;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Mutex, OnceLock, PoisonError};

use crate::registry::{self, EmbeddedImage};
use crate::settings::Settings;
use crate::{Cache, CacheConfig, Error};

pub use images::load_images;
pub use report::{ImageOutcome, ImageReport, InitReport};
pub use tiers::add_tiers;
#[cfg(feature = "build")]
pub(crate) use tiers::add_tiers_wrapped;

use images::merge_embedded;
use report::stderr_report;

/// The process-wide cache, with every registered image merged.
///
/// The first call runs the init (see [`init()`]); later calls return the
/// same cache after two atomic loads (the second notices images registered
/// since, by a library loaded at run time, and merges them).
pub fn global() -> &'static Cache {
    &state().cache
}

/// Runs the init now if it has not run, and returns its report: per image,
/// where it came from and what its merge did (or why it was skipped).
///
/// The init builds the global cache with the `KILN_*` switches in force,
/// read and parsed once ([`Settings::process`]), and merges, once:
///
/// 1. every image embedded with `include_image!` (sorted by crate, then
///    name), opened in place without checking again what was verified at
///    compile time when its header is the one the macro verified (otherwise
///    with structural verification, and a warning);
/// 2. every `*.kimg` file in the directories of `KILN_IMAGE_PATH` (in the
///    order given, files sorted by name), memory-mapped with structural
///    verification (payload checksums are checked on first use).
///
/// An image that cannot be opened is skipped with a `tracing` warning that
/// says why, and the others keep loading. With `KILN_TRUSTED_KEYS` set, an
/// image file is merged only if one of those keys signed it, and an
/// embedded image that carries signatures only if one of them is a trusted
/// key's (an unsigned embedded image is the program's own: see
/// [`trust`](crate::trust)); the others are skipped the same way
/// ([`InitReport::untrusted`]). Calling it again returns the same report;
/// images are merged once.
///
/// The init also adds the extra tiers of [`add_tiers`]: the **disk tier**
/// ([`DiskTier`](crate::disk::DiskTier)), consulted by [`Cache::get_or_compile`] after memory and
/// images and before compiling, and given every new compile, so that code
/// compiled at run time persists across runs; then the tier of every
/// registered [`TierFactory`](crate::TierFactory) (the remote tier of
/// `kiln-redis`, when `KILN_REMOTE_CACHE` is set). `KILN_CACHE=0` leaves the
/// disk tier out; `KILN_CACHE_DIR` and `KILN_CACHE_MAX_BYTES` place and cap
/// it (see [`disk::config`](crate::disk::config)); `KILN_ALWAYS_COMPILE=1`
/// skips every tier on lookups (fresh compiles are still stored).
/// The init does no disk I/O for it: the directory is opened on the first
/// miss in memory and images. A directory that cannot be created gives one
/// warning and the process compiles without it; a read-only or full one
/// still serves what it holds, and the first failed write gives one warning
/// and ends writing for the process.
///
/// The global cache holds at most `KILN_MEMORY_MAX_BYTES` of payloads in
/// memory (default 1 GiB; see
/// [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)),
/// and stores new compiles into its tiers on a background writer, which a
/// normal exit drains (see [`flush`]).
///
/// The init reports through `tracing`. In a program that installed no
/// `tracing` subscriber, `KILN_LOG` makes it print its report on stderr
/// itself (see [`env`](crate::env)), and the cache's [`Stats`](crate::Stats)
/// at exit (`info` and more verbose filters).
///
/// ```
/// let report = kiln_core::init();
/// for image in report.images() {
///     println!("{image}");
/// }
/// let cache = kiln_core::global(); // the same cache, already loaded
/// assert_eq!(cache.image_count(), report.merged().count());
/// ```
pub fn init() -> &'static InitReport {
    &state().report
}

/// Runs the init with `setup` applied to the fresh global cache before any
/// image is merged: the place to [`Cache::define`] the definitions that
/// image entries may depend on (entries built against another fingerprint
/// are then skipped as stale), or to add tiers.
///
/// # Errors
/// [`Error::AlreadyInitialized`] if the global cache was initialized before
/// (by [`global()`], [`init()`] or the `ctor` feature); `setup` did not run.
pub fn init_with(setup: impl FnOnce(&Cache)) -> Result<&'static InitReport, Error> {
    let mut setup = Some(setup);
    let state = GLOBAL.get_or_init(|| Global::start(setup.take()));
    state.catch_up();
    match setup {
        None => Ok(&state.report),
        Some(_) => Err(Error::AlreadyInitialized),
    }
}

/// The global cache and what its init did.
struct Global {
    cache: Cache,
    report: InitReport,
    settings: &'static Settings,
    /// What `KILN_LOG` asks kiln to print itself (no subscriber installed).
    log: Option<stderr_report::Detail>,
    /// The newest registration merged (null: none yet).
    newest: AtomicPtr<EmbeddedImage>,
    /// Serializes merges of late registrations.
    late: Mutex<()>,
}

static GLOBAL: OnceLock<Global> = OnceLock::new();

fn state() -> &'static Global {
    let state = GLOBAL.get_or_init(|| Global::start(None::<fn(&Cache)>));
    state.catch_up();
    state
}

impl Global {
    fn start(setup: Option<impl FnOnce(&Cache)>) -> Global {
        let settings = Settings::process();
        let log = stderr_report::detail(settings.cache.log.as_deref());
        // With `KILN_LOG` and no subscriber, the init's events on stderr.
        let (cache, report, newest) = stderr_report::scoped(log, || {
            let cache = new_cache(settings);
            if let Some(path) = &settings.record {
                record_into(&cache, path);
            }
            let tiers = add_tiers(&cache, settings);
            match tiers.as_slice() {
                [] => tracing::info!("no extra cache tier"),
                tiers => {
                    tracing::info!("cache tiers after memory and images: {}", tiers.join(", "))
                }
            }
            if let Some(setup) = setup {
                setup(&cache);
            }
            let (newest, embedded) = registry::registered_since(std::ptr::null());
            let mut report = load_images(&cache, settings, &embedded);
            report.tiers = tiers;
            (cache, report, newest)
        });
        crate::exit::register_call(crate::exit::Stage::Stores, flush_at_exit);
        crate::exit::then(at_exit);
        Global {
            cache,
            report,
            settings,
            log,
            newest: AtomicPtr::new(newest.cast_mut()),
            late: Mutex::new(()),
        }
    }

    /// Merges the images registered since the init: by a library loaded
    /// with `dlopen`, or, with the `ctor` feature, by a constructor that ran
    /// after kiln's. Costs one atomic load when there are none.
    fn catch_up(&self) {
        if registry::newest_registration() == self.newest.load(Ordering::Acquire).cast_const() {
            return;
        }
        let _one_at_a_time = self.late.lock().unwrap_or_else(PoisonError::into_inner);
        let seen = self.newest.load(Ordering::Acquire).cast_const();
        let (newest, late) = registry::registered_since(seen);
        if !self.settings.cache.disable {
            for image in late {
                let report = stderr_report::scoped(self.log, || {
                    merge_embedded(&self.cache, image, &self.settings.trust)
                });
                self.report.images.push(report);
            }
        }
        self.newest.store(newest.cast_mut(), Ordering::Release);
    }
}

/// The global cache's configuration under `settings`.
fn new_cache(settings: &Settings) -> Cache {
    Cache::with_config(
        CacheConfig::default()
            .always_compile(settings.cache.always_compile)
            .memory_max_bytes(settings.cache.memory_max_bytes),
    )
}

/// Waits until every tier store the global cache has queued (see
/// [`Cache::flush`]) has run; does nothing if the global cache was never
/// used. A normal exit does it too.
pub fn flush() {
    if let Some(state) = GLOBAL.get() {
        state.cache.flush();
    }
}

/// How long the exit hook waits for the global cache's store queue to
/// drain.
const EXIT_FLUSH_LIMIT: std::time::Duration = std::time::Duration::from_secs(60);

/// At exit, first: the global cache's queued stores run, for at most
/// [`EXIT_FLUSH_LIMIT`], so that a stuck file system or server cannot hang
/// the exit.
fn flush_at_exit() {
    let Some(state) = GLOBAL.get() else {
        return;
    };
    if state.cache.flush_within(EXIT_FLUSH_LIMIT) {
        return;
    }
    let queued = state.cache.stats().store_queue_depth;
    match state.log {
        Some(_) => stderr_report::unflushed_at_exit(queued, EXIT_FLUSH_LIMIT),
        None => tracing::warn!(
            queued,
            "kiln: cache stores still queued after {} s at exit; not waiting longer",
            EXIT_FLUSH_LIMIT.as_secs()
        ),
    }
}

/// At exit, after the exit hook has run the queued stores: with `KILN_LOG`
/// asking for `info` and no `tracing` subscriber, the cache's figures on
/// stderr (`warn`: only failed or dropped stores); with a subscriber, an
/// `info` event.
fn at_exit() {
    let Some(state) = GLOBAL.get() else {
        return;
    };
    let stats = state.cache.stats();
    match state.log {
        Some(detail) => stderr_report::stats_at_exit(detail, &stats),
        None => tracing::info!(%stats, "kiln cache at exit"),
    }
}

/// `KILN_RECORD`: records what `cache` returns into `path`; a file that
/// cannot be opened gives one warning and nothing is recorded.
#[cfg(feature = "record")]
fn record_into(cache: &Cache, path: &std::path::Path) {
    match crate::record::Recorder::open(path) {
        Ok(recorder) => {
            tracing::info!(path = %path.display(), "KILN_RECORD: recording what the process uses");
            let _ = cache.record_into(recorder);
        }
        Err(error) => tracing::warn!(
            "KILN_RECORD: {}; nothing is recorded",
            crate::ErrorChain(&error)
        ),
    }
}

/// `KILN_RECORD` in a program built without recording (feature `record`):
/// one warning, nothing recorded.
#[cfg(not(feature = "record"))]
fn record_into(_cache: &Cache, path: &std::path::Path) {
    tracing::warn!(
        path = %path.display(),
        "KILN_RECORD is set, but this program's kiln-core was built without its `record` feature; nothing is recorded"
    );
}

/// With the `ctor` feature: the init, before `main`.
#[cfg(feature = "ctor")]
mod before_main {
    /// Runs [`init`](super::init) before `main`.
    ///
    /// It is a plain `.init_array` constructor, like the `include_image!`
    /// registrations: the linker places the crates that embed images before
    /// kiln-core (they depend on it), so their registrations normally run
    /// first. One that runs later (same crate, LTO) is merged on the first
    /// use of the cache. A panic is caught and kept silent (the default hook
    /// would print before `main`); the cache then runs its init again on
    /// first use.
    #[ctor::ctor(unsafe, naked)]
    fn kiln_init_before_main() {
        let hook = std::panic::take_hook();
        std::panic::set_hook(Box::new(|_| {}));
        let outcome = std::panic::catch_unwind(|| {
            super::init();
        });
        std::panic::set_hook(hook);
        if outcome.is_err() {
            tracing::error!(
                "kiln init before main panicked; it runs again on first use of the cache"
            );
        }
    }
}
