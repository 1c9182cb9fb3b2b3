//! `kiln-bench-library`: a whole library in hand. Every kernel of a library of
//! real size (`kiln-large-library`: 608 kernels in 11 programs, shipped for 7
//! archs plus PTX, its image embedded with `include_image!` by its real build
//! script) asked for through its `KernelLibrary` from `kiln::global()`, for an
//! `sm_90` device, as an application asks for each kernel it launches; in
//! fresh processes, in the developer's environment and in a stripped one (an
//! empty environment but `HOME`, a fresh folder, and `PATH=/usr/bin:/bin`).
//!
//! Each child measures, from its `main`:
//!
//! - **init**: `kiln::init()`, the embedded image merged;
//! - **program first calls**: the first `get_kernel` of each program (its
//!   requests, owners and keys derived from the build record, its entry found);
//! - **kernel first calls**: the first `get_kernel` of every other kernel, once
//!   its program's entry has been found;
//! - **repeated calls**: [`ROUNDS`] more rounds of every kernel, the mean;
//! - **baseline, derived again**: every kernel asked for once more, each of a
//!   library that remembers nothing yet (a fresh `KernelLibrary` on the same
//!   record per kernel, its record parsed before the clock starts): the
//!   request, owner and key derived and the entry's entry points read for
//!   every kernel, as every first call did before a program's derivations
//!   shared them. Same process, after the measured calls (so with the image's
//!   pages already touched: the baseline is, if anything, favoured).
//!
//! Every call is checked to serve the kernel's program from the exact `sm_90`
//! CUBIN of the embedded image, listing the kernel; a child that had NVRTC
//! mapped, or compiled anything, fails. This binary links no other kernel
//! library, so init merges this library's image only.
//!
//! ```text
//! cargo run --release -p kiln-bench --bin kiln-bench-library -- --runs 11 --json bench/results/library.json
//! ```

use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Parser;
use kiln::ArtifactKind;
use kiln::cache::Cache;
use kiln::cuda::{Device, KernelLibrary};
use kiln_large_library::{LIBRARY, Program, kernels};
use serde::{Deserialize, Serialize};

#[path = "large_library/mod.rs"]
mod large_library;
use large_library::{ARCH, check, machine, median, nanos};

/// Rounds of repeated calls (every kernel once a round).
const ROUNDS: u32 = 200;

/// Every kernel of the library in hand (first calls), ms (at most).
const TARGET_IN_HAND_MS: f64 = 5.0;
/// A kernel's first call once its program's entry has been found, µs (at most).
const TARGET_KERNEL_FIRST_US: f64 = 5.0;
/// A repeated call, µs (at most).
const TARGET_REPEAT_US: f64 = 0.2;

/// A whole library in hand, in fresh processes.
#[derive(Parser, Debug)]
struct Cli {
    /// Fresh processes per environment (median taken).
    #[arg(long, default_value_t = 11)]
    runs: usize,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Run one measurement and print it as a JSON line (the driver's child).
    #[arg(long, hide = true)]
    child: bool,
}

/// What one child measured.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Child {
    programs: usize,
    kernels: usize,
    /// `kiln::init()`, ns.
    init_ns: u64,
    /// The first call of each program, together, ns.
    program_first_ns: u64,
    /// The first call of every other kernel, together, ns.
    kernel_first_ns: u64,
    /// From `main` to the last kernel in hand, ns.
    total_ns: u64,
    /// One round of repeated calls, the mean of [`ROUNDS`], ns.
    repeat_ns: u64,
    /// The baseline: every kernel from a library that remembers nothing, ns.
    derived_ns: u64,
    /// Entries compiled (0 expected).
    compiles: u64,
    /// Whether NVRTC was mapped into the process at the end.
    nvrtc_loaded: bool,
}

/// One environment's medians.
#[derive(Clone, Debug, Serialize)]
struct Summary {
    env: &'static str,
    runs: usize,
    programs: usize,
    kernels: usize,
    init_ms: f64,
    /// Every kernel's first call, together: the whole library in hand.
    in_hand_ms: f64,
    /// From `main` (init included) to every kernel in hand.
    total_ms: f64,
    program_first_us: f64,
    kernel_first_us: f64,
    repeat_us: f64,
    derived_ms: f64,
    derived_vs_in_hand: f64,
    derived_per_kernel_us: f64,
}

