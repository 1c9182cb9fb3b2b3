//! kiln-cuda: Kiln's CUDA backend (`kiln::cuda` with the feature `cuda`). NVRTC
//! compiles CUDA C++ to a CUBIN for an exact `sm_XX[a|f]` and to PTX; the cache
//! keeps both in one entry; the loader turns them into modules and functions on a
//! GPU. One kernel, compiled through a cache (NVRTC only on a miss), loaded and
//! launched:
//!
//! ```no_run
//! use cudarc::driver::{LaunchConfig, PushKernelArg};
//! use kiln_cuda::loader::{self, ModuleCache};
//! use kiln_cuda::{Compiler, KernelRequest};
//!
//! const AXPY: &str = "template <typename T>
//! __global__ void axpy(int n, T a, const T* x, T* y) {
//!     int i = blockIdx.x * blockDim.x + threadIdx.x;
//!     if (i < n) y[i] = a * x[i] + y[i];
//! }";
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = loader::context(0)?;
//! let request = KernelRequest::new("axpy_f32", AXPY, loader::device_arch(&ctx)?)
//!     .name_expression("axpy<float>");
//! let hit = Compiler::new()?.compile_cached(kiln_core::global(), &request)?;
//! let axpy = ModuleCache::global().function(&ctx, &request, &hit, "axpy<float>")?;
//!
//! let stream = ctx.default_stream();
//! let (n, n_arg, a) = (1000, 1000i32, 3.0f32);
//! let x = stream.clone_htod(&vec![1.0f32; n])?;
//! let mut y = stream.clone_htod(&vec![2.0f32; n])?;
//! let mut launch = stream.launch_builder(&axpy);
//! launch.arg(&n_arg).arg(&a).arg(&x).arg(&mut y);
//! // SAFETY: the arguments match `axpy<float>(int, float, const float*, float*)`
//! // and both buffers hold `n` elements.
//! unsafe { launch.launch(LaunchConfig::for_num_elems(n as u32)) }?;
//! assert_eq!(stream.clone_dtoh(&y)?, vec![5.0f32; n]);
//! # Ok(()) }
//! ```
//!
//! A kernel *library* ships its kernels instead: its build script compiles every
//! specialization for every target with a [`ShipPlan`], and the library serves them
//! with a [`KernelLibrary`], from its embedded image with no NVRTC and no headers
//! (the `kiln` crate's documentation shows the three files together; [`ship`] and
//! [`library`] have examples of each side).
//!
//! # Concepts
//!
//! - [`KernelRequest`]: source, headers (by content, Kiln's
//!   [`c_headers`](toolchain::c_headers), or include directories by content:
//!   [`IncludeDir`]), name expressions or every `extern "C"` kernel, parameters;
//!   its [`Key`](kiln_core::Key). [`Arch`], the target (`sm_90a`), is part of the
//!   [`Owner`](kiln_core::Owner).
//! - [`Toolchain`]: which compiler and which headers owners and keys are derived
//!   for, the one a library's build recorded (digests only) or this machine's;
//!   its [`Compiler`] turns a request into a cache entry
//!   ([`Compiler::compile_cached`]).
//! - [`ShipPlan`] and [`KernelLibrary`]: the build and run-time sides of a kernel
//!   library; [`KernelLibrary::get`] answers [`Served`], the chosen code for a
//!   [`Device`] (exact CUBIN, compatible CUBIN, PTX, or compiled here).
//! - [`loader`]: cached artifacts → modules and functions, once per context; a
//!   [`Served`] kernel's chosen artifact exactly
//!   ([`ModuleCache::load_served`](loader::ModuleCache::load_served)), PTX through
//!   the driver's JIT kept as a cache entry of its own ([`jit`]).
//! - Errors, one per operation: [`ToolchainError`] (finding NVRTC, the header
//!   sets, a build record), [`CompileError`], [`LoadError`], [`ShipError`],
//!   [`ServeError`]; [`Error`] holds any of the first four, for code that calls
//!   several (a build script, a library's request function). Each converts into
//!   `kiln::Error` with `?`.
//!
//! The rest is one module down: [`toolchain`] (the [`toolchain::BuildRecord`] a
//! build records, the policy, the header-set names, where NVRTC and the headers
//! were searched for, which NVRTC the owners name and how it was learnt),
//! [`select`] (which shipped code runs on a device, a pure function), [`request`]
//! (headers, key schema, dependency names), [`options`] (the NVRTC options Kiln
//! accepts), [`ptx`] (a PTX module read far enough to JIT-compile one kernel
//! alone), [`arch`], [`cubin`] (the arch a CUBIN's ELF header names).
//!
//! Compiling needs no GPU, only NVRTC; loading needs a GPU and its driver. Serving
//! shipped kernels needs neither NVRTC nor headers. The loader hands out cudarc's
//! types ([`CudaContext`], [`CudaModule`], [`CudaFunction`]); to launch, depend on
//! `cudarc` 0.19 as well, the version this crate is built with, so that they are
//! the types of your `cudarc`.

#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod arch;
pub mod cubin;
mod error;
pub mod jit;
pub mod library;
pub mod loader;
pub mod options;
pub mod ptx;
pub mod request;
pub mod select;
pub mod ship;
mod switches;
pub mod toolchain;

/// The cudarc types of the loader's API. Launching takes more of cudarc (streams,
/// launch builders): depend on `cudarc` 0.19, the version of these types.
pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};

pub use arch::Arch;
pub use error::Error;
pub use library::ServeError;
pub use library::{KernelLibrary, Served};
pub use loader::LoadError;
pub use request::{IncludeDir, KernelRequest};
pub use select::Device;
pub use ship::ShipError;
pub use ship::ShipPlan;
pub use toolchain::{CompileError, ToolchainError};
pub use toolchain::{Compiler, Toolchain};

// The crate's own modules name each other's items from here.
use arch::ArchSuffix;
use options::CanonicalOptions;
use toolchain::{BuildRecord, MemoDir, NvrtcVersion, ToolchainPolicy};
