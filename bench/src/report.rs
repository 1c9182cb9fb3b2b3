//! Medians, ratios and the machine: the table on stdout and the JSON file.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::child::Measurement;
use crate::error::BenchError;
use crate::gpu::GpuSummary;
use crate::mode::{Env, Mode};
use crate::scaling::{Format, RssMeasurement, ScaleMeasurement};

/// Time to all kernels in hand with the embedded image, ms (at most).
pub const TARGET_EMBEDDED_MS: f64 = 0.3;
/// Cold NVRTC's time over the embedded image's (at least).
pub const TARGET_EMBEDDED_VS_COLD: f64 = 30_000.0;
/// Time to all kernels in hand from an image file or the disk tier, ms (at most).
pub const TARGET_FILE_MS: f64 = 1.0;
/// A repeated `KernelLibrary::get`, spec to artifact in hand, µs (at most).
pub const TARGET_LIBRARY_CALL_US: f64 = 0.2;
/// Earlier target: cold over warm, time to all kernels in hand (at least).
pub const TARGET_VS_COLD: f64 = 1000.0;
/// Earlier target: per hit against the directory cache (at least).
pub const TARGET_HIT_VS_DIR: f64 = 50.0;
/// Resident growth after touching 1% of the image, as a fraction of its size (at most).
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
    /// Whether its children ran in a stripped (production) environment.
    pub stripped: bool,
    /// Fresh processes measured.
    pub runs: usize,
    /// Kernels in hand per run.
    pub kernels: usize,
    /// Artifact bytes in hand per run.
    pub bytes: u64,
    /// Median time from `main` to all kernels in hand, ms.
    pub total_ms: f64,
    /// Median time from `main` to the measurement (the bench's argument
    /// parsing, part of the total), ms.
    pub args_ms: f64,
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
    /// Median first `KernelLibrary::get` per kernel, after the lookups, µs
    /// (the real set in a Kiln cache only).
    pub library_first_us: Option<f64>,
    /// Median repeated `KernelLibrary::get` per call, spec to artifact in
    /// hand, µs (the real set in a Kiln cache only).
    pub library_call_us: Option<f64>,
    /// Runs whose process had NVRTC mapped at the end.
    pub nvrtc_loaded_runs: usize,
    /// Where the first run could have found NVRTC in its environment (warm
    /// Kiln modes; `None`: nothing found, or not searched).
    pub nvrtc_found: Option<String>,
    /// The variables the first run's environment held (stripped modes only).
    pub env_names: Option<Vec<String>>,
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
            let per_kernel = |field: fn(&Measurement) -> Option<u64>| {
                let values: Vec<u64> = runs.iter().filter_map(|m| field(m)).collect();
                median(&values).map(|ns| ns / 1e3 / first.kernels.max(1) as f64)
            };
            Some(ModeSummary {
                mode,
                description: mode.describe(),
                stripped: mode.env() == Env::Stripped,
                runs: runs.len(),
                kernels: first.kernels,
                bytes: first.bytes,
                total_ms: ms(med(|m| m.total_ns)),
                args_ms: ms(med(|m| m.args_ns)),
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
                library_first_us: per_kernel(|m| m.library_first_ns),
                library_call_us: per_kernel(|m| m.library_repeat_ns),
                nvrtc_loaded_runs: runs.iter().filter(|m| m.nvrtc_loaded).count(),
                nvrtc_found: first.nvrtc_found.clone(),
                env_names: first.env_names.clone(),
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
    /// The kernel release (`/proc/sys/kernel/osrelease`).
    pub kernel: String,
    /// The 1-minute load average, sampled during the time-to-first-kernel runs.
    pub load_average: LoadAverage,
}

/// The 1-minute load average (`/proc/loadavg`), sampled during a run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct LoadAverage {
    /// Every sample, in order.
    pub samples: Vec<f64>,
    /// The lowest sample.
    pub min: Option<f64>,
    /// The median sample.
    pub median: Option<f64>,
    /// The highest sample.
    pub max: Option<f64>,
}

