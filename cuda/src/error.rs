//! The crate's error: [`Error`], one variant per operation's own error, for code
//! that calls several of them (a build script, an application) and wants one
//! type, and for a kernel library's request function.
//!
//! Each operation returns its own, small error, beside it:
//! [`ToolchainError`] (finding NVRTC, its release, the header sets, a build
//! record), [`CompileError`] (options, requests, NVRTC's verdict),
//! [`LoadError`] (the driver, the chosen artifact, the JIT),
//! [`ShipError`] (a build script's plan) and
//! [`ServeError`](crate::ServeError) (a [`KernelLibrary`](crate::KernelLibrary)'s
//! answer, which wraps this one: the library's request function returns it).

use crate::arch::InvalidArch;
use crate::loader::error::LoadError;
use crate::ship::ShipError;
use crate::toolchain::error::{CompileError, ToolchainError};
use crate::toolchain::nvrtc::version::InvalidNvrtcVersion;

/// An error of any of kiln-cuda's operations but serving (a library's
/// [`ServeError`](crate::ServeError) wraps this one).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Finding a toolchain failed.
    #[error(transparent)]
    Toolchain(#[from] ToolchainError),
    /// Compiling failed.
    #[error(transparent)]
    Compile(#[from] CompileError),
    /// Loading into the driver failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// A kernel library's build failed.
    #[error(transparent)]
    Ship(#[from] ShipError),
    /// A GPU architecture name or capability that Kiln cannot compile for.
    #[error(transparent)]
    InvalidArch(#[from] InvalidArch),
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
    /// The cache's key, owner, lookup or compile failed.
    /// (Boxed: the cache's error is large.)
    #[error(transparent)]
    Cache(Box<kiln_core::Error>),
}

impl From<kiln_core::Error> for Error {
    fn from(error: kiln_core::Error) -> Error {
        Error::Cache(Box::new(error))
    }
}

impl From<InvalidNvrtcVersion> for Error {
    fn from(error: InvalidNvrtcVersion) -> Error {
        Error::Toolchain(error.into())
    }
}

/// Into kiln's error, so that code returning `kiln::Error` (a build script, a
/// library's own API) can use `?` on this crate's calls: the cache's errors are
/// given back, every other becomes [`kiln_core::Error::Backend`] with its
/// operation's error as its source.
impl From<Error> for kiln_core::Error {
    fn from(error: Error) -> kiln_core::Error {
        let source: Box<dyn std::error::Error + Send + Sync> = match error {
            Error::Cache(error) => return *error,
            Error::Compile(error) => return error.into(),
            Error::Load(error) => return error.into(),
            Error::Toolchain(error) => Box::new(error),
            Error::Ship(error) => Box::new(error),
            other => Box::new(other),
        };
        kiln_core::Error::Backend {
            backend: "kiln-cuda",
            source,
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

/// Into kiln's error as [`ToolchainError::InvalidNvrtcVersion`] would go, so that
/// code returning `kiln::Error` can use `?` on parsing an
/// [`NvrtcVersion`](crate::toolchain::NvrtcVersion).
impl From<InvalidNvrtcVersion> for kiln_core::Error {
    fn from(error: InvalidNvrtcVersion) -> kiln_core::Error {
        Error::from(error).into()
    }
}

/// What a [`ShipPlan`](crate::ShipPlan)'s request function's error becomes: the
/// toolchain's and the compile's errors keep their types (so that a kernel whose
/// toolchain is missing is left out with a warning), the rest is the request's.
impl From<Error> for ShipError {
    fn from(error: Error) -> ShipError {
        match error {
            Error::Toolchain(error) => ShipError::Toolchain(error),
            Error::Compile(error) => ShipError::Compile(error),
            Error::Ship(error) => error,
            Error::InvalidArch(error) => ShipError::InvalidArch(error),
            Error::InvalidDriverList { given, item } => {
                ShipError::InvalidDriverList { given, item }
            }
            Error::Cache(error) => ShipError::Cache(error),
            other => ShipError::Request(Box::new(other)),
        }
    }
}

impl Error {
    /// Whether this says that a toolchain this machine lacks is needed (no
    /// NVRTC, no headers of a set, a record without it) rather than that the
    /// kernel's code is wrong: a precompile block leaves such a kernel out with
    /// a warning instead of failing the build.
    pub fn is_missing_toolchain(&self) -> bool {
        match self {
            Error::Toolchain(error) => error.is_missing_toolchain(),
            Error::Compile(error) => error.is_missing_toolchain(),
            Error::Ship(error) => error.is_missing_toolchain(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kiln_test_support::errors::assert_cause_not_repeated;

    use crate::ServeError;
    use crate::toolchain::error::SearchLog;

    use super::*;

    /// Every variant of the operations' errors that carries a cause: its
    /// message does not repeat it.
    #[test]
    fn no_message_repeats_the_cause_it_returns() {
        let io = || std::io::Error::other("the disk is on fire");
        let not_found = || ToolchainError::NvrtcNotFound {
            searched: SearchLog(Vec::new()),
        };
        let samples: Vec<Box<dyn std::error::Error>> = vec![
            Box::new(ToolchainError::Io {
                path: "/cccl".into(),
                source: io(),
            }),
            Box::new(CompileError::Toolchain(ToolchainError::Io {
                path: "/cccl".into(),
                source: io(),
            })),
            // (`LoadError::Driver`'s cause asks the driver for its text: not
            // built here, where there may be none.)
            Box::new(LoadError::from(kiln_core::Error::DiskIo {
                action: "store",
                path: "/cache".into(),
                source: io(),
            })),
            Box::new(ServeError::Toolchain(ToolchainError::Shared(Arc::new(
                ToolchainError::Io {
                    path: "/cccl".into(),
                    source: io(),
                },
            )))),
            Box::new(Error::Toolchain(ToolchainError::Io {
                path: "/cccl".into(),
                source: io(),
            })),
            Box::new(kiln_core::Error::from(CompileError::Toolchain(not_found()))),
        ];
        for error in &samples {
            assert_cause_not_repeated(error.as_ref());
        }
    }
}
