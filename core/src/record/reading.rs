//! Reading record files back ([`Recording`]), for `kiln bake` and
//! `kiln report`.
//!
//! Record files are untrusted: anyone who can write one can forge any
//! number of valid-looking records (the check is an unkeyed hash). So the
//! reader is bounded twice over:
//!
//! - **Input**: [`Recording::read_file`] opens only a regular file (never
//!   through a symbolic link, never a FIFO or a device) and reads at most a
//!   limit, in pieces of [`READ_PIECE`] bytes: the file is never held whole.
//!   A line longer than [`MAX_LINE`] is skipped as it streams past.
//! - **Memory**: what is kept per distinct entry is its digests, its name
//!   and label (each at most 200 bytes, shorter than the line that carried
//!   them), and a short sorted list of sources ([`Sources`], not a map: a
//!   map's first node costs about a kilobyte), so a recording of `n` bytes
//!   of records holds a few times `n` at most, whatever the records say
//!   (`kiln report` and `kiln bake` peak under 8 × their input plus
//!   64 KiB: `cli/tests/cli_bake.rs`, a million records).
//!
//! Time is linear in the bytes read: one pass, one BLAKE3 check and one
//! map insertion per line.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry as MapEntry;
use std::io::Read;
use std::path::Path;
use std::time::Duration;

use super::format::{MAX_LINE, Parsed, Record, SourceKind, parse_line};
use crate::regular_file::{self, Access, Links};
use crate::{Digest, Error};

/// The default cap on the bytes read from one record file (256 MiB, about
/// a million records).
pub const DEFAULT_READ_LIMIT: u64 = 256 << 20;

/// A record file is read in pieces of this many bytes.
pub const READ_PIECE: usize = 64 << 10;

/// Producers kept per (entry, source).
const MAX_PRODUCERS: usize = 8;

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
    pub sources: Sources,
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

/// The sources of one recorded entry and how processes got it from each,
/// sorted by source: a short list (most entries have one or two sources),
/// which costs what it holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Sources(Vec<(SourceKind, SourceUse)>);

impl Sources {
    /// How processes got the entry from `source`, if any did.
    pub fn get(&self, source: &SourceKind) -> Option<&SourceUse> {
        self.position(source).ok().map(|at| &self.0[at].1)
    }

    /// Whether some process got the entry from `source`.
    pub fn contains_key(&self, source: &SourceKind) -> bool {
        self.position(source).is_ok()
    }

    /// The sources, sorted.
    pub fn keys(&self) -> impl Iterator<Item = &SourceKind> {
        self.0.iter().map(|(source, _)| source)
    }

    /// How processes got it, per source, in the order of [`Sources::keys`].
    pub fn values(&self) -> impl Iterator<Item = &SourceUse> {
        self.0.iter().map(|(_, used)| used)
    }

    /// Each source with how processes got it from there, sorted.
    pub fn iter(&self) -> impl Iterator<Item = (&SourceKind, &SourceUse)> {
        self.0.iter().map(|(source, used)| (source, used))
    }

    /// Number of sources.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn position(&self, source: &SourceKind) -> Result<usize, usize> {
        self.0.binary_search_by(|(kind, _)| kind.cmp(source))
    }

    /// The use of `source`, added when missing. The list grows by one slot
    /// at a time while short (no spare capacity for the common one or two
    /// sources), then by doubling (linear time for an entry a hostile file
    /// gives many sources).
    fn entry(&mut self, source: SourceKind) -> &mut SourceUse {
        let at = match self.position(&source) {
            Ok(at) => at,
            Err(at) => {
                if self.0.len() < 4 {
                    self.0.reserve_exact(1);
                }
                self.0.insert(at, (source, SourceUse::default()));
                at
            }
        };
        &mut self.0[at].1
    }
}

/// `sources[&kind]`, as for a map: panics when no process got the entry
/// from `kind` (use [`Sources::get`] otherwise).
impl std::ops::Index<&SourceKind> for Sources {
    type Output = SourceUse;

    fn index(&self, source: &SourceKind) -> &SourceUse {
        match self.get(source) {
            Some(used) => used,
            None => panic!("no process recorded this entry from {source}"),
        }
    }
}

impl<'a> IntoIterator for &'a Sources {
    type Item = (&'a SourceKind, &'a SourceUse);
    type IntoIter = std::iter::Map<
        std::slice::Iter<'a, (SourceKind, SourceUse)>,
        fn(&'a (SourceKind, SourceUse)) -> (&'a SourceKind, &'a SourceUse),
    >;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter().map(|(source, used)| (source, used))
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
    /// The producers of the images it came from (images only; at most 8,
    /// sorted, each once).
    pub producers: Vec<String>,
}

impl SourceUse {
    /// Adds `producer` (kept sorted and distinct, at most
    /// [`MAX_PRODUCERS`]).
    fn add_producer(&mut self, producer: String) {
        if producer.is_empty() || self.producers.len() >= MAX_PRODUCERS {
            return;
        }
        if let Err(at) = self.producers.binary_search(&producer) {
            self.producers.reserve_exact(1);
            self.producers.insert(at, producer);
        }
    }

    /// Adds what `other` counted.
    fn add(&mut self, other: SourceUse) {
        self.processes = self.processes.saturating_add(other.processes);
        self.hits = self.hits.saturating_add(other.hits);
        self.compile_time = self.compile_time.saturating_add(other.compile_time);
        for producer in other.producers {
            self.add_producer(producer);
        }
    }
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

