//! Compaction, eviction and clean-up, under the exclusive directory lock.
//!
//! Compaction merges segments into one new segment (first entry wins,
//! payloads re-checked on the way), publishes it, and only then deletes the
//! merged segments. The new segment is the base segment (replacing the old
//! base atomically by a rename) when the base is among those merged or
//! there is none yet: a reader or a crash at any moment finds every entry in
//! at least one published segment. Over the cap, every segment is merged and
//! the least recently used entries are left out until the total is 90 % of
//! the cap (the headroom keeps the next few stores from evicting again).
//! Segments that do not open and temporary files are removed: under the
//! exclusive lock nobody is writing, so they are garbage.
//!
//! Signed segments (remote entries written through with their signatures,
//! `seg-sig*`) are never merged: a merge would drop the signature that
//! readers with trusted keys check again. Over the cap they are evicted
//! whole, in the same least-recently-used order as the entries merged; a
//! damaged one is removed.
//!
//! Provenance is kept apart: segments of entries this user's processes
//! compiled are merged into the base (or a compiled segment), segments of
//! entries received unsigned (or of unknown provenance, stored before it
//! was recorded) only among themselves, into a `seg-ext-…` segment whose
//! labels say so. An entry in both keeps both copies; the first copy wins
//! only within a kind.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use super::dir::Dir;

use kiln_image::{EntryData, ImageMeta, ImageWriter};

use super::config::DiskConfig;
use super::report::GcReport;
use super::segment::{self, Listing, Segment, SegmentClass};
use super::stamps::{self, EntryId, RECORD_BYTES};
use crate::error::Error;
use crate::trust::Provenance;

/// How much to compact.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// Only what is needed: merge small segments once there are too many,
    /// evict when over the cap, rewrite damaged segments.
    Needed,
    /// Everything (`gc`): merge all segments into one, evict when over the cap.
    All,
}

/// The image metadata of segments holding entries of `provenance` (its
/// labels record it: see [`Provenance::labels`]).
pub(crate) fn segment_meta(provenance: &Provenance) -> ImageMeta {
    let mut meta = ImageMeta::new("kiln-disk-cache", env!("CARGO_PKG_VERSION"));
    meta.labels.extend(provenance.labels());
    meta
}

/// An upper estimate of the bytes `entry` takes in a segment, with its stamp.
pub(crate) fn entry_cost(entry: &EntryData) -> u64 {
    const OVERHEAD: usize = 512;
    let artifacts: usize = entry
        .artifacts
        .iter()
        .map(|a| a.bytes.len() + 64 + a.entry_points.iter().map(|e| e.len() + 8).sum::<usize>())
        .sum();
    let deps: usize = entry.deps.iter().map(|d| d.name.len() + 48).sum();
    (OVERHEAD + RECORD_BYTES + entry.name.len() + entry.owner_label.len() + artifacts + deps) as u64
}

/// How much larger than the segments chosen so far the next smallest may
/// be and still be merged with them (see [`small_segments`]).
const MERGE_RATIO: u64 = 4;

/// Which segments to merge in [`Scope::Needed`] when there are more than
/// `compact_after`: the two smallest, and then the next smallest as long as
/// it is at most [`MERGE_RATIO`] times the sum of those chosen. Large
/// segments (the base above all) are rewritten rarely: merging is
/// geometric, like an LSM tree's: with the default threshold, 1,000 stores
/// of one entry each rewrite an entry 13 times on average, 10,000 stores 64
/// times (`compaction_keeps_three_files_at_a_logarithmic_cost`).
fn small_segments(sizes: &[u64], compact_after: usize) -> Vec<usize> {
    if sizes.len() <= compact_after.max(1) {
        return Vec::new();
    }
    let mut order: Vec<usize> = (0..sizes.len()).collect();
    order.sort_by_key(|&i| sizes[i]);
    let mut chosen = Vec::new();
    let mut sum = 0u64;
    for i in order {
        if chosen.len() >= 2 && sizes[i] > sum.saturating_mul(MERGE_RATIO) {
            break;
        }
        chosen.push(i);
        sum = sum.saturating_add(sizes[i]);
    }
    chosen
}

