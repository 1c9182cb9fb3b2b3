//! What a set of images serves, without the libraries that made them: every
//! kernel of every kernel library whose entries the images hold, and how a
//! device (an arch and a driver) would be served it, compiling nothing.
//!
//! An application embeds its libraries' images; an author ships one per
//! library. Neither says by itself which GPUs and drivers get every kernel: a
//! partial shipped image, or an application built with `KILN_CUDA_ARCHS` or
//! `KILN_CUDA_DRIVERS` too narrow, is otherwise found out by
//! [`ServeError::NotShipped`] in production. `kiln kernels`
//! answers from an application binary, image files or shipped images through
//! this module; [`KernelLibrary::kernels`](super::KernelLibrary::kernels) answers
//! the same for a library in hand.
//!
//! Each answer is decided by the walk [`KernelLibrary::get_kernel`] takes
//! (exact CUBIN, compatible CUBINs, the newest PTX that holds the kernel, each
//! only where the driver loads it; then the entry compiled for exactly the
//! device's arch elsewhere), over what the images show in place of the library's
//! requests:
//!
//! - **A library** is an image a precompile block wrote. An image `kiln bake`
//!   wrote ([`ImageInfo::baked`]) holds an application's run-time compiles: its
//!   entries serve lookups, as in the application, but define no kernels.
//! - **Its record** ([`BuildRecord`]) is rebuilt from its entries' owners
//!   (`nvrtc-<release>/<target>`): per NVRTC release, the targets whose entries
//!   hold a CUBIN and those that hold PTX. The record the library's build set
//!   (`KILN_CUDA_BUILD`) may also name targets its image lacks, and an oldest
//!   driver; neither changes what is served (a candidate in no image is passed
//!   over), only [`ImageSet::oldest_driver`], which is then the oldest driver
//!   the library's code loads on.
//! - **Its programs** are its entries grouped by name and key: a request's key
//!   holds everything but the owner's NVRTC release, target and options, so the
//!   entries of one specialization under one toolchain share it; across
//!   toolchains (whose header digests, and so keys, differ) a name joins them. A
//!   name with several keys under one toolchain is as many programs, each joined
//!   only where the key is the same.
//! - **Its kernels** are the entry points of its programs' CUBIN and PTX
//!   artifacts.
//! - **An entry** of a program for a candidate is looked for by key and owner
//!   label in every image, as the application's cache looks in every image it
//!   merged; of entries of the same owner the first image's is kept. Entries of
//!   one key under one label with different owner digests (the same compiler and
//!   target, other options) are told apart by nothing an image shows: a kernel is
//!   held only when each of them holds it.
//!
//! An image's owner labels are read as they are: a hostile image can misname its
//! own entries and mislead the report about itself (never what an application
//! serves, which looks entries up by owner digest). What no image holds of a
//! library (a specialization none of its entries is of) the images cannot show:
//! [`KernelLibrary::kernels`] can, from the library's specialization list.
//!
//! ```
//! use kiln_cuda::Device;
//! use kiln_cuda::library::images::{EntryInfo, ImageInfo, ImageSet};
//! use kiln_cuda::library::KernelOutcome;
//! use kiln_core::{ArtifactKind, Digest};
//!
//! // One program shipped as an sm_80 CUBIN with PTX, and an sm_90 CUBIN.
//! let key = Digest([7; 32]);
//! let entry = |target: &str, owner: u8| {
//!     EntryInfo::new(Digest([owner; 32]), format!("nvrtc-13.0.88/{target}"), key, "scale")
//!         .with_artifact(ArtifactKind::Cubin, ["scale_f32"])
//! };
//! let image = ImageInfo::new("app", "my-kernels")
//!     .with_entry(entry("sm_80", 1).with_artifact(ArtifactKind::Ptx, ["scale_f32"]))
//!     .with_entry(entry("sm_90", 2));
//! let set = ImageSet::new(vec![image]);
//! assert_eq!(set.libraries()[0].record().to_string(),
//!            "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_80,sm_90 ptx=sm_80");
//! // An sm_120 on a CUDA 13.0 driver gets the PTX; on a CUDA 12.8 driver, nothing.
//! let sm_120 = Device::new("sm_120".parse()?);
//! let served = set.serve(&sm_120.with_driver(13000));
//! assert_eq!(served[0].outcome.to_string(),
//!            "ptx sm_80 (NVRTC 13.0.88, drivers for CUDA 13.0+)");
//! let old = set.serve(&sm_120.with_driver(12080));
//! assert!(matches!(old[0].outcome, KernelOutcome::Missing { .. }));
//! # Ok::<(), kiln_cuda::Error>(())
//! ```
//!
//! [`KernelLibrary::get_kernel`]: super::KernelLibrary::get_kernel
//! [`KernelLibrary::kernels`]: super::KernelLibrary::kernels

