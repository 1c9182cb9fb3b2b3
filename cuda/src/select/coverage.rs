//! Which drivers and GPUs a build's code reaches: [`select`] applied to every GPU
//! Kiln knows ([`KNOWN_GPUS`]) and every driver release from the build's oldest
//! ([`BuildRecord::oldest_driver`]) on ([`KNOWN_DRIVERS`], and each toolchain's own
//! release) that supports that GPU.
//!
//! A GPU no code reaches on any of those drivers is *not served*: the build chose
//! not to serve it ([`Coverage::unserved`]; a precompile block's summary line says
//! which). A GPU that some drivers in the range serve and others do not is a *gap*
//! ([`Coverage::gaps`]): a machine the build says it serves would get nothing,
//! typically PTX from a newer NVRTC than the oldest driver can JIT.
//! [`Coverage::check`] fails on gaps, saying what would close each.
//!
//! ```
//! use kiln_cuda::select::coverage::coverage;
//! use kiln_cuda::toolchain::BuildRecord;
//! // NVRTC 13.5 PTX, CUBINs for sm_80 and sm_86 only: an H100 (sm_90) gets the PTX,
//! // which a CUDA 13.0 driver (R580) cannot JIT.
//! let record: BuildRecord = "kiln-cuda-build/1 nvrtc=13.5.37 cubin=sm_80,sm_86 ptx=sm_80".parse()?;
//! let found = coverage(&record);
//! let h100 = found.gaps().into_iter().find(|g| g.gpu.to_string() == "sm_90").unwrap();
//! assert_eq!(h100.missing.first(), Some(&13000));
//! assert!(found.check().unwrap_err().contains("sm_90"));
//! # Ok::<(), kiln_cuda::Error>(())
//! ```

use std::fmt::Write as _;

use super::support::{cuda_version_text, driver_branch};
use super::{Candidate, Device, KNOWN_DRIVERS, KNOWN_GPUS, KnownGpu, Selection, list, select};
use crate::{Arch, BuildRecord};

/// One GPU's coverage: the first candidate at each driver in range that
/// supports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuCoverage {
    /// The GPU.
    pub gpu: KnownGpu,
    /// Each driver (CUDA version) from the build's oldest on that supports the
    /// GPU, and what [`select`] offers first there (`None`: nothing loads).
    pub drivers: Vec<(i32, Option<Candidate>)>,
}

impl GpuCoverage {
    /// Whether some driver in range gets code.
    pub fn served(&self) -> bool {
        self.drivers.iter().any(|(_, c)| c.is_some())
    }

    /// The drivers in range that get nothing (empty when the GPU is not served
    /// at all, or served everywhere).
    pub fn missing(&self) -> Vec<i32> {
        if !self.served() {
            return Vec::new();
        }
        self.drivers
            .iter()
            .filter(|(_, c)| c.is_none())
            .map(|(d, _)| *d)
            .collect()
    }
}

/// A GPU the build serves on some drivers in its range but not on others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gap {
    /// The GPU.
    pub gpu: Arch,
    /// The drivers (CUDA versions) in range, supporting it, that get nothing.
    pub missing: Vec<i32>,
    /// Why, and what would close the gap.
    pub why: String,
}

/// What a build's code reaches: see the [module documentation](self).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// The oldest driver the build serves.
    pub oldest_driver: i32,
    /// Every known GPU, oldest first.
    pub gpus: Vec<GpuCoverage>,
    record: BuildRecord,
}

/// The coverage of `record` (see the [module documentation](self)).
pub fn coverage(record: &BuildRecord) -> Coverage {
    let oldest = record.oldest_driver();
    let mut drivers: Vec<i32> = KNOWN_DRIVERS.to_vec();
    for toolchain in record.toolchains() {
        drivers.push(toolchain.ptx_driver());
        drivers.push(toolchain.cubin_driver());
    }
    drivers.push(oldest);
    drivers.retain(|d| *d >= oldest && *d != i32::MAX);
    drivers.sort_unstable();
    drivers.dedup();
    let gpus = KNOWN_GPUS
        .iter()
        .map(|gpu| GpuCoverage {
            gpu: *gpu,
            drivers: drivers
                .iter()
                .filter(|d| gpu.supported_by(**d))
                .map(|d| {
                    let device = Device::new(gpu.arch()).with_driver(*d);
                    (*d, select(&device, record).list.first().copied())
                })
                .collect(),
        })
        .collect();
    Coverage {
        oldest_driver: oldest,
        gpus,
        record: record.clone(),
    }
}

