//! The sections of [`Settings`](super::Settings) that kiln-core parses.

use std::path::PathBuf;

use super::Vars;
use crate::Error;
use crate::disk::DiskConfig;
use crate::disk::config::{CACHE, CACHE_DIR, CACHE_MAX_BYTES, CACHE_TRUST_DIR};
use crate::env::{
    ALWAYS_COMPILE, BUILD_UNVERIFIED, DEFAULT_EMBED_LEVEL, DISABLE, EMBED, EMBED_LEVEL,
    IGNORE_SHIPPED, IMAGE_PATH, LOG, MEMORY_MAX_BYTES, SHIP_CANDIDATE, switch,
};

/// A boolean switch of `vars`, `default` when unset (one warning for a
/// value that is no boolean).
fn flag(vars: &Vars, name: &str, default: bool) -> bool {
    switch(name, vars.get(name), default)
}

/// How the image a precompile block writes is embedded (`KILN_EMBED`,
/// `KILN_EMBED_LEVEL`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Embedding {
    /// Payloads compressed in groups of one target each, decompressed on
    /// first use.
    Compressed {
        /// The zstd level (1 to 22).
        level: i32,
    },
    /// Payloads as they are.
    Plain,
}

/// The levels `KILN_EMBED_LEVEL` accepts (zstd's).
const EMBED_LEVELS: std::ops::RangeInclusive<i32> = 1..=22;

/// A value of `KILN_EMBED` or `KILN_EMBED_LEVEL` that is not one they take.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InvalidEmbedding {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// What it takes.
    pub expected: &'static str,
}

/// The global cache's switches.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct CacheSettings {
    /// `KILN_DISABLE`: merge no image.
    pub disable: bool,
    /// `KILN_ALWAYS_COMPILE`: skip every cached tier and compile.
    pub always_compile: bool,
    /// `KILN_MEMORY_MAX_BYTES`: the global cache's memory cap (`None`: no
    /// cap); by default [`DEFAULT_MEMORY_MAX_BYTES`](crate::cache::DEFAULT_MEMORY_MAX_BYTES).
    /// An unreadable value keeps the default, with one warning.
    pub memory_max_bytes: Option<u64>,
    /// `KILN_LOG`: how much of the init report kiln prints on stderr (no
    /// `tracing` subscriber installed), when set and not empty.
    pub log: Option<String>,
}

impl Default for CacheSettings {
    fn default() -> CacheSettings {
        CacheSettings::parse(&Vars::default())
    }
}

impl CacheSettings {
    pub(super) fn parse(vars: &Vars) -> CacheSettings {
        CacheSettings {
            disable: flag(vars, DISABLE, false),
            always_compile: flag(vars, ALWAYS_COMPILE, false),
            memory_max_bytes: memory_cap(vars.get(MEMORY_MAX_BYTES)),
            log: vars
                .get(LOG)
                .map(|value| value.to_string_lossy().trim().to_owned())
                .filter(|filter| !filter.is_empty()),
        }
    }
}

/// Where the global cache's images come from, and how a precompile block
/// embeds its own.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ImageSettings {
    /// `KILN_IMAGE_PATH`: directories searched for `*.kimg` files, in order.
    pub path: Vec<PathBuf>,
    /// `KILN_EMBED` and `KILN_EMBED_LEVEL`: the embedding, or the value
    /// one of them does not take ([`Settings::embedding`](super::Settings::embedding)
    /// makes it the error a block reports; the level is checked whatever
    /// the embedding, so that a typo shows before it matters).
    pub embedding: Result<Embedding, InvalidEmbedding>,
}

