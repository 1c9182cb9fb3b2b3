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
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};

use kiln_core::{Cache, Digest, Hit, Key, World};

use super::select::{Selection, select};
use super::{Arch, BuildRecord, Device, Error, KernelRequest, Toolchain, ToolchainPolicy};

/// A library's function from a specialization to its compile request for an arch,
/// under a toolchain (recorded or local). Header sets come from the toolchain
/// ([`Toolchain::cccl`]), so that the recorded toolchain gives the same keys as the
/// one the build used.
pub type RequestFn<S> = fn(&S, &Toolchain, Arch) -> Result<KernelRequest, crate::Error>;

/// How many kernels were served each way ([`Selection`]), counted once per
/// (cache, device, specialization) each time it is derived.
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

/// A kernel as served to a device: the cache entry, what kind of code it is, and the
/// request it is the entry of (for the loader).
#[derive(Clone)]
pub struct Served<'c> {
    hit: Hit<'c>,
    selection: Selection,
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

    /// The request whose entry this is (its arch is the entry's target; load the hit
    /// with it: [`ModuleCache::load`](super::loader::ModuleCache::load)).
    pub fn request(&self) -> &KernelRequest {
        &self.request
    }

    /// The arch the entry was compiled for.
    pub fn target(&self) -> Arch {
        self.request.arch()
    }
}

impl fmt::Debug for Served<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Served")
            .field("name", &self.hit.name())
            .field("owner", &self.hit.owner_label())
            .field("source", &self.hit.source())
            .field("selection", &self.selection)
            .finish()
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
    request: Arc<KernelRequest>,
}

