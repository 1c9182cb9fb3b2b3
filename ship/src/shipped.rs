//! [`Shipped`]: a shipped image's manifest and entries, packed into a file
//! and unpacked from one, converted from and into a kiln image.

use std::collections::BTreeMap;
use std::io::Read;

use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, Verification,
};
use ruzstd::decoding::{FrameDecoder, StreamingDecoder};
use serde::{Deserialize, Serialize};

use crate::ShipError;
use crate::file::{CONTENT_CONTEXT, HEADER_LEN, Header, ShippedFile};

/// The largest zstd window a reader accepts, and the largest `kiln ship`
/// writes (16 MiB): the decoder keeps up to a window of the body besides
/// the body itself, so this is what unpacking costs beyond the declared
/// raw length. The demo libraries' bodies (0.4 and 9.2 MB) fit whole in
/// it; a body compressed with an 8 MiB window instead of 16 MiB is 0.001 %
/// larger, with 4 MiB 2 % (`zstd -19 --long=N` of the kernels demo's raw
/// body), so larger bodies lose little to the bound.
pub const MAX_WINDOW: u64 = 16 << 20;

/// The entries' world range in an image built from a shipped one: every
/// world (a merged or tier-loaded entry starts at the loading process's
/// world anyway).
const MIN_WORLD: u64 = 1;

/// What a shipped image was built from: the precompile block's name, the
/// backends' build records, the digests of the library's declared sources,
/// and the digest of the specialization list.
///
/// A downstream build compares these with its own block to say *why*
/// shipped entries no longer cover it ("src/catalogue.rs changed since
/// shipping"); which entries serve is decided by their keys alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Manifest {
    /// The image's name (`Precompile::new(name)`).
    pub name: String,
    /// Each backend's build record by backend name (kiln-cuda's: the
    /// NVRTC release, header-set digests and targets).
    pub records: BTreeMap<String, String>,
    /// Each declared source inside the library (a path relative to its
    /// root, `/`-separated) and the BLAKE3 of its content (of its files,
    /// for a directory).
    pub sources: BTreeMap<String, Digest>,
    /// BLAKE3 of the sorted labels of the specializations the block asked
    /// for ([`Manifest::digest_labels`]).
    pub specializations: Digest,
    /// How many specializations the block asked for.
    pub specialization_count: u64,
}

impl Manifest {
    /// A manifest for the image `name`, with nothing recorded yet.
    pub fn new(name: impl Into<String>) -> Manifest {
        Manifest {
            name: name.into(),
            ..Manifest::default()
        }
    }

    /// The digest of a specialization list, as
    /// [`Manifest::specializations`] holds it: order and repeats do not
    /// matter.
    pub fn digest_labels(labels: &[String]) -> Digest {
        let mut sorted: Vec<&String> = labels.iter().collect();
        sorted.sort();
        sorted.dedup();
        let mut hasher = blake3::Hasher::new_derive_key("kiln-ship 1 specialization list");
        for label in sorted {
            hasher.update(&(label.len() as u64).to_le_bytes());
            hasher.update(label.as_bytes());
        }
        Digest(*hasher.finalize().as_bytes())
    }
}

/// A shipped image, unpacked and checked: its manifest, the image metadata
/// and its entries, sorted by `(owner, key)`, each payload checked against
/// its digest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shipped {
    /// What the image was built from.
    pub manifest: Manifest,
    /// The producer and labels of the image.
    pub meta: ImageMeta,
    entries: Vec<EntryData>,
}

/// The raw body's index (postcard), followed in the raw body by every
/// artifact's bytes in entry order.
#[derive(Serialize, Deserialize)]
struct Index {
    manifest: Manifest,
    producer_name: String,
    producer_version: String,
    labels: Vec<(String, String)>,
    entries: Vec<IndexEntry>,
}

#[derive(Serialize, Deserialize)]
struct IndexEntry {
    owner: Digest,
    owner_label: String,
    key: Digest,
    name: String,
    deps: Vec<(String, Digest)>,
    artifacts: Vec<IndexArtifact>,
}

