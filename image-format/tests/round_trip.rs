//! Writing and reading back: every field, determinism, payload alignment,
//! the dependency index, lookups, storage kinds and writer errors.

mod common;

use common::{expected_dep_groups, meta, read_all_and_compare, sample_entries, sorted};
use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageMeta, ImageWriter, ReadError,
    Verification, WriteError,
};
use kiln_test_support::leak_aligned;

fn write(entries: &[EntryData]) -> Vec<u8> {
    let mut writer = ImageWriter::new(meta());
    for entry in entries {
        writer.push(entry.clone());
    }
    writer.to_bytes().expect("valid entries")
}

#[test]
fn every_field_reads_back_as_written() {
    let entries = sample_entries(40, 1);
    let bytes = write(&entries);
    let expected = sorted(&entries);
    for level in [Verification::Structural, Verification::Full] {
        let image = Image::from_bytes(&bytes, level).unwrap();
        assert_eq!(read_all_and_compare(&image, &expected, &meta()), Ok(false));
        for (index, written) in expected.iter().enumerate() {
            assert_eq!(&image.entry(index).unwrap().to_data().unwrap(), written);
        }
    }
}

#[test]
fn header_accessors_describe_the_image() {
    let entries = sample_entries(5, 2);
    let bytes = write(&entries);
    let image = Image::from_bytes(&bytes, Verification::Full).unwrap();
    assert_eq!(image.format_version(), kiln_image::header::FORMAT_VERSION);
    assert_eq!(image.rkyv_version(), "0.8.18");
    assert_eq!(image.producer(), "kiln-image-tests 0.1.0");
    assert_eq!(image.header().entry_count, 5);
    assert_eq!(
        image.body_len() as usize,
        bytes.len() - kiln_image::header::HEADER_LEN
    );
    assert_eq!(
        image.body_checksum(),
        Digest::of(&bytes[kiln_image::header::HEADER_LEN..])
    );
    assert_eq!(image.layout(), kiln_image::ArchiveLayout::native());
    assert_eq!(image.byte_len(), bytes.len() as u64);
    assert_eq!(image.storage_kind(), "owned");
}

#[test]
fn images_are_deterministic_whatever_the_push_order() {
    let entries = sample_entries(30, 3);
    let mut reversed = entries.clone();
    reversed.reverse();
    let mut rotated = entries.clone();
    rotated.rotate_left(11);
    let first = write(&entries);
    assert_eq!(first, write(&reversed));
    assert_eq!(first, write(&rotated));
    assert_eq!(first, write(&entries));
}

#[test]
fn payloads_are_aligned_in_the_file_and_in_memory() {
    let entries = sample_entries(25, 4);
    let bytes = write(&entries);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("aligned.kimg");
    std::fs::write(&path, &bytes).unwrap();
    let owned = Image::from_bytes(&bytes, Verification::Full).unwrap();
    let mapped = Image::open(&path, Verification::Full).unwrap();
    for image in [&owned, &mapped] {
        let mut checked = 0;
        for entry in image.entries() {
            for artifact in entry.unwrap().artifacts() {
                let payload = artifact.bytes().unwrap();
                if payload.len() < 16 {
                    continue; // too short to locate unambiguously in the file
                }
                assert_eq!(payload.as_ptr() as usize % 64, 0, "address of a payload");
                let file_offset = bytes
                    .windows(payload.len())
                    .position(|window| window == payload)
                    .unwrap();
                assert_eq!(file_offset % 64, 0, "file offset of a payload");
                checked += 1;
            }
        }
        assert!(checked > 15, "{checked} payloads checked");
    }
    assert_eq!(owned.header().index_offset % 64, 0);
    assert_eq!(owned.header().payload_offset % 64, 0);
}

#[test]
fn find_hits_every_entry_and_misses_unknown_keys() {
    let entries = sample_entries(50, 5);
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    for entry in &entries {
        let found = image
            .find(&entry.owner, &entry.key)
            .unwrap()
            .expect("written entry");
        assert_eq!(found.name(), entry.name);
        assert_eq!(found.key(), entry.key);
    }
    let owner = entries[0].owner;
    assert!(
        image
            .find(&owner, &Digest::of(b"unknown key"))
            .unwrap()
            .is_none()
    );
    assert!(
        image
            .find(&Digest::of(b"unknown owner"), &entries[0].key)
            .unwrap()
            .is_none()
    );
    assert!(matches!(
        image.entry(50),
        Err(ReadError::EntryOutOfRange { index: 50, len: 50 })
    ));
}

