//! Build-script helpers: precompile a library's common specializations into
//! an image in `OUT_DIR`, for `include_image!` to embed.
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
//! # What a run does
//!
//! [`Precompile::run`] gives the block a fresh [`Cache`] (so that nothing
//! loaded from another image or a disk cache hides an entry from the
//! delta), takes a snapshot, runs the block, and writes the delta (the
//! unbounded entries compiled by the block) as a deterministic image to
//! `$OUT_DIR/<name>.kimg`, atomically. It prints:
//!
//! - `cargo:rerun-if-changed=PATH` for every source the block declared with
//!   [`Session::uses_source`], and for the key file of `KILN_SIGNING_KEY`
//!   when it is set (and `rerun-if-env-changed=KILN_SIGNING_KEY` always,
//!   so that setting it later signs the image): the image is then signed
//!   with that key (see
//!   [`trust`](crate::trust); an unusable key fails the build rather than
//!   write an unsigned image);
//! - `cargo:rerun-if-env-changed=VAR` for the variables declared with
//!   [`Session::uses_env`] and every `KILN_*` variable set now (such as
//!   `KILN_NVRTC`), except the run-time switches
//!   ([`env::is_run_time`](crate::env::is_run_time): those of
//!   [`env::RUN_TIME`](crate::env::RUN_TIME) and those other crates register
//!   as [`RunTimeSwitch`](crate::registry::RunTimeSwitch)): they do not change
//!   what a build script compiles, so toggling them never rebuilds an image;
//! - `cargo:warning=` lines for each specialization that failed (the build
//!   goes on without it: the application compiles it at run time), or for a
//!   block that stopped early;
//! - (with [`Session::specialize_all`], which compiles specializations on
//!   [`jobs`] threads, cargo's `NUM_JOBS`, the lines come in the order the
//!   specializations were given, once all are done);
//! - one plain line per compiled specialization with its time, and one
//!   summary line (cargo keeps these in the build script's output;
//!   `cargo build -vv` shows them). The summary is a `cargo:warning` too when
//!   something failed, so that a build that left work for run time says so;
//!   a build where everything compiled prints no warning.

use std::collections::BTreeSet;
use std::fmt::Display;
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use kiln_image::ImageMeta;

use crate::registry::IMAGE_EXTENSION;
use crate::{BoxError, Cache, Error};

/// A precompile run: the image's name, where it goes, where its directives go.
///
/// See the [module documentation](self) for what a run prints, how to see
/// the target rather than the host, and why an application should build
/// build scripts optimized (`[profile.dev.build-override] opt-level = 3`).
pub struct Precompile<'out> {
    name: String,
    out_dir: Option<PathBuf>,
    target: Option<Target>,
    output: Box<dyn Write + 'out>,
}

