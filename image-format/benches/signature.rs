//! What signatures cost: signing an image, and checking a signature where
//! readers check it (an image of `KILN_IMAGE_PATH` at init, a remote value
//! on each remote hit), against the same reads without a signature.
//!
//! ```text
//! cargo bench -p kiln-image --bench signature -- --warm-up-time 1 --measurement-time 3
//! ```
//!
//! Benchmarks (`<benchmark>/<entries>x<payload>`):
//! - `ed25519_verify`: one strict ed25519 verification of a 32-byte digest,
//!   the fixed part of every check.
//! - `sign`: [`sign_image`] of an unsigned image in memory (a structural
//!   open, hashing the header and index, one ed25519 signature, a copy).
//! - `open_structural` / `open_structural_verify`: `Image::from_bytes` at
//!   `Structural` (an init's open, on an aligned copy), without and with
//!   `verify_signature` (hashing header and index, one verification): the
//!   difference is what a trusted-keys init pays per image file.
//! - `remote_decode` / `remote_decode_verify`: what the remote tier does
//!   with a value on each hit, a `Full` open of a one-entry image (a
//!   kernel's few KiB) and its entry read whole, without and with the
//!   signature check.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, Image, ImageMeta, ImageWriter, SigningKey,
    TrustedKeys, Verification, sign_image,
};

fn image(entries: usize, payload: usize) -> Vec<u8> {
    let mut writer = ImageWriter::new(ImageMeta::new("signature-bench", "1"));
    for i in 0..entries {
        writer.push(EntryData {
            owner: Digest::of(&[(i % 4) as u8]),
            owner_label: format!("owner {}", i % 4),
            key: Digest::of(&(i as u64).to_le_bytes()),
            name: format!("kernel_{i}"),
            min_world: 1,
            max_world: u64::MAX,
            deps: vec![kiln_image::Dep {
                name: format!("def_{}", i % 100),
                fingerprint: Digest::of(b"v1"),
            }],
            artifacts: vec![Artifact {
                kind: ArtifactKind::Cubin,
                entry_points: vec![format!("kernel_{i}")],
                bytes: vec![(i % 251) as u8; payload],
            }],
        });
    }
    writer.to_bytes().expect("valid entries")
}

fn bench(c: &mut Criterion) {
    let key = SigningKey::from_secret_bytes([7; 32]);
    let trusted = TrustedKeys::new([key.public_key()]);

    let mut group = c.benchmark_group("signature");
    let one = sign_image(&image(1, 4096), &key).expect("signs");
    let opened = Image::from_bytes(&one, Verification::Full).expect("valid");
    group.bench_function("ed25519_verify", |b| {
        // The digest is remembered by the image: this is the ed25519 part.
        b.iter(|| black_box(opened.verify_signature(&trusted)).expect("verifies"))
    });

    for (entries, payload) in [(1, 4096), (1_000, 1024), (10_000, 1024)] {
        let label = format!("{entries}x{payload}");
        let unsigned = image(entries, payload);
        let signed = sign_image(&unsigned, &key).expect("signs");
        group.bench_function(format!("sign/{label}"), |b| {
            b.iter(|| sign_image(black_box(&unsigned), &key).expect("signs"))
        });
        group.bench_function(format!("open_structural/{label}"), |b| {
            b.iter(|| {
                Image::from_bytes(black_box(&unsigned), Verification::Structural).map(|i| i.len())
            })
        });
        group.bench_function(format!("open_structural_verify/{label}"), |b| {
            b.iter(|| {
                let image =
                    Image::from_bytes(black_box(&signed), Verification::Structural).expect("valid");
                image.verify_signature(&trusted).expect("verifies")
            })
        });
    }

    let unsigned_value = image(1, 4096);
    let signed_value = sign_image(&unsigned_value, &key).expect("signs");
    let decode = |bytes: &[u8], trusted: Option<&TrustedKeys>| {
        let image = Image::from_bytes(bytes, Verification::Full).expect("valid");
        if let Some(keys) = trusted {
            image.verify_signature(keys).expect("verifies");
        }
        image.entry(0).and_then(|e| e.to_data()).expect("entry")
    };
    group.bench_function("remote_decode/1x4096", |b| {
        b.iter(|| decode(black_box(&unsigned_value), None))
    });
    group.bench_function("remote_decode_verify/1x4096", |b| {
        b.iter(|| decode(black_box(&signed_value), Some(&trusted)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