fn main() -> ExitCode {
    let started = Instant::now();
    let cli = Cli::parse();
    let result = if cli.child {
        child(started).and_then(|child| {
            serde_json::to_string(&child)
                .map(|line| println!("{line}"))
                .map_err(|e| e.to_string())
        })
    } else {
        driver(&cli)
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("kiln-bench-library: {error}");
            ExitCode::FAILURE
        }
    }
}

/// One measurement (see the module documentation).
fn child(started: Instant) -> Result<Child, String> {
    let clock = Instant::now();
    let report = kiln::init();
    let init = clock.elapsed();
    if report.merged().next().is_none() {
        return Err("no embedded image was merged".to_owned());
    }
    let cache: &'static Cache = kiln::global();
    let device = Device::new(ARCH.parse().map_err(|e| format!("{e}"))?);
    let all = kernels();
    // Each program's first kernel, then the others, in the library's order.
    let mut firsts: Vec<&(Program, String)> = Vec::new();
    let mut others: Vec<&(Program, String)> = Vec::new();
    for pair in all {
        if firsts.iter().any(|(p, _)| *p == pair.0) {
            others.push(pair);
        } else {
            firsts.push(pair);
        }
    }
    let call = |library: &KernelLibrary<Program>, (program, kernel): &(Program, String)| {
        let served = library
            .get_kernel(cache, &device, program, kernel)
            .map_err(|e| format!("{kernel} of {program:?}: {e}"))?;
        Ok::<_, String>(black_box(served.hit().artifact(&ArtifactKind::Cubin)).is_some())
    };

    let clock = Instant::now();
    for pair in &firsts {
        call(&LIBRARY, pair)?;
    }
    let program_first = clock.elapsed();
    let clock = Instant::now();
    for pair in &others {
        call(&LIBRARY, pair)?;
    }
    let kernel_first = clock.elapsed();
    let total = started.elapsed();

    let clock = Instant::now();
    for _ in 0..ROUNDS {
        for pair in all {
            call(&LIBRARY, pair)?;
        }
    }
    let repeat = clock.elapsed() / ROUNDS;

    let record = LIBRARY.record().map_err(|e| e.to_string())?;
    let fresh: Vec<KernelLibrary<Program>> = all
        .iter()
        .map(|_| KernelLibrary::with_record(record.clone(), kiln_large_library::request))
        .collect();
    for library in &fresh {
        library.record().map_err(|e| e.to_string())?;
    }
    let clock = Instant::now();
    for (library, pair) in fresh.iter().zip(all) {
        call(library, pair)?;
    }
    let derived = clock.elapsed();

    for (library, pair) in fresh.iter().zip(all) {
        for served in [
            LIBRARY.get_kernel(cache, &device, &pair.0, &pair.1),
            library.get_kernel(cache, &device, &pair.0, &pair.1),
        ] {
            check(&served.map_err(|e| e.to_string())?, pair)?;
        }
    }
    let maps = std::fs::read_to_string("/proc/self/maps").map_err(|e| e.to_string())?;
    Ok(Child {
        programs: firsts.len(),
        kernels: all.len(),
        init_ns: nanos(init),
        program_first_ns: nanos(program_first),
        kernel_first_ns: nanos(kernel_first),
        total_ns: nanos(total),
        repeat_ns: nanos(repeat),
        derived_ns: nanos(derived),
        compiles: cache.stats().compiles,
        nvrtc_loaded: maps.contains("libnvrtc"),
    })
}

fn summarize(env: &'static str, runs: &[Child]) -> Option<Summary> {
    let first = runs.first()?;
    let med = |field: fn(&Child) -> u64| median(&runs.iter().map(field).collect::<Vec<_>>());
    let in_hand = med(|c| c.program_first_ns + c.kernel_first_ns);
    let derived = med(|c| c.derived_ns);
    let others = first.kernels.saturating_sub(first.programs).max(1) as f64;
    Some(Summary {
        env,
        runs: runs.len(),
        programs: first.programs,
        kernels: first.kernels,
        init_ms: med(|c| c.init_ns) / 1e6,
        in_hand_ms: in_hand / 1e6,
        total_ms: med(|c| c.total_ns) / 1e6,
        program_first_us: med(|c| c.program_first_ns) / 1e3 / first.programs.max(1) as f64,
        kernel_first_us: med(|c| c.kernel_first_ns) / 1e3 / others,
        repeat_us: med(|c| c.repeat_ns) / 1e3 / first.kernels.max(1) as f64,
        derived_ms: derived / 1e6,
        derived_vs_in_hand: derived / in_hand.max(1.0),
        derived_per_kernel_us: derived / 1e3 / first.kernels.max(1) as f64,
    })
}

