//! Lookups and inserts.

use std::sync::Arc;

use super::definitions::deps_match;
use super::hit::Hit;
use super::instance::{Artifacts, Body, Compiled, Instance, InstanceParts, Origin};
use super::layers::LayerLookup;
use super::stats::bump;
use super::{Cache, Source, WriterState};
use crate::{Digest, Key, Owner, World};

impl Cache {
    /// The entry of `(owner, key)` valid in the current world: memory first,
    /// then images in merge order. Never returns a closed, stale, duplicate,
    /// foreign or excluded entry, nor one whose record is corrupt. An image
    /// entry's payloads are not read here: each is checked when the hit's
    /// caller accesses it, and one that fails is never returned (see [`Hit`]).
    /// Extra tiers are not consulted (see [`Cache::get_or_compile`]). With an
    /// observer set ([`Cache::observe`]), it is told of a hit.
    ///
    /// With [`CacheConfig::always_compile`](crate::CacheConfig::always_compile)
    /// nothing is served from the cache: every lookup misses, as
    /// `get_or_compile` skips its lookups and compiles.
    pub fn lookup(&self, owner: &Digest, key: &Key) -> Option<Hit<'_>> {
        self.lookup_in(self.world(), owner, key)
    }

    /// The entry of `(owner, key)` that was valid in `world` (among those
    /// the cache still holds: see
    /// [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)).
    /// Misses under
    /// [`CacheConfig::always_compile`](crate::CacheConfig::always_compile).
    pub fn lookup_in(&self, world: World, owner: &Digest, key: &Key) -> Option<Hit<'_>> {
        let counters = self.lookups.mine();
        if self.config.always_compile {
            bump(&counters.misses);
            return None;
        }
        let found = self.find(world.0, owner, key);
        match &found {
            Some(hit) if hit.source() == Source::Image => bump(&counters.hits_image),
            Some(_) => bump(&counters.hits_memory),
            None => bump(&counters.misses),
        }
        found.map(|hit| self.note_found(hit))
    }

    /// Like `lookup_in`, without counting. An evicted in-memory entry is
    /// not found (the tiers or a compile bring it back).
    pub(crate) fn find(&self, world: u64, owner: &Digest, key: &Key) -> Option<Hit<'_>> {
        // Fast path: the indexes (instances, and image entries hit before).
        if let Some(instance) = self.find_memory(world, owner, key) {
            instance.touch(self.memory.now());
            return Some(Hit::memory(instance));
        }
        for (layer, entry) in self.promoted.targets(owner, key) {
            if let Some(l) = self.layers.get(layer)
                && let Some(e) = l.promoted(entry, owner, key, world)
            {
                return Some(Hit::image(l, e));
            }
        }
        // Slow path: search every layer in merge order.
        for (at, layer) in self.layers.iter() {
            match layer.lookup(owner, key, world) {
                LayerLookup::Valid(entry) => {
                    self.try_promote(owner, key, at, entry.index());
                    return Some(Hit::image(layer, entry));
                }
                LayerLookup::Absent => {}
                LayerLookup::Corrupt => bump(&self.counters.corrupt),
            }
        }
        None
    }

    /// The newest in-memory instance of `(owner, key)` valid in `world`.
    pub(crate) fn find_memory(
        &self,
        world: u64,
        owner: &Digest,
        key: &Key,
    ) -> Option<Arc<Instance>> {
        self.store.probe(
            owner,
            key,
            || None,
            |newest: &mut Option<Arc<Instance>>, instance| {
                // The newest valid one wins.
                if instance.is_valid_in(world)
                    && newest.as_ref().is_none_or(|n| n.seq < instance.seq)
                {
                    *newest = Some(Arc::clone(instance));
                }
            },
        )
    }

    /// Indexes an image entry that was just hit, if the writer lock is free
    /// (never waits: a lookup must not block on a merge or an insert).
    fn try_promote(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) {
        let Ok(_writer) = self.writer.try_lock() else {
            return;
        };
        if !self.promoted.contains(owner, key, layer, entry) {
            self.promoted.insert(owner, key, layer, entry);
        }
    }

    /// Records a compiled entry for `(owner, key)`, valid from the current
    /// world on, and returns it.
    ///
    /// The first valid entry wins: if one is already valid (in memory or in an
    /// image), that one is returned and `compiled` is dropped (counted in
    /// [`Stats::duplicate_inserts`](crate::Stats::duplicate_inserts)). If a dep
    /// of `compiled` names a definition whose current fingerprint differs
    /// (the definition changed while it compiled), the entry is recorded
    /// already closed and the returned hit is not valid in the current world.
    pub fn insert(&self, owner: &Owner, key: &Key, compiled: Compiled) -> Hit<'_> {
        self.record(
            owner,
            key,
            compiled,
            Origin::Compiled,
            !self.config.always_compile,
        )
    }

    /// Records an entry (see [`Cache::insert`]); `dedupe == false` records it
    /// even if a valid entry exists (`always_compile`).
    pub(crate) fn record(
        &self,
        owner: &Owner,
        key: &Key,
        compiled: Compiled,
        origin: Origin,
        dedupe: bool,
    ) -> Hit<'_> {
        let Compiled {
            name,
            deps,
            artifacts,
            session_dependent,
        } = compiled;
        let parts = Parts {
            name,
            deps,
            artifacts: Artifacts::owned(artifacts),
            session_dependent,
        };
        self.record_parts(owner, key, parts, origin, dedupe)
    }

    /// Records an entry from its parts (see [`Cache::insert`]): indexed,
    /// resident, in the insertion log while a snapshot is live, and known to
    /// the definitions it depends on; then evicts down to the caps.
    pub(crate) fn record_parts(
        &self,
        owner: &Owner,
        key: &Key,
        parts: Parts,
        origin: Origin,
        dedupe: bool,
    ) -> Hit<'_> {
        let mut writer = self.writer();
        let now = self.world().0;
        let owner_digest = owner.digest();
        if dedupe && let Some(existing) = self.find(now, &owner_digest, key) {
            bump(&self.counters.duplicate_inserts);
            return existing;
        }
        let WriterState {
            definitions,
            backedges,
            residency,
            log,
        } = &mut *writer;
        let stale = !deps_match(definitions, &parts.deps);
        let Parts {
            name,
            deps,
            artifacts,
            session_dependent,
        } = parts;
        let instance = Arc::new(Instance::new(
            InstanceParts {
                owner: owner_digest,
                owner_label: residency.label(&owner_digest, owner.label()),
                key: *key,
                name,
                seq: log.next_seq(),
                min_world: now,
                // Built against an old definition: recorded, but never valid.
                max_world: if stale { now - 1 } else { u64::MAX },
                deps,
                session_dependent,
                body: Body::new(artifacts, origin),
            },
            &self.memory.alive,
        ));
        self.store.insert(&instance);
        backedges.add(&instance);
        let pinned_from = residency.pinned_from();
        log.record(&instance, pinned_from);
        self.memory
            .admit(&self.config, &self.store, residency, &instance, pinned_from);
        bump(&self.counters.inserts);
        Hit::memory(instance)
    }
}