impl Precompile<'static> {
    /// A run writing `$OUT_DIR/<name>.kimg` and printing to stdout (where
    /// cargo reads a build script's directives).
    pub fn new(name: impl Into<String>) -> Precompile<'static> {
        Precompile {
            name: name.into(),
            out_dir: None,
            target: None,
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

    /// Gives the block `target` as [`Session::target`] instead of the one
    /// cargo's variables describe (for tests, or a run outside a build
    /// script).
    pub fn target(mut self, target: Target) -> Self {
        self.target = Some(target);
        self
    }

    /// Sends the `cargo:` directives and progress lines to `output` instead
    /// of stdout.
    pub fn output<'w>(self, output: impl Write + 'w) -> Precompile<'w> {
        Precompile {
            name: self.name,
            out_dir: self.out_dir,
            target: self.target,
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
            None => std::env::var_os("OUT_DIR")
                .map(PathBuf::from)
                .ok_or(Error::OutDirUnset)?,
        };
        Ok(dir.join(format!("{}.{IMAGE_EXTENSION}", self.name)))
    }

    /// Runs `block` on a fresh cache, then writes the entries it compiled
    /// into the image and prints the `cargo:` directives.
    ///
    /// Compile problems never fail the build: a specialization that fails
    /// inside [`Session::specialize`] is a warning, and so is an error
    /// returned by `block` (say, no compiler on this machine). The image is
    /// written in every case, with what was compiled, so that
    /// `include_image!` always finds it.
    ///
    /// `block` returns [`BoxError`], so `?` works on any error in it and
    /// its final `Ok(())` needs no annotation.
    ///
    /// # Errors
    /// [`Error::OutDirUnset`]; [`Error::Image`] when the image cannot be
    /// written; [`Error::BuildOutput`] when the directives cannot be printed.
    pub fn run<F>(self, block: F) -> Result<PrecompileReport, Error>
    where
        F: FnOnce(&mut Session<'_>) -> Result<(), BoxError>,
    {
        let path = self.image_path()?;
        let meta = self.meta();
        let target = self.target.clone().or_else(Target::from_env);
        let started = Instant::now();
        // No memory cap: every entry the block compiles must reach the
        // image (the snapshot would pin them anyway).
        let cache = Cache::with_config(crate::CacheConfig::default().memory_max_bytes(None));
        let snapshot = cache.snapshot();
        let mut session = Session {
            cache: &cache,
            target: target.as_ref(),
            out: Printer::new(self.output),
            sources: BTreeSet::new(),
            env: BTreeSet::new(),
            compiled: Vec::new(),
            failed: Vec::new(),
        };
        let stopped_early = block(&mut session).err();
        if let Some(err) = &stopped_early {
            let err = one_line(&err.to_string());
            session.out.line(format_args!(
                "cargo:warning=kiln: precompiling {} stopped early ({err}); the image holds what \
                 was compiled before",
                self.name
            ));
        }
        let Session {
            mut out,
            sources,
            env,
            compiled,
            failed,
            ..
        } = session;

        let delta = cache.delta(&snapshot);
        let entries = delta.len();
        let lookup = |name: &str| std::env::var_os(name);
        let bytes = crate::trust::sign_if_configured_with(lookup, delta.to_bytes(meta)?)?;
        kiln_image::write_file_atomic(&path, &bytes)?;

        for source in &sources {
            out.line(format_args!("cargo:rerun-if-changed={}", source.display()));
        }
        if let Some(key) = crate::trust::signing_key_path(lookup) {
            // The key's content, not only the variable, changes the image.
            out.line(format_args!("cargo:rerun-if-changed={}", key.display()));
        }
        let set = std::env::vars_os().filter_map(|(name, _)| name.into_string().ok());
        // Watched set or not: setting it later must sign the image.
        let mut env = env;
        env.insert(crate::trust::SIGNING_KEY.to_owned());
        for var in rerun_env_vars(env, set) {
            out.line(format_args!("cargo:rerun-if-env-changed={var}"));
        }
        // A warning only when part of the block is left for run time.
        let prefix = if failed.is_empty() && stopped_early.is_none() {
            ""
        } else {
            "cargo:warning="
        };
        out.line(format_args!(
            "{prefix}kiln: {} ({} compiled, {} failed) into {} in {:.1?}",
            count(entries, "entry", "entries"),
            count(compiled.len(), "specialization", "specializations"),
            failed.len(),
            path.display(),
            started.elapsed(),
        ));
        out.finish()?;
        Ok(PrecompileReport {
            path,
            entries,
            compiled,
            failed,
        })
    }

    /// Image metadata: the producing crate and the image name, nothing that
    /// changes from one build to the next.
    fn meta(&self) -> ImageMeta {
        let mut meta = ImageMeta {
            producer_name: std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| self.name.clone()),
            producer_version: std::env::var("CARGO_PKG_VERSION").unwrap_or_default(),
            ..ImageMeta::default()
        };
        meta.labels.insert("image".to_owned(), self.name.clone());
        meta
    }
}

/// What a precompile block sees: the cache to compile into, the target,
/// and ways to declare what the build depends on.
pub struct Session<'a> {
    cache: &'a Cache,
    target: Option<&'a Target>,
    out: Printer<'a>,
    sources: BTreeSet<PathBuf>,
    env: BTreeSet<String>,
    compiled: Vec<(String, Duration)>,
    failed: Vec<(String, String)>,
}

