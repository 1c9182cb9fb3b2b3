//! The NVRTC library: loading it safely for cudarc, its exact version, and one
//! compile from source to PTX and CUBIN.
//!
//! # How cudarc is pointed at the located library
//!
//! cudarc (with `dynamic-loading`) opens NVRTC lazily, by *name*
//! (`cudarc::get_lib_name_candidates("nvrtc")`: `libnvrtc.so`, ..., `libnvrtc.so.13`,
//! ...), through the OS loader, and panics when none loads. Kiln never lets it search
//! blind:
//!
//! 1. [`locate_nvrtc`] finds and probes a library file.
//! 2. [`Nvrtc::load`] opens that file by path and keeps it open for the life of the
//!    process, together with its `libnvrtc-builtins` neighbour (NVRTC opens that one
//!    by name at the first compile, which fails when the wheel's folder is not on the
//!    loader path).
//! 3. glibc's `dlopen` answers a by-name request with an already loaded library whose
//!    `SONAME` matches, so cudarc's candidate `libnvrtc.so.13` resolves to the
//!    preloaded library. Kiln replays cudarc's candidate list first: the first name
//!    that loads is the one cudarc will bind, and its `nvrtcVersion` must be the
//!    preloaded library's. Only then is cudarc's loader touched (it can no longer
//!    panic: a candidate loads), and the address is checked once more against cudarc's
//!    own handle. A different NVRTC earlier on the loader path is a
//!    [`Error::NvrtcShadowed`], not a silently different compiler.
//!
//! The one NVRTC of a process is kept in a `OnceLock`: cudarc binds one library per
//! process, so the first successful [`Nvrtc::load`] wins.
//!
//! Owners do not need the library loaded: [`NvrtcIdentity`](super::identity::NvrtcIdentity)
//! names it from a memo when it can, and [`Compiler`](super::Compiler) loads it on
//! its first compile.

mod version;

use std::ffi::{CStr, CString, c_char, c_int};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::sys::{self, nvrtcProgram, nvrtcResult};

use super::Error;
use super::locate::{Located, SearchConfig, canonical_file, locate_nvrtc};
use super::memo::{FileStamp, FsInstant, MemoDir, StampSet};

pub use version::{InvalidNvrtcVersion, NvrtcVersion};

/// The process's NVRTC, loaded and bound to cudarc.
#[derive(Debug)]
pub struct Nvrtc {
    located: Located,
    version: NvrtcVersion,
    // Kept open for the life of the process: cudarc's handle resolves to these.
    _library: libloading::Library,
    _builtins: Option<libloading::Library>,
}

static LOADED: OnceLock<Nvrtc> = OnceLock::new();
static LOADING: Mutex<()> = Mutex::new(());

