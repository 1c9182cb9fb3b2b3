//! The process-wide cache, and the init that merges every image into it
//! (see [`init()`]).
//!
//! Init touches only each image's index, never its payloads, and never
//! panics on bad input: a bad image is skipped with a warning. With the
//! `ctor` feature it runs before `main`, so the first kernel request pays
//! nothing.

use std::fmt;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use crate::disk::{DiskConfig, DiskTier};
use crate::env::Switches;
use crate::registry::{self, EmbeddedImage, ImageSource};
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
/// says why, and the others keep loading. Calling it again returns the same
/// report; images are merged once.
///
/// The init also adds the **disk tier** ([`DiskTier`]), consulted by
/// [`Cache::get_or_compile`] after memory and images and before compiling,
/// and given every new compile, so that code compiled at run time persists
/// across runs. `KILN_CACHE=0` leaves it out; `KILN_CACHE_DIR` and
/// `KILN_CACHE_MAX_BYTES` place and cap it (see
/// [`disk::config`](crate::disk::config)); `KILN_ALWAYS_COMPILE=1` skips it
/// on lookups like every other tier (fresh compiles are still stored).
/// The init does no disk I/O for it: the directory is opened on the first
/// miss in memory and images. A directory that cannot be created gives one
/// warning and the process compiles without it; a read-only or full one
/// still serves what it holds, and the first failed write gives one warning
/// and ends writing for the process.
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
    /// The `KILN_LOG` subscriber, if set.
    log: Option<tracing::Dispatch>,
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
        let log = stderr_log::dispatch(switches.log.as_deref());
        let cache = new_cache(&switches);
        let disk = add_disk_tier(&cache, DiskConfig::from_env(), log.as_ref());
        #[cfg(feature = "redis")]
        add_remote_tier(&cache, disk, log.as_ref());
        #[cfg(not(feature = "redis"))]
        drop(disk);
        if let Some(setup) = setup {
            setup(&cache);
        }
        let (newest, embedded) = registry::registered_since(std::ptr::null());
        let report = stderr_log::with(log.as_ref(), || load_images(&cache, &switches, &embedded));
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
            stderr_log::with(self.log.as_ref(), || {
                for image in late {
                    self.report.images.push(merge_embedded(&self.cache, image));
                }
            });
        }
        self.newest.store(newest.cast_mut(), Ordering::Release);
    }
}

/// The global cache's configuration under `switches`.
fn new_cache(switches: &Switches) -> Cache {
    Cache::with_config(CacheConfig::default().always_compile(switches.always_compile))
}

/// Adds the disk tier of `config` (read from `KILN_CACHE*`) to `cache`,
/// unless it is turned off, and returns it (the remote tier writes its hits
/// through to it). No I/O: the directory is opened on the tier's first use
/// ([`DiskTier`]); its events go through `log` (`KILN_LOG`).
fn add_disk_tier(
    cache: &Cache,
    config: Result<Option<DiskConfig>, Error>,
    log: Option<&tracing::Dispatch>,
) -> Option<Arc<dyn Tier>> {
    let disk = stderr_log::with(log, || DiskTier::from_config(config))?;
    let disk: Arc<dyn Tier> = Arc::new(stderr_log::Logged::new(disk, log.cloned()));
    cache.add_tier(Box::new(Arc::clone(&disk)));
    Some(disk)
}

/// Adds the remote tier of `KILN_REMOTE_CACHE` to `cache`, after the disk
/// tier, writing its hits through to `disk`. No I/O: the tier connects on
/// its first use.
#[cfg(feature = "redis")]
fn add_remote_tier(cache: &Cache, disk: Option<Arc<dyn Tier>>, log: Option<&tracing::Dispatch>) {
    let Some(remote) = stderr_log::with(log, crate::remote::RemoteTier::from_env) else {
        return;
    };
    let remote = match disk {
        Some(disk) => remote.write_through(disk),
        None => remote,
    };
    cache.add_tier(Box::new(stderr_log::Logged::new(remote, log.cloned())));
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
        images: boxcar::Vec::new(),
    };
    if switches.disable {
        tracing::info!("KILN_DISABLE is set: no image merged");
        return report;
    }
    for image in embedded {
        report.images.push(merge_embedded(cache, image));
    }
    let (files, unreadable) = registry::image_files(&switches.image_path);
    for (dir, source) in unreadable {
        let err = Error::ImageDirectory {
            dir: dir.clone(),
            source,
        };
        report
            .images
            .push(merge(cache, ImageSource::Directory(dir), Err(err)));
    }
    for path in files {
        let opened = kiln_image::Image::open(&path, kiln_image::Verification::Structural)
            .map_err(Error::from);
        report
            .images
            .push(merge(cache, ImageSource::File(path), opened));
    }
    report
}

