//! `kiln report RECORD... [--image FILE]... [--top N] [--svg FILE] [--json]`:
//! what record files (written by processes run with `KILN_RECORD`) say an
//! application used, for the library authors whose images it ran on.
//!
//! - per library (the producer of the image an entry came from): entries
//!   and hits served from its image;
//! - per owner (compiler configuration): hits from images and from each
//!   tier, compiles at run time and the time they took;
//! - the specializations compiled at run time, most costly first (`--top`);
//! - those that no shipped image holds: no process got them from an image,
//!   and none of the `--image` files holds them. These are what a library
//!   author should add to the precompile block. Entries only ever found in
//!   memory (inserted directly by the application) are left out.
//!
//! `--svg FILE` also writes a chart of the compile time per specialization
//! (the `--top` most costly). Text from record files is untrusted: shown
//! escaped, `--json` keeps it exact.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::PathBuf;
use std::time::Duration;

use kiln_core::record::{Recording, SourceKind, Used};
use kiln_image::{Digest, Image, Verification};
use serde_json::{Value, json};

use crate::bake::{damage_json, damage_line, read_records, sources};
use crate::common::{PrintArgs, RecordArgs, Seq, Table, print_json, short, write_rows};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln report`.
#[derive(clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    records: RecordArgs,
    /// A shipped image file: entries it holds are not reported as missing
    /// from every shipped image.
    #[arg(long = "image", value_name = "FILE")]
    images: Vec<PathBuf>,
    /// How many of the specializations compiled at run time to list and
    /// chart, most costly first.
    #[arg(long, default_value_t = 20)]
    top: usize,
    /// Also write a chart (SVG) of the compile time per specialization.
    #[arg(long, value_name = "FILE")]
    svg: Option<PathBuf>,
    #[command(flatten)]
    print: PrintArgs,
}

/// Per library: the producer of the images entries came from.
#[derive(Default)]
struct Library {
    entries: u64,
    hits: u64,
}

/// Per owner.
#[derive(Default)]
struct OwnerRow {
    label: String,
    entries: u64,
    image_hits: u64,
    tier_hits: BTreeMap<String, u64>,
    compiles: u64,
    compile_time: Duration,
}

/// The report, computed.
struct Report<'r> {
    libraries: BTreeMap<String, Library>,
    owners: BTreeMap<Digest, OwnerRow>,
    /// Compiled at run time, most costly first, with whether a shipped
    /// image holds it.
    compiled: Vec<(&'r Used, bool)>,
    /// In no shipped image, by owner label then most costly first.
    missed: Vec<&'r Used>,
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let recording = read_records(&args.records.records)?;
    let mut images = Vec::new();
    for path in &args.images {
        images.push(Image::open(path, Verification::Structural).map_err(CliError::image(path))?);
    }
    let in_given = |used: &Used| {
        images
            .iter()
            .any(|image| matches!(image.find(&used.owner, &used.key), Ok(Some(_))))
    };
    let report = compute(&recording, in_given);
    if let Some(path) = &args.svg {
        let rows: Vec<(&str, Duration)> = report
            .compiled
            .iter()
            .take(args.top)
            .map(|(used, _)| (used.name.as_str(), used.compile_time()))
            .collect();
        std::fs::write(path, svg(&rows)).map_err(|source| CliError::Write {
            path: path.clone(),
            source,
        })?;
    }
    if args.print.json {
        print_report_json(&recording, &report)?;
    } else {
        print_text(&args, &recording, &report)?;
    }
    Ok(Outcome::Clean)
}

fn compute<'r>(recording: &'r Recording, in_given: impl Fn(&Used) -> bool) -> Report<'r> {
    let mut libraries: BTreeMap<String, Library> = BTreeMap::new();
    let mut owners: BTreeMap<Digest, OwnerRow> = BTreeMap::new();
    let mut compiled = Vec::new();
    let mut missed = Vec::new();
    for used in recording.entries() {
        let row = owners.entry(used.owner).or_default();
        if row.label.is_empty() {
            row.label.clone_from(&used.owner_label);
        }
        row.entries += 1;
        for (source, usage) in &used.sources {
            match source {
                SourceKind::Image => {
                    row.image_hits = row.image_hits.saturating_add(usage.hits);
                    for producer in &usage.producers {
                        let library = libraries.entry(producer.clone()).or_default();
                        library.entries += 1;
                        library.hits = library.hits.saturating_add(usage.hits);
                    }
                }
                SourceKind::Tier(name) => {
                    let hits = row.tier_hits.entry(name.clone()).or_default();
                    *hits = hits.saturating_add(usage.hits);
                }
                SourceKind::Compiled => {
                    row.compiles = row.compiles.saturating_add(usage.processes);
                    row.compile_time = row.compile_time.saturating_add(usage.compile_time);
                }
                // Already in memory, or a source newer than this tool.
                _ => {}
            }
        }
        let shipped = used.from_image() || in_given(used);
        if used.compiles() > 0 {
            compiled.push((used, shipped));
        }
        let acquired = used
            .sources
            .keys()
            .any(|source| matches!(source, SourceKind::Compiled | SourceKind::Tier(_)));
        if !shipped && acquired {
            missed.push(used);
        }
    }
    compiled.sort_by(|(a, _), (b, _)| {
        b.compile_time()
            .cmp(&a.compile_time())
            .then_with(|| a.name.cmp(&b.name))
    });
    missed.sort_by(|a, b| {
        a.owner_label
            .cmp(&b.owner_label)
            .then_with(|| b.compile_time().cmp(&a.compile_time()))
            .then_with(|| a.name.cmp(&b.name))
    });
    Report {
        libraries,
        owners,
        compiled,
        missed,
    }
}

/// A duration in milliseconds, one decimal.
fn ms(duration: Duration) -> String {
    format!("{:.1} ms", duration.as_secs_f64() * 1e3)
}

/// An entry's name, or its key when no record kept the name.
fn name_of(used: &Used) -> String {
    if used.name.is_empty() {
        format!("(key {})", short(&used.key))
    } else {
        used.name.clone()
    }
}

fn print_text(args: &Args, recording: &Recording, report: &Report<'_>) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{} record files, {} records, {} distinct entries",
        args.records.records.len(),
        recording.records(),
        recording.len()
    )?;
    if let Some(line) = damage_line(&recording.damage()) {
        writeln!(out, "{line}")?;
    }

    writeln!(
        out,
        "\nby library (the producer of the image entries came from):"
    )?;
    if report.libraries.is_empty() {
        writeln!(out, "  no entry came from an image")?;
    } else {
        let mut table = Table::new(&["PRODUCER", "ENTRIES", "HITS"]);
        for (producer, library) in &report.libraries {
            table.row(vec![
                producer.clone(),
                library.entries.to_string(),
                library.hits.to_string(),
            ]);
        }
        table.write(&mut out, "  ")?;
    }

    writeln!(out, "\nby owner:")?;
    if report.owners.is_empty() {
        writeln!(out, "  nothing recorded")?;
    } else {
        // One row per owner: as many as entries in a hostile record file,
        // so made one at a time.
        let owner_rows = || {
            report.owners.iter().map(|(digest, row)| {
                let tiers = row
                    .tier_hits
                    .iter()
                    .map(|(tier, hits)| format!("{tier} {hits}"))
                    .collect::<Vec<_>>()
                    .join(", ");
                vec![
                    row.label.clone(),
                    short(digest),
                    row.entries.to_string(),
                    row.image_hits.to_string(),
                    if tiers.is_empty() { "0".into() } else { tiers },
                    row.compiles.to_string(),
                    ms(row.compile_time),
                ]
            })
        };
        let header = [
            "OWNER",
            "DIGEST",
            "ENTRIES",
            "IMAGE HITS",
            "TIER HITS",
            "COMPILES",
            "COMPILE TIME",
        ];
        write_rows(&mut out, "  ", &header, owner_rows)?;
    }

    writeln!(out, "\ncompiled at run time, most costly first:")?;
    if report.compiled.is_empty() {
        writeln!(out, "  nothing")?;
    } else {
        let mut table = Table::new(&[
            "NAME",
            "OWNER",
            "COMPILES",
            "TOTAL",
            "MEAN",
            "IN A SHIPPED IMAGE",
        ]);
        for (used, shipped) in report.compiled.iter().take(args.top) {
            let mean = used.compile_time() / u32::try_from(used.compiles()).unwrap_or(u32::MAX);
            table.row(vec![
                name_of(used),
                used.owner_label.clone(),
                used.compiles().to_string(),
                ms(used.compile_time()),
                ms(mean),
                if *shipped { "yes" } else { "no" }.to_owned(),
            ]);
        }
        table.write(&mut out, "  ")?;
        if report.compiled.len() > args.top {
            writeln!(
                out,
                "  ... and {} more (--top)",
                report.compiled.len() - args.top
            )?;
        }
    }

    writeln!(
        out,
        "\nnot in any shipped image ({}): add these to the library's precompile block",
        report.missed.len()
    )?;
    if !report.missed.is_empty() {
        let missed_rows = || {
            report.missed.iter().map(|used| {
                vec![
                    used.owner_label.clone(),
                    name_of(used),
                    short(&used.key),
                    used.compiles().to_string(),
                    ms(used.compile_time()),
                    used.hits().to_string(),
                    sources(used),
                ]
            })
        };
        let header = [
            "OWNER",
            "NAME",
            "KEY",
            "COMPILES",
            "COMPILE TIME",
            "HITS",
            "RECORDED FROM",
        ];
        write_rows(&mut out, "  ", &header, missed_rows)?;
    }
    if let Some(path) = &args.svg {
        writeln!(out, "\nchart written to {}", escape::path(path))?;
    }
    Ok(())
}

fn entry_json(used: &Used) -> Value {
    json!({
        "name": used.name,
        "owner": used.owner.to_hex(),
        "owner_label": used.owner_label,
        "key": used.key.to_hex(),
        "compiles": used.compiles(),
        "compile_ns": u64::try_from(used.compile_time().as_nanos()).unwrap_or(u64::MAX),
        "hits": used.hits(),
        "recorded_from": used.sources.keys().map(ToString::to_string).collect::<Vec<_>>(),
    })
}

/// The report as JSON (keys in alphabetical order). The lists as long as
/// the record files are written one element at a time ([`Seq`]).
fn print_report_json(recording: &Recording, report: &Report<'_>) -> Result<(), CliError> {
    #[derive(serde::Serialize)]
    struct ReportJson<C, L, M, O> {
        compiled: C,
        damage: Value,
        entries: usize,
        libraries: L,
        not_in_any_shipped_image: M,
        owners: O,
        records: u64,
    }
    print_json(&ReportJson {
        compiled: Seq(|| {
            report.compiled.iter().map(|(used, shipped)| {
                let mut value = entry_json(used);
                value["in_shipped_image"] = json!(shipped);
                value
            })
        }),
        damage: damage_json(&recording.damage()),
        entries: recording.len(),
        libraries: Seq(|| {
            report.libraries.iter().map(|(producer, library)| {
                json!({
                    "producer": producer,
                    "entries": library.entries,
                    "hits": library.hits,
                })
            })
        }),
        not_in_any_shipped_image: Seq(|| report.missed.iter().map(|used| entry_json(used))),
        owners: Seq(|| {
            report.owners.iter().map(|(digest, row)| {
                json!({
                    "owner": digest.to_hex(),
                    "owner_label": row.label,
                    "entries": row.entries,
                    "image_hits": row.image_hits,
                    "tier_hits": row.tier_hits,
                    "compiles": row.compiles,
                    "compile_ns": u64::try_from(row.compile_time.as_nanos()).unwrap_or(u64::MAX),
                })
            })
        }),
        records: recording.records(),
    })
}

/// `text` for an SVG text node or attribute: terminal-unsafe characters
/// escaped as on the terminal (XML forbids most control characters), then
/// the XML specials.
fn xml(text: &str) -> String {
    let mut out = String::new();
    for c in escape(text).chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A horizontal bar chart of `rows` (name, compile time), one bar each.
fn svg(rows: &[(&str, Duration)]) -> String {
    const WIDTH: u32 = 960;
    const LABELS: u32 = 380;
    const BARS: f64 = 440.0;
    const ROW: u32 = 24;
    const TOP: u32 = 48;
    let height = TOP + ROW * u32::try_from(rows.len()).unwrap_or(u32::MAX / ROW).max(1) + 16;
    let longest = rows
        .iter()
        .map(|(_, time)| time.as_secs_f64())
        .fold(0.0, f64::max);
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{height}\" \
         viewBox=\"0 0 {WIDTH} {height}\" font-family=\"sans-serif\" font-size=\"13\">"
    );
    let _ = writeln!(
        out,
        "<rect width=\"{WIDTH}\" height=\"{height}\" fill=\"white\"/>\n\
         <text x=\"12\" y=\"26\" font-size=\"16\" font-weight=\"bold\">Compile time at run \
         time per specialization (summed over processes)</text>"
    );
    if rows.is_empty() {
        let _ = writeln!(
            out,
            "<text x=\"12\" y=\"{}\">nothing was compiled at run time</text>",
            TOP + 16
        );
    }
    for (n, (name, time)) in rows.iter().enumerate() {
        let y = TOP + ROW * u32::try_from(n).unwrap_or(0);
        let width = if longest > 0.0 {
            (time.as_secs_f64() / longest * BARS).max(1.0)
        } else {
            1.0
        };
        let _ = writeln!(
            out,
            "<text x=\"{}\" y=\"{}\" text-anchor=\"end\">{}</text>\n\
             <rect x=\"{}\" y=\"{}\" width=\"{width:.1}\" height=\"{}\" fill=\"#d9622b\"/>\n\
             <text x=\"{:.1}\" y=\"{}\">{}</text>",
            LABELS - 8,
            y + 16,
            xml(name),
            LABELS,
            y + 4,
            ROW - 6,
            f64::from(LABELS) + width + 6.0,
            y + 16,
            xml(&ms(*time)),
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_escapes_names_and_scales_bars_to_the_longest() {
        let chart = svg(&[
            ("a<b>&\"c\"\u{1b}", Duration::from_millis(200)),
            ("d", Duration::from_millis(100)),
        ]);
        assert!(
            chart.contains("a&lt;b&gt;&amp;&quot;c&quot;\\u{1b}"),
            "{chart}"
        );
        assert!(!chart.contains('\u{1b}'));
        assert!(chart.contains("width=\"440.0\""), "{chart}");
        assert!(chart.contains("width=\"220.0\""), "{chart}");
        assert!(svg(&[]).contains("nothing was compiled"));
    }
}
