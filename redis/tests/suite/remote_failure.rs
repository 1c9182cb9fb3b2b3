//! A remote tier whose server is stopped, unreachable or silent: every
//! kernel is still compiled and correct, one warning is logged, and after
//! the first failure the server is not asked again until the back-off ends.

use std::io::Read;
use std::net::TcpListener;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::remote_support::{RedisServer, WarnCounter, cache_with, free_port, get, remote};
use kiln_core::{Cache, Source};
use kiln_redis::{RemoteConfig, RemoteTier};

#[test]
fn server_stopped_mid_run_falls_back_to_compiling_and_warns_once() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let tier = remote(&server.url());
    let (cache, _) = cache_with(dir.path(), tier.clone());
    let compiles = AtomicUsize::new(0);
    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        get(&cache, 0, &compiles);
        assert_eq!(tier.stats().stored, 1);

        server.stop();
        for i in 1..=5 {
            assert_eq!(get(&cache, i, &compiles), Source::Memory);
        }
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 6);
    assert_eq!(warnings.count(), 1, "one warning for the outage");
    // Kernel 1's GET failed; its SET and the 8 operations of kernels 2..=5
    // were skipped while backing off.
    assert_eq!(
        tier.stats(),
        crate::remote_support::counted(|s| {
            s.misses = 1;
            s.stored = 1;
            s.failures = 1;
            s.skipped = 9;
        })
    );
}

#[test]
fn an_unreachable_server_is_asked_once_per_backoff() {
    let url = format!("redis://127.0.0.1:{}/0", free_port());
    let tier = remote(&url);
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        for i in 0..4 {
            get(&cache, i, &compiles);
        }
    });
    assert_eq!(compiles.load(Ordering::SeqCst), 4);
    assert_eq!(warnings.count(), 1);
    assert_eq!((tier.stats().failures, tier.stats().skipped), (1, 7));
}

#[test]
fn a_server_that_never_answers_costs_one_timeout() {
    // Accepts connections, reads what is sent, never replies.
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("address").port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut stream = stream;
                let mut sink = [0; 1024];
                while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
            });
        }
    });
    let tier = RemoteTier::open(
        RemoteConfig::new(format!("redis://127.0.0.1:{port}/0"))
            .timeout(Duration::from_millis(200))
            .backoff(Duration::from_secs(3600))
            .write_unsigned(true),
    )
    .expect("a valid URL");
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    for i in 0..3 {
        get(&cache, i, &compiles);
    }
    assert_eq!(compiles.load(Ordering::SeqCst), 3);
    assert_eq!((tier.stats().failures, tier.stats().skipped), (1, 5));
}

#[test]
fn after_the_backoff_a_server_that_is_back_is_used_again() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let port = server.port();
    let tier = RemoteTier::open(
        RemoteConfig::new(server.url())
            .timeout(Duration::from_millis(500))
            .backoff(Duration::ZERO)
            .write_unsigned(true),
    )
    .expect("a valid URL");
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    get(&cache, 0, &compiles);
    server.stop();
    get(&cache, 1, &compiles);
    assert_eq!(tier.stats().failures, 2, "GET and SET of kernel 1 failed");

    let server = RedisServer::start_on(port);
    get(&cache, 2, &compiles);
    assert_eq!(tier.stats().stored, 2, "kernels 0 and 2");

    // A fresh cache on the restarted server finds kernel 2.
    let again = Cache::new();
    again.add_tier(Box::new(remote(&server.url())));
    assert_eq!(get(&again, 2, &compiles), Source::Tier);
    assert_eq!(compiles.load(Ordering::SeqCst), 3);
}
