//! Opening regular files the safe way, and reading them bounded: the one
//! place kiln opens a file whose name someone else may control (the files
//! of the cache directory, record files, key files, images named on a
//! command line).
//!
//! [`open`] opens with `O_NONBLOCK` (a FIFO or a device named like the
//! file does not block the open), and with [`Links::Refuse`] also
//! `O_NOFOLLOW` (a symbolic link under that name is refused, never
//! followed); then `fstat` on the opened descriptor: anything but a
//! regular file is refused with an error that says what it is
//! ([`is_not_regular`]). `O_NONBLOCK` is then cleared, so reads and writes
//! behave as usual, and the file returned is the very one checked: nothing
//! is opened again by name.
//!
//! [`read`] reads at most a limit, whatever the file's size says and
//! whatever it grows to meanwhile: a file larger than the limit is an
//! error, not a long read.
//!
//! What another user could change through a directory is checked as ssh
//! checks `~/.ssh` ([`shared_ancestor`]): every directory above a path,
//! and above the path its links lead to, must belong to this user or root
//! and be writable by no one else, or another user could rename the file
//! (or a directory above it) away and put their own in its place. One
//! difference: a directory with the sticky bit, such as `/tmp`, may be
//! writable by everyone, since there nobody renames or removes what
//! another user owns, and what lies below it must itself pass the check.
//!
//! ```
//! use kiln_core::regular_file::{self, Links};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("small");
//! std::fs::write(&path, b"twelve bytes")?;
//! assert_eq!(regular_file::read(&path, Links::Refuse, 64)?, b"twelve bytes");
//! // Larger than the limit: an error, after reading at most limit + 1 bytes.
//! assert!(regular_file::read(&path, Links::Refuse, 4).is_err());
//! // A directory is no regular file.
//! let error = regular_file::read(dir.path(), Links::Follow, 64).unwrap_err();
//! assert!(regular_file::is_not_regular(&error));
//! # Ok::<(), std::io::Error>(())
//! ```

use std::fs::File;
use std::io::{self, Read};
use std::path::Path;

/// How [`open`] opens a file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Read only; the file must exist.
    Read,
    /// Read and write, created with the given mode when missing.
    ReadWriteCreate(u32),
    /// Append only, created with the given mode when missing.
    AppendCreate(u32),
}

/// Whether [`open`] follows a symbolic link at the path's last component.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Links {
    /// Refuse it (`O_NOFOLLOW`): for names inside a directory kiln owns
    /// (the cache's files) or that a process appends to (record files).
    Refuse,
    /// Follow it: for paths a user names (a key file, which secret mounts
    /// often reach through links; an image on a command line). The target
    /// must still be a regular file.
    Follow,
}

/// Opens `path` as the [module docs](self) say.
///
/// # Errors
/// The open's error; an error saying what the file is when it is not a
/// regular file ([`is_not_regular`] tells it apart), or a symbolic link
/// with [`Links::Refuse`].
#[cfg(unix)]
pub fn open(path: &Path, access: Access, links: Links) -> io::Result<File> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::io::Errno;
    let (access_flags, mode) = match access {
        Access::Read => (OFlags::RDONLY, 0),
        Access::ReadWriteCreate(mode) => (OFlags::RDWR | OFlags::CREATE, mode),
        Access::AppendCreate(mode) => (OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE, mode),
    };
    let mut flags = OFlags::NONBLOCK | OFlags::CLOEXEC | access_flags;
    if links == Links::Refuse {
        flags |= OFlags::NOFOLLOW;
    }
    let fd = match rustix::fs::open(path, flags, Mode::from_raw_mode(mode)) {
        Ok(fd) => fd,
        Err(Errno::LOOP) if links == Links::Refuse => {
            return Err(not_regular(path, "a symbolic link"));
        }
        // Opening a FIFO without reader, or a socket, for writing.
        Err(Errno::NXIO) => return Err(not_regular(path, "a FIFO or a socket")),
        Err(errno) => return Err(errno.into()),
    };
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::RegularFile {
        let what = match kind {
            FileType::Directory => "a directory",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            FileType::CharacterDevice | FileType::BlockDevice => "a device",
            _ => "not a regular file",
        };
        return Err(not_regular(path, what));
    }
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

