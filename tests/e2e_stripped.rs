//! End to end on a machine with nothing of CUDA but what a GPU driver brings:
//! the example application (`examples/kiln-demo-app`) run with an empty
//! environment (`HOME` a fresh directory, `PATH=/usr/bin:/bin`, no
//! `KILN_NVRTC`, `CUDA_HOME` or site-packages with the wheels), under
//! `strace`, so that its own trace shows what it opened and ran.
//!
//! Every kernel must come from an image, for each kind of device arch (a
//! shipped one, an unshipped one a shipped CUBIN runs on, one newer than any
//! shipped, served by PTX), and the process must neither open `libnvrtc`,
//! nor run `python3`, nor touch an include tree or a CUDA toolkit. A kernel in
//! no image fails with an error naming the kernel, the arch and what to
//! install.
//!
//! Needs NVRTC to build the images and `strace` (both installed by
//! `scripts/test.sh`); without them the tests skip, except under `CI=true`,
//! where they fail.
#![cfg(feature = "cuda")]

mod demo_app;

use std::path::{Path, PathBuf};
use std::process::Command;

use demo_app::{Run, demo_app, nvrtc_available};

/// Kernels of `kiln-kernels-demo` (11) and `kiln-activations-demo` (8).
const KERNELS: usize = 19;

/// The libraries' CUBIN targets (`catalogue::TARGETS`), and the one with PTX.
const SHIPPED: [&str; 7] = [
    "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120",
];
const PTX_TARGET: &str = "sm_75";

