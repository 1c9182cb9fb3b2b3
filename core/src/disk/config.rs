//! Where the disk cache lives and how large it may grow, from `KILN_CACHE*`
//! (parsed with the other settings: [`Settings::disk`](crate::settings::Settings::disk)).
//!
//! `KILN_CACHE` (`0` turns the disk tier off), `KILN_CACHE_DIR` (the
//! directory; its files go in `images-v<N>/`, [`DiskConfig::images_dir`]),
//! `KILN_CACHE_MAX_BYTES` (the cap) and `KILN_CACHE_TRUST_DIR` (a directory
//! others may write to, [`DiskConfig::trust_dir`]): each switch's default and
//! meaning are in its declaration (`settings/switches.rs`), from which
//! docs/switches.md's table and `kiln settings` are generated.

use std::path::PathBuf;
use std::time::Duration;

#[cfg(any(feature = "disk", test))]
use crate::error::Error;

/// `KILN_CACHE`: `0`, `false`, `no` or `off` turns the disk cache off.
pub const CACHE: &str = "KILN_CACHE";
/// `KILN_CACHE_DIR`: the disk cache's directory.
pub const CACHE_DIR: &str = "KILN_CACHE_DIR";
/// `KILN_CACHE_MAX_BYTES`: the cap on the total size of this image format
/// version's subdirectory.
pub const CACHE_MAX_BYTES: &str = "KILN_CACHE_MAX_BYTES";
/// `KILN_CACHE_TRUST_DIR`: use a cache directory that another user owns or
/// may write to (see [`DiskConfig::trust_dir`]).
pub const CACHE_TRUST_DIR: &str = "KILN_CACHE_TRUST_DIR";
/// Every variable this module reads, for `cargo::rerun-if-env-changed` lines.
pub const ALL: [&str; 4] = [CACHE, CACHE_DIR, CACHE_MAX_BYTES, CACHE_TRUST_DIR];

/// The cap used when `KILN_CACHE_MAX_BYTES` is unset: 1 GiB.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 30;

/// The default [`DiskConfig::compact_after`]: the base and two small
/// segments at most.
pub const DEFAULT_COMPACT_AFTER: usize = 3;

/// How a [`DiskCache`](super::DiskCache) is laid out and bounded.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiskConfig {
    /// The cache directory, the root that users name (`KILN_CACHE_DIR`). The
    /// disk tier keeps its files in [`DiskConfig::images_dir`] under it
    /// (created with it on open when missing).
    pub dir: PathBuf,
    /// The cap on the total size of the files in [`DiskConfig::images_dir`]
    /// (this image format version's entries), in bytes. Least recently used
    /// entries are evicted to stay under it; other versions' subdirectories
    /// are not counted.
    pub max_bytes: u64,
    /// Segments are merged once there are more than this many (the base
    /// included), so that a new process opens few files. The default, 3,
    /// leaves the base and at most two small segments after every store;
    /// merging is geometric (see the [module documentation](super)), so
    /// each entry is rewritten a logarithmic number of times on average.
    pub compact_after: usize,
    /// The granularity of recency stamps: a process records that it used an
    /// entry at most once per interval, and writes its pending stamps at most
    /// once per interval (and when the cache is dropped or flushed).
    pub stamp_interval: Duration,
    /// Use the directory even if another user owns it, or users other than
    /// its owner may write to it (`KILN_CACHE_TRUST_DIR`). By default
    /// (`false`) such a cache directory, or such an
    /// [`images_dir`](DiskConfig::images_dir), is refused
    /// ([`Error::DiskDirUntrusted`]): another user could plant compiled
    /// code there, which the cache would serve; so is a cache directory
    /// below a directory that another user (not root) owns or that others
    /// may write to without the sticky bit (they could put another
    /// directory in its place). The check is of the directories' owner and
    /// mode bits only (group or others write), on Unix. With it, entries
    /// this user compiled are no longer known to be its own: with trusted
    /// keys only signed entries are served from such a directory.
    pub trust_dir: bool,
    /// The trust policy's trusted keys (`KILN_TRUSTED_KEYS`, see
    /// [`crate::trust`]): when set, an entry is served only if its
    /// [`Provenance`](crate::trust::Provenance) says this user's processes
    /// compiled it, in a directory not shared through
    /// [`DiskConfig::trust_dir`], or a signature by one of these keys
    /// verifies (a remote entry written through with its signature). An
    /// entry received unsigned, or stored before provenance was recorded,
    /// is refused. `None`: nothing is checked.
    pub trusted_keys: Option<kiln_image::TrustedKeys>,
}

impl DiskConfig {
    /// Checks the cache directory as [`DiskCache::open`](super::DiskCache::open)
    /// does, creating it (mode 700) when missing: it must be a directory and,
    /// unless [`DiskConfig::trust_dir`], owned by this process's user, not
    /// writable by other users, and below directories only this user or root
    /// may change. For other files kept in the directory (a backend's memos),
    /// which must be refused where the cache is. (The check is of the
    /// directory the path names now: the cache itself then holds it open.)
    ///
    /// # Errors
    /// [`Error::DiskDirUntrusted`] for a directory another user owns or may
    /// write to, or below one; [`Error::DiskIo`] when it cannot be created
    /// or is not a directory.
    #[cfg(feature = "disk")]
    pub fn check_dir(&self) -> Result<(), Error> {
        super::dir::check_dir(&self.dir, self.trust_dir)
    }

