//! The rkyv index: flat tables of fixed-size records.
//!
//! Every record is plain data (digests, integers and `(offset, len)`
//! references into other tables or into one of three string blobs), with no
//! nested vectors or strings. That keeps rkyv validation a bounds check per
//! table, and lets each entry be checked on its own, on first access, against
//! the checksum stored in its record. Records have no implicit padding, so
//! the archive bytes are fully determined by the values (images are
//! deterministic).
//!
//! Tables:
//! - `owners`: sorted by digest; each owns a contiguous range of `entries`.
//! - `entries`: sorted by (owner, key).
//! - `blocks`: one record per [`BLOCK_ENTRIES`] entries: where the block's
//!   records, strings and payloads start (see *Nothing is shared* below).
//! - `key_buckets`: per owner, a radix table over the top bits of the keys,
//!   for the key search (see `search.rs`).
//! - `deps`, `artifacts`, `entry_points`: owned by entry records.
//! - `dep_groups` + `dep_members`: the inverse dependency index, one group per
//!   distinct (dep name, fingerprint), sorted, listing the entries carrying it.
//!   Two levels of checksum keep its checks proportional to what is read:
//!   `Index::dep_groups_checksum` covers the group table and the group names
//!   (O(groups + names), on first use), and each group's `members_checksum`
//!   covers its member list (checked when that group's entries are first
//!   read, then remembered). Every byte of `dep_members` belongs to exactly
//!   one group (the ranges are checked to be contiguous), so a flipped bit
//!   anywhere in the dependency index fails one of the two before an entry
//!   index is returned. Each dep record names the group and the position in
//!   it that list its entry, so an entry's check confirms in O(1) per dep
//!   that the index lists it (see `entry.rs`).
//! - `payload_groups`: empty when the payload region is stored as entries
//!   see it (a plain image); otherwise how it is stored: groups that tile
//!   the region entries see (offsets in every record above are in it), each
//!   stored as is or as one zstd frame (see `groups.rs`). Covered by the
//!   index checksum and checked at open, in O(groups).
//! - `labels`, `producer_*`: the image metadata.
//! - `strings`: the entries' text (names, dep names, custom kinds, entry
//!   points), one region per entry; `group_names`: one name per group, in
//!   group order; `meta_strings`: owner labels, then the producer, then the
//!   metadata labels. All UTF-8.
//!
//! # Nothing is shared
//!
//! A reader's work must grow with the bytes it is given, whatever they say.
//! If two records could reference the same bytes, a small image could make a
//! reader hash, validate or copy one large string (or payload, or dep list)
//! once per reference: thousands of times its own size. So no two records
//! share anything, and each reference is checked in O(1):
//!
//! - Every text reference starts exactly where the previous one of its blob
//!   ended (entry text within the entry's region, group names in group
//!   order, metadata text in the order above), so each byte of text belongs
//!   to one reference. The writer therefore stores a string once per use,
//!   not once per distinct value.
//! - Each entry owns a contiguous range of `deps`, `artifacts`,
//!   `entry_points`, `strings` and of the payload region; an entry's
//!   artifacts own consecutive ranges of its entry points and its payload
//!   range, in order. Consecutive entries' ranges follow each other. A
//!   global check of that takes a pass over every entry, which an open must
//!   not cost; instead the `blocks` table records where every
//!   [`BLOCK_ENTRIES`]-th entry's ranges start. The block table is checked
//!   to ascend within the tables in two levels (every 64th record on first
//!   use, O(entries / 4096); a group of 64 records on the first access to
//!   one of its entries), and a block's entries are checked to tile exactly
//!   the block's ranges on the first access to one of them (64 entry
//!   records; see `partition.rs`). Two
//!   entries that pass these checks therefore never share a record, a byte
//!   of text or a byte of payload, and the checks of every entry together
//!   read each byte once.
//!
//! Owner labels are covered by the index checksum (checked at every open),
//! not by each entry's checksum. That is deliberate: a label is display text
//! only. Lookups, merges and deduplication go by the owner digest, which
//! every entry checksum covers (and the owner table is sorted and checked by
//! digest), so a label can never make a lookup return another owner's
//! entry. Folding the label into each entry's checksum would cost a string
//! hash per entry check for no lookup guarantee. What this leaves open is a
//! forged image (checksums recomputed after a change) carrying another label
//! for the same digest: anything that decides by label alone (for example an
//! owner filter) must treat the label as untrusted text.
//!
//! The owned types are public (through `fuzz_support::forge`, with the
//! feature `fuzzing`) so
//! that tests can forge images with any record values; nothing else uses
//! them outside the crate.

use rkyv::{Archive, Deserialize, Serialize};

/// Entries per record of the `blocks` table.
pub const BLOCK_ENTRIES: usize = 64;

/// A string in one of the string blobs.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StrRef {
    /// Position of its first byte in the blob.
    pub offset: u32,
    /// Length in bytes.
    pub len: u32,
}

