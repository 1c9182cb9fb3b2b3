//! Which shipped code runs on a device and loads on its driver: a pure function of
//! the device, its driver and what a kernel library's build recorded, so it is
//! tested without a GPU.
//!
//! A library ships, per toolchain of its build (an NVRTC 13 one and an NVRTC 12
//! one, say: [`BuildRecord::toolchains`]), one entry per kernel and target arch (a
//! CUBIN each; the entries of the PTX targets also carry their PTX). For a device
//! of arch `G` (compute capability `M.m`) whose driver supports CUDA `D`,
//! [`select`] orders what to look up:
//!
//! 1. **Exact CUBIN**: the target `G` itself.
//! 2. **Compatible CUBIN**: a target whose CUBIN runs on `M.m`
//!    ([`Arch::cubin_runs_on`]): same major, lower or equal minor for a plain or a
//!    family (`f`) target; an arch-specific (`a`) target only on exactly its arch.
//!    Nearest minor first; at equal minor, `a` before `f` before plain.
//! 3. **PTX** of each target that carries it, for the driver to JIT, when the PTX
//!    runs on `M.m` ([`Arch::ptx_runs_on`]: never an `a` or `f` target off its
//!    family) and its target is not already a CUBIN candidate of the same
//!    toolchain (the same compile: the CUBIN is better); newest target first.
//!
//! Within each step the newest toolchain comes first. An entry the driver cannot
//! load is never offered ([`support`]): a CUBIN built by NVRTC `X.Y` needs a driver
//! for CUDA `X.0` or newer (a CUDA 12 driver never gets NVRTC 13's CUBINs), PTX
//! from NVRTC `X.Y` a driver for `X.Y` or newer (the driver would fail the load
//! with `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`). When the driver's version is not
//! known (no GPU, an arch given by hand) every toolchain's entries are kept.
//!
//! Anything else is compiled for `G` ([`Selection::Compiled`]). No candidate is ever
//! a binary that cannot run on `G` or that its driver cannot load.
//!
//! The kernels of a program can differ by arch (`#if __CUDA_ARCH__ >= 800` around
//! the bf16 ones): the best candidate need not have the kernel a caller wants.
//! [`KernelLibrary::get_kernel`](crate::KernelLibrary::get_kernel) goes down this
//! list to the first entry that holds it; shipping PTX for the newest target as well
//! as the lowest ([`ShipPlan::with_ptx_targets`](crate::ShipPlan::with_ptx_targets))
//! gives a GPU newer than every CUBIN the newest kernel set.
//!
//! [`coverage`] applies the same rules to every GPU and driver Kiln knows: which
//! drivers and GPUs a build's code reaches, and where it leaves gaps.

pub mod coverage;
mod selection;

pub mod support;

use super::{Arch, ArchSuffix, BuildRecord};

pub use selection::Selection;
pub use support::{
    KNOWN_DRIVERS, KNOWN_GPUS, KnownGpu, cuda_version_text, driver_needed_for_cubin,
    driver_needed_for_ptx, known_gpu, parse_cuda_version,
};

/// A GPU as the selection sees it: the arch kernels are asked for, and the CUDA
/// version its driver supports when known.
///
/// ```
/// use kiln_cuda::{Device, Arch};
/// let device = Device::new("sm_86".parse::<Arch>()?).with_driver(13000);
/// assert_eq!(device.driver(), Some(13000));
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Device {
    arch: Arch,
    driver: Option<i32>,
}

impl Device {
    /// A device of `arch` whose driver is not known (PTX is assumed loadable).
    pub fn new(arch: Arch) -> Device {
        Device { arch, driver: None }
    }

    /// The same device, with a driver supporting CUDA `version` (`cuDriverGetVersion`:
    /// 13000 for 13.0).
    pub fn with_driver(mut self, version: i32) -> Device {
        self.driver = Some(version);
        self
    }

    /// The arch kernels are asked for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The driver's CUDA version, when known.
    pub fn driver(&self) -> Option<i32> {
        self.driver
    }
}

/// One shipped entry to look up: its toolchain, its target arch and what it would
/// be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The toolchain that built it: its index in [`BuildRecord::toolchains`].
    pub toolchain: usize,
    /// The target arch of the entry (its owner's target).
    pub target: Arch,
    /// What a hit on it is.
    pub selection: Selection,
}

