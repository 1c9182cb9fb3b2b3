//! How many kernels a library served each way.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::select::Selection;

/// How many kernels were served each way ([`Selection`]), counted once per
/// (cache, device, specialization, kernel) each time it is derived.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SelectionStats {
    /// Shipped CUBINs for exactly the device's arch.
    pub exact_cubin: u64,
    /// Shipped CUBINs of a compatible arch.
    pub compatible_cubin: u64,
    /// Shipped PTX (JIT-compiled by the driver at load).
    pub ptx: u64,
    /// Compiled on this machine (now, or earlier: memory, disk or remote tier).
    pub compiled: u64,
}

impl SelectionStats {
    /// The counts of every [`KernelLibrary`](super::KernelLibrary) of this process together.
    pub fn process() -> SelectionStats {
        PROCESS_COUNTS.snapshot()
    }

    /// The count of `selection`.
    pub fn count(&self, selection: Selection) -> u64 {
        match selection {
            Selection::ExactCubin => self.exact_cubin,
            Selection::CompatibleCubin => self.compatible_cubin,
            Selection::Ptx => self.ptx,
            Selection::Compiled => self.compiled,
        }
    }
}

pub(super) struct Counts([AtomicU64; 4]);

pub(super) static PROCESS_COUNTS: Counts = Counts::new();

impl Counts {
    pub(super) const fn new() -> Counts {
        Counts([const { AtomicU64::new(0) }; 4])
    }

    pub(super) fn bump(&self, selection: Selection) {
        let index = Selection::ALL
            .iter()
            .position(|s| *s == selection)
            .unwrap_or(0);
        self.0[index].fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn snapshot(&self) -> SelectionStats {
        let [exact_cubin, compatible_cubin, ptx, compiled] =
            self.0.each_ref().map(|c| c.load(Ordering::Relaxed));
        SelectionStats {
            exact_cubin,
            compatible_cubin,
            ptx,
            compiled,
        }
    }
}
