//! `kiln`: ship a library's precompiled code in its package; say which
//! kernels an application's images serve on which GPUs and drivers; bake an
//! application's image from its record files, install it and report what
//! the libraries' images missed; inspect, verify, compare, extract, merge
//! and sign Kiln images.
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
mod settings_cmd;
mod ship;
mod sign;
mod verify;

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

pub(crate) use error::CliError;

/// Ship a library's precompiled code, bake and serve an application's, and
/// look into Kiln images.
#[derive(Parser)]
#[command(name = "kiln", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands, declared in the order of [`GROUPS`].
#[derive(Subcommand)]
enum Command {
    /// Build the libraries here, then write what their precompile blocks
    /// built into their source trees as shipped images
    /// (kiln-shipped/NAME.kship), compressed; --check compares instead (exit
    /// 1 when stale).
    Ship(ship::Args),
    /// Create a signing key: the secret in KEY (mode 0600), the public key
    /// in KEY.pub and on standard output.
    Keygen(keygen::Args),
    /// Bake one image of the entries that record files (KILN_RECORD) say an
    /// application used, from the images, disk caches and remote cache given.
    Bake(bake::Args),
    /// Verify images fully, then put each into a directory by rename (never
    /// in place), so programs that mapped the old file keep reading it;
    /// with trusted keys, only images one of them signed.
    Install(install::Args),
    /// Which kernels an application binary (or images, or shipped images)
    /// would serve on each GPU and driver, from what, and which are missing:
    /// exit 1 when any is, for CI.
    Kernels(kernels::Args),
    /// What record files (KILN_RECORD) say an application used: per library
    /// and owner, compiles at run time, and what no shipped image holds.
    Report(report::Args),
    /// Look after the disk cache of run-time compiled entries
    /// (KILN_CACHE_DIR): stats, ls, gc, clear, verify.
    #[command(subcommand)]
    Cache(cache_cmd::CacheCommand),
    /// Every KILN_* switch: its value in this environment and where it came
    /// from (default, variable, file), one line each; --markdown prints the
    /// switch table of docs/switches.md.
    Settings(settings_cmd::Args),
    /// Show an image's header, signers and trust verdict, owners and entries.
    Inspect(inspect::Args),
    /// Fully verify images (every checksum, every signature); one line per
    /// image, saying who signed it; with trusted keys, an image none of them
    /// signed is bad.
    Verify(verify::Args),
    /// Compare the entries of two images.
    Diff(diff::Args),
    /// Write one artifact of one entry to a file.
    Extract(extract::Args),
    /// Merge images into one; the first entry per (owner, key) wins.
    Merge(merge::Args),
    /// Sign an image (verified fully first) with a secret key; written by
    /// rename.
    Sign(sign::Args),
}

/// The help's headings and the subcommands under each, in the order a user
/// meets them: a library's author ships, an application's operator bakes
/// and serves, and anyone looks into images. Every subcommand is under
/// exactly one heading (a test checks it).
const GROUPS: &[(&str, &[&str])] = &[
    ("Ship a library's precompiled code", &["ship", "keygen"]),
    (
        "Serve an application's code",
        &["bake", "install", "kernels", "report", "cache", "settings"],
    ),
    (
        "Look into images",
        &[
            "inspect", "verify", "diff", "extract", "merge", "sign", "help",
        ],
    ),
];

/// The tool's command line: [`Cli`], its help listing the subcommands under
/// the headings of [`GROUPS`] (clap lists them under one).
fn command() -> clap::Command {
    let mut command = Cli::command();
    // Adds the `help` subcommand, so that it is listed too.
    command.build();
    let template = help_template(&command);
    command.help_template(template)
}

