//! Finding NVRTC, the CCCL (CUB) headers and the CUDA runtime headers on this
//! machine: any release ([`SearchConfig::from_env`]), or those of one CUDA major
//! version ([`SearchConfig::for_cuda`]), so that a build can compile with NVRTC 12
//! and NVRTC 13 side by side.
//!
//! Search order for `libnvrtc`:
//! 1. `KILN_NVRTC`: an explicit library file. When set, nothing else is tried, so a
//!    wrong value is an error rather than a silent fallback. `KILN_NVRTC_12`,
//!    `KILN_NVRTC_13`... name the NVRTC of one CUDA major; `KILN_NVRTC` then serves
//!    only its own major (a search for another major passes over it).
//! 2. The CUDA toolkit: `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`, in their `lib64/`,
//!    `lib/` and `targets/x86_64-linux/lib/` folders.
//! 3. The loader path: each `LD_LIBRARY_PATH` folder, then what the OS loader finds by
//!    name (`libnvrtc.so.13`, `libnvrtc.so`), which includes the `ld.so` cache.
//! 4. The `nvidia-cuda-nvrtc` wheel in any Python site-packages
//!    (`nvidia/cu13/lib/` for CUDA 13, `nvidia/cuda_nvrtc/lib/` for CUDA 12).
//!
//! Every candidate is probed with `libloading` (it must load and export
//! `nvrtcVersion`, and, for a search of one CUDA major, report that major) before
//! it is accepted. When nothing qualifies the error lists every place tried. The
//! header trees are found the same way, those of one CUDA major from the places of
//! that major only (a toolkit whose NVRTC is of that major, the major's wheels):
//!
//! - CCCL ([`locate_cccl`], the folder holding `cub/cub.cuh`): `KILN_CCCL_INCLUDE`,
//!   the toolkit's `include/cccl/` or `include/`, the `nvidia-cuda-cccl` wheel
//!   (`nvidia/cu13/include/cccl/` for CUDA 13, `nvidia-cuda-cccl-cu12`'s
//!   `nvidia/cuda_cccl/include/` for CUDA 12);
//! - the CUDA runtime headers ([`locate_cuda_runtime`], the folder holding
//!   `cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`): `KILN_CUDA_RUNTIME_INCLUDE`, the
//!   toolkit's `include/`, the `nvidia-cuda-runtime` wheel (`nvidia/cu13/include/`
//!   for CUDA 13, `nvidia-cuda-runtime-cu12`'s `nvidia/cuda_runtime/include/` for
//!   CUDA 12).
//!
//! `KILN_CCCL_INCLUDE` and `KILN_CUDA_RUNTIME_INCLUDE` name the headers of the main
//! toolchain (the one `KILN_NVRTC` names, else the newest CUDA major a build uses);
//! `KILN_CCCL_INCLUDE_12`, `KILN_CUDA_RUNTIME_INCLUDE_12`... those of one major.
//!
//! Site-packages folders come from globbing the usual places (the active virtualenv,
//! `~/.local`, `/usr/lib`, `/usr/local/lib`, pyenv versions) and, only when none of
//! those holds a candidate, from asking `python3` itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::error::{SearchLog, Searched, ToolchainError};

/// The CUDA major versions Kiln knows the file names and wheels of, newest first.
const KNOWN_MAJORS: [u32; 2] = [13, 12];
/// Folders below a toolkit root that hold its libraries.
const TOOLKIT_LIB_DIRS: [&str; 3] = ["lib64", "lib", "targets/x86_64-linux/lib"];

/// File names of NVRTC in a library folder, preferred first: those of `major`
/// (and the unversioned name, whose major the probe reads), or of every known
/// major.
fn nvrtc_file_names(major: Option<u32>) -> Vec<String> {
    let mut names: Vec<String> = match major {
        Some(major) => vec![format!("libnvrtc.so.{major}")],
        None => KNOWN_MAJORS
            .iter()
            .map(|m| format!("libnvrtc.so.{m}"))
            .collect(),
    };
    names.push("libnvrtc.so".to_owned());
    names
}

