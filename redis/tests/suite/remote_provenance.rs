//! Provenance survives the tiers: a value the remote tier received
//! unsigned, in a process without trusted keys, is written through to the
//! disk tier as *received unsigned*, and a later process with
//! `KILN_TRUSTED_KEYS` never serves it from there, whatever happens in
//! between (compaction, `gc`, other processes storing and reading). Before,
//! the disk tier filed it among this user's compiles, and the planted bytes
//! came back from disk with trusted keys set.
//!
//! Every process here is a real child process using `kiln_core::global()`
//! (the disk tier of `KILN_CACHE_DIR`, the remote tier of
//! `KILN_REMOTE_CACHE` writing through to it) against a real
//! `redis-server`.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::remote_signed::{EVIL, poisoned, redis_key, set, signer, value};
use crate::remote_support::{RedisServer, WarnCounter, code, compile, key, owner};
use kiln_core::ArtifactKind;
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_image::TrustedKeys;
use kiln_test_support::child;

const ROLE: &str = "KILN_PROVENANCE_TEST_ROLE";

/// What a child process saw, per kernel and in all.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    /// Kernels served the planted bytes.
    evil: usize,
    compiles: usize,
    tier_hits: u64,
    untrusted: u64,
    /// Warnings about an entry refused for trust.
    trust_warnings: usize,
}

/// A child using the global cache on `dir` (and the server at `url`, if
/// given; `trusted` as `KILN_TRUSTED_KEYS`) to get kernels `kernels`.
fn process(dir: &Path, url: Option<&str>, trusted: Option<&Path>, kernels: &str) -> Seen {
    let mut command = child::command(ROLE, "get");
    command
        .env("KILN_CACHE_DIR", dir)
        .env("KILN_PROVENANCE_KERNELS", kernels)
        .env("KILN_REMOTE_TIMEOUT_MS", "2000")
        .env_remove("KILN_CACHE")
        .env_remove("KILN_REMOTE_CACHE")
        .env_remove("KILN_REMOTE_WRITE")
        .env_remove("KILN_TRUSTED_KEYS")
        .env_remove("KILN_SIGNING_KEY");
    if let Some(url) = url {
        command.env("KILN_REMOTE_CACHE", url);
    }
    if let Some(keys) = trusted {
        command.env("KILN_TRUSTED_KEYS", keys);
    }
    let stdout = child::run(&mut command);
    let line = child::result_line(&stdout)
        .unwrap_or_else(|| panic!("no RESULT line in:\n{stdout}"))
        .trim()
        .to_owned();
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
            .and_then(|value| value.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    Seen {
        evil: field("evil") as usize,
        compiles: field("compiles") as usize,
        tier_hits: field("tier_hits"),
        untrusted: field("untrusted"),
        trust_warnings: field("trust_warnings") as usize,
    }
}

/// The role of a child process of these tests: gets the kernels of
/// `KILN_PROVENANCE_KERNELS` (`first..end`) through `kiln_core::global()`
/// and prints what it saw. Nothing when the role variable is unset.
pub fn run_child_role() {
    if std::env::var(ROLE).as_deref() != Ok("get") {
        return;
    }
    let warnings = WarnCounter::default();
    tracing::subscriber::set_global_default(warnings.clone()).expect("the child's subscriber");
    let range = std::env::var("KILN_PROVENANCE_KERNELS").expect("kernels");
    let (first, end) = range.split_once("..").expect("first..end");
    let (first, end): (u64, u64) = (first.parse().expect("n"), end.parse().expect("n"));
    let cache = kiln_core::global();
    let compiles = AtomicUsize::new(0);
    let mut evil = 0;
    for i in first..end {
        let hit = cache
            .get_or_compile(&owner(), &key(i), || compile(i, &compiles))
            .expect("compiles");
        let bytes = hit.artifact(&ArtifactKind::Object).expect("an object");
        if bytes == EVIL {
            evil += 1;
        } else {
            assert_eq!(
                bytes,
                &code(i)[..],
                "kernel {i}: neither its code nor the planted bytes"
            );
        }
    }
    kiln_core::flush();
    let stats = cache.stats();
    let trust_warnings = warnings
        .warnings()
        .iter()
        .filter(|w| w.contains("not signed by a trusted key"))
        .count();
    println!(
        "RESULT evil={evil} compiles={} tier_hits={} untrusted={} trust_warnings={trust_warnings}",
        compiles.load(Ordering::SeqCst),
        stats.hits_tier,
        stats.tier_untrusted,
    );
}

/// A file trusting the writer key of these tests.
fn trusted_keys_file(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("writers.pub");
    std::fs::write(&path, format!("{}\n", signer(1).public_key())).expect("writes");
    path
}

fn delete(server: &RedisServer, name: &str) {
    let mut con = server.connection().expect("connects");
    redis::cmd("DEL")
        .arg(name)
        .query::<()>(&mut con)
        .expect("DEL");
}

/// The disk cache of `dir` as a process with `trusted` keys opens it.
fn disk(dir: &Path, trusted: Option<TrustedKeys>) -> DiskCache {
    let mut config = DiskConfig::new(dir);
    config.trusted_keys = trusted;
    DiskCache::open(config).expect("opens")
}

/// Plants the unsigned kernel 0 on the server; a process without trusted
/// keys reads it (served, written through to `dir`); then the value is
/// deleted from the server, so that only the disk tier holds it.
fn laundering_attempt(server: &RedisServer, dir: &Path) {
    set(server, &redis_key(0), &poisoned(0, None));
    let reader = process(dir, Some(&server.url()), None, "0..1");
    assert_eq!(
        (reader.evil, reader.compiles, reader.tier_hits),
        (1, 0, 1),
        "without trusted keys the planted value is served: {reader:?}"
    );
    delete(server, &redis_key(0));
    assert_eq!(value(server, &redis_key(0)), None);
}

#[test]
fn an_unsigned_remote_value_written_through_is_never_served_with_trusted_keys() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let keys = trusted_keys_file(root.path());
    laundering_attempt(&server, &dir);
    // On disk, it says where it came from.
    let listed = disk(&dir, None).ls().expect("lists");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].provenance,
        "received unsigned from the remote tier"
    );

    // A process with trusted keys: refused from disk (one warning), not on
    // the server any more: compiled, and its own bytes served.
    let keyed = process(&dir, Some(&server.url()), Some(&keys), "0..1");
    assert_eq!(
        keyed,
        Seen {
            evil: 0,
            compiles: 1,
            tier_hits: 0,
            untrusted: 1,
            trust_warnings: 1,
        }
    );
    // Again, with no remote tier at all: the disk tier alone still refuses
    // the planted copy and serves the compile the keyed process stored.
    let again = process(&dir, None, Some(&keys), "0..1");
    assert_eq!((again.evil, again.compiles, again.tier_hits), (0, 0, 1));
    // `kiln cache verify` under the keys calls the received segment
    // untrusted; the compiled one passes.
    let report = disk(&dir, Some(TrustedKeys::new([signer(1).public_key()])))
        .verify()
        .expect("verifies");
    assert!(!report.is_clean());
    let refused: Vec<&str> = report
        .segments
        .iter()
        .filter(|s| s.refused.is_some())
        .map(|s| s.provenance.as_str())
        .collect();
    assert_eq!(refused, ["received unsigned from the remote tier"]);
}

