//! The NVRTC library: loading it, its exact version, and one compile from source
//! to PTX and CUBIN.
//!
//! # Each located library, called through its own table
//!
//! Kiln never lets cudarc open NVRTC (cudarc binds one library per process, by
//! name, and panics when none loads). [`Nvrtc::load`] opens the file
//! [`locate_nvrtc`] found, by path, keeps it open for the life of the process with
//! its `libnvrtc-builtins` neighbour (NVRTC opens that one by name at the first
//! compile, which fails when the wheel's folder is not on the loader path), and
//! resolves the functions a compile calls from that handle into a table of its own
//! (`Api`). So a process can hold several NVRTC releases at once, NVRTC 12 and
//! NVRTC 13 side by side (a build that ships code for both driver families), each
//! compile going to exactly the library its owner names; another NVRTC earlier on
//! the loader path changes nothing.
//!
//! Loaded libraries are kept per canonical file: loading the same file again
//! returns the same [`Nvrtc`].
//!
//! Owners do not need the library loaded: [`NvrtcIdentity`](super::identity::NvrtcIdentity)
//! names it from a memo when it can, and [`Compiler`](super::Compiler) loads it on
//! its first compile.

pub(crate) mod version;

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::ptr;
use std::sync::Mutex;

use super::error::{CompileError, ToolchainError};
use super::locate::{Located, SearchConfig, canonical_file, locate_nvrtc};
use super::memo::{FileStamp, FsInstant, MemoDir, StampSet};

pub use version::{InvalidNvrtcVersion, NvrtcVersion};

/// An NVRTC program handle.
type Program = *mut c_void;
/// `nvrtcResult`.
type Status = c_int;
/// `NVRTC_SUCCESS`.
const SUCCESS: Status = 0;

/// The NVRTC functions Kiln calls, resolved from one loaded library.
#[derive(Clone, Copy)]
struct Api {
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> Status,
    error_string: unsafe extern "C" fn(Status) -> *const c_char,
    create_program: unsafe extern "C" fn(
        *mut Program,
        *const c_char,
        *const c_char,
        c_int,
        *const *const c_char,
        *const *const c_char,
    ) -> Status,
    destroy_program: unsafe extern "C" fn(*mut Program) -> Status,
    add_name_expression: unsafe extern "C" fn(Program, *const c_char) -> Status,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> Status,
    get_lowered_name: unsafe extern "C" fn(Program, *const c_char, *mut *const c_char) -> Status,
    get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> Status,
    get_log_size: unsafe extern "C" fn(Program, *mut usize) -> Status,
    get_log: unsafe extern "C" fn(Program, *mut c_char) -> Status,
}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Api { .. }")
    }
}

impl Api {
    /// Resolves every function from `library`.
    ///
    /// # Safety
    /// `library` must be an NVRTC library (it exports `nvrtcVersion`), kept loaded
    /// for as long as the table is used: the function pointers point into it.
    unsafe fn resolve(library: &libloading::Library) -> Result<Api, String> {
        macro_rules! get {
            ($name:literal) => {
                // SAFETY: the caller's contract: an NVRTC library, whose functions
                // have the C signatures of NVRTC's header declared in `Api`; the
                // pointer is copied out and used only while the library stays loaded.
                *unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| format!("{}: {e}", $name))?
            };
        }
        Ok(Api {
            version: get!("nvrtcVersion"),
            error_string: get!("nvrtcGetErrorString"),
            create_program: get!("nvrtcCreateProgram"),
            destroy_program: get!("nvrtcDestroyProgram"),
            add_name_expression: get!("nvrtcAddNameExpression"),
            compile_program: get!("nvrtcCompileProgram"),
            get_lowered_name: get!("nvrtcGetLoweredName"),
            get_ptx_size: get!("nvrtcGetPTXSize"),
            get_ptx: get!("nvrtcGetPTX"),
            get_cubin_size: get!("nvrtcGetCUBINSize"),
            get_cubin: get!("nvrtcGetCUBIN"),
            get_log_size: get!("nvrtcGetProgramLogSize"),
            get_log: get!("nvrtcGetProgramLog"),
        })
    }
}

