//! The disk cache as an extra tier of the [`Cache`](crate::Cache).

use kiln_image::EntryData;

use super::DiskCache;
use crate::{Error, Key, Owner, Tier};

/// `get_or_compile` asks the disk cache after memory and images, and stores
/// every new compile in it. Failures of the disk are misses (or, on store,
/// one warning and no further writes), never errors.
impl Tier for DiskCache {
    fn name(&self) -> &str {
        "disk"
    }

    fn load(&self, owner: &Owner, key: &Key) -> Result<Option<EntryData>, Error> {
        self.get(&owner.digest(), key.digest())
            .map(|hit| hit.to_entry_data())
            .transpose()
    }

    fn store(&self, _owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        self.put(entry);
        Ok(())
    }
}
