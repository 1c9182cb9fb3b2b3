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
        std::fs::write(path, svg(&rows)?).map_err(|source| CliError::Write {
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

/// The chart's width, the width of its name column, and the height of one
/// bar's row (pixels).
const CHART_WIDTH: u32 = 960;
const CHART_NAMES: u32 = 380;
const CHART_ROW: u32 = 24;

/// The characters of a name shown on the chart (a longer one is cut, with
/// `…`).
const CHART_NAME_CHARS: usize = 56;

/// A horizontal bar chart (SVG) of `rows` (name, compile time), one bar
/// each, most costly at the top, drawn with plotters as `kiln-bench`'s
/// charts are. Names are untrusted: shown as on the terminal (XML forbids
/// most control characters), cut to [`CHART_NAME_CHARS`]; plotters escapes
/// the XML specials.
fn svg(rows: &[(&str, Duration)]) -> Result<String, CliError> {
    use plotters::coord::ranged1d::SegmentValue;
    use plotters::prelude::*;
    use plotters::style::text_anchor::{HPos, Pos, VPos};

    const TITLE: &str = "Compile time at run time per specialization (summed over processes)";
    const BAR: RGBColor = RGBColor(0xd9, 0x62, 0x2b);
    let fail = |error: &dyn std::fmt::Display| CliError::Chart(error.to_string());
    let n = rows.len();
    let height = 48 + CHART_ROW * u32::try_from(n.max(1)).unwrap_or(u32::MAX / CHART_ROW) + 48;
    let names: Vec<String> = rows.iter().map(|(name, _)| chart_name(name)).collect();
    let millis: Vec<f64> = rows
        .iter()
        .map(|(_, time)| time.as_secs_f64() * 1e3)
        .collect();
    let longest = millis.iter().copied().fold(0.0, f64::max);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (CHART_WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| fail(&e))?;
        let root = root
            .titled(TITLE, ("sans-serif", 18).into_font().style(FontStyle::Bold))
            .map_err(|e| fail(&e))?;
        if rows.is_empty() {
            root.draw(&Text::new(
                "nothing was compiled at run time",
                (12, 16),
                ("sans-serif", 15),
            ))
            .map_err(|e| fail(&e))?;
        } else {
            // Row 0 at the bottom: the most costly (first) is drawn last.
            let row = |i: usize| n - 1 - i;
            let mut chart = ChartBuilder::on(&root)
                .margin(12)
                .x_label_area_size(36)
                .y_label_area_size(CHART_NAMES)
                .build_cartesian_2d(0.0..(longest * 1.15).max(1e-3), (0..n).into_segmented())
                .map_err(|e| fail(&e))?;
            chart
                .configure_mesh()
                .disable_y_mesh()
                .x_desc("compile time (ms)")
                .label_style(("sans-serif", 14))
                .y_labels(n)
                .y_label_formatter(&|value| match value {
                    SegmentValue::CenterOf(r) | SegmentValue::Exact(r) if *r < n => {
                        names[row(*r)].clone()
                    }
                    _ => String::new(),
                })
                .draw()
                .map_err(|e| fail(&e))?;
            chart
                .draw_series(millis.iter().enumerate().map(|(i, &ms)| {
                    let mut bar = Rectangle::new(
                        [
                            (0.0, SegmentValue::Exact(row(i))),
                            (ms, SegmentValue::Exact(row(i) + 1)),
                        ],
                        BAR.filled(),
                    );
                    bar.set_margin(3, 3, 0, 0);
                    bar
                }))
                .map_err(|e| fail(&e))?;
            chart
                .draw_series(rows.iter().enumerate().map(|(i, (_, time))| {
                    Text::new(
                        format!(" {}", self::ms(*time)),
                        (millis[i], SegmentValue::CenterOf(row(i))),
                        TextStyle::from(("sans-serif", 13).into_font())
                            .pos(Pos::new(HPos::Left, VPos::Center)),
                    )
                }))
                .map_err(|e| fail(&e))?;
        }
        root.present().map_err(|e| fail(&e))?;
    }
    Ok(out)
}

/// A name for the chart: escaped as on the terminal, cut to
/// [`CHART_NAME_CHARS`].
fn chart_name(name: &str) -> String {
    let shown = escape(name);
    if shown.chars().count() <= CHART_NAME_CHARS {
        return shown.into_owned();
    }
    let mut cut: String = shown.chars().take(CHART_NAME_CHARS - 1).collect();
    cut.push('…');
    cut
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chart_escapes_names_and_scales_bars_to_the_longest() {
        let chart = svg(&[
            ("a<b>&\"c\"\u{1b}", Duration::from_millis(200)),
            ("d", Duration::from_millis(100)),
            (&"long".repeat(40), Duration::from_millis(50)),
        ])
        .expect("drawn");
        assert!(chart.starts_with("<svg"), "{chart}");
        assert!(
            chart.contains("a&lt;b&gt;&amp;&quot;c&quot;\\u{1b}"),
            "{chart}"
        );
        assert!(!chart.contains('\u{1b}'));
        assert!(
            chart.contains(&format!("{}lon…", "long".repeat(13))),
            "{chart}"
        );
        assert!(
            chart.contains("200.0 ms") && chart.contains("100.0 ms"),
            "{chart}"
        );
        // The bars, as drawn: the first twice as wide as the second.
        let widths: Vec<f64> = chart
            .lines()
            .filter(|line| line.contains("<rect") && line.contains("fill=\"#D9622B\""))
            .map(|line| {
                let at = line.find("width=\"").expect("a width") + 7;
                let rest = &line[at..];
                rest[..rest.find('"').expect("quoted")]
                    .parse()
                    .expect("a number")
            })
            .collect();
        assert_eq!(widths.len(), 3, "{chart}");
        let ratio = widths[0] / widths[1];
        assert!((1.9..2.1).contains(&ratio), "{widths:?}");
        assert!(svg(&[]).expect("drawn").contains("nothing was compiled"));
    }
}
