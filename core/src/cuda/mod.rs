//! The CUDA backend (feature `cuda`): NVRTC compiles CUDA C++ to a CUBIN for an
//! exact `sm_XX[a|f]` and to PTX; the cache keeps both in one entry; the loader
//! turns them into modules and functions on a GPU.
//!
//! - [`locate`]: finding NVRTC and the CCCL headers (`KILN_NVRTC`, the toolkit, the
//!   loader path, the Python wheels), with a typed error listing every place tried.
//! - [`NvrtcIdentity`]: which NVRTC the owners name, learnt without loading NVRTC
//!   when an identity memo ([`MemoDir`]) of the very library file exists; or recorded
//!   at build time, for processes without NVRTC.
//! - [`Nvrtc`]: loading NVRTC (on the first compile) so that cudarc binds exactly the
//!   located library, its exact version, and the compile itself.
//! - [`Arch`] and [`CanonicalOptions`]: the parts of the [`Owner`](crate::Owner)
//!   besides the version.
//! - [`KernelRequest`]: source, headers (by content or fingerprinted include
//!   directories), name expressions and specialization parameters; its
//!   [`Key`](crate::Key).
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
//! - [`kernels`]: a realistic kernel set (axpy, CUB block reduce and scan) with CPU
//!   references.
//!
//! Compiling needs no GPU, only NVRTC; loading needs a GPU and its driver. Serving
//! shipped kernels needs neither NVRTC nor headers.
//!
//! ```no_run
//! use kiln_core::cuda::cudarc::driver::{LaunchConfig, PushKernelArg};
//! use kiln_core::Cache;
//! use kiln_core::cuda::kernels::{Dtype, KernelSpec};
//! use kiln_core::cuda::loader::{self, ModuleCache};
//! use kiln_core::cuda::Compiler;
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let ctx = loader::context(0)?;
//! let spec = KernelSpec::Axpy { dtype: Dtype::F32 };
//! let request = spec.request(loader::device_arch(&ctx)?)?;
//!
//! let cache = Cache::new(); // or kiln_core::global(), with its merged images
//! let hit = Compiler::new()?.compile_cached(&cache, &request)?; // NVRTC only on a miss
//! let module = ModuleCache::global().load(&ctx, &request, &hit)?; // once per context
//! let axpy = module.function(&spec.name_expression())?;
//!
//! let stream = ctx.default_stream();
//! let n = 1000;
//! let x = stream.clone_htod(&vec![1.0f32; n])?;
//! let mut y = stream.clone_htod(&vec![2.0f32; n])?;
//! let (a, n_arg) = (3.0f32, n as i32);
//! let mut launch = stream.launch_builder(&axpy);
//! launch.arg(&n_arg).arg(&a).arg(&x).arg(&mut y);
//! let geometry = spec.launch(n);
//! // SAFETY: the arguments match `kiln_axpy<float>(int, float, const float*, float*)`
//! // and both buffers hold `n` elements.
//! unsafe {
//!     launch.launch(LaunchConfig {
//!         grid_dim: (geometry.grid, 1, 1),
//!         block_dim: (geometry.block, 1, 1),
//!         shared_mem_bytes: 0,
//!     })
//! }?;
//! assert_eq!(stream.clone_dtoh(&y)?, vec![5.0f32; n]);
//! # Ok(()) }
//! ```

mod arch;
mod compiler;
mod error;
mod identity;
mod include_tree;
pub mod kernels;
mod library;
pub mod loader;
pub mod locate;
mod memo;
mod nvrtc;
mod options;
mod request;
mod select;
mod ship;
mod toolchain;

/// The cudarc version Kiln loads modules with: launch through it so that the types
/// match.
pub use cudarc;

pub use arch::{Arch, ArchSuffix};
pub use compiler::{CompiledKernel, Compiler};
pub use error::{Error, SearchLog, Searched};
pub use identity::{IdentityOrigin, NvrtcIdentity};
pub use library::{KernelLibrary, RequestFn, SelectionStats, Served};
pub use locate::{Located, SearchConfig, locate_cccl, locate_nvrtc};
pub use memo::{DEFAULT_SETTLE, MemoDir};
pub use nvrtc::{Nvrtc, NvrtcVersion};
pub use options::CanonicalOptions;
pub use request::{
    COMPILER_ID, HEADERS_DEP_PREFIX, Header, IncludeDir, KEY_SCHEMA, KernelRequest, NVRTC_DEP,
    nvrtc_fingerprint,
};
pub use select::{Candidate, Candidates, Device, Selection, driver_needed_for_ptx, select};
pub use ship::{ShipPlan, ship_one};
pub use toolchain::{BUILD_RECORD_VAR, BuildRecord, CCCL, Toolchain, ToolchainPolicy};
