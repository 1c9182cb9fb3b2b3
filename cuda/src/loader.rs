//! From a cached entry to a function on a GPU (needs a GPU and its driver).
//!
//! [`ModuleCache::load`] picks the entry's CUBIN when it runs on the device's arch,
//! else its PTX, loads it on a context with `cuModuleLoadData` and remembers the
//! module per (context, owner, key), so each module loads once per context. Loaded
//! modules are process-specific and live here, never in the cache entry.
//!
//! **PTX is JIT-compiled once per fleet.** The driver compiles PTX at load, about
//! 10 to 30 ms per kernel, in every process. The loader asks the driver's linker
//! (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`) for the CUBIN instead and
//! keeps it as a cache entry of its own ([`get_or_jit`]: keyed
//! by the PTX entry, the device's exact arch and the driver's exact release), in
//! the process's cache by default ([`kiln_core::global`]) and so in its disk and
//! remote tiers: the next process on the machine, or on any machine sharing the
//! remote tier, loads that CUBIN in well under a millisecond and never reads the
//! PTX. The driver's release is read from the file name of the `libcuda.so.<release>`
//! mapped into the process (else the kernel module's version); when neither is
//! known, nothing is kept and every process JIT-compiles, as the driver does.
//!
//! **Only the kernels used are compiled.** A PTX entry with several kernels is
//! compiled one kernel at a time, when [`LoadedModule::function`] first asks for
//! it: the kernel and the device functions it reaches are extracted from the
//! module (a kernel of a 400-kernel module costs what one kernel costs, not
//! seconds), each kept as its own entry. Only when that cannot change what the
//! kernels see: a module whose kernels share writable module variables (a
//! `__device__` counter, a `__constant__` the host sets) is compiled whole, and
//! so is any module whose extract the driver refuses. A kernel compiled alone
//! costs several times its share of the whole module's JIT, so once a process
//! has had an eighth of a module's kernels (at least 4) compiled alone, the
//! next miss compiles the whole module (kept too) for every kernel left.
//! [`ModuleCache::whole_modules`] turns splitting off.
//!
//! cudarc panics when `libcuda` is missing: [`context`] probes for the driver first
//! and returns [`Error::DriverNotFound`] instead.
//!
//! PTX is loaded only when the driver can JIT it: a driver for CUDA `X.Y` takes PTX
//! from compilers up to `X.Y` (the release is read from the PTX's banner); an older
//! one is [`Error::DriverTooOldForPtx`], not the driver's
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};
use cudarc::nvrtc::Ptx;

use kiln_core::{ArtifactKind, Cache, Digest, Hit, Key};

use crate::jit::{
    JitKernels, JitSource, JitTarget, cached_jit, driver_release_from_maps,
    driver_release_from_proc_version, get_or_jit,
};
use crate::ptx::PtxModule;
use crate::select::{Device, cuda_version_text};
use crate::{Arch, Error, KernelRequest, Served};

/// The oldest driver (its CUDA version, `cuDriverGetVersion` form) that runs what
/// Kiln compiles: NVRTC 13 emits CUBINs and PTX for CUDA 13.0, which need an R580
/// or newer driver. (cudarc itself resolves driver symbols lazily, when each is
/// first called, so an older driver would load; the modules would not.)
pub const REQUIRED_DRIVER_VERSION: i32 = 13000;

/// Opens the primary context of GPU `ordinal`, after checking that the driver
/// library loads (cudarc would panic on a missing library) and is new enough for
/// NVRTC 13's output ([`REQUIRED_DRIVER_VERSION`]).
///
/// # Errors
/// [`Error::DriverNotFound`], [`Error::DriverTooOld`] or
/// [`Error::DriverStatus`] when the driver is missing or too old;
/// [`Error::Driver`] when the context cannot be created.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>, Error> {
    let found = driver_version()?;
    if found < REQUIRED_DRIVER_VERSION {
        return Err(Error::DriverTooOld {
            found,
            needed: REQUIRED_DRIVER_VERSION,
        });
    }
    CudaContext::new(ordinal).map_err(driver(format!("opening GPU {ordinal}")))
}

/// Whether the CUDA driver library (`libcuda`) loads in this process.
pub fn driver_available() -> bool {
    // SAFETY: only tries to open the driver library under cudarc's names and drops
    // the handle; this is cudarc's own non-panicking probe.
    unsafe { cudarc::driver::sys::is_culib_present() }
}

