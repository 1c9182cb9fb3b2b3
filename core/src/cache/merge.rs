//! Merging images: by layering, not by copying.
//!
//! A merge costs O(owners + stale entries + duplicate checks), not O(entries):
//! the image becomes a [`Layer`] consulted after memory, and only entries that
//! must not be served get a state word:
//!
//! 1. **foreign owners**: entries of an owner refused by the cache's owner
//!    filter are counted and never served (O(owners));
//! 2. **stale entries** (revalidation at load): an entry with a dep that this
//!    process defines with another fingerprint is excluded;
//! 3. **duplicates** (the first valid entry wins): for each owner of the image
//!    that already has entries in memory or in an earlier layer, the smaller
//!    side is checked against the larger, and image entries that already have
//!    a valid entry are excluded.
//!
//! Everything else is valid from the merge's world on.

use std::fmt;

use kiln_image::{Digest, Image};

use std::sync::Arc;

use super::Cache;
use super::image_deps;
use super::instance::Instance;
use super::layers::{Layer, LayerOwner};
use super::stats::{Counters, add, bump};
use crate::Key;

/// What a merge did with an image's entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct MergeReport {
    /// Entries now served from the image.
    pub inserted: u64,
    /// Entries skipped because a valid entry for their `(owner, key)` was
    /// already there (the first valid entry wins).
    pub duplicate: u64,
    /// Entries skipped because a definition they depend on has another
    /// fingerprint in this process.
    pub stale: u64,
    /// Entries skipped because their owner is not accepted here.
    pub foreign_owner: u64,
    /// Entries refused because the image records them as taken unverified
    /// from a cache tier when it was built (`KILN_BUILD_UNVERIFIED`), in a
    /// process with trusted keys ([`Cache::merge_image_except`]).
    pub unverified: u64,
    /// Images (or parts) that could not be merged at all, with the reason.
    pub rejected: Vec<Rejection>,
}

/// An image that could not be merged.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Rejection {
    /// Where the image came from (a path, a crate name).
    pub source: String,
    /// Why, in words (e.g. the image error's message).
    pub reason: String,
}

impl MergeReport {
    /// Adds `other`'s counts and rejections to this report (to sum the merges
    /// of several images).
    pub fn absorb(&mut self, other: MergeReport) {
        self.inserted += other.inserted;
        self.duplicate += other.duplicate;
        self.stale += other.stale;
        self.foreign_owner += other.foreign_owner;
        self.unverified += other.unverified;
        self.rejected.extend(other.rejected);
    }

    /// Records that the image from `source` was rejected because of `reason`.
    pub fn reject(&mut self, source: impl Into<String>, reason: impl fmt::Display) {
        self.rejected.push(Rejection {
            source: source.into(),
            reason: reason.to_string(),
        });
    }

    /// Total entries considered.
    pub fn total(&self) -> u64 {
        self.inserted + self.duplicate + self.stale + self.foreign_owner + self.unverified
    }
}

impl fmt::Display for MergeReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} inserted, {} duplicate, {} stale, {} foreign owner, {} rejected",
            self.inserted,
            self.duplicate,
            self.stale,
            self.foreign_owner,
            self.rejected.len()
        )?;
        if self.unverified > 0 {
            write!(f, ", {} unverified refused", self.unverified)?;
        }
        for r in &self.rejected {
            write!(f, "; {}: {}", r.source, r.reason)?;
        }
        Ok(())
    }
}

impl Cache {
    /// Merges `image`: its entries become valid from the current world on,
    /// except stale, duplicate and foreign-owner ones (see [`MergeReport`]).
    /// Image-backed hits borrow their bytes from the image.
    pub fn merge_image(&self, image: Image) -> MergeReport {
        self.merge_image_except(image, &[])
    }