/// Wheel layouts below a site-packages folder: CUDA 13's `nvidia-cuda-nvrtc`
/// (`nvidia/cu13/lib`), CUDA 12's `nvidia-cuda-nvrtc-cu12`
/// (`nvidia/cuda_nvrtc/lib`).
fn nvrtc_wheel_dirs(major: Option<u32>) -> Vec<String> {
    wheel_dirs(major, |m| match m {
        12 => "nvidia/cuda_nvrtc/lib".to_owned(),
        m => format!("nvidia/cu{m}/lib"),
    })
}

/// CCCL header roots below a site-packages folder.
fn cccl_wheel_dirs(major: Option<u32>) -> Vec<String> {
    wheel_dirs(major, |m| match m {
        12 => "nvidia/cuda_cccl/include".to_owned(),
        m => format!("nvidia/cu{m}/include/cccl"),
    })
}

/// CUDA runtime header roots below a site-packages folder.
fn runtime_wheel_dirs(major: Option<u32>) -> Vec<String> {
    wheel_dirs(major, |m| match m {
        12 => "nvidia/cuda_runtime/include".to_owned(),
        m => format!("nvidia/cu{m}/include"),
    })
}

fn wheel_dirs(major: Option<u32>, of: impl Fn(u32) -> String) -> Vec<String> {
    match major {
        Some(major) => vec![of(major)],
        None => KNOWN_MAJORS.iter().map(|m| of(*m)).collect(),
    }
}

/// The variable naming the NVRTC library file (`KILN_NVRTC_<major>`: of one CUDA
/// major).
pub const NVRTC: &str = "KILN_NVRTC";

/// The variable naming the CCCL include folder (the one holding `cub/`).
pub const CCCL_INCLUDE: &str = "KILN_CCCL_INCLUDE";

/// The variable naming the CUDA runtime include folder (the one holding
/// `cuda_fp16.h`).
pub const CUDA_RUNTIME_INCLUDE: &str = "KILN_CUDA_RUNTIME_INCLUDE";

/// `variable` for CUDA major `major`: `KILN_NVRTC_12`.
pub fn per_major(variable: &str, major: u32) -> String {
    format!("{variable}_{major}")
}

/// Where to look: the environment, captured once, or anything a caller sets.
///
/// [`SearchConfig::from_env`] reads the process's one reading of the environment
/// ([`Settings::process`](kiln_core::settings::Settings::process)); tests and tools
/// build one by hand instead of mutating the global environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// The CUDA major version NVRTC and the headers must be of (`Some(12)`: NVRTC
    /// 12.x, the CUDA 12 wheels and toolkits); `None`: any, the newest first.
    pub cuda_major: Option<u32>,
    /// An explicit NVRTC library file (`KILN_NVRTC`, or `KILN_NVRTC_<major>`). When
    /// set, it is the only candidate.
    pub nvrtc_file: Option<PathBuf>,
    /// An NVRTC library file that is the only candidate when it is of
    /// [`SearchConfig::cuda_major`], and is passed over otherwise (`KILN_NVRTC` in a
    /// search for one major when `KILN_NVRTC_<major>` is unset).
    pub nvrtc_file_if_of_major: Option<PathBuf>,
    /// An explicit CCCL include folder (`KILN_CCCL_INCLUDE`), the folder holding `cub/`.
    pub cccl_include: Option<PathBuf>,
    /// An explicit CUDA runtime include folder (`KILN_CUDA_RUNTIME_INCLUDE`), the
    /// folder holding `cuda_fp16.h`.
    pub cuda_runtime_include: Option<PathBuf>,
    /// CUDA toolkit roots, each with the rule that named it (`CUDA_HOME`...).
    pub toolkit_roots: Vec<(String, PathBuf)>,
    /// Folders of the loader path (`LD_LIBRARY_PATH`).
    pub loader_dirs: Vec<PathBuf>,
    /// Whether to ask the OS loader for NVRTC by name.
    pub ask_loader: bool,
    /// Python site-packages folders to look into for the wheels.
    pub site_packages: Vec<PathBuf>,
    /// Whether to run `python3` to list site-packages when the folders above hold no
    /// candidate.
    pub ask_python: bool,
}

impl SearchConfig {
    /// A configuration with nothing to search.
    pub fn empty() -> Self {
        Self::default()
    }

    /// Only this library file.
    pub fn nvrtc_file(path: impl Into<PathBuf>) -> Self {
        Self {
            nvrtc_file: Some(path.into()),
            ..Self::default()
        }
    }

