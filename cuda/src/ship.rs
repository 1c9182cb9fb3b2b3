//! The build side of a kernel library: every specialization for every target arch,
//! taken from the library's shipped image (or the disk and remote tiers) or compiled,
//! in parallel, into the precompile block's cache; and the toolchain they are keyed by.
//!
//! ```no_run
//! // build.rs of a kernel library; `catalogue.rs` is shared with the library by #[path]
//! # mod catalogue {
//! #     use kiln_cuda::{Arch, KernelRequest, Toolchain};
//! #     #[derive(Debug)] pub struct Spec;
//! #     pub fn common() -> Vec<Spec> { vec![Spec] }
//! #     pub fn request(_: &Spec, _: &Toolchain, arch: Arch) -> Result<KernelRequest, kiln_cuda::Error> {
//! #         Ok(KernelRequest::new("k", "extern \"C\" __global__ void k() {}", arch).name_expression("k"))
//! #     }
//! # }
//! use kiln_core::build::Precompile;
//! use kiln_cuda::ShipPlan;
//!
//! fn main() -> Result<(), kiln_cuda::Error> {
//!     let mut plan = ShipPlan::parse("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120")?;
//!     Precompile::new("my-kernels").run(|session| {
//!         session.uses_source("src/catalogue.rs");
//!         Ok(plan.precompile(session, &catalogue::common(), catalogue::request)?)
//!     })?;
//!     // Always printed (an empty record when nothing could be shipped): the library
//!     // reads it with env!("KILN_CUDA_BUILD").
//!     println!("{}", plan.record().cargo_directive());
//!     Ok(())
//! }
//! ```
//!
//! Each (specialization, target) is one entry under the owner of that target: a CUBIN
//! for the target, plus, for the PTX targets ([`ShipPlan::ptx_targets`]: the lowest by
//! default), its PTX, which the driver can JIT for any newer arch. A program whose
//! kernels differ by arch (`#if __CUDA_ARCH__ >= 800` around its bf16 kernels) ships
//! the newest target's PTX too ([`ShipPlan::with_ptx_targets`]), so that a GPU newer
//! than every CUBIN gets every kernel. Entries record their toolchain as deps
//! (`cuda.nvrtc`, `cuda.headers.<set>`, see
//! [`KernelRequest::entry_deps`](super::KernelRequest::entry_deps)).
//!
//! # Which toolchain keys the entries
//!
//! When the library ships an image ([`kiln_core::build`]), its build record (NVRTC
//! release, header-set digests) keys every request: owners and keys come from the
//! record, no file is read, NVRTC is not opened, and each entry is looked up in the
//! shipped image, then the disk and remote tiers. Only an entry none holds is
//! compiled, and only by a local toolchain that gives the same owner and key (the
//! same NVRTC release and headers); otherwise it is *missing*: a `cargo:warning`
//! names it, and the library compiles it at run time where it can. Without a shipped
//! image the local toolchain keys and compiles everything (still reusing the disk and
//! remote tiers); without one either, every entry is missing.
//!
//! A compile error, or an option NVRTC refuses, fails the build with NVRTC's log.
//!
//! # The application chooses the GPU generations it embeds
//!
//! `KILN_CUDA_ARCHS=sm_86,sm_90` (a build-time variable, e.g. in the
//! application's `.cargo/config.toml` `[env]`) names the GPUs an application runs
//! on: every kernel library's plan then keeps, per named GPU, the one CUBIN target
//! that runs best on it (its own arch, else the newest compatible one), and PTX
//! only when a named GPU has no CUBIN; the rest is not embedded. Such a build is
//! not for shipping. Unset (the default), everything the plan ships is embedded.

use std::sync::{Arc, OnceLock};

use kiln_core::build::{Session, Unavailable, jobs};
use kiln_core::{ArtifactKind, BoxError, Cache};

use super::library::RequestFn;
use super::locate::{CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE};
use super::{Arch, ArchSuffix, BuildRecord, Error, Toolchain};

/// `KILN_CUDA_ARCHS`: the GPUs an application runs on (`sm_86,sm_90`); every
/// kernel library's [`ShipPlan`] embeds only what serves them. A build-time
/// variable: changing it reruns the build scripts.
pub const CUDA_ARCHS: &str = "KILN_CUDA_ARCHS";

