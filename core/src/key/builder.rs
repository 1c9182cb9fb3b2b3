//! [`KeyBuilder`]: the encoding of a key's schema and fields (see the
//! module docs of [`crate::key`]).

use std::path::Path;

use postcard::ser_flavors::Flavor;
use serde::Serialize;

use super::{KEY_CONTEXT, Key};
use crate::{Digest, Error};

const TAG_SERDE: u8 = 1;
const TAG_BYTES: u8 = 2;
const TAG_FILE: u8 = 3;
const TAG_KEY: u8 = 4;

/// Builds a [`Key`] from labelled fields.
///
/// ```
/// use kiln_core::KeyBuilder;
///
/// # fn main() -> Result<(), kiln_core::Error> {
/// let source = "extern \"C\" __global__ void add(float* x) { x[0] += 1; }";
/// let key = KeyBuilder::new("my-kernels", 1)
///     .str("function", "add")
///     .bytes("source", source.as_bytes())
///     .field("block", &(128u32, 1u32, 1u32))?
///     .field("dtype", &"f32")?
///     .finish();
/// assert_eq!(key.to_hex().len(), 64);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KeyBuilder {
    hasher: blake3::Hasher,
}

impl KeyBuilder {
    /// Starts a key for `schema` at `version`. Bump the version whenever the
    /// meaning of the fields changes, so that old cached entries stop matching.
    pub fn new(schema: &str, version: u32) -> KeyBuilder {
        let mut hasher = blake3::Hasher::new_derive_key(KEY_CONTEXT);
        update_prefixed(&mut hasher, schema.as_bytes());
        hasher.update(&version.to_le_bytes());
        KeyBuilder { hasher }
    }

    /// Adds a serde value, encoded with postcard.
    ///
    /// Fallible because a `Serialize` implementation can fail: postcard
    /// refuses a sequence of unknown length (`serialize_seq(None)`), a
    /// `Path` that is not UTF-8 fails to serialize, any implementation may
    /// return a custom error, and one that encodes differently on two passes
    /// is refused. For plain values use the infallible [`KeyBuilder::bool`],
    /// [`KeyBuilder::u32`], [`KeyBuilder::u64`], [`KeyBuilder::i32`],
    /// [`KeyBuilder::i64`] and [`KeyBuilder::str`]: each of the first five
    /// gives the same key as `field` with that value.
    ///
    /// # Errors
    /// [`Error::KeyEncoding`] if the value cannot be encoded (see above),
    /// [`Error::KeyNondeterministic`] if two encodings of the same value
    /// differ in length.
    pub fn field<T: Serialize + ?Sized>(mut self, label: &str, value: &T) -> Result<Self, Error> {
        let encoding = |source| Error::KeyEncoding {
            label: label.to_owned(),
            source,
        };
        let len = postcard::serialize_with_flavor(value, CountFlavor(0)).map_err(encoding)?;
        self.start_field(TAG_SERDE, label, len);
        let flavor = HashFlavor {
            hasher: &mut self.hasher,
            written: 0,
            pending: [0; PENDING],
            filled: 0,
        };
        let written = postcard::serialize_with_flavor(value, flavor).map_err(encoding)?;
        if written != len {
            return Err(Error::KeyNondeterministic {
                label: label.to_owned(),
                first: len,
                second: written,
            });
        }
        Ok(self)
    }

    /// Adds a `bool`: the same key as [`KeyBuilder::field`] with it, and
    /// infallible.
    pub fn bool(self, label: &str, value: bool) -> Self {
        self.serde_encoded(label, &[u8::from(value)])
    }

    /// Adds a `u32`: the same key as [`KeyBuilder::field`] with it, and
    /// infallible.
    pub fn u32(self, label: &str, value: u32) -> Self {
        self.u64(label, u64::from(value))
    }

    /// Adds a `u64`: the same key as [`KeyBuilder::field`] with it, and
    /// infallible.
    pub fn u64(self, label: &str, value: u64) -> Self {
        // postcard's varint: 7 bits per byte, least significant first, the
        // high bit set on every byte but the last.
        let mut encoded = [0u8; 10];
        let mut len = 0;
        let mut rest = value;
        loop {
            let low = (rest & 0x7f) as u8;
            rest >>= 7;
            if rest == 0 {
                encoded[len] = low;
                len += 1;
                break;
            }
            encoded[len] = low | 0x80;
            len += 1;
        }
        self.serde_encoded(label, &encoded[..len])
    }

    /// Adds an `i32`: the same key as [`KeyBuilder::field`] with it, and
    /// infallible.
    pub fn i32(self, label: &str, value: i32) -> Self {
        self.i64(label, i64::from(value))
    }

    /// Adds an `i64`: the same key as [`KeyBuilder::field`] with it, and
    /// infallible.
    pub fn i64(self, label: &str, value: i64) -> Self {
        // postcard's zigzag encoding, then its varint.
        let zigzag = ((value << 1) ^ (value >> 63)) as u64;
        self.u64(label, zigzag)
    }

