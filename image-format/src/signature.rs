//! Signed images: who produced an image, checked with public keys.
//!
//! Checksums catch corruption, not origin: anyone can write a well-formed
//! image with valid checksums. A signature by an ed25519 key says that the
//! holder of the secret key produced the image; a reader that trusts a set
//! of public keys ([`TrustedKeys`]) accepts an image only if one of them
//! signed it ([`Image::verify_signature`]). Readers need no secret, so a
//! reader cannot forge what it accepts (unlike a shared HMAC key).
//!
//! # What a signature covers
//!
//! Each signature is ed25519 over the 32-byte *signed digest*: BLAKE3 in
//! derive-key mode ([`SIGNED_DIGEST_CONTEXT`]) over
//!
//! 1. the header's first 224 bytes (every field but the header's own
//!    checksum) with the signature trailer length (bytes 100..104) read as
//!    zero, that is the header of the image as it was before it was signed;
//! 2. the index bytes (`index offset .. index offset + index length`).
//!
//! The header holds the index checksum, the region table and the BLAKE3 of
//! the whole body (index, padding and payloads); the index holds every
//! entry record, and each artifact record holds the BLAKE3 of its payload.
//! So a valid signature authenticates every field of the header, every
//! entry (owner, key, name, worlds, deps, artifacts) and, through the
//! digests in the index, every payload: a reader checks a payload's BLAKE3
//! before returning its bytes (on first access at
//! [`Verification::Structural`], at open
//! at [`Verification::Full`], which also checks
//! the body checksum). Checking a signature costs hashing the header and
//! the index, not the payloads, plus one ed25519 verification per
//! signature tried.
//!
//! The signed digest does not cover the trailer itself, so signatures can
//! be added one at a time ([`sign_image`]); they are kept sorted by public
//! key, and ed25519 signatures are deterministic, so signing the same image
//! with the same keys gives the same bytes whatever the order.
//!
//! # The signature trailer
//!
//! After the body, when header bytes 100..104 (little-endian) are not zero:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 0 | 8 | magic `KILNSIG\0` |
//! | 8 | 4 | signature count `n`, 1 ≤ n ≤ [`MAX_SIGNATURES`] (u32 LE) |
//! | 12 | 4 | reserved: zero |
//! | 16 + 96 i | 32 | public key of signature `i` (strictly ascending) |
//! | 48 + 96 i | 64 | ed25519 signature `i` of the signed digest |
//!
//! The header's length field must be exactly `16 + 96 n` and at most
//! [`MAX_TRAILER_LEN`]; it is checked with the rest of the header, before
//! any byte of the trailer is read, and the file must end right after the
//! trailer. A trailer that breaks any rule refuses the image
//! ([`ImageError::SignatureTrailer`]), whether or not the reader checks
//! signatures.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::str::FromStr;

use ed25519_dalek::Signer;

use crate::header::{self, HEADER_LEN, offsets};
use crate::{Digest, Image, ImageError, Verification};

/// The most signatures one image may carry.
pub const MAX_SIGNATURES: usize = 16;
/// Magic bytes the signature trailer starts with.
pub const TRAILER_MAGIC: [u8; 8] = *b"KILNSIG\0";
/// Length of the trailer's fixed part (magic, count, reserved).
pub const TRAILER_HEAD_LEN: usize = 16;
/// Length of one signature record (public key, signature).
pub const RECORD_LEN: usize = 32 + 64;
/// The longest signature trailer: [`MAX_SIGNATURES`] records.
pub const MAX_TRAILER_LEN: usize = TRAILER_HEAD_LEN + MAX_SIGNATURES * RECORD_LEN;
/// BLAKE3 derive-key context of the signed digest.
pub const SIGNED_DIGEST_CONTEXT: &str = "kiln-image 3 signed digest (header and index)";

/// An ed25519 public key: who signed an image.
///
/// Written as 64 lowercase hex digits ([`fmt::Display`], [`FromStr`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKey([u8; 32]);

impl PublicKey {
    /// The key of these 32 bytes.
    ///
    /// # Errors
    /// [`ImageError::InvalidKey`] when the bytes are not a point of the
    /// curve (no signature could ever verify with them).
    pub fn from_bytes(bytes: [u8; 32]) -> Result<PublicKey, ImageError> {
        ed25519_dalek::VerifyingKey::from_bytes(&bytes).map_err(|_| {
            ImageError::InvalidKey("32 bytes that are not an ed25519 public key".into())
        })?;
        Ok(PublicKey(bytes))
    }

