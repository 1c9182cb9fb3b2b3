//! [`Session`]: what a precompile block sees, and how each specialization
//! ends: done (found or compiled), missing (this machine cannot compile it:
//! [`Unavailable`]), or failed (the library's code does not compile).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::error::Error as StdError;
use std::ffi::OsString;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_image::ArtifactKind;
use kiln_ship::Manifest;

use super::Target;
use crate::{BoxError, Cache, Digest, Key};

/// Why a specialization cannot be compiled *on this machine* (no compiler,
/// no headers, another compiler release than the shipped entries'): the
/// block leaves it out with a `cargo::warning` naming it, and the build goes
/// on. Any other error of a specialization fails the build, with its
/// message: it is the library's code that does not compile.
///
/// Return it (or an error whose [`source`](StdError::source) chain holds
/// it) from a [`Session::specialize`] compile, or from the block itself.
///
/// ```
/// use kiln_core::build::Unavailable;
/// let missing = Unavailable::new("no NVRTC on this machine: pip install nvidia-cuda-nvrtc");
/// assert_eq!(missing.to_string(), "no NVRTC on this machine: pip install nvidia-cuda-nvrtc");
/// ```
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{why}")]
pub struct Unavailable {
    why: String,
}

impl Unavailable {
    /// Cannot compile here, because `why` (say also what to do).
    pub fn new(why: impl Into<String>) -> Unavailable {
        Unavailable { why: why.into() }
    }

    /// Why, and what to do.
    pub fn why(&self) -> &str {
        &self.why
    }

    /// The `Unavailable` in `error`'s source chain, if any.
    pub fn find<'e>(error: &'e (dyn StdError + 'static)) -> Option<&'e Unavailable> {
        let mut next = Some(error);
        while let Some(error) = next {
            if let Some(found) = error.downcast_ref::<Unavailable>() {
                return Some(found);
            }
            next = error.source();
        }
        None
    }
}

/// How one specialization ended, when it did not succeed.
#[derive(Debug)]
pub(super) enum NotDone {
    /// This machine cannot compile it.
    Missing(String),
    /// It does not compile.
    Failed(String),
}

impl NotDone {
    /// Classifies an error of a compile or of the block.
    pub(super) fn of(error: BoxError) -> NotDone {
        let error: &(dyn StdError + 'static) = &*error;
        match Unavailable::find(error) {
            Some(missing) => NotDone::Missing(missing.why().to_owned()),
            None => NotDone::Failed(describe(error)),
        }
    }
}

/// What a precompile block sees: the cache to compile into (which first
/// looks entries up in the library's shipped image, the disk tier and the
/// remote tier), the target, what the shipped image recorded, and ways to
/// declare what the build depends on.
pub struct Session<'a> {
    pub(super) cache: &'a Cache,
    pub(super) target: Option<&'a Target>,
    pub(super) settings: &'a crate::settings::Settings,
    pub(super) shipped: Option<&'a Manifest>,
    pub(super) sources: BTreeSet<PathBuf>,
    pub(super) env: BTreeSet<String>,
    pub(super) records: BTreeMap<String, String>,
    pub(super) labels: Vec<String>,
    pub(super) done: Vec<(String, Duration)>,
    pub(super) missing: Vec<(String, String)>,
    pub(super) failed: Vec<(String, String)>,
    pub(super) dropped: HashMap<(Digest, Digest), Vec<ArtifactKind>>,
    pub(super) not_shippable: Option<String>,
    pub(super) notes: Vec<String>,
    pub(super) warnings: Vec<String>,
}

impl<'a> Session<'a> {
    /// The cache the block compiles into; what the block gets from it
    /// (found or compiled) goes into the image.
    ///
    /// Its lookups go, in order, to the library's shipped image, the disk
    /// tier and the remote tier (as the application's global cache does),
    /// then compile: [`Cache::get_or_compile`] reuses what any earlier build
    /// compiled, and [`Cache::get_cached`] finds without compiling.
    pub fn cache(&self) -> &'a Cache {
        self.cache
    }

