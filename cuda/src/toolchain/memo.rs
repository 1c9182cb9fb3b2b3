//! Identity memos: small records in the disk cache directory that let a fresh
//! process skip work whose answer changes only when files change.
//!
//! Two answers are expensive to learn and cheap to recognise:
//! - NVRTC's exact release (`13.0.88`): learnt by loading the 100 MB library and
//!   compiling an empty program to read the banner of its PTX;
//! - an include tree's digest (CCCL: 1,700 files, 17 MB): learnt by hashing every
//!   file.
//!
//! A memo stores such an answer together with the digest of the *stamps* of the files
//! it was learnt from (`FileStamp`: device, inode, size, modification and status
//! change times to the nanosecond, mode). A later process stats the same files (no
//! read, no load) and uses the memo only when every stamp is identical.
//!
//! # Why a matching stamp is sound, and its limit
//!
//! Any write to a file, a rename over it, a `chmod`, or setting its times back with
//! `touch -d` updates its status-change time (`ctime`), which user space cannot set;
//! a replaced file has another inode. So a file whose stamp matches has not been
//! changed since it was stamped — except within one tick of the file system's clock:
//! a write landing in the same coarse tick (a few milliseconds) as the previous change
//! can leave `ctime` unchanged. That is the "racy" case git's index knows. Kiln closes
//! it the same way: a memo is written only when every stamped file last changed more
//! than [`MemoDir::settle`] (2 s by default) before the files were read, so a change
//! after the read necessarily gets a later `ctime`. "Before" is measured on the file
//! system's own clock (the time stamp of a fresh file in the memo directory, or the
//! system clock if that is earlier), not only the system's. The files are always
//! stamped *before* they are read, so a change while reading makes the memo miss later
//! instead of lying.
//!
//! What remains outside the argument: a clock set backwards by more than the settle
//! time between two changes, the stamped files on a file system whose clock runs
//! behind the memo directory's by more than the settle time (a remote mount with a
//! skewed server clock), writes through a shared memory mapping (the times are updated
//! when the pages are written back), and file systems without `ctime`. The compile path checks
//! NVRTC's identity once more (see [`super::identity`]).
//!
//! Memos live in `<KILN_CACHE_DIR>/cuda-memo/` (see [`kiln_core::disk::DiskConfig`]); with
//! the disk cache turned off (`KILN_CACHE=0`) nothing is memoized and every process
//! does the full work. A memo that cannot be read, parsed or written is ignored:
//! memos only ever save time.
//!
//! A memo is input the process trusts (it names a toolchain's identity), so it is
//! kept and read as the disk cache keeps and reads its segments: only in a cache
//! directory that passes the disk cache's check (this user's, not writable by
//! others, unless `KILN_CACHE_TRUST_DIR=1`; otherwise memos are off), in a
//! subdirectory created with mode 700, each file opened without following a
//! symbolic link or blocking on a FIFO, and read up to [`MAX_MEMO_BYTES`].

use std::fs::Metadata;
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use kiln_core::Digest;

/// The first line of every memo file; a new layout gets a new version.
const HEADER: &str = "kiln-cuda-memo 1";
/// The folder below the disk cache directory.
const SUBDIR: &str = "cuda-memo";
/// The largest memo read (an include tree's manifest of a few thousand lines is
/// a few hundred KiB); a larger file is ignored.
pub const MAX_MEMO_BYTES: u64 = 8 << 20;
/// Default [`MemoDir::settle`].
pub const DEFAULT_SETTLE: Duration = Duration::from_secs(2);

/// Where identity memos are kept, if anywhere.
///
/// ```
/// use kiln_cuda::toolchain::MemoDir;
/// let memo = MemoDir::at("/tmp/kiln-memo-example");
/// assert_eq!(memo.dir(), Some(std::path::Path::new("/tmp/kiln-memo-example")));
/// assert!(MemoDir::disabled().dir().is_none());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoDir {
    dir: Option<PathBuf>,
    settle: Duration,
}

impl MemoDir {
    /// Memos in `dir` (created on first write).
    pub fn at(dir: impl Into<PathBuf>) -> MemoDir {
        MemoDir {
            dir: Some(dir.into()),
            settle: DEFAULT_SETTLE,
        }
    }

