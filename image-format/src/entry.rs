//! [`EntryRef`] and [`ArtifactRef`]: views of one entry and one artifact,
//! read in place, checked against their checksums on first access.

use crate::checksum::{ArtifactFields, EntryFields, EntryHasher};
use crate::header::REGION_ALIGN;
use crate::layout::{ArchivedArtifactRecord, ArchivedEntryRecord, ArchivedStrRef, CUSTOM_KIND};
use crate::{Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageError};

/// One entry of an [`Image`], read in place. Its record (and everything it
/// references: name, deps, artifact descriptors) matched its checksum.
#[derive(Clone, Copy)]
pub struct EntryRef<'a> {
    image: &'a Image,
    index: usize,
    record: &'a ArchivedEntryRecord,
}

impl<'a> EntryRef<'a> {
    /// The entry at `index`, checked on first access only.
    pub(crate) fn checked(image: &'a Image, index: usize) -> Result<EntryRef<'a>, ImageError> {
        if image.entry_state.is_set(index)
            && let Some(record) = image.index().entries.get(index)
        {
            return Ok(EntryRef {
                image,
                index,
                record,
            });
        }
        EntryRef::check(image, index)
    }

    /// The entry at `index`, checked now whatever was remembered.
    pub(crate) fn check(image: &'a Image, index: usize) -> Result<EntryRef<'a>, ImageError> {
        let entries = &image.index().entries;
        let record = entries.get(index).ok_or(ImageError::EntryOutOfRange {
            index,
            len: entries.len(),
        })?;
        let stored = record.checksum;
        if check_record(image, index, record)? != stored {
            return Err(ImageError::EntryChecksum { index });
        }
        image.entry_state.set(index);
        Ok(EntryRef {
            image,
            index,
            record,
        })
    }

    /// Position of the entry in the image.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Digest of the owning compiler configuration.
    pub fn owner(&self) -> Digest {
        self.image
            .index()
            .owners
            .get(self.record.owner.to_native() as usize)
            .map(|owner| Digest(owner.digest))
            .unwrap_or_default()
    }

    /// Label of the owning compiler configuration.
    pub fn owner_label(&self) -> &'a str {
        let image = self.image;
        image
            .index()
            .owners
            .get(self.record.owner.to_native() as usize)
            .and_then(|owner| image.str_at(&owner.label))
            .unwrap_or_default()
    }

    /// The method-instance key.
    pub fn key(&self) -> Digest {
        Digest(self.record.key)
    }

    /// Human-readable name.
    pub fn name(&self) -> &'a str {
        self.image.str_at(&self.record.name).unwrap_or_default()
    }

    /// First world the entry is valid in.
    pub fn min_world(&self) -> u64 {
        self.record.min_world.to_native()
    }

    /// Last world the entry is valid in (`u64::MAX`: unbounded).
    pub fn max_world(&self) -> u64 {
        self.record.max_world.to_native()
    }

    /// The deps, borrowed: (definition name, fingerprint).
    pub fn dep_iter(&self) -> impl ExactSizeIterator<Item = (&'a str, Digest)> + use<'a> {
        let image = self.image;
        let records = self
            .record
            .deps
            .range()
            .and_then(|range| image.index().deps.as_slice().get(range))
            .unwrap_or_default();
        records.iter().map(move |dep| {
            (
                image.str_at(&dep.name).unwrap_or_default(),
                Digest(dep.fingerprint),
            )
        })
    }

    /// The deps, owned.
    pub fn deps(&self) -> Vec<Dep> {
        self.dep_iter()
            .map(|(name, fingerprint)| Dep {
                name: name.to_owned(),
                fingerprint,
            })
            .collect()
    }

    /// Number of artifacts.
    pub fn artifact_count(&self) -> usize {
        self.record.artifacts.count() as usize
    }

    /// The artifact at position `i` of this entry.
    ///
    /// # Errors
    /// [`ImageError::ArtifactOutOfRange`] when the entry has no artifact `i`.
    pub fn artifact(&self, i: usize) -> Result<ArtifactRef<'a>, ImageError> {
        self.artifacts()
            .nth(i)
            .ok_or(ImageError::ArtifactOutOfRange {
                index: i,
                len: self.artifact_count(),
            })
    }

    /// The artifacts in order.
    pub fn artifacts(&self) -> impl ExactSizeIterator<Item = ArtifactRef<'a>> + use<'a> {
        let image = self.image;
        let entry = self.index;
        let first = self.record.artifacts.start.to_native() as usize;
        let records = self
            .record
            .artifacts
            .range()
            .and_then(|range| image.index().artifacts.as_slice().get(range))
            .unwrap_or_default();
        records
            .iter()
            .enumerate()
            .map(move |(position, record)| ArtifactRef {
                image,
                entry,
                position,
                global: first + position,
                record,
            })
    }