impl<'a> Session<'a> {
    /// The cache the block compiles into; what it compiles goes into the image.
    pub fn cache(&self) -> &'a Cache {
        self.cache
    }

    /// The platform the library is being built for: cargo's `TARGET` and
    /// `CARGO_CFG_*` variables (or what [`Precompile::target`] gave). Build
    /// keys and owners from it, not from `cfg!(target_*)`, which in a build
    /// script describes the host (see the [module documentation](self)).
    /// `None` outside a build script when no target was given.
    pub fn target(&self) -> Option<&'a Target> {
        self.target
    }

    /// Declares that the compiled code depends on `path` (a file or a
    /// directory, relative to the crate root): cargo reruns the build script
    /// when it changes.
    pub fn uses_source(&mut self, path: impl AsRef<Path>) {
        self.sources.insert(path.as_ref().to_path_buf());
    }

    /// Declares that the compiled code depends on the environment variable
    /// `name`: cargo reruns the build script when it changes.
    pub fn uses_env(&mut self, name: impl Into<String>) {
        self.env.insert(name.into());
    }

    /// Compiles one specialization, called `label` in progress lines.
    ///
    /// `compile` gets the block's cache and may return what borrows from it
    /// (a [`Hit`](crate::Hit)), or any other value; any error type that
    /// displays. A failure (an error or a panic) is printed as a
    /// `cargo:warning` and the build goes on; the result is `None` then.
    pub fn specialize<T, E: Display>(
        &mut self,
        label: &str,
        compile: impl FnOnce(&'a Cache) -> Result<T, E>,
    ) -> Option<T> {
        let (elapsed, outcome) = run_one(self.cache, compile);
        self.finish(label, elapsed, outcome)
    }

    /// Compiles every specialization of `work` (a label and a compile each) on up
    /// to `jobs` threads (see [`jobs`]), each as [`Session::specialize`] does, and
    /// reports them in the order given. The image does not depend on the order in
    /// which they finish: its entries are sorted. As with [`Session::specialize`],
    /// a compile may return what borrows from the block's cache.
    pub fn specialize_all<T, E, F>(&mut self, jobs: usize, work: Vec<(String, F)>) -> Vec<Option<T>>
    where
        T: Send,
        E: Display + Send,
        F: FnOnce(&'a Cache) -> Result<T, E> + Send,
    {
        let cache = self.cache;
        let (labels, compiles): (Vec<String>, Vec<F>) = work.into_iter().unzip();
        let queue: Vec<Mutex<Option<F>>> =
            compiles.into_iter().map(|f| Mutex::new(Some(f))).collect();
        let done: Vec<Mutex<Option<Finished<T>>>> =
            queue.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let threads = jobs.clamp(1, queue.len().max(1));
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let index = next.fetch_add(1, Ordering::Relaxed);
                        let Some(slot) = queue.get(index) else { break };
                        let compile = slot.lock().unwrap_or_else(PoisonError::into_inner).take();
                        let Some(compile) = compile else { continue };
                        let (elapsed, outcome) = run_one(cache, compile);
                        *done[index].lock().unwrap_or_else(PoisonError::into_inner) =
                            Some((elapsed, outcome));
                    }
                });
            }
        });
        labels
            .iter()
            .zip(done)
            .map(|(label, result)| {
                let result = result.into_inner().unwrap_or_else(PoisonError::into_inner);
                let (elapsed, outcome) = result.unwrap_or_else(|| {
                    (Duration::ZERO, Err("its worker did not run it".to_owned()))
                });
                self.finish(label, elapsed, outcome)
            })
            .collect()
    }

    /// Prints and records the outcome of one specialization.
    fn finish<T>(
        &mut self,
        label: &str,
        elapsed: Duration,
        outcome: Result<T, String>,
    ) -> Option<T> {
        match outcome {
            Ok(value) => {
                self.out
                    .line(format_args!("kiln: compiled {label} in {elapsed:.1?}"));
                self.compiled.push((label.to_owned(), elapsed));
                Some(value)
            }
            Err(failure) => {
                self.out.line(format_args!(
                    "cargo:warning=kiln: {label} not precompiled ({}); it will compile at run time",
                    one_line(&failure)
                ));
                self.failed.push((label.to_owned(), failure));
                None
            }
        }
    }
}

