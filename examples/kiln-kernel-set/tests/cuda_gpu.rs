//! GPU tests: each kernel of the set is compiled (through the cache), loaded from the
//! cached CUBIN (or PTX), launched, and compared with its CPU reference.
//!
//! Opt-in, they need a GPU, its driver (R580 or newer) and NVRTC. Either
//! `KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu`
//! (one test, `gpu_tests_with_kiln_gpu_tests`, runs them all; without the
//! variable it only says how to run them), or
//! `cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored`
//! (each as its own test).

use std::sync::Arc;

use cudarc::driver::{CudaContext, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use kiln_core::{ArtifactKind, Cache};
use kiln_cuda::loader::{self, Jit, LoadedModule, ModuleCache};
use kiln_cuda::{
    Arch, Compiler, Device, KernelLibrary, KernelRequest, ShipPlan, Toolchain,
    arch::ArchSuffix,
    jit::{JIT_SOURCE_DEP, JitKernels, JitSource, JitTarget, cached_jit},
    select::Selection,
    toolchain::ToolchainPolicy,
};
use kiln_image::{Image, ImageMeta, Verification};
use kiln_kernel_set::{Dtype, Element, KernelSpec, ReduceOp, reference};

struct Gpu {
    ctx: Arc<CudaContext>,
    compiler: Compiler,
    arch: Arch,
}

fn gpu() -> Gpu {
    let ctx = loader::context(0).expect("a GPU test needs a GPU and its driver");
    let arch = loader::device_arch(&ctx).unwrap();
    eprintln!("device: {} ({arch})", ctx.name().unwrap_or_default());
    let compiler = Compiler::new().expect("NVRTC");
    Gpu {
        ctx,
        compiler,
        arch,
    }
}

/// Test data: deterministic, varied, in a range where sums stay exact enough.
trait Sample: Element + DeviceRepr + ValidAsZeroBits + Default {
    fn sample(i: usize) -> Self;
    fn close(a: Self, b: Self, terms: usize) -> bool;
}

fn mix(i: usize) -> u64 {
    (i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        % 2001
}

impl Sample for f32 {
    fn sample(i: usize) -> Self {
        (mix(i) as f32 - 1000.0) / 1000.0
    }
    fn close(a: Self, b: Self, terms: usize) -> bool {
        (a - b).abs() <= 1e-6 * terms as f32 * (1.0 + b.abs())
    }
}

impl Sample for f64 {
    fn sample(i: usize) -> Self {
        (mix(i) as f64 - 1000.0) / 1000.0
    }
    fn close(a: Self, b: Self, terms: usize) -> bool {
        (a - b).abs() <= 1e-12 * terms as f64 * (1.0 + b.abs())
    }
}

impl Sample for i32 {
    fn sample(i: usize) -> Self {
        mix(i) as i32 - 1000
    }
    fn close(a: Self, b: Self, _: usize) -> bool {
        a == b
    }
}

impl Sample for u32 {
    fn sample(i: usize) -> Self {
        mix(i) as u32
    }
    fn close(a: Self, b: Self, _: usize) -> bool {
        a == b
    }
}

fn assert_close<T: Sample>(what: &str, got: &[T], want: &[T], terms: usize) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(T::close(*g, *w, terms), "{what}[{i}]: GPU {g:?}, CPU {w:?}");
    }
}

