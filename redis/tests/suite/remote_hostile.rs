//! A hostile server on loopback ([`HostileServer`]): a reply announcing a
//! gigabyte, a reply trickled one byte every 50 ms forever, silence,
//! silence or a trickle during the handshake, a late handshake, resets and
//! replies of the wrong type. Every case is a miss, one warning, a back-off
//! (no back-off for an error reply, which is a refusal), then a compile that
//! serves the right bytes. Each operation ends by its deadline: the wall
//! time of each case is checked against a generous multiple of it, a
//! correctness bound (an operation that hangs, or takes two deadlines),
//! not a performance figure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::remote_support::{Answer, HostileServer, WarnCounter, child_process, get, run_child};
use kiln_core::{Cache, Source};
use kiln_redis::{RemoteConfig, RemoteStats, RemoteTier};

/// The deadline of one operation in these tests.
const DEADLINE: Duration = Duration::from_millis(300);

/// The bound on a case of two kernels (one operation reaches the server,
/// the other three are skipped while backing off): ten deadlines.
const BOUND: Duration = Duration::from_secs(3);

fn tier(url: &str, timeout: Duration) -> RemoteTier {
    RemoteTier::open(
        RemoteConfig::new(url)
            .timeout(timeout)
            .backoff(Duration::from_secs(3600))
            .max_entry_bytes(1 << 20)
            .write_unsigned(true),
    )
    .expect("a valid URL")
}

/// Gets kernels 0 and 1 through a remote tier on `url`: both compiled with
/// the right bytes, within [`BOUND`]. Returns the tier's counters and the
/// warnings logged.
fn two_kernels(url: &str, what: &str) -> (RemoteStats, Vec<String>) {
    let tier = tier(url, DEADLINE);
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    let warnings = WarnCounter::default();
    let started = Instant::now();
    tracing::subscriber::with_default(warnings.clone(), || {
        for i in 0..2 {
            assert_eq!(get(&cache, i, &compiles), Source::Memory, "{what}");
        }
    });
    let took = started.elapsed();
    eprintln!("{what}: two kernels in {took:?} (deadline {DEADLINE:?})");
    assert!(took < BOUND, "{what}: {took:?}, deadline {DEADLINE:?}");
    assert_eq!(compiles.load(Ordering::SeqCst), 2, "{what}");
    (tier.stats(), warnings.warnings())
}

/// One outage: the first `GETRANGE` failed, its kernel's `SET` and both
/// operations of the second kernel were skipped, one warning (which
/// contains `why`), one connection.
fn assert_one_outage(server: &HostileServer, url: &str, what: &str, why: &str) {
    let (stats, warnings) = two_kernels(url, what);
    assert_eq!(
        stats,
        crate::remote_support::counted(|s| {
            s.failures = 1;
            s.skipped = 3;
        }),
        "{what}"
    );
    assert_eq!(warnings.len(), 1, "{what}: {warnings:?}");
    assert!(warnings[0].contains(why), "{what}: {}", warnings[0]);
    assert_eq!(server.connections(), 1, "{what}: asked once");
}

#[test]
fn a_reply_announcing_a_gigabyte_is_read_up_to_the_cap() {
    let server = HostileServer::start(Answer::Ok, Answer::Oversized(1 << 30));
    assert_one_outage(
        &server,
        &server.url(),
        "1 GiB bulk string",
        "not read further",
    );
}

#[test]
fn the_peak_memory_of_a_gigabyte_reply_is_a_small_multiple_of_the_cap() {
    for cap_mib in [1u64, 64] {
        let mut child = child_process("oversized");
        child.env("KILN_REMOTE_TEST_CAP", (cap_mib << 20).to_string());
        let result = run_child(&mut child);
        eprintln!("cap {cap_mib} MiB, 1 GiB announced and sent: {result}");
        let field = |name: &str| {
            result
                .split_whitespace()
                .find_map(|f| f.strip_prefix(name)?.strip_prefix('='))
                .unwrap_or_else(|| panic!("no {name} in {result}"))
                .to_owned()
        };
        assert_eq!(field("source"), "Memory", "compiled");
        assert_eq!(field("failures"), "1");
        let growth_kib: u64 = field("peak_growth_kib").parse().expect("a number");
        // Buffer, its doubling and the value's copy: a few caps, plus a
        // few MiB of fixed costs (threads, the compile), never the 1 GiB.
        let bound_kib = (4 * cap_mib + 16) << 10;
        assert!(
            growth_kib < bound_kib,
            "cap {cap_mib} MiB: peak grew by {growth_kib} KiB"
        );
    }
}

#[test]
fn a_reply_trickled_forever_ends_at_the_deadline() {
    let server = HostileServer::start(Answer::Ok, Answer::Trickle(Duration::from_millis(50)));
    assert_one_outage(&server, &server.url(), "trickle", "within the timeout");
}

#[test]
fn a_silent_server_costs_one_deadline() {
    let server = HostileServer::start(Answer::Ok, Answer::Silence);
    assert_one_outage(&server, &server.url(), "silence", "within the timeout");
}

