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
///
/// It runs as named phases, each with a typed result: [`survey`] (garbage
/// removed, segments opened), [`plan`] (which segments merge), then, when
/// there is work, [`Selection::split`] (merged or kept), [`gather`] (the
/// entries to write and every entry's stamp), [`evict`] (over the cap),
/// [`write_outputs`] (published), [`retire`] (the merged and evicted
/// segments removed, the stamps rewritten).
pub(crate) fn compact(
    dir: &Dir,
    config: &DiskConfig,
    scope: Scope,
    damaged: &HashSet<String>,
) -> Result<GcReport, Error> {
    let survey = survey(dir)?;
    let mut report = GcReport {
        segments_before: survey.segments_before,
        bytes_before: survey.bytes_before,
        temp_files_removed: survey.temp_files_removed,
        corrupt_segments_removed: survey.corrupt_segments_removed,
        ..GcReport::default()
    };
    let stamps_bytes = survey.stamps_bytes;
    let total: u64 = survey.segments.iter().map(|s| s.bytes).sum::<u64>() + stamps_bytes;
    let over_cap = total > config.max_bytes;
    let plan = plan(dir, survey.segments, config, scope, over_cap, damaged)?;
    report.corrupt_segments_removed += plan.damaged_signed_removed;

    let entries: usize = plan.groups.iter().flatten().map(|s| s.image.len()).sum();
    let rewrite_stamps = stamps::bloated(stamps_bytes, entries);
    if !plan.merges_any() && !rewrite_stamps && !over_cap {
        if report.temp_files_removed + report.corrupt_segments_removed > 0 {
            dir.sync().map_err(io("sync", dir.path()))?;
        }
        let kept = plan.groups.iter().flatten().chain(&plan.signed);
        report.segments_after = kept.clone().count();
        report.bytes_after = kept.clone().map(|s| s.bytes).sum::<u64>() + stamps_bytes;
        report.entries = distinct_entries(kept);
        return Ok(report);
    }

    let recorded = stamps::read(dir).unwrap_or_default();
    let mut selection = Selection::split(plan);
    let mut gathered = gather(&selection, &recorded, &survey.published, &mut report);
    let evicted_signed = if over_cap {
        evict(
            &selection,
            &mut gathered,
            config,
            &recorded,
            &survey.published,
            &mut report,
        )
    } else {
        Vec::new()
    };
    let outputs = write_outputs(dir, &selection, gathered.candidates)?;
    retire(dir, &mut selection, &evicted_signed, outputs.replaced_base)?;
    let stamps_path = dir.path_of(stamps::STAMPS_FILE);
    stamps::rewrite(dir, &gathered.stamps_after).map_err(io("rewrite", &stamps_path))?;

    report.segments_merged = selection.merged();
    report.segments_after = selection.keeping.len() + outputs.count;
    report.entries = gathered.stamps_after.len();
    report.bytes_after = selection.keeping.iter().map(|s| s.bytes).sum::<u64>()
        + outputs.bytes
        + (gathered.stamps_after.len() * RECORD_BYTES) as u64;
    Ok(report)
}

/// What [`survey`] found: the segments that open, and what it removed.
struct Survey {
    /// Every segment that opened.
    segments: Vec<Segment>,
    /// When each segment was published (ms), by name: the recency of its
    /// entries without a stamp.
    published: HashMap<String, u64>,
    /// The stamps file's length.
    stamps_bytes: u64,
    /// Segments listed, before anything was removed.
    segments_before: usize,
    /// Their bytes and the stamps file's.
    bytes_before: u64,
    /// Temporary files removed.
    temp_files_removed: usize,
    /// Segments that did not open, removed.
    corrupt_segments_removed: usize,
}

/// Phase 1: lists `dir`, removes temporary files and segments that do not
/// open (under the exclusive lock nobody is writing, so they are garbage),
/// and opens the others.
fn survey(dir: &Dir) -> Result<Survey, Error> {
    let listing = Listing::read(dir).map_err(io("list", dir.path()))?;
    let stamps_bytes = stamps::file_len(dir);
    let mut survey = Survey {
        segments: Vec::new(),
        published: listing
            .segments
            .iter()
            .map(|f| (f.name.clone(), f.modified_ms))
            .collect(),
        stamps_bytes,
        segments_before: listing.segments.len(),
        bytes_before: listing.segment_bytes() + stamps_bytes,
        temp_files_removed: 0,
        corrupt_segments_removed: 0,
    };
    for temp in &listing.temp_files {
        dir.remove(&temp.name)
            .map_err(io("remove", &dir.path_of(&temp.name)))?;
        survey.temp_files_removed += 1;
    }
    for file in &listing.segments {
        match Segment::open(dir, &file.name) {
            Ok(segment) => survey.segments.push(segment),
            Err(err) => {
                tracing::debug!(segment = %file.name, error = %err, "removing unreadable disk-cache segment");
                dir.remove(&file.name)
                    .map_err(io("remove", &dir.path_of(&file.name)))?;
                survey.corrupt_segments_removed += 1;
            }
        }
    }
    Ok(survey)
}

