//! A kernel library of real size, for benchmarks and tests at scale: 608
//! generated `extern "C"` kernels in 11 programs (element-wise maps over eight
//! element types, casts, indexing, reductions, convolutions, sorts, rotary
//! embeddings; see [`Program`]), shipped for seven archs (`sm_75` to
//! `sm_120`) plus the `sm_75` PTX, as a framework's kernel files are.
//!
//! Its build script precompiles every program for every target
//! ([`TARGETS`]); the shipped image (`kiln-shipped/kiln-large-library.kship`)
//! holds every entry, so no build compiles anything. The library embeds the
//! image (`include_image!`) and serves it through one
//! [`KernelLibrary`] ([`LIBRARY`]), keyed by [`Program`]; [`kernels`] lists
//! every (program, kernel) pair, each of which exists on every arch.
//!
//! ```no_run
//! use kiln::cuda::{Arch, Device};
//!
//! let device = Device::new("sm_90".parse::<Arch>()?);
//! for (program, kernel) in kiln_large_library::kernels() {
//!     let served = kiln_large_library::LIBRARY.get_kernel(kiln::global(), &device, program, kernel)?;
//!     assert_eq!(served.target(), device.arch()); // each from its exact-arch CUBIN
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod generate;

use std::sync::OnceLock;

pub use generate::{
    DEFINITION, GENERATOR_VERSION, Generated, HEADER, HEADER_NAME, Program, TARGETS, request,
};

use kiln::cuda::KernelLibrary;

kiln::include_image!("kiln-large-library.kimg");

/// The library's kernels: the shipped ones under the toolchain its build
/// recorded, the others compiled here (a process with NVRTC).
pub static LIBRARY: KernelLibrary<Program> =
    KernelLibrary::new(env!("KILN_CUDA_BUILD"), generate::request);

/// Every (program, kernel) pair of the library, program by program in
/// [`Program::ALL`] order, each program's kernels in source order.
pub fn kernels() -> &'static [(Program, String)] {
    static ALL: OnceLock<Vec<(Program, String)>> = OnceLock::new();
    ALL.get_or_init(|| {
        Program::ALL
            .iter()
            .flat_map(|&program| {
                program
                    .kernels()
                    .iter()
                    .map(move |kernel| (program, kernel.clone()))
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kernel_is_named_once_and_defined_by_its_program() {
        let all = kernels();
        assert_eq!(all.len(), 608);
        let mut names: Vec<&str> = all.iter().map(|(_, k)| k.as_str()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), all.len(), "a kernel name is used twice");
        for (program, kernel) in all {
            let line = format!(", {kernel})\n");
            assert_eq!(
                program.source().matches(&line).count(),
                1,
                "{kernel} is not instantiated once in {program:?}"
            );
        }
        for program in Program::ALL {
            assert!(program.source().starts_with("#include \"kiln_large.cuh\""));
        }
    }
}
