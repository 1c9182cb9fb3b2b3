//! The run-time side of a kernel library: from a specialization the library holds to
//! the cached artifact for a device, with no toolchain when the images have it.
//!
//! A [`KernelLibrary`] holds what the library's build recorded ([`BuildRecord`], read
//! back with `env!`) and the library's function from a specialization to a
//! [`KernelRequest`]. [`KernelLibrary::get`]:
//!
//! 1. builds the requests of the shipped candidates for the device ([`select`]: exact
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
//!    when that misses too is the miss [`Error::NotShipped`], which names the
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
//! [`Error::NoSuchKernel`].
//!
//! Each step that did not serve leaves an [`Attempt`]; [`Error::NotShipped`] lists
//! them. The requests are built once per (specialization, toolchain, arch), and
//! [`Served`] says which artifact it chose ([`Served::artifact`]: kind and target),
//! so that a loader need not select again.
//!
//! Under `KILN_STRICT_TOOLCHAIN=1` ([`ToolchainPolicy::Strict`]) step 1 first locates
//! the local toolchain, defines its fingerprints in the cache
//! ([`Toolchain::define_in`]) and skips the shipped entries when the local NVRTC or a
//! header set the kernel uses differs from the recorded one.
//!
//! The answer is remembered per (cache, device, specialization): a repeated call is
//! a hash lookup and one cache lookup, as long as the cache's world has not moved
//! (a definition changed) and the entry is still valid; otherwise it is derived again.
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

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use kiln_core::{ArtifactKind, Cache, Digest, Hit, Key, World};

use super::select::{Selection, select};
use super::{
    Arch, BuildRecord, Device, Error, KernelRequest, NvrtcVersion, Toolchain, ToolchainPolicy,
};

/// A library's function from a specialization to its compile request for an arch,
/// under a toolchain (recorded or local). Header sets come from the toolchain
/// ([`Toolchain::cccl`], [`Toolchain::cuda_runtime`]), so that the recorded toolchain
/// gives the same keys as the one the build used.
pub type RequestFn<S> = fn(&S, &Toolchain, Arch) -> Result<KernelRequest, crate::Error>;

/// How many kernels were served each way ([`Selection`]), counted once per
/// (cache, device, specialization, kernel) each time it is derived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SelectionStats {
    /// Shipped CUBINs for exactly the device's arch.
    pub exact_cubin: u64,
    /// Shipped CUBINs of a compatible arch.
    pub compatible_cubin: u64,
    /// Shipped PTX (JIT-compiled by the driver at load).
    pub ptx: u64,
    /// Compiled on this machine (now, or earlier: memory, disk or remote tier).
    pub compiled: u64,
}

impl SelectionStats {
    /// The counts of every [`KernelLibrary`] of this process together.
    pub fn process() -> SelectionStats {
        PROCESS_COUNTS.snapshot()
    }

    /// The count of `selection`.
    pub fn count(&self, selection: Selection) -> u64 {
        match selection {
            Selection::ExactCubin => self.exact_cubin,
            Selection::CompatibleCubin => self.compatible_cubin,
            Selection::Ptx => self.ptx,
            Selection::Compiled => self.compiled,
        }
    }
}

struct Counts([AtomicU64; 4]);

static PROCESS_COUNTS: Counts = Counts::new();

impl Counts {
    const fn new() -> Counts {
        Counts([const { AtomicU64::new(0) }; 4])
    }