/// The CUDA version the installed driver supports (`13000` for 13.0), read through
/// `libloading` so that a missing driver is an error, not cudarc's panic.
///
/// # Errors
/// [`Error::DriverNotFound`] when no driver library loads;
/// [`Error::DriverStatus`] when it reports an error.
pub fn driver_version() -> Result<i32, Error> {
    let mut tried = cudarc::get_lib_name_candidates("cuda");
    let mut seen = std::collections::HashSet::new();
    tried.retain(|name| seen.insert(name.clone()));
    let not_found = |tried| Error::DriverNotFound { tried };
    if !driver_available() {
        return Err(not_found(tried));
    }
    // cudarc's order: the first name that loads is the library it binds.
    let library = tried.iter().find_map(|name| {
        // SAFETY: opening the CUDA driver library by name runs only its initialisers;
        // `driver_available` just opened one of these names.
        unsafe { libloading::Library::new(name) }.ok()
    });
    let Some(library) = library else {
        return Err(not_found(tried));
    };
    type GetVersion = unsafe extern "C" fn(*mut std::ffi::c_int) -> std::ffi::c_int;
    // SAFETY: `cuDriverGetVersion` has this C signature in every CUDA driver; the
    // symbol is used while `library` is alive.
    let get = unsafe { library.get::<GetVersion>(b"cuDriverGetVersion\0") }
        .map_err(|_| not_found(tried.clone()))?;
    let mut version: std::ffi::c_int = 0;
    // SAFETY: the pointer is valid for one write; the call needs no cuInit.
    let status = unsafe { get(&mut version) };
    if status != 0 {
        return Err(Error::DriverStatus {
            call: "cuDriverGetVersion",
            status,
        });
    }
    Ok(version)
}

/// The plain arch of the context's device (`sm_86` for compute capability 8.6).
/// Compile for [`Arch::with_suffix`]-style variants such as `sm_90a` explicitly.
///
/// # Errors
/// [`Error::Driver`] when the device cannot be queried;
/// [`Error::InvalidArch`] when its compute capability is not an arch.
pub fn device_arch(ctx: &CudaContext) -> Result<Arch, Error> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(driver("reading the compute capability".to_owned()))?;
    Arch::from_capability(major, minor)
}

/// The context's device as [`select`](super::select) sees it: its plain arch and
/// its driver's CUDA version.
///
/// # Errors
/// The errors of [`device_arch`] and [`driver_version`].
pub fn device(ctx: &CudaContext) -> Result<Device, Error> {
    Ok(Device::new(device_arch(ctx)?).with_driver(driver_version()?))
}

fn driver(what: String) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Driver { what, source }
}

/// How the code of a [`LoadedModule`] came to the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Jit {
    /// A CUBIN from the entry, loaded as it is.
    None,
    /// The entry's PTX, compiled as one module (by the driver here, or by any
    /// process sharing the JIT cache).
    WholeModule,
    /// The entry's PTX, each kernel compiled on its first
    /// [`LoadedModule::function`] into a module of its own.
    PerKernel,
}

/// A module loaded on one context, with the entry points of the artifact it came
/// from. Cloning it is cheap (one reference count).
#[derive(Clone, Debug)]
pub struct LoadedModule {
    inner: Arc<Loaded>,
}

#[derive(Debug)]
struct Loaded {
    ctx: Arc<CudaContext>,
    kind: ArtifactKind,
    name: String,
    entry_points: Vec<String>,
    name_expressions: Vec<String>,
    code: Code,
}

#[derive(Debug)]
enum Code {
    /// One module for every kernel.
    Module { module: Arc<CudaModule>, jit: Jit },
    /// Kernels compiled one at a time.
    PerKernel(Box<PerKernel>),
}

impl LoadedModule {
    /// Which artifact of the entry was used: [`ArtifactKind::Cubin`], or
    /// [`ArtifactKind::Ptx`] when the code was JIT-compiled from its PTX (see
    /// [`LoadedModule::jit`]).
    pub fn kind(&self) -> &ArtifactKind {
        &self.inner.kind
    }

    /// Whether and how the code was JIT-compiled from PTX.
    pub fn jit(&self) -> Jit {
        match &self.inner.code {
            Code::Module { jit, .. } => *jit,
            Code::PerKernel(_) => Jit::PerKernel,
        }
    }

    /// The lowered entry-point names.
    pub fn entry_points(&self) -> &[String] {
        &self.inner.entry_points
    }

