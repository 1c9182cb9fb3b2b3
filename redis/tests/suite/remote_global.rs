//! The global cache adds the remote tier when this crate is linked and
//! `KILN_REMOTE_CACHE` is set, through the tier factory it registers: the
//! wiring an application gets from `kiln::global()` with the feature
//! `redis`. Each process is this test binary re-run with
//! `KILN_REMOTE_GLOBAL_ROLE` set, running the suite's ignored test `child`, which
//! uses nothing but `kiln_core::global()`.

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::remote_support::{RedisServer, get};
use kiln_test_support::child;

// The application links kiln-redis (with `kiln`, through the facade's
// feature `redis`); this test names nothing else of it.
use kiln_redis as _;

const ROLE: &str = "KILN_REMOTE_GLOBAL_ROLE";

/// A process of this test binary that gets kernels `0..12` through
/// `kiln_core::global()`, with the disk tier in `dir` and `remote` (a URL,
/// or `None`: the variable unset) as `KILN_REMOTE_CACHE`.
fn process(dir: &std::path::Path, remote: Option<&str>) -> Command {
    let mut command = child::command(ROLE, "global");
    command
        .env("KILN_CACHE_DIR", dir)
        .env("KILN_REMOTE_TIMEOUT_MS", "2000")
        // An unsigned writer (no KILN_TRUSTED_KEYS): read-only otherwise.
        .env("KILN_REMOTE_WRITE", "1")
        .env_remove("KILN_TRUSTED_KEYS")
        .env_remove("KILN_SIGNING_KEY")
        .env_remove("KILN_CACHE")
        .env_remove("KILN_DISABLE")
        .env_remove("KILN_ALWAYS_COMPILE");
    match remote {
        Some(url) => command.env("KILN_REMOTE_CACHE", url),
        None => command.env_remove("KILN_REMOTE_CACHE"),
    };
    command
}

/// What a process reported on its `RESULT` line.
fn result(command: &mut Command) -> String {
    let stdout = child::run(command);
    child::result_line(&stdout)
        .map(|line| line.trim().to_owned())
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
}

/// The number of values on the server.
fn values_on(server: &RedisServer) -> usize {
    let mut con = server.connection().expect("connects");
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("KEYS");
    names.len()
}

#[test]
fn the_global_cache_asks_the_remote_tier_after_the_disk_and_writes_hits_through() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (dir_a, dir_b, dir_c) = (tempdir(), tempdir(), tempdir());
    let url = server.url();

    // No KILN_REMOTE_CACHE: the disk tier alone.
    assert_eq!(
        result(&mut process(dir_c.path(), None)),
        "tiers=disk compiles=12 tier_hits=0"
    );

    // A first machine compiles everything and stores it remotely.
    assert_eq!(
        result(&mut process(dir_a.path(), Some(&url))),
        "tiers=disk,remote compiles=12 tier_hits=0"
    );
    assert_eq!(values_on(&server), 12);

    // A second machine, its disk empty: every kernel from the remote tier.
    assert_eq!(
        result(&mut process(dir_b.path(), Some(&url))),
        "tiers=disk,remote compiles=0 tier_hits=12"
    );

    // The hits were written through to its disk: with the server gone, the
    // next process there still compiles nothing.
    server.stop();
    assert_eq!(
        result(&mut process(dir_b.path(), Some(&url))),
        "tiers=disk,remote compiles=0 tier_hits=12"
    );
}

/// The child's role named by `KILN_REMOTE_GLOBAL_ROLE` (nothing when unset),
/// run by the suite's `child` test.
pub fn run_child_role() {
    match std::env::var(ROLE).as_deref() {
        Ok("global") => {}
        _ => return,
    }
    let cache = kiln_core::global();
    let compiles = AtomicUsize::new(0);
    for i in 0..12 {
        get(cache, i, &compiles);
    }
    println!(
        "RESULT tiers={} compiles={} tier_hits={}",
        kiln_core::init().tiers().join(","),
        compiles.load(Ordering::SeqCst),
        cache.stats().hits_tier,
    );
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}
