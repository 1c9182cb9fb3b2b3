//! `--gpu`: launch each kernel on GPU 0 from the cached artifact and compare
//! with a CPU reference.

use std::sync::Arc;

use cudarc::driver::{CudaContext, DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};
use kiln::cuda::loader::{self, ModuleCache};
use kiln::cuda::{Device, Served};
use kiln_activations_demo::{Float, Kernel as Activation};
use kiln_kernel_set::{Dtype, Element, KernelSpec, reference};

use crate::kernels::Wanted;

/// Elements per launch: a partial last block exercises the bounds checks.
const N: usize = 10_000 + 77;

/// GPU 0, its arch and driver, and the modules loaded on it.
pub struct Gpu {
    ctx: Arc<CudaContext>,
    device: Device,
    modules: ModuleCache,
}

impl Gpu {
    /// Opens GPU 0 (an error, not a panic, without a driver).
    pub fn open() -> Result<Gpu, kiln::cuda::Error> {
        let ctx = loader::context(0)?;
        let device = loader::device(&ctx)?;
        Ok(Gpu {
            ctx,
            device,
            modules: ModuleCache::new(),
        })
    }

    /// The device: its arch and its driver's CUDA version.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Launches `kernel` (served as `served`: a CUBIN of its arch or a
    /// compatible one, or PTX) and checks its output; the kind of artifact
    /// that ran (`Cubin`, `Ptx`) on success.
    pub fn check(&self, kernel: &Wanted, served: &Served<'_>) -> Result<String, String> {
        let module = self
            .modules
            .load_served(&self.ctx, served)
            .map_err(|e| e.to_string())?;
        let entry = served
            .request()
            .name_expressions()
            .first()
            .ok_or_else(|| format!("{} has no entry point", served.hit().name()))?;
        let function = module.function(entry).map_err(|e| e.to_string())?;
        let launch = Launch {
            gpu: self,
            function: &function,
        };
        match kernel {
            Wanted::Demo(spec) => match spec.dtype() {
                Dtype::F32 => launch.spec::<f32>(spec),
                Dtype::F64 => launch.spec::<f64>(spec),
                Dtype::I32 => launch.spec::<i32>(spec),
                Dtype::U32 => launch.spec::<u32>(spec),
            },
            Wanted::Activation(activation) => match activation.float {
                Float::F32 => launch.activation::<f32>(activation, 1e-5),
                Float::F64 => launch.activation::<f64>(activation, 1e-6),
            },
        }
        .map_err(|e| e.to_string())?;
        Ok(format!("{:?}", module.kind()))
    }
}

type Failure = Box<dyn std::error::Error>;

/// Test data: deterministic values in [-4, 4] (integers: [-1000, 1000]).
trait Sample: Element + DeviceRepr + ValidAsZeroBits + Default {
    fn sample(i: usize) -> Self;
    fn to_f64(self) -> f64;
    fn from_f64(v: f64) -> Self;
}

fn mix(i: usize) -> f64 {
    ((i as u64)
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .rotate_left(17)
        % 2001) as f64
        - 1000.0
}

impl Sample for f32 {
    fn sample(i: usize) -> Self {
        (mix(i) / 250.0) as f32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
}

impl Sample for f64 {
    fn sample(i: usize) -> Self {
        mix(i) / 250.0
    }
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
}

impl Sample for i32 {
    fn sample(i: usize) -> Self {
        mix(i) as i32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as i32
    }
}

impl Sample for u32 {
    fn sample(i: usize) -> Self {
        (mix(i) + 1000.0) as u32
    }
    fn to_f64(self) -> f64 {
        f64::from(self)
    }
    fn from_f64(v: f64) -> Self {
        v as u32
    }
}

struct Launch<'a> {
    gpu: &'a Gpu,
    function: &'a cudarc::driver::CudaFunction,
}

fn config(grid: u32, block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (grid, 1, 1),
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Whether `got` is within `tolerance` of `want`, relative to `scale`.
fn compare<T: Sample>(got: &[T], want: &[T], tolerance: f64) -> Result<(), Failure> {
    if got.len() != want.len() {
        return Err(format!("{} results, expected {}", got.len(), want.len()).into());
    }
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let (g, w) = (g.to_f64(), w.to_f64());
        if (g - w).abs() > tolerance * (1.0 + w.abs()) {
            return Err(format!("element {i}: GPU {g}, CPU {w}").into());
        }
    }
    Ok(())
}