/// Opens `path` as the Unix version does, where the platform has no
/// `O_NOFOLLOW` or `O_NONBLOCK`: opened, then checked to be a regular file.
///
/// # Errors
/// As the Unix version.
#[cfg(not(unix))]
pub fn open(path: &Path, access: Access, _links: Links) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    match access {
        Access::Read => options.read(true),
        Access::ReadWriteCreate(_) => options.read(true).write(true).create(true),
        Access::AppendCreate(_) => options.append(true).create(true),
    };
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular(path, "not a regular file"));
    }
    Ok(file)
}

/// The bytes of the regular file at `path` ([`open`] with [`Access::Read`]),
/// at most `limit` of them.
///
/// # Errors
/// As [`open`]; a read error; [`io::ErrorKind::InvalidData`] when the file
/// holds more than `limit` bytes (at most `limit + 1` are read to tell).
pub fn read(path: &Path, links: Links, limit: u64) -> io::Result<Vec<u8>> {
    let file = open(path, Access::Read, links)?;
    let size = file.metadata()?.len();
    read_file(file, size.min(limit), limit).and_then(|bytes| {
        if bytes.len() as u64 > limit {
            Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is larger than {limit} bytes", path.display()),
            ))
        } else {
            Ok(bytes)
        }
    })
}

