//! The build side of a kernel library: every specialization for every target arch of
//! every toolchain, taken from the library's shipped image (or the disk and remote
//! tiers) or compiled, in parallel, into the precompile block's cache; and the
//! toolchains they are keyed by.
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
//!     // NVRTC 13 for Turing to Blackwell (CUDA 13 drivers, R580+); NVRTC 12 for
//!     // Maxwell to Volta and for CUDA 12 drivers (R525 to R575) on every GPU.
//!     let mut plan = ShipPlan::parse("sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120")?
//!         .for_cuda(13)
//!         .and(ShipPlan::parse("sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120")?
//!             .for_cuda(12));
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
//! A plan is one or more *toolchains* ([`Family`]: a CUDA major, or whatever NVRTC
//! the machine has, with its targets). Each (specialization, toolchain, target) is
//! one entry under the owner of that toolchain and target: a CUBIN for the target,
//! plus, for the PTX targets ([`ShipPlan::ptx_targets`]: the lowest by default),
//! its PTX, which the driver can JIT for any newer arch. A program whose kernels
//! differ by arch (`#if __CUDA_ARCH__ >= 800` around its bf16 kernels) ships the
//! newest target's PTX too ([`ShipPlan::with_ptx_targets`]), so that a GPU newer
//! than every CUBIN gets every kernel. Entries record their toolchain as deps
//! (`cuda.nvrtc`, `cuda.headers.<set>`, see
//! [`KernelRequest::entry_deps`](super::KernelRequest::entry_deps)).
//!
//! # Drivers: why two toolchains, and the oldest driver a plan serves
//!
//! A driver loads CUBINs of its own CUDA major or an older one (12.x CUBINs on R525
//! and newer, 13.x on R580 and newer), and JITs PTX only from an NVRTC no newer than
//! itself. NVRTC 13 cannot compile for sm_50 to sm_72. So a plan of NVRTC 13 alone
//! serves CUDA 13 drivers and GPUs from sm_75; a CUDA 12 toolchain beside it
//! ([`ShipPlan::and`], [`ShipPlan::for_cuda`]) serves R525 to R575 drivers and the
//! older GPUs, from the same image (the run time picks per device and driver:
//! [`select`](super::select)). `KILN_NVRTC_12`, `KILN_CCCL_INCLUDE_12`... name a
//! CUDA 12 toolchain explicitly (see [`SearchConfig`](crate::toolchain::SearchConfig::for_cuda)).
//!
//! A plan states the oldest driver it serves ([`ShipPlan::with_oldest_driver`];
//! by default the oldest its toolchains' CUBINs load on). The block checks, before
//! it compiles, that every GPU the plan serves is served on every driver from that
//! one on ([`coverage`](super::select::coverage)): PTX from NVRTC 13.5 for a GPU
//! with no CUBIN needs a 13.5 driver, and an R580 driver would get nothing. A
//! plan that fails the check fails the build where its entries are compiled (the
//! author's), saying how to close each gap; a build keyed by a shipped image warns
//! and marks its image not for shipping (`kiln ship --check` then fails). The
//! block's summary line says which drivers the code serves and which GPUs none of it
//! reaches.
//!
//! # Which toolchain keys the entries
//!
//! When the library ships an image ([`kiln_core::build`]), its build record (per
//! toolchain: NVRTC release, header-set digests) keys every request: owners and keys
//! come from the record, no file is read, NVRTC is not opened, and each entry is
//! looked up in the shipped image, then the disk and remote tiers. Only an entry none
//! holds is compiled, and only by a local toolchain of that CUDA major that gives the
//! same owner and key (the same NVRTC release and headers); otherwise it is
//! *missing*: a `cargo::warning` names it, and the library compiles it at run time
//! where it can. A build with only one of a plan's toolchains compiles only that
//! toolchain's missing entries. Without a shipped image the local toolchains key
//! and compile everything (still reusing the disk and remote tiers); a toolchain
//! with neither leaves its entries missing.
//!
//! `KILN_ALWAYS_COMPILE=1` compiles every entry with the local toolchains, under
//! their own identity (never the shipped record's); a toolchain missing then
//! fails the build rather than write an image without its entries.
//!
//! A block that left entries missing because a toolchain or header set was not
//! found watches where it would appear ([`SearchConfig::watched_places`]:
//! site-packages folders, a toolkit's library folders, the OS loader's cache, and
//! the variables `CUDA_HOME`, `CUDA_PATH`, `VIRTUAL_ENV`, `LD_LIBRARY_PATH`), so
//! that installing it reruns the block without `cargo clean`.
//!
//! A compile error, or an option NVRTC refuses, fails the build with NVRTC's log.
//!
//! # The application chooses the GPU generations and drivers it embeds
//!
//! `KILN_CUDA_ARCHS=sm_86,sm_90` (a build-time variable, e.g. in the
//! application's `.cargo/config.toml` `[env]`) names the GPUs an application runs
//! on: every kernel library's plan then keeps, per named GPU and per driver, the
//! entry that serves it best (its own CUBIN, else the newest compatible one, else
//! PTX), and nothing else. Add `ptx` to the list (`KILN_CUDA_ARCHS=sm_86,sm_90,ptx`)
//! to keep the plan's PTX as well, for every other GPU. `KILN_CUDA_DRIVERS=13`
//! (or `12.2`, or `12,13`) names the drivers it runs on: a version keeps what
//! drivers of its major from it on load (`13`: R580 and newer; `12.2`: R535 to
//! R575), so `13` leaves out the CUDA 12 toolchain's code except where it is the
//! only code for a GPU (sm_50 to sm_72 on R580). Such a build is not for shipping,
//! and when what it keeps leaves known GPUs with no code at all, every block's
//! summary line names them. Unset (the default), everything the plan ships is
//! embedded.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use kiln_core::build::{Session, Unavailable, jobs};
use kiln_core::{ArtifactKind, BoxError, Cache};

