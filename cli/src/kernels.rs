//! `kiln kernels FILE... [--gpu ARCH]... [--driver CUDA_VERSION]... [--all]
//! [--json]`: which kernels an application would be served on each GPU and
//! driver, from what, and which are missing, before it is deployed.
//!
//! Each FILE is an application binary (the images `include_image!` embedded in
//! it are found by their header, and each is verified fully), an image file
//! (as `KILN_IMAGE_PATH` holds them) or a shipped image (`.kship`, as a library
//! author checks one before publishing). All the images given are one set, as
//! an application merges every image it has. For each GPU (`--gpu sm_90`) and
//! driver (`--driver 12.8`, the CUDA version it supports) every kernel of every
//! kernel library in the images is served, or not, by the walk
//! `KernelLibrary::get_kernel` takes on a machine without NVRTC
//! (`kiln_cuda::library::images`): exact CUBIN, compatible CUBIN, the newest
//! PTX that holds it, each only where the driver loads it. Without `--gpu`:
//! every GPU Kiln knows; without `--driver`: every driver release Kiln knows,
//! from the oldest the libraries' code loads on, that supports the GPU.
//!
//! Output: the libraries found (name, kernels, the code per NVRTC release),
//! one row per GPU and run of drivers with the same answer (how many kernels
//! are served, and from what), then every missing kernel and why; `--all`
//! adds a row per kernel. `--json` prints all of it, every driver apart. Text
//! from the images is shown escaped; `--json` keeps it exact.
//!
//! Exit status: 0 when every kernel is served on every GPU and driver asked
//! about; 1 when some kernel is missing (the application would compile it
//! there, or fail without NVRTC), or an image in a file is damaged; 2 on other
//! errors (a file that cannot be read, none that holds a Kiln image, a file
//! with more image headers than it has room for).
//!
//! The images are read as they are: signatures are not checked (`kiln
//! verify` does), and an image file a program with `KILN_TRUSTED_KEYS` would
//! refuse from `KILN_IMAGE_PATH` is reported as if merged.
//!
//! A binary is untrusted: it is read once (at most [`INPUT_MAX`] bytes); each
//! place the image magic appears is a candidate whose header is checked (256
//! bytes, its own checksum) before anything else, and only candidates whose
//! header verifies are opened, with full verification, their declared
//! lengths adding up to at most twice the file's (images in a binary do not
//! overlap, so a real binary never comes near): time and memory stay linear
//! in the file, and a file past that bound is an error rather than a report
//! with images left out. Candidates that are no image header (the magic as a
//! constant in the reader's own code) are counted.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use kiln_core::regular_file::{self, Links};
use kiln_core::trust::Provenance;
use kiln_cuda::library::KernelOutcome;
use kiln_cuda::library::images::{EntryInfo, ImageInfo, ImageKernel, ImageSet};
use kiln_cuda::select::support::driver_branch;
use kiln_cuda::select::{
    KNOWN_DRIVERS, KNOWN_GPUS, cuda_version_text, known_gpu, parse_cuda_version,
};
use kiln_cuda::ship::RECORD_BACKEND;
use kiln_cuda::toolchain::BuildRecord;
use kiln_cuda::{Arch, Device};
use kiln_image::header::{HEADER_LEN, MAGIC, offsets};
use kiln_image::{Header, Image, Verification};
use serde_json::{Value, json};

use crate::common::{PrintArgs, Table, print_json};
use crate::escape::{self, escape};
use crate::{CliError, Outcome};

/// The largest file read: far above any application binary (one embedding
/// a real library's every GPU generation uncompressed was 71 MB).
pub(crate) const INPUT_MAX: u64 = 4 << 30;

/// Bytes candidate images may declare beyond twice the file's length.
const SLACK: u64 = 1 << 20;

/// How many missing kernels' names a text line lists per library.
const NAMES_SHOWN: usize = 8;

