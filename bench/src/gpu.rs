//! `--gpu`: time to first launch on GPU 0 in a fresh process, by three paths to
//! the module of `kiln_axpy<float>`:
//!
//! - `nvrtc`: compile with NVRTC for the GPU's arch, load the CUBIN, launch;
//! - `cubin`: the CUBIN the embedded image serves this GPU (its arch's, or a
//!   compatible one), load, launch;
//! - `ptx`: the PTX from the embedded image, JIT-compiled by the driver at load,
//!   launch.
//!
//! Artifacts are checked as the loader checks them: a CUBIN only if it runs on
//! the GPU's arch, PTX only if it can be JIT-compiled for it. The driver's JIT
//! cache is off in the measured children (`CUDA_CACHE_DISABLE=1`), so every
//! PTX run is a real JIT. Each child also checks the launch's result against
//! the CPU reference.

use std::fmt::Write as _;
use std::time::Instant;

use cudarc::driver::{LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;
use kiln::ArtifactKind;
use kiln::cuda::{Device, Toolchain, loader};
use kiln_kernel_set::{Dtype, KernelSpec, reference};
use kiln_kernels_demo::catalogue;
use serde::{Deserialize, Serialize};

use crate::child::nanos;
use crate::error::BenchError;
use crate::report::median;

/// Elements per launch.
const N: usize = 1 << 20;

/// How the first launch gets its module.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GpuPath {
    /// NVRTC compile, CUBIN load, launch.
    Nvrtc,
    /// Cached CUBIN (embedded image), load, launch.
    Cubin,
    /// Cached PTX (embedded image), driver JIT at load, launch.
    Ptx,
}

impl GpuPath {
    /// All paths.
    pub const ALL: [GpuPath; 3] = [GpuPath::Nvrtc, GpuPath::Cubin, GpuPath::Ptx];

    /// The name in tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            GpuPath::Nvrtc => "nvrtc",
            GpuPath::Cubin => "cubin",
            GpuPath::Ptx => "ptx",
        }
    }
}

/// One fresh process's first launch.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct GpuMeasurement {
    /// The path.
    pub path: GpuPath,
    /// The device's name.
    pub device: String,
    /// Opening the primary context, ns.
    pub context_ns: u64,
    /// Getting the artifact (NVRTC compile, or init + lookup), ns.
    pub artifact_ns: u64,
    /// `cuModuleLoadData` + function lookup, ns.
    pub load_ns: u64,
    /// Copying inputs, the launch and its synchronization, ns.
    pub launch_ns: u64,
    /// From `main` to the launch finished, ns.
    pub total_ns: u64,
}

/// Runs the first launch by `path`; `started` is when `main` began.
pub fn measure(started: std::time::Instant, path: GpuPath) -> Result<GpuMeasurement, BenchError> {
    let gpu_error = |what: &str, err: &dyn std::fmt::Display| BenchError::Gpu {
        what: what.to_owned(),
        reason: err.to_string(),
    };
    let clock = Instant::now();
    let ctx = loader::context(0)?;
    let device = ctx.name().map_err(|e| gpu_error("device name", &e))?;
    let context = clock.elapsed();

    let clock = Instant::now();
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let gpu = loader::device(&ctx)?;
    let (major, minor) = (gpu.arch().major(), gpu.arch().minor());
    let (image, entry_point) = match path {
        GpuPath::Nvrtc => {
            let local = Toolchain::local()?;
            let compiler = local
                .compiler()
                .copied()
                .ok_or_else(|| gpu_error("compiling", &"no NVRTC in this process"))?;
            let request = catalogue::request(&spec, &local, gpu.arch())?;
            let kernel = compiler.compile(&request)?;
            let entry = kernel.entry_points.first().cloned();
            (kernel.cubin, entry)
        }
        GpuPath::Cubin | GpuPath::Ptx => {
            let cache = kiln::global();
            let library = kiln_kernels_demo::library();
            let (asked, kind) = if path == GpuPath::Cubin {
                (gpu, ArtifactKind::Cubin)
            } else {
                // The entry that carries the PTX is the PTX target's.
                let target = library
                    .record()?
                    .ptx_target()
                    .ok_or_else(|| gpu_error("artifact", &"kiln-kernels-demo ships no PTX"))?;
                (Device::new(target), ArtifactKind::Ptx)
            };
            let served = kiln_kernels_demo::get(cache, &asked, &spec)?;
            if cache.stats().compiles > 0 {
                return Err(BenchError::Compiled {
                    mode: format!("gpu {}", path.name()),
                    compiles: cache.stats().compiles,
                });
            }
            let target = served.target();
            let runs = match kind {
                ArtifactKind::Ptx => target.ptx_runs_on(major, minor),
                _ => target.cubin_runs_on(major, minor),
            };
            if !runs {
                return Err(gpu_error(
                    "artifact",
                    &format!(
                        "the image's {kind:?} for {target} does not run on {}",
                        gpu.arch()
                    ),
                ));
            }
            let missing = || BenchError::Missing {
                mode: format!("gpu {}", path.name()),
                kernel: format!("{} ({kind:?})", spec.name()),
            };
            let artifact = served
                .hit()
                .artifacts()
                .into_iter()
                .find(|a| a.kind == kind)
                .ok_or_else(missing)?;
            // Reads (and checks) this payload only; `None` if it is corrupt.
            let mut bytes = artifact.bytes().ok_or_else(missing)?.to_vec();
            if kind == ArtifactKind::Ptx {
                // cuModuleLoadData reads PTX up to its NUL.
                bytes.push(0);
            }
            (
                bytes,
                artifact.entry_points.first().map(|s| (*s).to_owned()),
            )
        }
    };
    let entry_point = entry_point.ok_or_else(|| gpu_error("artifact", &"no entry point"))?;
    let artifact = clock.elapsed();

    let clock = Instant::now();
    let module = ctx
        .load_module(Ptx::from_binary(image))
        .map_err(|e| gpu_error("loading the module", &e))?;
    let function = module
        .load_function(&entry_point)
        .map_err(|e| gpu_error("finding the function", &e))?;
    let load = clock.elapsed();

    let clock = Instant::now();
    let stream = ctx.default_stream();
    let x_host: Vec<f32> = (0..N).map(|i| (i % 17) as f32).collect();
    let y_host: Vec<f32> = (0..N).map(|i| (i % 5) as f32).collect();
    let x = stream
        .clone_htod(&x_host)
        .map_err(|e| gpu_error("copying x", &e))?;
    let mut y = stream
        .clone_htod(&y_host)
        .map_err(|e| gpu_error("copying y", &e))?;
    let (a, n) = (2.0f32, N as i32);
    let geometry = spec.launch(N);
    let mut launch = stream.launch_builder(&function);
    launch.arg(&n).arg(&a).arg(&x).arg(&mut y);
    // SAFETY: the arguments match `kiln_axpy<float>(int, float, const float*,
    // float*)` and both buffers hold `N` elements.
    unsafe {
        launch.launch(LaunchConfig {
            grid_dim: (geometry.grid, 1, 1),
            block_dim: (geometry.block, 1, 1),
            shared_mem_bytes: 0,
        })
    }
    .map_err(|e| gpu_error("launching", &e))?;
    let got = stream
        .clone_dtoh(&y)
        .map_err(|e| gpu_error("copying y back", &e))?;
    let launched = clock.elapsed();
    let total = started.elapsed();

    let mut want = y_host;
    reference::axpy(a, &x_host, &mut want);
    if got != want {
        return Err(gpu_error(
            "checking",
            &"the result differs from the CPU reference",
        ));
    }
    Ok(GpuMeasurement {
        path,
        device,
        context_ns: nanos(context),
        artifact_ns: nanos(artifact),
        load_ns: nanos(load),
        launch_ns: nanos(launched),
        total_ns: nanos(total),
    })
}

