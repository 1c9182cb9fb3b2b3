//! The memory cap: what the cache's in-memory entries hold, and eviction.
//!
//! # What is counted
//!
//! The payload bytes of every resident in-memory entry: owned ones
//! (compiled in this process, or fetched from a tier that hands over bytes,
//! such as the remote tier) and those borrowed from a tier's mapped image
//! (the disk tier's segments: once used, their pages are resident too, and
//! the entry keeps its segment mapped). Entries of merged images (layers)
//! are not counted and never evicted: they are borrowed from the embedded
//! or mapped image, whose pages the kernel reclaims as it likes. Metadata
//! (owner, key, name, worlds, deps: about 200 bytes per entry ever
//! recorded, plus its index cell) stays for the cache's life, so that the
//! arena and its lock-free index never remove anything.
//!
//! # Eviction
//!
//! After an entry is recorded, while the resident bytes exceed
//! [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes),
//! the least recently used resident entry is evicted: its [`Body`] (the
//! payloads) is taken out of the instance, which stays in the arena as a
//! tombstone with its metadata. Recency is a cache-wide clock that counts
//! records; a hit stores the clock into its instance only when it changed,
//! so a hot entry costs one load per hit. The victim is the oldest of 16
//! resident entries drawn at random (all of them when there are at most
//! 16: exact LRU), as Redis does: no list to maintain on the hit path.
//!
//! Never evicted:
//!
//! - the entry just recorded (a single entry larger than the cap is held
//!   until the next record);
//! - entries recorded after a live [`Snapshot`](crate::Snapshot) was taken
//!   (a snapshot pins them until it is dropped), so a [`Delta`](crate::Delta)
//!   never misses an entry. [`Precompile`](crate::build::Precompile) runs its
//!   block with no cap at all.
//!
//! A hit holds its own `Arc` of the body, so eviction never frees bytes a
//! hit borrows: they are freed when the last hit (or queued store) drops.
//!
//! An evicted entry asked for again misses in memory and goes down the
//! tiers: a disk-tier hit is borrowed from the segment, a remote hit is
//! fetched again, anything else is compiled again. It is then recorded in
//! its old instance (same metadata; the arena does not grow) when that one
//! is still valid, otherwise as a new instance.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use super::Cache;
use super::instance::{Body, Instance, NOT_RESIDENT};
use super::stats::bump;

/// How many resident entries an eviction compares.
const SAMPLE: usize = 16;

/// A snapshot's hold on the entries recorded after it.
#[derive(Debug)]
pub(crate) struct Pin {
    pub(crate) seq: usize,
}

/// What only writers touch: the resident entries and the live pins.
pub(crate) struct Residency {
    /// Arena indices of the resident entries (order irrelevant; each
    /// instance knows its position, `Instance::resident_at`).
    resident: Vec<usize>,
    /// The pins of snapshots taken (dead ones pruned on eviction).
    pins: Vec<Weak<Pin>>,
    /// xorshift64 state for sampling.
    rng: u64,
}

impl Default for Residency {
    fn default() -> Residency {
        Residency {
            resident: Vec::new(),
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

    /// The lowest arena index a live snapshot pins (`usize::MAX`: none).
    fn pinned_from(&mut self) -> usize {
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
}

impl MemoryCounters {
    /// The clock a hit stores into its instance.
    pub(crate) fn now(&self) -> u64 {
        self.clock.load(Ordering::Relaxed)
    }
}

impl Cache {
    /// Makes `instance` (at arena index `index`) resident with `body`
    /// counted, then evicts down to the cap, sparing `index`. Writer lock
    /// held (`residency` is the writer state's).
    pub(crate) fn admit(
        &self,
        residency: &mut Residency,
        index: usize,
        instance: &Instance,
        body: &Body,
    ) {
        let memory = &self.memory;
        let tick = memory.clock.fetch_add(1, Ordering::Relaxed) + 1;
        instance.touch(tick);
        if instance.resident_at.load(Ordering::Relaxed) == NOT_RESIDENT {
            instance
                .resident_at
                .store(residency.resident.len(), Ordering::Relaxed);
            residency.resident.push(index);
            memory
                .resident
                .store(residency.len() as u64, Ordering::Relaxed);
        }
        let held = memory.held.fetch_add(body.bytes, Ordering::Relaxed) + body.bytes;
        memory.peak.fetch_max(held, Ordering::Relaxed);
        self.evict_over_cap(residency, index);
    }

    /// Evicts least recently used entries while the resident bytes exceed
    /// the cap, sparing `keep` and pinned entries. Writer lock held.
    fn evict_over_cap(&self, residency: &mut Residency, keep: usize) {
        let Some(cap) = self.config.memory_max_bytes else {
            return;
        };
        if self.memory.held.load(Ordering::Relaxed) <= cap {
            return;
        }
        let pinned_from = residency.pinned_from();
        let evictable = |index: usize| index != keep && index < pinned_from;
        while self.memory.held.load(Ordering::Relaxed) > cap {
            let Some(victim) = self.pick_victim(residency, &evictable) else {
                return; // everything left is pinned
            };
            self.evict(residency, victim);
        }
    }

    /// The least recently used evictable entry of a sample (of all
    /// resident entries when there are few, or when the sample held none).
    fn pick_victim(
        &self,
        residency: &mut Residency,
        evictable: &impl Fn(usize) -> bool,
    ) -> Option<usize> {
        let age = |index: usize| {
            self.store
                .get(index)
                .map_or(0, |i| i.last_used.load(Ordering::Relaxed))
        };
        let oldest = |candidates: &mut dyn Iterator<Item = usize>| {
            candidates
                .filter(|&index| evictable(index))
                .min_by_key(|&index| age(index))
        };
        let count = residency.resident.len();
        if count > SAMPLE {
            let picks: Vec<usize> = (0..SAMPLE)
                .map(|_| {
                    let at = (residency.next() % count as u64) as usize;
                    residency.resident[at]
                })
                .collect();
            if let Some(victim) = oldest(&mut picks.into_iter()) {
                return Some(victim);
            }
        }
        oldest(&mut residency.resident.iter().copied())
    }

    /// Drops the body of the instance at `index` and removes it from the
    /// resident list. Writer lock held.
    fn evict(&self, residency: &mut Residency, index: usize) {
        let Some(instance) = self.store.get(index) else {
            return;
        };
        let at = instance.resident_at.swap(NOT_RESIDENT, Ordering::Relaxed);
        if at < residency.resident.len() {
            residency.resident.swap_remove(at);
            if let Some(&moved) = residency.resident.get(at)
                && let Some(moved) = self.store.get(moved)
            {
                moved.resident_at.store(at, Ordering::Relaxed);
            }
        }
        self.memory
            .resident
            .store(residency.len() as u64, Ordering::Relaxed);
        if let Some(body) = instance.set_body(None) {
            self.memory.held.fetch_sub(body.bytes, Ordering::Relaxed);
            bump(&self.memory.evictions);
        }
    }
}
