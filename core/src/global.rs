//! The process-wide cache, and the init that merges every image into it
//! (see [`init()`]).
//!
//! Init touches only each image's index, never its payloads, and never
//! panics on bad input: a bad image is skipped with a warning. With the
//! `ctor` feature it runs before `main`, so the first kernel request pays
//! nothing.

use std::ffi::OsString;
use std::fmt;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::disk::{DiskConfig, DiskTier};
use crate::env::Switches;
use crate::registry::{self, EmbeddedImage, ImageSource, TierSetup};
use crate::{Cache, CacheConfig, Error, MergeReport, Tier};

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
/// The init builds the global cache with the `KILN_*` switches in force
/// (see [`env`](crate::env)) and merges, once:
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
/// ([`DiskTier`]), consulted by [`Cache::get_or_compile`] after memory and
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
    switches: Switches,
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
        let switches = Switches::from_env();
        let log = stderr_report::detail(switches.log.as_deref());
        let cache = new_cache(&switches);
        if let Some(path) = &switches.record {
            record_into(&cache, path);
        }
        let tiers = add_tiers(&cache, |name| std::env::var_os(name));
        if let Some(setup) = setup {
            setup(&cache);
        }
        let (newest, embedded) = registry::registered_since(std::ptr::null());
        let mut report = load_images(&cache, &switches, &embedded);
        report.tiers = tiers;
        if let Some(detail) = log {
            stderr_report::init(detail, &report);
        }
        crate::exit::at_exit(at_exit);
        Global {
            cache,
            report,
            switches,
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
        if !self.switches.disable {
            for image in late {
                let report =
                    merge_embedded(&self.cache, image, self.switches.trusted_keys.as_ref());
                if let Some(detail) = self.log {
                    stderr_report::image(detail, &report);
                }
                self.report.images.push(report);
            }
        }
        self.newest.store(newest.cast_mut(), Ordering::Release);
    }
}

/// The global cache's configuration under `switches`.
fn new_cache(switches: &Switches) -> Cache {
    Cache::with_config(
        CacheConfig::default()
            .always_compile(switches.always_compile)
            .memory_max_bytes(switches.memory_max_bytes),
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
        Some(stderr_report::Detail::Everything) => eprintln!("kiln: at exit: {stats}"),
        Some(stderr_report::Detail::Problems) => {
            if stats.store_failures > 0 || stats.stores_dropped > 0 {
                eprintln!(
                    "kiln: at exit: {} cache stores failed, {} dropped (queue full)",
                    stats.store_failures, stats.stores_dropped
                );
            }
        }
        None => tracing::info!(%stats, "kiln cache at exit"),
    }
}

/// `KILN_RECORD`: records what `cache` returns into `path`; a file that
/// cannot be opened gives one warning and nothing is recorded.
fn record_into(cache: &Cache, path: &std::path::Path) {
    match crate::record::Recorder::open(path) {
        Ok(recorder) => {
            tracing::info!(path = %path.display(), "KILN_RECORD: recording what the process uses");
            let _ = cache.record_into(recorder);
        }
        Err(error) => tracing::warn!("KILN_RECORD: {error}; nothing is recorded"),
    }
}

/// Adds to `cache` the extra tiers that [`global()`] has, configured through
/// `lookup` (a variable name to its value; the process environment for the
/// global cache), and returns their names in the order added:
///
/// 1. the disk tier ([`DiskTier`]), unless `KILN_CACHE=0`, placed and capped
///    by `KILN_CACHE_DIR` and `KILN_CACHE_MAX_BYTES`
///    ([`DiskConfig::from_lookup`]); an unusable setting gives one warning
///    and no disk tier;
/// 2. the tier of every [`TierFactory`](crate::TierFactory) linked into the
///    program that its variables turn on (in the order of their names),
///    each given the disk tier to write its hits through to, as a handle
///    whose stores run on `cache`'s background writer
///    ([`Cache::background`]).
///
/// No I/O: each tier opens its directory or connection on first use. A
/// program with a cache of its own, or a benchmark, gets the global cache's
/// wiring with it:
///
/// ```
/// use std::ffi::OsString;
///
/// let dir = std::env::temp_dir().join("kiln-doc-add-tiers");
/// let cache = kiln_core::Cache::new();
/// let tiers = kiln_core::add_tiers(&cache, |name| {
///     (name == "KILN_CACHE_DIR").then(|| OsString::from(&dir))
/// });
/// assert_eq!(tiers, ["disk"]); // and no I/O yet
/// ```
pub fn add_tiers(cache: &Cache, lookup: impl Fn(&str) -> Option<OsString>) -> Vec<String> {
    let mut names = Vec::new();
    let disk = DiskTier::from_config(DiskConfig::from_lookup(&lookup)).map(|disk| {
        let disk: Arc<dyn Tier> = Arc::new(disk);
        names.push(disk.name().to_owned());
        cache.add_tier(Box::new(Arc::clone(&disk)));
        disk
    });
    let setup = TierSetup::new(&lookup, disk.map(|disk| cache.background(disk)));
    for factory in registry::tier_factories() {
        if let Some(tier) = factory.build(&setup) {
            names.push(tier.name().to_owned());
            cache.add_tier(tier);
        }
    }
    names
}

