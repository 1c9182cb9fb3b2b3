//! The directory lock: `flock` on a `lock` file, through `fd-lock`.
//!
//! Publishing a segment takes the lock shared;
//! compaction, eviction, `gc` and `clear` take it exclusive. So under the
//! exclusive lock no other process is half-way through writing, and every
//! temporary file in the directory is an orphan of a crashed writer. The
//! kernel releases the lock when its holder dies, even by SIGKILL.
//!
//! The lock file is opened with `O_NOFOLLOW` and checked to be a regular
//! file ([`Dir::open_file`]): a symbolic link named `lock` is
//! refused, never followed, so no file is ever created or locked elsewhere;
//! the operation that needed the lock fails (for a store: one warning, and
//! the process stops writing).

use std::fs::File;
use std::io;

use fd_lock::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::dir::{Access, Dir};

/// The lock file's name inside the cache directory.
pub(crate) const LOCK_FILE: &str = "lock";

/// An open lock file. Each operation opens its own, so that threads of one
/// process exclude each other like separate processes do.
pub(crate) struct DirLock {
    lock: RwLock<File>,
}

impl DirLock {
    /// Opens (creating when missing, with mode
    /// [`FILE_MODE`](super::dir::FILE_MODE)) the lock file of `dir`; an
    /// error if anything but a regular file has its name.
    pub(crate) fn open(dir: &Dir) -> io::Result<DirLock> {
        let file = dir.open_file(LOCK_FILE, Access::ReadWriteCreate)?;
        Ok(DirLock {
            lock: RwLock::new(file),
        })
    }

    /// Waits for the shared lock.
    pub(crate) fn shared(&self) -> io::Result<RwLockReadGuard<'_, File>> {
        self.lock.read()
    }

    /// Waits for the exclusive lock.
    pub(crate) fn exclusive(&mut self) -> io::Result<RwLockWriteGuard<'_, File>> {
        self.lock.write()
    }

    /// The exclusive lock if nobody holds the lock now, else `None`.
    pub(crate) fn try_exclusive(&mut self) -> io::Result<Option<RwLockWriteGuard<'_, File>>> {
        match self.lock.try_write() {
            Ok(guard) => Ok(Some(guard)),
            Err(err) if err.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(err) => Err(err),
        }
    }
}