impl Launch<'_> {
    fn spec<T: Sample>(&self, spec: &KernelSpec) -> Result<(), Failure> {
        let stream = self.gpu.ctx.default_stream();
        let x: Vec<T> = (0..N).map(T::sample).collect();
        let y: Vec<T> = (0..N).map(|i| T::sample(i + N)).collect();
        let n = i32::try_from(N)?;
        let geometry = spec.launch(N);
        let launch_config = config(geometry.grid, geometry.block);
        // Integer sums are exact; float sums over a block round a little.
        let tolerance = if matches!(T::DTYPE, Dtype::F32) {
            1e-4
        } else {
            1e-10
        };
        match *spec {
            KernelSpec::Axpy { .. } | KernelSpec::Axpby { .. } => {
                let axpby = matches!(spec, KernelSpec::Axpby { .. });
                let (a, b) = (T::from_f64(1.5), T::from_f64(-0.5));
                let x_dev = stream.clone_htod(&x)?;
                let mut y_dev = stream.clone_htod(&y)?;
                let mut builder = stream.launch_builder(self.function);
                builder.arg(&n).arg(&a).arg(&x_dev);
                if axpby {
                    builder.arg(&b);
                }
                builder.arg(&mut y_dev);
                // SAFETY: the arguments match `(int n, T a, const T* x, [T b,] T* y)`,
                // both buffers hold `N` elements and the kernel checks `i < n`.
                unsafe { builder.launch(launch_config) }?;
                let got = stream.clone_dtoh(&y_dev)?;
                let mut want = y;
                if axpby {
                    reference::axpby(a, &x, b, &mut want);
                } else {
                    reference::axpy(a, &x, &mut want);
                }
                compare(&got, &want, tolerance)
            }
            KernelSpec::BlockReduce { op, block, .. } | KernelSpec::BlockScan { op, block, .. } => {
                let scan = matches!(spec, KernelSpec::BlockScan { .. });
                let x_dev = stream.clone_htod(&x)?;
                let mut out =
                    stream.alloc_zeros::<T>(if scan { N } else { geometry.grid as usize })?;
                let mut builder = stream.launch_builder(self.function);
                builder.arg(&x_dev).arg(&mut out).arg(&n);
                // SAFETY: the arguments match `(const T* in, T* out, int n)`; `in`
                // holds `N` elements, `out` one per block (reduce) or `N` (scan),
                // and the launch's block size is the kernel's.
                unsafe { builder.launch(launch_config) }?;
                let got = stream.clone_dtoh(&out)?;
                let block = block as usize;
                let want = if scan {
                    reference::block_scan(&x, block, op)
                } else {
                    reference::block_reduce(&x, block, op)
                };
                compare(&got, &want, tolerance)
            }
        }
    }

    fn activation<T: Sample>(
        &self,
        activation: &Activation,
        tolerance: f64,
    ) -> Result<(), Failure> {
        let stream = self.gpu.ctx.default_stream();
        let x: Vec<T> = (0..N).map(T::sample).collect();
        let n = i32::try_from(N)?;
        let x_dev = stream.clone_htod(&x)?;
        let mut y_dev = stream.alloc_zeros::<T>(N)?;
        let mut builder = stream.launch_builder(self.function);
        builder.arg(&n).arg(&x_dev).arg(&mut y_dev);
        // SAFETY: the arguments match `(int n, const T* x, T* y)`, both buffers
        // hold `N` elements and the kernel checks `i < n`.
        unsafe { builder.launch(config(N.div_ceil(256) as u32, 256)) }?;
        let got = stream.clone_dtoh(&y_dev)?;
        let want: Vec<T> = x
            .iter()
            .map(|&v| {
                T::from_f64(kiln_activations_demo::reference::apply(
                    activation.activation,
                    v.to_f64(),
                ))
            })
            .collect();
        compare(&got, &want, tolerance)
    }
}
