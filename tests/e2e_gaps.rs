//! Seeing the gaps before deploying: `kiln kernels` on the demo application
//! (`examples/kiln-demo-app`) as cargo builds it, through the libraries' real
//! build scripts, and the application itself run as on a production machine
//! (an empty environment, a fresh `HOME`, `PATH=/usr/bin:/bin`, under
//! `strace`).
//!
//! - On the default build, for GPUs and drivers of every kind (a shipped
//!   arch, a compatible one, one served by PTX, one only NVRTC 12 serves, one
//!   nothing loads on), what the report says each kernel is served from, what
//!   each library lists (`KernelLibrary::kernels`, `--list`) and what the
//!   application is served are the same, kernel by kernel, and the exit
//!   statuses agree.
//! - An application built too narrow (`KILN_CUDA_ARCHS=sm_80` asked about an
//!   sm_90; `KILN_CUDA_DRIVERS=13` asked about a CUDA 12.8 driver) fails the
//!   report with exit status 1, and the application there fails too; the
//!   blocks' summary lines name the GPUs left with no code.
//! - `KILN_CUDA_ARCHS=sm_80,ptx` serves an sm_90 it did not name, from the
//!   PTX, stripped.
//!
//! Needs NVRTC (the other end-to-end tests' rule) and `strace`; without them
//! the tests skip, except under `CI=true`, where they fail.
#![cfg(feature = "cuda")]

mod demo_app;
mod stripped;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};

use serde_json::Value;
use stripped::{KERNELS, NVRTC_12, NVRTC_13, stripped};

/// Builds of the demo application write one path: one at a time, each copied.
static BUILDS: Mutex<()> = Mutex::new(());

/// NVRTC (to build, as the other end-to-end tests) and strace.
fn setup() -> Option<PathBuf> {
    if !demo_app::nvrtc_available() {
        return None;
    }
    stripped::strace()
}

/// The demo application built with `vars` set, copied to `dir`; and the build
/// script output of `kiln-kernels-demo`.
fn app_built_with(vars: &[(&str, &str)], dir: &Path) -> (PathBuf, String) {
    let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
    let built = demo_app::build_demo_app(vars);
    let copy = dir.join("kiln-demo-app");
    std::fs::copy(&built, &copy).expect("copy the application");
    let build = built.parent().expect("the profile folder").join("build");
    let output = kiln_test_support::library::build_script_output(&build, "kiln-kernels-demo")
        .unwrap_or_else(|e| panic!("{e}"));
    (copy, output)
}

/// `cargo build -p kiln-tool`'s `kiln`.
fn kiln_tool() -> &'static Path {
    static TOOL: OnceLock<PathBuf> = OnceLock::new();
    TOOL.get_or_init(|| {
        let _one = BUILDS.lock().unwrap_or_else(|e| e.into_inner());
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let output = Command::new(cargo)
            .args([
                "build",
                "-p",
                "kiln-tool",
                "--message-format=json-render-diagnostics",
            ])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .stderr(Stdio::inherit())
            .output()
            .expect("cargo runs");
        assert!(output.status.success(), "building kiln-tool failed");
        String::from_utf8_lossy(&output.stdout)
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .filter(|message| message["target"]["name"] == "kiln")
            .find_map(|message| message["executable"].as_str().map(PathBuf::from))
            .expect("cargo reports the kiln executable")
    })
}

/// `kiln kernels APP ARGS`.
fn kernels(app: &Path, args: &[&str]) -> Output {
    Command::new(kiln_tool())
        .arg("kernels")
        .arg(app)
        .args(args)
        .output()
        .expect("kiln runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn json(output: &Output) -> Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", text(output)))
}

/// An answer, comparable across the three: `selection target NVRTC`, or
/// `missing`.
fn answer(line: &Value) -> String {
    match line["selection"].as_str() {
        Some(selection) => format!(
            "{selection} {} {}",
            line["target"].as_str().unwrap_or("?"),
            line["nvrtc"].as_str().unwrap_or("?")
        ),
        None => "missing".to_owned(),
    }
}

