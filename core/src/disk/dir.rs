//! The cache directory itself: whether it may hold a cache this process
//! trusts ([`check_dir`]: this user's, writable by nobody else), and
//! creating it private ([`DIR_MODE`]).

use std::fs;
use std::io;
use std::path::Path;

use crate::error::Error;

/// The mode of the directories the disk cache creates (the cache directory
/// and its `images-v<N>/`): the user's alone. Given to `mkdir`, so the
/// directory never exists with a wider mode (the umask can only narrow it).
pub(crate) const DIR_MODE: u32 = 0o700;

/// Creates `dir` and any missing parent with [`DIR_MODE`].
pub(crate) fn create_dirs(dir: &Path) -> io::Result<()> {
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, DIR_MODE);
    builder.create(dir)
}

/// Why the directory `meta` describes must not hold a cache that this
/// process trusts, if it must not: another user owns it, or users other
/// than its owner may write to it (group or others write bit, sticky or
/// not). Either way another user could plant files there.
#[cfg(unix)]
pub(crate) fn untrusted_dir(meta: &fs::Metadata) -> Option<String> {
    use std::os::unix::fs::MetadataExt;
    let me = rustix::process::geteuid().as_raw();
    if meta.uid() != me {
        return Some(format!(
            "owned by user {} (this process runs as user {me})",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "writable by other users (mode {mode:o}; the disk cache creates 700)"
        ));
    }
    None
}

/// Ownership and modes are not checked where the platform has none.
#[cfg(not(unix))]
pub(crate) fn untrusted_dir(_: &fs::Metadata) -> Option<String> {
    None
}

/// Checks the directory `dir` (creating it, with mode 700, when missing):
/// it must be a directory, and unless `trust` also owned by this process's
/// user and not writable by other users ([`untrusted_dir`]). A
/// symbolic link to a directory is followed (users may point
/// `KILN_CACHE_DIR` anywhere); its target is checked.
pub(crate) fn check_dir(dir: &Path, trust: bool) -> Result<(), Error> {
    let io = |action: &'static str| {
        move |source| Error::DiskIo {
            action,
            path: dir.to_path_buf(),
            source,
        }
    };
    let meta = match std::fs::metadata(dir) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            create_dirs(dir).map_err(io("create directory"))?;
            std::fs::metadata(dir).map_err(io("open"))?
        }
        other => other.map_err(io("open"))?,
    };
    if !meta.is_dir() {
        let not_dir = std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "exists and is not a directory",
        );
        return Err(io("open")(not_dir));
    }
    match untrusted_dir(&meta) {
        Some(problem) if !trust => Err(Error::DiskDirUntrusted {
            path: dir.to_path_buf(),
            problem,
        }),
        _ => Ok(()),
    }
}

/// The one warning when the disk cache cannot be used at all.
pub(crate) fn warn_unavailable(error: &Error) {
    tracing::warn!(%error, "kiln disk cache unavailable: compiled code will not persist across runs");
}