fn merge_embedded(cache: &Cache, image: &'static EmbeddedImage) -> ImageReport {
    let source = ImageSource::Embedded {
        crate_name: image.crate_name(),
        name: image.name(),
    };
    merge(cache, source, image.open().map_err(Error::from))
}

/// Merges one opened image, or records why it could not be opened.
fn merge(
    cache: &Cache,
    source: ImageSource,
    opened: Result<kiln_image::Image, Error>,
) -> ImageReport {
    let outcome = match opened {
        Ok(image) => {
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
            tracing::warn!(image = %source, "skipped kiln image: {err}");
            ImageOutcome::Skipped(err)
        }
    };
    ImageReport { source, outcome }
}

/// What the init did.
#[derive(Debug, Default)]
pub struct InitReport {
    /// `KILN_DISABLE` was set: nothing was merged.
    pub disabled: bool,
    /// One report per image, in merge order (append-only: images registered
    /// after the init are added when merged).
    images: boxcar::Vec<ImageReport>,
}

impl InitReport {
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
pub struct ImageReport {
    /// Where the image came from.
    pub source: ImageSource,
    /// What happened to it.
    pub outcome: ImageOutcome,
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

/// `KILN_LOG`: the init's and the disk tier's `tracing` events on stderr.
mod stderr_log {
    use std::io::IsTerminal;

    use kiln_image::EntryData;
    use tracing::Dispatch;
    use tracing_subscriber::EnvFilter;

    use crate::{Error, Key, Owner, Tier};

    /// A subscriber printing to stderr through `filter` (a `tracing` filter
    /// such as `info` or `kiln_core=debug`); `None` when `filter` is `None`
    /// (the program's own subscriber decides). An invalid filter falls back
    /// to `info`, with a warning.
    pub(super) fn dispatch(filter: Option<&str>) -> Option<Dispatch> {
        let filter = filter?;
        let (env_filter, invalid) = match EnvFilter::try_new(filter) {
            Ok(env_filter) => (env_filter, None),
            Err(err) => (EnvFilter::new("info"), Some(err)),
        };
        let dispatch = Dispatch::new(
            tracing_subscriber::fmt()
                .with_env_filter(env_filter)
                .with_writer(std::io::stderr)
                .with_ansi(std::io::stderr().is_terminal())
                .finish(),
        );
        if let Some(err) = invalid {
            tracing::dispatcher::with_default(&dispatch, || {
                tracing::warn!("KILN_LOG={filter:?} is not a tracing filter ({err}); using `info`");
            });
        }
        Some(dispatch)
    }

    /// Runs `f` with `dispatch` as the current thread's subscriber (or as
    /// the program's own subscriber decides when `None`). The program's own
    /// global subscriber stays as it set it.
    pub(super) fn with<T>(dispatch: Option<&Dispatch>, f: impl FnOnce() -> T) -> T {
        match dispatch {
            Some(dispatch) => tracing::dispatcher::with_default(dispatch, f),
            None => f(),
        }
    }

    /// A tier whose events (the disk tier's one warning, say) go through
    /// the `KILN_LOG` subscriber, like the init's.
    pub(super) struct Logged<T> {
        tier: T,
        dispatch: Option<Dispatch>,
    }

    impl<T> Logged<T> {
        pub(super) fn new(tier: T, dispatch: Option<Dispatch>) -> Logged<T> {
            Logged { tier, dispatch }
        }
    }

    impl<T: Tier> Tier for Logged<T> {
        fn name(&self) -> &str {
            self.tier.name()
        }

        fn load(&self, owner: &Owner, key: &Key) -> Result<Option<EntryData>, Error> {
            with(self.dispatch.as_ref(), || self.tier.load(owner, key))
        }

        fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
            with(self.dispatch.as_ref(), || self.tier.store(owner, entry))
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
        add_disk_tier(&cache, DiskConfig::from_lookup(lookup), None);
        cache
    }

    /// `get_or_compile` of `name`: its source, and whether it compiled.
    fn get_or_compile(cache: &Cache, name: &str) -> (Source, bool) {
        let mut compiled = false;
        let hit = cache
            .get_or_compile(&owner(), &key(name), || {
                compiled = true;
                Ok::<_, Error>(Compiled::new(name).artifact(Artifact {
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

        // A new process with the same directory: a hit from the disk tier.
        let second = cache_with_disk(&[("KILN_CACHE_DIR", &dir)]);
        assert_eq!(get_or_compile(&second, "x"), (Source::Tier, false));
        assert_eq!(second.stats().hits_tier, 1);

        // KILN_CACHE=0: no disk tier, so it compiles again.
        let off = cache_with_disk(&[("KILN_CACHE_DIR", &dir), ("KILN_CACHE", Path::new("0"))]);
        assert_eq!(get_or_compile(&off, "x"), (Source::Memory, true));
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
