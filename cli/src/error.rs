//! [`CliError`]: why a `kiln` subcommand could not do its job.
//!
//! Messages may quote an image or a cache directory (names, kinds, file
//! names): [`CliError::shown`] is the message as printed, escaped.

use std::path::PathBuf;

use kiln_image::{ImageError, KeyError};

/// Why a `kiln` subcommand could not do its job.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// A shipped image or a precompile block's candidate could not be read
    /// or written.
    #[error("{path}")]
    Ship {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        #[source]
        source: Box<kiln_ship::ShipError>,
    },

    /// `ship`: cargo could not be run.
    #[error("cannot run cargo build (set CARGO to the cargo binary)")]
    Cargo(#[source] std::io::Error),

    /// `ship`: the build failed.
    #[error("cargo build failed ({0}): fix the build, then ship")]
    BuildFailed(std::process::ExitStatus),

    /// `ship`: a precompile block did not write its entries.
    #[error(
        "the precompile block of {0} wrote no entries file although KILN_SHIP_CANDIDATE was set: \
         the library's build-dependency on kiln is older than this kiln tool"
    )]
    NoEntries(PathBuf),

    /// `ship`: no precompile block ran in the build.
    #[error(
        "no local package of this build ran a precompile block (kiln::build::Precompile): run          kiln ship in the library's folder, or give --manifest-path or -p"
    )]
    NothingToShip,

    /// An image could not be opened, read or written.
    #[error("{path}")]
    Image {
        /// The image file.
        path: PathBuf,
        /// What went wrong (boxed: image errors are large).
        #[source]
        source: Box<ImageError>,
    },

    /// The disk cache could not be opened or maintained, or a record file
    /// read.
    #[error(transparent)]
    Cache(#[from] kiln_core::Error),

    /// A file other than an image (`report --svg`) could not be written.
    #[error("cannot write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// What the operating system reported.
        source: std::io::Error,
    },

    /// `settings --write-table`: the file could not be read or written.
    #[error("cannot update the switch table of {path}: {error}")]
    Table {
        /// The file.
        path: PathBuf,
        /// What the operating system reported.
        error: std::io::Error,
    },

    /// `settings --write-table`: the file has no switch table markers.
    #[error(
        "{path} has no switch table: put the lines {begin:?} and {end:?} around the place for it"
    )]
    NoTableMarkers {
        /// The file.
        path: PathBuf,
        /// The line before the table.
        begin: &'static str,
        /// The line after it.
        end: &'static str,
    },

    /// `report --svg`: the chart could not be drawn.
    #[error("drawing the chart failed: {0}")]
    Chart(String),

    /// Writing to standard output failed.
    #[error("writing the output failed")]
    Output(#[from] std::io::Error),

    /// JSON encoding failed.
    #[error("encoding JSON failed")]
    Json(#[from] serde_json::Error),

    /// `extract` found no entry.
    #[error("no entry of {path} is named {pattern:?} or has a key starting with it")]
    NoMatch {
        /// The image.
        path: PathBuf,
        /// The name or key prefix asked for.
        pattern: String,
    },

    /// `extract` found several entries.
    #[error("{count} entries match {pattern:?}; use a longer key prefix or --owner:\n{candidates}")]
    Ambiguous {
        /// The name or key prefix asked for.
        pattern: String,
        /// How many entries match.
        count: usize,
        /// One line per matching entry (at most 20).
        candidates: String,
    },

    /// `extract` needs `--kind` to choose among several artifacts.
    #[error("entry {name:?} has {count} artifacts ({kinds}): choose one with --kind")]
    KindRequired {
        /// The entry.
        name: String,
        /// Number of artifacts.
        count: usize,
        /// Their kinds.
        kinds: String,
    },

    /// `extract --kind` names a kind the entry does not have.
    #[error("entry {name:?} has no {kind} artifact (it has: {kinds})")]
    NoSuchKind {
        /// The entry.
        name: String,
        /// The kind asked for.
        kind: String,
        /// The kinds it has.
        kinds: String,
    },

    /// `install`: the last argument is not a directory.
    #[error("{path} is not a directory: give an existing directory as the last argument")]
    NotADirectory {
        /// The argument.
        path: PathBuf,
    },

    /// `bake --cache-dir`: the directory does not exist.
    #[error(
        "{path} is not a directory: give the disk cache directory (KILN_CACHE_DIR) of a machine \
         that ran the application"
    )]
    NoCacheDir {
        /// The argument.
        path: PathBuf,
    },

    /// `bake --remote`: the remote cache cannot be used (its URL, or
    /// `KILN_REMOTE_TIMEOUT_MS`).
    #[error(transparent)]
    Remote(#[from] kiln_redis::Error),

    /// `bake --remote` with `KILN_SIGNING_KEY` but no `KILN_TRUSTED_KEYS`.
    #[error(
        "kiln bake --remote with KILN_SIGNING_KEY needs KILN_TRUSTED_KEYS: the remote cache is \
         untrusted, and the baked image would be signed over values no trusted key vouched for \
         (set KILN_TRUSTED_KEYS to the keys of the fleet's writers, or bake unsigned)"
    )]
    SigningUnverifiedRemote,

    /// A signed `bake` found entries only where nothing vouches for them.
    #[error(
        "kiln bake with KILN_SIGNING_KEY: {count} recorded entries were found only where no \
         trusted key vouches for them, so nothing is signed or written:\n{entries}\nA signed \
         image may hold only what a trusted key signed (KILN_TRUSTED_KEYS, --trusted-key) or \
         what this user's processes compiled into their private disk cache; bake without \
         KILN_SIGNING_KEY to write an unsigned image"
    )]
    SigningUnvouched {
        /// How many entries.
        count: usize,
        /// One line per entry (name, store, why), escaped where built.
        entries: String,
    },

    /// `bake --remote ""`.
    #[error("--remote needs the server's URL, e.g. redis://cache.internal:6379/0")]
    NoRemoteUrl,

    /// `install`: an image argument is not a regular file.
    #[error("{path} is not a regular file: give image files")]
    NotAFile {
        /// The argument.
        path: PathBuf,
    },

    /// `install --name` with several images.
    #[error(
        "--name names one file, but {count} images were given: install them under their own names"
    )]
    NameForSeveral {
        /// How many images were given.
        count: usize,
    },

    /// `install --name` with a path, `.`, `..` or nothing.
    #[error(
        "--name {name:?} is not a plain file name: give a name such as kernels.kimg, without a directory"
    )]
    NotAFileName {
        /// The name given.
        name: String,
    },

    /// `install`: an image path that ends in `..` or `/`.
    #[error("{path} has no file name: give the image file's path, or use --name")]
    NoFileName {
        /// The image argument.
        path: PathBuf,
    },

    /// `keygen`: the file exists; keys are never overwritten.
    #[error("{path} exists: keys are never overwritten; choose another name")]
    Exists {
        /// The file.
        path: PathBuf,
    },

    /// A `--trusted-key` argument is not a public key.
    #[error("--trusted-key {arg}")]
    Key {
        /// The argument.
        arg: String,
        /// What is wrong with it.
        #[source]
        source: Box<KeyError>,
    },

    /// A file could not be read.
    #[error("cannot read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What the operating system (or the size limit) said.
        source: std::io::Error,
    },

    /// `kernels`: no file holds a Kiln image.
    #[error(
        "no Kiln image found ({files}): give the application binary (built with kiln's \
         include_image!), image files or shipped images (.kship)"
    )]
    NoImage {
        /// What each file held, one clause per file.
        files: String,
    },

    /// `kernels`: the images hold no CUDA kernel library.
    #[error(
        "the {images} images hold no CUDA kernel library (no entry of kiln-cuda's NVRTC owners; \
         {other} entries of other compilers)"
    )]
    NoKernelLibrary {
        /// How many images were found.
        images: usize,
        /// Their entries of other compilers.
        other: usize,
    },

    /// `kernels`: a file with more image headers than it has room for.
    #[error(
        "{count} image headers were left unchecked: the images they declare add up to more than \
         twice the file (images in a binary never overlap), so the file is damaged or made to \
         cost more than it weighs; the report above may lack their kernels"
    )]
    TooManyImageHeaders {
        /// How many candidates were left unchecked.
        count: usize,
    },

    /// `install`: two images with the same file name.
    #[error("two images would be installed as {name}: install them one at a time, or use --name")]
    SameName {
        /// The file name both would get.
        name: PathBuf,
    },
}