/// The backend name under which a plan keeps its [`BuildRecord`] in a shipped
/// image's manifest ([`Session::record`]).
pub const RECORD_BACKEND: &str = "kiln-cuda";

/// What a kernel library's build ships: CUBIN targets and those whose entries also
/// carry PTX; after [`ShipPlan::precompile`], the [`BuildRecord`] of what it used.
#[derive(Clone, Debug)]
pub struct ShipPlan {
    targets: Vec<Arch>,
    ptx: Vec<Arch>,
    record: BuildRecord,
    /// The local toolchain to compile with, instead of locating this
    /// machine's (tests, or a build script that finds NVRTC its own way).
    local: Option<Result<Arc<Toolchain>, Arc<Error>>>,
}

impl ShipPlan {
    /// CUBINs for `targets` (sorted, duplicates dropped), PTX with the lowest plain
    /// target (the lowest target when none is plain).
    pub fn new(targets: impl IntoIterator<Item = Arch>) -> ShipPlan {
        let mut targets: Vec<Arch> = targets.into_iter().collect();
        targets.sort();
        targets.dedup();
        let lowest = |plain: bool| {
            targets
                .iter()
                .filter(|t| !plain || t.suffix() == ArchSuffix::None)
                .min_by_key(|t| (t.major(), t.minor()))
                .copied()
        };
        let ptx = lowest(true).or_else(|| lowest(false));
        ShipPlan {
            targets,
            ptx: ptx.into_iter().collect(),
            record: BuildRecord::default(),
            local: None,
        }
    }

    /// [`ShipPlan::new`] of a comma-separated list: `sm_75,sm_80,sm_90a`.
    ///
    /// # Errors
    /// [`Error::InvalidArch`] for a name that is not an arch.
    pub fn parse(list: &str) -> Result<ShipPlan, Error> {
        Ok(ShipPlan::new(parse_archs(list)?))
    }

    /// The same plan with PTX carried by the entries of `target` (one of the
    /// targets) alone, or by none.
    pub fn with_ptx_target(self, target: Option<Arch>) -> ShipPlan {
        self.with_ptx_targets(target)
    }

    /// The same plan with PTX carried by the entries of each of `targets` (those
    /// that are CUBIN targets; sorted, duplicates dropped). A GPU no CUBIN runs on
    /// gets the newest PTX that runs on it and holds the kernel asked for.
    ///
    /// ```
    /// use kiln_cuda::ShipPlan;
    /// let plan = ShipPlan::parse("sm_75,sm_80,sm_90,sm_120")?;
    /// let (lowest, newest) = (plan.targets()[0], plan.targets()[3]);
    /// let plan = plan.with_ptx_targets([lowest, newest]);
    /// assert_eq!(plan.ptx_targets(), [lowest, newest]);
    /// # Ok::<(), kiln_cuda::Error>(())
    /// ```
    pub fn with_ptx_targets(mut self, targets: impl IntoIterator<Item = Arch>) -> ShipPlan {
        let mut ptx: Vec<Arch> = targets
            .into_iter()
            .filter(|t| self.targets.contains(t))
            .collect();
        ptx.sort();
        ptx.dedup();
        self.ptx = ptx;
        self
    }

    /// The same plan with PTX for its lowest and its newest plain target (the
    /// lowest and newest target when none is plain): what a kernel set whose
    /// members differ by arch needs for every GPU newer than its targets.
    pub fn with_lowest_and_newest_ptx(self) -> ShipPlan {
        let plain: Vec<Arch> = self
            .targets
            .iter()
            .copied()
            .filter(|t| t.suffix() == ArchSuffix::None)
            .collect();
        let pool = if plain.is_empty() {
            &self.targets
        } else {
            &plain
        };
        let ends = [pool.first().copied(), pool.last().copied()];
        self.with_ptx_targets(ends.into_iter().flatten())
    }

    /// The same plan compiling with `local` (or, given an error, with no
    /// toolchain: a machine without NVRTC) instead of locating this machine's
    /// toolchain ([`Toolchain::local`]) when an entry must be compiled.
    pub fn with_local_toolchain(mut self, local: Result<Toolchain, Error>) -> ShipPlan {
        self.local = Some(local.map(Arc::new).map_err(Arc::new));
        self
    }

    /// The CUBIN targets, sorted.
    pub fn targets(&self) -> &[Arch] {
        &self.targets
    }

