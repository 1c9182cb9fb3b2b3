//! Image layers: merged images, consulted after memory, never copied.
//!
//! Merging an image pushes one [`Layer`]: the image itself, the world it was
//! merged in (its entries are valid from there on), its owners, and a
//! per-entry state word that starts all-open and is only allocated when some
//! entry needs one (a duplicate, a stale or corrupt entry, an invalidation):
//!
//! | state        | meaning                                        |
//! | ------------ | ---------------------------------------------- |
//! | `0`          | open: valid from the layer's world on          |
//! | `EXCLUDED`   | never served (duplicate, stale, corrupt)       |
//! | other `w`    | closed: valid up to and including world `w`    |
//!
//! A lookup checks an entry's record only. Each payload is checked against
//! its checksum when a [`Hit`](super::Hit) first accesses it
//! ([`Layer::payload`]); one that fails excludes its entry.

use std::ops::Range;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use kiln_image::{ArtifactRef, EntryRef, Image};

use crate::{Digest, Key};

const OPEN: u64 = 0;
const EXCLUDED: u64 = u64::MAX;

/// An owner of a layer's image and its entries' index range.
pub(crate) struct LayerOwner {
    pub(crate) digest: Digest,
    pub(crate) label: String,
    pub(crate) entries: Range<usize>,
    /// Refused by the cache's owner filter: never served.
    pub(crate) foreign: bool,
}

/// One merged image.
pub(crate) struct Layer {
    pub(crate) image: Image,
    /// The world the image was merged in: its entries' `min_world`.
    pub(crate) min_world: u64,
    /// Sorted by digest (as in the image).
    pub(crate) owners: Vec<LayerOwner>,
    any_foreign: bool,
    states: OnceLock<Box<[AtomicU64]>>,
    /// Entries excluded because a payload failed its checksum on access.
    corrupt_payloads: AtomicU64,
}

/// What a layer says about one `(owner, key)`.
pub(crate) enum LayerLookup<'l> {
    Valid(EntryRef<'l>),
    Absent,
    /// Present but its entry record is corrupt.
    Corrupt,
}

impl Layer {
    pub(crate) fn new(image: Image, min_world: u64, owners: Vec<LayerOwner>) -> Layer {
        let any_foreign = owners.iter().any(|o| o.foreign);
        Layer {
            image,
            min_world,
            owners,
            any_foreign,
            states: OnceLock::new(),
            corrupt_payloads: AtomicU64::new(0),
        }
    }

    pub(crate) fn owner(&self, digest: &Digest) -> Option<&LayerOwner> {
        self.owners
            .binary_search_by(|o| o.digest.cmp(digest))
            .ok()
            .map(|i| &self.owners[i])
    }

    fn is_foreign(&self, digest: &Digest) -> bool {
        self.any_foreign && self.owner(digest).is_some_and(|o| o.foreign)
    }

    pub(crate) fn is_foreign_index(&self, index: usize) -> bool {
        self.any_foreign
            && self
                .owners
                .iter()
                .any(|o| o.foreign && o.entries.contains(&index))
    }

    fn state(&self, index: usize) -> u64 {
        self.states
            .get()
            .and_then(|states| states.get(index))
            .map_or(OPEN, |s| s.load(Ordering::Acquire))
    }

    fn state_word(&self, index: usize) -> Option<&AtomicU64> {
        let len = self.image.len();
        self.states
            .get_or_init(|| (0..len).map(|_| AtomicU64::new(OPEN)).collect())
            .get(index)
    }

    /// Excludes entry `index` for good. Returns whether it was not excluded before.
    pub(crate) fn exclude(&self, index: usize) -> bool {
        self.state_word(index)
            .is_some_and(|s| s.swap(EXCLUDED, Ordering::AcqRel) != EXCLUDED)
    }

