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
//! # Batch signatures
//!
//! One ed25519 verification costs about as much as a whole remote-tier hit
//! on loopback, so a writer that stores many entries at once can sign them
//! together: [`sign_images_batch`] builds a Merkle tree over the images'
//! signed digests and signs its root once; each image carries, in its own
//! trailer, its place in the batch and the sibling digests on the way to
//! the root (its *path*). A reader recomputes the root from the image's
//! signed digest and its path (a few BLAKE3 hashes) and checks the one
//! signature of the root; [`TrustedKeys`] remembers the roots it verified
//! (see *The memo of verified roots* below), so the other members of a
//! batch cost the hashes alone.
//!
//! Hashes, each BLAKE3 in derive-key mode, every context distinct from the
//! others and from [`SIGNED_DIGEST_CONTEXT`] (a leaf, an inner node, a
//! root message and a direct signed digest can never stand for one
//! another):
//!
//! - leaf `i` = derive-key([`BATCH_LEAF_CONTEXT`], signed digest of image `i`);
//! - node = derive-key([`BATCH_NODE_CONTEXT`], left ‖ right);
//! - a level of `w` nodes gives the level above it `ceil(w / 2)` nodes:
//!   node `j` above is the node of `2j` and `2j + 1`, and when `w` is odd
//!   its last node is **promoted unchanged** (no hash); the root is the one
//!   node left after `depth = ceil(log2(size))` levels;
//! - each record signs the *root message* =
//!   derive-key([`BATCH_ROOT_CONTEXT`], root ‖ size as u32 LE), so the
//!   batch size is signed too.
//!
//! A member's path holds one 32-byte digest per level, leaf level first:
//! its sibling at that level, or 32 zero bytes where the node on its way
//! is promoted (then any other value refuses the trailer, so each member
//! has exactly one valid trailer per signer, unless the same image appears
//! twice in one batch). A batch of one image is a
//! direct signature ([`sign_image`]'s bytes).
//!
//! # The memo of verified roots
//!
//! [`TrustedKeys`] (and every clone of it: one memo per process when the
//! set is cloned from one place) remembers the pairs (root message, public
//! key) whose batch signature verified, at most [`MEMO_CAPACITY`] of them
//! (when full it is emptied, so memory stays bounded whatever the
//! input; a root forgotten is verified again). A batch member whose
//! recomputed root message and trusted signer are in the memo is accepted
//! without an ed25519 verification. This is sound because what a verified
//! signature proves depends only on the message and the key: "the holder
//! of this key signed this root message". The root message is a hash of
//! the root and the batch size, and the root a hash of every leaf, so the
//! pair names exactly the set of signed digests the key's holder vouched
//! for; a member whose own signed digest and path lead to that root
//! message is one of them, whatever signature bytes its own trailer
//! carries (they are not needed to prove what is already proven). Only
//! successful verifications are remembered, only batch roots (a direct
//! signature signs one image, which nothing else could share), and whether
//! a signer is trusted is asked of the set at every check, never of the
//! memo: a clone that does not trust a key does not accept what the memo
//! says that key signed. [`TrustedKeys::verifications`] counts the ed25519
//! verifications performed through a set and its clones.
//!
//! # The signature trailer
//!
//! After the body, when header bytes 100..104 (little-endian) are not zero:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 0 | 8 | magic `KILNSIG\0` |
//! | 8 | 4 | signature count `n`, 1 ≤ n ≤ [`MAX_SIGNATURES`] (u32 LE) |
//! | 12 | 4 | kind (u32 LE): 0 = direct ([`KIND_DIRECT`]), 1 = batch ([`KIND_BATCH`]) |
//!
//! A direct trailer (kind 0) continues with the records:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 16 + 96 i | 32 | public key of signature `i` (strictly ascending) |
//! | 48 + 96 i | 64 | ed25519 signature `i` of the signed digest |
//!
//! A batch trailer (kind 1), with `depth = ceil(log2(size))`:
//!
//! | offset | size | field |
//! | --: | --: | --- |
//! | 16 | 4 | leaf index (u32 LE), less than the size |
//! | 20 | 4 | batch size (u32 LE), 2 ≤ size ≤ [`MAX_BATCH`] |
//! | 24 + 32 l | 32 | the path's digest at level `l`, for `l` < depth |
//! | 24 + 32 depth + 96 i | 32 | public key of signature `i` (strictly ascending) |
//! | 56 + 32 depth + 96 i | 64 | ed25519 signature `i` of the root message |
//!
//! The header's length field must be `16 + 96 n` (direct) or
//! `24 + 32 depth + 96 n` with `1 ≤ depth ≤ 16` (batch: the two forms
//! never meet, being 16 and 24 modulo 32), and at most
//! [`MAX_TRAILER_LEN`]; it is checked with the rest of the header, before
//! any byte of the trailer is read, and the file must end right after the
//! trailer. Reading the trailer then checks that its length is exactly the
//! one its kind, count and size give. A trailer that breaks any rule
//! refuses the image ([`ImageError::SignatureTrailer`]), whether or not
//! the reader checks signatures.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::path::Path;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ed25519_dalek::Signer;

