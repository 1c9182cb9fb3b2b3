//! Batch signatures: the Merkle tree over many images' signed digests,
//! the root message one signature signs, and a member's path to it (see
//! the [module docs](super)).

use super::keys::SigningKey;
use super::sign::{body_end, sign_image, with_trailer};
use super::trailer::{BatchPath, MAX_BATCH, Record, batch_depth, encode_trailer, promoted};
use crate::{Digest, Image, SignatureError, Verification};

/// BLAKE3 derive-key context of a batch's leaf (over a signed digest).
pub const BATCH_LEAF_CONTEXT: &str = "kiln-image 3 batch leaf";
/// BLAKE3 derive-key context of a batch's inner node (over left ‖ right).
pub const BATCH_NODE_CONTEXT: &str = "kiln-image 3 batch node";
/// BLAKE3 derive-key context of the message a batch signature signs (over
/// root ‖ size as u32 LE).
pub const BATCH_ROOT_CONTEXT: &str = "kiln-image 3 batch root";

/// BLAKE3 in derive-key mode of the concatenation of `parts`.
fn derive(context: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(context);
    for part in parts {
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

/// The leaf of an image whose signed digest is `digest`.
pub(super) fn batch_leaf(digest: &Digest) -> [u8; 32] {
    derive(BATCH_LEAF_CONTEXT, &[&digest.0])
}

/// The node above `left` and `right`.
fn batch_node(left: &[u8; 32], right: &[u8; 32]) -> [u8; 32] {
    derive(BATCH_NODE_CONTEXT, &[left, right])
}

/// The message a batch signature signs: the root and the batch size.
fn batch_root_message(root: &[u8; 32], size: u32) -> Digest {
    Digest(derive(BATCH_ROOT_CONTEXT, &[root, &size.to_le_bytes()]))
}

impl BatchPath {
    /// The root message reached from the image whose signed digest is
    /// `digest` along this path: [`batch_depth`] levels, a few BLAKE3
    /// hashes of 64 bytes.
    pub(super) fn root_message(&self, digest: &Digest) -> Digest {
        let mut node = batch_leaf(digest);
        let (mut index, mut width) = (self.index as usize, self.size as usize);
        for sibling in &self.path {
            if !promoted(index, width) {
                node = if index.is_multiple_of(2) {
                    batch_node(&node, sibling)
                } else {
                    batch_node(sibling, &node)
                };
            }
            index /= 2;
            width = width.div_ceil(2);
        }
        batch_root_message(&node, self.size)
    }
}
/// `images` signed by `key` together: one ed25519 signature of the root of
/// a Merkle tree over their signed digests, each image given its own path
/// to the root (see the module docs), in the same order. A reader then
/// pays one verification per batch and process, and a few BLAKE3 hashes
/// per member ([`Image::verify_signature`], [`TrustedKeys`](super::TrustedKeys)).
/// Deterministic; a batch of one gives exactly [`sign_image`]'s bytes, and
/// an empty batch nothing.
///
/// Each image is opened with [`Verification::Structural`] (as
/// [`sign_image`] does); images of a batch larger than one must be
/// unsigned.
///
/// ```
/// use kiln_image::signature::{SigningKey, TrustedKeys, sign_images_batch};
/// use kiln_image::{Image, ImageMeta, ImageWriter, Verification};
///
/// let key = SigningKey::from_secret_bytes([7; 32]);
/// let images: Vec<Vec<u8>> = (0..3)
///     .map(|n| ImageWriter::new(ImageMeta::new("batch", &n.to_string())).to_bytes())
///     .collect::<Result<_, _>>()?;
/// let signed = sign_images_batch(&images.iter().map(Vec::as_slice).collect::<Vec<_>>(), &key)?;
/// let trusted = TrustedKeys::new([key.public_key()]);
/// for bytes in &signed {
///     let image = Image::from_bytes(bytes, Verification::Full)?;
///     assert_eq!(image.verify_signature(&trusted)?, key.public_key());
/// }
/// assert_eq!(trusted.verifications(), 1);
/// # Ok::<(), kiln_image::ImageError>(())
/// ```
///
/// # Errors
/// Whatever opening an image reports; [`SignatureError::TooLarge`] for more
/// than [`MAX_BATCH`] images; [`SignatureError::AlreadySigned`] when an image of
/// a batch of two or more carries signatures.
pub fn sign_images_batch(
    images: &[&[u8]],
    key: &SigningKey,
) -> Result<Vec<Vec<u8>>, SignatureError> {
    match images {
        [] => return Ok(Vec::new()),
        [one] => return Ok(vec![sign_image(one, key)?]),
        _ if images.len() > MAX_BATCH => {
            return Err(SignatureError::TooLarge {
                what: "the number of images signed together",
                size: images.len() as u64,
                limit: MAX_BATCH as u64,
            });
        }
        _ => {}
    }
    let size = images.len();
    let mut leaves = Vec::with_capacity(size);
    let mut ends = Vec::with_capacity(size);
    for (n, image) in images.iter().enumerate() {
        let opened = Image::from_bytes(image, Verification::Structural)?;
        if opened.is_signed() {
            return Err(SignatureError::AlreadySigned { image: n });
        }
        leaves.push(batch_leaf(&opened.signed_digest()));
        ends.push(body_end(&opened)?);
    }
    // Every level of the tree, leaves first, the root alone last.
    let mut levels = vec![leaves];
    while let Some(level) = levels.last().filter(|level| level.len() > 1) {
        let above = level
            .chunks(2)
            .map(|pair| match pair {
                [left, right] => batch_node(left, right),
                // The last node of an odd count: promoted unchanged.
                [lone, ..] => *lone,
                [] => [0; 32],
            })
            .collect();
        levels.push(above);
    }
    let root = levels
        .last()
        .and_then(|level| level.first())
        .copied()
        .unwrap_or_default();
    let size_u32 = size as u32;
    let records = [Record {
        key: key.public_key(),
        signature: key.sign(&batch_root_message(&root, size_u32)),
    }];
    let depth = levels.len() - 1;
    debug_assert_eq!(depth, batch_depth(size));
    Ok(images
        .iter()
        .zip(ends)
        .enumerate()
        .map(|(index, (image, end))| {
            let path = levels[..depth]
                .iter()
                .enumerate()
                .map(|(level, nodes)| {
                    let at = index >> level;
                    nodes.get(at ^ 1).copied().unwrap_or_default()
                })
                .collect();
            let batch = BatchPath {
                index: index as u32,
                size: size_u32,
                path,
            };
            with_trailer(image, end, &encode_trailer(&records, Some(&batch)))
        })
        .collect())
}
