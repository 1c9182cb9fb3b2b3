//! [`Image`]: an opened image, over embedded, mapped or owned bytes.

use std::ops::Range;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::check_state::CheckState;
use crate::header::{ArchiveLayout, Header};
use crate::layout::{ArchivedIndex, ArchivedStrRef};
use crate::storage::{FileAccess, ImageFile, STORAGE_ALIGN, Storage};
use crate::{Digest, ImageMeta, ReadError};

/// How much of an image is checked when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification {
    /// Everything at open: header, body checksum, index structure, every
    /// entry record and every payload checksum, and the consistency of the
    /// whole index (keys strictly ascending within each owner, the
    /// dependency index exactly what the entries' deps imply, nothing
    /// shared). Cost linear in the image size.
    Full,
    /// Header and index structure at open, in time linear in the owners and
    /// the metadata, not in the entries or the payloads; each entry is
    /// checked on its first access
    /// (its block of 64 entries, its own layout, checksum and values, that
    /// a lookup leads to it and that the dependency index lists it), each
    /// payload's checksum on its first [`bytes`](crate::ArtifactRef::bytes)
    /// call, and the results are remembered. An entry that fails is never
    /// returned, so every entry a reader gets is one [`Verification::Full`]
    /// would accept on its own.
    Structural,
}

/// An opened image: entries sorted by (owner, key), looked up in place.
///
/// Opening never reads payloads (except with [`Verification::Full`]), and
/// lookups never deserialize: [`EntryRef`](crate::EntryRef) and
/// [`ArtifactRef`](crate::ArtifactRef) read the archived records, and
/// payload bytes are borrowed from the image. No input makes a reader
/// method panic; corrupt data is reported as a [`ReadError`], never
/// returned.
///
/// No input makes a reader's work grow faster than the input: no two
/// references may share records, text or payload bytes (see the crate
/// docs), each check is done once and remembered, and checksums stream
/// through a fixed-size buffer. A reader allocates at most a few times the
/// input's length (the bound the tests and the `bounded_memory` fuzz target
/// assert is 8× plus 64 KiB, with the copy [`Image::from_bytes`] makes
/// counted).
pub struct Image {
    pub(crate) storage: Storage,
    pub(crate) header: Header,
    pub(crate) index_range: Range<usize>,
    pub(crate) payload_range: Range<usize>,
    pub(crate) entry_state: CheckState,
    pub(crate) artifact_state: CheckState,
    /// One bit per artifact: its payload failed its checksum.
    pub(crate) artifact_failed: CheckState,
    /// One bit: the dependency group table passed its checksum.
    pub(crate) dep_index_state: CheckState,
    /// One bit per dependency group: its member list passed its checksum.
    pub(crate) dep_group_state: CheckState,
    /// What of the block table and the blocks passed its check.
    pub(crate) blocks: crate::partition::BlockChecks,
    pub(crate) trusted: bool,
    /// The signatures of the trailer, as read at open (not checked).
    pub(crate) signatures: Vec<crate::signature::Record>,
    /// For a batch signature: the image's place in the batch and its
    /// Merkle path, as read at open (not checked).
    pub(crate) batch: Option<crate::signature::BatchPath>,
    /// The digest signatures sign, computed on first use.
    pub(crate) signed_digest: std::sync::OnceLock<Digest>,
    /// How the payload region is stored, and the decompressed groups of a
    /// compressed image (see `groups.rs`).
    pub(crate) groups: crate::groups::Groups,
}

/// Payload checksum checks run in this process ([`Image::payload_checks`]).
pub(crate) static PAYLOAD_CHECKS: AtomicU64 = AtomicU64::new(0);

/// How the index is checked at open.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Full,
    Structural,
    Trusted,
}

impl From<Verification> for Mode {
    fn from(level: Verification) -> Mode {
        match level {
            Verification::Full => Mode::Full,
            Verification::Structural => Mode::Structural,
        }
    }
}

