//! `kiln install IMAGE... DIR [--name NAME] [--json]`: puts verified images
//! into a directory (such as one in `KILN_IMAGE_PATH`) by rename, never in
//! place.
//!
//! Each image is read into memory once, fully verified (as `kiln verify`
//! does), and those same bytes are written to a temporary file in DIR,
//! synced, renamed over `DIR/<file name>` and the directory synced
//! ([`write_file_atomic`]). A program that mapped the file it replaces keeps
//! reading the old file, whole and unchanged; a program that opens the name
//! afterwards gets the new one; a crash leaves the old file or the new one,
//! never a mix. An image that fails verification is refused (its line names
//! the failed check) and the file it would replace is left untouched; the
//! other images are still installed. Exit status 1 if any image was
//! refused, 2 on any other error (an unreadable image, a DIR that is not a
//! directory, a failed write).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use kiln_image::{Image, ImageError, Verification, write_file_atomic};
use serde_json::json;

use crate::common::print_json;
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln install`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image files.
    #[arg(required = true, num_args = 1..)]
    images: Vec<PathBuf>,
    /// The directory to install them into.
    dir: PathBuf,
    /// Install under this file name instead of the image's own (one image
    /// only; a plain file name, no directory).
    #[arg(long)]
    name: Option<String>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The file name each image is installed under, checked before anything
/// is written.
fn destinations(args: &Args) -> Result<Vec<OsString>, CliError> {
    if !args.dir.is_dir() {
        return Err(CliError::NotADirectory {
            path: args.dir.clone(),
        });
    }
    let names: Vec<OsString> = match &args.name {
        Some(name) => {
            if args.images.len() != 1 {
                return Err(CliError::NameForSeveral {
                    count: args.images.len(),
                });
            }
            if Path::new(name).file_name() != Some(name.as_ref()) {
                return Err(CliError::NotAFileName { name: name.clone() });
            }
            vec![name.into()]
        }
        None => args
            .images
            .iter()
            .map(|image| {
                image
                    .file_name()
                    .map(OsString::from)
                    .ok_or_else(|| CliError::NoFileName {
                        path: image.clone(),
                    })
            })
            .collect::<Result<_, _>>()?,
    };
    let mut seen = HashSet::new();
    for name in &names {
        if !seen.insert(name) {
            return Err(CliError::SameName { name: name.into() });
        }
    }
    Ok(names)
}

/// The bytes of the regular file at `path`: at most its size at open, so
/// that a file that grows meanwhile (or a device) cannot make this read
/// without end.
fn read_image(path: &Path) -> Result<Vec<u8>, CliError> {
    let io = |action: &'static str| {
        move |source| CliError::image(path)(ImageError::Io {
            action,
            path: path.to_owned(),
            source,
        })
    };
    let file = File::open(path).map_err(io("open"))?;
    let metadata = file.metadata().map_err(io("read the metadata of"))?;
    if !metadata.is_file() {
        return Err(CliError::NotAFile {
            path: path.to_owned(),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(metadata.len()).unwrap_or(0));
    file.take(metadata.len())
        .read_to_end(&mut bytes)
        .map_err(io("read"))?;
    Ok(bytes)
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let names = destinations(&args)?;
    let mut all_ok = true;
    let mut reports = Vec::new();
    let mut out = std::io::stdout().lock();
    for (path, name) in args.images.iter().zip(&names) {
        let target = args.dir.join(name);
        let bytes = read_image(path)?;
        match Image::from_bytes(&bytes, Verification::Full) {
            Ok(image) => {
                let entries = image.len();
                drop(image);
                write_file_atomic(&target, &bytes).map_err(CliError::image(&target))?;
                if Path::new(name).extension().is_none_or(|ext| ext != "kimg") {
                    eprintln!(
                        "kiln: note: {} does not end in .kimg: KILN_IMAGE_PATH merges only *.kimg files",
                        escape::path(&target)
                    );
                }
                if args.json {
                    reports.push(json!({
                        "path": path.display().to_string(),
                        "ok": true,
                        "target": target.display().to_string(),
                        "entries": entries,
                        "bytes": bytes.len(),
                    }));
                } else {
                    writeln!(
                        out,
                        "ok    {} -> {}: {entries} entries, {} bytes",
                        escape::path(path),
                        escape::path(&target),
                        bytes.len()
                    )?;
                }
            }
            Err(error) => {
                all_ok = false;
                if args.json {
                    reports.push(json!({
                        "path": path.display().to_string(),
                        "ok": false,
                        "check": error.check(),
                        "error": error.to_string(),
                        "target": target.display().to_string(),
                    }));
                } else {
                    writeln!(
                        out,
                        "FAIL  {}: {}: {} (refused; {} left as it was)",
                        escape::path(path),
                        error.check(),
                        escape(&error.to_string()),
                        escape::path(&target)
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
