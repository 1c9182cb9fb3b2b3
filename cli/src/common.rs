//! Helpers shared by the subcommands: short digests, world ranges, plain
//! text tables and JSON output.
//!
//! Text from an image or a cache directory is untrusted: every cell of a
//! [`Table`] and every line printed holds it only as
//! [`escape`](crate::escape::escape) shows it.

use std::io::Write;

use kiln_core::trust::{Origin, TrustPolicy};
use kiln_image::{Digest, EntryRef, Image, PublicKey, SignatureCheck, SignatureError, TrustedKeys};

use crate::escape::escape;

/// Hex digits shown for a digest in tables.
pub(crate) const SHORT_HEX: usize = 12;

/// The first [`SHORT_HEX`] hex digits of a digest.
pub(crate) fn short(digest: &Digest) -> String {
    digest.to_hex()[..SHORT_HEX].to_owned()
}

/// A world number, with `u64::MAX` shown as `max`.
pub(crate) fn world(world: u64) -> String {
    if world == u64::MAX {
        "max".to_owned()
    } else {
        world.to_string()
    }
}

/// `min..max` of an entry.
pub(crate) fn worlds(entry: &EntryRef<'_>) -> String {
    format!("{}..{}", world(entry.min_world()), world(entry.max_world()))
}

/// The kinds of an entry's artifacts, comma-separated and escaped (a
/// custom kind is untrusted text).
pub(crate) fn kinds(entry: &EntryRef<'_>) -> String {
    entry
        .artifacts()
        .map(|a| escape(a.kind_name()).into_owned())
        .collect::<Vec<_>>()
        .join(",")
}

/// A table printed with columns padded to their widest cell.
pub(crate) struct Table {
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        Table {
            rows: vec![header.iter().map(|cell| (*cell).to_owned()).collect()],
        }
    }

    /// Adds a row; each cell is [escaped](escape) (escaping a cell twice
    /// changes nothing).
    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(
            cells
                .into_iter()
                .map(|cell| escape(&cell).into_owned())
                .collect(),
        );
    }

    pub(crate) fn write(&self, out: &mut impl Write, indent: &str) -> std::io::Result<()> {
        let widths = widths(self.rows.iter().map(Vec::as_slice));
        for row in &self.rows {
            write_row(out, indent, row, &widths)?;
        }
        Ok(())
    }
}

/// Writes a table too large to hold in memory (one row per record-file
/// entry): `rows` is called twice, to measure the columns and then to
/// print, and makes one row at a time; each cell is [escaped](escape).
/// Memory: one row, whatever the number of rows.
pub(crate) fn write_rows<I>(
    out: &mut impl Write,
    indent: &str,
    header: &[&str],
    rows: impl Fn() -> I,
) -> std::io::Result<()>
where
    I: Iterator<Item = Vec<String>>,
{
    let header: Vec<String> = header.iter().map(|cell| (*cell).to_owned()).collect();
    let escaped = |row: Vec<String>| -> Vec<String> {
        row.into_iter()
            .map(|cell| escape(&cell).into_owned())
            .collect()
    };
    let mut widths = widths(std::iter::once(header.as_slice()));
    for row in rows() {
        let row = escaped(row);
        let more = self::widths(std::iter::once(row.as_slice()));
        if more.len() > widths.len() {
            widths.resize(more.len(), 0);
        }
        for (width, cell) in widths.iter_mut().zip(more) {
            *width = (*width).max(cell);
        }
    }
    write_row(out, indent, &header, &widths)?;
    for row in rows() {
        write_row(out, indent, &escaped(row), &widths)?;
    }
    Ok(())
}