#[test]
fn compaction_between_the_two_reads_keeps_the_value_received() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let keys = trusted_keys_file(root.path());
    laundering_attempt(&server, &dir);
    // More received values and more compiles, then every kind of
    // compaction: the stores' own (more than three segments of a kind)
    // and `gc` (everything merged).
    for i in 1..6 {
        set(&server, &redis_key(i), &poisoned(i, None));
    }
    let more = process(&dir, Some(&server.url()), None, "1..6");
    assert_eq!(more.evil, 5);
    let compiled = process(&dir, None, None, "10..16");
    assert_eq!(compiled.compiles, 6);
    let report = disk(&dir, None).gc().expect("gc");
    assert_eq!(report.entries, 12);
    assert!(report.segments_after <= 2, "{report:?}");
    for i in 0..6 {
        let _ = server
            .connection()
            .map(|mut con| redis::cmd("DEL").arg(redis_key(i)).query::<()>(&mut con));
    }
    // With trusted keys: the six received entries are compiled, the six
    // compiled ones served from disk.
    let keyed = process(&dir, None, Some(&keys), "0..6");
    assert_eq!((keyed.evil, keyed.compiles, keyed.untrusted), (0, 6, 6));
    assert_eq!(keyed.trust_warnings, 1, "one warning, not one per entry");
    let served = process(&dir, None, Some(&keys), "10..16");
    assert_eq!((served.evil, served.compiles, served.tier_hits), (0, 0, 6));
}

#[test]
fn a_second_process_in_between_does_not_promote_what_it_read() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let keys = trusted_keys_file(root.path());
    laundering_attempt(&server, &dir);
    // A process without keys and without the remote tier reads the value
    // from disk (served: it trusts everything) and compiles others, whose
    // stores compact the directory.
    let between = process(&dir, None, None, "0..8");
    assert_eq!(
        (between.evil, between.compiles, between.tier_hits),
        (1, 7, 1)
    );
    let keyed = process(&dir, None, Some(&keys), "0..8");
    assert_eq!(
        (keyed.evil, keyed.compiles, keyed.tier_hits, keyed.untrusted),
        (0, 1, 7, 1)
    );
}

#[test]
fn a_value_signed_by_an_untrusted_key_stays_signed_on_disk_and_refused() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let keys = trusted_keys_file(root.path());
    set(&server, &redis_key(0), &poisoned(0, Some(&signer(9))));
    let reader = process(&dir, Some(&server.url()), None, "0..1");
    assert_eq!(reader.evil, 1);
    delete(&server, &redis_key(0));
    let listed = disk(&dir, None).ls().expect("lists");
    assert_eq!(listed[0].provenance, "received signed from another tier");
    disk(&dir, None).gc().expect("gc");
    let keyed = process(&dir, None, Some(&keys), "0..1");
    assert_eq!((keyed.evil, keyed.compiles, keyed.untrusted), (0, 1, 1));
}
