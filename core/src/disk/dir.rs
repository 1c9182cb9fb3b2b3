//! The cache directory, held: checked once, then used only through its
//! handle ([`Dir`]).
//!
//! [`open_checked`] opens the directory a user names (following links: users
//! point `KILN_CACHE_DIR` anywhere), and checks the directory it opened: it
//! must be this process's user's, writable by nobody else, and so must be
//! every directory above it (owned by this user or root, writable by no one
//! else unless sticky, as ssh requires of `~/.ssh`:
//! [`crate::regular_file::shared_ancestor`]). Every file of the cache is then
//! opened, created, listed, renamed and removed relative to that handle
//! (`openat`, `renameat`, `unlinkat`, `fstatat`), never by path again: a
//! directory renamed away and replaced by a link, or by another directory,
//! after the check is never read or written by this process, which keeps
//! using the directory it checked.

use std::ffi::OsStr;
use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

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

/// Why a directory of owner `uid` and `mode` must not hold a cache that
/// this process trusts, if it must not: another user owns it, or users
/// other than its owner may write to it (group or others write bit, sticky
/// or not). Either way another user could plant files there.
#[cfg(unix)]
fn untrusted_dir(uid: u32, mode: u32) -> Option<String> {
    let me = rustix::process::geteuid().as_raw();
    if uid != me {
        return Some(format!(
            "owned by user {uid} (this process runs as user {me})"
        ));
    }
    let mode = mode & 0o7777;
    if mode & 0o022 != 0 {
        return Some(format!(
            "writable by other users (mode {mode:o}; the disk cache creates 700)"
        ));
    }
    None
}

/// How [`Dir::open_file`] opens a file of the cache directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Access {
    /// Read only; the file must exist (segments, `stamps` when read).
    Read,
    /// Read and write, created with [`FILE_MODE`] when missing (`lock`).
    ReadWriteCreate,
    /// Append only, created with [`FILE_MODE`] when missing (`stamps`).
    AppendCreate,
}

/// The mode of the files the disk cache creates (segments, `stamps`,
/// `lock`, temporary files): read and written by the user alone. Given to
/// `open` (`O_CREAT`), never set afterwards.
pub(crate) const FILE_MODE: u32 = 0o600;

/// A name in a [`Dir`], as a listing gives it.
#[derive(Clone, Debug)]
pub(crate) struct Listed {
    /// The file name.
    pub(crate) name: String,
    /// Whether the directory entry is a regular file (no link followed).
    pub(crate) is_file: bool,
    /// Its inode number, where the platform has one.
    pub(crate) ino: Option<u64>,
}

/// What [`Dir::stat`] tells of a name, without following a link.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Stat {
    /// Whether it is a regular file.
    pub(crate) is_file: bool,
    /// Its size.
    pub(crate) len: u64,
    /// Its modification time.
    pub(crate) modified: SystemTime,
}

/// A directory opened once, used through its handle (see the [module
/// docs](self)). `Send + Sync`.
pub(crate) struct Dir {
    /// The path it was opened by: for messages only, never opened again.
    path: PathBuf,
    #[cfg(unix)]
    fd: std::os::fd::OwnedFd,
}

impl std::fmt::Debug for Dir {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Dir").field(&self.path).finish()
    }
}

/// Opens the directory `path` (creating it, and any missing parent, with
/// mode 700 when missing) and checks it as the [module docs](self) say,
/// unless `trust` (`KILN_CACHE_TRUST_DIR`): its handle.
///
/// # Errors
/// [`Error::DiskDirUntrusted`] for a directory another user owns or may
/// write to, or below a directory others may write to or own;
/// [`Error::DiskIo`] when it cannot be created or opened, or is not a
/// directory.
pub(crate) fn open_checked(path: &Path, trust: bool) -> Result<Dir, Error> {
    let io = |action: &'static str| {
        move |source| Error::DiskIo {
            action,
            path: path.to_path_buf(),
            source,
        }
    };
    if let Err(err) = fs::symlink_metadata(path)
        && err.kind() == io::ErrorKind::NotFound
    {
        create_dirs(path).map_err(io("create directory"))?;
    }
    let dir = Dir::open(path).map_err(io("open"))?;
    if !trust {
        let untrusted = |problem: String| Error::DiskDirUntrusted {
            path: path.to_path_buf(),
            problem,
        };
        if let Some(problem) = dir.untrusted().map_err(io("open"))? {
            return Err(untrusted(problem));
        }
        let above = crate::regular_file::shared_ancestor(path).map_err(io("open"))?;
        if let Some(problem) = above {
            return Err(untrusted(problem));
        }
        // The path still names the directory checked: nothing was swapped
        // while the directories above it were.
        if !dir.is_at(path).map_err(io("open"))? {
            return Err(untrusted(
                "replaced by another directory while it was checked".to_owned(),
            ));
        }
    }
    Ok(dir)
}

