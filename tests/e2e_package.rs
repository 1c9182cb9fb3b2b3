//! The example libraries as their users get them: packaged with `cargo
//! package`, unpacked from their `.crate` files, and built into the example
//! application on a build machine that has nothing but cargo and a Rust
//! toolchain (a fresh `HOME`, `PATH` the toolchain's folder, `/usr/bin` and
//! `/bin`, no network, no NVRTC, no CUDA headers, no Python wheel, `DOCS_RS`
//! set).
//!
//! - The build scripts take every entry from the libraries' shipped images:
//!   they compile nothing and open no NVRTC, Python or header (`strace`), and
//!   write nothing into the packages; the application, run stripped, serves
//!   every kernel from its images for an exact, a compatible and a PTX-only
//!   arch.
//! - A specialization edited after shipping: with NVRTC only its entries
//!   compile; without, a warning names each of them and the rest ships.
//! - A request with an option NVRTC refuses fails the build with NVRTC's
//!   message.
//!
//! Needs NVRTC (the edited case compiles), `strace` and `tar`; without them
//! the tests skip, except under `CI=true`, where they fail.
#![cfg(feature = "cuda")]

mod demo_app;
mod stripped;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard, OnceLock};

use kiln::image::Digest;
use stripped::{KERNELS, PTX_TARGET, stripped};

/// Every package the application's build needs from this repository, as it
/// would come from a registry.
const PACKAGES: [&str; 10] = [
    "kiln-rs",
    "kiln-image",
    "kiln-ship",
    "kiln-rs-core",
    "kiln-macros",
    "kiln-cuda",
    "kiln-redis",
    "kiln-kernel-set",
    "kiln-kernels-demo",
    "kiln-activations-demo",
];

/// The two libraries with shipped images, and their entries (7 NVRTC 13
/// targets and 10 NVRTC 12 ones).
const LIBRARIES: [(&str, usize); 2] = [("kiln-kernels-demo", 187), ("kiln-activations-demo", 136)];

/// The packages, unpacked once per test process, and the scratch folder
/// they live in (kept between runs under cargo's target folder, so that the
/// application's dependencies compile once).
struct Packaged {
    root: PathBuf,
    crates: PathBuf,
}

/// The tests build in one scratch target folder: one at a time.
fn packaged() -> Option<(MutexGuard<'static, ()>, &'static Packaged)> {
    static LOCK: Mutex<()> = Mutex::new(());
    static PACKAGED: OnceLock<Packaged> = OnceLock::new();
    // NVRTC (the edited library compiles) and strace, or skip (fail in CI).
    if !demo_app::nvrtc_available() {
        return None;
    }
    stripped::strace()?;
    let tar = ["/usr/bin/tar", "/bin/tar"]
        .into_iter()
        .find(|path| Path::new(path).is_file())
        .ok_or("not in /usr/bin or /bin");
    kiln_test_support::ci::required(tar, "tar")?;
    let guard = LOCK.lock().unwrap_or_else(|e| e.into_inner());
    Some((guard, PACKAGED.get_or_init(package)))
}

fn cargo() -> OsString {
    std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into())
}

/// `cargo package` of [`PACKAGES`] (as a publish would, without its
/// verification build: the builds below are that), unpacked.
fn package() -> Packaged {
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("e2e-package");
    let crates = root.join("crates");
    let _ = std::fs::remove_dir_all(&crates);
    std::fs::create_dir_all(&crates).expect("scratch folder");
    let mut command = Command::new(cargo());
    command
        .args([
            "package",
            "--no-verify",
            "--allow-dirty",
            "--offline",
            "--target-dir",
        ])
        .arg(root.join("package-target"))
        .current_dir(env!("CARGO_MANIFEST_DIR"));
    for package in PACKAGES {
        command.args(["-p", package]);
    }
    let output = command.output().expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo package failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for package in PACKAGES {
        let file = root
            .join("package-target/package")
            .join(format!("{package}-0.1.0.crate"));
        let status = Command::new("tar")
            // --touch: the unpacked files are newer than any earlier build of
            // them in the scratch target folder, which cargo then rebuilds.
            .args(["--touch", "-xzf"])
            .arg(&file)
            .arg("-C")
            .arg(&crates)
            .status()
            .expect("tar runs");
        assert!(status.success(), "unpacking {}", file.display());
    }
    for (library, _) in LIBRARIES {
        let shipped = crates
            .join(format!("{library}-0.1.0/kiln-shipped"))
            .join(format!("{library}.kship"));
        assert!(shipped.is_file(), "the package holds {}", shipped.display());
    }
    Packaged { root, crates }
}

