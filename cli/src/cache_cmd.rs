//! `kiln cache stats|ls|gc|clear|verify [--dir DIR] [--json]`: look after
//! the disk cache of run-time compiled entries.
//!
//! The directory is `--dir`, else `KILN_CACHE_DIR`, else the platform cache
//! directory + `kiln`; the cap is `--max-bytes`, else `KILN_CACHE_MAX_BYTES`
//! (default 1 GiB).
//! Each command works on the subdirectory of the image format version this
//! kiln reads (`<dir>/images-v<N>/`, printed by `stats`): `clear` removes
//! this version's entries only, `gc` evicts down to the cap within it, and
//! other versions' subdirectories are left alone.
//! `KILN_CACHE=0` turns the cache off for programs, not for this command.
//! `ls` and `verify` say where entries came from (compiled by this user's
//! processes, received signed, received unsigned). `verify` exits with
//! status 1 when a segment is bad, or when, with trusted keys
//! (`KILN_TRUSTED_KEYS`, and `--trusted-key` added to them), a program with
//! those keys would refuse it (`UNTRUSTED`).
//! Segment files are untrusted: names, labels, kinds, file names and
//! problems are shown escaped ([`escape`]); `--json` keeps them exact.

use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_core::disk::{
    ClearReport, DiskCache, DiskConfig, DiskStats, EntryInfo, GcReport, VerifyReport, config,
};

use crate::common::{PrintArgs, Table, TrustArgs, print_json};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// The `kiln cache` subcommands.
#[derive(clap::Subcommand)]
pub(crate) enum CacheCommand {
    /// Size, cap, segments and entries of this image format version's
    /// subdirectory of the cache directory (its path is printed).
    Stats(Target),
    /// Every entry, most recently used first.
    Ls(Target),
    /// Merge all segments into one, remove corrupt files and orphaned
    /// temporary files, evict least recently used entries over the cap.
    Gc(Target),
    /// Remove every entry of this image format version (other versions'
    /// subdirectories are left alone).
    Clear(Target),
    /// Fully verify every segment (every checksum); exit 1 if one is bad.
    Verify(Target),
}

/// Which cache directory, and how to print.
#[derive(clap::Args)]
pub(crate) struct Target {
    /// The cache directory [default: $KILN_CACHE_DIR, else the platform
    /// cache directory + kiln].
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The cap on this image format version's entries that `gc` evicts
    /// down to, e.g. 500M or 2G [default:
    /// $KILN_CACHE_MAX_BYTES, else 1G].
    #[arg(long, value_parser = parse_cap)]
    max_bytes: Option<u64>,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    print: PrintArgs,
}

/// Parses `--max-bytes`.
fn parse_cap(text: &str) -> Result<u64, String> {
    config::parse_size(text)
        .ok_or_else(|| format!("{text:?} is not a size: give bytes, or a number with K, M, G or T"))
}

impl Target {
    /// Opens the cache directory (`KILN_CACHE=0` is ignored here).
    fn open(&self) -> Result<DiskCache, CliError> {
        let from_env = kiln_core::settings::Settings::process()
            .without_var(config::CACHE)
            .disk();
        let mut disk_config = match (&self.dir, from_env) {
            (Some(dir), Ok(Some(mut env))) => {
                env.dir.clone_from(dir);
                env
            }
            (Some(dir), _) => DiskConfig::new(dir),
            (None, from_env) => from_env?.ok_or(kiln_core::Error::DiskNoDir)?,
        };
        disk_config.dir = std::path::absolute(&disk_config.dir).unwrap_or(disk_config.dir);
        if let Some(max_bytes) = self.max_bytes {
            disk_config.max_bytes = max_bytes;
        }
        disk_config.trusted_keys = self.trust.policy()?.trusted_keys;
        Ok(DiskCache::open(disk_config)?)
    }
}

/// What a `kiln cache` command found: the report of one [`DiskCache`]
/// operation.
enum Report {
    Stats(DiskStats),
    Ls {
        /// The subdirectory listed (this image format version's).
        dir: PathBuf,
        entries: Vec<EntryInfo>,
    },
    Gc(GcReport),
    Clear(ClearReport),
    Verify(VerifyReport),
}

impl CacheCommand {
    /// The command's options, and the operation it asks for.
    fn split(self) -> (Target, Operation) {
        match self {
            CacheCommand::Stats(target) => (target, Operation::Stats),
            CacheCommand::Ls(target) => (target, Operation::Ls),
            CacheCommand::Gc(target) => (target, Operation::Gc),
            CacheCommand::Clear(target) => (target, Operation::Clear),
            CacheCommand::Verify(target) => (target, Operation::Verify),
        }
    }
}

/// The operation of a [`CacheCommand`], apart from its options.
#[derive(Clone, Copy)]
enum Operation {
    Stats,
    Ls,
    Gc,
    Clear,
    Verify,
}

impl Operation {
    /// Runs the operation on `cache`.
    fn perform(self, cache: &DiskCache) -> Result<Report, CliError> {
        Ok(match self {
            Operation::Stats => Report::Stats(cache.stats()?),
            Operation::Ls => Report::Ls {
                entries: cache.ls()?,
                dir: cache.images_dir().to_owned(),
            },
            Operation::Gc => Report::Gc(cache.gc()?),
            Operation::Clear => Report::Clear(cache.clear()?),
            Operation::Verify => Report::Verify(cache.verify()?),
        })
    }
}