impl Nvrtc {
    /// The process's NVRTC, located from the environment on first use
    /// ([`SearchConfig::from_env`]).
    ///
    /// # Errors
    /// As [`Nvrtc::load`].
    pub fn get() -> Result<&'static Nvrtc, Error> {
        match LOADED.get() {
            Some(nvrtc) => Ok(nvrtc),
            None => Self::load(&SearchConfig::from_env()),
        }
    }

    /// Locates NVRTC with `config`, loads it and binds cudarc to it. When an NVRTC is
    /// already loaded in this process, that one is returned (cudarc cannot switch).
    ///
    /// The exact release comes from the process's identity memo ([`MemoDir::process`])
    /// when it holds one for exactly this library file, else from the banner of an
    /// empty compile (then memoized).
    ///
    /// # Errors
    /// [`Error::NvrtcNotFound`] when no library is found;
    /// [`Error::NvrtcShadowed`] when cudarc would bind another library than
    /// the one located; [`Error::NvrtcIdentityChanged`] when another NVRTC is
    /// loaded already; [`Error::Nvrtc`] when its version cannot be read.
    pub fn load(config: &SearchConfig) -> Result<&'static Nvrtc, Error> {
        Self::load_with(config, MemoDir::process())
    }

    /// [`Nvrtc::load`] with the identity memos of `memo`.
    pub(crate) fn load_with(
        config: &SearchConfig,
        memo: &MemoDir,
    ) -> Result<&'static Nvrtc, Error> {
        // A poisoned lock only means another loader panicked; the OnceLock is intact.
        let _guard = LOADING.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(nvrtc) = LOADED.get() {
            return Ok(nvrtc);
        }
        let located = locate_nvrtc(config)?;
        let load_error = |e: libloading::Error| Error::NvrtcNotFound {
            searched: super::error::SearchLog(vec![super::error::Searched {
                rule: located.rule.clone(),
                candidate: located.path.clone(),
                outcome: format!("probed, then failed to load: {e}"),
            }]),
        };
        // Stamped before it is loaded: a file replaced from here on is not memoized
        // under the stamps of the one that was loaded.
        let mut files = LibraryFiles::stamp(&located.path);
        if let Some(files) = &mut files {
            files.reading(memo);
        }
        // SAFETY: the same library was probed by `locate_nvrtc` (it loaded and exports
        // nvrtcVersion); loading it runs NVRTC's own initialisers only.
        let library =
            unsafe { libloading::Library::new(located.path.as_os_str()) }.map_err(load_error)?;
        let builtins = load_builtins(&located.path);
        bind_cudarc(&located, &library)?;
        let version = read_version(files.as_ref(), memo)?;
        Ok(LOADED.get_or_init(|| Nvrtc {
            located,
            version,
            _library: library,
            _builtins: builtins,
        }))
    }

    /// Where the library was found.
    pub fn location(&self) -> &Located {
        &self.located
    }

    /// The exact version.
    pub fn version(&self) -> &NvrtcVersion {
        &self.version
    }

    /// Compiles one program for `arch`: PTX (for the arch's virtual arch) and CUBIN.
    pub(crate) fn compile(&self, input: &CompileInput<'_>) -> Result<CompileOutput, Error> {
        compile(input)
    }
}

/// Opens `libnvrtc-builtins.so.*` from the folder of a library file, so NVRTC's
/// by-name lookup of it succeeds wherever the folder is. Best effort: a toolkit on
/// the loader path needs no help.
fn load_builtins(nvrtc: &Path) -> Option<libloading::Library> {
    let dir = nvrtc.parent().filter(|d| !d.as_os_str().is_empty())?;
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libnvrtc-builtins.so"))
        })
        .collect();
    // The shortest versioned name (`libnvrtc-builtins.so.13.0`) is the real file.
    names.sort_by_key(|p| std::cmp::Reverse(p.as_os_str().len()));
    let file = names.pop()?;
    // SAFETY: NVRTC's builtins library, shipped beside NVRTC itself; loading it runs
    // only its own initialisers.
    unsafe { libloading::Library::new(file.as_os_str()) }.ok()
}

/// Address of `nvrtcVersion` in `lib`: identifies which NVRTC a handle resolves to.
fn version_symbol(lib: &libloading::Library) -> Option<usize> {
    // SAFETY: the symbol is only looked up, its address taken and never called through
    // this type; the `Symbol` borrow ends within the expression.
    unsafe { lib.get::<unsafe extern "C" fn()>(b"nvrtcVersion\0") }
        .ok()
        .map(|sym| *sym as usize)
}

fn bind_cudarc(located: &Located, ours: &libloading::Library) -> Result<(), Error> {
    let shadowed = |bound: String| Error::NvrtcShadowed {
        located: located.path.clone(),
        bound,
    };
    let ours = version_symbol(ours).ok_or_else(|| shadowed("nothing: no nvrtcVersion".into()))?;
    // Replay cudarc's by-name search: the first candidate that loads is what it binds.
    let mut first = None;
    for name in cudarc::get_lib_name_candidates("nvrtc") {
        // SAFETY: as in `locate`: a by-name load of an NVRTC library; with the located
        // library preloaded, its SONAME resolves to it without running anything new.
        if let Ok(lib) = unsafe { libloading::Library::new(&name) } {
            first = Some((name, lib));
            break;
        }
    }
    let Some((name, lib)) = first else {
        return Err(shadowed(
            "nothing: none of cudarc's library names resolves to the located file (its \
             SONAME is not one of them)"
                .into(),
        ));
    };
    if version_symbol(&lib) != Some(ours) {
        return Err(shadowed(format!(
            "{name}, another NVRTC found by the OS loader"
        )));
    }
    // SAFETY: cudarc's loader panics only when no candidate name loads; one just did.
    let cudarc_lib = unsafe { sys::culib() };
    if version_symbol(cudarc_lib) != Some(ours) {
        return Err(shadowed(
            "an NVRTC cudarc had loaded earlier in this process".into(),
        ));
    }
    Ok(())
}

