//! The driver itself: whether it loads, its CUDA version (read once per process)
//! and exact release, the context of a GPU and its device's arch. cudarc panics
//! when `libcuda` is missing, so everything here probes the library first.
//!
//! # The oldest driver
//!
//! Kiln serves drivers from CUDA 12.0 (R525) on: what NVRTC 12's CUBINs load on.
//! cudarc (0.19.5 and newer) resolves each driver function when it is first
//! called, so the driver Kiln needs is the one that has every function it calls
//! ([`DRIVER_FUNCTIONS`]: the context, modules, launches, memory and the linker,
//! each present since CUDA 11.2 or older); whether a given module loads is then
//! the selection's business ([`select`](crate::select::select)), never the
//! driver's error.

use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{CudaContext, DriverError};

use crate::Arch;
use crate::jit::{driver_release_from_maps, driver_release_from_proc_version};
use crate::loader::error::LoadError;
use crate::select::Device;

/// The oldest driver (its CUDA version, `cuDriverGetVersion` form) Kiln serves:
/// CUDA 12.0, R525, the oldest that loads NVRTC 12's CUBINs and has every
/// function Kiln calls ([`DRIVER_FUNCTIONS`]). What a given driver gets is
/// decided per kernel by [`select`](crate::select::select).
pub const OLDEST_DRIVER_VERSION: i32 = 12000;

/// The oldest driver Kiln serves ([`OLDEST_DRIVER_VERSION`]).
#[deprecated(note = "Kiln serves CUDA 12 drivers too: use OLDEST_DRIVER_VERSION")]
pub const REQUIRED_DRIVER_VERSION: i32 = OLDEST_DRIVER_VERSION;

/// Every CUDA driver function Kiln and the loader's cudarc types call (with the
/// CUDA release that introduced each): opening and using a context
/// ([`CudaContext::new`], streams, events), loading modules and functions,
/// launching, memory, the linker that JIT-compiles PTX, and the version and error
/// queries. Each exists in every driver from [`OLDEST_DRIVER_VERSION`] on; a test
/// checks this list against cudarc's bindings and against the functions the
/// example application's binary can call.
pub const DRIVER_FUNCTIONS: &[(&str, i32)] = &[
    ("cuDriverGetVersion", 2020),
    ("cuInit", 2000),
    ("cuDeviceGet", 2000),
    ("cuDeviceGetAttribute", 2000),
    ("cuDevicePrimaryCtxRetain", 7000),
    ("cuDevicePrimaryCtxRelease_v2", 11000),
    ("cuCtxSetCurrent", 4000),
    ("cuCtxGetCurrent", 4000),
    ("cuCtxDestroy_v2", 4000),
    ("cuModuleLoad", 2000),
    ("cuModuleLoadData", 2000),
    ("cuModuleGetFunction", 2000),
    ("cuModuleUnload", 2000),
    ("cuLaunchKernel", 4000),
    ("cuMemAlloc_v2", 3020),
    ("cuMemAllocAsync", 11020),
    ("cuMemFree_v2", 3020),
    ("cuMemFreeAsync", 11020),
    ("cuMemcpyHtoDAsync_v2", 3020),
    ("cuMemcpyDtoHAsync_v2", 3020),
    ("cuMemsetD8Async", 3020),
    ("cuStreamSynchronize", 2000),
    ("cuStreamWaitEvent", 2000),
    ("cuStreamDestroy_v2", 4000),
    ("cuEventCreate", 2000),
    ("cuEventRecord", 2000),
    ("cuEventDestroy_v2", 4000),
    ("cuLinkCreate_v2", 6050),
    ("cuLinkAddData_v2", 6050),
    ("cuLinkComplete", 5050),
    ("cuLinkDestroy", 5050),
    ("cuGetErrorString", 6000),
    ("cuGetErrorName", 6000),
];

