//! `kiln verify IMAGE... [--trusted-key K]... [--json]`: full verification
//! of each image (header, body checksum, index, every entry record and
//! every payload checksum) and of its signatures, one line per image
//! naming the check that failed, or who signed it (or that nothing did).
//!
//! Every signature an image carries must verify (one that does not means
//! the image changed after it was signed). With trusted keys, those of
//! `KILN_TRUSTED_KEYS` (as a program's init reads them) and of
//! `--trusted-key` (a public key as 64 hex digits, or a file of them such
//! as `kiln keygen`'s `.pub`; repeatable, added to the variable's), an
//! image must also carry a valid signature by one of those keys: an
//! unsigned image, or one signed only by other keys, fails, as a program
//! with the same keys would skip it. Exit status 1 if any image is bad. Paths and error messages (which may quote
//! the image) are shown escaped ([`escape`]).

use std::io::Write;
use std::path::PathBuf;

use kiln_core::trust::TrustPolicy;
use kiln_image::{Image, ImageError, SignatureCheck, Verification};
use serde_json::json;

use crate::common::{PrintArgs, TrustArgs, print_json};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln verify`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image files.
    #[arg(required = true)]
    images: Vec<PathBuf>,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    print: PrintArgs,
}

/// The image fully verified, and its signatures checked: every one must
/// verify, and with trusted keys one of them must be by a trusted key.
fn check(
    path: &std::path::Path,
    trust: &TrustPolicy,
) -> Result<(Image, Vec<SignatureCheck>), ImageError> {
    let image = Image::open(path, Verification::Full)?;
    let checks = crate::common::check_signatures(&image, trust)?;
    Ok((image, checks))
}

/// Who signed, for the text output: `unsigned`, or each key with whether
/// it is trusted.
pub(crate) fn signed_by(checks: &[SignatureCheck], asked: bool) -> String {
    if checks.is_empty() {
        return "unsigned".to_owned();
    }
    let keys: Vec<String> = checks
        .iter()
        .map(|check| {
            let status = match (check.valid, check.trusted, asked) {
                (false, _, _) => " (signature does not verify)",
                (true, true, _) => " (trusted)",
                (true, false, true) => " (not trusted)",
                (true, false, false) => "",
            };
            format!("{}{status}", check.key)
        })
        .collect();
    format!("signed by {}", keys.join(", "))
}

/// For a batch-signed image, `, member I of a batch of N` (for the text
/// outputs); empty otherwise.
pub(crate) fn batch_text(image: &Image) -> String {
    image
        .signature_batch()
        .map(|batch| format!(", member {} of a batch of {}", batch.index, batch.size))
        .unwrap_or_default()
}

/// For a batch-signed image, its place in the batch as JSON; `null`
/// otherwise.
pub(crate) fn batch_json(image: &Image) -> serde_json::Value {
    image.signature_batch().map_or(
        serde_json::Value::Null,
        |batch| json!({ "index": batch.index, "size": batch.size }),
    )
}

/// The signatures as JSON.
pub(crate) fn signatures_json(checks: &[SignatureCheck]) -> serde_json::Value {
    checks
        .iter()
        .map(|check| json!({ "key": check.key.to_hex(), "valid": check.valid, "trusted": check.trusted }))
        .collect()
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let trust = args.trust.policy()?;
    let mut all_ok = true;
    let mut reports = Vec::new();
    let mut out = std::io::stdout().lock();
    for path in &args.images {
        let json_path = path.display().to_string();
        match check(path, &trust) {
            Ok((image, checks)) => {
                let bytes = image.byte_len();
                if args.print.json {
                    reports.push(json!({
                        "path": json_path, "ok": true, "entries": image.len(), "bytes": bytes,
                        "signatures": signatures_json(&checks),
                        "signature_batch": batch_json(&image),
                    }));
                } else {
                    writeln!(
                        out,
                        "ok    {}: {} entries, {bytes} bytes, {}{}",
                        escape::path(path),
                        image.len(),
                        signed_by(&checks, trust.trusted_keys.is_some()),
                        batch_text(&image)
                    )?;
                }
            }
            Err(error) => {
                all_ok = false;
                if args.print.json {
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
    if args.print.json {
        print_json(&serde_json::Value::Array(reports))?;
    }
    Ok(if all_ok {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
