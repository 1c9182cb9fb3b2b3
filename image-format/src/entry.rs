//! [`EntryRef`] and [`ArtifactRef`]: views of one entry and one artifact,
//! read in place, checked on first access.
//!
//! An entry's first access checks, in order and in time linear in what the
//! entry owns:
//!
//! 1. its block (once per 64 entries, see `partition.rs`): the entries of
//!    the block own consecutive, disjoint ranges of every table, of the
//!    text and of the payload region;
//! 2. its own layout: its text references follow each other through its
//!    text region, its artifacts' entry points and payloads follow each
//!    other through its ranges, its owner owns it;
//! 3. its checksum;
//! 4. its values: reserved flags, worlds, kinds, UTF-8 text; that a lookup
//!    of its (owner, key) leads to it (so no two served entries share an
//!    (owner, key), and iteration never serves what a lookup cannot reach);
//!    and that the dependency index lists it under each of its deps (so
//!    revalidation and invalidation, which go by the index, never miss it).
//!
//! A failure is an error and the entry is never returned.

use std::ops::Range;

use crate::checksum::{ArtifactFields, DepFields, EntryFields, EntryHasher};
use crate::header::REGION_ALIGN;
use crate::layout::{
    ArchivedArtifactRecord, ArchivedEntryRecord, ArchivedIndex, ArchivedSpan, ArchivedStrRef,
    CUSTOM_KIND,
};
use crate::{Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ReadError};

/// One entry of an [`Image`], read in place. Its record (and everything it
/// owns: text, deps, artifact descriptors) passed its checks.
#[derive(Clone, Copy)]
pub struct EntryRef<'a> {
    image: &'a Image,
    index: usize,
    record: &'a ArchivedEntryRecord,
}

