//! Counters and the [`Stats`] snapshot of them.
//!
//! Lookup counters are striped by thread (each thread bumps the counters of
//! its own stripe, on their own cache line), so that lookups from different
//! threads never write to a shared line; [`Cache::stats`](crate::Cache::stats)
//! sums the stripes.
//!
//! A leaf of the cache's modules: the counters of other modules (memory,
//! the background writer) live with them and reach [`collect`] as plain
//! numbers, so that every module can use [`bump`] without an import circle.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::World;

/// One stripe of lookup counters, on its own cache lines.
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct LookupCounters {
    pub(crate) hits_memory: AtomicU64,
    pub(crate) hits_image: AtomicU64,
    pub(crate) misses: AtomicU64,
}

const STRIPES: usize = 64;

/// Lookup counters, one stripe per thread (modulo [`STRIPES`]).
pub(crate) struct LookupStripes(Box<[LookupCounters]>);

impl LookupStripes {
    pub(crate) fn new() -> LookupStripes {
        LookupStripes((0..STRIPES).map(|_| LookupCounters::default()).collect())
    }

    /// The calling thread's stripe.
    pub(crate) fn mine(&self) -> &LookupCounters {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        thread_local! {
            static STRIPE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % STRIPES;
        }
        &self.0[STRIPE.with(|stripe| *stripe)]
    }

    fn iter(&self) -> impl Iterator<Item = &LookupCounters> {
        self.0.iter()
    }
}

/// Cache-wide counters of the rarer events.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) hits_tier: AtomicU64,
    pub(crate) compiles: AtomicU64,
    pub(crate) compile_failures: AtomicU64,
    pub(crate) compile_waits: AtomicU64,
    pub(crate) compile_nanos: AtomicU64,
    /// Corrupt entry records found at lookup, and tier-backed entries closed
    /// because a payload failed its checksum: those count themselves, each
    /// holding a clone (see
    /// [`Artifacts::Image`](super::instance::Artifacts::Image)).
    pub(crate) corrupt: Arc<AtomicU64>,
    pub(crate) inserts: AtomicU64,
    pub(crate) duplicate_inserts: AtomicU64,
    pub(crate) invalidated: AtomicU64,
    pub(crate) images_merged: AtomicU64,
    pub(crate) merge_inserted: AtomicU64,
    pub(crate) merge_duplicate: AtomicU64,
    pub(crate) merge_stale: AtomicU64,
    pub(crate) merge_foreign_owner: AtomicU64,
    pub(crate) tier_untrusted: AtomicU64,
}

pub(crate) fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

pub(crate) fn add(counter: &AtomicU64, n: u64) {
    counter.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    pub(crate) fn record_compile(&self, elapsed: Duration, ok: bool) {
        bump(&self.compiles);
        if !ok {
            bump(&self.compile_failures);
        }
        add(
            &self.compile_nanos,
            u64::try_from(elapsed.as_nanos()).unwrap_or(u64::MAX),
        );
    }
}

/// A point-in-time copy of a cache's counters.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Stats {
    /// Lookups answered by an entry held in memory (compiled, inserted or
    /// loaded from a tier earlier).
    pub hits_memory: u64,
    /// Lookups answered by an image-backed entry.
    pub hits_image: u64,
    /// `get_or_compile` calls answered by an extra tier (after a miss).
    pub hits_tier: u64,
    /// Lookups that found nothing valid in memory or in images.
    pub misses: u64,
    /// Compiles run by `get_or_compile` (failed ones included).
    pub compiles: u64,
    /// Compiles that returned an error or panicked.
    pub compile_failures: u64,
    /// `get_or_compile` calls that waited for the compile of the same key
    /// already running in another thread instead of compiling (single flight).
    pub compile_waits: u64,
    /// Total time spent in compiles.
    pub compile_time: Duration,
    /// Image entries found corrupt: a payload that failed its checksum when a
    /// hit first accessed it (counted once per entry, which is excluded: that
    /// access returned `None` and later lookups miss), or an entry record that
    /// failed its check at lookup (a miss; counted per lookup). Entries a tier
    /// handed over from an image it keeps mapped (the disk tier) count the
    /// same way as merged images.
    pub corrupt: u64,
    /// Entries recorded in memory (compiled, inserted, loaded from a tier).
    pub inserts: u64,
    /// Inserts that found a valid entry already there (the first one wins).
    pub duplicate_inserts: u64,
    /// Entries closed by redefinitions (memory and image-backed).
    pub invalidated: u64,
    /// Images merged.
    pub images_merged: u64,
    /// Sum of [`MergeReport::inserted`](crate::MergeReport::inserted) over all merges.
    pub merge_inserted: u64,
    /// Sum of [`MergeReport::duplicate`](crate::MergeReport::duplicate) over all merges.
    pub merge_duplicate: u64,
    /// Sum of [`MergeReport::stale`](crate::MergeReport::stale) over all merges.
    pub merge_stale: u64,
    /// Sum of [`MergeReport::foreign_owner`](crate::MergeReport::foreign_owner) over all merges.
    pub merge_foreign_owner: u64,
    /// Tier entries refused because no trusted key signed them
    /// (`KILN_TRUSTED_KEYS` set; [`Error::TierUntrusted`](crate::Error::TierUntrusted)):
    /// each was a miss, then a compile.
    pub tier_untrusted: u64,
    /// Entries the cache holds in memory (resident: in its index, counted
    /// against its caps).
    pub memory_entries: u64,
    /// In-memory entries allocated now: the resident ones, plus evicted or
    /// closed ones that something still holds (a [`Hit`](crate::Hit), a
    /// queued store, a [`Delta`](crate::Delta), a lookup reading an index
    /// table the cache has just replaced). An evicted entry nothing holds is
    /// freed, metadata included, so this stays near
    /// [`Stats::memory_entries`] however many entries the cache has seen.
    pub entries_alive: u64,
    /// Payload bytes the in-memory entries hold now (owned, or borrowed
    /// from a tier's mapped segment): what the memory cap bounds.
    pub bytes_held: u64,
    /// The most [`Stats::bytes_held`] has been (it may pass the cap by the
    /// entry just recorded, before eviction).
    pub peak_bytes_held: u64,
    /// The memory cap in force ([`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)).
    pub memory_max_bytes: Option<u64>,
    /// The cap on entries held in force
    /// ([`CacheConfig::memory_max_entries`](crate::CacheConfig::memory_max_entries)).
    pub memory_max_entries: Option<u64>,
    /// Entries evicted to stay under the memory cap.
    pub evictions: u64,
    /// Tier stores queued for the background writer or running now.
    pub store_queue_depth: u64,
    /// Entries the background writer stored into a tier (one per tier).
    pub stores: u64,
    /// Stores a tier failed (an error or a panic; the entry stays in
    /// memory and is not persisted there).
    pub store_failures: u64,
    /// Stores dropped because the background writer's queue was full.
    pub stores_dropped: u64,
    /// The current world.
    pub world: World,
}

