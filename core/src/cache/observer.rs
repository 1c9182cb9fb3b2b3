//! Observing what [`Cache::lookup`] and [`Cache::get_or_compile`] return:
//! an [`Observer`] set on the cache is told of every entry they return and
//! where it came from. The cache's side is a few calls in `lookup.rs` and
//! `compile.rs` that cost one branch when no observer is set.
//!
//! The cache does no I/O for it: what an observer does with what it is told
//! is its own business. The recorder of `KILN_RECORD`
//! (`kiln_core::record::Recorder`, feature `record`) is one; a program may
//! set its own (counting, tracing, tests).

use std::sync::Arc;
use std::time::Duration;

use super::Cache;
use super::hit::Hit;
use crate::{Key, Owner};

/// How [`Cache::get_or_compile`] got an entry that was not in memory or in
/// an image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Acquired<'a> {
    /// Compiled, taking this long.
    Compiled(Duration),
    /// Loaded from the extra tier at `index` (in the order tiers were
    /// added), called `name` ([`Tier::name`](crate::Tier::name)).
    Tier {
        /// The tier's index, in the order tiers were added.
        index: usize,
        /// The tier's name.
        name: &'a str,
    },
}

/// Told of every entry a cache's [`Cache::lookup`] and
/// [`Cache::get_or_compile`] return (set with [`Cache::observe`]).
///
/// Both methods run on the caller's thread, on the lookup's path: they must
/// be cheap, must not block for long and must not call back into the cache.
///
/// ```
/// use std::sync::Arc;
/// use std::sync::atomic::{AtomicUsize, Ordering};
/// use kiln_core::cache::{Acquired, Observer};
/// use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Hit, Key, KeyBuilder, Owner};
///
/// #[derive(Default)]
/// struct Count {
///     found: AtomicUsize,
///     compiled: AtomicUsize,
/// }
///
/// impl Observer for Count {
///     fn found(&self, _hit: &Hit<'_>) {
///         self.found.fetch_add(1, Ordering::Relaxed);
///     }
///     fn acquired(&self, _owner: &Owner, _key: &Key, _name: &str, how: Acquired<'_>) {
///         if let Acquired::Compiled(_) = how {
///             self.compiled.fetch_add(1, Ordering::Relaxed);
///         }
///     }
/// }
///
/// # fn main() -> Result<(), kiln_core::Error> {
/// let cache = Cache::new();
/// let count = Arc::new(Count::default());
/// assert!(cache.observe(count.clone()).is_ok(), "the first observer");
///
/// let owner = Owner::new("my-compiler", "1.0", "x86_64", ["-O2"])?;
/// let key = KeyBuilder::new("doc", 1).str("function", "f").finish();
/// let compile = || Ok(Compiled::new("f").artifact(Artifact {
///     kind: ArtifactKind::Object,
///     entry_points: vec!["f".into()],
///     bytes: vec![1, 2, 3],
/// }));
/// cache.get_or_compile(&owner, &key, compile)?; // compiled
/// cache.get_or_compile(&owner, &key, compile)?; // found in memory
/// assert_eq!(count.compiled.load(Ordering::Relaxed), 1);
/// assert_eq!(count.found.load(Ordering::Relaxed), 1);
/// # Ok(()) }
/// ```
pub trait Observer: std::any::Any + Send + Sync {
    /// A hit found in memory or an image, by [`Cache::lookup`], or by
    /// [`Cache::get_or_compile`] (also after waiting for another thread's
    /// compile).
    fn found(&self, hit: &Hit<'_>);

    /// An entry [`Cache::get_or_compile`] compiled or loaded from an extra
    /// tier, told before the entry is recorded in memory (so that no other
    /// thread's hit on it comes first).
    fn acquired(&self, owner: &Owner, key: &Key, name: &str, how: Acquired<'_>);
}

impl Cache {
    /// Tells `observer`, from now on, of every entry [`Cache::lookup`] and
    /// [`Cache::get_or_compile`] return (see [`Observer`]). The global cache
    /// sets the `KILN_RECORD` recorder this way.
    ///
    /// # Errors
    /// Gives `observer` back if the cache has one already (a cache has at
    /// most one observer, set once).
    pub fn observe(&self, observer: Arc<dyn Observer>) -> Result<(), Arc<dyn Observer>> {
        self.observer.set(observer)
    }

    /// The observer set with [`Cache::observe`], if any.
    pub fn observer(&self) -> Option<&Arc<dyn Observer>> {
        self.observer.get()
    }

    /// Notes a hit found in memory or an image (by a lookup, or by
    /// `get_or_compile` after waiting for a compile); returns it.
    #[inline]
    pub(super) fn note_found<'c>(&self, hit: Hit<'c>) -> Hit<'c> {
        if let Some(observer) = self.observer.get() {
            observer.found(&hit);
        }
        hit
    }

    /// Notes an entry compiled or loaded from a tier, before it is recorded
    /// in memory (so that no other thread's hit on it comes first).
    #[inline]
    pub(super) fn note_acquired(&self, owner: &Owner, key: &Key, name: &str, how: Acquired<'_>) {
        if let Some(observer) = self.observer.get() {
            observer.acquired(owner, key, name, how);
        }
    }
}
