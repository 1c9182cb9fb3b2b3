//! End to end, across processes: an application's own image.
//!
//! The demo application (`examples/kiln-demo-app`) runs with `--extra`,
//! asking for specializations its libraries do not ship, with
//! `KILN_RECORD` set and a fresh disk tier: it compiles those. `kiln bake`
//! turns the record into one image, taken from the libraries' images and
//! the disk tier; a fresh process with that image in `KILN_IMAGE_PATH` and
//! no disk tier then compiles nothing, the extras coming from the baked
//! image, also with an otherwise empty environment (no NVRTC to be found);
//! and such a stripped process with only the first run's disk tier serves
//! the extras from it. `kiln report` lists the extras as in no shipped
//! image.
//!
//! Needs NVRTC for the first run's compiles; without it the test skips,
//! except under `CI=true`, where it fails.
#![cfg(feature = "cuda")]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The switches the test sets itself: never inherited.
const SWITCHES: [&str; 10] = [
    "KILN_DISABLE",
    "KILN_ALWAYS_COMPILE",
    "KILN_IMAGE_PATH",
    "KILN_LOG",
    "KILN_RECORD",
    "KILN_DEMO_GPU",
    "KILN_CACHE",
    "KILN_CACHE_DIR",
    "KILN_CACHE_MAX_BYTES",
    "KILN_REMOTE_CACHE",
];

/// The libraries' kernels (11 + 8), all in their embedded images.
const SHIPPED: usize = 19;

/// What `--extra` asks for beyond them.
const EXTRAS: [&str; 3] = ["axpy_i32", "axpby_u32", "block_reduce_f32_min_128"];

/// The producer the baked image is given.
const PRODUCER: &str = "kiln-demo-app e2e";

fn nvrtc_available() -> bool {
    let found =
        kiln::cuda::toolchain::locate_nvrtc(&kiln::cuda::toolchain::SearchConfig::from_env());
    kiln_test_support::ci::required(
        found,
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
    .is_some()
}

/// `cargo build -p package`'s JSON messages.
fn cargo_build(package: &str) -> Vec<Value> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(cargo)
        .args([
            "build",
            "-p",
            package,
            "--message-format=json-render-diagnostics",
        ])
        // The libraries' default targets, as the other end-to-end tests build them.
        .env_remove("KILN_DEMO_ARCHS")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit())
        .output()
        .expect("cargo runs");
    assert!(output.status.success(), "building {package} failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .collect()
}

/// The executable of target `name` among `messages`.
fn executable(messages: &[Value], name: &str) -> PathBuf {
    messages
        .iter()
        .filter(|message| message["target"]["name"] == name)
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .unwrap_or_else(|| panic!("cargo reports the {name} executable"))
}

/// The image that the build script of `package` (an example) wrote.
fn built_image(messages: &[Value], package: &str) -> PathBuf {
    let marker = format!("/examples/{package}");
    messages
        .iter()
        .filter(|message| message["reason"] == "build-script-executed")
        .filter(|message| {
            message["package_id"]
                .as_str()
                .is_some_and(|id| id.contains(&marker))
        })
        .find_map(|message| message["out_dir"].as_str())
        .map(|out_dir| Path::new(out_dir).join(format!("{package}.kimg")))
        .unwrap_or_else(|| panic!("cargo reports the build script of {package}"))
}

struct Programs {
    app: PathBuf,
    kiln: PathBuf,
    /// The libraries' images, as their build scripts wrote them.
    library_images: Vec<PathBuf>,
}

fn programs() -> &'static Programs {
    static PROGRAMS: OnceLock<Programs> = OnceLock::new();
    PROGRAMS.get_or_init(|| {
        let app = cargo_build("kiln-demo-app");
        let cli = cargo_build("kiln-tool");
        Programs {
            app: executable(&app, "kiln-demo-app"),
            kiln: executable(&cli, "kiln"),
            library_images: ["kiln-kernels-demo", "kiln-activations-demo"]
                .into_iter()
                .map(|package| built_image(&app, package))
                .collect(),
        }
    })
}

