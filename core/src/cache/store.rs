//! The lock-free `(owner, key)` index of in-memory entries, with removal.
//!
//! The index maps the hash of `(owner, key)` to in-memory instances
//! (`Arc<Instance>`; promoted image entries have their own index,
//! `promoted.rs`). It is a table of buckets, each the head of an immutable
//! chain of nodes, written only by the cache's single writer (everything
//! that writes holds the cache's writer lock) and read without any lock: a
//! lookup touches no cache line that another lookup writes, so lookups
//! scale with threads.
//!
//! # Removal and reclamation
//!
//! A chain is never changed in place: the writer builds the new chain
//! (a new head in front of the old chain for an insert; the nodes before
//! the removed one copied, the rest shared, for a removal) and publishes
//! it. A reader may be walking the old chain at that moment, so nodes
//! cannot simply be freed; each bucket holds its chain in an
//! [`ArcSwapOption`] (arc-swap: a reader publishes the pointer it loads in
//! a slot of its own thread, and a writer that replaces it hands such
//! readers a reference: lock-free loads, and no `unsafe` here). A removed
//! node, and the instance it held, are freed as soon as no lookup,
//! [`Hit`](crate::Hit) or other holder is left. A lookup costs one such
//! load plus the reference count of the instance it returns; a bucket with
//! no chain says so in a plain flag, so a lookup that finds nothing in
//! memory (an image hit, a miss) pays no load at all.
//!
//! # Growth
//!
//! When the targets outnumber the buckets, the writer builds a table with
//! twice as many (sharing every instance), publishes it, and only then
//! empties the old table's buckets. A reader reads the table number before
//! and after its walk and walks again if it changed, so a reader still on
//! the old table never misses an entry that was there throughout. Old
//! tables are kept, empty, until the cache is dropped (a bucket is 8
//! bytes, and their sizes halve: at most as much again as the current
//! table). Tables never shrink: the index holds one bucket per target at
//! the most the cache has held (bounded by its caps), plus one node of
//! about 48 bytes per live target.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use arc_swap::ArcSwapOption;

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

/// One link of a bucket's chain; immutable once published.
struct Node {
    hash: u64,
    instance: Arc<Instance>,
    next: Option<Arc<Node>>,
}

impl Drop for Node {
    /// Frees a long chain iteratively (a recursive drop of a chain of a
    /// hostile length could exhaust the stack).
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(node) = next {
            next = match Arc::try_unwrap(node) {
                Ok(mut alone) => alone.next.take(),
                Err(_) => None, // shared: its owner frees the rest
            };
        }
    }
}

/// The nodes of a chain, from its head.
fn walk(head: Option<&Arc<Node>>) -> impl Iterator<Item = &Node> {
    std::iter::successors(head.map(|n| &**n), |n| n.next.as_deref())
}

/// A chain, and whether it has any node: a plain flag a reader checks
/// before paying for a protected load (the writer sets it after storing a
/// chain, with release, and clears it after storing none).
#[derive(Default)]
struct Bucket {
    chain: ArcSwapOption<Node>,
    occupied: AtomicBool,
}

impl Bucket {
    /// Publishes `chain`. Single writer only.
    fn set(&self, chain: Option<Arc<Node>>) {
        let occupied = chain.is_some();
        self.chain.store(chain);
        self.occupied.store(occupied, Ordering::Release);
    }
}

struct Table {
    buckets: Box<[Bucket]>,
    mask: usize,
}

impl Table {
    fn with_buckets(count: usize) -> Table {
        Table {
            buckets: (0..count).map(|_| Bucket::default()).collect(),
            mask: count - 1,
        }
    }

    fn bucket(&self, hash: u64) -> &Bucket {
        &self.buckets[hash as usize & self.mask]
    }

    /// Puts `instance` in front of `hash`'s chain. Single writer only.
    fn push(&self, hash: u64, instance: Arc<Instance>) {
        let bucket = self.bucket(hash);
        let next = bucket.chain.load_full();
        bucket.set(Some(Arc::new(Node {
            hash,
            instance,
            next,
        })));
    }
}

/// The smallest table.
pub(crate) const FIRST_BUCKETS: usize = 1024;

/// The index.
pub(crate) struct MemoryStore {
    /// Every table ever used (the old ones emptied); the last published
    /// one is current.
    tables: boxcar::Vec<Table>,
    current: AtomicUsize,
    /// Instances indexed (writer only, atomic for `Sync`).
    live: AtomicUsize,
}

impl MemoryStore {
    pub(crate) fn new() -> MemoryStore {
        let tables = boxcar::Vec::new();
        let first = tables.push(Table::with_buckets(FIRST_BUCKETS));
        MemoryStore {
            tables,
            current: AtomicUsize::new(first),
            live: AtomicUsize::new(0),
        }
    }

    /// The current table and its number.
    fn table(&self) -> (usize, &Table) {
        let at = self.current.load(Ordering::Acquire);
        // `current` is only ever set to the index of a pushed table.
        (at, &self.tables[at])
    }

