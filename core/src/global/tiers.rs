//! The global cache's tiers: the disk tier, then every registered
//! factory's, all under one trust policy ([`add_tiers`]).

use std::sync::Arc;

#[cfg(feature = "disk")]
use crate::disk::DiskTier;
use crate::registry::{self, TierSetup};
use crate::settings::Settings;
use crate::trust::TrustPolicy;
use crate::{Cache, Tier};

/// Adds to `cache` the extra tiers that [`global()`](crate::global()) has,
/// configured by `settings` (the process's for the global cache), and
/// returns their names in the order added:
///
/// 1. the disk tier (`DiskTier`, feature `disk`), unless `KILN_CACHE=0`,
///    placed and capped by `KILN_CACHE_DIR` and `KILN_CACHE_MAX_BYTES`
///    ([`Settings::disk`]); an unusable setting gives one warning and no
///    disk tier;
/// 2. the tier of every [`TierFactory`](crate::TierFactory) linked into the
///    program that its variables turn on (in the order of their names),
///    each given the disk tier to write its hits through to, as a handle
///    whose stores run on `cache`'s background writer
///    ([`Cache::background`]).
///
/// Every tier follows the settings' trust policy ([`Settings::trust`]):
/// the images, the disk tier and every factory's tier share one set of
/// trusted keys and one memo of verified batch roots.
///
/// No I/O: each tier opens its directory or connection on first use. A
/// program with a cache of its own, or a benchmark, gets the global cache's
/// wiring with it:
///
/// ```
/// use kiln_core::settings::{Settings, Vars};
///
/// let dir = std::env::temp_dir().join("kiln-doc-add-tiers");
/// let cache = kiln_core::Cache::new();
/// let settings = Settings::from_vars(Vars::from_iter([("KILN_CACHE_DIR", &dir)]));
/// let tiers = kiln_core::add_tiers(&cache, &settings);
/// assert_eq!(tiers, ["disk"]); // and no I/O yet
/// ```
pub fn add_tiers(cache: &Cache, settings: &Settings) -> Vec<String> {
    add_tiers_wrapped(cache, settings, &settings.trust, |tier| tier)
}

/// [`add_tiers`] under `trust` instead of the settings' policy, each tier
/// passed through `wrap` before it is added (a precompile block's vouching
/// and unverified tiers: `crate::build`). A factory's tier writes its hits
/// through to the disk tier as it is, unwrapped.
pub(crate) fn add_tiers_wrapped(
    cache: &Cache,
    settings: &Settings,
    trust: &TrustPolicy,
    wrap: impl Fn(Box<dyn Tier>) -> Box<dyn Tier>,
) -> Vec<String> {
    let mut names = Vec::new();
    #[cfg(feature = "disk")]
    let config = settings.disk().map(|config| {
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
    let setup = TierSetup::new(settings, disk.map(|disk| cache.background(disk)), trust);
    for factory in registry::tier_factories() {
        if let Some(tier) = factory.build(&setup) {
            let tier = wrap(tier);
            names.push(tier.name().to_owned());
            cache.add_tier(tier);
        }
    }
    names
}