impl LoadAverage {
    /// Adds a sample of the 1-minute load average (none where `/proc/loadavg`
    /// does not read).
    pub fn sample(&mut self) {
        let one_minute = std::fs::read_to_string("/proc/loadavg")
            .ok()
            .and_then(|text| text.split_whitespace().next()?.parse::<f64>().ok());
        let Some(value) = one_minute else {
            return;
        };
        self.samples.push(value);
        let mut sorted = self.samples.clone();
        sorted.sort_by(f64::total_cmp);
        self.min = sorted.first().copied();
        self.max = sorted.last().copied();
        self.median = sorted.get(sorted.len() / 2).copied();
    }

    /// `median 3.2 (2.1–4.5, 12 samples)`, or `not sampled`.
    pub fn describe(&self) -> String {
        match (self.min, self.median, self.max) {
            (Some(min), Some(median), Some(max)) => format!(
                "load average (1 min) median {median:.2}, {min:.2}–{max:.2} over {} samples",
                self.samples.len()
            ),
            _ => "load average not sampled".to_owned(),
        }
    }
}

impl Machine {
    /// This machine (`gpu` as found by the GPU mode, if it ran), with the
    /// load average sampled during the run.
    pub fn detect(gpu: Option<String>, load_average: LoadAverage) -> Machine {
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
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .map_or_else(|_| "unknown".to_owned(), |r| r.trim().to_owned()),
            load_average,
        }
    }
}

/// A target and what was measured against it.
#[derive(Clone, Debug, Serialize)]
pub struct TargetCheck {
    /// What is compared.
    pub what: String,
    /// `≤` or `≥`.
    pub rule: &'static str,
    /// The target.
    pub target: f64,
    /// The unit of the target and the measured value (`ms`, `µs`, `×`...).
    pub unit: &'static str,
    /// The measured value (None when a mode it needs did not run).
    pub measured: Option<f64>,
    /// Whether the measured value meets the target.
    pub met: Option<bool>,
}

impl TargetCheck {
    fn at_most(what: String, target: f64, unit: &'static str, measured: Option<f64>) -> Self {
        TargetCheck {
            what,
            rule: "≤",
            target,
            unit,
            measured,
            met: measured.map(|m| m <= target),
        }
    }

