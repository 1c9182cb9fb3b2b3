//! The expansion of `include_image!`: verify the image now, embed it aligned,
//! register it.

use std::path::PathBuf;

use kiln_image::header::HEADER_LEN;
use kiln_image::{Image, Verification};
use proc_macro2::{Literal, TokenStream};
use quote::{quote, quote_spanned};

use crate::args::Args;
use crate::locate::SearchDirs;

/// An image file that passed full verification while the macro expanded.
#[derive(Debug)]
pub(crate) struct CheckedImage {
    /// Its absolute path, as `include_bytes!` will read it.
    pub(crate) path: String,
    /// Its length in bytes.
    pub(crate) len: usize,
    /// Its fixed header, as verified: the first `HEADER_LEN` bytes, which
    /// hold the BLAKE3 checksum of the rest. At run time the embedded bytes
    /// are trusted only if they start with it.
    pub(crate) header: [u8; HEADER_LEN],
}

/// Finds the image named `name`, reads it and runs `Verification::Full`
/// on it (header, structure and every payload checksum).
///
/// The error is the message of the `compile_error!`: what failed and where.
pub(crate) fn check_image(name: &str, search: &SearchDirs) -> Result<CheckedImage, String> {
    let path: PathBuf = search.locate(name)?;
    let bytes =
        std::fs::read(&path).map_err(|err| format!("cannot read {}: {err}", path.display()))?;
    Image::from_bytes(&bytes, Verification::Full)
        .map_err(|err| format!("{} failed verification: {err}", path.display()))?;
    let path = path
        .to_str()
        .ok_or_else(|| {
            format!(
                "{} is not valid UTF-8, which include_bytes! needs",
                path.display()
            )
        })?
        .to_owned();
    let header = *bytes.first_chunk::<HEADER_LEN>().ok_or_else(|| {
        format!("{path} is shorter than an image header although it passed verification")
    })?;
    Ok(CheckedImage {
        path,
        len: bytes.len(),
        header,
    })
}

/// The tokens `include_image!` expands to: a `compile_error!` naming the
/// failed check, or the embedded, registered image.
pub(crate) fn include_image(args: &Args, search: &SearchDirs, crate_name: &str) -> TokenStream {
    let name = args.path.value();
    match check_image(&name, search) {
        Ok(image) => embed(args, &image, crate_name),
        Err(message) => {
            let message = format!("kiln image {name:?}: {message}");
            quote_spanned!(args.path.span()=> ::core::compile_error!(#message);)
        }
    }
}

/// Embeds `image` in a 64-byte aligned static and registers it, with the
/// header that was verified.
///
/// `include_bytes!` of the absolute path is what makes cargo rebuild the
/// crate when the image changes (`proc_macro::tracked_path` is unstable).
/// It reads the file a second time, so what it embeds is tied to what was
/// verified in two ways: the array length is part of the static's type
/// (bytes that changed length fail to compile), and the verified header is
/// embedded as a literal, which the runtime compares with the embedded
/// bytes' header before trusting them (`EmbeddedImage::open`).
fn embed(args: &Args, image: &CheckedImage, crate_name: &str) -> TokenStream {
    let runtime = &args.runtime;
    let name = args.path.value();
    let path = &image.path;
    let len = Literal::usize_unsuffixed(image.len);
    let header = Literal::byte_string(&image.header);
    quote! {
        const _: () = {
            static KILN_IMAGE_BYTES: #runtime::__private::AlignedBytes<#len> =
                #runtime::__private::AlignedBytes(*::core::include_bytes!(#path));
            #runtime::__private::inventory::submit! {
                // SAFETY: the byte string is the header of the bytes that passed
                // `Verification::Full` while this macro expanded, and
                // `KILN_IMAGE_BYTES` is the same file (same length: the
                // array type checks it), read again by `include_bytes!`; the
                // runtime trusts it only if its header is still this one.
                unsafe {
                    #runtime::__private::EmbeddedImage::verified_at_compile_time(
                        #crate_name,
                        #name,
                        KILN_IMAGE_BYTES.as_slice(),
                        #header,
                    )
                }
            }
        };
    }
}

#[cfg(test)]
mod tests;