/// Merges `embedded` and the files of `switches.image_path` into `cache`, as
/// the init of [`global()`] does (unless `switches.disable` is set).
///
/// Exposed for programs that manage a cache of their own.
pub fn load_images(
    cache: &Cache,
    switches: &Switches,
    embedded: &[&'static EmbeddedImage],
) -> InitReport {
    let report = InitReport {
        disabled: switches.disable,
        tiers: Vec::new(),
        images: boxcar::Vec::new(),
    };
    if switches.disable {
        tracing::info!("KILN_DISABLE is set: no image merged");
        return report;
    }
    let trusted = switches.trusted_keys.as_ref();
    for image in embedded {
        report.images.push(merge_embedded(cache, image, trusted));
    }
    let (files, unreadable) = registry::image_files(&switches.image_path);
    for (dir, source) in unreadable {
        let err = Error::ImageDirectory {
            dir: dir.clone(),
            source,
        };
        report
            .images
            .push(merge(cache, ImageSource::Directory(dir), Err(err), None));
    }
    for path in files {
        let opened = kiln_image::Image::open(&path, kiln_image::Verification::Structural)
            .map_err(Error::from)
            .and_then(|image| {
                let signer = crate::trust::check_image(&image, trusted, false)?;
                Ok((image, signer))
            });
        report
            .images
            .push(merge(cache, ImageSource::File(path), opened, trusted));
    }
    report
}

fn merge_embedded(
    cache: &Cache,
    image: &'static EmbeddedImage,
    trusted: Option<&kiln_image::TrustedKeys>,
) -> ImageReport {
    let source = ImageSource::Embedded {
        crate_name: image.crate_name(),
        name: image.name(),
    };
    let opened = image.open().map_err(Error::from).and_then(|image| {
        let signer = crate::trust::check_image(&image, trusted, true)?;
        Ok((image, signer))
    });
    merge(cache, source, opened, trusted)
}

/// Merges one opened image (with the trusted key that signed it, when
/// `trusted` keys are required), or records why it could not be opened or
/// was refused.
fn merge(
    cache: &Cache,
    source: ImageSource,
    opened: Result<(kiln_image::Image, Option<kiln_image::PublicKey>), Error>,
    trusted: Option<&kiln_image::TrustedKeys>,
) -> ImageReport {
    let mut signer = None;
    let outcome = match opened {
        Ok((image, signed_by)) => {
            signer = signed_by;
            if let Some(key) = signer {
                tracing::debug!(image = %source, %key, "kiln image signed by a trusted key");
            }
            let entries = image.len();
            let merge = cache.merge_image(image);
            tracing::info!(
                image = %source,
                entries,
                inserted = merge.inserted,
                duplicate = merge.duplicate,
                "merged kiln image"
            );
            if merge.stale > 0 {
                tracing::warn!(
                    image = %source,
                    stale = merge.stale,
                    "kiln image entries skipped as stale: a definition they depend on has another \
                     fingerprint in this process; they compile again when asked for"
                );
            }
            if merge.foreign_owner > 0 {
                tracing::info!(
                    image = %source,
                    foreign_owner = merge.foreign_owner,
                    "kiln image entries skipped: their compiler configuration is not accepted here"
                );
            }
            for rejection in &merge.rejected {
                tracing::warn!(image = %source, "kiln image rejected: {}", rejection.reason);
            }
            ImageOutcome::Merged { entries, merge }
        }
        Err(err) => {
            if trusted.is_some() && is_untrusted(&err) {
                tracing::warn!(image = %source, "refused kiln image (KILN_TRUSTED_KEYS is set): {err}");
            } else {
                tracing::warn!(image = %source, "skipped kiln image: {err}");
            }
            ImageOutcome::Skipped(err)
        }
    };
    ImageReport {
        source,
        outcome,
        signer,
    }
}

/// Whether `error` refused an image for its signatures.
fn is_untrusted(error: &Error) -> bool {
    matches!(error, Error::Image(error) if crate::trust::is_refusal(error))
}

/// What the init did.
#[derive(Debug, Default)]
#[non_exhaustive]
pub struct InitReport {
    /// `KILN_DISABLE` was set: nothing was merged.
    pub disabled: bool,
    /// The extra tiers the init added, in lookup order (see [`add_tiers`];
    /// empty for [`load_images`]).
    tiers: Vec<String>,
    /// One report per image, in merge order (append-only: images registered
    /// after the init are added when merged).
    images: boxcar::Vec<ImageReport>,
}

impl InitReport {
    /// The names of the extra tiers the global cache asks after memory and
    /// images, in that order (e.g. `disk`, `remote`).
    pub fn tiers(&self) -> &[String] {
        &self.tiers
    }

    /// One report per image, in merge order.
    pub fn images(&self) -> impl Iterator<Item = &ImageReport> {
        self.images.iter().map(|(_, image)| image)
    }

    /// The images that were merged, with their merge reports.
    pub fn merged(&self) -> impl Iterator<Item = (&ImageSource, &MergeReport)> {
        self.images().filter_map(|image| match &image.outcome {
            ImageOutcome::Merged { merge, .. } => Some((&image.source, merge)),
            ImageOutcome::Skipped(_) => None,
        })
    }

    /// The images that were skipped, with the reason.
    pub fn skipped(&self) -> impl Iterator<Item = (&ImageSource, &Error)> {
        self.images().filter_map(|image| match &image.outcome {
            ImageOutcome::Skipped(err) => Some((&image.source, err)),
            ImageOutcome::Merged { .. } => None,
        })
    }

    /// The images refused because no trusted key signed them
    /// (`KILN_TRUSTED_KEYS` set), with the reason: unsigned, signed by
    /// other keys only, or a signature that does not verify. Also among
    /// [`InitReport::skipped`].
    pub fn untrusted(&self) -> impl Iterator<Item = (&ImageSource, &Error)> {
        self.skipped().filter(|(_, err)| is_untrusted(err))
    }

    /// Entries inserted, over all images.
    pub fn inserted(&self) -> u64 {
        self.merged().map(|(_, merge)| merge.inserted).sum()
    }
}

impl fmt::Display for InitReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.disabled {
            return writeln!(f, "KILN_DISABLE is set: no image merged");
        }
        for image in self.images() {
            writeln!(f, "{image}")?;
        }
        Ok(())
    }
}

