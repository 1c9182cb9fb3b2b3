//! [`Recorder`]: appends what a cache returns to a record file, once per
//! distinct entry and source, and counts the hits of each (the format is
//! [`super::format`]'s; see the [module docs](super)).

use std::collections::HashMap;
use std::fmt;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use super::format::{MAX_LINE, SourceKind, entry_line, hits_line, tier_name};
use crate::cache::{Acquired, Observer};
use crate::regular_file::{self, Access, Links};
use crate::{Cache, Digest, Error, Hit, Key, Owner, Source};

/// At most this many distinct entries are recorded per process; later ones
/// are counted nowhere (one warning).
pub const MAX_ENTRIES: usize = 1 << 20;

/// Bytes of `H` records written by one `write`.
const BATCH: usize = MAX_LINE;
/// Shards of the per-process set (by key byte), so that threads hitting
/// different entries take different locks.
const SHARDS: usize = 16;

/// One entry as a process records it: which `(owner, key)`, and whether the
/// process found it in an image (image hits and in-memory hits of the same
/// entry are counted apart).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Slot {
    owner: Digest,
    key: Digest,
    image: bool,
}

impl Slot {
    fn shard(&self) -> usize {
        usize::from(self.key.as_bytes()[0]) % SHARDS
    }
}

/// Hashes 8 bytes of each digest (BLAKE3 outputs, so any 8 bytes spread
/// well) into the map's keyed hasher; equality still compares them whole.
impl std::hash::Hash for Slot {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let prefix = |digest: &Digest| {
            let bytes = digest.as_bytes();
            u64::from_le_bytes([
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            ])
        };
        state.write_u64(prefix(&self.key) ^ u64::from(self.image));
        state.write_u64(prefix(&self.owner));
    }
}

/// The entries a process recorded, by slot.
type Slots = HashMap<Slot, Arc<Tally>>;

/// The slots each thread has already counted, per recorder (at most
/// [`SEEN_RECORDERS`] recorders, the oldest forgotten first): a hit of a
/// known entry is counted without touching a lock that other threads touch.
const SEEN_RECORDERS: usize = 4;

thread_local! {
    static SEEN: std::cell::RefCell<Vec<(u64, Slots)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Counts a hit of `slot` if this thread already holds its tally for
/// recorder `id`; false if it does not.
#[inline]
fn count_seen(id: u64, slot: &Slot) -> bool {
    SEEN.try_with(|seen| {
        let Ok(seen) = seen.try_borrow() else {
            return false;
        };
        let tally = seen
            .iter()
            .find(|(of, _)| *of == id)
            .and_then(|(_, slots)| slots.get(slot));
        if let Some(tally) = tally {
            tally.hits.fetch_add(1, Ordering::Relaxed);
        }
        tally.is_some()
    })
    .unwrap_or(false)
}

/// Remembers in this thread that `slot` of recorder `id` is `tally`.
fn remember(id: u64, slot: Slot, tally: Arc<Tally>) {
    let _ = SEEN.try_with(|seen| {
        let Ok(mut seen) = seen.try_borrow_mut() else {
            return;
        };
        let at = match seen.iter().position(|(of, _)| *of == id) {
            Some(at) => at,
            None => {
                if seen.len() == SEEN_RECORDERS {
                    seen.remove(0);
                }
                seen.push((id, Slots::default()));
                seen.len() - 1
            }
        };
        seen[at].1.insert(slot, tally);
    });
}

/// What a process knows of one recorded entry.
struct Tally {
    /// The source of its first record (its `H` records name it).
    source: SourceKind,
    /// Hits so far.
    hits: AtomicU64,
    /// Hits already in the file.
    flushed: AtomicU64,
    /// Sources already recorded (see [`SourceKind::bit`]).
    written: AtomicU32,
}

/// Appends what a cache returns to a record file, once per distinct entry
/// and source, and counts the hits of each (see the [module](super) docs for
/// the format). It is the cache's [`Observer`], set with
/// [`Cache::record_into`]; the global cache gets one when `KILN_RECORD`
/// names a file.
///
/// A recorder never fails its cache: a write that fails gives one warning
/// and ends recording for the process.
pub struct Recorder {
    path: PathBuf,
    file: File,
    /// Tells this recorder's slots apart in the threads' [`SEEN`] sets.
    id: u64,
    shards: Box<[RwLock<Slots>]>,
    entries: AtomicUsize,
    /// A write failed: nothing more is written.
    broken: AtomicBool,
    /// [`MAX_ENTRIES`] was reached (warned once).
    full: AtomicBool,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("entries", &self.entries.load(Ordering::Relaxed))
            .field("broken", &self.broken.load(Ordering::Relaxed))
            .finish()
    }
}

