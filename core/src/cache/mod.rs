//! The code-instance cache.
//!
//! | module          | job                                                        |
//! | --------------- | ---------------------------------------------------------- |
//! | `instance`      | in-memory entries and [`Compiled`]                         |
//! | `store`         | the lock-free `(owner, key)` index, with removal           |
//! | `promoted`      | the index of image entries hit before (insert-only)        |
//! | `log`           | sequence numbers and the insertion log snapshots pin       |
//! | `memory`        | the memory caps: resident entries, LRU eviction, pins      |
//! | `background`    | the background writer: tier stores off the caller's path  |
//! | `layers`        | merged images and their per-entry state                    |
//! | `merge`         | [`Cache::merge_image`] and [`MergeReport`]                 |
//! | `image_deps`    | stale entries and dependents from an image's dep index     |
//! | `definitions`   | [`Cache::define`] / [`Cache::redefine`]                    |
//! | `backedges`     | definition name -> the in-memory entries built from it    |
//! | `lookup`        | [`Cache::lookup`], [`Cache::insert`]                       |
//! | `compile`       | [`Cache::get_or_compile`]                                  |
//! | `single_flight` | one compile per key at a time                              |
//! | `delta`         | [`Snapshot`], [`Delta`]                                    |
//! | `hit`           | [`Hit`], [`Source`]                                        |
//! | `observer`      | [`Observer`]: told what `lookup`, `get_or_compile` return |
//! | `tier`          | the [`Tier`] trait                                         |
//! | `stats`         | counters and [`Stats`]                                     |
//! | `config`        | [`CacheConfig`]                                            |
//!
//! # What is exported
//!
//! A [`Delta`] holds the entries recorded after a [`Snapshot`] that are
//! unbounded now and not session-dependent: compiled in this process, or
//! loaded from an extra tier (a tier memoises earlier local compiles, so a
//! precompile block gives the same image whether or not a disk cache was
//! warm). Entries merged from images are never in a delta: they live in
//! layers, not in the insertion log.
//!
//! # Process-specific state
//!
//! Entries hold plain data only. What is process-specific (a loaded module, a
//! function handle) is kept beside the entry by the backend that creates it,
//! keyed by `(owner, key)` (the CUDA loader's module cache does this), and is
//! rebuilt from the artifacts in a new process. An entry whose artifacts
//! themselves depend on the process is marked
//! [`Compiled::session_dependent`] and never exported.
//!
//! # Locking
//!
//! Lookups take no lock (the index is read lock-free, counters are striped
//! per thread). A memory hit clones the `Arc` of its entry (see `store`:
//! that reference is what lets eviction free entries while hits are out),
//! and stores the LRU clock into the entry only when it changed; an image
//! hit writes nothing shared. Everything that changes the cache (insert,
//! merge, define/redefine, promoting an image entry into the index,
//! eviction, snapshots' pins, the insertion log) runs under one writer
//! mutex; so sequence numbers are given in order, the index has a single
//! writer, and a merge or an insert never races with an invalidation or an
//! eviction. Compiles
//! and tier stores (on the background writer) run outside every lock; a
//! lookup only ever *tries* the writer lock (to promote an image entry) and
//! skips promotion if it is taken.

mod backedges;
mod background;
mod compile;
mod config;
mod definitions;
mod delta;
mod hit;
mod image_deps;
mod instance;
mod layers;
mod log;
mod lookup;
mod memory;
mod merge;
mod observer;
mod promoted;
mod single_flight;
mod stats;
mod store;
mod tier;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError};

pub use background::{MAX_BATCH_JOBS, MAX_BATCH_WINDOW, MAX_JOBS, MAX_QUEUED_BYTES};
pub use config::{CacheConfig, DEFAULT_MEMORY_MAX_BYTES, DEFAULT_MEMORY_MAX_ENTRIES, OwnerFilter};
pub use delta::{Delta, Snapshot};
pub use hit::{ArtifactView, Hit, Source};
pub use instance::{Compiled, PAYLOAD_ALIGN};
pub use merge::{MergeReport, Rejection};
pub use observer::{Acquired, Observer};
pub use stats::Stats;
pub use tier::{Tier, TierEntry};

