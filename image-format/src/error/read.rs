//! [`ReadError`]: opening, validating or reading an image.

use std::path::PathBuf;

/// Opening, validating or reading an image failed: its header, layout,
/// bounds, index, entries, payloads or signature trailer are not what this
/// build reads, or the file could not be read.
///
/// Each variant names what mismatched and, where it helps, what to do.
/// [`ReadError::check`] gives a short stable name of the failed check, for
/// tools such as `kiln verify`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done ("open", "map", "write", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },

    /// The file does not start with the image magic bytes.
    #[error("not a kiln image: starts with {found:02x?}, expected {expected:02x?}")]
    BadMagic {
        /// The first bytes of the file.
        found: Vec<u8>,
        /// The magic bytes of every kiln image.
        expected: [u8; 8],
    },

    /// The file is shorter than its header says.
    #[error("image truncated: {len} bytes, but {what} needs {needed}")]
    Truncated {
        /// What did not fit.
        what: &'static str,
        /// Bytes present.
        len: u64,
        /// Bytes needed.
        needed: u64,
    },

    /// The file is longer than its header says.
    #[error(
        "image has {extra} trailing bytes after the {expected}-byte image the header describes"
    )]
    TrailingBytes {
        /// Length the header describes.
        expected: u64,
        /// Bytes beyond it.
        extra: u64,
    },

    /// The image was written in another format version.
    #[error("image format {found}, this kiln reads {expected}: rebuild the image with this kiln")]
    FormatVersion {
        /// Version in the header.
        found: u32,
        /// The only version this build reads.
        expected: u32,
    },

    /// The header's own checksum does not match its bytes.
    #[error("image header checksum mismatch: the header is corrupt")]
    HeaderChecksum,

    /// The header length field is not the one of this format version.
    #[error("image header is {found} bytes, format {version} headers are {expected}")]
    HeaderLength {
        /// Length in the header.
        found: u32,
        /// Length this build expects.
        expected: u32,
        /// The format version.
        version: u32,
    },

    /// The archive was written for the other byte order.
    #[error("image index is {found}, this kiln reads {expected}")]
    Endianness {
        /// Byte order in the header.
        found: String,
        /// Byte order of this build.
        expected: String,
    },

    /// The archive uses relative pointers of another width.
    #[error(
        "image index uses {found}-bit relative pointers, this kiln uses {expected}-bit: rkyv pointer_width features differ"
    )]
    PointerWidth {
        /// Width in the header, in bits.
        found: u8,
        /// Width of this build, in bits.
        expected: u8,
    },

    /// The archive's primitives are laid out aligned where this build expects
    /// unaligned, or the other way round.
    #[error(
        "image index has {found} primitives, this kiln reads {expected} ones: rkyv aligned/unaligned features differ"
    )]
    PrimitiveAlignment {
        /// Layout in the header.
        found: String,
        /// Layout of this build.
        expected: String,
    },

    /// The image was written by another rkyv version.
    #[error(
        "image written by rkyv {found}, this kiln uses rkyv {expected}: rebuild the image with this kiln"
    )]
    RkyvVersion {
        /// Version in the header.
        found: String,
        /// Version this build is pinned to.
        expected: &'static str,
    },

    /// Reserved header bytes are not zero: the image was written by a
    /// format that gives them a meaning this build does not know.
    #[error(
        "image header bytes {offset}..{} are reserved in format {version}: found {found:02x?}, expected {expected:02x?}",
        offset + found.len()
    )]
    ReservedBytes {
        /// Offset of the reserved range in the header.
        offset: usize,
        /// The bytes found there.
        found: Vec<u8>,
        /// What this format version requires (zeros).
        expected: Vec<u8>,
        /// The format version.
        version: u32,
    },

    /// The region table in the header is inconsistent.
    #[error("image layout is invalid: {0}")]
    Layout(String),

    /// The bytes do not start at an address aligned for zero-copy access.
    #[error(
        "image bytes start at address {address:#x}, which is not {required}-byte aligned: embed images with include_image! or load them with Image::from_bytes"
    )]
    Misaligned {
        /// Start address of the bytes.
        address: usize,
        /// Alignment required.
        required: usize,
    },

    /// The BLAKE3 of everything after the header does not match the header.
    #[error(
        "image body checksum mismatch: the file is corrupt (header says {expected}, body hashes to {found})"
    )]
    BodyChecksum {
        /// Checksum in the header.
        expected: crate::Digest,
        /// Checksum of the bytes.
        found: crate::Digest,
    },

    /// rkyv rejected the index.
    #[error("image index failed validation: {0}")]
    IndexValidation(String),

    /// The checksum over the index tables, owners and metadata does not match.
    #[error("image index checksum mismatch (tables, owners or metadata): the index is corrupt")]
    IndexChecksum,

    /// The index is well-formed rkyv but breaks a rule of the format.
    #[error("image index is malformed: {0}")]
    IndexMalformed(String),

    /// An entry record does not match its checksum.
    #[error("entry {index} does not match its record checksum: the entry is corrupt")]
    EntryChecksum {
        /// Entry index.
        index: usize,
    },

    /// An entry record points outside the image or holds invalid values.
    #[error("entry {index} is malformed: {what}")]
    EntryMalformed {
        /// Entry index.
        index: usize,
        /// What is wrong.
        what: String,
    },

    /// A payload does not match its BLAKE3 checksum; its bytes are withheld.
    #[error(
        "artifact {artifact} of entry {entry} does not match its BLAKE3 checksum: the payload is corrupt"
    )]
    PayloadChecksum {
        /// Entry index.
        entry: usize,
        /// Artifact index within the entry.
        artifact: usize,
    },

    /// A group of a compressed payload region is malformed or does not
    /// decompress: its payloads are never returned.
    #[error("payload group {group} of the image is corrupt: {problem}")]
    PayloadGroup {
        /// The group's position in the group table.
        group: usize,
        /// What is wrong with it.
        problem: String,
    },

    /// The dependency index does not match its checksum or is malformed.
    #[error("image dependency index is corrupt: {0}")]
    DepIndex(String),

    /// Two entries of one owner have the same key: lookups would return
    /// either (found by [`Verification::Full`](crate::Verification::Full)).
    #[error(
        "entries {first} and {second} have the same (owner, key) ({owner}, {key}): an image holds one entry per (owner, key); rebuild it"
    )]
    DuplicateKey {
        /// The first entry.
        first: usize,
        /// The entry after it.
        second: usize,
        /// Owner digest.
        owner: crate::Digest,
        /// Key digest.
        key: crate::Digest,
    },

    /// Two adjacent entries of one owner are not in ascending key order:
    /// lookups would miss (found by
    /// [`Verification::Full`](crate::Verification::Full)).
    #[error(
        "entries {first} and {second} of owner {owner} are out of order: keys must ascend within an owner, or lookups miss; rebuild the image"
    )]
    KeysOutOfOrder {
        /// The first entry.
        first: usize,
        /// The entry after it, with a smaller key.
        second: usize,
        /// Owner digest.
        owner: crate::Digest,
    },

    /// A lookup of the entry's own (owner, key) does not lead to it: its
    /// owner's entries are out of order or hold its key twice. The entry is
    /// not served, so that a lookup and an iteration never disagree.
    #[error(
        "entry {index} is not where a lookup of its (owner, key) leads: its owner's entries are out of order or hold its key twice; the entry is not served"
    )]
    EntryUnreachable {
        /// Entry index.
        index: usize,
    },

    /// An entry depends on a definition under which the dependency index
    /// does not list it: revalidation and invalidation, which go by the
    /// index, would miss it, so the entry is not served.
    #[error(
        "entry {entry} depends on {name:?} ({fingerprint}), but the dependency index does not list it there: the index disagrees with the entry, which is not served"
    )]
    DepNotIndexed {
        /// Entry index.
        entry: usize,
        /// Name of the definition.
        name: String,
        /// Its fingerprint in the entry.
        fingerprint: crate::Digest,
    },

    /// The dependency index lists an entry under a definition the entry
    /// does not depend on (found by
    /// [`Verification::Full`](crate::Verification::Full)).
    #[error(
        "the dependency index lists entry {entry} under {name:?} ({fingerprint}), but the entry does not depend on it"
    )]
    DepNotCarried {
        /// Entry index.
        entry: usize,
        /// Name of the definition.
        name: String,
        /// Fingerprint of the group.
        fingerprint: crate::Digest,
    },

    /// A reference (to records, text or payload bytes) points outside the
    /// table or range it must lie in.
    #[error("{what} at {start}+{len} ends past {limit}, the end of the {table}")]
    OutOfRange {
        /// What refers ("entry 5's deps", "group 2's name").
        what: String,
        /// First position referenced.
        start: u64,
        /// Length referenced.
        len: u64,
        /// What it must lie in ("dep table", "entry's text region").
        table: &'static str,
        /// The end of that table or range, in records or bytes.
        limit: u64,
    },

    /// Two entries (or two strings, or two artifacts) would share records,
    /// text or payload bytes. The format forbids it: a shared reference
    /// would make a reader do the same work once per reference.
    #[error("{0}: no two references may share records, text or payload bytes")]
    Overlap(String),

    /// The payload region the header describes is not in the image's bytes.
    #[error("payload region {start}..{end} lies outside the {available} bytes of the image")]
    PayloadRegion {
        /// First byte of the region.
        start: u64,
        /// End of the region.
        end: u64,
        /// Bytes available.
        available: u64,
    },

    /// An entry index past the end.
    #[error("entry index {index} is out of range: the image has {len} entries")]
    EntryOutOfRange {
        /// Index asked for.
        index: usize,
        /// Number of entries.
        len: usize,
    },

    /// An artifact index past the end of an entry's artifacts.
    #[error("artifact index {index} is out of range: the entry has {len} artifacts")]
    ArtifactOutOfRange {
        /// Index asked for.
        index: usize,
        /// Number of artifacts of the entry.
        len: usize,
    },

    /// The signature trailer (or its length in the header) breaks a rule
    /// of the format: the image is refused whether or not signatures are
    /// checked.
    #[error("image signature trailer is malformed: {0}")]
    SignatureTrailer(String),

    /// Something exceeds what the format can address.
    #[error("{what} is {size}, more than the format's limit of {limit}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

