//! The oracle of the corruption matrix: drive every read path over a
//! possibly corrupt image and compare everything that comes back with the
//! [`Fixture`] it was made from.
//!
//! "Garbage" is anything served that differs from the original: an entry
//! whose (owner, key) the original does not have, a name or entry point
//! that differs, payload bytes that differ, or a dependency edge the
//! original does not have. A corrupt part must be withheld (an error or a
//! miss), never returned.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};

use kiln_core::{Cache, Compiled, Key, Owner};
use kiln_image::{ArtifactRef, Digest, EntryData, EntryRef, Image, Verification};

use crate::Fixture;
use crate::fixture::{definition_fingerprint, definition_name};
use crate::mutation::Case;

/// What one or more audits saw. Every count is of events, summed over cases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Cases audited.
    pub cases: u64,
    /// Opens (all levels, bytes and mapped files) that were rejected.
    pub opens_rejected: u64,
    /// Opens that succeeded.
    pub opens_accepted: u64,
    /// Payload slices returned, each equal to the original.
    pub payloads_served: u64,
    /// Payload reads refused (checksum or bounds).
    pub payloads_withheld: u64,
    /// Cache answers (`lookup` hits and `get_or_compile` results) compared
    /// with the original.
    pub cache_hits: u64,
    /// Things served that differ from the original.
    pub garbage: u64,
    /// Cases that panicked.
    pub panics: u64,
    /// The first few garbage or panic descriptions.
    pub failures: Vec<String>,
}

impl Tally {
    /// Adds `other` to this tally.
    pub fn absorb(&mut self, other: Tally) {
        self.cases += other.cases;
        self.opens_rejected += other.opens_rejected;
        self.opens_accepted += other.opens_accepted;
        self.payloads_served += other.payloads_served;
        self.payloads_withheld += other.payloads_withheld;
        self.cache_hits += other.cache_hits;
        self.garbage += other.garbage;
        self.panics += other.panics;
        for failure in other.failures {
            self.note(failure);
        }
    }

    fn note(&mut self, failure: String) {
        if self.failures.len() < 10 {
            self.failures.push(failure);
        }
    }

    fn garbage(&mut self, what: String) {
        self.garbage += 1;
        self.note(what);
    }
}

/// Where the bytes of a case are read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// [`Image::from_bytes`] only.
    Bytes,
    /// [`Image::from_bytes`] and [`Image::open`] of a file holding them.
    BytesAndFile,
}

/// What counts as garbage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Oracle {
    /// Compare owner labels too (not for resealed cases: the index checksum
    /// that protects them was recomputed).
    owner_labels: bool,
}

/// Audits `case` (a corruption of `fixture.bytes`) through every read path,
/// catching panics: open at both verification levels, iterate, look up,
/// read every payload, follow dependency groups, verify in full, merge into
/// a [`Cache`], look up and get-or-compile every original entry.
pub fn audit(fixture: &Fixture, owners: &[Owner], case: &Case, access: Access) -> Tally {
    let oracle = Oracle {
        owner_labels: !case.resealed,
    };
    let (bytes, label) = (&case.bytes[..], &case.label);
    let mut tally = Tally {
        cases: 1,
        ..Tally::default()
    };
    let run = catch_unwind(AssertUnwindSafe(|| {
        let mut inner = Tally::default();
        audit_paths(fixture, owners, bytes, access, oracle, &mut inner);
        inner
    }));
    match run {
        Ok(inner) => {
            tally.absorb(inner);
            for failure in &mut tally.failures {
                *failure = format!("{label}: {failure}");
            }
        }
        Err(_) => {
            tally.panics += 1;
            tally.note(format!("{label}: panicked"));
        }
    }
    tally
}

fn audit_paths(
    fixture: &Fixture,
    owners: &[Owner],
    bytes: &[u8],
    access: Access,
    oracle: Oracle,
    tally: &mut Tally,
) {
    for level in [Verification::Structural, Verification::Full] {
        match Image::from_bytes(bytes, level) {
            Ok(image) => {
                tally.opens_accepted += 1;
                audit_image(fixture, &image, oracle, tally);
            }
            Err(_) => tally.opens_rejected += 1,
        }
    }
    if access == Access::BytesAndFile {
        let written = tempfile::NamedTempFile::new()
            .and_then(|mut file| std::io::Write::write_all(&mut file, bytes).map(|()| file));
        match written {
            Ok(file) => {
                for level in [Verification::Structural, Verification::Full] {
                    match Image::open(file.path(), level) {
                        Ok(image) => {
                            tally.opens_accepted += 1;
                            audit_image(fixture, &image, oracle, tally);
                        }
                        Err(_) => tally.opens_rejected += 1,
                    }
                }
            }
            Err(error) => tally.note(format!("could not write a temporary file: {error}")),
        }
    }
    audit_cache(fixture, owners, bytes, tally);
}

/// Every read an [`Image`] offers, compared with the original.
fn audit_image(fixture: &Fixture, image: &Image, oracle: Oracle, tally: &mut Tally) {
    let _ = (image.meta(), image.owners(), image.header(), image.len());
    for entry in image.entries().flatten() {
        audit_entry(fixture, &entry, oracle, tally);
        if let Ok(Some(found)) = image.find(&entry.owner(), &entry.key()) {
            audit_entry(fixture, &found, oracle, tally);
        }
    }
    for original in &fixture.entries {
        if let Ok(Some(found)) = image.find(&original.owner, &original.key) {
            audit_entry(fixture, &found, oracle, tally);
        }
    }
    if let Ok(groups) = image.dep_groups() {
        for group in groups {
            let (name, fingerprint) = (group.name().to_owned(), group.fingerprint());
            let members = group.entries().into_iter().flatten().map(|i| (i, true));
            let named: Vec<usize> = image
                .dependents_of(&name)
                .map(Iterator::collect)
                .unwrap_or_default();
            for (index, exact) in members.chain(named.into_iter().map(|i| (i, false))) {
                let Ok(entry) = image.entry(index) else {
                    continue;
                };
                let Some(original) = fixture.entry(&entry.owner(), &entry.key()) else {
                    continue; // audit_entry reports it
                };
                let has_edge = original
                    .deps
                    .iter()
                    .any(|d| d.name == name && (!exact || d.fingerprint == fingerprint));
                if !has_edge {
                    tally.garbage(format!(
                        "dependency edge {name} -> {} that the original does not have",
                        original.name
                    ));
                }
            }
        }
    }
    let _ = image.entry(image.len());
    let _ = image.verify_full();
}

