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

#[test]
fn a_bounded_flush_says_whether_the_stores_ran() {
    let (cache, tier) = gated();
    compile(&cache, 0);
    // The store waits at the gate: the bounded flush gives up, the store
    // still queued.
    assert!(!cache.flush_within(Duration::from_millis(20)));
    assert_eq!((tier.stored(), cache.stats().store_queue_depth), (0, 1));
    tier.open();
    assert!(cache.flush_within(Duration::from_secs(60)));
    assert_eq!((tier.stored(), cache.stats().store_queue_depth), (1, 0));
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

/// What a [`BatchingTier`] was asked: single stores and batches, each by
/// the kernel numbers of its entries.
#[derive(Debug, Default, PartialEq, Eq)]
struct Calls {
    stores: Vec<u64>,
    batches: Vec<Vec<u64>>,
}

/// A tier that records how the writer calls it: each call (single store
/// or batch) counts itself as entered, then waits at a gate (so that
/// stores queue behind the one running); it refuses the entries whose
/// number is in `refuse`, and gives no result for the last item of a batch
/// when `short`.
#[derive(Default)]
struct BatchingTier {
    gate: GatedTier,
    entered: AtomicU64,
    calls: Mutex<Calls>,
    refuse: Vec<u64>,
    short: bool,
    /// Its [`Tier::batch_window`].
    window: Duration,
}

/// The kernel number of an entry of [`compiled`] (`kernel_N`).
fn number(entry: &EntryData) -> u64 {
    entry.name["kernel_".len()..].parse().expect("kernel_N")
}

impl BatchingTier {
    /// Counts the call in, then waits at the gate.
    fn enter(&self, owner: &Owner, entry: &EntryData) {
        self.entered.fetch_add(1, Ordering::SeqCst);
        let _ = self.gate.store(owner, entry);
    }

    /// Waits until the writer is inside a call of this tier.
    fn wait_entered(&self) {
        for _ in 0..6000 {
            if self.entered.load(Ordering::SeqCst) > 0 {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!("the writer never called the tier");
    }

    fn result(&self, entry: &EntryData) -> Result<(), Error> {
        if self.refuse.contains(&number(entry)) {
            return Err(Error::DiskIo {
                action: "publish a segment in",
                path: "/nonexistent".into(),
                source: std::io::Error::other("refused by the test"),
            });
        }
        Ok(())
    }
}

impl Tier for BatchingTier {
    fn name(&self) -> &str {
        "batching"
    }

    fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<TierEntry>, Error> {
        Ok(None)
    }

    fn store(&self, owner: &Owner, entry: &EntryData) -> Result<(), Error> {
        self.enter(owner, entry);
        self.calls.lock().expect("lock").stores.push(number(entry));
        self.result(entry)
    }

    fn store_batch(&self, items: &[(&Owner, &EntryData)]) -> Vec<Result<(), Error>> {
        if let Some((owner, entry)) = items.first() {
            self.enter(owner, entry);
        }
        let numbers = items.iter().map(|(_, entry)| number(entry)).collect();
        self.calls.lock().expect("lock").batches.push(numbers);
        let mut results: Vec<Result<(), Error>> =
            items.iter().map(|(_, entry)| self.result(entry)).collect();
        if self.short {
            results.pop();
        }
        results
    }

    fn batch_window(&self) -> Duration {
        self.window
    }
}

#[test]
fn queued_plain_stores_reach_each_tier_as_one_batch_in_order() {
    let first = Arc::new(BatchingTier {
        refuse: vec![3, 7],
        ..BatchingTier::default()
    });
    let second = Arc::new(BatchingTier {
        short: true,
        ..BatchingTier::default()
    });
    second.gate.open();
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&first)));
    cache.add_tier(Box::new(Arc::clone(&second)));
    // Store 0 runs alone, held at the first tier's gate; 1..=11 queue
    // behind it.
    compile(&cache, 0);
    first.wait_entered();
    for n in 1..12 {
        compile(&cache, n);
    }
    assert_eq!(cache.stats().store_queue_depth, 12);
    first.gate.open();
    cache.flush();
    let expected = Calls {
        stores: vec![0],
        batches: vec![(1..12).collect()],
    };
    assert_eq!(*first.calls.lock().expect("lock"), expected);
    assert_eq!(*second.calls.lock().expect("lock"), expected);
    // Counted per entry and tier: the first tier refused 3 and 7, the
    // second gave no result for 11 (a failure).
    let stats = cache.stats();
    assert_eq!(
        (stats.stores, stats.store_failures, stats.store_queue_depth),
        (24 - 3, 3, 0),
        "{stats:?}"
    );
}

