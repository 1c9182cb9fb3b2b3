//! The corruption matrix: images and disk-cache segments corrupted in every
//! family of `kiln_reliability::mutation` (truncations, single and multi
//! bit flips, swapped and shuffled regions, wrong header fields, zero and
//! huge lengths, trailing bytes), each read through every path: open at
//! both verification levels (from bytes and from a mapped file), iterate,
//! look up, read every payload, follow dependency groups, verify, merge
//! into a `Cache`, `lookup` and `get_or_compile`; for disk segments,
//! `DiskCache::get`, `verify` and `gc`. Each case runs under
//! `catch_unwind`. Every byte served is compared with the original.
//!
//! Counts and seeds are fixed: the same cases run everywhere. The tables
//! printed (`cargo test -p kiln-reliability --test corruption -- --nocapture`)
//! are the ones in RELIABILITY.md.

use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_image::{ArtifactKind, EntryData};
use kiln_reliability::audit::{Access, Tally, audit};
use kiln_reliability::mutation::{Case, Counts, FAMILIES, cases};
use kiln_reliability::{Fixture, Rng, Table, fixture};

const SEED: u64 = 0x6b69_6c6e_2026;

fn fixture() -> Fixture {
    Fixture::new(SEED, 24, 400).expect("fixture image")
}

/// The matrix as a table; `opens` adds the open columns (images only: a
/// disk cache opens by listing names and reads segments on lookup).
fn table(tallies: &BTreeMap<&'static str, Tally>, answers: &str, opens: bool) -> Table {
    let withheld = if opens {
        "payloads withheld"
    } else {
        "entries missed"
    };
    let mut header = vec!["family", "cases"];
    if opens {
        header.extend(["opens rejected", "opens accepted"]);
    }
    header.extend([
        "payloads served (all equal)",
        withheld,
        answers,
        "garbage",
        "panics",
    ]);
    let mut table = Table::new(header);
    let row = |name: String, t: &Tally| {
        let mut cells = vec![name, t.cases.to_string()];
        if opens {
            cells.extend([t.opens_rejected.to_string(), t.opens_accepted.to_string()]);
        }
        cells.extend([
            t.payloads_served.to_string(),
            t.payloads_withheld.to_string(),
            t.cache_hits.to_string(),
            t.garbage.to_string(),
            t.panics.to_string(),
        ]);
        cells
    };
    let mut total = Tally::default();
    for family in FAMILIES {
        if let Some(t) = tallies.get(family) {
            table.row(row(family.to_string(), t));
            total.absorb(t.clone());
        }
    }
    table.row(row("**total**".to_string(), &total));
    table
}

fn assert_clean(tallies: &BTreeMap<&'static str, Tally>) {
    for (family, t) in tallies {
        assert!(t.cases > 0, "{family}: no case ran");
        assert_eq!(
            (t.garbage, t.panics),
            (0, 0),
            "{family}: garbage or panics: {:#?}",
            t.failures
        );
    }
}

/// The oracle itself can fail: an image whose one payload byte differs
/// from the original, but which is otherwise valid (checksums recomputed by
/// the writer), is reported as garbage on every path that reads it.
#[test]
fn the_oracle_reports_a_valid_image_with_one_other_byte_as_garbage() {
    let original = fixture();
    let mut entries = original.entries.clone();
    let victim = entries
        .iter_mut()
        .find(|e| e.artifacts.iter().any(|a| !a.bytes.is_empty()))
        .expect("a non-empty payload");
    let artifact = victim
        .artifacts
        .iter_mut()
        .find(|a| !a.bytes.is_empty())
        .expect("non-empty");
    artifact.bytes[0] ^= 1;
    let other = Fixture::from_entries(entries).expect("image");
    let owners = fixture::owners().expect("owners");
    let as_case = |bytes: &[u8], label: &str| Case {
        family: "oracle",
        label: label.into(),
        bytes: bytes.to_vec(),
        resealed: false,
    };
    let tally = audit(
        &original,
        &owners,
        &as_case(&other.bytes, "one byte"),
        Access::BytesAndFile,
    );
    assert_eq!(tally.panics, 0);
    // Four opens (bytes and file, two levels), each serving the payload at
    // least once, plus the cache hits.
    assert!(tally.garbage >= 6, "{tally:#?}");

    let clean = audit(
        &original,
        &owners,
        &as_case(&original.bytes, "clean"),
        Access::BytesAndFile,
    );
    assert_eq!(
        (clean.garbage, clean.panics, clean.payloads_withheld),
        (0, 0, 0),
        "{clean:#?}"
    );
    assert_eq!(clean.opens_accepted, 4);
    assert_eq!(clean.cache_hits, 2 * original.entries.len() as u64);
}

