//! Finding NVRTC, the CCCL (CUB) headers and the CUDA runtime headers on this
//! machine.
//!
//! Search order for `libnvrtc`:
//! 1. `KILN_NVRTC`: an explicit library file. When set, nothing else is tried, so a
//!    wrong value is an error rather than a silent fallback.
//! 2. The CUDA toolkit: `CUDA_HOME`, `CUDA_PATH`, `/usr/local/cuda`, in their `lib64/`,
//!    `lib/` and `targets/x86_64-linux/lib/` folders.
//! 3. The loader path: each `LD_LIBRARY_PATH` folder, then what the OS loader finds by
//!    name (`libnvrtc.so.13`, `libnvrtc.so`), which includes the `ld.so` cache.
//! 4. The `nvidia-cuda-nvrtc` wheel in any Python site-packages
//!    (`nvidia/cu13/lib/` for CUDA 13, `nvidia/cuda_nvrtc/lib/` for CUDA 12).
//!
//! Every candidate is probed with `libloading` (it must load and export
//! `nvrtcVersion`) before it is accepted. When nothing qualifies the error lists every
//! place tried. The header trees are found the same way:
//!
//! - CCCL ([`locate_cccl`], the folder holding `cub/cub.cuh`): `KILN_CCCL_INCLUDE`,
//!   the toolkit's `include/cccl/` or `include/`, the `nvidia-cuda-cccl` wheel;
//! - the CUDA runtime headers ([`locate_cuda_runtime`], the folder holding
//!   `cuda_fp16.h`, `cuda_bf16.h`, `cuda_fp8.h`): `KILN_CUDA_RUNTIME_INCLUDE`, the
//!   toolkit's `include/`, the `nvidia-cuda-runtime` wheel (`nvidia/cu13/include/`
//!   for CUDA 13, `nvidia/cuda_runtime/include/` for CUDA 12).
//!
//! Site-packages folders come from globbing the usual places (the active virtualenv,
//! `~/.local`, `/usr/lib`, `/usr/local/lib`, pyenv versions) and, only when none of
//! those holds a candidate, from asking `python3` itself.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::Error;
use super::error::{SearchLog, Searched};

/// File names of NVRTC in a library folder, preferred first.
const NVRTC_FILE_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
/// Names the OS loader is asked for when the folders above hold nothing.
const NVRTC_LOADER_NAMES: &[&str] = &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"];
/// Wheel layouts below a site-packages folder: CUDA 13, then CUDA 12.
const NVRTC_WHEEL_DIRS: &[&str] = &["nvidia/cu13/lib", "nvidia/cuda_nvrtc/lib"];
/// CCCL header roots below a site-packages folder.
const CCCL_WHEEL_DIRS: &[&str] = &["nvidia/cu13/include/cccl", "nvidia/cuda_cccl/include"];
/// CUDA runtime header roots below a site-packages folder: CUDA 13, then CUDA 12.
const RUNTIME_WHEEL_DIRS: &[&str] = &["nvidia/cu13/include", "nvidia/cuda_runtime/include"];

/// The variable naming the CCCL include folder (the one holding `cub/`).
pub const CCCL_INCLUDE: &str = "KILN_CCCL_INCLUDE";

/// The variable naming the CUDA runtime include folder (the one holding
/// `cuda_fp16.h`).
pub const CUDA_RUNTIME_INCLUDE: &str = "KILN_CUDA_RUNTIME_INCLUDE";

/// Where to look: the environment, captured once, or anything a caller sets.
///
/// [`SearchConfig::from_env`] reads the process environment; tests and tools build
/// one by hand instead of mutating the global environment.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SearchConfig {
    /// An explicit NVRTC library file (`KILN_NVRTC`). When set, it is the only
    /// candidate.
    pub nvrtc_file: Option<PathBuf>,
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

    /// The places named by the process environment (see the module documentation).
    pub fn from_env() -> Self {
        let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty());
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
            nvrtc_file: var("KILN_NVRTC").map(PathBuf::from),
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

