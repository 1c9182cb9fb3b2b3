//! Recording what a process asks its cache for (`KILN_RECORD`), and reading
//! the record files back.
//!
//! A library's precompile block ships the specializations its author
//! expected; an application asks for others (its shapes, dtypes, archs) and
//! compiles them on first use in every fresh process. With
//! `KILN_RECORD=path`, the global cache appends to `path` one record per
//! distinct entry that [`Cache::lookup`](crate::Cache::lookup) or
//! [`Cache::get_or_compile`](crate::Cache::get_or_compile) returns, saying where it came from: an image (with the image's producer),
//! an extra tier (`disk`, `remote`), a compile (with its time), or memory.
//! `kiln bake` turns record files into an image of exactly those entries,
//! `kiln report` tells library authors what their images missed.
//!
//! # Record format
//!
//! A record file is text, one record per line, each line written whole by
//! one `write` on a file opened `O_APPEND`, so that any number of processes
//! can append to one file at once: on Linux an appending `write` to a
//! regular file moves the offset and copies the bytes under the file's
//! lock, and a record is at most [`MAX_LINE`] bytes (one page, `PIPE_BUF`).
//! Fields are separated by tabs; text fields are percent-escaped (every
//! byte below `0x20`, `0x7f` and `%` as `%XX`), so no field holds a tab or
//! a line break; the last field is a check over the rest of the line.
//!
//! ```text
//! KR1 E <source> <owner hex> <key hex> <hits> <compile ns> <name> <owner label> <producer> <check>
//! KR1 H <source> <owner hex> <key hex> <hits> <check>
//! ```
//!
//! - `E` (entry): the first time this process got `(owner, key)` from
//!   `<source>`: `image`, `compiled`, `memory` (already in memory: inserted
//!   directly, or there before recording began) or `tier:<name>` (`disk`,
//!   `remote`). `<hits>` is 1 (0 when the process already counted the entry
//!   under another source); `<compile ns>` is the compile's time (0 for
//!   other sources); `<producer>` is the image's producer (empty for other
//!   sources). Written at once, so that a process that is killed has
//!   recorded everything it used.
//! - `H` (hits): more hits of an entry recorded earlier by the same
//!   process, written in batches of whole records at exit (and when a
//!   [`Recorder`] is flushed or dropped). A process killed before its exit
//!   loses these counts, never its `E` records.
//! - `<check>`: the first 8 bytes, in hex, of a BLAKE3 (derive-key mode,
//!   context `kiln record line v1`) of everything before its tab.
//!
//! Names and labels are cut to 200 bytes, producers to 64, tier names to 32
//! (and to `[A-Za-z0-9._-]`), so a record always fits.
//!
//! # Reading
//!
//! Record files are untrusted: [`Recording::read_file`] reads at most a
//! given number of bytes of a regular file (never a FIFO or a device, never
//! through a symbolic link), and [`Recording::add_bytes`] skips, and counts
//! in [`Damage`], every line that is too long, not UTF-8, malformed, of an
//! unknown version, or fails its check, and a last line without its line
//! break (a record torn by a crash or a full disk). Time and memory are
//! linear in the bytes read.

use std::borrow::Cow;
use std::collections::btree_map::Entry as MapEntry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use crate::{Digest, Error, Hit, Key, Owner, Source};

/// The first field of every record of this format.
pub const MAGIC: &str = "KR1";

/// The longest record line, line break included: one page (`PIPE_BUF` on
/// Linux). Writers never exceed it; readers skip longer lines.
pub const MAX_LINE: usize = 4096;

/// At most this many distinct entries are recorded per process; later ones
/// are counted nowhere (one warning).
pub const MAX_ENTRIES: usize = 1 << 20;

/// The default cap on the bytes read from one record file (256 MiB, about
/// a million records).
pub const DEFAULT_READ_LIMIT: u64 = 256 << 20;

/// Bytes of a name or an owner label kept in a record.
const MAX_TEXT: usize = 200;
/// Bytes of an image producer kept (the image header holds at most 64).
const MAX_PRODUCER: usize = 64;
/// Bytes of a tier name kept.
const MAX_TIER: usize = 32;
/// Producers kept per (entry, source) when reading.
const MAX_PRODUCERS: usize = 8;
/// Bytes of `H` records written by one `write`.
const BATCH: usize = MAX_LINE;
/// Shards of the per-process set (by key byte), so that threads hitting
/// different entries take different locks.
const SHARDS: usize = 16;
/// The check's BLAKE3 derive-key context.
const CHECK_CONTEXT: &str = "kiln record line v1";

/// Where a recorded entry came from.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[non_exhaustive]
pub enum SourceKind {
    /// A merged image (embedded by a library, or a file of `KILN_IMAGE_PATH`).
    Image,
    /// An extra tier, by name (`disk`, `remote`).
    Tier(String),
    /// Compiled by the process.
    Compiled,
    /// Already in memory when first asked for (inserted directly, or there
    /// before recording began).
    Memory,
}

impl SourceKind {
    /// Whether the entry came from an image.
    pub fn is_image(&self) -> bool {
        *self == SourceKind::Image
    }

    /// The field as written in a record.
    fn wire(&self) -> Cow<'static, str> {
        match self {
            SourceKind::Image => Cow::Borrowed("image"),
            SourceKind::Compiled => Cow::Borrowed("compiled"),
            SourceKind::Memory => Cow::Borrowed("memory"),
            SourceKind::Tier(name) => Cow::Owned(format!("tier:{name}")),
        }
    }

    /// Parses a record's source field.
    fn from_wire(text: &str) -> Option<SourceKind> {
        Some(match text {
            "image" => SourceKind::Image,
            "compiled" => SourceKind::Compiled,
            "memory" => SourceKind::Memory,
            _ => {
                let name = text.strip_prefix("tier:")?;
                if name.is_empty() || tier_name(name) != name {
                    return None;
                }
                SourceKind::Tier(name.to_owned())
            }
        })
    }

    /// The bit of the per-entry mask of sources already written.
    fn bit(&self, tier_index: usize) -> u32 {
        match self {
            SourceKind::Image => 1,
            SourceKind::Memory => 1 << 1,
            SourceKind::Compiled => 1 << 2,
            SourceKind::Tier(_) => 1 << (3 + tier_index.min(28)),
        }
    }
}