    fn bump(&self, selection: Selection) {
        let index = Selection::ALL
            .iter()
            .position(|s| *s == selection)
            .unwrap_or(0);
        self.0[index].fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> SelectionStats {
        let [exact_cubin, compatible_cubin, ptx, compiled] =
            self.0.each_ref().map(|c| c.load(Ordering::Relaxed));
        SelectionStats {
            exact_cubin,
            compatible_cubin,
            ptx,
            compiled,
        }
    }
}

/// The artifact of an entry a [`KernelLibrary`] chose for a device: what to load
/// ([`ArtifactKind::Cubin`] or [`ArtifactKind::Ptx`]) and the arch it was built
/// for. A loader obeys it: it runs on the device (invariant 17, ARCHITECTURE.md).
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ChosenArtifact {
    /// The artifact to load: the CUBIN of an exact, compatible or compiled entry,
    /// the PTX of a PTX one.
    pub kind: ArtifactKind,
    /// The arch the entry was built for (its owner's target).
    pub target: Arch,
}

impl ChosenArtifact {
    fn of(selection: Selection, target: Arch) -> ChosenArtifact {
        ChosenArtifact {
            kind: artifact_kind(selection),
            target,
        }
    }
}

/// The artifact a selection loads: the PTX of a PTX candidate, else the CUBIN.
fn artifact_kind(selection: Selection) -> ArtifactKind {
    match selection {
        Selection::Ptx => ArtifactKind::Ptx,
        _ => ArtifactKind::Cubin,
    }
}

/// How many entry points an [`Error::NoSuchKernel`] lists.
const KERNELS_LISTED: usize = 16;

/// A kernel as served to a device: the cache entry, what kind of code it is, the
/// artifact chosen, and the request it is the entry of (for the loader).
#[derive(Clone)]
pub struct Served<'c> {
    hit: Hit<'c>,
    selection: Selection,
    artifact: ChosenArtifact,
    request: Arc<KernelRequest>,
}

impl<'c> Served<'c> {
    /// The cache entry (its payloads are borrowed from it: see [`Hit`]).
    pub fn hit(&self) -> &Hit<'c> {
        &self.hit
    }

    /// The cache entry, taken out of the served kernel.
    pub fn into_hit(self) -> Hit<'c> {
        self.hit
    }

    /// Exact CUBIN, compatible CUBIN, PTX or compiled.
    pub fn selection(&self) -> Selection {
        self.selection
    }

    /// The artifact chosen for the device: its kind and the arch it was built for.
    pub fn artifact(&self) -> &ChosenArtifact {
        &self.artifact
    }

    /// The request whose entry this is (its arch is the entry's target; load the hit
    /// with it: [`ModuleCache::load`](super::loader::ModuleCache::load)).
    pub fn request(&self) -> &KernelRequest {
        &self.request
    }

    /// The arch the entry was compiled for.
    pub fn target(&self) -> Arch {
        self.artifact.target
    }
}

impl fmt::Debug for Served<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("name", &self.hit.name())
            .field("owner", &self.hit.owner_label())
            .field("source", &self.hit.source())
            .field("selection", &self.selection)
            .field("artifact", &self.artifact)
            .finish()
    }
}

/// One step of serving a kernel that did not serve it: what [`Error::NotShipped`]
/// lists.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// The library's build found no NVRTC, so it shipped nothing.
    NothingShipped,
    /// `KILN_ALWAYS_COMPILE` skips the shipped entries.
    AlwaysCompile,
    /// `KILN_STRICT_TOOLCHAIN` skips the shipped entries: the local toolchain
    /// differs from the recorded one.
    StrictToolchain {
        /// How it differs.
        why: String,
    },
    /// The shipped entry of this target is not in the cache's images.
    NotInImages {
        /// Its target.
        target: Arch,
        /// What it would have been.
        selection: Selection,
    },
    /// The entry was found, but its artifact does not hold the kernel asked for.
    LacksKernel {
        /// The entry's target.
        target: Arch,
        /// What it is.
        selection: Selection,
    },
    /// Shipped PTX would run on the device, but its driver cannot JIT it.
    PtxRefused {
        /// Why (the driver's and the compiler's versions).
        why: String,
    },
    /// Nothing shipped runs on the device's arch.
    NoneRuns {
        /// The CUBIN targets shipped.
        shipped: Vec<Arch>,
    },
    /// The kernel compiled for the device's arch by the recorded toolchain is in
    /// none of the cache's tiers.
    NotCompiledElsewhere {
        /// The recorded NVRTC release.
        nvrtc: NvrtcVersion,
    },
    /// The request for the device's arch under the recorded toolchain could not be
    /// built.
    NoRecordedRequest {
        /// The request function's error.
        why: String,
    },
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::NothingShipped => {
                f.write_str("the library's build had no NVRTC: it ships nothing")
            }
            Attempt::AlwaysCompile => f.write_str("KILN_ALWAYS_COMPILE skips them"),
            Attempt::StrictToolchain { why } => write!(f, "KILN_STRICT_TOOLCHAIN: {why}"),
            Attempt::NotInImages { target, selection } => {
                write!(f, "{target} {selection}: not in the images")
            }
            Attempt::LacksKernel { target, selection } => {
                write!(f, "{target} {selection}: does not hold the kernel")
            }
            Attempt::PtxRefused { why } => f.write_str(why),
            Attempt::NoneRuns { shipped } => {
                let list: Vec<String> = shipped.iter().map(Arch::to_string).collect();
                write!(
                    f,
                    "nothing shipped runs on it (shipped: {})",
                    list.join(", ")
                )
            }
            Attempt::NotCompiledElsewhere { nvrtc } => {
                write!(f, "compiled by {nvrtc}: not in the cache's tiers")
            }
            Attempt::NoRecordedRequest { why } => write!(f, "no request: {why}"),
        }
    }
}

