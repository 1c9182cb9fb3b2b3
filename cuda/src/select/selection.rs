//! How a kernel came to the caller: the kind of code [`select`](super::select)
//! and a kernel library chose.

use std::fmt;

/// How a kernel came to the caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Selection {
    /// A shipped CUBIN built for exactly the device's arch.
    ExactCubin,
    /// A shipped CUBIN of a binary-compatible arch (same major, lower minor).
    CompatibleCubin,
    /// Shipped PTX, JIT-compiled by the driver when the module is loaded.
    Ptx,
    /// Compiled at run time for the device's exact arch: here, now or earlier, or
    /// by another machine with the build's toolchain (from memory, the disk or
    /// remote tier, or an application's baked image).
    Compiled,
}

impl Selection {
    /// Every selection, in the order above.
    pub const ALL: [Selection; 4] = [
        Selection::ExactCubin,
        Selection::CompatibleCubin,
        Selection::Ptx,
        Selection::Compiled,
    ];

    /// The name in reports: `exact-cubin`, `compatible-cubin`, `ptx`, `compiled`.
    pub fn as_str(self) -> &'static str {
        match self {
            Selection::ExactCubin => "exact-cubin",
            Selection::CompatibleCubin => "compatible-cubin",
            Selection::Ptx => "ptx",
            Selection::Compiled => "compiled",
        }
    }
}

impl fmt::Display for Selection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