    /// No memos: every answer is learnt afresh.
    pub fn disabled() -> MemoDir {
        MemoDir {
            dir: None,
            settle: DEFAULT_SETTLE,
        }
    }

    /// `cuda-memo/` in the disk cache directory named by `KILN_CACHE_DIR` (or the
    /// platform default); disabled when `KILN_CACHE` turns the disk cache off, no
    /// directory can be named, or the directory fails the disk cache's check
    /// ([`DiskConfig::check_dir`](kiln_core::disk::DiskConfig::check_dir): another
    /// user's, or writable by others; the disk cache warns of it).
    /// The process's settings ([`Settings::process`](kiln_core::settings::Settings::process))
    /// name it.
    pub fn from_env() -> MemoDir {
        match kiln_core::settings::Settings::process().disk() {
            Ok(Some(config)) => MemoDir::in_cache_dir(&config),
            _ => MemoDir::disabled(),
        }
    }

    /// `cuda-memo/` in the directory of the disk cache `config`, if that
    /// directory and `cuda-memo/` itself (created 700 when missing) pass the
    /// disk cache's check
    /// ([`DiskConfig::check_dir`](kiln_core::disk::DiskConfig::check_dir));
    /// disabled otherwise.
    pub fn in_cache_dir(config: &kiln_core::disk::DiskConfig) -> MemoDir {
        let dir = config.dir.join(SUBDIR);
        let checked = config
            .check_dir()
            .and_then(|()| kiln_core::disk::check_subdir(&dir, config.trust_dir));
        match checked {
            Ok(()) => MemoDir::at(dir),
            Err(error) => {
                tracing::debug!(%error, "identity memos off");
                MemoDir::disabled()
            }
        }
    }

