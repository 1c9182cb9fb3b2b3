//! No two entries share a record, a byte of text or a byte of payload.
//!
//! Each entry owns contiguous ranges of the dep, artifact and entry-point
//! tables, of the entry text and of the payload region, and consecutive
//! entries' ranges follow each other. Checking that for every entry would
//! take a pass over the entry table, which opening an image must not cost
//! (an open reads the header, the root and the owners, whatever the entry
//! count). So the `blocks` table records where the ranges of entries 0, 64,
//! 128, ... start, and:
//!
//! - the block table is checked in two levels: on the first entry access,
//!   that it starts at zero and that every 64th record (then the end of the
//!   tables) ascends (O(entries / 4096)); on the first access to one of a
//!   group's 4,096 entries, that the group's 64 records ascend up to the
//!   next group's first one;
//! - a block is checked on the first access to one of its entries: its
//!   entries' ranges tile exactly the ranges from its block record to the
//!   next one (the end of each table after the last block), payloads in
//!   ascending order (64 entry records read);
//! - then each entry checks that what it references lies in its own ranges,
//!   each thing once (`entry.rs`).
//!
//! Blocks are disjoint because the block table ascends (two blocks of
//! checked groups are separated by ascending records of one group, or of
//! the first level); entries of a block are disjoint because they tile it. So every entry that passes owns what
//! it reads, and all entry checks together read each record and byte once.
//! A corrupt range in one entry fails the block it is in (64 entries): a
//! miss, never shared bytes.

use crate::layout::{ArchivedBlockRecord, ArchivedIndex, BLOCK_ENTRIES, block_count};
use crate::{Image, ImageError};

/// The start (or end) of a block's ranges, in every table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Position {
    payload: u64,
    strings: u64,
    deps: u64,
    artifacts: u64,
    entry_points: u64,
}

impl Position {
    fn of(block: &ArchivedBlockRecord) -> Position {
        Position {
            payload: block.payload.to_native(),
            strings: u64::from(block.strings.to_native()),
            deps: u64::from(block.deps.to_native()),
            artifacts: u64::from(block.artifacts.to_native()),
            entry_points: u64::from(block.entry_points.to_native()),
        }
    }

    /// The end of every table.
    fn end(index: &ArchivedIndex, payload_len: u64) -> Position {
        Position {
            payload: payload_len,
            strings: index.strings.len() as u64,
            deps: index.deps.len() as u64,
            artifacts: index.artifacts.len() as u64,
            entry_points: index.entry_points.len() as u64,
        }
    }