use std::collections::{BTreeMap, BTreeSet, HashMap};

use kiln_core::{ArtifactKind, Digest};

use super::attempt::{Attempt, Attempts};
use super::listing::KernelOutcome;
use super::served::{ChosenArtifact, artifact_kind};
use super::walk::{Found, Shelf, Walked, compiled_elsewhere, walk};
use crate::request::COMPILER_ID;
use crate::select::{Candidate, Device, Selection, select};
use crate::toolchain::NvrtcVersion;
use crate::toolchain::{BuildRecord, ToolchainRecord};
use crate::{Arch, ServeError};

/// One entry as an image shows it: owner (digest and label), key, name, and
/// each artifact's kind and entry points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryInfo {
    owner: Digest,
    owner_label: String,
    key: Digest,
    name: String,
    artifacts: Vec<(ArtifactKind, Vec<String>)>,
}

impl EntryInfo {
    /// An entry of owner `owner` (labelled `owner_label`, as
    /// [`Owner::label`](kiln_core::Owner::label) writes it:
    /// `nvrtc-13.0.88/sm_90`), key `key` and name `name`, with no artifact yet.
    pub fn new(
        owner: Digest,
        owner_label: impl Into<String>,
        key: Digest,
        name: impl Into<String>,
    ) -> EntryInfo {
        EntryInfo {
            owner,
            owner_label: owner_label.into(),
            key,
            name: name.into(),
            artifacts: Vec::new(),
        }
    }

    /// The same entry with an artifact of `kind` listing `entry_points`.
    pub fn with_artifact<I>(mut self, kind: ArtifactKind, entry_points: I) -> EntryInfo
    where
        I: IntoIterator,
        I::Item: Into<String>,
    {
        self.artifacts
            .push((kind, entry_points.into_iter().map(Into::into).collect()));
        self
    }

    /// The NVRTC release and target its owner label names, if it is a kiln-cuda
    /// entry.
    fn nvrtc_target(&self) -> Option<(NvrtcVersion, Arch)> {
        let (owner, target) = self.owner_label.split_once('/')?;
        let release = owner.strip_prefix(COMPILER_ID)?.strip_prefix('-')?;
        Some((release.parse().ok()?, target.parse().ok()?))
    }

    /// Whether an artifact of `kind` lists `kernel`.
    fn holds(&self, kind: &ArtifactKind, kernel: &str) -> bool {
        self.artifacts
            .iter()
            .any(|(k, points)| k == kind && points.iter().any(|p| p == kernel))
    }
}

/// One image's entries, and where it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageInfo {
    source: String,
    name: String,
    baked: bool,
    record: Option<BuildRecord>,
    entries: Vec<EntryInfo>,
}

impl ImageInfo {
    /// An image found in `source` (a file, and where in it), named `name` (its
    /// precompile block's name: the image's `image` label), with no entry yet.
    pub fn new(source: impl Into<String>, name: impl Into<String>) -> ImageInfo {
        ImageInfo {
            source: source.into(),
            name: name.into(),
            baked: false,
            record: None,
            entries: Vec::new(),
        }
    }

    /// The same image, with the record its library's build set: used instead of
    /// one rebuilt from the entries. A shipped image's manifest holds it: its
    /// entries carry PTX for every target, of which an application embeds only
    /// the PTX targets' (what the record names).
    pub fn with_record(mut self, record: BuildRecord) -> ImageInfo {
        self.record = Some(record);
        self
    }

