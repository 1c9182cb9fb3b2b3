//! Signed images: what a signature covers, and every way a signature can
//! fail to vouch for an image (tampered, truncated, unknown key, moved onto
//! another image, rotated keys).

use kiln_image::header::{HEADER_LEN, offsets, reseal_header};
use kiln_image::signature::{MAX_SIGNATURES, RECORD_LEN, TRAILER_HEAD_LEN};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, FileAccess, Image, ImageError, ImageFile, ImageMeta,
    ImageWriter, PublicKey, SigningKey, TrustedKeys, Verification, sign_image, strip_signatures,
};

fn entry(key: &str, code: &[u8]) -> EntryData {
    EntryData {
        owner: Digest::of(b"nvrtc 13.0 sm_90"),
        owner_label: "nvrtc 13.0 sm_90".into(),
        key: Digest::of(key.as_bytes()),
        name: key.into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["kernel".into()],
            bytes: code.to_vec(),
        }],
    }
}

fn image_of(entries: &[EntryData]) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("signed-tests", "1"));
    for entry in entries {
        writer.push(entry.clone());
    }
    writer.to_bytes().expect("valid entries")
}

fn key(n: u8) -> SigningKey {
    SigningKey::from_secret_bytes([n; 32])
}

fn trusting(keys: &[&SigningKey]) -> TrustedKeys {
    TrustedKeys::new(keys.iter().map(|key| key.public_key()))
}

fn verify(bytes: &[u8], trusted: &TrustedKeys) -> Result<PublicKey, ImageError> {
    Image::from_bytes(bytes, Verification::Structural)?.verify_signature(trusted)
}

#[test]
fn a_signed_image_verifies_at_every_level_and_reads_as_before() -> Result<(), ImageError> {
    let unsigned = image_of(&[entry("a", b"code a"), entry("b", b"code b")]);
    let signer = key(1);
    let signed = sign_image(&unsigned, &signer)?;
    assert_eq!(signed.len(), unsigned.len() + TRAILER_HEAD_LEN + RECORD_LEN);
    assert_eq!(
        signed[..HEADER_LEN - 32],
        {
            let mut header = unsigned[..HEADER_LEN - 32].to_vec();
            header[offsets::SIGNATURE_LEN..][..4]
                .copy_from_slice(&((TRAILER_HEAD_LEN + RECORD_LEN) as u32).to_le_bytes());
            header
        }[..]
    );
    assert_eq!(signed[HEADER_LEN..unsigned.len()], unsigned[HEADER_LEN..]);
    for level in [Verification::Structural, Verification::Full] {
        let image = Image::from_bytes(&signed, level)?;
        assert_eq!(image.signers(), [signer.public_key()]);
        assert_eq!(
            image.verify_signature(&trusting(&[&signer]))?,
            signer.public_key()
        );
        let found = image.find(&Digest::of(b"nvrtc 13.0 sm_90"), &Digest::of(b"b"))?;
        let bytes = found.map(|e| e.artifact(0)?.bytes().map(<[u8]>::to_vec));
        assert_eq!(bytes.transpose()?, Some(b"code b".to_vec()));
    }
    // The unsigned image: nothing to verify.
    let image = Image::from_bytes(&unsigned, Verification::Full)?;
    assert!(!image.is_signed());
    let error = image
        .verify_signature(&trusting(&[&signer]))
        .expect_err("unsigned");
    assert!(matches!(error, ImageError::Unsigned), "{error}");
    assert_eq!(error.check(), "signature.missing");
    Ok(())
}

#[test]
fn a_mapped_file_reads_its_trailer_however_it_is_opened() -> Result<(), ImageError> {
    let signer = key(2);
    let signed = sign_image(&image_of(&[entry("a", &[7; 100_000])]), &signer)?;
    let dir = tempfile::tempdir().map_err(|source| ImageError::Io {
        action: "create",
        path: "temp dir".into(),
        source,
    })?;
    let path = dir.path().join("signed.kimg");
    kiln_image::write_file_atomic(&path, &signed)?;
    for access in [
        FileAccess::MapLazily,
        FileAccess::MapWhole,
        FileAccess::Read,
    ] {
        let image = Image::from_file(ImageFile::open(&path)?, access, Verification::Structural)?;
        assert_eq!(
            image.verify_signature(&trusting(&[&signer]))?,
            signer.public_key(),
            "{access:?}"
        );
    }
    Ok(())
}