/// Temporary files (segments or stamps being written) start with this.
pub(crate) const TEMP_PREFIX: &str = ".tmp-";

/// A process-wide counter for temporary file names.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new temporary file name: the prefix, the process id, a counter and
/// the clock's nanoseconds (created exclusively, so a collision is retried).
fn temp_name() -> String {
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!(
        "{}{}-{}-{nanos:x}",
        TEMP_PREFIX,
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(unix)]
impl Dir {
    /// Opens the directory `path` (following links), as a handle.
    fn open(path: &Path) -> io::Result<Dir> {
        use rustix::fs::{Mode, OFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let fd = rustix::fs::open(path, flags, Mode::empty()).map_err(|errno| {
            if errno == rustix::io::Errno::NOTDIR {
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "exists and is not a directory",
                )
            } else {
                errno.into()
            }
        })?;
        Ok(Dir {
            path: path.to_path_buf(),
            fd,
        })
    }

    /// Why this directory must not hold a cache this process trusts (see
    /// [`untrusted_dir`]), from its handle.
    pub(crate) fn untrusted(&self) -> io::Result<Option<String>> {
        let stat = rustix::fs::fstat(&self.fd)?;
        Ok(untrusted_dir(stat.st_uid, stat.st_mode))
    }

    /// Whether `path` names this very directory now.
    fn is_at(&self, path: &Path) -> io::Result<bool> {
        let held = rustix::fs::fstat(&self.fd)?;
        let named = rustix::fs::stat(path)?;
        Ok((held.st_dev, held.st_ino) == (named.st_dev, named.st_ino))
    }

    /// The subdirectory `name` (created with [`DIR_MODE`] when missing),
    /// opened relative to this one, never through a link: checked as
    /// [`open_checked`] checks the directory itself (its owner and mode;
    /// the directories above it are this one's), unless `trust`.
    pub(crate) fn subdir(&self, name: &str, trust: bool) -> Result<Dir, Error> {
        use rustix::fs::{Mode, OFlags};
        let path = self.path.join(name);
        let io = |action: &'static str| {
            let path = path.clone();
            move |source| Error::DiskIo {
                action,
                path,
                source,
            }
        };
        match rustix::fs::mkdirat(&self.fd, name, Mode::from_raw_mode(DIR_MODE)) {
            Ok(()) | Err(rustix::io::Errno::EXIST) => {}
            Err(errno) => return Err(io("create directory")(errno.into())),
        }
        let flags = OFlags::RDONLY
            | OFlags::DIRECTORY
            | OFlags::NOFOLLOW
            | OFlags::CLOEXEC
            | OFlags::NONBLOCK;
        let fd = rustix::fs::openat(&self.fd, name, flags, Mode::empty()).map_err(|errno| {
            io("open")(match errno {
                rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP => io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "exists and is not a directory (a link is not followed)",
                ),
                errno => errno.into(),
            })
        })?;
        let dir = Dir {
            path: path.clone(),
            fd,
        };
        if !trust && let Some(problem) = dir.untrusted().map_err(io("open"))? {
            return Err(Error::DiskDirUntrusted {
                path: dir.path,
                problem,
            });
        }
        Ok(dir)
    }

    /// Opens the file `name` of this directory the one safe way
    /// ([`crate::regular_file`]'s rules, relative to the handle): never
    /// through a symbolic link, never blocking on a FIFO or a device, only
    /// a regular file, created with [`FILE_MODE`].
    pub(crate) fn open_file(&self, name: &str, access: Access) -> io::Result<File> {
        use rustix::fs::{FileType, Mode, OFlags};
        use rustix::io::Errno;
        let access_flags = match access {
            Access::Read => OFlags::RDONLY,
            Access::ReadWriteCreate => OFlags::RDWR | OFlags::CREATE,
            Access::AppendCreate => OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
        };
        let flags = OFlags::NONBLOCK | OFlags::CLOEXEC | OFlags::NOFOLLOW | access_flags;
        let path = self.path.join(name);
        let fd = match rustix::fs::openat(&self.fd, name, flags, Mode::from_raw_mode(FILE_MODE)) {
            Ok(fd) => fd,
            Err(Errno::LOOP) => {
                return Err(crate::regular_file::not_regular(&path, "a symbolic link"));
            }
            Err(Errno::NXIO) => {
                return Err(crate::regular_file::not_regular(
                    &path,
                    "a FIFO or a socket",
                ));
            }
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
            return Err(crate::regular_file::not_regular(&path, what));
        }
        let flags = rustix::fs::fcntl_getfl(&fd)?;
        rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
        Ok(File::from(fd))
    }

    /// Every name in the directory but `.` and `..` (names that are not
    /// UTF-8 are left out: the cache never writes one).
    pub(crate) fn list(&self) -> io::Result<Vec<Listed>> {
        let mut listed = Vec::new();
        for entry in rustix::fs::Dir::read_from(&self.fd)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." {
                continue;
            }
            let is_file = match entry.file_type() {
                rustix::fs::FileType::RegularFile => true,
                // Some file systems do not say: ask, without following.
                rustix::fs::FileType::Unknown => {
                    self.stat(name).ok().flatten().is_some_and(|s| s.is_file)
                }
                _ => false,
            };
            listed.push(Listed {
                name: name.to_owned(),
                is_file,
                ino: Some(entry.ino()),
            });
        }
        Ok(listed)
    }

    /// What `name` is (no link followed); `None` when there is nothing.
    pub(crate) fn stat(&self, name: &str) -> io::Result<Option<Stat>> {
        use rustix::fs::{AtFlags, FileType};
        let stat = match rustix::fs::statat(&self.fd, name, AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(rustix::io::Errno::NOENT) => return Ok(None),
            Err(errno) => return Err(errno.into()),
        };
        Ok(Some(Stat {
            is_file: FileType::from_raw_mode(stat.st_mode) == FileType::RegularFile,
            len: u64::try_from(stat.st_size).unwrap_or(0),
            modified: time_of(stat.st_mtime as i64, stat.st_mtime_nsec as u32),
        }))
    }

    /// The directory's modification time, from its handle.
    pub(crate) fn modified(&self) -> io::Result<SystemTime> {
        let stat = rustix::fs::fstat(&self.fd)?;
        Ok(time_of(stat.st_mtime as i64, stat.st_mtime_nsec as u32))
    }

    /// Removes `name` (whatever it is, a link included, not followed); a
    /// name already gone is not an error.
    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        match rustix::fs::unlinkat(&self.fd, name, rustix::fs::AtFlags::empty()) {
            Ok(()) | Err(rustix::io::Errno::NOENT) => Ok(()),
            Err(errno) => Err(errno.into()),
        }
    }

    /// Renames `from` to `to`, replacing what `to` names.
    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        Ok(rustix::fs::renameat(&self.fd, from, &self.fd, to)?)
    }

    /// Renames `from` to `to` unless `to` exists
    /// ([`io::ErrorKind::AlreadyExists`] then).
    pub(crate) fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<()> {
        #[cfg(any(target_os = "linux", target_os = "android", target_vendor = "apple"))]
        match rustix::fs::renameat_with(
            &self.fd,
            from,
            &self.fd,
            to,
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => return Ok(()),
            // File systems without it: a hard link, then the unlink.
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::NOSYS) => {}
            Err(errno) => return Err(errno.into()),
        }
        rustix::fs::linkat(&self.fd, from, &self.fd, to, rustix::fs::AtFlags::empty())?;
        self.remove(from)
    }

    /// Makes renames and deletions in the directory durable.
    pub(crate) fn sync(&self) -> io::Result<()> {
        Ok(rustix::fs::fsync(&self.fd)?)
    }

    /// A new temporary file in the directory, created exclusively with
    /// [`FILE_MODE`] (never through a link), removed unless persisted.
    pub(crate) fn temp_file(&self) -> io::Result<TempFile<'_>> {
        use rustix::fs::{Mode, OFlags};
        loop {
            let name = temp_name();
            let flags =
                OFlags::RDWR | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            match rustix::fs::openat(
                &self.fd,
                name.as_str(),
                flags,
                Mode::from_raw_mode(FILE_MODE),
            ) {
                Ok(fd) => {
                    return Ok(TempFile {
                        dir: self,
                        name,
                        file: File::from(fd),
                        kept: false,
                    });
                }
                Err(rustix::io::Errno::EXIST) => continue,
                Err(errno) => return Err(errno.into()),
            }
        }
    }
}

