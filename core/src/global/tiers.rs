//! The global cache's tiers: the disk tier, then every registered
//! factory's, all under one trust policy ([`add_tiers`]).

use std::ffi::OsString;
use std::sync::Arc;

#[cfg(feature = "disk")]
use crate::disk::{DiskConfig, DiskTier};
use crate::registry::{self, TierSetup};
use crate::trust::TrustPolicy;
use crate::{Cache, Tier};
/// Adds to `cache` the extra tiers that [`global()`](crate::global()) has, configured through
/// `lookup` (a variable name to its value; the process environment for the
/// global cache), and returns their names in the order added:
///
/// 1. the disk tier (`DiskTier`, feature `disk`), unless `KILN_CACHE=0`,
///    placed and capped by `KILN_CACHE_DIR` and `KILN_CACHE_MAX_BYTES`
///    (`DiskConfig::from_lookup`); an unusable setting gives one warning
///    and no disk tier;
/// 2. the tier of every [`TierFactory`](crate::TierFactory) linked into the
///    program that its variables turn on (in the order of their names),
///    each given the disk tier to write its hits through to, as a handle
///    whose stores run on `cache`'s background writer
///    ([`Cache::background`]).
///
/// The trust policy (`KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`,
/// `KILN_REMOTE_WRITE`) is read through `lookup` once and handed to every
/// tier ([`add_tiers_with`] takes one read already).
///
/// No I/O: each tier opens its directory or connection on first use. A
/// program with a cache of its own, or a benchmark, gets the global cache's
/// wiring with it:
///
/// ```
/// use std::ffi::OsString;
///
/// let dir = std::env::temp_dir().join("kiln-doc-add-tiers");
/// let cache = kiln_core::Cache::new();
/// let tiers = kiln_core::add_tiers(&cache, |name| {
///     (name == "KILN_CACHE_DIR").then(|| OsString::from(&dir))
/// });
/// assert_eq!(tiers, ["disk"]); // and no I/O yet
/// ```
pub fn add_tiers(cache: &Cache, lookup: impl Fn(&str) -> Option<OsString>) -> Vec<String> {
    let trust = TrustPolicy::from_lookup(&lookup);
    add_tiers_with(cache, lookup, &trust)
}

/// [`add_tiers`] with `trust` as the trust policy (the global cache passes
/// the policy its init read, so that the images, the disk tier and every
/// factory's tier share one reading, one set of trusted keys and one memo
/// of verified batch roots). `KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY` and
/// `KILN_REMOTE_WRITE` are not read through `lookup`.
pub fn add_tiers_with(
    cache: &Cache,
    lookup: impl Fn(&str) -> Option<OsString>,
    trust: &TrustPolicy,
) -> Vec<String> {
    add_tiers_wrapped(cache, lookup, trust, |tier| tier)
}

/// [`add_tiers_with`], each tier passed through `wrap` before it is added
/// (a precompile block's unverified tiers: `crate::build`). A factory's
/// tier writes its hits through to the disk tier as it is, unwrapped.
pub(crate) fn add_tiers_wrapped(
    cache: &Cache,
    lookup: impl Fn(&str) -> Option<OsString>,
    trust: &TrustPolicy,
    wrap: impl Fn(Box<dyn Tier>) -> Box<dyn Tier>,
) -> Vec<String> {
    let mut names = Vec::new();
    #[cfg(feature = "disk")]
    let config = DiskConfig::from_lookup(&lookup).map(|config| {
        config.map(|mut config| {
            config.trusted_keys = trust.trusted_keys.clone();
            config
        })
    });
    #[cfg(feature = "disk")]
    let disk = DiskTier::from_config(config).map(|disk| {
        let disk: Arc<dyn Tier> = Arc::new(disk);
        let wrapped = wrap(Box::new(Arc::clone(&disk)));
        names.push(wrapped.name().to_owned());
        cache.add_tier(wrapped);
        disk
    });
    // Without the disk tier compiled in, factories' tiers write through to
    // nothing.
    #[cfg(not(feature = "disk"))]
    let disk: Option<Arc<dyn Tier>> = None;
    let setup = TierSetup::new(&lookup, disk.map(|disk| cache.background(disk))).trust(trust);
    for factory in registry::tier_factories() {
        if let Some(tier) = factory.build(&setup) {
            let tier = wrap(tier);
            names.push(tier.name().to_owned());
            cache.add_tier(tier);
        }
    }
    names
}