impl ReadError {
    /// A short stable name of the check that failed, as
    /// [`ImageError::check`](crate::ImageError::check) gives it.
    pub fn check(&self) -> &'static str {
        match self {
            ReadError::Io { .. } => "io",
            ReadError::BadMagic { .. } => "header.magic",
            ReadError::Truncated { .. } => "length.truncated",
            ReadError::TrailingBytes { .. } => "length.trailing",
            ReadError::FormatVersion { .. } => "header.format_version",
            ReadError::HeaderChecksum => "header.checksum",
            ReadError::HeaderLength { .. } => "header.length",
            ReadError::Endianness { .. } => "header.endianness",
            ReadError::PointerWidth { .. } => "header.pointer_width",
            ReadError::PrimitiveAlignment { .. } => "header.primitive_alignment",
            ReadError::RkyvVersion { .. } => "header.rkyv_version",
            ReadError::ReservedBytes { .. } => "header.reserved",
            ReadError::Layout(_) => "header.layout",
            ReadError::Misaligned { .. } => "storage.alignment",
            ReadError::BodyChecksum { .. } => "body.checksum",
            ReadError::IndexValidation(_) => "index.validation",
            ReadError::IndexChecksum => "index.checksum",
            ReadError::IndexMalformed(_) => "index.structure",
            ReadError::EntryChecksum { .. } => "entry.checksum",
            ReadError::EntryMalformed { .. } => "entry.structure",
            ReadError::PayloadChecksum { .. } => "payload.checksum",
            ReadError::PayloadGroup { .. } => "payload.group",
            ReadError::DepIndex(_) => "deps.index",
            ReadError::DuplicateKey { .. } => "index.duplicate_key",
            ReadError::KeysOutOfOrder { .. } => "index.key_order",
            ReadError::EntryUnreachable { .. } => "entry.lookup",
            ReadError::DepNotIndexed { .. } => "deps.unlisted",
            ReadError::DepNotCarried { .. } => "deps.extra",
            ReadError::OutOfRange { .. } => "index.range",
            ReadError::Overlap(_) => "index.overlap",
            ReadError::PayloadRegion { .. } => "payload.region",
            ReadError::EntryOutOfRange { .. } => "argument.range",
            ReadError::ArtifactOutOfRange { .. } => "argument.range",
            ReadError::SignatureTrailer(_) => "signature.trailer",
            ReadError::TooLarge { .. } => "writer.input",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::ReadError;
    use crate::Digest;

    /// Check names are part of the interface (`kiln verify` prints them):
    /// each new check has its own, and payload-range errors are not header
    /// errors.
    #[test]
    fn consistency_checks_have_stable_names_of_their_own() {
        let digest = Digest::default();
        let errors = [
            (
                ReadError::DuplicateKey {
                    first: 4,
                    second: 5,
                    owner: digest,
                    key: digest,
                },
                "index.duplicate_key",
            ),
            (
                ReadError::KeysOutOfOrder {
                    first: 4,
                    second: 5,
                    owner: digest,
                },
                "index.key_order",
            ),
            (ReadError::EntryUnreachable { index: 5 }, "entry.lookup"),
            (
                ReadError::DepNotIndexed {
                    entry: 5,
                    name: "foo".into(),
                    fingerprint: digest,
                },
                "deps.unlisted",
            ),
            (
                ReadError::DepNotCarried {
                    entry: 5,
                    name: "foo".into(),
                    fingerprint: digest,
                },
                "deps.extra",
            ),
            (
                ReadError::OutOfRange {
                    what: "entry 5's deps".into(),
                    start: 12,
                    len: 4,
                    table: "dep table",
                    limit: 10,
                },
                "index.range",
            ),
            (ReadError::Overlap("entry 5's deps".into()), "index.overlap"),
            (
                ReadError::PayloadRegion {
                    start: 0,
                    end: 10,
                    available: 5,
                },
                "payload.region",
            ),
        ];
        for (error, check) in &errors {
            assert_eq!(error.check(), *check, "{error}");
        }
        assert_eq!(
            errors[0].0.to_string(),
            format!(
                "entries 4 and 5 have the same (owner, key) ({digest}, {digest}): an image holds one entry per (owner, key); rebuild it"
            )
        );
        assert_eq!(
            errors[5].0.to_string(),
            "entry 5's deps at 12+4 ends past 10, the end of the dep table"
        );
    }
}
