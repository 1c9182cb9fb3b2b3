//! [`CheckState`]: which entries and payloads already passed their
//! checksum check, so that each is checked once.

use std::sync::atomic::{AtomicU64, Ordering};

/// Remembers which items (entries, artifacts) passed their checksum check.
///
/// One bit per item, zero-initialised; set once an item is verified. A
/// failed check is not remembered: it is repeated (and fails again) on the
/// next access, which only costs time on corrupt images.
pub(crate) struct CheckState {
    words: Box<[AtomicU64]>,
}

impl CheckState {
    /// `count` items, all unverified, or all verified when `verified`.
    pub(crate) fn new(count: usize, verified: bool) -> CheckState {
        let fill = if verified { u64::MAX } else { 0 };
        CheckState {
            words: (0..count.div_ceil(64))
                .map(|_| AtomicU64::new(fill))
                .collect(),
        }
    }

    pub(crate) fn is_verified(&self, item: usize) -> bool {
        self.words
            .get(item / 64)
            .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (item % 64)) != 0)
    }

    pub(crate) fn mark_verified(&self, item: usize) {
        if let Some(word) = self.words.get(item / 64) {
            word.fetch_or(1 << (item % 64), Ordering::Release);
        }
    }
}