/// Arguments of `kiln kernels`.
#[derive(clap::Args)]
pub(crate) struct Args {
    /// Application binaries, image files or shipped images (.kship): one set of
    /// images, as an application merges them.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// A GPU, as its arch (sm_90); repeatable or comma-separated. Default:
    /// every GPU Kiln knows.
    #[arg(long = "gpu", value_name = "ARCH", value_delimiter = ',', value_parser = parse_gpu)]
    gpus: Vec<Arch>,
    /// A driver, as the CUDA version it supports (12.8, 13.0); repeatable or
    /// comma-separated. Default: every release Kiln knows, from the oldest the
    /// libraries' code loads on, that supports the GPU.
    #[arg(long = "driver", value_name = "CUDA_VERSION", value_delimiter = ',', value_parser = parse_driver)]
    drivers: Vec<i32>,
    /// Also list every kernel, served or not, for every GPU and driver.
    #[arg(long)]
    all: bool,
    #[command(flatten)]
    print: PrintArgs,
}

fn parse_gpu(text: &str) -> Result<Arch, String> {
    text.trim()
        .parse::<Arch>()
        .map_err(|error| format!("{error}: give a GPU arch such as sm_90"))
}

fn parse_driver(text: &str) -> Result<i32, String> {
    parse_cuda_version(text)
        .ok_or_else(|| "not a CUDA version: give one such as 12.8 or 13.0".to_owned())
}

pub(crate) fn run(args: Args) -> Result<Outcome, CliError> {
    let mut inputs = Vec::new();
    for path in &args.files {
        inputs.push(read(path)?);
    }
    let mut images = Vec::new();
    for input in &inputs {
        for found in &input.images {
            images.push(found.info(&input.path));
        }
    }
    let unchecked: usize = inputs.iter().map(|i| i.unchecked).sum();
    if images.is_empty() && unchecked > 0 {
        return Err(CliError::TooManyImageHeaders { count: unchecked });
    }
    if images.is_empty() {
        return Err(CliError::NoImage {
            files: inputs
                .iter()
                .map(Input::line)
                .collect::<Vec<_>>()
                .join("; "),
        });
    }
    let set = ImageSet::new(images);
    if set.libraries().is_empty() {
        return Err(CliError::NoKernelLibrary {
            images: inputs.iter().map(|i| i.images.len()).sum(),
            other: set.other_entries(),
        });
    }
    let reports: Vec<DeviceReport> = devices(&args, &set)
        .into_iter()
        .map(|device| DeviceReport::of(device, &set.serve(&device), args.all))
        .collect();
    if args.print.json {
        print_json(&to_json(&inputs, &set, &reports))?;
    } else {
        print_text(&inputs, &set, &reports, &args)?;
    }
    if unchecked > 0 {
        return Err(CliError::TooManyImageHeaders { count: unchecked });
    }
    let damaged = inputs.iter().any(|i| !i.damaged.is_empty());
    if damaged || reports.iter().any(|r| !r.missing.is_empty()) {
        Ok(Outcome::Findings)
    } else {
        Ok(Outcome::Clean)
    }
}

/// What one file held.
struct Input {
    path: PathBuf,
    images: Vec<Found>,
    /// Places the magic appears that hold no image header.
    not_images: usize,
    /// Candidates whose header verified but whose image did not: offset, why.
    damaged: Vec<(u64, String)>,
    /// Candidates left unchecked, past the bound on what candidates may declare.
    unchecked: usize,
}

impl Input {
    /// What the file held, for an error that found no image anywhere.
    fn line(&self) -> String {
        format!(
            "{}: {} image headers, {} damaged, {} places the magic appears without one",
            escape::path(&self.path),
            self.images.len(),
            self.damaged.len(),
            self.not_images
        )
    }
}

/// One image found in a file.
struct Found {
    /// Where in the file (`None`: unpacked from a shipped image).
    offset: Option<u64>,
    /// The shipped image's name and the record its build set (its manifest's),
    /// for an image unpacked from one.
    shipped: Option<(String, Option<String>)>,
    image: Image,
}

impl Found {
    /// Where it came from, for people.
    fn source(&self, path: &Path) -> String {
        match self.offset {
            Some(0) | None => path.display().to_string(),
            Some(offset) => format!("{} at byte {offset}", path.display()),
        }
    }

    /// Its name: the shipped image's, else its `image` label, else its
    /// producer.
    fn name(&self) -> String {
        let meta = self.image.meta();
        self.shipped
            .as_ref()
            .map(|(name, _)| name.clone())
            .or_else(|| meta.labels.get("image").cloned())
            .unwrap_or(meta.producer_name)
    }

