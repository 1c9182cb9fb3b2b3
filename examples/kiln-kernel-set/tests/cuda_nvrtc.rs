//! CPU-side NVRTC tests: compile the kernel set to CUBIN and PTX, and check that
//! owners and keys change with every input that changes the code.
//!
//! They need NVRTC (`scripts/install-cuda-wheels.sh` installs it). Without it they
//! fail when `CI=true` and otherwise return early with a message.

use kiln_core::{ArtifactKind, Cache, Key};
use kiln_cuda::{
    Arch, Compiler, IncludeDir, KernelRequest,
    toolchain::NvrtcVersion,
    toolchain::{SearchConfig, locate_nvrtc},
};
use kiln_cuda::{CompileError, ToolchainError};
use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp, cccl_include_dir};

/// The process's compiler, or `None` (after saying why) when NVRTC is missing
/// outside CI.
fn compiler() -> Option<Compiler> {
    kiln_test_support::ci::required(
        Compiler::new(),
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
}

fn arch(s: &str) -> Arch {
    s.parse().unwrap()
}

const ELF_MAGIC: &[u8] = b"\x7fELF";
/// `e_machine` of CUDA ELF files.
const EM_CUDA: u16 = 190;

fn assert_cubin(cubin: &[u8]) {
    assert!(cubin.len() > 64, "CUBIN of {} bytes", cubin.len());
    assert_eq!(&cubin[..4], ELF_MAGIC, "a CUBIN is an ELF file");
    assert_eq!(cubin[4], 2, "64-bit ELF");
    assert_eq!(u16::from_le_bytes([cubin[18], cubin[19]]), EM_CUDA);
}

fn assert_ptx(ptx: &[u8], target: &str, entry_points: &[String]) {
    let text = std::str::from_utf8(ptx).expect("PTX is text");
    assert!(
        text.contains(&format!(".target {target}")),
        "PTX targets {target}:\n{}",
        &text[..text.len().min(400)]
    );
    for entry in entry_points {
        assert!(
            text.contains(&format!(".entry {entry}(")),
            "PTX has .entry {entry}"
        );
    }
}

#[test]
fn every_axpy_kernel_compiles_to_cubin_and_ptx_for_two_archs() {
    let Some(compiler) = compiler() else { return };
    for target in ["sm_90a", "sm_80"] {
        for spec in KernelSpec::all().into_iter().filter(|s| !s.needs_cccl()) {
            let request = spec.request(arch(target)).unwrap();
            let kernel = compiler.compile(&request).unwrap();
            assert_cubin(&kernel.cubin);
            assert_eq!(kernel.entry_points.len(), 1);
            // Template instantiations have mangled (lowered) names.
            assert!(
                kernel.entry_points[0].starts_with("_Z"),
                "{:?}",
                kernel.entry_points
            );
            assert_ptx(&kernel.ptx, target, &kernel.entry_points);
        }
    }
}

/// All CUB specializations of the set in one program per arch (two CUB compiles in
/// all, to keep the suite fast), through the CCCL headers of the wheel or toolkit.
#[test]
fn every_cub_kernel_compiles_for_two_archs() {
    let Some(compiler) = compiler() else { return };
    let cub: Vec<KernelSpec> = KernelSpec::all()
        .into_iter()
        .filter(KernelSpec::needs_cccl)
        .collect();
    assert!(
        cub.iter()
            .any(|s| matches!(s, KernelSpec::BlockScan { .. }))
    );
    let reduce = cub[0].request(arch("sm_90a")).unwrap();
    let mut source = String::new();
    for spec in &cub {
        if !source.contains(spec.source()) {
            source.push_str(spec.source());
        }
    }
    for target in ["sm_90a", "sm_80"] {
        let mut request = KernelRequest::new("kernel_set_cub", source.clone(), arch(target))
            .include_dir(cccl_include_dir().unwrap());
        for header in reduce.headers() {
            request = request.header(header.name.clone(), header.content.clone());
        }
        for spec in &cub {
            request = request.name_expression(spec.name_expression());
        }
        let kernel = compiler.compile(&request).unwrap();
        assert_cubin(&kernel.cubin);
        assert_eq!(kernel.entry_points.len(), cub.len());
        assert_ptx(&kernel.ptx, target, &kernel.entry_points);
    }
}

#[test]
fn extern_c_kernels_keep_their_names_as_entry_points() {
    let Some(compiler) = compiler() else { return };
    let request = KernelRequest::new(
        "fill",
        r#"extern "C" __global__ void kiln_fill(float* x, float v) { x[threadIdx.x] = v; }"#,
        arch("sm_86"),
    )
    .name_expression("kiln_fill");
    let kernel = compiler.compile(&request).unwrap();
    assert_eq!(kernel.entry_points, ["kiln_fill"]);
    assert_ptx(&kernel.ptx, "sm_86", &kernel.entry_points);
}

#[test]
fn a_compile_error_carries_the_nvrtc_log() {
    let Some(compiler) = compiler() else { return };
    let request = KernelRequest::new(
        "broken",
        "__global__ void broken(float* x) { x[0] = undeclared_thing; }",
        arch("sm_90a"),
    );
    match compiler.compile(&request) {
        Err(CompileError::Compile {
            program, log, arch, ..
        }) => {
            assert_eq!(program, "broken.cu");
            assert_eq!(arch, "sm_90a");
            assert!(log.contains("undeclared_thing"), "log: {log}");
            assert!(log.contains("broken.cu"), "log: {log}");
        }
        other => panic!("expected a compile error, got {other:?}"),
    }
    // Through the cache: the error's chain holds the log too, and nothing is
    // cached.
    let cache = Cache::new();
    let err = compiler.compile_cached(&cache, &request).unwrap_err();
    let shown = kiln_core::ErrorChain(&err).to_string();
    assert!(shown.contains("undeclared_thing"), "{shown}");
    assert_eq!(cache.stats().compile_failures, 1);
    assert!(
        cache
            .lookup(
                &compiler.owner(&request).unwrap().digest(),
                &request.key().unwrap()
            )
            .is_none()
    );
}

#[test]
fn headers_by_content_and_fingerprinted_include_dirs_compile() {
    let Some(compiler) = compiler() else { return };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("sub")).unwrap();
    std::fs::write(
        dir.path().join("sub/scale.cuh"),
        "#define KILN_SCALE 3.0f\n",
    )
    .unwrap();
    let request = KernelRequest::new(
        "scaled",
        "#include \"sub/scale.cuh\"\n#include \"offset.cuh\"\n\
         extern \"C\" __global__ void scaled(float* x) { x[0] = KILN_SCALE + KILN_OFFSET; }",
        arch("sm_90a"),
    )
    .header("offset.cuh", "#define KILN_OFFSET 1.0f\n")
    .include_dir(IncludeDir::new(dir.path()).unwrap())
    .name_expression("scaled");
    let kernel = compiler.compile(&request).unwrap();
    assert_cubin(&kernel.cubin);
    // 3 + 1 folded to 4.0f, stored as its bits 0x40800000.
    let ptx = String::from_utf8(kernel.ptx).unwrap();
    assert!(ptx.contains("1082130432"), "{ptx}");
}