    /// The places named by the process environment (see the module documentation),
    /// as the process's settings read it once, for an NVRTC and headers of any
    /// release.
    pub fn from_env() -> Self {
        Self::from_lookup(&kiln_core::settings::Settings::process().vars().lookup())
    }

    /// The places named by the process environment for CUDA major `major`: the
    /// variables `KILN_NVRTC_<major>`, `KILN_CCCL_INCLUDE_<major>` and
    /// `KILN_CUDA_RUNTIME_INCLUDE_<major>`; with `main` (the build's main
    /// toolchain) also the unsuffixed header variables; `KILN_NVRTC` when it is of
    /// that major.
    pub fn for_cuda(major: u32, main: bool) -> Self {
        let lookup = kiln_core::settings::Settings::process().vars().lookup();
        Self::from_lookup(&lookup).of_cuda(major, main, &lookup)
    }

    /// This configuration narrowed to CUDA major `major` (see
    /// [`SearchConfig::for_cuda`]), the variables read through `lookup`.
    pub fn of_cuda(
        mut self,
        major: u32,
        main: bool,
        lookup: &dyn Fn(&str) -> Option<OsString>,
    ) -> Self {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        self.cuda_major = Some(major);
        let unsuffixed = self.nvrtc_file.take();
        match var(&per_major(NVRTC, major)) {
            Some(file) => self.nvrtc_file = Some(file),
            None => self.nvrtc_file_if_of_major = unsuffixed,
        }
        let main_or_none = |dir: Option<PathBuf>| dir.filter(|_| main);
        self.cccl_include =
            var(&per_major(CCCL_INCLUDE, major)).or_else(|| main_or_none(self.cccl_include.take()));
        self.cuda_runtime_include = var(&per_major(CUDA_RUNTIME_INCLUDE, major))
            .or_else(|| main_or_none(self.cuda_runtime_include.take()));
        self
    }

    /// The configuration `lookup` names (the process environment's, or a build
    /// script's view of it).
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<OsString>) -> Self {
        let var = |name: &str| lookup(name).filter(|v| !v.is_empty());
        let mut toolkit_roots = Vec::new();
        for name in ["CUDA_HOME", "CUDA_PATH"] {
            if let Some(root) = var(name) {
                toolkit_roots.push((name.to_owned(), PathBuf::from(root)));
            }
        }
        toolkit_roots.push((
            "default toolkit".to_owned(),
            PathBuf::from("/usr/local/cuda"),
        ));
        let loader_dirs = var("LD_LIBRARY_PATH")
            .map(|v| {
                std::env::split_paths(&v)
                    .filter(|p| !p.as_os_str().is_empty())
                    .collect()
            })
            .unwrap_or_default();
        Self {
            cuda_major: None,
            nvrtc_file: var(NVRTC).map(PathBuf::from),
            nvrtc_file_if_of_major: None,
            cccl_include: var(CCCL_INCLUDE).map(PathBuf::from),
            cuda_runtime_include: var(CUDA_RUNTIME_INCLUDE).map(PathBuf::from),
            toolkit_roots,
            loader_dirs,
            ask_loader: true,
            site_packages: glob_site_packages(var("VIRTUAL_ENV"), var("HOME")),
            ask_python: true,
        }
    }
}

impl SearchConfig {
    /// Where an NVRTC or header set this search does not find would appear: for a
    /// build script to watch (`cargo::rerun-if-changed`), so that installing the
    /// toolchain later reruns it. Only folders that exist, each the deepest one
    /// on the way to a place searched (`site-packages/nvidia` once any NVIDIA wheel
    /// is there, else `site-packages`; a toolkit's library folders), and the OS
    /// loader's cache: cargo walks a watched folder on every build, and a missing
    /// path would rerun every build. A toolkit installed where no folder of it
    /// exists yet is not seen: its variable (`CUDA_HOME`) is the way in.
    pub fn watched_places(&self) -> Vec<PathBuf> {
        let mut places = Vec::new();
        if self.ask_loader && Path::new(LOADER_CACHE).is_file() {
            places.push(PathBuf::from(LOADER_CACHE));
        }
        for (_, root) in &self.toolkit_roots {
            let libs: Vec<PathBuf> = TOOLKIT_LIB_DIRS
                .iter()
                .map(|sub| root.join(sub))
                .filter(|dir| dir.is_dir())
                .collect();
            if !libs.is_empty() {
                places.extend(libs);
            } else if root.is_dir() {
                places.push(root.clone());
            }
        }
        let major = self.cuda_major;
        let subs: Vec<String> = [nvrtc_wheel_dirs, cccl_wheel_dirs, runtime_wheel_dirs]
            .into_iter()
            .flat_map(|dirs| dirs(major))
            .collect();
        for site in &self.site_packages {
            for sub in &subs {
                let mut deepest = site.clone();
                for part in Path::new(sub).components() {
                    let next = deepest.join(part);
                    if !next.is_dir() {
                        break;
                    }
                    deepest = next;
                }
                if deepest.is_dir() {
                    places.push(deepest);
                }
            }
        }
        places.sort();
        places.dedup();
        places
    }
}

