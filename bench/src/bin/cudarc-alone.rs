//! `cudarc-alone`: the first launch `kiln-bench gpu --path cubin` measures,
//! with cudarc alone: the same CUBIN (the one Kiln serves the GPU for
//! `kiln_axpy<float>`) embedded with `include_bytes!`, no cache, no image.
//! The floor a Rust program pays for its CUDA binding.
//!
//! Built with `CUDARC_ALONE_CUBIN=FILE` and `CUDARC_ALONE_ENTRY=NAME`
//! (the lowered entry point), as `scripts/gpu-bundle.sh` does; built without
//! them it embeds nothing and says so. Prints one JSON line (ns from `main`).

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

use cudarc::driver::{CudaContext, LaunchConfig, PushKernelArg};
use cudarc::nvrtc::Ptx;

static CUBIN: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/axpy.cubin"));
static ENTRY: &str = include_str!(concat!(env!("OUT_DIR"), "/axpy.entry"));

/// Elements, as `kiln-bench gpu`.
const N: usize = 1 << 20;
/// Threads per block, as the kernel set's axpy.
const BLOCK: u32 = 256;

fn main() -> ExitCode {
    let started = Instant::now();
    match run(started) {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("cudarc-alone: {error}");
            ExitCode::FAILURE
        }
    }
}

fn run(started: Instant) -> Result<(), String> {
    if CUBIN.is_empty() || ENTRY.trim().is_empty() {
        return Err(
            "built without a CUBIN: build with CUDARC_ALONE_CUBIN and CUDARC_ALONE_ENTRY"
                .to_owned(),
        );
    }
    // SAFETY: cudarc's own non-panicking probe: opens and closes the driver
    // library.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return Err("the CUDA driver library does not load here".to_owned());
    }
    let ctx: Arc<CudaContext> = CudaContext::new(0).map_err(|e| format!("context: {e}"))?;
    let module = ctx
        .load_module(Ptx::from_binary(CUBIN.to_vec()))
        .map_err(|e| format!("loading the CUBIN: {e}"))?;
    let function = module
        .load_function(ENTRY.trim())
        .map_err(|e| format!("function {}: {e}", ENTRY.trim()))?;
    let stream = ctx.default_stream();
    let x_host: Vec<f32> = (0..N).map(|i| (i % 17) as f32).collect();
    let y_host: Vec<f32> = (0..N).map(|i| (i % 5) as f32).collect();
    let x = stream
        .clone_htod(&x_host)
        .map_err(|e| format!("copy: {e}"))?;
    let mut y = stream
        .clone_htod(&y_host)
        .map_err(|e| format!("copy: {e}"))?;
    let (a, n) = (2.0f32, N as i32);
    let mut launch = stream.launch_builder(&function);
    launch.arg(&n).arg(&a).arg(&x).arg(&mut y);
    let config = LaunchConfig {
        grid_dim: ((N as u32).div_ceil(BLOCK), 1, 1),
        block_dim: (BLOCK, 1, 1),
        shared_mem_bytes: 0,
    };
    // SAFETY: the arguments match `kiln_axpy<float>(int, float, const float*,
    // float*)` and both buffers hold `N` elements.
    unsafe { launch.launch(config) }.map_err(|e| format!("launch: {e}"))?;
    let got = stream
        .clone_dtoh(&y)
        .map_err(|e| format!("copy back: {e}"))?;
    let total = started.elapsed();
    let wrong = x_host
        .iter()
        .zip(&y_host)
        .zip(&got)
        .filter(|((x, y), g)| a * **x + **y != **g)
        .count();
    if wrong > 0 {
        return Err(format!("{wrong} elements differ from the CPU reference"));
    }
    println!("{{\"total_ns\":{}}}", total.as_nanos());
    Ok(())
}