#[test]
fn owners_cover_contiguous_sorted_ranges() {
    let entries = sample_entries(20, 6);
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    let owners = image.owners();
    assert_eq!(owners.len(), 2);
    assert!(owners[0].0 < owners[1].0);
    assert_eq!(owners[0].2.start, 0);
    assert_eq!(owners[0].2.end, owners[1].2.start);
    assert_eq!(owners[1].2.end, 20);
    for (digest, label, range) in owners {
        assert_eq!(image.find_owner(&digest), Some(range.clone()));
        for index in range {
            let entry = image.entry(index).unwrap();
            assert_eq!(entry.owner(), digest);
            assert_eq!(entry.owner_label(), label);
        }
    }
}

#[test]
fn dependency_index_lists_each_group_and_its_entries() {
    let entries = sample_entries(60, 7);
    let expected = expected_dep_groups(&sorted(&entries));
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    let groups: Vec<_> = image
        .dep_groups()
        .unwrap()
        .map(|group| {
            (
                (group.name().to_owned(), group.fingerprint()),
                group.entries().unwrap().collect::<Vec<_>>(),
            )
        })
        .collect();
    assert_eq!(groups, expected.clone().into_iter().collect::<Vec<_>>());
    for name in ["def_0", "def_3", "def_4"] {
        let mut dependents: Vec<usize> = image.dependents_of(name).unwrap().collect();
        dependents.sort_unstable();
        let mut wanted: Vec<usize> = expected
            .iter()
            .filter(|((group, _), _)| group == name)
            .flat_map(|(_, members)| members.iter().copied())
            .collect();
        wanted.sort_unstable();
        assert!(!wanted.is_empty());
        assert_eq!(dependents, wanted);
        for index in dependents {
            assert!(
                image
                    .entry(index)
                    .unwrap()
                    .deps()
                    .iter()
                    .any(|dep| dep.name == name)
            );
        }
    }
    assert_eq!(image.dependents_of("def_9").unwrap().count(), 0);
    assert_eq!(image.dependents_of("").unwrap().count(), 0);
}

#[test]
fn artifact_kinds_and_lookup_by_kind() {
    let entries = sample_entries(12, 8);
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    for entry in &entries {
        let found = image.find(&entry.owner, &entry.key).unwrap().unwrap();
        for written in &entry.artifacts {
            let artifact = found.artifact_of_kind(&written.kind).expect("kind present");
            assert_eq!(artifact.kind(), written.kind);
            assert_eq!(artifact.kind_name(), written.kind.name());
            assert_eq!(artifact.checksum(), Digest::of(&written.bytes));
        }
        assert!(matches!(
            found.artifact(entry.artifacts.len()),
            Err(ReadError::ArtifactOutOfRange { .. })
        ));
    }
}

#[test]
fn an_empty_image_round_trips() {
    let bytes = ImageWriter::new(ImageMeta::default()).to_bytes().unwrap();
    let image = Image::from_bytes(&bytes, Verification::Full).unwrap();
    assert!(image.is_empty());
    assert!(image.owners().is_empty());
    assert_eq!(image.dep_groups().unwrap().count(), 0);
    assert_eq!(image.meta(), ImageMeta::default());
}

#[test]
fn write_atomic_then_open_through_a_memory_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernels.kimg");
    let entries = sample_entries(15, 9);
    let mut writer = ImageWriter::new(meta());
    for entry in &entries {
        writer.push(entry.clone());
    }
    writer.write_atomic(&path).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), writer.to_bytes().unwrap());
    let image = Image::open(&path, Verification::Full).unwrap();
    assert_eq!(image.storage_kind(), "mapped");
    assert_eq!(
        read_all_and_compare(&image, &sorted(&entries), &meta()),
        Ok(false)
    );
    // Replacing the file does not disturb the open map.
    ImageWriter::new(ImageMeta::default())
        .write_atomic(&path)
        .unwrap();
    assert_eq!(image.len(), 15);
    image.verify_full().unwrap();
    assert_eq!(Image::open(&path, Verification::Full).unwrap().len(), 0);
    // Only the image is left in the directory: no temporary files.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
}

