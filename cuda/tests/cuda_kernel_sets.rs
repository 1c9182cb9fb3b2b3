//! Kernel sets that differ by arch, and nvcc-style sources, through a real
//! NVRTC: Kiln's C headers and the CUDA runtime headers compile a `.cu` file
//! written for nvcc unchanged; every `extern "C"` kernel is found; a library
//! shipped with PTX for its lowest and newest targets serves, for a kernel
//! asked for by name, the best entry that holds it, and says when a kernel
//! does not exist for an arch (shipped with no toolchain, or compiled here).
//!
//! They need NVRTC and the CUDA runtime headers
//! (`scripts/install-cuda-wheels.sh` installs both), no GPU. Without them they
//! fail when `CI=true` and otherwise return early.

use kiln_core::build::Precompile;
use kiln_core::{ArtifactKind, Cache};
use kiln_cuda::library::Attempt;
use kiln_cuda::select::Selection;
use kiln_cuda::toolchain::SearchConfig;
use kiln_cuda::toolchain::{BuildRecord, CUDA_RUNTIME, ToolchainPolicy};
use kiln_cuda::{Arch, Device, Error, KernelLibrary, KernelRequest, ShipPlan, Toolchain};
use kiln_cuda::{CompileError, ServeError};
use kiln_image::{Image, Verification};

/// The local toolchain, with its CUDA runtime headers located.
fn toolchain() -> Option<Toolchain> {
    let local = Toolchain::local().and_then(|t| t.cuda_runtime().map(|_| t));
    kiln_test_support::ci::required(
        local,
        "NVRTC and the CUDA runtime headers (run scripts/install-cuda-wheels.sh)",
    )
}

/// A program written for nvcc: C headers, half and bf16, `cuda.h`'s version,
/// macro-generated kernels, bf16 ones from sm_80, and one C++ template kernel.
const PROGRAM: &str = r#"
#define _USE_MATH_DEFINES
#include <cuda.h>
#include <stdint.h>
#include <cstdint>
#include <stddef.h>
#include <limits.h>
#include <float.h>
#include <math.h>
#include <cmath>
#include <assert.h>
#include <stdio.h>
#include "cuda_fp16.h"
#include "cuda_bf16.h"

#if CUDA_VERSION < 12000
#error "CUDA_VERSION is not defined as nvcc defines it"
#endif
static_assert(sizeof(int64_t) == 8 && INT64_MAX == 9223372036854775807LL, "stdint.h");
static_assert(sizeof(std::uint32_t) == 4 && UINT32_MAX == 4294967295U, "cstdint");
static_assert(CHAR_BIT == 8 && INT_MIN < 0 && FLT_MAX > 1e38f, "limits.h, float.h");
static_assert(INFINITY > FLT_MAX && M_PI > 3.14 && M_SQRT1_2 < 0.71, "math.h");

#define OP(T, NAME, F)                                                         \
    extern "C" __global__ void NAME(size_t n, const T *x, T *y) {              \
        size_t i = blockIdx.x * blockDim.x + threadIdx.x;                      \
        if (i < n) y[i] = F;                                                   \
    }

OP(float, scale_f32, x[i] * (float)M_2_SQRTPI)
OP(double, sqrt_f64, std::sqrt(x[i]))
OP(__half, neg_f16, __hneg(x[i]))
OP(float, clamp_f32, std::isnan(x[i]) ? NAN : fminf(x[i], INFINITY))
#if __CUDA_ARCH__ >= 800
OP(__nv_bfloat16, neg_bf16, __hneg(x[i]))
#endif

template <typename T> __global__ void templated(T *x) { x[0] = T(1); }
template __global__ void templated<float>(float *);
"#;

const EVERYWHERE: [&str; 4] = ["scale_f32", "sqrt_f64", "neg_f16", "clamp_f32"];

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Program;

fn request(_: &Program, toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
    Ok(KernelRequest::new("nvcc_style", PROGRAM, arch)
        .nvcc_headers(toolchain)?
        .name_expression("templated<float>")
        .every_kernel())
}

fn arch(name: &str) -> Arch {
    name.parse().unwrap()
}

