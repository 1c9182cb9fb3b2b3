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
//! - the block table is checked once, on the first entry access: it starts
//!   at zero and ascends within the tables (O(entries / 64));
//! - a block is checked on the first access to one of its entries: its
//!   entries' ranges tile exactly the ranges from its block record to the
//!   next one (the end of each table after the last block), payloads in
//!   ascending order (64 entry records read);
//! - then each entry checks that what it references lies in its own ranges,
//!   each thing once (`entry.rs`).
//!
//! Blocks are disjoint because the block table ascends; entries of a block
//! are disjoint because they tile it. So every entry that passes owns what
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
    /// Checks the block holding entry `entry` (and the block table) unless
    /// done before.
    pub(crate) fn block_checked(&self, entry: usize) -> Result<(), ImageError> {
        let block = entry / BLOCK_ENTRIES;
        if self.block_state.is_set(block) {
            return Ok(());
        }
        if !self.block_table_state.is_set(0) {
            check_block_table(self.index(), self.header.payload_len)?;
            self.block_table_state.set(0);
        }
        check_block(self.index(), block, self.header.payload_len)?;
        self.block_state.set(block);
        Ok(())
    }
}

/// The block table: one record per 64 entries, starting at zero and
/// ascending within the tables. O(entries / 64).
pub(crate) fn check_block_table(index: &ArchivedIndex, payload_len: u64) -> Result<(), ImageError> {
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
    let mut previous = first;
    let rest = blocks
        .iter()
        .map(Position::of)
        .skip(1)
        .chain(std::iter::once(Position::end(index, payload_len)));
    for (number, at) in rest.enumerate() {
        let what = if number + 1 == blocks.len() {
            "the end of the tables".to_owned()
        } else {
            format!("block record {}", number + 1)
        };
        let records = at.records().into_iter().zip(previous.records());
        for ((table, here), (_, before)) in records {
            if here < before && number + 1 == blocks.len() {
                return Err(ImageError::OutOfRange {
                    what: format!("block record {number}'s {table}"),
                    start: before,
                    len: 0,
                    table: "table",
                    limit: here,
                });
            }
            if here < before {
                return Err(ImageError::Overlap(format!(
                    "{what} puts the {table} at {here}, before {before} where the block before starts"
                )));
            }
        }
        if at.payload < previous.payload {
            return Err(ImageError::Overlap(format!(
                "{what} puts the payloads at {}, before {} where the block before starts",
                at.payload, previous.payload
            )));
        }
        previous = at;
    }
    Ok(())
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
