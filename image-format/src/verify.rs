//! Checks run at open and by [`Image::verify_full`](crate::Image::verify_full): body checksum, index
//! validation, the index checksum, the owner table and the metadata at
//! open; everything, plus the consistency of the whole index, in full.

use crate::checksum::IndexHasher;
use crate::header::{HEADER_LEN, Header};
use crate::layout::{ArchivedIndex, ArchivedStrRef, block_count};
use crate::{Digest, ReadError};

/// Checks the BLAKE3 of everything after the header: the rest of `head` up
/// to the payload region, then the payload region.
pub(crate) fn check_body(head: &[u8], payloads: &[u8], header: &Header) -> Result<(), ReadError> {
    let before_payloads = usize::try_from(header.payload_offset)
        .ok()
        .and_then(|end| head.get(HEADER_LEN..end))
        .ok_or(ReadError::PayloadRegion {
            start: header.payload_offset,
            end: header.payload_offset.saturating_add(header.payload_len),
            available: head.len() as u64,
        })?;
    let mut hasher = blake3::Hasher::new();
    hasher.update(before_payloads);
    hasher.update(payloads);
    let found = Digest(*hasher.finalize().as_bytes());
    if found != header.body_checksum {
        return Err(ReadError::BodyChecksum {
            expected: header.body_checksum,
            found,
        });
    }
    Ok(())
}

/// Validates the index with rkyv, checks the index checksum, the owner
/// table and the metadata. Returns the entry, artifact, dependency-group
/// and block counts.
///
/// Cost: the bytecheck of fixed-size records (no work per record), the
/// root, and linear in the owners, the labels and the metadata text, each
/// byte of which is hashed and validated once.
pub(crate) fn check_index(
    index_bytes: &[u8],
    header: &Header,
) -> Result<(usize, usize, usize, usize), ReadError> {
    let index = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(index_bytes)
        .map_err(|error| ReadError::IndexValidation(error.to_string()))?;
    if index_checksum(index_bytes, index) != header.index_checksum {
        return Err(ReadError::IndexChecksum);
    }
    check_counts(index, header)?;
    check_owners(index)?;
    check_meta(index)?;
    Ok(counts(index))
}

fn counts(index: &ArchivedIndex) -> (usize, usize, usize, usize) {
    (
        index.entries.len(),
        index.artifacts.len(),
        index.dep_groups.len(),
        index.blocks.len(),
    )
}