/// Compacts `dir`. The caller holds the directory lock exclusive.
/// `damaged` names segments in which a payload failed its checksum.
///
/// Segments of compiled entries and segments of received ones
/// ([`SegmentClass`]) are merged apart, each into its own output, so that
/// no entry changes provenance; signed segments are never merged.
pub(crate) fn compact(
    dir: &Dir,
    config: &DiskConfig,
    scope: Scope,
    damaged: &HashSet<String>,
) -> Result<GcReport, Error> {
    let listing = Listing::read(dir).map_err(io("list", dir.path()))?;
    let stamps_path = dir.path_of(stamps::STAMPS_FILE);
    let stamps_bytes = stamps::file_len(dir);
    let mut report = GcReport {
        segments_before: listing.segments.len(),
        bytes_before: listing.segment_bytes() + stamps_bytes,
        ..GcReport::default()
    };

    for temp in &listing.temp_files {
        dir.remove(&temp.name)
            .map_err(io("remove", &dir.path_of(&temp.name)))?;
        report.temp_files_removed += 1;
    }
    // When each segment was published: the recency of entries without a stamp.
    let published: HashMap<&str, u64> = listing
        .segments
        .iter()
        .map(|f| (f.name.as_str(), f.modified_ms))
        .collect();
    let published_ms = |s: &Segment| published.get(s.name.as_str()).copied().unwrap_or(0);
    let mut segments = Vec::new();
    for file in &listing.segments {
        match Segment::open(dir, &file.name) {
            Ok(segment) => segments.push(segment),
            Err(err) => {
                tracing::debug!(segment = %file.name, error = %err, "removing unreadable disk-cache segment");
                dir.remove(&file.name)
                    .map_err(io("remove", &dir.path_of(&file.name)))?;
                report.corrupt_segments_removed += 1;
            }
        }
    }

    let total: u64 = segments.iter().map(|s| s.bytes).sum::<u64>() + stamps_bytes;
    let over_cap = total > config.max_bytes;
    // Signed segments are kept whole (removed when damaged); the others
    // are grouped by the provenance their labels record.
    let mut signed: Vec<Segment> = Vec::new();
    let mut groups: [Vec<Segment>; 2] = [Vec::new(), Vec::new()];
    for s in segments {
        match merge_class(&s) {
            None if damaged.contains(&s.name) => {
                dir.remove(&s.name)
                    .map_err(io("remove", &dir.path_of(&s.name)))?;
                report.corrupt_segments_removed += 1;
            }
            None => signed.push(s),
            Some(class) => groups[class].push(s),
        }
    }
    let mut merges: Vec<Vec<bool>> = groups
        .iter()
        .map(|group| merge_flags(group, config, scope, over_cap, damaged))
        .collect();
    // A group merges two or more segments, or rewrites one alone (`gc`,
    // over the cap, or a damaged one); otherwise it keeps them all.
    for (group, merge) in groups.iter().zip(&mut merges) {
        let chosen = merge.iter().filter(|&&m| m).count();
        let rewrite_one = chosen == 1
            && (scope == Scope::All
                || over_cap
                || group
                    .iter()
                    .zip(merge.iter())
                    .any(|(s, &m)| m && damaged.contains(&s.name)));
        if chosen < 2 && !rewrite_one {
            merge.iter_mut().for_each(|m| *m = false);
        }
    }
    let active = merges.iter().flatten().any(|&m| m);
    let entries: usize = groups.iter().flatten().map(|s| s.image.len()).sum();
    let rewrite_stamps = stamps::bloated(stamps_bytes, entries);
    if !active && !rewrite_stamps && !over_cap {
        if report.temp_files_removed + report.corrupt_segments_removed > 0 {
            dir.sync().map_err(io("sync", dir.path()))?;
        }
        let kept = groups.iter().flatten().chain(&signed);
        report.segments_after = kept.clone().count();
        report.bytes_after = kept.clone().map(|s| s.bytes).sum::<u64>() + stamps_bytes;
        report.entries = distinct_entries(kept);
        return Ok(report);
    }

    let recorded = stamps::read(dir).unwrap_or_default();
    let mut merging: [Vec<Segment>; 2] = [Vec::new(), Vec::new()];
    let mut keeping: Vec<Segment> = Vec::new();
    for (class, (group, merge)) in groups.into_iter().zip(merges).enumerate() {
        for (s, m) in group.into_iter().zip(merge) {
            if m {
                merging[class].push(s);
            } else {
                keeping.push(s);
            }
        }
    }
    let plain_kept_bytes: u64 = keeping.iter().map(|s| s.bytes).sum();
    keeping.extend(signed);

    // Entries of the segments that stay, with their stamps; per class, the
    // entries seen (first copy wins within a class, never across classes).
    let mut stamps_after: HashMap<EntryId, u64> = HashMap::new();
    let mut seen: [HashSet<EntryId>; 2] = [HashSet::new(), HashSet::new()];
    for s in &keeping {
        for i in 0..s.image.len() {
            if let Ok(entry) = s.image.entry(i) {
                let id = (entry.owner(), entry.key());
                let stamp = recorded.get(&id).copied().unwrap_or(published_ms(s));
                stamps_after.entry(id).or_insert(stamp);
                if let Some(class) = merge_class(s) {
                    seen[class].insert(id);
                }
            }
        }
    }

    // Entries of the merged segments: first copy wins, payloads re-checked.
    let mut candidates: Vec<(usize, EntryData, u64)> = Vec::new();
    for (class, group) in merging.iter().enumerate() {
        for s in group {
            for i in 0..s.image.len() {
                let Ok(entry) = s.image.entry(i) else {
                    report.corrupt_entries_dropped += 1;
                    continue;
                };
                let id = (entry.owner(), entry.key());
                if !seen[class].insert(id) {
                    report.duplicates_dropped += 1;
                    continue;
                }
                match entry.to_data() {
                    Ok(data) => {
                        let stamp = recorded.get(&id).copied().unwrap_or(published_ms(s));
                        stamps_after.entry(id).or_insert(stamp);
                        candidates.push((class, data, stamp));
                    }
                    Err(err) => {
                        tracing::debug!(segment = %s.name, entry = i, error = %err, "dropping corrupt disk-cache entry");
                        report.corrupt_entries_dropped += 1;
                    }
                }
            }
        }
    }

    let mut evicted_signed: Vec<String> = Vec::new();
    if over_cap {
        // Entries to merge and signed segments, most recently used first,
        // kept while they fit in 90 % of the cap.
        let budget = (config.max_bytes / 10 * 9).saturating_sub(plain_kept_bytes);
        let mut units: Vec<(u64, u64, Option<usize>)> = candidates
            .iter()
            .map(|(_, data, stamp)| (*stamp, entry_cost(data), None))
            .collect();
        for (i, s) in keeping.iter().enumerate() {
            if segment::is_signed_name(&s.name) {
                let stamp = s
                    .image
                    .entry(0)
                    .ok()
                    .and_then(|e| recorded.get(&(e.owner(), e.key())).copied())
                    .unwrap_or(published_ms(s));
                units.push((stamp, s.bytes + RECORD_BYTES as u64, Some(i)));
            }
        }
        let mut order: Vec<usize> = (0..units.len()).collect();
        order.sort_by_key(|&u| std::cmp::Reverse(units[u].0));
        let mut cost = 0u64;
        let mut evict_entry = vec![false; candidates.len()];
        for u in order {
            cost = cost.saturating_add(units[u].1);
            if cost <= budget {
                continue;
            }
            match units[u].2 {
                None => evict_entry[u] = true,
                Some(i) => evicted_signed.push(keeping[i].name.clone()),
            }
        }
        let mut kept = Vec::with_capacity(candidates.len());
        for ((class, data, stamp), evict) in candidates.drain(..).zip(evict_entry) {
            if evict {
                stamps_after.remove(&(data.owner, data.key));
                report.entries_evicted += 1;
            } else {
                kept.push((class, data, stamp));
            }
        }
        candidates = kept;
        for s in keeping.iter().filter(|s| evicted_signed.contains(&s.name)) {
            if let Ok(entry) = s.image.entry(0) {
                stamps_after.remove(&(entry.owner(), entry.key()));
            }
            report.entries_evicted += 1;
        }
    }

    // One output per class: received entries first (never the base), then
    // compiled ones, which become the base segment when they merge the
    // base, or when there is no base left; otherwise a segment like any
    // other.
    let received_from = received_from(&merging[RECEIVED]);
    let mut writers = [
        ImageWriter::new(segment_meta(&Provenance::Compiled)),
        ImageWriter::new(segment_meta(&Provenance::Unsigned {
            from: received_from,
        })),
    ];
    for (class, data, _) in candidates {
        writers[class].push(data);
    }
    let mut new_bytes = 0;
    let mut outputs = 0;
    let [compiled_writer, received_writer] = writers;
    if !received_writer.is_empty() {
        let bytes = received_writer.to_bytes()?;
        segment::publish(dir, &bytes, received_writer.len(), SegmentClass::Received)
            .map_err(io("publish a segment in", dir.path()))?;
        new_bytes += bytes.len() as u64;
        outputs += 1;
    }
    let to_base = !keeping.iter().any(|s| s.name == segment::BASE_SEGMENT);
    let mut replaced_base = false;
    if !compiled_writer.is_empty() {
        let bytes = compiled_writer.to_bytes()?;
        if to_base {
            segment::publish_base(dir, &bytes).map_err(io("publish a segment in", dir.path()))?;
            replaced_base = true;
        } else {
            segment::publish(dir, &bytes, compiled_writer.len(), SegmentClass::Compiled)
                .map_err(io("publish a segment in", dir.path()))?;
        }
        new_bytes += bytes.len() as u64;
        outputs += 1;
    }
    // Every entry kept is now in a published segment: the merged ones can go
    // (the base, if merged, was replaced by the rename above).
    let merged = merging[COMPILED].len() + merging[RECEIVED].len();
    for s in merging.iter().flatten() {
        if replaced_base && s.name == segment::BASE_SEGMENT {
            continue;
        }
        dir.remove(&s.name)
            .map_err(io("remove", &dir.path_of(&s.name)))?;
    }
    for name in &evicted_signed {
        dir.remove(name).map_err(io("remove", &dir.path_of(name)))?;
    }
    keeping.retain(|s| !evicted_signed.contains(&s.name));
    dir.sync().map_err(io("sync", dir.path()))?;
    stamps::rewrite(dir, &stamps_after).map_err(io("rewrite", &stamps_path))?;

    report.segments_merged = merged;
    report.segments_after = keeping.len() + outputs;
    report.entries = stamps_after.len();
    report.bytes_after = keeping.iter().map(|s| s.bytes).sum::<u64>()
        + new_bytes
        + (stamps_after.len() * RECORD_BYTES) as u64;
    Ok(report)
}

