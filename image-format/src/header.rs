//! The fixed-size header at the start of every image, read before anything
//! else: magic, format version, rkyv version and layout, region table,
//! checksums and producer.
//!
//! All header fields are little-endian, whatever the archive's byte order.
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 0 | 8 | magic `KILNIMG\0` |
//! | 8 | 4 | format version |
//! | 12 | 4 | header length (256) |
//! | 16 | 1 | archive byte order: 1 little-endian, 2 big-endian |
//! | 17 | 1 | archive relative-pointer width in bits |
//! | 18 | 1 | archive primitives: 1 aligned, 0 unaligned |
//! | 19 | 1 | log2 of the region alignment (6: 64 bytes) |
//! | 20 | 16 | rkyv version, NUL-padded |
//! | 36 | 64 | producer, NUL-padded UTF-8 |
//! | 100 | 4 | signature trailer length: 0 (unsigned), 16 + 96 × n for n direct signatures, or 24 + 32 × depth + 96 × n for a batch signature (1 ≤ n ≤ 16, 1 ≤ depth ≤ 16; see the signature module) |
//! | 104 | 8 | entry count |
//! | 112 | 8 | index offset |
//! | 120 | 8 | index length |
//! | 128 | 8 | payload region offset |
//! | 136 | 8 | payload region length |
//! | 144 | 8 | body length (everything after the header, up to the signature trailer) |
//! | 152 | 32 | BLAKE3 of the body |
//! | 184 | 32 | index checksum (index tables, owners, metadata) |
//! | 216 | 8 | reserved: zero, a reader rejects other values |
//! | 224 | 32 | BLAKE3 of header bytes 0..224 |
//!
//! An image is the header, the body (`body length` bytes: index, padding,
//! payloads) and, when the signature trailer length is not zero, the
//! signature trailer right after the body. The file is exactly that long.
//! Format 3 gave bytes 100..104 (reserved and zero in format 2) this
//! meaning; nothing else changed.

use std::fmt;

use crate::{Digest, ReadError};

/// Magic bytes every image starts with.
pub const MAGIC: [u8; 8] = *b"KILNIMG\0";
/// The image format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 5;
/// Length of the header in bytes.
pub const HEADER_LEN: usize = 256;
/// Alignment of the index and of every payload, relative to the image start.
pub const REGION_ALIGN: usize = 64;

/// `value` rounded up to the next multiple of [`REGION_ALIGN`] (`None` on
/// overflow).
pub(crate) fn align_up(value: u64) -> Option<u64> {
    let align = REGION_ALIGN as u64;
    value.checked_add(align - 1).map(|v| v / align * align)
}
/// The rkyv version this build is pinned to (`=0.8.18` in the workspace).
pub const RKYV_VERSION: &str = "0.8.18";
/// Longest producer string the header holds, in bytes.
pub const MAX_PRODUCER_LEN: usize = 64;

const REGION_ALIGN_LOG2: u8 = 6;
/// Length of the rkyv version field.
const RKYV_VERSION_LEN: usize = 16;
/// The header bytes its own checksum covers: everything before it.
const CHECKSUMMED_LEN: usize = offsets::HEADER_CHECKSUM;

/// Byte order of the rkyv archive.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endianness {
    /// Least significant byte first.
    Little,
    /// Most significant byte first.
    Big,
}

impl fmt::Display for Endianness {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Endianness::Little => "little-endian",
            Endianness::Big => "big-endian",
        })
    }
}

/// How the rkyv archive is laid out: what rkyv's format features were when
/// it was written. An image is readable only with the same layout.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArchiveLayout {
    /// Byte order of archived primitives.
    pub endianness: Endianness,
    /// Width of relative pointers, in bits.
    pub pointer_width: u8,
    /// Whether archived primitives are naturally aligned.
    pub aligned_primitives: bool,
}

impl ArchiveLayout {
    /// The layout rkyv produces in this build (feature unification can change
    /// it, which is why it is recorded and checked).
    pub fn native() -> ArchiveLayout {
        use rkyv::primitive::{ArchivedU32, ArchivedUsize};
        use rkyv::rend::{u32_le, unaligned::u32_ule};
        use std::any::TypeId;
        let archived_u32 = TypeId::of::<ArchivedU32>();
        let little =
            archived_u32 == TypeId::of::<u32_le>() || archived_u32 == TypeId::of::<u32_ule>();
        ArchiveLayout {
            endianness: if little {
                Endianness::Little
            } else {
                Endianness::Big
            },
            pointer_width: bits(size_of::<ArchivedUsize>()),
            aligned_primitives: align_of::<ArchivedU32>() > 1,
        }
    }
}

