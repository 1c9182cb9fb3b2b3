//! `kiln-bench-builds`: what a library's build scripts cost, measured through
//! `cargo build` of the real crates: the demo application's two kernel
//! libraries with their shipped images against the same build compiling
//! everything (cold, and with a warm disk cache); a library edited in one
//! kernel; the second builder of a build farm sharing a Redis cache.
//!
//! Each scenario removes the libraries' own build (`cargo clean -p`), so that
//! their build scripts run again, then builds; it reads each build script's
//! summary line (entries by source, compiles, the block's time) and times
//! the whole `cargo build`. Medians of `--runs`; a table on stdout, JSON with
//! `--json FILE`.
//!
//! ```text
//! cargo run --release -p kiln-bench --bin kiln-bench-builds -- --runs 3 --json bench/results/builds.json
//! ```
//!
//! Needs NVRTC (the compiling scenarios) and `redis-server` (the farm).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use clap::Parser;
use kiln_test_support::library;
use serde_json::json;

/// Build-script costs through cargo.
#[derive(Parser, Debug)]
struct Cli {
    /// Builds per scenario (median taken).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Also write the figures as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Scratch folder (target folders, disk caches, library copies).
    #[arg(long)]
    scratch: Option<PathBuf>,
}

/// One build's figures, summed over the build scripts that ran.
#[derive(Clone, Debug, Default)]
struct Figures {
    wall: Duration,
    block: Duration,
    entries: u64,
    compiles: u64,
    from: Vec<(String, u64)>,
}

/// What to build: a package of the repository's workspace, or a library
/// copied into a workspace of its own.
#[derive(Clone)]
struct Build {
    dir: PathBuf,
    package: Option<&'static str>,
    libraries: Vec<&'static str>,
    target: PathBuf,
    vars: Vec<(&'static str, OsString)>,
}

impl Build {
    fn var(mut self, name: &'static str, value: impl Into<OsString>) -> Build {
        self.vars.retain(|(n, _)| *n != name);
        self.vars.push((name, value.into()));
        self
    }

    fn cargo(&self, args: &[&str]) -> Command {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut command = Command::new(cargo);
        command
            .args(args)
            .current_dir(&self.dir)
            .env("CARGO_TARGET_DIR", &self.target);
        for name in [
            "KILN_CACHE",
            "KILN_CACHE_DIR",
            "KILN_IGNORE_SHIPPED",
            "KILN_SHIP_CANDIDATE",
            "KILN_ALWAYS_COMPILE",
            "KILN_CUDA_ARCHS",
            "KILN_REMOTE_CACHE",
            "KILN_SIGNING_KEY",
            "KILN_TRUSTED_KEYS",
            "KILN_DEMO_ARCHS",
        ] {
            command.env_remove(name);
        }
        for (name, value) in &self.vars {
            command.env(name, value);
        }
        command
    }

    /// Builds (the dependencies too), untimed.
    fn warm(&self) -> Result<(), String> {
        let mut build = self.cargo(&["build", "--release", "--offline"]);
        if let Some(package) = self.package {
            build.args(["-p", package]);
        }
        run(build)
    }