#[test]
fn an_nvcc_style_source_compiles_unchanged_and_every_extern_c_kernel_is_found() {
    let Some(toolchain) = toolchain() else { return };
    let compiler = toolchain.compiler().copied().unwrap();
    for (target, bf16) in [("sm_75", false), ("sm_80", true), ("sm_120", true)] {
        let request = request(&Program, &toolchain, arch(target)).unwrap();
        let compiled = compiler.compile(&request).unwrap();
        let mut expected = vec!["_Z9templatedIfEvPT_"];
        expected.extend(EVERYWHERE);
        if bf16 {
            expected.push("neg_bf16");
        }
        assert_eq!(compiled.entry_points, expected, "{target}");
    }
    // Without Kiln's C headers NVRTC cannot open stdint.h.
    let bare = KernelRequest::new("bare", PROGRAM, arch("sm_80"))
        .include_dir(toolchain.cuda_runtime().unwrap());
    let Err(CompileError::Compile { log, .. }) = compiler.compile(&bare) else {
        panic!("compiled without the C headers");
    };
    assert!(log.contains("cuda.h") || log.contains("stdint.h"), "{log}");
}

#[test]
fn the_key_covers_kilns_c_headers_and_every_kernel_but_not_for_other_requests() {
    let plain = KernelRequest::new("k", "extern \"C\" __global__ void k() {}", arch("sm_80"));
    let with_headers = plain.clone().c_headers();
    let every = plain.clone().every_kernel();
    let keys = [&plain, &with_headers, &every].map(|r| r.key().unwrap());
    assert_ne!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2]);
    assert_ne!(keys[1], keys[2]);
    // A header of Kiln's set replaced by the caller's changes the key.
    let replaced = with_headers
        .clone()
        .header("stdint.h", "typedef int int32_t;");
    assert_ne!(replaced.key().unwrap(), keys[1]);
}

/// Ships [`Program`] for sm_75, sm_80 and sm_90 with PTX for the lowest and the
/// newest: the image merged into a fresh cache, and the record.
fn shipped() -> Option<(Cache, BuildRecord, tempfile::TempDir)> {
    toolchain()?;
    let dir = tempfile::tempdir().unwrap();
    let mut plan = ShipPlan::parse("sm_75,sm_80,sm_90")
        .unwrap()
        .with_lowest_and_newest_ptx();
    let mut output = Vec::new();
    let report = Precompile::new("kernel-sets-test")
        .out_dir(dir.path())
        .output(&mut output)
        .run(|session| Ok(plan.precompile(session, &[Program], request)?))
        .unwrap();
    let output = String::from_utf8_lossy(&output);
    assert!(report.failed.is_empty(), "{output}");
    assert!(
        output.contains("cargo::rerun-if-env-changed=KILN_CUDA_RUNTIME_INCLUDE"),
        "{output}"
    );
    let record = plan.record().clone();
    assert!(record.to_string().contains(" ptx=sm_75,sm_90 "), "{record}");
    assert!(record.header_set(CUDA_RUNTIME).is_some(), "{record}");
    let cache = Cache::new();
    cache.merge_image(Image::open(&report.path, Verification::Full).unwrap());
    Some((cache, record, dir))
}

/// A library on `record` that cannot compile (no NVRTC here).
fn stripped(record: &BuildRecord) -> KernelLibrary<Program> {
    let no_nvrtc = kiln_cuda::toolchain::locate_nvrtc(&SearchConfig::empty()).unwrap_err();
    KernelLibrary::with_record(record.clone(), request)
        .with_policy(ToolchainPolicy::Shipped)
        .with_local_toolchain(Err(no_nvrtc))
}

#[test]
fn a_kernel_is_served_from_the_best_entry_that_holds_it() {
    let Some((cache, record, _dir)) = shipped() else {
        return;
    };
    let library = stripped(&record);
    let get = |device: &str, kernel: &str| {
        library.get_kernel(&cache, &Device::new(arch(device)), &Program, kernel)
    };
    // Newer than every CUBIN: the newest PTX holds every kernel.
    for kernel in EVERYWHERE.into_iter().chain(["neg_bf16"]) {
        let served = get("sm_100", kernel).unwrap();
        assert_eq!(served.selection(), Selection::Ptx, "{kernel}");
        assert_eq!(served.artifact().kind, ArtifactKind::Ptx);
        assert_eq!(served.artifact().target, arch("sm_90"));
    }
    // The exact CUBIN of sm_80 has the bf16 kernel; sm_86 runs it too.
    for device in ["sm_80", "sm_86", "sm_89"] {
        let served = get(device, "neg_bf16").unwrap();
        assert_eq!(served.target(), arch("sm_80"), "{device}");
        assert_eq!(served.artifact().kind, ArtifactKind::Cubin);
    }
    // sm_75's own build has no bf16 kernel: it does not exist there.
    let Err(error @ ServeError::NoSuchKernel { .. }) = get("sm_75", "neg_bf16") else {
        panic!("a kernel that does not exist for sm_75 was served");
    };
    let message = error.to_string();
    assert!(
        message.contains("neg_bf16 does not exist for sm_75"),
        "{message}"
    );
    assert!(message.contains("scale_f32"), "{message}");
    // A misspelt kernel on a shipped arch: the same answer.
    assert!(matches!(
        get("sm_90", "neg_bf17"),
        Err(ServeError::NoSuchKernel { .. })
    ));
}