fn config(spec: &KernelSpec, n: usize) -> LaunchConfig {
    let geometry = spec.launch(n);
    LaunchConfig {
        grid_dim: (geometry.grid, 1, 1),
        block_dim: (geometry.block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Compiles (or finds) `spec` for `arch`, loads it, launches it on `n` elements
/// and compares with the CPU reference. Returns which artifact was loaded.
fn run_spec<T: Sample>(
    gpu: &Gpu,
    cache: &Cache,
    modules: &ModuleCache,
    spec: KernelSpec,
    arch: Arch,
    n: usize,
) -> ArtifactKind {
    assert_eq!(spec.dtype(), T::DTYPE);
    let request = spec.request(arch).unwrap();
    let hit = gpu.compiler.compile_cached(cache, &request).unwrap();
    let module = modules.load(&gpu.ctx, &request, &hit).unwrap();
    launch_and_check::<T>(gpu, &module, spec, n)
}

/// Launches `spec` from `module` on `n` elements and compares with the CPU
/// reference. Returns which artifact the module was loaded from.
fn launch_and_check<T: Sample>(
    gpu: &Gpu,
    module: &LoadedModule,
    spec: KernelSpec,
    n: usize,
) -> ArtifactKind {
    let function = module.function(&spec.name_expression()).unwrap();
    let stream = gpu.ctx.default_stream();
    let x: Vec<T> = (0..n).map(T::sample).collect();
    let y: Vec<T> = (0..n).map(|i| T::sample(i + n)).collect();
    let n_arg = i32::try_from(n).unwrap();
    let what = spec.name();
    match spec {
        KernelSpec::Axpy { .. } | KernelSpec::Axpby { .. } => {
            let (a, b) = (T::sample(7), T::sample(11));
            let x_dev = stream.clone_htod(&x).unwrap();
            let mut y_dev = stream.clone_htod(&y).unwrap();
            let mut launch = stream.launch_builder(&function);
            launch.arg(&n_arg).arg(&a).arg(&x_dev);
            if matches!(spec, KernelSpec::Axpby { .. }) {
                launch.arg(&b);
            }
            launch.arg(&mut y_dev);
            // SAFETY: the arguments match the kernel's signature
            // `(int n, T a, const T* x, [T b,] T* y)`, both buffers hold `n`
            // elements and the grid covers `n` threads with a bounds check.
            unsafe { launch.launch(config(&spec, n)) }.unwrap();
            let got = stream.clone_dtoh(&y_dev).unwrap();
            let mut want = y.clone();
            if matches!(spec, KernelSpec::Axpby { .. }) {
                reference::axpby(a, &x, b, &mut want);
            } else {
                reference::axpy(a, &x, &mut want);
            }
            assert_close(&what, &got, &want, 2);
        }
        KernelSpec::BlockReduce { op, block, .. } | KernelSpec::BlockScan { op, block, .. } => {
            let is_scan = matches!(spec, KernelSpec::BlockScan { .. });
            let blocks = config(&spec, n).grid_dim.0 as usize;
            let x_dev = stream.clone_htod(&x).unwrap();
            let mut out = stream
                .alloc_zeros::<T>(if is_scan { n } else { blocks })
                .unwrap();
            let mut launch = stream.launch_builder(&function);
            launch.arg(&x_dev).arg(&mut out).arg(&n_arg);
            // SAFETY: the arguments match `(const T* in, T* out, int n)`; `in` holds
            // `n` elements, `out` one per block (reduce) or `n` (scan), and the
            // kernel's block size is the launch's.
            unsafe { launch.launch(config(&spec, n)) }.unwrap();
            let got = stream.clone_dtoh(&out).unwrap();
            let block = block as usize;
            let want = if is_scan {
                reference::block_scan(&x, block, op)
            } else {
                reference::block_reduce(&x, block, op)
            };
            assert_close(&what, &got, &want, block);
        }
    }
    module.kind().clone()
}

fn run_any(
    gpu: &Gpu,
    cache: &Cache,
    modules: &ModuleCache,
    spec: KernelSpec,
    arch: Arch,
    n: usize,
) -> ArtifactKind {
    match spec.dtype() {
        Dtype::F32 => run_spec::<f32>(gpu, cache, modules, spec, arch, n),
        Dtype::F64 => run_spec::<f64>(gpu, cache, modules, spec, arch, n),
        Dtype::I32 => run_spec::<i32>(gpu, cache, modules, spec, arch, n),
        Dtype::U32 => run_spec::<u32>(gpu, cache, modules, spec, arch, n),
    }
}

fn every_kernel_of_the_set_matches_its_cpu_reference_from_the_cubin() {
    let gpu = gpu();
    let cache = Cache::new();
    let modules = ModuleCache::new();
    // A partial last block exercises the bounds checks and CUB's num_valid.
    let n = 10_000 + 77;
    for spec in KernelSpec::all() {
        let kind = run_any(&gpu, &cache, &modules, spec, gpu.arch, n);
        assert_eq!(kind, ArtifactKind::Cubin, "{}", spec.name());
    }
}

fn arch_specific_cubins_run_where_the_device_has_such_an_arch() {
    let gpu = gpu();
    // The archs with an `a` variant (CUDA 13: Hopper, Blackwell, Thor, and the
    // GB10/RTX Blackwell parts).
    if !matches!(
        (gpu.arch.major(), gpu.arch.minor()),
        (9, 0) | (10, 0) | (10, 3) | (11, 0) | (12, 0) | (12, 1)
    ) {
        eprintln!(
            "no arch-specific (a) variant for {}: nothing to check",
            gpu.arch
        );
        return;
    }
    let cache = Cache::new();
    let modules = ModuleCache::new();
    let arch = gpu.arch.with_suffix(ArchSuffix::Specific);
    let spec = KernelSpec::BlockReduce {
        dtype: Dtype::F32,
        op: ReduceOp::Sum,
        block: 256,
    };
    assert_eq!(
        run_any(&gpu, &cache, &modules, spec, arch, 4096),
        ArtifactKind::Cubin
    );
}

fn ptx_is_the_fallback_when_no_cubin_runs_on_the_device() {
    let gpu = gpu();
    // A plain arch of an older major (one NVRTC 13 compiles for): its CUBIN
    // cannot run here, its PTX can.
    let Some(older) = older_major(gpu.arch) else {
        eprintln!(
            "no older major than {} to compile for: nothing to check",
            gpu.arch
        );
        return;
    };
    let cache = Cache::new();
    let modules = ModuleCache::new();
    for spec in [
        KernelSpec::Axpy { dtype: Dtype::F32 },
        KernelSpec::BlockScan {
            dtype: Dtype::I32,
            op: ReduceOp::Max,
            block: 256,
        },
    ] {
        assert_eq!(
            run_any(&gpu, &cache, &modules, spec, older, 5000),
            ArtifactKind::Ptx
        );
    }
}

fn each_module_loads_once_per_context() {
    let gpu = gpu();
    let cache = Cache::new();
    let modules = ModuleCache::new();
    let spec = KernelSpec::Axpby { dtype: Dtype::F64 };
    for _ in 0..3 {
        run_any(&gpu, &cache, &modules, spec, gpu.arch, 1000);
    }
    assert_eq!(modules.len(), 1);
    assert_eq!(cache.stats().compiles, 1);
    let other = KernelSpec::Axpy { dtype: Dtype::F64 };
    run_any(&gpu, &cache, &modules, other, gpu.arch, 1000);
    assert_eq!(modules.len(), 2);
}

/// The newest plain arch NVRTC 13 compiles for whose major is below `arch`'s.
fn older_major(arch: Arch) -> Option<Arch> {
    ["sm_120", "sm_110", "sm_100", "sm_90", "sm_89", "sm_75"]
        .into_iter()
        .map(|name| name.parse::<Arch>().expect("an arch"))
        .find(|older| older.major() < arch.major())
}

/// The precompile round trip: compile into a cache, write the delta as an image,
/// merge it into a fresh cache, and launch from the image-backed CUBIN without
/// compiling.
fn kernels_launch_from_an_image_without_compiling() {
    let gpu = gpu();
    let specs = [
        KernelSpec::Axpy { dtype: Dtype::F32 },
        KernelSpec::BlockReduce {
            dtype: Dtype::I32,
            op: ReduceOp::Min,
            block: 256,
        },
    ];
    let build = Cache::new();
    let start = build.snapshot();
    for spec in specs {
        gpu.compiler
            .compile_cached(&build, &spec.request(gpu.arch).unwrap())
            .unwrap();
    }
    let bytes = build
        .delta(&start)
        .to_bytes(ImageMeta::new("kiln-core cuda_gpu test", "1"))
        .unwrap();

    let run = Cache::new();
    let image = Image::from_bytes(&bytes, Verification::Full).unwrap();
    assert_eq!(run.merge_image(image).inserted, specs.len() as u64);
    let modules = ModuleCache::new();
    for spec in specs {
        let request = spec.request(gpu.arch).unwrap();
        let owner = gpu.compiler.owner(&request).unwrap();
        let hit = run
            .lookup(&owner.digest(), &request.key().unwrap())
            .expect("in the image");
        let module = modules.load(&gpu.ctx, &request, &hit).unwrap();
        let kind = match spec.dtype() {
            Dtype::F32 => launch_and_check::<f32>(&gpu, &module, spec, 3000),
            Dtype::I32 => launch_and_check::<i32>(&gpu, &module, spec, 3000),
            other => unreachable!("{other:?} is not in this test"),
        };
        assert_eq!(kind, ArtifactKind::Cubin);
    }
    assert_eq!(run.stats().compiles, 0);
}

/// The test library of `kernels_launch_from_whatever_a_library_shipped`.
fn kernel_request(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln_cuda::Error> {
    spec.request_with(toolchain, arch)
}

/// A library that ships `targets` (PTX with the lowest) serves this GPU, from
/// a CUBIN of its arch, a compatible CUBIN or PTX, and every kernel launches
/// and matches its reference.
fn kernels_launch_from_whatever_a_library_shipped() {
    let gpu = gpu();
    let device = loader::device(&gpu.ctx).unwrap();
    let (major, minor) = (gpu.arch.major(), gpu.arch.minor());
    let specs = [
        KernelSpec::Axpy { dtype: Dtype::F32 },
        KernelSpec::BlockScan {
            dtype: Dtype::I32,
            op: ReduceOp::Max,
            block: 256,
        },
    ];
    // Its own arch; an older minor of its major if there is one; only a
    // PTX of an older major.
    let mut plans = vec![(gpu.arch.to_string(), Selection::ExactCubin)];
    if minor > 0 {
        let lower = Arch::new(major, 0, ArchSuffix::None).unwrap();
        plans.push((lower.to_string(), Selection::CompatibleCubin));
    }
    if let Some(older) = older_major(gpu.arch) {
        plans.push((older.to_string(), Selection::Ptx));
    }
    for (targets, expected) in plans {
        let dir = tempfile::tempdir().unwrap();
        let mut plan = ShipPlan::parse(&targets).unwrap();
        let report = kiln_core::build::Precompile::new("gpu-test")
            .out_dir(dir.path())
            .output(std::io::sink())
            .run(|session| Ok(plan.precompile(session, &specs, kernel_request)?))
            .unwrap();
        assert!(report.failed.is_empty(), "{:?}", report.failed);
        let cache = Cache::new();
        cache.merge_image(Image::open(&report.path, Verification::Full).unwrap());
        let library = KernelLibrary::with_record(plan.record().clone(), kernel_request)
            .with_policy(ToolchainPolicy::Shipped);
        let modules = ModuleCache::new();
        for spec in specs {
            let served = library.get(&cache, &device, &spec).unwrap();
            assert_eq!(
                served.selection(),
                expected,
                "{} from {targets}",
                spec.name()
            );
            // Exactly the artifact the library chose.
            let module = modules.load_served(&gpu.ctx, &served).unwrap();
            let kind = match spec.dtype() {
                Dtype::F32 => launch_and_check::<f32>(&gpu, &module, spec, 3000),
                Dtype::I32 => launch_and_check::<i32>(&gpu, &module, spec, 3000),
                other => unreachable!("{other:?} is not in this test"),
            };
            assert_eq!(&kind, &served.artifact().kind);
            let want = if expected == Selection::Ptx {
                ArtifactKind::Ptx
            } else {
                ArtifactKind::Cubin
            };
            assert_eq!(kind, want, "{} from {targets}", spec.name());
        }
        assert_eq!(cache.stats().compiles, 0);
    }
}

/// A served kernel loads exactly the artifact its library chose: the PTX it
/// chose for this GPU, and for a kernel served for another device (the CUBIN of
/// an older major), a refusal, never the same entry's PTX instead.
fn a_served_kernel_loads_exactly_its_chosen_artifact() {
    let gpu = gpu();
    let Some(older) = older_major(gpu.arch) else {
        eprintln!("no older major than {}: nothing to check", gpu.arch);
        return;
    };
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let dir = tempfile::tempdir().unwrap();
    let mut plan = ShipPlan::parse(&older.to_string()).unwrap();
    let report = kiln_core::build::Precompile::new("gpu-served-test")
        .out_dir(dir.path())
        .output(std::io::sink())
        .run(|session| Ok(plan.precompile(session, &[spec], kernel_request)?))
        .unwrap();
    assert!(report.failed.is_empty(), "{:?}", report.failed);
    let cache = Cache::new();
    cache.merge_image(Image::open(&report.path, Verification::Full).unwrap());
    let library = KernelLibrary::with_record(plan.record().clone(), kernel_request)
        .with_policy(ToolchainPolicy::Shipped);
    let modules = ModuleCache::new().without_jit_cache();

    let here = library
        .get(&cache, &loader::device(&gpu.ctx).unwrap(), &spec)
        .unwrap();
    assert_eq!(here.selection(), Selection::Ptx);
    let module = modules.load_served(&gpu.ctx, &here).unwrap();
    assert_eq!(
        launch_and_check::<f32>(&gpu, &module, spec, 3000),
        ArtifactKind::Ptx
    );

    let elsewhere = library.get(&cache, &Device::new(older), &spec).unwrap();
    assert_eq!(elsewhere.selection(), Selection::ExactCubin);
    assert_eq!(elsewhere.hit().key(), here.hit().key(), "the same entry");
    let refused = modules.load_served(&gpu.ctx, &elsewhere).unwrap_err();
    assert!(
        matches!(
            refused,
            kiln_cuda::LoadError::ChosenArtifactDoesNotRun { .. }
        ),
        "{refused}"
    );
    assert_eq!(modules.len(), 1);
    assert_eq!(cache.stats().compiles, 0);
}

/// A function looked up from another thread than the one that loaded its
/// module still launches: the lookup makes the module's context current.
fn functions_are_found_from_any_thread() {
    let gpu = gpu();
    let cache = Cache::new();
    let modules = ModuleCache::new();
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let request = spec.request(gpu.arch).unwrap();
    let hit = gpu.compiler.compile_cached(&cache, &request).unwrap();
    let module = modules.load(&gpu.ctx, &request, &hit).unwrap();
    let found = std::thread::spawn(move || module.function(&spec.name_expression()).is_ok())
        .join()
        .unwrap();
    assert!(found);
}

/// A cache that lives as long as the test process, as the global one does:
/// where a test's module caches keep what the driver JIT-compiles.
fn jit_cache() -> &'static Cache {
    Box::leak(Box::new(Cache::new()))
}

/// Two kernels in one module, with no state they share.
const TWO_KERNELS: &str = r#"
extern "C" __global__ void kiln_twice(int n, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * y[i];
}
extern "C" __global__ void kiln_plus_one(int n, float* y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = y[i] + 1.0f;
}
"#;

/// Two kernels that share a `__device__` counter: one module, or wrong.
const SHARED_COUNTER: &str = r#"
__device__ unsigned int kiln_counter;
extern "C" __global__ void kiln_count(int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) atomicAdd(&kiln_counter, 1u);
}
extern "C" __global__ void kiln_read_count(unsigned int* out) {
    *out = kiln_counter;
}
"#;

/// Launches `function(n, y)` over `y` and returns `y` after.
fn launch_on(gpu: &Gpu, function: &cudarc::driver::CudaFunction, y: &[f32]) -> Vec<f32> {
    let stream = gpu.ctx.default_stream();
    let mut y_dev = stream.clone_htod(y).unwrap();
    let n = i32::try_from(y.len()).unwrap();
    let mut launch = stream.launch_builder(function);
    launch.arg(&n).arg(&mut y_dev);
    // SAFETY: `(int n, float* y)` with `n` elements, bounds-checked kernels.
    unsafe { launch.launch(LaunchConfig::for_num_elems(y.len() as u32)) }.unwrap();
    stream.clone_dtoh(&y_dev).unwrap()
}

/// PTX served on the device is JIT-compiled by the driver once: the CUBIN is
/// kept as an entry of its own (owner: the driver's release, the device's
/// arch), and a second module cache (as a second process would) loads it
/// without asking the driver.
fn ptx_is_jit_compiled_once_and_kept() {
    let gpu = gpu();
    let Some(older) = older_major(gpu.arch) else {
        eprintln!("no older major than {}: nothing to check", gpu.arch);
        return;
    };
    let cache = jit_cache();
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let request = spec.request(older).unwrap();
    let hit = gpu.compiler.compile_cached(cache, &request).unwrap();
    assert_eq!(cache.stats().compiles, 1, "NVRTC");
    let first = ModuleCache::new().keep_jit_in(cache);
    let kind = launch_and_check::<f32>(
        &gpu,
        &first.load(&gpu.ctx, &request, &hit).unwrap(),
        spec,
        4000,
    );
    assert_eq!(kind, ArtifactKind::Ptx);
    assert_eq!(cache.stats().compiles, 2, "NVRTC, then the driver's JIT");

    let release = loader::driver_release(&gpu.ctx).expect("the driver's release");
    let target = JitTarget::new(gpu.arch, release).unwrap();
    let source = JitSource::of(&hit).unwrap();
    let kept = cached_jit(cache, &source, &target, JitKernels::All)
        .unwrap()
        .expect("the JIT-compiled CUBIN is an entry");
    assert_eq!(kept.owner(), target.owner().unwrap().digest());
    assert!(kept.deps().iter().any(|dep| dep.name == JIT_SOURCE_DEP));
    assert!(
        kept.artifact(&ArtifactKind::Cubin)
            .is_some_and(|c| !c.is_empty())
    );

    let second = ModuleCache::new().keep_jit_in(cache);
    let module = second.load(&gpu.ctx, &request, &hit).unwrap();
    assert_eq!(module.jit(), Jit::WholeModule);
    launch_and_check::<f32>(
        &gpu,
        &second.load(&gpu.ctx, &request, &hit).unwrap(),
        spec,
        4000,
    );
    assert_eq!(cache.stats().compiles, 2, "no second JIT");

    // Nothing kept: the driver compiles in every module cache, as without Kiln.
    let plain = ModuleCache::new().without_jit_cache();
    launch_and_check::<f32>(
        &gpu,
        &plain.load(&gpu.ctx, &request, &hit).unwrap(),
        spec,
        4000,
    );
    assert_eq!(cache.stats().compiles, 2);
}

/// A kernel of a PTX module with several is JIT-compiled alone (its own
/// entry), and launches; the other kernel is compiled when it is asked for.
fn a_kernel_of_a_ptx_module_is_compiled_alone() {
    let gpu = gpu();
    let Some(older) = older_major(gpu.arch) else {
        eprintln!("no older major than {}: nothing to check", gpu.arch);
        return;
    };
    let cache = jit_cache();
    let request = KernelRequest::new("two_kernels", TWO_KERNELS, older)
        .name_expression("kiln_twice")
        .name_expression("kiln_plus_one");
    let hit = gpu.compiler.compile_cached(cache, &request).unwrap();
    let modules = ModuleCache::new().keep_jit_in(cache);
    let module = modules.load(&gpu.ctx, &request, &hit).unwrap();
    assert_eq!(module.jit(), Jit::PerKernel);
    assert!(module.module().is_none());
    let y: Vec<f32> = (0..3000).map(|i| i as f32).collect();
    let twice = module.function("kiln_twice").unwrap();
    let got = launch_on(&gpu, &twice, &y);
    assert!(got.iter().zip(&y).all(|(g, y)| *g == 2.0 * y));

    let target = JitTarget::new(gpu.arch, loader::driver_release(&gpu.ctx).unwrap()).unwrap();
    let source = JitSource::of(&hit).unwrap();
    let kept = |kernels| {
        cached_jit(cache, &source, &target, kernels)
            .unwrap()
            .is_some()
    };
    assert!(kept(JitKernels::Only(&["kiln_twice"])));
    assert!(
        !kept(JitKernels::Only(&["kiln_plus_one"])),
        "not asked for yet"
    );
    assert!(!kept(JitKernels::All));

    let plus_one = module.function("kiln_plus_one").unwrap();
    let got = launch_on(&gpu, &plus_one, &y);
    assert!(got.iter().zip(&y).all(|(g, y)| *g == y + 1.0));
    assert!(kept(JitKernels::Only(&["kiln_plus_one"])));
    assert_eq!(
        cache.stats().compiles,
        3,
        "NVRTC once, the driver once per kernel"
    );

    // Whole modules on request.
    let whole = ModuleCache::new().keep_jit_in(cache).whole_modules();
    let module = whole.load(&gpu.ctx, &request, &hit).unwrap();
    assert_eq!(module.jit(), Jit::WholeModule);
    assert!(kept(JitKernels::All));
}

/// Kernels that share a module variable are never split: the counter one
/// kernel bumps is the one the other reads.
fn module_variables_keep_a_ptx_module_whole() {
    let gpu = gpu();
    let Some(older) = older_major(gpu.arch) else {
        eprintln!("no older major than {}: nothing to check", gpu.arch);
        return;
    };
    let cache = jit_cache();
    let request = KernelRequest::new("shared_counter", SHARED_COUNTER, older)
        .name_expression("kiln_count")
        .name_expression("kiln_read_count");
    let hit = gpu.compiler.compile_cached(cache, &request).unwrap();
    let modules = ModuleCache::new().keep_jit_in(cache);
    let module = modules.load(&gpu.ctx, &request, &hit).unwrap();
    let count = module.function("kiln_count").unwrap();
    let read = module.function("kiln_read_count").unwrap();
    let stream = gpu.ctx.default_stream();
    let n = 777i32;
    let mut launch = stream.launch_builder(&count);
    launch.arg(&n);
    // SAFETY: `(int n)`, bounds-checked.
    unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }.unwrap();
    let mut out = stream.alloc_zeros::<u32>(1).unwrap();
    let mut launch = stream.launch_builder(&read);
    launch.arg(&mut out);
    // SAFETY: `(unsigned int* out)`, one element.
    unsafe { launch.launch(LaunchConfig::for_num_elems(1)) }.unwrap();
    assert_eq!(stream.clone_dtoh(&out).unwrap(), [777]);
    let target = JitTarget::new(gpu.arch, loader::driver_release(&gpu.ctx).unwrap()).unwrap();
    let source = JitSource::of(&hit).unwrap();
    assert!(
        cached_jit(cache, &source, &target, JitKernels::All)
            .unwrap()
            .is_some()
    );
}

/// Across caches sharing a disk tier (as processes on one machine do): the
/// second loads the first one's JIT-compiled CUBIN from the disk tier.
fn a_second_cache_gets_the_jit_compiled_cubin_from_the_disk_tier() {
    let gpu = gpu();
    let Some(older) = older_major(gpu.arch) else {
        eprintln!("no older major than {}: nothing to check", gpu.arch);
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let with_disk = || {
        let cache = jit_cache();
        let settings = kiln_core::settings::Settings::from_vars(
            [("KILN_CACHE_DIR", dir.path().as_os_str())]
                .into_iter()
                .collect(),
        );
        let tiers = kiln_core::add_tiers(cache, &settings);
        assert_eq!(tiers, ["disk"]);
        cache
    };
    let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
    let request = spec.request(older).unwrap();
    let first = with_disk();
    let hit = gpu.compiler.compile_cached(first, &request).unwrap();
    launch_and_check::<f32>(
        &gpu,
        &ModuleCache::new()
            .keep_jit_in(first)
            .load(&gpu.ctx, &request, &hit)
            .unwrap(),
        spec,
        2000,
    );
    first.flush();
    assert_eq!(first.stats().compiles, 2);

    let second = with_disk();
    let hit = gpu.compiler.compile_cached(second, &request).unwrap();
    assert_eq!(
        second.stats().compiles,
        0,
        "the PTX entry from the disk tier"
    );
    let kind = launch_and_check::<f32>(
        &gpu,
        &ModuleCache::new()
            .keep_jit_in(second)
            .load(&gpu.ctx, &request, &hit)
            .unwrap(),
        spec,
        2000,
    );
    assert_eq!(kind, ArtifactKind::Ptx);
    assert_eq!(second.stats().compiles, 0, "nor the JIT");
    assert_eq!(second.stats().hits_tier, 2);
}

/// Whether `KILN_GPU_TESTS` asks for the GPU tests (off when unset, empty, `0`,
/// `false`, `no` or `off`).
fn gpu_tests_enabled() -> bool {
    kiln_core::env::switch(
        "KILN_GPU_TESTS",
        std::env::var_os("KILN_GPU_TESTS").as_deref(),
        false,
    )
}

/// Each GPU test twice: all of them in `gpu_tests_with_kiln_gpu_tests`, which
/// runs them when `KILN_GPU_TESTS=1` (and otherwise only says how), and each
/// as an ignored test of its own, for `-- --ignored`.
macro_rules! gpu_tests {
    ($($name:ident),* $(,)?) => {
        #[test]
        fn gpu_tests_with_kiln_gpu_tests() {
            if !gpu_tests_enabled() {
                eprintln!(
                    "GPU tests not run: set KILN_GPU_TESTS=1, or pass -- --ignored (needs a GPU)"
                );
                return;
            }
            $(
                eprintln!(concat!("GPU test ", stringify!($name)));
                $name();
            )*
        }

        mod one_by_one {
            $(
                #[test]
                #[ignore = "needs a GPU: KILN_GPU_TESTS=1, or -- --ignored"]
                fn $name() {
                    super::$name()
                }
            )*
        }
    };
}

gpu_tests!(
    every_kernel_of_the_set_matches_its_cpu_reference_from_the_cubin,
    arch_specific_cubins_run_where_the_device_has_such_an_arch,
    ptx_is_the_fallback_when_no_cubin_runs_on_the_device,
    each_module_loads_once_per_context,
    kernels_launch_from_an_image_without_compiling,
    kernels_launch_from_whatever_a_library_shipped,
    a_served_kernel_loads_exactly_its_chosen_artifact,
    functions_are_found_from_any_thread,
    ptx_is_jit_compiled_once_and_kept,
    a_kernel_of_a_ptx_module_is_compiled_alone,
    module_variables_keep_a_ptx_module_whole,
    a_second_cache_gets_the_jit_compiled_cubin_from_the_disk_tier,
);
