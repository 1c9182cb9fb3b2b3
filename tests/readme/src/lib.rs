//! The Rust blocks of the README, of every guide in `docs/` and of the
//! facade's main path, compiled and run as doc tests (`cargo test --doc -p
//! kiln-readme`).
//!
//! Their examples embed `my-kernels.kimg` and `my-cuda-kernels.kimg` with
//! `include_image!`, which needs the images at compile time: this package's
//! build script is the two of the README and of the library author's guide
//! (`docs/library-author.md`, sharing `src/catalogue.rs` and
//! `src/cuda_catalogue.rs` as they show), and cargo sets `OUT_DIR`
//! (and the CUDA library's `KILN_CUDA_BUILD`) for the doc tests of a package
//! with a build script. Each example that runs asserts that its kernel comes
//! from that image, so an example whose owners or keys drift from the build
//! script's fails. The CUDA examples are compiled only (`no_run`: they need
//! NVRTC when the build script runs, and the facade's a GPU);
//! `tests/cuda_library.rs` runs the guide's CUDA library.

/// The shared module of the README's library, as its build script uses it.
pub mod catalogue;

/// The shared module of the guide's CUDA library, as its build script uses
/// it.
pub mod cuda_catalogue;

/// The blocks of `README.md`.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct Readme;

/// Every guide in `docs/`, each a doc-tested item ([`GUIDES`] names them,
/// and a test checks that none is left out).
macro_rules! guides {
    ($($item:ident = $file:literal),* $(,)?) => {
        $(
            #[cfg(doctest)]
            #[doc = include_str!(concat!("../../../docs/", $file))]
            pub struct $item;
        )*
        /// The files of `docs/` whose blocks are doc tests.
        pub const GUIDES: &[&str] = &[$($file),*];
    };
}

guides! {
    LibraryAuthor = "library-author.md",
    NvccKernels = "nvcc-kernels.md",
    Shipping = "shipping.md",
    Operator = "operator.md",
    Switches = "switches.md",
    KilnTool = "kiln-tool.md",
    Decisions = "decisions.md",
}

/// The main path of the facade's crate documentation (`src/main-path.md`).
#[cfg(doctest)]
#[doc = include_str!("../../../src/main-path.md")]
pub struct FacadeMainPath;
