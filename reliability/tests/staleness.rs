//! The staleness matrix: for every input that changes generated code, a
//! change gives a MISS through the whole path (compile with NVRTC → write an
//! image → a fresh cache merges it → the lookup with the changed input
//! misses and compiles); for inputs that do not change code, a HIT.
//!
//! Needs NVRTC (`scripts/install-cuda-wheels.sh`), no GPU. Without NVRTC the
//! test fails when `CI=true` and otherwise returns early saying so.
//!
//! Each distinct kernel variant is compiled once; rows that change no code
//! (NVRTC version, format version, dependency definition) hand the cache
//! the baseline's compile output, and the row asserts that the cache asked
//! for a compile at all. The table is printed with
//! `cargo test -p kiln-reliability --test staleness -- --nocapture`.
//!
//! The last rows are the toolchain policy of a shipped kernel library
//! (`KernelLibrary` over a `BuildRecord`): with the local toolchain absent,
//! of another NVRTC release, or with other headers, a shipped entry is served
//! by default (it is valid code for its arch) and, under
//! `KILN_STRICT_TOOLCHAIN=1`, compiled again by a local toolchain that
//! differs (an absent one differs from nothing).

use std::path::{Path, PathBuf};
use std::process::Command;

use kiln_core::disk::{DiskCache, DiskConfig};
use kiln_core::settings::Settings;
use kiln_core::{ArtifactKind, Cache, Compiled, Digest, Key, Owner, Source, load_images};
use kiln_cuda::{
    Arch, Compiler, Device, IncludeDir, KernelLibrary, KernelRequest, Toolchain,
    request::nvrtc_fingerprint,
    select::Selection,
    toolchain::CompiledKernel,
    toolchain::NvrtcVersion,
    toolchain::SearchConfig,
    toolchain::{BuildRecord, ToolchainPolicy},
};
use kiln_image::header::{FORMAT_VERSION, offsets, reseal_header};
use kiln_image::{Image, ImageMeta, Verification};
use kiln_reliability::Table;
use kiln_reliability::kernels::{self, Change, HEADER_NAME, request};

/// The definition the baseline entry depends on (its header, as a library
/// would record it), at two fingerprints.
const DEP: &str = "kiln_scale.h";

fn fingerprint(version: u32) -> Digest {
    Digest::of(format!("{HEADER_NAME} v{version}").as_bytes())
}

/// A kernel that takes its offset from a header in an include directory.
const INCLUDING_SOURCE: &str = r#"#include "kiln_offset.h"
extern "C" __global__ void kiln_offset(int n, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += KILN_OFFSET;
}
"#;

/// An include directory at `dir` holding `kiln_offset.h` with `offset`.
fn include_dir(dir: &Path, offset: u32) -> PathBuf {
    std::fs::create_dir_all(dir).expect("mkdir");
    std::fs::write(
        dir.join("kiln_offset.h"),
        format!("#pragma once\n#define KILN_OFFSET {offset}.0f\n"),
    )
    .expect("write header");
    dir.to_path_buf()
}

fn including_request(dir: &Path) -> KernelRequest {
    let arch = kernels::ARCH.parse().expect("arch");
    KernelRequest::new("kiln_offset", INCLUDING_SOURCE, arch)
        .include_dir(IncludeDir::rescan(dir).expect("fingerprint"))
        .name_expression("kiln_offset")
}