    /// The lowest target whose entries also carry PTX.
    pub fn ptx_target(&self) -> Option<Arch> {
        self.ptx.first().copied()
    }

    /// Every target whose entries also carry PTX, sorted.
    pub fn ptx_targets(&self) -> &[Arch] {
        &self.ptx
    }

    /// What the last [`ShipPlan::precompile`] keyed its entries by (empty before it,
    /// or when it had neither a shipped image nor NVRTC): print its
    /// [`cargo_directive`](BuildRecord::cargo_directive) in the build script.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// The plan for an application whose GPUs are `devices` (see the module
    /// documentation): per device the CUBIN target that runs best on it; for a device
    /// no CUBIN runs on, the newest PTX target that can be JIT-compiled for it (with
    /// its CUBIN).
    pub fn for_devices(&self, devices: &[Arch]) -> ShipPlan {
        let mut keep: Vec<Arch> = Vec::new();
        let mut ptx: Vec<Arch> = Vec::new();
        for device in devices {
            let (major, minor) = (device.major(), device.minor());
            let best = self.targets.iter().find(|t| *t == device).or_else(|| {
                self.targets
                    .iter()
                    .filter(|t| t.cubin_runs_on(major, minor))
                    .max_by_key(|t| (t.major(), t.minor()))
            });
            match best {
                Some(target) => keep.push(*target),
                None => ptx.extend(
                    self.ptx
                        .iter()
                        .filter(|t| t.ptx_runs_on(major, minor))
                        .max_by_key(|t| (t.major(), t.minor())),
                ),
            }
        }
        keep.extend(&ptx);
        ShipPlan {
            local: self.local.clone(),
            ..ShipPlan::new(keep)
        }
        .with_ptx_targets(ptx)
    }