    /// The key's 32 bytes.
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// The key as 64 lowercase hex digits.
    pub fn to_hex(&self) -> String {
        Digest(self.0).to_hex()
    }

    /// Whether `signature` is this key's ed25519 signature of `message`
    /// (strict verification: malleable signatures and weak keys refused).
    fn verifies(&self, message: &[u8; 32], signature: &[u8; 64]) -> bool {
        let Ok(key) = ed25519_dalek::VerifyingKey::from_bytes(&self.0) else {
            return false;
        };
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        key.verify_strict(message, &signature).is_ok()
    }
}

impl fmt::Display for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PublicKey({self})")
    }
}

impl FromStr for PublicKey {
    type Err = ImageError;

    /// Parses 64 hex digits (surrounding white space ignored).
    fn from_str(text: &str) -> Result<PublicKey, ImageError> {
        let digest = Digest::from_hex(text.trim()).map_err(|_| {
            ImageError::InvalidKey(format!(
                "{:?} is not a public key: expected 64 hex digits",
                text.chars().take(80).collect::<String>()
            ))
        })?;
        PublicKey::from_bytes(digest.0)
    }
}

/// An ed25519 secret key, to sign images with.
///
/// Its `Debug` shows the public key only; the secret is never formatted.
/// Key files ([`SigningKey::read_file`], [`SigningKey::write_file`]) hold
/// the 32-byte secret as 64 hex digits and a newline.
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// A new random key, from the operating system's random source.
    ///
    /// # Errors
    /// [`ImageError::Random`] when the operating system gives no random
    /// bytes.
    pub fn generate() -> Result<SigningKey, ImageError> {
        let mut secret = [0u8; 32];
        getrandom::getrandom(&mut secret).map_err(|error| ImageError::Random(error.to_string()))?;
        Ok(SigningKey::from_secret_bytes(secret))
    }

    /// The key with this 32-byte secret.
    pub fn from_secret_bytes(secret: [u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(&secret))
    }

    /// The public key that verifies this key's signatures.
    pub fn public_key(&self) -> PublicKey {
        PublicKey(self.0.verifying_key().to_bytes())
    }

    /// Reads a secret key file: 64 hex digits (white space around them
    /// ignored).
    ///
    /// # Errors
    /// [`ImageError::Io`] when the file cannot be read,
    /// [`ImageError::InvalidKey`] when it does not hold a secret key (the
    /// message never quotes the file's content).
    pub fn read_file(path: &Path) -> Result<SigningKey, ImageError> {
        let io = |source| ImageError::Io {
            action: "read the signing key",
            path: path.to_owned(),
            source,
        };
        let text = read_small_text(path, 1024).map_err(|error| match error {
            SmallText::Io(source) => io(source),
            SmallText::TooLarge => ImageError::InvalidKey(format!(
                "{} is not a kiln signing key file (a regular file of 64 hex digits)",
                path.display()
            )),
        })?;
        let digest = Digest::from_hex(text.trim()).map_err(|_| {
            ImageError::InvalidKey(format!(
                "{} does not hold a kiln signing key (64 hex digits; `kiln keygen` writes one)",
                path.display()
            ))
        })?;
        Ok(SigningKey::from_secret_bytes(digest.0))
    }

    /// Writes the secret to a new file at `path`, readable and writable by
    /// its owner only (mode 0600 on Unix, given at creation). An existing
    /// file is never overwritten.
    ///
    /// # Errors
    /// [`ImageError::Io`] when the file exists or cannot be written.
    pub fn write_file(&self, path: &Path) -> Result<(), ImageError> {
        use std::io::Write;
        let io = |action| {
            move |source| ImageError::Io {
                action,
                path: path.to_owned(),
                source,
            }
        };
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let mut file = options.open(path).map_err(io("create the signing key"))?;
        let text = format!("{}\n", Digest(self.0.to_bytes()).to_hex());
        file.write_all(text.as_bytes())
            .and_then(|()| file.sync_all())
            .map_err(io("write the signing key"))
    }

    fn sign(&self, digest: &Digest) -> [u8; 64] {
        self.0.sign(&digest.0).to_bytes()
    }
}

