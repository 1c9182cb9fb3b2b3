//! Invariant 8 (ARCHITECTURE.md): images are deterministic. The same delta gives
//! byte-identical images, whatever the insertion order or world ages.

use crate::cache_support::{compiled, fp, image_bytes, key, other_owner, owner};
use kiln_core::Cache;

fn fill(cache: &Cache, order: &[u64]) {
    for &n in order {
        let o = if n % 2 == 0 { owner() } else { other_owner() };
        cache.insert(
            &o,
            &key(n),
            compiled(n, "same")
                .dep("z.cu", fp("z.cu", 1))
                .dep("a.cu", fp("a.cu", 1)),
        );
    }
}

#[test]
fn invariant8_same_delta_same_bytes() {
    let a = Cache::new();
    let sa = a.snapshot();
    fill(&a, &[1, 2, 3, 4, 5, 6]);

    // Another cache: other insertion order, other world ages, unrelated
    // entries before the snapshot.
    let b = Cache::new();
    b.define("unrelated", fp("unrelated", 1));
    b.insert(
        &owner(),
        &key(100),
        compiled(100, "before").dep("unrelated", fp("unrelated", 1)),
    );
    b.redefine("unrelated", fp("unrelated", 2));
    let sb = b.snapshot();
    fill(&b, &[6, 3, 5, 1, 4, 2]);

    let bytes_a = image_bytes(&a, &sa);
    assert_eq!(bytes_a, image_bytes(&b, &sb));
    assert_eq!(
        bytes_a,
        image_bytes(&a, &sa),
        "writing twice gives the same bytes"
    );
}

#[test]
fn invariant8_written_file_matches_the_bytes() {
    let cache = Cache::new();
    let s = cache.snapshot();
    fill(&cache, &[1, 2, 3]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("delta.kimg");
    let meta = kiln_image::ImageMeta::new("kiln-core-tests", "0");
    cache.delta(&s).write_image(&path, meta).unwrap();
    assert_eq!(std::fs::read(&path).unwrap(), image_bytes(&cache, &s));
}
