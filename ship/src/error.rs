//! [`ShipError`]: why a shipped image cannot be read, checked or written.

use kiln_image::{Digest, ReadError, WriteError};

/// Why a shipped image cannot be read, checked or written. Each message says
/// what was found, what was expected and, where it helps, what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipError {
    /// Too short to hold the fixed header.
    #[error("not a shipped kiln image: {len} bytes, the header alone is {header} bytes")]
    Truncated {
        /// The file's length.
        len: usize,
        /// The header's length.
        header: usize,
    },
    /// The first eight bytes are not `KILNSHIP`.
    #[error("not a shipped kiln image: it does not start with KILNSHIP")]
    BadMagic,
    /// Written by a Kiln whose shipped format this one cannot read.
    #[error(
        "shipped image format {found}, this kiln reads format {supported}: build with a kiln \
         release that reads it, or ship the library again with `kiln ship`"
    )]
    UnsupportedVersion {
        /// The format the file says it has.
        found: u32,
        /// The format this reader reads.
        supported: u32,
    },
    /// A header field holds a value no writer writes.
    #[error("shipped image header: {field} is {found}, {expected}")]
    BadHeader {
        /// The field.
        field: &'static str,
        /// Its value.
        found: u64,
        /// What it must be.
        expected: String,
    },
    /// The file's length is not what the header and trailer say.
    #[error(
        "shipped image is {found} bytes, its header and signature trailer say {expected}: \
         truncated or appended to"
    )]
    Length {
        /// The file's length.
        found: u64,
        /// The length the header and trailer imply.
        expected: u64,
    },
    /// The signature trailer is malformed.
    #[error("shipped image signature trailer: {0}")]
    BadTrailer(String),
    /// The compressed body does not decompress.
    #[error("shipped image body does not decompress: {0}")]
    Decompress(String),
    /// The decompressed body is longer or shorter than the header says.
    #[error("shipped image body decompresses to {found} bytes, its header says {expected}")]
    RawLength {
        /// Bytes decompressed (counting stops one past what was declared).
        found: u64,
        /// The declared length.
        expected: u64,
    },
    /// The decompressed body's digest is not the one the header names.
    #[error("shipped image body digest {found}, its header names {expected}: the file is damaged")]
    Content {
        /// The digest of what was decompressed.
        found: Digest,
        /// The digest in the header.
        expected: Digest,
    },
    /// The index does not decode, or is inconsistent with the payloads.
    #[error("shipped image index: {0}")]
    BadIndex(String),
    /// An entry no kiln image can hold (the image writer's rules: an empty
    /// custom artifact kind, one owner under two labels...): the file is
    /// not used.
    #[error("shipped image holds what no kiln image can hold")]
    Unwritable(#[source] WriteError),
    /// The entries are not sorted by (owner, key), or one is repeated.
    #[error("shipped image entries {0} and {1} are out of order or repeat an (owner, key)")]
    Order(usize, usize),
    /// The library asks for a signature by `key` and the file has none.
    #[error(
        "the shipped image is not signed by {key}, the key the library names: ship it again \
         with `kiln ship --key` and that key's secret"
    )]
    NotSigned {
        /// The key the library names.
        key: kiln_image::PublicKey,
    },
    /// A signature by the named key does not verify.
    #[error(
        "the shipped image's signature by {key} does not verify: the file was changed after it was signed"
    )]
    BadSignature {
        /// The key whose signature failed.
        key: kiln_image::PublicKey,
    },
    /// Too many signatures to add another.
    #[error("a shipped image holds at most {max} signatures")]
    TooManySignatures {
        /// The limit.
        max: usize,
    },
    /// The image the entries come from cannot be read.
    #[error(transparent)]
    ImageRead(#[from] ReadError),
    /// The image built from the entries cannot be built or written.
    #[error(transparent)]
    ImageWrite(#[from] WriteError),
    /// Compressing failed.
    #[error("compressing the shipped image failed: {0}")]
    Compress(String),
}

#[cfg(test)]
mod tests {
    use kiln_test_support::errors::assert_cause_not_repeated;

    use super::*;

    /// Every variant that carries a cause: its message does not repeat it.
    #[test]
    fn no_message_repeats_the_cause_it_returns() {
        let write = WriteError::Io {
            action: "write",
            path: "/a.kship".into(),
            source: std::io::Error::other("no space"),
        };
        assert_cause_not_repeated(&ShipError::Unwritable(write));
    }
}
