//! The error of loading cached code into a GPU's driver: finding the driver,
//! choosing and reading the artifact, the driver's JIT, the module's functions.

use std::sync::Arc;

use crate::arch::InvalidArch;

/// Loading cached code into the driver failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The CUDA driver library (`libcuda`) is not loadable: there is no GPU driver.
    #[error(
        "CUDA driver library not found (tried {tried:?}); a GPU and its driver are needed to load modules"
    )]
    DriverNotFound {
        /// The library names tried.
        tried: Vec<String>,
    },
    /// The CUDA driver is older than every driver Kiln serves (CUDA 12.0, R525).
    #[error(
        "the CUDA driver supports CUDA {found} (cuDriverGetVersion), older than every \
         driver Kiln serves (CUDA {needed} or newer, R525+); update the GPU driver"
    )]
    DriverTooOld {
        /// The driver's version (`cuDriverGetVersion`, 12080 for 12.8).
        found: i32,
        /// The version needed.
        needed: i32,
    },
    /// [`limit_driver_version`](crate::loader::limit_driver_version) was asked for
    /// a newer driver than the installed one.
    #[error(
        "cannot serve this process as a driver for CUDA {limit} (cuDriverGetVersion form): \
         the installed driver supports CUDA {installed} only, and would be handed code it \
         cannot load; limit it to an older version"
    )]
    DriverLimitAbove {
        /// The version asked for.
        limit: i32,
        /// The installed driver's.
        installed: i32,
    },
    /// The driver cannot load an artifact chosen for it (a CUBIN of a newer CUDA
    /// major than the driver's).
    #[error(
        "the {kind} of {name} was built by NVRTC {nvrtc}, which a driver for CUDA {driver} \
         (cuDriverGetVersion) cannot load; get the kernel for this driver \
         (kiln_cuda::loader::device(&ctx)) and load that, or ship code this driver loads"
    )]
    ChosenArtifactDoesNotLoad {
        /// The entry's name.
        name: String,
        /// The artifact (`cubin`, `ptx`).
        kind: String,
        /// The NVRTC release that built it.
        nvrtc: String,
        /// The driver's CUDA version.
        driver: i32,
    },
    /// A CUDA driver call made before cudarc is involved failed.
    #[error("CUDA driver call {call} returned status {status}")]
    DriverStatus {
        /// The function called.
        call: &'static str,
        /// Its `CUresult`.
        status: i32,
    },
    /// A CUDA driver call failed.
    #[error("CUDA driver: {what}")]
    Driver {
        /// What Kiln was doing.
        what: String,
        /// The driver's error.
        source: cudarc::driver::DriverError,
    },
    /// An entry has neither a CUBIN that runs on the device nor PTX it can JIT.
    #[error(
        "no artifact of {name} runs on a device of compute capability {major}.{minor}: \
         compiled for {arch}; compile for this device's arch"
    )]
    NoCompatibleArtifact {
        /// The entry's name.
        name: String,
        /// The arch the entry was compiled for.
        arch: String,
        /// Device major capability.
        major: u32,
        /// Device minor capability.
        minor: u32,
    },
    /// The cache entry given to the loader is not the request's: its key differs.
    #[error(
        "entry {name} (owner {owner}) is not the entry of request {request} for {arch} \
         (another key); load the hit that Compiler::compile_cached returned for this \
         request, or the Served a KernelLibrary returned (ModuleCache::load_served)"
    )]
    HitMismatch {
        /// The entry's name.
        name: String,
        /// The entry's owner label.
        owner: String,
        /// The request's name.
        request: String,
        /// The request's arch.
        arch: String,
    },
    /// The artifact a [`Served`](crate::Served) kernel chose does not run on the
    /// device of the context it is loaded on: it was served for another device.
    #[error(
        "the {kind} of {name}, built for {target}, was chosen for another device and \
         does not run on this one (compute capability {major}.{minor}); get the kernel \
         for this context's device (kiln_cuda::loader::device(&ctx)) and load that"
    )]
    ChosenArtifactDoesNotRun {
        /// The entry's name.
        name: String,
        /// The artifact chosen (`cubin`, `ptx`).
        kind: String,
        /// The arch the entry was built for.
        target: String,
        /// Device major capability.
        major: u32,
        /// Device minor capability.
        minor: u32,
    },
    /// The artifact a [`Served`](crate::Served) kernel chose cannot be read from
    /// its entry: the entry has none, or its bytes failed their checksum (the cache
    /// then excludes the entry).
    #[error(
        "entry {name} has no readable {kind} for {target} (none, or its bytes failed \
         their checksum and the entry was excluded); get the kernel again: the next get \
         serves another entry or compiles a sound one"
    )]
    ChosenArtifactUnreadable {
        /// The entry's name.
        name: String,
        /// The artifact chosen (`cubin`, `ptx`).
        kind: String,
        /// The arch the entry was built for.
        target: String,
    },
    /// Shipped PTX was built by a newer compiler than the driver can JIT.
    #[error(
        "the PTX of {name} was produced by NVRTC {ptx_release}, which this driver (CUDA \
         {driver}) cannot JIT (CUDA_ERROR_UNSUPPORTED_PTX_VERSION); update the GPU driver \
         to one for CUDA {ptx_release} or newer, or ship a CUBIN for this GPU's arch"
    )]
    DriverTooOldForPtx {
        /// The entry's name.
        name: String,
        /// The compiler release named in the PTX's banner (`13.0`).
        ptx_release: String,
        /// The driver's CUDA version (`cuDriverGetVersion`, 12080 for 12.8).
        driver: i32,
    },
    /// A function name is not an entry point of the loaded artifact.
    #[error("{function:?} is not an entry point of {name}; entry points: {entry_points:?}")]
    NoSuchEntryPoint {
        /// The entry's name.
        name: String,
        /// The function asked for.
        function: String,
        /// The entry points the artifact declares.
        entry_points: Vec<String>,
    },
    /// A driver release that is not a version (`580.159.04`).
    #[error(
        "driver release {given:?} is not a version such as 580.159.04 (digits and dots, \
         at most 32 bytes); a JIT-compiled CUBIN is kept under the exact release of the \
         driver that compiled it"
    )]
    InvalidDriverRelease {
        /// The release given.
        given: String,
    },
    /// The driver's JIT refused a PTX module.
    #[error(
        "the CUDA driver could not JIT-compile the PTX of {name} for {target}: {status:?}; \
         its log: {log}"
    )]
    Jit {
        /// The entry's name.
        name: String,
        /// The device's arch and the driver's release.
        target: String,
        /// The driver's status.
        status: cudarc::driver::sys::CUresult,
        /// The driver's error log (at most 16 KiB), or `(empty)`.
        log: String,
    },
    /// A PTX entry whose kernels are JIT-compiled one at a time left the cache
    /// before one of its kernels was asked for.
    #[error(
        "the PTX entry {name} is no longer in the cache (a redefinition closed it, or the \
         memory cap evicted it) and kernel {function:?} of it is not compiled yet; get the \
         kernel again and load its module again"
    )]
    JitSourceGone {
        /// The entry's name.
        name: String,
        /// The function asked for.
        function: String,
    },
    /// A function name passed to the driver contains a NUL byte.
    #[error("{what} contains a NUL byte, which the CUDA driver cannot take")]
    InteriorNul {
        /// Which input (the function's name...).
        what: String,
    },
    /// The device's compute capability is not an arch Kiln knows.
    #[error(transparent)]
    InvalidArch(#[from] InvalidArch),
    /// The cache's lookup or store of a JIT-compiled CUBIN failed.
    /// (Boxed: the cache's error is large.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
    /// An error found once and given to every caller since (the driver's
    /// version).
    #[error(transparent)]
    Shared(Arc<LoadError>),
}

impl From<kiln_core::Error> for LoadError {
    fn from(error: kiln_core::Error) -> LoadError {
        LoadError::Cache(Box::new(error))
    }
}

/// Into kiln's error: [`LoadError::Cache`] gives back the cache's error it
/// wraps, every other variant becomes [`kiln_core::Error::Backend`].
impl From<LoadError> for kiln_core::Error {
    fn from(error: LoadError) -> kiln_core::Error {
        match error {
            LoadError::Cache(error) => *error,
            other => kiln_core::Error::Backend {
                backend: "kiln-cuda",
                source: Box::new(other),
            },
        }
    }
}
