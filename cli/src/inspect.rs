//! `kiln inspect IMAGE [--trusted-key K]... [--json]`: header, signers,
//! the trust verdict (whether a program with the trusted keys of
//! `KILN_TRUSTED_KEYS` and `--trusted-key` would merge it from
//! `KILN_IMAGE_PATH`, and why), metadata, owners, a
//! table of entries (deps as `name@fingerprint`: for CUDA entries the
//! recorded compiler release and header digests), and the targets of each
//! entry name (for a multi-arch image: the archs of each kernel). Opens with
//! structural verification, so an image with some
//! corrupt entries is still shown (those entries as errors). Text from the
//! image is shown escaped ([`escape`]); `--json` keeps it exact.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;

use kiln_core::trust::{Admission, Origin, TrustPolicy};
use kiln_image::{EntryRef, Image, PublicKey, ReadError, SignatureError, Verification};
use serde_json::{Value, json};

use crate::common::{PrintArgs, Table, TrustArgs, kinds, print_json, short, worlds};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// Arguments of `kiln inspect`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The image file.
    image: PathBuf,
    #[command(flatten)]
    trust: TrustArgs,
    #[command(flatten)]
    print: PrintArgs,
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let trust = args.trust.policy()?;
    let image =
        Image::open(&args.image, Verification::Structural).map_err(CliError::image(&args.image))?;
    let verdict = Verdict::of(&image, &trust);
    if args.print.json {
        print_json(&to_json(&args.image, &image, &verdict))?;
    } else {
        print_text(&args.image, &image, &verdict)?;
    }
    Ok(Outcome::Clean)
}

/// Whether a program with the tool's trusted keys would merge the image
/// from `KILN_IMAGE_PATH` ([`kiln_core::trust::admit`], an image from
/// elsewhere), and why.
enum Verdict {
    /// No trusted keys: nothing is checked, it would be merged.
    Unchecked,
    /// A trusted key's signature verifies.
    Admitted(PublicKey),
    /// Refused, and why.
    Refused(SignatureError),
}

impl Verdict {
    fn of(image: &Image, trust: &TrustPolicy) -> Verdict {
        match trust.admit(image, Origin::Elsewhere) {
            Ok(Admission::SignedBy(key)) => Verdict::Admitted(key),
            Ok(_) => Verdict::Unchecked,
            Err(error) => Verdict::Refused(error),
        }
    }

    fn text(&self) -> String {
        match self {
            Verdict::Unchecked => {
                "not checked: no trusted keys (KILN_TRUSTED_KEYS, --trusted-key); merged from \
                 KILN_IMAGE_PATH as it is"
                    .to_owned()
            }
            Verdict::Admitted(key) => {
                format!("merged from KILN_IMAGE_PATH: signed by trusted key {key}")
            }
            Verdict::Refused(error) => {
                format!("skipped from KILN_IMAGE_PATH: {} ({error})", error.check())
            }
        }
    }

    fn json(&self) -> Value {
        match self {
            Verdict::Unchecked => json!({ "checked": false, "admitted": true }),
            Verdict::Admitted(key) => {
                json!({ "checked": true, "admitted": true, "signer": key.to_hex() })
            }
            Verdict::Refused(error) => json!({
                "checked": true, "admitted": false, "check": error.check(), "error": error.to_string(),
            }),
        }
    }
}

