//! Identity memos and recorded identities: a fresh process derives its owners and
//! keys without loading NVRTC or hashing the CCCL tree, and only while the files the
//! answers came from are unchanged; a process without NVRTC serves image entries
//! under the release the images were built with.
//!
//! Tests that need NVRTC fail when `CI=true` and it is missing, and otherwise return
//! early with a message. Each scenario that depends on what a process has loaded runs
//! in a child process (this test binary, re-run with one test selected).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kiln_core::{Cache, Digest, Source};
use kiln_cuda::{
    Arch, Compiler, IncludeDir, KernelRequest,
    toolchain::IdentityOrigin,
    toolchain::MemoDir,
    toolchain::NvrtcVersion,
    toolchain::{SearchConfig, locate_nvrtc},
};
use kiln_cuda::{CompileError, ToolchainError};
use kiln_image::{Image, ImageMeta, Verification};
use kiln_kernel_set::{Dtype, KernelSpec};

/// Serializes this file's tests. Several of them load and unload NVRTC
/// libraries (probes, copies under other paths) in this process, and NVRTC
/// looks up its builtins library by name while it compiles: running them one
/// at a time keeps one test's unload from racing another's compile.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Set in a child process: which scenario to play.
const CHILD: &str = "KILN_TEST_IDENTITY_CHILD";

/// The installed NVRTC library file, or `None` (after saying why) outside CI.
fn installed_nvrtc() -> Option<PathBuf> {
    match locate_nvrtc(&SearchConfig::from_env()) {
        Ok(found) if found.path.is_absolute() => Some(found.path),
        Ok(found) => {
            eprintln!(
                "SKIPPED: NVRTC was found by name ({}), no file to copy",
                found.path.display()
            );
            None
        }
        Err(e) => kiln_test_support::ci::required(
            Err(e),
            "the NVRTC library (run scripts/install-cuda-wheels.sh)",
        ),
    }
}

/// Whether this process has NVRTC mapped (loaded).
fn nvrtc_is_loaded() -> bool {
    std::fs::read_to_string("/proc/self/maps")
        .expect("/proc/self/maps")
        .contains("libnvrtc.so")
}

/// Runs `test` of this binary in a child process with `env`; its stdout.
fn run_child(test: &str, scenario: &str, env: &[(&str, &Path)]) -> String {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(CHILD, scenario)
        .env_remove("KILN_CACHE")
        .env_remove("KILN_NVRTC");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "child {scenario} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The value of `name=` on the child's `report:` line.
fn reported(stdout: &str, name: &str) -> String {
    let report = stdout
        .lines()
        .find_map(|l| l.split_once("report:").map(|(_, fields)| fields))
        .unwrap_or_else(|| panic!("no report in:\n{stdout}"));
    report
        .split_whitespace()
        .find_map(|field| field.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("no {name} in {report}"))
        .to_owned()
}

/// The CUDA backend's error itself, or the one inside a failed compile of the
/// cache.
fn cuda_error(err: &CompileError) -> Option<&ToolchainError> {
    match err {
        CompileError::Cache(cache) => match &**cache {
            kiln_core::Error::Compile { source, .. } => match source.downcast_ref() {
                Some(CompileError::Toolchain(error)) => Some(error),
                _ => None,
            },
            _ => None,
        },
        CompileError::Toolchain(error) => Some(error),
        _ => None,
    }
}

fn env_path(name: &str) -> PathBuf {
    PathBuf::from(std::env::var_os(name).unwrap_or_else(|| panic!("{name} is set by the parent")))
}

fn arch(s: &str) -> Arch {
    s.parse().unwrap()
}

/// A copy of the installed library and its builtins in `dir`, under its own name.
fn copy_library(installed: &Path, dir: &Path) -> PathBuf {
    let source_dir = installed.parent().unwrap();
    for entry in std::fs::read_dir(source_dir).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name().into_string().unwrap();
        if name.starts_with("libnvrtc-builtins.so") {
            std::fs::copy(entry.path(), dir.join(&name)).unwrap();
        }
    }
    let copy = dir.join(installed.file_name().unwrap());
    std::fs::copy(installed, &copy).unwrap();
    // The memos are written with no settle time, but after the copy's clock tick.
    std::thread::sleep(Duration::from_millis(20));
    copy
}

