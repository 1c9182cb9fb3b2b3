//! Corrupted variants of a valid image, in named families: truncations, bit
//! flips, swapped and shuffled regions, wrong header fields, zero and huge
//! lengths. Every family is drawn from a seed, so a run is reproducible.
//!
//! "Resealed" variants have their index, body and header checksums
//! recomputed after the mutation ([`kiln_image::fuzz_support::reseal`]), so
//! that the mutation gets past the checksums to the checks behind them
//! (rkyv validation, entry checksums, payload checksums, region bounds).

use kiln_image::fuzz_support::reseal;
use kiln_image::header::{HEADER_LEN, offsets, reseal_header};

use crate::Rng;

/// One corrupted image.
#[derive(Clone, Debug)]
pub struct Case {
    /// The family it belongs to (a row of the matrix).
    pub family: &'static str,
    /// What was done, for failure messages.
    pub label: String,
    /// The corrupted bytes.
    pub bytes: Vec<u8>,
    /// Whether the index, body and header checksums were recomputed after
    /// the mutation. Such a case is a forged image as far as those
    /// checksums go: what only they protect (owner labels, metadata) may
    /// differ from the original; entry records and payloads may not.
    pub resealed: bool,
}

/// The families, in the order [`cases`] yields them.
pub const FAMILIES: [&str; 13] = [
    "truncation",
    "single bit flip",
    "single bit flip, resealed",
    "multi bit flip (2-16 bits)",
    "multi bit flip, resealed",
    "swapped index/payload regions",
    "swapped 64-byte blocks",
    "shuffled blocks (index or payloads)",
    "header field, wrong value",
    "header field, wrong value, header resealed",
    "zero / tiny length",
    "huge claimed length or offset",
    "trailing bytes",
];

/// How many cases of the random families to draw.
#[derive(Clone, Copy, Debug)]
pub struct Counts {
    /// Truncation points in the body (the header is cut every 4 bytes too).
    pub truncations: usize,
    /// Single bit flips (and as many resealed ones).
    pub bit_flips: usize,
    /// Multi bit flips (and as many resealed ones).
    pub multi_flips: usize,
    /// Swapped block pairs and shuffles (each raw and resealed).
    pub swaps: usize,
}

/// A header field: name, offset and width in bytes.
pub const HEADER_FIELDS: [(&str, usize, usize); 18] = [
    ("magic", 0, 8),
    ("format version", offsets::FORMAT_VERSION, 4),
    ("header length", offsets::HEADER_LEN, 4),
    ("byte order", offsets::ENDIANNESS, 1),
    ("pointer width", offsets::POINTER_WIDTH, 1),
    ("aligned primitives", offsets::ALIGNED_PRIMITIVES, 1),
    ("region alignment", offsets::REGION_ALIGN_LOG2, 1),
    ("rkyv version", offsets::RKYV_VERSION, 16),
    ("producer", offsets::PRODUCER, 64),
    ("signature length", offsets::SIGNATURE_LEN, 4),
    ("entry count", offsets::ENTRY_COUNT, 8),
    ("index offset", offsets::INDEX_OFFSET, 8),
    ("index length", offsets::INDEX_LEN, 8),
    ("payload offset", offsets::PAYLOAD_OFFSET, 8),
    ("payload length", offsets::PAYLOAD_LEN, 8),
    ("body length", offsets::BODY_LEN, 8),
    ("body checksum", offsets::BODY_CHECKSUM, 32),
    ("index checksum", offsets::INDEX_CHECKSUM, 32),
];

/// Every case of every family for `base` (a valid image), drawn from `seed`.
/// Nothing for a slice shorter than a header.
pub fn cases(base: &[u8], seed: u64, counts: Counts) -> Vec<Case> {
    if base.len() < HEADER_LEN {
        return Vec::new();
    }
    let mut rng = Rng::new(seed);
    let mut out = Vec::new();
    truncations(base, &mut rng, counts, &mut out);
    bit_flips(base, &mut rng, counts, &mut out);
    swaps(base, &mut rng, counts, &mut out);
    header_fields(base, &mut rng, &mut out);
    lengths(base, &mut out);
    out
}

fn push(out: &mut Vec<Case>, family: &'static str, label: String, bytes: Vec<u8>) {
    out.push(Case {
        family,
        label,
        bytes,
        resealed: false,
    });
}

