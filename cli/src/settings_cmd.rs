//! `kiln settings`: every `KILN_*` switch of the crates linked into the
//! tool (kiln-core's, kiln-cuda's, kiln-redis's), its value in this
//! process and where the value came from (`default`, `variable`, `file`:
//! keys read from the files a variable names; or the default, when the
//! variable holds a value the switch does not take), one line each, or
//! `--json`.
//!
//! `--markdown` prints the switch table of `docs/switches.md` instead,
//! generated from the same declarations
//! ([`kiln_core::settings::markdown_table`]), and `--write-table FILE`
//! replaces the table between the markers in FILE with it.

use std::io::Write;
use std::path::PathBuf;

use kiln_core::settings::{Settings, Source, TABLE_BEGIN, TABLE_END, markdown_table};
use serde_json::json;

use crate::common::{PrintArgs, print_json, write_rows};
use crate::{CliError, Outcome};

/// Arguments of `kiln settings`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    print: PrintArgs,
    /// Print the switch table of docs/switches.md (Markdown) instead.
    #[arg(long, conflicts_with_all = ["json", "write_table"])]
    markdown: bool,
    /// Replace the switch table between the markers of FILE
    /// (docs/switches.md) with the generated one.
    #[arg(long, value_name = "FILE", conflicts_with = "json")]
    write_table: Option<PathBuf>,
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    if args.markdown {
        std::io::stdout()
            .lock()
            .write_all(markdown_table().as_bytes())?;
        return Ok(Outcome::Clean);
    }
    if let Some(path) = &args.write_table {
        return write_table(path);
    }
    let settings = Settings::process();
    let effective = settings.effective();
    if args.print.json {
        let switches: Vec<serde_json::Value> = effective
            .iter()
            .map(|(switch, value)| {
                json!({
                    "name": switch.name(),
                    "section": switch.section(),
                    "when": switch.phase().to_string(),
                    "value": value.value,
                    "source": source_word(&value.source),
                    "ignored": match &value.source {
                        Source::Ignored(set) => Some(set.as_str()),
                        _ => None,
                    },
                })
            })
            .collect();
        print_json(&json!({ "switches": switches }))?;
        return Ok(Outcome::Clean);
    }
    let mut out = std::io::stdout().lock();
    write_rows(&mut out, "", &["switch", "value", "from", "when"], || {
        effective.iter().map(|(switch, value)| {
            vec![
                switch.name().to_owned(),
                value.value.clone(),
                value.source.to_string(),
                switch.phase().to_string(),
            ]
        })
    })?;
    Ok(Outcome::Clean)
}

/// The source as one word, for JSON.
fn source_word(source: &Source) -> &'static str {
    match source {
        Source::Default => "default",
        Source::Variable => "variable",
        Source::File => "file",
        Source::Ignored(_) => "ignored",
        _ => "other",
    }
}

/// Rewrites the switch table of `path` (between [`TABLE_BEGIN`] and
/// [`TABLE_END`]) with the generated one.
fn write_table(path: &std::path::Path) -> Result<Outcome, CliError> {
    let io = |error| CliError::Table {
        path: path.to_owned(),
        error,
    };
    let text = std::fs::read_to_string(path).map_err(io)?;
    let updated =
        kiln_core::settings::with_table(&text).ok_or_else(|| CliError::NoTableMarkers {
            path: path.to_owned(),
            begin: TABLE_BEGIN,
            end: TABLE_END,
        })?;
    if updated != text {
        std::fs::write(path, updated).map_err(io)?;
        eprintln!(
            "kiln: {}: switch table rewritten",
            crate::escape::path(path)
        );
    }
    Ok(Outcome::Clean)
}