/// The attempts of one derivation, in order; shown joined by `; `.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts(pub Vec<Attempt>);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, attempt) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{attempt}")?;
        }
        Ok(())
    }
}

/// What a library's record says, parsed once.
struct Shipped {
    record: BuildRecord,
    recorded: Option<Toolchain>,
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

/// Answers remembered per (specialization, kernel) beyond this many (caches ×
/// devices) are dropped oldest first.
const MEMOS_PER_SPEC: usize = 8;

/// The answers of one specialization, by kernel name (`""`: any kernel, [`KernelLibrary::get`]).
type SpecMemos = HashMap<Box<str>, Vec<Memo>>;

type LocalToolchain = Result<Arc<Toolchain>, Arc<Error>>;

/// A kernel library's kernels: the shipped ones by their recorded toolchain, the
/// others compiled with the local one (see the module documentation).
///
/// `S` is the library's specialization type (hashable: answers are remembered per
/// specialization).
pub struct KernelLibrary<S> {
    record: RecordSource,
    request: RequestFn<S>,
    policy: Option<ToolchainPolicy>,
    shipped: OnceLock<Result<Shipped, Arc<Error>>>,
    local: OnceLock<LocalToolchain>,
    memo: OnceLock<RwLock<HashMap<S, SpecMemos>>>,
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
    pub fn with_local_toolchain(self, local: Result<Toolchain, Error>) -> KernelLibrary<S> {
        KernelLibrary {
            local: OnceLock::from(local.map(Arc::new).map_err(Arc::new)),
            ..self
        }
    }

    /// The build record.
    ///
    /// # Errors
    /// [`Error::BadBuildRecord`] when the embedded record does not parse.
    pub fn record(&self) -> Result<&BuildRecord, Error> {
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
    /// [`Error::NotShipped`] when no shipped entry serves, this process cannot
    /// compile (no NVRTC, or no headers) and the cache's tiers do not hold the
    /// kernel as the build's toolchain compiles it; a compile failure; the errors of the
    /// library's request function; [`Error::BadBuildRecord`].
    pub fn get<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
    ) -> Result<Served<'c>, crate::Error> {
        self.serve(cache, device, spec, None)
    }

