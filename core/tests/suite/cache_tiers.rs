//! Extra tiers and the always-compile switch.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use crate::cache_support::{build_image, compiled, fp, key, open, owner, payload, ptx};
use kiln_core::{ArtifactKind, Cache, CacheConfig, Error, Key, Owner, Source, Tier, TierEntry};
use kiln_image::{Digest, EntryData, Image};

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

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        *self.loads.lock().unwrap() += 1;
        Ok(self
            .entries
            .lock()
            .unwrap()
            .get(&(owner.digest(), *key.digest()))
            .cloned()
            .map(TierEntry::Owned))
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

    fn load_entry(&self, _: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
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
        fn load_entry(&self, o: &Owner, k: &Key) -> Result<Option<TierEntry>, Error> {
            self.0.load_entry(o, k)
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
        .get_or_compile(&o, &key(1), || Ok(compiled(1, "disk")))
        .unwrap();
    first
        .get_or_compile(
            &o,
            &key(2),
            || Ok(compiled(2, "handle").session_dependent()),
        )
        .unwrap();
    // Stores run on the background writer.
    first.flush();
    assert_eq!(
        tier.entries.lock().unwrap().len(),
        1,
        "session-dependent entries stay in memory"
    );

    // A "new process": an empty cache with the same tier.
    let second = cache_with(tier, CacheConfig::default());
    let start = second.snapshot();
    let hit = second
        .get_or_compile(&o, &key(1), || Err("must not compile".into()))
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
            Ok(compiled(1, "v1").dep("a.cu", fp("a.cu", 1)))
        })
        .unwrap();
    let second = cache_with(tier, CacheConfig::default());
    second.define("a.cu", fp("a.cu", 2));
    let hit = second
        .get_or_compile(&o, &key(1), || {
            Ok(compiled(1, "v2").dep("a.cu", fp("a.cu", 2)))
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
            .get_or_compile(&o, &key(1), || Ok(compiled(1, round)))
            .unwrap();
        assert_eq!(
            ptx(&hit),
            payload(1, round),
            "round {round} compiled afresh"
        );
    }
    assert_eq!(*tier.loads.lock().unwrap(), 0, "tiers are not asked");
    assert_eq!(cache.stats().compiles, 2);
    // Recorded, but a lookup honours the switch too: it misses.
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    assert!(cache.get_cached(&o, &key(1)).is_none());
    // The newest is what the delta exports.
    let delta = cache.delta(&start);
    assert_eq!(delta.len(), 1);
    let bytes = delta
        .to_bytes(kiln_image::ImageMeta::default())
        .expect("image");
    let image = Image::from_bytes(&bytes, kiln_image::Verification::Full).expect("image");
    let entry = image
        .find(&o.digest(), key(1).digest())
        .expect("index")
        .expect("exported");
    let artifact = entry.artifact(0).expect("artifact");
    assert_eq!(artifact.bytes().expect("payload"), &payload(1, "b")[..]);
}

/// A tier that serves the entries of one image it keeps open, by reference
/// (what the disk tier does with its mapped segments).
struct ImageTier {
    image: Arc<Image>,
}

impl Tier for ImageTier {
    fn name(&self) -> &str {
        "image"
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        Ok(self
            .image
            .find(&owner.digest(), key.digest())?
            .map(|entry| TierEntry::Image {
                image: Arc::clone(&self.image),
                index: entry.index(),
            }))
    }

    fn store(&self, _: &Owner, _: &EntryData) -> Result<(), Error> {
        Ok(())
    }
}

/// Where `needle` (a payload) starts in the image `bytes`.
fn position_of(bytes: &[u8], needle: &[u8]) -> usize {
    bytes
        .windows(needle.len())
        .position(|w| w == needle)
        .expect("the payload is in the image")
}

/// A cache whose only tier serves the image `bytes` with one byte of
/// `bad_payload` flipped.
fn cache_over_image_with_bad(mut bytes: Vec<u8>, bad_payload: &[u8]) -> Cache {
    let at = position_of(&bytes, bad_payload);
    bytes[at] ^= 0x20;
    let cache = Cache::new();
    cache.add_tier(Box::new(ImageTier {
        image: Arc::new(open(&bytes)),
    }));
    cache
}

#[test]
fn an_image_backed_tier_entry_is_borrowed_not_copied() {
    let o = owner();
    let bytes = build_image(&o, [compiled(1, "mapped")], [key(1)]);
    let image = Arc::new(open(&bytes));
    let cache = Cache::new();
    cache.add_tier(Box::new(ImageTier {
        image: Arc::clone(&image),
    }));
    let start = cache.snapshot();
    let hit = cache
        .get_or_compile(&o, &key(1), || Err("must not compile".into()))
        .unwrap();
    assert_eq!(hit.source(), Source::Tier);
    let served = hit.artifact(&ArtifactKind::Ptx).unwrap();
    assert_eq!(served, payload(1, "mapped"));
    // The bytes lie inside the tier's image: no copy was made.
    let entry = image.find(&o.digest(), key(1).digest()).unwrap().unwrap();
    let in_image = entry.artifact(0).unwrap().bytes().unwrap();
    assert_eq!(served.as_ptr(), in_image.as_ptr());
    assert_eq!(
        hit.artifacts()[0].bytes().unwrap().as_ptr(),
        in_image.as_ptr()
    );
    // Later lookups are memory hits on the same bytes, and the entry is
    // exported like a local compile.
    let again = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(
        again.artifact(&ArtifactKind::Ptx).unwrap().as_ptr(),
        in_image.as_ptr()
    );
    let delta = cache.delta(&start);
    assert_eq!(delta.len(), 1);
    let exported = open(&delta.to_bytes(kiln_image::ImageMeta::default()).unwrap());
    let copy = exported
        .find(&o.digest(), key(1).digest())
        .unwrap()
        .unwrap();
    assert_eq!(copy.to_data().unwrap(), entry.to_data().unwrap());
    // The cache keeps the image alive after the tier let it go.
    drop(image);
    assert_eq!(
        again.artifact(&ArtifactKind::Ptx).unwrap(),
        payload(1, "mapped")
    );
    // Nothing was compiled.
    assert_eq!(cache.stats().compiles, 0);
}

