//! Compressed payload regions: a compressed image reads as its plain
//! counterpart, decompresses only the groups whose payloads are read (once),
//! stays deterministic, and refuses forged group tables and frames with a
//! typed error, failing only the payloads of the group concerned.

mod common;

use common::{compressible, meta, sample_entries};
use kiln_image::fuzz_support::forge::{Forge, GROUP_STORED, GROUP_ZSTD, PayloadGroupRecord};
use kiln_image::{EntryData, GROUP_SPLIT, Image, ImageError, ImageWriter, ReadError, Verification};

/// 40 entries of two owners, with payloads that compress as code does.
fn entries() -> Vec<EntryData> {
    let mut entries = sample_entries(40, 7);
    compressible(&mut entries);
    entries
}

fn write(entries: &[EntryData], level: Option<i32>) -> Vec<u8> {
    let mut writer = ImageWriter::new(meta());
    for entry in entries {
        writer.push(entry.clone());
    }
    match level {
        Some(level) => writer.to_compressed_bytes(level),
        None => writer.to_bytes(),
    }
    .expect("valid entries")
}

fn open(bytes: &[u8]) -> Result<Image, ReadError> {
    Image::from_bytes(bytes, Verification::Structural)
}

#[test]
fn a_compressed_image_reads_as_the_plain_one() -> Result<(), ImageError> {
    let entries = entries();
    let plain = write(&entries, None);
    let compressed = write(&entries, Some(19));
    let (stored, raw) = (
        Forge::read(&compressed)?.payloads.len(),
        Forge::read(&plain)?.payloads.len(),
    );
    assert!(stored * 3 < raw, "{stored} payload bytes stored, {raw} raw");
    let (plain, compressed) = (open(&plain)?, open(&compressed)?);
    assert!(!plain.is_compressed() && compressed.is_compressed());
    assert_eq!(compressed.payload_group_count(), 2, "one group per owner");
    assert_eq!(compressed.raw_payload_len(), plain.raw_payload_len());
    assert_eq!(compressed.len(), plain.len());
    for index in 0..plain.len() {
        let (a, b) = (plain.entry(index)?, compressed.entry(index)?);
        assert_eq!(a.to_data()?, b.to_data()?);
        for artifact in b.artifacts() {
            let bytes = artifact.bytes()?;
            assert_eq!(bytes.as_ptr() as usize % 64, 0, "payloads stay aligned");
        }
    }
    compressed.verify_full()?;
    Image::from_bytes(&write(&entries, Some(3)), Verification::Full)?;
    Ok(())
}

#[test]
fn only_the_group_a_payload_is_read_from_is_decompressed_once() -> Result<(), ImageError> {
    let image = open(&write(&entries(), Some(19)))?;
    assert_eq!(image.decompressed(), (0, 0), "opening decompresses nothing");
    let owners = image.owners();
    // Lookups read the index only.
    for index in owners[0].2.clone() {
        image.find(&owners[0].0, &image.entry(index)?.key())?;
    }
    assert_eq!(image.decompressed(), (0, 0));
    let first = owners[0]
        .2
        .clone()
        .find(|&index| {
            image
                .entry(index)
                .is_ok_and(|e| e.artifacts().any(|a| !a.is_empty()))
        })
        .expect("an entry with a payload");
    let entry = image.entry(first)?;
    let bytes = entry.artifact(0)?.bytes()?;
    let (groups, held) = image.decompressed();
    assert_eq!(groups, 1);
    assert!(
        held > 0 && held < image.raw_payload_len(),
        "{held} bytes held"
    );
    // The same payload again, and every other payload of the owner: the
    // same buffer, nothing more decompressed.
    assert_eq!(entry.artifact(0)?.bytes()?.as_ptr(), bytes.as_ptr());
    for index in owners[0].2.clone() {
        for artifact in image.entry(index)?.artifacts() {
            artifact.bytes()?;
        }
    }
    assert_eq!(image.decompressed(), (1, held));
    for index in 0..image.len() {
        image.entry(index)?.to_data()?;
    }
    assert_eq!(image.decompressed(), (2, image.raw_payload_len()));
    Ok(())
}

#[test]
fn compressed_images_are_deterministic() {
    let entries = entries();
    let mut reversed = entries.clone();
    reversed.reverse();
    assert_eq!(write(&entries, Some(19)), write(&reversed, Some(19)));
}

#[test]
fn a_group_that_does_not_pay_is_stored_as_is() -> Result<(), ImageError> {
    // Random bytes do not compress: the group is stored as it is, and its
    // payloads are borrowed from the image as a plain image's are.
    let mut entries = sample_entries(12, 9);
    let mut rng = kiln_test_support::Rng::new(9);
    for artifact in entries.iter_mut().flat_map(|entry| &mut entry.artifacts) {
        artifact.bytes = rng.bytes(4096);
    }
    let bytes = write(&entries, Some(19));
    let forged = Forge::read(&bytes)?;
    assert!(!forged.index.payload_groups.is_empty());
    assert!(
        forged
            .index
            .payload_groups
            .iter()
            .all(|group| group.encoding == GROUP_STORED)
    );
    let image = open(&bytes)?;
    for index in 0..image.len() {
        image.entry(index)?.to_data()?;
    }
    assert_eq!(image.decompressed(), (0, 0));
    Ok(())
}

