//! Segments: the immutable kiln images the disk cache is made of.
//!
//! A segment is published atomically (temporary file in the same directory,
//! fsync, rename to `seg-*.kimg`, fsync of the directory), so a file with a
//! segment's name is always complete; it is never modified afterwards, only
//! deleted by compaction once its entries are in a published successor.
//!
//! Every file of the cache directory (segments, `stamps`, `lock`) is opened
//! relative to the directory's handle ([`Dir::open_file`], with
//! [`crate::regular_file`]'s rules): never following a symbolic link, never
//! waiting on a FIFO or a device, and only a regular file, so that nothing
//! planted under one of those names can redirect a write, stall a lookup or
//! feed an unbounded read. Files and directories are created with
//! [`FILE_MODE`](super::dir::FILE_MODE) and
//! [`DIR_MODE`](super::dir::DIR_MODE), given at creation.

use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_image::{Digest, FileAccess, Image, ImageFile, ReadError, Verification};

use super::dir::{Access, Dir, TEMP_PREFIX};
use crate::trust::Provenance;

/// Segment file names start with this.
const SEGMENT_PREFIX: &str = "seg-";
/// Segment file names end with this.
const SEGMENT_SUFFIX: &str = ".kimg";
/// The base segment: compaction's output once it merges the base (or when
/// there is none yet), replaced atomically each time. Its name is known, so
/// a new process looks there first without listing the directory.
pub(crate) const BASE_SEGMENT: &str = "seg-base.kimg";

/// Signed segments' names start with this, then the first 16 hex digits
/// of the owner's and of the key's digest (see [`new_signed_name`]).
const SIGNED_PREFIX: &str = "seg-sig";
/// Names of segments of entries received unsigned from another tier
/// ([`Provenance::Unsigned`]) start with this.
const RECEIVED_PREFIX: &str = "seg-ext-";

/// Which kind of entries a segment holds, as far as compaction and trust
/// go: segments of different classes are never merged together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum SegmentClass {
    /// Entries this user's processes compiled (`seg-base.kimg`, `seg-<ms>-…`):
    /// merged into the base.
    Compiled,
    /// Entries received unsigned from another tier, or of unknown
    /// provenance (`seg-ext-…`): merged among themselves only.
    Received,
    /// One entry received with its signatures (`seg-sig…`): never merged.
    Signed,
}

impl SegmentClass {
    /// The class a segment's name gives (what compaction counts without
    /// opening anything; the segment's own labels decide its
    /// [`Provenance`] when it is opened).
    pub(crate) fn of_name(name: &str) -> SegmentClass {
        if name.starts_with(SIGNED_PREFIX) {
            SegmentClass::Signed
        } else if name.starts_with(RECEIVED_PREFIX) {
            SegmentClass::Received
        } else {
            SegmentClass::Compiled
        }
    }

    /// The class of segments holding entries of `provenance`.
    pub(crate) fn of(provenance: &Provenance) -> SegmentClass {
        match provenance {
            Provenance::Compiled => SegmentClass::Compiled,
            Provenance::Signed => SegmentClass::Signed,
            _ => SegmentClass::Received,
        }
    }
}

/// The largest segment file that is read rather than mapped (other than
/// the base, which is always mapped).
const READ_AT_MOST: u64 = 64 << 10;

/// A published segment, memory-mapped or (when small) read into memory.
pub(crate) struct Segment {
    /// The file name inside the cache directory.
    pub(crate) name: String,
    /// The file's size.
    pub(crate) bytes: u64,
    /// The image (structurally verified; payloads checked on use), shared
    /// with the in-memory cache entries that borrow from it.
    pub(crate) image: Arc<Image>,
    /// The base segment's file identity (its inode number): compaction
    /// replaces the base under the same name.
    pub(crate) file_id: Option<u64>,
    /// Where its entries came from ([`Segment::provenance`]), read from
    /// its labels on first need: a lookup without trusted keys never reads
    /// them.
    provenance: std::sync::OnceLock<Provenance>,
    /// Whether the cache's trusted keys admit it
    /// ([`crate::trust::admit`]; decided once, on the first lookup that
    /// needs it).
    pub(crate) admitted: std::sync::OnceLock<bool>,
}

