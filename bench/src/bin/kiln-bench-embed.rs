//! `kiln-bench-embed`: what an application pays for a compressed embedded
//! image, against the same application built with `KILN_EMBED=plain`, in
//! one run. The library is `kiln-large-library` (608 kernels in 11
//! programs, shipped for 7 archs plus PTX, its image embedded with
//! `include_image!` by its real build script), used as an application uses
//! it: `kiln::init()`, then `get_kernel` through its `KernelLibrary` from
//! `kiln::global()`, for an `sm_90` device.
//!
//! Two builds of this binary run as children, a fresh process per sample,
//! alternating: this one (built with the embedding of the environment, by
//! default compressed) and one built with `KILN_EMBED=plain` (`--plain
//! PATH`; without it the driver builds it with `cargo build`, in this
//! binary's target folder, then builds the default one again). Each child
//! measures, from its `main`:
//!
//! - **embedded**: the bytes of the library's embedded image, whether its
//!   payloads are compressed, and in how many groups;
//! - **init**: `kiln::init()`, the embedded image merged;
//! - **first kernel**: the first `get_kernel` of the target, wall and CPU
//!   time, and the growth of the process's resident memory (`VmRSS`) over
//!   it: for a compressed image, the one group its entry lies in is
//!   decompressed then;
//! - **in hand**: from before the first kernel to every kernel of the
//!   library in hand (608 first calls), wall and CPU time, and `VmRSS`
//!   growth: every group of the target decompressed.
//!
//! The driver compares the embedded bytes with the library's shipped image
//! (`kiln-shipped/*.kship`), and gives the medians of each build and their
//! ratio (compressed ÷ plain, measured in the same run: the host may be
//! shared and noisy, the ratio less so). Every call is checked to serve the
//! kernel's program from the exact `sm_90` CUBIN of the embedded image; a
//! child that compiled anything fails.
//!
//! ```text
//! cargo run --release -p kiln-bench --bin kiln-bench-embed -- --runs 11 --json bench/results/embed.json
//! ```

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

use clap::Parser;
use kiln::ArtifactKind;
use kiln::cache::Cache;
use kiln::cuda::Device;
use kiln_large_library::{LIBRARY, Program, kernels};
use serde::{Deserialize, Serialize};

#[path = "large_library/mod.rs"]
mod large_library;
use large_library::{ARCH, check, machine, median, nanos};

/// The library's shipped image, as its package carries it.
const SHIPPED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../examples/kiln-large-library/kiln-shipped/kiln-large-library.kship"
);

/// The embedded image's bytes against the shipped image's (at most).
const TARGET_EMBEDDED_VS_SHIPPED: f64 = 1.5;
/// The first kernel of a target, ms (at most).
const TARGET_FIRST_MS: f64 = 10.0;
/// Every kernel of the library in hand, ms (at most).
const TARGET_IN_HAND_MS: f64 = 5.0;

/// The embedded image's cost, compressed against plain, in fresh processes.
#[derive(Parser, Debug)]
struct Cli {
    /// Fresh processes per build (median taken).
    #[arg(long, default_value_t = 11)]
    runs: usize,
    /// This binary built with `KILN_EMBED=plain` (built here when not given).
    #[arg(long)]
    plain: Option<PathBuf>,
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
    /// Bytes of the library's embedded image.
    embedded_bytes: u64,
    /// Whether its payloads are compressed.
    compressed: bool,
    /// Its payload groups (0 for a plain image).
    groups: usize,
    /// Its payload region as entries see it, bytes.
    raw_payload_bytes: u64,
    kernels: usize,
    /// `kiln::init()`, ns.
    init_ns: u64,
    /// The first kernel's `get_kernel`, wall and CPU ns.
    first_ns: u64,
    first_cpu_ns: u64,
    /// `VmRSS` growth over the first kernel, KiB.
    first_rss_kib: u64,
    /// From before the first kernel to every kernel in hand, wall and CPU ns.
    in_hand_ns: u64,
    in_hand_cpu_ns: u64,
    /// `VmRSS` growth from before the first kernel to every kernel in hand, KiB.
    in_hand_rss_kib: u64,
    /// Entries compiled (0 expected).
    compiles: u64,
}

