//! The crate's error type.
//!
//! One enum for all of kiln-core. Each module adds its variants in its own
//! block below (keep the blocks grouped and commented by module), and each
//! message says what mismatched and what to do about it.

use std::path::PathBuf;
use std::sync::Arc;

use crate::key::Key;

/// Any error, boxed: what a compile closure of
/// [`Cache::get_or_compile`](crate::Cache::get_or_compile) or a precompile
/// block of [`Precompile::run`](crate::build::Precompile::run) returns. `?`
/// converts every `std::error::Error + Send + Sync` into it, so such a closure
/// needs no annotation: `|| { let code = my_compiler(src)?; Ok(Compiled::new("f")) }`.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// A compile failure, shared by every caller that waited for the same compile.
pub type CompileFailure = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in kiln-core.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ----- keys and owners (key.rs, owner.rs) -----
    /// A key field's value could not be encoded with postcard.
    #[error(
        "key field `{label}` cannot be encoded: {source} (use types with a fixed serde shape: \
         structs, enums, sequences of known length, BTreeMap instead of HashMap)"
    )]
    KeyEncoding {
        /// The field's label.
        label: String,
        /// What postcard reported.
        source: postcard::Error,
    },
    /// A key field's value serialised differently on two consecutive passes.
    #[error(
        "key field `{label}` encoded to {first} bytes and then to {second} bytes: its Serialize \
         implementation is not deterministic (HashMap/HashSet iteration order?); use BTreeMap \
         or a sorted Vec"
    )]
    KeyNondeterministic {
        /// The field's label.
        label: String,
        /// Length of the first pass.
        first: usize,
        /// Length of the second pass.
        second: usize,
    },
    /// A file that a key depends on could not be read, so its contents cannot be
    /// fingerprinted.
    #[error(
        "key field `{label}` depends on {path}, which cannot be read ({source}); a key must \
         fingerprint the contents of every file it depends on, not just the path"
    )]
    KeyInput {
        /// The field's label.
        label: String,
        /// The file.
        path: PathBuf,
        /// Why it could not be read.
        source: std::io::Error,
    },
    /// An owner field that must identify the compiler exactly was empty.
    #[error(
        "owner field `{field}` is empty: give the exact {field} (e.g. compiler \"nvrtc\", \
         version \"13.0.48\", target \"sm_90a\") so that a compiler upgrade changes every key"
    )]
    OwnerField {
        /// `compiler`, `version` or `target`.
        field: &'static str,
    },

    // ----- the cache (cache/) -----
    /// The compile function of `get_or_compile` failed. Every caller that
    /// waited for that compile gets the same error; nothing was cached.
    #[error("compiling {key} for owner {owner} failed: {source}")]
    Compile {
        /// The owner's label.
        owner: String,
        /// The key being compiled.
        key: Key,
        /// The compiler's error.
        source: CompileFailure,
    },
    /// The compile function of `get_or_compile` panicked in another thread
    /// while this caller waited for it.
    #[error(
        "compiling {key} for owner {owner} panicked in another thread; nothing was cached, call \
         again to retry"
    )]
    CompilePanicked {
        /// The owner's label.
        owner: String,
        /// The key being compiled.
        key: Key,
    },
    /// Reading or writing an image failed.
    #[error(transparent)]
    Image(#[from] kiln_image::ImageError),

    // ----- the disk cache (disk/) -----
    /// A file or directory of the disk cache could not be read or written.
    #[error(
        "disk cache: cannot {action} {path}: {source} (point KILN_CACHE_DIR at a writable \
         directory, or set KILN_CACHE=0 to turn the disk cache off)"
    )]
    DiskIo {
        /// What was being done, e.g. "create directory".
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },
    /// A size setting is not a size.
    #[error(
        "{variable}={value:?} is not a size: give bytes, optionally with a K, M, G or T suffix \
         (powers of 1024), e.g. 512M"
    )]
    DiskSize {
        /// The environment variable.
        variable: &'static str,
        /// Its value.
        value: String,
    },
    /// The disk cache directory (or its `images-v<N>/`) is owned by another
    /// user, or other users may write to it: they could plant or replace
    /// compiled code there, so the disk tier is not used.
    #[error(
        "disk cache directory {path}: {problem}: another user could plant compiled code \
         there, or put another directory in its place; point KILN_CACHE_DIR at a directory of \
         your own that only you can write to (chmod go-w), below directories only you or root \
         can write to, or set KILN_CACHE_TRUST_DIR=1 to use it anyway"
    )]
    DiskDirUntrusted {
        /// The directory.
        path: PathBuf,
        /// What is wrong: its owner or its mode, or those of a directory
        /// above it.
        problem: String,
    },
    /// `KILN_CACHE_DIR` is unset and the platform has no cache directory.
    #[error(
        "no disk cache directory: KILN_CACHE_DIR is unset and the platform has no cache \
         directory (is HOME set?); set KILN_CACHE_DIR, or KILN_CACHE=0"
    )]
    DiskNoDir,

    // ----- extra tiers (cache/tier.rs) -----
    /// An extra tier (one added with `Cache::add_tier`, such as a remote
    /// tier) failed to load or store an entry, for a reason of its own. The
    /// cache logs it and goes on: a failed load is a miss, a failed store is
    /// ignored.
    #[error("cache tier {tier}: {source}")]
    Tier {
        /// The tier's name ([`Tier::name`](crate::Tier::name)).
        tier: String,
        /// The tier's own error.
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },

    // ----- backends (kiln-cuda and others) -----
    /// A compiler backend failed outside a compile (locating or loading its
    /// compiler, building a request's key). Backends convert their own error
    /// into this variant (`From`), so code returning [`Error`] can use `?` on
    /// a backend's calls; the backend's error is the source.
    #[error("{backend}: {source}")]
    Backend {
        /// The backend's crate, e.g. `kiln-cuda`.
        backend: &'static str,
        /// The backend's own error.
        source: BoxError,
    },

    // ----- recording (record.rs) -----
    /// A record file (`KILN_RECORD`, or one given to `kiln bake` or
    /// `kiln report`) could not be opened or read.
    #[error(
        "record file {path}: cannot {action}: {source} (give a regular file in a directory \
         you can write to; a symbolic link is not followed)"
    )]
    RecordIo {
        /// What was being done, e.g. "open for appending".
        action: &'static str,
        /// The record file.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },

    /// A tier's entry is not signed by a trusted key (`KILN_TRUSTED_KEYS`
    /// is set): refused, counted in
    /// [`Stats::tier_untrusted`](crate::Stats::tier_untrusted), and
    /// compiled instead.
    #[error("cache tier {tier}: entry {what} refused: {source}")]
    TierUntrusted {
        /// The tier's name.
        tier: String,
        /// Which entry (the tier's name for it).
        what: String,
        /// What the signature check found.
        source: Box<kiln_image::SignatureError>,
    },

    // ----- signatures (trust.rs) -----
    /// A file named in `KILN_TRUSTED_KEYS` cannot be used.
    #[error(
        "KILN_TRUSTED_KEYS names {path}, which cannot be used: {source} (fix the file or the \
         variable; its keys are not trusted meanwhile)"
    )]
    TrustedKeys {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        source: Box<kiln_image::KeyError>,
    },
    /// `KILN_SIGNING_KEY` names a file that is not a usable signing key.
    #[error(
        "KILN_SIGNING_KEY names {path}, which is not a usable signing key: {source} (give the \
         path of a key file written by `kiln keygen`)"
    )]
    SigningKey {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        source: Box<kiln_image::KeyError>,
    },
    /// A key file (trusted keys or a secret key) cannot be used.
    #[error("key file {path} cannot be used: {source}")]
    KeyFile {
        /// The file.
        path: PathBuf,
        /// Why it cannot be used.
        source: Box<kiln_image::KeyError>,
    },
    /// A secret key file that users other than its owner may read or write:
    /// refused before it is read.
    #[error(
        "signing key {path} may be read or written by other users (mode {mode:o}): run `chmod \
         600 {path}` (a key others can read signs for them too); nothing is signed with it"
    )]
    SigningKeyExposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// `KILN_SIGNING_KEY` holds what looks like a key, not a path.
    #[error(
        "KILN_SIGNING_KEY holds no file's path (it looks like a key: never put a key in a \
         variable; give the path of a key file written by `kiln keygen`, mode 0600)"
    )]
    SigningKeyNotAPath,
    /// An embedded image's record of the entries its build took unverified
    /// (`KILN_BUILD_UNVERIFIED`) cannot be read: with trusted keys, none of
    /// the image is served.
    #[error(
        "the image's record of unverified entries cannot be read ({why}): with trusted keys none \
         of its entries is served; rebuild the library without KILN_BUILD_UNVERIFIED"
    )]
    UnverifiedLabel {
        /// What is wrong with it.
        why: String,
    },

    // ----- init and build-script helpers (global.rs, registry.rs, build.rs) -----
    /// A directory of `KILN_IMAGE_PATH` could not be listed.
    #[error(
        "cannot list image directory {dir} named in KILN_IMAGE_PATH: {source}; fix or remove \
         the entry"
    )]
    ImageDirectory {
        /// The directory.
        dir: PathBuf,
        /// Why it could not be listed.
        source: std::io::Error,
    },
    /// `init_with` came after the global cache was initialized.
    #[error(
        "the global cache was initialized before init_with could set it up: call init_with \
         first thing in main, before any use of the cache (and without the `ctor` feature)"
    )]
    AlreadyInitialized,
    /// `Precompile::run` was called outside a build script without a directory.
    #[error(
        "OUT_DIR is not set: kiln::build::Precompile writes its image to OUT_DIR, which cargo \
         sets for build scripts; elsewhere, give the directory with Precompile::out_dir"
    )]
    OutDirUnset,
    /// Specializations of a precompile block (or the block) failed: the
    /// library's code does not compile. Each with its compiler's message.
    #[error("precompiling {name} failed: {}", failed_list(.failed))]
    Precompile {
        /// The image's name.
        name: String,
        /// Each failed specialization and why.
        failed: Vec<(String, String)>,
    },
    /// A shipped image's candidate file could not be written (feature
    /// `build`).
    #[cfg(feature = "build")]
    #[error(transparent)]
    Ship(#[from] kiln_ship::ShipError),
    /// A build-time `KILN_*` switch has a value it does not take.
    #[error("{variable}={value:?} is not understood: use {expected}")]
    InvalidSwitch {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// The `cargo:` directives of a build script could not be printed.
    #[error("cannot print the build script's cargo directives: {0}")]
    BuildOutput(#[source] std::io::Error),
}

/// Each operation's image error is an [`Error::Image`], so that `?` passes
/// it on as the crate's error.
macro_rules! image_error_from {
    ($($error:ident),*) => {$(
        impl From<kiln_image::$error> for Error {
            fn from(error: kiln_image::$error) -> Error {
                Error::Image(error.into())
            }
        }
    )*};
}

image_error_from!(
    ReadError,
    WriteError,
    SignatureError,
    KeyError,
    ParseDigestError
);

/// `label: message` for each failure, one per line.
fn failed_list(failed: &[(String, String)]) -> String {
    failed
        .iter()
        .map(|(label, why)| format!("\n  {label}: {why}"))
        .collect()
}