#[test]
fn the_report_the_listing_and_the_application_agree_on_every_kind_of_gpu_and_driver() {
    let Some(strace) = setup() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (app, _) = app_built_with(&[], dir.path());
    let mut kinds = std::collections::BTreeSet::new();
    for (gpu, driver) in [
        ("sm_70", "12.8"),
        ("sm_75", "13.0"),
        ("sm_87", "13.0"),
        ("sm_90", "12.2"),
        ("sm_90", "13.0"),
        ("sm_110", "13.0"),
        ("sm_130", "12.9"),
        ("sm_130", "12.8"),
    ] {
        let cell = format!("{gpu} on CUDA {driver}");
        let args = ["--arch", gpu, "--driver", driver];
        // The application, stripped, getting each kernel (by program name:
        // each program of the demo libraries has one kernel).
        let served = stripped(&strace, &app, &args);
        let from_app: BTreeMap<String, String> = served
            .run
            .events("kernel")
            .into_iter()
            .map(|k| (k["name"].as_str().unwrap_or("?").to_owned(), answer(k)))
            .collect();
        assert_eq!(from_app.len(), KERNELS, "{cell}: {:#?}", served.run.lines);
        // Each library's own listing, stripped, compiling nothing.
        let listed = stripped(&strace, &app, &[&args[..], &["--list"]].concat());
        assert_eq!(listed.forbidden(), Vec::<&str>::new(), "{cell}");
        let from_listing: BTreeMap<String, String> = listed
            .run
            .events("listed")
            .into_iter()
            .map(|k| (k["program"].as_str().unwrap_or("?").to_owned(), answer(k)))
            .collect();
        // The report of the binary's images.
        let output = kernels(&app, &["--gpu", gpu, "--driver", driver, "--all", "--json"]);
        let report = json(&output);
        let device = &report["devices"][0];
        assert_eq!(device["gpu"], gpu);
        let from_report: BTreeMap<String, String> = device["every_kernel"]
            .as_array()
            .expect("every kernel")
            .iter()
            .map(|k| (k["program"].as_str().unwrap_or("?").to_owned(), answer(k)))
            .collect();
        assert_eq!(from_listing, from_app, "{cell}: the listing");
        assert_eq!(from_report, from_app, "{cell}: the report");
        // Exit statuses: the application fails, the listing and the report
        // exit 1, exactly where a kernel is missing.
        let missing = from_app.values().any(|a| a == "missing");
        // Served from the images, the application touched no toolchain (a
        // miss looks for NVRTC, to compile); the listing never does.
        if !missing {
            assert_eq!(served.forbidden(), Vec::<&str>::new(), "{cell}");
        }
        assert_eq!(served.run.success, !missing, "{cell}");
        assert_eq!(listed.run.success, !missing, "{cell}");
        assert_eq!(output.status.code(), Some(i32::from(missing)), "{cell}");
        kinds.extend(from_app.into_values().map(|a| {
            let mut words = a.split(' ');
            let selection = words.next().unwrap_or_default().to_owned();
            let nvrtc = words
                .nth(1)
                .map(|n| n.split('.').next().unwrap_or_default().to_owned());
            (selection, nvrtc)
        }));
    }
    // Exact, compatible and PTX from both toolchains, and missing, were met.
    let kinds: Vec<String> = kinds
        .into_iter()
        .map(|(s, n)| format!("{s} {}", n.unwrap_or_default()))
        .collect();
    assert_eq!(
        kinds,
        [
            "compatible-cubin 13",
            "exact-cubin 12",
            "exact-cubin 13",
            "missing ",
            "ptx 12",
            "ptx 13"
        ]
    );
}