    /// Adds what `other` counted.
    fn add(&mut self, other: Damage) {
        self.torn = self.torn.saturating_add(other.torn);
        self.corrupt = self.corrupt.saturating_add(other.corrupt);
        self.too_long = self.too_long.saturating_add(other.too_long);
        self.unknown_version = self.unknown_version.saturating_add(other.unknown_version);
        self.unread_bytes = self.unread_bytes.saturating_add(other.unread_bytes);
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
    /// [`Damage::unread_bytes`], from the last whole line read on), in
    /// pieces of [`READ_PIECE`] bytes. The file must be a regular file,
    /// not reached through a symbolic link.
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
        let file = regular_file::open(path, Access::Read, Links::Refuse)
            .map_err(io("open for reading"))?;
        let len = file.metadata().map_err(io("read"))?.len();
        let mut input = file.take(limit);
        let mut piece = vec![0u8; READ_PIECE];
        let mut lines = Lines::default();
        loop {
            let n = match input.read(&mut piece) {
                Ok(0) => break,
                Ok(n) => n,
                Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(error) => return Err(io("read")(error)),
            };
            lines.feed(&piece[..n], |line| self.add_line(line));
        }
        self.damage.too_long += lines.too_long;
        if len > lines.read {
            // Cut by the limit, not by a crash: the line the limit cut,
            // and what follows, are unread.
            let unread = len - lines.whole;
            self.damage.unread_bytes = self.damage.unread_bytes.saturating_add(unread);
        } else if lines.read > lines.whole {
            self.damage.torn += 1;
        }
        Ok(())
    }

    /// Adds the records of one file's contents.
    pub fn add_bytes(&mut self, bytes: &[u8]) {
        let mut lines = Lines::default();
        lines.feed(bytes, |line| self.add_line(line));
        self.damage.too_long += lines.too_long;
        // Bytes after the last line break are a record whose write was cut.
        if lines.read > lines.whole {
            self.damage.torn += 1;
        }
    }

    /// Counts and applies one line (without its line break).
    fn add_line(&mut self, line: &[u8]) {
        if line.is_empty() {
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
                sources: Sources::default(),
            }),
        };
        let source = used.sources.entry(record.source);
        source.hits = source.hits.saturating_add(record.hits);
        if let Some(entry) = record.entry {
            source.processes = source.processes.saturating_add(1);
            source.compile_time = source.compile_time.saturating_add(entry.took);
            source.add_producer(exact(entry.producer));
            if used.name.is_empty() {
                used.name = exact(entry.name);
            }
            if used.owner_label.is_empty() {
                used.owner_label = exact(entry.label);
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
                    for (kind, theirs) in used.sources.0 {
                        mine.sources.entry(kind).add(theirs);
                    }
                }
            }
        }
        self.records = self.records.saturating_add(other.records);
        self.damage.add(other.damage);
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

/// `text` in an allocation of exactly its length (the parser's buffers may
/// be larger): what a recording keeps grows with the text, not with spare
/// capacity.
fn exact(mut text: String) -> String {
    text.shrink_to_fit();
    text
}

/// Splits bytes fed in pieces into lines, holding at most one line
/// ([`MAX_LINE`] bytes) between pieces; a longer line is skipped (counted)
/// as it streams past.
#[derive(Default)]
struct Lines {
    /// The start of a line cut by the end of the last piece.
    partial: Vec<u8>,
    /// The current line is longer than [`MAX_LINE`]: skipped to its end.
    skipping: bool,
    /// Bytes fed.
    read: u64,
    /// Bytes of the whole lines (line break included) fed so far.
    whole: u64,
    /// Lines longer than [`MAX_LINE`].
    too_long: u64,
}

impl Lines {
    /// Feeds `bytes`, calling `line` with each whole line that fits (its
    /// line break left out).
    fn feed(&mut self, mut bytes: &[u8], mut line: impl FnMut(&[u8])) {
        self.read += bytes.len() as u64;
        while let Some(end) = bytes.iter().position(|&b| b == b'\n') {
            let part = &bytes[..end];
            if self.skipping || self.partial.len() + part.len() + 1 > MAX_LINE {
                self.too_long += 1;
            } else if self.partial.is_empty() {
                line(part);
            } else {
                self.partial.extend_from_slice(part);
                line(&self.partial);
            }
            self.partial.clear();
            self.skipping = false;
            self.whole = self.read - (bytes.len() - end - 1) as u64;
            bytes = &bytes[end + 1..];
        }
        if self.skipping {
            return;
        }
        if self.partial.len() + bytes.len() + 1 > MAX_LINE {
            self.skipping = true;
            self.partial.clear();
        } else {
            self.partial.extend_from_slice(bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_split_across_pieces_as_in_one() {
        let text = format!("a\nbb\n\n{}\nccc\ntail", "x".repeat(MAX_LINE));
        let mut whole = Vec::new();
        let mut at_once = Lines::default();
        at_once.feed(text.as_bytes(), |l| whole.push(l.to_vec()));
        for piece in [1, 2, 3, 7, 4096, 5000] {
            let mut split = Vec::new();
            let mut lines = Lines::default();
            for chunk in text.as_bytes().chunks(piece) {
                lines.feed(chunk, |l| split.push(l.to_vec()));
            }
            assert_eq!(split, whole, "pieces of {piece}");
            assert_eq!(
                (lines.read, lines.whole, lines.too_long),
                (at_once.read, at_once.whole, at_once.too_long)
            );
        }
        assert_eq!(whole, [&b"a"[..], b"bb", b"", b"ccc"]);
        assert_eq!(at_once.too_long, 1);
        assert_eq!(at_once.read - at_once.whole, 4, "the tail");
    }
}
