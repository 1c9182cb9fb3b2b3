//! Kiln: package images of precompiled code for JIT-compiling libraries.
//!
//! A library that compiles code at run time (CUDA kernels through NVRTC,
//! shaders, query plans) compiles its common specializations **once, at
//! build time**, ships them inside the crate as an *image*, and every
//! application that depends on it starts with those entries in its cache:
//! a lookup returns bytes borrowed from the image, with no compile.
//!
// The examples of `main-path.md` embed the images their build scripts write:
// they are compiled (and the one that can, run) as doc tests of
// `tests/readme`, whose build script writes those images; this crate has no
// build script (it would run in every user's build).
#![cfg_attr(not(doctest), doc = include_str!("main-path.md"))]

pub use kiln_core::{Compiled, Error, ErrorChain, Hit, Key, KeyBuilder, Owner, global, init};
pub use kiln_image::{Artifact, ArtifactKind};

pub use kiln_macros::include_image;

#[cfg(feature = "build")]
pub use kiln_core::build;

/// The code-instance cache: caches of your own, their configuration (the
/// memory cap included), extra tiers and [`flush`](cache::flush), snapshots
/// and deltas, merge and init reports.
///
/// [`global()`](crate::global) is the process's cache; [`Cache`](cache::Cache) is the type,
/// for a cache of your own (a build script's, a test's) and for functions
/// that take one. See [`kiln_core::cache`] for its structure and locking.
pub mod cache {
    pub use kiln_core::cache::{
        ArtifactView, Cache, CacheConfig, DEFAULT_MEMORY_MAX_BYTES, DEFAULT_MEMORY_MAX_ENTRIES,
        Delta, MergeReport, OwnerFilter, PAYLOAD_ALIGN, Rejection, Snapshot, Source, Stats, Tier,
        TierEntry,
    };
    pub use kiln_core::{
        BoxError, ImageOutcome, ImageReport, InitReport, World, add_tiers, flush, init_with,
        load_images,
    };
}

/// The disk tier: compiled entries persisted across runs in
/// `KILN_CACHE_DIR`, shared by concurrent processes. [`global()`](crate::global)
/// adds it; see [`kiln_core::disk`] for its layout and guarantees.
#[cfg(feature = "disk")]
pub mod disk {
    pub use kiln_core::disk::config::{
        CACHE, CACHE_DIR, CACHE_MAX_BYTES, CACHE_TRUST_DIR, DEFAULT_MAX_BYTES, default_dir,
    };
    pub use kiln_core::disk::{
        ArtifactInfo, ClearReport, DiskArtifact, DiskCache, DiskConfig, DiskHit, DiskStats,
        DiskTier, EntryInfo, GcReport, SegmentCheck, SessionCounters, VerifyReport,
    };
}

/// The image format (`kiln-image`): a versioned header, a zero-copy index and
/// checksummed payloads. [`Artifact`] and [`ArtifactKind`] are at the crate
/// root.
pub mod image {
    pub use kiln_image::header::{FORMAT_VERSION, HEADER_LEN};
    pub use kiln_image::{
        ArchiveLayout, ArtifactRef, Dep, DepGroup, Digest, Endianness, EntryData, EntryRef,
        FileAccess, Header, Image, ImageError, ImageFile, ImageMeta, ImageWriter, KeyError,
        ParseDigestError, ReadError, SignatureError, Verification, WRITE_PIECE, WriteError,
        write_file_atomic, write_in_pieces,
    };
}

/// The stable encodings of keys and owners: the BLAKE3 key-derivation
/// contexts ([`kiln_core::key`] and [`kiln_core::owner`] describe the
/// encodings).
pub mod key {
    pub use kiln_core::key::KEY_CONTEXT;
    pub use kiln_core::owner::OWNER_CONTEXT;
}

pub use kiln_core::{env, registry, settings};

/// The CUDA backend (`kiln-cuda`): NVRTC to CUBIN and PTX, owners, the
/// module loader. Each operation's error ([`ToolchainError`](kiln_cuda::ToolchainError),
/// [`CompileError`](kiln_cuda::CompileError), [`LoadError`](kiln_cuda::LoadError),
/// [`ShipError`](kiln_cuda::ShipError), [`ServeError`](kiln_cuda::ServeError)) and
/// [`kiln::cuda::Error`](kiln_cuda::Error) convert into
/// [`kiln::Error`](crate::Error) with `?`. Rendered here in full
/// (`cargo doc -p kiln --features cuda --open`).
#[cfg(feature = "cuda")]
#[doc(inline)]
pub use kiln_cuda as cuda;

/// The remote tier on Redis (`kiln-redis`), for fleets and CI farms:
/// [`global()`] adds it when `KILN_REMOTE_CACHE` is set.
#[cfg(feature = "redis")]
pub use kiln_redis as redis;

#[doc(hidden)]
pub use kiln_core::__private;