use crate::arch::InvalidArch;
use crate::select::coverage::coverage;
use crate::select::{Device, KNOWN_DRIVERS, KNOWN_GPUS, Selection, parse_cuda_version, select};
use crate::toolchain::error::{CompileError, ToolchainError};
use crate::toolchain::{
    CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE, NVRTC, SearchConfig, ToolchainRecord, per_major,
};
use crate::{Arch, ArchSuffix, BuildRecord, KernelRequest, Toolchain};

/// A kernel library's build failed: its plan, the switches that narrow it, a
/// toolchain it needs, or a kernel's request or compile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShipError {
    /// A target (or an entry of `KILN_CUDA_ARCHS`) is not an arch.
    #[error(transparent)]
    InvalidArch(#[from] InvalidArch),
    /// `KILN_CUDA_DRIVERS` holds something that is not a CUDA version.
    #[error(
        "KILN_CUDA_DRIVERS={given:?}: {item:?} is not a CUDA version; give the drivers the \
         application runs on as CUDA versions, each from that one on within its major: \
         `13` (R580 and newer), `12.2` (R535 to R575), `12,13` (both)"
    )]
    InvalidDriverList {
        /// The whole value.
        given: String,
        /// The item that is not a version.
        item: String,
    },
    /// A plan leaves GPUs it serves without code on drivers it says it serves.
    #[error("{gaps}")]
    DriverGaps {
        /// Each gap, with what would close it.
        gaps: String,
    },
    /// `KILN_ALWAYS_COMPILE` asks for every entry compiled here, and a toolchain of
    /// the plan is missing.
    #[error(
        "KILN_ALWAYS_COMPILE compiles every entry with this machine's toolchains, and one \
         of the plan's is missing: {cause}"
    )]
    AlwaysCompileWithout {
        /// Why the toolchain is missing.
        cause: Arc<ToolchainError>,
    },
    /// A toolchain the plan needs is missing or unusable.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// A kernel's request or compile failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The library's request function failed otherwise.
    #[error(transparent)]
    Request(BoxError),
    /// The cache's key, owner or store failed. (Boxed: the cache's error is large.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
}

impl From<kiln_core::Error> for ShipError {
    fn from(error: kiln_core::Error) -> ShipError {
        ShipError::Cache(Box::new(error))
    }
}

impl ShipError {
    /// Whether this says that a toolchain this machine lacks is needed rather
    /// than that the kernel's code is wrong: a precompile block leaves such a
    /// kernel out with a warning instead of failing the build.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            ShipError::Toolchain(error) => error.is_missing_toolchain(),
            ShipError::Compile(error) => error.is_missing_toolchain(),
            _ => false,
        }
    }
}

/// Into kiln's error: the cache's errors are given back, every other variant
/// becomes [`kiln_core::Error::Backend`] with this error as its source.
impl From<ShipError> for kiln_core::Error {
    fn from(error: ShipError) -> kiln_core::Error {
        match error {
            ShipError::Cache(error) => *error,
            ShipError::Compile(error) => error.into(),
            other => kiln_core::Error::Backend {
                backend: "kiln-cuda",
                source: Box::new(other),
            },
        }
    }
}

/// `KILN_CUDA_ARCHS`: the GPUs an application runs on (`sm_86,sm_90`, and `ptx`
/// to keep the plans' PTX for every other GPU); every kernel library's
/// [`ShipPlan`] embeds only what serves them. A build-time variable: changing it
/// reruns the build scripts.
pub const CUDA_ARCHS: &str = "KILN_CUDA_ARCHS";

/// `KILN_CUDA_DRIVERS`: the drivers an application runs on, as CUDA versions
/// (`13`, `12.2`, `12,13`: each from that version on, within its major); every
/// kernel library's [`ShipPlan`] embeds only what they load. A build-time
/// variable.
pub const CUDA_DRIVERS: &str = "KILN_CUDA_DRIVERS";

/// The backend name under which a plan keeps its [`BuildRecord`] in a shipped
/// image's manifest ([`Session::record`]).
pub const RECORD_BACKEND: &str = "kiln-cuda";

/// Variables that change where a toolchain is found: watched when a block left
/// entries missing for lack of one.
const SEARCH_VARIABLES: [&str; 4] = ["CUDA_HOME", "CUDA_PATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH"];

/// One toolchain of a plan: the CUDA major its NVRTC must be of (`None`: the
/// NVRTC this machine has), its CUBIN targets and its PTX targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Family {
    cuda: Option<u32>,
    targets: Vec<Arch>,
    ptx: Vec<Arch>,
}

impl Family {
    fn new(targets: impl IntoIterator<Item = Arch>) -> Family {
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
        Family {
            cuda: None,
            targets,
            ptx: ptx.into_iter().collect(),
        }
    }

    /// The CUDA major its NVRTC must be of; `None`: the NVRTC this machine has.
    pub fn cuda(&self) -> Option<u32> {
        self.cuda
    }

    /// The CUBIN targets, sorted.
    pub fn targets(&self) -> &[Arch] {
        &self.targets
    }

    /// Every target whose entries also carry PTX, sorted.
    pub fn ptx_targets(&self) -> &[Arch] {
        &self.ptx
    }

    fn with_ptx(mut self, targets: impl IntoIterator<Item = Arch>) -> Family {
        let mut ptx: Vec<Arch> = targets
            .into_iter()
            .filter(|t| self.targets.contains(t))
            .collect();
        ptx.sort();
        ptx.dedup();
        self.ptx = ptx;
        self
    }
}

type LocalToolchain = Result<Arc<Toolchain>, Arc<ToolchainError>>;

/// What a kernel library's build ships: one or more toolchains ([`Family`]), each
/// with CUBIN targets and those whose entries also carry PTX, and the oldest driver
/// it serves; after [`ShipPlan::precompile`], the [`BuildRecord`] of what it used.
#[derive(Clone, Debug)]
pub struct ShipPlan {
    families: Vec<Family>,
    oldest_driver: Option<i32>,
    record: BuildRecord,
    /// The local toolchain to compile with, instead of locating this
    /// machine's (tests, or a build script that finds NVRTC its own way).
    local: Option<LocalToolchain>,
}

