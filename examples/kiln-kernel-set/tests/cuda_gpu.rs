//! GPU tests: each kernel of the set is compiled (through the cache), loaded from the
//! cached CUBIN (or PTX), launched, and compared with its CPU reference.
//!
//! Opt-in, they need a GPU and its driver:
//! `KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored`

use std::sync::Arc;

use cudarc::driver::{CudaContext, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use kiln_core::{ArtifactKind, Cache, Hit};
use kiln_cuda::loader::{self, ModuleCache};
use kiln_cuda::{Arch, ArchSuffix, Compiler, KernelRequest};
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
    launch_and_check::<T>(gpu, modules, spec, &request, &hit, n)
}

fn launch_and_check<T: Sample>(
    gpu: &Gpu,
    modules: &ModuleCache,
    spec: KernelSpec,
    request: &KernelRequest,
    hit: &Hit<'_>,
    n: usize,
) -> ArtifactKind {
    let module = modules.load(&gpu.ctx, request, hit).unwrap();
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

#[test]
#[ignore = "needs a GPU: KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored"]
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

#[test]
#[ignore = "needs a GPU: KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored"]
fn arch_specific_cubins_run_where_the_device_has_such_an_arch() {
    let gpu = gpu();
    if !matches!(
        (gpu.arch.major(), gpu.arch.minor()),
        (9, 0) | (10, 0) | (10, 3) | (12, 0)
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

#[test]
#[ignore = "needs a GPU: KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored"]
fn ptx_is_the_fallback_when_no_cubin_runs_on_the_device() {
    let gpu = gpu();
    // A plain arch of an older major: its CUBIN cannot run here, its PTX can.
    let older = Arch::new(gpu.arch.major() - 1, 0, ArchSuffix::None).unwrap();
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

#[test]
#[ignore = "needs a GPU: KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored"]
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

/// The precompile round trip: compile into a cache, write the delta as an image,
/// merge it into a fresh cache, and launch from the image-backed CUBIN without
/// compiling.
#[test]
#[ignore = "needs a GPU: KILN_GPU_TESTS=1 cargo test -p kiln-kernel-set --test cuda_gpu -- --ignored"]
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
        let kind = match spec.dtype() {
            Dtype::F32 => launch_and_check::<f32>(&gpu, &modules, spec, &request, &hit, 3000),
            Dtype::I32 => launch_and_check::<i32>(&gpu, &modules, spec, &request, &hit, 3000),
            other => unreachable!("{other:?} is not in this test"),
        };
        assert_eq!(kind, ArtifactKind::Cubin);
    }
    assert_eq!(run.stats().compiles, 0);
}
