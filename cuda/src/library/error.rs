//! The error of serving a kernel from a [`KernelLibrary`](super::KernelLibrary):
//! the images, the local toolchain that compiles what they lack, and the
//! library's own request function.

use std::sync::Arc;

use super::attempt::Attempts;
use crate::error::Error;
use crate::toolchain::error::{CompileError, ToolchainError};
use crate::toolchain::nvrtc::version::NvrtcVersion;

/// Serving a kernel failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
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
        tried: Attempts,
        /// Why no compile is possible (NVRTC or headers not found).
        cause: Arc<ServeError>,
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
        found: NvrtcVersion,
        /// The CUDA major the device needs.
        wanted: u32,
        /// The device (`sm_70 with a driver for CUDA 12.8`).
        device: String,
        /// Why no NVRTC of that major was found.
        cause: Arc<ServeError>,
    },
    /// The library's build record, or the local toolchain, is not usable.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// Compiling the kernel here failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// The library's request function failed.
    #[error(transparent)]
    Request(Box<Error>),
    /// The cache's lookup failed. (Boxed: the cache's error is large.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
}

impl From<kiln_core::Error> for ServeError {
    fn from(error: kiln_core::Error) -> ServeError {
        ServeError::Cache(Box::new(error))
    }
}

impl From<Error> for ServeError {
    fn from(error: Error) -> ServeError {
        match error {
            Error::Toolchain(error) => ServeError::Toolchain(error),
            Error::Compile(error) => ServeError::Compile(error),
            Error::Cache(error) => ServeError::Cache(error),
            other => ServeError::Request(Box::new(other)),
        }
    }
}

impl ServeError {
    /// Whether this says that a toolchain this machine lacks is needed rather
    /// than that the kernel's code is wrong.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            ServeError::NoLocalToolchainFor { .. } => true,
            ServeError::Toolchain(error) => error.is_missing_toolchain(),
            ServeError::Compile(error) => error.is_missing_toolchain(),
            ServeError::Request(error) => error.is_missing_toolchain(),
            _ => false,
        }
    }
}

/// Into kiln's error: the cache's errors are given back, every other variant
/// becomes [`kiln_core::Error::Backend`] with this error as its source.
impl From<ServeError> for kiln_core::Error {
    fn from(error: ServeError) -> kiln_core::Error {
        match error {
            ServeError::Cache(error) => *error,
            ServeError::Compile(error) => error.into(),
            ServeError::Request(error) => (*error).into(),
            other => kiln_core::Error::Backend {
                backend: "kiln-cuda",
                source: Box::new(other),
            },
        }
    }
}
