//! [`Image::verify_full`]: every check, whatever was checked before, plus
//! the consistency of the whole index (key order, the dependency index
//! exactly what the entries imply).

use crate::entry::{ArtifactRef, EntryRef};
use crate::layout::ArchivedIndex;
use crate::verify::{check_body, check_index};
use crate::{Digest, Image, ReadError};

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
    /// The first check that fails, e.g. [`ReadError::BodyChecksum`],
    /// [`ReadError::DuplicateKey`], [`ReadError::KeysOutOfOrder`],
    /// [`ReadError::DepNotIndexed`], [`ReadError::DepNotCarried`],
    /// [`ReadError::Overlap`], [`ReadError::OutOfRange`],
    /// [`ReadError::EntryChecksum`] or [`ReadError::PayloadChecksum`].
    pub fn verify_full(&self) -> Result<(), ReadError> {
        check_body(self.storage.head(), self.payloads()?, &self.header)?;
        if self.trusted {
            check_index(self.index_bytes(), &self.header)?;
        }
        self.check_dep_index()?;
        let index = self.index();
        if index.entries.is_empty() {
            check_no_records(index)?;
        }
        crate::partition::check_block_table(index, self.raw_payload_len())?;
        self.blocks.table.set(0);
        for group in 0..crate::partition::group_count(index.blocks.len()) {
            self.blocks.groups.set(group);
        }
        for block in 0..index.blocks.len() {
            crate::partition::check_block(index, block, self.raw_payload_len(), 0)
                .map_err(|(_, error)| error)?;
            self.blocks.blocks.set(block);
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
    ) -> Result<(), ReadError> {
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
                    return Err(ReadError::DepNotCarried {
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
fn check_no_records(index: &ArchivedIndex) -> Result<(), ReadError> {
    let tables = [
        ("dep table", index.deps.len()),
        ("artifact table", index.artifacts.len()),
        ("entry-point table", index.entry_points.len()),
        ("entry text", index.strings.len()),
        ("member table", index.dep_members.len()),
    ];
    match tables.into_iter().find(|(_, len)| *len != 0) {
        Some((table, len)) => Err(ReadError::IndexMalformed(format!(
            "the image has no entries but its {table} holds {len}"
        ))),
        None => Ok(()),
    }
}

/// Within each owner, keys ascend strictly: no (owner, key) twice, and
/// every entry where a lookup looks for it. O(entries).
fn check_key_order(index: &ArchivedIndex) -> Result<(), ReadError> {
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
                    return Err(ReadError::DuplicateKey {
                        first,
                        second: first + 1,
                        owner: Digest(owner.digest),
                        key: Digest(pair[0].key),
                    });
                }
                std::cmp::Ordering::Greater => {
                    return Err(ReadError::KeysOutOfOrder {
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