    /// A configuration for `dir` with the default cap, compaction threshold
    /// and stamp interval.
    pub fn new(dir: impl Into<PathBuf>) -> DiskConfig {
        DiskConfig {
            dir: dir.into(),
            max_bytes: DEFAULT_MAX_BYTES,
            compact_after: DEFAULT_COMPACT_AFTER,
            stamp_interval: Duration::from_secs(60),
            trust_dir: false,
            trusted_keys: None,
        }
    }

    /// Where the disk tier keeps its files: `<dir>/images-v<N>/`, `N` being
    /// the kiln image format version this build reads
    /// ([`kiln_image::header::FORMAT_VERSION`]). Programs built with another format
    /// version use their own sibling subdirectory, which this one never
    /// reads, compacts, evicts from or clears, so they can share `dir`.
    pub fn images_dir(&self) -> PathBuf {
        self.dir.join(images_subdir())
    }
}

/// The configuration the settings give
/// ([`Settings::disk`](crate::settings::Settings::disk)): `None` when the disk cache is turned off,
/// or (after one warning) when the configuration is an error.
#[cfg(feature = "disk")]
pub(crate) fn or_warn(config: Result<Option<DiskConfig>, Error>) -> Option<DiskConfig> {
    config.unwrap_or_else(|error| {
        super::dir::warn_unavailable(&error);
        None
    })
}

/// The platform cache directory + `kiln`, when the platform has one.
pub fn default_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|dir| dir.join("kiln"))
}

/// The name of the disk tier's subdirectory for the image format version
/// this build reads: `images-v<N>`.
pub fn images_subdir() -> String {
    format!("images-v{}", kiln_image::header::FORMAT_VERSION)
}

/// Parses a size: decimal bytes, optionally followed by `K`, `M`, `G` or `T`
/// (powers of 1024; `KB`, `KiB` and lower case are accepted too).
pub fn parse_size(text: &str) -> Option<u64> {
    let text = text.trim();
    let digits_end = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (digits, unit) = text.split_at(digits_end);
    let number: u64 = digits.parse().ok()?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    number.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)]) -> Result<Option<DiskConfig>, Error> {
        crate::settings::Settings::from_vars(vars.iter().copied().collect()).disk()
    }

    #[test]
    fn sizes_accept_bytes_and_binary_suffixes() {
        assert_eq!(parse_size("1234"), Some(1234));
        assert_eq!(parse_size("64K"), Some(64 << 10));
        assert_eq!(parse_size(" 3 MiB "), Some(3 << 20));
        assert_eq!(parse_size("2g"), Some(2 << 30));
        assert_eq!(parse_size("1T"), Some(1 << 40));
        for bad in ["", "M", "12X", "-1", "1.5G", "99999999999999999999T"] {
            assert_eq!(parse_size(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cache_zero_turns_the_disk_cache_off() {
        for off in ["0", "false", "OFF", "no"] {
            assert_eq!(config(&[(CACHE, off), (CACHE_DIR, "/x")]).ok(), Some(None));
        }
        for on in ["1", "", "yes", "maybe"] {
            let on = config(&[(CACHE, on), (CACHE_DIR, "/x")]);
            assert_eq!(on.ok().flatten().map(|c| c.dir), Some(PathBuf::from("/x")));
        }
    }

    #[test]
    fn dir_and_cap_come_from_the_environment() {
        let c = config(&[(CACHE_DIR, "/tmp/k"), (CACHE_MAX_BYTES, "10M")]);
        let c = c.ok().flatten();
        assert_eq!(c.as_ref().map(|c| c.dir.clone()), Some("/tmp/k".into()));
        assert_eq!(c.map(|c| c.max_bytes), Some(10 << 20));
    }

    #[test]
    fn trusting_the_directory_is_an_explicit_switch() {
        let trusted = |vars: &[(&str, &str)]| config(vars).ok().flatten().map(|c| c.trust_dir);
        assert_eq!(trusted(&[(CACHE_DIR, "/x")]), Some(false));
        for off in ["", " ", "0", "no", "False", "disabled", "N", "2"] {
            assert_eq!(
                trusted(&[(CACHE_DIR, "/x"), (CACHE_TRUST_DIR, off)]),
                Some(false)
            );
        }
        for on in ["1", "yes", "true"] {
            assert_eq!(
                trusted(&[(CACHE_DIR, "/x"), (CACHE_TRUST_DIR, on)]),
                Some(true)
            );
        }
    }

    #[test]
    fn a_bad_cap_is_an_error_naming_the_variable() {
        let err = config(&[(CACHE_DIR, "/x"), (CACHE_MAX_BYTES, "lots")]);
        let message = err.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(message.contains("KILN_CACHE_MAX_BYTES"), "{message}");
    }
}