    /// The position of the first of this entry's artifacts whose payload has
    /// failed its checksum in this process (through any holder of the
    /// image). Reads no payload: payloads never read are not known bad.
    pub fn failed_payload(&self) -> Option<usize> {
        self.artifacts()
            .find(|artifact| self.image.artifact_failed.is_set(artifact.global))
            .map(|artifact| artifact.position)
    }

    /// The first artifact of `kind`, if any.
    pub fn artifact_of_kind(&self, kind: &ArtifactKind) -> Option<ArtifactRef<'a>> {
        self.artifacts()
            .find(|artifact| artifact.kind_name() == kind.name())
    }

    /// An owned copy of the entry, payloads included (each checked).
    ///
    /// # Errors
    /// [`ImageError::PayloadChecksum`] when a payload fails its checksum.
    pub fn to_data(&self) -> Result<EntryData, ImageError> {
        let artifacts = self
            .artifacts()
            .map(|artifact| {
                Ok(Artifact {
                    kind: artifact.kind(),
                    entry_points: artifact
                        .entry_points()
                        .into_iter()
                        .map(str::to_owned)
                        .collect(),
                    bytes: artifact.bytes()?.to_vec(),
                })
            })
            .collect::<Result<Vec<_>, ImageError>>()?;
        Ok(EntryData {
            owner: self.owner(),
            owner_label: self.owner_label().to_owned(),
            key: self.key(),
            name: self.name().to_owned(),
            min_world: self.min_world(),
            max_world: self.max_world(),
            deps: self.deps(),
            artifacts,
        })
    }
}

impl std::fmt::Debug for EntryRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EntryRef")
            .field("index", &self.index)
            .field("name", &self.name())
            .field("owner", &self.owner())
            .field("key", &self.key())
            .finish()
    }
}

/// One artifact of an entry, read in place.
#[derive(Clone, Copy)]
pub struct ArtifactRef<'a> {
    image: &'a Image,
    entry: usize,
    position: usize,
    global: usize,
    record: &'a ArchivedArtifactRecord,
}

impl<'a> ArtifactRef<'a> {
    /// What the bytes are.
    pub fn kind(&self) -> ArtifactKind {
        match self.record.kind.to_native() {
            CUSTOM_KIND => ArtifactKind::Custom(self.kind_name().to_owned()),
            tag => ArtifactKind::BUILT_IN
                .get(tag as usize)
                .map(|(kind, _)| kind.clone())
                .unwrap_or_else(|| ArtifactKind::Custom(String::new())),
        }
    }

    /// The kind's name (see [`ArtifactKind::name`]), borrowed.
    pub fn kind_name(&self) -> &'a str {
        match self.record.kind.to_native() {
            CUSTOM_KIND => self.image.str_at(&self.record.custom).unwrap_or_default(),
            tag => ArtifactKind::BUILT_IN
                .get(tag as usize)
                .map(|(_, name)| *name)
                .unwrap_or_default(),
        }
    }

    /// Entry-point names.
    pub fn entry_points(&self) -> Vec<&'a str> {
        let image = self.image;
        self.record
            .entry_points
            .range()
            .and_then(|range| image.index().entry_points.as_slice().get(range))
            .unwrap_or_default()
            .iter()
            .map(|name| image.str_at(name).unwrap_or_default())
            .collect()
    }

    /// Payload length in bytes.
    pub fn len(&self) -> usize {
        usize::try_from(self.record.len.to_native()).unwrap_or(usize::MAX)
    }

    /// Whether the payload is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The BLAKE3 of the payload, as recorded in the index.
    pub fn checksum(&self) -> Digest {
        Digest(self.record.hash)
    }

    /// Position of the artifact within its entry.
    pub fn position(&self) -> usize {
        self.position
    }

    /// The payload, borrowed from the image. Its BLAKE3 is checked on the
    /// first call (and remembered); on a mismatch the bytes are withheld
    /// and an error returned, on this and every later call.
    ///
    /// # Errors
    /// [`ImageError::PayloadChecksum`] when the payload fails its checksum (on
    /// this and every later call).
    pub fn bytes(&self) -> Result<&'a [u8], ImageError> {
        if self.image.artifact_state.is_set(self.global) {
            return self.raw();
        }
        self.check_payload()
    }

    /// The payload, checked now whatever was remembered.
    pub(crate) fn check_payload(&self) -> Result<&'a [u8], ImageError> {
        let bytes = self.raw()?;
        if *blake3::hash(bytes).as_bytes() != self.record.hash {
            self.image.artifact_failed.set(self.global);
            return Err(self.corrupt());
        }
        self.image.artifact_state.set(self.global);
        Ok(bytes)
    }

    fn corrupt(&self) -> ImageError {
        ImageError::PayloadChecksum {
            entry: self.entry,
            artifact: self.position,
        }
    }

    /// The payload bytes, unchecked; the bounds were checked with the entry.
    fn raw(&self) -> Result<&'a [u8], ImageError> {
        let image = self.image;
        let start = usize::try_from(self.record.offset.to_native()).ok();
        let end = start.and_then(|start| start.checked_add(self.len()));
        let payloads = image.payloads()?;
        start
            .zip(end)
            .and_then(|(start, end)| payloads.get(start..end))
            .ok_or_else(|| self.corrupt())
    }
}