/// Runs the demo application with `--extra --json` and `env`; its JSON lines.
fn run_app(env: &[(&str, &Path)]) -> Vec<Value> {
    let mut command = Command::new(&programs().app);
    for switch in SWITCHES {
        command.env_remove(switch);
    }
    run_command(command, env)
}

/// Runs the demo application with `--extra --json`, `command`'s environment
/// and `env`; its JSON lines.
fn run_command(mut command: Command, env: &[(&str, &Path)]) -> Vec<Value> {
    command.args(["--extra", "--json"]);
    command.envs(env.iter().copied());
    let output = command.output().expect("the demo application starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kiln-demo-app failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect()
}

fn events<'a>(lines: &'a [Value], event: &str) -> Vec<&'a Value> {
    lines.iter().filter(|line| line["event"] == event).collect()
}

/// The names of the kernels with `outcome`.
fn with_outcome(lines: &[Value], outcome: &str) -> BTreeSet<String> {
    events(lines, "kernel")
        .into_iter()
        .filter(|kernel| kernel["outcome"] == outcome)
        .map(|kernel| kernel["name"].as_str().unwrap_or("?").to_owned())
        .collect()
}

fn kiln(args: &[&str]) -> Output {
    let mut command = Command::new(&programs().kiln);
    for switch in SWITCHES {
        command.env_remove(switch);
    }
    command.args(args).output().expect("kiln runs")
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        )
    })
}

fn s(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 path")
}

fn names(values: &Value) -> BTreeSet<String> {
    values
        .as_array()
        .expect("an array")
        .iter()
        .map(|value| value["name"].as_str().unwrap_or("?").to_owned())
        .collect()
}

