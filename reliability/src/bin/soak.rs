//! `kiln-soak`: a long-running service's load on the global cache, with a
//! small memory cap and a small disk cap, checked byte for byte.
//!
//! ```text
//! kiln-soak [--seconds N] [--processes P] [--threads T]
//!           [--memory-max SIZE] [--disk-max SIZE] [--dir DIR]
//!           [--new-percent P] [--new-keys N] [--payload-max SIZE]
//! ```
//!
//! The parent writes an image of [`IMAGE_KEYS`] specializations (as a
//! library would ship them) into `DIR/images`, then starts `P` processes of
//! itself that share `DIR/cache`, each with `KILN_CACHE_DIR`,
//! `KILN_IMAGE_PATH`, `KILN_MEMORY_MAX_BYTES` and `KILN_CACHE_MAX_BYTES`
//! set, so that every process uses `kiln_core::global()` exactly as a
//! service would. Each runs `T` threads for `N` seconds, each asking for a
//! stream of specializations through `get_or_compile`: new ones never
//! asked before (`--new-percent`, 20 % by default; a process stops after
//! `--new-keys` of them, if given), a hot set shared by all processes
//! (larger than the memory cap), a warm set (larger than the disk cap), and
//! the image's. The compiler is [`kiln_reliability::soak::PayloadSizes`]
//! (payloads of 16 to 200 KiB, or up to `--payload-max`): every answer is
//! checked against the payload its key must produce.
//!
//! Each process samples its resident memory (RSS) five times a second,
//! with the cache's entries held and allocated, and checks every sample
//! against [`kiln_reliability::soak::rss_bound`] (the caps' payloads, a
//! stated bound per entry allocated, a fixed overhead). It prints its
//! samples and one `RESULT` line; the parent sums them, checks the disk
//! cache afterwards (every segment verified in full, its size against the
//! cap), prints a Markdown table, each process's RSS over time and a
//! `RESULT` line, and exits 1 if any answer was an error or wrong, or a
//! process's RSS passed its bound.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::{Cache, CacheConfig, Source};
use kiln_image::{Digest, ImageMeta};
use kiln_reliability::soak::{self, Figures, PayloadSizes};
use kiln_reliability::{Error, Rng, Table};

/// Specializations shipped in the image.
const IMAGE_KEYS: u64 = 24;
/// Specializations every process asks for again and again (about 6.5 MiB
/// of payloads: more than the default 4 MiB memory cap).
const HOT_KEYS: u64 = 64;
/// Specializations asked for now and then (about 50 MiB: more than the
/// default 8 MiB disk cap).
const WARM_KEYS: u64 = 512;
/// Key spaces: image keys, then hot, then warm, then each process's new ones.
const HOT_BASE: u64 = 1 << 20;
const WARM_BASE: u64 = 2 << 20;
const NEW_BASE: u64 = 1 << 32;

struct Options {
    seconds: u64,
    processes: usize,
    threads: usize,
    memory_max: String,
    disk_max: String,
    dir: Option<PathBuf>,
    child: Option<u64>,
    new_percent: u64,
    new_keys: Option<u64>,
    payload_max: Option<String>,
}

