//! The `KILN_*` environment switches, read in one place.
//!
//! | variable | effect |
//! | --- | --- |
//! | `KILN_DISABLE=1` | merge no image at init: every kernel is compiled (or found in another tier) |
//! | `KILN_ALWAYS_COMPILE=1` | skip every cached tier (memory, images, extra tiers) and compile; results are still recorded |
//! | `KILN_IMAGE_PATH=dir1:dir2` | also memory-map and merge every `*.kimg` file in these directories |
//! | `KILN_LOG=info` | in a program with no `tracing` subscriber, kiln prints the init's report on stderr itself: `warn` or `error` only images skipped and entries stale or rejected, any other value also every image merged and the tiers added, and at exit the global cache's [`Stats`](crate::Stats) on one line (`warn`: only failed or dropped stores), `off` nothing; a program with a subscriber gets kiln's `tracing` events there instead (the `kiln` tool's subscriber takes `KILN_LOG` as its filter) |
//! | `KILN_RECORD=path` | append one record per distinct entry the process gets from the global cache (and where from: image, disk, remote, compiled) to `path`, for `kiln bake` and `kiln report` (see [`crate::record`]) |
//! | `KILN_MEMORY_MAX_BYTES=size` | the cap on the payload bytes the global cache holds in memory (bytes, or with a `K`, `M`, `G` or `T` suffix; default `1G`; `off` for no cap): past it, least recently used entries are evicted and come back from the disk tier (borrowed from its mapping), another tier or a compile (see [`CacheConfig::memory_max_bytes`](crate::CacheConfig::memory_max_bytes)) |
//! | `KILN_CACHE=0`, `KILN_CACHE_DIR`, `KILN_CACHE_MAX_BYTES`, `KILN_CACHE_TRUST_DIR` | the disk tier of the global cache: off, where, how large, whether to use a directory others may write to (see [`crate::disk::config`]) |
//! | `KILN_TRUSTED_KEYS=file1:file2` | accept image files, and remote and written-through disk entries, only when signed by one of the public keys in these files (see [`crate::trust`]); set but empty: no key is trusted (one warning), never "no checking" |
//!
//! A boolean switch is on when set to `1`, `true`, `yes` or `on`, off when
//! set to `0`, `false`, `no` or `off` (any case), and at its default when
//! unset or empty; any other value keeps the default, with one warning that
//! names the variable and the accepted spellings (one parser for every
//! boolean `KILN_*` variable of every Kiln crate: [`switch`],
//! [`parse_switch`]). The switches are read once, when
//! the global cache is first used ([`crate::global()`]); [`Switches::from_lookup`]
//! reads them from any source, which keeps tests away from the process
//! environment.

mod value;

pub use value::{InvalidSwitch, OFF, ON, parse_switch, switch};

use std::ffi::OsString;
use std::path::PathBuf;

/// `KILN_DISABLE`: merge no image.
pub const DISABLE: &str = "KILN_DISABLE";
/// `KILN_ALWAYS_COMPILE`: skip every cached tier and compile, still recording the results.
pub const ALWAYS_COMPILE: &str = "KILN_ALWAYS_COMPILE";
/// `KILN_IMAGE_PATH`: directories (separated like `PATH`) whose `*.kimg` files are merged.
pub const IMAGE_PATH: &str = "KILN_IMAGE_PATH";
/// `KILN_LOG`: what of the init's report kiln prints on stderr in a program
/// with no `tracing` subscriber (`warn`, `info`...).
pub const LOG: &str = "KILN_LOG";
/// `KILN_MEMORY_MAX_BYTES`: the cap on the payload bytes the global cache
/// holds in memory (`off`: none).
pub const MEMORY_MAX_BYTES: &str = "KILN_MEMORY_MAX_BYTES";

/// `KILN_RECORD`: the record file that the global cache appends what it
/// returns to.
pub const RECORD: &str = "KILN_RECORD";

