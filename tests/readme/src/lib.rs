//! The README's code, and the facade's main path, compiled and run as doc
//! tests (`cargo test --doc -p kiln-readme`).
//!
//! Their examples embed `my-kernels.kimg` and `my-cuda-kernels.kimg` with
//! `include_image!`, which needs the images at compile time: this package's
//! build script is the README's two (sharing `src/catalogue.rs` and
//! `src/cuda_catalogue.rs` as the README shows), and cargo sets `OUT_DIR`
//! (and the CUDA library's `KILN_CUDA_BUILD`) for the doc tests of a package
//! with a build script. Each example that runs asserts that its kernel comes
//! from that image, so an example whose owners or keys drift from the build
//! script's fails. The CUDA examples are compiled only (`no_run`: they need
//! NVRTC when the build script runs, and the facade's a GPU);
//! `tests/cuda_library.rs` runs the README's library.

/// The shared module of the README's library, as its build script uses it.
pub mod catalogue;

/// The shared module of the README's CUDA library, as its build script uses
/// it.
pub mod cuda_catalogue;

/// The blocks of `README.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;

/// The main path of the facade's crate documentation (`src/main-path.md`).
#[cfg(doctest)]
#[doc = include_str!("../../../src/main-path.md")]
pub struct FacadeMainPath;
