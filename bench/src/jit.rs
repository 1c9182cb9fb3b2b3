//! `jit`: what serving a real-size PTX entry costs a fresh process on a GPU,
//! with the driver alone and with Kiln's JIT cache (the driver's CUBIN kept as
//! an entry of its own, see `kiln::cuda::loader`).
//!
//! The library of [`large`] is served as PTX (it ships `sm_80`
//! only). Each scenario runs fresh processes; each child gets its kernel from
//! `KernelLibrary::get`, loads the module through a `ModuleCache`, asks for one
//! kernel (or every kernel), launches [`AXPY`] on 1M elements and checks it:
//!
//! - `driver-whole`: nothing kept, whole module: what every process pays today
//!   (the driver's own cache off, `CUDA_CACHE_DISABLE=1`, as in a new container);
//! - `driver-one`: nothing kept, only the kernel used, extracted from the PTX;
//! - `first`, `second-process`, `second-machine` (per kernel) and the same with
//!   `-whole` (whole module): a first process with a fresh disk cache and a
//!   remote tier on a loopback `redis-server` (signing its stores); a second
//!   process on the same disk cache; a "second machine", a process with a
//!   fresh disk cache and the same remote tier (trusting the signing key);
//! - `first-all`, `second-process-all`: every kernel asked for, one at a time.
//!
//! Each run of a `first` scenario uses its own Redis database, so no run sees
//! another's entries.

use std::ffi::OsString;
use std::fmt::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use cudarc::driver::{LaunchConfig, PushKernelArg};
use kiln::cuda::loader::{self, ModuleCache};
use serde::{Deserialize, Serialize};

use crate::child::nanos;
use crate::error::BenchError;
use crate::large::{self, AXPY, Large};
use crate::report::median;

/// Elements of the checked launch.
const N: usize = 1 << 20;

/// Where the JIT-compiled CUBINs go.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Keep {
    /// The global cache and its tiers (Kiln's default).
    Global,
    /// Nowhere: the driver JIT-compiles in every process.
    None,
}

/// How the PTX is JIT-compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    /// One kernel at a time (Kiln's default).
    PerKernel,
    /// The whole module at once.
    Whole,
}

/// Which kernels a child asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernels {
    /// The one it launches.
    One,
    /// Every kernel of the module.
    All,
}

/// One fresh process.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JitMeasurement {
    /// The scenario (set by the driver).
    #[serde(default)]
    pub scenario: String,
    /// How the child was set up.
    pub keep: Keep,
    /// How the PTX was compiled.
    pub split: Split,
    /// How many kernels it asked for.
    pub kernels: usize,
    /// The device.
    pub device: String,
    /// The driver release the CUBINs are kept under, if known.
    pub driver_release: Option<String>,
    /// How the library served the kernel (`ptx` expected).
    pub selection: String,
    /// How the loader compiled it (`None`, `WholeModule`, `PerKernel`).
    pub jit: String,
    /// Opening the context, ns.
    pub context_ns: u64,
    /// `KernelLibrary::get` (the global cache's init included), ns.
    pub get_ns: u64,
    /// Module load and every function asked for (JIT or JIT cache), ns.
    pub load_ns: u64,
    /// Copies, launch, copy back, ns.
    pub launch_ns: u64,
    /// From `main` to the checked launch, ns.
    pub total_ns: u64,
    /// Waiting for the background stores to the tiers after that, ns.
    pub flush_ns: u64,
    /// Driver JIT compiles in this process (the cache's compiles).
    pub links: u64,
    /// Entries loaded from the disk or remote tier.
    pub tier_hits: u64,
    /// Entries refused by a tier as untrusted.
    pub tier_untrusted: u64,
}