fn status(result: nvrtcResult) -> String {
    format!("{result:?}")
}

fn check(call: &'static str, result: nvrtcResult) -> Result<(), Error> {
    match result {
        nvrtcResult::NVRTC_SUCCESS => Ok(()),
        other => Err(Error::Nvrtc {
            call,
            status: status(other),
        }),
    }
}

fn read_version(files: Option<&LibraryFiles>, memo: &MemoDir) -> Result<NvrtcVersion, Error> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: cudarc is bound to the located NVRTC (see `bind_cudarc`); both pointers
    // are valid for writes of one c_int.
    check("nvrtcVersion", unsafe {
        sys::nvrtcVersion(&mut major, &mut minor)
    })?;
    let (major, minor) = (
        u32::try_from(major).unwrap_or_default(),
        u32::try_from(minor).unwrap_or_default(),
    );
    if let Some(version) = files.and_then(|f| f.remembered(memo, Some((major, minor)))) {
        return Ok(version);
    }
    // The banner in the PTX header names the exact release: "V13.0.88".
    let probe = CompileInput {
        program_name: "kiln_version_probe.cu",
        source: "",
        headers: &[],
        name_expressions: &[],
        // NVRTC's default arch: the oldest it supports, whatever the release.
        options: &[],
        arch_label: "its default arch".to_owned(),
        want_cubin: false,
    };
    // A failing probe means NVRTC cannot compile at all (e.g. its builtins library
    // is missing): report that now rather than at the first real compile.
    let ptx = compile(&probe)?.ptx;
    let release = banner_release(&ptx, major, minor).unwrap_or_else(|| format!("{major}.{minor}"));
    let version = NvrtcVersion {
        major,
        minor,
        release,
    };
    if let Some(files) = files {
        files.remember(memo, &version);
    }
    Ok(version)
}

/// The exact release in the banner at the top of NVRTC's PTX
/// (`// Cuda compilation tools, release 13.0, V13.0.88`): `13.0.88`.
pub(crate) fn banner_release(ptx: &[u8], major: u32, minor: u32) -> Option<String> {
    // The banner is in the first few lines; do not scan a big PTX.
    let head = &ptx[..ptx.len().min(1024)];
    let banner = String::from_utf8_lossy(head);
    let prefix = format!("V{major}.{minor}.");
    banner.find(&prefix).map(|at| {
        let digits = &banner[at + 1..];
        let end = digits
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(digits.len());
        digits[..end].to_owned()
    })
}

/// One NVRTC compile.
pub(crate) struct CompileInput<'a> {
    /// The program's name (used in messages and `#line`s).
    pub program_name: &'a str,
    /// CUDA C++ source.
    pub source: &'a str,
    /// Headers by content: (include name, content).
    pub headers: &'a [(String, String)],
    /// Name expressions whose lowered names are wanted.
    pub name_expressions: &'a [String],
    /// Every option, arch and include paths included.
    pub options: &'a [String],
    /// The arch, for messages.
    pub arch_label: String,
    /// Whether a CUBIN is expected (a real arch).
    pub want_cubin: bool,
}

/// The result of one compile.
pub(crate) struct CompileOutput {
    /// PTX text, without the trailing NUL.
    pub ptx: Vec<u8>,
    /// The CUBIN (empty when not asked for).
    pub cubin: Vec<u8>,
    /// The lowered name of each name expression, in order.
    pub lowered: Vec<String>,
}

/// An NVRTC program, destroyed on drop.
struct Program(nvrtcProgram);

impl Drop for Program {
    fn drop(&mut self) {
        // SAFETY: `self.0` was created by nvrtcCreateProgram and is destroyed once,
        // here. A failure to free cannot be reported from drop and leaks only memory.
        let _ = unsafe { sys::nvrtcDestroyProgram(&mut self.0) };
    }
}

fn cstring(what: impl FnOnce() -> String, s: &str) -> Result<CString, Error> {
    CString::new(s).map_err(|_| Error::InteriorNul { what: what() })
}

