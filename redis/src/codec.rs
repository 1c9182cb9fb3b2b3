//! Values in Redis: one entry as a one-entry kiln image, and back.
//!
//! The server is untrusted: a value is used only after full verification
//! (header, structure and every payload checksum), and only if it holds
//! exactly the entry asked for. Anything else is an error, never bytes.
//!
//! A value may be signed (the writer's `KILN_SIGNING_KEY`): the signature
//! covers the image's header and index, and the index names the entry's
//! `(owner, key)`, so a signed value copied under another Redis key is
//! refused (it is not the entry asked for), and one edited to name the
//! other key no longer verifies. With trusted keys, a value no trusted key
//! signed is refused.
//!
//! Entries stored together ([`encode_batch`]) are signed with one batch
//! signature ([`kiln_image::sign_images_batch`]): each value carries its
//! path to the batch's signed root, which binds its own header and index
//! exactly as a direct signature does, so every rule above holds for each
//! value alone; a reader verifies the root once per process (the memo of
//! its [`TrustedKeys`]) and each other member with a few hashes.

use kiln_image::{
    Digest, EntryData, Image, ImageMeta, ImageWriter, SigningKey, TrustedKeys, Verification,
};

use crate::Error;

/// `entry` as the bytes of an unsigned one-entry image (deterministic:
/// the same entry gives the same bytes on every machine); [`encode_batch`]
/// signs.
pub(super) fn encode(entry: &EntryData) -> Result<Vec<u8>, Error> {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-remote", env!("CARGO_PKG_VERSION")));
    writer.push(entry.clone());
    Ok(writer.to_bytes()?)
}

/// `entries` as values, each as [`encode`] gives it, signed by `signer`
/// together (one batch signature for all those that encoded: see the
/// module docs; one entry alone is signed directly, as
/// [`kiln_image::sign_image`] does); one result per entry, in order. At most
/// [`kiln_image::signature::MAX_BATCH`] entries are signed together.
pub(super) fn encode_batch(
    entries: &[&EntryData],
    signer: Option<&SigningKey>,
) -> Vec<Result<Vec<u8>, Error>> {
    let mut values: Vec<Result<Vec<u8>, Error>> =
        entries.iter().map(|entry| encode(entry)).collect();
    let Some(key) = signer else {
        return values;
    };
    for chunk in values.chunks_mut(kiln_image::signature::MAX_BATCH) {
        let unsigned: Vec<&[u8]> = chunk
            .iter()
            .filter_map(|value| value.as_deref().ok())
            .collect();
        match kiln_image::sign_images_batch(&unsigned, key) {
            Ok(signed) => {
                let mut signed = signed.into_iter();
                for value in chunk.iter_mut().filter(|value| value.is_ok()) {
                    if let Some(bytes) = signed.next() {
                        *value = Ok(bytes);
                    }
                }
            }
            // Fresh one-entry images always sign; should one not, each is
            // signed alone and keeps its own error.
            Err(_) => {
                for value in chunk.iter_mut() {
                    if let Ok(bytes) = value {
                        *value = kiln_image::sign_image(bytes, key).map_err(Error::from);
                    }
                }
            }
        }
    }
    values
}

/// A value decoded: the entry, and whether the value carries signatures
/// (then the disk tier keeps the value itself, to check them again).
#[derive(Debug)]
pub(super) struct Decoded {
    pub(super) entry: EntryData,
    pub(super) signed: bool,
}

