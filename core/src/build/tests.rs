use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kiln_image::{Image, SigningKey, Verification};
use kiln_ship::{CANDIDATE_EXTENSION, Candidate, Shipped, ShippedFile};

use super::*;
use crate::trust::Provenance;
use crate::{Artifact, ArtifactKind, Cache, Compiled, Digest, KeyBuilder, Owner};

/// The owner of the test compiler's entries.
fn owner() -> Owner {
    Owner::new("test-compiler", "1.0", "test-target", Vec::<String>::new()).unwrap()
}

fn key(name: &str) -> crate::Key {
    KeyBuilder::new("kiln-core build tests", 1)
        .str("name", name)
        .finish()
}

/// Compiles `name` into `cache` (lookups first): its artifacts are the
/// name's bytes as an object and as text.
fn compile(cache: &Cache, name: &str) -> Result<(), Error> {
    cache.get_or_compile(&owner(), &key(name), || {
        Ok(Compiled::new(name)
            .artifact(Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec![name.to_owned()],
                bytes: name.as_bytes().to_vec(),
            })
            .artifact(Artifact {
                kind: ArtifactKind::Ptx,
                entry_points: vec![name.to_owned()],
                bytes: format!(".entry {name}").into_bytes(),
            }))
    })?;
    Ok(())
}

/// A library folder and its build's variables: no disk tier unless
/// `cache_dir` is given, nothing else from the process's environment.
struct Library {
    root: tempfile::TempDir,
    cache_dir: Option<PathBuf>,
    vars: Vec<(&'static str, OsString)>,
}

impl Library {
    fn new() -> Library {
        let root = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("src")).unwrap();
        std::fs::write(root.path().join("src/kernels.rs"), "// kernels\n").unwrap();
        Library {
            root,
            cache_dir: None,
            vars: Vec::new(),
        }
    }

    /// The next runs write what `kiln ship` ships (`KILN_SHIP_CANDIDATE`).
    fn shipping(mut self) -> Library {
        self.vars.push((SHIP_CANDIDATE, "1".into()));
        self
    }

    fn with_disk_cache(mut self, dir: &Path) -> Library {
        self.cache_dir = Some(dir.to_owned());
        self
    }

    /// The variables the runs see: those set, the first of a name winning,
    /// and the disk tier's (off without a cache directory).
    fn vars(&self) -> Vars {
        let mut vars = Vars::default();
        for (name, value) in &self.vars {
            if vars.get(name).is_none() {
                vars.set(name, value.clone());
            }
        }
        match &self.cache_dir {
            Some(dir) if vars.get("KILN_CACHE_DIR").is_none() => {
                vars.set("KILN_CACHE_DIR", dir.clone());
            }
            None if vars.get("KILN_CACHE").is_none() => vars.set("KILN_CACHE", "0"),
            _ => {}
        }
        vars
    }

    /// A precompile run of this library into `out`, its output into `log`.
    fn precompile<'w>(&self, out: &Path, log: &'w mut Vec<u8>) -> Precompile<'w> {
        Precompile::new("demo")
            .out_dir(out)
            .library_dir(self.root.path())
            .env(self.vars())
            .output(log)
    }

    /// Ships what the run into `out` built (as `kiln ship` does, stored
    /// rather than compressed), signed by `key` if given: the run must have
    /// had `KILN_SHIP_CANDIDATE` set.
    fn ship(&self, out: &Path, key: Option<&SigningKey>) {
        let candidate =
            Candidate::read(&out.join("demo").with_extension(CANDIDATE_EXTENSION)).unwrap();
        assert_eq!(candidate.not_shippable, None);
        let entries = candidate.entries.expect("KILN_SHIP_CANDIDATE was set");
        let image = Image::open(&entries, Verification::Full).unwrap();
        let bytes = Shipped::from_image(&image, candidate.manifest)
            .unwrap()
            .encode_stored()
            .unwrap();
        let bytes = match key {
            Some(key) => ShippedFile::parse(&bytes)
                .unwrap()
                .signed_with(key)
                .unwrap(),
            None => bytes,
        };
        std::fs::create_dir_all(candidate.shipped.parent().unwrap()).unwrap();
        std::fs::write(&candidate.shipped, bytes).unwrap();
    }
}

/// Runs a block that gets `names`, each compiled (or found) with
/// `compile`, in a fresh `out` directory.
fn run_names(
    library: &Library,
    out: &Path,
    names: &[&str],
    log: &mut Vec<u8>,
) -> Result<PrecompileReport, Error> {
    library.precompile(out, log).run(|session| {
        session.uses_source("src/kernels.rs");
        // The image ships "a" without its text artifact.
        session.leave_out(owner().digest(), &key("a"), ArtifactKind::Ptx);
        for name in names {
            session.specialize(name, |cache| compile(cache, name));
        }
        Ok(())
    })
}

