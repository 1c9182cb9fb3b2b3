//! The proof's application run as on a machine with nothing of CUDA but a GPU
//! driver: an empty environment (`HOME` a fresh directory,
//! `PATH=/usr/bin:/bin`), under `strace`, for GPUs of `sm_75`, `sm_86`,
//! `sm_90`, `sm_120` and `sm_130` (newer than every shipped CUBIN). Each gets
//! every kernel that exists for it from the embedded image, and is told that
//! the others do not exist for it; the process never opens NVRTC, runs
//! `python3`, or touches an include tree.
//!
//! Needs the library's build to have had NVRTC and the CUDA runtime headers
//! (`scripts/install-cuda-wheels.sh`), and `strace`: without them the tests
//! skip, except under `CI=true`, where they fail.

use std::path::Path;
use std::process::Command;

use kiln::cuda::{Arch, Device};
use kiln_nvcc_style::catalogue::{Kernel, Program};

/// The archs asked for, with the target and selection that serve each one.
const RUNS: [(&str, &str, &str); 5] = [
    ("sm_75", "sm_75", "exact-cubin"),
    ("sm_86", "sm_86", "exact-cubin"),
    ("sm_90", "sm_90", "exact-cubin"),
    ("sm_120", "sm_120", "exact-cubin"),
    // Newer than every CUBIN: the newest PTX, which has every kernel.
    ("sm_130", "sm_120", "ptx"),
];

/// Path fragments a process served from its images must never touch.
const NEVER_TOUCHED: [&str; 8] = [
    "nvrtc",
    "python",
    "cccl",
    "/include",
    "/usr/local/cuda",
    "site-packages",
    "dist-packages",
    "nvidia",
];

/// Whether the library's build shipped kernels (it needs NVRTC and the CUDA
/// runtime headers); under `CI=true` a build that shipped nothing fails.
fn shipped() -> bool {
    let record = kiln_nvcc_style::library()
        .record()
        .map_err(|e| e.to_string());
    let compiled = record.and_then(|r| {
        r.nvrtc()
            .map(|_| ())
            .ok_or("the build found no NVRTC".to_owned())
    });
    kiln_test_support::ci::required(
        compiled,
        "a precompiled image (NVRTC and the CUDA runtime headers at build time: \
         scripts/install-cuda-wheels.sh)",
    )
    .is_some()
}

/// One line of the application's output.
#[derive(Debug)]
struct Line {
    outcome: String,
    program: String,
    kernel: String,
    rest: Vec<String>,
}

/// Runs the application for `arch` stripped, under `strace -f`: its lines and
/// the traced lines that touch a forbidden path.
fn run_stripped(strace: &Path, arch: &str) -> (Vec<Line>, Vec<String>) {
    let app = env!("CARGO_BIN_EXE_kiln-nvcc-style");
    let home = tempfile::tempdir().expect("a temporary directory");
    let trace = home.path().join("trace");
    let output = Command::new(strace)
        .args(["-f", "-qq", "-e", "trace=%file,execve", "-o"])
        .arg(&trace)
        .arg(app)
        .args(["--arch", arch])
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .current_dir(home.path())
        .output()
        .expect("strace runs");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{arch}: the stripped run failed:\n{stdout}\n{stderr}"
    );
    let lines = stdout
        .lines()
        .map(|line| {
            let mut fields = line.split('\t').map(str::to_owned);
            let mut next = || fields.next().unwrap_or_default();
            let (outcome, program, kernel) = (next(), next(), next());
            Line {
                outcome,
                program,
                kernel,
                rest: fields.collect(),
            }
        })
        .collect();
    let trace = std::fs::read_to_string(&trace).expect("strace left a trace");
    let forbidden = trace
        .lines()
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            NEVER_TOUCHED.iter().any(|part| lower.contains(part))
        })
        .map(str::to_owned)
        .collect();
    (lines, forbidden)
}

#[test]
fn every_gpu_gets_every_kernel_that_exists_for_it_with_no_toolchain() {
    if !shipped() {
        return;
    }
    let Some(strace) = kiln_test_support::ci::strace() else {
        return;
    };
    for (arch, target, selection) in RUNS {
        let device: Arch = arch.parse().expect("an arch");
        let (lines, forbidden) = run_stripped(&strace, arch);
        assert_eq!(
            forbidden,
            Vec::<String>::new(),
            "{arch}: touched a toolchain"
        );
        let stated: Vec<(Program, &Kernel)> = Program::ALL
            .into_iter()
            .flat_map(|p| p.kernels().iter().map(move |k| (p, k)))
            .collect();
        assert_eq!(lines.len(), stated.len(), "{arch}: {lines:#?}");
        for ((program, kernel), line) in stated.iter().zip(&lines) {
            assert_eq!(
                (line.program.as_str(), line.kernel.as_str()),
                (program.name(), kernel.name)
            );
            if kernel.exists_on(device) {
                assert_eq!(line.outcome, "served", "{arch} {line:?}");
                assert_eq!(line.rest, [selection, target, "image"], "{arch} {line:?}");
            } else {
                assert_eq!(line.outcome, "absent", "{arch} {line:?}");
                let message = line.rest.join("\t");
                assert!(
                    message.contains(&format!("kernel {} does not exist for {arch}", kernel.name)),
                    "{arch}: {message}"
                );
            }
        }
        let served = lines.iter().filter(|l| l.outcome == "served").count();
        let expected = stated.iter().filter(|(_, k)| k.exists_on(device)).count();
        assert_eq!(served, expected, "{arch}");
    }
}

#[test]
fn the_kernels_kiln_found_are_those_the_library_states() {
    if !shipped() {
        return;
    }
    for arch in [
        "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
    ] {
        let arch: Arch = arch.parse().expect("an arch");
        for program in Program::ALL {
            let served = kiln_nvcc_style::library()
                .get(kiln::global(), &Device::new(arch), &program)
                .expect("shipped");
            assert_eq!(served.target(), arch);
            let stated: Vec<&str> = program
                .kernels()
                .iter()
                .filter(|k| k.exists_on(arch))
                .map(|k| k.name)
                .collect();
            for artifact in served.hit().artifacts() {
                let mut found = artifact.entry_points.clone();
                found.sort_unstable();
                let mut stated = stated.clone();
                stated.sort_unstable();
                assert_eq!(
                    found,
                    stated,
                    "{} for {arch} ({:?})",
                    program.name(),
                    artifact.kind
                );
            }
        }
    }
}