impl<'a> EntryRef<'a> {
    /// The entry at `index`, checked on first access only.
    pub(crate) fn checked(image: &'a Image, index: usize) -> Result<EntryRef<'a>, ReadError> {
        if image.entry_state.is_set(index)
            && let Some(record) = image.index().entries.get(index)
        {
            return Ok(EntryRef {
                image,
                index,
                record,
            });
        }
        image
            .blocks
            .checked(image.index(), image.raw_payload_len(), index)?;
        EntryRef::check(image, index)
    }

    /// The entry at `index`, checked now whatever was remembered. Its
    /// block must have passed its check.
    pub(crate) fn check(image: &'a Image, index: usize) -> Result<EntryRef<'a>, ReadError> {
        let tables = image.index();
        let record = tables
            .entries
            .get(index)
            .ok_or(ReadError::EntryOutOfRange {
                index,
                len: tables.entries.len(),
            })?;
        check_layout(tables, index, record, image.raw_payload_len())?;
        if entry_checksum(tables, record) != record.checksum {
            return Err(ReadError::EntryChecksum { index });
        }
        check_values(image, index, record)?;
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
            .and_then(|owner| image.meta_str(&owner.label))
            .unwrap_or_default()
    }

    /// The method-instance key.
    pub fn key(&self) -> Digest {
        Digest(self.record.key)
    }

    /// Human-readable name.
    pub fn name(&self) -> &'a str {
        self.image.entry_str(&self.record.name).unwrap_or_default()
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
        let records = slice(&image.index().deps, &self.record.deps);
        records.iter().map(move |dep| {
            (
                image.entry_str(&dep.name).unwrap_or_default(),
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
    /// [`ReadError::ArtifactOutOfRange`] when the entry has no artifact `i`.
    pub fn artifact(&self, i: usize) -> Result<ArtifactRef<'a>, ReadError> {
        self.artifacts()
            .nth(i)
            .ok_or(ReadError::ArtifactOutOfRange {
                index: i,
                len: self.artifact_count(),
            })
    }

    /// The artifacts in order.
    pub fn artifacts(&self) -> impl ExactSizeIterator<Item = ArtifactRef<'a>> + use<'a> {
        let image = self.image;
        let entry = self.index;
        let first = self.record.artifacts.start.to_native() as usize;
        let records = slice(&image.index().artifacts, &self.record.artifacts);
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
    /// [`ReadError::PayloadChecksum`] when a payload fails its checksum.
    pub fn to_data(&self) -> Result<EntryData, ReadError> {
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
            .collect::<Result<Vec<_>, ReadError>>()?;
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
            CUSTOM_KIND => self
                .image
                .entry_str(&self.record.custom)
                .unwrap_or_default(),
            tag => ArtifactKind::BUILT_IN
                .get(tag as usize)
                .map(|(_, name)| *name)
                .unwrap_or_default(),
        }
    }

    /// Entry-point names.
    pub fn entry_points(&self) -> Vec<&'a str> {
        let image = self.image;
        slice(&image.index().entry_points, &self.record.entry_points)
            .iter()
            .map(|name| image.entry_str(name).unwrap_or_default())
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
    /// [`ReadError::PayloadChecksum`] when the payload fails its checksum (on
    /// this and every later call).
    pub fn bytes(&self) -> Result<&'a [u8], ReadError> {
        if self.image.artifact_state.is_set(self.global) {
            return self.raw();
        }
        self.check_payload()
    }

    /// The payload, checked now whatever was remembered.
    pub(crate) fn check_payload(&self) -> Result<&'a [u8], ReadError> {
        let bytes = self.raw()?;
        crate::image::PAYLOAD_CHECKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if *blake3::hash(bytes).as_bytes() != self.record.hash {
            self.image.artifact_failed.set(self.global);
            return Err(self.corrupt());
        }
        self.image.artifact_state.set(self.global);
        Ok(bytes)
    }

    fn corrupt(&self) -> ReadError {
        ReadError::PayloadChecksum {
            entry: self.entry,
            artifact: self.position,
        }
    }

    /// The payload bytes, unchecked; the bounds were checked with the entry.
    /// For a compressed image, the first access to a payload of a group
    /// decompresses the group (once per image, see `groups.rs`).
    fn raw(&self) -> Result<&'a [u8], ReadError> {
        self.image
            .raw_payload(self.record.offset.to_native(), self.record.len.to_native())
            .map_err(|error| match error {
                ReadError::PayloadRegion { .. } => self.corrupt(),
                other => other,
            })
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

/// The records of `table` that `span` refers to, or none if it lies
/// outside the table.
fn slice<'t, T>(table: &'t rkyv::vec::ArchivedVec<T>, span: &ArchivedSpan) -> &'t [T] {
    span.range()
        .and_then(|range| table.as_slice().get(range))
        .unwrap_or_default()
}

fn pair(reference: &ArchivedStrRef) -> (u32, u32) {
    (reference.offset.to_native(), reference.len.to_native())
}

fn span_pair(span: &ArchivedSpan) -> (u32, u32) {
    (span.start.to_native(), span.len.to_native())
}

/// Checks that entry `index` references only what it owns, each thing once
/// (see `layout.rs`), in time linear in what it owns. Its block passed its
/// check, so its ranges lie inside the tables and are its own.
fn check_layout(
    tables: &ArchivedIndex,
    index: usize,
    record: &ArchivedEntryRecord,
    payload_len: u64,
) -> Result<(), ReadError> {
    let out_of_range =
        |what: &str, span: (u32, u32), table: &'static str, limit: usize| ReadError::OutOfRange {
            what: format!("entry {index}'s {what}"),
            start: u64::from(span.0),
            len: u64::from(span.1),
            table,
            limit: limit as u64,
        };
    let owned = |span: &ArchivedSpan, what: &str, table: &'static str, len: usize| {
        span.range()
            .filter(|range| range.end <= len)
            .ok_or_else(|| out_of_range(what, span_pair(span), table, len))
    };
    let text = owned(
        &record.strings,
        "text region",
        "entry text",
        tables.strings.len(),
    )?;
    let deps = owned(&record.deps, "deps", "dep table", tables.deps.len())?;
    let artifacts = owned(
        &record.artifacts,
        "artifacts",
        "artifact table",
        tables.artifacts.len(),
    )?;
    let entry_points = owned(
        &record.entry_points,
        "entry points",
        "entry-point table",
        tables.entry_points.len(),
    )?;
    let owner = tables
        .owners
        .get(record.owner.to_native() as usize)
        .filter(|owner| {
            owner
                .entries
                .range()
                .is_some_and(|range| range.contains(&index))
        });
    if owner.is_none() {
        return Err(malformed(index, "its owner does not own it"));
    }

    // Text: every reference starts where the previous one ended.
    let mut text_at = TextCursor {
        index,
        at: text.start,
        end: text.end,
    };
    text_at.next(&record.name, || "name".to_owned())?;
    for (position, dep) in tables.deps.as_slice()[deps].iter().enumerate() {
        text_at.next(&dep.name, || format!("dep {position}'s name"))?;
    }
    let mut next_entry_point = entry_points.start;
    let payload_start = record.payloads.offset.to_native();
    let payload_end = payload_start
        .checked_add(record.payloads.len.to_native())
        .filter(|&end| end <= payload_len)
        .ok_or_else(|| ReadError::OutOfRange {
            what: format!("entry {index}'s payloads"),
            start: payload_start,
            len: record.payloads.len.to_native(),
            table: "payload region",
            limit: payload_len,
        })?;
    let mut next_payload = payload_start;
    for (position, artifact) in tables.artifacts.as_slice()[artifacts].iter().enumerate() {
        text_at.next(&artifact.custom, || format!("artifact {position}'s kind"))?;
        let own = artifact.entry_points.range();
        let Some(own) = own.filter(|range| range.start == next_entry_point) else {
            return Err(ReadError::Overlap(format!(
                "entry {index}'s artifact {position} has entry points {}+{}, where its next ones start at {next_entry_point}",
                artifact.entry_points.start.to_native(),
                artifact.entry_points.len.to_native(),
            )));
        };
        if own.end > entry_points.end {
            return Err(out_of_range(
                &format!("artifact {position}'s entry points"),
                span_pair(&artifact.entry_points),
                "entry's entry points",
                entry_points.end,
            ));
        }
        next_entry_point = own.end;
        for name in &tables.entry_points.as_slice()[own] {
            text_at.next(name, || format!("artifact {position}'s entry point"))?;
        }
        let (offset, len) = (artifact.offset.to_native(), artifact.len.to_native());
        if offset % REGION_ALIGN as u64 != 0 || offset < next_payload {
            return Err(ReadError::Overlap(format!(
                "entry {index}'s artifact {position} has its payload at {offset}, where its next payload may start at {next_payload} (at a multiple of {REGION_ALIGN})"
            )));
        }
        let Some(end) = offset.checked_add(len).filter(|&end| end <= payload_end) else {
            return Err(ReadError::OutOfRange {
                what: format!("entry {index}'s artifact {position}'s payload"),
                start: offset,
                len,
                table: "entry's payloads",
                limit: payload_end,
            });
        };
        next_payload = end;
    }
    if next_entry_point != entry_points.end {
        return Err(ReadError::Overlap(format!(
            "entry {index}'s artifacts use entry points up to {next_entry_point}, its range ends at {}",
            entry_points.end
        )));
    }
    if text_at.at != text.end {
        return Err(ReadError::Overlap(format!(
            "entry {index}'s text ends at {}, its text region at {}",
            text_at.at, text.end
        )));
    }
    Ok(())
}