/// One NVRTC library, loaded for the life of the process.
#[derive(Debug)]
pub struct Nvrtc {
    located: Located,
    canonical: Option<PathBuf>,
    version: NvrtcVersion,
    api: Api,
    // Kept open for the life of the process: `api` points into these.
    _library: libloading::Library,
    _builtins: Option<libloading::Library>,
}

/// Every library loaded so far (each leaked: they stay loaded until the process
/// ends).
static LOADED: Mutex<Vec<&'static Nvrtc>> = Mutex::new(Vec::new());

impl Nvrtc {
    /// The NVRTC the environment names ([`SearchConfig::from_env`]), loaded on
    /// first use.
    ///
    /// # Errors
    /// As [`Nvrtc::load`].
    pub fn get() -> Result<&'static Nvrtc, ToolchainError> {
        Self::load(&SearchConfig::from_env())
    }

    /// Locates NVRTC with `config` and loads it (or returns it, when this process
    /// loaded that file already).
    ///
    /// The exact release comes from the process's identity memo ([`MemoDir::process`])
    /// when it holds one for exactly this library file, else from the banner of an
    /// empty compile (then memoized).
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] when no library is found; [`ToolchainError::Nvrtc`] when
    /// it lacks a function Kiln calls or its version cannot be read.
    pub fn load(config: &SearchConfig) -> Result<&'static Nvrtc, ToolchainError> {
        Self::load_with(config, MemoDir::process())
    }

    /// [`Nvrtc::load`] with the identity memos of `memo`.
    pub(crate) fn load_with(
        config: &SearchConfig,
        memo: &MemoDir,
    ) -> Result<&'static Nvrtc, ToolchainError> {
        Self::load_located(locate_nvrtc(config)?, memo)
    }

    /// Loads the library `located` names (or returns it, when this process loaded
    /// that file already).
    pub(crate) fn load_located(
        located: Located,
        memo: &MemoDir,
    ) -> Result<&'static Nvrtc, ToolchainError> {
        let canonical = canonical_file(&located.path);
        // A poisoned lock only means another loader panicked; the list is intact.
        let mut loaded = LOADED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(nvrtc) = loaded.iter().find(|n| {
            n.canonical.is_some() && n.canonical == canonical || n.located.path == located.path
        }) {
            return Ok(nvrtc);
        }
        let load_error = |e: String| ToolchainError::NvrtcNotFound {
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
        let library = unsafe { libloading::Library::new(located.path.as_os_str()) }
            .map_err(|e| load_error(e.to_string()))?;
        // SAFETY: an NVRTC library (probed), kept in the `Nvrtc` beside the table
        // for the life of the process (the `Nvrtc` is leaked below).
        let api = unsafe { Api::resolve(&library) }.map_err(load_error)?;
        let builtins = load_builtins(&located.path);
        let version = read_version(&api, files.as_ref(), memo)?;
        let nvrtc: &'static Nvrtc = Box::leak(Box::new(Nvrtc {
            located,
            canonical,
            version,
            api,
            _library: library,
            _builtins: builtins,
        }));
        loaded.push(nvrtc);
        Ok(nvrtc)
    }

    /// Where the library was found.
    pub fn location(&self) -> &Located {
        &self.located
    }

    /// The exact version.
    pub fn version(&self) -> &NvrtcVersion {
        &self.version
    }

    /// The GPU archs this NVRTC compiles for, as compute capabilities times ten
    /// (`nvrtcGetSupportedArchs`: `[75, 80, 86, ...]`); `None` when this NVRTC
    /// does not say.
    pub fn supported_archs(&self) -> Option<Vec<u32>> {
        type Count = unsafe extern "C" fn(*mut c_int) -> Status;
        type List = unsafe extern "C" fn(*mut c_int) -> Status;
        // SAFETY: both symbols have these C signatures in every NVRTC that exports
        // them (11.2+); the library stays loaded while `self` lives.
        let count = unsafe { self._library.get::<Count>(b"nvrtcGetNumSupportedArchs\0") }.ok()?;
        // SAFETY: as above.
        let list = unsafe { self._library.get::<List>(b"nvrtcGetSupportedArchs\0") }.ok()?;
        let mut n: c_int = 0;
        // SAFETY: the pointer is valid for one write.
        if unsafe { count(&mut n) } != SUCCESS {
            return None;
        }
        let mut archs: Vec<c_int> = vec![0; usize::try_from(n).ok()?];
        // SAFETY: NVRTC writes exactly the `n` archs it just reported.
        if unsafe { list(archs.as_mut_ptr()) } != SUCCESS {
            return None;
        }
        Some(
            archs
                .into_iter()
                .filter_map(|a| u32::try_from(a).ok())
                .collect(),
        )
    }

    /// Compiles one program for `arch`: PTX (for the arch's virtual arch) and CUBIN.
    pub(crate) fn compile(&self, input: &CompileInput<'_>) -> Result<CompileOutput, CompileError> {
        compile(&self.api, input)
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

/// NVRTC's name of a status (`NVRTC_ERROR_COMPILATION`).
fn status(api: &Api, result: Status) -> String {
    // SAFETY: nvrtcGetErrorString takes any value and returns a pointer to a
    // static NUL-terminated string (or null), which is copied at once.
    let text = unsafe { (api.error_string)(result) };
    if text.is_null() {
        return format!("status {result}");
    }
    // SAFETY: non-null and NUL-terminated, owned by the library (static).
    unsafe { CStr::from_ptr(text) }
        .to_string_lossy()
        .into_owned()
}

fn check(api: &Api, call: &'static str, result: Status) -> Result<(), ToolchainError> {
    if result == SUCCESS {
        return Ok(());
    }
    Err(ToolchainError::Nvrtc {
        call,
        status: status(api, result),
    })
}

fn read_version(
    api: &Api,
    files: Option<&LibraryFiles>,
    memo: &MemoDir,
) -> Result<NvrtcVersion, ToolchainError> {
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: the table's library is loaded; both pointers are valid for writes of
    // one c_int.
    check(api, "nvrtcVersion", unsafe {
        (api.version)(&mut major, &mut minor)
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
    let ptx = compile(api, &probe)
        .map_err(|error| ToolchainError::Nvrtc {
            call: "nvrtcCompileProgram (a probe of an empty program)",
            status: error.to_string(),
        })?
        .ptx;
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
struct ProgramHandle<'a> {
    api: &'a Api,
    raw: Program,
}

impl Drop for ProgramHandle<'_> {
    fn drop(&mut self) {
        // SAFETY: `raw` was created by nvrtcCreateProgram of the same library and is
        // destroyed once, here. A failure to free cannot be reported from drop and
        // leaks only memory.
        let _ = unsafe { (self.api.destroy_program)(&mut self.raw) };
    }
}

fn cstring(what: impl FnOnce() -> String, s: &str) -> Result<CString, CompileError> {
    CString::new(s).map_err(|_| CompileError::InteriorNul { what: what() })
}

fn compile(api: &Api, input: &CompileInput<'_>) -> Result<CompileOutput, CompileError> {
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
    let count = c_int::try_from(input.headers.len()).map_err(|_| ToolchainError::Nvrtc {
        call: "nvrtcCreateProgram",
        status: "too many headers".to_owned(),
    })?;
    let mut raw: Program = ptr::null_mut();
    // SAFETY: every pointer is to a NUL-terminated string owned by this function and
    // alive until the program is destroyed (NVRTC copies them anyway); the two header
    // arrays both hold `count` entries; `raw` is valid for one write.
    check(api, "nvrtcCreateProgram", unsafe {
        (api.create_program)(
            &mut raw,
            source.as_ptr(),
            name.as_ptr(),
            count,
            body_ptrs.as_ptr(),
            name_ptrs.as_ptr(),
        )
    })?;
    let program = ProgramHandle { api, raw };

    let expressions: Vec<CString> = input
        .name_expressions
        .iter()
        .map(|e| cstring(|| format!("name expression {e:?}"), e))
        .collect::<Result<_, _>>()?;
    for expr in &expressions {
        // SAFETY: a live program and a NUL-terminated expression that outlives it.
        check(api, "nvrtcAddNameExpression", unsafe {
            (api.add_name_expression)(program.raw, expr.as_ptr())
        })?;
    }

    let options: Vec<CString> = input
        .options
        .iter()
        .map(|o| cstring(|| format!("option {o:?}"), o))
        .collect::<Result<_, _>>()?;
    let option_ptrs: Vec<*const c_char> = options.iter().map(|c| c.as_ptr()).collect();
    let option_count = c_int::try_from(option_ptrs.len()).map_err(|_| ToolchainError::Nvrtc {
        call: "nvrtcCompileProgram",
        status: "too many options".to_owned(),
    })?;
    // SAFETY: a live program; `option_ptrs` holds `option_count` NUL-terminated
    // strings that outlive the call.
    let result = unsafe { (api.compile_program)(program.raw, option_count, option_ptrs.as_ptr()) };
    if result != SUCCESS {
        return Err(CompileError::Compile {
            program: input.program_name.to_owned(),
            arch: input.arch_label.clone(),
            status: status(api, result),
            log: program_log(&program),
        });
    }

    let mut lowered = Vec::with_capacity(expressions.len());
    for expr in &expressions {
        let mut name: *const c_char = ptr::null();
        // SAFETY: a compiled program and an expression added before compiling; NVRTC
        // writes a pointer to a string it owns, valid until the program is destroyed.
        check(api, "nvrtcGetLoweredName", unsafe {
            (api.get_lowered_name)(program.raw, expr.as_ptr(), &mut name)
        })?;
        if name.is_null() {
            return Err(ToolchainError::Nvrtc {
                call: "nvrtcGetLoweredName",
                status: format!("no lowered name for {expr:?}"),
            }
            .into());
        }
        // SAFETY: non-null, NUL-terminated, owned by the live program; copied at once.
        let text = unsafe { CStr::from_ptr(name) }
            .to_string_lossy()
            .into_owned();
        lowered.push(text);
    }

    let mut ptx = read_sized(&program, "nvrtcGetPTX", api.get_ptx_size, api.get_ptx)?;
    if ptx.last() == Some(&0) {
        ptx.pop();
    }
    let cubin = if input.want_cubin {
        read_sized(&program, "nvrtcGetCUBIN", api.get_cubin_size, api.get_cubin)?
    } else {
        Vec::new()
    };
    Ok(CompileOutput {
        ptx,
        cubin,
        lowered,
    })
}

type SizeFn = unsafe extern "C" fn(Program, *mut usize) -> Status;
type ReadFn = unsafe extern "C" fn(Program, *mut c_char) -> Status;

/// Reads one of NVRTC's sized outputs (PTX, CUBIN).
fn read_sized(
    program: &ProgramHandle<'_>,
    call: &'static str,
    size: SizeFn,
    read: ReadFn,
) -> Result<Vec<u8>, ToolchainError> {
    let mut len = 0usize;
    // SAFETY: a compiled program; `len` is valid for one write.
    check(program.api, call, unsafe { size(program.raw, &mut len) })?;
    let mut bytes = vec![0u8; len];
    // SAFETY: NVRTC writes exactly the `len` bytes it just reported into a buffer of
    // that length (`c_char` and `u8` have the same size and alignment).
    check(program.api, call, unsafe {
        read(program.raw, bytes.as_mut_ptr().cast())
    })?;
    Ok(bytes)
}

fn program_log(program: &ProgramHandle<'_>) -> String {
    let api = program.api;
    match read_sized(program, "nvrtcGetProgramLog", api.get_log_size, api.get_log) {
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
