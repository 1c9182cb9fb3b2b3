//! The demo libraries' images as the application embeds them: both toolchains'
//! entries (NVRTC 13 for sm_75 to sm_120, NVRTC 12 for sm_50 to sm_120), every
//! CUBIN's ELF header naming the arch its entry was built for, and the build
//! record naming both toolchains with their header sets.
//!
//! Needs the libraries' build to have had their shipped images (always) and
//! NVRTC for the skip rule of the other end-to-end tests; under `CI=true` a
//! missing NVRTC fails.
#![cfg(feature = "cuda")]

mod demo_app;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use kiln_image::{ArtifactKind, Image, Verification};

/// Held by each test for its whole run: both build the demo libraries into
/// the same target folder (the second with other switches, then back to the
/// default), so one must not read an image while the other rebuilds it.
static BUILDS: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`BUILDS`], also after a test that held it failed.
fn builds() -> std::sync::MutexGuard<'static, ()> {
    BUILDS
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The newest image `name.kimg` a build of `name` left in `build`.
fn built_image(build: &Path, name: &str) -> PathBuf {
    let mut found: Vec<(std::time::SystemTime, PathBuf)> = std::fs::read_dir(build)
        .expect("the build folder")
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| n.starts_with(&format!("{name}-")))
        })
        .map(|e| e.path().join("out").join(format!("{name}.kimg")))
        .filter(|p| p.is_file())
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, path)| path)
        .unwrap_or_else(|| panic!("no {name}.kimg below {}", build.display()))
}

#[test]
fn both_toolchains_ship_and_each_cubin_names_the_arch_it_was_built_for() {
    if !demo_app::nvrtc_available() {
        return;
    }
    let _builds = builds();
    let app = demo_app::demo_app();
    let build = app.parent().expect("the profile folder").join("build");
    for (library, entries) in [("kiln-kernels-demo", 187), ("kiln-activations-demo", 136)] {
        let path = built_image(&build, library);
        let image = Image::open(&path, Verification::Full).expect("a sound image");
        assert_eq!(image.len(), entries, "{library}");
        // Per NVRTC release, the archs of its entries.
        let mut per_release: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut checked = 0;
        for entry in image.entries() {
            let entry = entry.expect("an entry");
            let (owner, target) = entry
                .owner_label()
                .split_once('/')
                .expect("nvrtc-<release>/<arch>");
            let release = owner.strip_prefix("nvrtc-").expect("an NVRTC owner");
            per_release
                .entry(release.to_owned())
                .or_default()
                .push(target.to_owned());
            let arch: kiln::cuda::Arch = target.parse().expect("an arch");
            for artifact in entry.artifacts() {
                if artifact.kind() != ArtifactKind::Cubin {
                    continue;
                }
                let bytes = artifact.bytes().expect("a checked payload");
                assert_eq!(
                    kiln::cuda::cubin::sm(bytes),
                    Some(arch.major() * 10 + arch.minor()),
                    "{library}: {} for {target} by NVRTC {release}",
                    entry.name()
                );
                checked += 1;
            }
        }
        assert_eq!(checked, entries, "{library}: one CUBIN per entry");
        let archs = |release: &str| {
            let mut archs = per_release.get(release).cloned().unwrap_or_default();
            archs.sort();
            archs.dedup();
            archs
        };
        let mut thirteen = archs("13.0.88");
        let mut twelve = archs("12.9.86");
        let sort =
            |list: &mut Vec<String>| list.sort_by_key(|a| a.parse::<kiln::cuda::Arch>().ok());
        sort(&mut thirteen);
        sort(&mut twelve);
        assert_eq!(
            thirteen,
            [
                "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100", "sm_120"
            ]
        );
        assert_eq!(
            twelve,
            [
                "sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_89", "sm_90", "sm_100",
                "sm_120"
            ]
        );
        assert_eq!(per_release.len(), 2, "{library}: {:?}", per_release.keys());
    }
    // The record the kernels library embeds: both toolchains, each with its own
    // CCCL digest (CCCL 3 for NVRTC 13, CCCL 2 for NVRTC 12).
    let output = kiln_test_support::library::build_script_output(&build, "kiln-kernels-demo")
        .unwrap_or_else(|e| panic!("{e}"));
    let text = output
        .lines()
        .find_map(|line| line.strip_prefix("cargo::rustc-env=KILN_CUDA_BUILD="))
        .expect("the build record");
    let record: kiln::cuda::toolchain::BuildRecord = text.parse().expect("a record");
    let cccl: Vec<_> = record
        .toolchains()
        .iter()
        .map(|t| t.header_set(kiln::cuda::toolchain::CCCL))
        .collect();
    assert_eq!(cccl.len(), 2);
    assert!(cccl.iter().all(Option::is_some), "{record}");
    assert_ne!(cccl[0], cccl[1], "each toolchain keys with its own headers");
    assert_eq!(record.oldest_driver(), 12000);
}