fn compiler() -> Option<Compiler> {
    kiln_test_support::ci::required(
        Compiler::new(),
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
}

fn meta() -> ImageMeta {
    ImageMeta::new("kiln-reliability", "1")
}

/// What a lookup through a cache did.
struct Outcome {
    hit: Option<Source>,
    compiled: bool,
    cubin: Vec<u8>,
}

/// Looks `(owner, key)` up in `cache`, then gets or compiles it with
/// `compile`; says whether the lookup hit and whether `compile` ran.
fn ask(cache: &Cache, owner: &Owner, key: &Key, compile: impl FnOnce() -> Compiled) -> Outcome {
    let hit = cache.lookup(&owner.digest(), key).map(|h| h.source());
    let mut compiled = false;
    let answer = cache
        .get_or_compile(owner, key, || {
            compiled = true;
            Ok(compile())
        })
        .expect("get_or_compile");
    Outcome {
        hit,
        compiled,
        cubin: answer
            .artifact(&ArtifactKind::Cubin)
            .expect("a CUBIN")
            .to_vec(),
    }
}

/// A fresh cache that knows the dependency at `dep_version`, with `images`
/// merged in order.
fn fresh(images: &[&Path], dep_version: u32) -> Cache {
    let cache = Cache::new();
    cache.define(DEP, fingerprint(dep_version));
    for path in images {
        let image = Image::open(path, Verification::Structural).expect("image opens");
        let report = cache.merge_image(image);
        assert!(report.rejected.is_empty(), "{report}");
    }
    cache
}

fn entry(kernel: &CompiledKernel, request: &KernelRequest, dep_version: u32) -> Compiled {
    kernel
        .clone()
        .into_compiled(request.name())
        .dep(DEP, fingerprint(dep_version))
}

/// Runs the helper process's `probe` role and returns its RESULT fields.
fn probe(images: &[&Path], env: &[(&str, &str)], cwd: &Path) -> (String, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_kiln-reliability-child"));
    command
        .arg("probe")
        .arg("none")
        .args(images)
        .current_dir(cwd);
    command.env_remove("KILN_CACHE_DIR").env("KILN_CACHE", "0");
    for (name, value) in env {
        command.env(name, value);
    }
    let output = command.output().expect("probe runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result = stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .expect("a RESULT line");
    let field = |name: &str| {
        result
            .split_whitespace()
            .find_map(|f| f.strip_prefix(&format!("{name}=")))
            .unwrap_or_default()
            .to_owned()
    };
    (field("source"), field("compiles"), field("cubin"))
}

struct Matrix {
    table: Table,
    nvrtc_compiles: usize,
}

impl Matrix {
    fn miss(&mut self, input: &str, caught_by: &str, outcome: &Outcome, differs: &str) {
        assert_eq!(
            outcome.hit, None,
            "{input}: a changed input was a stale HIT"
        );
        assert!(outcome.compiled, "{input}: the cache did not compile");
        self.table
            .row([input, "MISS", "MISS, compiled", caught_by, differs]);
    }

    fn hit(&mut self, input: &str, how: &str) {
        self.table
            .row([input, "HIT", "HIT, 0 compiles", how, "no (same bytes)"]);
    }
}

#[test]
fn every_codegen_input_misses_and_every_other_input_hits() {
    let Some(compiler) = compiler() else { return };
    let work = tempfile::tempdir().expect("temp dir");
    let dir = work.path();
    let mut matrix = Matrix {
        table: Table::new([
            "input",
            "expected",
            "observed",
            "caught by",
            "CUBIN differs from baseline",
        ]),
        nvrtc_compiles: 0,
    };

    // The build: compile the baseline once, record it, write the image.
    let base = request(Change::None).expect("request");
    let (base_owner, base_key) = (
        compiler.owner(&base).expect("owner"),
        base.key().expect("key"),
    );
    let kernel = compiler.compile(&base).expect("baseline compiles");
    matrix.nvrtc_compiles += 1;
    let build = Cache::new();
    build.define(DEP, fingerprint(1));
    let start = build.snapshot();
    let built = ask(&build, &base_owner, &base_key, || entry(&kernel, &base, 1));
    assert!(built.compiled);
    // A second entry whose header comes from a fingerprinted include dir.
    let inc = including_request(&include_dir(&dir.join("include-v1"), 1));
    let (inc_owner, inc_key) = (
        compiler.owner(&inc).expect("owner"),
        inc.key().expect("key"),
    );
    let inc_kernel = compiler.compile(&inc).expect("including kernel compiles");
    matrix.nvrtc_compiles += 1;
    assert!(
        ask(&build, &inc_owner, &inc_key, || inc_kernel
            .clone()
            .into_compiled(inc.name()))
        .compiled
    );
    let image_a = dir.join("baseline.kimg");
    build
        .delta(&start)
        .write_image(&image_a, meta())
        .expect("image written");

    // Control: nothing changed.
    let control = ask(&fresh(&[&image_a], 1), &base_owner, &base_key, || {
        unreachable_compile()
    });
    assert_eq!(
        (control.hit, control.compiled),
        (Some(Source::Image), false)
    );
    assert_eq!(control.cubin, kernel.cubin);
    matrix.hit(Change::None.describe(), "image entry served, bytes equal");

    // Every change of the request: one NVRTC compile each.
    let mut arch_image = None;
    for change in Change::REQUEST_CHANGES {
        let changed = request(change).expect("request");
        let (owner, key) = (
            compiler.owner(&changed).expect("owner"),
            changed.key().expect("key"),
        );
        let caught_by = match (owner != base_owner, key != base_key) {
            (true, true) => "owner and key",
            (true, false) => "owner",
            (false, true) => "key",
            (false, false) => panic!("{change:?}: neither owner nor key changed"),
        };
        let cache = fresh(&[&image_a], 1);
        let start = cache.snapshot();
        let outcome = ask(&cache, &owner, &key, || {
            let variant = compiler.compile(&changed).expect("variant compiles");
            entry(&variant, &changed, 1)
        });
        matrix.nvrtc_compiles += 1;
        let differs = if outcome.cubin != kernel.cubin {
            "yes"
        } else {
            "no"
        };
        matrix.miss(change.describe(), caught_by, &outcome, differs);
        if change == Change::Arch {
            let path = dir.join("sm_80.kimg");
            cache
                .delta(&start)
                .write_image(&path, meta())
                .expect("image written");
            arch_image = Some((path, owner, key, outcome.cubin));
        }
    }

    // A file in an include directory changed (same path, rescanned).
    let changed = including_request(&include_dir(&dir.join("include-v1"), 2));
    let key = changed.key().expect("key");
    assert_ne!(key, inc_key);
    let outcome = ask(&fresh(&[&image_a], 1), &inc_owner, &key, || {
        compiler
            .compile(&changed)
            .expect("compiles")
            .into_compiled(changed.name())
    });
    matrix.nvrtc_compiles += 1;
    let differs = if outcome.cubin != inc_kernel.cubin {
        "yes"
    } else {
        "no"
    };
    matrix.miss(
        "a file in an include directory (same path)",
        "key",
        &outcome,
        differs,
    );

    // Another NVRTC version: an owner built through the public API.
    let real = compiler.version().clone();
    let other = NvrtcVersion {
        major: real.major,
        minor: real.minor,
        release: format!("{}.{}.9999", real.major, real.minor),
    };
    let owner = base.owner(&other).expect("owner");
    assert_ne!(owner, base_owner);
    let outcome = ask(&fresh(&[&image_a], 1), &owner, &base_key, || {
        entry(&kernel, &base, 1)
    });
    matrix.miss(
        &format!("NVRTC version: `{}` -> `{}`", real.release, other.release),
        "owner",
        &outcome,
        "n/a (one NVRTC here)",
    );

    // Another image format version: the image is skipped, the entry missed.
    let mut bytes = std::fs::read(&image_a).expect("read image");
    bytes[offsets::FORMAT_VERSION..][..4].copy_from_slice(&(FORMAT_VERSION + 1).to_le_bytes());
    reseal_header(&mut bytes);
    let future = dir.join("future");
    std::fs::create_dir(&future).expect("mkdir");
    std::fs::write(future.join("baseline.kimg"), &bytes).expect("write");
    let cache = Cache::new();
    cache.define(DEP, fingerprint(1));
    let mut settings = Settings::default();
    settings.images.path = vec![future.clone()];
    let report = load_images(&cache, &settings, &[]);
    let skipped: Vec<String> = report.skipped().map(|(_, e)| e.to_string()).collect();
    assert_eq!(skipped.len(), 1, "{report}");
    assert!(
        skipped[0].contains(&format!("format {}", FORMAT_VERSION + 1)),
        "{skipped:?}"
    );
    let outcome = ask(&cache, &base_owner, &base_key, || entry(&kernel, &base, 1));
    matrix.miss(
        &format!(
            "kiln image format version: {FORMAT_VERSION} -> {}",
            FORMAT_VERSION + 1
        ),
        "header check (image skipped)",
        &outcome,
        "n/a",
    );

    // A dependency defined differently in this process: stale at merge.
    let cache = Cache::new();
    cache.define(DEP, fingerprint(2));
    let report = cache.merge_image(Image::open(&image_a, Verification::Structural).expect("open"));
    // The baseline entry is stale; the other entry has no deps.
    assert_eq!((report.stale, report.inserted), (1, 1), "{report}");
    let outcome = ask(&cache, &base_owner, &base_key, || entry(&kernel, &base, 2));
    matrix.miss(
        "dependency definition differs at merge",
        "revalidation at merge (stale)",
        &outcome,
        "n/a",
    );

    // A dependency redefined after the merge: the image entry is closed.
    let cache = fresh(&[&image_a], 1);
    assert_eq!(
        cache
            .lookup(&base_owner.digest(), &base_key)
            .map(|h| h.source()),
        Some(Source::Image)
    );
    cache.redefine(DEP, fingerprint(2));
    let outcome = ask(&cache, &base_owner, &base_key, || entry(&kernel, &base, 2));
    matrix.miss(
        "dependency redefined after merge",
        "`redefine` closes the entry",
        &outcome,
        "n/a",
    );

    // Inputs that change no code.
    // The image file's location and name.
    let elsewhere = dir.join("moved").join("renamed-copy.kimg");
    std::fs::create_dir_all(elsewhere.parent().expect("parent")).expect("mkdir");
    std::fs::copy(&image_a, &elsewhere).expect("copy");
    let moved = ask(&fresh(&[&elsewhere], 1), &base_owner, &base_key, || {
        unreachable_compile()
    });
    assert_eq!((moved.hit, moved.compiled), (Some(Source::Image), false));
    assert_eq!(moved.cubin, kernel.cubin);
    matrix.hit(
        "image file location and name",
        "image entry served, bytes equal",
    );

    // The same include directory contents at another path.
    let moved_inc = including_request(&include_dir(&dir.join("elsewhere").join("include"), 1));
    assert_eq!(moved_inc.key().expect("key"), inc_key);
    let moved = ask(&fresh(&[&image_a], 1), &inc_owner, &inc_key, || {
        unreachable_compile()
    });
    assert_eq!((moved.hit, moved.compiled), (Some(Source::Image), false));
    assert_eq!(moved.cubin, inc_kernel.cubin);
    matrix.hit(
        "include directory path (same contents elsewhere)",
        "same key; image entry served, bytes equal",
    );

    // The order images are merged in.
    let (arch_path, arch_owner, arch_key, arch_cubin) = arch_image.expect("arch image");
    for order in [[&image_a, &arch_path], [&arch_path, &image_a]] {
        let cache = fresh(&[order[0], order[1]], 1);
        let a = ask(&cache, &base_owner, &base_key, unreachable_compile);
        let b = ask(&cache, &arch_owner, &arch_key, unreachable_compile);
        assert_eq!((a.hit, b.hit), (Some(Source::Image), Some(Source::Image)));
        assert_eq!(
            (a.cubin, b.cubin),
            (kernel.cubin.clone(), arch_cubin.clone())
        );
    }
    matrix.hit(
        "order the images are merged in",
        "both orders serve both entries",
    );

    // An unrelated environment variable and another working directory, in
    // a fresh process.
    let base_cubin = Digest::of(&kernel.cubin).to_hex();
    let plain = probe(&[&image_a], &[], dir);
    let other_cwd = tempfile::tempdir().expect("temp dir");
    let changed_env = probe(
        &[&image_a],
        &[
            ("KILN_RELIABILITY_UNRELATED", "1"),
            ("LC_ALL", "C"),
            ("TZ", "Pacific/Kiritimati"),
        ],
        other_cwd.path(),
    );
    for result in [&plain, &changed_env] {
        assert_eq!(
            result,
            &("image".to_owned(), "0".to_owned(), base_cubin.clone())
        );
    }
    matrix.hit(
        "unrelated env vars and working directory (fresh process)",
        "image entry served, bytes equal",
    );

    // The disk cache directory's path: filled at one path, moved, read by
    // a fresh process at the other.
    let first: PathBuf = dir.join("cache-here");
    let cache = Cache::new();
    cache.add_tier(Box::new(
        DiskCache::open(DiskConfig::new(&first)).expect("disk cache"),
    ));
    let stored = ask(&cache, &base_owner, &base_key, || entry(&kernel, &base, 1));
    assert!(stored.compiled);
    drop(cache);
    let second = dir.join("moved-cache").join("somewhere-else");
    std::fs::create_dir_all(second.parent().expect("parent")).expect("mkdir");
    std::fs::rename(&first, &second).expect("move the cache dir");
    let from_disk = probe(
        &[],
        &[
            ("KILN_CACHE", "1"),
            ("KILN_CACHE_DIR", &second.display().to_string()),
        ],
        dir,
    );
    assert_eq!(from_disk, ("tier".to_owned(), "0".to_owned(), base_cubin));
    matrix.hit(
        "disk cache directory path (moved, fresh process)",
        "disk entry served, bytes equal",
    );

    toolchain_rows(&compiler, dir, &mut matrix);

    println!(
        "\nStaleness matrix (NVRTC {}, {} NVRTC compiles in this test, 3 helper processes)\n\n{}",
        real.release, matrix.nvrtc_compiles, matrix.table
    );
    assert_eq!(matrix.table.rows().len(), 23);
}

/// The header set the shipped kernel of the toolchain rows includes.
const OFFSETS: &str = "offsets";

/// The shipped kernel of the toolchain rows: `kiln_offset`, its header from
/// the header set [`OFFSETS`] of `toolchain` (by recorded digest, or the local
/// directory).
fn offset_request(
    _: &(),
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln_cuda::Error> {
    Ok(KernelRequest::new("kiln_offset", INCLUDING_SOURCE, arch)
        .include_dir(toolchain.header_set(OFFSETS)?)
        .name_expression("kiln_offset"))
}

/// A local toolchain on the real NVRTC whose header set [`OFFSETS`] is `dir`.
fn local(compiler: &Compiler, dir: &Path) -> Toolchain {
    Toolchain::with_compiler(*compiler, SearchConfig::empty())
        .with_header_set(OFFSETS, IncludeDir::rescan(dir).expect("fingerprint"))
}

/// The toolchain policy rows: a library ships `kiln_offset` (header set
/// [`OFFSETS`] at offset 1) built by `release`; a process with `local` asks
/// for it under `policy`.
struct Shipment {
    image: PathBuf,
    record: BuildRecord,
    cubin: Vec<u8>,
}

impl Shipment {
    /// Compiles the kernel with the real NVRTC and files it as NVRTC
    /// `release` would have (its owner and `cuda.nvrtc` dep), with the
    /// headers of `headers`.
    fn build(compiler: &Compiler, headers: &Path, release: &NvrtcVersion, at: &Path) -> Shipment {
        let arch: Arch = kernels::ARCH.parse().expect("arch");
        let toolchain = local(compiler, headers);
        let request = offset_request(&(), &toolchain, arch).expect("request");
        let kernel = compiler.compile(&request).expect("compiles");
        let mut entry = compiler.entry(kernel.clone(), &request);
        for dep in &mut entry.deps {
            if dep.name == kiln_cuda::request::NVRTC_DEP {
                dep.fingerprint = nvrtc_fingerprint(release);
            }
        }
        let cache = Cache::new();
        let start = cache.snapshot();
        let owner = request.owner(release).expect("owner");
        let key = request.key().expect("key");
        cache
            .get_or_compile(&owner, &key, || Ok(entry))
            .expect("recorded");
        cache.delta(&start).write_image(at, meta()).expect("image");
        let digest = request.include_dirs()[0].digest();
        Shipment {
            image: at.to_path_buf(),
            record: BuildRecord::new(release.clone())
                .with_cubin_targets([arch])
                .with_ptx_target(Some(arch))
                .with_header_set(OFFSETS, digest),
            cubin: kernel.cubin,
        }
    }

    /// Asks for the kernel in a fresh process-like cache (the image merged)
    /// with `local` under `policy`.
    fn ask(
        &self,
        policy: ToolchainPolicy,
        local: Result<Toolchain, kiln_cuda::ToolchainError>,
    ) -> Outcome {
        let cache = Cache::new();
        let image = Image::open(&self.image, Verification::Structural).expect("image opens");
        assert_eq!(cache.merge_image(image).inserted, 1);
        let library = KernelLibrary::with_record(self.record.clone(), offset_request)
            .with_policy(policy)
            .with_local_toolchain(local);
        let device = Device::new(kernels::ARCH.parse().expect("arch"));
        let served = library.get(&cache, &device, &()).expect("served");
        let shipped = served.selection() != Selection::Compiled;
        Outcome {
            hit: shipped.then_some(served.hit().source()),
            compiled: cache.stats().compiles > 0,
            cubin: served
                .hit()
                .artifact(&ArtifactKind::Cubin)
                .expect("a CUBIN")
                .to_vec(),
        }
    }
}

fn toolchain_rows(compiler: &Compiler, dir: &Path, matrix: &mut Matrix) {
    let headers_v1 = include_dir(&dir.join("toolchain-offsets-v1"), 1);
    let headers_v2 = include_dir(&dir.join("toolchain-offsets-v2"), 2);
    let real = compiler.version().clone();
    let other = NvrtcVersion {
        release: format!("{}.{}.9999", real.major, real.minor),
        ..real.clone()
    };
    let same_release = Shipment::build(compiler, &headers_v1, &real, &dir.join("ship-real.kimg"));
    let other_release =
        Shipment::build(compiler, &headers_v1, &other, &dir.join("ship-other.kimg"));
    matrix.nvrtc_compiles += 2;
    let absent = || {
        Err(kiln_cuda::toolchain::locate_nvrtc(&SearchConfig::empty())
            .expect_err("nothing to find"))
    };
    use ToolchainPolicy::{Shipped, Strict};
    let served = |outcome: &Outcome, input: &str, shipment: &Shipment| {
        assert_eq!(
            (outcome.hit, outcome.compiled),
            (Some(Source::Image), false),
            "{input}"
        );
        assert_eq!(outcome.cubin, shipment.cubin, "{input}");
    };

    // No NVRTC, no headers here: the shipped entry is what there is.
    for (policy, setting) in [(Shipped, "default"), (Strict, "KILN_STRICT_TOOLCHAIN=1")] {
        let input = format!("local toolchain absent ({setting})");
        served(&same_release.ask(policy, absent()), &input, &same_release);
        matrix.hit(&input, "shipped entry served: nothing local to prefer");
    }

    // The entry was built by another NVRTC release than the local one.
    let input = format!(
        "local NVRTC {} vs shipped {} (default)",
        real.release, other.release
    );
    served(
        &other_release.ask(Shipped, Ok(local(compiler, &headers_v1))),
        &input,
        &other_release,
    );
    matrix.hit(&input, "shipped entry served: valid code for its arch");
    let input = format!(
        "local NVRTC {} vs shipped {} (KILN_STRICT_TOOLCHAIN=1)",
        real.release, other.release
    );
    let outcome = other_release.ask(Strict, Ok(local(compiler, &headers_v1)));
    matrix.nvrtc_compiles += 1;
    matrix.miss(
        &input,
        "strict policy: release differs",
        &outcome,
        "no (same code)",
    );

    // The entry was built with other headers than the local ones.
    let input = "local headers differ from the shipped entry's (default)";
    served(
        &same_release.ask(Shipped, Ok(local(compiler, &headers_v2))),
        input,
        &same_release,
    );
    matrix.hit(input, "shipped entry served, keyed by the recorded digest");
    let input = "local headers differ from the shipped entry's (KILN_STRICT_TOOLCHAIN=1)";
    let outcome = same_release.ask(Strict, Ok(local(compiler, &headers_v2)));
    matrix.nvrtc_compiles += 1;
    let differs = if outcome.cubin != same_release.cubin {
        "yes"
    } else {
        "no"
    };
    matrix.miss(
        input,
        "strict policy: header digest differs",
        &outcome,
        differs,
    );
}

/// The compile of a lookup that must hit: never called when the matrix
/// holds.
fn unreachable_compile() -> Compiled {
    panic!("a lookup that must hit compiled instead")
}
