//! The crate's one error type.

use std::path::PathBuf;

/// What can go wrong while setting up or running a reliability suite.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A cache, key or owner operation failed.
    #[error(transparent)]
    Core(#[from] kiln_core::Error),
    /// An image could not be written or read.
    #[error(transparent)]
    Image(#[from] kiln_image::ImageError),
    /// The CUDA backend (NVRTC) failed.
    #[error(transparent)]
    Cuda(#[from] kiln_cuda::Error),
    /// A file or process operation failed.
    #[error("could not {action} {}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// On what.
        path: PathBuf,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A helper process was called wrongly or answered something unexpected.
    #[error("helper process: {0}")]
    Child(String),
}

impl Error {
    /// An [`Error::Io`] builder for `map_err`.
    pub fn io(
        action: &'static str,
        path: impl Into<PathBuf>,
    ) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io {
            action,
            path,
            source,
        }
    }
}

/// Each operation's image error is an [`Error::Image`], so that `?` passes
/// it on.
macro_rules! image_error_from {
    ($($error:ident),*) => {$(
        impl From<kiln_image::$error> for Error {
            fn from(error: kiln_image::$error) -> Error {
                Error::Image(error.into())
            }
        }
    )*};
}

image_error_from!(ReadError, WriteError, SignatureError, KeyError);

/// Each operation's CUDA error is an [`Error::Cuda`], so that `?` passes it on.
macro_rules! cuda_error_from {
    ($($error:ident),*) => {$(
        impl From<kiln_cuda::$error> for Error {
            fn from(error: kiln_cuda::$error) -> Error {
                Error::Cuda(error.into())
            }
        }
    )*};
}

cuda_error_from!(ToolchainError, CompileError, LoadError, ShipError);
