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
//! - `labels`, `producer_*`: the image metadata.
//! - `strings`: every name, label and tag, UTF-8, referenced by `StrRef`.

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
#[derive(Archive, Serialize, Debug)]
pub(crate) struct DepGroupRecord {
    pub fingerprint: [u8; 32],
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
    /// Covers `dep_groups` and `dep_members`; checked on first use of the
    /// dependency index.
    pub dep_index_checksum: [u8; 32],
}

// No implicit padding anywhere: field sizes add up to the record size.
const _: () = {
    assert!(size_of::<ArchivedStrRef>() == 8);
    assert!(size_of::<ArchivedSpan>() == 8);
    assert!(size_of::<ArchivedOwnerRecord>() == 32 + 8 + 8 + 8 + 4);
    assert!(size_of::<ArchivedEntryRecord>() == 8 + 8 + 32 + 32 + 8 + 8 + 8 + 4 + 4);
    assert!(size_of::<ArchivedDepRecord>() == 32 + 8);
    assert!(size_of::<ArchivedArtifactRecord>() == 8 + 8 + 32 + 4 + 8 + 8 + 4);
    assert!(size_of::<ArchivedDepGroupRecord>() == 32 + 8 + 8);
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
