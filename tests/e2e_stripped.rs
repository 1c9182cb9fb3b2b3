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
mod stripped;

use std::process::Command;

use demo_app::Run;
use stripped::{
    KERNELS, NVRTC_12, NVRTC_13, PTX_TARGET, SHIPPED, SHIPPED_CUDA_12, Stripped, setup, stripped,
    system_nvrtc,
};

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
fn a_cuda_12_driver_gets_nvrtc_12_code_and_a_cuda_13_driver_nvrtc_13_code() {
    let Some((strace, app)) = setup() else { return };
    // A V100 on R570: NVRTC 13 cannot compile for it, and a 12.8 driver loads
    // no 13.x code: the NVRTC 12 CUBINs.
    let volta = stripped(&strace, app, &["--arch", "sm_70", "--driver", "12.8"]);
    volta.assert_clean(app);
    volta.assert_all_built_by("exact-cubin", "sm_70", NVRTC_12);
    // An H100 on R580: the NVRTC 13 CUBINs, the newest toolchain the driver loads.
    let hopper = stripped(&strace, app, &["--arch", "sm_90", "--driver", "13.0"]);
    hopper.assert_clean(app);
    hopper.assert_all_built_by("exact-cubin", "sm_90", NVRTC_13);
    // The same H100 on R535 gets the NVRTC 12 CUBINs.
    let old = stripped(&strace, app, &["--arch", "sm_90", "--driver", "12.2"]);
    old.assert_clean(app);
    old.assert_all_built_by("exact-cubin", "sm_90", NVRTC_12);
    // A GPU newer than every CUBIN on R575 gets NVRTC 12.9's PTX (13.0's would
    // need R580); on R570 nothing loads, and Kiln says so itself.
    let newer = stripped(&strace, app, &["--arch", "sm_130", "--driver", "12.9"]);
    newer.assert_clean(app);
    newer.assert_all_built_by("ptx", "sm_50", NVRTC_12);
    let none = stripped(
        &strace,
        app,
        &["--arch", "sm_130", "--driver", "12.8", "--only", "relu_f32"],
    );
    assert!(!none.run.success, "nothing loads, yet it succeeded");
    let failed = none.run.events("kernel");
    let error = failed[0]["error"].as_str().unwrap_or_default();
    for needed in [
        "kernel kiln_relu_f32 for sm_130 with a driver for CUDA 12.8",
        "nothing shipped loads on sm_130 with a driver for CUDA 12.8",
        "NVRTC 13.0.88: PTX sm_75 (13.0+)",
        "NVRTC 12.9.86: PTX sm_50 (12.9+)",
        "could add a CUBIN for sm_130",
    ] {
        assert!(error.contains(needed), "{needed:?} missing from: {error}");
    }
    assert!(!error.contains("CUDA_ERROR"), "{error}");
    for library in ["kiln-kernels-demo", "kiln-activations-demo"] {
        let toolchains = volta.run.library(library)["toolchains"].clone();
        let cuda_12 = toolchains[1]["cubin_targets"]
            .as_array()
            .map(|t| t.iter().filter_map(|a| a.as_str()).collect::<Vec<_>>())
            .unwrap_or_default();
        assert_eq!(cuda_12, SHIPPED_CUDA_12, "{library}");
        assert_eq!(toolchains[1]["nvrtc"], NVRTC_12, "{library}");
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