    /// The same image, marked as one `kiln bake` wrote (its `kiln.provenance`
    /// label): its entries serve, but it is no library.
    pub fn baked(mut self) -> ImageInfo {
        self.baked = true;
        self
    }

    /// The same image with `entry` too.
    pub fn with_entry(mut self, entry: EntryInfo) -> ImageInfo {
        self.entries.push(entry);
        self
    }

    /// Adds `entry`.
    pub fn push(&mut self, entry: EntryInfo) {
        self.entries.push(entry);
    }
}

/// One program of a library: its name, its key under each toolchain of the
/// library's record (by index), and its kernels.
#[derive(Clone, Debug)]
struct Program {
    /// As shown: the entries' name, with a key prefix when the name has several.
    name: String,
    /// The entries' name.
    entry_name: String,
    keys: Vec<Option<Digest>>,
    kernels: Vec<String>,
}

/// A kernel library as its image shows it (see the
/// [module documentation](self)).
#[derive(Clone, Debug)]
pub struct ImageLibrary {
    name: String,
    source: String,
    record: BuildRecord,
    entries: usize,
    programs: Vec<Program>,
}

impl ImageLibrary {
    /// The precompile block's name (the image's name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Where its image was found.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The record rebuilt from its entries: per NVRTC release, the CUBIN and
    /// PTX targets.
    pub fn record(&self) -> &BuildRecord {
        &self.record
    }

    /// How many kiln-cuda entries its image holds.
    pub fn entries(&self) -> usize {
        self.entries
    }

    /// How many programs.
    pub fn programs(&self) -> usize {
        self.programs.len()
    }

    /// How many kernels, over all its programs.
    pub fn kernels(&self) -> usize {
        self.programs.iter().map(|p| p.kernels.len()).sum()
    }
}

/// One kernel of an [`ImageLibrary`] for one device, and how it would be served.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct ImageKernel<'s> {
    /// The library.
    pub library: &'s ImageLibrary,
    /// The program: its entries' name.
    pub program: &'s str,
    /// The kernel: an entry point of the program's artifacts; `None` for a
    /// program whose artifacts list none (any entry of it serves).
    pub kernel: Option<&'s str>,
    /// How it would be served.
    pub outcome: KernelOutcome,
}

/// Every image given: their libraries, and every kiln-cuda entry by key and owner
/// label (see the [module documentation](self)).
#[derive(Clone, Debug)]
pub struct ImageSet {
    libraries: Vec<ImageLibrary>,
    entries: Vec<EntryInfo>,
    by_label: HashMap<(Digest, String), Vec<usize>>,
    other_entries: usize,
}

impl ImageSet {
    /// The libraries of `images` and the entries that serve them. Entries whose
    /// owner is not kiln-cuda's (another compiler, a driver-JIT result) are
    /// counted ([`ImageSet::other_entries`]) and left out.
    ///
    /// Cost: linear in the entries and their entry points.
    pub fn new(images: Vec<ImageInfo>) -> ImageSet {
        let mut set = ImageSet {
            libraries: Vec::new(),
            entries: Vec::new(),
            by_label: HashMap::new(),
            other_entries: 0,
        };
        for image in images {
            let first = set.entries.len();
            let mut parsed = Vec::new();
            for entry in image.entries {
                let Some(found) = entry.nvrtc_target() else {
                    set.other_entries += 1;
                    continue;
                };
                let ids = set
                    .by_label
                    .entry((entry.key, entry.owner_label.clone()))
                    .or_default();
                // The first image's entry of an owner serves, as in a cache.
                if !ids.iter().any(|&id| set.entries[id].owner == entry.owner) {
                    ids.push(set.entries.len());
                }
                parsed.push(found);
                set.entries.push(entry);
            }
            if !image.baked && !parsed.is_empty() {
                let library = library_of(
                    image.name,
                    image.source,
                    image.record,
                    &set.entries[first..],
                    &parsed,
                );
                set.libraries.push(library);
            }
        }
        set
    }

    /// The libraries found, in the order of their images.
    pub fn libraries(&self) -> &[ImageLibrary] {
        &self.libraries
    }

    /// How many entries were not kiln-cuda's.
    pub fn other_entries(&self) -> usize {
        self.other_entries
    }