/// The child: serve, load, launch and check (see the module documentation).
///
/// # Errors
/// Any failure, the check included.
pub fn measure(
    started: Instant,
    fixture: &Path,
    keep: Keep,
    split: Split,
    kernels: Kernels,
) -> Result<JitMeasurement, BenchError> {
    let gpu_error = |what: &str, err: &dyn std::fmt::Display| BenchError::Gpu {
        what: what.to_owned(),
        reason: err.to_string(),
    };
    let clock = Instant::now();
    let ctx = loader::context(0)?;
    let device_name = ctx.name().map_err(|e| gpu_error("device name", &e))?;
    let device = loader::device(&ctx)?;
    let context = clock.elapsed();

    let clock = Instant::now();
    let library = large::library(fixture)?;
    let cache = kiln::global();
    let served = library.get(cache, &device, &Large)?;
    let get = clock.elapsed();

    let clock = Instant::now();
    let mut modules = ModuleCache::new();
    if keep == Keep::None {
        modules = modules.without_jit_cache();
    }
    if split == Split::Whole {
        modules = modules.whole_modules();
    }
    let module = modules.load_served(&ctx, &served)?;
    let asked: Vec<String> = match kernels {
        Kernels::One => vec![AXPY.to_owned()],
        Kernels::All => large::name_expressions(),
    };
    let mut axpy = None;
    for name in &asked {
        let function = module.function(name)?;
        if name == AXPY {
            axpy = Some(function);
        }
    }
    let axpy =
        axpy.ok_or_else(|| gpu_error("kernels", &"the launched kernel was not asked for"))?;
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
    let mut launch = stream.launch_builder(&axpy);
    launch.arg(&n).arg(&a).arg(&x).arg(&mut y);
    // SAFETY: the arguments match `large_axpy<float>(int, float, const float*,
    // float*)` and both buffers hold `N` elements.
    unsafe { launch.launch(LaunchConfig::for_num_elems(N as u32)) }
        .map_err(|e| gpu_error("launching", &e))?;
    let got = stream
        .clone_dtoh(&y)
        .map_err(|e| gpu_error("copying y back", &e))?;
    let launched = clock.elapsed();
    let total = started.elapsed();
    let want: Vec<f32> = x_host.iter().zip(&y_host).map(|(x, y)| a * x + y).collect();
    if got != want {
        return Err(gpu_error(
            "checking",
            &"the result differs from the CPU reference",
        ));
    }
    let clock = Instant::now();
    cache.flush();
    let flush = clock.elapsed();
    let stats = cache.stats();
    Ok(JitMeasurement {
        scenario: String::new(),
        keep,
        split,
        kernels: asked.len(),
        device: device_name,
        driver_release: loader::driver_release(&ctx),
        selection: served.selection().to_string(),
        jit: format!("{:?}", module.jit()),
        context_ns: nanos(context),
        get_ns: nanos(get),
        load_ns: nanos(load),
        launch_ns: nanos(launched),
        total_ns: nanos(total),
        flush_ns: nanos(flush),
        links: stats.compiles,
        tier_hits: stats.hits_tier,
        tier_untrusted: stats.tier_untrusted,
    })
}

/// What `kiln-bench jit` needs.
#[derive(Debug)]
pub struct JitPlan {
    /// The fixture folder (`large.kimg`, `large.record`).
    pub fixture: PathBuf,
    /// The `redis-server` to start.
    pub redis_server: PathBuf,
    /// The signing key (a `kiln keygen` file) and its `.pub`.
    pub signing_key: PathBuf,
    /// Runs of the cheap scenarios.
    pub runs: usize,
    /// Runs of the scenarios that JIT-compile the whole module.
    pub whole_runs: usize,
    /// Where the cache folders go.
    pub work: PathBuf,
    /// Where `jit.json` goes, rewritten after every run (a run stopped
    /// midway keeps what it measured).
    pub json: PathBuf,
}

