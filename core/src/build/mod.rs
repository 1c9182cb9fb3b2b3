//! Build-script helpers: a library's precompile block, which ships what its
//! author compiled and compiles on other machines only what is missing.
//!
//! ```no_run
//! // build.rs of a kernel library
//! use kiln_core::build::Precompile;
//! use kiln_core::{Compiled, KeyBuilder, Owner};
//!
//! fn main() -> Result<(), kiln_core::Error> {
//!     Precompile::new("my-kernels").run(|session| {
//!         session.uses_source("src/kernels.rs");
//!         // The target cargo builds for, not the host this script runs on.
//!         let target = session.target().map_or("unknown", |t| t.arch()).to_owned();
//!         let owner = Owner::new("my-compiler", "1.0", &target, Vec::<String>::new())?;
//!         for n in [1u32, 2, 4] {
//!             session.specialize(&format!("unroll<{n}>"), |cache| {
//!                 let key = KeyBuilder::new("unroll", 1).u32("n", n).finish();
//!                 // Shipped image, disk and remote caches first; compiles on a miss.
//!                 cache.get_or_compile(&owner, &key, || Ok(Compiled::new(format!("unroll<{n}>"))))
//!             });
//!         }
//!         Ok(())
//!     })?;
//!     Ok(())
//! }
//! // and in the library: kiln::include_image!("my-kernels.kimg");
//! ```
//!
//! A build script cannot depend on its own crate, so the code that builds
//! keys and compiles usually lives in one module that both include: the
//! library as `mod kernels;`, the build script as
//! `#[path = "src/kernels.rs"] mod kernels;` (declared with
//! [`Session::uses_source`]). Then the library and its build script derive
//! the same owners and keys. `examples/kiln-kernels-demo` does this.
//!
//! # Compile once, where the author builds; check everywhere else
//!
//! A library's build script runs on every machine that builds an
//! application using it: the application developer's laptop, its CI,
//! docs.rs. Most have no compiler for the library's code (no NVRTC, no CUDA
//! headers) and no network. So the author ships what the block compiled:
//!
//! 1. the author builds the library where the toolchain is (the block
//!    compiles into `OUT_DIR`, reusing what earlier builds compiled);
//! 2. `kiln ship` writes that image, compressed, into the library's source
//!    tree as `kiln-shipped/<name>.kship`, with what it was built from (the
//!    backends' records, the digests of the declared sources and of the
//!    specialization list); `cargo package` takes it along;
//! 3. every build of the library then finds each specialization in that
//!    shipped image before it compiles anything: a downstream build checks
//!    the shipped image (every digest, and the signature when the library
//!    names its key with [`Precompile::shipped_key`]), finds every entry the
//!    block asks for, writes them to `OUT_DIR` for `include_image!`, and
//!    opens no compiler.
//!
//! `kiln ship --check` fails when the shipped image no longer covers the
//! block (run it in the library's CI). A normal build never writes into the
//! source tree: the block leaves `OUT_DIR/<name>.kship-candidate` beside its
//! image, which `kiln ship` reads.
//!
//! # Where each specialization comes from
//!
//! The block's cache ([`Session::cache`]) looks an entry up, in order, in
//! the library's shipped image, the disk tier (`KILN_CACHE_DIR`, on by
//! default) and the remote tier (`KILN_REMOTE_CACHE`, when the build script
//! links `kiln-redis`: the `redis` feature of the `kiln` build-dependency),
//! and compiles only what none holds; what it compiles is stored into those
//! tiers (flushed before the run ends). The image written does not depend
//! on where an entry came from: the same block gives the same bytes.
//! `KILN_ALWAYS_COMPILE=1` compiles everything. The tiers' switches
//! (`KILN_CACHE`, `KILN_CACHE_DIR`, `KILN_REMOTE_CACHE`...) are run-time
//! switches: turning them on or off never reruns a build script by itself.
//!
//! # What a block vouches for
//!
//! An embedded image is trusted as the program itself (a process with
//! `KILN_TRUSTED_KEYS` merges an unsigned embedded image as its own), so a
//! block embeds only what it can vouch for:
//!
//! - what it compiled;
//! - its own package's shipped image (its digests checked, and its
//!   signature when the library names its key with
//!   [`Precompile::shipped_key`]); in a signed build (`KILN_SIGNING_KEY`),
//!   only when a trusted key signed the shipped file (`KILN_TRUSTED_KEYS`, or
//!   the signing key itself): otherwise its entries are compiled, and a
//!   build that cannot compile them fails, since a signature must not vouch
//!   for what nobody checked;
//! - from the disk and remote tiers, entries this user's processes compiled
//!   in a private cache directory, and entries a trusted key signed
//!   (`KILN_TRUSTED_KEYS`; a signed build also trusts its own key). Without
//!   trusted keys that is this user's own compiles only. Anything else (a
//!   remote value received unsigned or signed by another key, an entry the
//!   disk tier received unsigned, any entry of a directory shared with
//!   `KILN_CACHE_TRUST_DIR=1`) is refused and compiled; a `cargo::warning`
//!   says how many, and the summary counts them (`N refused unverified`).
//!   The block therefore stores into the remote tier only what it signs.
//!
//! `KILN_BUILD_UNVERIFIED=1` ([`BUILD_UNVERIFIED`]) takes such entries
//! instead of compiling them (they count as `from unverified disk` or
//! `from unverified remote`): the image records which entries those are
//! ([`Provenance::UNVERIFIED_LABEL`](crate::trust::Provenance::UNVERIFIED_LABEL)), a process with `KILN_TRUSTED_KEYS`
//! refuses them as it would from the tier, and `kiln ship` refuses to ship
//! the image. A signed build ignores it. The trust variables
//! (`KILN_TRUSTED_KEYS` and the files it names, `KILN_SIGNING_KEY` and its
//! file, `KILN_CACHE_TRUST_DIR`, `KILN_BUILD_UNVERIFIED`) rerun the block
//! when they change.
//!
//! A specialization ends one of three ways:
//!
//! - **ready**: found or compiled; it goes into the image;
//! - **missing**: this machine cannot compile it (its compile, or the
//!   block, returned [`Unavailable`]: no NVRTC, no headers, another
//!   compiler release than the shipped entries'): a `cargo::warning` names
//!   each one, says why and what to do, and the others still ship;
//! - **failed**: its compile returned any other error or panicked: the
//!   library's code does not compile. The build fails, with the compiler's
//!   message (`cargo::error` lines, details on stderr), after the block ran
//!   to the end, so one build shows every failure.
//!
//! # The target, not the host
//!
//! A build script is compiled for, and runs on, the *host*: in code it
//! shares with the library, `cfg!(target_arch = ..)`, `cfg!(target_os = ..)`,
//! `cfg!(target_feature = ..)` and `std::env::consts` describe the host
//! inside the build script and the target inside the library. When the two
//! differ (cross-compiling, or `-C target-cpu` / `-C target-feature` in
//! `RUSTFLAGS`), keys or owners built from them differ between the build
//! script and the library, and every precompiled entry misses. Build them
//! from a [`Target`] instead: [`Session::target`] in the build script (read
//! from cargo's `TARGET` and `CARGO_CFG_TARGET_*` variables), and in the
//! library the same values from `cfg!`.
//!
//! # Build scripts run unoptimized
//!
//! Cargo builds build scripts (and their dependencies, kiln and the
//! compiler included) with the `build-override` profile, which in a debug
//! build is unoptimized: a compiler written in Rust then precompiles several
//! times slower than it runs in the application. Only the profile of the
//! workspace being built counts, so this is the *application's* choice, in
//! its `Cargo.toml`:
//!
//! ```toml
//! [profile.dev.build-override]
//! opt-level = 3
//! [profile.release.build-override]
//! opt-level = 3
//! ```
//!
//! A compiler loaded as a shared library (NVRTC) runs at full speed either
//! way.
//!
//! # What a run prints
//!
//! A run collects what it tells cargo into one value ([`BuildOutput`],
//! also in its [`PrecompileReport`]) and prints it once, at its end, in
//! cargo's `cargo::` syntax:
//!
//! - `cargo::rerun-if-changed=PATH` for every source the block declared with
//!   [`Session::uses_source`]; for the shipped image whenever a file has its
//!   name (used or not: a refused one may be fixed), or else its
//!   `kiln-shipped/` folder when there is one (a path that does not exist
//!   would rerun the block on every build); for the key file of
//!   `KILN_SIGNING_KEY` when it is set, and for each file
//!   `KILN_TRUSTED_KEYS` names. `KILN_SIGNING_KEY` signs the image (see
//!   [`trust`](crate::trust); an unusable key fails the build rather than
//!   write an unsigned image);
//! - `cargo::rerun-if-env-changed` for the trust variables always (so that
//!   setting one later reruns the block), and `cargo::warning` for a boolean
//!   switch set to no boolean ([`crate::env::switch`]: it keeps its
//!   default);
//! - `cargo::rerun-if-env-changed=VAR` for the variables declared with
//!   [`Session::uses_env`] and every `KILN_*` variable set now (such as
//!   `KILN_NVRTC`), except the run-time switches
//!   ([`settings::is_run_time`](crate::settings::is_run_time): the switches
//!   kiln-core and the crates linked into the build script declare run-time,
//!   [`Switch`](crate::settings::Switch)): they do not change
//!   what a build script compiles, so toggling them never rebuilds an image;
//! - one plain line per specialization with its time, and one summary line
//!   that says how many entries came from the shipped image and from each
//!   tier, how many were compiled, missing or failed, then what the backends
//!   add ([`Session::summary_note`]: kiln-cuda says which drivers and GPUs the
//!   code reaches) (cargo keeps these in
//!   the build script's output; `cargo build -vv` shows them). The summary
//!   is a `cargo::warning` when something is missing or the image is empty
//!   while the block asked for entries: a build that ships nothing never
//!   looks like success. (Cargo shows warnings of path and workspace
//!   packages only; an application that must not build without its
//!   libraries' kernels can check `kiln::init()`'s report, or the library's
//!   own error, at run time.)