    fn baked(&self) -> bool {
        self.image
            .meta()
            .labels
            .get(Provenance::LABEL)
            .is_some_and(|v| v == "baked")
    }

    /// Its entries as the report reads them.
    fn info(&self, path: &Path) -> ImageInfo {
        let mut info = ImageInfo::new(self.source(path), self.name());
        if self.baked() {
            info = info.baked();
        }
        // A shipped image's record: its entries carry PTX for every target, the
        // application embeds only the record's PTX targets'. One that does not
        // parse is left aside, the record rebuilt from the entries.
        let recorded = self
            .shipped
            .as_ref()
            .and_then(|(_, record)| record.as_ref());
        if let Some(record) = recorded.and_then(|text| text.parse::<BuildRecord>().ok()) {
            info = info.with_record(record);
        }
        // Verified fully: every entry reads.
        for entry in self.image.entries().flatten() {
            let mut found = EntryInfo::new(
                entry.owner(),
                entry.owner_label(),
                entry.key(),
                entry.name(),
            );
            for artifact in entry.artifacts() {
                found = found.with_artifact(artifact.kind(), artifact.entry_points());
            }
            info.push(found);
        }
        info
    }
}

/// Reads `path`: a shipped image, or any other file scanned for images.
fn read(path: &Path) -> Result<Input, CliError> {
    let bytes =
        regular_file::read(path, Links::Follow, INPUT_MAX).map_err(|source| CliError::Read {
            path: path.to_owned(),
            source,
        })?;
    if bytes.starts_with(kiln_ship::file::MAGIC) {
        let shipped = kiln_ship::Shipped::from_bytes(&bytes).map_err(CliError::ship(path))?;
        let image = shipped.to_image().map_err(CliError::ship(path))?;
        return Ok(Input {
            path: path.to_owned(),
            images: vec![Found {
                offset: None,
                shipped: Some((
                    shipped.manifest.name.clone(),
                    shipped.manifest.records.get(RECORD_BACKEND).cloned(),
                )),
                image,
            }],
            not_images: 0,
            damaged: Vec::new(),
            unchecked: 0,
        });
    }
    Ok(scan(path, &bytes))
}

/// Every image in `bytes` (see the module documentation for the bounds).
///
/// `include_image!` also embeds a copy of each image's header (the one it
/// verified, which the run time compares): candidates with the same header
/// are tried 64-byte aligned ones first (an embedded image is), and once one
/// verifies the others are copies of its header, not damaged images.
fn scan(path: &Path, bytes: &[u8]) -> Input {
    let mut input = Input {
        path: path.to_owned(),
        images: Vec::new(),
        not_images: 0,
        damaged: Vec::new(),
        unchecked: 0,
    };
    // Candidates whose header verifies, by header checksum: (offset, length).
    let mut by_header: BTreeMap<kiln_image::Digest, Vec<(usize, usize)>> = BTreeMap::new();
    let mut first_seen: Vec<kiln_image::Digest> = Vec::new();
    for at in memchr::memmem::find_iter(bytes, &MAGIC) {
        let rest = &bytes[at..];
        // The image the header declares, checked (its own checksum, versions,
        // regions) before anything else is read.
        let Some(image_bytes) = declared(rest).and_then(|len| rest.get(..len)) else {
            input.not_images += 1;
            continue;
        };
        let Ok(header) = Header::parse(image_bytes, image_bytes.len() as u64) else {
            input.not_images += 1;
            continue;
        };
        let group = by_header.entry(header.header_checksum).or_default();
        if group.is_empty() {
            first_seen.push(header.header_checksum);
        }
        group.push((at, image_bytes.len()));
    }
    let mut budget = (bytes.len() as u64).saturating_mul(2).saturating_add(SLACK);
    let mut found: Vec<std::ops::Range<usize>> = Vec::new();
    for checksum in first_seen {
        let mut group = by_header.remove(&checksum).unwrap_or_default();
        group.sort_by_key(|&(at, _)| (!at.is_multiple_of(64), at));
        let mut failed = Vec::new();
        let mut verified = false;
        for (at, len) in group {
            // Inside an image already found (its payload holds the magic).
            if verified || found.iter().any(|r| r.contains(&at)) {
                continue;
            }
            if len as u64 > budget {
                input.unchecked += 1;
                continue;
            }
            budget -= len as u64;
            match Image::from_bytes(&bytes[at..at + len], Verification::Full) {
                Ok(image) => {
                    input.images.push(Found {
                        offset: Some(at as u64),
                        shipped: None,
                        image,
                    });
                    found.push(at..at + len);
                    verified = true;
                }
                Err(error) => failed.push((at as u64, error.to_string())),
            }
        }
        if !verified {
            input.damaged.extend(failed);
        }
    }
    input.images.sort_by_key(|f| f.offset);
    input
}

