//! Helpers shared by the subcommands: short digests, world ranges, plain
//! text tables and JSON output.

use std::io::Write;

use kiln_image::{Digest, EntryRef};

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

/// The kinds of an entry's artifacts, comma-separated.
pub(crate) fn kinds(entry: &EntryRef<'_>) -> String {
    entry
        .artifacts()
        .map(|a| a.kind_name().to_owned())
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

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
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

/// Prints `value` as pretty JSON on standard output.
pub(crate) fn print_json(value: &serde_json::Value) -> Result<(), crate::CliError> {
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    Ok(())
}
