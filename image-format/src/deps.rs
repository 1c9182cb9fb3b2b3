//! The inverse dependency index: for each distinct (dep name, fingerprint),
//! the entries that carry it. Lets a cache find stale entries at merge and
//! the dependents of a redefined name in O(groups + matches).
//!
//! Its checks are proportional to what is read. The group table (name,
//! fingerprint, member range and member checksum per group) is checked
//! against `dep_groups_checksum` on first use, in O(groups), and never reads
//! a member list. Each group's member list is checked against the group's
//! own checksum the first time its entries are read, and remembered. Every
//! member belongs to exactly one group (ranges are contiguous), so a flipped
//! bit anywhere in the index fails one of the two checks before any entry
//! index is returned.

use rkyv::primitive::ArchivedU32;

use crate::checksum::{DepGroupsHasher, dep_members_checksum};
use crate::layout::ArchivedDepGroupRecord;
use crate::{Digest, Image, ImageError};

/// One distinct (dep name, fingerprint) and the entries that carry it.
///
/// Its name, fingerprint and length come from the group table (checked when
/// the dependency index is first used); its entry list is checked against
/// its own checksum on the first [`entries`](DepGroup::entries) or
/// [`entries`](DepGroup::entries) call.
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
            name: image.str_at(&record.name).unwrap_or_default(),
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
    /// # Errors
    /// [`ImageError::IndexChecksum`] when the group's entry list fails its
    /// checksum.
    pub fn entries(&self) -> Result<impl ExactSizeIterator<Item = usize> + use<'a>, ImageError> {
        let members = self.image.checked_members(self.position, self.record)?;
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
    /// first use, in O(groups); iterating the groups reads no entry list
    /// (each group's list is checked when its entries are read).
    ///
    /// # Errors
    /// [`ImageError::IndexChecksum`] when the group table fails its checksum.
    pub fn dep_groups(
        &self,
    ) -> Result<impl ExactSizeIterator<Item = DepGroup<'_>> + '_, ImageError> {
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
    /// [`ImageError::IndexChecksum`] when the group table fails its checksum.
    pub fn dep_groups_named<'s>(
        &'s self,
        name: &'s str,
    ) -> Result<impl Iterator<Item = DepGroup<'s>> + 's, ImageError> {
        self.dep_index_checked()?;
        let groups = self.index().dep_groups.as_slice();
        let first =
            groups.partition_point(|group| self.str_at(&group.name).unwrap_or_default() < name);
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
    /// [`ImageError::IndexChecksum`] when the group table or a matching
    /// group's entry list fails its checksum.
    pub fn dependents_of<'s>(
        &'s self,
        name: &'s str,
    ) -> Result<impl Iterator<Item = usize> + 's, ImageError> {
        for group in self.dep_groups_named(name)? {
            let _verified = group.entries()?;
        }
        // Every matching list passed its check above (and is remembered), so
        // none is left out below.
        Ok(self
            .dep_groups_named(name)?
            .flat_map(|group| group.entries().into_iter().flatten()))
    }

    fn dep_index_checked(&self) -> Result<(), ImageError> {
        if self.dep_index_state.is_set(0) {
            return Ok(());
        }
        self.check_dep_groups()
    }

    /// Checks the whole dependency index now: the group table and every
    /// group's entry list.
    pub(crate) fn check_dep_index(&self) -> Result<(), ImageError> {
        self.check_dep_groups()?;
        for (position, record) in self.index().dep_groups.iter().enumerate() {
            self.checked_members(position, record)?;
        }
        Ok(())
    }

    /// Checks the group table: names, order, contiguous member ranges
    /// covering the member table, and the table checksum. O(groups); reads
    /// no member list.
    fn check_dep_groups(&self) -> Result<(), ImageError> {
        let index = self.index();
        let corrupt = |what: String| ImageError::DepIndex(what);
        let groups = &index.dep_groups;
        let member_count = index.dep_members.len();
        let mut hasher = DepGroupsHasher::new(groups.len() as u32, member_count as u32);
        let mut previous: Option<(&str, &[u8; 32])> = None;
        let mut next_member = 0usize;
        for group in groups.iter() {
            let name = self.str_at(&group.name).ok_or_else(|| {
                corrupt("a group name lies outside the string table or is not UTF-8".into())
            })?;
            let current = (name, &group.fingerprint);
            if previous.is_some_and(|previous| previous >= current) {
                return Err(corrupt(
                    "groups are not sorted by (name, fingerprint)".into(),
                ));
            }
            previous = Some(current);
            let range = group.members.range().unwrap_or(usize::MAX..usize::MAX);
            if range.start != next_member || range.is_empty() || range.end > member_count {
                return Err(corrupt(format!(
                    "the members of {name:?} are not the next non-empty range of the member table"
                )));
            }
            next_member = range.end;
            hasher.group(
                name.as_bytes(),
                &group.fingerprint,
                group.members.start.to_native(),
                group.members.len.to_native(),
                &group.members_checksum,
            );
        }
        if next_member != member_count {
            return Err(corrupt(format!(
                "groups cover {next_member} members of {member_count}"
            )));
        }
        if hasher.finish() != index.dep_groups_checksum {
            return Err(corrupt("group table checksum mismatch".into()));
        }
        self.dep_index_state.set(0);
        Ok(())
    }

    /// The member list of group `position`, checked against the group's
    /// checksum on first use (and remembered): ascending entry indices.
    /// Callers reach a group only through the checked group table.
    fn checked_members<'s>(
        &'s self,
        position: usize,
        record: &'s ArchivedDepGroupRecord,
    ) -> Result<&'s [ArchivedU32], ImageError> {
        let index = self.index();
        let name = || self.str_at(&record.name).unwrap_or_default();
        let members = record
            .members
            .range()
            .and_then(|range| index.dep_members.as_slice().get(range))
            .ok_or_else(|| {
                ImageError::DepIndex(format!(
                    "the members of {:?} lie outside the member table",
                    name()
                ))
            })?;
        if self.dep_group_state.is_set(position) {
            return Ok(members);
        }
        if dep_members_checksum(members.iter().map(|member| member.to_native()))
            != record.members_checksum
        {
            return Err(ImageError::DepIndex(format!(
                "the entry list of {:?} does not match its checksum",
                name()
            )));
        }
        let entry_count = index.entries.len();
        let mut previous: Option<u32> = None;
        for member in members {
            let member = member.to_native();
            if member as usize >= entry_count || previous.is_some_and(|p| p >= member) {
                return Err(ImageError::DepIndex(format!(
                    "the entry list of {:?} holds {member}, not an ascending entry index",
                    name()
                )));
            }
            previous = Some(member);
        }
        self.dep_group_state.set(position);
        Ok(members)
    }
}
