//! Shipped images: round trips, signatures, and every way a damaged or
//! hostile file is refused.

use kiln_image::{Artifact, ArtifactKind, Dep, Digest, EntryData, ImageMeta, SigningKey};
use kiln_ship::file::{HEADER_LEN, MAX_EXPANSION, SLACK};
use kiln_ship::{Manifest, ShipError, Shipped, ShippedFile};

fn entry(n: u8, payload: &[u8]) -> EntryData {
    EntryData {
        owner: Digest::of(&[b'o', n % 2]),
        owner_label: format!("compiler sm_{}", 80 + n % 2),
        key: Digest::of(&[b'k', n]),
        name: format!("kernel<{n}>"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: "cuda.nvrtc".into(),
            fingerprint: Digest::of(b"13.0.88"),
        }],
        artifacts: vec![
            Artifact {
                kind: ArtifactKind::Cubin,
                entry_points: vec![format!("kernel_{n}")],
                bytes: payload.to_vec(),
            },
            Artifact {
                kind: ArtifactKind::Ptx,
                entry_points: vec![format!("kernel_{n}")],
                bytes: format!(".entry kernel_{n}").into_bytes(),
            },
        ],
    }
}

fn manifest() -> Manifest {
    let mut manifest = Manifest::new("demo");
    manifest
        .records
        .insert("kiln-cuda".into(), "kiln-cuda-build/1 nvrtc=13.0.88".into());
    manifest
        .sources
        .insert("src/catalogue.rs".into(), Digest::of(b"source"));
    manifest.specialization_count = 3;
    manifest
}

fn shipped() -> Shipped {
    // Entries given out of order: they are sorted.
    let entries = vec![
        entry(2, &[7u8; 3000]),
        entry(0, &[7u8; 3000]),
        entry(1, b"cubin one"),
    ];
    Shipped::new(manifest(), ImageMeta::new("demo", "0.1.0"), entries)
}

#[test]
fn a_shipped_image_round_trips_compressed_and_stored() {
    let original = shipped();
    for bytes in [
        original.encode(19).unwrap(),
        original.encode_stored().unwrap(),
    ] {
        let back = Shipped::from_bytes(&bytes).unwrap();
        assert_eq!(back, original);
        assert!(back.same_content(&original));
        let keys: Vec<_> = back.entries().iter().map(|e| (e.owner, e.key)).collect();
        let mut sorted = keys.clone();
        sorted.sort();
        assert_eq!(keys, sorted);
        let image = back.to_image().unwrap();
        assert_eq!(image.len(), 3);
        let found = image
            .find(&original.entries()[0].owner, &original.entries()[0].key)
            .unwrap()
            .unwrap();
        assert_eq!(found.name(), original.entries()[0].name);
    }
    let compressed = original.encode(19).unwrap();
    assert!(
        compressed.len() < original.encode_stored().unwrap().len() / 3,
        "repeated payloads compress"
    );
    assert_eq!(
        compressed,
        original.encode(19).unwrap(),
        "the same content gives the same bytes"
    );
}

#[test]
fn signatures_cover_the_header_and_are_checked_per_key() {
    let bytes = shipped().encode(19).unwrap();
    let key = SigningKey::from_secret_bytes([1; 32]);
    let other = SigningKey::from_secret_bytes([2; 32]);
    let file = ShippedFile::parse(&bytes).unwrap();
    assert!(matches!(
        file.check_signed_by(&key.public_key()),
        Err(ShipError::NotSigned { .. })
    ));

    let signed = file.signed_with(&key).unwrap();
    let twice = ShippedFile::parse(&signed)
        .unwrap()
        .signed_with(&other)
        .unwrap();
    let file = ShippedFile::parse(&twice).unwrap();
    assert_eq!(file.signers().len(), 2);
    file.check_signed_by(&key.public_key()).unwrap();
    file.check_signed_by(&other.public_key()).unwrap();
    assert_eq!(Shipped::unpack(&file).unwrap(), shipped());
    // Re-signing replaces, and the order of signing does not matter.
    let other_first = ShippedFile::parse(
        &ShippedFile::parse(&bytes)
            .unwrap()
            .signed_with(&other)
            .unwrap(),
    )
    .unwrap()
    .signed_with(&key)
    .unwrap();
    assert_eq!(other_first, twice);

    // A header changed under the signature: it no longer verifies (or the
    // change is refused before).
    for at in 16..HEADER_LEN {
        let mut tampered = signed.clone();
        tampered[at] ^= 1;
        let verdict =
            ShippedFile::parse(&tampered).and_then(|file| file.check_signed_by(&key.public_key()));
        assert!(
            verdict.is_err(),
            "header byte {at} changed, signature still verified"
        );
    }
    // A signature changed.
    let mut tampered = signed.clone();
    let last = tampered.len() - 1;
    tampered[last] ^= 1;
    assert!(matches!(
        ShippedFile::parse(&tampered)
            .unwrap()
            .check_signed_by(&key.public_key()),
        Err(ShipError::BadSignature { .. })
    ));
}

