//! Writing a compressed payload region (feature `compress`): the payloads
//! laid out as for a plain image, cut into groups (of one owner each, split
//! at entry boundaries so that none passes [`GROUP_SPLIT`] but for a single
//! larger entry), each compressed into one zstd
//! frame or stored as is (see `groups.rs` for what a reader checks). The
//! groups are compressed in parallel, on as many threads as the machine
//! offers: high zstd levels are slow, and a build script waits for them.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::WriteError;
use crate::groups::{GROUP_SPLIT, MAX_COMPRESSION_RATIO, MAX_GROUP_LEN};
use crate::header::align_up;
use crate::layout::{GROUP_STORED, GROUP_ZSTD, Index, PayloadGroupRecord, PayloadSpan};

/// A group's frame, or why zstd could not make it.
type Frame = Result<Vec<u8>, String>;

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
    let raw_len =
        usize::try_from(payload_len).map_err(|_| WriteError::payload_region_too_large())?;
    let mut raw = vec![0u8; raw_len];
    for (offset, bytes) in payloads {
        let start = *offset as usize;
        raw[start..start + bytes.len()].copy_from_slice(bytes);
    }
    let bounds = boundaries(index, payload_len, GROUP_SPLIT);
    let groups: Vec<&[u8]> = bounds
        .iter()
        .map(|&(start, end)| &raw[start as usize..end as usize])
        .collect();
    let compressed = compress_all(&groups, level);
    let mut frames = Vec::with_capacity(groups.len());
    let mut stored_at = 0u64;
    for (number, (group, frame)) in groups.iter().zip(compressed).enumerate() {
        let frame = frame.map_err(|message| WriteError::Compress {
            group: number,
            message,
        })?;
        let raw_len = group.len() as u64;
        let worth_it = (frame.len() as u64) < raw_len
            && raw_len <= (frame.len() as u64).saturating_mul(MAX_COMPRESSION_RATIO)
            && raw_len <= MAX_GROUP_LEN;
        let (encoding, stored) = if worth_it {
            (GROUP_ZSTD, frame)
        } else {
            (GROUP_STORED, group.to_vec())
        };
        let offset = align_up(stored_at).ok_or_else(WriteError::payload_region_too_large)?;
        stored_at = offset + stored.len() as u64;
        index.payload_groups.push(PayloadGroupRecord {
            raw: PayloadSpan {
                offset: bounds[number].0,
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

/// Each of `groups` compressed into one zstd frame at `level`, in order;
/// on up to as many threads as the machine offers, each taking the next
/// group not yet taken. The frames do not depend on the threads: each is
/// the single-threaded frame of its group.
fn compress_all(groups: &[&[u8]], level: i32) -> Vec<Frame> {
    let threads = std::thread::available_parallelism()
        .map_or(1, usize::from)
        .min(groups.len());
    let one = |group: &[u8]| zstd::bulk::compress(group, level).map_err(|e| e.to_string());
    if threads <= 1 {
        return groups.iter().map(|group| one(group)).collect();
    }
    let next = AtomicUsize::new(0);
    let mut frames: Vec<Option<Frame>> = vec![None; groups.len()];
    std::thread::scope(|scope| {
        let workers: Vec<_> = (0..threads)
            .map(|_| {
                scope.spawn(|| {
                    let mut done = Vec::new();
                    loop {
                        let number = next.fetch_add(1, Ordering::Relaxed);
                        let Some(group) = groups.get(number) else {
                            return done;
                        };
                        done.push((number, one(group)));
                    }
                })
            })
            .collect();
        for worker in workers {
            match worker.join() {
                Ok(done) => {
                    for (number, frame) in done {
                        frames[number] = Some(frame);
                    }
                }
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
    });
    frames
        .into_iter()
        .map(|frame| frame.unwrap_or_else(|| Err("no worker compressed it".into())))
        .collect()
}

/// Where the groups of the raw payload region start and end: a new group
/// at each owner's first entry, and at each entry that would take its
/// group past `split` bytes, at the first multiple of 64 after what the
/// entries before it hold. No group is empty, and none is larger than
/// `split` (rounded up to 64) but for one holding a single entry larger.
fn boundaries(index: &Index, payload_len: u64, split: u64) -> Vec<(u64, u64)> {
    let mut groups = Vec::new();
    let mut start = 0u64;
    let mut held_to = 0u64;
    let mut owner = None;
    for entry in &index.entries {
        let new_owner = owner.is_some_and(|owner| owner != entry.owner);
        let end = held_to.max(entry.payloads.offset + entry.payloads.len);
        if new_owner || end - start > split {
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
