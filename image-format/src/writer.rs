//! [`ImageWriter`]: entries and metadata in, deterministic image bytes out.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use crate::header::{
    ArchiveLayout, FORMAT_VERSION, HEADER_LEN, Header, MAX_PRODUCER_LEN, REGION_ALIGN, RKYV_VERSION,
};
use crate::layout::{
    ArchivedIndex, ArtifactRecord, BLOCK_ENTRIES, BlockRecord, CUSTOM_KIND, DepGroupRecord,
    DepRecord, EntryRecord, Index, LabelRecord, OwnerRecord, PayloadSpan, Span, StrRef,
};
use crate::{ArtifactKind, Digest, EntryData, ImageMeta, WriteError};

/// Builds deterministic image bytes.
///
/// Entries are written sorted by (owner, key) whatever the push order; deps,
/// artifacts and entry points keep the order given. The same entries and
/// metadata always give byte-identical images (there are no timestamps).
#[derive(Default)]
pub struct ImageWriter {
    meta: ImageMeta,
    entries: Vec<EntryData>,
}

impl ImageWriter {
    /// A writer with `meta` and no entries.
    pub fn new(meta: ImageMeta) -> Self {
        ImageWriter {
            meta,
            entries: Vec::new(),
        }
    }

    /// The image bytes with the payload region compressed: groups of one
    /// owner each, split at entry boundaries so that none passes
    /// [`GROUP_SPLIT`](crate::GROUP_SPLIT) but for a single larger entry,
    /// each a zstd frame at `level` (1 to 22), or stored as is where
    /// compressing does not pay. The groups are compressed in parallel, on
    /// as many threads as the machine offers; the frames do not depend on
    /// it. The index is written
    /// as for a plain image, so opening and looking up cost the same; a
    /// reader decompresses a group on the first access to one of its
    /// payloads, once per [`Image`](crate::Image), and lends its payloads
    /// from that buffer (see [`Image::is_compressed`](crate::Image::is_compressed)).
    /// The image stays deterministic for a given zstd library version.
    ///
    /// ```
    /// use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, Image, ImageMeta, ImageWriter, Verification};
    ///
    /// let code: Vec<u8> = (0..100_000u32).flat_map(|i| i.to_le_bytes()).collect();
    /// let mut writer = ImageWriter::new(ImageMeta::new("doc", "1"));
    /// writer.push(EntryData {
    ///     owner: Digest::of(b"compiler 1.0 target-a"),
    ///     owner_label: "compiler 1.0/target-a".into(),
    ///     key: Digest::of(b"spec"),
    ///     name: "spec".into(),
    ///     min_world: 1,
    ///     max_world: u64::MAX,
    ///     deps: vec![],
    ///     artifacts: vec![Artifact { kind: ArtifactKind::Bytes, entry_points: vec![], bytes: code.clone() }],
    /// });
    /// let bytes = writer.to_compressed_bytes(19)?;
    /// assert!(bytes.len() < code.len() / 2);
    /// let image = Image::from_bytes(&bytes, Verification::Structural)?;
    /// assert!(image.is_compressed());
    /// let entry = image.entry(0)?;
    /// assert_eq!(entry.artifact(0)?.bytes()?, code); // decompressed once, then borrowed
    /// # Ok::<(), kiln_image::ImageError>(())
    /// ```
    ///
    /// A method of its own, not a setting of [`to_bytes`](Self::to_bytes),
    /// so that a program that writes only plain images (a cache's disk
    /// tier) links no compressor.
    ///
    /// # Errors
    /// The errors of [`ImageWriter::to_bytes`]; [`WriteError::Compress`]
    /// when zstd fails.
    #[cfg(feature = "compress")]
    pub fn to_compressed_bytes(&self, level: i32) -> Result<Vec<u8>, WriteError> {
        let (mut index, payloads, payload_len, producer) = self.tables()?;
        let frames = crate::compress::compress(&mut index, &payloads, payload_len, level)?;
        let stored_len = frames
            .last()
            .map_or(0, |(offset, frame)| offset + frame.len() as u64);
        assemble(
            &index,
            frames
                .iter()
                .map(|(offset, frame)| (*offset, frame.as_slice())),
            stored_len,
            producer,
        )
    }

