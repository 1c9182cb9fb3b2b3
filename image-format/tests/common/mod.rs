//! Shared helpers for the kiln-image integration tests: sample entries and a
//! comparison of what an image returns against what was written. The
//! deterministic `Rng` and `leak_aligned` come from `kiln-test-support`.
#![allow(dead_code)]

pub mod counting;

use std::collections::BTreeMap;

use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, EntryRef, Image, ImageMeta, ImageWriter,
    ReadError,
};
use kiln_test_support::Rng;

/// The valid images the corpus is mutated from: 0, 1, 12 and 40 entries,
/// then 12 and 40 entries with their payloads compressed.
pub fn base_images() -> Vec<Vec<u8>> {
    let mut images = Vec::new();
    for (count, seed, compressed) in [
        (0, 0, false),
        (1, 41, false),
        (12, 42, false),
        (40, 43, false),
        (12, 44, true),
        (40, 45, true),
    ] {
        let mut writer = ImageWriter::new(if count == 0 {
            ImageMeta::default()
        } else {
            meta()
        });
        let mut entries = sample_entries(count, seed);
        if compressed {
            compressible(&mut entries);
        }
        for entry in entries {
            writer.push(entry);
        }
        images.push(if compressed {
            writer.to_compressed_bytes(3).unwrap()
        } else {
            writer.to_bytes().unwrap()
        });
    }
    images
}

