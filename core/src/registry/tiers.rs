//! The extra tiers other crates offer the global cache: [`TierFactory`],
//! registered with [`inventory`], and what each is given ([`TierSetup`]).

use std::ffi::OsString;
use std::fmt;
use std::sync::Arc;

use crate::Tier;

/// An extra tier that a crate offers to the global cache: a name, and a
/// function that builds the tier from its configuration, or declines.
///
/// A crate registers one with [`inventory::submit!`]; the init of
/// [`global()`](crate::global()) (and [`add_tiers`](crate::add_tiers)) adds
/// the tier of every factory linked into the program after the disk tier, in
/// the order of their names. This is how `kiln-redis` adds the remote tier
/// when `KILN_REMOTE_CACHE` is set, without kiln-core knowing about Redis.
///
/// The function runs once, at init: it must do no I/O (connect on first use
/// instead), never panic, and return `None` when its variables leave the
/// tier off, or (after one `tracing` warning) when they are unusable.
///
/// ```
/// use kiln_core::{Key, Owner, Tier, TierEntry, TierFactory, TierSetup};
/// use kiln_image::EntryData;
///
/// /// A tier that only counts what it is asked.
/// struct Counting;
///
/// impl Tier for Counting {
///     fn name(&self) -> &str {
///         "counting"
///     }
///     fn load_entry(&self, _: &Owner, _: &Key) -> Result<Option<TierEntry>, kiln_core::Error> {
///         Ok(None)
///     }
///     fn store(&self, _: &Owner, _: &EntryData) -> Result<(), kiln_core::Error> {
///         Ok(())
///     }
/// }
///
/// fn counting(setup: &TierSetup<'_>) -> Option<Box<dyn Tier>> {
///     setup.var("MY_COUNTING_TIER")?; // off unless set
///     Some(Box::new(Counting))
/// }
///
/// inventory::submit! { TierFactory::new("counting", counting) }
///
/// let names: Vec<&str> = kiln_core::registry::tier_factories().iter().map(|f| f.name()).collect();
/// assert!(names.contains(&"counting"));
/// ```
pub struct TierFactory {
    name: &'static str,
    build: fn(&TierSetup<'_>) -> Option<Box<dyn Tier>>,
}

inventory::collect!(TierFactory);

impl TierFactory {
    /// A factory named `name` (for reports and logs, e.g. `remote`) that
    /// builds its tier with `build`.
    pub const fn new(
        name: &'static str,
        build: fn(&TierSetup<'_>) -> Option<Box<dyn Tier>>,
    ) -> TierFactory {
        TierFactory { name, build }
    }

    /// The factory's name.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The tier `setup` configures, or `None` when it is off.
    pub fn build(&self, setup: &TierSetup<'_>) -> Option<Box<dyn Tier>> {
        (self.build)(setup)
    }
}

impl fmt::Debug for TierFactory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierFactory")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What a [`TierFactory`] is given: the settings to read its
/// configuration from (its section: [`Settings::section`](crate::settings::Settings::section)),
/// the local tier to write its hits through to, and the trust policy
/// (trusted keys, signing key, unsigned writes) shared by every tier.
pub struct TierSetup<'a> {
    settings: &'a crate::settings::Settings,
    local: Option<Arc<dyn Tier>>,
    trust: &'a crate::trust::TrustPolicy,
}

impl<'a> TierSetup<'a> {
    /// A setup reading `settings` (the process's for the global cache),
    /// with `local` as the local tier (the disk tier, unless it is off)
    /// and `trust` as the trust policy every tier follows (the settings'
    /// for the global cache; a precompile block's vouching policy).
    pub fn new(
        settings: &'a crate::settings::Settings,
        local: Option<Arc<dyn Tier>>,
        trust: &'a crate::trust::TrustPolicy,
    ) -> TierSetup<'a> {
        TierSetup {
            settings,
            local,
            trust,
        }
    }

    /// The settings the tier reads its configuration from.
    pub fn settings(&self) -> &'a crate::settings::Settings {
        self.settings
    }

    /// The trust policy the tier follows.
    pub fn trust_policy(&self) -> &'a crate::trust::TrustPolicy {
        self.trust
    }

    /// The value of the variable `name` in the settings' reading, if set.
    pub fn var(&self, name: &str) -> Option<OsString> {
        self.settings.var(name)
    }

    /// The local tier (the disk tier), shared with the cache, for a tier that
    /// writes its hits through to it; `None` when the disk tier is off.
    pub fn local(&self) -> Option<Arc<dyn Tier>> {
        self.local.clone()
    }
}

impl fmt::Debug for TierSetup<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TierSetup")
            .field("local", &self.local.as_ref().map(|local| local.name()))
            .finish_non_exhaustive()
    }
}

/// Every [`TierFactory`] linked into this program, sorted by name (the order
/// in which the init adds their tiers).
pub fn tier_factories() -> Vec<&'static TierFactory> {
    let mut factories: Vec<&'static TierFactory> = inventory::iter::<TierFactory>().collect();
    factories.sort_by_key(|factory| factory.name);
    factories
}
