//! Recency stamps: when each entry was last used, for LRU eviction.
//!
//! File access times are unreliable (`noatime`, `relatime`, and one segment
//! holds many entries), so the cache keeps explicit stamps in a small
//! append-only file, `stamps`: fixed 80-byte records of owner, key,
//! milliseconds since the Unix epoch and a checksum. Each process appends
//! its stamps at most once per stamp interval, in one `O_APPEND` write and
//! without the directory lock (a first hit in a new process stays cheap);
//! compaction rewrites the file under the exclusive lock with one record per
//! surviving entry. A stamp appended while compaction replaces the file is
//! lost, which only makes an entry look older than it is; a torn or garbled
//! record fails its checksum and is skipped.
//!
//! The file is opened without following a symbolic link and only if it is
//! a regular file ([`Dir::open_file`]): an append never lands in
//! another file. A `stamps` that is anything else is no stamps when read,
//! and an error when appended to (the process stops writing, with one
//! warning); compaction replaces it with a regular file. A read takes at
//! most [`READ_AT_MOST`] bytes, the newest, whatever the file's size.

use std::collections::HashMap;
use std::io::{self, Read, Seek, SeekFrom, Write};

use kiln_image::Digest;

use super::dir::{Access, Dir};
use super::segment;

/// The stamps file's name inside the cache directory.
pub(crate) const STAMPS_FILE: &str = "stamps";

/// `(owner, key)`: one entry of the disk cache.
pub(crate) type EntryId = (Digest, Digest);

/// Bytes of one record: owner, key, stamp, checksum.
pub(crate) const RECORD_BYTES: usize = 32 + 32 + 8 + 8;

/// The most bytes of the stamps file a read takes (the last ones: appends
/// go at the end): 409,600 records, four per entry for 102,400 entries.
/// A larger file is compacted at the next store or exit
/// ([`bloated`]), so only a damaged or planted file is ever cut.
pub(crate) const READ_AT_MOST: u64 = 32 << 20;

/// Encodes one record.
fn encode(id: &EntryId, stamp_ms: u64, out: &mut Vec<u8>) {
    let start = out.len();
    out.extend_from_slice(id.0.as_bytes());
    out.extend_from_slice(id.1.as_bytes());
    out.extend_from_slice(&stamp_ms.to_le_bytes());
    let check = checksum(&out[start..]);
    out.extend_from_slice(&check.to_le_bytes());
}

/// The first 8 bytes of the BLAKE3 hash of a record's payload.
fn checksum(payload: &[u8]) -> u64 {
    let hash = blake3::hash(payload);
    let mut first = [0u8; 8];
    first.copy_from_slice(&hash.as_bytes()[..8]);
    u64::from_le_bytes(first)
}

/// Decodes the record at the start of `bytes`, if it is a whole, intact one.
fn decode(bytes: &[u8]) -> Option<(EntryId, u64)> {
    let record = bytes.get(..RECORD_BYTES)?;
    let (payload, check) = record.split_at(RECORD_BYTES - 8);
    if checksum(payload).to_le_bytes() != check {
        return None;
    }
    let mut owner = [0u8; 32];
    let mut key = [0u8; 32];
    let mut stamp = [0u8; 8];
    owner.copy_from_slice(&payload[..32]);
    key.copy_from_slice(&payload[32..64]);
    stamp.copy_from_slice(&payload[64..72]);
    Some(((Digest(owner), Digest(key)), u64::from_le_bytes(stamp)))
}

/// Reads the stamps of `dir`: the latest stamp of every entry recorded.
/// A missing file, or anything but a regular file under its name, is no
/// stamps; damaged records are skipped; at most [`READ_AT_MOST`] bytes
/// (the newest) are read.
pub(crate) fn read(dir: &Dir) -> io::Result<HashMap<EntryId, u64>> {
    read_at_most(dir, READ_AT_MOST)
}

/// [`read`], taking at most the last `cap` bytes of the file.
fn read_at_most(dir: &Dir, cap: u64) -> io::Result<HashMap<EntryId, u64>> {
    let mut file = match dir.open_file(STAMPS_FILE, Access::Read) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(err) if crate::regular_file::is_not_regular(&err) => {
            tracing::debug!(error = %err, "disk-cache stamps file ignored");
            return Ok(HashMap::new());
        }
        Err(err) => return Err(err),
    };
    let len = file.metadata()?.len();
    let skip = len.saturating_sub(cap);
    if skip > 0 {
        file.seek(SeekFrom::Start(skip))?;
    }
    let mut bytes = Vec::with_capacity(usize::try_from(len - skip).unwrap_or(0));
    // `take`: a file that grows meanwhile is still read no further.
    file.take(cap).read_to_end(&mut bytes)?;
    let mut stamps = HashMap::new();
    let mut at = 0;
    while at + RECORD_BYTES <= bytes.len() {
        match decode(&bytes[at..]) {
            Some((id, stamp)) => {
                let latest = stamps.entry(id).or_insert(stamp);
                *latest = (*latest).max(stamp);
                at += RECORD_BYTES;
            }
            // A torn record: resynchronise on the next intact one.
            None => at += 1,
        }
    }
    Ok(stamps)
}

/// The size of the stamps file of `dir` (0 when missing, or when its name
/// is not a regular file: a symbolic link is not followed).
pub(crate) fn file_len(dir: &Dir) -> u64 {
    dir.stat(STAMPS_FILE)
        .ok()
        .flatten()
        .filter(|stat| stat.is_file)
        .map_or(0, |stat| stat.len)
}

/// Whether a stamps file of `bytes` for `entries` entries is worth
/// rewriting: over 64 KiB and over four records per entry.
pub(crate) fn bloated(bytes: u64, entries: usize) -> bool {
    let one_each = u64::try_from(entries.saturating_mul(RECORD_BYTES)).unwrap_or(u64::MAX);
    bytes > 64 << 10 && bytes > one_each.saturating_mul(4)
}