use crate::header::{self, HEADER_LEN, offsets};
use crate::{Digest, Image, ImageError, Verification};

/// The most signatures one image may carry.
pub const MAX_SIGNATURES: usize = 16;
/// Magic bytes the signature trailer starts with.
pub const TRAILER_MAGIC: [u8; 8] = *b"KILNSIG\0";
/// Length of the trailer's fixed part (magic, count, kind).
pub const TRAILER_HEAD_LEN: usize = 16;
/// Length of one signature record (public key, signature).
pub const RECORD_LEN: usize = 32 + 64;
/// Trailer kind (bytes 12..16): signatures of the image's signed digest.
pub const KIND_DIRECT: u32 = 0;
/// Trailer kind (bytes 12..16): signatures of a batch's Merkle root.
pub const KIND_BATCH: u32 = 1;
/// The most images one batch signature may cover.
pub const MAX_BATCH: usize = 1 << MAX_BATCH_DEPTH;
/// The deepest Merkle path: `log2(MAX_BATCH)` digests.
pub const MAX_BATCH_DEPTH: usize = 16;
/// Length of a batch trailer's fields after the fixed part (leaf index,
/// batch size), before the path.
pub const BATCH_FIELDS_LEN: usize = 8;
/// Length of one digest of a Merkle path.
pub const PATH_DIGEST_LEN: usize = 32;
/// The longest direct trailer: [`MAX_SIGNATURES`] records.
pub const MAX_DIRECT_TRAILER_LEN: usize = TRAILER_HEAD_LEN + MAX_SIGNATURES * RECORD_LEN;
/// The longest signature trailer: a batch trailer with a path of
/// [`MAX_BATCH_DEPTH`] digests and [`MAX_SIGNATURES`] records.
pub const MAX_TRAILER_LEN: usize = TRAILER_HEAD_LEN
    + BATCH_FIELDS_LEN
    + MAX_BATCH_DEPTH * PATH_DIGEST_LEN
    + MAX_SIGNATURES * RECORD_LEN;
