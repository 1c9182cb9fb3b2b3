//! The bench's one error type.

use std::path::PathBuf;

/// Everything that can stop a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// Kiln (cache, image, CUDA backend) failed.
    #[error(transparent)]
    Kiln(#[from] kiln::Error),
    /// The image format failed.
    #[error(transparent)]
    Image(#[from] kiln::image::ImageError),
    /// The CUDA backend failed.
    #[error(transparent)]
    Cuda(#[from] kiln::cuda::Error),
    /// A file could not be read or written.
    #[error("{path}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A baseline file failed its BLAKE3 check.
    #[error("{path}: checksum mismatch (the file is corrupt; rerun the bench to rewrite it)")]
    Checksum {
        /// The file.
        path: PathBuf,
    },
    /// A baseline file did not decode.
    #[error("{path}: does not decode")]
    Decode {
        /// The file.
        path: PathBuf,
        /// Why.
        source: postcard::Error,
    },
    /// A serde encoding failed.
    #[error("encoding {what}: {reason}")]
    Encode {
        /// What was encoded.
        what: &'static str,
        /// Why it failed.
        reason: String,
    },
    /// A warm mode did not find a kernel it was warmed with.
    #[error(
        "mode {mode}: kernel {kernel} missing from the warm fixture (rerun the driver to rebuild the fixtures)"
    )]
    Missing {
        /// The mode.
        mode: String,
        /// The kernel.
        kernel: String,
    },
    /// A warm mode compiled instead of hitting.
    #[error("mode {mode}: {compiles} kernel(s) compiled where all were expected from the cache")]
    Compiled {
        /// The mode.
        mode: String,
        /// How many compiles it ran.
        compiles: u64,
    },
    /// The example library served another entry than the one the lookups found.
    #[error(
        "mode {mode}: kiln_kernels_demo::get served {served} for kernel {kernel}, not the exact-arch entry the lookups found (the library and the bench derive keys differently: rebuild both)"
    )]
    Library {
        /// The mode.
        mode: String,
        /// The kernel.
        kernel: String,
        /// What the library served.
        served: String,
    },
    /// A child that must not load NVRTC loaded it, or could find it.
    #[error("mode {mode}: {what}")]
    Nvrtc {
        /// The mode.
        mode: String,
        /// What was found (NVRTC mapped, or where it was reachable).
        what: String,
    },
    /// The embedded image a mode needs is not in the binary.
    #[error("no embedded image from crate {crate_name}: the binary was built without it")]
    NoEmbedded {
        /// The crate that should have embedded it.
        crate_name: &'static str,
    },
    /// The file image was not merged in file-image mode.
    #[error("the image in KILN_IMAGE_PATH was not merged: {0}")]
    FileImage(String),
    /// A GPU step failed.
    #[error("GPU: {what}: {reason}")]
    Gpu {
        /// The step (loading the module, launching...).
        what: String,
        /// The driver's error.
        reason: String,
    },
    /// A child process failed or printed no measurement.
    #[error("child `{args}` failed: {reason}")]
    Child {
        /// The child's arguments.
        args: String,
        /// What went wrong (exit status and stderr, or the bad line).
        reason: String,
    },
    /// Drawing the chart failed.
    #[error("drawing {path}: {reason}")]
    Chart {
        /// The SVG file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// `/proc/self/statm` could not be read (resident memory needs Linux).
    #[error("reading resident memory from /proc/self/statm: {0}")]
    Rss(String),
}

impl BenchError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> BenchError {
        let path = path.into();
        move |source| BenchError::Io { path, source }
    }
}

/// Each operation's image error is a [`BenchError::Image`], so that `?`
/// passes it on.
macro_rules! image_error_from {
    ($($error:ident),*) => {$(
        impl From<kiln::image::$error> for BenchError {
            fn from(error: kiln::image::$error) -> BenchError {
                BenchError::Image(error.into())
            }
        }
    )*};
}

image_error_from!(ReadError, WriteError, SignatureError, KeyError);

/// Each operation's CUDA error is a [`BenchError::Cuda`], so that `?` passes
/// it on.
macro_rules! cuda_error_from {
    ($($error:ident),*) => {$(
        impl From<kiln::cuda::$error> for BenchError {
            fn from(error: kiln::cuda::$error) -> BenchError {
                BenchError::Cuda(error.into())
            }
        }
    )*};
}

cuda_error_from!(ToolchainError, CompileError, LoadError, ShipError);

/// A target that is not an arch is a CUDA error ([`BenchError::Cuda`]).
impl From<kiln::cuda::arch::InvalidArch> for BenchError {
    fn from(error: kiln::cuda::arch::InvalidArch) -> BenchError {
        BenchError::Cuda(error.into())
    }
}

/// A kernel library's error is Kiln's ([`BenchError::Kiln`]).
impl From<kiln::cuda::ServeError> for BenchError {
    fn from(error: kiln::cuda::ServeError) -> BenchError {
        BenchError::Kiln(error.into())
    }
}
