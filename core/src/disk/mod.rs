//! The disk cache: run-time compiled entries persist across runs, shared
//! safely by concurrent processes.
//!
//! # Layout
//!
//! A cache directory (`KILN_CACHE_DIR`, see [`config`]) keeps the disk
//! tier's files in a subdirectory named after the kiln image format version
//! this build reads, `images-v<N>/` ([`DiskConfig::images_dir`]), created
//! with the directory on open. A segment of another format version fails to
//! open and would be removed as corrupt, so each version keeps to its own
//! subdirectory: programs built with different kiln versions can share one
//! cache directory, and none lists, compacts, evicts from or clears
//! another's subdirectory. Other users of the directory keep their own
//! subdirectories (the CUDA backend's memos are in `cuda-memo/`).
//!
//! The versioned subdirectory holds few large files, not one file per entry:
//!
//! - `seg-<ms>-<pid>-<n>-<entries>.kimg`: **segments**, each a complete
//!   kiln image.
//!   A process publishes a small segment for each entry it stores
//!   (atomically: temporary file, fsync, rename, fsync of the directory), and
//!   never modifies it again. Once there are more than
//!   [`DiskConfig::compact_after`] segments (by default 3: the base and two
//!   small ones), the smallest are merged into one under the exclusive lock
//!   (geometrically: a larger segment joins only while it is at most four
//!   times the sum of those chosen, so the base is rewritten rarely); the
//!   merged segments are deleted only after the merged one is published. A
//!   directory therefore holds at most three segments after any store, and
//!   a new process opens one to three files.
//! - `seg-base.kimg`: the **base segment**, compaction's output when it
//!   merges the base (or there is none yet), published by an atomic rename
//!   over the previous base. It holds most entries, and its name is known:
//!   a new process looks there first, without listing the directory.
//! - `seg-sig<owner><key>-….kimg`: a remote entry received **signed**, kept
//!   byte for byte with its signatures, one per file, never merged; and
//!   `seg-ext-<ms>-…`: entries received **unsigned** from another tier (the
//!   remote tier of a process without trusted keys), merged only among
//!   themselves. Every segment records the provenance of its entries
//!   ([`Provenance`](crate::trust::Provenance): its name's class and its
//!   `kiln.provenance` label), and with trusted keys only this user's
//!   compiles and what a trusted key signed are served (see *Trust* below).
//! - `stamps`: recency stamps (owner, key, last use) for LRU eviction
//!   (file access times are unreliable). A hit notes the use in memory; each
//!   process appends its notes at most once per
//!   [`DiskConfig::stamp_interval`], when the cache is dropped, and when the
//!   process exits (Unix), never once per hit, and rewrites the file when
//!   it has grown much larger than one record per entry (at exit too, so
//!   that processes that only read keep it bounded).
//! - `lock`: the directory lock, shared by writers, exclusive for compaction.
//! - `.tmp-*`: writes in progress, or orphans of crashed writers (removed
//!   under the exclusive lock).
//!
//! # Reading
//!
//! [`DiskCache::open`] opens and checks the cache directory and its
//! `images-v<N>/` (creating them when missing; one `fstat` each, and one
//! `stat` per directory above; see *A directory others could write to*
//! below) and opens the base segment's file, nothing more.
//! [`DiskCache::get`]
//! looks in the base segment first; the first miss lists the segments'
//! names, which are then searched base first, then fullest first (the
//! entry count is in the name), opening each on first use with structural
//! verification. The entry's payload checksums are checked before
//! answering, so a hit's bytes are borrowed from the segment (zero-copy) and
//! the first hit of a new process usually opens one file and lists nothing.
//! Opening a segment costs one `open` and one `fstat` (the very file
//! checked is handed to the image reader, which reads its metadata once
//! more), then one map of the whole file (the
//! base, and segments over 64 KiB: a hit touches only its pages) or one
//! `read` of the size `fstat` gave (smaller segments, such as a store's:
//! no map to set up, fault in and tear down, no file left open). On a miss the directory
//! is listed again if its modification time changed, which finds segments
//! published by other processes, and a replaced base (another inode under
//! the same name). Readers hold no lock: a segment deleted or replaced by
//! compaction stays mapped by whoever mapped it.
//!
//! As a [`Tier`](crate::Tier), the cache hands a hit over as the segment's
//! entry ([`TierEntry::Image`](crate::TierEntry::Image)): the in-memory
//! cache borrows its bytes from the segment instead of copying them.
//!
//! [`DiskTier`] wraps a [`DiskCache`] that is opened on first use: the
//! global cache ([`crate::global()`]) adds one at init without touching the
//! disk.
//!
//! # Size
//!
//! Every store checks this version's subdirectory against
//! [`DiskConfig::max_bytes`] (other versions' subdirectories and the rest
//! of the cache directory are not counted); over it, all segments are
//! merged leaving out the least recently used entries until the total is
//! 90 % of the cap. Recency stamps appended between
//! stores are bounded (they are compacted once they exceed four per entry
//! and 64 KiB), which the 10 % headroom absorbs.
//!
//! # A directory others could write to
//!
//! The cache serves what its directory holds, so the directory must be the
//! user's: [`DiskCache::open`] refuses a cache directory, or an
//! `images-v<N>/`, that another user owns or that users other than its
//! owner may write to (group or others write bit, sticky or not), and a
//! cache directory below a directory that another user (but root) owns or
//! that others may write to (unless sticky, as `/tmp`), as ssh refuses
//! `~/.ssh` (whoever can write a directory above could move the cache away
//! and put their own in its place), with
//! [`Error::DiskDirUntrusted`](crate::Error::DiskDirUntrusted): the disk
//! tier is then off, with one warning. `KILN_CACHE_TRUST_DIR=1`
//! ([`DiskConfig::trust_dir`]) uses such a directory anyway.
//!
//! The directory is held, not named: [`DiskCache::open`] opens it once and
//! checks what it opened; every file is then opened, created, listed,
//! renamed and removed relative to that handle (`openat`, `fstatat`,
//! `renameat`, `unlinkat`), never by path again. A directory renamed away
//! and replaced (by a link to another user's directory, say) while a
//! process runs is never read or written by that process: it keeps the
//! directory it checked. A new process checks the path again.
//!
//! Permissions: the cache creates its directories with mode 700 and its
//! files (segments, `stamps`, `lock`, temporary files) with mode 600, the
//! mode given to `mkdir` and `open` themselves, never set afterwards (the
//! umask can only narrow them). A cache holds compiled code that the
//! process runs: nobody else needs to read it, and nobody else may write
//! it. (A directory shared between users through `KILN_CACHE_TRUST_DIR`
//! therefore holds files only their writer can read.)
//!
//! Within the directory, nothing planted under one of the cache's file
//! names is followed, waited on or read without bound: every file is
//! opened with `O_NOFOLLOW | O_NONBLOCK` and used only if `fstat` shows a
//! regular file; listings skip anything else by its directory entry type.
//! A symbolic link, FIFO or device named like a segment is absent (a miss;
//! the next compaction replaces a base of that kind); named `stamps`, it
//! is no stamps (and appending to it fails: one warning, no more writes);
//! named `lock`, it fails the operation that needed the lock (a store: one
//! warning, no more writes), and nothing is created at its target. Reads
//! take at most the size the file should have: a segment the size `fstat`
//! gave, which its header must declare exactly; the `stamps` file at most
//! its last 32 MiB.
//!
//! # Trust
//!
//! With trusted keys ([`DiskConfig::trusted_keys`], the process's trust
//! policy), each segment is admitted by [`crate::trust::admit`] from its
//! provenance: compiled by this user's processes in a private directory
//! (served), received signed (served while a trusted key's signature
//! verifies), received unsigned or of unknown provenance (refused). A refusal
//! is a miss and a compile, one warning per cache, counted by the cache as
//! [`Stats::tier_untrusted`](crate::Stats::tier_untrusted). Compaction merges
//! compiled and received segments apart, so no path promotes a received entry
//! to a compiled one.
//!
//! # Failure is a miss
//!
//! A segment that does not open, or an entry whose payload fails its
//! checksum, is a miss, never an error to the caller; compaction removes it.
//! When the directory is read-only or full, the cache logs **one** warning
//! and stops writing; lookups go on and callers compile as before.
//!
//! # Example
//!
//! ```
//! use kiln_core::disk::{DiskCache, DiskConfig};
//! use kiln_image::{Artifact, ArtifactKind, Digest, EntryData};
//!
//! # fn main() -> Result<(), kiln_core::Error> {
//! let dir = tempfile::tempdir().map_err(|source| kiln_core::Error::DiskIo {
//!     action: "create", path: std::env::temp_dir(), source })?;
//! let entry = EntryData {
//!     owner: Digest::of(b"my-compiler 1.0 sm_90a"),
//!     owner_label: "my-compiler 1.0 sm_90a".into(),
//!     key: Digest::of(b"saxpy<f32>"),
//!     name: "saxpy<f32>".into(),
//!     min_world: 1,
//!     max_world: u64::MAX,
//!     deps: vec![],
//!     artifacts: vec![Artifact {
//!         kind: ArtifactKind::Ptx,
//!         entry_points: vec!["saxpy".into()],
//!         bytes: b".version 8.0".to_vec(),
//!     }],
//! };
//!
//! let cache = DiskCache::open(DiskConfig::new(dir.path()))?;
//! assert!(cache.get(&entry.owner, &entry.key).is_none());
//! cache.put(&entry);
//!
//! // Another process (here: another handle) finds it on disk.
//! let again = DiskCache::open(DiskConfig::new(dir.path()))?;
//! let hit = again.get(&entry.owner, &entry.key).expect("stored above");
//! assert_eq!(hit.artifact(&ArtifactKind::Ptx)?, Some(&b".version 8.0"[..]));
//! # Ok(())
//! # }
//! ```

