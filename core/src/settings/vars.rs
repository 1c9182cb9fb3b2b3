//! [`Vars`]: one reading of the variables the settings are parsed from.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};

/// One reading of the variables: the process environment
/// ([`Vars::from_env`]) or, for tests and tools, a map
/// ([`Vars::from_iter`]). Nothing reads the environment after it.
///
/// ```
/// use kiln_core::settings::Vars;
///
/// let vars = Vars::from_iter([("KILN_CACHE", "0")]);
/// assert_eq!(vars.get("KILN_CACHE").and_then(|v| v.to_str()), Some("0"));
/// assert!(vars.get("KILN_CACHE_DIR").is_none());
/// ```
///
/// Its `Debug` form names the variables set, never their values (a URL's
/// password, a token of another program).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Vars(BTreeMap<String, OsString>);

impl std::fmt::Debug for Vars {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Vars")
            .field(&self.0.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Vars {
    /// Every variable of the process environment whose name is text, read
    /// now.
    pub fn from_env() -> Vars {
        Vars(
            std::env::vars_os()
                .filter_map(|(name, value)| Some((name.into_string().ok()?, value)))
                .collect(),
        )
    }

    /// The value of `name`, if set.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.0.get(name).map(OsString::as_os_str)
    }

    /// Sets `name` to `value`.
    pub fn set(&mut self, name: &str, value: impl Into<OsString>) {
        self.0.insert(name.to_owned(), value.into());
    }

    /// Unsets `name`.
    pub fn remove(&mut self, name: &str) {
        self.0.remove(name);
    }

    /// The names set, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.0.keys().map(String::as_str)
    }

    /// The variables whose value is text, as name and value pairs (for
    /// `kiln_core::build::Target::from_vars`).
    pub fn text_pairs(&self) -> impl Iterator<Item = (String, String)> + '_ {
        self.0
            .iter()
            .filter_map(|(name, value)| Some((name.clone(), value.to_str()?.to_owned())))
    }

    /// The variables as a lookup function (a name to its value), for code
    /// that takes one.
    pub fn lookup(&self) -> impl Fn(&str) -> Option<OsString> + '_ {
        |name| self.get(name).map(ToOwned::to_owned)
    }
}

impl<K: Into<String>, V: Into<OsString>> FromIterator<(K, V)> for Vars {
    fn from_iter<I: IntoIterator<Item = (K, V)>>(pairs: I) -> Vars {
        Vars(
            pairs
                .into_iter()
                .map(|(name, value)| (name.into(), value.into()))
                .collect(),
        )
    }
}
