//! Checks run at open and by [`Image::verify_full`]: body checksum, index
//! validation, the index checksum and the owner table.

use crate::checksum::IndexHasher;
use crate::entry::{ArtifactRef, EntryRef};
use crate::header::{HEADER_LEN, Header};
use crate::layout::{ArchivedIndex, ArchivedStrRef};
use crate::{Digest, Image, ImageError};

/// Checks the BLAKE3 of everything after the header: the rest of `head` up
/// to the payload region, then the payload region.
pub(crate) fn check_body(head: &[u8], payloads: &[u8], header: &Header) -> Result<(), ImageError> {
    let before_payloads = usize::try_from(header.payload_offset)
        .ok()
        .and_then(|end| head.get(HEADER_LEN..end))
        .ok_or_else(|| ImageError::Layout("the payload region starts outside the image".into()))?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(before_payloads);
    hasher.update(payloads);
    let found = Digest(*hasher.finalize().as_bytes());
    if found != header.body_checksum {
        return Err(ImageError::BodyChecksum {
            expected: header.body_checksum,
            found,
        });
    }
    Ok(())
}

/// Validates the index with rkyv, checks the index checksum, the owner
/// table and the metadata strings. Returns the entry, artifact and
/// dependency-group counts.
/// Cost: linear in the number of records, with a constant per record that
/// touches no string or payload (bytecheck of fixed-size records), plus the
/// owners and labels.
pub(crate) fn check_index(
    index_bytes: &[u8],
    header: &Header,
) -> Result<(usize, usize, usize), ImageError> {
    let index = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(index_bytes)
        .map_err(|error| ImageError::IndexValidation(error.to_string()))?;
    if index_checksum(index_bytes, index)? != header.index_checksum {
        return Err(ImageError::IndexChecksum);
    }
    check_counts(index, header)?;
    check_owners(index)?;
    check_meta(index)?;
    Ok((
        index.entries.len(),
        index.artifacts.len(),
        index.dep_groups.len(),
    ))
}

/// For a trusted image: only what `access_unchecked` itself needs.
pub(crate) fn trusted_counts(
    index_bytes: &[u8],
    header: &Header,
) -> Result<(usize, usize, usize), ImageError> {
    if index_bytes.len() < size_of::<ArchivedIndex>() {
        return Err(ImageError::IndexMalformed(format!(
            "the index is {} bytes, smaller than its {}-byte root",
            index_bytes.len(),
            size_of::<ArchivedIndex>()
        )));
    }
    // SAFETY: the caller of `Image::from_static_trusted` guarantees these
    // bytes passed full verification (including rkyv validation of this
    // exact range) earlier and are unchanged; the header that gave the range
    // was just checked, and the range holds at least a root.
    let index = unsafe { rkyv::access_unchecked::<ArchivedIndex>(index_bytes) };
    check_counts(index, header)?;
    Ok((
        index.entries.len(),
        index.artifacts.len(),
        index.dep_groups.len(),
    ))
}

fn check_counts(index: &ArchivedIndex, header: &Header) -> Result<(), ImageError> {
    if index.entries.len() as u64 != header.entry_count {
        return Err(ImageError::IndexMalformed(format!(
            "the index holds {} entries, the header says {}",
            index.entries.len(),
            header.entry_count
        )));
    }
    Ok(())
}

fn string_bytes<'a>(
    index: &'a ArchivedIndex,
    text: &ArchivedStrRef,
    what: &str,
) -> Result<&'a [u8], ImageError> {
    text.range()
        .and_then(|range| index.strings.as_slice().get(range))
        .ok_or_else(|| ImageError::IndexMalformed(format!("{what} lies outside the string table")))
}

fn string<'a>(
    index: &'a ArchivedIndex,
    text: &ArchivedStrRef,
    what: &str,
) -> Result<&'a str, ImageError> {
    std::str::from_utf8(string_bytes(index, text, what)?)
        .map_err(|_| ImageError::IndexMalformed(format!("{what} is not UTF-8")))
}

/// The checksum over the index root (table lengths and positions, the
/// dependency group table's checksum), the owner table and the metadata. The writer
/// stores it in the header; open compares.
pub(crate) fn index_checksum(
    index_bytes: &[u8],
    index: &ArchivedIndex,
) -> Result<Digest, ImageError> {
    let root_start = rkyv::api::root_position::<ArchivedIndex>(index_bytes.len());
    let mut hasher = IndexHasher::new(index_bytes.get(root_start..).unwrap_or_default());
    for owner in index.owners.iter() {
        hasher.owner(
            &owner.digest,
            string_bytes(index, &owner.label, "an owner label")?,
            owner.entries.start.to_native(),
            owner.entries.len.to_native(),
        );
        hasher.buckets(
            owner.buckets.start.to_native(),
            owner.buckets.len.to_native(),
            owner.bucket_bits.to_native(),
        );
    }
    hasher.text(string_bytes(
        index,
        &index.producer_name,
        "the producer name",
    )?);
    hasher.text(string_bytes(
        index,
        &index.producer_version,
        "the producer version",
    )?);
    for label in index.labels.iter() {
        hasher.text(string_bytes(index, &label.key, "a label key")?);
        hasher.text(string_bytes(index, &label.value, "a label value")?);
    }
    Ok(hasher.finish())
}

/// Owners are sorted by digest, own non-empty contiguous ranges that cover
/// every entry in order, and have UTF-8 labels.
fn check_owners(index: &ArchivedIndex) -> Result<(), ImageError> {
    let mut next_entry = 0usize;
    let mut previous: Option<&[u8; 32]> = None;
    for owner in index.owners.iter() {
        if previous.is_some_and(|previous| previous >= &owner.digest) {
            return Err(ImageError::IndexMalformed(
                "owners are not sorted by digest".into(),
            ));
        }
        previous = Some(&owner.digest);
        string(index, &owner.label, "an owner label")?;
        let range = owner.entries.range().unwrap_or(usize::MAX..usize::MAX);
        if range.start != next_entry || range.is_empty() {
            return Err(ImageError::IndexMalformed(format!(
                "owner {} does not own a contiguous range of entries",
                Digest(owner.digest)
            )));
        }
        next_entry = range.end;
    }
    if next_entry != index.entries.len() {
        return Err(ImageError::IndexMalformed(format!(
            "owners cover {next_entry} entries of {}",
            index.entries.len()
        )));
    }
    Ok(())
}

fn check_meta(index: &ArchivedIndex) -> Result<(), ImageError> {
    string(index, &index.producer_name, "the producer name")?;
    string(index, &index.producer_version, "the producer version")?;
    for label in index.labels.iter() {
        string(index, &label.key, "a label key")?;
        string(index, &label.value, "a label value")?;
    }
    Ok(())
}

impl Image {
    /// Full verification: the body checksum, the index (again, for a
    /// trusted image), the dependency index, every entry record and every
    /// payload checksum. Marks everything verified on success.
    ///
    /// # Errors
    /// The [`ImageError`] of the first check that fails.
    pub fn verify_full(&self) -> Result<(), ImageError> {
        check_body(self.storage.head(), self.payloads()?, &self.header)?;
        if self.trusted {
            check_index(self.index_bytes(), &self.header)?;
        }
        self.check_dep_index()?;
        for index in 0..self.len() {
            let entry = EntryRef::check(self, index)?;
            for artifact in entry.artifacts() {
                ArtifactRef::check_payload(&artifact)?;
            }
        }
        Ok(())
    }
}
