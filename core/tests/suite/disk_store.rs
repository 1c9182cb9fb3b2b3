//! The disk cache within one process: storing, finding, compaction,
//! damaged files, the `Tier` integration, stats/ls/gc/clear/verify.

use std::fs;
use std::path::{Path, PathBuf};

use crate::disk_support::{
    compacted, compile, compiled, config, default_len, entry, ids, key, owner, segment_files,
};
use kiln_core::disk::DiskCache;
use kiln_core::{ArtifactKind, Cache, Source};

/// Where the cache rooted at `dir` keeps its files: the subdirectory of
/// this image format version.
fn images(dir: &Path) -> PathBuf {
    config(dir).images_dir()
}

fn assert_hit(cache: &DiskCache, i: u64, len: usize) {
    let (owner, key) = ids(i);
    let hit = cache
        .get(&owner, &key)
        .unwrap_or_else(|| panic!("kernel {i} is on disk"));
    let bytes = hit.artifact(&ArtifactKind::Ptx).expect("readable");
    assert_eq!(bytes, Some(&compile(i, len)[..]), "kernel {i}");
    assert_eq!(hit.entry().expect("entry").name(), format!("kernel-{i}"));
}

#[test]
fn stored_entries_are_found_by_another_handle_and_survive_compaction() {
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = DiskCache::open(config(dir.path())).expect("open");
    let reader = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..20 {
        assert!(reader.get(&ids(i).0, &ids(i).1).is_none());
        assert!(writer.put(&entry(i, default_len(i))), "kernel {i} stored");
        assert!(!writer.put(&entry(i, default_len(i))), "stored once");
        // The other handle discovers the new segment on its next miss.
        assert_hit(&reader, i, default_len(i));
    }
    // 20 entries, compaction after 4 segments: few files, all entries there.
    let segments = segment_files(dir.path());
    assert!(segments.len() <= 5, "{segments:?}");
    let fresh = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..20 {
        assert_hit(&fresh, i, default_len(i));
        assert_hit(&reader, i, default_len(i));
    }
    let stats = fresh.stats().expect("stats");
    assert_eq!((stats.entries, stats.segments), (20, segments.len()));
    assert_eq!(stats.temp_files, 0);
    assert!(fresh.verify().expect("verify").is_clean());
    assert_eq!(fresh.session().hits, 20);
}

#[test]
fn get_or_compile_fills_the_disk_tier_and_a_new_cache_loads_from_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Cache::new();
    first.add_tier(Box::new(DiskCache::open(config(dir.path())).expect("open")));
    for i in 0..5 {
        let hit = first
            .get_or_compile(&owner(), &key(i), || Ok(compiled(i, default_len(i))))
            .expect("compiles");
        assert_eq!(hit.source(), Source::Memory);
    }
    assert_eq!(first.stats().compiles, 5);
    // Stores run on the background writer.
    first.flush();

    let second = Cache::new();
    second.add_tier(Box::new(DiskCache::open(config(dir.path())).expect("open")));
    for i in 0..5 {
        let hit = second
            .get_or_compile(&owner(), &key(i), || {
                Err(std::io::Error::other("must not compile").into())
            })
            .expect("loaded from disk");
        assert_eq!(hit.source(), Source::Tier);
        assert_eq!(
            hit.artifact(&ArtifactKind::Ptx),
            Some(&compile(i, default_len(i))[..])
        );
    }
    let stats = second.stats();
    assert_eq!((stats.hits_tier, stats.compiles), (5, 0));
}

#[test]
fn a_garbled_or_truncated_segment_is_a_miss_and_gc_removes_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    assert!(cache.put(&entry(1, 1000)));
    assert!(cache.put(&entry(2, 1000)));
    let names = segment_files(dir.path());
    assert_eq!(names.len(), 2);
    // Truncate one segment and fill another file with garbage.
    let first = images(dir.path()).join(&names[0]);
    let bytes = fs::read(&first).expect("read");
    fs::write(&first, &bytes[..bytes.len() / 2]).expect("truncate");
    fs::write(
        images(dir.path()).join("seg-0000000000000-1-1.kimg"),
        b"not an image",
    )
    .expect("write");

    let fresh = DiskCache::open(config(dir.path())).expect("a damaged file is no error");
    assert_eq!(fresh.stats().expect("stats").unreadable_segments, 2);
    assert!(!fresh.verify().expect("verify").is_clean());
    let served: Vec<u64> = [1, 2]
        .into_iter()
        .filter(|&i| fresh.get(&ids(i).0, &ids(i).1).is_some())
        .collect();
    assert_eq!(served.len(), 1, "the intact entry only");

    // Cleaned up without asking: the next store compacts under the lock
    // and removes both files.
    assert!(fresh.put(&entry(3, 1000)));
    let kept: Vec<String> = segment_files(dir.path());
    assert_eq!(kept.len(), 2, "the intact one and the new one: {kept:?}");
    assert!(fresh.verify().expect("verify").is_clean());
    assert_hit(&fresh, served[0], 1000);
    let report = fresh.gc().expect("gc");
    assert_eq!(report.corrupt_segments_removed, 0, "nothing left to remove");
}

