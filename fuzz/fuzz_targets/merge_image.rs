//! Arbitrary bytes as an image merged into a `Cache`: opened (resealed first
//! when the first byte is odd, so that mutations reach the checks behind
//! the checksums), merged twice (the second time everything is a
//! duplicate, stale or rejected), every entry looked up and read, a
//! dependency redefined and everything looked up again. Nothing may panic,
//! and a hit's payloads must be the image's own bytes.
#![no_main]

use std::collections::BTreeMap;

use kiln_core::{Cache, Digest, Key};
use kiln_image::{Image, Verification};

/// Definitions the cache knows, so that revalidation runs: seed images
/// use names like these.
const DEFINITIONS: [&str; 3] = ["def-0", "def-1", "kiln_scale.h"];

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if data.first().is_some_and(|b| b & 1 == 1) {
        kiln_image::fuzz_support::reseal(&mut bytes);
    }
    let Ok(image) = Image::from_bytes(&bytes, Verification::Structural) else {
        return;
    };
    // What the image itself serves, to compare the cache's hits with (None
    // for an (owner, key) a forged image holds twice: either may be served).
    type Payloads = Vec<Option<Vec<u8>>>;
    let mut own: BTreeMap<(Digest, Digest), Option<Payloads>> = BTreeMap::new();
    for entry in image.entries().flatten() {
        let payloads = entry
            .artifacts()
            .map(|a| a.bytes().ok().map(<[u8]>::to_vec))
            .collect();
        own.entry((entry.owner(), entry.key()))
            .and_modify(|seen| *seen = None)
            .or_insert(Some(payloads));
    }
    let cache = Cache::new();
    for (i, name) in DEFINITIONS.iter().enumerate() {
        cache.define(name, Digest::of(&[i as u8]));
    }
    let first = cache.merge_image(image);
    let _ = first.to_string();
    if let Ok(again) = Image::from_bytes(&bytes, Verification::Structural) {
        let second = cache.merge_image(again);
        assert!(
            second.inserted <= first.inserted,
            "a second merge inserted more than the first: {first} / {second}"
        );
    }
    let look = |cache: &Cache| {
        for ((owner, key), payloads) in &own {
            if let Some(hit) = cache.lookup(owner, &Key::from_digest(*key)) {
                let _ = (
                    hit.name(),
                    hit.owner_label(),
                    hit.deps(),
                    hit.to_entry_data(),
                );
                let Some(payloads) = payloads else { continue };
                for (i, artifact) in hit.artifacts().iter().enumerate() {
                    // A hit whose payload the image refused is a bug.
                    let served = payloads.get(i).and_then(Option::as_deref);
                    // A payload that fails its checksum is withheld (None).
                    if let Some(bytes) = artifact.bytes() {
                        assert_eq!(Some(bytes), served, "hit serves unchecked bytes");
                    }
                }
            }
        }
    };
    look(&cache);
    cache.redefine(DEFINITIONS[0], Digest::of(b"changed"));
    look(&cache);
    let _ = cache.stats();
});
