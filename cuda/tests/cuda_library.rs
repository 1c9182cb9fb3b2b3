//! A kernel library end to end in one process: a build (`ShipPlan` in a
//! precompile session) ships CUBINs for several targets and PTX for the lowest,
//! with a `BuildRecord`; a `KernelLibrary` built on that record serves every
//! device arch from the image (exact CUBIN, compatible CUBIN, PTX) with no
//! local toolchain at all, compiles a miss with the local one, and remembers
//! its answers only while they stay valid.
//!
//! They need NVRTC (`scripts/install-cuda-wheels.sh` installs it), no GPU.
//! Without it they fail when `CI=true` and otherwise return early.

use std::path::Path;

use kiln_core::build::Precompile;
use kiln_core::{ArtifactKind, Cache, Digest, Source};
use kiln_cuda::{
    Arch, Compiler, Device, Error, IncludeDir, KernelLibrary, KernelRequest, ShipPlan, Toolchain,
    request::{NVRTC_DEP, nvrtc_fingerprint},
    select::Selection,
    toolchain::SearchConfig,
    toolchain::{BuildRecord, ToolchainPolicy},
};
use kiln_cuda::{CompileError, ServeError, ToolchainError};
use kiln_image::{Image, Verification};

fn compiler() -> Option<Compiler> {
    kiln_test_support::ci::required(
        Compiler::new(),
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
}

/// The test library's specializations: `scale<T>` over a C type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Scale(&'static str);

/// The definition every kernel of the test library records.
const DEFINITION: &str = "cuda_library::scale";

fn request(spec: &Scale, toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
    versioned(spec, toolchain, arch, "scale v1")
}

/// The same library after its definition of `scale` changed (the code is the
/// same, so are the keys; the dependency records the new version).
fn request_v2(spec: &Scale, toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
    versioned(spec, toolchain, arch, "scale v2")
}

fn versioned(
    spec: &Scale,
    _toolchain: &Toolchain,
    arch: Arch,
    version: &str,
) -> Result<KernelRequest, Error> {
    let Scale(t) = spec;
    let name = format!("scale_{}", t.replace(' ', "_"));
    let source = format!(
        "extern \"C\" __global__ void {name}(int n, {t}* x) {{\n\
         \x20   int i = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20   if (i < n) x[i] = x[i] * ({t})3;\n}}\n"
    );
    Ok(KernelRequest::new(name.clone(), source, arch)
        .name_expression(name)
        .param("T", t)
        .dep(DEFINITION, Digest::of(version.as_bytes())))
}

const TARGETS: &str = "sm_75,sm_80,sm_90";
const SHIPPED: [Scale; 2] = [Scale("float"), Scale("double")];

/// Ships [`SHIPPED`] for [`TARGETS`] through a precompile session into `dir`:
/// the image's path and the record.
fn ship(dir: &Path) -> (std::path::PathBuf, BuildRecord) {
    let mut plan = ShipPlan::parse(TARGETS).unwrap();
    let mut output = Vec::new();
    let report = Precompile::new("cuda-library-test")
        .out_dir(dir)
        .output(&mut output)
        .run(|session| Ok(plan.precompile(session, &SHIPPED, request)?))
        .unwrap();
    let output = String::from_utf8_lossy(&output);
    assert!(report.failed.is_empty(), "{output}");
    assert_eq!(report.entries, SHIPPED.len() * 3, "{output}");
    assert!(
        output.contains("cargo::rerun-if-env-changed=KILN_NVRTC"),
        "{output}"
    );
    (report.path, plan.record().clone())
}

/// A cache with the image at `path` merged.
fn cache_with(path: &Path) -> Cache {
    let cache = Cache::new();
    let merged = cache.merge_image(Image::open(path, Verification::Full).unwrap());
    assert_eq!(merged.inserted, (SHIPPED.len() * 3) as u64, "{merged}");
    cache
}

fn no_nvrtc() -> ToolchainError {
    kiln_cuda::toolchain::locate_nvrtc(&SearchConfig::empty()).unwrap_err()
}

fn device(arch: &str) -> Device {
    Device::new(arch.parse().unwrap())
}

/// A library on `record` whose text form was embedded as a string.
fn library(record: &BuildRecord) -> KernelLibrary<Scale> {
    let text: &'static str = Box::leak(record.to_string().into_boxed_str());
    KernelLibrary::new(text, request).with_policy(ToolchainPolicy::Shipped)
}

#[test]
fn a_build_ships_cubins_for_every_target_ptx_for_the_lowest_and_records_its_toolchain() {
    let Some(compiler) = compiler() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, record) = ship(dir.path());
    assert_eq!(record.nvrtc(), Some(compiler.version()));
    let targets: Vec<String> = record.cubin_targets().iter().map(Arch::to_string).collect();
    assert_eq!(targets, ["sm_75", "sm_80", "sm_90"]);
    assert_eq!(
        record.ptx_target().map(|a| a.to_string()).as_deref(),
        Some("sm_75")
    );

    let image = Image::open(&path, Verification::Full).unwrap();
    let nvrtc = nvrtc_fingerprint(compiler.version());
    for entry in image.entries() {
        let entry = entry.unwrap();
        let target = entry.owner_label().rsplit('/').next().unwrap().to_owned();
        let kinds: Vec<ArtifactKind> = entry.artifacts().map(|a| a.kind()).collect();
        let expected = if target == "sm_75" {
            vec![ArtifactKind::Cubin, ArtifactKind::Ptx]
        } else {
            vec![ArtifactKind::Cubin]
        };
        assert_eq!(kinds, expected, "{} for {target}", entry.name());
        let deps = entry.deps();
        assert!(
            deps.iter()
                .any(|d| d.name == NVRTC_DEP && d.fingerprint == nvrtc),
            "{deps:?}"
        );
        assert!(deps.iter().any(|d| d.name == DEFINITION), "{deps:?}");
    }
}

