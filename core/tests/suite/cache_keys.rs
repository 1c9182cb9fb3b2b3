//! Invariant 6 (ARCHITECTURE.md): keys are stable and complete.

use std::collections::BTreeMap;

use kiln_core::{Error, KeyBuilder, Owner};

#[derive(serde::Serialize)]
struct Spec {
    dtype: &'static str,
    block: (u32, u32, u32),
    unroll: Option<u8>,
    defines: BTreeMap<&'static str, i64>,
}

fn spec() -> Spec {
    Spec {
        dtype: "f32",
        block: (128, 1, 1),
        unroll: Some(4),
        defines: BTreeMap::from([("N", 1024), ("TILE", 32)]),
    }
}

fn reference_key() -> kiln_core::Key {
    KeyBuilder::new("kernels", 3)
        .str("function", "saxpy")
        .bytes("source", b"__global__ void saxpy() {}")
        .field("spec", &spec())
        .expect("spec encodes")
        .finish()
}

#[test]
fn invariant6_golden_key_digest_is_pinned() {
    // A silent change of the key encoding (field framing, postcard, BLAKE3
    // context) changes this digest and fails here: bump the context instead.
    assert_eq!(
        reference_key().to_hex(),
        "40cd628704e26ace430248022262227e924c757fd03dc000b65e05d299bdbda2"
    );
    assert_eq!(
        KeyBuilder::new("empty", 0).finish().to_hex(),
        "af87f88f310f2243a6b1ac76c4e0d5b21436ccc6b9f5ee5c0db382bd4f7dc0fd"
    );
}

#[test]
fn invariant6_golden_owner_digest_is_pinned() {
    let owner = Owner::new("nvrtc", "13.0.48", "sm_90a", ["-O3", "-std=c++17"]).unwrap();
    assert_eq!(
        owner.digest().to_hex(),
        "f777d2b1a09bb4f27f5600bbda067c9f362ee3ae9490bcf463afa6ca5af4d7ae"
    );
    assert_eq!(owner.label(), "nvrtc-13.0.48/sm_90a");
}

#[test]
fn invariant6_same_inputs_give_the_same_key() {
    assert_eq!(reference_key(), reference_key());
}

#[test]
fn invariant6_every_key_input_changes_the_key() {
    let reference = reference_key();
    let mut changed_spec = vec![];
    let mut s = spec();
    s.dtype = "f64";
    changed_spec.push(s);
    let mut s = spec();
    s.block = (256, 1, 1);
    changed_spec.push(s);
    let mut s = spec();
    s.unroll = None;
    changed_spec.push(s);
    let mut s = spec();
    s.defines.insert("TILE", 64);
    changed_spec.push(s);

    let build = |schema: &str, version: u32, function: &str, source: &[u8], spec: &Spec| {
        KeyBuilder::new(schema, version)
            .str("function", function)
            .bytes("source", source)
            .field("spec", spec)
            .unwrap()
            .finish()
    };
    let src: &[u8] = b"__global__ void saxpy() {}";
    let mut variants = vec![
        build("kernels2", 3, "saxpy", src, &spec()),
        build("kernels", 4, "saxpy", src, &spec()),
        build("kernels", 3, "saxpz", src, &spec()),
        build(
            "kernels",
            3,
            "saxpy",
            b"__global__ void saxpy() { }",
            &spec(),
        ),
        // Same bytes under another label.
        KeyBuilder::new("kernels", 3)
            .str("name", "saxpy")
            .bytes("source", src)
            .field("spec", &spec())
            .unwrap()
            .finish(),
        // Field boundaries are length-prefixed: moving a byte between two
        // fields changes the key.
        KeyBuilder::new("kernels", 3)
            .str("function", "saxp")
            .bytes("source", b"y__global__ void saxpy() {}")
            .field("spec", &spec())
            .unwrap()
            .finish(),
    ];
    for s in &changed_spec {
        variants.push(build("kernels", 3, "saxpy", src, s));
    }
    for (i, v) in variants.iter().enumerate() {
        assert_ne!(*v, reference, "variant {i} did not change the key");
        for (j, w) in variants.iter().enumerate().skip(i + 1) {
            assert_ne!(v, w, "variants {i} and {j} collide");
        }
    }
}

