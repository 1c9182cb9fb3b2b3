//! `kiln-bench`: time to first kernel, measured end to end in fresh processes.
//!
//! The driver writes the same compiled kernels in every cache form, then
//! re-executes this binary once per (mode, run); each child measures from its
//! `main` to every kernel's CUBIN in hand and prints one JSON line. The driver
//! takes medians, prints a table, and writes `ttfk.json` and `ttfk.svg`.
//!
//! Modes: `cold` (NVRTC every kernel), `kiln-embedded` (`include_image!`),
//! `kiln-file` (`KILN_IMAGE_PATH`, mmap), `kiln-disk` (the disk tier, warmed),
//! `dir-cache` (one file per kernel, read + BLAKE3) and `postcard-image` (a
//! serde image deserialized whole); the three Kiln modes again in a stripped
//! environment (`kiln-*-stripped`: what a production machine has, no NVRTC
//! reachable). Then init + first lookup as the image grows,
//! resident memory around a 256 MiB image, and with `--gpu` the first launch.
//!
//! ```text
//! cargo run --release -p kiln-bench                 # the full run, writes bench/results/
//! cargo run --release -p kiln-bench -- --quick      # a smoke run, no NVRTC
//! cargo run --release -p kiln-bench -- --gpu        # also the first launch on GPU 0
//! ```

/// Where the full run writes its results (from the repository root): beside
/// the benchmarks, as `kiln-bench-builds` and `kiln-bench-library` are told
/// to (BENCHMARKS.md gives their commands).
const RESULTS: &str = "bench/results";

mod baseline;
mod chart;
mod child;
mod driver;
mod error;
mod fixtures;
mod gpu;
mod jit;
mod kernel_set;
mod large;
mod mode;
mod report;
mod rss;
mod scaling;
mod synthetic;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Args, Parser, Subcommand};

use crate::error::BenchError;
use crate::fixtures::Fixtures;
use crate::gpu::GpuPath;
use crate::kernel_set::Workload;
use crate::mode::Mode;
use crate::scaling::{Format, PageCache};

/// Time to first kernel: Kiln images against cold NVRTC, a directory cache and
/// a serde image, each in fresh processes.
#[derive(Parser, Debug)]
#[command(version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(flatten)]
    run: RunArgs,
    #[command(subcommand)]
    child: Option<ChildCommand>,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// A smoke run: the synthetic set (no NVRTC), 3 runs, small scaling
    /// images, a 16 MiB resident-memory image, output in a temporary folder.
    #[arg(long)]
    quick: bool,
    /// The kernel set (default: real; synthetic with --quick).
    #[arg(long, value_enum)]
    workload: Option<Workload>,
    /// The modes to run (default: all).
    #[arg(long, value_enum, value_delimiter = ',')]
    modes: Vec<Mode>,
    /// Fresh processes per warm mode (median taken).
    #[arg(long, default_value_t = 11)]
    runs: usize,
    /// Fresh processes for the cold mode (each compiles every kernel).
    #[arg(long, default_value_t = 5)]
    cold_runs: usize,
    /// Entry counts of the scaling images (0: skip the scaling).
    #[arg(long, value_delimiter = ',', default_values_t = [1_000, 10_000, 100_000])]
    scale: Vec<usize>,
    /// Fresh processes per scaling point.
    #[arg(long, default_value_t = 5)]
    scale_runs: usize,
    /// Size of the resident-memory image in MiB (0: skip).
    #[arg(long, default_value_t = 256)]
    rss_mib: usize,
    /// Also measure the first launch on GPU 0 (NVRTC vs cached CUBIN vs PTX JIT).
    #[arg(long)]
    gpu: bool,
    /// Where ttfk.json and ttfk.svg go (default: bench/results; a temporary folder
    /// with --quick).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Where the fixtures go (default: a temporary folder, removed after).
    #[arg(long)]
    fixtures: Option<PathBuf>,
}