/// A change of a group table and of the stored bytes.
type Change = fn(&mut Vec<PayloadGroupRecord>, &mut Vec<u8>);

/// The compressed image with its group table changed by `change`, every
/// checksum recomputed.
fn forged_groups(change: impl FnOnce(&mut Vec<PayloadGroupRecord>, &mut Vec<u8>)) -> Vec<u8> {
    let mut forged = Forge::read(&write(&entries(), Some(19))).expect("a valid image");
    change(&mut forged.index.payload_groups, &mut forged.payloads);
    forged.to_bytes().expect("records serialize")
}

fn group_error(bytes: &[u8]) -> String {
    match open(bytes) {
        Err(error @ ReadError::PayloadGroup { .. }) => error.to_string(),
        other => panic!("expected a payload group error at open, got {other:?}"),
    }
}

#[test]
fn forged_group_tables_are_refused_at_open() {
    // Declaring more than 1024 raw bytes per stored byte: refused before
    // anything is allocated.
    let greedy = forged_groups(|groups, _| {
        let last = groups.last_mut().expect("groups");
        last.raw.len = last.stored.len * 1025;
    });
    assert!(group_error(&greedy).contains("the most this reader decompresses"));
    // A gap in the raw region, an overlap of stored bytes, an unknown
    // encoding, reserved flags, a stored group whose lengths differ, an
    // empty group.
    let cases: [(&str, Change); 6] = [
        ("continues at", |groups, _| groups[1].raw.offset += 64),
        ("are not at", |groups, _| groups[1].stored.offset -= 64),
        ("unknown encoding", |groups, _| groups[0].encoding = 7),
        ("reserved flags", |groups, _| groups[0].flags = 1),
        ("stored as is", |groups, _| {
            groups[0].encoding = GROUP_STORED
        }),
        ("none empty", |groups, _| {
            let mut empty = groups[1];
            empty.raw.len = 0;
            empty.encoding = GROUP_ZSTD;
            groups.insert(1, empty);
        }),
    ];
    for (expected, change) in cases {
        let message = group_error(&forged_groups(change));
        assert!(
            message.contains(expected),
            "{expected:?} not in {message:?}"
        );
    }
}

#[test]
fn a_corrupt_frame_fails_only_its_groups_payloads() -> Result<(), ImageError> {
    let entries = entries();
    let plain = open(&write(&entries, None))?;
    // A byte in the middle of group 0's frame.
    let bytes = forged_groups(|groups, stored| {
        let middle = groups[0].stored.offset + groups[0].stored.len / 2;
        stored[middle as usize] ^= 0x5a;
    });
    let image = open(&bytes)?;
    let owners = image.owners();
    let mut failed = 0;
    for (group, (_, _, range)) in owners.iter().enumerate() {
        for index in range.clone() {
            let entry = image.entry(index)?;
            for artifact in entry.artifacts().filter(|a| !a.is_empty()) {
                let expected = plain.entry(index)?.artifact(artifact.position())?;
                // Twice: a failure is remembered. Never other bytes.
                for read in [artifact.bytes(), artifact.bytes()] {
                    match read {
                        Ok(bytes) => assert_eq!(bytes, expected.bytes()?),
                        Err(
                            ReadError::PayloadGroup { group: 0, .. }
                            | ReadError::PayloadChecksum { .. },
                        ) if group == 0 => failed += 1,
                        Err(error) => panic!("group {group}: {error}"),
                    }
                }
            }
        }
    }
    assert!(failed > 0, "the corrupt frame served every payload");
    assert!(Image::from_bytes(&bytes, Verification::Full).is_err());
    Ok(())
}

#[test]
fn a_frame_of_another_length_than_declared_is_refused() -> Result<(), ImageError> {
    // Group 0's frame replaced by a valid frame of 64 bytes fewer: the
    // stored region re-tiled, every checksum recomputed.
    let mut forged = Forge::read(&write(&entries(), Some(19)))?;
    let groups = forged.index.payload_groups.clone();
    let raw_len = groups[0].raw.len as usize;
    let short = zstd::bulk::compress(&vec![1u8; raw_len - 64], 3).expect("compresses");
    let mut stored = short.clone();
    stored.resize(stored.len().div_ceil(64) * 64, 0);
    let rest = &forged.payloads[groups[1].stored.offset as usize..];
    forged.index.payload_groups[0].stored.len = short.len() as u64;
    forged.index.payload_groups[1].stored.offset = stored.len() as u64;
    stored.extend_from_slice(rest);
    forged.payloads = stored;
    let bytes = forged.to_bytes()?;
    let image = open(&bytes)?;
    let first = image.owners()[0].2.clone();
    let read = first
        .filter_map(|index| image.entry(index).ok())
        .find_map(|entry| {
            entry
                .artifacts()
                .find(|a| !a.is_empty())
                .map(|a| a.bytes().map(<[u8]>::len))
        });
    match read {
        Some(Err(ReadError::PayloadGroup { group: 0, problem })) => {
            assert!(problem.contains("decompress"), "{problem}");
        }
        other => panic!("expected group 0 to fail, got {other:?}"),
    }
    Ok(())
}

