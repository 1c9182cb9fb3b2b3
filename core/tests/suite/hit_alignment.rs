//! Invariant 19 (ARCHITECTURE.md): every hit's artifact bytes start at a
//! multiple of `PAYLOAD_ALIGN` (64), whatever served them: memory (compiled
//! in this process), an image layer, the disk tier (a small segment read
//! into memory, a large one mapped), and a tier that hands over owned bytes
//! (as the remote tier does).

use std::collections::HashMap;
use std::sync::Mutex;

use crate::cache_support::{build_image, key, open, owner};
use kiln_core::cache::PAYLOAD_ALIGN;
use kiln_core::disk::DiskCache;
use kiln_core::{
    Artifact, ArtifactKind, Cache, Compiled, Error, Hit, Key, Owner, Source, Tier, TierEntry,
};
use kiln_image::{Digest, EntryData};

/// Entries per case: with 16-byte-aligned buffers (what an allocator gives
/// a `Vec<u8>`), all of them landing on a multiple of 64 by chance is
/// about 4^-64.
const ENTRIES: u64 = 32;

/// Entry `n`: two artifacts of odd lengths (3 to 200 bytes, and a CUBIN of
/// 100 KB for every eighth entry, so that a disk segment holding it is
/// mapped rather than read).
fn compiled(n: u64) -> Compiled {
    let len = usize::try_from(3 + n * 37 % 200).expect("small");
    let cubin_len = if n.is_multiple_of(8) {
        100_000
    } else {
        len * 3 + 1
    };
    Compiled::new(format!("f{n}"))
        .artifact(Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![format!("f{n}")],
            bytes: vec![u8::try_from(n).expect("small"); len],
        })
        .artifact(Artifact {
            kind: ArtifactKind::Cubin,
            entry_points: vec![format!("f{n}")],
            bytes: vec![0xcb; cubin_len],
        })
}

/// Asserts that every artifact of `hit` came from `source` and starts at a
/// multiple of 64.
#[track_caller]
fn assert_aligned(hit: &Hit<'_>, source: Source) {
    assert_eq!(hit.source(), source, "{hit:?}");
    let views = hit.artifacts();
    assert_eq!(views.len(), 2);
    for view in views {
        let bytes = view.bytes().expect("the payload checks");
        let address = bytes.as_ptr() as usize;
        assert_eq!(
            address % PAYLOAD_ALIGN,
            0,
            "{:?} of {} at {address:#x}",
            view.kind,
            hit.name()
        );
        assert_eq!(
            hit.artifact(&view.kind).map(<[u8]>::as_ptr),
            Some(bytes.as_ptr())
        );
    }
}

/// Compiles every entry into `cache` (and so into its tiers).
fn compile_all(cache: &Cache) {
    for n in 0..ENTRIES {
        cache
            .get_or_compile(&owner(), &key(n), || Ok(compiled(n)))
            .expect("compiles");
    }
}

#[test]
fn compiled_in_this_process() {
    let cache = Cache::new();
    for n in 0..ENTRIES {
        let hit = cache
            .get_or_compile(&owner(), &key(n), || Ok(compiled(n)))
            .expect("compiles");
        assert_aligned(&hit, Source::Memory);
    }
}

#[test]
fn from_an_image() {
    let bytes = build_image(&owner(), (0..ENTRIES).map(compiled), (0..ENTRIES).map(key));
    let cache = Cache::new();
    cache.merge_image(open(&bytes));
    for n in 0..ENTRIES {
        let hit = cache.lookup(&owner().digest(), &key(n)).expect("merged");
        assert_aligned(&hit, Source::Image);
    }
}

#[test]
fn from_the_disk_tier() {
    let dir = tempfile::tempdir().expect("temp dir");
    let disk = || DiskCache::open(kiln_core::disk::DiskConfig::new(dir.path())).expect("opens");
    let first = Cache::new();
    first.add_tier(Box::new(disk()));
    compile_all(&first);
    drop(first);

    let cache = Cache::new();
    cache.add_tier(Box::new(disk()));
    for n in 0..ENTRIES {
        let hit = cache
            .get_or_compile(&owner(), &key(n), || Err("stored on disk above".into()))
            .expect("a disk hit");
        assert_aligned(&hit, Source::Tier);
    }
}

/// A tier that hands over owned entries, as the remote tier does.
#[derive(Default)]
struct OwnedTier(Mutex<HashMap<(Digest, Digest), EntryData>>);

impl Tier for OwnedTier {
    fn name(&self) -> &str {
        "owned"
    }

    fn load_entry(&self, owner: &Owner, key: &Key) -> Result<Option<TierEntry>, Error> {
        let entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
        Ok(entries
            .get(&(owner.digest(), *key.digest()))
            .cloned()
            .map(TierEntry::Owned))
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        let mut entries = self.0.lock().unwrap_or_else(|e| e.into_inner());
        entries.insert((owner.digest(), entry.key), entry.clone());
        Ok(())
    }
}

#[test]
fn from_a_tier_of_owned_bytes() {
    let tier: &'static OwnedTier = Box::leak(Box::default());
    struct Shared(&'static OwnedTier);
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
    let first = Cache::new();
    first.add_tier(Box::new(Shared(tier)));
    compile_all(&first);
    // Tier stores run on the cache's background writer.
    first.flush();

    let cache = Cache::new();
    cache.add_tier(Box::new(Shared(tier)));
    for n in 0..ENTRIES {
        let hit = cache
            .get_or_compile(&owner(), &key(n), || Err("stored in the tier above".into()))
            .expect("a tier hit");
        assert_aligned(&hit, Source::Tier);
    }
}