/// The length of the image whose header starts `bytes`, as its header
/// declares it (header, body and signature trailer), if it can be read.
fn declared(bytes: &[u8]) -> Option<usize> {
    let field = |at: usize, len: usize| bytes.get(at..at + len);
    let body: [u8; 8] = field(offsets::BODY_LEN, 8)?.try_into().ok()?;
    let trailer: [u8; 4] = field(offsets::SIGNATURE_LEN, 4)?.try_into().ok()?;
    let len = u64::from_le_bytes(body)
        .checked_add(HEADER_LEN as u64)?
        .checked_add(u64::from(u32::from_le_bytes(trailer)))?;
    usize::try_from(len).ok()
}

/// The devices to report on (see [`Args`]): per GPU, each driver.
fn devices(args: &Args, set: &ImageSet) -> Vec<Device> {
    let oldest = set.oldest_driver().unwrap_or(i32::MAX);
    let mut releases: Vec<i32> = KNOWN_DRIVERS.to_vec();
    for library in set.libraries() {
        for toolchain in library.record().toolchains() {
            releases.push(toolchain.cubin_driver());
            releases.push(toolchain.ptx_driver());
        }
    }
    releases.retain(|d| *d >= oldest);
    releases.sort_unstable();
    releases.dedup();
    let gpus: Vec<Arch> = if args.gpus.is_empty() {
        KNOWN_GPUS.iter().map(|g| g.arch()).collect()
    } else {
        args.gpus.clone()
    };
    let mut devices = Vec::new();
    for gpu in gpus {
        let supports = |driver: &i32| known_gpu(gpu).is_none_or(|g| g.supported_by(*driver));
        let drivers: Vec<i32> = match (args.drivers.is_empty(), args.gpus.is_empty()) {
            // Every release from the oldest that supports the GPU.
            (true, _) => releases.iter().copied().filter(supports).collect(),
            // The drivers named, on every known GPU they support.
            (false, true) => args.drivers.iter().copied().filter(supports).collect(),
            // Exactly the pairs asked about.
            (false, false) => args.drivers.clone(),
        };
        devices.extend(drivers.into_iter().map(|d| Device::new(gpu).with_driver(d)));
    }
    devices
}

/// What kernels were served from: what a device's report counts.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Source {
    selection: &'static str,
    kind: String,
    target: String,
    nvrtc: String,
    driver_needed: Option<i32>,
}

impl Source {
    fn text(&self) -> String {
        format!("{} {}, NVRTC {}", self.selection, self.target, self.nvrtc)
    }

    fn json(&self, kernels: usize) -> Value {
        json!({
            "selection": self.selection,
            "kind": self.kind,
            "target": self.target,
            "nvrtc": self.nvrtc,
            "driver_needed": self.driver_needed.map(cuda_version_text),
            "kernels": kernels,
        })
    }
}

/// A kernel not served: where, and why.
struct Missing {
    library: String,
    program: String,
    kernel: Option<String>,
    why: String,
}

/// One GPU and driver: how many kernels, served from what, and the missing.
struct DeviceReport {
    device: Device,
    total: usize,
    not_for_arch: usize,
    from: BTreeMap<Source, usize>,
    missing: Vec<Missing>,
    /// Every kernel as JSON (with `--all` only).
    kernels: Vec<Value>,
    /// How many kernels each (library, program) has.
    programs: BTreeMap<(String, String), usize>,
}