/// The CPU time this process has used, ns.
fn cpu_ns() -> Result<u64, String> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: FFI; `now` is a valid, writable timespec for the call's
    // duration, and the clock id is a constant the platform defines.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Err(format!(
            "clock_gettime(CLOCK_PROCESS_CPUTIME_ID): {}",
            std::io::Error::last_os_error()
        ));
    }
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let nsecs = u64::try_from(now.tv_nsec).unwrap_or(0);
    Ok(secs.saturating_mul(1_000_000_000).saturating_add(nsecs))
}

/// The process's resident set size (`VmRSS`), KiB.
fn rss_kib() -> Result<u64, String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("reading /proc/self/status: {e}"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))
        .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
        .ok_or_else(|| "no VmRSS line in /proc/self/status".to_owned())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = if cli.child {
        child().and_then(|child| {
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
            eprintln!("kiln-bench-embed: {error}");
            ExitCode::FAILURE
        }
    }
}

/// One measurement (see the module documentation).
fn child() -> Result<Child, String> {
    let embedded = kiln::registry::embedded_images()
        .into_iter()
        .find(|image| image.crate_name() == "kiln-large-library")
        .ok_or("the library's image is not embedded")?;

    let clock = Instant::now();
    let report = kiln::init();
    let init = clock.elapsed();
    if report.merged().next().is_none() {
        return Err("no embedded image was merged".to_owned());
    }
    let cache: &'static Cache = kiln::global();
    let device = Device::new(ARCH.parse().map_err(|e| format!("{e}"))?);
    let all = kernels();
    let call = |(program, kernel): &(Program, String)| {
        let served = LIBRARY
            .get_kernel(cache, &device, program, kernel)
            .map_err(|e| format!("{kernel} of {program:?}: {e}"))?;
        Ok::<_, String>(black_box(served.hit().artifact(&ArtifactKind::Cubin)).is_some())
    };
    let Some((first, rest)) = all.split_first() else {
        return Err("the library has no kernel".to_owned());
    };

    let (rss_before, cpu_before) = (rss_kib()?, cpu_ns()?);
    let clock = Instant::now();
    call(first)?;
    let first_wall = clock.elapsed();
    let (rss_first, cpu_first) = (rss_kib()?, cpu_ns()?);
    for pair in rest {
        call(pair)?;
    }
    let in_hand_wall = clock.elapsed();
    let (rss_all, cpu_all) = (rss_kib()?, cpu_ns()?);

    for pair in all {
        let served = LIBRARY
            .get_kernel(cache, &device, &pair.0, &pair.1)
            .map_err(|e| e.to_string())?;
        check(&served, pair)?;
    }
    // After the measurements: opening the image again touches its index.
    let image = embedded.open().map_err(|e| e.to_string())?;
    Ok(Child {
        compressed: image.is_compressed(),
        groups: image.payload_group_count(),
        raw_payload_bytes: image.raw_payload_len(),
        embedded_bytes: embedded.bytes().len() as u64,
        kernels: all.len(),
        init_ns: nanos(init),
        first_ns: nanos(first_wall),
        first_cpu_ns: cpu_first.saturating_sub(cpu_before),
        first_rss_kib: rss_first.saturating_sub(rss_before),
        in_hand_ns: nanos(in_hand_wall),
        in_hand_cpu_ns: cpu_all.saturating_sub(cpu_before),
        in_hand_rss_kib: rss_all.saturating_sub(rss_before),
        compiles: cache.stats().compiles,
    })
}

/// One build's medians.
#[derive(Clone, Debug, Serialize)]
struct Summary {
    build: &'static str,
    runs: usize,
    embedded_bytes: u64,
    compressed: bool,
    groups: usize,
    raw_payload_bytes: u64,
    init_ms: f64,
    first_ms: f64,
    first_cpu_ms: f64,
    first_rss_kib: f64,
    in_hand_ms: f64,
    in_hand_cpu_ms: f64,
    in_hand_rss_kib: f64,
}