impl Coverage {
    /// The GPUs no code reaches on any driver in range.
    pub fn unserved(&self) -> Vec<Arch> {
        self.gpus
            .iter()
            .filter(|g| !g.drivers.is_empty() && !g.served())
            .map(|g| g.gpu.arch())
            .collect()
    }

    /// The GPUs served on some drivers in range but not on others, each with why
    /// and what would close it.
    pub fn gaps(&self) -> Vec<Gap> {
        self.gpus
            .iter()
            .filter_map(|g| {
                let missing = g.missing();
                let first = *missing.first()?;
                Some(Gap {
                    gpu: g.gpu.arch(),
                    why: self.why(g.gpu.arch(), first),
                    missing,
                })
            })
            .collect()
    }

    /// Why `gpu` gets nothing on a driver for CUDA `driver`, and what would close it.
    fn why(&self, gpu: Arch, driver: i32) -> String {
        let device = Device::new(gpu).with_driver(driver);
        let found = select(&device, &self.record);
        let reasons: Vec<String> = [found.cubin_refused, found.ptx_refused]
            .into_iter()
            .flatten()
            .collect();
        let reason = if reasons.is_empty() {
            "nothing shipped runs on it".to_owned()
        } else {
            reasons.join("; ")
        };
        format!(
            "{reason}. To serve it from CUDA {} on, ship a CUBIN for {gpu} (or a compatible \
             arch) from a toolchain whose CUBINs that driver loads (NVRTC {}.x), or its PTX \
             from an NVRTC no newer than {}; or state a newer oldest driver \
             (ShipPlan::with_oldest_driver)",
            cuda_version_text(driver),
            driver / 1000,
            cuda_version_text(driver),
        )
    }

    /// `Ok` when every GPU the build serves is served on every driver in range;
    /// otherwise the gaps, one per line, each with what would close it.
    ///
    /// # Errors
    /// The text of the gaps.
    pub fn check(&self) -> Result<(), String> {
        let gaps = self.gaps();
        if gaps.is_empty() {
            return Ok(());
        }
        let mut text = format!(
            "the build states it serves drivers from CUDA {}{}, but on some of them GPUs it \
             serves get no code:",
            cuda_version_text(self.oldest_driver),
            branch(self.oldest_driver),
        );
        for gap in gaps {
            let drivers: Vec<String> = gap.missing.iter().map(|d| cuda_version_text(*d)).collect();
            let _ = write!(
                text,
                "\n  {} on drivers for CUDA {}: {}",
                gap.gpu,
                drivers.join(", "),
                gap.why
            );
        }
        Err(text)
    }

    /// One line for people: the drivers served, the GPUs not served.
    pub fn summary(&self) -> String {
        let mut line = if self.oldest_driver == i32::MAX {
            "serves no driver".to_owned()
        } else {
            format!(
                "serves drivers from CUDA {}{}",
                cuda_version_text(self.oldest_driver),
                branch(self.oldest_driver)
            )
        };
        let unserved = self.unserved();
        if !unserved.is_empty() {
            let _ = write!(line, "; no code for {}", generations(&unserved));
        }
        line
    }

    /// A Markdown table: per GPU, what each driver family gets (`CUBIN 13.0` from
    /// NVRTC 13.0, `PTX 12.9`, `none`, or `-` where no such driver supports the
    /// GPU), and a row for a GPU newer than every shipped CUBIN.
    pub fn table(&self) -> String {
        const COLUMNS: [(i32, &str); 5] = [
            (12000, "12.0–12.7 (R525–R560)"),
            (12080, "12.8 (R570)"),
            (12090, "12.9 (R575)"),
            (13000, "13.0 (R580)"),
            (13010, "13.1+ (R590+)"),
        ];
        let mut text = String::from("| GPU |");
        for (_, name) in COLUMNS {
            let _ = write!(text, " {name} |");
        }
        text.push_str("\n|---|");
        text.push_str(&"---|".repeat(COLUMNS.len()));
        let cell = |arch: Arch, supported: bool, driver: i32| -> String {
            if driver < self.oldest_driver {
                return "not served".to_owned();
            }
            if !supported {
                return "-".to_owned();
            }
            let device = Device::new(arch).with_driver(driver);
            match select(&device, &self.record).list.first() {
                None => "none".to_owned(),
                Some(candidate) => self.describe(candidate),
            }
        };
        for gpu in KNOWN_GPUS {
            let _ = write!(text, "\n| {} {} |", gpu.arch(), gpu.generation);
            for (driver, _) in COLUMNS {
                let _ = write!(
                    text,
                    " {} |",
                    cell(gpu.arch(), gpu.supported_by(driver), driver)
                );
            }
        }
        let newer = Arch::known(99, 0);
        text.push_str("\n| a newer GPU |");
        for (driver, _) in COLUMNS {
            let _ = write!(text, " {} |", cell(newer, driver >= 13010, driver));
        }
        text
    }