    /// Adds an entry. Problems (duplicates, invalid values) are reported by
    /// [`to_bytes`](Self::to_bytes).
    pub fn push(&mut self, entry: EntryData) {
        self.entries.push(entry)
    }

    /// Number of entries pushed.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry was pushed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The image bytes. Errors on a duplicate (owner, key), on one owner
    /// with two labels, on `min_world > max_world`, on a custom artifact
    /// kind that is empty or spells a built-in kind, on a producer string
    /// that does not fit the header, and on tables beyond the format's
    /// 32-bit limits.
    ///
    /// # Errors
    /// [`WriteError::DuplicateEntry`], [`WriteError::OwnerLabelConflict`],
    /// [`WriteError::InvalidWorlds`], [`WriteError::InvalidString`] or
    /// [`WriteError::TooLarge`], as listed above.
    pub fn to_bytes(&self) -> Result<Vec<u8>, WriteError> {
        let (index, payloads, payload_len, producer) = self.tables()?;
        assemble(&index, payloads, payload_len, producer)
    }

    /// The index (checksums not yet sealed), the payloads at their offsets,
    /// the payload region's length and the producer string.
    #[allow(clippy::type_complexity)]
    fn tables(&self) -> Result<(Index, Vec<(u64, &[u8])>, u64, String), WriteError> {
        let (tables, producer) = prepare(&self.meta, &self.entries)?;
        Ok((tables.index, tables.payloads, tables.payload_len, producer))
    }

    /// Writes the image to `path` atomically: a temporary file in the same
    /// directory is written, flushed to disk and renamed over `path`, then
    /// the directory is flushed. Readers see the old file or the new one,
    /// never a partial one, and a mapped old image keeps its bytes.
    ///
    /// # Errors
    /// The errors of [`ImageWriter::to_bytes`]; [`WriteError::Io`] when the
    /// file cannot be written, synced or renamed.
    pub fn write_atomic(&self, path: &Path) -> Result<(), WriteError> {
        let bytes = self.to_bytes()?;
        write_file_atomic(path, &bytes)
    }
}

/// Checks `entries` and `meta` against every rule [`ImageWriter::to_bytes`]
/// enforces, without writing an image: for readers of another format (a
/// shipped image) that hand entries on to a writer later, so that an entry
/// no image can hold is refused where it is read.
///
/// ```
/// use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, check_writable};
///
/// let mut entry = EntryData {
///     owner: Digest::of(b"owner"),
///     owner_label: "owner".into(),
///     key: Digest::of(b"key"),
///     name: "k".into(),
///     min_world: 1,
///     max_world: u64::MAX,
///     deps: vec![],
///     artifacts: vec![Artifact { kind: ArtifactKind::Ptx, entry_points: vec![], bytes: vec![1] }],
/// };
/// assert!(check_writable(&ImageMeta::default(), std::slice::from_ref(&entry)).is_ok());
/// entry.artifacts[0].kind = ArtifactKind::Custom(String::new());
/// assert!(check_writable(&ImageMeta::default(), &[entry]).is_err());
/// ```
///
/// # Errors
/// As [`ImageWriter::to_bytes`], but for I/O.
pub fn check_writable(meta: &ImageMeta, entries: &[EntryData]) -> Result<(), WriteError> {
    prepare(meta, entries).map(|_| ())
}

/// The tables of an image of `entries` and `meta`, and its producer string,
/// after every check of [`ImageWriter::to_bytes`].
fn prepare<'a>(
    meta: &'a ImageMeta,
    entries: &'a [EntryData],
) -> Result<(Tables<'a>, String), WriteError> {
    let producer = meta.producer();
    if producer.len() > MAX_PRODUCER_LEN {
        return Err(WriteError::TooLarge {
            what: "the producer name and version",
            size: producer.len() as u64,
            limit: MAX_PRODUCER_LEN as u64,
        });
    }
    if producer.contains('\0') {
        return Err(WriteError::InvalidString {
            what: "producer",
            value: producer,
            reason: "the header stores it NUL-padded",
        });
    }
    let mut order: Vec<&EntryData> = entries.iter().collect();
    order.sort_by_key(|entry| (entry.owner, entry.key));
    for pair in order.windows(2) {
        if (pair[0].owner, pair[0].key) == (pair[1].owner, pair[1].key) {
            return Err(WriteError::DuplicateEntry {
                owner: pair[0].owner,
                key: pair[0].key,
                first: pair[0].name.clone(),
                second: pair[1].name.clone(),
            });
        }
    }
    Ok((Tables::build(&order, meta)?, producer))
}

