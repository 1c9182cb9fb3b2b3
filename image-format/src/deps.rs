//! The inverse dependency index: for each distinct (dep name, fingerprint),
//! the entries that carry it. Lets a cache find stale entries at merge and
//! the dependents of a redefined name in O(groups + matches).
//!
//! Its checks are proportional to what is read. The group table (name,
//! fingerprint, member range and member checksum per group) and the group
//! names are checked against `dep_groups_checksum` on first use, in
//! O(groups + names), and never read a member list. Each group's member
//! list is checked against the group's own checksum the first time its
//! entries are read, and remembered. Every member belongs to exactly one
//! group (ranges are contiguous), so a flipped bit anywhere in the index
//! fails one of the two checks before any entry index is returned.
//!
//! The index must agree with the entries' own deps, or revalidation and
//! invalidation (which go by the index) would skip an entry. An entry's
//! first access checks that the index lists it under each of its deps
//! (`entry.rs`), so an entry the index leaves out is never served; that
//! costs O(1) per dep (each dep record names its group and its position
//! there), where checking the whole index against every entry at open
//! would cost a pass over every entry. An index that lists an entry under a
//! definition the entry does not carry can only make a cache drop or close
//! that entry (a miss); [`Verification::Full`](crate::Verification::Full)
//! rejects it ([`ReadError::DepNotCarried`]).

use rkyv::primitive::ArchivedU32;

use crate::checksum::{DepGroupsHasher, dep_members_checksum};
use crate::layout::{ArchivedDepGroupRecord, ArchivedIndex};
use crate::{Digest, Image, ReadError};

/// One distinct (dep name, fingerprint) and the entries that carry it.
///
/// Its name, fingerprint and length come from the group table (checked when
/// the dependency index is first used); its entry list is checked against
/// its own checksum on the first [`entries`](DepGroup::entries) call.
#[derive(Clone, Copy)]
pub struct DepGroup<'a> {
    image: &'a Image,
    position: usize,
    record: &'a ArchivedDepGroupRecord,
    name: &'a str,
}

impl<'a> DepGroup<'a> {
    fn new(image: &'a Image, position: usize, record: &'a ArchivedDepGroupRecord) -> DepGroup<'a> {
        DepGroup {
            image,
            position,
            record,
            name: image.group_str(&record.name).unwrap_or_default(),
        }
    }

    /// Name of the definition.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its fingerprint when the entries were built.
    pub fn fingerprint(&self) -> Digest {
        Digest(self.record.fingerprint)
    }

    /// Number of entries in the group, from the group table.
    pub fn len(&self) -> usize {
        self.record.members.count() as usize
    }

    /// Whether the group is empty (never, in a well-formed image).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Indices of the entries carrying this dep, ascending. The group's
    /// entry list is checked against its checksum on first use (O(group
    /// size)) and the result remembered; an error when it is corrupt (a
    /// corrupt list is never returned, nor mistaken for an empty one).
    ///
    /// Every entry that carries this dep and passes its own check is listed:
    /// an entry's check fails when the index leaves it out. A forged index
    /// may also list entries that do not carry the dep; a cache then drops
    /// or closes them (a miss). [`Verification::Full`](crate::Verification::Full)
    /// rejects such an index.
    ///
    /// # Errors
    /// [`ReadError::DepIndex`] when the group's entry list fails its checksum
    /// or does not ascend; [`ReadError::OutOfRange`] when it lies outside the
    /// member table or names an entry the image does not have.
    pub fn entries(&self) -> Result<impl ExactSizeIterator<Item = usize> + use<'a>, ReadError> {
        let members = self
            .image
            .checked_members(self.position, self.record, false)?;
        Ok(members.iter().map(|member| member.to_native() as usize))
    }
}

impl std::fmt::Debug for DepGroup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DepGroup")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint())
            .field("entries", &self.entries().map(Iterator::collect::<Vec<_>>))
            .finish()
    }
}

