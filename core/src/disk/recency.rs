//! Which entries this process used, and when their stamps get written.
//!
//! A hit only notes the use in memory (at most once per entry per stamp
//! interval). The notes are appended to the stamps file when the interval
//! has passed since the last write, when the [`DiskCache`](super::DiskCache)
//! is dropped, and (on Unix) when the process exits: the global cache is a
//! static that is never dropped, and a short-lived process would otherwise
//! never record what it used. A hit therefore never writes, and a process
//! writes its stamps once per interval at most (a process that used
//! nothing writes nothing). After each append, a stamps file grown much
//! larger than one record per entry is rewritten (unless another process
//! holds the directory lock), at exit too: processes that only read would
//! otherwise let it grow without bound, as no store compacts it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::dir::Dir;
use super::lock::DirLock;
use super::stamps::{self, EntryId};

/// The part of a disk cache that the exit hook also reaches.
pub(crate) struct Recency {
    /// The cache directory (its `images-v<N>/`), held.
    dir: Arc<Dir>,
    /// Cleared on the first failed write: nothing is written afterwards.
    pub(crate) writable: AtomicBool,
    /// Entries in the segments the cache knows: what the stamps file needs
    /// one record each of ([`stamps::bloated`]).
    entries: AtomicU64,
    notes: Mutex<Notes>,
}

/// Uses noted, and stamps not yet written.
struct Notes {
    /// When this process last noted each entry it used.
    noted: HashMap<EntryId, u64>,
    /// Stamps to append.
    pending: Vec<(EntryId, u64)>,
    /// When pending stamps were last written (at first: when the cache was opened).
    last_write_ms: u64,
}

impl Recency {
    /// The recency notes of the cache in `dir`, written at exit too.
    pub(crate) fn new(dir: Arc<Dir>, now_ms: u64) -> Arc<Recency> {
        let recency = Arc::new(Recency {
            dir,
            writable: AtomicBool::new(true),
            entries: AtomicU64::new(0),
            notes: Mutex::new(Notes {
                noted: HashMap::new(),
                pending: Vec::new(),
                last_write_ms: now_ms,
            }),
        });
        let weak: std::sync::Weak<Recency> = Arc::downgrade(&recency);
        crate::exit::register(crate::exit::Stage::RecencyStamps, weak);
        recency
    }

    /// Notes a use of `id` at `now_ms`, unless noted less than `interval_ms`
    /// ago. Returns whether pending stamps are due to be written.
    pub(crate) fn note(&self, id: EntryId, now_ms: u64, interval_ms: u64) -> bool {
        let mut notes = self.notes();
        let due = |last: u64| now_ms.saturating_sub(last) >= interval_ms;
        if notes.noted.get(&id).is_none_or(|&last| due(last)) {
            notes.noted.insert(id, now_ms);
            notes.pending.push((id, now_ms));
        }
        !notes.pending.is_empty() && due(notes.last_write_ms)
    }

    /// Appends the pending stamps. `Ok(None)`: nothing to write (or the
    /// directory is not writable); `Ok(Some(len))`: the stamps file's size.
    pub(crate) fn write_pending(&self, now_ms: u64) -> std::io::Result<Option<u64>> {
        let pending = take_pending(&mut self.notes(), now_ms);
        self.append(&pending)
    }

    /// Appends `pending` to the stamps file (see [`Recency::write_pending`]).
    fn append(&self, pending: &[(EntryId, u64)]) -> std::io::Result<Option<u64>> {
        if pending.is_empty() || !self.writable.load(Ordering::Relaxed) {
            return Ok(None);
        }
        stamps::append(&self.dir, pending).map(Some)
    }

    /// Notes that the segments the cache knows hold `entries` entries.
    pub(crate) fn set_entries(&self, entries: u64) {
        self.entries.store(entries, Ordering::Relaxed);
    }

    /// Rewrites the stamps file with one record per entry if, at `len`
    /// bytes, it has grown much larger than that ([`stamps::bloated`]),
    /// unless another process holds the directory lock (it is compacting,
    /// or will soon).
    pub(crate) fn compact_if_bloated(&self, len: u64) -> std::io::Result<()> {
        let entries = self.entries.load(Ordering::Relaxed);
        if !stamps::bloated(len, usize::try_from(entries).unwrap_or(usize::MAX)) {
            return Ok(());
        }
        let mut lock = DirLock::open(&self.dir)?;
        match lock.try_exclusive()? {
            Some(_exclusive) => stamps::compact(&self.dir),
            None => Ok(()),
        }
    }

    /// Forgets every note (after `clear`).
    pub(crate) fn forget(&self) {
        let mut notes = self.notes();
        notes.noted.clear();
        notes.pending.clear();
    }

    fn notes(&self) -> MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Takes the pending stamps out of `notes`, noting a write at `now_ms`.
fn take_pending(notes: &mut Notes, now_ms: u64) -> Vec<(EntryId, u64)> {
    notes.last_write_ms = now_ms;
    std::mem::take(&mut notes.pending)
}

/// At exit, the pending stamps are appended, and a stamps file grown too
/// large rewritten. Never blocks (a thread may still hold the notes at
/// exit, another process the directory lock).
impl crate::exit::AtExit for Recency {
    fn at_exit(&self) {
        // The notes are taken under `try_lock` only: a thread that holds
        // them at exit keeps them, and its stamps are lost.
        let Ok(mut notes) = self.notes.try_lock() else {
            return;
        };
        let pending = take_pending(&mut notes, super::segment::now_ms());
        drop(notes);
        if let Ok(Some(len)) = self.append(&pending) {
            let _ = self.compact_if_bloated(len);
        }
    }
}