impl CliError {
    /// The message as `kiln` prints it, with its causes: every control character and
    /// bidirectional override [escaped](crate::escape::escape), line
    /// breaks included, except the ones between the candidate lines of
    /// [`CliError::Ambiguous`] (whose text is escaped where it is built).
    pub(crate) fn shown(&self) -> String {
        // Its causes too: a message never repeats the error it returns from
        // `source()`.
        let message = kiln_core::ErrorChain(self).to_string();
        match self {
            CliError::Ambiguous { .. } | CliError::SigningUnvouched { .. } => {
                crate::escape::escape_lines(&message)
            }
            _ => crate::escape::escape(&message).into_owned(),
        }
    }

    /// Attaches a `--trusted-key` argument to a [`KeyError`].
    pub(crate) fn key(arg: &str) -> impl FnOnce(KeyError) -> CliError + '_ {
        move |source| CliError::Key {
            arg: arg.to_owned(),
            source: Box::new(source),
        }
    }

    /// Attaches the image path to a [`kiln_ship::ShipError`].
    pub(crate) fn ship(
        path: &std::path::Path,
    ) -> impl FnOnce(kiln_ship::ShipError) -> CliError + '_ {
        move |source| CliError::Ship {
            path: path.to_owned(),
            source: Box::new(source),
        }
    }

    /// Attaches an image's path to an image error (reading, writing,
    /// signing or a key's).
    pub(crate) fn image<E: Into<ImageError>>(
        path: &std::path::Path,
    ) -> impl FnOnce(E) -> CliError + '_ {
        move |source| CliError::Image {
            path: path.to_owned(),
            source: Box::new(source.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use kiln_test_support::errors::assert_cause_not_repeated;

    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::other("the disk is on fire")
    }

    /// Every variant that carries a cause: its message does not repeat it,
    /// and `kiln` prints the cause after it.
    #[test]
    fn no_message_repeats_the_cause_it_returns() {
        let read = kiln_image::ReadError::Io {
            action: "open",
            path: "/a.kimg".into(),
            source: io(),
        };
        let json = serde_json::from_str::<u32>("x").expect_err("not JSON");
        let samples = [
            CliError::Ship {
                path: "/a.kship".into(),
                source: Box::new(kiln_ship::ShipError::BadIndex("it does not decode".into())),
            },
            CliError::Cargo(io()),
            CliError::Image {
                path: "/a.kimg".into(),
                source: Box::new(read.into()),
            },
            CliError::Write {
                path: "/out".into(),
                source: io(),
            },
            CliError::Output(io()),
            CliError::Json(json),
            CliError::Key {
                arg: "/keys".into(),
                source: Box::new(KeyError::Invalid("not a key".into())),
            },
            CliError::Read {
                path: "/in".into(),
                source: io(),
            },
        ];
        for error in &samples {
            assert_cause_not_repeated(error);
        }
        let shown = samples[1].shown();
        assert!(shown.ends_with(": the disk is on fire"), "{shown}");
    }
}