mod embed;
mod output;
mod run;
mod session;
mod shipped;
mod target;
#[cfg(test)]
mod tests;
mod vouch;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Duration;

pub use embed::{
    DEFAULT_EMBED_LEVEL, EMBED, EMBED_LEVEL, ENTRY_WARN_BYTES, Embedding, IMAGE_WARN_BYTES,
};

use kiln_image::{ImageMeta, TrustedKeys};
use kiln_ship::{EXTENSION, SHIPPED_DIR};

pub use output::BuildOutput;
pub use session::{Session, Unavailable, jobs};
pub use shipped::{SHIPPED_FILE_MAX, read_shipped_file};
pub use target::Target;

use crate::Error;
use crate::registry::IMAGE_EXTENSION;
use crate::settings::{Settings, Vars};
use crate::trust::TrustPolicy;

pub use crate::env::{BUILD_UNVERIFIED, IGNORE_SHIPPED, SHIP_CANDIDATE};

/// The boolean switches a precompile block reads, each checked at the
/// start of a run: a value that is no boolean is a `cargo::warning` (and
/// the switch keeps its default; see [`crate::env::switch`]).
const BLOCK_SWITCHES: [&str; 7] = [
    crate::env::ALWAYS_COMPILE,
    IGNORE_SHIPPED,
    SHIP_CANDIDATE,
    BUILD_UNVERIFIED,
    crate::disk::config::CACHE,
    crate::disk::config::CACHE_TRUST_DIR,
    crate::trust::REMOTE_WRITE,
];

