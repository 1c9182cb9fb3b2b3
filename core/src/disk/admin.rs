//! The `kiln cache` commands on a [`DiskCache`]: `stats`, `ls`, `gc`,
//! `clear` and `verify`, away from the lookup path.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::Ordering;

use super::cache::DiskCache;
use super::compact::{self, Scope};
use super::lock::DirLock;
use super::report::{
    ArtifactInfo, ClearReport, DiskStats, EntryInfo, GcReport, SegmentCheck, SessionCounters,
    VerifyReport,
};
use super::segment::{self, FileInfo};
use super::stamps;
use crate::error::Error;

impl DiskCache {
    /// What is in the directory, and what this process did with it.
    ///
    /// # Errors
    /// [`Error::DiskIo`] when the directory cannot be listed.
    pub fn stats(&self) -> Result<DiskStats, Error> {
        let listing = self.listing()?;
        self.relist()
            .map_err(|source| self.io_error("list", source))?;
        let segments = self.view().segments(self.held());
        Ok(DiskStats {
            dir: self.images_dir().to_path_buf(),
            writable: self.is_writable(),
            max_bytes: self.config().max_bytes,
            bytes: listing.segment_bytes() + stamps::file_len(self.held()),
            segments: listing.segments.len(),
            entries: compact::distinct_entries(segments.iter().map(|s| &**s)),
            unreadable_segments: listing.segments.len().saturating_sub(segments.len()),
            temp_files: listing.temp_files.len(),
            session: self.session(),
        })
    }

    /// This process's counters.
    pub fn session(&self) -> SessionCounters {
        SessionCounters {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            stored: self.stored.load(Ordering::Relaxed),
            store_failures: self.store_failures.load(Ordering::Relaxed),
        }
    }

    /// Every distinct entry on disk, most recently used first.
    ///
    /// # Errors
    /// [`Error::DiskIo`] when the directory cannot be listed.
    pub fn ls(&self) -> Result<Vec<EntryInfo>, Error> {
        self.relist()
            .map_err(|source| self.io_error("list", source))?;
        let recorded =
            stamps::read(self.held()).map_err(|source| self.io_error("read stamps in", source))?;
        let published: HashMap<String, u64> = self
            .listing()?
            .segments
            .into_iter()
            .map(|f| (f.name, f.modified_ms))
            .collect();
        let segments = self.view().segments(self.held());
        let mut seen = HashSet::new();
        let mut entries = Vec::new();
        for s in &segments {
            for i in 0..s.image.len() {
                let Ok(entry) = s.image.entry(i) else {
                    continue;
                };
                let id = (entry.owner(), entry.key());
                if !seen.insert(id) {
                    continue;
                }
                let artifacts = (0..entry.artifact_count())
                    .filter_map(|a| entry.artifact(a).ok())
                    .map(|a| ArtifactInfo {
                        kind: a.kind_name().to_owned(),
                        bytes: a.len(),
                    })
                    .collect();
                entries.push(EntryInfo {
                    owner: id.0.to_hex(),
                    owner_label: entry.owner_label().to_owned(),
                    key: id.1.to_hex(),
                    name: entry.name().to_owned(),
                    artifacts,
                    last_used_ms: recorded
                        .get(&id)
                        .copied()
                        .unwrap_or_else(|| published.get(&s.name).copied().unwrap_or(0)),
                    segment: s.name.clone(),
                    provenance: s.provenance().to_string(),
                });
            }
        }
        entries.sort_by(|a, b| {
            b.last_used_ms
                .cmp(&a.last_used_ms)
                .then_with(|| a.name.cmp(&b.name))
        });
        Ok(entries)
    }