/// A range of records in another table.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    /// First record.
    pub start: u32,
    /// Number of records.
    pub len: u32,
}

/// A range of the payload region, relative to its start.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadSpan {
    /// First byte.
    pub offset: u64,
    /// Length in bytes.
    pub len: u64,
}

/// One owner and the contiguous range of entries it owns.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct OwnerRecord {
    /// Digest of the compiler configuration.
    pub digest: [u8; 32],
    /// Its label, in `meta_strings`.
    pub label: StrRef,
    /// The entries it owns.
    pub entries: Span,
    /// This owner's radix table in `key_buckets` (`2^bucket_bits + 1` values).
    pub buckets: Span,
    /// Top key bits the radix table splits on.
    pub bucket_bits: u32,
}

/// One entry. `checksum` covers every field, the records the entry owns
/// (deps, artifact descriptors, entry points) and its text region.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct EntryRecord {
    /// First valid world.
    pub min_world: u64,
    /// Last valid world.
    pub max_world: u64,
    /// The part of the payload region holding its artifacts' payloads.
    pub payloads: PayloadSpan,
    /// Key digest.
    pub key: [u8; 32],
    /// Checksum over the entry (see `checksum.rs`).
    pub checksum: [u8; 32],
    /// Its name: the start of its text region.
    pub name: StrRef,
    /// Its text region in `strings`: name, dep names, then per artifact its
    /// custom kind and entry points, back to back.
    pub strings: Span,
    /// Its deps.
    pub deps: Span,
    /// Its artifacts.
    pub artifacts: Span,
    /// The entry points of all its artifacts, artifact by artifact.
    pub entry_points: Span,
    /// Index of its owner in `owners`.
    pub owner: u32,
    /// Reserved, zero.
    pub flags: u32,
}

/// Where the ranges of every [`BLOCK_ENTRIES`]-th entry start.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BlockRecord {
    /// In the payload region (the block's payloads lie at or after it).
    pub payload: u64,
    /// In `strings`.
    pub strings: u32,
    /// In `deps`.
    pub deps: u32,
    /// In `artifacts`.
    pub artifacts: u32,
    /// In `entry_points`.
    pub entry_points: u32,
}

/// One backedge of an entry.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct DepRecord {
    /// Fingerprint of the definition.
    pub fingerprint: [u8; 32],
    /// Name of the definition, in the entry's text region.
    pub name: StrRef,
    /// The dependency group of (name, fingerprint).
    pub group: u32,
    /// Position of the entry in that group's member list.
    pub member: u32,
}

/// Kind tag of a custom artifact kind; built-in kinds use their position in
/// [`crate::ArtifactKind::BUILT_IN`].
pub const CUSTOM_KIND: u32 = 6;

/// One artifact: where its payload lies in the payload region (relative to
/// the region start) and the payload's BLAKE3.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct ArtifactRecord {
    /// Payload start in the payload region (a multiple of 64).
    pub offset: u64,
    /// Payload length.
    pub len: u64,
    /// BLAKE3 of the payload.
    pub hash: [u8; 32],
    /// Kind tag (see [`CUSTOM_KIND`]).
    pub kind: u32,
    /// The custom kind's tag (empty for built-in kinds), in the entry's text.
    pub custom: StrRef,
    /// Its entry points.
    pub entry_points: Span,
    /// Reserved, zero.
    pub flags: u32,
}

/// One distinct (dep name, fingerprint) and the entries that carry it.
/// `members_checksum` covers the group's slice of `dep_members`; the record
/// itself (name, fingerprint, range, `members_checksum`) and the group names
/// are covered by `Index::dep_groups_checksum`.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct DepGroupRecord {
    /// Fingerprint of the definition.
    pub fingerprint: [u8; 32],
    /// Checksum of its member list.
    pub members_checksum: [u8; 32],
    /// Name of the definition, in `group_names`.
    pub name: StrRef,
    /// Its member list in `dep_members`: ascending entry indices.
    pub members: Span,
}

/// How one group of the payload region is stored: stored as is.
pub const GROUP_STORED: u32 = 0;
/// How one group of the payload region is stored: one zstd frame.
pub const GROUP_ZSTD: u32 = 1;

/// One group of the payload region of a compressed image: a range of the
/// region entries see (`raw`), and where its bytes are stored (`stored`, in
/// the payload region the header describes), as is or compressed.
#[derive(Archive, Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadGroupRecord {
    /// Its part of the payload region entries see: starts at a multiple of
    /// 64, where the previous group's ends.
    pub raw: PayloadSpan,
    /// Its bytes in the stored payload region: at a multiple of 64, after
    /// the previous group's.
    pub stored: PayloadSpan,
    /// [`GROUP_STORED`] or [`GROUP_ZSTD`].
    pub encoding: u32,
    /// Reserved, zero.
    pub flags: u32,
}