    /// The cudarc module holding every kernel; `None` when the kernels are
    /// compiled one at a time ([`Jit::PerKernel`]: use
    /// [`LoadedModule::function`], or [`ModuleCache::whole_modules`] to reach
    /// module variables).
    pub fn module(&self) -> Option<&Arc<CudaModule>> {
        match &self.inner.code {
            Code::Module { module, .. } => Some(module),
            Code::PerKernel(_) => None,
        }
    }

    /// The function of a name expression of the request (`"kiln_axpy<float>"`), or of
    /// an entry point by its name (an `extern "C"` kernel); for PTX compiled one
    /// kernel at a time, the kernel is compiled (or taken from the JIT cache) on
    /// its first call.
    ///
    /// The module's context is made current on the calling thread first
    /// (`cuModuleGetFunction` works in the current context), so any thread can ask.
    ///
    /// # Errors
    /// [`Error::NoSuchEntryPoint`] when the module has no function of that
    /// name expression; [`Error::Driver`] when the driver cannot load it;
    /// for a kernel compiled now, the errors of the JIT ([`Error::Jit`],
    /// [`Error::DriverTooOldForPtx`], [`Error::JitSourceGone`]).
    pub fn function(&self, name_expression: &str) -> Result<CudaFunction, Error> {
        let loaded = &*self.inner;
        let missing = || Error::NoSuchEntryPoint {
            name: loaded.name.clone(),
            function: name_expression.to_owned(),
            entry_points: loaded.name_expressions.clone(),
        };
        // A name expression's lowered name, or an entry point by its own name
        // (an `extern "C"` kernel found by `KernelRequest::every_kernel`).
        let lowered = match loaded
            .name_expressions
            .iter()
            .position(|e| e == name_expression)
        {
            Some(index) => loaded.entry_points.get(index).ok_or_else(missing)?,
            None => loaded
                .entry_points
                .iter()
                .find(|e| *e == name_expression)
                .ok_or_else(missing)?,
        };
        if lowered.contains('\0') {
            return Err(Error::InteriorNul {
                what: format!("entry point {lowered:?}"),
            });
        }
        loaded
            .ctx
            .bind_to_thread()
            .map_err(driver("making the module's context current".to_owned()))?;
        let module = match &loaded.code {
            Code::Module { module, .. } => Arc::clone(module),
            Code::PerKernel(per_kernel) => {
                per_kernel.module_of(&loaded.ctx, lowered, name_expression)?
            }
        };
        module.load_function(lowered).map_err(driver(format!(
            "getting function {lowered} of {}",
            loaded.name
        )))
    }
}

/// Where the JIT-compiled CUBINs are kept.
#[derive(Clone, Copy, Debug)]
enum Keep {
    /// [`kiln_core::global`].
    Global,
    /// That cache.
    In(&'static Cache),
    /// Nowhere: every process JIT-compiles.
    Nowhere,
}

impl Keep {
    fn cache(self) -> Option<&'static Cache> {
        match self {
            Keep::Global => Some(kiln_core::global()),
            Keep::In(cache) => Some(cache),
            Keep::Nowhere => None,
        }
    }
}

type ModuleId = (usize, Digest, Key);

/// Loaded modules per (context, owner, key): each entry loads once per context.
///
/// A cached module holds its context alive, so a context's address is never reused
/// for another context while its modules are here.
///
/// By default the CUBINs the driver JIT-compiles from PTX are kept in
/// [`kiln_core::global`] (so in its disk and remote tiers) and a PTX entry's
/// kernels are compiled one at a time (see the module documentation).
#[derive(Debug)]
pub struct ModuleCache {
    modules: Mutex<HashMap<ModuleId, LoadedModule>>,
    keep: Keep,
    split: bool,
}

impl Default for ModuleCache {
    fn default() -> Self {
        ModuleCache::new()
    }
}

impl ModuleCache {
    /// An empty module cache that keeps JIT-compiled CUBINs in
    /// [`kiln_core::global`] and compiles PTX one kernel at a time.
    pub fn new() -> Self {
        ModuleCache {
            modules: Mutex::default(),
            keep: Keep::Global,
            split: true,
        }
    }

    /// The same module cache, keeping JIT-compiled CUBINs in `cache` (and its
    /// tiers) instead of the global cache.
    pub fn keep_jit_in(mut self, cache: &'static Cache) -> Self {
        self.keep = Keep::In(cache);
        self
    }

    /// The same module cache, keeping no JIT-compiled CUBIN: every process
    /// JIT-compiles the PTX it loads (what the driver alone does).
    pub fn without_jit_cache(mut self) -> Self {
        self.keep = Keep::Nowhere;
        self
    }