fn entry_names(path: &Path) -> Vec<String> {
    let image = Image::open(path, Verification::Full).unwrap();
    let mut names: Vec<String> = (0..image.len())
        .map(|i| image.entry(i).unwrap().name().to_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn what_this_machine_cannot_compile_is_a_warning_and_the_rest_ships() {
    let library = Library::new();
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let report = library
        .precompile(out.path(), &mut log)
        .run(|session| {
            session.uses_source("src/kernels.rs");
            session.uses_env("DEMO_ARCH");
            session.specialize("a", |cache| compile(cache, "a"));
            session.specialize("b", |_| {
                Err::<(), _>(Unavailable::new("no compiler here: install one"))
            });
            session.specialize("c", |cache| compile(cache, "c"));
            Ok(())
        })
        .unwrap();
    assert_eq!(report.entries, 2);
    assert_eq!(report.compiles, 2);
    assert_eq!(
        report.missing,
        [("b".to_owned(), "no compiler here: install one".to_owned())]
    );
    // What the build script tells cargo, as a value.
    let output = &report.output;
    assert_eq!(output.name, "demo");
    assert_eq!(output.rerun_if_changed, [PathBuf::from("src/kernels.rs")]);
    assert!(
        [
            "DEMO_ARCH",
            "KILN_SIGNING_KEY",
            "KILN_TRUSTED_KEYS",
            "KILN_EMBED"
        ]
        .iter()
        .all(|var| output.rerun_if_env_changed.iter().any(|v| v == var)),
        "{output:?}"
    );
    assert_eq!(
        output.warnings,
        [
            "not precompiled (1): b; no compiler here: install one",
            "this library ships no image: its author builds where the toolchain is and runs \
             `kiln ship`",
        ]
    );
    assert!(output.errors.is_empty());
    assert_eq!(output.progress.len(), 2, "{output:?}");
    assert!(output.progress[0].starts_with("kiln: a ready in "));
    assert!(output.summary_warns);
    assert!(
        output
            .summary
            .starts_with("2 entries (2 compiled, 1 missing, 0 failed) into "),
        "{output:?}"
    );
    // Printed as it is, in the `cargo::` syntax, the summary last.
    let log = String::from_utf8(log).unwrap();
    assert_eq!(log.lines().collect::<Vec<_>>(), output.lines(), "{log}");
    assert!(
        log.lines()
            .filter(|line| line.starts_with("cargo:"))
            .all(|line| line.starts_with("cargo::")),
        "{log}"
    );
    assert_eq!(entry_names(&report.path), ["a", "c"]);
    // A build with something missing is not shipped.
    let candidate = Candidate::read(&report.path.with_extension(CANDIDATE_EXTENSION)).unwrap();
    assert!(candidate.not_shippable.is_some());
}

#[test]
fn a_specialization_that_does_not_compile_fails_the_build_after_the_rest_ran() {
    let library = Library::new();
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let result = library.precompile(out.path(), &mut log).run(|session| {
        session.specialize("a", |cache| compile(cache, "a"));
        session.specialize("bad", |_| Err::<(), _>("no such type\nsecond line"));
        session.specialize("panics", |_| -> Result<(), Error> {
            panic!("compiler crashed")
        });
        session.specialize("b", |cache| compile(cache, "b"));
        Ok(())
    });
    let log = String::from_utf8(log).unwrap();
    let Err(Error::Precompile { name, failed }) = result else {
        panic!("the build did not fail: {result:?}")
    };
    assert_eq!(name, "demo");
    let labels: Vec<&str> = failed.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(labels, ["bad", "panics"]);
    assert_eq!(
        failed[0].1, "no such type\nsecond line",
        "the whole message"
    );
    for expected in [
        "cargo::error=kiln: demo: bad does not compile: no such type",
        "cargo::error=kiln: demo: panics does not compile: panicked: compiler crashed",
    ] {
        assert!(
            log.lines().any(|l| l == expected),
            "missing {expected:?} in\n{log}"
        );
    }
    // Every other specialization ran, and the image was written.
    assert_eq!(entry_names(&out.path().join("demo.kimg")), ["a", "b"]);
}

#[test]
fn a_block_that_stops_on_its_own_error_fails_and_one_without_a_compiler_warns() {
    let library = Library::new();
    let out = tempfile::tempdir().unwrap();
    let result = library
        .precompile(out.path(), &mut Vec::new())
        .run(|session| {
            session.specialize("a", |cache| compile(cache, "a"));
            Err("an option the compiler refuses".into())
        });
    assert!(
        matches!(&result, Err(Error::Precompile { failed, .. }) if failed[0].1 == "an option the compiler refuses"),
        "{result:?}"
    );

    let mut log = Vec::new();
    let report = library
        .precompile(out.path(), &mut log)
        .run(|_| {
            Err(Box::new(Unavailable::new(
                "no compiler found (searched: /usr/local)",
            )))
        })
        .unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(report.entries, 0);
    assert!(
        Image::open(&report.path, Verification::Full)
            .unwrap()
            .is_empty()
    );
    assert!(
        log.contains(
            "cargo::warning=kiln: demo: not precompiled (1): the precompile block; no compiler found"
        ),
        "{log}"
    );
    assert!(
        log.lines()
            .last()
            .unwrap()
            .starts_with("cargo::warning=kiln: demo: 0 entries"),
        "{log}"
    );
}

#[test]
fn a_block_where_everything_is_ready_prints_no_warning() {
    let library = Library::new();
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let report = run_names(&library, out.path(), &["a"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(report.entries, 1);
    assert!(!log.contains("cargo::warning"), "{log}");
    assert!(
        log.lines().any(|l| l.starts_with("kiln: a ready in ")),
        "{log}"
    );
    assert!(
        log.lines()
            .last()
            .unwrap()
            .starts_with("kiln: demo: 1 entry (1 compiled, 0 missing, 0 failed) into "),
        "{log}"
    );
}

#[test]
fn a_shipped_image_serves_the_block_with_no_compile_and_the_same_bytes() {
    let library = Library::new().shipping();
    let first = tempfile::tempdir().unwrap();
    let built = run_names(&library, first.path(), &["a", "b", "c"], &mut Vec::new()).unwrap();
    library.ship(first.path(), None);

    // Another machine: the shipped image, nothing to compile with.
    let second = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let report = library
        .precompile(second.path(), &mut log)
        .run(|session| {
            session.leave_out(owner().digest(), &key("a"), ArtifactKind::Ptx);
            for name in ["a", "b", "c"] {
                session.specialize(name, |cache| {
                    cache
                        .get_cached(&owner(), &key(name))
                        .map(|_| ())
                        .ok_or_else(|| Unavailable::new("no compiler"))
                });
            }
            Ok(())
        })
        .unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(
        (report.compiles, report.from_tier("shipped")),
        (0, 3),
        "{log}"
    );
    assert!(report.missing.is_empty(), "{log}");
    assert_eq!(
        std::fs::read(&built.path).unwrap(),
        std::fs::read(&report.path).unwrap(),
        "the image does not depend on where its entries came from"
    );
    let shipped = library.root.path().join("kiln-shipped/demo.kship");
    assert!(
        log.contains(&format!("cargo::rerun-if-changed={}", shipped.display())),
        "{log}"
    );
    // The shipped image holds whole entries; the image leaves out what the
    // block left out.
    let whole = Shipped::from_bytes(&std::fs::read(&shipped).unwrap()).unwrap();
    let a = whole.entries().iter().find(|e| e.name == "a").unwrap();
    assert_eq!(a.artifacts.len(), 2);
    assert_eq!(entry_names(&report.path), ["a", "b", "c"]);
    let image = Image::open(&report.path, Verification::Full).unwrap();
    let a = image
        .find(&owner().digest(), key("a").digest())
        .unwrap()
        .unwrap();
    assert_eq!(a.artifact_count(), 1);
    assert!(!log.contains("cargo::warning"), "{log}");
}

#[test]
fn a_specialization_added_after_shipping_is_compiled_or_named_as_missing() {
    let library = Library::new().shipping();
    let first = tempfile::tempdir().unwrap();
    run_names(&library, first.path(), &["a", "b"], &mut Vec::new()).unwrap();
    library.ship(first.path(), None);
    std::fs::write(
        library.root.path().join("src/kernels.rs"),
        "// kernels, and d\n",
    )
    .unwrap();

    // With a compiler: only the new one compiles.
    let with = tempfile::tempdir().unwrap();
    let report = run_names(&library, with.path(), &["a", "b", "d"], &mut Vec::new()).unwrap();
    assert_eq!((report.compiles, report.from_tier("shipped")), (1, 2));
    assert_eq!(entry_names(&report.path), ["a", "b", "d"]);

    // Without: a warning names it and says which source changed; the rest ships.
    let without = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let report = library
        .precompile(without.path(), &mut log)
        .run(|session| {
            session.uses_source("src/kernels.rs");
            for name in ["a", "b", "d"] {
                session.specialize(name, |cache| {
                    cache
                        .get_cached(&owner(), &key(name))
                        .map(|_| ())
                        .ok_or_else(|| Unavailable::new("no compiler here"))
                });
            }
            Ok(())
        })
        .unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(entry_names(&report.path), ["a", "b"]);
    assert!(
        log.contains("cargo::warning=kiln: demo: not precompiled (1): d; no compiler here"),
        "{log}"
    );
    assert!(
        log.contains("(src/kernels.rs changed since it was shipped)"),
        "{log}"
    );
}

#[test]
fn a_shipped_image_not_signed_by_the_named_key_is_not_used() {
    let key = SigningKey::from_secret_bytes([7; 32]);
    let public = key.public_key().to_hex();
    for signer in [
        None,
        Some(SigningKey::from_secret_bytes([8; 32])),
        Some(key),
    ] {
        let library = Library::new().shipping();
        let first = tempfile::tempdir().unwrap();
        run_names(&library, first.path(), &["a"], &mut Vec::new()).unwrap();
        library.ship(first.path(), signer.as_ref());
        let second = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let report = library
            .precompile(second.path(), &mut log)
            .shipped_key(public.clone())
            .run(|session| {
                session.specialize("a", |cache| compile(cache, "a"));
                Ok(())
            })
            .unwrap();
        let log = String::from_utf8(log).unwrap();
        let trusted = signer.is_some_and(|s| s.public_key().to_hex() == public);
        if trusted {
            assert_eq!(
                (report.compiles, report.from_tier("shipped")),
                (0, 1),
                "{log}"
            );
        } else {
            assert_eq!(report.compiles, 1, "{log}");
            assert!(
                log.contains("is not used: the shipped image is not signed by"),
                "{log}"
            );
        }
    }
}

#[test]
fn a_damaged_shipped_image_is_refused_and_its_entries_compiled() {
    let library = Library::new().shipping();
    let first = tempfile::tempdir().unwrap();
    run_names(&library, first.path(), &["a"], &mut Vec::new()).unwrap();
    library.ship(first.path(), None);
    let shipped = library.root.path().join("kiln-shipped/demo.kship");
    let mut bytes = std::fs::read(&shipped).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x55;
    std::fs::write(&shipped, bytes).unwrap();
    let second = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let report = run_names(&library, second.path(), &["a"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(report.compiles, 1);
    assert!(
        log.contains("the shipped image") && log.contains("is not used:"),
        "{log}"
    );
}

#[test]
fn an_earlier_build_s_compiles_are_found_in_the_disk_tier() {
    let disk = tempfile::tempdir().unwrap();
    let library = Library::new().with_disk_cache(disk.path());
    let first = tempfile::tempdir().unwrap();
    let cold = run_names(&library, first.path(), &["a", "b"], &mut Vec::new()).unwrap();
    assert_eq!(cold.compiles, 2);
    let second = tempfile::tempdir().unwrap();
    let warm = run_names(&library, second.path(), &["a", "b", "c"], &mut Vec::new()).unwrap();
    assert_eq!((warm.compiles, warm.from_tier("disk")), (1, 2));
    let third = tempfile::tempdir().unwrap();
    let again = run_names(&library, third.path(), &["a", "b"], &mut Vec::new()).unwrap();
    assert_eq!((again.compiles, again.from_tier("disk")), (0, 2));
    assert_eq!(
        std::fs::read(&cold.path).unwrap(),
        std::fs::read(&again.path).unwrap()
    );
}

#[test]
fn left_out_artifacts_are_not_in_the_image_but_stay_in_the_tiers() {
    let disk = tempfile::tempdir().unwrap();
    let library = Library::new().with_disk_cache(disk.path());
    let out = tempfile::tempdir().unwrap();
    let report = library
        .precompile(out.path(), &mut Vec::new())
        .run(|session| {
            session.leave_out(owner().digest(), &key("a"), ArtifactKind::Ptx);
            session.specialize("a", |cache| compile(cache, "a"));
            session.specialize("b", |cache| compile(cache, "b"));
            Ok(())
        })
        .unwrap();
    let image = Image::open(&report.path, Verification::Full).unwrap();
    let kinds = |name: &str| -> Vec<ArtifactKind> {
        let entry = image
            .find(&owner().digest(), key(name).digest())
            .unwrap()
            .unwrap();
        entry.artifacts().map(|a| a.kind()).collect()
    };
    assert_eq!(kinds("a"), [ArtifactKind::Object]);
    assert_eq!(kinds("b"), [ArtifactKind::Object, ArtifactKind::Ptx]);
    // The disk tier holds what the compile gave.
    let cache = Cache::new();
    crate::add_tiers(&cache, &Settings::from_vars(library.vars()));
    let hit = cache.get_cached(&owner(), &key("a")).unwrap();
    assert!(hit.artifact(&ArtifactKind::Ptx).is_some());
}

#[test]
fn the_candidate_records_sources_records_and_the_specialization_list() {
    let library = Library::new();
    let out = tempfile::tempdir().unwrap();
    let report = library
        .precompile(out.path(), &mut Vec::new())
        .run(|session| {
            session.uses_source("src/kernels.rs");
            session.uses_source("/an/absolute/compiler/path.so");
            session.record("test-backend", "compiler=1.0");
            session.specialize("a", |cache| compile(cache, "a"));
            Ok(())
        })
        .unwrap();
    let candidate = Candidate::read(&report.path.with_extension(CANDIDATE_EXTENSION)).unwrap();
    let manifest = &candidate.manifest;
    assert_eq!(manifest.name, "demo");
    assert_eq!(
        manifest.records.get("test-backend").map(String::as_str),
        Some("compiler=1.0")
    );
    assert_eq!(
        manifest.sources.keys().collect::<Vec<_>>(),
        ["src/kernels.rs"],
        "machine-specific paths are left out"
    );
    assert_eq!(
        manifest.sources["src/kernels.rs"],
        Digest::of(b"// kernels\n")
    );
    assert_eq!(manifest.specialization_count, 1);
    assert_eq!(
        manifest.specializations,
        kiln_ship::Manifest::digest_labels(&["a".to_owned()])
    );
    assert_eq!(candidate.image, report.path);
    assert_eq!(
        candidate.shipped,
        library.root.path().join("kiln-shipped/demo.kship")
    );
}

inventory::submit! {
    crate::settings::Switch::new(
        "KILN_TEST_BACKEND_STRICT",
        "test",
        crate::settings::Phase::RunTime,
        crate::settings::Kind::Flag(false),
    )
}

#[test]
fn the_block_sees_the_target_and_keeps_what_borrows_from_its_cache() {
    let library = Library::new();
    let dir = tempfile::tempdir().unwrap();
    let vars = [
        ("TARGET", "riscv64gc-unknown-linux-gnu"),
        ("CARGO_CFG_TARGET_ARCH", "riscv64"),
        ("CARGO_CFG_TARGET_FEATURE", "a,c,d,f,m"),
    ];
    let target = Target::from_vars(vars.map(|(k, v)| (k.to_owned(), v.to_owned()))).unwrap();
    let mut seen = None;
    library
        .precompile(dir.path(), &mut Vec::new())
        .target(target)
        .run(|session| {
            let arch = session.target().map(|t| t.arch().to_owned());
            // A hit borrows from the block's cache: it can be returned.
            let hit = session.specialize("a", |cache| {
                compile(cache, "a")?;
                cache.get_or_compile(&owner(), &key("a"), || Err("compiled above".into()))
            });
            seen = Some((arch, hit.map(|h| h.name().to_owned())));
            Ok(())
        })
        .unwrap();
    assert_eq!(
        seen,
        Some((Some("riscv64".to_owned()), Some("a".to_owned())))
    );
}

#[test]
fn reruns_follow_declared_and_backend_variables_not_run_time_switches() {
    let declared = BTreeSet::from(["DEMO_ARCH".to_owned()]);
    let set = [
        "KILN_NVRTC",
        "KILN_DISABLE",
        "KILN_LOG",
        "KILN_TEST_BACKEND_STRICT",
        "KILN_TEST_BACKEND_OTHER",
        "PATH",
    ]
    .map(str::to_owned);
    let vars: Vec<String> = rerun_env_vars(declared, set).into_iter().collect();
    assert_eq!(
        vars,
        ["DEMO_ARCH", "KILN_NVRTC", "KILN_TEST_BACKEND_OTHER"],
        "a registered run-time switch is left out like kiln-core's own"
    );
}

/// One compile of a test block.
type Work = Box<dyn FnOnce(&Cache) -> Result<(), Error> + Send>;

#[test]
fn specializations_done_in_parallel_write_the_image_of_a_sequential_run() {
    let labels = ["a", "b", "c", "missing", "d", "e"];
    let library = Library::new();
    let run = |jobs: usize, dir: &Path| {
        library
            .precompile(dir, &mut Vec::new())
            .run(|session| {
                let work: Vec<(String, Work)> = labels
                    .iter()
                    .map(|&label| {
                        let compile: Work = match label {
                            "missing" => Box::new(|_| Err(unreachable())),
                            _ => Box::new(move |cache| compile(cache, label)),
                        };
                        (label.to_owned(), compile)
                    })
                    .collect();
                let results = session.specialize_all(jobs, work);
                assert_eq!(results.iter().filter(|r| r.is_some()).count(), 5);
                Ok(())
            })
            .unwrap()
    };
    let (one, two) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let sequential = run(1, one.path());
    let parallel = run(4, two.path());
    assert_eq!(
        std::fs::read(&sequential.path).unwrap(),
        std::fs::read(&parallel.path).unwrap()
    );
    let ready: Vec<&str> = parallel.ready.iter().map(|(l, _)| l.as_str()).collect();
    assert_eq!(
        ready,
        ["a", "b", "c", "d", "e"],
        "reported in the order given"
    );
    assert_eq!(parallel.missing.len(), 1);
}

/// An error that says this machine cannot compile, as a backend's error
/// wrapping it would.
fn unreachable() -> Error {
    Error::Backend {
        backend: "test",
        source: Box::new(Unavailable::new("no compiler on this machine")),
    }
}

#[test]
fn a_corrupt_disk_entry_is_compiled_again_and_the_image_keeps_every_entry() {
    let disk = tempfile::tempdir().unwrap();
    let library = Library::new().with_disk_cache(disk.path());
    let first = tempfile::tempdir().unwrap();
    let cold = run_names(&library, first.path(), &["a", "b"], &mut Vec::new()).unwrap();
    assert_eq!(cold.compiles, 2);
    // Damage the last payload byte of every segment.
    let mut damaged = 0;
    for entry in walk_files(disk.path()) {
        if entry.extension().is_some_and(|e| e == "kimg") {
            let mut bytes = std::fs::read(&entry).unwrap();
            let last = bytes.len() - 1;
            bytes[last] ^= 0xff;
            std::fs::write(&entry, bytes).unwrap();
            damaged += 1;
        }
    }
    assert!(damaged > 0, "the disk tier wrote no segment");
    let second = tempfile::tempdir().unwrap();
    let warm = run_names(&library, second.path(), &["a", "b"], &mut Vec::new()).unwrap();
    assert!(
        warm.compiles >= 1,
        "a corrupt entry was taken from the disk"
    );
    assert_eq!(warm.entries, 2);
    assert_eq!(
        std::fs::read(&cold.path).unwrap(),
        std::fs::read(&warm.path).unwrap()
    );
}

/// Every file below `dir`.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk_files(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// An entry of `name` whose bytes no compiler made, as a disk tier holds
/// one received unsigned from another tier.
fn planted(name: &str) -> kiln_image::EntryData {
    kiln_image::EntryData {
        owner: owner().digest(),
        owner_label: owner().label().to_owned(),
        key: *key(name).digest(),
        name: name.to_owned(),
        min_world: crate::World::FIRST.0,
        max_world: crate::World::MAX.0,
        deps: Vec::new(),
        artifacts: vec![Artifact {
            kind: ArtifactKind::Object,
            entry_points: vec![name.to_owned()],
            bytes: b"planted".to_vec(),
        }],
    }
}

fn object_bytes(path: &Path, name: &str) -> Vec<u8> {
    let image = Image::open(path, Verification::Full).unwrap();
    let entry = (0..image.len())
        .map(|i| image.entry(i).unwrap())
        .find(|entry| entry.name() == name)
        .unwrap();
    let artifact = entry.artifact(0).unwrap();
    artifact.bytes().unwrap().to_vec()
}

#[test]
fn a_block_takes_no_entry_received_unsigned_from_the_disk_tier_unless_told_and_then_says_so() {
    let disk = tempfile::tempdir().unwrap();
    let planted_in =
        crate::disk::DiskCache::open(crate::disk::DiskConfig::new(disk.path())).unwrap();
    assert!(planted_in.put_unsigned(&planted("a"), "remote"));
    drop(planted_in);

    // No keys at all: the block still embeds only what it can vouch for.
    // The planted entry is refused, compiled, and the summary says so.
    let library = Library::new().with_disk_cache(disk.path());
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let unsigned = run_names(&library, out.path(), &["a"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!((unsigned.compiles, unsigned.from_tier("disk")), (1, 0));
    assert_eq!(object_bytes(&unsigned.path, "a"), b"a");
    assert_eq!(unsigned.unverified, 0);
    assert!(log.contains("1 refused unverified"), "{log}");
    assert!(
        log.contains(
            "cargo::warning=kiln: demo: 1 entries found in the disk or remote tier were not used"
        ),
        "{log}"
    );
    let image = Image::open(&unsigned.path, Verification::Full).unwrap();
    assert!(
        !image
            .meta()
            .labels
            .contains_key(Provenance::UNVERIFIED_LABEL)
    );

    // Opted in: taken from the disk, recorded as unverified in the image,
    // and not for shipping.
    let mut opted = Library::new().with_disk_cache(disk.path());
    opted.vars.push((BUILD_UNVERIFIED, "1".into()));
    let planted_again = tempfile::tempdir().unwrap();
    let planted_in =
        crate::disk::DiskCache::open(crate::disk::DiskConfig::new(planted_again.path())).unwrap();
    assert!(planted_in.put_unsigned(&planted("a"), "remote"));
    drop(planted_in);
    let opted = opted.with_disk_cache(planted_again.path());
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let taken = run_names(&opted, out.path(), &["a", "b"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(
        (
            taken.compiles,
            taken.from_tier("unverified disk"),
            taken.unverified
        ),
        (1, 1, 1),
        "{log}"
    );
    assert_eq!(object_bytes(&taken.path, "a"), b"planted");
    let image = Image::open(&taken.path, Verification::Full).unwrap();
    assert_eq!(
        crate::trust::unverified_entries(&image.meta().labels).unwrap(),
        [(owner().digest(), *key("a").digest())]
    );
    assert!(
        taken
            .not_shippable
            .as_deref()
            .is_some_and(|why| why.contains("unverified"))
    );
    assert!(log.contains("KILN_TRUSTED_KEYS refuses them"), "{log}");

    // Signed build: the signature would vouch for the planted bytes, so the
    // entry is compiled here instead, opted in or not.
    let keys = tempfile::tempdir().unwrap();
    let key_file = keys.path().join("key");
    let key = SigningKey::from_secret_bytes([9; 32]);
    crate::trust::write_signing_key(&key, &key_file).unwrap();
    let mut library = opted;
    library
        .vars
        .push((crate::trust::SIGNING_KEY, key_file.into_os_string()));
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    let signed = run_names(&library, out.path(), &["a"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    assert_eq!(
        (signed.compiles, signed.from_tier("disk"), signed.unverified),
        (1, 0, 0)
    );
    assert!(log.contains("KILN_BUILD_UNVERIFIED is ignored"), "{log}");
    assert_eq!(object_bytes(&signed.path, "a"), b"a");
    let image = Image::open(&signed.path, Verification::Full).unwrap();
    assert!(
        image
            .verify_signature(&kiln_image::TrustedKeys::new([key.public_key()]))
            .is_ok()
    );

    // What this user compiled is vouched for: the next signed build finds it.
    let out = tempfile::tempdir().unwrap();
    let again = run_names(&library, out.path(), &["a"], &mut Vec::new()).unwrap();
    assert_eq!((again.compiles, again.from_tier("disk")), (0, 1));
    assert_eq!(object_bytes(&again.path, "a"), b"a");
}

/// The shipped image `library.ship` wrote.
fn shipped_file(library: &Library) -> PathBuf {
    library.root.path().join("kiln-shipped/demo.kship")
}

/// A block that cannot compile: it finds `names` or leaves them missing.
fn run_without_compiler(
    library: &Library,
    out: &Path,
    names: &[&str],
    log: &mut Vec<u8>,
) -> Result<PrecompileReport, Error> {
    library.precompile(out, log).run(|session| {
        for name in names {
            session.specialize(name, |cache| {
                cache
                    .get_cached(&owner(), &key(name))
                    .map(|_| ())
                    .ok_or_else(|| Unavailable::new("no compiler here"))
            });
        }
        Ok(())
    })
}

#[test]
fn a_signed_build_signs_shipped_entries_only_when_a_trusted_key_signed_the_shipped_image() {
    let keys = tempfile::tempdir().unwrap();
    let fleet = SigningKey::from_secret_bytes([0x21; 32]);
    let fleet_file = keys.path().join("fleet.key");
    crate::trust::write_signing_key(&fleet, &fleet_file).unwrap();
    let author = SigningKey::from_secret_bytes([0x22; 32]);
    let author_pub = keys.path().join("author.pub");
    std::fs::write(&author_pub, format!("{}\n", author.public_key())).unwrap();

    for (shipped_by, trusts_author) in [
        (None, false),
        (Some(&author), false),
        (Some(&author), true),
        (Some(&fleet), false),
    ] {
        let mut library = Library::new().shipping();
        let first = tempfile::tempdir().unwrap();
        run_names(&library, first.path(), &["a", "b"], &mut Vec::new()).unwrap();
        library.ship(first.path(), shipped_by);
        library.vars.retain(|(name, _)| *name != SHIP_CANDIDATE);
        library.vars.push((
            crate::trust::SIGNING_KEY,
            fleet_file.clone().into_os_string(),
        ));
        if trusts_author {
            library.vars.push((
                crate::trust::TRUSTED_KEYS,
                author_pub.clone().into_os_string(),
            ));
        }
        let vouched =
            shipped_by.is_some_and(|k| trusts_author || k.public_key() == fleet.public_key());
        let case = format!(
            "shipped by {:?}, author trusted: {trusts_author}",
            shipped_by.map(SigningKey::public_key)
        );

        // With a compiler: a vouched shipped image serves, any other is
        // compiled over.
        let with = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let report = run_names(&library, with.path(), &["a", "b"], &mut log).unwrap();
        let log = String::from_utf8(log).unwrap();
        if vouched {
            assert_eq!(
                (report.compiles, report.from_tier("shipped")),
                (0, 2),
                "{case}\n{log}"
            );
        } else {
            assert_eq!(
                (report.compiles, report.from_tier("shipped")),
                (2, 0),
                "{case}\n{log}"
            );
            assert!(
                log.contains("this signed build cannot vouch for its entries"),
                "{case}\n{log}"
            );
        }

        // Without: an unvouched shipped image fails the build, naming why.
        let without = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let result = run_without_compiler(&library, without.path(), &["a", "b"], &mut log);
        let log = String::from_utf8(log).unwrap();
        if vouched {
            let report = result.unwrap();
            assert_eq!(report.from_tier("shipped"), 2, "{case}\n{log}");
        } else {
            let Err(Error::Precompile { failed, .. }) = result else {
                panic!("{case}: the build did not fail:\n{log}")
            };
            assert_eq!(failed.len(), 2, "{case}");
            assert!(
                log.contains("cargo::error=kiln: demo: a cannot be vouched for: the shipped image"),
                "{case}\n{log}"
            );
        }
    }
}

#[test]
fn a_shipped_file_that_is_a_link_a_fifo_or_unwritable_as_an_image_is_set_aside() {
    let library = Library::new().shipping();
    let first = tempfile::tempdir().unwrap();
    run_names(&library, first.path(), &["a"], &mut Vec::new()).unwrap();
    library.ship(first.path(), None);
    let shipped = shipped_file(&library);
    let good = std::fs::read(&shipped).unwrap();

    // An entry the image writer refuses (a custom artifact kind that is
    // empty), with every digest right: set aside with a warning.
    let mut entries = Shipped::from_bytes(&good).unwrap().entries().to_vec();
    entries[0].artifacts[0].kind = ArtifactKind::Custom(String::new());
    let bad = Shipped::new(
        Shipped::from_bytes(&good).unwrap().manifest,
        kiln_image::ImageMeta::default(),
        entries,
    )
    .encode_stored()
    .unwrap();
    #[cfg(unix)]
    let fifo = {
        let fifo = library.root.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        fifo
    };
    type Plant<'a> = Box<dyn Fn() + 'a>;
    let cases: Vec<(&str, Plant<'_>)> = vec![
        (
            "an unwritable entry",
            Box::new(|| std::fs::write(&shipped, &bad).unwrap()),
        ),
        #[cfg(unix)]
        (
            "a link to /dev/zero",
            Box::new(|| std::os::unix::fs::symlink("/dev/zero", &shipped).unwrap()),
        ),
        #[cfg(unix)]
        (
            "a link to the good file",
            Box::new(|| {
                let elsewhere = library.root.path().join("good.kship");
                std::fs::write(&elsewhere, &good).unwrap();
                std::os::unix::fs::symlink(&elsewhere, &shipped).unwrap()
            }),
        ),
        #[cfg(unix)]
        (
            "a FIFO",
            Box::new(|| std::fs::rename(&fifo, &shipped).unwrap()),
        ),
    ];
    for (case, plant) in cases {
        let _ = std::fs::remove_file(&shipped);
        plant();
        let out = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        let report = run_names(&library, out.path(), &["a"], &mut log).unwrap();
        let log = String::from_utf8(log).unwrap();
        assert_eq!(
            (report.compiles, report.from_tier("shipped")),
            (1, 0),
            "{case}\n{log}"
        );
        assert!(log.contains("is not used:"), "{case}\n{log}");
        // Watched all the same: a fixed file is read by the next build.
        assert!(
            log.contains(&format!("cargo::rerun-if-changed={}", shipped.display())),
            "{case}\n{log}"
        );
    }
}

#[test]
fn the_shipped_path_or_its_folder_is_watched_and_trust_variables_rerun_the_block() {
    let keys = tempfile::tempdir().unwrap();
    let trusted = keys.path().join("fleet.pub");
    std::fs::write(
        &trusted,
        format!("{}\n", SigningKey::from_secret_bytes([3; 32]).public_key()),
    )
    .unwrap();
    let mut library = Library::new();
    library
        .vars
        .push((crate::trust::TRUSTED_KEYS, trusted.clone().into_os_string()));
    let folder = library.root.path().join("kiln-shipped");
    let watched = |library: &Library| {
        let out = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        run_names(library, out.path(), &["a"], &mut log).unwrap();
        let log = String::from_utf8(log).unwrap();
        log.lines()
            .filter_map(|l| l.strip_prefix("cargo::rerun-if-"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    // Nothing shipped, no folder: not watched (a missing path would rerun
    // every build); the trust variables and the keys' file are.
    let lines = watched(&library);
    for expected in [
        "env-changed=KILN_TRUSTED_KEYS".to_owned(),
        "env-changed=KILN_BUILD_UNVERIFIED".to_owned(),
        "env-changed=KILN_CACHE_TRUST_DIR".to_owned(),
        "env-changed=KILN_SIGNING_KEY".to_owned(),
        format!("changed={}", trusted.display()),
    ] {
        assert!(lines.contains(&expected), "{expected} in {lines:?}");
    }
    assert!(
        !lines.iter().any(|l| l.contains("kiln-shipped")),
        "{lines:?}"
    );
    // The folder, once there: a shipped image appearing in it is read.
    std::fs::create_dir(&folder).unwrap();
    let lines = watched(&library);
    assert!(
        lines.contains(&format!("changed={}", folder.display())),
        "{lines:?}"
    );
    // Run-time switches still rerun nothing.
    assert!(
        !lines
            .iter()
            .any(|l| l.contains("KILN_DISABLE") || l.contains("KILN_CACHE_DIR"))
    );
}

#[test]
fn a_switch_that_is_no_boolean_is_a_warning_and_keeps_its_default() {
    let mut library = Library::new();
    library
        .vars
        .push((crate::env::ALWAYS_COMPILE, "yes please".into()));
    library.vars.push((BUILD_UNVERIFIED, "N".into()));
    let out = tempfile::tempdir().unwrap();
    let mut log = Vec::new();
    run_names(&library, out.path(), &["a"], &mut log).unwrap();
    let log = String::from_utf8(log).unwrap();
    for expected in [
        "cargo::warning=kiln: demo: KILN_ALWAYS_COMPILE=\"yes please\" is not a boolean",
        "cargo::warning=kiln: demo: KILN_BUILD_UNVERIFIED=\"N\" is not a boolean",
    ] {
        assert!(log.contains(expected), "{expected} in\n{log}");
    }
    assert!(log.contains("it stays off (its default)"), "{log}");
}

#[test]
fn trusted_keys_the_block_cannot_use_are_build_warnings() {
    let keys = tempfile::tempdir().unwrap();
    let missing = keys.path().join("missing.pub");
    for (value, expected) in [
        (
            OsString::new(),
            "KILN_TRUSTED_KEYS is set but names no file".to_owned(),
        ),
        (
            missing.clone().into_os_string(),
            format!("KILN_TRUSTED_KEYS names {}", missing.display()),
        ),
    ] {
        let mut library = Library::new();
        library.vars.push((crate::trust::TRUSTED_KEYS, value));
        let out = tempfile::tempdir().unwrap();
        let mut log = Vec::new();
        run_names(&library, out.path(), &["a"], &mut log).unwrap();
        let log = String::from_utf8(log).unwrap();
        assert!(
            log.contains(&format!("cargo::warning=kiln: demo: {expected}")),
            "{expected} in\n{log}"
        );
    }
}