/// One metadata label.
#[derive(Archive, Serialize, Deserialize, Clone, Debug)]
pub struct LabelRecord {
    /// Key, in `meta_strings`.
    pub key: StrRef,
    /// Value, in `meta_strings`.
    pub value: StrRef,
}

/// The root of the index archive.
#[derive(Archive, Serialize, Deserialize, Clone, Debug, Default)]
pub struct Index {
    /// Owners, sorted by digest.
    pub owners: Vec<OwnerRecord>,
    /// Entries, sorted by (owner, key).
    pub entries: Vec<EntryRecord>,
    /// One record per [`BLOCK_ENTRIES`] entries.
    pub blocks: Vec<BlockRecord>,
    /// Per owner (see `OwnerRecord::buckets`): for each value of the top
    /// `bucket_bits` bits of a key, the first entry of the owner (relative
    /// to its range) whose key has top bits not below it, plus the owner's
    /// entry count. Not covered by a checksum: a wrong bucket can only make
    /// a lookup miss, since the record's full key is compared (and an entry
    /// a lookup cannot reach fails its own check).
    pub key_buckets: Vec<u32>,
    /// Deps of all entries, entry by entry.
    pub deps: Vec<DepRecord>,
    /// Artifacts of all entries, entry by entry.
    pub artifacts: Vec<ArtifactRecord>,
    /// Entry points of all artifacts, artifact by artifact.
    pub entry_points: Vec<StrRef>,
    /// The dependency groups, sorted by (name, fingerprint).
    pub dep_groups: Vec<DepGroupRecord>,
    /// The groups' member lists, group by group.
    pub dep_members: Vec<u32>,
    /// Metadata labels, sorted by key.
    pub labels: Vec<LabelRecord>,
    /// How the payload region is stored: empty for a plain image (stored as
    /// entries see it), else groups that tile it (see `groups.rs`).
    pub payload_groups: Vec<PayloadGroupRecord>,
    /// The entries' text, one region per entry.
    pub strings: Vec<u8>,
    /// The groups' names, one per group, in group order.
    pub group_names: Vec<u8>,
    /// Owner labels, producer name and version, metadata labels.
    pub meta_strings: Vec<u8>,
    /// Producer name, in `meta_strings`.
    pub producer_name: StrRef,
    /// Producer version, in `meta_strings`.
    pub producer_version: StrRef,
    /// Covers the `dep_groups` table (each group's name, fingerprint, member
    /// range and member checksum, not the member lists) and `group_names`:
    /// checked on first use of the dependency index, in O(groups + names).
    /// Each group's member list is checked against its own
    /// `members_checksum` when it is first read. This root field is covered
    /// by the index checksum in the header.
    pub dep_groups_checksum: [u8; 32],
}

// No implicit padding anywhere: field sizes add up to the record size.
const _: () = {
    assert!(size_of::<ArchivedStrRef>() == 8);
    assert!(size_of::<ArchivedSpan>() == 8);
    assert!(size_of::<ArchivedPayloadSpan>() == 16);
    assert!(size_of::<ArchivedOwnerRecord>() == 32 + 8 + 8 + 8 + 4);
    assert!(size_of::<ArchivedEntryRecord>() == 8 + 8 + 16 + 32 + 32 + 8 + 8 + 8 + 8 + 8 + 4 + 4);
    assert!(size_of::<ArchivedBlockRecord>() == 8 + 4 * 4);
    assert!(size_of::<ArchivedDepRecord>() == 32 + 8 + 4 + 4);
    assert!(size_of::<ArchivedArtifactRecord>() == 8 + 8 + 32 + 4 + 8 + 8 + 4);
    assert!(size_of::<ArchivedDepGroupRecord>() == 32 + 32 + 8 + 8);
    assert!(size_of::<ArchivedLabelRecord>() == 8 + 8);
    assert!(size_of::<ArchivedPayloadGroupRecord>() == 16 + 16 + 4 + 4);
};

impl ArchivedStrRef {
    pub(crate) fn range(&self) -> Option<std::ops::Range<usize>> {
        to_range(self.offset.to_native(), self.len.to_native())
    }
}

impl ArchivedSpan {
    pub(crate) fn range(&self) -> Option<std::ops::Range<usize>> {
        to_range(self.start.to_native(), self.len.to_native())
    }

    pub(crate) fn count(&self) -> u32 {
        self.len.to_native()
    }
}

fn to_range(start: u32, len: u32) -> Option<std::ops::Range<usize>> {
    let start = usize::try_from(start).ok()?;
    let len = usize::try_from(len).ok()?;
    Some(start..start.checked_add(len)?)
}

/// Number of block records for `entries` entries.
pub(crate) fn block_count(entries: usize) -> usize {
    entries.div_ceil(BLOCK_ENTRIES)
}
