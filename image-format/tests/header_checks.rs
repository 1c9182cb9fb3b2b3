//! Each header mismatch is reported by its own error variant, whose message
//! names what was found and what was expected. Headers are crafted by
//! patching bytes and, where the field sits behind the header checksum,
//! resealing the checksum so that the intended check is the one that fires.

mod common;

use common::{meta, sample_entries};
use kiln_image::header::{FORMAT_VERSION, HEADER_LEN, offsets, reseal_header};
use kiln_image::{Digest, Image, ImageWriter, ReadError, Verification};

fn image_bytes() -> Vec<u8> {
    let mut writer = ImageWriter::new(meta());
    for entry in sample_entries(6, 21) {
        writer.push(entry);
    }
    writer.to_bytes().unwrap()
}

fn open(bytes: &[u8]) -> ReadError {
    Image::from_bytes(bytes, Verification::Structural).expect_err("a bad image")
}

/// Patches `value` at `at`, reseals the header checksum, opens.
fn open_patched(at: usize, value: &[u8]) -> ReadError {
    let mut bytes = image_bytes();
    bytes[at..at + value.len()].copy_from_slice(value);
    reseal_header(&mut bytes);
    open(&bytes)
}

#[test]
fn bad_magic() {
    let mut bytes = image_bytes();
    bytes[0] = b'X';
    let error = open(&bytes);
    assert!(matches!(error, ReadError::BadMagic { .. }), "{error}");
    assert_eq!(error.check(), "header.magic");
    assert!(matches!(
        open(b"\x7fELF and more"),
        ReadError::BadMagic { .. }
    ));
    assert!(error.to_string().starts_with("not a kiln image"));
}

#[test]
fn format_version_is_checked_before_the_header_checksum() {
    let mut bytes = image_bytes();
    let next = FORMAT_VERSION + 1;
    bytes[offsets::FORMAT_VERSION..][..4].copy_from_slice(&next.to_le_bytes());
    let error = open(&bytes);
    assert!(
        matches!(
            error,
            ReadError::FormatVersion {
                found,
                expected: FORMAT_VERSION
            } if found == next
        ),
        "{error}"
    );
    assert!(
        error.to_string().contains(&format!(
            "image format {next}, this kiln reads {FORMAT_VERSION}"
        )),
        "{error}"
    );
    // An image of the previous format, checksums and all, is refused by
    // its version.
    let mut previous = image_bytes();
    previous[offsets::FORMAT_VERSION..][..4].copy_from_slice(&(FORMAT_VERSION - 1).to_le_bytes());
    reseal_header(&mut previous);
    assert_eq!(open(&previous).check(), "header.format_version");
}

#[test]
fn header_checksum() {
    let mut bytes = image_bytes();
    bytes[offsets::PRODUCER] ^= 1;
    let error = open(&bytes);
    assert!(matches!(error, ReadError::HeaderChecksum), "{error}");
    assert_eq!(error.check(), "header.checksum");
}

#[test]
fn header_length() {
    let error = open_patched(offsets::HEADER_LEN, &512u32.to_le_bytes());
    assert!(
        matches!(
            error,
            ReadError::HeaderLength {
                found: 512,
                expected: 256,
                ..
            }
        ),
        "{error}"
    );
}

