//! What each answer to "a segment truncated under a running process"
//! costs (RELIABILITY.md, *Truncation under a mapping*). A reader that maps
//! a segment is killed by `SIGBUS` if the file is truncated while mapped;
//! one that reads the file (`pread`) cannot be. Compared, for segments of
//! 64 KiB entries from 1 MiB to 256 MiB, opening the segment and using one
//! entry's payload:
//!
//! - `map`: one map of the whole file, the payload's pages faulted in (what
//!   the disk tier does for the base and segments over 64 KiB);
//! - `read`: the whole file read into an aligned buffer first (what it does
//!   for segments of 64 KiB or less), which no truncation can reach;
//!
//! and what a size check under the directory lock before each use of a
//! mapping would add to a hit:
//!
//! - `fstat`: the segment's size checked again;
//! - `flock_fstat`: the shared directory lock taken, the size checked, the
//!   lock released.
//!
//! ```sh
//! cargo bench -p kiln-core --bench truncation -- --warm-up-time 0.5 --measurement-time 2
//! ```

use std::fs::File;
use std::os::fd::AsFd;
use std::path::Path;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, FileAccess, Image, ImageFile, ImageMeta,
    ImageWriter, Verification,
};

const PAYLOAD: usize = 64 << 10;

/// A segment of `entries` entries of [`PAYLOAD`] bytes at `path`.
fn segment(path: &Path, entries: u32) {
    let mut writer = ImageWriter::new(ImageMeta::new("truncation-bench", "1"));
    for n in 0..entries {
        let mut bytes = vec![0u8; PAYLOAD];
        blake3::Hasher::new()
            .update(&n.to_le_bytes())
            .finalize_xof()
            .fill(&mut bytes);
        writer.push(EntryData {
            owner: Digest::of(b"bench-owner"),
            owner_label: "bench-owner".into(),
            key: Digest::of(&n.to_le_bytes()),
            name: format!("entry{n}"),
            min_world: 1,
            max_world: u64::MAX,
            deps: vec![],
            artifacts: vec![Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![],
                bytes,
            }],
        });
    }
    writer.write_atomic(path).expect("writes the segment");
}

/// Opens the segment at `path` with `access` and hashes one payload of it
/// (checked against its checksum first, as a hit does).
fn first_hit(path: &Path, access: FileAccess, entries: u32) -> usize {
    let file = ImageFile::open(path).expect("opens");
    let image = Image::from_file(file, access, Verification::Structural).expect("valid");
    let key = Digest::of(&(entries / 2).to_le_bytes());
    let entry = image
        .find(&Digest::of(b"bench-owner"), &key)
        .expect("a valid index")
        .expect("present");
    let artifact = entry.artifact(0).expect("an artifact");
    artifact.bytes().expect("checked").len()
}

fn truncation(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut group = c.benchmark_group("segment_first_hit");
    group.sample_size(10);
    for mib in [1u32, 16, 256] {
        let entries = mib * 16;
        let path = dir.path().join(format!("seg-{mib}.kimg"));
        segment(&path, entries);
        for (name, access) in [("map", FileAccess::MapWhole), ("read", FileAccess::Read)] {
            group.bench_with_input(
                BenchmarkId::new(name, format!("{mib}MiB")),
                &path,
                |b, path| {
                    b.iter(|| first_hit(path, access, entries));
                },
            );
        }
    }
    group.finish();

    let mut group = c.benchmark_group("size_check_per_hit");
    let path = dir.path().join("seg-1.kimg");
    let segment_file = File::open(&path).expect("opens");
    let lock_file = File::create(dir.path().join("lock")).expect("creates");
    group.bench_function("fstat", |b| {
        b.iter(|| {
            rustix::fs::fstat(segment_file.as_fd())
                .expect("fstat")
                .st_size
        });
    });
    group.bench_function("flock_fstat", |b| {
        b.iter(|| {
            rustix::fs::flock(lock_file.as_fd(), rustix::fs::FlockOperation::LockShared)
                .expect("flock");
            let size = rustix::fs::fstat(segment_file.as_fd())
                .expect("fstat")
                .st_size;
            rustix::fs::flock(lock_file.as_fd(), rustix::fs::FlockOperation::Unlock)
                .expect("unlock");
            size
        });
    });
    group.finish();
}

criterion_group!(benches, truncation);
criterion_main!(benches);
