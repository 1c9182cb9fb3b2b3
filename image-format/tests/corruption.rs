//! Bad bytes never crash a reader and never come back as data: truncations
//! and random single-bit flips are rejected at open or caught on access,
//! and every one of them fails full verification.

mod common;

use common::{meta, read_all_and_compare, sample_entries, sorted};
use kiln_image::{Image, ImageWriter, ReadError, Verification};
use kiln_test_support::Rng;

fn image_bytes() -> (Vec<u8>, Vec<kiln_image::EntryData>) {
    let entries = sample_entries(12, 31);
    let mut writer = ImageWriter::new(meta());
    for entry in &entries {
        writer.push(entry.clone());
    }
    (writer.to_bytes().unwrap(), sorted(&entries))
}

#[test]
fn truncation_at_every_64th_of_the_file_is_rejected_at_open() {
    let (bytes, _) = image_bytes();
    for step in 0..64 {
        let len = bytes.len() * step / 64;
        for level in [Verification::Structural, Verification::Full] {
            let error = Image::from_bytes(&bytes[..len], level).expect_err("truncated image");
            assert!(
                matches!(error, ReadError::Truncated { .. }),
                "cut at {len} of {}: {error}",
                bytes.len()
            );
        }
    }
}

#[test]
fn a_thousand_single_bit_flips_are_caught_and_never_returned() {
    let (bytes, expected) = image_bytes();
    let meta = meta();
    let mut rng = Rng::new(0x6b69_6c6e);
    let (mut at_open, mut on_access, mut unread) = (0, 0, 0);
    for flip in 0..1000 {
        let bit = rng.below(bytes.len() * 8);
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        let context = format!(
            "flip {flip}: bit {bit} (byte {} of {})",
            bit / 8,
            bytes.len()
        );
        assert!(
            Image::from_bytes(&flipped, Verification::Full).is_err(),
            "{context}: full verification accepted it"
        );
        match Image::from_bytes(&flipped, Verification::Structural) {
            Err(_) => at_open += 1,
            Ok(image) => match read_all_and_compare(&image, &expected, &meta) {
                Ok(true) => on_access += 1,
                // Nothing read differs: the flip hit bytes no reader uses
                // (alignment padding), which only the body checksum covers.
                Ok(false) => unread += 1,
                Err(wrong) => panic!("{context}: corrupt data returned: {wrong}"),
            },
        }
    }
    eprintln!("{at_open} at open, {on_access} on access, {unread} unread");
    assert_eq!(at_open + on_access + unread, 1000);
    // Most of the file is read by someone: padding is a small share.
    assert!(
        unread < 100,
        "{at_open} at open, {on_access} on access, {unread} unread"
    );
    assert!(
        at_open > 0 && on_access > 0,
        "{at_open} at open, {on_access} on access"
    );
}

#[test]
fn every_bit_of_the_header_is_protected() {
    let (bytes, _) = image_bytes();
    for bit in 0..kiln_image::header::HEADER_LEN * 8 {
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        assert!(
            Image::from_bytes(&flipped, Verification::Structural).is_err(),
            "header bit {bit} flipped and accepted"
        );
    }
}

#[test]
fn truncations_and_flips_through_a_memory_map() {
    // The mapped reader maps the header and index first and the payloads
    // later: the same guarantees must hold through both maps.
    let (bytes, expected) = image_bytes();
    let meta = meta();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("image.kimg");
    for step in 0..64 {
        std::fs::write(&path, &bytes[..bytes.len() * step / 64]).unwrap();
        let error = Image::open(&path, Verification::Structural).expect_err("truncated image");
        assert!(matches!(error, ReadError::Truncated { .. }), "{error}");
    }
    let mut rng = Rng::new(0x6d6d_6170);
    for flip in 0..200 {
        let bit = rng.below(bytes.len() * 8);
        let mut flipped = bytes.clone();
        flipped[bit / 8] ^= 1 << (bit % 8);
        std::fs::write(&path, &flipped).unwrap();
        assert!(
            Image::open(&path, Verification::Full).is_err(),
            "flip {flip}: bit {bit}"
        );
        if let Ok(image) = Image::open(&path, Verification::Structural)
            && let Err(wrong) = read_all_and_compare(&image, &expected, &meta)
        {
            panic!("flip {flip}: bit {bit}: corrupt data returned: {wrong}");
        }
    }
}

