//! Where images come from: those embedded by `include_image!` and registered
//! with [`inventory`], and `*.kimg` files in the directories of
//! `KILN_IMAGE_PATH`.
//!
//! Registration happens before `main` and does nothing but link a `&'static`
//! [`EmbeddedImage`] into a list: no I/O, no allocation, nothing that can
//! panic. Everything else (opening, verifying, merging) waits for the first
//! use of [`crate::global()`].
//!
//! A registration lives in the crate that invoked `include_image!`. The
//! linker keeps it only if that crate is linked into the program, which is
//! the case as soon as the program uses any of its items; a crate that is a
//! dependency and nothing else may need `use that_crate as _;`.

use std::fmt;
use std::path::{Path, PathBuf};

use kiln_image::{Image, ImageError, Verification};

/// File name extension of image files searched in `KILN_IMAGE_PATH`.
pub const IMAGE_EXTENSION: &str = "kimg";

/// An image embedded in the program, registered before `main`.
///
/// `include_image!` creates one per invocation; its bytes live in a static
/// aligned to 64 bytes.
#[derive(Debug)]
pub struct EmbeddedImage {
    crate_name: &'static str,
    name: &'static str,
    bytes: &'static [u8],
    verified: bool,
}

inventory::collect!(EmbeddedImage);

impl EmbeddedImage {
    /// An image whose bytes have not been checked: init verifies its
    /// structure (header and index) before merging it, and each payload's
    /// checksum is checked on first use.
    pub const fn new(crate_name: &'static str, name: &'static str, bytes: &'static [u8]) -> Self {
        EmbeddedImage {
            crate_name,
            name,
            bytes,
            verified: false,
        }
    }

    /// An image whose bytes passed [`Verification::Full`] at compile time:
    /// init opens it without checking them again.
    ///
    /// # Safety
    ///
    /// `bytes` must be exactly the bytes that passed `Verification::Full`
    /// (as `include_image!` checks them while expanding). Init relies on it
    /// through [`Image::from_static_trusted`].
    #[doc(hidden)]
    pub const unsafe fn verified_at_compile_time(
        crate_name: &'static str,
        name: &'static str,
        bytes: &'static [u8],
    ) -> Self {
        EmbeddedImage {
            crate_name,
            name,
            bytes,
            verified: true,
        }
    }

    /// The crate that embedded the image (`CARGO_PKG_NAME`).
    pub fn crate_name(&self) -> &'static str {
        self.crate_name
    }

    /// The image's name, as the path given to `include_image!`.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The embedded bytes.
    pub fn bytes(&self) -> &'static [u8] {
        self.bytes
    }

    /// Whether the bytes were fully verified at compile time.
    pub fn is_verified(&self) -> bool {
        self.verified
    }

    /// Opens the image over the embedded bytes, without copying them.
    pub fn open(&self) -> Result<Image, ImageError> {
        if self.verified {
            // SAFETY: `verified` is only true when the image was built by
            // `verified_at_compile_time`, whose contract is that `bytes` are
            // the very bytes that passed `Verification::Full` while
            // `include_image!` expanded (the static holding them is
            // immutable, so they are unchanged).
            unsafe { Image::from_static_trusted(self.bytes) }
        } else {
            Image::from_static(self.bytes, Verification::Structural)
        }
    }
}

/// What `include_image!` expands to refers to; re-exported as
/// `kiln_core::__private` (and `kiln::__private`). Not public API.
#[doc(hidden)]
pub mod macro_support {
    pub use super::EmbeddedImage;
    pub use inventory;

    /// Image bytes in a static aligned to 64 bytes: the image reader needs
    /// 16, and 64 keeps the header on one cache line.
    #[repr(C, align(64))]
    pub struct AlignedBytes<const N: usize>(pub [u8; N]);

    impl<const N: usize> AlignedBytes<N> {
        /// The bytes, for the image descriptor.
        pub const fn as_slice(&'static self) -> &'static [u8] {
            &self.0
        }
    }
}

/// Every image registered with `include_image!` in this program, sorted by
/// crate and name so that merges happen in the same order in every run.
pub fn embedded_images() -> Vec<&'static EmbeddedImage> {
    registered_since(std::ptr::null()).1
}

/// The images registered after the registration `seen` (null: all of them),
/// sorted by crate and name, and the newest registration now (null if none).
///
/// Registrations form a list with the newest first, so this walks only the
/// new ones. Registrations after `main` starts come from libraries loaded at
/// run time (`dlopen`).
pub(crate) fn registered_since(
    seen: *const EmbeddedImage,
) -> (*const EmbeddedImage, Vec<&'static EmbeddedImage>) {
    let mut newest: *const EmbeddedImage = std::ptr::null();
    let mut images = Vec::new();
    for image in inventory::iter::<EmbeddedImage>() {
        let this: *const EmbeddedImage = image;
        if newest.is_null() {
            newest = this;
        }
        if this == seen {
            break;
        }
        images.push(image);
    }
    images.sort_by_key(|image| (image.crate_name, image.name));
    (newest, images)
}

