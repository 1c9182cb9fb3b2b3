//! Running the example application as on a production machine (an empty
//! environment, a fresh `HOME`, `PATH=/usr/bin:/bin`) under `strace`, and
//! what such a run must show: shared by the end-to-end tests.

#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::demo_app::{Run, demo_app, nvrtc_available};

/// Kernels of `kiln-kernels-demo` (11) and `kiln-activations-demo` (8).
pub const KERNELS: usize = 19;

/// The libraries' NVRTC 13 CUBIN targets (`catalogue::TARGETS`), and the one
/// with PTX.
pub const SHIPPED: [&str; 7] = [
    "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
];
pub const PTX_TARGET: &str = "sm_75";

/// The libraries' NVRTC 12 CUBIN targets (`catalogue::TARGETS_CUDA_12`).
pub const SHIPPED_CUDA_12: [&str; 10] = [
    "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
];

/// The NVRTC releases that built the libraries' shipped entries: CUDA 13's and
/// CUDA 12's.
pub const NVRTC_13: &str = "13.0.88";
pub const NVRTC_12: &str = "12.9.86";

/// Path fragments the process must never touch when the images serve every
/// kernel: NVRTC, Python, include trees (CCCL, CUB), a CUDA toolkit, the
/// wheels' folders.
pub const NEVER_TOUCHED: [&str; 9] = [
    "nvrtc",
    "python",
    "cccl",
    "/cub/",
    "/include",
    "/usr/local/cuda",
    "site-packages",
    "dist-packages",
    "nvidia",
];

pub use kiln_test_support::ci::strace;

/// What the tests need: the application (built with NVRTC) and strace.
pub fn setup() -> Option<(PathBuf, &'static Path)> {
    if !nvrtc_available() {
        return None;
    }
    let strace = strace()?;
    Some((strace, demo_app()))
}

/// One stripped run: the application's output and its trace.
pub struct Stripped {
    pub run: Run,
    pub trace: String,
}

impl Stripped {
    /// Every traced line that touches a path the process must not.
    pub fn forbidden(&self) -> Vec<&str> {
        self.trace
            .lines()
            .filter(|line| {
                let lower = line.to_ascii_lowercase();
                NEVER_TOUCHED.iter().any(|part| lower.contains(part))
            })
            .collect()
    }

    /// Every program the process (and its children) executed.
    pub fn executed(&self) -> Vec<&str> {
        self.trace
            .lines()
            .filter(|line| line.contains("execve(") && !line.contains("= -1"))
            .collect()
    }

    /// Asserts the run succeeded, touched nothing of a toolchain and ran
    /// nothing but itself.
    pub fn assert_clean(&self, app: &Path) {
        assert!(
            self.run.success,
            "the stripped run failed:\n{}\n{}",
            self.run.stdout, self.run.stderr
        );
        assert_eq!(
            self.forbidden(),
            Vec::<&str>::new(),
            "the process touched a toolchain path"
        );
        let executed = self.executed();
        assert_eq!(executed.len(), 1, "programs run: {executed:#?}");
        assert!(
            executed[0].contains(&format!("execve(\"{}\"", app.display())),
            "{executed:?}"
        );
    }

    /// Asserts every kernel came from an image as `selection` of `target`, built
    /// by NVRTC `nvrtc`.
    pub fn assert_all_built_by(&self, selection: &str, target: &str, nvrtc: &str) {
        self.assert_all_from_images(selection, target);
        for kernel in self.run.events("kernel") {
            assert_eq!(kernel["nvrtc"], nvrtc, "{}", kernel["name"]);
        }
    }

    /// Asserts every kernel came from an image as `selection` of `target`.
    pub fn assert_all_from_images(&self, selection: &str, target: &str) {
        let run = &self.run;
        let kernels = run.events("kernel");
        assert_eq!(kernels.len(), KERNELS, "{:#?}", run.lines);
        for kernel in kernels {
            let name = &kernel["name"];
            assert_eq!(kernel["outcome"], "image", "{name}");
            assert_eq!(kernel["selection"], selection, "{name}");
            assert_eq!(kernel["target"], target, "{name}");
        }
        let summary = run.one("summary");
        assert_eq!(summary["nvrtc_compiles"].as_u64(), Some(0), "{summary}");
        assert_eq!(summary["from_image"].as_u64(), Some(KERNELS as u64));
    }
}

/// Runs the application with `args --json` under `strace -f`, with an empty
/// environment but `HOME` (a fresh directory) and `PATH=/usr/bin:/bin`.
pub fn stripped(strace: &Path, app: &Path, args: &[&str]) -> Stripped {
    let home = tempfile::tempdir().expect("a temporary directory");
    let trace = home.path().join("trace");
    let output = Command::new(strace)
        .args(["-f", "-qq", "-e", "trace=%file,execve", "-o"])
        .arg(&trace)
        .arg(app)
        .args(args)
        .arg("--json")
        .env_clear()
        .env("HOME", home.path())
        .env("PATH", "/usr/bin:/bin")
        .current_dir(home.path())
        .output()
        .expect("strace runs");
    let run = Run::parse(&output);
    let trace = std::fs::read_to_string(&trace)
        .unwrap_or_else(|e| panic!("strace left no trace ({e}): {}\n{}", run.stdout, run.stderr));
    Stripped { run, trace }
}

/// Whether this machine has an NVRTC the stripped process could still find
/// (a toolkit in the default place, or one the OS loader knows).
pub fn system_nvrtc() -> bool {
    let in_cache = std::fs::read("/etc/ld.so.cache")
        .map(|bytes| bytes.windows(8).any(|w| w == b"libnvrtc"))
        .unwrap_or(false);
    in_cache || Path::new("/usr/local/cuda").exists()
}