impl fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SigningKey(public {})", self.public_key())
    }
}

/// The public keys a reader accepts signatures of. Several, so that keys
/// can be rotated: trust the new key, re-sign or rebuild, then drop the
/// old one. Each key is decoded (a curve point decompressed) once, when it
/// is added, not at every verification.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedKeys(BTreeMap<PublicKey, ed25519_dalek::VerifyingKey>);

impl TrustedKeys {
    /// The set of `keys` (a key that is no curve point, which no signature
    /// could verify with, is left out).
    pub fn new(keys: impl IntoIterator<Item = PublicKey>) -> TrustedKeys {
        let mut trusted = TrustedKeys::default();
        keys.into_iter().for_each(|key| trusted.insert(key));
        trusted
    }

    /// The decoded key of `key`, if it is trusted.
    fn decoded(&self, key: &PublicKey) -> Option<&ed25519_dalek::VerifyingKey> {
        self.0.get(key)
    }

    /// Parses a trusted-keys text: one public key (64 hex digits) per
    /// line; blank lines and lines starting with `#` are ignored, and so is
    /// anything after the key on its line (a comment naming it).
    ///
    /// # Errors
    /// [`ImageError::InvalidKey`] naming the first line that is not a key.
    pub fn parse(text: &str) -> Result<TrustedKeys, ImageError> {
        let mut keys = TrustedKeys::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let word = line.split_whitespace().next().unwrap_or_default();
            let key = word
                .parse::<PublicKey>()
                .map_err(|error| ImageError::InvalidKey(format!("line {}: {error}", number + 1)))?;
            keys.insert(key);
        }
        Ok(keys)
    }

    /// Reads a trusted-keys file (see [`TrustedKeys::parse`]; a `.pub`
    /// file written by `kiln keygen` is one).
    ///
    /// # Errors
    /// [`ImageError::Io`] when the file cannot be read, or is larger than
    /// 1 MiB; [`ImageError::InvalidKey`] naming the file and the first line
    /// that is not a key.
    pub fn read_file(path: &Path) -> Result<TrustedKeys, ImageError> {
        let io = |source| ImageError::Io {
            action: "read the trusted keys",
            path: path.to_owned(),
            source,
        };
        let text = read_small_text(path, 1 << 20).map_err(|error| match error {
            SmallText::Io(source) => io(source),
            SmallText::TooLarge => io(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a regular file of at most 1 MiB, so not a trusted-keys file",
            )),
        })?;
        TrustedKeys::parse(&text)
            .map_err(|error| ImageError::InvalidKey(format!("{}: {error}", path.display())))
    }

    /// Adds `key` (unless it is no curve point: see [`TrustedKeys::new`]).
    pub fn insert(&mut self, key: PublicKey) {
        if let Ok(decoded) = ed25519_dalek::VerifyingKey::from_bytes(&key.0) {
            self.0.insert(key, decoded);
        }
    }

    /// Adds every key of `other`.
    pub fn extend(&mut self, other: TrustedKeys) {
        self.0.extend(other.0);
    }

    /// Whether `key` is trusted.
    pub fn contains(&self, key: &PublicKey) -> bool {
        self.0.contains_key(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether no key is trusted (then nothing signed is accepted).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The keys, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &PublicKey> {
        self.0.keys()
    }
}

/// One signature of an image, as read from its trailer (not yet checked).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: PublicKey,
    pub(crate) signature: [u8; 64],
}

/// What [`Image::check_signatures`] found of one signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureCheck {
    /// Who claims to have signed.
    pub key: PublicKey,
    /// Whether the signature verifies: the key's holder signed exactly this
    /// header and index.
    pub valid: bool,
    /// Whether the key is among the trusted keys given.
    pub trusted: bool,
}

/// Checks the trailer length recorded in a header: 0, or `16 + 96 n` with
/// `1 <= n <= MAX_SIGNATURES`.
pub(crate) fn check_trailer_len(len: u32) -> Result<(), ImageError> {
    let len = len as usize;
    if len == 0 {
        return Ok(());
    }
    let records = len.checked_sub(TRAILER_HEAD_LEN).unwrap_or(usize::MAX);
    if len > MAX_TRAILER_LEN || records == 0 || !records.is_multiple_of(RECORD_LEN) {
        return Err(ImageError::SignatureTrailer(format!(
            "the header gives it {len} bytes: a trailer is {TRAILER_HEAD_LEN} + {RECORD_LEN} \
             bytes per signature, 1 to {MAX_SIGNATURES} signatures"
        )));
    }
    Ok(())
}

