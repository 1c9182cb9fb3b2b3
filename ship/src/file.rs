//! The file's frame: the fixed header, the compressed body's place, and the
//! signature trailer. Parsing reads no more than the frame and never
//! decompresses.
//!
//! ```text
//! offset  size  field (little-endian)
//!      0     8  magic "KILNSHIP"
//!      8     4  format version (1)
//!     12     4  flags (0)
//!     16     8  index length: the postcard index at the start of the raw body
//!     24     8  raw length: index + payloads, decompressed
//!     32     8  packed length: the zstd frame that follows the header
//!     40    32  content digest: BLAKE3 (derive-key CONTENT_CONTEXT) of the raw body
//!     72     …  the zstd frame (packed length bytes)
//!      …     …  optional trailer: "KILNSSIG", count u32, 0 u32, then per
//!               signature a 32-byte ed25519 public key and a 64-byte
//!               signature, keys strictly ascending, at most MAX_SIGNATURES
//! ```
//!
//! A signature signs [`ShippedFile::signed_message`]: a BLAKE3 (derive-key
//! [`SIGNED_CONTEXT`]) of the 72-byte header, which names the content
//! digest and every length, so it covers every byte a reader uses.

use kiln_image::{Digest, PublicKey, SigningKey};

use crate::ShipError;

/// The first eight bytes of a shipped image.
pub const MAGIC: &[u8; 8] = b"KILNSHIP";
/// The shipped format this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Length of the fixed header.
pub const HEADER_LEN: usize = 72;
/// BLAKE3 derive-key context of the content digest.
pub const CONTENT_CONTEXT: &str = "kiln-ship 1 content";
/// BLAKE3 derive-key context of the message a signature signs.
pub const SIGNED_CONTEXT: &str = "kiln-ship 1 signed header";
/// The first eight bytes of the signature trailer.
pub const TRAILER_MAGIC: &[u8; 8] = b"KILNSSIG";
/// The most signatures a shipped image holds.
pub const MAX_SIGNATURES: usize = 16;
/// The largest raw body a reader accepts (2 GiB): the most memory
/// unpacking one file can take.
pub const MAX_RAW_LEN: u64 = 2 << 30;
/// A raw body may be at most this many times its compressed length (plus
/// [`SLACK`]), so that unpacking costs memory linear in the file read, and
/// a small file cannot declare a large body. Real shipped images compress
/// 15 to 90 times (the demo libraries' 20 and 89 times at zstd level 19
/// with long-distance matching, the committed test file 16 times); `kiln
/// ship` pads a body that would compress further with a skippable zstd
/// frame, so that every file it writes stays within the bound.
pub const MAX_EXPANSION: u64 = 256;
/// The part of the raw body allowed whatever the compressed length.
pub const SLACK: u64 = 1 << 20;

const TRAILER_HEADER_LEN: usize = 16;
const SIGNATURE_LEN: usize = 32 + 64;

/// The header's fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) index_len: u64,
    pub(crate) raw_len: u64,
    pub(crate) packed_len: u64,
    pub(crate) content: Digest,
}

impl Header {
    pub(crate) fn to_bytes(self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[0..8].copy_from_slice(MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..16].copy_from_slice(&0u32.to_le_bytes());
        out[16..24].copy_from_slice(&self.index_len.to_le_bytes());
        out[24..32].copy_from_slice(&self.raw_len.to_le_bytes());
        out[32..40].copy_from_slice(&self.packed_len.to_le_bytes());
        out[40..72].copy_from_slice(&self.content.0);
        out
    }