#[test]
fn a_flipped_payload_byte_is_a_miss_never_wrong_bytes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    let len = 4000;
    assert!(cache.put(&entry(7, len)));
    assert!(cache.put(&entry(8, len)));
    // Flip a byte inside kernel 7's payload (found by content), in place:
    // the damage a bad disk does.
    let payload = compile(7, len);
    let segment = segment_files(dir.path())
        .into_iter()
        .map(|n| images(dir.path()).join(n))
        .find(|p| {
            let b = fs::read(p).expect("read");
            b.windows(64).any(|w| w == &payload[..64])
        })
        .expect("kernel 7's segment");
    let mut bytes = fs::read(&segment).expect("read");
    let at = bytes
        .windows(64)
        .position(|w| w == &payload[..64])
        .expect("payload")
        + 1000;
    bytes[at] ^= 0x40;
    fs::write(&segment, &bytes).expect("write");

    let fresh = DiskCache::open(config(dir.path())).expect("open");
    assert!(fresh.get(&ids(7).0, &ids(7).1).is_none(), "damaged: a miss");
    assert!(!fresh.verify().expect("verify").is_clean());
    let report = fresh.gc().expect("gc");
    assert_eq!(report.corrupt_entries_dropped, 1);
    assert!(fresh.verify().expect("verify").is_clean());
    assert!(fresh.get(&ids(7).0, &ids(7).1).is_none());
    assert_hit(&fresh, 8, len);
    // Compiling it again stores a good copy.
    assert!(fresh.put(&entry(7, len)));
    assert_hit(&DiskCache::open(config(dir.path())).expect("open"), 7, len);
}

#[test]
fn gc_removes_orphaned_temp_files_and_merges_duplicates() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = DiskCache::open(config(dir.path())).expect("open");
    let b = DiskCache::open(config(dir.path())).expect("open");
    // Two processes compiled kernel 3 at the same time: b has not seen a's
    // segment when it stores (b's view is refreshed only on a miss).
    assert!(b.get(&ids(3).0, &ids(3).1).is_none());
    assert!(a.put(&entry(3, 500)));
    assert!(b.put(&entry(3, 500)));
    fs::write(images(dir.path()).join(".tmp-crashed"), b"half a segment").expect("write");

    let before = a.stats().expect("stats");
    assert_eq!(
        (before.segments, before.entries, before.temp_files),
        (2, 1, 1)
    );
    let report = a.gc().expect("gc");
    assert_eq!(report.temp_files_removed, 1);
    assert_eq!(report.duplicates_dropped, 1);
    let after = a.stats().expect("stats");
    assert_eq!((after.segments, after.entries, after.temp_files), (1, 1, 0));
    assert_hit(&b, 3, 500);
}

#[test]
fn ls_lists_each_entry_once_and_clear_empties_the_directory() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..3 {
        cache.put(&entry(i, 100 + i as usize));
    }
    let listed = cache.ls().expect("ls");
    let mut names: Vec<&str> = listed.iter().map(|e| e.name.as_str()).collect();
    names.sort();
    assert_eq!(names, ["kernel-0", "kernel-1", "kernel-2"]);
    let first = listed
        .iter()
        .find(|e| e.name == "kernel-2")
        .expect("listed");
    assert_eq!(first.key, key(2).to_hex());
    assert_eq!(first.owner_label, owner().label());
    assert_eq!(first.artifacts.len(), 1);
    assert_eq!(
        (first.artifacts[0].kind.as_str(), first.artifacts[0].bytes),
        ("ptx", 102)
    );

    let cleared = cache.clear().expect("clear");
    assert_eq!(cleared.files_removed, 3);
    assert!(segment_files(dir.path()).is_empty());
    assert!(cache.get(&ids(0).0, &ids(0).1).is_none());
    assert_eq!(cache.stats().expect("stats").entries, 0);
}

#[test]
fn a_hit_outlives_the_compaction_that_deletes_its_segment() {
    let dir = tempfile::tempdir().expect("temp dir");
    let reader = DiskCache::open(config(dir.path())).expect("open");
    let writer = DiskCache::open(config(dir.path())).expect("open");
    assert!(writer.put(&entry(0, 3000)));
    let hit = reader.get(&ids(0).0, &ids(0).1).expect("stored");
    let first_segment = segment_files(dir.path());

    // Enough stores to compact: kernel 0's segment is merged and deleted.
    for i in 1..10 {
        assert!(writer.put(&entry(i, 3000)));
    }
    let now = segment_files(dir.path());
    assert!(
        !now.contains(&first_segment[0]),
        "compacted away: {first_segment:?} -> {now:?}"
    );
    // The hit still reads its (deleted, still mapped) segment...
    assert_eq!(
        hit.artifact(&ArtifactKind::Ptx).expect("readable"),
        Some(&compile(0, 3000)[..])
    );
    // ...and a new lookup finds the entry in the merged segment.
    assert_hit(&reader, 0, 3000);
    for i in 1..10 {
        assert_hit(&reader, i, 3000);
    }
}

