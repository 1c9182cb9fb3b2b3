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

use kiln_image::{
    Digest, EntryData, Image, ImageMeta, ImageWriter, SigningKey, TrustedKeys, Verification,
};

use crate::Error;

/// `entry` as the bytes of a one-entry image, signed by `signer` if given
/// (deterministic: the same entry and key give the same bytes on every
/// machine).
pub(super) fn encode(entry: &EntryData, signer: Option<&SigningKey>) -> Result<Vec<u8>, Error> {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-remote", env!("CARGO_PKG_VERSION")));
    writer.push(entry.clone());
    let bytes = writer.to_bytes()?;
    Ok(match signer {
        Some(key) => kiln_image::sign_image(&bytes, key)?,
        None => bytes,
    })
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
    if let Some(keys) = trusted {
        image
            .verify_signature(keys)
            .map_err(|source| Error::RemoteEntryUntrusted {
                redis_key: redis_key.to_owned(),
                source: Box::new(source),
            })?;
    }
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
        let bytes = encode(&e, None).expect("encodes");
        assert_eq!(encode(&e, None).expect("encodes"), bytes, "deterministic");
        let back = decode("k", &bytes, LIMIT, &e.owner, &e.key, None)
            .expect("decodes")
            .entry;
        assert_eq!(back.artifacts, e.artifacts);
        assert_eq!(back.name, e.name);
    }

    #[test]
    fn every_single_bit_flip_is_rejected() {
        let e = entry("f<u8>");
        let bytes = encode(&e, None).expect("encodes");
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
        let bytes = encode(&e, None).expect("encodes");
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
        let bytes = encode(&e, None).expect("encodes");
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
        let bytes = encode(&other, None).expect("encodes");
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