    /// Closes entry `index` so that it is valid up to `last_valid`. Returns
    /// whether this call closed it (false if closed or excluded already).
    pub(crate) fn close(&self, index: usize, last_valid: u64) -> bool {
        self.state_word(index).is_some_and(|s| {
            s.compare_exchange(OPEN, last_valid, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
        })
    }

    pub(crate) fn is_excluded(&self, index: usize) -> bool {
        self.state(index) == EXCLUDED
    }

    /// The last world entry `index` is valid in (`u64::MAX` if open), or
    /// `None` if excluded.
    pub(crate) fn max_world(&self, index: usize) -> Option<u64> {
        match self.state(index) {
            OPEN => Some(u64::MAX),
            EXCLUDED => None,
            closed => Some(closed),
        }
    }

    /// Whether `entry` is served in `world` (not excluded, not closed before,
    /// layer merged by then, and an unbounded entry in its image).
    pub(crate) fn is_valid_in(&self, entry: &EntryRef<'_>, world: u64) -> bool {
        world >= self.min_world
            && self
                .max_world(entry.index())
                .is_some_and(|max| world <= max)
            && entry.max_world() == u64::MAX
    }

    /// Entry `index`, if it is valid in `world`.
    pub(crate) fn valid_entry(&self, index: usize, world: u64) -> Option<EntryRef<'_>> {
        let entry = self.image.entry(index).ok()?;
        self.is_valid_in(&entry, world).then_some(entry)
    }

    /// Entry `index`, found through the index: served if it is `(owner,
    /// key)` (the index holds hashes) and valid in `world`. Its payloads are
    /// checked when accessed ([`Layer::payload`]).
    pub(crate) fn promoted(
        &self,
        index: usize,
        owner: &Digest,
        key: &Key,
        world: u64,
    ) -> Option<EntryRef<'_>> {
        let entry = self.image.entry(index).ok()?;
        (entry.key() == *key.digest() && entry.owner() == *owner && self.is_valid_in(&entry, world))
            .then_some(entry)
    }

    /// Looks up `(owner, key)` valid in `world`. Only the entry record is
    /// checked (by the image); payloads are checked when accessed
    /// ([`Layer::payload`]), so a lookup pages in none of them.
    pub(crate) fn lookup(&self, owner: &Digest, key: &Key, world: u64) -> LayerLookup<'_> {
        if world < self.min_world || self.is_foreign(owner) {
            return LayerLookup::Absent;
        }
        let entry = match self.image.find(owner, key.digest()) {
            Ok(Some(entry)) => entry,
            Ok(None) => return LayerLookup::Absent,
            Err(error) => {
                tracing::warn!(%key, error = %crate::ErrorChain(&error), "image entry record is corrupt; treated as a miss");
                return LayerLookup::Corrupt;
            }
        };
        if !self.is_valid_in(&entry, world) {
            return LayerLookup::Absent;
        }
        LayerLookup::Valid(entry)
    }

    /// The payload of `artifact` (of `entry`, in this layer), checked against
    /// its checksum on first access (the image remembers a success). A payload
    /// that fails is never returned: its entry is excluded for good (the next
    /// lookup misses, so `get_or_compile` recompiles) and counted once.
    pub(crate) fn payload<'a>(
        &self,
        entry: &EntryRef<'a>,
        artifact: &ArtifactRef<'a>,
    ) -> Option<&'a [u8]> {
        match artifact.bytes() {
            Ok(bytes) => Some(bytes),
            Err(error) => {
                if self.exclude(entry.index()) {
                    self.corrupt_payloads.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(
                        name = entry.name(),
                        key = %Key::from_digest(entry.key()),
                        error = %crate::ErrorChain(&error),
                        "image payload failed its checksum; the entry is never served again, recompile instead"
                    );
                }
                None
            }
        }
    }

    /// Entries excluded because a payload failed its checksum.
    pub(crate) fn corrupt_payloads(&self) -> u64 {
        self.corrupt_payloads.load(Ordering::Relaxed)
    }
}
