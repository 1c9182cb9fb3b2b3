//! What docs/shipping.md's *Before Kiln is on crates.io* says about packaging a
//! library that depends on Kiln by path (or git, which packaging treats the
//! same): a library outside Kiln's workspace, with a shipped image, through
//! the real `cargo package`, offline. Nothing is built: the steps that work
//! only write the `.crate`, and those that stop do so while resolving
//! `kiln-rs` from crates.io, which has no such package yet.

use std::path::Path;
use std::process::{Command, Output};

/// A library in `dir` depending on this repository's `kiln-rs` by path,
/// `with_version` or not, with a shipped image.
fn library(dir: &Path, with_version: bool) {
    let version = if with_version {
        "version = \"0.1\", "
    } else {
        ""
    };
    let manifest = format!(
        "[package]\nname = \"my-kernels\"\nversion = \"0.1.0\"\nedition = \"2024\"\n\
         license = \"MIT\"\ndescription = \"A kernel library\"\n\n\
         [dependencies]\nkiln-rs = {{ {version}path = {:?} }}\n\n[workspace]\n",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::create_dir_all(dir.join("kiln-shipped")).unwrap();
    std::fs::write(dir.join("Cargo.toml"), manifest).unwrap();
    std::fs::write(dir.join("src/lib.rs"), "//! A kernel library.\n").unwrap();
    std::fs::write(dir.join("kiln-shipped/my-kernels.kship"), b"shipped").unwrap();
}

/// `cargo package --offline ARGS` in `dir`, into a target folder of its own.
fn package(dir: &Path, args: &[&str]) -> Output {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    Command::new(cargo)
        .args(["package", "--offline", "--target-dir"])
        .arg(dir.join("target"))
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn a_library_on_kiln_by_path_packages_with_no_verify_and_no_lockfile() {
    let dir = tempfile::tempdir().unwrap();
    library(dir.path(), true);
    // Plain, without verification, and without the lock file: each needs
    // kiln-rs from crates.io.
    for args in [&[][..], &["--no-verify"], &["--exclude-lockfile"]] {
        let output = package(dir.path(), args);
        assert!(!output.status.success(), "cargo package {args:?} passed");
        assert!(
            stderr(&output).contains("no matching package named `kiln-rs` found"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
    let output = package(dir.path(), &["--no-verify", "--exclude-lockfile"]);
    assert!(output.status.success(), "{}", stderr(&output));
    // The package holds the shipped image, names kiln-rs by version only, and
    // has no lock file.
    let crate_file = dir.path().join("target/package/my-kernels-0.1.0.crate");
    let listing = Command::new("tar")
        .arg("tzf")
        .arg(&crate_file)
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&listing.stdout);
    assert!(
        listing.contains("my-kernels-0.1.0/kiln-shipped/my-kernels.kship"),
        "{listing}"
    );
    assert!(!listing.contains("Cargo.lock"), "{listing}");
    let unpacked = dir.path().join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let status = Command::new("tar")
        .arg("xzf")
        .arg(&crate_file)
        .arg("-C")
        .arg(&unpacked)
        .status()
        .unwrap();
    assert!(status.success());
    let manifest = std::fs::read_to_string(unpacked.join("my-kernels-0.1.0/Cargo.toml")).unwrap();
    assert!(
        manifest.contains("[dependencies.kiln-rs]\nversion = \"0.1\""),
        "{manifest}"
    );
    assert!(!manifest.contains(env!("CARGO_MANIFEST_DIR")), "{manifest}");
}

#[test]
fn a_path_dependency_without_a_version_is_refused_by_packaging() {
    let dir = tempfile::tempdir().unwrap();
    library(dir.path(), false);
    let output = package(dir.path(), &["--no-verify", "--exclude-lockfile"]);
    assert!(!output.status.success(), "packaged without a version");
    assert!(stderr(&output).contains("kiln-rs"), "{}", stderr(&output));
}
