//! The staleness matrix of shipped images: a kernel library (three kernels,
//! one target) ships its precompile block's entries (`kiln-shipped/`, as
//! `kiln ship` writes them); then a build of the library after each change
//! below, once on a machine with NVRTC and once on one without, must use
//! every shipped entry that still matches, compile only what does not (with
//! NVRTC), name what it cannot compile (without), and never serve a shipped
//! entry the change made stale or that the library's key did not sign.
//!
//! Needs NVRTC (`scripts/install-cuda-wheels.sh`), no GPU. Without NVRTC the
//! test fails when `CI=true` and otherwise returns early saying so. The
//! table is printed with
//! `cargo test -p kiln-reliability --test staleness_shipped -- --nocapture`.

use std::path::PathBuf;

use kiln_core::build::{Precompile, PrecompileReport, SHIP_CANDIDATE};
use kiln_cuda::ToolchainError;
use kiln_cuda::toolchain::SearchConfig;
use kiln_cuda::{Arch, Compiler, Error, KernelRequest, ShipPlan, Toolchain};
use kiln_image::{Image, SigningKey, Verification};
use kiln_reliability::Table;
use kiln_ship::{CANDIDATE_EXTENSION, Candidate, Shipped, ShippedFile};

/// A kernel of the test library: `scale` by a constant, its source read
/// from the library's `src/kernels.cu` when `edited` is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Spec(u32);

fn source(factor: u32, edited: bool) -> String {
    let op = if edited { "-" } else { "+" };
    format!(
        "extern \"C\" __global__ void kiln_scale{factor}(int n, float* y) {{\n\
         \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (i < n) y[i] = y[i] * {factor}.0f {op} 1.0f;\n}}\n"
    )
}

/// The edited kernel of a row ("source changed after shipping"), or none.
static EDITED: std::sync::Mutex<Option<u32>> = std::sync::Mutex::new(None);

fn request(spec: &Spec, _toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
    let edited = *EDITED.lock().unwrap_or_else(|e| e.into_inner()) == Some(spec.0);
    Ok(KernelRequest::new(
        format!("kiln_scale{}", spec.0),
        source(spec.0, edited),
        arch,
    )
    .name_expression(format!("kiln_scale{}", spec.0)))
}

const TARGETS: &str = "sm_90";

/// A library folder, and how it is built.
struct Library {
    root: tempfile::TempDir,
}

/// What one build did.
struct Built {
    report: PrecompileReport,
    warnings: Vec<String>,
    _out: tempfile::TempDir,
}

impl Library {
    fn new() -> Library {
        Library {
            root: tempfile::tempdir().expect("a temporary directory"),
        }
    }

    /// Builds the library's block with `specs`, into a fresh OUT_DIR, on a
    /// machine with NVRTC or without; `key` is the public key the library
    /// names for its shipped image, if any.
    fn build(&self, specs: &[Spec], with_nvrtc: bool, key: Option<&str>) -> Built {
        let out = tempfile::tempdir().expect("a temporary directory");
        let mut log = Vec::new();
        let local = if with_nvrtc {
            Compiler::new().map(|c| Toolchain::with_compiler(c, SearchConfig::from_env()))
        } else {
            Err(ToolchainError::NoNvrtc {
                version: "(none on this machine)".into(),
            })
        };
        let mut plan = ShipPlan::parse(TARGETS)
            .expect("targets")
            .with_local_toolchain(local);
        let vars =
            kiln_core::settings::Vars::from_iter([("KILN_CACHE", "0"), (SHIP_CANDIDATE, "1")]);
        let mut precompile = Precompile::new("shipped-staleness")
            .out_dir(out.path())
            .library_dir(self.root.path())
            .env(vars)
            .output(&mut log);
        if let Some(key) = key {
            precompile = precompile.shipped_key(key);
        }
        let report = precompile
            .run(|session| Ok(plan.precompile(session, specs, request)?))
            .expect("the build succeeds");
        let warnings = String::from_utf8_lossy(&log)
            .lines()
            .filter(|l| l.starts_with("cargo::warning="))
            .map(str::to_owned)
            .collect();
        Built {
            report,
            warnings,
            _out: out,
        }
    }