/// A memo of the library's release written by one process lets the next one name
/// the same release without loading the library; a wrong memo is caught by the first
/// compile (nothing cached, memo dropped); a reinstalled library is read again.
#[test]
fn a_memoized_nvrtc_identity_is_used_only_for_the_very_library_it_was_read_from() {
    let _serial = one_at_a_time();
    const TEST: &str =
        "a_memoized_nvrtc_identity_is_used_only_for_the_very_library_it_was_read_from";
    if let Ok(scenario) = std::env::var(CHILD) {
        let (library, memo) = (env_path("KILN_TEST_LIBRARY"), env_path("KILN_TEST_MEMO"));
        let memo = MemoDir::at(memo).with_settle(Duration::ZERO);
        let compiler = Compiler::with_memo(&SearchConfig::nvrtc_file(&library), &memo).unwrap();
        let identity = compiler.identity();
        let loaded_by_resolve = nvrtc_is_loaded();
        let compiled = if scenario == "compile" {
            let request = KernelSpec::Axpy { dtype: Dtype::F32 }
                .request(arch("sm_90"))
                .unwrap();
            let owner = compiler.owner(&request).unwrap();
            assert_eq!(owner.version(), identity.version().release);
            let cache = Cache::new();
            let result = compiler.compile_cached(&cache, &request);
            let lookup = cache.lookup(&owner.digest(), &request.key().unwrap());
            assert!(lookup.is_none(), "nothing is cached under the wrong owner");
            match result.as_ref().map_err(cuda_error) {
                Err(Some(ToolchainError::NvrtcIdentityChanged { owner, found, .. })) => {
                    format!("refused:{owner}->{found}")
                }
                other => format!("unexpected:{:?}", other.map(|hit| hit.name().to_owned())),
            }
        } else {
            "no".to_owned()
        };
        println!(
            "report: origin={:?} release={} loaded={loaded_by_resolve} compiled={compiled}",
            identity.origin(),
            identity.version().release,
        );
        return;
    }
    let Some(installed) = installed_nvrtc() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let lib_dir = dir.path().join("lib");
    std::fs::create_dir(&lib_dir).unwrap();
    let library = copy_library(&installed, &lib_dir);
    let memo_dir = dir.path().join("memo");
    let env = [
        ("KILN_TEST_LIBRARY", library.as_path()),
        ("KILN_TEST_MEMO", memo_dir.as_path()),
    ];
    let record = MemoDir::at(&memo_dir)
        .record_path("nvrtc", &library.canonicalize().unwrap())
        .unwrap();

    // First process: loads the library, reads the banner, memoizes.
    let first = run_child(TEST, "resolve", &env);
    assert_eq!(reported(&first, "origin"), "Loaded");
    assert_eq!(reported(&first, "loaded"), "true");
    let release = reported(&first, "release");
    let version: NvrtcVersion = release.parse().expect("an exact release such as 13.0.88");
    assert!(record.is_file(), "the first process memoizes the release");

    // Second process: the same release, and the library is never loaded.
    let second = run_child(TEST, "resolve", &env);
    assert_eq!(reported(&second, "origin"), "Memo");
    assert_eq!(reported(&second, "loaded"), "false");
    assert_eq!(reported(&second, "release"), release);

    // A memo that lies (same stamps, another release) names that release in the
    // owners, but the first compile sees the real banner and refuses.
    let forged = format!("{}.{}.99999", version.major, version.minor);
    let forge = || {
        let text = std::fs::read_to_string(&record).unwrap();
        let lied = text.replace(&format!("\n{release}\n"), &format!("\n{forged}\n"));
        assert_ne!(text, lied);
        std::fs::write(&record, lied).unwrap();
    };
    forge();
    let lied = run_child(TEST, "compile", &env);
    assert_eq!(reported(&lied, "origin"), "Memo");
    assert_eq!(reported(&lied, "release"), forged);
    assert_eq!(
        reported(&lied, "compiled"),
        format!("refused:{forged}->{release}")
    );
    assert!(!record.exists(), "the wrong memo is dropped");
    let after = run_child(TEST, "resolve", &env);
    assert_eq!(reported(&after, "origin"), "Loaded");
    assert_eq!(reported(&after, "release"), release);

    // A reinstalled library (a new file at the same path) does not match the memo of
    // the old one, even a memo that claims another release.
    forge();
    let reinstalled = lib_dir.join("reinstalling");
    std::fs::copy(&installed, &reinstalled).unwrap();
    std::fs::rename(&reinstalled, &library).unwrap();
    std::thread::sleep(Duration::from_millis(20));
    let fresh = run_child(TEST, "resolve", &env);
    assert_eq!(reported(&fresh, "origin"), "Loaded");
    assert_eq!(reported(&fresh, "release"), release);
}