impl Packaged {
    /// The example application as a downstream project: its sources, and a
    /// manifest that depends on the libraries by version from a registry,
    /// which here are the unpacked packages (except those `replaced`:
    /// package, folder).
    fn app(&self, name: &str, replaced: &[(&str, &Path)]) -> PathBuf {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let app = self.root.join(name);
        let _ = std::fs::remove_dir_all(&app);
        copy_dir(&repo.join("examples/kiln-demo-app/src"), &app.join("src"));
        // The registry dependencies as the workspace names them.
        let workspace = std::fs::read_to_string(repo.join("Cargo.toml")).expect("manifest");
        let spec = |name: &str| -> String {
            workspace
                .lines()
                .find(|line| line.starts_with(&format!("{name} = ")))
                .unwrap_or_else(|| panic!("the workspace names no {name}"))
                .to_owned()
        };
        let mut manifest = format!(
            "[package]\nname = \"kiln-demo-app\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
             publish = false\n\n[dependencies]\n\
             kiln = {{ package = \"kiln-rs\", version = \"0.1.0\", features = [\"cuda\"] }}\n\
             kiln-kernels-demo = \"0.1.0\"\nkiln-activations-demo = \"0.1.0\"\n\
             kiln-kernel-set = \"0.1.0\"\n{}\n{}\n{}\n\n[workspace]\n\n[patch.crates-io]\n",
            spec("clap"),
            spec("serde_json"),
            spec("cudarc"),
        );
        for package in PACKAGES {
            let dir = replaced
                .iter()
                .find(|(name, _)| name == &package)
                .map(|(_, dir)| dir.to_path_buf())
                .unwrap_or_else(|| self.crates.join(format!("{package}-0.1.0")));
            manifest.push_str(&format!("{package} = {{ path = {:?} }}\n", dir));
        }
        std::fs::write(app.join("Cargo.toml"), manifest).expect("manifest");
        std::fs::copy(repo.join("Cargo.lock"), app.join("Cargo.lock")).expect("lockfile");
        app
    }

    /// A copy of an unpacked library, `edit`ed, as a library's author would
    /// change it after shipping.
    fn edited(&self, library: &str, name: &str, edit: impl Fn(String) -> String) -> PathBuf {
        let dir = self.root.join(name).join(format!("{library}-0.1.0"));
        let _ = std::fs::remove_dir_all(&dir);
        copy_dir(&self.crates.join(format!("{library}-0.1.0")), &dir);
        let source = dir.join("src/generate.rs");
        let text = std::fs::read_to_string(&source).expect("source");
        let changed = edit(text.clone());
        assert_ne!(changed, text, "the edit changed nothing");
        std::fs::write(&source, changed).expect("source");
        dir
    }

    fn target(&self) -> PathBuf {
        self.root.join("target")
    }
}

/// How a build runs: stripped (nothing but cargo, the toolchain and
/// `/usr/bin:/bin`), or with this machine's environment (NVRTC found as the
/// test suite finds it) and a private disk cache.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Machine {
    Stripped,
    WithToolchain,
}

/// `cargo build` of the application in `app` on `machine`; with `trace`,
/// under `strace -f`, whose log it returns.
fn build(packaged: &Packaged, app: &Path, machine: Machine, trace: Option<&Path>) -> Output {
    build_with(packaged, app, machine, trace, &[])
}

/// [`build`] with more variables set.
fn build_with(
    packaged: &Packaged,
    app: &Path,
    machine: Machine,
    trace: Option<&Path>,
    vars: &[(&str, &Path)],
) -> Output {
    let cargo = PathBuf::from(cargo());
    let mut command = match trace {
        Some(log) => {
            let mut command = Command::new("strace");
            command
                .args(["-f", "-qq", "-e", "trace=%file,execve", "-o"])
                .arg(log)
                .arg(&cargo);
            command
        }
        None => Command::new(&cargo),
    };
    command
        .args(["build", "--offline"])
        .current_dir(app)
        .env("CARGO_TARGET_DIR", packaged.target());
    let home = packaged.root.join("home");
    let _ = std::fs::remove_dir_all(&home);
    std::fs::create_dir_all(&home).expect("home");
    match machine {
        Machine::Stripped => {
            let toolchain = cargo
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("/usr/bin"));
            let cargo_home = std::env::var_os("CARGO_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cargo")))
                .expect("a cargo home with the registry's cached packages");
            let mut path = OsString::from(toolchain);
            path.push(":/usr/bin:/bin");
            command
                .env_clear()
                .env("HOME", &home)
                .env("PATH", path)
                .env("CARGO_HOME", cargo_home)
                .env("CARGO_TARGET_DIR", packaged.target())
                .env("DOCS_RS", "1");
        }
        Machine::WithToolchain => {
            command
                .env("KILN_CACHE_DIR", home.join("kiln-cache"))
                .env_remove("KILN_CUDA_ARCHS")
                .env_remove("KILN_IGNORE_SHIPPED")
                .env_remove("KILN_SHIP_CANDIDATE");
        }
    }
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("cargo runs")
}

