//! Lookups and inserts.

use std::sync::Arc;

use super::definitions::deps_match;
use super::hit::Hit;
use super::instance::{Artifacts, Body, Compiled, Instance, Origin};
use super::layers::LayerLookup;
use super::stats::bump;
use super::store::Target;
use super::{Cache, OwnerEntries, Source, WriterState};
use crate::{Digest, Key, Owner, World};

impl Cache {
    /// The entry of `(owner, key)` valid in the current world: memory first,
    /// then images in merge order. Never returns a closed, stale, duplicate,
    /// foreign or excluded entry, nor one whose record is corrupt. An image
    /// entry's payloads are not read here: each is checked when the hit's
    /// caller accesses it, and one that fails is never returned (see [`Hit`]).
    /// Extra tiers are not consulted (see [`Cache::get_or_compile`]). With a
    /// recorder set ([`Cache::record_into`]), a hit is noted there.
    pub fn lookup(&self, owner: &Digest, key: &Key) -> Option<Hit<'_>> {
        self.lookup_in(self.world(), owner, key)
    }

    /// The entry of `(owner, key)` that was valid in `world`.
    pub fn lookup_in(&self, world: World, owner: &Digest, key: &Key) -> Option<Hit<'_>> {
        let found = self.find(world.0, owner, key);
        let counters = self.lookups.mine();
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
        // Fast path: the index (instances, and image entries hit before).
        let mut memory = None;
        let mut image = None;
        for target in self.store.targets(owner, key) {
            match target {
                Target::Memory(index) => {
                    if let Some(instance) = self.store.get(index)
                        && instance.is_valid_in(world)
                        && let Some(body) = instance.body()
                    {
                        memory = Some((index, instance, body)); // the newest valid one wins
                    }
                }
                Target::Image { layer, entry } => {
                    if image.is_none()
                        && let Some(l) = self.layers.get(layer)
                        && let Some(e) = l.promoted(entry, owner, key, world)
                    {
                        image = Some(Hit::image(l, e));
                    }
                }
            }
        }
        if let Some((index, instance, body)) = memory {
            instance.touch(self.memory.now());
            return Some(Hit::memory(index, instance, body));
        }
        if image.is_some() {
            return image;
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

    /// Indexes an image entry that was just hit, if the writer lock is free
    /// (never waits: a lookup must not block on a merge or an insert).
    fn try_promote(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) {
        let Ok(_writer) = self.writer.try_lock() else {
            return;
        };
        let target = Target::Image { layer, entry };
        if !self.store.targets(owner, key).any(|t| t == target) {
            self.store.promote(owner, key, target);
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

    /// Records an entry from its parts (see [`Cache::insert`]).
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
        let stale = !deps_match(&writer.definitions, &parts.deps);
        let Parts {
            name,
            deps,
            artifacts,
            session_dependent,
        } = parts;
        let body = Arc::new(Body::new(artifacts, origin));
        // An evicted entry recorded again goes back into its old instance
        // (same identity and metadata, still valid): the arena does not grow.
        if dedupe
            && !stale
            && let Some((index, instance)) =
                self.evicted_twin(now, &owner_digest, key, &name, &deps, session_dependent)
        {
            instance.set_body(Some(Arc::clone(&body)));
            self.admit(&mut writer.residency, index, instance, &body);
            bump(&self.counters.inserts);
            return Hit::memory(index, instance, body);
        }
        let WriterState {
            backedges,
            by_owner,
            residency,
            ..
        } = &mut *writer;
        let owner_entries = by_owner
            .entry(owner_digest)
            .or_insert_with(|| OwnerEntries {
                label: Arc::from(owner.label()),
                entries: Vec::new(),
            });
        let (index, instance) = self.store.push(Instance::new(
            owner_digest,
            Arc::clone(&owner_entries.label),
            *key,
            name,
            now,
            // Built against an old definition: recorded, but never valid.
            if stale { now - 1 } else { u64::MAX },
            deps,
            session_dependent,
            Arc::clone(&body),
        ));
        owner_entries.entries.push(index);
        for dep in &instance.deps {
            backedges.entry(dep.name.clone()).or_default().push(index);
        }
        self.admit(residency, index, instance, &body);
        bump(&self.counters.inserts);
        Hit::memory(index, instance, body)
    }

    /// An evicted, still valid and unbounded instance of `(owner, key)` with
    /// exactly this metadata, and its arena index.
    fn evicted_twin(
        &self,
        now: u64,
        owner: &Digest,
        key: &Key,
        name: &str,
        deps: &[crate::Dep],
        session_dependent: bool,
    ) -> Option<(usize, &Instance)> {
        self.store
            .targets(owner, key)
            .filter_map(|target| match target {
                Target::Memory(index) => Some((index, self.store.get(index)?)),
                Target::Image { .. } => None,
            })
            .filter(|(_, i)| {
                i.is_valid_in(now)
                    && i.is_unbounded()
                    && !i.is_resident()
                    && i.name == name
                    && i.deps == deps
                    && i.session_dependent == session_dependent
            })
            .last()
    }
}

/// What an in-memory entry is recorded from.
pub(crate) struct Parts {
    pub(crate) name: String,
    pub(crate) deps: Vec<crate::Dep>,
    pub(crate) artifacts: Artifacts,
    pub(crate) session_dependent: bool,
}
