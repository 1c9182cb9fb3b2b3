//! kiln-ship: *shipped images*, the form in which a library's precompiled
//! entries travel inside its crate package.
//!
//! A library's author compiles its precompile block once, where the
//! toolchain is, and `kiln ship` writes what the block built into the
//! library's source tree as `kiln-shipped/<name>.kship`; `cargo package`
//! takes it along. On every other machine that builds the library (an
//! application's laptop, its CI, docs.rs) the precompile block reads the
//! shipped file instead of compiling: it checks the frame, the signature
//! when the library names its key, every digest, then looks the block's
//! entries up in it.
//!
//! ```
//! use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta};
//! use kiln_ship::{Manifest, Shipped, ShippedFile};
//!
//! let entry = EntryData {
//!     owner: Digest::of(b"my-compiler 1.0 sm_90"),
//!     owner_label: "my-compiler 1.0 sm_90".into(),
//!     key: Digest::of(b"scale<float>"),
//!     name: "scale<float>".into(),
//!     min_world: 1,
//!     max_world: u64::MAX,
//!     deps: vec![],
//!     artifacts: vec![Artifact {
//!         kind: ArtifactKind::Cubin,
//!         entry_points: vec!["scale".into()],
//!         bytes: b"\x7fELF...".to_vec(),
//!     }],
//! };
//! let shipped = Shipped::new(Manifest::new("my-kernels"), ImageMeta::new("my-kernels", "0.1.0"), vec![entry]);
//! let bytes = shipped.encode_stored()?; // `kiln ship` compresses at zstd level 19
//!
//! let file = ShippedFile::parse(&bytes)?; // the frame only; nothing decompressed
//! assert!(file.signers().is_empty());
//! let back = Shipped::unpack(&file)?; // every digest checked
//! assert_eq!(back, shipped);
//! let image = back.to_image()?; // a kiln image, to look entries up in
//! assert_eq!(image.len(), 1);
//! # Ok::<(), kiln_ship::ShipError>(())
//! ```
//!
//! # Why a format of its own
//!
//! A kiln image (`kiln-image`) is laid out for zero-copy lookups and pins an
//! exact rkyv release; its format version changes when that layout does,
//! and `include_image!` reads one version only. A library published with
//! shipped entries must keep working when its users' builds resolve a newer
//! semver-compatible Kiln, so what travels in the package is this small,
//! stable encoding (a fixed header, a postcard index, the payloads, zstd),
//! which every Kiln release of the same major version reads; the build
//! converts it into the image format of the Kiln it builds with
//! ([`Shipped::to_image`]). Decompressing happens at build time: the
//! application still embeds an uncompressed image and maps nothing.
//!
//! # What is checked, and the bounds
//!
//! - [`ShippedFile::parse`]: magic, format version, flags, every length
//!   (the file's length is exactly header + body + trailer), the signature
//!   trailer's shape. The declared raw length is at most
//!   [`MAX_RAW_LEN`](file::MAX_RAW_LEN) and at most
//!   [`MAX_EXPANSION`](file::MAX_EXPANSION) (256) times the compressed
//!   body plus [`SLACK`](file::SLACK) (1 MiB): real shipped images compress
//!   15 to 90 times, so a small file cannot declare a large body.
//! - [`ShippedFile::check_signed_by`]: an ed25519 signature of the header
//!   (which names the content digest and every length) by the key the
//!   library names.
//! - [`Shipped::unpack`]: a first pass decompresses without keeping
//!   anything and must give exactly the declared length (it stops one byte
//!   past it) and the content digest (BLAKE3 of the index and every
//!   payload); a second pass decompresses the index, then each artifact
//!   straight into its own buffer once the index accounts for every payload
//!   byte; entries strictly sorted by `(owner, key)`; every rule of the
//!   image writer ([`kiln_image::check_writable`]). Memory: the declared
//!   length once, plus the zstd window (at most [`MAX_WINDOW`], 16 MiB)
//!   and the decoded index; a forged body costs the window only.
//! - [`Shipped::to_image`]: the image writer's checks, then the image's
//!   structural verification.
//!
//! Reading the file itself is the caller's: a precompile block and `kiln
//! ship` read it as every file someone else may control
//! (`kiln_core::build::read_shipped_file`: no link, FIFO or device, at most
//! 512 MiB).

#![deny(unsafe_op_in_unsafe_fn)]
#![forbid(unsafe_code)]

mod candidate;
mod error;
pub mod file;
mod shipped;

pub use candidate::{CANDIDATE_EXTENSION, Candidate};
pub use error::ShipError;
pub use file::ShippedFile;
pub use shipped::{MAX_WINDOW, Manifest, Shipped};

/// The folder of a library's shipped images, relative to its root:
/// `kiln-shipped/<name>.kship`.
pub const SHIPPED_DIR: &str = "kiln-shipped";
/// The extension of a shipped image.
pub const EXTENSION: &str = "kship";