fn compile(input: &CompileInput<'_>) -> Result<CompileOutput, Error> {
    let source = cstring(
        || format!("the source of {}", input.program_name),
        input.source,
    )?;
    let name = cstring(|| "the program name".to_owned(), input.program_name)?;
    let mut header_names = Vec::with_capacity(input.headers.len());
    let mut header_bodies = Vec::with_capacity(input.headers.len());
    for (include, body) in input.headers {
        header_names.push(cstring(|| format!("header name {include:?}"), include)?);
        header_bodies.push(cstring(|| format!("header {include:?}"), body)?);
    }
    let name_ptrs: Vec<*const c_char> = header_names.iter().map(|c| c.as_ptr()).collect();
    let body_ptrs: Vec<*const c_char> = header_bodies.iter().map(|c| c.as_ptr()).collect();
    let count = c_int::try_from(input.headers.len()).map_err(|_| Error::Nvrtc {
        call: "nvrtcCreateProgram",
        status: "too many headers".to_owned(),
    })?;
    let mut raw: nvrtcProgram = ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string owned by this function and
    // alive until the program is destroyed (NVRTC copies them anyway); the two header
    // arrays both hold `count` entries; `raw` is valid for one write.
    check("nvrtcCreateProgram", unsafe {
        sys::nvrtcCreateProgram(
            &mut raw,
            source.as_ptr(),
            name.as_ptr(),
            count,
            body_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    })?;
    let program = Program(raw);

    let expressions: Vec<CString> = input
        .name_expressions
        .iter()
        .map(|e| cstring(|| format!("name expression {e:?}"), e))
        .collect::<Result<_, _>>()?;
    for expr in &expressions {
        // SAFETY: a live program and a NUL-terminated expression that outlives it.
        check("nvrtcAddNameExpression", unsafe {
            sys::nvrtcAddNameExpression(program.0, expr.as_ptr())
        })?;
    }

    let options: Vec<CString> = input
        .options
        .iter()
        .map(|o| cstring(|| format!("option {o:?}"), o))
        .collect::<Result<_, _>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|c| c.as_ptr()).collect();
    let option_count = c_int::try_from(option_ptrs.len()).map_err(|_| Error::Nvrtc {
        call: "nvrtcCompileProgram",
        status: "too many options".to_owned(),
    })?;
    // SAFETY: a live program; `option_ptrs` holds `option_count` NUL-terminated
    // strings that outlive the call.
    let result = unsafe { sys::nvrtcCompileProgram(program.0, option_count, option_ptrs.as_ptr()) };
    if result != nvrtcResult::NVRTC_SUCCESS {
        return Err(Error::Compile {
            program: input.program_name.to_owned(),
            arch: input.arch_label.clone(),
            status: status(result),
            log: program_log(&program),
        });
    }

    let mut lowered = Vec::with_capacity(expressions.len());
    for expr in &expressions {
        let mut name: *const c_char = ptr::null();
        // SAFETY: a compiled program and an expression added before compiling; NVRTC
        // writes a pointer to a string it owns, valid until the program is destroyed.
        check("nvrtcGetLoweredName", unsafe {
            sys::nvrtcGetLoweredName(program.0, expr.as_ptr(), &mut name)
        })?;
        if name.is_null() {
            return Err(Error::Nvrtc {
                call: "nvrtcGetLoweredName",
                status: format!("no lowered name for {expr:?}"),
            });
        }
        // SAFETY: non-null, NUL-terminated, owned by the live program; copied at once.
        let text = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        lowered.push(text);
    }

    let mut ptx = read_sized(
        &program,
        "nvrtcGetPTX",
        sys::nvrtcGetPTXSize,
        sys::nvrtcGetPTX,
    )?;
    if ptx.last() == Some(&0) {
        ptx.pop();
    }
    let cubin = if input.want_cubin {
        read_sized(
            &program,
            "nvrtcGetCUBIN",
            sys::nvrtcGetCUBINSize,
            sys::nvrtcGetCUBIN,
        )?
    } else {
        Vec::new()
    };
    Ok(CompileOutput {
        ptx,
        cubin,
        lowered,
    })
}

