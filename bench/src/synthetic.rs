//! The synthetic kernel set: entries with deterministic pseudo-random payloads,
//! for runs that need no NVRTC (`--quick`, the smoke test) and for the scaling
//! images. Shared with the build script (`#[path]`), which embeds a small one.

use kiln::image::EntryData;
use kiln::{Artifact, ArtifactKind};
use kiln::{Key, KeyBuilder, Owner};

/// Entries in the image the build script embeds.
pub const EMBEDDED_ENTRIES: usize = 64;

/// Payload bytes per entry of the embedded synthetic image (about a small CUBIN).
pub const EMBEDDED_PAYLOAD: usize = 4096;

/// File name of the embedded synthetic image in `OUT_DIR`.
#[allow(
    dead_code,
    reason = "the build script writes it; `include_image!` takes a literal"
)]
pub const EMBEDDED_IMAGE: &str = "kiln-bench-synthetic.kimg";

/// The owner of every synthetic entry: a compiler that does not exist.
pub fn owner() -> Result<Owner, kiln::Error> {
    Owner::new("kiln-bench-synthetic", "1", "none", [] as [&str; 0])
}

/// The key of synthetic entry `index`.
pub fn key(index: u64) -> Result<Key, kiln::Error> {
    Ok(KeyBuilder::new("kiln-bench.synthetic", 1)
        .field("index", &index)?
        .finish())
}

/// The human name of synthetic entry `index`.
pub fn name(index: u64) -> String {
    format!("synthetic_{index}")
}

/// The payload of entry `index`: `len` bytes of a BLAKE3 output stream seeded
/// by the index (incompressible, and different for every entry).
pub fn payload(index: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    let mut hasher = blake3::Hasher::new();
    hasher.update(&index.to_le_bytes());
    hasher.finalize_xof().fill(&mut bytes);
    bytes
}

/// The artifact of entry `index` (kind `Cubin`, one entry point).
pub fn artifact(index: u64, len: usize) -> Artifact {
    Artifact {
        kind: ArtifactKind::Cubin,
        entry_points: vec![name(index)],
        bytes: payload(index, len),
    }
}

/// The whole entry `index`, as an image holds it.
pub fn entry(owner: &Owner, index: u64, len: usize) -> Result<EntryData, kiln::Error> {
    Ok(EntryData {
        owner: owner.digest(),
        owner_label: owner.label().to_owned(),
        key: *key(index)?.digest(),
        name: name(index),
        min_world: 0,
        max_world: u64::MAX,
        deps: Vec::new(),
        artifacts: vec![artifact(index, len)],
    })
}
