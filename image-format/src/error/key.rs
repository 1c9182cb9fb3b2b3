//! [`KeyError`]: reading, parsing or generating a key.

use std::path::PathBuf;

/// Reading, parsing or generating a key failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Reading or writing a key file failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done ("read the trusted keys", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },

    /// A key (public or secret) could not be read or parsed.
    #[error("invalid key: {0}")]
    Invalid(String),

    /// The operating system gave no random bytes for a new key.
    #[error("no random bytes for a new key: {0}")]
    Random(String),
}

impl KeyError {
    /// A short stable name of the check that failed, as
    /// [`ImageError::check`](crate::ImageError::check) gives it.
    pub fn check(&self) -> &'static str {
        match self {
            KeyError::Io { .. } => "io",
            KeyError::Invalid(_) => "argument.key",
            KeyError::Random(_) => "random",
        }
    }
}