use crate::{Digest, World};
use backedges::Backedges;
use background::StoreQueue;
use layers::Layer;
use log::InsertLog;
use memory::{MemoryCounters, Residency};
use promoted::Promotions;
use single_flight::Flights;
use stats::{Counters, LookupStripes};
use store::MemoryStore;

/// The process's code-instance cache: compiled entries in memory (up to a
/// cap, least recently used evicted first: see
/// [`CacheConfig::memory_max_bytes`]), merged images as layers, optional
/// extra tiers (stored into by a background writer: see [`Cache::flush`]).
/// `Send + Sync`; share it by reference (hits borrow from it).
///
/// ```
/// use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner};
///
/// # fn main() -> Result<(), kiln_core::Error> {
/// let cache = Cache::new();
/// let owner = Owner::new("my-compiler", "1.2.3", "x86_64", ["-O2"])?;
/// let key = KeyBuilder::new("doc-example", 1).str("function", "square").finish();
///
/// let before = cache.snapshot();
/// let hit = cache.get_or_compile(&owner, &key, || {
///     Ok(Compiled::new("square").artifact(Artifact {
///         kind: ArtifactKind::Object,
///         entry_points: vec!["square".into()],
///         bytes: vec![0x0f, 0xaf, 0xc0],
///     }))
/// })?;
/// assert_eq!(hit.artifact(&ArtifactKind::Object), Some(&[0x0f, 0xaf, 0xc0][..]));
///
/// // A second call is a hit: nothing is compiled.
/// let again = cache.get_or_compile(&owner, &key, || Err("not called".into()))?;
/// assert_eq!(again.name(), "square");
/// assert_eq!(cache.stats().compiles, 1);
///
/// // What the block added, ready to be written as an image.
/// assert_eq!(cache.delta(&before).len(), 1);
/// # Ok(()) }
/// ```
pub struct Cache {
    config: CacheConfig,
    world: AtomicU64,
    store: MemoryStore,
    promoted: Promotions,
    layers: boxcar::Vec<Layer>,
    tiers: boxcar::Vec<Arc<dyn Tier>>,
    /// Hits of each tier, by its index in `tiers` (pushed first, so that
    /// every tier has its counter).
    tier_hits: boxcar::Vec<AtomicU64>,
    writer: Mutex<WriterState>,
    flights: Flights,
    counters: Counters,
    lookups: LookupStripes,
    observer: OnceLock<Arc<dyn Observer>>,
    memory: MemoryCounters,
    queue: Arc<StoreQueue>,
}

// The cache is shared by all threads.
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<Cache>();
};

/// What only writers touch, under [`Cache::writer`].
#[derive(Default)]
struct WriterState {
    /// Known definitions: name -> current fingerprint.
    definitions: HashMap<String, Digest>,
    /// Backedges: definition name -> the entries alive built from it.
    backedges: Backedges,
    /// Resident entries, per owner too, and snapshots' pins (the caps).
    residency: Residency,
    /// Sequence numbers, and the entries live snapshots pin.
    log: InsertLog,
}

impl Default for Cache {
    fn default() -> Cache {
        Cache::new()
    }
}

impl Cache {
    /// An empty cache with the default configuration, in [`World::FIRST`].
    pub fn new() -> Cache {
        Cache::with_config(CacheConfig::default())
    }