#[test]
fn invariant6_every_owner_field_changes_the_digest() {
    let base = Owner::new("nvrtc", "13.0", "sm_90a", ["-O3", "-lineinfo"]).unwrap();
    let variants = [
        Owner::new("nvcc", "13.0", "sm_90a", ["-O3", "-lineinfo"]).unwrap(),
        Owner::new("nvrtc", "13.1", "sm_90a", ["-O3", "-lineinfo"]).unwrap(),
        Owner::new("nvrtc", "13.0", "sm_90", ["-O3", "-lineinfo"]).unwrap(),
        Owner::new("nvrtc", "13.0", "sm_90a", ["-O2", "-lineinfo"]).unwrap(),
        Owner::new("nvrtc", "13.0", "sm_90a", ["-O3"]).unwrap(),
        // Order is kept: for compilers it can matter.
        Owner::new("nvrtc", "13.0", "sm_90a", ["-lineinfo", "-O3"]).unwrap(),
        // Option boundaries count.
        Owner::new("nvrtc", "13.0", "sm_90a", ["-O3-lineinfo"]).unwrap(),
    ];
    for (i, v) in variants.iter().enumerate() {
        assert_ne!(
            v.digest(),
            base.digest(),
            "owner variant {i} kept the digest"
        );
    }
}

#[test]
fn invariant6_owner_options_are_canonical() {
    let a = Owner::new("nvrtc", "13.0", "sm_90a", ["-O3", "", "  -lineinfo "]).unwrap();
    let b = Owner::new(" nvrtc", "13.0 ", "sm_90a", ["-O3", "-lineinfo"]).unwrap();
    assert_eq!(a.digest(), b.digest());
    assert_eq!(a.options(), ["-O3", "-lineinfo"]);
}

#[test]
fn invariant6_an_owner_must_name_its_compiler_exactly() {
    for (c, v, t, field) in [
        ("", "1", "x", "compiler"),
        ("cc", " ", "x", "version"),
        ("cc", "1", "", "target"),
    ] {
        match Owner::new(c, v, t, Vec::<String>::new()) {
            Err(Error::OwnerField { field: f }) => assert_eq!(f, field),
            other => panic!("expected an OwnerField error for {field}, got {other:?}"),
        }
    }
}

#[test]
fn invariant6_file_inputs_are_fingerprinted_by_contents() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.cuh");
    let b = dir.path().join("sub_b.cuh");
    std::fs::write(&a, "#define TILE 32").unwrap();
    std::fs::write(&b, "#define TILE 32").unwrap();
    let key_of = |path: &std::path::Path| {
        KeyBuilder::new("k", 1)
            .file("header", path)
            .unwrap()
            .finish()
    };
    // Same contents at another path: same key (stable across machines).
    assert_eq!(key_of(&a), key_of(&b));
    // Changed contents: another key.
    std::fs::write(&b, "#define TILE 64").unwrap();
    assert_ne!(key_of(&a), key_of(&b));
}

#[test]
fn invariant6_an_unobservable_input_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing.cuh");
    match KeyBuilder::new("k", 1).file("header", &missing) {
        Err(Error::KeyInput { label, path, .. }) => {
            assert_eq!(label, "header");
            assert_eq!(path, missing);
        }
        Err(other) => panic!("expected KeyInput, got {other}"),
        Ok(_) => panic!("a key was built from a file that cannot be read"),
    }
}

#[test]
fn invariant6_a_value_postcard_cannot_encode_is_refused() {
    /// A sequence whose length is unknown up front: postcard refuses it.
    struct Unsized;
    impl serde::Serialize for Unsized {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            use serde::ser::SerializeSeq;
            let mut seq = s.serialize_seq(None)?;
            seq.serialize_element(&1u8)?;
            seq.end()
        }
    }
    match KeyBuilder::new("k", 1).field("bad", &Unsized) {
        Err(Error::KeyEncoding { label, .. }) => assert_eq!(label, "bad"),
        Err(other) => panic!("expected KeyEncoding, got {other}"),
        Ok(_) => panic!("an unencodable value made a key"),
    }
}