impl DeviceReport {
    fn of(device: Device, served: &[ImageKernel<'_>], all: bool) -> DeviceReport {
        let mut report = DeviceReport {
            device,
            total: served.len(),
            not_for_arch: 0,
            from: BTreeMap::new(),
            missing: Vec::new(),
            kernels: Vec::new(),
            programs: BTreeMap::new(),
        };
        for kernel in served {
            *report
                .programs
                .entry((kernel.library.name().to_owned(), kernel.program.to_owned()))
                .or_default() += 1;
            if all {
                report.kernels.push(kernel_json(kernel));
            }
            match &kernel.outcome {
                KernelOutcome::Missing { tried } => report.missing.push(Missing {
                    library: kernel.library.name().to_owned(),
                    program: kernel.program.to_owned(),
                    kernel: kernel.kernel.map(str::to_owned),
                    why: tried.to_string(),
                }),
                KernelOutcome::NotForArch { .. } => report.not_for_arch += 1,
                outcome => {
                    if let Some((selection, artifact)) = outcome.served() {
                        let from = Source {
                            selection: selection.as_str(),
                            kind: artifact.kind.to_string(),
                            target: artifact.target.to_string(),
                            nvrtc: artifact
                                .nvrtc
                                .as_ref()
                                .map(|v| v.release.clone())
                                .unwrap_or_default(),
                            driver_needed: artifact.driver_needed(),
                        };
                        *report.from.entry(from).or_default() += 1;
                    }
                }
            }
        }
        report
    }

    fn served(&self) -> usize {
        self.from.values().sum()
    }

    /// What is missing, to compare devices by.
    fn missing_key(&self) -> Vec<(&str, &str, Option<&str>)> {
        self.missing
            .iter()
            .map(|m| (m.library.as_str(), m.program.as_str(), m.kernel.as_deref()))
            .collect()
    }

    /// How many kernels `program` of `library` has.
    fn program_kernels(&self, library: &str, program: &str) -> usize {
        self.programs
            .get(&(library.to_owned(), program.to_owned()))
            .copied()
            .unwrap_or(0)
    }

    /// What a text row says of the device beyond its GPU and driver: equal for
    /// the drivers one row covers.
    fn summary(&self) -> (String, String) {
        let mut served = format!("{} of {}", self.served(), self.total);
        if self.not_for_arch > 0 {
            served.push_str(&format!(" ({} not for this arch)", self.not_for_arch));
        }
        let from = match self.from.len() {
            0 => "-".to_owned(),
            1 => self.from.keys().map(Source::text).collect(),
            _ => self
                .from
                .iter()
                .map(|(from, count)| format!("{count} {}", from.text()))
                .collect::<Vec<_>>()
                .join("; "),
        };
        (served, from)
    }

    fn json(&self) -> Value {
        let mut value = json!({
            "gpu": self.device.arch().to_string(),
            "driver": self.device.driver().map(cuda_version_text),
            "driver_branch": self.device.driver().and_then(driver_branch),
            "kernels": self.total,
            "served": self.served(),
            "not_for_arch": self.not_for_arch,
            "missing": self.missing.len(),
            "from": self.from.iter().map(|(from, count)| from.json(*count)).collect::<Vec<_>>(),
            "missing_kernels": self.missing.iter().map(|m| json!({
                "library": m.library,
                "program": m.program,
                "kernel": m.kernel,
                "why": m.why,
            })).collect::<Vec<_>>(),
        });
        if !self.kernels.is_empty() {
            value["every_kernel"] = Value::Array(self.kernels.clone());
        }
        value
    }
}

/// One kernel as JSON: its library, program and name, and how it is served.
fn kernel_json(kernel: &ImageKernel<'_>) -> Value {
    let mut value = json!({
        "library": kernel.library.name(),
        "program": kernel.program,
        "kernel": kernel.kernel,
    });
    match &kernel.outcome {
        KernelOutcome::Missing { tried } => {
            value["outcome"] = json!("missing");
            value["why"] = json!(tried.to_string());
        }
        KernelOutcome::NotForArch { selection, target } => {
            value["outcome"] = json!("not-for-arch");
            value["selection"] = json!(selection.as_str());
            value["target"] = json!(target.to_string());
        }
        outcome => {
            if let Some((selection, artifact)) = outcome.served() {
                value["outcome"] = json!("served");
                value["selection"] = json!(selection.as_str());
                value["kind"] = json!(artifact.kind.to_string());
                value["target"] = json!(artifact.target.to_string());
                value["nvrtc"] = json!(artifact.nvrtc.as_ref().map(|v| v.release.clone()));
                value["driver_needed"] = json!(artifact.driver_needed().map(cuda_version_text));
            }
        }
    }
    value
}

/// The reports in runs: consecutive ones of one GPU that are `same`.
fn runs(
    reports: &[DeviceReport],
    same: impl Fn(&DeviceReport, &DeviceReport) -> bool,
) -> Vec<Vec<&DeviceReport>> {
    let mut runs: Vec<Vec<&DeviceReport>> = Vec::new();
    for report in reports {
        match runs.last_mut() {
            Some(run) if run[0].device.arch() == report.device.arch() && same(run[0], report) => {
                run.push(report);
            }
            _ => runs.push(vec![report]),
        }
    }
    runs
}

/// The drivers of a run: `12.8 (R570)`, or `12.0–12.9` (every driver asked
/// about from the first to the last).
fn drivers_text(run: &[&DeviceReport]) -> String {
    match run {
        [one] => driver_text(one.device.driver()),
        [first, .., last] => format!(
            "{}–{}",
            first
                .device
                .driver()
                .map_or_else(String::new, cuda_version_text),
            last.device
                .driver()
                .map_or_else(String::new, cuda_version_text)
        ),
        [] => String::new(),
    }
}

/// A driver for people: `12.8 (R570)`.
fn driver_text(driver: Option<i32>) -> String {
    match driver {
        Some(driver) => match driver_branch(driver) {
            Some(branch) => format!("{} ({branch})", cuda_version_text(driver)),
            None => cuda_version_text(driver),
        },
        None => "any".to_owned(),
    }
}

/// A library's code: per NVRTC release, its CUBIN and PTX targets.
fn code(record: &BuildRecord) -> String {
    let list = |archs: &[Arch]| {
        archs
            .iter()
            .map(Arch::to_string)
            .collect::<Vec<_>>()
            .join(",")
    };
    record
        .toolchains()
        .iter()
        .map(|t| {
            let mut text = format!("NVRTC {}: CUBIN {}", t.nvrtc(), list(t.cubin_targets()));
            if !t.ptx_targets().is_empty() {
                text.push_str(&format!(", PTX {}", list(t.ptx_targets())));
            }
            text
        })
        .collect::<Vec<_>>()
        .join("; ")
}

fn to_json(inputs: &[Input], set: &ImageSet, reports: &[DeviceReport]) -> Value {
    json!({
        "files": inputs.iter().map(|input| json!({
            "path": input.path.display().to_string(),
            "images": input.images.iter().map(|found| json!({
                "name": found.name(),
                "offset": found.offset,
                "entries": found.image.len(),
                "baked": found.baked(),
            })).collect::<Vec<_>>(),
            "not_images": input.not_images,
            "damaged": input.damaged.iter().map(|(offset, error)| json!({
                "offset": offset,
                "error": error,
            })).collect::<Vec<_>>(),
            "unchecked": input.unchecked,
        })).collect::<Vec<_>>(),
        "libraries": set.libraries().iter().map(|library| json!({
            "name": library.name(),
            "source": library.source(),
            "record": library.record().to_string(),
            "entries": library.entries(),
            "programs": library.programs(),
            "kernels": library.kernels(),
        })).collect::<Vec<_>>(),
        "other_entries": set.other_entries(),
        "devices": reports.iter().map(DeviceReport::json).collect::<Vec<_>>(),
        "missing": reports.iter().map(|r| r.missing.len()).sum::<usize>(),
        "devices_missing": reports.iter().filter(|r| !r.missing.is_empty()).count(),
    })
}

fn print_text(
    inputs: &[Input],
    set: &ImageSet,
    reports: &[DeviceReport],
    args: &Args,
) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    for input in inputs {
        for (offset, error) in &input.damaged {
            writeln!(
                out,
                "{}: the image at byte {offset} is damaged: {}",
                escape::path(&input.path),
                escape(error)
            )?;
        }
    }
    let mut libraries = Table::new(&["library", "kernels", "programs", "code", "found in"]);
    for library in set.libraries() {
        libraries.row(vec![
            library.name().to_owned(),
            library.kernels().to_string(),
            library.programs().to_string(),
            code(library.record()),
            library.source().to_owned(),
        ]);
    }
    libraries.write(&mut out, "")?;
    writeln!(out)?;

