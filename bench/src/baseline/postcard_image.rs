//! A serde image: every entry in one postcard file behind a BLAKE3 of the
//! body, read, checked and deserialized whole at start into a hash map.

use std::collections::HashMap;
use std::path::Path;

use kiln::image::Digest;
use kiln::image::EntryData;
use kiln::{Key, Owner};
use serde::{Deserialize, Serialize};

use super::{checked_body, with_checksum};
use crate::error::BenchError;

/// One entry of the serde image.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SerdeEntry {
    /// The owner's digest.
    pub owner: [u8; 32],
    /// The key's digest.
    pub key: [u8; 32],
    /// Human name.
    pub name: String,
    /// Deps as (definition, fingerprint).
    pub deps: Vec<(String, [u8; 32])>,
    /// Artifacts.
    pub artifacts: Vec<SerdeArtifact>,
}

/// One artifact of a [`SerdeEntry`].
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct SerdeArtifact {
    /// The artifact kind's name (`cubin`, `ptx`...).
    pub kind: String,
    /// The lowered entry points.
    pub entry_points: Vec<String>,
    /// The compiled code.
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

impl From<&EntryData> for SerdeEntry {
    fn from(entry: &EntryData) -> SerdeEntry {
        SerdeEntry {
            owner: entry.owner.0,
            key: entry.key.0,
            name: entry.name.clone(),
            deps: entry
                .deps
                .iter()
                .map(|dep| (dep.name.clone(), dep.fingerprint.0))
                .collect(),
            artifacts: entry
                .artifacts
                .iter()
                .map(|artifact| SerdeArtifact {
                    kind: artifact.kind.name().to_owned(),
                    entry_points: artifact.entry_points.clone(),
                    bytes: artifact.bytes.clone(),
                })
                .collect(),
        }
    }
}

/// Writes `entries` as a serde image at `path`.
pub fn write<'e>(
    path: &Path,
    entries: impl IntoIterator<Item = &'e EntryData>,
) -> Result<(), BenchError> {
    let entries: Vec<SerdeEntry> = entries.into_iter().map(SerdeEntry::from).collect();
    let body = postcard::to_stdvec(&entries).map_err(|err| BenchError::Encode {
        what: "a serde image",
        reason: err.to_string(),
    })?;
    std::fs::write(path, with_checksum(&body)).map_err(BenchError::io(path))
}

/// A serde image, deserialized whole.
#[derive(Debug)]
pub struct SerdeImage {
    entries: HashMap<([u8; 32], [u8; 32]), SerdeEntry>,
}

impl SerdeImage {
    /// Reads, checks and deserializes the image at `path`.
    pub fn load(path: &Path) -> Result<SerdeImage, BenchError> {
        let file = std::fs::read(path).map_err(BenchError::io(path))?;
        let body = checked_body(&file).ok_or_else(|| BenchError::Checksum {
            path: path.to_path_buf(),
        })?;
        let list: Vec<SerdeEntry> =
            postcard::from_bytes(body).map_err(|source| BenchError::Decode {
                path: path.to_path_buf(),
                source,
            })?;
        let entries = list
            .into_iter()
            .map(|entry| ((entry.owner, entry.key), entry))
            .collect();
        Ok(SerdeImage { entries })
    }

    /// Entries held.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The entry of `(owner, key)`.
    pub fn get(&self, owner: &Owner, key: &Key) -> Option<&SerdeEntry> {
        self.get_digest(&owner.digest(), key.digest())
    }

    /// The entry of `(owner, key)` given as digests.
    pub fn get_digest(&self, owner: &Digest, key: &Digest) -> Option<&SerdeEntry> {
        self.entries.get(&(owner.0, key.0))
    }
}

impl SerdeEntry {
    /// The bytes of the artifact of `kind`.
    pub fn artifact(&self, kind: &kiln::ArtifactKind) -> Option<&[u8]> {
        self.artifacts
            .iter()
            .find(|artifact| artifact.kind == kind.name())
            .map(|artifact| artifact.bytes.as_slice())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    #[test]
    fn entries_written_are_found_by_owner_and_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("image.postcard");
        let owner = synthetic::owner().unwrap();
        let entries: Vec<EntryData> = (0..5)
            .map(|i| synthetic::entry(&owner, i, 64).unwrap())
            .collect();
        write(&path, &entries).unwrap();
        let image = SerdeImage::load(&path).unwrap();
        assert_eq!(image.len(), 5);
        let found = image.get(&owner, &synthetic::key(3).unwrap()).unwrap();
        assert_eq!(
            found.artifact(&kiln::ArtifactKind::Cubin),
            Some(&entries[3].artifacts[0].bytes[..])
        );
        assert!(image.get(&owner, &synthetic::key(9).unwrap()).is_none());

        let mut bytes = std::fs::read(&path).unwrap();
        bytes[100] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(
            SerdeImage::load(&path),
            Err(BenchError::Checksum { .. })
        ));
    }
}