const fn bits(bytes: usize) -> u8 {
    (bytes * 8) as u8
}

/// The parsed header of an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// Image format version.
    pub format_version: u32,
    /// rkyv version that wrote the index.
    pub rkyv_version: String,
    /// Layout of the rkyv archive.
    pub layout: ArchiveLayout,
    /// Alignment of the index and of every payload, in bytes.
    pub region_alignment: usize,
    /// Program that wrote the image (`"name version"`).
    pub producer: String,
    /// Number of entries.
    pub entry_count: u64,
    /// Offset of the rkyv index from the image start.
    pub index_offset: u64,
    /// Length of the rkyv index.
    pub index_len: u64,
    /// Offset of the payload region from the image start.
    pub payload_offset: u64,
    /// Length of the payload region.
    pub payload_len: u64,
    /// Length of everything after the header, up to the signature trailer.
    pub body_len: u64,
    /// Length of the signature trailer after the body: 0 for an unsigned
    /// image (see [`crate::signature`]).
    pub signature_len: u32,
    /// BLAKE3 of everything after the header.
    pub body_checksum: Digest,
    /// Checksum over the index tables, owners and metadata.
    pub index_checksum: Digest,
    /// BLAKE3 of the header's first 224 bytes.
    pub header_checksum: Digest,
}

/// Reads a fixed-size field; every caller passes offsets inside
/// [`HEADER_LEN`], and `bytes` is at least that long.
fn field<const N: usize>(bytes: &[u8; HEADER_LEN], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(src) = bytes.get(at..at + N) {
        out.copy_from_slice(src);
    }
    out
}

fn text_field(raw: &[u8]) -> Option<String> {
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    if raw[end..].iter().any(|&b| b != 0) {
        return None;
    }
    std::str::from_utf8(&raw[..end]).ok().map(str::to_owned)
}

fn put(bytes: &mut [u8; HEADER_LEN], at: usize, value: &[u8]) {
    bytes[at..at + value.len()].copy_from_slice(value);
}

impl Header {
    /// Encodes the header, computing its checksum.
    pub(crate) fn encode(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        put(&mut out, offsets::MAGIC, &MAGIC);
        put(
            &mut out,
            offsets::FORMAT_VERSION,
            &self.format_version.to_le_bytes(),
        );
        put(
            &mut out,
            offsets::HEADER_LEN,
            &(HEADER_LEN as u32).to_le_bytes(),
        );
        out[offsets::ENDIANNESS] = match self.layout.endianness {
            Endianness::Little => 1,
            Endianness::Big => 2,
        };
        out[offsets::POINTER_WIDTH] = self.layout.pointer_width;
        out[offsets::ALIGNED_PRIMITIVES] = u8::from(self.layout.aligned_primitives);
        out[offsets::REGION_ALIGN_LOG2] = REGION_ALIGN_LOG2;
        put(
            &mut out,
            offsets::RKYV_VERSION,
            self.rkyv_version.as_bytes(),
        );
        put(&mut out, offsets::PRODUCER, self.producer.as_bytes());
        put(
            &mut out,
            offsets::ENTRY_COUNT,
            &self.entry_count.to_le_bytes(),
        );
        put(
            &mut out,
            offsets::INDEX_OFFSET,
            &self.index_offset.to_le_bytes(),
        );
        put(&mut out, offsets::INDEX_LEN, &self.index_len.to_le_bytes());
        put(
            &mut out,
            offsets::PAYLOAD_OFFSET,
            &self.payload_offset.to_le_bytes(),
        );
        put(
            &mut out,
            offsets::PAYLOAD_LEN,
            &self.payload_len.to_le_bytes(),
        );
        put(&mut out, offsets::BODY_LEN, &self.body_len.to_le_bytes());
        put(
            &mut out,
            offsets::SIGNATURE_LEN,
            &self.signature_len.to_le_bytes(),
        );
        put(&mut out, offsets::BODY_CHECKSUM, &self.body_checksum.0);
        put(&mut out, offsets::INDEX_CHECKSUM, &self.index_checksum.0);
        let checksum = header_checksum(&out);
        put(&mut out, CHECKSUMMED_LEN, &checksum.0);
        out
    }

