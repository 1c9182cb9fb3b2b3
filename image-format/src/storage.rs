//! Where an image's bytes live: a `&'static` slice (embedded in the
//! binary), read-only memory maps of a file, or an owned aligned copy.
//!
//! [`Image::open`](crate::Image::open) maps a file in two parts: the header
//! and index at open, and the payload region on the first payload access.
//! Opening then costs the same whatever the payload sizes (the kernel's cost
//! to set up and tear down a mapping grows with its length).
//! [`Image::from_file`](crate::Image::from_file) lets the caller choose
//! ([`FileAccess`]): one map of the whole file (one map to set up and tear
//! down instead of two, for callers that read payloads anyway), or one
//! `read` into memory (no map at all, for small files).
//!
//! # A file changed under a live mapping
//!
//! The maps are `PROT_READ` + `MAP_SHARED` (`memmap2::Mmap`): read-only,
//! but shared with the page cache, so whatever another process writes into
//! the file shows through them at once. Kiln never writes an image in place
//! (`ImageWriter::write_atomic` writes a temporary file and renames it over
//! the path; a mapped file, and the handle a lazily mapped image keeps,
//! keep the old inode and its bytes). A file rewritten or truncated *in
//! place* while an image over it is open (`cp new.kimg old.kimg`, a shell
//! `>` redirection, `truncate`, `dd conv=notrunc`, a program that opens it
//! for writing) breaks the assumption every check rests on, that checked
//! bytes stay as they were. On Linux, exactly:
//!
//! - **Payload bytes rewritten** (same length): the map shows the new
//!   bytes. A payload whose checksum already passed is served without being
//!   hashed again ([`ArtifactRef::bytes`](crate::ArtifactRef::bytes)
//!   remembers the pass), and a slice handed out earlier (a cache hit
//!   borrowing the image) changes under its holder: the new bytes are
//!   served as if checked. A payload not yet checked is hashed on its first
//!   access, but can still change between the hash and its use.
//! - **File truncated** (shorter, or `O_TRUNC` then rewritten): the kernel
//!   drops the truncated pages from every map of the file. The next read of
//!   a map past the new end of file (rounded up to a page; the rest of the
//!   last page reads as zeros) raises `SIGBUS`, also for pages read before,
//!   and kills the process: no Rust code sees an error. A lazily mapped
//!   payload region is mapped against the length found at open, so a file
//!   truncated before the first payload access maps fine and faults on the
//!   first read.
//! - **Index rewritten**: rkyv validated the index once, at open, and every
//!   later access goes through `rkyv::access_unchecked`, trusting that
//!   validation. A rewritten root makes table accesses compute slices from
//!   unchecked relative pointers and lengths, which can point anywhere in
//!   the address space: reads outside the map raise `SIGSEGV`, or return
//!   other memory of the process as image data. Entry records rewritten
//!   after they passed their check are served as they now are (the pass is
//!   remembered). References inside the tables (text, payload offsets) are
//!   still bounds-checked against their table on every access.
//!
//! [`FileAccess::Read`] and [`Image::from_bytes`](crate::Image::from_bytes)
//! copy the bytes and are immune to all three. Image files must be
//! replaced, never edited in place: a tool that installs an image writes a
//! temporary file in the destination's directory and renames it over the
//! destination ([`write_file_atomic`](crate::write_file_atomic)).

use std::fs::{File, Metadata};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rkyv::util::AlignedVec;

use crate::ReadError;
use crate::header::{HEADER_LEN, REGION_ALIGN, offsets};

/// Alignment the start of an image's bytes must have in memory: the index
/// and payload offsets are multiples of 64 relative to it.
pub(crate) const STORAGE_ALIGN: usize = REGION_ALIGN;

/// The bytes of an opened image.
pub(crate) enum Storage {
    /// Embedded in the binary.
    Static(&'static [u8]),
    /// Read-only shared mappings of a file.
    Mapped(MappedFile),
    /// An owned copy in a 64-byte-aligned buffer.
    Owned(AlignedVec<STORAGE_ALIGN>),
}

/// How [`Image::from_file`](crate::Image::from_file) brings an image
/// file's bytes into memory. Every way reads only the header and index at
/// open, except [`FileAccess::Read`], which reads the whole file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileAccess {
    /// Map the header and index now and the payload region on the first
    /// payload access, as [`Image::open`](crate::Image::open) does: opening
    /// costs the same whatever the payload sizes, and a file whose payloads
    /// are read is mapped twice.
    MapLazily,
    /// Map the whole file at once: one map to set up and tear down. Pages
    /// are still read only when touched; for files whose payloads the
    /// caller is about to read.
    MapWhole,
    /// Read the whole file into an owned, aligned buffer with one `read`:
    /// no map to set up, fault in and tear down, and no file left open; for
    /// small files.
    Read,
}