/// The newest registration (null if none): an atomic load.
pub(crate) fn newest_registration() -> *const EmbeddedImage {
    inventory::iter::<EmbeddedImage>()
        .next()
        .map_or(std::ptr::null(), |image| image as *const EmbeddedImage)
}

/// Where an image came from, for reports and log lines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ImageSource {
    /// Embedded with `include_image!` by `crate_name`.
    Embedded {
        /// The crate that embedded the image.
        crate_name: &'static str,
        /// The path given to `include_image!`.
        name: &'static str,
    },
    /// A file in one of the directories of `KILN_IMAGE_PATH`.
    File(PathBuf),
    /// A directory of `KILN_IMAGE_PATH` that could not be listed.
    Directory(PathBuf),
}

impl fmt::Display for ImageSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageSource::Embedded { crate_name, name } => {
                write!(f, "{name} (embedded by {crate_name})")
            }
            ImageSource::File(path) => write!(f, "{}", path.display()),
            ImageSource::Directory(path) => write!(f, "directory {}", path.display()),
        }
    }
}

/// The `*.kimg` files of the directories in `dirs`.
///
/// Directories keep their order (like `PATH`); the files of one directory
/// are sorted by name. A directory that cannot be listed is returned beside
/// the files, with the reason, and the others are still searched.
pub fn image_files(dirs: &[PathBuf]) -> (Vec<PathBuf>, Vec<(PathBuf, std::io::Error)>) {
    let mut files = Vec::new();
    let mut unreadable = Vec::new();
    for dir in dirs {
        match image_files_in(dir) {
            Ok(mut found) => {
                found.sort();
                files.append(&mut found);
            }
            Err(err) => unreadable.push((dir.clone(), err)),
        }
    }
    (files, unreadable)
}

fn image_files_in(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|ext| ext == IMAGE_EXTENSION) && path.is_file() {
            found.push(path);
        }
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_files_keep_directory_order_and_sort_within_one() {
        let first = tempfile::tempdir().unwrap();
        let second = tempfile::tempdir().unwrap();
        for name in ["b.kimg", "a.kimg", "notes.txt", "c.kimg.tmp"] {
            std::fs::write(first.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(first.path().join("dir.kimg")).unwrap();
        std::fs::write(second.path().join("0.kimg"), b"x").unwrap();

        let dirs = [second.path().to_path_buf(), first.path().to_path_buf()];
        let (files, unreadable) = image_files(&dirs);
        assert!(unreadable.is_empty());
        assert_eq!(
            files,
            [
                second.path().join("0.kimg"),
                first.path().join("a.kimg"),
                first.path().join("b.kimg"),
            ]
        );
    }

    #[test]
    fn a_missing_directory_is_reported_and_the_others_still_searched() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("x.kimg"), b"x").unwrap();
        let missing = dir.path().join("missing");
        let (files, unreadable) = image_files(&[missing.clone(), dir.path().to_path_buf()]);
        assert_eq!(files, [dir.path().join("x.kimg")]);
        assert_eq!(unreadable.len(), 1);
        assert_eq!(unreadable[0].0, missing);
        assert_eq!(unreadable[0].1.kind(), std::io::ErrorKind::NotFound);
    }

    inventory::submit! { EmbeddedImage::new("zeta-crate", "a.kimg", b"not an image") }
    inventory::submit! { EmbeddedImage::new("alpha-crate", "z.kimg", b"") }
    inventory::submit! { EmbeddedImage::new("alpha-crate", "b.kimg", b"") }

    #[test]
    fn registered_images_are_collected_sorted_by_crate_then_name() {
        let names: Vec<(&str, &str)> = embedded_images()
            .iter()
            .map(|image| (image.crate_name(), image.name()))
            .collect();
        assert_eq!(
            names,
            [
                ("alpha-crate", "b.kimg"),
                ("alpha-crate", "z.kimg"),
                ("zeta-crate", "a.kimg"),
            ]
        );
        assert!(embedded_images().iter().all(|image| !image.is_verified()));
    }

    #[test]
    fn registered_since_returns_only_the_newer_registrations() {
        let newest_first: Vec<*const EmbeddedImage> = inventory::iter::<EmbeddedImage>()
            .map(|image| image as *const EmbeddedImage)
            .collect();
        assert_eq!(newest_first.len(), 3);
        assert_eq!(newest_registration(), newest_first[0]);

        let (newest, late) = registered_since(newest_first[1]);
        assert_eq!(newest, newest_first[0]);
        let late: Vec<*const EmbeddedImage> =
            late.into_iter().map(|image| image as *const _).collect();
        assert_eq!(late, [newest_first[0]]);

        let (newest, none) = registered_since(newest_first[0]);
        assert_eq!(newest, newest_first[0]);
        assert!(none.is_empty());
    }
}
