//! DESIGN rule 9: bad input never crashes and never serves garbage. A corrupt
//! payload is caught by its checksum before the bytes are returned, counted,
//! and recompiled; other images keep serving.

mod cache_support;

use cache_support::{build_image, compiled, key, open, owner, payload, ptx};
use kiln_core::{Cache, Source};
use kiln_image::{Image, Verification};

fn corrupt_payload(bytes: &[u8], n: u64) -> Vec<u8> {
    let target = payload(n, "img");
    let at = bytes
        .windows(target.len())
        .position(|w| w == target)
        .unwrap();
    let mut out = bytes.to_vec();
    out[at] ^= 0x01;
    out
}

#[test]
fn rule9_a_corrupt_payload_is_a_miss_and_is_recompiled() {
    let o = owner();
    let bytes = build_image(&o, (0..3).map(|n| compiled(n, "img")), (0..3).map(key));
    let cache = Cache::new();
    cache.merge_image(open(&corrupt_payload(&bytes, 1)));
    let hit = cache
        .get_or_compile(&o, &key(1), || {
            Ok::<_, std::io::Error>(compiled(1, "fresh"))
        })
        .unwrap();
    assert_eq!(hit.source(), Source::Memory);
    assert_eq!(ptx(&hit), payload(1, "fresh"));
    // Counted once, never tried again.
    assert!(cache.lookup(&o.digest(), &key(1)).is_some());
    assert_eq!(cache.stats().corrupt, 1);
    assert_eq!(
        ptx(&cache.lookup(&o.digest(), &key(0)).unwrap()),
        payload(0, "img")
    );
}

#[test]
fn rule9_a_corrupt_layer_entry_falls_through_to_a_later_image() {
    let o = owner();
    let bytes = build_image(&o, [compiled(1, "img")], [key(1)]);
    let cache = Cache::new();
    cache.merge_image(open(&corrupt_payload(&bytes, 1)));
    // The second image's copy is a duplicate at merge time (the first one is
    // not known to be corrupt yet) ...
    assert_eq!(cache.merge_image(open(&bytes)).duplicate, 1);
    // ... so the corrupt one makes a miss; nothing garbage is served.
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
}

#[test]
fn rule9_bad_images_are_rejected_and_others_keep_loading() {
    let o = owner();
    let good = build_image(&o, [compiled(1, "img")], [key(1)]);
    let cache = Cache::new();
    let mut report = kiln_core::MergeReport::default();
    let inputs: Vec<(&str, Vec<u8>)> = vec![
        ("truncated", good[..good.len() / 2].to_vec()),
        ("garbage", vec![0x5a; 512]),
        ("good", good.clone()),
    ];
    for (name, bytes) in inputs {
        match Image::from_bytes(&bytes, Verification::Structural) {
            Ok(image) => report.absorb(cache.merge_image(image)),
            Err(error) => report.reject(name, error),
        }
    }
    assert_eq!(report.inserted, 1);
    let rejected: Vec<&str> = report.rejected.iter().map(|r| r.source.as_str()).collect();
    assert_eq!(rejected, ["truncated", "garbage"]);
    assert!(report.rejected.iter().all(|r| !r.reason.is_empty()));
    assert!(cache.lookup(&o.digest(), &key(1)).is_some());
}