    /// The record tables by name, with this position in each.
    fn records(&self) -> [(&'static str, u64); 4] {
        [
            ("text", self.strings),
            ("deps", self.deps),
            ("artifacts", self.artifacts),
            ("entry points", self.entry_points),
        ]
    }
}

impl Image {
    /// Checks the block holding entry `entry` (and what of the block table
    /// that relies on) unless done before.
    pub(crate) fn block_checked(&self, entry: usize) -> Result<(), ImageError> {
        let block = entry / BLOCK_ENTRIES;
        if self.block_state.is_set(block) {
            return Ok(());
        }
        let (index, payload_len) = (self.index(), self.header.payload_len);
        if !self.block_table_state.is_set(0) {
            check_block_table_top(index, payload_len)?;
            self.block_table_state.set(0);
        }
        let group = block / GROUP_BLOCKS;
        if !self.block_group_state.is_set(group) {
            check_block_group(index, payload_len, group)?;
            self.block_group_state.set(group);
        }
        check_block(index, block, payload_len)?;
        self.block_state.set(block);
        Ok(())
    }
}

/// Block records per group of the block table: the table is checked in two
/// levels, so that a first access reads O(entries / 4096 + 64) records
/// rather than the whole table.
pub(crate) const GROUP_BLOCKS: usize = 64;

/// Number of groups of the block table.
pub(crate) fn group_count(blocks: usize) -> usize {
    blocks.div_ceil(GROUP_BLOCKS)
}

/// Where block record `number` starts every range; `blocks.len()` stands
/// for the end of every table.
fn position(index: &ArchivedIndex, payload_len: u64, number: usize) -> Position {
    index
        .blocks
        .get(number)
        .map_or_else(|| Position::end(index, payload_len), Position::of)
}

/// The block table's first level, checked once on the first entry access:
/// one record per 64 entries, starting at zero, and every 64th record
/// (then the end of the tables) ascending in every range. O(entries / 4096).
fn check_block_table_top(index: &ArchivedIndex, payload_len: u64) -> Result<(), ImageError> {
    let blocks = index.blocks.as_slice();
    if blocks.len() != block_count(index.entries.len()) {
        return Err(ImageError::IndexMalformed(format!(
            "{} block records for {} entries, expected {}",
            blocks.len(),
            index.entries.len(),
            block_count(index.entries.len())
        )));
    }
    let Some(first) = blocks.first().map(Position::of) else {
        return Ok(());
    };
    for (table, start) in first.records() {
        if start != 0 {
            return Err(ImageError::Overlap(format!(
                "block record 0 starts the {table} at {start}, not at 0"
            )));
        }
    }
    let numbers = (0..blocks.len())
        .step_by(GROUP_BLOCKS)
        .chain(std::iter::once(blocks.len()));
    check_ascending(index, payload_len, numbers)
}

/// Group `group` of the block table, checked on the first access to one of
/// its 4,096 entries: its 64 records, then the next group's first record
/// (or the end of the tables), ascend in every range. With the first level,
/// that makes the ranges of any two blocks in checked groups disjoint.
fn check_block_group(
    index: &ArchivedIndex,
    payload_len: u64,
    group: usize,
) -> Result<(), ImageError> {
    let blocks = index.blocks.len();
    let first = group * GROUP_BLOCKS;
    let last = (first + GROUP_BLOCKS).min(blocks);
    check_ascending(index, payload_len, first..=last)
}

/// The whole block table, for full verification: both levels, every group.
pub(crate) fn check_block_table(index: &ArchivedIndex, payload_len: u64) -> Result<(), ImageError> {
    check_block_table_top(index, payload_len)?;
    (0..group_count(index.blocks.len()))
        .try_for_each(|group| check_block_group(index, payload_len, group))
}

/// Checks that the block records `numbers` (ascending; `blocks.len()` is
/// the end of the tables) start every range at or after the one before.
fn check_ascending(
    index: &ArchivedIndex,
    payload_len: u64,
    numbers: impl Iterator<Item = usize>,
) -> Result<(), ImageError> {
    let mut previous: Option<(usize, Position)> = None;
    for number in numbers {
        let at = position(index, payload_len, number);
        if let Some((before_number, before)) = previous {
            if !at.not_below(&before) {
                return Err(descending(index, number, before_number, at, before));
            }
        }
        previous = Some((number, at));
    }
    Ok(())
}

impl Position {
    /// Whether no coordinate of `self` lies before the same one of `other`.
    fn not_below(&self, other: &Position) -> bool {
        self.payload >= other.payload
            && self.strings >= other.strings
            && self.deps >= other.deps
            && self.artifacts >= other.artifacts
            && self.entry_points >= other.entry_points
    }
}

/// The error for block record `number` (or the end of the tables) that
/// starts a range before block record `before_number` does.
#[cold]
fn descending(
    index: &ArchivedIndex,
    number: usize,
    before_number: usize,
    at: Position,
    before: Position,
) -> ImageError {
    let end = number == index.blocks.len();
    let records = at.records().into_iter().zip(before.records());
    let payloads = (("payloads", at.payload), ("payloads", before.payload));
    let Some(((table, here), (_, from))) = records
        .chain([payloads])
        .find(|((_, here), (_, from))| here < from)
    else {
        return ImageError::Overlap(format!(
            "block record {number} starts before record {before_number}"
        ));
    };
    if end {
        return ImageError::OutOfRange {
            what: format!("block record {before_number}'s {table}"),
            start: from,
            len: 0,
            table: if table == "payloads" {
                "payload region"
            } else {
                "table"
            },
            limit: here,
        };
    }
    ImageError::Overlap(format!(
        "block record {number} starts the {table} at {here}, before block record {before_number} at {from}"
    ))
}

/// Block `block`: its entries' ranges tile the block's ranges exactly, in
/// entry order, payloads ascending. The block table passed its check.
/// O(64 entry records).
pub(crate) fn check_block(
    index: &ArchivedIndex,
    block: usize,
    payload_len: u64,
) -> Result<(), ImageError> {
    let blocks = index.blocks.as_slice();
    let start = blocks
        .get(block)
        .map(Position::of)
        .ok_or(ImageError::EntryOutOfRange {
            index: block * BLOCK_ENTRIES,
            len: index.entries.len(),
        })?;
    let end = blocks
        .get(block + 1)
        .map_or_else(|| Position::end(index, payload_len), Position::of);
    let first = block * BLOCK_ENTRIES;
    let entries = index
        .entries
        .as_slice()
        .get(first..(first + BLOCK_ENTRIES).min(index.entries.len()))
        .unwrap_or_default();
    let mut at = start;
    for (offset, entry) in entries.iter().enumerate() {
        let number = first + offset;
        let spans = [
            ("text", &entry.strings),
            ("deps", &entry.deps),
            ("artifacts", &entry.artifacts),
            ("entry points", &entry.entry_points),
        ];
        let mut next = at;
        let cursors = [
            &mut next.strings,
            &mut next.deps,
            &mut next.artifacts,
            &mut next.entry_points,
        ];
        for ((table, span), cursor) in spans.into_iter().zip(cursors) {
            let span_start = u64::from(span.start.to_native());
            if span_start != *cursor {
                return Err(ImageError::Overlap(format!(
                    "entry {number}'s {table} start at {span_start}, where {} ends at {}",
                    previous_owner(number, first, block),
                    *cursor
                )));
            }
            *cursor = span_start + u64::from(span.len.to_native());
        }
        let payload = entry.payloads.offset.to_native();
        if payload < at.payload {
            return Err(ImageError::Overlap(format!(
                "entry {number}'s payloads start at {payload}, where {} ends at {}",
                previous_owner(number, first, block),
                at.payload
            )));
        }
        next.payload = payload
            .checked_add(entry.payloads.len.to_native())
            .ok_or_else(|| ImageError::OutOfRange {
                what: format!("entry {number}'s payloads"),
                start: payload,
                len: entry.payloads.len.to_native(),
                table: "payload region",
                limit: payload_len,
            })?;
        at = next;
    }
    let last = block + 1 == blocks.len();
    let records = at.records().into_iter().zip(start.records());
    for (((table, here), (_, from)), (_, limit)) in records.zip(end.records()) {
        if last && here > limit {
            return Err(ImageError::OutOfRange {
                what: format!("the {table} of block {block}'s entries"),
                start: from,
                len: here - from,
                table: "table",
                limit,
            });
        }
        if here != limit {
            return Err(ImageError::Overlap(format!(
                "the entries of block {block} end their {table} at {here}, where the next block (or the table) starts at {limit}"
            )));
        }
    }
    if at.payload > end.payload {
        if last {
            return Err(ImageError::OutOfRange {
                what: format!("the payloads of block {block}'s entries"),
                start: start.payload,
                len: at.payload - start.payload,
                table: "payload region",
                limit: end.payload,
            });
        }
        return Err(ImageError::Overlap(format!(
            "the entries of block {block} end their payloads at {}, past {} where the next block starts",
            at.payload, end.payload
        )));
    }
    Ok(())
}

fn previous_owner(number: usize, first: usize, block: usize) -> String {
    if number == first {
        format!("block {block}'s record says the block")
    } else {
        format!("entry {}", number - 1)
    }
}
