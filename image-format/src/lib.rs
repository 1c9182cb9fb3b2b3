//! Kiln's package-image format: a versioned header, a zero-copy rkyv index
//! and checksummed payloads.
//!
//! An image carries precompiled code-instance entries from a build to every
//! run. Each entry has an owner (compiler configuration), a key (method
//! instance), a name, a world range, deps (backedges) and one or more
//! artifacts (compiled bytes plus kind and entry points).
//!
//! ```
//! use kiln_image::{Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, Verification};
//!
//! let mut writer = ImageWriter::new(ImageMeta::new("my-kernels", "1.0.0"));
//! writer.push(EntryData {
//!     owner: Digest::of(b"nvrtc 13.0 sm_90a -O3"),
//!     owner_label: "nvrtc 13.0 sm_90a".into(),
//!     key: Digest::of(b"saxpy<f32>"),
//!     name: "saxpy<f32>".into(),
//!     min_world: 1,
//!     max_world: u64::MAX,
//!     deps: vec![Dep { name: "saxpy".into(), fingerprint: Digest::of(b"saxpy source") }],
//!     artifacts: vec![Artifact {
//!         kind: ArtifactKind::Ptx,
//!         entry_points: vec!["saxpy_f32".into()],
//!         bytes: b".version 8.0 ...".to_vec(),
//!     }],
//! });
//! let bytes = writer.to_bytes()?;
//!
//! let image = Image::from_bytes(&bytes, Verification::Structural)?;
//! let entry = image
//!     .find(&Digest::of(b"nvrtc 13.0 sm_90a -O3"), &Digest::of(b"saxpy<f32>"))?
//!     .expect("the entry was written");
//! assert_eq!(entry.name(), "saxpy<f32>");
//! let ptx: &[u8] = entry.artifact(0)?.bytes()?; // borrowed, checksum checked
//! assert_eq!(ptx, b".version 8.0 ...");
//! assert_eq!(image.dependents_of("saxpy")?.collect::<Vec<_>>(), vec![entry.index()]);
//! # Ok::<(), kiln_image::ImageError>(())
//! ```
//!
//! # Layout
//!
//! ```text
//! [ header, 256 bytes ][ rkyv index, at offset 256 ][ pad ][ payloads, each at a multiple of 64 ]
//! ```
//!
//! The [`header`] is read first: magic, format version, header
//! checksum, archive layout (byte order, pointer width, primitive
//! alignment), rkyv version, region table, body checksum. Each mismatch is
//! its own [`ImageError`] variant naming what was found and what this build
//! expects.
//!
//! The index is a set of flat tables of fixed-size records (owners, entries
//! sorted by (owner, key), deps, artifact descriptors, entry points, the
//! inverse dependency index, metadata) plus one string blob. Payloads are
//! kept apart from it, so opening and looking up touch only index pages.
//!
//! # Verification and what each check covers
//!
//! - The header checksum covers the header; the *index checksum* (in the
//!   header) covers the index root (every table's length and position), the
//!   owner table (digests and labels) and the metadata. Both are checked at
//!   every open. Owner labels are display text, covered by this checksum
//!   only, not per entry: lookups go by owner digest (see the layout
//!   module).
//! - Each entry record carries a checksum over its fields and everything it
//!   references (owner digest, name, deps, artifact descriptors with payload
//!   offsets and BLAKE3s, entry points), checked on first access to the entry
//!   and remembered.
//! - Each payload's BLAKE3 is checked on its first
//!   [`ArtifactRef::bytes`] call and remembered; on a mismatch the bytes
//!   are never returned.
//! - The dependency index has two levels of checksum, so that its checks
//!   cost what is read: one over the group table (each group's name,
//!   fingerprint, member range and member checksum), checked on first use
//!   in O(groups), and one per group over its entry list, checked when that
//!   group's entries are first read ([`DepGroup::entries`],
//!   [`Image::dependents_of`]). Both are remembered.
//! - The body checksum covers everything after the header; it is checked by
//!   [`Verification::Full`] and [`Image::verify_full`].
//!
//! [`Verification::Structural`] open therefore costs time independent of
//! payload sizes, and linear in the entry count only through rkyv's
//! bounds-check of fixed-size records. [`Verification::Full`] adds the body
//! checksum and every entry and payload check. [`Image::from_static_trusted`]
//! skips the index checks for bytes verified earlier.
//!
//! # Safety of mapped files
//!
//! [`Image::open`] memory-maps the header and index at open, and the
//! payload region on the first payload access (so that opening costs the
//! same whatever the payload sizes). [`Image::from_file`] lets the caller
//! map the whole file at once instead ([`FileAccess::MapWhole`]: one map,
//! for callers about to read payloads), or read it into memory
//! ([`FileAccess::Read`], for small files), from an [`ImageFile`] whose
//! metadata the caller can read first. Kiln writes images by rename
//! ([`ImageWriter::write_atomic`]), never in place, so a mapped image keeps
//! its bytes. A file rewritten in place by another process while mapped can
//! change bytes after they were checked, like any memory-mapped file: image
//! files must be replaced, never edited. Use [`Image::from_bytes`] to work on
//! a private copy.
//!
//! # Fuzzing
//!
//! `fuzz/` (outside the workspace) holds a cargo-fuzz target,
//! `open_image`, that feeds arbitrary bytes to `fuzz_support::exercise`
//! (with the feature `fuzzing`, which only the fuzz targets, the tests and
//! the reliability suites enable):
//! open, iterate every entry, owner and dep group, look every entry up and
//! read every payload. With cargo-fuzz installed:
//!
//! ```text
//! cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run open_image -- -max_total_time=60
//! ```
//!
//! (`RUSTC_BOOTSTRAP=1` lets a stable toolchain accept the sanitizer flags
//! cargo-fuzz passes.) The test `tests/corpus.rs` replays a deterministic
//! corpus of mutated images through the same function on every `cargo test`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod check_state;
mod checksum;
mod deps;
mod digest;
mod entry;
mod error;
#[cfg(feature = "fuzzing")]
pub mod fuzz_support;
pub mod header;
mod image;
mod layout;
mod model;
mod search;
mod storage;
mod verify;
mod writer;

pub use deps::DepGroup;
pub use digest::Digest;
pub use entry::{ArtifactRef, EntryRef};
pub use error::ImageError;
pub use header::{ArchiveLayout, Endianness, Header};
pub use image::{Image, Verification};
pub use model::{Artifact, ArtifactKind, Dep, EntryData, ImageMeta};
pub use storage::{FileAccess, ImageFile};
pub use writer::{ImageWriter, WRITE_PIECE, write_file_atomic, write_in_pieces};