#[test]
fn image_corruption_matrix_never_panics_and_never_serves_garbage() {
    let fixture = fixture();
    let owners = fixture::owners().expect("owners");
    let counts = Counts {
        truncations: 192,
        bit_flips: 512,
        multi_flips: 256,
        swaps: 64,
    };
    let cases = cases(&fixture.bytes, SEED, counts);
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    for (n, case) in cases.iter().enumerate() {
        // Every eighth case is also written to a file and mapped.
        let access = if n % 8 == 0 {
            Access::BytesAndFile
        } else {
            Access::Bytes
        };
        let tally = audit(&fixture, &owners, case, access);
        tallies.entry(case.family).or_default().absorb(tally);
    }
    println!(
        "\nImage corruption matrix: {} cases over a {}-byte image of {} entries (seed {SEED:#x})\n\n{}",
        cases.len(),
        fixture.bytes.len(),
        fixture.entries.len(),
        table(&tallies, "cache answers (all equal)", true)
    );
    assert_eq!(tallies.len(), FAMILIES.len(), "every family ran");
    assert_clean(&tallies);
    // The checks under test actually fire: most corrupt opens are refused
    // and corrupt payloads are withheld, not just never reached.
    let total: u64 = tallies.values().map(|t| t.payloads_withheld).sum();
    assert!(total > 0, "no payload was ever withheld");
}

/// A disk cache directory holding the fixture's entries: one compacted
/// segment with most of them, and two single-entry segments.
fn disk_dir(entries: &[EntryData]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(DiskConfig::new(dir.path())).expect("open");
    let (merged, single) = entries.split_at(entries.len() - 2);
    for entry in merged {
        assert!(cache.put(entry));
    }
    cache.gc().expect("gc");
    for entry in single {
        assert!(cache.put(entry));
    }
    cache.flush_stamps();
    dir
}

/// Where the disk cache rooted at `dir` keeps its files.
fn images(dir: &Path) -> std::path::PathBuf {
    DiskConfig::new(dir).images_dir()
}

fn segments(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(images(dir))
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.ends_with(".kimg"))
        .collect();
    names.sort();
    names
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(images(to.path())).expect("mkdir");
    for entry in std::fs::read_dir(images(from)).expect("list") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            std::fs::copy(entry.path(), images(to.path()).join(entry.file_name())).expect("copy");
        }
    }
    to
}

/// Reads every original entry from the disk cache at `dir` (and again after
/// `gc` when asked), counting what was served and comparing it.
fn audit_disk(dir: &Path, entries: &[EntryData], run_gc: bool, tally: &mut Tally) {
    let read_all = |cache: &DiskCache, tally: &mut Tally| {
        for original in entries {
            let Some(hit) = cache.get(&original.owner, &original.key) else {
                tally.payloads_withheld += 1;
                continue;
            };
            match hit.artifacts() {
                Ok(artifacts) => {
                    let same = artifacts.len() == original.artifacts.len()
                        && artifacts
                            .iter()
                            .zip(&original.artifacts)
                            .all(|(got, want)| {
                                got.kind == want.kind
                                    && got.bytes == want.bytes.as_slice()
                                    && got.entry_points == want.entry_points
                            });
                    if same {
                        tally.payloads_served += artifacts.len() as u64;
                        tally.cache_hits += 1;
                    } else {
                        tally.garbage += 1;
                        tally
                            .failures
                            .push(format!("{} served other bytes", original.name));
                    }
                }
                Err(_) => tally.payloads_withheld += 1,
            }
            let _ = hit.artifact(&ArtifactKind::Ptx);
        }
    };
    match DiskCache::open(DiskConfig::new(dir)) {
        Ok(cache) => {
            tally.opens_accepted += 1;
            read_all(&cache, tally);
            let _ = cache.verify();
            let _ = cache.stats();
            let _ = cache.ls();
            if run_gc {
                let _ = cache.gc();
                read_all(
                    &DiskCache::open(DiskConfig::new(dir)).expect("reopen"),
                    tally,
                );
            }
        }
        Err(_) => tally.opens_rejected += 1,
    }
}