    fn parse(bytes: &[u8]) -> Result<Header, ShipError> {
        let header = bytes.get(..HEADER_LEN).ok_or(ShipError::Truncated {
            len: bytes.len(),
            header: HEADER_LEN,
        })?;
        if &header[0..8] != MAGIC {
            return Err(ShipError::BadMagic);
        }
        let version = u32_at(header, 8);
        if version != FORMAT_VERSION {
            return Err(ShipError::UnsupportedVersion {
                found: version,
                supported: FORMAT_VERSION,
            });
        }
        let flags = u32_at(header, 12);
        if flags != 0 {
            return Err(bad("flags", flags.into(), "0".into()));
        }
        let parsed = Header {
            index_len: u64_at(header, 16),
            raw_len: u64_at(header, 24),
            packed_len: u64_at(header, 32),
            content: Digest(header[40..72].try_into().unwrap_or([0; 32])),
        };
        if parsed.raw_len > MAX_RAW_LEN {
            return Err(bad(
                "the raw length",
                parsed.raw_len,
                format!("at most {MAX_RAW_LEN}"),
            ));
        }
        let most = parsed
            .packed_len
            .saturating_mul(MAX_EXPANSION)
            .saturating_add(SLACK);
        if parsed.raw_len > most {
            return Err(bad(
                "the raw length",
                parsed.raw_len,
                format!(
                    "at most {MAX_EXPANSION} times the packed length {} plus {SLACK}",
                    parsed.packed_len
                ),
            ));
        }
        if parsed.index_len > parsed.raw_len {
            return Err(bad(
                "the index length",
                parsed.index_len,
                format!("at most the raw length {}", parsed.raw_len),
            ));
        }
        Ok(parsed)
    }
}

/// A shipped image's bytes with their frame checked: header parsed, lengths
/// consistent, signatures listed (not verified). Nothing is decompressed.
#[derive(Clone, Debug)]
pub struct ShippedFile<'a> {
    header: Header,
    header_bytes: &'a [u8],
    packed: &'a [u8],
    signatures: Vec<(PublicKey, [u8; 64])>,
}

impl<'a> ShippedFile<'a> {
    /// Checks the frame of `bytes`.
    ///
    /// # Errors
    /// [`ShipError::Truncated`], [`ShipError::BadMagic`],
    /// [`ShipError::UnsupportedVersion`], [`ShipError::BadHeader`],
    /// [`ShipError::Length`], [`ShipError::BadTrailer`].
    pub fn parse(bytes: &'a [u8]) -> Result<ShippedFile<'a>, ShipError> {
        let header = Header::parse(bytes)?;
        let body_end = (HEADER_LEN as u64).saturating_add(header.packed_len);
        let total = bytes.len() as u64;
        if total < body_end {
            return Err(ShipError::Length {
                found: total,
                expected: body_end,
            });
        }
        // Both fit in `bytes`, whose length is a usize.
        let body_end = body_end as usize;
        let signatures = parse_trailer(&bytes[body_end..], body_end as u64)?;
        Ok(ShippedFile {
            header,
            header_bytes: &bytes[..HEADER_LEN],
            packed: &bytes[HEADER_LEN..body_end],
            signatures,
        })
    }

    /// The compressed body.
    pub(crate) fn packed(&self) -> &'a [u8] {
        self.packed
    }

    pub(crate) fn header(&self) -> Header {
        self.header
    }

    /// The decompressed body's length, as the header declares it.
    pub fn raw_len(&self) -> u64 {
        self.header.raw_len
    }

    /// The compressed body's length.
    pub fn packed_len(&self) -> u64 {
        self.header.packed_len
    }

    /// The digest of the decompressed body, as the header names it.
    pub fn content_digest(&self) -> Digest {
        self.header.content
    }

    /// What each signature signs: a BLAKE3 (derive-key [`SIGNED_CONTEXT`]) of
    /// the header.
    pub fn signed_message(&self) -> Digest {
        signed_message(self.header_bytes)
    }

    /// The keys that signed the file (their signatures not yet verified),
    /// ascending.
    pub fn signers(&self) -> Vec<PublicKey> {
        self.signatures.iter().map(|(key, _)| *key).collect()
    }

    /// Checks that `key` signed the file.
    ///
    /// # Errors
    /// [`ShipError::NotSigned`] when `key` has no signature here,
    /// [`ShipError::BadSignature`] when its signature does not verify.
    pub fn check_signed_by(&self, key: &PublicKey) -> Result<(), ShipError> {
        let (_, signature) = self
            .signatures
            .iter()
            .find(|(signer, _)| signer == key)
            .ok_or(ShipError::NotSigned { key: *key })?;
        if key.verifies_digest(&self.signed_message(), signature) {
            Ok(())
        } else {
            Err(ShipError::BadSignature { key: *key })
        }
    }