    /// The process's memo directory: [`MemoDir::from_env`], read once.
    pub fn process() -> &'static MemoDir {
        static PROCESS: OnceLock<MemoDir> = OnceLock::new();
        PROCESS.get_or_init(MemoDir::from_env)
    }

    /// Sets how long before being read a file must have last changed for a memo of
    /// it to be written (see the module documentation). With zero, a file still must
    /// have changed strictly before the clock tick of the read; that is sound only for
    /// files that are not changed again within a tick of being read (tests that wait
    /// between changes).
    pub fn with_settle(mut self, settle: Duration) -> MemoDir {
        self.settle = settle;
        self
    }

    /// The directory, when memos are kept.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// How long a file must be unchanged before it is memoized.
    pub fn settle(&self) -> Duration {
        self.settle
    }

    /// The memo file of (`kind`, `subject`).
    pub fn record_path(&self, kind: &str, subject: &Path) -> Option<PathBuf> {
        let name = Digest::of(subject.as_os_str().as_encoded_bytes()).to_hex();
        self.dir
            .as_ref()
            .map(|dir| dir.join(format!("{kind}-{}", &name[..32])))
    }

    /// The values memoized for `subject` under `stamps`, if the memo exists and was
    /// written for exactly these stamps.
    pub(crate) fn read(&self, kind: &str, subject: &Path, stamps: &Digest) -> Option<Vec<String>> {
        let text = read_memo(&self.record_path(kind, subject)?)?;
        let mut lines = text.lines();
        let subject_line = subject.to_string_lossy();
        let header_ok = lines.next() == Some(HEADER)
            && lines.next() == Some(kind)
            && lines.next() == Some(&*subject_line)
            && lines.next() == Some(&*stamps.to_hex());
        if !header_ok {
            return None;
        }
        Some(lines.map(str::to_owned).collect())
    }

    /// The stamps digest and values of the memo of (`kind`, `subject`), whatever
    /// the stamps: for memos whose stamped files are listed in the values (the
    /// caller stamps them and compares).
    pub(crate) fn read_unchecked(
        &self,
        kind: &str,
        subject: &Path,
    ) -> Option<(Digest, Vec<String>)> {
        let text = read_memo(&self.record_path(kind, subject)?)?;
        let mut lines = text.lines();
        let subject_line = subject.to_string_lossy();
        let header_ok = lines.next() == Some(HEADER)
            && lines.next() == Some(kind)
            && lines.next() == Some(&*subject_line);
        if !header_ok {
            return None;
        }
        let stamps = Digest::from_hex(lines.next()?).ok()?;
        Some((stamps, lines.map(str::to_owned).collect()))
    }

    /// The time now on the memo directory's file system (the time stamp of a fresh
    /// temporary file there) or the system's, whichever is earlier; `None` when memos
    /// are off or the directory cannot be written. Read it after stamping files and
    /// before reading them, and give it to [`MemoDir::write`].
    pub(crate) fn clock(&self) -> Option<FsInstant> {
        let dir = self.dir.as_ref()?;
        create_private_dir(dir).ok()?;
        let file = tempfile::NamedTempFile::new_in(dir).ok()?;
        let meta = file.as_file().metadata().ok()?;
        let on_disk = FileStamp::of(&meta).last_change_ns();
        let system = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .ok()
            .and_then(|d| i128::try_from(d.as_nanos()).ok())?;
        Some(FsInstant(on_disk.min(system)))
    }

    /// Memoizes `values` for `subject` under `stamps`, when every stamped file had
    /// settled by `read_from` (see [`MemoDir::clock`]). Best effort.
    pub(crate) fn write(
        &self,
        kind: &str,
        subject: &Path,
        stamps: &StampSet,
        read_from: Option<FsInstant>,
        values: &[String],
    ) {
        let (Some(dir), Some(path)) = (&self.dir, self.record_path(kind, subject)) else {
            return;
        };
        let settled = read_from.is_some_and(|t| stamps.settled_before(t, self.settle));
        if !settled {
            tracing::debug!(
                subject = %subject.display(),
                "not memoized: a file changed less than {:?} ago",
                self.settle
            );
            return;
        }
        let subject_line = subject.to_string_lossy();
        if subject_line.contains('\n') || values.iter().any(|v| v.contains('\n')) {
            return;
        }
        let mut text = format!(
            "{HEADER}\n{kind}\n{subject_line}\n{}\n",
            stamps.digest().to_hex()
        );
        for value in values {
            text.push_str(value);
            text.push('\n');
        }
        let written = create_private_dir(dir).and_then(|()| {
            let mut file = tempfile::NamedTempFile::new_in(dir)?;
            file.write_all(text.as_bytes())?;
            file.persist(&path).map_err(|e| e.error)?;
            Ok(())
        });
        if let Err(e) = written {
            tracing::debug!(path = %path.display(), "memo not written: {e}");
        }
    }

    /// Deletes the memo of (`kind`, `subject`): it was found to be wrong. Best effort.
    pub(crate) fn remove(&self, kind: &str, subject: &Path) {
        if let Some(path) = self.record_path(kind, subject) {
            let _ = std::fs::remove_file(path);
        }
    }
}

/// The text of the memo file at `path`, read the safe way
/// ([`kiln_core::disk::read_regular_file`], at most [`MAX_MEMO_BYTES`]); `None`
/// when it is missing, not a regular file, too large or not UTF-8.
fn read_memo(path: &Path) -> Option<String> {
    match kiln_core::disk::read_regular_file(path, MAX_MEMO_BYTES) {
        Ok(bytes) => String::from_utf8(bytes).ok(),
        Err(error) => {
            if error.kind() != std::io::ErrorKind::NotFound {
                tracing::debug!(path = %path.display(), %error, "memo ignored");
            }
            None
        }
    }
}

/// Creates `dir` and its missing parents with mode 700 (memos are this user's).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// A time on a file system's clock, in nanoseconds since the Unix epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct FsInstant(i128);

impl FsInstant {
    /// `self` moved by `delta` (for tests that stamp as if later).
    #[cfg(test)]
    fn plus(self, delta: Duration) -> FsInstant {
        FsInstant(self.0 + i128::try_from(delta.as_nanos()).unwrap_or(i128::MAX))
    }
}

