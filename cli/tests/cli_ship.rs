//! `kiln ship`: the real tool building a real kernel library (a copy of
//! `examples/kiln-activations-demo` in a crate of its own), writing its
//! shipped image, checking it (`--check`: exit 1 once a kernel changed),
//! signing it (`--key`), refusing a build limited to some GPUs; and the demo
//! libraries' shipped images in this repository are what their blocks build.
//!
//! Needs NVRTC (the library compiles before it ships); without it the tests
//! skip, except under `CI=true`, where they fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use kiln_ship::ShippedFile;
use kiln_test_support::library;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the repository")
        .to_path_buf()
}

/// Whether NVRTC is here; under `CI=true` its absence is a failure.
fn nvrtc() -> bool {
    let found = kiln_cuda::toolchain::locate_nvrtc(&kiln_cuda::toolchain::SearchConfig::from_env());
    kiln_test_support::ci::required(found, "NVRTC (scripts/install-cuda-wheels.sh)").is_some()
}

/// `kiln ship ARGS` with the library's build in `target`.
fn ship(dir: &Path, target: &Path, args: &[&str], vars: &[(&str, &str)]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln"));
    command
        .arg("ship")
        .args(["--manifest-path"])
        .arg(dir.join("Cargo.toml"))
        .args(args)
        .args(["--", "--offline"])
        .env("CARGO_TARGET_DIR", target)
        .env("KILN_CACHE_DIR", target.join("kiln-cache"));
    for name in [
        "KILN_CUDA_ARCHS",
        "KILN_IGNORE_SHIPPED",
        "KILN_ALWAYS_COMPILE",
    ] {
        command.env_remove(name);
    }
    for (name, value) in vars {
        command.env(name, value);
    }
    command.output().expect("kiln runs")
}

fn text(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

#[test]
fn a_library_is_shipped_checked_signed_and_refused_when_built_for_some_gpus() {
    if !nvrtc() {
        return;
    }
    let scratch = Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli-ship");
    let dir = library::copy_library(&repo(), &scratch.join("library")).expect("copied");
    let target = scratch.join("target");
    let shipped = dir.join("kiln-shipped/kiln-activations-demo.kship");
    let two_targets = [("KILN_DEMO_ARCHS", "sm_80,sm_90")];

    let check = ship(&dir, &target, &["--check"], &two_targets);
    assert_eq!(check.status.code(), Some(1), "{}", text(&check));
    assert!(text(&check).contains("not shipped"), "{}", text(&check));

    let first = ship(&dir, &target, &[], &two_targets);
    assert!(first.status.success(), "{}", text(&first));
    assert!(text(&first).contains("written"), "{}", text(&first));
    let file = std::fs::read(&shipped).expect("the shipped image");
    let parsed = ShippedFile::parse(&file).expect("a shipped image");
    assert!(parsed.signers().is_empty());

    let check = ship(&dir, &target, &["--check"], &two_targets);
    assert!(check.status.success(), "{}", text(&check));
    assert!(text(&check).contains("up to date"), "{}", text(&check));
    let again = ship(&dir, &target, &[], &two_targets);
    assert!(text(&again).contains("unchanged"), "{}", text(&again));
    assert_eq!(
        std::fs::read(&shipped).expect("shipped"),
        file,
        "left as it was"
    );

    // A kernel changed: stale until shipped again.
    library::edit_relu(&dir, 0).expect("edited");
    let stale = ship(&dir, &target, &["--check"], &two_targets);
    assert_eq!(stale.status.code(), Some(1), "{}", text(&stale));
    assert!(text(&stale).contains("stale"), "{}", text(&stale));

    // Shipped again, signed.
    let key = scratch.join("ship.key");
    let keygen = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["keygen", "-o"])
        .arg(&key)
        .output()
        .expect("kiln runs");
    let _ = keygen; // a key from an earlier run is kept
    let signed = ship(
        &dir,
        &target,
        &["--key", key.to_str().expect("utf-8")],
        &two_targets,
    );
    assert!(signed.status.success(), "{}", text(&signed));
    let public = std::fs::read_to_string(key.with_extension("key.pub")).expect("public key");
    let file = std::fs::read(&shipped).expect("shipped");
    let parsed = ShippedFile::parse(&file).expect("a shipped image");
    assert_eq!(
        parsed
            .signers()
            .iter()
            .map(|k| k.to_hex())
            .collect::<Vec<_>>(),
        [public.trim().to_owned()]
    );
    parsed
        .check_signed_by(&parsed.signers()[0])
        .expect("the signature verifies");

    // A build for some GPUs only is not the whole library.
    let limited = ship(
        &dir,
        &target,
        &[],
        &[
            ("KILN_DEMO_ARCHS", "sm_80,sm_90"),
            ("KILN_CUDA_ARCHS", "sm_90"),
        ],
    );
    assert_eq!(limited.status.code(), Some(1), "{}", text(&limited));
    assert!(text(&limited).contains("refused"), "{}", text(&limited));
    assert!(
        text(&limited).contains("KILN_CUDA_ARCHS"),
        "{}",
        text(&limited)
    );
    assert_eq!(
        std::fs::read(&shipped).expect("shipped"),
        file,
        "left as it was"
    );

    // What sits at the shipped path is read as every untrusted file is: a
    // FIFO (which would block a read forever) or a link to /dev/zero (an
    // endless read) is refused at once, and the image is stale.
    for plant in ["a FIFO", "a link to /dev/zero"] {
        std::fs::remove_file(&shipped).expect("removed");
        if plant == "a FIFO" {
            let made = Command::new("mkfifo")
                .arg(&shipped)
                .status()
                .expect("mkfifo");
            assert!(made.success());
        } else {
            std::os::unix::fs::symlink("/dev/zero", &shipped).expect("link");
        }
        let check = ship(&dir, &target, &["--check"], &two_targets);
        assert_eq!(check.status.code(), Some(1), "{plant}: {}", text(&check));
        for expected in ["cannot be read", "not a regular file", "stale"] {
            assert!(text(&check).contains(expected), "{plant}: {}", text(&check));
        }
    }
    // Shipping replaces whatever had the name with the image.
    let replaced = ship(&dir, &target, &[], &two_targets);
    assert!(replaced.status.success(), "{}", text(&replaced));
    assert!(
        std::fs::symlink_metadata(&shipped)
            .expect("shipped")
            .is_file()
    );
}

#[test]
fn the_demo_libraries_ship_what_their_blocks_build() {
    let check = Command::new(env!("CARGO_BIN_EXE_kiln"))
        .args(["ship", "--check", "--json", "--manifest-path"])
        .arg(repo().join("Cargo.toml"))
        .args(["-p", "kiln-kernels-demo", "-p", "kiln-activations-demo"])
        .args(["--", "--offline"])
        .env_remove("KILN_DEMO_ARCHS")
        .env_remove("KILN_CUDA_ARCHS")
        .env_remove("KILN_IGNORE_SHIPPED")
        .output()
        .expect("kiln runs");
    let report: serde_json::Value =
        serde_json::from_slice(&check.stdout).unwrap_or_else(|e| panic!("{e}: {}", text(&check)));
    let statuses: Vec<(&str, &str)> = report["shipped"]
        .as_array()
        .expect("a list")
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap_or("?"),
                s["status"].as_str().unwrap_or("?"),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        [
            ("kiln-activations-demo", "up to date"),
            ("kiln-kernels-demo", "up to date")
        ],
        "run `cargo run -p kiln-tool -- ship -p kiln-kernels-demo -p kiln-activations-demo` \
         and commit the shipped images: {}",
        text(&check)
    );
    assert!(check.status.success());
}
