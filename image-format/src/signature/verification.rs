//! Checking an image's signatures: the signed digest (what every
//! signature signs), the message of a batch member, and
//! [`Image::verify_signature`] against [`TrustedKeys`].

use super::keys::{PublicKey, TrustedKeys};
use super::trailer::BatchPosition;
use crate::header::{HEADER_LEN, offsets};
use crate::{Digest, Image, SignatureError};

/// BLAKE3 derive-key context of the signed digest.
pub const SIGNED_DIGEST_CONTEXT: &str = "kiln-image 3 signed digest (header and index)";

/// What [`Image::check_signatures`] found of one signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureCheck {
    /// Who claims to have signed.
    pub key: PublicKey,
    /// Whether the signature verifies: the key's holder signed exactly this
    /// header and index (directly, or as a member of a batch).
    pub valid: bool,
    /// Whether the key is among the trusted keys given.
    pub trusted: bool,
}
/// The signed digest of an image whose first [`HEADER_LEN`] bytes are
/// `header` and whose index is `index` (see the module docs).
pub(crate) fn signed_digest(header: &[u8; HEADER_LEN], index: &[u8]) -> Digest {
    let mut unsigned = [0u8; offsets::HEADER_CHECKSUM];
    unsigned.copy_from_slice(&header[..offsets::HEADER_CHECKSUM]);
    unsigned[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4].fill(0);
    let mut hasher = blake3::Hasher::new_derive_key(SIGNED_DIGEST_CONTEXT);
    hasher.update(&unsigned);
    hasher.update(index);
    Digest(*hasher.finalize().as_bytes())
}

impl Image {
    /// The keys that claim to have signed this image, in ascending order
    /// (read from its trailer at open; not checked: see
    /// [`Image::verify_signature`]). Empty for an unsigned image.
    pub fn signers(&self) -> Vec<PublicKey> {
        self.signatures.iter().map(|record| record.key).collect()
    }

    /// Whether the image carries signatures (checked or not).
    pub fn is_signed(&self) -> bool {
        !self.signatures.is_empty()
    }

    /// For a batch-signed image ([`sign_images_batch`](super::sign_images_batch)), its place in the
    /// batch (read from its trailer; not checked); `None` for an unsigned
    /// or directly signed one.
    pub fn signature_batch(&self) -> Option<BatchPosition> {
        self.batch.as_ref().map(|batch| BatchPosition {
            index: batch.index,
            size: batch.size,
        })
    }

    /// The digest every signature of this image signs (see the module
    /// docs): computed on the first call, from the header and the index,
    /// and remembered.
    pub fn signed_digest(&self) -> Digest {
        *self.signed_digest.get_or_init(|| {
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&self.storage.head()[..HEADER_LEN]);
            signed_digest(&header, self.index_bytes())
        })
    }

    /// The message the trailer's records sign: the signed digest for a
    /// direct signature, the batch's root message, reached from the
    /// signed digest along the image's path, for a batch signature.
    pub fn signature_message(&self) -> Digest {
        let digest = self.signed_digest();
        match &self.batch {
            None => digest,
            Some(batch) => batch.root_message(&digest),
        }
    }

    /// The key among `trusted` whose signature of this image verifies.
    ///
    /// A valid signature authenticates the header and the index, and with
    /// them every entry and the BLAKE3 of every payload, which a reader
    /// checks before returning a payload's bytes (see the module docs).
    /// Costs hashing the header and index once per image, and one ed25519
    /// verification per trusted signature tried; for a batch signature,
    /// a few BLAKE3 hashes more (the path), and no verification when
    /// `trusted` (or a clone of it) verified the same root and signer
    /// already.
    ///
    /// # Errors
    /// [`SignatureError::Unsigned`] when the image carries no signature,
    /// [`SignatureError::UntrustedSigner`] when none of its signers is trusted,
    /// [`SignatureError::BadSignature`] when every trusted signer's signature
    /// fails (the image or its path changed after it was signed, or the
    /// signature was forged).
    pub fn verify_signature(&self, trusted: &TrustedKeys) -> Result<PublicKey, SignatureError> {
        if self.signatures.is_empty() {
            return Err(SignatureError::Unsigned);
        }
        let message = self.signature_message();
        let batch = self.batch.is_some();
        let mut failed = None;
        for record in &self.signatures {
            let Some(key) = trusted.decoded(&record.key) else {
                continue;
            };
            if batch && trusted.remembers(&message, &record.key) {
                return Ok(record.key);
            }
            if trusted.verify(key, &message, &record.signature) {
                if batch {
                    trusted.remember(&message, &record.key);
                }
                return Ok(record.key);
            }
            failed.get_or_insert(record.key);
        }
        Err(match failed {
            Some(key) => SignatureError::BadSignature { key },
            None => SignatureError::UntrustedSigner {
                signers: self.signers(),
            },
        })
    }

    /// Every signature of the image, each checked, and whether its key is
    /// in `trusted` (for tools: `kiln verify`, `kiln inspect`). Each
    /// signature is verified here (no memo).
    pub fn check_signatures(&self, trusted: Option<&TrustedKeys>) -> Vec<SignatureCheck> {
        let message = self.signature_message();
        self.signatures
            .iter()
            .map(|record| SignatureCheck {
                key: record.key,
                valid: record.key.verifies(&message.0, &record.signature),
                trusted: trusted.is_some_and(|keys| keys.contains(&record.key)),
            })
            .collect()
    }
}
