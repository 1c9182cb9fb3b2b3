//! Runs the bench driver in `--quick` mode (the synthetic set: no NVRTC) and
//! checks that every mode ran in fresh processes and the outputs exist.

use std::process::Command;

#[test]
fn quick_run_measures_every_mode_and_writes_json_and_svg() {
    let out = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_kiln-bench"))
        .args(["--quick", "--out"])
        .arg(out.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "kiln-bench failed: {stderr}");

    let json = std::fs::read_to_string(out.path().join("ttfk.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
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
            "postcard-image"
        ]
    );
    for mode in report["modes"].as_array().unwrap() {
        assert_eq!(mode["runs"], 3, "{mode}");
        assert_eq!(mode["kernels"], 64, "{mode}");
        // Every mode had the same bytes in hand: 64 artifacts of 4 KiB.
        assert_eq!(mode["bytes"], 64 * 4096, "{mode}");
        assert!(mode["total_ms"].as_f64().unwrap() > 0.0, "{mode}");
        assert!(mode["vs_cold"].as_f64().is_some(), "{mode}");
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

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("| kiln-file |"), "{stdout}");
}
