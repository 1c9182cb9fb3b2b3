//! The CUDA backend's error type: one enum for all of kiln-cuda.

use std::path::PathBuf;

use crate::arch::InvalidArch;
use crate::toolchain::{InvalidNvrtcVersion, SearchLog};

/// Everything that can go wrong in the CUDA backend.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// No usable NVRTC library was found.
    #[error(
        "NVRTC (libnvrtc) not found; set KILN_NVRTC to the library file, or install the \
         CUDA toolkit or the nvidia-cuda-nvrtc wheel. Searched:{searched}"
    )]
    NvrtcNotFound {
        /// Every candidate tried, in order.
        searched: SearchLog,
    },
    /// The CCCL headers (CUB) were not found.
    #[error(
        "CCCL headers (cub/cub.cuh) not found; set KILN_CCCL_INCLUDE to the directory \
         holding cub/, or install the nvidia-cuda-cccl wheel. Searched:{searched}"
    )]
    CcclNotFound {
        /// Every candidate tried, in order.
        searched: SearchLog,
    },
    /// The CUDA runtime headers (`cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`) were
    /// not found.
    #[error(
        "CUDA runtime headers (cuda_fp16.h) not found; set KILN_CUDA_RUNTIME_INCLUDE to the \
         directory holding cuda_fp16.h, or install the nvidia-cuda-runtime wheel or a CUDA \
         toolkit. Searched:{searched}"
    )]
    CudaRuntimeNotFound {
        /// Every candidate tried, in order.
        searched: SearchLog,
    },
    /// A compile was needed, but this process has no NVRTC: its owners name a
    /// compiler recorded when the images were built.
    #[error(
        "this process has no NVRTC: its owners name the recorded compiler nvrtc {version}, \
         and a kernel missing from the images under it cannot be compiled; install NVRTC \
         (or set KILN_NVRTC) to compile it, or add it to the library's precompiled set"
    )]
    NoNvrtc {
        /// The recorded release the owners name.
        version: String,
    },
    /// The NVRTC a compile would use is not the one the owners were derived for.
    #[error(
        "owners name nvrtc {owner} ({owner_library}) but the compiler in use is nvrtc \
         {found} ({found_library}); nothing was cached under the wrong owner and the \
         identity memo was dropped: start the process again"
    )]
    NvrtcIdentityChanged {
        /// The release the owners name.
        owner: String,
        /// The library the owners' identity was learnt from.
        owner_library: String,
        /// The release the compiler in use reports.
        found: String,
        /// The library in use.
        found_library: String,
    },
    /// A string that is not an NVRTC release (`13.0.88`).
    #[error(transparent)]
    InvalidNvrtcVersion(#[from] InvalidNvrtcVersion),
    /// A GPU architecture name or capability that Kiln cannot compile for.
    #[error(transparent)]
    InvalidArch(#[from] InvalidArch),
    /// A compiler option that Kiln refuses (it would make the key or owner incomplete).
    #[error("NVRTC option {option:?} refused: {why}")]
    RefusedOption {
        /// The option as given.
        option: String,
        /// Why, and what to do instead.
        why: &'static str,
    },
    /// A compiler option Kiln does not accept: nvcc's own (NVRTC has no such
    /// option), or one it does not know.
    #[error(
        "NVRTC option {option:?} refused: {why}. Kiln accepts: {accepted} \
         (kiln_cuda::options documents each)"
    )]
    UnknownOption {
        /// The option as given.
        option: String,
        /// Why.
        why: &'static str,
        /// The options Kiln accepts, one line.
        accepted: String,
    },
    /// An include path whose contents Kiln does not fingerprint.
    #[error(
        "include path {path:?} is not fingerprinted: its headers could change without \
         changing the key; pass it as an include directory of the request (Kiln hashes \
         every file under it) or pass the headers by content"
    )]
    UnfingerprintedInclude {
        /// The path as given in the options.
        path: String,
    },
    /// Reading a file of an include directory failed.
    #[error("reading {path} to fingerprint it: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A string passed to NVRTC contains a NUL byte.
    #[error("{what} contains a NUL byte, which NVRTC cannot take")]
    InteriorNul {
        /// Which input (source, header name, option...).
        what: String,
    },
    /// NVRTC rejected the program; the log says why.
    #[error("NVRTC failed to compile {program} for {arch} ({status}):\n{log}")]
    Compile {
        /// The program name.
        program: String,
        /// The target arch.
        arch: String,
        /// NVRTC's status code.
        status: String,
        /// NVRTC's compile log.
        log: String,
    },
    /// Another NVRTC call failed.
    #[error("NVRTC call {call} failed: {status}")]
    Nvrtc {
        /// The function called.
        call: &'static str,
        /// NVRTC's status code.
        status: String,
    },
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
    #[error("CUDA driver: {what}: {source}")]
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
    /// Building a request's key or owner, or the cache's lookup or compile,
    /// failed; [`kiln_core::Error`] says which (a failed compile is
    /// [`kiln_core::Error::Compile`], whose source is this crate's error).
    /// (Boxed: the cache's error is large, and this one is returned by
    /// value on every path.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
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
    /// A request holds an include directory known only by a recorded digest, and a
    /// compile needs the directory itself.
    #[error(
        "{kernel} uses header set {set:?} known only by the digest its library's build \
         recorded; compiling needs the headers on this machine (for cccl: the \
         nvidia-cuda-cccl wheel, a CUDA toolkit, or KILN_CCCL_INCLUDE; for cuda-runtime: \
         the nvidia-cuda-runtime wheel, a CUDA toolkit, or KILN_CUDA_RUNTIME_INCLUDE)"
    )]
    RecordedIncludeDir {
        /// The request's name.
        kernel: String,
        /// The header set (`cccl`).
        set: String,
    },
    /// A toolchain was asked for a header set it does not know.
    #[error(
        "header set {set:?} is not {why}; record it at build time (the build script's \
         requests must name it) or give the directory to the toolchain"
    )]
    UnknownHeaderSet {
        /// The set asked for.
        set: String,
        /// `recorded by this library's build` or `known on this machine`.
        why: &'static str,
    },
    /// A kernel library's build record does not parse.
    #[error(
        "kernel library build record {given:?} is malformed ({why}); it is written by \
         kiln::cuda::ShipPlan in the library's build script: rebuild the library"
    )]
    BadBuildRecord {
        /// The record as embedded.
        given: String,
        /// What is wrong.
        why: String,
    },
    /// A kernel does not exist for the device's arch: the program compiled for
    /// exactly that arch does not define it (it is under `#if __CUDA_ARCH__ >= ...`,
    /// or misspelt).
    #[error(
        "kernel {kernel} does not exist for {arch}: {program} built for {arch} ({built}) \
         defines {kernels}; a kernel under `#if __CUDA_ARCH__ >= N` exists only on GPUs of \
         that arch or newer, so ask for it on one of those, or check its name"
    )]
    NoSuchKernel {
        /// The kernel asked for.
        kernel: String,
        /// The program (the request's name).
        program: String,
        /// The device arch.
        arch: String,
        /// What was looked at (`exact-cubin`, `compiled`).
        built: String,
        /// The kernels it does define (the first few).
        kernels: Box<str>,
    },
    /// A kernel is in no image for this device and this process cannot compile it.
    #[error(
        "kernel {kernel} for {arch} is not in the images ({tried}) and cannot be compiled \
         here: {cause}. To compile it at run time install NVRTC (`pip install \
         nvidia-cuda-nvrtc`, or a CUDA toolkit) or set KILN_NVRTC to libnvrtc.so.13 \
         (CUB kernels also need the CCCL headers: nvidia-cuda-cccl or KILN_CCCL_INCLUDE); \
         or add it to the library's precompiled set"
    )]
    NotShipped {
        /// The kernel asked for.
        kernel: String,
        /// The device arch it was asked for.
        arch: String,
        /// What was looked up, and why other shipped code was not used.
        tried: crate::library::Attempts,
        /// Why no compile is possible (NVRTC or headers not found).
        #[source]
        cause: std::sync::Arc<Error>,
    },
    /// The local NVRTC makes code the device's driver cannot load (a newer CUDA
    /// major), or cannot compile for its arch, and no NVRTC of a major that fits is
    /// installed.
    #[error(
        "the local NVRTC {found} makes code for CUDA {} drivers and GPUs from sm_75, and \
         {device} needs NVRTC {wanted}.x, which is not found ({cause}); install it (CUDA 12: \
         `pip install nvidia-cuda-nvrtc-cu12`) or set KILN_NVRTC_{wanted} to its library",
        found.major
    )]
    NoLocalToolchainFor {
        /// The local NVRTC.
        found: crate::toolchain::NvrtcVersion,
        /// The CUDA major the device needs.
        wanted: u32,
        /// The device (`sm_70 with a driver for CUDA 12.8`).
        device: String,
        /// Why no NVRTC of that major was found.
        #[source]
        cause: std::sync::Arc<Error>,
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
        #[source]
        cause: std::sync::Arc<Error>,
    },
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
    /// An error found once and given to every caller since (locating the headers of
    /// a toolchain, or the toolchain itself).
    #[error(transparent)]
    Shared(std::sync::Arc<Error>),
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
}

