//! A directory that cannot be written degrades to compiling with one
//! warning, never an error.
//!
//! Tests run as root here, and permission bits do not stop root, so the
//! always-run tests make writes fail another way: the cache path lies under
//! a regular file (`ENOTDIR`). The mount tests use what stops root too: a
//! read-only bind mount (`EROFS`) and a full tmpfs (`ENOSPC`), set up in
//! private user and mount namespaces with `unshare -rm`, which needs a
//! kernel allowing user namespaces: they are opt-in (`--ignored`).

use std::path::Path;
use std::process::Command;

use crate::disk_support::{
    WarnCounter, child_process, compile, compiled, config, default_len, entry, ids, key, owner,
};
use kiln_core::disk::{DiskCache, DiskTier};
use kiln_core::{ArtifactKind, Cache, Source};

#[test]
fn a_cache_dir_that_cannot_be_created_is_one_warning_and_no_tier() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let under_a_file = file.path().join("kiln");
    let warnings = WarnCounter::default();
    let opened = tracing::subscriber::with_default(warnings.clone(), || {
        DiskCache::open_or_warn(config(&under_a_file))
    });
    assert!(opened.is_none());
    assert_eq!(warnings.count(), 1);
    let err = DiskCache::open(config(&under_a_file)).expect_err("ENOTDIR");
    assert!(err.to_string().contains("KILN_CACHE_DIR"), "{err}");
}

#[test]
fn a_lazy_disk_tier_that_cannot_create_its_directory_warns_once_and_compiles() {
    let file = tempfile::NamedTempFile::new().expect("temp file");
    let tier = DiskTier::new(config(&file.path().join("kiln")));
    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        let cache = Cache::new();
        cache.add_tier(Box::new(tier));
        assert_eq!(warnings.count(), 0, "adding the tier touched the disk");
        for i in 0..3 {
            let hit = cache
                .get_or_compile(&owner(), &key(i), || Ok(compiled(i, default_len(i))))
                .expect("never an error");
            assert_eq!(hit.source(), Source::Memory, "compiled");
        }
        assert_eq!(cache.stats().compiles, 3);
    });
    assert_eq!(warnings.count(), 1, "one warning, on first use");
}

#[test]
fn a_directory_that_stops_being_writable_serves_hits_and_compiles_with_one_warning() {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let disk = DiskCache::open(config(&dir)).expect("open");
    for i in 0..3 {
        assert!(disk.put(&entry(i, default_len(i))));
    }
    // The directory the cache holds is deleted (and a regular file takes
    // its path, which the cache no longer reads): every write now fails,
    // root or not. Segments already open stay readable.
    std::fs::rename(&dir, root.path().join("moved")).expect("rename");
    std::fs::remove_dir_all(root.path().join("moved")).expect("remove");
    std::fs::write(&dir, b"not a directory").expect("write");

    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        let cache = Cache::new();
        cache.add_tier(Box::new(disk));
        for i in 0..10 {
            let hit = cache
                .get_or_compile(&owner(), &key(i), || Ok(compiled(i, default_len(i))))
                .expect("never an error");
            let expected = if i < 3 { Source::Tier } else { Source::Memory };
            assert_eq!(hit.source(), expected, "kernel {i}");
            assert_eq!(
                hit.artifact(&ArtifactKind::Ptx),
                Some(&compile(i, default_len(i))[..])
            );
        }
        let stats = cache.stats();
        assert_eq!((stats.hits_tier, stats.compiles), (3, 7));
    });
    assert_eq!(warnings.count(), 1, "one warning for seven failed stores");
}

/// Runs `child` inside new user and mount namespaces after `setup` (a shell
/// snippet mounting something on `$D`).
fn in_namespace(dir: &Path, setup: &str, child: &Command) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["-rm", "sh", "-c"])
        .arg(format!("{setup} && exec \"$0\" \"$@\""))
        .arg(child.get_program())
        .args(child.get_args())
        .env("D", dir);
    for (name, value) in child.get_envs() {
        if let Some(value) = value {
            command.env(name, value);
        }
    }
    command
}

fn compile_run(dir: &Path, keys: u64) -> Command {
    let mut command = child_process("compile");
    command
        .env("KILN_CACHE_DIR", dir)
        .env("KILN_DISK_TEST_KEYS", keys.to_string());
    command
}

fn assert_namespaces_work() {
    let ok = Command::new("unshare")
        .args(["-rm", "true"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        ok,
        "these tests need unshare(1) and user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
    );
}

#[test]
#[ignore = "needs unshare(1) with user and mount namespaces"]
fn a_read_only_mount_serves_hits_and_compiles_the_rest_with_one_warning() {
    assert_namespaces_work();
    let dir = tempfile::tempdir().expect("temp dir");
    let first = crate::disk_support::run_for_result(&mut compile_run(dir.path(), 20));
    assert_eq!(first["compiles"], "20");

    let read_only = "mount --bind \"$D\" \"$D\" && mount -o remount,bind,ro \"$D\"";
    let result = crate::disk_support::run_for_result(&mut in_namespace(
        dir.path(),
        read_only,
        &compile_run(dir.path(), 30),
    ));
    assert_eq!(
        (
            result["tier_hits"].as_str(),
            result["compiles"].as_str(),
            result["warnings"].as_str()
        ),
        ("20", "10", "1")
    );
}

#[test]
#[ignore = "needs unshare(1) with user and mount namespaces"]
fn a_full_disk_compiles_everything_with_one_warning() {
    assert_namespaces_work();
    let dir = tempfile::tempdir().expect("temp dir");
    // 200 kernels of ~2.3 KiB on average do not fit in 128 KiB.
    let full = "mount -t tmpfs -o size=128k tmpfs \"$D\"";
    let result = crate::disk_support::run_for_result(&mut in_namespace(
        dir.path(),
        full,
        &compile_run(dir.path(), 200),
    ));
    assert_eq!(
        (result["compiles"].as_str(), result["warnings"].as_str()),
        ("200", "1")
    );
}

#[test]
fn entries_stored_before_the_failure_are_intact() {
    // The other half of "degrade": what was published before the directory
    // broke stays readable by a later process once it is back.
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("cache");
    let disk = DiskCache::open(config(&dir)).expect("open");
    assert!(disk.put(&entry(1, 500)));
    // A store needs the directory lock: a directory under its name makes
    // every store fail (root or not), as a broken directory would.
    let lock = config(&dir).images_dir().join("lock");
    std::fs::remove_file(&lock).expect("the lock file");
    std::fs::create_dir(&lock).expect("a directory named lock");
    // Under a subscriber of its own, as the other tests here: `tracing`
    // caches a warning's interest when it is first emitted, from that
    // thread's subscriber alone while only one is in use elsewhere, so a
    // first emission with none would hide the same warning from a test
    // counting it on another thread.
    let warnings = WarnCounter::default();
    tracing::subscriber::with_default(warnings.clone(), || {
        assert!(!disk.put(&entry(2, 500)));
    });
    assert!(!disk.is_writable());
    assert_eq!(warnings.count(), 1, "one warning for the failed store");
    std::fs::remove_dir(&lock).expect("the directory named lock");
    let later = DiskCache::open(config(&dir)).expect("open");
    assert!(later.get(&ids(1).0, &ids(1).1).is_some());
    assert!(later.get(&ids(2).0, &ids(2).1).is_none());
    assert!(later.verify().expect("verify").is_clean());
}