impl fmt::Display for SourceKind {
    /// `image`, `compiled`, `memory`, or the tier's name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SourceKind::Tier(name) => f.write_str(name),
            other => f.write_str(&other.wire()),
        }
    }
}

/// A tier's name as recorded: `[A-Za-z0-9._-]` only (others become `_`),
/// at most 32 bytes, `tier` when empty.
fn tier_name(name: &str) -> String {
    let kept: String = name
        .chars()
        .take(MAX_TIER)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if kept.is_empty() {
        "tier".to_owned()
    } else {
        kept
    }
}

/// How a `get_or_compile` call got an entry that was not in memory or an
/// image.
pub(crate) enum Acquired<'a> {
    /// Compiled, taking this long.
    Compiled(Duration),
    /// Loaded from the extra tier at `index` (in the order added), `name`.
    Tier { index: usize, name: &'a str },
}

/// One entry as a process records it: which `(owner, key)`, and whether the
/// process found it in an image (image hits and in-memory hits of the same
/// entry are counted apart).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Slot {
    owner: Digest,
    key: Digest,
    image: bool,
}

impl Slot {
    fn shard(&self) -> usize {
        usize::from(self.key.as_bytes()[0]) % SHARDS
    }
}

/// Hashes 8 bytes of each digest (BLAKE3 outputs, so any 8 bytes spread
/// well) into the map's keyed hasher; equality still compares them whole.
impl std::hash::Hash for Slot {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        let prefix = |digest: &Digest| {
            let bytes = digest.as_bytes();
            u64::from_le_bytes([
                bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            ])
        };
        state.write_u64(prefix(&self.key) ^ u64::from(self.image));
        state.write_u64(prefix(&self.owner));
    }
}

/// The entries a process recorded, by slot.
type Slots = HashMap<Slot, Arc<Tally>>;

/// The slots each thread has already counted, per recorder (at most
/// [`SEEN_RECORDERS`] recorders, the oldest forgotten first): a hit of a
/// known entry is counted without touching a lock that other threads touch.
const SEEN_RECORDERS: usize = 4;

thread_local! {
    static SEEN: std::cell::RefCell<Vec<(u64, Slots)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Counts a hit of `slot` if this thread already holds its tally for
/// recorder `id`; false if it does not.
#[inline]
fn count_seen(id: u64, slot: &Slot) -> bool {
    SEEN.try_with(|seen| {
        let Ok(seen) = seen.try_borrow() else {
            return false;
        };
        let tally = seen
            .iter()
            .find(|(of, _)| *of == id)
            .and_then(|(_, slots)| slots.get(slot));
        if let Some(tally) = tally {
            tally.hits.fetch_add(1, Ordering::Relaxed);
        }
        tally.is_some()
    })
    .unwrap_or(false)
}

/// Remembers in this thread that `slot` of recorder `id` is `tally`.
fn remember(id: u64, slot: Slot, tally: Arc<Tally>) {
    let _ = SEEN.try_with(|seen| {
        let Ok(mut seen) = seen.try_borrow_mut() else {
            return;
        };
        let at = match seen.iter().position(|(of, _)| *of == id) {
            Some(at) => at,
            None => {
                if seen.len() == SEEN_RECORDERS {
                    seen.remove(0);
                }
                seen.push((id, Slots::default()));
                seen.len() - 1
            }
        };
        seen[at].1.insert(slot, tally);
    });
}

/// What a process knows of one recorded entry.
struct Tally {
    /// The source of its first record (its `H` records name it).
    source: SourceKind,
    /// Hits so far.
    hits: AtomicU64,
    /// Hits already in the file.
    flushed: AtomicU64,
    /// Sources already recorded (see [`SourceKind::bit`]).
    written: AtomicU32,
}

/// Appends what a cache returns to a record file, once per distinct entry
/// and source, and counts the hits of each (see the [module](self) docs for
/// the format). Set on a cache with
/// [`Cache::record_into`](crate::Cache::record_into); the global cache gets
/// one when `KILN_RECORD` names a file.
///
/// A recorder never fails its cache: a write that fails gives one warning
/// and ends recording for the process.
pub struct Recorder {
    path: PathBuf,
    file: File,
    /// Tells this recorder's slots apart in the threads' [`SEEN`] sets.
    id: u64,
    shards: Box<[RwLock<Slots>]>,
    entries: AtomicUsize,
    /// A write failed: nothing more is written.
    broken: AtomicBool,
    /// [`MAX_ENTRIES`] was reached (warned once).
    full: AtomicBool,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("path", &self.path)
            .field("entries", &self.entries.load(Ordering::Relaxed))
            .field("broken", &self.broken.load(Ordering::Relaxed))
            .finish()
    }
}

impl Recorder {
    /// Opens `path` for appending, creating it (mode 0600) when missing, and
    /// returns a recorder writing to it. The file must be a regular file; a
    /// symbolic link, a FIFO, a device or a directory is refused. The
    /// recorder's pending hit counts are written at normal process exit.
    ///
    /// # Errors
    /// [`Error::RecordIo`] when the file cannot be opened or created, or is
    /// not a regular file.
    pub fn open(path: &Path) -> Result<Arc<Recorder>, Error> {
        let file = open_file(path, true).map_err(|source| Error::RecordIo {
            action: "open for appending",
            path: path.to_owned(),
            source,
        })?;
        let recorder = Arc::new(Recorder {
            path: path.to_owned(),
            file,
            id: {
                static NEXT: AtomicU64 = AtomicU64::new(0);
                NEXT.fetch_add(1, Ordering::Relaxed)
            },
            shards: (0..SHARDS).map(|_| RwLock::default()).collect(),
            entries: AtomicUsize::new(0),
            broken: AtomicBool::new(false),
            full: AtomicBool::new(false),
        });
        at_exit::register(&recorder);
        Ok(recorder)
    }

