//! What a precompile block takes without vouching for it: with
//! `KILN_BUILD_UNVERIFIED=1`, the disk and remote tiers are asked a second
//! time without trusted keys, after the vouching ones missed (or refused),
//! each wrapped in an [`UnverifiedTier`] that notes every entry it gives
//! ([`Taken`]), so that the image can record them.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use kiln_image::EntryData;

use crate::cache::{Tier, TierEntry};
use crate::{Digest, Error, Key, Owner};

/// The `(owner, key)` digests of the entries taken unverified, shared by
/// the wrapped tiers and the block.
#[derive(Clone, Default)]
pub(super) struct Taken {
    entries: Arc<Mutex<BTreeSet<(Digest, Digest)>>>,
    active: Arc<std::sync::atomic::AtomicBool>,
}

impl Taken {
    fn note(&self, owner: Digest, key: Digest) {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert((owner, key));
    }

    /// The entries taken so far.
    pub(super) fn entries(&self) -> BTreeSet<(Digest, Digest)> {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Whether unverified tiers were added (`KILN_BUILD_UNVERIFIED`).
    pub(super) fn is_active(&self) -> bool {
        self.active.load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// A tier asked without trusted keys, after the block's vouching tiers:
/// every entry it gives is noted as unverified. It stores nothing (the
/// block's compiles go to the vouching tiers), and is named
/// `unverified <tier>` in the block's summary.
pub(super) struct UnverifiedTier {
    inner: Box<dyn Tier>,
    name: String,
    taken: Taken,
}

impl UnverifiedTier {
    pub(super) fn new(inner: Box<dyn Tier>, taken: Taken) -> UnverifiedTier {
        taken
            .active
            .store(true, std::sync::atomic::Ordering::Relaxed);
        UnverifiedTier {
            name: format!("unverified {}", inner.name()),
            inner,
            taken,
        }
    }
}

impl Tier for UnverifiedTier {
    fn name(&self) -> &str {
        &self.name
    }

    /// The inner tier's entry, noted as unverified when it is the one
    /// asked for (the cache ignores any other). An entry the cache then
    /// finds stale is compiled, and stays noted: it is refused at run time
    /// with trusted keys and compiled there, the safe side.
    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        let found = self.inner.load_entry(owner, key)?;
        let (owner, key) = (owner.digest(), *key.digest());
        let matches = match &found {
            Some(TierEntry::Owned(entry)) => entry.owner == owner && entry.key == key,
            Some(TierEntry::Image { image, index }) => image
                .entry(*index)
                .is_ok_and(|entry| entry.owner() == owner && entry.key() == key),
            None => false,
        };
        if matches {
            self.taken.note(owner, key);
        }
        Ok(found)
    }

    /// Stores nothing: the block's compiles go to the vouching tiers.
    fn store(&self, _owner: &Owner, _entry: &EntryData) -> Result<(), Error> {
        Ok(())
    }
}