#[test]
fn an_include_path_that_is_not_fingerprinted_is_refused() {
    for options in [
        &["-I/usr/include"][..],
        &["--include-path=/usr/include"],
        &["-I", "/usr/include"],
    ] {
        match KernelRequest::new("k", "", arch("sm_90")).options(options) {
            Err(CompileError::UnfingerprintedInclude { path }) => assert_eq!(path, "/usr/include"),
            other => panic!("{options:?}: expected a refusal, got {other:?}"),
        }
    }
}

#[test]
fn owner_changes_with_arch_suffix_options_and_nvrtc_version() {
    let version = |release: &str| NvrtcVersion {
        major: 13,
        minor: 0,
        release: release.to_owned(),
    };
    let base = KernelRequest::new("k", "src", arch("sm_90"));
    let v = version("13.0.88");
    let owner = |r: &KernelRequest, v: &NvrtcVersion| r.owner(v).unwrap().digest();
    let reference = owner(&base, &v);
    let variants = [
        owner(&base.clone().with_arch(arch("sm_90a")), &v),
        owner(&base.clone().with_arch(arch("sm_80")), &v),
        owner(&base.clone().with_arch(arch("sm_100f")), &v),
        owner(&base.clone().options(["--use_fast_math"]).unwrap(), &v),
        owner(&base.clone().options(["-DN=1"]).unwrap(), &v),
        owner(&base, &version("13.0.48")),
        owner(&base, &version("13.1.80")),
    ];
    for (i, digest) in variants.iter().enumerate() {
        assert_ne!(*digest, reference, "variant {i} must change the owner");
        for other in &variants[i + 1..] {
            assert_ne!(digest, other);
        }
    }
    // Equivalent spellings give one owner.
    let a = base
        .clone()
        .options(["-use_fast_math", "-D", "N=1"])
        .unwrap();
    let b = base
        .clone()
        .options(["--define-macro=N=1", "--use_fast_math"])
        .unwrap();
    assert_eq!(owner(&a, &v), owner(&b, &v));
    // The owner names the exact target and version.
    let label = base.with_arch(arch("sm_90a")).owner(&v).unwrap();
    assert_eq!(
        (label.compiler(), label.version(), label.target()),
        ("nvrtc", "13.0.88", "sm_90a")
    );
}

