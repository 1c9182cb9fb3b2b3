//! The names of kiln-core's `KILN_*` switches, and the one boolean parser
//! of every Kiln crate.
//!
//! What each switch does, its default and when it acts: `docs/switches.md`,
//! whose table is generated from the declarations of
//! [`settings::switches`](crate::settings::switches); the values are read
//! and parsed once, into [`Settings`](crate::settings::Settings).
//!
//! A boolean switch is on when set to `1`, `true`, `yes` or `on`, off when
//! set to `0`, `false`, `no` or `off` (any case), and at its default when
//! unset or empty; any other value keeps the default, with one warning that
//! names the variable and the accepted spellings (one parser for every
//! boolean `KILN_*` variable of every Kiln crate: [`switch`],
//! [`parse_switch`]). The switches are read once, when
//! the global cache is first used ([`crate::global()`]; see
//! [`Settings::process`](crate::settings::Settings::process)).

mod value;

pub use value::{InvalidSwitch, OFF, ON, parse_switch, switch};

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

/// `KILN_IGNORE_SHIPPED`: a precompile block ignores the library's shipped
/// image and keys every entry by this machine's toolchain (`kiln ship
/// --rebuild` sets it, to ship again after a toolchain upgrade). A
/// build-time switch: setting or clearing it reruns the build script.
pub const IGNORE_SHIPPED: &str = "KILN_IGNORE_SHIPPED";

/// `KILN_SHIP_CANDIDATE`: a precompile block also writes every entry it got,
/// as the caches hold them, to `OUT_DIR/<name>.entries.kimg` (`kiln ship`
/// sets it: a shipped image holds whole entries, so that a build can leave
/// out what it does not embed whatever it found them in). A build-time
/// switch: setting or clearing it reruns the build script.
pub const SHIP_CANDIDATE: &str = "KILN_SHIP_CANDIDATE";

/// `KILN_BUILD_UNVERIFIED`: a precompile block also takes from the disk
/// and remote tiers entries it cannot vouch for (received unsigned, or
/// signed by no key it trusts), instead of compiling them. The image then
/// records which entries those are
/// ([`Provenance::UNVERIFIED_LABEL`](crate::trust::Provenance::UNVERIFIED_LABEL)), a process with
/// `KILN_TRUSTED_KEYS` refuses them as it would from a tier, and `kiln
/// ship` refuses to ship it. Ignored (with a warning) when
/// `KILN_SIGNING_KEY` is set: a signed image vouches for every entry. A
/// build-time switch: setting or clearing it reruns the build script.
pub const BUILD_UNVERIFIED: &str = "KILN_BUILD_UNVERIFIED";

/// `KILN_EMBED`: `compressed` (the default) or `plain`: how every precompile
/// block writes the image its library embeds.
pub const EMBED: &str = "KILN_EMBED";

/// `KILN_EMBED_LEVEL`: the zstd level (1 to 22) a compressed embedding is
/// written at; [`DEFAULT_EMBED_LEVEL`] when unset or empty.
pub const EMBED_LEVEL: &str = "KILN_EMBED_LEVEL";

/// The zstd level a compressed embedding is written at by default: the
/// smallest binaries for a block's time of seconds (docs/decisions.md,
/// *Compressed payload groups*).
pub const DEFAULT_EMBED_LEVEL: i32 = 19;
