//! In-memory entries: an append-only arena plus a lock-free, insert-only
//! hash index.
//!
//! The arena (`boxcar::Vec`) gives every instance a stable address and an
//! index that is its insertion sequence number, which is what makes
//! `snapshot` O(1) and `delta` O(new). Neither the arena nor the index ever
//! removes anything: eviction (see `memory.rs`) drops an instance's payloads
//! (its `Body`, behind a lock of its own), never the instance, so every
//! index cell keeps pointing at a live instance with the same identity.
//!
//! The index maps the hash of `(owner, key)` to *targets*: arena indices of
//! in-memory instances, and image entries promoted after their first hit (so
//! that a hot image-backed lookup does not binary-search the image again).
//! It is an open-addressing table with linear probing whose cells are written
//! once, only by the cache's single writer (everything that writes holds the
//! cache's writer lock), and read without any lock or shared write: a lookup
//! touches no cache line that another lookup writes, so lookups scale with
//! threads. When the table fills up to half, the writer copies it into one
//! twice as large and publishes that; readers still on the old one finish on
//! it. Old tables are kept until the cache is dropped (at most as much memory
//! again as the current table), which is what makes the lock-free read safe
//! without reference counting.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::instance::Instance;
use crate::{Digest, Key};

/// `(owner, key)`, for maps keyed by an entry's identity.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct SlotKey {
    pub(crate) owner: Digest,
    pub(crate) key: Key,
}

impl SlotKey {
    pub(crate) fn new(owner: &Digest, key: &Key) -> SlotKey {
        SlotKey {
            owner: *owner,
            key: *key,
        }
    }
}

fn fold(bytes: &[u8; 32]) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[..8]);
    u64::from_le_bytes(word)
}

/// The index hash of `(owner, key)`: both are BLAKE3 outputs, so 8 bytes of
/// each, mixed, are as good as any hash.
pub(crate) fn index_hash(owner: &Digest, key: &Key) -> u64 {
    fold(&key.digest().0) ^ fold(&owner.0).rotate_left(29)
}

/// What an index cell points at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Target {
    /// An arena index.
    Memory(usize),
    /// Entry `entry` of layer `layer`.
    Image { layer: usize, entry: usize },
}

const EMPTY: u64 = 0;
const IMAGE_BIT: u64 = 1 << 63;

impl Target {
    fn encode(self) -> Option<u64> {
        match self {
            Target::Memory(index) => {
                let word = u64::try_from(index).ok()?.checked_add(1)?;
                (word & IMAGE_BIT == 0).then_some(word)
            }
            Target::Image { layer, entry } => {
                let layer = u32::try_from(layer).ok().filter(|l| *l < 1 << 31)?;
                let entry = u32::try_from(entry).ok()?;
                Some(IMAGE_BIT | u64::from(layer) << 32 | u64::from(entry))
            }
        }
    }

    fn decode(word: u64) -> Target {
        if word & IMAGE_BIT == 0 {
            Target::Memory((word - 1) as usize)
        } else {
            Target::Image {
                layer: ((word >> 32) & 0x7fff_ffff) as usize,
                entry: (word & 0xffff_ffff) as usize,
            }
        }
    }
}

/// One index cell: written once (hash first, then target with release).
#[derive(Default)]
struct Cell {
    hash: AtomicU64,
    target: AtomicU64,
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

    /// The targets stored under `hash` (and a few colliding ones), in
    /// insertion order.
    fn probe(&self, hash: u64) -> impl Iterator<Item = Target> + '_ {
        let start = hash as usize & self.mask;
        (0..self.cells.len())
            .map(move |step| &self.cells[(start + step) & self.mask])
            .map(|cell| (cell.target.load(Ordering::Acquire), cell))
            .take_while(|(word, _)| *word != EMPTY)
            .filter(move |(_, cell)| cell.hash.load(Ordering::Relaxed) == hash)
            .map(|(word, _)| Target::decode(word))
    }

    /// Writes `(hash, word)` into the first empty cell. Single writer only.
    fn put(&self, hash: u64, word: u64) {
        let start = hash as usize & self.mask;
        for step in 0..self.cells.len() {
            let cell = &self.cells[(start + step) & self.mask];
            if cell.target.load(Ordering::Relaxed) == EMPTY {
                cell.hash.store(hash, Ordering::Relaxed);
                cell.target.store(word, Ordering::Release);
                return;
            }
        }
        // Unreachable: the table is grown at half load.
    }
}

const FIRST_CAPACITY: usize = 1024;

/// The arena and its index.
pub(crate) struct MemoryStore {
    arena: boxcar::Vec<Instance>,
    /// Every table ever used; the last published one is current.
    tables: boxcar::Vec<Table>,
    current: AtomicUsize,
    /// Cells in use in the current table (writer only; atomic for `Sync`).
    used: AtomicUsize,
}

impl MemoryStore {
    pub(crate) fn new() -> MemoryStore {
        let tables = boxcar::Vec::new();
        let first = tables.push(Table::with_capacity(FIRST_CAPACITY));
        MemoryStore {
            arena: boxcar::Vec::new(),
            tables,
            current: AtomicUsize::new(first),
            used: AtomicUsize::new(0),
        }
    }

