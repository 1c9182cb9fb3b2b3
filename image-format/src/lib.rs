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
//! [ header, 256 bytes ][ rkyv index, at offset 256 ][ pad ][ payloads, each at a multiple of 64 ][ signatures, optional ]
//! ```
//!
//! The [`header`] is read first: magic, format version, header
//! checksum, archive layout (byte order, pointer width, primitive
//! alignment), rkyv version, region table, body checksum. Each mismatch is
//! its own [`ReadError`] variant naming what was found and what this build
//! expects.
//!
//! The index is a set of flat tables of fixed-size records (owners, entries
//! sorted by (owner, key), block records, deps, artifact descriptors, entry
//! points, the inverse dependency index, metadata) plus three text blobs
//! (entry text, group names, metadata text). Payloads are kept apart from
//! it, so opening and looking up touch only index pages. This is format 5
//! ([`header::FORMAT_VERSION`]); a reader refuses every other version.
//!
//! The payload region may be stored compressed
//! (`ImageWriter::to_compressed_bytes`, feature `compress`): the index is
//! the same, and lists groups of the payload region (each of one owner, so
//! of one target for a library built for several, and of at most
//! [`GROUP_SPLIT`] bytes but for a single larger entry), each stored as is
//! or as one zstd frame. A reader decompresses a group on the first access to one
//! of its payloads, once, in pure Rust, into a 64-byte-aligned buffer the
//! [`Image`] keeps, and lends payloads from it as from a plain image; a
//! process that reads one target's payloads holds that target's group
//! only ([`Image::decompressed`]). What a reader checks, and what it may
//! allocate, is in the `groups` module's documentation.
//! Format 3 is format 2 plus an optional signature trailer after the
//! payloads, whose length the header gives in bytes that format 2 kept
//! reserved and zero; format 4 gives the trailer a kind (bytes 12..16,
//! reserved zero in format 3) and adds batch signatures (see
//! [`signature`]); format 5 adds the payload group table to the index and
//! the built-in artifact kind [`ArtifactKind::Bytes`].
//!
//! # Verification and what each check covers
//!
//! - The header checksum covers the header; the *index checksum* (in the
//!   header) covers the index root (every table's length and position), the
//!   owner table, the label table and the metadata text. Both are checked at
//!   every open. Owner labels are display text, covered by this checksum
//!   only, not per entry: lookups go by owner digest (see the layout
//!   module).
//! - Each entry record carries a checksum over its fields, the dep,
//!   artifact and entry-point records it owns (payload offsets and BLAKE3s
//!   included) and its text region, checked on first access to the entry
//!   and remembered.
//! - Each payload's BLAKE3 is checked on its first
//!   [`ArtifactRef::bytes`] call and remembered; on a mismatch the bytes
//!   are never returned.
//! - The dependency index has two levels of checksum, so that its checks
//!   cost what is read: one over the group table and the group names,
//!   checked on first use in O(groups + names), and one per group over its
//!   entry list, checked when that group's entries are first read
//!   ([`DepGroup::entries`], [`Image::dependents_of`]). Both are remembered.
//! - The body checksum covers everything after the header; it is checked by
//!   [`Verification::Full`] and [`Image::verify_full`].
//!
//! Checksums are not signatures: anyone can recompute them. So every
//! structural property a reader relies on is checked too, whatever the
//! checksums say (see *Hostile images* below). Origin is what signatures
//! are for: an image may carry ed25519 signatures over its header and
//! index (and so, through the digests there, its payloads), which a reader
//! checks against the public keys it trusts
//! ([`Image::verify_signature`]; what is covered, and the trailer's
//! format, in the [`signature`] module). Many images can be signed
//! together ([`sign_images_batch`]): one signature of a Merkle root, each
//! image carrying its path, verified once per batch by a reader that keeps
//! its [`TrustedKeys`].
//!
//! [`Verification::Structural`] open reads the header, the root, the owners
//! and the metadata: its time grows with those, not with the entries or the
//! payloads.
//! [`Verification::Full`] adds the body checksum, every entry and payload
//! check, and the consistency of the whole index.
//! [`Image::from_static_trusted`] skips the index checks for bytes verified
//! earlier.
//!
//! # Hostile images
//!
//! A reader must survive any bytes, including an image forged with valid
//! checksums. Three guarantees, with what enforces them:
//!
//! - **Bounded cost.** No two references may share records, text or
//!   payload bytes: each text reference starts where the previous one of
//!   its blob ended, and every entry owns contiguous ranges of every table
//!   and of the payload region, which consecutive entries tile (checked per
//!   block of 64 entries against the block table, see the layout module).
//!   Every check is done once and remembered, and checksums stream through
//!   a fixed 256-byte buffer. So the checks of all readers together hash and
//!   validate each input byte a bounded number of times (once per
//!   verification level), and a reader allocates at most 8 × the input's
//!   length + 64 KiB at once, the copy [`Image::from_bytes`] makes included
//!   (the bound `tests/hostile.rs` and the `bounded_memory` fuzz target
//!   assert), plus, for a compressed image, 4 × the raw bytes of each group
//!   it decompresses, each group at most 1024 × its stored bytes (checked at
//!   open). Measured peaks: 1.0 × for forged amplifying images (refused
//!   before anything is copied), 1.9 × for the mutated corpus, 6.1 × for a
//!   valid image of nothing but small labels, where the owned copies
//!   [`Image::meta`] returns cost more than the records they copy. The only
//!   super-linear term is the lookup each entry check does, O(log entries)
//!   key comparisons.
//! - **Consistency.** [`Verification::Full`] checks that keys ascend
//!   strictly within each owner ([`ReadError::DuplicateKey`],
//!   [`ReadError::KeysOutOfOrder`]) and that the dependency index lists
//!   exactly what the entries' deps imply ([`ReadError::DepNotIndexed`],
//!   [`ReadError::DepNotCarried`]). At [`Verification::Structural`] an
//!   entry's first access checks that a lookup of its (owner, key) leads to
//!   it ([`ReadError::EntryUnreachable`]) and that the dependency index
//!   lists it under each of its deps (O(1) per dep), so a lookup is the
//!   entry, a miss or an error, and no entry the index leaves out is ever
//!   returned; an index that lists an entry it should not can only make a
//!   cache drop that entry.
//! - **Range.** Every reference is checked against the table or range it
//!   must lie in ([`ReadError::OutOfRange`]) before anything is read
//!   through it.
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
//! its bytes. A file rewritten or truncated in place by another process
//! while mapped serves changed bytes as checked ones, raises `SIGBUS`, or
//! (through a rewritten index) reads outside the map; the storage module
//! says exactly when. Image files must be replaced, never edited. Use
//! [`Image::from_bytes`] to work on a private copy.
//!
//! # Fuzzing
//!
//! `fuzz/` (outside the workspace) holds three cargo-fuzz targets that
//! feed arbitrary bytes to `fuzz_support::exercise` (open at both levels,
//! iterate every entry, owner and dep group, look every entry up, read
//! every payload, verify in full): `open_image` as they are,
//! `open_resealed` with the checksums recomputed first, and
//! `bounded_memory`, which also asserts the memory bound above.
//! `fuzz_support` (with `exercise`, `reseal` and the image forger `forge`)
//! and `header::reseal_header` exist only with the feature `fuzzing`, which
//! only the fuzz targets, the tests and the reliability suites enable. With
//! cargo-fuzz installed:
//!
//! ```text
//! fuzz/run.sh 60    # each image target for 60 s, seeded with valid images
//! ```
//!
//! (`RUSTC_BOOTSTRAP=1` lets a stable toolchain accept the sanitizer flags
//! cargo-fuzz passes.) The test `tests/corpus.rs` replays a deterministic
//! corpus of mutated images through the same function on every `cargo test`.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod check_state;
mod checksum;
#[cfg(feature = "compress")]
mod compress;
mod deps;
mod digest;
mod entry;
mod error;
mod full;
#[cfg(feature = "fuzzing")]
pub mod fuzz_support;
mod groups;
pub mod header;
mod image;
mod layout;
mod lookup;
mod model;
mod partition;
mod raw_payload;
mod seal;
mod search;
pub mod signature;
mod storage;
mod verify;
mod writer;

pub use deps::DepGroup;
pub use digest::{Digest, ParseDigestError};
pub use entry::{ArtifactRef, EntryRef};
pub use error::{ImageError, KeyError, ReadError, SignatureError, WriteError};
pub use groups::{GROUP_SPLIT, MAX_COMPRESSION_RATIO, MAX_GROUP_LEN};
pub use header::{ArchiveLayout, Endianness, Header};
pub use image::{Image, Verification};
pub use model::{Artifact, ArtifactKind, Dep, EntryData, ImageMeta};
pub use signature::{
    BatchPosition, PublicKey, SignatureCheck, SigningKey, TrustedKeys, sign_image,
    sign_images_batch, strip_signatures,
};
pub use storage::{FileAccess, ImageFile};
pub use writer::{ImageWriter, WRITE_PIECE, check_writable, write_file_atomic, write_in_pieces};