/// Walks an entry's text region: each reference must start where the
/// previous one ended and stay inside the region.
struct TextCursor {
    index: usize,
    at: usize,
    end: usize,
}

impl TextCursor {
    /// `what` names the reference, for the error (built only on failure:
    /// this runs once per string of every entry checked).
    fn next(
        &mut self,
        reference: &ArchivedStrRef,
        what: impl Fn() -> String,
    ) -> Result<(), ReadError> {
        let (start, len) = pair(reference);
        if start as usize != self.at {
            return Err(ReadError::Overlap(format!(
                "entry {}'s {} is at {start}+{len}, where its text continues at {}",
                self.index,
                what(),
                self.at,
            )));
        }
        match reference.range().filter(|range| range.end <= self.end) {
            Some(range) => {
                self.at = range.end;
                Ok(())
            }
            None => Err(ReadError::OutOfRange {
                what: format!("entry {}'s {}", self.index, what()),
                start: u64::from(start),
                len: u64::from(len),
                table: "entry's text region",
                limit: self.end as u64,
            }),
        }
    }
}

fn malformed(index: usize, what: &str) -> ReadError {
    ReadError::EntryMalformed {
        index,
        what: what.to_owned(),
    }
}

/// The checksum of entry `record`: its fields, its text region once, and
/// the fields of the dep, artifact and entry-point records it owns. Reads
/// out-of-range references as empty (the reader checks the layout first;
/// the writer and the forging tools seal whatever they were given).
pub(crate) fn entry_checksum(tables: &ArchivedIndex, record: &ArchivedEntryRecord) -> [u8; 32] {
    let owner = tables
        .owners
        .get(record.owner.to_native() as usize)
        .map(|owner| &owner.digest)
        .unwrap_or(&[0; 32]);
    let text: &[u8] = record
        .strings
        .range()
        .and_then(|range| tables.strings.as_slice().get(range))
        .unwrap_or_default();
    let mut hasher = EntryHasher::new(&EntryFields {
        owner,
        key: &record.key,
        min_world: record.min_world.to_native(),
        max_world: record.max_world.to_native(),
        payloads: (
            record.payloads.offset.to_native(),
            record.payloads.len.to_native(),
        ),
        name: pair(&record.name),
        strings: span_pair(&record.strings),
        deps: span_pair(&record.deps),
        artifacts: span_pair(&record.artifacts),
        entry_points: span_pair(&record.entry_points),
        flags: record.flags.to_native(),
        text,
    });
    for dep in slice(&tables.deps, &record.deps) {
        hasher.dep(&DepFields {
            fingerprint: &dep.fingerprint,
            name: pair(&dep.name),
            group: dep.group.to_native(),
            member: dep.member.to_native(),
        });
    }
    for artifact in slice(&tables.artifacts, &record.artifacts) {
        hasher.artifact(&ArtifactFields {
            kind: artifact.kind.to_native(),
            custom: pair(&artifact.custom),
            entry_points: span_pair(&artifact.entry_points),
            offset: artifact.offset.to_native(),
            len: artifact.len.to_native(),
            hash: &artifact.hash,
            flags: artifact.flags.to_native(),
        });
        for name in slice(&tables.entry_points, &artifact.entry_points) {
            hasher.entry_point(pair(name));
        }
    }
    hasher.finish()
}

