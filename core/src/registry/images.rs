//! Images embedded by `include_image!` (registered with [`inventory`]
//! before `main`) and the `*.kimg` files of `KILN_IMAGE_PATH`.

use std::fmt;
use std::path::{Path, PathBuf};

use kiln_image::header::HEADER_LEN;
use kiln_image::{Image, ReadError, Verification};

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
    /// The header of the image that passed [`Verification::Full`] at
    /// compile time, or `None` for an image never checked.
    verified_header: Option<&'static [u8; HEADER_LEN]>,
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
            verified_header: None,
        }
    }

    /// An image that passed [`Verification::Full`] at compile time, whose
    /// fixed header (its first [`HEADER_LEN`] bytes) was `header`.
    ///
    /// Init opens the image without checking it again only if `bytes` start
    /// with `header`, byte for byte; otherwise the embedded bytes are not
    /// the ones that were verified, and init logs a warning and opens them
    /// like [`EmbeddedImage::new`]'s, checking their structure.
    ///
    /// The header carries the BLAKE3 checksum of everything after it (and a
    /// checksum of its own), so bytes that start with `header` hold the
    /// verified image unless their body was changed without updating the
    /// header: the one case the comparison cannot catch.
    ///
    /// # Safety
    ///
    /// `header` must be the first [`HEADER_LEN`] bytes of an image that
    /// passed `Verification::Full` with this build of `kiln-image`, and if
    /// `bytes` start with `header`, the rest of `bytes` must be that image's
    /// body, unchanged. Init relies on it through
    /// [`Image::from_static_trusted`]. `include_image!` reads `header` from
    /// the bytes it verifies while expanding, and the same file is embedded
    /// with `include_bytes!` moments later: see [`EmbeddedImage::open`] for
    /// what that leaves unchecked.
    #[doc(hidden)]
    pub const unsafe fn verified_at_compile_time(
        crate_name: &'static str,
        name: &'static str,
        bytes: &'static [u8],
        header: &'static [u8; HEADER_LEN],
    ) -> Self {
        EmbeddedImage {
            crate_name,
            name,
            bytes,
            verified_header: Some(header),
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

    /// Whether the image was fully verified at compile time. The embedded
    /// bytes are trusted only if their header is still the verified one
    /// (see [`EmbeddedImage::open`]).
    pub fn is_verified(&self) -> bool {
        self.verified_header.is_some()
    }

    /// Whether the image was verified at compile time and the embedded
    /// bytes start with the header that was verified: if so, `open` trusts
    /// them.
    fn matches_verified_header(&self) -> bool {
        self.verified_header
            .is_some_and(|header| self.bytes.get(..HEADER_LEN) == Some(&header[..]))
    }

    /// Opens the image over the embedded bytes, without copying them.
    ///
    /// An image verified at compile time is opened without checking it
    /// again if its header is still the one that was verified. If it is
    /// not, the file changed between the macro's check and `include_bytes!`:
    /// a warning is logged and the bytes are opened with
    /// [`Verification::Structural`], like an image never checked (its
    /// header and index are validated now and each payload's checksum on
    /// first use).
    ///
    /// # Errors
    /// The [`ReadError`] of the check that failed, when the bytes (changed
    /// since they were verified) do not open.
    pub fn open(&self) -> Result<Image, ReadError> {
        if self.matches_verified_header() {
            // SAFETY: the embedded bytes start with the header of an image
            // that passed `Verification::Full` at compile time (the
            // contract of `verified_at_compile_time`, under which
            // `include_image!` read that header from the bytes it verified),
            // and the static holding them is never written.
            //
            // What the comparison guarantees: the header holds the BLAKE3
            // checksum of the whole body (everything after the header) and a
            // checksum of its own, so any rewrite of the file into another
            // valid image (a new body, hence a new body checksum) and any
            // garbage in the header change these bytes and are caught here.
            //
            // What it leaves: a body rewritten while the header stays byte
            // for byte the same, at the same length (the array type checks
            // the length), in the moment between the macro reading the file
            // and `include_bytes!` reading it again. An image written by a
            // build script into `OUT_DIR` cannot be in that case: cargo
            // runs the build script to completion (and waits for it to exit)
            // before it starts rustc on the crate, so the file is final
            // before either read. Only another process editing the file in
            // place during those milliseconds could, and kiln's writers
            // never do: `write_file_atomic` renames a complete file into
            // place, so each read sees a whole image, old or new, and a new
            // one has a new header.
            unsafe { Image::from_static_trusted(self.bytes) }
        } else {
            if self.verified_header.is_some() {
                tracing::warn!(
                    crate_name = self.crate_name,
                    name = self.name,
                    "embedded image differs from the one verified at compile time \
                     (its header changed); opening it with structural checks instead"
                );
            }
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
#[non_exhaustive]
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
    use crate::test_support::leak_aligned;

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

    const PAYLOAD: &[u8] = b"payload bytes";

    fn valid_image() -> Vec<u8> {
        use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter};
        let mut writer = ImageWriter::new(ImageMeta::default());
        writer.push(EntryData {
            owner: Digest::of(b"owner"),
            owner_label: "test owner".to_owned(),
            key: Digest::of(b"key"),
            name: "kernel".to_owned(),
            min_world: 1,
            max_world: u64::MAX,
            deps: Vec::new(),
            artifacts: vec![Artifact {
                kind: ArtifactKind::Object,
                entry_points: vec!["kernel".to_owned()],
                bytes: PAYLOAD.to_vec(),
            }],
        });
        writer.to_bytes().unwrap()
    }

    /// The image's only payload, read (and, unless trusted, checked).
    fn payload(image: &Image) -> Result<Vec<u8>, ReadError> {
        let entry = image.entry(0)?;
        Ok(entry.artifact(0)?.bytes()?.to_vec())
    }

    /// The warnings logged while `f` runs, and its result.
    fn logged<T>(f: impl FnOnce() -> T) -> (String, T) {
        use std::sync::{Arc, Mutex};
        #[derive(Clone, Default)]
        struct Buffer(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buffer {
            fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(bytes);
                Ok(bytes.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buffer = Buffer::default();
        let writer = buffer.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish();
        let out = tracing::subscriber::with_default(subscriber, f);
        let text = String::from_utf8(buffer.0.lock().unwrap().clone()).unwrap();
        (text, out)
    }

    #[test]
    fn an_image_with_the_verified_header_is_opened_trusted() {
        let bytes = leak_aligned(&valid_image());
        Image::from_static(bytes, Verification::Full).unwrap();
        // SAFETY: `bytes` passed `Verification::Full` just above, the header
        // is its own, and they are never written again.
        let embedded = unsafe {
            EmbeddedImage::verified_at_compile_time(
                "crate",
                "good.kimg",
                bytes,
                bytes.first_chunk().unwrap(),
            )
        };
        assert!(embedded.is_verified());
        let (log, image) = logged(|| embedded.open().unwrap());
        assert!(image.is_trusted());
        assert_eq!(payload(&image).unwrap(), PAYLOAD);
        assert!(log.is_empty(), "{log}");
    }

    #[test]
    fn an_image_whose_header_differs_from_the_verified_one_is_checked_not_trusted() {
        let verified = valid_image();
        let mut header: [u8; HEADER_LEN] = *verified.first_chunk().unwrap();
        // The header the macro saw differs from the embedded one, say by the
        // body checksum: the file was rewritten after it was verified.
        header[HEADER_LEN - 1] ^= 0xff;
        let header: &'static [u8; HEADER_LEN] = Box::leak(Box::new(header));
        // And the embedded body is corrupt (a payload byte flipped), which
        // trusting the bytes would let through.
        let mut rewritten = verified.clone();
        let at = rewritten
            .windows(PAYLOAD.len())
            .rposition(|w| w == PAYLOAD)
            .expect("the payload is stored verbatim");
        rewritten[at] ^= 0x20;
        let bytes = leak_aligned(&rewritten);
        assert_ne!(&bytes[..HEADER_LEN], &header[..]);

        // SAFETY: the embedded bytes do not start with `header`, so the
        // contract asks nothing of them, and `open` does not trust them.
        let embedded =
            unsafe { EmbeddedImage::verified_at_compile_time("crate", "bad.kimg", bytes, header) };
        assert!(embedded.is_verified());
        let (log, image) = logged(|| embedded.open().unwrap());
        assert!(!image.is_trusted(), "opened through the checked path");
        assert!(
            payload(&image).is_err(),
            "the corrupt payload is rejected, not trusted"
        );
        assert!(
            log.contains("differs from the one verified at compile time"),
            "{log}"
        );
        assert!(log.contains("bad.kimg"), "{log}");
    }

    #[test]
    fn a_verified_image_shorter_than_its_header_is_checked_and_rejected() {
        let header: &'static [u8; HEADER_LEN] = &[0; HEADER_LEN];
        // SAFETY: the bytes do not start with `header`, so `open` does not
        // trust them.
        let embedded = unsafe {
            EmbeddedImage::verified_at_compile_time(
                "crate",
                "short.kimg",
                leak_aligned(b"x"),
                header,
            )
        };
        let (log, opened) = logged(|| embedded.open());
        assert!(opened.is_err());
        assert!(log.contains("short.kimg"), "{log}");
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
