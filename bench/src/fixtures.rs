//! The warm caches the children read, written once by the driver from the
//! entries of a workload's embedded image: the same entries (owners, keys,
//! bytes) in every form.

use std::path::{Path, PathBuf};

use kiln::disk::{DiskCache, DiskConfig};
use kiln::image::EntryData;

use crate::baseline::{dir_cache::DirCache, postcard_image};
use crate::error::BenchError;
use crate::kernel_set::Workload;

/// Where a workload's warm caches live.
#[derive(Clone, Debug)]
pub struct Fixtures {
    root: PathBuf,
}

impl Fixtures {
    /// The fixtures under `root` (as [`Fixtures::prepare`] wrote them).
    pub fn at(root: impl Into<PathBuf>) -> Fixtures {
        Fixtures { root: root.into() }
    }

    /// The folder holding everything.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The folder given as `KILN_IMAGE_PATH` in file-image mode.
    pub fn image_dir(&self) -> PathBuf {
        self.root.join("images")
    }

    /// The image file in [`Fixtures::image_dir`].
    pub fn image_file(&self) -> PathBuf {
        self.image_dir().join("kernels.kimg")
    }

    /// The disk tier's directory.
    pub fn disk_dir(&self) -> PathBuf {
        self.root.join("disk")
    }

    /// The file-per-entry cache's directory.
    pub fn dir_cache(&self) -> DirCache {
        DirCache::new(self.root.join("dir-cache"))
    }

    /// The serde + postcard image.
    pub fn postcard_file(&self) -> PathBuf {
        self.root.join("image.postcard")
    }

    /// Writes every warm cache of `workload` under `root`: its embedded image
    /// as a file, and its entries into a disk tier, a directory cache and a
    /// serde image. Returns the fixtures and the number of entries.
    pub fn prepare(root: &Path, workload: Workload) -> Result<(Fixtures, usize), BenchError> {
        let fixtures = Fixtures::at(root);
        let embedded = workload.embedded()?;
        let entries = embedded
            .open()?
            .entries()
            .map(|entry| entry.and_then(|entry| entry.to_data()))
            .collect::<Result<Vec<EntryData>, _>>()?;

        std::fs::create_dir_all(fixtures.image_dir()).map_err(BenchError::io(root))?;
        kiln::image::write_file_atomic(&fixtures.image_file(), embedded.bytes())?;

        let disk = DiskCache::open(DiskConfig::new(fixtures.disk_dir()))?;
        for entry in &entries {
            // `put` is best-effort (false also when already there): check.
            disk.put(entry);
            if disk.get(&entry.owner, &entry.key).is_none() {
                return Err(BenchError::Missing {
                    mode: "kiln-disk (warming its directory)".to_owned(),
                    kernel: entry.name.clone(),
                });
            }
        }
        drop(disk);

        let dir_cache = fixtures.dir_cache();
        for entry in &entries {
            dir_cache.put(entry)?;
        }
        postcard_image::write(&fixtures.postcard_file(), &entries)?;
        Ok((fixtures, entries.len()))
    }
}