#[test]
fn endianness() {
    let error = open_patched(offsets::ENDIANNESS, &[2]);
    assert!(matches!(error, ReadError::Endianness { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("image index is big-endian, this kiln reads little-endian"),
        "{error}"
    );
    let unknown = open_patched(offsets::ENDIANNESS, &[9]);
    assert!(matches!(unknown, ReadError::Endianness { .. }), "{unknown}");
}

#[test]
fn pointer_width() {
    let error = open_patched(offsets::POINTER_WIDTH, &[64]);
    assert!(
        matches!(
            error,
            ReadError::PointerWidth {
                found: 64,
                expected: 32
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("64-bit relative pointers, this kiln uses 32-bit")
    );
}

#[test]
fn primitive_alignment() {
    let error = open_patched(offsets::ALIGNED_PRIMITIVES, &[0]);
    assert!(
        matches!(error, ReadError::PrimitiveAlignment { .. }),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("unaligned primitives, this kiln reads aligned"),
        "{error}"
    );
}

#[test]
fn rkyv_version() {
    let error = open_patched(offsets::RKYV_VERSION, b"0.8.17");
    assert!(matches!(error, ReadError::RkyvVersion { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("image written by rkyv 0.8.17, this kiln uses rkyv 0.8.18"),
        "{error}"
    );
}

#[test]
fn region_table() {
    for (at, value) in [
        (offsets::REGION_ALIGN_LOG2, vec![4u8]),
        (offsets::INDEX_OFFSET, 100u64.to_le_bytes().to_vec()),
        (offsets::PAYLOAD_OFFSET, 64u64.to_le_bytes().to_vec()),
        (offsets::PAYLOAD_LEN, 1u64.to_le_bytes().to_vec()),
        (offsets::INDEX_LEN, u64::MAX.to_le_bytes().to_vec()),
    ] {
        let error = open_patched(at, &value);
        assert!(
            matches!(error, ReadError::Layout(_)),
            "patch at {at}: {error}"
        );
        assert_eq!(error.check(), "header.layout");
    }
}

#[test]
fn truncated_and_trailing_bytes() {
    let bytes = image_bytes();
    let error = open(&bytes[..bytes.len() - 1]);
    assert!(matches!(error, ReadError::Truncated { .. }), "{error}");
    let error = open(&bytes[..HEADER_LEN - 1]);
    assert!(
        matches!(error, ReadError::Truncated { needed: 256, .. }),
        "{error}"
    );
    let mut longer = bytes.clone();
    longer.push(0);
    let error = open(&longer);
    assert!(
        matches!(error, ReadError::TrailingBytes { extra: 1, .. }),
        "{error}"
    );
}

#[test]
fn body_length_must_match_the_file() {
    let bytes = image_bytes();
    let body_len = (bytes.len() - HEADER_LEN) as u64;
    let error = open_patched(offsets::BODY_LEN, &(body_len + 64).to_le_bytes());
    assert!(matches!(error, ReadError::Truncated { .. }), "{error}");
}

#[test]
fn body_checksum_is_checked_by_full_verification() {
    let mut bytes = image_bytes();
    let last = bytes.len() - 1; // the last payload byte
    bytes[last] ^= 0x40;
    let error = Image::from_bytes(&bytes, Verification::Full).expect_err("corrupt body");
    assert!(matches!(error, ReadError::BodyChecksum { .. }), "{error}");
    assert_eq!(error.check(), "body.checksum");
    // Structural open does not read payloads: the flip is caught on access.
    let image = Image::from_bytes(&bytes, Verification::Structural).unwrap();
    let caught = image
        .entries()
        .flat_map(|entry| {
            entry
                .unwrap()
                .artifacts()
                .map(|artifact| artifact.bytes().err())
                .collect::<Vec<_>>()
        })
        .flatten()
        .collect::<Vec<_>>();
    assert_eq!(caught.len(), 1);
    assert!(matches!(caught[0], ReadError::PayloadChecksum { .. }));
    assert!(matches!(
        image.verify_full(),
        Err(ReadError::BodyChecksum { .. })
    ));
}

#[test]
fn index_checksum() {
    let error = open_patched(offsets::INDEX_CHECKSUM, &[0xAA; 32]);
    assert!(matches!(error, ReadError::IndexChecksum), "{error}");
    assert_eq!(error.check(), "index.checksum");
}

#[test]
fn entry_checksum_catches_a_changed_name() {
    let mut bytes = image_bytes();
    let needle = b"kernel_3<f";
    let at = bytes
        .windows(needle.len())
        .position(|window| window == needle)
        .expect("name in the string table");
    bytes[at + 7] = b'4'; // still UTF-8, still in bounds: only the checksum can tell
    let image = Image::from_bytes(&bytes, Verification::Structural).unwrap();
    let rejected: Vec<_> = image.entries().filter_map(Result::err).collect();
    assert_eq!(rejected.len(), 1);
    assert!(
        matches!(rejected[0], ReadError::EntryChecksum { .. }),
        "{}",
        rejected[0]
    );
    assert_eq!(rejected[0].check(), "entry.checksum");
}

#[test]
fn entry_count_must_match_the_index() {
    let error = open_patched(offsets::ENTRY_COUNT, &7u64.to_le_bytes());
    assert!(matches!(error, ReadError::IndexMalformed(_)), "{error}");
}

#[test]
fn a_valid_header_opens() {
    let bytes = image_bytes();
    let mut resealed = bytes.clone();
    reseal_header(&mut resealed);
    assert_eq!(resealed, bytes);
    assert_eq!(
        Digest::of(&bytes[..224]).0,
        bytes[offsets::HEADER_CHECKSUM..HEADER_LEN]
    );
    Image::from_bytes(&bytes, Verification::Full).unwrap();
}

#[test]
fn reserved_bytes_must_be_zero() {
    let tail = open_patched(offsets::RESERVED_TAIL + 7, &[1]);
    match &tail {
        ReadError::ReservedBytes {
            offset,
            found,
            expected,
            version,
        } => {
            assert_eq!(*offset, offsets::RESERVED_TAIL);
            assert_eq!(found, &[0, 0, 0, 0, 0, 0, 0, 1]);
            assert_eq!(expected, &[0; 8]);
            assert_eq!(*version, FORMAT_VERSION);
        }
        other => panic!("expected ReservedBytes, got {other}"),
    }
    assert_eq!(tail.check(), "header.reserved");
    assert!(
        tail.to_string().contains(&format!(
            "header bytes 216..224 are reserved in format {FORMAT_VERSION}"
        )),
        "{tail}"
    );
    assert!(
        tail.to_string()
            .contains("expected [00, 00, 00, 00, 00, 00, 00, 00]"),
        "{tail}"
    );

    // Every bit of the reserved range, each with a resealed checksum.
    for bit in 0..64 {
        let mut bytes = image_bytes();
        bytes[offsets::RESERVED_TAIL + bit / 8] ^= 1 << (bit % 8);
        reseal_header(&mut bytes);
        let error = open(&bytes);
        assert!(
            matches!(error, ReadError::ReservedBytes { .. }),
            "bit {bit}: {error}"
        );
    }
}

/// Bytes 100..104 (reserved in format 2) give the signature trailer's
/// length: any value that is not whole records, or that the file does not
/// hold, is refused by the header checks, before the trailer is read.
#[test]
fn the_signature_trailer_length_is_checked_before_the_trailer_is_read() {
    use kiln_image::signature::{MAX_TRAILER_LEN, RECORD_LEN, TRAILER_HEAD_LEN};
    for len in [
        1u32,
        15,
        16,
        17,
        111,
        113,
        (MAX_TRAILER_LEN + RECORD_LEN) as u32,
        u32::MAX,
    ] {
        let error = open_patched(offsets::SIGNATURE_LEN, &len.to_le_bytes());
        assert_eq!(error.check(), "signature.trailer", "{len}: {error}");
    }
    // A valid length the file does not hold: the file is too short.
    let one = (TRAILER_HEAD_LEN + RECORD_LEN) as u32;
    let error = open_patched(offsets::SIGNATURE_LEN, &one.to_le_bytes());
    assert!(matches!(error, ReadError::Truncated { .. }), "{error}");
    // Every single-bit change of the field is refused.
    for bit in 0..32 {
        let mut bytes = image_bytes();
        bytes[offsets::SIGNATURE_LEN + bit / 8] ^= 1 << (bit % 8);
        reseal_header(&mut bytes);
        assert!(
            Image::from_bytes(&bytes, Verification::Structural).is_err(),
            "bit {bit}"
        );
    }
}