impl Options {
    fn sizes(&self) -> Result<PayloadSizes, Error> {
        match &self.payload_max {
            None => Ok(PayloadSizes::DEFAULT),
            Some(text) => {
                let max = parse_size("--payload-max", text)?;
                Ok(PayloadSizes::up_to(
                    usize::try_from(max).unwrap_or(usize::MAX),
                ))
            }
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let outcome = options(&args).and_then(|options| match options.child {
        Some(id) => child(&options, id).map(|()| true),
        None => parent(&options),
    });
    match outcome {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(error) => {
            eprintln!("kiln-soak: {error}");
            std::process::exit(2);
        }
    }
}

fn options(args: &[String]) -> Result<Options, Error> {
    let mut options = Options {
        seconds: 120,
        processes: 3,
        threads: 4,
        memory_max: "4M".into(),
        disk_max: "8M".into(),
        dir: None,
        child: None,
        new_percent: 20,
        new_keys: None,
        payload_max: None,
    };
    let mut args = args.iter();
    while let Some(flag) = args.next() {
        let mut value = || {
            args.next()
                .cloned()
                .ok_or_else(|| Error::Child(format!("{flag} needs a value")))
        };
        let number = |text: String| {
            text.parse::<u64>()
                .map_err(|_| Error::Child(format!("{flag} takes a number, not {text:?}")))
        };
        match flag.as_str() {
            "--seconds" => options.seconds = number(value()?)?,
            "--processes" => options.processes = number(value()?)? as usize,
            "--threads" => options.threads = number(value()?)? as usize,
            "--memory-max" => options.memory_max = value()?,
            "--disk-max" => options.disk_max = value()?,
            "--dir" => options.dir = Some(PathBuf::from(value()?)),
            "--child" => options.child = Some(number(value()?)?),
            "--new-percent" => options.new_percent = number(value()?)?.min(100),
            "--new-keys" => options.new_keys = Some(number(value()?)?),
            "--payload-max" => options.payload_max = Some(value()?),
            other => {
                return Err(Error::Child(format!(
                    "unknown argument {other:?}: --seconds N --processes P --threads T \
                     --memory-max SIZE --disk-max SIZE --dir DIR --new-percent P \
                     --new-keys N --payload-max SIZE"
                )));
            }
        }
    }
    options.sizes()?;
    Ok(options)
}

fn parse_size(flag: &str, text: &str) -> Result<u64, Error> {
    kiln_core::disk::config::parse_size(text)
        .ok_or_else(|| Error::Child(format!("{flag} takes a size (e.g. 4M), not {text:?}")))
}

// ----- the parent -----

fn parent(options: &Options) -> Result<bool, Error> {
    let memory_max = parse_size("--memory-max", &options.memory_max)?;
    let disk_max = parse_size("--disk-max", &options.disk_max)?;
    let temp;
    let root = match &options.dir {
        Some(dir) => dir.clone(),
        None => {
            temp = tempfile::tempdir().map_err(Error::io("create", std::env::temp_dir()))?;
            temp.path().to_path_buf()
        }
    };
    let (images, cache_dir) = (root.join("images"), root.join("cache"));
    std::fs::create_dir_all(&images).map_err(Error::io("create", &images))?;
    write_image(&images, options.sizes()?)?;

    let exe = std::env::current_exe().map_err(Error::io("find", "kiln-soak"))?;
    let started = Instant::now();
    let children: Vec<_> = (0..options.processes as u64)
        .map(|id| {
            let mut command = Command::new(&exe);
            command
                .args(["--child", &id.to_string()])
                .args(["--seconds", &options.seconds.to_string()])
                .args(["--threads", &options.threads.to_string()])
                .args(["--new-percent", &options.new_percent.to_string()])
                .args(["--disk-max", &options.disk_max])
                .args(["--memory-max", &options.memory_max]);
            if let Some(keys) = options.new_keys {
                command.args(["--new-keys", &keys.to_string()]);
            }
            if let Some(max) = &options.payload_max {
                command.args(["--payload-max", max]);
            }
            command
                .env("KILN_CACHE_DIR", &cache_dir)
                .env("KILN_IMAGE_PATH", &images)
                .env("KILN_MEMORY_MAX_BYTES", &options.memory_max)
                .env("KILN_CACHE_MAX_BYTES", &options.disk_max)
                .env("KILN_LOG", "info")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for switch in [
                "KILN_CACHE",
                "KILN_DISABLE",
                "KILN_ALWAYS_COMPILE",
                "KILN_REMOTE_CACHE",
            ] {
                command.env_remove(switch);
            }
            command.spawn().map_err(Error::io("start", &exe))
        })
        .collect::<Result<_, _>>()?;
    let mut total = Figures::default();
    let mut per_process = Vec::new();
    let mut samples = Vec::new();
    let mut failed = Vec::new();
    for (id, child) in children.into_iter().enumerate() {
        let output = child
            .wait_with_output()
            .map_err(Error::io("wait for", &exe))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        let stderr = String::from_utf8_lossy(&output.stderr);
        let result = stdout
            .lines()
            .rev()
            .find_map(|line| line.strip_prefix("RESULT "));
        match (output.status.success(), result) {
            (true, Some(line)) => {
                let figures = Figures::parse(line)?;
                total.add(&figures);
                per_process.push(figures);
                samples.push(
                    stdout
                        .lines()
                        .filter_map(|line| line.strip_prefix("SAMPLE "))
                        .map(Figures::parse)
                        .collect::<Result<Vec<_>, _>>()?,
                );
            }
            _ => failed.push(format!("process {id}: {}\n{stdout}{stderr}", output.status)),
        }
        // The process's own report at exit (KILN_LOG=info).
        for line in stderr.lines().filter(|l| l.starts_with("kiln: at exit")) {
            println!("process {id}: {line}");
        }
    }
    let elapsed = started.elapsed();
    if !failed.is_empty() {
        return Err(Error::Child(failed.join("\n")));
    }

    let disk = DiskCache::open(DiskConfig::new(&cache_dir))?;
    let verify = disk.verify()?;
    let stats = disk.stats()?;
    total.set("disk_bytes", stats.bytes);
    total.set("disk_entries", stats.entries as u64);
    total.set("disk_segments_bad", (!verify.is_clean()) as u64);

    let rss_peak_max = per_process
        .iter()
        .map(|f| f.get("rss_peak_kib"))
        .max()
        .unwrap_or(0);
    let rss_end_max = per_process
        .iter()
        .map(|f| f.get("rss_end_kib"))
        .max()
        .unwrap_or(0);
    let rss_start_max = per_process
        .iter()
        .map(|f| f.get("rss_start_kib"))
        .max()
        .unwrap_or(0);
    let largest_end = per_process
        .iter()
        .max_by_key(|f| f.get("rss_end_kib"))
        .cloned()
        .unwrap_or_default();
    let rss_q1_max = per_process
        .iter()
        .map(|f| f.get("rss_q1_kib"))
        .max()
        .unwrap_or(0);
    total.set("rss_peak_kib_max", rss_peak_max);
    total.set("rss_end_kib_max", rss_end_max);
    total.set("memory_max", memory_max);
    total.set("disk_max", disk_max);
    total.set("seconds", elapsed.as_secs());

    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20));
    let kib_mib = |kib: u64| mib(kib << 10);
    let mut table = Table::new(["figure", "value"]);
    table.row([
        "processes × threads, seconds".to_string(),
        format!(
            "{} × {}, {:.0} s",
            options.processes,
            options.threads,
            elapsed.as_secs_f64()
        ),
    ]);
    table.row([
        "memory cap / disk cap".to_string(),
        format!("{} / {}", mib(memory_max), mib(disk_max)),
    ]);
    table.row([
        "requests served".to_string(),
        total.get("requests").to_string(),
    ]);
    table.row([
        "answered from memory / image / disk / compiled".to_string(),
        format!(
            "{} / {} / {} / {}",
            total.get("memory"),
            total.get("image"),
            total.get("disk"),
            total.get("compiled")
        ),
    ]);
    table.row([
        "specializations: new (asked once) / shared sets".to_string(),
        format!(
            "{} / hot {HOT_KEYS}, warm {WARM_KEYS}, image {IMAGE_KEYS}",
            total.get("new")
        ),
    ]);
    table.row(["compiles".to_string(), total.get("compiles").to_string()]);
    table.row([
        "evictions (memory)".to_string(),
        total.get("evictions").to_string(),
    ]);
    table.row([
        "payload bytes held, peak (largest process) / at the end".to_string(),
        format!(
            "{} / {}",
            mib(total.get("peak_bytes_held")),
            mib(per_process
                .iter()
                .map(|f| f.get("bytes_held"))
                .max()
                .unwrap_or(0))
        ),
    ]);
    table.row([
        "RSS after init / after the first quarter / peak / at the end (largest process)"
            .to_string(),
        format!(
            "{} / {} / {} / {}",
            kib_mib(rss_start_max),
            kib_mib(rss_q1_max),
            kib_mib(rss_peak_max),
            kib_mib(rss_end_max)
        ),
    ]);
    table.row([
        "RSS at the end, anonymous / file-backed (that process)".to_string(),
        format!(
            "{} / {}",
            kib_mib(largest_end.get("rss_anon_end_kib")),
            kib_mib(largest_end.get("rss_file_end_kib"))
        ),
    ]);
    table.row([
        "stores done before exit / dropped (queue full) / failed".to_string(),
        format!(
            "{} / {} / {}",
            total.get("stores"),
            total.get("stores_dropped"),
            total.get("store_failures")
        ),
    ]);
    table.row([
        "disk cache after: size, entries, segments verified".to_string(),
        format!(
            "{}, {}, {} ({})",
            mib(stats.bytes),
            stats.entries,
            verify.segments.len(),
            if verify.is_clean() {
                "all clean"
            } else {
                "DAMAGED"
            }
        ),
    ]);
    table.row([
        "entries held / allocated, most (largest process)".to_string(),
        format!(
            "{} / {}",
            total.get("entries_max"),
            total.get("entries_alive_max")
        ),
    ]);
    table.row([
        "RSS samples over their bound (worst: RSS / bound)".to_string(),
        format!(
            "{} ({:.0} %)",
            total.get("rss_over_bound"),
            total.get("rss_bound_permille_max") as f64 / 10.0
        ),
    ]);
    table.row(["errors".to_string(), total.get("errors").to_string()]);
    table.row(["wrong bytes".to_string(), total.get("wrong").to_string()]);
    println!("\nSoak\n\n{table}");
    for (id, samples) in samples.iter().enumerate() {
        println!("\nProcess {id}: RSS over time\n\n{}", over_time(samples));
    }
    println!("RESULT {}", total.line());
    Ok(total.get("errors") == 0
        && total.get("wrong") == 0
        && total.get("rss_over_bound") == 0
        && verify.is_clean())
}

