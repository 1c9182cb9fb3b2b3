//! What the library compiles, and how: shared by the library and its build
//! script (`#[path]`), so that both derive the same owners and keys.

use kiln::cuda::{Arch, KernelRequest, Toolchain};
use kiln::image::Digest;
use kiln_kernel_set::KernelSpec;

/// The archs the build script ships an NVRTC 13 CUBIN for: Turing to Blackwell
/// (the oldest CUDA 13 supports to the newest), for CUDA 13 drivers (R580+).
/// The lowest also ships its PTX, which the driver compiles for any newer GPU.
pub const TARGETS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// The archs the build script ships an NVRTC 12 CUBIN for: Maxwell to Blackwell,
/// for CUDA 12 drivers (R525 to R575) on every GPU, and for Maxwell, Pascal and
/// Volta on any driver (CUDA 13 cannot compile for them). The lowest also ships
/// its PTX.
pub const TARGETS_CUDA_12: &str = "sm_50,sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// Replaces [`TARGETS`] at build time, e.g. `KILN_DEMO_ARCHS=sm_90` for a
/// quicker build for one GPU: one toolchain, whatever NVRTC the machine has.
pub const TARGETS_VARIABLE: &str = "KILN_DEMO_ARCHS";

/// The oldest driver the plan states it serves, at build time
/// (`KILN_DEMO_OLDEST_DRIVER=13.5`); the default is what its CUBINs reach.
pub const OLDEST_DRIVER_VARIABLE: &str = "KILN_DEMO_OLDEST_DRIVER";

/// The library's plan: [`TARGETS`] by NVRTC 13 and [`TARGETS_CUDA_12`] by NVRTC
/// 12, or `targets` alone (the value of [`TARGETS_VARIABLE`]) by whatever NVRTC
/// the build finds; from `oldest_driver` on when given (a CUDA version such as
/// `13.5`).
///
/// # Errors
/// When a target is not an arch, or the oldest driver not a CUDA version.
pub fn plan(
    targets: Option<&str>,
    oldest_driver: Option<&str>,
) -> Result<kiln::cuda::ShipPlan, kiln::cuda::Error> {
    use kiln::cuda::ShipPlan;
    let plan = match targets {
        Some(targets) => ShipPlan::parse(targets)?,
        None => ShipPlan::parse(TARGETS)?
            .for_cuda(13)
            .and(ShipPlan::parse(TARGETS_CUDA_12)?.for_cuda(12)),
    };
    Ok(match oldest_driver {
        Some(text) => {
            let version = kiln::cuda::select::parse_cuda_version(text).ok_or_else(|| {
                kiln::cuda::Error::InvalidDriverList {
                    given: text.to_owned(),
                    item: text.to_owned(),
                }
            })?;
            plan.with_oldest_driver(version)
        }
        None => plan,
    })
}

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