#[test]
fn disk_segment_corruption_matrix_never_panics_and_never_serves_garbage() {
    let fixture = Fixture::new(SEED + 1, 14, 300).expect("fixture");
    let base = disk_dir(&fixture.entries);
    let names = segments(base.path());
    assert_eq!(names.len(), 3, "{names:?}");
    let counts = Counts {
        truncations: 16,
        bit_flips: 24,
        multi_flips: 12,
        swaps: 8,
    };
    let mut rng = Rng::new(SEED);
    let mut tallies: BTreeMap<&'static str, Tally> = BTreeMap::new();
    let mut ran = 0;
    for (s, name) in names.iter().enumerate() {
        let original = std::fs::read(images(base.path()).join(name)).expect("read segment");
        for case in cases(&original, SEED + s as u64, counts) {
            // Header-field cases are many and cheap to reach through the
            // image matrix: a third of them here.
            if case.family.starts_with("header field") && rng.below(3) != 0 {
                continue;
            }
            let dir = copy_dir(base.path());
            std::fs::write(images(dir.path()).join(name), &case.bytes).expect("corrupt");
            let run_gc = ran % 4 == 0;
            ran += 1;
            let mut tally = Tally {
                cases: 1,
                ..Tally::default()
            };
            let outcome = catch_unwind(AssertUnwindSafe(|| {
                let mut inner = Tally::default();
                audit_disk(dir.path(), &fixture.entries, run_gc, &mut inner);
                inner
            }));
            match outcome {
                Ok(inner) => tally.absorb(inner),
                Err(_) => {
                    tally.panics = 1;
                    tally
                        .failures
                        .push(format!("{name}: {}: panicked", case.label));
                }
            }
            tallies.entry(case.family).or_default().absorb(tally);
        }
    }
    println!(
        "\nDisk segment corruption matrix: {ran} cases over 3 segments ({} entries), seed {SEED:#x}\n\n{}",
        fixture.entries.len(),
        table(&tallies, "disk hits (all equal)", false)
    );
    assert_clean(&tallies);
}

/// A change made to a copy of a cache directory.
type Variant = Box<dyn Fn(&Path)>;

/// The other files of a disk cache directory: a garbled or truncated
/// `stamps` file, a segment whose name claims a huge or zero entry count,
/// a stray temporary file. None of them may panic or change what is served.
#[test]
fn disk_side_files_and_names_never_panic_or_change_what_is_served() {
    let fixture = Fixture::new(SEED + 2, 6, 200).expect("fixture");
    let base = disk_dir(&fixture.entries);
    let stamps = images(base.path()).join("stamps");
    let stamps_bytes = std::fs::read(&stamps).unwrap_or_default();
    let mut rng = Rng::new(SEED);
    let mut variants: Vec<(String, Variant)> = Vec::new();
    for cut in [
        0,
        1,
        7,
        stamps_bytes.len() / 2,
        stamps_bytes.len().saturating_sub(1),
    ] {
        let bytes = stamps_bytes[..cut.min(stamps_bytes.len())].to_vec();
        variants.push((
            format!("stamps cut at {cut}"),
            Box::new(move |dir: &Path| std::fs::write(dir.join("stamps"), &bytes).expect("write")),
        ));
    }
    for round in 0..8 {
        let mut bytes = vec![0u8; 64 + rng.below(4096)];
        rng.fill(&mut bytes);
        variants.push((
            format!("stamps replaced by random bytes, round {round}"),
            Box::new(move |dir: &Path| std::fs::write(dir.join("stamps"), &bytes).expect("write")),
        ));
    }
    let names = segments(base.path());
    for claim in ["0", "18446744073709551615", "99999999999999999999999", "x"] {
        let name = names[0].clone();
        let renamed = match name.rsplit_once('-') {
            Some((head, _)) => format!("{head}-{claim}.kimg"),
            None => format!("seg-0-0-0-{claim}.kimg"),
        };
        variants.push((
            format!("segment renamed to claim {claim} entries"),
            Box::new(move |dir: &Path| {
                std::fs::rename(dir.join(&name), dir.join(&renamed)).expect("rename")
            }),
        ));
    }
    variants.push((
        "stray temporary file".into(),
        Box::new(|dir: &Path| {
            std::fs::write(dir.join(".tmp-stray"), b"half an image").expect("write")
        }),
    ));
    let mut table = Table::new(["variant", "hits (all equal)", "misses", "garbage", "panics"]);
    for (label, apply) in &variants {
        let dir = copy_dir(base.path());
        apply(&images(dir.path()));
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let mut tally = Tally::default();
            audit_disk(dir.path(), &fixture.entries, true, &mut tally);
            tally
        }));
        let tally = outcome.unwrap_or_else(|_| panic!("{label}: panicked"));
        assert_eq!(tally.garbage, 0, "{label}: {:?}", tally.failures);
        table.row([
            label.clone(),
            tally.cache_hits.to_string(),
            tally.payloads_withheld.to_string(),
            "0".into(),
            "0".into(),
        ]);
    }
    println!("\nDisk side files ({} variants)\n\n{table}", variants.len());
}