#[test]
fn without_a_toolchain_every_device_arch_is_served_from_the_image() {
    if compiler().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, record) = ship(dir.path());
    let cache = cache_with(&path);
    let library = library(&record).with_local_toolchain(Err(no_nvrtc()));
    for (arch, selection, target) in [
        ("sm_75", Selection::ExactCubin, "sm_75"),
        ("sm_80", Selection::ExactCubin, "sm_80"),
        ("sm_86", Selection::CompatibleCubin, "sm_80"),
        ("sm_89", Selection::CompatibleCubin, "sm_80"),
        ("sm_90", Selection::ExactCubin, "sm_90"),
        ("sm_100", Selection::Ptx, "sm_75"),
        ("sm_120", Selection::Ptx, "sm_75"),
    ] {
        for spec in &SHIPPED {
            let served = library.get(&cache, &device(arch), spec).unwrap();
            assert_eq!(
                (served.selection(), served.target().to_string()),
                (selection, target.to_owned()),
                "{spec:?} on {arch}"
            );
            assert_eq!(served.hit().source(), Source::Image);
            let kind = match selection {
                Selection::Ptx => ArtifactKind::Ptx,
                _ => ArtifactKind::Cubin,
            };
            assert!(served.hit().artifact(&kind).is_some(), "{spec:?} on {arch}");
        }
    }
    assert_eq!(cache.stats().compiles, 0);
    let stats = library.stats();
    assert_eq!(
        (
            stats.exact_cubin,
            stats.compatible_cubin,
            stats.ptx,
            stats.compiled
        ),
        (6, 4, 4, 0)
    );

    // A kernel in no image, and an arch nothing shipped runs on: the error
    // names the kernel, the arch and what to install.
    for (spec, arch) in [(Scale("int"), "sm_90"), (Scale("float"), "sm_70")] {
        let error = library.get(&cache, &device(arch), &spec).unwrap_err();
        let ServeError::NotShipped {
            kernel,
            arch: asked,
            cause,
            ..
        } = &error
        else {
            panic!("{error}");
        };
        assert_eq!(asked, arch);
        assert!(kernel.starts_with("scale_"), "{kernel}");
        assert!(
            matches!(&**cause, ServeError::Toolchain(t)
                if matches!(t.inner(), ToolchainError::NvrtcNotFound { .. })),
            "{cause}"
        );
        let text = error.to_string();
        assert!(
            text.contains("nvidia-cuda-nvrtc") && text.contains("KILN_NVRTC"),
            "{text}"
        );
    }
}