/// The OS loader's cache of library names.
const LOADER_CACHE: &str = "/etc/ld.so.cache";

/// How a library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The library file, or the bare name the OS loader resolved.
    pub path: PathBuf,
    /// The rule that found it (`KILN_NVRTC`, `CUDA_HOME`, `python wheel`...).
    pub rule: String,
    /// The CUDA major version it reports (`nvrtcVersion`), when the probe read it.
    pub major: Option<u32>,
}

/// Finds a loadable NVRTC library, probing every candidate with `libloading`;
/// with [`SearchConfig::cuda_major`], only one of that major.
///
/// # Errors
/// [`ToolchainError::NvrtcNotFound`], listing every place tried.
pub fn locate_nvrtc(config: &SearchConfig) -> Result<Located, ToolchainError> {
    let mut log = Vec::new();
    let not_found = |log| ToolchainError::NvrtcNotFound {
        searched: SearchLog(log),
    };
    let major = config.cuda_major;
    if let Some(file) = &config.nvrtc_file {
        let rule = match major {
            Some(major) if Some(file) != config.nvrtc_file_if_of_major.as_ref() => {
                per_major(NVRTC, major)
            }
            _ => NVRTC.to_owned(),
        };
        return probe_file(&rule, file, major, &mut log).ok_or_else(|| not_found(log));
    }
    if let Some(file) = &config.nvrtc_file_if_of_major {
        // Taken when of the major searched for, passed over (a note, the search
        // goes on) when it is another NVRTC; a value that names no loadable
        // NVRTC at all is an error for every search, never a silent fallback.
        let Some(found) = probe_file(NVRTC, file, None, &mut log) else {
            return Err(not_found(log));
        };
        if major.is_none_or(|wanted| found.major == Some(wanted)) {
            return Ok(found);
        }
        log.push(Searched {
            rule: NVRTC.to_owned(),
            candidate: file.clone(),
            outcome: format!(
                "is NVRTC {}, not of CUDA {}",
                found
                    .major
                    .map_or_else(|| "of an unknown release".to_owned(), |m| format!("{m}.x")),
                major.unwrap_or_default()
            ),
        });
    }
    let names = nvrtc_file_names(major);
    for (rule, root) in &config.toolkit_roots {
        for sub in TOOLKIT_LIB_DIRS {
            if let Some(found) = probe_dir(rule, &root.join(sub), &names, major, &mut log) {
                return Ok(found);
            }
        }
    }
    for dir in &config.loader_dirs {
        if let Some(found) = probe_dir("LD_LIBRARY_PATH", dir, &names, major, &mut log) {
            return Ok(found);
        }
    }
    if config.ask_loader {
        for name in &names {
            if let Some(found) = probe_library("OS loader", Path::new(name), major, &mut log) {
                return Ok(found);
            }
        }
    }
    let wheels = nvrtc_wheel_dirs(major);
    let found = search_sites(config, &mut log, |site, log| {
        wheels
            .iter()
            .find_map(|sub| probe_dir("python wheel", &site.join(sub), &names, major, log))
    });
    found.ok_or_else(|| not_found(log))
}