/// NVRTC 13.5, installed apart by `scripts/install-cuda-wheels.sh --nvrtc-into
/// target/nvrtc-13.5 13.5.37` (`scripts/test.sh` does it).
fn nvrtc_13_5() -> Option<PathBuf> {
    let target = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("the target folder")
        .to_path_buf();
    let library = target.join("nvrtc-13.5/nvidia/cu13/lib/libnvrtc.so.13");
    kiln_test_support::ci::required(
        if library.is_file() {
            Ok(library)
        } else {
            Err(format!("no {}", library.display()))
        },
        "NVRTC 13.5 (scripts/install-cuda-wheels.sh --nvrtc-into target/nvrtc-13.5 13.5.37)",
    )
}

/// `cargo build -p kiln-activations-demo` with `vars`: its exit status, stderr and
/// its block's output.
fn build_activations(vars: &[(&str, &std::ffi::OsStr)]) -> (bool, String, String) {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = std::process::Command::new(cargo);
    command
        .args(["build", "--offline", "-p", "kiln-activations-demo"])
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for name in [
        "KILN_NVRTC",
        "KILN_DEMO_ARCHS",
        "KILN_DEMO_OLDEST_DRIVER",
        "KILN_IGNORE_SHIPPED",
        "KILN_ALWAYS_COMPILE",
        "KILN_CUDA_ARCHS",
        "KILN_CUDA_DRIVERS",
        "KILN_SHIP_CANDIDATE",
    ] {
        command.env_remove(name);
    }
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().expect("cargo runs");
    let app = demo_app::demo_app();
    let build = app.parent().expect("the profile folder").join("build");
    let log = kiln_test_support::library::build_script_output(&build, "kiln-activations-demo")
        .unwrap_or_default();
    (
        output.status.success(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
        log,
    )
}

/// The author on today's NVRTC (13.5): PTX that an R580 driver cannot JIT fails
/// the build, before anything compiles, saying how to fix it; stating 13.5 as the
/// oldest driver served builds. `KILN_ALWAYS_COMPILE` with that NVRTC compiles
/// every entry under its own identity (never an empty image).
#[test]
fn ptx_newer_than_the_oldest_driver_fails_the_build_and_always_compile_uses_the_local_nvrtc() {
    if !demo_app::nvrtc_available() {
        return;
    }
    let _builds = builds();
    let Some(nvrtc) = nvrtc_13_5() else { return };
    let nvrtc = nvrtc.as_os_str();
    let yes = std::ffi::OsStr::new("1");
    let archs = std::ffi::OsStr::new("sm_80,sm_86");
    let (ok, stderr, _) = build_activations(&[
        ("KILN_NVRTC", nvrtc),
        ("KILN_IGNORE_SHIPPED", yes),
        ("KILN_DEMO_ARCHS", archs),
    ]);
    assert!(!ok, "the build succeeded");
    for needed in [
        "the build states it serves drivers from CUDA 13.0 (R580)",
        "sm_90 on drivers for CUDA 13.0, 13.1, 13.2, 13.3, 13.4",
        "produced by NVRTC 13.5.37",
        "ship a CUBIN for sm_90",
        "ShipPlan::with_oldest_driver",
    ] {
        assert!(
            stderr.contains(needed),
            "{needed:?} missing from:\n{stderr}"
        );
    }
    assert!(
        !stderr.contains("ready in"),
        "it compiled before failing:\n{stderr}"
    );

    let (ok, stderr, log) = build_activations(&[
        ("KILN_NVRTC", nvrtc),
        ("KILN_IGNORE_SHIPPED", yes),
        ("KILN_DEMO_ARCHS", archs),
        ("KILN_DEMO_OLDEST_DRIVER", std::ffi::OsStr::new("13.5")),
    ]);
    assert!(ok, "{stderr}");
    assert!(
        log.contains("16 entries (") && log.contains("0 missing, 0 failed)"),
        "{log}"
    );
    assert!(log.contains("serves drivers from CUDA 13.5"), "{log}");

    // The shipped image was built by 13.0.88 and 12.9.86; KILN_ALWAYS_COMPILE
    // compiles every entry with this machine's NVRTC 13.5 (and 12.9).
    let (ok, stderr, log) =
        build_activations(&[("KILN_NVRTC", nvrtc), ("KILN_ALWAYS_COMPILE", yes)]);
    assert!(ok, "{stderr}");
    assert!(
        log.contains(
            "136 entries (0 from shipped, 0 from disk, 136 compiled, 0 missing, 0 failed)"
        ),
        "{log}"
    );
    let record = log
        .lines()
        .find_map(|line| line.strip_prefix("cargo::rustc-env=KILN_CUDA_BUILD="))
        .expect("a record");
    assert!(
        record.contains("nvrtc=13.5.37") && record.contains("nvrtc=12.9.86"),
        "{record}"
    );
    // Back to the shipped build for the other tests.
    let (ok, stderr, _) = build_activations(&[]);
    assert!(ok, "{stderr}");
}
