//! What a new process finds and opens: few segment files however many
//! stores came before, the base segment opened with the directory (and
//! found again if it is replaced before the first lookup), and tier hits
//! that borrow their bytes from the segment instead of copying them.

use std::fs;
use std::sync::Arc;

use crate::disk_support::{
    compacted, compile, compiled, config, default_len, entry, ids, key, owner, segment_files,
};
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{ArtifactKind, Cache, Source};

fn assert_hit(cache: &DiskCache, i: u64) {
    let (owner, key) = ids(i);
    let hit = cache
        .get(&owner, &key)
        .unwrap_or_else(|| panic!("kernel {i} is on disk"));
    let bytes = hit.artifact(&ArtifactKind::Ptx).expect("readable");
    assert_eq!(bytes, Some(&compile(i, default_len(i))[..]), "kernel {i}");
}

#[test]
fn the_default_policy_leaves_at_most_three_segments_after_every_store() {
    let dir = tempfile::tempdir().expect("temp dir");
    // The default configuration, not the tests' (compaction after 4).
    let cache = DiskCache::open(DiskConfig::new(dir.path())).expect("open");
    let mut most = 0;
    for i in 0..60 {
        assert!(cache.put(&entry(i, default_len(i))), "kernel {i} stored");
        let files = segment_files(dir.path());
        assert!(files.len() <= 3, "after {} stores: {files:?}", i + 1);
        most = most.max(files.len());
    }
    assert_eq!(most, 3, "small segments are allowed, a few");
    assert!(segment_files(dir.path()).contains(&"seg-base.kimg".to_owned()));
    let fresh = DiskCache::open(DiskConfig::new(dir.path())).expect("open");
    for i in 0..60 {
        assert_hit(&fresh, i);
    }
    assert_eq!(fresh.stats().expect("stats").entries, 60);
}

#[test]
fn a_base_replaced_between_open_and_the_first_lookup_is_found_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    compacted(dir.path(), 3);
    let writer = DiskCache::open(config(dir.path())).expect("open");

    // Opening the cache opens the base file (not mapped yet) ...
    let reader = DiskCache::open(config(dir.path())).expect("open");
    // ... which another process then replaces with one holding more.
    for i in 3..6 {
        assert!(writer.put(&entry(i, default_len(i))));
    }
    writer.gc().expect("gc");
    assert_eq!(segment_files(dir.path()), ["seg-base.kimg"]);

    // The reader maps the old base it opened, misses there, lists the
    // directory and finds the new base.
    for i in (0..6).rev() {
        assert_hit(&reader, i);
    }
    assert_eq!(reader.session().misses, 0);
}

#[test]
fn a_disk_tier_hit_borrows_the_segments_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    // Small segments are read into memory, large ones mapped: both kinds.
    let lens = [default_len(1), 100 << 10];
    let writer = DiskCache::open(config(dir.path())).expect("open");
    for (i, len) in (0..).zip(lens) {
        assert!(writer.put(&entry(i, len)));
    }

    let disk = Arc::new(DiskCache::open(config(dir.path())).expect("open"));
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&disk)));
    for (i, len) in (0..).zip(lens) {
        let hit = cache
            .get_or_compile(&owner(), &key(i), || Ok(compiled(i, len)))
            .expect("a hit");
        assert_eq!(hit.source(), Source::Tier, "kernel {i}");
        let bytes = hit.artifact(&ArtifactKind::Ptx).expect("a PTX artifact");
        assert_eq!(bytes, &compile(i, len)[..]);
        // The very bytes of the segment the disk cache holds: no copy.
        let (owner, key) = ids(i);
        let on_disk = disk.get(&owner, &key).expect("on disk");
        let segment = on_disk.artifact(&ArtifactKind::Ptx).expect("readable");
        assert_eq!(
            segment.map(<[u8]>::as_ptr),
            Some(bytes.as_ptr()),
            "kernel {i}"
        );
    }
    assert_eq!(cache.stats().compiles, 0);
}

#[test]
fn a_disk_tier_hit_checks_a_payload_when_it_is_used_and_a_bad_one_is_recompiled() {
    let dir = tempfile::tempdir().expect("temp dir");
    let len = 100 << 10;
    let writer = DiskCache::open(config(dir.path())).expect("open");
    assert!(writer.put(&entry(7, len)));
    drop(writer);
    // Flip one payload byte of the (only) segment, in place.
    let files = segment_files(dir.path());
    assert_eq!(files.len(), 1);
    let path = DiskConfig::new(dir.path()).images_dir().join(&files[0]);
    let mut bytes = fs::read(&path).expect("segment");
    let payload = compile(7, len);
    let at = bytes
        .windows(64)
        .position(|w| w == &payload[..64])
        .expect("the payload is in the segment");
    bytes[at + 1000] ^= 1;
    fs::write(&path, &bytes).expect("rewrite");

    let cache = Cache::new();
    cache.add_tier(Box::new(DiskCache::open(config(dir.path())).expect("open")));
    let hit = cache
        .get_or_compile(&owner(), &key(7), || Err("must not compile yet".into()))
        .expect("the record is sound: a hit");
    assert_eq!(hit.source(), Source::Tier);
    assert_eq!(
        hit.artifact(&ArtifactKind::Ptx),
        None,
        "never the bad bytes"
    );
    let again = cache
        .get_or_compile(&owner(), &key(7), || Ok(compiled(7, len)))
        .expect("recompiled");
    assert_eq!(again.source(), Source::Memory);
    assert_eq!(again.artifact(&ArtifactKind::Ptx), Some(&payload[..]));
    assert_eq!(cache.stats().compiles, 1);
}