/// Per scenario: runs, and the medians and minimums.
#[derive(Clone, Debug, Serialize)]
pub struct JitSummary {
    /// The device.
    pub device: String,
    /// The driver release.
    pub driver_release: Option<String>,
    /// Kernels in the module.
    pub module_kernels: usize,
    /// (scenario, runs, total median ms, total min ms, load median ms, load min ms).
    pub scenarios: Vec<(String, usize, f64, f64, f64, f64)>,
    /// Every run.
    pub runs: Vec<JitMeasurement>,
    /// The runs that failed: (scenario, why). The others still ran.
    pub failures: Vec<(String, String)>,
}

/// A `redis-server` on a free loopback port, killed on drop.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    fn start(server: &Path, dir: &Path) -> Result<Redis, BenchError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .map_err(BenchError::io("127.0.0.1:0"))?
            .port();
        let child = Command::new(server)
            .args(["--bind", "127.0.0.1", "--port", &port.to_string()])
            .args(["--save", "", "--appendonly", "no", "--databases", "64"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .map_err(BenchError::io(server))?;
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                return Err(BenchError::Gpu {
                    what: "redis-server".to_owned(),
                    reason: format!("not listening on port {port} after 20 s"),
                });
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(redis)
    }

    fn url(&self, db: usize) -> String {
        format!("redis://127.0.0.1:{}/{db}", self.port)
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One child's setup.
struct Setup<'a> {
    scenario: &'a str,
    keep: Keep,
    split: Split,
    kernels: Kernels,
    cache_dir: Option<&'a Path>,
    remote: Option<(String, Role)>,
}

#[derive(Clone, Copy)]
enum Role {
    Writer,
    Reader,
}

/// Runs every scenario (see the module documentation).
///
/// # Errors
/// When a child fails or the server does not start.
pub fn run(plan: &JitPlan) -> Result<JitSummary, BenchError> {
    std::fs::create_dir_all(&plan.work).map_err(BenchError::io(&plan.work))?;
    let redis = Redis::start(&plan.redis_server, &plan.work)?;
    let mut public = plan.signing_key.clone().into_os_string();
    public.push(".pub");
    let public = PathBuf::from(public);
    let mut runs: Vec<JitMeasurement> = Vec::new();
    let mut failures: Vec<(String, String)> = Vec::new();
    let mut db = 0usize;
    let fresh = |name: &str| -> Result<PathBuf, BenchError> {
        let dir = plan.work.join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(BenchError::io(&dir))?;
        Ok(dir)
    };
    // A failed run is reported and the others go on: one scenario's failure
    // must not hide the figures of the others.
    let mut child = |setup: Setup<'_>| -> Result<(), BenchError> {
        let mut m = match spawn(plan, &setup, &public) {
            Ok(m) => m,
            Err(error) => {
                eprintln!("kiln-bench jit: {} FAILED: {error}", setup.scenario);
                failures.push((setup.scenario.to_owned(), error.to_string()));
                return write_json(&plan.json, &summarize(runs.clone(), failures.clone()));
            }
        };
        m.scenario = setup.scenario.to_owned();
        eprintln!(
            "kiln-bench jit: {:<22} total {:>9.1} ms, load {:>9.1} ms, links {}, tier hits {}",
            m.scenario,
            m.total_ns as f64 / 1e6,
            m.load_ns as f64 / 1e6,
            m.links,
            m.tier_hits
        );
        runs.push(m);
        write_json(&plan.json, &summarize(runs.clone(), failures.clone()))
    };
    // The driver alone, every process: what serving PTX costs today.
    for _ in 0..plan.whole_runs {
        child(Setup {
            scenario: "driver-whole",
            keep: Keep::None,
            split: Split::Whole,
            kernels: Kernels::One,
            cache_dir: None,
            remote: None,
        })?;
    }
    // Kept: first process, second process, second machine; one kernel, then
    // the whole module, then every kernel one at a time.
    let shapes = [
        ("", Split::PerKernel, Kernels::One, plan.runs),
        ("-whole", Split::Whole, Kernels::One, plan.whole_runs),
        (
            "-all",
            Split::PerKernel,
            Kernels::All,
            plan.whole_runs.min(2),
        ),
    ];
    for (at, (suffix, split, kernels, count)) in shapes.into_iter().enumerate() {
        for _ in 0..count {
            db = (db + 1) % 64;
            let url = redis.url(db);
            let machine_a = fresh("machine-a")?;
            let machine_b = fresh("machine-b")?;
            for (scenario, dir, role) in [
                ("first", &machine_a, Role::Writer),
                ("second-process", &machine_a, Role::Reader),
                ("second-machine", &machine_b, Role::Reader),
            ] {
                if suffix == "-all" && scenario == "second-machine" {
                    continue;
                }
                child(Setup {
                    scenario: &format!("{scenario}{suffix}"),
                    keep: Keep::Global,
                    split,
                    kernels,
                    cache_dir: Some(dir),
                    remote: Some((url.clone(), role)),
                })?;
            }
        }
        if at == 0 {
            // Only the kernel used, extracted, with nothing kept.
            for _ in 0..plan.runs {
                child(Setup {
                    scenario: "driver-one",
                    keep: Keep::None,
                    split: Split::PerKernel,
                    kernels: Kernels::One,
                    cache_dir: None,
                    remote: None,
                })?;
            }
        }
    }
    drop(redis);
    let summary = summarize(runs, failures);
    write_json(&plan.json, &summary)?;
    Ok(summary)
}