    /// The entry of `spec` for `device` that holds kernel `kernel` (an entry-point
    /// name: an `extern "C"` kernel's name, or a name expression's lowered name):
    /// the best shipped entry that holds it and runs on the device (exact CUBIN,
    /// compatible CUBIN, the newest PTX that has it), else one compiled here for the
    /// device's exact arch.
    ///
    /// # Errors
    /// [`Error::NoSuchKernel`] when an entry compiled for exactly the device's arch
    /// (its shipped CUBIN, or a compile) does not hold the kernel: it does not exist
    /// for that arch; otherwise those of [`KernelLibrary::get`].
    pub fn get_kernel<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        kernel: &str,
    ) -> Result<Served<'c>, crate::Error> {
        self.serve(cache, device, spec, Some(kernel))
    }

    fn serve<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        kernel: Option<&str>,
    ) -> Result<Served<'c>, crate::Error> {
        if let Some(served) = self.remembered(cache, device, spec, kernel) {
            return Ok(served);
        }
        let shipped = self.shipped()?;
        let mut derivation = Derivation {
            library: self,
            cache,
            device,
            spec,
            kernel,
            world: cache.world(),
            shipped,
            requests: Vec::new(),
            tried: Vec::new(),
        };
        let served = derivation.run()?;
        Ok(self.remember(cache, derivation.world, device, spec, kernel, served))
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
        let found = memo
            .get(spec)?
            .get(kernel.unwrap_or(""))?
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
        let memos = all
            .entry(spec.clone())
            .or_default()
            .entry(kernel.unwrap_or("").into())
            .or_default();
        memos.retain(|m| !(m.cache == memo.cache && m.device == memo.device));
        if memos.len() >= MEMOS_PER_SPEC {
            memos.remove(0);
        }
        memos.push(memo);
        served
    }

    fn shipped(&self) -> Result<&Shipped, Error> {
        let parsed = self.shipped.get_or_init(|| {
            let record = match &self.record {
                RecordSource::Text(text) => text.parse::<BuildRecord>().map_err(Arc::new)?,
                RecordSource::Parsed(record) => record.clone(),
            };
            let recorded = Toolchain::recorded(&record);
            Ok(Shipped { record, recorded })
        });
        parsed.as_ref().map_err(|e| Error::Shared(Arc::clone(e)))
    }

    fn local(&self) -> LocalToolchain {
        self.local.get_or_init(process_local).clone()
    }

    /// Whether the policy is strict and this process has a toolchain: then it serves
    /// only what that toolchain built.
    fn strict_here(&self) -> bool {
        matches!(self.policy(), ToolchainPolicy::Strict) && self.local().is_ok()
    }
}

/// Which toolchain a request was built under.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Under {
    Recorded,
    Local,
}

/// One derivation of a kernel for a device: the steps shipped, compiled here and
/// compiled elsewhere, sharing the requests they build (once per toolchain and arch)
/// and the attempts that did not serve.
struct Derivation<'a, 'c, S> {
    library: &'a KernelLibrary<S>,
    cache: &'c Cache,
    device: &'a Device,
    spec: &'a S,
    kernel: Option<&'a str>,
    world: World,
    shipped: &'a Shipped,
    requests: Vec<(Under, Arch, Arc<KernelRequest>)>,
    tried: Vec<Attempt>,
}

/// A step's outcome: served, not served (an attempt was noted), or an error that
/// ends the derivation.
type Step<'c> = Result<Option<Served<'c>>, crate::Error>;

