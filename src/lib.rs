//! Kiln: package images of precompiled code for JIT-compiling libraries.
//!
//! A library that compiles code at run time (CUDA kernels through NVRTC,
//! shaders, query plans) keeps its results in a code-instance [`Cache`].
//! Kiln lets that library compile its common specializations **once, at
//! build time**, ship them inside the crate as an *image*, and have every end
//! application start hot: the first use of [`global()`] merges every
//! registered image, and a lookup returns bytes borrowed from the image.
//!
//! This crate is the facade: it re-exports the public API of `kiln-core`
//! (keys, owners, worlds, the cache, init, build-script helpers, the disk
//! tier), `kiln-image` (the byte format, as [`image`]) and `kiln-macros`
//! ([`include_image!`]); with the feature `cuda`, `kiln-cuda` (the NVRTC
//! backend, as `kiln::cuda`), and with the feature `redis`, `kiln-redis`
//! (the remote tier, as `kiln::redis`, which [`global()`] then adds when
//! `KILN_REMOTE_CACHE` is set). It has no logic of its own, and a library
//! depending on it compiles no command-line parser and no `tracing`
//! subscriber (the `kiln` tool is the `kiln-cli` package).
//!
//! # The precompile block
//!
//! Between a [`Cache::snapshot`] and a [`Cache::delta`], compile what the
//! library will need; the delta holds exactly the new, unbounded, locally
//! compiled entries, and writes a deterministic image:
//!
//! ```
//! use kiln::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let owner = Owner::new("my-compiler", "1.2.3", "x86_64-v3", ["-O2"])?;
//! let key = KeyBuilder::new("my-kernels", 1)
//!     .str("function", "saxpy")
//!     .field("dtype", &"f32")?
//!     .finish();
//!
//! let cache = Cache::new();
//! let start = cache.snapshot();
//! cache.get_or_compile(&owner, &key, || {
//!     // A real backend runs its compiler here (see `kiln::cuda`).
//!     Ok::<_, std::io::Error>(Compiled::new("saxpy<f32>").artifact(Artifact {
//!         kind: ArtifactKind::Object,
//!         entry_points: vec!["saxpy".into()],
//!         bytes: b"\x7fELF...".to_vec(),
//!     }))
//! })?;
//! let delta = cache.delta(&start);
//! assert_eq!(delta.len(), 1);
//!
//! // In a build script: `kiln::build::Precompile` does this and writes
//! // `$OUT_DIR/<name>.kimg`; here, an image in memory.
//! let bytes = delta.to_bytes(kiln::image::ImageMeta::default())?;
//!
//! // At run time: merge the image; the lookup is served from it.
//! let app = Cache::new();
//! let image = kiln::image::Image::from_bytes(&bytes, kiln::image::Verification::Full)?;
//! let report = app.merge_image(image);
//! assert_eq!(report.inserted, 1);
//! let hit = app.lookup(&owner.digest(), &key).expect("served from the image");
//! assert_eq!(hit.artifact(&ArtifactKind::Object), Some(&b"\x7fELF..."[..]));
//! # Ok(()) }
//! ```
//!
//! # Shipping the image
//!
//! A library's `build.rs` runs the block with [`build::Precompile`], and the
//! library embeds the result with [`include_image!`]. Applications need no
//! setup: [`global()`] merges every embedded image and every `*.kimg` file in
//! the directories of `KILN_IMAGE_PATH` on first use; [`init()`] does it
//! explicitly and returns what happened to each image.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

pub use kiln_core::{
    Artifact, ArtifactKind, ArtifactView, Cache, CacheConfig, Compiled, Delta, Dep, Digest, Error,
    Hit, ImageOutcome, ImageReport, InitReport, Key, KeyBuilder, MergeReport, Owner, OwnerFilter,
    Rejection, Snapshot, Source, Stats, Tier, TierEntry, TierFactory, TierSetup, World, add_tiers,
    flush, global, init, init_with, load_images,
};
pub use kiln_core::{build, cache, disk, env, key, owner, registry, world};
/// The image format: header, zero-copy index, checksummed payloads.
pub use kiln_image as image;
pub use kiln_macros::include_image;

/// The CUDA backend (`kiln-cuda`): NVRTC to CUBIN and PTX, owners, the
/// module loader.
#[cfg(feature = "cuda")]
pub use kiln_cuda as cuda;

/// The remote tier on Redis (`kiln-redis`), for fleets and CI farms:
/// [`global()`] adds it when `KILN_REMOTE_CACHE` is set.
#[cfg(feature = "redis")]
pub use kiln_redis as redis;

#[doc(hidden)]
pub use kiln_core::__private;