/// The width of each column of `rows` (in characters).
fn widths<'a>(rows: impl Iterator<Item = &'a [String]> + Clone) -> Vec<usize> {
    let columns = rows.clone().map(<[String]>::len).max().unwrap_or(0);
    (0..columns)
        .map(|c| {
            rows.clone()
                .filter_map(|row| row.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

/// One row, its cells padded to `widths` (the last one not).
fn write_row(
    out: &mut impl Write,
    indent: &str,
    row: &[String],
    widths: &[usize],
) -> std::io::Result<()> {
    let mut line = indent.to_owned();
    for (c, cell) in row.iter().enumerate() {
        if c + 1 == row.len() {
            line.push_str(cell);
        } else {
            let width = widths.get(c).copied().unwrap_or(0);
            line.push_str(&format!("{cell:<width$}  "));
        }
    }
    writeln!(out, "{}", line.trim_end())
}

/// A JSON array made on the fly from `make` (called once, when written),
/// one element at a time: for lists as long as a record file, which a
/// [`serde_json::Value`] would hold whole.
pub(crate) struct Seq<F>(pub(crate) F);

impl<F, I> serde::Serialize for Seq<F>
where
    F: Fn() -> I,
    I: Iterator,
    I::Item: serde::Serialize,
{
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq((self.0)())
    }
}

/// Prints `value` as pretty JSON on standard output, strings exact but
/// terminal-safe ([`write_json`](crate::escape::write_json)).
pub(crate) fn print_json(value: &impl serde::Serialize) -> Result<(), crate::CliError> {
    let mut out = std::io::stdout().lock();
    crate::escape::write_json(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}

/// `image`'s signatures checked as `kiln verify` checks them: every one
/// must verify, and under `trust` with trusted keys the image must be
/// admitted as one from elsewhere ([`kiln_core::trust::admit`]: a trusted
/// key's signature). What each signature is, for the report.
pub(crate) fn check_signatures(
    image: &Image,
    trust: &TrustPolicy,
) -> Result<Vec<SignatureCheck>, SignatureError> {
    let checks = image.check_signatures(trust.trusted_keys.as_ref());
    if let Some(bad) = checks.iter().find(|check| !check.valid) {
        return Err(SignatureError::BadSignature { key: bad.key });
    }
    trust.admit(image, Origin::Elsewhere)?;
    Ok(checks)
}

/// `--trusted-key K`, shared by every subcommand that judges signatures.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct TrustArgs {
    /// Trust this public key too: 64 hex digits, or a file of public keys,
    /// one per line, as `kiln keygen` writes KEY.pub (repeatable; added to
    /// KILN_TRUSTED_KEYS).
    #[arg(long = "trusted-key", value_name = "K")]
    pub(crate) trusted_keys: Vec<String>,
}

impl TrustArgs {
    /// The tool's trust policy with these keys ([`trust_policy`]).
    pub(crate) fn policy(&self) -> Result<TrustPolicy, crate::CliError> {
        trust_policy(&self.trusted_keys)
    }
}

/// `--json`, shared by every subcommand that prints a report.
#[derive(clap::Args, Debug, Default)]
pub(crate) struct PrintArgs {
    /// Print JSON instead of text.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The record files of `kiln bake` and `kiln report`.
#[derive(clap::Args, Debug)]
pub(crate) struct RecordArgs {
    /// Record files, written by processes run with KILN_RECORD=FILE.
    #[arg(required = true, value_name = "RECORD")]
    pub(crate) records: Vec<std::path::PathBuf>,
}

/// The trust policy of a tool: the process's (`KILN_TRUSTED_KEYS`,
/// `KILN_SIGNING_KEY`, as the library reads them), with the keys of
/// `--trusted-key` arguments added (each a public key, 64 hex digits, or a
/// file of them, one per line, as `kiln keygen` writes to `KEY.pub`). With
/// either, signatures by those keys are required.
pub(crate) fn trust_policy(args: &[String]) -> Result<TrustPolicy, crate::CliError> {
    let policy = kiln_core::settings::Settings::process().trust.clone();
    if args.is_empty() {
        return Ok(policy);
    }
    let mut keys = TrustedKeys::default();
    for arg in args {
        let text = arg.trim();
        if text.len() == 64 && text.bytes().all(|b| b.is_ascii_hexdigit()) {
            let key: PublicKey = text.parse().map_err(crate::CliError::key(arg))?;
            keys.insert(key);
        } else {
            let path = std::path::Path::new(arg);
            let found = kiln_core::trust::read_trusted_keys_file(path)
                .map_err(crate::CliError::key(arg))?;
            keys.extend(found);
        }
    }
    Ok(policy.with_trusted_keys(keys))
}
