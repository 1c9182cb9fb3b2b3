//! The driver itself: whether it loads, its CUDA version and exact release, the
//! context of a GPU and its device's arch. cudarc panics when `libcuda` is
//! missing, so everything here probes the library first.

use std::sync::{Arc, OnceLock};

use cudarc::driver::{CudaContext, DriverError};

use crate::jit::{driver_release_from_maps, driver_release_from_proc_version};
use crate::select::Device;
use crate::{Arch, Error};

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
    Ok(Arch::from_capability(major, minor)?)
}

/// The context's device as [`select`](crate::select::select) sees it: its plain arch and
/// its driver's CUDA version.
///
/// # Errors
/// The errors of [`device_arch`] and [`driver_version`].
pub fn device(ctx: &CudaContext) -> Result<Device, Error> {
    Ok(Device::new(device_arch(ctx)?).with_driver(driver_version()?))
}

pub(super) fn driver(what: String) -> impl FnOnce(DriverError) -> Error {
    move |source| Error::Driver { what, source }
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