#[test]
fn an_unknown_key_is_not_trusted_and_rotation_accepts_old_and_new() -> Result<(), ImageError> {
    let (old, new, stranger) = (key(3), key(4), key(5));
    let by_old = sign_image(&image_of(&[entry("a", b"a")]), &old)?;
    let by_new = sign_image(&image_of(&[entry("b", b"b")]), &new)?;
    let error = verify(&by_old, &trusting(&[&stranger])).expect_err("unknown key");
    match &error {
        ImageError::UntrustedSigner { signers } => assert_eq!(signers, &[old.public_key()]),
        other => panic!("expected UntrustedSigner, got {other}"),
    }
    assert_eq!(error.check(), "signature.untrusted");
    assert!(
        error.to_string().contains(&old.public_key().to_hex()),
        "{error}"
    );
    // No key at all: nothing signed is accepted.
    assert!(matches!(
        verify(&by_old, &TrustedKeys::default()),
        Err(ImageError::UntrustedSigner { .. })
    ));

    // During a rotation both keys are trusted.
    let both = trusting(&[&old, &new]);
    assert_eq!(verify(&by_old, &both)?, old.public_key());
    assert_eq!(verify(&by_new, &both)?, new.public_key());
    // Once the old key is dropped, what it signed is refused...
    let rotated = trusting(&[&new]);
    assert!(matches!(
        verify(&by_old, &rotated),
        Err(ImageError::UntrustedSigner { .. })
    ));
    // ...unless it was signed again by the new key.
    let both_signed = sign_image(&by_old, &new)?;
    assert_eq!(verify(&both_signed, &rotated)?, new.public_key());
    assert_eq!(verify(&both_signed, &trusting(&[&old]))?, old.public_key());
    Ok(())
}

#[test]
fn every_bit_of_a_signature_or_its_key_matters() -> Result<(), ImageError> {
    let signer = key(6);
    let trusted = trusting(&[&signer]);
    let signed = sign_image(&image_of(&[entry("a", b"a")]), &signer)?;
    let records = signed.len() - RECORD_LEN;
    for bit in 0..RECORD_LEN * 8 {
        let mut bytes = signed.clone();
        bytes[records + bit / 8] ^= 1 << (bit % 8);
        let result = verify(&bytes, &trusted);
        if bit < 32 * 8 {
            // Another key signed it (or claims to).
            assert!(
                matches!(result, Err(ImageError::UntrustedSigner { .. })),
                "key bit {bit}: {result:?}"
            );
        } else {
            assert!(
                matches!(result, Err(ImageError::BadSignature { .. })),
                "signature bit {bit}: {result:?}"
            );
        }
    }
    Ok(())
}

#[test]
fn a_changed_header_or_index_breaks_the_signature() -> Result<(), ImageError> {
    let signer = key(7);
    let trusted = trusting(&[&signer]);
    let signed = sign_image(&image_of(&[entry("a", b"a")]), &signer)?;
    // The producer, with the header checksum recomputed: the image opens,
    // the signature fails.
    let mut producer = signed.clone();
    producer[offsets::PRODUCER] ^= 1;
    reseal_header(&mut producer);
    let error = verify(&producer, &trusted).expect_err("changed header");
    assert!(matches!(error, ImageError::BadSignature { .. }), "{error}");
    assert_eq!(error.check(), "signature.invalid");
    // The same entry under another key, or with other code, checksums all
    // valid, carrying the first image's signature: refused.
    for forged in [image_of(&[entry("b", b"a")]), image_of(&[entry("a", b"b")])] {
        let mut moved = strip_signatures(&signed)?;
        assert_eq!(moved.len(), forged.len());
        moved.copy_from_slice(&forged);
        moved.extend_from_slice(&signed[forged.len()..]);
        moved[offsets::SIGNATURE_LEN..][..4]
            .copy_from_slice(&signed[offsets::SIGNATURE_LEN..][..4]);
        reseal_header(&mut moved);
        let image = Image::from_bytes(&moved, Verification::Full)?;
        assert_eq!(image.signers(), [signer.public_key()]);
        assert!(
            matches!(
                image.verify_signature(&trusted),
                Err(ImageError::BadSignature { .. })
            ),
            "a signature moved onto another image verified"
        );
    }
    Ok(())
}

#[test]
fn a_payload_changed_after_signing_is_never_served() -> Result<(), ImageError> {
    let signer = key(8);
    let signed = sign_image(&image_of(&[entry("a", b"good code")]), &signer)?;
    let at = signed
        .windows(9)
        .position(|w| w == b"good code")
        .expect("payload in the image");
    let mut evil = signed.clone();
    evil[at..at + 9].copy_from_slice(b"evil code");
    // Structural: the signature holds (header and index unchanged), and the
    // payload fails the digest the signature vouches for.
    let image = Image::from_bytes(&evil, Verification::Structural)?;
    assert_eq!(
        image.verify_signature(&trusting(&[&signer]))?,
        signer.public_key()
    );
    let entry = image.entry(0)?;
    assert!(matches!(
        entry.artifact(0)?.bytes(),
        Err(ImageError::PayloadChecksum { .. })
    ));
    // Full: the body checksum in the signed header refuses it at open.
    assert!(matches!(
        Image::from_bytes(&evil, Verification::Full),
        Err(ImageError::BodyChecksum { .. })
    ));
    Ok(())
}