/// About a dozen of a process's samples, evenly spaced, the last included,
/// as a table.
fn over_time(samples: &[Figures]) -> Table {
    let mib = |bytes: u64| format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20));
    let mut table = Table::new([
        "seconds",
        "new keys",
        "entries held",
        "entries allocated",
        "payloads held",
        "RSS",
        "bound",
    ]);
    let step = samples.len().div_ceil(12).max(1);
    let last = samples.len().saturating_sub(1);
    for (n, sample) in samples.iter().enumerate() {
        if n % step != 0 && n != last {
            continue;
        }
        table.row([
            format!("{:.1}", sample.get("millis") as f64 / 1e3),
            sample.get("new").to_string(),
            sample.get("entries").to_string(),
            sample.get("alive").to_string(),
            mib(sample.get("held")),
            mib(sample.get("rss_kib") << 10),
            mib(sample.get("bound")),
        ]);
    }
    table
}

/// Writes the image of the specializations `0..IMAGE_KEYS`, as a library's
/// build script would.
fn write_image(dir: &Path, sizes: PayloadSizes) -> Result<(), Error> {
    let owner = soak::owner()?;
    let cache = Cache::with_config(CacheConfig::default().memory_max_bytes(None));
    let start = cache.snapshot();
    for id in 0..IMAGE_KEYS {
        let key = soak::key(id)?;
        cache.insert(&owner, &key, sizes.compile(&key));
    }
    cache
        .delta(&start)
        .write_image(&dir.join("soak.kimg"), ImageMeta::new("kiln-soak", "1"))?;
    Ok(())
}