    /// Parses and checks the header at the start of `bytes`, for an image
    /// of `image_len` bytes in all (the region table is checked against
    /// it; `bytes` may hold only a prefix of the image).
    ///
    /// Checks run in an order that gives the most useful message: magic,
    /// format version, header checksum, archive layout, rkyv version,
    /// reserved bytes (zero), the signature trailer's length (before
    /// anything of the trailer is read: at most
    /// [`MAX_TRAILER_LEN`](crate::signature::MAX_TRAILER_LEN)), then
    /// lengths and regions.
    ///
    /// # Errors
    /// The [`ReadError`] of the first check that fails, in the order above.
    pub fn parse(bytes: &[u8], image_len: u64) -> Result<Header, ReadError> {
        let image = bytes;
        let file_len = image_len;
        let Some(bytes) = image.first_chunk::<HEADER_LEN>() else {
            if image.len() >= MAGIC.len() && image[..MAGIC.len()] != MAGIC {
                return Err(bad_magic(image));
            }
            return Err(ReadError::Truncated {
                what: "the header",
                len: file_len,
                needed: HEADER_LEN as u64,
            });
        };
        if field::<8>(bytes, offsets::MAGIC) != MAGIC {
            return Err(bad_magic(image));
        }
        let format_version = u32::from_le_bytes(field(bytes, offsets::FORMAT_VERSION));
        if format_version != FORMAT_VERSION {
            return Err(ReadError::FormatVersion {
                found: format_version,
                expected: FORMAT_VERSION,
            });
        }
        let stored_checksum = Digest(field(bytes, CHECKSUMMED_LEN));
        if header_checksum(bytes) != stored_checksum {
            return Err(ReadError::HeaderChecksum);
        }
        let header_len = u32::from_le_bytes(field(bytes, offsets::HEADER_LEN));
        if header_len as usize != HEADER_LEN {
            return Err(ReadError::HeaderLength {
                found: header_len,
                expected: HEADER_LEN as u32,
                version: FORMAT_VERSION,
            });
        }
        let layout = check_layout(bytes)?;
        let rkyv_version =
            text_field(&bytes[offsets::RKYV_VERSION..offsets::RKYV_VERSION + RKYV_VERSION_LEN])
                .ok_or_else(|| {
                    ReadError::Layout("the rkyv version field is not NUL-padded UTF-8".into())
                })?;
        if rkyv_version != RKYV_VERSION {
            return Err(ReadError::RkyvVersion {
                found: rkyv_version,
                expected: RKYV_VERSION,
            });
        }
        check_reserved(bytes)?;
        let signature_len = u32::from_le_bytes(field(bytes, offsets::SIGNATURE_LEN));
        crate::signature::check_trailer_len(signature_len)?;
        let producer = text_field(&bytes[offsets::PRODUCER..offsets::PRODUCER + MAX_PRODUCER_LEN])
            .ok_or_else(|| {
                ReadError::Layout("the producer field is not NUL-padded UTF-8".into())
            })?;
        let header = Header {
            format_version,
            rkyv_version,
            layout,
            region_alignment: REGION_ALIGN,
            producer,
            entry_count: u64::from_le_bytes(field(bytes, offsets::ENTRY_COUNT)),
            index_offset: u64::from_le_bytes(field(bytes, offsets::INDEX_OFFSET)),
            index_len: u64::from_le_bytes(field(bytes, offsets::INDEX_LEN)),
            payload_offset: u64::from_le_bytes(field(bytes, offsets::PAYLOAD_OFFSET)),
            payload_len: u64::from_le_bytes(field(bytes, offsets::PAYLOAD_LEN)),
            body_len: u64::from_le_bytes(field(bytes, offsets::BODY_LEN)),
            signature_len,
            body_checksum: Digest(field(bytes, offsets::BODY_CHECKSUM)),
            index_checksum: Digest(field(bytes, offsets::INDEX_CHECKSUM)),
            header_checksum: stored_checksum,
        };
        header.check_regions(file_len)?;
        Ok(header)
    }

    /// Where the body ends: the payload region's end, and the signature
    /// trailer's start (checked at parse not to overflow).
    pub fn body_end(&self) -> u64 {
        self.body_len.saturating_add(HEADER_LEN as u64)
    }