pub mod config;

#[cfg(feature = "disk")]
mod admin;
#[cfg(feature = "disk")]
mod cache;
#[cfg(feature = "disk")]
mod compact;
#[cfg(feature = "disk")]
mod dir;
#[cfg(feature = "disk")]
mod hit;
#[cfg(feature = "disk")]
mod lock;
#[cfg(feature = "disk")]
mod recency;
#[cfg(feature = "disk")]
mod report;
#[cfg(feature = "disk")]
mod segment;
#[cfg(feature = "disk")]
mod stamps;
#[cfg(feature = "disk")]
mod tier;
#[cfg(feature = "disk")]
mod view;

#[cfg(feature = "disk")]
pub use cache::DiskCache;
pub use config::DiskConfig;
#[cfg(feature = "disk")]
pub use hit::{DiskArtifact, DiskHit};
#[cfg(feature = "disk")]
pub use report::{
    ArtifactInfo, ClearReport, DiskStats, EntryInfo, GcReport, SegmentCheck, SessionCounters,
    VerifyReport,
};
#[cfg(feature = "disk")]
pub use tier::DiskTier;

/// Checks `dir`, a subdirectory a backend keeps in the cache directory,
/// as [`DiskConfig::check_dir`] checks the cache directory: created with
/// mode 700 when missing; a directory, and unless `trust`
/// ([`DiskConfig::trust_dir`]) this user's, not writable by others, and
/// below directories only this user or root may change.
///
/// # Errors
/// As [`DiskConfig::check_dir`].
#[cfg(feature = "disk")]
pub fn check_subdir(dir: &std::path::Path, trust: bool) -> Result<(), crate::Error> {
    dir::check_dir(dir, trust)
}

/// Reads the file at `path`, kept in a cache directory, as the disk cache
/// reads its own files: a symbolic link is refused, not followed; a FIFO,
/// socket or device is refused without blocking; and at most `limit` bytes
/// are read. For files a backend keeps beside the cache's segments (its
/// memos); check the directory first with [`DiskConfig::check_dir`].
///
/// # Errors
/// The open's or read's error; [`std::io::ErrorKind::InvalidData`] when the
/// file is larger than `limit`; an error saying what it is when it is not
/// a regular file.
#[cfg(feature = "disk")]
pub fn read_regular_file(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    crate::regular_file::read(path, crate::regular_file::Links::Refuse, limit)
}
