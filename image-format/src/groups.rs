//! Compressed payload regions: the payload region entries see, stored in
//! groups, each as is or as one zstd frame, decompressed once on first
//! access.
//!
//! A plain image stores its payload region as entries see it, and a payload
//! is a slice of the embedded or mapped bytes. A compressed image keeps its
//! index as it is (entries, artifacts and their offsets, in the region as
//! entries see it: its *raw* region) and stores the raw region in groups,
//! listed in the index (`Index::payload_groups`): each group is a range of
//! the raw region, stored either as is or as one zstd frame. The writer
//! makes a group of each owner's payloads (so, for a library built for
//! several targets, one per target), split at entry boundaries past
//! [`GROUP_SPLIT`] bytes. Opening and looking up still touch the index only;
//! the first access to a payload of a compressed group decompresses the
//! group, once per [`Image`], into a 64-byte-aligned buffer the image keeps
//! for as long as it lives, and every payload of the group is then borrowed
//! from that buffer (zero-copy, as from a plain image). A process that uses
//! one target's entries holds that target's payloads and no other.
//!
//! # Hostile input
//!
//! The group table is covered by the index checksum and checked at open in
//! O(groups): the groups tile the raw region from 0 (each starting at a
//! multiple of 64), and their stored bytes tile the stored region, each at
//! the first multiple of 64 after the previous one. A group stored as is
//! has as many stored bytes as raw ones; a compressed group declares at
//! most [`MAX_COMPRESSION_RATIO`] raw bytes per stored byte and at most
//! [`MAX_GROUP_LEN`] in all. Decompression allocates the declared raw
//! length (and a window of at most that, rounded up to a power of two),
//! reads each stored byte once, and fails unless the frame decodes to
//! exactly the declared length. So a reader of a compressed image allocates
//! at most the bound of a plain one plus, per group it decompresses, three
//! times its raw length, itself at most [`MAX_COMPRESSION_RATIO`] times the
//! group's stored bytes. What a decompressed group holds is checked as a
//! plain payload is: each payload's BLAKE3 on its first access. A group that
//! fails to decompress fails every payload in it, on every access, and no
//! other.

use std::sync::OnceLock;

use rkyv::util::AlignedVec;

use crate::header::{Header, REGION_ALIGN};
use crate::layout::{ArchivedIndex, ArchivedPayloadGroupRecord, GROUP_STORED, GROUP_ZSTD};
use crate::{Image, ReadError};

/// The most raw bytes a compressed group may declare per stored byte. The
/// writer stores a group that compresses better than this as is.
pub const MAX_COMPRESSION_RATIO: u64 = 1024;

/// The most raw bytes one compressed group may declare.
pub const MAX_GROUP_LEN: u64 = 1 << 32;

/// Raw bytes past which the writer starts a new group at the next entry of
/// the same owner: the most a first access decompresses, but for a single
/// entry larger than this.
#[cfg_attr(not(feature = "compress"), allow(dead_code, reason = "the writer's"))]
pub const GROUP_SPLIT: u64 = 8 << 20;

/// Alignment of a decompressed group's buffer: the region alignment, so
/// that every payload in it stays 64-byte aligned.
const BUFFER_ALIGN: usize = 64;
const _: () = assert!(BUFFER_ALIGN == REGION_ALIGN);

/// A decompressed group, or why it could not be decompressed.
type Cell = OnceLock<Result<AlignedVec<BUFFER_ALIGN>, String>>;

/// The groups of an opened image: the length of its raw payload region,
/// and one cell per group for its decompressed bytes.
pub(crate) struct Groups {
    /// Length of the payload region entries see.
    pub(crate) raw_len: u64,
    cells: Box<[Cell]>,
}