    fn check_regions(&self, file_len: u64) -> Result<(), ReadError> {
        let body_end = self
            .body_len
            .checked_add(HEADER_LEN as u64)
            .ok_or_else(|| ReadError::Layout(format!("body length {} overflows", self.body_len)))?;
        let expected_len = body_end
            .checked_add(u64::from(self.signature_len))
            .ok_or_else(|| ReadError::Layout(format!("body length {} overflows", self.body_len)))?;
        if file_len < expected_len {
            return Err(ReadError::Truncated {
                what: "the body the header describes",
                len: file_len,
                needed: expected_len,
            });
        }
        if file_len > expected_len {
            return Err(ReadError::TrailingBytes {
                expected: expected_len,
                extra: file_len - expected_len,
            });
        }
        let align = REGION_ALIGN as u64;
        let index_end = self.index_offset.checked_add(self.index_len);
        let payload_end = self.payload_offset.checked_add(self.payload_len);
        let aligned = |offset: u64| offset.is_multiple_of(align);
        let problem = if self.index_offset < HEADER_LEN as u64 || !aligned(self.index_offset) {
            Some(format!(
                "index offset {} is not a multiple of {align} after the header",
                self.index_offset
            ))
        } else if !aligned(self.payload_offset) {
            Some(format!(
                "payload offset {} is not a multiple of {align}",
                self.payload_offset
            ))
        } else if index_end.is_none_or(|end| end > self.payload_offset) {
            Some(format!(
                "index {}+{} overlaps the payload region at {}",
                self.index_offset, self.index_len, self.payload_offset
            ))
        } else if payload_end != Some(body_end) {
            Some(format!(
                "payload region {}+{} does not end at the body end {body_end}",
                self.payload_offset, self.payload_len
            ))
        } else {
            None
        };
        match problem {
            Some(problem) => Err(ReadError::Layout(problem)),
            None => Ok(()),
        }
    }
}

/// The reserved header ranges, `(offset, length)`: zero in this format
/// version. A reader rejects other values, so that a later format that gives
/// them a meaning is never misread by this one.
const RESERVED: [(usize, usize); 1] = [(offsets::RESERVED_TAIL, 8)];

fn check_reserved(bytes: &[u8; HEADER_LEN]) -> Result<(), ReadError> {
    for (offset, len) in RESERVED {
        let found = &bytes[offset..offset + len];
        if found.iter().any(|&b| b != 0) {
            return Err(ReadError::ReservedBytes {
                offset,
                found: found.to_vec(),
                expected: vec![0; len],
                version: FORMAT_VERSION,
            });
        }
    }
    Ok(())
}

fn bad_magic(image: &[u8]) -> ReadError {
    ReadError::BadMagic {
        found: image.iter().take(MAGIC.len()).copied().collect(),
        expected: MAGIC,
    }
}

fn check_layout(bytes: &[u8; HEADER_LEN]) -> Result<ArchiveLayout, ReadError> {
    let native = ArchiveLayout::native();
    let endianness = match bytes[offsets::ENDIANNESS] {
        1 => Endianness::Little,
        2 => Endianness::Big,
        other => {
            return Err(ReadError::Endianness {
                found: format!("of unknown byte order {other}"),
                expected: native.endianness.to_string(),
            });
        }
    };
    if endianness != native.endianness {
        return Err(ReadError::Endianness {
            found: endianness.to_string(),
            expected: native.endianness.to_string(),
        });
    }
    if bytes[offsets::POINTER_WIDTH] != native.pointer_width {
        return Err(ReadError::PointerWidth {
            found: bytes[offsets::POINTER_WIDTH],
            expected: native.pointer_width,
        });
    }
    let alignment_name = |aligned: bool| if aligned { "aligned" } else { "unaligned" };
    let aligned_primitives = match bytes[offsets::ALIGNED_PRIMITIVES] {
        0 => false,
        1 => true,
        other => {
            return Err(ReadError::PrimitiveAlignment {
                found: format!("unknown ({other})"),
                expected: alignment_name(native.aligned_primitives).into(),
            });
        }
    };
    if aligned_primitives != native.aligned_primitives {
        return Err(ReadError::PrimitiveAlignment {
            found: alignment_name(aligned_primitives).into(),
            expected: alignment_name(native.aligned_primitives).into(),
        });
    }
    if bytes[offsets::REGION_ALIGN_LOG2] != REGION_ALIGN_LOG2 {
        return Err(ReadError::Layout(format!(
            "region alignment 2^{}, format {FORMAT_VERSION} uses 2^{REGION_ALIGN_LOG2}",
            bytes[offsets::REGION_ALIGN_LOG2]
        )));
    }
    Ok(native)
}

/// BLAKE3 of the checksummed part of a header.
pub(crate) fn header_checksum(bytes: &[u8; HEADER_LEN]) -> Digest {
    Digest::of(&bytes[..CHECKSUMMED_LEN])
}

