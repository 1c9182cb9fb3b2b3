//! Invariant 20 (ARCHITECTURE.md), the memory cap
//! (`CacheConfig::memory_max_bytes`): least recently used entries are
//! evicted, a hit keeps its payloads alive, evicted entries come back from a
//! tier or a compile, never stale, and a snapshot pins what its delta needs.

use std::collections::HashMap;
use std::ffi::OsString;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use kiln_core::{
    Artifact, ArtifactKind, Cache, CacheConfig, Compiled, Digest, Error, Key, KeyBuilder, Owner,
    Source, Stats,
};
use kiln_image::{Image, ImageMeta, Verification};

fn owner() -> Owner {
    Owner::new("memory-cap-test", "1.0", "sm_90a", ["-O3"]).expect("owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-core cache_memory test", 1)
        .field("n", &n)
        .expect("a u64 encodes")
        .finish()
}

/// The payload of entry `n`: `len` bytes derived from `n` (BLAKE3 XOF).
fn payload(n: u64, len: usize) -> Vec<u8> {
    let mut bytes = vec![0; len];
    blake3::Hasher::new()
        .update(&n.to_le_bytes())
        .finalize_xof()
        .fill(&mut bytes);
    bytes
}

fn compiled(n: u64, len: usize) -> Compiled {
    Compiled::new(format!("kernel_{n}")).artifact(Artifact {
        kind: ArtifactKind::Cubin,
        entry_points: vec![format!("kernel_{n}")],
        bytes: payload(n, len),
    })
}

fn capped(cap: u64) -> Cache {
    Cache::with_config(CacheConfig::default().memory_max_bytes(Some(cap)))
}

/// `get_or_compile` of entry `n` (`len` bytes), counting compiles in
/// `compiles`; checks the bytes and returns the source.
fn get(cache: &Cache, n: u64, len: usize, compiles: &AtomicU64) -> Source {
    let hit = cache
        .get_or_compile(&owner(), &key(n), || {
            compiles.fetch_add(1, Ordering::Relaxed);
            Ok(compiled(n, len))
        })
        .expect("compiles");
    assert_eq!(
        hit.artifact(&ArtifactKind::Cubin),
        Some(&payload(n, len)[..]),
        "entry {n}"
    );
    hit.source()
}

fn resident(cache: &Cache, n: u64) -> bool {
    cache.lookup(&owner().digest(), &key(n)).is_some()
}

const LEN: usize = 1000;

#[test]
fn past_the_cap_the_least_recently_used_entry_is_evicted() {
    let cache = capped(3 * LEN as u64);
    let compiles = AtomicU64::new(0);
    for n in 0..3 {
        get(&cache, n, LEN, &compiles);
    }
    assert_eq!(cache.stats().evictions, 0);
    assert!(resident(&cache, 0)); // 0 used after 1
    get(&cache, 3, LEN, &compiles); // over the cap: 1 is the oldest
    assert!(!resident(&cache, 1), "1 was least recently used");
    assert!(resident(&cache, 2)); // 2 used after 0
    get(&cache, 4, LEN, &compiles); // 0 is now the oldest
    assert!(!resident(&cache, 0), "0 was least recently used");
    for n in 2..5 {
        assert!(resident(&cache, n), "{n} stays");
    }

    let stats = cache.stats();
    assert_eq!(stats.evictions, 2);
    assert_eq!(stats.memory_entries, 3);
    assert_eq!(stats.bytes_held, 3 * LEN as u64);
    assert_eq!(
        stats.peak_bytes_held,
        4 * LEN as u64,
        "cap plus the new entry"
    );
    assert_eq!(stats.memory_max_bytes, Some(3 * LEN as u64));

    // Asked for again: compiled again (no tier), and something else goes.
    assert_eq!(compiles.load(Ordering::Relaxed), 5);
    assert_eq!(get(&cache, 1, LEN, &compiles), Source::Memory);
    assert_eq!(compiles.load(Ordering::Relaxed), 6);
    assert_eq!(cache.stats().evictions, 3);
    assert!(cache.stats().bytes_held <= 3 * LEN as u64);
}