impl Image {
    /// Every distinct (dep name, fingerprint), sorted by name then
    /// fingerprint. The group table is checked against its checksum on
    /// first use, in O(groups + names); iterating the groups reads no entry
    /// list (each group's list is checked when its entries are read).
    ///
    /// # Errors
    /// [`ReadError::DepIndex`] when the group table fails its checks (names,
    /// order, member ranges, checksum).
    pub fn dep_groups(
        &self,
    ) -> Result<impl ExactSizeIterator<Item = DepGroup<'_>> + '_, ReadError> {
        self.dep_index_checked()?;
        Ok(self
            .index()
            .dep_groups
            .iter()
            .enumerate()
            .map(|(position, record)| DepGroup::new(self, position, record)))
    }

    /// The groups of the definition `name` (one per fingerprint it was
    /// built with), found by binary search: O(log groups + matches).
    ///
    /// # Errors
    /// [`ReadError::DepIndex`] when the group table fails its checks (names,
    /// order, member ranges, checksum).
    pub fn dep_groups_named<'s>(
        &'s self,
        name: &'s str,
    ) -> Result<impl Iterator<Item = DepGroup<'s>> + 's, ReadError> {
        self.dep_index_checked()?;
        let groups = self.index().dep_groups.as_slice();
        let first = groups.partition_point(|group| self.group_name_bytes(group) < name.as_bytes());
        Ok(groups
            .get(first..)
            .unwrap_or_default()
            .iter()
            .enumerate()
            .map(move |(i, record)| DepGroup::new(self, first + i, record))
            .take_while(move |group| group.name == name))
    }

    /// Indices of the entries that depend on the definition `name` (with any
    /// fingerprint), found by binary search in the dependency index:
    /// O(log groups + matches). The matching groups' entry lists are checked
    /// before anything is returned.
    ///
    /// # Errors
    /// The errors of [`Image::dep_groups`] and [`DepGroup::entries`]: the
    /// group table or a matching group's entry list fails its checks.
    pub fn dependents_of<'s>(
        &'s self,
        name: &'s str,
    ) -> Result<impl Iterator<Item = usize> + 's, ReadError> {
        for group in self.dep_groups_named(name)? {
            let _verified = group.entries()?;
        }
        // Every matching list passed its check above (and is remembered), so
        // none is left out below.
        Ok(self
            .dep_groups_named(name)?
            .flat_map(|group| group.entries().into_iter().flatten()))
    }

    fn dep_index_checked(&self) -> Result<(), ReadError> {
        if self.dep_index_state.is_set(0) {
            return Ok(());
        }
        self.check_dep_groups()
    }

    /// Checks the whole dependency index now, whatever was remembered: the
    /// group table and every group's entry list.
    pub(crate) fn check_dep_index(&self) -> Result<(), ReadError> {
        self.check_dep_groups()?;
        for (position, record) in self.index().dep_groups.iter().enumerate() {
            self.checked_members(position, record, true)?;
        }
        Ok(())
    }

    /// Checks the group table: names (each right after the previous one in
    /// the name table, UTF-8), order, contiguous member ranges covering the
    /// member table, and the table checksum. O(groups + names); reads no
    /// member list.
    fn check_dep_groups(&self) -> Result<(), ReadError> {
        let index = self.index();
        let corrupt = |what: String| ReadError::DepIndex(what);
        let groups = &index.dep_groups;
        let names = index.group_names.as_slice();
        let member_count = index.dep_members.len();
        let mut previous: Option<(&[u8], &[u8; 32])> = None;
        let mut next_member = 0usize;
        let mut next_name = 0usize;
        for (position, group) in groups.iter().enumerate() {
            let (start, len) = (group.name.offset.to_native(), group.name.len.to_native());
            if start as usize != next_name {
                return Err(ReadError::Overlap(format!(
                    "group {position}'s name is at {start}+{len}, where the group names continue at {next_name}"
                )));
            }
            let Some(range) = group.name.range().filter(|range| range.end <= names.len()) else {
                return Err(ReadError::OutOfRange {
                    what: format!("group {position}'s name"),
                    start: u64::from(start),
                    len: u64::from(len),
                    table: "group name table",
                    limit: names.len() as u64,
                });
            };
            next_name = range.end;
            let name = &names[range];
            let text = std::str::from_utf8(name)
                .map_err(|_| corrupt(format!("group {position}'s name is not UTF-8")))?;
            let current = (name, &group.fingerprint);
            if previous.is_some_and(|previous| previous >= current) {
                return Err(corrupt(
                    "groups are not sorted by (name, fingerprint)".into(),
                ));
            }
            previous = Some(current);
            let members = group.members.range().unwrap_or(usize::MAX..usize::MAX);
            if members.start != next_member || members.is_empty() {
                return Err(corrupt(format!(
                    "the members of {text:?} are not the next non-empty range of the member table"
                )));
            }
            if members.end > member_count {
                return Err(ReadError::OutOfRange {
                    what: format!("the members of group {position} ({text:?})"),
                    start: group.members.start.to_native().into(),
                    len: group.members.len.to_native().into(),
                    table: "member table",
                    limit: member_count as u64,
                });
            }
            next_member = members.end;
        }
        if next_member != member_count {
            return Err(corrupt(format!(
                "groups cover {next_member} members of {member_count}"
            )));
        }
        if next_name != names.len() {
            return Err(corrupt(format!(
                "group names end at {next_name}, the name table at {}",
                names.len()
            )));
        }
        if dep_groups_checksum(index) != index.dep_groups_checksum {
            return Err(corrupt("group table checksum mismatch".into()));
        }
        self.dep_index_state.set(0);
        Ok(())
    }

    /// The bytes of a group's name, or none if it lies outside the table
    /// (the group table check rejects that).
    fn group_name_bytes(&self, group: &ArchivedDepGroupRecord) -> &[u8] {
        group
            .name
            .range()
            .and_then(|range| self.index().group_names.as_slice().get(range))
            .unwrap_or_default()
    }

    /// The member list of group `position`, checked against the group's
    /// checksum on first use (and remembered; every time with `force`):
    /// ascending entry indices. Callers reach a group only through the
    /// checked group table.
    fn checked_members<'s>(
        &'s self,
        position: usize,
        record: &'s ArchivedDepGroupRecord,
        force: bool,
    ) -> Result<&'s [ArchivedU32], ReadError> {
        let index = self.index();
        let name = || self.group_str(&record.name).unwrap_or_default();
        let members = record
            .members
            .range()
            .and_then(|range| index.dep_members.as_slice().get(range))
            .ok_or_else(|| {
                ReadError::DepIndex(format!(
                    "the members of {:?} lie outside the member table",
                    name()
                ))
            })?;
        if !force && self.dep_group_state.is_set(position) {
            return Ok(members);
        }
        if dep_members_checksum(members.iter().map(|member| member.to_native()))
            != record.members_checksum
        {
            return Err(ReadError::DepIndex(format!(
                "the entry list of {:?} does not match its checksum",
                name()
            )));
        }
        let entry_count = index.entries.len();
        let mut previous: Option<u32> = None;
        for member in members {
            let member = member.to_native();
            if member as usize >= entry_count {
                return Err(ReadError::OutOfRange {
                    what: format!("a member of {:?}", name()),
                    start: member.into(),
                    len: 1,
                    table: "entry table",
                    limit: entry_count as u64,
                });
            }
            if let Some(before) = previous.filter(|&before| before >= member) {
                return Err(ReadError::DepIndex(format!(
                    "the entry list of {:?} holds {member} after {before}: entries must ascend",
                    name(),
                )));
            }
            previous = Some(member);
        }
        self.dep_group_state.set(position);
        Ok(members)
    }
}

/// The checksum of the group table and the group names (see
/// [`DepGroupsHasher`]): O(groups + names).
pub(crate) fn dep_groups_checksum(index: &ArchivedIndex) -> [u8; 32] {
    let groups = &index.dep_groups;
    let mut hasher = DepGroupsHasher::new(
        groups.len() as u32,
        index.dep_members.len() as u32,
        index.group_names.as_slice(),
    );
    for group in groups.iter() {
        hasher.group(
            (group.name.offset.to_native(), group.name.len.to_native()),
            &group.fingerprint,
            (
                group.members.start.to_native(),
                group.members.len.to_native(),
            ),
            &group.members_checksum,
        );
    }
    hasher.finish()
}
