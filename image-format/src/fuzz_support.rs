//! The code path the fuzz targets and the corpus test drive (everything a
//! reader can do to an untrusted image), and tools that rewrite images on
//! purpose: [`reseal`] recomputes the checksums of a mutated image,
//! [`forge::Forge`] rebuilds an image from records a test chose.

use crate::{Image, ReadError, Verification};

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
/// metadata, owners, dep groups (and the dependents of each distinct
/// name), every entry (fields, deps, artifacts, lookup by (owner, key), an
/// owned copy) and every payload; then verifies the image in full and opens
/// it again with [`Verification::Full`]. Returns the open error, or counts
/// of what was accepted and rejected. Must never panic, and its time and
/// memory grow linearly with `bytes` (the `bounded_memory` fuzz target and
/// `tests/hostile.rs` check the memory).
///
/// # Errors
/// The [`ReadError`] of the structural open, when `bytes` is not an image.
pub fn exercise(bytes: &[u8]) -> Result<Exercised, ReadError> {
    let image = Image::from_bytes(bytes, Verification::Structural)?;
    let mut seen = Exercised::default();
    let _ = image.meta();
    let _ = (image.header(), image.owners(), image.owner_count());
    let _ = (image.signers(), image.check_signatures(None));
    let _ = (image.signature_batch(), image.signature_message());
    if let Ok(groups) = image.dep_groups() {
        let mut previous: Option<&str> = None;
        for group in groups {
            let _ = (
                group.name(),
                group.fingerprint(),
                group.entries().map(|e| e.count()).unwrap_or(0),
            );
            // Groups are sorted by name: once per distinct name.
            if previous != Some(group.name()) {
                let _ = image.dependents_of(group.name()).map(Iterator::count);
                previous = Some(group.name());
            }
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
            entry.dep_iter().count(),
            entry.failed_payload(),
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
        let _ = entry.to_data();
    }
    let _ = image.entry(image.len());
    let _ = image.verify_full();
    drop(image);
    let _ = Image::from_bytes(bytes, Verification::Full);
    Ok(seen)
}

/// The raw bytes the compressed payload groups of `bytes` declare, in all:
/// what decompressing every group may allocate beyond the reading of a
/// plain image (each at most `MAX_COMPRESSION_RATIO` times its stored
/// bytes, checked at open). 0 for a plain image or bytes that do not open.
pub fn declared_decompression(bytes: &[u8]) -> u64 {
    let Ok(image) = Image::from_bytes(bytes, Verification::Structural) else {
        return 0;
    };
    image
        .index()
        .payload_groups
        .iter()
        .filter(|group| group.encoding.to_native() == crate::layout::GROUP_ZSTD)
        .map(|group| group.raw.len.to_native())
        .sum()
}

/// Recomputes the index checksum (when the index passes rkyv validation),
/// the body checksum (up to the signature trailer the header declares, if
/// it fits) and the header checksum of a possibly mutated image,
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
        {
            let checksum = crate::verify::index_checksum(aligned, index);
            image[offsets::INDEX_CHECKSUM..][..32].copy_from_slice(&checksum.0);
        }
    }
    // The body ends where the signature trailer the header declares starts.
    let trailer = image
        .get(offsets::SIGNATURE_LEN..offsets::SIGNATURE_LEN + 4)
        .and_then(|field| <[u8; 4]>::try_from(field).ok())
        .map_or(0, |field| u32::from_le_bytes(field) as usize);
    let body_end = image
        .len()
        .checked_sub(trailer)
        .filter(|&end| end >= HEADER_LEN)
        .unwrap_or(image.len());
    let body = crate::Digest::of(&image[HEADER_LEN..body_end]);
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

/// Rebuilding images from chosen records, checksums and all.
///
/// Checksums are unkeyed: anyone can write an image whose checksums match
/// whatever its records say. [`Forge`](forge::Forge) lets a test do that, so that what
/// stops a hostile image is shown to be a structural check, not a
/// checksum: take a valid image apart, change its records (reference one
/// string a thousand times, swap two keys, drop an entry from the
/// dependency index...), and put it back together with every checksum
/// recomputed.
///
/// ```
/// use kiln_image::fuzz_support::forge::Forge;
/// use kiln_image::{Image, ImageMeta, ImageWriter, Verification};
///
/// let bytes = ImageWriter::new(ImageMeta::new("p", "1")).to_bytes()?;
/// let mut forged = Forge::read(&bytes)?;
/// assert_eq!(forged.to_bytes()?, bytes);
/// forged.index.labels.clear();
/// Image::from_bytes(&forged.to_bytes()?, Verification::Full)?;
/// # Ok::<(), kiln_image::ImageError>(())
/// ```
pub mod forge {
    pub use crate::layout::{
        ArtifactRecord, BLOCK_ENTRIES, BlockRecord, CUSTOM_KIND, DepGroupRecord, DepRecord,
        EntryRecord, GROUP_STORED, GROUP_ZSTD, Index, LabelRecord, OwnerRecord, PayloadGroupRecord,
        PayloadSpan, Span, StrRef,
    };