/// Runs the children, round-robin over the two environments; prints the
/// table and the targets.
fn driver(cli: &Cli) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut developer = Vec::new();
    let mut stripped = Vec::new();
    for run in 0..cli.runs {
        for (env, into) in [("developer", &mut developer), ("stripped", &mut stripped)] {
            let mut command = Command::new(&exe);
            command.arg("--child");
            let home = tempfile::tempdir().map_err(|e| e.to_string())?;
            if env == "stripped" {
                command
                    .env_clear()
                    .env("HOME", home.path())
                    .env("PATH", "/usr/bin:/bin");
            }
            let output = command.output().map_err(|e| e.to_string())?;
            if !output.status.success() {
                return Err(format!(
                    "a {env} child failed: {}",
                    String::from_utf8_lossy(&output.stderr)
                ));
            }
            let line = String::from_utf8_lossy(&output.stdout);
            let child: Child = serde_json::from_str(line.trim()).map_err(|e| e.to_string())?;
            if child.compiles > 0 || child.nvrtc_loaded {
                return Err(format!("a {env} child compiled or loaded NVRTC: {child:?}"));
            }
            eprintln!(
                "kiln-bench-library: run {}/{} {env:9} {:.3} ms in hand",
                run + 1,
                cli.runs,
                (child.program_first_ns + child.kernel_first_ns) as f64 / 1e6
            );
            into.push(child);
        }
    }
    let summaries: Vec<Summary> = [("developer", &developer), ("stripped", &stripped)]
        .into_iter()
        .filter_map(|(env, runs)| summarize(env, runs))
        .collect();
    let Some(first) = summaries.first() else {
        return Err("no run".to_owned());
    };
    println!(
        "A whole library in hand: kiln-large-library ({} kernels in {} programs), get_kernel for {ARCH} from kiln::global(), medians of fresh processes\n",
        first.kernels, first.programs
    );
    println!(
        "| env | runs | init ms | all kernels in hand ms | main → all in hand ms | program first call µs | kernel first call µs | repeated call µs | baseline: derived again ms (µs a kernel) | baseline / in hand |"
    );
    println!("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|");
    for s in &summaries {
        println!(
            "| {} | {} | {:.3} | {:.3} | {:.3} | {:.2} | {:.3} | {:.3} | {:.2} ({:.1}) | {:.1}× |",
            s.env,
            s.runs,
            s.init_ms,
            s.in_hand_ms,
            s.total_ms,
            s.program_first_us,
            s.kernel_first_us,
            s.repeat_us,
            s.derived_ms,
            s.derived_per_kernel_us,
            s.derived_vs_in_hand
        );
    }
    println!("\nTargets\n");
    for s in &summaries {
        for (what, measured, target, unit) in [
            ("all kernels in hand", s.in_hand_ms, TARGET_IN_HAND_MS, "ms"),
            (
                "a kernel's first call once its program's entry was found",
                s.kernel_first_us,
                TARGET_KERNEL_FIRST_US,
                "µs",
            ),
            ("a repeated call", s.repeat_us, TARGET_REPEAT_US, "µs"),
        ] {
            let verdict = if measured <= target { "met" } else { "NOT met" };
            println!(
                "- {}: {what}: target ≤ {target} {unit}, measured {measured:.3} {unit}: {verdict}",
                s.env
            );
        }
    }
    println!("\n{}", machine());
    if let Some(path) = &cli.json {
        let json = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "arch": ARCH,
            "rounds": ROUNDS,
            "summaries": summaries,
            "developer": developer,
            "stripped": stripped,
            "load_average": machine(),
        });
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
