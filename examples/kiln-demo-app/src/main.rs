//! An end application using two kernel libraries that ship precompiled
//! images (`kiln-kernels-demo`, `kiln-activations-demo`).
//!
//! It asks for every kernel of both, for one device arch, and prints per
//! kernel where it came from (an image, the disk cache (`KILN_CACHE_DIR`) or
//! a compile), which code it is (the CUBIN of the exact arch, a compatible
//! CUBIN, PTX, or compiled here), and the time until it was in hand; then the
//! totals. It needs no NVRTC and no CUDA headers when the images serve every
//! kernel. `--arch` picks the device arch to ask for (no GPU needed), `--driver`
//! the CUDA version of its driver (`12.8`: the code a CUDA 12.8 driver loads;
//! with `--gpu`, the GPU's driver is served as that older version);
//! `--compare-cold` compiles the same kernels from scratch for comparison;
//! `--gpu` (or `KILN_DEMO_GPU=1`) also launches each kernel on GPU 0 and checks
//! it against a CPU reference. `--extra` also asks for a few specializations
//! the libraries do not ship. `--list` gets nothing: it says, per kernel, what
//! each library would serve the device and from what, compiling nothing
//! (`KernelLibrary::kernels`). `--json` prints one JSON object per line.
//!
//! ```text
//! cargo run -p kiln-demo-app --release -- --compare-cold
//! cargo run -p kiln-demo-app -- --arch sm_87     # served by the sm_86 CUBINs
//! cargo run -p kiln-demo-app -- --arch sm_70 --driver 12.8   # NVRTC 12 CUBINs
//! cargo run -p kiln-demo-app -- --arch sm_130 --driver 12.8 --list   # all missing
//! ```

mod gpu;
mod kernels;
mod output;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln::cache::Source;
use kiln::cuda::{Arch, Device, library::SelectionStats, select::Selection};
use kiln::image::Digest;

use kernels::Wanted;
use output::{Outcome, Output};

/// The arch asked for without `--arch` and without a GPU: Hopper (H100, H200).
const DEFAULT_ARCH: &str = "sm_90";

