//! What the library compiles, and how: shared by the library and its build
//! script (`#[path]`), so that both derive the same owners and keys.

use kiln::Hit;
use kiln::cache::Cache;
use kiln::cuda::{Compiler, KernelRequest};
use kiln::image::Digest;
use kiln_kernel_set::KernelSpec;

/// The environment variable that picks the arch the build script precompiles for.
pub const ARCH_VARIABLE: &str = "KILN_DEMO_ARCH";

/// The arch precompiled for when [`ARCH_VARIABLE`] is unset: Hopper (H100, H200).
pub const DEFAULT_ARCH: &str = "sm_90";

/// The specializations the library precompiles: saxpy/daxpy and axpby over
/// `f32` and `f64`, CUB block reductions over several (dtype, op) pairs and
/// CUB block scans.
pub fn common() -> Vec<KernelSpec> {
    KernelSpec::all()
}

/// The definition a kernel is built from (its family's source), as the
/// name and fingerprint its cache entry records as a dependency.
///
/// A program that redefines the name with another fingerprint before the
/// images are merged (`kiln::cache::init_with(|cache| cache.define(..))`) makes the
/// image's entries of that family stale: they are skipped, and recompiled
/// when asked for.
pub fn definition(spec: &KernelSpec) -> (String, Digest) {
    let family = match spec {
        KernelSpec::Axpy { .. } | KernelSpec::Axpby { .. } => "axpy",
        KernelSpec::BlockReduce { .. } => "block_reduce",
        KernelSpec::BlockScan { .. } => "block_scan",
    };
    (
        format!("kiln-kernels-demo::{family}"),
        Digest::of(spec.source().as_bytes()),
    )
}

/// The cached kernel of `request` (an instance of `spec`): from the cache
/// (an image, memory) when there, else compiled with NVRTC and recorded.
///
/// # Errors
/// When the kernel is not cached and does not compile.
pub fn fetch<'c>(
    compiler: &Compiler,
    cache: &'c Cache,
    spec: &KernelSpec,
    request: &KernelRequest,
) -> Result<Hit<'c>, kiln::cuda::Error> {
    let owner = compiler.owner(request)?;
    let key = request.key()?;
    let (definition, fingerprint) = definition(spec);
    Ok(cache.get_or_compile(&owner, &key, || {
        Ok(compiler
            .compile(request)?
            .into_compiled(spec.name())
            .dep(definition, fingerprint))
    })?)
}