/// The library [`locate_nvrtc`] would most likely accept, found without loading
/// anything: the first candidate *file* in its search order, or `None` when the
/// answer cannot be had from the file system alone.
///
/// `locate_nvrtc` also loads each candidate; this stops at the first file that
/// exists. The two differ only when that file exists but does not load, and a memo of
/// a file is only ever written after it loaded (see
/// [`NvrtcIdentity`](super::NvrtcIdentity)). `None` comes back when the OS loader
/// might resolve NVRTC by name before the wheels are searched (the `ld.so` cache or a
/// trusted folder names it), when `python3` would have to be asked, and when nothing
/// is found: the caller then runs the full search.
pub(crate) fn locate_nvrtc_file(config: &SearchConfig) -> Option<Located> {
    let major = config.cuda_major;
    let file = |rule: &str, path: PathBuf| {
        path.is_file().then(|| Located {
            major: file_name_major(&path),
            path,
            rule: rule.to_owned(),
        })
    };
    let names = nvrtc_file_names(major);
    let in_dir = |rule: &str, dir: &Path| {
        if !dir.is_dir() {
            return None;
        }
        names.iter().find_map(|name| file(rule, dir.join(name)))
    };
    if let Some(explicit) = &config.nvrtc_file {
        return file(NVRTC, explicit.clone());
    }
    if let Some(maybe) = &config.nvrtc_file_if_of_major {
        // A file whose name says its major is taken or passed over by it; any
        // other is for the caller to check (the memo says its major).
        match (file_name_major(maybe), major) {
            (Some(named), Some(wanted)) if named != wanted => {}
            _ => return file(NVRTC, maybe.clone()),
        }
    }
    for (rule, root) in &config.toolkit_roots {
        for sub in TOOLKIT_LIB_DIRS {
            if let Some(found) = in_dir(rule, &root.join(sub)) {
                return Some(found);
            }
        }
    }
    for dir in &config.loader_dirs {
        if let Some(found) = in_dir("LD_LIBRARY_PATH", dir) {
            return Some(found);
        }
    }
    if config.ask_loader && loader_may_know_nvrtc() {
        return None;
    }
    let wheels = nvrtc_wheel_dirs(major);
    config.site_packages.iter().find_map(|site| {
        wheels
            .iter()
            .find_map(|sub| in_dir("python wheel", &site.join(sub)))
    })
}

/// The CUDA major a library's file name states (`libnvrtc.so.12` → 12).
fn file_name_major(path: &Path) -> Option<u32> {
    let name = path.file_name()?.to_str()?;
    let rest = name.strip_prefix("libnvrtc.so.")?;
    rest.split('.').next()?.parse().ok()
}

/// Folders the glibc loader searches after `LD_LIBRARY_PATH` and its cache.
const TRUSTED_LIBRARY_DIRS: &[&str] = &[
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
    "/lib64",
    "/usr/lib64",
    "/lib",
    "/usr/lib",
];

/// Whether the OS loader might resolve NVRTC by name: its cache (`/etc/ld.so.cache`)
/// mentions `libnvrtc`, or a trusted folder holds one of the names. A `RUNPATH` of
/// the executable is not looked at (see [`locate_nvrtc_file`]'s callers for what
/// guards that case).
fn loader_may_know_nvrtc() -> bool {
    let cached = std::fs::read(LOADER_CACHE)
        .map(|bytes| bytes.windows(8).any(|w| w == b"libnvrtc"))
        .unwrap_or(false);
    cached
        || TRUSTED_LIBRARY_DIRS.iter().any(|dir| {
            nvrtc_file_names(None)
                .iter()
                .any(|name| Path::new(dir).join(name).exists())
        })
}

/// Finds the CCCL include folder: the one holding `cub/cub.cuh`.
///
/// # Errors
/// [`ToolchainError::CcclNotFound`], listing every place tried.
pub fn locate_cccl(config: &SearchConfig) -> Result<PathBuf, ToolchainError> {
    HeaderTree::CCCL
        .locate(config)
        .map_err(|searched| ToolchainError::CcclNotFound { searched })
}

/// Finds the CUDA runtime include folder: the one holding `cuda_fp16.h`
/// (with `cuda_bf16.h`, `cuda_fp8.h` beside it).
///
/// # Errors
/// [`ToolchainError::CudaRuntimeNotFound`], listing every place tried.
pub fn locate_cuda_runtime(config: &SearchConfig) -> Result<PathBuf, ToolchainError> {
    HeaderTree::CUDA_RUNTIME
        .locate(config)
        .map_err(|searched| ToolchainError::CudaRuntimeNotFound { searched })
}

