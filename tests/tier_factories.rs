//! An application that enables the feature `redis` and names nothing of
//! `kiln::redis` still gets the remote tier's factory linked, so that
//! `kiln::global()` adds the remote tier when `KILN_REMOTE_CACHE` is set.
#![cfg(feature = "redis")]

#[test]
fn the_remote_tier_factory_comes_with_the_feature() {
    let names: Vec<&str> = kiln::registry::tier_factories()
        .iter()
        .map(|factory| factory.name())
        .collect();
    assert_eq!(names, ["remote"]);
}