/// The variables that decide what a block may embed: changing one reruns
/// it, whatever [`crate::settings::is_run_time`] says of the others.
const TRUST_VARIABLES: [&str; 6] = [
    crate::trust::SIGNING_KEY,
    crate::trust::TRUSTED_KEYS,
    crate::disk::config::CACHE_TRUST_DIR,
    BUILD_UNVERIFIED,
    IGNORE_SHIPPED,
    SHIP_CANDIDATE,
];

/// A precompile run: the image's name, where it goes, where its directives go.
///
/// See the [module documentation](self) for what a run does and prints,
/// how the author ships the image with the library, how to see the target
/// rather than the host, and why an application should build build scripts
/// optimized (`[profile.dev.build-override] opt-level = 3`).
pub struct Precompile<'out> {
    name: String,
    out_dir: Option<PathBuf>,
    library_dir: Option<PathBuf>,
    target: Option<Target>,
    shipped_key: Option<String>,
    /// What [`Precompile::env`] gave; `None`: the process's settings.
    settings: Option<Settings>,
    output: Box<dyn Write + 'out>,
}

impl Precompile<'static> {
    /// A run writing `$OUT_DIR/<name>.kimg` and printing to stdout (where
    /// cargo reads a build script's directives), reading the process's
    /// environment, with the library at `$CARGO_MANIFEST_DIR`.
    pub fn new(name: impl Into<String>) -> Precompile<'static> {
        Precompile {
            name: name.into(),
            out_dir: None,
            library_dir: None,
            target: None,
            shipped_key: None,
            settings: None,
            output: Box::new(std::io::stdout()),
        }
    }
}

