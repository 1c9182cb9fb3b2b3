//! An example downstream kernel library: CUDA C++ for saxpy/axpby over `f32`
//! and `f64`, CUB block reductions over (dtype × op) and CUB block scans,
//! compiled with NVRTC through the Kiln cache.
//!
//! Its build script compiles the common specializations ([`catalogue::common`])
//! once for every target arch ([`catalogue::TARGETS`]) and writes them as an
//! image, with a record of the NVRTC release and CCCL headers it used; this
//! crate embeds both. A program that uses the library gets each kernel from
//! the image, for its GPU's arch or a compatible one, without NVRTC, the
//! headers or anything else of CUDA but the driver; only a kernel the image
//! cannot serve is compiled, with this machine's NVRTC.
//!
//! ```no_run
//! use kiln::cuda::{Arch, Device};
//! use kiln_kernels_demo::{Dtype, KernelSpec};
//!
//! let device = Device::new("sm_86".parse::<Arch>()?); // or loader::device(&ctx)
//! let saxpy = kiln_kernels_demo::get(kiln::global(), &device, &KernelSpec::Axpy { dtype: Dtype::F32 })?;
//! println!("{}: {} from {}", saxpy.hit().name(), saxpy.selection(), saxpy.target());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod catalogue;

pub use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp};

use kiln::cache::Cache;
use kiln::cuda::{Device, KernelLibrary, Served};

kiln::include_image!("kiln-kernels-demo.kimg");

/// The library's kernels: the shipped ones under the toolchain the build
/// recorded, the others compiled here.
static KERNELS: KernelLibrary<KernelSpec> =
    KernelLibrary::new(env!("KILN_CUDA_BUILD"), catalogue::request);

/// The library's [`KernelLibrary`]: its build record and selection counts.
pub fn library() -> &'static KernelLibrary<KernelSpec> {
    &KERNELS
}

/// The kernel of `spec` for `device`, from `cache` (the embedded image once
/// merged: `kiln::global()`): a shipped CUBIN for its arch or a compatible
/// one, shipped PTX, or compiled now.
///
/// # Errors
/// When the kernel is not shipped for this device and cannot be compiled
/// here (no NVRTC: the error says what to install), or does not compile.
pub fn get<'c>(
    cache: &'c Cache,
    device: &Device,
    spec: &KernelSpec,
) -> Result<Served<'c>, kiln::cuda::ServeError> {
    KERNELS.get(cache, device, spec)
}