/// `kiln cache ...`: opens the directory, runs the operation, prints its
/// report; exit 1 only when `verify` finds a bad or untrusted segment.
pub(crate) fn run(command: CacheCommand) -> Result<Outcome, CliError> {
    let (target, operation) = command.split();
    let cache = target.open()?;
    let report = operation.perform(&cache)?;
    if target.print.json {
        report.print_json()?;
    } else {
        report.write_text(&mut std::io::stdout().lock())?;
    }
    Ok(report.outcome())
}

impl Report {
    /// Exit 1 when `verify` found a segment bad, or refused under the
    /// trusted keys.
    fn outcome(&self) -> Outcome {
        match self {
            Report::Verify(report) if !report.is_clean() => Outcome::Findings,
            _ => Outcome::Clean,
        }
    }

    /// The report as JSON: the core's report as it serializes (for `ls`,
    /// the list of entries).
    fn print_json(&self) -> Result<(), CliError> {
        let value = match self {
            Report::Stats(stats) => serde_json::to_value(stats)?,
            Report::Ls { entries, .. } => serde_json::to_value(entries)?,
            Report::Gc(report) => serde_json::to_value(report)?,
            Report::Clear(report) => serde_json::to_value(report)?,
            Report::Verify(report) => serde_json::to_value(report)?,
        };
        print_json(&value)
    }

    /// The report as text, untrusted text escaped.
    fn write_text(&self, out: &mut impl Write) -> Result<(), CliError> {
        match self {
            Report::Stats(stats) => write_stats(out, stats)?,
            Report::Ls { dir, entries } => write_ls(out, dir, entries)?,
            Report::Gc(report) => write_gc(out, report)?,
            Report::Clear(report) => writeln!(
                out,
                "removed {} files ({})",
                report.files_removed,
                size(report.bytes_removed)
            )?,
            Report::Verify(report) => write_verify(out, report)?,
        }
        Ok(())
    }
}

fn write_stats(out: &mut impl Write, stats: &DiskStats) -> std::io::Result<()> {
    let percent = stats.bytes as f64 * 100.0 / stats.max_bytes.max(1) as f64;
    writeln!(out, "directory   {}", escape::path(&stats.dir))?;
    writeln!(
        out,
        "size        {} of {} ({percent:.1}%)",
        size(stats.bytes),
        size(stats.max_bytes)
    )?;
    writeln!(out, "entries     {}", stats.entries)?;
    writeln!(
        out,
        "segments    {} ({} unreadable)",
        stats.segments, stats.unreadable_segments
    )?;
    writeln!(out, "temp files  {}", stats.temp_files)?;
    writeln!(
        out,
        "writable    {}",
        if stats.writable { "yes" } else { "no" }
    )
}

fn write_ls(out: &mut impl Write, dir: &Path, entries: &[EntryInfo]) -> std::io::Result<()> {
    writeln!(out, "directory   {}", escape::path(dir))?;
    let now = now_ms();
    let mut table = Table::new(&[
        "KEY",
        "NAME",
        "OWNER",
        "ARTIFACTS",
        "LAST USED",
        "PROVENANCE",
    ]);
    for entry in entries {
        let artifacts = entry
            .artifacts
            .iter()
            .map(|a| format!("{}:{}", escape(&a.kind), size(a.bytes as u64)))
            .collect::<Vec<_>>()
            .join(",");
        table.row(vec![
            entry.key.chars().take(12).collect(),
            entry.name.clone(),
            entry.owner_label.clone(),
            artifacts,
            age(now.saturating_sub(entry.last_used_ms)),
            entry.provenance.clone(),
        ]);
    }
    table.write(out, "")
}

fn write_gc(out: &mut impl Write, report: &GcReport) -> std::io::Result<()> {
    writeln!(
        out,
        "{} -> {} segments, {} -> {}; {} entries kept, {} evicted, {} duplicates dropped",
        report.segments_before,
        report.segments_after,
        size(report.bytes_before),
        size(report.bytes_after),
        report.entries,
        report.entries_evicted,
        report.duplicates_dropped,
    )?;
    writeln!(
        out,
        "removed: {} corrupt entries, {} unreadable segments, {} orphaned temporary files",
        report.corrupt_entries_dropped, report.corrupt_segments_removed, report.temp_files_removed,
    )
}

fn write_verify(out: &mut impl Write, report: &VerifyReport) -> std::io::Result<()> {
    for segment in &report.segments {
        match (&segment.problem, &segment.refused) {
            (None, None) => writeln!(
                out,
                "ok    {}: {} entries, {}, {}",
                escape(&segment.name),
                segment.entries,
                size(segment.bytes),
                segment.provenance
            )?,
            (None, Some(refused)) => writeln!(
                out,
                "UNTRUSTED  {}: {} entries, {}: refused under the trusted keys: {}",
                escape(&segment.name),
                segment.entries,
                segment.provenance,
                escape(refused)
            )?,
            (Some(problem), _) => {
                writeln!(out, "FAIL  {}: {}", escape(&segment.name), escape(problem))?;
            }
        }
    }
    if report.temp_files > 0 {
        writeln!(
            out,
            "{} temporary files (a write in progress, or left by a crash: `kiln cache gc` removes them)",
            report.temp_files
        )?;
    }
    Ok(())
}

/// `bytes` in B, KiB, MiB or GiB.
fn size(bytes: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A duration in milliseconds as `12s ago`, `5m ago`, `3h ago` or `2d ago`.
fn age(ms: u64) -> String {
    let secs = ms / 1000;
    match secs {
        0..60 => format!("{secs}s ago"),
        60..3600 => format!("{}m ago", secs / 60),
        3600..86400 => format!("{}h ago", secs / 3600),
        _ => format!("{}d ago", secs / 86400),
    }
}

/// Milliseconds since the Unix epoch.
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}