/// A second fresh process with a warm memo directory derives the owner and key of
/// every kernel of the set without loading NVRTC, and gets exactly the owners and
/// keys of the first process (which read everything).
#[test]
fn a_warm_process_derives_every_owner_and_key_without_loading_nvrtc() {
    let _serial = one_at_a_time();
    const TEST: &str = "a_warm_process_derives_every_owner_and_key_without_loading_nvrtc";
    if std::env::var_os(CHILD).is_some() {
        let compiler = Compiler::new().unwrap();
        let mut derived = Vec::new();
        for spec in KernelSpec::all() {
            let request = spec.request(arch("sm_90a")).unwrap();
            let owner = compiler.owner(&request).unwrap().digest();
            derived.push(format!(
                "{}:{owner}:{}",
                spec.name(),
                request.key().unwrap()
            ));
        }
        let all = Digest::of(derived.join(",").as_bytes());
        println!(
            "report: origin={:?} loaded={} derived={all} count={}",
            compiler.identity().origin(),
            nvrtc_is_loaded(),
            derived.len(),
        );
        return;
    }
    if installed_nvrtc().is_none() {
        return;
    }
    let cache_dir = tempfile::tempdir().unwrap();
    let env = [("KILN_CACHE_DIR", cache_dir.path())];
    let first = run_child(TEST, "derive", &env);
    let second = run_child(TEST, "derive", &env);
    assert_eq!(reported(&second, "origin"), "Memo", "{first}");
    assert_eq!(reported(&second, "loaded"), "false");
    assert_eq!(reported(&second, "derived"), reported(&first, "derived"));
    assert_eq!(
        reported(&second, "count"),
        KernelSpec::all().len().to_string()
    );
}

/// With no NVRTC installed, a recorded identity finds the entries an image holds for
/// exactly that release; a kernel the image lacks is a typed error, and another
/// release finds nothing. With NVRTC installed, the installed one is named instead.
#[test]
fn a_process_without_nvrtc_serves_image_entries_of_the_recorded_release() {
    let _serial = one_at_a_time();
    const TEST: &str = "a_process_without_nvrtc_serves_image_entries_of_the_recorded_release";
    let saxpy = KernelSpec::Axpy { dtype: Dtype::F32 };
    if std::env::var_os(CHILD).is_some() {
        assert!(matches!(
            Compiler::new(),
            Err(ToolchainError::NvrtcNotFound { .. })
        ));
        let release = std::env::var("KILN_TEST_RELEASE").unwrap();
        let compiler = Compiler::new_or_recorded(release.parse().unwrap()).unwrap();
        assert_eq!(compiler.identity().origin(), IdentityOrigin::Recorded);
        assert!(compiler.identity().location().is_none());
        let cache = Cache::new();
        let image = Image::open(&env_path("KILN_TEST_IMAGE"), Verification::Full).unwrap();
        assert_eq!(cache.merge_image(image).inserted, 1);
        let request = saxpy.request(arch("sm_90")).unwrap();
        let hit = compiler.compile_cached(&cache, &request).unwrap();
        assert_eq!((hit.source(), hit.name()), (Source::Image, "axpy_f32"));
        let missing = KernelSpec::Axpy { dtype: Dtype::F64 }
            .request(arch("sm_90"))
            .unwrap();
        let other_release = Compiler::recorded("13.0.1".parse().unwrap());
        for (compiler, request) in [(compiler, &missing), (other_release, &request)] {
            let result = compiler.compile_cached(&cache, request);
            match result.as_ref().map_err(cuda_error) {
                Err(Some(ToolchainError::NoNvrtc { version })) => {
                    assert_eq!(*version, compiler.version().release)
                }
                other => panic!("expected NoNvrtc, got {:?}", other.map(|h| h.source())),
            }
        }
        assert_eq!(cache.stats().compile_failures, 2);
        println!("report: served=yes");
        return;
    }
    if installed_nvrtc().is_none() {
        return;
    }
    let compiler = Compiler::new().unwrap();
    // Installed NVRTC wins over a recorded release.
    let preferred = Compiler::new_or_recorded("13.0.1".parse().unwrap()).unwrap();
    assert_eq!(preferred.version(), compiler.version());
    assert_ne!(preferred.identity().origin(), IdentityOrigin::Recorded);

    let cache = Cache::new();
    let snapshot = cache.snapshot();
    compiler
        .compile_cached(&cache, &saxpy.request(arch("sm_90")).unwrap())
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let image = dir.path().join("saxpy.kimg");
    cache
        .delta(&snapshot)
        .write_image(&image, ImageMeta::new("cuda_identity test", "1"))
        .unwrap();
    let nowhere = dir.path().join("no-nvrtc/libnvrtc.so.13");
    let release = PathBuf::from(&compiler.version().release);
    let out = run_child(
        TEST,
        "no-nvrtc",
        &[
            ("KILN_NVRTC", nowhere.as_path()),
            ("KILN_CACHE_DIR", dir.path()),
            ("KILN_TEST_IMAGE", image.as_path()),
            ("KILN_TEST_RELEASE", release.as_path()),
        ],
    );
    assert_eq!(reported(&out, "served"), "yes");
}