#[test]
fn no_cap_evicts_nothing() {
    let cache = Cache::with_config(CacheConfig::default().memory_max_bytes(None));
    let compiles = AtomicU64::new(0);
    for n in 0..50 {
        get(&cache, n, LEN, &compiles);
    }
    let stats = cache.stats();
    assert_eq!((stats.evictions, stats.memory_entries), (0, 50));
    assert_eq!(stats.bytes_held, 50 * LEN as u64);
    // The default is a cap of 1 GiB.
    assert_eq!(
        CacheConfig::default().memory_max_bytes,
        Some(kiln_core::cache::DEFAULT_MEMORY_MAX_BYTES)
    );
}

#[test]
fn a_hit_keeps_its_payload_alive_after_its_entry_is_evicted() {
    let cache = capped(LEN as u64);
    let compiles = AtomicU64::new(0);
    let kept = cache
        .get_or_compile(&owner(), &key(0), || Ok(compiled(0, LEN)))
        .expect("compiles");
    let views = kept.artifacts();
    for n in 1..20 {
        get(&cache, n, LEN, &compiles);
    }
    assert!(!resident(&cache, 0), "evicted");
    // The payload is freed only when the last hit drops: still readable,
    // through the hit and through a view taken before the eviction.
    assert_eq!(
        kept.artifact(&ArtifactKind::Cubin),
        Some(&payload(0, LEN)[..])
    );
    assert_eq!(views[0].bytes(), Some(&payload(0, LEN)[..]));
    let copy = kept.clone();
    drop(kept);
    assert_eq!(
        copy.artifact(&ArtifactKind::Cubin),
        Some(&payload(0, LEN)[..])
    );
    // The hit holds its whole entry, metadata included.
    assert_eq!(copy.name(), "kernel_0");
}

#[test]
fn entries_recorded_after_a_live_snapshot_are_pinned_for_its_delta() {
    let cache = capped(LEN as u64);
    let compiles = AtomicU64::new(0);
    for n in 0..3 {
        get(&cache, n, LEN, &compiles);
    }
    assert_eq!(cache.stats().evictions, 2);
    let before = cache.snapshot();
    for n in 10..20 {
        get(&cache, n, LEN, &compiles);
    }
    // Only the entry from before the snapshot could go.
    let stats = cache.stats();
    assert_eq!(stats.evictions, 3);
    assert_eq!(stats.memory_entries, 10);
    assert_eq!(
        stats.bytes_held,
        10 * LEN as u64,
        "over the cap while pinned"
    );

    let delta = cache.delta(&before);
    assert_eq!(delta.len(), 10);
    let bytes = delta.to_bytes(ImageMeta::new("test", "1")).expect("image");
    let image = Image::from_bytes(&bytes, Verification::Full).expect("valid image");
    for n in 10..20 {
        let entry = image
            .find(&owner().digest(), key(n).digest())
            .expect("index")
            .expect("every entry of the block is in the image");
        let artifact = entry.artifact(0).expect("artifact");
        assert_eq!(artifact.bytes().expect("payload"), &payload(n, LEN)[..]);
    }

    // A clone pins too; once every copy is gone, the next record evicts
    // down to the cap.
    let copy = before.clone();
    drop(before);
    get(&cache, 30, LEN, &compiles);
    assert_eq!(
        cache.stats().memory_entries,
        11,
        "still pinned by the clone"
    );
    drop(copy);
    get(&cache, 31, LEN, &compiles);
    let stats = cache.stats();
    assert_eq!((stats.memory_entries, stats.bytes_held), (1, LEN as u64));
    // The delta, taken while pinned, still holds its payloads.
    let again = delta.to_bytes(ImageMeta::new("test", "1")).expect("image");
    assert_eq!(again, bytes);
}

