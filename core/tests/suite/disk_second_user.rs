//! The cache directory's ownership and mode checks against a real second
//! user. CI runs as root, where a check of "owned by this user" is easy to
//! get wrong unnoticed (root may read and write everything), so the test
//! creates the user it needs (`useradd`) and runs the disk tier as that
//! user: a child process (this test binary again, the `compile` role of
//! `disk_support`: a `Cache` with the disk tier of `KILN_CACHE_DIR`) started
//! with the user's uid and gid. Directories and files are prepared by root,
//! owned by one uid or the other.
//!
//! Not root (a developer's machine): skipped with a message; in CI it is
//! required (`kiln_test_support::ci::required`).

use std::collections::BTreeMap;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use crate::disk_support::{child_process, compile, entry, ids, run_for_result};
use kiln_core::disk::{DiskCache, DiskConfig};

/// The user these tests create and run as.
const USER: &str = "kiln-second-user";

/// The second user's uid and gid, creating the user when missing; `None`
/// (skipped, or a failure in CI) when this process is not root.
fn second_user() -> Option<(u32, u32)> {
    // SAFETY: `geteuid` has no preconditions and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let root = if euid == 0 {
        Ok(())
    } else {
        Err(format!("this test runs as uid {euid}"))
    };
    kiln_test_support::ci::required(root, "root (to create a second user and run as it)")?;
    let id = |flag: &str| -> Option<u32> {
        let output = Command::new("id").args([flag, USER]).output().ok()?;
        String::from_utf8(output.stdout).ok()?.trim().parse().ok()
    };
    if id("-u").is_none() {
        let status = Command::new("useradd")
            .args([
                "--system",
                "--no-create-home",
                "--shell",
                "/usr/sbin/nologin",
                USER,
            ])
            .status()
            .expect("useradd runs");
        // Two tests may create it at once: the loser fails, the user exists.
        assert!(
            status.success() || id("-u").is_some(),
            "useradd {USER}: {status}"
        );
    }
    Some((
        id("-u").expect("the user's uid"),
        id("-g").expect("the user's gid"),
    ))
}

/// A directory at `path`, owned by `uid:gid`, mode `mode`.
fn dir(path: &Path, (uid, gid): (u32, u32), mode: u32) {
    std::fs::create_dir_all(path).expect("mkdir");
    chown(path, Some(uid), Some(gid)).expect("chown");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).expect("chmod");
}

/// The disk tier run by the second user on `cache_dir`: three kernels got,
/// with what happened.
fn run_as(user: (u32, u32), cache_dir: &Path) -> BTreeMap<String, String> {
    let mut command = child_process("compile");
    command
        .uid(user.0)
        .gid(user.1)
        .env("KILN_CACHE_DIR", cache_dir)
        .env("KILN_DISK_TEST_KEYS", "3")
        .env_remove("KILN_CACHE")
        .env_remove("KILN_CACHE_TRUST_DIR")
        .env_remove("KILN_TRUSTED_KEYS");
    run_for_result(&mut command)
}

fn fields(result: &BTreeMap<String, String>) -> (u64, u64, u64) {
    let get = |name: &str| result[name].parse::<u64>().expect("a number");
    (get("compiles"), get("tier_hits"), get("warnings"))
}

/// A root for the tests' directories that the second user can reach.
fn reachable_root() -> tempfile::TempDir {
    let root = tempfile::tempdir().expect("temp dir");
    std::fs::set_permissions(root.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    root
}

#[test]
fn a_directory_another_user_owns_or_may_write_is_refused_as_that_user() {
    let Some(user) = second_user() else {
        return;
    };
    let root = reachable_root();
    // Owned by root, readable by all: not the user's.
    let roots = root.path().join("roots");
    dir(&roots, (0, 0), 0o755);
    // The user's, but others may write to it.
    let open = root.path().join("open");
    dir(&open, user, 0o777);
    let group = root.path().join("group");
    dir(&group, user, 0o770);
    // The user's, private, but its `images-v<N>/` is root's.
    let nested = root.path().join("nested");
    dir(&nested, user, 0o700);
    dir(&DiskConfig::new(&nested).images_dir(), (0, 0), 0o755);
    for refused in [&roots, &open, &group, &nested] {
        let result = run_as(user, refused);
        assert_eq!(
            fields(&result),
            (3, 0, 1),
            "{}: every kernel compiled, one warning: {result:?}",
            refused.display()
        );
    }
    // Nothing was written into a refused directory.
    for refused in [&open, &group] {
        assert_eq!(std::fs::read_dir(refused).expect("lists").count(), 0);
    }
    // Root refuses the user's directory the same way, saying why.
    let error = DiskCache::open(DiskConfig::new(&group)).expect_err("refused");
    assert!(
        error
            .to_string()
            .contains(&format!("owned by user {}", user.0)),
        "{error}"
    );
}

#[test]
fn the_users_own_private_directory_is_used_and_stays_private() {
    let Some(user) = second_user() else {
        return;
    };
    let root = reachable_root();
    let cache_dir = root.path().join("mine");
    dir(&cache_dir, user, 0o700);
    let first = run_as(user, &cache_dir);
    assert_eq!(fields(&first), (3, 0, 0), "{first:?}");
    let second = run_as(user, &cache_dir);
    assert_eq!(fields(&second), (0, 3, 0), "served from disk: {second:?}");
    // Everything it created is the user's, directories 0700, files 0600.
    let images = DiskConfig::new(&cache_dir).images_dir();
    let meta = std::fs::metadata(&images).expect("created");
    assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), user.0);
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    for file in std::fs::read_dir(&images).expect("lists") {
        let meta = file.expect("an entry").metadata().expect("stat");
        assert_eq!(std::os::unix::fs::MetadataExt::uid(&meta), user.0);
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
}