    /// Merges every segment into one, drops corrupt entries, segments and
    /// orphaned temporary files, and evicts least recently used entries
    /// while over the cap, all in [`DiskCache::images_dir`]. Waits for the
    /// exclusive lock.
    ///
    /// # Errors
    /// [`Error::DiskIo`] when the lock cannot be taken or the directory cannot
    /// be listed or written; [`Error::Image`] when the merged segment cannot be
    /// written.
    pub fn gc(&self) -> Result<GcReport, Error> {
        self.append_stamps();
        let mut lock = DirLock::open(self.held())
            .map_err(|source| self.io_error("open the lock of", source))?;
        let _exclusive = lock
            .exclusive()
            .map_err(|source| self.io_error("lock", source))?;
        let damaged = self.view().damaged.clone();
        let report = compact::compact(self.held(), self.config(), Scope::All, &damaged)?;
        self.after_compaction();
        Ok(report)
    }

    /// Removes every segment, temporary file and stamp of this image format
    /// version ([`DiskCache::images_dir`]); other versions' subdirectories
    /// are left alone. Waits for the exclusive lock. Processes that mapped segments keep their maps.
    ///
    /// # Errors
    /// [`Error::DiskIo`] when the lock cannot be taken, or a file cannot be
    /// removed or the directory synced.
    pub fn clear(&self) -> Result<ClearReport, Error> {
        let mut lock = DirLock::open(self.held())
            .map_err(|source| self.io_error("open the lock of", source))?;
        let _exclusive = lock
            .exclusive()
            .map_err(|source| self.io_error("lock", source))?;
        let listing = self.listing()?;
        let mut report = ClearReport::default();
        // Whatever has the name (a symbolic link is removed, not followed).
        let stamps_file = self
            .held()
            .stat(stamps::STAMPS_FILE)
            .ok()
            .flatten()
            .map(|stat| FileInfo {
                name: stamps::STAMPS_FILE.to_owned(),
                bytes: stat.len,
                modified_ms: 0,
            });
        for file in listing
            .segments
            .iter()
            .chain(&listing.temp_files)
            .chain(&stamps_file)
        {
            self.held()
                .remove(&file.name)
                .map_err(|source| self.io_error("remove", source))?;
            report.files_removed += 1;
            report.bytes_removed += file.bytes;
        }
        self.held()
            .sync()
            .map_err(|source| self.io_error("sync", source))?;
        self.recency.forget();
        self.after_compaction();
        Ok(report)
    }

    /// Checks every segment fully (header, structure, every payload
    /// checksum), and says where its entries came from and, with
    /// [`DiskConfig::trusted_keys`](super::DiskConfig::trusted_keys),
    /// whether a process with those keys would serve them (a segment it
    /// would refuse is a finding: [`SegmentCheck::refused`]). Reads only;
    /// takes no lock.
    ///
    /// # Errors
    /// [`Error::DiskIo`] when the directory cannot be listed. A segment that
    /// fails a check is reported in the [`VerifyReport`], not as an error.
    pub fn verify(&self) -> Result<VerifyReport, Error> {
        let listing = self.listing()?;
        let segments = listing
            .segments
            .iter()
            .map(|file| {
                let checked = segment::open_image(self.held(), &file.name)
                    .and_then(|file| {
                        kiln_image::Image::from_file(
                            file,
                            kiln_image::FileAccess::MapWhole,
                            kiln_image::Verification::Full,
                        )
                    })
                    .map(|image| {
                        let provenance = segment::provenance_of(&file.name, &image);
                        let origin = provenance.origin(!self.config().trust_dir);
                        let trusted = self.config().trusted_keys.as_ref();
                        let refused = crate::trust::admit(trusted, &image, origin)
                            .err()
                            .map(|error| format!("{}: {error}", error.check()));
                        (image.len(), provenance, refused)
                    });
                match checked {
                    Ok((entries, provenance, refused)) => SegmentCheck {
                        name: file.name.clone(),
                        bytes: file.bytes,
                        entries,
                        provenance: provenance.to_string(),
                        problem: None,
                        refused,
                    },
                    Err(error) => SegmentCheck {
                        name: file.name.clone(),
                        bytes: file.bytes,
                        entries: 0,
                        provenance: String::new(),
                        problem: Some(error.to_string()),
                        refused: None,
                    },
                }
            })
            .collect();
        Ok(VerifyReport {
            segments,
            temp_files: listing.temp_files.len(),
        })
    }
}