/// BLAKE3 derive-key context of the signed digest.
pub const SIGNED_DIGEST_CONTEXT: &str = "kiln-image 3 signed digest (header and index)";
/// BLAKE3 derive-key context of a batch's leaf (over a signed digest).
pub const BATCH_LEAF_CONTEXT: &str = "kiln-image 3 batch leaf";
/// BLAKE3 derive-key context of a batch's inner node (over left ‖ right).
pub const BATCH_NODE_CONTEXT: &str = "kiln-image 3 batch node";
/// BLAKE3 derive-key context of the message a batch signature signs (over
/// root ‖ size as u32 LE).
pub const BATCH_ROOT_CONTEXT: &str = "kiln-image 3 batch root";
/// The most (root message, key) pairs a [`TrustedKeys`] memo holds.
pub const MEMO_CAPACITY: usize = 4096;

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

    /// Whether `signature` is this key's ed25519 signature of the 32-byte
    /// `message` (strict verification: malleable signatures and weak keys
    /// refused). For other signed formats (a shipped image's header digest);
    /// images use [`Image::verify_signature`].
    pub fn verifies_digest(&self, message: &Digest, signature: &[u8; 64]) -> bool {
        self.verifies(&message.0, signature)
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

    /// This key's ed25519 signature of the 32-byte `message` (deterministic:
    /// the same key and message give the same signature). For other signed
    /// formats (a shipped image's header digest); images are signed with
    /// [`sign_image`].
    pub fn sign_digest(&self, message: &Digest) -> [u8; 64] {
        self.sign(message)
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
///
/// The set also holds the memo of verified batch roots (see the module
/// docs), shared by its clones, and the count of ed25519 verifications
/// performed through it ([`TrustedKeys::verifications`]). Equality
/// compares the keys alone.
#[derive(Clone, Default)]
pub struct TrustedKeys {
    keys: BTreeMap<PublicKey, ed25519_dalek::VerifyingKey>,
    memo: Arc<Memo>,
}

/// The verified (root message, key) pairs and the verification count of a
/// [`TrustedKeys`] and its clones.
#[derive(Default)]
struct Memo {
    roots: Mutex<HashSet<([u8; 32], PublicKey)>>,
    verifications: AtomicU64,
}

impl PartialEq for TrustedKeys {
    fn eq(&self, other: &TrustedKeys) -> bool {
        self.keys == other.keys
    }
}

impl Eq for TrustedKeys {}

impl fmt::Debug for TrustedKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrustedKeys")
            .field("keys", &self.keys.keys().collect::<Vec<_>>())
            .field("verified_roots", &self.verified_roots())
            .field("verifications", &self.verifications())
            .finish()
    }
}

impl TrustedKeys {
    /// The set of `keys` (a key that is no curve point, which no signature
    /// could verify with, is left out), with a memo of its own.
    pub fn new(keys: impl IntoIterator<Item = PublicKey>) -> TrustedKeys {
        let mut trusted = TrustedKeys::default();
        keys.into_iter().for_each(|key| trusted.insert(key));
        trusted
    }

    /// The decoded key of `key`, if it is trusted.
    fn decoded(&self, key: &PublicKey) -> Option<&ed25519_dalek::VerifyingKey> {
        self.keys.get(key)
    }

    /// Ed25519 verifications performed through this set and its clones
    /// ([`Image::verify_signature`]; batch members whose root was verified
    /// already are not verified again).
    pub fn verifications(&self) -> u64 {
        self.memo.verifications.load(Ordering::Relaxed)
    }

    /// Batch roots (with their signer) this set and its clones remember as
    /// verified: at most [`MEMO_CAPACITY`].
    pub fn verified_roots(&self) -> usize {
        self.memo_roots().len()
    }

    fn memo_roots(&self) -> std::sync::MutexGuard<'_, HashSet<([u8; 32], PublicKey)>> {
        // The set is whole after every update: a panic elsewhere leaves it
        // usable.
        self.memo
            .roots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether `key`'s signature of the batch root message `message` was
    /// verified already.
    fn remembers(&self, message: &Digest, key: &PublicKey) -> bool {
        self.memo_roots().contains(&(message.0, *key))
    }

    /// Remembers that `key` signed the batch root message `message`
    /// (verified); when the memo is full it is emptied first.
    fn remember(&self, message: &Digest, key: &PublicKey) {
        let mut roots = self.memo_roots();
        if roots.len() >= MEMO_CAPACITY {
            roots.clear();
        }
        roots.insert((message.0, *key));
    }

    /// Strict ed25519 verification of `signature` of `message` by the
    /// decoded `key`, counted.
    fn verify(
        &self,
        key: &ed25519_dalek::VerifyingKey,
        message: &Digest,
        signature: &[u8; 64],
    ) -> bool {
        self.memo.verifications.fetch_add(1, Ordering::Relaxed);
        let signature = ed25519_dalek::Signature::from_bytes(signature);
        key.verify_strict(&message.0, &signature).is_ok()
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
            self.keys.insert(key, decoded);
        }
    }

    /// Adds every key of `other` (this set keeps its own memo).
    pub fn extend(&mut self, other: TrustedKeys) {
        self.keys.extend(other.keys);
    }

    /// Whether `key` is trusted.
    pub fn contains(&self, key: &PublicKey) -> bool {
        self.keys.contains_key(key)
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is trusted (then nothing signed is accepted).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// The keys, in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = &PublicKey> {
        self.keys.keys()
    }
}

