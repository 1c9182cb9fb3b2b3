//! kiln-cuda: Kiln's CUDA backend (`kiln::cuda` with the feature `cuda`). NVRTC
//! compiles CUDA C++ to a CUBIN for an exact `sm_XX[a|f]` and to PTX; the cache
//! keeps both in one entry; the loader turns them into modules and functions on a
//! GPU. It uses the public API of `kiln-core` only: a backend is a client of the
//! cache.
//!
//! - [`locate_nvrtc`], [`locate_cccl`]: finding NVRTC and the CCCL headers (`KILN_NVRTC`, the toolkit, the
//!   loader path, the Python wheels), with a typed error listing every place tried.
//! - [`NvrtcIdentity`]: which NVRTC the owners name, learnt without loading NVRTC
//!   when an identity memo ([`MemoDir`]) of the very library file exists; or recorded
//!   at build time, for processes without NVRTC.
//! - [`Nvrtc`]: loading NVRTC (on the first compile) so that cudarc binds exactly the
//!   located library, its exact version, and the compile itself.
//! - [`Arch`] and [`CanonicalOptions`]: the parts of the [`Owner`](kiln_core::Owner)
//!   besides the version.
//! - [`KernelRequest`]: source, headers (by content or fingerprinted include
//!   directories), name expressions and specialization parameters; its
//!   [`Key`](kiln_core::Key).
//! - [`Compiler`]: request → [`CompiledKernel`] → cache entry
//!   ([`Compiler::compile_cached`]).
//! - [`BuildRecord`] and [`Toolchain`]: what a kernel library's build compiled with
//!   (NVRTC release, header-set digests, targets), carried to the library at compile
//!   time; a recorded toolchain derives owners and keys without any file, a local one
//!   compiles. [`ToolchainPolicy`]: `KILN_STRICT_TOOLCHAIN`.
//! - [`ShipPlan`]: the build side of a kernel library (every spec for every target,
//!   in parallel; PTX for the lowest target).
//! - [`select`]: which shipped code runs on a [`Device`] (exact CUBIN, compatible
//!   CUBIN, PTX), a pure function.
//! - [`KernelLibrary`]: the run-time side: a shipped entry for the device found with
//!   no toolchain, else a compile with the local one ([`Served`], [`Selection`]).
//! - [`loader`]: cached artifacts → loaded modules and functions, once per context.
//! - [`Error`]: the crate's one error enum.
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

mod arch;
mod compiler;
mod error;
mod identity;
mod include_tree;
mod jit;
mod library;
pub mod loader;
mod locate;
mod memo;
mod nvrtc;
mod options;
mod ptx;
mod request;
mod select;
mod ship;
mod toolchain;

/// The cudarc types of the loader's API. Launching takes more of cudarc (streams,
/// launch builders): depend on `cudarc` 0.19, the version of these types.
pub use cudarc::driver::{CudaContext, CudaFunction, CudaModule, DriverError};

pub use arch::{Arch, ArchSuffix};
pub use compiler::{CompiledKernel, Compiler};
pub use error::{Error, SearchLog, Searched};
pub use identity::{IdentityOrigin, NvrtcIdentity};
pub use jit::{
    JIT_COMPILER_ID, JIT_KEY_SCHEMA, JIT_SOURCE_DEP, JitKernels, JitSource, JitTarget, cached_jit,
    get_or_jit, jit_key, jit_source_fingerprint,
};
pub use library::{KernelLibrary, RequestFn, SelectionStats, Served};
pub use locate::{Located, SearchConfig, locate_cccl, locate_nvrtc};
pub use memo::{DEFAULT_SETTLE, MemoDir};
pub use nvrtc::{Nvrtc, NvrtcVersion};
pub use options::CanonicalOptions;
pub use ptx::PtxModule;
pub use request::{
    COMPILER_ID, HEADERS_DEP_PREFIX, Header, IncludeDir, KEY_SCHEMA, KernelRequest, NVRTC_DEP,
    nvrtc_fingerprint,
};
pub use select::{Candidate, Candidates, Device, Selection, driver_needed_for_ptx, select};
pub use ship::{ShipPlan, ship_one};
pub use toolchain::{
    BUILD_RECORD_VAR, BuildRecord, CCCL, STRICT_TOOLCHAIN, Toolchain, ToolchainPolicy,
};