/// Writes `bytes` to `path` with a temporary file (`.kiln-tmp-*` in the same
/// directory, mode 0644 on Unix), fsync, rename and an fsync of the directory.
/// A writer killed midway leaves at most that temporary file behind, never a
/// partial `path`.
///
/// # Errors
/// [`WriteError::Io`] when the temporary file cannot be written, synced or
/// renamed, or the directory synced.
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<(), WriteError> {
    let io = |action| {
        move |source| WriteError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    };
    let directory = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let mut builder = tempfile::Builder::new();
    builder.prefix(".kiln-tmp-");
    // Images are shared read-only artifacts (an `OUT_DIR`, a directory in
    // `KILN_IMAGE_PATH` used by several accounts): readable by everyone, as a
    // plain `File::create` under the usual umask would make them, not the
    // owner-only mode temporary files get.
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644));
    let mut file = builder
        .tempfile_in(directory)
        .map_err(io("create a temporary file beside"))?;
    write_in_pieces(&mut file, bytes).map_err(io("write"))?;
    file.as_file().sync_all().map_err(io("sync"))?;
    file.persist(path)
        .map_err(|error| io("rename onto")(error.error))?;
    #[cfg(unix)]
    std::fs::File::open(directory)
        .and_then(|dir| dir.sync_all())
        .map_err(io("sync the directory of"))?;
    Ok(())
}

/// The size of the pieces [`write_in_pieces`] writes: the kernel's default
/// fault-around window (16 pages of 4 KiB).
pub const WRITE_PIECE: usize = 64 << 10;

/// Writes image bytes to `out` in pieces of [`WRITE_PIECE`] bytes, as every
/// image file Kiln writes is written.
///
/// A mapped image is read at random: a reader that touches one entry should
/// make about that entry resident, not megabytes around it. Linux caches a
/// file in folios whose size follows the writes that filled them (up to
/// 2 MiB on ext4 and XFS), and maps a cached folio whole when a fault lands
/// in it, so an image written in one call would cost a reader up to 2 MiB of
/// resident memory per scattered touch for as long as the writer's pages stay
/// cached. Pieces of 64 KiB keep that step at what a fault maps anyway.
/// (Pages read back from disk after eviction come in as the reader's faults
/// ask, whatever the writes were.)
///
/// ```
/// let mut out = Vec::new();
/// kiln_image::write_in_pieces(&mut out, &[7u8; 200_000])?;
/// assert_eq!(out.len(), 200_000);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// The first error of `out`.
pub fn write_in_pieces(out: &mut impl Write, bytes: &[u8]) -> std::io::Result<()> {
    for piece in bytes.chunks(WRITE_PIECE) {
        out.write_all(piece)?;
    }
    Ok(())
}

/// Converts a length or position to the format's 32-bit field.
fn fit_u32(value: usize, what: &'static str) -> Result<u32, WriteError> {
    u32::try_from(value).map_err(|_| WriteError::TooLarge {
        what,
        size: value as u64,
        limit: u64::from(u32::MAX),
    })
}

/// A string blob: each string appended where the previous one ended, once
/// per use (references may not share bytes, see `layout.rs`).
struct Blob {
    bytes: Vec<u8>,
    what: &'static str,
}

impl Blob {
    fn new(what: &'static str) -> Blob {
        Blob {
            bytes: Vec::new(),
            what,
        }
    }

    fn add(&mut self, text: &str) -> Result<StrRef, WriteError> {
        let reference = StrRef {
            offset: fit_u32(self.bytes.len(), self.what)?,
            len: fit_u32(text.len(), "a string")?,
        };
        fit_u32(self.bytes.len() + text.len(), self.what)?;
        self.bytes.extend_from_slice(text.as_bytes());
        Ok(reference)
    }

    fn len_u32(&self) -> Result<u32, WriteError> {
        fit_u32(self.bytes.len(), self.what)
    }
}

