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
#[derive(Clone, Default)]
#[non_exhaustive]
pub struct CacheConfig {
    /// Skip every cached tier (memory, images, extra tiers) in
    /// `get_or_compile` and always run the compiler; results are still
    /// recorded (and exported). For debugging a compiler or a suspect cache.
    pub always_compile: bool,
    /// Which owners' image entries this process can use. `None` accepts all.
    /// Entries of a refused owner are counted as foreign at merge and never
    /// served.
    pub owner_filter: Option<OwnerFilter>,
}

impl CacheConfig {
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
