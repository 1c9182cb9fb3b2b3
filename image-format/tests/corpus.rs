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

use common::{base_images, mutate};
use kiln_image::fuzz_support::{exercise, reseal};
use kiln_test_support::Rng;

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