/// Medians per path, and the ratios the issue asks for.
#[derive(Clone, Debug, Serialize)]
pub struct GpuSummary {
    /// The device.
    pub device: String,
    /// Per path: (path, runs, median total ms, median load ms).
    pub paths: Vec<(GpuPath, usize, f64, f64)>,
    /// Time to first launch: NVRTC path over cached-CUBIN path.
    pub first_launch_nvrtc_over_cubin: Option<f64>,
    /// Module load: PTX JIT over CUBIN.
    pub load_ptx_over_cubin: Option<f64>,
}

impl GpuSummary {
    /// Summarizes the runs of every path.
    pub fn new(measurements: &[GpuMeasurement]) -> GpuSummary {
        let paths: Vec<(GpuPath, usize, f64, f64)> = GpuPath::ALL
            .iter()
            .filter_map(|&path| {
                let runs: Vec<&GpuMeasurement> =
                    measurements.iter().filter(|m| m.path == path).collect();
                let total = median(&runs.iter().map(|m| m.total_ns).collect::<Vec<_>>())?;
                let load = median(&runs.iter().map(|m| m.load_ns).collect::<Vec<_>>())?;
                Some((path, runs.len(), total / 1e6, load / 1e6))
            })
            .collect();
        let get = |path| paths.iter().find(|p| p.0 == path);
        let ratio = |a: Option<f64>, b: Option<f64>| a.zip(b).map(|(a, b)| a / b);
        GpuSummary {
            device: measurements
                .first()
                .map_or_else(String::new, |m| m.device.clone()),
            first_launch_nvrtc_over_cubin: ratio(
                get(GpuPath::Nvrtc).map(|p| p.2),
                get(GpuPath::Cubin).map(|p| p.2),
            ),
            load_ptx_over_cubin: ratio(
                get(GpuPath::Ptx).map(|p| p.3),
                get(GpuPath::Cubin).map(|p| p.3),
            ),
            paths,
        }
    }

    /// A Markdown table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "Time to first launch of kiln_axpy<float> on {}\n\n| path | runs | main → launch done ms | module load ms |\n|---|--:|--:|--:|\n",
            self.device
        );
        for (path, runs, total, load) in &self.paths {
            let _ = writeln!(out, "| {} | {runs} | {total:.3} | {load:.3} |", path.name());
        }
        let ratio = |r: Option<f64>| r.map_or("-".to_owned(), |r| format!("{r:.1}×"));
        let _ = writeln!(
            out,
            "\nfirst launch, NVRTC / cached CUBIN: {}; module load, PTX JIT / CUBIN: {}",
            ratio(self.first_launch_nvrtc_over_cubin),
            ratio(self.load_ptx_over_cubin)
        );
        out
    }
}
