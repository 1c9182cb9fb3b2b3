//! Segments: the immutable kiln images the disk cache is made of.
//!
//! A segment is published atomically (temporary file in the same directory,
//! fsync, rename to `seg-*.kimg`, fsync of the directory), so a file with a
//! segment's name is always complete; it is never modified afterwards, only
//! deleted by compaction once its entries are in a published successor.
//!
//! This module also opens every file of the cache directory (segments,
//! `stamps`, `lock`) the one safe way ([`open_regular`]): without following
//! a symbolic link, without waiting on a FIFO or a device, and only if it
//! is a regular file, so that nothing planted under one of those names can
//! redirect a write, stall a lookup or feed an unbounded read. Files and
//! directories are created with [`FILE_MODE`] and [`DIR_MODE`], given at
//! creation.

use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use kiln_image::{Digest, FileAccess, Image, ImageError, ImageFile, Verification};

/// Segment file names start with this.
const SEGMENT_PREFIX: &str = "seg-";
/// Segment file names end with this.
const SEGMENT_SUFFIX: &str = ".kimg";
/// Temporary files (segments or stamps being written) start with this.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";
/// The base segment: compaction's output once it merges the base (or when
/// there is none yet), replaced atomically each time. Its name is known, so
/// a new process looks there first without listing the directory.
pub(crate) const BASE_SEGMENT: &str = "seg-base.kimg";

/// Signed segments' names start with this, then the first 16 hex digits
/// of the owner's and of the key's digest (see [`new_signed_name`]).
const SIGNED_PREFIX: &str = "seg-sig";

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
    /// Whether a trusted key's signature of the image verified (checked
    /// once, on the first lookup that needs it).
    pub(crate) signature_ok: std::sync::OnceLock<bool>,
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
    pub(crate) fn open(dir: &Path, name: &str) -> Result<Segment, ImageError> {
        Segment::from_file(open_image(&dir.join(name))?, name)
    }

    /// Opens the segment `name` from its file, opened already.
    pub(crate) fn from_file(file: ImageFile, name: &str) -> Result<Segment, ImageError> {
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
            image: Arc::new(image),
            file_id,
            signature_ok: std::sync::OnceLock::new(),
        })
    }

    /// Whether a key of `trusted` signed the segment (checked on the first
    /// call and remembered: the keys are the cache's, fixed at open).
    pub(crate) fn signed_by(&self, trusted: &kiln_image::TrustedKeys) -> bool {
        *self
            .signature_ok
            .get_or_init(|| self.image.verify_signature(trusted).is_ok())
    }
}

/// The names (and file identities, where the platform has them) of the
/// published segments of `dir`, without reading any file's metadata (the
/// cheap listing of the lookup path).
pub(crate) fn segment_names(dir: &Path) -> io::Result<Vec<(String, Option<u64>)>> {
    let mut names = Vec::new();
    for dirent in fs::read_dir(dir)? {
        let dirent = dirent?;
        let Ok(name) = dirent.file_name().into_string() else {
            continue;
        };
        if is_segment_name(&name) && dirent.file_type().is_ok_and(|t| t.is_file()) {
            names.push((name, dirent_id(&dirent)));
        }
    }
    names.sort();
    Ok(names)
}

/// The inode number of a listed file (from the listing itself).
#[cfg(unix)]
fn dirent_id(dirent: &fs::DirEntry) -> Option<u64> {
    Some(std::os::unix::fs::DirEntryExt::ino(dirent))
}

#[cfg(not(unix))]
fn dirent_id(_: &fs::DirEntry) -> Option<u64> {
    None
}

/// The inode number of a file, from its metadata.
#[cfg(unix)]
fn file_id(meta: &fs::Metadata) -> Option<u64> {
    Some(std::os::unix::fs::MetadataExt::ino(meta))
}

