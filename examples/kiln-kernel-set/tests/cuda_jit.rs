//! CPU-side tests of everything around the driver's JIT (the loader's call to
//! `cuLinkComplete` needs a GPU; `cuda_gpu.rs` runs it): the keys and owners
//! of JIT-compiled CUBINs, their provenance, their invalidation with the PTX
//! entry's definitions, and splitting real NVRTC output into one kernel.
//!
//! Where the driver would produce the CUBIN, these tests compile the same
//! request with NVRTC for the device's arch: real CUBIN bytes, as the driver
//! returns them. They need NVRTC (and the CCCL headers for the CUB module);
//! without them they fail when `CI=true` and otherwise return early with a
//! message.

use std::cell::Cell;

use kiln_core::{ArtifactKind, Cache, Digest, KeyBuilder, Source};
use kiln_cuda::jit::{
    JIT_COMPILER_ID, JIT_KEY_SCHEMA, JIT_SOURCE_DEP, JitKernels, JitSource, JitTarget, cached_jit,
    get_or_jit, jit_key, jit_source_fingerprint,
};
use kiln_cuda::ptx::PtxModule;
use kiln_cuda::request::NVRTC_DEP;
use kiln_cuda::{Arch, Compiler, KernelRequest};
use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp};

fn compiler() -> Option<Compiler> {
    kiln_test_support::ci::required(
        Compiler::new(),
        "the NVRTC library (run scripts/install-cuda-wheels.sh)",
    )
}

fn arch(s: &str) -> Arch {
    s.parse().unwrap()
}

const RELEASE: &str = "580.159.04";

#[test]
fn jit_keys_are_pinned_and_change_with_every_input() {
    let owner = Digest::of(b"a PTX entry's owner");
    let key = KeyBuilder::new("test", 1).str("kernel", "k").finish();
    let all = jit_key(&owner, &key, JitKernels::All);
    // Pinned: a change here changes every JIT entry's key (bump JIT_KEY_SCHEMA).
    assert_eq!(JIT_KEY_SCHEMA, ("kiln.cuda.jit", 1));
    assert_eq!(
        all.to_hex(),
        "19aacc994231e9fb3ec939c533dd63cdcb17275848a45d2a61e73412c468b6a0"
    );
    let other_owner = jit_key(&Digest::of(b"another owner"), &key, JitKernels::All);
    let other_key = jit_key(
        &owner,
        &KeyBuilder::new("test", 1).str("kernel", "j").finish(),
        JitKernels::All,
    );
    let one = jit_key(&owner, &key, JitKernels::Only(&["a"]));
    let two = jit_key(&owner, &key, JitKernels::Only(&["a", "b"]));
    let keys = [all, other_owner, other_key, one, two];
    for (i, a) in keys.iter().enumerate() {
        for b in &keys[i + 1..] {
            assert_ne!(a, b);
        }
    }
    assert_eq!(
        two,
        jit_key(&owner, &key, JitKernels::Only(&["b", "a", "b"]))
    );

    let target = JitTarget::new(arch("sm_90"), RELEASE).unwrap();
    let owner = target.owner().unwrap();
    assert_eq!(owner.compiler(), JIT_COMPILER_ID);
    assert_eq!(owner.version(), RELEASE);
    assert_eq!(owner.target(), "sm_90");
    for other in [
        JitTarget::new(arch("sm_90"), "580.159.05").unwrap(),
        JitTarget::new(arch("sm_90a"), RELEASE).unwrap(),
        JitTarget::new(arch("sm_89"), RELEASE).unwrap(),
    ] {
        assert_ne!(other.owner().unwrap().digest(), owner.digest(), "{other}");
    }
    for bad in [
        "",
        "latest",
        "580..1",
        "580.159.04 ",
        "5".repeat(40).as_str(),
    ] {
        assert!(JitTarget::new(arch("sm_90"), bad).is_err(), "{bad:?}");
    }
}

/// The PTX entry of `spec` for sm_80 in `cache`, and a stand-in for the
/// driver: NVRTC's CUBIN of the same request for sm_90.
fn ptx_entry_and_driver(
    compiler: &Compiler,
    cache: &Cache,
    spec: KernelSpec,
) -> (JitSource, impl Fn() -> Result<Vec<u8>, kiln_cuda::Error>) {
    let ptx = compiler
        .compile_cached(cache, &spec.request(arch("sm_80")).unwrap())
        .unwrap();
    assert!(ptx.artifact(&ArtifactKind::Ptx).is_some());
    let source = JitSource::of(&ptx).expect("the entry carries PTX");
    let sm90 = spec.request(arch("sm_90")).unwrap();
    let compiler = *compiler;
    (source, move || Ok(compiler.compile(&sm90)?.cubin))
}