impl Groups {
    /// Checks the group table of `index` against `header` (see the module
    /// docs), in O(groups).
    pub(crate) fn check(index: &ArchivedIndex, header: &Header) -> Result<Groups, ReadError> {
        let groups = index.payload_groups.as_slice();
        if groups.is_empty() {
            return Ok(Groups {
                raw_len: header.payload_len,
                cells: Box::default(),
            });
        }
        let align = REGION_ALIGN as u64;
        let mut raw_at = 0u64;
        let mut stored_at = 0u64;
        for (number, group) in groups.iter().enumerate() {
            let bad = |problem: String| ReadError::PayloadGroup {
                group: number,
                problem,
            };
            let (raw_offset, raw_len) = (group.raw.offset.to_native(), group.raw.len.to_native());
            let (stored_offset, stored_len) = (
                group.stored.offset.to_native(),
                group.stored.len.to_native(),
            );
            if group.flags.to_native() != 0 {
                return Err(bad("reserved flags are set".into()));
            }
            if raw_offset != raw_at || raw_len == 0 {
                return Err(bad(format!(
                    "it covers raw bytes {raw_offset}+{raw_len}, where the raw region continues at {raw_at} (groups tile it, none empty)"
                )));
            }
            if !raw_offset.is_multiple_of(align) {
                return Err(bad(format!(
                    "its raw bytes start at {raw_offset}, not a multiple of {align}"
                )));
            }
            let next_stored = stored_at.div_ceil(align).saturating_mul(align);
            let stored_end = stored_offset
                .checked_add(stored_len)
                .filter(|&end| stored_offset == next_stored && end <= header.payload_len);
            let Some(stored_end) = stored_end else {
                return Err(bad(format!(
                    "its stored bytes {stored_offset}+{stored_len} are not at {next_stored} within the {} stored bytes",
                    header.payload_len
                )));
            };
            match group.encoding.to_native() {
                GROUP_STORED if stored_len != raw_len => {
                    return Err(bad(format!(
                        "stored as is, it has {stored_len} stored bytes for {raw_len} raw ones"
                    )));
                }
                GROUP_STORED => {}
                GROUP_ZSTD => {
                    let limit = stored_len
                        .saturating_mul(MAX_COMPRESSION_RATIO)
                        .min(MAX_GROUP_LEN);
                    if raw_len > limit {
                        return Err(bad(format!(
                            "it declares {raw_len} raw bytes for {stored_len} compressed ones: more than {limit}, the most this reader decompresses"
                        )));
                    }
                }
                other => return Err(bad(format!("unknown encoding {other}"))),
            }
            raw_at = raw_offset.saturating_add(raw_len);
            stored_at = stored_end;
        }
        if stored_at != header.payload_len {
            return Err(ReadError::PayloadGroup {
                group: groups.len() - 1,
                problem: format!(
                    "the groups' stored bytes end at {stored_at}, the stored region at {}",
                    header.payload_len
                ),
            });
        }
        Ok(Groups {
            raw_len: raw_at,
            cells: groups.iter().map(|_| OnceLock::new()).collect(),
        })
    }

    /// Whether the payload region is stored in groups.
    pub(crate) fn is_grouped(&self) -> bool {
        !self.cells.is_empty()
    }

    /// Bytes held decompressed now, over every group.
    pub(crate) fn decompressed_len(&self) -> u64 {
        self.cells
            .iter()
            .filter_map(|cell| cell.get())
            .filter_map(|bytes| bytes.as_ref().ok())
            .map(|bytes| bytes.len() as u64)
            .sum()
    }

    /// Number of groups decompressed so far.
    pub(crate) fn decompressed_groups(&self) -> usize {
        self.cells
            .iter()
            .filter(|cell| cell.get().is_some_and(Result::is_ok))
            .count()
    }
}

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

/// Decompresses one zstd frame of exactly `raw_len` bytes into a fresh
/// 64-byte-aligned buffer. Allocates `raw_len` bytes and a window of at most
/// `raw_len` rounded up to a power of two; fails, never panics, on any
/// other input.
fn decompress(frame: &[u8], raw_len: u64) -> Result<AlignedVec<BUFFER_ALIGN>, String> {
    let len = usize::try_from(raw_len)
        .map_err(|_| format!("{raw_len} raw bytes do not fit this machine's memory"))?;
    // At most `MAX_COMPRESSION_RATIO` times the frame and `MAX_GROUP_LEN`
    // (checked at open).
    let mut out = AlignedVec::<BUFFER_ALIGN>::with_capacity(len);
    out.resize(len, 0);
    let mut decoder = ruzstd::decoding::FrameDecoder::new();
    decoder.set_max_window_size(raw_len.max(1 << 10).next_power_of_two());
    // ruzstd is safe code that returns errors on malformed frames; the
    // unwind guard keeps even a bug of its from crashing a reader.
    let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        decoder.decode_all(frame, out.as_mut_slice())
    }));
    match decoded {
        Ok(Ok(written)) if written == len => Ok(out),
        Ok(Ok(written)) => Err(format!(
            "its frame decompresses to {written} bytes, the group declares {raw_len}"
        )),
        Ok(Err(error)) => Err(format!("its zstd frame does not decompress: {error}")),
        Err(_) => Err("the zstd decoder failed on its frame".into()),
    }
}