impl<'out> Precompile<'out> {
    /// Writes the image into `dir` instead of `OUT_DIR`.
    pub fn out_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.out_dir = Some(dir.into());
        self
    }

    /// The library's root (where `kiln-shipped/` and the declared sources
    /// are) instead of `CARGO_MANIFEST_DIR`.
    pub fn library_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.library_dir = Some(dir.into());
        self
    }

    /// Gives the block `target` as [`Session::target`] instead of the one
    /// cargo's variables describe (for tests, or a run outside a build
    /// script).
    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self
    }

    /// Uses the library's shipped image only if the ed25519 public key
    /// `key` (64 hex digits, as `kiln keygen` prints it) signed it: a
    /// shipped image that this key did not sign is not used (a warning
    /// says why), and what it held is compiled here, or missing.
    ///
    /// Without a key, the shipped image is trusted as the package's source
    /// code is (cargo checks the package's checksum); its digests are
    /// checked all the same.
    pub fn shipped_key(mut self, key: impl Into<String>) -> Self {
        self.shipped_key = Some(key.into());
        self
    }

    /// Reads the settings from `vars` instead of the process environment
    /// (for tests: the tiers' switches, `KILN_ALWAYS_COMPILE`,
    /// `KILN_SIGNING_KEY`, cargo's `OUT_DIR` and `TARGET`, and what the
    /// block reads with [`Session::env`]), parsed once, now.
    pub fn env(mut self, vars: Vars) -> Self {
        self.settings = Some(Settings::from_vars(vars));
        self
    }

    /// The settings the run reads: what [`Precompile::env`] gave, else the
    /// process's ([`Settings::process`], parsed once per build script).
    fn settings(&self) -> &Settings {
        self.settings
            .as_ref()
            .unwrap_or_else(|| Settings::process())
    }

    /// Sends the `cargo::` directives and progress lines to `output` instead
    /// of stdout.
    pub fn output<'w>(self, output: impl Write + 'w) -> Precompile<'w>
    where
        'out: 'w,
    {
        Precompile {
            name: self.name,
            out_dir: self.out_dir,
            library_dir: self.library_dir,
            target: self.target,
            shipped_key: self.shipped_key,
            settings: self.settings,
            output: Box::new(output),
        }
    }

    /// The path of the image: `<out_dir>/<name>.kimg`.
    ///
    /// # Errors
    /// [`Error::OutDirUnset`] when no directory was given and `OUT_DIR` is
    /// not set (outside a build script).
    pub fn image_path(&self) -> Result<PathBuf, Error> {
        let dir = match &self.out_dir {
            Some(dir) => dir.clone(),
            None => (self.settings().var("OUT_DIR"))
                .map(PathBuf::from)
                .ok_or(Error::OutDirUnset)?,
        };
        Ok(dir.join(format!("{}.{IMAGE_EXTENSION}", self.name)))
    }

    /// The library's shipped image: `<library>/kiln-shipped/<name>.kship`.
    pub fn shipped_path(&self) -> PathBuf {
        self.library_root()
            .join(SHIPPED_DIR)
            .join(format!("{}.{EXTENSION}", self.name))
    }

    fn library_root(&self) -> PathBuf {
        self.library_dir
            .clone()
            .or_else(|| self.settings().var("CARGO_MANIFEST_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."))
    }

    /// Image metadata: the producing crate and the image name, nothing that
    /// changes from one build to the next.
    fn meta(&self) -> ImageMeta {
        let var = |name: &str| self.settings().var(name).and_then(|v| v.into_string().ok());
        let mut meta = ImageMeta {
            producer_name: var("CARGO_PKG_NAME").unwrap_or_else(|| self.name.clone()),
            producer_version: var("CARGO_PKG_VERSION").unwrap_or_default(),
            ..ImageMeta::default()
        };
        meta.labels.insert("image".to_owned(), self.name.clone());
        meta
    }
}