#[test]
fn an_arch_whose_shipped_code_lacks_the_kernel_says_what_was_tried() {
    let Some((cache, record, _dir)) = shipped() else {
        return;
    };
    // sm_78 (a made-up 7.8): the sm_75 CUBIN runs there but has no bf16
    // kernel, and no compile is possible.
    let library = stripped(&record);
    let Err(ServeError::NotShipped { kernel, tried, .. }) =
        library.get_kernel(&cache, &Device::new(arch("sm_78")), &Program, "neg_bf16")
    else {
        panic!("served without the kernel");
    };
    assert_eq!(kernel, "neg_bf16 (of nvcc_style)");
    assert_eq!(
        tried.0.first(),
        Some(&Attempt::LacksKernel {
            target: arch("sm_75"),
            selection: Selection::CompatibleCubin
        })
    );
    assert!(
        tried
            .to_string()
            .contains("sm_75 compatible-cubin: does not hold the kernel"),
        "{tried}"
    );
    // The kernels that exist there are served from that same CUBIN.
    let served = library
        .get_kernel(&cache, &Device::new(arch("sm_78")), &Program, "scale_f32")
        .unwrap();
    assert_eq!(served.selection(), Selection::CompatibleCubin);
}

#[test]
fn a_compile_for_the_exact_arch_decides_whether_a_kernel_exists() {
    let Some(toolchain) = toolchain() else { return };
    let library = KernelLibrary::with_record(BuildRecord::default(), request)
        .with_policy(ToolchainPolicy::Shipped)
        .with_local_toolchain(Ok(toolchain));
    let cache = Cache::new();
    let served = library
        .get_kernel(&cache, &Device::new(arch("sm_86")), &Program, "neg_bf16")
        .unwrap();
    assert_eq!(served.selection(), Selection::Compiled);
    assert_eq!(served.artifact().target, arch("sm_86"));
    assert_eq!(served.artifact().kind, ArtifactKind::Cubin);
    let Err(ServeError::NoSuchKernel { built, .. }) =
        library.get_kernel(&cache, &Device::new(arch("sm_75")), &Program, "neg_bf16")
    else {
        panic!("a bf16 kernel was served for sm_75");
    };
    assert_eq!(built, "compiled");
    // Asked again, the answer is remembered per kernel.
    let again = library
        .get_kernel(&cache, &Device::new(arch("sm_86")), &Program, "neg_bf16")
        .unwrap();
    assert_eq!(again.hit().key(), served.hit().key());
    assert_eq!(library.stats().compiled, 1);
}

/// Calls of [`counted`], the request function of the memo tests.
static REQUESTS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// [`request`], counted.
fn counted(program: &Program, toolchain: &Toolchain, arch: Arch) -> Result<KernelRequest, Error> {
    REQUESTS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    request(program, toolchain, arch)
}

fn requests() -> usize {
    REQUESTS.load(std::sync::atomic::Ordering::SeqCst)
}

