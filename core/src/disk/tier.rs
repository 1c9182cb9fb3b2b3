//! The disk cache as an extra tier of the [`Cache`](crate::Cache):
//! [`DiskCache`] itself, and [`DiskTier`], which opens it on first use.

use std::sync::{Arc, OnceLock};

use kiln_image::EntryData;

use super::hit::Payloads;
use super::{DiskCache, DiskConfig};
use crate::trust::Provenance;
use crate::{Error, Key, Owner, Tier, TierEntry};

/// `get_or_compile` asks the disk cache after memory and images, and stores
/// every new compile in it. Failures of the disk are misses (or, on store,
/// one warning and no further writes), never errors.
impl Tier for DiskCache {
    fn name(&self) -> &str {
        "disk"
    }

    /// Stores the entry in a new segment (see [`DiskCache::put`]); the
    /// write that fails (and stops writing, with one warning) is an error,
    /// which the cache counts in
    /// [`Stats::store_failures`](crate::Stats::store_failures).
    fn store(&self, _owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        self.put_entry(entry, &Provenance::Compiled).map(|_| ())
    }

    /// Keeps the entry, received unsigned from `from`, in a segment of
    /// received entries ([`DiskCache::put_unsigned`]).
    fn store_unsigned(&self, _owner: &Owner, entry: &EntryData, from: &str) -> Result<(), Error> {
        self.put_unsigned(entry, from);
        Ok(())
    }

    /// Keeps the signed image as a segment of its own
    /// ([`DiskCache::put_signed`]).
    fn store_signed(&self, _owner: &Owner, entry: &EntryData, image: &[u8]) -> Result<(), Error> {
        self.put_signed(entry, image);
        Ok(())
    }

    /// A hit as the segment's entry, which the cache borrows (no copy):
    /// the segment stays mapped as long as the cache holds the entry. Its
    /// record is checked here and each payload on its first use by the
    /// cache (an entry with a CUBIN and a PTX fallback hashes only the one
    /// used); an entry with a payload already known bad is a miss.
    ///
    /// With [`DiskConfig::trusted_keys`], an entry neither compiled by this
    /// user's processes (by its provenance) nor signed by one of them is
    /// refused: [`Error::TierUntrusted`], which the cache counts (the disk
    /// cache warns once).
    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        let found = self
            .get_trusted(&owner.digest(), key.digest(), Payloads::OnUse)
            .map_err(|source| Error::TierUntrusted {
                tier: "disk".to_owned(),
                what: format!("{} {}", owner.label(), key),
                source: Box::new(source),
            })?;
        Ok(found.map(|hit| TierEntry::Image {
            image: Arc::clone(hit.image()),
            index: hit.index(),
        }))
    }
}

/// A disk-cache tier that touches the directory only when first consulted.
///
/// Creating one does no I/O, so adding it to a cache at program init costs
/// nothing; the directory is opened (created when missing, its segments
/// listed) on the first [`Tier::load_entry`] or [`Tier::store`], that is on the
/// first `get_or_compile` miss in memory and images. This is the tier the
/// global cache uses ([`crate::global()`]).
///
/// When the directory cannot be used, the cache degrades to compiling, with
/// **one** warning:
/// - it cannot be created or listed: the warning comes on first use, and the
///   tier is a miss from then on (nothing is stored);
/// - it is read-only, or a write fails (disk full, quota): entries already
///   there are still served; the warning comes on the first failed write,
///   and the process stops writing to it.
///
/// ```
/// use kiln_core::disk::{DiskConfig, DiskTier};
///
/// let dir = std::env::temp_dir().join("kiln-doc-disk-tier");
/// let tier = DiskTier::new(DiskConfig::new(&dir));
/// assert!(tier.opened().is_none()); // no I/O yet
/// let cache = kiln_core::Cache::new();
/// cache.add_tier(Box::new(tier));
/// ```
pub struct DiskTier {
    config: DiskConfig,
    cache: OnceLock<Option<DiskCache>>,
}

impl DiskTier {
    /// A tier for the cache directory of `config`, not opened yet.
    pub fn new(config: DiskConfig) -> DiskTier {
        DiskTier {
            config,
            cache: OnceLock::new(),
        }
    }

    /// The tier of a configuration as the settings give it
    /// ([`Settings::disk`](crate::settings::Settings::disk)): `None` when turned off, or (after one
    /// warning) when the configuration is an error.
    pub fn from_config(config: Result<Option<DiskConfig>, Error>) -> Option<DiskTier> {
        super::config::or_warn(config).map(DiskTier::new)
    }

    /// The configuration in force.
    pub fn config(&self) -> &DiskConfig {
        &self.config
    }

    /// The disk cache, opening the directory on the first call; `None` when
    /// it cannot be opened (one warning, on that first call).
    pub fn cache(&self) -> Option<&DiskCache> {
        self.cache
            .get_or_init(|| DiskCache::open_or_warn(self.config.clone()))
            .as_ref()
    }

    /// The disk cache if a lookup or a store opened it already.
    pub fn opened(&self) -> Option<&DiskCache> {
        self.cache.get().and_then(Option::as_ref)
    }
}

impl Tier for DiskTier {
    fn name(&self) -> &str {
        "disk"
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        match self.cache() {
            Some(cache) => cache.store(owner, entry),
            None => Ok(()),
        }
    }

    fn store_signed(&self, owner: &Owner, entry: &EntryData, image: &[u8]) -> Result<(), Error> {
        match self.cache() {
            Some(cache) => cache.store_signed(owner, entry, image),
            None => Ok(()),
        }
    }

    fn store_unsigned(&self, owner: &Owner, entry: &EntryData, from: &str) -> Result<(), Error> {
        match self.cache() {
            Some(cache) => cache.store_unsigned(owner, entry, from),
            None => Ok(()),
        }
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        match self.cache() {
            Some(cache) => cache.load_entry(owner, key),
            None => Ok(None),
        }
    }
}

impl std::fmt::Debug for DiskTier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskTier")
            .field("dir", &self.config.dir)
            .field("opened", &self.opened().is_some())
            .finish()
    }
}
