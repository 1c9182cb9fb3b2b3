//! [`Settings`]: every `KILN_*` switch, parsed from one reading of the
//! variables, once per process (and once per precompile block).
//!
//! The variables are read once into [`Vars`] (the process environment,
//! or, in tests, a map), and [`Settings::from_vars`] parses them into
//! typed sections: the cache's ([`CacheSettings`]: memory cap, disable,
//! always-compile, log), the images' ([`ImageSettings`]: `KILN_IMAGE_PATH`,
//! `KILN_EMBED`), the record file, the disk tier's
//! ([`Settings::disk`]), the trust policy ([`TrustPolicy`], built here and
//! nowhere else) and a precompile block's ([`BuildSettings`]). A backend or
//! a tier of another crate parses its own section from the same reading
//! ([`Section`], [`Settings::section`]), and declares its switches
//! ([`Switch`]) so that they are listed, documented and classed as
//! run-time or build-time with the others.
//!
//! [`Settings::process`] is the process's reading, taken on first use:
//! [`global()`](crate::global()) parses nothing else, and hands it to
//! everything that needs it (the images, the disk tier, every
//! [`TierFactory`](crate::TierFactory) through its
//! [`TierSetup`](crate::TierSetup)).
//!
//! ```
//! use kiln_core::settings::{Settings, Vars};
//!
//! let settings = Settings::from_vars(Vars::from_iter([
//!     ("KILN_DISABLE", "1"),
//!     ("KILN_MEMORY_MAX_BYTES", "64M"),
//! ]));
//! assert!(settings.cache.disable);
//! assert_eq!(settings.cache.memory_max_bytes, Some(64 << 20));
//! assert!(settings.trust.trusted_keys.is_none());
//! ```
//!
//! Every switch, its default and what it does: `docs/switches.md`, whose
//! table is generated from the declarations ([`markdown_table`]); `kiln
//! settings` prints the value each has in a process and where it came from
//! ([`Settings::effective`]).

mod section;
mod switches;
mod vars;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

pub use section::{BuildSettings, CacheSettings, Embedding, ImageSettings, InvalidEmbedding};
pub use switches::{
    Effective, Kind, Phase, Source, Switch, TABLE_BEGIN, TABLE_END, is_run_time, markdown_table,
    switches, with_table,
};
pub use vars::Vars;

use crate::Error;
use crate::disk::DiskConfig;
use crate::trust::TrustPolicy;

/// The `KILN_*` switches in force, parsed from one reading of the
/// variables (see the [module documentation](self)).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Settings {
    /// The global cache's switches.
    pub cache: CacheSettings,
    /// Where images come from and how a precompile block embeds its own.
    pub images: ImageSettings,
    /// `KILN_RECORD`: the record file the global cache appends what it
    /// returns to, when set and not empty.
    pub record: Option<PathBuf>,
    /// The trust policy (`KILN_TRUSTED_KEYS`, `KILN_SIGNING_KEY`,
    /// `KILN_REMOTE_WRITE`; see [`crate::trust`]), shared by the images and
    /// every tier.
    pub trust: TrustPolicy,
    /// A precompile block's switches.
    pub build: BuildSettings,
    /// The disk tier's configuration, as parsed.
    disk: Result<Option<DiskConfig>, section::DiskUnusable>,
    /// The reading everything above was parsed from.
    vars: Vars,
    /// The sections of other crates, parsed on first request.
    sections: Arc<Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>>,
}

/// Nothing set: every switch at its default.
impl Default for Settings {
    fn default() -> Settings {
        Settings::from_vars(Vars::default())
    }
}

