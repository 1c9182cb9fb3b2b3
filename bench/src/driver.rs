//! The driver: writes the fixtures, runs every measurement in a fresh child
//! process (this binary, re-executed), and gathers the report.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use serde::de::DeserializeOwned;

use crate::child::Measurement;
use crate::error::BenchError;
use crate::fixtures::Fixtures;
use crate::gpu::{GpuMeasurement, GpuPath, GpuSummary};
use crate::kernel_set::Workload;
use crate::mode::{Env, Mode};
use crate::report::{self, LoadAverage, Machine, Report};
use crate::scaling::{self, Format, PageCache, RssMeasurement, ScaleMeasurement};

/// What to measure.
#[derive(Clone, Debug)]
pub struct Plan {
    /// The kernel set.
    pub workload: Workload,
    /// The modes, in order.
    pub modes: Vec<Mode>,
    /// Runs per warm mode.
    pub runs: usize,
    /// Runs of the cold mode.
    pub cold_runs: usize,
    /// Entry counts of the scaling images.
    pub scale_sizes: Vec<usize>,
    /// Runs per scaling point.
    pub scale_runs: usize,
    /// Size of the resident-memory image, bytes (0: skip).
    pub rss_bytes: usize,
    /// Runs of the resident-memory measurement.
    pub rss_runs: usize,
    /// Also measure the first launch on GPU 0.
    pub gpu: bool,
    /// Where the fixtures go (a temporary folder when `None`).
    pub fixtures: Option<PathBuf>,
    /// The command line, for the report.
    pub command: String,
}

/// Runs the plan.
pub fn run(plan: &Plan) -> Result<Report, BenchError> {
    if plan.gpu && !kiln::cuda::loader::driver_available() {
        return Err(BenchError::Gpu {
            what: "--gpu".to_owned(),
            reason: "the CUDA driver library does not load here: run --gpu on a machine with a GPU"
                .to_owned(),
        });
    }
    let temp;
    let root = match &plan.fixtures {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::Builder::new()
                .prefix("kiln-bench-")
                .tempdir()
                .map_err(BenchError::io(std::env::temp_dir()))?;
            temp.path().to_path_buf()
        }
    };
    let kernel_root = root.join(plan.workload.name());
    let (fixtures, entries) = Fixtures::prepare(&kernel_root, plan.workload)?;
    eprintln!(
        "kiln-bench: {} entries of the {} set in every cache form under {}",
        entries,
        plan.workload.name(),
        kernel_root.display()
    );

    let mut load = LoadAverage::default();
    load.sample();
    let measurements = run_modes(plan, &fixtures, &mut load)?;
    let modes = report::summarize(&measurements);

    let scale = run_scaling(plan, &root)?;
    let scaling = report::summarize_scale(&scale);
    let rss = run_rss(plan, &root)?;

    let gpu = if plan.gpu {
        Some(GpuSummary::new(&run_gpu(plan)?))
    } else {
        None
    };
    load.sample();
    let targets = Report::check_targets(&modes, &rss);
    Ok(Report {
        command: plan.command.clone(),
        workload: plan.workload.name(),
        machine: Machine::detect(gpu.as_ref().map(|g| g.device.clone()), load),
        modes,
        scaling,
        rss,
        gpu,
        targets,
        runs: measurements,
    })
}

/// Each mode, round-robin so that drift spreads over all modes; the load
/// average is sampled once a round.
fn run_modes(
    plan: &Plan,
    fixtures: &Fixtures,
    load: &mut LoadAverage,
) -> Result<Vec<Measurement>, BenchError> {
    let runs_of = |mode: Mode| {
        if mode == Mode::Cold {
            plan.cold_runs
        } else {
            plan.runs
        }
    };
    let rounds = plan.modes.iter().map(|&m| runs_of(m)).max().unwrap_or(0);
    let mut measurements = Vec::new();
    for round in 0..rounds {
        load.sample();
        for &mode in &plan.modes {
            if round >= runs_of(mode) {
                continue;
            }
            let args: Vec<OsString> = vec![
                "child".into(),
                "--mode".into(),
                mode.name().into(),
                "--workload".into(),
                plan.workload.name().into(),
                "--fixtures".into(),
                fixtures.root().into(),
            ];
            let vars: Vec<(&str, PathBuf)> = match mode.base() {
                Mode::KilnFile => vec![(kiln::env::IMAGE_PATH, fixtures.image_dir())],
                Mode::KilnDisk => vec![(kiln::disk::CACHE_DIR, fixtures.disk_dir())],
                _ => Vec::new(),
            };
            let m: Measurement = spawn(&args, mode.env(), &vars)?;
            check_nvrtc(&m)?;
            eprintln!(
                "kiln-bench: round {}/{rounds} {:<22} {:>12.3} ms",
                round + 1,
                mode.name(),
                m.total_ns as f64 / 1e6
            );
            measurements.push(m);
        }
    }
    Ok(measurements)
}