/// How long one compile took, and its value or why it failed.
type Finished<T> = (Duration, Result<T, String>);

/// Runs one compile, catching a panic: its time and its value or failure.
fn run_one<'c, T, E: Display>(
    cache: &'c Cache,
    compile: impl FnOnce(&'c Cache) -> Result<T, E>,
) -> Finished<T> {
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(|| compile(cache)));
    let elapsed = started.elapsed();
    let outcome = match outcome {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(err)) => Err(err.to_string()),
        Err(panic) => Err(format!("panicked: {}", panic_message(panic.as_ref()))),
    };
    (elapsed, outcome)
}

/// How many compiles a build script runs at once: cargo's `NUM_JOBS` (its `-j`),
/// else the machine's parallelism; at least 1.
pub fn jobs() -> usize {
    std::env::var("NUM_JOBS")
        .ok()
        .and_then(|n| n.trim().parse::<usize>().ok())
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1)
        .max(1)
}

/// Prints lines to the build script's output, keeping the first write error
/// for the end of the run.
struct Printer<'a> {
    output: Box<dyn Write + 'a>,
    error: Option<std::io::Error>,
}

impl<'a> Printer<'a> {
    fn new(output: Box<dyn Write + 'a>) -> Self {
        Printer {
            output,
            error: None,
        }
    }

    fn line(&mut self, line: std::fmt::Arguments<'_>) {
        if self.error.is_none()
            && let Err(err) = writeln!(self.output, "{line}")
        {
            self.error = Some(err);
        }
    }

    fn finish(mut self) -> Result<(), Error> {
        match self.error.take() {
            Some(err) => Err(Error::BuildOutput(err)),
            None => self.output.flush().map_err(Error::BuildOutput),
        }
    }
}

/// What a precompile run did.
#[derive(Debug)]
#[non_exhaustive]
pub struct PrecompileReport {
    /// The image written.
    pub path: PathBuf,
    /// How many entries it holds.
    pub entries: usize,
    /// Each specialization compiled, with the time it took.
    pub compiled: Vec<(String, Duration)>,
    /// Each specialization that failed, with the reason.
    pub failed: Vec<(String, String)>,
}

/// The platform a build script builds for, from cargo's variables: the
/// triple (`TARGET`) and every `CARGO_CFG_*` value (`target_arch`,
/// `target_os`, `target_feature`, `target_pointer_width`, `unix`, ...).
///
/// In a build script `cfg!(target_arch = ..)` describes the host the script
/// runs on; this describes the target, which is what the library's
/// `cfg!(target_arch = ..)` sees.
///
/// ```
/// use kiln_core::build::Target;
///
/// let vars = [
///     ("TARGET", "aarch64-unknown-linux-gnu"),
///     ("CARGO_CFG_TARGET_ARCH", "aarch64"),
///     ("CARGO_CFG_TARGET_OS", "linux"),
///     ("CARGO_CFG_TARGET_FEATURE", "neon,sve"),
///     ("CARGO_CFG_UNIX", ""),
///     ("PATH", "/usr/bin"),
/// ];
/// let target = Target::from_vars(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
/// assert_eq!(target.triple(), "aarch64-unknown-linux-gnu");
/// assert_eq!((target.arch(), target.os()), ("aarch64", "linux"));
/// assert!(target.has_feature("sve") && !target.has_feature("avx2"));
/// assert_eq!(target.cfg("unix"), Some(&[][..]));
/// assert_eq!(target.cfg("windows"), None);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    triple: String,
    /// `CARGO_CFG_<NAME>` as `name` (lowercase) → its comma-separated values.
    cfg: std::collections::BTreeMap<String, Vec<String>>,
}

impl Target {
    /// The target cargo gives a build script, from the process environment;
    /// `None` outside a build script (`TARGET` unset).
    pub fn from_env() -> Option<Target> {
        Target::from_vars(std::env::vars_os().filter_map(|(name, value)| {
            Some((name.into_string().ok()?, value.into_string().ok()?))
        }))
    }