    /// The oldest driver any library's code loads on (CUDA version,
    /// `cuDriverGetVersion` form); `None` without libraries.
    pub fn oldest_driver(&self) -> Option<i32> {
        self.libraries
            .iter()
            .map(|l| l.record.oldest_driver())
            .min()
    }

    /// Every kernel of every library for `device`, and how it would be served
    /// there (see the [module documentation](self)): libraries in order, then
    /// programs and kernels by name.
    pub fn serve(&self, device: &Device) -> Vec<ImageKernel<'_>> {
        let mut served = Vec::new();
        for library in &self.libraries {
            let candidates = select(device, &library.record);
            for program in &library.programs {
                let kernels: Vec<Option<&str>> = if program.kernels.is_empty() {
                    vec![None]
                } else {
                    program.kernels.iter().map(|k| Some(k.as_str())).collect()
                };
                for kernel in kernels {
                    let outcome = self.outcome(device, library, program, kernel, &candidates);
                    served.push(ImageKernel {
                        library,
                        program: &program.name,
                        kernel,
                        outcome,
                    });
                }
            }
        }
        served
    }

    fn outcome(
        &self,
        device: &Device,
        library: &ImageLibrary,
        program: &Program,
        kernel: Option<&str>,
        candidates: &crate::select::Candidates,
    ) -> KernelOutcome {
        let record = &library.record;
        let mut shelf = Shelved {
            set: self,
            record,
            program,
        };
        let mut tried = Vec::new();
        // The shelf's `find` never fails.
        let walked = walk(device, record, candidates, kernel, &mut shelf, &mut tried);
        match walked {
            Ok(Walked::Served(_, candidate)) => {
                return self.served(record, candidate.toolchain, candidate);
            }
            Ok(Walked::NoSuchKernel(_, candidate)) => {
                return KernelOutcome::NotForArch {
                    selection: candidate.selection,
                    target: candidate.target,
                };
            }
            Ok(Walked::NotServed) | Err(_) => {}
        }
        // As on a machine without NVRTC: the entry compiled for exactly the
        // device's arch by a recorded toolchain its driver loads.
        for index in compiled_elsewhere(device, record) {
            let toolchain = &record.toolchains()[index];
            let exact = Candidate {
                toolchain: index,
                target: device.arch(),
                selection: Selection::Compiled,
            };
            match shelf.lookup(&exact) {
                Some(ids) if shelf.all_hold(&ids, Selection::Compiled, kernel) => {
                    return self.served(record, index, exact);
                }
                Some(_) => {
                    return KernelOutcome::NotForArch {
                        selection: Selection::Compiled,
                        target: device.arch(),
                    };
                }
                None => tried.push(Attempt::NotCompiledElsewhere {
                    nvrtc: toolchain.nvrtc().clone(),
                }),
            }
        }
        KernelOutcome::Missing {
            tried: Attempts(tried),
        }
    }

    fn served(
        &self,
        record: &BuildRecord,
        toolchain: usize,
        candidate: Candidate,
    ) -> KernelOutcome {
        let nvrtc = record.toolchains()[toolchain].nvrtc();
        KernelOutcome::Served {
            selection: candidate.selection,
            artifact: ChosenArtifact::of(candidate.selection, candidate.target, nvrtc),
        }
    }
}

/// The entries of one program, as a walk finds them in the set.
struct Shelved<'s> {
    set: &'s ImageSet,
    record: &'s BuildRecord,
    program: &'s Program,
}

impl Shelved<'_> {
    /// The entries (of distinct owners) of the program for `candidate`'s
    /// toolchain and target.
    fn lookup(&self, candidate: &Candidate) -> Option<Vec<usize>> {
        let key = (*self.program.keys.get(candidate.toolchain)?)?;
        let nvrtc = self.record.toolchains().get(candidate.toolchain)?.nvrtc();
        let label = format!("{COMPILER_ID}-{}/{}", nvrtc.release, candidate.target);
        self.set.by_label.get(&(key, label)).cloned()
    }

    /// Whether each of the entries `ids` holds `kernel` (any kernel: `None`).
    fn all_hold(&self, ids: &[usize], selection: Selection, kernel: Option<&str>) -> bool {
        let Some(kernel) = kernel else {
            return true;
        };
        let kind = artifact_kind(selection);
        ids.iter()
            .all(|&id| self.set.entries[id].holds(&kind, kernel))
    }
}

