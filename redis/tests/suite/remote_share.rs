//! Caches with separate disk caches share compiled entries through a real
//! Redis server: in one process, and across processes.
//!
//! Children are this test binary re-run with `KILN_REMOTE_TEST_ROLE` set,
//! running the suite's ignored test `child`.

use std::sync::atomic::{AtomicUsize, Ordering};

use crate::remote_support::{
    RedisServer, cache_with, child_process, get, key, owner, remote, run_child,
};
use kiln_core::Source;
use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_image::{Image, Verification};

#[test]
fn a_second_cache_gets_every_entry_from_the_remote_and_writes_it_to_its_disk() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let compiles = AtomicUsize::new(0);

    let tier_a = remote(&server.url());
    let (a, _) = cache_with(dir_a.path(), tier_a.clone());
    for i in 0..6 {
        assert_eq!(get(&a, i, &compiles), Source::Memory);
    }
    assert_eq!(compiles.load(Ordering::SeqCst), 6);
    assert_eq!(tier_a.stats().stored, 6);

    let tier_b = remote(&server.url());
    let (b, disk_b) = cache_with(dir_b.path(), tier_b.clone());
    for i in 0..6 {
        assert_eq!(get(&b, i, &compiles), Source::Tier);
        assert!(
            disk_b.get(&owner().digest(), key(i).digest()).is_some(),
            "kernel {i} written through to the disk"
        );
    }
    assert_eq!(compiles.load(Ordering::SeqCst), 6, "no compile in b");
    assert_eq!((tier_b.stats().hits, tier_b.stats().stored), (6, 0));

    // A third cache on b's disk, with no remote, finds them there.
    let disk = DiskCache::open(DiskConfig::new(dir_b.path())).expect("opens");
    let c = kiln_core::Cache::new();
    c.add_tier(Box::new(disk));
    for i in 0..6 {
        assert_eq!(get(&c, i, &compiles), Source::Tier);
    }
    assert_eq!(compiles.load(Ordering::SeqCst), 6);
}

#[test]
fn a_remote_hit_is_64_byte_aligned() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let compiles = AtomicUsize::new(0);
    let (a, _) = cache_with(tempdir().path(), remote(&server.url()));
    for i in 0..16 {
        get(&a, i, &compiles);
    }
    // A cache whose only tier is the remote: every hit is its bytes, copied
    // from the reply into an aligned buffer.
    let tier = remote(&server.url());
    let b = kiln_core::Cache::new();
    b.add_tier(Box::new(tier.clone()));
    for i in 0..16 {
        assert_eq!(get(&b, i, &compiles), Source::Tier);
        let hit = b.lookup(&owner().digest(), &key(i)).expect("recorded");
        let bytes = hit
            .artifact(&kiln_core::ArtifactKind::Object)
            .expect("an object");
        assert_eq!(
            bytes.as_ptr() as usize % kiln_core::cache::PAYLOAD_ALIGN,
            0,
            "kernel {i}"
        );
    }
    assert_eq!(tier.stats().hits, 16);
    assert_eq!(compiles.load(Ordering::SeqCst), 16, "no compile in b");
}

#[test]
fn values_are_one_entry_images_under_namespaced_keys() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let dir = tempdir();
    let (cache, _) = cache_with(dir.path(), remote(&server.url()));
    get(&cache, 42, &AtomicUsize::new(0));

    let name = format!("kiln:v3:{}:{}", owner().digest(), key(42).digest());
    let mut con = server.connection().expect("connects");
    let names: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).expect("KEYS");
    assert_eq!(names, std::slice::from_ref(&name));
    let value: Vec<u8> = redis::cmd("GET").arg(&name).query(&mut con).expect("GET");
    let image = Image::from_bytes(&value, Verification::Full).expect("a valid image");
    assert_eq!(image.len(), 1);
    let entry = image.entry(0).expect("entry 0");
    assert_eq!(
        (entry.owner(), entry.key()),
        (owner().digest(), *key(42).digest())
    );
}

#[test]
fn two_processes_with_separate_disk_caches_share_entries() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let (dir_a, dir_b) = (tempdir(), tempdir());
    let run = |dir: &std::path::Path, url: &str| {
        run_child(
            child_process("compile")
                .env("KILN_CACHE_DIR", dir)
                .env("KILN_REMOTE_CACHE", url)
                .env("KILN_REMOTE_TEST_KEYS", "12"),
        )
    };
    let first = run(dir_a.path(), &server.url());
    assert_eq!(
        first,
        "compiles=12 tier_hits=0 remote_hits=0 remote_stored=12 remote_failures=0"
    );

    let second = run(dir_b.path(), &server.url());
    assert_eq!(
        second,
        "compiles=0 tier_hits=12 remote_hits=12 remote_stored=0 remote_failures=0"
    );

    // The second process wrote its remote hits to its own disk: a third
    // process on that disk needs no server.
    server.stop();
    let third = run(dir_b.path(), &server.url());
    assert_eq!(
        third,
        "compiles=0 tier_hits=12 remote_hits=0 remote_stored=0 remote_failures=0"
    );
}

fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}