#[cfg(not(unix))]
fn file_id(_: &fs::Metadata) -> Option<u64> {
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
    /// Lists `dir`; files that vanish while listing are left out.
    pub(crate) fn read(dir: &Path) -> io::Result<Listing> {
        let mut listing = Listing::default();
        for dirent in fs::read_dir(dir)? {
            let dirent = dirent?;
            let Ok(name) = dirent.file_name().into_string() else {
                continue;
            };
            let is_segment = is_segment_name(&name);
            if !is_segment && !name.starts_with(TEMP_PREFIX) {
                continue;
            }
            let Ok(meta) = dirent.metadata() else {
                continue; // deleted since read_dir saw it
            };
            if !meta.is_file() {
                continue;
            }
            let info = FileInfo {
                name,
                bytes: meta.len(),
                modified_ms: meta.modified().map(millis_since_epoch).unwrap_or(0),
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
/// opening any).
fn new_segment_name(entries: usize) -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{SEGMENT_PREFIX}{:013}-{}-{n}-{entries}{SEGMENT_SUFFIX}",
        now_ms(),
        std::process::id()
    )
}

/// A new name for a signed one-entry segment holding `(owner, key)`: the
/// owner's and key's first 16 hex digits after [`SIGNED_PREFIX`], so that
/// a lookup opens only the signed segments that may hold its entry, then
/// what [`new_segment_name`] gives.
fn new_signed_name(owner: &Digest, key: &Digest) -> String {
    let plain = new_segment_name(1);
    let rest = plain.strip_prefix(SEGMENT_PREFIX).unwrap_or(&plain);
    format!(
        "{SIGNED_PREFIX}{}{}-{rest}",
        &owner.to_hex()[..16],
        &key.to_hex()[..16]
    )
}

/// Whether `name` is a signed segment's (kept apart by compaction).
pub(crate) fn is_signed_name(name: &str) -> bool {
    name.starts_with(SIGNED_PREFIX)
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

/// Publishes `bytes`, an image of `entries` entries, as a new segment of
/// `dir` and returns its file info.
///
/// The caller holds the directory lock (shared or exclusive).
pub(crate) fn publish(dir: &Path, bytes: &[u8], entries: usize) -> io::Result<FileInfo> {
    publish_named(dir, bytes, || new_segment_name(entries))
}

/// Publishes `bytes`, a signed one-entry image of `(owner, key)`, as a new
/// signed segment of `dir`, byte for byte (its signatures kept), and
/// returns its file info.
///
/// The caller holds the directory lock (shared or exclusive).
pub(crate) fn publish_signed(
    dir: &Path,
    bytes: &[u8],
    owner: &Digest,
    key: &Digest,
) -> io::Result<FileInfo> {
    publish_named(dir, bytes, || new_signed_name(owner, key))
}

fn publish_named(dir: &Path, bytes: &[u8], name: impl Fn() -> String) -> io::Result<FileInfo> {
    let mut temp = write_temp(dir, bytes)?;
    loop {
        let name = name();
        match temp.persist_noclobber(dir.join(&name)) {
            Ok(_) => {
                sync_dir(dir)?;
                return Ok(FileInfo {
                    name,
                    bytes: bytes.len() as u64,
                    modified_ms: now_ms(),
                });
            }
            Err(err) if err.error.kind() == io::ErrorKind::AlreadyExists => temp = err.file,
            Err(err) => return Err(err.error),
        }
    }
}

/// Publishes `bytes` as the base segment of `dir`, replacing the previous
/// base atomically (readers that mapped it keep it), and syncs the file and
/// the directory.
///
/// The caller holds the directory lock exclusive (only compaction writes
/// the base).
pub(crate) fn publish_base(dir: &Path, bytes: &[u8]) -> io::Result<FileInfo> {
    let temp = write_temp(dir, bytes)?;
    temp.persist(dir.join(BASE_SEGMENT))
        .map_err(|err| err.error)?;
    sync_dir(dir)?;
    Ok(FileInfo {
        name: BASE_SEGMENT.to_owned(),
        bytes: bytes.len() as u64,
        modified_ms: now_ms(),
    })
}

/// Replaces `dir/name` atomically with `bytes`, without waiting for the
/// disk: for files whose loss in a power cut costs nothing but accuracy
/// (recency stamps). Readers see the old file or the new one, never a mix.
pub(crate) fn replace_file_unsynced(dir: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
    let mut temp = temp_file(dir)?;
    temp.write_all(bytes)?;
    temp.persist(dir.join(name)).map_err(|err| err.error)?;
    Ok(())
}

/// Writes `bytes` into a new temporary file of `dir` and syncs it to disk.
fn write_temp(dir: &Path, bytes: &[u8]) -> io::Result<tempfile::NamedTempFile> {
    let mut temp = temp_file(dir)?;
    // In pieces, as images are written, so that readers mapping the segment
    // make resident what they touch (see `kiln_image::write_in_pieces`).
    kiln_image::write_in_pieces(&mut temp, bytes)?;
    temp.as_file().sync_all()?;
    Ok(temp)
}

/// A new temporary file of `dir` (a fresh name, created exclusively, with
/// [`FILE_MODE`]).
fn temp_file(dir: &Path) -> io::Result<tempfile::NamedTempFile> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX);
    #[cfg(unix)]
    builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(FILE_MODE));
    builder.tempfile_in(dir)
}