/// Every bit of the dependency index (group table and member lists), with
/// and without the header and index checksums recomputed: each flip is
/// caught before a wrong entry index comes back, by the group table check
/// (on first use) or by the flipped group's own check (when its entries are
/// read), and every other group still reads correctly.
#[test]
fn every_bit_of_the_dependency_index_is_protected() {
    let (bytes, sorted_entries) = image_bytes();
    let expected = common::expected_dep_groups(&sorted_entries);
    let (groups, members) =
        kiln_image::fuzz_support::dep_index_ranges(&bytes).expect("the image opens");
    assert!(!groups.is_empty() && !members.is_empty());
    let (mut by_table, mut by_group) = (0, 0);
    for resealed in [false, true] {
        for byte in groups.clone().chain(members.clone()) {
            for bit in 0..8 {
                let mut flipped = bytes.clone();
                flipped[byte] ^= 1 << bit;
                if resealed {
                    kiln_image::fuzz_support::reseal(&mut flipped);
                }
                let context = format!("byte {byte} bit {bit} (resealed: {resealed})");
                assert!(
                    Image::from_bytes(&flipped, Verification::Full).is_err(),
                    "{context}: full verification accepted it"
                );
                // The dep index is not read at open: the flip is caught on use.
                let image = Image::from_bytes(&flipped, Verification::Structural)
                    .unwrap_or_else(|error| panic!("{context}: rejected at open: {error}"));
                let Ok(found) = image.dep_groups() else {
                    by_table += 1;
                    continue;
                };
                let mut caught = false;
                for group in found {
                    let id = (group.name().to_owned(), group.fingerprint());
                    match group.entries() {
                        Ok(entries) => {
                            let entries: Vec<usize> = entries.collect();
                            assert_eq!(Some(&entries), expected.get(&id), "{context}");
                            assert_eq!(group.len(), entries.len(), "{context}");
                        }
                        Err(error) => {
                            assert!(common::rejects_dep_index(&error), "{context}");
                            assert!(group.entries().is_err(), "{context}");
                            caught = true;
                        }
                    }
                    match image.dependents_of(group.name()) {
                        Ok(dependents) => {
                            let mut dependents: Vec<usize> = dependents.collect();
                            dependents.sort_unstable();
                            let mut wanted: Vec<usize> = expected
                                .iter()
                                .filter(|((name, _), _)| name == group.name())
                                .flat_map(|(_, entries)| entries.iter().copied())
                                .collect();
                            wanted.sort_unstable();
                            assert_eq!(dependents, wanted, "{context}");
                        }
                        Err(error) => {
                            assert!(common::rejects_dep_index(&error), "{context}")
                        }
                    }
                }
                assert!(caught, "{context}: no check caught the flip");
                by_group += 1;
            }
        }
    }
    eprintln!("{by_table} caught by the group table, {by_group} by a group's own check");
    assert!(by_table > 0 && by_group > 0, "{by_table} / {by_group}");
}

/// Reading one group's entries reads only that group's list: a corrupt
/// member list fails its own group, not the table or the other groups.
#[test]
fn a_corrupt_member_list_fails_only_its_group() {
    let (bytes, sorted_entries) = image_bytes();
    let expected = common::expected_dep_groups(&sorted_entries);
    let (_, members) = kiln_image::fuzz_support::dep_index_ranges(&bytes).unwrap();
    let mut flipped = bytes.clone();
    flipped[members.start] ^= 1;
    let image = Image::from_bytes(&flipped, Verification::Structural).unwrap();
    let groups: Vec<_> = image
        .dep_groups()
        .expect("the group table is intact")
        .collect();
    assert_eq!(groups.len(), expected.len());
    let (first, rest) = groups.split_first().unwrap();
    assert!(matches!(first.entries(), Err(ReadError::DepIndex(_))));
    assert!(matches!(
        image.dependents_of(first.name()),
        Err(ReadError::DepIndex(_))
    ));
    for group in rest {
        let id = (group.name().to_owned(), group.fingerprint());
        assert_eq!(
            Some(&group.entries().unwrap().collect::<Vec<_>>()),
            expected.get(&id)
        );
    }
    assert!(image.verify_full().is_err());
}
