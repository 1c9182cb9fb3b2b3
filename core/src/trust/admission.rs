//! The one decision: is an image or an entry admitted under the trusted
//! keys, and why ([`admit`]).

use kiln_image::{Image, PublicKey, SignatureError, TrustedKeys};

/// Where an image or an entry comes from, as far as trust goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Origin {
    /// Embedded in the program (`include_image!`): as trusted as its code.
    Program,
    /// Compiled by a process of this user and kept in its private cache
    /// directory (a disk-tier entry whose [`Provenance`](super::Provenance)
    /// says so, in a directory no other user may write).
    OwnCompile,
    /// Anything else: an image file, a remote value, an entry another tier
    /// received and wrote through, a directory shared with other users, an
    /// entry of unknown provenance.
    Elsewhere,
}

/// Why an image or entry was admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Admission {
    /// No trusted keys are configured: nothing is checked.
    Unchecked,
    /// Unsigned, and the program's own or this user's compile
    /// ([`Origin::Program`], [`Origin::OwnCompile`]).
    Own,
    /// A signature by this trusted key verifies.
    SignedBy(PublicKey),
}

impl Admission {
    /// Whether this admission vouches for the image's content: a trusted
    /// key's signature, or the program's or this user's own code; not
    /// [`Admission::Unchecked`]. What a tool may sign over (`kiln bake`).
    pub fn vouches(&self) -> bool {
        !matches!(self, Admission::Unchecked)
    }
}

impl std::fmt::Display for Admission {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Admission::Unchecked => f.write_str("not checked (no trusted keys)"),
            Admission::Own => f.write_str("unsigned, this user's own"),
            Admission::SignedBy(key) => write!(f, "signed by trusted key {key}"),
        }
    }
}

/// Whether `image`, coming from `origin`, is admitted under `trusted`
/// (`None`: no keys configured, everything is, [`Admission::Unchecked`]),
/// and why. With keys, an unsigned image is admitted only from
/// [`Origin::Program`] or [`Origin::OwnCompile`]; everything else, and
/// every image that carries signatures, must verify with a trusted key
/// ([`Image::verify_signature`], which remembers verified batch roots in
/// `trusted`).
///
/// ```
/// use kiln_core::trust::{Admission, Origin, admit};
/// use kiln_image::{Image, ImageMeta, ImageWriter, TrustedKeys, Verification};
///
/// let bytes = ImageWriter::new(ImageMeta::new("doc", "1")).to_bytes()?;
/// let image = Image::from_bytes(&bytes, Verification::Full)?;
/// let keys = TrustedKeys::default();
/// assert_eq!(admit(None, &image, Origin::Elsewhere)?, Admission::Unchecked);
/// assert_eq!(admit(Some(&keys), &image, Origin::Program)?, Admission::Own);
/// assert!(admit(Some(&keys), &image, Origin::Elsewhere).is_err());
/// # Ok::<(), kiln_image::ImageError>(())
/// ```
///
/// # Errors
/// The signature check's [`SignatureError`]: [`SignatureError::Unsigned`],
/// [`SignatureError::UntrustedSigner`] or [`SignatureError::BadSignature`]
/// ([`is_refusal`] tells them from other errors).
pub fn admit(
    trusted: Option<&TrustedKeys>,
    image: &Image,
    origin: Origin,
) -> Result<Admission, SignatureError> {
    let Some(keys) = trusted else {
        return Ok(Admission::Unchecked);
    };
    match origin {
        Origin::Program | Origin::OwnCompile if !image.is_signed() => Ok(Admission::Own),
        _ => image.verify_signature(keys).map(Admission::SignedBy),
    }
}

/// Whether `error` is a refusal for trust: unsigned, signed by no trusted
/// key, or a signature that does not verify.
pub fn is_refusal(error: &SignatureError) -> bool {
    matches!(
        error,
        SignatureError::Unsigned
            | SignatureError::UntrustedSigner { .. }
            | SignatureError::BadSignature { .. }
    )
}