#[test]
fn files_another_uid_owns_in_the_users_directory_are_misses_not_failures() {
    let Some(user) = second_user() else {
        return;
    };
    let root = reachable_root();
    let cache_dir = root.path().join("planted");
    dir(&cache_dir, user, 0o700);
    let images = DiskConfig::new(&cache_dir).images_dir();
    dir(&images, user, 0o700);
    // Root refuses the user's directory as any other user's, unless told
    // to trust it: then (a `sudo` run with KILN_CACHE_TRUST_DIR=1, say) it
    // leaves a base segment holding kernel 0, and the lock and stamps
    // files, owned by root and private to it.
    assert!(DiskCache::open(DiskConfig::new(&cache_dir)).is_err());
    let mut trusting = DiskConfig::new(&cache_dir);
    trusting.trust_dir = true;
    let by_root = DiskCache::open(trusting).expect("opens as root");
    assert!(by_root.put(&entry(0, 100)));
    by_root.gc().expect("gc");
    drop(by_root);
    for file in std::fs::read_dir(&images).expect("lists") {
        let path = file.expect("an entry").path();
        chown(&path, Some(0), Some(0)).expect("chown");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    }
    let planted = listing(&images);
    // The user cannot read root's segment: a miss and a compile, never a
    // failure; storing needs the lock it cannot open (the stores run on
    // the background writer, after the child's counts: one warning then,
    // and no more writes); nothing of root's is changed, nothing added.
    let result = run_as(user, &cache_dir);
    let (compiles, tier_hits, _) = fields(&result);
    assert_eq!((compiles, tier_hits), (3, 0), "{result:?}");
    assert_eq!(listing(&images), planted);
}

/// The files of `dir`, each with its owner and size.
fn listing(dir: &Path) -> Vec<(String, u32, u64)> {
    let mut files: Vec<(String, u32, u64)> = std::fs::read_dir(dir)
        .expect("lists")
        .map(|file| {
            let file = file.expect("an entry");
            let meta = file.metadata().expect("stat");
            (
                file.file_name().to_string_lossy().into_owned(),
                std::os::unix::fs::MetadataExt::uid(&meta),
                meta.len(),
            )
        })
        .collect();
    files.sort();
    files
}

/// The entry of kernel `i` with other bytes than a compile gives: what an
/// attacker plants.
fn planted(i: u64) -> kiln_image::EntryData {
    let mut entry = entry(i, 64);
    entry.artifacts[0].bytes = b"// EVIL PTX planted by another user".to_vec();
    entry
}

/// A cache directory at `path` holding the planted kernel `i` (labelled as
/// this user's compile, as a cache directory of the attacker's own says),
/// then given, with everything in it, to `user`.
fn attackers_cache(path: &Path, user: (u32, u32), i: u64) {
    let mut config = DiskConfig::new(path);
    config.trust_dir = true;
    let cache = DiskCache::open(config).expect("opens");
    assert!(cache.put(&planted(i)));
    drop(cache);
    let status = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", user.0, user.1))
        .arg(path)
        .status()
        .expect("chown runs");
    assert!(status.success());
}

/// As `user`, in `dir`: renames `cache` away and puts a symbolic link to
/// `evil` in its place (`mv`, `ln`: the user's own permissions decide).
fn swap_as(user: (u32, u32), dir: &Path, evil: &Path) {
    let status = Command::new("sh")
        .args(["-c", "mv cache moved && ln -s \"$EVIL\" cache"])
        .env("EVIL", evil)
        .current_dir(dir)
        .uid(user.0)
        .gid(user.1)
        .status()
        .expect("sh runs");
    assert!(status.success(), "the second user swapped the directory");
}

