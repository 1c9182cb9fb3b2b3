//! Invariant 7 (ARCHITECTURE.md): zero-copy. Image-backed hits borrow their bytes from the
//! image; merging touches the index, not the payloads; entries compiled in
//! this process own their bytes.

use crate::cache_support::{build_image, compiled, key, open, owner, payload};
use kiln_core::{ArtifactKind, Cache, Source};
use kiln_image::{Image, Verification};
use kiln_test_support::leak_aligned;

#[test]
fn invariant7_image_hits_borrow_bytes_from_the_image() {
    let o = owner();
    let bytes = build_image(&o, (0..8).map(|n| compiled(n, "img")), (0..8).map(key));
    let embedded = leak_aligned(&bytes);
    let image_range = embedded.as_ptr_range();
    let image = Image::from_static(embedded, Verification::Full).unwrap();
    let cache = Cache::new();
    cache.merge_image(image);
    let hit = cache.lookup(&o.digest(), &key(3)).unwrap();
    assert_eq!(hit.source(), Source::Image);
    let ptx = hit.artifact(&ArtifactKind::Ptx).unwrap();
    assert_eq!(ptx, payload(3, "img"));
    assert!(
        image_range.contains(&ptx.as_ptr()),
        "the bytes must point into the embedded image, not into a copy"
    );
    // Every view of the artifacts is borrowed from the image too.
    for view in hit.artifacts() {
        assert!(image_range.contains(&view.bytes().unwrap().as_ptr()));
        assert_eq!(view.entry_points, ["f3"]);
    }
}

#[test]
fn invariant7_merging_does_not_read_payloads() {
    // Flip a byte inside one payload: a merge that read payloads would notice.
    // The merge accepts the entry (it touches the index only), and so does a
    // lookup (it checks the record only); the first access to the payload
    // checks its checksum and refuses it.
    let o = owner();
    let bytes = build_image(
        &o,
        [compiled(1, "img"), compiled(2, "img")],
        [key(1), key(2)],
    );
    let target = payload(1, "img");
    let at = bytes
        .windows(target.len())
        .position(|w| w == target)
        .expect("payload stored verbatim");
    let mut flipped = bytes.clone();
    flipped[at + 3] ^= 0x40;
    let cache = Cache::new();
    let report = cache.merge_image(open(&flipped));
    assert_eq!(report.inserted, 2);
    let hit = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(cache.stats().corrupt, 0);
    assert_eq!(hit.artifact(&ArtifactKind::Ptx), None);
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    let other = cache.lookup(&o.digest(), &key(2)).unwrap();
    assert_eq!(
        other.artifact(&ArtifactKind::Ptx),
        Some(&payload(2, "img")[..])
    );
    assert_eq!(cache.stats().corrupt, 1);
}

#[test]
fn invariant7_compiled_entries_are_served_from_memory() {
    let cache = Cache::new();
    let o = owner();
    let inserted = cache.insert(&o, &key(1), compiled(1, "mem"));
    let a = inserted.artifact(&ArtifactKind::Ptx).unwrap().as_ptr();
    let again = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(again.source(), Source::Memory);
    assert_eq!(
        again.artifact(&ArtifactKind::Ptx).unwrap().as_ptr(),
        a,
        "no copy per hit"
    );
}