/// One image's part of the [`InitReport`].
#[derive(Debug)]
#[non_exhaustive]
pub struct ImageReport {
    /// Where the image came from.
    pub source: ImageSource,
    /// What happened to it.
    pub outcome: ImageOutcome,
    /// The trusted key that signed it, when `KILN_TRUSTED_KEYS` is set and
    /// a signature was checked (`None` otherwise, and for an unsigned
    /// embedded image).
    pub signer: Option<kiln_image::PublicKey>,
}

impl fmt::Display for ImageReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.outcome {
            ImageOutcome::Merged { entries, merge } => {
                write!(f, "{}: {entries} entries: {merge}", self.source)
            }
            ImageOutcome::Skipped(err) => write!(f, "{}: skipped: {err}", self.source),
        }
    }
}

/// What happened to one image at init.
#[derive(Debug)]
#[non_exhaustive]
pub enum ImageOutcome {
    /// The image was opened and merged.
    Merged {
        /// Entries in the image.
        entries: usize,
        /// What the merge did with them.
        merge: MergeReport,
    },
    /// The image could not be opened (or its directory listed); nothing of
    /// it was merged.
    Skipped(Error),
}

/// `KILN_LOG` in a program without a `tracing` subscriber: the init's
/// report on stderr, printed by kiln itself. A library does not install a
/// subscriber (where logs go is the program's choice), so with one installed
/// kiln prints nothing itself and its `tracing` events go to it.
mod stderr_report {
    use super::{ImageOutcome, ImageReport, InitReport};