    use crate::header::Header;
    use crate::layout::ArchivedIndex;
    use crate::{Digest, ReadError, WriteError};

    /// An image taken apart: its index as owned records, its payload
    /// region and its producer.
    #[derive(Clone, Debug)]
    pub struct Forge {
        /// Every table of the index.
        pub index: Index,
        /// The stored payload region (artifact offsets are relative to its
        /// start, or for a compressed image to the region its groups tile).
        pub payloads: Vec<u8>,
        /// The producer string of the header.
        pub producer: String,
    }

    impl Forge {
        /// Takes `image` apart. Only the header and the rkyv structure of the
        /// index are checked, not the checksums or the records' values.
        ///
        /// # Errors
        ///
        /// A header check fails, or the index is not a valid archive.
        pub fn read(image: &[u8]) -> Result<Forge, ReadError> {
            let header = Header::parse(image, image.len() as u64)?;
            let region = |offset: u64, len: u64| {
                let start = usize::try_from(offset).ok()?;
                image.get(start..start.checked_add(usize::try_from(len).ok()?)?)
            };
            let index_bytes = region(header.index_offset, header.index_len)
                .ok_or_else(|| ReadError::Layout("the index lies outside the image".into()))?;
            let payloads = region(header.payload_offset, header.payload_len).ok_or(
                ReadError::PayloadRegion {
                    start: header.payload_offset,
                    end: header.payload_offset.saturating_add(header.payload_len),
                    available: image.len() as u64,
                },
            )?;
            let mut aligned = rkyv::util::AlignedVec::<16>::with_capacity(index_bytes.len());
            aligned.extend_from_slice(index_bytes);
            let archived = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(&aligned)
                .map_err(|error| ReadError::IndexValidation(error.to_string()))?;
            let index = rkyv::deserialize::<Index, rkyv::rancor::Error>(archived)
                .map_err(|error| ReadError::IndexValidation(error.to_string()))?;
            Ok(Forge {
                index,
                payloads: payloads.to_vec(),
                producer: header.producer,
            })
        }

        /// The image with these records, every checksum recomputed: member
        /// lists, group table, entries, index, body and header. The header's
        /// entry count follows the entry table. Records are written as they
        /// are, valid or not.
        ///
        /// # Errors
        ///
        /// The index does not serialize, or the image would not fit in
        /// memory.
        pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
            crate::writer::assemble(
                &self.index,
                [(0, self.payloads.as_slice())],
                self.payloads.len() as u64,
                self.producer.clone(),
            )
        }

        /// The BLAKE3 of `bytes`, for artifact records that point at new
        /// payloads.
        pub fn payload_hash(bytes: &[u8]) -> [u8; 32] {
            Digest::of(bytes).0
        }

        /// The position in the group table of the dependency group of
        /// (`name`, `fingerprint`), if there is one.
        pub fn group_of(&self, name: &str, fingerprint: &Digest) -> Option<usize> {
            let index = &self.index;
            index.dep_groups.iter().position(|group| {
                let start = group.name.offset as usize;
                let text = index
                    .group_names
                    .get(start..start + group.name.len as usize);
                text == Some(name.as_bytes()) && group.fingerprint == fingerprint.0
            })
        }

        /// Removes `entry` from the member list of group `group`, as a
        /// forger keeping everything else consistent would: the later lists
        /// move down one slot and the deps that name a later position of
        /// this group follow. The entry's own deps are left as they were.
        /// Returns whether the entry was listed.
        pub fn remove_member(&mut self, group: usize, entry: u32) -> bool {
            let index = &mut self.index;
            let Some(members) = index.dep_groups.get(group).map(|g| g.members) else {
                return false;
            };
            let (start, len) = (members.start as usize, members.len as usize);
            let Some(position) = index
                .dep_members
                .get(start..start + len)
                .and_then(|list| list.iter().position(|&member| member == entry))
            else {
                return false;
            };
            index.dep_members.remove(start + position);
            index.dep_groups[group].members.len -= 1;
            for later in &mut index.dep_groups[group + 1..] {
                later.members.start -= 1;
            }
            for dep in &mut index.deps {
                if dep.group as usize == group && dep.member as usize > position {
                    dep.member -= 1;
                }
            }
            true
        }

        /// Adds `entry` to the member list of group `group`, in order,
        /// moving what follows as [`Forge::remove_member`] does. The
        /// entry's own deps are left as they were.
        pub fn add_member(&mut self, group: usize, entry: u32) {
            let index = &mut self.index;
            let Some(members) = index.dep_groups.get(group).map(|g| g.members) else {
                return;
            };
            let (start, len) = (members.start as usize, members.len as usize);
            let Some(position) = index
                .dep_members
                .get(start..start + len)
                .map(|list| list.partition_point(|&member| member < entry))
            else {
                return;
            };
            index.dep_members.insert(start + position, entry);
            index.dep_groups[group].members.len += 1;
            for later in &mut index.dep_groups[group + 1..] {
                later.members.start += 1;
            }
            for dep in &mut index.deps {
                if dep.group as usize == group && dep.member as usize >= position {
                    dep.member += 1;
                }
            }
        }
    }
}
