//! Snapshots and deltas: what a precompile block added.

use std::collections::HashSet;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::Arc;

use kiln_image::{ImageMeta, ImageWriter};

use super::Cache;
use super::instance::Instance;
use super::memory::Pin;
use super::store::SlotKey;
use crate::{Digest, Error, Key, World};

/// A mark in a cache's insertion log: taken in O(1) by
/// [`Cache::snapshot`], read by [`Cache::delta`].
///
/// While a snapshot (or a clone of it) is alive, the cache evicts none of
/// the entries recorded after it (see
/// [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes))
/// and keeps them in its insertion log, so its delta holds every one of
/// them: drop it once the delta is written.
#[derive(Clone)]
pub struct Snapshot {
    seq: usize,
    world: World,
    _pin: Arc<Pin>,
}

impl PartialEq for Snapshot {
    fn eq(&self, other: &Snapshot) -> bool {
        (self.seq, self.world) == (other.seq, other.world)
    }
}

impl Eq for Snapshot {}

impl std::fmt::Debug for Snapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Snapshot")
            .field("seq", &self.seq)
            .field("world", &self.world)
            .finish()
    }
}

impl Snapshot {
    /// The number of in-memory entries recorded before the snapshot.
    pub fn seq(&self) -> usize {
        self.seq
    }

    /// The world at the snapshot.
    pub fn world(&self) -> World {
        self.world
    }
}

/// The entries recorded after a snapshot that are exportable: unbounded now,
/// compiled in this process (or loaded from a tier that memoises local
/// compiles), not session-dependent. Entries merged from images are never
/// part of a delta. Tied to the cache it came from; it holds its entries
/// (metadata and payloads), so it stays whole even if its snapshot is
/// dropped and the cache evicts them.
pub struct Delta<'c> {
    entries: Vec<Arc<Instance>>,
    cache: PhantomData<&'c Cache>,
}

impl Cache {
    /// A mark in the insertion log, in O(1).
    ///
    /// Take it before the precompile block, with no other thread inserting
    /// into this cache: inserts racing with the snapshot may fall on either
    /// side of it. Entries recorded after it are not evicted while it lives.
    pub fn snapshot(&self) -> Snapshot {
        // Under the writer lock: no eviction runs between reading the
        // count and registering the pin.
        let mut writer = self.writer();
        let seq = writer.log.next_seq();
        Snapshot {
            seq,
            world: self.world(),
            _pin: writer.residency.pin(seq),
        }
    }

    /// The exportable entries recorded since `snapshot` (see [`Delta`]), in
    /// O(entries recorded since). If one `(owner, key)` was recorded twice
    /// (possible with `always_compile`), the newest wins.
    ///
    /// `snapshot` must come from this cache.
    pub fn delta(&self, snapshot: &Snapshot) -> Delta<'_> {
        // The snapshot pins the entries recorded from its sequence number
        // on: the log holds every one of them.
        let mut entries: Vec<Arc<Instance>> = self
            .writer()
            .log
            .since(snapshot.seq)
            .rev()
            .filter(|i| i.is_unbounded() && !i.session_dependent)
            .cloned()
            .collect();
        let mut seen = HashSet::with_capacity(entries.len());
        entries.retain(|i| seen.insert(SlotKey::new(&i.owner, &i.key)));
        entries.reverse();
        Delta {
            entries,
            cache: PhantomData,
        }
    }
}

impl<'c> Delta<'c> {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `(owner, key, name)` of each entry, in insertion order.
    pub fn entries(&self) -> impl Iterator<Item = (Digest, Key, &str)> + '_ {
        self.entries
            .iter()
            .map(|i| (i.owner, i.key, i.name.as_str()))
    }

    /// An image writer holding the delta (entries copied, worlds normalised).
    pub fn to_writer(&self, meta: ImageMeta) -> ImageWriter {
        let mut writer = ImageWriter::new(meta);
        for instance in &self.entries {
            match instance.to_entry_data() {
                Some(data) => writer.push(data),
                None => tracing::warn!(
                    name = instance.name,
                    key = %instance.key,
                    "entry left out of the image: a payload failed its checksum"
                ),
            }
        }
        writer
    }

    /// The delta as image bytes: the same delta and meta give the same bytes.
    ///
    /// # Errors
    /// [`Error::Image`] if the image cannot be built.
    pub fn to_bytes(&self, meta: ImageMeta) -> Result<Vec<u8>, Error> {
        Ok(self.to_writer(meta).to_bytes()?)
    }

    /// Writes the delta as an image at `path`, atomically (temp file + rename).
    ///
    /// # Errors
    /// [`Error::Image`] if the image cannot be built or written.
    pub fn write_image(&self, path: &Path, meta: ImageMeta) -> Result<(), Error> {
        Ok(self.to_writer(meta).write_atomic(path)?)
    }
}
