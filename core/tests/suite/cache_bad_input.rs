//! Invariant 9 (ARCHITECTURE.md): bad input never crashes and never serves garbage. A corrupt
//! payload is caught by its checksum when a hit first accesses it (payloads
//! are checked lazily, per artifact): the access returns `None`, never the
//! bytes; the entry is counted, excluded, and recompiled by the next
//! `get_or_compile`; other images keep serving.

use crate::cache_support::{build_image, compiled, key, open, owner, payload, ptx};
use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, Source};
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
fn invariant9_a_corrupt_payload_is_never_returned_and_is_recompiled() {
    let o = owner();
    let bytes = build_image(&o, (0..3).map(|n| compiled(n, "img")), (0..3).map(key));
    let cache = Cache::new();
    cache.merge_image(open(&corrupt_payload(&bytes, 1)));
    let fresh = || Ok(compiled(1, "fresh"));
    // The hit is served on its record; the payload is checked on access.
    let hit = cache
        .get_or_compile(&o, &key(1), || Err("must not compile yet".into()))
        .unwrap();
    assert_eq!(hit.source(), Source::Image);
    assert_eq!(cache.stats().corrupt, 0, "nothing read yet");
    assert_eq!(hit.artifact(&ArtifactKind::Ptx), None, "never garbage");
    assert!(hit.artifacts().iter().all(|a| a.bytes().is_none()));
    assert_eq!(hit.to_entry_data(), None);
    assert_eq!(cache.stats().corrupt, 1);
    // Excluded: a lookup misses, and get_or_compile recompiles.
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    let hit = cache.get_or_compile(&o, &key(1), fresh).unwrap();
    assert_eq!(hit.source(), Source::Memory);
    assert_eq!(ptx(&hit), payload(1, "fresh"));
    assert_eq!(cache.stats().compiles, 1);
    // Counted once, never tried again.
    assert!(cache.lookup(&o.digest(), &key(1)).is_some());
    assert_eq!(
        cache.get_or_compile(&o, &key(1), fresh).unwrap().source(),
        Source::Memory
    );
    assert_eq!(cache.stats().compiles, 1);
    assert_eq!(cache.stats().corrupt, 1);
    assert_eq!(
        ptx(&cache.lookup(&o.digest(), &key(0)).unwrap()),
        payload(0, "img")
    );
}

#[test]
fn invariant9_a_corrupt_layer_entry_falls_through_to_a_later_image() {
    let o = owner();
    let bytes = build_image(&o, [compiled(1, "img")], [key(1)]);
    let cache = Cache::new();
    cache.merge_image(open(&corrupt_payload(&bytes, 1)));
    // The second image's copy is a duplicate at merge time (the first one is
    // not known to be corrupt yet) ...
    assert_eq!(cache.merge_image(open(&bytes)).duplicate, 1);
    // ... so the corrupt one is hit, but its payload is never served ...
    let hit = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(hit.artifact(&ArtifactKind::Ptx), None);
    // ... and from then on it is a miss.
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    assert_eq!(cache.stats().corrupt, 1);
}

/// Two artifacts (a CUBIN and its PTX fallback) with the PTX corrupt.
fn cubin_and_ptx(n: u64) -> Compiled {
    Compiled::new(format!("f{n}"))
        .artifact(Artifact {
            kind: ArtifactKind::Cubin,
            entry_points: vec![format!("f{n}")],
            bytes: format!("\x7fELF cubin of f{n}").into_bytes(),
        })
        .artifact(Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![format!("f{n}")],
            bytes: payload(n, "img"),
        })
}

#[test]
fn invariant7_payloads_are_checked_lazily_per_artifact() {
    let o = owner();
    let bytes = build_image(&o, [cubin_and_ptx(1)], [key(1)]);
    let cache = Cache::new();
    cache.merge_image(open(&corrupt_payload(&bytes, 1)));
    let cubin = format!("\x7fELF cubin of f{}", 1).into_bytes();
    // The hit and the first artifact are served: the corrupt PTX is not read.
    let hit = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(hit.source(), Source::Image);
    assert_eq!(hit.artifact(&ArtifactKind::Cubin), Some(&cubin[..]));
    let views = hit.artifacts();
    assert_eq!(views.len(), 2);
    assert_eq!(views[0].bytes(), Some(&cubin[..]));
    assert_eq!(cache.stats().corrupt, 0, "the PTX was never read");
    // Still served: nothing corrupt was accessed.
    let again = cache.lookup(&o.digest(), &key(1)).unwrap();
    assert_eq!(again.artifact(&ArtifactKind::Cubin), Some(&cubin[..]));
    // The second artifact fails its checksum on access: None, not garbage.
    assert_eq!(views[1].kind, ArtifactKind::Ptx);
    assert_eq!(views[1].bytes(), None);
    assert_eq!(hit.artifact(&ArtifactKind::Ptx), None);
    assert_eq!(cache.stats().corrupt, 1);
    // The entry is excluded: the next lookup misses, get_or_compile recompiles.
    assert!(cache.lookup(&o.digest(), &key(1)).is_none());
    let fresh = cache
        .get_or_compile(&o, &key(1), || Ok(compiled(1, "fresh")))
        .unwrap();
    assert_eq!(fresh.source(), Source::Memory);
    assert_eq!(ptx(&fresh), payload(1, "fresh"));
    assert_eq!(cache.stats().compiles, 1);
    assert_eq!(cache.stats().corrupt, 1);
}

#[test]
fn invariant9_bad_images_are_rejected_and_others_keep_loading() {
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
