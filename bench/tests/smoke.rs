//! Runs the bench driver in `--quick` mode (the synthetic set: no NVRTC) and
//! checks that every mode ran in fresh processes and the outputs exist; then
//! the Kiln modes on the real set, whose kernels the example library ships
//! (no NVRTC either), through its `KernelLibrary`.

use std::path::Path;
use std::process::Command;

/// Runs `kiln-bench --quick --out <out>` with `args`; returns the JSON report
/// and stdout.
fn quick_run(out: &Path, args: &[&str]) -> (serde_json::Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-bench"))
        .args(["--quick", "--out"])
        .arg(out)
        .args(args)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kiln-bench failed: {stderr}");
    let json = std::fs::read_to_string(out.join("ttfk.json")).unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    (serde_json::from_str(&json).unwrap(), stdout)
}

/// The variables a stripped mode's children had: `HOME`, `PATH` and the one
/// its cache needs, nothing else.
fn assert_stripped(mode: &serde_json::Value) {
    let names: Vec<&str> = mode["env_names"]
        .as_array()
        .unwrap_or_else(|| panic!("no env_names: {mode}"))
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    let expected: &[&str] = match mode["mode"].as_str().unwrap() {
        "kiln-embedded-stripped" => &["HOME", "PATH"],
        "kiln-file-stripped" => &["HOME", "KILN_IMAGE_PATH", "PATH"],
        "kiln-disk-stripped" => &["HOME", "KILN_CACHE_DIR", "PATH"],
        other => panic!("not a stripped mode: {other}"),
    };
    assert_eq!(names, expected, "{mode}");
}

#[test]
fn quick_run_measures_every_mode_and_writes_json_and_svg() {
    let out = tempfile::tempdir().unwrap();
    let (report, stdout) = quick_run(out.path(), &[]);
    assert_eq!(report["workload"], "synthetic");
    let modes: Vec<&str> = report["modes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mode"].as_str().unwrap())
        .collect();
    assert_eq!(
        modes,
        [
            "cold",
            "kiln-embedded",
            "kiln-file",
            "kiln-disk",
            "dir-cache",
            "postcard-image",
            "kiln-embedded-stripped",
            "kiln-file-stripped",
            "kiln-disk-stripped"
        ]
    );
    for mode in report["modes"].as_array().unwrap() {
        assert_eq!(mode["runs"], 3, "{mode}");
        assert_eq!(mode["kernels"], 64, "{mode}");
        // Every mode had the same bytes in hand: 64 artifacts of 4 KiB.
        assert_eq!(mode["bytes"], 64 * 4096, "{mode}");
        assert!(mode["total_ms"].as_f64().unwrap() > 0.0, "{mode}");
        assert!(mode["vs_cold"].as_f64().is_some(), "{mode}");
        // No NVRTC in any process: the synthetic set compiles without it.
        assert_eq!(mode["nvrtc_loaded_runs"], 0, "{mode}");
        // The example library's path is measured on the real set only.
        assert!(mode["library_call_us"].is_null(), "{mode}");
        if mode["stripped"] == true {
            assert_stripped(mode);
        } else {
            assert!(mode["env_names"].is_null(), "{mode}");
        }
    }
    let scaling = report["scaling"].as_array().unwrap();
    assert_eq!(scaling.len(), 4, "two formats at 100 and 1000 entries");
    let rss = report["rss"].as_array().unwrap();
    assert_eq!(rss.len(), 4, "two formats, page cache hot and evicted");
    for row in rss {
        assert!(row["image_bytes"].as_u64().unwrap() >= 16 << 20, "{row}");
        assert_eq!(row["touched"], 3, "1% of 256 entries, rounded up: {row}");
        assert_eq!(row["touched_bytes"], 3 * 64 * 1024, "{row}");
    }
    assert_eq!(report["machine"]["gpu"], "no GPU");

    let svg = std::fs::read_to_string(out.path().join("ttfk.svg")).unwrap();
    assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(80)]);
    assert!(svg.contains("kiln-embedded") && svg.contains("postcard-image"));
    assert!(svg.contains("kiln-disk-stripped"));

    assert!(stdout.contains("| kiln-file | developer |"), "{stdout}");
    assert!(
        stdout.contains("| kiln-file-stripped | stripped |"),
        "{stdout}"
    );
    assert!(stdout.contains("load average (1 min)"), "{stdout}");
}