#[test]
fn a_replaced_base_segment_is_found_again_by_a_process_that_mapped_the_old_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    compacted(dir.path(), 4);
    let writer = DiskCache::open(config(dir.path())).expect("open");

    // A new process: its first hit opens the base segment (no listing).
    let reader = DiskCache::open(config(dir.path())).expect("open");
    assert_hit(&reader, 0, default_len(0));

    // Another process stores more and compacts: the base is replaced by a
    // file holding everything, and the segments merged into it are gone.
    for i in 4..8 {
        assert!(writer.put(&entry(i, default_len(i))));
    }
    writer.gc().expect("gc");
    assert_eq!(segment_files(dir.path()), ["seg-base.kimg"]);

    // The reader still holds the old base: a miss there lists the directory
    // again and opens the new base.
    for i in 0..8 {
        assert_hit(&reader, i, default_len(i));
    }
    // A hit borrowed from the old base stays valid after it was replaced.
    let (owner, key) = ids(1);
    let old = reader.get(&owner, &key).expect("a hit");
    writer.gc().expect("gc");
    assert_eq!(
        old.artifact(&ArtifactKind::Ptx).expect("readable"),
        Some(&compile(1, default_len(1))[..])
    );
}

#[test]
fn a_damaged_base_segment_is_a_miss_and_gc_rebuilds_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let writer = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..3 {
        assert!(writer.put(&entry(i, default_len(i))));
    }
    writer.gc().expect("gc");
    let base = images(dir.path()).join("seg-base.kimg");
    let mut bytes = fs::read(&base).expect("read");
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff; // a payload byte
    fs::write(&base, &bytes).expect("write");

    let reader = DiskCache::open(config(dir.path())).expect("open");
    let damaged = (0..3)
        .filter(|&i| reader.get(&ids(i).0, &ids(i).1).is_none())
        .count();
    assert!(damaged >= 1, "the flipped payload is a miss");
    let report = reader.gc().expect("gc");
    assert!(report.corrupt_entries_dropped >= 1, "{report:?}");
    assert_eq!(segment_files(dir.path()), ["seg-base.kimg"]);
    let fresh = DiskCache::open(config(dir.path())).expect("open");
    let intact = (0..3)
        .filter(|&i| fresh.get(&ids(i).0, &ids(i).1).is_some())
        .count();
    assert_eq!(intact + damaged, 3, "the intact entries survive");
}

#[test]
fn other_image_format_versions_subdirectories_are_never_touched() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cache = DiskCache::open(config(dir.path())).expect("open");
    assert_eq!(
        cache.images_dir(),
        dir.path()
            .join(format!("images-v{}", kiln_image::header::FORMAT_VERSION))
    );
    assert!(cache.images_dir().is_dir(), "created on open");
    // What a program built with another kiln version left: a segment that
    // is no valid image of this version, its stamps, a temporary file.
    let other = dir.path().join("images-v999");
    fs::create_dir(&other).expect("mkdir");
    let foreign: [(&str, &[u8]); 4] = [
        ("seg-base.kimg", b"KILNIMG\0 from the future"),
        ("seg-0000000000000-1-1-1.kimg", b"not an image at all"),
        ("stamps", b"their stamps"),
        (".tmp-theirs", b"half of their segment"),
    ];
    for (name, bytes) in foreign {
        fs::write(other.join(name), bytes).expect("write");
    }
    let untouched = || {
        let mut names: Vec<String> = fs::read_dir(&other)
            .expect("list")
            .filter_map(|d| d.ok()?.file_name().into_string().ok())
            .collect();
        names.sort();
        let mut expected: Vec<String> = foreign.iter().map(|(n, _)| n.to_string()).collect();
        expected.sort();
        assert_eq!(names, expected);
        for (name, bytes) in foreign {
            assert_eq!(fs::read(other.join(name)).expect("read"), bytes, "{name}");
        }
    };

    for i in 0..4 {
        assert!(cache.put(&entry(i, 200 + i as usize)));
    }
    let stats = cache.stats().expect("stats");
    assert_eq!(stats.dir, images(dir.path()));
    assert_eq!((stats.entries, stats.unreadable_segments), (4, 0));
    let report = cache.gc().expect("gc");
    assert_eq!(
        (report.corrupt_segments_removed, report.temp_files_removed),
        (0, 0)
    );
    untouched();
    let fresh = DiskCache::open(config(dir.path())).expect("open");
    for i in 0..4 {
        assert_hit(&fresh, i, 200 + i as usize);
    }
    assert!(fresh.verify().expect("verify").is_clean());

    let cleared = cache.clear().expect("clear");
    assert!(cleared.files_removed > 0);
    assert!(segment_files(dir.path()).is_empty());
    drop(fresh);
    let after = DiskCache::open(config(dir.path())).expect("open");
    assert!(after.get(&ids(0).0, &ids(0).1).is_none());
    assert_eq!(cache.stats().expect("stats").entries, 0);
    untouched();
}
