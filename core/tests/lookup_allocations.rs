//! A lookup of an image-backed entry and the borrow of its bytes allocate
//! nothing, for the built-in kinds (`ArtifactKind::Bytes` among them) and
//! custom ones alike, from plain and compressed images, and the bytes of
//! an image-backed entry outlive its hit (`Hit::image_artifact`). Its own
//! test binary: it counts allocations with a global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Digest, Key, KeyBuilder, Owner, Source};
use kiln_image::{Image, ImageMeta, ImageWriter, Verification};

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: every call is passed on to `System` unchanged; the counter is a
// thread-local `Cell` (const-initialized, so touching it never allocates).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.with(|count| count.set(count.get() + 1));
        // SAFETY: the caller's contract, passed on.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Allocations `f` makes on this thread.
fn allocations<T>(f: impl FnOnce() -> T) -> (T, u64) {
    let before = ALLOCATIONS.with(Cell::get);
    let value = f();
    (value, ALLOCATIONS.with(Cell::get) - before)
}

const PATTERNS: [&str; 4] = ["[a-z]+", "[0-9]{3}-[0-9]{4}", "(ab|cd)*e", "x?y+z"];

fn key(pattern: &str) -> Key {
    KeyBuilder::new("regex-dfa", 1)
        .str("pattern", pattern)
        .finish()
}

/// A serialized automaton: bytes that compress as real ones do.
fn dfa(pattern: &str) -> Vec<u8> {
    (0..20_000u32)
        .flat_map(|state| (state ^ (pattern.len() as u32 * 7919)).to_le_bytes())
        .collect()
}

/// An image of one entry per pattern, each with a `bytes` and a custom
/// artifact.
fn image(owner: &Owner, compressed: bool) -> Vec<u8> {
    let build = Cache::new();
    let snapshot = build.snapshot();
    for pattern in PATTERNS {
        build.insert(
            owner,
            &key(pattern),
            Compiled::new(pattern)
                .artifact(Artifact {
                    kind: ArtifactKind::Bytes,
                    entry_points: vec![],
                    bytes: dfa(pattern),
                })
                .artifact(Artifact {
                    kind: ArtifactKind::Custom("dfa-stats".into()),
                    entry_points: vec![],
                    bytes: pattern.as_bytes().to_vec(),
                }),
        );
    }
    let writer: ImageWriter = build
        .delta(&snapshot)
        .to_writer_with(ImageMeta::new("regexes", "1"), |_| {});
    if compressed {
        writer.to_compressed_bytes(3)
    } else {
        writer.to_bytes()
    }
    .expect("valid entries")
}

#[test]
fn image_lookups_and_their_bytes_allocate_nothing_and_outlive_the_hit() {
    let owner = Owner::new("regex-dfa", "1.0", "x86_64", ["--dense"]).expect("owner");
    let custom = ArtifactKind::Custom("dfa-stats".into());
    // The counter sees what a closure allocates (an owned custom kind, as
    // comparing kinds by value used to make per lookup).
    assert_eq!(allocations(|| custom.clone()).1, 1);
    let keys: Vec<Key> = PATTERNS.iter().map(|pattern| key(pattern)).collect();
    for compressed in [false, true] {
        let bytes = image(&owner, compressed);
        let image = Image::from_bytes(&bytes, Verification::Full).expect("a valid image");
        assert_eq!(image.is_compressed(), compressed);
        let cache: &'static Cache = Box::leak(Box::new(Cache::new()));
        cache.merge_image(image);
        let owner: Digest = owner.digest();
        // The first access checks (and decompresses) once; then a lookup
        // and its bytes cost no allocation.
        let mut kept: Vec<&'static [u8]> = Vec::new();
        for key in &keys {
            let hit = cache.lookup(&owner, key).expect("merged");
            assert_eq!(hit.source(), Source::Image);
            kept.push(hit.image_artifact(&ArtifactKind::Bytes).expect("bytes"));
        }
        for (key, pattern) in keys.iter().zip(PATTERNS) {
            let (found, count) = allocations(|| {
                let hit = cache.lookup(&owner, key)?;
                let plain = hit.artifact(&ArtifactKind::Bytes)?.as_ptr();
                let lasting = hit.image_artifact(&ArtifactKind::Bytes)?;
                let stats = hit.artifact(&custom)?.len();
                Some((plain, lasting, stats))
            });
            let (plain, lasting, stats) = found.expect("every artifact");
            assert_eq!(count, 0, "{pattern}, compressed: {compressed}");
            assert_eq!(plain, lasting.as_ptr(), "one buffer, borrowed");
            assert_eq!(stats, pattern.len());
            assert_eq!(
                lasting.as_ptr() as usize % kiln_core::cache::PAYLOAD_ALIGN,
                0
            );
        }
        // The bytes outlive every hit.
        for (bytes, pattern) in kept.iter().zip(PATTERNS) {
            assert_eq!(*bytes, dfa(pattern).as_slice());
        }
    }
}

#[test]
fn entries_held_in_memory_lend_their_bytes_through_the_hit_only() {
    let cache = Cache::new();
    let owner = Owner::new("regex-dfa", "1.0", "x86_64", ["--dense"]).expect("owner");
    let hit = cache.insert(
        &owner,
        &key("a"),
        Compiled::new("a").artifact(Artifact {
            kind: ArtifactKind::Bytes,
            entry_points: vec![],
            bytes: dfa("a"),
        }),
    );
    assert_eq!(hit.source(), Source::Memory);
    assert!(hit.artifact(&ArtifactKind::Bytes).is_some());
    assert_eq!(hit.image_artifact(&ArtifactKind::Bytes), None);
}