    /// Gets every spec for every target into the session's cache, on [`jobs`]
    /// threads, and records the toolchain they are keyed by (see the module
    /// documentation): from the library's shipped image, the disk or the remote
    /// tier, else compiled by the local toolchain ([`Toolchain::local`], located only
    /// then) when it gives the same keys. Declares what the images depend on: the
    /// NVRTC library file and the header sets' folders when it compiled,
    /// `KILN_NVRTC`, `KILN_CCCL_INCLUDE`, `KILN_CUDA_RUNTIME_INCLUDE` and
    /// `KILN_CUDA_ARCHS`.
    ///
    /// # Errors
    /// An error of the library's request function other than a missing toolchain
    /// (a refused option, say); [`Error::InvalidArch`] in `KILN_CUDA_ARCHS`. A
    /// specialization that does not compile fails the build through the session.
    pub fn precompile<S: Sync>(
        &mut self,
        session: &mut Session<'_>,
        specs: &[S],
        request: RequestFn<S>,
    ) -> Result<(), crate::Error> {
        session.uses_env("KILN_NVRTC");
        session.uses_env(CCCL_INCLUDE);
        session.uses_env(CUDA_RUNTIME_INCLUDE);
        session.uses_env(CUDA_ARCHS);
        self.record = BuildRecord::default();
        let plan = match session.env(CUDA_ARCHS).and_then(|v| v.into_string().ok()) {
            Some(list) if !list.trim().is_empty() => {
                session.not_for_shipping(format!(
                    "{CUDA_ARCHS}={list} limits the targets to those GPUs"
                ));
                self.for_devices(&parse_archs(&list)?)
            }
            _ => self.clone(),
        };
        let shipped = session.shipped_record(RECORD_BACKEND).and_then(|text| {
            text.parse::<BuildRecord>()
                .ok()
                .and_then(|record| Toolchain::recorded(&record))
        });
        let local: OnceLock<Result<Arc<Toolchain>, Arc<Error>>> = OnceLock::new();
        let given = plan.local.clone();
        let local_toolchain = || {
            local
                .get_or_init(|| {
                    given
                        .clone()
                        .unwrap_or_else(|| Toolchain::local().map(Arc::new).map_err(Arc::new))
                })
                .clone()
        };
        // The toolchain that keys the entries: the shipped record's, else this
        // machine's; without either, each entry is missing, named.
        let keying: Result<Arc<Toolchain>, Arc<Error>> = match shipped {
            Some(recorded) => Ok(Arc::new(recorded)),
            None => local_toolchain(),
        };
        let names = Toolchain::names_only();
        let mut record = keying.as_ref().ok().map(|keying| {
            BuildRecord::new(keying.nvrtc().clone())
                .with_cubin_targets(plan.targets.iter().copied())
                .with_ptx_targets(plan.ptx.iter().copied())
        });
        let mut work = Vec::new();
        for spec in specs {
            for &target in &plan.targets {
                let keyed = match &keying {
                    Ok(keying) => request(spec, keying, target),
                    Err(why) => Err(Error::Shared(Arc::clone(why))),
                };
                let built = match keyed {
                    Ok(built) => built,
                    Err(error) if error.is_missing_toolchain() => {
                        let name = request(spec, &names, target)
                            .map(|r| r.name().to_owned())
                            .unwrap_or_else(|_| "a specialization".to_owned());
                        let why = Unavailable::new(missing_toolchain(&error));
                        work.push((format!("{name} {target}"), Job::Missing(why)));
                        continue;
                    }
                    Err(error) => return Err(error),
                };
                if let Some(record) = &mut record {
                    for dir in built.include_dirs() {
                        if let Some(set) = dir.set() {
                            *record = record.clone().with_header_set(set, dir.digest());
                        }
                    }
                }
                let owner = built.owner(built_nvrtc(&keying)?)?;
                let key = built.key()?;
                if !plan.ptx.contains(&target) {
                    session.leave_out(owner.digest(), &key, ArtifactKind::Ptx);
                }
                let label = format!("{} {target}", built.name());
                work.push((
                    label,
                    Job::Get {
                        spec,
                        target,
                        owner,
                        key,
                    },
                ));
            }
        }
        let local_toolchain = &local_toolchain;
        let keying = keying.as_ref().ok();
        let work = work
            .into_iter()
            .map(|(label, job)| {
                let get = move |cache: &Cache| -> Result<(), BoxError> {
                    match job {
                        Job::Missing(why) => Err(why.into()),
                        Job::Get {
                            spec,
                            target,
                            owner,
                            key,
                        } => {
                            if cache.get_cached(&owner, &key).is_some() {
                                return Ok(());
                            }
                            let Some(keying) = keying else {
                                return Err(Unavailable::new("no toolchain keys it").into());
                            };
                            compile_here(
                                cache,
                                local_toolchain,
                                keying,
                                spec,
                                request,
                                target,
                                &owner,
                                &key,
                            )
                        }
                    }
                };
                (label, get)
            })
            .collect();
        session.specialize_all(jobs(), work);
        let record = record.unwrap_or_default();
        if let Some(Ok(local)) = local.get() {
            declare_local_sources(session, local, &record);
        }
        session.record(RECORD_BACKEND, record.to_string());
        self.record = record;
        Ok(())
    }
}

/// One (spec, target) of the block.
enum Job<'s, S> {
    /// Cannot even be keyed here.
    Missing(Unavailable),
    /// Looked up, then compiled if missing.
    Get {
        spec: &'s S,
        target: Arch,
        owner: kiln_core::Owner,
        key: kiln_core::Key,
    },
}

/// Compiles the entry `(owner, key)` of `spec` for `target` with the local
/// toolchain, when it derives the same owner and key as `keying` (the shipped
/// record's toolchain, or itself); otherwise the entry is [`Unavailable`].
#[allow(clippy::too_many_arguments)]
fn compile_here<S>(
    cache: &Cache,
    local: &dyn Fn() -> Result<Arc<Toolchain>, Arc<Error>>,
    keying: &Toolchain,
    spec: &S,
    request: RequestFn<S>,
    target: Arch,
    owner: &kiln_core::Owner,
    key: &kiln_core::Key,
) -> Result<(), BoxError> {
    let local = local().map_err(|why| Unavailable::new(missing_toolchain(&why)))?;
    let Some(compiler) = local.compiler() else {
        return Err(Unavailable::new("no NVRTC in this process").into());
    };
    let here = match request(spec, &local, target) {
        Ok(here) => here,
        Err(error) if error.is_missing_toolchain() => {
            return Err(Unavailable::new(missing_toolchain(&error)).into());
        }
        Err(error) => return Err(error.into()),
    };
    if compiler.owner(&here)?.digest() != owner.digest() || here.key()? != *key {
        return Err(Unavailable::new(format!(
            "this machine's toolchain (nvrtc {}) is not the one the shipped entries were \
             built with ({}): install that NVRTC release and its headers, or ship the \
             library again from this toolchain (`kiln ship --rebuild`)",
            local.nvrtc(),
            keying.nvrtc()
        ))
        .into());
    }
    // NVRTC is loaded on the first compile: a library that cannot be loaded is a
    // missing toolchain, a source that does not compile is the library's error.
    compiler
        .nvrtc()
        .map_err(|why| Unavailable::new(missing_toolchain(&why)))?;
    compiler.compile_cached(cache, &here)?;
    Ok(())
}