/// Where one header tree is looked for, and the file that marks it.
struct HeaderTree {
    /// The variable that names it explicitly.
    variable: &'static str,
    explicit: fn(&SearchConfig) -> Option<&PathBuf>,
    /// A file the folder must hold.
    marker: &'static str,
    /// Folders below a toolkit root, in order.
    toolkit_dirs: &'static [&'static str],
    /// Folders below a site-packages folder, in order, for a CUDA major (or any).
    wheel_dirs: fn(Option<u32>) -> Vec<String>,
}

impl HeaderTree {
    const CCCL: HeaderTree = HeaderTree {
        variable: CCCL_INCLUDE,
        explicit: |config| config.cccl_include.as_ref(),
        marker: "cub/cub.cuh",
        toolkit_dirs: &["include/cccl", "include"],
        wheel_dirs: cccl_wheel_dirs,
    };

    const CUDA_RUNTIME: HeaderTree = HeaderTree {
        variable: CUDA_RUNTIME_INCLUDE,
        explicit: |config| config.cuda_runtime_include.as_ref(),
        marker: "cuda_fp16.h",
        toolkit_dirs: &["include", "targets/x86_64-linux/include"],
        wheel_dirs: runtime_wheel_dirs,
    };

    /// The first folder holding the marker: the explicit one alone when set,
    /// else the toolkits', else the wheels'; or every place tried.
    fn locate(&self, config: &SearchConfig) -> Result<PathBuf, SearchLog> {
        let mut log = Vec::new();
        let check = |rule: &str, dir: PathBuf, log: &mut Vec<Searched>| {
            if dir.join(self.marker).is_file() {
                Some(dir)
            } else {
                log.push(Searched {
                    rule: rule.to_owned(),
                    candidate: dir,
                    outcome: format!("no {}", self.marker),
                });
                None
            }
        };
        if let Some(dir) = (self.explicit)(config) {
            return check(self.variable, dir.clone(), &mut log).ok_or(SearchLog(log));
        }
        for (rule, root) in &config.toolkit_roots {
            if !toolkit_is_of(root, config.cuda_major) {
                continue;
            }
            for sub in self.toolkit_dirs {
                if let Some(dir) = check(rule, root.join(sub), &mut log) {
                    return Ok(dir);
                }
            }
        }
        let wheels = (self.wheel_dirs)(config.cuda_major);
        let found = search_sites(config, &mut log, |site, log| {
            wheels
                .iter()
                .find_map(|sub| check("python wheel", site.join(sub), log))
        });
        found.ok_or(SearchLog(log))
    }
}

/// Tries `probe` on each configured site-packages folder, then, only when none
/// qualifies, on the folders `python3` reports that were not already tried.
fn search_sites<T>(
    config: &SearchConfig,
    log: &mut Vec<Searched>,
    mut probe: impl FnMut(&Path, &mut Vec<Searched>) -> Option<T>,
) -> Option<T> {
    if let Some(found) = config
        .site_packages
        .iter()
        .find_map(|site| probe(site, log))
    {
        return Some(found);
    }
    if !config.ask_python {
        return None;
    }
    python_site_packages(log)
        .into_iter()
        .filter(|site| !config.site_packages.contains(site))
        .find_map(|site| probe(&site, log))
}

/// Whether the toolkit at `root` holds an NVRTC of `major` (any toolkit serves a
/// search of any major): its headers are then of that major.
fn toolkit_is_of(root: &Path, major: Option<u32>) -> bool {
    let Some(major) = major else { return true };
    TOOLKIT_LIB_DIRS
        .iter()
        .any(|sub| root.join(sub).join(format!("libnvrtc.so.{major}")).exists())
}

fn probe_dir(
    rule: &str,
    dir: &Path,
    names: &[String],
    major: Option<u32>,
    log: &mut Vec<Searched>,
) -> Option<Located> {
    if !dir.is_dir() {
        log.push(Searched {
            rule: rule.to_owned(),
            candidate: dir.to_path_buf(),
            outcome: "no such folder".to_owned(),
        });
        return None;
    }
    names
        .iter()
        .find_map(|name| probe_file(rule, &dir.join(name), major, log))
}