/// What an in-memory entry is recorded from.
pub(crate) struct Parts {
    pub(crate) name: String,
    pub(crate) deps: Vec<crate::Dep>,
    pub(crate) artifacts: Artifacts,
    pub(crate) session_dependent: bool,
}

#[cfg(test)]
mod tests {
    use kiln_image::{EntryData, Image, ImageMeta, ImageWriter, Verification};

    use crate::{Artifact, ArtifactKind, Cache, KeyBuilder, Owner, World};

    #[test]
    fn an_image_entry_hit_once_is_found_through_the_index() {
        let owner = Owner::new("test", "1", "cpu", ["-O2"]).expect("owner");
        let keys: Vec<_> = (0..3000u64)
            .map(|n| KeyBuilder::new("promote", 1).u64("n", n).finish())
            .collect();
        let mut writer = ImageWriter::new(ImageMeta::new("test", "1"));
        for (n, key) in keys.iter().enumerate() {
            writer.push(EntryData {
                owner: owner.digest(),
                owner_label: owner.label().to_owned(),
                key: *key.digest(),
                name: format!("f{n}"),
                min_world: World::FIRST.0,
                max_world: World::MAX.0,
                deps: Vec::new(),
                artifacts: vec![Artifact {
                    kind: ArtifactKind::Ptx,
                    entry_points: Vec::new(),
                    bytes: vec![1, 2, 3],
                }],
            });
        }
        let bytes = writer.to_bytes().expect("image");
        let cache = Cache::new();
        cache.merge_image(Image::from_bytes(&bytes, Verification::Full).expect("image"));
        for key in &keys {
            assert!(cache.lookup(&owner.digest(), key).is_some());
        }
        for (n, key) in keys.iter().enumerate() {
            let index = cache
                .layers
                .get(0)
                .and_then(|l| l.image.find(&owner.digest(), key.digest()).ok().flatten())
                .map(|e| e.index())
                .expect("in the image");
            assert!(
                cache.promoted.contains(&owner.digest(), key, 0, index),
                "entry {n} promoted"
            );
        }
    }
}