#[test]
fn every_truncation_and_bit_flip_is_refused_or_harmless() {
    let original = shipped();
    let bytes = ShippedFile::parse(&original.encode(19).unwrap())
        .unwrap()
        .signed_with(&SigningKey::from_secret_bytes([3; 32]))
        .unwrap();
    let unsigned_len = original.encode(19).unwrap().len();
    for len in 0..bytes.len() {
        match Shipped::from_bytes(&bytes[..len]) {
            // Cut exactly before the signature trailer: a whole unsigned
            // file, which a library that names its key refuses.
            Ok(back) if len == unsigned_len => assert_eq!(back, original),
            Ok(_) => panic!("truncated to {len} bytes and accepted"),
            Err(_) => {}
        }
    }
    let mut extended = bytes.clone();
    extended.push(0);
    assert!(matches!(
        Shipped::from_bytes(&extended),
        Err(ShipError::Length { .. } | ShipError::BadTrailer(_))
    ));
    for at in 0..bytes.len() {
        for bit in [0, 3, 7] {
            let mut flipped = bytes.clone();
            flipped[at] ^= 1 << bit;
            // Either refused, or (a flip in the compressed bytes that
            // decodes to the same content, or in a signature) the very
            // same entries: never different ones.
            if let Ok(back) = Shipped::from_bytes(&flipped) {
                assert_eq!(back, original, "byte {at} bit {bit}");
            }
        }
    }
}

#[test]
fn the_header_says_what_mismatched() {
    let bytes = shipped().encode_stored().unwrap();
    let mut version = bytes.clone();
    version[8] = 9;
    let error = Shipped::from_bytes(&version).unwrap_err();
    assert!(matches!(
        error,
        ShipError::UnsupportedVersion {
            found: 9,
            supported: 1
        }
    ));
    assert!(
        error
            .to_string()
            .contains("format 9, this kiln reads format 1")
    );

    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(matches!(
        Shipped::from_bytes(&magic),
        Err(ShipError::BadMagic)
    ));

    let mut flags = bytes.clone();
    flags[12] = 1;
    assert!(matches!(
        Shipped::from_bytes(&flags),
        Err(ShipError::BadHeader { field: "flags", .. })
    ));
}

#[test]
fn a_body_that_would_expand_past_its_bound_is_refused_before_decompressing() {
    let bytes = shipped().encode(19).unwrap();
    let packed_len = u64::from_le_bytes(bytes[32..40].try_into().unwrap());
    let mut bomb = bytes.clone();
    let huge = packed_len * MAX_EXPANSION + SLACK + 1;
    bomb[24..32].copy_from_slice(&huge.to_le_bytes());
    assert!(matches!(
        ShippedFile::parse(&bomb),
        Err(ShipError::BadHeader {
            field: "the raw length",
            ..
        })
    ));
    // A declared length shorter than the frame decompresses to: reading
    // stops one byte past it.
    let raw_len = u64::from_le_bytes(bytes[24..32].try_into().unwrap());
    let mut short = bytes.clone();
    short[24..32].copy_from_slice(&(raw_len - 1).to_le_bytes());
    short[16..24].copy_from_slice(&0u64.to_le_bytes());
    assert!(matches!(
        Shipped::from_bytes(&short),
        Err(ShipError::RawLength { found, expected }) if found == raw_len && expected == raw_len - 1
    ));
}

#[test]
fn an_index_that_does_not_account_for_the_payloads_is_refused() {
    let bytes = shipped().encode_stored().unwrap();
    // Claim a shorter index: the index no longer decodes, or the payloads
    // no longer tile.
    let index_len = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    for wrong in [0, index_len - 1, index_len + 1] {
        let mut changed = bytes.clone();
        changed[16..24].copy_from_slice(&wrong.to_le_bytes());
        assert!(
            matches!(Shipped::from_bytes(&changed), Err(ShipError::BadIndex(_))),
            "index length {wrong}"
        );
    }
}

