//! Where an image's bytes live: a `&'static` slice (embedded in the
//! binary), read-only memory maps of a file, or an owned aligned copy.
//!
//! A mapped file is mapped in two parts: the header and index at open, and
//! the payload region on the first payload access. Opening then costs the
//! same whatever the payload sizes (the kernel's cost to set up and tear
//! down a mapping grows with its length).

use std::fs::File;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use rkyv::util::AlignedVec;

use crate::ImageError;
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

/// A file mapped as header + index now, payload region on first use.
pub(crate) struct MappedFile {
    path: PathBuf,
    file: File,
    len: u64,
    head: memmap2::Mmap,
    payloads: OnceLock<Result<memmap2::Mmap, (std::io::ErrorKind, String)>>,
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
    pub(crate) fn payloads(&self, range: &Range<usize>) -> Result<&[u8], ImageError> {
        let outside =
            || ImageError::Layout(format!("payload region {range:?} lies outside the image"));
        match self {
            Storage::Static(bytes) => bytes.get(range.clone()).ok_or_else(outside),
            Storage::Owned(vec) => vec.as_slice().get(range.clone()).ok_or_else(outside),
            Storage::Mapped(mapped) => mapped.payloads(range),
        }
    }

    /// Copies `bytes` into a fresh 64-byte-aligned buffer.
    pub(crate) fn copy_aligned(bytes: &[u8]) -> Storage {
        let mut vec = AlignedVec::<STORAGE_ALIGN>::with_capacity(bytes.len());
        vec.extend_from_slice(bytes);
        Storage::Owned(vec)
    }

    /// Maps the header and index of the file at `path`. Files too short to
    /// hold a header are read into memory instead (mapping an empty file
    /// fails on some systems), so that opening them reports the truncation.
    pub(crate) fn map_file(path: &Path) -> Result<Storage, ImageError> {
        let io = |action| {
            move |source| ImageError::Io {
                action,
                path: path.to_owned(),
                source,
            }
        };
        let file = File::open(path).map_err(io("open"))?;
        let len = file.metadata().map_err(io("stat"))?.len();
        if len < HEADER_LEN as u64 {
            let bytes = std::fs::read(path).map_err(io("read"))?;
            return Ok(Storage::copy_aligned(&bytes));
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
        let head_len = usize::try_from(head_len).map_err(|_| ImageError::TooLarge {
            what: "the image index",
            size: head_len,
            limit: usize::MAX as u64,
        })?;
        // SAFETY: see `MappedFile::map`: the map is read-only and private to
        // this `MappedFile`, which keeps the file open.
        let head = unsafe { MappedFile::map(&file, 0, head_len) }.map_err(io("map"))?;
        Ok(Storage::Mapped(MappedFile {
            path: path.to_owned(),
            file,
            len,
            head,
            payloads: OnceLock::new(),
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
    /// `Mmap::map` is unsafe because the mapped file may be changed or
    /// truncated by another process while the map is alive, which would
    /// change bytes behind shared references. The caller keeps the map
    /// private and read-only. The argument for images:
    /// - Kiln never modifies an image in place: `ImageWriter::write_atomic`
    ///   writes a temporary file and renames it over the path, so a mapped
    ///   image (and this open file handle, used to map the payloads later)
    ///   keeps its old inode and bytes.
    /// - Changes to entry records or payload bytes made before their first
    ///   access are caught by their checksums, checked on first access
    ///   (Structural) or at open (Full).
    ///
    /// What remains, as for any memory-mapped file: a process that rewrites
    /// or truncates an image file *in place* while it is mapped can change
    /// bytes after they were checked (a payload already returned, or the
    /// index tables validated at open), or raise SIGBUS on access past a
    /// truncated end. Image files must be replaced, never edited in place;
    /// `Image::from_bytes` copies when that cannot be guaranteed.
    unsafe fn map(file: &File, offset: u64, len: usize) -> std::io::Result<memmap2::Mmap> {
        // SAFETY: the contract above, which every caller upholds.
        unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .map(file)
        }
    }

    fn payloads(&self, range: &Range<usize>) -> Result<&[u8], ImageError> {
        if range.is_empty() {
            return Ok(&[]);
        }
        let mapped = self.payloads.get_or_init(|| {
            // SAFETY: see `MappedFile::map`; the range was checked against
            // the file length at open.
            unsafe { MappedFile::map(&self.file, range.start as u64, range.len()) }
                .map_err(|error| (error.kind(), error.to_string()))
        });
        match mapped {
            Ok(map) => Ok(map),
            Err((kind, message)) => Err(ImageError::Io {
                action: "map the payloads of",
                path: self.path.clone(),
                source: std::io::Error::new(*kind, message.clone()),
            }),
        }
    }
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
