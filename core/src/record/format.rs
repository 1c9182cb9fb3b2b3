//! The record format: one text line per record (see the [module
//! docs](super) for the fields), its escapes, its check, and parsing a line
//! back. Knows nothing of files, processes or caches.

use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

use crate::Digest;

/// The first field of every record of this format.
pub const MAGIC: &str = "KR1";

/// The longest record line, line break included: one page (`PIPE_BUF` on
/// Linux). Writers never exceed it; readers skip longer lines.
pub const MAX_LINE: usize = 4096;

/// Bytes of a name or an owner label kept in a record.
pub(super) const MAX_TEXT: usize = 200;
/// Bytes of an image producer kept (the image header holds at most 64).
pub(super) const MAX_PRODUCER: usize = 64;
/// Bytes of a tier name kept.
const MAX_TIER: usize = 32;
/// The check's BLAKE3 derive-key context.
const CHECK_CONTEXT: &str = "kiln record line v1";

/// Where a recorded entry came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SourceKind {
    /// A merged image (embedded by a library, or a file of `KILN_IMAGE_PATH`).
    Image,
    /// An extra tier, by name (`disk`, `remote`).
    Tier(String),
    /// Compiled by the process.
    Compiled,
    /// Already in memory when first asked for (inserted directly, or there
    /// before recording began).
    Memory,
}

impl SourceKind {
    /// Whether the entry came from an image.
    pub fn is_image(&self) -> bool {
        *self == SourceKind::Image
    }

    /// The field as written in a record.
    pub(super) fn wire(&self) -> Cow<'static, str> {
        match self {
            SourceKind::Image => Cow::Borrowed("image"),
            SourceKind::Compiled => Cow::Borrowed("compiled"),
            SourceKind::Memory => Cow::Borrowed("memory"),
            SourceKind::Tier(name) => Cow::Owned(format!("tier:{name}")),
        }
    }

    /// Parses a record's source field.
    pub(super) fn from_wire(text: &str) -> Option<SourceKind> {
        Some(match text {
            "image" => SourceKind::Image,
            "compiled" => SourceKind::Compiled,
            "memory" => SourceKind::Memory,
            _ => {
                let name = text.strip_prefix("tier:")?;
                if name.is_empty() || tier_name(name) != name {
                    return None;
                }
                SourceKind::Tier(name.to_owned())
            }
        })
    }

    /// The bit of the per-entry mask of sources already written.
    pub(super) fn bit(&self, tier_index: usize) -> u32 {
        match self {
            SourceKind::Image => 1,
            SourceKind::Memory => 1 << 1,
            SourceKind::Compiled => 1 << 2,
            SourceKind::Tier(_) => 1 << (3 + tier_index.min(28)),
        }
    }
}

impl fmt::Display for SourceKind {
    /// `image`, `compiled`, `memory`, or the tier's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceKind::Tier(name) => f.write_str(name),
            other => f.write_str(&other.wire()),
        }
    }
}

/// A tier's name as recorded: `[A-Za-z0-9._-]` only (others become `_`),
/// at most 32 bytes, `tier` when empty.
pub(super) fn tier_name(name: &str) -> String {
    let kept: String = name
        .chars()
        .take(MAX_TIER)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if kept.is_empty() {
        "tier".to_owned()
    } else {
        kept
    }
}

/// An `E` record, line break included.
pub(super) fn entry_line(
    source: &SourceKind,
    (owner, key): (&Digest, &Digest),
    hits: u64,
    nanos: u64,
    name: &str,
    label: &str,
    producer: &str,
) -> String {
    let body = format!(
        "{MAGIC}\tE\t{}\t{}\t{}\t{hits}\t{nanos}\t{}\t{}\t{}",
        source.wire(),
        owner.to_hex(),
        key.to_hex(),
        escape(name, MAX_TEXT),
        escape(label, MAX_TEXT),
        escape(producer, MAX_PRODUCER),
    );
    seal(body)
}

/// An `H` record, line break included.
pub(super) fn hits_line(
    source: &SourceKind,
    (owner, key): (&Digest, &Digest),
    hits: u64,
) -> String {
    let body = format!(
        "{MAGIC}\tH\t{}\t{}\t{}\t{hits}",
        source.wire(),
        owner.to_hex(),
        key.to_hex(),
    );
    seal(body)
}