/// For a trusted image: only what `access_unchecked` itself needs.
pub(crate) fn trusted_counts(
    index_bytes: &[u8],
    header: &Header,
) -> Result<(usize, usize, usize, usize), ReadError> {
    if index_bytes.len() < size_of::<ArchivedIndex>() {
        return Err(ReadError::IndexMalformed(format!(
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
    Ok(counts(index))
}

fn check_counts(index: &ArchivedIndex, header: &Header) -> Result<(), ReadError> {
    if index.entries.len() as u64 != header.entry_count {
        return Err(ReadError::IndexMalformed(format!(
            "the index holds {} entries, the header says {}",
            index.entries.len(),
            header.entry_count
        )));
    }
    if index.blocks.len() != block_count(index.entries.len()) {
        return Err(ReadError::IndexMalformed(format!(
            "the index holds {} block records for {} entries, expected {}",
            index.blocks.len(),
            index.entries.len(),
            block_count(index.entries.len())
        )));
    }
    Ok(())
}

fn pair(reference: &ArchivedStrRef) -> (u32, u32) {
    (reference.offset.to_native(), reference.len.to_native())
}

/// The checksum over the index root (table lengths and positions, the
/// dependency group table's checksum, the producer references), the
/// metadata text (once), the owner table and the label table. The writer
/// stores it in the header; open compares. Linear in what it covers.
pub(crate) fn index_checksum(index_bytes: &[u8], index: &ArchivedIndex) -> Digest {
    let root_start = rkyv::api::root_position::<ArchivedIndex>(index_bytes.len());
    let mut hasher = IndexHasher::new(
        index_bytes.get(root_start..).unwrap_or_default(),
        index.meta_strings.as_slice(),
    );
    for owner in index.owners.iter() {
        hasher.owner(
            &owner.digest,
            pair(&owner.label),
            (
                owner.entries.start.to_native(),
                owner.entries.len.to_native(),
            ),
        );
        hasher.buckets(
            (
                owner.buckets.start.to_native(),
                owner.buckets.len.to_native(),
            ),
            owner.bucket_bits.to_native(),
        );
    }
    for label in index.labels.iter() {
        hasher.label(pair(&label.key), pair(&label.value));
    }
    for group in index.payload_groups.iter() {
        hasher.payload_group(
            (group.raw.offset.to_native(), group.raw.len.to_native()),
            (
                group.stored.offset.to_native(),
                group.stored.len.to_native(),
            ),
            group.encoding.to_native(),
            group.flags.to_native(),
        );
    }
    hasher.finish()
}

/// Walks the metadata text: each reference starts where the previous one
/// ended, inside the table, and is UTF-8. Each byte is validated once.
struct MetaCursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl<'a> MetaCursor<'a> {
    /// `what` names the reference, for the error (built only on failure).
    fn next(
        &mut self,
        reference: &ArchivedStrRef,
        what: impl Fn() -> String,
    ) -> Result<&'a [u8], ReadError> {
        let (start, len) = pair(reference);
        if start as usize != self.at {
            return Err(ReadError::Overlap(format!(
                "{} is at {start}+{len}, where the metadata text continues at {}",
                what(),
                self.at
            )));
        }
        let Some(range) = reference
            .range()
            .filter(|range| range.end <= self.text.len())
        else {
            return Err(ReadError::OutOfRange {
                what: what(),
                start: start.into(),
                len: len.into(),
                table: "metadata text",
                limit: self.text.len() as u64,
            });
        };
        self.at = range.end;
        let bytes = &self.text[range];
        std::str::from_utf8(bytes)
            .map_err(|_| ReadError::IndexMalformed(format!("{} is not UTF-8", what())))?;
        Ok(bytes)
    }
}

/// Owners are sorted by digest and own non-empty contiguous ranges that
/// cover every entry in order.
fn check_owners(index: &ArchivedIndex) -> Result<(), ReadError> {
    let mut next_entry = 0usize;
    let mut previous: Option<&[u8; 32]> = None;
    for owner in index.owners.iter() {
        if previous.is_some_and(|previous| previous >= &owner.digest) {
            return Err(ReadError::IndexMalformed(
                "owners are not sorted by digest".into(),
            ));
        }
        previous = Some(&owner.digest);
        let range = owner.entries.range().unwrap_or(usize::MAX..usize::MAX);
        if range.start == next_entry && range.end > index.entries.len() {
            return Err(ReadError::OutOfRange {
                what: format!("the entries of owner {}", Digest(owner.digest)),
                start: owner.entries.start.to_native().into(),
                len: owner.entries.len.to_native().into(),
                table: "entry table",
                limit: index.entries.len() as u64,
            });
        }
        if range.start != next_entry || range.is_empty() {
            return Err(ReadError::IndexMalformed(format!(
                "owner {} does not own a contiguous range of entries",
                Digest(owner.digest)
            )));
        }
        next_entry = range.end;
    }
    if next_entry != index.entries.len() {
        return Err(ReadError::IndexMalformed(format!(
            "owners cover {next_entry} entries of {}",
            index.entries.len()
        )));
    }
    Ok(())
}

/// The metadata text holds, back to back: the owner labels in owner order,
/// the producer name and version, then each label's key and value; labels
/// are sorted by key, without duplicates.
fn check_meta(index: &ArchivedIndex) -> Result<(), ReadError> {
    let mut text = MetaCursor {
        text: index.meta_strings.as_slice(),
        at: 0,
    };
    for (position, owner) in index.owners.iter().enumerate() {
        text.next(&owner.label, || format!("owner {position}'s label"))?;
    }
    text.next(&index.producer_name, || "the producer name".to_owned())?;
    text.next(&index.producer_version, || {
        "the producer version".to_owned()
    })?;
    let mut previous: Option<&[u8]> = None;
    for (position, label) in index.labels.iter().enumerate() {
        let key = text.next(&label.key, || format!("label {position}'s key"))?;
        text.next(&label.value, || format!("label {position}'s value"))?;
        if previous.is_some_and(|previous| previous >= key) {
            return Err(ReadError::IndexMalformed(
                "labels are not sorted by key without duplicates".into(),
            ));
        }
        previous = Some(key);
    }
    if text.at != text.text.len() {
        return Err(ReadError::IndexMalformed(format!(
            "the metadata text ends at {}, its table at {}",
            text.at,
            text.text.len()
        )));
    }
    Ok(())
}