/// Parses a trailer whose length passed [`check_trailer_len`].
pub(crate) fn parse_trailer(bytes: &[u8]) -> Result<Vec<Record>, ImageError> {
    let bad = |what: String| Err(ImageError::SignatureTrailer(what));
    if bytes.is_empty() {
        return Ok(Vec::new());
    }
    let Some((head, records)) = bytes.split_first_chunk::<TRAILER_HEAD_LEN>() else {
        return bad(format!(
            "{} bytes, shorter than its fixed part",
            bytes.len()
        ));
    };
    if head[..8] != TRAILER_MAGIC {
        return bad(format!(
            "starts with {:02x?}, expected {TRAILER_MAGIC:02x?}",
            &head[..8]
        ));
    }
    let count = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    if head[12..] != [0; 4] {
        return bad(format!(
            "reserved bytes are {:02x?}, expected zeros",
            &head[12..]
        ));
    }
    if count == 0 || count > MAX_SIGNATURES || records.len() != count * RECORD_LEN {
        return bad(format!(
            "counts {count} signatures in {} bytes of records",
            records.len()
        ));
    }
    let mut parsed: Vec<Record> = Vec::with_capacity(count);
    for record in records.chunks_exact(RECORD_LEN) {
        let mut key = [0u8; 32];
        let mut signature = [0u8; 64];
        key.copy_from_slice(&record[..32]);
        signature.copy_from_slice(&record[32..]);
        let key = PublicKey(key);
        if parsed.last().is_some_and(|last| last.key >= key) {
            return bad(format!(
                "public key {key} is not after the one before it (keys ascend, each once)"
            ));
        }
        parsed.push(Record { key, signature });
    }
    Ok(parsed)
}

/// Encodes `records` (sorted, distinct, 1 to [`MAX_SIGNATURES`]).
fn encode_trailer(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(TRAILER_HEAD_LEN + records.len() * RECORD_LEN);
    out.extend_from_slice(&TRAILER_MAGIC);
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    for record in records {
        out.extend_from_slice(&record.key.0);
        out.extend_from_slice(&record.signature);
    }
    out
}

