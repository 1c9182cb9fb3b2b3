//! The inverse dependency index: for each distinct (dep name, fingerprint),
//! the entries that carry it. Lets a cache find stale entries at merge and
//! the dependents of a redefined name in O(groups + matches).

use crate::checksum::DepIndexHasher;
use crate::layout::ArchivedDepGroupRecord;
use crate::{Digest, Image, ImageError};

/// One distinct (dep name, fingerprint) and the entries that carry it.
#[derive(Clone, Copy)]
pub struct DepGroup<'a> {
    name: &'a str,
    fingerprint: Digest,
    members: &'a [rkyv::primitive::ArchivedU32],
}

impl<'a> DepGroup<'a> {
    fn new(image: &'a Image, record: &'a ArchivedDepGroupRecord) -> DepGroup<'a> {
        DepGroup {
            name: image.str_at(&record.name).unwrap_or_default(),
            fingerprint: Digest(record.fingerprint),
            members: record
                .members
                .range()
                .and_then(|range| image.index().dep_members.as_slice().get(range))
                .unwrap_or_default(),
        }
    }

    /// Name of the definition.
    pub fn name(&self) -> &'a str {
        self.name
    }

    /// Its fingerprint when the entries were built.
    pub fn fingerprint(&self) -> Digest {
        self.fingerprint
    }

    /// Number of entries in the group.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the group is empty (never, in a well-formed image).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }

    /// Indices of the entries carrying this dep, ascending.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = usize> + use<'a> {
        let members = self.members;
        members.iter().map(|member| member.to_native() as usize)
    }
}

impl std::fmt::Debug for DepGroup<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DepGroup")
            .field("name", &self.name)
            .field("fingerprint", &self.fingerprint)
            .field("entries", &self.entries().collect::<Vec<_>>())
            .finish()
    }
}

impl Image {
    /// Every distinct (dep name, fingerprint), sorted by name then
    /// fingerprint, with the entries that carry it. The dependency index is
    /// checked against its checksum on first use.
    pub fn dep_groups(
        &self,
    ) -> Result<impl ExactSizeIterator<Item = DepGroup<'_>> + '_, ImageError> {
        self.dep_index_checked()?;
        Ok(self
            .index()
            .dep_groups
            .iter()
            .map(|record| DepGroup::new(self, record)))
    }

    /// The groups of the definition `name` (one per fingerprint it was
    /// built with), found by binary search: O(log groups + matches).
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
            .map(|record| DepGroup::new(self, record))
            .take_while(move |group| group.name == name))
    }

    /// Indices of the entries that depend on the definition `name` (with any
    /// fingerprint), found by binary search in the dependency index.
    pub fn dependents_of<'s>(
        &'s self,
        name: &'s str,
    ) -> Result<impl Iterator<Item = usize> + 's, ImageError> {
        Ok(self
            .dep_groups_named(name)?
            .flat_map(|group| group.entries()))
    }

    fn dep_index_checked(&self) -> Result<(), ImageError> {
        if self.dep_index_state.is_verified(0) {
            return Ok(());
        }
        self.check_dep_index()
    }

    /// Checks the dependency index now: structure and checksum.
    pub(crate) fn check_dep_index(&self) -> Result<(), ImageError> {
        let index = self.index();
        let corrupt = |what: String| ImageError::DepIndex(what);
        let groups = &index.dep_groups;
        let members = index.dep_members.as_slice();
        let mut hasher = DepIndexHasher::new(groups.len() as u32, members.len() as u32);
        let mut previous: Option<(&str, &[u8; 32])> = None;
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
            let group_members = group
                .members
                .range()
                .and_then(|range| members.get(range))
                .ok_or_else(|| {
                    corrupt(format!(
                        "the members of {name:?} lie outside the member table"
                    ))
                })?;
            if group_members
                .iter()
                .any(|member| member.to_native() as usize >= index.entries.len())
            {
                return Err(corrupt(format!("a member of {name:?} is not an entry")));
            }
            hasher.group(
                name.as_bytes(),
                &group.fingerprint,
                group.members.start.to_native(),
                group.members.len.to_native(),
            );
        }
        hasher.members(members.iter().map(|member| member.to_native()));
        if hasher.finish() != index.dep_index_checksum {
            return Err(corrupt("checksum mismatch".into()));
        }
        self.dep_index_state.mark_verified(0);
        Ok(())
    }
}
