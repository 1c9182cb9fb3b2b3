//! Every kernel of the library served from its embedded image, through the
//! global cache as an application asks (`LIBRARY.get_kernel(kiln::global(), ..)`),
//! for GPUs served by an exact CUBIN, a compatible CUBIN and the PTX; nothing
//! compiled and NVRTC never loaded. The shipped image is committed, so this
//! holds on any build machine, with or without a CUDA toolchain.

use kiln::ArtifactKind;
use kiln::cache::Source;
use kiln::cuda::select::Selection;
use kiln::cuda::{Arch, Device};
use kiln_large_library::{LIBRARY, Program, kernels};

/// (device arch, the target that serves it, how).
const RUNS: [(&str, &str, Selection); 4] = [
    ("sm_75", "sm_75", Selection::ExactCubin),
    ("sm_90", "sm_90", Selection::ExactCubin),
    // No sm_87 CUBIN: the newest compatible one.
    ("sm_87", "sm_86", Selection::CompatibleCubin),
    // Newer than every CUBIN: the sm_75 PTX, for the driver to compile.
    ("sm_110", "sm_75", Selection::Ptx),
];

#[test]
fn every_kernel_is_served_from_the_embedded_image_for_every_kind_of_gpu() {
    let cache = kiln::global();
    let record = LIBRARY.record().expect("the build record parses");
    assert!(
        record.nvrtc().is_some(),
        "the shipped image records its NVRTC"
    );
    assert_eq!(record.cubin_targets().len(), 7, "{record}");
    for (arch, target, selection) in RUNS {
        let device = Device::new(arch.parse::<Arch>().expect("an arch"));
        for (program, kernel) in kernels() {
            let served = LIBRARY
                .get_kernel(cache, &device, program, kernel)
                .unwrap_or_else(|e| panic!("{kernel} of {program:?} for {arch}: {e}"));
            assert_eq!(served.target().to_string(), target, "{kernel} for {arch}");
            assert_eq!(served.selection(), selection, "{kernel} for {arch}");
            assert_eq!(served.hit().source(), Source::Image, "{kernel} for {arch}");
            assert_eq!(served.hit().name(), program.name());
            let kind = if selection == Selection::Ptx {
                ArtifactKind::Ptx
            } else {
                ArtifactKind::Cubin
            };
            let listed = served
                .hit()
                .artifacts()
                .iter()
                .any(|a| a.kind == kind && a.entry_points.contains(&kernel.as_str()));
            assert!(listed, "{kernel} is not an entry point of its {kind:?}");
        }
    }
    assert_eq!(cache.stats().compiles, 0);
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    assert!(!maps.contains("libnvrtc"), "NVRTC was loaded");
}

#[test]
fn a_kernel_the_library_does_not_have_is_no_such_kernel() {
    let device = Device::new("sm_90".parse::<Arch>().expect("an arch"));
    let error = LIBRARY
        .get_kernel(kiln::global(), &device, &Program::Unary, "uexp_f8")
        .expect_err("no f8 kernels");
    assert!(
        matches!(error, kiln::cuda::ServeError::NoSuchKernel { .. }),
        "{error}"
    );
    assert!(error.to_string().contains("uexp_f8"), "{error}");
}