#[derive(Serialize, Deserialize)]
struct IndexArtifact {
    kind: String,
    entry_points: Vec<String>,
    len: u64,
}

impl Shipped {
    /// The entries of `image` (checked as it was opened) with `manifest`.
    ///
    /// # Errors
    /// [`ShipError::ImageRead`] when an entry or payload of `image` fails its
    /// check.
    pub fn from_image(image: &Image, manifest: Manifest) -> Result<Shipped, ShipError> {
        let entries = image
            .entries()
            .map(|entry| Ok(entry?.to_data()?))
            .collect::<Result<Vec<EntryData>, ShipError>>()?;
        Ok(Shipped::new(manifest, image.meta(), entries))
    }

    /// A shipped image of `entries` (sorted here by `(owner, key)`).
    pub fn new(manifest: Manifest, meta: ImageMeta, mut entries: Vec<EntryData>) -> Shipped {
        entries.sort_by_key(|a| (a.owner, a.key));
        Shipped {
            manifest,
            meta,
            entries,
        }
    }

    /// The entries, sorted by `(owner, key)`.
    pub fn entries(&self) -> &[EntryData] {
        &self.entries
    }

    /// The entry of `(owner, key)`, by binary search.
    pub fn find(&self, owner: &Digest, key: &Digest) -> Option<&EntryData> {
        self.entries
            .binary_search_by(|e| (&e.owner, &e.key).cmp(&(owner, key)))
            .ok()
            .map(|i| &self.entries[i])
    }

    /// Unpacks a shipped file whose frame is checked, in two passes over
    /// its compressed body, neither of which keeps a second copy:
    ///
    /// 1. decompresses it without keeping anything, hashing as it goes:
    ///    it must give exactly the declared raw length (decompression stops
    ///    one byte past it) and the content digest the header names, which
    ///    covers the index and every payload. A damaged or forged body is
    ///    refused here, having cost the decoder's window and no more;
    /// 2. decompresses it again, the index into its own buffer (decoded,
    ///    then dropped) and each artifact straight into its own buffer,
    ///    once the index is checked to account for every payload byte.
    ///
    /// Then the entries' order, and every rule of the image writer
    /// ([`kiln_image::check_writable`]), so that an entry no image can hold
    /// refuses the file here rather than fail a build that embeds it.
    ///
    /// Memory: the declared raw length (at most
    /// [`MAX_EXPANSION`](crate::file::MAX_EXPANSION) times the compressed
    /// body, plus [`SLACK`](crate::file::SLACK)), the decoded index, and
    /// the decoder's window (at most [`MAX_WINDOW`], and never more than the
    /// bytes decompressed): the declared length plus 16 MiB at most, plus
    /// what the index decodes to.
    ///
    /// # Errors
    /// [`ShipError::Decompress`], [`ShipError::RawLength`],
    /// [`ShipError::Content`], [`ShipError::BadIndex`], [`ShipError::Order`],
    /// [`ShipError::Unwritable`].
    pub fn unpack(file: &ShippedFile<'_>) -> Result<Shipped, ShipError> {
        let header = file.header();
        // One decoder for both passes: the second reuses the first's window.
        let mut frames = FrameDecoder::new();
        frames.set_max_window_size(MAX_WINDOW);
        check_content(&mut frames, file.packed(), header.raw_len, header.content)?;
        let mut body = decoder(&mut frames, file.packed())?;
        // The header checked index_len <= raw_len.
        let index_bytes = read_exact(&mut body, header.index_len)?;
        let (index, unread): (Index, &[u8]) = postcard::take_from_bytes(&index_bytes)
            .map_err(|error| ShipError::BadIndex(format!("it does not decode ({error})")))?;
        if !unread.is_empty() {
            return Err(ShipError::BadIndex(format!(
                "it ends {} bytes before the length its header gives",
                unread.len()
            )));
        }
        drop(index_bytes);
        // The artifacts must tile the payloads exactly before any is read.
        let payload_len = header.raw_len - header.index_len;
        let mut claimed = 0u64;
        for (position, entry) in index.entries.iter().enumerate() {
            for (slot, artifact) in entry.artifacts.iter().enumerate() {
                claimed = claimed
                    .checked_add(artifact.len)
                    .filter(|claimed| *claimed <= payload_len)
                    .ok_or_else(|| {
                        ShipError::BadIndex(format!(
                            "entry {position} artifact {slot} runs past the payloads"
                        ))
                    })?;
            }
        }
        if claimed != payload_len {
            return Err(ShipError::BadIndex(format!(
                "{} payload bytes belong to no artifact",
                payload_len - claimed
            )));
        }
        let mut entries = Vec::with_capacity(index.entries.len());
        for entry in index.entries {
            let mut artifacts = Vec::with_capacity(entry.artifacts.len());
            for artifact in entry.artifacts {
                artifacts.push(Artifact {
                    kind: artifact
                        .kind
                        .parse::<ArtifactKind>()
                        .unwrap_or_else(|n| match n {}),
                    entry_points: artifact.entry_points,
                    bytes: read_exact(&mut body, artifact.len)?,
                });
            }
            entries.push(EntryData {
                owner: entry.owner,
                owner_label: entry.owner_label,
                key: entry.key,
                name: entry.name,
                min_world: MIN_WORLD,
                max_world: u64::MAX,
                deps: entry
                    .deps
                    .into_iter()
                    .map(|(name, fingerprint)| Dep { name, fingerprint })
                    .collect(),
                artifacts,
            });
        }
        for (i, pair) in entries.windows(2).enumerate() {
            if (pair[0].owner, pair[0].key) >= (pair[1].owner, pair[1].key) {
                return Err(ShipError::Order(i, i + 1));
            }
        }
        let meta = ImageMeta {
            producer_name: index.producer_name,
            producer_version: index.producer_version,
            labels: index.labels.into_iter().collect(),
        };
        kiln_image::check_writable(&meta, &entries).map_err(ShipError::Unwritable)?;
        Ok(Shipped {
            manifest: index.manifest,
            meta,
            entries,
        })
    }