#[test]
fn a_jit_entry_names_its_ptx_entry_driver_and_arch() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let (source, driver) = ptx_entry_and_driver(&compiler, &cache, spec);
    let target = JitTarget::new(arch("sm_90"), RELEASE).unwrap();
    let links = Cell::new(0);
    let link = || {
        links.set(links.get() + 1);
        driver()
    };
    let hit = get_or_jit(&cache, &source, &target, JitKernels::All, link).unwrap();
    assert_eq!(links.get(), 1);
    assert_eq!(
        hit.owner_label(),
        format!("{JIT_COMPILER_ID}-{RELEASE}/sm_90")
    );
    assert!(hit.name().contains(source.name()), "{}", hit.name());
    assert!(hit.name().contains(RELEASE) && hit.name().contains("sm_90"));
    let deps = hit.deps();
    assert!(
        deps.iter().any(|d| d.name == NVRTC_DEP),
        "the PTX entry's deps"
    );
    let provenance = deps.iter().find(|d| d.name == JIT_SOURCE_DEP).unwrap();
    assert_eq!(
        provenance.fingerprint,
        jit_source_fingerprint(&source.owner(), &source.key())
    );
    let artifacts = hit.artifacts();
    assert_eq!(artifacts.len(), 1);
    assert_eq!(artifacts[0].kind, ArtifactKind::Cubin);
    assert_eq!(artifacts[0].entry_points, source.entry_points());
    let cubin = artifacts[0].bytes().unwrap();
    assert_eq!(&cubin[..4], b"\x7fELF");

    // Kept: asked again, the driver is not.
    let again = get_or_jit(&cache, &source, &target, JitKernels::All, link).unwrap();
    assert_eq!(again.source(), Source::Memory);
    assert_eq!(links.get(), 1);
    assert!(
        cached_jit(&cache, &source, &target, JitKernels::All)
            .unwrap()
            .is_some()
    );
    // Another driver release, another arch or another subset is another entry.
    let newer = JitTarget::new(arch("sm_90"), "590.10").unwrap();
    assert!(
        cached_jit(&cache, &source, &newer, JitKernels::All)
            .unwrap()
            .is_none()
    );
    let lowered: Vec<&str> = source.entry_points().iter().map(String::as_str).collect();
    assert!(
        cached_jit(&cache, &source, &target, JitKernels::Only(&lowered))
            .unwrap()
            .is_none()
    );
}

#[test]
fn redefining_what_the_ptx_was_built_from_closes_its_jit_entries() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let spec = KernelSpec::Axpby { dtype: Dtype::F64 };
    let (source, driver) = ptx_entry_and_driver(&compiler, &cache, spec);
    let target = JitTarget::new(arch("sm_90"), RELEASE).unwrap();
    let hit = get_or_jit(&cache, &source, &target, JitKernels::All, &driver).unwrap();
    let nvrtc = hit
        .deps()
        .iter()
        .find(|d| d.name == NVRTC_DEP)
        .unwrap()
        .clone();
    cache.define(&nvrtc.name, nvrtc.fingerprint);
    assert!(
        cached_jit(&cache, &source, &target, JitKernels::All)
            .unwrap()
            .is_some()
    );
    cache.redefine(&nvrtc.name, Digest::of(b"another NVRTC"));
    assert!(
        cached_jit(&cache, &source, &target, JitKernels::All)
            .unwrap()
            .is_none()
    );
    assert!(!hit.is_valid_in(cache.world()));
}

#[test]
fn a_failed_jit_is_reported_and_not_kept() {
    let Some(compiler) = compiler() else { return };
    let cache = Cache::new();
    let (source, driver) =
        ptx_entry_and_driver(&compiler, &cache, KernelSpec::Axpy { dtype: Dtype::F64 });
    let target = JitTarget::new(arch("sm_90"), RELEASE).unwrap();
    let refused = get_or_jit(
        &cache,
        &source,
        &target,
        JitKernels::All,
        || -> Result<_, _> {
            Err(kiln_cuda::LoadError::InvalidDriverRelease {
                given: "a driver that refuses".into(),
            })
        },
    );
    let refused = refused.unwrap_err();
    let shown = kiln_core::ErrorChain(&refused).to_string();
    assert!(shown.contains("refuses"), "{shown}");
    assert!(
        cached_jit(&cache, &source, &target, JitKernels::All)
            .unwrap()
            .is_none()
    );
    get_or_jit(&cache, &source, &target, JitKernels::All, driver).unwrap();
}