/// Removes what the builds of `libraries` left, so that their build scripts
/// run again.
fn clean(packaged: &Packaged, app: &Path, libraries: &[&str]) {
    let mut command = Command::new(cargo());
    command
        .args(["clean", "--offline"])
        .current_dir(app)
        .env("CARGO_TARGET_DIR", packaged.target());
    for library in libraries {
        command.args(["-p", library]);
    }
    let output = command.output().expect("cargo runs");
    assert!(
        output.status.success(),
        "cargo clean failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The output of the latest run of `library`'s build script.
fn build_output(packaged: &Packaged, library: &str) -> String {
    kiln_test_support::library::build_script_output(&packaged.target().join("debug/build"), library)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The summary line of a build script's output.
fn summary(output: &str) -> &str {
    output
        .lines()
        .rev()
        .find(|line| line.contains("kiln: kiln-") && line.contains(" entries ("))
        .unwrap_or_else(|| panic!("no summary line in\n{output}"))
}

/// Every file below `dir` and the digest of its content.
fn digests(dir: &Path) -> BTreeMap<PathBuf, Digest> {
    let mut all = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("folder").flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).expect("file");
                all.insert(path, Digest::of(&bytes));
            }
        }
    }
    all
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("folder");
    for entry in std::fs::read_dir(from).expect("folder").flatten() {
        let path = entry.path();
        let target = to.join(entry.file_name());
        if path.is_dir() {
            copy_dir(&path, &target);
        } else {
            std::fs::copy(&path, &target).expect("copy");
        }
    }
}

