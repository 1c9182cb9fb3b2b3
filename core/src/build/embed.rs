//! How the image a precompile block writes is embedded (`KILN_EMBED`), and
//! the sizes that cannot ship.
//!
//! # Compressed or plain
//!
//! `include_image!` embeds the image the block writes to `OUT_DIR` as it
//! is. By default its payloads are compressed, in groups of one owner each
//! (for a library built for several targets, one target; a target of more
//! than [`kiln_image::GROUP_SPLIT`] bytes in several groups), at zstd level
//! [`DEFAULT_EMBED_LEVEL`] (`KILN_EMBED_LEVEL` chooses another, trading the
//! block's time for the binary's size): a binary carries every target a
//! library ships at close to the size of its shipped image, and a process
//! decompresses, on the first use of an entry, that entry's group only,
//! once, into an aligned buffer its lookups then borrow from.
//! `KILN_EMBED=plain` embeds the payloads as they are: a larger binary, no
//! decompression, and pages of payloads made resident only as they are
//! read. The application chooses, for every
//! library it builds: the variable reruns every precompile block when it
//! changes (set it in the application's `.cargo/config.toml` `[env]` table
//! to make it the project's). BENCHMARKS.md, *Embedded images*, has the
//! figures behind the default.
//!
//! # Sizes that cannot ship
//!
//! A library's package carries its shipped image, and crates.io refuses a
//! package over 10 MiB; an entry of tens of MB is a sign of a catalogue
//! gone wrong. So the block warns, naming the largest entries, when one
//! entry's payloads pass [`ENTRY_WARN_BYTES`] or the image's payloads,
//! compressed, pass [`IMAGE_WARN_BYTES`] (`kiln ship --check` fails on the
//! same limits, measured on the shipped file itself).

use crate::Error;

pub use crate::env::{DEFAULT_EMBED_LEVEL, EMBED, EMBED_LEVEL};

/// Payload bytes of one entry past which a precompile block warns.
pub const ENTRY_WARN_BYTES: u64 = 16 << 20;

/// Compressed payload bytes of an image past which a precompile block
/// warns: its shipped form would come near crates.io's 10 MiB package
/// limit.
pub const IMAGE_WARN_BYTES: u64 = 8 << 20;

/// How many of the largest entries a size warning names.
const LARGEST_SHOWN: usize = 5;

pub use crate::settings::Embedding;

/// One entry's size, for the warnings.
pub(crate) struct EntrySize {
    pub(crate) name: String,
    pub(crate) owner_label: String,
    pub(crate) bytes: u64,
}

impl EntrySize {
    /// The size of `entry`'s payloads.
    pub(crate) fn of(entry: &kiln_image::EntryData) -> EntrySize {
        EntrySize {
            name: entry.name.clone(),
            owner_label: entry.owner_label.clone(),
            bytes: entry.artifacts.iter().map(|a| a.bytes.len() as u64).sum(),
        }
    }
}

/// The image `writer` holds, written as `embedding` asks.
pub(crate) fn write(
    writer: &kiln_image::ImageWriter,
    embedding: Embedding,
) -> Result<Vec<u8>, Error> {
    Ok(match embedding {
        Embedding::Compressed { level } => writer.to_compressed_bytes(level)?,
        Embedding::Plain => writer.to_bytes()?,
    })
}

/// The size warnings of the image `written` (from `writer`, as `embedding`
/// asks) with entries of `sizes`. A plain image whose payloads could pass
/// the limit is compressed once more, quickly, to estimate its compressed
/// size.
pub(crate) fn size_warnings_for(
    writer: &kiln_image::ImageWriter,
    sizes: Vec<EntrySize>,
    written: &[u8],
    embedding: Embedding,
) -> Result<Vec<String>, Error> {
    let stored = kiln_image::Header::parse(written, written.len() as u64)
        .map(|header| header.payload_len)
        .unwrap_or(written.len() as u64);
    let compressed = if embedding == Embedding::Plain && stored > IMAGE_WARN_BYTES {
        let estimate = writer.to_compressed_bytes(3)?;
        kiln_image::Header::parse(&estimate, estimate.len() as u64)
            .map(|header| header.payload_len)
            .unwrap_or(stored)
    } else {
        stored
    };
    Ok(size_warnings(sizes, compressed))
}