    /// The record file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The distinct entries recorded so far.
    pub fn entries(&self) -> usize {
        self.entries.load(Ordering::Relaxed)
    }

    /// Writes the hits counted since the last flush (`H` records, whole
    /// records per `write`). Done at normal exit and on drop; a long-running
    /// process may call it now and then.
    pub fn flush(&self) {
        self.write_hits(false);
    }

    /// A hit found in memory or an image (by `lookup` or `get_or_compile`).
    #[inline]
    pub(crate) fn found(&self, hit: &Hit<'_>) {
        let image = hit.source() == Source::Image;
        let slot = Slot {
            owner: hit.owner(),
            key: *hit.key().digest(),
            image,
        };
        if self.count(&slot) {
            return;
        }
        let source = if image {
            SourceKind::Image
        } else {
            SourceKind::Memory
        };
        let bit = source.bit(0);
        if let Some(hits) = self.insert(slot, source.clone(), bit) {
            let producer = hit.image_producer().unwrap_or_default();
            self.write_entry(
                &source,
                &slot,
                hits,
                Duration::ZERO,
                hit.name(),
                hit.owner_label(),
                producer,
            );
        }
    }

    /// An entry that `get_or_compile` compiled or loaded from a tier,
    /// recorded before the entry is visible to other threads.
    pub(crate) fn acquired(&self, owner: &Owner, key: &Key, name: &str, how: Acquired<'_>) {
        let slot = Slot {
            owner: owner.digest(),
            key: *key.digest(),
            image: false,
        };
        let (source, bit, took) = match how {
            Acquired::Compiled(took) => (SourceKind::Compiled, SourceKind::Compiled.bit(0), took),
            Acquired::Tier { index, name } => {
                let source = SourceKind::Tier(tier_name(name));
                let bit = source.bit(index);
                (source, bit, Duration::ZERO)
            }
        };
        if let Some(hits) = self.insert(slot, source.clone(), bit) {
            self.write_entry(&source, &slot, hits, took, name, owner.label(), "");
        }
    }

    /// Counts a hit of a known entry; false if the entry is new. A thread
    /// that counted the entry before finds it in its own set, without a
    /// lock; otherwise the shard is read and the entry remembered.
    #[inline]
    fn count(&self, slot: &Slot) -> bool {
        if count_seen(self.id, slot) {
            return true;
        }
        let tally = self.shards[slot.shard()]
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .get(slot)
            .cloned();
        match tally {
            Some(tally) => {
                tally.hits.fetch_add(1, Ordering::Relaxed);
                remember(self.id, *slot, tally);
                true
            }
            None => false,
        }
    }

    /// Counts a hit of `slot` from `source`, adding the entry if new.
    /// `Some(hits)` when `source` has no record yet for it, and one is to be
    /// written, carrying `hits` (1 for a new entry, 0 for a further source
    /// of a known one).
    fn insert(&self, slot: Slot, source: SourceKind, bit: u32) -> Option<u64> {
        let mut shard = self.shards[slot.shard()]
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(tally) = shard.get(&slot) {
            tally.hits.fetch_add(1, Ordering::Relaxed);
            let before = tally.written.fetch_or(bit, Ordering::Relaxed);
            return (before & bit == 0).then_some(0);
        }
        if self.entries.load(Ordering::Relaxed) >= MAX_ENTRIES {
            if !self.full.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    path = %self.path.display(),
                    "KILN_RECORD: {MAX_ENTRIES} distinct entries recorded; later ones are not"
                );
            }
            return None;
        }
        let tally = Arc::new(Tally {
            source,
            hits: AtomicU64::new(1),
            flushed: AtomicU64::new(1),
            written: AtomicU32::new(bit),
        });
        shard.insert(slot, Arc::clone(&tally));
        drop(shard);
        self.entries.fetch_add(1, Ordering::Relaxed);
        remember(self.id, slot, tally);
        Some(1)
    }

    #[allow(clippy::too_many_arguments)]
    fn write_entry(
        &self,
        source: &SourceKind,
        slot: &Slot,
        hits: u64,
        took: Duration,
        name: &str,
        label: &str,
        producer: &str,
    ) {
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        let line = entry_line(source, slot, hits, nanos, name, label, producer);
        self.write_all_or_stop(line.as_bytes());
    }

    /// Writes the `H` records of every entry hit since the last flush. At
    /// exit, locks are only tried: a thread may still hold one.
    fn write_hits(&self, at_exit: bool) {
        let mut batch = String::new();
        for shard in self.shards.iter() {
            let guard = if at_exit {
                match shard.try_read() {
                    Ok(guard) => guard,
                    Err(std::sync::TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
                    Err(std::sync::TryLockError::WouldBlock) => continue,
                }
            } else {
                shard.read().unwrap_or_else(PoisonError::into_inner)
            };
            for (slot, tally) in guard.iter() {
                let hits = tally.hits.load(Ordering::Relaxed);
                // `fetch_max`: two flushes at once write disjoint counts.
                let before = tally.flushed.fetch_max(hits, Ordering::Relaxed);
                if hits <= before {
                    continue;
                }
                let line = hits_line(&tally.source, slot, hits - before);
                if batch.len() + line.len() > BATCH {
                    self.write_all_or_stop(batch.as_bytes());
                    batch.clear();
                }
                batch.push_str(&line);
            }
        }
        if !batch.is_empty() {
            self.write_all_or_stop(batch.as_bytes());
        }
    }

    /// One `write` of whole records; a failed or short one ends recording
    /// for the process, with one warning (a short write leaves a torn record,
    /// which readers skip).
    fn write_all_or_stop(&self, bytes: &[u8]) {
        if self.broken.load(Ordering::Relaxed) {
            return;
        }
        let error = loop {
            match (&self.file).write(bytes) {
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Ok(n) if n == bytes.len() => return,
                Ok(n) => {
                    break std::io::Error::new(
                        std::io::ErrorKind::WriteZero,
                        format!("wrote {n} of {} bytes (is the disk full?)", bytes.len()),
                    );
                }
                Err(error) => break error,
            }
        };
        if !self.broken.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                path = %self.path.display(),
                %error,
                "KILN_RECORD: cannot append to the record file; recording stops for this process"
            );
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.write_hits(false);
    }
}