    /// The platform the library is being built for: cargo's `TARGET` and
    /// `CARGO_CFG_*` variables (or what
    /// [`Precompile::target`](super::Precompile::target) gave). Build keys
    /// and owners from it, not from `cfg!(target_*)`, which in a build
    /// script describes the host (see the [module documentation](super)).
    /// `None` outside a build script when no target was given.
    pub fn target(&self) -> Option<&'a Target> {
        self.target
    }

    /// An environment variable as the run sees it (the process's, or what
    /// [`Precompile::env`](super::Precompile::env) gave). Declare the
    /// variables that change what the block compiles with
    /// [`Session::uses_env`].
    pub fn env(&self, name: &str) -> Option<OsString> {
        self.settings.var(name)
    }

    /// Declares that the compiled code depends on `path` (a file or a
    /// directory, relative to the crate root): cargo reruns the build script
    /// when it changes, and a shipped image records its digest.
    pub fn uses_source(&mut self, path: impl AsRef<Path>) {
        self.sources.insert(path.as_ref().to_path_buf());
    }

    /// Declares that the compiled code depends on the environment variable
    /// `name`: cargo reruns the build script when it changes.
    pub fn uses_env(&mut self, name: impl Into<String>) {
        self.env.insert(name.into());
    }

    /// The record backend `backend` left in the library's shipped image:
    /// what the block needs to derive the shipped entries' owners and keys
    /// without running the compiler (a compiler's version, the digests of
    /// the headers or grammar it read; kiln-cuda's holds the NVRTC release
    /// and header digests). `None` when nothing is shipped or the backend
    /// recorded nothing.
    pub fn shipped_record(&self, backend: &str) -> Option<&'a str> {
        self.shipped?.records.get(backend).map(String::as_str)
    }

    /// Records `record` for backend `backend` in what this build would ship
    /// (see [`Session::shipped_record`]).
    pub fn record(&mut self, backend: impl Into<String>, record: impl Into<String>) {
        self.records.insert(backend.into(), record.into());
    }

    /// Leaves the artifacts of `kind` out of entry `(owner, key)` in the
    /// image this block writes (the entry in the cache and in the tiers
    /// keeps them). Caches hold what a compile gives, so that every tier
    /// holds the same entry under one key; the image keeps what the
    /// library chose to ship (kiln-cuda keeps PTX for a few targets only).
    pub fn leave_out(&mut self, owner: Digest, key: &Key, kind: ArtifactKind) {
        self.dropped
            .entry((owner, *key.digest()))
            .or_default()
            .push(kind);
    }

    /// Marks this build's image as not for shipping (`kiln ship` refuses it),
    /// because `why`: say, the application limited the targets.
    pub fn not_for_shipping(&mut self, why: impl Into<String>) {
        self.not_shippable.get_or_insert_with(|| why.into());
    }

    /// Adds `note` to the block's summary line (after its counts, `; `
    /// separated): what the backend wants every build to say, such as which
    /// drivers and GPUs the code reaches.
    pub fn summary_note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    /// Prints `text` as a `cargo::warning` of the block (`kiln: <name>: text`).
    pub fn warn(&mut self, text: impl Into<String>) {
        self.warnings.push(text.into());
    }

    /// Gets one specialization, called `label` in progress lines.
    ///
    /// `compile` gets the block's cache and may return what borrows from it
    /// (a [`Hit`](crate::Hit)), or any other value. When it fails:
    ///
    /// - with [`Unavailable`] (this machine cannot compile it), the
    ///   specialization is left out with a `cargo::warning` that names it;
    /// - with any other error, or a panic, the build fails at the end of the
    ///   block with the error's message: the library's code does not
    ///   compile.
    ///
    /// The result is `None` then.
    pub fn specialize<T, E: Into<BoxError>>(
        &mut self,
        label: &str,
        compile: impl FnOnce(&'a Cache) -> Result<T, E>,
    ) -> Option<T> {
        let (elapsed, outcome) = run_one(self.cache, compile);
        self.finish(label, elapsed, outcome)
    }

    /// Gets every specialization of `work` (a label and a compile each) on up
    /// to `jobs` threads (see [`jobs`]), each as [`Session::specialize`] does, and
    /// reports them in the order given. The image does not depend on the order in
    /// which they finish: its entries are sorted. As with [`Session::specialize`],
    /// a compile may return what borrows from the block's cache.
    pub fn specialize_all<T, E, F>(&mut self, jobs: usize, work: Vec<(String, F)>) -> Vec<Option<T>>
    where
        T: Send,
        E: Into<BoxError> + Send,
        F: FnOnce(&'a Cache) -> Result<T, E> + Send,
    {
        let cache = self.cache;
        let (labels, compiles): (Vec<String>, Vec<F>) = work.into_iter().unzip();
        let queue: Vec<Mutex<Option<F>>> =
            compiles.into_iter().map(|f| Mutex::new(Some(f))).collect();
        let done: Vec<Mutex<Option<Finished<T>>>> =
            queue.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let threads = jobs.clamp(1, queue.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(slot) = queue.get(index) else { break };
                        let compile = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                        let Some(compile) = compile else { continue };
                        let finished = run_one(cache, compile);
                        *done[index].lock().unwrap_or_else(PoisonError::into_inner) =
                            Some(finished);
                    }
                });
            }
        });
        labels
            .iter()
            .zip(done)
            .map(|(label, result)| {
                let result = result.into_inner().unwrap_or_else(PoisonError::into_inner);
                let (elapsed, outcome) = result.unwrap_or_else(|| {
                    let why = "its worker did not run it".to_owned();
                    (Duration::ZERO, Err(NotDone::Failed(why)))
                });
                self.finish(label, elapsed, outcome)
            })
            .collect()
    }

    /// Records the outcome of one specialization.
    fn finish<T>(
        &mut self,
        label: &str,
        elapsed: Duration,
        outcome: Result<T, NotDone>,
    ) -> Option<T> {
        self.labels.push(label.to_owned());
        match outcome {
            Ok(value) => {
                self.done.push((label.to_owned(), elapsed));
                Some(value)
            }
            Err(NotDone::Missing(why)) => {
                self.missing.push((label.to_owned(), why));
                None
            }
            Err(NotDone::Failed(why)) => {
                self.failed.push((label.to_owned(), why));
                None
            }
        }
    }
}

/// How long one compile took, and its value or why it did not give one.
type Finished<T> = (Duration, Result<T, NotDone>);

/// Runs one compile, catching a panic: its time and its value or failure.
fn run_one<'c, T, E: Into<BoxError>>(
    cache: &'c Cache,
    compile: impl FnOnce(&'c Cache) -> Result<T, E>,
) -> Finished<T> {
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| compile(cache)));
    let elapsed = started.elapsed();
    let outcome = match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(error)) => Err(NotDone::of(error.into())),
        Err(panic) => Err(NotDone::Failed(format!(
            "panicked: {}",
            panic_message(panic.as_ref())
        ))),
    };
    (elapsed, outcome)
}

/// How many compiles a build script runs at once: cargo's `NUM_JOBS` (its `-j`),
/// else the machine's parallelism; at least 1.
pub fn jobs() -> usize {
    std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.trim().parse::<usize>().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1)
}

/// An error and the sources its message does not already include.
pub(super) fn describe(error: &(dyn StdError + 'static)) -> String {
    let mut text = error.to_string();
    let mut next = error.source();
    while let Some(source) = next {
        let more = source.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        next = source.source();
    }
    text
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}