    // One row per GPU and run of drivers with the same answer.
    let mut rows = Table::new(&["GPU", "driver (CUDA)", "served", "from"]);
    for run in runs(reports, |a, b| a.summary() == b.summary()) {
        let (served, from) = run[0].summary();
        rows.row(vec![
            run[0].device.arch().to_string(),
            drivers_text(&run),
            served,
            from,
        ]);
    }
    rows.write(&mut out, "")?;

    if args.all {
        writeln!(out)?;
        let mut table = Table::new(&["GPU", "driver", "library", "program", "kernel", "served"]);
        for report in reports {
            for kernel in &report.kernels {
                let text = |field: &str| kernel[field].as_str().unwrap_or("").to_owned();
                let served = match kernel["outcome"].as_str() {
                    Some("served") => format!(
                        "{} {} (NVRTC {}, drivers for CUDA {}+)",
                        text("selection"),
                        text("target"),
                        text("nvrtc"),
                        text("driver_needed")
                    ),
                    Some("not-for-arch") => format!(
                        "not for this arch ({} {} lacks it)",
                        text("selection"),
                        text("target")
                    ),
                    _ => "MISSING".to_owned(),
                };
                table.row(vec![
                    report.device.arch().to_string(),
                    driver_text(report.device.driver()),
                    text("library"),
                    text("program"),
                    text("kernel"),
                    served,
                ]);
            }
        }
        table.write(&mut out, "")?;
    }