    /// The target described by `vars` (name, value pairs as in a build
    /// script's environment): `TARGET` and the `CARGO_CFG_*` variables;
    /// `None` without `TARGET`.
    pub fn from_vars(vars: impl IntoIterator<Item = (String, String)>) -> Option<Target> {
        let mut triple = None;
        let mut cfg = std::collections::BTreeMap::new();
        for (name, value) in vars {
            if name == "TARGET" {
                triple = Some(value);
            } else if let Some(key) = name.strip_prefix("CARGO_CFG_") {
                let values = value
                    .split(',')
                    .filter(|v| !v.is_empty())
                    .map(str::to_owned)
                    .collect();
                cfg.insert(key.to_ascii_lowercase(), values);
            }
        }
        Some(Target {
            triple: triple?,
            cfg,
        })
    }

    /// The target triple, e.g. `x86_64-unknown-linux-gnu`.
    pub fn triple(&self) -> &str {
        &self.triple
    }

    /// The values of the `cfg` `name` (`"target_arch"`, `"target_feature"`,
    /// `"unix"`, ...): `None` when it is not set, an empty slice for a `cfg`
    /// without values (`unix`).
    pub fn cfg(&self, name: &str) -> Option<&[String]> {
        self.cfg.get(name).map(Vec::as_slice)
    }

    /// `target_arch` (`x86_64`, `aarch64`, `nvptx64`, ...), empty if unknown.
    pub fn arch(&self) -> &str {
        self.first("target_arch")
    }

    /// `target_os` (`linux`, `macos`, `windows`, `none`, ...), empty if unknown.
    pub fn os(&self) -> &str {
        self.first("target_os")
    }

    /// Whether `target_feature` includes `feature` (`avx2`, `neon`, ...), as
    /// enabled for this build (`-C target-cpu`, `-C target-feature`).
    pub fn has_feature(&self, feature: &str) -> bool {
        self.cfg("target_feature")
            .is_some_and(|features| features.iter().any(|f| f == feature))
    }

    fn first(&self, name: &str) -> &str {
        self.cfg(name)
            .and_then(|values| values.first())
            .map_or("", String::as_str)
    }
}