/// One deterministic mutation of `base` (the corpus test and the memory
/// bound test replay the same sequence).
pub fn mutate(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = base.to_vec();
    let len = bytes.len();
    let at = |rng: &mut Rng| rng.below(len);
    match rng.below(8) {
        0 => {
            let bit = rng.below(len * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        1 => {
            let i = at(rng);
            bytes[i] = [0x00, 0xff, 0x7f, 0x80][rng.below(4)];
        }
        2 => {
            let start = at(rng);
            let end = (start + 1 + rng.below(64)).min(bytes.len());
            for byte in &mut bytes[start..end] {
                *byte = rng.next_u64() as u8;
            }
        }
        3 => bytes.truncate(at(rng)),
        4 => {
            let n = 1 + rng.below(128);
            let extra = rng.bytes(n);
            bytes.extend_from_slice(&extra);
        }
        5 => {
            // Overwrite a little-endian u32 with an extreme value: hits
            // lengths, offsets and counts.
            let i = at(rng).min(bytes.len().saturating_sub(4));
            let value = [0u32, 1, u32::MAX, u32::MAX / 2, 64, 0x8000_0000][rng.below(6)];
            bytes[i..i + 4].copy_from_slice(&value.to_le_bytes());
        }
        6 => {
            // Copy one chunk of the image over another.
            let (from, to) = (at(rng), at(rng));
            let n = (1 + rng.below(48))
                .min(bytes.len() - from)
                .min(bytes.len() - to);
            let chunk = bytes[from..from + n].to_vec();
            bytes[to..to + n].copy_from_slice(&chunk);
        }
        _ => {
            for _ in 0..1 + rng.below(8) {
                let bit = rng.below(len * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }
    bytes
}

pub fn meta() -> ImageMeta {
    let mut meta = ImageMeta::new("kiln-image-tests", "0.1.0");
    meta.labels.insert("crate".into(), "kernels".into());
    meta.labels.insert("profile".into(), "release".into());
    meta
}

/// Replaces every payload with bytes of the same length that compress as
/// code does (repeated text with a varying byte), so that a compressed
/// image of them holds zstd groups, not groups stored as is.
pub fn compressible(entries: &mut [EntryData]) {
    for (i, entry) in entries.iter_mut().enumerate() {
        for artifact in &mut entry.artifacts {
            let text = b"ld.global.f32 %f1, [%rd4]; ";
            artifact.bytes = (0..artifact.bytes.len())
                .map(|j| text[j % text.len()] ^ ((i + j / 97) % 7) as u8)
                .collect();
        }
    }
}

/// Two owners, `count` entries with varied deps, artifact kinds, entry
/// points and payload sizes (including empty payloads and several
/// artifacts per entry).
pub fn sample_entries(count: usize, seed: u64) -> Vec<EntryData> {
    let mut rng = Rng::new(seed);
    let owners = [
        (Digest::of(b"nvrtc 13.0 sm_90a"), "nvrtc 13.0 sm_90a -O3"),
        (Digest::of(b"nvrtc 13.0 sm_80"), "nvrtc 13.0 sm_80"),
    ];
    let kinds = [
        ArtifactKind::Ptx,
        ArtifactKind::Cubin,
        ArtifactKind::Fatbin,
        ArtifactKind::LtoIr,
        ArtifactKind::Object,
        ArtifactKind::Custom("spirv".into()),
    ];
    (0..count)
        .map(|i| {
            let (owner, owner_label) = owners[i % owners.len()];
            let deps = (0..i % 3)
                .map(|d| Dep {
                    name: format!("def_{}", (i + d) % 5),
                    fingerprint: Digest::of(format!("source v{}", (i + d) % 2).as_bytes()),
                })
                .collect();
            let artifacts = (0..1 + i % 3)
                .map(|a| {
                    let len = match (i + a) % 4 {
                        0 => 0,
                        1 => 1 + rng.below(40),
                        2 => 64,
                        _ => 100 + rng.below(300),
                    };
                    Artifact {
                        kind: kinds[(i + a) % kinds.len()].clone(),
                        entry_points: (0..a).map(|e| format!("kernel_{i}_{e}")).collect(),
                        bytes: rng.bytes(len),
                    }
                })
                .collect();
            EntryData {
                owner,
                owner_label: owner_label.into(),
                key: Digest::of(format!("key {i} {seed}").as_bytes()),
                name: format!("kernel_{i}<f{}>", 16 << (i % 3)),
                min_world: (i % 7) as u64,
                max_world: if i % 4 == 0 { 100 + i as u64 } else { u64::MAX },
                deps,
                artifacts,
            }
        })
        .collect()
}

/// `entries` in image order: sorted by (owner, key).
pub fn sorted(entries: &[EntryData]) -> Vec<EntryData> {
    let mut sorted = entries.to_vec();
    sorted.sort_by_key(|entry| (entry.owner, entry.key));
    sorted
}

/// Expected dependency groups: (name, fingerprint) -> entry indices, from
/// entries in image order.
pub fn expected_dep_groups(sorted: &[EntryData]) -> BTreeMap<(String, Digest), Vec<usize>> {
    let mut groups: BTreeMap<(String, Digest), Vec<usize>> = BTreeMap::new();
    for (index, entry) in sorted.iter().enumerate() {
        for dep in &entry.deps {
            let members = groups
                .entry((dep.name.clone(), dep.fingerprint))
                .or_default();
            if members.last() != Some(&index) {
                members.push(index);
            }
        }
    }
    groups
}

/// Result of reading one entry through the lazy checks.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    /// Every field and payload equals what was written.
    Equal,
    /// A check rejected the entry or one of its payloads.
    Rejected,
}

/// Reads every field and payload of `entry` and compares with `expected`.
/// Returns `Err(description)` if anything differs, i.e. if corrupt data was
/// returned instead of an error.
pub fn compare_entry(entry: &EntryRef<'_>, expected: &EntryData) -> Result<Read, String> {
    let fields = [
        ("owner", entry.owner() == expected.owner),
        ("owner label", entry.owner_label() == expected.owner_label),
        ("key", entry.key() == expected.key),
        ("name", entry.name() == expected.name),
        ("min_world", entry.min_world() == expected.min_world),
        ("max_world", entry.max_world() == expected.max_world),
        ("deps", entry.deps() == expected.deps),
        (
            "artifact count",
            entry.artifact_count() == expected.artifacts.len(),
        ),
    ];
    if let Some((field, _)) = fields.iter().find(|(_, equal)| !equal) {
        return Err(format!("entry {} returned a wrong {field}", entry.index()));
    }
    let mut rejected = false;
    for (artifact, written) in entry.artifacts().zip(&expected.artifacts) {
        if artifact.kind() != written.kind
            || artifact.entry_points() != written.entry_points
            || artifact.len() != written.bytes.len()
        {
            return Err(format!(
                "entry {} returned a wrong artifact descriptor",
                entry.index()
            ));
        }
        match artifact.bytes() {
            Ok(bytes) if bytes == written.bytes.as_slice() => {}
            Ok(_) => {
                return Err(format!(
                    "entry {} returned corrupt payload bytes",
                    entry.index()
                ));
            }
            Err(ReadError::PayloadChecksum { .. }) => rejected = true,
            Err(other) => return Err(format!("unexpected payload error {other}")),
        }
    }
    Ok(if rejected {
        Read::Rejected
    } else {
        Read::Equal
    })
}

/// Whether `error` is one of the ways an entry's first access rejects it
/// (its block, its layout, its checksum, its values).
pub fn rejects_entry(error: &ReadError) -> bool {
    matches!(
        error,
        ReadError::EntryChecksum { .. }
            | ReadError::EntryMalformed { .. }
            | ReadError::Overlap(_)
            | ReadError::OutOfRange { .. }
            | ReadError::IndexMalformed(_)
            | ReadError::DepNotIndexed { .. }
            | ReadError::EntryUnreachable { .. }
    )
}

/// Whether `error` is one of the ways the dependency index (its group
/// table, or a group's member list) is rejected.
pub fn rejects_dep_index(error: &ReadError) -> bool {
    matches!(
        error,
        ReadError::DepIndex(_) | ReadError::Overlap(_) | ReadError::OutOfRange { .. }
    )
}

/// Reads the whole image through the lazy checks and compares everything
/// with what was written. `Ok(true)` if some check rejected something,
/// `Ok(false)` if everything read back equal, `Err` if anything read back
/// different.
pub fn read_all_and_compare(
    image: &Image,
    sorted: &[EntryData],
    meta: &ImageMeta,
) -> Result<bool, String> {
    if image.len() != sorted.len() {
        return Err(format!("{} entries, {} written", image.len(), sorted.len()));
    }
    if &image.meta() != meta {
        return Err("metadata differs".into());
    }
    let mut expected_owners: Vec<(Digest, String, std::ops::Range<usize>)> = Vec::new();
    for (index, entry) in sorted.iter().enumerate() {
        match expected_owners.last_mut() {
            Some(last) if last.0 == entry.owner => last.2.end = index + 1,
            _ => expected_owners.push((entry.owner, entry.owner_label.clone(), index..index + 1)),
        }
    }
    if image.owners() != expected_owners {
        return Err("owners differ".into());
    }
    let mut rejected = false;
    match image.dep_groups() {
        Ok(groups) => {
            // Each group's entry list is checked on its own, when read: a
            // group whose list fails its check is rejected, not compared.
            let mut found: BTreeMap<(String, Digest), Vec<usize>> = BTreeMap::new();
            let mut expected = expected_dep_groups(sorted);
            for group in groups {
                let id = (group.name().to_owned(), group.fingerprint());
                match group.entries() {
                    Ok(entries) => {
                        found.insert(id, entries.collect());
                    }
                    Err(error) if rejects_dep_index(&error) => {
                        rejected = true;
                        expected.remove(&id);
                    }
                    Err(other) => return Err(format!("unexpected dep group error {other}")),
                }
            }
            if found != expected {
                return Err("dependency groups differ".into());
            }
        }
        Err(error) if rejects_dep_index(&error) => rejected = true,
        Err(other) => return Err(format!("unexpected dep index error {other}")),
    }
    for (index, expected) in sorted.iter().enumerate() {
        match image.entry(index) {
            Ok(entry) => rejected |= compare_entry(&entry, expected)? == Read::Rejected,
            Err(error) if rejects_entry(&error) => rejected = true,
            Err(other) => return Err(format!("unexpected entry error {other}")),
        }
        match image.find(&expected.owner, &expected.key) {
            Ok(Some(entry)) => {
                if entry.index() != index {
                    return Err(format!(
                        "find returned entry {} for entry {index}",
                        entry.index()
                    ));
                }
                rejected |= compare_entry(&entry, expected)? == Read::Rejected;
            }
            Ok(None) => rejected = true,
            Err(error) if rejects_entry(&error) => rejected = true,
            Err(other) => return Err(format!("unexpected find error {other}")),
        }
    }
    Ok(rejected)
}
