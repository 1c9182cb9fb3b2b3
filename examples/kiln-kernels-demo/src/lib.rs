//! An example downstream kernel library: CUDA C++ for saxpy/axpby over `f32`
//! and `f64`, CUB block reductions over (dtype × op) and CUB block scans,
//! compiled with NVRTC through the Kiln cache.
//!
//! Its build script compiles the common specializations once
//! ([`catalogue::common`]) and writes them as an image; this crate embeds the
//! image with `include_image!`, so a program that uses the library finds
//! those kernels in the global cache at its first request, without running
//! NVRTC.
//!
//! ```no_run
//! use kiln_kernels_demo::{Dtype, KernelSpec, Kernels};
//!
//! let kernels = Kernels::new(Kernels::precompiled_arch()?)?;
//! let saxpy = kernels.get(kiln::global(), &KernelSpec::Axpy { dtype: Dtype::F32 })?;
//! println!("{}: {:?}", saxpy.name(), saxpy.source()); // Image: no compile
//! # Ok::<(), kiln::cuda::Error>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub mod catalogue;

pub use kiln_kernel_set::{Dtype, KernelSpec, ReduceOp};

use kiln::Hit;
use kiln::cache::Cache;
use kiln::cuda::{Arch, Compiler, KernelRequest};

kiln::include_image!("kiln-kernels-demo.kimg");

/// The arch the embedded image was built for (set by the build script from
/// `KILN_DEMO_ARCH`, default `sm_90`).
pub const PRECOMPILED_ARCH: &str = env!("KILN_KERNELS_DEMO_ARCH");

/// The library's kernels for one arch.
#[derive(Clone, Copy, Debug)]
pub struct Kernels {
    compiler: Compiler,
    arch: Arch,
}

impl Kernels {
    /// The kernels for `arch`, compiled (when not cached) by this process's
    /// NVRTC.
    ///
    /// # Errors
    /// When NVRTC cannot be found or loaded.
    pub fn new(arch: Arch) -> Result<Kernels, kiln::cuda::Error> {
        Ok(Kernels {
            compiler: Compiler::new()?,
            arch,
        })
    }

    /// [`PRECOMPILED_ARCH`], parsed.
    ///
    /// # Errors
    /// When the build script was given an arch that is not one.
    pub fn precompiled_arch() -> Result<Arch, kiln::cuda::Error> {
        PRECOMPILED_ARCH.parse()
    }

    /// The arch these kernels are compiled for.
    pub fn arch(&self) -> Arch {
        self.arch
    }

    /// The compile request of `spec`.
    ///
    /// # Errors
    /// When the CCCL headers a CUB kernel needs cannot be found.
    pub fn request(&self, spec: &KernelSpec) -> Result<KernelRequest, kiln::cuda::Error> {
        spec.request(self.arch)
    }

    /// The compiled kernel of `spec`: from `cache` (the embedded image, once
    /// merged) when there, else compiled now.
    ///
    /// # Errors
    /// When the kernel is not cached and does not compile.
    pub fn get<'c>(
        &self,
        cache: &'c Cache,
        spec: &KernelSpec,
    ) -> Result<Hit<'c>, kiln::cuda::Error> {
        catalogue::fetch(&self.compiler, cache, spec, &self.request(spec)?)
    }
}
