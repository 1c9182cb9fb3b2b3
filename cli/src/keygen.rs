//! `kiln keygen -o KEY`: a new ed25519 signing key.
//!
//! Writes the secret key to KEY (64 hex digits; created with mode 0600,
//! never over an existing file) and the public key to `KEY.pub` (64 hex
//! digits, mode 0644: a trusted-keys file of one key, for
//! `KILN_TRUSTED_KEYS` or `kiln verify --trusted-key`), and prints the
//! public key. The secret is never printed.

use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_image::SigningKey;

use crate::escape;
use crate::{CliError, Outcome};

/// Arguments of `kiln keygen`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Where to write the secret key (the public key goes to the same path
    /// plus `.pub`).
    #[arg(short = 'o', long = "output")]
    output: PathBuf,
}

/// `path` with `.pub` appended to its file name.
pub(crate) fn public_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".pub");
    PathBuf::from(name)
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let public_file = public_path(&args.output);
    if public_file.exists() {
        return Err(CliError::Exists { path: public_file });
    }
    let key = SigningKey::generate().map_err(CliError::image(&args.output))?;
    kiln_core::trust::write_signing_key(&key, &args.output)?;
    let public = key.public_key();
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
    options
        .open(&public_file)
        .and_then(|mut file| {
            file.write_all(format!("{public}\n").as_bytes())?;
            file.sync_all()
        })
        .map_err(|source| {
            CliError::image(&public_file)(kiln_image::ReadError::Io {
                action: "write the public key",
                path: public_file.clone(),
                source,
            })
        })?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{public}")?;
    eprintln!(
        "kiln: secret key in {} (keep it private), public key in {}",
        escape::path(&args.output),
        escape::path(&public_file)
    );
    Ok(Outcome::Clean)
}