impl Shelf for Shelved<'_> {
    type Entry = Vec<usize>;

    fn find(&mut self, candidate: &Candidate) -> Result<Found<Vec<usize>>, ServeError> {
        Ok(match self.lookup(candidate) {
            Some(ids) => Found::Entry(ids),
            None => Found::Absent,
        })
    }

    fn holds(&mut self, entry: &Vec<usize>, selection: Selection, kernel: &str) -> bool {
        self.all_hold(entry, selection, Some(kernel))
    }
}

/// The library of one image: `entries` (its kiln-cuda entries) with the NVRTC
/// release and target each names (`parsed`, in the same order), under
/// `recorded` (the record its build set) if known, else the one they show.
fn library_of(
    name: String,
    source: String,
    recorded: Option<BuildRecord>,
    entries: &[EntryInfo],
    parsed: &[(NvrtcVersion, Arch)],
) -> ImageLibrary {
    let record = recorded.unwrap_or_else(|| rebuilt_record(entries, parsed));
    library_under(name, source, record, entries, parsed)
}

/// The record `entries` show: per NVRTC release, the targets whose entries hold
/// a CUBIN and those that hold PTX.
fn rebuilt_record(entries: &[EntryInfo], parsed: &[(NvrtcVersion, Arch)]) -> BuildRecord {
    let mut toolchains: BTreeMap<&str, (NvrtcVersion, BTreeSet<Arch>, BTreeSet<Arch>)> =
        BTreeMap::new();
    for (entry, (nvrtc, target)) in entries.iter().zip(parsed) {
        let (_, cubins, ptx) = toolchains
            .entry(nvrtc.release.as_str())
            .or_insert_with(|| (nvrtc.clone(), BTreeSet::new(), BTreeSet::new()));
        for (kind, _) in &entry.artifacts {
            match kind {
                ArtifactKind::Cubin => {
                    cubins.insert(*target);
                }
                ArtifactKind::Ptx => {
                    ptx.insert(*target);
                }
                _ => {}
            }
        }
    }
    BuildRecord::from_toolchains(toolchains.into_values().map(|(nvrtc, c, p)| {
        ToolchainRecord::new(nvrtc)
            .with_cubin_targets(c)
            .with_ptx_targets(p)
    }))
}

