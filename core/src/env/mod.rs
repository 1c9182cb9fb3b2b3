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

/// Whether the variable `name` acts at run time only: a build script's
/// precompile block does not rerun when it changes (see
/// [`settings::is_run_time`](crate::settings::is_run_time)).
pub fn is_run_time(name: &str) -> bool {
    crate::settings::is_run_time(name)
}