/// Opens the primary context of GPU `ordinal`, after checking that the driver
/// library loads (cudarc would panic on a missing library) and is one Kiln serves
/// ([`OLDEST_DRIVER_VERSION`]: any driver some shipped entry runs on).
///
/// # Errors
/// [`LoadError::DriverNotFound`], [`LoadError::DriverTooOld`] or
/// [`LoadError::DriverStatus`] when the driver is missing or too old;
/// [`LoadError::Driver`] when the context cannot be created.
pub fn context(ordinal: usize) -> Result<Arc<CudaContext>, LoadError> {
    let found = installed_driver_version()?;
    if found < OLDEST_DRIVER_VERSION {
        return Err(LoadError::DriverTooOld {
            found,
            needed: OLDEST_DRIVER_VERSION,
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

/// The CUDA version this process serves the driver as (`13000` for 13.0): the
/// installed driver's, read once per process, or the lower one
/// [`limit_driver_version`] set. Selection and the loader's checks use it.
///
/// # Errors
/// [`LoadError::DriverNotFound`] when no driver library loads;
/// [`LoadError::DriverStatus`] when it reports an error.
pub fn driver_version() -> Result<i32, LoadError> {
    let installed = installed_driver_version()?;
    let limit = *LIMIT.lock().unwrap_or_else(|p| p.into_inner());
    Ok(limit.map_or(installed, |limit| limit.min(installed)))
}

/// A lower driver version set by [`limit_driver_version`].
static LIMIT: Mutex<Option<i32>> = Mutex::new(None);

/// Serves this process as if its driver supported CUDA `version` only (lower than
/// the installed driver's; `cuDriverGetVersion` form): selection then offers, and
/// the loader loads, only what a driver of that version loads. For testing what a
/// machine with an older driver gets, on a GPU with a newer one.
///
/// ```no_run
/// // Serve CUDA 12 drivers' code (NVRTC 12 CUBINs) on a machine with R580:
/// kiln_cuda::loader::limit_driver_version(12080)?;
/// assert_eq!(kiln_cuda::loader::driver_version()?, 12080);
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
///
/// # Errors
/// [`LoadError::DriverNotFound`] or [`LoadError::DriverStatus`] as
/// [`driver_version`]; [`LoadError::DriverLimitAbove`] when `version` is newer than
/// the installed driver (it would be handed code it cannot load).
pub fn limit_driver_version(version: i32) -> Result<(), LoadError> {
    let installed = installed_driver_version()?;
    if version > installed {
        return Err(LoadError::DriverLimitAbove {
            limit: version,
            installed,
        });
    }
    *LIMIT.lock().unwrap_or_else(|p| p.into_inner()) = Some(version);
    Ok(())
}

/// The installed driver's CUDA version, read once per process.
fn installed_driver_version() -> Result<i32, LoadError> {
    static INSTALLED: OnceLock<Result<i32, Arc<LoadError>>> = OnceLock::new();
    INSTALLED
        .get_or_init(|| read_driver_version().map_err(Arc::new))
        .clone()
        .map_err(LoadError::Shared)
}

/// The CUDA version the installed driver supports (`13000` for 13.0), read through
/// `libloading` so that a missing driver is an error, not cudarc's panic.
fn read_driver_version() -> Result<i32, LoadError> {
    let mut tried = cudarc::get_lib_name_candidates("cuda");
    let mut seen = std::collections::HashSet::new();
    tried.retain(|name| seen.insert(name.clone()));
    let not_found = |tried| LoadError::DriverNotFound { tried };
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
        return Err(LoadError::DriverStatus {
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
/// [`LoadError::Driver`] when the device cannot be queried;
/// [`LoadError::InvalidArch`] when its compute capability is not an arch.
pub fn device_arch(ctx: &CudaContext) -> Result<Arch, LoadError> {
    let (major, minor) = ctx
        .compute_capability()
        .map_err(driver("reading the compute capability".to_owned()))?;
    Ok(Arch::from_capability(major, minor)?)
}

/// The context's device as [`select`](crate::select::select) sees it: its plain arch and
/// its driver's CUDA version.
///
/// # Errors
/// The errors of [`device_arch`] and [`driver_version`].
pub fn device(ctx: &CudaContext) -> Result<Device, LoadError> {
    Ok(Device::new(device_arch(ctx)?).with_driver(driver_version()?))
}

pub(super) fn driver(what: String) -> impl FnOnce(DriverError) -> LoadError {
    move |source| LoadError::Driver { what, source }
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
