//! Helpers shared by the subcommands: short digests, world ranges, plain
//! text tables and JSON output.
//!
//! Text from an image or a cache directory is untrusted: every cell of a
//! [`Table`] and every line printed holds it only as
//! [`escape`](crate::escape::escape) shows it.

use std::io::Write;

use kiln_core::trust::{Origin, TrustPolicy};
use kiln_image::{Digest, EntryRef, Image, ImageError, PublicKey, SignatureCheck, TrustedKeys};

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
        let columns = self.rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                self.rows
                    .iter()
                    .filter_map(|row| row.get(c))
                    .map(|cell| cell.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for row in &self.rows {
            let mut line = indent.to_owned();
            for (c, cell) in row.iter().enumerate() {
                if c + 1 == row.len() {
                    line.push_str(cell);
                } else {
                    line.push_str(&format!("{cell:<width$}  ", width = widths[c]));
                }
            }
            writeln!(out, "{}", line.trim_end())?;
        }
        Ok(())
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
) -> Result<Vec<SignatureCheck>, ImageError> {
    let checks = image.check_signatures(trust.trusted_keys.as_ref());
    if let Some(bad) = checks.iter().find(|check| !check.valid) {
        return Err(ImageError::BadSignature { key: bad.key });
    }
    trust.admit(image, Origin::Elsewhere)?;
    Ok(checks)
}

/// The trust policy of a tool: the process's (`KILN_TRUSTED_KEYS`,
/// `KILN_SIGNING_KEY`, as the library reads them), with the keys of
/// `--trusted-key` arguments added (each a public key, 64 hex digits, or a
/// file of them, one per line, as `kiln keygen` writes to `KEY.pub`). With
/// either, signatures by those keys are required.
pub(crate) fn trust_policy(args: &[String]) -> Result<TrustPolicy, crate::CliError> {
    let policy = TrustPolicy::from_env();
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