impl Image {
    /// Opens an image embedded in the binary. The bytes must start at a
    /// 64-byte-aligned address (`include_image!` embeds them so).
    ///
    /// # Errors
    /// The [`ReadError`] of the first check of `level` that fails:
    /// [`ReadError::Misaligned`] when `bytes` is not 64-byte aligned.
    pub fn from_static(bytes: &'static [u8], level: Verification) -> Result<Image, ReadError> {
        Image::from_storage(Storage::Static(bytes), level.into())
    }

    /// Opens an embedded image without validating its index or checksums.
    ///
    /// The header is still parsed and checked (magic, versions, layout,
    /// lengths, alignment), and every entry and payload counts as verified.
    ///
    /// # Safety
    ///
    /// `bytes` passed [`Verification::Full`] earlier with this same build of
    /// `kiln-image` (for example at compile time, in `include_image!`) and are
    /// unchanged since. Reading an image that breaks this contract is
    /// undefined behaviour: the index is accessed without rkyv validation.
    ///
    /// # Errors
    /// [`ReadError::Misaligned`] or [`ReadError::Truncated`] when the bytes
    /// cannot hold the image the header describes.
    pub unsafe fn from_static_trusted(bytes: &'static [u8]) -> Result<Image, ReadError> {
        Image::from_storage(Storage::Static(bytes), Mode::Trusted)
    }

    /// Memory-maps the file at `path` read-only and opens it.
    ///
    /// Image files must be replaced (as [`ImageWriter::write_atomic`]
    /// does), never edited in place while mapped: see the crate docs.
    ///
    /// [`ImageWriter::write_atomic`]: crate::ImageWriter::write_atomic
    ///
    /// # Errors
    /// [`ReadError::Io`] when the file cannot be opened or mapped; the
    /// [`ReadError`] of the first check of `level` that fails.
    pub fn open(path: &Path, level: Verification) -> Result<Image, ReadError> {
        Image::from_storage(Storage::map_file(path)?, level.into())
    }

    /// Opens an image file opened with [`ImageFile::open`], bringing its
    /// bytes into memory as `access` says ([`Image::open`] is
    /// [`FileAccess::MapLazily`]). The caller can read the file's metadata
    /// (size, identity) from the [`ImageFile`] first, without another
    /// system call.
    ///
    /// Mapped image files must be replaced, never edited in place, as for
    /// [`Image::open`].
    ///
    /// # Errors
    /// [`ReadError::Io`] when the file cannot be mapped or read; the
    /// [`ReadError`] of the first check of `level` that fails.
    pub fn from_file(
        file: ImageFile,
        access: FileAccess,
        level: Verification,
    ) -> Result<Image, ReadError> {
        Image::from_storage(Storage::from_file(file, access)?, level.into())
    }

    /// Copies `bytes` into an owned, aligned buffer and opens it.
    ///
    /// # Errors
    /// The [`ReadError`] of the first check of `level` that fails.
    pub fn from_bytes(bytes: &[u8], level: Verification) -> Result<Image, ReadError> {
        Image::from_storage(Storage::copy_aligned(bytes), level.into())
    }

