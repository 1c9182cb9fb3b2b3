//! The rkyv index: flat tables of fixed-size records.
//!
//! Every record is plain data (digests, integers and `(offset, len)`
//! references into other tables or into one string blob), with no nested
//! vectors or strings. That keeps rkyv validation a bounds check per table,
//! and lets each entry be checked on its own, on first access, against the
//! checksum stored in its record. Records have no implicit padding, so the
//! archive bytes are fully determined by the values (images are
//! deterministic).
//!
//! Tables:
//! - `owners`: sorted by digest; each owns a contiguous range of `entries`.
//! - `entries`: sorted by (owner, key).
//! - `key_buckets`: per owner, a radix table over the top bits of the keys,
//!   for the key search (see `search.rs`).
//! - `deps`, `artifacts`, `entry_points`: referenced by entry records.
//! - `dep_groups` + `dep_members`: the inverse dependency index, one group per
//!   distinct (dep name, fingerprint), sorted, listing the entries carrying it.
//!   Two levels of checksum keep its checks proportional to what is read:
//!   `Index::dep_groups_checksum` covers the group table (O(groups), on first
//!   use), and each group's `members_checksum` covers its member list
//!   (checked when that group's entries are first read, then remembered).
//!   Every byte of `dep_members` belongs to exactly one group (the ranges
//!   are checked to be contiguous), so a flipped bit anywhere in the
//!   dependency index fails one of the two before an entry index is returned.
//! - `labels`, `producer_*`: the image metadata.
//! - `strings`: every name, label and tag, UTF-8, referenced by `StrRef`.
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

use rkyv::{Archive, Serialize};

/// A string in the `strings` blob.
#[derive(Archive, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct StrRef {
    pub offset: u32,
    pub len: u32,
}

/// A range of records in another table.
#[derive(Archive, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Span {
    pub start: u32,
    pub len: u32,
}

/// One owner and the contiguous range of entries it owns.
#[derive(Archive, Serialize, Debug)]
pub(crate) struct OwnerRecord {
    pub digest: [u8; 32],
    pub label: StrRef,
    pub entries: Span,
    /// This owner's radix table in `key_buckets` (`2^bucket_bits + 1` values).
    pub buckets: Span,
    pub bucket_bits: u32,
}

/// One entry. `checksum` covers every field and everything the entry
/// references (owner digest, name, deps, artifact descriptors, entry points).
#[derive(Archive, Serialize, Debug)]
pub(crate) struct EntryRecord {
    pub min_world: u64,
    pub max_world: u64,
    pub key: [u8; 32],
    pub checksum: [u8; 32],
    pub name: StrRef,
    pub deps: Span,
    pub artifacts: Span,
    pub owner: u32,
    /// Reserved, zero in format 1.
    pub flags: u32,
}

/// One backedge of an entry.
#[derive(Archive, Serialize, Debug)]
pub(crate) struct DepRecord {
    pub fingerprint: [u8; 32],
    pub name: StrRef,
}

/// Kind tag of a custom artifact kind; built-in kinds use their position in
/// [`crate::ArtifactKind::BUILT_IN`].
pub(crate) const CUSTOM_KIND: u32 = 5;

/// One artifact: where its payload lies in the payload region (relative to
/// the region start) and the payload's BLAKE3.
#[derive(Archive, Serialize, Debug)]
pub(crate) struct ArtifactRecord {
    pub offset: u64,
    pub len: u64,
    pub hash: [u8; 32],
    pub kind: u32,
    pub custom: StrRef,
    pub entry_points: Span,
    /// Reserved, zero in format 1.
    pub flags: u32,
}

/// One distinct (dep name, fingerprint) and the entries that carry it.
/// `members_checksum` covers the group's slice of `dep_members`; the record
/// itself (name, fingerprint, range, `members_checksum`) is covered by
/// `Index::dep_groups_checksum`.
#[derive(Archive, Serialize, Debug)]
pub(crate) struct DepGroupRecord {
    pub fingerprint: [u8; 32],
    pub members_checksum: [u8; 32],
    pub name: StrRef,
    pub members: Span,
}

/// One metadata label.
#[derive(Archive, Serialize, Debug)]
pub(crate) struct LabelRecord {
    pub key: StrRef,
    pub value: StrRef,
}

/// The root of the index archive.
#[derive(Archive, Serialize, Debug, Default)]
pub(crate) struct Index {
    pub owners: Vec<OwnerRecord>,
    pub entries: Vec<EntryRecord>,
    /// Per owner (see `OwnerRecord::buckets`): for each value of the top
    /// `bucket_bits` bits of a key, the first entry of the owner (relative
    /// to its range) whose key has top bits not below it, plus the owner's
    /// entry count. Not covered by a checksum: a wrong bucket can only make
    /// a lookup miss, since the record's full key is compared.
    pub key_buckets: Vec<u32>,
    pub deps: Vec<DepRecord>,
    pub artifacts: Vec<ArtifactRecord>,
    pub entry_points: Vec<StrRef>,
    pub dep_groups: Vec<DepGroupRecord>,
    pub dep_members: Vec<u32>,
    pub labels: Vec<LabelRecord>,
    pub strings: Vec<u8>,
    pub producer_name: StrRef,
    pub producer_version: StrRef,
    /// Covers the `dep_groups` table (each group's name, fingerprint, member
    /// range and member checksum, not the member lists): checked on first
    /// use of the dependency index, in O(groups). Each group's member list
    /// is checked against its own `members_checksum` when it is first read.
    /// This root field is covered by the index checksum in the header.
    pub dep_groups_checksum: [u8; 32],
}

// No implicit padding anywhere: field sizes add up to the record size.
const _: () = {
    assert!(size_of::<ArchivedStrRef>() == 8);
    assert!(size_of::<ArchivedSpan>() == 8);
    assert!(size_of::<ArchivedOwnerRecord>() == 32 + 8 + 8 + 8 + 4);
    assert!(size_of::<ArchivedEntryRecord>() == 8 + 8 + 32 + 32 + 8 + 8 + 8 + 4 + 4);
    assert!(size_of::<ArchivedDepRecord>() == 32 + 8);
    assert!(size_of::<ArchivedArtifactRecord>() == 8 + 8 + 32 + 4 + 8 + 8 + 4);
    assert!(size_of::<ArchivedDepGroupRecord>() == 32 + 32 + 8 + 8);
    assert!(size_of::<ArchivedLabelRecord>() == 8 + 8);
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