impl ShipPlan {
    /// CUBINs for `targets` (sorted, duplicates dropped), PTX with the lowest plain
    /// target (the lowest target when none is plain), built by the NVRTC this
    /// machine has.
    pub fn new(targets: impl IntoIterator<Item = Arch>) -> ShipPlan {
        ShipPlan {
            families: vec![Family::new(targets)],
            oldest_driver: None,
            record: BuildRecord::default(),
            local: None,
        }
    }

    /// [`ShipPlan::new`] of a comma-separated list: `sm_75,sm_80,sm_90a`.
    ///
    /// # Errors
    /// [`InvalidArch`] for a name that is not an arch.
    pub fn parse(list: &str) -> Result<ShipPlan, InvalidArch> {
        Ok(ShipPlan::new(parse_archs(list)?))
    }

    /// The same plan built by NVRTC of CUDA major `major` (12: NVRTC 12.x, for CUDA
    /// 12 drivers and sm_50 to sm_72) rather than whatever NVRTC the machine has.
    pub fn for_cuda(mut self, major: u32) -> ShipPlan {
        for family in &mut self.families {
            family.cuda.get_or_insert(major);
        }
        self
    }

    /// This plan and the toolchains of `other`, in one image: what serves both
    /// driver families (see the module documentation).
    pub fn and(mut self, other: ShipPlan) -> ShipPlan {
        self.families.extend(other.families);
        self.oldest_driver = match (self.oldest_driver, other.oldest_driver) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        self
    }

    /// The same plan stating that it serves drivers for CUDA `version`
    /// (`cuDriverGetVersion` form: 12080 for 12.8) and newer; the default is the
    /// oldest its toolchains' CUBINs load on (12.0 with a CUDA 12 toolchain, 13.0
    /// with CUDA 13 alone). The build fails when a GPU the plan serves gets no code
    /// on a driver from that one on (see the module documentation).
    pub fn with_oldest_driver(mut self, version: i32) -> ShipPlan {
        self.oldest_driver = Some(version);
        self
    }

    /// The same plan with PTX carried by the entries of `target` (one of the
    /// targets) alone, or by none, in each toolchain.
    pub fn with_ptx_target(self, target: Option<Arch>) -> ShipPlan {
        self.with_ptx_targets(target)
    }