/// What the driver runs in child processes.
#[derive(Subcommand, Debug)]
enum ChildCommand {
    /// One time-to-first-kernel measurement.
    #[command(hide = true)]
    Child {
        #[arg(long, value_enum)]
        mode: Mode,
        #[arg(long, value_enum)]
        workload: Workload,
        #[arg(long)]
        fixtures: PathBuf,
    },
    /// Init + first lookup of one scaling image.
    #[command(hide = true)]
    Scale(ImageArgs),
    /// Resident memory around one image.
    #[command(hide = true)]
    Rss {
        #[command(flatten)]
        image: ImageArgs,
        #[arg(long, value_enum)]
        page_cache: PageCache,
    },
    /// One first launch on GPU 0.
    #[command(hide = true)]
    Gpu {
        #[arg(long, value_enum)]
        path: GpuPath,
    },
    /// Compiles the real-size PTX library of `jit` (needs NVRTC and the CCCL
    /// headers; no GPU) into a folder.
    LargeFixture {
        /// The folder to write `large.kimg` and `large.record` into.
        #[arg(long)]
        out: PathBuf,
    },
    /// On GPU 0: a real-size PTX entry served in fresh processes, with the
    /// driver alone and with Kiln's JIT cache (first process, second process,
    /// second machine through a loopback Redis); writes `jit.json`.
    Jit {
        /// The folder `large-fixture` wrote.
        #[arg(long)]
        fixture: PathBuf,
        /// The `redis-server` program to start on loopback.
        #[arg(long, default_value = "redis-server")]
        redis_server: PathBuf,
        /// A signing key (`kiln keygen -o KEY`; `KEY.pub` beside it).
        #[arg(long)]
        signing_key: PathBuf,
        /// Runs of the scenarios that JIT-compile one kernel or none.
        #[arg(long, default_value_t = 9)]
        runs: usize,
        /// Runs of the scenarios that JIT-compile the whole module.
        #[arg(long, default_value_t = 3)]
        whole_runs: usize,
        /// Where the cache folders go (emptied first).
        #[arg(long)]
        work: PathBuf,
        /// Where `jit.json` goes.
        #[arg(long, default_value = RESULTS)]
        out: PathBuf,
    },
    /// One process of `jit`.
    #[command(hide = true)]
    JitChild {
        #[arg(long)]
        fixture: PathBuf,
        #[arg(long, value_enum)]
        keep: jit::Keep,
        #[arg(long, value_enum)]
        split: jit::Split,
        #[arg(long, value_enum)]
        kernels: jit::Kernels,
    },
}

#[derive(Args, Debug)]
struct ImageArgs {
    #[arg(long, value_enum)]
    format: Format,
    #[arg(long)]
    dir: PathBuf,
    #[arg(long)]
    entries: usize,
}

