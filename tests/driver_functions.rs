//! Every CUDA driver function Kiln calls exists in the oldest driver it serves.
//!
//! cudarc resolves each driver function when it is first called, so the driver
//! an application needs is the one that has every function it calls. Kiln lists
//! them (`kiln::cuda::loader::DRIVER_FUNCTIONS`); this test checks that list
//! against cudarc's own bindings (a function cudarc declares only for newer CUDA
//! releases than the oldest served is refused) and against the example
//! application's binary: every driver function name it holds (the names cudarc
//! resolves, kept by the linker only when called) is on the list.
#![cfg(feature = "cuda")]

mod demo_app;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;

use kiln::cuda::loader::{DRIVER_FUNCTIONS, OLDEST_DRIVER_VERSION};

/// cudarc's driver bindings: each function it resolves by name, and whether its
/// declaration is limited to some CUDA releases (`None`: all of them), read from
/// the source cargo built it from.
fn cudarc_functions() -> BTreeMap<String, Option<String>> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    // This platform's dependencies only (the others' are not downloaded).
    let platform = format!("{}-unknown-linux-gnu", std::env::consts::ARCH);
    let output = Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--offline",
            "--filter-platform",
        ])
        .arg(platform)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        output.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata prints JSON");
    let manifest = metadata["packages"]
        .as_array()
        .expect("packages")
        .iter()
        .find(|p| p["name"] == "cudarc")
        .and_then(|p| p["manifest_path"].as_str())
        .map(PathBuf::from)
        .expect("cudarc is a dependency");
    let source = manifest
        .parent()
        .expect("cudarc's folder")
        .join("src/driver/sys/mod.rs");
    let text = std::fs::read_to_string(&source).expect("cudarc's driver bindings");
    let mut functions = BTreeMap::new();
    let mut pending_cfg: Option<String> = None;
    for line in text.lines() {
        let line = line.trim();
        if let Some(rest) = line.strip_prefix("#[cfg(any(") {
            pending_cfg = Some(rest.to_owned());
            continue;
        }
        if let Some(rest) = line.strip_prefix("pub unsafe fn ") {
            let name = rest.split('(').next().unwrap_or_default().to_owned();
            functions.insert(name, pending_cfg.take());
            continue;
        }
        if !line.starts_with('#') && !line.starts_with("///") && !line.is_empty() {
            pending_cfg = None;
        }
    }
    assert!(
        functions.len() > 400,
        "read {} functions from {}",
        functions.len(),
        source.display()
    );
    functions
}

/// The driver function names in a binary: the names of `known` that occur in
/// it (cudarc's names are stored back to back, without terminators).
fn names_in(binary: &[u8], known: &BTreeMap<String, Option<String>>) -> Vec<String> {
    let mut found = std::collections::BTreeSet::new();
    let mut at = 0;
    while at + 3 <= binary.len() {
        let is_start =
            binary[at] == b'c' && binary[at + 1] == b'u' && binary[at + 2].is_ascii_uppercase();
        if !is_start {
            at += 1;
            continue;
        }
        let mut end = at;
        while end < binary.len() && (binary[end].is_ascii_alphanumeric() || binary[end] == b'_') {
            end += 1;
        }
        let token = String::from_utf8_lossy(&binary[at..end]).into_owned();
        // The longest known name the token starts with; the rest is the next name.
        let name = (4..=token.len())
            .rev()
            .map(|len| &token[..len])
            .find(|prefix| known.contains_key(*prefix));
        match name {
            Some(name) => {
                found.insert(name.to_owned());
                at += name.len();
            }
            None => at += 1,
        }
    }
    found.into_iter().collect()
}

#[test]
fn every_driver_function_kiln_calls_is_in_the_oldest_driver_it_serves() {
    let cudarc = cudarc_functions();
    let oldest_feature = format!(
        "\"cuda-{}{:03}\"",
        OLDEST_DRIVER_VERSION / 1000,
        OLDEST_DRIVER_VERSION % 1000
    );
    for (name, since) in DRIVER_FUNCTIONS {
        assert!(
            *since <= OLDEST_DRIVER_VERSION,
            "{name} needs CUDA {since}, newer than the oldest driver served"
        );
        let declared = cudarc
            .get(*name)
            .unwrap_or_else(|| panic!("{name} is not one of cudarc's driver functions"));
        if let Some(releases) = declared {
            assert!(
                releases.contains(&oldest_feature),
                "cudarc declares {name} only for {releases}: not in a CUDA 12.0 driver"
            );
        }
    }

    let app = demo_app::demo_app();
    let binary = std::fs::read(app).expect("the application's binary");
    let called = names_in(&binary, &cudarc);
    let listed: Vec<&str> = DRIVER_FUNCTIONS.iter().map(|(name, _)| *name).collect();
    let unlisted: Vec<&String> = called
        .iter()
        .filter(|name| !listed.contains(&name.as_str()))
        .collect();
    assert!(
        unlisted.is_empty(),
        "the application can call driver functions not in DRIVER_FUNCTIONS: {unlisted:?}"
    );
    // The list is what is called: the context, a module load, a launch, the linker.
    for needed in [
        "cuDevicePrimaryCtxRetain",
        "cuModuleLoadData",
        "cuLaunchKernel",
        "cuLinkComplete",
        "cuMemcpyHtoDAsync_v2",
    ] {
        assert!(
            called.iter().any(|c| c == needed),
            "{needed} not found in {called:?}"
        );
    }
}

/// The library author's guide's table of the drivers and GPUs the example
/// libraries' default plan serves is what `kiln::cuda::select::coverage`
/// computes for it.
#[test]
fn the_guides_table_of_drivers_and_gpus_is_the_computed_coverage() {
    let record: kiln::cuda::toolchain::BuildRecord = "kiln-cuda-build/2 \
        nvrtc=13.0.88 cubin=sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_75 \
        nvrtc=12.9.86 cubin=sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120 ptx=sm_50"
        .parse()
        .expect("a record");
    let coverage = kiln::cuda::select::coverage::coverage(&record);
    assert!(coverage.check().is_ok());
    assert!(coverage.unserved().is_empty());
    let table = coverage.table();
    let guide = include_str!("../docs/library-author.md");
    assert!(
        guide.contains(&table),
        "docs/library-author.md's table is not the computed one; it should read:\n{table}"
    );
}