/// An include-tree memo answers while every file's stamp is unchanged, and a changed,
/// added or renamed header makes the tree hash again (so the key changes).
#[test]
fn an_include_memo_is_used_only_while_every_file_is_unchanged() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("include");
    std::fs::create_dir_all(tree.join("sub")).unwrap();
    std::fs::write(tree.join("a.cuh"), "#define A 1\n").unwrap();
    std::fs::write(tree.join("sub/b.cuh"), "#define B 1\n").unwrap();
    // No settle time, but a clock tick (20 ms) between each change and each read.
    let memo = MemoDir::at(dir.path().join("memo")).with_settle(Duration::ZERO);
    let record = memo
        .record_path("include", &tree.canonicalize().unwrap())
        .unwrap();
    let key = |include: IncludeDir| {
        KernelRequest::new("k", "#include \"a.cuh\"", arch("sm_90"))
            .include_dir(include)
            .key()
            .unwrap()
    };

    std::thread::sleep(Duration::from_millis(20));
    let first = IncludeDir::with_memo(&tree, &memo).unwrap();
    assert_eq!(first.digest(), IncludeDir::rescan(&tree).unwrap().digest());
    assert!(record.is_file());
    assert_eq!(IncludeDir::with_memo(&tree, &memo).unwrap(), first);

    // The memo answers for unchanged stamps, whatever it says: make it say X.
    let forged = Digest::of(b"forged");
    let forge = || {
        let text = std::fs::read_to_string(&record).unwrap();
        let lied = text.replace(&first.digest().to_hex(), &forged.to_hex());
        std::fs::write(&record, lied).unwrap();
    };
    forge();
    assert_eq!(
        IncludeDir::with_memo(&tree, &memo).unwrap().digest(),
        forged
    );

    // Changes: same-size content (rewritten, then overwritten in place without
    // truncation), an added file, a renamed file, a new folder holding a file, a
    // removed file. The memo lists no folder again: these are caught by the stamps
    // of the files and folders it recorded.
    let changes: [&dyn Fn(); 7] = [
        &|| std::fs::write(tree.join("sub/b.cuh"), "#define B 2\n").unwrap(),
        &|| {
            use std::io::Write;
            let mut file = std::fs::OpenOptions::new()
                .write(true)
                .open(tree.join("sub/b.cuh"))
                .unwrap();
            file.write_all(b"#define B 3").unwrap();
        },
        &|| std::fs::write(tree.join("sub/c.cuh"), "").unwrap(),
        &|| std::fs::rename(tree.join("sub/c.cuh"), tree.join("d.cuh")).unwrap(),
        &|| {
            std::fs::create_dir_all(tree.join("sub/deeper/deepest")).unwrap();
            std::fs::write(tree.join("sub/deeper/deepest/e.cuh"), "#define E 1\n").unwrap();
        },
        &|| std::fs::write(tree.join("sub/deeper/deepest/f.cuh"), "").unwrap(),
        &|| std::fs::remove_file(tree.join("a.cuh")).unwrap(),
    ];
    let mut seen = vec![first.digest()];
    for change in changes {
        std::thread::sleep(Duration::from_millis(20));
        let before = IncludeDir::rescan(&tree).unwrap();
        change();
        std::thread::sleep(Duration::from_millis(20));
        let now = IncludeDir::with_memo(&tree, &memo).unwrap();
        assert_ne!(now.digest(), forged, "a stale memo was used");
        assert_eq!(now.digest(), IncludeDir::rescan(&tree).unwrap().digest());
        assert_ne!(key(now.clone()), key(before));
        assert!(!seen.contains(&now.digest()));
        seen.push(now.digest());
        // The next change starts from a forged memo of the current state.
        let text = std::fs::read_to_string(&record).unwrap();
        std::fs::write(
            &record,
            text.replace(&now.digest().to_hex(), &forged.to_hex()),
        )
        .unwrap();
        assert_eq!(
            IncludeDir::with_memo(&tree, &memo).unwrap().digest(),
            forged
        );
    }
}

/// A tree that changed a moment ago is not memoized (its next change could keep the
/// same stamps); the memo is then simply absent and the tree hashed each time.
#[test]
fn an_include_tree_that_just_changed_is_not_memoized() {
    let _serial = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("include");
    std::fs::create_dir(&tree).unwrap();
    std::fs::write(tree.join("a.cuh"), "#define A 1\n").unwrap();
    let memo = MemoDir::at(dir.path().join("memo"));
    let found = IncludeDir::with_memo(&tree, &memo).unwrap();
    assert_eq!(found.digest(), IncludeDir::rescan(&tree).unwrap().digest());
    let record = memo
        .record_path("include", &tree.canonicalize().unwrap())
        .unwrap();
    assert!(!record.exists());
    // And with memos off, nothing is written anywhere.
    let off = IncludeDir::with_memo(&tree, &MemoDir::disabled()).unwrap();
    assert_eq!(off, found);
}
