//! The CUDA library of the library author's guide (`docs/library-author.md`)
//! run for real (the guide's block is compiled
//! only): the image its build script shipped serves every device arch with
//! no toolchain, from the toolchain the build recorded.
//!
//! Needs NVRTC when the build script runs (`scripts/install-cuda-wheels.sh`),
//! no GPU. Without it the build ships nothing, and this test fails when
//! `CI=true` and otherwise returns early.

use kiln::cache::Source;
use kiln::cuda::{
    Device, KernelLibrary, ToolchainError, select::Selection, toolchain::SearchConfig,
};
use kiln_readme::cuda_catalogue::{self as catalogue, Spec};

kiln::include_image!("my-cuda-kernels.kimg");

/// The guide's `src/lib.rs`.
static KERNELS: KernelLibrary<Spec> =
    KernelLibrary::new(env!("KILN_CUDA_BUILD"), catalogue::request);

#[test]
fn the_readme_cuda_library_serves_its_shipped_kernels_without_a_toolchain() {
    let record = KERNELS.record().unwrap();
    let built = record
        .nvrtc()
        .ok_or("the build script found no NVRTC, so it shipped nothing");
    if kiln_test_support::ci::required(built, "NVRTC at build time").is_none() {
        return;
    }
    // The same library, with no local toolchain at all: every kernel below
    // must come from the image.
    let no_nvrtc: ToolchainError =
        kiln::cuda::toolchain::locate_nvrtc(&SearchConfig::empty()).unwrap_err();
    let library = KernelLibrary::new(env!("KILN_CUDA_BUILD"), catalogue::request)
        .with_local_toolchain(Err(no_nvrtc));
    let cache = kiln::global();
    for (arch, selection, target) in [
        ("sm_75", Selection::ExactCubin, "sm_75"),
        ("sm_86", Selection::ExactCubin, "sm_86"),
        ("sm_87", Selection::CompatibleCubin, "sm_86"),
        ("sm_90", Selection::ExactCubin, "sm_90"),
        ("sm_120", Selection::ExactCubin, "sm_120"),
    ] {
        let device = Device::new(arch.parse().unwrap());
        for spec in catalogue::common() {
            let served = library.get(cache, &device, &spec).unwrap();
            assert_eq!(served.selection(), selection, "{arch} {spec:?}");
            assert_eq!(served.target().to_string(), target, "{arch} {spec:?}");
            assert_eq!(served.hit().source(), Source::Image, "{arch} {spec:?}");
        }
    }
    // The guide's own static, as an application calls it.
    let device = Device::new("sm_86".parse().unwrap());
    let served = KERNELS
        .get(cache, &device, &Spec { dtype: "float" })
        .unwrap();
    assert_eq!(served.selection(), Selection::ExactCubin);
    assert_eq!(served.hit().source(), Source::Image);
}
