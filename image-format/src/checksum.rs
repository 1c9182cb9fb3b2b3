//! Checksums over parts of the index, computed the same way by the writer
//! and by the reader: both hash the archived records (the writer seals the
//! index after serializing it, see `seal.rs`).
//!
//! Every variable-length field is length-prefixed and every hasher is keyed
//! by its own 32-byte key, so no two different inputs feed the same bytes.
//! (Keyed rather than `derive_key` mode: setting a key costs nothing, while
//! deriving one hashes the context on every entry check.)
//!
//! Bytes stream into the hasher: small fields are batched in a fixed
//! 256-byte buffer on the stack (a few hundred bytes hashed at once cost a
//! fraction of the same bytes fed in two dozen small updates), larger ones
//! go straight to the hasher. Nothing is collected in a buffer that grows
//! with what is hashed, and every checksum covers each byte of text once
//! (text references cannot share bytes, see `layout.rs`), so the work of a
//! check is linear in what it covers.

/// Key of [`EntryHasher`].
const ENTRY_KEY: &[u8; 32] = b"kiln-image format 2 entry record";
/// Key of [`DepGroupsHasher`].
const DEP_GROUPS_KEY: &[u8; 32] = b"kiln-image format 2 dep groups..";
/// Key of [`dep_members_checksum`].
const DEP_MEMBERS_KEY: &[u8; 32] = b"kiln-image format 2 dep members.";
/// Key of [`IndexHasher`].
const INDEX_KEY: &[u8; 32] = b"kiln-image format 2 index tables";

/// Bytes batched before they are handed to the hasher.
const BATCH: usize = 256;

use crate::Digest;

/// A keyed BLAKE3 hasher fed through a fixed-size batch buffer: the digest
/// is the keyed hash of everything passed to [`Input::update`], in order.
struct Input {
    hasher: blake3::Hasher,
    batch: [u8; BATCH],
    batched: usize,
}

impl Input {
    fn new(key: &[u8; 32]) -> Input {
        Input {
            hasher: blake3::Hasher::new_keyed(key),
            batch: [0; BATCH],
            batched: 0,
        }
    }

    fn update(&mut self, bytes: &[u8]) -> &mut Input {
        if let Some(room) = self.batch.get_mut(self.batched..self.batched + bytes.len()) {
            room.copy_from_slice(bytes);
            self.batched += bytes.len();
            return self;
        }
        self.flush();
        if bytes.len() >= BATCH {
            self.hasher.update(bytes);
        } else {
            self.batch[..bytes.len()].copy_from_slice(bytes);
            self.batched = bytes.len();
        }
        self
    }

    fn flush(&mut self) {
        self.hasher.update(&self.batch[..self.batched]);
        self.batched = 0;
    }

    fn finish(mut self) -> [u8; 32] {
        self.flush();
        *self.hasher.finalize().as_bytes()
    }

    fn bytes(&mut self, bytes: &[u8]) {
        self.update(&(bytes.len() as u64).to_le_bytes());
        self.update(bytes);
    }

    fn u32(&mut self, value: u32) {
        self.update(&value.to_le_bytes());
    }

    fn u64(&mut self, value: u64) {
        self.update(&value.to_le_bytes());
    }

    /// A `(start, len)` reference.
    fn span(&mut self, (start, len): (u32, u32)) {
        self.u32(start);
        self.u32(len);
    }
}

/// Checksum of one entry: its record, the records it owns and its text.
///
/// Call order: [`EntryHasher::new`], then [`EntryHasher::dep`] per dep, then
/// per artifact [`EntryHasher::artifact`] followed by
/// [`EntryHasher::entry_point`] per entry point, then
/// [`EntryHasher::finish`].
pub(crate) struct EntryHasher(Input);

/// The fields of an entry record (all but its checksum) and its text region
/// fed to [`EntryHasher::new`].
pub(crate) struct EntryFields<'a> {
    pub owner: &'a [u8; 32],
    pub key: &'a [u8; 32],
    pub min_world: u64,
    pub max_world: u64,
    pub payloads: (u64, u64),
    pub name: (u32, u32),
    pub strings: (u32, u32),
    pub deps: (u32, u32),
    pub artifacts: (u32, u32),
    pub entry_points: (u32, u32),
    pub flags: u32,
    /// The bytes of the text region, hashed once.
    pub text: &'a [u8],
}

/// The fields of one dep record fed to [`EntryHasher::dep`].
pub(crate) struct DepFields<'a> {
    pub fingerprint: &'a [u8; 32],
    pub name: (u32, u32),
    pub group: u32,
    pub member: u32,
}

/// The fields of one artifact descriptor fed to [`EntryHasher::artifact`].
pub(crate) struct ArtifactFields<'a> {
    pub kind: u32,
    pub custom: (u32, u32),
    pub entry_points: (u32, u32),
    pub offset: u64,
    pub len: u64,
    pub hash: &'a [u8; 32],
    pub flags: u32,
}

