//! [`Provenance`]: where a stored entry came from, recorded with it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use kiln_image::Digest;

use super::Origin;

/// Where an entry a tier stores came from. The disk tier records it with
/// every segment (the image's metadata labels [`Provenance::LABEL`] and
/// [`Provenance::FROM_LABEL`], or the signed segment itself), keeps
/// segments of different provenance apart through compaction, and decides
/// trust from it: an entry received unsigned is never taken for one this
/// user compiled, whatever path it takes afterwards.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[non_exhaustive]
pub enum Provenance {
    /// Compiled by a process of this user (the cache's own compiles).
    Compiled,
    /// Received from another tier with its signatures kept (a signed
    /// remote value written through, byte for byte): trusted only while a
    /// trusted key's signature verifies.
    Signed,
    /// Received from another tier without a signature (the remote tier of
    /// a process without trusted keys, or a value nobody signed): never
    /// served by a process with trusted keys. `from` names the tier.
    Unsigned {
        /// The tier it came from (`remote`).
        from: String,
    },
    /// Stored before kiln recorded provenance (no label): treated as
    /// received unsigned.
    Unknown,
}

impl Provenance {
    /// The image metadata label holding the provenance: `compiled` or
    /// `unsigned`.
    pub const LABEL: &'static str = "kiln.provenance";
    /// The image metadata label naming the tier an unsigned entry came
    /// from.
    pub const FROM_LABEL: &'static str = "kiln.from";
    /// The image metadata label of an image a precompile block wrote with
    /// `KILN_BUILD_UNVERIFIED=1`, listing the entries it took from a disk
    /// or remote tier without being able to vouch for them (received
    /// unsigned, or signed by no key it trusts): `<owner hex>:<key hex>`
    /// pairs, sorted, separated by spaces ([`unverified_label`]). A process
    /// with trusted keys refuses those entries of an embedded image
    /// ([`unverified_entries`]), as it would from a tier.
    pub const UNVERIFIED_LABEL: &'static str = "kiln.unverified";

    /// The provenance image metadata `labels` record (of an unsigned
    /// image: a signed segment is [`Provenance::Signed`] by its
    /// signature); [`Provenance::Unknown`] when they record none, or one
    /// this version does not know.
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Provenance {
        match labels.get(Provenance::LABEL).map(String::as_str) {
            Some("compiled") => Provenance::Compiled,
            Some("unsigned") => Provenance::Unsigned {
                from: labels
                    .get(Provenance::FROM_LABEL)
                    .cloned()
                    .unwrap_or_else(|| "another tier".to_owned()),
            },
            _ => Provenance::Unknown,
        }
    }

    /// The labels that record this provenance in an image's metadata
    /// (none for [`Provenance::Signed`] and [`Provenance::Unknown`]).
    pub fn labels(&self) -> Vec<(String, String)> {
        match self {
            Provenance::Compiled => vec![(Provenance::LABEL.to_owned(), "compiled".to_owned())],
            Provenance::Unsigned { from } => vec![
                (Provenance::LABEL.to_owned(), "unsigned".to_owned()),
                (Provenance::FROM_LABEL.to_owned(), from.clone()),
            ],
            Provenance::Signed | Provenance::Unknown => Vec::new(),
        }
    }

    /// Where an entry of this provenance comes from, for [`super::admit`]:
    /// [`Origin::OwnCompile`] for [`Provenance::Compiled`] kept in a
    /// directory only this user may write (`private`), else
    /// [`Origin::Elsewhere`].
    pub fn origin(&self, private: bool) -> Origin {
        match self {
            Provenance::Compiled if private => Origin::OwnCompile,
            _ => Origin::Elsewhere,
        }
    }
}