/// The group of compiled entries in [`compact`]'s groups.
const COMPILED: usize = 0;
/// The group of received entries.
const RECEIVED: usize = 1;

/// Which group `segment` merges with: [`COMPILED`] only for a segment named
/// as compiled whose labels record [`Provenance::Compiled`]; [`RECEIVED`]
/// for every other unsigned one (received unsigned, or of unknown
/// provenance: stored before provenance was recorded); `None` for a signed
/// segment, which is never merged.
fn merge_class(segment: &Segment) -> Option<usize> {
    match (SegmentClass::of_name(&segment.name), segment.provenance()) {
        (SegmentClass::Signed, _) => None,
        (SegmentClass::Compiled, Provenance::Compiled) => Some(COMPILED),
        _ => Some(RECEIVED),
    }
}

/// Which segments of one group to merge: all of them in [`Scope::All`] or
/// over the cap; otherwise the small ones once there are too many, and the
/// damaged ones.
fn merge_flags(
    group: &[Segment],
    config: &DiskConfig,
    scope: Scope,
    over_cap: bool,
    damaged: &HashSet<String>,
) -> Vec<bool> {
    if scope == Scope::All || over_cap {
        return vec![true; group.len()];
    }
    let sizes: Vec<u64> = group.iter().map(|s| s.bytes).collect();
    let mut merge = vec![false; group.len()];
    for i in small_segments(&sizes, config.compact_after) {
        merge[i] = true;
    }
    for (i, s) in group.iter().enumerate() {
        merge[i] |= damaged.contains(&s.name);
    }
    merge
}