/// The `cargo::warning` lines (without the prefix) for entries and an image
/// that cannot ship: `entries` are the image's entries, `compressed` the
/// image's payload bytes once compressed (or, when it was not compressed,
/// its raw payload bytes).
pub(crate) fn size_warnings(mut entries: Vec<EntrySize>, compressed: u64) -> Vec<String> {
    let mut lines = Vec::new();
    let too_large = entries
        .iter()
        .filter(|entry| entry.bytes > ENTRY_WARN_BYTES)
        .count();
    if too_large == 0 && compressed <= IMAGE_WARN_BYTES {
        return lines;
    }
    let total: u64 = entries.iter().map(|entry| entry.bytes).sum();
    if too_large > 0 {
        lines.push(format!(
            "{too_large} entries hold more than {} each: an entry that large is rarely meant \
             (a catalogue grown by mistake?) and makes the image hard to ship",
            mib(ENTRY_WARN_BYTES)
        ));
    }
    if compressed > IMAGE_WARN_BYTES {
        lines.push(format!(
            "the image's {} of payloads compress to {}: its shipped form would come near \
             crates.io's 10 MiB package limit (`kiln ship --check` fails past {}); ship \
             fewer specializations or targets",
            mib(total),
            mib(compressed),
            mib(IMAGE_WARN_BYTES)
        ));
    }
    entries.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.name.cmp(&b.name)));
    for entry in entries.iter().take(LARGEST_SHOWN) {
        lines.push(format!(
            "  largest: {} ({}): {}",
            entry.name,
            entry.owner_label,
            mib(entry.bytes)
        ));
    }
    lines
}

/// `bytes` in MiB, for messages.
pub(crate) fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, bytes: u64) -> EntrySize {
        EntrySize {
            name: name.into(),
            owner_label: "compiler 1/target".into(),
            bytes,
        }
    }

    #[test]
    fn the_switches_read_compressed_at_19_by_default_and_refuse_typos() {
        let read = |embed: Option<&str>, level: Option<&str>| {
            let vars: crate::settings::Vars = [(EMBED, embed), (EMBED_LEVEL, level)]
                .into_iter()
                .filter_map(|(name, value)| Some((name, value?)))
                .collect();
            crate::settings::Settings::from_vars(vars).embedding()
        };
        let default = Embedding::Compressed { level: 19 };
        assert_eq!(read(None, None).ok(), Some(default));
        assert_eq!(read(Some(""), Some(" ")).ok(), Some(default));
        assert_eq!(read(Some("plain"), None).ok(), Some(Embedding::Plain));
        assert_eq!(
            read(None, Some("3")).ok(),
            Some(Embedding::Compressed { level: 3 })
        );
        let error = read(Some("plane"), None).err().map(|e| e.to_string());
        assert!(
            error
                .as_deref()
                .is_some_and(|e| e.contains("KILN_EMBED") && e.contains("plain")),
            "{error:?}"
        );
        for level in ["0", "23", "-1", "fast"] {
            let error = read(Some("plain"), Some(level))
                .err()
                .map(|e| e.to_string());
            assert!(
                error
                    .as_deref()
                    .is_some_and(|e| e.contains("KILN_EMBED_LEVEL") && e.contains("1 (fastest)")),
                "{level}: {error:?}"
            );
        }
    }

    #[test]
    fn small_images_get_no_warning_and_large_ones_name_their_largest_entries() {
        let small = vec![entry("a", 1 << 20), entry("b", 2 << 20)];
        assert!(size_warnings(small, 1 << 20).is_empty());
        let mut catalogue: Vec<EntrySize> = (0..8)
            .map(|n| entry(&format!("dfa {n}"), n << 20))
            .collect();
        catalogue.push(entry("huge dfa", 157 << 20));
        let lines = size_warnings(catalogue, 12 << 20);
        assert!(
            lines[0].starts_with("1 entries hold more than 16.0 MiB"),
            "{lines:?}"
        );
        assert!(lines[1].contains("compress to 12.0 MiB"), "{lines:?}");
        assert!(lines[2].contains("huge dfa") && lines[2].contains("157.0 MiB"));
        assert!(lines[3].contains("dfa 7"));
        assert_eq!(lines.len(), 2 + LARGEST_SHOWN);
    }
}