/// An `E` record, line break included.
fn entry_line(
    source: &SourceKind,
    slot: &Slot,
    hits: u64,
    nanos: u64,
    name: &str,
    label: &str,
    producer: &str,
) -> String {
    let body = format!(
        "{MAGIC}\tE\t{}\t{}\t{}\t{hits}\t{nanos}\t{}\t{}\t{}",
        source.wire(),
        slot.owner.to_hex(),
        slot.key.to_hex(),
        escape(name, MAX_TEXT),
        escape(label, MAX_TEXT),
        escape(producer, MAX_PRODUCER),
    );
    seal(body)
}

/// An `H` record, line break included.
fn hits_line(source: &SourceKind, slot: &Slot, hits: u64) -> String {
    let body = format!(
        "{MAGIC}\tH\t{}\t{}\t{}\t{hits}",
        source.wire(),
        slot.owner.to_hex(),
        slot.key.to_hex(),
    );
    seal(body)
}

/// `body`, its check and a line break.
fn seal(mut body: String) -> String {
    let check = check(&body);
    body.push('\t');
    body.push_str(&check);
    body.push('\n');
    body
}

/// The check of a record's body: 16 hex digits.
fn check(body: &str) -> String {
    let hash = blake3::Hasher::new_derive_key(CHECK_CONTEXT)
        .update(body.as_bytes())
        .finalize();
    hash.as_bytes()[..8]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// `text` cut to at most `max` bytes (at a character boundary), with every
/// byte below `0x20`, `0x7f` and `%` written `%XX`.
fn escape(text: &str, max: usize) -> Cow<'_, str> {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let text = &text[..end];
    if !text.bytes().any(needs_escape) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match u8::try_from(c) {
            Ok(byte) if needs_escape(byte) => out.push_str(&format!("%{byte:02X}")),
            _ => out.push(c),
        }
    }
    Cow::Owned(out)
}

fn needs_escape(byte: u8) -> bool {
    byte < 0x20 || byte == 0x7f || byte == b'%'
}

/// The inverse of [`escape`]; `None` for a malformed escape or bytes that
/// are not UTF-8.
fn unescape(text: &str) -> Option<String> {
    if !text.contains('%') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Opens `path`, a record file: never through a symbolic link, never
/// blocking on a FIFO, and only if it is a regular file; for appending
/// (created with mode 0600) or for reading.
#[cfg(unix)]
fn open_file(path: &Path, append: bool) -> std::io::Result<File> {
    use rustix::fs::{FileType, Mode, OFlags};
    use rustix::io::Errno;
    let access = if append {
        OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE
    } else {
        OFlags::RDONLY
    };
    let flags = OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC | access;
    let fd = match rustix::fs::open(path, flags, Mode::from_raw_mode(0o600)) {
        Ok(fd) => fd,
        Err(Errno::LOOP) => return Err(not_regular("a symbolic link")),
        Err(Errno::NXIO) => return Err(not_regular("a FIFO or a socket")),
        Err(errno) => return Err(errno.into()),
    };
    let kind = FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if kind != FileType::RegularFile {
        return Err(not_regular(match kind {
            FileType::Directory => "a directory",
            FileType::Fifo => "a FIFO",
            FileType::Socket => "a socket",
            FileType::CharacterDevice | FileType::BlockDevice => "a device",
            _ => "not a regular file",
        }));
    }
    let flags = rustix::fs::fcntl_getfl(&fd)?;
    rustix::fs::fcntl_setfl(&fd, flags - OFlags::NONBLOCK)?;
    Ok(File::from(fd))
}

/// Opens `path` as the Unix version does, where there is no `O_NOFOLLOW`:
/// opened, then checked to be a regular file.
#[cfg(not(unix))]
fn open_file(path: &Path, append: bool) -> std::io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    if append {
        options.append(true).create(true);
    } else {
        options.read(true);
    }
    let file = options.open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular("not a regular file"));
    }
    Ok(file)
}

fn not_regular(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}; a record file must be a regular file"),
    )
}

/// What record files say about one entry, over every process that recorded
/// it.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Used {
    /// The owner's digest.
    pub owner: Digest,
    /// The key.
    pub key: Digest,
    /// The entry's name, from its first record (empty if only `H` records
    /// survived).
    pub name: String,
    /// The owner's label, from the first record.
    pub owner_label: String,
    /// Per source: how the processes got it.
    pub sources: BTreeMap<SourceKind, SourceUse>,
}

impl Used {
    /// Whether any process got it from an image.
    pub fn from_image(&self) -> bool {
        self.sources.contains_key(&SourceKind::Image)
    }

    /// Processes that compiled it.
    pub fn compiles(&self) -> u64 {
        self.sources
            .get(&SourceKind::Compiled)
            .map_or(0, |used| used.processes)
    }

    /// The time those compiles took, together.
    pub fn compile_time(&self) -> Duration {
        self.sources
            .get(&SourceKind::Compiled)
            .map_or(Duration::ZERO, |used| used.compile_time)
    }

    /// Hits over every source.
    pub fn hits(&self) -> u64 {
        self.sources
            .values()
            .fold(0u64, |sum, used| sum.saturating_add(used.hits))
    }
}

/// How processes got one entry from one source.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SourceUse {
    /// Processes that recorded it from this source (`E` records).
    pub processes: u64,
    /// Hits counted (including the first).
    pub hits: u64,
    /// Compile time, summed over the processes (compiles only).
    pub compile_time: Duration,
    /// The producers of the images it came from (images only; at most 8).
    pub producers: BTreeSet<String>,
}

