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
//! - `remote_decode11/{unsigned,per_entry_signed,batch_signed}`: the
//!   same for eleven such values stored together, unsigned, each signed on
//!   its own, or with one batch signature (a fresh `TrustedKeys` memo each
//!   iteration, as in a new process: one verification, then a path of
//!   four hashes per other member); `batch_signed_memo_warm` with the
//!   batch's root already remembered.
//! - `sign11/{per_entry,batch}`: what the writer pays to sign those eleven
//!   values, each on its own ([`sign_image`]) or together
//!   ([`sign_images_batch`]).

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use kiln_image::{
    Artifact, ArtifactKind, Digest, EntryData, Image, ImageMeta, ImageWriter, SigningKey,
    TrustedKeys, Verification, sign_image, sign_images_batch,
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

    // Eleven one-entry values, as the remote tier stores what the
    // background writer took together.
    let values: Vec<Vec<u8>> = (0..11)
        .map(|i| {
            let mut writer = ImageWriter::new(ImageMeta::new("kiln-remote", "1"));
            writer.push(EntryData {
                name: format!("kernel_{i}"),
                key: Digest::of(&(i as u64).to_le_bytes()),
                ..Image::from_bytes(&unsigned_value, Verification::Full)
                    .and_then(|image| image.entry(0)?.to_data())
                    .expect("entry")
            });
            writer.to_bytes().expect("valid entry")
        })
        .collect();
    let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
    let per_entry: Vec<Vec<u8>> = refs
        .iter()
        .map(|value| sign_image(value, &key).expect("signs"))
        .collect();
    let batch = sign_images_batch(&refs, &key).expect("signs");
    group.bench_function("sign11/per_entry", |b| {
        b.iter(|| {
            refs.iter()
                .map(|value| sign_image(black_box(value), &key).expect("signs"))
                .collect::<Vec<_>>()
        })
    });
    group.bench_function("sign11/batch", |b| {
        b.iter(|| sign_images_batch(black_box(&refs), &key).expect("signs"))
    });
    let decode_all = |values: &[Vec<u8>], trusted: Option<&TrustedKeys>| {
        for value in values {
            black_box(decode(black_box(value), trusted));
        }
    };
    group.bench_function("remote_decode11/unsigned", |b| {
        b.iter(|| decode_all(&values, None))
    });
    group.bench_function("remote_decode11/per_entry_signed", |b| {
        b.iter(|| decode_all(&per_entry, Some(&trusted)))
    });
    group.bench_function("remote_decode11/batch_signed", |b| {
        b.iter_batched_ref(
            || TrustedKeys::new([key.public_key()]),
            |fresh| decode_all(&batch, Some(fresh)),
            criterion::BatchSize::SmallInput,
        )
    });
    group.bench_function("remote_decode11/batch_signed_memo_warm", |b| {
        b.iter(|| decode_all(&batch, Some(&trusted)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