/// An image file opened, with its metadata (one `open` and one `fstat`),
/// not yet mapped or read: hand it to
/// [`Image::from_file`](crate::Image::from_file). The metadata (size,
/// identity, times) is that of the very file the image is read from.
#[derive(Debug)]
pub struct ImageFile {
    file: File,
    path: PathBuf,
    metadata: Metadata,
}

impl ImageFile {
    /// Opens the file at `path` read-only and reads its metadata.
    ///
    /// # Errors
    /// [`ReadError::Io`] when the file cannot be opened or its metadata read.
    pub fn open(path: &Path) -> Result<ImageFile, ReadError> {
        let file = File::open(path).map_err(io_error("open", path))?;
        let metadata = file.metadata().map_err(io_error("stat", path))?;
        Ok(ImageFile {
            file,
            path: path.to_owned(),
            metadata,
        })
    }

    /// The file `file`, already open for reading (e.g. opened with flags of
    /// the caller's choosing, such as `O_NOFOLLOW`, and checked), known as
    /// `path` in errors; reads its metadata.
    ///
    /// ```
    /// # fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use kiln_image::{ImageFile, ImageMeta, ImageWriter};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("empty.kimg");
    /// ImageWriter::new(ImageMeta::new("doc", "1")).write_atomic(&path)?;
    /// let file = ImageFile::from_file(std::fs::File::open(&path)?, &path)?;
    /// assert!(file.metadata().is_file());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    /// [`ReadError::Io`] when its metadata cannot be read.
    pub fn from_file(file: File, path: &Path) -> Result<ImageFile, ReadError> {
        let metadata = file.metadata().map_err(io_error("stat", path))?;
        Ok(ImageFile {
            file,
            path: path.to_owned(),
            metadata,
        })
    }

    /// The file's metadata, read when it was opened.
    pub fn metadata(&self) -> &Metadata {
        &self.metadata
    }

    /// The path the file was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// A file mapped as header + index now and the payload region on first
/// use, or all at once.
pub(crate) struct MappedFile {
    path: PathBuf,
    len: u64,
    /// The header and index, or the whole file.
    head: memmap2::Mmap,
    /// The file and its payload region's map, when `head` does not map the
    /// whole file.
    lazy: Option<LazyPayloads>,
}

/// The payload region of a file mapped lazily: the open file, and its map
/// once made.
struct LazyPayloads {
    file: File,
    map: OnceLock<Result<memmap2::Mmap, (std::io::ErrorKind, String)>>,
}

/// The error of `action` on the file at `path`.
fn io_error(action: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ReadError {
    let path = path.to_owned();
    move |source| ReadError::Io {
        action,
        path,
        source,
    }
}

impl Storage {
    /// The bytes from the image start up to at least the end of the index
    /// (the whole image, except for mapped files).
    pub(crate) fn head(&self) -> &[u8] {
        match self {
            Storage::Static(bytes) => bytes,
            Storage::Mapped(mapped) => &mapped.head,
            Storage::Owned(vec) => vec.as_slice(),
        }
    }

    /// Length of the whole image.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Storage::Mapped(mapped) => mapped.len,
            other => other.head().len() as u64,
        }
    }

    /// The bytes of the payload region `range` (checked against the image
    /// length at open), mapping it first for a mapped file.
    pub(crate) fn payloads(&self, range: &Range<usize>) -> Result<&[u8], ReadError> {
        let outside = || ReadError::PayloadRegion {
            start: range.start as u64,
            end: range.end as u64,
            available: self.len(),
        };
        match self {
            Storage::Static(bytes) => bytes.get(range.clone()).ok_or_else(outside),
            Storage::Owned(vec) => vec.as_slice().get(range.clone()).ok_or_else(outside),
            Storage::Mapped(mapped) => mapped.payloads(range),
        }
    }

    /// A copy of the `len` bytes from `offset` (the signature trailer,
    /// checked against the image length at open and a few KiB at most):
    /// read from the file when they are not mapped.
    pub(crate) fn tail(&self, offset: u64, len: usize) -> Result<Vec<u8>, ReadError> {
        let outside = || ReadError::Truncated {
            what: "the signature trailer",
            len: self.len(),
            needed: offset.saturating_add(len as u64),
        };
        let start = usize::try_from(offset).map_err(|_| outside())?;
        let end = start.checked_add(len).ok_or_else(outside)?;
        if let Some(bytes) = self.head().get(start..end) {
            return Ok(bytes.to_vec());
        }
        match self {
            Storage::Mapped(MappedFile {
                lazy: Some(lazy),
                path,
                ..
            }) => {
                let mut out = vec![0u8; len];
                read_exact_at(&lazy.file, &mut out, offset).map_err(|source| ReadError::Io {
                    action: "read the signature trailer of",
                    path: path.clone(),
                    source,
                })?;
                Ok(out)
            }
            _ => Err(outside()),
        }
    }