/// Makes renames and deletions in `dir` durable.
#[cfg(unix)]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    use rustix::fs::{Mode, OFlags};
    // O_DIRECTORY: a FIFO or device put in its place fails at once.
    let flags = OFlags::DIRECTORY | OFlags::RDONLY | OFlags::CLOEXEC;
    let fd = rustix::fs::open(dir, flags, Mode::empty())?;
    Ok(rustix::fs::fsync(fd)?)
}

/// Makes renames and deletions in `dir` durable.
#[cfg(not(unix))]
pub(crate) fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Removes `dir/name`; a file already gone is not an error.
pub(crate) fn remove(dir: &Path, name: &str) -> io::Result<()> {
    match fs::remove_file(dir.join(name)) {
        Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
        _ => Ok(()),
    }
}

/// The path of `name` in `dir`.
pub(crate) fn path_of(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
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

/// The mode of the directories the disk cache creates (the cache directory
/// and its `images-v<N>/`): the user's alone. Given to `mkdir`, so the
/// directory never exists with a wider mode (the umask can only narrow it).
pub(crate) const DIR_MODE: u32 = 0o700;

/// The mode of the files the disk cache creates (segments, `stamps`,
/// `lock`, temporary files): read and written by the user alone. Given to
/// `open` (`O_CREAT`), never set afterwards.
pub(crate) const FILE_MODE: u32 = 0o600;

/// How [`open_regular`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only; the file must exist (segments, `stamps` when read).
    Read,
    /// Read and write, created with [`FILE_MODE`] when missing (`lock`).
    ReadWriteCreate,
    /// Append only, created with [`FILE_MODE`] when missing (`stamps`).
    AppendCreate,
}

/// Opens `path`, a file the cache directory should hold, the safe way:
/// `O_NOFOLLOW` (a symbolic link under that name is refused, never
/// followed), `O_NONBLOCK` (a FIFO or a device does not block the open),
/// then `fstat`: anything but a regular file is refused with an error that
/// says what it is. `O_NONBLOCK` is then cleared, so reads and writes
/// behave as usual.
#[cfg(unix)]
pub(crate) fn open_regular(path: &Path, access: Access) -> io::Result<File> {
    let fd = open_checked(path, access)?;
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - rustix::fs::OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

/// [`open_regular`] up to the check, `O_NONBLOCK` still set.
#[cfg(unix)]
fn open_checked(path: &Path, access: Access) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::io::Errno;
    let flags = OFlags::NOFOLLOW
        | OFlags::NONBLOCK
        | OFlags::CLOEXEC
        | match access {
            Access::Read => OFlags::RDONLY,
            Access::ReadWriteCreate => OFlags::RDWR | OFlags::CREATE,
            Access::AppendCreate => OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
        };
    let fd = match rustix::fs::open(path, flags, Mode::from_raw_mode(FILE_MODE)) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(not_regular(path, "a symbolic link")),
        // Opening a FIFO without reader, or a socket, for writing.
        Err(Errno::NXIO) => return Err(not_regular(path, "a FIFO or a socket")),
        Err(errno) => return Err(errno.into()),
    };
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::RegularFile {
        let what = match kind {
            FileType::Directory => "a directory",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            FileType::CharacterDevice | FileType::BlockDevice => "a device",
            _ => "not a regular file",
        };
        return Err(not_regular(path, what));
    }
    Ok(fd)
}

