//! [`WriteError`]: building or writing an image.

use std::path::PathBuf;

/// Building or writing an image failed: the entries given cannot be
/// stored as they are, or the file could not be written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WriteError {
    /// Reading or writing a file failed.
    #[error("cannot {action} {path}")]
    Io {
        /// What was being done ("write", "rename", ...).
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// The operating-system error.
        #[source]
        source: std::io::Error,
    },

    /// Two entries with the same (owner, key) were pushed to a writer.
    #[error(
        "two entries for owner {owner} and key {key} ({first:?} and {second:?}): an image holds one entry per (owner, key)"
    )]
    DuplicateEntry {
        /// Owner digest.
        owner: crate::Digest,
        /// Key digest.
        key: crate::Digest,
        /// Name of the first entry.
        first: String,
        /// Name of the second entry.
        second: String,
    },

    /// Two entries of one owner carry different owner labels.
    #[error("owner {owner} is labelled both {first:?} and {second:?}: use one label per owner")]
    OwnerLabelConflict {
        /// Owner digest.
        owner: crate::Digest,
        /// One label.
        first: String,
        /// The other label.
        second: String,
    },

    /// An entry whose validity range is empty.
    #[error("entry {name:?} has min_world {min_world} > max_world {max_world}")]
    InvalidWorlds {
        /// Entry name.
        name: String,
        /// First valid world.
        min_world: u64,
        /// Last valid world.
        max_world: u64,
    },

    /// A string the format cannot store faithfully.
    #[error("{what} {value:?} cannot be stored: {reason}")]
    InvalidString {
        /// Which string.
        what: &'static str,
        /// The string.
        value: String,
        /// Why.
        reason: &'static str,
    },

    /// Something exceeds what the format can address.
    #[error("{what} is {size}, more than the format's limit of {limit}")]
    TooLarge {
        /// What is too large.
        what: &'static str,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },

    /// rkyv failed to serialize the index.
    #[error("serializing the image index failed: {0}")]
    Serialize(String),

    /// A payload placed outside the payload region being written (records
    /// rebuilt by the `fuzzing` feature's forger that point past their
    /// payloads).
    #[error("payload region {start}..{end} lies outside the {available} bytes of the image")]
    PayloadRegion {
        /// First byte of the payload.
        start: u64,
        /// End of the payload.
        end: u64,
        /// Bytes of the payload region.
        available: u64,
    },

    /// zstd failed to compress a payload group (see
    /// [`ImageWriter::to_compressed_bytes`](crate::ImageWriter)).
    #[error("cannot compress payload group {group}: {message}")]
    Compress {
        /// The group's position in the group table.
        group: usize,
        /// What zstd said.
        message: String,
    },
}

impl WriteError {
    /// The payload region's length overflows what an image can address.
    pub(crate) fn payload_region_too_large() -> WriteError {
        WriteError::TooLarge {
            what: "the payload region",
            size: u64::MAX,
            limit: u64::MAX,
        }
    }

    /// A short stable name of the check that failed, as
    /// [`ImageError::check`](crate::ImageError::check) gives it.
    pub fn check(&self) -> &'static str {
        match self {
            WriteError::Io { .. } => "io",
            WriteError::DuplicateEntry { .. } => "writer.input",
            WriteError::OwnerLabelConflict { .. } => "writer.input",
            WriteError::InvalidWorlds { .. } => "writer.input",
            WriteError::InvalidString { .. } => "writer.input",
            WriteError::TooLarge { .. } => "writer.input",
            WriteError::Serialize(_) => "writer.input",
            WriteError::PayloadRegion { .. } => "payload.region",
            WriteError::Compress { .. } => "writer.compress",
        }
    }
}