    fn at_least(what: String, target: f64, unit: &'static str, measured: Option<f64>) -> Self {
        TargetCheck {
            what,
            rule: "≥",
            target,
            unit,
            measured,
            met: measured.map(|m| m >= target),
        }
    }
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
    /// Checks the targets against the summaries: the deployment targets
    /// (time to all kernels in hand, the repeated library call), in the
    /// developer's and the stripped environment, then the earlier ones.
    pub fn check_targets(modes: &[ModeSummary], rss: &[RssMeasurement]) -> Vec<TargetCheck> {
        let get = |mode| modes.iter().find(|s| s.mode == mode);
        let mut checks = Vec::new();
        for mode in [Mode::KilnEmbedded, Mode::KilnEmbeddedStripped] {
            checks.push(TargetCheck::at_most(
                format!("{}: main → all kernels in hand", mode.name()),
                TARGET_EMBEDDED_MS,
                " ms",
                get(mode).map(|s| s.total_ms),
            ));
            checks.push(TargetCheck::at_least(
                format!(
                    "{}: cold NVRTC / this, main → all kernels in hand",
                    mode.name()
                ),
                TARGET_EMBEDDED_VS_COLD,
                "×",
                get(mode).and_then(|s| s.vs_cold),
            ));
        }
        for mode in [
            Mode::KilnFile,
            Mode::KilnDisk,
            Mode::KilnFileStripped,
            Mode::KilnDiskStripped,
        ] {
            checks.push(TargetCheck::at_most(
                format!("{}: main → all kernels in hand", mode.name()),
                TARGET_FILE_MS,
                " ms",
                get(mode).map(|s| s.total_ms),
            ));
        }
        for s in modes.iter().filter(|s| s.library_call_us.is_some()) {
            checks.push(TargetCheck::at_most(
                format!(
                    "{}: repeated KernelLibrary::get, spec → artifact in hand",
                    s.mode.name()
                ),
                TARGET_LIBRARY_CALL_US,
                " µs",
                s.library_call_us,
            ));
        }
        for mode in [Mode::KilnEmbedded, Mode::KilnFile] {
            checks.push(TargetCheck::at_least(
                format!(
                    "{} (earlier target): cold / this, main → all kernels in hand",
                    mode.name()
                ),
                TARGET_VS_COLD,
                "×",
                get(mode).and_then(|s| s.vs_cold),
            ));
            checks.push(TargetCheck::at_least(
                format!(
                    "{} (earlier target): first hit in a fresh process, dir-cache / this",
                    mode.name()
                ),
                TARGET_HIT_VS_DIR,
                "×",
                get(mode).and_then(|s| s.hit_vs_dir_cache),
            ));
            checks.push(TargetCheck::at_least(
                format!(
                    "{} (earlier target): repeat hit, dir-cache / this",
                    mode.name()
                ),
                TARGET_HIT_VS_DIR,
                "×",
                get(mode).and_then(|s| s.repeat_vs_dir_cache),
            ));
        }
        for kiln in rss.iter().filter(|r| r.format == Format::Kiln) {
            checks.push(TargetCheck::at_most(
                format!(
                    "kiln-file, page cache {}: VmRSS growth after touching 1%, fraction of the image",
                    kiln.page_cache.name()
                ),
                TARGET_RSS_GROWTH,
                "",
                Some(kiln.growth_fraction()),
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
        let opt =
            |v: Option<f64>, digits: usize| v.map_or("-".to_owned(), |v| format!("{v:.digits$}"));
        let _ = writeln!(
            out,
            "| mode | env | runs | total ms | args ms | init ms | setup ms | lookups ms | first hit µs | repeat hit µs | library first call µs | library repeated call µs | NVRTC loaded | NVRTC reachable |"
        );
        let _ = writeln!(
            out,
            "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"
        );
        for s in &self.modes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {:.3} | {:.3} | {:.3} | {:.3} | {:.3} | {:.2} | {:.3} | {} | {} | {} | {} |",
                s.mode.name(),
                if s.stripped { "stripped" } else { "developer" },
                s.runs,
                s.total_ms,
                s.args_ms,
                s.init_ms,
                s.setup_ms,
                s.lookup_ms,
                s.per_hit_us,
                s.repeat_hit_us,
                opt(s.library_first_us, 2),
                opt(s.library_call_us, 3),
                match s.nvrtc_loaded_runs {
                    0 => "no".to_owned(),
                    n if n == s.runs => "yes".to_owned(),
                    n => format!("{n} of {} runs", s.runs),
                },
                match (&s.nvrtc_found, s.mode.is_warm() && s.mode.is_kiln()) {
                    (Some(_), true) => "yes",
                    (None, true) => "no",
                    (_, false) => "-",
                },
            );
        }
        let _ = writeln!(
            out,
            "\n| mode | vs cold | vs cold, setup excluded | vs dir-cache | first hit vs dir-cache | repeat hit vs dir-cache |"
        );
        let _ = writeln!(out, "|---|--:|--:|--:|--:|--:|");
        for s in &self.modes {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                s.mode.name(),
                ratio(s.vs_cold),
                ratio(s.vs_cold_without_setup),
                ratio(s.vs_dir_cache),
                ratio(s.hit_vs_dir_cache),
                ratio(s.repeat_vs_dir_cache),
            );
        }
        let found: Vec<String> = self
            .modes
            .iter()
            .filter_map(|s| Some(format!("{}: {}", s.mode.name(), s.nvrtc_found.as_ref()?)))
            .collect();
        if !found.is_empty() {
            let _ = writeln!(
                out,
                "\nNVRTC reachable (not loaded) from: {}",
                found.join("; ")
            );
        }
        if let Some(s) = self.modes.iter().find(|s| s.mode.is_warm()) {
            let _ = writeln!(
                out,
                "\nsetup (same code in every mode), {}: NVRTC release (from the build record for the real set) {:.3} ms, CCCL digest {:.3} ms, owners and keys {:.3} ms",
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
            let unit = t.unit;
            let measured = t
                .measured
                .map_or("-".to_owned(), |m| format!("{}{unit}", significant(m)));
            let _ = writeln!(
                out,
                "- {}: target {} {}{unit}, measured {measured}: {verdict}",
                t.what,
                t.rule,
                significant(t.target)
            );
        }
        out
    }
}

/// `v` with three significant digits, without an exponent (`0.249`,
/// `41.2`, `39,871`).
fn significant(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    let magnitude = v.abs().max(f64::MIN_POSITIVE).log10().floor() as i32;
    if magnitude >= 3 {
        let whole = format!("{:.0}", v.abs());
        let mut grouped = String::new();
        for (i, c) in whole.chars().enumerate() {
            if i > 0 && (whole.len() - i) % 3 == 0 {
                grouped.push(',');
            }
            grouped.push(c);
        }
        return if v < 0.0 {
            format!("-{grouped}")
        } else {
            grouped
        };
    }
    let digits = usize::try_from(2 - magnitude).unwrap_or(0);
    format!("{v:.digits$}")
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
            args_ns: 0,
            init_ns: 0,
            setup_ns: 0,
            nvrtc_ns: 0,
            headers_ns: 0,
            lookup_ns,
            total_ns,
            repeat_ns,
            library_first_ns: None,
            library_repeat_ns: Some(lookup_ns / 100),
            nvrtc_loaded: false,
            nvrtc_found: None,
            env_names: None,
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
        assert_eq!(kiln.library_first_us, None);
        assert_eq!(kiln.library_call_us, Some(0.001)); // 10 ns a round of 10
    }

