//! The insertion log: sequence numbers, and the entries recorded while a
//! snapshot is live.
//!
//! Every record gets the next sequence number (the count of records so
//! far), which is what a [`Snapshot`](crate::Snapshot) marks: taking one is
//! O(1). The log holds the entries recorded from the lowest sequence number
//! a live snapshot pins on, in order, and nothing while no snapshot is
//! live: entries recorded before every live snapshot are dropped from its
//! front as the pins go, so the log never holds what no delta can ask for,
//! and a [`Delta`](crate::Delta) reads exactly the entries recorded since
//! its snapshot, O(new).

use std::collections::VecDeque;
use std::sync::Arc;

use super::instance::Instance;

/// The insertion log (writer lock only).
#[derive(Default)]
pub(crate) struct InsertLog {
    /// The sequence number the next record gets.
    next: usize,
    /// Entries in sequence order, from the lowest pinned sequence number on.
    entries: VecDeque<Arc<Instance>>,
}

impl InsertLog {
    /// The sequence number of the next record: the count of records so far.
    pub(crate) fn next_seq(&self) -> usize {
        self.next
    }

    /// Records `instance` (which has sequence number [`InsertLog::next_seq`]);
    /// `pinned_from` is the lowest sequence number a live snapshot pins
    /// (`usize::MAX`: none).
    pub(crate) fn record(&mut self, instance: &Arc<Instance>, pinned_from: usize) {
        self.next = instance.seq + 1;
        self.trim(pinned_from);
        if instance.seq >= pinned_from {
            self.entries.push_back(Arc::clone(instance));
        }
    }

    /// Drops the entries recorded before `pinned_from`.
    pub(crate) fn trim(&mut self, pinned_from: usize) {
        while self
            .entries
            .front()
            .is_some_and(|first| first.seq < pinned_from)
        {
            self.entries.pop_front();
        }
    }

    /// The entries recorded from sequence number `seq` on, oldest first
    /// (all of them while a snapshot at `seq` or earlier is live).
    pub(crate) fn since(&self, seq: usize) -> impl DoubleEndedIterator<Item = &Arc<Instance>> {
        let from = self.entries.partition_point(|entry| entry.seq < seq);
        self.entries.range(from..)
    }

    /// Entries held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }
}

#[cfg(test)]
mod tests {
    use crate::{Cache, CacheConfig, Compiled, KeyBuilder, Owner};

    #[test]
    fn the_log_holds_only_what_live_snapshots_pin() {
        let cache = Cache::with_config(CacheConfig::default().memory_max_entries(Some(2)));
        let owner = Owner::new("test", "1", "cpu", ["-O2"]).expect("owner");
        let insert = |n: u64| {
            let key = KeyBuilder::new("log", 1).u64("n", n).finish();
            cache.insert(&owner, &key, Compiled::new("f"));
        };
        (0..10).for_each(insert);
        assert_eq!(cache.writer().log.len(), 0, "no snapshot: nothing logged");
        let first = cache.snapshot();
        (10..15).for_each(insert);
        let second = cache.snapshot();
        (15..20).for_each(insert);
        assert_eq!(cache.writer().log.len(), 10);
        assert_eq!(cache.delta(&second).len(), 5);
        drop(first);
        insert(20);
        assert_eq!(cache.writer().log.len(), 6, "trimmed to the second's");
        assert_eq!(cache.delta(&second).len(), 6);
        drop(second);
        insert(21);
        assert_eq!(cache.writer().log.len(), 0);
        assert_eq!(cache.writer().log.next_seq(), 22);
    }
}
