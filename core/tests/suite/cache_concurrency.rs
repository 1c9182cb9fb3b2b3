//! Invariant 10 (ARCHITECTURE.md): concurrency. Concurrent `get_or_compile` callers for one
//! key compile once; a failure reaches every waiter and is not cached; a
//! panicking compile does not leave waiters hanging. Plus a stress test.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Barrier, Mutex};
use std::thread;

use crate::cache_support::{build_image, compiled, fp, key, open, owner, ptx};
use kiln_core::{Cache, Compiled, Digest, Error};

const THREADS: usize = 6;

/// Blocks the leader's compile until every other caller waits for it.
fn wait_for_followers(cache: &Cache) {
    while cache.stats().compile_waits < THREADS as u64 - 1 {
        thread::yield_now();
    }
}

#[test]
fn invariant10_concurrent_callers_compile_once() {
    let cache = Cache::new();
    let o = owner();
    let compiles = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    let results: Vec<Vec<u8>> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let hit = cache
                        .get_or_compile(&o, &key(1), || {
                            compiles.fetch_add(1, Ordering::SeqCst);
                            wait_for_followers(&cache);
                            Ok(compiled(1, "once"))
                        })
                        .unwrap();
                    ptx(&hit)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert!(results.iter().all(|r| *r == results[0]));
    let stats = cache.stats();
    assert_eq!(
        (stats.compiles, stats.compile_waits),
        (1, THREADS as u64 - 1)
    );
}

