//! Keys: an ed25519 [`PublicKey`] (who signed), a [`SigningKey`] (to
//! sign with) and [`TrustedKeys`], the public keys a reader accepts, with
//! the memo of verified batch roots (see the [module docs](super)).
//!
//! Keys are values here: parsed from and written to text
//! ([`TrustedKeys::parse`], [`SigningKey::from_secret_hex`]); reading key
//! files is the trust policy's (`kiln_core::trust`).

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use ed25519_dalek::Signer;

use crate::{Digest, KeyError};

/// The most (root message, key) pairs a [`TrustedKeys`] memo holds.
pub const MEMO_CAPACITY: usize = 4096;
/// An ed25519 public key: who signed an image.
///
/// Written as 64 lowercase hex digits ([`fmt::Display`], [`FromStr`]).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PublicKey(pub(super) [u8; 32]);

impl PublicKey {
    /// The key of these 32 bytes.
    ///
    /// # Errors
    /// [`KeyError::Invalid`] when the bytes are not a point of the
    /// curve (no signature could ever verify with them).
    pub fn from_bytes(bytes: [u8; 32]) -> Result<PublicKey, KeyError> {
        ed25519_dalek::VerifyingKey::from_bytes(&bytes)
            .map_err(|_| KeyError::Invalid("32 bytes that are not an ed25519 public key".into()))?;
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
    /// Whether `signature` is this key's ed25519 signature of the 32-byte
    /// `message` (strict verification: malleable signatures and weak keys
    /// refused). For other signed formats (a shipped image's header digest);
    /// images use [`Image::verify_signature`](crate::Image::verify_signature).
    pub fn verifies_digest(&self, message: &Digest, signature: &[u8; 64]) -> bool {
        self.verifies(&message.0, signature)
    }

    pub(super) fn verifies(&self, message: &[u8; 32], signature: &[u8; 64]) -> bool {
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
    type Err = KeyError;

    /// Parses 64 hex digits (surrounding white space ignored).
    fn from_str(text: &str) -> Result<PublicKey, KeyError> {
        let digest = Digest::from_hex(text.trim()).map_err(|_| {
            KeyError::Invalid(format!(
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
/// A key file holds the 32-byte secret as 64 hex digits and a newline
/// ([`SigningKey::to_secret_hex`], [`SigningKey::from_secret_hex`]).
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// A new random key, from the operating system's random source.
    ///
    /// # Errors
    /// [`KeyError::Random`] when the operating system gives no random
    /// bytes.
    pub fn generate() -> Result<SigningKey, KeyError> {
        let mut secret = [0u8; 32];
        getrandom::getrandom(&mut secret).map_err(|error| KeyError::Random(error.to_string()))?;
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

    /// The key of a secret key file's text: 64 hex digits, white space
    /// around them ignored (what [`SigningKey::to_secret_hex`] gives).
    ///
    /// # Errors
    /// [`KeyError::Invalid`] when `text` is not 64 hex digits; the
    /// message never quotes it (it may be a secret).
    pub fn from_secret_hex(text: &str) -> Result<SigningKey, KeyError> {
        let digest = Digest::from_hex(text.trim()).map_err(|_| {
            KeyError::Invalid(
                "not a kiln signing key (64 hex digits; `kiln keygen` writes one)".to_owned(),
            )
        })?;
        Ok(SigningKey::from_secret_bytes(digest.0))
    }

    /// The 32-byte secret as 64 lowercase hex digits: the text of a secret
    /// key file. Never log it; the key's `Debug` shows the public key only.
    pub fn to_secret_hex(&self) -> String {
        Digest(self.0.to_bytes()).to_hex()
    }
    /// This key's ed25519 signature of the 32-byte `message` (deterministic:
    /// the same key and message give the same signature). For other signed
    /// formats (a shipped image's header digest); images are signed with
    /// [`sign_image`](crate::sign_image).
    pub fn sign_digest(&self, message: &Digest) -> [u8; 64] {
        self.sign(message)
    }

    pub(super) fn sign(&self, digest: &Digest) -> [u8; 64] {
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
    pub(super) fn decoded(&self, key: &PublicKey) -> Option<&ed25519_dalek::VerifyingKey> {
        self.keys.get(key)
    }

    /// Ed25519 verifications performed through this set and its clones
    /// ([`Image::verify_signature`](crate::Image::verify_signature); batch members whose root was verified
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
    pub(super) fn remembers(&self, message: &Digest, key: &PublicKey) -> bool {
        self.memo_roots().contains(&(message.0, *key))
    }

    /// Remembers that `key` signed the batch root message `message`
    /// (verified); when the memo is full it is emptied first.
    pub(super) fn remember(&self, message: &Digest, key: &PublicKey) {
        let mut roots = self.memo_roots();
        if roots.len() >= MEMO_CAPACITY {
            roots.clear();
        }
        roots.insert((message.0, *key));
    }

    /// Strict ed25519 verification of `signature` of `message` by the
    /// decoded `key`, counted.
    pub(super) fn verify(
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
    /// [`KeyError::Invalid`] naming the first line that is not a key.
    pub fn parse(text: &str) -> Result<TrustedKeys, KeyError> {
        let mut keys = TrustedKeys::default();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let word = line.split_whitespace().next().unwrap_or_default();
            let key = word
                .parse::<PublicKey>()
                .map_err(|error| KeyError::Invalid(format!("line {}: {error}", number + 1)))?;
            keys.insert(key);
        }
        Ok(keys)
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
