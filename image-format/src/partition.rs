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
//! A corrupt range in one entry fails the block it is in (64 entries), a
//! corrupt block record its group (4,096 entries) or the whole table: a
//! miss, never shared bytes. Where a check failed is remembered
//! ([`Failures`]), so that later accesses repeat only the comparison that
//! failed, in O(1), and report the same error.

use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};

use crate::ReadError;
use crate::check_state::CheckState;
use crate::layout::{ArchivedBlockRecord, ArchivedIndex, BLOCK_ENTRIES, block_count};

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

/// Where the checks of the block table and of the blocks failed, so that a
/// later access repeats only the comparison that failed (O(1)) instead of
/// the whole check: a failing first level would otherwise cost
/// O(entries / 4096) on every entry access. Each slot holds 0 (no failure
/// seen) or the failing step + 1.
struct Failures {
    table: AtomicUsize,
    groups: Box<[AtomicU8]>,
    blocks: Box<[AtomicU8]>,
}

impl Failures {
    /// No failure seen yet, for `blocks` block records.
    fn new(blocks: usize) -> Failures {
        let slots = |count: usize| (0..count).map(|_| AtomicU8::new(0)).collect();
        Failures {
            table: AtomicUsize::new(0),
            groups: slots(group_count(blocks)),
            blocks: slots(blocks),
        }
    }
}

/// Runs `check` from the step after the one `slot` remembers failing (the
/// failing comparison first), and remembers where it fails.
fn remembered<S: Slot>(
    slot: Option<&S>,
    check: impl FnOnce(usize) -> Result<(), (usize, ReadError)>,
) -> Result<(), ReadError> {
    let failed = slot.map_or(0, Slot::get);
    check(failed.saturating_sub(1)).map_err(|(step, error)| {
        if let Some(slot) = slot {
            slot.put(step + 1);
        }
        error
    })
}

trait Slot {
    fn get(&self) -> usize;
    fn put(&self, value: usize);
}

impl Slot for AtomicUsize {
    fn get(&self) -> usize {
        self.load(Ordering::Relaxed)
    }
    fn put(&self, value: usize) {
        self.store(value, Ordering::Relaxed);
    }
}

impl Slot for AtomicU8 {
    fn get(&self) -> usize {
        usize::from(self.load(Ordering::Relaxed))
    }
    fn put(&self, value: usize) {
        // Steps never exceed 65 (a group's 64 records and the next one, a
        // block's 64 entries and its end).
        self.store(u8::try_from(value).unwrap_or(u8::MAX), Ordering::Relaxed);
    }
}

/// What of the block table and of the blocks passed its check, and where
/// the checks failed: an image's state of its partition into blocks.
pub(crate) struct BlockChecks {
    /// One bit: the first level of the block table passed its check.
    pub(crate) table: CheckState,
    /// One bit per group of 64 block records: it passed its check.
    pub(crate) groups: CheckState,
    /// One bit per block of 64 entries: its entries tile its ranges.
    pub(crate) blocks: CheckState,
    /// Where the block table's and the blocks' checks failed.
    failures: Failures,
}

impl BlockChecks {
    /// `blocks` block records, none checked, or all when `verified`.
    pub(crate) fn new(blocks: usize, verified: bool) -> BlockChecks {
        BlockChecks {
            table: CheckState::new(1, verified),
            groups: CheckState::new(group_count(blocks), verified),
            blocks: CheckState::new(blocks, verified),
            failures: Failures::new(blocks),
        }
    }

