//! `kiln`: inspect, verify, compare, merge, extract, install and sign Kiln
//! package images; say which kernels an application's images serve on
//! which GPUs and drivers; bake an application's image from its record files
//! and report what the libraries' images missed.
//!
//! Exit status: 0 on success, 1 when `verify` finds a bad image (or one
//! not signed by a key it was told to trust), `install` or `sign` refuses
//! one, `diff` finds differences, `kernels` finds a kernel missing on a GPU
//! and driver or `bake` misses recorded entries (the image is written all
//! the same), 2 on any other error (unreadable input,
//! bad arguments).
//!
//! Images and cache directories are untrusted: text from them is printed
//! escaped (module `escape`).
//!
//! Kiln's `tracing` events (a disk cache that cannot be written, say) go to
//! stderr, filtered by `KILN_LOG` (default `warn`).

mod bake;
mod cache_cmd;
mod common;
mod diff;
mod error;
mod escape;
mod extract;
mod inspect;
mod install;
mod kernels;
mod keygen;
mod merge;
mod report;
mod ship;
mod sign;
mod verify;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tracing_subscriber::EnvFilter;

pub(crate) use error::CliError;

/// Inspect, verify, compare, merge, extract and install Kiln package images.
#[derive(Parser)]
#[command(name = "kiln", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show an image's header, owners and entries.
    Inspect(inspect::Args),
    /// Fully verify images (every checksum, every signature); one line per
    /// image, saying who signed it.
    Verify(verify::Args),
    /// Compare the entries of two images.
    Diff(diff::Args),
    /// Merge images into one; the first entry per (owner, key) wins.
    Merge(merge::Args),
    /// Write one artifact of one entry to a file.
    Extract(extract::Args),
    /// Verify images fully, then put each into a directory by rename (never
    /// in place), so programs that mapped the old file keep reading it.
    Install(install::Args),
    /// Which kernels an application binary (or images, or shipped images)
    /// would serve on each GPU and driver, from what, and which are missing:
    /// exit 1 when any is, for CI.
    Kernels(kernels::Args),
    /// Bake one image of the entries that record files (KILN_RECORD) say an
    /// application used, from the images, disk caches and remote cache given.
    Bake(bake::Args),
    /// What record files (KILN_RECORD) say an application used: per library
    /// and owner, compiles at run time, and what no shipped image holds.
    Report(report::Args),
    /// Create a signing key: the secret in KEY (mode 0600), the public key
    /// in KEY.pub and on standard output.
    Keygen(keygen::Args),
    /// Sign an image (verified fully first) with a secret key; written by
    /// rename.
    Sign(sign::Args),
    /// Build the libraries here, then write what their precompile blocks built
    /// into their source trees as shipped images (kiln-shipped/NAME.kship),
    /// compressed; --check compares instead (exit 1 when stale).
    Ship(ship::Args),
    /// Look after the disk cache of run-time compiled entries
    /// (KILN_CACHE_DIR): stats, ls, gc, clear, verify.
    #[command(subcommand)]
    Cache(cache_cmd::CacheCommand),
}

/// How a subcommand that ran to completion ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Everything checked out (exit 0).
    Clean,
    /// A negative finding: a bad image, differing images (exit 1).
    Findings,
}

fn run(command: Command) -> Result<Outcome, CliError> {
    match command {
        Command::Inspect(args) => inspect::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Extract(args) => extract::run(args),
        Command::Install(args) => install::run(args),
        Command::Kernels(args) => kernels::run(args),
        Command::Bake(args) => bake::run(args),
        Command::Report(args) => report::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Sign(args) => sign::run(args),
        Command::Ship(args) => ship::run(args),
        Command::Cache(command) => cache_cmd::run(command),
    }
}

/// Installs the tool's `tracing` subscriber: stderr, filtered by `KILN_LOG`
/// (any `tracing` filter; `warn` when unset or not a filter).
fn log_to_stderr() {
    let filter = std::env::var("KILN_LOG").unwrap_or_default();
    let filter = filter.trim();
    let env_filter = match EnvFilter::try_new(if filter.is_empty() { "warn" } else { filter }) {
        Ok(env_filter) => env_filter,
        Err(error) => {
            eprintln!("kiln: KILN_LOG={filter:?} is not a tracing filter ({error}); using `warn`");
            EnvFilter::new("warn")
        }
    };
    // Fails only if a subscriber is already installed, which then stays.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(env_filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

fn main() -> ExitCode {
    log_to_stderr();
    let cli = Cli::parse();
    match run(cli.command) {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err(error) => {
            eprintln!("kiln: {}", error.shown());
            ExitCode::from(2)
        }
    }
}
