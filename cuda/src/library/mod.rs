//! The run-time side of a kernel library: from a specialization the library holds to
//! the cached artifact for a device, with no toolchain when the images have it.
//!
//! A [`KernelLibrary`] holds what the library's build recorded ([`BuildRecord`], read
//! back with `env!`) and the library's function from a specialization to a
//! [`KernelRequest`]. [`KernelLibrary::get`]:
//!
//! 1. builds the requests of the shipped candidates for the device ([`select`](crate::select::select): exact
//!    CUBIN, compatible CUBINs, PTX) with the *recorded* toolchain, so owners and keys
//!    come from the record: NVRTC is not opened, no include tree is read, nothing is
//!    searched for; and looks each up in the cache's memory and images;
//! 2. on a miss, locates the local toolchain (once per process: NVRTC, then the
//!    header sets a request asks for) and gets the kernel for the device's exact arch
//!    through [`Compiler::compile_cached`](super::Compiler::compile_cached): memory,
//!    images, the disk and remote tiers, then NVRTC. Such entries name the local
//!    compiler and headers. Without NVRTC (a production machine), the kernel for
//!    the device's exact arch *as the recorded toolchain compiles it* is looked for
//!    in memory, the images and the disk and remote tiers ([`Cache::get_cached`]):
//!    a machine with the build's toolchain that compiled it at run time stored it
//!    under the same owner and key, so it is what a compile here would give. Only
//!    when that misses too is the miss [`ServeError::NotShipped`], which names the
//!    kernel, the arch, what was tried and what to install.
//!
//! [`KernelLibrary::get_kernel`] asks for one kernel of the program by name (an
//! `extern "C"` kernel a request of
//! [`KernelRequest::every_kernel`](crate::KernelRequest::every_kernel) found, or a
//! name expression's lowered name): each step then serves only an entry whose
//! artifact holds that kernel, so a kernel that exists only from `sm_80` is taken
//! from the newest shipped PTX that has it rather than missing from the lowest one.
//! An entry compiled for exactly the device's arch (its shipped CUBIN, or a compile)
//! that lacks the kernel proves the kernel does not exist for that arch:
//! [`ServeError::NoSuchKernel`].
//!
//! Each step that did not serve leaves an [`Attempt`]; [`ServeError::NotShipped`] lists
//! them. The requests are built once per (specialization, toolchain, arch), and
//! [`Served`] says which artifact it chose ([`Served::artifact`]: kind and target),
//! so that a loader need not select again.
//!
//! The order of step 1 (and the look for an entry compiled elsewhere) is one
//! walk, shared with [`KernelLibrary::kernels`] (a library's kernels for a
//! device and how each would be served, compiling nothing) and with
//! [`images`] (the same answers from images alone, for `kiln kernels`), so
//! that what they report is what `get_kernel` serves.
//!
//! Under `KILN_STRICT_TOOLCHAIN=1` ([`ToolchainPolicy::Strict`]) step 1 first locates
//! the local toolchain, defines its fingerprints in the cache
//! ([`Toolchain::define_in`]) and skips the shipped entries when the local NVRTC or a
//! header set the kernel uses differs from the recorded one.
//!
//! The answer is remembered per (cache, device, specialization) and kernel: a
//! repeated call is a hash lookup and one cache lookup, as long as the cache's world
//! has not moved (a definition changed) and the entry is still valid; otherwise it
//! is derived again. What a derivation builds that does not depend on the kernel
//! (the requests, their owners and keys, the entry compiled here, the entry points
//! of each entry looked in) is remembered per (cache, device, specialization) in
//! the same world, so the first call for another kernel of a program whose entry
//! was found looks the kernel's name up in that entry instead of deriving the
//! requests and keys again.
//!
//! ```no_run
//! use kiln_cuda::{Arch, Device, KernelLibrary, KernelRequest, Toolchain};
//!
//! #[derive(Clone, Debug, PartialEq, Eq, Hash)]
//! struct Scale { float: bool }
//!
//! // Shared with the build script (#[path]); a CUB kernel would add
//! // `.include_dir(toolchain.cccl()?)`: the recorded digest, or the local tree.
//! fn request(spec: &Scale, _toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, kiln_cuda::Error> {
//!     let t = if spec.float { "float" } else { "double" };
//!     Ok(KernelRequest::new(format!("scale_{t}"), format!(
//!         "extern \"C\" __global__ void scale_{t}({t}* x) {{ x[threadIdx.x] *= 2; }}"), arch)
//!         .name_expression(format!("scale_{t}")))
//! }
//!
//! // In the library: `KernelLibrary::new(env!("KILN_CUDA_BUILD"), request)`, the
//! // record its build script set (see ShipPlan). Here, a record written out:
//! static KERNELS: KernelLibrary<Scale> = KernelLibrary::new(
//!     "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_80,sm_90 ptx=sm_80",
//!     request,
//! );
//!
//! let device = Device::new("sm_86".parse::<Arch>()?);
//! let served = KERNELS.get(kiln_core::global(), &device, &Scale { float: true })?;
//! println!("{} from {}", served.selection(), served.target()); // compatible-cubin from sm_80
//! // One kernel of the program by name (here the program has one):
//! let scale = KERNELS.get_kernel(kiln_core::global(), &device, &Scale { float: true }, "scale_float")?;
//! assert_eq!(scale.artifact().target, served.target());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod attempt;
mod derive;
pub(crate) mod error;
pub mod images;
mod listing;
mod program;
mod served;
mod stats;
mod walk;

