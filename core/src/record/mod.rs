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
//! through a symbolic link), in pieces, and skips, counting in [`Damage`],
//! every line that is too long, not UTF-8, malformed, of an unknown
//! version, or fails its check, and a last line without its line break (a
//! record torn by a crash or a full disk). Time and memory are linear in
//! the bytes read, memory a small multiple of them (see `reading`).
//!
//! # Modules
//!
//! `format` (a record line: fields, escapes, check, parsing), `writer`
//! ([`Recorder`]) and `reading` ([`Recording`]).

mod format;
mod reading;
mod writer;

#[cfg(test)]
mod tests;

pub use format::{MAGIC, MAX_LINE, SourceKind};
pub use reading::{DEFAULT_READ_LIMIT, Damage, READ_PIECE, Recording, SourceUse, Sources, Used};
pub use writer::{MAX_ENTRIES, Recorder};
