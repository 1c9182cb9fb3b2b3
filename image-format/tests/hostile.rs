//! Hostile images: records forged on purpose with every checksum
//! recomputed (checksums are unkeyed: anyone can make them match, see
//! `kiln_image::fuzz_support::forge`), so that what stops each image is a
//! structural check.
//!
//! - **Amplification**: images whose references point at one 1 MiB string
//!   or payload 8,192 times (each references over 1,000 times its own
//!   size). Every reader rejects them with a typed error, in a child
//!   process whose address space is capped (`RLIMIT_AS`) so that
//!   materializing what the references point at would abort it.
//! - **Memory bound**: reading each of those images, the valid images
//!   (including two made of nothing but small records, where owned copies
//!   cost the most) and the deterministic mutated corpus `corpus.rs`
//!   replays, with everything `fuzz_support::exercise` does (both
//!   verification levels, every reader), never has more than 8 × the input
//!   + 64 KiB allocated at once (counting allocator, `common/counting.rs`).
//! - **Inconsistency**: two entries with one (owner, key), keys out of
//!   order, a dependency index that disagrees with the entries' deps,
//!   references out of range. `Full` rejects each with its own error; at
//!   `Structural`, a lookup or a dependency query is a miss or an error,
//!   never a wrong entry, and no entry the index leaves out is served.

mod common;

use std::collections::BTreeMap;

use common::counting::{Counting, allowed_peak, allowed_peak_for, peak_during};
use common::{base_images, mutate};
use kiln_image::fuzz_support::forge::{Forge, LabelRecord, StrRef};
use kiln_image::fuzz_support::{exercise, reseal};
use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, ReadError,
    Verification,
};
use kiln_test_support::{Rng, child};

#[global_allocator]
static ALLOC: Counting = Counting;

/// Size of the string or payload every reference of an amplifier points at.
const BIG: usize = 1 << 20;
/// How many references point at it.
const TIMES: usize = 8192;

const ROLE: &str = "KILN_IMAGE_HOSTILE_ROLE";

fn owner() -> Digest {
    Digest::of(b"owner")
}

fn key(n: usize) -> Digest {
    Digest::of(format!("key {n}").as_bytes())
}

fn entry(n: usize, deps: &[(&str, &str)], artifacts: usize, entry_points: usize) -> EntryData {
    EntryData {
        owner: owner(),
        owner_label: "owner".into(),
        key: key(n),
        name: format!("entry {n}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: deps
            .iter()
            .map(|(name, version)| Dep {
                name: (*name).into(),
                fingerprint: Digest::of(version.as_bytes()),
            })
            .collect(),
        artifacts: (0..artifacts)
            .map(|a| Artifact {
                kind: ArtifactKind::Object,
                entry_points: (0..entry_points).map(|e| format!("k{n}_{a}_{e}")).collect(),
                bytes: vec![n as u8; 1 + a],
            })
            .collect(),
    }
}

fn write(entries: impl IntoIterator<Item = EntryData>) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("hostile", "1"));
    entries.into_iter().for_each(|entry| writer.push(entry));
    writer.to_bytes().expect("valid entries")
}

fn forge(bytes: &[u8]) -> Forge {
    Forge::read(bytes).expect("a valid image")
}

fn seal(forged: &Forge) -> Vec<u8> {
    forged.to_bytes().expect("the forged index serializes")
}

/// Appends one `BIG`-byte string to `blob`, for every reference to share.
fn big_string(blob: &mut Vec<u8>) -> StrRef {
    let offset = blob.len() as u32;
    blob.extend(std::iter::repeat_n(b'a', BIG));
    StrRef {
        offset,
        len: BIG as u32,
    }
}

/// A forged image and how many bytes its references point at in all.
struct Amplifier {
    name: &'static str,
    bytes: Vec<u8>,
    referenced: usize,
}

/// Every metadata label's key and value are one 1 MiB string.
fn labels() -> Amplifier {
    let mut forged = forge(&write([]));
    let big = big_string(&mut forged.index.meta_strings);
    forged.index.labels = vec![
        LabelRecord {
            key: big,
            value: big
        };
        TIMES
    ];
    Amplifier {
        name: "labels",
        bytes: seal(&forged),
        referenced: 2 * TIMES * BIG,
    }
}

