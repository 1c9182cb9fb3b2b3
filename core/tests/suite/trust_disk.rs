//! Signed entries in the disk tier: a signed one-entry image (a remote
//! entry written through) is kept byte for byte in a segment of its own,
//! never merged by compaction, evicted whole over the cap, and checked
//! again with `KILN_TRUSTED_KEYS`; a directory others may write to serves
//! only signed entries when keys are configured.

use std::path::{Path, PathBuf};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter, SigningKey, TrustedKeys,
    sign_image,
};

fn entry(i: u64, len: usize) -> EntryData {
    EntryData {
        owner: Digest::of(b"trust-disk-owner"),
        owner_label: "trust-disk-owner".into(),
        key: Digest::of(&i.to_le_bytes()),
        name: format!("kernel{i}"),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Object,
            entry_points: vec![format!("kernel{i}")],
            bytes: vec![i as u8; len],
        }],
    }
}

/// `entry` as the remote tier stores it: a one-entry image, signed.
fn signed_value(entry: &EntryData, key: &SigningKey) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("kiln-remote", "test"));
    writer.push(entry.clone());
    sign_image(&writer.to_bytes().expect("an image"), key).expect("signs")
}

fn open(dir: &Path, configure: impl FnOnce(&mut DiskConfig)) -> DiskCache {
    let mut config = DiskConfig::new(dir);
    configure(&mut config);
    DiskCache::open(config).expect("opens")
}

fn segments(cache: &DiskCache) -> (Vec<PathBuf>, Vec<PathBuf>) {
    let mut names: Vec<PathBuf> = std::fs::read_dir(cache.images_dir())
        .expect("lists")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("seg-"))
        })
        .collect();
    names.sort();
    names.into_iter().partition(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seg-sig"))
    })
}

fn has(cache: &DiskCache, entry: &EntryData) -> bool {
    cache.get(&entry.owner, &entry.key).is_some_and(|hit| {
        hit.artifacts()
            .ok()
            .and_then(|artifacts| artifacts.first().map(|a| a.bytes.to_vec()))
            == Some(entry.artifacts[0].bytes.clone())
    })
}

#[test]
fn signed_entries_stay_whole_through_compaction_and_are_checked_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (key, other) = (
        SigningKey::from_secret_bytes([1; 32]),
        SigningKey::from_secret_bytes([2; 32]),
    );
    let trusted = TrustedKeys::new([key.public_key()]);
    let cache = open(dir.path(), |c| c.trusted_keys = Some(trusted.clone()));
    let values: Vec<Vec<u8>> = (0..5).map(|i| signed_value(&entry(i, 100), &key)).collect();
    for (i, value) in values.iter().enumerate() {
        assert!(cache.put_signed(&entry(i as u64, 100), value));
    }
    // Many local compiles: compaction runs, and leaves signed segments be.
    for i in 100..110 {
        assert!(cache.put(&entry(i, 100)));
    }
    cache.gc().expect("compacts");
    let (signed, plain) = segments(&cache);
    assert_eq!(signed.len(), 5, "{signed:?}");
    assert_eq!(plain.len(), 1, "everything else merged: {plain:?}");
    for path in &signed {
        let bytes = std::fs::read(path).expect("reads");
        assert!(
            values.contains(&bytes),
            "{} kept byte for byte",
            path.display()
        );
    }
    drop(cache);

    // A new process: signed entries served while their signature verifies.
    let cache = open(dir.path(), |c| c.trusted_keys = Some(trusted.clone()));
    assert!((0..5).all(|i| has(&cache, &entry(i, 100))));
    assert!((100..110).all(|i| has(&cache, &entry(i, 100))));
    drop(cache);
    let rotated = open(dir.path(), |c| {
        c.trusted_keys = Some(TrustedKeys::new([other.public_key()]))
    });
    assert!((0..5).all(|i| !has(&rotated, &entry(i, 100))));
    assert!(
        (100..110).all(|i| has(&rotated, &entry(i, 100))),
        "local compiles"
    );
    drop(rotated);
    let unchecked = open(dir.path(), |_| {});
    assert!((0..5).all(|i| has(&unchecked, &entry(i, 100))));
}

