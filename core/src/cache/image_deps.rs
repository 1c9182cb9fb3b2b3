//! Which entries of an image depend on which definitions, from the image's
//! dependency index (distinct `(dep name, fingerprint)` groups with their
//! entries): O(groups + matching entries), no entry is decoded.

use std::collections::HashMap;

use kiln_image::{Image, ReadError};

use crate::Digest;

/// Indices of the entries of `image` with a dep whose definition is known in
/// `definitions` with another fingerprint: the entries that are stale here.
/// An entry with several stale deps appears once per dep.
pub(crate) fn stale_entries(
    image: &Image,
    definitions: &HashMap<String, Digest>,
) -> Result<Vec<usize>, ReadError> {
    let mut stale = Vec::new();
    if definitions.is_empty() {
        // Nothing can be stale; and the dependency index is not even read.
        return Ok(stale);
    }
    for group in image.dep_groups()? {
        if definitions
            .get(group.name())
            .is_some_and(|fp| *fp != group.fingerprint())
        {
            // A member list that fails its checksum fails the merge's
            // revalidation (the image is rejected), never counts as empty.
            stale.extend(group.entries()?);
        }
    }
    Ok(stale)
}

/// Indices of the entries of `image` that depend on `name` with a
/// fingerprint other than `fingerprint`.
pub(crate) fn dependents_not_at(
    image: &Image,
    name: &str,
    fingerprint: &Digest,
) -> Result<Vec<usize>, ReadError> {
    let mut found = Vec::new();
    for group in image.dep_groups_named(name)? {
        if group.fingerprint() != *fingerprint {
            found.extend(group.entries()?);
        }
    }
    Ok(found)
}