/// One signature of an image, as read from its trailer (not yet checked).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: PublicKey,
    pub(crate) signature: [u8; 64],
}

/// A batch member's place in its batch and its Merkle path, as read from
/// its trailer (not yet checked; promoted levels already checked to be
/// zeros).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchPath {
    pub(crate) index: u32,
    pub(crate) size: u32,
    /// One digest per level, leaf level first: [`batch_depth`] of them.
    pub(crate) path: Vec<[u8; 32]>,
}

/// A trailer as read at open: its records and, for a batch signature, the
/// member's path.
#[derive(Default)]
pub(crate) struct Trailer {
    pub(crate) records: Vec<Record>,
    pub(crate) batch: Option<BatchPath>,
}

/// Where a batch-signed image sits in its batch ([`Image::signature_batch`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPosition {
    /// The image's leaf index, less than `size`.
    pub index: u32,
    /// How many images were signed together.
    pub size: u32,
}

/// What [`Image::check_signatures`] found of one signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SignatureCheck {
    /// Who claims to have signed.
    pub key: PublicKey,
    /// Whether the signature verifies: the key's holder signed exactly this
    /// header and index (directly, or as a member of a batch).
    pub valid: bool,
    /// Whether the key is among the trusted keys given.
    pub trusted: bool,
}

/// The depth of a batch of `size` images, the length of each member's
/// path: `ceil(log2(size))` (0 for a single image).
pub fn batch_depth(size: usize) -> usize {
    if size <= 1 {
        return 0;
    }
    (usize::BITS - (size - 1).leading_zeros()) as usize
}

/// BLAKE3 in derive-key mode of the concatenation of `parts`.
fn derive(context: &str, parts: &[&[u8]]) -> [u8; 32] {
    let mut hasher = blake3::Hasher::new_derive_key(context);
    for part in parts {
        hasher.update(part);
    }
    *hasher.finalize().as_bytes()
}

