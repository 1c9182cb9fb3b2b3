//! Signing an image ([`sign_image`]) and removing its signatures
//! ([`strip_signatures`]): the trailer rewritten after the body, the
//! header's trailer length and checksum updated, nothing else touched.

use super::keys::SigningKey;
use super::trailer::{MAX_SIGNATURES, Record, encode_trailer};
use crate::header::{self, offsets};
use crate::{Image, SignatureError, Verification};

/// Where the body of `opened` ends, as an index into its bytes.
pub(super) fn body_end(opened: &Image) -> Result<usize, SignatureError> {
    usize::try_from(opened.header().body_end()).map_err(|_| SignatureError::TooLarge {
        what: "the image",
        size: opened.header().body_end(),
        limit: usize::MAX as u64,
    })
}

/// `image[..body_end]` followed by `trailer`, the trailer length and the
/// header checksum updated.
pub(super) fn with_trailer(image: &[u8], body_end: usize, trailer: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body_end + trailer.len());
    out.extend_from_slice(&image[..body_end]);
    out.extend_from_slice(trailer);
    out[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4]
        .copy_from_slice(&(trailer.len() as u32).to_le_bytes());
    header::reseal(&mut out);
    out
}

/// `image` signed by `key` as well: the image's bytes with a signature by
/// `key` in its trailer (replacing one by the same key), the trailer length
/// and the header checksum updated. Nothing else changes, so signatures
/// already there stay valid. Deterministic: the same image and keys give
/// the same bytes, whatever the order of signing.
///
/// The image is opened with [`Verification::Structural`] first (its header
/// and index are what is signed); check it fully before signing what you
/// did not write.
///
/// ```
/// use kiln_image::signature::{SigningKey, TrustedKeys, sign_image};
/// use kiln_image::{Image, ImageMeta, ImageWriter, Verification};
///
/// let key = SigningKey::from_secret_bytes([7; 32]);
/// let unsigned = ImageWriter::new(ImageMeta::new("my-kernels", "1.0.0")).to_bytes()?;
/// let signed = sign_image(&unsigned, &key)?;
/// let image = Image::from_bytes(&signed, Verification::Full)?;
/// let trusted = TrustedKeys::new([key.public_key()]);
/// assert_eq!(image.verify_signature(&trusted)?, key.public_key());
/// # Ok::<(), kiln_image::ImageError>(())
/// ```
///
/// # Errors
/// Whatever opening the image reports; [`SignatureError::TooLarge`] when it
/// carries [`MAX_SIGNATURES`] signatures already;
/// [`SignatureError::BatchSigned`] when it carries a batch signature (which
/// signs its batch's root, not the image alone: strip it first).
pub fn sign_image(image: &[u8], key: &SigningKey) -> Result<Vec<u8>, SignatureError> {
    let opened = Image::from_bytes(image, Verification::Structural)?;
    if let Some(batch) = opened.signature_batch() {
        return Err(SignatureError::BatchSigned {
            index: batch.index,
            size: batch.size,
        });
    }
    let digest = opened.signed_digest();
    let mut records: Vec<Record> = opened.signatures.clone();
    let public = key.public_key();
    records.retain(|record| record.key != public);
    if records.len() >= MAX_SIGNATURES {
        return Err(SignatureError::TooLarge {
            what: "the number of signatures",
            size: records.len() as u64 + 1,
            limit: MAX_SIGNATURES as u64,
        });
    }
    records.push(Record {
        key: public,
        signature: key.sign(&digest),
    });
    records.sort_by_key(|record| record.key);
    let body_end = body_end(&opened)?;
    drop(opened);
    Ok(with_trailer(
        image,
        body_end,
        &encode_trailer(&records, None),
    ))
}

/// `image` without its signatures: the bytes an unsigned image has (its
/// signed digest unchanged).
///
/// # Errors
/// Whatever opening the image with [`Verification::Structural`] reports.
pub fn strip_signatures(image: &[u8]) -> Result<Vec<u8>, SignatureError> {
    let opened = Image::from_bytes(image, Verification::Structural)?;
    let body_end = opened.header().body_end() as usize;
    drop(opened);
    let mut out = image[..body_end].to_vec();
    out[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4].fill(0);
    header::reseal(&mut out);
    Ok(out)
}