    /// The same module cache, JIT-compiling a PTX entry as one module even when
    /// its kernels could be compiled one at a time.
    pub fn whole_modules(mut self) -> Self {
        self.split = false;
        self
    }

    /// The process-wide module cache ([`ModuleCache::new`]).
    pub fn global() -> &'static ModuleCache {
        static GLOBAL: OnceLock<ModuleCache> = OnceLock::new();
        GLOBAL.get_or_init(ModuleCache::new)
    }

    /// How many modules are loaded, over all contexts.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether no module is loaded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<ModuleId, LoadedModule>> {
        // The map stays consistent even if a holder panicked: entries are inserted whole.
        self.modules.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The module of `hit` (an entry of `request`) on `ctx`, loaded on first use.
    ///
    /// # Errors
    /// [`Error::HitMismatch`] when `hit` is not an entry of `request`;
    /// [`Error::NoCompatibleArtifact`] when neither its CUBIN nor its PTX runs
    /// on the device; [`Error::Driver`] when the driver refuses the module;
    /// [`Error::Jit`] when the driver cannot JIT-compile the PTX.
    pub fn load(
        &self,
        ctx: &Arc<CudaContext>,
        request: &KernelRequest,
        hit: &Hit<'_>,
    ) -> Result<LoadedModule, Error> {
        let id: ModuleId = (ctx.cu_ctx() as usize, hit.owner(), hit.key());
        if let Some(module) = self.lock().get(&id) {
            return Ok(module.clone());
        }
        let loaded = load_module(ctx, request, hit, self.keep, self.split)?;
        // Two threads may both have loaded it; the first one stored wins, and the
        // other module is dropped (unloaded).
        Ok(self.lock().entry(id).or_insert(loaded).clone())
    }

    /// The module of a kernel a [`KernelLibrary`](super::KernelLibrary) served, on
    /// `ctx`: [`ModuleCache::load`] with the request of the entry's target.
    ///
    /// # Errors
    /// The errors of [`ModuleCache::load`].
    pub fn load_served(
        &self,
        ctx: &Arc<CudaContext>,
        served: &Served<'_>,
    ) -> Result<LoadedModule, Error> {
        self.load(ctx, served.request(), served.hit())
    }

    /// Shorthand: the function of `name_expression` in `hit` on `ctx`.
    ///
    /// # Errors
    /// The errors of [`ModuleCache::load`] and [`LoadedModule::function`].
    pub fn function(
        &self,
        ctx: &Arc<CudaContext>,
        request: &KernelRequest,
        hit: &Hit<'_>,
        name_expression: &str,
    ) -> Result<CudaFunction, Error> {
        self.load(ctx, request, hit)?.function(name_expression)
    }
}

fn load_module(
    ctx: &Arc<CudaContext>,
    request: &KernelRequest,
    hit: &Hit<'_>,
    keep: Keep,
    split: bool,
) -> Result<LoadedModule, Error> {
    let arch = request.arch();
    // The hit must be this request's entry: same key, and an owner for this arch
    // (owner labels end in `/<target>`), else the arch checks below would be wrong.
    let same_key = request.key().is_ok_and(|key| key == hit.key());
    let same_arch = hit.owner_label().ends_with(&format!("/{arch}"));
    if !(same_key && same_arch) {
        return Err(Error::HitMismatch {
            name: hit.name().to_owned(),
            owner: hit.owner_label().to_owned(),
            request: request.name().to_owned(),
            arch: arch.to_string(),
        });
    }
    let device = device_arch(ctx)?;
    let (major, minor) = (device.major(), device.minor());
    let artifacts = hit.artifacts();
    let pick = |kind: ArtifactKind| artifacts.iter().find(|a| a.kind == kind);
    // Only the payload used is read (and checked): a PTX fallback is not paged
    // in when the CUBIN runs. A payload that fails its checksum is `None`
    // (never garbage; the entry is excluded so the next compile_cached
    // recompiles), and the next option is tried.
    let cubin = pick(ArtifactKind::Cubin)
        .filter(|_| arch.cubin_runs_on(major, minor))
        .and_then(|a| Some((a, a.bytes().filter(|b| !b.is_empty())?)));
    let loaded = |kind: ArtifactKind, entry_points: Vec<String>, code: Code| LoadedModule {
        inner: Arc::new(Loaded {
            ctx: Arc::clone(ctx),
            kind,
            name: hit.name().to_owned(),
            entry_points,
            name_expressions: request.name_expressions().to_vec(),
            code,
        }),
    };
    if let Some((artifact, bytes)) = cubin {
        let module = load_image(ctx, bytes.to_vec(), "CUBIN", hit.name())?;
        let entry_points = artifact
            .entry_points
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        return Ok(loaded(
            ArtifactKind::Cubin,
            entry_points,
            Code::Module {
                module,
                jit: Jit::None,
            },
        ));
    }
    let no_code = || Error::NoCompatibleArtifact {
        name: hit.name().to_owned(),
        arch: arch.to_string(),
        major,
        minor,
    };
    if pick(ArtifactKind::Ptx).is_none() || !arch.ptx_runs_on(major, minor) {
        return Err(no_code());
    }
    let source = JitSource::of(hit).ok_or_else(no_code)?;
    let entry_points = source.entry_points().to_vec();
    let cache = keep.cache();
    let target = cache.and_then(|_| JitTarget::new(device, driver_release(ctx)?).ok());
    let ptx = PtxSource::new(hit, &source, cache).ok_or_else(no_code)?;
    let jit = JitJob {
        source,
        target,
        cache,
        ptx,
    };
    if split && entry_points.len() > 1 {
        return Ok(loaded(
            ArtifactKind::Ptx,
            entry_points,
            Code::PerKernel(Box::new(PerKernel {
                jit,
                kernels: Mutex::default(),
                whole: OnceLock::new(),
                compiled_alone: AtomicUsize::new(0),
            })),
        ));
    }
    let module = jit.whole(ctx)?;
    Ok(loaded(
        ArtifactKind::Ptx,
        entry_points,
        Code::Module {
            module,
            jit: Jit::WholeModule,
        },
    ))
}