/// 8,192 owners, all labelled by one 1 MiB string.
fn owner_labels() -> Amplifier {
    let mut forged = forge(&write((0..TIMES).map(|n| {
        let mut entry = entry(n, &[], 0, 0);
        entry.owner = Digest::of(format!("owner {n}").as_bytes());
        entry
    })));
    let big = big_string(&mut forged.index.meta_strings);
    for owner in &mut forged.index.owners {
        owner.label = big;
    }
    Amplifier {
        name: "owner-labels",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// 8,192 entries, all named by one 1 MiB string.
fn entry_names() -> Amplifier {
    let mut forged = forge(&write((0..TIMES).map(|n| entry(n, &[], 0, 0))));
    let big = big_string(&mut forged.index.strings);
    for record in &mut forged.index.entries {
        record.name = big;
    }
    Amplifier {
        name: "entry-names",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// One entry with 8,192 deps, all named by one 1 MiB string inside the
/// entry's own text region, all listed in the dependency index.
fn dep_names() -> Amplifier {
    let mut forged = forge(&write([entry(0, &[("def", "v1")], 1, 0)]));
    let big = big_string(&mut forged.index.strings);
    let mut dep = forged.index.deps[0].clone();
    dep.name = big;
    forged.index.deps = vec![dep; TIMES];
    forged.index.entries[0].deps.len = TIMES as u32;
    forged.index.entries[0].strings.len += BIG as u32;
    Amplifier {
        name: "dep-names",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// One artifact with 8,192 entry points, all one 1 MiB string inside the
/// entry's own text region.
fn entry_points() -> Amplifier {
    let mut forged = forge(&write([entry(0, &[], 1, 1)]));
    let big = big_string(&mut forged.index.strings);
    forged.index.entry_points = vec![big; TIMES];
    forged.index.artifacts[0].entry_points.len = TIMES as u32;
    forged.index.entries[0].entry_points.len = TIMES as u32;
    forged.index.entries[0].strings.len += BIG as u32;
    Amplifier {
        name: "entry-points",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// 8,192 dependency groups, all named by one 1 MiB string.
fn group_names() -> Amplifier {
    let mut forged = forge(&write([entry(0, &[("def", "v1")], 1, 0)]));
    let big = big_string(&mut forged.index.group_names);
    let group = forged.index.dep_groups[0].clone();
    forged.index.dep_groups = (0..TIMES)
        .map(|k| {
            let mut group = group.clone();
            group.name = big;
            group.members.start = k as u32;
            group
        })
        .collect();
    forged.index.dep_members = vec![0; TIMES];
    Amplifier {
        name: "group-names",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// One entry with 8,192 artifacts, all one 1 MiB payload.
fn payloads() -> Amplifier {
    let mut forged = forge(&write([entry(0, &[], 1, 0)]));
    forged.payloads = vec![7; BIG];
    let mut artifact = forged.index.artifacts[0].clone();
    artifact.offset = 0;
    artifact.len = BIG as u64;
    artifact.hash = Forge::payload_hash(&forged.payloads);
    forged.index.artifacts = vec![artifact; TIMES];
    let record = &mut forged.index.entries[0];
    record.artifacts.len = TIMES as u32;
    record.payloads.offset = 0;
    record.payloads.len = BIG as u64;
    Amplifier {
        name: "payloads",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

/// 8,192 entries that all claim the first entry's artifact, a 1 MiB payload.
fn shared_artifact() -> Amplifier {
    let mut forged = forge(&write((0..TIMES).map(|n| entry(n, &[], 1, 0))));
    forged.payloads = vec![7; BIG];
    let artifact = &mut forged.index.artifacts[0];
    artifact.offset = 0;
    artifact.len = BIG as u64;
    artifact.hash = Forge::payload_hash(&forged.payloads);
    for record in &mut forged.index.entries {
        record.artifacts.start = 0;
        record.payloads.offset = 0;
        record.payloads.len = BIG as u64;
    }
    Amplifier {
        name: "shared-artifact",
        bytes: seal(&forged),
        referenced: TIMES * BIG,
    }
}

fn amplifiers() -> Vec<Amplifier> {
    vec![
        labels(),
        owner_labels(),
        entry_names(),
        dep_names(),
        entry_points(),
        group_names(),
        payloads(),
        shared_artifact(),
    ]
}

/// What each amplifier gives: the check that fails a `Structural` open
/// ("ok" when it opens) and a `Full` open.
const EXPECTED: [(&str, &str, &str); 8] = [
    ("labels", "index.overlap", "index.overlap"),
    ("owner-labels", "index.overlap", "index.overlap"),
    ("entry-names", "ok", "index.overlap"),
    ("dep-names", "ok", "index.overlap"),
    ("entry-points", "ok", "index.overlap"),
    ("group-names", "ok", "index.overlap"),
    ("payloads", "ok", "index.overlap"),
    ("shared-artifact", "ok", "index.overlap"),
];

fn outcome<T>(result: Result<T, ReadError>) -> &'static str {
    result.err().map_or("ok", |error| error.check())
}

/// The child process: caps its own address space, then opens and reads
/// every amplifier, and reports what each reader said.
#[test]
#[ignore = "run in a child process by amplifying_images_get_typed_errors_under_a_memory_limit"]
fn child() {
    if std::env::var(ROLE).as_deref() != Ok("amplifiers") {
        return;
    }
    let images = amplifiers();
    let largest = images.iter().map(|a| a.bytes.len()).max().unwrap_or(0);
    let limit = address_space_in_use() + allowed_peak(largest) as u64 + (64 << 20);
    cap_address_space(limit);
    assert!(
        Vec::<u8>::new().try_reserve(1 << 30).is_err(),
        "1 GiB still fits under a cap of {limit} bytes: the cap would prove nothing"
    );
    let mut fields = Vec::new();
    for amplifier in &images {
        let bytes = &amplifier.bytes;
        let structural = outcome(Image::from_bytes(bytes, Verification::Structural));
        let full = outcome(Image::from_bytes(bytes, Verification::Full));
        let served = exercise(bytes).map_or(0, |seen| seen.entries_ok + seen.payloads_ok);
        fields.push(format!("{}={structural},{full},{served}", amplifier.name));
    }
    println!("RESULT {}", fields.join(" "));
}

/// Bytes of address space this process uses now (`VmSize`).
fn address_space_in_use() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").expect("/proc/self/status");
    let kib: u64 = status
        .lines()
        .find_map(|line| line.strip_prefix("VmSize:"))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmSize line");
    kib * 1024
}

/// Caps this process's address space at `limit` bytes.
fn cap_address_space(limit: u64) {
    let cap = libc::rlimit {
        rlim_cur: limit,
        rlim_max: limit,
    };
    // SAFETY: FFI call with a valid pointer to an initialised `rlimit` that
    // outlives the call; `setrlimit` only reads it.
    let status = unsafe { libc::setrlimit(libc::RLIMIT_AS, &cap) };
    assert_eq!(status, 0, "setrlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn each_amplifier_references_over_a_thousand_times_its_size() {
    for amplifier in amplifiers() {
        let ratio = amplifier.referenced / amplifier.bytes.len();
        eprintln!(
            "{}: {} bytes, referencing {} bytes ({ratio}x)",
            amplifier.name,
            amplifier.bytes.len(),
            amplifier.referenced
        );
        assert!(
            ratio >= 1000,
            "{}: {} bytes referenced by a {}-byte image ({ratio}x)",
            amplifier.name,
            amplifier.referenced,
            amplifier.bytes.len()
        );
    }
}

#[cfg(target_os = "linux")]
#[test]
fn amplifying_images_get_typed_errors_under_a_memory_limit() {
    let stdout = child::run(&mut child::command(ROLE, "amplifiers"));
    let result = child::result_line(&stdout).expect("a RESULT line");
    let found: BTreeMap<&str, &str> = result
        .split_whitespace()
        .filter_map(|field| field.split_once('='))
        .collect();
    for (name, structural, full) in EXPECTED {
        let outcome = found.get(name).copied();
        assert_eq!(
            outcome,
            Some(format!("{structural},{full},0").as_str()),
            "{name}: (Structural open, Full open, entries and payloads served)"
        );
    }
    assert_eq!(found.len(), EXPECTED.len(), "{result}");
}

/// The instrument itself: a megabyte allocated inside the closure is seen,
/// one allocated before it is not.
#[test]
fn the_counter_sees_what_a_closure_allocates() {
    let before = vec![1u8; 4 << 20];
    let (length, peak) = peak_during(|| vec![2u8; 1 << 20].len());
    assert_eq!(length, 1 << 20);
    assert!(
        (1 << 20..(1 << 20) + 4096).contains(&peak),
        "{peak} bytes at peak"
    );
    drop(before);
}

#[test]
fn every_reader_stays_under_the_memory_bound() {
    let mut cases: Vec<(String, Vec<u8>)> = amplifiers()
        .into_iter()
        .map(|amplifier| (amplifier.name.to_owned(), amplifier.bytes))
        .collect();
    // Valid images that are nearly all small records, where owned copies
    // cost the most per input byte: 100,000 empty entry points (an owned
    // copy of the entry holds a `String` per 8-byte record), 3,000 labels
    // with short keys (`meta()` collects a `Vec` of `String` pairs, then a
    // `BTreeMap`, per 20-byte label).
    let mut dense = entry(0, &[], 1, 0);
    dense.artifacts[0].entry_points = vec![String::new(); 100_000];
    cases.push(("dense: 100,000 entry points".into(), write([dense])));
    let mut meta = ImageMeta::new("hostile", "1");
    meta.labels = (0..3_000u32)
        .map(|n| {
            (
                format!("{:03}{}", n % 1000, "z".repeat(n as usize / 1000)),
                String::new(),
            )
        })
        .collect();
    let mut writer = ImageWriter::new(meta);
    writer.push(entry(0, &[], 1, 1));
    cases.push((
        "dense: 3,000 labels".into(),
        writer.to_bytes().expect("valid"),
    ));
    let bases = base_images();
    // The corpus `corpus.rs` replays: same seed, same order.
    let mut rng = Rng::new(0xf022);
    for (b, base) in bases.iter().enumerate() {
        cases.push((format!("base image {b}"), base.clone()));
        for i in 0..400 {
            let mut mutant = mutate(base, &mut rng);
            if i % 2 == 1 {
                reseal(&mut mutant);
            }
            cases.push((format!("base image {b}, mutant {i}"), mutant));
        }
    }
    // Per class: (cases, largest peak / input, its case, largest peak
    // beyond the input).
    let mut classes: BTreeMap<&str, (usize, f64, String, usize)> = BTreeMap::new();
    for (name, bytes) in &cases {
        let (_, peak) = peak_during(|| exercise(bytes));
        let allowed = allowed_peak_for(bytes);
        assert!(
            peak <= allowed,
            "{name}: {peak} bytes allocated at once reading {} bytes (bound {allowed})",
            bytes.len(),
        );
        let class = if name.contains("mutant") {
            "mutants"
        } else if name.starts_with("base") {
            "valid images"
        } else if name.starts_with("dense") {
            "dense valid images"
        } else {
            "amplifiers"
        };
        let ratio = peak as f64 / bytes.len().max(1) as f64;
        let seen = classes.entry(class).or_insert((0, 0.0, String::new(), 0));
        seen.0 += 1;
        if ratio > seen.1 {
            (seen.1, seen.2) = (ratio, name.clone());
        }
        seen.3 = seen.3.max(peak.saturating_sub(bytes.len()));
    }
    for (class, (count, ratio, name, beyond)) in classes {
        eprintln!(
            "{class}: {count} cases, largest peak {ratio:.2}x the input ({name}), at most {beyond} bytes beyond the input"
        );
    }
}

// ---------------------------------------------------------------------
// Inconsistent images.

const FOO_V1: (&str, &str) = ("foo", "v1");
const FOO_V2: (&str, &str) = ("foo", "v2");
const BAR_V1: (&str, &str) = ("bar", "v1");

/// Five entries of one owner, in image order: entries 0, 2 and 3 depend
/// on foo v1, entry 1 on foo v2, entry 4 on bar v1.
fn consistent() -> (Vec<u8>, Vec<EntryData>) {
    let mut entries: Vec<EntryData> = (0..5).map(|n| entry(n, &[], 1, 1)).collect();
    entries.sort_by_key(|entry| entry.key);
    let deps = [FOO_V1, FOO_V2, FOO_V1, FOO_V1, BAR_V1];
    for (entry, (name, version)) in entries.iter_mut().zip(deps) {
        entry.deps = vec![Dep {
            name: name.into(),
            fingerprint: Digest::of(version.as_bytes()),
        }];
    }
    let bytes = write(entries.clone());
    Image::from_bytes(&bytes, Verification::Full).expect("a consistent image");
    (bytes, entries)
}

/// Position of the group of `(name, version)` in the forged index.
fn group_of(forged: &Forge, (name, version): (&str, &str)) -> usize {
    forged
        .group_of(name, &Digest::of(version.as_bytes()))
        .expect("the group exists")
}

fn full_error(bytes: &[u8]) -> ReadError {
    Image::from_bytes(bytes, Verification::Full).expect_err("full verification rejects it")
}

fn structural(bytes: &[u8]) -> Image {
    Image::from_bytes(bytes, Verification::Structural).expect("the image opens")
}

/// Every lookup is the entry itself, a miss or an error, and iteration
/// serves exactly the entries lookups serve.
fn lookups_never_serve_a_wrong_entry(image: &Image, entries: &[EntryData]) {
    for (index, written) in entries.iter().enumerate() {
        let by_index = image.entry(index);
        match image.find(&written.owner, &written.key) {
            Ok(Some(found)) => {
                assert_eq!(found.key(), written.key);
                assert_eq!(found.owner(), written.owner);
                assert!(by_index.is_err() || found.index() == index);
            }
            Ok(None) | Err(_) => {
                if let Ok(entry) = by_index {
                    panic!("entry {index} is served by iteration, not by its lookup: {entry:?}")
                }
            }
        }
    }
}

#[test]
fn two_entries_with_one_owner_and_key() {
    let (bytes, entries) = consistent();
    let mut forged = forge(&bytes);
    forged.index.entries[2].key = forged.index.entries[1].key;
    let bad = seal(&forged);

    let error = full_error(&bad);
    assert!(
        matches!(
            error,
            ReadError::DuplicateKey {
                first: 1,
                second: 2,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.check(), "index.duplicate_key");
    assert!(
        error
            .to_string()
            .contains("entries 1 and 2 have the same (owner, key)"),
        "{error}"
    );

    let image = structural(&bad);
    let found = image
        .find(&owner(), &entries[1].key)
        .expect("the entry a lookup leads to passes")
        .expect("a hit");
    let other = 3 - found.index();
    assert!(matches!(found.index(), 1 | 2));
    let error = image.entry(other).expect_err("the other copy is refused");
    assert!(
        matches!(error, ReadError::EntryUnreachable { index } if index == other),
        "{error}"
    );
    assert_eq!(error.check(), "entry.lookup");
    let served = image.entries().filter(Result::is_ok).count();
    assert_eq!(served, 4, "one copy of the pair and the three others");
}

#[test]
fn keys_out_of_order() {
    let (bytes, mut entries) = consistent();
    let mut forged = forge(&bytes);
    let (first, second) = (forged.index.entries[1].key, forged.index.entries[2].key);
    forged.index.entries[1].key = second;
    forged.index.entries[2].key = first;
    entries[1].key = Digest(second);
    entries[2].key = Digest(first);
    let bad = seal(&forged);

    let error = full_error(&bad);
    assert!(
        matches!(
            error,
            ReadError::KeysOutOfOrder {
                first: 1,
                second: 2,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(error.check(), "index.key_order");

    let image = structural(&bad);
    lookups_never_serve_a_wrong_entry(&image, &entries);
    let unreachable = (0..entries.len())
        .filter(|&index| matches!(image.entry(index), Err(ReadError::EntryUnreachable { .. })))
        .count();
    assert!(unreachable >= 1, "an entry out of order is refused");
    for index in [0, 3, 4] {
        assert!(image.entry(index).is_ok(), "entry {index} is in order");
    }
}

/// The dependency index leaves entry 0 out of foo v1's list: an entry built
/// against foo v1 would escape revalidation (a cache that defines foo v2
/// excludes foo v1's members) and invalidation (`redefine` closes them).
#[test]
fn an_entry_the_dependency_index_leaves_out_is_never_served() {
    let (bytes, entries) = consistent();
    let mut forged = forge(&bytes);
    let group = group_of(&forged, FOO_V1);
    assert!(forged.remove_member(group, 0));
    let bad = seal(&forged);

    let error = full_error(&bad);
    assert!(
        matches!(&error, ReadError::DepNotIndexed { entry: 0, name, .. } if name == "foo"),
        "{error}"
    );
    assert_eq!(error.check(), "deps.unlisted");

    let image = structural(&bad);
    for result in [
        image.entry(0).map(|_| ()),
        image.find(&owner(), &entries[0].key).map(|_| ()),
    ] {
        assert!(
            matches!(result, Err(ReadError::DepNotIndexed { entry: 0, .. })),
            "{result:?}"
        );
    }
    let dependents: Vec<usize> = image.dependents_of("foo").unwrap().collect();
    assert!(!dependents.contains(&0));
    for (index, written) in entries.iter().enumerate().skip(1) {
        let entry = image.entry(index).expect("the others are listed");
        assert_eq!(entry.deps(), written.deps);
    }
}

/// Entry 0 (built against foo v1) listed under foo v2 instead, with its dep
/// pointing at its new place: the fingerprints differ, so it is refused.
#[test]
fn an_entry_listed_under_another_fingerprint_is_never_served() {
    let (bytes, _) = consistent();
    let mut forged = forge(&bytes);
    let (v1, v2) = (group_of(&forged, FOO_V1), group_of(&forged, FOO_V2));
    assert!(forged.remove_member(v1, 0));
    forged.add_member(v2, 0);
    let dep = forged.index.entries[0].deps.start as usize;
    forged.index.deps[dep].group = v2 as u32;
    forged.index.deps[dep].member = 0;
    let bad = seal(&forged);

    let error = full_error(&bad);
    assert!(
        matches!(error, ReadError::DepNotIndexed { entry: 0, .. }),
        "{error}"
    );
    let image = structural(&bad);
    assert!(matches!(
        image.entry(0),
        Err(ReadError::DepNotIndexed { entry: 0, .. })
    ));
    // The index now says entry 0 depends on foo v2: a cache would close it
    // when foo changes, which is a miss, not a stale hit.
    let v2_members: Vec<usize> = image
        .dep_groups_named("foo")
        .unwrap()
        .find(|group| group.fingerprint() == Digest::of(b"v2"))
        .expect("foo v2")
        .entries()
        .unwrap()
        .collect();
    assert_eq!(v2_members, [0, 1]);
}

/// The index lists entry 4 (which depends on bar only) under foo v1 too.
/// At `Structural` that can only make a cache drop or close entry 4;
/// `Full` rejects it.
#[test]
fn an_entry_listed_for_a_dep_it_does_not_have() {
    let (bytes, entries) = consistent();
    let mut forged = forge(&bytes);
    let group = group_of(&forged, FOO_V1);
    forged.add_member(group, 4);
    let bad = seal(&forged);

    let error = full_error(&bad);
    assert!(
        matches!(&error, ReadError::DepNotCarried { entry: 4, name, fingerprint }
            if name == "foo" && *fingerprint == Digest::of(b"v1")),
        "{error}"
    );
    assert_eq!(error.check(), "deps.extra");
    assert!(
        error.to_string().contains("lists entry 4 under \"foo\""),
        "{error}"
    );

    let image = structural(&bad);
    for (index, written) in entries.iter().enumerate() {
        assert_eq!(image.entry(index).expect("served").deps(), written.deps);
    }
    let mut dependents: Vec<usize> = image.dependents_of("foo").unwrap().collect();
    dependents.sort_unstable();
    assert_eq!(dependents, [0, 1, 2, 3, 4], "a superset: 4 would be closed");
}

/// One reference out of range per case: each is refused where it is read
/// at `Structural` and by `Full`, with `index.range`.
#[test]
fn references_out_of_range() {
    type Forgery = fn(&mut Forge);
    // (what, forgery, where `Structural` finds it)
    let cases: [(&str, Forgery, &str); 7] = [
        (
            "an entry's name past its text region",
            |f| f.index.entries[0].name.len += 1000,
            "entry",
        ),
        (
            "the last entry's deps past the dep table",
            |f| f.index.entries[4].deps.len += 3,
            "entry",
        ),
        (
            "a payload past its entry's payloads",
            |f| f.index.artifacts[0].len = 1 << 40,
            "entry",
        ),
        (
            "an artifact's entry points past its entry's",
            |f| f.index.artifacts[0].entry_points.len += 5,
            "entry",
        ),
        (
            "a group member past the entry table",
            |f| *f.index.dep_members.last_mut().unwrap() = 99,
            "deps",
        ),
        (
            "a group name past the name table",
            |f| f.index.dep_groups.last_mut().unwrap().name.len += 10,
            "deps",
        ),
        (
            "a label past the metadata text",
            |f| {
                let end = f.index.meta_strings.len() as u32;
                f.index.labels.push(LabelRecord {
                    key: StrRef {
                        offset: end,
                        len: 10,
                    },
                    value: StrRef {
                        offset: end + 10,
                        len: 0,
                    },
                });
            },
            "open",
        ),
    ];
    let (bytes, _) = consistent();
    for (what, forgery, place) in cases {
        let mut forged = forge(&bytes);
        forgery(&mut forged);
        let bad = seal(&forged);
        let error = full_error(&bad);
        assert_eq!(error.check(), "index.range", "{what}: {error}");
        assert!(matches!(error, ReadError::OutOfRange { .. }), "{what}");

        let found = match place {
            "open" => Image::from_bytes(&bad, Verification::Structural).map(|_| ()),
            _ => {
                let image = structural(&bad);
                match place {
                    "entry" => (0..5).try_for_each(|index| image.entry(index).map(|_| ())),
                    _ => image.dep_groups().and_then(|groups| {
                        groups
                            .into_iter()
                            .try_for_each(|group| group.entries().map(|_| ()))
                    }),
                }
            }
        };
        let error = found.expect_err(what);
        assert_eq!(error.check(), "index.range", "{what}: {error}");
    }
}

/// A block record that starts its block's text before the block before it
/// does (so the block would share text with earlier entries) fails its
/// group of 4,096 entries, at both levels; the other group still serves.
#[test]
fn a_block_record_out_of_order_fails_its_group_only() {
    let entries = 2 * 64 * 64;
    let mut forged = forge(&write((0..entries).map(|n| entry(n, &[], 1, 0))));
    assert_eq!(forged.index.blocks.len(), 128);
    forged.index.blocks[70].strings = forged.index.blocks[60].strings;
    let bad = seal(&forged);
    let error = full_error(&bad);
    assert_eq!(error.check(), "index.overlap", "{error}");
    assert!(
        error
            .to_string()
            .contains("block record 70 starts the text"),
        "{error}"
    );
    let image = structural(&bad);
    for index in [0, 63 * 64, 64 * 64 - 1] {
        image.entry(index).expect("the first group serves");
    }
    let mut errors = Vec::new();
    for index in [64 * 64, 70 * 64 + 3, entries - 1, 64 * 64] {
        let error = image.entry(index).expect_err("the second group is refused");
        assert_eq!(error.check(), "index.overlap", "entry {index}: {error}");
        errors.push(error.to_string());
    }
    // A failure is remembered where it happened: later accesses repeat only
    // the failing comparison, and report the same error.
    assert!(errors.iter().all(|error| *error == errors[0]), "{errors:?}");
}

/// A block record that claims text past the end of the table fails the
/// block table's first level: every entry is refused, with the same error
/// on every access.
#[test]
fn a_block_record_past_the_tables_fails_every_entry() {
    let entries = 2 * 64 * 64;
    let mut forged = forge(&write((0..entries).map(|n| entry(n, &[], 1, 0))));
    forged.index.blocks[64].strings = u32::MAX;
    let bad = seal(&forged);
    assert_eq!(full_error(&bad).check(), "index.range");
    let image = structural(&bad);
    let errors: Vec<String> = [0, 100, 64 * 64, entries - 1, 0]
        .into_iter()
        .map(|index| {
            let error = image.entry(index).expect_err("refused");
            assert_eq!(error.check(), "index.range", "entry {index}: {error}");
            error.to_string()
        })
        .collect();
    assert!(errors.iter().all(|error| *error == errors[0]), "{errors:?}");
    assert!(
        errors[0].contains("block record 64's text"),
        "{}",
        errors[0]
    );
}

/// An input the `bounded_memory` fuzz target found: a compressed group of a
/// few raw bytes whose zstd frame declares a block far larger, so that the
/// decoder's scratch, not the group, makes the peak. It stays within the
/// bound's decoder allowance and is refused or served without panicking.
#[test]
fn a_frame_declaring_blocks_larger_than_its_group_costs_a_bounded_decoder() {
    let mut bytes = include_bytes!("data/decoder-scratch.bin").to_vec();
    // As the fuzz target reads it: resealed when the first byte is odd.
    if bytes.first().is_some_and(|b| b & 1 == 1) {
        reseal(&mut bytes);
    }
    let (_, peak) = peak_during(|| exercise(&bytes));
    let allowed = allowed_peak_for(&bytes);
    assert!(
        peak <= allowed,
        "{peak} bytes allocated at once reading {} bytes (bound {allowed})",
        bytes.len()
    );
    assert!(
        peak > allowed_peak(bytes.len()),
        "the case still exercises the decoder's allowance ({peak} bytes)"
    );
}