fn probe_file(
    rule: &str,
    file: &Path,
    major: Option<u32>,
    log: &mut Vec<Searched>,
) -> Option<Located> {
    if !file.is_file() {
        log.push(Searched {
            rule: rule.to_owned(),
            candidate: file.to_path_buf(),
            outcome: "no such file".to_owned(),
        });
        return None;
    }
    probe_library(rule, file, major, log)
}

/// Loads `name` (a path, or a bare name the OS loader resolves), checks that it
/// exports `nvrtcVersion` and, with `major`, that it is of that CUDA major. The
/// library is unloaded again; the compiler loads the accepted one for good.
fn probe_library(
    rule: &str,
    name: &Path,
    major: Option<u32>,
    log: &mut Vec<Searched>,
) -> Option<Located> {
    let outcome = match probe_nvrtc_version(name) {
        Ok(found) if major.is_none_or(|wanted| found == Some(wanted)) => {
            return Some(Located {
                path: name.to_path_buf(),
                rule: rule.to_owned(),
                major: found,
            });
        }
        Ok(found) => format!(
            "is NVRTC {}, not of CUDA {}",
            found.map_or_else(|| "of an unknown release".to_owned(), |m| format!("{m}.x")),
            major.unwrap_or_default()
        ),
        Err(message) => message,
    };
    log.push(Searched {
        rule: rule.to_owned(),
        candidate: name.to_path_buf(),
        outcome,
    });
    None
}

/// Loads `name` and asks its `nvrtcVersion`: the major version (`None` when the
/// call fails).
fn probe_nvrtc_version(name: &Path) -> Result<Option<u32>, String> {
    // SAFETY: loading a shared library runs its initialisers. The candidates are NVRTC
    // libraries from the CUDA toolkit, the loader path or NVIDIA's wheels, whose
    // initialisers only set up the library itself; a file that is not a shared library
    // is rejected by the loader before any code runs.
    let lib = unsafe { libloading::Library::new(name.as_os_str()) }
        .map_err(|e| format!("does not load: {e}"))?;
    type Version =
        unsafe extern "C" fn(*mut std::ffi::c_int, *mut std::ffi::c_int) -> std::ffi::c_int;
    // SAFETY: `nvrtcVersion(int*, int*)` has this C signature in every NVRTC
    // release; the symbol is used while `lib` is alive, below.
    let version = unsafe { lib.get::<Version>(b"nvrtcVersion\0") }
        .map_err(|e| format!("loads but is not NVRTC: {e}"))?;
    let (mut major, mut minor) = (0, 0);
    // SAFETY: both pointers are valid for one write; the call needs no setup.
    let status = unsafe { version(&mut major, &mut minor) };
    Ok((status == 0).then(|| u32::try_from(major).ok()).flatten())
}

/// Site-packages folders found by globbing the usual Python install places.
fn glob_site_packages(virtual_env: Option<OsString>, home: Option<OsString>) -> Vec<PathBuf> {
    let mut lib_dirs: Vec<PathBuf> = Vec::new();
    if let Some(venv) = virtual_env {
        lib_dirs.push(PathBuf::from(venv).join("lib"));
    }
    if let Some(home) = home.map(PathBuf::from) {
        lib_dirs.push(home.join(".local/lib"));
        for version in list_dir(&home.join(".pyenv/versions")) {
            lib_dirs.push(version.join("lib"));
        }
    }
    lib_dirs.push(PathBuf::from("/usr/local/lib"));
    lib_dirs.push(PathBuf::from("/usr/lib"));
    let mut sites = Vec::new();
    for lib in lib_dirs {
        for python in list_dir(&lib) {
            let is_python3 = python
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("python3"));
            if !is_python3 {
                continue;
            }
            for kind in ["site-packages", "dist-packages"] {
                let site = python.join(kind);
                if site.is_dir() && !sites.contains(&site) {
                    sites.push(site);
                }
            }
        }
    }
    sites
}

