//! The crash suite: writers killed with SIGKILL at random points, then
//! everything a reader can see is checked.
//!
//! - Images: a child writes one image after another with
//!   `ImageWriter::write_atomic` (temporary file, fsync, rename); it is
//!   killed after a random number of published images plus a random delay,
//!   so kills land before, inside and after writes and renames. After every
//!   kill, every `*.kimg` in the directory (what `KILN_IMAGE_PATH` would
//!   merge) opens with full verification and holds exactly the entry its
//!   name promises, every image the child reported as published is there,
//!   and `load_images` merges them all with nothing skipped: the temporary
//!   debris is never served.
//! - Disk cache: a child stores entries with `DiskCache::put` (compacting
//!   after every 4 segments, so kills also land in compactions); after every
//!   kill, every entry a child reported as stored is served with its exact
//!   bytes and no entry serves other bytes; at the end `gc` leaves a clean
//!   directory.
//!
//! Kill points come from a fixed seed. Delays are drawn, not measured:
//! the tests assert only what must hold at any kill point.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::settings::Settings;
use kiln_core::{ArtifactKind, Cache, load_images};
use kiln_image::{Digest, Image, Verification};
use kiln_reliability::fixture::{numbered_entry, numbered_key, owners};
use kiln_reliability::{Rng, Table};

const SEED: u64 = 0xc4a5_4000;
/// Payload size: large enough (256 KiB) that many kills land mid-write.
const LEN: usize = 256 << 10;

/// The digest of entry `i`'s payload, computed once per entry (generating
/// 256 KiB in a debug build is what would otherwise dominate the suite).
#[derive(Default)]
struct Expected(std::collections::HashMap<u64, Digest>);

impl Expected {
    fn matches(&mut self, i: u64, bytes: Option<&[u8]>) -> bool {
        let owner = &owners().expect("owners")[0];
        let want = *self
            .0
            .entry(i)
            .or_insert_with(|| Digest::of(&numbered_entry(owner, i, LEN).artifacts[0].bytes));
        bytes.map(Digest::of) == Some(want)
    }
}

fn child(role: &str, dir: &Path, first: u64) -> Child {
    Command::new(env!("CARGO_BIN_EXE_kiln-reliability-child"))
        .args([
            role,
            &dir.display().to_string(),
            &first.to_string(),
            &LEN.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("helper process starts")
}

/// Lets `victim` report `wait_for` lines, sleeps `delay`, kills it with
/// SIGKILL and returns the numbers it reported (including lines it printed
/// before the kill that were not yet read).
fn kill_after(mut victim: Child, wait_for: usize, delay: Duration) -> Vec<u64> {
    let stdout = victim.stdout.take().expect("piped");
    let mut lines = BufReader::new(stdout).lines();
    let mut reported = Vec::new();
    for line in lines.by_ref().take(wait_for) {
        reported.push(line.expect("a line"));
    }
    std::thread::sleep(delay);
    victim.kill().expect("SIGKILL");
    victim.wait().expect("reaped");
    reported.extend(lines.map_while(Result::ok));
    reported
        .iter()
        .filter_map(|line| line.split_whitespace().nth(1)?.parse().ok())
        .collect()
}

fn temp_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("list")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with('.'))
        .count()
}

fn image_number(path: &Path) -> Option<u64> {
    path.file_stem()?
        .to_str()?
        .strip_prefix("img-")?
        .parse()
        .ok()
}

#[test]
fn image_writers_killed_at_random_points_leave_only_whole_images() {
    let dir = tempfile::tempdir().expect("temp dir");
    let owner = &owners().expect("owners")[0];
    let mut rng = Rng::new(SEED);
    let mut expected = Expected::default();
    let rounds = 100u64;
    let (mut published, mut with_debris) = (0u64, 0u64);
    for round in 0..rounds {
        let first = 1000 * (round + 1);
        let victim = child("write-images", dir.path(), first);
        let wait_for = rng.below(3);
        let delay = Duration::from_micros(rng.below(4000) as u64);
        let reported = kill_after(victim, wait_for, delay);
        published += reported.len() as u64;
        with_debris += u64::from(temp_files(dir.path()) > 0);

        // Every reported image is there; every image there is whole and
        // holds exactly its entry.
        for i in &reported {
            assert!(
                dir.path().join(format!("img-{i:08}.kimg")).is_file(),
                "round {round}: image {i} was reported published and is missing"
            );
        }
        let (files, _) = kiln_core::registry::image_files(&[dir.path().to_path_buf()]);
        for path in &files {
            let i = image_number(path).expect("an image name");
            let image = Image::open(path, Verification::Full)
                .unwrap_or_else(|e| panic!("round {round}: {} is corrupt: {e}", path.display()));
            let entry = image
                .find(&owner.digest(), numbered_key(i).digest())
                .expect("readable")
                .expect("its entry");
            let bytes = entry.artifact(0).and_then(|a| a.bytes()).ok();
            assert!(
                expected.matches(i, bytes),
                "round {round}: image {i} holds other bytes"
            );
        }
    }
    // What an application would merge from this directory: every image,
    // nothing skipped, every entry answering with its bytes.
    let cache = Cache::new();
    let mut settings = Settings::default();
    settings.images.path = vec![dir.path().to_path_buf()];
    let report = load_images(&cache, &settings, &[]);
    let (files, _) = kiln_core::registry::image_files(&[dir.path().to_path_buf()]);
    assert_eq!(report.skipped().count(), 0, "{report}");
    assert_eq!(report.inserted(), files.len() as u64);
    assert!(files.len() as u64 >= published);
    for path in &files {
        let i = image_number(path).expect("an image name");
        let hit = cache
            .lookup(&owner.digest(), &numbered_key(i))
            .expect("merged");
        assert!(
            expected.matches(i, hit.artifact(&ArtifactKind::Ptx)),
            "image {i}"
        );
    }
    let mut table = Table::new(["figure", "value"]);
    table.row([
        "writers killed with SIGKILL".to_string(),
        rounds.to_string(),
    ]);
    table.row([
        "images reported published (all found whole)".to_string(),
        published.to_string(),
    ]);
    table.row([
        "images on disk, all verified in full".to_string(),
        files.len().to_string(),
    ]);
    table.row([
        "rounds ending with temporary files in the directory".to_string(),
        with_debris.to_string(),
    ]);
    table.row([
        "temporary files served by load_images".to_string(),
        "0".to_string(),
    ]);
    table.row([
        "corrupt reads / lost published images".to_string(),
        "0 / 0".to_string(),
    ]);
    table.row([
        "temporary files left at the end (never cleaned: no reader lists them)".to_string(),
        temp_files(dir.path()).to_string(),
    ]);
    println!("\nImage crash suite (seed {SEED:#x}, {LEN}-byte payloads)\n\n{table}");
    assert!(published > 0, "no writer ever published an image");
}

