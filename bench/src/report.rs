//! Medians, ratios and the machine: the table on stdout and the JSON file.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::child::Measurement;
use crate::error::BenchError;
use crate::gpu::GpuSummary;
use crate::mode::Mode;
use crate::scaling::{Format, RssMeasurement, ScaleMeasurement};

/// The targets the issue sets.
pub const TARGET_VS_COLD: f64 = 1000.0;
/// Per hit against the directory cache.
pub const TARGET_HIT_VS_DIR: f64 = 50.0;
/// Resident growth after touching 1% of the image, as a fraction of its size.
pub const TARGET_RSS_GROWTH: f64 = 0.05;

/// The median of `values` (the mean of the middle two for an even count);
/// `None` when empty.
pub fn median(values: &[u64]) -> Option<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    let n = sorted.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(sorted[n / 2] as f64),
        _ => Some((sorted[n / 2 - 1] as f64 + sorted[n / 2] as f64) / 2.0),
    }
}

/// One mode's medians over its runs, and its ratios.
#[derive(Clone, Debug, Serialize)]
pub struct ModeSummary {
    /// The mode.
    pub mode: Mode,
    /// What it is.
    pub description: &'static str,
    /// Fresh processes measured.
    pub runs: usize,
    /// Kernels in hand per run.
    pub kernels: usize,
    /// Artifact bytes in hand per run.
    pub bytes: u64,
    /// Median time from `main` to all kernels in hand, ms.
    pub total_ms: f64,
    /// Median init phase, ms.
    pub init_ms: f64,
    /// Median setup phase (owners and keys), ms.
    pub setup_ms: f64,
    /// Of the setup: median `Compiler::new()` (NVRTC's exact version), ms.
    pub nvrtc_ms: f64,
    /// Of the setup: median CCCL header fingerprint, ms.
    pub headers_ms: f64,
    /// Of the setup: median of the rest (deriving the owners and keys), ms.
    pub keys_ms: f64,
    /// Median lookup phase (all kernels), ms.
    pub lookup_ms: f64,
    /// Median lookup phase per kernel (first hit in a fresh process), µs.
    pub per_hit_us: f64,
    /// Median second lookup per kernel (steady state), µs.
    pub repeat_hit_us: f64,
    /// Cold's total over this total.
    pub vs_cold: Option<f64>,
    /// Cold's init + lookups over this mode's init + lookups: the ratio
    /// without the setup (owners and keys) that every mode pays the same.
    pub vs_cold_without_setup: Option<f64>,
    /// The directory cache's total over this total.
    pub vs_dir_cache: Option<f64>,
    /// The directory cache's per-hit time over this one (first hits).
    pub hit_vs_dir_cache: Option<f64>,
    /// The directory cache's repeat-hit time over this one.
    pub repeat_vs_dir_cache: Option<f64>,
}

