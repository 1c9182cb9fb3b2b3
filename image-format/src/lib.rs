//! API CONTRACT SKELETON — being implemented; signatures are the contract the
//! other crates code against. Bodies are placeholders.
#![deny(unsafe_op_in_unsafe_fn)]

use std::path::Path;

/// 32-byte BLAKE3 hash, shown as lowercase hex.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct Digest(pub [u8; 32]);

impl Digest {
    /// BLAKE3 of `bytes`.
    pub fn of(bytes: &[u8]) -> Digest { Digest(*blake3::hash(bytes).as_bytes()) }
    pub fn as_bytes(&self) -> &[u8; 32] { &self.0 }
    /// Lowercase hex, 64 characters.
    pub fn to_hex(&self) -> String { todo!() }
    /// Parses 64 hex characters.
    pub fn from_hex(_s: &str) -> Result<Digest, ImageError> { todo!() }
}
impl std::fmt::Display for Digest { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { f.write_str(&self.to_hex()) } }
impl std::fmt::Debug for Digest { fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result { write!(f, "Digest({})", self.to_hex()) } }

/// What an artifact's bytes are.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ArtifactKind { Ptx, Cubin, Fatbin, LtoIr, Object, /// a user tag
    Custom(String) }

/// Owned artifact: compiled bytes, their kind and entry-point names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Artifact { pub kind: ArtifactKind, pub entry_points: Vec<String>, pub bytes: Vec<u8> }

/// A backedge: a definition the entry was built from, and its fingerprint then.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Dep { pub name: String, pub fingerprint: Digest }

/// One code-instance entry as written into an image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryData {
    pub owner: Digest,
    pub owner_label: String,
    pub key: Digest,
    pub name: String,
    pub min_world: u64,
    pub max_world: u64,
    pub deps: Vec<Dep>,
    pub artifacts: Vec<Artifact>,
}

/// Image-wide metadata.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ImageMeta { pub producer_name: String, pub producer_version: String, pub labels: std::collections::BTreeMap<String, String> }

/// Builds deterministic image bytes.
#[derive(Default)]
pub struct ImageWriter { meta: ImageMeta, entries: Vec<EntryData> }
impl ImageWriter {
    pub fn new(meta: ImageMeta) -> Self { ImageWriter { meta, entries: Vec::new() } }
    pub fn push(&mut self, entry: EntryData) { self.entries.push(entry) }
    pub fn len(&self) -> usize { self.entries.len() }
    pub fn is_empty(&self) -> bool { self.entries.is_empty() }
    /// Sorted by (owner, key); duplicate (owner, key) is an error.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ImageError> { let _ = &self.meta; todo!() }
    /// temp file in the same directory, fsync, rename, fsync dir.
    pub fn write_atomic(&self, _path: &Path) -> Result<(), ImageError> { todo!() }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verification { Full, Structural }

#[derive(Debug, thiserror::Error)]
pub enum ImageError { #[error("placeholder")] Placeholder }

/// An opened, validated image.
pub struct Image { _p: () }
impl Image {
    pub fn from_static(_bytes: &'static [u8], _level: Verification) -> Result<Image, ImageError> { todo!() }
    /// # Safety
    /// `bytes` passed `Verification::Full` earlier (e.g. at compile time) and are unchanged.
    pub unsafe fn from_static_trusted(_bytes: &'static [u8]) -> Result<Image, ImageError> { todo!() }
    /// Memory-maps the file.
    pub fn open(_path: &Path, _level: Verification) -> Result<Image, ImageError> { todo!() }
    /// Copies into aligned storage.
    pub fn from_bytes(_bytes: &[u8], _level: Verification) -> Result<Image, ImageError> { todo!() }
    pub fn meta(&self) -> ImageMeta { todo!() }
    pub fn len(&self) -> usize { todo!() }
    pub fn is_empty(&self) -> bool { self.len() == 0 }
    /// Entry by index (entries are sorted by (owner, key)).
    pub fn entry(&self, _index: usize) -> Result<EntryRef<'_>, ImageError> { todo!() }
    /// Binary search by (owner, key), without deserializing.
    pub fn find(&self, _owner: &Digest, _key: &Digest) -> Result<Option<EntryRef<'_>>, ImageError> { todo!() }
    pub fn owners(&self) -> Vec<(Digest, String, std::ops::Range<usize>)> { todo!() }
    pub fn verify_full(&self) -> Result<(), ImageError> { todo!() }
}

pub struct EntryRef<'a> { _image: &'a Image, _index: u32 }
impl<'a> EntryRef<'a> {
    pub fn index(&self) -> usize { todo!() }
    pub fn owner(&self) -> Digest { todo!() }
    pub fn key(&self) -> Digest { todo!() }
    pub fn name(&self) -> &'a str { todo!() }
    pub fn min_world(&self) -> u64 { todo!() }
    pub fn max_world(&self) -> u64 { todo!() }
    pub fn deps(&self) -> Vec<Dep> { todo!() }
    pub fn artifact_count(&self) -> usize { todo!() }
    pub fn artifact(&self, _i: usize) -> Result<ArtifactRef<'a>, ImageError> { todo!() }
}
pub struct ArtifactRef<'a> { _image: &'a Image, _index: u32 }
impl<'a> ArtifactRef<'a> {
    pub fn kind(&self) -> ArtifactKind { todo!() }
    pub fn entry_points(&self) -> Vec<&'a str> { todo!() }
    pub fn len(&self) -> usize { todo!() }
    pub fn is_empty(&self) -> bool { self.len() == 0 }
    /// Borrowed from the image; checksum checked (once, remembered) first.
    pub fn bytes(&self) -> Result<&'a [u8], ImageError> { todo!() }
}