/// Recomputes and stores the header checksum of `image` in place: for tests
/// that patch header fields and want the field check, not the checksum
/// check, to fire. Does nothing on a slice shorter than a header. With the
/// feature `fuzzing` only.
#[cfg(feature = "fuzzing")]
pub fn reseal_header(image: &mut [u8]) {
    reseal(image);
}

/// Recomputes and stores the header checksum of `image` in place (signing
/// changes the signature trailer's length field). Does nothing on a slice
/// shorter than a header.
pub(crate) fn reseal(image: &mut [u8]) {
    if let Some(bytes) = image.first_chunk_mut::<HEADER_LEN>() {
        let checksum = header_checksum(bytes);
        bytes[CHECKSUMMED_LEN..].copy_from_slice(&checksum.0);
    }
}

// The fields tile the header: each ends where the next one starts.
const _: () = {
    use offsets::*;
    assert!(MAGIC + 8 == FORMAT_VERSION && FORMAT_VERSION + 4 == HEADER_LEN);
    assert!(HEADER_LEN + 4 == ENDIANNESS && ENDIANNESS + 1 == POINTER_WIDTH);
    assert!(POINTER_WIDTH + 1 == ALIGNED_PRIMITIVES);
    assert!(ALIGNED_PRIMITIVES + 1 == REGION_ALIGN_LOG2 && REGION_ALIGN_LOG2 + 1 == RKYV_VERSION);
    assert!(RKYV_VERSION + RKYV_VERSION_LEN == PRODUCER);
    assert!(PRODUCER + MAX_PRODUCER_LEN == SIGNATURE_LEN && SIGNATURE_LEN + 4 == ENTRY_COUNT);
    assert!(ENTRY_COUNT + 8 == INDEX_OFFSET && INDEX_OFFSET + 8 == INDEX_LEN);
    assert!(INDEX_LEN + 8 == PAYLOAD_OFFSET && PAYLOAD_OFFSET + 8 == PAYLOAD_LEN);
    assert!(PAYLOAD_LEN + 8 == BODY_LEN && BODY_LEN + 8 == BODY_CHECKSUM);
    assert!(BODY_CHECKSUM + 32 == INDEX_CHECKSUM && INDEX_CHECKSUM + 32 == RESERVED_TAIL);
    assert!(
        RESERVED_TAIL + 8 == HEADER_CHECKSUM && HEADER_CHECKSUM + 32 == crate::header::HEADER_LEN
    );
};

/// Byte offsets of header fields: the one definition the reader, the writer
/// and the tools and tests that patch headers all use.
pub mod offsets {
    /// Magic bytes (8).
    pub const MAGIC: usize = 0;
    /// Format version (u32 LE).
    pub const FORMAT_VERSION: usize = 8;
    /// Header length (u32 LE).
    pub const HEADER_LEN: usize = 12;
    /// Archive byte order (u8).
    pub const ENDIANNESS: usize = 16;
    /// Relative-pointer width in bits (u8).
    pub const POINTER_WIDTH: usize = 17;
    /// Aligned primitives flag (u8).
    pub const ALIGNED_PRIMITIVES: usize = 18;
    /// log2 of the region alignment (u8).
    pub const REGION_ALIGN_LOG2: usize = 19;
    /// rkyv version (16 bytes, NUL-padded).
    pub const RKYV_VERSION: usize = 20;
    /// Producer (64 bytes, NUL-padded).
    pub const PRODUCER: usize = 36;
    /// Signature trailer length (u32 LE): 0, 16 + 96 × signatures (direct),
    /// or 24 + 32 × depth + 96 × signatures (batch).
    pub const SIGNATURE_LEN: usize = 100;
    /// Entry count (u64 LE).
    pub const ENTRY_COUNT: usize = 104;
    /// Index offset (u64 LE).
    pub const INDEX_OFFSET: usize = 112;
    /// Index length (u64 LE).
    pub const INDEX_LEN: usize = 120;
    /// Payload region offset (u64 LE).
    pub const PAYLOAD_OFFSET: usize = 128;
    /// Payload region length (u64 LE).
    pub const PAYLOAD_LEN: usize = 136;
    /// Body length (u64 LE).
    pub const BODY_LEN: usize = 144;
    /// Body checksum (32 bytes).
    pub const BODY_CHECKSUM: usize = 152;
    /// Index checksum (32 bytes).
    pub const INDEX_CHECKSUM: usize = 184;
    /// Reserved, zero (8 bytes); nonzero bytes are rejected.
    pub const RESERVED_TAIL: usize = 216;
    /// Header checksum (32 bytes).
    pub const HEADER_CHECKSUM: usize = 224;
}