    /// Merges `image` as [`Cache::merge_image`] does, except that its
    /// entries named in `refused` (`(owner, key)` digests) are never
    /// served: counted in [`MergeReport::unverified`]. The global cache's
    /// init passes the entries an embedded image records as taken
    /// unverified at build time when the process has trusted keys
    /// ([`crate::trust::unverified_entries`]).
    pub fn merge_image_except(&self, image: Image, refused: &[(Digest, Digest)]) -> MergeReport {
        let writer = self.writer();
        let now = self.world().0;
        let mut report = MergeReport::default();

        let owners: Vec<LayerOwner> = image
            .owners()
            .into_iter()
            .map(|(digest, label, entries)| {
                let foreign = !self.config.accepts_owner(&digest, &label);
                if foreign {
                    report.foreign_owner += entries.len() as u64;
                }
                LayerOwner {
                    digest,
                    label,
                    entries,
                    foreign,
                }
            })
            .collect();
        let stale = match image_deps::stale_entries(&image, &writer.definitions) {
            Ok(stale) => stale,
            Err(error) => {
                // Without its dependency index an image cannot be revalidated.
                tracing::warn!(error = %crate::ErrorChain(&error), "image rejected: its dependency index is unusable");
                let mut report = MergeReport::default();
                report.reject(image_source(&image), error);
                return report;
            }
        };
        let total = image.len() as u64;
        let layer = Layer::new(image, now, owners);
        for index in stale {
            if !layer.is_foreign_index(index) && layer.exclude(index) {
                report.stale += 1;
            }
        }
        for (owner, key) in refused {
            if let Ok(Some(entry)) = layer.image.find(owner, key)
                && !layer.is_foreign_index(entry.index())
                && layer.exclude(entry.index())
            {
                report.unverified += 1;
            }
        }

        for owner in layer.owners.iter().filter(|o| !o.foreign) {
            let memory = writer.residency.of_owner(&owner.digest);
            if !memory.is_empty() {
                report.duplicate += self.exclude_memory_duplicates(&layer, owner, memory, now);
            }
            for (_, earlier) in self.layers.iter() {
                report.duplicate += exclude_layer_duplicates(&layer, owner, earlier, now);
            }
        }

        report.inserted =
            total - report.foreign_owner - report.stale - report.unverified - report.duplicate;
        self.layers.push(layer);
        count_merge(&self.counters, &report);
        drop(writer);
        tracing::debug!(world = now, %report, "image merged");
        report
    }

    /// Excludes entries of `owner` in `layer` that have a valid in-memory
    /// entry (`memory`: the owner's resident entries); returns how many it
    /// excluded. An evicted entry is no duplicate: the image serves it.
    fn exclude_memory_duplicates(
        &self,
        layer: &Layer,
        owner: &LayerOwner,
        memory: &[Arc<Instance>],
        now: u64,
    ) -> u64 {
        let mut excluded = 0;
        if memory.len() <= owner.entries.len() {
            for instance in memory {
                if !instance.is_valid_in(now) {
                    continue;
                }
                if let Ok(Some(entry)) = layer.image.find(&owner.digest, instance.key.digest())
                    && layer.exclude(entry.index())
                {
                    excluded += 1;
                }
            }
        } else {
            for index in owner.entries.clone() {
                if layer.is_excluded(index) {
                    continue;
                }
                let Ok(entry) = layer.image.entry(index) else {
                    continue;
                };
                let key = Key::from_digest(entry.key());
                if self.find_memory(now, &owner.digest, &key).is_some() && layer.exclude(index) {
                    excluded += 1;
                }
            }
        }
        excluded
    }
}

/// Adds a merge's report to the cache's counters.
fn count_merge(counters: &Counters, report: &MergeReport) {
    bump(&counters.images_merged);
    add(&counters.merge_inserted, report.inserted);
    add(&counters.merge_duplicate, report.duplicate);
    add(&counters.merge_stale, report.stale);
    add(&counters.merge_foreign_owner, report.foreign_owner);
}

/// A name for an image in reports: its producer, if it has one.
fn image_source(image: &Image) -> String {
    let meta = image.meta();
    if meta.producer_name.is_empty() {
        "image".to_owned()
    } else {
        format!("image of {} {}", meta.producer_name, meta.producer_version)
    }
}

/// Excludes entries of `owner` in `layer` that have a valid entry in
/// `earlier`; returns how many it excluded.
fn exclude_layer_duplicates(layer: &Layer, owner: &LayerOwner, earlier: &Layer, now: u64) -> u64 {
    let Some(theirs) = earlier.owner(&owner.digest) else {
        return 0;
    };
    if theirs.foreign {
        return 0;
    }
    let mut excluded = 0;
    if theirs.entries.len() <= owner.entries.len() {
        for index in theirs.entries.clone() {
            let Some(entry) = earlier.valid_entry(index, now) else {
                continue;
            };
            if let Ok(Some(mine)) = layer.image.find(&owner.digest, &entry.key())
                && layer.exclude(mine.index())
            {
                excluded += 1;
            }
        }
    } else {
        for index in owner.entries.clone() {
            if layer.is_excluded(index) {
                continue;
            }
            let Ok(mine) = layer.image.entry(index) else {
                continue;
            };
            if let Ok(Some(entry)) = earlier.image.find(&owner.digest, &mine.key())
                && earlier.is_valid_in(&entry, now)
                && layer.exclude(index)
            {
                excluded += 1;
            }
        }
    }
    excluded
}
