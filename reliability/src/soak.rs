//! The soak test's parts: its deterministic compiler, its key stream, and
//! the figures a process reports (see `src/bin/soak.rs`, the binary
//! `kiln-soak`, and `RELIABILITY.md`).
//!
//! The compiler is a real function of the key, not a mock of one: the
//! payload of key `id` is 16 to 200 KiB by default (the size drawn from the
//! key's BLAKE3 between [`PayloadSizes::min`] and [`PayloadSizes::max`]) of
//! BLAKE3 extendable output keyed by the key, hashed over again [`EFFORT`]
//! times as compile work. Any process can therefore check every byte it is
//! served against what its key must produce.
//!
//! [`rss_bound`] is the resident memory a soak process may use: what the
//! cache may hold by its caps, plus a stated bound per entry allocated, plus
//! a fixed overhead.

use std::collections::BTreeMap;

use kiln_core::{Artifact, ArtifactKind, Compiled, Key, KeyBuilder, Owner};

use crate::Error;

/// Smallest and largest payload.
pub const MIN_PAYLOAD: usize = 16 << 10;
/// See [`MIN_PAYLOAD`].
pub const MAX_PAYLOAD: usize = 200 << 10;
/// Extra passes of BLAKE3 over the payload: the compile's CPU work.
pub const EFFORT: usize = 4;
/// The artifact kind of every soak entry.
pub const KIND: ArtifactKind = ArtifactKind::Object;

/// The compiler configuration every soak process uses.
///
/// # Errors
/// [`Error::Core`] if the owner cannot be built (it always can).
pub fn owner() -> Result<Owner, Error> {
    Ok(Owner::new("kiln-soak-compiler", "1", "cpu", ["-O2"])?)
}

/// The key of specialization `id`.
///
/// # Errors
/// [`Error::Core`] if the key cannot be encoded (a `u64` always can).
pub fn key(id: u64) -> Result<Key, Error> {
    Ok(KeyBuilder::new("kiln-soak", 1).field("id", &id)?.finish())
}

/// The range of payload sizes of a soak run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PayloadSizes {
    /// The smallest payload.
    pub min: usize,
    /// The largest payload.
    pub max: usize,
}

impl PayloadSizes {
    /// [`MIN_PAYLOAD`] to [`MAX_PAYLOAD`].
    pub const DEFAULT: PayloadSizes = PayloadSizes {
        min: MIN_PAYLOAD,
        max: MAX_PAYLOAD,
    };

    /// Payloads of at most `max` bytes: from an eighth of it (or
    /// [`MIN_PAYLOAD`], if smaller) to `max`.
    pub fn up_to(max: usize) -> PayloadSizes {
        PayloadSizes {
            min: MIN_PAYLOAD.min(max / 8),
            max,
        }
    }

    /// The payload size of `key`.
    pub fn len(&self, key: &Key) -> usize {
        let digest = blake3::hash(key.digest().as_bytes());
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest.as_bytes()[..8]);
        let span = self.max.saturating_sub(self.min) as u64 + 1;
        self.min + (u64::from_le_bytes(word) % span) as usize
    }

    /// The payload `key` compiles to.
    pub fn payload(&self, key: &Key) -> Vec<u8> {
        payload_of_len(key, self.len(key))
    }

    /// The compile of `key`: one artifact, [`PayloadSizes::payload`].
    pub fn compile(&self, key: &Key) -> Compiled {
        Compiled::new(format!("soak_{}", &key.to_hex()[..16])).artifact(Artifact {
            kind: KIND,
            entry_points: vec!["soak".into()],
            bytes: self.payload(key),
        })
    }
}

/// The payload size of `key`: 16 to 200 KiB.
pub fn payload_len(key: &Key) -> usize {
    PayloadSizes::DEFAULT.len(key)
}

/// The payload `key` compiles to (16 to 200 KiB).
pub fn payload(key: &Key) -> Vec<u8> {
    PayloadSizes::DEFAULT.payload(key)
}

fn payload_of_len(key: &Key, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len];
    blake3::Hasher::new_keyed(key.digest().as_bytes())
        .update(b"kiln-soak payload")
        .finalize_xof()
        .fill(&mut bytes);
    // The compile's work: each pass folds a hash of the whole payload into
    // its first 32 bytes.
    for _ in 0..EFFORT {
        let digest = blake3::hash(&bytes);
        for (byte, d) in bytes.iter_mut().zip(digest.as_bytes()) {
            *byte ^= d;
        }
    }
    bytes
}