#[test]
fn over_the_cap_signed_segments_are_evicted_whole() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = SigningKey::from_secret_bytes([3; 32]);
    let cache = open(dir.path(), |c| c.max_bytes = 64 << 10);
    for i in 0..40 {
        cache.put_signed(&entry(i, 4000), &signed_value(&entry(i, 4000), &key));
    }
    cache.gc().expect("compacts");
    let stats = cache.stats().expect("stats");
    assert!(
        stats.bytes <= 64 << 10,
        "{} bytes over the cap",
        stats.bytes
    );
    let (signed, plain) = segments(&cache);
    assert!(!signed.is_empty() && signed.len() < 40, "{}", signed.len());
    assert!(
        plain.is_empty(),
        "signed entries are never merged: {plain:?}"
    );
    // What is left is served; what was evicted is gone, whole.
    let served = (0..40).filter(|&i| has(&cache, &entry(i, 4000))).count();
    assert_eq!(served, signed.len());
}

#[test]
fn a_shared_directory_serves_only_signed_entries_when_keys_are_configured() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = SigningKey::from_secret_bytes([4; 32]);
    let trusted = TrustedKeys::new([key.public_key()]);
    let writer = open(dir.path(), |c| c.trust_dir = true);
    assert!(writer.put(&entry(1, 100)));
    assert!(writer.put_signed(&entry(2, 100), &signed_value(&entry(2, 100), &key)));
    drop(writer);
    let shared = open(dir.path(), |c| {
        c.trust_dir = true;
        c.trusted_keys = Some(trusted.clone());
    });
    assert!(
        !has(&shared, &entry(1, 100)),
        "anyone could have written it"
    );
    assert!(has(&shared, &entry(2, 100)));
    drop(shared);
    let private = open(dir.path(), |c| c.trusted_keys = Some(trusted));
    assert!(has(&private, &entry(1, 100)), "this user's own compile");
}

#[test]
fn an_image_that_is_not_a_signed_image_of_the_entry_is_stored_unsigned() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = SigningKey::from_secret_bytes([5; 32]);
    let cache = open(dir.path(), |_| {});
    // Another entry's signed value handed with this entry: stored as the
    // entry alone, never as the other value.
    assert!(cache.put_signed(&entry(1, 100), &signed_value(&entry(2, 100), &key)));
    let (signed, plain) = segments(&cache);
    assert_eq!((signed.len(), plain.len()), (0, 1));
    assert!(has(&cache, &entry(1, 100)));
    assert!(!has(&cache, &entry(2, 100)));
}

#[test]
fn a_signed_store_through_the_background_writer_keeps_its_signature() {
    let dir = tempfile::tempdir().expect("temp dir");
    let key = SigningKey::from_secret_bytes([3; 32]);
    let trusted = TrustedKeys::new([key.public_key()]);
    let disk = std::sync::Arc::new(open(dir.path(), |c| c.trusted_keys = Some(trusted.clone())));
    // The handle the remote tier writes through (as `add_tiers` wires it):
    // its stores run on the cache's background writer.
    let cache = kiln_core::Cache::new();
    let handle = cache.background(disk.clone());
    let owner = kiln_core::Owner::new("trust-disk-owner", "1", "target", ["-O3"]).expect("owner");
    let (signed_entry, plain_entry) = (entry(7, 100), entry(8, 100));
    let value = signed_value(&signed_entry, &key);
    handle
        .store_signed(&owner, &signed_entry, &value)
        .expect("queued");
    handle.store(&owner, &plain_entry).expect("queued");
    cache.flush();
    assert_eq!(cache.stats().stores, 2);

    let (signed, plain) = segments(&disk);
    assert_eq!(signed.len(), 1, "{signed:?}");
    assert_eq!(std::fs::read(&signed[0]).expect("reads"), value);
    assert_eq!(plain.len(), 1, "{plain:?}");
    assert!(has(&disk, &signed_entry) && has(&disk, &plain_entry));
}
