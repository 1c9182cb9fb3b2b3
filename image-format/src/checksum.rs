//! Checksums over parts of the index, computed the same way by the writer
//! (from owned data) and by the reader (from archived records).
//!
//! Every variable-length field is length-prefixed and every hasher is keyed
//! by its own 32-byte key, so no two different inputs feed the same bytes.
//! (Keyed rather than `derive_key` mode: setting a key costs nothing, while
//! deriving one hashes the context on every entry check.)

/// Key of [`EntryHasher`].
const ENTRY_KEY: &[u8; 32] = b"kiln-image format 1 entry record";
/// Key of [`DepGroupsHasher`].
const DEP_GROUPS_KEY: &[u8; 32] = b"kiln-image format 1 dep groups..";
/// Key of [`dep_members_checksum`].
const DEP_MEMBERS_KEY: &[u8; 32] = b"kiln-image format 1 dep members.";
/// Key of [`IndexHasher`].
const INDEX_KEY: &[u8; 32] = b"kiln-image format 1 index tables";

use crate::Digest;

/// The bytes a checksum covers, collected and hashed in one call at the
/// end: hashing a few hundred bytes at once costs a fraction of the same
/// bytes fed to a hasher in two dozen small updates (same digest either way).
struct Input(Vec<u8>);

impl Input {
    fn with_capacity(capacity: usize) -> Input {
        Input(Vec::with_capacity(capacity))
    }

    fn update(&mut self, bytes: &[u8]) -> &mut Input {
        self.0.extend_from_slice(bytes);
        self
    }

    fn keyed_hash(&self, key: &[u8; 32]) -> [u8; 32] {
        *blake3::keyed_hash(key, &self.0).as_bytes()
    }
}

fn feed_bytes(input: &mut Input, bytes: &[u8]) {
    input.update(&(bytes.len() as u64).to_le_bytes());
    input.update(bytes);
}

/// Checksum of one entry record and everything it references.
///
/// Call order: [`EntryHasher::new`], then [`EntryHasher::dep`] per dep, then
/// per artifact [`EntryHasher::artifact`] followed by
/// [`EntryHasher::entry_point`] per entry point, then
/// [`EntryHasher::finish`].
pub(crate) struct EntryHasher(Input);

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
        let mut hasher = Input::with_capacity(256);
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
        self.0.keyed_hash(ENTRY_KEY)
    }
}

/// Checksum of the dependency group table: per group its name,
/// fingerprint, member range and member-list checksum (not the members
/// themselves, which [`dep_members_checksum`] covers per group). Stored in
/// the index root, which the index checksum covers.
pub(crate) struct DepGroupsHasher(Input);

impl DepGroupsHasher {
    pub(crate) fn new(group_count: u32, member_count: u32) -> Self {
        let mut hasher = Input::with_capacity(64 + group_count as usize * 96);
        hasher.update(&group_count.to_le_bytes());
        hasher.update(&member_count.to_le_bytes());
        DepGroupsHasher(hasher)
    }

    pub(crate) fn group(
        &mut self,
        name: &[u8],
        fingerprint: &[u8; 32],
        start: u32,
        len: u32,
        members_checksum: &[u8; 32],
    ) {
        feed_bytes(&mut self.0, name);
        self.0.update(fingerprint);
        self.0.update(&start.to_le_bytes());
        self.0.update(&len.to_le_bytes());
        self.0.update(members_checksum);
    }

    pub(crate) fn finish(self) -> [u8; 32] {
        self.0.keyed_hash(DEP_GROUPS_KEY)
    }
}

/// Checksum of one dependency group's member list (entry indices), stored
/// in the group's record and checked when the group's entries are read.
pub(crate) fn dep_members_checksum(members: impl ExactSizeIterator<Item = u32>) -> [u8; 32] {
    let mut input = Input::with_capacity(8 + members.len() * 4);
    input.update(&(members.len() as u64).to_le_bytes());
    for member in members {
        input.update(&member.to_le_bytes());
    }
    input.keyed_hash(DEP_MEMBERS_KEY)
}

/// Checksum of the index root, owner table and metadata, checked at open.
pub(crate) struct IndexHasher(Input);

impl IndexHasher {
    pub(crate) fn new(root_bytes: &[u8]) -> Self {
        let mut hasher = Input::with_capacity(512);
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
        Digest(self.0.keyed_hash(INDEX_KEY))
    }
}