#[test]
fn the_real_nvrtc_version_is_exact() {
    let Some(compiler) = compiler() else { return };
    let v = compiler.version();
    assert!(
        v.release.starts_with(&format!("{}.{}.", v.major, v.minor)),
        "{v:?}: want a patch level"
    );
}

#[test]
fn key_changes_with_source_headers_include_files_name_expressions_and_params() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.cuh"), "#define A 1\n").unwrap();
    let request = |source: &str, include: IncludeDir| {
        KernelRequest::new("k", source, arch("sm_90a"))
            .header("h.cuh", "#define H 1\n")
            .include_dir(include)
            .name_expression("k<1>")
            .param("N", 1)
    };
    let source = "template <int N> __global__ void k() {}";
    let base = request(source, IncludeDir::rescan(dir.path()).unwrap());
    let key = |r: &KernelRequest| -> Key { r.key().unwrap() };
    let reference = key(&base);
    assert_eq!(
        reference,
        key(&request(source, IncludeDir::rescan(dir.path()).unwrap()))
    );

    std::fs::write(dir.path().join("a.cuh"), "#define A 2\n").unwrap();
    let variants = [
        key(&request(
            "template <int N> __global__ void k() { }",
            base.include_dirs()[0].clone(),
        )),
        key(&base.clone().header("h.cuh", "#define H 2\n")),
        key(&base.clone().header("other.cuh", "")),
        key(&request(source, IncludeDir::rescan(dir.path()).unwrap())),
        key(&base.clone().name_expression("k<2>")),
        key(&base.clone().param("N", 2)),
    ];
    for (i, k) in variants.iter().enumerate() {
        assert_ne!(*k, reference, "variant {i} must change the key");
        for other in &variants[i + 1..] {
            assert_ne!(k, other);
        }
    }
    // Arch and options live in the owner, not the key.
    assert_eq!(key(&base.clone().with_arch(arch("sm_80"))), reference);
    assert_eq!(
        key(&base.clone().options(["-lineinfo"]).unwrap()),
        reference
    );
}

#[test]
fn a_kernel_compiled_twice_compiles_once_and_keeps_cubin_and_ptx() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let spec = KernelSpec::Axpby { dtype: Dtype::F64 };
    let request = spec.request(arch("sm_90a")).unwrap();
    let first = compiler.compile_cached(&cache, &request).unwrap();
    let second = compiler.compile_cached(&cache, &request).unwrap();
    assert_eq!(cache.stats().compiles, 1);
    assert_eq!(first.key(), second.key());
    assert_cubin(second.artifact(&ArtifactKind::Cubin).unwrap());
    let ptx = second.artifact(&ArtifactKind::Ptx).unwrap();
    let entries: Vec<String> = second.artifacts()[0]
        .entry_points
        .iter()
        .map(|s| s.to_string())
        .collect();
    assert_ptx(ptx, "sm_90a", &entries);
    // Another arch is another owner: a second compile.
    let sm80 = request.clone().with_arch(arch("sm_80"));
    compiler.compile_cached(&cache, &sm80).unwrap();
    assert_eq!(cache.stats().compiles, 2);
}

#[test]
fn a_cub_kernel_is_cached_under_its_spec() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let spec = KernelSpec::BlockReduce {
        dtype: Dtype::F32,
        op: ReduceOp::Sum,
        block: 128,
    };
    let request = spec.request(arch("sm_90a")).unwrap();
    let hit = compiler.compile_cached(&cache, &request).unwrap();
    assert_eq!(hit.name(), "block_reduce_f32_sum_128");
    assert_cubin(hit.artifact(&ArtifactKind::Cubin).unwrap());
    compiler.compile_cached(&cache, &request).unwrap();
    assert_eq!(cache.stats().compiles, 1);
}