fn to_json(path: &std::path::Path, image: &Image, verdict: &Verdict) -> Value {
    let header = image.header();
    let meta = image.meta();
    json!({
        "path": path.display().to_string(),
        "header": {
            "format_version": header.format_version,
            "rkyv_version": header.rkyv_version,
            "endianness": header.layout.endianness.to_string(),
            "pointer_width": header.layout.pointer_width,
            "aligned_primitives": header.layout.aligned_primitives,
            "region_alignment": header.region_alignment,
            "producer": header.producer,
            "entry_count": header.entry_count,
            "index_offset": header.index_offset,
            "index_len": header.index_len,
            "payload_offset": header.payload_offset,
            "payload_len": header.payload_len,
            "body_len": header.body_len,
            "body_checksum": header.body_checksum.to_hex(),
            "index_checksum": header.index_checksum.to_hex(),
            "signature_len": header.signature_len,
        },
        "signatures": crate::verify::signatures_json(&image.check_signatures(None)),
        "signature_batch": crate::verify::batch_json(image),
        "trust": verdict.json(),
        "meta": {
            "producer_name": meta.producer_name,
            "producer_version": meta.producer_version,
            "labels": meta.labels,
        },
        "owners": image.owners().into_iter().map(|(digest, label, entries)| json!({
            "digest": digest.to_hex(),
            "label": label,
            "entries": { "start": entries.start, "end": entries.end },
        })).collect::<Vec<_>>(),
        "entries": image.entries().enumerate().map(|(index, entry)| match entry {
            Ok(entry) => entry_json(&entry),
            Err(error) => error_json(index, &error),
        }).collect::<Vec<_>>(),
        "targets": targets_by_name(image).into_iter().map(|(name, targets)| json!({
            "name": name,
            "targets": targets.into_iter().map(|(target, kinds)| json!({
                "target": target,
                "kinds": kinds,
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    })
}

/// The targets each entry name is compiled for, from the owner labels
/// (`compiler-version/target`; a label without `/` counts whole), with the
/// artifact kinds of each: for a multi-arch CUDA image, the archs of each
/// kernel and which of them carries PTX. Names in order, targets in image
/// order. Corrupt entries are left out (the entries table shows them).
fn targets_by_name(image: &Image) -> BTreeMap<String, Vec<(String, String)>> {
    let mut names: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for entry in image.entries().flatten() {
        let label = entry.owner_label();
        let target = label.rsplit_once('/').map_or(label, |(_, target)| target);
        names
            .entry(entry.name().to_owned())
            .or_default()
            .push((target.to_owned(), kinds(&entry)));
    }
    names
}

fn entry_json(entry: &EntryRef<'_>) -> Value {
    json!({
        "index": entry.index(),
        "name": entry.name(),
        "key": entry.key().to_hex(),
        "owner": entry.owner().to_hex(),
        "owner_label": entry.owner_label(),
        "min_world": entry.min_world(),
        "max_world": entry.max_world(),
        "deps": entry.dep_iter().map(|(name, fingerprint)| json!({
            "name": name,
            "fingerprint": fingerprint.to_hex(),
        })).collect::<Vec<_>>(),
        "artifacts": entry.artifacts().map(|artifact| json!({
            "kind": artifact.kind_name(),
            "entry_points": artifact.entry_points(),
            "len": artifact.len(),
            "checksum": artifact.checksum().to_hex(),
        })).collect::<Vec<_>>(),
    })
}

fn error_json(index: usize, error: &ReadError) -> Value {
    json!({ "index": index, "check": error.check(), "error": error.to_string() })
}

fn print_text(path: &std::path::Path, image: &Image, verdict: &Verdict) -> Result<(), CliError> {
    let header = image.header();
    let meta = image.meta();
    let layout = header.layout;
    let mut out = std::io::stdout().lock();
    writeln!(out, "image     {}", escape::path(path))?;
    writeln!(
        out,
        "format    {} (rkyv {}, {}, {}-bit pointers, {} primitives)",
        header.format_version,
        escape(&header.rkyv_version),
        layout.endianness,
        layout.pointer_width,
        if layout.aligned_primitives {
            "aligned"
        } else {
            "unaligned"
        }
    )?;
    writeln!(out, "producer  {}", escape(&header.producer))?;
    writeln!(
        out,
        "size      {} bytes: index {} bytes at {}, payloads {} bytes at {}",
        image.byte_len(),
        header.index_len,
        header.index_offset,
        header.payload_len,
        header.payload_offset
    )?;
    writeln!(out, "body      blake3 {}", header.body_checksum)?;
    let checks = image.check_signatures(None);
    if checks.is_empty() {
        writeln!(out, "signed    no")?;
    }
    let batch = crate::verify::batch_text(image);
    for check in checks {
        let status = if check.valid {
            "signature verifies"
        } else {
            "signature does not verify"
        };
        writeln!(out, "signed    by {} ({status}{batch})", check.key)?;
    }
    writeln!(out, "trust     {}", escape(&verdict.text()))?;
    writeln!(
        out,
        "entries   {} in {} owners",
        image.len(),
        image.owner_count()
    )?;
    if !meta.labels.is_empty() {
        let labels: Vec<String> = meta
            .labels
            .iter()
            .map(|(k, v)| format!("{}={}", escape(k), escape(v)))
            .collect();
        writeln!(out, "labels    {}", labels.join(", "))?;
    }
    writeln!(out)?;
    writeln!(out, "owners")?;
    let mut owners = Table::new(&["digest", "entries", "label"]);
    for (digest, label, entries) in image.owners() {
        owners.row(vec![
            short(&digest),
            format!("{}..{}", entries.start, entries.end),
            label,
        ]);
    }
    owners.write(&mut out, "  ")?;
    writeln!(out)?;
    writeln!(out, "entries")?;
    let mut entries = Table::new(&[
        "#", "name", "key", "owner", "kinds", "bytes", "worlds", "deps",
    ]);
    for (index, entry) in image.entries().enumerate() {
        match entry {
            Ok(entry) => {
                let sizes: Vec<String> = entry.artifacts().map(|a| a.len().to_string()).collect();
                let deps: Vec<String> = entry
                    .dep_iter()
                    .map(|(name, fingerprint)| format!("{name}@{}", short(&fingerprint)))
                    .collect();
                entries.row(vec![
                    index.to_string(),
                    entry.name().to_owned(),
                    short(&entry.key()),
                    entry.owner_label().to_owned(),
                    kinds(&entry),
                    sizes.join(","),
                    worlds(&entry),
                    deps.join(","),
                ]);
            }
            Err(error) => entries.row(vec![index.to_string(), format!("<corrupt: {error}>")]),
        }
    }
    entries.write(&mut out, "  ")?;
    writeln!(out)?;
    writeln!(out, "targets")?;
    let mut targets = Table::new(&["name", "targets (kinds)"]);
    for (name, list) in targets_by_name(image) {
        let list: Vec<String> = list
            .iter()
            .map(|(target, kinds)| format!("{target} ({kinds})"))
            .collect();
        targets.row(vec![name, list.join(", ")]);
    }
    targets.write(&mut out, "  ")?;
    Ok(())
}