impl Settings {
    /// The process's settings: the environment read and parsed on the
    /// first call, the same value returned by every later one.
    pub fn process() -> &'static Settings {
        static PROCESS: OnceLock<Settings> = OnceLock::new();
        PROCESS.get_or_init(|| Settings::from_vars(Vars::from_env()))
    }

    /// The settings `vars` give, parsed now (the trusted-keys files are
    /// read now; the signing key on first use: see
    /// [`TrustPolicy::signing_key`]). Values a switch does not take keep
    /// its default, with one warning each (per process).
    pub fn from_vars(vars: Vars) -> Settings {
        Settings::parse(vars, None)
    }

    /// The settings with the variable `name` set to `value` (a tool's
    /// option standing in for a variable), parsed again; the trust policy
    /// is kept, with its memo, unless `name` is one of its variables.
    pub fn with_var(&self, name: &str, value: impl Into<std::ffi::OsString>) -> Settings {
        let mut vars = self.vars.clone();
        vars.set(name, value);
        Settings::parse(vars, self.trust_unless_read_from(name))
    }

    /// The settings without the variable `name` (a tool's option that
    /// overrides it), parsed again as [`Settings::with_var`] does.
    pub fn without_var(&self, name: &str) -> Settings {
        let mut vars = self.vars.clone();
        vars.remove(name);
        Settings::parse(vars, self.trust_unless_read_from(name))
    }

    /// The trust policy, to keep when `name` changes, unless the policy is
    /// read from `name`.
    fn trust_unless_read_from(&self, name: &str) -> Option<TrustPolicy> {
        let read_from = [
            crate::trust::TRUSTED_KEYS,
            crate::trust::SIGNING_KEY,
            crate::trust::REMOTE_WRITE,
        ];
        (!read_from.contains(&name)).then(|| self.trust.clone())
    }

    /// Parses `vars`, with `trust` as the policy when given: the one place
    /// a [`TrustPolicy`] is built from variables.
    fn parse(vars: Vars, trust: Option<TrustPolicy>) -> Settings {
        Settings {
            cache: CacheSettings::parse(&vars),
            images: ImageSettings::parse(&vars),
            record: vars
                .get(crate::env::RECORD)
                .filter(|path| !path.is_empty())
                .map(PathBuf::from),
            trust: trust.unwrap_or_else(|| TrustPolicy::parse(&vars)),
            build: BuildSettings::parse(&vars),
            disk: section::parse_disk(&vars),
            vars,
            sections: Arc::default(),
        }
    }

    /// The reading the settings were parsed from.
    pub fn vars(&self) -> &Vars {
        &self.vars
    }

    /// The value of the variable `name` in that reading, if set.
    pub fn var(&self, name: &str) -> Option<std::ffi::OsString> {
        self.vars.get(name).map(ToOwned::to_owned)
    }

    /// The disk tier's configuration (`KILN_CACHE`, `KILN_CACHE_DIR`,
    /// `KILN_CACHE_MAX_BYTES`, `KILN_CACHE_TRUST_DIR`; see
    /// [`crate::disk::config`]), with the trust policy's trusted keys:
    /// `Ok(None)` when the disk tier is off.
    ///
    /// # Errors
    /// [`Error::DiskNoDir`] when `KILN_CACHE_DIR` is unset and the platform
    /// has no cache directory; [`Error::DiskSize`] when
    /// `KILN_CACHE_MAX_BYTES` is not a size.
    pub fn disk(&self) -> Result<Option<DiskConfig>, Error> {
        match &self.disk {
            Ok(config) => Ok(config.clone().map(|mut config| {
                config.trusted_keys = self.trust.trusted_keys.clone();
                config
            })),
            Err(unusable) => Err(unusable.to_error()),
        }
    }

    /// `KILN_EMBED` and `KILN_EMBED_LEVEL`: how a precompile block writes
    /// the image it embeds.
    ///
    /// # Errors
    /// [`Error::InvalidSwitch`] when `KILN_EMBED` is neither `compressed`
    /// nor `plain`, or `KILN_EMBED_LEVEL` is not a number from 1 to 22.
    pub fn embedding(&self) -> Result<Embedding, Error> {
        self.images
            .embedding
            .clone()
            .map_err(|invalid| Error::InvalidSwitch {
                variable: invalid.variable,
                value: invalid.value,
                expected: invalid.expected,
            })
    }

    /// The section `T` of another crate, parsed from these settings on the
    /// first request and shared by later ones.
    ///
    /// ```
    /// use kiln_core::settings::{Section, Settings, Vars};
    ///
    /// #[derive(Debug)]
    /// struct Verbose(bool);
    ///
    /// impl Section for Verbose {
    ///     fn parse(settings: &Settings) -> Verbose {
    ///         let value = settings.var("KILN_MY_BACKEND_VERBOSE");
    ///         Verbose(kiln_core::env::switch("KILN_MY_BACKEND_VERBOSE", value.as_deref(), false))
    ///     }
    /// }
    ///
    /// let settings = Settings::from_vars(Vars::from_iter([("KILN_MY_BACKEND_VERBOSE", "yes")]));
    /// assert!(settings.section::<Verbose>().0);
    /// ```
    pub fn section<T: Section>(&self) -> Arc<T> {
        let id = TypeId::of::<T>();
        let found = self
            .sections
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&id)
            .cloned();
        let any = match found {
            Some(any) => any,
            None => {
                // Parsed outside the lock: a section may ask for another.
                let parsed: Arc<dyn Any + Send + Sync> = Arc::new(T::parse(self));
                let mut sections = self.sections.lock().unwrap_or_else(PoisonError::into_inner);
                Arc::clone(sections.entry(id).or_insert(parsed))
            }
        };
        match any.downcast::<T>() {
            Ok(section) => section,
            // The map holds a `T` under `TypeId::of::<T>()` and nothing else.
            Err(_) => Arc::new(T::parse(self)),
        }
    }

    /// Every declared switch ([`switches`]) with its value in these
    /// settings and where it came from, in the order of the switch table.
    pub fn effective(&self) -> Vec<(&'static Switch, Effective)> {
        switches()
            .into_iter()
            .map(|switch| (switch, switch.effective(self)))
            .collect()
    }
}

/// A section of the settings that another crate parses (a backend's, a
/// tier's), from the same reading as the others: see
/// [`Settings::section`].
pub trait Section: Any + Send + Sync {
    /// The section `settings` give; values it does not take keep their
    /// defaults, with one warning each, or are kept as errors for the code
    /// that uses them to report.
    fn parse(settings: &Settings) -> Self;
}

#[cfg(test)]
mod tests;