/// The signed digest of an image whose first [`HEADER_LEN`] bytes are
/// `header` and whose index is `index` (see the module docs).
pub(crate) fn signed_digest(header: &[u8; HEADER_LEN], index: &[u8]) -> Digest {
    let mut unsigned = [0u8; offsets::HEADER_CHECKSUM];
    unsigned.copy_from_slice(&header[..offsets::HEADER_CHECKSUM]);
    unsigned[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4].fill(0);
    let mut hasher = blake3::Hasher::new_derive_key(SIGNED_DIGEST_CONTEXT);
    hasher.update(&unsigned);
    hasher.update(index);
    Digest(*hasher.finalize().as_bytes())
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
/// Whatever opening the image reports; [`ImageError::TooLarge`] when it
/// carries [`MAX_SIGNATURES`] signatures already.
pub fn sign_image(image: &[u8], key: &SigningKey) -> Result<Vec<u8>, ImageError> {
    let opened = Image::from_bytes(image, Verification::Structural)?;
    let digest = opened.signed_digest();
    let mut records: Vec<Record> = opened.signatures.clone();
    let public = key.public_key();
    records.retain(|record| record.key != public);
    if records.len() >= MAX_SIGNATURES {
        return Err(ImageError::TooLarge {
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
    let body_end =
        usize::try_from(opened.header().body_end()).map_err(|_| ImageError::TooLarge {
            what: "the image",
            size: opened.header().body_end(),
            limit: usize::MAX as u64,
        })?;
    drop(opened);
    let trailer = encode_trailer(&records);
    let mut out = Vec::with_capacity(body_end + trailer.len());
    out.extend_from_slice(&image[..body_end]);
    out.extend_from_slice(&trailer);
    out[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4]
        .copy_from_slice(&(trailer.len() as u32).to_le_bytes());
    header::reseal(&mut out);
    Ok(out)
}

/// `image` without its signatures: the bytes an unsigned image has (its
/// signed digest unchanged).
///
/// # Errors
/// Whatever opening the image with [`Verification::Structural`] reports.
pub fn strip_signatures(image: &[u8]) -> Result<Vec<u8>, ImageError> {
    let opened = Image::from_bytes(image, Verification::Structural)?;
    let body_end = opened.header().body_end() as usize;
    drop(opened);
    let mut out = image[..body_end].to_vec();
    out[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4].fill(0);
    header::reseal(&mut out);
    Ok(out)
}

impl Image {
    /// The keys that claim to have signed this image, in ascending order
    /// (read from its trailer at open; not checked: see
    /// [`Image::verify_signature`]). Empty for an unsigned image.
    pub fn signers(&self) -> Vec<PublicKey> {
        self.signatures.iter().map(|record| record.key).collect()
    }

    /// Whether the image carries signatures (checked or not).
    pub fn is_signed(&self) -> bool {
        !self.signatures.is_empty()
    }

    /// The digest every signature of this image signs (see the module
    /// docs): computed on the first call, from the header and the index,
    /// and remembered.
    pub fn signed_digest(&self) -> Digest {
        *self.signed_digest.get_or_init(|| {
            let mut header = [0u8; HEADER_LEN];
            header.copy_from_slice(&self.storage.head()[..HEADER_LEN]);
            signed_digest(&header, self.index_bytes())
        })
    }

    /// The key among `trusted` whose signature of this image verifies.
    ///
    /// A valid signature authenticates the header and the index, and with
    /// them every entry and the BLAKE3 of every payload, which a reader
    /// checks before returning a payload's bytes (see the module docs).
    /// Costs hashing the header and index once per image, and one ed25519
    /// verification per trusted signature tried.
    ///
    /// # Errors
    /// [`ImageError::Unsigned`] when the image carries no signature,
    /// [`ImageError::UntrustedSigner`] when none of its signers is trusted,
    /// [`ImageError::BadSignature`] when every trusted signer's signature
    /// fails (the image changed after it was signed, or the signature was
    /// forged).
    pub fn verify_signature(&self, trusted: &TrustedKeys) -> Result<PublicKey, ImageError> {
        if self.signatures.is_empty() {
            return Err(ImageError::Unsigned);
        }
        let mut failed = None;
        for record in &self.signatures {
            let Some(key) = trusted.decoded(&record.key) else {
                continue;
            };
            let signature = ed25519_dalek::Signature::from_bytes(&record.signature);
            if key
                .verify_strict(&self.signed_digest().0, &signature)
                .is_ok()
            {
                return Ok(record.key);
            }
            failed.get_or_insert(record.key);
        }
        Err(match failed {
            Some(key) => ImageError::BadSignature { key },
            None => ImageError::UntrustedSigner {
                signers: self.signers(),
            },
        })
    }

    /// Every signature of the image, each checked, and whether its key is
    /// in `trusted` (for tools: `kiln verify`, `kiln inspect`).
    pub fn check_signatures(&self, trusted: Option<&TrustedKeys>) -> Vec<SignatureCheck> {
        self.signatures
            .iter()
            .map(|record| SignatureCheck {
                key: record.key,
                valid: record
                    .key
                    .verifies(&self.signed_digest().0, &record.signature),
                trusted: trusted.is_some_and(|keys| keys.contains(&record.key)),
            })
            .collect()
    }
}

/// Why [`read_small_text`] read nothing.
enum SmallText {
    /// The file could not be opened or read, or is not UTF-8.
    Io(std::io::Error),
    /// Not a regular file, or longer than the limit.
    TooLarge,
}

/// The text of the regular file at `path`, of at most `limit` bytes. Key
/// paths come from the environment, so they are untrusted: a FIFO (whose
/// open would block) or a device such as `/dev/zero` (whose size reads as 0
/// and whose reads never end) is refused before it is opened, and the read
/// stops one byte past `limit` whatever the file does meanwhile.
fn read_small_text(path: &Path, limit: u64) -> Result<String, SmallText> {
    use std::io::Read;
    let metadata = std::fs::metadata(path).map_err(SmallText::Io)?;
    if !metadata.is_file() || metadata.len() > limit {
        return Err(SmallText::TooLarge);
    }
    let file = std::fs::File::open(path).map_err(SmallText::Io)?;
    let mut text = String::new();
    file.take(limit + 1)
        .read_to_string(&mut text)
        .map_err(SmallText::Io)?;
    if text.len() as u64 > limit {
        return Err(SmallText::TooLarge);
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Artifact, ArtifactKind, EntryData, ImageMeta, ImageWriter};

    fn image() -> Vec<u8> {
        let mut writer = ImageWriter::new(ImageMeta::new("signed", "1"));
        writer.push(EntryData {
            owner: Digest::of(b"owner"),
            owner_label: "owner".into(),
            key: Digest::of(b"key"),
            name: "entry".into(),
            min_world: 1,
            max_world: u64::MAX,
            deps: vec![],
            artifacts: vec![Artifact {
                kind: ArtifactKind::Ptx,
                entry_points: vec!["f".into()],
                bytes: b"code".to_vec(),
            }],
        });
        writer.to_bytes().expect("valid entry")
    }

    #[test]
    fn trailer_lengths_other_than_whole_records_are_refused() {
        assert!(check_trailer_len(0).is_ok());
        for n in 1..=MAX_SIGNATURES {
            assert!(check_trailer_len((TRAILER_HEAD_LEN + n * RECORD_LEN) as u32).is_ok());
        }
        for bad in [
            1,
            TRAILER_HEAD_LEN,
            TRAILER_HEAD_LEN + RECORD_LEN - 1,
            TRAILER_HEAD_LEN + RECORD_LEN + 1,
            MAX_TRAILER_LEN + RECORD_LEN,
            u32::MAX as usize,
        ] {
            let error = check_trailer_len(bad as u32).expect_err("refused");
            assert_eq!(error.check(), "signature.trailer", "{bad}: {error}");
        }
    }

    #[test]
    fn signing_twice_or_in_another_order_gives_the_same_bytes() -> Result<(), ImageError> {
        let (a, b) = (
            SigningKey::from_secret_bytes([1; 32]),
            SigningKey::from_secret_bytes([2; 32]),
        );
        let unsigned = image();
        let ab = sign_image(&sign_image(&unsigned, &a)?, &b)?;
        let ba = sign_image(&sign_image(&unsigned, &b)?, &a)?;
        assert_eq!(ab, ba);
        assert_eq!(sign_image(&ab, &a)?, ab, "re-signing replaces the record");
        assert_eq!(strip_signatures(&ab)?, unsigned);
        let opened = Image::from_bytes(&ab, Verification::Full)?;
        let mut keys = vec![a.public_key(), b.public_key()];
        keys.sort();
        assert_eq!(opened.signers(), keys);
        Ok(())
    }

    #[test]
    fn keys_round_trip_through_hex_and_never_show_the_secret() -> Result<(), ImageError> {
        let key = SigningKey::from_secret_bytes([9; 32]);
        let public = key.public_key();
        assert_eq!(public.to_hex().parse::<PublicKey>()?, public);
        let shown = format!("{key:?}");
        assert!(shown.contains(&public.to_hex()), "{shown}");
        assert!(!shown.contains(&Digest([9; 32]).to_hex()), "{shown}");
        let error = "zz".parse::<PublicKey>().expect_err("not hex");
        assert_eq!(error.check(), "argument.key");
        let trusted = TrustedKeys::parse(&format!(
            "# release keys\n\n{public}  build farm\n{public}\n"
        ))?;
        assert_eq!(trusted.iter().collect::<Vec<_>>(), [&public]);
        let error = TrustedKeys::parse(&format!("{public}\nnot a key\n")).expect_err("line 2");
        assert!(error.to_string().contains("line 2"), "{error}");
        Ok(())
    }

    #[test]
    fn key_files_that_are_devices_or_fifos_are_refused_before_reading() {
        let zero = Path::new("/dev/zero");
        assert!(matches!(
            TrustedKeys::read_file(zero),
            Err(ImageError::Io { .. })
        ));
        assert!(matches!(
            SigningKey::read_file(zero),
            Err(ImageError::InvalidKey(_))
        ));
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("keys");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        // Opening a FIFO for reading would block with no writer: refused
        // before the open, so this returns.
        assert!(TrustedKeys::read_file(&fifo).is_err());
        assert!(SigningKey::read_file(&fifo).is_err());
    }
}