/// A time from seconds and nanoseconds since the Unix epoch.
#[cfg(unix)]
fn time_of(secs: i64, nanos: u32) -> SystemTime {
    let since = std::time::Duration::new(secs.unsigned_abs(), nanos.min(999_999_999));
    if secs >= 0 {
        SystemTime::UNIX_EPOCH + since
    } else {
        SystemTime::UNIX_EPOCH
    }
}

/// Where the platform has no `*at` calls: the same operations by path
/// (ownership and modes are not checked there either).
#[cfg(not(unix))]
impl Dir {
    fn open(path: &Path) -> io::Result<Dir> {
        if !fs::metadata(path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "exists and is not a directory",
            ));
        }
        Ok(Dir {
            path: path.to_path_buf(),
        })
    }

    pub(crate) fn untrusted(&self) -> io::Result<Option<String>> {
        Ok(None)
    }

    fn is_at(&self, _: &Path) -> io::Result<bool> {
        Ok(true)
    }

    pub(crate) fn subdir(&self, name: &str, _trust: bool) -> Result<Dir, Error> {
        let path = self.path.join(name);
        create_dirs(&path).map_err(|source| Error::DiskIo {
            action: "create directory",
            path: path.clone(),
            source,
        })?;
        Dir::open(&path).map_err(|source| Error::DiskIo {
            action: "open",
            path,
            source,
        })
    }

    pub(crate) fn open_file(&self, name: &str, access: Access) -> io::Result<File> {
        let access = match access {
            Access::Read => crate::regular_file::Access::Read,
            Access::ReadWriteCreate => crate::regular_file::Access::ReadWriteCreate(FILE_MODE),
            Access::AppendCreate => crate::regular_file::Access::AppendCreate(FILE_MODE),
        };
        crate::regular_file::open(
            &self.path.join(name),
            access,
            crate::regular_file::Links::Refuse,
        )
    }

    pub(crate) fn list(&self) -> io::Result<Vec<Listed>> {
        let mut listed = Vec::new();
        for entry in fs::read_dir(&self.path)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            listed.push(Listed {
                name,
                is_file: entry.file_type().is_ok_and(|t| t.is_file()),
                ino: None,
            });
        }
        Ok(listed)
    }

    pub(crate) fn stat(&self, name: &str) -> io::Result<Option<Stat>> {
        match fs::symlink_metadata(self.path.join(name)) {
            Ok(meta) => Ok(Some(Stat {
                is_file: meta.is_file(),
                len: meta.len(),
                modified: meta.modified()?,
            })),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(err),
        }
    }

    pub(crate) fn modified(&self) -> io::Result<SystemTime> {
        fs::metadata(&self.path)?.modified()
    }

    pub(crate) fn remove(&self, name: &str) -> io::Result<()> {
        match fs::remove_file(self.path.join(name)) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => Err(err),
            _ => Ok(()),
        }
    }

    pub(crate) fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path.join(from), self.path.join(to))
    }

    pub(crate) fn rename_noreplace(&self, from: &str, to: &str) -> io::Result<()> {
        fs::hard_link(self.path.join(from), self.path.join(to))?;
        self.remove(from)
    }

    pub(crate) fn sync(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }

    pub(crate) fn temp_file(&self) -> io::Result<TempFile<'_>> {
        loop {
            let name = temp_name();
            match fs::OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .open(self.path.join(&name))
            {
                Ok(file) => {
                    return Ok(TempFile {
                        dir: self,
                        name,
                        file,
                        kept: false,
                    });
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

impl Dir {
    /// The path the directory was opened by (for messages).
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The path of `name` in it (for messages).
    pub(crate) fn path_of(&self, name: impl AsRef<OsStr>) -> PathBuf {
        self.path.join(name.as_ref())
    }
}

/// A temporary file of a [`Dir`], removed when dropped unless persisted.
pub(crate) struct TempFile<'d> {
    dir: &'d Dir,
    name: String,
    /// The open file.
    pub(crate) file: File,
    kept: bool,
}

impl TempFile<'_> {
    /// Renames it to `name`, replacing what `name` names.
    pub(crate) fn persist(mut self, name: &str) -> io::Result<()> {
        self.dir.rename(&self.name, name)?;
        self.kept = true;
        Ok(())
    }

    /// Renames it to the first of `names()` that does not exist yet;
    /// returns that name.
    pub(crate) fn persist_noclobber(mut self, names: impl Fn() -> String) -> io::Result<String> {
        loop {
            let name = names();
            match self.dir.rename_noreplace(&self.name, &name) {
                Ok(()) => {
                    self.kept = true;
                    return Ok(name);
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(err) => return Err(err),
            }
        }
    }
}

impl Drop for TempFile<'_> {
    fn drop(&mut self) {
        if !self.kept {
            let _ = self.dir.remove(&self.name);
        }
    }
}

/// Checks the directory `dir` as the disk cache does when it opens it
/// (creating it, with mode 700, when missing): a directory, and unless
/// `trust` this user's, writable by no one else, and below directories
/// only this user or root may change (see the [module docs](self)). For
/// the directories of other files kept in the cache directory (a backend's
/// memos).
pub(crate) fn check_dir(dir: &Path, trust: bool) -> Result<(), Error> {
    open_checked(dir, trust).map(|_| ())
}

/// The one warning when the disk cache cannot be used at all.
pub(crate) fn warn_unavailable(error: &Error) {
    tracing::warn!(error = %crate::ErrorChain(error), "kiln disk cache unavailable: compiled code will not persist across runs");
}

/// The directory `path`, held without checks (for unit tests).
#[cfg(test)]
pub(crate) fn held(path: &Path) -> Dir {
    match open_checked(path, true) {
        Ok(dir) => dir,
        Err(error) => panic!("{error}"),
    }
}