#[test]
fn the_first_call_for_another_kernel_of_a_program_builds_no_request_again() {
    let Some((cache, record, _dir)) = shipped() else {
        return;
    };
    let no_nvrtc = kiln_cuda::toolchain::locate_nvrtc(&SearchConfig::empty()).unwrap_err();
    let library = KernelLibrary::with_record(record.clone(), counted)
        .with_policy(ToolchainPolicy::Shipped)
        .with_local_toolchain(Err(no_nvrtc));
    let get = |device: &str, kernel: &str| {
        library.get_kernel(&cache, &Device::new(arch(device)), &Program, kernel)
    };
    let served = get("sm_90", "scale_f32").unwrap();
    assert_eq!(served.selection(), Selection::ExactCubin);
    let built = requests();
    assert!(built >= 1);
    // Every other kernel of the program, each asked for the first time: served
    // from the entry found, each an entry point of the artifact served.
    for kernel in ["sqrt_f64", "neg_f16", "clamp_f32", "neg_bf16"] {
        let served = get("sm_90", kernel).unwrap();
        assert_eq!(served.selection(), Selection::ExactCubin, "{kernel}");
        let listed = served
            .hit()
            .artifacts()
            .iter()
            .any(|a| a.kind == ArtifactKind::Cubin && a.entry_points.contains(&kernel));
        assert!(listed, "{kernel}");
    }
    // A kernel the exact CUBIN lacks is still proof that it does not exist.
    assert!(matches!(
        get("sm_90", "neg_bf17"),
        Err(ServeError::NoSuchKernel { .. })
    ));
    // The program's answer (any kernel) is remembered apart from the kernels':
    // no kernel is named "".
    let any = library
        .get(&cache, &Device::new(arch("sm_90")), &Program)
        .unwrap();
    assert_eq!(any.selection(), Selection::ExactCubin);
    assert!(matches!(
        get("sm_90", ""),
        Err(ServeError::NoSuchKernel { .. })
    ));
    assert_eq!(requests(), built, "a request was built again");
    // On sm_78 the compatible sm_75 CUBIN has scale_f32 but not neg_bf16, and
    // nothing else runs there: the memo changes no answer.
    assert_eq!(
        get("sm_78", "scale_f32").unwrap().selection(),
        Selection::CompatibleCubin
    );
    // The miss also looks for the sm_78 build in the tiers: one more request,
    // once.
    assert!(matches!(
        get("sm_78", "neg_bf16"),
        Err(ServeError::NotShipped { .. })
    ));
    let built = requests();
    assert!(matches!(
        get("sm_78", "neg_bf16"),
        Err(ServeError::NotShipped { .. })
    ));
    assert_eq!(
        get("sm_78", "sqrt_f64").unwrap().selection(),
        Selection::CompatibleCubin
    );
    assert_eq!(requests(), built, "a request was built again");
    // A definition changed: the world moved, so the next first call derives
    // again, and is answered the same.
    let before = cache.world();
    cache.define("an-unrelated-definition", kiln_core::Digest::of(b"v1"));
    cache.redefine("an-unrelated-definition", kiln_core::Digest::of(b"v2"));
    assert!(cache.world() > before);
    let served = get("sm_90", "neg_f16").unwrap();
    assert_eq!(served.selection(), Selection::ExactCubin);
    assert!(requests() > built, "the memo outlived its world");
}

#[test]
fn the_entry_compiled_for_one_kernel_serves_the_others_of_its_program() {
    let Some(toolchain) = toolchain() else { return };
    let library = KernelLibrary::with_record(BuildRecord::default(), request)
        .with_policy(ToolchainPolicy::Shipped)
        .with_local_toolchain(Ok(toolchain));
    let cache = Cache::new();
    let device = Device::new(arch("sm_86"));
    let first = library
        .get_kernel(&cache, &device, &Program, "scale_f32")
        .unwrap();
    assert_eq!(first.selection(), Selection::Compiled);
    for kernel in ["sqrt_f64", "neg_f16", "neg_bf16"] {
        let served = library
            .get_kernel(&cache, &device, &Program, kernel)
            .unwrap();
        assert_eq!(served.selection(), Selection::Compiled, "{kernel}");
        assert_eq!(served.hit().key(), first.hit().key(), "{kernel}");
    }
    assert!(matches!(
        library.get_kernel(&cache, &device, &Program, "neg_bf17"),
        Err(ServeError::NoSuchKernel { .. })
    ));
    assert_eq!(cache.stats().compiles, 1);
}

/// The image the precompile block of [`shipped`] wrote in `dir`, as `kiln
/// kernels` reads an image: each entry's owner, key, name and artifacts.
fn image_info(dir: &std::path::Path) -> kiln_cuda::library::images::ImageInfo {
    use kiln_cuda::library::images::{EntryInfo, ImageInfo};
    let path = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "kimg"))
        .expect("the block's image");
    let image = Image::open(&path, Verification::Full).unwrap();
    let mut info = ImageInfo::new(path.display().to_string(), "kernel-sets-test");
    for entry in image.entries() {
        let entry = entry.unwrap();
        let mut found = EntryInfo::new(
            entry.owner(),
            entry.owner_label(),
            entry.key(),
            entry.name(),
        );
        for artifact in entry.artifacts() {
            found = found.with_artifact(artifact.kind(), artifact.entry_points());
        }
        info.push(found);
    }
    info
}