impl Stats {
    /// All hits: memory, image and tier.
    pub fn hits(&self) -> u64 {
        self.hits_memory + self.hits_image + self.hits_tier
    }
}

impl std::fmt::Display for Stats {
    /// One line for operators: hits by tier, compiles, memory held against
    /// the cap, evictions and the background writer's state.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |bytes: u64| bytes as f64 / f64::from(1u32 << 20);
        write!(
            f,
            "hits {} (memory {}, image {}, tier {}), misses {}, compiles {} ({} failed, {:.1} ms), \
             memory {} entries, {:.1} MiB held (peak {:.1} MiB, cap ",
            self.hits(),
            self.hits_memory,
            self.hits_image,
            self.hits_tier,
            self.misses,
            self.compiles,
            self.compile_failures,
            self.compile_time.as_secs_f64() * 1e3,
            self.memory_entries,
            mib(self.bytes_held),
            mib(self.peak_bytes_held),
        )?;
        match self.memory_max_bytes {
            Some(cap) => write!(f, "{:.1} MiB", mib(cap))?,
            None => f.write_str("none")?,
        }
        write!(
            f,
            "), {} evicted, stores {} done, {} queued, {} failed, {} dropped",
            self.evictions,
            self.stores,
            self.store_queue_depth,
            self.store_failures,
            self.stores_dropped,
        )
    }
}

/// Everything [`collect`] reads: the striped and rare counters, and the
/// figures other modules keep, read by the caller.
pub(crate) struct Sources<'a> {
    pub(crate) counters: &'a Counters,
    pub(crate) lookups: &'a LookupStripes,
    pub(crate) memory: MemoryFigures,
    pub(crate) stores: StoreFigures,
    pub(crate) corrupt_payloads: u64,
    pub(crate) world: World,
}

/// The memory caps' figures (see [`Stats`]).
pub(crate) struct MemoryFigures {
    pub(crate) entries: u64,
    pub(crate) entries_alive: u64,
    pub(crate) bytes_held: u64,
    pub(crate) peak_bytes_held: u64,
    pub(crate) max_bytes: Option<u64>,
    pub(crate) max_entries: Option<u64>,
    pub(crate) evictions: u64,
}

/// The background writer's figures (see [`Stats`]).
pub(crate) struct StoreFigures {
    pub(crate) queue_depth: u64,
    pub(crate) stored: u64,
    pub(crate) failures: u64,
    pub(crate) dropped: u64,
}

/// The value of `counter`.
pub(crate) fn get(counter: &AtomicU64) -> u64 {
    counter.load(Ordering::Relaxed)
}

pub(crate) fn collect(sources: Sources<'_>) -> Stats {
    let Sources {
        counters,
        lookups,
        memory,
        stores,
        corrupt_payloads,
        world,
    } = sources;
    let mut stats = Stats {
        hits_tier: get(&counters.hits_tier),
        compiles: get(&counters.compiles),
        compile_failures: get(&counters.compile_failures),
        compile_waits: get(&counters.compile_waits),
        compile_time: Duration::from_nanos(get(&counters.compile_nanos)),
        corrupt: get(&counters.corrupt) + corrupt_payloads,
        inserts: get(&counters.inserts),
        duplicate_inserts: get(&counters.duplicate_inserts),
        invalidated: get(&counters.invalidated),
        images_merged: get(&counters.images_merged),
        merge_inserted: get(&counters.merge_inserted),
        merge_duplicate: get(&counters.merge_duplicate),
        merge_stale: get(&counters.merge_stale),
        merge_foreign_owner: get(&counters.merge_foreign_owner),
        memory_entries: memory.entries,
        entries_alive: memory.entries_alive,
        bytes_held: memory.bytes_held,
        peak_bytes_held: memory.peak_bytes_held,
        memory_max_bytes: memory.max_bytes,
        memory_max_entries: memory.max_entries,
        evictions: memory.evictions,
        store_queue_depth: stores.queue_depth,
        stores: stores.stored,
        store_failures: stores.failures,
        stores_dropped: stores.dropped,
        tier_untrusted: get(&counters.tier_untrusted),
        world,
        ..Stats::default()
    };
    for stripe in lookups.iter() {
        stats.hits_memory += get(&stripe.hits_memory);
        stats.hits_image += get(&stripe.hits_image);
        stats.misses += get(&stripe.misses);
    }
    stats
}
