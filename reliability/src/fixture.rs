//! Reference images whose every payload is known, so that any byte slice a
//! reader returns can be compared with the original.

use std::collections::BTreeMap;

use kiln_core::{Key, Owner};
use kiln_image::{Artifact, ArtifactKind, Dep, Digest, EntryData, ImageMeta, ImageWriter};

use crate::{Error, Rng};

/// An image and the entries it was written from.
#[derive(Clone, Debug)]
pub struct Fixture {
    /// The image bytes, as [`ImageWriter::to_bytes`] wrote them.
    pub bytes: Vec<u8>,
    /// The entries, in the order they were pushed.
    pub entries: Vec<EntryData>,
    by_id: BTreeMap<(Digest, Digest), usize>,
}

/// The owners fixture entries are spread over (three compiler configurations).
///
/// # Errors
/// When an owner is invalid (never, for these literals).
pub fn owners() -> Result<Vec<Owner>, Error> {
    Ok(vec![
        Owner::new("nvrtc", "13.0.88", "sm_90a", ["--std=c++17"])?,
        Owner::new("nvrtc", "13.0.88", "sm_80", ["--std=c++17"])?,
        Owner::new("toy-compiler", "1.2.3", "x86_64", Vec::<String>::new())?,
    ])
}

/// The fingerprint fixture entries record for definition `d`.
pub fn definition_fingerprint(d: usize) -> Digest {
    Digest::of(format!("definition {d} v1").as_bytes())
}

/// The name of fixture definition `d`.
pub fn definition_name(d: usize) -> String {
    format!("def-{d}")
}

/// Deterministic payload bytes of `len` for entry `i`, artifact `a`.
pub fn payload(i: u64, a: usize, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    Rng::new(i.wrapping_mul(1_000_003).wrapping_add(a as u64)).fill(&mut bytes);
    bytes
}

/// A one-artifact entry for `owner` whose key and payload are functions of
/// `i` alone: what crash and load children write and parents expect.
pub fn numbered_entry(owner: &Owner, i: u64, len: usize) -> EntryData {
    EntryData {
        owner: owner.digest(),
        owner_label: owner.label().to_owned(),
        key: *numbered_key(i).digest(),
        name: format!("entry-{i}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: Vec::new(),
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![format!("kernel_{i}")],
            bytes: payload(i, 0, len),
        }],
    }
}

/// The payload length of entry `i` in the multi-process load suite (64 to
/// 2,063 bytes, varying with `i`).
pub fn load_payload_len(i: u64) -> usize {
    64 + (i as usize).wrapping_mul(37) % 2000
}

/// The key of [`numbered_entry`] `i`.
pub fn numbered_key(i: u64) -> Key {
    Key::from_digest(Digest::of(format!("numbered entry {i}").as_bytes()))
}

impl Fixture {
    /// `count` entries over [`owners`], with 1 to 3 artifacts each (PTX,
    /// CUBIN, a custom kind), payloads of 0 to `max_payload` bytes, and 0 to
    /// 2 deps on four definitions, drawn from `seed`.
    ///
    /// # Errors
    /// When the image cannot be written (see [`Fixture::from_entries`]).
    pub fn new(seed: u64, count: usize, max_payload: usize) -> Result<Fixture, Error> {
        let owners = owners()?;
        let mut rng = Rng::new(seed);
        let kinds = [
            ArtifactKind::Ptx,
            ArtifactKind::Cubin,
            ArtifactKind::Custom("spirv".into()),
        ];
        let entries: Vec<EntryData> = (0..count)
            .map(|i| {
                let owner = &owners[i % owners.len()];
                let artifact_count = 1 + rng.below(kinds.len());
                let artifacts = kinds[..artifact_count]
                    .iter()
                    .enumerate()
                    .map(|(a, kind)| Artifact {
                        kind: kind.clone(),
                        entry_points: vec![format!("kernel_{i}_{a}")],
                        bytes: payload(seed ^ i as u64, a, rng.below(max_payload + 1)),
                    })
                    .collect();
                let deps = (0..rng.below(3))
                    .map(|d| {
                        let def = (i + d) % 4;
                        Dep {
                            name: definition_name(def),
                            fingerprint: definition_fingerprint(def),
                        }
                    })
                    .collect();
                EntryData {
                    owner: owner.digest(),
                    owner_label: owner.label().to_owned(),
                    key: Digest::of(format!("fixture {seed} entry {i}").as_bytes()),
                    name: format!("kernel-{i}"),
                    min_world: 1,
                    max_world: u64::MAX,
                    deps,
                    artifacts,
                }
            })
            .collect();
        Fixture::from_entries(entries)
    }

    /// The image of `entries`.
    ///
    /// # Errors
    /// When the entries do not make a valid image (a duplicate key, say).
    pub fn from_entries(entries: Vec<EntryData>) -> Result<Fixture, Error> {
        let mut writer = ImageWriter::new(ImageMeta::new("kiln-reliability", "1"));
        for entry in &entries {
            writer.push(entry.clone());
        }
        let bytes = writer.to_bytes()?;
        let by_id = entries
            .iter()
            .enumerate()
            .map(|(i, e)| ((e.owner, e.key), i))
            .collect();
        Ok(Fixture {
            bytes,
            entries,
            by_id,
        })
    }

    /// The original entry of `(owner, key)`, if the fixture has one.
    pub fn entry(&self, owner: &Digest, key: &Digest) -> Option<&EntryData> {
        self.by_id.get(&(*owner, *key)).map(|&i| &self.entries[i])
    }
}
