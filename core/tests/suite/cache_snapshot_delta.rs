//! Invariants 1 (snapshot O(1), delta O(new)), 2 (only unbounded, locally
//! compiled entries are exported) and 11 (nothing process-specific in an
//! image) of ARCHITECTURE.md.

use crate::cache_support::{compiled, fp, image_bytes, key, open, owner};
use kiln_core::{Cache, Source, World};

#[test]
fn invariant1_snapshot_is_a_position_in_the_insertion_log() {
    let cache = Cache::new();
    let o = owner();
    for n in 0..1000 {
        cache.insert(&o, &key(n), compiled(n, "old"));
    }
    let s = cache.snapshot();
    assert_eq!(s.seq(), 1000);
    assert_eq!(s.world(), cache.world());
    for n in 1000..1003 {
        cache.insert(&o, &key(n), compiled(n, "new"));
    }
    let delta = cache.delta(&s);
    let names: Vec<&str> = delta.entries().map(|(_, _, name)| name).collect();
    assert_eq!(
        names,
        ["f1000", "f1001", "f1002"],
        "exactly the new entries, in order"
    );
    // A second snapshot sees the new ones as old.
    assert!(cache.delta(&cache.snapshot()).is_empty());
}

#[test]
fn invariant1_snapshots_do_not_share_state() {
    // The seed design copied the cache and diffed it; with shared vectors a
    // later insert showed up in both copies. Snapshots here are plain marks.
    let cache = Cache::new();
    let o = owner();
    let s0 = cache.snapshot();
    cache.insert(&o, &key(1), compiled(1, "a"));
    let s1 = cache.snapshot();
    cache.insert(&o, &key(2), compiled(2, "a"));
    assert_eq!(cache.delta(&s0).len(), 2);
    assert_eq!(cache.delta(&s1).len(), 1);
    assert_eq!(s0.seq() + 1, s1.seq());
}

#[test]
fn invariant2_an_entry_invalidated_after_the_snapshot_is_not_exported() {
    let cache = Cache::new();
    let o = owner();
    cache.define("add.cu", fp("add.cu", 1));
    let s = cache.snapshot();
    cache.insert(
        &o,
        &key(1),
        compiled(1, "v1").dep("add.cu", fp("add.cu", 1)),
    );
    cache.insert(
        &o,
        &key(2),
        compiled(2, "v1").dep("mul.cu", fp("mul.cu", 1)),
    );
    cache.redefine("add.cu", fp("add.cu", 2));
    let delta = cache.delta(&s);
    let names: Vec<&str> = delta.entries().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["f2"]);
}

#[test]
fn invariant2_entries_merged_from_an_image_are_not_re_exported() {
    let producer = Cache::new();
    let o = owner();
    let start = producer.snapshot();
    producer.insert(&o, &key(1), compiled(1, "theirs"));
    let bytes = image_bytes(&producer, &start);

    let cache = Cache::new();
    let s = cache.snapshot();
    assert_eq!(cache.merge_image(open(&bytes)).inserted, 1);
    // The precompile block asks for f1 (served by the image) and compiles f2.
    let hit = cache
        .get_or_compile(&o, &key(1), || Err("must not compile".into()))
        .unwrap();
    assert_eq!(hit.source(), Source::Image);
    cache
        .get_or_compile(&o, &key(2), || Ok(compiled(2, "ours")))
        .unwrap();
    // Inserting f1 again (first valid entry wins) does not make it ours.
    cache.insert(&o, &key(1), compiled(1, "ours"));
    let delta = cache.delta(&s);
    let names: Vec<&str> = delta.entries().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["f2"]);
}

#[test]
fn invariant11_session_dependent_entries_are_never_exported() {
    let cache = Cache::new();
    let o = owner();
    let s = cache.snapshot();
    cache.insert(&o, &key(1), compiled(1, "plain"));
    cache.insert(&o, &key(2), compiled(2, "handle").session_dependent());
    // Cached in memory all the same.
    assert!(cache.lookup(&o.digest(), &key(2)).is_some());
    let delta = cache.delta(&s);
    let names: Vec<&str> = delta.entries().map(|(_, _, n)| n).collect();
    assert_eq!(names, ["f1"]);
}

#[test]
fn invariant2_the_delta_round_trips_through_an_image() {
    let cache = Cache::new();
    let o = owner();
    let s = cache.snapshot();
    cache.insert(
        &o,
        &key(7),
        compiled(7, "x").dep("seven.cu", fp("seven.cu", 1)),
    );
    let bytes = image_bytes(&cache, &s);
    let image = open(&bytes);
    assert_eq!(image.len(), 1);
    let entry = image.find(&o.digest(), key(7).digest()).unwrap().unwrap();
    assert_eq!(entry.name(), "f7");
    assert_eq!(entry.min_world(), World::FIRST.0, "worlds are normalised");
    assert_eq!(entry.max_world(), World::MAX.0);
    assert_eq!(entry.deps()[0].name, "seven.cu");
}
