//! The lock-free `(owner, key)` index of in-memory entries, with removal.
//!
//! The index maps the hash of `(owner, key)` to *targets*: in-memory
//! instances (`Arc<Instance>`), and image entries promoted after their first
//! hit (so that a hot image-backed lookup does not binary-search the image
//! again). It is an open-addressing table with linear probing, written only
//! by the cache's single writer (everything that writes holds the cache's
//! writer lock) and read without any lock: a lookup touches no cache line
//! that another lookup writes, so lookups scale with threads.
//!
//! # Removal and reclamation
//!
//! An evicted entry is taken out of the index: its cell becomes a
//! *tombstone* (probes go past it) and the cell lets go of its `Arc`. A
//! reader may be looking at that cell at the same moment, so the pointer
//! cannot simply be freed; each cell holds its instance in an
//! [`ArcSwapOption`], and the table itself sits in an [`ArcSwap`]: a reader
//! *loads* them (arc-swap's hazard-pointer-like "debts": a reader writes the
//! pointer it is about to use into a slot of its own thread, and a writer
//! that replaces the pointer pays such debts by taking a reference for the
//! reader), so a removal never frees what a lookup is reading, and frees it
//! as soon as no lookup, [`Hit`](crate::Hit) or other holder is left. No
//! `unsafe` here: the reclamation is arc-swap's, a well-kept crate.
//!
//! Tombstones are never reused. When the used cells (live ones and
//! tombstones) pass half the table, the writer builds a fresh table with
//! room for four times the live entries (growing or shrinking it, at least
//! [`FIRST_CAPACITY`] cells), copies the live cells and publishes it; a
//! reader still on the old table finishes on it, and the old table (with
//! the references its cells still hold) is freed when the last such reader
//! leaves. A rebuild copies at most the table, and at least a quarter of a
//! table of inserts separates two rebuilds, so its cost is amortized O(1)
//! per insert, and the index holds at most 8 cells (24 bytes each) per
//! live target, plus a table of [`FIRST_CAPACITY`] cells.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use arc_swap::{ArcSwap, ArcSwapOption};

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

/// What a probe finds under `(owner, key)`.
pub(crate) enum Found<'g> {
    /// An in-memory instance of exactly this `(owner, key)`.
    Memory(&'g Arc<Instance>),
    /// Entry `entry` of layer `layer` (callers check its identity).
    Image { layer: usize, entry: usize },
}

/// A cell's `word`: empty, a tombstone, an instance (in the cell's `entry`)
/// or an encoded image target.
const EMPTY: u64 = 0;
const TOMBSTONE: u64 = 1;
const MEMORY: u64 = 2;
const IMAGE_BIT: u64 = 1 << 63;

/// An image target as a cell word; `None` beyond the encodable range
/// (2^31 images, 2^32 entries per image).
fn encode_image(layer: usize, entry: usize) -> Option<u64> {
    let layer = u32::try_from(layer).ok().filter(|l| *l < 1 << 31)?;
    let entry = u32::try_from(entry).ok()?;
    Some(IMAGE_BIT | u64::from(layer) << 32 | u64::from(entry))
}

fn decode_image(word: u64) -> (usize, usize) {
    (
        ((word >> 32) & 0x7fff_ffff) as usize,
        (word & 0xffff_ffff) as usize,
    )
}

/// One index cell. Written by the single writer: `hash`, then `entry`,
/// then `word` (release), so a reader that sees the word sees the rest.
#[derive(Default)]
struct Cell {
    hash: AtomicU64,
    word: AtomicU64,
    entry: ArcSwapOption<Instance>,
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

    /// The cells a probe for `hash` visits: from its home cell to the
    /// first empty one (at most the whole table).
    fn chain(&self, hash: u64) -> impl Iterator<Item = &Cell> {
        let start = hash as usize & self.mask;
        (0..self.cells.len()).map(move |step| &self.cells[(start + step) & self.mask])
    }

    /// Writes a target into the first empty cell. Single writer only; the
    /// table is rebuilt before it is half full, so there always is one.
    fn put(&self, hash: u64, word: u64, entry: Option<Arc<Instance>>) {
        if let Some(cell) = self
            .chain(hash)
            .find(|cell| cell.word.load(Ordering::Relaxed) == EMPTY)
        {
            cell.hash.store(hash, Ordering::Relaxed);
            cell.entry.store(entry);
            cell.word.store(word, Ordering::Release);
        }
    }
}

/// The smallest table.
pub(crate) const FIRST_CAPACITY: usize = 1024;

/// The index.
pub(crate) struct MemoryStore {
    table: ArcSwap<Table>,
    /// Cells in use in the current table, tombstones included (writer
    /// only; atomic for `Sync`).
    used: AtomicUsize,
    /// Live targets (instances and promoted image entries; writer only).
    live: AtomicUsize,
}