/// The tiers the received entries of `segments` came from, for the merged
/// segment's label: their names, sorted, each once, comma-separated
/// (`unknown` for segments stored before provenance was recorded).
fn received_from(segments: &[Segment]) -> String {
    let mut from: Vec<String> = segments
        .iter()
        .map(|s| match s.provenance() {
            Provenance::Unsigned { from } => from.clone(),
            _ => "unknown".to_owned(),
        })
        .collect();
    from.sort();
    from.dedup();
    let mut text = from.join(",");
    text.truncate(MAX_FROM);
    text
}

/// The longest `from` label a merged segment records.
const MAX_FROM: usize = 200;

/// The error of `action` on `path`.
fn io(action: &'static str, path: &Path) -> impl Fn(std::io::Error) -> Error {
    let path = path.to_path_buf();
    move |source| Error::DiskIo {
        action,
        path: path.clone(),
        source,
    }
}

/// Distinct `(owner, key)` pairs in `segments`.
pub(crate) fn distinct_entries<'a>(segments: impl Iterator<Item = &'a Segment>) -> usize {
    let mut ids = HashSet::new();
    for s in segments {
        for i in 0..s.image.len() {
            if let Ok(entry) = s.image.entry(i) {
                ids.insert((entry.owner(), entry.key()));
            }
        }
    }
    ids.len()
}

