//! Eviction: the directory stays under `max_bytes`, least recently used
//! entries go first, on the cache's own recency stamps.

use std::path::Path;
use std::time::Duration;

use crate::disk_support::{config, entry, ids};
use kiln_core::disk::{DiskCache, DiskConfig};

const LEN: usize = 6 << 10;

fn small_cache(dir: &Path) -> DiskConfig {
    let mut config = config(dir);
    config.max_bytes = 64 << 10;
    config.stamp_interval = Duration::ZERO; // stamp every use: the test needs ms order
    config
}

fn present(cache: &DiskCache, i: u64) -> bool {
    cache.get(&ids(i).0, &ids(i).1).is_some()
}

/// Stamps are in milliseconds: keep consecutive events apart.
fn tick() {
    std::thread::sleep(Duration::from_millis(3));
}

#[test]
fn the_cap_holds_and_the_least_recently_used_go_first() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(small_cache(dir.path())).expect("open");
    for i in 0..6 {
        assert!(cache.put(&entry(i, LEN)));
        tick();
    }
    // Kernels 0 and 1 stay in use while 6..16 are stored; 2..5 are not used.
    for i in 6..16 {
        assert!(present(&cache, 0) && present(&cache, 1), "in use, kept");
        tick();
        assert!(cache.put(&entry(i, LEN)));
        let stats = cache.stats().expect("stats");
        assert!(
            stats.bytes <= stats.max_bytes,
            "{} bytes over the cap of {}",
            stats.bytes,
            stats.max_bytes
        );
        tick();
    }
    // A fresh process sees the same: what was used recently is there.
    let fresh = DiskCache::open(small_cache(dir.path())).expect("open");
    assert!(present(&fresh, 0) && present(&fresh, 1), "recently used");
    assert!(present(&fresh, 15), "just stored");
    for i in 2..6 {
        assert!(
            !present(&fresh, i),
            "kernel {i}: least recently used, evicted"
        );
    }
    let stats = fresh.stats().expect("stats");
    assert!(
        stats.entries >= 6,
        "eviction stops at 90% of the cap: {stats:?}"
    );
    assert!(fresh.verify().expect("verify").is_clean());
}

#[test]
fn gc_brings_an_over_full_directory_under_a_lowered_cap() {
    let dir = tempfile::tempdir().expect("temp dir");
    let roomy = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..12 {
        assert!(roomy.put(&entry(i, LEN)));
        tick();
    }
    let before = roomy.stats().expect("stats");
    assert!(before.bytes > 64 << 10, "{before:?}");
    drop(roomy);

    let tight = DiskCache::open(small_cache(dir.path())).expect("open");
    let report = tight.gc().expect("gc");
    assert!(report.entries_evicted > 0, "{report:?}");
    assert!(report.bytes_after <= 64 << 10, "{report:?}");
    let after = tight.stats().expect("stats");
    assert!(after.bytes <= after.max_bytes, "{after:?}");
    assert_eq!(after.entries, 12 - report.entries_evicted);
    // The newest entries stayed.
    assert!(present(&tight, 11));
    assert!(!present(&tight, 0));
}

#[test]
fn an_entry_larger_than_the_cap_is_not_stored() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(small_cache(dir.path())).expect("open");
    assert!(!cache.put(&entry(1, 100 << 10)));
    assert!(cache.is_writable(), "not a failure of the directory");
    assert_eq!(cache.stats().expect("stats").segments, 0);
}