    /// Ships what `built` got, as `kiln ship` does (stored), signed by `key`.
    fn ship(&self, built: &Built, key: Option<&SigningKey>) {
        let candidate = Candidate::read(&built.report.path.with_extension(CANDIDATE_EXTENSION))
            .expect("candidate");
        let entries = candidate.entries.expect("KILN_SHIP_CANDIDATE was set");
        let image = Image::open(&entries, Verification::Full).expect("entries");
        let mut bytes = Shipped::from_image(&image, candidate.manifest)
            .expect("shipped")
            .encode_stored()
            .expect("encoded");
        if let Some(key) = key {
            bytes = ShippedFile::parse(&bytes)
                .and_then(|f| f.signed_with(key))
                .expect("signed");
        }
        let path: PathBuf = candidate.shipped;
        std::fs::create_dir_all(path.parent().expect("folder")).expect("mkdir");
        std::fs::write(path, bytes).expect("write");
    }
}

/// One row: what was changed since shipping, the build's outcome with and
/// without NVRTC, and how it was caught.
struct Row {
    with_nvrtc: Outcome,
    without: Outcome,
    caught_by: &'static str,
}

/// Where a build's entries came from.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    shipped: u64,
    compiled: u64,
    missing: usize,
}

impl Outcome {
    fn of(built: &Built) -> Outcome {
        Outcome {
            shipped: built.report.from_tier("shipped"),
            compiled: built.report.compiles,
            missing: built.report.missing.len(),
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} shipped, {} compiled, {} missing",
            self.shipped, self.compiled, self.missing
        )
    }
}

const fn outcome(shipped: u64, compiled: u64, missing: usize) -> Outcome {
    Outcome {
        shipped,
        compiled,
        missing,
    }
}

/// How a case changes the library after shipping: the specializations it
/// then builds, and the shipped image's public key it names, if any.
type Change<'a> = dyn Fn(&Library) -> (Vec<Spec>, Option<String>) + 'a;

