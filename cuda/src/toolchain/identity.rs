//! Which NVRTC a process's owners name, learnt without loading NVRTC when possible.
//!
//! Every CUDA [`Owner`](kiln_core::Owner) holds NVRTC's exact release (`13.0.88`): a patch
//! release can change code generation. Reading it costs a process, before its first
//! lookup, 20–50 ms (release build) to 90–180 ms (debug build): opening the 100 MB
//! library (most of the cost: `dlopen` alone takes 10–40 ms), then compiling an empty
//! program to read the release from the banner of its PTX (`nvrtcVersion` gives only
//! `13.0`). A process whose kernels are all in images never needs the library itself.
//!
//! # How the identity is learnt
//!
//! 1. **Memo** ([`IdentityOrigin::Memo`]): the library file is found the way
//!    [`locate_nvrtc`](super::locate::locate_nvrtc) finds it but by `stat` alone
//!    (`locate_nvrtc_file`), and stamped together with its `libnvrtc-builtins`
//!    neighbours (see [`MemoDir`] for the stamp and why a matching stamp is sound).
//!    When an earlier process memoized the release of exactly these files, that
//!    release is the identity: no load, no compile (about 0.1 ms).
//! 2. **Loaded** ([`IdentityOrigin::Loaded`]): otherwise the library is located and
//!    loaded ([`Nvrtc::load`]) and its release read from the banner; the answer is
//!    memoized for the next process.
//! 3. **Recorded** ([`IdentityOrigin::Recorded`]): an application whose kernels all
//!    come from images may have no NVRTC at all. [`NvrtcIdentity::recorded`] takes the
//!    release the images were built with (recorded by the kernel library at build
//!    time, e.g. from its build script's [`Compiler::version`](super::Compiler::version)).
//!    Its owners then name that compiler *explicitly*: a hit is an entry built by
//!    exactly that NVRTC for exactly the arch and options, which is what an image
//!    holds; a miss cannot compile and is a typed error
//!    ([`ToolchainError::NoNvrtc`]). [`Compiler::new_or_recorded`](super::Compiler::new_or_recorded)
//!    falls back to it only when no NVRTC is installed: with one installed, owners
//!    name the installed one, so entries of another release are never served as its
//!    own.
//!
//! # The compile path checks again
//!
//! Only a compile can put an entry under an owner, and a compile loads the library
//! anyway. Before compiling, the loaded library must be the identity's (same file,
//! same version), and after compiling, the release in the banner of the PTX just
//! produced must be the identity's; otherwise the compile fails with
//! [`ToolchainError::NvrtcIdentityChanged`], nothing is cached, and the memo is dropped. So a
//! wrong memo (however it came about) can make lookups miss, or serve an entry that
//! names its compiler's release exactly, but can never file a new entry under the
//! wrong owner.
//!
//! # Limits
//!
//! The by-`stat` search stops at the first existing candidate file, and treats the OS
//! loader's by-name step as "unknown" (full search) when the `ld.so` cache or a
//! trusted folder mentions NVRTC; an executable's `RUNPATH` naming another NVRTC is not
//! seen. In that case the owner still names an NVRTC that is installed, with its exact
//! release, and a compile through the other library is refused by the check above.

use std::path::Path;
use std::sync::{Mutex, OnceLock};

use super::error::ToolchainError;
use super::locate::{Located, SearchConfig, canonical_file, locate_nvrtc_file};
use super::memo::MemoDir;
use super::nvrtc::{LibraryFiles, NVRTC_MEMO, Nvrtc, NvrtcVersion};

/// How an [`NvrtcIdentity`] was learnt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum IdentityOrigin {
    /// From the memo of an earlier process, for library files whose stamps match:
    /// the library was not loaded.
    Memo,
    /// From the library, loaded and asked (and then memoized).
    Loaded,
    /// Given by the caller: the release the images were built with. This process
    /// has no NVRTC to compile with.
    Recorded,
}

/// The NVRTC that owners name: its exact version, and where the library is.
/// A [`Compiler`](super::Compiler) (or a [`Toolchain`](super::Toolchain)) names
/// it; this describes it.
///
/// ```no_run
/// use kiln_cuda::Compiler;
/// use kiln_cuda::toolchain::IdentityOrigin;
/// let identity = Compiler::new()?.identity();
/// // From the second process on, the library is not even loaded:
/// assert_eq!(identity.origin(), IdentityOrigin::Memo);
/// println!("owners name nvrtc {}", identity.version());
/// # Ok::<(), kiln_cuda::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NvrtcIdentity {
    version: NvrtcVersion,
    origin: IdentityOrigin,
    located: Option<Located>,
    // How to load the library on the first compile, and where its memo lives.
    config: SearchConfig,
    memo: MemoDir,
}