#[cfg(test)]
mod tests {
    use super::small_segments;

    #[test]
    fn nothing_is_merged_at_or_below_the_threshold() {
        assert!(small_segments(&[1, 1, 1], 3).is_empty());
    }

    #[test]
    fn small_segments_merge_and_a_large_one_stays() {
        let mut chosen = small_segments(&[1000, 3, 2, 4, 1], 4);
        chosen.sort();
        assert_eq!(chosen, [1, 2, 3, 4]);
    }

    #[test]
    fn similar_sizes_all_merge() {
        assert_eq!(small_segments(&[5, 6, 7, 8, 9], 4).len(), 5);
    }

    /// Stores of one equal-sized entry each, compacted as `put` does:
    /// returns the most segments seen after a store and the bytes written
    /// per byte stored.
    fn simulate(stores: u64, compact_after: usize) -> (usize, f64) {
        let mut sizes: Vec<u64> = Vec::new();
        let (mut written, mut most) = (0u64, 0usize);
        for _ in 0..stores {
            sizes.push(1);
            written += 1;
            let chosen = small_segments(&sizes, compact_after);
            if !chosen.is_empty() {
                let merged: u64 = chosen.iter().map(|&i| sizes[i]).sum();
                written += merged;
                let mut kept: Vec<u64> = (0..sizes.len())
                    .filter(|i| !chosen.contains(i))
                    .map(|i| sizes[i])
                    .collect();
                kept.push(merged);
                sizes = kept;
            }
            most = most.max(sizes.len());
        }
        (most, written as f64 / stores as f64)
    }

    #[test]
    fn compaction_keeps_three_files_at_a_logarithmic_cost() {
        let after = crate::disk::config::DEFAULT_COMPACT_AFTER;
        for (stores, amplification) in [(11, 4.0), (1_000, 15.0), (10_000, 70.0)] {
            let (most, written) = simulate(stores, after);
            assert!(most <= 3, "{stores} stores: {most} segments");
            assert!(
                written <= amplification,
                "{stores} stores: {written:.1}× written"
            );
        }
    }
}