fn push_resealed(out: &mut Vec<Case>, family: &'static str, label: String, mut bytes: Vec<u8>) {
    reseal(&mut bytes);
    out.push(Case {
        family,
        label,
        bytes,
        resealed: true,
    });
}

fn truncations(base: &[u8], rng: &mut Rng, counts: Counts, out: &mut Vec<Case>) {
    let mut points: Vec<usize> = (0..HEADER_LEN.min(base.len())).step_by(4).collect();
    let body = base.len().saturating_sub(HEADER_LEN);
    points.extend((0..counts.truncations).map(|_| HEADER_LEN + rng.below(body)));
    points.push(base.len().saturating_sub(1));
    for at in points {
        push(
            out,
            "truncation",
            format!("cut at {at}"),
            base[..at].to_vec(),
        );
    }
}

fn flip(bytes: &mut [u8], rng: &mut Rng, bits: usize) -> Vec<usize> {
    (0..bits)
        .map(|_| {
            let bit = rng.below(bytes.len() * 8);
            bytes[bit / 8] ^= 1 << (bit % 8);
            bit
        })
        .collect()
}

fn bit_flips(base: &[u8], rng: &mut Rng, counts: Counts, out: &mut Vec<Case>) {
    for resealing in [false, true] {
        for _ in 0..counts.bit_flips {
            let mut bytes = base.to_vec();
            // Resealed flips target the body: a flip in the header would be
            // undone or re-checksummed by the reseal.
            let bits = if resealing {
                let mut body = bytes.split_off(HEADER_LEN);
                let bits = flip(&mut body, rng, 1);
                bytes.extend(body);
                bits.into_iter().map(|b| b + HEADER_LEN * 8).collect()
            } else {
                flip(&mut bytes, rng, 1)
            };
            if resealing {
                push_resealed(
                    out,
                    "single bit flip, resealed",
                    format!("bit {bits:?}"),
                    bytes,
                );
            } else {
                push(out, "single bit flip", format!("bit {bits:?}"), bytes);
            }
        }
    }
    for resealing in [false, true] {
        for _ in 0..counts.multi_flips {
            let mut bytes = base.to_vec();
            let n = 2 + rng.below(15);
            let bits = flip(&mut bytes, rng, n);
            let label = format!("bits {bits:?}");
            if resealing {
                push_resealed(out, "multi bit flip, resealed", label, bytes);
            } else {
                push(out, "multi bit flip (2-16 bits)", label, bytes);
            }
        }
    }
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut field = [0u8; 8];
    field.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(field)
}

fn region(base: &[u8], offset: usize, len: usize) -> std::ops::Range<usize> {
    let start = (read_u64(base, offset) as usize).min(base.len());
    let end = start
        .saturating_add(read_u64(base, len) as usize)
        .min(base.len());
    start..end
}

fn swaps(base: &[u8], rng: &mut Rng, counts: Counts, out: &mut Vec<Case>) {
    let index = region(base, offsets::INDEX_OFFSET, offsets::INDEX_LEN);
    let payloads = region(base, offsets::PAYLOAD_OFFSET, offsets::PAYLOAD_LEN);
    let both = |bytes: Vec<u8>, out: &mut Vec<Case>, family, label: String| {
        push_resealed(out, family, format!("{label}, resealed"), bytes.clone());
        push(out, family, label, bytes);
    };
    // The index and the payload region exchanged (as much as fits), when
    // the index comes first as the writer lays it out.
    let n = index.len().min(payloads.len());
    if index.end <= payloads.start {
        let mut bytes = base.to_vec();
        let (head, tail) = bytes.split_at_mut(payloads.start);
        head[index.start..index.start + n].swap_with_slice(&mut tail[..n]);
        both(
            bytes,
            out,
            "swapped index/payload regions",
            format!("first {n} bytes of index and payloads exchanged"),
        );
    }
    // The payload region moved in front of the index: offsets exchanged.
    let mut bytes = base.to_vec();
    for (a, b) in [
        (offsets::INDEX_OFFSET, offsets::PAYLOAD_OFFSET),
        (offsets::INDEX_LEN, offsets::PAYLOAD_LEN),
    ] {
        let (x, y) = (read_u64(base, a), read_u64(base, b));
        bytes[a..a + 8].copy_from_slice(&y.to_le_bytes());
        bytes[b..b + 8].copy_from_slice(&x.to_le_bytes());
    }
    both(
        bytes,
        out,
        "swapped index/payload regions",
        "region table entries exchanged".into(),
    );
    // Two 64-byte blocks of the body exchanged.
    let blocks = (base.len() - HEADER_LEN) / 64;
    for _ in 0..counts.swaps {
        let (a, b) = (rng.below(blocks), rng.below(blocks));
        if a == b {
            continue;
        }
        let mut bytes = base.to_vec();
        let (lo, hi) = (a.min(b), a.max(b));
        let (head, tail) = bytes.split_at_mut(HEADER_LEN + hi * 64);
        head[HEADER_LEN + lo * 64..][..64].swap_with_slice(&mut tail[..64]);
        both(
            bytes,
            out,
            "swapped 64-byte blocks",
            format!("body blocks {lo} and {hi} exchanged"),
        );
    }
    // Every 64-byte block of the index or the payload region shuffled.
    for round in 0..counts.swaps / 4 {
        let target = if round % 2 == 0 {
            index.clone()
        } else {
            payloads.clone()
        };
        let mut bytes = base.to_vec();
        let mut order: Vec<usize> = (0..target.len() / 64).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i + 1));
        }
        let original = bytes[target.clone()].to_vec();
        for (to, &from) in order.iter().enumerate() {
            bytes[target.start + to * 64..][..64].copy_from_slice(&original[from * 64..][..64]);
        }
        let which = if round % 2 == 0 { "index" } else { "payload" };
        both(
            bytes,
            out,
            "shuffled blocks (index or payloads)",
            format!("{which} blocks shuffled, round {round}"),
        );
    }
}

