//! A file-per-entry directory cache: `<dir>/<hex(BLAKE3(owner ‖ key))>.bin`
//! holding a BLAKE3 of the rest, then the artifact (entry points and bytes)
//! in postcard. A hit opens, reads and checks one file and decodes it into
//! owned bytes.

use std::path::{Path, PathBuf};

use kiln::image::Digest;
use kiln::image::EntryData;
use kiln::{Key, Owner};
use serde::{Deserialize, Serialize};

use super::{checked_body, with_checksum};
use crate::error::BenchError;
use crate::kernel_set::IN_HAND;

/// What one cache file holds.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct CachedArtifact {
    /// The lowered entry points.
    pub entry_points: Vec<String>,
    /// The compiled code.
    #[serde(with = "serde_bytes")]
    pub bytes: Vec<u8>,
}

/// A directory of one file per cached kernel.
#[derive(Debug, Clone)]
pub struct DirCache {
    dir: PathBuf,
}

impl DirCache {
    /// The cache in `dir` (nothing is read until a lookup).
    pub fn new(dir: impl Into<PathBuf>) -> DirCache {
        DirCache { dir: dir.into() }
    }

    /// The file of `(owner, key)`.
    fn path(&self, owner: &Digest, key: &Digest) -> PathBuf {
        let mut hasher = blake3::Hasher::new();
        hasher.update(owner.as_bytes());
        hasher.update(key.as_bytes());
        let name = Digest(*hasher.finalize().as_bytes()).to_hex();
        self.dir.join(format!("{name}.bin"))
    }

    /// Writes the [`IN_HAND`] artifact of `entry` (entries without one are
    /// skipped).
    pub fn put(&self, entry: &EntryData) -> Result<(), BenchError> {
        let Some(artifact) = entry.artifacts.iter().find(|a| a.kind == IN_HAND) else {
            return Ok(());
        };
        let body = postcard::to_stdvec(&CachedArtifact {
            entry_points: artifact.entry_points.clone(),
            bytes: artifact.bytes.clone(),
        })
        .map_err(|err| BenchError::Encode {
            what: "a directory-cache file",
            reason: err.to_string(),
        })?;
        let path = self.path(&entry.owner, &entry.key);
        std::fs::create_dir_all(&self.dir).map_err(BenchError::io(&self.dir))?;
        std::fs::write(&path, with_checksum(&body)).map_err(BenchError::io(path))
    }

    /// The cached artifact of `(owner, key)`: `Ok(None)` when there is no file.
    pub fn get(&self, owner: &Owner, key: &Key) -> Result<Option<CachedArtifact>, BenchError> {
        let path = self.path(&owner.digest(), key.digest());
        let file = match std::fs::read(&path) {
            Ok(file) => file,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(err) => return Err(BenchError::io(path)(err)),
        };
        decode(&path, &file).map(Some)
    }
}

fn decode(path: &Path, file: &[u8]) -> Result<CachedArtifact, BenchError> {
    let body = checked_body(file).ok_or_else(|| BenchError::Checksum {
        path: path.to_path_buf(),
    })?;
    postcard::from_bytes(body).map_err(|source| BenchError::Decode {
        path: path.to_path_buf(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::synthetic;

    #[test]
    fn a_put_entry_reads_back_and_a_corrupt_file_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let cache = DirCache::new(dir.path().join("cache"));
        let owner = synthetic::owner().unwrap();
        let entry = synthetic::entry(&owner, 7, 100).unwrap();
        cache.put(&entry).unwrap();
        let key = synthetic::key(7).unwrap();
        let got = cache.get(&owner, &key).unwrap().unwrap();
        assert_eq!(got.bytes, entry.artifacts[0].bytes);
        assert!(
            cache
                .get(&owner, &synthetic::key(8).unwrap())
                .unwrap()
                .is_none()
        );

        let path = cache.path(&owner.digest(), key.digest());
        let mut bytes = std::fs::read(&path).unwrap();
        *bytes.last_mut().unwrap() ^= 0x40;
        std::fs::write(&path, bytes).unwrap();
        assert!(matches!(
            cache.get(&owner, &key),
            Err(BenchError::Checksum { .. })
        ));
    }
}