#[test]
fn a_miss_is_compiled_with_the_local_toolchain_for_the_exact_arch() {
    let Some(compiler) = compiler() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (path, record) = ship(dir.path());
    let cache = cache_with(&path);
    let library = library(&record);
    let served = library
        .get(&cache, &device("sm_86"), &Scale("int"))
        .unwrap();
    assert_eq!(served.selection(), Selection::Compiled);
    assert_eq!(served.target().to_string(), "sm_86");
    assert_eq!(
        served.hit().owner_label(),
        format!("nvrtc-{}/sm_86", compiler.version())
    );
    let deps = served.hit().deps();
    assert!(deps.iter().any(|d| d.name == NVRTC_DEP));
    assert_eq!(cache.stats().compiles, 1);
}

#[test]
fn answers_are_remembered_while_valid_and_derived_again_after_a_redefinition() {
    if compiler().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, record) = ship(dir.path());
    let cache = cache_with(&path);
    // This process's library is at v2 of `scale`, its image was built at v1.
    let text: &'static str = Box::leak(record.to_string().into_boxed_str());
    let library = KernelLibrary::new(text, request_v2).with_policy(ToolchainPolicy::Shipped);
    let spec = Scale("float");
    let first = library.get(&cache, &device("sm_86"), &spec).unwrap();
    let again = library.get(&cache, &device("sm_86"), &spec).unwrap();
    assert_eq!(
        (first.hit().owner(), first.hit().key()),
        (again.hit().owner(), again.hit().key())
    );
    assert_eq!(again.selection(), Selection::CompatibleCubin);
    assert_eq!(
        library.stats().compatible_cubin,
        1,
        "derived once, then remembered"
    );
    // Another cache, another device: their own answers.
    let other = cache_with(&path);
    library.get(&other, &device("sm_86"), &spec).unwrap();
    library.get(&cache, &device("sm_90"), &spec).unwrap();
    assert_eq!(
        (
            library.stats().compatible_cubin,
            library.stats().exact_cubin
        ),
        (2, 1)
    );

    // The process declares the definition it was built from: the shipped
    // entries (v1) are closed, and the remembered answer is not served again.
    let world = cache.world();
    cache.redefine(DEFINITION, Digest::of(b"scale v2"));
    assert!(cache.world() > world);
    let after = library.get(&cache, &device("sm_86"), &spec).unwrap();
    assert_eq!(after.selection(), Selection::Compiled);
    assert_eq!(after.hit().source(), Source::Memory);
    assert_eq!(cache.stats().compiles, 1);
    // And that answer is remembered in turn.
    let same = library.get(&cache, &device("sm_86"), &spec).unwrap();
    assert_eq!(same.hit().key(), after.hit().key());
    assert_eq!(library.stats().compiled, 1);
}

#[test]
fn always_compile_is_honoured() {
    if compiler().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (path, record) = ship(dir.path());
    let cache = Cache::with_config(kiln_core::CacheConfig::default().always_compile(true));
    cache.merge_image(Image::open(&path, Verification::Full).unwrap());
    let library = library(&record);
    for _ in 0..2 {
        let served = library
            .get(&cache, &device("sm_90"), &Scale("float"))
            .unwrap();
        assert_eq!(served.selection(), Selection::Compiled);
    }
    assert_eq!(cache.stats().compiles, 2);
}

#[test]
fn a_request_with_a_recorded_header_set_is_never_compiled() {
    let Some(compiler) = compiler() else { return };
    let request = KernelRequest::new(
        "uses_headers",
        "#include \"h.cuh\"\nextern \"C\" __global__ void k() {}",
        "sm_80".parse().unwrap(),
    )
    .include_dir(IncludeDir::recorded("mine", Digest::of(b"a tree")));
    let error = compiler.compile(&request).unwrap_err();
    assert!(
        matches!(&error, CompileError::RecordedIncludeDir { kernel, set } if kernel == "uses_headers" && set == "mine"),
        "{error}"
    );
}