/// Every variable that acts at run time only: the switches this module
/// reads, and those of the disk tier (`KILN_CACHE`, `KILN_CACHE_DIR`,
/// `KILN_CACHE_MAX_BYTES`) and the remote tier (`KILN_REMOTE_*`). A build
/// script's precompile block takes from those tiers only what it can vouch
/// for, and the image it writes does not depend on where an entry came
/// from, so [`crate::build`] does not rerun a build script when they
/// change: `KILN_DISABLE=1 cargo run` or a new `KILN_CACHE_DIR` does not
/// rebuild the images. The trust variables are not run-time switches:
/// `KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`, `KILN_CACHE_TRUST_DIR` and
/// `KILN_BUILD_UNVERIFIED` decide what a block may embed, so changing them
/// reruns it. Other crates' run-time switches (a backend's, such as
/// `kiln-cuda`'s `KILN_STRICT_TOOLCHAIN`) are registered instead
/// ([`RunTimeSwitch`](crate::registry::RunTimeSwitch)); [`is_run_time`]
/// asks both.
pub const RUN_TIME: [&str; 12] = [
    DISABLE,
    ALWAYS_COMPILE,
    IMAGE_PATH,
    LOG,
    RECORD,
    MEMORY_MAX_BYTES,
    crate::trust::REMOTE_WRITE,
    crate::disk::config::CACHE,
    crate::disk::config::CACHE_DIR,
    crate::disk::config::CACHE_MAX_BYTES,
    "KILN_REMOTE_CACHE",
    "KILN_REMOTE_TIMEOUT_MS",
];

/// The switches in force, as read from the environment.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Switches {
    /// `KILN_DISABLE`: merge no image.
    pub disable: bool,
    /// `KILN_ALWAYS_COMPILE`: skip every cached tier and compile.
    pub always_compile: bool,
    /// `KILN_IMAGE_PATH`: directories searched for `*.kimg` files, in order.
    pub image_path: Vec<PathBuf>,
    /// `KILN_LOG`: how much of the init report kiln prints on stderr (no
    /// `tracing` subscriber installed), when set and not empty.
    pub log: Option<String>,
    /// `KILN_RECORD`: the record file, when set and not empty.
    pub record: Option<PathBuf>,
    /// `KILN_MEMORY_MAX_BYTES`: the global cache's memory cap (`None`: no
    /// cap); by default [`DEFAULT_MEMORY_MAX_BYTES`](crate::cache::DEFAULT_MEMORY_MAX_BYTES).
    /// An unreadable value keeps the default, with one warning.
    pub memory_max_bytes: Option<u64>,
    /// The trust policy (`KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`,
    /// `KILN_REMOTE_WRITE`; see [`crate::trust`]): with trusted keys, image
    /// files are merged only if one of them signed them. The global cache
    /// hands the same policy to its tiers.
    pub trust: crate::trust::TrustPolicy,
}

/// Nothing set: every switch off, the default memory cap.
impl Default for Switches {
    fn default() -> Switches {
        Switches {
            disable: false,
            always_compile: false,
            image_path: Vec::new(),
            log: None,
            record: None,
            memory_max_bytes: Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES),
            trust: crate::trust::TrustPolicy::default(),
        }
    }
}

impl Switches {
    /// Reads the switches from the process environment, with the process's
    /// trust policy ([`TrustPolicy::from_env`](crate::trust::TrustPolicy::from_env),
    /// read once per process).
    pub fn from_env() -> Switches {
        Switches::from_lookup_with(
            |name| std::env::var_os(name),
            crate::trust::TrustPolicy::from_env(),
        )
    }

