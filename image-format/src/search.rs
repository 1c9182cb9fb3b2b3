//! Finding a key among entry records sorted by key.
//!
//! Keys are BLAKE3 digests, so they are uniformly distributed: interpolation
//! on their first 8 bytes lands next to the target in a few probes, where a
//! binary search over 100,000 records takes 17, each a likely cache miss.
//! The probes read the dense `key_prefixes` table (8 bytes per entry), then
//! the full key is compared in the record. Interpolation steps are bounded
//! and followed by a binary search, so crafted key distributions cost at
//! most O(log n) more; an unsorted (corrupt) table can make the search miss
//! but never return an entry with another key.

use rkyv::primitive::ArchivedU64;

use crate::layout::ArchivedEntryRecord;

/// Interpolation steps before falling back to binary search.
const MAX_INTERPOLATION_STEPS: usize = 8;
/// Below this many candidates, binary search directly.
const SMALL_RANGE: usize = 8;

/// The first 8 bytes of a key, big-endian: ordered like the keys.
pub(crate) fn key_prefix(key: &[u8; 32]) -> u64 {
    let mut first = [0u8; 8];
    first.copy_from_slice(&key[..8]);
    u64::from_be_bytes(first)
}

/// Position of the record whose key is `key`, if any. `prefixes[i]` is the
/// prefix of `records[i].key`.
pub(crate) fn find_key(
    prefixes: &[ArchivedU64],
    records: &[ArchivedEntryRecord],
    key: &[u8; 32],
) -> Option<usize> {
    let target = key_prefix(key);
    let start = lower_bound(prefixes, target);
    let run = prefixes.get(start..)?;
    let end = start + run.partition_point(|prefix| prefix.to_native() == target);
    let candidates = records.get(start..end)?;
    candidates
        .binary_search_by(|record| record.key.cmp(key))
        .ok()
        .map(|position| start + position)
}

/// The first position whose prefix is not below `target` (for a sorted
/// table).
fn lower_bound(prefixes: &[ArchivedU64], target: u64) -> usize {
    let at = |i: usize| {
        prefixes
            .get(i)
            .map_or(u64::MAX, |prefix| prefix.to_native())
    };
    // The answer lies in lo..=hi.
    let (mut lo, mut hi) = (0usize, prefixes.len());
    for _ in 0..MAX_INTERPOLATION_STEPS {
        if hi - lo <= SMALL_RANGE {
            break;
        }
        let (low, high) = (at(lo), at(hi - 1));
        if target <= low {
            return lo;
        }
        if target > high {
            return hi;
        }
        // low < target <= high, so high > low.
        let offset = u128::from(target - low) * (hi - 1 - lo) as u128 / u128::from(high - low);
        let position = lo
            + usize::try_from(offset)
                .unwrap_or(usize::MAX)
                .min(hi - 1 - lo);
        if at(position) < target {
            lo = position + 1;
        } else {
            hi = position;
        }
    }
    lo + prefixes.get(lo..hi).map_or(0, |range| {
        range.partition_point(|prefix| prefix.to_native() < target)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archived(values: &[u64]) -> rkyv::util::AlignedVec {
        rkyv::to_bytes::<rkyv::rancor::Error>(&values.to_vec()).unwrap()
    }

    fn lower_bound_of(values: &[u64], target: u64) -> usize {
        let bytes = archived(values);
        let table =
            rkyv::access::<rkyv::vec::ArchivedVec<ArchivedU64>, rkyv::rancor::Error>(&bytes)
                .unwrap();
        lower_bound(table.as_slice(), target)
    }

    #[test]
    fn lower_bound_matches_partition_point() {
        let uniform: Vec<u64> = (0..1000u64)
            .map(|i| i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1)
            .collect();
        let mut sorted = uniform.clone();
        sorted.sort_unstable();
        let skewed: Vec<u64> = (0..1000u64)
            .map(|i| if i < 990 { i } else { u64::MAX - 1000 + i })
            .collect();
        let repeated: Vec<u64> = (0..1000u64).map(|i| i / 100).collect();
        for table in [sorted, skewed, repeated, vec![], vec![5]] {
            let probes = table
                .iter()
                .copied()
                .chain([0, 1, 7, u64::MAX, u64::MAX / 2]);
            for target in probes.collect::<Vec<_>>() {
                assert_eq!(
                    lower_bound_of(&table, target),
                    table.partition_point(|&v| v < target),
                    "target {target}"
                );
            }
        }
    }

    #[test]
    fn lower_bound_on_unsorted_input_stays_in_bounds() {
        let table: Vec<u64> = (0..500u64).map(|i| (i * 7919) % 500).collect();
        for target in 0..600 {
            assert!(lower_bound_of(&table, target) <= table.len());
        }
    }
}