/// What identifies one version of a file without reading it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mode: u32,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    /// The stamp of `meta` (from `std::fs::metadata`, links followed).
    pub(crate) fn of(meta: &Metadata) -> FileStamp {
        FileStamp {
            dev: meta.dev(),
            ino: meta.ino(),
            size: meta.size(),
            mode: meta.mode(),
            mtime: (meta.mtime(), meta.mtime_nsec()),
            ctime: (meta.ctime(), meta.ctime_nsec()),
        }
    }

    /// The stamp of a `statx` result (links followed), equal to [`FileStamp::of`]
    /// the same file's metadata.
    pub(crate) fn of_statx(found: &rustix::fs::Statx) -> FileStamp {
        let time = |t: &rustix::fs::StatxTimestamp| (t.tv_sec, i64::from(t.tv_nsec));
        FileStamp {
            dev: rustix::fs::makedev(found.stx_dev_major, found.stx_dev_minor),
            ino: found.stx_ino,
            size: found.stx_size,
            mode: u32::from(found.stx_mode),
            mtime: time(&found.stx_mtime),
            ctime: time(&found.stx_ctime),
        }
    }

    fn update(&self, hasher: &mut blake3::Hasher) {
        let FileStamp {
            dev,
            ino,
            size,
            mode,
            mtime,
            ctime,
        } = *self;
        for word in [dev, ino, size, u64::from(mode)] {
            hasher.update(&word.to_le_bytes());
        }
        for (secs, nanos) in [mtime, ctime] {
            hasher.update(&secs.to_le_bytes());
            hasher.update(&nanos.to_le_bytes());
        }
    }

    /// The later of the modification and status-change times, in nanoseconds since
    /// the Unix epoch.
    fn last_change_ns(&self) -> i128 {
        let ns = |(secs, nanos): (i64, i64)| i128::from(secs) * 1_000_000_000 + i128::from(nanos);
        ns(self.mtime).max(ns(self.ctime))
    }
}

/// The stamps of a set of files, each under a name (a relative path).
#[derive(Debug)]
pub(crate) struct StampSet {
    hasher: blake3::Hasher,
    latest_change_ns: i128,
}

impl StampSet {
    /// An empty set; `context` separates the uses of stamp sets.
    pub(crate) fn new(context: &str) -> StampSet {
        StampSet {
            hasher: blake3::Hasher::new_derive_key(context),
            latest_change_ns: i128::MIN,
        }
    }

    /// Adds a file under `name`.
    pub(crate) fn add(&mut self, name: &[u8], stamp: &FileStamp) {
        self.hasher.update(&(name.len() as u64).to_le_bytes());
        self.hasher.update(name);
        stamp.update(&mut self.hasher);
        self.latest_change_ns = self.latest_change_ns.max(stamp.last_change_ns());
    }

    /// The digest of every (name, stamp) added, in order.
    pub(crate) fn digest(&self) -> Digest {
        Digest(*self.hasher.finalize().as_bytes())
    }

    /// Whether every file last changed at least `settle` before `read_from`.
    fn settled_before(&self, read_from: FsInstant, settle: Duration) -> bool {
        let settle = i128::try_from(settle.as_nanos()).unwrap_or(i128::MAX);
        self.latest_change_ns < read_from.0.saturating_sub(settle)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamps_of(path: &Path) -> StampSet {
        let mut set = StampSet::new("kiln test stamps");
        let meta = std::fs::metadata(path).unwrap();
        set.add(b"f", &FileStamp::of(&meta));
        set
    }

    #[test]
    fn a_memo_answers_only_for_its_stamps() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let memo = MemoDir::at(dir.path().join("memo")).with_settle(Duration::ZERO);
        // Even with no settle time, a file is memoized only after its clock tick.
        std::thread::sleep(Duration::from_millis(20));
        let stamps = stamps_of(&file);
        let values = vec!["a".to_owned(), "b c".to_owned()];
        memo.write("t", &file, &stamps, memo.clock(), &values);
        assert_eq!(memo.read("t", &file, &stamps.digest()), Some(values));
        assert_eq!(memo.read("u", &file, &stamps.digest()), None, "other kind");
        let other = Digest::of(b"other stamps");
        assert_eq!(memo.read("t", &file, &other), None, "other stamps");
        memo.remove("t", &file);
        assert_eq!(memo.read("t", &file, &stamps.digest()), None, "removed");
    }