impl std::fmt::Debug for ArtifactRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArtifactRef")
            .field("kind", &self.kind_name())
            .field("len", &self.len())
            .field("checksum", &self.checksum())
            .finish()
    }
}

/// Checks the structure of entry `index` and computes its checksum.
fn check_record(
    image: &Image,
    index: usize,
    record: &ArchivedEntryRecord,
) -> Result<[u8; 32], ImageError> {
    let malformed = |what: &str| ImageError::EntryMalformed {
        index,
        what: what.to_owned(),
    };
    let tables = image.index();
    let text = |text: &ArchivedStrRef, what: &str| -> Result<&[u8], ImageError> {
        let bytes = text
            .range()
            .and_then(|range| tables.strings.as_slice().get(range))
            .ok_or_else(|| malformed(&format!("its {what} lies outside the string table")))?;
        std::str::from_utf8(bytes).map_err(|_| malformed(&format!("its {what} is not UTF-8")))?;
        Ok(bytes)
    };
    if record.flags.to_native() != 0 {
        return Err(malformed("reserved flags are set"));
    }
    let owner = tables
        .owners
        .get(record.owner.to_native() as usize)
        .filter(|owner| {
            owner
                .entries
                .range()
                .is_some_and(|range| range.contains(&index))
        })
        .ok_or_else(|| malformed("its owner does not own it"))?;
    let (min_world, max_world) = (record.min_world.to_native(), record.max_world.to_native());
    if min_world > max_world {
        return Err(malformed("min_world > max_world"));
    }
    let deps = record
        .deps
        .range()
        .and_then(|range| tables.deps.as_slice().get(range))
        .ok_or_else(|| malformed("its deps lie outside the dep table"))?;
    let artifacts = record
        .artifacts
        .range()
        .and_then(|range| tables.artifacts.as_slice().get(range))
        .ok_or_else(|| malformed("its artifacts lie outside the artifact table"))?;
    let mut hasher = EntryHasher::new(&EntryFields {
        owner: &owner.digest,
        key: &record.key,
        name: text(&record.name, "name")?,
        min_world,
        max_world,
        flags: 0,
        dep_count: record.deps.count(),
        artifact_count: record.artifacts.count(),
    });
    for dep in deps {
        hasher.dep(text(&dep.name, "dep name")?, &dep.fingerprint);
    }
    let payload_len = image.header.payload_len;
    for artifact in artifacts {
        let kind = artifact.kind.to_native();
        let custom = text(&artifact.custom, "artifact kind")?;
        if kind > CUSTOM_KIND || (kind == CUSTOM_KIND) == custom.is_empty() {
            return Err(malformed("an artifact has an unknown kind"));
        }
        if artifact.flags.to_native() != 0 {
            return Err(malformed("an artifact has reserved flags set"));
        }
        let (offset, len) = (artifact.offset.to_native(), artifact.len.to_native());
        if offset % REGION_ALIGN as u64 != 0
            || offset.checked_add(len).is_none_or(|end| end > payload_len)
        {
            return Err(malformed(
                "an artifact payload lies outside the payload region",
            ));
        }
        let entry_points = artifact
            .entry_points
            .range()
            .and_then(|range| tables.entry_points.as_slice().get(range))
            .ok_or_else(|| malformed("artifact entry points lie outside their table"))?;
        hasher.artifact(&ArtifactFields {
            kind,
            custom,
            entry_point_count: artifact.entry_points.count(),
            offset,
            len,
            hash: &artifact.hash,
            flags: 0,
        });
        for name in entry_points {
            hasher.entry_point(text(name, "entry point name")?);
        }
    }
    Ok(hasher.finish())
}