/// How many failures get a `cargo::error` line of their own (all of them
/// are on stderr, with the compiler's whole message).
const ERRORS_SHOWN: usize = 10;

/// The label of what the block itself returned.
const BLOCK: &str = "the precompile block";

/// What a precompile run did.
#[derive(Debug)]
#[non_exhaustive]
pub struct PrecompileReport {
    /// The image written.
    pub path: PathBuf,
    /// How many entries it holds.
    pub entries: usize,
    /// Each specialization ready (found or compiled), with the time it took.
    pub ready: Vec<(String, Duration)>,
    /// How many compiles ran (the rest came from the tiers).
    pub compiles: u64,
    /// Each tier (the shipped image first, then disk and remote) and how
    /// many entries it gave.
    pub from_tiers: Vec<(String, u64)>,
    /// Each specialization this machine could not compile, with why.
    pub missing: Vec<(String, String)>,
    /// Each specialization that failed, with the reason (the run returned
    /// an error then; this is for callers that catch it).
    pub failed: Vec<(String, String)>,
    /// Why this build's image must not be shipped, if it must not.
    pub not_shippable: Option<String>,
    /// How many of its entries were taken unverified from a tier
    /// ([`BUILD_UNVERIFIED`]), recorded as such in the image.
    pub unverified: usize,
    /// What the run printed for cargo (directives, warnings, the summary).
    pub output: BuildOutput,
}

impl PrecompileReport {
    /// How many entries the tier named `tier` gave (`shipped`, `disk`,
    /// `remote`).
    pub fn from_tier(&self, tier: &str) -> u64 {
        self.from_tiers
            .iter()
            .filter(|(name, _)| name == tier)
            .map(|(_, hits)| hits)
            .sum()
    }
}

/// The summary line's counts.
struct Summary<'a> {
    entries: usize,
    from_tiers: &'a [(String, u64)],
    compiles: u64,
    missing: usize,
    failed: usize,
    /// Tier entries not used because the block could not vouch for them.
    refused: u64,
}

impl std::fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (", count(self.entries, "entry", "entries"))?;
        for (tier, hits) in self.from_tiers {
            write!(f, "{hits} from {tier}, ")?;
        }
        write!(
            f,
            "{} compiled, {} missing, {} failed",
            self.compiles, self.missing, self.failed
        )?;
        if self.refused > 0 {
            write!(f, ", {} refused unverified", self.refused)?;
        }
        f.write_str(")")
    }
}

