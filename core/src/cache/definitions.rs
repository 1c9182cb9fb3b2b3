//! Definitions, backedges and invalidation.
//!
//! An entry records, as [`Dep`]s, the definitions it was built from and their
//! fingerprints. The cache knows the current fingerprint of each defined name.
//! Changing one bumps the world and closes every entry built against another
//! fingerprint: in memory through the backedge map (name -> entries), in
//! image layers through the image's dep index and the layer's state words.
//!
//! The backedge map holds weak references: an entry the cache has let go
//! of (evicted) is still closed while a hit, a queued store or a delta
//! holds it, and costs nothing once nobody does. Dead references are swept
//! out whenever the map has doubled since the last sweep, so the map holds
//! at most about twice the references of the entries alive (amortized
//! O(1) per record).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use super::Cache;
use super::image_deps;
use super::instance::Instance;
use super::stats::add;
use crate::{Dep, Digest, World};

/// The fewest references between two sweeps of [`Backedges`].
const SWEEP_MIN: usize = 64;

/// Definition name -> the entries alive that depend on it (writer lock only).
#[derive(Default)]
pub(crate) struct Backedges {
    by_name: HashMap<String, Vec<Weak<Instance>>>,
    /// References held (dead ones included).
    held: usize,
    /// References held after the last sweep.
    swept: usize,
}

impl Backedges {
    /// Notes that `instance` depends on each of its deps.
    pub(crate) fn add(&mut self, instance: &Arc<Instance>) {
        for dep in &instance.deps {
            self.by_name
                .entry(dep.name.clone())
                .or_default()
                .push(Arc::downgrade(instance));
            self.held += 1;
        }
        if self.held > 2 * self.swept.max(SWEEP_MIN) {
            self.sweep();
        }
    }

    /// Drops the references to entries gone, and names left without any.
    fn sweep(&mut self) {
        self.by_name.retain(|_, list| {
            list.retain(|weak| weak.strong_count() > 0);
            !list.is_empty()
        });
        self.held = self.by_name.values().map(Vec::len).sum();
        self.swept = self.held;
    }

    /// The entries alive that depend on `name`.
    fn dependents(&self, name: &str) -> impl Iterator<Item = Arc<Instance>> + '_ {
        self.by_name
            .get(name)
            .into_iter()
            .flatten()
            .filter_map(Weak::upgrade)
    }

    /// References held (dead ones included).
    #[cfg(test)]
    pub(crate) fn held(&self) -> usize {
        self.held
    }
}

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
                    tracing::warn!(%error, "image dependency index unusable; image no longer served");
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

#[cfg(test)]
mod tests {
    use crate::{Cache, CacheConfig, Compiled, Digest, KeyBuilder, Owner};

    #[test]
    fn backedges_of_entries_gone_are_swept() {
        let cache = Cache::with_config(
            CacheConfig::default()
                .memory_max_bytes(None)
                .memory_max_entries(Some(4)),
        );
        let owner = Owner::new("test", "1", "cpu", ["-O2"]).expect("owner");
        for n in 0..10_000u64 {
            let key = KeyBuilder::new("backedges", 1).u64("n", n).finish();
            let def = format!("def{}", n % 1000);
            cache.insert(&owner, &key, Compiled::new("f").dep(def, Digest::of(b"v1")));
        }
        let writer = cache.writer();
        // 4 entries alive: the map was swept each time it passed twice
        // the references left by the last sweep (at least 64).
        assert!(writer.backedges.held() <= 2 * super::SWEEP_MIN + 1);
        assert!(writer.backedges.by_name.len() <= writer.backedges.held());
    }
}
