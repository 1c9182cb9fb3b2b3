//! Invariant 3 (ARCHITECTURE.md): merging images, the first valid entry wins; and the merge
//! report (inserted, duplicate, stale, foreign owner, rejected).

use crate::cache_support::{build_image, compiled, key, open, other_owner, owner, payload, ptx};
use kiln_core::{Cache, CacheConfig, Source};

fn image_of(ns: std::ops::Range<u64>, tag: &str) -> Vec<u8> {
    build_image(&owner(), ns.clone().map(|n| compiled(n, tag)), ns.map(key))
}

#[test]
fn invariant3_an_image_never_replaces_a_valid_memory_entry() {
    let cache = Cache::new();
    let o = owner();
    cache.insert(&o, &key(1), compiled(1, "memory"));
    let report = cache.merge_image(open(&image_of(0..4, "image")));
    assert_eq!((report.inserted, report.duplicate), (3, 1));
    let hit = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(hit.source(), Source::Memory);
    assert_eq!(ptx(&hit), payload(1, "memory"));
    let from_image = cache.lookup(&o.digest(), &key(2)).unwrap();
    assert_eq!(from_image.source(), Source::Image);
}

#[test]
fn invariant3_the_first_image_wins_over_later_ones() {
    // Both sides of the duplicate check: a small later image against a large
    // earlier one, and a large later image against a small earlier one.
    for (first, second) in [(0..50, 10..12), (10..12, 0..50)] {
        let cache = Cache::new();
        let o = owner();
        let r1 = cache.merge_image(open(&image_of(first.clone(), "first")));
        let r2 = cache.merge_image(open(&image_of(second.clone(), "second")));
        assert_eq!(r1.inserted, first.end - first.start);
        let overlap = 2;
        assert_eq!(r2.duplicate, overlap);
        assert_eq!(r2.inserted, (second.end - second.start) - overlap);
        for n in 10..12 {
            let hit = cache.lookup(&o.digest(), &key(n)).unwrap();
            assert_eq!(ptx(&hit), payload(n, "first"), "first image wins for f{n}");
        }
        assert_eq!(cache.image_count(), 2);
    }
}

#[test]
fn invariant3_a_memory_duplicate_is_found_from_either_side() {
    // Memory larger than the image, then the image larger than memory.
    for (memory, image) in [(0..40, 5..7), (5..7, 0..40)] {
        let cache = Cache::new();
        let o = owner();
        for n in memory.clone() {
            cache.insert(&o, &key(n), compiled(n, "memory"));
        }
        let report = cache.merge_image(open(&image_of(image.clone(), "image")));
        assert_eq!(report.duplicate, 2, "memory {memory:?} image {image:?}");
        assert_eq!(report.total(), image.end - image.start);
        for n in 5..7 {
            assert_eq!(
                ptx(&cache.lookup(&o.digest(), &key(n)).unwrap()),
                payload(n, "memory")
            );
        }
    }
}

#[test]
fn invariant3_a_closed_entry_does_not_block_a_merge() {
    let cache = Cache::new();
    let o = owner();
    cache.define("f.cu", crate::cache_support::fp("f.cu", 1));
    cache.insert(
        &o,
        &key(1),
        compiled(1, "old").dep("f.cu", crate::cache_support::fp("f.cu", 1)),
    );
    cache.redefine("f.cu", crate::cache_support::fp("f.cu", 2));
    let image = build_image(
        &o,
        [compiled(1, "new").dep("f.cu", crate::cache_support::fp("f.cu", 2))],
        [key(1)],
    );
    let report = cache.merge_image(open(&image));
    assert_eq!((report.inserted, report.duplicate), (1, 0));
    assert_eq!(
        ptx(&cache.lookup(&o.digest(), &key(1)).unwrap()),
        payload(1, "new")
    );
}

#[test]
fn invariant3_insert_after_merge_keeps_the_image_entry() {
    let cache = Cache::new();
    let o = owner();
    cache.merge_image(open(&image_of(0..3, "image")));
    let hit = cache.insert(&o, &key(1), compiled(1, "memory"));
    assert_eq!(hit.source(), Source::Image);
    assert_eq!(ptx(&hit), payload(1, "image"));
    assert_eq!(cache.stats().duplicate_inserts, 1);
}

#[test]
fn invariant3_foreign_owners_are_counted_and_never_served() {
    let mine = owner();
    let theirs = other_owner();
    let accepted = mine.digest();
    let cache =
        Cache::with_config(CacheConfig::default().accept_owners(move |d, _| *d == accepted));
    let producer = Cache::new();
    let start = producer.snapshot();
    for n in 0..3 {
        producer.insert(&mine, &key(n), compiled(n, "mine"));
        producer.insert(&theirs, &key(n), compiled(n, "theirs"));
    }
    let report = cache.merge_image(open(&crate::cache_support::image_bytes(&producer, &start)));
    assert_eq!((report.inserted, report.foreign_owner), (3, 3));
    assert!(cache.lookup(&mine.digest(), &key(0)).is_some());
    assert!(cache.lookup(&theirs.digest(), &key(0)).is_none());
    let stats = cache.stats();
    assert_eq!((stats.merge_inserted, stats.merge_foreign_owner), (3, 3));
}

#[test]
fn invariant3_owners_never_share_entries() {
    let cache = Cache::new();
    cache.insert(&owner(), &key(1), compiled(1, "x"));
    assert!(cache.lookup(&other_owner().digest(), &key(1)).is_none());
}

#[test]
fn invariant3_reports_sum_and_print() {
    let cache = Cache::new();
    let mut total = cache.merge_image(open(&image_of(0..3, "a")));
    total.absorb(cache.merge_image(open(&image_of(2..4, "b"))));
    total.reject("broken.kimg", "image format 3, this kiln reads 2");
    assert_eq!((total.inserted, total.duplicate), (4, 1));
    let text = total.to_string();
    assert!(
        text.contains("4 inserted, 1 duplicate, 0 stale, 0 foreign owner, 1 rejected"),
        "{text}"
    );
    assert!(
        text.contains("broken.kimg: image format 3, this kiln reads 2"),
        "{text}"
    );
}