/// What to look up for one device, best first.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Candidates {
    /// The shipped entries to try, in order.
    pub list: Vec<Candidate>,
    /// Why shipped PTX that would run on the device's arch was left out (its driver
    /// is too old for the compiler that produced it).
    pub ptx_refused: Option<String>,
    /// Why shipped CUBINs that would run on the device's arch were left out (they
    /// were built by a newer CUDA major than its driver's).
    pub cubin_refused: Option<String>,
}

/// The shipped entries to look up for `device`, best first (see the module
/// documentation). Needs no GPU: tests call it with any arch and driver.
///
/// ```
/// use kiln_cuda::Device;
/// use kiln_cuda::select::{Selection, select};
/// use kiln_cuda::toolchain::BuildRecord;
/// let record: BuildRecord =
///     "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_90 ptx=sm_75".parse()?;
/// let on_sm_87 = select(&Device::new("sm_87".parse()?), &record);
/// assert_eq!(on_sm_87.list[0].target.to_string(), "sm_86");
/// assert_eq!(on_sm_87.list[0].selection, Selection::CompatibleCubin);
/// let on_sm_120 = select(&Device::new("sm_120".parse()?), &record);
/// assert_eq!(on_sm_120.list[0].selection, Selection::Ptx);
/// // A CUDA 12.8 driver loads no NVRTC 13 code: nothing to offer, and why.
/// let old = select(&Device::new("sm_90".parse()?).with_driver(12080), &record);
/// assert!(old.list.is_empty() && old.cubin_refused.is_some());
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
pub fn select(device: &Device, record: &BuildRecord) -> Candidates {
    let wanted = device.arch;
    let (major, minor) = (wanted.major(), wanted.minor());
    let specificity = |arch: &Arch| match arch.suffix() {
        ArchSuffix::Specific => 0,
        ArchSuffix::Family => 1,
        ArchSuffix::None => 2,
    };
    let (mut exact, mut compatible, mut ptx) = (Vec::new(), Vec::new(), Vec::new());
    let (mut cubin_refused, mut ptx_refused) = (None, None);
    let driver_text = || device.driver.map(cuda_version_text).unwrap_or_default();
    for (index, toolchain) in record.toolchains().iter().enumerate() {
        let compiler = toolchain.nvrtc();
        let cubin_loads = device
            .driver
            .is_none_or(|driver| driver >= toolchain.cubin_driver());
        let ptx_loads = device
            .driver
            .is_none_or(|driver| driver >= toolchain.ptx_driver());
        let candidate = |target, selection| Candidate {
            toolchain: index,
            target,
            selection,
        };
        let runs: Vec<Arch> = toolchain
            .cubin_targets()
            .iter()
            .copied()
            .filter(|t| t.cubin_runs_on(major, minor))
            .collect();
        if !runs.is_empty() && !cubin_loads {
            cubin_refused.get_or_insert_with(|| {
                format!(
                    "the shipped CUBINs for it ({}) were built by NVRTC {compiler}, which this \
                     driver (CUDA {}) cannot load: they need a driver for CUDA {} or newer",
                    list(&runs),
                    driver_text(),
                    cuda_version_text(toolchain.cubin_driver()),
                )
            });
        }
        if cubin_loads {
            for target in &runs {
                if *target == wanted {
                    exact.push(candidate(*target, Selection::ExactCubin));
                } else {
                    compatible.push(candidate(*target, Selection::CompatibleCubin));
                }
            }
        }
        let runnable: Vec<Arch> = toolchain
            .ptx_targets()
            .iter()
            .rev()
            .copied()
            .filter(|t| t.ptx_runs_on(major, minor) && !(cubin_loads && runs.contains(t)))
            .collect();
        if runnable.is_empty() {
            continue;
        }
        if ptx_loads {
            ptx.extend(runnable.iter().map(|t| candidate(*t, Selection::Ptx)));
        } else {
            ptx_refused.get_or_insert_with(|| {
                format!(
                    "the shipped PTX ({}) was produced by NVRTC {compiler}, and this driver \
                     (CUDA {}) cannot JIT it: it needs a driver for CUDA {} or newer",
                    list(&runnable),
                    driver_text(),
                    cuda_version_text(toolchain.ptx_driver()),
                )
            });
        }
    }
    // Toolchains come newest first: a stable sort keeps that order within a key.
    compatible.sort_by_key(|c| (std::cmp::Reverse(c.target.minor()), specificity(&c.target)));
    let mut list = exact;
    list.extend(compatible);
    list.extend(ptx);
    Candidates {
        list,
        ptx_refused,
        cubin_refused,
    }
}