    /// The file with a signature by `key` added (or replaced), keys kept
    /// ascending: the same file and key give the same bytes.
    ///
    /// # Errors
    /// [`ShipError::TooManySignatures`].
    pub fn signed_with(&self, key: &SigningKey) -> Result<Vec<u8>, ShipError> {
        let public = key.public_key();
        let mut signatures: Vec<(PublicKey, [u8; 64])> = self
            .signatures
            .iter()
            .filter(|(signer, _)| *signer != public)
            .copied()
            .collect();
        if signatures.len() >= MAX_SIGNATURES {
            return Err(ShipError::TooManySignatures {
                max: MAX_SIGNATURES,
            });
        }
        signatures.push((public, key.sign_digest(&self.signed_message())));
        signatures.sort_by_key(|a| a.0);
        let mut out = Vec::with_capacity(
            HEADER_LEN + self.packed.len() + TRAILER_HEADER_LEN + signatures.len() * SIGNATURE_LEN,
        );
        out.extend_from_slice(self.header_bytes);
        out.extend_from_slice(self.packed);
        write_trailer(&mut out, &signatures);
        Ok(out)
    }
}

/// The message a signature signs, over `header` (72 bytes).
fn signed_message(header: &[u8]) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key(SIGNED_CONTEXT);
    hasher.update(header);
    Digest(*hasher.finalize().as_bytes())
}

/// Appends the trailer of `signatures` (nothing when there are none).
pub(crate) fn write_trailer(out: &mut Vec<u8>, signatures: &[(PublicKey, [u8; 64])]) {
    if signatures.is_empty() {
        return;
    }
    out.extend_from_slice(TRAILER_MAGIC);
    out.extend_from_slice(&(signatures.len() as u32).to_le_bytes());
    out.extend_from_slice(&0u32.to_le_bytes());
    for (key, signature) in signatures {
        out.extend_from_slice(key.as_bytes());
        out.extend_from_slice(signature);
    }
}

/// The signatures of `trailer` (the bytes after the body, which starts the
/// file's `offset`th byte): none when it is empty.
fn parse_trailer(trailer: &[u8], offset: u64) -> Result<Vec<(PublicKey, [u8; 64])>, ShipError> {
    if trailer.is_empty() {
        return Ok(Vec::new());
    }
    let bad = |why: String| ShipError::BadTrailer(why);
    if trailer.len() < TRAILER_HEADER_LEN || &trailer[..8] != TRAILER_MAGIC {
        return Err(ShipError::Length {
            found: offset + trailer.len() as u64,
            expected: offset,
        });
    }
    let count = u32_at(trailer, 8) as usize;
    if count == 0 || count > MAX_SIGNATURES {
        return Err(bad(format!(
            "{count} signatures, expected 1 to {MAX_SIGNATURES}"
        )));
    }
    if u32_at(trailer, 12) != 0 {
        return Err(bad("its reserved word is not 0".into()));
    }
    let expected = TRAILER_HEADER_LEN + count * SIGNATURE_LEN;
    if trailer.len() != expected {
        return Err(ShipError::Length {
            found: offset + trailer.len() as u64,
            expected: offset + expected as u64,
        });
    }
    let mut signatures: Vec<(PublicKey, [u8; 64])> = Vec::with_capacity(count);
    for chunk in trailer[TRAILER_HEADER_LEN..].chunks_exact(SIGNATURE_LEN) {
        let mut key = [0u8; 32];
        key.copy_from_slice(&chunk[..32]);
        let mut signature = [0u8; 64];
        signature.copy_from_slice(&chunk[32..]);
        let key = PublicKey::from_bytes(key)
            .map_err(|_| bad("a signer is not an ed25519 public key".into()))?;
        if signatures.last().is_some_and(|(last, _)| *last >= key) {
            return Err(bad("signers are not strictly ascending".into()));
        }
        signatures.push((key, signature));
    }
    Ok(signatures)
}

fn bad(field: &'static str, found: u64, expected: String) -> ShipError {
    ShipError::BadHeader {
        field,
        found,
        expected,
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}