#[test]
fn open_reports_missing_and_tiny_files() {
    let dir = tempfile::tempdir().unwrap();
    let missing = Image::open(&dir.path().join("missing.kimg"), Verification::Structural);
    assert!(matches!(missing, Err(ReadError::Io { action: "open", .. })));
    let empty = dir.path().join("empty.kimg");
    std::fs::write(&empty, b"").unwrap();
    assert!(matches!(
        Image::open(&empty, Verification::Structural),
        Err(ReadError::Truncated { len: 0, .. })
    ));
}

#[test]
fn static_and_trusted_images_read_back() {
    let entries = sample_entries(20, 10);
    let bytes = leak_aligned(&write(&entries));
    let image = Image::from_static(bytes, Verification::Structural).unwrap();
    assert_eq!(image.storage_kind(), "static");
    assert_eq!(
        read_all_and_compare(&image, &sorted(&entries), &meta()),
        Ok(false)
    );
    let payload = image
        .entry(0)
        .unwrap()
        .artifact(0)
        .unwrap()
        .bytes()
        .unwrap();
    let range = bytes.as_ptr_range();
    assert!(
        range.contains(&payload.as_ptr()) || payload.is_empty(),
        "zero-copy"
    );

    Image::from_static(bytes, Verification::Full).unwrap();
    // SAFETY: `bytes` passed full verification on the line above and is
    // never modified (it is leaked and only read).
    let trusted = unsafe { Image::from_static_trusted(bytes) }.unwrap();
    assert!(trusted.is_trusted());
    assert_eq!(
        read_all_and_compare(&trusted, &sorted(&entries), &meta()),
        Ok(false)
    );
    trusted.verify_full().unwrap();
}

#[test]
fn misaligned_static_bytes_are_refused() {
    let entries = sample_entries(3, 11);
    let bytes = write(&entries);
    let mut shifted = vec![0u8];
    shifted.extend_from_slice(&bytes);
    let buffer = leak_aligned(&shifted);
    let result = Image::from_static(&buffer[1..], Verification::Structural);
    assert!(
        matches!(result, Err(ReadError::Misaligned { required: 64, .. })),
        "{result:?}"
    );
    // SAFETY: the bytes are a valid image (written just above); only their
    // alignment is wrong, which the header checks refuse before any access.
    let trusted = unsafe { Image::from_static_trusted(&buffer[1..]) };
    assert!(matches!(trusted, Err(ReadError::Misaligned { .. })));
}

fn entry(owner: &str, key: &str) -> EntryData {
    EntryData {
        owner: Digest::of(owner.as_bytes()),
        owner_label: owner.into(),
        key: Digest::of(key.as_bytes()),
        name: key.into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: "f".into(),
            fingerprint: Digest::of(b"f"),
        }],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec!["k".into()],
            bytes: b"ptx".to_vec(),
        }],
    }
}

fn write_err(entries: Vec<EntryData>, meta: ImageMeta) -> WriteError {
    let mut writer = ImageWriter::new(meta);
    for entry in entries {
        writer.push(entry);
    }
    writer.to_bytes().expect_err("invalid input")
}

#[test]
fn writer_rejects_invalid_input() {
    let mut renamed = entry("o", "k");
    renamed.name = "other".into();
    assert!(matches!(
        write_err(vec![entry("o", "k"), renamed], ImageMeta::default()),
        WriteError::DuplicateEntry { .. }
    ));

    let mut relabelled = entry("o", "k2");
    relabelled.owner_label = "another label".into();
    assert!(matches!(
        write_err(vec![entry("o", "k"), relabelled], ImageMeta::default()),
        WriteError::OwnerLabelConflict { .. }
    ));

    let mut backwards = entry("o", "k");
    backwards.min_world = 5;
    backwards.max_world = 4;
    assert!(matches!(
        write_err(vec![backwards], ImageMeta::default()),
        WriteError::InvalidWorlds {
            min_world: 5,
            max_world: 4,
            ..
        }
    ));

    for tag in ["", "ptx", "cubin"] {
        let mut custom = entry("o", "k");
        custom.artifacts[0].kind = ArtifactKind::Custom(tag.into());
        assert!(matches!(
            write_err(vec![custom], ImageMeta::default()),
            WriteError::InvalidString {
                what: "artifact kind",
                ..
            }
        ));
    }

    let long = ImageMeta::new("p".repeat(60), "1.0.0");
    assert!(matches!(
        write_err(vec![], long),
        WriteError::TooLarge { limit: 64, .. }
    ));
    let nul = ImageMeta::new("a\0b", "1");
    assert!(matches!(
        write_err(vec![], nul),
        WriteError::InvalidString {
            what: "producer",
            ..
        }
    ));
}