    /// Cleans the libraries, then times a build of them.
    fn measure(&self) -> Result<Figures, String> {
        let mut clean = self.cargo(&["clean", "--release", "--offline"]);
        for library in &self.libraries {
            clean.args(["-p", library]);
        }
        run(clean)?;
        let mut build = self.cargo(&["build", "--release", "--offline"]);
        if let Some(package) = self.package {
            build.args(["-p", package]);
        }
        let started = Instant::now();
        run(build)?;
        let mut figures = Figures {
            wall: started.elapsed(),
            ..Figures::default()
        };
        for library in &self.libraries {
            let line = summary(&self.target, library)?;
            add(&mut figures, &line)?;
        }
        Ok(figures)
    }
}

fn run(mut command: Command) -> Result<(), String> {
    let output = command.output().map_err(|e| format!("cargo: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed:\n{}",
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// The summary line of `library`'s latest build-script run.
fn summary(target: &Path, library: &str) -> Result<String, String> {
    let output = library::build_script_output(&target.join("release/build"), library)
        .map_err(|e| e.to_string())?;
    library::summary_line(&output, library)
        .map(str::to_owned)
        .ok_or_else(|| format!("no summary line of {library} in its build-script output"))
}

/// Adds one summary line (`kiln: NAME: N entries (A from shipped, B from
/// disk, C compiled, 0 missing, 0 failed) into PATH in 0.4s`).
fn add(figures: &mut Figures, line: &str) -> Result<(), String> {
    let bad = || format!("not a summary line: {line}");
    let (head, rest) = line.split_once(" entries (").ok_or_else(bad)?;
    let entries: u64 = head
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(bad)?;
    let (counts, tail) = rest.split_once(") into ").ok_or_else(bad)?;
    for part in counts.split(", ") {
        let (n, what) = part.split_once(' ').ok_or_else(bad)?;
        let n: u64 = n.parse().map_err(|_| bad())?;
        if what == "compiled" {
            figures.compiles += n;
        } else if let Some(tier) = what.strip_prefix("from ") {
            match figures.from.iter_mut().find(|(t, _)| t == tier) {
                Some((_, sum)) => *sum += n,
                None => figures.from.push((tier.to_owned(), n)),
            }
        }
    }
    figures.entries += entries;
    let time = tail.rsplit(" in ").next().ok_or_else(bad)?;
    figures.block += parse_duration(time).ok_or_else(bad)?;
    Ok(())
}

/// `412.3ms`, `1.2s`, `17.0µs` (Rust's `{:.1?}` of a `Duration`).
fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let (number, scale) = [("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9), ("s", 1.0)]
        .iter()
        .find_map(|(unit, scale)| Some((text.strip_suffix(unit)?, *scale)))?;
    Some(Duration::from_secs_f64(number.parse::<f64>().ok()? * scale))
}

/// A library's shipped image: its entries and sizes.
struct ShippedSize {
    name: String,
    entries: usize,
    raw: u64,
    shipped: u64,
}

impl ShippedSize {
    fn per_entry(&self) -> f64 {
        self.shipped as f64 / self.entries.max(1) as f64
    }

    /// How many (kernel, arch) entries of this size fit in a 10 MiB package.
    fn fit_in_10_mib(&self) -> u64 {
        (10.0 * 1024.0 * 1024.0 / self.per_entry().max(1.0)) as u64
    }
}

/// The demo libraries' shipped images in the repository.
fn shipped_sizes(repo: &Path) -> Result<Vec<ShippedSize>, String> {
    ["kiln-kernels-demo", "kiln-activations-demo"]
        .iter()
        .map(|name| {
            let path = repo
                .join("examples")
                .join(name)
                .join("kiln-shipped")
                .join(format!("{name}.kship"));
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            let shipped = kiln_ship::Shipped::from_bytes(&bytes).map_err(|e| e.to_string())?;
            let raw = kiln_ship::ShippedFile::parse(&bytes)
                .map_err(|e| e.to_string())?
                .raw_len();
            Ok(ShippedSize {
                name: (*name).to_owned(),
                entries: shipped.entries().len(),
                raw,
                shipped: bytes.len() as u64,
            })
        })
        .collect()
}

/// The demo application's stripped size with everything shipped embedded
/// (compressed, the default, and plain), and with `KILN_CUDA_ARCHS=sm_90`
/// (one GPU generation).
fn binary_sizes(demo: &Build, scratch: &Path) -> Result<Vec<(String, u64)>, String> {
    let mut sizes = Vec::new();
    for (what, var) in [
        ("every shipped arch (7 + PTX), compressed", None),
        (
            "every shipped arch (7 + PTX), KILN_EMBED=plain",
            Some(("KILN_EMBED", "plain")),
        ),
        (
            "KILN_CUDA_ARCHS=sm_90, compressed",
            Some(("KILN_CUDA_ARCHS", "sm_90")),
        ),
    ] {
        let build = match var {
            Some((name, value)) => demo.clone().var(name, value),
            None => demo.clone(),
        };
        build.measure()?;
        let binary = demo.target.join("release/kiln-demo-app");
        let copy = scratch.join("kiln-demo-app.stripped");
        std::fs::copy(&binary, &copy).map_err(|e| format!("{}: {e}", binary.display()))?;
        run({
            let mut strip = Command::new("strip");
            strip.arg(&copy);
            strip
        })?;
        let bytes = std::fs::metadata(&copy).map_err(|e| e.to_string())?.len();
        sizes.push((what.to_owned(), bytes));
    }
    Ok(sizes)
}

/// Prints a scenario's figures and keeps them for the JSON.
fn row(rows: &mut Vec<(String, Figures)>, name: &str, figures: Figures) {
    println!(
        "{name:<44} {:>4} compiles {:>8.2} s build scripts {:>8.1} s cargo build  {:?}",
        figures.compiles,
        figures.block.as_secs_f64(),
        figures.wall.as_secs_f64(),
        figures.from
    );
    rows.push((name.to_owned(), figures));
}

fn median(mut runs: Vec<Figures>) -> Figures {
    runs.sort_by_key(|f| f.block);
    runs.swap_remove(runs.len() / 2)
}

/// A copy of `examples/kiln-activations-demo` without its shipped image,
/// as a workspace of its own in `dir`; its build script links the remote
/// tier.
fn library_copy(repo: &Path, dir: &Path) -> Result<(), String> {
    library::copy_library(repo, dir)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

fn edit_relu(dir: &Path, variant: usize) -> Result<(), String> {
    library::edit_relu(dir, variant as u32).map_err(|e| e.to_string())
}

fn main() -> Result<(), String> {
    let cli = Cli::parse();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .ok_or("no repository")?
        .to_path_buf();
    let scratch = cli
        .scratch
        .clone()
        .unwrap_or_else(|| repo.join("target/bench-builds"));
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    let runs = cli.runs.max(1);
    let mut rows: Vec<(String, Figures)> = Vec::new();
    let measure = |rows: &mut Vec<(String, Figures)>,
                   name: &str,
                   build: &Build,
                   n: usize|
     -> Result<(), String> {
        let figures = median((0..n).map(|_| build.measure()).collect::<Result<_, _>>()?);
        row(rows, name, figures);
        Ok(())
    };

    // The demo application: its two libraries' build scripts.
    let demo = Build {
        dir: repo.clone(),
        package: Some("kiln-demo-app"),
        libraries: vec!["kiln-kernels-demo", "kiln-activations-demo"],
        target: scratch.join("demo-target"),
        vars: Vec::new(),
    };
    demo.warm()?;
    let warm_cache = scratch.join("demo-warm-cache");
    let _ = std::fs::remove_dir_all(&warm_cache);
    let shipped = demo.clone().var("KILN_CACHE", "0");
    measure(&mut rows, "demo libraries, shipped images", &shipped, runs)?;
    let compiling = shipped.var("KILN_IGNORE_SHIPPED", "1");
    measure(
        &mut rows,
        "demo libraries, compiling, no cache",
        &compiling,
        runs.min(2),
    )?;
    let warm = Build {
        vars: vec![
            ("KILN_IGNORE_SHIPPED", "1".into()),
            ("KILN_CACHE_DIR", warm_cache.clone().into()),
        ],
        ..compiling
    };
    warm.measure()?; // fills the disk cache
    measure(
        &mut rows,
        "demo libraries, compiling, warm disk cache",
        &warm,
        runs,
    )?;

    // What an application embeds: every shipped arch, or one GPU's.
    let sizes = binary_sizes(&demo, &scratch)?;

    // One library edited in one kernel (relu, f32 and f64), warm disk cache.
    let library = scratch.join("library");
    library_copy(&repo, &library)?;
    let edit_cache = scratch.join("edit-cache");
    let _ = std::fs::remove_dir_all(&edit_cache);
    let author = Build {
        dir: library.clone(),
        package: None,
        libraries: vec!["kiln-activations-demo"],
        target: scratch.join("library-target"),
        vars: vec![("KILN_CACHE_DIR", edit_cache.into())],
    };
    author.warm()?;
    let mut edits = Vec::new();
    for variant in 0..runs {
        library_copy(&repo, &library)?;
        author.measure()?;
        edit_relu(&library, variant)?;
        edits.push(author.measure()?);
    }
    row(
        &mut rows,
        "one kernel edited (2 dtypes x 7 targets)",
        median(edits),
    );

    // A build farm: the second builder of a shared, signed Redis cache.
    if let Some(redis) = kiln_test_support::redis_server::RedisServer::start() {
        library_copy(&repo, &library)?;
        let key = scratch.join("farm.key");
        std::fs::write(&key, format!("{}\n", "5a".repeat(32))).map_err(|e| e.to_string())?;
        set_private(&key)?;
        let public = scratch.join("farm.pub");
        let public_key = kiln_image::SigningKey::from_secret_bytes([0x5a; 32]).public_key();
        std::fs::write(&public, format!("{}\n", public_key.to_hex())).map_err(|e| e.to_string())?;
        let first_cache = scratch.join("farm-first-cache");
        let _ = std::fs::remove_dir_all(&first_cache);
        let first = Build {
            dir: library.clone(),
            package: None,
            libraries: vec!["kiln-activations-demo"],
            target: scratch.join("library-target"),
            vars: vec![
                ("KILN_CACHE_DIR", first_cache.into()),
                ("KILN_REMOTE_CACHE", redis.url().into()),
                ("KILN_SIGNING_KEY", key.into()),
            ],
        };
        first.measure()?;
        let second_target = scratch.join("farm-second-target");
        let second = Build {
            dir: library.clone(),
            package: None,
            libraries: vec!["kiln-activations-demo"],
            target: second_target,
            vars: vec![
                ("KILN_CACHE", "0".into()),
                ("KILN_REMOTE_CACHE", redis.url().into()),
                ("KILN_TRUSTED_KEYS", public.into()),
            ],
        };
        second.warm()?;
        measure(
            &mut rows,
            "farm: the second builder (Redis, signed)",
            &second,
            runs,
        )?;
    } else {
        println!("farm: skipped (no redis-server)");
    }

    let shipped = shipped_sizes(&repo)?;
    println!("\nshipped images (7 archs, CUBIN and PTX of every kernel, zstd -19):");
    for s in &shipped {
        println!(
            "  {:<24} {:>3} entries {:>10} bytes whole {:>8} bytes shipped: {:>6.0} bytes per kernel per arch, {:>6} fit in 10 MiB",
            s.name,
            s.entries,
            s.raw,
            s.shipped,
            s.per_entry(),
            s.fit_in_10_mib()
        );
    }
    println!("\ndemo application binary (release, stripped):");
    for (what, bytes) in &sizes {
        println!("  {what:<34} {bytes:>10} bytes");
    }

    if let Some(path) = &cli.json {
        let rows: Vec<_> = rows
            .iter()
            .map(|(name, f)| {
                json!({
                    "scenario": name,
                    "entries": f.entries,
                    "compiles": f.compiles,
                    "build_scripts_s": f.block.as_secs_f64(),
                    "cargo_build_s": f.wall.as_secs_f64(),
                    "from": f.from.iter().map(|(t, n)| json!({"tier": t, "entries": n})).collect::<Vec<_>>(),
                })
            })
            .collect();
        let shipped: Vec<_> = shipped
            .iter()
            .map(|s| {
                json!({
                    "library": s.name,
                    "entries": s.entries,
                    "whole_bytes": s.raw,
                    "shipped_bytes": s.shipped,
                    "shipped_bytes_per_entry": s.per_entry(),
                    "entries_in_10_mib": s.fit_in_10_mib(),
                })
            })
            .collect();
        let sizes: Vec<_> = sizes
            .iter()
            .map(|(what, bytes)| json!({ "binary": what, "bytes": bytes }))
            .collect();
        let text = serde_json::to_string_pretty(&json!({
            "runs": runs,
            "scenarios": rows,
            "shipped": shipped,
            "binaries": sizes,
        }))
        .map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(unix)]
fn set_private(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| e.to_string())
}
