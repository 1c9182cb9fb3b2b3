//! `kiln verify IMAGE... [--json]`: full verification of each image (header,
//! body checksum, index, every entry record and every payload checksum),
//! one line per image naming the check that failed. Exit status 1 if any
//! image is bad. Paths and error messages (which may quote the image) are
//! shown escaped ([`escape`]).

use std::io::Write;
use std::path::PathBuf;

use kiln_image::{Image, Verification};
use serde_json::json;

use crate::common::print_json;
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln verify`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image files.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let mut all_ok = true;
    let mut reports = Vec::new();
    let mut out = std::io::stdout().lock();
    for path in &args.images {
        let json_path = path.display().to_string();
        match Image::open(path, Verification::Full) {
            Ok(image) => {
                let bytes = image.byte_len();
                if args.json {
                    reports.push(json!({
                        "path": json_path, "ok": true, "entries": image.len(), "bytes": bytes,
                    }));
                } else {
                    writeln!(
                        out,
                        "ok    {}: {} entries, {bytes} bytes",
                        escape::path(path),
                        image.len()
                    )?;
                }
            }
            Err(error) => {
                all_ok = false;
                if args.json {
                    reports.push(json!({
                        "path": json_path, "ok": false, "check": error.check(), "error": error.to_string(),
                    }));
                } else {
                    writeln!(
                        out,
                        "FAIL  {}: {}: {}",
                        escape::path(path),
                        error.check(),
                        escape(&error.to_string())
                    )?;
                }
            }
        }
    }
    if args.json {
        print_json(&serde_json::Value::Array(reports))?;
    }
    Ok(if all_ok {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
