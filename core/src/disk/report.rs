//! What `stats`, `ls`, `gc`, `clear` and `verify` report (serialisable, for
//! `kiln cache ... --json`).

use std::path::PathBuf;

use serde::Serialize;

/// The state of a cache directory, and what this process did with it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct DiskStats {
    /// The directory holding the entries: this image format version's
    /// subdirectory of the cache directory ([`super::DiskCache::images_dir`]).
    pub dir: PathBuf,
    /// Whether this process can still write to it.
    pub writable: bool,
    /// The cap on the directory's size.
    pub max_bytes: u64,
    /// Total size of segments and stamps.
    pub bytes: u64,
    /// Published segments.
    pub segments: usize,
    /// Distinct entries in readable segments.
    pub entries: usize,
    /// Segments that fail to open (removed by the next `gc` or compaction).
    pub unreadable_segments: usize,
    /// Temporary files: writes in progress or orphans of crashed writers.
    pub temp_files: usize,
    /// Counters of this process.
    pub session: SessionCounters,
}

/// What one process did with the disk cache.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SessionCounters {
    /// Lookups answered from disk.
    pub hits: u64,
    /// Lookups not answered from disk.
    pub misses: u64,
    /// Entries this process published.
    pub stored: u64,
    /// Entries that could not be published (directory read-only or full).
    pub store_failures: u64,
}

/// One entry, as listed by `ls`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct EntryInfo {
    /// The owner's digest, hex.
    pub owner: String,
    /// The owner's human label.
    pub owner_label: String,
    /// The key, hex.
    pub key: String,
    /// The entry's human name.
    pub name: String,
    /// Its artifacts.
    pub artifacts: Vec<ArtifactInfo>,
    /// When it was last used (or stored), in milliseconds since the Unix epoch.
    pub last_used_ms: u64,
    /// The segment that holds it.
    pub segment: String,
    /// Where it came from (its segment's
    /// [`Provenance`](crate::trust::Provenance), as text).
    pub provenance: String,
}

/// One artifact of a listed entry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ArtifactInfo {
    /// Its kind (`ptx`, `cubin`, ..., or the user tag).
    pub kind: String,
    /// Its size in bytes.
    pub bytes: usize,
}

/// What a compaction or `gc` did.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct GcReport {
    /// Segments before.
    pub segments_before: usize,
    /// Segments after.
    pub segments_after: usize,
    /// Bytes of segments and stamps before.
    pub bytes_before: u64,
    /// Bytes of segments and stamps after.
    pub bytes_after: u64,
    /// Segments merged into a new one.
    pub segments_merged: usize,
    /// Distinct entries left.
    pub entries: usize,
    /// Entries evicted (least recently used first) to get under the cap.
    pub entries_evicted: usize,
    /// Second copies of an entry dropped (two processes compiled it at once).
    pub duplicates_dropped: usize,
    /// Entries dropped because a payload failed its checksum.
    pub corrupt_entries_dropped: usize,
    /// Segments removed because they do not open (truncated, garbled, other format).
    pub corrupt_segments_removed: usize,
    /// Temporary files of crashed writers removed.
    pub temp_files_removed: usize,
}

/// What `clear` removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ClearReport {
    /// Files removed (segments, temporary files, stamps).
    pub files_removed: usize,
    /// Their total size.
    pub bytes_removed: u64,
}

/// What `verify` found, segment by segment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Every published segment.
    pub segments: Vec<SegmentCheck>,
    /// Temporary files present (not an error: a write may be in progress).
    pub temp_files: usize,
}

impl VerifyReport {
    /// Whether every segment passed full verification, and none would be
    /// refused under the trusted keys the cache was opened with.
    pub fn is_clean(&self) -> bool {
        self.segments
            .iter()
            .all(|s| s.problem.is_none() && s.refused.is_none())
    }
}

/// The full verification of one segment.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct SegmentCheck {
    /// The segment's file name.
    pub name: String,
    /// Its size.
    pub bytes: u64,
    /// Its entries (0 when it does not open).
    pub entries: usize,
    /// Where its entries came from (its
    /// [`Provenance`](crate::trust::Provenance), as text; empty when it
    /// does not open).
    pub provenance: String,
    /// What is wrong with it, if anything.
    pub problem: Option<String>,
    /// With trusted keys: why a process with those keys would not serve
    /// its entries (received unsigned, of unknown provenance, or signed by
    /// no trusted key), if it would not.
    pub refused: Option<String>,
}
