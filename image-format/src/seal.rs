//! Sealing a serialized index: computing every checksum stored inside it
//! from the archived bytes, with the very functions the reader checks them
//! with, and writing it in place.
//!
//! Order matters: the member-list checksums first (the group table checksum
//! covers them), then the group table checksum (in the root), then each
//! entry's checksum. The index checksum, which covers the root, goes in the
//! header afterwards (`writer::assemble`).
//!
//! The writer seals what it built; `fuzz_support::forge` seals whatever a
//! test forged (checksums are unkeyed, so anyone can recompute them), which
//! is how the tests show that the structural checks, not the checksums,
//! stop a hostile image.

use crate::WriteError;
use crate::layout::ArchivedIndex;

/// Computes and stores every checksum inside the serialized index `bytes`.
pub(crate) fn seal(bytes: &mut [u8]) -> Result<(), WriteError> {
    let patches = {
        let index = access(bytes)?;
        let base = bytes.as_ptr() as usize;
        index
            .dep_groups
            .iter()
            .map(|group| {
                let members = group
                    .members
                    .range()
                    .and_then(|range| index.dep_members.as_slice().get(range))
                    .unwrap_or_default();
                let checksum = crate::checksum::dep_members_checksum(
                    members.iter().map(|member| member.to_native()),
                );
                (offset_of(base, &group.members_checksum), checksum)
            })
            .collect::<Vec<_>>()
    };
    apply(bytes, &patches);
    let patch = {
        let index = access(bytes)?;
        let base = bytes.as_ptr() as usize;
        let checksum = crate::deps::dep_groups_checksum(index);
        (offset_of(base, &index.dep_groups_checksum), checksum)
    };
    apply(bytes, &[patch]);
    let patches = {
        let index = access(bytes)?;
        let base = bytes.as_ptr() as usize;
        index
            .entries
            .iter()
            .map(|entry| {
                (
                    offset_of(base, &entry.checksum),
                    crate::entry::entry_checksum(index, entry),
                )
            })
            .collect::<Vec<_>>()
    };
    apply(bytes, &patches);
    Ok(())
}

fn access(bytes: &[u8]) -> Result<&ArchivedIndex, WriteError> {
    rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(bytes)
        .map_err(|error| WriteError::Serialize(error.to_string()))
}

/// Position of `field` in the buffer that starts at address `base`.
fn offset_of(base: usize, field: &[u8; 32]) -> usize {
    field.as_ptr() as usize - base
}

fn apply(bytes: &mut [u8], patches: &[(usize, [u8; 32])]) {
    for (offset, checksum) in patches {
        if let Some(field) = bytes.get_mut(*offset..*offset + 32) {
            field.copy_from_slice(checksum);
        }
    }
}
