//! Unit tests of the signature module: trailer lengths, batch shapes, the
//! memo's bound, deterministic signing, keys as text.

use super::batch::sign_images_batch;
use super::keys::{PublicKey, SigningKey, TrustedKeys};
use super::trailer::{
    BATCH_FIELDS_LEN, MAX_BATCH_DEPTH, MAX_SIGNATURES, MAX_TRAILER_LEN, PATH_DIGEST_LEN,
    RECORD_LEN, TRAILER_HEAD_LEN, batch_depth, check_trailer_len, promoted,
};
use super::{MEMO_CAPACITY, sign_image, strip_signatures};
use crate::{Artifact, ArtifactKind, EntryData, ImageMeta, ImageWriter};
use crate::{Digest, Image, ImageError, SignatureError, Verification};

fn image() -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("signed", "1"));
    writer.push(EntryData {
        owner: Digest::of(b"owner"),
        owner_label: "owner".into(),
        key: Digest::of(b"key"),
        name: "entry".into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["f".into()],
            bytes: b"code".to_vec(),
        }],
    });
    writer.to_bytes().expect("valid entry")
}

#[test]
fn trailer_lengths_other_than_whole_records_are_refused() {
    assert!(check_trailer_len(0).is_ok());
    for n in 1..=MAX_SIGNATURES {
        assert!(check_trailer_len((TRAILER_HEAD_LEN + n * RECORD_LEN) as u32).is_ok());
        for depth in 1..=MAX_BATCH_DEPTH {
            let len = TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + depth * PATH_DIGEST_LEN;
            assert!(check_trailer_len((len + n * RECORD_LEN) as u32).is_ok());
        }
    }
    assert_eq!(
        MAX_TRAILER_LEN,
        TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + 16 * 32 + 16 * RECORD_LEN
    );
    for bad in [
        1,
        TRAILER_HEAD_LEN,
        TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + RECORD_LEN,
        TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + RECORD_LEN + 1,
        MAX_TRAILER_LEN + PATH_DIGEST_LEN,
        TRAILER_HEAD_LEN + RECORD_LEN - 1,
        TRAILER_HEAD_LEN + RECORD_LEN + 1,
        MAX_TRAILER_LEN + RECORD_LEN,
        u32::MAX as usize,
    ] {
        let error = check_trailer_len(bad as u32).expect_err("refused");
        assert_eq!(error.check(), "signature.trailer", "{bad}: {error}");
    }
}

#[test]
fn batch_depths_and_promoted_nodes() {
    let depths: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 11, 65_536]
        .into_iter()
        .map(batch_depth)
        .collect();
    assert_eq!(depths, [0, 1, 2, 2, 3, 3, 4, 4, 16]);
    assert!(promoted(2, 3) && promoted(10, 11));
    assert!(!promoted(1, 3) && !promoted(0, 2) && !promoted(9, 11));
}

#[test]
fn the_memo_stays_bounded_and_checking_stays_right() -> Result<(), ImageError> {
    let signer = SigningKey::from_secret_bytes([5; 32]);
    let trusted = TrustedKeys::new([signer.public_key()]);
    let unsigned = [image(), {
        let mut writer = ImageWriter::new(ImageMeta::new("signed", "2"));
        writer.push(EntryData {
            name: "other".into(),
            ..Image::from_bytes(&image(), Verification::Full)?
                .entry(0)?
                .to_data()?
        });
        writer.to_bytes()?
    }];
    let signed = sign_images_batch(&[&unsigned[0], &unsigned[1]], &signer)?;
    let opened = Image::from_bytes(&signed[0], Verification::Full)?;
    opened.verify_signature(&trusted)?;
    assert_eq!((trusted.verifications(), trusted.verified_roots()), (1, 1));
    // Fill the memo past its capacity with roots nobody signed (as
    // many distinct verified roots would): it never holds more than
    // its capacity.
    let clone = trusted.clone();
    for n in 0..MEMO_CAPACITY as u64 + 10 {
        let mut root = [0u8; 32];
        root[..8].copy_from_slice(&n.to_le_bytes());
        clone.remember(&Digest(root), &signer.public_key());
        assert!(trusted.verified_roots() <= MEMO_CAPACITY);
    }
    // The real root was forgotten when the memo was emptied: verified
    // again, correctly; and a batch by a key not trusted is refused.
    assert!(!trusted.remembers(&opened.signature_message(), &signer.public_key()));
    opened.verify_signature(&trusted)?;
    assert_eq!(trusted.verifications(), 2);
    let other = sign_images_batch(
        &[&unsigned[1], &unsigned[0]],
        &SigningKey::from_secret_bytes([6; 32]),
    )?;
    let error = Image::from_bytes(&other[1], Verification::Full)?
        .verify_signature(&trusted)
        .expect_err("another signer");
    assert!(
        matches!(error, SignatureError::UntrustedSigner { .. }),
        "{error}"
    );
    Ok(())
}

#[test]
fn signing_twice_or_in_another_order_gives_the_same_bytes() -> Result<(), ImageError> {
    let (a, b) = (
        SigningKey::from_secret_bytes([1; 32]),
        SigningKey::from_secret_bytes([2; 32]),
    );
    let unsigned = image();
    let ab = sign_image(&sign_image(&unsigned, &a)?, &b)?;
    let ba = sign_image(&sign_image(&unsigned, &b)?, &a)?;
    assert_eq!(ab, ba);
    assert_eq!(sign_image(&ab, &a)?, ab, "re-signing replaces the record");
    assert_eq!(strip_signatures(&ab)?, unsigned);
    let opened = Image::from_bytes(&ab, Verification::Full)?;
    let mut keys = vec![a.public_key(), b.public_key()];
    keys.sort();
    assert_eq!(opened.signers(), keys);
    Ok(())
}

#[test]
fn keys_round_trip_through_hex_and_never_show_the_secret() -> Result<(), ImageError> {
    let key = SigningKey::from_secret_bytes([9; 32]);
    let public = key.public_key();
    assert_eq!(public.to_hex().parse::<PublicKey>()?, public);
    let shown = format!("{key:?}");
    assert!(shown.contains(&public.to_hex()), "{shown}");
    assert!(!shown.contains(&Digest([9; 32]).to_hex()), "{shown}");
    let error = "zz".parse::<PublicKey>().expect_err("not hex");
    assert_eq!(error.check(), "argument.key");
    let trusted = TrustedKeys::parse(&format!(
        "# release keys\n\n{public}  build farm\n{public}\n"
    ))?;
    assert_eq!(trusted.iter().collect::<Vec<_>>(), [&public]);
    let error = TrustedKeys::parse(&format!("{public}\nnot a key\n")).expect_err("line 2");
    assert!(error.to_string().contains("line 2"), "{error}");
    Ok(())
}