/// Lines of record files that were skipped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Damage {
    /// A last line without its line break: a record cut short by a crash or
    /// a full disk.
    pub torn: u64,
    /// Lines that are not records: wrong fields, bad escapes, not UTF-8, a
    /// failed check.
    pub corrupt: u64,
    /// Lines longer than [`MAX_LINE`].
    pub too_long: u64,
    /// Records of another format version (`KR<n>` with `n` ≠ 1).
    pub unknown_version: u64,
    /// Bytes past the read limit, not read.
    pub unread_bytes: u64,
}

impl Damage {
    /// Whether nothing was skipped.
    pub fn is_clean(&self) -> bool {
        *self == Damage::default()
    }
}

/// What one or more record files say a workload used: one [`Used`] per
/// `(owner, key)`, sorted by owner then key.
///
/// ```
/// use kiln_core::record::Recording;
///
/// let mut recording = Recording::new();
/// recording.add_bytes(b"not a record\nKR1\tE\ttorn");
/// assert!(recording.is_empty());
/// assert_eq!(recording.damage().corrupt, 1);
/// assert_eq!(recording.damage().torn, 1);
/// ```
#[derive(Clone, Debug, Default)]
pub struct Recording {
    entries: BTreeMap<(Digest, Digest), Used>,
    records: u64,
    damage: Damage,
}

impl Recording {
    /// An empty recording.
    pub fn new() -> Recording {
        Recording::default()
    }

    /// Adds the records of the file at `path`, reading at most `limit`
    /// bytes of it (see [`DEFAULT_READ_LIMIT`]; the rest is counted in
    /// [`Damage::unread_bytes`]). The file must be a regular file, not
    /// reached through a symbolic link.
    ///
    /// # Errors
    /// [`Error::RecordIo`] when it cannot be opened or read, or is not a
    /// regular file.
    pub fn read_file(&mut self, path: &Path, limit: u64) -> Result<(), Error> {
        let io = |action| {
            move |source| Error::RecordIo {
                action,
                path: path.to_owned(),
                source,
            }
        };
        let file = open_file(path, false).map_err(io("open for reading"))?;
        let len = file.metadata().map_err(io("read"))?.len();
        let mut bytes = Vec::with_capacity(usize::try_from(len.min(limit)).unwrap_or(0));
        file.take(limit)
            .read_to_end(&mut bytes)
            .map_err(io("read"))?;
        let mut unread = len.saturating_sub(bytes.len() as u64);
        if unread > 0 {
            // Stop at the last whole line read: the next one was cut by the
            // limit, not by a crash.
            let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            unread += (bytes.len() - whole) as u64;
            bytes.truncate(whole);
        }
        self.damage.unread_bytes = self.damage.unread_bytes.saturating_add(unread);
        self.add_bytes(&bytes);
        Ok(())
    }

    /// Adds the records of one file's contents.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        let mut lines = bytes.split(|&b| b == b'\n');
        let last = lines.next_back();
        for line in lines {
            self.add_line(line);
        }
        // Bytes after the last line break are a record whose write was cut.
        if last.is_some_and(|last| !last.is_empty()) {
            self.damage.torn += 1;
        }
    }

    fn add_line(&mut self, line: &[u8]) {
        if line.is_empty() {
            return;
        }
        if line.len() + 1 > MAX_LINE {
            self.damage.too_long += 1;
            return;
        }
        match parse_line(line) {
            Parsed::Record(record) => {
                self.records += 1;
                self.apply(record);
            }
            Parsed::OtherVersion => self.damage.unknown_version += 1,
            Parsed::Corrupt => self.damage.corrupt += 1,
        }
    }

    fn apply(&mut self, record: Record) {
        let used = match self.entries.entry((record.owner, record.key)) {
            MapEntry::Occupied(entry) => entry.into_mut(),
            MapEntry::Vacant(entry) => entry.insert(Used {
                owner: record.owner,
                key: record.key,
                name: String::new(),
                owner_label: String::new(),
                sources: BTreeMap::new(),
            }),
        };
        let source = used.sources.entry(record.source).or_default();
        source.hits = source.hits.saturating_add(record.hits);
        if let Some(entry) = record.entry {
            source.processes = source.processes.saturating_add(1);
            source.compile_time = source.compile_time.saturating_add(entry.took);
            if !entry.producer.is_empty() && source.producers.len() < MAX_PRODUCERS {
                source.producers.insert(entry.producer);
            }
            if used.name.is_empty() {
                used.name = entry.name;
            }
            if used.owner_label.is_empty() {
                used.owner_label = entry.label;
            }
        }
    }

    /// Adds everything `other` holds.
    pub fn merge(&mut self, other: Recording) {
        for used in other.entries.into_values() {
            match self.entries.entry((used.owner, used.key)) {
                MapEntry::Vacant(entry) => {
                    entry.insert(used);
                }
                MapEntry::Occupied(mut entry) => {
                    let mine = entry.get_mut();
                    if mine.name.is_empty() {
                        mine.name = used.name;
                    }
                    if mine.owner_label.is_empty() {
                        mine.owner_label = used.owner_label;
                    }
                    for (kind, theirs) in used.sources {
                        let source = mine.sources.entry(kind).or_default();
                        source.processes = source.processes.saturating_add(theirs.processes);
                        source.hits = source.hits.saturating_add(theirs.hits);
                        source.compile_time =
                            source.compile_time.saturating_add(theirs.compile_time);
                        for producer in theirs.producers {
                            if source.producers.len() < MAX_PRODUCERS {
                                source.producers.insert(producer);
                            }
                        }
                    }
                }
            }
        }
        self.records = self.records.saturating_add(other.records);
        let (mine, theirs) = (&mut self.damage, other.damage);
        mine.torn = mine.torn.saturating_add(theirs.torn);
        mine.corrupt = mine.corrupt.saturating_add(theirs.corrupt);
        mine.too_long = mine.too_long.saturating_add(theirs.too_long);
        mine.unknown_version = mine.unknown_version.saturating_add(theirs.unknown_version);
        mine.unread_bytes = mine.unread_bytes.saturating_add(theirs.unread_bytes);
    }

    /// Every recorded entry, sorted by owner then key.
    pub fn entries(&self) -> impl ExactSizeIterator<Item = &Used> {
        self.entries.values()
    }

    /// The entry of `(owner, key)`, if recorded.
    pub fn get(&self, owner: &Digest, key: &Digest) -> Option<&Used> {
        self.entries.get(&(*owner, *key))
    }

    /// Distinct entries recorded.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry was recorded.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Records read.
    pub fn records(&self) -> u64 {
        self.records
    }

    /// What was skipped.
    pub fn damage(&self) -> Damage {
        self.damage
    }
}