/// Opens `path` as [`open_regular`] does, where the platform offers no
/// `O_NOFOLLOW`: opened, then checked to be a regular file.
#[cfg(not(unix))]
pub(crate) fn open_regular(path: &Path, access: Access) -> io::Result<File> {
    let mut options = fs::OpenOptions::new();
    match access {
        Access::Read => options.read(true),
        Access::ReadWriteCreate => options.read(true).write(true).create(true),
        Access::AppendCreate => options.append(true).create(true),
    };
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular(path, "not a regular file"));
    }
    Ok(file)
}

/// Whether `err` is [`open_regular`]'s refusal of something that is not a
/// regular file.
pub(crate) fn is_not_regular(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|inner| inner.is::<NotRegular>())
}

/// What [`open_regular`] refused.
#[derive(Debug)]
struct NotRegular(String);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRegular {}

/// The error for `path`, which is `what` instead of a regular file.
fn not_regular(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular(format!(
            "{} is {what}, not a regular file: the disk cache neither follows nor \
             opens it (remove it)",
            path.display()
        )),
    )
}

/// Opens the image file at `path` for [`Image::from_file`], through
/// [`open_regular`]: a symbolic link, FIFO or device named like a segment
/// is an error at once, never followed, waited on or read.
pub(crate) fn open_image(path: &Path) -> Result<ImageFile, ImageError> {
    let io = |action: &'static str| {
        move |source| ImageError::Io {
            action,
            path: path.to_owned(),
            source,
        }
    };
    // The very file checked (`O_NOFOLLOW`, a regular file by `fstat`),
    // never opened again by name.
    let file = open_regular(path, Access::Read).map_err(io("open"))?;
    ImageFile::from_file(file, path)
}

/// Creates `dir` and any missing parent with [`DIR_MODE`].
pub(crate) fn create_dirs(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir)
}

/// Why the directory `meta` describes must not hold a cache that this
/// process trusts, if it must not: another user owns it, or users other
/// than its owner may write to it (group or others write bit, sticky or
/// not). Either way another user could plant files there.
#[cfg(unix)]
pub(crate) fn untrusted_dir(meta: &fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!(
            "owned by user {} (this process runs as user {me})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "writable by other users (mode {mode:o}; the disk cache creates 700)"
        ));
    }
    None
}

/// Ownership and modes are not checked where the platform has none.
#[cfg(not(unix))]
pub(crate) fn untrusted_dir(_: &fs::Metadata) -> Option<String> {
    None
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
        let dir = tempfile::tempdir()?;
        let open = |bytes: &[u8], entries: usize| {
            let file = publish(dir.path(), bytes, entries)?;
            let segment = Segment::open(dir.path(), &file.name).map_err(io::Error::other)?;
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
        publish_base(dir.path(), &image_of(1, 16))?;
        let base = Segment::open(dir.path(), BASE_SEGMENT).map_err(io::Error::other)?;
        assert_eq!(base.image.storage_kind(), "mapped");
        assert_eq!(base.file_id.is_some(), cfg!(unix));
        Ok(())
    }

    #[test]
    fn published_segments_are_listed_and_temp_files_apart() -> io::Result<()> {
        let dir = tempfile::tempdir()?;
        let a = publish(dir.path(), b"first", 1)?;
        let b = publish(dir.path(), b"second", 42)?;
        assert_ne!(a.name, b.name);
        assert_eq!(
            (entries_in_name(&a.name), entries_in_name(&b.name)),
            (1, 42)
        );
        fs::write(dir.path().join(".tmp-orphan"), b"half")?;
        fs::write(dir.path().join("unrelated.txt"), b"x")?;
        let listing = Listing::read(dir.path())?;
        let names: Vec<_> = listing.segments.iter().map(|f| f.name.clone()).collect();
        assert_eq!(names, [a.name.clone(), b.name.clone()]);
        let listed: Vec<String> = segment_names(dir.path())?
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(listed, [a.name, b.name]);
        assert_eq!(listing.segment_bytes(), 11);
        assert_eq!(listing.temp_files.len(), 1);
        Ok(())
    }
}