/// The processes of a `strace -f` log that ran a build script of one of
/// `libraries`, and every file they touched or program they ran.
fn build_script_activity(trace: &str, libraries: &[&str]) -> Vec<String> {
    let pids: Vec<&str> = trace
        .lines()
        .filter(|line| {
            line.contains("execve(")
                && line.contains("build-script-build")
                && libraries
                    .iter()
                    .any(|library| line.contains(&format!("/{library}-")))
        })
        .filter_map(|line| line.split_whitespace().next())
        .collect();
    assert!(!pids.is_empty(), "no build script ran under strace");
    trace
        .lines()
        .filter(|line| {
            line.split_whitespace()
                .next()
                .is_some_and(|pid| pids.contains(&pid))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_build_machine_with_no_toolchain_builds_from_the_shipped_images_and_serves_every_kernel() {
    let Some((_lock, packaged)) = packaged() else {
        return;
    };
    let Some(strace) = stripped::strace() else {
        return;
    };
    let app = packaged.app("app", &[]);
    let before = digests(&packaged.crates);

    // Every dependency, stripped.
    let output = build(packaged, &app, Machine::Stripped, None);
    assert!(
        output.status.success(),
        "the stripped build failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    // The libraries' build scripts again, traced.
    clean(
        packaged,
        &app,
        &["kiln-kernels-demo", "kiln-activations-demo"],
    );
    let log = packaged.root.join("build.trace");
    let output = build(packaged, &app, Machine::Stripped, Some(&log));
    assert!(
        output.status.success(),
        "the traced stripped build failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for (library, entries) in LIBRARIES {
        let output = build_output(packaged, library);
        assert!(
            summary(&output).starts_with(&format!(
                "kiln: {library}: {entries} entries ({entries} from shipped, 0 from disk, 0 compiled, 0 missing, 0 failed)"
            )),
            "{output}"
        );
        assert!(!output.contains("cargo::warning"), "{output}");
    }
    let trace = std::fs::read_to_string(&log).expect("strace log");
    let activity = build_script_activity(&trace, &["kiln-kernels-demo", "kiln-activations-demo"]);
    let forbidden: Vec<&String> = activity
        .iter()
        .filter(|line| {
            let lower = line.to_ascii_lowercase();
            stripped::NEVER_TOUCHED
                .iter()
                .any(|part| lower.contains(part))
        })
        .collect();
    assert!(
        forbidden.is_empty(),
        "the build scripts touched a toolchain: {forbidden:#?}"
    );
    let ran: Vec<&String> = activity
        .iter()
        .filter(|line| line.contains("execve(") && !line.contains("= -1"))
        .filter(|line| !line.contains("build-script-build"))
        .collect();
    assert!(ran.is_empty(), "the build scripts ran programs: {ran:#?}");
    assert_eq!(
        digests(&packaged.crates),
        before,
        "a build wrote into a package's source"
    );

    // The application as on a production machine.
    let binary = packaged.target().join("debug/kiln-demo-app");
    for (arch, selection, target) in [
        ("sm_90", "exact-cubin", "sm_90"),
        ("sm_87", "compatible-cubin", "sm_86"),
        ("sm_110", "ptx", PTX_TARGET),
    ] {
        let run = stripped(&strace, &binary, &["--arch", arch]);
        run.assert_clean(&binary);
        run.assert_all_from_images(selection, target);
        assert_eq!(run.run.events("kernel").len(), KERNELS);
    }
}

/// The relu kernels (f32 and f64) of the activations library, changed.
fn leaky_relu(source: String) -> String {
    source.replace(
        r#"Activation::Relu => format!("v > ({t})0 ? v : ({t})0"),"#,
        r#"Activation::Relu => format!("v > ({t})0 ? v : ({t})0.01 * v"),"#,
    )
}

#[test]
fn a_specialization_changed_after_shipping_compiles_alone_or_is_named_as_missing() {
    let Some((_lock, packaged)) = packaged() else {
        return;
    };
    let edited = packaged.edited("kiln-activations-demo", "edited", leaky_relu);
    let app = packaged.app("app-edited", &[("kiln-activations-demo", &edited)]);
    let changed = changed_relu();

    let output = build(packaged, &app, Machine::Stripped, None);
    assert!(
        output.status.success(),
        "a missing toolchain failed the build:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = build_output(packaged, "kiln-activations-demo");
    assert!(
        summary(&log).starts_with(
            "cargo::warning=kiln: kiln-activations-demo: 102 entries (102 from shipped, 0 from disk, 0 compiled, 34 missing, 0 failed)"
        ),
        "{log}"
    );
    // One warning per reason (the NVRTC of each CUDA major was searched for).
    let warning: String = log
        .lines()
        .filter(|l| l.starts_with("cargo::warning=kiln: kiln-activations-demo: not precompiled ("))
        .collect::<Vec<_>>()
        .join("\n");
    assert!(
        !warning.is_empty(),
        "no warning naming the missing kernels:\n{log}"
    );
    for label in &changed {
        assert!(
            warning.contains(label.as_str()),
            "{label} not named: {warning}"
        );
    }
    assert!(warning.contains("NVRTC (libnvrtc) not found"), "{warning}");
    assert!(
        log.contains("src/generate.rs changed since it was shipped"),
        "{log}"
    );

    clean(packaged, &app, &["kiln-activations-demo"]);
    let output = build(packaged, &app, Machine::WithToolchain, None);
    assert!(
        output.status.success(),
        "the build with NVRTC failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = build_output(packaged, "kiln-activations-demo");
    assert!(
        summary(&log).starts_with(
            "kiln: kiln-activations-demo: 136 entries (102 from shipped, 0 from disk, 34 compiled, 0 missing, 0 failed)"
        ),
        "{log}"
    );
}

/// The relu kernels' (f32 and f64) entries: 2 specializations × (7 NVRTC 13
/// targets + 10 NVRTC 12 ones), as the block labels them.
fn changed_relu() -> Vec<String> {
    ["f32", "f64"]
        .iter()
        .flat_map(|float| {
            let thirteen = stripped::SHIPPED
                .iter()
                .map(move |target| format!("kiln_relu_{float} {target} cuda13"));
            let twelve = stripped::SHIPPED_CUDA_12
                .iter()
                .map(move |target| format!("kiln_relu_{float} {target} cuda12"));
            thirteen.chain(twelve)
        })
        .collect()
}

/// The site-packages folder whose `nvidia/` holds this machine's NVRTC wheels
/// (CUDA 13's and CUDA 12's).
fn wheels_site() -> Option<PathBuf> {
    kiln::cuda::toolchain::SearchConfig::from_env()
        .site_packages
        .into_iter()
        .find(|site| {
            site.join("nvidia/cu13/lib").is_dir() && site.join("nvidia/cuda_nvrtc/lib").is_dir()
        })
}

#[test]
fn a_toolchain_appearing_reruns_the_block_without_clean_or_a_variable() {
    let Some((_lock, packaged)) = packaged() else {
        return;
    };
    let Some(site) = kiln_test_support::ci::required(
        wheels_site().ok_or("no site-packages folder holds nvidia/cu13 and nvidia/cuda_nvrtc"),
        "the NVRTC wheels (run scripts/install-cuda-wheels.sh)",
    ) else {
        return;
    };
    let edited = packaged.edited("kiln-activations-demo", "rerun", leaky_relu);
    let app = packaged.app("app-rerun", &[("kiln-activations-demo", &edited)]);
    // A fresh virtualenv, found by the search through VIRTUAL_ENV, without the
    // wheels yet.
    let venv = packaged.root.join("venv-rerun");
    let _ = std::fs::remove_dir_all(&venv);
    let venv_site = venv.join("lib/python3.11/site-packages");
    std::fs::create_dir_all(&venv_site).expect("site-packages");
    let vars: [(&str, &Path); 1] = [("VIRTUAL_ENV", &venv)];

    let output = build_with(packaged, &app, Machine::Stripped, None, &vars);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = build_output(packaged, "kiln-activations-demo");
    assert!(
        summary(&log).contains(
            "102 entries (102 from shipped, 0 from disk, 0 compiled, 34 missing, 0 failed)"
        ),
        "{log}"
    );
    assert!(
        log.contains(&format!("cargo::rerun-if-changed={}", venv_site.display())),
        "the block watches where NVRTC would appear:\n{log}"
    );

    // The wheels installed into the virtualenv; the same build again: the block
    // reruns by itself and compiles what was missing.
    std::os::unix::fs::symlink(site.join("nvidia"), venv_site.join("nvidia")).expect("install");
    let output = build_with(packaged, &app, Machine::Stripped, None, &vars);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let log = build_output(packaged, "kiln-activations-demo");
    assert!(
        summary(&log).contains(
            "136 entries (102 from shipped, 0 from disk, 34 compiled, 0 missing, 0 failed)"
        ),
        "the block did not rerun, or did not compile:\n{log}"
    );
    // Nothing missing any more: nothing watched but the toolchain used.
    assert!(
        !log.contains(&format!(
            "cargo::rerun-if-changed={}\n",
            venv_site.display()
        )),
        "{log}"
    );
}

#[test]
fn an_option_nvrtc_refuses_fails_the_build_with_its_message() {
    let Some((_lock, packaged)) = packaged() else {
        return;
    };
    let edited = packaged.edited("kiln-activations-demo", "refused", |source| {
        leaky_relu(source).replace(
            "KernelRequest::new(self.name(), self.source(), arch)",
            "KernelRequest::new(self.name(), self.source(), arch)\n            \
             .options([\"--std=c++99\"])\n            \
             .unwrap_or_else(|e| panic!(\"{e}\"))",
        )
    });
    let app = packaged.app("app-refused", &[("kiln-activations-demo", &edited)]);
    let output = build(packaged, &app, Machine::WithToolchain, None);
    assert!(!output.status.success(), "the build succeeded");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("kiln: kiln-activations-demo: kiln_relu_f32 sm_75 cuda13 does not compile"),
        "{stderr}"
    );
    assert!(
        stderr.contains("nvrtc: error: invalid value for --std"),
        "NVRTC's message is shown: {stderr}"
    );
}
