//! The code path the fuzz target and the corpus test drive: everything a
//! reader can do to an untrusted image.

use crate::{Image, ImageError, Verification};

/// What [`exercise`] saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Exercised {
    /// Entries whose record passed its check.
    pub entries_ok: usize,
    /// Entries rejected on access.
    pub entries_rejected: usize,
    /// Payloads returned.
    pub payloads_ok: usize,
    /// Payloads withheld.
    pub payloads_rejected: usize,
}

/// Opens `bytes` with structural verification, then reads everything:
/// metadata, owners, dep groups, every entry (fields, deps, artifacts,
/// lookup by (owner, key)) and every payload. Returns the open error, or
/// counts of what was accepted and rejected. Must never panic.
///
/// # Errors
/// The [`ImageError`] of the open, when `bytes` is not an image.
pub fn exercise(bytes: &[u8]) -> Result<Exercised, ImageError> {
    let image = Image::from_bytes(bytes, Verification::Structural)?;
    let mut seen = Exercised::default();
    let _ = image.meta();
    let _ = (image.header(), image.owners(), image.owner_count());
    if let Ok(groups) = image.dep_groups() {
        for group in groups {
            let _ = (
                group.name(),
                group.fingerprint(),
                group.entries().map(|e| e.count()).unwrap_or(0),
            );
            let _ = image.dependents_of(group.name()).map(Iterator::count);
        }
    }
    for entry in image.entries() {
        let Ok(entry) = entry else {
            seen.entries_rejected += 1;
            continue;
        };
        seen.entries_ok += 1;
        let _ = (
            entry.name(),
            entry.owner_label(),
            entry.min_world(),
            entry.max_world(),
            entry.deps(),
        );
        let _ = image.find(&entry.owner(), &entry.key());
        for artifact in entry.artifacts() {
            let _ = (artifact.kind(), artifact.entry_points(), artifact.len());
            match artifact.bytes() {
                Ok(_) => seen.payloads_ok += 1,
                Err(_) => seen.payloads_rejected += 1,
            }
        }
        let _ = entry.artifact(entry.artifact_count());
    }
    let _ = image.entry(image.len());
    let _ = image.verify_full();
    Ok(seen)
}

/// Recomputes the index checksum (when the index passes rkyv validation),
/// the body checksum and the header checksum of a possibly mutated image,
/// in place, so that a mutation reaches the checks behind them. Slices too
/// short for a header, or with regions outside the slice, are left as they
/// are past the header checksum.
pub fn reseal(image: &mut [u8]) {
    use crate::header::{HEADER_LEN, offsets};
    let read_u64 = |bytes: &[u8], at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|field| <[u8; 8]>::try_from(field).ok())
            .map(u64::from_le_bytes)
    };
    if image.len() < HEADER_LEN {
        return;
    }
    let index_range = read_u64(image, offsets::INDEX_OFFSET)
        .zip(read_u64(image, offsets::INDEX_LEN))
        .and_then(|(offset, len)| {
            let start = usize::try_from(offset).ok()?;
            Some(start..start.checked_add(usize::try_from(len).ok()?)?)
        });
    if let Some(index_bytes) = index_range.and_then(|range| image.get(range)) {
        let mut copy = rkyv::util::AlignedVec::<16>::with_capacity(index_bytes.len());
        copy.extend_from_slice(index_bytes);
        let aligned = copy.as_slice();
        if let Ok(index) =
            rkyv::access::<crate::layout::ArchivedIndex, rkyv::rancor::Error>(aligned)
            && let Ok(checksum) = crate::verify::index_checksum(aligned, index)
        {
            image[offsets::INDEX_CHECKSUM..][..32].copy_from_slice(&checksum.0);
        }
    }
    let body = crate::Digest::of(&image[HEADER_LEN..]);
    image[offsets::BODY_CHECKSUM..][..32].copy_from_slice(&body.0);
    crate::header::reseal_header(image);
}

/// Where the dependency index lies in `image`: the byte ranges (from the
/// image start) of the group table and of the member table, for tests that
/// corrupt it on purpose. `None` when the image does not open.
pub fn dep_index_ranges(image: &[u8]) -> Option<(std::ops::Range<usize>, std::ops::Range<usize>)> {
    let opened = Image::from_bytes(image, Verification::Structural).ok()?;
    let index = opened.index();
    let base = opened.index_bytes().as_ptr() as usize;
    let start = opened.index_range.start;
    let range_of = |ptr: usize, len: usize| {
        let at = start + ptr.checked_sub(base)?;
        Some(at..at + len)
    };
    let groups = index.dep_groups.as_slice();
    let members = index.dep_members.as_slice();
    Some((
        range_of(groups.as_ptr() as usize, size_of_val(groups))?,
        range_of(members.as_ptr() as usize, size_of_val(members))?,
    ))
}