    fn table(&self) -> &Table {
        let current = self.current.load(Ordering::Acquire);
        // `current` is only ever set to the index of a pushed table.
        &self.tables[current]
    }

    /// Number of instances ever pushed: the next sequence number.
    pub(crate) fn count(&self) -> usize {
        self.arena.count()
    }

    pub(crate) fn get(&self, index: usize) -> Option<&Instance> {
        self.arena.get(index)
    }

    /// What the index holds for `(owner, key)`: instances and promoted image
    /// entries, in insertion order (callers check the identity of image
    /// targets; memory targets are checked here).
    pub(crate) fn targets<'s>(
        &'s self,
        owner: &'s Digest,
        key: &'s Key,
    ) -> impl Iterator<Item = Target> + 's {
        self.table()
            .probe(index_hash(owner, key))
            .filter(move |target| match *target {
                Target::Memory(index) => self
                    .arena
                    .get(index)
                    .is_some_and(|i| i.key == *key && i.owner == *owner),
                Target::Image { .. } => true,
            })
    }

    /// The newest instance of `(owner, key)` valid in `world` that holds
    /// its payloads (not evicted).
    pub(crate) fn find_resident(&self, owner: &Digest, key: &Key, world: u64) -> Option<&Instance> {
        let mut found = None;
        for target in self.targets(owner, key) {
            if let Target::Memory(index) = target
                && let Some(instance) = self.arena.get(index)
                && instance.is_valid_in(world)
                && instance.is_resident()
            {
                found = Some(instance);
            }
        }
        found
    }

    /// Appends an instance and indexes it. Call only under the writer lock.
    pub(crate) fn push(&self, instance: Instance) -> (usize, &Instance) {
        let hash = index_hash(&instance.owner, &instance.key);
        let at = self.arena.push(instance);
        self.index(hash, Target::Memory(at));
        (at, &self.arena[at])
    }

    /// Adds `target` under `(owner, key)`. Call only under the writer lock.
    pub(crate) fn promote(&self, owner: &Digest, key: &Key, target: Target) {
        self.index(index_hash(owner, key), target);
    }

    fn index(&self, hash: u64, target: Target) {
        let Some(word) = target.encode() else {
            // Beyond the encodable range (2^31 images, 2^32 entries per
            // image): such targets are simply not indexed. Memory indices of
            // that size cannot be allocated.
            return;
        };
        let used = self.used.load(Ordering::Relaxed) + 1;
        let mut table = self.table();
        if used * 2 > table.cells.len() {
            table = self.grow(table);
        }
        table.put(hash, word);
        self.used.store(used, Ordering::Relaxed);
    }

    /// Copies `old` into a table twice as large and publishes it.
    fn grow(&self, old: &Table) -> &Table {
        let bigger = Table::with_capacity(old.cells.len() * 2);
        for cell in old.cells.iter() {
            let word = cell.target.load(Ordering::Relaxed);
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
    use std::sync::Arc;

    use super::*;

    fn instance(owner: Digest, key: Key) -> Instance {
        use super::super::instance::{Artifacts, Body, Origin};
        Instance::new(
            owner,
            Arc::from("test"),
            key,
            String::new(),
            1,
            u64::MAX,
            Vec::new(),
            false,
            Arc::new(Body::new(Artifacts::Owned(Vec::new()), Origin::Compiled)),
        )
    }

    /// Keys whose index hashes collide (same first 8 bytes) stay apart.
    #[test]
    fn colliding_hashes_and_growth_keep_every_entry() {
        let store = MemoryStore::new();
        let owner = Digest([7; 32]);
        let keys: Vec<Key> = (0..3000u32)
            .map(|n| {
                let mut bytes = [0u8; 32];
                bytes[..8].copy_from_slice(&u64::from(n % 3).to_le_bytes());
                bytes[8..12].copy_from_slice(&n.to_le_bytes());
                Key::from_digest(Digest(bytes))
            })
            .collect();
        for key in &keys {
            store.push(instance(owner, *key));
        }
        assert!(store.tables.count() > 1, "the table grew");
        for (n, key) in keys.iter().enumerate() {
            let found = store.find_resident(&owner, key, 1).expect("entry kept");
            assert_eq!(found.key, *key, "entry {n}");
        }
        assert!(store.find_resident(&Digest([8; 32]), &keys[0], 1).is_none());
    }

    #[test]
    fn targets_round_trip() {
        for target in [
            Target::Memory(0),
            Target::Memory(123_456_789),
            Target::Image { layer: 0, entry: 0 },
            Target::Image {
                layer: (1 << 31) - 1,
                entry: u32::MAX as usize,
            },
        ] {
            assert_eq!(Target::decode(target.encode().unwrap()), target);
        }
        assert_eq!(
            Target::Image {
                layer: 1 << 31,
                entry: 0
            }
            .encode(),
            None
        );
    }
}
