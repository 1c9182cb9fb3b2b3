//! Cache configuration.

use std::fmt;
use std::sync::Arc;

use crate::Digest;

/// How a [`Cache`](crate::Cache) behaves.
///
/// ```
/// use kiln_core::{Cache, CacheConfig};
///
/// let cache = Cache::with_config(
///     CacheConfig::default()
///         .always_compile(false)
///         .accept_owners(|_digest, label| label.ends_with("/sm_90a")),
/// );
/// # drop(cache);
/// ```
#[derive(Clone)]
#[non_exhaustive]
pub struct CacheConfig {
    /// Skip every cached tier (memory, images, extra tiers) in
    /// `get_or_compile` and always run the compiler, and have
    /// [`Cache::lookup`](crate::Cache::lookup) miss; results are still
    /// recorded (and exported). For debugging a compiler or a suspect cache.
    pub always_compile: bool,
    /// Which owners' image entries this process can use. `None` accepts all.
    /// Entries of a refused owner are counted as foreign at merge and never
    /// served.
    pub owner_filter: Option<OwnerFilter>,
    /// The cap on the payload bytes the cache's in-memory entries hold
    /// (compiled in this process, fetched from a tier, or borrowed from a
    /// tier's mapped segment); `None`: no cap. Past it, the least recently
    /// used entries are evicted and come back, when asked for again, from
    /// the disk tier (borrowed from its mapping), another tier, or a
    /// compile. Entries of merged images are not counted. Entries recorded
    /// after a live [`Snapshot`](crate::Snapshot) are never evicted. Default
    /// [`DEFAULT_MEMORY_MAX_BYTES`] (1 GiB); the global cache reads
    /// `KILN_MEMORY_MAX_BYTES`.
    ///
    /// An evicted entry is gone from memory: its payloads and its metadata
    /// (name, deps, index cell) are freed once no hit, queued store or
    /// delta holds it, so the cache's memory follows what it holds, not
    /// every entry it ever saw.
    pub memory_max_bytes: Option<u64>,
    /// The cap on the number of in-memory entries held, next to the byte
    /// cap; `None`: no cap. Each entry held costs its metadata (a few
    /// hundred bytes besides its name and deps) whatever its payload
    /// weighs, so entries with tiny payloads (a query plan, a DFA) would
    /// otherwise hold far more memory than the byte cap says. Past it, the
    /// least recently used entries are evicted as for the byte cap. Default
    /// [`DEFAULT_MEMORY_MAX_ENTRIES`] (131,072): at about 1 KiB of metadata
    /// each, 128 MiB at most, and more entries than a 1 GiB byte cap holds
    /// of payloads of 8 KiB or more (a CUBIN or the PTX of a small kernel).
    pub memory_max_entries: Option<u64>,
}

/// The default [`CacheConfig::memory_max_bytes`]: 1 GiB.
pub const DEFAULT_MEMORY_MAX_BYTES: u64 = 1 << 30;

/// The default [`CacheConfig::memory_max_entries`]: 131,072 entries.
pub const DEFAULT_MEMORY_MAX_ENTRIES: u64 = 1 << 17;

impl Default for CacheConfig {
    fn default() -> CacheConfig {
        CacheConfig {
            always_compile: false,
            owner_filter: None,
            memory_max_bytes: Some(DEFAULT_MEMORY_MAX_BYTES),
            memory_max_entries: Some(DEFAULT_MEMORY_MAX_ENTRIES),
        }
    }
}

impl CacheConfig {
    /// Sets [`CacheConfig::memory_max_bytes`] (`None`: no cap).
    pub fn memory_max_bytes(mut self, cap: Option<u64>) -> CacheConfig {
        self.memory_max_bytes = cap;
        self
    }

    /// Sets [`CacheConfig::memory_max_entries`] (`None`: no cap).
    pub fn memory_max_entries(mut self, cap: Option<u64>) -> CacheConfig {
        self.memory_max_entries = cap;
        self
    }

    /// Sets [`CacheConfig::always_compile`].
    pub fn always_compile(mut self, on: bool) -> CacheConfig {
        self.always_compile = on;
        self
    }

    /// Accepts image entries only of owners for which `accept(digest, label)`
    /// is true (see [`CacheConfig::owner_filter`]).
    pub fn accept_owners(
        mut self,
        accept: impl Fn(&Digest, &str) -> bool + Send + Sync + 'static,
    ) -> CacheConfig {
        self.owner_filter = Some(OwnerFilter(Arc::new(accept)));
        self
    }

    pub(crate) fn accepts_owner(&self, owner: &Digest, label: &str) -> bool {
        self.owner_filter
            .as_ref()
            .is_none_or(|filter| (filter.0)(owner, label))
    }
}

impl fmt::Debug for CacheConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheConfig")
            .field("always_compile", &self.always_compile)
            .field("owner_filter", &self.owner_filter.as_ref().map(|_| "Fn"))
            .field("memory_max_bytes", &self.memory_max_bytes)
            .field("memory_max_entries", &self.memory_max_entries)
            .finish()
    }
}

/// The predicate inside an [`OwnerFilter`].
type AcceptOwner = dyn Fn(&Digest, &str) -> bool + Send + Sync;

/// A predicate over image owners: `(digest, label) -> accepted`.
#[derive(Clone)]
pub struct OwnerFilter(Arc<AcceptOwner>);

impl OwnerFilter {
    /// Wraps a predicate.
    pub fn new(accept: impl Fn(&Digest, &str) -> bool + Send + Sync + 'static) -> OwnerFilter {
        OwnerFilter(Arc::new(accept))
    }
}

impl fmt::Debug for OwnerFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("OwnerFilter(Fn)")
    }
}
