//! `kiln extract IMAGE NAME-or-KEY-PREFIX -o FILE [--kind KIND] [--owner
//! PREFIX]`: writes one artifact's bytes (checksum verified) to a file.
//! Names and kinds from the image are shown escaped ([`escape`]), in the
//! summary line and in error messages.

use std::io::Write;
use std::path::PathBuf;

use kiln_image::{ArtifactKind, EntryRef, Image, Verification, write_file_atomic};

use crate::common::{kinds, short};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln extract`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image file.
    image: PathBuf,
    /// An entry name, or a prefix of an entry's key in hex.
    entry: String,
    /// Where to write the artifact's bytes.
    #[arg(short, long)]
    output: PathBuf,
    /// Which artifact, when the entry has several: ptx, cubin, fatbin,
    /// lto-ir, object or a custom tag.
    #[arg(long)]
    kind: Option<String>,
    /// Only entries whose owner digest starts with this hex prefix, or whose
    /// owner label equals it.
    #[arg(long)]
    owner: Option<String>,
}

fn is_hex(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit())
}

fn matches(entry: &EntryRef<'_>, args: &Args) -> bool {
    let by_name = entry.name() == args.entry;
    let by_key = is_hex(&args.entry) && entry.key().hex_starts_with(&args.entry);
    let by_owner = args.owner.as_ref().is_none_or(|owner| {
        entry.owner_label() == owner || (is_hex(owner) && entry.owner().hex_starts_with(owner))
    });
    (by_name || by_key) && by_owner
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let image =
        Image::open(&args.image, Verification::Structural).map_err(CliError::image(&args.image))?;
    let mut found = Vec::new();
    for entry in image.entries() {
        let entry = entry.map_err(CliError::image(&args.image))?;
        if matches(&entry, &args) {
            found.push(entry);
        }
    }
    let entry = match found.as_slice() {
        [] => {
            return Err(CliError::NoMatch {
                path: args.image.clone(),
                pattern: args.entry.clone(),
            });
        }
        [entry] => *entry,
        several => {
            let candidates: Vec<String> = several
                .iter()
                .take(20)
                .map(|e| {
                    format!(
                        "  {} {} ({})",
                        short(&e.key()),
                        escape(e.name()),
                        escape(e.owner_label())
                    )
                })
                .collect();
            return Err(CliError::Ambiguous {
                pattern: args.entry.clone(),
                count: several.len(),
                candidates: candidates.join("\n"),
            });
        }
    };
    let artifact = match (&args.kind, entry.artifact_count()) {
        (Some(kind), _) => {
            let kind: ArtifactKind = kind.parse().unwrap_or_else(|never| match never {});
            entry
                .artifact_of_kind(&kind)
                .ok_or_else(|| CliError::NoSuchKind {
                    name: entry.name().to_owned(),
                    kind: kind.to_string(),
                    kinds: kinds(&entry),
                })?
        }
        (None, 1) => entry.artifact(0).map_err(CliError::image(&args.image))?,
        (None, count) => {
            return Err(CliError::KindRequired {
                name: entry.name().to_owned(),
                count,
                kinds: kinds(&entry),
            });
        }
    };
    let bytes = artifact.bytes().map_err(CliError::image(&args.image))?;
    write_file_atomic(&args.output, bytes).map_err(CliError::image(&args.output))?;
    writeln!(
        std::io::stdout().lock(),
        "wrote {} bytes ({}) of {} to {}",
        bytes.len(),
        escape(artifact.kind_name()),
        escape(entry.name()),
        escape::path(&args.output)
    )?;
    Ok(Outcome::Clean)
}