#[test]
fn a_cache_directory_swapped_by_another_user_is_never_read_by_a_running_process() {
    let Some(user) = second_user() else {
        return;
    };
    let root = reachable_root();
    // The victim's cache, in a directory that is root's when the cache is
    // opened (so it is accepted), and the second user's afterwards (an
    // administrator's mistake, a shared project folder).
    let parent = root.path().join("project");
    dir(&parent, (0, 0), 0o755);
    let path = parent.join("cache");
    let evil = root.path().join("evil");
    attackers_cache(&evil, user, 1);
    let mut config = DiskConfig::new(&path);
    config.trusted_keys = Some(kiln_image::TrustedKeys::default());
    let victim = DiskCache::open(config.clone()).expect("opens: everything is root's");
    assert!(victim.put(&entry(0, 64)));

    chown(&parent, Some(user.0), Some(user.1)).expect("chown");
    swap_as(user, &parent, &evil);
    assert!(
        std::fs::symlink_metadata(&path)
            .expect("the link")
            .file_type()
            .is_symlink()
    );

    // The running process keeps the directory it checked: the planted
    // kernel is not found (before: served, labelled as its own compile),
    // its own entry still is, and what it stores goes where it checked.
    assert!(
        victim.get(&ids(1).0, &ids(1).1).is_none(),
        "the planted entry was served"
    );
    let own = victim.get(&ids(0).0, &ids(0).1).expect("its own entry");
    assert_eq!(
        own.artifact(&kiln_image::ArtifactKind::Ptx).ok().flatten(),
        Some(&compile(0, 64)[..])
    );
    assert!(victim.put(&entry(2, 64)));
    let evil_images = DiskConfig::new(&evil).images_dir();
    let moved_images = DiskConfig::new(parent.join("moved")).images_dir();
    assert!(
        listing(&evil_images)
            .iter()
            .all(|(_, uid, _)| *uid == user.0),
        "nothing written there"
    );
    assert!(victim.stats().expect("stats").entries >= 2);
    assert!(
        std::fs::read_dir(&moved_images).expect("lists").count() >= 3,
        "stores land in the directory checked"
    );

    // A new process refuses the path now: the parent is another user's,
    // and so is the directory the link leads to.
    let error = DiskCache::open(config).expect_err("refused");
    let text = error.to_string();
    assert!(
        text.contains(&format!("owned by user {}", user.0)),
        "{text}"
    );
}

#[test]
fn a_directory_above_the_cache_that_another_user_owns_or_may_write_refuses_it() {
    let Some(user) = second_user() else {
        return;
    };
    let root = reachable_root();
    for (owner, mode, why) in [
        (user, 0o755, format!("owned by user {}", user.0)),
        (
            (0, 0),
            0o777,
            "writable by other users (mode 777)".to_owned(),
        ),
        (
            (0, 0),
            0o775,
            "writable by other users (mode 775)".to_owned(),
        ),
    ] {
        let parent = root.path().join(format!("parent-{:o}-{}", mode, owner.0));
        dir(&parent, owner, mode);
        let cache_dir = parent.join("cache");
        dir(&cache_dir, (0, 0), 0o700);
        let error = DiskCache::open(DiskConfig::new(&cache_dir)).expect_err("refused");
        let text = error.to_string();
        assert!(
            text.contains("above it") && text.contains(&why),
            "{}: {text}",
            parent.display()
        );
        // Nothing was created in a refused directory.
        assert_eq!(std::fs::read_dir(&cache_dir).expect("lists").count(), 0);
    }
    // A sticky directory others may write (as /tmp) is no such way in: the
    // cache below it is used.
    let sticky = root.path().join("sticky");
    dir(&sticky, (0, 0), 0o1777);
    let cache_dir = sticky.join("cache");
    dir(&cache_dir, (0, 0), 0o700);
    assert!(DiskCache::open(DiskConfig::new(&cache_dir)).is_ok());
    // And as the second user, through the tier: every kernel compiled, one
    // warning, nothing written.
    let parent = root.path().join("root-open");
    dir(&parent, (0, 0), 0o777);
    let cache_dir = parent.join("mine");
    dir(&cache_dir, user, 0o700);
    let result = run_as(user, &cache_dir);
    assert_eq!(fields(&result), (3, 0, 1), "{result:?}");
    assert_eq!(std::fs::read_dir(&cache_dir).expect("lists").count(), 0);
}