#[test]
fn an_evicted_entry_is_never_served_against_a_changed_definition() {
    let cache = capped(LEN as u64);
    let o = owner();
    let ops_v1 = Digest::of(b"ops v1");
    cache.define("ops", ops_v1);
    let compile_with = |n: u64, version: &[u8]| {
        let mut c = compiled(n, LEN).dep("ops", Digest::of(version));
        c.artifacts[0].bytes[0] = version[version.len() - 1];
        c
    };
    cache
        .get_or_compile(&o, &key(0), || Ok(compile_with(0, b"ops v1")))
        .expect("compiles");
    // Evicted by another entry.
    cache
        .get_or_compile(&o, &key(1), || Ok(compiled(1, LEN)))
        .expect("compiles");
    assert!(!resident(&cache, 0));

    // Recorded again with the same metadata: served again.
    let again = cache
        .get_or_compile(&o, &key(0), || Ok(compile_with(0, b"ops v1")))
        .expect("compiles");
    assert_eq!(
        again.artifact(&ArtifactKind::Cubin).map(|b| b[0]),
        Some(b'1')
    );
    drop(again);
    cache
        .get_or_compile(&o, &key(1), || Ok(compiled(1, LEN)))
        .expect("compiles");
    assert!(!resident(&cache, 0), "evicted again");

    // The definition changes while the entry is evicted: the old entry is
    // gone (freed when evicted, since nothing held it), and asking again
    // compiles against the new one.
    let world = cache.redefine("ops", Digest::of(b"ops v2"));
    assert!(cache.lookup(&o.digest(), &key(0)).is_none());
    let fresh = cache
        .get_or_compile(&o, &key(0), || Ok(compile_with(0, b"ops v2")))
        .expect("compiles");
    assert_eq!(
        fresh.artifact(&ArtifactKind::Cubin).map(|b| b[0]),
        Some(b'2')
    );
    assert!(fresh.is_valid_in(world));
    assert_eq!(fresh.deps()[0].fingerprint, Digest::of(b"ops v2"));
    assert_eq!(cache.stats().invalidated, 0, "nothing was left to close");
}

/// A tier that keeps entries in a map and hands them over owned (as the
/// remote tier does), counting loads.
#[derive(Default)]
struct MapTier {
    entries: Mutex<HashMap<Digest, kiln_image::EntryData>>,
    loads: AtomicU64,
}

impl kiln_core::Tier for &'static MapTier {
    fn name(&self) -> &str {
        "map"
    }

    fn load_entry(&self, _: &Owner, key: &Key) -> Result<Option<kiln_core::TierEntry>, Error> {
        self.loads.fetch_add(1, Ordering::Relaxed);
        let entries = self.entries.lock().expect("lock");
        Ok(entries
            .get(key.digest())
            .cloned()
            .map(kiln_core::TierEntry::Owned))
    }

    fn store(&self, _: &Owner, entry: &kiln_image::EntryData) -> Result<(), Error> {
        let mut entries = self.entries.lock().expect("lock");
        entries.insert(entry.key, entry.clone());
        Ok(())
    }
}

#[test]
fn an_evicted_entry_comes_back_from_a_tier_without_compiling() {
    let tier: &'static MapTier = Box::leak(Box::default());
    let cache = capped(2 * LEN as u64);
    cache.add_tier(Box::new(tier));
    let compiles = AtomicU64::new(0);
    for n in 0..6 {
        assert_eq!(get(&cache, n, LEN, &compiles), Source::Memory);
        // The store queue holds at most the cap's worth of payloads: let
        // each store run before the next compile.
        cache.flush();
    }
    assert_eq!(tier.entries.lock().expect("lock").len(), 6);
    for n in 0..4 {
        assert!(!resident(&cache, n), "{n} evicted");
        assert_eq!(get(&cache, n, LEN, &compiles), Source::Tier, "{n}");
    }
    assert_eq!(
        compiles.load(Ordering::Relaxed),
        6,
        "nothing compiled again"
    );
    let stats = cache.stats();
    assert_eq!(stats.hits_tier, 4);
    assert!(stats.bytes_held <= 2 * LEN as u64, "{stats:?}");
}