fn run_scaling(plan: &Plan, root: &Path) -> Result<Vec<ScaleMeasurement>, BenchError> {
    let mut measurements = Vec::new();
    for &entries in &plan.scale_sizes {
        let dir = root.join(format!("scale-{entries}"));
        scaling::write_images(&dir, entries, scaling::SCALE_PAYLOAD)?;
        for _ in 0..plan.scale_runs {
            for format in Format::ALL {
                let args = child_args("scale", format, &dir, entries);
                measurements.push(spawn::<ScaleMeasurement>(&args, Env::Developer, &[])?);
            }
        }
        eprintln!("kiln-bench: scaling {entries} entries done");
        // The largest images are big: keep only what is measured next.
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(measurements)
}

/// The resident-memory runs; per format, the run of median growth.
fn run_rss(plan: &Plan, root: &Path) -> Result<Vec<RssMeasurement>, BenchError> {
    if plan.rss_bytes == 0 || plan.rss_runs == 0 {
        return Ok(Vec::new());
    }
    let entries = plan.rss_bytes.div_ceil(scaling::RSS_PAYLOAD);
    let dir = root.join("rss");
    scaling::write_rss_images(&dir, entries)?;
    let mut picked = Vec::new();
    for format in Format::ALL {
        for page_cache in PageCache::ALL {
            let mut runs = Vec::new();
            for _ in 0..plan.rss_runs {
                let mut args = child_args("rss", format, &dir, entries);
                args.extend(["--page-cache".into(), page_cache.name().into()]);
                runs.push(spawn::<RssMeasurement>(&args, Env::Developer, &[])?);
            }
            runs.sort_by(|a, b| a.growth_fraction().total_cmp(&b.growth_fraction()));
            if let Some(median) = runs.get(runs.len() / 2) {
                picked.push(median.clone());
            }
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    eprintln!("kiln-bench: resident memory done");
    Ok(picked)
}

fn run_gpu(plan: &Plan) -> Result<Vec<GpuMeasurement>, BenchError> {
    let mut measurements = Vec::new();
    for _ in 0..plan.runs {
        for path in GpuPath::ALL {
            let args: Vec<OsString> = vec!["gpu".into(), "--path".into(), path.name().into()];
            measurements.push(spawn::<GpuMeasurement>(&args, Env::Developer, &[])?);
        }
    }
    Ok(measurements)
}

fn child_args(command: &str, format: Format, dir: &Path, entries: usize) -> Vec<OsString> {
    let format = match format {
        Format::Kiln => "kiln",
        Format::Postcard => "postcard",
    };
    vec![
        command.into(),
        "--format".into(),
        format.into(),
        "--dir".into(),
        dir.into(),
        "--entries".into(),
        entries.to_string().into(),
    ]
}

/// A warm mode's child must not have loaded NVRTC: its kernels are all
/// cached. (Whether it could have found one is reported, not refused: that
/// depends on the machine.)
fn check_nvrtc(m: &Measurement) -> Result<(), BenchError> {
    if m.mode.is_warm() && m.nvrtc_loaded {
        return Err(BenchError::Nvrtc {
            mode: m.mode.name().to_owned(),
            what: "NVRTC was mapped into a process whose kernels were all cached: something located and loaded it".to_owned(),
        });
    }
    Ok(())
}

/// Runs this binary with `args` in a fresh process, in the environment `env`
/// with `vars` added (the paths a mode needs), and parses the JSON line it
/// prints last. A stripped environment gets a fresh empty `HOME`, removed
/// after.
pub(crate) fn spawn<T: DeserializeOwned>(
    args: &[OsString],
    env: Env,
    vars: &[(&str, PathBuf)],
) -> Result<T, BenchError> {
    let shown = args
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join(" ");
    let fail = |reason: String| BenchError::Child {
        args: shown.clone(),
        reason,
    };
    let exe = std::env::current_exe().map_err(|e| fail(format!("finding this binary: {e}")))?;
    let mut command = Command::new(exe);
    command.args(args.iter());
    let home = match env {
        Env::Developer => {
            for (name, _) in std::env::vars_os() {
                if name.to_string_lossy().starts_with("KILN_") && !is_locator(&name) {
                    command.env_remove(name);
                }
            }
            // A PTX load would otherwise come from the driver's JIT cache
            // (~/.nv/ComputeCache) from the second run on, not from a JIT.
            command.env("CUDA_CACHE_DISABLE", "1");
            None
        }
        Env::Stripped => {
            let home = tempfile::Builder::new()
                .prefix("kiln-bench-home-")
                .tempdir()
                .map_err(BenchError::io(std::env::temp_dir()))?;
            command
                .env_clear()
                .env("HOME", home.path())
                .env("PATH", STRIPPED_PATH);
            Some(home)
        }
    };
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command
        .output()
        .map_err(|e| fail(format!("starting: {e}")))?;
    drop(home);
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(fail(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let line = stdout
        .lines()
        .rev()
        .find(|line| !line.trim().is_empty())
        .ok_or_else(|| fail("printed nothing".to_owned()))?;
    serde_json::from_str(line).map_err(|e| fail(format!("bad measurement {line:?}: {e}")))
}

/// `PATH` in a stripped environment: the system's binaries only.
const STRIPPED_PATH: &str = "/usr/bin:/bin";

/// `KILN_*` variables that say where NVRTC and the CCCL headers are: kept,
/// since they are where the program finds its compiler, not cache switches.
fn is_locator(name: &std::ffi::OsStr) -> bool {
    name == "KILN_NVRTC" || name == "KILN_CCCL_INCLUDE"
}
