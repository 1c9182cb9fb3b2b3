//! Invariant 21 (ARCHITECTURE.md), the background writer: `get_or_compile`
//! returns before the tiers store its result; stores are bounded, counted,
//! flushed on demand, on drop and at a normal exit (a process that exits
//! without flushing loses nothing).

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{
    Artifact, ArtifactKind, Cache, Compiled, Error, Key, KeyBuilder, Owner, Tier, TierEntry,
};
use kiln_image::EntryData;
use kiln_test_support::child;

const ROLE: &str = "KILN_CACHE_BACKGROUND_ROLE";

fn owner() -> Owner {
    Owner::new("background-test", "1.0", "sm_90a", ["-O3"]).expect("owner")
}

fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-core cache_background test", 1)
        .field("n", &n)
        .expect("a u64 encodes")
        .finish()
}

fn payload(n: u64) -> Vec<u8> {
    let mut bytes = vec![0; 512];
    blake3::Hasher::new()
        .update(&n.to_le_bytes())
        .finalize_xof()
        .fill(&mut bytes);
    bytes
}

fn compiled(n: u64) -> Compiled {
    Compiled::new(format!("kernel_{n}")).artifact(Artifact {
        kind: ArtifactKind::Cubin,
        entry_points: vec![format!("kernel_{n}")],
        bytes: payload(n),
    })
}

fn compile(cache: &Cache, n: u64) {
    let hit = cache
        .get_or_compile(&owner(), &key(n), || Ok(compiled(n)))
        .expect("compiles");
    assert_eq!(hit.artifact(&ArtifactKind::Cubin), Some(&payload(n)[..]));
}

/// A tier whose stores wait until the test opens its gate (at most a
/// minute, so that a store run on the caller's thread shows up as a
/// failed assertion rather than a hang).
#[derive(Default)]
struct GatedTier {
    open: Mutex<bool>,
    opened: Condvar,
    stored: Mutex<Vec<EntryData>>,
    /// Stores that found the gate still closed after the wait.
    timed_out: AtomicU64,
}

impl GatedTier {
    fn open(&self) {
        *self.open.lock().expect("lock") = true;
        self.opened.notify_all();
    }

    fn stored(&self) -> usize {
        self.stored.lock().expect("lock").len()
    }
}

impl Tier for GatedTier {
    fn name(&self) -> &str {
        "gated"
    }

    fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<TierEntry>, Error> {
        Ok(None)
    }

    fn store(&self, _: &Owner, entry: &EntryData) -> Result<(), Error> {
        let open = self.open.lock().expect("lock");
        let (open, _) = self
            .opened
            .wait_timeout_while(open, Duration::from_secs(60), |open| !*open)
            .expect("lock");
        if !*open {
            self.timed_out.fetch_add(1, Ordering::Relaxed);
        }
        drop(open);
        self.stored.lock().expect("lock").push(entry.clone());
        Ok(())
    }
}

fn gated() -> (Cache, Arc<GatedTier>) {
    let tier = Arc::new(GatedTier::default());
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&tier)));
    (cache, tier)
}

#[test]
fn a_compile_returns_before_the_tiers_store_it() {
    let (cache, tier) = gated();
    compile(&cache, 0);
    // Returned while the tier's store is still waiting at its gate.
    assert_eq!(tier.stored(), 0);
    assert_eq!(cache.stats().store_queue_depth, 1);
    tier.open();
    cache.flush();
    assert_eq!(tier.stored(), 1);
    assert_eq!(tier.timed_out.load(Ordering::Relaxed), 0);
    let stats = cache.stats();
    assert_eq!((stats.stores, stats.store_queue_depth), (1, 0));
    let stored = tier.stored.lock().expect("lock");
    assert_eq!(stored[0].key, *key(0).digest());
    assert_eq!(stored[0].artifacts[0].bytes, payload(0));
}

#[test]
fn a_full_queue_drops_stores_and_counts_them() {
    let (cache, tier) = gated();
    let jobs = kiln_core::cache::MAX_JOBS as u64;
    // One store runs (held at the gate) and the queue fills behind it.
    for n in 0..jobs + 5 {
        compile(&cache, n);
    }
    let stats = cache.stats();
    assert_eq!(stats.stores_dropped, 5, "{stats:?}");
    assert_eq!(stats.store_queue_depth, jobs);
    tier.open();
    cache.flush();
    assert_eq!(tier.stored() as u64, jobs);
    let stats = cache.stats();
    assert_eq!((stats.stores, stats.stores_dropped), (jobs, 5));
    // Every entry is still served from memory.
    for n in 0..jobs + 5 {
        assert!(cache.lookup(&owner().digest(), &key(n)).is_some(), "{n}");
    }
}

#[test]
fn dropping_the_cache_runs_the_queued_stores() {
    let (cache, tier) = gated();
    for n in 0..10 {
        compile(&cache, n);
    }
    let opener = {
        let tier = Arc::clone(&tier);
        std::thread::spawn(move || tier.open())
    };
    drop(cache);
    opener.join().expect("opener");
    assert_eq!(tier.stored(), 10);
}