    /// Parses, then unpacks, `bytes` (see [`ShippedFile::parse`] and
    /// [`Shipped::unpack`]). Signatures are not checked: use
    /// [`ShippedFile::check_signed_by`] first where the library names a key.
    ///
    /// # Errors
    /// As [`ShippedFile::parse`] and [`Shipped::unpack`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Shipped, ShipError> {
        Shipped::unpack(&ShippedFile::parse(bytes)?)
    }

    /// The raw body: the postcard index followed by every payload, and the
    /// index's length.
    fn raw_body(&self) -> Result<(Vec<u8>, usize), ShipError> {
        let index = Index {
            manifest: self.manifest.clone(),
            producer_name: self.meta.producer_name.clone(),
            producer_version: self.meta.producer_version.clone(),
            labels: self
                .meta
                .labels
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            entries: self
                .entries
                .iter()
                .map(|entry| IndexEntry {
                    owner: entry.owner,
                    owner_label: entry.owner_label.clone(),
                    key: entry.key,
                    name: entry.name.clone(),
                    deps: entry
                        .deps
                        .iter()
                        .map(|dep| (dep.name.clone(), dep.fingerprint))
                        .collect(),
                    artifacts: entry
                        .artifacts
                        .iter()
                        .map(|artifact| IndexArtifact {
                            kind: artifact.kind.name().to_owned(),
                            entry_points: artifact.entry_points.clone(),
                            len: artifact.bytes.len() as u64,
                        })
                        .collect(),
                })
                .collect(),
        };
        let mut raw = postcard::to_stdvec(&index)
            .map_err(|error| ShipError::BadIndex(format!("it does not encode ({error})")))?;
        let index_len = raw.len();
        for entry in &self.entries {
            for artifact in &entry.artifacts {
                raw.extend_from_slice(&artifact.bytes);
            }
        }
        Ok((raw, index_len))
    }

    /// The shipped file, compressed at zstd `level` (1 to 22; `kiln ship`
    /// uses 19) with a window large enough to see the whole body (at most
    /// [`MAX_WINDOW`]), so that CUBINs of different archs, which share most
    /// of their bytes, compress against each other. Unsigned; deterministic
    /// for one zstd release.
    ///
    /// # Errors
    /// [`ShipError::Compress`]; [`ShipError::BadIndex`] when the index does
    /// not encode.
    #[cfg(feature = "compress")]
    pub fn encode(&self, level: i32) -> Result<Vec<u8>, ShipError> {
        let (raw, index_len) = self.raw_body()?;
        let mut packed = compress(&raw, level)?;
        pad_to_bound(&mut packed, raw.len() as u64);
        let header = Header {
            index_len: index_len as u64,
            raw_len: raw.len() as u64,
            packed_len: packed.len() as u64,
            content: content_digest(&raw),
        };
        let mut out = Vec::with_capacity(HEADER_LEN + packed.len());
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&packed);
        Ok(out)
    }

    /// The shipped file with the body stored, not compressed (a zstd frame
    /// of raw blocks): for tests and tools that need no C library.
    ///
    /// # Errors
    /// [`ShipError::BadIndex`] when the index does not encode.
    pub fn encode_stored(&self) -> Result<Vec<u8>, ShipError> {
        let (raw, index_len) = self.raw_body()?;
        let packed = ruzstd::encoding::compress_to_vec(
            &raw[..],
            ruzstd::encoding::CompressionLevel::Uncompressed,
        );
        let header = Header {
            index_len: index_len as u64,
            raw_len: raw.len() as u64,
            packed_len: packed.len() as u64,
            content: content_digest(&raw),
        };
        let mut out = Vec::with_capacity(HEADER_LEN + packed.len());
        out.extend_from_slice(&header.to_bytes());
        out.extend_from_slice(&packed);
        Ok(out)
    }

    /// A kiln image of the entries (sorted, deterministic), for tools. The
    /// writer checks every value; the image is opened with structural
    /// verification (the content digest covered the payloads as they were
    /// unpacked).
    ///
    /// # Errors
    /// [`ShipError::ImageWrite`] when an entry is not a valid image entry.
    pub fn to_image(&self) -> Result<Image, ShipError> {
        let mut writer = ImageWriter::new(self.meta.clone());
        for entry in &self.entries {
            writer.push(entry.clone());
        }
        let bytes = writer.to_bytes()?;
        // Every payload was checked against its digest as it was unpacked, and
        // the writer checked every value: the structure is what is left.
        Ok(Image::from_bytes(&bytes, Verification::Structural)?)
    }

    /// Whether `other` holds the same manifest, metadata and entries
    /// (signatures and compression aside): what `kiln ship --check`
    /// compares.
    pub fn same_content(&self, other: &Shipped) -> bool {
        self == other
    }
}