    /// Calls `visit` with every instance indexed under `(owner, key)`
    /// (instances of other keys whose hash collides are skipped), with a
    /// result that starts as `init()`, and returns the result. Lock-free;
    /// what `visit` is given stays valid for the call (the walk holds the
    /// chain), so a caller keeps an instance by cloning its `Arc`. If the
    /// table grew meanwhile, the walk starts again with a fresh result.
    pub(crate) fn probe<R>(
        &self,
        owner: &Digest,
        key: &Key,
        init: impl Fn() -> R,
        mut visit: impl FnMut(&mut R, &Arc<Instance>),
    ) -> R {
        let hash = index_hash(owner, key);
        loop {
            let (at, table) = self.table();
            let mut result = init();
            let bucket = table.bucket(hash);
            if bucket.occupied.load(Ordering::Acquire) {
                let chain = bucket.chain.load();
                for node in walk(chain.as_ref()) {
                    if node.hash == hash && node.instance.is(owner, key) {
                        visit(&mut result, &node.instance);
                    }
                }
            }
            // The old table is emptied after the new one is published: a
            // walk that saw no growth saw a whole chain.
            if self.current.load(Ordering::Acquire) == at {
                return result;
            }
        }
    }

    /// Indexes `instance`. Writer lock only.
    pub(crate) fn insert(&self, instance: &Arc<Instance>) {
        let live = self.live.load(Ordering::Relaxed) + 1;
        let (_, mut table) = self.table();
        if live > table.buckets.len() {
            table = self.grow(table);
        }
        let hash = index_hash(&instance.owner, &instance.key);
        table.push(hash, Arc::clone(instance));
        self.live.store(live, Ordering::Relaxed);
    }

    /// Takes `instance` out of the index: its chain is published without
    /// it, and the old chain's reference goes with the last reader. Writer
    /// lock only. Returns whether it was indexed.
    pub(crate) fn remove(&self, instance: &Arc<Instance>) -> bool {
        let hash = index_hash(&instance.owner, &instance.key);
        let (_, table) = self.table();
        let bucket = table.bucket(hash);
        let Some(head) = bucket.chain.load_full() else {
            return false;
        };
        let is_it = |node: &Node| Arc::ptr_eq(&node.instance, instance);
        let Some(position) = walk(Some(&head)).position(is_it) else {
            return false;
        };
        // The nodes before it, copied in order, in front of the rest.
        let before: Vec<&Node> = walk(Some(&head)).take(position).collect();
        let mut chain = walk(Some(&head))
            .nth(position)
            .and_then(|removed| removed.next.clone());
        for node in before.into_iter().rev() {
            chain = Some(Arc::new(Node {
                hash: node.hash,
                instance: Arc::clone(&node.instance),
                next: chain,
            }));
        }
        bucket.set(chain);
        self.live.fetch_sub(1, Ordering::Relaxed);
        true
    }

    /// Publishes a table with twice the buckets of `old`, holding the same
    /// targets, then empties `old`.
    fn grow(&self, old: &Table) -> &Table {
        let bigger = Table::with_buckets(old.buckets.len() * 2);
        for bucket in old.buckets.iter() {
            let chain = bucket.chain.load_full();
            // Oldest first, so each new chain keeps the newest in front.
            let nodes: Vec<&Node> = walk(chain.as_ref()).collect();
            for node in nodes.into_iter().rev() {
                bigger.push(node.hash, Arc::clone(&node.instance));
            }
        }
        let at = self.tables.push(bigger);
        self.current.store(at, Ordering::Release);
        for bucket in old.buckets.iter() {
            bucket.set(None);
        }
        &self.tables[at]
    }

    /// Live targets indexed.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.live.load(Ordering::Relaxed)
    }

    /// Buckets of the current table.
    #[cfg(test)]
    fn capacity(&self) -> usize {
        self.table().1.buckets.len()
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
        let mut seqs = store.probe(owner, key, Vec::new, |seqs, instance| {
            seqs.push(instance.seq);
        });
        seqs.sort();
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
        assert!(store.capacity() > FIRST_BUCKETS, "the table grew");
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
        assert_eq!(
            alive.load(Ordering::Relaxed),
            100,
            "every removed entry freed"
        );
        assert_eq!(store.capacity(), FIRST_BUCKETS, "removals do not grow it");
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
        let kept = store.probe(
            &owner,
            &key,
            || None,
            |kept, instance| {
                *kept = Some(Arc::clone(instance));
            },
        );
        let kept = kept.expect("found");
        assert!(store.remove(&kept));
        assert_eq!(alive.load(Ordering::Relaxed), 1, "the reader's reference");
        drop(kept);
        assert_eq!(alive.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_removal_in_the_middle_of_a_chain_keeps_the_others() {
        let store = MemoryStore::new();
        let alive = Arc::new(AtomicU64::new(0));
        let owner = Digest([7; 32]);
        // Same hash, different keys: one chain.
        let keys = colliding_keys(9);
        let same: Vec<Key> = keys.iter().step_by(3).copied().collect();
        let entries: Vec<_> = same
            .iter()
            .enumerate()
            .map(|(n, key)| instance(owner, *key, n, &alive))
            .collect();
        entries.iter().for_each(|e| store.insert(e));
        assert!(store.remove(&entries[1]));
        assert_eq!(found(&store, &owner, &same[0]), [0]);
        assert!(found(&store, &owner, &same[1]).is_empty());
        assert_eq!(found(&store, &owner, &same[2]), [2]);
        assert_eq!(store.len(), 2);
    }
}