    /// The same plan with PTX carried by the entries of each of `targets` (those
    /// that are CUBIN targets of a toolchain; sorted, duplicates dropped). A GPU no
    /// CUBIN runs on gets the newest PTX that runs on it and holds the kernel asked
    /// for.
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
        let targets: Vec<Arch> = targets.into_iter().collect();
        self.families = self
            .families
            .into_iter()
            .map(|f| f.with_ptx(targets.iter().copied()))
            .collect();
        self
    }

    /// The same plan with PTX for the lowest and the newest plain target of each
    /// toolchain (the lowest and newest target when none is plain): what a kernel
    /// set whose members differ by arch needs for every GPU newer than its targets.
    pub fn with_lowest_and_newest_ptx(mut self) -> ShipPlan {
        self.families = self
            .families
            .into_iter()
            .map(|family| {
                let plain: Vec<Arch> = family
                    .targets
                    .iter()
                    .copied()
                    .filter(|t| t.suffix() == ArchSuffix::None)
                    .collect();
                let pool = if plain.is_empty() {
                    family.targets.clone()
                } else {
                    plain
                };
                let ends = [pool.first().copied(), pool.last().copied()];
                family.with_ptx(ends.into_iter().flatten())
            })
            .collect();
        self
    }

    /// The same plan compiling with `local` instead of locating this machine's
    /// toolchain ([`Toolchain::local`]) for the toolchains it fits (those of its
    /// CUDA major, or of none named); given an error, with no toolchain at all (a
    /// machine without NVRTC).
    pub fn with_local_toolchain(mut self, local: Result<Toolchain, ToolchainError>) -> ShipPlan {
        self.local = Some(local.map(Arc::new).map_err(Arc::new));
        self
    }

    /// Every toolchain of the plan, in the order given.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The CUBIN targets of the first toolchain, sorted ([`ShipPlan::families`]
    /// has each toolchain's).
    pub fn targets(&self) -> &[Arch] {
        self.families.first().map_or(&[], |f| &f.targets)
    }

    /// The lowest target of the first toolchain whose entries also carry PTX.
    pub fn ptx_target(&self) -> Option<Arch> {
        self.ptx_targets().first().copied()
    }

    /// Every target of the first toolchain whose entries also carry PTX, sorted.
    pub fn ptx_targets(&self) -> &[Arch] {
        self.families.first().map_or(&[], |f| &f.ptx)
    }

    /// The oldest driver the plan states it serves, when stated.
    pub fn oldest_driver(&self) -> Option<i32> {
        self.oldest_driver
    }

    /// What the last [`ShipPlan::precompile`] keyed its entries by (empty before it,
    /// or when it had neither a shipped image nor NVRTC): print its
    /// [`cargo_directive`](BuildRecord::cargo_directive) in the build script.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// The plan for an application whose GPUs are `devices` (see the module
    /// documentation), for a build of one toolchain whose NVRTC is not known:
    /// per device the CUBIN target that runs best on it; for a device no CUBIN runs
    /// on, the newest PTX target that can be JIT-compiled for it (with its CUBIN).
    /// [`ShipPlan::precompile`] does this for every toolchain and driver, from the
    /// toolchains' records.
    pub fn for_devices(&self, devices: &[Arch]) -> ShipPlan {
        let families = self
            .families
            .iter()
            .map(|family| {
                let mut keep: Vec<Arch> = Vec::new();
                let mut ptx: Vec<Arch> = Vec::new();
                for device in devices {
                    let (major, minor) = (device.major(), device.minor());
                    let best = family.targets.iter().find(|t| *t == device).or_else(|| {
                        family
                            .targets
                            .iter()
                            .filter(|t| t.cubin_runs_on(major, minor))
                            .max_by_key(|t| (t.major(), t.minor()))
                    });
                    match best {
                        Some(target) => keep.push(*target),
                        None => ptx.extend(
                            family
                                .ptx
                                .iter()
                                .filter(|t| t.ptx_runs_on(major, minor))
                                .max_by_key(|t| (t.major(), t.minor())),
                        ),
                    }
                }
                keep.extend(&ptx);
                Family {
                    cuda: family.cuda,
                    ..Family::new(keep)
                }
                .with_ptx(ptx)
            })
            .collect();
        ShipPlan {
            families,
            oldest_driver: self.oldest_driver,
            record: BuildRecord::default(),
            local: self.local.clone(),
        }
    }

    /// Gets every spec for every target of every toolchain into the session's
    /// cache, on [`jobs`] threads, and records the toolchains they are keyed by (see
    /// the module documentation): from the library's shipped image, the disk or the
    /// remote tier, else compiled by the local toolchain of that CUDA major
    /// ([`Toolchain::located`], located only then) when it gives the same keys.
    /// Checks the drivers the plan serves before compiling anything. Declares what
    /// the images depend on: the NVRTC library files and the header sets' folders
    /// when it compiled, the variables that name them (`KILN_NVRTC`,
    /// `KILN_CCCL_INCLUDE`, `KILN_CUDA_RUNTIME_INCLUDE` and their per-major
    /// forms), `KILN_CUDA_ARCHS`, `KILN_CUDA_DRIVERS`, and where a missing
    /// toolchain would appear.
    ///
    /// In phases: read the settings, key the toolchains (and record their
    /// header sets), check the drivers, plan one job per (spec, toolchain,
    /// target), run the jobs, then declare what the images depend on and
    /// record the toolchains.
    ///
    /// # Errors
    /// An error of the library's request function other than a missing toolchain
    /// (a refused option, say); [`ShipError::InvalidArch`] in `KILN_CUDA_ARCHS`,
    /// [`ShipError::InvalidDriverList`] in `KILN_CUDA_DRIVERS`;
    /// [`ShipError::DriverGaps`] when the plan, keyed by this machine's toolchains,
    /// leaves a GPU it serves without code on a driver it says it serves;
    /// [`ShipError::AlwaysCompileWithout`] under `KILN_ALWAYS_COMPILE` without a
    /// toolchain. A specialization that does not compile fails the build through
    /// the session.
    pub fn precompile<S: Sync, E: Into<ShipError>>(
        &mut self,
        session: &mut Session<'_>,
        specs: &[S],
        request: fn(&S, &Toolchain, Arch) -> Result<KernelRequest, E>,
    ) -> Result<(), ShipError> {
        let request = move |spec: &S, toolchain: &Toolchain, arch: Arch| {
            request(spec, toolchain, arch).map_err(Into::into)
        };
        self.declare_variables(session);
        self.record = BuildRecord::default();
        let settings = self.settings(session)?;
        let keyed = self.key_toolchains(&settings, specs, request)?;
        keyed.check_drivers(session, &settings)?;
        let keep = keyed.embedded(session, &settings);
        let work = keyed.work(session, keep.as_ref(), specs, request)?;
        let always = settings.always;
        let gets: Vec<_> = work
            .jobs
            .into_iter()
            .map(|(label, job)| {
                let get = move |cache: &Cache| job.run(cache, always, request);
                (label, get)
            })
            .collect();
        session.specialize_all(jobs(), gets);
        let record = match keep {
            Some(_) => merge_records(work.kept).with_oldest_driver(self.oldest_driver),
            None => keyed.full,
        };
        declare_sources(session, &keyed.toolchains, &record);
        summarize(session, &settings, keep.is_some(), &record);
        session.record(RECORD_BACKEND, record.to_string());
        self.record = record;
        Ok(())
    }

    /// Phase 1: what the block reads before it plans: `KILN_CUDA_ARCHS`,
    /// `KILN_CUDA_DRIVERS`, `KILN_ALWAYS_COMPILE`, the variables a toolchain
    /// search reads, and the shipped image's record.
    fn settings(&self, session: &Session<'_>) -> Result<BlockSettings, ShipError> {
        let archs_text = session.env(CUDA_ARCHS);
        let drivers_text = session.env(CUDA_DRIVERS);
        let env: Vec<(String, std::ffi::OsString)> = self
            .search_variables()
            .into_iter()
            .filter_map(|name| session.env(&name).map(|value| (name, value)))
            .collect();
        // An invalid value is a warning the block prints at its start.
        let always = kiln_core::env::switch(
            kiln_core::env::ALWAYS_COMPILE,
            session.env(kiln_core::env::ALWAYS_COMPILE).as_deref(),
            false,
        );
        let shipped: Option<BuildRecord> = if always {
            None
        } else {
            session
                .shipped_record(RECORD_BACKEND)
                .and_then(|text| text.parse::<BuildRecord>().ok())
        };
        Ok(BlockSettings {
            archs: parse_arch_switch(archs_text.clone())?,
            drivers: parse_driver_switch(drivers_text.clone())?,
            archs_text,
            drivers_text,
            env,
            always,
            shipped,
        })
    }

    /// Phase 2: each toolchain of the plan, the one that keys its entries (the
    /// shipped record's of its major, else this machine's), and the record of
    /// what each keys, its header sets read from one request per spec.
    fn key_toolchains<S>(
        &self,
        settings: &BlockSettings,
        specs: &[S],
        request: impl Fn(&S, &Toolchain, Arch) -> Result<KernelRequest, ShipError>,
    ) -> Result<KeyedToolchains, ShipError> {
        let main = self.main_family();
        let shipped = settings.shipped.as_ref();
        let mut claimed = vec![false; shipped.map_or(0, |r| r.toolchains().len())];
        let mut toolchains: Vec<PlanToolchain> = Vec::new();
        for (index, family) in self.families.iter().enumerate() {
            let recorded = shipped
                .and_then(|record| match_record(record, family, self.families.len(), &mut claimed));
            let given = self.local.clone().filter(|given| match given {
                Ok(toolchain) => family.cuda.is_none_or(|m| toolchain.nvrtc().major == m),
                Err(_) => true,
            });
            toolchains.push(PlanToolchain {
                family: family.clone(),
                recorded: recorded.map(|r| Arc::new(Toolchain::from_record(&r))),
                env: settings.env.clone(),
                main: index == main,
                config: OnceLock::new(),
                given,
                local: OnceLock::new(),
                not_found: AtomicBool::new(false),
            });
        }
        let keyings: Vec<LocalToolchain> = toolchains
            .iter()
            .map(|t| match &t.recorded {
                Some(recorded) => Ok(Arc::clone(recorded)),
                None => t.local(),
            })
            .collect();
        if settings.always
            && let Some(why) = keyings.iter().find_map(|k| k.as_ref().err())
        {
            return Err(ShipError::AlwaysCompileWithout {
                cause: Arc::clone(why),
            });
        }

        // The record of every toolchain that keys entries, its header sets filled
        // in as requests are built.
        let mut records: Vec<Option<ToolchainRecord>> = keyings
            .iter()
            .zip(&toolchains)
            .map(|(keying, t)| {
                keying.as_ref().ok().map(|k| {
                    ToolchainRecord::new(k.nvrtc().clone())
                        .with_cubin_targets(t.family.targets.iter().copied())
                        .with_ptx_targets(t.family.ptx.iter().copied())
                })
            })
            .collect();
        for ((keying, record), toolchain) in keyings.iter().zip(&mut records).zip(&toolchains) {
            let (Ok(keying), Some(record)) = (keying, record) else {
                continue;
            };
            // Header sets, from one request per spec (the same for every target).
            if let Some(target) = toolchain.family.targets.first() {
                for spec in specs {
                    if let Ok(built) = request(spec, keying, *target) {
                        for dir in built.include_dirs() {
                            if let Some(set) = dir.set() {
                                *record = record.clone().with_header_set(set, dir.digest());
                            }
                        }
                    }
                }
            }
        }
        let full =
            merge_records(records.iter().flatten().cloned()).with_oldest_driver(self.oldest_driver);
        Ok(KeyedToolchains {
            toolchains,
            keyings,
            records,
            full,
        })
    }

    /// The index of the plan's main toolchain: the one of no stated major, else the
    /// newest major (the unsuffixed header variables name its headers).
    fn main_family(&self) -> usize {
        self.families
            .iter()
            .position(|f| f.cuda.is_none())
            .or_else(|| {
                self.families
                    .iter()
                    .enumerate()
                    .max_by_key(|(_, f)| f.cuda)
                    .map(|(i, _)| i)
            })
            .unwrap_or(0)
    }

    /// The variables a toolchain search reads.
    fn search_variables(&self) -> Vec<String> {
        let mut names: Vec<String> = [
            NVRTC,
            CCCL_INCLUDE,
            CUDA_RUNTIME_INCLUDE,
            "CUDA_HOME",
            "CUDA_PATH",
            "LD_LIBRARY_PATH",
            "VIRTUAL_ENV",
            "HOME",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        for family in &self.families {
            if let Some(major) = family.cuda {
                for variable in [NVRTC, CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE] {
                    names.push(per_major(variable, major));
                }
            }
        }
        names
    }

    /// Declares the variables that change what the block compiles.
    fn declare_variables(&self, session: &mut Session<'_>) {
        for variable in [NVRTC, CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE] {
            session.uses_env(variable);
            for family in &self.families {
                if let Some(major) = family.cuda {
                    session.uses_env(per_major(variable, major));
                }
            }
        }
        session.uses_env(CUDA_ARCHS);
        session.uses_env(CUDA_DRIVERS);
    }
}

