//! A 10,000-entry image opened through a memory map and as an embedded
//! static, looked up entry by entry.

mod common;

use common::meta;
use kiln_image::{
    Artifact, ArtifactKind, Dep, Digest, EntryData, Image, ImageWriter, Verification,
};
use kiln_test_support::{Rng, leak_aligned};

const ENTRIES: usize = 10_000;

fn entries() -> Vec<EntryData> {
    let mut rng = Rng::new(10_000);
    let owners: Vec<(Digest, String)> = (0..4)
        .map(|o| {
            (
                Digest::of(format!("owner {o}").as_bytes()),
                format!("nvrtc 13.0 sm_{}", 70 + 10 * o),
            )
        })
        .collect();
    (0..ENTRIES)
        .map(|i| {
            let (owner, label) = &owners[i % owners.len()];
            EntryData {
                owner: *owner,
                owner_label: label.clone(),
                key: Digest::of(format!("key {i}").as_bytes()),
                name: format!("gemm<{i}>"),
                min_world: 1,
                max_world: u64::MAX,
                deps: vec![Dep {
                    name: format!("gemm_tile_{}", i % 100),
                    fingerprint: Digest::of(b"v1"),
                }],
                artifacts: vec![Artifact {
                    kind: ArtifactKind::Cubin,
                    entry_points: vec![format!("gemm_{i}")],
                    bytes: rng.bytes(32 + i % 64),
                }],
            }
        })
        .collect()
}

fn check(image: &Image, entries: &[EntryData]) {
    assert_eq!(image.len(), ENTRIES);
    assert_eq!(image.owners().len(), 4);
    for entry in entries {
        let found = image
            .find(&entry.owner, &entry.key)
            .unwrap()
            .expect("written entry");
        assert_eq!(found.name(), entry.name);
        assert_eq!(
            found.artifact(0).unwrap().bytes().unwrap(),
            entry.artifacts[0].bytes.as_slice()
        );
    }
    assert_eq!(image.dep_groups().unwrap().count(), 100);
    assert_eq!(
        image.dependents_of("gemm_tile_7").unwrap().count(),
        ENTRIES / 100
    );
    image.verify_full().unwrap();
}

#[test]
fn ten_thousand_entries_through_mmap_and_static() {
    let entries = entries();
    let mut writer = ImageWriter::new(meta());
    for entry in &entries {
        writer.push(entry.clone());
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("large.kimg");
    writer.write_atomic(&path).unwrap();

    let mapped = Image::open(&path, Verification::Structural).unwrap();
    assert_eq!(mapped.storage_kind(), "mapped");
    check(&mapped, &entries);

    let embedded = Image::from_static(
        leak_aligned(&std::fs::read(&path).unwrap()),
        Verification::Structural,
    )
    .unwrap();
    assert_eq!(embedded.storage_kind(), "static");
    check(&embedded, &entries);
}
