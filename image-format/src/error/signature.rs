//! [`SignatureError`]: signing an image, checking its signatures.

use super::read::ReadError;

/// Signing an image, or checking its signatures, failed: the image is not
/// signed by a trusted key, a signature does not verify, or the images
/// given cannot be signed as asked.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// A signed image was required and this one carries no signature.
    #[error(
        "image is not signed, and only images signed by a trusted key are accepted: sign it \
         (`kiln sign IMAGE --key KEY`, or build it with KILN_SIGNING_KEY set)"
    )]
    Unsigned,

    /// None of the image's signers is a trusted key.
    #[error(
        "image is signed by {}, none of them a trusted key: add the signer's public key to \
         KILN_TRUSTED_KEYS if you trust it",
        signers.iter().map(|key| key.to_string()).collect::<Vec<_>>().join(", ")
    )]
    UntrustedSigner {
        /// The keys that signed it (claimed, not checked).
        signers: Vec<crate::signature::PublicKey>,
    },

    /// A trusted key's signature does not verify: the image's header or
    /// index changed after it was signed, or the signature was forged.
    #[error(
        "image signature by trusted key {key} does not verify: the image was changed after it \
         was signed, or the signature is forged"
    )]
    BadSignature {
        /// The trusted key whose signature failed.
        key: crate::signature::PublicKey,
    },

    /// A signature was to be added to an image signed as a member of a
    /// batch ([`sign_images_batch`](crate::signature::sign_images_batch)),
    /// whose signature signs the batch's root, not the image alone.
    #[error(
        "image is member {index} of a batch of {size} images signed together: a signature \
         cannot be added beside a batch signature; strip its signatures first \
         (`strip_signatures`), then sign it"
    )]
    BatchSigned {
        /// The image's leaf index in its batch.
        index: u32,
        /// The batch's size.
        size: u32,
    },

    /// An image given to
    /// [`sign_images_batch`](crate::signature::sign_images_batch) with
    /// others already carries signatures.
    #[error(
        "image {image} of the batch is signed already: images signed together must be \
         unsigned (strip their signatures first, or sign it alone with `sign_image`)"
    )]
    AlreadySigned {
        /// The image's position among those given.
        image: usize,
    },

    /// Something exceeds what the format can address.
    #[error("{what} is {size}, more than the format's limit of {limit}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },

    /// The image to sign or check could not be read.
    #[error(transparent)]
    Image(#[from] ReadError),
}

impl SignatureError {
    /// A short stable name of the check that failed, as
    /// [`ImageError::check`](crate::ImageError::check) gives it.
    pub fn check(&self) -> &'static str {
        match self {
            SignatureError::Unsigned => "signature.missing",
            SignatureError::UntrustedSigner { .. } => "signature.untrusted",
            SignatureError::BadSignature { .. } => "signature.invalid",
            SignatureError::BatchSigned { .. } => "signature.batch",
            SignatureError::AlreadySigned { .. } => "signature.batch",
            SignatureError::TooLarge { .. } => "writer.input",
            SignatureError::Image(error) => error.check(),
        }
    }
}
