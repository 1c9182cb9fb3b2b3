//! The build side of a kernel library: compile every specialization for every target
//! arch, in parallel, into the precompile block's cache, and record the toolchain.
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
//!     // Always printed (an empty record when no NVRTC was found): the library reads
//!     // it with env!("KILN_CUDA_BUILD").
//!     println!("{}", plan.record().cargo_directive());
//!     Ok(())
//! }
//! ```
//!
//! Each (specialization, target) is one entry under the owner of that target: a CUBIN
//! for the target, plus, for the lowest target ([`ShipPlan::ptx_target`]), its PTX,
//! which the driver can JIT for any newer arch. Entries record their toolchain as deps
//! (`cuda.nvrtc`, `cuda.headers.<set>`, see
//! [`KernelRequest::entry_deps`](super::KernelRequest::entry_deps)).

use kiln_core::build::{Session, jobs};
use kiln_core::{ArtifactKind, Cache};

use super::library::RequestFn;
use super::{Arch, ArchSuffix, BuildRecord, Compiler, Error, KernelRequest, Toolchain};

/// What a kernel library's build ships: CUBIN targets and the one whose entries also
/// carry PTX; after [`ShipPlan::precompile`], the [`BuildRecord`] of what it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShipPlan {
    targets: Vec<Arch>,
    ptx: Option<Arch>,
    record: BuildRecord,
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
            ptx,
            record: BuildRecord::default(),
        }
    }

    /// [`ShipPlan::new`] of a comma-separated list: `sm_75,sm_80,sm_90a`.
    ///
    /// # Errors
    /// [`Error::InvalidArch`] for a name that is not an arch.
    pub fn parse(list: &str) -> Result<ShipPlan, Error> {
        let targets = list
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::parse)
            .collect::<Result<Vec<Arch>, Error>>()?;
        Ok(ShipPlan::new(targets))
    }

    /// The same plan with PTX carried by the entries of `target` (one of the
    /// targets), or by none.
    pub fn with_ptx_target(mut self, target: Option<Arch>) -> ShipPlan {
        self.ptx = target.filter(|t| self.targets.contains(t));
        self
    }

    /// The CUBIN targets, sorted.
    pub fn targets(&self) -> &[Arch] {
        &self.targets
    }

    /// The target whose entries also carry PTX.
    pub fn ptx_target(&self) -> Option<Arch> {
        self.ptx
    }

    /// What the last [`ShipPlan::precompile`] compiled with (no compiler before it,
    /// or when it found no NVRTC): print its
    /// [`cargo_directive`](BuildRecord::cargo_directive) in the build script.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// Compiles every spec for every target with the local toolchain
    /// ([`Toolchain::local`]) into the session's cache, on [`jobs`] threads, and
    /// records the toolchain. Declares to cargo what the images depend on: the NVRTC
    /// library file, the header sets' folders, `KILN_NVRTC` and `KILN_CCCL_INCLUDE`.
    /// A spec that fails for a target is a `cargo:warning` (it compiles at run time).
    ///
    /// # Errors
    /// When no NVRTC is found (the record then names no compiler: the library ships
    /// nothing and compiles at run time), or a request cannot be built.
    pub fn precompile<S>(
        &mut self,
        session: &mut Session<'_>,
        specs: &[S],
        request: RequestFn<S>,
    ) -> Result<(), crate::Error> {
        session.uses_env("KILN_NVRTC");
        session.uses_env("KILN_CCCL_INCLUDE");
        self.record = BuildRecord::default();
        let toolchain = Toolchain::local()?;
        let Some(compiler) = toolchain.compiler().copied() else {
            return Ok(());
        };
        let nvrtc = &compiler.nvrtc()?.location().path;
        if nvrtc.is_absolute() {
            session.uses_source(nvrtc);
        }
        let mut record = BuildRecord::new(toolchain.nvrtc().clone())
            .with_cubin_targets(self.targets.iter().copied())
            .with_ptx_target(self.ptx);
        let mut work = Vec::new();
        for spec in specs {
            for &target in &self.targets {
                let built = request(spec, &toolchain, target)?;
                for dir in built.include_dirs() {
                    if let (Some(set), Some(path)) = (dir.set(), dir.path()) {
                        record = record.with_header_set(set, dir.digest());
                        session.uses_source(path);
                    }
                }
                let label = format!("{} {target}", built.name());
                let with_ptx = Some(target) == self.ptx;
                work.push((label, move |cache: &Cache| {
                    ship_one(&compiler, cache, &built, with_ptx)
                }));
            }
        }
        session.specialize_all(jobs(), work);
        self.record = record;
        Ok(())
    }
}

/// Compiles `request` into `cache` as a shipped entry: its CUBIN, its PTX only when
/// `with_ptx`, the deps of [`Compiler::entry`].
///
/// # Errors
/// When the compile fails.
pub fn ship_one(
    compiler: &Compiler,
    cache: &Cache,
    request: &KernelRequest,
    with_ptx: bool,
) -> Result<(), crate::Error> {
    let owner = compiler.owner(request)?;
    let key = request.key()?;
    cache.get_or_compile(&owner, &key, || {
        let mut entry = compiler.entry(compiler.compile(request)?, request);
        if !with_ptx {
            entry.artifacts.retain(|a| a.kind != ArtifactKind::Ptx);
        }
        Ok(entry)
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let not_a_target = plan.with_ptx_target(Some("sm_86".parse().unwrap()));
        assert_eq!(not_a_target.ptx_target(), None);
        assert!(ShipPlan::parse("sm_75,compute_80").is_err());
    }
}
