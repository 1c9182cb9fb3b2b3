//! `kiln ship [--manifest-path M] [-p PKG]... [--key KEY] [--check] [--rebuild]
//! [--json] [-- CARGO_ARGS...]`: turns what the libraries' precompile blocks
//! built into their shipped images.
//!
//! It runs `cargo build` (with `--message-format=json`, the arguments given,
//! and `KILN_SHIP_CANDIDATE=1`, so that each precompile block writes every
//! entry it got, whole, beside its image), finds each build script of a
//! local package that ran a precompile block (its `OUT_DIR` holds
//! `<name>.kship-candidate`), and writes those entries, compressed (zstd
//! level 19), with the block's manifest, into the library's source tree as
//! `kiln-shipped/<name>.kship`, by rename. A file whose content would not
//! change is left as it is.
//!
//! - `--check`: writes nothing; exit 1 when a shipped image is missing or no
//!   longer what the block builds, or is too large to ship: a shipped file
//!   past 8 MiB (crates.io refuses packages over 10 MiB) or an entry past
//!   16 MiB, the largest entries named (a library's CI runs this). Without
//!   `--check` the same sizes are reported and the file is written.
//! - `--rebuild`: the blocks ignore the shipped images they would read
//!   (`KILN_IGNORE_SHIPPED=1`) and key every entry by this machine's
//!   toolchain: to ship again after a toolchain upgrade.
//! - `--key KEY`: signs each shipped image with the secret key file KEY
//!   (`kiln keygen`); the library names the public key in its build script
//!   (`Precompile::shipped_key`).
//!
//! A build whose block left specializations missing, or that was built for a
//! subset of its targets (`KILN_CUDA_ARCHS`), is refused: what it would
//! ship is not the whole library.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cargo_metadata::Message;
use kiln_image::{Image, SigningKey, Verification, write_file_atomic};
use kiln_ship::{CANDIDATE_EXTENSION, Candidate, Shipped, ShippedFile};
use serde_json::json;

use crate::common::{PrintArgs, print_json};
use crate::escape::escape;
use crate::{CliError, Outcome};

/// The zstd level of shipped images.
const LEVEL: i32 = 19;

/// Arguments of `kiln ship`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// The Cargo.toml of the package or workspace to build (default: cargo's
    /// own search from the current directory).
    #[arg(long)]
    manifest_path: Option<PathBuf>,
    /// Build only these packages (cargo's -p).
    #[arg(short = 'p', long = "package")]
    packages: Vec<String>,
    /// Sign each shipped image with this secret key file.
    #[arg(long)]
    key: Option<PathBuf>,
    /// Write nothing; exit 1 if a shipped image is missing or stale.
    #[arg(long, conflicts_with = "key")]
    check: bool,
    /// Ignore the shipped images while building: key and compile every entry
    /// with this machine's toolchain.
    #[arg(long)]
    rebuild: bool,
    #[command(flatten)]
    print: PrintArgs,
    /// More arguments for `cargo build` (after `--`).
    #[arg(last = true)]
    cargo_args: Vec<String>,
}