/// Asks two kernel libraries for all their kernels and reports where each came from.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Print one JSON object per line.
    #[arg(long)]
    json: bool,
    /// Also compile every kernel from scratch (a fresh cache) and compare.
    #[arg(long)]
    compare_cold: bool,
    /// Also launch every kernel on GPU 0 and check the results (also KILN_DEMO_GPU=1).
    #[arg(long)]
    gpu: bool,
    /// The device arch to ask for (`sm_87`): with no GPU, the device this run
    /// stands for. Default: GPU 0's with `--gpu`, else sm_90.
    #[arg(long)]
    arch: Option<String>,
    /// The CUDA version of the device's driver (`12.8`, `13.0`): what it loads
    /// decides which toolchain's code is served. With `--gpu`, the GPU's
    /// driver is served as this version (it must not be newer). Default: the
    /// GPU's with `--gpu`, else not known (every toolchain's code is offered).
    #[arg(long, value_name = "CUDA_VERSION")]
    driver: Option<String>,
    /// Also ask for a few specializations that the libraries do not ship
    /// (see `Wanted::extras`), as an application's own workload would.
    #[arg(long)]
    extra: bool,
    /// Get nothing: list what each library would serve the device, kernel by
    /// kernel, and from what (KernelLibrary::kernels), compiling nothing.
    #[arg(long)]
    list: bool,
    /// Ask only for the kernels whose name contains this text.
    #[arg(long, value_name = "TEXT")]
    only: Option<String>,
    /// Also ask for `axpy_i32`, which no library precompiles: it must be
    /// compiled (and without NVRTC fails, saying what to install).
    #[arg(long)]
    uncatalogued: bool,
    /// Declare definition NAME at the fingerprint of TEXT before the images
    /// are merged, as a redefinition would: image entries built against
    /// another fingerprint of NAME are skipped as stale and compile again.
    #[arg(long, value_name = "NAME=TEXT")]
    define: Vec<String>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("kiln-demo-app: {err}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the demo; `Ok(false)` when a kernel failed to compile or to check.
fn run(args: &Args) -> Result<bool, Box<dyn std::error::Error>> {
    let out = Output { json: args.json };
    let definitions = parse_definitions(&args.define)?;

    let started = Instant::now();
    let report = if definitions.is_empty() {
        kiln::init()
    } else {
        kiln::cache::init_with(|cache| {
            for (name, fingerprint) in &definitions {
                cache.define(name, *fingerprint);
            }
        })?
    };
    out.init(report, started.elapsed());
    out.library("kiln-kernels-demo", kiln_kernels_demo::library().record());
    out.library(
        "kiln-activations-demo",
        kiln_activations_demo::library().record(),
    );
    let cache = kiln::global();

    let gpu_wanted = args.gpu
        || kiln::env::switch(
            "KILN_DEMO_GPU",
            std::env::var_os("KILN_DEMO_GPU").as_deref(),
            false,
        );
    let driver = args
        .driver
        .as_deref()
        .map(|text| {
            kiln::cuda::select::parse_cuda_version(text)
                .ok_or_else(|| format!("--driver {text:?}: expected a CUDA version such as 12.8"))
        })
        .transpose()?;
    let gpu = if gpu_wanted {
        if let Some(driver) = driver {
            // The GPU's driver served as an older one: selection and the
            // loader's checks see that version.
            kiln::cuda::loader::limit_driver_version(driver)?;
        }
        Some(gpu::Gpu::open()?)
    } else {
        None
    };
    let arch: Option<Arch> = args.arch.as_deref().map(str::parse).transpose()?;
    let device = match (arch, &gpu) {
        (Some(arch), Some(gpu)) => gpu.device().driver().map_or(Device::new(arch), |driver| {
            Device::new(arch).with_driver(driver)
        }),
        (Some(arch), None) => Device::new(arch),
        (None, Some(gpu)) => gpu.device(),
        (None, None) => Device::new(DEFAULT_ARCH.parse()?),
    };
    let device = match (driver, &gpu) {
        (Some(driver), None) => device.with_driver(driver),
        _ => device,
    };
    out.device(&device, gpu.is_some());
    if args.list {
        return list(&out, &device);
    }

    let mut wanted = Wanted::all(args.uncatalogued);
    if args.extra {
        for extra in Wanted::extras() {
            if !wanted.iter().any(|kernel| kernel.name() == extra.name()) {
                wanted.push(extra);
            }
        }
    }
    if let Some(only) = &args.only {
        wanted.retain(|kernel| kernel.name().contains(only.as_str()));
    }
    let mut ok = true;
    let (mut from_image, mut from_tier, mut compiled) = (0, 0, 0);
    let mut total = Duration::ZERO;
    let mut served = Vec::new();
    for kernel in &wanted {
        let compiles_before = cache.stats().compiles;
        let started = Instant::now();
        let result = kernel.get(cache, &device);
        let elapsed = started.elapsed();
        match result {
            Ok(kernel_served) => {
                total += elapsed;
                let hit = kernel_served.hit();
                let outcome = if cache.stats().compiles > compiles_before {
                    compiled += 1;
                    Outcome::Compiled
                } else {
                    match hit.source() {
                        Source::Image => {
                            from_image += 1;
                            Outcome::Image
                        }
                        Source::Memory => Outcome::Memory,
                        // The disk or remote tier (or a source newer than
                        // this program: `Source` may grow).
                        _ => {
                            from_tier += 1;
                            Outcome::Tier
                        }
                    }
                };
                out.kernel(
                    output::Kernel {
                        library: kernel.library(),
                        name: &kernel.name(),
                        outcome,
                        selection: kernel_served.selection(),
                        target: kernel_served.target(),
                        code: hit
                            .artifact(&kernel_served.artifact().kind)
                            .map(|code| (code.len(), kiln::image::Digest::of(code))),
                        nvrtc: kernel_served.nvrtc().map(|v| v.release.clone()),
                    },
                    elapsed,
                );
                served.push((kernel, kernel_served));
            }
            Err(err) => {
                ok = false;
                out.failure(kernel.library(), &kernel.name(), &err);
            }
        }
    }
    let stats = cache.stats();
    out.summary(
        output::Summary {
            kernels: wanted.len(),
            from_image,
            from_tier,
            compiled,
            nvrtc_compiles: stats.compiles,
            hits_tier: stats.hits_tier,
            selections: SelectionStats::process(),
        },
        total,
    );

    if args.compare_cold {
        let fresh = kiln::cache::Cache::new();
        let started = Instant::now();
        for kernel in &wanted {
            let cold = kernel.get(&fresh, &device)?;
            debug_assert_eq!(cold.selection(), Selection::Compiled);
        }
        out.cold(wanted.len(), started.elapsed(), total);
    }

    if let Some(gpu) = &gpu {
        for (kernel, kernel_served) in &served {
            let result = gpu.check(kernel, kernel_served);
            ok &= result.is_ok();
            out.gpu(&kernel.name(), &result);
        }
    }
    Ok(ok)
}

/// `--list`: every kernel of both libraries for `device`, as each library would
/// serve it without compiling; `Ok(false)` when one is missing.
fn list(out: &Output, device: &Device) -> Result<bool, Box<dyn std::error::Error>> {
    let cache = kiln::global();
    let demo = kiln_kernels_demo::library().kernels(
        cache,
        device,
        &kiln_kernels_demo::catalogue::common(),
    )?;
    let activations = kiln_activations_demo::library().kernels(
        cache,
        device,
        &kiln_activations_demo::Kernel::all(),
    )?;
    let mut complete = true;
    for (library, listed) in [
        (
            "kiln-kernels-demo",
            demo.iter()
                .map(|k| (&k.program, &k.kernel, &k.outcome))
                .collect::<Vec<_>>(),
        ),
        (
            "kiln-activations-demo",
            activations
                .iter()
                .map(|k| (&k.program, &k.kernel, &k.outcome))
                .collect(),
        ),
    ] {
        for (program, kernel, outcome) in listed {
            complete &= !outcome.is_missing();
            out.listed(library, program, kernel.as_deref(), outcome);
        }
    }
    Ok(complete)
}

/// `NAME=TEXT` pairs as (name, fingerprint of text).
fn parse_definitions(defines: &[String]) -> Result<Vec<(String, Digest)>, String> {
    defines
        .iter()
        .map(|define| {
            let (name, text) = define
                .split_once('=')
                .ok_or_else(|| format!("--define {define:?}: expected NAME=TEXT"))?;
            Ok((name.to_owned(), Digest::of(text.as_bytes())))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn definitions_are_name_equals_text() {
        let parsed = parse_definitions(&["a::b=x=y".to_owned()]).unwrap();
        assert_eq!(parsed, [("a::b".to_owned(), Digest::of(b"x=y"))]);
        assert!(parse_definitions(&["no-equals".to_owned()]).is_err());
    }
}
