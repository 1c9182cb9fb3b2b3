//! Extra tiers: caches consulted after memory and images, before compiling.

use kiln_image::EntryData;

use crate::{Error, Key, Owner};

/// An extra cache tier (e.g. an on-disk cache), added with
/// [`Cache::add_tier`](crate::Cache::add_tier).
///
/// `get_or_compile` asks each tier in the order they were added after a miss
/// in memory and images, and stores every successful, non-session-dependent
/// compile into every tier. Tiers are best-effort: an error is logged and
/// treated as a miss (on load) or ignored (on store), never returned to the
/// caller of `get_or_compile`.
pub trait Tier: Send + Sync {
    /// A short name for logs (e.g. `disk`).
    fn name(&self) -> &str;

    /// The entry for `(owner, key)`, if the tier has it. An entry whose owner
    /// or key differs from the request, or whose deps are stale, is ignored.
    fn load(&self, owner: &Owner, key: &Key) -> Result<Option<EntryData>, Error>;

    /// Records a freshly compiled entry (worlds normalised, deps sorted).
    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error>;
}

/// A shared tier is a tier: the same disk cache can be added to a [`Cache`]
/// and also be filled by another tier (the remote tier writes its hits
/// through to it).
///
/// [`Cache`]: crate::Cache
impl<T: Tier + ?Sized> Tier for std::sync::Arc<T> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn load(&self, owner: &Owner, key: &Key) -> Result<Option<EntryData>, Error> {
        (**self).load(owner, key)
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        (**self).store(owner, entry)
    }
}
