//! Invariant 4 (ARCHITECTURE.md): revalidation at load. Image entries built against another
//! fingerprint of a definition this process knows are stale; merged entries
//! start at the current world.

use crate::cache_support::{build_image, compiled, fp, key, open, owner, payload, ptx};
use kiln_core::{Cache, World};

fn image_with_deps() -> Vec<u8> {
    build_image(
        &owner(),
        [
            compiled(1, "img").dep("a.cu", fp("a.cu", 1)),
            compiled(2, "img")
                .dep("a.cu", fp("a.cu", 1))
                .dep("b.cu", fp("b.cu", 1)),
            compiled(3, "img").dep("b.cu", fp("b.cu", 1)),
            compiled(4, "img"),
        ],
        [key(1), key(2), key(3), key(4)],
    )
}

#[test]
fn invariant4_entries_with_a_changed_dep_are_stale_at_merge() {
    let cache = Cache::new();
    cache.define("a.cu", fp("a.cu", 2)); // this process has another a.cu
    cache.define("b.cu", fp("b.cu", 1)); // and the same b.cu
    let report = cache.merge_image(open(&image_with_deps()));
    assert_eq!((report.inserted, report.stale), (2, 2));
    let o = owner().digest();
    assert!(cache.lookup(&o, &key(1)).is_none());
    assert!(
        cache.lookup(&o, &key(2)).is_none(),
        "one stale dep is enough"
    );
    assert!(cache.lookup(&o, &key(3)).is_some());
    assert!(cache.lookup(&o, &key(4)).is_some());
    assert_eq!(cache.stats().merge_stale, 2);
}

#[test]
fn invariant4_a_stale_entry_is_recompiled_not_served() {
    let cache = Cache::new();
    cache.define("a.cu", fp("a.cu", 2));
    cache.merge_image(open(&image_with_deps()));
    let o = owner();
    let hit = cache
        .get_or_compile(&o, &key(1), || {
            Ok(compiled(1, "fresh").dep("a.cu", fp("a.cu", 2)))
        })
        .unwrap();
    assert_eq!(ptx(&hit), payload(1, "fresh"));
}

#[test]
fn invariant4_unknown_definitions_do_not_make_entries_stale() {
    let cache = Cache::new();
    let report = cache.merge_image(open(&image_with_deps()));
    assert_eq!((report.inserted, report.stale), (4, 0));
}

#[test]
fn invariant4_a_later_definition_closes_disagreeing_image_entries() {
    let cache = Cache::new();
    cache.merge_image(open(&image_with_deps()));
    let before = cache.world();
    let after = cache.define("a.cu", fp("a.cu", 2));
    assert!(after > before);
    let o = owner().digest();
    assert!(cache.lookup(&o, &key(1)).is_none());
    assert!(cache.lookup(&o, &key(4)).is_some());
    // Declaring a definition that every entry agrees with changes nothing.
    assert_eq!(cache.define("b.cu", fp("b.cu", 1)), after);
}

#[test]
fn invariant4_merged_entries_start_at_the_current_world() {
    let cache = Cache::new();
    cache.define("x", fp("x", 1));
    cache.insert(&owner(), &key(99), compiled(99, "m").dep("x", fp("x", 1)));
    let merged_in = cache.redefine("x", fp("x", 2));
    assert_eq!(merged_in, World(World::FIRST.0 + 1));
    cache.merge_image(open(&image_with_deps()));
    let o = owner().digest();
    let hit = cache.lookup(&o, &key(4)).unwrap();
    assert_eq!(hit.min_world(), merged_in);
    assert_eq!(hit.max_world(), World::MAX);
    // Not valid before the merge's world.
    assert!(cache.lookup_in(World::FIRST, &o, &key(4)).is_none());
}