/// Everything the image holds, laid out: the index (checksums not yet
/// sealed) and the payloads in order with their offsets in the payload
/// region.
struct Tables<'a> {
    index: Index,
    payloads: Vec<(u64, &'a [u8])>,
    payload_len: u64,
}

/// Each distinct (dep name, fingerprint) and the entries that carry it, in
/// ascending order.
type Groups<'a> = BTreeMap<(&'a str, Digest), Vec<u32>>;

impl<'a> Tables<'a> {
    fn build(order: &[&'a EntryData], meta: &'a ImageMeta) -> Result<Tables<'a>, WriteError> {
        fit_u32(order.len(), "the number of entries")?;
        let groups = dep_groups(order);
        let positions: BTreeMap<(&str, Digest), u32> = groups
            .keys()
            .enumerate()
            .map(|(position, key)| (*key, position as u32))
            .collect();
        let mut strings = Blob::new("the entry text");
        let mut meta_strings = Blob::new("the metadata text");
        let mut index = Index::default();
        let mut payloads = Vec::new();
        let mut payload_end = 0u64;
        for (position, entry) in order.iter().enumerate() {
            let entry_index = position as u32;
            if position % BLOCK_ENTRIES == 0 {
                index.blocks.push(BlockRecord {
                    payload: payload_end,
                    strings: strings.len_u32()?,
                    deps: fit_u32(index.deps.len(), "the dep table")?,
                    artifacts: fit_u32(index.artifacts.len(), "the artifact table")?,
                    entry_points: fit_u32(index.entry_points.len(), "the entry-point table")?,
                });
            }
            if entry.min_world > entry.max_world {
                return Err(WriteError::InvalidWorlds {
                    name: entry.name.clone(),
                    min_world: entry.min_world,
                    max_world: entry.max_world,
                });
            }
            let owner = owner_of(&mut index, &mut meta_strings, entry, entry_index)?;
            let text_start = strings.len_u32()?;
            let deps = Span {
                start: fit_u32(index.deps.len(), "the dep table")?,
                len: fit_u32(entry.deps.len(), "an entry's deps")?,
            };
            let artifacts = Span {
                start: fit_u32(index.artifacts.len(), "the artifact table")?,
                len: fit_u32(entry.artifacts.len(), "an entry's artifacts")?,
            };
            let entry_points_start = fit_u32(index.entry_points.len(), "the entry-point table")?;
            let name = strings.add(&entry.name)?;
            for dep in &entry.deps {
                let key = (dep.name.as_str(), dep.fingerprint);
                let group = positions.get(&key).copied().unwrap_or_default();
                let member = groups
                    .get(&key)
                    .and_then(|members| members.binary_search(&entry_index).ok())
                    .unwrap_or_default();
                index.deps.push(DepRecord {
                    fingerprint: dep.fingerprint.0,
                    name: strings.add(&dep.name)?,
                    group,
                    member: member as u32,
                });
            }
            fit_u32(index.deps.len(), "the dep table")?;
            let payloads_start = payload_end;
            let mut first_payload = None;
            for artifact in &entry.artifacts {
                let (kind, custom) = kind_tag(&artifact.kind)?;
                let offset = crate::header::align_up(payload_end)
                    .ok_or_else(WriteError::payload_region_too_large)?;
                first_payload.get_or_insert(offset);
                let len = artifact.bytes.len() as u64;
                payload_end = offset
                    .checked_add(len)
                    .ok_or_else(WriteError::payload_region_too_large)?;
                let custom = strings.add(custom)?;
                let entry_points = Span {
                    start: fit_u32(index.entry_points.len(), "the entry-point table")?,
                    len: fit_u32(artifact.entry_points.len(), "an artifact's entry points")?,
                };
                for entry_point in &artifact.entry_points {
                    index.entry_points.push(strings.add(entry_point)?);
                }
                index.artifacts.push(ArtifactRecord {
                    offset,
                    len,
                    hash: *blake3::hash(&artifact.bytes).as_bytes(),
                    kind,
                    custom,
                    entry_points,
                    flags: 0,
                });
                payloads.push((offset, artifact.bytes.as_slice()));
            }
            fit_u32(index.artifacts.len(), "the artifact table")?;
            let entry_points_end = fit_u32(index.entry_points.len(), "the entry-point table")?;
            let payload_start = first_payload.unwrap_or(payloads_start);
            index.entries.push(EntryRecord {
                min_world: entry.min_world,
                max_world: entry.max_world,
                payloads: PayloadSpan {
                    offset: payload_start,
                    len: payload_end - payload_start,
                },
                key: entry.key.0,
                checksum: [0; 32],
                name,
                strings: Span {
                    start: text_start,
                    len: strings.len_u32()? - text_start,
                },
                deps,
                artifacts,
                entry_points: Span {
                    start: entry_points_start,
                    len: entry_points_end - entry_points_start,
                },
                owner,
                flags: 0,
            });
        }
        build_key_buckets(&mut index, order)?;
        build_dep_index(&mut index, groups)?;
        index.producer_name = meta_strings.add(&meta.producer_name)?;
        index.producer_version = meta_strings.add(&meta.producer_version)?;
        for (key, value) in &meta.labels {
            index.labels.push(LabelRecord {
                key: meta_strings.add(key)?,
                value: meta_strings.add(value)?,
            });
        }
        index.strings = strings.bytes;
        index.meta_strings = meta_strings.bytes;
        Ok(Tables {
            index,
            payloads,
            payload_len: payload_end,
        })
    }
}

