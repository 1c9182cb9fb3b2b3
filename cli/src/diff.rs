//! `kiln diff A B [--json]`: entries only in A, only in B, and in both
//! with different contents, matched by (owner, key). Exit status 1 when the
//! images differ in entries or metadata. Names and labels are shown escaped
//! ([`escape`]); `--json` keeps them exact.

use std::cmp::Ordering;
use std::io::Write;
use std::path::PathBuf;

use kiln_image::{EntryRef, Image, Verification};
use serde_json::{Value, json};

use crate::common::{PrintArgs, print_json, short};
use crate::escape::escape;
use crate::{CliError, Outcome};

/// Arguments of `kiln diff`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The first image.
    a: PathBuf,
    /// The second image.
    b: PathBuf,
    #[command(flatten)]
    print: PrintArgs,
}

/// One difference between the two images.
enum Change<'a> {
    OnlyInA(EntryRef<'a>),
    OnlyInB(EntryRef<'a>),
    Changed(EntryRef<'a>, Vec<&'static str>),
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let a = Image::open(&args.a, Verification::Full).map_err(CliError::image(&args.a))?;
    let b = Image::open(&args.b, Verification::Full).map_err(CliError::image(&args.b))?;
    let (changes, same) = compare(&a, &b).map_err(CliError::image(&args.a))?;
    let meta_changed = a.meta() != b.meta();
    if args.print.json {
        print_json(&to_json(&changes, same, meta_changed))?;
    } else {
        print_text(&changes, same, meta_changed)?;
    }
    Ok(if changes.is_empty() && !meta_changed {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// Merge-joins the two entry lists (both sorted by (owner, key)).
fn compare<'a>(
    a: &'a Image,
    b: &'a Image,
) -> Result<(Vec<Change<'a>>, usize), kiln_image::ImageError> {
    let (mut i, mut j, mut same) = (0, 0, 0);
    let mut changes = Vec::new();
    while i < a.len() || j < b.len() {
        let left = if i < a.len() { Some(a.entry(i)?) } else { None };
        let right = if j < b.len() { Some(b.entry(j)?) } else { None };
        let order = match (&left, &right) {
            (Some(l), Some(r)) => (l.owner(), l.key()).cmp(&(r.owner(), r.key())),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        match (order, left, right) {
            (Ordering::Less, Some(l), _) => {
                changes.push(Change::OnlyInA(l));
                i += 1;
            }
            (Ordering::Greater, _, Some(r)) => {
                changes.push(Change::OnlyInB(r));
                j += 1;
            }
            (_, Some(l), Some(r)) => {
                let fields = differing_fields(&l, &r);
                if fields.is_empty() {
                    same += 1;
                } else {
                    changes.push(Change::Changed(r, fields));
                }
                i += 1;
                j += 1;
            }
            _ => break,
        }
    }
    Ok((changes, same))
}

fn differing_fields(a: &EntryRef<'_>, b: &EntryRef<'_>) -> Vec<&'static str> {
    let artifacts = |e: &EntryRef<'_>| {
        e.artifacts()
            .map(|x| {
                (
                    x.kind_name().to_owned(),
                    x.entry_points().join(","),
                    x.checksum(),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut fields = Vec::new();
    if a.name() != b.name() {
        fields.push("name");
    }
    if a.owner_label() != b.owner_label() {
        fields.push("owner label");
    }
    if (a.min_world(), a.max_world()) != (b.min_world(), b.max_world()) {
        fields.push("worlds");
    }
    if a.deps() != b.deps() {
        fields.push("deps");
    }
    if artifacts(a) != artifacts(b) {
        fields.push("artifacts");
    }
    fields
}

fn describe(entry: &EntryRef<'_>) -> Value {
    json!({
        "key": entry.key().to_hex(),
        "owner": entry.owner().to_hex(),
        "owner_label": entry.owner_label(),
        "name": entry.name(),
    })
}

fn to_json(changes: &[Change<'_>], same: usize, meta_changed: bool) -> Value {
    let pick = |want: u8| -> Vec<Value> {
        changes
            .iter()
            .filter_map(|change| match (want, change) {
                (0, Change::OnlyInA(e)) | (1, Change::OnlyInB(e)) => Some(describe(e)),
                (2, Change::Changed(e, fields)) => {
                    let mut value = describe(e);
                    value["fields"] = json!(fields);
                    Some(value)
                }
                _ => None,
            })
            .collect()
    };
    json!({
        "only_in_a": pick(0),
        "only_in_b": pick(1),
        "changed": pick(2),
        "same": same,
        "meta_changed": meta_changed,
    })
}

/// `KEY NAME (OWNER LABEL)`, the image's text escaped.
fn shown(entry: &EntryRef<'_>) -> String {
    format!(
        "{} {} ({})",
        short(&entry.key()),
        escape(entry.name()),
        escape(entry.owner_label())
    )
}

fn print_text(changes: &[Change<'_>], same: usize, meta_changed: bool) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    let (mut only_a, mut only_b, mut changed) = (0, 0, 0);
    for change in changes {
        match change {
            Change::OnlyInA(e) => {
                only_a += 1;
                writeln!(out, "- {}", shown(e))?;
            }
            Change::OnlyInB(e) => {
                only_b += 1;
                writeln!(out, "+ {}", shown(e))?;
            }
            Change::Changed(e, fields) => {
                changed += 1;
                writeln!(out, "~ {}: {}", shown(e), fields.join(", "))?;
            }
        }
    }
    if meta_changed {
        writeln!(out, "~ image metadata differs")?;
    }
    writeln!(
        out,
        "{only_a} only in A, {only_b} only in B, {changed} changed, {same} same"
    )?;
    Ok(())
}
