//! Recording what `lookup` and `get_or_compile` return (see
//! [`crate::record`]): the cache's side, a few calls in `lookup.rs` and
//! `compile.rs` that cost one branch when no recorder is set.

use std::sync::Arc;

use super::Cache;
use super::hit::Hit;
use crate::record::{Acquired, Recorder};
use crate::{Key, Owner};

impl Cache {
    /// Records from now on every entry [`Cache::lookup`] and
    /// [`Cache::get_or_compile`] return into `recorder`: once per distinct entry and source, with its hits
    /// counted (see [`crate::record`]). The global cache does this when
    /// `KILN_RECORD` names a file.
    ///
    /// # Errors
    /// Gives `recorder` back if the cache records already (a cache has at
    /// most one recorder, set once).
    pub fn record_into(&self, recorder: Arc<Recorder>) -> Result<(), Arc<Recorder>> {
        self.recorder.set(recorder)
    }

    /// The recorder set with [`Cache::record_into`], if any.
    pub fn recorder(&self) -> Option<&Arc<Recorder>> {
        self.recorder.get()
    }

    /// Notes a hit found in memory or an image (by a lookup, or by
    /// `get_or_compile` after waiting for a compile); returns it.
    #[inline]
    pub(super) fn note_found<'c>(&self, hit: Hit<'c>) -> Hit<'c> {
        if let Some(recorder) = self.recorder.get() {
            recorder.found(&hit);
        }
        hit
    }

    /// Notes an entry compiled or loaded from a tier, before it is recorded
    /// in memory (so that no other thread's hit on it comes first).
    #[inline]
    pub(super) fn note_acquired(&self, owner: &Owner, key: &Key, name: &str, how: Acquired<'_>) {
        if let Some(recorder) = self.recorder.get() {
            recorder.acquired(owner, key, name, how);
        }
    }
}