#[test]
fn kiln_modes_serve_the_real_set_through_the_library_without_nvrtc() {
    let record = kiln_kernels_demo::library().record().unwrap();
    let shipped = kiln::cuda::Toolchain::recorded(record)
        .map(|_| ())
        .ok_or("kiln-kernels-demo was built without NVRTC: it ships no kernels");
    if kiln_test_support::ci::required(shipped, "the example library's shipped kernels").is_none() {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let modes = [
        "kiln-embedded",
        "kiln-file",
        "kiln-disk",
        "kiln-embedded-stripped",
        "kiln-file-stripped",
        "kiln-disk-stripped",
    ];
    let (report, _) = quick_run(
        out.path(),
        &["--workload", "real", "--modes", &modes.join(",")],
    );
    assert_eq!(report["workload"], "real");
    let rows = report["modes"].as_array().unwrap();
    let measured: Vec<&str> = rows.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(measured, modes);
    let bytes = &rows[0]["bytes"];
    for mode in rows {
        assert_eq!(mode["runs"], 3, "{mode}");
        assert_eq!(mode["kernels"], 11, "{mode}");
        // The same CUBINs in hand in every mode and environment.
        assert_eq!(&mode["bytes"], bytes, "{mode}");
        // Each child asked the library for every kernel (and checked that it
        // served the entry the lookups found), once and then repeatedly.
        assert!(mode["library_first_us"].as_f64().unwrap() > 0.0, "{mode}");
        assert!(mode["library_call_us"].as_f64().unwrap() > 0.0, "{mode}");
        // All shipped: no process loaded NVRTC, even where it was reachable.
        assert_eq!(mode["nvrtc_loaded_runs"], 0, "{mode}");
        if mode["stripped"] == true {
            assert_stripped(mode);
        }
    }
    let repeated = report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| {
            t["what"]
                .as_str()
                .unwrap()
                .contains("repeated KernelLibrary::get")
        })
        .count();
    assert_eq!(repeated, modes.len(), "one repeated-call check per mode");
}

#[test]
fn the_whole_library_bench_gets_every_kernel_in_fresh_processes() {
    let out = tempfile::tempdir().unwrap();
    let json = out.path().join("library.json");
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-bench-library"))
        .args(["--runs", "1", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kiln-bench-library failed: {stderr}"
    );
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("| stripped | 1 |"), "{stdout}");
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let summaries = report["summaries"].as_array().unwrap();
    let envs: Vec<&str> = summaries
        .iter()
        .map(|s| s["env"].as_str().unwrap())
        .collect();
    assert_eq!(envs, ["developer", "stripped"]);
    for summary in summaries {
        assert_eq!(summary["kernels"], 608, "{summary}");
        assert_eq!(summary["programs"], 11, "{summary}");
        for field in ["in_hand_ms", "kernel_first_us", "repeat_us", "derived_ms"] {
            assert!(summary[field].as_f64().unwrap() > 0.0, "{field}: {summary}");
        }
    }
    // Each child checked every kernel it was served, compiled nothing and
    // loaded no NVRTC (the driver refuses a child that did).
    for child in report["stripped"].as_array().unwrap() {
        assert_eq!(child["compiles"], 0, "{child}");
        assert_eq!(child["nvrtc_loaded"], false, "{child}");
    }
}

#[test]
fn the_embed_bench_child_serves_every_kernel_from_its_compressed_image() {
    // The child alone (the driver also builds a plain variant with cargo).
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-bench-embed"))
        .arg("--child")
        .env_remove("KILN_DISABLE")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kiln-bench-embed failed: {stderr}");
    let child: serde_json::Value =
        serde_json::from_str(String::from_utf8_lossy(&output.stdout).trim()).unwrap();
    assert_eq!(child["kernels"], 608, "{child}");
    assert_eq!(child["compiles"], 0, "{child}");
    // Compressed unless the suite was built with `KILN_EMBED=plain`.
    if option_env!("KILN_EMBED") != Some("plain") {
        assert_eq!(child["compressed"], true, "{child}");
        let groups = child["groups"].as_u64().unwrap();
        let raw = child["raw_payload_bytes"].as_u64().unwrap();
        // Every group holds at most 1 MiB but for a single larger entry.
        assert!(groups >= raw >> 20, "{child}");
        assert!(
            child["embedded_bytes"].as_u64().unwrap() * 10 < raw,
            "{child}"
        );
    }
    for field in ["first_ns", "in_hand_ns", "first_cpu_ns", "in_hand_cpu_ns"] {
        assert!(child[field].as_u64().unwrap() > 0, "{field}: {child}");
    }
}
