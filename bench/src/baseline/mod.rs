//! What programs use instead of Kiln, built from the same entries:
//!
//! - [`dir_cache`]: one file per kernel named by its hex key, read and
//!   BLAKE3-checked on each hit (the layout of Triton's and cuda.core's caches);
//! - [`postcard_image`]: every entry in one serde + postcard file, checked and
//!   deserialized whole at start.

pub mod dir_cache;
pub mod postcard_image;

use kiln::image::Digest;

/// Splits `file` into its leading 32-byte BLAKE3 and the body it covers;
/// `None` when the file is too short or the body does not match.
fn checked_body(file: &[u8]) -> Option<&[u8]> {
    let (sum, body) = file.split_at_checked(32)?;
    (Digest::of(body).as_bytes()[..] == *sum).then_some(body)
}

/// `body` with its BLAKE3 in front.
fn with_checksum(body: &[u8]) -> Vec<u8> {
    let mut file = Vec::with_capacity(32 + body.len());
    file.extend_from_slice(Digest::of(body).as_bytes());
    file.extend_from_slice(body);
    file
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flipped_bit_fails_the_check() {
        let mut file = with_checksum(b"compiled code");
        assert_eq!(checked_body(&file), Some(&b"compiled code"[..]));
        file[40] ^= 1;
        assert_eq!(checked_body(&file), None);
        assert_eq!(checked_body(&file[..10]), None);
    }
}
