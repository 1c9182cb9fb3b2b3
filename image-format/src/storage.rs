//! Where an image's bytes live: a `&'static` slice (embedded in the
//! binary), a read-only memory map of a file, or an owned aligned copy.

use std::fs::File;
use std::path::Path;

use rkyv::util::AlignedVec;

use crate::ImageError;
use crate::header::{HEADER_LEN, REGION_ALIGN};

/// Alignment the start of an image's bytes must have in memory: the index
/// and payload offsets are multiples of 64 relative to it.
pub(crate) const STORAGE_ALIGN: usize = REGION_ALIGN;

/// The bytes of an opened image.
pub(crate) enum Storage {
    /// Embedded in the binary.
    Static(&'static [u8]),
    /// A read-only shared mapping of a file.
    Mapped(memmap2::Mmap),
    /// An owned copy in a 64-byte-aligned buffer.
    Owned(AlignedVec<STORAGE_ALIGN>),
}

impl Storage {
    pub(crate) fn bytes(&self) -> &[u8] {
        match self {
            Storage::Static(bytes) => bytes,
            Storage::Mapped(map) => map,
            Storage::Owned(vec) => vec.as_slice(),
        }
    }

    /// Copies `bytes` into a fresh 64-byte-aligned buffer.
    pub(crate) fn copy_aligned(bytes: &[u8]) -> Storage {
        let mut vec = AlignedVec::<STORAGE_ALIGN>::with_capacity(bytes.len());
        vec.extend_from_slice(bytes);
        Storage::Owned(vec)
    }

    /// Maps `path` read-only. Files too short to hold a header are read
    /// into memory instead (mapping an empty file fails on some systems), so
    /// that opening them reports the truncation.
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
        // SAFETY: `Mmap::map` is unsafe because the mapped file may be
        // changed or truncated by another process while the map is alive,
        // which would change bytes behind shared references.
        // - Kiln never modifies an image in place: `ImageWriter::write_atomic`
        //   writes a temporary file and renames it over the path, so a
        //   mapped image keeps its old inode and its bytes.
        // - Changes to payload bytes or entry records made before their
        //   first access are caught by their checksums, which are checked on
        //   first access (Structural) or at open (Full).
        // What remains, as for any memory-mapped file: a process that
        //   rewrites or truncates an image file *in place* while it is mapped
        //   can change bytes after they were checked (a payload already
        //   returned, or the index tables validated at open), or raise SIGBUS
        //   on access past a truncated end. Image files must be replaced,
        //   never edited in place; `Image::from_bytes` copies when that cannot
        //   be guaranteed.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io("map"))?;
        Ok(Storage::Mapped(map))
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