impl NvrtcIdentity {
    /// The process's identity: [`NvrtcIdentity::resolve`] with the environment's
    /// search places and memo directory, learnt once.
    ///
    /// # Errors
    /// As [`NvrtcIdentity::resolve`].
    pub(crate) fn get() -> Result<&'static NvrtcIdentity, ToolchainError> {
        static PROCESS: OnceLock<NvrtcIdentity> = OnceLock::new();
        if let Some(identity) = PROCESS.get() {
            return Ok(identity);
        }
        let identity = Self::resolve(&SearchConfig::from_env(), MemoDir::process())?;
        Ok(PROCESS.get_or_init(|| identity))
    }

    /// The identity of the NVRTC `config` locates: from `memo` when it holds the
    /// release of exactly the library files found, else by loading the library
    /// (which memoizes it).
    ///
    /// # Errors
    /// [`ToolchainError::NvrtcNotFound`] when `config` locates no NVRTC library; the
    /// errors of loading it ([`ToolchainError::Nvrtc`]) when no memo names its release.
    pub(crate) fn resolve(
        config: &SearchConfig,
        memo: &MemoDir,
    ) -> Result<NvrtcIdentity, ToolchainError> {
        if let Some(identity) = Self::from_memo(config, memo) {
            return Ok(identity);
        }
        let nvrtc = Nvrtc::load_with(config, memo)?;
        Ok(NvrtcIdentity {
            version: nvrtc.version().clone(),
            origin: IdentityOrigin::Loaded,
            located: Some(nvrtc.location().clone()),
            config: config.clone(),
            memo: memo.clone(),
        })
    }

    /// An identity for a process without NVRTC: owners name `version`, the release
    /// the images were built with, and nothing can be compiled.
    pub(crate) fn recorded(version: NvrtcVersion) -> NvrtcIdentity {
        NvrtcIdentity {
            version,
            origin: IdentityOrigin::Recorded,
            located: None,
            config: SearchConfig::empty(),
            memo: MemoDir::disabled(),
        }
    }

    fn from_memo(config: &SearchConfig, memo: &MemoDir) -> Option<NvrtcIdentity> {
        memo.dir()?;
        let located = locate_nvrtc_file(config)?;
        let files = LibraryFiles::stamp(&located.path)?;
        let version = files.remembered(memo, None)?;
        // A file of another CUDA major than the one searched for (`KILN_NVRTC` in a
        // search for another major): the full search passes over it.
        if config
            .cuda_major
            .is_some_and(|major| major != version.major)
        {
            return None;
        }
        Some(NvrtcIdentity {
            version,
            origin: IdentityOrigin::Memo,
            located: Some(located),
            config: config.clone(),
            memo: memo.clone(),
        })
    }

    /// The exact version owners name.
    pub fn version(&self) -> &NvrtcVersion {
        &self.version
    }

    /// How it was learnt.
    pub fn origin(&self) -> IdentityOrigin {
        self.origin
    }

    /// Where the library is; `None` for a recorded identity.
    pub fn location(&self) -> Option<&Located> {
        self.located.as_ref()
    }

    /// The library this identity names, loaded (on first use) and checked to be it.
    pub(crate) fn load(&self) -> Result<&'static Nvrtc, ToolchainError> {
        let Some(located) = &self.located else {
            return Err(ToolchainError::NoNvrtc {
                version: self.version.release.clone(),
            });
        };
        let nvrtc = Nvrtc::load_located(located.clone(), &self.memo)?;
        let same_file = same_file(&nvrtc.location().path, &located.path);
        if !same_file || nvrtc.version() != &self.version {
            return Err(self.changed(nvrtc, &nvrtc.version().release));
        }
        Ok(nvrtc)
    }

    /// The error for a compile whose compiler is not this identity's (`found` is
    /// the release it reports); drops the memo that led here.
    pub(crate) fn changed(&self, nvrtc: &Nvrtc, found: &str) -> ToolchainError {
        if let Some(located) = &self.located {
            if let Some(subject) = canonical_file(&located.path) {
                self.memo.remove(NVRTC_MEMO, &subject);
            }
            if let Some(subject) = canonical_file(&nvrtc.location().path) {
                self.memo.remove(NVRTC_MEMO, &subject);
            }
        }
        let path = |l: Option<&Located>| {
            l.map(|l| l.path.display().to_string())
                .unwrap_or_else(|| "no library".to_owned())
        };
        ToolchainError::NvrtcIdentityChanged {
            owner: self.version.release.clone(),
            owner_library: path(self.located.as_ref()),
            found: found.to_owned(),
            found_library: path(Some(nvrtc.location())),
        }
    }
}

/// Interns identities for [`Compiler`](super::Compiler), which is `Copy` and holds a
/// `&'static` one. One allocation per distinct identity for the life of the process.
pub(crate) fn intern(identity: NvrtcIdentity) -> &'static NvrtcIdentity {
    static INTERNED: Mutex<Vec<&'static NvrtcIdentity>> = Mutex::new(Vec::new());
    let mut all = INTERNED.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(found) = all.iter().find(|known| ***known == identity) {
        return found;
    }
    let leaked: &'static NvrtcIdentity = Box::leak(Box::new(identity));
    all.push(leaked);
    leaked
}

fn same_file(a: &Path, b: &Path) -> bool {
    match (canonical_file(a), canonical_file(b)) {
        (Some(a), Some(b)) => a == b,
        _ => a == b,
    }
}