/// Checks the values of entry `index` (its layout and checksum passed):
/// reserved fields, worlds, kinds, UTF-8 text, that a lookup leads to it,
/// and that the dependency index lists it under each of its deps.
fn check_values(
    image: &Image,
    index: usize,
    record: &ArchivedEntryRecord,
) -> Result<(), ReadError> {
    let tables = image.index();
    if record.flags.to_native() != 0 {
        return Err(malformed(index, "reserved flags are set"));
    }
    if record.min_world.to_native() > record.max_world.to_native() {
        return Err(malformed(index, "min_world > max_world"));
    }
    let text = |reference: &ArchivedStrRef, what: &str| -> Result<&str, ReadError> {
        image
            .entry_str(reference)
            .ok_or_else(|| malformed(index, &format!("its {what} is not UTF-8")))
    };
    text(&record.name, "name")?;
    for dep in slice(&tables.deps, &record.deps) {
        let name = text(&dep.name, "dep name")?;
        if !dep_is_listed(tables, index, name.as_bytes(), dep) {
            return Err(ReadError::DepNotIndexed {
                entry: index,
                name: name.to_owned(),
                fingerprint: Digest(dep.fingerprint),
            });
        }
    }
    for artifact in slice(&tables.artifacts, &record.artifacts) {
        let kind = artifact.kind.to_native();
        let custom = text(&artifact.custom, "artifact kind")?;
        if kind > CUSTOM_KIND || (kind == CUSTOM_KIND) == custom.is_empty() {
            return Err(malformed(index, "an artifact has an unknown kind"));
        }
        if kind == CUSTOM_KIND && ArtifactKind::is_built_in_name(custom) {
            return Err(malformed(
                index,
                "a custom artifact kind spells a built-in one",
            ));
        }
        if artifact.flags.to_native() != 0 {
            return Err(malformed(index, "an artifact has reserved flags set"));
        }
        for name in slice(&tables.entry_points, &artifact.entry_points) {
            text(name, "entry point name")?;
        }
    }
    if !reachable(tables, index, record) {
        return Err(ReadError::EntryUnreachable { index });
    }
    Ok(())
}

/// Whether `dep` of entry `index` names a group of the dependency index
/// with its (name, fingerprint) that lists `index` at the position the dep
/// says: O(name length). The index is read as it is: if it is corrupt, every
/// use of it through its checksums fails (merges reject the image,
/// invalidation closes it), and if it is intact, it lists the entry.
fn dep_is_listed(
    tables: &ArchivedIndex,
    index: usize,
    name: &[u8],
    dep: &crate::layout::ArchivedDepRecord,
) -> bool {
    let Some(group) = tables.dep_groups.get(dep.group.to_native() as usize) else {
        return false;
    };
    let group_name = group
        .name
        .range()
        .and_then(|range| tables.group_names.as_slice().get(range));
    let member = dep.member.to_native();
    let listed = (member < group.members.count())
        .then(|| group.members.start.to_native().checked_add(member))
        .flatten()
        .and_then(|slot| tables.dep_members.get(slot as usize))
        .map(|entry| entry.to_native() as usize);
    group_name == Some(name) && group.fingerprint == dep.fingerprint && listed == Some(index)
}

/// Whether a lookup of the entry's own (owner, key) finds it.
fn reachable(tables: &ArchivedIndex, index: usize, record: &ArchivedEntryRecord) -> bool {
    let Some(owner) = tables.owners.get(record.owner.to_native() as usize) else {
        return false;
    };
    let Some(range): Option<Range<usize>> = owner.entries.range() else {
        return false;
    };
    let Some(entries) = tables.entries.as_slice().get(range.clone()) else {
        return false;
    };
    let buckets = owner
        .buckets
        .range()
        .and_then(|buckets| tables.key_buckets.as_slice().get(buckets))
        .unwrap_or_default();
    crate::search::find_key(entries, buckets, owner.bucket_bits.to_native(), &record.key)
        .is_some_and(|found| range.start + found == index)
}