    /// Checks the block of `index` holding entry `entry` (and what of the
    /// block table that relies on) unless done before.
    pub(crate) fn checked(
        &self,
        index: &ArchivedIndex,
        payload_len: u64,
        entry: usize,
    ) -> Result<(), ReadError> {
        let block = entry / BLOCK_ENTRIES;
        if self.blocks.is_set(block) {
            return Ok(());
        }
        let failures = &self.failures;
        if !self.table.is_set(0) {
            remembered(Some(&failures.table), |from| {
                check_block_table_top(index, payload_len, from)
            })?;
            self.table.set(0);
        }
        let group = block / GROUP_BLOCKS;
        if !self.groups.is_set(group) {
            remembered(failures.groups.get(group), |from| {
                check_block_group(index, payload_len, group, from)
            })?;
            self.groups.set(group);
        }
        remembered(failures.blocks.get(block), |from| {
            check_block(index, block, payload_len, from)
        })?;
        self.blocks.set(block);
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
/// (then the end of the tables) ascending in every range. O(entries / 4096),
/// from step `from` of the ascent on.
fn check_block_table_top(
    index: &ArchivedIndex,
    payload_len: u64,
    from: usize,
) -> Result<(), (usize, ReadError)> {
    let blocks = index.blocks.as_slice();
    if blocks.len() != block_count(index.entries.len()) {
        return Err((
            0,
            ReadError::IndexMalformed(format!(
                "{} block records for {} entries, expected {}",
                blocks.len(),
                index.entries.len(),
                block_count(index.entries.len())
            )),
        ));
    }
    let Some(first) = blocks.first().map(Position::of) else {
        return Ok(());
    };
    for (table, start) in first.records() {
        if start != 0 {
            return Err((
                0,
                ReadError::Overlap(format!(
                    "block record 0 starts the {table} at {start}, not at 0"
                )),
            ));
        }
    }
    let numbers = (0..blocks.len())
        .step_by(GROUP_BLOCKS)
        .chain(std::iter::once(blocks.len()));
    check_ascending(index, payload_len, numbers, from)
}

/// Group `group` of the block table, checked on the first access to one of
/// its 4,096 entries: its 64 records, then the next group's first record
/// (or the end of the tables), ascend in every range, from step `from` on.
/// With the first level, that makes the ranges of any two blocks in checked
/// groups disjoint.
fn check_block_group(
    index: &ArchivedIndex,
    payload_len: u64,
    group: usize,
    from: usize,
) -> Result<(), (usize, ReadError)> {
    let blocks = index.blocks.len();
    let first = group * GROUP_BLOCKS;
    let last = (first + GROUP_BLOCKS).min(blocks);
    check_ascending(index, payload_len, first..=last, from)
}

/// The whole block table, for full verification: both levels, every group.
pub(crate) fn check_block_table(index: &ArchivedIndex, payload_len: u64) -> Result<(), ReadError> {
    check_block_table_top(index, payload_len, 0).map_err(|(_, error)| error)?;
    (0..group_count(index.blocks.len())).try_for_each(|group| {
        check_block_group(index, payload_len, group, 0).map_err(|(_, error)| error)
    })
}

/// Checks that the block records `numbers` (ascending; `blocks.len()` is
/// the end of the tables), from the `from`-th on (compared with the one
/// before it), start every range at or after the one before. On failure, the step (position in `numbers`) of
/// the record that starts something too early.
fn check_ascending(
    index: &ArchivedIndex,
    payload_len: u64,
    numbers: impl Iterator<Item = usize>,
    from: usize,
) -> Result<(), (usize, ReadError)> {
    let mut previous: Option<(usize, Position)> = None;
    // Step `from` is compared with the step before it.
    for (step, number) in numbers.enumerate().skip(from.saturating_sub(1)) {
        let at = position(index, payload_len, number);
        if let Some((before_number, before)) = previous
            && !at.not_below(&before)
        {
            return Err((step, descending(index, number, before_number, at, before)));
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
) -> ReadError {
    let end = number == index.blocks.len();
    let records = at.records().into_iter().zip(before.records());
    let payloads = (("payloads", at.payload), ("payloads", before.payload));
    let Some(((table, here), (_, from))) = records
        .chain([payloads])
        .find(|((_, here), (_, from))| here < from)
    else {
        return ReadError::Overlap(format!(
            "block record {number} starts before record {before_number}"
        ));
    };
    if end {
        return ReadError::OutOfRange {
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
    ReadError::Overlap(format!(
        "block record {number} starts the {table} at {here}, before block record {before_number} at {from}"
    ))
}

/// Block `block`: its entries' ranges tile the block's ranges exactly, in
/// entry order, payloads ascending; checked from the entry at offset `from`
/// in the block on (the ones before it passed), `from` being the entry count
/// for the end of the block alone. The block table passed its check.
/// O(64 entry records). On failure, the offset of the failing entry (the
/// entry count for the end of the block).
pub(crate) fn check_block(
    index: &ArchivedIndex,
    block: usize,
    payload_len: u64,
    from: usize,
) -> Result<(), (usize, ReadError)> {
    let blocks = index.blocks.as_slice();
    let Some(start) = blocks.get(block).map(Position::of) else {
        let error = ReadError::EntryOutOfRange {
            index: block * BLOCK_ENTRIES,
            len: index.entries.len(),
        };
        return Err((0, error));
    };
    let end = blocks
        .get(block + 1)
        .map_or_else(|| Position::end(index, payload_len), Position::of);
    let first = block * BLOCK_ENTRIES;
    let entries = index
        .entries
        .as_slice()
        .get(first..(first + BLOCK_ENTRIES).min(index.entries.len()))
        .unwrap_or_default();
    let from = from.min(entries.len());
    // Where the ranges continue after the entries before `from`, which tiled
    // the block up to there.
    let mut at = match from.checked_sub(1).and_then(|before| entries.get(before)) {
        None => start,
        Some(entry) => Position {
            payload: entry
                .payloads
                .offset
                .to_native()
                .saturating_add(entry.payloads.len.to_native()),
            strings: span_end(&entry.strings),
            deps: span_end(&entry.deps),
            artifacts: span_end(&entry.artifacts),
            entry_points: span_end(&entry.entry_points),
        },
    };
    for (offset, entry) in entries.iter().enumerate().skip(from) {
        let number = first + offset;
        let fail = |error| Err((offset, error));
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
                return fail(ReadError::Overlap(format!(
                    "entry {number}'s {table} start at {span_start}, where {} ends at {}",
                    previous_owner(number, first, block),
                    *cursor
                )));
            }
            *cursor = span_end(span);
        }
        let payload = entry.payloads.offset.to_native();
        if payload < at.payload {
            return fail(ReadError::Overlap(format!(
                "entry {number}'s payloads start at {payload}, where {} ends at {}",
                previous_owner(number, first, block),
                at.payload
            )));
        }
        let Some(payload_end) = payload.checked_add(entry.payloads.len.to_native()) else {
            return fail(ReadError::OutOfRange {
                what: format!("entry {number}'s payloads"),
                start: payload,
                len: entry.payloads.len.to_native(),
                table: "payload region",
                limit: payload_len,
            });
        };
        next.payload = payload_end;
        at = next;
    }
    let fail = |error| Err((entries.len(), error));
    let last = block + 1 == blocks.len();
    let records = at.records().into_iter().zip(start.records());
    for (((table, here), (_, from)), (_, limit)) in records.zip(end.records()) {
        if last && here > limit {
            return fail(ReadError::OutOfRange {
                what: format!("the {table} of block {block}'s entries"),
                start: from,
                len: here.saturating_sub(from),
                table: "table",
                limit,
            });
        }
        if here != limit {
            return fail(ReadError::Overlap(format!(
                "the entries of block {block} end their {table} at {here}, where the next block (or the table) starts at {limit}"
            )));
        }
    }
    if at.payload > end.payload {
        if last {
            return fail(ReadError::OutOfRange {
                what: format!("the payloads of block {block}'s entries"),
                start: start.payload,
                len: at.payload.saturating_sub(start.payload),
                table: "payload region",
                limit: end.payload,
            });
        }
        return fail(ReadError::Overlap(format!(
            "the entries of block {block} end their payloads at {}, past {} where the next block starts",
            at.payload, end.payload
        )));
    }
    Ok(())
}

/// The end of a span (start + length, which cannot overflow a `u64`).
fn span_end(span: &crate::layout::ArchivedSpan) -> u64 {
    u64::from(span.start.to_native()) + u64::from(span.len.to_native())
}

fn previous_owner(number: usize, first: usize, block: usize) -> String {
    if number == first {
        format!("block {block}'s record says the block")
    } else {
        format!("entry {}", number - 1)
    }
}
