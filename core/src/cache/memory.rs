//! The memory caps: what the cache's in-memory entries hold, and eviction.
//!
//! # What is counted
//!
//! The payload bytes of every resident in-memory entry: owned ones
//! (compiled in this process, or fetched from a tier that hands over bytes,
//! such as the remote tier) and those borrowed from a tier's mapped image
//! (the disk tier's segments: once used, their pages are resident too, and
//! the entry keeps its segment mapped); and the number of resident entries,
//! since each costs its metadata (owner, key, name, worlds, deps, its index
//! node and its places in the resident lists: about 1 KiB) whatever its
//! payload weighs. Entries of merged images (layers) are not counted and
//! never evicted: they are borrowed from the embedded or mapped image,
//! whose pages the kernel reclaims as it likes.
//!
//! # Eviction
//!
//! After an entry is recorded, while the resident bytes exceed
//! [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)
//! or the resident entries exceed
//! [`CacheConfig::memory_max_entries`](crate::CacheConfig::memory_max_entries),
//! an entry is evicted: one closed by a redefinition if any (it can serve
//! only lookups in older worlds), else the least recently used. Eviction
//! takes the entry out of the index and the resident lists: the cache lets
//! go of it, and its memory, metadata and payloads, is freed when the last
//! hit, queued store or delta holding it drops. Recency is a cache-wide
//! clock that counts records; a hit stores the clock into its instance only
//! when it changed, so a hot entry costs one load per hit. The victim is
//! the oldest of 16 resident entries drawn at random (all of them when
//! there are at most 16: exact LRU), as Redis does: no list to maintain on
//! the hit path.
//!
//! Never evicted:
//!
//! - the entry just recorded (a single entry larger than the cap is held
//!   until the next record);
//! - entries recorded after a live [`Snapshot`](crate::Snapshot) was taken
//!   (a snapshot pins them until it is dropped), so a [`Delta`](crate::Delta)
//!   never misses an entry. [`Precompile`](crate::build::Precompile) runs its
//!   block with no byte cap.
//!
//! An evicted entry asked for again misses in memory and goes down the
//! tiers: a disk-tier hit is borrowed from the segment, a remote hit is
//! fetched again, anything else is compiled again. It is then recorded as a
//! new entry.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::config::CacheConfig;
use super::instance::{Instance, NOT_RESIDENT};
use super::stats::bump;
use super::store::MemoryStore;
use crate::Digest;

/// How many resident entries an eviction compares.
const SAMPLE: usize = 16;

/// A snapshot's hold on the entries recorded after it.
#[derive(Debug)]
pub(crate) struct Pin {
    pub(crate) seq: usize,
}

/// An owner's resident entries, and its label (shared by its entries).
struct OwnerResident {
    label: Arc<str>,
    entries: Vec<Arc<Instance>>,
}

/// What only writers touch: the resident entries and the live pins.
pub(crate) struct Residency {
    /// The resident entries (order irrelevant; each instance knows its
    /// position, `Instance::resident_at`).
    resident: Vec<Arc<Instance>>,
    /// The same, per owner (`Instance::owner_at`), for merges.
    owners: HashMap<Digest, OwnerResident>,
    /// Resident entries closed by a redefinition: evicted before any other.
    closed: Vec<Weak<Instance>>,
    /// The pins of snapshots taken (dead ones pruned on use).
    pins: Vec<Weak<Pin>>,
    /// xorshift64 state for sampling.
    rng: u64,
}

impl Default for Residency {
    fn default() -> Residency {
        Residency {
            resident: Vec::new(),
            owners: HashMap::new(),
            closed: Vec::new(),
            pins: Vec::new(),
            rng: 0x9E37_79B9_7F4A_7C15,
        }
    }
}

impl Residency {
    fn next(&mut self) -> u64 {
        let mut x = self.rng;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.rng = x;
        x
    }

    /// Registers a pin for the entries from `seq` on.
    pub(crate) fn pin(&mut self, seq: usize) -> Arc<Pin> {
        let pin = Arc::new(Pin { seq });
        self.pins.retain(|weak| weak.strong_count() > 0);
        self.pins.push(Arc::downgrade(&pin));
        pin
    }