/// The dependency groups of entries in image order: each entry listed once
/// per distinct (name, fingerprint) it carries.
fn dep_groups<'a>(order: &[&'a EntryData]) -> Groups<'a> {
    let mut groups: Groups<'a> = BTreeMap::new();
    for (position, entry) in order.iter().enumerate() {
        for dep in &entry.deps {
            let members = groups
                .entry((dep.name.as_str(), dep.fingerprint))
                .or_default();
            if members.last() != Some(&(position as u32)) {
                members.push(position as u32);
            }
        }
    }
    groups
}

/// The owner index of `entry`, adding the owner when it is new (entries
/// arrive sorted by owner, so an owner's entries are contiguous and owner
/// labels follow each other in the metadata text).
fn owner_of(
    index: &mut Index,
    meta_strings: &mut Blob,
    entry: &EntryData,
    entry_index: u32,
) -> Result<u32, WriteError> {
    if let Some(last) = index.owners.last_mut()
        && last.digest == entry.owner.0
    {
        let label = &meta_strings.bytes[last.label.offset as usize..][..last.label.len as usize];
        if label != entry.owner_label.as_bytes() {
            return Err(WriteError::OwnerLabelConflict {
                owner: entry.owner,
                first: String::from_utf8_lossy(label).into_owned(),
                second: entry.owner_label.clone(),
            });
        }
        last.entries.len += 1;
        return fit_u32(index.owners.len() - 1, "the owner table");
    }
    index.owners.push(OwnerRecord {
        digest: entry.owner.0,
        label: meta_strings.add(&entry.owner_label)?,
        entries: Span {
            start: entry_index,
            len: 1,
        },
        buckets: Span::default(),
        bucket_bits: 0,
    });
    fit_u32(index.owners.len() - 1, "the owner table")
}

fn kind_tag(kind: &ArtifactKind) -> Result<(u32, &str), WriteError> {
    match kind {
        ArtifactKind::Custom(tag) => {
            let reason = if tag.is_empty() {
                Some("a custom kind needs a non-empty tag")
            } else if ArtifactKind::is_built_in_name(tag) {
                Some("it spells a built-in kind: use that variant")
            } else {
                None
            };
            match reason {
                Some(reason) => Err(WriteError::InvalidString {
                    what: "artifact kind",
                    value: tag.clone(),
                    reason,
                }),
                None => Ok((CUSTOM_KIND, tag.as_str())),
            }
        }
        built_in => {
            let tag = ArtifactKind::BUILT_IN
                .iter()
                .position(|(kind, _)| kind == built_in)
                .unwrap_or_default();
            Ok((tag as u32, ""))
        }
    }
}

