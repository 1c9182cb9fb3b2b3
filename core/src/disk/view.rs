//! What one process knows of the directory: the segments listed, each
//! mapped on first use.
//!
//! Opening a cache lists segment names only; a lookup maps segments one by
//! one, fullest first (the entry count is in the name), and stops at the
//! first hit. So the first hit of a new process usually maps one segment,
//! whatever the number of segments.

use std::collections::HashSet;
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use super::segment::{self, Segment};

/// A listed segment, mapped on first use.
pub(crate) struct Slot {
    /// The file name.
    pub(crate) name: String,
    /// The entry count from the name: the order in which to search.
    entries: u64,
    /// The mapping: `None` when the file did not open.
    mapped: OnceLock<Option<Arc<Segment>>>,
}

impl Slot {
    /// A listed segment, not mapped yet.
    pub(crate) fn listed(name: String) -> Slot {
        Slot {
            entries: segment::entries_in_name(&name),
            name,
            mapped: OnceLock::new(),
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
    pub(crate) fn segment(&self, dir: &Path) -> Option<&Arc<Segment>> {
        self.mapped
            .get_or_init(|| match Segment::open(dir, &self.name) {
                Ok(segment) => Some(Arc::new(segment)),
                Err(error) => {
                    tracing::debug!(segment = %self.name, %error, "disk-cache segment does not open: treated as absent");
                    None
                }
            })
            .as_ref()
    }
}

/// The segments of the directory as last listed.
#[derive(Default)]
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
    /// Replaces the slots with `names`, keeping the slots (and mappings) of
    /// names listed before. Returns whether the set of names changed.
    pub(crate) fn relisted(&mut self, names: Vec<String>) -> bool {
        let mut changed = names.len() != self.slots.len();
        let mut slots = Vec::with_capacity(names.len());
        for name in names {
            match self.slots.iter().find(|slot| slot.name == name) {
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
    pub(crate) fn segments(&self, dir: &Path) -> Vec<Arc<Segment>> {
        self.slots
            .iter()
            .filter_map(|slot| slot.segment(dir).cloned())
            .collect()
    }

    fn sort(&mut self) {
        self.slots
            .sort_by(|a, b| b.entries.cmp(&a.entries).then_with(|| a.name.cmp(&b.name)));
    }
}
