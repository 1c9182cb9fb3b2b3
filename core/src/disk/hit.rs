//! A disk-cache hit: an entry of a mapped segment, with its payloads checked.

use std::sync::Arc;

use kiln_image::{ArtifactKind, EntryData, EntryRef, Image};

use super::segment::Segment;
use crate::error::Error;

/// When a hit's payloads are checked against their checksums.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Payloads {
    /// Before the hit is returned (what [`DiskCache::get`] promises).
    Now,
    /// By the holder, on each payload's first use ([`kiln_image::ArtifactRef::bytes`]):
    /// the hit is refused only if a payload is already known bad.
    OnUse,
}

/// An entry found in the disk cache. Its bytes are borrowed from the mapped
/// segment (zero-copy) and passed their checksums when the hit was made; the
/// hit keeps the segment mapped, even if compaction deletes its file.
#[derive(Clone)]
pub struct DiskHit {
    segment: Arc<Segment>,
    index: usize,
}

/// One artifact of a [`DiskHit`], borrowed from the mapped segment.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct DiskArtifact<'a> {
    /// What the bytes are.
    pub kind: ArtifactKind,
    /// Entry-point names.
    pub entry_points: Vec<&'a str>,
    /// The compiled bytes (checksum verified).
    pub bytes: &'a [u8],
}

impl DiskHit {
    /// A hit on entry `index` of `segment` whose payloads are checked as
    /// `payloads` says: now (every payload passes its checksum), or on use
    /// (none is already known bad).
    pub(crate) fn checked(
        segment: Arc<Segment>,
        index: usize,
        payloads: Payloads,
    ) -> Option<DiskHit> {
        match payloads {
            Payloads::Now => DiskHit::verified(segment, index),
            Payloads::OnUse => {
                let entry = segment.image.entry(index).ok()?;
                if entry.failed_payload().is_some() {
                    return None;
                }
                Some(DiskHit { segment, index })
            }
        }
    }

    /// A hit on entry `index` of `segment`, if every payload of the entry
    /// passes its checksum.
    pub(crate) fn verified(segment: Arc<Segment>, index: usize) -> Option<DiskHit> {
        let entry = segment.image.entry(index).ok()?;
        for i in 0..entry.artifact_count() {
            entry.artifact(i).and_then(|a| a.bytes()).ok()?;
        }
        Some(DiskHit { segment, index })
    }

    /// The segment that holds the entry.
    pub(crate) fn segment(&self) -> &Arc<Segment> {
        &self.segment
    }

    /// Where the entry came from, as its segment records it: compiled by
    /// this user's processes, or received from another tier (signed or
    /// not). See [`DiskCache::vouch`](super::DiskCache::vouch) for what a
    /// signer may take.
    pub fn provenance(&self) -> &crate::trust::Provenance {
        self.segment.provenance()
    }

    /// The segment's image, which holds the entry.
    pub(crate) fn image(&self) -> &Arc<Image> {
        &self.segment.image
    }

    /// The entry's position in [`DiskHit::image`].
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The entry, borrowed from the mapped segment.
    ///
    /// # Errors
    /// [`Error::Image`] when the entry record fails its checksum.
    pub fn entry(&self) -> Result<EntryRef<'_>, Error> {
        Ok(self.segment.image.entry(self.index)?)
    }

    /// The entry's artifacts, borrowed from the mapped segment.
    ///
    /// # Errors
    /// [`Error::Image`] when the entry record or one of its payloads fails its
    /// checksum.
    pub fn artifacts(&self) -> Result<Vec<DiskArtifact<'_>>, Error> {
        let entry = self.entry()?;
        (0..entry.artifact_count())
            .map(|i| {
                let artifact = entry.artifact(i)?;
                Ok(DiskArtifact {
                    kind: artifact.kind(),
                    entry_points: artifact.entry_points(),
                    bytes: artifact.bytes()?,
                })
            })
            .collect()
    }

    /// The bytes of the first artifact of `kind`, borrowed from the segment.
    ///
    /// # Errors
    /// [`Error::Image`] when the entry record or the payload fails its
    /// checksum.
    pub fn artifact(&self, kind: &ArtifactKind) -> Result<Option<&[u8]>, Error> {
        match self.entry()?.artifact_of_kind(kind) {
            Some(artifact) => Ok(Some(artifact.bytes()?)),
            None => Ok(None),
        }
    }

    /// An owned copy of the entry.
    ///
    /// # Errors
    /// [`Error::Image`] when the entry record or one of its payloads fails its
    /// checksum.
    pub fn to_entry_data(&self) -> Result<EntryData, Error> {
        Ok(self.entry()?.to_data()?)
    }
}

impl std::fmt::Debug for DiskHit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskHit")
            .field("segment", &self.segment.name)
            .field("index", &self.index)
            .finish()
    }
}