impl Segment {
    /// Opens the segment `name`, checking its header and index structure.
    ///
    /// Each segment costs one `open` and one `fstat`, then one `read` or
    /// one map. Small segments (at most [`READ_AT_MOST`] bytes, such as the
    /// one-entry segments a store publishes) are read into memory: cheaper
    /// than a map to set up, fault in and tear down, and no file is left
    /// open. Larger ones (compaction's) are mapped whole, in one map, so
    /// that a hit reads only the pages it needs.
    ///
    /// The base segment is always mapped: the mapping holds its file, so
    /// its inode number, read from the opened file, cannot be reused while
    /// this process may compare it with a listing's.
    pub(crate) fn open(dir: &Dir, name: &str) -> Result<Segment, ReadError> {
        Segment::from_file(open_image(dir, name)?, name)
    }

    /// Opens the segment `name` from its file, opened already.
    pub(crate) fn from_file(file: ImageFile, name: &str) -> Result<Segment, ReadError> {
        let is_base = name == BASE_SEGMENT;
        let file_id = if is_base {
            file_id(file.metadata())
        } else {
            None
        };
        let access = if !is_base && file.metadata().len() <= READ_AT_MOST {
            FileAccess::Read
        } else {
            FileAccess::MapWhole
        };
        let image = Image::from_file(file, access, Verification::Structural)?;
        Ok(Segment {
            name: name.to_owned(),
            bytes: image.byte_len(),
            provenance: std::sync::OnceLock::new(),
            image: Arc::new(image),
            file_id,
            admitted: std::sync::OnceLock::new(),
        })
    }

    /// Where its entries came from: a signed segment's is
    /// [`Provenance::Signed`]; an unsigned one's is what its labels record,
    /// and [`Provenance::Compiled`] only if its name says so too.
    pub(crate) fn provenance(&self) -> &Provenance {
        self.provenance
            .get_or_init(|| provenance_of(&self.name, &self.image))
    }
}

/// The provenance of the segment `name` holding `image`: signed by its
/// name (the image carries the signatures that are checked); otherwise
/// from the image's labels, where only a segment named as compiled may be
/// [`Provenance::Compiled`] (one named as received stays received, whatever
/// it says).
pub(crate) fn provenance_of(name: &str, image: &Image) -> Provenance {
    match SegmentClass::of_name(name) {
        SegmentClass::Signed => Provenance::Signed,
        class => match Provenance::from_labels(&image.meta().labels) {
            Provenance::Compiled if class == SegmentClass::Received => Provenance::Unknown,
            provenance => provenance,
        },
    }
}

/// The names (and file identities, where the platform has them) of the
/// published segments of `dir`, without reading any file's metadata (the
/// cheap listing of the lookup path).
pub(crate) fn segment_names(dir: &Dir) -> io::Result<Vec<(String, Option<u64>)>> {
    let mut names: Vec<(String, Option<u64>)> = dir
        .list()?
        .into_iter()
        .filter(|listed| listed.is_file && is_segment_name(&listed.name))
        .map(|listed| (listed.name, listed.ino))
        .collect();
    names.sort();
    Ok(names)
}

/// The inode number of a file, from its metadata.
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> Option<u64> {
    Some(std::os::unix::fs::MetadataExt::ino(meta))
}

#[cfg(not(unix))]
fn file_id(_: &std::fs::Metadata) -> Option<u64> {
    None
}

/// A file of the cache directory, as listed.
#[derive(Clone, Debug)]
pub(crate) struct FileInfo {
    /// The file name.
    pub(crate) name: String,
    /// Its size.
    pub(crate) bytes: u64,
    /// Its modification time, in milliseconds since the Unix epoch.
    pub(crate) modified_ms: u64,
}

/// The segments and temporary files of a cache directory.
#[derive(Debug, Default)]
pub(crate) struct Listing {
    /// Published segments, oldest name first.
    pub(crate) segments: Vec<FileInfo>,
    /// Temporary files: writes in progress, or orphans of crashed writers.
    pub(crate) temp_files: Vec<FileInfo>,
}

impl Listing {
    /// Lists `dir`; files that vanish while listing are left out, and so is
    /// anything but a regular file (no link followed).
    pub(crate) fn read(dir: &Dir) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for listed in dir.list()? {
            let name = listed.name;
            let is_segment = is_segment_name(&name);
            if !is_segment && !name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let Ok(Some(stat)) = dir.stat(&name) else {
                continue; // deleted since the listing saw it
            };
            if !stat.is_file {
                continue;
            }
            let info = FileInfo {
                name,
                bytes: stat.len,
                modified_ms: millis_since_epoch(stat.modified),
            };
            if is_segment {
                listing.segments.push(info);
            } else {
                listing.temp_files.push(info);
            }
        }
        listing.segments.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(listing)
    }

    /// Total size of the segments.
    pub(crate) fn segment_bytes(&self) -> u64 {
        self.segments.iter().map(|f| f.bytes).sum()
    }
}

