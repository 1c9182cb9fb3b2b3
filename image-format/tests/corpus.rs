//! Replays a deterministic corpus of mutated images through
//! `kiln_image::fuzz_support::exercise`, the function the cargo-fuzz
//! targets in `fuzz/` call: open, iterate, look up, read every payload.
//! Nothing may panic. Half of the mutants are resealed (index, body and
//! header checksums recomputed) so that mutations reach the structural
//! checks behind the checksums.
//!
//! With `KILN_FUZZ_SEED_DIR=dir`, the test also writes the unmutated base
//! images there, as a seed corpus for the fuzzer.

mod common;

use common::{meta, sample_entries};
use kiln_image::fuzz_support::{exercise, reseal};
use kiln_image::{ImageMeta, ImageWriter};
use kiln_test_support::Rng;

fn base_images() -> Vec<Vec<u8>> {
    let mut images = Vec::new();
    for (count, seed) in [(0, 0), (1, 41), (12, 42), (40, 43)] {
        let mut writer = ImageWriter::new(if count == 0 {
            ImageMeta::default()
        } else {
            meta()
        });
        for entry in sample_entries(count, seed) {
            writer.push(entry);
        }
        images.push(writer.to_bytes().unwrap());
    }
    images
}

/// One deterministic mutation of `base`.
fn mutate(base: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut bytes = base.to_vec();
    let len = bytes.len();
    let at = |rng: &mut Rng| rng.below(len);
    match rng.below(8) {
        0 => {
            let bit = rng.below(len * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
        }
        1 => {
            let i = at(rng);
            bytes[i] = [0x00, 0xff, 0x7f, 0x80][rng.below(4)];
        }
        2 => {
            let start = at(rng);
            let end = (start + 1 + rng.below(64)).min(bytes.len());
            for byte in &mut bytes[start..end] {
                *byte = rng.next_u64() as u8;
            }
        }
        3 => bytes.truncate(at(rng)),
        4 => {
            let n = 1 + rng.below(128);
            let extra = rng.bytes(n);
            bytes.extend_from_slice(&extra);
        }
        5 => {
            // Overwrite a little-endian u32 with an extreme value: hits
            // lengths, offsets and counts.
            let i = at(rng).min(bytes.len().saturating_sub(4));
            let value = [0u32, 1, u32::MAX, u32::MAX / 2, 64, 0x8000_0000][rng.below(6)];
            bytes[i..i + 4].copy_from_slice(&value.to_le_bytes());
        }
        6 => {
            // Copy one chunk of the image over another.
            let (from, to) = (at(rng), at(rng));
            let n = (1 + rng.below(48))
                .min(bytes.len() - from)
                .min(bytes.len() - to);
            let chunk = bytes[from..from + n].to_vec();
            bytes[to..to + n].copy_from_slice(&chunk);
        }
        _ => {
            for _ in 0..1 + rng.below(8) {
                let bit = rng.below(len * 8);
                bytes[bit / 8] ^= 1 << (bit % 8);
            }
        }
    }
    bytes
}

#[test]
fn base_images_read_back_clean() {
    for base in base_images() {
        let seen = exercise(&base).expect("valid image");
        assert_eq!((seen.entries_rejected, seen.payloads_rejected), (0, 0));
    }
    if let Some(dir) = std::env::var_os("KILN_FUZZ_SEED_DIR") {
        std::fs::create_dir_all(&dir).unwrap();
        for (i, base) in base_images().iter().enumerate() {
            std::fs::write(
                std::path::Path::new(&dir).join(format!("seed-{i}.kimg")),
                base,
            )
            .unwrap();
        }
    }
}

#[test]
fn mutated_corpus_never_panics() {
    let mut rng = Rng::new(0xf022);
    let (mut opened, mut opened_resealed, mut rejected_inside) = (0, 0, 0);
    for base in base_images() {
        for i in 0..400 {
            let mut mutant = mutate(&base, &mut rng);
            let resealed = i % 2 == 1;
            if resealed {
                reseal(&mut mutant);
            }
            if let Ok(seen) = exercise(&mutant) {
                opened += 1;
                opened_resealed += usize::from(resealed);
                rejected_inside += usize::from(seen.entries_rejected + seen.payloads_rejected > 0);
            }
        }
    }
    eprintln!(
        "{opened} opened, {opened_resealed} resealed opened, {rejected_inside} rejected inside"
    );
    // The corpus reaches past open, including with resealed checksums, and
    // the lazy checks fire on some of it.
    assert!(
        opened_resealed > 50,
        "{opened_resealed} resealed mutants opened"
    );
    assert!(
        rejected_inside > 50,
        "{rejected_inside} mutants rejected after open, {opened} opened"
    );
}