/// The compile of `key`: one artifact, [`payload`].
pub fn compile(key: &Key) -> Compiled {
    PayloadSizes::DEFAULT.compile(key)
}

/// What one in-memory entry of the soak may cost besides its payload: the
/// cache's instance (identity, worlds, artifact list: about 250 bytes),
/// its name and entry point, up to eight index cells of 24 bytes, its
/// places in the resident lists, and the allocator's rounding of each.
pub const ENTRY_BOUND: u64 = 1 << 10;

/// What a soak process may hold besides its cache: code, thread stacks,
/// the test's own tallies, the disk tier's indexes, and the allocator's
/// per-thread arenas, which keep freed payload buffers for their thread's
/// next allocations (with 4 threads and a 4 MiB cap, RSS settles at 35 to
/// 70 MiB: see RELIABILITY.md, *Soak*).
pub const FIXED_OVERHEAD: u64 = 96 << 20;

/// The resident memory a soak process may use: the payloads the cache may
/// hold (its memory cap) and queue for its background writer (at most the
/// cap, at most [`kiln_core::cache::MAX_QUEUED_BYTES`]), the disk tier's
/// segments mapped (at most its cap, twice over while a compaction
/// replaces them), [`ENTRY_BOUND`] per entry allocated
/// ([`kiln_core::Stats::entries_alive`]) and [`FIXED_OVERHEAD`].
pub fn rss_bound(memory_cap: u64, disk_cap: u64, entries_alive: u64) -> u64 {
    let queued = memory_cap.min(kiln_core::cache::MAX_QUEUED_BYTES);
    memory_cap
        .saturating_add(queued)
        .saturating_add(disk_cap.saturating_mul(2))
        .saturating_add(entries_alive.saturating_mul(ENTRY_BOUND))
        .saturating_add(FIXED_OVERHEAD)
}

/// A process's figures, as `name=value` pairs on one `RESULT` line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Figures(pub BTreeMap<String, u64>);

impl Figures {
    /// The value of `name` (0 if absent).
    pub fn get(&self, name: &str) -> u64 {
        self.0.get(name).copied().unwrap_or(0)
    }

    /// Sets `name`.
    pub fn set(&mut self, name: &str, value: u64) {
        self.0.insert(name.to_owned(), value);
    }

    /// Adds every figure of `other` (sums, except `*_max` and `*peak*`
    /// figures, which keep the largest).
    pub fn add(&mut self, other: &Figures) {
        for (name, value) in &other.0 {
            let entry = self.0.entry(name.clone()).or_insert(0);
            if name.contains("peak") || name.ends_with("_max") {
                *entry = (*entry).max(*value);
            } else {
                *entry += value;
            }
        }
    }

    /// The figures as `name=value ...`.
    pub fn line(&self) -> String {
        self.0
            .iter()
            .map(|(name, value)| format!("{name}={value}"))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Parses [`Figures::line`]'s output.
    ///
    /// # Errors
    /// [`Error::Child`] for a field that is not `name=number`.
    pub fn parse(line: &str) -> Result<Figures, Error> {
        let mut figures = Figures::default();
        for field in line.split_whitespace() {
            let parsed = field
                .split_once('=')
                .and_then(|(name, value)| Some((name, value.parse::<u64>().ok()?)));
            let Some((name, value)) = parsed else {
                return Err(Error::Child(format!(
                    "not name=number: {field:?} in {line:?}"
                )));
            };
            figures.set(name, value);
        }
        Ok(figures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_are_deterministic_sized_and_distinct() {
        let (a, b) = (key(1).unwrap(), key(2).unwrap());
        assert_eq!(payload(&a), payload(&a));
        assert_ne!(payload(&a), payload(&b));
        for id in 0..200 {
            let len = payload(&key(id).unwrap()).len();
            assert!((MIN_PAYLOAD..=MAX_PAYLOAD).contains(&len), "{len}");
            let small = PayloadSizes::up_to(256);
            let len = small.payload(&key(id).unwrap()).len();
            assert!((32..=256).contains(&len), "{len}");
        }
        assert_eq!(payload(&a), PayloadSizes::DEFAULT.payload(&a));
    }

    #[test]
    fn figures_round_trip_and_add() {
        let mut a = Figures::parse("requests=3 rss_peak_kib=10").unwrap();
        a.add(&Figures::parse("requests=4 rss_peak_kib=7").unwrap());
        assert_eq!(a.line(), "requests=7 rss_peak_kib=10");
        assert!(Figures::parse("requests=x").is_err());
    }
}
