//! What one process knows of the directory: the segments listed, each
//! opened on first use.
//!
//! A new process does not list the directory: its view starts with the
//! base segment alone (its name is well known, see
//! [`BASE_SEGMENT`](super::segment::BASE_SEGMENT)), which after compaction
//! holds nearly every entry, so a first hit usually costs opening one file
//! and no listing. The first miss lists the directory; lookups then open
//! segments one by one, base first, then fullest first (the entry count is
//! in the name), and stop at the first hit.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::SystemTime;

use kiln_image::ImageFile;

use super::dir::Dir;
use super::segment::{self, Segment};

/// A listed segment, mapped on first use.
pub(crate) struct Slot {
    /// The file name.
    pub(crate) name: String,
    /// The entry count from the name: the order in which to search.
    entries: u64,
    /// The mapping: `None` when the file did not open.
    mapped: OnceLock<Option<Arc<Segment>>>,
    /// The file, when it was opened before its first use (the base, by
    /// [`DiskCache::open`](super::DiskCache::open)).
    opened: Mutex<Option<ImageFile>>,
    /// Whether the segment was seen in a listing (`false`: the base,
    /// assumed before any listing, which may not exist).
    pub(crate) seen: bool,
}

impl Slot {
    /// A listed segment, not mapped yet.
    pub(crate) fn listed(name: String) -> Slot {
        Slot {
            entries: segment::entries_in_name(&name),
            name,
            mapped: OnceLock::new(),
            opened: Mutex::new(None),
            seen: true,
        }
    }

    /// The base segment, before any listing: it may not exist. `file` is
    /// its file if it was opened already.
    pub(crate) fn assumed_base(file: Option<ImageFile>) -> Slot {
        Slot {
            seen: false,
            opened: Mutex::new(file),
            ..Slot::listed(segment::BASE_SEGMENT.to_owned())
        }
    }

    /// Whether the slot's segment is open and is the file `file_id`.
    fn is_file(&self, file_id: Option<u64>) -> bool {
        match (self.mapped.get(), file_id) {
            (Some(Some(segment)), Some(listed)) => segment.file_id == Some(listed),
            _ => false,
        }
    }

    /// Whether this is the base segment.
    pub(crate) fn is_base(&self) -> bool {
        self.name == segment::BASE_SEGMENT
    }

    /// The entries of the segment: from the name, or for the base (whose
    /// name has none) from the segment if it is open.
    pub(crate) fn entry_count(&self) -> u64 {
        match self.mapped.get() {
            Some(Some(segment)) if self.is_base() => segment.image.len() as u64,
            _ => self.entries,
        }
    }

    /// A segment already mapped (e.g. just published by this process).
    pub(crate) fn mapped(segment: Segment) -> Slot {
        let slot = Slot::listed(segment.name.clone());
        let _ = slot.mapped.set(Some(Arc::new(segment)));
        slot
    }

    /// The segment, mapped (and structurally checked) on the first call;
    /// `None` when it does not open (deleted since listed, or damaged).
    pub(crate) fn segment(&self, dir: &Dir) -> Option<&Arc<Segment>> {
        self.mapped
            .get_or_init(|| {
                let opened = self
                    .opened
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .take();
                let segment = match opened {
                    Some(file) => Segment::from_file(file, &self.name),
                    None => Segment::open(dir, &self.name),
                };
                match segment {
                    Ok(segment) => Some(Arc::new(segment)),
                    Err(error) => {
                        tracing::debug!(segment = %self.name, %error, "disk-cache segment does not open: treated as absent");
                        None
                    }
                }
            })
            .as_ref()
    }
}

/// The segments of the directory as last listed (before any listing: the
/// base segment alone).
pub(crate) struct View {
    /// Listed segments, fullest first.
    pub(crate) slots: Vec<Arc<Slot>>,
    /// Segments that failed to open or hold an entry that failed its checksum.
    pub(crate) damaged: HashSet<String>,
    /// The directory's modification time when it was last listed.
    pub(crate) dir_modified: Option<SystemTime>,
    /// When the directory was last listed.
    pub(crate) listed_at: Option<SystemTime>,
}

impl View {
    /// The view of a process that has not listed the directory yet: the
    /// base segment alone, with its file if it was opened already.
    pub(crate) fn new(base: Option<ImageFile>) -> View {
        View {
            slots: vec![Arc::new(Slot::assumed_base(base))],
            damaged: HashSet::new(),
            dir_modified: None,
            listed_at: None,
        }
    }

    /// Replaces the slots with `names`, keeping the slots (and mappings) of
    /// names listed before. Returns whether the set of names changed.
    ///
    /// Compaction replaces the base segment under the same name, so the
    /// base's slot is kept only if the listing names the very file it
    /// opened (same inode number); otherwise it is opened again on use.
    pub(crate) fn relisted(&mut self, names: Vec<(String, Option<u64>)>) -> bool {
        let mut changed = names.len() != self.slots.len();
        let mut slots = Vec::with_capacity(names.len());
        for (name, file_id) in names {
            let kept = self
                .slots
                .iter()
                .find(|slot| slot.name == name && (!slot.is_base() || slot.is_file(file_id)));
            match kept {
                Some(slot) => slots.push(Arc::clone(slot)),
                None => {
                    changed = true;
                    slots.push(Arc::new(Slot::listed(name)));
                }
            }
        }
        self.slots = slots;
        self.sort();
        changed
    }

    /// Adds a slot (a segment this process just published).
    pub(crate) fn add(&mut self, slot: Slot) {
        self.slots.push(Arc::new(slot));
        self.sort();
    }

    /// Every listed segment that opens, mapping those not mapped yet.
    pub(crate) fn segments(&self, dir: &Dir) -> Vec<Arc<Segment>> {
        self.slots
            .iter()
            .filter_map(|slot| slot.segment(dir).cloned())
            .collect()
    }

    /// Base first, then fullest first.
    fn sort(&mut self) {
        self.slots.sort_by(|a, b| {
            (b.is_base(), b.entries)
                .cmp(&(a.is_base(), a.entries))
                .then_with(|| a.name.cmp(&b.name))
        });
    }
}
