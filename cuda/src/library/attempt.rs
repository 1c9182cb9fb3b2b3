//! The steps of serving a kernel that did not serve it, typed.

use std::fmt;

use crate::Arch;
use crate::select::Selection;
use crate::toolchain::NvrtcVersion;

/// One step of serving a kernel that did not serve it: what [`ServeError::NotShipped`](super::ServeError::NotShipped)
/// lists.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Attempt {
    /// The library's build found no NVRTC, so it shipped nothing.
    NothingShipped,
    /// `KILN_ALWAYS_COMPILE` skips the shipped entries.
    AlwaysCompile,
    /// `KILN_STRICT_TOOLCHAIN` skips the shipped entries: the local toolchain
    /// differs from the recorded one.
    StrictToolchain {
        /// How it differs.
        why: String,
    },
    /// The shipped entry of this target is not in the cache's images.
    NotInImages {
        /// Its target.
        target: Arch,
        /// What it would have been.
        selection: Selection,
    },
    /// The entry was found, but its artifact does not hold the kernel asked for.
    LacksKernel {
        /// The entry's target.
        target: Arch,
        /// What it is.
        selection: Selection,
    },
    /// Shipped PTX would run on the device, but its driver cannot JIT it.
    PtxRefused {
        /// Why (the driver's and the compiler's versions).
        why: String,
    },
    /// Nothing shipped runs on the device's arch.
    NoneRuns {
        /// The CUBIN targets shipped.
        shipped: Vec<Arch>,
    },
    /// Nothing shipped both runs on the device's arch and loads on its driver.
    NothingLoads {
        /// The device: its arch and driver (`sm_70 with a driver for CUDA 12.8`).
        device: String,
        /// What the images hold for its arch, per toolchain, and what each needs.
        holds: String,
        /// What the library's author could ship to serve it.
        advice: String,
    },
    /// Shipped CUBINs would run on the device's arch, but were built by a newer
    /// CUDA major than its driver loads.
    CubinRefused {
        /// Why (the driver's and the compiler's versions).
        why: String,
    },
    /// The kernel compiled for the device's arch by the recorded toolchain is in
    /// none of the cache's tiers.
    NotCompiledElsewhere {
        /// The recorded NVRTC release.
        nvrtc: NvrtcVersion,
    },
    /// The request for the device's arch under the recorded toolchain could not be
    /// built.
    NoRecordedRequest {
        /// The request function's error.
        why: String,
    },
}

impl fmt::Display for Attempt {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Attempt::NothingShipped => {
                f.write_str("the library's build had no NVRTC: it ships nothing")
            }
            Attempt::AlwaysCompile => f.write_str("KILN_ALWAYS_COMPILE skips them"),
            Attempt::StrictToolchain { why } => write!(f, "KILN_STRICT_TOOLCHAIN: {why}"),
            Attempt::NotInImages { target, selection } => {
                write!(f, "{target} {selection}: not in the images")
            }
            Attempt::LacksKernel { target, selection } => {
                write!(f, "{target} {selection}: does not hold the kernel")
            }
            Attempt::PtxRefused { why } => f.write_str(why),
            Attempt::NoneRuns { shipped } => {
                let list: Vec<String> = shipped.iter().map(Arch::to_string).collect();
                write!(
                    f,
                    "nothing shipped runs on it (shipped: {})",
                    list.join(", ")
                )
            }
            Attempt::NothingLoads {
                device,
                holds,
                advice,
            } => write!(
                f,
                "nothing shipped loads on {device}: the images hold {holds}; the library's \
                 author could add {advice}"
            ),
            Attempt::CubinRefused { why } => f.write_str(why),
            Attempt::NotCompiledElsewhere { nvrtc } => {
                write!(f, "compiled by {nvrtc}: not in the cache's tiers")
            }
            Attempt::NoRecordedRequest { why } => write!(f, "no request: {why}"),
        }
    }
}

/// The attempts of one derivation, in order; shown joined by `; `.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attempts(pub Vec<Attempt>);

impl fmt::Display for Attempts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, attempt) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str("; ")?;
            }
            write!(f, "{attempt}")?;
        }
        Ok(())
    }
}