use std::collections::HashMap;

use foldhash::fast::RandomState;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use kiln_core::{ArtifactKind, Cache, Digest, Key, World};

use super::select::Selection;
use super::{Arch, BuildRecord, Device, Error, KernelRequest, Toolchain, ToolchainPolicy};
use crate::toolchain::error::ToolchainError;

pub use attempt::{Attempt, Attempts};
pub use error::ServeError;
pub use listing::{KernelOutcome, ListedKernel};
pub use served::{ChosenArtifact, Served};
pub use stats::SelectionStats;

use derive::{Derivation, Library, LocalToolchain};
use program::ProgramMemo;
use program::Under;
use stats::{Counts, PROCESS_COUNTS};

/// A library's function from a specialization to its compile request for an arch,
/// under a toolchain (recorded or local). Header sets come from the toolchain
/// ([`Toolchain::cccl`], [`Toolchain::cuda_runtime`]), so that the recorded toolchain
/// gives the same keys as the one the build used.
pub type RequestFn<S> = fn(&S, &Toolchain, Arch) -> Result<KernelRequest, Error>;

/// What a library's record says, parsed once: the record and its toolchains.
struct Shipped {
    record: BuildRecord,
    recorded: Vec<Toolchain>,
}

enum RecordSource {
    Text(&'static str),
    Parsed(BuildRecord),
}

/// One remembered answer.
struct Memo {
    cache: usize,
    device: Device,
    world: World,
    owner: Digest,
    key: Key,
    selection: Selection,
    artifact: ChosenArtifact,
    request: Arc<KernelRequest>,
}

/// Answers remembered per (specialization, kernel), and program memos per
/// specialization, beyond this many (caches × devices) are dropped oldest first.
const MEMOS_PER_SPEC: usize = 8;

/// What is remembered, by specialization (foldhash: SipHash took over a third
/// of a repeated call).
type Memos<S> = HashMap<S, SpecMemos, RandomState>;

/// What is remembered of one specialization.
#[derive(Default)]
struct SpecMemos {
    /// The answers of [`KernelLibrary::get`] (any kernel).
    any: Vec<Memo>,
    /// The answers of [`KernelLibrary::get_kernel`], by kernel name.
    kernels: HashMap<Box<str>, Vec<Memo>, RandomState>,
    /// The program memos, one per (cache, device).
    programs: Vec<Arc<ProgramMemo>>,
}

/// A kernel library's kernels: the shipped ones by their recorded toolchain, the
/// others compiled with the local one (see the module documentation).
///
/// `S` is the library's specialization type (hashable: answers are remembered per
/// specialization).
pub struct KernelLibrary<S> {
    record: RecordSource,
    request: RequestFn<S>,
    policy: Option<ToolchainPolicy>,
    shipped: OnceLock<Result<Shipped, Arc<ToolchainError>>>,
    local: OnceLock<LocalToolchain>,
    given_local: bool,
    memo: OnceLock<RwLock<Memos<S>>>,
    counts: Counts,
}

impl<S> fmt::Debug for KernelLibrary<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let record = match &self.record {
            RecordSource::Text(text) => (*text).to_owned(),
            RecordSource::Parsed(record) => record.to_string(),
        };
        f.debug_struct("KernelLibrary")
            .field("record", &record)
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl<S> KernelLibrary<S>
where
    S: Clone + Eq + Hash + fmt::Debug + Send + Sync,
{
    /// A library whose build recorded `record` (the text of a [`BuildRecord`]:
    /// `env!("KILN_CUDA_BUILD")`, set by [`ShipPlan`](super::ShipPlan)), building
    /// requests with `request`. Parsed on first use; usable in a `static`.
    pub const fn new(record: &'static str, request: RequestFn<S>) -> KernelLibrary<S> {
        KernelLibrary {
            record: RecordSource::Text(record),
            request,
            policy: None,
            shipped: OnceLock::new(),
            local: OnceLock::new(),
            given_local: false,
            memo: OnceLock::new(),
            counts: Counts::new(),
        }
    }

    /// A library with a record already parsed.
    pub fn with_record(record: BuildRecord, request: RequestFn<S>) -> KernelLibrary<S> {
        KernelLibrary {
            record: RecordSource::Parsed(record),
            ..Self::new("", request)
        }
    }

    /// The same library under `policy` instead of the process's
    /// (`KILN_STRICT_TOOLCHAIN`).
    pub fn with_policy(mut self, policy: ToolchainPolicy) -> KernelLibrary<S> {
        self.policy = Some(policy);
        self
    }

    /// The same library compiling with `local` (or, given an error, with none)
    /// instead of locating this machine's toolchain ([`Toolchain::local`]).
    pub fn with_local_toolchain(
        self,
        local: Result<Toolchain, ToolchainError>,
    ) -> KernelLibrary<S> {
        KernelLibrary {
            local: OnceLock::from(local.map(Arc::new).map_err(Arc::new)),
            given_local: true,
            ..self
        }
    }

    /// The build record.
    ///
    /// # Errors
    /// [`ToolchainError::BadBuildRecord`] when the embedded record does not parse.
    pub fn record(&self) -> Result<&BuildRecord, ToolchainError> {
        Ok(&self.shipped()?.record)
    }

    /// The policy in force.
    pub fn policy(&self) -> ToolchainPolicy {
        self.policy.unwrap_or_else(ToolchainPolicy::process)
    }

    /// How many kernels this library served each way.
    pub fn stats(&self) -> SelectionStats {
        self.counts.snapshot()
    }

    /// The program of `spec` for `device`, from `cache`: a shipped entry that runs on
    /// the device, else one compiled here for its exact arch (see the module
    /// documentation). When the program's kernels differ by arch, ask for the one
    /// you launch with [`KernelLibrary::get_kernel`].
    ///
    /// # Errors
    /// [`ServeError::NotShipped`] when no shipped entry serves, this process cannot
    /// compile (no NVRTC, or no headers) and the cache's tiers do not hold the
    /// kernel as the build's toolchain compiles it; a compile failure; the errors of the
    /// library's request function; [`ToolchainError::BadBuildRecord`].
    pub fn get<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
    ) -> Result<Served<'c>, ServeError> {
        self.serve(cache, device, spec, None)
    }

    /// The entry of `spec` for `device` that holds kernel `kernel` (an entry-point
    /// name: an `extern "C"` kernel's name, or a name expression's lowered name):
    /// the best shipped entry that holds it and runs on the device (exact CUBIN,
    /// compatible CUBIN, the newest PTX that has it), else one compiled here for the
    /// device's exact arch.
    ///
    /// # Errors
    /// [`ServeError::NoSuchKernel`] when an entry compiled for exactly the device's arch
    /// (its shipped CUBIN, or a compile) does not hold the kernel: it does not exist
    /// for that arch; otherwise those of [`KernelLibrary::get`].
    pub fn get_kernel<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        kernel: &str,
    ) -> Result<Served<'c>, ServeError> {
        self.serve(cache, device, spec, Some(kernel))
    }

    /// Every kernel of `specs` for `device`, as `cache` serves it now, compiling
    /// nothing: per specialization, each entry point its entries hold (for any
    /// target of the record), and how [`KernelLibrary::get_kernel`] would serve it
    /// on a machine without NVRTC: from which artifact (kind, target, NVRTC
    /// release, and so the oldest driver that loads it:
    /// [`ChosenArtifact::driver_needed`]), not for this arch, or missing, with
    /// what was tried. The same walk as `get_kernel`'s decides each answer; no
    /// answer is remembered and no statistic counted.
    ///
    /// Before deploying, ask for the GPUs and drivers of the machines the
    /// application runs on: a missing kernel is one the application would compile
    /// there (or fail for, without NVRTC). `kiln kernels` answers the same
    /// question from an application binary's images.
    ///
    /// ```no_run
    /// use kiln_cuda::{Arch, Device, KernelLibrary, KernelRequest, Toolchain};
    /// # fn request(_: &u8, _: &Toolchain, arch: Arch) -> Result<KernelRequest, kiln_cuda::Error> {
    /// #     Ok(KernelRequest::new("k", "extern \"C\" __global__ void k() {}", arch).name_expression("k"))
    /// # }
    /// static KERNELS: KernelLibrary<u8> = KernelLibrary::new(
    ///     "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_80,sm_90 ptx=sm_80",
    ///     request,
    /// );
    /// let h100_on_r570 = Device::new("sm_90".parse::<Arch>()?).with_driver(12080);
    /// for kernel in KERNELS.kernels(kiln_core::global(), &h100_on_r570, &[0, 1])? {
    ///     if kernel.outcome.is_missing() {
    ///         eprintln!("{} {:?}: {}", kernel.program, kernel.kernel, kernel.outcome);
    ///     }
    /// }
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`ToolchainError::BadBuildRecord`]; the errors of the library's request function; a
    /// key that cannot be derived.
    pub fn kernels<'s>(
        &self,
        cache: &Cache,
        device: &Device,
        specs: impl IntoIterator<Item = &'s S>,
    ) -> Result<Vec<ListedKernel<S>>, ServeError>
    where
        S: 's,
    {
        let shipped = self.shipped()?;
        let mut listed = Vec::new();
        for spec in specs {
            let memo = self.program_memo(cache, device, spec);
            let (program, kernels) = self.kernel_names(cache, device, spec, shipped, &memo)?;
            let named: Vec<Option<String>> = if kernels.is_empty() {
                vec![None]
            } else {
                kernels.into_iter().map(Some).collect()
            };
            for kernel in named {
                let mut derivation = Derivation::new(
                    self,
                    cache,
                    device,
                    spec,
                    kernel.as_deref(),
                    &shipped.record,
                    &shipped.recorded,
                    &memo,
                );
                let outcome = match derivation.without_compiling() {
                    Ok(Some(served)) => KernelOutcome::Served {
                        selection: served.selection(),
                        artifact: served.artifact().clone(),
                    },
                    Ok(None) => KernelOutcome::Missing {
                        tried: Attempts(derivation.attempts()),
                    },
                    Err(ServeError::NoSuchKernel { built, .. }) => KernelOutcome::NotForArch {
                        selection: Selection::ALL
                            .into_iter()
                            .find(|s| s.as_str() == built)
                            .unwrap_or(Selection::ExactCubin),
                        target: device.arch(),
                    },
                    Err(error) => return Err(error),
                };
                listed.push(ListedKernel {
                    spec: spec.clone(),
                    program: program.clone(),
                    kernel,
                    outcome,
                });
            }
        }
        Ok(listed)
    }

    /// The program name of `spec`, and every entry point (sorted) of its entries
    /// in `cache` for the targets of every recorded toolchain.
    fn kernel_names(
        &self,
        cache: &Cache,
        device: &Device,
        spec: &S,
        shipped: &Shipped,
        memo: &program::ProgramMemo,
    ) -> Result<(String, Vec<String>), ServeError> {
        let mut program = None;
        let mut names = std::collections::BTreeSet::new();
        for (index, (record, recorded)) in shipped
            .record
            .toolchains()
            .iter()
            .zip(&shipped.recorded)
            .enumerate()
        {
            let mut targets: Vec<Arch> = record.cubin_targets().to_vec();
            targets.extend(record.ptx_targets());
            targets.sort();
            targets.dedup();
            for target in targets {
                let keyed = memo.keyed(Under::Recorded(index), target, || {
                    Ok((self.request)(spec, recorded, target)?)
                })?;
                program.get_or_insert_with(|| keyed.request().name().to_owned());
                let owner = keyed.owner(recorded.nvrtc())?.digest();
                let Some(hit) = cache.lookup(&owner, &keyed.key()?) else {
                    continue;
                };
                for artifact in hit.artifacts() {
                    if matches!(artifact.kind, ArtifactKind::Cubin | ArtifactKind::Ptx) {
                        names.extend(artifact.entry_points.iter().map(|&n| n.to_owned()));
                    }
                }
            }
        }
        let program = match program {
            Some(program) => program,
            None => (self.request)(spec, &Toolchain::names_only(), device.arch())
                .map(|r| r.name().to_owned())
                .unwrap_or_else(|_| format!("{spec:?}")),
        };
        Ok((program, names.into_iter().collect()))
    }

    fn serve<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        kernel: Option<&str>,
    ) -> Result<Served<'c>, ServeError> {
        if let Some(served) = self.remembered(cache, device, spec, kernel) {
            return Ok(served);
        }
        let shipped = self.shipped()?;
        let memo = self.program_memo(cache, device, spec);
        let mut derivation = Derivation::new(
            self,
            cache,
            device,
            spec,
            kernel,
            &shipped.record,
            &shipped.recorded,
            &memo,
        );
        let served = derivation.run()?;
        Ok(self.remember(cache, derivation.world(), device, spec, kernel, served))
    }

    /// The program memo of `spec` for `device` in `cache`: the one remembered, if
    /// made in the cache's current world; else a new one, remembered.
    fn program_memo(&self, cache: &Cache, device: &Device, spec: &S) -> Arc<ProgramMemo> {
        let id = cache_id(cache);
        let all = self.memo.get_or_init(Default::default);
        let current = |programs: &[Arc<ProgramMemo>]| {
            programs
                .iter()
                .find(|p| p.is_for(id, device) && p.is_current(cache))
                .cloned()
        };
        {
            let read = all.read().unwrap_or_else(PoisonError::into_inner);
            if let Some(found) = read.get(spec).and_then(|m| current(&m.programs)) {
                return found;
            }
        }
        let mut write = all.write().unwrap_or_else(PoisonError::into_inner);
        let programs = &mut spec_memos(&mut write, spec).programs;
        if let Some(found) = current(programs) {
            return found;
        }
        let made = Arc::new(ProgramMemo::new(id, *device, cache.world()));
        programs.retain(|p| !p.is_for(id, device));
        if programs.len() >= MEMOS_PER_SPEC {
            programs.remove(0);
        }
        programs.push(Arc::clone(&made));
        made
    }

    fn remembered<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        kernel: Option<&str>,
    ) -> Option<Served<'c>> {
        if cache.config().always_compile {
            return None;
        }
        let id = cache_id(cache);
        let memo = self
            .memo
            .get()?
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let memos = memo.get(spec)?;
        let found = match kernel {
            None => &memos.any,
            Some(kernel) => memos.kernels.get(kernel)?,
        }
        .iter()
        .find(|m| m.cache == id && m.device == *device)?;
        if found.world != cache.world() {
            return None;
        }
        let hit = cache.lookup(&found.owner, &found.key)?;
        Some(Served {
            hit,
            selection: found.selection,
            artifact: found.artifact.clone(),
            request: Arc::clone(&found.request),
        })
    }

    fn remember<'c>(
        &self,
        cache: &'c Cache,
        world: World,
        device: &Device,
        spec: &S,
        kernel: Option<&str>,
        served: Served<'c>,
    ) -> Served<'c> {
        self.counts.bump(served.selection);
        PROCESS_COUNTS.bump(served.selection);
        let memo = Memo {
            cache: cache_id(cache),
            device: *device,
            world,
            owner: served.hit.owner(),
            key: served.hit.key(),
            selection: served.selection,
            artifact: served.artifact.clone(),
            request: Arc::clone(&served.request),
        };
        let mut all = self
            .memo
            .get_or_init(Default::default)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let spec_memos = spec_memos(&mut all, spec);
        let memos = match kernel {
            None => &mut spec_memos.any,
            Some(kernel) => spec_memos.kernels.entry(kernel.into()).or_default(),
        };
        memos.retain(|m| !(m.cache == memo.cache && m.device == memo.device));
        if memos.len() >= MEMOS_PER_SPEC {
            memos.remove(0);
        }
        memos.push(memo);
        served
    }

    fn shipped(&self) -> Result<&Shipped, ToolchainError> {
        let parsed = self.shipped.get_or_init(|| {
            let record = match &self.record {
                RecordSource::Text(text) => text.parse::<BuildRecord>().map_err(Arc::new)?,
                RecordSource::Parsed(record) => record.clone(),
            };
            let recorded = record
                .toolchains()
                .iter()
                .map(Toolchain::from_record)
                .collect();
            Ok(Shipped { record, recorded })
        });
        parsed
            .as_ref()
            .map_err(|e| ToolchainError::Shared(Arc::clone(e)))
    }
}