#[test]
fn a_silent_or_trickling_handshake_costs_one_deadline() {
    for (what, handshake) in [
        ("silent AUTH", Answer::Silence),
        ("trickled AUTH", Answer::Trickle(Duration::from_millis(50))),
    ] {
        let server = HostileServer::start(handshake, Answer::Raw(b"$0\r\n\r\n".to_vec()));
        let url = server.url_with_handshake();
        assert_one_outage(&server, &url, what, "within the timeout");
    }
}

#[test]
fn a_late_handshake_leaves_the_command_only_what_is_left_of_the_deadline() {
    // The handshake is answered at 90 % of the deadline, the command never:
    // the operation ends at one deadline. (A timeout per phase would give
    // the command a whole one more: 1.9 deadlines.)
    let deadline = Duration::from_secs(1);
    let late = Answer::After(deadline * 9 / 10, Box::new(Answer::Ok));
    let server = HostileServer::start(late, Answer::Silence);
    let tier = tier(&server.url_with_handshake(), deadline);
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    let started = Instant::now();
    assert_eq!(get(&cache, 0, &compiles), Source::Memory);
    let took = started.elapsed();
    eprintln!("late handshake: one kernel in {took:?} (deadline {deadline:?})");
    assert!(
        took < deadline * 18 / 10,
        "{took:?} for one {deadline:?} deadline"
    );
    assert_eq!((tier.stats().failures, tier.stats().skipped), (1, 1));
}

#[test]
fn a_reset_connection_is_an_outage() {
    for (what, handshake, command) in [
        ("reset at the command", Answer::Ok, Answer::Reset),
        ("reset at AUTH", Answer::Reset, Answer::Ok),
    ] {
        let server = HostileServer::start(handshake, command);
        let url = if what.ends_with("AUTH") {
            server.url_with_handshake()
        } else {
            server.url()
        };
        assert_one_outage(&server, &url, what, "GETRANGE");
    }
}

#[test]
fn replies_of_the_wrong_type_are_an_outage() {
    let cases: [(&str, &[u8], &str); 7] = [
        ("integer", b":42\r\n", "an integer"),
        ("nil", b"$-1\r\n", "nil"),
        ("simple string", b"+OK\r\n", "a simple string"),
        (
            "array",
            b"*2\r\n$1\r\na\r\n$1\r\nb\r\n",
            "not a string, error or integer",
        ),
        (
            "array of 10^9",
            b"*1000000000\r\n",
            "not a string, error or integer",
        ),
        (
            "RESP3 map",
            b"%1\r\n+a\r\n+b\r\n",
            "not a string, error or integer",
        ),
        (
            "not RESP",
            b"HTTP/1.1 400 Bad Request\r\n\r\n",
            "not a string, error or integer",
        ),
    ];
    for (what, reply, why) in cases {
        let server = HostileServer::start(Answer::Ok, Answer::Raw(reply.to_vec()));
        assert_one_outage(&server, &server.url(), what, why);
    }
}

#[test]
fn an_error_reply_is_a_refusal_without_backoff() {
    let server = HostileServer::start(Answer::Ok, Answer::Raw(b"-ERR not today\r\n".to_vec()));
    let (stats, warnings) = two_kernels(&server.url(), "error reply");
    // Every GETRANGE and SET was asked and refused; one warning.
    assert_eq!(
        stats,
        crate::remote_support::counted(|s| {
            s.failures = 4;
        })
    );
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(warnings[0].contains("not today"), "{}", warnings[0]);
    assert_eq!(
        server.connections(),
        4,
        "a refused connection is not reused"
    );
}

#[test]
fn threads_waiting_for_the_same_kernel_are_bounded_by_the_one_deadline() {
    // A longer deadline here, so that every thread surely joins the flight
    // while the leader's load runs.
    let deadline = Duration::from_secs(1);
    let server = HostileServer::start(Answer::Ok, Answer::Trickle(Duration::from_millis(50)));
    let tier = tier(&server.url(), deadline);
    let cache = Cache::new();
    cache.add_tier(Box::new(tier.clone()));
    let compiles = AtomicUsize::new(0);
    let start = std::sync::Barrier::new(4);
    let started = Instant::now();
    std::thread::scope(|scope| {
        for _ in 0..4 {
            scope.spawn(|| {
                start.wait();
                assert_eq!(get(&cache, 7, &compiles), Source::Memory);
            });
        }
    });
    let took = started.elapsed();
    eprintln!("4 threads, one kernel, trickle: {took:?} (deadline {deadline:?})");
    assert!(took < BOUND, "{took:?}, deadline {deadline:?}");
    // One thread led: one load (ended by its deadline), one compile; the
    // others waited for it and took its result.
    assert_eq!(compiles.load(Ordering::SeqCst), 1);
    assert_eq!(cache.stats().compile_waits, 3);
    assert_eq!((tier.stats().failures, server.connections()), (1, 1));
}
