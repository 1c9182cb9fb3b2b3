//! Extra tiers and the always-compile switch.

mod cache_support;

use std::collections::HashMap;
use std::sync::Mutex;

use cache_support::{compiled, fp, key, owner, payload, ptx};
use kiln_core::{Cache, CacheConfig, Error, Key, Owner, Source, Tier};
use kiln_image::{Digest, EntryData};

/// A tier that keeps entries in a map (what the disk tier does with files).
#[derive(Default)]
struct MapTier {
    entries: Mutex<HashMap<(Digest, Digest), EntryData>>,
    loads: Mutex<u32>,
}

impl Tier for MapTier {
    fn name(&self) -> &str {
        "map"
    }

    fn load(&self, owner: &Owner, key: &Key) -> Result<Option<EntryData>, Error> {
        *self.loads.lock().unwrap() += 1;
        Ok(self
            .entries
            .lock()
            .unwrap()
            .get(&(owner.digest(), *key.digest()))
            .cloned())
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        self.entries
            .lock()
            .unwrap()
            .insert((owner.digest(), entry.key), entry.clone());
        Ok(())
    }
}

/// A tier that always fails.
struct BrokenTier;

impl Tier for BrokenTier {
    fn name(&self) -> &str {
        "broken"
    }

    fn load(&self, _: &Owner, key: &Key) -> Result<Option<EntryData>, Error> {
        Err(Error::KeyInput {
            label: key.to_hex(),
            path: "/nonexistent".into(),
            source: std::io::Error::other("disk on fire"),
        })
    }

    fn store(&self, _: &Owner, _: &EntryData) -> Result<(), Error> {
        Err(Error::KeyInput {
            label: String::new(),
            path: "/nonexistent".into(),
            source: std::io::Error::other("disk on fire"),
        })
    }
}

/// A cache whose only tier is `tier`, sharing it through a leaked reference.
fn cache_with(tier: &'static MapTier, config: CacheConfig) -> Cache {
    struct Shared(&'static MapTier);
    impl Tier for Shared {
        fn name(&self) -> &str {
            self.0.name()
        }
        fn load(&self, o: &Owner, k: &Key) -> Result<Option<EntryData>, Error> {
            self.0.load(o, k)
        }
        fn store(&self, o: &Owner, e: &EntryData) -> Result<(), Error> {
            self.0.store(o, e)
        }
    }
    let cache = Cache::with_config(config);
    cache.add_tier(Box::new(BrokenTier));
    cache.add_tier(Box::new(Shared(tier)));
    cache
}

#[test]
fn a_compile_is_stored_in_tiers_and_served_from_them_next_process() {
    let tier: &'static MapTier = Box::leak(Box::default());
    let o = owner();
    let first = cache_with(tier, CacheConfig::default());
    first
        .get_or_compile(&o, &key(1), || Ok::<_, std::io::Error>(compiled(1, "disk")))
        .unwrap();
    first
        .get_or_compile(&o, &key(2), || {
            Ok::<_, std::io::Error>(compiled(2, "handle").session_dependent())
        })
        .unwrap();
    assert_eq!(
        tier.entries.lock().unwrap().len(),
        1,
        "session-dependent entries stay in memory"
    );

    // A "new process": an empty cache with the same tier.
    let second = cache_with(tier, CacheConfig::default());
    let start = second.snapshot();
    let hit = second
        .get_or_compile(&o, &key(1), || Err("must not compile"))
        .unwrap();
    assert_eq!(hit.source(), Source::Tier);
    assert_eq!(ptx(&hit), payload(1, "disk"));
    let stats = second.stats();
    assert_eq!((stats.hits_tier, stats.compiles), (1, 0));
    // Then it is in memory.
    assert_eq!(
        second.lookup(&o.digest(), &key(1)).unwrap().source(),
        Source::Tier
    );
    // A tier memoises local compiles: the precompile block still exports it.
    assert_eq!(second.delta(&start).len(), 1);
}

#[test]
fn a_stale_tier_entry_is_ignored() {
    let tier: &'static MapTier = Box::leak(Box::default());
    let o = owner();
    let first = cache_with(tier, CacheConfig::default());
    first
        .get_or_compile(&o, &key(1), || {
            Ok::<_, std::io::Error>(compiled(1, "v1").dep("a.cu", fp("a.cu", 1)))
        })
        .unwrap();
    let second = cache_with(tier, CacheConfig::default());
    second.define("a.cu", fp("a.cu", 2));
    let hit = second
        .get_or_compile(&o, &key(1), || {
            Ok::<_, std::io::Error>(compiled(1, "v2").dep("a.cu", fp("a.cu", 2)))
        })
        .unwrap();
    assert_eq!(ptx(&hit), payload(1, "v2"));
    assert_eq!(second.stats().hits_tier, 0);
}

#[test]
fn always_compile_skips_every_cached_tier_but_still_records() {
    let tier: &'static MapTier = Box::leak(Box::default());
    let o = owner();
    let cache = cache_with(tier, CacheConfig::default().always_compile(true));
    let start = cache.snapshot();
    for round in ["a", "b"] {
        let hit = cache
            .get_or_compile(&o, &key(1), || Ok::<_, std::io::Error>(compiled(1, round)))
            .unwrap();
        assert_eq!(
            ptx(&hit),
            payload(1, round),
            "round {round} compiled afresh"
        );
    }
    assert_eq!(*tier.loads.lock().unwrap(), 0, "tiers are not asked");
    assert_eq!(cache.stats().compiles, 2);
    // Recorded: the newest is what a lookup and the delta see.
    assert_eq!(
        ptx(&cache.lookup(&o.digest(), &key(1)).unwrap()),
        payload(1, "b")
    );
    let delta = cache.delta(&start);
    assert_eq!(delta.len(), 1);
    let data = delta.to_writer(kiln_image::ImageMeta::default());
    assert_eq!(data.len(), 1);
}