/// When `segment` was published (ms; 0 if unknown).
fn published_ms(published: &HashMap<String, u64>, segment: &Segment) -> u64 {
    published.get(&segment.name).copied().unwrap_or(0)
}

/// What [`plan`] decided: the segments by group, and which of each group
/// merge.
struct Plan {
    /// Signed segments, kept whole (never merged).
    signed: Vec<Segment>,
    /// Unsigned segments by group ([`COMPILED`], [`RECEIVED`]).
    groups: [Vec<Segment>; 2],
    /// Per group, per segment: merged.
    merges: [Vec<bool>; 2],
    /// Damaged signed segments, removed.
    damaged_signed_removed: usize,
}

impl Plan {
    /// Whether any segment is merged (or rewritten alone).
    fn merges_any(&self) -> bool {
        self.merges.iter().flatten().any(|&m| m)
    }
}

/// Phase 2: sorts `segments` into signed ones (a damaged one is removed)
/// and the groups their labels record, and chooses in each group what to
/// merge: two or more segments, or one alone (`gc`, over the cap, or a
/// damaged one); otherwise nothing.
fn plan(
    dir: &Dir,
    segments: Vec<Segment>,
    config: &DiskConfig,
    scope: Scope,
    over_cap: bool,
    damaged: &HashSet<String>,
) -> Result<Plan, Error> {
    let mut signed: Vec<Segment> = Vec::new();
    let mut groups: [Vec<Segment>; 2] = [Vec::new(), Vec::new()];
    let mut damaged_signed_removed = 0;
    for s in segments {
        match merge_class(&s) {
            None if damaged.contains(&s.name) => {
                dir.remove(&s.name)
                    .map_err(io("remove", &dir.path_of(&s.name)))?;
                damaged_signed_removed += 1;
            }
            None => signed.push(s),
            Some(class) => groups[class].push(s),
        }
    }
    let mut merges: [Vec<bool>; 2] =
        [0, 1].map(|class| merge_flags(&groups[class], config, scope, over_cap, damaged));
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
    Ok(Plan {
        signed,
        groups,
        merges,
        damaged_signed_removed,
    })
}

/// The segments merged, per group, and those kept.
struct Selection {
    /// Merged, per group.
    merging: [Vec<Segment>; 2],
    /// Kept: unsigned ones first, then the signed ones.
    keeping: Vec<Segment>,
    /// The bytes of the unsigned segments kept.
    plain_kept_bytes: u64,
}

impl Selection {
    /// Phase 3: splits `plan`'s segments into merged and kept.
    fn split(plan: Plan) -> Selection {
        let mut merging: [Vec<Segment>; 2] = [Vec::new(), Vec::new()];
        let mut keeping: Vec<Segment> = Vec::new();
        for (class, (group, merge)) in plan.groups.into_iter().zip(plan.merges).enumerate() {
            for (s, m) in group.into_iter().zip(merge) {
                if m {
                    merging[class].push(s);
                } else {
                    keeping.push(s);
                }
            }
        }
        let plain_kept_bytes: u64 = keeping.iter().map(|s| s.bytes).sum();
        keeping.extend(plan.signed);
        Selection {
            merging,
            keeping,
            plain_kept_bytes,
        }
    }

    /// How many segments are merged.
    fn merged(&self) -> usize {
        self.merging[COMPILED].len() + self.merging[RECEIVED].len()
    }
}

/// An entry to write: its group, its data and its stamp.
type Candidate = (usize, EntryData, u64);

/// What [`gather`] collected.
struct Gathered {
    /// Every entry that stays (kept or written), with its stamp.
    stamps_after: HashMap<EntryId, u64>,
    /// The entries of the merged segments to write.
    candidates: Vec<Candidate>,
}