impl<S> Library<S> for KernelLibrary<S>
where
    S: Clone + Eq + Hash + fmt::Debug + Send + Sync,
{
    fn request(
        &self,
        spec: &S,
        toolchain: &Toolchain,
        arch: Arch,
    ) -> Result<KernelRequest, ServeError> {
        Ok((self.request)(spec, toolchain, arch)?)
    }

    fn policy(&self) -> ToolchainPolicy {
        KernelLibrary::policy(self)
    }

    fn local(&self) -> LocalToolchain {
        self.local.get_or_init(process_local).clone()
    }

    fn local_of_major(&self, major: u32) -> LocalToolchain {
        // A library given its local toolchain compiles with that one only.
        if self.given_local {
            return self.local();
        }
        process_local_of_major(major)
    }
}

/// The memos of `spec` in `all`, made empty if there are none.
fn spec_memos<'m, S: Clone + Eq + Hash>(all: &'m mut Memos<S>, spec: &S) -> &'m mut SpecMemos {
    all.entry(spec.clone()).or_default()
}

/// The process's local toolchain, located once (a failure too: a process without
/// NVRTC searches once).
fn process_local() -> LocalToolchain {
    static LOCAL: OnceLock<LocalToolchain> = OnceLock::new();
    LOCAL
        .get_or_init(|| Toolchain::local().map(Arc::new).map_err(Arc::new))
        .clone()
}

/// The process's local toolchain of CUDA major `major`, located once per major.
fn process_local_of_major(major: u32) -> LocalToolchain {
    static LOCAL: Mutex<Vec<(u32, LocalToolchain)>> = Mutex::new(Vec::new());
    let mut all = LOCAL.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, found)) = all.iter().find(|(m, _)| *m == major) {
        return found.clone();
    }
    let found = Toolchain::local_of_major(major, false)
        .map(Arc::new)
        .map_err(Arc::new);
    all.push((major, found.clone()));
    found
}

/// A cache's identity for the memo: its address. A cache dropped and another made at
/// the same address could share a memo; its answers are (owner, key) pairs, so the
/// lookup in the new cache still finds only that entry, valid, or misses.
fn cache_id(cache: &Cache) -> usize {
    std::ptr::from_ref(cache) as usize
}