    fn from_storage(storage: Storage, mode: Mode) -> Result<Image, ReadError> {
        let head = storage.head();
        let image_len = storage.len();
        let header = Header::parse(head, image_len)?;
        let address = head.as_ptr() as usize;
        if !address.is_multiple_of(STORAGE_ALIGN) {
            return Err(ReadError::Misaligned {
                address,
                required: STORAGE_ALIGN,
            });
        }
        let to_range = |offset: u64, len: u64, limit: u64| -> Result<Range<usize>, ReadError> {
            let start = usize::try_from(offset).ok();
            let end = offset.checked_add(len).filter(|&end| end <= limit);
            match (start, end.and_then(|end| usize::try_from(end).ok())) {
                (Some(start), Some(end)) => Ok(start..end),
                _ => Err(ReadError::Layout(format!(
                    "region {offset}+{len} lies outside the {limit} bytes available"
                ))),
            }
        };
        let index_range = to_range(header.index_offset, header.index_len, head.len() as u64)?;
        let payload_range = to_range(header.payload_offset, header.payload_len, image_len)
            .map_err(|_| ReadError::PayloadRegion {
                start: header.payload_offset,
                end: header.payload_offset.saturating_add(header.payload_len),
                available: image_len,
            })?;
        if mode == Mode::Full {
            crate::verify::check_body(head, storage.payloads(&payload_range)?, &header)?;
        }
        // The length was checked with the header (at most a few KiB), and
        // the file's length against it.
        let crate::signature::Trailer {
            records: signatures,
            batch,
        } = if header.signature_len == 0 {
            crate::signature::Trailer::default()
        } else {
            let trailer = storage.tail(header.body_end(), header.signature_len as usize)?;
            crate::signature::parse_trailer(&trailer)?
        };
        let index_bytes = &head[index_range.clone()];
        let (entry_count, artifact_count, dep_group_count, block_count) = if mode == Mode::Trusted {
            crate::verify::trusted_counts(index_bytes, &header)?
        } else {
            crate::verify::check_index(index_bytes, &header)?
        };
        let trusted = mode == Mode::Trusted;
        let groups = {
            // SAFETY: the index bytes passed rkyv validation just above
            // (`check_index`) or, for a trusted image, the caller of
            // `from_static_trusted` guaranteed that they did earlier; the
            // storage is owned and not written.
            let index = unsafe { rkyv::access_unchecked::<ArchivedIndex>(index_bytes) };
            crate::groups::Groups::check(index, &header)?
        };
        let image = Image {
            entry_state: CheckState::new(entry_count, trusted),
            artifact_state: CheckState::new(artifact_count, trusted),
            artifact_failed: CheckState::new(artifact_count, false),
            dep_index_state: CheckState::new(1, trusted),
            dep_group_state: CheckState::new(dep_group_count, trusted),
            blocks: crate::partition::BlockChecks::new(block_count, trusted),
            storage,
            header,
            index_range,
            payload_range,
            trusted,
            signatures,
            batch,
            signed_digest: std::sync::OnceLock::new(),
            groups,
        };
        if mode == Mode::Full {
            image.verify_full()?;
        }
        Ok(image)
    }

    /// The bytes of the index.
    pub(crate) fn index_bytes(&self) -> &[u8] {
        // The range was checked against these same bytes at open.
        &self.storage.head()[self.index_range.clone()]
    }

    /// The archived index root.
    pub(crate) fn index(&self) -> &ArchivedIndex {
        // SAFETY: at open, the index bytes passed rkyv validation as an
        // `ArchivedIndex` (`verify::check_index`) or, for a trusted image,
        // the caller of `from_static_trusted` guaranteed that they did
        // earlier. The storage is owned by `self` and never written by this
        // process, and the range is the validated one. A mapped file
        // rewritten in place by another process breaks this (see the
        // module docs of `storage.rs`: image files are replaced, never
        // edited).
        unsafe { rkyv::access_unchecked::<ArchivedIndex>(self.index_bytes()) }
    }

    /// The stored payload region (mapped on first use for a mapped file):
    /// for a compressed image, the stored groups, not what entries see
    /// ([`Image::raw_payload`]).
    pub(crate) fn payloads(&self) -> Result<&[u8], ReadError> {
        self.storage.payloads(&self.payload_range)
    }

    /// A string of the entry text, or `None` if the reference is out of
    /// bounds or not UTF-8. O(its length).
    pub(crate) fn entry_str(&self, text: &ArchivedStrRef) -> Option<&str> {
        str_in(self.index().strings.as_slice(), text)
    }

    /// A group name, or `None` if the reference is out of bounds or not
    /// UTF-8. O(its length).
    pub(crate) fn group_str(&self, text: &ArchivedStrRef) -> Option<&str> {
        str_in(self.index().group_names.as_slice(), text)
    }

