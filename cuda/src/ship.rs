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
//! for the target, plus, for the PTX targets ([`ShipPlan::ptx_targets`]: the lowest by
//! default), its PTX, which the driver can JIT for any newer arch. A program whose
//! kernels differ by arch (`#if __CUDA_ARCH__ >= 800` around its bf16 kernels) ships
//! the newest target's PTX too ([`ShipPlan::with_ptx_targets`]), so that a GPU newer
//! than every CUBIN gets every kernel. Entries record their toolchain as deps
//! (`cuda.nvrtc`, `cuda.headers.<set>`, see
//! [`KernelRequest::entry_deps`](super::KernelRequest::entry_deps)).

use kiln_core::build::{Session, jobs};
use kiln_core::{ArtifactKind, Cache};

use super::library::RequestFn;
use super::locate::{CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE};
use super::{Arch, ArchSuffix, BuildRecord, Compiler, Error, KernelRequest, Toolchain};

/// What a kernel library's build ships: CUBIN targets and those whose entries also
/// carry PTX; after [`ShipPlan::precompile`], the [`BuildRecord`] of what it used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShipPlan {
    targets: Vec<Arch>,
    ptx: Vec<Arch>,
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
            ptx: ptx.into_iter().collect(),
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

    /// What the last [`ShipPlan::precompile`] compiled with (no compiler before it,
    /// or when it found no NVRTC): print its
    /// [`cargo_directive`](BuildRecord::cargo_directive) in the build script.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// Compiles every spec for every target with the local toolchain
    /// ([`Toolchain::local`]) into the session's cache, on [`jobs`] threads, and
    /// records the toolchain. Declares to cargo what the images depend on: the NVRTC
    /// library file, the header sets' folders, `KILN_NVRTC`, `KILN_CCCL_INCLUDE` and
    /// `KILN_CUDA_RUNTIME_INCLUDE`.
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
        session.uses_env(CCCL_INCLUDE);
        session.uses_env(CUDA_RUNTIME_INCLUDE);
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
            .with_ptx_targets(self.ptx.iter().copied());
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
                let with_ptx = self.ptx.contains(&target);
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
        let not_a_target = plan.clone().with_ptx_target(Some("sm_86".parse().unwrap()));
        assert_eq!(not_a_target.ptx_target(), None);
        let ends = plan.with_lowest_and_newest_ptx();
        let names: Vec<String> = ends.ptx_targets().iter().map(Arch::to_string).collect();
        assert_eq!(names, ["sm_75", "sm_120"]);
        assert!(ShipPlan::parse("sm_75,compute_80").is_err());
    }
}