/// Shipped images are read across Kiln releases: a file written by format 1
/// (committed, compressed at level 19 as `kiln ship` writes it) must keep
/// decoding to the same entries, and the same content must keep encoding
/// to the same bytes (a change of the layout is a new format version).
#[test]
fn format_1_files_keep_their_meaning() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/format-1.kship");
    if std::env::var_os("KILN_WRITE_GOLDEN").is_some() {
        std::fs::write(&path, shipped().encode(19).unwrap()).unwrap();
    }
    let committed = std::fs::read(&path).expect("tests/data/format-1.kship");
    assert_eq!(Shipped::from_bytes(&committed).unwrap(), shipped());
    assert_eq!(
        Digest::of(&shipped().encode_stored().unwrap()).to_hex(),
        GOLDEN_STORED,
        "the stored encoding of the test content changed: that is a new shipped format"
    );
}

/// BLAKE3 of `shipped().encode_stored()` in format 1.
const GOLDEN_STORED: &str = "ad6cff4fc03685d42cda76c6b071af9d72c5c7f51aee5fc20d019cf550660c9d";

#[test]
fn a_body_that_compresses_past_the_bound_is_padded_so_that_readers_take_it() {
    // 4 MiB of one byte compresses thousands of times: `encode` pads the
    // body with a skippable frame to stay within MAX_EXPANSION.
    let entries = vec![entry(0, &vec![0x5a; 4 << 20]), entry(1, b"small")];
    let original = Shipped::new(manifest(), ImageMeta::new("demo", "0.1.0"), entries);
    let bytes = original.encode(19).unwrap();
    let file = ShippedFile::parse(&bytes).unwrap();
    assert!(file.raw_len() <= file.packed_len() * MAX_EXPANSION + SLACK);
    assert!(
        file.raw_len() > file.packed_len() * MAX_EXPANSION / 2,
        "padded no more than needed"
    );
    assert_eq!(Shipped::unpack(&file).unwrap(), original);
    // Signed, the padding is covered like every other byte.
    let key = SigningKey::from_secret_bytes([5; 32]);
    let signed = file.signed_with(&key).unwrap();
    let file = ShippedFile::parse(&signed).unwrap();
    file.check_signed_by(&key.public_key()).unwrap();
    assert_eq!(Shipped::unpack(&file).unwrap(), original);
}

#[test]
fn an_entry_no_image_can_hold_refuses_the_file_where_it_is_read() {
    let base = shipped();
    type Change = Box<dyn Fn(&mut Vec<EntryData>)>;
    let cases: Vec<(&str, Change)> = vec![
        (
            "an empty custom artifact kind",
            Box::new(|entries| entries[0].artifacts[0].kind = ArtifactKind::Custom(String::new())),
        ),
        (
            "one owner under two labels",
            // Entries 0 and 2 share an owner (n % 2).
            Box::new(|entries| {
                let shared = (1..entries.len())
                    .find(|&i| entries[i].owner == entries[i - 1].owner)
                    .unwrap();
                entries[shared].owner_label = "another label".into();
            }),
        ),
    ];
    for (case, change) in cases {
        let mut entries = base.entries().to_vec();
        change(&mut entries);
        let bad = Shipped::new(manifest(), ImageMeta::new("demo", "0.1.0"), entries);
        for bytes in [bad.encode_stored().unwrap(), bad.encode(19).unwrap()] {
            let error = Shipped::from_bytes(&bytes).expect_err(case);
            assert!(matches!(error, ShipError::Unwritable(_)), "{case}: {error}");
            assert!(
                error.to_string().contains("no kiln image can hold"),
                "{error}"
            );
        }
    }
}

#[test]
fn a_body_with_another_digest_is_refused_before_anything_is_kept() {
    let bytes = shipped().encode_stored().unwrap();
    let mut forged = bytes.clone();
    forged[40] ^= 1; // the content digest
    assert!(matches!(
        Shipped::from_bytes(&forged),
        Err(ShipError::Content { .. })
    ));
}

/// The demo libraries' shipped images, as `kiln ship` wrote them, read
/// under today's bounds (window, expansion).
#[test]
fn the_committed_demo_images_are_within_the_bounds() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    for name in ["kiln-kernels-demo", "kiln-activations-demo"] {
        let path = examples
            .join(name)
            .join(format!("kiln-shipped/{name}.kship"));
        let bytes = std::fs::read(&path).unwrap();
        let file = ShippedFile::parse(&bytes).unwrap();
        let shipped = Shipped::unpack(&file).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(shipped.manifest.name, name);
        assert!(file.raw_len() <= file.packed_len() * MAX_EXPANSION);
    }
}