/// Answers remembered per specialization beyond this many (caches × devices) are
/// dropped oldest first.
const MEMOS_PER_SPEC: usize = 8;

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
    memo: OnceLock<RwLock<HashMap<S, Vec<Memo>>>>,
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

    /// The kernel of `spec` for `device`, from `cache`: a shipped entry that runs on
    /// the device, else one compiled here for its exact arch (see the module
    /// documentation).
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
        if let Some(served) = self.remembered(cache, device, spec) {
            return Ok(served);
        }
        self.derive(cache, device, spec)
    }

    fn remembered<'c>(&self, cache: &'c Cache, device: &Device, spec: &S) -> Option<Served<'c>> {
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
            .iter()
            .find(|m| m.cache == id && m.device == *device)?;
        if found.world != cache.world() {
            return None;
        }
        let hit = cache.lookup(&found.owner, &found.key)?;
        Some(Served {
            hit,
            selection: found.selection,
            request: Arc::clone(&found.request),
        })
    }

    fn derive<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
    ) -> Result<Served<'c>, crate::Error> {
        let world = cache.world();
        let shipped = self.shipped()?;
        let mut tried: Vec<String> = Vec::new();
        let mut kernel: Option<String> = None;
        match &shipped.recorded {
            None => tried.push("the library's build had no NVRTC: it ships nothing".into()),
            Some(recorded) => {
                let strict = match self.policy() {
                    ToolchainPolicy::Strict => self.local().ok(),
                    ToolchainPolicy::Shipped => None,
                };
                if let Some(local) = &strict {
                    local.define_in(cache);
                }
                let candidates = select(device, &shipped.record);
                let always_compile = cache.config().always_compile;
                if always_compile {
                    tried.push("KILN_ALWAYS_COMPILE skips them".into());
                }
                for candidate in candidates.list.iter().filter(|_| !always_compile) {
                    let request = (self.request)(spec, recorded, candidate.target)?;
                    kernel.get_or_insert_with(|| request.name().to_owned());
                    if let Some(local) = &strict
                        && let Some(why) = differs(local, recorded, &request)
                    {
                        tried.push(format!("KILN_STRICT_TOOLCHAIN: {why}"));
                        break;
                    }
                    let owner = request.owner(recorded.nvrtc())?;
                    let key = request.key()?;
                    if let Some(hit) = cache.lookup(&owner.digest(), &key) {
                        return Ok(self.serve(
                            cache,
                            world,
                            device,
                            spec,
                            hit,
                            candidate.selection,
                            request,
                        ));
                    }
                    tried.push(format!(
                        "{} {}: not in the images",
                        candidate.target, candidate.selection
                    ));
                }
                if let Some(why) = candidates.ptx_refused {
                    tried.push(why);
                }
                if kernel.is_none() {
                    kernel = (self.request)(spec, recorded, device.arch())
                        .ok()
                        .map(|r| r.name().to_owned());
                }
                if candidates.list.is_empty() {
                    let targets: Vec<String> = shipped
                        .record
                        .cubin_targets()
                        .iter()
                        .map(Arch::to_string)
                        .collect();
                    tried.push(format!(
                        "nothing shipped runs on {} (shipped: {})",
                        device.arch(),
                        targets.join(", ")
                    ));
                }
            }
        }
        let not_shipped =
            |kernel: Option<String>, tried: &[String], cause: Arc<Error>| Error::NotShipped {
                kernel: kernel.unwrap_or_else(|| format!("{spec:?}")),
                arch: device.arch().to_string(),
                tried: tried.join("; "),
                cause,
            };
        let serve_compiled = |hit: Hit<'c>, request: KernelRequest| {
            self.serve(
                cache,
                world,
                device,
                spec,
                hit,
                Selection::Compiled,
                request,
            )
        };
        // No compile possible here (no NVRTC, or a header set missing):
        // what a machine with the build's toolchain compiled for this arch
        // at run time and stored (the disk or remote tier) is what a
        // compile here would give; else the miss is `NotShipped`.
        let cannot_compile = |kernel: Option<String>,
                              tried: &mut Vec<String>,
                              cause: Arc<Error>|
         -> Result<Served<'c>, crate::Error> {
            // Under KILN_STRICT_TOOLCHAIN a process that has a toolchain
            // serves only what that toolchain built.
            let strict_here =
                matches!(self.policy(), ToolchainPolicy::Strict) && self.local().is_ok();
            if let Some(recorded) = &shipped.recorded
                && !cache.config().always_compile
                && !strict_here
            {
                match self.compiled_elsewhere(cache, device, spec, recorded) {
                    Ok(Some((hit, request))) => return Ok(serve_compiled(hit, request)),
                    Ok(None) => tried.push(format!(
                        "{} compiled by {}: not in the cache's tiers",
                        device.arch(),
                        recorded.nvrtc()
                    )),
                    Err(Error::Cache(other)) => return Err(Error::Cache(other)),
                    Err(why) => tried.push(format!("{}: {why}", device.arch())),
                }
            }
            Err(not_shipped(kernel, tried, cause))
        };
        let local = match self.local() {
            Ok(local) => local,
            Err(cause) => return cannot_compile(kernel, &mut tried, cause),
        };
        let request = match (self.request)(spec, &local, device.arch()) {
            Ok(request) => request,
            Err(Error::Cache(other)) => return Err(Error::Cache(other)),
            Err(cause) => return cannot_compile(kernel, &mut tried, Arc::new(cause)),
        };
        let Some(compiler) = local.compiler() else {
            let cause = Arc::new(Error::NoNvrtc {
                version: local.nvrtc().release.clone(),
            });
            return cannot_compile(Some(request.name().to_owned()), &mut tried, cause);
        };
        let hit = compiler.compile_cached(cache, &request)?;
        Ok(serve_compiled(hit, request))
    }

    /// The kernel for `device`'s exact arch as the build's toolchain
    /// `recorded` compiles it, if the cache's tiers hold it (a machine with
    /// that toolchain compiled it at run time and stored it): the same
    /// owner and key a compile here would have, were the toolchain here.
    fn compiled_elsewhere<'c>(
        &self,
        cache: &'c Cache,
        device: &Device,
        spec: &S,
        recorded: &Toolchain,
    ) -> Result<Option<(Hit<'c>, KernelRequest)>, crate::Error> {
        let request = (self.request)(spec, recorded, device.arch())?;
        let owner = request.owner(recorded.nvrtc())?;
        let key = request.key()?;
        Ok(cache.get_cached(&owner, &key).map(|hit| (hit, request)))
    }

    #[allow(clippy::too_many_arguments)]
    fn serve<'c>(
        &self,
        cache: &'c Cache,
        world: World,
        device: &Device,
        spec: &S,
        hit: Hit<'c>,
        selection: Selection,
        request: KernelRequest,
    ) -> Served<'c> {
        self.counts.bump(selection);
        PROCESS_COUNTS.bump(selection);
        let request = Arc::new(request);
        let memo = Memo {
            cache: cache_id(cache),
            device: *device,
            world,
            owner: hit.owner(),
            key: hit.key(),
            selection,
            request: Arc::clone(&request),
        };
        let mut all = self
            .memo
            .get_or_init(Default::default)
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        let memos = all.entry(spec.clone()).or_default();
        memos.retain(|m| !(m.cache == memo.cache && m.device == memo.device));
        if memos.len() >= MEMOS_PER_SPEC {
            memos.remove(0);
        }
        memos.push(memo);
        Served {
            hit,
            selection,
            request,
        }
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
