//! Kiln's proc macro, [`include_image!`]. Use it through the `kiln` facade
//! (`kiln::include_image!`); this crate holds no runtime logic.

mod args;
mod expand;
mod locate;

use proc_macro::TokenStream;

/// Embeds a Kiln image, verified at compile time, and registers it for the
/// global cache, so that the first use of `kiln::global()` merges it.
///
/// # Syntax
///
/// ```text
/// include_image!("PATH")
/// include_image!(crate = RUNTIME, "PATH")
/// ```
///
/// ```text
/// // A library whose build script wrote `$OUT_DIR/my-kernels.kimg` with
/// // `kiln::build::Precompile::new("my-kernels")`:
/// kiln::include_image!("my-kernels.kimg");
/// kiln::include_image!("/opt/images/my-kernels.kimg");
/// // A crate depending on kiln-core and kiln-macros, not on the facade:
/// kiln_macros::include_image!(crate = ::kiln_core, "my-kernels.kimg");
/// ```
///
/// - **`PATH`**, a string literal: absolute, or relative to `OUT_DIR` when
///   the file is there, else to the crate root (`CARGO_MANIFEST_DIR`). A
///   trailing comma is allowed; anything else is a compile error.
/// - **`crate = RUNTIME,`** (optional, first): the path of the crate whose
///   hidden `__private` module holds the runtime items the expansion names
///   (`AlignedBytes`, `EmbeddedImage`, `inventory`). `::kiln` by default,
///   which re-exports them; `::kiln_core` for a crate that depends on
///   `kiln-core` without the facade.
/// - **Where:** at item level (it expands to a `static` and an
///   `inventory::submit!`), any number of times per crate.
///
/// # What it checks and emits
///
/// - **Checked at compile time.** The macro reads the file and runs
///   `kiln_image` full verification (header, structure, every payload
///   checksum). A missing or bad image is a `compile_error!` that says which
///   check failed, so a program never embeds an image it could not use.
/// - **Trusted at run time if unchanged.** The expansion also carries the
///   verified image's fixed header (which holds the BLAKE3 checksum of
///   everything after it) as a byte-string literal. At run time the image is
///   opened without checking it again only if the embedded bytes start with
///   that header; if the file changed between the macro's read and
///   `include_bytes!`'s, a warning is logged and the image is opened with
///   structural checks (index now, each payload's checksum on first use).
/// - **Embedded aligned.** The bytes are an `include_bytes!` of the absolute
///   path, placed in a static aligned to 64 bytes (so every payload is
///   64-byte aligned, as from every tier) and borrowed from there without
///   copying.
/// - **Rebuilt when the image changes.** `include_bytes!` makes cargo track
///   the file (`proc_macro::tracked_path` is not stable), so a new image from
///   the build script recompiles the crate, and the macro verifies it again.
/// - **Registered before `main`** with `inventory`: the constructor only
///   links a `&'static` descriptor into a list (no I/O, nothing that panics).
#[proc_macro]
pub fn include_image(input: TokenStream) -> TokenStream {
    let args = syn::parse_macro_input!(input as args::Args);
    let search = locate::SearchDirs::from_env();
    let crate_name =
        std::env::var("CARGO_PKG_NAME").unwrap_or_else(|_| "an unnamed crate".to_owned());
    expand::include_image(&args, &search, &crate_name).into()
}