// ----- a child process -----

/// Per-thread tallies.
#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    memory: AtomicU64,
    image: AtomicU64,
    disk: AtomicU64,
    compiled: AtomicU64,
    errors: AtomicU64,
    wrong: AtomicU64,
}

fn bump(counter: &AtomicU64) {
    counter.fetch_add(1, Ordering::Relaxed);
}

/// The resident set size of this process, in KiB.
fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            status.lines().find_map(|line| {
                line.strip_prefix(field)?
                    .trim()
                    .trim_end_matches("kB")
                    .trim()
                    .parse()
                    .ok()
            })
        })
        .unwrap_or(0)
}

/// One sample of a process's memory.
struct Sample {
    millis: u64,
    new: u64,
    entries: u64,
    alive: u64,
    held: u64,
    rss_kib: u64,
    bound: u64,
}

impl Sample {
    fn line(&self) -> String {
        let mut figures = Figures::default();
        figures.set("millis", self.millis);
        figures.set("new", self.new);
        figures.set("entries", self.entries);
        figures.set("alive", self.alive);
        figures.set("held", self.held);
        figures.set("rss_kib", self.rss_kib);
        figures.set("bound", self.bound);
        figures.line()
    }
}

fn child(options: &Options, id: u64) -> Result<(), Error> {
    let owner = soak::owner()?;
    let sizes = options.sizes()?;
    let memory_max = parse_size("--memory-max", &options.memory_max)?;
    let disk_max = parse_size("--disk-max", &options.disk_max)?;
    let cache = kiln_core::global();
    let started = Instant::now();
    let rss_start = rss_kib("VmRSS:");
    let deadline = started + Duration::from_secs(options.seconds);
    let quarter = started + Duration::from_secs(options.seconds) / 4;
    let tally = Tally::default();
    // What each key must produce, computed here from the compiler, never
    // from what the cache answered: (length, BLAKE3).
    let expected: Mutex<HashMap<u64, (usize, Digest)>> = Mutex::new(HashMap::new());
    let next_new = AtomicU64::new(0);
    let stop = AtomicBool::new(false);
    let rss_q1 = AtomicU64::new(0);
    let rss_peak = AtomicU64::new(rss_start);
    let samples: Mutex<Vec<Sample>> = Mutex::new(Vec::new());
    let new_limit = options.new_keys.unwrap_or(u64::MAX);
    let new_percent = options.new_percent;
    std::thread::scope(|scope| {
        // RSS sampler: every sample checked against the bound.
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                let now = rss_kib("VmRSS:");
                rss_peak.fetch_max(now, Ordering::Relaxed);
                if Instant::now() >= quarter && rss_q1.load(Ordering::Relaxed) == 0 {
                    rss_q1.store(now, Ordering::Relaxed);
                }
                let stats = cache.stats();
                let sample = Sample {
                    millis: started.elapsed().as_millis() as u64,
                    new: next_new.load(Ordering::Relaxed).min(new_limit),
                    entries: stats.memory_entries,
                    alive: stats.entries_alive,
                    held: stats.bytes_held,
                    rss_kib: now,
                    bound: soak::rss_bound(memory_max, disk_max, stats.entries_alive),
                };
                if let Ok(mut samples) = samples.lock() {
                    samples.push(sample);
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        let workers: Vec<_> = (0..options.threads as u64)
            .map(|t| {
                let (owner, tally, expected, next_new) = (&owner, &tally, &expected, &next_new);
                scope.spawn(move || {
                    let mut rng = Rng::new(id.wrapping_mul(0x9E37_79B9).wrapping_add(t));
                    while Instant::now() < deadline {
                        let draw = rng.below(100) as u64;
                        // The shares of the others keep their proportions
                        // (55 : 15 : 10 at the default 20 % new).
                        let rest =
                            (draw.saturating_sub(new_percent) * 80) / (100 - new_percent).max(1);
                        let spec = if draw < new_percent {
                            let n = next_new.fetch_add(1, Ordering::Relaxed);
                            if n >= new_limit {
                                break;
                            }
                            NEW_BASE * (id + 1) + n
                        } else if rest < 55 {
                            HOT_BASE + rng.below(HOT_KEYS as usize) as u64
                        } else if rest < 70 {
                            WARM_BASE + rng.below(WARM_KEYS as usize) as u64
                        } else {
                            rng.below(IMAGE_KEYS as usize) as u64
                        };
                        request(cache, owner, sizes, spec, tally, expected);
                    }
                })
            })
            .collect();
        for worker in workers {
            let _ = worker.join();
        }
        stop.store(true, Ordering::Relaxed);
    });
    let rss_end = rss_kib("VmRSS:");
    let rss_hwm = rss_kib("VmHWM:");
    let (rss_anon, rss_file) = (rss_kib("RssAnon:"), rss_kib("RssFile:"));
    let stats = cache.stats();
    let samples = samples.into_inner().unwrap_or_default();
    let over_bound = samples.iter().filter(|s| s.rss_kib << 10 > s.bound).count() as u64;
    let worst_permille = samples
        .iter()
        .map(|s| (s.rss_kib << 10).saturating_mul(1000) / s.bound.max(1))
        .max()
        .unwrap_or(0);
    let mut figures = Figures::default();
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    figures.set("requests", get(&tally.requests));
    figures.set("memory", get(&tally.memory));
    figures.set("image", get(&tally.image));
    figures.set("disk", get(&tally.disk));
    figures.set("compiled", get(&tally.compiled));
    figures.set("errors", get(&tally.errors));
    figures.set("wrong", get(&tally.wrong));
    figures.set("new", get(&next_new).min(new_limit));
    figures.set("compiles", stats.compiles);
    figures.set("evictions", stats.evictions);
    figures.set("bytes_held", stats.bytes_held);
    figures.set("peak_bytes_held", stats.peak_bytes_held);
    figures.set("stores", stats.stores);
    figures.set("stores_dropped", stats.stores_dropped);
    figures.set("store_failures", stats.store_failures);
    figures.set("rss_start_kib", rss_start);
    figures.set("rss_q1_kib", get(&rss_q1));
    figures.set("rss_peak_kib", get(&rss_peak).max(rss_hwm));
    figures.set("rss_end_kib", rss_end);
    figures.set("rss_anon_end_kib", rss_anon);
    figures.set("rss_file_end_kib", rss_file);
    figures.set("rss_over_bound", over_bound);
    figures.set("rss_bound_permille_max", worst_permille);
    figures.set(
        "entries_max",
        samples.iter().map(|s| s.entries).max().unwrap_or(0),
    );
    figures.set(
        "entries_alive_max",
        samples.iter().map(|s| s.alive).max().unwrap_or(0),
    );
    let mut out = std::io::stdout().lock();
    for sample in &samples {
        writeln!(out, "SAMPLE {}", sample.line()).map_err(Error::io("write to", "stdout"))?;
    }
    writeln!(out, "RESULT {}", figures.line())
        .and_then(|()| out.flush())
        .map_err(Error::io("write to", "stdout"))
}

/// One request: `get_or_compile` of specialization `spec`, its answer
/// checked against what the compiler produces for it.
fn request(
    cache: &Cache,
    owner: &kiln_core::Owner,
    sizes: PayloadSizes,
    spec: u64,
    tally: &Tally,
    expected: &Mutex<HashMap<u64, (usize, Digest)>>,
) {
    bump(&tally.requests);
    let Ok(key) = soak::key(spec) else {
        bump(&tally.errors);
        return;
    };
    let mut compiled = false;
    let answer = cache.get_or_compile(owner, &key, || {
        compiled = true;
        Ok(sizes.compile(&key))
    });
    let hit = match answer {
        Ok(hit) => hit,
        Err(error) => {
            eprintln!("kiln-soak: specialization {spec}: {error}");
            bump(&tally.errors);
            return;
        }
    };
    match (compiled, hit.source()) {
        (true, _) => bump(&tally.compiled),
        (false, Source::Memory) => bump(&tally.memory),
        (false, Source::Image) => bump(&tally.image),
        // The disk tier (the only tier the soak adds), or a source newer
        // than this program.
        (false, _) => bump(&tally.disk),
    }
    // New specializations are asked for once: checked, not remembered.
    let remember = spec < NEW_BASE;
    let known = remember
        .then(|| expected.lock().ok()?.get(&spec).copied())
        .flatten();
    let (len, digest) = known.unwrap_or_else(|| {
        let payload = sizes.payload(&key);
        let computed = (payload.len(), Digest::of(&payload));
        if remember && let Ok(mut expected) = expected.lock() {
            expected.insert(spec, computed);
        }
        computed
    });
    let right = hit
        .artifact(&soak::KIND)
        .is_some_and(|bytes| bytes.len() == len && Digest::of(bytes) == digest);
    if !right {
        eprintln!("kiln-soak: specialization {spec}: wrong bytes");
        bump(&tally.wrong);
    }
}
