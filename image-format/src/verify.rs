//! Checks run at open and by [`Image::verify_full`]: body checksum, index
//! validation, the index checksum, the owner table and the metadata at
//! open; everything, plus the consistency of the whole index, in full.

use crate::checksum::IndexHasher;
use crate::entry::{ArtifactRef, EntryRef};
use crate::header::{HEADER_LEN, Header};
use crate::layout::{ArchivedIndex, ArchivedStrRef, block_count};
use crate::{Digest, Image, ImageError};

/// Checks the BLAKE3 of everything after the header: the rest of `head` up
/// to the payload region, then the payload region.
pub(crate) fn check_body(head: &[u8], payloads: &[u8], header: &Header) -> Result<(), ImageError> {
    let before_payloads = usize::try_from(header.payload_offset)
        .ok()
        .and_then(|end| head.get(HEADER_LEN..end))
        .ok_or(ImageError::PayloadRegion {
            start: header.payload_offset,
            end: header.payload_offset.saturating_add(header.payload_len),
            available: head.len() as u64,
        })?;
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
/// table and the metadata. Returns the entry, artifact, dependency-group
/// and block counts.
///
/// Cost: the bytecheck of fixed-size records (no work per record), the
/// root, and linear in the owners, the labels and the metadata text, each
/// byte of which is hashed and validated once.
pub(crate) fn check_index(
    index_bytes: &[u8],
    header: &Header,
) -> Result<(usize, usize, usize, usize), ImageError> {
    let index = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(index_bytes)
        .map_err(|error| ImageError::IndexValidation(error.to_string()))?;
    if index_checksum(index_bytes, index) != header.index_checksum {
        return Err(ImageError::IndexChecksum);
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
) -> Result<(usize, usize, usize, usize), ImageError> {
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
    Ok(counts(index))
}

fn check_counts(index: &ArchivedIndex, header: &Header) -> Result<(), ImageError> {
    if index.entries.len() as u64 != header.entry_count {
        return Err(ImageError::IndexMalformed(format!(
            "the index holds {} entries, the header says {}",
            index.entries.len(),
            header.entry_count
        )));
    }
    if index.blocks.len() != block_count(index.entries.len()) {
        return Err(ImageError::IndexMalformed(format!(
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
    ) -> Result<&'a [u8], ImageError> {
        let (start, len) = pair(reference);
        if start as usize != self.at {
            return Err(ImageError::Overlap(format!(
                "{} is at {start}+{len}, where the metadata text continues at {}",
                what(),
                self.at
            )));
        }
        let Some(range) = reference
            .range()
            .filter(|range| range.end <= self.text.len())
        else {
            return Err(ImageError::OutOfRange {
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
            .map_err(|_| ImageError::IndexMalformed(format!("{} is not UTF-8", what())))?;
        Ok(bytes)
    }
}

/// Owners are sorted by digest and own non-empty contiguous ranges that
/// cover every entry in order.
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
        let range = owner.entries.range().unwrap_or(usize::MAX..usize::MAX);
        if range.start == next_entry && range.end > index.entries.len() {
            return Err(ImageError::OutOfRange {
                what: format!("the entries of owner {}", Digest(owner.digest)),
                start: owner.entries.start.to_native().into(),
                len: owner.entries.len.to_native().into(),
                table: "entry table",
                limit: index.entries.len() as u64,
            });
        }
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

/// The metadata text holds, back to back: the owner labels in owner order,
/// the producer name and version, then each label's key and value; labels
/// are sorted by key, without duplicates.
fn check_meta(index: &ArchivedIndex) -> Result<(), ImageError> {
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
            return Err(ImageError::IndexMalformed(
                "labels are not sorted by key without duplicates".into(),
            ));
        }
        previous = Some(key);
    }
    if text.at != text.text.len() {
        return Err(ImageError::IndexMalformed(format!(
            "the metadata text ends at {}, its table at {}",
            text.at,
            text.text.len()
        )));
    }
    Ok(())
}

impl Image {
    /// Full verification, whatever was checked before: the body checksum,
    /// the index (again, for a trusted image), the dependency index, the
    /// block table and every block, the key order of every owner, every
    /// entry record, every payload checksum, and that the dependency index
    /// lists exactly what the entries' deps imply. Marks everything verified
    /// on success.
    ///
    /// Cost: linear in the image (each byte hashed once, plus a bit per
    /// member of the dependency index).
    ///
    /// # Errors
    ///
    /// The first check that fails, e.g. [`ImageError::BodyChecksum`],
    /// [`ImageError::DuplicateKey`], [`ImageError::KeysOutOfOrder`],
    /// [`ImageError::DepNotIndexed`], [`ImageError::DepNotCarried`],
    /// [`ImageError::Overlap`], [`ImageError::OutOfRange`],
    /// [`ImageError::EntryChecksum`] or [`ImageError::PayloadChecksum`].
    pub fn verify_full(&self) -> Result<(), ImageError> {
        check_body(self.storage.head(), self.payloads()?, &self.header)?;
        if self.trusted {
            check_index(self.index_bytes(), &self.header)?;
        }
        self.check_dep_index()?;
        let index = self.index();
        if index.entries.is_empty() {
            check_no_records(index)?;
        }
        crate::partition::check_block_table(index, self.header.payload_len)?;
        self.block_table_state.set(0);
        for group in 0..crate::partition::group_count(index.blocks.len()) {
            self.block_group_state.set(group);
        }
        for block in 0..index.blocks.len() {
            crate::partition::check_block(index, block, self.header.payload_len, 0)
                .map_err(|(_, error)| error)?;
            self.block_state.set(block);
        }
        check_key_order(index)?;
        let mut listed = crate::check_state::CheckState::new(index.dep_members.len(), false);
        for entry in 0..self.len() {
            let entry = EntryRef::check(self, entry)?;
            for artifact in entry.artifacts() {
                ArtifactRef::check_payload(&artifact)?;
            }
            for dep in self.dep_slots(entry.index()) {
                listed.set(dep);
            }
        }
        self.check_every_member_listed(&mut listed)
    }

    /// The member slots (positions in the member table) the deps of entry
    /// `index` point at; its check confirmed each slot lists it.
    fn dep_slots(&self, index: usize) -> impl Iterator<Item = usize> + '_ {
        let tables = self.index();
        let deps = tables
            .entries
            .get(index)
            .and_then(|record| record.deps.range())
            .and_then(|range| tables.deps.as_slice().get(range))
            .unwrap_or_default();
        deps.iter().filter_map(move |dep| {
            let group = tables.dep_groups.get(dep.group.to_native() as usize)?;
            let slot = group
                .members
                .start
                .to_native()
                .checked_add(dep.member.to_native())?;
            Some(slot as usize)
        })
    }

    /// Every member slot of the dependency index is pointed at by a dep of
    /// the entry it lists, under the group's (name, fingerprint).
    fn check_every_member_listed(
        &self,
        listed: &mut crate::check_state::CheckState,
    ) -> Result<(), ImageError> {
        let index = self.index();
        for group in index.dep_groups.iter() {
            let Some(range) = group.members.range() else {
                continue;
            };
            for slot in range {
                if !listed.is_set(slot) {
                    let entry = index
                        .dep_members
                        .get(slot)
                        .map_or(usize::MAX, |member| member.to_native() as usize);
                    return Err(ImageError::DepNotCarried {
                        entry,
                        name: self.group_str(&group.name).unwrap_or_default().to_owned(),
                        fingerprint: Digest(group.fingerprint),
                    });
                }
            }
        }
        Ok(())
    }
}

/// An image without entries has no entry records to own anything: every
/// table that entries own is empty.
fn check_no_records(index: &ArchivedIndex) -> Result<(), ImageError> {
    let tables = [
        ("dep table", index.deps.len()),
        ("artifact table", index.artifacts.len()),
        ("entry-point table", index.entry_points.len()),
        ("entry text", index.strings.len()),
        ("member table", index.dep_members.len()),
    ];
    match tables.into_iter().find(|(_, len)| *len != 0) {
        Some((table, len)) => Err(ImageError::IndexMalformed(format!(
            "the image has no entries but its {table} holds {len}"
        ))),
        None => Ok(()),
    }
}

/// Within each owner, keys ascend strictly: no (owner, key) twice, and
/// every entry where a lookup looks for it. O(entries).
fn check_key_order(index: &ArchivedIndex) -> Result<(), ImageError> {
    for owner in index.owners.iter() {
        let Some(range) = owner.entries.range() else {
            continue;
        };
        let entries = index
            .entries
            .as_slice()
            .get(range.clone())
            .unwrap_or_default();
        for (offset, pair) in entries.windows(2).enumerate() {
            let first = range.start + offset;
            match pair[0].key.cmp(&pair[1].key) {
                std::cmp::Ordering::Less => {}
                std::cmp::Ordering::Equal => {
                    return Err(ImageError::DuplicateKey {
                        first,
                        second: first + 1,
                        owner: Digest(owner.digest),
                        key: Digest(pair[0].key),
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(ImageError::KeysOutOfOrder {
                        first,
                        second: first + 1,
                        owner: Digest(owner.digest),
                    });
                }
            }
        }
    }
    Ok(())
}