#[test]
fn an_application_built_for_too_few_gpus_or_drivers_fails_the_report() {
    let Some(strace) = setup() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");

    // KILN_CUDA_ARCHS=sm_80: the sm_80 CUBINs of both toolchains, no PTX.
    let sm_80 = dir.path().join("sm_80");
    std::fs::create_dir(&sm_80).unwrap();
    let (app, output) = app_built_with(&[("KILN_CUDA_ARCHS", "sm_80")], &sm_80);
    // Each block's summary line names the GPU generations left with no code.
    let summary = kiln_test_support::library::summary_line(&output, "kiln-kernels-demo")
        .unwrap_or_else(|| panic!("no summary line in:\n{output}"));
    assert!(
        summary.contains("; no code for sm_5x, sm_6x, sm_7x, sm_90, sm_10x, sm_110, sm_12x (what KILN_CUDA_ARCHS keeps)"),
        "{summary}"
    );
    // An H100 gets none of the kernels, on any driver: exit status 1.
    let output = kernels(&app, &["--gpu", "sm_90", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = json(&output);
    let devices = report["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 15, "CUDA 12.0 to 13.5");
    assert!(
        devices.iter().all(|d| d["missing"] == KERNELS),
        "{report:#}"
    );
    let shown = text(&kernels(&app, &["--gpu", "sm_90"]));
    assert!(shown.contains("sm_90  12.0–13.5      0 of 19"), "{shown}");
    assert!(
        shown.contains("missing: 285 kernels on 15 of 15 GPU and driver pairs"),
        "{shown}"
    );
    // The application there fails, as the report said.
    let run = stripped(&strace, &app, &["--arch", "sm_90", "--driver", "13.0"]);
    assert!(!run.run.success);
    assert!(
        run.run
            .events("kernel")
            .iter()
            .all(|k| k["outcome"] == "failed"),
        "{:#?}",
        run.run.lines
    );
    // The GPUs it was built for are served on every driver: exit status 0.
    let output = kernels(&app, &["--gpu", "sm_80,sm_86"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));

    // KILN_CUDA_DRIVERS=13: NVRTC 13's code, NVRTC 12's only where it is the
    // only code for a GPU (Maxwell to Volta) and its PTX.
    let thirteen = dir.path().join("thirteen");
    std::fs::create_dir(&thirteen).unwrap();
    let (app, _) = app_built_with(&[("KILN_CUDA_DRIVERS", "13")], &thirteen);
    let output = kernels(&app, &["--gpu", "sm_90", "--driver", "12.8", "--json"]);
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    assert_eq!(json(&output)["missing"], KERNELS);
    let run = stripped(&strace, &app, &["--arch", "sm_90", "--driver", "12.8"]);
    assert!(!run.run.success);
    // On the drivers it was built for, every known GPU gets every kernel.
    let output = kernels(&app, &["--driver", "13.0,13.5", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let volta = json(&output)["devices"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["gpu"] == "sm_70" && d["driver"] == "13.0")
        .cloned()
        .expect("a Volta on R580");
    assert_eq!(volta["from"][0]["selection"], "exact-cubin");
    assert_eq!(volta["from"][0]["nvrtc"], NVRTC_12);
}

#[test]
fn plus_ptx_serves_a_gpu_the_list_did_not_name_stripped() {
    let Some(strace) = setup() else { return };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (app, output) = app_built_with(&[("KILN_CUDA_ARCHS", "sm_80,ptx")], dir.path());
    let summary = kiln_test_support::library::summary_line(&output, "kiln-kernels-demo")
        .unwrap_or_else(|| panic!("no summary line in:\n{output}"));
    assert!(!summary.contains("sm_90"), "{summary}");
    // An H100 on R580, which the list did not name: NVRTC 13's PTX for sm_75.
    let hopper = stripped(&strace, &app, &["--arch", "sm_90", "--driver", "13.0"]);
    hopper.assert_clean(&app);
    hopper.assert_all_built_by("ptx", "sm_75", NVRTC_13);
    // On R575, NVRTC 12.9's PTX.
    let older = stripped(&strace, &app, &["--arch", "sm_90", "--driver", "12.9"]);
    older.assert_clean(&app);
    older.assert_all_built_by("ptx", "sm_50", NVRTC_12);
    // The GPU it named gets its own CUBIN.
    let ampere = stripped(&strace, &app, &["--arch", "sm_80", "--driver", "13.0"]);
    ampere.assert_clean(&app);
    ampere.assert_all_built_by("exact-cubin", "sm_80", NVRTC_13);
    // The report agrees.
    let output = kernels(&app, &["--gpu", "sm_90", "--driver", "12.9,13.0", "--json"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = json(&output);
    assert_eq!(report["devices"][1]["from"][0]["selection"], "ptx");
    assert_eq!(report["devices"][1]["from"][0]["target"], "sm_75");
}