    /// A string of the metadata text, or `None` if the reference is out of
    /// bounds or not UTF-8. O(its length).
    pub(crate) fn meta_str(&self, text: &ArchivedStrRef) -> Option<&str> {
        str_in(self.index().meta_strings.as_slice(), text)
    }

    /// The parsed header.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The image format version.
    pub fn format_version(&self) -> u32 {
        self.header.format_version
    }

    /// The rkyv version that wrote the index.
    pub fn rkyv_version(&self) -> &str {
        &self.header.rkyv_version
    }

    /// The archive layout (byte order, pointer width, primitive alignment).
    pub fn layout(&self) -> ArchiveLayout {
        self.header.layout
    }

    /// The program that wrote the image, from the header.
    pub fn producer(&self) -> &str {
        &self.header.producer
    }

    /// Length of everything after the header up to the signature trailer,
    /// in bytes.
    pub fn body_len(&self) -> u64 {
        self.header.body_len
    }

    /// BLAKE3 of everything after the header, as recorded in the header.
    pub fn body_checksum(&self) -> Digest {
        self.header.body_checksum
    }

    /// Size of the whole image in bytes, header and signature trailer
    /// included.
    pub fn byte_len(&self) -> u64 {
        self.storage.len()
    }

    /// Where the bytes live: `"static"`, `"mapped"` or `"owned"`.
    pub fn storage_kind(&self) -> &'static str {
        self.storage.kind()
    }

    /// Whether the image was opened with
    /// [`from_static_trusted`](Image::from_static_trusted).
    pub fn is_trusted(&self) -> bool {
        self.trusted
    }

    /// How many payload checksum checks this process has run, over all
    /// images: one each time a payload's BLAKE3 is computed to check it (its
    /// first access, each access again after it failed, and each payload of
    /// an image opened or verified with [`Verification::Full`]). An access to
    /// a payload already checked adds nothing. A statistic, for tests and
    /// diagnostics.
    pub fn payload_checks() -> u64 {
        PAYLOAD_CHECKS.load(Ordering::Relaxed)
    }

    /// The image metadata (checked at open).
    pub fn meta(&self) -> ImageMeta {
        let index = self.index();
        let text = |r: &ArchivedStrRef| self.meta_str(r).unwrap_or_default().to_owned();
        ImageMeta {
            producer_name: text(&index.producer_name),
            producer_version: text(&index.producer_version),
            labels: index
                .labels
                .iter()
                .map(|label| (text(&label.key), text(&label.value)))
                .collect(),
        }
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.index().entries.len()
    }

    /// Whether the image has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The range of entries owned by `owner`, if it owns any.
    pub fn find_owner(&self, owner: &Digest) -> Option<Range<usize>> {
        let owners = self.index().owners.as_slice();
        let position = owners
            .binary_search_by(|record| record.digest.cmp(&owner.0))
            .ok()?;
        owners.get(position)?.entries.range()
    }

    /// Number of distinct owners.
    pub fn owner_count(&self) -> usize {
        self.index().owners.len()
    }

    /// Per owner, sorted by digest: its digest, its label and the
    /// contiguous range of entry indices it owns (checked at open).
    pub fn owners(&self) -> Vec<(Digest, String, Range<usize>)> {
        self.index()
            .owners
            .iter()
            .map(|owner| {
                (
                    Digest(owner.digest),
                    self.meta_str(&owner.label).unwrap_or_default().to_owned(),
                    owner.entries.range().unwrap_or_default(),
                )
            })
            .collect()
    }
}

/// The string `text` refers to in `blob`, if in bounds and UTF-8.
fn str_in<'a>(blob: &'a [u8], text: &ArchivedStrRef) -> Option<&'a str> {
    std::str::from_utf8(blob.get(text.range()?)?).ok()
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("storage", &self.storage.kind())
            .field("producer", &self.header.producer)
            .field("entries", &self.len())
            .field("body_len", &self.header.body_len)
            .finish()
    }
}