fn disk_config(dir: &Path) -> DiskConfig {
    let mut config = DiskConfig::new(dir);
    config.compact_after = 4;
    config
}

#[test]
fn disk_writers_killed_at_random_points_lose_no_stored_entry() {
    let dir = tempfile::tempdir().expect("temp dir");
    let owner = &owners().expect("owners")[0];
    let mut rng = Rng::new(SEED + 1);
    let rounds = 100u64;
    let mut stored: Vec<u64> = Vec::new();
    let mut with_debris = 0u64;
    let mut expected = Expected::default();
    let mut check = |stored: &[u64], round: u64| {
        let cache = DiskCache::open(disk_config(dir.path())).expect("open");
        for &i in stored {
            let hit = cache
                .get(&owner.digest(), numbered_key(i).digest())
                .unwrap_or_else(|| panic!("round {round}: stored entry {i} is lost"));
            let bytes = hit.artifact(&ArtifactKind::Ptx).expect("readable");
            assert!(
                expected.matches(i, bytes),
                "round {round}: entry {i} has other bytes"
            );
        }
        cache
    };
    for round in 0..rounds {
        let first = 1000 * (round + 1);
        let victim = child("write-disk", dir.path(), first);
        let wait_for = rng.below(4);
        let delay = Duration::from_micros(rng.below(6000) as u64);
        stored.extend(kill_after(victim, wait_for, delay));
        // The disk tier keeps its files in a subdirectory per image format.
        let segments = dir.path().join(kiln_core::disk::config::images_subdir());
        with_debris += u64::from(temp_files(&segments) > 0);
        check(&stored, round);
    }
    // Entries on disk that no child reported (killed between publishing and
    // printing) must be right too.
    let cache = check(&stored, rounds);
    let mut unreported = 0;
    for round in 0..rounds {
        for i in 1000 * (round + 1)..1000 * (round + 1) + 10 {
            if stored.contains(&i) {
                continue;
            }
            if let Some(hit) = cache.get(&owner.digest(), numbered_key(i).digest()) {
                let bytes = hit.artifact(&ArtifactKind::Ptx).expect("readable");
                assert!(
                    Digest::of(bytes.unwrap_or_default())
                        == Digest::of(&numbered_entry(owner, i, LEN).artifacts[0].bytes)
                );
                unreported += 1;
            }
        }
    }
    let before = cache.verify().expect("verify");
    let gc = cache.gc().expect("gc");
    let after = cache.verify().expect("verify");
    assert!(after.is_clean() && after.temp_files == 0, "{after:?}");
    check(&stored, rounds);
    let mut table = Table::new(["figure", "value"]);
    table.row([
        "writers killed with SIGKILL".to_string(),
        rounds.to_string(),
    ]);
    table.row([
        "entries reported stored (all served, exact bytes)".to_string(),
        stored.len().to_string(),
    ]);
    table.row([
        "entries published but not yet reported (exact bytes)".to_string(),
        unreported.to_string(),
    ]);
    table.row([
        "rounds ending with temporary files in the directory".to_string(),
        with_debris.to_string(),
    ]);
    table.row([
        "segments unreadable before gc".to_string(),
        before
            .segments
            .iter()
            .filter(|s| s.problem.is_some())
            .count()
            .to_string(),
    ]);
    table.row([
        "temporary files removed by gc".to_string(),
        gc.temp_files_removed.to_string(),
    ]);
    table.row([
        "corrupt reads / lost stored entries".to_string(),
        "0 / 0".to_string(),
    ]);
    println!(
        "\nDisk-cache crash suite (seed {:#x}, {LEN}-byte payloads, compaction every 4 segments)\n\n{table}",
        SEED + 1
    );
    assert!(!stored.is_empty());
}