#[test]
fn shipped_entries_serve_only_while_they_match_and_are_trusted() {
    let Some(_) = kiln_test_support::ci::required(
        Compiler::new(),
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    ) else {
        return;
    };
    let base = [Spec(2), Spec(3), Spec(4)];
    let key = SigningKey::from_secret_bytes([0x42; 32]);
    let public = key.public_key().to_hex();
    let other = SigningKey::from_secret_bytes([0x24; 32]);

    // Each case: a fresh library, shipped from a build with NVRTC, then
    // built after `change` with and without NVRTC.
    let case = |change: &Change<'_>, signer: Option<&SigningKey>| -> (Built, Built) {
        *EDITED.lock().unwrap_or_else(|e| e.into_inner()) = None;
        let library = Library::new();
        let shipped = library.build(&base, true, None);
        assert_eq!(shipped.report.compiles, 3, "{:?}", shipped.warnings);
        library.ship(&shipped, signer);
        let (specs, key) = change(&library);
        let with = library.build(&specs, true, key.as_deref());
        let without = library.build(&specs, false, key.as_deref());
        *EDITED.lock().unwrap_or_else(|e| e.into_inner()) = None;
        (with, without)
    };

    let mut rows = Vec::new();
    let (with, without) = case(&|_| (base.to_vec(), None), None);
    rows.push((
        "nothing changed since shipping",
        with,
        without,
        "every key found in the shipped image",
    ));
    let (with, without) = case(
        &|_| {
            *EDITED.lock().unwrap_or_else(|e| e.into_inner()) = Some(3);
            (base.to_vec(), None)
        },
        None,
    );
    rows.push((
        "one kernel's source changed after shipping",
        with,
        without,
        "key (not in the shipped image)",
    ));
    let (with, without) = case(&|_| (vec![Spec(2), Spec(3), Spec(4), Spec(5)], None), None);
    rows.push((
        "a specialization added after shipping",
        with,
        without,
        "key (not in the shipped image)",
    ));
    let (with, without) = case(&|_| (base.to_vec(), Some(public.clone())), Some(&key));
    rows.push((
        "signed by the key the library names",
        with,
        without,
        "signature verified",
    ));
    let (with, without) = case(&|_| (base.to_vec(), Some(public.clone())), None);
    rows.push((
        "signature missing (the library names a key)",
        with,
        without,
        "shipped image not used: not signed",
    ));
    let (with, without) = case(&|_| (base.to_vec(), Some(public.clone())), Some(&other));
    rows.push((
        "signed by another key",
        with,
        without,
        "shipped image not used: not signed by the named key",
    ));
    let (with, without) = case(
        &|library: &Library| {
            let path = library
                .root
                .path()
                .join("kiln-shipped/shipped-staleness.kship");
            let mut bytes = std::fs::read(&path).expect("shipped");
            let middle = bytes.len() / 2;
            bytes[middle] ^= 0x10;
            std::fs::write(&path, bytes).expect("write");
            (base.to_vec(), None)
        },
        None,
    );
    rows.push((
        "shipped image damaged",
        with,
        without,
        "digest check: shipped image not used",
    ));

    let expected = [
        Row {
            with_nvrtc: outcome(3, 0, 0),
            without: outcome(3, 0, 0),
            caught_by: rows[0].3,
        },
        Row {
            with_nvrtc: outcome(2, 1, 0),
            without: outcome(2, 0, 1),
            caught_by: rows[1].3,
        },
        Row {
            with_nvrtc: outcome(3, 1, 0),
            without: outcome(3, 0, 1),
            caught_by: rows[2].3,
        },
        Row {
            with_nvrtc: outcome(3, 0, 0),
            without: outcome(3, 0, 0),
            caught_by: rows[3].3,
        },
        Row {
            with_nvrtc: outcome(0, 3, 0),
            without: outcome(0, 0, 3),
            caught_by: rows[4].3,
        },
        Row {
            with_nvrtc: outcome(0, 3, 0),
            without: outcome(0, 0, 3),
            caught_by: rows[5].3,
        },
        Row {
            with_nvrtc: outcome(0, 3, 0),
            without: outcome(0, 0, 3),
            caught_by: rows[6].3,
        },
    ];
    let mut table = Table::new([
        "change since shipping",
        "build with NVRTC",
        "build without NVRTC",
        "caught by",
    ]);
    for (row, (input, with, without, _)) in expected.iter().zip(&rows) {
        table.row([
            input.to_string(),
            Outcome::of(with).describe(),
            Outcome::of(without).describe(),
            row.caught_by.to_string(),
        ]);
    }
    println!("{table}");
    for (row, (input, with, without, _)) in expected.iter().zip(&rows) {
        assert_eq!(
            Outcome::of(with),
            row.with_nvrtc,
            "{input}, with NVRTC: {:?}",
            with.warnings
        );
        assert_eq!(
            Outcome::of(without),
            row.without,
            "{input}, without NVRTC: {:?}",
            without.warnings
        );
        if row.without.missing > 0 {
            let named = without
                .warnings
                .iter()
                .any(|w| w.contains("not precompiled") && w.contains("kiln_scale"));
            assert!(
                named,
                "{input}: the missing kernels are named: {:?}",
                without.warnings
            );
        }
    }
    // The refusals say why.
    for (index, why) in [
        (4, "not signed by"),
        (5, "not signed by"),
        (6, "is not used"),
    ] {
        let warnings = &rows[index].1.warnings;
        assert!(
            warnings.iter().any(|w| w.contains(why)),
            "{}: {warnings:?}",
            rows[index].0
        );
    }
}