/// A tier that fails every store, or panics in it.
struct FailingTier {
    panic: bool,
}

impl Tier for FailingTier {
    fn name(&self) -> &str {
        "failing"
    }

    fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<TierEntry>, Error> {
        Ok(None)
    }

    fn store(&self, _: &Owner, entry: &EntryData) -> Result<(), Error> {
        if self.panic {
            panic!("a tier that panics storing {}", entry.name);
        }
        Err(Error::DiskIo {
            action: "publish a segment in",
            path: "/nonexistent".into(),
            source: std::io::Error::other("disk on fire"),
        })
    }
}

#[test]
fn failed_and_panicking_stores_are_counted_and_the_writer_goes_on() {
    let good = Arc::new(GatedTier::default());
    good.open();
    let cache = Cache::new();
    cache.add_tier(Box::new(FailingTier { panic: false }));
    cache.add_tier(Box::new(FailingTier { panic: true }));
    cache.add_tier(Box::new(Arc::clone(&good)));
    for n in 0..3 {
        compile(&cache, n);
    }
    cache.flush();
    let stats = cache.stats();
    assert_eq!((stats.store_failures, stats.stores), (6, 3), "{stats:?}");
    assert_eq!(
        good.stored(),
        3,
        "the tier after the failing ones got every store"
    );
}

#[test]
fn a_background_handle_queues_stores_and_loads_directly() {
    let (cache, tier) = gated();
    let handle = cache.background(Arc::clone(&tier) as Arc<dyn Tier>);
    assert_eq!(handle.name(), "gated");
    let entry = EntryData {
        owner: owner().digest(),
        owner_label: owner().label().to_owned(),
        key: *key(7).digest(),
        name: "kernel_7".into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![],
        artifacts: compiled(7).artifacts,
    };
    handle.store(&owner(), &entry).expect("queued");
    assert_eq!(
        tier.stored(),
        0,
        "the store waits at the gate, the caller does not"
    );
    assert!(
        handle
            .load_entry(&owner(), &key(7))
            .expect("load")
            .is_none()
    );
    tier.open();
    cache.flush();
    assert_eq!(tier.stored(), 1);

    // A handle that outlives its cache stores on the caller's thread.
    drop(cache);
    handle.store(&owner(), &entry).expect("stored");
    assert_eq!(tier.stored(), 2);
}

/// The child process: compiles `KILN_TEST_ENTRIES` entries through
/// `global()` (disk tier in `KILN_CACHE_DIR`) and returns from the test
/// without flushing: the exit hook must store them. Run by the suite's
/// `child` test when `KILN_CACHE_BACKGROUND_ROLE` is set.
pub fn run_child_role() {
    if std::env::var_os(ROLE).is_none() {
        return;
    }
    let entries: u64 = std::env::var("KILN_TEST_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("KILN_TEST_ENTRIES");
    let cache = kiln_core::global();
    for n in 0..entries {
        compile(cache, n);
    }
    println!("RESULT compiled={entries}");
}

fn child_process(dir: &Path, entries: u64) -> std::process::Command {
    let mut command = child::command(ROLE, "compile");
    command
        .env("KILN_CACHE_DIR", dir)
        .env("KILN_TEST_ENTRIES", entries.to_string());
    for switch in [
        "KILN_CACHE",
        "KILN_CACHE_MAX_BYTES",
        "KILN_MEMORY_MAX_BYTES",
        "KILN_DISABLE",
        "KILN_ALWAYS_COMPILE",
        "KILN_IMAGE_PATH",
        "KILN_REMOTE_CACHE",
        "KILN_LOG",
    ] {
        command.env_remove(switch);
    }
    command
}

#[test]
fn exit_runs_the_queued_stores() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("kiln");
    let entries = 40;
    let mut command = child_process(&dir, entries);
    // With KILN_LOG=info and no subscriber, the figures at exit.
    command.env("KILN_LOG", "info");
    let output = command.output().expect("child runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert_eq!(child::result_line(&stdout), Some("compiled=40"), "{stdout}");

    let disk = DiskCache::open(DiskConfig::new(&dir)).expect("open");
    for n in 0..entries {
        let hit = disk
            .get(&owner().digest(), key(n).digest())
            .unwrap_or_else(|| panic!("entry {n} on disk after exit"));
        assert_eq!(
            hit.artifact(&ArtifactKind::Cubin).expect("checked"),
            Some(&payload(n)[..])
        );
    }
    let at_exit = stderr
        .lines()
        .find(|line| line.starts_with("kiln: at exit: "))
        .unwrap_or_else(|| panic!("no figures at exit in {stderr}"));
    assert!(
        at_exit.contains("compiles 40 (0 failed")
            && at_exit.contains("stores 40 done, 0 queued, 0 failed, 0 dropped"),
        "{at_exit}"
    );
}