/// Where the PTX of a module being JIT-compiled is read when the driver is
/// asked: from the cache the CUBINs are kept in (looked up again, so that a
/// process whose CUBINs are all cached never reads the PTX), or a copy.
#[derive(Debug)]
enum PtxSource {
    InCache(&'static Cache),
    Copied(Arc<[u8]>),
}

impl PtxSource {
    /// `None` when the entry is not in `cache` and its PTX fails its checksum.
    fn new(hit: &Hit<'_>, source: &JitSource, cache: Option<&'static Cache>) -> Option<PtxSource> {
        if let Some(cache) = cache
            && cache.lookup(&source.owner(), &source.key()).is_some()
        {
            return Some(PtxSource::InCache(cache));
        }
        hit.artifact(&ArtifactKind::Ptx)
            .map(|bytes| PtxSource::Copied(Arc::from(bytes)))
    }

    fn with<R>(
        &self,
        source: &JitSource,
        function: &str,
        use_it: impl FnOnce(&[u8]) -> Result<R, Error>,
    ) -> Result<R, Error> {
        match self {
            PtxSource::Copied(bytes) => use_it(bytes),
            PtxSource::InCache(cache) => {
                let gone = || Error::JitSourceGone {
                    name: source.name().to_owned(),
                    function: function.to_owned(),
                };
                let hit = cache
                    .lookup(&source.owner(), &source.key())
                    .ok_or_else(gone)?;
                use_it(hit.artifact(&ArtifactKind::Ptx).ok_or_else(gone)?)
            }
        }
    }
}

/// What JIT-compiling one PTX entry needs: the entry, the target and the
/// cache the CUBINs are kept in (neither when the driver's release is unknown
/// or keeping is off), and the PTX.
#[derive(Debug)]
struct JitJob {
    source: JitSource,
    target: Option<JitTarget>,
    cache: Option<&'static Cache>,
    ptx: PtxSource,
}

impl JitJob {
    fn kept(&self) -> Option<(&'static Cache, &JitTarget)> {
        Some((self.cache?, self.target.as_ref()?))
    }

    /// The whole module: its kept CUBIN, else the driver's JIT (kept).
    fn whole(&self, ctx: &Arc<CudaContext>) -> Result<Arc<CudaModule>, Error> {
        let name = self.source.name();
        let Some((cache, target)) = self.kept() else {
            // Nothing kept: the driver JIT-compiles at load, as without Kiln.
            let text = self
                .ptx
                .with(&self.source, "", |ptx| checked_ptx(name, ptx))?;
            return load_image(ctx, text, "PTX", name);
        };
        let link = || {
            self.ptx.with(&self.source, "", |ptx| {
                link_ptx(ctx, &checked_ptx(name, ptx)?, name, target)
            })
        };
        let cubin = kept_cubin(cache, &self.source, target, JitKernels::All, link)?;
        load_image(ctx, cubin, "JIT-compiled CUBIN", name)
    }