/// Several CUB kernels in one request, as a library's kernel file holds them.
fn cub_module(compiler: &Compiler) -> (KernelRequest, Vec<String>, String) {
    let specs = [
        KernelSpec::BlockReduce {
            dtype: Dtype::F32,
            op: ReduceOp::Sum,
            block: 128,
        },
        KernelSpec::BlockScan {
            dtype: Dtype::I32,
            op: ReduceOp::Max,
            block: 256,
        },
    ];
    let base = specs[0].request(arch("sm_80")).unwrap();
    let mut request = KernelRequest::new(
        "cub_module",
        format!("{}\n{}", specs[0].source(), specs[1].source()),
        arch("sm_80"),
    );
    for header in base.headers() {
        request = request.header(header.name.clone(), header.content.clone());
    }
    for dir in base.include_dirs() {
        request = request.include_dir(dir.clone());
    }
    for spec in specs {
        request = request.name_expression(spec.name_expression());
    }
    let kernel = compiler.compile(&request).unwrap();
    let ptx = String::from_utf8(kernel.ptx).unwrap();
    (request, kernel.entry_points, ptx)
}

#[test]
fn one_kernel_is_extracted_from_real_nvrtc_output() {
    let Some(compiler) = compiler() else { return };
    let Some(_) = kiln_test_support::ci::required(
        kiln_kernel_set::cccl_include_dir(),
        "the CCCL headers (run scripts/install-cuda-wheels.sh)",
    ) else {
        return;
    };
    let (_, entry_points, ptx) = cub_module(&compiler);
    let module = PtxModule::parse(&ptx);
    let found: Vec<&str> = module.entries().collect();
    assert_eq!(found, entry_points, "every kernel, in order");
    assert!(module.splittable(), "CUB's constexpr members are read-only");
    let globals = |text: &str| text.lines().filter(|l| l.starts_with(".global")).count();
    assert!(globals(&ptx) > 100, "CUB's constexpr members");
    for (i, kernel) in entry_points.iter().enumerate() {
        let extract = module.extract(&[kernel]).unwrap();
        assert!(extract.len() < ptx.len());
        assert!(
            globals(&extract) < globals(&ptx) / 10,
            "the variables no kept code names are left out"
        );
        let again = PtxModule::parse(&extract);
        assert_eq!(again.entries().collect::<Vec<_>>(), [kernel.as_str()]);
        let other = &entry_points[1 - i];
        assert!(!extract.contains(&format!(".entry {other}(")));
        assert!(extract.contains(".version") && extract.contains(".target sm_80"));
    }

    // A __device__ counter two kernels share keeps the module whole.
    let counter = KernelRequest::new(
        "counter",
        "__device__ unsigned int c;\n\
         extern \"C\" __global__ void bump() { atomicAdd(&c, 1u); }\n\
         extern \"C\" __global__ void read(unsigned int* out) { *out = c; }\n",
        arch("sm_80"),
    )
    .name_expression("bump")
    .name_expression("read");
    let ptx = String::from_utf8(compiler.compile(&counter).unwrap().ptx).unwrap();
    assert!(!PtxModule::parse(&ptx).splittable());
    // sin() takes the address of the math library's table: still splittable.
    let math = KernelRequest::new(
        "math",
        "extern \"C\" __global__ void s(float* y) { y[threadIdx.x] = sinf(y[threadIdx.x] * 3.0f); }\n\
         extern \"C\" __global__ void c(double* y) { y[threadIdx.x] = cos(y[threadIdx.x] * 7.0); }\n",
        arch("sm_80"),
    )
    .name_expression("s")
    .name_expression("c");
    let ptx = String::from_utf8(compiler.compile(&math).unwrap().ptx).unwrap();
    assert!(ptx.contains("__cudart_"), "the math tables are there");
    let module = PtxModule::parse(&ptx);
    assert!(module.splittable());
    assert!(module.extract(&["s"]).unwrap().contains(".entry s("));
}
