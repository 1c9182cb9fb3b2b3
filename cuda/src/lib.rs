//! kiln-cuda: Kiln's CUDA backend (`kiln::cuda` with the feature `cuda`). NVRTC
//! compiles CUDA C++ to a CUBIN for an exact `sm_XX[a|f]` and to PTX; the cache
//! keeps both in one entry; the loader turns them into modules and functions on a
//! GPU. It uses the public API of `kiln-core` only: a backend is a client of the
//! cache.
//!
//! The root holds the main path:
//!
//! - [`KernelRequest`]: source, headers (by content, Kiln's C headers for NVRTC
//!   ([`c_headers`]), or fingerprinted include directories), name expressions or
//!   every `extern "C"` kernel, specialization parameters; its
//!   [`Key`](kiln_core::Key). [`IncludeDir`]: an include directory by content.
//! - [`Arch`]: the target (`sm_90a`), part of the [`Owner`](kiln_core::Owner).
//! - [`Compiler`]: request → cache entry ([`Compiler::compile_cached`]), with the
//!   process's NVRTC.
//! - [`Toolchain`]: what owners and keys are derived for: the one a library's build
//!   recorded (digests only, nothing read) or this machine's (NVRTC and the header
//!   sets CCCL and the CUDA runtime headers, located when first needed).
//! - [`ShipPlan`]: the build side of a kernel library (every spec for every target,
//!   in parallel; PTX for the lowest target, or several).
//! - [`KernelLibrary`]: the run-time side: a shipped entry for the [`Device`] found
//!   with no toolchain, else a compile with the local one ([`Served`]; one kernel
//!   of a program by name: [`KernelLibrary::get_kernel`]).
//! - [`loader`]: cached artifacts → loaded modules and functions, once per context;
//!   a [`Served`] kernel's chosen artifact exactly
//!   ([`ModuleCache::load_served`](loader::ModuleCache::load_served)), PTX through
//!   the driver's JIT kept as a cache entry of its own.
//! - [`Error`]: the crate's one error enum.
//!
//! The rest is one module down: [`toolchain`] (the [`toolchain::BuildRecord`]
//! a build records, the policy, the header-set names), [`select`] (which shipped code
//! runs on a device, a pure function), [`library`] (the attempts and counts of
//! serving), [`request`] (headers, key schema, dependency names), [`options`] (the
//! NVRTC options Kiln accepts), [`c_headers`] (the C headers NVRTC lacks), [`locate`]
//! (finding NVRTC and the header sets, with every place tried), [`nvrtc`],
//! [`identity`] and [`memo`] (which NVRTC the owners name, learnt without loading it
//! when a memo allows), [`jit`] (the CUBIN the driver JIT-compiles from PTX, kept
//! once per fleet: its owner, key and provenance), [`ptx`] (a PTX module read far
//! enough to JIT-compile one kernel alone), [`compiler`], [`arch`], [`ship`],
//! [`error`].
//!
//! Compiling needs no GPU, only NVRTC; loading needs a GPU and its driver. Serving
//! shipped kernels needs neither NVRTC nor headers. The loader hands out
//! cudarc's types ([`CudaContext`], [`CudaModule`], [`CudaFunction`]); to
//! launch, depend on `cudarc` 0.19 as well, the version this crate is built
//! with, so that they are the types of your `cudarc`.
//!
//! ```no_run
//! use cudarc::driver::{LaunchConfig, PushKernelArg};
//! use kiln_core::Cache;
//! use kiln_cuda::loader::{self, ModuleCache};
//! use kiln_cuda::{Compiler, KernelRequest};
//!
//! const AXPY: &str = "template <typename T>
//! __global__ void kiln_axpy(int n, T a, const T* x, T* y) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) y[i] = a * x[i] + y[i];
//! }";
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = loader::context(0)?;
//! let request = KernelRequest::new("axpy_f32", AXPY, loader::device_arch(&ctx)?)
//!     .name_expression("kiln_axpy<float>");
//!
//! let cache = Cache::new(); // or kiln_core::global(), with its merged images
//! let hit = Compiler::new()?.compile_cached(&cache, &request)?; // NVRTC only on a miss
//! let module = ModuleCache::global().load(&ctx, &request, &hit)?; // once per context
//! let axpy = module.function("kiln_axpy<float>")?;
//!
//! let stream = ctx.default_stream();
//! let n = 1000;
//! let x = stream.clone_htod(&vec![1.0f32; n])?;
//! let mut y = stream.clone_htod(&vec![2.0f32; n])?;
//! let (a, n_arg) = (3.0f32, n as i32);
//! let mut launch = stream.launch_builder(&axpy);
//! launch.arg(&n_arg).arg(&a).arg(&x).arg(&mut y);
//! // SAFETY: the arguments match `kiln_axpy<float>(int, float, const float*, float*)`
//! // and both buffers hold `n` elements.
//! unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }?;
//! assert_eq!(stream.clone_dtoh(&y)?, vec![5.0f32; n]);
//! # Ok(()) }
//! ```

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod arch;
pub mod c_headers;
pub mod compiler;
pub mod error;
pub mod identity;
mod include_tree;
pub mod jit;
pub mod library;
pub mod loader;
pub mod locate;
pub mod memo;
pub mod nvrtc;
pub mod options;
pub mod ptx;
pub mod request;
pub mod select;
pub mod ship;
pub mod toolchain;

/// The cudarc types of the loader's API. Launching takes more of cudarc (streams,
/// launch builders): depend on `cudarc` 0.19, the version of these types.
pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};

pub use arch::Arch;
pub use compiler::Compiler;
pub use error::Error;
pub use library::{KernelLibrary, Served};
pub use request::{IncludeDir, KernelRequest};
pub use select::Device;
pub use ship::ShipPlan;
pub use toolchain::Toolchain;

// The crate's own modules name each other's items from here.
use arch::ArchSuffix;
use locate::SearchConfig;
use memo::MemoDir;
use nvrtc::NvrtcVersion;
use options::CanonicalOptions;
use toolchain::{BuildRecord, ToolchainPolicy};
