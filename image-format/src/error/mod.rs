//! The errors of the crate, one enum per operation, so that a caller
//! matches what it did:
//!
//! - [`ReadError`]: opening, validating or reading an image (header,
//!   layout, bounds, index, entries, payloads, signature trailer);
//! - [`WriteError`]: building or writing an image ([`ImageWriter`]);
//! - [`SignatureError`]: signing an image or checking its signatures;
//! - [`KeyError`]: reading, parsing or generating a key;
//! - [`ParseDigestError`](crate::ParseDigestError): text that is not a
//!   digest.
//!
//! [`ImageError`] holds any of them, for a caller that only passes errors
//! on; `?` converts each into it.
//!
//! [`ImageWriter`]: crate::ImageWriter

mod key;
mod read;
mod signature;
mod write;

pub use key::KeyError;
pub use read::ReadError;
pub use signature::SignatureError;
pub use write::WriteError;

use crate::digest::ParseDigestError;

/// Any error of the crate: one of the per-operation errors, for a caller
/// that passes them on (`?` converts each into it). Its message is the
/// inner error's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ImageError {
    /// Opening, validating or reading an image failed.
    #[error(transparent)]
    Read(#[from] ReadError),

    /// Building or writing an image failed.
    #[error(transparent)]
    Write(#[from] WriteError),

    /// Signing an image or checking its signatures failed.
    #[error(transparent)]
    Signature(#[from] SignatureError),

    /// Reading, parsing or generating a key failed.
    #[error(transparent)]
    Key(#[from] KeyError),

    /// Text that is not a digest.
    #[error(transparent)]
    Digest(#[from] ParseDigestError),
}

impl ImageError {
    /// A short stable name of the check that failed, e.g. `header.magic`,
    /// `body.checksum`, `entry.checksum`, `payload.checksum`.
    pub fn check(&self) -> &'static str {
        match self {
            ImageError::Read(error) => error.check(),
            ImageError::Write(error) => error.check(),
            ImageError::Signature(error) => error.check(),
            ImageError::Key(error) => error.check(),
            ImageError::Digest(error) => error.check(),
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_test_support::errors::assert_cause_not_repeated;

    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::other("the disk is on fire")
    }

    /// Every variant that carries a cause: its message does not repeat it.
    #[test]
    fn no_message_repeats_the_cause_it_returns() {
        let samples: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(ReadError::Io {
                action: "open",
                path: "/a.kimg".into(),
                source: io(),
            }),
            Box::new(WriteError::Io {
                action: "write",
                path: "/a.kimg".into(),
                source: io(),
            }),
            Box::new(KeyError::Io {
                action: "read the trusted keys",
                path: "/keys".into(),
                source: io(),
            }),
        ];
        for error in &samples {
            assert_cause_not_repeated(error.as_ref());
        }
    }
}