#[test]
fn an_evicted_entry_comes_back_from_the_disk_tier_borrowed() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("kiln");
    let cache = capped(200 << 10);
    let settings = kiln_core::settings::Settings::from_vars(
        [("KILN_CACHE_DIR", OsString::from(&dir))]
            .into_iter()
            .collect(),
    );
    let tiers = kiln_core::add_tiers(&cache, &settings);
    assert_eq!(tiers, ["disk"]);
    let compiles = AtomicU64::new(0);
    // 128 KiB each: a segment that large is mapped, not read.
    let len = 128 << 10;
    for n in 0..4 {
        get(&cache, n, len, &compiles);
        cache.flush(); // each entry on disk before the next compile
    }
    assert!(!resident(&cache, 0));
    assert_eq!(get(&cache, 0, len, &compiles), Source::Tier);
    assert_eq!(compiles.load(Ordering::Relaxed), 4);
    // Borrowed from the segment, and counted while held.
    let stats = cache.stats();
    assert!(stats.bytes_held <= 200 << 10, "{stats:?}");
    assert_eq!(stats.store_failures, 0);
}

#[test]
fn followers_get_the_leaders_entry_even_if_it_is_evicted_at_once() {
    // A cap below one entry: every record evicts whatever else is held.
    let cache = capped(1);
    let compiles = AtomicU64::new(0);
    const THREADS: u64 = 4;
    std::thread::scope(|scope| {
        for _ in 0..THREADS {
            let (cache, compiles) = (&cache, &compiles);
            scope.spawn(move || {
                let hit = cache
                    .get_or_compile(&owner(), &key(0), || {
                        // Compile only once every other caller waits on
                        // this flight.
                        while cache.stats().compile_waits < THREADS - 1 {
                            std::thread::yield_now();
                        }
                        compiles.fetch_add(1, Ordering::Relaxed);
                        // Recorded, then evicted by another entry before
                        // the followers look.
                        let other = cache.insert(&owner(), &key(1), compiled(1, LEN));
                        drop(other);
                        Ok(compiled(0, LEN))
                    })
                    .expect("compiles");
                assert_eq!(
                    hit.artifact(&ArtifactKind::Cubin),
                    Some(&payload(0, LEN)[..])
                );
            });
        }
    });
    assert_eq!(compiles.load(Ordering::Relaxed), 1, "single flight");
    assert_eq!(cache.stats().compile_waits, THREADS - 1);
}

#[test]
fn concurrent_callers_with_a_tiny_cap_always_get_the_right_bytes() {
    // A cap below one entry: every record evicts whatever else is held.
    let cache = capped(1);
    let compiles = AtomicU64::new(0);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let (cache, compiles) = (&cache, &compiles);
            scope.spawn(move || {
                for round in 0..200u64 {
                    let n = (round * 7 + t) % 8;
                    let hit = cache
                        .get_or_compile(&owner(), &key(n), || {
                            compiles.fetch_add(1, Ordering::Relaxed);
                            Ok(compiled(n, 64 + n as usize))
                        })
                        .expect("compiles");
                    assert_eq!(
                        hit.artifact(&ArtifactKind::Cubin),
                        Some(&payload(n, 64 + n as usize)[..]),
                        "entry {n}"
                    );
                }
            });
        }
    });
    let stats: Stats = cache.stats();
    assert_eq!(stats.memory_entries, 1, "{stats:?}");
    assert!(stats.evictions > 0);
    assert_eq!(stats.compiles, compiles.load(Ordering::Relaxed));
    assert_eq!(stats.compile_failures, 0);
}

