//! The signature trailer's codec: its layout (see the [module
//! docs](super)), the length check the header runs before any trailer byte
//! is read, parsing and encoding. Knows nothing of the header itself.

use super::keys::PublicKey;
use crate::ReadError;

/// The most signatures one image may carry.
pub const MAX_SIGNATURES: usize = 16;
/// Magic bytes the signature trailer starts with.
pub const TRAILER_MAGIC: [u8; 8] = *b"KILNSIG\0";
/// Length of the trailer's fixed part (magic, count, kind).
pub const TRAILER_HEAD_LEN: usize = 16;
/// Length of one signature record (public key, signature).
pub const RECORD_LEN: usize = 32 + 64;
/// Trailer kind (bytes 12..16): signatures of the image's signed digest.
pub const KIND_DIRECT: u32 = 0;
/// Trailer kind (bytes 12..16): signatures of a batch's Merkle root.
pub const KIND_BATCH: u32 = 1;
/// The most images one batch signature may cover.
pub const MAX_BATCH: usize = 1 << MAX_BATCH_DEPTH;
/// The deepest Merkle path: `log2(MAX_BATCH)` digests.
pub const MAX_BATCH_DEPTH: usize = 16;
/// Length of a batch trailer's fields after the fixed part (leaf index,
/// batch size), before the path.
pub const BATCH_FIELDS_LEN: usize = 8;
/// Length of one digest of a Merkle path.
pub const PATH_DIGEST_LEN: usize = 32;
/// The longest direct trailer: [`MAX_SIGNATURES`] records.
pub const MAX_DIRECT_TRAILER_LEN: usize = TRAILER_HEAD_LEN + MAX_SIGNATURES * RECORD_LEN;
/// The longest signature trailer: a batch trailer with a path of
/// [`MAX_BATCH_DEPTH`] digests and [`MAX_SIGNATURES`] records.
pub const MAX_TRAILER_LEN: usize = TRAILER_HEAD_LEN
    + BATCH_FIELDS_LEN
    + MAX_BATCH_DEPTH * PATH_DIGEST_LEN
    + MAX_SIGNATURES * RECORD_LEN;

/// One signature of an image, as read from its trailer (not yet checked).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) key: PublicKey,
    pub(crate) signature: [u8; 64],
}

/// A batch member's place in its batch and its Merkle path, as read from
/// its trailer (not yet checked; promoted levels already checked to be
/// zeros).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct BatchPath {
    pub(crate) index: u32,
    pub(crate) size: u32,
    /// One digest per level, leaf level first: [`batch_depth`] of them.
    pub(crate) path: Vec<[u8; 32]>,
}

/// A trailer as read at open: its records and, for a batch signature, the
/// member's path.
#[derive(Default)]
pub(crate) struct Trailer {
    pub(crate) records: Vec<Record>,
    pub(crate) batch: Option<BatchPath>,
}

/// Where a batch-signed image sits in its batch ([`Image::signature_batch`](crate::Image::signature_batch)).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPosition {
    /// The image's leaf index, less than `size`.
    pub index: u32,
    /// How many images were signed together.
    pub size: u32,
}

/// The depth of a batch of `size` images, the length of each member's
/// path: `ceil(log2(size))` (0 for a single image).
pub fn batch_depth(size: usize) -> usize {
    if size <= 1 {
        return 0;
    }
    (usize::BITS - (size - 1).leading_zeros()) as usize
}

/// Whether the node at `index` of a level of `width` nodes is promoted
/// unchanged to the level above (the last node of an odd count).
pub(crate) fn promoted(index: usize, width: usize) -> bool {
    index.is_multiple_of(2) && index + 1 == width
}

/// Whether some direct or batch trailer is `len` bytes long (see the
/// module docs): `16 + 96 n`, or `24 + 32 depth + 96 n`, with
/// `1 <= n <= MAX_SIGNATURES` and `1 <= depth <= MAX_BATCH_DEPTH`.
fn possible_trailer_len(len: usize) -> bool {
    len <= MAX_TRAILER_LEN
        && (1..=MAX_SIGNATURES).any(|n| {
            let records = n * RECORD_LEN;
            len == TRAILER_HEAD_LEN + records
                || (1..=MAX_BATCH_DEPTH).any(|depth| {
                    len == TRAILER_HEAD_LEN + BATCH_FIELDS_LEN + depth * PATH_DIGEST_LEN + records
                })
        })
}

/// Checks the trailer length recorded in a header: 0, or the length of a
/// direct or batch trailer (see the module docs).
pub(crate) fn check_trailer_len(len: u32) -> Result<(), ReadError> {
    let len = len as usize;
    if len == 0 || possible_trailer_len(len) {
        return Ok(());
    }
    Err(ReadError::SignatureTrailer(format!(
        "the header gives it {len} bytes: a trailer is {TRAILER_HEAD_LEN} + {RECORD_LEN} bytes \
         per signature (direct), or {} + {PATH_DIGEST_LEN} per path digest (1 to \
         {MAX_BATCH_DEPTH}) + {RECORD_LEN} per signature (batch), 1 to {MAX_SIGNATURES} \
         signatures",
        TRAILER_HEAD_LEN + BATCH_FIELDS_LEN
    )))
}