impl Recorder {
    /// Opens `path` for appending, creating it (mode 0600) when missing, and
    /// returns a recorder writing to it. The file must be a regular file; a
    /// symbolic link, a FIFO, a device or a directory is refused. The
    /// recorder's pending hit counts are written at normal process exit.
    ///
    /// # Errors
    /// [`Error::RecordIo`] when the file cannot be opened or created, or is
    /// not a regular file.
    pub fn open(path: &Path) -> Result<Arc<Recorder>, Error> {
        let access = Access::AppendCreate(0o600);
        let file =
            regular_file::open(path, access, Links::Refuse).map_err(|source| Error::RecordIo {
                action: "open for appending",
                path: path.to_owned(),
                source,
            })?;
        let recorder = Arc::new(Recorder {
            path: path.to_owned(),
            file,
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            entries: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            full: AtomicBool::new(false),
        });
        let weak: std::sync::Weak<Recorder> = Arc::downgrade(&recorder);
        crate::exit::register(crate::exit::Stage::RecordHits, weak);
        Ok(recorder)
    }

    /// The record file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The distinct entries recorded so far.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Writes the hits counted since the last flush (`H` records, whole
    /// records per `write`). Done at normal exit and on drop; a long-running
    /// process may call it now and then.
    pub fn flush(&self) {
        self.write_hits(false);
    }

    /// Counts a hit of a known entry; false if the entry is new. A thread
    /// that counted the entry before finds it in its own set, without a
    /// lock; otherwise the shard is read and the entry remembered.
    #[inline]
    fn count(&self, slot: &Slot) -> bool {
        if count_seen(self.id, slot) {
            return true;
        }
        let tally = self.shards[slot.shard()]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(slot)
            .cloned();
        match tally {
            Some(tally) => {
                tally.hits.fetch_add(1, Ordering::Relaxed);
                remember(self.id, *slot, tally);
                true
            }
            None => false,
        }
    }

    /// Counts a hit of `slot` from `source`, adding the entry if new.
    /// `Some(hits)` when `source` has no record yet for it, and one is to be
    /// written, carrying `hits` (1 for a new entry, 0 for a further source
    /// of a known one).
    fn insert(&self, slot: Slot, source: SourceKind, bit: u32) -> Option<u64> {
        let mut shard = self.shards[slot.shard()]
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tally) = shard.get(&slot) {
            tally.hits.fetch_add(1, Ordering::Relaxed);
            let before = tally.written.fetch_or(bit, Ordering::Relaxed);
            return (before & bit == 0).then_some(0);
        }
        if self.entries.load(Ordering::Relaxed) >= MAX_ENTRIES {
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    path = %self.path.display(),
                    "KILN_RECORD: {MAX_ENTRIES} distinct entries recorded; later ones are not"
                );
            }
            return None;
        }
        let tally = Arc::new(Tally {
            source,
            hits: AtomicU64::new(1),
            flushed: AtomicU64::new(1),
            written: AtomicU32::new(bit),
        });
        shard.insert(slot, Arc::clone(&tally));
        drop(shard);
        self.entries.fetch_add(1, Ordering::Relaxed);
        remember(self.id, slot, tally);
        Some(1)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_entry(
        &self,
        source: &SourceKind,
        slot: &Slot,
        hits: u64,
        took: Duration,
        name: &str,
        label: &str,
        producer: &str,
    ) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let line = entry_line(
            source,
            (&slot.owner, &slot.key),
            hits,
            nanos,
            name,
            label,
            producer,
        );
        self.write_all_or_stop(line.as_bytes());
    }

    /// Writes the `H` records of every entry hit since the last flush. At
    /// exit, locks are only tried: a thread may still hold one.
    fn write_hits(&self, at_exit: bool) {
        let mut batch = String::new();
        for shard in self.shards.iter() {
            let guard = if at_exit {
                match shard.try_read() {
                    Ok(guard) => guard,
                    Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => continue,
                }
            } else {
                shard.read().unwrap_or_else(PoisonError::into_inner)
            };
            for (slot, tally) in guard.iter() {
                let hits = tally.hits.load(Ordering::Relaxed);
                // `fetch_max`: two flushes at once write disjoint counts.
                let before = tally.flushed.fetch_max(hits, Ordering::Relaxed);
                if hits <= before {
                    continue;
                }
                let line = hits_line(&tally.source, (&slot.owner, &slot.key), hits - before);
                if batch.len() + line.len() > BATCH {
                    self.write_all_or_stop(batch.as_bytes());
                    batch.clear();
                }
                batch.push_str(&line);
            }
        }
        if !batch.is_empty() {
            self.write_all_or_stop(batch.as_bytes());
        }
    }

    /// One `write` of whole records; a failed or short one ends recording
    /// for the process, with one warning (a short write leaves a torn record,
    /// which readers skip).
    fn write_all_or_stop(&self, bytes: &[u8]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let error = loop {
            match (&self.file).write(bytes) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(n) if n == bytes.len() => return,
                Ok(n) => {
                    break std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("wrote {n} of {} bytes (is the disk full?)", bytes.len()),
                    );
                }
                Err(error) => break error,
            }
        };
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                path = %self.path.display(),
                %error,
                "KILN_RECORD: cannot append to the record file; recording stops for this process"
            );
        }
    }
}

