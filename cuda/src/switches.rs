//! kiln-cuda's `KILN_*` switches, declared with kiln-core
//! ([`Switch`](kiln_core::settings::Switch)) so that they are listed in the
//! switch table and by `kiln settings`, and classed as run-time or
//! build-time with the others. Their values are read from the process's
//! one reading of the variables
//! ([`Settings::process`](kiln_core::settings::Settings::process)), or a
//! precompile block's ([`Session::env`](kiln_core::build::Session::env)).

use kiln_core::settings::{Kind, Phase, Switch};

use crate::ship::{CUDA_ARCHS, CUDA_DRIVERS};
use crate::toolchain::STRICT_TOOLCHAIN;
use crate::toolchain::locate::{CCCL_INCLUDE, CUDA_RUNTIME_INCLUDE, NVRTC};

inventory::submit! {
    Switch::new(NVRTC, "cuda", Phase::BuildTime, Kind::Path)
        .default_text("searched")
        .doc("use exactly this NVRTC library file (otherwise: `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`, the loader path, then the wheel in any Python site-packages); looked for only to compile, i.e. on a kernel no image serves; in a plan of several toolchains it serves the one of its CUDA major")
}
inventory::submit! {
    Switch::new("KILN_NVRTC_<major>", "cuda", Phase::BuildTime, Kind::PerMajor)
        .default_text("searched")
        .doc("the NVRTC of one CUDA major (`KILN_NVRTC_12=/path/libnvrtc.so.12`), for a plan's toolchain of that major")
}
inventory::submit! {
    Switch::new(CCCL_INCLUDE, "cuda", Phase::BuildTime, Kind::Path)
        .default_text("searched")
        .doc("the CCCL (CUB) headers for kernels that need them, when compiling")
}
inventory::submit! {
    Switch::new("KILN_CCCL_INCLUDE_<major>", "cuda", Phase::BuildTime, Kind::PerMajor)
        .default_text("searched")
        .doc("the CCCL headers of one CUDA major, for a plan's toolchain of that major")
}
inventory::submit! {
    Switch::new(CUDA_RUNTIME_INCLUDE, "cuda", Phase::BuildTime, Kind::Path)
        .default_text("searched")
        .doc("the CUDA runtime headers (`cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`) for kernels that include them, when compiling (otherwise: the toolkits above, then the `nvidia-cuda-runtime` wheel)")
}
inventory::submit! {
    Switch::new("KILN_CUDA_RUNTIME_INCLUDE_<major>", "cuda", Phase::BuildTime, Kind::PerMajor)
        .default_text("searched")
        .doc("the CUDA runtime headers of one CUDA major, for a plan's toolchain of that major")
}
inventory::submit! {
    Switch::new(STRICT_TOOLCHAIN, "cuda", Phase::RunTime, Kind::Flag(false))
        .default_text("off")
        .doc("serve a shipped kernel only when this machine's NVRTC release and headers are the ones it was built with (or are not installed); otherwise compile it here. Default: a shipped kernel is valid code for its arch and is served whatever toolchain is, or is not, installed. Kernels compiled at run time (memory, disk and remote tiers) always name the local compiler and headers")
}
inventory::submit! {
    Switch::new(CUDA_ARCHS, "cuda", Phase::BuildTime, Kind::Text)
        .default_text("every arch shipped")
        .doc("read by every kernel library's `ShipPlan`: the GPUs the application runs on (`sm_86,sm_90`); each library embeds per GPU (and per driver family) the entry that serves it best, and PTX only for a GPU no CUBIN runs on; `sm_86,sm_90,ptx` also keeps the plan's PTX for every other GPU. When what is kept leaves known GPUs with no code, each block's summary line names them. Such a build is not for shipping")
}
inventory::submit! {
    Switch::new(CUDA_DRIVERS, "cuda", Phase::BuildTime, Kind::Text)
        .default_text("every driver shipped")
        .doc("like `KILN_CUDA_ARCHS`: the drivers the application runs on, as CUDA versions each from that one on within its major (`13`: R580+; `12.2`: R535 to R575; `12,13`: both); each library embeds only what those drivers load (with `13`, CUDA 12 code only where it is the only code, sm_50 to sm_72)")
}