    /// The kept CUBIN of `kernels`, if a process sharing the cache compiled it.
    fn cached(
        &self,
        ctx: &Arc<CudaContext>,
        kernels: JitKernels<'_>,
    ) -> Result<Option<Arc<CudaModule>>, Error> {
        let Some((cache, target)) = self.kept() else {
            return Ok(None);
        };
        let Some(hit) = cached_jit(cache, &self.source, target, kernels)? else {
            return Ok(None);
        };
        // A kept CUBIN that fails its checksum is excluded by the cache: a miss.
        let Some(cubin) = hit.artifact(&ArtifactKind::Cubin) else {
            return Ok(None);
        };
        load_image(
            ctx,
            cubin.to_vec(),
            "JIT-compiled CUBIN",
            self.source.name(),
        )
        .map(Some)
    }

    /// The module of kernel `lowered` alone, JIT-compiled from an extract of
    /// the PTX (kept); `None` when the module must stay whole (shared module
    /// variables, or the driver refused the extract).
    fn one(
        &self,
        ctx: &Arc<CudaContext>,
        lowered: &str,
        function: &str,
    ) -> Result<Option<Arc<CudaModule>>, Error> {
        let name = self.source.name();
        let extract = self.ptx.with(&self.source, function, |ptx| {
            let text = checked_ptx(name, ptx)?;
            let Ok(text) = std::str::from_utf8(&text[..text.len() - 1]) else {
                return Ok(None);
            };
            let module = PtxModule::parse(text);
            if !module.splittable() {
                return Ok(None);
            }
            Ok(module.extract(&[lowered]).map(|mut extract| {
                extract.push('\0');
                extract.into_bytes()
            }))
        })?;
        let Some(extract) = extract else {
            return Ok(None);
        };
        let result = match self.kept() {
            Some((cache, target)) => {
                let link = || link_ptx(ctx, &extract, name, target);
                kept_cubin(
                    cache,
                    &self.source,
                    target,
                    JitKernels::Only(&[lowered]),
                    link,
                )
                .and_then(|cubin| load_image(ctx, cubin, "JIT-compiled CUBIN", name))
            }
            None => load_image(ctx, extract, "PTX", name),
        };
        match result {
            Ok(module) => Ok(Some(module)),
            Err(error) => {
                tracing::warn!(
                    entry = name,
                    kernel = lowered,
                    %error,
                    "the driver refused one kernel extracted from a PTX module; compiling the whole module"
                );
                Ok(None)
            }
        }
    }
}

/// A PTX entry whose kernels are compiled one at a time.
#[derive(Debug)]
struct PerKernel {
    jit: JitJob,
    kernels: Mutex<HashMap<String, Arc<CudaModule>>>,
    /// The whole module, once one kernel showed it cannot be split, or
    /// enough kernels were compiled alone ([`split_limit`]).
    whole: OnceLock<Arc<CudaModule>>,
    /// Kernels this process had the driver compile alone.
    compiled_alone: AtomicUsize,
}

/// How many kernels of a module of `kernels` a process has the driver compile
/// one at a time before it compiles the whole module instead: an eighth of
/// them, at least 4.
///
/// A kernel compiled alone costs several times its share of the whole
/// module's JIT (on an H100, a CUB library's kernel alone ~6× its share,
/// BENCHMARKS.md), so a process that goes on to need most kernels would pay
/// that many times the whole JIT; past the limit it pays the whole JIT
/// once, which bounds it to about twice the whole JIT, while a process
/// that needs a few kernels of a large module pays for those few.
pub(crate) fn split_limit(kernels: usize) -> usize {
    (kernels / 8).max(4)
}

impl PerKernel {
    fn module_of(
        &self,
        ctx: &Arc<CudaContext>,
        lowered: &str,
        function: &str,
    ) -> Result<Arc<CudaModule>, Error> {
        let lock = || self.kernels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(module) = lock().get(lowered) {
            return Ok(Arc::clone(module));
        }
        if let Some(module) = self.whole.get() {
            return Ok(Arc::clone(module));
        }
        // Not under the lock: another kernel may be compiling meanwhile (the
        // cache's single flight compiles each kernel once).
        let only = [lowered];
        let module = match self.jit.cached(ctx, JitKernels::Only(&only))? {
            Some(module) => module,
            None => {
                if let Some(whole) = self.jit.cached(ctx, JitKernels::All)? {
                    return Ok(Arc::clone(self.whole.get_or_init(|| whole)));
                }
                let limit = split_limit(self.jit.source.entry_points().len());
                let alone = if self.compiled_alone.load(Ordering::Relaxed) < limit {
                    self.jit.one(ctx, lowered, function)?
                } else {
                    None
                };
                match alone {
                    Some(module) => {
                        self.compiled_alone.fetch_add(1, Ordering::Relaxed);
                        module
                    }
                    None => {
                        let whole = self.jit.whole(ctx)?;
                        return Ok(Arc::clone(self.whole.get_or_init(|| whole)));
                    }
                }
            }
        };
        Ok(Arc::clone(
            lock().entry(lowered.to_owned()).or_insert(module),
        ))
    }
}

/// The CUBIN of `kernels` from the cache, else `link()`'s, kept. A kept CUBIN
/// that fails its checksum is excluded by the cache, so the second try links.
fn kept_cubin(
    cache: &Cache,
    source: &JitSource,
    target: &JitTarget,
    kernels: JitKernels<'_>,
    link: impl Fn() -> Result<Vec<u8>, Error>,
) -> Result<Vec<u8>, Error> {
    for _ in 0..2 {
        let hit = get_or_jit(cache, source, target, kernels, &link)?;
        if let Some(cubin) = hit.artifact(&ArtifactKind::Cubin) {
            return Ok(cubin.to_vec());
        }
    }
    link()
}

/// `cuModuleLoadData` of a CUBIN or NUL-terminated PTX.
fn load_image(
    ctx: &Arc<CudaContext>,
    image: Vec<u8>,
    what: &str,
    name: &str,
) -> Result<Arc<CudaModule>, Error> {
    ctx.load_module(Ptx::from_binary(image))
        .map_err(driver(format!("loading the {what} of {name}")))
}

/// The PTX, NUL-terminated, once checked: no NUL inside, and a driver new
/// enough for the compiler named in its banner.
fn checked_ptx(name: &str, bytes: &[u8]) -> Result<Vec<u8>, Error> {
    if bytes.contains(&0) {
        return Err(Error::InteriorNul {
            what: format!("the PTX of {name}"),
        });
    }
    if let Some((major, minor)) = ptx_compiler_release(bytes) {
        let needed = i32::try_from(major * 1000 + minor * 10).unwrap_or(i32::MAX);
        let found = driver_version()?;
        if found < needed {
            return Err(Error::DriverTooOldForPtx {
                name: name.to_owned(),
                ptx_release: cuda_version_text(needed),
                driver: found,
            });
        }
    }
    // The driver reads PTX up to its NUL terminator.
    let mut text = Vec::with_capacity(bytes.len() + 1);
    text.extend_from_slice(bytes);
    text.push(0);
    Ok(text)
}

/// The bytes of the driver's error log.
const JIT_LOG_BYTES: usize = 16 * 1024;

/// The CUBIN the driver's JIT makes of NUL-terminated `ptx` for the current
/// device of `ctx` (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`).
fn link_ptx(
    ctx: &Arc<CudaContext>,
    ptx: &[u8],
    name: &str,
    target: &JitTarget,
) -> Result<Vec<u8>, Error> {
    use cudarc::driver::sys;
    use std::ffi::c_void;

    ctx.bind_to_thread().map_err(driver(
        "making the context current to JIT-compile".to_owned(),
    ))?;
    let refused = |status: sys::CUresult, log: &[u8]| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let text = String::from_utf8_lossy(&log[..end]).trim().to_owned();
        Error::Jit {
            name: name.to_owned(),
            target: target.to_string(),
            status,
            log: if text.is_empty() {
                "(empty)".to_owned()
            } else {
                text
            },
        }
    };
    // Declared before the link state, so it outlives it (the driver writes the
    // log until the state is destroyed).
    let mut log = vec![0u8; JIT_LOG_BYTES];
    let mut options = [
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER,
        sys::CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
    ];
    // The size is passed in the pointer's bits, as the driver API specifies.
    let mut values: [*mut c_void; 2] = [log.as_mut_ptr().cast(), JIT_LOG_BYTES as *mut c_void];
    let mut state: sys::CUlinkState = std::ptr::null_mut();
    // SAFETY: two options with their values (a writable buffer of
    // JIT_LOG_BYTES bytes that outlives the state, and its size), arrays of
    // that length; `state` is written once on success.
    let status = unsafe {
        sys::cuLinkCreate_v2(
            options.len() as u32,
            options.as_mut_ptr(),
            values.as_mut_ptr(),
            &mut state,
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(refused(status, &log));
    }
    let state = LinkState(state);
    // SAFETY: `ptx` is NUL-terminated PTX (checked_ptx or an extract with its
    // NUL) that the driver only reads during the call; the name is a
    // NUL-terminated literal; no options.
    let status = unsafe {
        sys::cuLinkAddData_v2(
            state.0,
            sys::CUjitInputType::CU_JIT_INPUT_PTX,
            ptx.as_ptr().cast_mut().cast(),
            ptx.len(),
            c"kiln.ptx".as_ptr(),
            0,
            std::ptr::null_mut(),
            std::ptr::null_mut(),
        )
    };
    if status != sys::CUresult::CUDA_SUCCESS {
        return Err(refused(status, &log));
    }
    let mut cubin: *mut c_void = std::ptr::null_mut();
    let mut size = 0usize;
    // SAFETY: both out-pointers are valid for one write each.
    let status = unsafe { sys::cuLinkComplete(state.0, &mut cubin, &mut size) };
    if status != sys::CUresult::CUDA_SUCCESS || cubin.is_null() {
        return Err(refused(status, &log));
    }
    // SAFETY: on success the driver owns `size` readable bytes at `cubin`
    // until the state is destroyed (below, after the copy).
    let bytes = unsafe { std::slice::from_raw_parts(cubin.cast::<u8>(), size) }.to_vec();
    drop(state);
    Ok(bytes)
}

/// A link state, destroyed on drop.
struct LinkState(cudarc::driver::sys::CUlinkState);

impl Drop for LinkState {
    fn drop(&mut self) {
        // SAFETY: the state came from a successful cuLinkCreate and is destroyed
        // once; the status is ignored (nothing to do about a failed cleanup).
        let _ = unsafe { cudarc::driver::sys::cuLinkDestroy(self.0) };
    }
}

/// The exact release of the CUDA driver library this process uses (`580.159.04`):
/// from the file name of the mapped `libcuda.so.<release>`, else the kernel
/// module's version (`/proc/driver/nvidia/version`); `None` when neither says.
/// JIT-compiled CUBINs are kept under it. A context proves the library is loaded.
pub fn driver_release(ctx: &CudaContext) -> Option<String> {
    let _loaded = ctx;
    static RELEASE: OnceLock<Option<String>> = OnceLock::new();
    RELEASE
        .get_or_init(|| {
            read_bounded("/proc/self/maps", 64 << 20)
                .and_then(|maps| driver_release_from_maps(&maps))
                .or_else(|| {
                    read_bounded("/proc/driver/nvidia/version", 64 << 10)
                        .and_then(|text| driver_release_from_proc_version(&text))
                })
        })
        .clone()
}

/// At most `limit` bytes of a file, as text; `None` when it cannot be read.
fn read_bounded(path: &str, limit: u64) -> Option<String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .ok()?
        .take(limit)
        .read_to_string(&mut text)
        .ok()?;
    Some(text)
}
/// The compiler release in the banner of PTX (`// Cuda compilation tools, release
/// 13.0, V13.0.88`): `(13, 0)`.
fn ptx_compiler_release(ptx: &[u8]) -> Option<(u32, u32)> {
    let head = String::from_utf8_lossy(&ptx[..ptx.len().min(1024)]);
    let at = head.find(", release ")? + ", release ".len();
    let (major, rest) = head[at..].split_once('.')?;
    let minor: String = rest.chars().take_while(char::is_ascii_digit).collect();
    Some((major.trim().parse().ok()?, minor.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_process_compiles_a_few_kernels_alone_then_the_whole_module() {
        assert_eq!(split_limit(1), 4);
        assert_eq!(split_limit(2), 4, "a small module's kernels all alone");
        assert_eq!(split_limit(40), 5);
        assert_eq!(split_limit(170), 21);
        assert_eq!(split_limit(443), 55);
    }

    #[test]
    fn the_ptx_banner_names_its_compiler_release() {
        let ptx = b"//\n// Generated by NVIDIA NVVM Compiler\n//\n// Compiler Build ID: CL-36424714\n\
                    // Cuda compilation tools, release 13.0, V13.0.88\n// Based on NVVM 7.0.1\n//\n\n\
                    .version 9.0\n.target sm_75\n";
        assert_eq!(ptx_compiler_release(ptx), Some((13, 0)));
        assert_eq!(ptx_compiler_release(b".version 9.0\n"), None);
        assert_eq!(
            ptx_compiler_release(b"// Cuda compilation tools, release 12.10, V12.10.1"),
            Some((12, 10))
        );
    }
}
