//! Invariant 5 (ARCHITECTURE.md): invalidation. `redefine` bumps the world and closes every
//! dependent entry, image-backed ones included; lookups in the current world
//! never return a closed entry; older worlds still see what was valid then.

use crate::cache_support::{build_image, compiled, fp, key, open, owner, payload, ptx};
use kiln_core::{Cache, Source};

#[test]
fn invariant5_redefine_closes_memory_entries() {
    let cache = Cache::new();
    let o = owner();
    cache.define("a.cu", fp("a.cu", 1));
    cache.insert(&o, &key(1), compiled(1, "v1").dep("a.cu", fp("a.cu", 1)));
    cache.insert(&o, &key(2), compiled(2, "v1").dep("b.cu", fp("b.cu", 1)));
    let w1 = cache.world();
    let w2 = cache.redefine("a.cu", fp("a.cu", 2));
    assert!(w2 > w1);
    assert_eq!(cache.world(), w2);
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    assert!(
        cache.lookup(&o.digest(), &key(2)).is_some(),
        "independent entry stays"
    );
    let old = cache.lookup_in(w1, &o.digest(), &key(1)).unwrap();
    assert_eq!(old.max_world(), w1);
    assert_eq!(cache.stats().invalidated, 1);
}

#[test]
fn invariant5_redefine_closes_image_backed_entries() {
    let cache = Cache::new();
    let o = owner();
    let image = build_image(
        &o,
        [
            compiled(1, "img").dep("a.cu", fp("a.cu", 1)),
            compiled(2, "img").dep("b.cu", fp("b.cu", 1)),
        ],
        [key(1), key(2)],
    );
    cache.merge_image(open(&image));
    let w1 = cache.world();
    assert_eq!(
        cache.lookup(&o.digest(), &key(1)).unwrap().source(),
        Source::Image
    );
    cache.redefine("a.cu", fp("a.cu", 2));
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    assert!(cache.lookup(&o.digest(), &key(2)).is_some());
    let old = cache.lookup_in(w1, &o.digest(), &key(1)).unwrap();
    assert_eq!(old.source(), Source::Image);
    assert_eq!(old.max_world(), w1);
}

#[test]
fn invariant5_after_redefine_get_or_compile_recompiles() {
    let cache = Cache::new();
    let o = owner();
    cache.define("a.cu", fp("a.cu", 1));
    let start = cache.snapshot();
    let compile = |v: u64| move || Ok(compiled(1, &format!("v{v}")).dep("a.cu", fp("a.cu", v)));
    cache.get_or_compile(&o, &key(1), compile(1)).unwrap();
    cache.redefine("a.cu", fp("a.cu", 2));
    let hit = cache.get_or_compile(&o, &key(1), compile(2)).unwrap();
    assert_eq!(ptx(&hit), payload(1, "v2"));
    assert_eq!(cache.stats().compiles, 2);
    // The new entry is exported, the closed one is not.
    assert_eq!(cache.delta(&start).len(), 1);
}

#[test]
fn invariant5_an_entry_built_against_an_old_definition_arrives_closed() {
    let cache = Cache::new();
    let o = owner();
    cache.define("a.cu", fp("a.cu", 2));
    let hit = cache.insert(&o, &key(1), compiled(1, "late").dep("a.cu", fp("a.cu", 1)));
    assert!(!hit.is_valid_in(cache.world()));
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
}

#[test]
fn invariant5_redefining_to_the_same_fingerprint_changes_nothing() {
    let cache = Cache::new();
    let o = owner();
    cache.define("a.cu", fp("a.cu", 1));
    cache.insert(&o, &key(1), compiled(1, "v1").dep("a.cu", fp("a.cu", 1)));
    let w = cache.world();
    assert_eq!(cache.redefine("a.cu", fp("a.cu", 1)), w);
    assert!(cache.lookup(&o.digest(), &key(1)).is_some());
}

#[test]
fn invariant5_an_entry_is_not_valid_before_it_was_recorded() {
    let cache = Cache::new();
    let o = owner();
    cache.define("a.cu", fp("a.cu", 1));
    cache.insert(&o, &key(9), compiled(9, "x").dep("a.cu", fp("a.cu", 1)));
    let w1 = cache.world();
    let w2 = cache.redefine("a.cu", fp("a.cu", 2));
    cache.insert(&o, &key(1), compiled(1, "late"));
    assert!(cache.lookup_in(w2, &o.digest(), &key(1)).is_some());
    assert!(cache.lookup_in(w1, &o.digest(), &key(1)).is_none());
}
