//! What the library compiles, and how: shared by the library and its build
//! script (`#[path]`), so that both derive the same owners and keys.

use kiln::cuda::{Arch, KernelRequest, Toolchain};
use kiln::image::Digest;
use kiln_kernel_set::KernelSpec;

/// The archs the build script ships a CUBIN for: Turing to Blackwell (the
/// oldest CUDA 13 supports to the newest). The lowest also ships its PTX,
/// which the driver compiles for any newer GPU.
pub const TARGETS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// Replaces [`TARGETS`] at build time, e.g. `KILN_DEMO_ARCHS=sm_90` for a
/// quicker build for one GPU.
pub const TARGETS_VARIABLE: &str = "KILN_DEMO_ARCHS";

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

/// The compile request of `spec` for `arch` under `toolchain`: the recorded
/// one (CCCL by its recorded digest: nothing read) when looking up shipped
/// entries, this machine's when compiling. It records the family's
/// definition as a dependency.
///
/// # Errors
/// When the CCCL headers a CUB kernel needs are not in `toolchain`.
pub fn request(
    spec: &KernelSpec,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    let (definition, fingerprint) = definition(spec);
    Ok(spec
        .request_with(toolchain, arch)?
        .dep(definition, fingerprint))
}
