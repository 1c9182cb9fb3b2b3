//! From a cached entry to a function on a GPU (needs a GPU and its driver).
//!
//! [`ModuleCache::load`] picks the entry's CUBIN when it runs on the device's arch,
//! else its PTX (the driver JIT-compiles it, ~10 ms per kernel), loads it on a
//! context with `cuModuleLoadData` and remembers the module per (context, owner,
//! key), so each module loads once per context. Loaded modules are process-specific
//! and live here, never in the cache entry.
//!
//! cudarc panics when `libcuda` is missing: [`context`] probes for the driver first
//! and returns [`Error::DriverNotFound`] instead.
//!
//! PTX is loaded only when the driver can JIT it: a driver for CUDA `X.Y` takes PTX
//! from compilers up to `X.Y` (the release is read from the PTX's banner); an older
//! one is [`Error::DriverTooOldForPtx`], not the driver's
//! `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};
use cudarc::nvrtc::Ptx;

use kiln_core::{ArtifactKind, Digest, Hit, Key};

use super::select::cuda_version_text;
use super::{Arch, Device, Error, KernelRequest, Served};

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

/// A module loaded on one context, with the entry points of the artifact it came
/// from.
#[derive(Clone, Debug)]
pub struct LoadedModule {
    ctx: Arc<CudaContext>,
    module: Arc<CudaModule>,
    kind: ArtifactKind,
    name: String,
    entry_points: Vec<String>,
    name_expressions: Vec<String>,
}

impl LoadedModule {
    /// Which artifact was loaded: [`ArtifactKind::Cubin`] or [`ArtifactKind::Ptx`].
    pub fn kind(&self) -> &ArtifactKind {
        &self.kind
    }

    /// The lowered entry-point names.
    pub fn entry_points(&self) -> &[String] {
        &self.entry_points
    }

    /// The cudarc module.
    pub fn module(&self) -> &Arc<CudaModule> {
        &self.module
    }

    /// The function of a name expression of the request (`"kiln_axpy<float>"`), or of
    /// an entry point by its name (an `extern "C"` kernel).
    ///
    /// The module's context is made current on the calling thread first
    /// (`cuModuleGetFunction` works in the current context), so any thread can ask.
    ///
    /// # Errors
    /// [`Error::NoSuchEntryPoint`] when the module has no function of that
    /// name expression; [`Error::Driver`] when the driver cannot load it.
    pub fn function(&self, name_expression: &str) -> Result<CudaFunction, Error> {
        let missing = || Error::NoSuchEntryPoint {
            name: self.name.clone(),
            function: name_expression.to_owned(),
            entry_points: self.name_expressions.clone(),
        };
        // A name expression's lowered name, or an entry point by its own name
        // (an `extern "C"` kernel found by `KernelRequest::every_kernel`).
        let lowered = match self
            .name_expressions
            .iter()
            .position(|e| e == name_expression)
        {
            Some(index) => self.entry_points.get(index).ok_or_else(missing)?,
            None => self
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
        self.ctx
            .bind_to_thread()
            .map_err(driver("making the module's context current".to_owned()))?;
        self.module.load_function(lowered).map_err(driver(format!(
            "getting function {lowered} of {}",
            self.name
        )))
    }
}

type ModuleId = (usize, Digest, Key);

/// Loaded modules per (context, owner, key): each entry loads once per context.
///
/// A cached module holds its context alive, so a context's address is never reused
/// for another context while its modules are here.
#[derive(Debug, Default)]
pub struct ModuleCache {
    modules: Mutex<HashMap<ModuleId, LoadedModule>>,
}

impl ModuleCache {
    /// An empty module cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The process-wide module cache.
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
    /// on the device; [`Error::Driver`] when the driver refuses the module.
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
        let loaded = load_module(ctx, request, hit)?;
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
    let (major, minor) = {
        let device = device_arch(ctx)?;
        (device.major(), device.minor())
    };
    let artifacts = hit.artifacts();
    let pick = |kind: ArtifactKind| artifacts.iter().find(|a| a.kind == kind);
    // Only the payload used is read (and checked): a PTX fallback is not paged
    // in when the CUBIN runs. A payload that fails its checksum is `None`
    // (never garbage; the entry is excluded so the next compile_cached
    // recompiles), and the next option is tried.
    let cubin = pick(ArtifactKind::Cubin)
        .filter(|_| arch.cubin_runs_on(major, minor))
        .and_then(|a| Some((a, a.bytes().filter(|b| !b.is_empty())?)));
    let ptx = || {
        pick(ArtifactKind::Ptx)
            .filter(|_| arch.ptx_runs_on(major, minor))
            .and_then(|a| Some((a, a.bytes()?)))
    };
    let (artifact, image) = if let Some((cubin, bytes)) = cubin {
        (cubin, bytes.to_vec())
    } else if let Some((ptx, bytes)) = ptx() {
        if bytes.contains(&0) {
            return Err(Error::InteriorNul {
                what: format!("the PTX of {}", hit.name()),
            });
        }
        if let Some((major, minor)) = ptx_compiler_release(bytes) {
            let needed = i32::try_from(major * 1000 + minor * 10).unwrap_or(i32::MAX);
            let found = driver_version()?;
            if found < needed {
                return Err(Error::DriverTooOldForPtx {
                    name: hit.name().to_owned(),
                    ptx_release: cuda_version_text(needed),
                    driver: found,
                });
            }
        }
        // cuModuleLoadData reads PTX up to its NUL terminator.
        let mut text = Vec::with_capacity(bytes.len() + 1);
        text.extend_from_slice(bytes);
        text.push(0);
        (ptx, text)
    } else {
        return Err(Error::NoCompatibleArtifact {
            name: hit.name().to_owned(),
            arch: arch.to_string(),
            major,
            minor,
        });
    };
    let module = ctx
        .load_module(Ptx::from_binary(image))
        .map_err(driver(format!(
            "loading the {:?} of {}",
            artifact.kind,
            hit.name()
        )))?;
    Ok(LoadedModule {
        ctx: Arc::clone(ctx),
        module,
        kind: artifact.kind.clone(),
        name: hit.name().to_owned(),
        entry_points: artifact
            .entry_points
            .iter()
            .map(|s| (*s).to_owned())
            .collect(),
        name_expressions: request.name_expressions().to_vec(),
    })
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