#[test]
fn find_handles_skewed_key_distributions() {
    // Keys that defeat interpolation: shared 8-byte prefixes, clustered
    // values and the extremes of the key space.
    let mut keys = vec![Digest([0; 32]), Digest([0xff; 32])];
    for i in 0..200u8 {
        let mut shared_prefix = [7u8; 32];
        shared_prefix[31] = i;
        keys.push(Digest(shared_prefix));
        let mut clustered = [0u8; 32];
        clustered[0] = 1;
        clustered[7] = i % 3;
        clustered[20] = i;
        keys.push(Digest(clustered));
    }
    keys.push(Digest::of(b"one uniform key"));
    let entries: Vec<EntryData> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| {
            let mut entry = entry("o", &format!("k{i}"));
            entry.key = *key;
            entry
        })
        .collect();
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    let owner = Digest::of(b"o");
    for (i, key) in keys.iter().enumerate() {
        let found = image.find(&owner, key).unwrap().expect("present key");
        assert_eq!(found.name(), format!("k{i}"));
    }
    let mut shared_prefix_absent = [7u8; 32];
    shared_prefix_absent[31] = 250;
    for absent in [[1u8; 32], shared_prefix_absent, [0xfe; 32]] {
        assert!(image.find(&owner, &Digest(absent)).unwrap().is_none());
    }
}

#[test]
fn images_can_be_shared_between_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Image>();
    assert_send_sync::<kiln_image::EntryRef<'static>>();
    assert_send_sync::<kiln_image::ArtifactRef<'static>>();

    // Concurrent first accesses all see the same verified bytes.
    let entries = sample_entries(16, 12);
    let image = Image::from_bytes(&write(&entries), Verification::Structural).unwrap();
    let expected = sorted(&entries);
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| assert_eq!(read_all_and_compare(&image, &expected, &meta()), Ok(false)));
        }
    });
}

#[cfg(unix)]
#[test]
fn written_images_are_readable_by_everyone() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("shared.kimg");
    kiln_image::write_file_atomic(&path, b"bytes").unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    // 0644 as the process umask allows it (Linux reports the umask in
    // /proc/self/status; elsewhere assume the usual 022).
    let umask = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Umask:"))
                .and_then(|v| u32::from_str_radix(v.trim(), 8).ok())
        })
        .unwrap_or(0o022);
    assert_eq!(mode, 0o644 & !umask, "mode {mode:o}, umask {umask:o}");
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|n| n != "shared.kimg")
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// Image bytes go out in pieces of at most `WRITE_PIECE`, in order, so that
/// the page cache never holds a freshly written image in folios larger than
/// what one fault maps anyway.
#[test]
fn image_bytes_are_written_in_pieces_of_at_most_64_kib() {
    struct Recorder {
        writes: Vec<usize>,
        bytes: Vec<u8>,
    }
    impl std::io::Write for Recorder {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.writes.push(buf.len());
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let image: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    let mut out = Recorder {
        writes: Vec::new(),
        bytes: Vec::new(),
    };
    kiln_image::write_in_pieces(&mut out, &image).unwrap();
    assert_eq!(out.bytes, image);
    assert_eq!(kiln_image::WRITE_PIECE, 64 << 10);
    assert!(out.writes.iter().all(|&n| n <= kiln_image::WRITE_PIECE));
    assert_eq!(
        out.writes.len(),
        image.len().div_ceil(kiln_image::WRITE_PIECE)
    );
}