/// One toolchain of a plan as a build sees it: what keys its entries and how its
/// local toolchain is found.
struct PlanToolchain {
    family: Family,
    recorded: Option<Arc<Toolchain>>,
    /// The variables a search reads, as the build sees them.
    env: Vec<(String, std::ffi::OsString)>,
    /// Whether this is the plan's main toolchain.
    main: bool,
    /// Where its local toolchain is looked for: made only when needed (making
    /// it lists the site-packages folders, which a build whose entries all come
    /// from the shipped image never touches).
    config: OnceLock<SearchConfig>,
    given: Option<LocalToolchain>,
    local: OnceLock<LocalToolchain>,
    /// Whether an entry was left out because the toolchain or a header set was
    /// not found.
    not_found: AtomicBool,
}

impl PlanToolchain {
    /// The local toolchain, located once.
    fn local(&self) -> LocalToolchain {
        self.local
            .get_or_init(|| match &self.given {
                Some(given) => given.clone(),
                None => Toolchain::located(self.config().clone())
                    .map(Arc::new)
                    .map_err(Arc::new),
            })
            .clone()
    }

    /// Where the local toolchain is looked for.
    fn config(&self) -> &SearchConfig {
        self.config.get_or_init(|| {
            let lookup = |name: &str| {
                self.env
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            let search = SearchConfig::from_lookup(&lookup);
            match self.family.cuda {
                Some(major) => search.of_cuda(major, self.main, &lookup),
                None => search,
            }
        })
    }
}

/// The shipped record's toolchain for `family`: the one of its CUDA major, or, for
/// a plan of one toolchain of none named, the shipped record's newest; each record
/// toolchain keys one family at most.
fn match_record(
    record: &BuildRecord,
    family: &Family,
    families: usize,
    claimed: &mut [bool],
) -> Option<ToolchainRecord> {
    let found = record
        .toolchains()
        .iter()
        .enumerate()
        .find(|(i, t)| {
            !claimed[*i]
                && match family.cuda {
                    Some(major) => t.nvrtc().major == major,
                    None => families == 1 || *i == 0,
                }
        })
        .map(|(i, t)| (i, t.clone()));
    let (index, toolchain) = found?;
    claimed[index] = true;
    Some(toolchain)
}

/// One record of toolchains; two families keyed by the same NVRTC release share
/// one toolchain record, their targets and header sets joined.
fn merge_records(records: impl IntoIterator<Item = ToolchainRecord>) -> BuildRecord {
    let mut merged: Vec<ToolchainRecord> = Vec::new();
    for record in records {
        match merged.iter_mut().find(|m| m.nvrtc() == record.nvrtc()) {
            Some(same) => {
                let mut joined = same
                    .clone()
                    .with_cubin_targets(
                        same.cubin_targets()
                            .iter()
                            .chain(record.cubin_targets())
                            .copied()
                            .collect::<Vec<_>>(),
                    )
                    .with_ptx_targets(
                        same.ptx_targets()
                            .iter()
                            .chain(record.ptx_targets())
                            .copied()
                            .collect::<Vec<_>>(),
                    );
                for (set, digest) in record.header_sets() {
                    joined = joined.with_header_set(set, digest);
                }
                *same = joined;
            }
            None => merged.push(record),
        }
    }
    BuildRecord::from_toolchains(merged)
}

/// What an application keeps of a full record: per toolchain (by NVRTC release),
/// the CUBIN and PTX targets.
struct Keep(Vec<(crate::NvrtcVersion, Vec<Arch>, Vec<Arch>)>);

impl Keep {
    fn of(&self, nvrtc: &crate::NvrtcVersion) -> (Vec<Arch>, Vec<Arch>) {
        self.0
            .iter()
            .find(|(v, ..)| v == nvrtc)
            .map(|(_, cubins, ptx)| (cubins.clone(), ptx.clone()))
            .unwrap_or_default()
    }
}

/// The parsed `KILN_CUDA_ARCHS`: the GPUs named, and whether `ptx` was.
struct ArchSwitch {
    devices: Vec<Arch>,
    ptx: bool,
}

/// What `full` must keep so that every named GPU (every known GPU when none is
/// named) gets its best entry on every named driver (every driver from the
/// record's oldest when none is named), plus, with `ptx` or when no GPU is named,
/// the PTX of every toolchain a named driver loads.
fn embedded(full: &BuildRecord, archs: Option<&ArchSwitch>, drivers: Option<&[i32]>) -> Keep {
    let mut all_drivers: Vec<i32> = KNOWN_DRIVERS.to_vec();
    for toolchain in full.toolchains() {
        all_drivers.push(toolchain.ptx_driver());
    }
    all_drivers.sort_unstable();
    all_drivers.dedup();
    let in_range = |driver: i32| match drivers {
        None => driver >= full.oldest_driver(),
        Some(named) => named
            .iter()
            .any(|from| driver >= *from && driver / 1000 == from / 1000),
    };
    let driver_list: Vec<i32> = all_drivers.into_iter().filter(|d| in_range(*d)).collect();
    let devices: Vec<Arch> = match archs {
        Some(switch) => switch.devices.clone(),
        None => KNOWN_GPUS.iter().map(|g| g.arch()).collect(),
    };
    let mut keep: Vec<(crate::NvrtcVersion, Vec<Arch>, Vec<Arch>)> = full
        .toolchains()
        .iter()
        .map(|t| (t.nvrtc().clone(), Vec::new(), Vec::new()))
        .collect();
    for device in &devices {
        for driver in &driver_list {
            let known = super::select::known_gpu(*device);
            if archs.is_none() && known.is_some_and(|g| !g.supported_by(*driver)) {
                continue;
            }
            let at = Device::new(*device).with_driver(*driver);
            let Some(best) = select(&at, full).list.first().copied() else {
                continue;
            };
            let (_, cubins, ptx) = &mut keep[best.toolchain];
            cubins.push(best.target);
            if best.selection == Selection::Ptx {
                ptx.push(best.target);
            }
        }
    }
    let keep_ptx = archs.is_none_or(|switch| switch.ptx);
    if keep_ptx {
        for (index, toolchain) in full.toolchains().iter().enumerate() {
            if driver_list.iter().any(|d| *d >= toolchain.ptx_driver()) {
                let (_, cubins, ptx) = &mut keep[index];
                cubins.extend(toolchain.ptx_targets());
                ptx.extend(toolchain.ptx_targets());
            }
        }
    }
    for (_, cubins, ptx) in &mut keep {
        cubins.sort();
        cubins.dedup();
        ptx.sort();
        ptx.dedup();
    }
    Keep(keep)
}

/// `KILN_CUDA_ARCHS`: unset or empty is `None`.
fn parse_arch_switch(value: Option<std::ffi::OsString>) -> Result<Option<ArchSwitch>, InvalidArch> {
    let Some(text) = value.and_then(|v| v.into_string().ok()) else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let mut switch = ArchSwitch {
        devices: Vec::new(),
        ptx: false,
    };
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if item.eq_ignore_ascii_case("ptx") || item.eq_ignore_ascii_case("+ptx") {
            switch.ptx = true;
        } else {
            switch.devices.push(item.parse()?);
        }
    }
    Ok(Some(switch))
}

