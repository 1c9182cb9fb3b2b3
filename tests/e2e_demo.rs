//! End to end, across processes: build the example application
//! (`examples/kiln-demo-app`, which links two kernel libraries that embed
//! precompiled images) and run it in fresh processes.
//!
//! Needs NVRTC (installed by `scripts/install-cuda-wheels.sh`) to build the
//! images; without it the tests skip, except under `CI=true`, where they
//! fail. `e2e_stripped.rs` runs the same application where NVRTC cannot be
//! found.
#![cfg(feature = "cuda")]

mod demo_app;

use std::path::Path;
use std::process::Command;
use std::sync::OnceLock;

use demo_app::{Run, demo_app, nvrtc_available};

/// The switches the tests set themselves: never inherited.
const SWITCHES: [&str; 9] = [
    "KILN_DISABLE",
    "KILN_ALWAYS_COMPILE",
    "KILN_IMAGE_PATH",
    "KILN_LOG",
    "KILN_DEMO_GPU",
    "KILN_CACHE",
    "KILN_CACHE_DIR",
    "KILN_CACHE_MAX_BYTES",
    "KILN_STRICT_TOOLCHAIN",
];

/// The disk tier off: for the tests about images, whose outcomes must not
/// depend on what an earlier run left on disk.
const NO_DISK: (&str, &str) = ("KILN_CACHE", "0");

/// Kernels of `kiln-kernels-demo` (11) and `kiln-activations-demo` (8).
const KERNELS: usize = 19;

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
    let run = Run::parse(&output);
    assert!(
        run.success,
        "kiln-demo-app {args:?} failed:\n{}\n{}",
        run.stdout, run.stderr
    );
    run
}

/// How many targets each library ships (one entry per kernel and target).
/// The CUBIN targets of each library, over all its toolchains (one entry per
/// kernel and toolchain target).
fn targets(run: &Run) -> (u64, u64) {
    let count = |name: &str| -> u64 {
        run.library(name)["toolchains"]
            .as_array()
            .map(|toolchains| {
                toolchains
                    .iter()
                    .map(|t| t["cubin_targets"].as_array().map_or(0, Vec::len) as u64)
                    .sum()
            })
            .unwrap_or_default()
    };
    (count("kiln-kernels-demo"), count("kiln-activations-demo"))
}

#[test]
fn every_kernel_comes_from_the_embedded_images_without_compiling() {
    if !nvrtc_available() {
        return;
    }
    let run = run(&[], &[NO_DISK]);
    let (demo_targets, activation_targets) = targets(&run);
    // NVRTC 13: 7 targets; NVRTC 12: 10.
    assert_eq!(
        (demo_targets, activation_targets),
        (17, 17),
        "{:#?}",
        run.lines
    );

    // One entry per kernel and target.
    let demo = run.image("kiln-kernels-demo.kimg");
    assert_eq!(
        (demo["entries"].as_u64(), demo["inserted"].as_u64()),
        (Some(11 * demo_targets), Some(11 * demo_targets))
    );
    let activations = run.image("kiln-activations-demo.kimg");
    assert_eq!(
        (
            activations["entries"].as_u64(),
            activations["inserted"].as_u64()
        ),
        (Some(8 * activation_targets), Some(8 * activation_targets))
    );

    let outcomes = run.outcomes();
    assert_eq!(outcomes.len(), KERNELS);
    for (name, outcome) in &outcomes {
        assert_eq!(outcome, "image", "{name}");
    }
    for (name, selection) in run.field_per_kernel("selection") {
        assert_eq!(selection, "exact-cubin", "{name}");
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

    // The four axpy kernels for every target are stale, the CUB ones not.
    let (targets, _) = targets(&run);
    let demo = run.image("kiln-kernels-demo.kimg");
    assert_eq!(
        (demo["stale"].as_u64(), demo["inserted"].as_u64()),
        (Some(4 * targets), Some(7 * targets))
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
    let (_, targets) = targets(&run);
    assert_eq!(
        run.image("kiln-activations-demo.kimg")["inserted"].as_u64(),
        Some(8 * targets)
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
    let (targets, _) = targets(&run);
    assert_eq!(
        run.image("kiln-kernels-demo.kimg")["inserted"].as_u64(),
        Some(11 * targets)
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

#[test]
fn the_strict_toolchain_policy_serves_the_images_built_by_this_very_toolchain() {
    if !nvrtc_available() {
        return;
    }
    // The images were built here, by the NVRTC and headers this process
    // finds: the strict policy compares them and serves every kernel.
    let run = run(
        &["--arch", "sm_86"],
        &[("KILN_STRICT_TOOLCHAIN", "1"), NO_DISK],
    );
    for (name, outcome) in run.outcomes() {
        assert_eq!(outcome, "image", "{name}");
    }
    for (name, selection) in run.field_per_kernel("selection") {
        assert_eq!(selection, "exact-cubin", "{name}");
    }
    assert_eq!(run.one("summary")["nvrtc_compiles"].as_u64(), Some(0));
}
