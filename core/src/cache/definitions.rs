//! Definitions, backedges and invalidation.
//!
//! An entry records, as [`Dep`]s, the definitions it was built from and their
//! fingerprints. The cache knows the current fingerprint of each defined name.
//! Changing one bumps the world and closes every entry built against another
//! fingerprint: in memory through the backedge map (name -> entries), in
//! image layers through the image's dep index and the layer's state words.
//!
//! The backedge map is `Backedges` (`backedges.rs`).

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use super::Cache;
use super::image_deps;
use super::stats::add;
use crate::{Dep, Digest, World};

/// Whether every dep matches the known definitions (unknown names match).
pub(crate) fn deps_match(definitions: &HashMap<String, Digest>, deps: &[Dep]) -> bool {
    deps.iter().all(|d| {
        definitions
            .get(&d.name)
            .is_none_or(|fp| *fp == d.fingerprint)
    })
}

impl Cache {
    /// Declares that definition `name` is at `fingerprint` in this process.
    ///
    /// Call it at startup, before images are merged, for every definition
    /// entries may depend on: a merge then skips image entries built against
    /// another fingerprint (they are stale). Declaring a name later, or
    /// declaring it again with another fingerprint, does what
    /// [`Cache::redefine`] does. Returns the current world.
    pub fn define(&self, name: &str, fingerprint: Digest) -> World {
        self.set_definition(name, fingerprint)
    }

    /// Changes definition `name` to `fingerprint`: bumps the world and closes
    /// every entry (in memory or image-backed) built against another
    /// fingerprint of `name`, so that no lookup in the new world returns it;
    /// [`Cache::lookup_in`] an older world still sees it. Returns the new
    /// world. If nothing changes (same fingerprint, or a new name no entry
    /// disagrees with), the world is not bumped.
    pub fn redefine(&self, name: &str, fingerprint: Digest) -> World {
        self.set_definition(name, fingerprint)
    }

    /// The fingerprint `name` is defined at, if declared.
    pub fn definition(&self, name: &str) -> Option<Digest> {
        self.writer().definitions.get(name).copied()
    }

    fn set_definition(&self, name: &str, fingerprint: Digest) -> World {
        let mut writer = self.writer();
        let now = self.world().0;
        let previous = writer.definitions.insert(name.to_owned(), fingerprint);
        if previous == Some(fingerprint) {
            return World(now);
        }
        // Close first, publish the new world second: a reader that still sees
        // the old world may still use the entry (it was valid then), a reader
        // that sees the new world finds it closed.
        let mut closed = 0u64;
        let super::WriterState {
            backedges,
            residency,
            ..
        } = &mut *writer;
        for instance in backedges.dependents(name) {
            if instance.dep_fingerprint(name) != Some(fingerprint) && instance.close(now) {
                // Closed entries are the first to go when over a cap.
                residency.closed(&instance);
                closed += 1;
            }
        }
        for (_, layer) in self.layers.iter() {
            match image_deps::dependents_not_at(&layer.image, name, &fingerprint) {
                Ok(dependents) => {
                    for index in dependents {
                        if layer.close(index, now) {
                            closed += 1;
                        }
                    }
                }
                // The dependency index is checked on first use (at merge if
                // definitions were known then, else here). If it is corrupt,
                // the layer's dependents cannot be found: stop serving it all.
                Err(error) => {
                    tracing::warn!(error = %crate::ErrorChain(&error), "image dependency index unusable; image no longer served");
                    for index in 0..layer.image.len() {
                        if layer.close(index, now) {
                            closed += 1;
                        }
                    }
                }
            }
        }
        if closed == 0 && previous.is_none() {
            return World(now);
        }
        add(&self.counters.invalidated, closed);
        let next = now + 1;
        self.world.store(next, Ordering::Release);
        drop(writer);
        tracing::debug!(name, world = next, closed, "definition changed");
        World(next)
    }
}