/// One record, parsed.
struct Record {
    source: SourceKind,
    owner: Digest,
    key: Digest,
    hits: u64,
    /// `E` records only.
    entry: Option<EntryFields>,
}

struct EntryFields {
    took: Duration,
    name: String,
    label: String,
    producer: String,
}

enum Parsed {
    Record(Record),
    OtherVersion,
    Corrupt,
}

fn parse_line(line: &[u8]) -> Parsed {
    let Ok(line) = std::str::from_utf8(line) else {
        return Parsed::Corrupt;
    };
    let Some((body, sealed)) = line.rsplit_once('\t') else {
        return Parsed::Corrupt;
    };
    let magic = body.split('\t').next().unwrap_or_default();
    if magic != MAGIC {
        let other_version = magic
            .strip_prefix("KR")
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        return if other_version {
            Parsed::OtherVersion
        } else {
            Parsed::Corrupt
        };
    }
    if sealed != check(body) {
        return Parsed::Corrupt;
    }
    parse_fields(body).map_or(Parsed::Corrupt, Parsed::Record)
}

fn parse_fields(body: &str) -> Option<Record> {
    let fields: Vec<&str> = body.split('\t').collect();
    let number = |text: &str| -> Option<u64> {
        if text.is_empty() || text.len() > 20 || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok()
    };
    let digest = |text: &str| Digest::from_hex(text).ok();
    match fields[..] {
        [
            _,
            "E",
            source,
            owner,
            key,
            hits,
            nanos,
            name,
            label,
            producer,
        ] => Some(Record {
            source: SourceKind::from_wire(source)?,
            owner: digest(owner)?,
            key: digest(key)?,
            hits: number(hits)?,
            entry: Some(EntryFields {
                took: Duration::from_nanos(number(nanos)?),
                name: unescape(name)?,
                label: unescape(label)?,
                producer: unescape(producer)?,
            }),
        }),
        [_, "H", source, owner, key, hits] => Some(Record {
            source: SourceKind::from_wire(source)?,
            owner: digest(owner)?,
            key: digest(key)?,
            hits: number(hits)?,
            entry: None,
        }),
        _ => None,
    }
}

#[cfg(unix)]
mod at_exit {
    //! An `atexit` hook that writes the pending hit counts of every live
    //! recorder (the global cache's is never dropped).

    use std::sync::{Arc, Mutex, Once, PoisonError, Weak};

    use super::Recorder;

    static LIVE: Mutex<Vec<Weak<Recorder>>> = Mutex::new(Vec::new());

    /// Adds `recorder` to those flushed at exit (installing the hook once).
    pub(super) fn register(recorder: &Arc<Recorder>) {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(|| {
            // SAFETY: `atexit` only records the address of `flush_all`, a
            // function with the C ABI and no arguments that lives for the
            // whole program; it is called at most once, at normal exit.
            let failed = unsafe { libc::atexit(flush_all) } != 0;
            if failed {
                tracing::debug!("atexit failed: record hit counts are written on drop only");
            }
        });
        let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
        live.retain(|weak| weak.strong_count() > 0);
        live.push(Arc::downgrade(recorder));
    }

    /// Writes the pending hit counts of every live recorder. Never blocks
    /// on a lock another thread may hold at exit, and never unwinds.
    extern "C" fn flush_all() {
        let _ = std::panic::catch_unwind(|| {
            let Ok(live) = LIVE.try_lock() else {
                return;
            };
            for recorder in live.iter().filter_map(Weak::upgrade) {
                recorder.write_hits(true);
            }
        });
    }
}

#[cfg(not(unix))]
mod at_exit {
    //! No exit hook here: hit counts are written on drop and flush.
    pub(super) fn register(_: &std::sync::Arc<super::Recorder>) {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Artifact, ArtifactKind, Cache, Compiled, KeyBuilder};
    use kiln_image::{Image, ImageMeta, Verification};
    use kiln_test_support::Rng;
    use std::ffi::OsString;

    fn owner() -> Owner {
        Owner::new("rec-compiler", "1.0", "rec-target", Vec::<String>::new()).unwrap()
    }

    fn key(name: &str) -> Key {
        KeyBuilder::new("kiln-core record tests", 1)
            .str("name", name)
            .finish()
    }

    fn compiled(name: &str) -> Compiled {
        Compiled::new(name).artifact(Artifact {
            kind: ArtifactKind::Object,
            entry_points: vec![name.to_owned()],
            bytes: name.as_bytes().to_vec(),
        })
    }

    /// `get_or_compile` of `name` in `cache`; whether it compiled.
    fn get(cache: &Cache, name: &str) -> bool {
        let mut ran = false;
        cache
            .get_or_compile(&owner(), &key(name), || {
                ran = true;
                std::thread::sleep(Duration::from_millis(1));
                Ok(compiled(name))
            })
            .unwrap();
        ran
    }

    /// An image of `names`, written by `producer`.
    fn image(producer: &str, names: &[&str]) -> Image {
        let cache = Cache::new();
        let before = cache.snapshot();
        for name in names {
            cache.insert(&owner(), &key(name), compiled(name));
        }
        let bytes = cache
            .delta(&before)
            .to_bytes(ImageMeta::new(producer, "1.0"))
            .unwrap();
        Image::from_bytes(&bytes, Verification::Structural).unwrap()
    }

    fn read(path: &Path) -> Recording {
        let mut recording = Recording::new();
        recording.read_file(path, DEFAULT_READ_LIMIT).unwrap();
        recording
    }

