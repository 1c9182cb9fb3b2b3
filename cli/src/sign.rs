//! `kiln sign IMAGE --key KEY [-o OUT] [--json]`: adds a signature by KEY
//! to an image. KEY must be private to its owner (a key file others may
//! read is refused, saying to `chmod 600` it).
//!
//! The image is read once (its size at open, at most) and fully verified
//! first, as `kiln install` does: a key signs only an image that is whole.
//! The signed bytes are written atomically, by a temporary file in the
//! destination's directory and a rename ([`write_file_atomic`]): OUT, or
//! the image itself when no OUT is given, so a program that mapped the old
//! file keeps reading it whole. Signatures already there are kept (a
//! second key's signature is added; the same key's is replaced).

use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_image::{Image, Verification, sign_image, write_file_atomic};
use serde_json::json;

use crate::common::{PrintArgs, print_json};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln sign`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image file.
    image: PathBuf,
    /// The secret key file (`kiln keygen` writes one).
    #[arg(long)]
    key: PathBuf,
    /// Where to write the signed image (default: replace IMAGE, by rename).
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
    #[command(flatten)]
    print: PrintArgs,
}

/// The bytes of the image file at `path`, read up to its size at open
/// (as `kiln install` reads them).
fn read_image(path: &Path) -> Result<Vec<u8>, CliError> {
    let (file, len) = crate::install::open_image(path)?;
    crate::install::read_image(file, len, path)
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let key = kiln_core::trust::read_signing_key(&args.key)?;
    let bytes = read_image(&args.image)?;
    let target = args.output.as_deref().unwrap_or(&args.image);
    let entries = match Image::from_bytes(&bytes, Verification::Full) {
        Ok(image) => image.len(),
        Err(error) => {
            if args.print.json {
                print_json(&json!({
                    "path": args.image.display().to_string(),
                    "ok": false,
                    "check": error.check(),
                    "error": error.to_string(),
                }))?;
            } else {
                writeln!(
                    std::io::stdout().lock(),
                    "FAIL  {}: {}: {} (not signed)",
                    escape::path(&args.image),
                    error.check(),
                    escape(&error.to_string())
                )?;
            }
            return Ok(Outcome::Findings);
        }
    };
    let signed = sign_image(&bytes, &key).map_err(CliError::image(&args.image))?;
    write_file_atomic(target, &signed).map_err(CliError::image(target))?;
    let public = key.public_key();
    if args.print.json {
        print_json(&json!({
            "path": args.image.display().to_string(),
            "ok": true,
            "target": target.display().to_string(),
            "signer": public.to_hex(),
            "entries": entries,
            "bytes": signed.len(),
        }))?;
    } else {
        writeln!(
            std::io::stdout().lock(),
            "signed {} -> {}: {entries} entries, {} bytes, by {public}",
            escape::path(&args.image),
            escape::path(target),
            signed.len()
        )?;
    }
    Ok(Outcome::Clean)
}