#[test]
fn a_merged_image_serves_an_entry_evicted_from_memory() {
    let source = Cache::new();
    let start = source.snapshot();
    source.insert(&owner(), &key(0), compiled(0, LEN));
    let bytes = source
        .delta(&start)
        .to_bytes(ImageMeta::new("test", "1"))
        .expect("image");

    let cache = capped(LEN as u64);
    let compiles = AtomicU64::new(0);
    get(&cache, 0, LEN, &compiles);
    get(&cache, 1, LEN, &compiles);
    assert!(!resident(&cache, 0));
    // An evicted entry is no duplicate: the image's entry is merged.
    let report = cache.merge_image(Image::from_bytes(&bytes, Verification::Full).expect("image"));
    assert_eq!((report.inserted, report.duplicate), (1, 0));
    assert_eq!(get(&cache, 0, LEN, &compiles), Source::Image);
    assert_eq!(compiles.load(Ordering::Relaxed), 2);
}

fn capped_entries(entries: u64) -> Cache {
    Cache::with_config(
        CacheConfig::default()
            .memory_max_bytes(None)
            .memory_max_entries(Some(entries)),
    )
}

#[test]
fn evicted_entries_are_freed_metadata_and_all() {
    let cache = capped_entries(8);
    let compiles = AtomicU64::new(0);
    for n in 0..20_000 {
        get(&cache, n, 64, &compiles);
        let stats = cache.stats();
        assert!(stats.memory_entries <= 8, "{stats:?}");
        // Held: the resident entries, and the one a dropped hit released
        // on this thread's last lookup at most.
        assert!(stats.entries_alive <= 9, "entry {n}: {stats:?}");
    }
    let stats = cache.stats();
    assert_eq!(stats.memory_entries, 8);
    assert_eq!(stats.entries_alive, 8, "{stats:?}");
    assert_eq!(stats.evictions, 20_000 - 8);
    assert_eq!(stats.bytes_held, 8 * 64);
    assert_eq!(stats.memory_max_entries, Some(8));
    // The last eight are served from memory; the first is gone.
    for n in 20_000 - 8..20_000 {
        assert!(resident(&cache, n), "{n}");
    }
    assert!(!resident(&cache, 0));
}

#[test]
fn the_count_cap_evicts_the_least_recently_used_entry() {
    let cache = capped_entries(3);
    let compiles = AtomicU64::new(0);
    for n in 0..3 {
        get(&cache, n, LEN, &compiles);
    }
    assert!(resident(&cache, 0)); // 0 used after 1
    get(&cache, 3, LEN, &compiles);
    assert!(!resident(&cache, 1), "1 was least recently used");
    for n in [0, 2, 3] {
        assert!(resident(&cache, n), "{n} stays");
    }
    // The default caps.
    let default = CacheConfig::default();
    assert_eq!(
        default.memory_max_entries,
        Some(kiln_core::cache::DEFAULT_MEMORY_MAX_ENTRIES)
    );
}

#[test]
fn a_hit_keeps_its_evicted_entry_allocated_until_it_drops() {
    let cache = capped_entries(1);
    let compiles = AtomicU64::new(0);
    let kept = cache
        .get_or_compile(&owner(), &key(0), || Ok(compiled(0, LEN)))
        .expect("compiles");
    for n in 1..100 {
        get(&cache, n, LEN, &compiles);
    }
    assert!(!resident(&cache, 0));
    assert_eq!(
        cache.stats().entries_alive,
        2,
        "the resident one and the hit's"
    );
    assert_eq!(kept.name(), "kernel_0");
    assert_eq!(kept.owner_label(), owner().label());
    drop(kept);
    assert_eq!(cache.stats().entries_alive, 1);
}

