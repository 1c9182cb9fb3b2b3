//! Extra tiers: caches consulted after memory and images, before compiling.

use std::sync::Arc;

use kiln_image::{EntryData, Image};

use crate::{Error, Key, Owner};

/// What a tier hands to the cache on a hit: an owned entry, or an entry of an
/// image the tier keeps mapped, which the cache then borrows instead of
/// copying (see [`Tier::load_entry`]).
#[non_exhaustive]
pub enum TierEntry {
    /// An owned copy (e.g. read from the network).
    Owned(EntryData),
    /// Entry `index` of `image` (e.g. a memory-mapped disk segment). The
    /// cache keeps the image alive as long as it holds the entry and serves
    /// its artifact bytes from it; each payload is checked against its
    /// checksum on first access, as for merged images.
    Image {
        /// The image, shared with the tier.
        image: Arc<Image>,
        /// The entry's position in the image.
        index: usize,
    },
}

/// An extra cache tier (e.g. an on-disk cache), added with
/// [`Cache::add_tier`](crate::Cache::add_tier).
///
/// `get_or_compile` asks each tier in the order they were added after a miss
/// in memory and images, and stores every successful, non-session-dependent
/// compile into every tier. Tiers are best-effort: an error is logged and
/// treated as a miss (on load) or ignored (on store), never returned to the
/// caller of `get_or_compile`.
///
/// Loading has one method, [`Tier::load_entry`], and no default: a tier that
/// keeps files mapped hands the cache the mapped entry, and a tier that wraps
/// another (logging, counting) must forward it, so no wrapper can turn a
/// borrowed hit into a copy by leaving it out.
pub trait Tier: Send + Sync {
    /// A short name for logs (e.g. `disk`).
    fn name(&self) -> &str;

    /// The entry for `(owner, key)`, if the tier has it: borrowed from an
    /// image the tier keeps mapped ([`TierEntry::Image`], so that a hit
    /// copies nothing), or owned ([`TierEntry::Owned`], e.g. read from the
    /// network). An entry whose owner or key differs from the request, or
    /// whose deps are stale, is ignored by the cache.
    ///
    /// # Errors
    /// Whatever kept the tier from answering; the cache logs it and treats
    /// it as a miss ([`Error::Tier`] carries a tier's own error).
    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error>;

    /// Records an entry this process compiled (worlds normalised, deps
    /// sorted): its provenance is
    /// [`Provenance::Compiled`](crate::trust::Provenance::Compiled). An
    /// entry that came from elsewhere goes through [`Tier::store_signed`]
    /// or [`Tier::store_unsigned`], never through this method.
    ///
    /// # Errors
    /// Whatever kept the tier from storing it; the cache logs it and goes on.
    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error>;

    /// Records an entry another tier loaded as a signed one-entry image
    /// (`image`, verified by that tier; the remote tier's write-through),
    /// keeping its signatures so that they can be checked again when the
    /// entry is read back
    /// ([`Provenance::Signed`](crate::trust::Provenance::Signed)). The disk
    /// tier keeps the image as a segment of its own; a wrapper must forward
    /// this method. The default stores nothing: a tier that cannot keep
    /// the signature must not file the entry among this process's compiles.
    ///
    /// # Errors
    /// Whatever kept the tier from storing it; the caller logs it and goes
    /// on.
    fn store_signed(&self, owner: &Owner, entry: &EntryData, image: &[u8]) -> Result<(), Error> {
        let _ = (owner, entry, image);
        Ok(())
    }

    /// Records an entry the tier named `from` loaded without a signature
    /// (the remote tier's write-through in a process without trusted
    /// keys): its provenance,
    /// [`Provenance::Unsigned`](crate::trust::Provenance::Unsigned), is
    /// kept with it, so that a process with trusted keys never serves it,
    /// whatever copies, compacts or bakes it meanwhile. The disk tier keeps
    /// such entries in segments of their own; a wrapper must forward this
    /// method. The default stores nothing, for the same reason as
    /// [`Tier::store_signed`]'s.
    ///
    /// # Errors
    /// Whatever kept the tier from storing it; the caller logs it and goes
    /// on.
    fn store_unsigned(&self, owner: &Owner, entry: &EntryData, from: &str) -> Result<(), Error> {
        let _ = (owner, entry, from);
        Ok(())
    }

    /// Records several freshly compiled entries at once (each as
    /// [`Tier::store`] would), returning one result per item, in order. The
    /// background writer calls it with the plain stores queued together
    /// for the same tiers, or gathered within [`Tier::batch_window`] (up to
    /// [`MAX_BATCH_JOBS`](crate::cache::MAX_BATCH_JOBS)), so that a tier can
    /// amortize work over them: the remote tier signs them with one batch
    /// signature. The default stores each item with [`Tier::store`]; a
    /// wrapper should forward this method (or it stores item by item).
    ///
    /// A result missing from the returned list (a list shorter than
    /// `items`) is counted as a failed store.
    fn store_batch(&self, items: &[(&Owner, &EntryData)]) -> Vec<Result<(), Error>> {
        items
            .iter()
            .map(|(owner, entry)| self.store(owner, entry))
            .collect()
    }

    /// How long the background writer may hold a store for this tier to
    /// gather more stores into one [`Tier::store_batch`] call (at most
    /// [`MAX_BATCH_WINDOW`](crate::cache::MAX_BATCH_WINDOW)). A store
    /// reaches the tier at most this much later, and so do its stores into
    /// the job's other tiers (a compile's store goes to every tier as one
    /// job); [`Cache::flush`](crate::Cache::flush), the exit flush and a
    /// queue at half its bounds cut the wait short. Default zero: a batch
    /// is only what is already queued. Called on the writer thread with its
    /// queue locked: return a stored value.
    fn batch_window(&self) -> std::time::Duration {
        std::time::Duration::ZERO
    }
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

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        (**self).load_entry(owner, key)
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        (**self).store(owner, entry)
    }

    fn store_signed(&self, owner: &Owner, entry: &EntryData, image: &[u8]) -> Result<(), Error> {
        (**self).store_signed(owner, entry, image)
    }

    fn store_unsigned(&self, owner: &Owner, entry: &EntryData, from: &str) -> Result<(), Error> {
        (**self).store_unsigned(owner, entry, from)
    }

    fn store_batch(&self, items: &[(&Owner, &EntryData)]) -> Vec<Result<(), Error>> {
        (**self).store_batch(items)
    }

    fn batch_window(&self) -> std::time::Duration {
        (**self).batch_window()
    }
}