/// The variables whose change must rerun the build script: `declared`, and
/// of the variables `set` now, every `KILN_*` one (a backend's, such as
/// `KILN_NVRTC`) except the run-time switches ([`crate::env::is_run_time`]);
/// sorted.
fn rerun_env_vars(
    declared: BTreeSet<String>,
    set: impl IntoIterator<Item = String>,
) -> BTreeSet<String> {
    let mut vars = declared;
    vars.extend(
        set.into_iter()
            .filter(|name| name.starts_with("KILN_") && !crate::env::is_run_time(name)),
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

fn panic_message(panic: &(dyn std::any::Any + Send)) -> &str {
    panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Artifact, ArtifactKind, Compiled, KeyBuilder, Owner};
    use kiln_image::{Image, Verification};

    /// Compiles `name` into `cache`: its artifact is the name's bytes.
    fn compile(cache: &Cache, name: &str) -> Result<(), Error> {
        let owner = Owner::new("test-compiler", "1.0", "test-target", Vec::<String>::new())?;
        let key = KeyBuilder::new("kiln-core build tests", 1)
            .str("name", name)
            .finish();
        cache.get_or_compile(&owner, &key, || {
            Ok(Compiled::new(name).artifact(Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![name.to_owned()],
                bytes: name.as_bytes().to_vec(),
            }))
        })?;
        Ok(())
    }

    fn run_block(dir: &Path, output: &mut Vec<u8>) -> PrecompileReport {
        Precompile::new("demo")
            .out_dir(dir)
            .output(output)
            .run(|session| {
                session.uses_source("src/kernels.rs");
                session.uses_env("DEMO_ARCH");
                session.specialize("a", |cache| compile(cache, "a"));
                session.specialize("bad", |_| Err::<(), _>("no such type\nsecond line"));
                session.specialize("b", |cache| compile(cache, "b"));
                session.specialize("panics", |_| -> Result<(), Error> {
                    panic!("compiler crashed")
                });
                Ok(())
            })
            .unwrap()
    }

    #[test]
    fn the_block_becomes_an_image_and_failures_become_warnings() {
        let dir = tempfile::tempdir().unwrap();
        let mut output = Vec::new();
        let report = run_block(dir.path(), &mut output);
        let output = String::from_utf8(output).unwrap();
        let lines: Vec<&str> = output.lines().collect();

        assert_eq!(report.path, dir.path().join("demo.kimg"));
        assert_eq!(report.entries, 2);
        let compiled: Vec<&str> = report
            .compiled
            .iter()
            .map(|(label, _)| label.as_str())
            .collect();
        assert_eq!(compiled, ["a", "b"]);
        let failed: Vec<&str> = report
            .failed
            .iter()
            .map(|(label, _)| label.as_str())
            .collect();
        assert_eq!(failed, ["bad", "panics"]);

        for expected in [
            "cargo:rerun-if-changed=src/kernels.rs",
            "cargo:rerun-if-env-changed=DEMO_ARCH",
            "cargo:rerun-if-env-changed=KILN_SIGNING_KEY",
            "cargo:warning=kiln: bad not precompiled (no such type second line); it will compile at run time",
            "cargo:warning=kiln: panics not precompiled (panicked: compiler crashed); it will compile at run time",
        ] {
            assert!(
                lines.contains(&expected),
                "missing {expected:?} in\n{output}"
            );
        }
        assert!(
            lines.iter().any(|l| l.starts_with("kiln: compiled a in ")),
            "{output}"
        );
        assert!(
            lines.last().unwrap().starts_with(
                "cargo:warning=kiln: 2 entries (2 specializations compiled, 2 failed)"
            ),
            "{output}"
        );

        let image = Image::open(&report.path, Verification::Full).unwrap();
        let mut names: Vec<String> = (0..image.len())
            .map(|i| image.entry(i).unwrap().name().to_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["a", "b"]);
    }

    #[test]
    fn a_block_where_everything_compiled_prints_no_warning() {
        let dir = tempfile::tempdir().unwrap();
        let mut output = Vec::new();
        let report = Precompile::new("clean")
            .out_dir(dir.path())
            .output(&mut output)
            .run(|session| {
                session.specialize("a", |cache| compile(cache, "a"));
                Ok(())
            })
            .unwrap();
        let output = String::from_utf8(output).unwrap();
        assert_eq!(report.entries, 1);
        assert!(!output.contains("cargo:warning"), "{output}");
        assert!(
            output
                .lines()
                .last()
                .unwrap()
                .starts_with("kiln: 1 entry (1 specialization compiled, 0 failed) into "),
            "{output}"
        );
    }

    #[test]
    fn without_a_compiler_the_image_is_empty_but_valid() {
        let dir = tempfile::tempdir().unwrap();
        let report = Precompile::new("none")
            .out_dir(dir.path())
            .output(std::io::sink())
            .run(|_| Err("NVRTC not found".into()))
            .unwrap();
        assert_eq!(report.entries, 0);
        assert!(
            Image::open(&report.path, Verification::Full)
                .unwrap()
                .is_empty()
        );
    }

    inventory::submit! { crate::registry::RunTimeSwitch::new("KILN_TEST_BACKEND_STRICT") }

    #[test]
    fn the_block_sees_the_target_and_keeps_what_borrows_from_its_cache() {
        let dir = tempfile::tempdir().unwrap();
        let vars = [
            ("TARGET", "riscv64gc-unknown-linux-gnu"),
            ("CARGO_CFG_TARGET_ARCH", "riscv64"),
            ("CARGO_CFG_TARGET_FEATURE", "a,c,d,f,m"),
        ];
        let target = Target::from_vars(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
        let mut seen = None;
        Precompile::new("target")
            .out_dir(dir.path())
            .target(target)
            .output(std::io::sink())
            .run(|session| {
                let arch = session.target().map(|t| t.arch().to_owned());
                // A hit borrows from the block's cache: it can be returned.
                let hit = session.specialize("a", |cache| {
                    compile(cache, "a")?;
                    let owner = Owner::new("test-compiler", "1.0", "test-target", [""; 0])?;
                    let key = KeyBuilder::new("kiln-core build tests", 1)
                        .str("name", "a")
                        .finish();
                    cache.get_or_compile(&owner, &key, || Err("compiled above".into()))
                });
                seen = Some((arch, hit.map(|h| h.name().to_owned())));
                Ok(())
            })
            .unwrap();
        assert_eq!(
            seen,
            Some((Some("riscv64".to_owned()), Some("a".to_owned())))
        );
    }

    #[test]
    fn reruns_follow_declared_and_backend_variables_not_run_time_switches() {
        let declared = BTreeSet::from(["DEMO_ARCH".to_owned()]);
        let set = [
            "KILN_NVRTC",
            "KILN_DISABLE",
            "KILN_LOG",
            "KILN_TEST_BACKEND_STRICT",
            "KILN_TEST_BACKEND_OTHER",
            "PATH",
        ]
        .map(str::to_owned);
        let vars: Vec<String> = rerun_env_vars(declared, set).into_iter().collect();
        assert_eq!(
            vars,
            ["DEMO_ARCH", "KILN_NVRTC", "KILN_TEST_BACKEND_OTHER"],
            "a registered run-time switch is left out like kiln-core's own"
        );
    }

    #[test]
    fn the_same_block_writes_the_same_bytes() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        let a = run_block(first.path(), &mut Vec::new());
        let b = run_block(second.path(), &mut Vec::new());
        assert_eq!(
            std::fs::read(a.path).unwrap(),
            std::fs::read(b.path).unwrap()
        );
    }

    /// One compile of a test block.
    type Work = Box<dyn FnOnce(&Cache) -> Result<(), Error> + Send>;

    #[test]
    fn specializations_compiled_in_parallel_write_the_image_of_a_sequential_run() {
        let labels = ["a", "b", "c", "bad", "d", "panics", "e"];
        let run = |jobs: usize, dir: &Path| {
            let mut output = Vec::new();
            let report = Precompile::new("parallel")
                .out_dir(dir)
                .output(&mut output)
                .run(|session| {
                    let work: Vec<(String, Work)> = labels
                        .iter()
                        .map(|&label| {
                            let compile: Work = match label {
                                "bad" => Box::new(|_| Err(Error::OutDirUnset)),
                                "panics" => Box::new(|_| panic!("compiler crashed")),
                                _ => Box::new(move |cache| compile(cache, label)),
                            };
                            (label.to_owned(), compile)
                        })
                        .collect();
                    let results = session.specialize_all(jobs, work);
                    assert_eq!(results.iter().filter(|r| r.is_some()).count(), 5);
                    Ok(())
                })
                .unwrap();
            (report, String::from_utf8(output).unwrap())
        };
        let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let (sequential, _) = run(1, one.path());
        let (parallel, output) = run(4, two.path());
        assert_eq!(
            std::fs::read(&sequential.path).unwrap(),
            std::fs::read(&parallel.path).unwrap()
        );
        let compiled: Vec<&str> = parallel.compiled.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(
            compiled,
            ["a", "b", "c", "d", "e"],
            "reported in the order given"
        );
        let failed: Vec<&str> = parallel.failed.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(failed, ["bad", "panics"]);
        assert!(
            output.contains(
                "cargo:warning=kiln: panics not precompiled (panicked: compiler crashed)"
            ),
            "{output}"
        );
    }

    #[test]
    fn a_block_that_stops_early_still_writes_what_it_compiled() {
        let dir = tempfile::tempdir().unwrap();
        let mut output = Vec::new();
        let report = Precompile::new("early")
            .out_dir(dir.path())
            .output(&mut output)
            .run(|session| {
                session.specialize("a", |cache| compile(cache, "a"));
                Err("NVRTC not found".into())
            })
            .unwrap();
        let output = String::from_utf8(output).unwrap();
        assert!(
            output
                .contains("cargo:warning=kiln: precompiling early stopped early (NVRTC not found)"),
            "{output}"
        );
        assert!(
            output
                .lines()
                .last()
                .unwrap()
                .starts_with("cargo:warning=kiln: 1 entry (1 specialization compiled, 0 failed)"),
            "{output}"
        );
        assert_eq!(report.entries, 1);
        assert_eq!(
            Image::open(&report.path, Verification::Full).unwrap().len(),
            1
        );
    }
}
