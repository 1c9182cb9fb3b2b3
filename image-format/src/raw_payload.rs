//! An image's payload bytes as entries see them: sliced from a plain
//! image's stored region, or from the payload group that holds them
//! (decompressed on first access; see `groups.rs` for the group table and
//! its checks).

use crate::groups::decompress;
use crate::layout::{ArchivedPayloadGroupRecord, GROUP_STORED};
use crate::{Image, ReadError};

impl Image {
    /// The `len` payload bytes at `offset` of the region entries see:
    /// sliced from the stored region of a plain image, or from the group
    /// holding them (decompressed first, once, if it is compressed).
    ///
    /// # Errors
    /// [`ReadError::PayloadGroup`] when the bytes straddle two groups or
    /// their group does not decompress; [`ReadError::PayloadRegion`] when
    /// they lie outside the region.
    pub(crate) fn raw_payload(&self, offset: u64, len: u64) -> Result<&[u8], ReadError> {
        let outside = || ReadError::PayloadRegion {
            start: offset,
            end: offset.saturating_add(len),
            available: self.groups.raw_len,
        };
        let end = offset.checked_add(len).ok_or_else(outside)?;
        if !self.groups.is_grouped() {
            let range = usize::try_from(offset).ok().zip(usize::try_from(end).ok());
            return range
                .and_then(|(start, end)| self.payloads().ok()?.get(start..end))
                .ok_or_else(outside);
        }
        let groups = self.index().payload_groups.as_slice();
        let number = groups
            .partition_point(|group| group.raw.offset.to_native() <= offset)
            .checked_sub(1)
            .ok_or_else(outside)?;
        let group = &groups[number];
        let start = offset - group.raw.offset.to_native();
        let group_len = group.raw.len.to_native();
        if start.saturating_add(len) > group_len {
            return Err(ReadError::PayloadGroup {
                group: number,
                problem: format!(
                    "payload bytes {offset}+{len} run past the group's end at {}",
                    group.raw.offset.to_native().saturating_add(group_len)
                ),
            });
        }
        let bytes = self.group_bytes(number, group)?;
        let range = usize::try_from(start)
            .ok()
            .zip(usize::try_from(start + len).ok());
        range
            .and_then(|(start, end)| bytes.get(start..end))
            .ok_or_else(outside)
    }

    /// The raw bytes of group `number` (`group`): its stored bytes, or its
    /// frame decompressed on first access.
    fn group_bytes(
        &self,
        number: usize,
        group: &ArchivedPayloadGroupRecord,
    ) -> Result<&[u8], ReadError> {
        let stored = self.stored_group(number, group)?;
        if group.encoding.to_native() == GROUP_STORED {
            return Ok(stored);
        }
        let Some(cell) = self.groups.cells.get(number) else {
            return Err(ReadError::PayloadGroup {
                group: number,
                problem: "the group table changed since open".into(),
            });
        };
        let raw_len = group.raw.len.to_native();
        match cell.get_or_init(|| decompress(stored, raw_len)) {
            Ok(bytes) => Ok(bytes.as_slice()),
            Err(problem) => Err(ReadError::PayloadGroup {
                group: number,
                problem: problem.clone(),
            }),
        }
    }

    /// The stored bytes of group `number` (checked at open to lie in the
    /// stored region).
    fn stored_group(
        &self,
        number: usize,
        group: &ArchivedPayloadGroupRecord,
    ) -> Result<&[u8], ReadError> {
        let (offset, len) = (
            group.stored.offset.to_native(),
            group.stored.len.to_native(),
        );
        let range = usize::try_from(offset).ok().zip(
            offset
                .checked_add(len)
                .and_then(|end| usize::try_from(end).ok()),
        );
        range
            .and_then(|(start, end)| self.payloads().ok()?.get(start..end))
            .ok_or_else(|| ReadError::PayloadGroup {
                group: number,
                problem: format!("its stored bytes {offset}+{len} lie outside the stored region"),
            })
    }

    /// Whether the payload region is stored in groups (a compressed image).
    pub fn is_compressed(&self) -> bool {
        self.groups.is_grouped()
    }

    /// Length of the payload region as entries see it: for a compressed
    /// image, what it holds decompressed; else the stored length.
    pub fn raw_payload_len(&self) -> u64 {
        self.groups.raw_len
    }

    /// Number of payload groups (0 for a plain image).
    pub fn payload_group_count(&self) -> usize {
        self.index().payload_groups.len()
    }

    /// How many of this image's compressed groups are held decompressed
    /// now, and their bytes in all: what the image's payloads cost in
    /// memory beyond its embedded or mapped bytes.
    pub fn decompressed(&self) -> (usize, u64) {
        (
            self.groups.decompressed_groups(),
            self.groups.decompressed_len(),
        )
    }
}