    /// Reads the switches through `lookup` (a variable name to its value, if set).
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<OsString>) -> Switches {
        let trust = crate::trust::TrustPolicy::from_lookup(&lookup);
        Switches::from_lookup_with(lookup, trust)
    }

    /// Reads the switches through `lookup`, with `trust` as the policy.
    fn from_lookup_with(
        lookup: impl Fn(&str) -> Option<OsString>,
        trust: crate::trust::TrustPolicy,
    ) -> Switches {
        let flag = |name: &str| switch(name, lookup(name).as_deref(), false);
        let image_path = lookup(IMAGE_PATH)
            .map(|value| {
                std::env::split_paths(&value)
                    .filter(|dir| !dir.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        let log = lookup(LOG)
            .map(|value| value.to_string_lossy().trim().to_owned())
            .filter(|filter| !filter.is_empty());
        let record = lookup(RECORD)
            .filter(|path| !path.is_empty())
            .map(PathBuf::from);
        Switches {
            disable: flag(DISABLE),
            always_compile: flag(ALWAYS_COMPILE),
            image_path,
            log,
            record,
            memory_max_bytes: memory_cap(lookup(MEMORY_MAX_BYTES)),
            trust,
        }
    }
}

/// The memory cap a `KILN_MEMORY_MAX_BYTES` value asks for: a size, or
/// `off`/`none`/`unlimited` for none; unset or unreadable (one warning):
/// the default.
fn memory_cap(value: Option<OsString>) -> Option<u64> {
    let default = Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES);
    let Some(value) = value else {
        return default;
    };
    let value = value.to_string_lossy();
    let trimmed = value.trim();
    if trimmed.is_empty() {
        return default;
    }
    if ["off", "none", "unlimited"]
        .iter()
        .any(|off| trimmed.eq_ignore_ascii_case(off))
    {
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

/// Whether the variable `name` acts at run time only: one of [`RUN_TIME`], or
/// a [`RunTimeSwitch`](crate::registry::RunTimeSwitch) registered by a crate
/// linked into this program.
pub fn is_run_time(name: &str) -> bool {
    RUN_TIME.contains(&name) || crate::registry::run_time_switches().contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn switches(vars: &[(&str, &str)]) -> Switches {
        let vars: BTreeMap<String, OsString> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        Switches::from_lookup(|name| vars.get(name).cloned())
    }

    #[test]
    fn nothing_set_means_every_switch_off() {
        assert_eq!(switches(&[]), Switches::default());
    }

    #[test]
    fn boolean_values_off_and_on() {
        for off in [
            "", "0", "false", "FALSE", "no", "Off", " 0 ", "2", "disabled",
        ] {
            assert!(
                !switches(&[(DISABLE, off)]).disable,
                "{off:?} should be off"
            );
        }
        for on in ["1", "true", "yes", "on", " YES "] {
            let s = switches(&[(DISABLE, on), (ALWAYS_COMPILE, on)]);
            assert!(s.disable && s.always_compile, "{on:?} should be on");
        }
    }

    #[cfg(unix)]
    #[test]
    fn image_path_splits_like_path_and_drops_empty_parts() {
        let s = switches(&[(IMAGE_PATH, "/a/b::/c")]);
        assert_eq!(s.image_path, [PathBuf::from("/a/b"), PathBuf::from("/c")]);
    }

    #[test]
    fn record_names_a_file_and_empty_means_unset() {
        assert_eq!(
            switches(&[(RECORD, "/tmp/app.rec")]).record,
            Some(PathBuf::from("/tmp/app.rec"))
        );
        assert_eq!(switches(&[(RECORD, "")]).record, None);
        assert!(RUN_TIME.contains(&RECORD));
    }

    #[test]
    fn memory_cap_takes_sizes_and_off() {
        let cap = |value: &str| switches(&[(MEMORY_MAX_BYTES, value)]).memory_max_bytes;
        let default = Some(crate::cache::DEFAULT_MEMORY_MAX_BYTES);
        assert_eq!(switches(&[]).memory_max_bytes, default);
        assert_eq!(cap("4M"), Some(4 << 20));
        assert_eq!(cap(" 512k "), Some(512 << 10));
        assert_eq!(cap("123"), Some(123));
        assert_eq!(cap("2G"), Some(2 << 30));
        for off in ["off", "NONE", "unlimited"] {
            assert_eq!(cap(off), None, "{off}");
        }
        for unusable in ["", "lots", "1.5G", "-3"] {
            assert_eq!(cap(unusable), default, "{unusable:?}");
        }
    }

    #[test]
    fn log_filter_is_trimmed_and_empty_means_unset() {
        assert_eq!(switches(&[(LOG, " info ")]).log.as_deref(), Some("info"));
        assert_eq!(switches(&[(LOG, "  ")]).log, None);
    }
}