/// The entry `(owner, key)` held by the value `bytes` of Redis key
/// `redis_key`.
///
/// # Errors
/// [`Error::RemoteEntryTooLarge`] if `bytes` is longer than `limit`,
/// [`Error::RemoteEntryCorrupt`] if it is not a valid image (any header
/// field, structure or checksum), [`Error::RemoteEntryMismatch`] if it is
/// valid but does not hold exactly the entry `(owner, key)`,
/// [`Error::RemoteEntryUntrusted`] if `trusted` keys are given and none of
/// them signed it.
pub(super) fn decode(
    redis_key: &str,
    bytes: &[u8],
    limit: usize,
    owner: &Digest,
    key: &Digest,
    trusted: Option<&TrustedKeys>,
) -> Result<Decoded, Error> {
    if bytes.len() > limit {
        return Err(Error::RemoteEntryTooLarge {
            redis_key: redis_key.to_owned(),
            limit,
        });
    }
    let corrupt = |source| Error::RemoteEntryCorrupt {
        redis_key: redis_key.to_owned(),
        source: Box::new(source),
    };
    let mismatch = |found: String| Error::RemoteEntryMismatch {
        redis_key: redis_key.to_owned(),
        found,
    };
    let image = Image::from_bytes(bytes, Verification::Full).map_err(corrupt)?;
    if image.len() != 1 {
        return Err(mismatch(format!("{} entries", image.len())));
    }
    let entry = image.entry(0).map_err(corrupt)?;
    if entry.owner() != *owner || entry.key() != *key {
        return Err(mismatch(format!(
            "the entry of owner {} key {}",
            entry.owner(),
            entry.key()
        )));
    }
    // A remote value comes from elsewhere: with trusted keys, one of them
    // must have signed it.
    kiln_core::trust::admit(trusted, &image, kiln_core::trust::Origin::Elsewhere).map_err(
        |source| Error::RemoteEntryUntrusted {
            redis_key: redis_key.to_owned(),
            source: Box::new(source),
        },
    )?;
    Ok(Decoded {
        entry: entry.to_data().map_err(corrupt)?,
        signed: image.is_signed(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_image::{Artifact, ArtifactKind};

    const LIMIT: usize = 1 << 20;

    fn entry(name: &str) -> EntryData {
        EntryData {
            owner: Digest::of(b"owner"),
            owner_label: "test 1 cpu".into(),
            key: Digest::of(name.as_bytes()),
            name: name.into(),
            min_world: 1,
            max_world: u64::MAX,
            deps: vec![],
            artifacts: vec![Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec!["f".into()],
                bytes: format!("code of {name}").into_bytes(),
            }],
        }
    }

    #[test]
    fn round_trip() {
        let e = entry("f<i32>");
        let bytes = encode(&e).expect("encodes");
        assert_eq!(encode(&e).expect("encodes"), bytes, "deterministic");
        let back = decode("k", &bytes, LIMIT, &e.owner, &e.key, None)
            .expect("decodes")
            .entry;
        assert_eq!(back.artifacts, e.artifacts);
        assert_eq!(back.name, e.name);
    }

    #[test]
    fn entries_encoded_together_share_one_batch_signature() {
        let entries: Vec<EntryData> = (0..5).map(|i| entry(&format!("h<{i}>"))).collect();
        let refs: Vec<&EntryData> = entries.iter().collect();
        let key = SigningKey::from_secret_bytes([3; 32]);
        let trusted = TrustedKeys::new([key.public_key()]);
        let values = encode_batch(&refs, Some(&key));
        for (e, value) in entries.iter().zip(&values) {
            let bytes = value.as_ref().expect("encodes");
            let image = Image::from_bytes(bytes, Verification::Full).expect("opens");
            assert_eq!(image.signature_batch().map(|b| b.size), Some(5));
            let decoded = decode("k", bytes, LIMIT, &e.owner, &e.key, Some(&trusted));
            assert_eq!(decoded.expect("verifies").entry, *e);
        }
        assert_eq!(trusted.verifications(), 1);
        // Unsigned: the values `encode` gives, one by one.
        let unsigned = encode_batch(&refs, None);
        for (e, value) in entries.iter().zip(unsigned) {
            assert_eq!(value.expect("encodes"), encode(e).expect("encodes"));
        }
        // One entry alone: a direct signature.
        let one = encode_batch(&refs[..1], Some(&key));
        assert_eq!(
            one.into_iter().next().map(|v| v.expect("encodes")),
            Some(
                kiln_image::sign_image(&encode(&entries[0]).expect("encodes"), &key)
                    .expect("signs")
            )
        );
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let e = entry("f<u8>");
        let bytes = encode(&e).expect("encodes");
        for i in 0..bytes.len() {
            let mut flipped = bytes.clone();
            flipped[i] ^= 0x10;
            let result = decode("k", &flipped, LIMIT, &e.owner, &e.key, None).map(|d| d.entry);
            // A flip in padding may leave the entry intact: then it must be
            // exactly the original entry.
            if let Ok(back) = result {
                assert_eq!(back, e, "flip at byte {i} changed the entry");
            }
        }
    }

    #[test]
    fn truncation_is_rejected() {
        let e = entry("f<u16>");
        let bytes = encode(&e).expect("encodes");
        for len in [0, 1, 16, bytes.len() / 2, bytes.len() - 1] {
            assert!(
                matches!(
                    decode("k", &bytes[..len], LIMIT, &e.owner, &e.key, None),
                    Err(Error::RemoteEntryCorrupt { .. })
                ),
                "{len} bytes"
            );
        }
    }

    #[test]
    fn a_value_over_the_limit_is_rejected_before_it_is_parsed() {
        let e = entry("f<i8>");
        let bytes = encode(&e).expect("encodes");
        assert!(decode("k", &bytes, bytes.len(), &e.owner, &e.key, None).is_ok());
        let result = decode("k", &bytes, bytes.len() - 1, &e.owner, &e.key, None);
        assert!(
            matches!(result, Err(Error::RemoteEntryTooLarge { limit, .. }) if limit == bytes.len() - 1),
            "{result:?}"
        );
    }

    #[test]
    fn another_entry_is_rejected() {
        let (asked, other) = (entry("f<f32>"), entry("f<f64>"));
        let bytes = encode(&other).expect("encodes");
        let result = decode("k", &bytes, LIMIT, &asked.owner, &asked.key, None);
        assert!(
            matches!(result, Err(Error::RemoteEntryMismatch { .. })),
            "{result:?}"
        );
    }

    #[test]
    fn two_entries_are_rejected_even_if_one_matches() {
        let (asked, other) = (entry("g<f32>"), entry("g<f64>"));
        let mut writer = ImageWriter::new(ImageMeta::new("x", "1"));
        writer.push(asked.clone());
        writer.push(other);
        let bytes = writer.to_bytes().expect("encodes");
        let result = decode("k", &bytes, LIMIT, &asked.owner, &asked.key, None);
        assert!(
            matches!(result, Err(Error::RemoteEntryMismatch { ref found, .. }) if found == "2 entries"),
            "{result:?}"
        );
    }
}