#[test]
fn a_redefinition_closes_an_evicted_entry_a_hit_still_holds() {
    let cache = capped_entries(1);
    cache.define("ops", Digest::of(b"ops v1"));
    let kept = cache.insert(
        &owner(),
        &key(0),
        compiled(0, LEN).dep("ops", Digest::of(b"ops v1")),
    );
    cache.insert(&owner(), &key(1), compiled(1, LEN));
    assert!(!resident(&cache, 0), "evicted");
    let before = cache.world();
    assert!(kept.is_valid_in(before));
    let after = cache.redefine("ops", Digest::of(b"ops v2"));
    assert!(
        !kept.is_valid_in(after),
        "closed through the hit's reference"
    );
    assert_eq!(kept.max_world(), before);
    assert_eq!(cache.stats().invalidated, 1);
}

#[test]
fn closed_entries_are_evicted_before_any_other() {
    let cache = capped_entries(3);
    let o = owner();
    cache.define("ops", Digest::of(b"ops v1"));
    cache.insert(&o, &key(1), compiled(1, LEN));
    cache.insert(&o, &key(2), compiled(2, LEN));
    cache.insert(
        &o,
        &key(3),
        compiled(3, LEN).dep("ops", Digest::of(b"ops v1")),
    );
    let old = cache.world();
    cache.redefine("ops", Digest::of(b"ops v2"));
    // Closed, but an older world still sees it while it is held.
    assert!(cache.lookup(&o.digest(), &key(3)).is_none());
    assert!(cache.lookup_in(old, &o.digest(), &key(3)).is_some());
    // Over the cap: the closed entry goes, not the least recently used (1).
    cache.insert(&o, &key(4), compiled(4, LEN));
    assert!(cache.lookup_in(old, &o.digest(), &key(3)).is_none());
    for n in [1, 2, 4] {
        assert!(resident(&cache, n), "{n} stays");
    }
    assert_eq!(cache.stats().entries_alive, 3);
}

#[test]
fn a_dropped_snapshot_lets_its_entries_go() {
    let cache = capped_entries(4);
    let compiles = AtomicU64::new(0);
    let snapshot = cache.snapshot();
    for n in 0..100 {
        get(&cache, n, 64, &compiles);
    }
    // Pinned: all held, for the delta.
    assert_eq!(cache.stats().memory_entries, 100);
    let delta = cache.delta(&snapshot);
    assert_eq!(delta.len(), 100);
    drop(snapshot);
    get(&cache, 100, 64, &compiles);
    let stats = cache.stats();
    assert_eq!(stats.memory_entries, 4);
    assert_eq!(stats.entries_alive, 101, "the delta still holds its 100");
    drop(delta);
    assert_eq!(cache.stats().entries_alive, 4, "{:?}", cache.stats());
}

#[test]
fn an_entry_evicted_before_a_snapshot_and_recorded_again_is_in_its_delta() {
    let cache = capped_entries(2);
    let compiles = AtomicU64::new(0);
    for n in 0..3 {
        get(&cache, n, LEN, &compiles); // 2 evicts 0
    }
    let snapshot = cache.snapshot();
    assert_eq!(get(&cache, 2, LEN, &compiles), Source::Memory); // a hit
    get(&cache, 0, LEN, &compiles); // not in the cache: compiled again
    assert_eq!(compiles.load(Ordering::Relaxed), 4);
    let delta = cache.delta(&snapshot);
    let keys: Vec<Key> = delta.entries().map(|(_, key, _)| key).collect();
    assert_eq!(keys, [key(0)], "what the block added to the cache");
}

#[test]
fn lookups_honour_always_compile() {
    let cache = Cache::with_config(CacheConfig::default().always_compile(true));
    let hit = cache.insert(&owner(), &key(0), compiled(0, LEN));
    assert_eq!(hit.name(), "kernel_0");
    assert!(cache.lookup(&owner().digest(), &key(0)).is_none());
    assert!(
        cache
            .lookup_in(cache.world(), &owner().digest(), &key(0))
            .is_none()
    );
    assert_eq!(cache.stats().misses, 2);
}
