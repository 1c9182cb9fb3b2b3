//! Kiln's proc macros. Use them through the `kiln` facade
//! (`kiln::include_image!`); this crate holds no runtime logic.
//!
//! # `include_image!`
//!
//! Embeds a Kiln image in the program and registers it, so that the first
//! use of the global cache merges it:
//!
//! ```ignore
//! // In a library whose build script wrote `$OUT_DIR/my-kernels.kimg`
//! // with `kiln::build::Precompile::new("my-kernels")`:
//! kiln::include_image!("my-kernels.kimg");
//! ```
//!
//! - **Path.** Absolute, or relative to `OUT_DIR` when the file is there,
//!   else to the crate root (`CARGO_MANIFEST_DIR`).
//! - **Checked at compile time.** The macro reads the file and runs
//!   `kiln_image` full verification (header, structure, every payload
//!   checksum). A missing or bad image is a `compile_error!` that says which
//!   check failed, so a program never embeds an image it could not use.
//! - **Trusted at run time if unchanged.** The expansion also carries the
//!   verified image's fixed header (which holds the BLAKE3 checksum of
//!   everything after it) as a byte-string literal. At run time the image is
//!   opened without checking it again only if the embedded bytes start with
//!   that header; if the file changed between the macro's read and
//!   `include_bytes!`'s, a warning is logged and the image is opened with
//!   structural checks (index now, each payload's checksum on first use).
//! - **Embedded aligned.** The bytes are an `include_bytes!` of the absolute
//!   path, placed in a static aligned to 64 bytes (the image reader needs at
//!   least 16) and borrowed from there without copying.
//! - **Rebuilt when the image changes.** `include_bytes!` makes cargo track
//!   the file (`proc_macro::tracked_path` is not stable), so a new image from
//!   the build script recompiles the crate, and the macro verifies it again.
//! - **Registered before `main`** with `inventory`: the constructor only
//!   links a `&'static` descriptor into a list (no I/O, nothing that panics).
//!
//! The expansion names its runtime items through a path: `::kiln` by
//! default (the facade re-exports them in a hidden `__private` module). A
//! crate that depends on `kiln-core` and `kiln-macros` without the facade
//! names that crate instead:
//!
//! ```ignore
//! kiln_macros::include_image!(crate = ::kiln_core, "my-kernels.kimg");
//! ```

mod args;
mod expand;
mod locate;

use proc_macro::TokenStream;

/// Embeds a Kiln image, verified at compile time, and registers it for the
/// global cache. See the [crate documentation](crate).
#[proc_macro]
pub fn include_image(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as args::Args);
    let search = locate::SearchDirs::from_env();
    let crate_name =
        std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "an unnamed crate".to_owned());
    expand::include_image(&args, &search, &crate_name).into()
}