/// The help of the top level: about, usage, the subcommands grouped under
/// [`GROUPS`], then the options.
fn help_template(command: &clap::Command) -> clap::builder::StyledStr {
    let styles = command.get_styles();
    let (header, literal) = (styles.get_header(), styles.get_literal());
    let width = GROUPS
        .iter()
        .flat_map(|(_, names)| names.iter())
        .map(|name| name.len())
        .max()
        .unwrap_or(0);
    let mut text = String::from("{about-with-newline}\n{usage-heading} {usage}\n");
    for (heading, names) in GROUPS {
        text.push_str(&format!("\n{header}{heading}:{header:#}\n"));
        for name in *names {
            let about = command
                .find_subcommand(name)
                .and_then(clap::Command::get_about)
                .map(ToString::to_string)
                .unwrap_or_default();
            text.push_str(&format!("  {literal}{name:<width$}{literal:#}  {about}\n"));
        }
    }
    text.push_str(&format!(
        "\n{header}Options:{header:#}\n{{options}}{{after-help}}"
    ));
    text.into()
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
        Command::Ship(args) => ship::run(args),
        Command::Keygen(args) => keygen::run(args),
        Command::Bake(args) => bake::run(args),
        Command::Install(args) => install::run(args),
        Command::Kernels(args) => kernels::run(args),
        Command::Report(args) => report::run(args),
        Command::Cache(command) => cache_cmd::run(command),
        Command::Settings(args) => settings_cmd::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::Verify(args) => verify::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Extract(args) => extract::run(args),
        Command::Merge(args) => merge::run(args),
        Command::Sign(args) => sign::run(args),
    }
}

/// Installs the tool's `tracing` subscriber: stderr, filtered by `KILN_LOG`
/// (any `tracing` filter; `warn` when unset or not a filter).
fn log_to_stderr() {
    let filter = kiln_core::settings::Settings::process()
        .cache
        .log
        .clone()
        .unwrap_or_default();
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
    let matches = command().get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|error| error.exit());
    match run(cli.command) {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err(error) => {
            eprintln!("kiln: {}", error.shown());
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_subcommand_is_under_exactly_one_heading_in_declaration_order() {
        let command = command();
        let declared: Vec<&str> = command
            .get_subcommands()
            .map(clap::Command::get_name)
            .collect();
        let grouped: Vec<&str> = GROUPS
            .iter()
            .flat_map(|(_, names)| names.iter().copied())
            .collect();
        // The enum's order is the help's (and `help` comes last, as clap
        // adds it).
        assert_eq!(grouped, declared);
    }

    #[test]
    fn the_help_lists_ship_first_under_its_heading_then_the_options() {
        let help = command().render_help().to_string();
        let at = |text: &str| {
            help.find(text)
                .unwrap_or_else(|| panic!("{text:?} not in the help:\n{help}"))
        };
        let mut last = at("Usage: kiln");
        for (heading, names) in GROUPS {
            let heading_at = at(&format!("\n{heading}:\n"));
            assert!(heading_at > last, "{heading} out of order:\n{help}");
            last = heading_at;
            for name in *names {
                let line = at(&format!("\n  {name} "));
                assert!(line > last, "{name} out of order:\n{help}");
                last = line;
            }
        }
        assert!(at("\nOptions:\n") > last, "{help}");
        assert!(help.contains("--version"), "{help}");
        assert!(
            help.contains("  ship      Build the libraries here"),
            "{help}"
        );
    }

    #[test]
    fn shared_flags_are_declared_once_and_reach_every_subcommand_that_takes_them() {
        let command = command();
        let takes = |name: &str, flag: &str| {
            let sub = command.find_subcommand(name).expect("a subcommand");
            sub.get_arguments().any(|arg| arg.get_long() == Some(flag))
        };
        for name in [
            "ship", "bake", "install", "report", "inspect", "verify", "diff", "sign", "settings",
        ] {
            assert!(takes(name, "json"), "{name} --json");
        }
        for name in ["bake", "install", "inspect", "verify"] {
            assert!(takes(name, "trusted-key"), "{name} --trusted-key");
        }
        let cache = command.find_subcommand("cache").expect("cache");
        for sub in cache
            .get_subcommands()
            .filter(|sub| sub.get_name() != "help")
        {
            assert!(sub.get_arguments().any(|a| a.get_long() == Some("json")));
            assert!(
                sub.get_arguments()
                    .any(|a| a.get_long() == Some("trusted-key"))
            );
        }
        command.debug_assert();
    }
}