fn header_fields(base: &[u8], rng: &mut Rng, out: &mut Vec<Case>) {
    for (name, at, width) in HEADER_FIELDS {
        let original = &base[at..at + width];
        let mut values: Vec<Vec<u8>> = vec![vec![0; width], vec![0xff; width]];
        let mut plus_one = original.to_vec();
        plus_one[0] = plus_one[0].wrapping_add(1);
        values.push(plus_one);
        let mut minus_one = original.to_vec();
        minus_one[0] = minus_one[0].wrapping_sub(1);
        values.push(minus_one);
        let mut random = vec![0u8; width];
        rng.fill(&mut random);
        values.push(random);
        if width >= 4 {
            let mut high = original.to_vec();
            high[width - 1] ^= 0x80;
            values.push(high);
        }
        for value in values {
            if value == original {
                continue;
            }
            let mut bytes = base.to_vec();
            bytes[at..at + width].copy_from_slice(&value);
            let label = format!("{name} = {}", hex::encode(&value));
            push(
                out,
                "header field, wrong value",
                label.clone(),
                bytes.clone(),
            );
            reseal_header(&mut bytes);
            push(
                out,
                "header field, wrong value, header resealed",
                label,
                bytes,
            );
        }
    }
}

fn lengths(base: &[u8], out: &mut Vec<Case>) {
    for len in [0, 1, 8, HEADER_LEN - 1] {
        push(
            out,
            "zero / tiny length",
            format!("first {len} bytes"),
            base[..len.min(base.len())].to_vec(),
        );
    }
    push(
        out,
        "zero / tiny length",
        "the header alone".into(),
        base[..HEADER_LEN].to_vec(),
    );
    let file_len = base.len() as u64;
    let huge = [
        u64::MAX,
        u64::MAX - 63,
        u64::MAX / 2,
        1 << 32,
        1 << 48,
        file_len * 2,
        file_len + 64,
    ];
    for (name, at) in [
        ("entry count", offsets::ENTRY_COUNT),
        ("index offset", offsets::INDEX_OFFSET),
        ("index length", offsets::INDEX_LEN),
        ("payload offset", offsets::PAYLOAD_OFFSET),
        ("payload length", offsets::PAYLOAD_LEN),
        ("body length", offsets::BODY_LEN),
    ] {
        for value in huge {
            let mut bytes = base.to_vec();
            bytes[at..at + 8].copy_from_slice(&value.to_le_bytes());
            reseal_header(&mut bytes);
            push(
                out,
                "huge claimed length or offset",
                format!("{name} = {value}, header resealed"),
                bytes,
            );
        }
    }
    for extra in [1, 64, 4096] {
        let mut bytes = base.to_vec();
        bytes.extend(std::iter::repeat_n(0xa5, extra));
        push(
            out,
            "trailing bytes",
            format!("{extra} bytes appended"),
            bytes.clone(),
        );
        push_resealed(
            out,
            "trailing bytes",
            format!("{extra} bytes appended, resealed"),
            bytes,
        );
    }
}
