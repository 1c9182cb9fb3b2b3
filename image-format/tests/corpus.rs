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

/// The fields of a signature trailer (direct and batch), by name: offset
/// from the trailer's start and width (see `kiln_image::signature`). The
/// batch-only fields come last; a direct trailer's records start at 16
/// (member 4 of a batch of 5, promoted at the first two levels, has zeros
/// in path digests 0 and 1).
const TRAILER_FIELDS: [(&str, usize, usize); 8] = [
    ("magic", 0, 8),
    ("signature count", 8, 4),
    ("kind", 12, 4),
    ("leaf index", 16, 4),
    ("batch size", 20, 4),
    ("path digest 0", 24, 32),
    ("path digest 1", 56, 32),
    ("path digest 2", 88, 32),
];

/// Every named trailer field of a directly signed image and of members of
/// a batch set to wrong values (zeros, ones, ±1, random), raw and with the
/// record's key and signature bytes flipped too: nothing panics, and a
/// reader that trusts the signer (a fresh memo each time) never accepts a
/// changed trailer.
#[test]
fn mutated_signature_trailers_never_panic_nor_verify() {
    use kiln_image::signature::{SigningKey, TrustedKeys, sign_image, sign_images_batch};
    use kiln_image::{Image, Verification};

    let signer = SigningKey::from_secret_bytes([0x5e; 32]);
    let bases = base_images();
    let members: Vec<&[u8]> = bases.iter().skip(1).map(Vec::as_slice).collect();
    let mut batch = sign_images_batch(
        &[members[0], members[1], members[2], members[0], members[1]],
        &signer,
    )
    .expect("signs");
    let mut signed = vec![sign_image(&bases[1], &signer).expect("signs")];
    signed.push(batch.swap_remove(4)); // the promoted member
    signed.push(batch.swap_remove(1));
    let mut rng = Rng::new(0x5167);
    let mut mutants = 0;
    for base in &signed {
        let trailer_len = u32::from_le_bytes(
            base[kiln_image::header::offsets::SIGNATURE_LEN..][..4]
                .try_into()
                .expect("four bytes"),
        ) as usize;
        let at = base.len() - trailer_len;
        let mut fields: Vec<(String, usize, usize)> = TRAILER_FIELDS
            .iter()
            .filter(|(_, offset, width)| offset + width <= trailer_len - 96)
            .map(|(name, offset, width)| ((*name).to_owned(), at + offset, *width))
            .collect();
        fields.push(("public key".into(), base.len() - 96, 32));
        fields.push(("signature".into(), base.len() - 64, 64));
        for (name, offset, width) in fields {
            let original = base[offset..offset + width].to_vec();
            let mut plus = original.clone();
            plus[0] = plus[0].wrapping_add(1);
            let mut minus = original.clone();
            minus[0] = minus[0].wrapping_sub(1);
            let mut random = vec![0u8; width];
            for byte in &mut random {
                *byte = rng.next_u64() as u8;
            }
            for value in [vec![0; width], vec![0xff; width], plus, minus, random] {
                if value == original {
                    continue;
                }
                let mut mutant = base.clone();
                mutant[offset..offset + width].copy_from_slice(&value);
                mutants += 1;
                let _ = exercise(&mutant);
                if let Ok(image) = Image::from_bytes(&mutant, Verification::Full) {
                    let verified = image.verify_signature(&TrustedKeys::new([signer.public_key()]));
                    assert!(verified.is_err(), "{name} = {value:02x?} verified");
                }
            }
        }
    }
    assert!(mutants > 100, "{mutants} mutants");
}