    /// Copies `bytes` into a fresh 64-byte-aligned buffer.
    pub(crate) fn copy_aligned(bytes: &[u8]) -> Storage {
        let mut vec = AlignedVec::<STORAGE_ALIGN>::with_capacity(bytes.len());
        vec.extend_from_slice(bytes);
        Storage::Owned(vec)
    }

    /// Maps the header and index of the file at `path` now, the payload
    /// region on first use ([`FileAccess::MapLazily`]).
    pub(crate) fn map_file(path: &Path) -> Result<Storage, ReadError> {
        Storage::from_file(ImageFile::open(path)?, FileAccess::MapLazily)
    }

    /// Brings the bytes of `file` into memory as `access` says. Files too
    /// short to hold a header are read into memory whatever `access` says
    /// (mapping an empty file fails on some systems), so that opening them
    /// reports the truncation.
    pub(crate) fn from_file(file: ImageFile, access: FileAccess) -> Result<Storage, ReadError> {
        let ImageFile {
            file,
            path,
            metadata,
        } = file;
        let io = |action| io_error(action, &path);
        let len = metadata.len();
        let whole = usize::try_from(len).map_err(|_| ReadError::TooLarge {
            what: "the image file",
            size: len,
            limit: usize::MAX as u64,
        })?;
        if access == FileAccess::Read || len < HEADER_LEN as u64 {
            return read_aligned(&file, whole).map_err(io("read"));
        }
        if access == FileAccess::MapWhole {
            // SAFETY: the contract of `MappedFile::map`: a read-only shared
            // map owned by this `MappedFile`, which nothing in this process
            // writes; `whole` is the file's length at open.
            let head = unsafe { MappedFile::map(&file, 0, whole) }.map_err(io("map"))?;
            return Ok(Storage::Mapped(MappedFile {
                path,
                len,
                head,
                lazy: None,
            }));
        }
        // Map up to the payload region the header announces; the header
        // itself is checked after mapping, against the real file length.
        let mut field = [0u8; 8];
        read_exact_at(&file, &mut field, offsets::PAYLOAD_OFFSET as u64)
            .map_err(io("read the header of"))?;
        let payload_offset = u64::from_le_bytes(field);
        let head_len = if (HEADER_LEN as u64..=len).contains(&payload_offset) {
            payload_offset
        } else {
            len
        };
        let head_len = usize::try_from(head_len).map_err(|_| ReadError::TooLarge {
            what: "the image index",
            size: head_len,
            limit: usize::MAX as u64,
        })?;
        // SAFETY: the contract of `MappedFile::map`: a read-only shared map
        // owned by this `MappedFile` (which keeps the file open), which
        // nothing in this process writes.
        let head = unsafe { MappedFile::map(&file, 0, head_len) }.map_err(io("map"))?;
        Ok(Storage::Mapped(MappedFile {
            path,
            len,
            head,
            lazy: Some(LazyPayloads {
                file,
                map: OnceLock::new(),
            }),
        }))
    }

    /// A short name of the storage kind.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Storage::Static(_) => "static",
            Storage::Mapped(_) => "mapped",
            Storage::Owned(_) => "owned",
        }
    }
}

impl MappedFile {
    /// Maps `len` bytes of `file` from `offset`, read-only.
    ///
    /// # Safety
    ///
    /// `Mmap::map` is unsafe because the map is `MAP_SHARED`: the file may
    /// be changed or truncated by another process while the map is alive,
    /// which changes bytes behind shared references (or unmaps them). The
    /// caller keeps the map read-only and owned by one `MappedFile`, and
    /// never writes the file itself. The argument for images:
    /// - Kiln never modifies an image in place: `ImageWriter::write_atomic`
    ///   writes a temporary file and renames it over the path, so a mapped
    ///   image (and the file handle a lazily mapped image keeps, to map its
    ///   payloads later) keeps its old inode and bytes.
    /// - Changes to entry records or payload bytes made before their first
    ///   access are caught by their checksums, checked on first access
    ///   (Structural) or at open (Full).
    ///
    /// What remains, as for any memory-mapped file, is a file rewritten or
    /// truncated *in place* while mapped: checked bytes served changed,
    /// `SIGBUS` past a truncated end, `SIGSEGV` or other memory read through
    /// a rewritten index (each case is spelled out in the module docs).
    /// Image files must be replaced, never edited in place;
    /// `FileAccess::Read` and `Image::from_bytes` copy when that cannot be
    /// guaranteed.
    unsafe fn map(file: &File, offset: u64, len: usize) -> std::io::Result<memmap2::Mmap> {
        // SAFETY: the contract above, which every caller upholds.
        unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(file)
        }
    }

    fn payloads(&self, range: &Range<usize>) -> Result<&[u8], ReadError> {
        if range.is_empty() {
            return Ok(&[]);
        }
        let Some(lazy) = &self.lazy else {
            // The whole file is mapped; the range was checked against its
            // length at open.
            return self
                .head
                .get(range.clone())
                .ok_or(ReadError::PayloadRegion {
                    start: range.start as u64,
                    end: range.end as u64,
                    available: self.len,
                });
        };
        let mapped = lazy.map.get_or_init(|| {
            // SAFETY: the contract of `MappedFile::map` (a read-only shared
            // map owned by this `MappedFile`); the range was checked against
            // the file length at open.
            unsafe { MappedFile::map(&lazy.file, range.start as u64, range.len()) }
                .map_err(|error| (error.kind(), error.to_string()))
        });
        match mapped {
            Ok(map) => Ok(map),
            Err((kind, message)) => Err(ReadError::Io {
                action: "map the payloads of",
                path: self.path.clone(),
                source: std::io::Error::new(*kind, message.clone()),
            }),
        }
    }
}

