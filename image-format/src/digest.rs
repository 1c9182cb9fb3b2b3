//! [`Digest`]: the 32-byte BLAKE3 hash used for owners, keys, fingerprints
//! and checksums, shown as lowercase hex.

use std::fmt;

/// 32-byte BLAKE3 hash, shown as lowercase hex.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize,
)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest {
        Digest(*blake3::hash(bytes).as_bytes())
    }

    /// The 32 raw bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }

    /// Parses exactly 64 hex characters (either case).
    ///
    /// # Errors
    /// [`ParseDigestError`] when `s` is not 64 hex characters.
    pub fn from_hex(s: &str) -> Result<Digest, ParseDigestError> {
        let mut out = [0u8; 32];
        // The length is checked before any character is read.
        hex::decode_to_slice(s, &mut out).map_err(|_| ParseDigestError {
            text: s.chars().take(80).collect(),
        })?;
        Ok(Digest(out))
    }

    /// Whether the lowercase hex form starts with `prefix` (compared
    /// case-insensitively). An empty prefix matches every digest.
    pub fn hex_starts_with(&self, prefix: &str) -> bool {
        let hex = self.to_hex();
        prefix.len() <= hex.len()
            && hex.as_bytes()[..prefix.len()].eq_ignore_ascii_case(prefix.as_bytes())
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

/// Text that is not a digest: [`Digest::from_hex`] wants 64 hex digits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not a digest: expected 64 hex digits")]
pub struct ParseDigestError {
    /// The text (at most 80 characters of it).
    pub text: String,
}

impl ParseDigestError {
    /// The stable name of the check, as
    /// [`ImageError::check`](crate::ImageError::check) gives it.
    pub fn check(&self) -> &'static str {
        "argument.hex"
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.to_hex())
    }
}

impl std::str::FromStr for Digest {
    type Err = ParseDigestError;

    fn from_str(s: &str) -> Result<Digest, ParseDigestError> {
        Digest::from_hex(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trip() {
        let d = Digest::of(b"kiln");
        let hex = d.to_hex();
        assert_eq!(hex.len(), 64);
        assert_eq!(hex, blake3::hash(b"kiln").to_hex().as_str());
        assert_eq!(Digest::from_hex(&hex).unwrap(), d);
        assert_eq!(Digest::from_hex(&hex.to_uppercase()).unwrap(), d);
        assert!(d.hex_starts_with(&hex[..7]));
        assert!(!d.hex_starts_with("zz"));
    }

    #[test]
    fn rejects_bad_hex() {
        assert!(Digest::from_hex("abc").is_err());
        assert!(Digest::from_hex(&"g".repeat(64)).is_err());
        assert!(Digest::from_hex(&"é".repeat(32)).is_err());
    }
}