impl<'a, 'c, S> Derivation<'a, 'c, S>
where
    S: Clone + Eq + Hash + fmt::Debug + Send + Sync,
{
    fn run(&mut self) -> Result<Served<'c>, crate::Error> {
        if let Some(served) = self.shipped_entry()? {
            return Ok(served);
        }
        let local = match self.library.local() {
            Ok(local) => local,
            Err(cause) => return self.cannot_compile(cause),
        };
        let request = match self.request(Under::Local, &local, self.device.arch()) {
            Ok(request) => request,
            Err(Error::Cache(other)) => return Err(Error::Cache(other)),
            Err(cause) => return self.cannot_compile(Arc::new(cause)),
        };
        let Some(compiler) = local.compiler() else {
            let cause = Arc::new(Error::NoNvrtc {
                version: local.nvrtc().release.clone(),
            });
            return self.cannot_compile(cause);
        };
        let hit = compiler.compile_cached(self.cache, &request)?;
        self.exact(hit, Selection::Compiled, request)
    }

    /// Step 1: the shipped candidates for the device, under the recorded toolchain.
    fn shipped_entry(&mut self) -> Step<'c> {
        let Some(recorded) = &self.shipped.recorded else {
            self.tried.push(Attempt::NothingShipped);
            return Ok(None);
        };
        let strict = match self.library.policy() {
            ToolchainPolicy::Strict => self.library.local().ok(),
            ToolchainPolicy::Shipped => None,
        };
        if let Some(local) = &strict {
            local.define_in(self.cache);
        }
        let candidates = select(self.device, &self.shipped.record);
        if self.cache.config().always_compile {
            self.tried.push(Attempt::AlwaysCompile);
            return Ok(None);
        }
        for candidate in &candidates.list {
            let request = self.request(Under::Recorded, recorded, candidate.target)?;
            if let Some(local) = &strict
                && let Some(why) = differs(local, recorded, &request)
            {
                self.tried.push(Attempt::StrictToolchain { why });
                return Ok(None);
            }
            let owner = request.owner(recorded.nvrtc())?;
            let key = request.key()?;
            let Some(hit) = self.cache.lookup(&owner.digest(), &key) else {
                self.tried.push(Attempt::NotInImages {
                    target: candidate.target,
                    selection: candidate.selection,
                });
                continue;
            };
            if candidate.selection == Selection::ExactCubin {
                return self.exact(hit, Selection::ExactCubin, request).map(Some);
            }
            if self.holds_kernel(&hit, candidate.selection) {
                return Ok(Some(self.served(hit, candidate.selection, request)));
            }
            self.tried.push(Attempt::LacksKernel {
                target: candidate.target,
                selection: candidate.selection,
            });
        }
        if let Some(why) = candidates.ptx_refused {
            self.tried.push(Attempt::PtxRefused { why });
        }
        if candidates.list.is_empty() {
            self.tried.push(Attempt::NoneRuns {
                shipped: self.shipped.record.cubin_targets().to_vec(),
            });
        }
        Ok(None)
    }

    /// No compile possible here (no NVRTC, or a header set missing): what a machine
    /// with the build's toolchain compiled for this arch at run time and stored (the
    /// disk or remote tier) is what a compile here would give; else the miss is
    /// [`Error::NotShipped`].
    fn cannot_compile(&mut self, cause: Arc<Error>) -> Result<Served<'c>, crate::Error> {
        // Under KILN_STRICT_TOOLCHAIN a process that has a toolchain serves only
        // what that toolchain built.
        if let Some(recorded) = &self.shipped.recorded
            && !self.cache.config().always_compile
            && !self.library.strict_here()
        {
            match self.request(Under::Recorded, recorded, self.device.arch()) {
                Ok(request) => {
                    let owner = request.owner(recorded.nvrtc())?;
                    let key = request.key()?;
                    match self.cache.get_cached(&owner, &key) {
                        Some(hit) => return self.exact(hit, Selection::Compiled, request),
                        None => self.tried.push(Attempt::NotCompiledElsewhere {
                            nvrtc: recorded.nvrtc().clone(),
                        }),
                    }
                }
                Err(Error::Cache(other)) => return Err(Error::Cache(other)),
                Err(why) => self.tried.push(Attempt::NoRecordedRequest {
                    why: why.to_string(),
                }),
            }
        }
        Err(Error::NotShipped {
            kernel: self.kernel_label(),
            arch: self.device.arch().to_string(),
            tried: Attempts(std::mem::take(&mut self.tried)),
            cause,
        })
    }

    /// An entry built for exactly the device's arch: served when it holds the
    /// kernel, else proof that the kernel does not exist for the arch.
    fn exact(
        &self,
        hit: Hit<'c>,
        selection: Selection,
        request: Arc<KernelRequest>,
    ) -> Result<Served<'c>, crate::Error> {
        if self.holds_kernel(&hit, selection) {
            return Ok(self.served(hit, selection, request));
        }
        let kernels = kernels_of(&hit, selection);
        Err(Error::NoSuchKernel {
            kernel: self.kernel.unwrap_or_default().to_owned(),
            program: request.name().to_owned(),
            arch: self.device.arch().to_string(),
            built: selection.to_string(),
            kernels,
        })
    }

    fn served(
        &self,
        hit: Hit<'c>,
        selection: Selection,
        request: Arc<KernelRequest>,
    ) -> Served<'c> {
        Served {
            artifact: ChosenArtifact::of(selection, request.arch()),
            hit,
            selection,
            request,
        }
    }

    /// Whether the artifact `selection` loads from `hit` holds the kernel asked
    /// for (any entry does when none is).
    fn holds_kernel(&self, hit: &Hit<'c>, selection: Selection) -> bool {
        let Some(kernel) = self.kernel else {
            return true;
        };
        let kind = artifact_kind(selection);
        hit.artifacts()
            .iter()
            .filter(|a| a.kind == kind)
            .any(|a| a.entry_points.contains(&kernel))
    }

    /// The request under `toolchain` for `arch`, built once per derivation.
    fn request(
        &mut self,
        under: Under,
        toolchain: &Toolchain,
        arch: Arch,
    ) -> Result<Arc<KernelRequest>, crate::Error> {
        if let Some((.., request)) = self
            .requests
            .iter()
            .find(|(u, a, _)| *u == under && *a == arch)
        {
            return Ok(Arc::clone(request));
        }
        let request = Arc::new((self.library.request)(self.spec, toolchain, arch)?);
        self.requests.push((under, arch, Arc::clone(&request)));
        Ok(request)
    }

    /// The kernel named in errors: the one asked for, of its program; else the
    /// program (the first request's name), else the specialization.
    fn kernel_label(&self) -> String {
        let program = self
            .requests
            .first()
            .map(|(.., request)| request.name().to_owned())
            .or_else(|| {
                let recorded = self.shipped.recorded.as_ref()?;
                let request = (self.library.request)(self.spec, recorded, self.device.arch());
                request.ok().map(|r| r.name().to_owned())
            })
            .unwrap_or_else(|| format!("{:?}", self.spec));
        match self.kernel {
            Some(kernel) => format!("{kernel} (of {program})"),
            None => program,
        }
    }
}

