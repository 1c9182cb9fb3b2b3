//! Reading a boolean switch's value: the one parser of every boolean
//! `KILN_*` variable, in every Kiln crate.
//!
//! A switch accepts explicit spellings only (any case, spaces around them
//! ignored): [`ON`] turns it on, [`OFF`] turns it off, and unset or empty
//! leaves it at its default. Anything else (`disabled`, `N`, `2`, a typo)
//! is no guess: the switch keeps its default and the process logs one
//! warning naming the variable, the value and the accepted spellings
//! ([`switch`]); a precompile block prints it as a `cargo::warning`
//! ([`parse_switch`] gives the error to callers that report it
//! themselves). Every switch's default is its safe side (a cache
//! directory others may write is not trusted, nothing unverified is
//! embedded, no unsigned remote write), so a mistyped value never weakens
//! a check.
//!
//! ```
//! use std::ffi::OsStr;
//! use kiln_core::env::{parse_switch, switch};
//!
//! assert_eq!(parse_switch("KILN_DISABLE", Some(OsStr::new(" Yes "))), Ok(Some(true)));
//! assert_eq!(parse_switch("KILN_DISABLE", Some(OsStr::new("off"))), Ok(Some(false)));
//! assert_eq!(parse_switch("KILN_DISABLE", Some(OsStr::new(""))), Ok(None));
//! assert_eq!(parse_switch("KILN_DISABLE", None), Ok(None));
//! let error = parse_switch("KILN_DISABLE", Some(OsStr::new("disabled"))).unwrap_err();
//! assert!(error.to_string().contains("KILN_DISABLE=\"disabled\""), "{error}");
//! // Not a spelling it knows: the default, with one warning.
//! assert!(!switch("KILN_DISABLE", Some(OsStr::new("disabled")), false));
//! assert!(switch("KILN_CACHE", Some(OsStr::new("N")), true));
//! ```

use std::collections::HashSet;
use std::ffi::OsStr;
use std::sync::{Mutex, PoisonError};

/// The values that turn a boolean switch on (any case).
pub const ON: [&str; 4] = ["1", "true", "yes", "on"];
/// The values that turn a boolean switch off (any case).
pub const OFF: [&str; 4] = ["0", "false", "no", "off"];

/// A boolean switch set to none of the accepted spellings ([`ON`], [`OFF`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "{variable}={value:?} is not a boolean: set it to 1, true, yes or on to turn it on, to 0, \
     false, no or off to turn it off, or leave it unset"
)]
#[non_exhaustive]
pub struct InvalidSwitch {
    /// The variable.
    pub variable: String,
    /// Its value, as set (lossily decoded).
    pub value: String,
}

/// A boolean switch's value: `Ok(None)` when unset or empty (spaces
/// only), `Ok(Some(on))` for an accepted spelling ([`ON`], [`OFF`]; any
/// case, spaces around it ignored).
///
/// # Errors
/// [`InvalidSwitch`] for any other value.
pub fn parse_switch(variable: &str, value: Option<&OsStr>) -> Result<Option<bool>, InvalidSwitch> {
    let Some(value) = value else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    let word = text.trim();
    let is = |words: &[&str]| words.iter().any(|w| word.eq_ignore_ascii_case(w));
    if word.is_empty() {
        Ok(None)
    } else if is(&ON) {
        Ok(Some(true))
    } else if is(&OFF) {
        Ok(Some(false))
    } else {
        Err(InvalidSwitch {
            variable: variable.to_owned(),
            value: text.into_owned(),
        })
    }
}

/// A boolean switch's value, or `default` when it is unset or empty, and
/// also when it is not a boolean: then one warning (per variable and value,
/// per process) names the variable, the value and the accepted spellings,
/// and says which way the switch stays.
pub fn switch(variable: &str, value: Option<&OsStr>, default: bool) -> bool {
    match parse_switch(variable, value) {
        Ok(set) => set.unwrap_or(default),
        Err(error) => {
            warn_invalid(&error, default);
            default
        }
    }
}

/// Logs `error` once per process, saying the switch stays `default`.
fn warn_invalid(error: &InvalidSwitch, default: bool) {
    static SEEN: Mutex<Option<HashSet<(String, String)>>> = Mutex::new(None);
    let mut seen = SEEN.lock().unwrap_or_else(PoisonError::into_inner);
    let first = seen
        .get_or_insert_with(HashSet::new)
        .insert((error.variable.clone(), error.value.clone()));
    if first {
        let stays = if default { "on" } else { "off" };
        tracing::warn!("{error}; it stays {stays} (its default)");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_explicit_spellings_are_read_and_anything_else_is_an_error() {
        let parse = |value: &str| parse_switch("KILN_X", Some(OsStr::new(value)));
        for on in ["1", "true", "TRUE", "yes", "On", " on "] {
            assert_eq!(parse(on), Ok(Some(true)), "{on:?}");
        }
        for off in ["0", "false", "No", "OFF", " 0 "] {
            assert_eq!(parse(off), Ok(Some(false)), "{off:?}");
        }
        for unset in ["", " ", "\t"] {
            assert_eq!(parse(unset), Ok(None), "{unset:?}");
        }
        for invalid in ["disabled", "N", "y", "2", "-1", "enable", "on off", "0x1"] {
            let error = parse(invalid).unwrap_err();
            assert_eq!(error.variable, "KILN_X");
            assert_eq!(error.value, invalid);
            let message = error.to_string();
            assert!(message.contains("KILN_X") && message.contains("1, true, yes or on"));
        }
        assert_eq!(parse_switch("KILN_X", None), Ok(None));
    }

    #[test]
    fn an_invalid_value_keeps_the_default_whichever_it_is() {
        let value = Some(OsStr::new("disabled"));
        assert!(!switch("KILN_X", value, false));
        assert!(switch("KILN_X", value, true));
        assert!(switch("KILN_X", Some(OsStr::new("yes")), false));
        assert!(!switch("KILN_X", Some(OsStr::new("no")), true));
        assert!(switch("KILN_X", Some(OsStr::new(" ")), true));
    }
}