    /// The lowest sequence number a live snapshot pins (`usize::MAX`: none).
    pub(crate) fn pinned_from(&mut self) -> usize {
        let mut lowest = usize::MAX;
        self.pins.retain(|weak| match weak.upgrade() {
            Some(pin) => {
                lowest = lowest.min(pin.seq);
                true
            }
            None => false,
        });
        lowest
    }

    /// Number of resident entries.
    pub(crate) fn len(&self) -> usize {
        self.resident.len()
    }

    /// The label `owner`'s entries share (`label` if it has none resident).
    pub(crate) fn label(&self, owner: &Digest, label: &str) -> Arc<str> {
        self.owners
            .get(owner)
            .map_or_else(|| Arc::from(label), |o| Arc::clone(&o.label))
    }

    /// The resident entries of `owner`.
    pub(crate) fn of_owner(&self, owner: &Digest) -> &[Arc<Instance>] {
        self.owners.get(owner).map_or(&[], |o| &o.entries)
    }

    /// Notes that `instance`, resident, was closed: it goes first.
    pub(crate) fn closed(&mut self, instance: &Arc<Instance>) {
        if instance.is_resident() {
            self.closed.push(Arc::downgrade(instance));
        }
    }

    fn add(&mut self, instance: &Arc<Instance>) {
        instance
            .resident_at
            .store(self.resident.len(), Ordering::Relaxed);
        self.resident.push(Arc::clone(instance));
        let owner = self
            .owners
            .entry(instance.owner)
            .or_insert_with(|| OwnerResident {
                label: Arc::clone(&instance.owner_label),
                entries: Vec::new(),
            });
        instance
            .owner_at
            .store(owner.entries.len(), Ordering::Relaxed);
        owner.entries.push(Arc::clone(instance));
    }

    /// Takes the entry at `at` out of the lists; returns it.
    fn remove(&mut self, at: usize) -> Option<Arc<Instance>> {
        if at >= self.resident.len() {
            return None;
        }
        let instance = self.resident.swap_remove(at);
        instance.resident_at.store(NOT_RESIDENT, Ordering::Relaxed);
        if let Some(moved) = self.resident.get(at) {
            moved.resident_at.store(at, Ordering::Relaxed);
        }
        let owner_at = instance.owner_at.swap(NOT_RESIDENT, Ordering::Relaxed);
        if let Some(owner) = self.owners.get_mut(&instance.owner)
            && owner_at < owner.entries.len()
        {
            owner.entries.swap_remove(owner_at);
            if let Some(moved) = owner.entries.get(owner_at) {
                moved.owner_at.store(owner_at, Ordering::Relaxed);
            }
            if owner.entries.is_empty() {
                self.owners.remove(&instance.owner);
            }
        }
        Some(instance)
    }
}

/// Cache-wide memory figures (atomics: `stats` reads them without a lock).
#[derive(Default)]
pub(crate) struct MemoryCounters {
    /// Payload bytes of the resident entries.
    pub(crate) held: AtomicU64,
    /// The highest `held` seen.
    pub(crate) peak: AtomicU64,
    /// Entries evicted.
    pub(crate) evictions: AtomicU64,
    /// Resident entries (mirrors `Residency::len`).
    pub(crate) resident: AtomicU64,
    /// Records so far: the LRU clock.
    pub(crate) clock: AtomicU64,
    /// Instances allocated (resident, or held by a hit, a queued store, a
    /// delta or an old index table); shared with each instance, which
    /// decrements it when dropped.
    pub(crate) alive: Arc<AtomicU64>,
}