/// The library of `entries` under `record`: its programs and their kernels.
fn library_under(
    name: String,
    source: String,
    record: BuildRecord,
    entries: &[EntryInfo],
    parsed: &[(NvrtcVersion, Arch)],
) -> ImageLibrary {
    let index_of = |nvrtc: &NvrtcVersion| {
        record
            .toolchains()
            .iter()
            .position(|t| t.nvrtc().release == nvrtc.release)
    };
    // Per name, the keys under each toolchain.
    let mut names: BTreeMap<&str, BTreeMap<usize, BTreeSet<Digest>>> = BTreeMap::new();
    for (entry, (nvrtc, _)) in entries.iter().zip(parsed) {
        if let Some(index) = index_of(nvrtc) {
            names
                .entry(entry.name.as_str())
                .or_default()
                .entry(index)
                .or_default()
                .insert(entry.key);
        }
    }
    let toolchain_count = record.toolchains().len();
    let mut programs = Vec::new();
    for (program, per_toolchain) in names {
        if per_toolchain.values().all(|keys| keys.len() == 1) {
            let mut keys = vec![None; toolchain_count];
            for (index, found) in &per_toolchain {
                keys[*index] = found.iter().next().copied();
            }
            programs.push(Program {
                name: program.to_owned(),
                entry_name: program.to_owned(),
                keys,
                kernels: Vec::new(),
            });
            continue;
        }
        let every: BTreeSet<Digest> = per_toolchain.values().flatten().copied().collect();
        for key in every {
            let keys = (0..toolchain_count)
                .map(|index| {
                    per_toolchain
                        .get(&index)
                        .filter(|found| found.contains(&key))
                        .map(|_| key)
                })
                .collect();
            programs.push(Program {
                name: format!("{program} (key {})", &key.to_hex()[..12]),
                entry_name: program.to_owned(),
                keys,
                kernels: Vec::new(),
            });
        }
    }
    // Each program's kernels: the entry points of its CUBIN and PTX artifacts.
    let mut kernels: Vec<BTreeSet<&str>> = vec![BTreeSet::new(); programs.len()];
    let mut by_key: HashMap<(usize, Digest), Vec<usize>> = HashMap::new();
    for (number, program) in programs.iter().enumerate() {
        for (index, key) in program.keys.iter().enumerate() {
            if let Some(key) = key {
                by_key.entry((index, *key)).or_default().push(number);
            }
        }
    }
    for (entry, (nvrtc, _)) in entries.iter().zip(parsed) {
        let Some(index) = index_of(nvrtc) else {
            continue;
        };
        for &number in by_key.get(&(index, entry.key)).into_iter().flatten() {
            if programs[number].entry_name != entry.name {
                continue;
            }
            for (kind, points) in &entry.artifacts {
                if matches!(kind, ArtifactKind::Cubin | ArtifactKind::Ptx) {
                    kernels[number].extend(points.iter().map(String::as_str));
                }
            }
        }
    }
    for (program, found) in programs.iter_mut().zip(kernels) {
        program.kernels = found.into_iter().map(str::to_owned).collect();
    }
    ImageLibrary {
        name,
        source,
        record,
        entries: entries.len(),
        programs,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THIRTEEN: &str = "13.0.88";
    const TWELVE: &str = "12.9.86";

    fn digest(n: u8) -> Digest {
        Digest([n; 32])
    }

    /// An entry of `name` and `key` by NVRTC `release` for `target`, owner `owner`,
    /// its CUBIN (and PTX when `ptx`) listing `kernels`.
    fn entry(
        release: &str,
        target: &str,
        owner: u8,
        key: u8,
        name: &str,
        kernels: &[&str],
        ptx: bool,
    ) -> EntryInfo {
        let entry = EntryInfo::new(
            digest(owner),
            format!("nvrtc-{release}/{target}"),
            digest(key),
            name,
        )
        .with_artifact(ArtifactKind::Cubin, kernels.iter().copied());
        if ptx {
            entry.with_artifact(ArtifactKind::Ptx, kernels.iter().copied())
        } else {
            entry
        }
    }

    fn device(arch: &str, driver: i32) -> Device {
        Device::new(arch.parse().unwrap()).with_driver(driver)
    }

    /// `(kernel, outcome)` of every kernel for `device`.
    fn outcomes(set: &ImageSet, device: &Device) -> Vec<(String, String)> {
        set.serve(device)
            .into_iter()
            .map(|k| (k.kernel.unwrap_or("").to_owned(), k.outcome.to_string()))
            .collect()
    }

    #[test]
    fn two_toolchains_with_different_keys_are_one_program_joined_by_name() {
        // CUDA 13 and CUDA 12 builds of one program: other header digests, so
        // other keys.
        let image = ImageInfo::new("a", "lib")
            .with_entry(entry(THIRTEEN, "sm_90", 1, 10, "p", &["k"], false))
            .with_entry(entry(TWELVE, "sm_90", 2, 20, "p", &["k"], false))
            .with_entry(entry(TWELVE, "sm_50", 3, 20, "p", &["k"], true));
        let set = ImageSet::new(vec![image]);
        let library = &set.libraries()[0];
        assert_eq!(library.programs(), 1);
        assert_eq!(
            library.record().to_string(),
            "kiln-cuda-build/2 nvrtc=13.0.88 cubin=sm_90 nvrtc=12.9.86 cubin=sm_50,sm_90 ptx=sm_50"
        );
        let on = |gpu, driver| outcomes(&set, &device(gpu, driver))[0].1.clone();
        assert_eq!(
            on("sm_90", 13000),
            "exact-cubin sm_90 (NVRTC 13.0.88, drivers for CUDA 13.0+)"
        );
        assert_eq!(
            on("sm_90", 12080),
            "exact-cubin sm_90 (NVRTC 12.9.86, drivers for CUDA 12.0+)"
        );
        assert_eq!(
            on("sm_86", 12090),
            "ptx sm_50 (NVRTC 12.9.86, drivers for CUDA 12.9+)"
        );
        let missing = on("sm_86", 12080);
        assert!(
            missing.starts_with("missing: ") && missing.contains("cannot JIT it"),
            "{missing}"
        );
        assert_eq!(set.oldest_driver(), Some(12000));
    }

    #[test]
    fn a_baked_image_serves_the_exact_arch_but_is_no_library() {
        let library = ImageInfo::new("a", "lib").with_entry(entry(
            THIRTEEN,
            "sm_80",
            1,
            10,
            "p",
            &["k"],
            false,
        ));
        // What an application compiled for sm_89 with the build's NVRTC, baked.
        let baked = ImageInfo::new("b", "baked").baked().with_entry(entry(
            THIRTEEN,
            "sm_89",
            2,
            10,
            "p",
            &["k"],
            false,
        ));
        let set = ImageSet::new(vec![library.clone(), baked]);
        assert_eq!(set.libraries().len(), 1);
        // The sm_80 CUBIN runs on sm_89 and comes first; the baked sm_89 build
        // runs nowhere else, so an sm_90 gets nothing.
        assert_eq!(
            outcomes(&set, &device("sm_89", 13000))[0].1,
            "compatible-cubin sm_80 (NVRTC 13.0.88, drivers for CUDA 13.0+)"
        );
        let sm_90 = &outcomes(&set, &device("sm_90", 13000))[0].1;
        assert!(
            sm_90.contains("compiled by 13.0.88: not in the cache's tiers"),
            "{sm_90}"
        );
        // Without the sm_80 CUBIN's kernel the baked build serves, as compiled.
        let lacking = ImageInfo::new("a", "lib")
            .with_entry(entry(THIRTEEN, "sm_80", 1, 10, "p", &["k", "other"], false))
            .with_entry(entry(THIRTEEN, "sm_75", 3, 10, "p", &["k"], false));
        let baked = ImageInfo::new("b", "baked").baked().with_entry(entry(
            THIRTEEN,
            "sm_78",
            2,
            10,
            "p",
            &["k", "other"],
            false,
        ));
        let set = ImageSet::new(vec![lacking, baked]);
        let on_78 = outcomes(&set, &device("sm_78", 13000));
        assert_eq!(
            on_78,
            [
                (
                    "k".to_owned(),
                    "compatible-cubin sm_75 (NVRTC 13.0.88, drivers for CUDA 13.0+)".to_owned()
                ),
                (
                    "other".to_owned(),
                    "compiled sm_78 (NVRTC 13.0.88, drivers for CUDA 13.0+)".to_owned()
                ),
            ]
        );
        // A library alone, without the baked image: `other` is missing on sm_78.
        let alone = ImageSet::new(vec![library]);
        assert!(
            outcomes(&alone, &device("sm_89", 12080))[0]
                .1
                .starts_with("missing")
        );
    }

    #[test]
    fn other_compilers_and_unreadable_labels_are_counted_and_left_out() {
        let mut image = ImageInfo::new("a", "lib");
        image.push(entry(THIRTEEN, "sm_90", 1, 10, "p", &["k"], false));
        image.push(
            EntryInfo::new(digest(2), "regex-dfa-0.4.1/x86_64", digest(11), "dfa")
                .with_artifact(ArtifactKind::Bytes, ["x"]),
        );
        image.push(entry("13.0", "sm_90", 3, 12, "bad release", &["k"], false));
        image.push(entry(THIRTEEN, "sm_9x", 4, 13, "bad target", &["k"], false));
        image.push(EntryInfo::new(
            digest(5),
            "nvrtc-13.0.88",
            digest(14),
            "no target",
        ));
        let set = ImageSet::new(vec![image, ImageInfo::new("empty", "nothing")]);
        assert_eq!(set.other_entries(), 4);
        assert_eq!(set.libraries().len(), 1);
        assert_eq!(set.libraries()[0].entries(), 1);
        assert_eq!(set.libraries()[0].kernels(), 1);
    }

    #[test]
    fn one_name_with_two_keys_is_two_programs() {
        let image = ImageInfo::new("a", "lib")
            .with_entry(entry(THIRTEEN, "sm_90", 1, 10, "p", &["a"], false))
            .with_entry(entry(THIRTEEN, "sm_90", 1, 11, "p", &["b"], false));
        let set = ImageSet::new(vec![image]);
        let served = set.serve(&device("sm_90", 13000));
        let programs: Vec<(&str, Option<&str>)> =
            served.iter().map(|k| (k.program, k.kernel)).collect();
        let first = format!("p (key {})", &digest(10).to_hex()[..12]);
        let second = format!("p (key {})", &digest(11).to_hex()[..12]);
        assert_eq!(
            programs,
            [(first.as_str(), Some("a")), (second.as_str(), Some("b"))]
        );
        assert!(served.iter().all(|k| !k.outcome.is_missing()));
    }

    #[test]
    fn entries_told_apart_only_by_options_must_each_hold_the_kernel() {
        // Two option sets of one key for sm_90; only one has `k2`.
        let image = ImageInfo::new("a", "lib")
            .with_entry(entry(THIRTEEN, "sm_90", 1, 10, "p", &["k1", "k2"], false))
            .with_entry(entry(THIRTEEN, "sm_90", 2, 10, "p", &["k1"], false));
        let set = ImageSet::new(vec![image]);
        let served = outcomes(&set, &device("sm_90", 13000));
        assert!(served[0].1.starts_with("exact-cubin"), "{served:?}");
        assert!(
            served[1].1.starts_with("not built for this arch"),
            "{served:?}"
        );
    }

    #[test]
    fn a_shipped_image_is_read_under_the_record_its_build_set() {
        // A shipped image: every target's entry carries PTX, and only the
        // lowest has the kernel `k2`; its record names sm_75 alone for PTX.
        let image = || {
            ImageInfo::new("a.kship", "lib")
                .with_entry(entry(THIRTEEN, "sm_75", 1, 10, "p", &["k1", "k2"], true))
                .with_entry(entry(THIRTEEN, "sm_90", 2, 10, "p", &["k1"], true))
        };
        let record: BuildRecord = "kiln-cuda-build/1 nvrtc=13.0.88 cubin=sm_75,sm_90 ptx=sm_75"
            .parse()
            .unwrap();
        let recorded = ImageSet::new(vec![image().with_record(record.clone())]);
        assert_eq!(recorded.libraries()[0].record(), &record);
        let newer = device("sm_120", 13000);
        // As the application embeds it: the sm_75 PTX, which has both kernels.
        assert_eq!(
            outcomes(&recorded, &newer),
            [
                (
                    "k1".to_owned(),
                    "ptx sm_75 (NVRTC 13.0.88, drivers for CUDA 13.0+)".to_owned()
                ),
                (
                    "k2".to_owned(),
                    "ptx sm_75 (NVRTC 13.0.88, drivers for CUDA 13.0+)".to_owned()
                ),
            ]
        );
        // Rebuilt from the entries, the sm_90 PTX would come first.
        let rebuilt = ImageSet::new(vec![image()]);
        assert!(
            rebuilt.libraries()[0]
                .record()
                .to_string()
                .contains("ptx=sm_75,sm_90"),
        );
        assert_eq!(
            outcomes(&rebuilt, &newer)[0].1,
            "ptx sm_90 (NVRTC 13.0.88, drivers for CUDA 13.0+)"
        );
    }

    #[test]
    fn the_first_image_of_an_owner_serves() {
        let with = ImageInfo::new("a", "lib").with_entry(entry(
            THIRTEEN,
            "sm_90",
            1,
            10,
            "p",
            &["k"],
            false,
        ));
        // The same owner and key in a second image, holding less: not looked at.
        let again = ImageInfo::new("b", "lib-again").with_entry(entry(
            THIRTEEN,
            "sm_90",
            1,
            10,
            "p",
            &[],
            false,
        ));
        let set = ImageSet::new(vec![with, again]);
        assert_eq!(set.libraries().len(), 2);
        let served = set.serve(&device("sm_90", 13000));
        assert_eq!(served.len(), 2, "one kernel, and a program that lists none");
        assert!(
            served.iter().all(|k| k.outcome.served().is_some()),
            "{served:?}"
        );
        assert_eq!(served[1].kernel, None);
    }
}