#[test]
fn invariant6_serde_field_equals_its_postcard_encoding() {
    // The streamed encoding is postcard's: the same as hashing the bytes of
    // `postcard::to_allocvec` under the serde tag. (Cross-check of the
    // allocation-free hasher flavor.)
    let value = spec();
    let encoded = postcard::to_allocvec(&value).unwrap();
    let streamed = KeyBuilder::new("k", 1).field("v", &value).unwrap().finish();
    let mut hasher = blake3::Hasher::new_derive_key(kiln_core::key::KEY_CONTEXT);
    hasher.update(&1u64.to_le_bytes());
    hasher.update(b"k");
    hasher.update(&1u32.to_le_bytes());
    hasher.update(&[1]);
    hasher.update(&1u64.to_le_bytes());
    hasher.update(b"v");
    hasher.update(&(encoded.len() as u64).to_le_bytes());
    hasher.update(&encoded);
    assert_eq!(streamed.digest().0, *hasher.finalize().as_bytes());
}

#[test]
fn invariant6_a_value_that_encodes_differently_each_time_is_refused() {
    /// Serialises one more element on every call, as a value whose
    /// iteration order or contents change between two passes would.
    struct Drifting(std::cell::Cell<u8>);
    impl serde::Serialize for Drifting {
        fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let n = self.0.get();
            self.0.set(n + 1);
            s.collect_seq(0..n)
        }
    }
    match KeyBuilder::new("k", 1).field("drift", &Drifting(std::cell::Cell::new(1))) {
        Err(Error::KeyNondeterministic {
            label,
            first,
            second,
        }) => {
            assert_eq!(label, "drift");
            assert_ne!(first, second);
        }
        Err(other) => panic!("expected KeyNondeterministic, got {other}"),
        Ok(_) => panic!("a drifting value made a key"),
    }
}

#[test]
fn invariant6_the_infallible_fields_give_the_keys_of_field() {
    let field = |value: &dyn erased::Value| value.key();
    let edges_u64 = [
        0,
        1,
        127,
        128,
        300,
        16_383,
        16_384,
        u64::from(u32::MAX),
        u64::MAX,
    ];
    for v in edges_u64 {
        assert_eq!(
            KeyBuilder::new("k", 1).u64("v", v).finish(),
            field(&v),
            "u64 {v}"
        );
    }
    for v in [0, 1, 127, 128, 65_535, u32::MAX] {
        assert_eq!(
            KeyBuilder::new("k", 1).u32("v", v).finish(),
            field(&v),
            "u32 {v}"
        );
    }
    for v in [
        0,
        1,
        -1,
        63,
        -64,
        64,
        -65,
        i64::from(i32::MIN),
        i64::MAX,
        i64::MIN,
    ] {
        assert_eq!(
            KeyBuilder::new("k", 1).i64("v", v).finish(),
            field(&v),
            "i64 {v}"
        );
    }
    for v in [0, 1, -1, 1_000_000, -1_000_000, i32::MAX, i32::MIN] {
        assert_eq!(
            KeyBuilder::new("k", 1).i32("v", v).finish(),
            field(&v),
            "i32 {v}"
        );
    }
    for v in [false, true] {
        assert_eq!(
            KeyBuilder::new("k", 1).bool("v", v).finish(),
            field(&v),
            "bool {v}"
        );
    }
    // Distinct values, distinct keys.
    assert_ne!(
        KeyBuilder::new("k", 1).u64("v", 1).finish(),
        KeyBuilder::new("k", 1).u64("v", 2).finish()
    );
    assert_ne!(
        KeyBuilder::new("k", 1).bool("v", false).finish(),
        KeyBuilder::new("k", 1).bool("v", true).finish()
    );
}

/// `KeyBuilder::field` over a few value types, behind one trait object.
mod erased {
    use kiln_core::{Key, KeyBuilder};

    pub trait Value {
        fn key(&self) -> Key;
    }

    impl<T: serde::Serialize> Value for T {
        fn key(&self) -> Key {
            KeyBuilder::new("k", 1)
                .field("v", self)
                .expect("a primitive encodes")
                .finish()
        }
    }
}