impl MemoryStore {
    pub(crate) fn new() -> MemoryStore {
        MemoryStore {
            table: ArcSwap::from_pointee(Table::with_capacity(FIRST_CAPACITY)),
            used: AtomicUsize::new(0),
            live: AtomicUsize::new(0),
        }
    }

    /// Calls `visit` with every target indexed under `(owner, key)`
    /// (instances of other keys whose hash collides are skipped). Lock-free;
    /// what `visit` is given stays valid for the call (the probe holds the
    /// table and the cell), so a caller keeps an instance by cloning its `Arc`.
    pub(crate) fn probe(&self, owner: &Digest, key: &Key, mut visit: impl FnMut(Found<'_>)) {
        let hash = index_hash(owner, key);
        let table = self.table.load();
        for cell in table.chain(hash) {
            let word = cell.word.load(Ordering::Acquire);
            if word == EMPTY {
                return;
            }
            if word == TOMBSTONE || cell.hash.load(Ordering::Relaxed) != hash {
                continue;
            }
            if word == MEMORY {
                let entry = cell.entry.load();
                if let Some(instance) = &*entry
                    && instance.is(owner, key)
                {
                    visit(Found::Memory(instance));
                }
            } else {
                let (layer, entry) = decode_image(word);
                visit(Found::Image { layer, entry });
            }
        }
    }

    /// Indexes `instance`. Writer lock only.
    pub(crate) fn insert(&self, instance: &Arc<Instance>) {
        let hash = index_hash(&instance.owner, &instance.key);
        self.put(hash, MEMORY, Some(Arc::clone(instance)));
    }

    /// Indexes entry `entry` of layer `layer` under `(owner, key)`. Writer
    /// lock only. A target beyond the encodable range is not indexed (its
    /// lookups take the slow path).
    pub(crate) fn promote(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) {
        if let Some(word) = encode_image(layer, entry) {
            self.put(index_hash(owner, key), word, None);
        }
    }

    /// Whether entry `entry` of layer `layer` is indexed under `(owner, key)`.
    pub(crate) fn is_promoted(&self, owner: &Digest, key: &Key, layer: usize, entry: usize) -> bool {
        let mut found = false;
        self.probe(owner, key, |target| {
            if let Found::Image { layer: l, entry: e } = target {
                found |= (l, e) == (layer, entry);
            }
        });
        found
    }

    /// Takes `instance` out of the index; its cell lets go of its
    /// reference. Writer lock only. Returns whether it was indexed.
    pub(crate) fn remove(&self, instance: &Arc<Instance>) -> bool {
        let hash = index_hash(&instance.owner, &instance.key);
        let table = self.table.load();
        for cell in table.chain(hash) {
            let word = cell.word.load(Ordering::Relaxed);
            if word == EMPTY {
                return false;
            }
            if word == MEMORY
                && cell.hash.load(Ordering::Relaxed) == hash
                && cell
                    .entry
                    .load()
                    .as_ref()
                    .is_some_and(|held| Arc::ptr_eq(held, instance))
            {
                cell.word.store(TOMBSTONE, Ordering::Release);
                cell.entry.store(None);
                self.live.fetch_sub(1, Ordering::Relaxed);
                return true;
            }
        }
        false
    }

    /// Live targets indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Cells of the current table.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.table.load().cells.len()
    }

    fn put(&self, hash: u64, word: u64, entry: Option<Arc<Instance>>) {
        let live = self.live.load(Ordering::Relaxed) + 1;
        let mut used = self.used.load(Ordering::Relaxed) + 1;
        let mut table = self.table.load_full();
        if used * 2 > table.cells.len() {
            table = self.rebuild(&table, live);
            used = live;
        }
        table.put(hash, word, entry);
        self.used.store(used, Ordering::Relaxed);
        self.live.store(live, Ordering::Relaxed);
    }