    /// `CUBIN 13.0` or `PTX 12.9`: the kind and the toolchain's release.
    fn describe(&self, candidate: &Candidate) -> String {
        let kind = match candidate.selection {
            Selection::Ptx => "PTX",
            _ => "CUBIN",
        };
        let release = self
            .record
            .toolchains()
            .get(candidate.toolchain)
            .map(|t| format!("{}.{}", t.nvrtc().major, t.nvrtc().minor))
            .unwrap_or_default();
        format!("{kind} {release}")
    }
}

/// ` (R580)`, or nothing for an unknown release.
fn branch(version: i32) -> String {
    driver_branch(version)
        .map(|b| format!(" ({b}{})", if b == "R525" { "+" } else { "" }))
        .unwrap_or_default()
}

/// Archs for people: a whole major as `sm_5x` when every known GPU of it is
/// listed, else each arch.
pub fn generations(archs: &[Arch]) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut majors: Vec<u32> = archs.iter().map(Arch::major).collect();
    majors.dedup();
    for major in majors {
        let known: Vec<Arch> = KNOWN_GPUS
            .iter()
            .filter(|g| g.major == major)
            .map(KnownGpu::arch)
            .collect();
        let listed: Vec<Arch> = archs
            .iter()
            .copied()
            .filter(|a| a.major() == major)
            .collect();
        if known.len() > 1 && known.iter().all(|k| listed.contains(k)) {
            parts.push(format!("sm_{major}x"));
        } else {
            parts.push(list(&listed));
        }
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(text: &str) -> BuildRecord {
        text.parse().unwrap()
    }

    #[test]
    fn a_cuda_13_build_leaves_maxwell_to_volta_unserved_and_has_no_gap() {
        let found = coverage(&record(
            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75",
        ));
        assert_eq!(found.oldest_driver, 13000);
        assert_eq!(generations(&found.unserved()), "sm_5x, sm_6x, sm_70, sm_72");
        assert!(found.check().is_ok(), "{:?}", found.check());
        assert!(
            found
                .summary()
                .starts_with("serves drivers from CUDA 13.0 (R580)")
        );
    }

    #[test]
    fn two_toolchains_serve_every_known_gpu_on_every_driver_from_r525() {
        let found = coverage(&record(
            "kiln-cuda-build/2 nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75 \
             nvrtc=12.9.86 cubin=sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_50",
        ));
        assert_eq!(found.oldest_driver, 12000);
        assert_eq!(found.unserved(), Vec::<Arch>::new());
        assert!(found.check().is_ok(), "{:?}", found.check());
        let table = found.table();
        assert!(table.contains("| sm_70 Volta | CUBIN 12.9 |"), "{table}");
        assert!(
            table.contains(
                "| sm_90 Hopper | CUBIN 12.9 | CUBIN 12.9 | CUBIN 12.9 | CUBIN 13.0 | CUBIN 13.0 |"
            ),
            "{table}"
        );
        assert!(
            table.contains("| sm_110 Blackwell (Thor) | - | - | - | PTX 13.0 | PTX 13.0 |"),
            "{table}"
        );
    }

    #[test]
    fn ptx_newer_than_the_oldest_driver_is_a_gap_that_says_how_to_close_it() {
        let found = coverage(&record(
            "kiln-cuda-build/1 nvrtc=13.5.37 cubin=sm_75,sm_90 ptx=sm_75",
        ));
        let gaps = found.gaps();
        // Thor, Blackwell and sm_80/86/88/89 (no CUBIN: the PTX) on 13.0 to 13.4.
        let h100 = gaps.iter().find(|g| g.gpu.to_string() == "sm_90");
        assert!(h100.is_none(), "its CUBIN loads on every 13.x driver");
        let a100 = gaps.iter().find(|g| g.gpu.to_string() == "sm_80").unwrap();
        assert_eq!(a100.missing, [13000, 13010, 13020, 13030, 13040]);
        assert!(a100.why.contains("NVRTC 13.5.37"), "{}", a100.why);
        assert!(
            a100.why.contains("ShipPlan::with_oldest_driver"),
            "{}",
            a100.why
        );
        let error = found.check().unwrap_err();
        assert!(error.contains("from CUDA 13.0 (R580)"), "{error}");
        // Stating 13.5 as the oldest driver closes every gap.
        let stated = coverage(&record(
            "kiln-cuda-build/2 driver=13.5 nvrtc=13.5.37 cubin=sm_75,sm_90 ptx=sm_75",
        ));
        assert!(stated.check().is_ok());
    }
}
