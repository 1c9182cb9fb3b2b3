//! Each header mismatch is reported by its own error variant, whose message
//! names what was found and what was expected. Headers are crafted by
//! patching bytes and, where the field sits behind the header checksum,
//! resealing the checksum so that the intended check is the one that fires.

mod common;

use common::{meta, sample_entries};
use kiln_image::header::{FORMAT_VERSION, HEADER_LEN, offsets, reseal_header};
use kiln_image::{Digest, Image, ImageError, ImageWriter, Verification};

fn image_bytes() -> Vec<u8> {
    let mut writer = ImageWriter::new(meta());
    for entry in sample_entries(6, 21) {
        writer.push(entry);
    }
    writer.to_bytes().unwrap()
}

fn open(bytes: &[u8]) -> ImageError {
    Image::from_bytes(bytes, Verification::Structural).expect_err("a bad image")
}

/// Patches `value` at `at`, reseals the header checksum, opens.
fn open_patched(at: usize, value: &[u8]) -> ImageError {
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
    assert!(matches!(error, ImageError::BadMagic { .. }), "{error}");
    assert_eq!(error.check(), "header.magic");
    assert!(matches!(
        open(b"\x7fELF and more"),
        ImageError::BadMagic { .. }
    ));
    assert!(error.to_string().starts_with("not a kiln image"));
}

#[test]
fn format_version_is_checked_before_the_header_checksum() {
    let mut bytes = image_bytes();
    bytes[offsets::FORMAT_VERSION..][..4].copy_from_slice(&3u32.to_le_bytes());
    let error = open(&bytes);
    assert!(
        matches!(
            error,
            ImageError::FormatVersion {
                found: 3,
                expected: FORMAT_VERSION
            }
        ),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains(&format!("image format 3, this kiln reads {FORMAT_VERSION}")),
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
    assert!(matches!(error, ImageError::HeaderChecksum), "{error}");
    assert_eq!(error.check(), "header.checksum");
}

#[test]
fn header_length() {
    let error = open_patched(offsets::HEADER_LEN, &512u32.to_le_bytes());
    assert!(
        matches!(
            error,
            ImageError::HeaderLength {
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
    assert!(matches!(error, ImageError::Endianness { .. }), "{error}");
    assert!(
        error
            .to_string()
            .contains("image index is big-endian, this kiln reads little-endian"),
        "{error}"
    );
    let unknown = open_patched(offsets::ENDIANNESS, &[9]);
    assert!(
        matches!(unknown, ImageError::Endianness { .. }),
        "{unknown}"
    );
}

#[test]
fn pointer_width() {
    let error = open_patched(offsets::POINTER_WIDTH, &[64]);
    assert!(
        matches!(
            error,
            ImageError::PointerWidth {
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
        matches!(error, ImageError::PrimitiveAlignment { .. }),
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
    assert!(matches!(error, ImageError::RkyvVersion { .. }), "{error}");
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
            matches!(error, ImageError::Layout(_)),
            "patch at {at}: {error}"
        );
        assert_eq!(error.check(), "header.layout");
    }
}

#[test]
fn truncated_and_trailing_bytes() {
    let bytes = image_bytes();
    let error = open(&bytes[..bytes.len() - 1]);
    assert!(matches!(error, ImageError::Truncated { .. }), "{error}");
    let error = open(&bytes[..HEADER_LEN - 1]);
    assert!(
        matches!(error, ImageError::Truncated { needed: 256, .. }),
        "{error}"
    );
    let mut longer = bytes.clone();
    longer.push(0);
    let error = open(&longer);
    assert!(
        matches!(error, ImageError::TrailingBytes { extra: 1, .. }),
        "{error}"
    );
}

#[test]
fn body_length_must_match_the_file() {
    let bytes = image_bytes();
    let body_len = (bytes.len() - HEADER_LEN) as u64;
    let error = open_patched(offsets::BODY_LEN, &(body_len + 64).to_le_bytes());
    assert!(matches!(error, ImageError::Truncated { .. }), "{error}");
}

#[test]
fn body_checksum_is_checked_by_full_verification() {
    let mut bytes = image_bytes();
    let last = bytes.len() - 1; // the last payload byte
    bytes[last] ^= 0x40;
    let error = Image::from_bytes(&bytes, Verification::Full).expect_err("corrupt body");
    assert!(matches!(error, ImageError::BodyChecksum { .. }), "{error}");
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
    assert!(matches!(caught[0], ImageError::PayloadChecksum { .. }));
    assert!(matches!(
        image.verify_full(),
        Err(ImageError::BodyChecksum { .. })
    ));
}

#[test]
fn index_checksum() {
    let error = open_patched(offsets::INDEX_CHECKSUM, &[0xAA; 32]);
    assert!(matches!(error, ImageError::IndexChecksum), "{error}");
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
        matches!(rejected[0], ImageError::EntryChecksum { .. }),
        "{}",
        rejected[0]
    );
    assert_eq!(rejected[0].check(), "entry.checksum");
}

#[test]
fn entry_count_must_match_the_index() {
    let error = open_patched(offsets::ENTRY_COUNT, &7u64.to_le_bytes());
    assert!(matches!(error, ImageError::IndexMalformed(_)), "{error}");
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
    let error = open_patched(offsets::RESERVED + 2, &[0x5a]);
    match &error {
        ImageError::ReservedBytes {
            offset,
            found,
            expected,
            version,
        } => {
            assert_eq!(*offset, offsets::RESERVED);
            assert_eq!(found, &[0, 0, 0x5a, 0]);
            assert_eq!(expected, &[0; 4]);
            assert_eq!(*version, FORMAT_VERSION);
        }
        other => panic!("expected ReservedBytes, got {other}"),
    }
    assert_eq!(error.check(), "header.reserved");
    assert!(
        error.to_string().contains(&format!(
            "header bytes 100..104 are reserved in format {FORMAT_VERSION}"
        )),
        "{error}"
    );
    assert!(
        error.to_string().contains("expected [00, 00, 00, 00]"),
        "{error}"
    );

    let tail = open_patched(offsets::RESERVED_TAIL + 7, &[1]);
    assert!(
        matches!(
            &tail,
            ImageError::ReservedBytes { offset, found, .. }
                if *offset == offsets::RESERVED_TAIL && found == &[0, 0, 0, 0, 0, 0, 0, 1]
        ),
        "{tail}"
    );
    assert!(tail.to_string().contains("216..224"), "{tail}");

    // Every bit of both reserved ranges, each with a resealed checksum.
    for (start, len) in [(offsets::RESERVED, 4), (offsets::RESERVED_TAIL, 8)] {
        for bit in 0..len * 8 {
            let mut bytes = image_bytes();
            bytes[start + bit / 8] ^= 1 << (bit % 8);
            reseal_header(&mut bytes);
            let error = open(&bytes);
            assert!(
                matches!(error, ImageError::ReservedBytes { .. }),
                "bit {bit} at {start}: {error}"
            );
        }
    }
}
