//! [`Candidate`]: what a precompile block leaves beside its image in
//! `OUT_DIR`, so that `kiln ship` can turn the build's image into the
//! library's shipped image without the build script ever writing into the
//! source tree.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::{Manifest, ShipError};

/// The extension of a candidate file: `OUT_DIR/<name>.kship-candidate`.
pub const CANDIDATE_EXTENSION: &str = "kship-candidate";
/// The first bytes of a candidate file.
const CANDIDATE_MAGIC: &[u8; 16] = b"kiln-candidate/1";
/// The largest candidate file read (its manifest lists the library's
/// declared sources: small).
const CANDIDATE_MAX: u64 = 16 << 20;

/// A precompile block's image, ready to be shipped: the manifest, where the
/// image is, and where the library's shipped images go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Candidate {
    /// What the image was built from.
    pub manifest: Manifest,
    /// The image the block wrote (in `OUT_DIR`), for `include_image!`: some
    /// artifacts may be left out of it.
    pub image: PathBuf,
    /// Every entry the block got, as the caches hold them (nothing left
    /// out): what is shipped. Written only when `kiln ship` asks for it
    /// (`KILN_SHIP_CANDIDATE=1`).
    pub entries: Option<PathBuf>,
    /// Where the library's shipped image lives:
    /// `<library>/kiln-shipped/<name>.kship`.
    pub shipped: PathBuf,
    /// Why this build's image must not be shipped (say, it was built for a
    /// subset of the targets); `None` when it may be.
    pub not_shippable: Option<String>,
}

impl Candidate {
    /// The candidate of `image` (the block's image in `OUT_DIR`), to be
    /// shipped as `shipped`, which may be shipped.
    pub fn new(manifest: Manifest, image: PathBuf, shipped: PathBuf) -> Candidate {
        Candidate {
            manifest,
            image,
            entries: None,
            shipped,
            not_shippable: None,
        }
    }

    /// Writes the candidate to `path` (atomically).
    ///
    /// # Errors
    /// [`ShipError::BadIndex`] when it does not encode; [`ShipError::ImageWrite`]
    /// when it cannot be written.
    pub fn write(&self, path: &Path) -> Result<(), ShipError> {
        let mut bytes = CANDIDATE_MAGIC.to_vec();
        let body = postcard::to_stdvec(self).map_err(|error| {
            ShipError::BadIndex(format!("the candidate does not encode ({error})"))
        })?;
        bytes.extend_from_slice(&body);
        kiln_image::write_file_atomic(path, &bytes)?;
        Ok(())
    }

    /// Reads the candidate at `path` (at most 16 MiB).
    ///
    /// # Errors
    /// [`ShipError::BadIndex`] when it is not a candidate file or cannot be
    /// read.
    pub fn read(path: &Path) -> Result<Candidate, ShipError> {
        use std::io::Read;
        let unreadable = |why: String| ShipError::BadIndex(format!("{}: {why}", path.display()));
        let file = std::fs::File::open(path).map_err(|error| unreadable(error.to_string()))?;
        let mut bytes = Vec::new();
        file.take(CANDIDATE_MAX + 1)
            .read_to_end(&mut bytes)
            .map_err(|error| unreadable(error.to_string()))?;
        if bytes.len() as u64 > CANDIDATE_MAX {
            return Err(unreadable(format!("larger than {CANDIDATE_MAX} bytes")));
        }
        let body = bytes
            .strip_prefix(CANDIDATE_MAGIC)
            .ok_or_else(|| unreadable("not a kiln candidate file".into()))?;
        postcard::from_bytes(body).map_err(|error| unreadable(format!("does not decode ({error})")))
    }
}
