//! `kiln install IMAGE... DIR [--name NAME] [--trusted-key K]... [--json]`:
//! puts verified images into a directory (such as one in
//! `KILN_IMAGE_PATH`) by rename, never in place.
//!
//! Arguments are checked first (DIR is a directory, every image a regular
//! file that opens, no two images under one name), so a usage error
//! installs nothing. Then each image is read into memory once (its size at
//! open, at most), fully verified there (as `kiln verify` does), and those
//! same bytes, not the file again, are written to a `.kiln-tmp-*` file in
//! DIR (mode 0644), synced, renamed over `DIR/<file name>`, and the
//! directory synced ([`write_file_atomic`]). A program that mapped the file
//! it replaces keeps reading the old file, whole and unchanged (its inode
//! lives until it is unmapped); a program that opens the name afterwards
//! gets the new one; a crash leaves the old file or the new one, never a
//! mix. Memory: about twice the largest image (the bytes read, and the
//! aligned copy verification reads).
//!
//! Every signature an image carries must verify (a tampered one is
//! refused, as by `kiln verify`). With trusted keys, those of
//! `KILN_TRUSTED_KEYS` and of `--trusted-key` (a public key in hex or a
//! `.pub` file, as for `kiln verify`; several for rotation; added to the
//! variable's), an image must also be signed by one of those keys: what a
//! process with the same keys would merge. Use the keys of the machines
//! the directory serves, so that an image they would skip is refused here
//! rather than installed.
//!
//! An image that fails verification is refused (its line names the failed
//! check) and the file it would replace is left untouched; the other
//! images are still installed. Exit status 1 if any image was refused, 2 on
//! any other error (bad arguments, an unreadable image, a failed write).
//! `--json` prints one object per image: `path`, `ok`, `target`, then
//! `entries` and `bytes`, or `check` and `error`. A target name that does
//! not end in `.kimg` gets a note on stderr (`KILN_IMAGE_PATH` merges only
//! `*.kimg` files).

use std::collections::HashSet;
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_core::regular_file::{self, Access, Links};
use kiln_core::trust::TrustPolicy;
use kiln_image::{Image, ImageError, ReadError, Verification, write_file_atomic};
use serde_json::json;

use crate::common::{PrintArgs, TrustArgs, print_json};
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
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    print: PrintArgs,
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

/// Wraps an I/O error on the image at `path`.
fn io_error<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> CliError + 'a {
    move |source| {
        CliError::image(path)(ReadError::Io {
            action,
            path: path.to_owned(),
            source,
        })
    }
}

/// The image file at `path`, opened ([`regular_file::open`]: a link named
/// on the command line is followed, a FIFO or device refused without
/// blocking), and its size: a regular file, or an error before anything is
/// installed.
pub(crate) fn open_image(path: &Path) -> Result<(File, u64), CliError> {
    let file = regular_file::open(path, Access::Read, Links::Follow).map_err(|error| {
        if regular_file::is_not_regular(&error) {
            CliError::NotAFile {
                path: path.to_owned(),
            }
        } else {
            io_error("open", path)(error)
        }
    })?;
    let len = file
        .metadata()
        .map_err(io_error("read the metadata of", path))?
        .len();
    Ok((file, len))
}

/// The bytes of `file`: at most `len`, its size at open, so that a file
/// that grows meanwhile cannot make this read without end (one that
/// changes fails verification).
pub(crate) fn read_image(file: File, len: u64, path: &Path) -> Result<Vec<u8>, CliError> {
    let mut bytes = regular_file::read_file(file, len, len).map_err(io_error("read", path))?;
    bytes.truncate(usize::try_from(len).unwrap_or(usize::MAX));
    Ok(bytes)
}

/// `bytes` fully verified as `kiln verify` verifies (every signature it
/// carries valid and, with trusted keys, one by a trusted key): the number
/// of entries.
fn check(bytes: &[u8], trust: &TrustPolicy) -> Result<usize, ImageError> {
    let image = Image::from_bytes(bytes, Verification::Full)?;
    crate::common::check_signatures(&image, trust)?;
    Ok(image.len())
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let names = destinations(&args)?;
    let trust = args.trust.policy()?;
    let files = args
        .images
        .iter()
        .map(|path| open_image(path))
        .collect::<Result<Vec<_>, _>>()?;
    let mut all_ok = true;
    let mut reports = Vec::new();
    let mut out = std::io::stdout().lock();
    for ((path, name), (file, len)) in args.images.iter().zip(&names).zip(files) {
        let target = args.dir.join(name);
        let bytes = read_image(file, len, path)?;
        match check(&bytes, &trust) {
            Ok(entries) => {
                write_file_atomic(&target, &bytes).map_err(CliError::image(&target))?;
                if Path::new(name).extension().is_none_or(|ext| ext != "kimg") {
                    eprintln!(
                        "kiln: note: {} does not end in .kimg: KILN_IMAGE_PATH merges only *.kimg files",
                        escape::path(&target)
                    );
                }
                if args.print.json {
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
                if args.print.json {
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
    if args.print.json {
        print_json(&serde_json::Value::Array(reports))?;
    }
    Ok(if all_ok {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