/// `KILN_CUDA_DRIVERS`: unset or empty is `None`.
fn parse_driver_switch(value: Option<std::ffi::OsString>) -> Result<Option<Vec<i32>>, ShipError> {
    let Some(text) = value.and_then(|v| v.into_string().ok()) else {
        return Ok(None);
    };
    if text.trim().is_empty() {
        return Ok(None);
    }
    let drivers = text
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|item| {
            parse_cuda_version(item).ok_or_else(|| ShipError::InvalidDriverList {
                given: text.clone(),
                item: item.to_owned(),
            })
        })
        .collect::<Result<Vec<i32>, ShipError>>()?;
    Ok(Some(drivers))
}

/// A job's label: `name target`, and the CUDA major when the plan names one.
fn label(name: &str, target: Arch, family: &Family) -> String {
    match family.cuda {
        Some(major) => format!("{name} {target} cuda{major}"),
        None => format!("{name} {target}"),
    }
}

/// One (spec, toolchain, target) of the block.
enum Job<'s, S> {
    /// Cannot even be keyed here.
    Missing(Unavailable),
    /// Looked up, then compiled if missing.
    Get {
        spec: &'s S,
        target: Arch,
        owner: kiln_core::Owner,
        key: kiln_core::Key,
        toolchain: &'s PlanToolchain,
        keying: &'s Arc<Toolchain>,
    },
}