    #[test]
    fn targets_say_met_by_the_rule() {
        let summaries = summarize(&[
            run(Mode::Cold, 10_000_000_000, 9_000_000_000),
            run(Mode::KilnEmbedded, 250_000, 5_000),
            run(Mode::KilnEmbeddedStripped, 400_000, 5_000),
        ]);
        let checks = Report::check_targets(&summaries, &[]);
        let verdict = |what: &str| {
            checks
                .iter()
                .find(|c| c.what == what)
                .map(|c| (c.measured, c.met))
        };
        assert_eq!(
            verdict("kiln-embedded: main → all kernels in hand"),
            Some((Some(0.25), Some(true)))
        );
        assert_eq!(
            verdict("kiln-embedded-stripped: main → all kernels in hand"),
            Some((Some(0.4), Some(false)))
        );
        assert_eq!(
            verdict("kiln-embedded: cold NVRTC / this, main → all kernels in hand"),
            Some((Some(40_000.0), Some(true)))
        );
        assert_eq!(
            verdict("kiln-embedded-stripped: cold NVRTC / this, main → all kernels in hand"),
            Some((Some(25_000.0), Some(false)))
        );
        // Not run: not measured, neither met nor missed.
        assert_eq!(
            verdict("kiln-file: main → all kernels in hand"),
            Some((None, None))
        );
    }

    #[test]
    fn significant_digits_read_plainly() {
        assert_eq!(significant(0.2491), "0.249");
        assert_eq!(significant(41.23), "41.2");
        assert_eq!(significant(39_871.4), "39,871");
        assert_eq!(significant(1_234_567.0), "1,234,567");
        assert_eq!(significant(0.05), "0.0500");
    }
}