impl EntryHasher {
    pub(crate) fn new(fields: &EntryFields<'_>) -> Self {
        let mut input = Input::new(ENTRY_KEY);
        input.update(fields.owner).update(fields.key);
        input.u64(fields.min_world);
        input.u64(fields.max_world);
        input.u64(fields.payloads.0);
        input.u64(fields.payloads.1);
        for span in [
            fields.name,
            fields.strings,
            fields.deps,
            fields.artifacts,
            fields.entry_points,
        ] {
            input.span(span);
        }
        input.u32(fields.flags);
        input.bytes(fields.text);
        EntryHasher(input)
    }

    pub(crate) fn dep(&mut self, fields: &DepFields<'_>) {
        self.0.update(fields.fingerprint);
        self.0.span(fields.name);
        self.0.u32(fields.group);
        self.0.u32(fields.member);
    }

    pub(crate) fn artifact(&mut self, fields: &ArtifactFields<'_>) {
        self.0.u32(fields.kind);
        self.0.span(fields.custom);
        self.0.span(fields.entry_points);
        self.0.u64(fields.offset);
        self.0.u64(fields.len);
        self.0.update(fields.hash);
        self.0.u32(fields.flags);
    }

    pub(crate) fn entry_point(&mut self, name: (u32, u32)) {
        self.0.span(name);
    }

    pub(crate) fn finish(self) -> [u8; 32] {
        self.0.finish()
    }
}

/// Checksum of the dependency group table and the group names: per group
/// its name reference, fingerprint, member range and member-list checksum
/// (not the members themselves, which [`dep_members_checksum`] covers per
/// group). Stored in the index root, which the index checksum covers.
pub(crate) struct DepGroupsHasher(Input);

impl DepGroupsHasher {
    pub(crate) fn new(group_count: u32, member_count: u32, names: &[u8]) -> Self {
        let mut input = Input::new(DEP_GROUPS_KEY);
        input.u32(group_count);
        input.u32(member_count);
        input.bytes(names);
        DepGroupsHasher(input)
    }

    pub(crate) fn group(
        &mut self,
        name: (u32, u32),
        fingerprint: &[u8; 32],
        members: (u32, u32),
        members_checksum: &[u8; 32],
    ) {
        self.0.span(name);
        self.0.update(fingerprint);
        self.0.span(members);
        self.0.update(members_checksum);
    }

    pub(crate) fn finish(self) -> [u8; 32] {
        self.0.finish()
    }
}

/// Checksum of one dependency group's member list (entry indices), stored
/// in the group's record and checked when the group's entries are read.
pub(crate) fn dep_members_checksum(members: impl ExactSizeIterator<Item = u32>) -> [u8; 32] {
    let mut input = Input::new(DEP_MEMBERS_KEY);
    input.u64(members.len() as u64);
    for member in members {
        input.u32(member);
    }
    input.finish()
}

/// Checksum of the index root, the owner table, the label table and the
/// metadata text, checked at open.
pub(crate) struct IndexHasher(Input);

impl IndexHasher {
    pub(crate) fn new(root_bytes: &[u8], meta_strings: &[u8]) -> Self {
        let mut input = Input::new(INDEX_KEY);
        input.bytes(root_bytes);
        input.bytes(meta_strings);
        IndexHasher(input)
    }

    pub(crate) fn owner(&mut self, digest: &[u8; 32], label: (u32, u32), entries: (u32, u32)) {
        self.0.update(digest);
        self.0.span(label);
        self.0.span(entries);
    }

    pub(crate) fn buckets(&mut self, buckets: (u32, u32), bits: u32) {
        self.0.span(buckets);
        self.0.u32(bits);
    }

    pub(crate) fn label(&mut self, key: (u32, u32), value: (u32, u32)) {
        self.0.span(key);
        self.0.span(value);
    }

    /// One group of a compressed payload region: its raw and stored spans,
    /// encoding and flags.
    pub(crate) fn payload_group(
        &mut self,
        raw: (u64, u64),
        stored: (u64, u64),
        encoding: u32,
        flags: u32,
    ) {
        for value in [raw.0, raw.1, stored.0, stored.1] {
            self.0.u64(value);
        }
        self.0.u32(encoding);
        self.0.u32(flags);
    }

    pub(crate) fn finish(self) -> Digest {
        Digest(self.0.finish())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Batching never changes the digest: any split of the same bytes into
    /// updates, small or larger than the batch, hashes like one call.
    #[test]
    fn batched_updates_hash_like_one_call() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 251) as u8).collect();
        let expected = *blake3::keyed_hash(ENTRY_KEY, &data).as_bytes();
        for sizes in [
            &[1usize][..],
            &[3, 255, 1],
            &[256],
            &[257, 2],
            &[100, 1000, 7],
        ] {
            let mut input = Input::new(ENTRY_KEY);
            let mut at = 0;
            let mut turn = 0;
            while at < data.len() {
                let n = sizes[turn % sizes.len()].min(data.len() - at);
                input.update(&data[at..at + n]);
                at += n;
                turn += 1;
            }
            assert_eq!(input.finish(), expected, "{sizes:?}");
        }
    }
}