/// Whether `name` is a published segment's file name.
fn is_segment_name(name: &str) -> bool {
    name.starts_with(SEGMENT_PREFIX) && name.ends_with(SEGMENT_SUFFIX)
}

/// A new segment name: time first (so names sort by age), then the process
/// id and a per-process counter (so concurrent writers never collide), then
/// the entry count (so readers can try the fullest segment first without
/// opening any); [`RECEIVED_PREFIX`] first for a segment of received
/// entries.
fn new_segment_name(entries: usize, class: SegmentClass) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let prefix = match class {
        SegmentClass::Received => RECEIVED_PREFIX,
        _ => SEGMENT_PREFIX,
    };
    format!(
        "{prefix}{:013}-{}-{n}-{entries}{SEGMENT_SUFFIX}",
        now_ms(),
        std::process::id()
    )
}

/// A new name for a signed one-entry segment holding `(owner, key)`: the
/// owner's and key's first 16 hex digits after [`SIGNED_PREFIX`], so that
/// a lookup opens only the signed segments that may hold its entry, then
/// what [`new_segment_name`] gives.
fn new_signed_name(owner: &Digest, key: &Digest) -> String {
    let plain = new_segment_name(1, SegmentClass::Signed);
    let rest = plain.strip_prefix(SEGMENT_PREFIX).unwrap_or(&plain);
    format!(
        "{SIGNED_PREFIX}{}{}-{rest}",
        &owner.to_hex()[..16],
        &key.to_hex()[..16]
    )
}

/// Whether `name` is a signed segment's (kept apart by compaction).
pub(crate) fn is_signed_name(name: &str) -> bool {
    SegmentClass::of_name(name) == SegmentClass::Signed
}

/// Whether the signed segment `name` may hold `(owner, key)` (from its
/// name; the image itself is what is checked).
pub(crate) fn signed_name_matches(name: &str, owner: &Digest, key: &Digest) -> bool {
    let Some(id) = name
        .strip_prefix(SIGNED_PREFIX)
        .and_then(|rest| rest.get(..32))
    else {
        return false;
    };
    owner.hex_starts_with(&id[..16]) && key.hex_starts_with(&id[16..])
}

/// The entry count recorded in a segment's name (0 when it has none).
pub(crate) fn entries_in_name(name: &str) -> u64 {
    name.strip_suffix(SEGMENT_SUFFIX)
        .and_then(|stem| stem.rsplit('-').next())
        .and_then(|count| count.parse().ok())
        .unwrap_or(0)
}

/// Publishes `bytes`, an image of `entries` entries of `class` (compiled or
/// received), as a new segment of `dir` and returns its file info.
///
/// The caller holds the directory lock (shared or exclusive).
pub(crate) fn publish(
    dir: &Dir,
    bytes: &[u8],
    entries: usize,
    class: SegmentClass,
) -> io::Result<FileInfo> {
    publish_named(dir, bytes, || new_segment_name(entries, class))
}

/// Publishes `bytes`, a signed one-entry image of `(owner, key)`, as a new
/// signed segment of `dir`, byte for byte (its signatures kept), and
/// returns its file info.
///
/// The caller holds the directory lock (shared or exclusive).
pub(crate) fn publish_signed(
    dir: &Dir,
    bytes: &[u8],
    owner: &Digest,
    key: &Digest,
) -> io::Result<FileInfo> {
    publish_named(dir, bytes, || new_signed_name(owner, key))
}

fn publish_named(dir: &Dir, bytes: &[u8], name: impl Fn() -> String) -> io::Result<FileInfo> {
    let temp = write_temp(dir, bytes)?;
    let name = temp.persist_noclobber(name)?;
    dir.sync()?;
    Ok(FileInfo {
        name,
        bytes: bytes.len() as u64,
        modified_ms: now_ms(),
    })
}

/// Publishes `bytes` as the base segment of `dir`, replacing the previous
/// base atomically (readers that mapped it keep it), and syncs the file and
/// the directory.
///
/// The caller holds the directory lock exclusive (only compaction writes
/// the base).
pub(crate) fn publish_base(dir: &Dir, bytes: &[u8]) -> io::Result<FileInfo> {
    let temp = write_temp(dir, bytes)?;
    temp.persist(BASE_SEGMENT)?;
    dir.sync()?;
    Ok(FileInfo {
        name: BASE_SEGMENT.to_owned(),
        bytes: bytes.len() as u64,
        modified_ms: now_ms(),
    })
}

