//! Helpers shared by the `cache_*` tests: owners, keys, compiled entries and
//! images built through the real writer.
#![allow(dead_code)] // each test file uses a different subset

use kiln_core::{
    Artifact, ArtifactKind, Cache, Compiled, Digest, Key, KeyBuilder, Owner, Snapshot,
};
use kiln_image::{Image, ImageMeta, Verification};

/// The owner most tests use.
pub fn owner() -> Owner {
    Owner::new("testcc", "1.0.0", "x86_64-v3", ["-O2"]).expect("valid owner")
}

/// Another owner (other target).
pub fn other_owner() -> Owner {
    Owner::new("testcc", "1.0.0", "aarch64", ["-O2"]).expect("valid owner")
}

/// The key of test function number `n`.
pub fn key(n: u64) -> Key {
    KeyBuilder::new("kiln-core-tests", 1).u64("n", n).finish()
}

/// Fingerprint number `version` of definition `name`.
pub fn fp(name: &str, version: u64) -> Digest {
    Digest::of(format!("{name} v{version}").as_bytes())
}

/// A compiled entry for function `n` with one PTX artifact whose bytes say
/// which function (and `tag`) they are.
pub fn compiled(n: u64, tag: &str) -> Compiled {
    Compiled::new(format!("f{n}")).artifact(Artifact {
        kind: ArtifactKind::Ptx,
        entry_points: vec![format!("f{n}")],
        bytes: payload(n, tag),
    })
}

/// The bytes `compiled(n, tag)` carries.
pub fn payload(n: u64, tag: &str) -> Vec<u8> {
    format!("// ptx of f{n} ({tag})").into_bytes()
}

/// The PTX bytes of a hit, copied.
pub fn ptx(hit: &kiln_core::Hit<'_>) -> Vec<u8> {
    hit.artifact(&ArtifactKind::Ptx)
        .expect("the entry has PTX")
        .to_vec()
}

/// Image bytes holding the delta of `cache` since `since`.
pub fn image_bytes(cache: &Cache, since: &Snapshot) -> Vec<u8> {
    cache
        .delta(since)
        .to_bytes(ImageMeta::new("kiln-core-tests", "0"))
        .expect("delta encodes")
}

/// Image bytes with `entries` compiled by `owner` (each with its deps).
pub fn build_image(
    owner: &Owner,
    entries: impl IntoIterator<Item = Compiled>,
    keys: impl IntoIterator<Item = Key>,
) -> Vec<u8> {
    let cache = Cache::new();
    let start = cache.snapshot();
    for (compiled, key) in entries.into_iter().zip(keys) {
        cache.insert(owner, &key, compiled);
    }
    image_bytes(&cache, &start)
}

/// Opens image bytes (structural verification: payloads checked on access).
pub fn open(bytes: &[u8]) -> Image {
    Image::from_bytes(bytes, Verification::Structural).expect("image opens")
}