#[test]
fn invariant10_a_failure_reaches_every_waiter_and_is_not_cached() {
    let cache = Cache::new();
    let o = owner();
    let compiles = AtomicUsize::new(0);
    let barrier = Barrier::new(THREADS);
    let errors: Vec<String> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let result = cache.get_or_compile(&o, &key(1), || {
                        compiles.fetch_add(1, Ordering::SeqCst);
                        wait_for_followers(&cache);
                        Err("syntax error at line 3".into())
                    });
                    match result {
                        Err(Error::Compile { source, .. }) => source.to_string(),
                        other => panic!("expected the compile error, got {other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert!(errors.iter().all(|e| e == "syntax error at line 3"));
    // Not cached: the next call compiles again, and can succeed.
    let hit = cache
        .get_or_compile(&o, &key(1), || Ok(compiled(1, "fixed")))
        .unwrap();
    assert_eq!(hit.name(), "f1");
    let stats = cache.stats();
    assert_eq!((stats.compiles, stats.compile_failures), (2, 1));
}

#[test]
fn invariant10_a_panicking_compile_releases_its_waiters() {
    let cache = Cache::new();
    let o = owner();
    let barrier = Barrier::new(THREADS);
    let outcomes: Vec<&'static str> = thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|_| {
                s.spawn(|| {
                    barrier.wait();
                    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        cache.get_or_compile(
                            &o,
                            &key(1),
                            || -> Result<Compiled, kiln_core::BoxError> {
                                wait_for_followers(&cache);
                                panic!("compiler crashed");
                            },
                        )
                    }));
                    match result {
                        Err(_) => "panicked",
                        Ok(Err(Error::CompilePanicked { .. })) => "told",
                        Ok(other) => panic!("unexpected {other:?}"),
                    }
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert_eq!(outcomes.iter().filter(|o| **o == "panicked").count(), 1);
    assert_eq!(
        outcomes.iter().filter(|o| **o == "told").count(),
        THREADS - 1
    );
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
}

// ----- stress -----

const DEFS: u64 = 4;
const KEYS: u64 = 64;
const WORKERS: u64 = 4;
const OPS_PER_WORKER: u64 = 3000;
const REDEFINES: u64 = 40;
const INSERTED_PER_WORKER: u64 = 300;

fn def_name(d: u64) -> String {
    format!("def{d}.cu")
}

/// Compiled key `n` against version `v` of its definition: the payload says `v`.
fn versioned(n: u64, v: u64) -> Compiled {
    compiled(n, &format!("v{v}")).dep(def_name(n % DEFS), fp(&def_name(n % DEFS), v))
}

fn version_of(hit: &kiln_core::Hit<'_>) -> u64 {
    let text = String::from_utf8(ptx(hit)).unwrap();
    let start = text.rfind("(v").unwrap() + 2;
    text[start..text.len() - 1].parse().unwrap()
}

#[test]
fn invariant10_stress_inserts_lookups_compiles_and_redefines() {
    let cache = Cache::new();
    let o = owner();
    // Every definition version's fingerprint, to read versions back.
    let fingerprints: HashMap<Digest, u64> = (0..DEFS)
        .flat_map(|d| (0..=REDEFINES + 1).map(move |v| (fp(&def_name(d), v), v)))
        .collect();
    let version_in_cache = |d: u64| fingerprints[&cache.definition(&def_name(d)).unwrap()];
    // What the test has seen redefined (updated after `redefine` returns).
    let published: Vec<AtomicU64> = (0..DEFS).map(|_| AtomicU64::new(0)).collect();
    for d in 0..DEFS {
        cache.define(&def_name(d), fp(&def_name(d), 0));
    }
    // Half the keys start image-backed at version 0.
    let image = build_image(
        &o,
        (0..KEYS / 2).map(|n| versioned(n, 0)),
        (0..KEYS / 2).map(key),
    );
    assert_eq!(cache.merge_image(open(&image)).inserted, KEYS / 2);

    let compile_log: Mutex<HashMap<(u64, u64), u32>> = Mutex::new(HashMap::new());
    let barrier = Barrier::new(WORKERS as usize + 1);

    thread::scope(|s| {
        s.spawn(|| {
            barrier.wait();
            for r in 0..REDEFINES {
                let d = r % DEFS;
                let next = published[d as usize].load(Ordering::SeqCst) + 1;
                cache.redefine(&def_name(d), fp(&def_name(d), next));
                published[d as usize].store(next, Ordering::SeqCst);
                for _ in 0..50 {
                    thread::yield_now();
                }
            }
        });
        for w in 0..WORKERS {
            let (cache, o, published, compile_log, barrier) =
                (&cache, &o, &published, &compile_log, &barrier);
            let version_in_cache = &version_in_cache;
            s.spawn(move || {
                barrier.wait();
                let mut inserted = 0;
                for op in 0..OPS_PER_WORKER {
                    let n = (op * 7 + w * 13) % KEYS;
                    let d = (n % DEFS) as usize;
                    let floor = published[d].load(Ordering::SeqCst);
                    match op % 10 {
                        0..=5 => {
                            if let Some(hit) = cache.lookup(&o.digest(), &key(n)) {
                                assert!(
                                    version_of(&hit) >= floor,
                                    "a closed entry was returned: f{n} v{} after v{floor}",
                                    version_of(&hit)
                                );
                            }
                        }
                        6..=8 => {
                            let hit = cache
                                .get_or_compile(o, &key(n), || {
                                    let v = version_in_cache(n % DEFS);
                                    *compile_log.lock().unwrap().entry((n, v)).or_default() += 1;
                                    Ok(versioned(n, v))
                                })
                                .unwrap();
                            assert!(version_of(&hit) >= floor);
                        }
                        _ if inserted < INSERTED_PER_WORKER => {
                            let m = 1_000_000 + w * 10_000 + inserted;
                            cache.insert(o, &key(m), compiled(m, "inserted"));
                            inserted += 1;
                        }
                        _ => {}
                    }
                }
            });
        }
    });

    // Each key compiled at most once per definition version.
    let log = compile_log.into_inner().unwrap();
    for ((n, v), count) in &log {
        assert_eq!(*count, 1, "f{n} compiled {count} times against v{v}");
    }
    assert!(!log.is_empty());
    // No entry lost: every inserted key is there with its bytes, and every
    // key compiled against the final version of its definition is served.
    for w in 0..WORKERS {
        for i in 0..INSERTED_PER_WORKER.min(OPS_PER_WORKER / 10) {
            let m = 1_000_000 + w * 10_000 + i;
            let hit = cache
                .lookup(&o.digest(), &key(m))
                .unwrap_or_else(|| panic!("f{m} lost"));
            assert_eq!(ptx(&hit), crate::cache_support::payload(m, "inserted"));
        }
    }
    for (n, v) in log.keys() {
        if *v == version_in_cache(n % DEFS) {
            let hit = cache
                .lookup(&o.digest(), &key(*n))
                .unwrap_or_else(|| panic!("f{n} lost"));
            assert_eq!(version_of(&hit), *v);
        }
    }
    assert_eq!(cache.stats().compiles, log.len() as u64);
}