/// BLAKE3 (derive-key [`CONTENT_CONTEXT`]) of the raw body.
fn content_digest(raw: &[u8]) -> Digest {
    let mut hasher = blake3::Hasher::new_derive_key(CONTENT_CONTEXT);
    hasher.update(raw);
    Digest(*hasher.finalize().as_bytes())
}

/// A reader of the zstd frame `packed`, decoded by `frames` (whose
/// buffers it reuses).
fn decoder<'a>(
    frames: &'a mut FrameDecoder,
    packed: &'a [u8],
) -> Result<impl Read + 'a, ShipError> {
    StreamingDecoder::new_with_decoder(packed, frames)
        .map_err(|error| ShipError::Decompress(error.to_string()))
}

/// Decompresses `packed` without keeping it: it must give exactly
/// `expected` bytes (reading stops one byte past it, so a frame that would
/// expand further costs nothing more) whose content digest is `content`.
fn check_content(
    frames: &mut FrameDecoder,
    packed: &[u8],
    expected: u64,
    content: Digest,
) -> Result<(), ShipError> {
    let mut decoder = decoder(frames, packed)?.take(expected.saturating_add(1));
    let mut hasher = blake3::Hasher::new_derive_key(CONTENT_CONTEXT);
    let mut chunk = vec![0u8; 64 << 10];
    let mut read = 0u64;
    loop {
        let n = match decoder.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(ShipError::Decompress(error.to_string())),
        };
        hasher.update(&chunk[..n]);
        read += n as u64;
    }
    if read != expected {
        return Err(ShipError::RawLength {
            found: read,
            expected,
        });
    }
    let found = Digest(*hasher.finalize().as_bytes());
    if found != content {
        return Err(ShipError::Content {
            found,
            expected: content,
        });
    }
    Ok(())
}