fn spawn(plan: &JitPlan, setup: &Setup<'_>, public: &Path) -> Result<JitMeasurement, BenchError> {
    fn name(value: &impl clap::ValueEnum) -> String {
        value
            .to_possible_value()
            .map(|v| v.get_name().to_owned())
            .unwrap_or_default()
    }
    let args: Vec<OsString> = vec![
        "jit-child".into(),
        "--fixture".into(),
        plan.fixture.clone().into(),
        "--keep".into(),
        name(&setup.keep).into(),
        "--split".into(),
        name(&setup.split).into(),
        "--kernels".into(),
        name(&setup.kernels).into(),
    ];
    // The folder holds one image, the library's (signed by the fleet's key:
    // a reader that trusts keys merges only signed image files).
    let mut vars: Vec<(&str, PathBuf)> = vec![("KILN_IMAGE_PATH", plan.fixture.clone())];
    match setup.cache_dir {
        Some(dir) => vars.push(("KILN_CACHE_DIR", dir.to_path_buf())),
        None => vars.push(("KILN_CACHE", PathBuf::from("0"))),
    }
    if let Some((url, role)) = &setup.remote {
        vars.push(("KILN_REMOTE_CACHE", PathBuf::from(url)));
        vars.push(("KILN_TRUSTED_KEYS", public.to_path_buf()));
        if let Role::Writer = role {
            vars.push(("KILN_SIGNING_KEY", plan.signing_key.clone()));
        }
    }
    crate::driver::spawn(&args, crate::mode::Env::Developer, &vars)
}

fn summarize(runs: Vec<JitMeasurement>, failures: Vec<(String, String)>) -> JitSummary {
    let mut names: Vec<String> = Vec::new();
    for m in &runs {
        if !names.contains(&m.scenario) {
            names.push(m.scenario.clone());
        }
    }
    let ms = |values: Vec<u64>| -> (f64, f64) {
        let min = values.iter().copied().min().unwrap_or(0) as f64 / 1e6;
        (median(&values).unwrap_or(0.0) / 1e6, min)
    };
    let scenarios = names
        .iter()
        .map(|name| {
            let of: Vec<&JitMeasurement> = runs.iter().filter(|m| &m.scenario == name).collect();
            let (total, total_min) = ms(of.iter().map(|m| m.total_ns).collect());
            let (load, load_min) = ms(of.iter().map(|m| m.load_ns).collect());
            (name.clone(), of.len(), total, total_min, load, load_min)
        })
        .collect();
    JitSummary {
        device: runs.first().map(|m| m.device.clone()).unwrap_or_default(),
        driver_release: runs.iter().find_map(|m| m.driver_release.clone()),
        module_kernels: large::KERNELS,
        scenarios,
        runs,
        failures,
    }
}