/// Replaces `dir/name` atomically with `bytes`, without waiting for the
/// disk: for files whose loss in a power cut costs nothing but accuracy
/// (recency stamps). Readers see the old file or the new one, never a mix.
pub(crate) fn replace_file_unsynced(dir: &Dir, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut temp = dir.temp_file()?;
    temp.file.write_all(bytes)?;
    temp.persist(name)
}

/// Writes `bytes` into a new temporary file of `dir` and syncs it to disk.
fn write_temp<'d>(dir: &'d Dir, bytes: &[u8]) -> io::Result<super::dir::TempFile<'d>> {
    let mut temp = dir.temp_file()?;
    // In pieces, as images are written, so that readers mapping the segment
    // make resident what they touch (see `kiln_image::write_in_pieces`).
    kiln_image::write_in_pieces(&mut temp.file, bytes)?;
    temp.file.sync_all()?;
    Ok(temp)
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_ms() -> u64 {
    millis_since_epoch(SystemTime::now())
}

/// Milliseconds since the Unix epoch (0 for times before it).
fn millis_since_epoch(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

// ----- opening the files of the cache directory -----

/// Opens the image file `name` of `dir` for [`Image::from_file`], through
/// [`Dir::open_file`]: a symbolic link, FIFO or device named like a segment
/// is an error at once, never followed, waited on or read.
pub(crate) fn open_image(dir: &Dir, name: &str) -> Result<ImageFile, ReadError> {
    let path = dir.path_of(name);
    // The very file checked (`O_NOFOLLOW`, a regular file by `fstat`),
    // never opened again by name.
    let file = dir
        .open_file(name, Access::Read)
        .map_err(|source| ReadError::Io {
            action: "open",
            path: path.clone(),
            source,
        })?;
    ImageFile::from_file(file, &path)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter};

    fn image_of(entries: u8, payload: usize) -> Vec<u8> {
        let mut writer = ImageWriter::new(ImageMeta::default());
        for n in 0..entries {
            writer.push(EntryData {
                owner: Digest::of(b"owner"),
                owner_label: "owner".into(),
                key: Digest::of(&[n]),
                name: format!("entry {n}"),
                min_world: 1,
                max_world: u64::MAX,
                deps: vec![],
                artifacts: vec![Artifact {
                    kind: ArtifactKind::Object,
                    entry_points: vec![],
                    bytes: vec![n; payload],
                }],
            });
        }
        writer.to_bytes().unwrap()
    }

    #[test]
    fn small_segments_are_read_and_large_ones_and_the_base_mapped() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = super::super::dir::held(tmp.path());
        let open = |bytes: &[u8], entries: usize| {
            let file = publish(&dir, bytes, entries, SegmentClass::Compiled)?;
            let segment = Segment::open(&dir, &file.name).map_err(io::Error::other)?;
            assert_eq!(segment.bytes, bytes.len() as u64);
            assert_eq!(segment.image.len(), entries);
            Ok::<_, io::Error>(segment.image.storage_kind())
        };
        assert_eq!(open(&image_of(1, 4 << 10), 1)?, "owned");
        assert_eq!(open(&image_of(1, 1 << 20), 1)?, "mapped", "over 64 KiB");
        assert_eq!(
            open(&image_of(8, 16), 8)?,
            "owned",
            "a small compacted segment"
        );
        assert_eq!(open(&image_of(8, 16 << 10), 8)?, "mapped", "a large one");
        // The base, however small, is mapped, and knows its inode.
        publish_base(&dir, &image_of(1, 16))?;
        let base = Segment::open(&dir, BASE_SEGMENT).map_err(io::Error::other)?;
        assert_eq!(base.image.storage_kind(), "mapped");
        assert_eq!(base.file_id.is_some(), cfg!(unix));
        Ok(())
    }

    #[test]
    fn published_segments_are_listed_and_temp_files_apart() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = super::super::dir::held(tmp.path());
        let a = publish(&dir, b"first", 1, SegmentClass::Compiled)?;
        let b = publish(&dir, b"second", 42, SegmentClass::Received)?;
        assert_ne!(a.name, b.name);
        assert_eq!(
            (entries_in_name(&a.name), entries_in_name(&b.name)),
            (1, 42)
        );
        std::fs::write(tmp.path().join(".tmp-orphan"), b"half")?;
        std::fs::write(tmp.path().join("unrelated.txt"), b"x")?;
        let listing = Listing::read(&dir)?;
        let names: Vec<_> = listing.segments.iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, [a.name.clone(), b.name.clone()]);
        let listed: Vec<String> = segment_names(&dir)?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(listed, [a.name, b.name]);
        assert_eq!(listing.segment_bytes(), 11);
        assert_eq!(listing.temp_files.len(), 1);
        Ok(())
    }
}