fn audit_entry(fixture: &Fixture, entry: &EntryRef<'_>, oracle: Oracle, tally: &mut Tally) {
    let Some(original) = fixture.entry(&entry.owner(), &entry.key()) else {
        tally.garbage(format!(
            "entry {:?} with an (owner, key) the original does not have",
            entry.name()
        ));
        return;
    };
    let label_differs = oracle.owner_labels && entry.owner_label() != original.owner_label;
    if entry.name() != original.name || label_differs {
        tally.garbage(format!(
            "entry {} served as {:?} / {:?}",
            original.name,
            entry.name(),
            entry.owner_label()
        ));
    }
    if entry.deps() != original.deps {
        tally.garbage(format!("entry {} served with other deps", original.name));
    }
    if entry.artifact_count() != original.artifacts.len() {
        tally.garbage(format!(
            "entry {} served with {} artifacts, not {}",
            original.name,
            entry.artifact_count(),
            original.artifacts.len()
        ));
    }
    for (i, artifact) in entry.artifacts().enumerate() {
        audit_artifact(original, i, &artifact, tally);
    }
    for (i, wanted) in original.artifacts.iter().enumerate() {
        if let Some(artifact) = entry.artifact_of_kind(&wanted.kind) {
            audit_artifact(original, i, &artifact, tally);
        }
    }
}

fn audit_artifact(original: &EntryData, i: usize, artifact: &ArtifactRef<'_>, tally: &mut Tally) {
    match artifact.bytes() {
        Ok(bytes) => {
            let Some(wanted) = original.artifacts.get(i) else {
                tally.garbage(format!(
                    "entry {} served artifact {i} it does not have",
                    original.name
                ));
                return;
            };
            let same = bytes == wanted.bytes.as_slice()
                && artifact.kind() == wanted.kind
                && artifact.entry_points() == wanted.entry_points;
            if same {
                tally.payloads_served += 1;
            } else {
                tally.garbage(format!(
                    "entry {} artifact {i} served {} bytes that differ from the original",
                    original.name,
                    bytes.len()
                ));
            }
        }
        Err(_) => tally.payloads_withheld += 1,
    }
}

/// Merges `bytes` into a fresh [`Cache`] (definitions as the fixture was
/// built, so nothing is stale) and asks for every original entry with
/// `lookup` and with `get_or_compile` (whose compile yields the original).
fn audit_cache(fixture: &Fixture, owners: &[Owner], bytes: &[u8], tally: &mut Tally) {
    let cache = Cache::new();
    for d in 0..4 {
        cache.define(&definition_name(d), definition_fingerprint(d));
    }
    match Image::from_bytes(bytes, Verification::Structural) {
        Ok(image) => {
            let _ = cache.merge_image(image);
        }
        Err(_) => return,
    }
    let owners: BTreeMap<Digest, &Owner> = owners.iter().map(|o| (o.digest(), o)).collect();
    for original in &fixture.entries {
        let key = Key::from_digest(original.key);
        if let Some(hit) = cache.lookup(&original.owner, &key) {
            // A lookup checks the entry record only: a corrupt payload shows
            // here as withheld (`None`), and excludes the entry.
            audit_hit(original, hit.name(), &hit.artifacts(), true, tally);
        }
        let Some(owner) = owners.get(&original.owner) else {
            continue;
        };
        let compiled = || Ok(recompile(original));
        match cache.get_or_compile(owner, &key, compiled) {
            // Every payload was accessed above: a corrupt entry is excluded
            // by now and recompiled, so all bytes must be served.
            Ok(hit) => audit_hit(original, hit.name(), &hit.artifacts(), false, tally),
            Err(error) => tally.garbage(format!("get_or_compile failed: {error}")),
        }
    }
}

fn audit_hit(
    original: &EntryData,
    name: &str,
    artifacts: &[kiln_core::ArtifactView<'_>],
    may_withhold: bool,
    tally: &mut Tally,
) {
    tally.cache_hits += 1;
    let same = name == original.name
        && artifacts.len() == original.artifacts.len()
        && artifacts
            .iter()
            .zip(&original.artifacts)
            .all(|(got, want)| {
                let bytes_ok = match got.bytes() {
                    Some(bytes) => bytes == want.bytes.as_slice(),
                    None => {
                        tally.payloads_withheld += 1;
                        may_withhold
                    }
                };
                got.kind == want.kind && bytes_ok && got.entry_points == want.entry_points
            });
    if !same {
        tally.garbage(format!(
            "cache hit for {} differs from the original",
            original.name
        ));
    }
}

/// What a compiler would produce for `entry`: the original, owned.
pub fn recompile(entry: &EntryData) -> Compiled {
    let mut compiled = Compiled::new(entry.name.clone());
    for dep in &entry.deps {
        compiled = compiled.dep(dep.name.clone(), dep.fingerprint);
    }
    for artifact in &entry.artifacts {
        compiled = compiled.artifact(artifact.clone());
    }
    compiled
}
