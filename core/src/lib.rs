//! kiln-core: Kiln's code-instance cache.
//!
//! A library that JIT-compiles code keeps its results in a [`Cache`], keyed by
//! the compiler configuration that produced them ([`Owner`]) and the identity
//! of the compiled method instance ([`Key`]). A *precompile block* at build
//! time records what it compiled between a [`Cache::snapshot`] and a
//! [`Cache::delta`]; the delta is written as an image (see `kiln-image`); at
//! run time the image is merged with [`Cache::merge_image`] and lookups are
//! answered from it without copying or compiling.
//!
//! ```
//! use kiln_core::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder, Owner};
//!
//! # fn main() -> Result<(), kiln_core::Error> {
//! let owner = Owner::new("nvrtc", "13.0", "sm_90a", ["-O3"])?;
//! let key = KeyBuilder::new("my-kernels", 1)
//!     .str("function", "saxpy")
//!     .field("dtype", &"f32")?
//!     .finish();
//!
//! let cache = Cache::new();
//! let start = cache.snapshot();
//! let hit = cache.get_or_compile(&owner, &key, || {
//!     // A real backend runs its compiler here.
//!     Ok(Compiled::new("saxpy<f32>").artifact(Artifact {
//!         kind: ArtifactKind::Ptx,
//!         entry_points: vec!["saxpy".into()],
//!         bytes: b"// ptx".to_vec(),
//!     }))
//! })?;
//! assert_eq!(hit.artifact(&ArtifactKind::Ptx), Some(&b"// ptx"[..]));
//!
//! let delta = cache.delta(&start);
//! assert_eq!(delta.len(), 1); // delta.write_image(path, meta) writes it
//! # Ok(()) }
//! ```
//!
//! # Modules
//!
//! - [`key`]: [`Key`] and [`KeyBuilder`] (stable, complete keys).
//! - [`owner`]: [`Owner`], the compiler configuration an entry belongs to.
//! - [`world`]: [`World`] ages.
//! - [`cache`]: the [`Cache`]: memory, image layers, extra tiers, single
//!   flight, snapshot/delta, definitions and invalidation, stats.
//! - [`error`]: the crate's one [`Error`] enum.
//! - [`registry`]: where images come from (embedded, `KILN_IMAGE_PATH`), and
//!   the extra tiers other crates offer the global cache ([`TierFactory`]).
//! - `global`: the process-wide cache ([`global()`], [`init()`], [`add_tiers`]).
//! - [`settings`]: every `KILN_*` switch, read and parsed once into
//!   [`Settings`](settings::Settings); [`env`](mod@env): their names and the
//!   boolean parser.
//! - `build` (feature `build`): build-script helpers (precompile into
//!   `OUT_DIR`).
//! - [`disk`]: the on-disk cache tier (feature `disk`; without it, only
//!   its `config`).
//! - `record` (feature `record`): what a process asked its cache for
//!   (`KILN_RECORD`), and reading record files back (for `kiln bake` and
//!   `kiln report`).
//! - [`trust`]: whose signed code is accepted (`KILN_TRUSTED_KEYS`) and the
//!   key this process signs with (`KILN_SIGNING_KEY`).
//!
//! # Features
//!
//! The parts that a program using only the cache and its images does not
//! need are optional, all on by default: `disk` (the disk tier, which
//! [`global()`] adds), `record` (the `KILN_RECORD` recorder, an
//! [`Observer`](cache::Observer) of the cache, and record files) and
//! `build` (`Precompile`, shipped images, the compressed image a library
//! embeds). Without `disk` the global cache has no disk tier; without
//! `record`, `KILN_RECORD` gives one warning and records nothing. `ctor`
//! (off) merges every image before `main`.
//!
//! Backends and other tiers are crates of their own, clients of this API:
//! `kiln-cuda` (the NVRTC backend) and `kiln-redis` (the remote tier, which
//! [`global()`] adds through a [`TierFactory`] when that crate is linked).

#[cfg(feature = "build")]
pub mod build;
pub mod cache;
pub mod disk;
pub mod env;
pub mod error;
mod exit;
mod global;
pub mod key;
pub mod owner;
#[cfg(feature = "record")]
pub mod record;
pub mod registry;
pub mod regular_file;
pub mod settings;
#[cfg(test)]
mod test_support;
pub mod trust;
pub mod world;

pub use cache::{
    ArtifactView, Cache, CacheConfig, Compiled, Delta, Hit, MergeReport, OwnerFilter, Rejection,
    Snapshot, Source, Stats, Tier, TierEntry,
};
pub use error::{BoxError, Error, ErrorChain};
pub use global::{
    ImageOutcome, ImageReport, InitReport, add_tiers, flush, global, init, init_with, load_images,
};
pub use key::{Key, KeyBuilder};
pub use kiln_image::{Artifact, ArtifactKind, Dep, Digest};
pub use owner::Owner;
pub use registry::{TierFactory, TierSetup};
pub use world::World;

#[doc(hidden)]
pub use registry::macro_support as __private;