/// What the cache returns is recorded: a new entry or source at once (an
/// `E` record), further hits counted (written as `H` records at flush).
impl Observer for Recorder {
    /// A hit found in memory or an image (by `lookup` or `get_or_compile`).
    #[inline]
    fn found(&self, hit: &Hit<'_>) {
        let image = hit.source() == Source::Image;
        let slot = Slot {
            owner: hit.owner(),
            key: *hit.key().digest(),
            image,
        };
        if self.count(&slot) {
            return;
        }
        let source = if image {
            SourceKind::Image
        } else {
            SourceKind::Memory
        };
        let bit = source.bit(0);
        if let Some(hits) = self.insert(slot, source.clone(), bit) {
            let producer = hit.image_producer().unwrap_or_default();
            self.write_entry(
                &source,
                &slot,
                hits,
                Duration::ZERO,
                hit.name(),
                hit.owner_label(),
                producer,
            );
        }
    }

    /// An entry that `get_or_compile` compiled or loaded from a tier,
    /// recorded before the entry is visible to other threads.
    fn acquired(&self, owner: &Owner, key: &Key, name: &str, how: Acquired<'_>) {
        let slot = Slot {
            owner: owner.digest(),
            key: *key.digest(),
            image: false,
        };
        let (source, bit, took) = match how {
            Acquired::Compiled(took) => (SourceKind::Compiled, SourceKind::Compiled.bit(0), took),
            Acquired::Tier { index, name } => {
                let source = SourceKind::Tier(tier_name(name));
                let bit = source.bit(index);
                (source, bit, Duration::ZERO)
            }
        };
        if let Some(hits) = self.insert(slot, source.clone(), bit) {
            self.write_entry(&source, &slot, hits, took, name, owner.label(), "");
        }
    }
}

/// At exit, the pending hit counts are written (locks only tried).
impl crate::exit::AtExit for Recorder {
    fn at_exit(&self) {
        self.write_hits(true);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.write_hits(false);
    }
}

impl Cache {
    /// Records from now on every entry [`Cache::lookup`] and
    /// [`Cache::get_or_compile`] return into `recorder`: once per distinct
    /// entry and source, with its hits counted (see [`crate::record`]). The
    /// recorder is the cache's [`Observer`] (see [`Cache::observe`]). The
    /// global cache does this when `KILN_RECORD` names a file.
    ///
    /// # Errors
    /// Gives `recorder` back if the cache has an observer already (a cache
    /// has at most one, set once).
    pub fn record_into(&self, recorder: Arc<Recorder>) -> Result<(), Arc<Recorder>> {
        let observer: Arc<dyn Observer> = Arc::clone(&recorder) as Arc<dyn Observer>;
        self.observe(observer).map_err(|_| recorder)
    }

    /// The recorder set with [`Cache::record_into`], if any (`None` when the
    /// cache's observer is something else).
    pub fn recorder(&self) -> Option<&Recorder> {
        let observer: &dyn std::any::Any = &**self.observer()?;
        observer.downcast_ref::<Recorder>()
    }
}