/// The next `len` bytes of `body`, in a buffer of exactly that capacity
/// (`len` is within the raw length the first pass read).
fn read_exact(body: &mut impl Read, len: u64) -> Result<Vec<u8>, ShipError> {
    let capacity = usize::try_from(len).map_err(|_| ShipError::RawLength {
        found: 0,
        expected: len,
    })?;
    let mut bytes = Vec::with_capacity(capacity);
    body.take(len)
        .read_to_end(&mut bytes)
        .map_err(|error| ShipError::Decompress(error.to_string()))?;
    if bytes.len() != capacity {
        // The first pass read the whole body: only a decoder that changed
        // its mind gets here.
        return Err(ShipError::Decompress(format!(
            "the body ended {} bytes early",
            capacity - bytes.len()
        )));
    }
    Ok(bytes)
}

/// Appends a skippable zstd frame to `packed` (which decoders pass over)
/// when `raw_len` would be more than
/// [`MAX_EXPANSION`](crate::file::MAX_EXPANSION) times it plus
/// [`SLACK`](crate::file::SLACK): so that every file written is one every
/// reader accepts, however well its body compresses.
#[cfg(feature = "compress")]
fn pad_to_bound(packed: &mut Vec<u8>, raw_len: u64) {
    use crate::file::{MAX_EXPANSION, SLACK};
    /// A skippable frame's magic number (any of 0x184D2A50..=0x184D2A5F).
    const SKIPPABLE: u32 = 0x184D_2A50;
    let needed = raw_len.saturating_sub(SLACK).div_ceil(MAX_EXPANSION);
    let short = needed.saturating_sub(packed.len() as u64);
    if short == 0 {
        return;
    }
    // The frame's own 8 bytes count towards the length.
    let content = u32::try_from(short.saturating_sub(8)).unwrap_or(u32::MAX);
    packed.extend_from_slice(&SKIPPABLE.to_le_bytes());
    packed.extend_from_slice(&content.to_le_bytes());
    packed.resize(packed.len() + content as usize, 0);
}

#[cfg(feature = "compress")]
fn compress(raw: &[u8], level: i32) -> Result<Vec<u8>, ShipError> {
    use std::io::Write;
    let failed = |error: std::io::Error| ShipError::Compress(error.to_string());
    // A window that covers the whole body, between zstd's minimum (2^10)
    // and MAX_WINDOW (2^24).
    let window_log = (usize::BITS - raw.len().max(1).leading_zeros()).clamp(10, 24);
    let mut encoder = zstd::stream::Encoder::new(Vec::new(), level).map_err(failed)?;
    encoder
        .set_pledged_src_size(Some(raw.len() as u64))
        .map_err(failed)?;
    encoder.include_checksum(false).map_err(failed)?;
    encoder.include_contentsize(true).map_err(failed)?;
    encoder.window_log(window_log).map_err(failed)?;
    encoder.long_distance_matching(true).map_err(failed)?;
    encoder.write_all(raw).map_err(failed)?;
    encoder.finish().map_err(failed)
}