/// The entry points of the artifact `selection` loads from `hit`, as one line (the
/// first [`KERNELS_LISTED`] of them).
fn kernels_of(hit: &Hit<'_>, selection: Selection) -> String {
    let wanted = artifact_kind(selection);
    let artifacts = hit.artifacts();
    let names: Vec<&str> = artifacts
        .iter()
        .filter(|a| a.kind == wanted)
        .flat_map(|a| a.entry_points.iter().copied())
        .collect();
    let mut line = names
        .iter()
        .take(KERNELS_LISTED)
        .copied()
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > KERNELS_LISTED {
        line.push_str(&format!(" and {} more", names.len() - KERNELS_LISTED));
    }
    if line.is_empty() {
        "none".to_owned()
    } else {
        line
    }
}

/// The process's local toolchain, located once (a failure too: a process without
/// NVRTC searches once).
fn process_local() -> LocalToolchain {
    static LOCAL: OnceLock<LocalToolchain> = OnceLock::new();
    LOCAL
        .get_or_init(|| Toolchain::local().map(Arc::new).map_err(Arc::new))
        .clone()
}

/// Why `local` is not the toolchain `recorded_request` was built for: another NVRTC
/// release, or another digest of a header set it uses. A header set not found
/// locally differs from nothing.
fn differs(
    local: &Toolchain,
    recorded: &Toolchain,
    recorded_request: &KernelRequest,
) -> Option<String> {
    if local.nvrtc() != recorded.nvrtc() {
        return Some(format!(
            "the local NVRTC is {}, the shipped entries were built by {}",
            local.nvrtc(),
            recorded.nvrtc()
        ));
    }
    recorded_request.include_dirs().iter().find_map(|dir| {
        let set = dir.set()?;
        let here = local.header_set(set).ok()?;
        (here.digest() != dir.digest()).then(|| {
            format!(
                "the local {set} headers (digest {}) are not those the shipped entries were \
                 built with ({})",
                &here.digest().to_hex()[..12],
                &dir.digest().to_hex()[..12]
            )
        })
    })
}

/// A cache's identity for the memo: its address. A cache dropped and another made at
/// the same address could share a memo; its answers are (owner, key) pairs, so the
/// lookup in the new cache still finds only that entry, valid, or misses.
fn cache_id(cache: &Cache) -> usize {
    std::ptr::from_ref(cache) as usize
}