impl<S> Job<'_, S> {
    /// Phase 5, on the session's threads: the entry from the session's cache
    /// (the shipped image, the disk or the remote tier), else compiled here
    /// (always, under `KILN_ALWAYS_COMPILE`).
    fn run(
        self,
        cache: &Cache,
        always: bool,
        request: impl Fn(&S, &Toolchain, Arch) -> Result<KernelRequest, ShipError>,
    ) -> Result<(), BoxError> {
        match self {
            Job::Missing(why) => Err(why.into()),
            Job::Get {
                spec,
                target,
                owner,
                key,
                toolchain,
                keying,
            } => {
                if !always && cache.get_cached(&owner, &key).is_some() {
                    return Ok(());
                }
                compile_here(
                    cache, toolchain, keying, spec, request, target, &owner, &key,
                )
            }
        }
    }
}

/// What a precompile block read before it planned ([`ShipPlan::precompile`]'s
/// first phase).
struct BlockSettings {
    /// `KILN_CUDA_ARCHS` as given, and parsed.
    archs_text: Option<std::ffi::OsString>,
    archs: Option<ArchSwitch>,
    /// `KILN_CUDA_DRIVERS` as given, and parsed.
    drivers_text: Option<std::ffi::OsString>,
    drivers: Option<Vec<i32>>,
    /// The variables a toolchain search reads, as the build sees them.
    env: Vec<(String, std::ffi::OsString)>,
    /// `KILN_ALWAYS_COMPILE`: every entry compiled here, none from the image.
    always: bool,
    /// The shipped image's record, unless `always`.
    shipped: Option<BuildRecord>,
}

impl BlockSettings {
    /// Whether a switch narrows what the application embeds.
    fn narrowed(&self) -> bool {
        self.archs.is_some() || self.drivers.is_some()
    }
}

/// The plan's toolchains with the one that keys each's entries, and the
/// records of what they key ([`ShipPlan::precompile`]'s second phase).
struct KeyedToolchains {
    toolchains: Vec<PlanToolchain>,
    /// Per toolchain: the shipped record's, else this machine's, else why none.
    keyings: Vec<LocalToolchain>,
    /// Per toolchain that keys entries: its record, header sets filled in.
    records: Vec<Option<ToolchainRecord>>,
    /// Every record together, with the plan's oldest driver.
    full: BuildRecord,
}

/// The jobs of a block and, when a switch narrows it, the records of what it
/// keeps ([`ShipPlan::precompile`]'s fourth phase).
struct BlockWork<'s, S> {
    jobs: Vec<(String, Job<'s, S>)>,
    kept: Vec<ToolchainRecord>,
}

impl KeyedToolchains {
    /// Phase 3: the drivers the plan serves, checked before anything compiles.
    /// Keyed here, a gap fails the build; keyed by the shipped record, it is a
    /// warning and the build is not for shipping.
    fn check_drivers(
        &self,
        session: &mut Session<'_>,
        settings: &BlockSettings,
    ) -> Result<(), ShipError> {
        if settings.narrowed() || self.full.toolchains().is_empty() {
            return Ok(());
        }
        if let Err(gaps) = coverage(&self.full).check() {
            if self.toolchains.iter().any(|t| t.recorded.is_none()) {
                return Err(ShipError::DriverGaps { gaps });
            }
            session.not_for_shipping(gaps.clone());
            session.warn(format!(
                "the shipped image does not serve every driver it states: {}",
                one_line(&gaps)
            ));
        }
        Ok(())
    }

    /// What the application embeds (`KILN_CUDA_ARCHS`, `KILN_CUDA_DRIVERS`);
    /// `None`: everything the plan ships.
    fn embedded(&self, session: &mut Session<'_>, settings: &BlockSettings) -> Option<Keep> {
        if !settings.narrowed() {
            return None;
        }
        let why = [
            settings
                .archs_text
                .as_ref()
                .map(|v| format!("{CUDA_ARCHS}={}", v.to_string_lossy())),
            settings
                .drivers_text
                .as_ref()
                .map(|v| format!("{CUDA_DRIVERS}={}", v.to_string_lossy())),
        ]
        .into_iter()
        .flatten()
        .collect::<Vec<_>>()
        .join(" ");
        session.not_for_shipping(format!("{why} limits the code to those GPUs and drivers"));
        Some(embedded(
            &self.full,
            settings.archs.as_ref(),
            settings.drivers.as_deref(),
        ))
    }