    writeln!(out)?;
    let lacking = reports.iter().filter(|r| !r.missing.is_empty()).count();
    if lacking == 0 {
        writeln!(
            out,
            "every kernel is served on all {} GPU and driver pairs",
            reports.len()
        )?;
        return Ok(());
    }
    let missing: usize = reports.iter().map(|r| r.missing.len()).sum();
    writeln!(
        out,
        "missing: {missing} kernels on {lacking} of {} GPU and driver pairs",
        reports.len()
    )?;
    if args.gpus.is_empty() || args.drivers.is_empty() {
        writeln!(
            out,
            "  (asked about every {} Kiln knows: name the fleet's with {})",
            match (args.gpus.is_empty(), args.drivers.is_empty()) {
                (true, true) => "GPU and driver",
                (true, false) => "GPU",
                _ => "driver",
            },
            match (args.gpus.is_empty(), args.drivers.is_empty()) {
                (true, true) => "--gpu and --driver",
                (true, false) => "--gpu",
                _ => "--driver",
            },
        )?;
    }
    // Per GPU and run of drivers missing the same kernels: the programs
    // missing kernels, per library, and why (on the run's first driver).
    for run in runs(reports, |a, b| a.missing_key() == b.missing_key()) {
        let first = run[0];
        if first.missing.is_empty() {
            continue;
        }
        writeln!(
            out,
            "  {} on CUDA {}: {} of {} missing",
            first.device.arch(),
            drivers_text(&run),
            first.missing.len(),
            first.total
        )?;
        let mut by_why: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, usize>>> = BTreeMap::new();
        for missing in &first.missing {
            *by_why
                .entry(&missing.why)
                .or_default()
                .entry(&missing.library)
                .or_default()
                .entry(&missing.program)
                .or_default() += 1;
        }
        for (why, libraries) in by_why {
            for (library, programs) in libraries {
                let names: Vec<String> = programs
                    .iter()
                    .map(|(program, count)| {
                        let of = first.program_kernels(library, program);
                        if *count == of {
                            (*program).to_owned()
                        } else {
                            format!("{program} ({count} of {of} kernels)")
                        }
                    })
                    .collect();
                let mut line = names
                    .iter()
                    .take(NAMES_SHOWN)
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", ");
                if names.len() > NAMES_SHOWN {
                    line.push_str(&format!(" and {} more", names.len() - NAMES_SHOWN));
                }
                writeln!(out, "    {}: {}", escape(library), escape(&line))?;
            }
            let on = match run.len() {
                1 => String::new(),
                _ => format!(
                    " (on CUDA {})",
                    first
                        .device
                        .driver()
                        .map_or_else(String::new, cuda_version_text)
                ),
            };
            writeln!(out, "      why{on}: {}", escape(why))?;
        }
    }
    Ok(())
}