    fn used<'r>(recording: &'r Recording, name: &str) -> &'r Used {
        recording
            .get(&owner().digest(), key(name).digest())
            .unwrap_or_else(|| panic!("{name} not recorded: {recording:#?}"))
    }

    #[test]
    fn every_source_is_recorded_once_per_process_with_its_hits() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.rec");
        let cache_dir = dir.path().join("cache");
        let lookup = |name: &str| (name == "KILN_CACHE_DIR").then(|| OsString::from(&cache_dir));

        // An earlier process compiled `on-disk` into the disk tier.
        let earlier = Cache::new();
        crate::add_tiers(&earlier, lookup);
        assert!(get(&earlier, "on-disk"));
        drop(earlier);

        let cache = Cache::new();
        crate::add_tiers(&cache, lookup);
        cache.merge_image(image("lib-a", &["shipped"]));
        cache.record_into(Recorder::open(&path).unwrap()).unwrap();
        cache.insert(&owner(), &key("inserted"), compiled("inserted"));
        for _ in 0..5 {
            get(&cache, "shipped");
        }
        let compiles: usize = (0..4).map(|_| usize::from(get(&cache, "new"))).sum();
        assert_eq!(compiles, 1);
        for _ in 0..3 {
            assert!(!get(&cache, "on-disk"));
        }
        get(&cache, "inserted");
        // A backend may look entries up directly: those hits count too, a
        // miss records nothing.
        for _ in 0..2 {
            assert!(cache.lookup(&owner().digest(), &key("shipped")).is_some());
        }
        assert!(cache.lookup(&owner().digest(), &key("absent")).is_none());
        let recorder = Arc::clone(cache.recorder().unwrap());
        assert_eq!(recorder.entries(), 4);

        // Before the flush: the `E` records only, one hit each.
        let early = read(&path);
        assert_eq!(early.records(), 4);
        assert_eq!(used(&early, "shipped").hits(), 1);

        recorder.flush();
        recorder.flush(); // nothing new: nothing written
        let recording = read(&path);
        assert!(recording.damage().is_clean(), "{:?}", recording.damage());
        assert_eq!(recording.len(), 4);
        assert_eq!(
            recording.records(),
            4 + 3,
            "one H record per entry hit again"
        );

        let shipped = used(&recording, "shipped");
        assert_eq!(shipped.name, "shipped");
        assert_eq!(shipped.owner_label, owner().label());
        let image_use = &shipped.sources[&SourceKind::Image];
        assert_eq!((image_use.processes, image_use.hits), (1, 7));
        assert_eq!(
            image_use.producers.iter().collect::<Vec<_>>(),
            ["lib-a 1.0"]
        );
        assert!(shipped.from_image());

        let new = used(&recording, "new");
        assert_eq!(
            new.sources.keys().collect::<Vec<_>>(),
            [&SourceKind::Compiled]
        );
        assert_eq!((new.compiles(), new.hits()), (1, 4));
        assert!(new.compile_time() >= Duration::from_millis(1));
        assert!(!new.from_image());

        let disk = used(&recording, "on-disk");
        let disk_use = &disk.sources[&SourceKind::Tier("disk".into())];
        assert_eq!((disk_use.processes, disk_use.hits), (1, 3));
        assert_eq!(disk.compiles(), 0);

        let inserted = used(&recording, "inserted");
        assert_eq!(
            inserted.sources.keys().collect::<Vec<_>>(),
            [&SourceKind::Memory]
        );

        // A second process appends to the same file.
        drop(recorder);
        drop(cache);
        let second = Cache::new();
        second.record_into(Recorder::open(&path).unwrap()).unwrap();
        get(&second, "new");
        drop(second);
        let both = read(&path);
        assert!(both.damage().is_clean());
        assert_eq!(used(&both, "new").compiles(), 2);
        assert_eq!(used(&both, "new").hits(), 5);
    }

    #[test]
    fn a_cache_records_into_one_recorder() {
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new();
        assert!(cache.recorder().is_none());
        cache
            .record_into(Recorder::open(&dir.path().join("a")).unwrap())
            .unwrap();
        let refused = cache
            .record_into(Recorder::open(&dir.path().join("b")).unwrap())
            .unwrap_err();
        assert_eq!(refused.path(), dir.path().join("b"));
        assert_eq!(cache.recorder().unwrap().path(), dir.path().join("a"));
    }

    #[test]
    fn a_recompile_after_a_tier_hit_is_a_further_source_of_the_same_entry() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.rec");
        let recorder = Recorder::open(&path).unwrap();
        let (o, k) = (owner(), key("x"));
        recorder.acquired(
            &o,
            &k,
            "x",
            Acquired::Tier {
                index: 0,
                name: "disk",
            },
        );
        recorder.acquired(&o, &k, "x", Acquired::Compiled(Duration::from_millis(7)));
        recorder.acquired(&o, &k, "x", Acquired::Compiled(Duration::from_millis(9)));
        drop(recorder);
        let recording = read(&path);
        let x = used(&recording, "x");
        assert_eq!(x.hits(), 3);
        assert_eq!(x.compiles(), 1);
        assert_eq!(x.compile_time(), Duration::from_millis(7));
        assert_eq!(x.sources[&SourceKind::Tier("disk".into())].hits, 3);
        assert_eq!(x.sources[&SourceKind::Compiled].hits, 0);
    }

    #[test]
    fn text_fields_are_escaped_cut_and_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.rec");
        let recorder = Recorder::open(&path).unwrap();
        let tricky = "tab\there\nnewline 100% \u{7f} \u{1b}[31m é";
        let long = "é".repeat(150); // 300 bytes
        recorder.acquired(
            &owner(),
            &key("a"),
            tricky,
            Acquired::Compiled(Duration::ZERO),
        );
        recorder.acquired(
            &owner(),
            &key("b"),
            &long,
            Acquired::Tier {
                index: 3,
                name: "my tier/√",
            },
        );
        drop(recorder);
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(text.lines().all(|line| line.len() < MAX_LINE));
        let recording = read(&path);
        assert!(recording.damage().is_clean());
        assert_eq!(used(&recording, "a").name, tricky);
        let b = recording.get(&owner().digest(), key("b").digest()).unwrap();
        assert_eq!(
            b.name,
            "é".repeat(100),
            "cut at 200 bytes, on a character boundary"
        );
        assert_eq!(
            b.sources.keys().collect::<Vec<_>>(),
            [&SourceKind::Tier("my_tier__".into())]
        );
    }

    /// One valid `E` record of `name`.
    fn record_of(name: &str) -> String {
        let slot = Slot {
            owner: owner().digest(),
            key: *key(name).digest(),
            image: false,
        };
        entry_line(&SourceKind::Compiled, &slot, 1, 5, name, "label", "")
    }

    #[test]
    fn damaged_lines_are_skipped_and_counted() {
        let good = record_of("good");
        let other = record_of("other");
        let mut bad_check = record_of("bad-check");
        bad_check.replace_range(bad_check.len() - 3..bad_check.len() - 1, "zz");
        let flipped = record_of("flipped").replace("label", "lAbel");
        let future = seal(format!("KR2\tE\t{}", "x".repeat(10)));
        let long = format!("{}\n", "y".repeat(MAX_LINE));
        let text = format!(
            "{good}garbage\n\n{bad_check}{flipped}{future}{long}\u{0}\u{0}\n{other}{}",
            &good[..good.len() / 2]
        );
        let mut bytes = text.into_bytes();
        bytes.extend_from_slice(b"\xff\xfe\n");
        bytes.extend_from_slice(&good.as_bytes()[..40]); // torn: no line break
        let mut recording = Recording::new();
        recording.add_bytes(&bytes);
        let damage = recording.damage();
        assert_eq!(
            damage,
            Damage {
                torn: 1,
                // garbage, bad check, flipped, NULs, the half record run
                // into the invalid UTF-8 line
                corrupt: 5,
                too_long: 1,
                unknown_version: 1,
                unread_bytes: 0,
            }
        );
        assert_eq!(recording.records(), 2);
        let names: Vec<&str> = recording.entries().map(|u| u.name.as_str()).collect();
        assert_eq!(names.len(), 2);
        assert!(
            names.contains(&"good") && names.contains(&"other"),
            "{names:?}"
        );
    }

    #[test]
    fn reading_stops_at_the_limit_on_a_whole_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.rec");
        let lines: Vec<String> = (0..10).map(|n| record_of(&format!("k{n}"))).collect();
        std::fs::write(&path, lines.concat()).unwrap();
        let limit = (lines[0].len() * 3 + 10) as u64;
        let mut recording = Recording::new();
        recording.read_file(&path, limit).unwrap();
        assert_eq!(recording.len(), 3);
        let damage = recording.damage();
        assert_eq!(damage.torn, 0, "the limit is not a crash");
        let rest: usize = lines[3..].iter().map(String::len).sum();
        assert_eq!(damage.unread_bytes, rest as u64);
    }

    #[test]
    fn merging_recordings_adds_them_up() {
        let mut a = Recording::new();
        a.add_bytes(record_of("x").as_bytes());
        let mut b = Recording::new();
        b.add_bytes(format!("{}{}junk\n", record_of("x"), record_of("y")).as_bytes());
        a.merge(b);
        assert_eq!(a.len(), 2);
        assert_eq!(a.records(), 3);
        assert_eq!(a.damage().corrupt, 1);
        let x = used(&a, "x");
        assert_eq!((x.compiles(), x.hits()), (2, 2));
        assert_eq!(x.compile_time(), Duration::from_nanos(10));
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_opened() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        std::fs::write(&target, b"").unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let fifo = dir.path().join("fifo");
        rustix::fs::mkfifoat(
            rustix::fs::CWD,
            &fifo,
            rustix::fs::Mode::from_raw_mode(0o600),
        )
        .unwrap();
        for path in [&link, &fifo, &dir.path().to_path_buf()] {
            let error = Recorder::open(path).unwrap_err();
            assert!(matches!(error, Error::RecordIo { .. }), "{error}");
            let error = Recording::new()
                .read_file(path, DEFAULT_READ_LIMIT)
                .unwrap_err();
            assert!(matches!(error, Error::RecordIo { .. }), "{error}");
        }
        let recorder = Recorder::open(&dir.path().join("new.rec")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(recorder.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn threads_record_each_entry_once_and_count_every_hit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("app.rec");
        let cache = Cache::new();
        cache.record_into(Recorder::open(&path).unwrap()).unwrap();
        const THREADS: usize = 8;
        const KEYS: usize = 50;
        const ROUNDS: usize = 20;
        std::thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        for n in 0..KEYS {
                            get(&cache, &format!("k{n}"));
                        }
                    }
                });
            }
        });
        drop(cache);
        let recording = read(&path);
        assert!(recording.damage().is_clean());
        assert_eq!(recording.len(), KEYS);
        for used in recording.entries() {
            assert_eq!(used.sources.len(), 1, "{used:?}");
            assert_eq!(used.compiles(), 1);
            assert_eq!(used.hits(), (THREADS * ROUNDS) as u64);
        }
    }

    #[test]
    fn hostile_bytes_never_panic_and_never_invent_records() {
        let valid: String = (0..20).map(|n| record_of(&format!("k{n}"))).collect();
        let mut rng = Rng::new(0x5eed);
        for _ in 0..300 {
            let mut bytes = valid.clone().into_bytes();
            for _ in 0..1 + rng.below(8) {
                let at = rng.below(bytes.len());
                match rng.below(3) {
                    0 => bytes[at] ^= 1 << rng.below(8),
                    1 => bytes.truncate(at),
                    _ => {
                        let len = rng.below(64);
                        bytes.splice(at..at, rng.bytes(len)).for_each(drop);
                    }
                }
            }
            let mut recording = Recording::new();
            recording.add_bytes(&bytes);
            assert!(recording.records() <= 20);
            for used in recording.entries() {
                assert!(used.name.starts_with('k'), "{used:?}");
            }
        }
    }
}