type SizeFn = unsafe fn(nvrtcProgram, *mut usize) -> nvrtcResult;
type ReadFn = unsafe fn(nvrtcProgram, *mut c_char) -> nvrtcResult;

/// Reads one of NVRTC's sized outputs (PTX, CUBIN).
fn read_sized(
    program: &Program,
    call: &'static str,
    size: SizeFn,
    read: ReadFn,
) -> Result<Vec<u8>, Error> {
    let mut len = 0usize;
    // SAFETY: a compiled program; `len` is valid for one write.
    check(call, unsafe { size(program.0, &mut len) })?;
    let mut bytes = vec![0u8; len];
    // SAFETY: NVRTC writes exactly the `len` bytes it just reported into a buffer of
    // that length (`c_char` and `u8` have the same size and alignment).
    check(call, unsafe { read(program.0, bytes.as_mut_ptr().cast()) })?;
    Ok(bytes)
}

fn program_log(program: &Program) -> String {
    match read_sized(
        program,
        "nvrtcGetProgramLog",
        sys::nvrtcGetProgramLogSize,
        sys::nvrtcGetProgramLog,
    ) {
        Ok(mut log) => {
            while log.last() == Some(&0) {
                log.pop();
            }
            String::from_utf8_lossy(&log).into_owned()
        }
        Err(e) => format!("(no log: {e})"),
    }
}

/// The memo kind of NVRTC releases.
pub(crate) const NVRTC_MEMO: &str = "nvrtc";

/// The NVRTC library file (canonical) and the stamps of it and its builtins
/// neighbours, taken before anything reads them.
pub(crate) struct LibraryFiles {
    subject: PathBuf,
    stamps: StampSet,
    read_from: Option<FsInstant>,
}

impl LibraryFiles {
    /// Stamps the library at `path` (a file; `None` for a bare name or a file that
    /// cannot be stat-ed) and every `libnvrtc-builtins*` file beside it.
    pub(crate) fn stamp(path: &Path) -> Option<LibraryFiles> {
        let subject = canonical_file(path)?;
        let mut stamps = StampSet::new("kiln cuda nvrtc library stamps v1");
        let meta = std::fs::metadata(&subject).ok()?;
        stamps.add(b"libnvrtc", &FileStamp::of(&meta));
        let dir = subject.parent()?;
        let mut builtins: Vec<(String, PathBuf)> = std::fs::read_dir(dir)
            .ok()?
            .filter_map(|e| e.ok())
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                name.starts_with("libnvrtc-builtins")
                    .then(|| (name, e.path()))
            })
            .collect();
        builtins.sort();
        for (name, path) in builtins {
            let meta = std::fs::metadata(&path).ok()?;
            stamps.add(name.as_bytes(), &FileStamp::of(&meta));
        }
        Some(LibraryFiles {
            subject,
            stamps,
            read_from: None,
        })
    }

    /// Notes that the files are about to be read (loaded): only files that had
    /// settled by now are memoized (see [`MemoDir`]).
    pub(crate) fn reading(&mut self, memo: &MemoDir) {
        self.read_from = memo.clock();
    }

    /// The memoized version of these files; with `major_minor`, only one that agrees
    /// with what the loaded library says.
    pub(crate) fn remembered(
        &self,
        memo: &MemoDir,
        major_minor: Option<(u32, u32)>,
    ) -> Option<NvrtcVersion> {
        let values = memo.read(NVRTC_MEMO, &self.subject, &self.stamps.digest())?;
        let [major, minor, release] = values.as_slice() else {
            return None;
        };
        let version = NvrtcVersion {
            major: major.parse().ok()?,
            minor: minor.parse().ok()?,
            release: release.clone(),
        };
        let agrees = major_minor.is_none_or(|mm| mm == (version.major, version.minor));
        let well_formed = version
            .release
            .starts_with(&format!("{}.{}", version.major, version.minor));
        (agrees && well_formed).then_some(version)
    }

    /// Memoizes `version` for these files (when they have settled).
    pub(crate) fn remember(&self, memo: &MemoDir, version: &NvrtcVersion) {
        let values = [
            version.major.to_string(),
            version.minor.to_string(),
            version.release.clone(),
        ];
        memo.write(
            NVRTC_MEMO,
            &self.subject,
            &self.stamps,
            self.read_from,
            &values,
        );
    }
}
