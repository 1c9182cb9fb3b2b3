//! End to end, across processes: build the example application
//! (`examples/kiln-demo-app`, which links two kernel libraries that embed
//! precompiled images) and run it in fresh processes.
//!
//! Needs NVRTC (installed by `scripts/install-cuda-wheels.sh`); without it
//! the tests skip, except under `CI=true`, where they fail.
#![cfg(feature = "cuda")]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The switches the tests set themselves: never inherited.
const SWITCHES: [&str; 8] = [
    "KILN_DISABLE",
    "KILN_ALWAYS_COMPILE",
    "KILN_IMAGE_PATH",
    "KILN_LOG",
    "KILN_DEMO_GPU",
    "KILN_CACHE",
    "KILN_CACHE_DIR",
    "KILN_CACHE_MAX_BYTES",
];

/// The disk tier off: for the tests about images, whose outcomes must not
/// depend on what an earlier run left on disk.
const NO_DISK: (&str, &str) = ("KILN_CACHE", "0");

/// Kernels of `kiln-kernels-demo` (11) and `kiln-activations-demo` (8).
const KERNELS: usize = 19;

/// Whether NVRTC is here; under `CI=true` its absence is a failure.
fn nvrtc_available() -> bool {
    let found = kiln::cuda::locate_nvrtc(&kiln::cuda::SearchConfig::from_env());
    kiln_test_support::ci::required(
        found,
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
    .is_some()
}

/// Builds the demo application once per test process; its executable.
fn demo_app() -> &'static Path {
    static APP: OnceLock<PathBuf> = OnceLock::new();
    APP.get_or_init(|| {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args([
                "build",
                "-p",
                "kiln-demo-app",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "building kiln-demo-app failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| message["target"]["name"] == "kiln-demo-app")
            .find_map(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the kiln-demo-app executable")
    })
}

/// One run of the application: its JSON lines and its stderr.
struct Run {
    lines: Vec<Value>,
    stderr: String,
}

impl Run {
    fn events(&self, event: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|line| line["event"] == event)
            .collect()
    }

    fn one(&self, event: &str) -> &Value {
        let events = self.events(event);
        assert_eq!(
            events.len(),
            1,
            "one {event} line expected: {:#?}",
            self.lines
        );
        events[0]
    }

    /// The image line whose source mentions `name`.
    fn image(&self, name: &str) -> &Value {
        self.events("image")
            .into_iter()
            .find(|image| image["source"].as_str().is_some_and(|s| s.contains(name)))
            .unwrap_or_else(|| panic!("no image {name}: {:#?}", self.lines))
    }

    /// Kernel name -> outcome.
    fn outcomes(&self) -> Vec<(String, String)> {
        self.events("kernel")
            .into_iter()
            .map(|k| {
                (
                    k["name"].as_str().unwrap_or("?").to_owned(),
                    k["outcome"].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect()
    }
}

/// A disk-cache directory of this test process's own, never the user's:
/// the default when a test does not set `KILN_CACHE_DIR`.
fn scratch_cache_dir() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("a temporary directory"))
        .path()
}

/// Runs the application in a fresh process with `args --json` and `env`.
fn run(args: &[&str], env: &[(&str, &str)]) -> Run {
    let mut command = Command::new(demo_app());
    command.args(args).arg("--json");
    for switch in SWITCHES {
        command.env_remove(switch);
    }
    command.env("KILN_CACHE_DIR", scratch_cache_dir());
    command.envs(env.iter().copied());
    let output = command.output().expect("the demo application starts");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(
        output.status.success(),
        "kiln-demo-app {args:?} failed:\n{stdout}\n{stderr}"
    );
    let lines = stdout
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    Run { lines, stderr }
}

#[test]
fn every_kernel_comes_from_the_embedded_images_without_compiling() {
    if !nvrtc_available() {
        return;
    }
    let run = run(&[], &[NO_DISK]);

    let demo = run.image("kiln-kernels-demo.kimg");
    assert_eq!(
        (demo["entries"].as_u64(), demo["inserted"].as_u64()),
        (Some(11), Some(11))
    );
    let activations = run.image("kiln-activations-demo.kimg");
    assert_eq!(
        (
            activations["entries"].as_u64(),
            activations["inserted"].as_u64()
        ),
        (Some(8), Some(8))
    );

    let outcomes = run.outcomes();
    assert_eq!(outcomes.len(), KERNELS);
    for (name, outcome) in &outcomes {
        assert_eq!(outcome, "image", "{name}");
    }
    let summary = run.one("summary");
    assert_eq!(summary["from_image"].as_u64(), Some(KERNELS as u64));
    assert_eq!(
        summary["nvrtc_compiles"].as_u64(),
        Some(0),
        "NVRTC compiled something"
    );
}

#[test]
fn entries_built_against_a_redefined_dependency_are_skipped_and_recompile() {
    if !nvrtc_available() {
        return;
    }
    let run = run(
        &["--define", "kiln-kernels-demo::axpy=patched"],
        &[("KILN_LOG", "warn"), NO_DISK],
    );

    let demo = run.image("kiln-kernels-demo.kimg");
    assert_eq!(
        (demo["stale"].as_u64(), demo["inserted"].as_u64()),
        (Some(4), Some(7))
    );
    assert!(
        run.stderr.contains("stale"),
        "no stale warning on stderr:\n{}",
        run.stderr
    );
    assert_eq!(
        run.image("kiln-activations-demo.kimg")["stale"].as_u64(),
        Some(0)
    );

    for (name, outcome) in run.outcomes() {
        let expected = if name.starts_with("axpy_") || name.starts_with("axpby_") {
            "compiled"
        } else {
            "image"
        };
        assert_eq!(outcome, expected, "{name}");
    }
    assert_eq!(run.one("summary")["nvrtc_compiles"].as_u64(), Some(4));
}

#[test]
fn kiln_disable_merges_no_image() {
    if !nvrtc_available() {
        return;
    }
    let run = run(&["--only", "axpy_f32"], &[("KILN_DISABLE", "1"), NO_DISK]);
    assert!(run.events("image").is_empty(), "{:#?}", run.lines);
    assert_eq!(run.one("init")["disabled"], true);
    assert_eq!(
        run.outcomes(),
        [("axpy_f32".to_owned(), "compiled".to_owned())]
    );
}

#[test]
fn kiln_always_compile_compiles_even_what_the_images_hold() {
    if !nvrtc_available() {
        return;
    }
    let run = run(
        &["--only", "relu_f32"],
        &[("KILN_ALWAYS_COMPILE", "1"), NO_DISK],
    );
    assert_eq!(
        run.image("kiln-activations-demo.kimg")["inserted"].as_u64(),
        Some(8)
    );
    assert_eq!(
        run.outcomes(),
        [("kiln_relu_f32".to_owned(), "compiled".to_owned())]
    );
    assert_eq!(run.one("summary")["nvrtc_compiles"].as_u64(), Some(1));
}

#[test]
fn a_bad_image_in_kiln_image_path_is_skipped_and_the_rest_still_loads() {
    if !nvrtc_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("broken.kimg"), b"not a kiln image").expect("writable");
    let path = dir.path().to_str().expect("a UTF-8 temporary path");
    let run = run(
        &["--only", "relu"],
        &[("KILN_IMAGE_PATH", path), ("KILN_LOG", "warn"), NO_DISK],
    );

    let broken = run.image("broken.kimg");
    assert!(broken["skipped"].is_string(), "{broken}");
    assert!(
        run.stderr.contains("broken.kimg"),
        "no warning naming the image:\n{}",
        run.stderr
    );
    assert_eq!(
        run.image("kiln-kernels-demo.kimg")["inserted"].as_u64(),
        Some(11)
    );
    assert_eq!(
        run.outcomes(),
        [
            ("kiln_relu_f32".to_owned(), "image".to_owned()),
            ("kiln_relu_f64".to_owned(), "image".to_owned())
        ]
    );
}

#[test]
fn a_second_run_without_images_gets_every_kernel_from_the_disk_tier() {
    if !nvrtc_available() {
        return;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let dir = dir.path().to_str().expect("a UTF-8 temporary path");
    let env = [("KILN_DISABLE", "1"), ("KILN_CACHE_DIR", dir)];

    // First run: no image, an empty directory: everything compiles and is
    // stored on disk.
    let first = run(&[], &env);
    assert_eq!(
        first.one("summary")["compiled"].as_u64(),
        Some(KERNELS as u64)
    );
    assert_eq!(first.one("summary")["from_tier"].as_u64(), Some(0));
    // The disk tier keeps its segments in a subdirectory per image format.
    let segments = kiln::disk::DiskConfig::new(dir).images_dir();
    let stored = std::fs::read_dir(&segments)
        .expect("the disk tier created its directory")
        .filter_map(Result::ok)
        .filter(|f| f.file_name().to_string_lossy().ends_with(".kimg"))
        .count();
    assert!(stored > 0, "no segment written to {}", segments.display());

    // Second run, a fresh process: every kernel from disk, nothing compiled.
    let second = run(&[], &env);
    let outcomes = second.outcomes();
    assert_eq!(outcomes.len(), KERNELS);
    for (name, outcome) in &outcomes {
        assert_eq!(outcome, "tier", "{name}");
    }
    let summary = second.one("summary");
    assert_eq!(summary["from_tier"].as_u64(), Some(KERNELS as u64));
    assert_eq!(summary["hits_tier"].as_u64(), Some(KERNELS as u64));
    assert_eq!(summary["nvrtc_compiles"].as_u64(), Some(0), "{summary}");
}