impl MemoryCounters {
    /// The clock a hit stores into its instance.
    pub(crate) fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }

    /// Makes `instance` (just recorded, indexed) resident with its payloads
    /// counted, then evicts down to the caps of `config`, taking victims
    /// out of the index `store`, sparing `instance` and the entries
    /// recorded from `pinned_from` on. Writer lock held (`residency` is the
    /// writer state's).
    pub(crate) fn admit(
        &self,
        config: &CacheConfig,
        store: &MemoryStore,
        residency: &mut Residency,
        instance: &Arc<Instance>,
        pinned_from: usize,
    ) {
        let memory = self;
        let tick = memory.clock.fetch_add(1, Ordering::Relaxed) + 1;
        instance.touch(tick);
        residency.add(instance);
        memory
            .resident
            .store(residency.len() as u64, Ordering::Relaxed);
        let bytes = instance.body.bytes;
        let held = memory.held.fetch_add(bytes, Ordering::Relaxed) + bytes;
        memory.peak.fetch_max(held, Ordering::Relaxed);
        let keep = instance.seq;
        self.evict_over_cap(config, store, residency, &|seq| {
            seq != keep && seq < pinned_from
        });
    }

    /// Whether the resident entries exceed a cap.
    fn over_cap(&self, config: &CacheConfig, residency: &Residency) -> bool {
        let bytes = config
            .memory_max_bytes
            .is_some_and(|cap| self.held.load(Ordering::Relaxed) > cap);
        let count = config
            .memory_max_entries
            .is_some_and(|cap| residency.len() as u64 > cap);
        bytes || count
    }

    /// Evicts closed entries first, then least recently used ones, while
    /// the resident entries exceed a cap, sparing those `evictable` refuses
    /// (by sequence number). Writer lock held.
    fn evict_over_cap(
        &self,
        config: &CacheConfig,
        store: &MemoryStore,
        residency: &mut Residency,
        evictable: &dyn Fn(usize) -> bool,
    ) {
        while self.over_cap(config, residency) {
            let Some(at) = Self::closed_victim(residency, evictable)
                .or_else(|| Self::pick_victim(residency, evictable))
            else {
                return; // everything left is pinned
            };
            self.evict(store, residency, at);
        }
    }

    /// The position of a closed, resident, evictable entry, if any.
    fn closed_victim(
        residency: &mut Residency,
        evictable: &dyn Fn(usize) -> bool,
    ) -> Option<usize> {
        let mut kept = Vec::new();
        let mut found = None;
        while let Some(weak) = residency.closed.pop() {
            let Some(instance) = weak.upgrade() else {
                continue;
            };
            if !instance.is_resident() {
                continue;
            }
            if evictable(instance.seq) {
                found = Some(instance.resident_at.load(Ordering::Relaxed));
                break;
            }
            kept.push(weak);
        }
        residency.closed.extend(kept);
        found
    }

    /// The position of the least recently used evictable entry of a
    /// sample (of all resident entries when there are few, or when the
    /// sample held none).
    fn pick_victim(residency: &mut Residency, evictable: &dyn Fn(usize) -> bool) -> Option<usize> {
        let count = residency.resident.len();
        let oldest = |residency: &Residency, candidates: &mut dyn Iterator<Item = usize>| {
            candidates
                .filter(|&at| evictable(residency.resident[at].seq))
                .min_by_key(|&at| residency.resident[at].last_used.load(Ordering::Relaxed))
        };
        if count > SAMPLE {
            let picks: Vec<usize> = (0..SAMPLE)
                .map(|_| (residency.next() % count as u64) as usize)
                .collect();
            if let Some(victim) = oldest(residency, &mut picks.into_iter()) {
                return Some(victim);
            }
        }
        oldest(residency, &mut (0..count))
    }

    /// Takes the resident entry at position `at` out of the lists and the
    /// index: the cache lets go of it (its memory is freed once no hit,
    /// queued store or delta holds it). Writer lock held.
    fn evict(&self, store: &MemoryStore, residency: &mut Residency, at: usize) {
        let Some(instance) = residency.remove(at) else {
            return;
        };
        store.remove(&instance);
        self.resident
            .store(residency.len() as u64, Ordering::Relaxed);
        self.held.fetch_sub(instance.body.bytes, Ordering::Relaxed);
        bump(&self.evictions);
    }
}