    /// How much of the report `KILN_LOG` asks for.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum Detail {
        /// `warn` or `error`: images skipped, entries stale or rejected.
        Problems,
        /// Any other filter (`info`, `debug`, `kiln_core=debug`...): every
        /// image and every tier as well.
        Everything,
    }

    /// What `log` (the value of `KILN_LOG`) asks kiln to print itself:
    /// `None` when it is unset or `off`, or when the program installed a
    /// `tracing` subscriber (which then gets the events).
    pub(super) fn detail(log: Option<&str>) -> Option<Detail> {
        let log = log?;
        let subscribed = tracing::dispatcher::get_default(|dispatch| {
            !dispatch.is::<tracing::subscriber::NoSubscriber>()
        });
        if subscribed {
            return None;
        }
        filter_detail(log)
    }

    /// The detail of a `KILN_LOG` filter; `None` for `off`.
    pub(super) fn filter_detail(log: &str) -> Option<Detail> {
        match log.trim().to_ascii_lowercase().as_str() {
            "off" => None,
            "warn" | "error" => Some(Detail::Problems),
            _ => Some(Detail::Everything),
        }
    }

    /// The lines of the init's report that `detail` asks for.
    pub(super) fn init_lines(detail: Detail, report: &InitReport) -> Vec<String> {
        let mut lines = Vec::new();
        if detail == Detail::Everything {
            lines.push(match report.tiers() {
                [] => "kiln: no extra cache tier".to_owned(),
                tiers => format!(
                    "kiln: cache tiers after memory and images: {}",
                    tiers.join(", ")
                ),
            });
            if report.disabled {
                lines.push("kiln: KILN_DISABLE is set: no image merged".to_owned());
            }
        }
        for image in report.images() {
            lines.extend(image_lines(detail, image));
        }
        lines
    }

    /// The lines about one image that `detail` asks for.
    pub(super) fn image_lines(detail: Detail, image: &ImageReport) -> Vec<String> {
        let source = &image.source;
        match &image.outcome {
            ImageOutcome::Skipped(err) => vec![format!("kiln: skipped image {source}: {err}")],
            ImageOutcome::Merged { entries, merge } => {
                let mut lines = Vec::new();
                if detail == Detail::Everything {
                    lines.push(format!(
                        "kiln: merged image {source}: {entries} entries: {merge}"
                    ));
                }
                if merge.stale > 0 {
                    lines.push(format!(
                        "kiln: image {source}: {} entries skipped as stale: a definition they \
                         depend on has another fingerprint in this process; they compile again \
                         when asked for",
                        merge.stale
                    ));
                }
                for rejection in &merge.rejected {
                    lines.push(format!(
                        "kiln: image {source} rejected: {}",
                        rejection.reason
                    ));
                }
                lines
            }
        }
    }

    /// Prints the init's report on stderr.
    pub(super) fn init(detail: Detail, report: &InitReport) {
        for line in init_lines(detail, report) {
            eprintln!("{line}");
        }
    }

    /// Prints the report of an image merged after the init on stderr.
    pub(super) fn image(detail: Detail, report: &ImageReport) {
        for line in image_lines(detail, report) {
            eprintln!("{line}");
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::leak_aligned;
    use crate::{Artifact, ArtifactKind, Compiled, Digest, Key, KeyBuilder, Owner, Source};
    use kiln_image::{Image, ImageMeta, Verification};
    use std::path::Path;

    fn owner() -> Owner {
        Owner::new("test-compiler", "1.0", "test-target", Vec::<String>::new()).unwrap()
    }

    fn key(name: &str) -> Key {
        KeyBuilder::new("kiln-core global tests", 1)
            .str("name", name)
            .finish()
    }

    /// An image of one entry per name, each built against definition `ops`
    /// at the fingerprint of `v1`, its artifact the name's bytes.
    fn image_bytes(names: &[&str]) -> Vec<u8> {
        let cache = Cache::new();
        let before = cache.snapshot();
        for name in names {
            let compiled = Compiled::new(*name)
                .dep("ops", Digest::of(b"v1"))
                .artifact(Artifact {
                    kind: ArtifactKind::Object,
                    entry_points: vec![(*name).to_owned()],
                    bytes: name.as_bytes().to_vec(),
                });
            cache.insert(&owner(), &key(name), compiled);
        }
        cache.delta(&before).to_bytes(ImageMeta::default()).unwrap()
    }

    fn write(dir: &Path, file: &str, bytes: &[u8]) {
        std::fs::write(dir.join(file), bytes).unwrap();
    }

    fn image_source(cache: &Cache, name: &str) -> Option<(Source, Vec<u8>)> {
        let hit = cache.lookup(&owner().digest(), &key(name))?;
        let bytes = hit.artifact(&ArtifactKind::Object)?.to_vec();
        Some((hit.source(), bytes))
    }

    #[test]
    fn file_images_merge_in_order_and_bad_ones_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
        write(dir.path(), "b.kimg", b"not an image");
        write(dir.path(), "c.kimg", &image_bytes(&["x", "z"]));
        let missing = dir.path().join("missing");
        let switches = Switches {
            image_path: vec![missing.clone(), dir.path().to_path_buf()],
            ..Switches::default()
        };

        let cache = Cache::new();
        let report = load_images(&cache, &switches, &[]);

        let sources: Vec<String> = report.images().map(|i| i.source.to_string()).collect();
        assert_eq!(
            sources,
            [
                format!("directory {}", missing.display()),
                dir.path().join("a.kimg").display().to_string(),
                dir.path().join("b.kimg").display().to_string(),
                dir.path().join("c.kimg").display().to_string(),
            ]
        );
        let skipped: Vec<&Error> = report.skipped().map(|(_, err)| err).collect();
        assert!(
            matches!(skipped[..], [Error::ImageDirectory { .. }, Error::Image(_)]),
            "{report}"
        );
        let merged: Vec<(u64, u64)> = report
            .merged()
            .map(|(_, m)| (m.inserted, m.duplicate))
            .collect();
        assert_eq!(merged, [(2, 0), (1, 1)], "the first valid entry wins");
        assert_eq!(report.inserted(), 3);
        assert_eq!(cache.image_count(), 2);
        for name in ["x", "y", "z"] {
            assert_eq!(
                image_source(&cache, name),
                Some((Source::Image, name.as_bytes().to_vec()))
            );
        }
        let text = report.to_string();
        assert!(text.contains("b.kimg: skipped:"), "{text}");
    }

    #[test]
    fn disable_merges_nothing() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.kimg", &image_bytes(&["x"]));
        let switches = Switches {
            disable: true,
            image_path: vec![dir.path().to_path_buf()],
            ..Switches::default()
        };
        let embedded = EmbeddedImage::new("crate", "a.kimg", leak_aligned(&image_bytes(&["y"])));
        let cache = Cache::new();
        let report = load_images(&cache, &switches, &[Box::leak(Box::new(embedded))]);
        assert!(report.disabled);
        assert_eq!(report.images().count(), 0);
        assert_eq!(cache.image_count(), 0);
        assert_eq!(image_source(&cache, "x"), None);
    }

    #[test]
    fn embedded_images_merge_before_files_checked_or_trusted() {
        let unchecked = leak_aligned(&image_bytes(&["x"]));
        let verified = leak_aligned(&image_bytes(&["y"]));
        Image::from_static(verified, Verification::Full).unwrap();
        let images: Vec<&'static EmbeddedImage> = vec![
            Box::leak(Box::new(EmbeddedImage::new("one", "x.kimg", unchecked))),
            Box::leak(Box::new(EmbeddedImage::new(
                "one",
                "junk.kimg",
                leak_aligned(b"junk"),
            ))),
            // SAFETY: `verified` passed `Verification::Full` just above, the
            // header is its own, and it is never written again.
            Box::leak(Box::new(unsafe {
                EmbeddedImage::verified_at_compile_time(
                    "two",
                    "y.kimg",
                    verified,
                    verified.first_chunk().unwrap(),
                )
            })),
        ];
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "z.kimg", &image_bytes(&["z"]));
        let switches = Switches {
            image_path: vec![dir.path().to_path_buf()],
            ..Switches::default()
        };

        let cache = Cache::new();
        let report = load_images(&cache, &switches, &images);
        let outcome: Vec<(String, bool)> = report
            .images()
            .map(|i| {
                (
                    i.source.to_string(),
                    matches!(i.outcome, ImageOutcome::Merged { .. }),
                )
            })
            .collect();
        assert_eq!(
            outcome,
            [
                ("x.kimg (embedded by one)".to_owned(), true),
                ("junk.kimg (embedded by one)".to_owned(), false),
                ("y.kimg (embedded by two)".to_owned(), true),
                (dir.path().join("z.kimg").display().to_string(), true),
            ]
        );
        for name in ["x", "y", "z"] {
            assert_eq!(
                image_source(&cache, name),
                Some((Source::Image, name.as_bytes().to_vec()))
            );
        }
    }

    #[test]
    fn entries_built_against_another_definition_are_stale() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
        let switches = Switches {
            image_path: vec![dir.path().to_path_buf()],
            ..Switches::default()
        };
        let cache = Cache::new();
        cache.define("ops", Digest::of(b"v2"));
        let report = load_images(&cache, &switches, &[]);
        let merged: Vec<(u64, u64)> = report
            .merged()
            .map(|(_, m)| (m.inserted, m.stale))
            .collect();
        assert_eq!(merged, [(0, 2)]);
        assert_eq!(image_source(&cache, "x"), None);
    }

    /// The global cache's construction, with `KILN_CACHE*` read from `vars`.
    fn cache_with_disk(vars: &[(&str, &Path)]) -> Cache {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| value.as_os_str().to_owned())
        };
        let cache = new_cache(&Switches::default());
        add_tiers(&cache, lookup);
        cache
    }

    /// `get_or_compile` of `name`: its source, and whether it compiled.
    fn get_or_compile(cache: &Cache, name: &str) -> (Source, bool) {
        let mut compiled = false;
        let hit = cache
            .get_or_compile(&owner(), &key(name), || {
                compiled = true;
                Ok(Compiled::new(name).artifact(Artifact {
                    kind: ArtifactKind::Object,
                    entry_points: vec![name.to_owned()],
                    bytes: name.as_bytes().to_vec(),
                }))
            })
            .unwrap();
        assert_eq!(hit.artifact(&ArtifactKind::Object), Some(name.as_bytes()));
        (hit.source(), compiled)
    }

    #[test]
    fn the_disk_tier_is_opened_on_first_use_and_serves_the_next_process() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("kiln");
        let first = cache_with_disk(&[("KILN_CACHE_DIR", &dir)]);
        assert!(!dir.exists(), "building the cache touched the disk");
        assert_eq!(get_or_compile(&first, "x"), (Source::Memory, true));
        assert!(dir.exists());
        // The store runs on the background writer: wait for it.
        first.flush();

        // A new process with the same directory: a hit from the disk tier.
        let second = cache_with_disk(&[("KILN_CACHE_DIR", &dir)]);
        assert_eq!(get_or_compile(&second, "x"), (Source::Tier, false));
        assert_eq!(second.stats().hits_tier, 1);

        // KILN_CACHE=0: no disk tier, so it compiles again.
        let off = cache_with_disk(&[("KILN_CACHE_DIR", &dir), ("KILN_CACHE", Path::new("0"))]);
        assert_eq!(get_or_compile(&off, "x"), (Source::Memory, true));
    }

    /// A tier that serves nothing, offered by the factory below when
    /// `KILN_TEST_FACTORY_TIER` is set: the way kiln-redis adds its tier.
    struct Offered {
        local: Option<String>,
    }

    impl Tier for Offered {
        fn name(&self) -> &str {
            self.local
                .as_deref()
                .unwrap_or("offered without a local tier")
        }
        fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<crate::TierEntry>, Error> {
            Ok(None)
        }
        fn store(&self, _: &Owner, _: &kiln_image::EntryData) -> Result<(), Error> {
            Ok(())
        }
    }

    fn offered(setup: &TierSetup<'_>) -> Option<Box<dyn Tier>> {
        setup.var("KILN_TEST_FACTORY_TIER")?;
        let local = setup
            .local()
            .map(|local| format!("offered, writing through to {}", local.name()));
        Some(Box::new(Offered { local }))
    }

    inventory::submit! { crate::TierFactory::new("offered", offered) }

    #[test]
    fn registered_tiers_come_after_the_disk_tier_when_their_variables_say_so() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("kiln");
        let on = Path::new("1");
        let tiers = |vars: &[(&str, &Path)]| {
            let lookup = |name: &str| {
                vars.iter()
                    .find(|(var, _)| *var == name)
                    .map(|(_, value)| value.as_os_str().to_owned())
            };
            add_tiers(&Cache::new(), lookup)
        };
        assert_eq!(tiers(&[("KILN_CACHE_DIR", &dir)]), ["disk"]);
        assert_eq!(
            tiers(&[("KILN_CACHE_DIR", &dir), ("KILN_TEST_FACTORY_TIER", on)]),
            ["disk", "offered, writing through to disk"]
        );
        assert_eq!(
            tiers(&[
                ("KILN_CACHE", Path::new("0")),
                ("KILN_TEST_FACTORY_TIER", on)
            ]),
            ["offered without a local tier"]
        );
        assert!(!dir.exists(), "adding tiers touched the disk");
    }

    #[test]
    fn kiln_log_without_a_subscriber_prints_problems_or_everything() {
        use stderr_report::{Detail, filter_detail, init_lines};

        assert_eq!(filter_detail("warn"), Some(Detail::Problems));
        assert_eq!(filter_detail(" ERROR "), Some(Detail::Problems));
        assert_eq!(filter_detail("info"), Some(Detail::Everything));
        assert_eq!(filter_detail("kiln_core=debug"), Some(Detail::Everything));
        assert_eq!(filter_detail("off"), None);
        assert_eq!(stderr_report::detail(None), None);
        assert_eq!(stderr_report::detail(Some("warn")), Some(Detail::Problems));
        // A program with a subscriber gets the events there: kiln prints nothing.
        let subscriber = tracing_subscriber::fmt()
            .with_writer(std::io::sink)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            assert_eq!(stderr_report::detail(Some("info")), None);
        });

        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "a.kimg", &image_bytes(&["x", "y"]));
        write(dir.path(), "b.kimg", b"not an image");
        let switches = Switches {
            image_path: vec![dir.path().to_path_buf()],
            ..Switches::default()
        };
        let cache = Cache::new();
        cache.define("ops", Digest::of(b"v2"));
        let mut report = load_images(&cache, &switches, &[]);
        report.tiers = vec!["disk".to_owned()];

        let problems = init_lines(Detail::Problems, &report);
        assert_eq!(problems.len(), 2, "{problems:#?}");
        assert!(
            problems[0].contains("a.kimg: 2 entries skipped as stale"),
            "{problems:#?}"
        );
        assert!(
            problems[1].starts_with("kiln: skipped image "),
            "{problems:#?}"
        );
        assert!(problems[1].contains("b.kimg"), "{problems:#?}");

        let everything = init_lines(Detail::Everything, &report);
        assert_eq!(
            everything[0],
            "kiln: cache tiers after memory and images: disk"
        );
        assert!(everything[1].contains("merged image ") && everything[1].contains("a.kimg"));
        assert_eq!(everything[2..], problems[..]);
    }

    #[test]
    fn kiln_record_records_into_a_file_and_an_unusable_one_records_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let cache = new_cache(&Switches::default());
        record_into(&cache, dir.path());
        assert!(cache.recorder().is_none(), "a directory is no record file");
        let path = dir.path().join("app.rec");
        record_into(&cache, &path);
        assert_eq!(cache.recorder().map(|r| r.path()), Some(path.as_path()));
        get_or_compile(&cache, "x");
        drop(cache);
        let mut recording = crate::record::Recording::new();
        recording
            .read_file(&path, crate::record::DEFAULT_READ_LIMIT)
            .unwrap();
        assert_eq!(recording.len(), 1);
    }

    #[test]
    fn always_compile_reaches_the_cache_config() {
        let on = Switches {
            always_compile: true,
            ..Switches::default()
        };
        assert!(new_cache(&on).config().always_compile);
        assert!(!new_cache(&Switches::default()).config().always_compile);
    }

    #[test]
    fn the_global_init_runs_once() {
        global();
        let first = init();
        assert!(std::ptr::eq(first, init()));
        assert!(matches!(
            init_with(|_| panic!("setup must not run")),
            Err(Error::AlreadyInitialized)
        ));
        // The registry's tests register three embedded images that are not
        // images: the init skips them and goes on.
        let skipped_embedded = first
            .skipped()
            .filter(|(source, _)| matches!(source, ImageSource::Embedded { .. }))
            .count();
        assert_eq!(skipped_embedded, 3, "{first}");
        assert_eq!(global().image_count(), first.merged().count());
    }
}