/// What `record` holds that runs on `device`'s arch, per toolchain, and what each
/// needs of the driver: for an error that says why nothing was served.
///
/// ```
/// use kiln_cuda::Device;
/// use kiln_cuda::select::holdings;
/// let record = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_90 ptx=sm_75".parse()?;
/// let text = holdings(&Device::new("sm_90".parse()?), &record);
/// assert_eq!(text, "NVRTC 13.0.88: CUBIN sm_90 (loads on drivers for CUDA 13.0+), PTX sm_75 (13.0+)");
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
pub fn holdings(device: &Device, record: &BuildRecord) -> String {
    let (major, minor) = (device.arch.major(), device.arch.minor());
    let parts: Vec<String> = record
        .toolchains()
        .iter()
        .map(|toolchain| {
            let cubins: Vec<Arch> = toolchain
                .cubin_targets()
                .iter()
                .copied()
                .filter(|t| t.cubin_runs_on(major, minor))
                .collect();
            let ptx: Vec<Arch> = toolchain
                .ptx_targets()
                .iter()
                .copied()
                .filter(|t| t.ptx_runs_on(major, minor))
                .collect();
            let mut held = Vec::new();
            if !cubins.is_empty() {
                held.push(format!(
                    "CUBIN {} (loads on drivers for CUDA {}+)",
                    list(&cubins),
                    cuda_version_text(toolchain.cubin_driver())
                ));
            }
            if !ptx.is_empty() {
                held.push(format!(
                    "PTX {} ({}+)",
                    list(&ptx),
                    cuda_version_text(toolchain.ptx_driver())
                ));
            }
            if held.is_empty() {
                held.push(format!(
                    "nothing for it (CUBINs {})",
                    if toolchain.cubin_targets().is_empty() {
                        "none".to_owned()
                    } else {
                        list(toolchain.cubin_targets())
                    }
                ));
            }
            format!("NVRTC {}: {}", toolchain.nvrtc(), held.join(", "))
        })
        .collect();
    if parts.is_empty() {
        "nothing (the library's build had no NVRTC)".to_owned()
    } else {
        parts.join("; ")
    }
}

/// What a library's author could ship so that `device` (its arch and driver) is
/// served: a CUBIN from an NVRTC the driver loads and that compiles for the arch,
/// or PTX from an NVRTC no newer than the driver.
///
/// ```
/// use kiln_cuda::Device;
/// use kiln_cuda::select::advice;
/// let v100 = Device::new("sm_70".parse()?).with_driver(12080);
/// assert_eq!(
///     advice(&v100),
///     "a CUBIN for sm_70 built by NVRTC 12.x (a CUDA 12 toolchain in its ShipPlan), \
///      or PTX for sm_70 or older from NVRTC 12.8 or older"
/// );
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
pub fn advice(device: &Device) -> String {
    let arch = device.arch;
    let newest = support::newest_major_for(arch);
    let major = match (device.driver, newest) {
        (Some(driver), Some(newest)) => Some((driver / 1000).min(newest as i32)),
        (Some(driver), None) => Some(driver / 1000),
        (None, newest) => newest.map(|n| n as i32),
    };
    let cubin = match major {
        Some(major) => format!(
            "a CUBIN for {arch} built by NVRTC {major}.x (a CUDA {major} toolchain in its ShipPlan)"
        ),
        None => format!("a CUBIN for {arch}"),
    };
    match device.driver {
        Some(driver) => format!(
            "{cubin}, or PTX for {arch} or older from NVRTC {} or older",
            cuda_version_text(driver)
        ),
        None => format!("{cubin}, or PTX for {arch} or older"),
    }
}