#[test]
fn a_corrupt_payload_of_an_image_backed_tier_entry_is_never_returned_and_then_recompiled() {
    let o = owner();
    let bytes = build_image(&o, [compiled(1, "mapped")], [key(1)]);
    let cache = cache_over_image_with_bad(bytes, &payload(1, "mapped"));
    // The record is sound: a tier hit, whose payload is checked on use.
    let hit = cache
        .get_or_compile(&o, &key(1), || Err("must not compile".into()))
        .unwrap();
    assert_eq!(hit.source(), Source::Tier);
    assert_eq!(
        hit.artifact(&ArtifactKind::Ptx),
        None,
        "never the bad bytes"
    );
    assert_eq!(hit.artifacts()[0].bytes(), None);
    assert_eq!(hit.to_entry_data(), None);
    // The entry is closed for good and counted once, however often the bad
    // payload was asked for; the tier's copy is now known bad, so the next
    // call compiles.
    assert!(!hit.is_valid_in(cache.world()));
    assert_eq!(cache.stats().corrupt, 1);
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    let again = cache
        .get_or_compile(&o, &key(1), || Ok(compiled(1, "fresh")))
        .unwrap();
    assert_eq!(again.source(), Source::Memory);
    assert_eq!(ptx(&again), payload(1, "fresh"));
    let stats = cache.stats();
    assert_eq!((stats.hits_tier, stats.compiles), (1, 1));
}

#[test]
fn only_the_artifacts_used_of_a_tier_entry_are_read() {
    let o = owner();
    let two = compiled(1, "ptx").artifact(kiln_core::Artifact {
        kind: ArtifactKind::Cubin,
        entry_points: vec!["f1".into()],
        bytes: b"cubin of f1".to_vec(),
    });
    // A bad PTX fallback does not spoil the CUBIN, which is all that is used.
    let bytes = build_image(&o, [two], [key(1)]);
    let cache = cache_over_image_with_bad(bytes, &payload(1, "ptx"));
    let hit = cache
        .get_or_compile(&o, &key(1), || Err("must not compile".into()))
        .unwrap();
    assert_eq!(
        hit.artifact(&ArtifactKind::Cubin),
        Some(&b"cubin of f1"[..])
    );
    assert!(hit.is_valid_in(cache.world()));
    assert_eq!(
        cache
            .lookup(&o.digest(), &key(1))
            .unwrap()
            .artifact(&ArtifactKind::Cubin),
        Some(&b"cubin of f1"[..])
    );
}

#[test]
fn get_cached_finds_what_tiers_hold_and_never_compiles() {
    let tier: &'static MapTier = Box::leak(Box::default());
    let o = owner();
    let first = cache_with(tier, CacheConfig::default());
    first
        .get_or_compile(&o, &key(1), || Ok(compiled(1, "elsewhere")))
        .unwrap();
    first.flush();

    // A process that cannot compile: what the tier holds, once loaded.
    let second = cache_with(tier, CacheConfig::default());
    let hit = second.get_cached(&o, &key(1)).expect("in the tier");
    assert_eq!(hit.source(), Source::Tier);
    assert_eq!(ptx(&hit), payload(1, "elsewhere"));
    let loads = *tier.loads.lock().unwrap();
    assert!(second.get_cached(&o, &key(1)).is_some());
    assert_eq!(*tier.loads.lock().unwrap(), loads, "then from memory");
    // What no tier holds: nothing, and nothing compiled or recorded.
    assert!(second.get_cached(&o, &key(2)).is_none());
    let stats = second.stats();
    assert_eq!((stats.hits_tier, stats.compiles), (1, 0));
    // A later get_or_compile of the missing key still compiles it.
    let hit = second
        .get_or_compile(&o, &key(2), || Ok(compiled(2, "here")))
        .unwrap();
    assert_eq!(ptx(&hit), payload(2, "here"));
    // Under always_compile, nothing is cached to get.
    let always = cache_with(tier, CacheConfig::default().always_compile(true));
    assert!(always.get_cached(&o, &key(1)).is_none());
}

#[test]
fn get_cached_waits_for_a_running_compile_of_the_same_key() {
    use std::sync::Barrier;
    let tier: &'static MapTier = Box::leak(Box::default());
    let o = owner();
    let cache = cache_with(tier, CacheConfig::default());
    let started = Barrier::new(2);
    std::thread::scope(|scope| {
        let compiling = scope.spawn(|| {
            cache
                .get_or_compile(&o, &key(3), || {
                    started.wait();
                    std::thread::sleep(std::time::Duration::from_millis(200));
                    Ok(compiled(3, "slow"))
                })
                .map(|hit| ptx(&hit))
                .unwrap()
        });
        started.wait();
        // The compile is running: get_cached waits for it, then finds it.
        let hit = cache.get_cached(&o, &key(3)).expect("the compile's result");
        assert_eq!(ptx(&hit), payload(3, "slow"));
        assert_eq!(compiling.join().unwrap(), payload(3, "slow"));
    });
    assert_eq!(cache.stats().compiles, 1);
}