/// Declares what the local toolchain's compiles depend on: the NVRTC library file and
/// the folders of the header sets the record names.
fn declare_local_sources(session: &mut Session<'_>, local: &Toolchain, record: &BuildRecord) {
    if let Some(compiler) = local.compiler()
        && let Ok(nvrtc) = compiler.nvrtc()
        && nvrtc.location().path.is_absolute()
    {
        session.uses_source(&nvrtc.location().path);
    }
    for (set, _) in record.header_sets() {
        if let Ok(dir) = local.header_set(set)
            && let Some(path) = dir.path()
        {
            session.uses_source(path);
        }
    }
}

/// Why a missing toolchain leaves an entry out, and what to do.
fn missing_toolchain(why: &Error) -> String {
    format!(
        "{why}; or use the library's shipped image (its author runs `kiln ship` where \
         the toolchain is)"
    )
}

/// The NVRTC release of the toolchain that keys the entries (only called once a
/// request was built with it).
fn built_nvrtc(keying: &Result<Arc<Toolchain>, Arc<Error>>) -> Result<&super::NvrtcVersion, Error> {
    keying
        .as_ref()
        .map(|keying| keying.nvrtc())
        .map_err(|why| Error::Shared(Arc::clone(why)))
}

fn parse_archs(list: &str) -> Result<Vec<Arch>, Error> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| Ok(s.parse()?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archs(list: &str) -> Vec<String> {
        parse_archs(list)
            .unwrap()
            .iter()
            .map(Arch::to_string)
            .collect()
    }

    #[test]
    fn ptx_goes_with_the_lowest_plain_target() {
        let plan = ShipPlan::parse("sm_90a, sm_120,sm_80,sm_75,sm_80").unwrap();
        let names: Vec<String> = plan.targets().iter().map(Arch::to_string).collect();
        assert_eq!(names, ["sm_75", "sm_80", "sm_90a", "sm_120"]);
        assert_eq!(
            plan.ptx_target().map(|a| a.to_string()).as_deref(),
            Some("sm_75")
        );
        let specific = ShipPlan::parse("sm_100a,sm_90a").unwrap();
        assert_eq!(
            specific.ptx_target().map(|a| a.to_string()).as_deref(),
            Some("sm_90a")
        );
        let none = plan.clone().with_ptx_target(None);
        assert_eq!(none.ptx_target(), None);
        let not_a_target = plan.clone().with_ptx_target(Some("sm_86".parse().unwrap()));
        assert_eq!(not_a_target.ptx_target(), None);
        let ends = plan.with_lowest_and_newest_ptx();
        let names: Vec<String> = ends.ptx_targets().iter().map(Arch::to_string).collect();
        assert_eq!(names, ["sm_75", "sm_120"]);
        assert!(ShipPlan::parse("sm_75,compute_80").is_err());
    }

    #[test]
    fn an_application_s_gpus_keep_the_cubins_that_serve_them_best() {
        let plan = ShipPlan::parse("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120").unwrap();
        let keep = |devices: &str| {
            let plan = plan.for_devices(&parse_archs(devices).unwrap());
            let targets: Vec<String> = plan.targets().iter().map(Arch::to_string).collect();
            (targets, plan.ptx_target().map(|a| a.to_string()))
        };
        assert_eq!(keep("sm_90"), (archs("sm_90"), None));
        // An sm_87 runs the sm_86 CUBIN; an sm_120 its own.
        assert_eq!(keep("sm_87,sm_120"), (archs("sm_86,sm_120"), None));
        // A GPU no CUBIN runs on needs the PTX, carried by the lowest target.
        assert_eq!(
            keep("sm_90,sm_110"),
            (archs("sm_75,sm_90"), Some("sm_75".to_owned()))
        );
    }
}
