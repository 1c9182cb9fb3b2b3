//! Which shipped code runs on a device: a pure function of the device and what a
//! kernel library's build recorded, so it is tested without a GPU.
//!
//! A library ships one entry per kernel and target arch (a CUBIN each; the entries
//! of the PTX targets, the lowest by default, also carry their PTX). For a device of
//! arch `G` (compute capability `M.m`), [`select`] orders what to look up:
//!
//! 1. **Exact CUBIN**: the target `G` itself.
//! 2. **Compatible CUBIN**: a target whose CUBIN runs on `M.m`
//!    ([`Arch::cubin_runs_on`]): same major, lower or equal minor for a plain or a
//!    family (`f`) target; an arch-specific (`a`) target only on exactly its arch.
//!    Nearest minor first; at equal minor, `a` before `f` before plain.
//! 3. **PTX** of each target that carries it, newest first, for the driver to JIT,
//!    when the PTX runs on `M.m` ([`Arch::ptx_runs_on`]), its target is not already
//!    a CUBIN candidate (the same compile: the CUBIN is better), and the driver is
//!    new enough for the
//!    compiler that produced it: a driver for CUDA `X.Y` JITs PTX from NVRTC up to
//!    `X.Y` only (an older driver fails the load with
//!    `CUDA_ERROR_UNSUPPORTED_PTX_VERSION`). When the driver's version is not known
//!    (no GPU, an arch given by hand) the PTX is kept.
//!
//! Anything else is compiled for `G` ([`Selection::Compiled`]). No candidate is ever
//! a binary that cannot run on `G`.
//!
//! The kernels of a program can differ by arch (`#if __CUDA_ARCH__ >= 800` around
//! the bf16 ones): the best candidate need not have the kernel a caller wants.
//! [`KernelLibrary::get_kernel`](crate::KernelLibrary::get_kernel) goes down this
//! list to the first entry that holds it; shipping PTX for the newest target as well
//! as the lowest ([`ShipPlan::with_ptx_targets`](crate::ShipPlan::with_ptx_targets))
//! gives a GPU newer than every CUBIN the newest kernel set.

mod selection;

use super::{Arch, ArchSuffix, BuildRecord, NvrtcVersion};

pub use selection::Selection;

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

/// One shipped entry to look up: its target arch and what it would be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Candidate {
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
}

/// The CUDA version (`cuDriverGetVersion` form: 13000 for 13.0) a driver needs to JIT
/// PTX produced by NVRTC `compiler`.
pub fn driver_needed_for_ptx(compiler: &NvrtcVersion) -> i32 {
    let version = compiler.major.saturating_mul(1000) + compiler.minor.saturating_mul(10);
    i32::try_from(version).unwrap_or(i32::MAX)
}

/// `13000` as `13.0`.
pub(crate) fn cuda_version_text(version: i32) -> String {
    format!("{}.{}", version / 1000, (version % 1000) / 10)
}

/// The shipped entries to look up for `device`, best first (see the module
/// documentation). Needs no GPU: tests call it with any arch.
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
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
pub fn select(device: &Device, record: &BuildRecord) -> Candidates {
    let wanted = device.arch;
    let (major, minor) = (wanted.major(), wanted.minor());
    let mut list = Vec::new();
    if record.cubin_targets().contains(&wanted) {
        list.push(Candidate {
            target: wanted,
            selection: Selection::ExactCubin,
        });
    }
    let mut compatible: Vec<Arch> = record
        .cubin_targets()
        .iter()
        .copied()
        .filter(|t| *t != wanted && t.cubin_runs_on(major, minor))
        .collect();
    let specificity = |arch: &Arch| match arch.suffix() {
        ArchSuffix::Specific => 0,
        ArchSuffix::Family => 1,
        ArchSuffix::None => 2,
    };
    compatible.sort_by_key(|t| (std::cmp::Reverse(t.minor()), specificity(t)));
    list.extend(compatible.into_iter().map(|target| Candidate {
        target,
        selection: Selection::CompatibleCubin,
    }));
    let mut ptx_refused = None;
    if let Some(compiler) = record.nvrtc() {
        let needed = driver_needed_for_ptx(compiler);
        let runnable: Vec<Arch> = record
            .ptx_targets()
            .iter()
            .rev()
            .copied()
            .filter(|t| t.ptx_runs_on(major, minor) && !list.iter().any(|c| c.target == *t))
            .collect();
        for target in runnable {
            match device.driver {
                Some(driver) if driver < needed => {
                    ptx_refused.get_or_insert_with(|| {
                        format!(
                            "the shipped PTX ({target}) was produced by NVRTC {compiler}, and \
                             this driver (CUDA {}) cannot JIT it: it needs a driver for CUDA {} \
                             or newer",
                            cuda_version_text(driver),
                            cuda_version_text(needed),
                        )
                    });
                }
                _ => list.push(Candidate {
                    target,
                    selection: Selection::Ptx,
                }),
            }
        }
    }
    Candidates { list, ptx_refused }
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
        // A CUBIN needs no JIT: an old driver still gets it.
        let cubin = select(&Device::new(arch("sm_86")).with_driver(12080), &record);
        assert_eq!(cubin.list[0].selection, Selection::ExactCubin);
        assert_eq!(driver_needed_for_ptx(&"12.8.93".parse().unwrap()), 12080);
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
