//! Keys: the identity of one method instance.
//!
//! A [`Key`] is a BLAKE3 digest over a *schema* (a name and a version chosen by
//! the library that builds keys) and a sequence of labelled, length-prefixed
//! fields. It must be the same in every process, build and machine for the same
//! inputs, and differ whenever an input that changes code generation differs.
//!
//! # Encoding (stable: changing it changes every key)
//!
//! BLAKE3 in key-derivation mode with the context [`KEY_CONTEXT`], fed with:
//!
//! ```text
//! schema  = len(name) name version:u32le
//! field   = tag:u8 len(label) label len(value) value      (repeated, in call order)
//! len(x)  = byte length of x as u64le
//! ```
//!
//! `tag` is 1 for a serde value (its postcard encoding), 2 for raw bytes, 3
//! for the contents of a file, 4 for a nested key. Serde values are encoded with
//! postcard, whose wire format is specified and stable, and streamed into the
//! hasher without allocating (one counting pass for the length prefix, one
//! hashing pass). Nothing goes through `std::hash::Hash`, and no `HashMap`
//! iteration order can leak in unless a field's own `Serialize` iterates one:
//! use `BTreeMap` or sorted vectors in key types.

mod builder;

pub use builder::KeyBuilder;
pub(crate) use builder::update_prefixed;

use std::fmt;

use crate::Digest;

/// BLAKE3 key-derivation context of every [`Key`]. Part of the encoding.
pub const KEY_CONTEXT: &str = "kiln 2026-11 method-instance key v1";

/// The identity of one method instance: a 32-byte BLAKE3 digest built by a
/// [`KeyBuilder`].
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Key(Digest);

impl Key {
    /// Wraps a digest (e.g. one read back from an image).
    pub const fn from_digest(digest: Digest) -> Key {
        Key(digest)
    }

    /// The digest.
    pub const fn digest(&self) -> &Digest {
        &self.0
    }

    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String {
        self.0.to_hex()
    }
}

impl From<Digest> for Key {
    fn from(digest: Digest) -> Key {
        Key(digest)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.to_hex())
    }
}
