//! [`CheckState`]: which entries and payloads already passed their
//! checksum check, so that each is checked once (and, in a second set,
//! which payloads failed theirs).

use std::sync::atomic::{AtomicU64, Ordering};

/// One bit per item (entries, artifacts), zero-initialised, set once: which
/// items passed their checksum check, or (a second set) which payloads
/// failed it. A failed check is still repeated on every access (and fails
/// again); the failure set only lets holders of the image ask whether an
/// entry is known bad without reading its payloads.
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

    pub(crate) fn is_set(&self, item: usize) -> bool {
        self.words
            .get(item / 64)
            .is_some_and(|word| word.load(Ordering::Acquire) & (1 << (item % 64)) != 0)
    }

    pub(crate) fn set(&self, item: usize) {
        if let Some(word) = self.words.get(item / 64) {
            word.fetch_or(1 << (item % 64), Ordering::Release);
        }
    }
}