/// The leaf of an image whose signed digest is `digest`.
fn batch_leaf(digest: &Digest) -> [u8; 32] {
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

/// Whether the node at `index` of a level of `width` nodes is promoted
/// unchanged to the level above (the last node of an odd count).
fn promoted(index: usize, width: usize) -> bool {
    index.is_multiple_of(2) && index + 1 == width
}

impl BatchPath {
    /// The root message reached from the image whose signed digest is
    /// `digest` along this path: [`batch_depth`] levels, a few BLAKE3
    /// hashes of 64 bytes.
    fn root_message(&self, digest: &Digest) -> Digest {
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

/// Whether some direct or batch trailer is `len` bytes long (see the
/// module docs): `16 + 96 n`, or `24 + 32 depth + 96 n`, with
/// `1 <= n <= MAX_SIGNATURES` and `1 <= depth <= MAX_BATCH_DEPTH`.
fn possible_trailer_len(len: usize) -> bool {
    len <= MAX_TRAILER_LEN
        && (1..=MAX_SIGNATURES).any(|n| {
            let records = n * RECORD_LEN;
            len == TRAILER_HEAD_LEN + records
                || (1..=MAX_BATCH_DEPTH).any(|depth| {
                    len == TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + depth * PATH_DIGEST_LEN + records
                })
        })
}

/// Checks the trailer length recorded in a header: 0, or the length of a
/// direct or batch trailer (see the module docs).
pub(crate) fn check_trailer_len(len: u32) -> Result<(), ImageError> {
    let len = len as usize;
    if len == 0 || possible_trailer_len(len) {
        return Ok(());
    }
    Err(ImageError::SignatureTrailer(format!(
        "the header gives it {len} bytes: a trailer is {TRAILER_HEAD_LEN} + {RECORD_LEN} bytes \
         per signature (direct), or {} + {PATH_DIGEST_LEN} per path digest (1 to \
         {MAX_BATCH_DEPTH}) + {RECORD_LEN} per signature (batch), 1 to {MAX_SIGNATURES} \
         signatures",
        TRAILER_HEAD_LEN + BATCH_FIELDS_LEN
    )))
}

/// Parses a trailer whose length passed [`check_trailer_len`]: every
/// length is derived from the fields read and checked against the bytes
/// before they are read.
pub(crate) fn parse_trailer(bytes: &[u8]) -> Result<Trailer, ImageError> {
    let bad = |what: String| Err(ImageError::SignatureTrailer(what));
    if bytes.is_empty() {
        return Ok(Trailer::default());
    }
    let Some((head, rest)) = bytes.split_first_chunk::<TRAILER_HEAD_LEN>() else {
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
    let kind = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
    if count == 0 || count > MAX_SIGNATURES {
        return bad(format!(
            "counts {count} signatures: 1 to {MAX_SIGNATURES} are allowed"
        ));
    }
    let (batch, records) = match kind {
        KIND_DIRECT => (None, rest),
        KIND_BATCH => {
            let Some((fields, rest)) = rest.split_first_chunk::<BATCH_FIELDS_LEN>() else {
                return bad(format!(
                    "a batch trailer of {} bytes, shorter than its fixed fields",
                    bytes.len()
                ));
            };
            let index = u32::from_le_bytes([fields[0], fields[1], fields[2], fields[3]]);
            let size = u32::from_le_bytes([fields[4], fields[5], fields[6], fields[7]]);
            if !(2..=MAX_BATCH).contains(&(size as usize)) {
                return bad(format!(
                    "gives a batch of {size} images: a batch signs 2 to {MAX_BATCH}"
                ));
            }
            if index >= size {
                return bad(format!(
                    "gives leaf index {index} in a batch of {size}: the index must be less"
                ));
            }
            let depth = batch_depth(size as usize);
            let path_len = depth * PATH_DIGEST_LEN;
            if rest.len() != path_len + count * RECORD_LEN {
                return bad(format!(
                    "a batch of {size} (a path of {depth} digests) with {count} signatures takes \
                     {} bytes after the batch fields, the trailer has {}",
                    path_len + count * RECORD_LEN,
                    rest.len()
                ));
            }
            let (path_bytes, records) = rest.split_at(path_len);
            let mut path = Vec::with_capacity(depth);
            let (mut at, mut width) = (index as usize, size as usize);
            for (level, chunk) in path_bytes.chunks_exact(PATH_DIGEST_LEN).enumerate() {
                let mut digest = [0u8; 32];
                digest.copy_from_slice(chunk);
                if promoted(at, width) && digest != [0; 32] {
                    return bad(format!(
                        "path digest {level} of leaf {index} in a batch of {size} stands where \
                         the node is promoted unchanged: it must be zeros"
                    ));
                }
                path.push(digest);
                at /= 2;
                width = width.div_ceil(2);
            }
            (Some(BatchPath { index, size, path }), records)
        }
        other => {
            return bad(format!(
                "is of kind {other}, which this version does not read (0: direct, 1: batch)"
            ));
        }
    };
    if records.len() != count * RECORD_LEN {
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
    Ok(Trailer {
        records: parsed,
        batch,
    })
}

/// Encodes `records` (sorted, distinct, 1 to [`MAX_SIGNATURES`]), of the
/// image's signed digest, or with `batch` of its batch's root message.
fn encode_trailer(records: &[Record], batch: Option<&BatchPath>) -> Vec<u8> {
    let path_len = batch.map_or(0, |batch| {
        BATCH_FIELDS_LEN + batch.path.len() * PATH_DIGEST_LEN
    });
    let mut out = Vec::with_capacity(TRAILER_HEAD_LEN + path_len + records.len() * RECORD_LEN);
    out.extend_from_slice(&TRAILER_MAGIC);
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    match batch {
        None => out.extend_from_slice(&KIND_DIRECT.to_le_bytes()),
        Some(batch) => {
            out.extend_from_slice(&KIND_BATCH.to_le_bytes());
            out.extend_from_slice(&batch.index.to_le_bytes());
            out.extend_from_slice(&batch.size.to_le_bytes());
            for digest in &batch.path {
                out.extend_from_slice(digest);
            }
        }
    }
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

/// Where the body of `opened` ends, as an index into its bytes.
fn body_end(opened: &Image) -> Result<usize, ImageError> {
    usize::try_from(opened.header().body_end()).map_err(|_| ImageError::TooLarge {
        what: "the image",
        size: opened.header().body_end(),
        limit: usize::MAX as u64,
    })
}

/// `image[..body_end]` followed by `trailer`, the trailer length and the
/// header checksum updated.
fn with_trailer(image: &[u8], body_end: usize, trailer: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body_end + trailer.len());
    out.extend_from_slice(&image[..body_end]);
    out.extend_from_slice(trailer);
    out[offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4]
        .copy_from_slice(&(trailer.len() as u32).to_le_bytes());
    header::reseal(&mut out);
    out
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
/// carries [`MAX_SIGNATURES`] signatures already;
/// [`ImageError::BatchSigned`] when it carries a batch signature (which
/// signs its batch's root, not the image alone: strip it first).
pub fn sign_image(image: &[u8], key: &SigningKey) -> Result<Vec<u8>, ImageError> {
    let opened = Image::from_bytes(image, Verification::Structural)?;
    if let Some(batch) = opened.signature_batch() {
        return Err(ImageError::BatchSigned {
            index: batch.index,
            size: batch.size,
        });
    }
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
    let body_end = body_end(&opened)?;
    drop(opened);
    Ok(with_trailer(
        image,
        body_end,
        &encode_trailer(&records, None),
    ))
}

/// `images` signed by `key` together: one ed25519 signature of the root of
/// a Merkle tree over their signed digests, each image given its own path
/// to the root (see the module docs), in the same order. A reader then
/// pays one verification per batch and process, and a few BLAKE3 hashes
/// per member ([`Image::verify_signature`], [`TrustedKeys`]).
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
/// Whatever opening an image reports; [`ImageError::TooLarge`] for more
/// than [`MAX_BATCH`] images; [`ImageError::AlreadySigned`] when an image of
/// a batch of two or more carries signatures.
pub fn sign_images_batch(images: &[&[u8]], key: &SigningKey) -> Result<Vec<Vec<u8>>, ImageError> {
    match images {
        [] => return Ok(Vec::new()),
        [one] => return Ok(vec![sign_image(one, key)?]),
        _ if images.len() > MAX_BATCH => {
            return Err(ImageError::TooLarge {
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
            return Err(ImageError::AlreadySigned { image: n });
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

    /// For a batch-signed image ([`sign_images_batch`]), its place in the
    /// batch (read from its trailer; not checked); `None` for an unsigned
    /// or directly signed one.
    pub fn signature_batch(&self) -> Option<BatchPosition> {
        self.batch.as_ref().map(|batch| BatchPosition {
            index: batch.index,
            size: batch.size,
        })
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

    /// The message the trailer's records sign: the signed digest for a
    /// direct signature, the batch's root message, reached from the
    /// signed digest along the image's path, for a batch signature.
    pub fn signature_message(&self) -> Digest {
        let digest = self.signed_digest();
        match &self.batch {
            None => digest,
            Some(batch) => batch.root_message(&digest),
        }
    }

    /// The key among `trusted` whose signature of this image verifies.
    ///
    /// A valid signature authenticates the header and the index, and with
    /// them every entry and the BLAKE3 of every payload, which a reader
    /// checks before returning a payload's bytes (see the module docs).
    /// Costs hashing the header and index once per image, and one ed25519
    /// verification per trusted signature tried; for a batch signature,
    /// a few BLAKE3 hashes more (the path), and no verification when
    /// `trusted` (or a clone of it) verified the same root and signer
    /// already.
    ///
    /// # Errors
    /// [`ImageError::Unsigned`] when the image carries no signature,
    /// [`ImageError::UntrustedSigner`] when none of its signers is trusted,
    /// [`ImageError::BadSignature`] when every trusted signer's signature
    /// fails (the image or its path changed after it was signed, or the
    /// signature was forged).
    pub fn verify_signature(&self, trusted: &TrustedKeys) -> Result<PublicKey, ImageError> {
        if self.signatures.is_empty() {
            return Err(ImageError::Unsigned);
        }
        let message = self.signature_message();
        let batch = self.batch.is_some();
        let mut failed = None;
        for record in &self.signatures {
            let Some(key) = trusted.decoded(&record.key) else {
                continue;
            };
            if batch && trusted.remembers(&message, &record.key) {
                return Ok(record.key);
            }
            if trusted.verify(key, &message, &record.signature) {
                if batch {
                    trusted.remember(&message, &record.key);
                }
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
    /// in `trusted` (for tools: `kiln verify`, `kiln inspect`). Each
    /// signature is verified here (no memo).
    pub fn check_signatures(&self, trusted: Option<&TrustedKeys>) -> Vec<SignatureCheck> {
        let message = self.signature_message();
        self.signatures
            .iter()
            .map(|record| SignatureCheck {
                key: record.key,
                valid: record.key.verifies(&message.0, &record.signature),
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
            for depth in 1..=MAX_BATCH_DEPTH {
                let len = TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + depth * PATH_DIGEST_LEN;
                assert!(check_trailer_len((len + n * RECORD_LEN) as u32).is_ok());
            }
        }
        assert_eq!(
            MAX_TRAILER_LEN,
            TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + 16 * 32 + 16 * RECORD_LEN
        );
        for bad in [
            1,
            TRAILER_HEAD_LEN,
            TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + RECORD_LEN,
            TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + RECORD_LEN + 1,
            MAX_TRAILER_LEN + PATH_DIGEST_LEN,
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
    fn batch_depths_and_promoted_nodes() {
        let depths: Vec<usize> = [1, 2, 3, 4, 5, 8, 9, 11, 65_536]
            .into_iter()
            .map(batch_depth)
            .collect();
        assert_eq!(depths, [0, 1, 2, 2, 3, 3, 4, 4, 16]);
        assert!(promoted(2, 3) && promoted(10, 11));
        assert!(!promoted(1, 3) && !promoted(0, 2) && !promoted(9, 11));
    }

    #[test]
    fn the_memo_stays_bounded_and_checking_stays_right() -> Result<(), ImageError> {
        let signer = SigningKey::from_secret_bytes([5; 32]);
        let trusted = TrustedKeys::new([signer.public_key()]);
        let unsigned = [image(), {
            let mut writer = ImageWriter::new(ImageMeta::new("signed", "2"));
            writer.push(EntryData {
                name: "other".into(),
                ..Image::from_bytes(&image(), Verification::Full)?
                    .entry(0)?
                    .to_data()?
            });
            writer.to_bytes()?
        }];
        let signed = sign_images_batch(&[&unsigned[0], &unsigned[1]], &signer)?;
        let opened = Image::from_bytes(&signed[0], Verification::Full)?;
        opened.verify_signature(&trusted)?;
        assert_eq!((trusted.verifications(), trusted.verified_roots()), (1, 1));
        // Fill the memo past its capacity with roots nobody signed (as
        // many distinct verified roots would): it never holds more than
        // its capacity.
        let clone = trusted.clone();
        for n in 0..MEMO_CAPACITY as u64 + 10 {
            let mut root = [0u8; 32];
            root[..8].copy_from_slice(&n.to_le_bytes());
            clone.remember(&Digest(root), &signer.public_key());
            assert!(trusted.verified_roots() <= MEMO_CAPACITY);
        }
        // The real root was forgotten when the memo was emptied: verified
        // again, correctly; and a batch by a key not trusted is refused.
        assert!(!trusted.remembers(&opened.signature_message(), &signer.public_key()));
        opened.verify_signature(&trusted)?;
        assert_eq!(trusted.verifications(), 2);
        let other = sign_images_batch(
            &[&unsigned[1], &unsigned[0]],
            &SigningKey::from_secret_bytes([6; 32]),
        )?;
        let error = Image::from_bytes(&other[1], Verification::Full)?
            .verify_signature(&trusted)
            .expect_err("another signer");
        assert!(
            matches!(error, ImageError::UntrustedSigner { .. }),
            "{error}"
        );
        Ok(())
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