fn main() -> ExitCode {
    let started = Instant::now();
    // The time-to-first-kernel child reads its three arguments by hand: clap
    // takes about 0.1 ms to build its parser, which the measured total would
    // count and no application pays.
    let result = match measurement_args() {
        Some(child) => run_child(started, child),
        None => {
            let cli = Cli::parse();
            match cli.child {
                Some(child) => run_child(started, child),
                None => run_driver(cli.run),
            }
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("kiln-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

/// The arguments of a time-to-first-kernel child, exactly as the driver
/// writes them (`child --mode M --workload W --fixtures DIR`); `None` for
/// anything else, which clap then parses (and explains, if wrong).
fn measurement_args() -> Option<ChildCommand> {
    use clap::ValueEnum as _;
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    let [
        child,
        mode_flag,
        mode,
        workload_flag,
        workload,
        fixtures_flag,
        fixtures,
    ] = args.as_slice()
    else {
        return None;
    };
    let flags = [child, mode_flag, workload_flag, fixtures_flag].map(|a| a.to_str());
    if flags
        != [
            Some("child"),
            Some("--mode"),
            Some("--workload"),
            Some("--fixtures"),
        ]
    {
        return None;
    }
    Some(ChildCommand::Child {
        mode: Mode::from_str(mode.to_str()?, false).ok()?,
        workload: Workload::from_str(workload.to_str()?, false).ok()?,
        fixtures: PathBuf::from(fixtures),
    })
}

/// Prints `value` as one JSON line (what the driver reads).
fn print_line(value: &impl serde::Serialize) -> Result<(), BenchError> {
    let line = serde_json::to_string(value).map_err(|err| BenchError::Encode {
        what: "a measurement",
        reason: err.to_string(),
    })?;
    println!("{line}");
    Ok(())
}

fn run_child(started: Instant, child: ChildCommand) -> Result<(), BenchError> {
    match child {
        ChildCommand::Child {
            mode,
            workload,
            fixtures,
        } => print_line(&child::measure(
            started,
            mode,
            workload,
            &Fixtures::at(fixtures),
        )?),
        ChildCommand::Scale(args) => print_line(&scaling::measure_scale(
            args.format,
            &args.dir,
            args.entries,
        )?),
        ChildCommand::Rss { image, page_cache } => print_line(&scaling::measure_rss(
            image.format,
            &image.dir,
            image.entries,
            page_cache,
        )?),
        ChildCommand::Gpu { path } => print_line(&gpu::measure(started, path)?),
        ChildCommand::LargeFixture { out } => {
            println!("{}", large::write_fixture(&out)?);
            Ok(())
        }
        ChildCommand::Jit {
            fixture,
            redis_server,
            signing_key,
            runs,
            whole_runs,
            work,
            out,
        } => {
            std::fs::create_dir_all(&out).map_err(BenchError::io(&out))?;
            let path = out.join("jit.json");
            let summary = jit::run(&jit::JitPlan {
                fixture,
                redis_server,
                signing_key,
                runs: runs.max(1),
                whole_runs: whole_runs.max(1),
                work,
                json: path.clone(),
            })?;
            println!("{}", summary.table());
            println!("wrote {}", path.display());
            if summary.failures.is_empty() {
                Ok(())
            } else {
                Err(BenchError::Gpu {
                    what: "jit".to_owned(),
                    reason: format!("{} run(s) failed (see above)", summary.failures.len()),
                })
            }
        }
        ChildCommand::JitChild {
            fixture,
            keep,
            split,
            kernels,
        } => print_line(&jit::measure(started, &fixture, keep, split, kernels)?),
    }
}

fn run_driver(args: RunArgs) -> Result<(), BenchError> {
    let quick = args.quick;
    let plan = driver::Plan {
        workload: args.workload.unwrap_or(if quick {
            Workload::Synthetic
        } else {
            Workload::Real
        }),
        modes: if args.modes.is_empty() {
            Mode::ALL.to_vec()
        } else {
            args.modes
        },
        runs: if quick { 3 } else { args.runs.max(1) },
        cold_runs: if quick { 3 } else { args.cold_runs.max(1) },
        scale_sizes: if quick {
            vec![100, 1_000]
        } else {
            args.scale.into_iter().filter(|&n| n > 0).collect()
        },
        scale_runs: if quick { 1 } else { args.scale_runs.max(1) },
        rss_bytes: if quick { 16 } else { args.rss_mib } * 1024 * 1024,
        rss_runs: if quick { 1 } else { 3 },
        gpu: args.gpu,
        fixtures: args.fixtures,
        command: std::env::args().collect::<Vec<_>>().join(" "),
    };
    let out = match args.out {
        Some(out) => out,
        None if quick => std::env::temp_dir().join("kiln-bench-quick"),
        None => PathBuf::from(RESULTS),
    };
    let report = driver::run(&plan)?;
    std::fs::create_dir_all(&out).map_err(BenchError::io(&out))?;
    let json = out.join("ttfk.json");
    let svg = out.join("ttfk.svg");
    report.write_json(&json)?;
    chart::draw(&report, &svg)?;
    println!("{}", report.tables());
    println!(
        "machine: {} CPUs, {}, {}, Linux {}; {}",
        report.machine.nproc,
        report.machine.cpu,
        report.machine.gpu,
        report.machine.kernel,
        report.machine.load_average.describe()
    );
    println!("wrote {} and {}", json.display(), svg.display());
    Ok(())
}