/// Summarizes the measurements of each mode, in `Mode::ALL` order.
pub fn summarize(measurements: &[Measurement]) -> Vec<ModeSummary> {
    let ms = |ns: f64| ns / 1e6;
    let mut summaries: Vec<ModeSummary> = Mode::ALL
        .iter()
        .filter_map(|&mode| {
            let runs: Vec<&Measurement> = measurements.iter().filter(|m| m.mode == mode).collect();
            let first = runs.first()?;
            let med = |field: fn(&Measurement) -> u64| {
                median(&runs.iter().map(|m| field(m)).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            let lookup = med(|m| m.lookup_ns);
            Some(ModeSummary {
                mode,
                description: mode.describe(),
                runs: runs.len(),
                kernels: first.kernels,
                bytes: first.bytes,
                total_ms: ms(med(|m| m.total_ns)),
                init_ms: ms(med(|m| m.init_ns)),
                setup_ms: ms(med(|m| m.setup_ns)),
                nvrtc_ms: ms(med(|m| m.nvrtc_ns)),
                headers_ms: ms(med(|m| m.headers_ns)),
                keys_ms: ms(med(|m| {
                    m.setup_ns
                        .saturating_sub(m.nvrtc_ns)
                        .saturating_sub(m.headers_ns)
                })),
                lookup_ms: ms(lookup),
                per_hit_us: lookup / 1e3 / first.kernels.max(1) as f64,
                repeat_hit_us: med(|m| m.repeat_ns) / 1e3 / first.kernels.max(1) as f64,
                vs_cold: None,
                vs_cold_without_setup: None,
                vs_dir_cache: None,
                hit_vs_dir_cache: None,
                repeat_vs_dir_cache: None,
            })
        })
        .collect();
    let find = |summaries: &[ModeSummary], mode| {
        summaries
            .iter()
            .find(|s| s.mode == mode)
            .map(|s| (s.total_ms, s.per_hit_us, s.repeat_hit_us))
    };
    let cold_work = summaries
        .iter()
        .find(|s| s.mode == Mode::Cold)
        .map(|s| s.init_ms + s.lookup_ms);
    let cold = find(&summaries, Mode::Cold);
    let dir = find(&summaries, Mode::DirCache);
    for summary in &mut summaries {
        summary.vs_cold = cold.map(|(total, _, _)| total / summary.total_ms);
        summary.vs_cold_without_setup =
            cold_work.map(|work| work / (summary.init_ms + summary.lookup_ms));
        summary.vs_dir_cache = dir.map(|(total, _, _)| total / summary.total_ms);
        summary.hit_vs_dir_cache = dir.map(|(_, hit, _)| hit / summary.per_hit_us);
        summary.repeat_vs_dir_cache = dir.map(|(_, _, repeat)| repeat / summary.repeat_hit_us);
    }
    summaries
}

/// Init + first lookup at one image size, medians.
#[derive(Clone, Debug, Serialize)]
pub struct ScaleSummary {
    /// The container.
    pub format: Format,
    /// Entries in the image.
    pub entries: usize,
    /// Fresh processes measured.
    pub runs: usize,
    /// Median init, ms.
    pub init_ms: f64,
    /// Median first lookup, µs.
    pub first_lookup_us: f64,
    /// Median init + first lookup, ms.
    pub total_ms: f64,
}

/// Summarizes the scaling measurements per (format, entries).
pub fn summarize_scale(measurements: &[ScaleMeasurement]) -> Vec<ScaleSummary> {
    let mut keys: Vec<(Format, usize)> =
        measurements.iter().map(|m| (m.format, m.entries)).collect();
    keys.sort_by_key(|&(format, entries)| (format.name(), entries));
    keys.dedup();
    keys.into_iter()
        .map(|(format, entries)| {
            let runs: Vec<&ScaleMeasurement> = measurements
                .iter()
                .filter(|m| m.format == format && m.entries == entries)
                .collect();
            let med = |field: fn(&ScaleMeasurement) -> u64| {
                median(&runs.iter().map(|m| field(m)).collect::<Vec<_>>()).unwrap_or(0.0)
            };
            ScaleSummary {
                format,
                entries,
                runs: runs.len(),
                init_ms: med(|m| m.init_ns) / 1e6,
                first_lookup_us: med(|m| m.first_lookup_ns) / 1e3,
                total_ms: med(|m| m.init_ns + m.first_lookup_ns) / 1e6,
            }
        })
        .collect()
}

/// The machine the bench ran on.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    /// Online CPUs.
    pub nproc: usize,
    /// The CPU model from `/proc/cpuinfo`.
    pub cpu: String,
    /// The GPU used, or "no GPU".
    pub gpu: String,
}

impl Machine {
    /// This machine (`gpu` as found by the GPU mode, if it ran).
    pub fn detect(gpu: Option<String>) -> Machine {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find(|line| line.starts_with("model name"))
                    .and_then(|line| line.split_once(':'))
                    .map(|(_, model)| model.trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".to_owned());
        Machine {
            nproc: std::thread::available_parallelism().map_or(1, |n| n.get()),
            cpu,
            gpu: gpu.unwrap_or_else(|| "no GPU".to_owned()),
        }
    }
}

/// A target and what was measured against it.
#[derive(Clone, Debug, Serialize)]
pub struct TargetCheck {
    /// What is compared.
    pub what: String,
    /// The target.
    pub target: f64,
    /// The measured value (None when a mode it needs did not run).
    pub measured: Option<f64>,
    /// Whether the measured value meets the target.
    pub met: Option<bool>,
}

/// Everything one bench run found.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The command line that produced it.
    pub command: String,
    /// The kernel set.
    pub workload: &'static str,
    /// The machine.
    pub machine: Machine,
    /// Per mode.
    pub modes: Vec<ModeSummary>,
    /// Init + first lookup as the image grows.
    pub scaling: Vec<ScaleSummary>,
    /// Resident memory (the median run by growth, per format).
    pub rss: Vec<RssMeasurement>,
    /// GPU time to first launch, when run with `--gpu`.
    pub gpu: Option<GpuSummary>,
    /// The targets, checked.
    pub targets: Vec<TargetCheck>,
    /// Every child's measurement, in the order they ran.
    pub runs: Vec<Measurement>,
}

impl Report {
    /// Checks the targets against the summaries.
    pub fn check_targets(modes: &[ModeSummary], rss: &[RssMeasurement]) -> Vec<TargetCheck> {
        let get = |mode| modes.iter().find(|s| s.mode == mode);
        let check = |what: String, target: f64, measured: Option<f64>, higher_is_better: bool| {
            TargetCheck {
                what,
                target,
                measured,
                met: measured.map(|m| {
                    if higher_is_better {
                        m >= target
                    } else {
                        m <= target
                    }
                }),
            }
        };
        let mut checks = Vec::new();
        for mode in [Mode::KilnEmbedded, Mode::KilnFile] {
            checks.push(check(
                format!("{}: time to all kernels in hand, cold / warm", mode.name()),
                TARGET_VS_COLD,
                get(mode).and_then(|s| s.vs_cold),
                true,
            ));
            checks.push(check(
                format!(
                    "{}: the same without the setup every mode pays (init + lookups only)",
                    mode.name()
                ),
                TARGET_VS_COLD,
                get(mode).and_then(|s| s.vs_cold_without_setup),
                true,
            ));
            checks.push(check(
                format!(
                    "{}: first hit in a fresh process, dir-cache / kiln",
                    mode.name()
                ),
                TARGET_HIT_VS_DIR,
                get(mode).and_then(|s| s.hit_vs_dir_cache),
                true,
            ));
            checks.push(check(
                format!("{}: repeat hit, dir-cache / kiln", mode.name()),
                TARGET_HIT_VS_DIR,
                get(mode).and_then(|s| s.repeat_vs_dir_cache),
                true,
            ));
        }
        for kiln in rss.iter().filter(|r| r.format == Format::Kiln) {
            checks.push(check(
                format!(
                    "kiln-file, page cache {}: VmRSS growth after touching 1%, fraction of image",
                    kiln.page_cache.name()
                ),
                TARGET_RSS_GROWTH,
                Some(kiln.growth_fraction()),
                false,
            ));
        }
        checks
    }

    /// Writes the report as pretty JSON.
    pub fn write_json(&self, path: &Path) -> Result<(), BenchError> {
        let json = serde_json::to_string_pretty(self).map_err(|err| BenchError::Encode {
            what: "the JSON report",
            reason: err.to_string(),
        })?;
        std::fs::write(path, json + "\n").map_err(BenchError::io(path))
    }

    /// The tables, as printed on stdout and pasted into BENCHMARKS.md
    /// (Markdown).
    pub fn tables(&self) -> String {
        let mut out = String::new();
        let ratio = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.1}×"));
        let _ = writeln!(
            out,
            "Time to first kernel: {} kernel set, {} kernels, median of fresh processes\n",
            self.workload,
            self.modes.first().map_or(0, |s| s.kernels)
        );
        let _ = writeln!(
            out,
            "| mode | runs | total ms | init ms | setup ms | lookups ms | first hit µs | repeat hit µs | vs cold | vs cold, setup excluded | vs dir-cache | first hit vs dir-cache | repeat hit vs dir-cache |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
        for s in &self.modes {
            let _ = writeln!(
                out,
                "| {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.3} | {} | {} | {} | {} | {} |",
                s.mode.name(),
                s.runs,
                s.total_ms,
                s.init_ms,
                s.setup_ms,
                s.lookup_ms,
                s.per_hit_us,
                s.repeat_hit_us,
                ratio(s.vs_cold),
                ratio(s.vs_cold_without_setup),
                ratio(s.vs_dir_cache),
                ratio(s.hit_vs_dir_cache),
                ratio(s.repeat_vs_dir_cache),
            );
        }
        if let Some(s) = self.modes.iter().find(|s| s.mode.is_warm()) {
            let _ = writeln!(
                out,
                "\nsetup (same code in every mode), {}: Compiler::new (NVRTC version) {:.3} ms, CCCL fingerprint {:.3} ms, keys {:.3} ms",
                s.mode.name(),
                s.nvrtc_ms,
                s.headers_ms,
                s.keys_ms
            );
        }
        if !self.scaling.is_empty() {
            let _ = writeln!(
                out,
                "\nInit + first lookup as the image grows ({} B payloads)\n",
                crate::scaling::SCALE_PAYLOAD
            );
            let _ = writeln!(
                out,
                "| format | entries | runs | init ms | first lookup µs | total ms |"
            );
            let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|");
            for s in &self.scaling {
                let _ = writeln!(
                    out,
                    "| {} | {} | {} | {:.3} | {:.1} | {:.3} |",
                    s.format.name(),
                    s.entries,
                    s.runs,
                    s.init_ms,
                    s.first_lookup_us,
                    s.total_ms
                );
            }
        }
        if !self.rss.is_empty() {
            let _ = writeln!(
                out,
                "\nResident memory (VmRSS) around init and touching 1% of the entries\n"
            );
            let _ = writeln!(
                out,
                "| format | page cache | image MiB | entries | touched | before KiB | after init KiB | after touch KiB | growth / image | image pages resident KiB |"
            );
            let _ = writeln!(out, "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|");
            for r in &self.rss {
                let _ = writeln!(
                    out,
                    "| {} | {} | {:.0} | {} | {} | {} | {} | {} | {:.2}% | {} |",
                    r.format.name(),
                    r.page_cache.name(),
                    r.image_bytes as f64 / (1024.0 * 1024.0),
                    r.entries,
                    r.touched,
                    r.start_kib,
                    r.init_kib,
                    r.touched_kib,
                    r.growth_fraction() * 100.0,
                    r.mapped_kib
                );
            }
        }
        if let Some(gpu) = &self.gpu {
            let _ = writeln!(out, "\n{}", gpu.table());
        }
        let _ = writeln!(out, "\nTargets\n");
        for t in &self.targets {
            let verdict = match t.met {
                Some(true) => "met",
                Some(false) => "NOT met",
                None => "not measured",
            };
            let measured = t.measured.map_or("-".to_owned(), |m| format!("{m:.3}"));
            let _ = writeln!(
                out,
                "- {}: target {}, measured {measured}: {verdict}",
                t.what, t.target
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[5, 1, 3]), Some(3.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        assert_eq!(median(&[]), None);
    }

    fn run(mode: Mode, total_ns: u64, lookup_ns: u64) -> Measurement {
        let repeat_ns = lookup_ns / 10;
        Measurement {
            mode,
            kernels: 10,
            compiles: 0,
            bytes: 100,
            init_ns: 0,
            setup_ns: 0,
            nvrtc_ns: 0,
            headers_ns: 0,
            lookup_ns,
            total_ns,
            repeat_ns,
        }
    }

    #[test]
    fn ratios_are_against_cold_and_the_directory_cache() {
        let summaries = summarize(&[
            run(Mode::Cold, 1_000_000, 900_000),
            run(Mode::Cold, 3_000_000, 900_000),
            run(Mode::DirCache, 200_000, 100_000),
            run(Mode::KilnFile, 20_000, 1_000),
        ]);
        let modes: Vec<Mode> = summaries.iter().map(|s| s.mode).collect();
        assert_eq!(modes, [Mode::Cold, Mode::KilnFile, Mode::DirCache]);
        let kiln = &summaries[1];
        assert_eq!(kiln.vs_cold, Some(100.0)); // median cold 2 ms / 20 µs
        let without_setup = kiln.vs_cold_without_setup.unwrap(); // 0.9 ms / 1 µs
        assert!((without_setup - 900.0).abs() < 1e-6, "{without_setup}");
        assert_eq!(kiln.vs_dir_cache, Some(10.0));
        assert_eq!(kiln.hit_vs_dir_cache, Some(100.0));
        assert_eq!(kiln.per_hit_us, 0.1);
        assert_eq!(kiln.repeat_hit_us, 0.01);
        assert_eq!(kiln.repeat_vs_dir_cache, Some(100.0));
    }
}
