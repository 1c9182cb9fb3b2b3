//! Signed images: what a signature covers, and every way a signature can
//! fail to vouch for an image (tampered, truncated, unknown key, moved onto
//! another image, rotated keys).

use kiln_image::header::{HEADER_LEN, offsets, reseal_header};
use kiln_image::signature::{MAX_SIGNATURES, RECORD_LEN, TRAILER_HEAD_LEN};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, FileAccess, Image, ImageError, ImageFile, ImageMeta,
    ImageWriter, PublicKey, ReadError, SignatureError, SigningKey, TrustedKeys, Verification,
    sign_image, strip_signatures,
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

fn verify(bytes: &[u8], trusted: &TrustedKeys) -> Result<PublicKey, SignatureError> {
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
    assert!(matches!(error, SignatureError::Unsigned), "{error}");
    assert_eq!(error.check(), "signature.missing");
    Ok(())
}

#[test]
fn a_mapped_file_reads_its_trailer_however_it_is_opened() -> Result<(), ImageError> {
    let signer = key(2);
    let signed = sign_image(&image_of(&[entry("a", &[7; 100_000])]), &signer)?;
    let dir = tempfile::tempdir().map_err(|source| ReadError::Io {
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
        SignatureError::UntrustedSigner { signers } => assert_eq!(signers, &[old.public_key()]),
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
        Err(SignatureError::UntrustedSigner { .. })
    ));

    // During a rotation both keys are trusted.
    let both = trusting(&[&old, &new]);
    assert_eq!(verify(&by_old, &both)?, old.public_key());
    assert_eq!(verify(&by_new, &both)?, new.public_key());
    // Once the old key is dropped, what it signed is refused...
    let rotated = trusting(&[&new]);
    assert!(matches!(
        verify(&by_old, &rotated),
        Err(SignatureError::UntrustedSigner { .. })
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
                matches!(result, Err(SignatureError::UntrustedSigner { .. })),
                "key bit {bit}: {result:?}"
            );
        } else {
            assert!(
                matches!(result, Err(SignatureError::BadSignature { .. })),
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
    assert!(
        matches!(error, SignatureError::BadSignature { .. }),
        "{error}"
    );
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
                Err(SignatureError::BadSignature { .. })
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
        Err(ReadError::PayloadChecksum { .. })
    ));
    // Full: the body checksum in the signed header refuses it at open.
    assert!(matches!(
        Image::from_bytes(&evil, Verification::Full),
        Err(ReadError::BodyChecksum { .. })
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
            matches!(error, ReadError::Truncated { .. }),
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
        Err(SignatureError::Unsigned)
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
    assert!(matches!(error, SignatureError::TooLarge { .. }), "{error}");
    Ok(())
}

#[test]
fn keys_round_trip_through_their_text_and_a_bad_secret_is_not_quoted() -> Result<(), ImageError> {
    // Key files are read and written by kiln-core's trust policy; their
    // text is this crate's: 64 hex digits, the public key alone per line.
    let generated = SigningKey::generate()?;
    let text = format!("{}\n", generated.to_secret_hex());
    assert_eq!(
        SigningKey::from_secret_hex(&text)?.public_key(),
        generated.public_key()
    );
    let public = format!("# release\n{}\n", generated.public_key());
    assert_eq!(TrustedKeys::parse(&public)?, trusting(&[&generated]));
    let error = SigningKey::from_secret_hex("hunter2 hunter2").expect_err("not a key");
    assert!(!error.to_string().contains("hunter2"), "{error}");
    Ok(())
}

/// Batch signatures ([`kiln_image::sign_images_batch`]): one signature of a
/// Merkle root, each member carrying its path; every way a member can be
/// moved, cut or altered; the memo of verified roots.
mod batch {
    use super::*;
    use kiln_image::BatchPosition;
    use kiln_image::signature::{
        BATCH_FIELDS_LEN, MAX_BATCH, PATH_DIGEST_LEN, batch_depth, sign_images_batch,
    };

    /// `n` distinct unsigned one-entry images (same length each, so that
    /// trailers can be moved between them).
    fn images(n: usize, tag: &str) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                image_of(&[entry(
                    &format!("{tag}{i:04}"),
                    format!("code {i:04}").as_bytes(),
                )])
            })
            .collect()
    }

    fn sign(images: &[Vec<u8>], signer: &SigningKey) -> Result<Vec<Vec<u8>>, SignatureError> {
        sign_images_batch(
            &images.iter().map(Vec::as_slice).collect::<Vec<_>>(),
            signer,
        )
    }

    /// Where the trailer of `bytes` starts (from its header's length field).
    fn trailer_at(bytes: &[u8]) -> usize {
        let len = u32::from_le_bytes(
            bytes[offsets::SIGNATURE_LEN..][..4]
                .try_into()
                .expect("four bytes"),
        );
        bytes.len() - len as usize
    }

    fn put_u32(bytes: &mut [u8], at: usize, value: u32) {
        bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    }

    /// `bytes` (a member) with its header's trailer length set to `len`
    /// and the header resealed.
    fn with_trailer_len(mut bytes: Vec<u8>, len: usize) -> Vec<u8> {
        put_u32(&mut bytes, offsets::SIGNATURE_LEN, len as u32);
        reseal_header(&mut bytes);
        bytes
    }

    #[test]
    fn batches_of_every_shape_round_trip() -> Result<(), ImageError> {
        let (signer, stranger) = (key(20), key(21));
        for size in [1, 2, 3, 5, 8, 11] {
            let unsigned = images(size, "shape");
            let signed = sign(&unsigned, &signer)?;
            assert_eq!(signed.len(), size);
            assert_eq!(sign(&unsigned, &signer)?, signed, "deterministic");
            if size == 1 {
                assert_eq!(signed[0], sign_image(&unsigned[0], &signer)?);
            }
            let trusted = trusting(&[&signer]);
            for (i, bytes) in signed.iter().enumerate() {
                let expected_len = if size == 1 {
                    TRAILER_HEAD_LEN + RECORD_LEN
                } else {
                    TRAILER_HEAD_LEN
                        + BATCH_FIELDS_LEN
                        + batch_depth(size) * PATH_DIGEST_LEN
                        + RECORD_LEN
                };
                assert_eq!(bytes.len(), unsigned[i].len() + expected_len);
                assert_eq!(strip_signatures(bytes)?, unsigned[i]);
                for level in [Verification::Structural, Verification::Full] {
                    let image = Image::from_bytes(bytes, level)?;
                    assert_eq!(image.signers(), [signer.public_key()]);
                    assert_eq!(
                        image.signature_batch(),
                        (size > 1).then_some(BatchPosition {
                            index: i as u32,
                            size: size as u32
                        })
                    );
                    assert_eq!(image.verify_signature(&trusted)?, signer.public_key());
                    assert!(image.check_signatures(None)[0].valid);
                    let error = image
                        .verify_signature(&trusting(&[&stranger]))
                        .expect_err("another key");
                    assert!(
                        matches!(error, SignatureError::UntrustedSigner { .. }),
                        "{size}/{i}: {error}"
                    );
                }
            }
            // One verification for the whole batch in this memo (a batch of
            // one is a direct signature, verified at each of the two opens).
            let expected = if size == 1 { 2 } else { 1 };
            assert_eq!(trusted.verifications(), expected, "batch of {size}");
        }
        assert!(sign(&[], &signer)?.is_empty());
        Ok(())
    }

    #[test]
    fn every_member_costs_one_verification_per_memo() -> Result<(), ImageError> {
        let signer = key(22);
        let signed = sign(&images(11, "memo"), &signer)?;
        let opened: Vec<Image> = signed
            .iter()
            .map(|bytes| Image::from_bytes(bytes, Verification::Full))
            .collect::<Result<_, _>>()?;
        let trusted = trusting(&[&signer]);
        let clone = trusted.clone();
        for image in &opened {
            assert_eq!(image.verify_signature(&clone)?, signer.public_key());
        }
        assert_eq!((trusted.verifications(), trusted.verified_roots()), (1, 1));
        // Again, through either handle: nothing more verified.
        for image in &opened {
            image.verify_signature(&trusted)?;
        }
        assert_eq!(trusted.verifications(), 1);
        // A fresh set (another process) pays its own one.
        let fresh = trusting(&[&signer]);
        assert_eq!(fresh, trusted, "equality compares keys alone");
        for image in opened.iter().rev() {
            image.verify_signature(&fresh)?;
        }
        assert_eq!((fresh.verifications(), trusted.verifications()), (1, 1));
        // A directly signed image is verified each time (nothing shares
        // its signature), and not remembered.
        let direct = Image::from_bytes(
            &sign_image(&image_of(&[entry("d", b"d")]), &signer)?,
            Verification::Full,
        )?;
        direct.verify_signature(&fresh)?;
        direct.verify_signature(&fresh)?;
        assert_eq!((fresh.verifications(), fresh.verified_roots()), (3, 1));
        Ok(())
    }

    /// The check a refused member gives (with a fresh memo), or `ok`.
    fn outcome(bytes: &[u8], trusted: &TrustedKeys) -> &'static str {
        match verify(bytes, trusted) {
            Ok(_) => "ok",
            Err(error) => error.check(),
        }
    }

    #[test]
    fn moved_altered_or_malformed_members_are_refused() -> Result<(), ImageError> {
        let signer = key(23);
        let trusted = || trusting(&[&signer]);
        let unsigned = images(5, "a");
        let batch = sign(&unsigned, &signer)?;
        let other = sign(&images(5, "b"), &signer)?;
        let member = &batch[1];
        let at = trailer_at(member);
        let (index_at, size_at, path_at) = (at + 16, at + 20, at + 24);
        let depth = batch_depth(5);
        assert_eq!(outcome(member, &trusted()), "ok");

        // A sibling digest of the path changed.
        for level in 0..depth {
            let mut bytes = member.clone();
            bytes[path_at + level * PATH_DIGEST_LEN] ^= 1;
            assert_eq!(outcome(&bytes, &trusted()), "signature.invalid", "{level}");
        }
        // Another leaf index (a valid one), or one past the batch.
        let mut moved = member.clone();
        put_u32(&mut moved, index_at, 0);
        assert_eq!(outcome(&moved, &trusted()), "signature.invalid");
        for index in [5, 6, u32::MAX] {
            let mut bytes = member.clone();
            put_u32(&mut bytes, index_at, index);
            assert_eq!(outcome(&bytes, &trusted()), "signature.trailer", "{index}");
        }
        // Another size of the same depth: the signed size differs.
        let mut resized = member.clone();
        put_u32(&mut resized, size_at, 6);
        assert_eq!(outcome(&resized, &trusted()), "signature.invalid");
        // Sizes of another depth, or out of bounds: the trailer's length is
        // not the one the size gives.
        for size in [0, 1, 2, 4, 9, MAX_BATCH as u32 + 1, u32::MAX] {
            let mut bytes = member.clone();
            put_u32(&mut bytes, size_at, size);
            assert_eq!(outcome(&bytes, &trusted()), "signature.trailer", "{size}");
        }
        // Member 4 of 5 is promoted at the first two levels: its path there
        // must be zeros.
        let last = &batch[4];
        let last_path = trailer_at(last) + 24;
        assert_eq!(last[last_path..last_path + 64], [0; 64]);
        let mut bytes = last.clone();
        bytes[last_path + 40] = 1;
        assert_eq!(outcome(&bytes, &trusted()), "signature.trailer");
        // The trailer of member 1 of this batch on member 1 of another batch
        // by the same key: the path does not lead to a root signed.
        let mut foreign = other[1][..trailer_at(&other[1])].to_vec();
        foreign.extend_from_slice(&member[at..]);
        assert_eq!(outcome(&foreign, &trusted()), "signature.invalid");
        // ...even when this batch's root is remembered already.
        let warm = trusted();
        assert_eq!(outcome(member, &warm), "ok");
        assert_eq!(outcome(&foreign, &warm), "signature.invalid");
        assert_eq!(warm.verifications(), 2);
        // A member rebuilt with other code (its payload digest in the index
        // changes, checksums valid), its trailer kept.
        let mut altered = image_of(&[entry("a0001", b"evil 0001")]);
        assert_eq!(altered.len(), unsigned[1].len());
        altered.extend_from_slice(&member[at..]);
        let altered = with_trailer_len(altered, member.len() - at);
        assert!(Image::from_bytes(&altered, Verification::Full).is_ok());
        assert_eq!(outcome(&altered, &warm), "signature.invalid");
        // Cut: the file is shorter than the header says.
        for cut in [1, 32, member.len() - at - 1] {
            let error = Image::from_bytes(&member[..member.len() - cut], Verification::Structural)
                .expect_err("truncated");
            assert!(
                matches!(error, ReadError::Truncated { .. }),
                "{cut}: {error}"
            );
        }
        // A trailer length the header allows but the size does not give:
        // one path digest more (appended), or one less (cut).
        let mut longer = member.clone();
        longer.extend_from_slice(&[0; PATH_DIGEST_LEN]);
        let longer = with_trailer_len(longer, member.len() - at + PATH_DIGEST_LEN);
        let shorter = with_trailer_len(
            member[..member.len() - PATH_DIGEST_LEN].to_vec(),
            member.len() - at - PATH_DIGEST_LEN,
        );
        for bytes in [longer, shorter] {
            assert_eq!(outcome(&bytes, &trusted()), "signature.trailer");
        }
        // An unknown kind.
        let mut kind = member.clone();
        put_u32(&mut kind, at + 12, 2);
        assert_eq!(outcome(&kind, &trusted()), "signature.trailer");
        Ok(())
    }

    #[test]
    fn every_byte_of_a_batch_trailer_matters() -> Result<(), ImageError> {
        let signer = key(24);
        let signed = sign(&images(11, "flip"), &signer)?;
        let member = &signed[6];
        let at = trailer_at(member);
        for byte in at..member.len() {
            let mut bytes = member.clone();
            bytes[byte] ^= 0x01;
            // A fresh memo each time: nothing verified before.
            let result = verify(&bytes, &trusting(&[&signer]));
            assert!(
                matches!(
                    result,
                    Err(SignatureError::Image(ReadError::SignatureTrailer(_))
                        | SignatureError::BadSignature { .. }
                        | SignatureError::UntrustedSigner { .. })
                ),
                "byte {} of the trailer: {result:?}",
                byte - at
            );
        }
        Ok(())
    }

    #[test]
    fn batch_members_cannot_be_signed_again_and_batches_take_unsigned_images()
    -> Result<(), ImageError> {
        let signer = key(25);
        let unsigned = images(3, "again");
        let signed = sign(&unsigned, &signer)?;
        let error = sign_image(&signed[0], &key(26)).expect_err("a batch member");
        assert!(
            matches!(error, SignatureError::BatchSigned { index: 0, size: 3 }),
            "{error}"
        );
        assert_eq!(error.check(), "signature.batch");
        assert!(error.to_string().contains("strip"), "{error}");
        // Stripped, it signs as any image.
        let alone = sign_image(&strip_signatures(&signed[0])?, &key(26))?;
        assert_eq!(
            verify(&alone, &trusting(&[&key(26)]))?,
            key(26).public_key()
        );
        // A signed image among others: refused, naming it.
        let mixed = [
            unsigned[0].clone(),
            sign_image(&unsigned[1], &signer)?,
            unsigned[2].clone(),
        ];
        let error = sign(&mixed, &signer).expect_err("signed already");
        assert!(
            matches!(error, SignatureError::AlreadySigned { image: 1 }),
            "{error}"
        );
        // Not an image: the open's error.
        let error = sign(&[unsigned[0].clone(), b"junk".to_vec()], &signer).expect_err("junk");
        assert_eq!(error.check(), "length.truncated", "{error}");
        Ok(())
    }
}
