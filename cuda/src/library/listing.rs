//! A library's kernels as one device would be served them, compiling nothing:
//! what [`KernelLibrary::kernels`](super::KernelLibrary::kernels) lists, and what
//! [`images`](super::images) reports from images alone.

use std::fmt;

use super::attempt::Attempts;
use super::served::ChosenArtifact;
use crate::Arch;
use crate::select::{Selection, cuda_version_text};

/// How one kernel would be served to a device, compiling nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KernelOutcome {
    /// Served from what is already there (an image, or a tier).
    Served {
        /// Exact CUBIN, compatible CUBIN, PTX, or the entry compiled for exactly
        /// the device's arch elsewhere ([`Selection::Compiled`]).
        selection: Selection,
        /// The artifact: its kind, the arch it was built for and the NVRTC
        /// release that built it ([`ChosenArtifact::driver_needed`]: the oldest
        /// driver that loads it).
        artifact: ChosenArtifact,
    },
    /// The entry built for exactly the device's arch does not hold the kernel: it
    /// does not exist for that arch (a kernel under `#if __CUDA_ARCH__ >= 800`, on
    /// an sm_75). Not a gap: [`get_kernel`](super::KernelLibrary::get_kernel)
    /// answers [`ServeError::NoSuchKernel`](super::ServeError::NoSuchKernel).
    NotForArch {
        /// What the entry is.
        selection: Selection,
        /// The arch it was built for.
        target: Arch,
    },
    /// Nothing there serves it: the application compiles it on first use, and
    /// on a machine without NVRTC fails with
    /// [`ServeError::NotShipped`](super::ServeError::NotShipped).
    Missing {
        /// What was looked for, and why it did not serve.
        tried: Attempts,
    },
}

impl KernelOutcome {
    /// Whether the kernel is missing (the application would have to compile it).
    pub fn is_missing(&self) -> bool {
        matches!(self, KernelOutcome::Missing { .. })
    }

    /// The artifact served, if it is served.
    pub fn served(&self) -> Option<(Selection, &ChosenArtifact)> {
        match self {
            KernelOutcome::Served {
                selection,
                artifact,
            } => Some((*selection, artifact)),
            _ => None,
        }
    }
}

impl fmt::Display for KernelOutcome {
    /// `exact-cubin sm_90 (NVRTC 13.0.88, drivers for CUDA 13.0+)`,
    /// `not built for this arch (exact-cubin sm_75 lacks it)`, or
    /// `missing: ` and the attempts.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KernelOutcome::Served {
                selection,
                artifact,
            } => {
                write!(f, "{selection} {}", artifact.target)?;
                match (&artifact.nvrtc, artifact.driver_needed()) {
                    (Some(nvrtc), Some(driver)) => write!(
                        f,
                        " (NVRTC {nvrtc}, drivers for CUDA {}+)",
                        cuda_version_text(driver)
                    ),
                    _ => Ok(()),
                }
            }
            KernelOutcome::NotForArch { selection, target } => {
                write!(f, "not built for this arch ({selection} {target} lacks it)")
            }
            KernelOutcome::Missing { tried } => write!(f, "missing: {tried}"),
        }
    }
}

/// One kernel of a [`KernelLibrary`](super::KernelLibrary) for one device: the
/// specialization, its program, the kernel (an entry point) and how it would be
/// served.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct ListedKernel<S> {
    /// The specialization.
    pub spec: S,
    /// The program's name (its request's).
    pub program: String,
    /// The kernel: an entry point of the program's entries. `None` when no entry
    /// of the program was found for any target (its kernels are not known): the
    /// outcome then says why for the program.
    pub kernel: Option<String>,
    /// How it would be served.
    pub outcome: KernelOutcome,
}
