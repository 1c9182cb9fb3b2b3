//! Checksums over parts of the index, computed the same way by the writer
//! (from owned data) and by the reader (from archived records).
//!
//! Every variable-length field is length-prefixed and every hasher is keyed
//! by its own 32-byte key, so no two different inputs feed the same bytes.
//! (Keyed rather than `derive_key` mode: setting a key costs nothing, while
//! deriving one hashes the context on every entry check.)

/// Key of [`EntryHasher`].
const ENTRY_KEY: &[u8; 32] = b"kiln-image format 1 entry record";
/// Key of [`DepIndexHasher`].
const DEP_INDEX_KEY: &[u8; 32] = b"kiln-image format 1 dep index ..";
/// Key of [`IndexHasher`].
const INDEX_KEY: &[u8; 32] = b"kiln-image format 1 index tables";

use crate::Digest;

fn feed_bytes(hasher: &mut blake3::Hasher, bytes: &[u8]) {
    hasher.update(&(bytes.len() as u64).to_le_bytes());
    hasher.update(bytes);
}

/// Checksum of one entry record and everything it references.
///
/// Call order: [`EntryHasher::new`], then [`EntryHasher::dep`] per dep, then
/// per artifact [`EntryHasher::artifact`] followed by
/// [`EntryHasher::entry_point`] per entry point, then
/// [`EntryHasher::finish`].
pub(crate) struct EntryHasher(blake3::Hasher);

/// The fixed fields of an entry fed to [`EntryHasher::new`].
pub(crate) struct EntryFields<'a> {
    pub owner: &'a [u8; 32],
    pub key: &'a [u8; 32],
    pub name: &'a [u8],
    pub min_world: u64,
    pub max_world: u64,
    pub flags: u32,
    pub dep_count: u32,
    pub artifact_count: u32,
}

/// The fields of one artifact descriptor fed to [`EntryHasher::artifact`].
pub(crate) struct ArtifactFields<'a> {
    pub kind: u32,
    pub custom: &'a [u8],
    pub entry_point_count: u32,
    pub offset: u64,
    pub len: u64,
    pub hash: &'a [u8; 32],
    pub flags: u32,
}

impl EntryHasher {
    pub(crate) fn new(fields: &EntryFields<'_>) -> Self {
        let mut hasher = blake3::Hasher::new_keyed(ENTRY_KEY);
        hasher.update(fields.owner);
        hasher.update(fields.key);
        feed_bytes(&mut hasher, fields.name);
        hasher.update(&fields.min_world.to_le_bytes());
        hasher.update(&fields.max_world.to_le_bytes());
        hasher.update(&fields.flags.to_le_bytes());
        hasher.update(&fields.dep_count.to_le_bytes());
        hasher.update(&fields.artifact_count.to_le_bytes());
        EntryHasher(hasher)
    }

    pub(crate) fn dep(&mut self, name: &[u8], fingerprint: &[u8; 32]) {
        feed_bytes(&mut self.0, name);
        self.0.update(fingerprint);
    }

    pub(crate) fn artifact(&mut self, fields: &ArtifactFields<'_>) {
        self.0.update(&fields.kind.to_le_bytes());
        feed_bytes(&mut self.0, fields.custom);
        self.0.update(&fields.entry_point_count.to_le_bytes());
        self.0.update(&fields.offset.to_le_bytes());
        self.0.update(&fields.len.to_le_bytes());
        self.0.update(fields.hash);
        self.0.update(&fields.flags.to_le_bytes());
    }

    pub(crate) fn entry_point(&mut self, name: &[u8]) {
        feed_bytes(&mut self.0, name);
    }

    pub(crate) fn finish(self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

/// Checksum of the inverse dependency index.
pub(crate) struct DepIndexHasher(blake3::Hasher);

impl DepIndexHasher {
    pub(crate) fn new(group_count: u32, member_count: u32) -> Self {
        let mut hasher = blake3::Hasher::new_keyed(DEP_INDEX_KEY);
        hasher.update(&group_count.to_le_bytes());
        hasher.update(&member_count.to_le_bytes());
        DepIndexHasher(hasher)
    }

    pub(crate) fn group(&mut self, name: &[u8], fingerprint: &[u8; 32], start: u32, len: u32) {
        feed_bytes(&mut self.0, name);
        self.0.update(fingerprint);
        self.0.update(&start.to_le_bytes());
        self.0.update(&len.to_le_bytes());
    }

    pub(crate) fn members(&mut self, members: impl Iterator<Item = u32>) {
        for member in members {
            self.0.update(&member.to_le_bytes());
        }
    }

    pub(crate) fn finish(self) -> [u8; 32] {
        *self.0.finalize().as_bytes()
    }
}

/// Checksum of the index root, owner table and metadata, checked at open.
pub(crate) struct IndexHasher(blake3::Hasher);

impl IndexHasher {
    pub(crate) fn new(root_bytes: &[u8]) -> Self {
        let mut hasher = blake3::Hasher::new_keyed(INDEX_KEY);
        feed_bytes(&mut hasher, root_bytes);
        IndexHasher(hasher)
    }

    pub(crate) fn owner(&mut self, digest: &[u8; 32], label: &[u8], start: u32, len: u32) {
        self.0.update(digest);
        feed_bytes(&mut self.0, label);
        self.0.update(&start.to_le_bytes());
        self.0.update(&len.to_le_bytes());
    }

    pub(crate) fn buckets(&mut self, start: u32, len: u32, bits: u32) {
        self.0.update(&start.to_le_bytes());
        self.0.update(&len.to_le_bytes());
        self.0.update(&bits.to_le_bytes());
    }

    pub(crate) fn text(&mut self, text: &[u8]) {
        feed_bytes(&mut self.0, text);
    }

    pub(crate) fn finish(self) -> Digest {
        Digest(*self.0.finalize().as_bytes())
    }
}