impl From<kiln_core::Error> for Error {
    fn from(error: kiln_core::Error) -> Error {
        Error::Cache(Box::new(error))
    }
}

/// Into kiln's error, so that code returning `kiln::Error` (a build script, a
/// library's own API) can use `?` on this crate's calls: [`Error::Cache`]
/// gives back the cache's error it wraps, every other variant becomes
/// [`kiln_core::Error::Backend`] with this error as its source.
impl From<Error> for kiln_core::Error {
    fn from(error: Error) -> kiln_core::Error {
        match error {
            Error::Cache(error) => *error,
            other => kiln_core::Error::Backend {
                backend: "kiln-cuda",
                source: Box::new(other),
            },
        }
    }
}

/// Into kiln's error as [`Error::InvalidArch`] would go, so that code returning
/// `kiln::Error` can use `?` on [`Arch`](crate::Arch)'s constructors and parser.
impl From<InvalidArch> for kiln_core::Error {
    fn from(error: InvalidArch) -> kiln_core::Error {
        Error::from(error).into()
    }
}

/// Into kiln's error as [`Error::InvalidNvrtcVersion`] would go, so that code
/// returning `kiln::Error` can use `?` on parsing an
/// [`NvrtcVersion`](crate::toolchain::NvrtcVersion).
impl From<InvalidNvrtcVersion> for kiln_core::Error {
    fn from(error: InvalidNvrtcVersion) -> kiln_core::Error {
        Error::from(error).into()
    }
}

impl Error {
    /// Whether this says that a toolchain this machine lacks is needed (no
    /// NVRTC, no headers of a set, a record without it) rather than that the
    /// kernel's code is wrong: a precompile block leaves such a kernel out with
    /// a warning instead of failing the build.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            Error::NvrtcNotFound { .. }
            | Error::CcclNotFound { .. }
            | Error::NoNvrtc { .. }
            | Error::NoLocalToolchainFor { .. }
            | Error::UnknownHeaderSet { .. }
            | Error::RecordedIncludeDir { .. } => true,
            Error::Shared(inner) => inner.is_missing_toolchain(),
            _ => false,
        }
    }
}