/// Appends `stamps` to the stamps file of `dir` in one write; returns the
/// file's new size (one more system call).
pub(crate) fn append(dir: &Dir, stamps: &[(EntryId, u64)]) -> io::Result<u64> {
    let mut bytes = Vec::with_capacity(stamps.len() * RECORD_BYTES);
    for (id, stamp) in stamps {
        encode(id, *stamp, &mut bytes);
    }
    let mut file = dir.open_file(STAMPS_FILE, Access::AppendCreate)?;
    file.write_all(&bytes)?;
    // After an append the position is the end of the file: an `lseek`,
    // cheaper than a `stat` (this runs in every process that had a hit).
    std::io::Seek::stream_position(&mut file)
}

/// Replaces the stamps file of `dir` with exactly `stamps`.
///
/// The caller holds the directory lock exclusive.
pub(crate) fn rewrite(dir: &Dir, stamps: &HashMap<EntryId, u64>) -> io::Result<()> {
    let mut sorted: Vec<_> = stamps.iter().collect();
    sorted.sort();
    let mut bytes = Vec::with_capacity(sorted.len() * RECORD_BYTES);
    for (id, stamp) in sorted {
        encode(id, *stamp, &mut bytes);
    }
    segment::replace_file_unsynced(dir, STAMPS_FILE, &bytes)
}

/// Rewrites the stamps file of `dir` with one record per entry (its latest
/// stamp), dropping torn records.
///
/// The caller holds the directory lock exclusive.
pub(crate) fn compact(dir: &Dir) -> io::Result<()> {
    rewrite(dir, &read(dir)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs::OpenOptions;

    fn id(n: u8) -> EntryId {
        (Digest([n; 32]), Digest([n.wrapping_add(100); 32]))
    }

    #[test]
    fn bloated_means_over_64_kib_and_four_records_per_entry() {
        assert!(!bloated(64 << 10, 10));
        assert!(bloated((64 << 10) + 1, 10));
        assert!(!bloated(4 * 80 * 1000, 1000), "4 records per entry");
        assert!(bloated(4 * 80 * 1000 + 1, 1000));
        // Entry counts come from file names, which anyone can write.
        assert!(!bloated(u64::MAX, usize::MAX));
    }

    #[test]
    fn latest_stamp_wins_and_torn_records_are_skipped() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = super::super::dir::held(tmp.path());
        assert_eq!(append(&dir, &[(id(1), 10), (id(2), 20)])?, 160);
        // A crashed writer left half a record, then others appended whole ones.
        let mut torn = Vec::new();
        encode(&id(3), 30, &mut torn);
        OpenOptions::new()
            .append(true)
            .open(tmp.path().join(STAMPS_FILE))?
            .write_all(&torn[..41])?;
        // The size after the append: the torn half record counts.
        assert_eq!(append(&dir, &[(id(1), 15), (id(2), 5)])?, 160 + 41 + 160);
        let stamps = read(&dir)?;
        assert_eq!(stamps.get(&id(1)), Some(&15));
        assert_eq!(stamps.get(&id(2)), Some(&20));
        assert_eq!(stamps.get(&id(3)), None);
        assert_eq!(stamps.len(), 2);

        compact(&dir)?;
        assert_eq!(file_len(&dir), 2 * RECORD_BYTES as u64);
        assert_eq!(read(&dir)?, stamps);

        rewrite(&dir, &HashMap::from([(id(2), 7)]))?;
        assert_eq!(read(&dir)?, HashMap::from([(id(2), 7)]));
        Ok(())
    }

    #[test]
    fn a_read_takes_only_the_newest_bytes_up_to_the_cap() -> io::Result<()> {
        let tmp = tempfile::tempdir()?;
        let dir = super::super::dir::held(tmp.path());
        let stamps: Vec<_> = (0..10).map(|n| (id(n), u64::from(n))).collect();
        append(&dir, &stamps)?;
        let cap = 3 * RECORD_BYTES as u64;
        let newest = read_at_most(&dir, cap)?;
        assert_eq!(
            newest,
            stamps[7..].iter().copied().collect::<HashMap<_, _>>()
        );
        // A cap in the middle of a record: the torn first record is skipped.
        let newest = read_at_most(&dir, cap + 40)?;
        assert_eq!(
            newest,
            stamps[7..].iter().copied().collect::<HashMap<_, _>>()
        );
        assert_eq!(read(&dir)?.len(), 10);
        Ok(())
    }

    #[cfg(unix)]
    #[test]
    fn a_stamps_name_that_is_not_a_regular_file_is_no_stamps_and_never_followed() -> io::Result<()>
    {
        let tmp = tempfile::tempdir()?;
        let dir = super::super::dir::held(tmp.path());
        let elsewhere = tempfile::tempdir()?;
        let target = elsewhere.path().join("profile");
        std::fs::write(&target, b"export PATH=/usr/bin\n")?;
        std::os::unix::fs::symlink(&target, tmp.path().join(STAMPS_FILE))?;
        assert!(read(&dir)?.is_empty());
        assert_eq!(file_len(&dir), 0);
        let err = append(&dir, &[(id(1), 1)]).expect_err("refused");
        assert!(crate::regular_file::is_not_regular(&err), "{err}");
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(std::fs::read(&target)?, b"export PATH=/usr/bin\n");

        std::fs::remove_file(tmp.path().join(STAMPS_FILE))?;
        std::os::unix::fs::symlink("/dev/zero", tmp.path().join(STAMPS_FILE))?;
        assert!(read(&dir)?.is_empty(), "not followed, not read");
        Ok(())
    }
}