/// `count` entries of two owners with one compressible artifact of `len`
/// bytes each.
fn large_entries(count: usize, len: usize) -> Vec<EntryData> {
    let mut entries = sample_entries(count, 11);
    for entry in &mut entries {
        entry.artifacts.truncate(1);
        entry.artifacts[0].bytes = vec![0; len];
    }
    compressible(&mut entries);
    entries
}

#[test]
fn groups_hold_one_owner_and_at_most_the_split_but_for_one_larger_entry() -> Result<(), ImageError>
{
    let quarter = (GROUP_SPLIT / 4) as usize;
    // Per owner: 11 entries of a quarter of the split, and one of twice the
    // split.
    let mut entries = large_entries(22, quarter);
    let mut huge = large_entries(2, 2 * GROUP_SPLIT as usize);
    for (n, entry) in huge.iter_mut().enumerate() {
        entry.key = kiln_image::Digest::of(format!("huge {n}").as_bytes());
        entry.name = format!("huge {n}");
    }
    entries.extend(huge);
    let bytes = write(&entries, Some(3));
    let forged = Forge::read(&bytes)?;
    let groups = &forged.index.payload_groups;
    let mut sizes = Vec::new();
    for group in groups {
        let (start, end) = (group.raw.offset, group.raw.offset + group.raw.len);
        let owners: std::collections::BTreeSet<u32> = forged
            .index
            .entries
            .iter()
            .filter(|e| e.payloads.len > 0 && e.payloads.offset < end)
            .filter(|e| e.payloads.offset + e.payloads.len > start)
            .map(|e| e.owner)
            .collect();
        assert_eq!(
            owners.len(),
            1,
            "group {start}..{end} holds owners {owners:?}"
        );
        let held = forged
            .index
            .entries
            .iter()
            .filter(|e| e.payloads.len > 0 && e.payloads.offset >= start)
            .filter(|e| e.payloads.offset + e.payloads.len <= end)
            .count();
        assert!(
            group.raw.len <= GROUP_SPLIT.next_multiple_of(64) || held == 1,
            "group {start}..{end} holds {held} entries"
        );
        assert_eq!(group.encoding, GROUP_ZSTD);
        sizes.push((held, group.raw.len > GROUP_SPLIT));
    }
    // Each large entry alone; the others at most four to a group (entries
    // are in key order, so a large one may fall between them).
    assert_eq!(sizes.iter().filter(|&&size| size == (1, true)).count(), 2);
    let small: Vec<usize> = sizes
        .iter()
        .filter(|(_, large)| !large)
        .map(|&(held, _)| held)
        .collect();
    assert_eq!(small.iter().sum::<usize>(), 22);
    assert!(
        small.iter().all(|&held| (1..=4).contains(&held)),
        "{sizes:?}"
    );
    assert!((6..=8).contains(&small.len()), "{sizes:?}");
    // Reading one entry decompresses its group only.
    let image = open(&bytes)?;
    let plain = open(&write(&entries, None))?;
    let entry = image.entry(0)?;
    assert_eq!(
        entry.artifact(0)?.bytes()?,
        plain.entry(0)?.artifact(0)?.bytes()?
    );
    let (decompressed, held) = image.decompressed();
    assert_eq!(decompressed, 1);
    assert!(held <= GROUP_SPLIT, "{held} bytes held for one entry");
    image.verify_full()?;
    Ok(())
}

#[test]
fn a_frame_of_the_declared_length_but_other_content_fails_its_checksums() -> Result<(), ImageError>
{
    // Group 0's frame replaced by a valid frame of exactly its raw length,
    // of other bytes: it decompresses, and every non-empty payload read
    // from it fails its BLAKE3, with a typed error, never other bytes.
    let mut forged = Forge::read(&write(&entries(), Some(19)))?;
    let groups = forged.index.payload_groups.clone();
    let other =
        zstd::bulk::compress(&vec![7u8; groups[0].raw.len as usize], 3).expect("compresses");
    let mut stored = other.clone();
    stored.resize(stored.len().div_ceil(64) * 64, 0);
    let rest = &forged.payloads[groups[1].stored.offset as usize..];
    forged.index.payload_groups[0].stored.len = other.len() as u64;
    forged.index.payload_groups[1].stored.offset = stored.len() as u64;
    stored.extend_from_slice(rest);
    forged.payloads = stored;
    let image = open(&forged.to_bytes()?)?;
    let mut refused = 0;
    for index in image.owners()[0].2.clone() {
        for artifact in image.entry(index)?.artifacts().filter(|a| !a.is_empty()) {
            match artifact.bytes() {
                Err(ReadError::PayloadChecksum { .. }) => refused += 1,
                other => panic!("expected a checksum failure, got {other:?}"),
            }
        }
    }
    assert!(refused > 0);
    assert_eq!(image.decompressed().0, 1, "the frame itself decompressed");
    Ok(())
}
