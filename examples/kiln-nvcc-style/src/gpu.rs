//! `--gpu`: each served kernel's module loaded on GPU 0 and its function
//! bound by the kernel's `extern "C"` name; `fast_max_f32` also launched and
//! checked against the CPU.

use std::sync::Arc;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use kiln::cuda::loader::{self, ModuleCache};
use kiln::cuda::{Device, Served};

/// Rows and columns of the launched reduction (a partial last block).
const ROWS: usize = 1_000 + 37;
const COLS: usize = 33;

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

    /// Loads `served`'s module, binds `kernel` by name, and for `fast_max_f32`
    /// launches it and checks the result: what happened, one word.
    pub fn check(&self, kernel: &str, served: &Served<'_>) -> Result<&'static str, String> {
        let module = self
            .modules
            .load_served(&self.ctx, served)
            .map_err(|e| e.to_string())?;
        let function = module.function(kernel).map_err(|e| e.to_string())?;
        if kernel != "fast_max_f32" {
            return Ok("loaded");
        }
        let input: Vec<f32> = (0..ROWS * COLS)
            .map(|i| ((i * 7919) % 1000) as f32 - 500.0)
            .collect();
        let expected: Vec<f32> = input
            .chunks(COLS)
            .map(|row| row.iter().copied().fold(f32::NEG_INFINITY, f32::max))
            .collect();
        let stream = self.ctx.default_stream();
        let fail = |e: cudarc::driver::DriverError| e.to_string();
        let d_in = stream.clone_htod(&input).map_err(fail)?;
        let mut d_out = stream.alloc_zeros::<f32>(ROWS).map_err(fail)?;
        let (rows, cols) = (ROWS, COLS);
        let mut launch = stream.launch_builder(&function);
        launch.arg(&rows).arg(&cols).arg(&d_in).arg(&mut d_out);
        let blocks = u32::try_from(ROWS).map_err(|e| e.to_string())?;
        // SAFETY: the arguments match `fast_max_f32(size_t rows, size_t cols,
        // const float* in, float* out)` (`size_t` is 64 bits on the device, as
        // `usize` here); `in` holds rows × cols elements and `out` rows.
        unsafe { launch.launch(LaunchConfig::for_num_elems(blocks)) }.map_err(fail)?;
        let got = stream.clone_dtoh(&d_out).map_err(fail)?;
        if got == expected {
            Ok("ran")
        } else {
            Err(format!(
                "fast_max_f32 gave {:?}..., expected {:?}...",
                &got[..4],
                &expected[..4]
            ))
        }
    }
}