/// The value of [`Provenance::UNVERIFIED_LABEL`] for `entries` (owner and
/// key digests): sorted, without repeats, so that the image stays
/// deterministic.
pub fn unverified_label(entries: impl IntoIterator<Item = (Digest, Digest)>) -> String {
    let sorted: BTreeSet<(Digest, Digest)> = entries.into_iter().collect();
    sorted
        .iter()
        .map(|(owner, key)| format!("{}:{}", owner.to_hex(), key.to_hex()))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The entries an image's metadata `labels` record as taken unverified
/// ([`Provenance::UNVERIFIED_LABEL`]): none when the label is absent.
///
/// ```
/// use std::collections::BTreeMap;
/// use kiln_core::trust::{Provenance, unverified_entries, unverified_label};
/// use kiln_image::Digest;
///
/// let entry = (Digest::of(b"owner"), Digest::of(b"key"));
/// let labels = BTreeMap::from([(Provenance::UNVERIFIED_LABEL.to_owned(), unverified_label([entry]))]);
/// assert_eq!(unverified_entries(&labels)?, [entry]);
/// assert!(unverified_entries(&BTreeMap::new())?.is_empty());
/// # Ok::<(), String>(())
/// ```
///
/// # Errors
/// What is wrong with a label that is not such a list (a reader with
/// trusted keys then refuses the whole image: it cannot tell which entries
/// were unverified).
pub fn unverified_entries(
    labels: &BTreeMap<String, String>,
) -> Result<Vec<(Digest, Digest)>, String> {
    let Some(value) = labels.get(Provenance::UNVERIFIED_LABEL) else {
        return Ok(Vec::new());
    };
    value
        .split_ascii_whitespace()
        .map(|pair| {
            let parsed = pair
                .split_once(':')
                .and_then(|(owner, key)| Some((owner.parse().ok()?, key.parse().ok()?)));
            parsed.ok_or_else(|| {
                format!(
                    "its label {} holds {:?}, not an owner and a key digest in hex",
                    Provenance::UNVERIFIED_LABEL,
                    pair.chars().take(160).collect::<String>()
                )
            })
        })
        .collect()
}

impl fmt::Display for Provenance {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Provenance::Compiled => f.write_str("compiled by this user's processes"),
            Provenance::Signed => f.write_str("received signed from another tier"),
            Provenance::Unsigned { from } => write!(f, "received unsigned from the {from} tier"),
            Provenance::Unknown => {
                f.write_str("of unknown provenance (stored before kiln recorded it)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn provenance_round_trips_through_labels_and_only_compiles_are_own() {
        for provenance in [
            Provenance::Compiled,
            Provenance::Unsigned {
                from: "remote".into(),
            },
        ] {
            let labels: BTreeMap<String, String> = provenance.labels().into_iter().collect();
            assert_eq!(Provenance::from_labels(&labels), provenance);
        }
        assert_eq!(
            Provenance::from_labels(&BTreeMap::new()),
            Provenance::Unknown
        );
        let odd = BTreeMap::from([(Provenance::LABEL.to_owned(), "trusted".to_owned())]);
        assert_eq!(Provenance::from_labels(&odd), Provenance::Unknown);
        assert_eq!(Provenance::Compiled.origin(true), Origin::OwnCompile);
        assert_eq!(Provenance::Compiled.origin(false), Origin::Elsewhere);
        for other in [
            Provenance::Signed,
            Provenance::Unknown,
            Provenance::Unsigned {
                from: "remote".into(),
            },
        ] {
            assert_eq!(other.origin(true), Origin::Elsewhere);
        }
    }

    #[test]
    fn the_unverified_label_round_trips_sorted_and_a_bad_one_is_an_error() {
        let a = (Digest::of(b"o1"), Digest::of(b"k1"));
        let b = (Digest::of(b"o0"), Digest::of(b"k2"));
        let label = unverified_label([a, b, a]);
        assert_eq!(
            label,
            unverified_label([b, a]),
            "order and repeats do not matter"
        );
        let labels = BTreeMap::from([(Provenance::UNVERIFIED_LABEL.to_owned(), label)]);
        let mut expected = vec![a, b];
        expected.sort();
        assert_eq!(unverified_entries(&labels).unwrap(), expected);
        for bad in ["zz", "00:11", &a.0.to_hex()] {
            let labels =
                BTreeMap::from([(Provenance::UNVERIFIED_LABEL.to_owned(), bad.to_owned())]);
            assert!(unverified_entries(&labels).is_err(), "{bad:?}");
        }
    }
}