#[test]
fn a_baked_image_makes_the_next_fresh_process_compile_nothing() {
    if !nvrtc_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let record = dir.path().join("first.rec");
    let cache = dir.path().join("cache");
    let extras: BTreeSet<String> = EXTRAS.iter().map(|name| (*name).to_owned()).collect();

    // 1. The workload, recorded, with a fresh disk tier: the extras compile.
    let first = run_app(&[("KILN_RECORD", &record), ("KILN_CACHE_DIR", &cache)]);
    assert_eq!(with_outcome(&first, "compiled"), extras);
    assert_eq!(with_outcome(&first, "image").len(), SHIPPED);

    // 2. Bake everything it used, from the libraries' images and the disk tier.
    let ship = dir.path().join("ship");
    std::fs::create_dir(&ship).expect("a directory");
    let baked = ship.join("demo-app.kimg");
    let mut args = vec![
        "bake",
        s(&record),
        "-o",
        s(&baked),
        "--cache-dir",
        s(&cache),
    ];
    for image in &programs().library_images {
        args.extend(["--image", s(image)]);
    }
    args.extend(["--producer", PRODUCER, "--json"]);
    let bake = kiln(&args);
    assert!(bake.status.success(), "{bake:?}");
    let bake = json(&bake);
    assert_eq!(bake["missing"], serde_json::json!([]), "{bake:#}");
    assert_eq!(bake["baked"].as_array().map(Vec::len), Some(SHIPPED + 3));
    let from_disk: BTreeSet<String> = bake["baked"]
        .as_array()
        .expect("an array")
        .iter()
        .filter(|b| {
            b["from"]
                .as_str()
                .is_some_and(|from| from.starts_with("disk cache"))
        })
        .map(|b| b["name"].as_str().unwrap_or("?").to_owned())
        .collect();
    assert_eq!(from_disk, extras);

    // `--only-compiled`: just what no shipped image held.
    let only = dir.path().join("extras.kimg");
    let only_compiled = kiln(&[
        "bake",
        s(&record),
        "-o",
        s(&only),
        "--cache-dir",
        s(&cache),
        "--only-compiled",
        "--json",
    ]);
    assert!(only_compiled.status.success(), "{only_compiled:?}");
    assert_eq!(names(&json(&only_compiled)["baked"]), extras);

    // 3. A fresh process: the baked image only in KILN_IMAGE_PATH, the
    // embedded images still there, no disk tier.
    let second_record = dir.path().join("second.rec");
    let second = run_app(&[
        ("KILN_IMAGE_PATH", &ship),
        ("KILN_CACHE", Path::new("0")),
        ("KILN_RECORD", &second_record),
    ]);
    assert_eq!(
        with_outcome(&second, "image").len(),
        SHIPPED + 3,
        "{second:#?}"
    );
    let summary = events(&second, "summary");
    assert_eq!(summary.len(), 1);
    assert_eq!(summary[0]["compiled"], 0);
    assert_eq!(summary[0]["nvrtc_compiles"], 0);
    let baked_merge = events(&second, "image")
        .into_iter()
        .find(|image| {
            image["source"]
                .as_str()
                .is_some_and(|s| s.contains("demo-app.kimg"))
        })
        .unwrap_or_else(|| panic!("the baked image is merged: {second:#?}"));
    assert_eq!(baked_merge["inserted"], 3, "the embedded images come first");
    assert_eq!(baked_merge["duplicate"], SHIPPED);

    // With nothing else in its environment (no NVRTC found, no headers, no
    // cache directory), the same: the baked image names the toolchain the
    // libraries' build recorded, which compiled the extras here too.
    let mut stripped = Command::new(&programs().app);
    stripped.env_clear();
    let stripped = run_command(
        stripped,
        &[("KILN_IMAGE_PATH", &ship), ("KILN_CACHE", Path::new("0"))],
    );
    assert_eq!(
        with_outcome(&stripped, "image").len(),
        SHIPPED + 3,
        "{stripped:#?}"
    );

    // Without the baked image, the same stripped machine finds the extras
    // in the disk tier the first run (with NVRTC) filled: compiled by the
    // toolchain the libraries' build recorded, they are what a compile
    // here would give, so they are served although nothing can compile.
    let mut from_disk = Command::new(&programs().app);
    from_disk.env_clear();
    let from_disk = run_command(from_disk, &[("KILN_CACHE_DIR", &cache)]);
    assert_eq!(with_outcome(&from_disk, "tier"), extras, "{from_disk:#?}");
    assert_eq!(with_outcome(&from_disk, "image").len(), SHIPPED);
    let selections: BTreeSet<&str> = events(&from_disk, "kernel")
        .into_iter()
        .filter(|kernel| kernel["outcome"] == "tier")
        .filter_map(|kernel| kernel["selection"].as_str())
        .collect();
    assert_eq!(selections, BTreeSet::from(["compiled"]), "{from_disk:#?}");
    assert_eq!(events(&from_disk, "summary")[0]["nvrtc_compiles"], 0);

    // Its record says where each came from: the extras from the baked image.
    let report = kiln(&["report", s(&second_record), "--json"]);
    assert!(report.status.success(), "{report:?}");
    let report = json(&report);
    let libraries: Vec<(String, u64)> = report["libraries"]
        .as_array()
        .expect("an array")
        .iter()
        .map(|l| {
            (
                l["producer"].as_str().unwrap_or("?").to_owned(),
                l["entries"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert!(
        libraries.contains(&(PRODUCER.to_owned(), 3)),
        "{libraries:?}"
    );
    assert_eq!(report["compiled"], serde_json::json!([]));

    // 4. What the library authors missed: the extras, in no shipped image.
    let svg = dir.path().join("compile.svg");
    let report = kiln(&["report", s(&record), "--svg", s(&svg), "--json"]);
    assert!(report.status.success(), "{report:?}");
    let report = json(&report);
    assert_eq!(names(&report["not_in_any_shipped_image"]), extras);
    let chart = std::fs::read_to_string(&svg).expect("the chart is written");
    for name in EXTRAS {
        assert!(chart.contains(name), "{chart}");
    }
    // Once the application ships its image, nothing is left missing.
    let shipped = kiln(&["report", s(&record), "--image", s(&baked), "--json"]);
    assert_eq!(
        json(&shipped)["not_in_any_shipped_image"],
        serde_json::json!([])
    );
    let text = kiln(&["report", s(&record)]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("not in any shipped image (3)"), "{text}");
}