/// The entries of a folder, sorted; empty when it cannot be read.
fn list_dir(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

/// The site-packages folders `python3` reports (the last resort).
fn python_site_packages(log: &mut Vec<Searched>) -> Vec<PathBuf> {
    const SCRIPT: &str = "import site,sys\n\
        p=list(site.getsitepackages()) if hasattr(site,'getsitepackages') else []\n\
        p.append(site.getusersitepackages())\n\
        p+= [x for x in sys.path if x.endswith(('site-packages','dist-packages'))]\n\
        print('\\n'.join(p))";
    let mut fail = |outcome: String| {
        log.push(Searched {
            rule: "python3 site".to_owned(),
            candidate: PathBuf::from("python3"),
            outcome,
        });
        Vec::new()
    };
    match Command::new("python3").args(["-c", SCRIPT]).output() {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(PathBuf::from)
            .filter(|p| p.is_dir())
            .collect(),
        Ok(out) => fail(format!("exited with {}", out.status)),
        Err(e) => fail(format!("could not run: {e}")),
    }
}

/// `path` made canonical when it is absolute (a bare library name is
/// not a file: `None`), or `None` when it cannot be resolved.
pub(crate) fn canonical_file(path: &Path) -> Option<PathBuf> {
    path.is_absolute()
        .then(|| path.canonicalize().ok())
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_file_is_the_only_candidate() {
        let config = SearchConfig {
            toolkit_roots: vec![("CUDA_HOME".into(), "/usr/local/cuda".into())],
            ..SearchConfig::nvrtc_file("/nonexistent/libnvrtc.so.13")
        };
        let Err(ToolchainError::NvrtcNotFound { searched }) = locate_nvrtc(&config) else {
            panic!("an explicit missing file must be an error");
        };
        assert_eq!(searched.0.len(), 1);
        assert_eq!(searched.0[0].rule, "KILN_NVRTC");
    }

    #[test]
    fn a_missing_kiln_nvrtc_is_an_error_in_a_search_for_one_major_too() {
        let config = SearchConfig {
            cuda_major: Some(13),
            nvrtc_file_if_of_major: Some("/nonexistent/libnvrtc.so".into()),
            toolkit_roots: vec![("CUDA_HOME".into(), "/usr/local/cuda".into())],
            ..SearchConfig::empty()
        };
        let Err(ToolchainError::NvrtcNotFound { searched }) = locate_nvrtc(&config) else {
            panic!("a KILN_NVRTC that names no file must be an error, not a fallback");
        };
        assert_eq!(searched.0.len(), 1, "{searched:?}");
        assert_eq!(searched.0[0].rule, "KILN_NVRTC");
        assert_eq!(searched.0[0].outcome, "no such file");
    }

    #[test]
    fn header_trees_are_found_by_their_marker_file() {
        let root = tempfile::tempdir().unwrap();
        let site = root.path().join("site-packages");
        let runtime = site.join("nvidia/cu13/include");
        let cccl = runtime.join("cccl");
        std::fs::create_dir_all(cccl.join("cub")).unwrap();
        std::fs::write(runtime.join("cuda_fp16.h"), "").unwrap();
        std::fs::write(cccl.join("cub/cub.cuh"), "").unwrap();
        let config = SearchConfig {
            toolkit_roots: vec![("CUDA_HOME".into(), root.path().join("cuda"))],
            site_packages: vec![site],
            ..SearchConfig::empty()
        };
        assert_eq!(locate_cuda_runtime(&config).unwrap(), runtime);
        assert_eq!(locate_cccl(&config).unwrap(), cccl);
        // An explicit folder is the only one tried.
        let explicit = SearchConfig {
            cuda_runtime_include: Some(root.path().join("elsewhere")),
            ..config
        };
        let Err(ToolchainError::CudaRuntimeNotFound { searched }) = locate_cuda_runtime(&explicit)
        else {
            panic!("a wrong explicit folder must be an error");
        };
        assert_eq!(searched.0.len(), 1);
        assert_eq!(searched.0[0].rule, CUDA_RUNTIME_INCLUDE);
        assert_eq!(searched.0[0].outcome, "no cuda_fp16.h");
    }

    #[test]
    fn a_file_that_is_not_a_library_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("libnvrtc.so.13");
        std::fs::write(&fake, b"not an ELF file").unwrap();
        let config = SearchConfig {
            loader_dirs: vec![dir.path().to_path_buf()],
            ..SearchConfig::empty()
        };
        let Err(ToolchainError::NvrtcNotFound { searched }) = locate_nvrtc(&config) else {
            panic!("a fake library must be refused");
        };
        let entry = searched.0.iter().find(|s| s.candidate == fake).unwrap();
        assert!(entry.outcome.starts_with("does not load"), "{entry}");
    }
}