    /// Phase 4: one job per (spec, toolchain, target): looked up and compiled
    /// if missing, or left out with why when the toolchain is missing here. A
    /// request that fails otherwise fails the block.
    fn work<'s, S>(
        &'s self,
        session: &mut Session<'_>,
        keep: Option<&Keep>,
        specs: &'s [S],
        request: impl Fn(&S, &Toolchain, Arch) -> Result<KernelRequest, ShipError>,
    ) -> Result<BlockWork<'s, S>, ShipError> {
        let names = Toolchain::names_only();
        let mut jobs = Vec::new();
        let mut kept = Vec::new();
        for (index, (toolchain, keying)) in self.toolchains.iter().zip(&self.keyings).enumerate() {
            let family = &toolchain.family;
            let (targets, ptx) = match (keep, keying) {
                (Some(keep), Ok(keying)) => keep.of(keying.nvrtc()),
                _ => (family.targets.clone(), family.ptx.clone()),
            };
            if let (Some(record), true) = (&self.records[index], keep.is_some())
                && !targets.is_empty()
            {
                kept.push(
                    record
                        .clone()
                        .with_cubin_targets(targets.iter().copied())
                        .with_ptx_targets(ptx.iter().copied()),
                );
            }
            for spec in specs {
                for &target in &targets {
                    let keyed = match keying {
                        Ok(keying) => request(spec, keying, target),
                        Err(why) => Err(ToolchainError::Shared(Arc::clone(why)).into()),
                    };
                    let built = match keyed {
                        Ok(built) => built,
                        Err(error) if error.is_missing_toolchain() => {
                            let name = request(spec, &names, target)
                                .map(|r| r.name().to_owned())
                                .unwrap_or_else(|_| "a specialization".to_owned());
                            toolchain.not_found.store(true, Ordering::Relaxed);
                            let why = Unavailable::new(missing_toolchain(&error));
                            jobs.push((label(&name, target, family), Job::Missing(why)));
                            continue;
                        }
                        Err(error) => return Err(error),
                    };
                    let Ok(keying) = keying else { continue };
                    let owner = built.owner(keying.nvrtc())?;
                    let key = built.key()?;
                    if !ptx.contains(&target) {
                        session.leave_out(owner.digest(), &key, ArtifactKind::Ptx);
                    }
                    jobs.push((
                        label(built.name(), target, family),
                        Job::Get {
                            spec,
                            target,
                            owner,
                            key,
                            toolchain,
                            keying,
                        },
                    ));
                }
            }
        }
        Ok(BlockWork { jobs, kept })
    }
}

/// Phase 6: what the images depend on: the local toolchains' files, and where
/// a missing toolchain would appear.
fn declare_sources(session: &mut Session<'_>, toolchains: &[PlanToolchain], record: &BuildRecord) {
    for toolchain in toolchains {
        if let Some(Ok(local)) = toolchain.local.get() {
            declare_local_sources(session, local, record);
        }
        if toolchain.not_found.load(Ordering::Relaxed) {
            for place in toolchain.config().watched_places() {
                session.uses_source(place);
            }
            for variable in SEARCH_VARIABLES {
                session.uses_env(variable);
            }
        }
    }
}

/// The block's summary line: which GPUs and drivers the record serves, and
/// which switch left the others out.
fn summarize(
    session: &mut Session<'_>,
    settings: &BlockSettings,
    kept: bool,
    record: &BuildRecord,
) {
    let reach = coverage(record);
    let mut note = reach.summary();
    // The summary names the known GPUs with no code ("no code for sm_90,
    // ..."); say which switch left them out.
    if kept && !reach.unserved().is_empty() {
        note = format!(
            "{note} (what {} keeps)",
            [
                (CUDA_ARCHS, &settings.archs_text),
                (CUDA_DRIVERS, &settings.drivers_text)
            ]
            .into_iter()
            .filter(|(_, v)| v.is_some())
            .map(|(name, _)| name)
            .collect::<Vec<_>>()
            .join(" and "),
        );
    }
    if !record.toolchains().is_empty() {
        session.summary_note(note);
    }
}

/// Compiles the entry `(owner, key)` of `spec` for `target` with the local
/// toolchain of `toolchain`, when it derives the same owner and key as `keying`
/// (the shipped record's toolchain, or itself); otherwise the entry is
/// [`Unavailable`].
#[allow(clippy::too_many_arguments)]
fn compile_here<S>(
    cache: &Cache,
    toolchain: &PlanToolchain,
    keying: &Toolchain,
    spec: &S,
    request: impl Fn(&S, &Toolchain, Arch) -> Result<KernelRequest, ShipError>,
    target: Arch,
    owner: &kiln_core::Owner,
    key: &kiln_core::Key,
) -> Result<(), BoxError> {
    let not_found = |why: &dyn std::fmt::Display| {
        toolchain.not_found.store(true, Ordering::Relaxed);
        Unavailable::new(missing_toolchain(why))
    };
    let local = toolchain.local().map_err(|why| not_found(&why))?;
    let Some(compiler) = local.compiler() else {
        return Err(Unavailable::new("no NVRTC in this process").into());
    };
    let here = match request(spec, &local, target) {
        Ok(here) => here,
        Err(error) if error.is_missing_toolchain() => return Err(not_found(&error).into()),
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
    compiler.nvrtc().map_err(|why| not_found(&why))?;
    compiler.compile_cached(cache, &here)?;
    Ok(())
}

/// Declares what the local toolchain's compiles depend on: the NVRTC library file and
/// the folders of the header sets the record names.
fn declare_local_sources(session: &mut Session<'_>, local: &Toolchain, record: &BuildRecord) {
    let Some(compiler) = local.compiler() else {
        return;
    };
    if let Ok(nvrtc) = compiler.nvrtc()
        && nvrtc.location().path.is_absolute()
    {
        session.uses_source(&nvrtc.location().path);
    }
    let Some(recorded) = record
        .toolchains()
        .iter()
        .find(|t| t.nvrtc() == local.nvrtc())
    else {
        return;
    };
    for (set, _) in recorded.header_sets() {
        if let Ok(dir) = local.header_set(set)
            && let Some(path) = dir.path()
        {
            session.uses_source(path);
        }
    }
}

/// Why a missing toolchain leaves an entry out, and what to do.
fn missing_toolchain(why: &dyn std::fmt::Display) -> String {
    format!(
        "{why}; or use the library's shipped image (its author runs `kiln ship` where \
         the toolchain is)"
    )
}

/// `text` on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn parse_archs(list: &str) -> Result<Vec<Arch>, InvalidArch> {
    list.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::parse)
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