#[test]
fn a_missing_nvrtc_is_a_typed_error_listing_the_places_searched() {
    let nowhere = std::path::Path::new("/nonexistent/kiln/libnvrtc.so.13");
    match locate_nvrtc(&SearchConfig::nvrtc_file(nowhere)) {
        Err(ToolchainError::NvrtcNotFound { searched }) => {
            assert_eq!(searched.0.len(), 1);
            assert_eq!(searched.0[0].candidate, nowhere);
        }
        other => panic!("expected NvrtcNotFound, got {other:?}"),
    }
    let empty = tempfile::tempdir().unwrap();
    let config = SearchConfig {
        toolkit_roots: vec![("CUDA_HOME".into(), empty.path().join("cuda"))],
        loader_dirs: vec![empty.path().join("lib")],
        site_packages: vec![empty.path().join("site-packages")],
        ..SearchConfig::empty()
    };
    let err = locate_nvrtc(&config).unwrap_err();
    let message = err.to_string();
    for place in [
        "cuda/lib64",
        "lib (LD_LIBRARY_PATH)",
        "site-packages/nvidia/cu13/lib",
    ] {
        assert!(message.contains(place), "{place} missing from: {message}");
    }
}

/// In a fresh process (cudarc's loader untouched), `KILN_NVRTC` pointing nowhere
/// gives the typed error instead of cudarc's panic.
#[test]
fn kiln_nvrtc_pointing_nowhere_fails_cleanly_in_a_fresh_process() {
    const CHILD: &str = "KILN_TEST_NVRTC_CHILD";
    if std::env::var_os(CHILD).is_some() {
        match Compiler::new() {
            Err(ToolchainError::NvrtcNotFound { searched }) => {
                assert_eq!(searched.0.len(), 1, "KILN_NVRTC is the only candidate");
                println!(
                    "child: typed error: {}",
                    ToolchainError::NvrtcNotFound { searched }
                );
                return;
            }
            other => panic!("expected NvrtcNotFound, got {other:?}"),
        }
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args([
            "--exact",
            "kiln_nvrtc_pointing_nowhere_fails_cleanly_in_a_fresh_process",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("KILN_NVRTC", "/nonexistent/kiln/libnvrtc.so.13")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("child: typed error: NVRTC (libnvrtc) not found"),
        "{stdout}"
    );
    assert!(
        stdout.contains("/nonexistent/kiln/libnvrtc.so.13 (KILN_NVRTC): no such file"),
        "{stdout}"
    );
}

/// Kiln calls each located NVRTC through its own table: another NVRTC file earlier
/// on the loader path (a copy cudarc's by-name search would find first) changes
/// nothing; the owners and the PTX banner name the located library's release.
#[test]
fn a_different_nvrtc_earlier_on_the_loader_path_changes_nothing() {
    const CHILD: &str = "KILN_TEST_SHADOW_CHILD";
    if std::env::var_os(CHILD).is_some() {
        let compiler = Compiler::new().unwrap();
        let request = KernelSpec::Axpy { dtype: Dtype::F32 }
            .request(arch("sm_80"))
            .unwrap();
        let kernel = compiler.compile(&request).unwrap();
        assert_cubin(&kernel.cubin);
        println!(
            "child: compiled with {}",
            compiler.nvrtc().unwrap().location().path.display()
        );
        return;
    }
    let Some(compiler) = compiler() else { return };
    let located = compiler.nvrtc().unwrap().location().path.clone();
    if !located.is_absolute() {
        eprintln!(
            "SKIPPED: NVRTC was found by name ({}), no file to copy",
            located.display()
        );
        return;
    }
    // A distinct file (a copy, not a link) under the first name cudarc tries.
    let shadow = tempfile::tempdir().unwrap();
    std::fs::copy(&located, shadow.path().join("libnvrtc.so")).unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_different_nvrtc_earlier_on_the_loader_path_changes_nothing",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .env("KILN_NVRTC", &located)
        .env("LD_LIBRARY_PATH", shadow.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("child: compiled with {}", located.display())),
        "{stdout}"
    );
}

/// NVRTC 12 and NVRTC 13 compile in one process, each through its own library:
/// each entry's owner names its release, its PTX banner says so, its CUBIN's ELF
/// header names the arch asked for, and NVRTC 12 compiles for sm_50 to sm_72,
/// which NVRTC 13 refuses.
#[test]
fn nvrtc_12_and_13_compile_side_by_side_in_one_process() {
    let found = |major: u32| {
        kiln_test_support::ci::required(
            kiln_cuda::Toolchain::local_of_major(major, false),
            &format!("NVRTC {major} and its headers (run scripts/install-cuda-wheels.sh)"),
        )
    };
    let (Some(toolchain_12), Some(toolchain_13)) = (found(12), found(13)) else {
        return;
    };
    let (twelve, thirteen) = (
        *toolchain_12.compiler().unwrap(),
        *toolchain_13.compiler().unwrap(),
    );
    assert_eq!((twelve.version().major, thirteen.version().major), (12, 13));
    let cache = Cache::new();
    let spec = KernelSpec::BlockReduce {
        dtype: Dtype::F32,
        op: ReduceOp::Sum,
        block: 128,
    };
    let (cccl_12, cccl_13) = (toolchain_12.cccl().unwrap(), toolchain_13.cccl().unwrap());
    assert_ne!(cccl_12.digest(), cccl_13.digest(), "each major's own CCCL");
    for (compiler, target, toolchain) in [
        (&twelve, "sm_50", &toolchain_12),
        (&twelve, "sm_70", &toolchain_12),
        (&thirteen, "sm_75", &toolchain_13),
        (&twelve, "sm_90", &toolchain_12),
        (&thirteen, "sm_90", &toolchain_13),
        (&twelve, "sm_120", &toolchain_12),
        (&thirteen, "sm_120", &toolchain_13),
    ] {
        let request = spec.request_with(toolchain, arch(target)).unwrap();
        let hit = compiler.compile_cached(&cache, &request).unwrap();
        let release = &compiler.version().release;
        assert_eq!(hit.owner_label(), format!("nvrtc-{release}/{target}"));
        let cubin = hit.artifact(&ArtifactKind::Cubin).unwrap();
        let target_arch = arch(target);
        assert_eq!(
            kiln_cuda::cubin::sm(cubin),
            Some(target_arch.major() * 10 + target_arch.minor()),
            "{target} by {release}"
        );
        let ptx = String::from_utf8_lossy(hit.artifact(&ArtifactKind::Ptx).unwrap()).into_owned();
        assert!(
            ptx.contains(&format!("V{release}")),
            "{target}: banner of {release}"
        );
    }
    // Two owners for one key: one entry per toolchain.
    assert_eq!(cache.stats().compiles, 7);
    let refused = thirteen.compile(
        &KernelSpec::Axpy { dtype: Dtype::F32 }
            .request(arch("sm_70"))
            .unwrap(),
    );
    assert!(
        matches!(refused, Err(CompileError::Compile { .. })),
        "NVRTC 13 cannot target sm_70"
    );
    let supported = twelve.nvrtc().unwrap().supported_archs().unwrap();
    assert!(
        supported.contains(&50) && supported.contains(&120),
        "{supported:?}"
    );
    assert!(
        !thirteen
            .nvrtc()
            .unwrap()
            .supported_archs()
            .unwrap()
            .contains(&70)
    );
}

/// With no site-packages folder configured, asking `python3` finds the wheel.
#[test]
fn the_wheel_is_found_through_python_as_a_last_resort() {
    let Some(compiler) = compiler() else { return };
    if compiler.nvrtc().unwrap().location().rule != "python wheel" {
        eprintln!("SKIPPED: NVRTC does not come from a Python wheel here");
        return;
    }
    let config = SearchConfig {
        ask_python: true,
        ..SearchConfig::empty()
    };
    let found = locate_nvrtc(&config).unwrap();
    assert_eq!(found.rule, "python wheel");
    assert_eq!(found.path, compiler.nvrtc().unwrap().location().path);
    let cccl = kiln_cuda::toolchain::locate_cccl(&config).unwrap();
    assert!(cccl.join("cub/block/block_reduce.cuh").is_file());
}

#[test]
fn include_dir_fingerprints_cover_nested_files_and_survive_link_cycles() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
    std::fs::write(dir.path().join("a/b/deep.cuh"), "// 1\n").unwrap();
    std::os::unix::fs::symlink(dir.path(), dir.path().join("a/loop")).unwrap();
    let first = IncludeDir::rescan(dir.path()).unwrap().digest();
    assert_eq!(first, IncludeDir::rescan(dir.path()).unwrap().digest());
    std::fs::write(dir.path().join("a/b/deep.cuh"), "// 2\n").unwrap();
    assert_ne!(first, IncludeDir::rescan(dir.path()).unwrap().digest());
    // A renamed file is a different tree.
    let second = IncludeDir::rescan(dir.path()).unwrap().digest();
    std::fs::rename(
        dir.path().join("a/b/deep.cuh"),
        dir.path().join("a/b/other.cuh"),
    )
    .unwrap();
    assert_ne!(second, IncludeDir::rescan(dir.path()).unwrap().digest());
}

#[test]
fn concurrent_callers_of_one_kernel_compile_it_once() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let request = KernelSpec::Axpy { dtype: Dtype::F32 }
        .request(arch("sm_89"))
        .unwrap();
    let keys: Vec<Key> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..4)
            .map(|_| scope.spawn(|| compiler.compile_cached(&cache, &request).unwrap().key()))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    assert!(keys.iter().all(|k| *k == keys[0]));
    assert_eq!(cache.stats().compiles, 1);
}