/// Path fragments the process must never touch when the images serve every
/// kernel: NVRTC, Python, include trees (CCCL, CUB), a CUDA toolkit, the
/// wheels' folders.
const NEVER_TOUCHED: [&str; 9] = [
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

/// `strace`, when installed; under `CI=true` its absence is a failure.
fn strace() -> Option<PathBuf> {
    let found = ["/usr/bin/strace", "/bin/strace"]
        .into_iter()
        .map(PathBuf::from)
        .find(|path| path.is_file())
        .ok_or("not in /usr/bin or /bin");
    kiln_test_support::ci::required(found, "strace (scripts/test.sh installs it)")
}

/// What the tests need: the application (built with NVRTC) and strace.
fn setup() -> Option<(PathBuf, &'static Path)> {
    if !nvrtc_available() {
        return None;
    }
    let strace = strace()?;
    Some((strace, demo_app()))
}

/// One stripped run: the application's output and its trace.
struct Stripped {
    run: Run,
    trace: String,
}

impl Stripped {
    /// Every traced line that touches a path the process must not.
    fn forbidden(&self) -> Vec<&str> {
        self.trace
            .lines()
            .filter(|line| {
                let lower = line.to_ascii_lowercase();
                NEVER_TOUCHED.iter().any(|part| lower.contains(part))
            })
            .collect()
    }

    /// Every program the process (and its children) executed.
    fn executed(&self) -> Vec<&str> {
        self.trace
            .lines()
            .filter(|line| line.contains("execve(") && !line.contains("= -1"))
            .collect()
    }

    /// Asserts the run succeeded, touched nothing of a toolchain and ran
    /// nothing but itself.
    fn assert_clean(&self, app: &Path) {
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

    /// Asserts every kernel came from an image as `selection` of `target`.
    fn assert_all_from_images(&self, selection: &str, target: &str) {
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
fn stripped(strace: &Path, app: &Path, args: &[&str]) -> Stripped {
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
fn system_nvrtc() -> bool {
    let in_cache = std::fs::read("/etc/ld.so.cache")
        .map(|bytes| bytes.windows(8).any(|w| w == b"libnvrtc"))
        .unwrap_or(false);
    in_cache || Path::new("/usr/local/cuda").exists()
}

#[test]
fn every_kernel_comes_from_an_image_with_no_toolchain_at_all() {
    let Some((strace, app)) = setup() else { return };
    let stripped = stripped(&strace, app, &[]);
    stripped.assert_clean(app);
    stripped.assert_all_from_images("exact-cubin", "sm_90");
    for library in ["kiln-kernels-demo", "kiln-activations-demo"] {
        assert_eq!(stripped.run.targets(library), SHIPPED, "{library}");
        assert_eq!(stripped.run.library(library)["ptx_target"], PTX_TARGET);
    }
}

#[test]
fn each_shipped_arch_is_served_by_its_own_cubin() {
    let Some((strace, app)) = setup() else { return };
    for arch in SHIPPED {
        let stripped = stripped(&strace, app, &["--arch", arch]);
        stripped.assert_clean(app);
        stripped.assert_all_from_images("exact-cubin", arch);
    }
}

#[test]
fn an_unshipped_arch_is_served_by_a_binary_compatible_cubin() {
    let Some((strace, app)) = setup() else { return };
    for (arch, from) in [
        ("sm_87", "sm_86"),
        ("sm_88", "sm_86"),
        ("sm_103", "sm_100"),
        ("sm_121", "sm_120"),
    ] {
        let stripped = stripped(&strace, app, &["--arch", arch]);
        stripped.assert_clean(app);
        stripped.assert_all_from_images("compatible-cubin", from);
        let summary = stripped.run.one("summary");
        assert_eq!(
            summary["compatible_cubin"].as_u64(),
            Some(KERNELS as u64),
            "{arch}: {summary}"
        );
    }
}

#[test]
fn an_arch_newer_than_any_shipped_is_served_by_the_ptx() {
    let Some((strace, app)) = setup() else { return };
    // Thor (11.0) has no 11.x CUBIN to run; 13.0 stands for a GPU newer
    // than this NVRTC knows.
    for arch in ["sm_110", "sm_130"] {
        let stripped = stripped(&strace, app, &["--arch", arch]);
        stripped.assert_clean(app);
        stripped.assert_all_from_images("ptx", PTX_TARGET);
        let summary = stripped.run.one("summary");
        assert_eq!(summary["ptx"].as_u64(), Some(KERNELS as u64), "{arch}");
    }
}

#[test]
fn a_kernel_in_no_image_fails_naming_the_kernel_the_arch_and_what_to_install() {
    let Some((strace, app)) = setup() else { return };
    if system_nvrtc() {
        eprintln!("skipped: this machine has an NVRTC outside any environment variable");
        return;
    }
    let stripped = stripped(
        &strace,
        app,
        &["--uncatalogued", "--only", "axpy", "--arch", "sm_86"],
    );
    let run = &stripped.run;
    assert!(!run.success, "a kernel nobody can compile was served");
    let outcomes = run.outcomes();
    assert_eq!(
        outcomes,
        [
            ("axpy_f32".to_owned(), "image".to_owned()),
            ("axpy_f64".to_owned(), "image".to_owned()),
            ("axpy_i32".to_owned(), "failed".to_owned()),
        ]
    );
    let failure = run
        .events("kernel")
        .into_iter()
        .find(|k| k["outcome"] == "failed")
        .and_then(|k| k["error"].as_str())
        .unwrap_or_default()
        .to_owned();
    for needed in [
        "kernel axpy_i32 for sm_86",
        "not in the images",
        "NVRTC (libnvrtc) not found",
        "nvidia-cuda-nvrtc",
        "KILN_NVRTC",
    ] {
        assert!(
            failure.contains(needed),
            "{needed:?} missing from: {failure}"
        );
    }
    // The shipped kernels before it were served without looking for NVRTC;
    // the miss looked (lazily), and found none.
    assert!(
        stripped.trace.contains("nvrtc"),
        "the miss did not look for NVRTC"
    );
}

#[test]
fn with_the_toolchain_installed_the_images_still_need_none_of_it() {
    let Some((strace, app)) = setup() else { return };
    // The test's own environment: the wheels reachable through HOME and
    // PATH, python3 on PATH. Nothing of it is used.
    let home = std::env::var_os("HOME").unwrap_or_default();
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let trace = dir.path().join("trace");
    let output = Command::new(&strace)
        .args(["-f", "-qq", "-e", "trace=%file,execve", "-o"])
        .arg(&trace)
        .arg(app)
        .args(["--arch", "sm_89", "--json"])
        .env_clear()
        .env("HOME", home)
        .env("PATH", path)
        .output()
        .expect("strace runs");
    let stripped = Stripped {
        run: Run::parse(&output),
        trace: std::fs::read_to_string(&trace).expect("a trace"),
    };
    stripped.assert_clean(app);
    stripped.assert_all_from_images("exact-cubin", "sm_89");
}