    /// Copies the live cells of `old` into a table with room for four
    /// times `live` targets and publishes it.
    fn rebuild(&self, old: &Table, live: usize) -> Arc<Table> {
        let capacity = live
            .saturating_mul(4)
            .next_power_of_two()
            .max(FIRST_CAPACITY);
        let fresh = Table::with_capacity(capacity);
        for cell in old.cells.iter() {
            let word = cell.word.load(Ordering::Relaxed);
            if word != EMPTY && word != TOMBSTONE {
                fresh.put(
                    cell.hash.load(Ordering::Relaxed),
                    word,
                    cell.entry.load_full(),
                );
            }
        }
        let fresh = Arc::new(fresh);
        self.table.store(Arc::clone(&fresh));
        fresh
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicU64;

    use super::*;
    use crate::cache::instance::{Artifacts, Body, InstanceParts, Origin};

    fn instance(owner: Digest, key: Key, seq: usize, alive: &Arc<AtomicU64>) -> Arc<Instance> {
        Arc::new(Instance::new(
            InstanceParts {
                owner,
                owner_label: Arc::from("test"),
                key,
                name: String::new(),
                seq,
                min_world: 1,
                max_world: u64::MAX,
                deps: Vec::new(),
                session_dependent: false,
                body: Body::new(Artifacts::Owned(Vec::new()), Origin::Compiled),
            },
            alive,
        ))
    }

    fn found(store: &MemoryStore, owner: &Digest, key: &Key) -> Vec<usize> {
        let mut seqs = Vec::new();
        store.probe(owner, key, |target| {
            if let Found::Memory(instance) = target {
                seqs.push(instance.seq);
            }
        });
        seqs
    }

    /// Keys whose index hashes collide (same first 8 bytes) stay apart.
    fn colliding_keys(count: u32) -> Vec<Key> {
        (0..count)
            .map(|n| {
                let mut bytes = [0u8; 32];
                bytes[..8].copy_from_slice(&u64::from(n % 3).to_le_bytes());
                bytes[8..12].copy_from_slice(&n.to_le_bytes());
                Key::from_digest(Digest(bytes))
            })
            .collect()
    }

    #[test]
    fn colliding_hashes_and_growth_keep_every_entry() {
        let store = MemoryStore::new();
        let alive = Arc::new(AtomicU64::new(0));
        let owner = Digest([7; 32]);
        let keys = colliding_keys(3000);
        for (n, key) in keys.iter().enumerate() {
            store.insert(&instance(owner, *key, n, &alive));
        }
        assert!(store.capacity() > FIRST_CAPACITY, "the table grew");
        for (n, key) in keys.iter().enumerate() {
            assert_eq!(found(&store, &owner, key), [n], "entry {n}");
        }
        assert!(found(&store, &Digest([8; 32]), &keys[0]).is_empty());
        assert_eq!(store.len(), 3000);
    }

    #[test]
    fn removed_entries_are_freed_and_the_table_stays_small() {
        let store = MemoryStore::new();
        let alive = Arc::new(AtomicU64::new(0));
        let owner = Digest([7; 32]);
        let keys: Vec<Key> = (0..100_000u32)
            .map(|n| Key::from_digest(Digest::of(&n.to_le_bytes())))
            .collect();
        let mut held = std::collections::VecDeque::new();
        for (n, key) in keys.iter().enumerate() {
            let entry = instance(owner, *key, n, &alive);
            store.insert(&entry);
            held.push_back(entry);
            // At most 100 held: the oldest is removed.
            if held.len() > 100
                && let Some(oldest) = held.pop_front()
            {
                assert!(store.remove(&oldest));
                assert!(!store.remove(&oldest), "removed once");
            }
        }
        assert_eq!(store.len(), 100);
        assert_eq!(alive.load(Ordering::Relaxed), 100, "every removed entry freed");
        assert_eq!(store.capacity(), FIRST_CAPACITY, "tombstones do not grow it");
        for (n, key) in keys.iter().enumerate() {
            let expected: &[usize] = if n >= 100_000 - 100 { &[n] } else { &[] };
            assert_eq!(found(&store, &owner, key), expected, "entry {n}");
        }
        drop(held);
        drop(store);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_reader_keeps_what_it_found_after_removal() {
        let store = MemoryStore::new();
        let alive = Arc::new(AtomicU64::new(0));
        let (owner, key) = (Digest([1; 32]), colliding_keys(1)[0]);
        let entry = instance(owner, key, 0, &alive);
        store.insert(&entry);
        drop(entry);
        let mut kept = None;
        store.probe(&owner, &key, |target| {
            if let Found::Memory(instance) = target {
                kept = Some(Arc::clone(instance));
            }
        });
        let kept = kept.expect("found");
        assert!(store.remove(&kept));
        assert_eq!(alive.load(Ordering::Relaxed), 1, "the reader's reference");
        drop(kept);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn image_targets_round_trip() {
        for (layer, entry) in [(0, 0), (12, 123_456), ((1 << 31) - 1, u32::MAX as usize)] {
            let word = encode_image(layer, entry).expect("encodable");
            assert_ne!(word, EMPTY);
            assert_ne!(word, TOMBSTONE);
            assert_ne!(word, MEMORY);
            assert_eq!(decode_image(word), (layer, entry));
        }
        assert_eq!(encode_image(1 << 31, 0), None);
        let store = MemoryStore::new();
        let (owner, key) = (Digest([1; 32]), colliding_keys(1)[0]);
        store.promote(&owner, &key, 3, 9);
        assert!(store.is_promoted(&owner, &key, 3, 9));
        assert!(!store.is_promoted(&owner, &key, 3, 8));
    }
}
