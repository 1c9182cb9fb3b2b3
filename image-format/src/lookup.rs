//! [`Image::entry`], [`Image::entries`] and [`Image::find`]: an image's
//! entries handed out as [`EntryRef`]s, by index or by (owner, key).

use crate::entry::EntryRef;
use crate::{Digest, Image, ReadError};

impl Image {
    /// Entry by index (entries are sorted by (owner, key)). Its record is
    /// checked against its checksum on first access.
    ///
    /// # Errors
    /// [`ReadError::EntryOutOfRange`] when there is no entry `index`;
    /// [`ReadError::EntryChecksum`] or [`ReadError::EntryMalformed`] when its
    /// record is corrupt.
    pub fn entry(&self, index: usize) -> Result<EntryRef<'_>, ReadError> {
        EntryRef::checked(self, index)
    }

    /// Every entry in order; corrupt ones yield their error.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = Result<EntryRef<'_>, ReadError>> + '_ {
        (0..self.len()).map(|index| self.entry(index))
    }

    /// Looks up (owner, key) in place, without deserializing: a binary
    /// search for the owner, then its radix table over the keys' top bits
    /// (keys are uniform digests: one or two candidates per bucket).
    /// `Ok(None)` when the image has no such entry; an error when the entry
    /// found fails its check. Never an entry with another (owner, key), and
    /// the entry found is the only one of its (owner, key) that passes its
    /// check (an entry a lookup does not lead to fails with
    /// [`ReadError::EntryUnreachable`]), so a lookup and an iteration agree
    /// even on an image whose keys are out of order or repeated.
    ///
    /// # Errors
    /// The error of the check the entry found fails:
    /// [`ReadError::EntryChecksum`], [`ReadError::EntryMalformed`],
    /// [`ReadError::OutOfRange`], [`ReadError::EntryUnreachable`], or a
    /// failed check of its block or of the dependency index.
    pub fn find(&self, owner: &Digest, key: &Digest) -> Result<Option<EntryRef<'_>>, ReadError> {
        let index = self.index();
        let owners = index.owners.as_slice();
        let Ok(position) = owners.binary_search_by(|record| record.digest.cmp(&owner.0)) else {
            return Ok(None);
        };
        let Some(found) = owners.get(position).and_then(|record| {
            let range = record.entries.range()?;
            let entries = index.entries.as_slice().get(range.clone())?;
            let buckets = record
                .buckets
                .range()
                .and_then(|buckets| index.key_buckets.as_slice().get(buckets))
                .unwrap_or_default();
            let bits = record.bucket_bits.to_native();
            crate::search::find_key(entries, buckets, bits, &key.0).map(|i| range.start + i)
        }) else {
            return Ok(None);
        };
        self.entry(found).map(Some)
    }
}