/// How a library was found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Located {
    /// The library file, or the bare name the OS loader resolved.
    pub path: PathBuf,
    /// The rule that found it (`KILN_NVRTC`, `CUDA_HOME`, `python wheel`...).
    pub rule: String,
}

/// Finds a loadable NVRTC library, probing every candidate with `libloading`.
///
/// # Errors
/// [`Error::NvrtcNotFound`], listing every place tried.
pub fn locate_nvrtc(config: &SearchConfig) -> Result<Located, Error> {
    let mut log = Vec::new();
    let not_found = |log| Error::NvrtcNotFound {
        searched: SearchLog(log),
    };
    if let Some(file) = &config.nvrtc_file {
        return probe_file("KILN_NVRTC", file, &mut log).ok_or_else(|| not_found(log));
    }
    for (rule, root) in &config.toolkit_roots {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
            if let Some(found) = probe_dir(rule, &root.join(sub), &mut log) {
                return Ok(found);
            }
        }
    }
    for dir in &config.loader_dirs {
        if let Some(found) = probe_dir("LD_LIBRARY_PATH", dir, &mut log) {
            return Ok(found);
        }
    }
    if config.ask_loader {
        for name in NVRTC_LOADER_NAMES {
            if let Some(found) = probe_library("OS loader", Path::new(name), &mut log) {
                return Ok(found);
            }
        }
    }
    let found = search_sites(config, &mut log, |site, log| {
        NVRTC_WHEEL_DIRS
            .iter()
            .find_map(|sub| probe_dir("python wheel", &site.join(sub), log))
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
    let file = |rule: &str, path: PathBuf| {
        path.is_file().then(|| Located {
            path,
            rule: rule.to_owned(),
        })
    };
    let in_dir = |rule: &str, dir: &Path| {
        if !dir.is_dir() {
            return None;
        }
        NVRTC_FILE_NAMES
            .iter()
            .find_map(|name| file(rule, dir.join(name)))
    };
    if let Some(explicit) = &config.nvrtc_file {
        return file("KILN_NVRTC", explicit.clone());
    }
    for (rule, root) in &config.toolkit_roots {
        for sub in ["lib64", "lib", "targets/x86_64-linux/lib"] {
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
    config.site_packages.iter().find_map(|site| {
        NVRTC_WHEEL_DIRS
            .iter()
            .find_map(|sub| in_dir("python wheel", &site.join(sub)))
    })
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
    let cached = std::fs::read("/etc/ld.so.cache")
        .map(|bytes| bytes.windows(8).any(|w| w == b"libnvrtc"))
        .unwrap_or(false);
    cached
        || TRUSTED_LIBRARY_DIRS.iter().any(|dir| {
            NVRTC_LOADER_NAMES
                .iter()
                .any(|name| Path::new(dir).join(name).exists())
        })
}

/// Finds the CCCL include folder: the one holding `cub/cub.cuh`.
///
/// # Errors
/// [`Error::CcclNotFound`], listing every place tried.
pub fn locate_cccl(config: &SearchConfig) -> Result<PathBuf, Error> {
    HeaderTree::CCCL
        .locate(config)
        .map_err(|searched| Error::CcclNotFound { searched })
}

/// Finds the CUDA runtime include folder: the one holding `cuda_fp16.h`
/// (with `cuda_bf16.h`, `cuda_fp8.h` beside it).
///
/// # Errors
/// [`Error::CudaRuntimeNotFound`], listing every place tried.
pub fn locate_cuda_runtime(config: &SearchConfig) -> Result<PathBuf, Error> {
    HeaderTree::CUDA_RUNTIME
        .locate(config)
        .map_err(|searched| Error::CudaRuntimeNotFound { searched })
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
    /// Folders below a site-packages folder, in order.
    wheel_dirs: &'static [&'static str],
}

impl HeaderTree {
    const CCCL: HeaderTree = HeaderTree {
        variable: CCCL_INCLUDE,
        explicit: |config| config.cccl_include.as_ref(),
        marker: "cub/cub.cuh",
        toolkit_dirs: &["include/cccl", "include"],
        wheel_dirs: CCCL_WHEEL_DIRS,
    };

    const CUDA_RUNTIME: HeaderTree = HeaderTree {
        variable: CUDA_RUNTIME_INCLUDE,
        explicit: |config| config.cuda_runtime_include.as_ref(),
        marker: "cuda_fp16.h",
        toolkit_dirs: &["include", "targets/x86_64-linux/include"],
        wheel_dirs: RUNTIME_WHEEL_DIRS,
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
            for sub in self.toolkit_dirs {
                if let Some(dir) = check(rule, root.join(sub), &mut log) {
                    return Ok(dir);
                }
            }
        }
        let found = search_sites(config, &mut log, |site, log| {
            self.wheel_dirs
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

fn probe_dir(rule: &str, dir: &Path, log: &mut Vec<Searched>) -> Option<Located> {
    if !dir.is_dir() {
        log.push(Searched {
            rule: rule.to_owned(),
            candidate: dir.to_path_buf(),
            outcome: "no such folder".to_owned(),
        });
        return None;
    }
    NVRTC_FILE_NAMES
        .iter()
        .find_map(|name| probe_file(rule, &dir.join(name), log))
}

fn probe_file(rule: &str, file: &Path, log: &mut Vec<Searched>) -> Option<Located> {
    if !file.is_file() {
        log.push(Searched {
            rule: rule.to_owned(),
            candidate: file.to_path_buf(),
            outcome: "no such file".to_owned(),
        });
        return None;
    }
    probe_library(rule, file, log)
}

/// Loads `name` (a path, or a bare name the OS loader resolves) and checks that it
/// exports `nvrtcVersion`. The library is unloaded again; the compiler loads the
/// accepted one for good.
fn probe_library(rule: &str, name: &Path, log: &mut Vec<Searched>) -> Option<Located> {
    let outcome = match probe_nvrtc_symbol(name) {
        Ok(()) => {
            return Some(Located {
                path: name.to_path_buf(),
                rule: rule.to_owned(),
            });
        }
        Err(message) => message,
    };
    log.push(Searched {
        rule: rule.to_owned(),
        candidate: name.to_path_buf(),
        outcome,
    });
    None
}

fn probe_nvrtc_symbol(name: &Path) -> Result<(), String> {
    // SAFETY: loading a shared library runs its initialisers. The candidates are NVRTC
    // libraries from the CUDA toolkit, the loader path or NVIDIA's wheels, whose
    // initialisers only set up the library itself; a file that is not a shared library
    // is rejected by the loader before any code runs.
    let lib = unsafe { libloading::Library::new(name.as_os_str()) }
        .map_err(|e| format!("does not load: {e}"))?;
    // SAFETY: the symbol is only looked up, never called, so the declared type does not
    // matter; `Symbol` borrows `lib` and is dropped first.
    unsafe { lib.get::<unsafe extern "C" fn()>(b"nvrtcVersion\0") }
        .map(drop)
        .map_err(|e| format!("loads but is not NVRTC: {e}"))
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
        let Err(Error::NvrtcNotFound { searched }) = locate_nvrtc(&config) else {
            panic!("an explicit missing file must be an error");
        };
        assert_eq!(searched.0.len(), 1);
        assert_eq!(searched.0[0].rule, "KILN_NVRTC");
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
        let Err(Error::CudaRuntimeNotFound { searched }) = locate_cuda_runtime(&explicit) else {
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
        let Err(Error::NvrtcNotFound { searched }) = locate_nvrtc(&config) else {
            panic!("a fake library must be refused");
        };
        let entry = searched.0.iter().find(|s| s.candidate == fake).unwrap();
        assert!(entry.outcome.starts_with("does not load"), "{entry}");
    }
}