    #[test]
    fn a_file_changed_moments_ago_is_not_memoized() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let memo = MemoDir::at(dir.path().join("memo"));
        let stamps = stamps_of(&file);
        let now = memo.clock();
        assert!(now.is_some());
        memo.write("t", &file, &stamps, now, &["v".to_owned()]);
        assert_eq!(memo.read("t", &file, &stamps.digest()), None);
        memo.write("t", &file, &stamps, None, &["v".to_owned()]);
        assert_eq!(memo.read("t", &file, &stamps.digest()), None, "no clock");
        // Read as if three seconds later, the same file has settled.
        let later = now.map(|t| t.plus(Duration::from_secs(3)));
        memo.write("t", &file, &stamps, later, &["v".to_owned()]);
        assert!(memo.read("t", &file, &stamps.digest()).is_some());
    }

    #[test]
    fn a_changed_file_has_another_stamp() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let before = stamps_of(&file).digest();
        // Same size, same inode: only the times tell. Wait out a clock tick.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&file, "2").unwrap();
        assert_ne!(before, stamps_of(&file).digest());
    }

    #[test]
    fn a_disabled_memo_keeps_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let memo = MemoDir::disabled().with_settle(Duration::ZERO);
        let stamps = stamps_of(&file);
        memo.write("t", &file, &stamps, memo.clock(), &["v".to_owned()]);
        assert_eq!(memo.read("t", &file, &stamps.digest()), None);
    }

    /// A memo of one value for `file`, written and read back.
    fn written(memo: &MemoDir, file: &Path) -> Digest {
        std::thread::sleep(Duration::from_millis(20));
        let stamps = stamps_of(file);
        memo.write("t", file, &stamps, memo.clock(), &["v".to_owned()]);
        let digest = stamps.digest();
        assert!(memo.read("t", file, &digest).is_some());
        digest
    }

    #[test]
    fn memos_are_private_and_read_the_safe_way() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("f");
        std::fs::write(&file, "1").unwrap();
        let memo = MemoDir::at(dir.path().join("cache/cuda-memo")).with_settle(Duration::ZERO);
        let digest = written(&memo, &file);
        for created in ["cache", "cache/cuda-memo"] {
            let mode = std::fs::metadata(dir.path().join(created))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o700, "{created}");
        }
        let path = memo.record_path("t", &file).unwrap();
        let good = std::fs::read(&path).unwrap();

        // A symbolic link to a valid memo is not followed.
        let elsewhere = dir.path().join("planted");
        std::fs::write(&elsewhere, &good).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &path).unwrap();
        assert_eq!(memo.read("t", &file, &digest), None, "a symbolic link");

        // A FIFO does not block the reader.
        std::fs::remove_file(&path).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            &path,
            rustix::fs::FileType::Fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
            0,
        )
        .unwrap();
        assert_eq!(memo.read("t", &file, &digest), None, "a FIFO");
        assert_eq!(memo.read_unchecked("t", &file), None, "a FIFO");

        // A memo past the size limit is ignored, not read whole.
        std::fs::remove_file(&path).unwrap();
        let mut big = good.clone();
        big.resize(usize::try_from(MAX_MEMO_BYTES).unwrap() + 1, b'v');
        std::fs::write(&path, &big).unwrap();
        assert_eq!(memo.read_unchecked("t", &file), None, "too large");
        std::fs::write(&path, &good).unwrap();
        assert!(memo.read("t", &file, &digest).is_some(), "whole again");
    }

    #[test]
    fn a_cache_directory_others_may_write_keeps_no_memos() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o777)).unwrap();
        let mut config = kiln_core::disk::DiskConfig::new(&cache);
        assert_eq!(MemoDir::in_cache_dir(&config), MemoDir::disabled());
        config.trust_dir = true;
        assert_eq!(
            MemoDir::in_cache_dir(&config).dir(),
            Some(cache.join(SUBDIR).as_path()),
            "KILN_CACHE_TRUST_DIR=1"
        );
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        config.trust_dir = false;
        assert!(MemoDir::in_cache_dir(&config).dir().is_some());
        // A `cuda-memo/` others may write (left by an older build, say) is
        // refused as well.
        let memo = cache.join(SUBDIR);
        std::fs::set_permissions(&memo, std::fs::Permissions::from_mode(0o775)).unwrap();
        assert_eq!(MemoDir::in_cache_dir(&config), MemoDir::disabled());
    }
}