/// Fills each owner's radix table (see `search.rs`).
fn build_key_buckets(index: &mut Index, order: &[&EntryData]) -> Result<(), WriteError> {
    for owner in &mut index.owners {
        let first = owner.entries.start as usize;
        let keys: Vec<&[u8; 32]> = order[first..][..owner.entries.len as usize]
            .iter()
            .map(|entry| &entry.key.0)
            .collect();
        let bits = crate::search::bucket_bits(keys.len());
        let start = fit_u32(index.key_buckets.len(), "the key bucket table")?;
        index
            .key_buckets
            .extend(crate::search::bucket_table(&keys, bits));
        owner.buckets = Span {
            start,
            len: fit_u32(
                index.key_buckets.len() - start as usize,
                "the key bucket table",
            )?,
        };
        owner.bucket_bits = bits;
    }
    fit_u32(index.key_buckets.len(), "the key bucket table")?;
    Ok(())
}

/// The dependency group table, member lists and group names; checksums are
/// sealed later, from the archived bytes.
fn build_dep_index(index: &mut Index, groups: Groups<'_>) -> Result<(), WriteError> {
    let mut names = Blob::new("the dependency group names");
    for ((name, fingerprint), members) in groups {
        let start = fit_u32(index.dep_members.len(), "the dependency index")?;
        index.dep_members.extend_from_slice(&members);
        index.dep_groups.push(DepGroupRecord {
            fingerprint: fingerprint.0,
            members_checksum: [0; 32],
            name: names.add(name)?,
            members: Span {
                start,
                len: fit_u32(members.len(), "a dependency group")?,
            },
        });
    }
    fit_u32(index.dep_members.len(), "the dependency index")?;
    fit_u32(index.dep_groups.len(), "the dependency index")?;
    index.group_names = names.bytes;
    Ok(())
}

/// Serializes `index` (checksums sealed here) and lays out header, index
/// and payloads. `payloads` places each payload at its offset in the
/// payload region of `payload_len` bytes.
pub(crate) fn assemble<'p>(
    index: &Index,
    payloads: impl IntoIterator<Item = (u64, &'p [u8])>,
    payload_len: u64,
    producer: String,
) -> Result<Vec<u8>, WriteError> {
    let mut index_bytes = rkyv::to_bytes::<rkyv::rancor::Error>(index)
        .map_err(|error| WriteError::Serialize(error.to_string()))?;
    crate::seal::seal(&mut index_bytes)?;
    let archived = rkyv::access::<ArchivedIndex, rkyv::rancor::Error>(&index_bytes)
        .map_err(|error| WriteError::Serialize(error.to_string()))?;
    let index_checksum = crate::verify::index_checksum(&index_bytes, archived);
    let index_offset = HEADER_LEN as u64;
    let index_len = index_bytes.len() as u64;
    let payload_offset = crate::header::align_up(index_offset + index_len)
        .ok_or_else(WriteError::payload_region_too_large)?;
    let total = payload_offset
        .checked_add(payload_len)
        .ok_or_else(WriteError::payload_region_too_large)?;
    let total_len = usize::try_from(total).map_err(|_| WriteError::TooLarge {
        what: "the image",
        size: total,
        limit: usize::MAX as u64,
    })?;
    let mut out = vec![0u8; total_len];
    out[HEADER_LEN..][..index_bytes.len()].copy_from_slice(&index_bytes);
    let payload_region = &mut out[payload_offset as usize..];
    for (offset, bytes) in payloads {
        let place = usize::try_from(offset)
            .ok()
            .and_then(|start| payload_region.get_mut(start..start.checked_add(bytes.len())?))
            .ok_or(WriteError::PayloadRegion {
                start: offset,
                end: offset.saturating_add(bytes.len() as u64),
                available: payload_len,
            })?;
        place.copy_from_slice(bytes);
    }
    let header = Header {
        format_version: FORMAT_VERSION,
        rkyv_version: RKYV_VERSION.to_owned(),
        layout: ArchiveLayout::native(),
        region_alignment: REGION_ALIGN,
        producer,
        entry_count: archived.entries.len() as u64,
        index_offset,
        index_len,
        payload_offset,
        payload_len,
        body_len: total - HEADER_LEN as u64,
        signature_len: 0,
        body_checksum: Digest::of(&out[HEADER_LEN..]),
        index_checksum,
        header_checksum: Digest::default(),
    };
    out[..HEADER_LEN].copy_from_slice(&header.encode());
    Ok(out)
}
