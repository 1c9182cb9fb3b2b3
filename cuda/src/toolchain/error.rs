//! The errors of the toolchain's two operations: finding a toolchain
//! ([`ToolchainError`]: NVRTC, its release, the header sets, a build record) and
//! compiling with it ([`CompileError`]: options, the request, NVRTC's verdict).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use super::nvrtc::version::InvalidNvrtcVersion;

/// One place searched for a library or header tree, and why it did not qualify.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Searched {
    /// Which rule produced this candidate (`KILN_NVRTC`, `CUDA_HOME`, `python wheel`...).
    pub rule: String,
    /// The file, directory or library name tried.
    pub candidate: PathBuf,
    /// Why it was not used ("no such file", the loader's message...).
    pub outcome: String,
}

impl fmt::Display for Searched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}): {}",
            self.candidate.display(),
            self.rule,
            self.outcome
        )
    }
}

/// The whole list of places searched, one per line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchLog(pub Vec<Searched>);

impl fmt::Display for SearchLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return write!(f, "\n  (no candidate places)");
        }
        for s in &self.0 {
            write!(f, "\n  {s}")?;
        }
        Ok(())
    }
}

/// Finding a toolchain failed: NVRTC, its release, a header set, or the record of
/// a library's build.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ToolchainError {
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
    /// An NVRTC call made to learn about the library (its release, its
    /// architectures) failed.
    #[error("NVRTC call {call} failed: {status}")]
    Nvrtc {
        /// The function called.
        call: &'static str,
        /// NVRTC's status code.
        status: String,
    },
    /// A string that is not an NVRTC release (`13.0.88`).
    #[error(transparent)]
    InvalidNvrtcVersion(#[from] InvalidNvrtcVersion),
    /// Reading a header folder to fingerprint it failed.
    #[error("reading {path} to fingerprint it")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// An error found once and given to every caller since (locating the
    /// headers of a toolchain, or the toolchain itself).
    #[error(transparent)]
    Shared(Arc<ToolchainError>),
}

impl ToolchainError {
    /// The error itself: through [`ToolchainError::Shared`], the one found first.
    pub fn inner(&self) -> &ToolchainError {
        match self {
            ToolchainError::Shared(inner) => inner.inner(),
            other => other,
        }
    }

    /// Whether this says that a toolchain this machine lacks is needed (no
    /// NVRTC, no headers of a set) rather than that something is wrong with
    /// what it has.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            ToolchainError::NvrtcNotFound { .. }
            | ToolchainError::CcclNotFound { .. }
            | ToolchainError::NoNvrtc { .. }
            | ToolchainError::UnknownHeaderSet { .. } => true,
            ToolchainError::Shared(inner) => inner.is_missing_toolchain(),
            _ => false,
        }
    }
}

/// Compiling a request failed: its options, its headers, NVRTC's verdict, the
/// toolchain it needs, or the cache's key or lookup.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CompileError {
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
    /// The toolchain the compile needs is missing or not the one the owners name.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// Building the request's key or owner, or the cache's lookup or compile,
    /// failed; [`kiln_core::Error`] says which (a failed compile is
    /// [`kiln_core::Error::Compile`], whose source is a [`CompileError`]).
    /// (Boxed: the cache's error is large.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
}

impl From<kiln_core::Error> for CompileError {
    fn from(error: kiln_core::Error) -> CompileError {
        CompileError::Cache(Box::new(error))
    }
}

impl CompileError {
    /// Whether this says that a toolchain this machine lacks is needed (no
    /// NVRTC, no headers of a set, a request naming headers known only by a
    /// recorded digest) rather than that the kernel's code is wrong.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            CompileError::RecordedIncludeDir { .. } => true,
            CompileError::Toolchain(error) => error.is_missing_toolchain(),
            _ => false,
        }
    }
}

/// Into kiln's error: [`kiln_core::Error::Backend`] with this error as its source.
impl From<ToolchainError> for kiln_core::Error {
    fn from(error: ToolchainError) -> kiln_core::Error {
        kiln_core::Error::Backend {
            backend: "kiln-cuda",
            source: Box::new(error),
        }
    }
}

/// Into kiln's error: [`CompileError::Cache`] gives back the cache's error it
/// wraps, every other variant becomes [`kiln_core::Error::Backend`].
impl From<CompileError> for kiln_core::Error {
    fn from(error: CompileError) -> kiln_core::Error {
        match error {
            CompileError::Cache(error) => *error,
            other => kiln_core::Error::Backend {
                backend: "kiln-cuda",
                source: Box::new(other),
            },
        }
    }
}