fn summarize(build: &'static str, runs: &[Child]) -> Option<Summary> {
    let first = runs.first()?;
    let med = |field: fn(&Child) -> u64| median(&runs.iter().map(field).collect::<Vec<_>>());
    Some(Summary {
        build,
        runs: runs.len(),
        embedded_bytes: first.embedded_bytes,
        compressed: first.compressed,
        groups: first.groups,
        raw_payload_bytes: first.raw_payload_bytes,
        init_ms: med(|c| c.init_ns) / 1e6,
        first_ms: med(|c| c.first_ns) / 1e6,
        first_cpu_ms: med(|c| c.first_cpu_ns) / 1e6,
        first_rss_kib: med(|c| c.first_rss_kib),
        in_hand_ms: med(|c| c.in_hand_ns) / 1e6,
        in_hand_cpu_ms: med(|c| c.in_hand_cpu_ns) / 1e6,
        in_hand_rss_kib: med(|c| c.in_hand_rss_kib),
    })
}

/// Runs `cargo build` of this binary, as the running one was built (its
/// profile and target folder), with `KILN_EMBED` set to `embed` or, for
/// `None`, as this process has it.
fn build_self(exe: &Path, embed: Option<&str>) -> Result<(), String> {
    let profile_dir = exe.parent().ok_or("this binary has no folder")?;
    let target_dir = profile_dir
        .parent()
        .ok_or("this binary's folder has no parent")?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args(["build", "-p", "kiln-bench", "--bin", "kiln-bench-embed"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", target_dir);
    match profile_dir.file_name().and_then(|name| name.to_str()) {
        Some("release") => {
            command.arg("--release");
        }
        Some("debug") => {}
        other => {
            return Err(format!(
                "this binary was built with profile {other:?}: pass --plain"
            ));
        }
    }
    if let Some(embed) = embed {
        command.env("KILN_EMBED", embed);
    }
    let status = command.status().map_err(|e| format!("cargo build: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!(
            "cargo build with KILN_EMBED={embed:?} failed: {status}"
        ))
    }
}

/// Runs one child of `exe`.
fn run_child(exe: &Path, build: &str) -> Result<Child, String> {
    let output = Command::new(exe)
        .arg("--child")
        .output()
        .map_err(|e| format!("{}: {e}", exe.display()))?;
    if !output.status.success() {
        return Err(format!(
            "a {build} child failed: {}",
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    let line = String::from_utf8_lossy(&output.stdout);
    let child: Child = serde_json::from_str(line.trim()).map_err(|e| e.to_string())?;
    if child.compiles > 0 {
        return Err(format!("a {build} child compiled: {child:?}"));
    }
    Ok(child)
}

/// Builds (or takes) the two binaries, runs their children alternately,
/// prints the tables and the targets.
fn driver(cli: &Cli) -> Result<(), String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
    let compressed_exe = scratch.path().join("kiln-bench-embed-compressed");
    std::fs::copy(&exe, &compressed_exe).map_err(|e| e.to_string())?;
    let plain_exe = match &cli.plain {
        Some(path) => path.clone(),
        None => {
            let path = scratch.path().join("kiln-bench-embed-plain");
            build_self(&exe, Some("plain"))?;
            std::fs::copy(&exe, &path).map_err(|e| e.to_string())?;
            build_self(&exe, None)?;
            path
        }
    };
    let shipped = std::fs::metadata(SHIPPED)
        .map_err(|e| format!("{SHIPPED}: {e}"))?
        .len();
    let (mut compressed, mut plain) = (Vec::new(), Vec::new());
    for run in 0..cli.runs {
        for (build, path, into) in [
            ("compressed", &compressed_exe, &mut compressed),
            ("plain", &plain_exe, &mut plain),
        ] {
            let child = run_child(path, build)?;
            if child.compressed != (build == "compressed") {
                return Err(format!(
                    "the {build} binary ({}) embeds a {} image",
                    path.display(),
                    if child.compressed {
                        "compressed"
                    } else {
                        "plain"
                    }
                ));
            }
            eprintln!(
                "kiln-bench-embed: run {}/{} {build:10} first kernel {:.3} ms, in hand {:.3} ms",
                run + 1,
                cli.runs,
                child.first_ns as f64 / 1e6,
                child.in_hand_ns as f64 / 1e6
            );
            into.push(child);
        }
    }
    let (Some(c), Some(p)) = (
        summarize("compressed", &compressed),
        summarize("plain", &plain),
    ) else {
        return Err("no run".to_owned());
    };
    let kernels = compressed.first().map_or(0, |child| child.kernels);
    println!(
        "Embedded images: kiln-large-library ({kernels} kernels), get_kernel for {ARCH} from kiln::global(), medians of {} fresh processes per build\n",
        cli.runs
    );
    println!("| build | embedded bytes | ÷ shipped ({shipped} B) | groups | raw payload bytes |");
    println!("|---|--:|--:|--:|--:|");
    for s in [&c, &p] {
        println!(
            "| {} | {} | {:.3} | {} | {} |",
            s.build,
            s.embedded_bytes,
            s.embedded_bytes as f64 / shipped as f64,
            s.groups,
            s.raw_payload_bytes
        );
    }
    println!(
        "\n| build | init ms | first kernel ms (CPU ms) | first kernel VmRSS + KiB | all {kernels} in hand ms (CPU ms) | in hand VmRSS + KiB |"
    );
    println!("|---|--:|--:|--:|--:|--:|");
    for s in [&c, &p] {
        println!(
            "| {} | {:.3} | {:.3} ({:.3}) | {:.0} | {:.3} ({:.3}) | {:.0} |",
            s.build,
            s.init_ms,
            s.first_ms,
            s.first_cpu_ms,
            s.first_rss_kib,
            s.in_hand_ms,
            s.in_hand_cpu_ms,
            s.in_hand_rss_kib
        );
    }
    let ratio = |a: f64, b: f64| a / b.max(1e-9);
    println!(
        "| compressed ÷ plain | {:.2} | {:.2} ({:.2}) | {:+.0} KiB | {:.2} ({:.2}) | {:+.0} KiB |",
        ratio(c.init_ms, p.init_ms),
        ratio(c.first_ms, p.first_ms),
        ratio(c.first_cpu_ms, p.first_cpu_ms),
        c.first_rss_kib - p.first_rss_kib,
        ratio(c.in_hand_ms, p.in_hand_ms),
        ratio(c.in_hand_cpu_ms, p.in_hand_cpu_ms),
        c.in_hand_rss_kib - p.in_hand_rss_kib
    );
    println!("\nTargets (compressed)\n");
    for (what, measured, target, unit) in [
        (
            "embedded bytes ÷ shipped bytes",
            ratio(c.embedded_bytes as f64, shipped as f64),
            TARGET_EMBEDDED_VS_SHIPPED,
            "×",
        ),
        (
            "first kernel of a target",
            c.first_ms,
            TARGET_FIRST_MS,
            "ms",
        ),
        (
            "every kernel of the library in hand",
            c.in_hand_ms,
            TARGET_IN_HAND_MS,
            "ms",
        ),
    ] {
        let verdict = if measured <= target { "met" } else { "NOT met" };
        println!("- {what}: target ≤ {target} {unit}, measured {measured:.3} {unit}: {verdict}");
    }
    println!("\n{}", machine());
    if let Some(path) = &cli.json {
        let json = serde_json::json!({
            "command": std::env::args().collect::<Vec<_>>().join(" "),
            "arch": ARCH,
            "shipped_bytes": shipped,
            "summaries": [c, p],
            "compressed": compressed,
            "plain": plain,
            "machine": machine(),
        });
        let text = serde_json::to_string_pretty(&json).map_err(|e| e.to_string())?;
        std::fs::write(path, text + "\n").map_err(|e| format!("{}: {e}", path.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