    /// A serde field whose postcard encoding is `encoded`.
    fn serde_encoded(mut self, label: &str, encoded: &[u8]) -> Self {
        self.start_field(TAG_SERDE, label, encoded.len());
        self.hasher.update(encoded);
        self
    }

    /// Adds raw bytes (e.g. a source text).
    pub fn bytes(mut self, label: &str, bytes: &[u8]) -> Self {
        self.start_field(TAG_BYTES, label, bytes.len());
        self.hasher.update(bytes);
        self
    }

    /// Adds a string, encoded as its UTF-8 bytes (same as [`KeyBuilder::bytes`]).
    pub fn str(self, label: &str, value: &str) -> Self {
        self.bytes(label, value.as_bytes())
    }

    /// Adds the *contents* of a file the code depends on (a header, an
    /// included source). The path itself is not part of the key, so the same
    /// header at another place on another machine gives the same key.
    ///
    /// # Errors
    /// [`Error::KeyInput`] if the file cannot be read: a key is never built
    /// from an input whose contents cannot be observed.
    pub fn file(self, label: &str, path: &Path) -> Result<Self, Error> {
        let contents = std::fs::read(path).map_err(|source| Error::KeyInput {
            label: label.to_owned(),
            path: path.to_owned(),
            source,
        })?;
        let mut this = self;
        this.start_field(TAG_FILE, label, contents.len());
        this.hasher.update(&contents);
        Ok(this)
    }

    /// Adds another key (e.g. the key of a dependency that is linked in).
    pub fn key(mut self, label: &str, key: &Key) -> Self {
        self.start_field(TAG_KEY, label, 32);
        self.hasher.update(key.digest().as_bytes());
        self
    }

    /// The key.
    pub fn finish(self) -> Key {
        Key(Digest(*self.hasher.finalize().as_bytes()))
    }

    fn start_field(&mut self, tag: u8, label: &str, value_len: usize) {
        self.hasher.update(&[tag]);
        update_prefixed(&mut self.hasher, label.as_bytes());
        self.hasher.update(&(value_len as u64).to_le_bytes());
    }
}

/// Feeds `len(bytes) bytes` into `hasher`.
pub(crate) fn update_prefixed(hasher: &mut blake3::Hasher, bytes: &[u8]) {
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// A postcard flavor that only counts the bytes of an encoding.
struct CountFlavor(usize);

impl Flavor for CountFlavor {
    type Output = usize;

    fn try_push(&mut self, _data: u8) -> postcard::Result<()> {
        self.0 += 1;
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0 += data.len();
        Ok(())
    }

    fn finalize(self) -> postcard::Result<usize> {
        Ok(self.0)
    }
}

/// Bytes a [`HashFlavor`] gathers before handing them to the hasher.
const PENDING: usize = 64;

/// A postcard flavor that streams the encoding into a BLAKE3 hasher. Single
/// bytes (varints, and each byte of a digest, which serde encodes as a tuple)
/// are gathered and handed over in pieces: a hasher update per byte cost more
/// than the hashing. The bytes hashed, so the key, are the same.
struct HashFlavor<'h> {
    hasher: &'h mut blake3::Hasher,
    written: usize,
    pending: [u8; PENDING],
    filled: usize,
}

impl HashFlavor<'_> {
    fn flush(&mut self) {
        self.hasher.update(&self.pending[..self.filled]);
        self.filled = 0;
    }
}

impl Flavor for HashFlavor<'_> {
    type Output = usize;

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        if self.filled == PENDING {
            self.flush();
        }
        self.pending[self.filled] = data;
        self.filled += 1;
        self.written += 1;
        Ok(())
    }

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        if self.filled + data.len() <= PENDING {
            self.pending[self.filled..self.filled + data.len()].copy_from_slice(data);
            self.filled += data.len();
        } else {
            self.flush();
            self.hasher.update(data);
        }
        self.written += data.len();
        Ok(())
    }

    fn finalize(mut self) -> postcard::Result<usize> {
        self.flush();
        Ok(self.written)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The flavor gathers single bytes before hashing them: the key must be
    /// that of the whole encoding hashed at once, whatever mix of single bytes
    /// (varints, digests) and slices (strings) the encoding is made of, and
    /// however it falls across the gathering buffer.
    #[test]
    fn a_field_hashes_exactly_its_encoding() {
        let digests: Vec<(String, [u8; 32])> = (0u8..40)
            .map(|i| ("x".repeat(usize::from(i) * 7), [i; 32]))
            .collect();
        let values: Vec<u64> = (0..300).map(|i| i * 1_000_003).collect();
        let long = "y".repeat(PENDING * 3 + 5);
        for n in [0, 1, 2, 3, 39, 40] {
            let value = (&digests[..n], &values[..n * 7], long.as_str());
            let encoded = postcard::to_stdvec(&value).unwrap();
            let streamed = KeyBuilder::new("test", 1).field("f", &value).unwrap();
            let whole = KeyBuilder::new("test", 1).serde_encoded("f", &encoded);
            assert_eq!(streamed.finish(), whole.finish(), "{n}");
        }
    }
}