/// `body`, its check and a line break.
pub(super) fn seal(mut body: String) -> String {
    let check = check(&body);
    body.push('\t');
    body.push_str(&check);
    body.push('\n');
    body
}

/// The check of a record's body: 16 hex digits.
fn check(body: &str) -> String {
    let hash = blake3::Hasher::new_derive_key(CHECK_CONTEXT)
        .update(body.as_bytes())
        .finalize();
    hex::encode(&hash.as_bytes()[..8])
}

/// `text` cut to at most `max` bytes (at a character boundary), with every
/// byte below `0x20`, `0x7f` and `%` written `%XX`.
fn escape(text: &str, max: usize) -> Cow<'_, str> {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = &text[..end];
    if !text.bytes().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match u8::try_from(c) {
            Ok(byte) if needs_escape(byte) => out.push_str(&format!("%{byte:02X}")),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == 0x7f || byte == b'%'
}

/// The inverse of [`escape`]; `None` for a malformed escape or bytes that
/// are not UTF-8.
fn unescape(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let mut byte = [0u8; 1];
            hex::decode_to_slice(bytes.get(i + 1..i + 3)?, &mut byte).ok()?;
            out.push(byte[0]);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// One record, parsed.
pub(super) struct Record {
    pub(super) source: SourceKind,
    pub(super) owner: Digest,
    pub(super) key: Digest,
    pub(super) hits: u64,
    /// `E` records only.
    pub(super) entry: Option<EntryFields>,
}

pub(super) struct EntryFields {
    pub(super) took: Duration,
    pub(super) name: String,
    pub(super) label: String,
    pub(super) producer: String,
}

pub(super) enum Parsed {
    Record(Record),
    OtherVersion,
    Corrupt,
}

pub(super) fn parse_line(line: &[u8]) -> Parsed {
    let Ok(line) = std::str::from_utf8(line) else {
        return Parsed::Corrupt;
    };
    let Some((body, sealed)) = line.rsplit_once('\t') else {
        return Parsed::Corrupt;
    };
    let magic = body.split('\t').next().unwrap_or_default();
    if magic != MAGIC {
        let other_version = magic
            .strip_prefix("KR")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        return if other_version {
            Parsed::OtherVersion
        } else {
            Parsed::Corrupt
        };
    }
    if sealed != check(body) {
        return Parsed::Corrupt;
    }
    parse_fields(body).map_or(Parsed::Corrupt, Parsed::Record)
}

fn parse_fields(body: &str) -> Option<Record> {
    let fields: Vec<&str> = body.split('\t').collect();
    let number = |text: &str| -> Option<u64> {
        if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    let digest = |text: &str| Digest::from_hex(text).ok();
    match fields[..] {
        [
            _,
            "E",
            source,
            owner,
            key,
            hits,
            nanos,
            name,
            label,
            producer,
        ] => Some(Record {
            source: SourceKind::from_wire(source)?,
            owner: digest(owner)?,
            key: digest(key)?,
            hits: number(hits)?,
            entry: Some(EntryFields {
                took: Duration::from_nanos(number(nanos)?),
                name: unescape(name)?,
                label: unescape(label)?,
                producer: unescape(producer)?,
            }),
        }),
        [_, "H", source, owner, key, hits] => Some(Record {
            source: SourceKind::from_wire(source)?,
            owner: digest(owner)?,
            key: digest(key)?,
            hits: number(hits)?,
            entry: None,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod escape_tests {
    use super::{check, escape, unescape};

    #[test]
    fn escaped_text_round_trips_and_a_malformed_escape_is_refused() {
        let text = "a%b\tc\u{7f}\nd é";
        let escaped = escape(text, usize::MAX);
        assert_eq!(escaped, "a%25b%09c%7F%0Ad é");
        assert_eq!(unescape(&escaped).as_deref(), Some(text));
        assert_eq!(unescape("%7f%7F").as_deref(), Some("\u{7f}\u{7f}"));
        // Two hex digits, nothing else: a sign, a short or a non-hex escape
        // makes the line corrupt.
        for bad in ["%+F", "%4", "%G0", "%", "%é", "%ff"] {
            assert_eq!(unescape(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_check_is_sixteen_lowercase_hex_digits() {
        let check = check("KR1\tE");
        assert_eq!(check.len(), 16);
        assert!(
            check
                .bytes()
                .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')),
            "{check}"
        );
    }
}
