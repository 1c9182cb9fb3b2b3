//! Writing a compressed payload region (feature `compress`): the payloads
//! laid out as for a plain image, cut into groups (one per owner, split at
//! entry boundaries past [`GROUP_SPLIT`]), each compressed into one zstd
//! frame or stored as is (see `groups.rs` for what a reader checks).

use crate::WriteError;
use crate::groups::{GROUP_SPLIT, MAX_COMPRESSION_RATIO, MAX_GROUP_LEN};
use crate::layout::{GROUP_STORED, GROUP_ZSTD, Index, PayloadGroupRecord, PayloadSpan};
use crate::writer::{align_up, too_large_payloads};

/// Compresses the payload region `payloads` (each at its offset in a region
/// of `payload_len` bytes) in groups at zstd `level`, records the groups in
/// `index`, and returns each group's stored bytes with their offset in the
/// stored region, in order.
pub(crate) fn compress(
    index: &mut Index,
    payloads: &[(u64, &[u8])],
    payload_len: u64,
    level: i32,
) -> Result<Vec<(u64, Vec<u8>)>, WriteError> {
    let raw_len = usize::try_from(payload_len).map_err(|_| too_large_payloads())?;
    let mut raw = vec![0u8; raw_len];
    for (offset, bytes) in payloads {
        let start = *offset as usize;
        raw[start..start + bytes.len()].copy_from_slice(bytes);
    }
    let mut frames = Vec::new();
    let mut stored_at = 0u64;
    for (start, end) in boundaries(index, payload_len) {
        let group = &raw[start as usize..end as usize];
        let frame = zstd::bulk::compress(group, level).map_err(|error| WriteError::Compress {
            group: frames.len(),
            message: error.to_string(),
        })?;
        let raw_len = end - start;
        let worth_it = (frame.len() as u64) < raw_len
            && raw_len <= (frame.len() as u64).saturating_mul(MAX_COMPRESSION_RATIO)
            && raw_len <= MAX_GROUP_LEN;
        let (encoding, stored) = if worth_it {
            (GROUP_ZSTD, frame)
        } else {
            (GROUP_STORED, group.to_vec())
        };
        let offset = align_up(stored_at).ok_or_else(too_large_payloads)?;
        stored_at = offset + stored.len() as u64;
        index.payload_groups.push(PayloadGroupRecord {
            raw: PayloadSpan {
                offset: start,
                len: raw_len,
            },
            stored: PayloadSpan {
                offset,
                len: stored.len() as u64,
            },
            encoding,
            flags: 0,
        });
        frames.push((offset, stored));
    }
    Ok(frames)
}

/// Where the groups of the raw payload region start and end: a new group
/// at each owner's first entry and at the first entry past `GROUP_SPLIT`
/// bytes of its group, at the first multiple of 64 after what the entries
/// before it hold. No group is empty.
fn boundaries(index: &Index, payload_len: u64) -> Vec<(u64, u64)> {
    let mut groups = Vec::new();
    let mut start = 0u64;
    let mut held_to = 0u64;
    let mut owner = None;
    for entry in &index.entries {
        let new_owner = owner.is_some_and(|owner| owner != entry.owner);
        if new_owner || held_to - start >= GROUP_SPLIT {
            let boundary = align_up(held_to).unwrap_or(u64::MAX).min(payload_len);
            if boundary > start {
                groups.push((start, boundary));
                start = boundary;
            }
        }
        owner = Some(entry.owner);
        held_to = held_to.max(entry.payloads.offset + entry.payloads.len);
    }
    if payload_len > start {
        groups.push((start, payload_len));
    }
    groups
}
