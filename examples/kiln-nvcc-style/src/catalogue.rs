//! What the library compiles, and how: shared by the library and its build
//! script (`#[path]`), so that both derive the same owners and keys.
//!
//! Each program is a `.cu` file of `kernels/` exactly as nvcc would compile it;
//! the request adds what NVRTC lacks ([`KernelRequest::nvcc_headers`]: Kiln's C
//! headers and the CUDA runtime headers of the toolchain) and asks for every
//! `extern "C"` kernel ([`KernelRequest::every_kernel`]), so no kernel is listed
//! by hand.

use kiln::cuda::{Arch, KernelRequest, Toolchain};

/// The archs the build script ships an NVRTC 13 CUBIN for: the library author's
/// guide's (`docs/library-author.md`), Turing
/// to Blackwell. The lowest and the newest also ship their PTX: the newest PTX
/// holds the kernels that exist only on newer GPUs (bf16, fp8), for a GPU
/// newer than every CUBIN.
pub const TARGETS: &str = "sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// The archs the build script ships an NVRTC 12 CUBIN for: CUDA 12 drivers on
/// every GPU from Pascal (the f16 kernels need sm_53 or newer), and Pascal and
/// Volta on any driver. The lowest and the newest also ship their PTX.
pub const TARGETS_CUDA_12: &str = "sm_60,sm_70,sm_75,sm_80,sm_86,sm_89,sm_90,sm_100,sm_120";

/// One `.cu` file of the library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Program {
    /// `kernels/unary.cu`: element-wise ops over f32, f64, f16, i64; bf16 from sm_80.
    Unary,
    /// `kernels/cast.cu`: casts; bf16 ones from sm_80, fp8 ones from sm_89.
    Cast,
    /// `kernels/reduce.cu`: row reductions; bf16 from sm_80.
    Reduce,
}

/// A kernel of a program, and the oldest arch it exists on (`None`: every arch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernel {
    /// The `extern "C"` name.
    pub name: &'static str,
    /// The compute capability (major, minor) from which the source defines it.
    pub since: Option<(u32, u32)>,
}

const fn every(name: &'static str) -> Kernel {
    Kernel { name, since: None }
}

const fn since(name: &'static str, major: u32, minor: u32) -> Kernel {
    Kernel {
        name,
        since: Some((major, minor)),
    }
}

const UNARY: &[Kernel] = &[
    every("ugelu_erf_f32"),
    every("ugelu_f32"),
    every("uexp_f64"),
    every("uneg_f16"),
    every("ugelu_f16"),
    every("uabs_i64"),
    since("uneg_bf16", 8, 0),
    since("ugelu_bf16", 8, 0),
];

const CAST: &[Kernel] = &[
    every("cast_f32_f16"),
    every("cast_f16_f32"),
    every("cast_u8_f32"),
    every("cast_f32_u32"),
    since("cast_f32_bf16", 8, 0),
    since("cast_bf16_f32", 8, 0),
    since("cast_f32_f8e4m3", 8, 9),
    since("cast_f8e4m3_f32", 8, 9),
];

const REDUCE: &[Kernel] = &[
    every("fast_max_f32"),
    every("fast_max_f64"),
    every("fast_max_i32"),
    every("fast_max_i64"),
    every("softmax_f32"),
    since("fast_max_bf16", 8, 0),
];

impl Program {
    /// Every program.
    pub const ALL: [Program; 3] = [Program::Unary, Program::Cast, Program::Reduce];

    /// The request's name.
    pub fn name(self) -> &'static str {
        match self {
            Program::Unary => "unary",
            Program::Cast => "cast",
            Program::Reduce => "reduce",
        }
    }

    /// The `.cu` file, as written for nvcc.
    pub fn source(self) -> &'static str {
        match self {
            Program::Unary => include_str!("../kernels/unary.cu"),
            Program::Cast => include_str!("../kernels/cast.cu"),
            Program::Reduce => include_str!("../kernels/reduce.cu"),
        }
    }

    /// Its path below the package, for the build script's rerun rules.
    pub fn path(self) -> &'static str {
        match self {
            Program::Unary => "kernels/unary.cu",
            Program::Cast => "kernels/cast.cu",
            Program::Reduce => "kernels/reduce.cu",
        }
    }

    /// The kernels the source defines, with the arch each exists from: what the
    /// library states, and what the tests check Kiln found.
    pub fn kernels(self) -> &'static [Kernel] {
        match self {
            Program::Unary => UNARY,
            Program::Cast => CAST,
            Program::Reduce => REDUCE,
        }
    }
}

impl Kernel {
    /// Whether the kernel exists on a GPU of `arch`.
    pub fn exists_on(&self, arch: Arch) -> bool {
        self.since
            .is_none_or(|since| (arch.major(), arch.minor()) >= since)
    }
}

/// The compile request of `program` for `arch` under `toolchain` (the recorded
/// one when looking up shipped entries: the runtime headers by their recorded
/// digest, nothing read; this machine's when compiling).
///
/// # Errors
/// When the toolchain has no CUDA runtime headers (neither recorded nor found).
pub fn request(
    program: &Program,
    toolchain: &Toolchain,
    arch: Arch,
) -> Result<KernelRequest, kiln::cuda::Error> {
    Ok(KernelRequest::new(program.name(), program.source(), arch)
        .nvcc_headers(toolchain)?
        .every_kernel())
}