    /// An empty cache with `config`, in [`World::FIRST`].
    pub fn with_config(config: CacheConfig) -> Cache {
        Cache {
            queue: StoreQueue::new(config.memory_max_bytes),
            config,
            world: AtomicU64::new(World::FIRST.0),
            store: MemoryStore::new(),
            promoted: Promotions::new(),
            layers: boxcar::Vec::new(),
            tiers: boxcar::Vec::new(),
            tier_hits: boxcar::Vec::new(),
            writer: Mutex::new(WriterState::default()),
            flights: Flights::default(),
            counters: Counters::default(),
            lookups: LookupStripes::new(),
            observer: OnceLock::new(),
            memory: MemoryCounters::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CacheConfig {
        &self.config
    }

    /// The current world.
    pub fn world(&self) -> World {
        World(self.world.load(Ordering::Acquire))
    }

    /// Adds an extra tier, consulted by `get_or_compile` after memory and
    /// images (in the order tiers were added) and given every new compile
    /// (on the background writer: see [`Cache::flush`]).
    pub fn add_tier(&self, tier: Box<dyn Tier>) {
        // Under the writer lock, so that a tier's index in `tiers` is its
        // counter's in `tier_hits`.
        let _writer = self.writer();
        self.tier_hits.push(AtomicU64::new(0));
        self.tiers.push(Arc::from(tier));
    }

    /// Each extra tier's name and how many entries it gave this cache, in
    /// the order tiers were added (a precompile block reports where its
    /// entries came from).
    pub fn tier_hits(&self) -> Vec<(String, u64)> {
        self.tiers
            .iter()
            .map(|(index, tier)| {
                let hits = self
                    .tier_hits
                    .get(index)
                    .map_or(0, |hits| hits.load(Ordering::Relaxed));
                (tier.name().to_owned(), hits)
            })
            .collect()
    }

    /// Number of merged images.
    pub fn image_count(&self) -> usize {
        self.layers.count()
    }

    /// A copy of the counters.
    pub fn stats(&self) -> Stats {
        let corrupt_payloads = self
            .layers
            .iter()
            .map(|(_, layer)| layer.corrupt_payloads())
            .sum();
        let memory = &self.memory;
        let stores = &self.queue.counters;
        stats::collect(stats::Sources {
            counters: &self.counters,
            lookups: &self.lookups,
            memory: stats::MemoryFigures {
                entries: stats::get(&memory.resident),
                entries_alive: stats::get(&memory.alive),
                bytes_held: stats::get(&memory.held),
                peak_bytes_held: stats::get(&memory.peak),
                max_bytes: self.config.memory_max_bytes,
                max_entries: self.config.memory_max_entries,
                evictions: stats::get(&memory.evictions),
            },
            stores: stats::StoreFigures {
                queue_depth: self.queue.depth(),
                stored: stats::get(&stores.stored),
                failures: stats::get(&stores.failures),
                dropped: stats::get(&stores.dropped),
            },
            corrupt_payloads,
            world: self.world(),
        })
    }

    fn writer(&self) -> MutexGuard<'_, WriterState> {
        // Writer sections never leave the state half-updated across a panic
        // point that matters (each step is complete on its own), so a poisoned
        // lock is still usable.
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A handle on `tier` whose stores run on this cache's background
    /// writer (queued, bounded, flushed with the cache), and whose loads go
    /// straight to `tier` (signed stores, [`Tier::store_signed`], keep their
    /// signature). For a tier that writes through to another one:
    /// [`add_tiers`](crate::add_tiers) gives the remote tier such a handle
    /// on the disk tier, so that a remote hit returns without waiting for
    /// the disk.
    pub fn background(&self, tier: Arc<dyn Tier>) -> Arc<dyn Tier> {
        self.queue.background(tier)
    }

    /// Waits until every tier store queued before the call (by
    /// [`get_or_compile`](Cache::get_or_compile), or by a
    /// [`background`](Cache::background) handle) has run. Stores also run
    /// on their own; call this where they must be done, e.g. before
    /// another process is expected to find an entry on disk. Dropping the
    /// cache flushes too, and so does a normal exit for the
    /// [global](crate::global()) cache (its init registers
    /// [`Cache::flush_within`] with the exit hook).
    pub fn flush(&self) {
        self.queue.flush(None);
    }

    /// [`Cache::flush`], waiting at most `limit`: true if every store
    /// queued before the call has run, false if some are still queued
    /// (they keep running). For a flush that must not hang on a stuck file
    /// system or server, such as the one at exit.
    pub fn flush_within(&self, limit: std::time::Duration) -> bool {
        self.queue.flush(Some(limit))
    }
}

/// Dropping a cache runs the stores still queued (see [`Cache::flush`]) and
/// ends its background writer.
impl Drop for Cache {
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("world", &self.world())
            .field(
                "memory_entries",
                &self.memory.resident.load(Ordering::Relaxed),
            )
            .field("images", &self.layers.count())
            .field("tiers", &self.tiers.count())
            .field("config", &self.config)
            .finish()
    }
}