#[test]
fn a_malformed_or_truncated_trailer_refuses_the_image() -> Result<(), ImageError> {
    let signed = sign_image(&image_of(&[entry("a", b"a")]), &key(9))?;
    let trailer = signed.len() - TRAILER_HEAD_LEN - RECORD_LEN;
    // Cut anywhere in the trailer: the file is shorter than the header says.
    for cut in [1, TRAILER_HEAD_LEN, TRAILER_HEAD_LEN + RECORD_LEN - 1] {
        let error = Image::from_bytes(&signed[..signed.len() - cut], Verification::Structural)
            .expect_err("truncated");
        assert!(
            matches!(error, ImageError::Truncated { .. }),
            "{cut}: {error}"
        );
    }
    // A trailer cut off with its length: the unsigned image, which a
    // reader requiring signatures refuses.
    let mut cut_off = signed[..trailer].to_vec();
    cut_off[offsets::SIGNATURE_LEN..][..4].fill(0);
    reseal_header(&mut cut_off);
    assert!(matches!(
        verify(&cut_off, &trusting(&[&key(9)])),
        Err(ImageError::Unsigned)
    ));
    // Magic, count and reserved bytes of the trailer.
    for at in [0, 8, 9, 12, 15] {
        let mut bytes = signed.clone();
        bytes[trailer + at] ^= 0x40;
        let error = Image::from_bytes(&bytes, Verification::Structural).expect_err("malformed");
        assert_eq!(error.check(), "signature.trailer", "byte {at}: {error}");
    }
    // Two records of the same key, or out of order.
    let (a, b) = (key(10), key(11));
    let two = sign_image(&sign_image(&image_of(&[entry("a", b"a")]), &a)?, &b)?;
    let records = two.len() - 2 * RECORD_LEN;
    let mut swapped = two.clone();
    swapped[records..].rotate_left(RECORD_LEN);
    let mut repeated = two.clone();
    repeated.copy_within(records..records + RECORD_LEN, records + RECORD_LEN);
    for bytes in [swapped, repeated] {
        let error = Image::from_bytes(&bytes, Verification::Structural).expect_err("order");
        assert_eq!(error.check(), "signature.trailer", "{error}");
    }
    Ok(())
}

#[test]
fn at_most_sixteen_signatures() -> Result<(), ImageError> {
    let mut bytes = image_of(&[entry("a", b"a")]);
    for n in 0..MAX_SIGNATURES as u8 {
        bytes = sign_image(&bytes, &key(100 + n))?;
    }
    let image = Image::from_bytes(&bytes, Verification::Full)?;
    assert_eq!(image.signers().len(), MAX_SIGNATURES);
    assert!(image.check_signatures(None).iter().all(|check| check.valid));
    let error = sign_image(&bytes, &key(99)).expect_err("one too many");
    assert!(matches!(error, ImageError::TooLarge { .. }), "{error}");
    Ok(())
}

#[test]
fn keys_are_written_and_read_back_and_the_secret_file_is_private() -> Result<(), ImageError> {
    let dir = tempfile::tempdir().map_err(|source| ImageError::Io {
        action: "create",
        path: "temp dir".into(),
        source,
    })?;
    let path = dir.path().join("release.key");
    let generated = SigningKey::generate()?;
    generated.write_file(&path)?;
    assert_eq!(
        SigningKey::read_file(&path)?.public_key(),
        generated.public_key()
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).map_err(|source| ImageError::Io {
            action: "stat",
            path: path.clone(),
            source,
        })?;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
    }
    assert!(
        matches!(generated.write_file(&path), Err(ImageError::Io { .. })),
        "an existing key file is never overwritten"
    );
    let pub_path = dir.path().join("release.key.pub");
    std::fs::write(&pub_path, format!("{}\n", generated.public_key())).map_err(|source| {
        ImageError::Io {
            action: "write",
            path: pub_path.clone(),
            source,
        }
    })?;
    assert_eq!(TrustedKeys::read_file(&pub_path)?, trusting(&[&generated]));
    // A key file that is not one says so without quoting it.
    let secret_looking = dir.path().join("bad.key");
    std::fs::write(&secret_looking, "hunter2 hunter2").map_err(|source| ImageError::Io {
        action: "write",
        path: secret_looking.clone(),
        source,
    })?;
    let error = SigningKey::read_file(&secret_looking).expect_err("not a key");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    Ok(())
}