/// Reads the first `len` bytes of `file` (its length) into a fresh
/// 64-byte-aligned buffer; a file shorter than that is an error.
fn read_aligned(file: &File, len: usize) -> std::io::Result<Storage> {
    use std::io::Read;
    let mut vec = AlignedVec::<STORAGE_ALIGN>::with_capacity(len);
    vec.resize(len, 0);
    let mut file = file;
    file.read_exact(vec.as_mut_slice())?;
    Ok(Storage::Owned(vec))
}

#[cfg(unix)]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

#[cfg(not(unix))]
fn read_exact_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = file;
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Artifact, ArtifactKind, Digest, EntryData, Image, ImageMeta, ImageWriter};
    use crate::{ImageError, ReadError, Verification};

    const ACCESSES: [FileAccess; 3] = [
        FileAccess::MapLazily,
        FileAccess::MapWhole,
        FileAccess::Read,
    ];

    fn entry(n: u8) -> EntryData {
        EntryData {
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
                bytes: vec![n; 3000 + usize::from(n)],
            }],
        }
    }

    fn image_bytes() -> Vec<u8> {
        let mut writer = ImageWriter::new(ImageMeta::default());
        (0..5).for_each(|n| writer.push(entry(n)));
        writer.to_bytes().expect("valid entries")
    }

    fn open(path: &Path, access: FileAccess) -> Result<Image, ReadError> {
        Image::from_file(ImageFile::open(path)?, access, Verification::Structural)
    }

    #[test]
    fn every_access_reads_the_same_entries_and_reports_the_file_size() -> Result<(), ReadError> {
        let bytes = image_bytes();
        let dir = tempfile::tempdir().map_err(io_error("create", Path::new("temp dir")))?;
        let path = dir.path().join("image.kimg");
        std::fs::write(&path, &bytes).map_err(io_error("write", &path))?;
        for access in ACCESSES {
            let file = ImageFile::open(&path)?;
            assert_eq!(file.metadata().len(), bytes.len() as u64);
            assert_eq!(file.path(), path);
            let image = Image::from_file(file, access, Verification::Structural)?;
            let kind = if access == FileAccess::Read {
                "owned"
            } else {
                "mapped"
            };
            assert_eq!(image.storage_kind(), kind, "{access:?}");
            assert_eq!(image.byte_len(), bytes.len() as u64);
            for n in 0..5 {
                let found = image.find(&Digest::of(b"owner"), &Digest::of(&[n]))?;
                let data = found.map(|e| e.to_data()).transpose()?;
                assert_eq!(data, Some(entry(n)), "{access:?}");
            }
        }
        Ok(())
    }

    #[test]
    fn every_access_rejects_truncated_files_and_keeps_a_replaced_one() -> Result<(), ImageError> {
        let bytes = image_bytes();
        let dir = tempfile::tempdir().map_err(io_error("create", Path::new("temp dir")))?;
        let path = dir.path().join("image.kimg");
        for access in ACCESSES {
            for cut in [0, 10, HEADER_LEN, bytes.len() / 2, bytes.len() - 1] {
                std::fs::write(&path, &bytes[..cut]).map_err(io_error("write", &path))?;
                let error = open(&path, access).err();
                assert!(
                    matches!(error, Some(ReadError::Truncated { .. })),
                    "{access:?}, {cut} bytes: {error:?}"
                );
            }
            crate::write_file_atomic(&path, &bytes)?;
            let image = open(&path, access)?;
            // Replaced by rename while open: the image keeps its bytes.
            crate::write_file_atomic(&path, b"another file")?;
            let found = image.find(&Digest::of(b"owner"), &Digest::of(&[4]))?;
            let data = found.map(|e| e.to_data()).transpose()?;
            assert_eq!(data, Some(entry(4)), "{access:?}");
        }
        Ok(())
    }
}
