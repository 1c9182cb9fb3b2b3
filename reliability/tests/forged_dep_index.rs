//! A forged image whose dependency index leaves an entry out, checksums
//! recomputed. The cache finds stale entries at merge and the dependents
//! of a redefined definition through that index, so an entry the index
//! leaves out would escape both: built against `foo` v1, it would still be
//! served after `define(foo, v2)` and after `redefine(foo, v3)`. The image
//! refuses that entry on its first access instead, so the cache never
//! serves it, while the entries the index does list behave as in an honest
//! image.
//!
//! ```sh
//! cargo test -p kiln-reliability --test forged_dep_index
//! ```

use kiln_core::{Cache, Digest, Key};
use kiln_image::fuzz_support::forge::Forge;
use kiln_image::{
    Artifact, ArtifactKind, Dep, EntryData, Image, ImageMeta, ImageWriter, Verification,
};

fn owner() -> Digest {
    Digest::of(b"forged-dep-index owner")
}

fn v(version: &str) -> Digest {
    Digest::of(version.as_bytes())
}

/// Entry `name` built against `dep` at `version`.
fn entry(name: &str, dep: &str, version: &str) -> EntryData {
    EntryData {
        owner: owner(),
        owner_label: "forged".into(),
        key: Digest::of(name.as_bytes()),
        name: name.into(),
        min_world: 1,
        max_world: u64::MAX,
        deps: vec![Dep {
            name: dep.into(),
            fingerprint: v(version),
        }],
        artifacts: vec![Artifact {
            kind: ArtifactKind::Ptx,
            entry_points: vec![name.into()],
            bytes: format!("code of {name}").into_bytes(),
        }],
    }
}

/// `a` and `c` depend on foo v1, `b` on bar v1.
fn honest() -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("forged-dep-index", "1"));
    for (name, dep) in [("a", "foo"), ("b", "bar"), ("c", "foo")] {
        writer.push(entry(name, dep, "v1"));
    }
    writer.to_bytes().expect("valid entries")
}

fn index_of(bytes: &[u8], name: &str) -> u32 {
    let image = Image::from_bytes(bytes, Verification::Structural).expect("opens");
    let found = image
        .find(&owner(), &Digest::of(name.as_bytes()))
        .expect("checks")
        .expect("present");
    found.index() as u32
}

/// The honest image with `a` left out of foo v1's member list.
fn forged() -> Vec<u8> {
    let bytes = honest();
    let a = index_of(&bytes, "a");
    let mut forged = Forge::read(&bytes).expect("a valid image");
    let group = forged.group_of("foo", &v("v1")).expect("foo v1");
    assert!(forged.remove_member(group, a));
    let bytes = forged.to_bytes().expect("serializes");
    // It opens: the forgery is inside, behind valid checksums.
    Image::from_bytes(&bytes, Verification::Structural).expect("opens");
    bytes
}

fn open(bytes: &[u8]) -> Image {
    Image::from_bytes(bytes, Verification::Structural).expect("opens")
}

fn served(cache: &Cache, name: &str) -> bool {
    cache
        .lookup(&owner(), &Key::from_digest(Digest::of(name.as_bytes())))
        .is_some()
}

#[test]
fn revalidation_at_merge_never_serves_the_left_out_entry() {
    for (bytes, forged) in [(honest(), false), (forged(), true)] {
        let cache = Cache::new();
        cache.define("foo", v("v2"));
        let report = cache.merge_image(open(&bytes));
        // The honest index names a and c stale; the forged one only c.
        assert_eq!(report.stale, if forged { 1 } else { 2 }, "{report}");
        assert!(!served(&cache, "a"), "a is stale (forged: {forged})");
        assert!(!served(&cache, "c"));
        assert!(served(&cache, "b"));
    }
}

#[test]
fn invalidation_never_serves_the_left_out_entry() {
    for (bytes, forged) in [(honest(), false), (forged(), true)] {
        let cache = Cache::new();
        cache.merge_image(open(&bytes));
        // Before any definition: a is fresh in the honest image, and
        // refused outright in the forged one.
        assert_eq!(served(&cache, "a"), !forged);
        assert!(served(&cache, "c") && served(&cache, "b"));
        for version in ["v2", "v3"] {
            cache.redefine("foo", v(version));
            assert!(!served(&cache, "a"), "a after foo {version} ({forged})");
            assert!(!served(&cache, "c"), "c after foo {version}");
            assert!(served(&cache, "b"), "b after foo {version}");
        }
    }
}

#[test]
fn full_verification_names_the_left_out_entry() {
    let bytes = forged();
    let error = Image::from_bytes(&bytes, Verification::Full).expect_err("rejected");
    assert_eq!(error.check(), "deps.unlisted", "{error}");
    assert!(error.to_string().contains("depends on \"foo\""), "{error}");
}
