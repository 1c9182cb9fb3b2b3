//! The example application (`examples/kiln-demo-app`), built once per test
//! process, and its JSON output: shared by the end-to-end tests.

#![allow(dead_code)] // each test crate uses part of it

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// Whether NVRTC is here; under `CI=true` its absence is a failure. The
/// libraries' build scripts need it to precompile their images.
pub fn nvrtc_available() -> bool {
    let found =
        kiln::cuda::toolchain::locate_nvrtc(&kiln::cuda::toolchain::SearchConfig::from_env());
    kiln_test_support::ci::required(
        found,
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
    .is_some()
}

/// Builds the demo application once per test process (with the libraries'
/// default targets); its executable.
pub fn demo_app() -> &'static Path {
    static APP: OnceLock<PathBuf> = OnceLock::new();
    APP.get_or_init(|| build_demo_app(&[]))
}

/// Builds the demo application with the libraries' default targets (whatever
/// `KILN_CUDA_ARCHS` and `KILN_CUDA_DRIVERS` the tests run under) and the
/// variables `vars` set (the binary cargo writes is overwritten by the next
/// build: copy it to keep it); its executable.
pub fn build_demo_app(vars: &[(&str, &str)]) -> PathBuf {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .args([
            "build",
            "-p",
            "kiln-demo-app",
            "--message-format=json-render-diagnostics",
        ])
        .env_remove("KILN_DEMO_ARCHS")
        .env_remove("KILN_EMBED")
        .env_remove("KILN_CUDA_ARCHS")
        .env_remove("KILN_CUDA_DRIVERS")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stderr(Stdio::inherit());
    for (name, value) in vars {
        command.env(name, value);
    }
    let output = command.output().expect("cargo runs");
    assert!(output.status.success(), "building kiln-demo-app failed");
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|message| message["target"]["name"] == "kiln-demo-app")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .expect("cargo reports the kiln-demo-app executable")
}

/// One run of the application: its exit status, JSON lines and stderr.
pub struct Run {
    pub success: bool,
    pub lines: Vec<Value>,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Parses the output of one run (every stdout line must be JSON).
    pub fn parse(output: &Output) -> Run {
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        let lines = stdout
            .lines()
            .map(|line| {
                serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
            })
            .collect();
        Run {
            success: output.status.success(),
            lines,
            stdout,
            stderr,
        }
    }

    pub fn events(&self, event: &str) -> Vec<&Value> {
        self.lines
            .iter()
            .filter(|line| line["event"] == event)
            .collect()
    }

    pub fn one(&self, event: &str) -> &Value {
        let events = self.events(event);
        assert_eq!(
            events.len(),
            1,
            "one {event} line expected: {:#?}",
            self.lines
        );
        events[0]
    }

    /// The image line whose source mentions `name`.
    pub fn image(&self, name: &str) -> &Value {
        self.events("image")
            .into_iter()
            .find(|image| image["source"].as_str().is_some_and(|s| s.contains(name)))
            .unwrap_or_else(|| panic!("no image {name}: {:#?}", self.lines))
    }

    /// The library line of `name`: what its build recorded.
    pub fn library(&self, name: &str) -> &Value {
        self.events("library")
            .into_iter()
            .find(|library| library["name"] == name)
            .unwrap_or_else(|| panic!("no library {name}: {:#?}", self.lines))
    }

    /// The CUBIN targets library `name` ships.
    pub fn targets(&self, name: &str) -> Vec<String> {
        self.library(name)["cubin_targets"]
            .as_array()
            .map(|targets| {
                targets
                    .iter()
                    .filter_map(|t| t.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Kernel name -> outcome.
    pub fn outcomes(&self) -> Vec<(String, String)> {
        self.field_per_kernel("outcome")
    }

    /// Kernel name -> the value of `field` (a string) in its kernel line.
    pub fn field_per_kernel(&self, field: &str) -> Vec<(String, String)> {
        self.events("kernel")
            .into_iter()
            .map(|k| {
                (
                    k["name"].as_str().unwrap_or("?").to_owned(),
                    k[field].as_str().unwrap_or("?").to_owned(),
                )
            })
            .collect()
    }
}