#[test]
fn a_batch_takes_only_what_is_queued_and_at_most_the_bound() {
    let tier = Arc::new(BatchingTier::default());
    let cache = Cache::new();
    cache.add_tier(Box::new(Arc::clone(&tier)));
    let extra = 10;
    let total = kiln_core::cache::MAX_BATCH_JOBS as u64 + extra + 1;
    compile(&cache, 0);
    tier.wait_entered();
    for n in 1..total {
        compile(&cache, n);
    }
    tier.gate.open();
    cache.flush();
    // Nothing queued: a lone store, run at once.
    compile(&cache, total);
    cache.flush();
    let calls = tier.calls.lock().expect("lock");
    assert_eq!(calls.stores, [0, total]);
    let sizes: Vec<usize> = calls.batches.iter().map(Vec::len).collect();
    assert_eq!(sizes, [kiln_core::cache::MAX_BATCH_JOBS, extra as usize]);
    let flat: Vec<u64> = calls.batches.iter().flatten().copied().collect();
    assert_eq!(flat, (1..total).collect::<Vec<_>>(), "in order");
    assert_eq!(cache.stats().stores, total + 1);
}

/// A cache of `config` whose one tier is a [`BatchingTier`] with the batch
/// window `window`, its gate open.
fn windowed(config: kiln_core::CacheConfig, window: Duration) -> (Cache, Arc<BatchingTier>) {
    let tier = Arc::new(BatchingTier {
        window,
        ..BatchingTier::default()
    });
    tier.gate.open();
    let cache = Cache::with_config(config);
    cache.add_tier(Box::new(Arc::clone(&tier)));
    (cache, tier)
}

#[test]
fn a_batch_window_gathers_stores_made_one_after_another_until_a_flush() {
    let (cache, tier) = windowed(kiln_core::CacheConfig::default(), Duration::from_secs(600));
    for n in 0..3 {
        compile(&cache, n);
        std::thread::sleep(Duration::from_millis(50));
    }
    // The writer holds them for the window: nothing stored yet.
    assert_eq!(*tier.calls.lock().expect("lock"), Calls::default());
    assert_eq!(cache.stats().store_queue_depth, 3);
    // A flush cuts the window short (a bound against waiting it out, not a
    // performance figure).
    let started = std::time::Instant::now();
    cache.flush();
    assert!(started.elapsed() < Duration::from_secs(300));
    let expected = Calls {
        stores: vec![],
        batches: vec![vec![0, 1, 2]],
    };
    assert_eq!(*tier.calls.lock().expect("lock"), expected);
    assert_eq!(cache.stats().stores, 3);
}

#[test]
fn a_batch_window_ends_on_its_own() {
    let (cache, tier) = windowed(
        kiln_core::CacheConfig::default(),
        Duration::from_millis(300),
    );
    compile(&cache, 0);
    compile(&cache, 1);
    // No flush: the window passes and the writer stores the batch.
    for _ in 0..2000 {
        if cache.stats().stores == 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let calls = tier.calls.lock().expect("lock");
    assert_eq!(calls.batches, [vec![0, 1]], "{calls:?}");
}

#[test]
fn dropping_the_cache_cuts_a_batch_window_short() {
    let (cache, tier) = windowed(kiln_core::CacheConfig::default(), Duration::from_secs(600));
    compile(&cache, 0);
    compile(&cache, 1);
    // As the exit hook: the drop flushes, and the flush does not wait out
    // the window (a bound against waiting it, not a performance figure).
    let started = std::time::Instant::now();
    drop(cache);
    assert!(started.elapsed() < Duration::from_secs(300));
    assert_eq!(tier.calls.lock().expect("lock").batches, [vec![0, 1]]);
}

#[test]
fn a_batch_window_ends_when_the_queue_holds_half_its_bytes() {
    // A memory cap of eight payloads bounds the queue to eight payloads'
    // bytes: at four queued, the writer stops gathering.
    let config = kiln_core::CacheConfig::default().memory_max_bytes(Some(8 * 512));
    let (cache, tier) = windowed(config, Duration::from_secs(600));
    for n in 0..4 {
        compile(&cache, n);
    }
    for _ in 0..2000 {
        if cache.stats().stores == 4 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let stats = cache.stats();
    assert_eq!((stats.stores, stats.stores_dropped), (4, 0), "{stats:?}");
    assert_eq!(
        tier.calls.lock().expect("lock").batches.concat(),
        [0, 1, 2, 3]
    );
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