/// Parses a trailer whose length passed [`check_trailer_len`]: every
/// length is derived from the fields read and checked against the bytes
/// before they are read.
pub(crate) fn parse_trailer(bytes: &[u8]) -> Result<Trailer, ReadError> {
    let bad = |what: String| Err(ReadError::SignatureTrailer(what));
    if bytes.is_empty() {
        return Ok(Trailer::default());
    }
    let Some((head, rest)) = bytes.split_first_chunk::<TRAILER_HEAD_LEN>() else {
        return bad(format!(
            "{} bytes, shorter than its fixed part",
            bytes.len()
        ));
    };
    if head[..8] != TRAILER_MAGIC {
        return bad(format!(
            "starts with {:02x?}, expected {TRAILER_MAGIC:02x?}",
            &head[..8]
        ));
    }
    let count = u32::from_le_bytes([head[8], head[9], head[10], head[11]]) as usize;
    let kind = u32::from_le_bytes([head[12], head[13], head[14], head[15]]);
    if count == 0 || count > MAX_SIGNATURES {
        return bad(format!(
            "counts {count} signatures: 1 to {MAX_SIGNATURES} are allowed"
        ));
    }
    let (batch, records) = match kind {
        KIND_DIRECT => (None, rest),
        KIND_BATCH => {
            let Some((fields, rest)) = rest.split_first_chunk::<BATCH_FIELDS_LEN>() else {
                return bad(format!(
                    "a batch trailer of {} bytes, shorter than its fixed fields",
                    bytes.len()
                ));
            };
            let index = u32::from_le_bytes([fields[0], fields[1], fields[2], fields[3]]);
            let size = u32::from_le_bytes([fields[4], fields[5], fields[6], fields[7]]);
            if !(2..=MAX_BATCH).contains(&(size as usize)) {
                return bad(format!(
                    "gives a batch of {size} images: a batch signs 2 to {MAX_BATCH}"
                ));
            }
            if index >= size {
                return bad(format!(
                    "gives leaf index {index} in a batch of {size}: the index must be less"
                ));
            }
            let depth = batch_depth(size as usize);
            let path_len = depth * PATH_DIGEST_LEN;
            if rest.len() != path_len + count * RECORD_LEN {
                return bad(format!(
                    "a batch of {size} (a path of {depth} digests) with {count} signatures takes \
                     {} bytes after the batch fields, the trailer has {}",
                    path_len + count * RECORD_LEN,
                    rest.len()
                ));
            }
            let (path_bytes, records) = rest.split_at(path_len);
            let mut path = Vec::with_capacity(depth);
            let (mut at, mut width) = (index as usize, size as usize);
            for (level, chunk) in path_bytes.chunks_exact(PATH_DIGEST_LEN).enumerate() {
                let mut digest = [0u8; 32];
                digest.copy_from_slice(chunk);
                if promoted(at, width) && digest != [0; 32] {
                    return bad(format!(
                        "path digest {level} of leaf {index} in a batch of {size} stands where \
                         the node is promoted unchanged: it must be zeros"
                    ));
                }
                path.push(digest);
                at /= 2;
                width = width.div_ceil(2);
            }
            (Some(BatchPath { index, size, path }), records)
        }
        other => {
            return bad(format!(
                "is of kind {other}, which this version does not read (0: direct, 1: batch)"
            ));
        }
    };
    if records.len() != count * RECORD_LEN {
        return bad(format!(
            "counts {count} signatures in {} bytes of records",
            records.len()
        ));
    }
    let mut parsed: Vec<Record> = Vec::with_capacity(count);
    for record in records.chunks_exact(RECORD_LEN) {
        let mut key = [0u8; 32];
        let mut signature = [0u8; 64];
        key.copy_from_slice(&record[..32]);
        signature.copy_from_slice(&record[32..]);
        let key = PublicKey(key);
        if parsed.last().is_some_and(|last| last.key >= key) {
            return bad(format!(
                "public key {key} is not after the one before it (keys ascend, each once)"
            ));
        }
        parsed.push(Record { key, signature });
    }
    Ok(Trailer {
        records: parsed,
        batch,
    })
}

/// Encodes `records` (sorted, distinct, 1 to [`MAX_SIGNATURES`]), of the
/// image's signed digest, or with `batch` of its batch's root message.
pub(super) fn encode_trailer(records: &[Record], batch: Option<&BatchPath>) -> Vec<u8> {
    let path_len = batch.map_or(0, |batch| {
        BATCH_FIELDS_LEN + batch.path.len() * PATH_DIGEST_LEN
    });
    let mut out = Vec::with_capacity(TRAILER_HEAD_LEN + path_len + records.len() * RECORD_LEN);
    out.extend_from_slice(&TRAILER_MAGIC);
    out.extend_from_slice(&(records.len() as u32).to_le_bytes());
    match batch {
        None => out.extend_from_slice(&KIND_DIRECT.to_le_bytes()),
        Some(batch) => {
            out.extend_from_slice(&KIND_BATCH.to_le_bytes());
            out.extend_from_slice(&batch.index.to_le_bytes());
            out.extend_from_slice(&batch.size.to_le_bytes());
            for digest in &batch.path {
                out.extend_from_slice(digest);
            }
        }
    }
    for record in records {
        out.extend_from_slice(&record.key.0);
        out.extend_from_slice(&record.signature);
    }
    out
}
