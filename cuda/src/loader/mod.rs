//! From a cached entry to a function on a GPU (needs a GPU and its driver).
//!
//! [`ModuleCache::load_served`] loads exactly the artifact a
//! [`KernelLibrary`](crate::KernelLibrary) chose ([`Served::artifact`]: its kind and
//! the arch the entry was built for): no second selection. It checks first that
//! the artifact runs on the context's device (a CUBIN whose target runs there, PTX
//! whose target runs there and whose compiler the driver is new enough for), and
//! refuses it otherwise ([`LoadError::ChosenArtifactDoesNotRun`]): a kernel served for
//! another device is never swapped for other code of its entry.
//! [`ModuleCache::load`] takes an entry no library chose for (the hit of
//! [`Compiler::compile_cached`](crate::Compiler::compile_cached)) with its request,
//! whose arch is the entry's target, and makes the choice itself: the CUBIN when it
//! runs on the device, else the PTX. Either way the module is loaded with
//! `cuModuleLoadData` and remembered per (context, owner, key, artifact kind), so
//! each loads once per context. Loaded modules are process-specific and live here,
//! never in the cache entry.
//!
//! **PTX is JIT-compiled once per fleet.** The driver compiles PTX at load, about
//! 10 to 30 ms per kernel, in every process. The loader asks the driver's linker
//! (`cuLinkCreate`, `cuLinkAddData`, `cuLinkComplete`) for the CUBIN instead and
//! keeps it as a cache entry of its own ([`get_or_jit`](crate::jit::get_or_jit):
//! keyed by the PTX entry, the device's exact arch and the driver's exact release),
//! in the process's cache by default ([`kiln_core::global`]) and so in its disk and
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
//! and returns [`LoadError::DriverNotFound`] instead.
//!
//! PTX is loaded only when the driver can JIT it: a driver for CUDA `X.Y` takes PTX
//! from compilers up to `X.Y` (the release is read from the PTX's banner); an older
//! one is [`LoadError::DriverTooOldForPtx`], not the driver's
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.
//!
//! The files: `driver.rs` (the driver, its versions, contexts), `choice.rs` (which
//! artifact, and that it runs), `jit_job.rs` (PTX compiled whole or per kernel, the
//! CUBINs kept), `link.rs` (the driver calls that load and link).

mod choice;
mod driver;
pub(crate) mod error;
mod jit_job;
mod link;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule};

use kiln_core::{ArtifactKind, Cache, Digest, Hit, Key};

use crate::jit::{JitSource, JitTarget};
use crate::library::ChosenArtifact;
use crate::{Arch, KernelRequest, Served};

#[allow(deprecated)]
pub use driver::REQUIRED_DRIVER_VERSION;
pub use driver::{
    DRIVER_FUNCTIONS, OLDEST_DRIVER_VERSION, context, device, device_arch, driver_available,
    driver_release, driver_version, limit_driver_version,
};
pub use error::LoadError;