/// What happened to one library's image.
struct Shipment {
    name: String,
    shipped: PathBuf,
    status: Status,
    entries: usize,
    raw: u64,
    bytes: u64,
    /// Why it is too large to ship, with its largest entries; empty when
    /// it is not.
    too_large: Vec<String>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Status {
    Written,
    Unchanged,
    UpToDate,
    Stale,
    Missing,
}

impl Status {
    fn name(self) -> &'static str {
        match self {
            Status::Written => "written",
            Status::Unchanged => "unchanged",
            Status::UpToDate => "up to date",
            Status::Stale => "stale",
            Status::Missing => "not shipped",
        }
    }
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let key = args
        .key
        .as_deref()
        .map(kiln_core::trust::read_signing_key)
        .transpose()?;
    let candidates = build(&args)?;
    if candidates.is_empty() {
        return Err(CliError::NothingToShip);
    }
    let mut shipments = Vec::new();
    let mut refused = Vec::new();
    for candidate in candidates {
        if let Some(why) = &candidate.not_shippable {
            refused.push((candidate.manifest.name.clone(), why.clone()));
            continue;
        }
        shipments.push(ship_one(&candidate, key.as_ref(), args.check)?);
    }
    report(&args, &shipments, &refused)?;
    let clean = refused.is_empty()
        && shipments
            .iter()
            .all(|s| !matches!(s.status, Status::Stale | Status::Missing))
        && (!args.check || shipments.iter().all(|s| s.too_large.is_empty()));
    Ok(if clean {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// Runs `cargo build` and returns the candidates the local packages' build
/// scripts left, sorted by shipped path.
fn build(args: &Args) -> Result<Vec<Candidate>, CliError> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .arg("build")
        .arg("--message-format=json-render-diagnostics");
    if let Some(path) = &args.manifest_path {
        command.arg("--manifest-path").arg(path);
    }
    for package in &args.packages {
        command.arg("-p").arg(package);
    }
    command.args(&args.cargo_args);
    // The blocks write every entry whole, beside their images.
    command.env(kiln_core::build::SHIP_CANDIDATE, "1");
    if args.rebuild {
        command.env(kiln_core::build::IGNORE_SHIPPED, "1");
    }
    command.stdout(Stdio::piped()).stderr(Stdio::inherit());
    let mut child = command.spawn().map_err(CliError::Cargo)?;
    let out_dirs = match child.stdout.take() {
        Some(stdout) => local_out_dirs(BufReader::new(stdout))?,
        None => Vec::new(),
    };
    let status = child.wait().map_err(CliError::Cargo)?;
    if !status.success() {
        return Err(CliError::BuildFailed(status));
    }
    let mut candidates = Vec::new();
    for dir in out_dirs {
        let Ok(listing) = std::fs::read_dir(&dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = listing
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| path.extension().is_some_and(|e| e == CANDIDATE_EXTENSION))
            .collect();
        paths.sort();
        for path in paths {
            candidates.push(Candidate::read(&path).map_err(CliError::ship(&path))?);
        }
    }
    candidates.sort_by(|a, b| a.shipped.cmp(&b.shipped));
    candidates.dedup_by(|a, b| a.shipped == b.shipped);
    Ok(candidates)
}

/// The `OUT_DIR`s of the build scripts of local (path) packages that
/// cargo's messages (`--message-format=json`) say ran, in order; any other
/// message or line is passed over.
fn local_out_dirs(messages: impl BufRead) -> Result<Vec<PathBuf>, CliError> {
    let mut out_dirs = Vec::new();
    for message in Message::parse_stream(messages) {
        if let Message::BuildScriptExecuted(script) = message.map_err(CliError::Cargo)? {
            // `path+file:///...#name@1.0` (or, before cargo 1.77,
            // `name 1.0 (path+file:///...)`).
            if script.package_id.repr.contains("path+file://") {
                out_dirs.push(script.out_dir.into_std_path_buf());
            }
        }
    }
    Ok(out_dirs)
}

/// Ships (or, with `check`, compares) one candidate.
fn ship_one(
    candidate: &Candidate,
    key: Option<&SigningKey>,
    check: bool,
) -> Result<Shipment, CliError> {
    let entries = candidate
        .entries
        .as_deref()
        .ok_or_else(|| CliError::NoEntries(candidate.image.clone()))?;
    let image = Image::open(entries, Verification::Full).map_err(CliError::image(entries))?;
    let shipped =
        Shipped::from_image(&image, candidate.manifest.clone()).map_err(CliError::ship(entries))?;
    // The file in the source tree, read as every untrusted file is: no
    // link, FIFO or device, at most SHIPPED_FILE_MAX bytes. One that cannot
    // be read is replaced (or, with --check, stale).
    let existing = match kiln_core::build::read_shipped_file(&candidate.shipped) {
        Ok(found) => found,
        Err(error) => {
            eprintln!(
                "kiln: the shipped image in place, {}, cannot be read: {}",
                shown(&candidate.shipped),
                escape(&error.to_string())
            );
            Some(Vec::new())
        }
    };
    let same = existing.as_deref().and_then(|bytes| {
        let file = ShippedFile::parse(bytes).ok()?;
        let old = Shipped::unpack(&file).ok()?;
        let signed = key.is_none_or(|key| file.check_signed_by(&key.public_key()).is_ok());
        Some(old.same_content(&shipped) && signed)
    });
    let raw = image.byte_len();
    let mut shipment = Shipment {
        name: candidate.manifest.name.clone(),
        shipped: candidate.shipped.clone(),
        status: Status::Unchanged,
        entries: image.len(),
        raw,
        bytes: existing.as_ref().map_or(0, |b| b.len() as u64),
        too_large: Vec::new(),
    };
    if check {
        shipment.status = match same {
            Some(true) => Status::UpToDate,
            Some(false) => Status::Stale,
            None if existing.is_some() => Status::Stale,
            None => Status::Missing,
        };
        if same == Some(true) {
            shipment.too_large = too_large(&image, shipment.bytes);
        }
        return Ok(shipment);
    }
    if same == Some(true) {
        shipment.too_large = too_large(&image, shipment.bytes);
        return Ok(shipment);
    }
    let mut bytes = shipped
        .encode(LEVEL)
        .map_err(CliError::ship(&candidate.shipped))?;
    if let Some(key) = key {
        bytes = ShippedFile::parse(&bytes)
            .and_then(|file| file.signed_with(key))
            .map_err(CliError::ship(&candidate.shipped))?;
    }
    if let Some(dir) = candidate.shipped.parent() {
        std::fs::create_dir_all(dir).map_err(|source| CliError::Write {
            path: dir.to_owned(),
            source,
        })?;
    }
    write_file_atomic(&candidate.shipped, &bytes).map_err(CliError::image(&candidate.shipped))?;
    shipment.status = Status::Written;
    shipment.bytes = bytes.len() as u64;
    shipment.too_large = too_large(&image, shipment.bytes);
    Ok(shipment)
}

/// Why the shipped image of `image`, `shipped` bytes long, cannot ship: a
/// file past `IMAGE_WARN_BYTES`, or entries past `ENTRY_WARN_BYTES`, the
/// largest five named. Reads no payload (lengths come from the index).
fn too_large(image: &Image, shipped: u64) -> Vec<String> {
    use kiln_core::build::{ENTRY_WARN_BYTES, IMAGE_WARN_BYTES};
    let mut sizes: Vec<(u64, String)> = (0..image.len())
        .filter_map(|index| image.entry(index).ok())
        .map(|entry| {
            let bytes = entry.artifacts().map(|a| a.len() as u64).sum();
            (bytes, format!("{} ({})", entry.name(), entry.owner_label()))
        })
        .collect();
    let large = sizes
        .iter()
        .filter(|(bytes, _)| *bytes > ENTRY_WARN_BYTES)
        .count();
    let mut why = Vec::new();
    if shipped > IMAGE_WARN_BYTES {
        why.push(format!(
            "the shipped file is {}, past {} (crates.io refuses packages over 10 MiB)",
            mib(shipped),
            mib(IMAGE_WARN_BYTES)
        ));
    }
    if large > 0 {
        why.push(format!(
            "{large} entries hold more than {} each",
            mib(ENTRY_WARN_BYTES)
        ));
    }
    if !why.is_empty() {
        sizes.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        why.extend(
            sizes
                .iter()
                .take(5)
                .map(|(bytes, name)| format!("largest: {name}: {}", mib(*bytes))),
        );
    }
    why
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

fn report(
    args: &Args,
    shipments: &[Shipment],
    refused: &[(String, String)],
) -> Result<(), CliError> {
    if args.print.json {
        return print_json(&json!({
            "shipped": shipments.iter().map(|s| json!({
                "name": s.name,
                "path": s.shipped.display().to_string(),
                "status": s.status.name(),
                "entries": s.entries,
                "raw_bytes": s.raw,
                "shipped_bytes": s.bytes,
                "too_large": s.too_large,
            })).collect::<Vec<_>>(),
            "refused": refused.iter().map(|(name, why)| json!({"name": name, "why": why})).collect::<Vec<_>>(),
        }));
    }
    let mut out = std::io::stdout().lock();
    for s in shipments {
        writeln!(
            out,
            "{:<10}  {}: {} entries, {} bytes whole, {} bytes shipped ({})",
            s.status.name(),
            escape(&s.name),
            s.entries,
            s.raw,
            s.bytes,
            shown(&s.shipped),
        )?;
        for why in &s.too_large {
            writeln!(out, "            too large to ship: {}", escape(why))?;
        }
        if matches!(s.status, Status::Stale | Status::Missing) {
            writeln!(
                out,
                "            the build's image differs from what is shipped: run `kiln ship` \
                 where the toolchain is, and commit {}",
                shown(&s.shipped)
            )?;
        }
    }
    for (name, why) in refused {
        writeln!(
            out,
            "refused     {}: not shipped, {} (build where the toolchain is, with every \
             target; after a toolchain upgrade, `kiln ship --rebuild`)",
            escape(name),
            escape(why)
        )?;
    }
    Ok(())
}

fn shown(path: &Path) -> String {
    escape(&path.display().to_string()).into_owned()
}

#[cfg(test)]
mod tests {
    use kiln_image::{Artifact, ArtifactKind, Digest, EntryData, ImageMeta, ImageWriter};

    use super::*;

    fn image(sizes: &[usize]) -> Image {
        let mut writer = ImageWriter::new(ImageMeta::new("catalogue", "1"));
        for (n, &size) in sizes.iter().enumerate() {
            writer.push(EntryData {
                owner: Digest::of(b"regex-dfa 1.0"),
                owner_label: "regex-dfa 1.0".into(),
                key: Digest::of(&n.to_le_bytes()),
                name: format!("dfa {n}"),
                min_world: 1,
                max_world: u64::MAX,
                deps: vec![],
                artifacts: vec![Artifact {
                    kind: ArtifactKind::Bytes,
                    entry_points: vec![],
                    bytes: vec![0; size],
                }],
            });
        }
        let bytes = writer.to_bytes().expect("valid entries");
        Image::from_bytes(&bytes, Verification::Full).expect("a valid image")
    }

    #[test]
    fn the_out_dirs_are_those_of_local_build_scripts_from_cargos_messages() {
        let script = |id: &str, out_dir: &str| {
            serde_json::json!({
                "reason": "build-script-executed",
                "package_id": id,
                "linked_libs": [],
                "linked_paths": [],
                "cfgs": [],
                "env": [],
                "out_dir": out_dir,
            })
            .to_string()
        };
        let messages = [
            "   Compiling kiln-kernels-demo v0.1.0".to_owned(),
            script(
                "path+file:///src/lib#my-kernels@0.1.0",
                "/t/build/my-kernels-1/out",
            ),
            script(
                "registry+https://github.com/rust-lang/crates.io-index#zstd-sys@2.0.0",
                "/t/build/zstd-sys-1/out",
            ),
            script(
                "old-style 0.1.0 (path+file:///src/old)",
                "/t/build/old-style-1/out",
            ),
            serde_json::json!({"reason": "build-finished", "success": true}).to_string(),
        ]
        .join("\n");
        let dirs = local_out_dirs(messages.as_bytes()).expect("readable");
        assert_eq!(
            dirs,
            [
                PathBuf::from("/t/build/my-kernels-1/out"),
                PathBuf::from("/t/build/old-style-1/out")
            ]
        );
    }

    #[test]
    fn a_shipped_image_too_large_to_ship_names_its_largest_entries() {
        let small = image(&[1000, 2000]);
        assert!(too_large(&small, 1 << 20).is_empty());
        let why = too_large(&small, 9 << 20);
        assert!(why[0].contains("the shipped file is 9.0 MiB"), "{why:?}");
        assert_eq!(why[1], "largest: dfa 1 (regex-dfa 1.0): 0.0 MiB");

        let catalogue = image(&[17 << 20, 1 << 20]);
        let why = too_large(&catalogue, 1 << 20);
        assert_eq!(why[0], "1 entries hold more than 16.0 MiB each");
        assert_eq!(why[1], "largest: dfa 0 (regex-dfa 1.0): 17.0 MiB");
        assert_eq!(why.len(), 3);
    }
}