fn write_json(path: &Path, summary: &JitSummary) -> Result<(), BenchError> {
    let json = serde_json::to_string_pretty(summary).map_err(|err| BenchError::Encode {
        what: "jit.json",
        reason: err.to_string(),
    })?;
    std::fs::write(path, json).map_err(BenchError::io(path))
}

impl JitSummary {
    /// A Markdown table.
    pub fn table(&self) -> String {
        let mut out = format!(
            "PTX entry of {} kernels served on {} (driver {}): fresh processes, main → checked launch\n\n\
             | scenario | runs | total ms median (min) | load + JIT ms median (min) | JIT compiles | tier hits |\n|---|--:|--:|--:|--:|--:|\n",
            self.module_kernels,
            self.device,
            self.driver_release.as_deref().unwrap_or("unknown")
        );
        for (name, runs, total, total_min, load, load_min) in &self.scenarios {
            let of = self.runs.iter().filter(|m| &m.scenario == name);
            let links: Vec<String> = {
                let mut all: Vec<u64> = of.clone().map(|m| m.links).collect();
                all.dedup();
                all.iter().map(u64::to_string).collect()
            };
            let hits: Vec<String> = {
                let mut all: Vec<u64> = of.map(|m| m.tier_hits).collect();
                all.dedup();
                all.iter().map(u64::to_string).collect()
            };
            let _ = writeln!(
                out,
                "| {name} | {runs} | {total:.1} ({total_min:.1}) | {load:.1} ({load_min:.1}) | {} | {} |",
                links.join("/"),
                hits.join("/")
            );
        }
        for (scenario, why) in &self.failures {
            let _ = writeln!(out, "\nFAILED {scenario}: {why}");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(scenario: &str, total_ms: u64, load_ms: u64, links: u64) -> JitMeasurement {
        JitMeasurement {
            scenario: scenario.to_owned(),
            keep: Keep::Global,
            split: Split::PerKernel,
            kernels: 1,
            device: "GPU".to_owned(),
            driver_release: Some("580.159.04".to_owned()),
            selection: "ptx".to_owned(),
            jit: "PerKernel".to_owned(),
            context_ns: 0,
            get_ns: 0,
            load_ns: load_ms * 1_000_000,
            launch_ns: 0,
            total_ns: total_ms * 1_000_000,
            flush_ns: 0,
            links,
            tier_hits: 1 - links,
            tier_untrusted: 0,
        }
    }

    #[test]
    fn scenarios_keep_their_order_with_medians_and_minimums() {
        let summary = summarize(
            vec![
                run("first", 300, 100, 1),
                run("second-process", 260, 16, 0),
                run("first", 340, 70, 1),
                run("first", 320, 90, 1),
            ],
            vec![("second-machine".to_owned(), "refused".to_owned())],
        );
        let names: Vec<&str> = summary.scenarios.iter().map(|s| s.0.as_str()).collect();
        assert_eq!(names, ["first", "second-process"]);
        let (_, runs, total, total_min, load, load_min) = &summary.scenarios[0];
        assert_eq!((*runs, *total, *total_min), (3, 320.0, 300.0));
        assert_eq!((*load, *load_min), (90.0, 70.0));
        let table = summary.table();
        assert!(
            table.contains("| first | 3 | 320.0 (300.0) | 90.0 (70.0) | 1 | 0 |"),
            "{table}"
        );
        assert!(table.contains("FAILED second-machine: refused"), "{table}");
        assert!(table.contains("driver 580.159.04"));
    }
}
