//! The index of image entries promoted after their first hit: a lookup of
//! a hot image-backed entry finds it here instead of binary-searching the
//! image again.
//!
//! Promotions are never removed (layers are never evicted), so this index
//! needs no reclamation and its reads no atomic read-modify-write: an
//! open-addressing table with linear probing, whose cells are written once,
//! only by the cache's single writer (under its writer lock), and read
//! without any lock. When the table fills up to half, the writer copies it
//! into one twice as large and publishes that; readers still on the old
//! one finish on it. Old tables are kept until the cache is dropped (at
//! most as much memory again as the current table).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::store::index_hash;
use crate::{Digest, Key};

const EMPTY: u64 = 0;
const IMAGE_BIT: u64 = 1 << 63;

/// `(layer, entry)` as a cell word; `None` beyond the encodable range
/// (2^31 images, 2^32 entries per image).
fn encode(layer: usize, entry: usize) -> Option<u64> {
    let layer = u32::try_from(layer).ok().filter(|l| *l < 1 << 31)?;
    let entry = u32::try_from(entry).ok()?;
    Some(IMAGE_BIT | u64::from(layer) << 32 | u64::from(entry))
}

fn decode(word: u64) -> (usize, usize) {
    (
        ((word >> 32) & 0x7fff_ffff) as usize,
        (word & 0xffff_ffff) as usize,
    )
}

/// One cell: written once (hash first, then the word with release).
#[derive(Default)]
struct Cell {
    hash: AtomicU64,
    word: AtomicU64,
}

struct Table {
    cells: Box<[Cell]>,
    mask: usize,
}

impl Table {
    fn with_capacity(capacity: usize) -> Table {
        Table {
            cells: (0..capacity).map(|_| Cell::default()).collect(),
            mask: capacity - 1,
        }
    }

    /// The words stored under `hash`, in insertion order.
    fn probe(&self, hash: u64) -> impl Iterator<Item = u64> + '_ {
        let start = hash as usize & self.mask;
        (0..self.cells.len())
            .map(move |step| &self.cells[(start + step) & self.mask])
            .map(|cell| (cell.word.load(Ordering::Acquire), cell))
            .take_while(|(word, _)| *word != EMPTY)
            .filter(move |(_, cell)| cell.hash.load(Ordering::Relaxed) == hash)
            .map(|(word, _)| word)
    }

    /// Writes `(hash, word)` into the first empty cell. Single writer only;
    /// the table is grown at half load, so there always is one.
    fn put(&self, hash: u64, word: u64) {
        if let Some(cell) = (0..self.cells.len())
            .map(|step| &self.cells[(hash as usize + step) & self.mask])
            .find(|cell| cell.word.load(Ordering::Relaxed) == EMPTY)
        {
            cell.hash.store(hash, Ordering::Relaxed);
            cell.word.store(word, Ordering::Release);
        }
    }
}

const FIRST_CAPACITY: usize = 1024;

/// The promoted image entries.
pub(crate) struct Promotions {
    /// Every table ever used; the last published one is current.
    tables: boxcar::Vec<Table>,
    current: AtomicUsize,
    /// Cells in use in the current table (writer only; atomic for `Sync`).
    used: AtomicUsize,
}

impl Promotions {
    pub(crate) fn new() -> Promotions {
        let tables = boxcar::Vec::new();
        let first = tables.push(Table::with_capacity(FIRST_CAPACITY));
        Promotions {
            tables,
            current: AtomicUsize::new(first),
            used: AtomicUsize::new(0),
        }
    }

    fn table(&self) -> &Table {
        // `current` is only ever set to the index of a pushed table.
        &self.tables[self.current.load(Ordering::Acquire)]
    }

    /// The `(layer, entry)` targets promoted under `(owner, key)` (and a
    /// few of colliding keys: callers check each entry's identity), in the
    /// order they were promoted.
    pub(crate) fn targets<'s>(
        &'s self,
        owner: &Digest,
        key: &Key,
    ) -> impl Iterator<Item = (usize, usize)> + 's {
        self.table().probe(index_hash(owner, key)).map(decode)
    }

    /// Whether entry `entry` of layer `layer` is promoted under `(owner, key)`.
    pub(crate) fn contains(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) -> bool {
        self.targets(owner, key).any(|t| t == (layer, entry))
    }

    /// Promotes entry `entry` of layer `layer` under `(owner, key)`. Writer
    /// lock only. A target beyond the encodable range is not promoted (its
    /// lookups take the slow path).
    pub(crate) fn insert(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) {
        let Some(word) = encode(layer, entry) else {
            return;
        };
        let used = self.used.load(Ordering::Relaxed) + 1;
        let mut table = self.table();
        if used * 2 > table.cells.len() {
            table = self.grow(table);
        }
        table.put(index_hash(owner, key), word);
        self.used.store(used, Ordering::Relaxed);
    }

    /// Copies `old` into a table twice as large and publishes it.
    fn grow(&self, old: &Table) -> &Table {
        let bigger = Table::with_capacity(old.cells.len() * 2);
        for cell in old.cells.iter() {
            let word = cell.word.load(Ordering::Relaxed);
            if word != EMPTY {
                bigger.put(cell.hash.load(Ordering::Relaxed), word);
            }
        }
        let at = self.tables.push(bigger);
        self.current.store(at, Ordering::Release);
        &self.tables[at]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_round_trip_and_survive_growth() {
        for (layer, entry) in [(0, 0), (12, 123_456), ((1 << 31) - 1, u32::MAX as usize)] {
            let word = encode(layer, entry).expect("encodable");
            assert_ne!(word, EMPTY);
            assert_eq!(decode(word), (layer, entry));
        }
        assert_eq!(encode(1 << 31, 0), None);
        let promotions = Promotions::new();
        let owner = Digest([1; 32]);
        let keys: Vec<Key> = (0..3000u32)
            .map(|n| Key::from_digest(Digest::of(&n.to_le_bytes())))
            .collect();
        for (n, key) in keys.iter().enumerate() {
            promotions.insert(&owner, key, 1, n);
        }
        assert!(promotions.tables.count() > 1, "the table grew");
        for (n, key) in keys.iter().enumerate() {
            assert!(promotions.contains(&owner, key, 1, n), "{n}");
            assert!(!promotions.contains(&owner, key, 2, n));
        }
    }
}