/// Phase 4: the entries of the kept segments, with their stamps; then
/// those of the merged segments, first copy wins within a group (never
/// across groups), payloads re-checked.
fn gather(
    selection: &Selection,
    recorded: &HashMap<EntryId, u64>,
    published: &HashMap<String, u64>,
    report: &mut GcReport,
) -> Gathered {
    let stamp_of = |id: &EntryId, s: &Segment| {
        recorded
            .get(id)
            .copied()
            .unwrap_or_else(|| published_ms(published, s))
    };
    let mut stamps_after: HashMap<EntryId, u64> = HashMap::new();
    let mut seen: [HashSet<EntryId>; 2] = [HashSet::new(), HashSet::new()];
    for s in &selection.keeping {
        for i in 0..s.image.len() {
            if let Ok(entry) = s.image.entry(i) {
                let id = (entry.owner(), entry.key());
                stamps_after.entry(id).or_insert(stamp_of(&id, s));
                if let Some(class) = merge_class(s) {
                    seen[class].insert(id);
                }
            }
        }
    }
    let mut candidates: Vec<Candidate> = Vec::new();
    for (class, group) in selection.merging.iter().enumerate() {
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
                        let stamp = stamp_of(&id, s);
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
    Gathered {
        stamps_after,
        candidates,
    }
}

/// Phase 5, over the cap: the entries to write and the signed segments,
/// most recently used first, are kept while they fit in 90 % of the cap;
/// the others are left out of `gathered`. Returns the signed segments
/// evicted (removed by [`retire`]).
fn evict(
    selection: &Selection,
    gathered: &mut Gathered,
    config: &DiskConfig,
    recorded: &HashMap<EntryId, u64>,
    published: &HashMap<String, u64>,
    report: &mut GcReport,
) -> Vec<String> {
    let keeping = &selection.keeping;
    let budget = (config.max_bytes / 10 * 9).saturating_sub(selection.plain_kept_bytes);
    let mut units: Vec<(u64, u64, Option<usize>)> = gathered
        .candidates
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
                .unwrap_or(published_ms(published, s));
            units.push((stamp, s.bytes + RECORD_BYTES as u64, Some(i)));
        }
    }
    let mut order: Vec<usize> = (0..units.len()).collect();
    order.sort_by_key(|&u| std::cmp::Reverse(units[u].0));
    let mut cost = 0u64;
    let mut evict_entry = vec![false; gathered.candidates.len()];
    let mut evicted_signed: Vec<String> = Vec::new();
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
    let mut kept = Vec::with_capacity(gathered.candidates.len());
    for ((class, data, stamp), evict) in gathered.candidates.drain(..).zip(evict_entry) {
        if evict {
            gathered.stamps_after.remove(&(data.owner, data.key));
            report.entries_evicted += 1;
        } else {
            kept.push((class, data, stamp));
        }
    }
    gathered.candidates = kept;
    for s in keeping.iter().filter(|s| evicted_signed.contains(&s.name)) {
        if let Ok(entry) = s.image.entry(0) {
            gathered.stamps_after.remove(&(entry.owner(), entry.key()));
        }
        report.entries_evicted += 1;
    }
    evicted_signed
}

/// What [`write_outputs`] published.
struct Outputs {
    /// Segments published.
    count: usize,
    /// Their bytes.
    bytes: u64,
    /// Whether the compiled output replaced the base segment.
    replaced_base: bool,
}

/// Phase 6: one output per group: received entries first (never the base),
/// then compiled ones, which become the base segment when they merge the
/// base, or when there is no base left; otherwise a segment like any
/// other.
fn write_outputs(
    dir: &Dir,
    selection: &Selection,
    candidates: Vec<Candidate>,
) -> Result<Outputs, Error> {
    let received_from = received_from(&selection.merging[RECEIVED]);
    let mut writers = [
        ImageWriter::new(segment_meta(&Provenance::Compiled)),
        ImageWriter::new(segment_meta(&Provenance::Unsigned {
            from: received_from,
        })),
    ];
    for (class, data, _) in candidates {
        writers[class].push(data);
    }
    let mut outputs = Outputs {
        count: 0,
        bytes: 0,
        replaced_base: false,
    };
    let [compiled_writer, received_writer] = writers;
    if !received_writer.is_empty() {
        let bytes = received_writer.to_bytes()?;
        segment::publish(dir, &bytes, received_writer.len(), SegmentClass::Received)
            .map_err(io("publish a segment in", dir.path()))?;
        outputs.bytes += bytes.len() as u64;
        outputs.count += 1;
    }
    let to_base = !selection
        .keeping
        .iter()
        .any(|s| s.name == segment::BASE_SEGMENT);
    if !compiled_writer.is_empty() {
        let bytes = compiled_writer.to_bytes()?;
        if to_base {
            segment::publish_base(dir, &bytes).map_err(io("publish a segment in", dir.path()))?;
            outputs.replaced_base = true;
        } else {
            segment::publish(dir, &bytes, compiled_writer.len(), SegmentClass::Compiled)
                .map_err(io("publish a segment in", dir.path()))?;
        }
        outputs.bytes += bytes.len() as u64;
        outputs.count += 1;
    }
    Ok(outputs)
}

/// Phase 7: every entry kept is now in a published segment, so the merged
/// segments go (the base, if merged, was replaced by the rename), and the
/// evicted signed ones; the directory is synced.
fn retire(
    dir: &Dir,
    selection: &mut Selection,
    evicted_signed: &[String],
    replaced_base: bool,
) -> Result<(), Error> {
    for s in selection.merging.iter().flatten() {
        if replaced_base && s.name == segment::BASE_SEGMENT {
            continue;
        }
        dir.remove(&s.name)
            .map_err(io("remove", &dir.path_of(&s.name)))?;
    }
    for name in evicted_signed {
        dir.remove(name).map_err(io("remove", &dir.path_of(name)))?;
    }
    selection
        .keeping
        .retain(|s| !evicted_signed.contains(&s.name));
    dir.sync().map_err(io("sync", dir.path()))
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