impl ImageSettings {
    pub(super) fn parse(vars: &Vars) -> ImageSettings {
        let path = vars
            .get(IMAGE_PATH)
            .map(|value| {
                std::env::split_paths(value)
                    .filter(|dir| !dir.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        ImageSettings {
            path,
            embedding: embedding(vars),
        }
    }
}

/// The embedding `KILN_EMBED` asks for (`compressed` when unset or empty),
/// at the level `KILN_EMBED_LEVEL` asks for ([`DEFAULT_EMBED_LEVEL`] when
/// unset or empty).
fn embedding(vars: &Vars) -> Result<Embedding, InvalidEmbedding> {
    let read = |name| {
        vars.get(name)
            .map(|value| value.to_string_lossy().trim().to_owned())
    };
    let level = match read(EMBED_LEVEL).as_deref() {
        None | Some("") => DEFAULT_EMBED_LEVEL,
        Some(text) => text
            .parse()
            .ok()
            .filter(|level| EMBED_LEVELS.contains(level))
            .ok_or_else(|| InvalidEmbedding {
                variable: EMBED_LEVEL,
                value: text.to_owned(),
                expected: "a zstd level from 1 (fastest) to 22 (smallest); 19 by default",
            })?,
    };
    match read(EMBED).as_deref() {
        None | Some("") | Some("compressed") => Ok(Embedding::Compressed { level }),
        Some("plain") => Ok(Embedding::Plain),
        Some(other) => Err(InvalidEmbedding {
            variable: EMBED,
            value: other.to_owned(),
            expected: "`compressed` (the default) or `plain`",
        }),
    }
}

/// A precompile block's switches (`kiln_core::build`, feature `build`).
#[derive(Clone, Debug, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct BuildSettings {
    /// `KILN_IGNORE_SHIPPED`: ignore the library's shipped image.
    pub ignore_shipped: bool,
    /// `KILN_SHIP_CANDIDATE`: also write every entry got, whole, beside
    /// the image.
    pub ship_candidate: bool,
    /// `KILN_BUILD_UNVERIFIED`: take what the tiers give without a trusted
    /// key's signature, recorded as unverified.
    pub build_unverified: bool,
}

impl BuildSettings {
    pub(super) fn parse(vars: &Vars) -> BuildSettings {
        BuildSettings {
            ignore_shipped: flag(vars, IGNORE_SHIPPED, false),
            ship_candidate: flag(vars, SHIP_CANDIDATE, false),
            build_unverified: flag(vars, BUILD_UNVERIFIED, false),
        }
    }
}

/// Why the disk tier's variables are unusable, kept to give the error each
/// time it is asked for.
#[derive(Clone, Debug)]
pub(super) enum DiskUnusable {
    /// No `KILN_CACHE_DIR` and no platform cache directory.
    NoDir,
    /// `KILN_CACHE_MAX_BYTES` is not a size.
    Size(String),
}

impl DiskUnusable {
    pub(super) fn to_error(&self) -> Error {
        match self {
            DiskUnusable::NoDir => Error::DiskNoDir,
            DiskUnusable::Size(value) => Error::DiskSize {
                variable: CACHE_MAX_BYTES,
                value: value.clone(),
            },
        }
    }
}

/// The disk tier's configuration (trusted keys not set): `None` when
/// `KILN_CACHE=0`.
pub(super) fn parse_disk(vars: &Vars) -> Result<Option<DiskConfig>, DiskUnusable> {
    if !flag(vars, CACHE, true) {
        return Ok(None);
    }
    let dir = match vars.get(CACHE_DIR).filter(|dir| !dir.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => crate::disk::config::default_dir().ok_or(DiskUnusable::NoDir)?,
    };
    let mut config = DiskConfig::new(dir);
    config.trust_dir = flag(vars, CACHE_TRUST_DIR, false);
    if let Some(value) = vars.get(CACHE_MAX_BYTES) {
        let value = value.to_string_lossy();
        config.max_bytes = crate::disk::config::parse_size(&value)
            .ok_or_else(|| DiskUnusable::Size(value.into_owned()))?;
    }
    Ok(Some(config))
}

/// The memory cap a `KILN_MEMORY_MAX_BYTES` value asks for: a size, or
/// `off`/`none`/`unlimited` for none; unset or unreadable (one warning):
/// the default.
fn memory_cap(value: Option<&std::ffi::OsStr>) -> Option<u64> {
    let default = Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES);
    let Some(value) = value else {
        return default;
    };
    let value = value.to_string_lossy();
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return default;
    }
    if is_no_cap(trimmed) {
        return None;
    }
    match crate::disk::config::parse_size(trimmed) {
        Some(bytes) => Some(bytes),
        None => {
            tracing::warn!(
                variable = MEMORY_MAX_BYTES,
                value = %value,
                "not a size (bytes, or a number with K, M, G or T; or off): the default memory cap of 1 GiB is used"
            );
            default
        }
    }
}

/// Whether a memory cap's value asks for no cap.
pub(super) fn is_no_cap(value: &str) -> bool {
    ["off", "none", "unlimited"]
        .iter()
        .any(|off| value.eq_ignore_ascii_case(off))
}