/// The trust policy of the block's disk and remote tiers: what the block
/// can vouch for. An embedded image is trusted as the program itself, so
/// the block takes from a tier only entries this user compiled (in a
/// private cache directory) or a trusted key signed: trusted keys are
/// always set, `KILN_TRUSTED_KEYS`'s or none, and when the image is signed
/// (`KILN_SIGNING_KEY`) the signing key's own public key joins them. So the
/// tiers refuse what was received unsigned (from a shared directory, an
/// unsigned remote write, another user), and the block compiles it. It
/// follows that a block stores its compiles into the remote tier only
/// signed.
fn vouching_policy(trust: &TrustPolicy) -> TrustPolicy {
    let own = trust
        .signing_key()
        .map(|key| TrustedKeys::new([key.public_key()]))
        .unwrap_or_default();
    trust.clone().with_trusted_keys(own)
}

/// What is wrong with `KILN_TRUSTED_KEYS`, one line per problem: set but
/// naming no file, or a file that cannot be used (each trusts no key: the
/// block then takes fewer signed entries, never more).
fn trusted_keys_warnings(lookup: &dyn Fn(&str) -> Option<OsString>) -> Vec<String> {
    let Some(value) = lookup(crate::trust::TRUSTED_KEYS) else {
        return Vec::new();
    };
    if trusted_key_files(lookup).is_empty() {
        return vec![format!(
            "{} is set but names no file: no key is trusted",
            crate::trust::TRUSTED_KEYS
        )];
    }
    crate::trust::read_trusted_keys(&value)
        .1
        .into_iter()
        .map(|error| one_line(&error.to_string()))
        .collect()
}

/// The files `KILN_TRUSTED_KEYS` names: a block reruns when one changes.
fn trusted_key_files(lookup: &dyn Fn(&str) -> Option<OsString>) -> Vec<PathBuf> {
    lookup(crate::trust::TRUSTED_KEYS)
        .map(|value| {
            std::env::split_paths(&value)
                .filter(|path| !path.as_os_str().is_empty())
                .collect()
        })
        .unwrap_or_default()
}

/// The warnings for missing specializations: one line per reason, naming
/// every specialization it left out, and why shipped entries no longer
/// cover them.
fn missing_lines(
    missing: &[(String, String)],
    shipped: Option<&Path>,
    changed: &[String],
) -> Vec<String> {
    let mut by_reason: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for (label, why) in missing {
        by_reason.entry(why.as_str()).or_default().push(label);
    }
    let mut lines: Vec<String> = by_reason
        .into_iter()
        .map(|(why, labels)| {
            format!(
                "not precompiled ({}): {}; {}",
                labels.len(),
                labels.join(", "),
                one_line(why)
            )
        })
        .collect();
    if !missing.is_empty() {
        lines.push(match shipped {
            Some(path) if changed.is_empty() => format!(
                "the shipped image {} does not hold them: build where the toolchain is and run \
                 `kiln ship` to ship them",
                path.display()
            ),
            Some(path) => format!(
                "the shipped image {} does not hold them ({} changed since it was shipped): \
                 build where the toolchain is and run `kiln ship`",
                path.display(),
                changed.join(", ")
            ),
            None => "this library ships no image: its author builds where the toolchain is and \
                     runs `kiln ship`"
                .to_owned(),
        });
    }
    lines
}

/// The variables whose change must rerun the build script: `declared`, and
/// of the variables `set` now, every `KILN_*` one (a backend's, such as
/// `KILN_NVRTC`) except the run-time switches ([`crate::settings::is_run_time`]);
/// sorted.
fn rerun_env_vars(
    declared: BTreeSet<String>,
    set: impl IntoIterator<Item = String>,
) -> BTreeSet<String> {
    let mut vars = declared;
    vars.extend(
        set.into_iter()
            .filter(|name| name.starts_with("KILN_") && !crate::settings::is_run_time(name)),
    );
    vars
}

/// `n` and the noun that goes with it: "1 entry", "2 entries".
fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// `text` on one line: cargo shows only the first line of a warning.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first non-empty line of `text`.
fn first_line(text: &str) -> &str {
    text.lines().find(|l| !l.trim().is_empty()).unwrap_or(text)
}