/// Archs as a comma-separated list.
pub(crate) fn list(archs: &[Arch]) -> String {
    archs
        .iter()
        .map(Arch::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arch(s: &str) -> Arch {
        s.parse().unwrap()
    }

    fn record(text: &str) -> BuildRecord {
        text.parse().unwrap()
    }

    const DEMO: &str = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75";

    fn plan(device: &str, text: &str) -> Vec<(String, Selection)> {
        select(&Device::new(arch(device)), &record(text))
            .list
            .into_iter()
            .map(|c| (c.target.to_string(), c.selection))
            .collect()
    }

    fn first(device: &str) -> Option<(String, Selection)> {
        plan(device, DEMO).into_iter().next()
    }

    #[test]
    fn each_shipped_arch_gets_its_own_cubin_first() {
        for target in [
            "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
        ] {
            assert_eq!(
                first(target),
                Some((target.to_owned(), Selection::ExactCubin)),
                "{target}"
            );
        }
    }

    #[test]
    fn an_unshipped_arch_gets_the_nearest_compatible_cubin() {
        use Selection::*;
        assert_eq!(
            plan("sm_87", DEMO),
            [
                ("sm_86".to_owned(), CompatibleCubin),
                ("sm_80".to_owned(), CompatibleCubin),
                ("sm_75".to_owned(), Ptx),
            ]
        );
        assert_eq!(first("sm_88"), Some(("sm_86".to_owned(), CompatibleCubin)));
        assert_eq!(
            first("sm_103"),
            Some(("sm_100".to_owned(), CompatibleCubin))
        );
        assert_eq!(
            first("sm_121"),
            Some(("sm_120".to_owned(), CompatibleCubin))
        );
        // The exact target comes before any compatible one.
        assert_eq!(
            plan("sm_89", DEMO)[..3],
            [
                ("sm_89".to_owned(), ExactCubin),
                ("sm_86".to_owned(), CompatibleCubin),
                ("sm_80".to_owned(), CompatibleCubin),
            ]
        );
    }

    #[test]
    fn an_arch_with_no_compatible_cubin_gets_the_ptx() {
        // Thor (11.0): no 11.x CUBIN; a future major; the lowest PTX runs on both.
        for device in ["sm_110", "sm_130", "sm_150"] {
            assert_eq!(
                plan(device, DEMO),
                [("sm_75".to_owned(), Selection::Ptx)],
                "{device}"
            );
        }
    }

    #[test]
    fn nothing_that_cannot_run_is_ever_offered() {
        let record = record(
            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_90,sm_90a,sm_100f,sm_100a,sm_120 ptx=sm_80",
        );
        for major in 5..=15 {
            for minor in 0..=9 {
                let Ok(device) = Arch::new(major, minor, ArchSuffix::None) else {
                    continue;
                };
                for candidate in select(&Device::new(device), &record).list {
                    let runs = match candidate.selection {
                        Selection::Ptx => candidate.target.ptx_runs_on(major, minor),
                        _ => candidate.target.cubin_runs_on(major, minor),
                    };
                    assert!(runs, "{candidate:?} offered for {device}");
                }
            }
        }
        // Older than the PTX target: nothing at all.
        assert!(plan("sm_70", DEMO).is_empty());
        assert!(plan("sm_72", DEMO).is_empty());
    }

    #[test]
    fn arch_specific_and_family_cubins_follow_their_rules() {
        use Selection::*;
        let text = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_90a,sm_100,sm_100a,sm_100f ptx=sm_100";
        // sm_90a runs on 9.0 only.
        assert_eq!(
            plan("sm_90", text),
            [("sm_90a".to_owned(), CompatibleCubin)]
        );
        assert_eq!(plan("sm_90a", text), [("sm_90a".to_owned(), ExactCubin)]);
        // On 10.3: sm_100a is out (10.0 only); the family and the plain CUBIN run,
        // the family first; the PTX target is already a candidate.
        assert_eq!(
            plan("sm_103", text),
            [
                ("sm_100f".to_owned(), CompatibleCubin),
                ("sm_100".to_owned(), CompatibleCubin),
            ]
        );
        // On 10.0: exact plain first, then a before f.
        assert_eq!(
            plan("sm_100", text),
            [
                ("sm_100".to_owned(), ExactCubin),
                ("sm_100a".to_owned(), CompatibleCubin),
                ("sm_100f".to_owned(), CompatibleCubin),
            ]
        );
        // No 12.x CUBIN, and sm_100 PTX runs on 12.0.
        assert_eq!(plan("sm_120", text), [("sm_100".to_owned(), Ptx)]);
    }

    #[test]
    fn ptx_needs_a_driver_new_enough_for_its_compiler() {
        let record = record(DEMO);
        let device = Device::new(arch("sm_110"));
        assert_eq!(select(&device.with_driver(13000), &record).list.len(), 1);
        assert_eq!(select(&device.with_driver(13020), &record).list.len(), 1);
        let old = select(&device.with_driver(12080), &record);
        assert!(old.list.is_empty());
        let why = old.ptx_refused.unwrap();
        assert!(
            why.contains("NVRTC 13.0.88") && why.contains("CUDA 12.8"),
            "{why}"
        );
        assert!(why.contains("CUDA 13.0 or newer"), "{why}");
        // A CUBIN needs no JIT, but one of a newer CUDA major does not load: a
        // CUDA 12 driver gets no NVRTC 13 CUBIN, and is told why.
        let newer = select(&Device::new(arch("sm_86")).with_driver(12080), &record);
        assert!(newer.list.is_empty());
        let why = newer.cubin_refused.unwrap();
        assert!(why.contains("CUDA 13.0 or newer"), "{why}");
        // An NVRTC 12.9 CUBIN loads on every CUDA 12 driver, its PTX only on 12.9+.
        let twelve = record_of("kiln-cuda-build/1 nvrtc=12.9.86 cubin=sm_80,sm_86 ptx=sm_80");
        let cubin = select(&Device::new(arch("sm_86")).with_driver(12000), &twelve);
        assert_eq!(cubin.list[0].selection, Selection::ExactCubin);
        let ptx = select(&Device::new(arch("sm_90")).with_driver(12080), &twelve);
        assert!(ptx.list.is_empty() && ptx.ptx_refused.is_some());
        let ptx = select(&Device::new(arch("sm_90")).with_driver(12090), &twelve);
        assert_eq!(ptx.list[0].selection, Selection::Ptx);
        assert_eq!(driver_needed_for_ptx(&"12.8.93".parse().unwrap()), 12080);
    }

    fn record_of(text: &str) -> BuildRecord {
        text.parse().unwrap()
    }

    /// The demo libraries' plan: NVRTC 13.0 for sm_75 to sm_120, NVRTC 12.9 for
    /// sm_50 to sm_120.
    const TWO: &str = "kiln-cuda-build/2 \
        nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75 \
        nvrtc=12.9.86 cubin=sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_50";

    /// Whether the rules let `driver` load, on `gpu`, the `selection` of entry
    /// `target` of a toolchain of NVRTC `major.minor`: checked from first
    /// principles, not through `select`.
    fn rules_allow(
        gpu: Arch,
        driver: i32,
        (major, minor): (u32, u32),
        target: Arch,
        ptx: bool,
    ) -> bool {
        let (gm, gn) = (gpu.major(), gpu.minor());
        let runs = if ptx {
            match target.suffix() {
                ArchSuffix::None => (target.major(), target.minor()) <= (gm, gn),
                _ => false,
            }
        } else {
            target.major() == gm && target.minor() <= gn && target.suffix() == ArchSuffix::None
        };
        let loads = if ptx {
            driver >= (major * 1000 + minor * 10) as i32
        } else {
            driver >= (major * 1000) as i32
        };
        runs && loads
    }

    /// The selection table: drivers 12.0 to 13.5 × GPUs from Pascal to Blackwell
    /// and one newer than every CUBIN, each cell checked against the rules: every
    /// candidate runs on the GPU and loads on the driver, every entry that does is
    /// a candidate, and the first is the one the table states.
    #[test]
    fn the_selection_table_over_drivers_and_gpus_follows_the_rules() {
        let record = record_of(TWO);
        let drivers = [12000, 12020, 12080, 12090, 13000, 13050];
        let gpus = [
            "sm_60", "sm_70", "sm_75", "sm_86", "sm_90", "sm_120", "sm_130",
        ];
        // The first candidate of each cell: (toolchain major, kind, target).
        let expected: [[&str; 6]; 7] = [
            // 12.0           12.2            12.8            12.9            13.0            13.5
            [
                "12 cubin sm_60",
                "12 cubin sm_60",
                "12 cubin sm_60",
                "12 cubin sm_60",
                "12 cubin sm_60",
                "12 cubin sm_60",
            ],
            [
                "12 cubin sm_70",
                "12 cubin sm_70",
                "12 cubin sm_70",
                "12 cubin sm_70",
                "12 cubin sm_70",
                "12 cubin sm_70",
            ],
            [
                "12 cubin sm_75",
                "12 cubin sm_75",
                "12 cubin sm_75",
                "12 cubin sm_75",
                "13 cubin sm_75",
                "13 cubin sm_75",
            ],
            [
                "12 cubin sm_86",
                "12 cubin sm_86",
                "12 cubin sm_86",
                "12 cubin sm_86",
                "13 cubin sm_86",
                "13 cubin sm_86",
            ],
            [
                "12 cubin sm_90",
                "12 cubin sm_90",
                "12 cubin sm_90",
                "12 cubin sm_90",
                "13 cubin sm_90",
                "13 cubin sm_90",
            ],
            [
                "12 cubin sm_120",
                "12 cubin sm_120",
                "12 cubin sm_120",
                "12 cubin sm_120",
                "13 cubin sm_120",
                "13 cubin sm_120",
            ],
            // Newer than every CUBIN: PTX, from 12.9 only where the driver JITs it.
            [
                "none",
                "none",
                "none",
                "12 ptx sm_50",
                "13 ptx sm_75",
                "13 ptx sm_75",
            ],
        ];
        for (row, gpu) in gpus.iter().enumerate() {
            let gpu = arch(gpu);
            for (column, driver) in drivers.iter().enumerate() {
                let found = select(&Device::new(gpu).with_driver(*driver), &record);
                let cell = format!("{gpu} on {}", cuda_version_text(*driver));
                let mut offered = Vec::new();
                for candidate in &found.list {
                    let nvrtc = record.toolchains()[candidate.toolchain].nvrtc();
                    let ptx = candidate.selection == Selection::Ptx;
                    assert!(
                        rules_allow(
                            gpu,
                            *driver,
                            (nvrtc.major, nvrtc.minor),
                            candidate.target,
                            ptx
                        ),
                        "{cell}: {candidate:?} breaks the rules"
                    );
                    offered.push((candidate.toolchain, candidate.target, ptx));
                }
                // Nothing that loads is left out: each CUBIN, and each PTX not
                // already offered as its toolchain's CUBIN.
                for (index, toolchain) in record.toolchains().iter().enumerate() {
                    let version = (toolchain.nvrtc().major, toolchain.nvrtc().minor);
                    for target in toolchain.cubin_targets() {
                        if rules_allow(gpu, *driver, version, *target, false) {
                            assert!(
                                offered.contains(&(index, *target, false)),
                                "{cell}: {target} CUBIN left out"
                            );
                        }
                    }
                    for target in toolchain.ptx_targets() {
                        let as_cubin = offered.contains(&(index, *target, false));
                        if rules_allow(gpu, *driver, version, *target, true) && !as_cubin {
                            assert!(
                                offered.contains(&(index, *target, true)),
                                "{cell}: {target} PTX left out"
                            );
                        }
                    }
                }
                let first = found.list.first().map_or("none".to_owned(), |c| {
                    let major = record.toolchains()[c.toolchain].nvrtc().major;
                    let kind = if c.selection == Selection::Ptx {
                        "ptx"
                    } else {
                        "cubin"
                    };
                    format!("{major} {kind} {}", c.target)
                });
                assert_eq!(first, expected[row][column], "{cell}");
                // Exact before compatible before PTX, newest toolchain first.
                let rank = |c: &Candidate| match c.selection {
                    Selection::ExactCubin => 0,
                    Selection::CompatibleCubin => 1,
                    _ => 2,
                };
                assert!(
                    found.list.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])),
                    "{cell}"
                );
                if found.list.is_empty() {
                    assert!(
                        found.ptx_refused.is_some() || found.cubin_refused.is_some(),
                        "{cell}"
                    );
                }
            }
        }
        // An sm_70 on a CUDA 13.0 driver: NVRTC 13 has nothing for it, the 12.9 CUBIN
        // loads (an older major on a newer driver), then the 12.9 PTX.
        let volta = select(&Device::new(arch("sm_70")).with_driver(13000), &record);
        let found: Vec<(usize, String, Selection)> = volta
            .list
            .iter()
            .map(|c| (c.toolchain, c.target.to_string(), c.selection))
            .collect();
        assert_eq!(
            found,
            [
                (1, "sm_70".to_owned(), Selection::ExactCubin),
                (1, "sm_50".to_owned(), Selection::Ptx)
            ]
        );
    }

    #[test]
    fn several_ptx_targets_are_offered_newest_first() {
        use Selection::*;
        let text = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75,sm_120";
        // Newer than every CUBIN: the newest PTX first, then the lowest.
        assert_eq!(
            plan("sm_130", text),
            [("sm_120".to_owned(), Ptx), ("sm_75".to_owned(), Ptx)]
        );
        // Thor: the sm_120 PTX cannot run on 11.0.
        assert_eq!(plan("sm_110", text), [("sm_75".to_owned(), Ptx)]);
        // A PTX target that is a CUBIN candidate adds nothing (the same entry).
        assert_eq!(
            plan("sm_121", text),
            [
                ("sm_120".to_owned(), CompatibleCubin),
                ("sm_75".to_owned(), Ptx)
            ]
        );
    }

    #[test]
    fn a_record_without_a_compiler_offers_nothing() {
        assert!(plan("sm_90", "kiln-cuda-build/1").is_empty());
    }
}