use driver::driver;
use jit_job::{JitJob, PerKernel};
use link::load_image;

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
    /// [`LoadError::NoSuchEntryPoint`] when the module has no function of that
    /// name expression; [`LoadError::Driver`] when the driver cannot load it;
    /// for a kernel compiled now, the errors of the JIT ([`LoadError::Jit`],
    /// [`LoadError::DriverTooOldForPtx`], [`LoadError::JitSourceGone`]).
    pub fn function(&self, name_expression: &str) -> Result<CudaFunction, LoadError> {
        let loaded = &*self.inner;
        let missing = || LoadError::NoSuchEntryPoint {
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
            return Err(LoadError::InteriorNul {
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

type ModuleId = (usize, Digest, Key, ArtifactKind);

/// Loaded modules per (context, owner, key, artifact kind): each artifact of an
/// entry loads once per context.
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

    /// The module of `hit`, an entry of `request` built for `request.arch()` (the
    /// hit [`Compiler::compile_cached`](crate::Compiler::compile_cached) returned for
    /// it), on `ctx`, loaded on first use: its CUBIN when that runs on the device,
    /// else its PTX. A kernel a library served loads with
    /// [`ModuleCache::load_served`], which obeys the library's choice.
    ///
    /// # Errors
    /// [`LoadError::HitMismatch`] when `hit` is not an entry of `request` (another
    /// key); [`LoadError::NoCompatibleArtifact`] when neither its CUBIN nor its PTX
    /// runs on the device; [`LoadError::Driver`] when the driver refuses the module;
    /// [`LoadError::Jit`] when the driver cannot JIT-compile the PTX.
    pub fn load(
        &self,
        ctx: &Arc<CudaContext>,
        request: &KernelRequest,
        hit: &Hit<'_>,
    ) -> Result<LoadedModule, LoadError> {
        if !request.key().is_ok_and(|key| key == hit.key()) {
            return Err(LoadError::HitMismatch {
                name: hit.name().to_owned(),
                owner: hit.owner_label().to_owned(),
                request: request.name().to_owned(),
                arch: request.arch().to_string(),
            });
        }
        // A CUBIN module of the entry on this context runs here (it was checked),
        // and is what the choice below would make again.
        if let Some(module) = self.loaded(ctx, hit, &ArtifactKind::Cubin) {
            return Ok(module);
        }
        let device = device_arch(ctx)?;
        let chosen = choice::own_choice(hit, request.arch(), device)?;
        self.load_chosen(ctx, hit, request.name_expressions(), &chosen, device)
    }

    /// The module of a kernel a [`KernelLibrary`](crate::KernelLibrary) served, on
    /// `ctx`: exactly the artifact it chose ([`Served::artifact`]), once it is
    /// checked to run on the context's device; PTX goes through the JIT cache
    /// (see the module documentation).
    ///
    /// # Errors
    /// [`LoadError::ChosenArtifactDoesNotRun`] when the chosen artifact does not run
    /// on the device (the kernel was served for another device);
    /// [`LoadError::ChosenArtifactUnreadable`] when the entry's bytes of it fail their
    /// checksum; [`LoadError::DriverTooOldForPtx`] when the driver cannot JIT the
    /// PTX; [`LoadError::Driver`] when the driver refuses the module; [`LoadError::Jit`]
    /// when the driver cannot JIT-compile the PTX.
    pub fn load_served(
        &self,
        ctx: &Arc<CudaContext>,
        served: &Served<'_>,
    ) -> Result<LoadedModule, LoadError> {
        let chosen = served.artifact();
        if let Some(module) = self.loaded(ctx, served.hit(), &chosen.kind) {
            return Ok(module);
        }
        let device = device_arch(ctx)?;
        self.load_chosen(
            ctx,
            served.hit(),
            served.request().name_expressions(),
            chosen,
            device,
        )
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
    ) -> Result<CudaFunction, LoadError> {
        self.load(ctx, request, hit)?.function(name_expression)
    }

    /// The `kind` module of `hit` on `ctx`, if it is loaded.
    fn loaded(
        &self,
        ctx: &Arc<CudaContext>,
        hit: &Hit<'_>,
        kind: &ArtifactKind,
    ) -> Option<LoadedModule> {
        self.lock().get(&module_id(ctx, hit, kind)).cloned()
    }

    /// The module of `chosen`, checked to run on `device` (the arch of `ctx`'s
    /// device), loaded and remembered.
    fn load_chosen(
        &self,
        ctx: &Arc<CudaContext>,
        hit: &Hit<'_>,
        name_expressions: &[String],
        chosen: &ChosenArtifact,
        device: Arch,
    ) -> Result<LoadedModule, LoadError> {
        let id = module_id(ctx, hit, &chosen.kind);
        if let Some(module) = self.lock().get(&id) {
            return Ok(module.clone());
        }
        choice::check_runs(hit.name(), chosen, device, driver_version().ok())?;
        let code = match chosen.kind {
            ArtifactKind::Cubin => {
                let (entry_points, bytes) = choice::cubin(hit, chosen)?;
                let module = load_image(ctx, bytes.to_vec(), "CUBIN", hit.name())?;
                let code = Code::Module {
                    module,
                    jit: Jit::None,
                };
                (entry_points, code)
            }
            _ => self.ptx_code(ctx, hit, chosen, device)?,
        };
        let (entry_points, code) = code;
        let loaded = LoadedModule {
            inner: Arc::new(Loaded {
                ctx: Arc::clone(ctx),
                kind: chosen.kind.clone(),
                name: hit.name().to_owned(),
                entry_points,
                name_expressions: name_expressions.to_vec(),
                code,
            }),
        };
        // Two threads may both have loaded it; the first one stored wins, and the
        // other module is dropped (unloaded).
        Ok(self.lock().entry(id).or_insert(loaded).clone())
    }

    /// The code of the PTX of `hit`, for a device of arch `device`: kernels
    /// compiled one at a time, or the whole module, through the JIT cache.
    fn ptx_code(
        &self,
        ctx: &Arc<CudaContext>,
        hit: &Hit<'_>,
        chosen: &ChosenArtifact,
        device: Arch,
    ) -> Result<(Vec<String>, Code), LoadError> {
        let source = JitSource::of(hit).ok_or_else(|| choice::unreadable(hit, chosen))?;
        let cache = self.keep.cache();
        let target = cache.and_then(|_| JitTarget::new(device, driver_release(ctx)?).ok());
        let jit = JitJob::new(hit, source, cache, target)
            .ok_or_else(|| choice::unreadable(hit, chosen))?;
        let entry_points = jit.entry_points().to_vec();
        if self.split && entry_points.len() > 1 {
            return Ok((entry_points, Code::PerKernel(Box::new(PerKernel::new(jit)))));
        }
        let module = jit.whole(ctx)?;
        let code = Code::Module {
            module,
            jit: Jit::WholeModule,
        };
        Ok((entry_points, code))
    }
}

/// A module's place in a [`ModuleCache`]: its context, its entry and the artifact
/// loaded.
fn module_id(ctx: &Arc<CudaContext>, hit: &Hit<'_>, kind: &ArtifactKind) -> ModuleId {
    (ctx.cu_ctx() as usize, hit.owner(), hit.key(), kind.clone())
}