/// Reads `file` from where it stands: at most `limit + 1` bytes (so that a
/// caller can tell a file larger than `limit`), with room for `expected`
/// reserved first (its size at open, capped by the caller).
///
/// # Errors
/// The read's error.
pub fn read_file(file: File, expected: u64, limit: u64) -> io::Result<Vec<u8>> {
    let mut bytes = Vec::with_capacity(usize::try_from(expected).unwrap_or(0));
    file.take(limit.saturating_add(1)).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Why another user could replace what `path` names through a directory
/// above it, if they could (see the [module docs](self)): `Ok(None)` when
/// every directory above `path` (made absolute), and above the path its
/// symbolic links resolve to, is owned by this process's effective user or
/// by root and is not writable by group or others, or carries the sticky
/// bit. The path itself is not checked (its owner and mode are its
/// caller's rule).
///
/// ```
/// use kiln_core::regular_file::shared_ancestor;
/// let dir = tempfile::tempdir()?;
/// // The test's temporary directory sits in the system's (sticky) one.
/// assert_eq!(shared_ancestor(&dir.path().join("file"))?, None);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # Errors
/// When `path`'s real location cannot be resolved or a directory above it
/// cannot be read (a missing last component is fine: its parent is
/// resolved instead).
#[cfg(unix)]
pub fn shared_ancestor(path: &Path) -> io::Result<Option<String>> {
    use std::os::unix::fs::MetadataExt;
    let given = std::path::absolute(path)?;
    let real = match std::fs::canonicalize(&given) {
        Ok(real) => real,
        // Not there yet (a directory about to be created): its parent's.
        Err(err) if err.kind() == io::ErrorKind::NotFound => match given.parent() {
            Some(parent) => {
                std::fs::canonicalize(parent)?.join(given.file_name().unwrap_or_default())
            }
            None => given.clone(),
        },
        Err(err) => return Err(err),
    };
    let me = rustix::process::geteuid().as_raw();
    let mut seen = std::collections::HashSet::new();
    for dir in given.ancestors().skip(1).chain(real.ancestors().skip(1)) {
        if !seen.insert(dir.to_path_buf()) {
            continue;
        }
        let meta = std::fs::metadata(dir)?;
        let mode = meta.mode() & 0o7777;
        if meta.uid() != me && meta.uid() != 0 {
            return Ok(Some(format!(
                "the directory {} above it is owned by user {} (this process runs as user {me})",
                dir.display(),
                meta.uid()
            )));
        }
        if mode & 0o022 != 0 && mode & 0o1000 == 0 {
            return Ok(Some(format!(
                "the directory {} above it is writable by other users (mode {mode:o})",
                dir.display()
            )));
        }
    }
    Ok(None)
}

/// Ownership and modes are not checked where the platform has none.
///
/// # Errors
/// None.
#[cfg(not(unix))]
pub fn shared_ancestor(_path: &Path) -> io::Result<Option<String>> {
    Ok(None)
}

/// Whether `err` is [`open`]'s refusal of something that is not a regular
/// file (a directory, a FIFO, a device, a socket, or a symbolic link with
/// [`Links::Refuse`]).
pub fn is_not_regular(err: &io::Error) -> bool {
    err.get_ref().is_some_and(|inner| inner.is::<NotRegular>())
}

/// What [`open`] refused.
#[derive(Debug)]
struct NotRegular(String);

impl std::fmt::Display for NotRegular {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotRegular {}

/// The error for `path`, which is `what` instead of a regular file.
pub(crate) fn not_regular(path: &Path, what: &str) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        NotRegular(format!(
            "{} is {what}, not a regular file: kiln neither follows nor opens it",
            path.display()
        )),
    )
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn links_fifos_devices_and_directories_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("file");
        std::fs::write(&file, b"data").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        let fifo = dir.path().join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );

        assert_eq!(read(&file, Links::Refuse, 4).unwrap(), b"data");
        assert_eq!(read(&link, Links::Follow, 4).unwrap(), b"data");
        for (path, links) in [
            (&link, Links::Refuse),
            (&fifo, Links::Refuse),
            (&fifo, Links::Follow),
            (&dir.path().to_path_buf(), Links::Follow),
            (&Path::new("/dev/zero").to_path_buf(), Links::Follow),
        ] {
            let error = read(path, links, 1 << 20).unwrap_err();
            assert!(is_not_regular(&error), "{}: {error}", path.display());
        }
        let error = open(&fifo, Access::AppendCreate(0o600), Links::Refuse).unwrap_err();
        assert!(is_not_regular(&error), "{error}");
        let error = read(&file, Links::Refuse, 3).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn a_directory_above_that_others_may_write_is_named_unless_it_is_sticky() {
        use std::os::unix::fs::PermissionsExt;
        let root = tempfile::tempdir().unwrap();
        let chmod = |path: &Path, mode: u32| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap()
        };
        let shared = root.path().join("shared");
        let below = shared.join("below");
        std::fs::create_dir_all(&below).unwrap();
        let file = below.join("keys");
        assert_eq!(shared_ancestor(&file).unwrap(), None);
        chmod(&shared, 0o777);
        let why = shared_ancestor(&file).unwrap().expect("refused");
        assert!(why.contains("shared") && why.contains("777"), "{why}");
        chmod(&shared, 0o1777);
        assert_eq!(shared_ancestor(&file).unwrap(), None, "sticky");
        chmod(&shared, 0o775);
        assert!(shared_ancestor(&file).unwrap().is_some(), "group-writable");
        // Through a link: the directories of the link's target count too.
        chmod(&shared, 0o755);
        let elsewhere = root.path().join("elsewhere");
        let open = elsewhere.join("open");
        std::fs::create_dir_all(&open).unwrap();
        chmod(&elsewhere, 0o757);
        std::os::unix::fs::symlink(&open, below.join("link")).unwrap();
        let why = shared_ancestor(&below.join("link").join("keys")).unwrap();
        assert!(why.is_some_and(|why| why.contains("elsewhere")));
        // A path not there yet is checked through its parent.
        assert_eq!(shared_ancestor(&below.join("missing")).unwrap(), None);
    }
}