/// What `KernelLibrary::kernels` lists, what the report of the images alone
/// says, and what `get_kernel` serves agree for every kernel, on GPUs older than
/// every target, shipped, between and newer, with drivers unknown, too old and
/// new enough: a kernel that exists only from sm_80 included (served from the
/// newest PTX, absent from sm_75, missing where only the sm_75 code runs).
#[test]
fn the_listing_and_the_images_report_agree_with_get_kernel_everywhere() {
    use kiln_cuda::library::KernelOutcome;
    use kiln_cuda::library::images::ImageSet;
    let Some((cache, record, dir)) = shipped() else {
        return;
    };
    let library = stripped(&record);
    let set = ImageSet::new(vec![image_info(dir.path())]);
    assert_eq!(set.libraries().len(), 1);
    // The record rebuilt from the image is the one the build recorded, but for
    // the header digests (which only key requests).
    let rebuilt = set.libraries()[0].record();
    for (ours, built) in rebuilt.toolchains().iter().zip(record.toolchains()) {
        assert_eq!(ours.nvrtc(), built.nvrtc());
        assert_eq!(ours.cubin_targets(), built.cubin_targets());
        assert_eq!(ours.ptx_targets(), built.ptx_targets());
    }
    let mut seen = std::collections::BTreeSet::new();
    for gpu in [
        "sm_70", "sm_75", "sm_78", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120",
    ] {
        for driver in [None, Some(12080), Some(13000)] {
            let device = match driver {
                Some(driver) => Device::new(arch(gpu)).with_driver(driver),
                None => Device::new(arch(gpu)),
            };
            let listed = library.kernels(&cache, &device, &[Program]).unwrap();
            let reported = set.serve(&device);
            let names: Vec<Option<&str>> = listed.iter().map(|l| l.kernel.as_deref()).collect();
            let mut expected: Vec<Option<&str>> = EVERYWHERE.map(Some).to_vec();
            expected.extend([Some("_Z9templatedIfEvPT_"), Some("neg_bf16")]);
            expected.sort();
            assert_eq!(names, expected, "{gpu} {driver:?}");
            assert_eq!(reported.len(), listed.len());
            for (listed, reported) in listed.iter().zip(&reported) {
                let kernel = listed.kernel.as_deref().unwrap();
                let cell = format!("{kernel} on {gpu} {driver:?}");
                assert_eq!(listed.program, "nvcc_style");
                assert_eq!(reported.kernel, Some(kernel), "{cell}");
                assert_eq!(reported.program, "nvcc_style", "{cell}");
                assert_eq!(reported.outcome, listed.outcome, "{cell}");
                let served = library.get_kernel(&cache, &device, &Program, kernel);
                match (&listed.outcome, served) {
                    (
                        KernelOutcome::Served {
                            selection,
                            artifact,
                        },
                        Ok(served),
                    ) => {
                        assert_eq!(served.selection(), *selection, "{cell}");
                        assert_eq!(served.artifact(), artifact, "{cell}");
                        seen.insert(selection.as_str());
                    }
                    (KernelOutcome::NotForArch { .. }, Err(ServeError::NoSuchKernel { .. })) => {
                        seen.insert("not for arch");
                    }
                    (
                        KernelOutcome::Missing { tried },
                        Err(ServeError::NotShipped { tried: t, .. }),
                    ) => {
                        assert_eq!(tried, &t, "{cell}");
                        seen.insert("missing");
                    }
                    (outcome, served) => panic!("{cell}: listed {outcome}, served {served:?}"),
                }
            }
        }
    }
    // Every kind of answer was met.
    assert_eq!(
        seen.into_iter().collect::<Vec<_>>(),
        [
            "compatible-cubin",
            "exact-cubin",
            "missing",
            "not for arch",
            "ptx"
        ]
    );
    // Listing counts no selection and remembers no answer.
    let before = library.stats();
    let device = Device::new(arch("sm_100"));
    library.kernels(&cache, &device, &[Program]).unwrap();
    assert_eq!(library.stats(), before);
}
